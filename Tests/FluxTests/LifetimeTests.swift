import Foundation
import XCTest
import Flux

final class CounterState: State {
    typealias Action = Int
    typealias Mutations = CounterMutations
    var count = 0
}

struct CounterMutations: Mutations {
    typealias State = CounterState

    func commit(action: Int, state: CounterState) {
        state.count += action
    }
}

final class CounterStore: Store<CounterState>, @unchecked Sendable {
    init(executor: Executor = .immediate) {
        super.init(state: .init(), mutations: .init(), executor: executor)
    }
}

// What Linux changes (scoped observing without associated objects) and what
// VueFlux's suite leaves implicit about lifetimes.
final class LifetimeTests: XCTestCase {
    func testStoreCommitsStopWhenItDeinitializes() {
        var store: CounterStore? = CounterStore()
        weak let weakStore = store
        let computed = store!.computed
        let actions = store!.actions

        actions.dispatch(action: 1)
        Store<CounterState>.actions.dispatch(action: 10)
        XCTAssertEqual(computed.state.count, 11)

        store = nil
        XCTAssertNil(weakStore)

        actions.dispatch(action: 100)
        Store<CounterState>.actions.dispatch(action: 1000)
        XCTAssertEqual(computed.state.count, 11)
    }

    func testCommitsQueuedOnMainThreadStopWhenStoreDeinitializes() {
        var store: CounterStore? = CounterStore(executor: .mainThread)
        let computed = store!.computed
        let actions = store!.actions

        // From another thread, the commits go to the main queue, which this
        // (main) thread drains only while waiting below.
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            actions.dispatch(action: 1)
            actions.dispatch(action: 1)
        }
        group.wait()
        store = nil

        let expectation = self.expectation(description: "main queue drained")
        DispatchQueue.main.async { expectation.fulfill() }
        waitForExpectations(timeout: 2) { _ in
            XCTAssertEqual(computed.state.count, 0)
        }
    }

    // VueFlux's store deinit cancels its commits, which lets go of the
    // mutations and the state: they go with the store, not when its
    // executor gets to the commits it had queued (which are dropped).
    func testStoreLetsGoOfItsStateAtDeinitWithCommitsQueued() {
        final class Captured {
            let onDeinit: () -> Void
            init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
            deinit { onDeinit() }
        }
        let queue = DispatchQueue(label: "testStoreLetsGoOfItsStateAtDeinitWithCommitsQueued")
        queue.suspend()
        var gone = false
        var committed = 0
        var captured: Captured? = .init { gone = true }
        var store: Store<TestState>? = .init(
            state: .init { [captured] _ in withExtendedLifetime(captured) { committed += 1 } },
            mutations: .init(), executor: .queue(queue))
        captured = nil
        store!.actions.check()
        Store<TestState>.actions.check()

        store = nil
        XCTAssertTrue(gone)

        queue.resume()
        queue.sync {}
        XCTAssertEqual(committed, 0)
    }

    func testConcurrentDispatchesAreSerialized() {
        let store = CounterStore()

        // Two threads at once, one through the store's own actions, one
        // through the shared ones. The mutation's `count += action` is not
        // atomic: only dispatches serialized across both keep every increment
        // (and ThreadSanitizer, in `make check-thread`, sees any overlap).
        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            for _ in 0..<20_000 {
                if thread == 0 {
                    store.actions.dispatch(action: 1)
                } else {
                    Store<CounterState>.actions.dispatch(action: 1)
                }
            }
        }

        XCTAssertEqual(store.computed.state.count, 40_000)
    }

    // The dispatch lock is recursive: a commit's own nested dispatch must
    // not let it go, or another thread's commit runs before the outer
    // commit ends.
    func testRecursiveDispatchKeepsOtherThreadsWaitingUntilTheOuterCommitEnds() {
        let log = AtomicReference([String]())
        let calls = AtomicReference(0)
        let other = DispatchGroup()

        let store = callbackStore {
            let call = calls.modify { calls -> Int in
                calls += 1
                return calls
            }
            switch call {
            case 1:
                log.modify { $0.append("outer begins") }
                Store<CallbackState>.actions.dispatch(action: ())
                DispatchQueue.global().async(group: other) {
                    Store<CallbackState>.actions.dispatch(action: ())
                }
                // Time for the other thread to reach the lock.
                Thread.sleep(forTimeInterval: 0.2)
                log.modify { $0.append("outer ends") }
            case 2:
                log.modify { $0.append("inner") }
            default:
                log.modify { $0.append("other") }
            }
        }

        store.actions.dispatch(action: ())
        other.wait()

        XCTAssertEqual(log.value, ["outer begins", "inner", "outer ends", "other"])
    }

    func testStoreCreatedDuringSharedDispatchMissesThatAction() {
        var created = [Store<CallbackState>]()
        var lateCommits = 0

        let store = callbackStore {
            if created.isEmpty {
                created.append(callbackStore { lateCommits += 1 })
            }
        }

        Store<CallbackState>.actions.dispatch(action: ())
        XCTAssertEqual(lateCommits, 0)

        Store<CallbackState>.actions.dispatch(action: ())
        XCTAssertEqual(lateCommits, 1)
        withExtendedLifetime(store) {}
    }

    func testStoreDoesNotReachStoresOfAnotherStateType() {
        let counter = CounterStore()
        let test = Store<TestState>(state: .init(), mutations: .init(), executor: .immediate)

        Store<CounterState>.actions.dispatch(action: 5)

        XCTAssertEqual(counter.computed.state.count, 5)
        XCTAssertEqual(test.computed.value, 0)
    }

    func testScopedObservingDoesNotRetainObject() {
        final class Object {}
        let sink = Sink<Int>()
        var object: Object? = .init()
        weak let weakObject = object
        var value = 0

        let disposable = sink.signal.observe(duringScopeOf: object!) { int in
            value = int
        }
        sink.send(value: 1)
        object = nil

        XCTAssertNil(weakObject)
        sink.send(value: 2)
        XCTAssertEqual(value, 1)
        XCTAssertTrue(disposable.isDisposed)
    }

    func testBinderDoesNotRetainTarget() {
        final class Object {
            var value = 0
        }
        let variable = Variable(1)
        var object: Object? = .init()
        weak let weakObject = object

        let disposable = variable.signal.bind(to: object!, \.value)
        XCTAssertEqual(object?.value, 1)
        object = nil

        XCTAssertNil(weakObject)
        variable.value = 2
        XCTAssertTrue(disposable.isDisposed)
    }

    func testScopeOfNewObjectAtReusedAddressIsFresh() {
        final class Object {}
        let sink = Sink<Int>()
        var calls = 0

        // Many short-lived objects: addresses are reused, and each new object
        // must start with a scope of its own, not its dead predecessor's.
        for _ in 1...200 {
            let object = Object()
            sink.signal.observe(duringScopeOf: object) { _ in calls += 1 }
            sink.send(value: 0)
        }

        XCTAssertEqual(calls, 200)
    }
}
