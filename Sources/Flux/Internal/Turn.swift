@_spi(Engine) import FluxCore
import Synchronization

/// What a sink's turn and a State type's dispatch lock share: one thread at
/// a time holds it, and a thread that finds another holding it waits, unless
/// it is itself inside a delivery (of any sink) or a dispatch (a
/// `Dispatcher`'s or a store's, or a `RegisteredStore` init that
/// `registerStore` runs). The holder may be waiting for that very
/// delivery or dispatch, so waiting could deadlock; such a thread hands its
/// work to the holder instead, which runs what was handed over, in order,
/// before it lets go.
///
/// The holder is a word: the holder's identity (an address, so bit 0 is
/// free), or 0 when free, with `slow` set when the holder's release must take
/// the lock that guards what was handed over (see `markSlow`).
@usableFromInline
enum Turn {
    @inlinable static var slow: UInt { 1 }

    /// Whether the calling thread, whose record is `thread`, may wait for a
    /// turn another thread holds: not when it is inside a delivery or a
    /// dispatch (see above).
    @usableFromInline
    static func mayWait(_ thread: ThreadRecord) -> Bool {
        thread.pointee == 0 && !DispatchingThreads.shared.containsCurrentThread()
    }

    /// With the lock guarding `word`'s hand-overs held: when the turn is
    /// held, makes its release take the slow path (which takes that lock)
    /// and returns true; returns false when nobody holds it.
    @usableFromInline
    static func markSlow(_ word: borrowing Atomic<UInt>) -> Bool {
        var current = word.load(ordering: .acquiring)
        while current != 0 && current & slow == 0 {
            let (exchanged, original) = word.compareExchange(
                expected: current, desired: current | slow, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return current != 0
    }
}
