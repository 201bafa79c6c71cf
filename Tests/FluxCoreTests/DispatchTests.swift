import Testing
@_spi(Engine) @testable import FluxCore

@Suite struct DispatchTests {
    @Test func everyCallbackGetsEveryPayloadInRegistrationOrder() throws {
        let d = Dispatcher<String>()
        let log = Log()
        for name in ["a", "b", "c"] { d.register { log.append("\(name):\($0)") } }
        try d.dispatch("1")
        try d.dispatch("2")
        #expect(log.all == ["a:1", "b:1", "c:1", "a:2", "b:2", "c:2"])
    }

    @Test func tokensAreUniqueIncreasingNeverZeroAndNeverReused() throws {
        let d = Dispatcher<Int>()
        let first = d.register { _ in }
        let second = d.register { _ in }
        try d.unregister(second)
        let third = d.register { _ in }
        #expect(first.rawValue == 1)
        #expect(first < second && second < third)
        #expect(third != second)
    }

    @Test func isDispatchingIsTrueExactlyWhileADispatchRuns() throws {
        let d = Dispatcher<Int>()
        let seen = Box<Bool?>(nil)
        d.register { [unowned d] _ in seen.value = d.isDispatching }
        #expect(!d.isDispatching)
        try d.dispatch(0)
        #expect(seen.value == true)
        #expect(!d.isDispatching)
    }

    @Test func dispatchInsideADispatchFailsAndTheOuterDispatchGoesOn() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { [unowned d] n in
            log.append("first \(n)")
            let code = fluxCode { try d.dispatch(n + 1) }
            log.append("nested: \(code.map(String.init(describing:)) ?? "none")")
        }
        d.register { n in log.append("second \(n)") }
        try d.dispatch(1)
        #expect(log.all == ["first 1", "nested: alreadyDispatching", "second 1"])
        #expect(!d.isDispatching)
    }

    @Test func dispatchingAnotherDispatcherFromACallbackWorks() throws {
        let outer = Dispatcher<Int>()
        let inner = Dispatcher<Int>()
        let log = Log()
        inner.register { log.append("inner \($0)") }
        outer.register { try inner.dispatch($0 * 10) }
        try outer.dispatch(4)
        #expect(log.all == ["inner 40"])
    }

    @Test func aCallbackRegisteredDuringADispatchIsFirstCalledByTheNext() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let registered = Box(false)
        d.register { [unowned d] n in
            log.append("a\(n)")
            if !registered.value {
                registered.value = true
                d.register { log.append("late\($0)") }
            }
        }
        d.register { log.append("b\($0)") }
        try d.dispatch(1)
        try d.dispatch(2)
        #expect(log.all == ["a1", "b1", "a2", "b2", "late2"])
    }

    @Test func aCallbackUnregisteredDuringADispatchIsNotCalledAfterThat() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let victim = Box<DispatchToken?>(nil)
        let removeVictim = Box(true)
        d.register { [unowned d] _ in
            log.append("a")
            if removeVictim.value, let token = victim.value {
                removeVictim.value = false
                try d.unregister(token)
            }
        }
        victim.value = d.register { _ in log.append("victim") }
        d.register { _ in log.append("c") }
        try d.dispatch(0)
        try d.dispatch(0)
        #expect(log.all == ["a", "c", "a", "c"])
        #expect(fluxCode { try d.unregister(victim.value!) } == .unknownToken)
    }

    @Test func aCallbackMayUnregisterItself() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let me = Box<DispatchToken?>(nil)
        me.value = d.register { [unowned d] n in
            log.append("self \(n)")
            try d.unregister(me.value!)
        }
        d.register { log.append("other \($0)") }
        try d.dispatch(1)
        try d.dispatch(2)
        #expect(log.all == ["self 1", "other 1", "other 2"])
    }

    @Test func unregisteringUnknownOrStaleTokensFails() throws {
        let d = Dispatcher<Int>()
        let token = d.register { _ in }
        try d.unregister(token)
        #expect(fluxCode { try d.unregister(token) } == .unknownToken)
        #expect(fluxCode { try d.unregister(DispatchToken(rawValue: 0)) } == .unknownToken)
        #expect(fluxCode { try d.unregister(DispatchToken(rawValue: 99)) } == .unknownToken)
        #expect(fluxMessage { try d.unregister(DispatchToken(rawValue: 99)) }?.contains("99") == true)
    }

    /// The engine's `unregister(ending:)`, as a C store group lets go of its
    /// stores: it runs before the release (at once when idle, at the end of
    /// the dispatch during one) and never when the unregistration is refused.
    @Test func unregisterRunsEndingBeforeTheReleaseOnlyWhenTheRegistrationEnds() throws {
        let box = CoreBox()
        let log = Log()
        let idle = try box.core.register(HookCallback(body: { _ in }, onRelease: { log.append("release idle") }))
        try box.core.unregister(idle) { log.append("ending idle") }
        #expect(log.all == ["ending idle", "release idle"])
        let late = try box.core.register(HookCallback(body: { _ in }, onRelease: { log.append("release late") }))
        _ = try box.core.register(
            HookCallback(
                body: { _ in
                    try? box.core.unregister(late) { log.append("ending late") }
                    log.append("unregistered")
                }, onRelease: {}))
        try box.core.dispatch(0)
        #expect(log.all == ["ending idle", "release idle", "ending late", "unregistered", "release late"])
        #expect(throws: FluxError.self) { try box.core.unregister(late) { log.append("ending refused") } }
        #expect(log.count(of: "ending refused") == 0)
    }

    @Test func manyRegistrationsAndRemovalsKeepOrder() throws {
        // Exercises table growth and compaction, including lookups after
        // removals break the token == index + 1 shortcut.
        let d = Dispatcher<Int>()
        let log = Log()
        var tokens: [DispatchToken] = []
        for i in 0..<300 { tokens.append(d.register { _ in log.append("\(i)") }) }
        for i in stride(from: 0, to: 300, by: 3) { try d.unregister(tokens[i]) }
        try d.dispatch(0)
        let expected = (0..<300).filter { $0 % 3 != 0 }.map(String.init)
        #expect(log.all == expected)
        // waitFor finds tokens by binary search once the table has holes.
        let waited = Log()
        let targets = [tokens[299], tokens[4]]
        d.register { [unowned d] _ in
            try d.waitFor(targets)
            waited.append("done")
        }
        try d.dispatch(0)
        #expect(waited.all == ["done"])
    }
}
