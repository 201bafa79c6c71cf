#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
@_spi(Engine) import FluxCore
import Synchronization

// What a `flux_dispatcher *` points at: one heap block with four parts, in
// this order, each reached from the handle by its accessor below:
//
//   dispatcher  the engine (DispatchCore<CCallback>), first, so the handle
//               is the engine's address and the hot paths add nothing;
//   storeSide   the count of the dispatcher's stores and groups (StoreSide),
//               changed by any thread;
//   listenerCells  what the running listeners keep, on the dispatching
//               thread only (ListenerCells);
//   forkLinks   the dispatcher's place on the fork list (ForkLinks, Fork.swift).
//
// Separate parts, not one struct's fields: each is reached through a
// pointer of its own, so that a write to one is never an access to another
// (to ThreadSanitizer, a write through a struct's field is an access to the
// whole struct, which other threads read: a listener's cells written while
// another thread creates a store, changing the count, were a race report).

/// The engine a C dispatcher runs.
typealias CDispatcher = DispatchCore<CCallback>

/// What the store exports count per dispatcher, off the engine's paths;
/// any thread changes it. With the close state flux_dispatcher_destroy reads.
struct StoreSide: ~Copyable {
    /// Live stores and groups: flux_dispatcher_destroy refuses while any.
    let count = Atomic<Int>(0)
    /// Which call closed the engine (a `Closer`'s raw value; 0 until then):
    /// flux_dispatcher_close(), noted once it finished releasing, so that
    /// flux_dispatcher_destroy() has only to free; or
    /// flux_dispatcher_destroy(), noted as its close becomes certain (before
    /// any destroy function runs), so that a flux_dispatcher_close() from one
    /// is refused: the dispatcher does not stay valid, as a close promises.
    let closedBy = Atomic<UInt8>(0)
}

/// The listeners and group functions running on the dispatching thread
/// (only that thread touches these).
struct ListenerCells {
    var listenerDepth = 0
    /// Set by flux_store_listener_fail for the running listener.
    var listenerFailure: Int32 = 0
}

/// A dispatcher's place on the fork list.
struct ForkLinks {
    var previous: UnsafeMutablePointer<CDispatcher>?
    var next: UnsafeMutablePointer<CDispatcher>?
}

private let storeSideOffset = roundUp(max(MemoryLayout<CDispatcher>.size, 1), MemoryLayout<StoreSide>.alignment)
private let listenerCellsOffset = roundUp(
    storeSideOffset + MemoryLayout<StoreSide>.size, MemoryLayout<ListenerCells>.alignment)
private let forkLinksOffset = roundUp(
    listenerCellsOffset + MemoryLayout<ListenerCells>.size, MemoryLayout<ForkLinks>.alignment)
private let handleSize = forkLinksOffset + MemoryLayout<ForkLinks>.size
private let handleAlignment = max(
    MemoryLayout<CDispatcher>.alignment, MemoryLayout<StoreSide>.alignment,
    MemoryLayout<ListenerCells>.alignment,
    MemoryLayout<ForkLinks>.alignment, MemoryLayout<UnsafeRawPointer>.alignment)

extension OpaquePointer {
    /// The engine behind a non-NULL handle. Reached through the pointer
    /// (`handle.dispatcher.pointee.dispatch(...)`) it is borrowed in place:
    /// no copy, no reference counting.
    @inline(__always)
    var dispatcher: UnsafeMutablePointer<CDispatcher> { UnsafeMutablePointer(self) }

    var storeSide: UnsafeMutablePointer<StoreSide> {
        (UnsafeMutableRawPointer(self) + storeSideOffset).assumingMemoryBound(to: StoreSide.self)
    }

    var listenerCells: UnsafeMutablePointer<ListenerCells> {
        (UnsafeMutableRawPointer(self) + listenerCellsOffset).assumingMemoryBound(to: ListenerCells.self)
    }

    var forkLinks: UnsafeMutablePointer<ForkLinks> {
        (UnsafeMutableRawPointer(self) + forkLinksOffset).assumingMemoryBound(to: ForkLinks.self)
    }
}

/// A handle's block with its store side, listener cells and fork links made
/// and room for the engine (the caller initializes it), or nil when memory
/// runs out.
func allocateDispatcher() -> UnsafeMutablePointer<CDispatcher>? {
    var raw: UnsafeMutableRawPointer?
    guard posix_memalign(&raw, handleAlignment, handleSize) == 0, let raw else { return nil }
    (raw + storeSideOffset).bindMemory(to: StoreSide.self, capacity: 1).initialize(to: StoreSide())
    (raw + listenerCellsOffset).bindMemory(to: ListenerCells.self, capacity: 1).initialize(to: ListenerCells())
    (raw + forkLinksOffset).bindMemory(to: ForkLinks.self, capacity: 1).initialize(to: ForkLinks())
    return raw.bindMemory(to: CDispatcher.self, capacity: 1)
}

/// Frees a handle's block; the engine is already deinitialized.
func freeDispatcher(_ pointer: UnsafeMutablePointer<CDispatcher>) {
    OpaquePointer(pointer).storeSide.deinitialize(count: 1)
    free(pointer)
}
