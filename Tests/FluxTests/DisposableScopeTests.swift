import Foundation
import Synchronization
import XCTest
import Flux

final class DisposableScopeTests: XCTestCase {
    func testDispose() {
        var value = 0
        let disposableScope = DisposableScope()

        let disposable1 = AnyDisposable {
            value += 1
        }

        let disposable2 = AnyDisposable {
            value += 10
        }

        disposableScope += disposable1
        disposableScope += disposable2

        XCTAssertEqual(value, 0)
        XCTAssertEqual(disposable1.isDisposed, false)
        XCTAssertEqual(disposable2.isDisposed, false)
        XCTAssertEqual(disposableScope.isDisposed, false)

        disposableScope.dispose()

        XCTAssertEqual(value, 11)
        XCTAssertEqual(disposable1.isDisposed, true)
        XCTAssertEqual(disposable2.isDisposed, true)
        XCTAssertEqual(disposableScope.isDisposed, true)
    }

    // An object's scope kept every registration made during its life, also
    // those disposed long ago (and with each its sink's core): a view
    // rebinding itself grew without bound.
    func testScopeLetsGoOfRegistrationsDisposedWhileItsObjectLives() {
        final class Owner {}
        let owner = Owner()
        let sink = Sink<Int>()
        weak var first: AnyObject?
        var received = 0
        for index in 0..<1_000 {
            let disposable = sink.signal.observe(duringScopeOf: owner) { _ in received += 1 }
            if index == 0 { first = disposable as AnyObject }
            disposable.dispose()
        }
        XCTAssertNil(first)
        let kept = sink.signal.observe(duringScopeOf: owner) { _ in received += 1 }
        for _ in 0..<100 {
            _ = sink.signal.observe(duringScopeOf: owner) { _ in }
        }
        sink.send(value: 1)
        XCTAssertEqual(received, 1)
        XCTAssertFalse(kept.isDisposed)
        withExtendedLifetime(owner) {}
    }

    // What was added, disposed or not, is still disposed in order with the
    // scope when some of it is let go of on the way.
    func testDisposeInOrderAfterLettingGoOfDisposed() {
        let scope = DisposableScope()
        var order: [Int] = []
        for index in 0..<100 {
            let disposable = AnyDisposable { order.append(index) }
            scope += disposable
            if index % 2 == 0 { disposable.dispose() }
        }
        order.removeAll()
        scope.dispose()
        XCTAssertEqual(order, Array(stride(from: 1, to: 100, by: 2)))
    }

    // A second dispose() returned while the first, on another thread, was
    // still on an earlier disposal: the observer added after it was still
    // called once the second had returned.
    func testDisposeReturnsWithObserversCanceledWhileAnotherThreadDisposes() {
        let scope = DisposableScope()
        let sink = Sink<Int>()
        let entered = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let received = Mutex(0)
        scope += AnyDisposable {
            entered.signal()
            proceed.wait()
        }
        scope += sink.signal.observe { _ in received.withLock { $0 += 1 } }
        let done = DispatchSemaphore(value: 0)
        let first = Thread {
            scope.dispose()
            done.signal()
        }
        first.start()
        entered.wait()
        scope.dispose()
        sink.send(value: 1)
        proceed.signal()
        done.wait()
        XCTAssertEqual(received.withLock { $0 }, 0)
    }

    // Disposing the scope again from inside one of its disposals disposes
    // the rest before that call returns, still in order.
    func testDisposeFromInsideADisposalDisposesTheRestInOrder() {
        let scope = DisposableScope()
        var order: [Int] = []
        var seenInside: [Int] = []
        scope += AnyDisposable { order.append(0) }
        scope += AnyDisposable {
            order.append(1)
            scope.dispose()
            seenInside = order
        }
        scope += AnyDisposable { order.append(2) }
        scope += AnyDisposable { order.append(3) }
        scope.dispose()
        XCTAssertEqual(seenInside, [0, 1, 2, 3])
        XCTAssertEqual(order, [0, 1, 2, 3])
    }

