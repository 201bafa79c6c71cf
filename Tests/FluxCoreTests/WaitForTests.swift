import Testing
@_spi(Engine) @testable import FluxCore

/// Facebook's Dispatcher tests (src/__tests__/Dispatcher-test.js) and the rest
/// of DESIGN.md section 2 on waitFor.
@Suite struct WaitForTests {
    @Test func waitsForCallbacksRegisteredEarlier() throws {
        let d = Dispatcher<String>()
        let log = Log()
        let a = d.register { log.append("a \($0)") }
        d.register { [unowned d] p in
            try d.waitFor([a])
            log.append("b \(p)")
        }
        try d.dispatch("x")
        #expect(log.all == ["a x", "b x"])
    }

    @Test func waitsForCallbacksRegisteredLater() throws {
        let d = Dispatcher<String>()
        let log = Log()
        let later = Box<DispatchToken?>(nil)
        d.register { [unowned d] p in
            try d.waitFor([later.value!])
            log.append("a \(p)")
        }
        later.value = d.register { log.append("b \($0)") }
        try d.dispatch("x")
        #expect(log.all == ["b x", "a x"])
    }

    /// Every token is checked before any callback runs; one whose callback
    /// an earlier token's unregisters is then skipped, not an error.
    @Test func aTokenUnregisteredByACallbackTheWaitRanIsSkipped() throws {
        let d = Dispatcher<String>()
        let log = Log()
        let tokens = Box<[DispatchToken]>([])
        d.register { [unowned d] _ in
            try d.waitFor(tokens.value)
            log.append("waiter")
        }
        let remover = d.register { [unowned d] _ in
            try d.unregister(tokens.value[1])
            log.append("remover")
        }
        let target = d.register { _ in log.append("target") }
        tokens.value = [remover, target]
        try d.dispatch("x")
        #expect(log.all == ["remover", "waiter"])
    }

    /// On a thread with an 8 MiB stack: 500 links of a debug build's closures
    /// need more than 1 MiB, and a thread's default stack is whatever the
    /// parent's `ulimit -s` says (`ulimit -S -s 1024` failed this test).
    @Test func chainsOfAnyDepthRunInDependencyOrder() throws {
        let log = Log()
        let depth = 500
        let failure = Box<String?>(nil)
        Thread(stackSize: 8 << 20) {
            let d = Dispatcher<Int>()
            let tokens = Box<[DispatchToken]>([])
            var registered: [DispatchToken] = []
            for i in 0..<depth {
                registered.append(
                    d.register { [unowned d] _ in
                        if i + 1 < depth { try d.waitFor([tokens.value[i + 1]]) }
                        log.append("\(i)")
                    })
            }
            tokens.value = registered
            do { try d.dispatch(0) } catch { failure.value = "\(error)" }
        }.join()
        #expect(failure.value == nil)
        #expect(log.all == (0..<depth).reversed().map(String.init))
    }

    /// Deeper than any stack: the wait that would overflow throws
    /// `tooDeep`, which aborts the dispatch; the dispatcher goes on.
    @Test func chainTooDeepForTheStackThrowsTooDeep() throws {
        let d = Dispatcher<Int>()
        // Deeper than any thread's stack holds (a few thousand links of
        // debug-build closures on 8 MiB).
        let depth = Box(200_000)
        let tokens = Box<[DispatchToken]>([])
        let deepest = Box(0)
        let unwound = Box(0)
        var registered: [DispatchToken] = []
        for i in 0..<200_000 {
            registered.append(
                d.register { [unowned d] _ in
                    if i > deepest.value { deepest.value = i }
                    guard i + 1 < depth.value else { return }
                    do {
                        try d.waitFor([tokens.value[i + 1]])
                    } catch {
                        if (error as? FluxError)?.code == .tooDeep { unwound.value += 1 }
                        throw error
                    }
                })
        }
        tokens.value = registered
        #expect(fluxCode { try d.dispatch(0) } == .tooDeep)
        #expect(deepest.value > 100 && deepest.value < 200_000)
        #expect(unwound.value == deepest.value + 1, "the refused wait and every wait unwinding report tooDeep")
        #expect(!d.isDispatching)
        depth.value = 100
        try d.dispatch(1)
    }

