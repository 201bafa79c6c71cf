import Foundation
import XCTest
import Flux
@testable import FluxCore  // Guarded: a pthread mutex, which ThreadSanitizer sees
import Synchronization

// Two threads at once on one object; ThreadSanitizer (`make check-thread`)
// checks the locking, the assertions check what the layer promises.
final class ConcurrencyTests: XCTestCase {
    func testSendWhileObservingAndDisposing() {
        let sink = Sink<Int>()
        nonisolated(unsafe) var received = 0

        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            if thread == 0 {
                for value in 0..<20_000 {
                    sink.send(value: value)
                }
            } else {
                for _ in 0..<2_000 {
                    let disposable = sink.signal.observe { _ in received += 1 }
                    disposable.dispose()
                }
            }
        }

        // Every observer is gone: a send reaches none.
        let before = received
        sink.send(value: 0)
        XCTAssertEqual(received, before)
    }

    // A delivery reads the observer list in place, without the lock: a
    // change made during it must copy the list (and keep a removed observer
    // alive) rather than shift the entries the delivery is walking.
    func testObserversPresentForWholeSendsGetEachOnceWhileOthersComeAndGo() {
        let sink = Sink<Int>()
        let sends = 20_000
        // Observers ahead of the steady ones, removed during the sends: each
        // removal moves the steady ones down the list.
        let leading = (0..<2_000).map { _ in sink.signal.observe { _ in } }
        nonisolated(unsafe) var steadySeen = [[Int]](repeating: [], count: 4)
        let steady = steadySeen.indices.map { index in
            sink.signal.observe { value in steadySeen[index].append(value) }
        }
        nonisolated(unsafe) var transientRuns = [[Int]]()

        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            if thread == 0 {
                for value in 0..<sends {
                    sink.send(value: value)
                }
            } else {
                for disposable in leading {
                    disposable.dispose()
                    // And one added at the end and removed (the list grows).
                    let seen = Guarded([Int]())
                    let transient = sink.signal.observe { value in seen.withLock { $0.append(value) } }
                    transient.dispose()
                    transientRuns.append(seen.withLock { $0 })
                }
            }
        }

        for (index, seen) in steadySeen.enumerated() {
            XCTAssert(seen == Array(0..<sends), "steady observer \(index): \(seen.count) values, not 0..<\(sends)")
        }
        for seen in transientRuns {
            XCTAssertEqual(seen, Array(seen.first.map { $0..<($0 + seen.count) } ?? 0..<0))
        }
        steady.forEach { $0.dispose() }
    }

    func testVariableObserversSeeEveryChangeOnceWhileSetElsewhere() {
        let variable = Variable(0)
        let last = 20_000
        nonisolated(unsafe) var runs = [[Int]]()

        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            if thread == 0 {
                for value in 1...last {
                    variable.value = value
                }
            } else {
                for _ in 0..<200 {
                    // Behind a lock: a delivery that began on the other
                    // thread before dispose() may still be finishing.
                    let seen = Guarded([Int]())
                    let disposable = variable.signal.observe { value in
                        seen.withLock { $0.append(value) }
                    }
                    disposable.dispose()
                    runs.append(seen.withLock { $0 })
                }
            }
        }

        // Each observer starts at the value current when it joined and then
        // sees consecutive values: none lost, none twice.
        XCTAssertEqual(runs.count, 200)
        for seen in runs {
            XCTAssertFalse(seen.isEmpty)
            XCTAssertEqual(seen, Array(seen[0]..<(seen[0] + seen.count)))
        }
        XCTAssertEqual(variable.value, last)
    }

    // Each observer sets the other variable; the two threads set one each.
    // When every set waited for the delivery in progress, each thread held
    // one variable's delivery and waited for the other's: a deadlock within
    // a few sets.
    func testTwoWayBindingSetFromTwoThreadsNeitherDeadlocksNorReorders() {
        let sets = 20_000
        let a = Variable(0), b = Variable(0)
        // Observers of one variable never run concurrently, so plain arrays
        // do (ThreadSanitizer checks that too).
        nonisolated(unsafe) var seenByA = [Int](), seenByB = [Int]()
        // Thread 1 sets a to 1, 2, ...; thread 2 sets b to -1, -2, ...; each
        // observer forwards the other thread's values only, so no value
        // bounces back and forth.
        a.signal.observe { value in
            seenByA.append(value)
            if value > 0 { b.value = value }
        }
        b.signal.observe { value in
            seenByB.append(value)
            if value < 0 { a.value = value }
        }

        // A deadlock fails the test here instead of hanging the run.
        guard
            onThreads([
                { for value in 1...sets { a.value = value } },
                { for value in 1...sets { b.value = -value } },
            ])
        else {
            return XCTFail("two-way binding set from two threads: deadlock")
        }

        // Every observer got every value of each thread once, in that
        // thread's order; the initial 0 first.
        for seen in [seenByA, seenByB] {
            XCTAssertEqual(seen.first, 0)
            XCTAssertEqual(seen.filter { $0 > 0 }, Array(1...sets))
            XCTAssertEqual(seen.filter { $0 < 0 }, Array(1...sets).map { -$0 })
            XCTAssertEqual(seen.count, 2 * sets + 1)
        }
        // Each variable holds the value it delivered last.
        XCTAssertEqual(a.value, seenByA.last)
        XCTAssertEqual(b.value, seenByB.last)
    }

    // A store's mutation sets a Variable while, on another thread, an
    // observer of that Variable dispatches to the store. The store's dispatch
    // holds its lock while mutations run, and waited for the Variable's
    // turn, which the other thread held while it waited for that lock: a
    // deadlock within a few sets. A thread inside a store's dispatch now
    // hands its set over as a thread inside a delivery does.
    func testStoreMutationSettingAVariableWhoseObserverDispatchesElsewhereDoesNotDeadlock() {
        let store = Store<MirrorState>(state: MirrorState(), mutations: MirrorMutations(), executor: .immediate)
        assertMirrorDispatchesDoNotDeadlock(
            store.computed.state.mirror, dispatch: { store.actions.dispatch(action: $0) },
            handled: { store.computed.state.mutations }, what: "a store's mutation")
    }

    // The same with Flux's Dispatcher: a callback sets a Variable while, on
    // another thread, an observer of that Variable dispatches (and so waits
    // for the running dispatch to end).
    func testDispatcherCallbackSettingAVariableWhoseObserverDispatchesElsewhereDoesNotDeadlock() {
        let dispatcher = Dispatcher<Int>()
        let mirror = Variable(0)
        let ran = Atomic<Int>(0)
        dispatcher.register { action in
            ran.add(1, ordering: .relaxed)
            if action < 0 { mirror.value = action }
        }
        assertMirrorDispatchesDoNotDeadlock(
            mirror, dispatch: { try? dispatcher.dispatch($0) }, handled: { ran.load(ordering: .relaxed) },
            what: "a dispatcher's callback")
    }

    /// One thread sets `mirror` to 1, 2, ...; another dispatches -1, -2, ...
    /// with `dispatch`, whose handling sets `mirror` to each (negative)
    /// payload; `mirror`'s observer dispatches 0 for each positive value.
    /// Fails on a deadlock; else every value of each thread reached the
    /// observer once, in its order, and `handled` counts every dispatch.
    private func assertMirrorDispatchesDoNotDeadlock(
        _ mirror: Variable<Int>, dispatch: @escaping (Int) -> Void, handled: () -> Int, what: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let sets = 5_000
        // Observers of one variable never run concurrently: a plain array.
        nonisolated(unsafe) var seen = [Int]()
        let observation = mirror.signal.observe { value in
            seen.append(value)
            if value > 0 { dispatch(0) }
        }
        guard
            onThreads([
                { for value in 1...sets { mirror.value = value } },
                { for value in 1...sets { dispatch(-value) } },
            ])
        else {
            return XCTFail("\(what) and a Variable's observer on two threads: deadlock", file: file, line: line)
        }
        XCTAssertEqual(seen.filter { $0 > 0 }, Array(1...sets), file: file, line: line)
        XCTAssertEqual(seen.filter { $0 < 0 }, Array(1...sets).map { -$0 }, file: file, line: line)
        XCTAssertEqual(handled(), 2 * sets, "every dispatch was handled", file: file, line: line)
        observation.dispose()
    }

    // A binding as UI code writes it: each side sets the other when they
    // differ. Both threads' sets return, and the two sides end up equal.
    // (Were a set handed to the other thread stored before its delivery, the
    // two threads would trade stale values forever.) Values do travel back
    // and forth a while before settling: fewer sets keep it quick.
    func testEqualityGuardedTwoWayBindingSettlesWhenSetFromTwoThreads() {
        let sets = 5_000
        let a = Variable(0), b = Variable(0)
        let bindings = [
            a.signal.observe { value in if b.value != value { b.value = value } },
            b.signal.observe { value in if a.value != value { a.value = value } },
        ]

        guard
            onThreads([
                { for value in 1...sets { a.value = value } },
                { for value in 1...sets { b.value = -value } },
            ])
        else {
            return XCTFail("two-way binding set from two threads: deadlock")
        }
        XCTAssertEqual(a.value, b.value)
        bindings.forEach { $0.dispose() }
    }

    // Thread 1 sets 1; while it delivers 1, thread 2, inside a delivery of
    // another sink, sets 2, handed to thread 1; then thread 1's observer sets
    // 3, a nested set. The nested set stored at once and the handed-over one
    // stored when delivered, after it: `value` ended at 2 though 3 was
    // delivered last, and a new observer started from 3.
    func testSetInsideObserverAfterAHandedOverSetLeavesValueAtTheLastDelivered() {
        let variable = Variable(0)
        let trigger = Sink<Void>()
        let delivering = DispatchSemaphore(value: 0), handedOver = DispatchSemaphore(value: 0)
        let gates = Gates()
        // Observers of one variable never run concurrently: plain variables.
        nonisolated(unsafe) var seen = [Int](), readWhileSeen = [Int](), readBack = -1
        variable.signal.observe { value in
            seen.append(value)
            readWhileSeen.append(variable.value)
            if value == 1 {
                delivering.signal()
                gates.pass(handedOver)
                variable.value = 3
                readBack = variable.value
            }
        }
        trigger.signal.observe {
            gates.pass(delivering)
            // Inside trigger's delivery, while thread 1 delivers: handed over.
            variable.value = 2
            handedOver.signal()
        }

        guard onThreads([{ variable.value = 1 }, { trigger.send(value: ()) }], seconds: 30) else {
            return XCTFail("a set handed over while a nested set is made: deadlock")
        }
        XCTAssertTrue(gates.allPassed)
        XCTAssertEqual(seen, [0, 1, 2, 3])
        // The nested set reads back at once ...
        XCTAssertEqual(readBack, 3)
        // ... and each observer call reads the value it is given.
        XCTAssertEqual(readWhileSeen, [0, 1, 2, 3])
        XCTAssertEqual(variable.value, 3)
        var first: Int?
        variable.signal.observe { first = first ?? $0 }.dispose()
        XCTAssertEqual(first, 3)
    }

    // Four stores, no store shared: A and D of one State type, B and C of
    // another. Thread 1 dispatches to A, whose mutation dispatches to B;
    // thread 2 dispatches to C, whose mutation dispatches to D. Each thread
    // holds its first type's dispatch lock when it dispatches across, so
    // waiting for the other type's lock deadlocked both (VueFlux, with a lock
    // per dispatcher, does not). A thread inside a dispatch now hands its
    // dispatch to the holder instead.
    func testStoresOfTwoStateTypesDispatchingAcrossFromTwoThreadsDoNotDeadlock() {
        let a = crossStore(FirstType.self), d = crossStore(FirstType.self)
        let b = crossStore(SecondType.self), c = crossStore(SecondType.self)
        let inA = DispatchSemaphore(value: 0), inC = DispatchSemaphore(value: 0)
        let gates = Gates()
        a.computed.state.onCommit = { action in
            guard action == 1 else { return }
            inA.signal()
            gates.pass(inC)
            b.actions.dispatch(action: 2)
        }
        c.computed.state.onCommit = { action in
            guard action == 1 else { return }
            inC.signal()
            gates.pass(inA)
            d.actions.dispatch(action: 2)
        }

        guard onThreads([{ a.actions.dispatch(action: 1) }, { c.actions.dispatch(action: 1) }], seconds: 30) else {
            return XCTFail("stores of two State types dispatching across from two threads: deadlock")
        }
        // Both threads were inside their first dispatch when they dispatched across.
        XCTAssertTrue(gates.allPassed)
        // Every commit ran, once.
        XCTAssertEqual(a.computed.state.commits, [1])
        XCTAssertEqual(b.computed.state.commits, [2])
        XCTAssertEqual(c.computed.state.commits, [1])
        XCTAssertEqual(d.computed.state.commits, [2])
    }

    // A registered store's init that sends to a sink while another thread
    // delivers it, whose observer asks for that very store class: the
    // observer waits for the init to end, so the init must not wait for the
    // delivery; its send is handed to the delivering thread instead.
    func testSendFromARegisteredStoresInitWhileItsClassIsAwaitedByTheDeliveryDoesNotDeadlock() {
        let dispatcher = Dispatcher<InitAction>()
        let sink = Sink<Int>()
        let inObserver = DispatchSemaphore(value: 0)
        let gates = Gates()
        let received = Mutex<[Int]>([])
        nonisolated(unsafe) var gotFromObserver: GatedInit?
        defer { InitGate.shared.withLock { $0 = {} } }
        InitGate.shared.withLock {
            $0 = {
                InitGate.inInit.signal()
                gates.pass(inObserver)
                sink.send(value: 1)
            }
        }
        sink.signal.observe { value in
            received.withLock { $0.append(value) }
            guard value == 0 else { return }
            inObserver.signal()
            gates.pass(InitGate.inInit)
            gotFromObserver = dispatcher.registerStore(GatedInit.self)
        }
        nonisolated(unsafe) var made: GatedInit?
        guard
            onThreads(
                [{ sink.send(value: 0) }, { made = dispatcher.registerStore(GatedInit.self) }],
                seconds: 30)
        else {
            return XCTFail("a registered store's init sending to a sink whose delivery waits for its class: deadlock")
        }
        XCTAssertTrue(gates.allPassed)
        XCTAssertTrue(made === gotFromObserver)
        // The init's send was delivered, by the delivering thread, after the value it was delivering.
        XCTAssertEqual(received.withLock { $0 }, [0, 1])
        dispatcher.removeAllStores()
    }

    // The same with a State type's dispatch: a registered store's init
    // dispatching while another thread's commit of that type asks for the
    // store's class hands its dispatch to that thread.
    func testDispatchFromARegisteredStoresInitWhileItsClassIsAwaitedByACommitDoesNotDeadlock() {
        let dispatcher = Dispatcher<InitAction>()
        let holder = crossStore(FourthType.self), other = crossStore(FourthType.self)
        let inCommit = DispatchSemaphore(value: 0)
        let gates = Gates()
        defer { InitGate.shared.withLock { $0 = {} } }
        InitGate.shared.withLock {
            $0 = {
                InitGate.inInit.signal()
                gates.pass(inCommit)
                other.actions.dispatch(action: 2)
            }
        }
        nonisolated(unsafe) var gotFromCommit: GatedInit?
        holder.computed.state.onCommit = { _ in
            inCommit.signal()
            gates.pass(InitGate.inInit)
            gotFromCommit = dispatcher.registerStore(GatedInit.self)
        }
        nonisolated(unsafe) var made: GatedInit?
        guard
            onThreads(
                [{ holder.actions.dispatch(action: 1) }, { made = dispatcher.registerStore(GatedInit.self) }],
                seconds: 30)
        else {
            return XCTFail("a registered store's init dispatching while a commit waits for its class: deadlock")
        }
        XCTAssertTrue(gates.allPassed)
        XCTAssertTrue(made === gotFromCommit)
        XCTAssertEqual(holder.computed.state.commits, [1])
        // Handed to the holder, which committed it before its dispatch returned.
        XCTAssertEqual(other.computed.state.commits, [2])
        dispatcher.removeAllStores()
    }

    // A thread inside no dispatch or delivery still waits for another
    // thread's dispatch of the same State type, and its commit is done when
    // its `dispatch` returns.
    func testDispatchFromOutsideAnyDispatchWaitsForTheHolderAndCommitsBeforeReturning() {
        let holder = crossStore(ThirdType.self), other = crossStore(ThirdType.self)
        let holding = DispatchSemaphore(value: 0), waiterStarts = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let gates = Gates()
        let log = Log()
        nonisolated(unsafe) var waiter: pthread_t?
        nonisolated(unsafe) var committedOnWaiter = false
        holder.computed.state.onCommit = { _ in
            holding.signal()
            gates.pass(release)
            log.append("holder done")
        }
        other.computed.state.onCommit = { _ in
            committedOnWaiter = waiter.map { pthread_equal($0, pthread_self()) != 0 } ?? false
            log.append("other committed")
        }

        guard
            onThreads(
                [
                    { holder.actions.dispatch(action: 1) },
                    {
                        gates.pass(holding)
                        waiter = pthread_self()
                        waiterStarts.signal()
                        other.actions.dispatch(action: 1)
                        log.append("other returned")
                    },
                    {
                        gates.pass(waiterStarts)
                        // Time for the waiter to reach the lock; were it
                        // slower, it would find the lock free: same log.
                        Thread.sleep(forTimeInterval: 0.2)
                        log.append("releasing")
                        release.signal()
                    },
                ], seconds: 30)
        else {
            return XCTFail("a dispatch waiting for another thread's: deadlock")
        }
        XCTAssertTrue(gates.allPassed)
        XCTAssertEqual(log.entries, ["releasing", "holder done", "other committed", "other returned"])
        XCTAssertTrue(committedOnWaiter)
        XCTAssertEqual(other.computed.state.commits, [1])
    }

    // Sinks whose observers send to each other in a ring, from three threads:
    // every send reaches its sink's observer once, in each thread's order.
    func testRingOfSinksSentFromThreeThreadsNeitherDeadlocksNorLoses() {
        let sinks = (0..<3).map { _ in Sink<RingItem>() }
        assertRing(observe: { sinks[$0].signal.observe($1) }, send: { sinks[$0].send(value: $1) })
    }

    // The same ring of Variables: sets handed to another thread's delivery.
    func testRingOfVariablesSetFromThreeThreadsNeitherDeadlocksNorLoses() {
        let variables = (0..<3).map { _ in Variable(RingItem(thread: -1, index: 0)) }
        assertRing(observe: { variables[$0].signal.observe($1) }, send: { variables[$0].value = $1 })
    }

    func testScopedObservingFromTwoThreads() {
        final class Object {}
        let sink = Sink<Int>()
        nonisolated(unsafe) var calls = [0, 0]

        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            for _ in 0..<2_000 {
                let object = Object()
                sink.signal.observe(duringScopeOf: object) { _ in calls[thread] += 1 }
            }
        }

        // Every object is gone: the first send ends all their registrations.
        sink.send(value: 0)
        sink.send(value: 0)
        XCTAssertEqual(calls, [0, 0])
    }

    // Signal.observe: "Once dispose() has returned, the observer is not called
    // again." Also for the call that loses the race to another thread's
    // dispose: it must not return before the winner has removed the observer.
    // Each thread disposes, then sends: any call of the observer breaks it.
    func testDisposeThatLosesARaceToAnotherThreadStillStopsTheObserver() {
        XCTAssertEqual(observerCallsAfterConcurrentDisposes { sink, observer in sink.signal.observe(observer) }, 0)
    }

    func testMappedDisposeThatLosesARaceToAnotherThreadStillStopsTheObserver() {
        XCTAssertEqual(
            observerCallsAfterConcurrentDisposes { sink, observer in sink.signal.map { $0 }.observe(observer) }, 0)
    }

    private func observerCallsAfterConcurrentDisposes(
        _ observe: (Sink<Int>, @escaping (Int) -> Void) -> any Disposable
    ) -> Int {
        let calls = Atomic<Int>(0)
        for _ in 0..<5_000 {
            let sink = Sink<Int>()
            let ready = Atomic<Int>(0)
            nonisolated(unsafe) let disposable = observe(sink) { _ in calls.add(1, ordering: .relaxed) }
            DispatchQueue.concurrentPerform(iterations: 2) { _ in
                ready.add(1, ordering: .relaxed)
                while ready.load(ordering: .relaxed) < 2 {}
                disposable.dispose()
                sink.send(value: 1)
            }
        }
        return calls.load(ordering: .relaxed)
    }

    // dispose() lets go of an observe(on:) observer while the sending thread
    // queues values for it and the queue's threads call it: a call in
    // progress keeps it to its end, and it goes once the last one returns.
    func testObserveOnDisposedWhileAnotherThreadSendsAndTheQueueDelivers() {
        let queue = DispatchQueue(
            label: "testObserveOnDisposedWhileAnotherThreadSendsAndTheQueueDelivers", attributes: .concurrent)
        let rounds = 500
        let gone = GoneCount()
        for _ in 0..<rounds {
            let sink = Sink<Int>()
            let captured = CountsItsDeinit(gone)
            nonisolated(unsafe) let disposable = sink.signal.observe(on: .queue(queue)).map { $0 + 1 }.observe {
                [captured] _ in withExtendedLifetime(captured) {}
            }
            let ready = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 2) { thread in
                ready.add(1, ordering: .relaxed)
                while ready.load(ordering: .relaxed) < 2 {}
                if thread == 0 {
                    for value in 0..<50 { sink.send(value: value) }
                } else {
                    disposable.dispose()
                }
            }
        }
        queue.sync(flags: .barrier) {}
        XCTAssertEqual(gone.count.load(ordering: .relaxed), rounds)
    }

    // A store let go of on one thread while another dispatches to it and a
    // queue runs its commits: its state goes once the commits in progress
    // have returned.
    func testStoreLetGoOfWhileAnotherThreadDispatchesAndTheQueueCommits() {
        let queue = DispatchQueue(
            label: "testStoreLetGoOfWhileAnotherThreadDispatchesAndTheQueueCommits", attributes: .concurrent)
        let rounds = 300
        let gone = GoneCount()
        for _ in 0..<rounds {
            let captured = CountsItsDeinit(gone)
            nonisolated(unsafe) var store: Store<TestState>? = .init(
                state: .init { [captured] _ in withExtendedLifetime(captured) {} },
                mutations: .init(), executor: .queue(queue))
            let actions = store!.actions
            let ready = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 2) { thread in
                ready.add(1, ordering: .relaxed)
                while ready.load(ordering: .relaxed) < 2 {}
                if thread == 0 {
                    for _ in 0..<50 { actions.check() }
                } else {
                    store = nil
                }
            }
        }
        queue.sync(flags: .barrier) {}
        XCTAssertEqual(gone.count.load(ordering: .relaxed), rounds)
    }

    func testDisposableScopeAddAndDisposeFromTwoThreads() {
        for _ in 0..<200 {
            let scope = DisposableScope()
            let disposables = (0..<50).map { _ in AnyDisposable() }

            DispatchQueue.concurrentPerform(iterations: 2) { thread in
                if thread == 0 {
                    for disposable in disposables {
                        scope += disposable
                    }
                } else {
                    scope.dispose()
                }
            }

            // Added before the dispose or after it: disposed either way.
            XCTAssertTrue(scope.isDisposed)
            XCTAssertTrue(disposables.allSatisfy { $0.isDisposed })
        }
    }
}

