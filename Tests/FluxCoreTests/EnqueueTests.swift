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
        let seen = Guarded<[Int: Int]>([:])
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
        let seen = Guarded<[Int: Int]>([:])
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

    /// A FluxError's code, or any other error as it prints.
    static func describe(_ error: any Error) -> String {
        (error as? FluxError).map { "\($0.code)" } ?? "\(error)"
    }

    /// A dispatcher whose callbacks form a `waitFor` chain `depth.value`
    /// long (deeper than any stack: `tooDeep`; 1: every callback alone),
    /// after a first callback that throws `Boom(id: -1)` for payload -1 and,
    /// when `queueFailing` is set, enqueues -1 once.
    final class DeepChain: Sendable {
        let d = Dispatcher<Int>()
        let depth = Box(200_000)
        let queueFailing = Box(false)

        init() {
            let tokens = Box<[DispatchToken]>([])
            d.register { [unowned d, queueFailing] p in
                if p == -1 { throw Boom(id: -1) }
                if queueFailing.value {
                    queueFailing.value = false
                    try d.enqueue(-1)
                }
            }
            var registered: [DispatchToken] = []
            for i in 0..<200_000 {
                registered.append(
                    d.register { [unowned d, depth] _ in
                        if i + 1 < depth.value { try d.waitFor([tokens.value[i + 1]]) }
                    })
            }
            tokens.value = registered
        }
    }

    /// Issue 15 item 8: `tooDeep` of enqueue's own dispatch vanished
    /// (enqueue returned normally, onError never ran), and so did a queued
    /// dispatch's.
    @Test func aTooDeepDispatchOfEnqueueIsThrownOrGivenToOnErrorOnce() throws {
        let chain = DeepChain()
        let d = chain.d
        // Its own dispatch, no onError: enqueue throws it.
        #expect(fluxCode { try d.enqueue(0) } == .tooDeep)
        // With onError: given to it, once, and enqueue throws nothing.
        let handed = Log()
        try d.enqueue(0, onError: { handed.append(Self.describe($0)) })
        #expect(handed.all == ["tooDeep"])
        // Queued behind a dispatch that succeeds: its onError, or the
        // outermost call.
        chain.depth.value = 1
        let queuer = d.register { [unowned d] p in
            if p == 1 {
                chain.depth.value = 200_000  // the queued dispatch goes too deep
                try d.enqueue(2, onError: { handed.append("queued " + Self.describe($0)) })
                try d.enqueue(3)
            }
        }
        #expect(fluxCode { try d.dispatch(1) } == .tooDeep, "the queued 3 went too deep; no onError: thrown here")
        #expect(handed.all == ["tooDeep", "queued tooDeep"])
        try d.unregister(queuer)
        // Nothing left over for later calls.
        chain.depth.value = 1
        try d.dispatch(4)
        try d.enqueue(5)
        #expect(handed.all.count == 2)
    }

    /// Issue 15 item 8: a dispatch that ended too deep after a queued
    /// payload threw threw only `tooDeep`, and the queued failure came out
    /// of the next, successful dispatch.
    @Test func aDispatchEndingTooDeepThrowsTheQueuedFailureItself() throws {
        let chain = DeepChain()
        let d = chain.d
        chain.queueFailing.value = true
        do {
            try d.dispatch(0)
            Issue.record("expected a throw")
        } catch let failures as QueuedDispatchFailures {
            #expect((failures.first as? FluxError)?.code == .tooDeep, "its own failure first")
            #expect(failures.later.compactMap { $0 as? Boom } == [Boom(id: -1)], "then the queued one")
        }
        chain.depth.value = 1
        try d.dispatch(1)  // nothing left over
        // The same through enqueue.
        chain.depth.value = 200_000
        chain.queueFailing.value = true
        do {
            try d.enqueue(0)
            Issue.record("expected a throw")
        } catch let failures as QueuedDispatchFailures {
            #expect((failures.first as? FluxError)?.code == .tooDeep)
            #expect(failures.later.compactMap { $0 as? Boom } == [Boom(id: -1)])
        }
        chain.depth.value = 1
        try d.enqueue(1)
        try d.dispatch(1)
    }

    // A payload queued from another thread is dispatched on the dispatching
    // thread: `enqueue` takes it `sending`, so a non-Sendable payload is the
    // dispatcher's once enqueued (using it afterwards, as the last line of
    // the sending thread's closure did before, is a compile-time error now
    // instead of a data race the compiler let through).
    @Test func aNonSendablePayloadEnqueuedFromAnotherThreadIsHandedOver() throws {
        final class Payload { var steps: [String] = [] }
        let d = Dispatcher<Payload>()
        let entered = Gate()
        let release = Gate()
        let seen = Log()
        d.register { p in
            if p.steps.isEmpty {
                entered.open()
                _ = release.wait()
            }
            seen.append(p.steps.joined(separator: ","))
        }
        let first = Thread { try? d.dispatch(Payload()) }
        #expect(entered.wait())
        let other = Thread {
            let p = Payload()
            p.steps.append("made")
            try? d.enqueue(p)
        }
        other.join()
        release.open()
        first.join()
        #expect(seen.all == ["", "made"])
    }

    // A payload enqueued from another thread is the dispatching thread's:
    // its onError runs there, and a failure with no onError is thrown by
    // that thread's outermost call -- never by the enqueue that queued it,
    // nor by a later call of the enqueuing thread.
    @Test func aFailureQueuedFromAnotherThreadIsTheDispatchingThreadsToReport() throws {
        let d = Dispatcher<Int>()
        let entered = Gate(), queued = Gate()
        d.register { p in
            if p == 0 {
                entered.open()
                #expect(queued.wait())
            }
            if p > 0 { throw Boom(id: p) }
        }
        let runner = Box<UInt>(0)
        let onErrorRanOn = Box<[UInt]>([])
        let runnerThrew = Box<[Int]>([])
        let dispatching = Thread {
            runner.value = currentThreadID()
            do {
                try d.dispatch(0)
            } catch {
                runnerThrew.value.append((error as? Boom)?.id ?? -1)
            }
        }
        #expect(entered.wait())
        // Queued for the dispatch in progress: neither call throws.
        try d.enqueue(1)
        try d.enqueue(2, onError: { _ in onErrorRanOn.value.append(currentThreadID()) })
        queued.open()
        dispatching.join()
        #expect(runnerThrew.value == [1], "the dispatching thread threw the failure with no onError")
        #expect(onErrorRanOn.value == [runner.value], "onError ran on the dispatching thread")
        try d.dispatch(-1)  // this thread's next call has nothing of it
    }

    @Test("an onError, run on the dispatching thread with no callback running, cannot wait or dispatch")
    func onErrorCannotWaitOrDispatch() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let b = Box<DispatchToken?>(nil)
        d.register { [unowned d] p in
            log.append("a\(p)")
            if p == 1 {
                try d.enqueue(
                    2,
                    onError: { _ in
                        let code = { (body: () throws -> Void) in fluxCode(body).map { "\($0)" } ?? "none" }
                        log.append("one \(code { try d.waitFor([b.value!]) })")
                        log.append("two \(code { try d.waitFor([b.value!, b.value!]) })")
                        log.append("dispatch \(code { try d.dispatch(9) })")
                    })
            }
            if p == 2 { throw Boom(id: 2) }
        }
        b.value = d.register { log.append("b\($0)") }
        try d.dispatch(1)
        // b ran once per dispatch, never out of turn for a wait from onError.
        #expect(
            log.all == [
                "a1", "b1", "a2", "one notDispatching", "two notDispatching", "dispatch alreadyDispatching",
            ])
    }

    /// Runs `body` when it goes.
    final class OnDeinit: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        deinit { body() }
    }

    // A callback unregistered during a dispatch is released once the whole
    // call -- its queued dispatches included -- is over, still inside the
    // outermost call; a dispatch from what that release lets go of ran as a
    // call of its own, and used to take (and throw, into the deinit) the
    // queued failure the outermost call had still to throw, which then
    // returned normally.
    @Test(
        "a dispatch from a deinit run by the end of a call does not take that call's queued failure",
        arguments: [false, true])
    func aNestedCallLeavesTheOutermostCallsQueuedFailure(outerEnqueues: Bool) throws {
        let d = Dispatcher<Int>()
        let inner = Log()
        let victim = Box<DispatchToken?>(nil)
        d.register { [unowned d] p in
            if p == 1 {
                try d.unregister(victim.value!)  // released when the call ends
                try d.enqueue(2)  // queued; fails, no onError
            }
            if p == 2 { throw Boom(id: 2) }
            if p == 7 { throw Boom(id: 7) }
        }
        // The only reference to the deinit's object is the victim's closure.
        func registerVictim() -> DispatchToken {
            let hook = OnDeinit { [weak d] in
                do {
                    try d?.dispatch(7)
                    inner.append("returned")
                } catch {
                    inner.append("threw \((error as? Boom)?.id ?? -1)")
                }
            }
            return d.register { _ in withExtendedLifetime(hook) {} }
        }
        victim.value = registerVictim()
        #expect(throws: Boom(id: 2)) {
            if outerEnqueues { try d.enqueue(1) } else { try d.dispatch(1) }
        }
        // The nested call threw its own failure, and only that.
        #expect(inner.all == ["threw 7"])
        try d.dispatch(5)  // nothing left over
    }

    // A queued entry -- its payload and its onError -- used to be let go of
    // by the drain after the dispatcher's owner was cleared, with its lock
    // held: a dispatch from what it let go of waited for the very call
    // running it (or for the lock it held), forever.
    @Test(
        "a dispatch or enqueue from a deinit run as the drain lets go of a queued onError does not hang",
        arguments: [false, true])
    func aDeinitOfAQueuedOnErrorCanCallIn(enqueues: Bool) throws {
        let d = Dispatcher<Int>()
        let log = Log()
        d.register { [unowned d] p in
            log.append("p\(p)")
            if p == 1 {
                // The only reference to the deinit's object is the onError.
                let hook = OnDeinit { [unowned d] in
                    if enqueues {
                        log.append("enqueue \(fluxCode { try d.enqueue(3) }.map { "\($0)" } ?? "none")")
                    } else {
                        log.append("dispatch \(fluxCode { try d.dispatch(3) }.map { "\($0)" } ?? "none")")
                    }
                }
                try d.enqueue(2, onError: { _ in withExtendedLifetime(hook) {} })
            }
        }
        let done = Gate()
        let caller = Thread {
            try? d.dispatch(1)
            done.open()
        }
        let finished = done.wait(seconds: 5)
        #expect(finished)
        guard finished else { return }  // the thread is stuck for good
        caller.join()
        // Inside the call, draining: a dispatch is refused, an enqueue queues.
        #expect(
            log.all
                == (enqueues ? ["p1", "p2", "enqueue none", "p3"] : ["p1", "p2", "dispatch alreadyDispatching"]))
    }
}
