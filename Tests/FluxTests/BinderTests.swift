import Foundation
import XCTest
import Flux

final class BinderTests: XCTestCase {
    final class Object {
        var value: Int = 0
    }

    func testBindOnMainThreadExectuor() {
        let object = Object()

        let sink = Sink<Int>()
        let signal = sink.signal

        let binder = Binder<Int>(target: object) { object, value in
            XCTAssertTrue(Thread.isMainThread)
            object.value = value
        }

        _ = binder.bind(signal: signal, on: .mainThread)

        sink.send(value: 1)

        XCTAssertEqual(object.value, 1)
    }

    func testBindOnImmediateExectuor() {
        let object = Object()

        let sink = Sink<Int>()
        let signal = sink.signal

        let expectation = self.expectation(description: "testBindOnImmediateExectuor")

        let binder = Binder<Int>(target: object) { object, value in
            XCTAssertFalse(Thread.isMainThread)
            object.value = value
            expectation.fulfill()
        }

        _ = binder.bind(signal: signal, on: .immediate)

        DispatchQueue.globalDefault().async {
            sink.send(value: 1)
        }

        waitForExpectations(timeout: 1) { _ in
            XCTAssertEqual(object.value, 1)
        }
    }

    func testImmediatelyDisposeBinding() {
        let object = Object()

        let queue = DispatchQueue(label: "testImmediatelyDisposeBinding")

        let sink = Sink<Int>()
        let signal = sink.signal

        let expectation = self.expectation(description: "testImmediatelyDisposeBinding")

        let binder = Binder<Int>(target: object) { object, value in
            object.value = value
            expectation.fulfill()
        }

        let disposable = binder.bind(signal: signal, on: .queue(queue))
        queue.suspend()

        sink.send(value: 1)
        disposable.dispose()

        queue.resume()

        queue.async { expectation.fulfill() }

        waitForExpectations(timeout: 2) { _ in
            XCTAssertEqual(object.value, 0)
        }
    }

    func testUnbindOnTargetDeinit() {
        let sink = Sink<Int>()
        let signal = sink.signal

        var object: Object? = .init()
        var value: Int = 0

        let binder = Binder<Int>(target: object!) { _, int in
            value = int
        }

        let disposable = binder.bind(signal: signal, on: .immediate)

        sink.send(value: 1)

        XCTAssertEqual(value, 1)

        object = nil

        sink.send(value: 2)

        XCTAssertEqual(value, 1)

        XCTAssertTrue(disposable.isDisposed)
    }

    // Beyond VueFlux's suite: a binding (on `.mainThread` by default) is
    // applied before the setter returns on the main thread, also inside
    // `sync` on another queue.
    func testBindingAppliedAtOnceWhenSetOnMainThreadInsideSyncOnAnotherQueue() {
        XCTAssertTrue(Thread.isMainThread)
        let object = Object()
        let variable = Variable(0)
        let disposable = variable.signal.bind(to: object, \.value)

        DispatchQueue(label: "testBindingAppliedAtOnceWhenSetOnMainThreadInsideSyncOnAnotherQueue").sync {
            variable.value = 1
        }

        XCTAssertEqual(object.value, 1)
        disposable.dispose()
    }

    // Binder.bind(signal:on:): a binder whose target is already gone binds
    // nothing and returns a disposable that is already disposed.
    func testBindingAfterTargetDeinitReturnsADisposedDisposable() {
        let sink = Sink<Int>()
        var object: Object? = .init()
        var calls = 0
        let binder = Binder<Int>(target: object!) { _, _ in calls += 1 }
        object = nil

        let disposable = binder.bind(signal: sink.signal, on: .immediate)
        sink.send(value: 1)

        XCTAssertTrue(disposable.isDisposed)
        XCTAssertEqual(calls, 0)
    }

    // A departure from VueFlux (README): a bind to a target already gone
    // does not observe the signal at all; VueFlux observes it (running its
    // producer) and disposes the observation at once.
    func testBindingAfterTargetDeinitDoesNotObserveTheSignal() {
        var produced = 0
        let signal = Signal<Int> { _ in
            produced += 1
            return AnyDisposable()
        }
        var object: Object? = .init()
        let binder = Binder<Int>(target: object!) { _, _ in }
        object = nil

        let disposable = signal.bind(to: binder, on: .immediate)

        XCTAssertTrue(disposable.isDisposed)
        XCTAssertEqual(produced, 0)
    }
}
