import Synchronization
import Testing
@_spi(Engine) @testable import FluxCore
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Issue 20: listeners added and removed from other threads during a stream
/// of emits: each runs exactly once in every emit it was present for, whole,
/// in none it was not, and its closure goes once removed.
@Suite struct StoreEmitRaceTests {
    final class Counters: Sendable {
        /// Reduces so far: the number of the running dispatch.
        let reduced = Atomic<Int>(0)
        /// Dispatches returned so far.
        let done = Atomic<Int>(0)
        /// Emits whose first listener has returned.
        let passed = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
    }

    final class Captured: Sendable {}

    /// One listener's story, told by the thread that adds and removes it
    /// and by the emits that call it.
    final class Record: Sendable {
        struct Story { var addedBefore = 0, addedAfter = 0, removedAfter = 0, goneAfter = 0, calls: [Int] = [] }
        let story = Guarded(Story())
        nonisolated(unsafe) weak var captured: Captured?
    }

    @Test func listenersAddedAndRemovedByOtherThreadsDuringAStreamOfEmits() throws {
        let threads = 2, perThread = 300, window = 3
        let counters = Counters()
        let d = Dispatcher<Int>()
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in
            counters.reduced.add(1, ordering: .sequentiallyConsistent)
            return n + p
        }
        // Always first: takes its time, so that removals land mid-emit.
        store.addListener {
            for _ in 0..<2000 { _ = counters.done.load(ordering: .relaxed) }
            counters.passed.add(1, ordering: .sequentiallyConsistent)
        }
        let records = (0..<threads).map { _ in (0..<perThread).map { _ in Record() } }
        let workers = (0..<threads).map { t in
            Thread {
                var subscriptions: [Subscription] = []
                for i in 0..<perThread {
                    let record = records[t][i]
                    let captured = Captured()
                    record.captured = captured
                    record.story.withLock { $0.addedBefore = counters.reduced.load(ordering: .sequentiallyConsistent) }
                    subscriptions.append(
                        store.addListener {
                            _ = captured
                            let emit = counters.reduced.load(ordering: .sequentiallyConsistent)
                            record.story.withLock { $0.calls.append(emit) }
                        })
                    record.story.withLock { $0.addedAfter = counters.reduced.load(ordering: .sequentiallyConsistent) }
                    if i >= window {
                        let old = records[t][i - window]
                        old.story.withLock { $0.removedAfter = counters.done.load(ordering: .sequentiallyConsistent) }
                        #expect(throws: Never.self) { try subscriptions[i - window].remove() }
                        old.story.withLock { $0.goneAfter = counters.passed.load(ordering: .sequentiallyConsistent) }
                    }
                    // Let an emit or two go by now and then.
                    let until = counters.done.load(ordering: .sequentiallyConsistent) + i % 3
                    while counters.done.load(ordering: .sequentiallyConsistent) < until { sched_yield() }
                }
                counters.finished.add(1, ordering: .sequentiallyConsistent)
            }
        }
        var extra = 0
        while extra < 3 {
            try d.dispatch(1)
            counters.done.add(1, ordering: .sequentiallyConsistent)
            if counters.finished.load(ordering: .sequentiallyConsistent) == threads { extra += 1 }
        }
        for worker in workers { worker.join() }
        // Not vacuous: the listeners did meet the emits.
        let ran = records.joined().filter { !$0.story.withLock { $0.calls.isEmpty } }.count
        #expect(ran > threads * perThread / 2, "\(ran) of \(threads * perThread) listeners ran")
        for t in 0..<threads {
            for i in 0..<perThread - window {
                let story = records[t][i].story.withLock { $0 }
                let calls = story.calls
                // Once per emit, in a row (it was present in between).
                #expect(
                    calls == Array(stride(from: calls.first ?? 0, through: calls.last ?? -1, by: 1)),
                    "listener \(t).\(i) calls \(calls)")
                if story.removedAfter > story.addedAfter {
                    // Every emit from addedAfter + 1 to removedAfter was whole.
                    #expect(
                        (calls.first ?? .max) <= story.addedAfter + 1 && (calls.last ?? 0) >= story.removedAfter,
                        "listener \(t).\(i) missed an emit: \(story)")
                }
                if let first = calls.first, let last = calls.last {
                    #expect(first >= story.addedBefore && last <= story.goneAfter, "listener \(t).\(i) late: \(story)")
                }
                #expect(records[t][i].captured == nil, "listener \(t).\(i)'s closure was dropped")
            }
        }
    }
}
