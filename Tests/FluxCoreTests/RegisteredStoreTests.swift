import Synchronization
import Testing
@_spi(Engine) @testable import FluxCore

/// JBFlux's store model (DESIGN.md 11): store classes registered with the
/// dispatcher, listeners bound to their owner's life, changes that carry an
/// error.
@Suite struct RegisteredStoreTests {
    enum Action: Sendable {
        case refreshed(Result<String, Failure>)
        case other
    }
    struct Failure: Error, Equatable { let reason: String }

    /// JBFlux's example: the current user, refreshed by an action that may carry an error.
    final class CurrentUserStore: RegisteredStore {
        let users: ReduceStore<String?, Action>
        init(dispatcher: Dispatcher<Action>) {
            users = ReduceStore(dispatcher: dispatcher, initialState: nil) { user, action in
                guard case .refreshed(let result) = action else { return user }
                switch result {
                case .success(let name): return name
                case .failure(let failure): throw failure
                }
            }
        }
        var dispatchToken: DispatchToken { users.dispatchToken }
    }

    /// A store whose init registers the store it depends on.
    final class MessagesStore: RegisteredStore {
        let current: CurrentUserStore
        let log: FluxStore<Action>
        let seen = Log()
        init(dispatcher: Dispatcher<Action>) {
            current = dispatcher.registerStore(CurrentUserStore.self)
            let current = current, seen = seen
            log = FluxStore(dispatcher: dispatcher) { [unowned dispatcher] _, _ in
                try dispatcher.waitFor([current.dispatchToken])
                seen.append(current.users.state ?? "nobody")
            }
        }
        var dispatchToken: DispatchToken { log.dispatchToken }
    }

    final class Owner: Sendable {
        let log = Log()
    }

    @Test func aClassIsCreatedOnceAndHandedBackByClass() throws {
        let d = Dispatcher<Action>()
        #expect(d.store(CurrentUserStore.self) == nil)
        let first = d.registerStore(CurrentUserStore.self)
        #expect(d.registerStore(CurrentUserStore.self) === first)
        #expect(d.store(CurrentUserStore.self) === first)
        let messages = d.registerStore(MessagesStore.self)
        #expect(messages.current === first, "a dependency registered from an init is the same instance")
        #expect(d.stores.map { ObjectIdentifier($0) } == [ObjectIdentifier(first), ObjectIdentifier(messages)])
        try d.dispatch(.refreshed(.success("ada")))
        #expect(messages.seen.all == ["ada"], "waitFor on a registered store's token")
        d.removeAllStores()
    }

    @Test func eachDispatcherHasItsOwn() {
        let a = Dispatcher<Action>(), b = Dispatcher<Action>()
        #expect(a.registerStore(CurrentUserStore.self) !== b.registerStore(CurrentUserStore.self))
        a.removeAllStores()
        b.removeAllStores()
    }

    @Test func removeAllStoresFreesTheStoresAndTheDispatcher() {
        weak var weakDispatcher: Dispatcher<Action>?
        weak var weakStore: CurrentUserStore?
        do {
            let d = Dispatcher<Action>()
            weakDispatcher = d
            weakStore = d.registerStore(CurrentUserStore.self)
            d.removeAllStores()
            #expect(d.stores.isEmpty && d.store(CurrentUserStore.self) == nil)
        }
        #expect(weakStore == nil)
        #expect(weakDispatcher == nil)
    }

    /// Counts its instances; used by one test only (tests run in parallel).
    final class Counted: RegisteredStore {
        static let made = Atomic<Int>(0)
        let token: DispatchToken
        init(dispatcher: Dispatcher<Action>) {
            Self.made.add(1, ordering: .relaxed)
            pause(milliseconds: 1)  // widen the window for the other thread
            token = dispatcher.register { _ in }
        }
        var dispatchToken: DispatchToken { token }
    }

    @Test func twoThreadsRegisteringAtOnceGetOneInstance() {
        for _ in 0..<50 {
            let d = Dispatcher<Action>()
            let before = Counted.made.load(ordering: .relaxed)
            let got = Log()
            let threads = (0..<2).map { _ in
                Thread { got.append("\(ObjectIdentifier(d.registerStore(Counted.self)))") }
            }
            threads.forEach { $0.join() }
            #expect(got.all.count == 2 && Set(got.all).count == 1)
            #expect(Counted.made.load(ordering: .relaxed) - before == 1)
            d.removeAllStores()
        }
    }

