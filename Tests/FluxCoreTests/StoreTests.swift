import Testing
@_spi(Engine) @testable import FluxCore

/// Facebook's FluxStore-test.js over the Swift `FluxStore`.
@Suite struct StoreTests {
    enum Action: Sendable { case willChange, ignore }

    /// TestFluxStore: emits a change for `.willChange` only.
    static func testStore(_ d: Dispatcher<Action>, log: Log? = nil) -> FluxStore<Action> {
        FluxStore(dispatcher: d) { store, action in
            log?.append("dispatch")
            if case .willChange = action { try store.emitChange() }
        }
    }

    @Test("registers a callback with the dispatcher") func registersACallback() throws {
        let d = Dispatcher<Action>()
        let log = Log()
        let store = Self.testStore(d, log: log)
        let next = d.register { _ in }
        #expect(next.rawValue == store.dispatchToken.rawValue + 1)
        try d.dispatch(.ignore)
        #expect(log.all == ["dispatch"])
    }

    @Test("requires that subclasses override the __onDispatch() method")
    func aThrowingOnDispatchFailsTheDispatch() throws {
        // Swift's counterpart: onDispatch is required by the initializer; one
        // that throws fails the dispatch with its own error.
        let d = Dispatcher<Action>()
        let store = FluxStore<Action>(dispatcher: d) { _, _ in throw Boom(id: 1) }
        #expect(throws: Boom(id: 1)) { try d.dispatch(.ignore) }
        _ = store
    }

    @Test("throws when __emitChange() is invoked outside of a dispatch") func emitChangeOutside() {
        let store = Self.testStore(Dispatcher())
        #expect(fluxCode { try store.emitChange() } == .notDispatching)
    }

    @Test("throws when hasChanged() is invoked outside of a dispatch") func hasChangedOutside() {
        let store = Self.testStore(Dispatcher())
        #expect(fluxCode { _ = try store.hasChanged() } == .notDispatching)
    }

