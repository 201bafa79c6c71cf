import Testing
import Synchronization
@_spi(Engine) @testable import FluxCore

/// An observer that writes every event to a log, as the C test does:
/// "D1" begin, "b3" callback begin, "e3" / "e3!" end (threw), "w1[3,2]", "E" / "E!".
func recordingObserver(_ log: Log) -> Dispatcher<Int>.Observer {
    Dispatcher<Int>.Observer(
        dispatchBegin: { log.append("D\($0)") },
        dispatchEnd: { _, error in log.append(error == nil ? "E" : "E!") },
        callbackBegin: { log.append("b\($0.rawValue)") },
        callbackEnd: { token, error in log.append("e\(token.rawValue)" + (error == nil ? "" : "!")) },
        waitFor: { waiter, tokens in
            log.append("w\(waiter.rawValue)[\(tokens.map { String($0.rawValue) }.joined(separator: ","))]")
        })
}

@Suite struct ObserverTests {
    @Test func eventsOfAChainWithWaitForInExactOrder() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let tokens = Box<[DispatchToken]>([])
        d.register { [unowned d] _ in try d.waitFor([tokens.value[2]]) }
        d.register { _ in }
        d.register { [unowned d] _ in try d.waitFor([tokens.value[1]]) }
        tokens.value = [1, 2, 3].map { DispatchToken(rawValue: $0) }
        d.setObserver(recordingObserver(log))
        try d.dispatch(7)
        #expect(log.all == ["D7", "b1", "w1[3]", "b3", "w3[2]", "b2", "e2", "e3", "e1", "E"])
    }

    @Test func aFailureEndsTheCallbackAndTheDispatchWithTheError() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { [unowned d] _ in try? d.waitFor([DispatchToken(rawValue: 2)]) }
        d.register { _ in throw Boom(id: 2) }
        d.register { _ in }
        d.setObserver(recordingObserver(log))
        #expect(throws: Boom(id: 2)) { try d.dispatch(1) }
        #expect(log.all == ["D1", "b1", "w1[2]", "b2", "e2!", "e1", "E!"])
    }

    // DESIGN.md 9: a dispatch refused with alreadyDispatching starts no
    // dispatch, so the observer of the running one sees nothing of it.
    @Test func aDispatchRefusedAsNestedReportsNothing() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let code = Box<FluxError.Code?>(nil)
        d.register { [unowned d] p in
            if p == 1 { code.value = fluxCode { try d.dispatch(2) } }
        }
        d.setObserver(recordingObserver(log))
        try d.dispatch(1)
        #expect(code.value == .alreadyDispatching)
        #expect(log.all == ["D1", "b1", "e1", "E"])
    }

    // DESIGN.md 9: a waitFor is reported on entry, its tokens as given,
    // whatever it then returns: refused ones too, before anything runs.
    @Test func aRefusedWaitForIsReportedOnEntryWithItsTokensAsGiven() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let codes = Box<[FluxError.Code?]>([])
        let unknown = DispatchToken(rawValue: 99)
        let two = DispatchToken(rawValue: 2)
        d.register { [unowned d] _ in
            codes.value.append(fluxCode { try d.waitFor([two, unknown]) })
            codes.value.append(fluxCode { try d.waitFor([DispatchToken(rawValue: 1)]) })
        }
        d.register { _ in }
        d.setObserver(recordingObserver(log))
        try d.dispatch(1)
        #expect(codes.value == [.unknownToken, .circularDependency])
        #expect(log.all == ["D1", "b1", "w1[2,99]", "w1[1]", "e1", "b2", "e2", "E"])
    }

    @Test func setOrClearedDuringADispatchTakesEffectFromTheNext() throws {
        let d = Dispatcher<Int>()
        let first = Log()
        let second = Log()
        let action = Box<Int>(0)
        d.register { [unowned d] _ in
            switch action.value {
            case 1: d.setObserver(recordingObserver(second))
            case 2: d.setObserver(nil)
            default: break
            }
        }
        d.setObserver(recordingObserver(first))
        action.value = 1
        try d.dispatch(1)
        action.value = 2
        try d.dispatch(2)
        action.value = 0
        try d.dispatch(3)
        #expect(first.all == ["D1", "b1", "e1", "E"])
        #expect(second.all == ["D2", "b1", "e1", "E"])
    }

    @Test func queuedDispatchesReportTheirOwnBeginAndEnd() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { [unowned d] p in if p == 1 { try d.enqueue(2) } }
        d.setObserver(recordingObserver(log))
        try d.dispatch(1)
        #expect(log.all == ["D1", "b1", "e1", "E", "D2", "b1", "e1", "E"])
    }

    @Test func aCycleIsNamedInFull() throws {
        let d = Dispatcher<Int>()
        let message = Box<String?>(nil)
        let t = (1...3).map { DispatchToken(rawValue: $0) }
        d.register { [unowned d] _ in try d.waitFor([t[1]]) }
        d.register { [unowned d] _ in try d.waitFor([t[2]]) }
        d.register { [unowned d] _ in message.value = fluxMessage { try d.waitFor([t[0]]) } }
        try d.dispatch(0)
        #expect(
            message.value == "circular dependency: token 3 waits for 1, which is waiting for 2, which is waiting for 3")
    }

    @Test func setFromAnotherThreadDuringADispatchTakesEffectFromTheNext() throws {
        let d = Dispatcher<Int>()
        let first = Log()
        let second = Log()
        let entered = Gate()
        let release = Gate()
        d.register { p in
            if p == 1 {
                entered.open()
                _ = release.wait()
            }
        }
        d.setObserver(recordingObserver(first))
        let holder = Thread { try! d.dispatch(1) }
        #expect(entered.wait())
        d.setObserver(recordingObserver(second))  // never waits for the dispatch
        release.open()
        holder.join()
        try d.dispatch(2)
        #expect(first.all == ["D1", "b1", "e1", "E"])
        #expect(second.all == ["D2", "b1", "e1", "E"])
    }

    @Test("waitFor from any observer closure throws notDispatching and reports nothing")
    func waitForFromAnObserverClosureIsRefused() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let codes = Box<[String: FluxError.Code?]>([:])
        let three = DispatchToken(rawValue: 3)
        // One try per closure kind (a waitFor closure that waits must not recurse).
        let tryWait: @Sendable (String) -> Void = { [unowned d] name in
            if codes.value[name] == nil { codes.value[name] = fluxCode { try d.waitFor([three]) } }
        }
        let recording = recordingObserver(log)
        d.setObserver(
            Dispatcher<Int>.Observer(
                dispatchBegin: {
                    recording.dispatchBegin?($0); tryWait("dispatchBegin")
                },
                dispatchEnd: {
                    recording.dispatchEnd?($0, $1); tryWait("dispatchEnd")
                },
                callbackBegin: {
                    recording.callbackBegin?($0); tryWait("callbackBegin")
                },
                callbackEnd: {
                    recording.callbackEnd?($0, $1); tryWait("callbackEnd")
                },
                waitFor: {
                    recording.waitFor?($0, $1); tryWait("waitFor")
                }))
        let calls = Box(0)
        d.register { [unowned d] _ in try d.waitFor([DispatchToken(rawValue: 2)]) }
        d.register { _ in }
        d.register { _ in calls.value += 1 }
        try d.dispatch(1)
        #expect(log.all == ["D1", "b1", "w1[2]", "b2", "e2", "e1", "b3", "e3", "E"])
        #expect(calls.value == 1)
        #expect(codes.value.count == 5)
        #expect(codes.value.values.allSatisfy { $0 == .notDispatching })
    }
}