struct RingItem {
    var thread: Int, index: Int
}

/// Three threads each send 5,000 values to its own node of a ring of three,
/// whose observers pass each value on once around the ring: each node's
/// observer gets every value once, in its sender's order.
private func assertRing(
    observe: (Int, @escaping (RingItem) -> Void) -> Void,
    send: @escaping (Int, RingItem) -> Void,
    file: StaticString = #filePath, line: UInt = #line
) {
    let sends = 5_000
    // One list per node, touched only by that node's observer.
    final class Seen: @unchecked Sendable { var values: [RingItem] = [] }
    let seen = (0..<3).map { _ in Seen() }
    for node in 0..<3 {
        observe(node) { item in
            seen[node].values.append(item)
            // Stops before reaching its sender's node again; a Variable's
            // initial value (thread -1) stays where it is.
            if item.thread >= 0 && (node + 1) % 3 != item.thread {
                send((node + 1) % 3, item)
            }
        }
    }

    guard
        onThreads(
            (0..<3).map { thread in
                { for index in 0..<sends { send(thread, RingItem(thread: thread, index: index)) } }
            })
    else {
        return XCTFail("ring sent from three threads: deadlock", file: file, line: line)
    }
    for node in 0..<3 {
        for thread in 0..<3 {
            XCTAssertEqual(
                seen[node].values.filter { $0.thread == thread }.map(\.index), Array(0..<sends),
                "node \(node), values of thread \(thread)", file: file, line: line)
        }
    }
}

