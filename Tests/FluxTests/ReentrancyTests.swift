import Foundation
import XCTest
import Flux

// Beyond VueFlux, which deadlocks in each of these: a send (or a Variable
// set) made from inside an observer of the same sink, on the delivering
// thread, is delivered after the current delivery ends; `value` is readable
// inside an observer.
final class ReentrancyTests: XCTestCase {
    func testNestedSendIsDeliveredAfterCurrentDelivery() {
        let sink = Sink<Int>()
        var log = [String]()

        sink.signal.observe { int in
            log.append("a\(int)")
            if int == 1 {
                sink.send(value: 2)
                log.append("a sent 2")
            }
        }
        sink.signal.observe { int in
            log.append("b\(int)")
        }

        sink.send(value: 1)

        XCTAssertEqual(log, ["a1", "a sent 2", "b1", "a2", "b2"])
    }

    func testEveryObserverSeesNestedSendsInOneOrder() {
        let sink = Sink<Int>()
        var seenByA = [Int](), seenByB = [Int](), seenByC = [Int]()

        sink.signal.observe { int in
            seenByA.append(int)
            if int == 1 { sink.send(value: 2) }
        }
        sink.signal.observe { int in
            seenByB.append(int)
            if int == 1 { sink.send(value: 3) }
            if int == 2 { sink.send(value: 4) }
        }
        sink.signal.observe { int in
            seenByC.append(int)
        }

        sink.send(value: 1)

        XCTAssertEqual(seenByA, [1, 2, 3, 4])
        XCTAssertEqual(seenByB, [1, 2, 3, 4])
        XCTAssertEqual(seenByC, [1, 2, 3, 4])
    }

    func testSendAfterNestedDeliveryIsNotQueued() {
        let sink = Sink<Int>()
        var seen = [Int]()
        sink.signal.observe { int in
            seen.append(int)
            if int == 1 { sink.send(value: 2) }
        }

        sink.send(value: 1)
        XCTAssertEqual(seen, [1, 2])

        // The delivery is over: the next send is delivered inline again.
        sink.send(value: 3)
        XCTAssertEqual(seen, [1, 2, 3])
    }

    func testObserverAddedDuringDeliveryGetsOnlyLaterValues() {
        let sink = Sink<Int>()
        var seenByLate = [Int]()
        var late: Disposable?

        sink.signal.observe { int in
            if int == 1 {
                sink.send(value: 2)
                late = sink.signal.observe { int in
                    seenByLate.append(int)
                }
            }
        }

        sink.send(value: 1)
        sink.send(value: 3)

        // Misses the 1 being delivered when it joined; gets the 2 queued behind it.
        XCTAssertEqual(seenByLate, [2, 3])
        late?.dispose()
    }

    func testSendsBetweenTwoSinksFromTheirObservers() {
        let ping = Sink<Int>()
        let pong = Sink<Int>()
        var log = [String]()

        ping.signal.observe { int in
            log.append("ping\(int)")
            if int < 3 { pong.send(value: int + 1) }
        }
        pong.signal.observe { int in
            log.append("pong\(int)")
            ping.send(value: int + 1)
        }

        ping.send(value: 0)

        // pong's delivery is nested in ping's, so ping's next value waits
        // for the ping observer in progress; pong has no delivery in progress.
        XCTAssertEqual(log, ["ping0", "pong1", "ping2", "pong3", "ping4"])
    }

    func testDisposeInsideNestedDelivery() {
        let sink = Sink<Int>()
        var seen = [Int]()
        var disposable: Disposable?

        disposable = sink.signal.observe { int in
            seen.append(int)
        }
        sink.signal.observe { int in
            if int == 1 {
                sink.send(value: 2)
                disposable?.dispose()
            }
        }

        sink.send(value: 1)

        // Disposed before the queued 2 was delivered: never sees it.
        XCTAssertEqual(seen, [1])
    }

    // An observer of a mapped signal that disposes itself: it is let go of
    // when its own call returns, and what it captured may then, in its
    // deinit, send to the same sink (delivered after the current delivery)
    // and observe it again (which gets that value, queued behind the
    // delivery in progress).
    func testMappedObserverLetGoOfAfterDisposingItselfMaySendFromItsCapturesDeinit() {
        final class Captured {
            let onDeinit: () -> Void
            init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
            deinit { onDeinit() }
        }
        let sink = Sink<Int>()
        var log = [String]()
        var again: (any Disposable)?
        var captured: Captured? = .init {
            log.append("deinit")
            sink.send(value: 2)
            again = sink.signal.map { $0 * 10 }.observe { log.append("again \($0)") }
        }
        var disposable: (any Disposable)?
        disposable = sink.signal.map { $0 * 10 }.observe { [captured] int in
            withExtendedLifetime(captured) {
                log.append("first \(int)")
                disposable?.dispose()
                log.append("disposed")
            }
        }
        captured = nil

        sink.send(value: 1)

        XCTAssertEqual(log, ["first 10", "disposed", "deinit", "again 20"])
        sink.send(value: 3)
        XCTAssertEqual(log, ["first 10", "disposed", "deinit", "again 20", "again 30"])
        withExtendedLifetime(again) {}
    }

