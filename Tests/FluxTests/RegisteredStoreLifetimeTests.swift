import Dispatch
import Flux
import XCTest

/// Registered stores: what a lookup sees while another thread builds one,
/// and what keeps one alive past `removeAllStores()`.
final class RegisteredStoreLifetimeTests: XCTestCase {
    enum Action: Sendable { case set(Int) }
    final class Owner: Sendable {}
    final class Users: RegisteredStore {
        let users: ReduceStore<Int, Action>
        init(dispatcher: Dispatcher<Action>) {
            users = ReduceStore(dispatcher: dispatcher, initialState: 0) { _, action in
                switch action {
                case .set(let n): return n
                }
            }
        }
        var dispatchToken: DispatchToken { users.dispatchToken }
    }

    // removeAllStores' doc: a listener whose owner outlives the call keeps
    // the store it captured (and the dispatcher); another call once the
    // owner has gone frees them.
    func testStoreCapturedByAnOwnerBoundListenerGoesAtTheNextRemoveAllStoresAfterItsOwner() {
        weak var weakDispatcher: Dispatcher<Action>?
        weak var weakStore: Users?
        var owner: Owner? = Owner()
        do {
            let dispatcher = Dispatcher<Action>()
            let users = dispatcher.registerStore(Users.self)
            weakDispatcher = dispatcher
            weakStore = users
            users.users.addListener(owner: owner!) { _ in _ = users.users.state }
            dispatcher.removeAllStores()
        }
        XCTAssertNotNil(weakStore, "the live owner's listener holds its store")
        XCTAssertNotNil(weakDispatcher, "which holds its dispatcher")
        owner = nil
        weakDispatcher?.removeAllStores()
        XCTAssertNil(weakStore)
        XCTAssertNil(weakDispatcher)
    }

    final class Slow: RegisteredStore {
        static let started = DispatchSemaphore(value: 0)
        static let proceed = DispatchSemaphore(value: 0)
        let token: DispatchToken
        init(dispatcher: Dispatcher<Action>) {
            Self.started.signal()
            Self.proceed.wait()
            token = dispatcher.register { _ in }
        }
        var dispatchToken: DispatchToken { token }
    }

    // store(_:)'s doc: nil while another thread's registerStore is still
    // creating the store; registerStore waits and hands back that instance.
    func testLookupWhileAnotherThreadBuildsTheStore() {
        let dispatcher = Dispatcher<Action>()
        let got = AtomicReference<[ObjectIdentifier]>([])
        let done = DispatchGroup()
        for _ in 0..<2 {
            done.enter()
            Thread {
                let store = dispatcher.registerStore(Slow.self)
                got.modify { $0.append(ObjectIdentifier(store)) }
                done.leave()
            }.start()
        }
        XCTAssertEqual(Slow.started.wait(timeout: .now() + 10), .success)
        XCTAssertNil(dispatcher.store(Slow.self))
        XCTAssertTrue(dispatcher.stores.isEmpty)
        Slow.proceed.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(Slow.started.wait(timeout: .now()), .timedOut, "created once")
        let store = dispatcher.store(Slow.self)
        XCTAssertEqual(got.value, [ObjectIdentifier(store!), ObjectIdentifier(store!)])
        dispatcher.removeAllStores()
    }
}