    @Test("emits an event on state change") func emitsOnChange() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        let log = Log()
        store.addListener { log.append("change") }
        try d.dispatch(.willChange)
        #expect(log.all == ["change"])
        try d.dispatch(.ignore)
        #expect(log.all == ["change"])
    }

    @Test("exposes whether the state has changed during current dispatch") func exposesHasChanged() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        let seen = Box<[Bool]>([])
        d.register { [unowned d] _ in
            try d.waitFor([store.dispatchToken])
            seen.value.append(try store.hasChanged())
        }
        try d.dispatch(.willChange)
        try d.dispatch(.ignore)
        #expect(seen.value == [true, false])
    }

    @Test("exposes the dispatch token in a getter") func exposesToken() {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        #expect(store.dispatchToken.rawValue != 0)
        #expect(store.dispatcher === d)
    }

    @Test("wraps EventEmitter.addListener() with an addListener() method") func addListenerWraps() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        let log = Log()
        let sub = store.addListener { log.append("1") }
        #expect(sub.id == 1)
        try d.dispatch(.willChange)
        try sub.remove()
        try d.dispatch(.willChange)
        #expect(log.all == ["1"])
        #expect(fluxCode { try sub.remove() } == .unknownToken)
    }

    // MARK: - Listener rules (DESIGN.md section 6)

    @Test func aListenerRemovedByAnEarlierOneIsNotCalledAndOneAddedRunsFromTheNextEmit() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        let log = Log()
        let second = Box<Subscription?>(nil)
        let added = Box(false)
        store.addListener {
            log.append("first")
            try? second.value?.remove()
            if !added.value {
                added.value = true
                store.addListener { log.append("added") }
            }
        }
        second.value = store.addListener { log.append("second") }
        try d.dispatch(.willChange)
        #expect(log.all == ["first"])
        try d.dispatch(.willChange)
        #expect(log.all == ["first", "first", "added"])
    }

    @Test func aListenerThatDispatchesIsRefusedAndTheEmitGoesOn() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        let log = Log()
        store.addListener { [unowned d] in
            log.append("nested: \(fluxCode { try d.dispatch(.ignore) }.map(String.init(describing:)) ?? "none")")
        }
        store.addListener { log.append("second") }
        try d.dispatch(.willChange)
        #expect(log.all == ["nested: alreadyDispatching", "second"])
    }

    @Test func emitChangeFromAListenerIsRefused() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        let code = Box<FluxError.Code?>(nil)
        store.addListener { code.value = fluxCode { try store.emitChange() } }
        try d.dispatch(.willChange)
        #expect(code.value == .notDispatching)
    }

    // DESIGN.md 6: a handling that fails fails the dispatch like any
    // callback: no listener runs, even after an emitChange, the error
    // reaches the caller unchanged, and hasChanged then reports false.
    @Test func aHandlingThatThrowsAfterEmitChangeRunsNoListenerAndReportsNoChange() throws {
        let d = Dispatcher<Action>()
        let fail = Box(false)
        let watched = Box<FluxStore<Action>?>(nil)
        let seen = Box<[Bool]>([])
        // Registered first: it waits for the store, then asks what it did.
        d.register { [unowned d] _ in
            let store = watched.value!
            _ = try? d.waitFor([store.dispatchToken])
            seen.value.append(try store.hasChanged())
        }
        let store = FluxStore<Action>(dispatcher: d) { store, _ in
            try store.emitChange()
            if fail.value { throw Boom(id: 4) }
        }
        watched.value = store
        let log = Log()
        store.addListener { log.append("change") }
        try d.dispatch(.ignore)
        fail.value = true
        #expect(throws: Boom(id: 4)) { try d.dispatch(.ignore) }
        #expect(log.all == ["change"])
        #expect(seen.value == [true, false])
        fail.value = false
        try d.dispatch(.ignore)
        #expect(log.all == ["change", "change"])
        #expect(seen.value == [true, false, true])
        watched.value = nil
    }

    @Test func aStoreThatGoesAwayUnregisters() throws {
        let d = Dispatcher<Action>()
        let log = Log()
        var store: FluxStore<Action>? = Self.testStore(d, log: log)
        let token = store!.dispatchToken
        store = nil
        try d.dispatch(.ignore)
        #expect(log.all.isEmpty)
        #expect(fluxCode { try d.unregister(token) } == .unknownToken)
    }

    @Test("unregister of a store's or a group's token is refused, changing nothing")
    func unregisterOfAStoreOrGroupTokenIsRefused() throws {
        let d = Dispatcher<Action>()
        let log = Log()
        let store = Self.testStore(d, log: log)
        store.addListener { log.append("change") }
        let group = try StoreGroup([store]) { log.append("group") }
        // Nothing registered in between: the group's token follows the store's.
        let groupToken = DispatchToken(rawValue: store.dispatchToken.rawValue + 1)
        let next = d.register { _ in }
        #expect(next.rawValue == groupToken.rawValue + 1)

        #expect(fluxCode { try d.unregister(store.dispatchToken) } == .invalidArgument)
        #expect(fluxMessage { try d.unregister(store.dispatchToken) }?.contains("deallocated") == true)
        #expect(fluxCode { try d.unregister(groupToken) } == .invalidArgument)
        #expect(fluxMessage { try d.unregister(groupToken) }?.contains("release()") == true)
        // From inside a dispatch, where a removal would be deferred: the same.
        let inside = Box<[FluxError.Code?]>([])
        let probe = d.register { [unowned d] _ in
            inside.value = [
                fluxCode { try d.unregister(store.dispatchToken) }, fluxCode { try d.unregister(groupToken) },
            ]
        }
        try d.dispatch(.willChange)
        #expect(inside.value == [.invalidArgument, .invalidArgument])
        try d.unregister(probe)

        // Both still run, every dispatch.
        try d.dispatch(.willChange)
        #expect(log.all == ["dispatch", "change", "group", "dispatch", "change", "group"])
        group.release()
        try d.unregister(next)
    }
}

extension StoreTests {
    final class Captured: Sendable {}

    @Test("removing a listener lets go of what it captured at once")
    func removingAListenerLetsGoOfItsCapturesAtOnce() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        // Enough listeners that removed entries are kept a while, not moved out.
        let others = (0..<16).map { _ in store.addListener {} }
        weak var captured: Captured?
        let sub: Subscription
        do {
            let object = Captured()
            captured = object
            sub = store.addListener { _ = object }
        }
        #expect(captured != nil)
        try sub.remove()
        #expect(captured == nil, "its closure was dropped by remove()")
        try d.dispatch(.willChange)
        for other in others { try other.remove() }
    }
}

