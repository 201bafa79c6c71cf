import Foundation
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
