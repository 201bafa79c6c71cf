#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
import CFlux
@_spi(Engine) import FluxCore
import Synchronization

/// `flux_callback`: `int (*)(void *context, const void *payload)`, as the
/// header declares it.
public typealias FluxCallbackFunction = flux_callback
/// `flux_destroy`: `void (*)(void *context)`, as the header declares it.
public typealias FluxDestroyFunction = flux_destroy
/// `flux_done_fn`: `void (*)(void *context, void *payload, flux_status status)`,
/// as the header declares it.
public typealias FluxDoneFunction = flux_done_fn
/// The store function types, as the header declares them.
public typealias FluxReduceFunction = flux_reduce_fn
public typealias FluxEqualFunction = flux_equal_fn
public typealias FluxReleaseFunction = flux_release_fn
public typealias FluxListenerFunction = flux_listener_fn

/// What flux_enqueue keeps per call until its done runs: the caller's done
/// function and its context, by value.
struct CDone {
    let function: FluxDoneFunction?
    let context: UnsafeMutableRawPointer?

    /// done(context, payload, status).
    func callAsFunction(_ payload: UnsafeRawPointer?, _ status: Int32) {
        function?(context, UnsafeMutableRawPointer(mutating: payload), flux_status(status))
    }
}

/// A C callback as the engine stores it: the raw (function, context) pair and
/// the context's destroy function, 24 bytes, called with no Swift closure in
/// between.
struct CCallback: DispatchCallback {
    typealias Observer = CObserver

    let function: FluxCallbackFunction
    let context: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?

    @inline(__always)
    func invoke(_ payload: UnsafeRawPointer?) -> CallbackFailure? {
        let result = function(context, payload)
        return result == 0 ? nil : CallbackFailure(value: result)
    }

    func release() { destroy?(context) }

    /// flux_enqueue's done(context, payload, status); flux_last_error()
    /// describes a failure while it runs, and is as it was once it returns.
    static func complete(_ done: CDone, _ payload: UnsafeRawPointer?, _ error: DispatchError<CallbackFailure>?) {
        guard let error else { return done(payload, 0) }
        whileRecorded("flux_enqueue", error) { status in done(payload, status) }
    }
}

extension flux_status {
    /// The header's status for a status code the exports return as `int`.
    init(_ code: Int32) { self.init(rawValue: UInt32(bitPattern: code)) }
}

/// A C callback returned non-zero.
struct CallbackFailure: Error {
    let value: Int32
}
