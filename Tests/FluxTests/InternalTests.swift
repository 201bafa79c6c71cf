import Foundation
import Synchronization
import XCTest
@testable import Flux

// VueFlux's tests of its internal helpers, ported to this module's
// equivalents: Lock -> PosixLock, Storage -> ObserverList,
// CancelableProcedure (same name). (AtomicBool has no equivalent here: the
// flags are Synchronization.Atomic<Bool>.)

final class LockTests: XCTestCase {
    func testLock() {
        func runTest(synchronized: @escaping @Sendable (() -> Void) -> Void) {
            let queue = DispatchQueue(label: "testLock", attributes: .concurrent)
            let group = DispatchGroup()

            nonisolated(unsafe) var value = 0
            for _ in (1...100) {
                queue.async(group: group) {
                    synchronized {
                        value += 1
                        value -= 1
                        value += 2
                        value -= 2
                    }
                }
            }

            _ = group.wait(timeout: .now() + 10)
            XCTAssertEqual(value, 0)
        }

        let lock = PosixLock(recursive: false)

        runTest { criticalSection in
            lock.lock()
            criticalSection()
            lock.unlock()
        }

        let recursiveLock = PosixLock(recursive: true)

        runTest { criticalSection in
            recursiveLock.lock()
            recursiveLock.lock()
            criticalSection()
            recursiveLock.unlock()
            recursiveLock.unlock()
        }
    }
}

final class StorageTests: XCTestCase {
    func testStorage() {
        var storage = ObserverList<Int>()

        let additionValue1 = 1
        let additionValue2 = 2

        let key1 = storage.add(additionValue1)
        let key2 = storage.add(additionValue2)

        XCTAssertEqual(storage.elements[0], additionValue1)
        XCTAssertEqual(storage.elements[1], additionValue2)

        var targetValue1 = 0
        for additionValue in storage.elements {
            targetValue1 += additionValue
        }

        XCTAssertEqual(targetValue1, additionValue1 + additionValue2)

        let removed1 = storage.remove(for: key1)
        XCTAssertEqual(removed1, additionValue1)

        var targetValue2 = 0
        for additionValue in storage.elements {
            targetValue2 += additionValue
        }

        XCTAssertEqual(targetValue2, additionValue2)

        let removed2 = storage.remove(for: key2)
        XCTAssertEqual(removed2, additionValue2)

        var targetValue3 = 0
        for additionValue in storage.elements {
            targetValue3 += additionValue
        }

        let removed3 = storage.remove(for: key2)
        XCTAssertNil(removed3)

        XCTAssertEqual(targetValue3, 0)
    }
}

final class CancelableProcedureTests: XCTestCase {
    func testVoidProcedure() {
        var value = 0

        let procedure = CancelableProcedure<Void> {
            value += 1
        }

        XCTAssertEqual(value, 0)

        procedure.execute(with: ())

        XCTAssertEqual(value, 1)

        procedure.cancel()
        procedure.execute(with: ())

        XCTAssertEqual(value, 1)

        procedure.cancel()
        procedure.execute(with: ())

        XCTAssertEqual(value, 1)
    }

    func testValueWorkItem() {
        var value = 0

        let procedure = CancelableProcedure { int in
            value = int
        }

        XCTAssertEqual(value, 0)

        procedure.execute(with: 1)

        XCTAssertFalse(procedure.isCanceled)
        XCTAssertEqual(value, 1)

        procedure.cancel()
        procedure.execute(with: 2)

        XCTAssertTrue(procedure.isCanceled)
        XCTAssertEqual(value, 1)

        procedure.cancel()
        procedure.execute(with: 3)

        XCTAssertTrue(procedure.isCanceled)
        XCTAssertEqual(value, 1)
    }

    func testCancelProcedureAsync() {
        let queue = DispatchQueue(label: "testCancelProcedureAsync")

        var value = 0

        let expectation = self.expectation(description: "testCancelProcedureAsync")

        let procedure = CancelableProcedure { int in
            value = int
        }

        XCTAssertFalse(procedure.isCanceled)

        queue.suspend()

        queue.async {
            procedure.execute(with: 1)
        }

        procedure.cancel()
        queue.resume()

        queue.async { expectation.fulfill() }

        waitForExpectations(timeout: 1) { _ in
            XCTAssertTrue(procedure.isCanceled)
            XCTAssertEqual(value, 0)
        }
    }
}

