import Synchronization
import Testing
@_spi(Engine) @testable import FluxCore

/// Facebook's FluxStoreGroup-test.js over the Swift `StoreGroup`.
@Suite struct StoreGroupTests {
    /// SimpleStore: emits a change on every payload.
    static func simpleStore(_ d: Dispatcher<String>) -> FluxStore<String> {
        FluxStore(dispatcher: d) { store, _ in try store.emitChange() }
    }

    @Test("should register a callback with the dispatcher") func registers() throws {
        let d = Dispatcher<String>()
        let a = Self.simpleStore(d), b = Self.simpleStore(d)
        let calls = Box(0)
        let group = try StoreGroup([a, b]) { calls.value += 1 }
        try d.dispatch("foo")
        #expect(calls.value == 1)
        group.release()
    }

    @Test("should wait for the store dependencies") func waitsForStores() throws {
        let d = Dispatcher<String>()
        let group = Box<StoreGroup?>(nil)
        let seen = Box<[Bool]>([])
        // The group registers first; it must still run after both stores.
        let a = Box<FluxStore<String>?>(nil), b = Box<FluxStore<String>?>(nil)
        a.value = Self.simpleStore(d)
        b.value = Self.simpleStore(d)
        group.value = try StoreGroup([a.value!, b.value!]) {
            seen.value = [try a.value!.hasChanged(), try b.value!.hasChanged()]
        }
        try d.dispatch("foo")
        #expect(seen.value == [true, true])
    }

    @Test("should not run the callback after being released") func notAfterRelease() throws {
        let d = Dispatcher<String>()
        let a = Self.simpleStore(d), b = Self.simpleStore(d)
        let calls = Box(0)
        let group = try StoreGroup([a, b]) { calls.value += 1 }
        group.release()
        try d.dispatch("foo")
        #expect(calls.value == 0)
    }

    @Test("should have at least one store") func atLeastOneStore() {
        #expect(fluxCode { _ = try StoreGroup([any DispatchingStore<String>]()) {} } == .invalidArgument)
    }

    @Test("should make sure dispatchers are uniform in DEV") func uniformDispatchers() {
        let d = Dispatcher<String>()
        let a = Self.simpleStore(d)
        let c = Self.simpleStore(Dispatcher())
        #expect(fluxCode { _ = try StoreGroup([a, c]) {} } == .invalidArgument)
    }

    /// Tokens are public values, so a callback registered before the group
    /// may wait for it: the group must still run after its stores.
    @Test func aWaitForTheGroupRunsItsStoresFirst() throws {
        let d = Dispatcher<Int>()
        let groupToken = Box(DispatchToken(rawValue: 0))
        let waited = Box<[Bool]>([])
        let early = d.register { [unowned d] _ in
            try d.waitFor([groupToken.value])
            waited.value.append(true)
        }
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
        let seen = Box<[Int]>([])
        let group = try StoreGroup([store]) { seen.value.append(store.state) }
        // Nothing registered in between: the group's token follows the store's.
        groupToken.value = DispatchToken(rawValue: store.dispatchToken.rawValue + 1)
        try d.dispatch(5)
        #expect(waited.value == [true])
        #expect(seen.value == [5], "the group saw its store's new state")
        group.release()
        try d.unregister(early)
    }

