import Foundation
import XCTest
import Flux

final class SinkSignalTests: XCTestCase {
    private final class Object {
        var value = 0
    }

    func testObserve() {
        let sink = Sink<Int>()
        let signal = sink.signal

        var value = 0

        signal.observe { int in
            value += int
        }

        sink.send(value: 1)

        XCTAssertEqual(value, 1)

        signal.observe { int in
            XCTAssertTrue(Thread.isMainThread)
            value += int
        }

        sink.send(value: 1)

        XCTAssertEqual(value, 3)
    }

    func testDispose() {
        let sink = Sink<Int>()
        let signal = sink.signal

        var value = 0

        let disposable = signal.observe { int in
            value = int
        }

        sink.send(value: 1)

        XCTAssertEqual(value, 1)

        disposable.dispose()

        sink.send(value: 2)

        XCTAssertEqual(value, 1)
    }

    func testImmediatelyDisposeSignal() {
        let queue = DispatchQueue(label: "testImmediatelyDisposeSignal")

        let signal = Signal<Void> { send in
            nonisolated(unsafe) let send = send
            queue.async {
                send(())
            }
            return AnyDisposable {}
        }

        queue.suspend()

        let disposable = signal.observe {
            XCTFail()
        }

        disposable.dispose()

        let expectation = self.expectation(description: "testImmediatelyDisposeSignal")

        queue.resume()

        queue.async { expectation.fulfill() }

        waitForExpectations(timeout: 1) { _ in }
    }

    func testDisposeOnObserving() {
        let sink = Sink<Void>()
        let signal = sink.signal

        let disposable = signal.observe {}
        signal.observe {
            disposable.dispose()
        }

        sink.send(value: ())

        XCTAssertEqual(disposable.isDisposed, true)
    }

    func testScopedObserving() {
        var value1 = 0
        var value2 = 0
        var object: Object? = .init()

        let sink1 = Sink<Int>()
        let sink2 = Sink<Int>()
        let signal1 = sink1.signal
        let signal2 = sink2.signal

        signal1.observe(duringScopeOf: object!) { int in
            value1 = int
        }

        signal2.observe(duringScopeOf: object!) { int in
            value2 = int
        }

        sink1.send(value: 1)
        sink2.send(value: 10)

        XCTAssertEqual(value1, 1)
        XCTAssertEqual(value2, 10)

        object = nil

        sink1.send(value: 2)
        sink2.send(value: 20)

        XCTAssertEqual(value1, 1)
        XCTAssertEqual(value2, 10)
    }

    func testConcurrentQueueSend() {
        let sink = Sink<Void>()
        let signal = sink.signal

        let queue = DispatchQueue(label: "testConcurrentQueueSend", attributes: .concurrent)
        let group = DispatchGroup()

        var value = 0
        signal.observe {
            value += 1
            value -= 1
            value += 2
            value -= 2
        }

        for _ in (1...100) {
            queue.async(group: group) {
                sink.send(value: ())
            }
        }

        _ = group.wait(timeout: .now() + 10)
        XCTAssertEqual(value, 0)
    }

    func testConcurrentAsyncScopedObserving() {
        nonisolated(unsafe) var value = 0
        let queue = DispatchQueue(label: "testConcurrentAsyncScopedObserving")
        let group = DispatchGroup()

        let sink = Sink<Int>()
        nonisolated(unsafe) let signal = sink.signal

        for _ in (1...100) {
            queue.async(group: group) {
                var object: Object? = .init()

                signal.observe(duringScopeOf: object!) { int in
                    value += int
                }

                object = nil
                sink.send(value: 1)
            }
        }

        _ = group.wait(timeout: .now() + 10)

        XCTAssertEqual(value, 0)

        var object: Object? = .init()

        signal.observe(duringScopeOf: object!) { int in
            value += int
        }

        sink.send(value: 1)

        XCTAssertEqual(value, 1)

        object = nil

        sink.send(value: 1)

        XCTAssertEqual(value, 1)
    }

    func testBindWithBinder() {
        let object = Object()

        let sink = Sink<Int>()
        let signal = sink.signal

        let binder = Binder<Int>(target: object) { object, value in
            XCTAssertTrue(Thread.isMainThread)
            object.value = value
        }

        signal.bind(to: binder)

        XCTAssertEqual(object.value, 0)

        sink.send(value: 3)

        XCTAssertEqual(object.value, 3)
    }