    @Test func registeredDuringADispatchItTakesPartFromTheNext() throws {
        let d = Dispatcher<Action>()
        let registered = Box<CurrentUserStore?>(nil)
        d.register { [unowned d] _ in
            if registered.value == nil { registered.value = d.registerStore(CurrentUserStore.self) }
        }
        try d.dispatch(.refreshed(.success("first")))
        #expect(registered.value?.users.state == nil)
        try d.dispatch(.refreshed(.success("second")))
        #expect(registered.value?.users.state == "second")
        d.removeAllStores()
    }

    @Test func anOwnerBoundListenerDoesNotKeepItsOwnerAndStopsWhenItGoes() throws {
        let d = Dispatcher<Action>()
        let store = d.registerStore(CurrentUserStore.self)
        let heard = Log()
        weak var weakOwner: Owner?
        do {
            let owner = Owner()
            weakOwner = owner
            store.users.addListener(owner: owner) { owner in
                owner.log.append("refresh")
                heard.append("ran")
            }
            try d.dispatch(.refreshed(.success("a")))
            #expect(owner.log.all == ["refresh"])
        }
        #expect(weakOwner == nil, "the store held the owner weakly")
        try d.dispatch(.refreshed(.success("b")))
        #expect(heard.all == ["ran"], "gone: the listener never runs again")
        #expect(store.users.core.listenerCount == 0, "and it was removed")
        d.removeAllStores()
    }

    @Test func anOwnerCollectedDuringAnEmitIsSkippedFromThenOn() throws {
        let d = Dispatcher<Action>()
        let store = d.registerStore(CurrentUserStore.self)
        let heard = Log()
        let holder = Box<Owner?>(Owner())
        // The first listener lets go of the owner the second is bound to.
        store.users.addListener { holder.value = nil }
        store.users.addListener(owner: holder.value!) { _ in heard.append("bound") }
        try d.dispatch(.refreshed(.success("a")))
        try d.dispatch(.refreshed(.success("b")))
        #expect(heard.all.isEmpty)
        d.removeAllStores()
    }

    @Test func aChangeCanCarryAnError() throws {
        let d = Dispatcher<Action>()
        let users = ReduceStore<String?, Action>(dispatcher: d, initialState: "ada") { _, _ in nil }
        let seen = Box<[String]>([])
        let store = FluxStore<Action>(dispatcher: d) { store, action in
            if case .refreshed(.failure(let failure)) = action { try store.emitChange(error: failure) }
        }
        store.addListener { seen.value.append(store.error.map { "\($0)" } ?? "no error") }
        #expect(store.error == nil, "outside an emit: nil")
        try d.dispatch(.refreshed(.failure(Failure(reason: "offline"))))
        #expect(
            seen.value == ["\(Failure(reason: "offline"))"], "listeners ran though nothing changed, and saw the error")
        #expect(store.error == nil, "after the emit: nil again")
        try d.dispatch(.other)
        #expect(seen.value.count == 1)
        #expect(fluxCode { try store.emitChange(error: Failure(reason: "x")) } == .notDispatching)
        #expect(store.error == nil, "a refused emit keeps no error")
        _ = users
    }

    @Test func aReduceStoreCanEmitAnErrorOnAnUnchangedState() throws {
        let d = Dispatcher<Action>()
        let box = Box<ReduceStore<Int, Action>?>(nil)
        let store = ReduceStore<Int, Action>(dispatcher: d, initialState: 0) { n, action in
            if case .refreshed(.failure(let failure)) = action { try box.value!.emitChange(error: failure) }
            return n
        }
        box.value = store
        let seen = Log()
        store.addListener { seen.append(store.error == nil ? "none" : "error") }
        try d.dispatch(.refreshed(.failure(Failure(reason: "x"))))
        try d.dispatch(.other)
        #expect(seen.all == ["error"])
        box.value = nil
    }
}
