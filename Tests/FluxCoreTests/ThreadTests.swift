import Testing
import Synchronization
@_spi(Engine) @testable import FluxCore

@Suite struct ThreadTests {
    @Test func dispatchesFromManyThreadsAreSerializedAndNothingIsLost() throws {
        let d = Dispatcher<Int>()
        let inside = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        let calls = Atomic<Int>(0)
        for _ in 0..<4 {
            d.register { _ in
                if inside.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
                    overlaps.add(1, ordering: .relaxed)
                }
                calls.add(1, ordering: .relaxed)
                inside.subtract(1, ordering: .sequentiallyConsistent)
            }
        }
        let threads = (0..<4).map { _ in
            Thread { for i in 0..<2000 { try! d.dispatch(i) } }
        }
        threads.forEach { $0.join() }
        #expect(overlaps.load(ordering: .relaxed) == 0)
        #expect(calls.load(ordering: .relaxed) == 4 * 2000 * 4)
    }

    @Test func aSecondThreadsDispatchWaitsForTheFirstThenRuns() throws {
        let d = Dispatcher<String>()
        let log = Log()
        let entered = Gate()
        let release = Gate()
        d.register { p in
            log.append("start \(p)")
            if p == "first" {
                entered.open()
                _ = release.wait()
            }
            log.append("end \(p)")
        }
        let first = Thread { try! d.dispatch("first") }
        #expect(entered.wait())
        let second = Thread { try! d.dispatch("second") }
        pause(milliseconds: 20)  // give the second thread time to block
        #expect(log.all == ["start first"])
        release.open()
        first.join()
        second.join()
        #expect(log.all == ["start first", "end first", "start second", "end second"])
    }

    @Test func registerUnregisterAndIsDispatchingNeverWaitForARunningDispatch() throws {
        let d = Dispatcher<Int>()
        let entered = Gate()
        let release = Gate()
        let log = Log()
        d.register { _ in
            entered.open()
            _ = release.wait()
        }
        let victim = d.register { _ in log.append("victim") }
        let dispatching = Thread { try! d.dispatch(0) }
        #expect(entered.wait())
        // All of this runs while the dispatch is held open inside a callback.
        let done = Gate()
        let other = Thread {
            #expect(d.isDispatching)
            let late = d.register { _ in log.append("late") }
            try! d.unregister(victim)
            #expect(fluxCode { try d.unregister(victim) } == .unknownToken)
            #expect(fluxCode { try d.waitFor([late]) } == .notDispatching)
            done.open()
        }
        #expect(done.wait(seconds: 5), "a call waited for the running dispatch")
        release.open()
        dispatching.join()
        other.join()
        #expect(log.all == [])  // victim left, late joined after the start
        try d.dispatch(1)
        #expect(log.all == ["late"])
    }

    @Test func dispatchFromInsideACallbackFailsAtOnceAndNeverDeadlocks() throws {
        let d = Dispatcher<Int>()
        let code = Box<FluxError.Code?>(nil)
        d.register { [unowned d] n in
            if n == 0 { code.value = fluxCode { try d.dispatch(1) } }
        }
        try d.dispatch(0)
        #expect(code.value == .alreadyDispatching)
    }

    // Two dispatchers whose callbacks dispatch each other, dispatched from
    // two threads at once: each thread would wait for the other's dispatch
    // to end, forever. The wait that closes the cycle is refused instead,
    // like a dispatch from inside a dispatch; the other then goes on.
    @Test(.timeLimit(.minutes(1)))
    func dispatchersDispatchingEachOtherFromTwoThreadsFailCleanlyInsteadOfDeadlocking() throws {
        for size in [2, 3] {
            let dispatchers = (0..<size).map { _ in Dispatcher<Int>() }
            let inside = (0..<size).map { _ in Gate() }
            let outcomes = Log()
            for i in 0..<size {
                let next = dispatchers[(i + 1) % size]
                dispatchers[i].register { p in
                    guard p == 0 else { return }
                    inside[i].open()
                    for gate in inside { _ = gate.wait() }  // every thread holds its dispatcher
                    outcomes.append(fluxCode { try next.dispatch(1) }.map { "\($0)" } ?? "ok")
                }
            }
            let finished = (0..<size).map { _ in Gate() }
            let threads = (0..<size).map { i in
                Thread {
                    try? dispatchers[i].dispatch(0)
                    finished[i].open()
                }
            }
            let all = finished.allSatisfy { $0.wait() }
            #expect(all, "a thread of the \(size)-cycle never finished")
            if all { for thread in threads { thread.join() } }  // else they hang for good: leave them
            #expect(outcomes.count(of: "alreadyDispatching") == 1, "\(outcomes.all)")
            #expect(outcomes.count(of: "ok") == size - 1, "\(outcomes.all)")
            for d in dispatchers { #expect(!d.isDispatching) }
        }
    }

    // What Flux's Sink asks before a send waits for another thread's
    // delivery: whether this thread is running a dispatch (then it must not
    // wait). Each dispatcher answers for itself, and leaves when it goes.
    @Test func dispatchingThreadsKnowsWhoRunsADispatchAndForgetsAGoneDispatcher() throws {
        var d: Dispatcher<Int>? = Dispatcher<Int>()
        let id = ObjectIdentifier(d!)
        #expect(DispatchingThreads.shared.contains(id))
        let inside = Box(false)
        let elsewhere = Box(true)
        d!.register { _ in
            inside.value = DispatchingThreads.shared.containsCurrentThread()
            let other = Thread { elsewhere.value = DispatchingThreads.shared.containsCurrentThread() }
            other.join()
        }
        try d!.dispatch(0)
        #expect(inside.value, "the dispatching thread, in a callback")
        #expect(!elsewhere.value, "another thread, during that dispatch")
        #expect(!DispatchingThreads.shared.containsCurrentThread(), "the same thread, once the dispatch is over")
        d = nil
        #expect(!DispatchingThreads.shared.contains(id), "a dispatcher that went is not asked again")
    }
}