    func testBindWithTargetAndBinding() {
        let object = Object()

        let sink = Sink<Int>()
        let signal = sink.signal

        signal.bind(to: object) {
            XCTAssertTrue(Thread.isMainThread)
            $0.value = $1
        }

        XCTAssertEqual(object.value, 0)

        sink.send(value: 3)

        XCTAssertEqual(object.value, 3)
    }

    func testBindWithTargetAndKeyPath() {
        let object = Object()

        let sink = Sink<Int>()
        let signal = sink.signal

        signal.bind(to: object, \.value)

        XCTAssertEqual(object.value, 0)

        sink.send(value: 3)

        XCTAssertEqual(object.value, 3)
    }

    func testBindWithTargetAndKeyPathOptional() {
        final class Object {
            var value: Int?
        }

        let object = Object()

        let sink = Sink<Int>()
        let signal = sink.signal

        signal.bind(to: object, \.value)

        XCTAssertNil(object.value)

        sink.send(value: 3)

        XCTAssertEqual(object.value, 3)
    }

    func testUnbindOnTargetDeinit() {
        final class Object {}

        let sink = Sink<Int>()
        let signal = sink.signal

        var value = 0
        var object: Object? = .init()

        let binder = Binder<Int>(target: object!) { _, int in
            XCTAssertTrue(Thread.isMainThread)
            value = int
        }

        signal.bind(to: binder)

        sink.send(value: 1)

        XCTAssertEqual(value, 1)

        object = nil

        sink.send(value: 2)

        XCTAssertEqual(value, 1)

        let disposable = signal.bind(to: binder)

        XCTAssertTrue(disposable.isDisposed)
    }

    func testMap() {
        let sink = Sink<Int>()
        let signal = sink.signal

        var value: String?

        let disposable = signal.map(String.init).observe { string in
            value = string
        }

        sink.send(value: 1)

        XCTAssertEqual(value, "1")

        disposable.dispose()

        sink.send(value: 2)

        XCTAssertEqual(value, "1")
    }

    func testObserveOn() {
        let sink = Sink<Int>()
        let signal = sink.signal

        var value = 0

        let expectation = self.expectation(description: "testObserveOn")

        signal
            .observe(on: .queue(.globalDefault()))
            .observe { int in
                XCTAssertFalse(Thread.isMainThread)
                value = int
                expectation.fulfill()
            }

        sink.send(value: 1)

        waitForExpectations(timeout: 1) { _ in
            XCTAssertEqual(value, 1)
        }
    }

    func testImmediatelyDisposeObserveOn() {
        let queue = DispatchQueue(label: "testImmediatelyDisposeObserveOn")

        let sink = Sink<Int>()
        let signal = sink.signal

        var value = 0

        let expectation = self.expectation(description: "testImmediatelyDisposeObserveOn")

        let disposable =
            signal
            .observe(on: .queue(queue))
            .observe { int in
                value = int
            }

        queue.suspend()

        sink.send(value: 1)
        disposable.dispose()

        queue.resume()

        queue.async { expectation.fulfill() }

        waitForExpectations(timeout: 2) { _ in
            XCTAssertEqual(value, 0)
        }
    }

    // Beyond VueFlux's suite: a sink's subscription lets go of its observer
    // when disposed, even while the disposable itself is still held (as
    // AnyDisposable lets go of its closure), so an observer that captures
    // its owner does not keep it alive after dispose().
    func testDisposedSubscriptionReleasesObserver() {
        final class Owner {}
        let sink = Sink<Int>()
        var owner: Owner? = Owner()
        weak let weakOwner = owner
        let disposable = sink.signal.observe { [owner] _ in _ = owner }
        owner = nil
        XCTAssertNotNil(weakOwner)

        disposable.dispose()

        XCTAssertTrue(disposable.isDisposed)
        XCTAssertNil(weakOwner)
        withExtendedLifetime(disposable) {}
    }