extension StoreTests {
    /// Calls its store as it goes, as a view model ending its other
    /// subscriptions in deinit would.
    final class CallsTheStoreOnDeinit: Sendable {
        let store: FluxStore<Action>
        init(_ store: FluxStore<Action>) { self.store = store }
        deinit { try? store.addListener {}.remove() }
    }

    final class Owner: Sendable {}

    /// Runs `body` on a thread; false when it did not return within 10 s
    /// (the thread is then left behind, stuck).
    static func returns(_ body: @escaping @Sendable () -> Void) -> Bool {
        let gate = Gate()
        let thread = Thread {
            body()
            gate.open()
        }
        guard gate.wait(seconds: 10) else { return false }
        thread.join()
        return true
    }

    // The emit used to drop its copies of a listener removed while it ran
    // (an owner-bound one whose owner went removes itself as it runs) with
    // the store's lock taken again: the captures' deinit, calling the store,
    // spun on that lock for good.
    @Test("an owner-bound listener whose owner went lets go of its captures outside the store's lock")
    func capturesOfAnOwnerBoundListenerGoOutsideTheLock() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        weak var captured: CallsTheStoreOnDeinit?
        do {
            let object = CallsTheStoreOnDeinit(store)
            captured = object
            let owner = Owner()
            store.addListener(owner: owner) { _ in _ = object }
        }
        #expect(Self.returns { try? d.dispatch(.willChange) }, "the dispatch returned")
        #expect(captured == nil, "the captures went with the owner's listener")
    }
}

/// A state that reads its store's state as it goes.
final class ReadsTheStateAsItGoes: Sendable, Equatable {
    let store = Box<ReduceStore<ReadsTheStateAsItGoes, Int>?>(nil)
    deinit { _ = store.value?.state }
    static func == (a: ReadsTheStateAsItGoes, b: ReadsTheStateAsItGoes) -> Bool { a === b }
}

extension StoreTests {
    // A replaced state goes with no lock held: its deinit may read `state`.
    @Test("a replaced state's deinit may read the store's state")
    func aReplacedStatesDeinitMayReadTheState() throws {
        let d = Dispatcher<Int>()
        weak var replaced: ReadsTheStateAsItGoes?
        let store: ReduceStore<ReadsTheStateAsItGoes, Int>
        do {
            let first = ReadsTheStateAsItGoes()
            replaced = first
            store = ReduceStore(dispatcher: d, initialState: first) { _, _ in ReadsTheStateAsItGoes() }
            first.store.value = store
        }
        #expect(Self.returns { try? d.dispatch(1) }, "the dispatch returned")
        #expect(replaced == nil)
        withExtendedLifetime(store) {}
    }
}

@Suite struct StoreThreadTests {
    // The sweep of gone owners runs in every dispatch and every addListener:
    // both at once, with owners going and listeners removed by hand on the
    // other thread, must remove each listener exactly once.
    @Test func ownerBoundListenersComeAndGoOnAnotherThreadDuringDispatches() throws {
        let d = Dispatcher<Int>()
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
        let stop = Gate()
        let kept = Box<[StoreTests.Owner]>([])
        let other = Thread {
            for i in 0..<2_000 {
                let owner = StoreTests.Owner()
                let sub = store.addListener(owner: owner) { _ in }
                if i % 3 == 0 { try? sub.remove() }
                if i % 50 == 0 { kept.value.append(owner) }  // these stay
            }
            stop.open()
        }
        repeat { try d.dispatch(1) } while !stop.wait(seconds: 0)
        other.join()
        try d.dispatch(1)
        // Of the 40 kept owners, those removed by hand (i % 150 == 0) are gone.
        #expect(store.core.listenerCount == 40 - 14)
        #expect(store.ownerCount == 40 - 14)
        withExtendedLifetime(kept) {}
    }

    @Test func listenersAddedAndRemovedFromAnotherThreadDuringAnEmit() throws {
        let d = Dispatcher<Int>()
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
        let log = Log()
        let running = Gate(), done = Gate()
        let victim = Box<Subscription?>(nil)
        store.addListener {
            log.append("first")
            running.open()
            #expect(done.wait())
        }
        victim.value = store.addListener { log.append("victim") }
        let other = Thread {
            #expect(running.wait())
            store.addListener { log.append("added") }
            try? victim.value?.remove()
            #expect(fluxCode { _ = try store.hasChanged() } == .notDispatching)
            done.open()
        }
        try d.dispatch(1)
        other.join()
        #expect(log.all == ["first"])
        try d.dispatch(1)
        #expect(log.all == ["first", "first", "added"])
        #expect(store.state == 2)
    }
}

