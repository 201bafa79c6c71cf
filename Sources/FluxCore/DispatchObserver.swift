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
package final class DispatchObserver<Payload, Failure: Error>: @unchecked Sendable {
    // @unchecked: immutable; the closures run on the dispatching thread only.
    package let dispatchBegin: ((Payload) -> Void)?
    package let dispatchEnd: ((Payload, DispatchError<Failure>?) -> Void)?
    package let callbackBegin: ((DispatchToken) -> Void)?
    /// The callback's own failure, nil when it succeeded.
    package let callbackEnd: ((DispatchToken, Failure?) -> Void)?
    /// The waiter's token and the tokens as given; valid during the call only.
    package let waitFor: ((DispatchToken, UnsafeBufferPointer<DispatchToken>) -> Void)?
    package let release: (() -> Void)?

    package init(
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