    // A subscription holds the sink's state, not the sink: when the sink
    // (or a variable) goes, the observers whose disposables were dropped go
    // with it, though another observer's disposable is still held.
    func testObserversGoWithTheirSinkWhileAnotherSubscriptionIsHeld() {
        final class Owner {}
        var sink: Sink<Int>? = Sink<Int>()
        var variable: Variable<Int>? = Variable(0)
        var sinkOwner: Owner? = Owner()
        var variableOwner: Owner? = Owner()
        weak let weakSinkOwner = sinkOwner
        weak let weakVariableOwner = variableOwner
        sink!.signal.observe { [sinkOwner] _ in _ = sinkOwner }
        variable!.signal.observe { [variableOwner] _ in _ = variableOwner }
        let held = [sink!.signal.observe { _ in }, variable!.signal.observe { _ in }]
        sinkOwner = nil
        variableOwner = nil
        XCTAssertNotNil(weakSinkOwner)
        XCTAssertNotNil(weakVariableOwner)

        sink = nil
        variable = nil

        XCTAssertNil(weakSinkOwner)
        XCTAssertNil(weakVariableOwner)
        // Disposing after the owners are gone does nothing more.
        held.forEach { $0.dispose() }
        XCTAssertTrue(held.allSatisfy(\.isDisposed))
    }

    // Signal.init(_:): the producer runs once per observation, each with its
    // own send; disposing an observation ends what its producer returned,
    // once, and drops that observation's later values only.
    func testProducerRunsOncePerObservationAndDisposingEndsOnlyThatOne() {
        var sends = [(Int) -> Void]()
        var ended = [Int]()
        let signal = Signal<Int> { send in
            let number = sends.count
            sends.append(send)
            return AnyDisposable { ended.append(number) }
        }
        var first = [Int](), second = [Int]()
        let firstObservation = signal.observe { first.append($0) }
        signal.observe { second.append($0) }
        XCTAssertEqual(sends.count, 2)

        sends[0](1)
        sends[1](2)
        firstObservation.dispose()
        firstObservation.dispose()
        sends[0](3)
        sends[1](4)

        XCTAssertEqual(ended, [0])
        XCTAssertEqual(first, [1])
        XCTAssertEqual(second, [2, 4])
    }

    // VUEFLUX.md 3: `observe` returns an `AnyDisposable`, as VueFlux's does,
    // whatever the signal: a sink's, a variable's (also when observed during
    // its delivery), a producer's, an operator's; and so do scoped observing
    // and binding, which VueFlux builds on it.
    func testObserveReturnsAnAnyDisposable() {
        let sink = Sink<Int>()
        let variable = Variable(0)
        let object = Object()
        var gone: Object? = .init()
        let binder = Binder<Int>(target: gone!) { _, _ in }
        gone = nil

        var disposables: [any Disposable] = [
            sink.signal.observe { _ in },
            variable.signal.observe { _ in },
            Signal<Int> { _ in AnyDisposable() }.observe { _ in },
            sink.signal.map { $0 + 1 }.observe { _ in },
            sink.signal.observe(on: .immediate).observe { _ in },
            sink.signal.observe(duringScopeOf: object) { _ in },
            sink.signal.bind(to: object, \.value, on: .immediate),
            variable.signal.bind(to: object, on: .immediate) { _, _ in },
            sink.signal.bind(to: binder, on: .immediate),
        ]
        variable.signal.observe { value in
            if value == 1 {
                disposables.append(variable.signal.observe { _ in })
            }
        }
        variable.value = 1

        XCTAssertEqual(disposables.count, 10)
        for disposable in disposables {
            XCTAssertTrue(disposable is AnyDisposable, "\(type(of: disposable))")
            disposable.dispose()
            XCTAssertTrue(disposable.isDisposed)
        }
    }

    // VUEFLUX.md 3: a send calls every observer synchronously, on the sending
    // thread, in subscription order, before `send` returns.
    func testSendCallsObserversOnTheSendingThreadBeforeItReturns() {
        let sink = Sink<Int>()
        nonisolated(unsafe) var log = [String]()
        nonisolated(unsafe) var sender: pthread_t?
        nonisolated(unsafe) var onSender = [Bool]()

        sink.signal.observe { int in
            log.append("first \(int)")
            onSender.append(pthread_equal(pthread_self(), sender!) != 0)
        }
        sink.signal.observe { int in
            log.append("second \(int)")
            onSender.append(pthread_equal(pthread_self(), sender!) != 0)
        }

        let group = DispatchGroup()
        DispatchQueue.globalDefault().async(group: group) {
            sender = pthread_self()
            sink.send(value: 1)
            log.append("returned")
        }
        group.wait()

        XCTAssertEqual(log, ["first 1", "second 1", "returned"])
        XCTAssertEqual(onSender, [true, true])
    }

