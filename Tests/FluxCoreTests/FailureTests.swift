import Testing
@_spi(Engine) @testable import FluxCore

@Suite struct FailureTests {
    @Test func aThrowingCallbackAbortsTheDispatchAndItsErrorIsRethrown() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { _ in log.append("a") }
        d.register { _ in throw Boom(id: 7) }
        d.register { _ in log.append("c") }
        #expect(throws: Boom(id: 7)) { try d.dispatch(0) }
        #expect(log.all == ["a"])
        #expect(!d.isDispatching)
    }

    @Test func theDispatcherIsConsistentAfterAFailedDispatch() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let fail = Box(true)
        d.register { n in
            log.append("a\(n)")
            if fail.value { throw Boom(id: 1) }
        }
        d.register { log.append("b\($0)") }
        #expect(throws: Boom.self) { try d.dispatch(1) }
        fail.value = false
        try d.dispatch(2)
        #expect(log.all == ["a1", "a2", "b2"])
    }

    @Test func waitForReportsAFailureOfTheCallbackItRan() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let later = Box<DispatchToken?>(nil)
        d.register { [unowned d] _ in
            do {
                try d.waitFor([later.value!])
                log.append("waiter went on")
            } catch {
                log.append("waiter saw \(error)")
                throw error
            }
        }
        later.value = d.register { _ in throw Boom(id: 3) }
        d.register { _ in log.append("never") }
        #expect(throws: Boom(id: 3)) { try d.dispatch(0) }
        #expect(log.all == ["waiter saw Boom(id: 3)"])
    }

    @Test func aWaiterThatSwallowsTheFailureStillAbortsTheDispatch() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let later = Box<DispatchToken?>(nil)
        d.register { [unowned d] _ in
            _ = try? d.waitFor([later.value!])
            // Any further waitFor in this dispatch reports the failure too.
            log.append("again: \((try? d.waitFor([DispatchToken]())) == nil ? "failed" : "ok")")
        }
        later.value = d.register { n in if n == 0 { throw Boom(id: 4) } }
        d.register { n in log.append("last \(n)") }
        #expect(throws: Boom(id: 4)) { try d.dispatch(0) }
        #expect(log.all == ["again: failed"])
        try d.dispatch(1)
        #expect(log.all == ["again: failed", "again: ok", "last 1"])
    }
}
