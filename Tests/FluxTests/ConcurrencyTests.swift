import Foundation
import XCTest
import Flux
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
                    let seen = Mutex([Int]())
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