    // VUEFLUX.md 3: `map` transforms per observer.
    func testMapTransformsPerObserver() {
        let sink = Sink<Int>()
        var transforms = 0
        var first = [Int]()
        var second = [Int]()

        let mapped = sink.signal.map { int -> Int in
            transforms += 1
            return int * 10
        }
        mapped.observe { first.append($0) }
        mapped.observe { second.append($0) }

        sink.send(value: 1)

        XCTAssertEqual(transforms, 2)
        XCTAssertEqual(first, [10])
        XCTAssertEqual(second, [10])
    }

    // VUEFLUX.md 3: `observe(on:)` forwards each value through
    // `executor.execute`: the observer runs when the executor runs it.
    func testObserveOnForwardsEachValueThroughTheExecutor() {
        let sink = Sink<Int>()
        var functions = [() -> Void]()
        let executor = Executor { function in functions.append(function) }
        var values = [Int]()

        sink.signal.observe(on: executor).observe { values.append($0) }

        sink.send(value: 1)
        sink.send(value: 2)

        XCTAssertEqual(values, [])
        XCTAssertEqual(functions.count, 2)

        functions.forEach { $0() }

        XCTAssertEqual(values, [1, 2])
    }

    // VUEFLUX.md 3 (b), for observe(duringScopeOf:): the registration reports
    // disposed at the latest when the next value reaches it after the
    // object has gone.
    func testScopedObservingIsDisposedByTheNextValueAfterTheObjectIsGone() {
        let sink = Sink<Int>()
        var object: Object? = .init()
        var values = [Int]()

        let disposable = sink.signal.observe(duringScopeOf: object!) { values.append($0) }
        sink.send(value: 1)

        XCTAssertFalse(disposable.isDisposed)

        object = nil
        sink.send(value: 2)

        XCTAssertTrue(disposable.isDisposed)
        XCTAssertEqual(values, [1])
    }

    // VueFlux's cancel lets go of the observer at dispose(): what it
    // captures (often the object that observes) goes then, not when an
    // executor gets to the values `observe(on:)` had queued for it.
    func testDisposeLetsGoOfTheObserverWhileObserveOnHasValuesQueued() {
        final class Captured {
            let onDeinit: () -> Void
            init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
            deinit { onDeinit() }
        }
        let queue = DispatchQueue(label: "testDisposeLetsGoOfTheObserverWhileObserveOnHasValuesQueued")
        queue.suspend()
        let sink = Sink<Int>()
        var gone = false
        var values = [Int]()
        var captured: Captured? = .init { gone = true }
        let disposable = sink.signal.observe(on: .queue(queue)).observe { [captured] int in
            withExtendedLifetime(captured) { values.append(int) }
        }
        captured = nil
        sink.send(value: 1)

        XCTAssertFalse(gone)
        disposable.dispose()
        XCTAssertTrue(gone)

        queue.resume()
        queue.sync {}
        XCTAssertEqual(values, [])
    }

    // The same for a producer that keeps its send function after its
    // disposable has been disposed: the observer goes at dispose().
    func testDisposeLetsGoOfTheObserverThoughTheProducerKeepsSend() {
        final class Captured {
            let onDeinit: () -> Void
            init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
            deinit { onDeinit() }
        }
        var sends = [(Int) -> Void]()
        let signal = Signal<Int> { send in
            sends.append(send)
            return AnyDisposable()
        }
        var gone = false
        var values = [Int]()
        var captured: Captured? = .init { gone = true }
        let disposable = signal.map { $0 * 10 }.observe { [captured] int in
            withExtendedLifetime(captured) { values.append(int) }
        }
        captured = nil
        sends[0](1)

        disposable.dispose()
        XCTAssertTrue(gone)

        sends[0](2)
        XCTAssertEqual(values, [10])
    }
}
