import Dispatch
import XCTest
import Flux

// VueFlux's DispatcherTests drove its internal Dispatcher; here the same
// scenarios go through the public Store that is built on it. A store's
// commit stands for a subscriber, store deinit for unsubscribing.
final class DispatcherTests: XCTestCase {
    func testSubscribeAndDispatch() {
        var value = 0

        let store = callbackStore {
            value += 1
        }

        XCTAssertEqual(value, 0)

        store.actions.dispatch(action: ())

        XCTAssertEqual(value, 1)

        store.actions.dispatch(action: ())

        XCTAssertEqual(value, 2)
    }

    // Beyond VueFlux's suite: subscribers are called in subscription order,
    // so a shared dispatch commits to stores in the order they were made.
    func testSharedDispatchCommitsInSubscriptionOrder() {
        var log = [String]()

        let first = callbackStore { log.append("first") }
        let second = callbackStore { log.append("second") }
        let third = callbackStore { log.append("third") }

        Store<CallbackState>.actions.dispatch(action: ())

        withExtendedLifetime((first, second, third)) {
            XCTAssertEqual(log, ["first", "second", "third"])
        }
    }

    func testUnsubscribeAndDispatch() {
        var value = 0

        var store: Store<CallbackState>? = callbackStore {
            value += 1
        }
        let actions = store!.actions

        store = nil

        XCTAssertEqual(value, 0)

        actions.dispatch(action: ())
        Store<CallbackState>.actions.dispatch(action: ())

        XCTAssertEqual(value, 0)

        let newStore = callbackStore {
            value += 1
        }

        Store<CallbackState>.actions.dispatch(action: ())

        XCTAssertEqual(value, 1)
        withExtendedLifetime(newStore) {}
    }

    func testRecursiveDispatch() {
        var flag = false
        var actions: Actions<CallbackState>?

        let store = callbackStore {
            if !flag {
                flag = true
                actions?.dispatch(action: ())
            }
        }
        actions = store.actions

        store.actions.dispatch(action: ())

        XCTAssertEqual(flag, true)
    }

    func testRecursiveSubscribe() {
        var flag = false
        var subscribed = [Store<CallbackState>]()

        let store = callbackStore {
            flag = true
            subscribed.append(callbackStore {})
        }

        Store<CallbackState>.actions.dispatch(action: ())

        XCTAssertEqual(flag, true)
        XCTAssertEqual(subscribed.count, 1)
        withExtendedLifetime(store) {}
    }

    // Beyond VueFlux's suite (whose stores all commit immediately): a shared
    // dispatch reaches every live store of the State type, each on its own
    // executor.
    func testSharedDispatchCommitsToEachStoreOnItsOwnExecutor() {
        let queue = DispatchQueue(label: "testSharedDispatchCommitsToEachStoreOnItsOwnExecutor")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 1)
        queue.suspend()
        var onQueue = false

        let immediate = Store<TestState>(state: .init(), mutations: .init(), executor: .immediate)
        let queued = Store<TestState>(
            state: .init { _ in onQueue = DispatchQueue.getSpecific(key: key) == 1 }, mutations: .init(),
            executor: .queue(queue))

        Store<TestState>.actions.check()

        XCTAssertEqual(immediate.computed.value, 1)
        XCTAssertEqual(queued.computed.value, 0)

        queue.resume()
        queue.sync {}

        XCTAssertEqual(queued.computed.value, 1)
        XCTAssertTrue(onQueue)
    }
}

// VueFlux's DispatcherContextTests: every `Store<S>.actions` reaches the one
// shared dispatcher of S, including stores created after it was taken.
final class DispatcherContextTests: XCTestCase {
    func testDispacherInstance() {
        var value = 0

        let dispatcher1 = Store<CallbackState>.actions

        let store1 = callbackStore {
            value += 1
        }

        let dispatcher2 = Store<CallbackState>.actions

        dispatcher2.dispatch(action: ())

        XCTAssertEqual(value, 1)

        let store2 = callbackStore {
            value += 1
        }

        dispatcher1.dispatch(action: ())

        XCTAssertEqual(value, 3)
        withExtendedLifetime((store1, store2)) {}
    }
}
