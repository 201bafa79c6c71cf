/// What a dispatcher reports to its observer, as the engine stores it: one
/// optional closure per event, and `release`, run exactly once when the
/// observer is replaced, cleared or the dispatcher closes (never inside a
/// dispatch, never with the lock held).
///
/// Events, on the dispatching thread: `dispatchBegin`; `callbackBegin` …
/// `callbackEnd` around each callback (nested inside the waiter's pair for
/// callbacks a `waitFor` runs); `waitFor` on entry to each wait of a callback
/// (the waiter's token and the tokens as given, whatever the wait returns);
/// `dispatchEnd` last, with the dispatch's outcome (nil: it succeeded).
@_spi(Engine) public final class DispatchObserver<Payload, Failure: Error>: @unchecked Sendable {
    // @unchecked: immutable; the closures run on the dispatching thread only.
    @_spi(Engine) public let dispatchBegin: ((Payload) -> Void)?
    @_spi(Engine) public let dispatchEnd: ((Payload, DispatchError<Failure>?) -> Void)?
    @_spi(Engine) public let callbackBegin: ((DispatchToken) -> Void)?
    /// The callback's own failure, nil when it succeeded.
    @_spi(Engine) public let callbackEnd: ((DispatchToken, Failure?) -> Void)?
    /// The waiter's token and the tokens as given; valid during the call only.
    @_spi(Engine) public let waitFor: ((DispatchToken, UnsafeBufferPointer<DispatchToken>) -> Void)?
    @_spi(Engine) public let release: (() -> Void)?

    @_spi(Engine) public init(
        dispatchBegin: ((Payload) -> Void)? = nil,
        dispatchEnd: ((Payload, DispatchError<Failure>?) -> Void)? = nil,
        callbackBegin: ((DispatchToken) -> Void)? = nil,
        callbackEnd: ((DispatchToken, Failure?) -> Void)? = nil,
        waitFor: ((DispatchToken, UnsafeBufferPointer<DispatchToken>) -> Void)? = nil,
        release: (() -> Void)? = nil
    ) {
        self.dispatchBegin = dispatchBegin
        self.dispatchEnd = dispatchEnd
        self.callbackBegin = callbackBegin
        self.callbackEnd = callbackEnd
        self.waitFor = waitFor
        self.release = release
    }
}