final class ScopeRegistryTests: XCTestCase {
    // A sweep holds each live object it looks at for a moment. Should
    // another thread drop its last reference meanwhile, the object's deinit
    // runs where the sweep lets go of it -- which used to be under the
    // registry's lock, where a deinit that observes during an object's scope
    // deadlocks. (There the moment was a few instructions long, which no
    // test hit; now it lasts the sweep, so one that let go under the lock
    // would be caught.) One thread registers objects it keeps (the table
    // doubles, and is swept each time); another registers victims and,
    // while a sweep holds the lock, drops them one by one. A victim's
    // deinit on the sweeping thread checks, with a timed lock, whether that
    // thread holds the registry's lock.
    func testASweepLetsGoOfTheObjectsItFoundAliveWithItsLockReleased() {
        final class Tally: Sendable {
            let sweeper = Atomic<UInt>(0)  // the sweeping thread's pthread_t (glibc: an integer)
            let underLock = Atomic(0)
            let bySweeper = Atomic(0)
            let stop = Atomic(false)
        }
        final class Victim {
            let tally: Tally
            init(_ tally: Tally) { self.tally = tally }
            deinit {
                guard pthread_equal(tally.sweeper.load(ordering: .acquiring), pthread_self()) != 0 else { return }
                var deadline = timespec()
                clock_gettime(CLOCK_REALTIME, &deadline)
                deadline.tv_nsec += 50_000_000
                if deadline.tv_nsec >= 1_000_000_000 {
                    deadline.tv_sec += 1
                    deadline.tv_nsec -= 1_000_000_000
                }
                // Another thread holds the lock only for moments; this
                // thread, for good (a plain mutex it already holds).
                if pthread_mutex_timedlock(ScopeRegistry.shared.lock.mutex, &deadline) == 0 {
                    pthread_mutex_unlock(ScopeRegistry.shared.lock.mutex)
                    tally.bySweeper.add(1, ordering: .relaxed)
                } else {
                    tally.underLock.add(1, ordering: .relaxed)
                }
            }
        }
        final class Kept {}
        let tally = Tally()
        let sink = Sink<Int>()
        // From a small table: one that earlier tests grew would first sweep
        // only after as many registrations again, maybe more than the limit
        // below (it did: no sweep in 10 s, and the test failed).
        ScopeRegistry.shared.sweepAtNextRegistration()
        let sweeper: () -> Void = {
            tally.sweeper.store(pthread_self(), ordering: .releasing)
            // Kept, so that the table grows (a freed object's address,
            // reused, would only replace its entry); until the sweeper has
            // let go of a victim, or 500,000 objects, or 10 s.
            let deadline = ContinuousClock.now + .seconds(10)
            var kept: [Kept] = []
            while kept.count < 500_000 && tally.bySweeper.load(ordering: .relaxed) == 0
                && ContinuousClock.now < deadline
            {
                kept.append(Kept())
                sink.signal.observe(duringScopeOf: kept[kept.count - 1]) { _ in }
            }
            tally.stop.store(true, ordering: .relaxed)
        }
        let dropper: () -> Void = {
            let mutex = ScopeRegistry.shared.lock.mutex
            while !tally.stop.load(ordering: .relaxed) {
                var victims = (0..<500).map { _ in Victim(tally) }
                for victim in victims { sink.signal.observe(duringScopeOf: victim) { _ in } }
                // A sweep: the lock held for 20 µs on end (a registration
                // holds it for about one). While it lasts, a victim every
                // 10 µs, so that the sweep finds some alive and others gone.
                var busySince: ContinuousClock.Instant?
                var lastDrop = ContinuousClock.now
                while !tally.stop.load(ordering: .relaxed) && !victims.isEmpty {
                    // A look every 2 µs: a trylock that succeeds makes the
                    // sweeper wait, and waiting slows it down a lot.
                    let now = ContinuousClock.now
                    while ContinuousClock.now - now < .microseconds(2) {}
                    if pthread_mutex_trylock(mutex) == 0 {
                        pthread_mutex_unlock(mutex)
                        busySince = nil
                    } else if let since = busySince {
                        if now - since > .microseconds(20) && now - lastDrop > .microseconds(10) {
                            victims.removeLast()
                            lastDrop = now
                        }
                    } else {
                        busySince = now
                    }
                }
                victims.removeAll()
            }
        }
        XCTAssertTrue(onThreads([sweeper, dropper]), "no thread got stuck")
        XCTAssertEqual(tally.underLock.load(ordering: .relaxed), 0, "a deinit ran under the registry's lock")
        XCTAssertGreaterThan(tally.bySweeper.load(ordering: .relaxed), 0, "the sweeper let go of a victim")
    }

    // A dead object's scope, found when a new object takes its address, is
    // disposed outside the registry's lock: disposing it lets go of its
    // observers, whose deinit may register (which would deadlock under it).
    func testADeadObjectsScopeFoundAtAReusedAddressIsDisposedWithTheLockReleased() {
        final class Object {}
        final class Witness {
            let onDeinit: (Bool) -> Void
            init(_ onDeinit: @escaping (Bool) -> Void) { self.onDeinit = onDeinit }
            deinit {
                // One thread: a trylock that fails means this thread holds it.
                let free = pthread_mutex_trylock(ScopeRegistry.shared.lock.mutex) == 0
                if free { pthread_mutex_unlock(ScopeRegistry.shared.lock.mutex) }
                onDeinit(free)
            }
        }
        let sink = Sink<Int>()
        var released = 0
        var underLock = 0

        // No send: only the registry finds the dead objects, each when a
        // new one reuses its address (or at a sweep).
        for _ in 1...200 {
            let witness = Witness { free in
                released += 1
                if !free { underLock += 1 }
            }
            sink.signal.observe(duringScopeOf: Object()) { _ in _ = witness }
        }

        XCTAssertGreaterThan(released, 0)
        XCTAssertEqual(underLock, 0, "a scope was disposed under the registry's lock")
    }
}
