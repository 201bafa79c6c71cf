/// What a dispatcher reports to its observer, as the engine calls it, and
/// how the engine lets go of it: `release()` runs exactly once per observer
/// set, when it is replaced, cleared or the dispatcher closes (never inside a
/// dispatch, never with the lock held) -- or, when `setObserver` refuses it
/// (closed, out of memory, orphaned by fork()), at once on the caller's
/// thread, which may be inside a dispatch (a callback's call).
///
/// Events, on the dispatching thread: `dispatchBegin`; `callbackBegin` …
/// `callbackEnd` around each callback (nested inside the waiter's pair for
/// callbacks a `waitFor` runs); `waitFor` on entry to each wait of a callback
/// (the waiter's token and the tokens as given, whatever the wait returns);
/// `dispatchEnd` last, with the dispatch's outcome (nil: it succeeded).
/// A wait from any of them fails with `notDispatching` and reports nothing:
/// only callbacks wait.
///
/// A protocol, so that each host keeps its observer in its cheapest form:
/// the C ABI stores the caller's `flux_observer` hooks by value (setting one
/// allocates nothing through Swift, so running out of memory is a status),
/// Swift keeps closures (`DispatchObserver`).
@_spi(Engine) public protocol DispatchObserving {
    associatedtype Payload
    associatedtype Failure: Error
    func dispatchBegin(_ payload: Payload)
    func dispatchEnd(_ payload: Payload, _ error: DispatchError<Failure>?)
    func callbackBegin(_ token: DispatchToken)
    /// The callback's own failure, nil when it succeeded.
    func callbackEnd(_ token: DispatchToken, _ failure: Failure?)
    /// False spares the engine gathering the tokens of a wait.
    var observesWaits: Bool { get }
    /// The waiter's token and the tokens as given; valid during the call only.
    func waitFor(_ waiter: DispatchToken, _ tokens: UnsafeBufferPointer<DispatchToken>)
    func release()
}

/// An observer of Swift closures, one optional closure per event.
@_spi(Engine) public final class DispatchObserver<Payload, Failure: Error>: DispatchObserving, @unchecked Sendable {
    // @unchecked: immutable; the closures run on the dispatching thread only.
    @_spi(Engine) public let onDispatchBegin: ((Payload) -> Void)?
    @_spi(Engine) public let onDispatchEnd: ((Payload, DispatchError<Failure>?) -> Void)?
    @_spi(Engine) public let onCallbackBegin: ((DispatchToken) -> Void)?
    /// The callback's own failure, nil when it succeeded.
    @_spi(Engine) public let onCallbackEnd: ((DispatchToken, Failure?) -> Void)?
    /// The waiter's token and the tokens as given; valid during the call only.
    @_spi(Engine) public let onWaitFor: ((DispatchToken, UnsafeBufferPointer<DispatchToken>) -> Void)?
    @_spi(Engine) public let onRelease: (() -> Void)?

    @_spi(Engine) public init(
        dispatchBegin: ((Payload) -> Void)? = nil,
        dispatchEnd: ((Payload, DispatchError<Failure>?) -> Void)? = nil,
        callbackBegin: ((DispatchToken) -> Void)? = nil,
        callbackEnd: ((DispatchToken, Failure?) -> Void)? = nil,
        waitFor: ((DispatchToken, UnsafeBufferPointer<DispatchToken>) -> Void)? = nil,
        release: (() -> Void)? = nil
    ) {
        onDispatchBegin = dispatchBegin
        onDispatchEnd = dispatchEnd
        onCallbackBegin = callbackBegin
        onCallbackEnd = callbackEnd
        onWaitFor = waitFor
        onRelease = release
    }

    @_spi(Engine) public func dispatchBegin(_ payload: Payload) { onDispatchBegin?(payload) }
    @_spi(Engine) public func dispatchEnd(_ payload: Payload, _ error: DispatchError<Failure>?) {
        onDispatchEnd?(payload, error)
    }
    @_spi(Engine) public func callbackBegin(_ token: DispatchToken) { onCallbackBegin?(token) }
    @_spi(Engine) public func callbackEnd(_ token: DispatchToken, _ failure: Failure?) {
        onCallbackEnd?(token, failure)
    }
    @_spi(Engine) public var observesWaits: Bool { onWaitFor != nil }
    @_spi(Engine) public func waitFor(_ waiter: DispatchToken, _ tokens: UnsafeBufferPointer<DispatchToken>) {
        onWaitFor?(waiter, tokens)
    }
    @_spi(Engine) public func release() { onRelease?() }
}

/// Whether a dispatch reports to an observer, chosen once as it starts. The
/// engine's dispatch loop, `invoke` and waits are generic over it, one body
/// each: specialized for `Unobserved`, whose observer is the constant nil,
/// every report compiles to nothing, so an unobserved dispatch pays nothing
/// for observers.
@_spi(Engine) public protocol ObserverChoice<Observer> {
    associatedtype Observer: DispatchObserving
    var observer: Observer? { get }
}

@_spi(Engine) public struct Unobserved<Observer: DispatchObserving>: ObserverChoice {
    @inlinable @_spi(Engine) public init() {}
    @inlinable @_spi(Engine) public var observer: Observer? { nil }
}

@_spi(Engine) public struct Observed<Observer: DispatchObserving>: ObserverChoice {
    @usableFromInline let reporting: Observer
    @inlinable @_spi(Engine) public init(_ observer: Observer) { reporting = observer }
    @inlinable @_spi(Engine) public var observer: Observer? { reporting }
}
