#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import FluxCore

/// `flux_callback`: `int (*)(void *context, const void *payload)`.
public typealias FluxCallbackFunction = @convention(c) (UnsafeMutableRawPointer?, UnsafeRawPointer?) -> Int32
/// `flux_destroy`: `void (*)(void *context)`.
public typealias FluxDestroyFunction = @convention(c) (UnsafeMutableRawPointer?) -> Void
/// `flux_done_fn`: `void (*)(void *payload, flux_status status)`.
public typealias FluxDoneFunction = @convention(c) (UnsafeMutableRawPointer?, Int32) -> Void

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

    /// flux_enqueue's done(payload, status); flux_last_error() describes a
    /// failure while it runs.
    static func complete(_ done: FluxDoneFunction?, _ payload: UnsafeRawPointer?, _ error: DispatchError<CallbackFailure>?) {
        let status = error.map { fail("flux_enqueue", $0) } ?? 0
        done?(UnsafeMutableRawPointer(mutating: payload), status)
    }
}

/// A C callback returned non-zero.
struct CallbackFailure: Error {
    let value: Int32
}

/// What a `flux_dispatcher *` points at: the engine, in its own heap block.
typealias CDispatcher = DispatchCore<CCallback>

extension OpaquePointer {
    /// The engine behind a non-NULL handle. Reached through the pointer
    /// (`handle.dispatcher.pointee.dispatch(...)`) it is borrowed in place:
    /// no copy, no reference counting.
    @inline(__always)
    var dispatcher: UnsafeMutablePointer<CDispatcher> { UnsafeMutablePointer(self) }
}

/// Room for one engine, or nil when memory runs out.
func allocateDispatcher() -> UnsafeMutablePointer<CDispatcher>? {
    let size = MemoryLayout<CDispatcher>.size
    let alignment = MemoryLayout<CDispatcher>.alignment
    var raw: UnsafeMutableRawPointer?
    guard posix_memalign(&raw, max(alignment, MemoryLayout<UnsafeRawPointer>.alignment), max(size, 1)) == 0,
          let raw else { return nil }
    return raw.bindMemory(to: CDispatcher.self, capacity: 1)
}

func freeDispatcher(_ pointer: UnsafeMutablePointer<CDispatcher>) {
    free(pointer)
}