extension StoreTests {
    /// Notes its own deinit.
    final class NotesItsEnd: Sendable {
        let log: Log
        init(_ log: Log) { self.log = log }
        deinit { log.append("released") }
    }

    // Subscription.remove(): a listener removing itself while it runs is
    // released once it returns -- not while it still runs (what it captured
    // must stay usable there), and not later than that: before the next
    // listener of the same emit.
    @Test func aListenerRemovingItselfIsReleasedRightAfterItReturns() throws {
        let d = Dispatcher<Action>()
        let store = Self.testStore(d)
        let log = Log()
        let own = Box<Subscription?>(nil)
        do {
            let captured = NotesItsEnd(log)
            own.value = store.addListener {
                try? own.value?.remove()
                withExtendedLifetime(captured) { log.append("removed itself") }
            }
        }
        store.addListener { log.append("next") }
        try d.dispatch(.willChange)
        #expect(log.all == ["removed itself", "released", "next"])
        try d.dispatch(.willChange)
        #expect(log.all == ["removed itself", "released", "next", "next"])
    }

    // addListener: a listener added earlier in a dispatch than the store's
    // emit -- by a callback that ran before the store, or by the store's own
    // handling -- runs for that dispatch's change.
    @Test func aListenerAddedEarlierInADispatchRunsForThatDispatchsChange() throws {
        let d = Dispatcher<Action>()
        let log = Log()
        let store = Box<FluxStore<Action>?>(nil)
        d.register { _ in store.value!.addListener { log.append("added by an earlier callback") } }
        store.value = FluxStore(dispatcher: d) { store, action in
            store.addListener { log.append("added by the store") }
            if case .willChange = action { try store.emitChange() }
        }
        try d.dispatch(.willChange)
        #expect(log.all == ["added by an earlier callback", "added by the store"])
    }

    // An emit whose listener waits for another store: that store's listener
    // removes the outer emit's running listener and its next one, and adds
    // enough listeners to move the outer store's table. The outer emit goes
    // on over the moved table, skipping the removed listener and running
    // none of the new ones until the next change.
    @Test func aNestedEmitMayRemoveAndGrowTheOuterEmitsListeners() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let inner = Box(DispatchToken(rawValue: 0))
        let outer = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
        let subs = Box<[Subscription]>([])
        subs.value.append(
            outer.addListener { [unowned d] in
                log.append("first")
                try? d.waitFor([inner.value])
                log.append("first, after its wait")
            })
        subs.value.append(outer.addListener { log.append("second") })
        subs.value.append(outer.addListener { log.append("third") })
        let other = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in n + p }
        inner.value = other.dispatchToken
        other.addListener {
            log.append("inner")
            for sub in subs.value.prefix(2) { try? sub.remove() }
            for _ in 0..<100 { outer.addListener { log.append("new") } }
        }
        try d.dispatch(1)
        #expect(log.all == ["first", "inner", "first, after its wait", "third"])
        try d.dispatch(1)
        // The second emit ran the first hundred, not the hundred it added.
        #expect(log.count(of: "third") == 2 && log.count(of: "new") == 100)
        #expect(outer.core.listenerCount == 201)
    }
}

extension StoreThreadTests {
    // emitChange and hasChanged are the dispatching thread's only: from
    // another thread they are refused, even while the store's own handling
    // runs (and may emit) on the dispatching thread.
    @Test func emitChangeFromAnotherThreadWhileTheStoreHandlesIsRefused() throws {
        let d = Dispatcher<Int>()
        let handling = Gate(), asked = Gate()
        let codes = Box<[FluxError.Code?]>([])
        let log = Log()
        let store = FluxStore<Int>(dispatcher: d) { _, _ in
            handling.open()
            #expect(asked.wait())
        }
        store.addListener { log.append("listener") }
        let other = Thread {
            #expect(handling.wait())
            codes.value = [fluxCode { try store.emitChange() }, fluxCode { _ = try store.hasChanged() }]
            asked.open()
        }
        try d.dispatch(1)
        other.join()
        #expect(codes.value == [.notDispatching, .notDispatching])
        #expect(log.all.isEmpty, "the refused emitChange marked nothing changed")
    }
}
