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
    /// describes a failure while it runs.
    static func complete(_ done: CDone, _ payload: UnsafeRawPointer?, _ error: DispatchError<CallbackFailure>?) {
        let status = error.map { fail("flux_enqueue", $0) } ?? 0
        done(payload, status)
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

/// What a `flux_dispatcher *` points at: the engine, in its own heap block.
typealias CDispatcher = DispatchCore<CCallback>

extension OpaquePointer {
    /// The engine behind a non-NULL handle. Reached through the pointer
    /// (`handle.dispatcher.pointee.dispatch(...)`) it is borrowed in place:
    /// no copy, no reference counting.
    @inline(__always)
    var dispatcher: UnsafeMutablePointer<CDispatcher> { UnsafeMutablePointer(self) }
}

/// Room for one engine, followed by what the store exports keep per
/// dispatcher (`StoreSide`) and the dispatcher's links in the fork registry
/// (`ForkLinks`, see Fork.swift), or nil when memory runs out. The engine
/// comes first, so the handle is the engine's address.
func allocateDispatcher() -> UnsafeMutablePointer<CDispatcher>? {
    let alignment = max(MemoryLayout<CDispatcher>.alignment, MemoryLayout<StoreSide>.alignment,
                        MemoryLayout<ForkLinks>.alignment, MemoryLayout<UnsafeRawPointer>.alignment)
    var raw: UnsafeMutableRawPointer?
    guard posix_memalign(&raw, alignment, forkLinksOffset + MemoryLayout<ForkLinks>.size) == 0,
          let raw else { return nil }
    (raw + storeSideOffset).bindMemory(to: StoreSide.self, capacity: 1).initialize(to: StoreSide())
    (raw + forkLinksOffset).bindMemory(to: ForkLinks.self, capacity: 1).initialize(to: ForkLinks())
    return raw.bindMemory(to: CDispatcher.self, capacity: 1)
}

func freeDispatcher(_ pointer: UnsafeMutablePointer<CDispatcher>) {
    OpaquePointer(pointer).storeSide.deinitialize(count: 1)
    free(pointer)
}

/// What the store exports keep per dispatcher, off the engine's paths.
struct StoreSide: ~Copyable {
    /// Live stores and groups: flux_dispatcher_destroy refuses while any.
    let count = Atomic<Int>(0)
    /// Listeners and group functions running on the dispatching thread
    /// (only that thread touches these two).
    var listenerDepth = 0
    /// Set by flux_store_listener_fail for the running listener.
    var listenerFailure: Int32 = 0
}

let storeSideOffset = roundUp(max(MemoryLayout<CDispatcher>.size, 1), MemoryLayout<StoreSide>.alignment)

extension OpaquePointer {
    var storeSide: UnsafeMutablePointer<StoreSide> {
        (UnsafeMutableRawPointer(self) + storeSideOffset).assumingMemoryBound(to: StoreSide.self)
    }
}