    @Test func aGroupRunsOncePerDispatchAfterItsStoresEvenWhenNothingChanged() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in
            log.append("reduce")
            return n + p
        }
        let group = try StoreGroup([store]) { log.append("group \(store.state)") }
        try d.dispatch(0)
        try d.dispatch(2)
        #expect(log.all == ["reduce", "group 0", "reduce", "group 2"])
        group.release()
    }

    @Test("a group keeps its stores alive: dropping a store breaks no dispatch")
    func aGroupKeepsItsStoresAlive() throws {
        let d = Dispatcher<Int>()
        var store: ReduceStore<Int, Int>? = ReduceStore(dispatcher: d, initialState: 0) { n, p in n + p }
        weak let kept = store
        let calls = Box(0)
        let group = try StoreGroup([store!]) { calls.value += 1 }
        store = nil
        #expect(kept != nil, "the group holds its store")
        try d.dispatch(1)
        try d.dispatch(2)
        #expect(calls.value == 2)
        #expect(kept?.state == 3)
        group.release()
        #expect(kept == nil, "released with the group, the store goes (and unregisters)")
        try d.dispatch(1)
        #expect(calls.value == 2)
        group.release()  // again: nothing
    }

    @Test("a group that goes away lets go of its stores")
    func aGroupThatGoesAwayLetsGoOfItsStores() throws {
        let d = Dispatcher<Int>()
        weak var kept: ReduceStore<Int, Int>?
        do {
            let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
            kept = store
            _ = try StoreGroup([store]) {}
        }
        #expect(kept == nil)
        try d.dispatch(1)
    }

    /// A group let go of on another thread while a dispatch runs: that
    /// dispatch may be starting the group's callback, whose wait must still
    /// find the stores registered (they went with the group at once, and a
    /// store that goes unregisters: the dispatch failed with "token N was
    /// unregistered during this dispatch"). A race, so a stream of them.
    @Test("a group let go of on another thread never fails a running dispatch", .timeLimit(.minutes(1)))
    func aGroupLetGoOfOnAnotherThreadNeverFailsARunningDispatch() throws {
        let d = Dispatcher<Int>()
        let stop = Atomic<Bool>(false)
        let churn = Thread {
            while !stop.load(ordering: .relaxed) {
                let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
                _ = try? StoreGroup([store]) {}
            }
        }
        defer {
            stop.store(true, ordering: .relaxed)
            churn.join()
        }
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(3) {
            try d.dispatch(1)
        }
    }
}

extension StoreGroupTests {
    // release() ends the group's registration, and an unregistered callback
    // is not called after that returns by a dispatch on this thread
    // (Dispatcher.unregister). Released by a listener of its store in the
    // dispatch that is about to run it, the group must not run: neither
    // when its callback has yet to start, nor when it already started and
    // is waiting for that very store (a callback waiting for the group's
    // token started it first). The C group holds the same promise.
    @Test(
        "a group released by its store's listener is not run by that dispatch",
        arguments: [false, true])
    func aGroupReleasedByItsStoresListenerDoesNotRunInThatDispatch(groupAlreadyWaiting: Bool) throws {
        let d = Dispatcher<Int>()
        let groupToken = Box(DispatchToken(rawValue: 0))
        if groupAlreadyWaiting {
            d.register { [unowned d] p in if p == 1 { try d.waitFor([groupToken.value]) } }
        }
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
        let calls = Box(0)
        let group = try StoreGroup([store]) { calls.value += 1 }
        // Nothing registered in between: the group's token follows the store's.
        groupToken.value = DispatchToken(rawValue: store.dispatchToken.rawValue + 1)
        store.addListener { group.release() }
        try d.dispatch(1)
        #expect(calls.value == 0, "released before it ran, the group did not run")
        #expect(store.state == 1)
        try d.dispatch(2)
        #expect(calls.value == 0)
    }
}

extension StoreGroupTests {
    // A group is a registration: made during a dispatch, it first runs in
    // the next one (Dispatcher.register), and then after its stores.
    @Test func aGroupMadeDuringADispatchFirstRunsInTheNext() throws {
        let d = Dispatcher<Int>()
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
        let log = Log()
        let group = Box<StoreGroup?>(nil)
        d.register { p in
            if group.value == nil { group.value = try StoreGroup([store]) { log.append("group \(store.state)") } }
            log.append("dispatch \(p)")
        }
        try d.dispatch(1)
        #expect(log.all == ["dispatch 1"])
        try d.dispatch(2)
        #expect(log.all == ["dispatch 1", "dispatch 2", "group 3"])
        group.value?.release()
    }
}
