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

/// What a `flux_dispatcher *` points at: the engine, in its own heap block.
typealias CDispatcher = DispatchCore<CCallback>

extension OpaquePointer {
    /// The engine behind a non-NULL handle. Reached through the pointer
    /// (`handle.dispatcher.pointee.dispatch(...)`) it is borrowed in place:
    /// no copy, no reference counting.
    @inline(__always)
    var dispatcher: UnsafeMutablePointer<CDispatcher> { UnsafeMutablePointer(self) }
}

/// Room for one engine and its links in the fork registry (see Fork.swift),
/// or nil when memory runs out.
func allocateDispatcher() -> UnsafeMutablePointer<CDispatcher>? {
    let size = forkLinksOffset + MemoryLayout<ForkLinks>.size
    let alignment = max(MemoryLayout<CDispatcher>.alignment, MemoryLayout<ForkLinks>.alignment)
    var raw: UnsafeMutableRawPointer?
    guard posix_memalign(&raw, max(alignment, MemoryLayout<UnsafeRawPointer>.alignment), size) == 0,
          let raw else { return nil }
    (raw + forkLinksOffset).bindMemory(to: ForkLinks.self, capacity: 1).initialize(to: ForkLinks())
    return raw.bindMemory(to: CDispatcher.self, capacity: 1)
}

func freeDispatcher(_ pointer: UnsafeMutablePointer<CDispatcher>) {
    free(pointer)
}
