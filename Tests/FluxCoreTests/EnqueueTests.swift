import Testing
import Synchronization
@_spi(Engine) @testable import FluxCore

@Suite struct EnqueueTests {
    @Test func idleEnqueueDispatchesAtOnce() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { log.append("a\($0)") }
        try d.enqueue(1)
        #expect(log.all == ["a1"])
        #expect(!d.isDispatching)
    }

    @Test func cascadingEnqueueFromCallbacksIsFIFOEachAFullDispatch() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { [unowned d] p in
            log.append("a\(p)")
            if p < 3 { try d.enqueue(p + 1) }
            if p == 1 { try d.enqueue(10) }
        }
        d.register { log.append("b\($0)") }
        try d.dispatch(1)
        #expect(log.all == ["a1", "b1", "a2", "b2", "a10", "b10", "a3", "b3"])
    }

    @Test func waitForWorksInQueuedDispatches() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let b = Box<DispatchToken?>(nil)
        d.register { [unowned d] p in
            try d.waitFor([b.value!])
            log.append("a\(p)")
        }
        b.value = d.register { [unowned d] p in
            log.append("b\(p)")
            if p < 2 { try d.enqueue(p + 1) }
        }
        try d.dispatch(1)
        #expect(log.all == ["b1", "a1", "b2", "a2"])
    }

    @Test func dispatchFromInsideAQueuedDispatchIsStillRefused() throws {
        let d = Dispatcher<Int>()
        let codes = Log()
        d.register { [unowned d] p in
            if p == 1 { try d.enqueue(2) }
            if p == 2 { codes.append("\(fluxCode { try d.dispatch(3) }.map { "\($0)" } ?? "none")") }
        }
        try d.dispatch(1)
        #expect(codes.all == ["alreadyDispatching"])
    }

    @Test func aFailingQueuedDispatchGoesToOnErrorAndTheQueueGoesOn() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { [unowned d] p in
            log.append("a\(p)")
            if p == 1 {
                try d.enqueue(2, onError: { log.append("onError \(($0 as? Boom)?.id ?? -1)") })
                try d.enqueue(3)
            }
            if p == 2 { throw Boom(id: 2) }
        }
        try d.dispatch(1)
        #expect(log.all == ["a1", "a2", "onError 2", "a3"])
    }

    @Test func aQueuedFailureWithNoOnErrorIsThrownByTheOutermostCall() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { [unowned d] p in
            log.append("a\(p)")
            if p == 1 {
                try d.enqueue(2)  // queued: returns at once, throws nothing
                log.append("enqueued")
                try d.enqueue(3)
            }
            if p == 2 { throw Boom(id: 2) }
        }
        #expect(throws: Boom(id: 2)) { try d.dispatch(1) }
        #expect(log.all == ["a1", "enqueued", "a2", "a3"])
        // Nothing left over for the next call.
        try d.dispatch(5)
    }

    @Test func severalFailuresAreThrownTogetherInOrder() throws {
        let d = Dispatcher<Int>()
        d.register { [unowned d] p in
            if p == 1 { try d.enqueue(2); try d.enqueue(3) }
            throw Boom(id: p)
        }
        do {
            try d.enqueue(1)
            Issue.record("expected a throw")
        } catch let failures as QueuedDispatchFailures {
            #expect(failures.first as? Boom == Boom(id: 1))
            #expect(failures.later.compactMap { $0 as? Boom } == [Boom(id: 2), Boom(id: 3)])
        }
    }

    @Test func enqueueFromOtherThreadsNeverBlocksAndNothingIsLostOrRunTwice() throws {
        let d = Dispatcher<Int>()
        let seen = Mutex<[Int: Int]>([:])
        let entered = Gate()
        let release = Gate()
        d.register { p in
            if p == 0 {
                entered.open()
                _ = release.wait()
            }
            seen.withLock { $0[p, default: 0] += 1 }
        }
        let holder = Thread { try! d.dispatch(0) }
        #expect(entered.wait())
        // These return while the dispatch is held open: never blocking.
        let threads = (0..<3).map { t in
            Thread { for i in 1...50 { try! d.enqueue(t * 1000 + i) } }
        }
        threads.forEach { $0.join() }
        release.open()
        holder.join()
        let counts = seen.withLock { $0 }
        #expect(counts.count == 151)
        #expect(counts.values.allSatisfy { $0 == 1 })
    }

    @Test func enqueueRacingTheEndOfDispatchesLosesNothing() throws {
        let d = Dispatcher<Int>()
        let seen = Mutex<[Int: Int]>([:])
        d.register { p in
            if p >= 0 { seen.withLock { $0[p, default: 0] += 1 } }
        }
        let running = Atomic<Int>(3)
        let threads = (0..<3).map { t in
            Thread {
                for i in 0..<500 { try! d.enqueue(t * 1000 + i) }
                running.subtract(1, ordering: .sequentiallyConsistent)
            }
        }
        while running.load(ordering: .sequentiallyConsistent) > 0 { try d.dispatch(-1) }
        threads.forEach { $0.join() }
        let counts = seen.withLock { $0 }
        #expect(counts.count == 1500)
        #expect(counts.values.allSatisfy { $0 == 1 })
    }
}
