import Foundation
import XCTest
import Flux

final class ExecutorTests: XCTestCase {
    func testImmediateExcutor() {
        let excutor = Executor.immediate

        var value = 0

        excutor.execute { value = 1 }
        value = 2

        XCTAssertEqual(value, 2)
    }

    func testMainThreadExcutor() {
        let excutor = Executor.mainThread

        let expectation = self.expectation(description: "testMainThreadExcutor")

        DispatchQueue.globalDefault().async {
            excutor.execute {
                XCTAssertTrue(Thread.isMainThread)
                expectation.fulfill()
            }
        }

        waitForExpectations(timeout: 1)
    }

    func testSerialMainThreadExcutor() {
        let excutor = Executor.mainThread

        let expectation = self.expectation(description: "testSerialMainThreadExcutor")

        nonisolated(unsafe) var array = [Int]()

        let group = DispatchGroup()

        DispatchQueue.globalDefault().async(group: group) {
            excutor.execute {
                array.append(0)
            }
        }

        group.wait()

        DispatchQueue.globalDefault().async(group: group) {
            excutor.execute {
                array.append(1)
            }

            excutor.execute {
                array.append(2)
            }
        }

        group.wait()

        excutor.execute {
            array.append(3)
            expectation.fulfill()
        }

        waitForExpectations(timeout: 1) { _ in
            XCTAssertEqual(array, [0, 1, 2, 3])
        }
    }

    // Beyond VueFlux's suite: a function queued on the main queue is still
    // pending while it runs, so a call it makes on the same executor value
    // is queued behind it rather than run inline inside it.
    func testMainThreadExecutorQueuesACallMadeInsideAQueuedFunction() {
        let excutor = Executor.mainThread

        let expectation = self.expectation(description: "testMainThreadExecutorQueuesACallMadeInsideAQueuedFunction")

        nonisolated(unsafe) var log = [String]()

        DispatchQueue.globalDefault().async {
            excutor.execute {
                log.append("outer begins")
                excutor.execute {
                    log.append("inner")
                    expectation.fulfill()
                }
                log.append("outer ends")
            }
        }

        waitForExpectations(timeout: 1) { _ in
            XCTAssertEqual(log, ["outer begins", "outer ends", "inner"])
        }
    }

    func testDispatchQueueExcutor() {
        let excutor = Executor.queue(.globalDefault())

        let expectation = self.expectation(description: "testDispatchQueueExcutor")

        var value = 0

        excutor.execute {
            XCTAssertFalse(Thread.isMainThread)
            value = 1
            expectation.fulfill()
        }

        waitForExpectations(timeout: 1) { _ in
            XCTAssertEqual(value, 1)
        }
    }

    // Beyond VueFlux's suite. On the main thread inside `sync` on another
    // queue the main queue is not the current queue, yet this is the main
    // thread: the function runs inline.
    func testMainThreadExecutorRunsInlineOnMainThreadInsideSyncOnAnotherQueue() {
        XCTAssertTrue(Thread.isMainThread)
        let excutor = Executor.mainThread
        var ran = false

        DispatchQueue(label: "testMainThreadExecutorRunsInlineOnMainThreadInsideSyncOnAnotherQueue").sync {
            excutor.execute { ran = true }
        }

        XCTAssertTrue(ran)
    }

    // Beyond VueFlux's suite, as documented: each `Executor.mainThread`
    // access is a new value with its own pending count. Work another value
    // has queued on the main queue (it cannot run: this test holds the main
    // thread) does not make a fresh value queue too, while that value itself
    // queues behind its pending work.
    func testEachMainThreadExecutorValueKeepsItsOwnCallOrder() {
        XCTAssertTrue(Thread.isMainThread)
        let busy = Executor.mainThread
        nonisolated(unsafe) var log = [String]()

        let queued = DispatchGroup()
        DispatchQueue.globalDefault().async(group: queued) {
            busy.execute { log.append("busy: from another thread") }
        }
        queued.wait()

        Executor.mainThread.execute { log.append("fresh value: inline") }
        busy.execute { log.append("busy: behind its pending work") }
        XCTAssertEqual(log, ["fresh value: inline"])

        let expectation = self.expectation(description: "testEachMainThreadExecutorValueKeepsItsOwnCallOrder")
        busy.execute { expectation.fulfill() }
        waitForExpectations(timeout: 10) { _ in
            XCTAssertEqual(
                log, ["fresh value: inline", "busy: from another thread", "busy: behind its pending work"])
        }
    }

    // Beyond VueFlux's suite: `.queue(q)` always goes through `q.async`,
    // also when called from work running on `q`, so the function runs after
    // that work, never inside it.
    func testQueueExecutorCalledOnItsOwnQueueStillRunsLater() {
        let queue = DispatchQueue(label: "testQueueExecutorCalledOnItsOwnQueueStillRunsLater")
        let excutor = Executor.queue(queue)
        let expectation = self.expectation(description: "testQueueExecutorCalledOnItsOwnQueueStillRunsLater")
        nonisolated(unsafe) var log = [String]()

        queue.async {
            excutor.execute {
                log.append("function")
                expectation.fulfill()
            }
            log.append("work ends")
        }

        waitForExpectations(timeout: 10) { _ in
            XCTAssertEqual(log, ["work ends", "function"])
        }
    }

    // Beyond VueFlux's suite (whose test above would pass for an executor
    // that queued): `.immediate` runs the function on the calling thread
    // before `execute` returns.
    func testImmediateExecutorRunsOnTheCallingThreadBeforeExecuteReturns() {
        let excutor = Executor.immediate

        nonisolated(unsafe) var log = [String]()

        let group = DispatchGroup()
        DispatchQueue.globalDefault().async(group: group) {
            let caller = pthread_self()
            excutor.execute {
                log.append(pthread_equal(pthread_self(), caller) != 0 ? "on the caller" : "elsewhere")
            }
            log.append("returned")
        }
        group.wait()

        XCTAssertEqual(log, ["on the caller", "returned"])
    }
}