    func testVariableValueIsReadableInsideObserver() {
        let variable = Variable(0)
        var read = [Int]()

        variable.signal.observe { _ in
            read.append(variable.value)
        }
        variable.value = 1
        variable.value = 2

        XCTAssertEqual(read, [0, 1, 2])
    }

    func testVariableSetInsideObserver() {
        let variable = Variable(0)
        var seenByA = [Int](), seenByB = [Int]()
        var readAfterSet = [Int]()

        variable.signal.observe { int in
            seenByA.append(int)
            if int > 0 && int < 3 {
                variable.value = int + 1
                readAfterSet.append(variable.value)
            }
        }
        variable.signal.observe { int in
            seenByB.append(int)
        }

        variable.value = 1

        XCTAssertEqual(variable.value, 3)
        XCTAssertEqual(seenByA, [0, 1, 2, 3])
        XCTAssertEqual(seenByB, [0, 1, 2, 3])
        // A nested set stores at once; only its delivery waits.
        XCTAssertEqual(readAfterSet, [2, 3])
    }

    func testObserveVariableInsideObserver() {
        let variable = Variable(0)
        var seenByLate = [Int]()
        var lateDisposable: Disposable?

        variable.signal.observe { int in
            if int == 1 {
                variable.value = 2
                lateDisposable = variable.signal.observe { int in
                    seenByLate.append(int)
                }
            }
        }

        variable.value = 1
        variable.value = 3

        // The late observer joins after the queued delivery of 2: it starts
        // from 2, then sees 3; nothing lost, nothing twice.
        XCTAssertEqual(seenByLate, [2, 3])

        lateDisposable?.dispose()
        variable.value = 4
        XCTAssertEqual(seenByLate, [2, 3])
    }

    func testObserveVariableInsideObserverDisposedBeforeJoining() {
        let variable = Variable(0)
        var seenByLate = [Int]()

        variable.signal.observe { int in
            if int == 1 {
                let late = variable.signal.observe { int in
                    seenByLate.append(int)
                }
                late.dispose()
                XCTAssertTrue(late.isDisposed)
            }
        }

        variable.value = 1
        variable.value = 2

        XCTAssertEqual(seenByLate, [])
    }

    func testCrossThreadSendsStaySerializedWithNestedSends() {
        let sink = Sink<Int>()
        let queue = DispatchQueue(label: "testCrossThreadSendsStaySerializedWithNestedSends", attributes: .concurrent)
        let group = DispatchGroup()

        // Touched only by observers: safe only if deliveries never overlap
        // (ThreadSanitizer checks that in `make check-thread`).
        nonisolated(unsafe) var inDelivery = false
        nonisolated(unsafe) var seen = [Int]()

        sink.signal.observe { int in
            XCTAssertFalse(inDelivery)
            inDelivery = true
            seen.append(int)
            if int > 0 {
                sink.send(value: -int)
            }
            inDelivery = false
        }

        for index in 1...100 {
            queue.async(group: group) {
                sink.send(value: index)
            }
        }

        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(seen.count, 200)
        // Each nested send comes right after the value that caused it.
        for pair in stride(from: 0, to: seen.count, by: 2) {
            XCTAssertGreaterThan(seen[pair], 0)
            XCTAssertEqual(seen[pair + 1], -seen[pair])
        }
    }

    func testCrossThreadVariableSetsWithReadsInsideObserver() {
        let variable = Variable(0)
        let queue = DispatchQueue(label: "testCrossThreadVariableSetsWithReadsInsideObserver", attributes: .concurrent)
        let group = DispatchGroup()
        nonisolated(unsafe) var mismatches = 0
        nonisolated(unsafe) var deliveries = 0

        variable.signal.observe { int in
            deliveries += 1
            // Sets are serialized with their deliveries: while one is being
            // delivered, no other set can have stored a newer value.
            if variable.value != int { mismatches += 1 }
        }

        for index in 1...100 {
            queue.async(group: group) {
                variable.value = index
            }
        }

        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(deliveries, 101)
        XCTAssertEqual(mismatches, 0)
    }
}