    // A scope inside itself, directly or through another: the dispose that
    // each disposal makes again must end, as in VueFlux (the second call
    // finds nothing left), not call itself until the stack overflows.
    func testScopeHoldingItselfDisposesOnce() {
        let scope = DisposableScope()
        var runs = 0
        scope += AnyDisposable { runs += 1 }
        scope += scope
        scope.dispose()
        XCTAssertEqual(runs, 1)
        XCTAssertTrue(scope.isDisposed)

        let outer = DisposableScope()
        let inner = DisposableScope()
        var order: [String] = []
        outer += AnyDisposable { order.append("outer") }
        outer += inner
        inner += AnyDisposable { order.append("inner") }
        inner += outer
        outer.dispose()
        XCTAssertEqual(order, ["outer", "inner"])
        XCTAssertTrue(inner.isDisposed)
    }

    func testDisposeOnDeinit() {
        var value = 0
        var disposableScope: DisposableScope? = .init()

        let disposable1 = AnyDisposable {
            value += 1
        }

        let disposable2 = AnyDisposable {
            value += 10
        }

        disposableScope! += disposable1
        disposableScope! += disposable2

        XCTAssertEqual(value, 0)
        XCTAssertEqual(disposable1.isDisposed, false)
        XCTAssertEqual(disposable2.isDisposed, false)
        XCTAssertEqual(disposableScope?.isDisposed, false)

        disposableScope = nil

        XCTAssertEqual(value, 11)
        XCTAssertEqual(disposable1.isDisposed, true)
        XCTAssertEqual(disposable2.isDisposed, true)
    }

    func testAddDisposableToDisposed() {
        var value = 0

        let disposable = AnyDisposable {
            value = 1
        }

        let disposableScope = DisposableScope()

        XCTAssertEqual(value, 0)
        XCTAssertEqual(disposable.isDisposed, false)
        XCTAssertEqual(disposableScope.isDisposed, false)

        disposableScope.dispose()
        disposableScope += disposable

        XCTAssertEqual(value, 1)
        XCTAssertEqual(disposable.isDisposed, true)
        XCTAssertEqual(disposableScope.isDisposed, true)
    }

    func testAddDiposableAlreadyDisposed() {
        var disposable: DisposableScope? = .init()
        weak let disposableRef = disposable

        disposable?.dispose()

        let disposableScope = DisposableScope()
        disposableScope += disposable!

        disposable = nil

        XCTAssertNil(disposableRef)
    }

    // As VueFlux's add: a disposable that says it is disposed is disposed
    // again (and not kept), as one added to a disposed scope is.
    func testAddingADisposedDisposableDisposesItAgain() {
        final class Counting: Disposable {
            var isDisposed = true
            var disposals = 0
            func dispose() { disposals += 1 }
        }
        let disposable = Counting()
        let disposableScope = DisposableScope()

        disposableScope += disposable

        XCTAssertEqual(disposable.disposals, 1)
        disposableScope.dispose()
        XCTAssertEqual(disposable.disposals, 1)
    }

    // VUEFLUX.md 3: dispose() lets go of what was added, though the scope is
    // kept.
    func testDisposeLetsGoOfWhatWasAdded() {
        let disposableScope = DisposableScope()
        var disposable: AnyDisposable? = .init()
        weak let disposableRef = disposable

        disposableScope += disposable!
        disposable = nil

        XCTAssertNotNil(disposableRef)

        disposableScope.dispose()

        XCTAssertNil(disposableRef)
        withExtendedLifetime(disposableScope) {}
    }

    // A scope made from a sequence holds it, and disposes it in order.
    func testScopeMadeFromASequenceDisposesItInOrder() {
        var order = [Int]()
        let disposables = (0..<3).map { index in AnyDisposable { order.append(index) } }
        let disposableScope = DisposableScope(disposables.lazy.map { $0 as any Disposable })

        XCTAssertEqual(order, [])

        disposableScope.dispose()

        XCTAssertEqual(order, [0, 1, 2])
        XCTAssertTrue(disposables.allSatisfy(\.isDisposed))
    }
}