/// Holds a Variable its mutations set (negative actions) and counts them.
private final class MirrorState: State, @unchecked Sendable {
    typealias Action = Int
    typealias Mutations = MirrorMutations
    let mirror = Variable(0)
    // Mutations run one at a time (the store's dispatch is serialized).
    var mutations = 0
}

private struct MirrorMutations: Mutations {
    typealias State = MirrorState
    func commit(action: Int, state: MirrorState) {
        state.mutations += 1
        if action < 0 { state.mirror.value = action }
    }
}

/// A State type per tag: `CrossState<FirstType>` and `CrossState<SecondType>`
/// are two State types, with a dispatch lock each (a test of its own each,
/// so that one whose threads hang leaves the others alone).
private enum FirstType {}
private enum SecondType {}
private enum ThirdType {}
private enum FourthType {}

private final class CrossState<Tag>: State, @unchecked Sendable {
    typealias Action = Int
    typealias Mutations = CrossMutations<Tag>
    // Mutations of one State type run one at a time; read after the threads end.
    var commits: [Int] = []
    var onCommit: (Int) -> Void = { _ in }
}

private struct CrossMutations<Tag>: Mutations {
    typealias State = CrossState<Tag>
    func commit(action: Int, state: CrossState<Tag>) {
        state.commits.append(action)
        state.onCommit(action)
    }
}

