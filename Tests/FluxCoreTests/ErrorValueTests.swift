import Testing
@_spi(Engine) @testable import FluxCore

/// Errors as data (DESIGN.md 10): `FluxError.token` and `.cycle` carry what
/// the message names, so no caller has to read the message.
@Suite struct ErrorValueTests {
    /// The error a throwing body throws, when it is a FluxError.
    private func fluxError(_ body: () throws -> Void) -> FluxError? {
        do { try body() } catch let error as FluxError { return error } catch {}
        return nil
    }

    /// Six words: with a seventh, the compiler destroyed every dispatch's
    /// `Optional<DispatchError>` through the runtime's generic witnesses (the
    /// cost of a whole dispatch again, and a first failure on a 16 KiB stack
    /// overflowed setting the type up). The token's "none" and the message's
    /// template flag sit in the padding beside `code`.
    @Test func anErrorFitsInSixWords() {
        #expect(MemoryLayout<FluxError>.size <= 6 * MemoryLayout<Int>.size)
        let token = FluxError(.unknownToken, "x", token: DispatchToken(rawValue: 0))
        #expect(token.token == DispatchToken(rawValue: 0), "token 0 is a token, not none")
        #expect(FluxError(.unknownToken, "x").token == nil)
        let templated = FluxError(.unknownToken, template: "t \u{3}", token: DispatchToken(rawValue: 7))
        #expect(templated.token == DispatchToken(rawValue: 7))
        #expect(templated.message == "t 7")
    }

    @Test func aThreeCallbackCycleGivesItsTokensInOrder() throws {
        let d = Dispatcher<Int>()
        let caught = Box<FluxError?>(nil)
        let t = (1...3).map { DispatchToken(rawValue: $0) }
        d.register { [unowned d] _ in try d.waitFor([t[1]]) }
        d.register { [unowned d] _ in try d.waitFor([t[2]]) }
        d.register { [unowned d] _ in caught.value = self.fluxError { try d.waitFor([t[0]]) } }
        try d.dispatch(0)
        let error = try #require(caught.value)
        #expect(error.code == .circularDependency)
        #expect(error.token == t[0], "the pending token the wait asked for")
        #expect(error.cycle == [t[2], t[0], t[1], t[2]], "waiter, asked for, ..., waiter")
    }

    @Test func aCallbackWaitingForItselfIsACycleOfTwo() throws {
        let d = Dispatcher<Int>()
        let caught = Box<FluxError?>(nil)
        let me = Box<DispatchToken?>(nil)
        me.value = d.register { [unowned d] _ in caught.value = self.fluxError { try d.waitFor([me.value!]) } }
        try d.dispatch(0)
        let error = try #require(caught.value)
        #expect(error.token == me.value)
        #expect(error.cycle == [me.value!, me.value!])
    }

    // A reduce's failure reaches the dispatcher's caller unchanged
    // (DESIGN.md 6): a cycle through two stores' reduces keeps its values.
    @Test func aCycleThroughTwoReduceStoresReachesTheCallerWithItsTokens() throws {
        let d = Dispatcher<Int>()
        let tokens = Box<[DispatchToken]>([])
        let a = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { [unowned d] n, p in
            try d.waitFor([tokens.value[1]])
            return n + p
        }
        let b = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { [unowned d] n, p in
            try d.waitFor([tokens.value[0]])
            return n + p
        }
        tokens.value = [a.dispatchToken, b.dispatchToken]
        let error = try #require(fluxError { try d.dispatch(1) })
        #expect(error.code == .circularDependency)
        #expect(error.token == a.dispatchToken, "the pending token b's wait asked for")
        #expect(error.cycle == [b.dispatchToken, a.dispatchToken, b.dispatchToken])
        #expect(a.state == 0 && b.state == 0, "a failing reduce keeps its store's state")
    }

    @Test func anUnknownTokenIsTheFirstOneRejected() throws {
        let d = Dispatcher<Int>()
        let caught = Box<FluxError?>(nil)
        let fine = d.register { _ in }
        let gone = d.register { _ in }
        try d.unregister(gone)
        d.register { [unowned d] _ in
            caught.value = self.fluxError { try d.waitFor([fine, DispatchToken(rawValue: 77), gone]) }
        }
        try d.dispatch(0)
        #expect(caught.value?.code == .unknownToken)
        #expect(caught.value?.token == DispatchToken(rawValue: 77))
        #expect(caught.value?.cycle == [])
        let again = fluxError { try d.unregister(gone) }
        #expect(again?.token == gone)
        #expect(fluxError { try d.unregister(DispatchToken(rawValue: 0)) }?.token == nil, "token 0: no token")
    }

    @Test func tooDeepNamesTheLinkThatWouldNotFit() throws {
        let d = Dispatcher<Int>()
        let tokens = Box<[DispatchToken]>([])
        let deepest = Box(0)
        let first = Box<FluxError?>(nil)
        var registered: [DispatchToken] = []
        registered.append(
            d.register { [unowned d] _ in
                // What waitFor throws to a waiter up the chain (its doc).
                first.value = self.fluxError { try d.waitFor([tokens.value[1]]) }
            })
        for i in 1..<200_000 {
            registered.append(
                d.register { [unowned d] _ in
                    deepest.value = max(deepest.value, i)
                    try d.waitFor([tokens.value[i + 1]])
                })
        }
        tokens.value = registered
        let error = try #require(fluxError { try d.dispatch(0) })
        #expect(error.code == .tooDeep)
        #expect(error.token == registered[deepest.value + 1])
        #expect(first.value?.code == .tooDeep)
        #expect(first.value?.token == error.token)
    }

    @Test func errorsWithoutATokenHaveNone() throws {
        let d = Dispatcher<Int>()
        let a = d.register { _ in }
        let error = try #require(fluxError { try d.waitFor([a]) })
        #expect(error.code == .notDispatching)
        #expect(error.token == nil && error.cycle.isEmpty)
    }

    // The README's and FluxError's promise: `catch FluxError.Code.x` matches
    // a thrown FluxError of that code, and nothing else (another code, or
    // a callback's own error).
    @Test func aCodeMatchesACatchOfThatCodeOnly() {
        @Sendable func caught(_ body: () throws -> Void) -> String {
            do {
                try body()
                return "nothing"
            } catch FluxError.Code.circularDependency {
                return "circular"
            } catch FluxError.Code.notDispatching {
                return "not dispatching"
            } catch {
                return "other"
            }
        }
        let d = Dispatcher<Int>()
        let a = d.register { _ in }
        #expect(caught { try d.waitFor([a]) } == "not dispatching")
        let own = Box(DispatchToken(rawValue: 0))
        let outcome = Box("")
        own.value = d.register { [unowned d] _ in outcome.value = caught { try d.waitFor([own.value]) } }
        #expect(caught { try d.dispatch(0) } == "nothing")
        #expect(outcome.value == "circular")
        #expect(caught { throw Boom(id: 1) } == "other")
        #expect(caught { throw FluxError(.unknownToken, "x") } == "other")
        #expect(caught {} == "nothing")
    }
}
