/// How `DispatchCore` calls a registered callback and ends its registration.
///
/// The engine is generic over this so that each host stores callbacks in its
/// cheapest form: the C ABI keeps raw (function pointer, context) pairs, Swift
/// keeps closures. Conformers should be small values; `invoke` sits on the
/// hottest path of the library.
@_spi(Engine) public protocol DispatchCallback {
    associatedtype Payload
    associatedtype Failure: Error
    /// What `enqueue` reports a payload's outcome to (C: a `flux_done_fn`).
    /// Hosts that do not enqueue leave it at `NoCompletion`.
    associatedtype Completion = NoCompletion
    /// How the host's observer is stored and called; Swift's closures unless
    /// the host has a cheaper form (C: the caller's hooks, by value).
    associatedtype Observer: DispatchObserving = DispatchObserver<Payload, Failure>
    where Observer.Payload == Payload, Observer.Failure == Failure

    /// Calls the callback; a non-nil result is its failure, which aborts the
    /// running dispatch. (A return value, not `throws(Failure)`: the optimizer
    /// devirtualizes this requirement into a direct call only in this form.)
    func invoke(_ payload: Payload) -> Failure?

    /// Ends the registration. The engine calls it exactly once per registered
    /// value: on unregister, on `close()`, or when registering fails. Never
    /// called with the engine's lock held, so it may call back into the engine.
    func release()

    /// Nil for a plain callback, which `unregister` ends. Non-nil when the
    /// registration belongs to a store or a group, which end it themselves
    /// (`unregister(_:asOwner: true)`): a caller's `unregister` would free
    /// what they still use, so it is refused with this message, which says
    /// how to end it instead: a template (`FluxError.init(_:template:...)`)
    /// whose number is the token. Asked only by `unregister`, never by a
    /// dispatch.
    func ownerRefusal(_ token: DispatchToken) -> String?

    /// Reports the outcome of an enqueued payload's dispatch (nil: it
    /// succeeded), or the error that refused it. Called exactly once per
    /// `enqueue`, on the thread that dispatched the payload, with no callback
    /// running and no lock held.
    static func complete(_ completion: Completion, _ payload: Payload, _ error: DispatchError<Failure>?)
}

extension DispatchCallback {
    /// Plain callbacks, for hosts whose registrations all are.
    @_spi(Engine) public func ownerRefusal(_ token: DispatchToken) -> String? { nil }
}

/// The completion of hosts that never enqueue.
@_spi(Engine) public struct NoCompletion {}

extension DispatchCallback where Completion == NoCompletion {
    @_spi(Engine) public static func complete(
        _ completion: Completion, _ payload: Payload, _ error: DispatchError<Failure>?
    ) {}
}

/// What a dispatch or `waitFor` can fail with: the engine's own error, or the
/// failure of a callback (with its token), which aborted the dispatch.
@_spi(Engine) public enum DispatchError<Failure: Error>: Error {
    case flux(FluxError)
    case callback(Failure, DispatchToken)
}