private func crossStore<Tag>(_: Tag.Type) -> Store<CrossState<Tag>> {
    Store(state: CrossState<Tag>(), mutations: CrossMutations<Tag>(), executor: .immediate)
}

/// Semaphores a test's threads wait at, with a time limit: a gate that
/// never opens fails the test instead of hanging it.
private final class Gates: @unchecked Sendable {
    private let timedOut = Atomic<Bool>(false)

    func pass(_ gate: DispatchSemaphore) {
        if gate.wait(timeout: .now() + 10) == .timedOut {
            timedOut.store(true, ordering: .relaxed)
        }
    }

    var allPassed: Bool { !timedOut.load(ordering: .relaxed) }
}

/// What a test's threads did, in the order they did it.
private final class Log: @unchecked Sendable {
    private let lock = NSLock()
    private var recorded: [String] = []

    func append(_ entry: String) {
        lock.withLock { recorded.append(entry) }
    }

    var entries: [String] { lock.withLock { recorded } }
}

private enum InitAction: Sendable { case any }

/// What `GatedInit.init` runs (set by the test that uses it).
private enum InitGate {
    static let shared = Mutex<@Sendable () -> Void>({})
    static let inInit = DispatchSemaphore(value: 0)
}

private final class GatedInit: RegisteredStore {
    let store: FluxStore<InitAction>
    init(dispatcher: Dispatcher<InitAction>) {
        store = FluxStore(dispatcher: dispatcher) { _, _ in }
        InitGate.shared.withLock { $0 }()
    }
    var dispatchToken: DispatchToken { store.dispatchToken }
}

/// How many `CountsItsDeinit` of one test have gone: what an observer or a
/// store captured, let go of when it is.
private final class GoneCount: Sendable { let count = Atomic<Int>(0) }

private final class CountsItsDeinit: Sendable {
    let gone: GoneCount
    init(_ gone: GoneCount) { self.gone = gone }
    deinit { gone.count.add(1, ordering: .relaxed) }
}
