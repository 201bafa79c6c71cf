import Flux

/// `flux_callback`: `int (*)(void *context, const void *payload)`.
public typealias FluxCallbackFunction = @convention(c) (UnsafeMutableRawPointer?, UnsafeRawPointer?) -> Int32
/// `flux_destroy`: `void (*)(void *context)`.
public typealias FluxDestroyFunction = @convention(c) (UnsafeMutableRawPointer?) -> Void

/// A C callback as the engine stores it: the raw (function, context) pair and
/// the context's destroy function, 24 bytes, called with no Swift closure in
/// between.
struct CCallback: DispatchCallback {
    let function: FluxCallbackFunction
    let context: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?

    @inline(__always)
    func invoke(_ payload: UnsafeRawPointer?) -> CallbackFailure? {
        let result = function(context, payload)
        return result == 0 ? nil : CallbackFailure(value: result)
    }

    func release() { destroy?(context) }
}

/// A C callback returned non-zero.
struct CallbackFailure: Error {
    let value: Int32
}

/// What a `flux_dispatcher *` points at.
typealias CDispatcher = DispatchCore<CCallback>

extension Optional where Wrapped == OpaquePointer {
    /// Calls `body` with the dispatcher behind a handle, without retaining it
    /// (the caller's handle keeps it alive), or returns nil for NULL.
    @inline(__always)
    func withDispatcher<R>(_ body: (CDispatcher) -> R) -> R? {
        guard let pointer = self else { return nil }
        return Unmanaged<CDispatcher>.fromOpaque(UnsafeRawPointer(pointer))._withUnsafeGuaranteedRef(body)
    }
}