    @Test func alreadyHandledAndDuplicateTokensAreSkipped() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let a = d.register { _ in log.append("a") }
        d.register { [unowned d] _ in
            try d.waitFor([a, a])
            try d.waitFor([a])
            try d.waitFor([DispatchToken]())
            log.append("b")
        }
        try d.dispatch(0)
        #expect(log.all == ["a", "b"])
    }

    @Test func waitingOnYourselfIsCircular() throws {
        let d = Dispatcher<Int>()
        let me = Box<DispatchToken?>(nil)
        let message = Box<String?>(nil)
        me.value = d.register { [unowned d] _ in
            message.value = fluxMessage { try d.waitFor([me.value!]) }
        }
        try d.dispatch(0)
        #expect(message.value == "circular dependency: token \(me.value!.rawValue) waits for itself")
    }

    @Test func aMultiCallbackCycleIsCircular() throws {
        let d = Dispatcher<Int>()
        let tokens = Box<[DispatchToken]>([])
        let codes = Log()
        let a = d.register { [unowned d] _ in try d.waitFor([tokens.value[1]]) }
        let b = d.register { [unowned d] _ in
            codes.append(String(describing: fluxCode { try d.waitFor([tokens.value[0]]) }))
        }
        tokens.value = [a, b]
        try d.dispatch(0)
        #expect(codes.all == ["Optional(circularDependency)"])
    }

    @Test func waitForOutsideADispatchFails() throws {
        let d = Dispatcher<Int>()
        let a = d.register { _ in }
        #expect(fluxCode { try d.waitFor([a]) } == .notDispatching)
        #expect(fluxCode { try d.waitFor([DispatchToken]()) } == .notDispatching)
    }

    @Test func waitForAnUnknownTokenFails() throws {
        let d = Dispatcher<Int>()
        let codes = Log()
        let gone = d.register { _ in }
        try d.unregister(gone)
        d.register { [unowned d] _ in
            codes.append("\(fluxCode { try d.waitFor([DispatchToken(rawValue: 1234)]) }!)")
            codes.append("\(fluxCode { try d.waitFor([gone]) }!)")
            codes.append("\(fluxCode { try d.waitFor([DispatchToken(rawValue: 0)]) }!)")
        }
        try d.dispatch(0)
        #expect(codes.all == ["unknownToken", "unknownToken", "unknownToken"])
    }

    @Test func everyTokenIsCheckedBeforeAnyCallbackRuns() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let waiter = Box<DispatchToken?>(nil)
        waiter.value = d.register { [unowned d] _ in
            let later = DispatchToken(rawValue: waiter.value!.rawValue + 1)
            log.append("\(fluxCode { try d.waitFor([later, DispatchToken(rawValue: 999)]) }!)")
            log.append("\(fluxCode { try d.waitFor([later, waiter.value!]) }!)")
        }
        d.register { _ in log.append("later ran") }
        try d.dispatch(0)
        #expect(log.all == ["unknownToken", "circularDependency", "later ran"])
    }

    @Test func waitForACallbackThatJoinedDuringTheDispatchFailsAndSaysWhy() throws {
        let d = Dispatcher<Int>()
        let message = Box<String?>(nil)
        d.register { [unowned d] _ in
            let late = d.register { _ in }
            message.value = fluxMessage { try d.waitFor([late]) }
        }
        try d.dispatch(0)
        #expect(message.value?.contains("registered during this dispatch") == true)
    }

    @Test func waitForFromAnotherThreadIsNotDispatching() async throws {
        let d = Dispatcher<Int>()
        let code = Box<FluxError.Code?>(nil)
        let a = d.register { _ in }
        d.register { [unowned d] _ in
            let thread = Thread { code.value = fluxCode { try d.waitFor([a]) } }
            thread.join()
        }
        try d.dispatch(0)
        #expect(code.value == .notDispatching)
    }
}

/// `DispatchCore.tryWaitFor` is the C ABI's hot path, and with
/// `error(_:waiting:)` it makes up `waitFor(token)`: it returns why a wait
/// failed, and the error made from that reason right after names it.
@Suite struct TryWaitForTests {
    /// The reason `tryWaitFor` returned, then the error made from it.
    private static func probe(_ d: Dispatcher<Int>, _ token: DispatchToken) -> String {
        guard let failure = d.core.tryWaitFor(token) else { return "ok" }
        switch d.core.error(failure, waiting: token) {
        case .flux(let error): return "\(failure), then \(error.code)"
        case .callback(let error, let failed): return "\(failure), then \(error) from \(failed.rawValue)"
        }
    }

    @Test func runsANotYetRunCallbackOnceAndThenReportsItHandled() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let later = Box<DispatchToken?>(nil)
        d.register { [unowned d] _ in
            log.append("first: \(Self.probe(d, later.value!))")
            log.append("again: \(Self.probe(d, later.value!))")
        }
        later.value = d.register { _ in log.append("later ran") }
        try d.dispatch(0)
        #expect(log.all == ["later ran", "first: ok", "again: ok"])
    }

    @Test func explainsEveryFailureAndRunsNothingMore() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let tokens = Box<[DispatchToken]>([])
        d.register { [unowned d] _ in
            let (me, victim, gone) = (tokens.value[0], tokens.value[1], tokens.value[2])
            log.append("self: \(Self.probe(d, me))")
            log.append("never issued: \(Self.probe(d, DispatchToken(rawValue: 999)))")
            log.append("zero: \(Self.probe(d, DispatchToken(rawValue: 0)))")
            try? d.unregister(gone)
            log.append("unregistered here: \(Self.probe(d, gone))")
            // The victim fails: from then on every wait reports the abort.
            log.append("failing: \(Self.probe(d, victim))")
            log.append("after the failure: \(Self.probe(d, me))")
        }
        tokens.value.append(DispatchToken(rawValue: 1))
        tokens.value.append(
            d.register { _ in
                log.append("victim ran"); throw Boom(id: 1)
            })
        tokens.value.append(d.register { _ in log.append("gone ran") })
        #expect(throws: Boom(id: 1)) { try d.dispatch(0) }
        #expect(
            log.all == [
                "self: circular, then circularDependency",
                "never issued: unknownToken, then unknownToken",
                "zero: unknownToken, then unknownToken",
                "unregistered here: unknownToken, then unknownToken",
                "victim ran",
                "failing: aborted, then Boom(id: 1) from 2",
                "after the failure: aborted, then Boom(id: 1) from 2",
            ])
        #expect(Self.probe(d, tokens.value[0]) == "notDispatching, then notDispatching")
    }
}
