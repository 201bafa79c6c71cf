import Synchronization

/// Sends values to the observers of its `signal`, in subscription order.
///
/// Sends are serialized: the observers of one sink never run concurrently.
/// A send is delivered synchronously, on the sending thread, before `send`
/// returns, except in two cases where waiting would deadlock, and where the
/// value is queued instead:
/// - made from inside an observer of this sink, on the delivering thread: it
///   is delivered when the current delivery ends (VueFlux deadlocks there);
/// - made from inside an observer of another sink while a third thread is
///   delivering this one (two-way bindings set from two threads): that thread
///   delivers it before it lets go of the sink.
/// Either way every observer gets the values of one sender in the order it
/// sent them. Each value goes to the observers present when its delivery
/// starts: one added during a delivery misses that value and gets the ones
/// queued behind it.
public final class Sink<Value>: @unchecked Sendable {
    /// A new signal each time; each observation of it adds an observer.
    @inlinable
    public var signal: Signal<Value> {
        .init(sink: self)
    }

    // Observers are the procedures Signal.observe makes, stored as they are:
    // a delivery then calls each through one final-class method, not through
    // a chain of closures.
    @usableFromInline typealias Observer = CancelableProcedure<Value>
    @usableFromInline typealias Key = ObserverList<Observer>.Key
    @usableFromInline typealias ThreadRecord = UnsafeMutablePointer<Int>

    @usableFromInline
    enum Pending {
        case value(Value)
        case action(() -> Void)
    }

    @usableFromInline let observersLock = PosixLock()
    @usableFromInline var observers = ObserverList<Observer>()

    // Held by the delivering thread for a delivery and the queued ones it
    // runs after it. Only a thread inside no delivery waits for it; one
    // inside a delivery queues instead (see currentThreadRecord).
    @usableFromInline let sendLock = PosixLock()
    // The record of the thread holding sendLock, or 0. Only that thread ever
    // finds its own record here, so a relaxed load answers "am I delivering?"
    // exactly.
    @usableFromInline let deliveringThread = Atomic<UInt>(0)
    // Deliveries waiting for the holder of sendLock, in the order queued.
    // Also guards Variable's value, so that a set stores and queues at once.
    @usableFromInline let queueLock = PosixLock()
    @usableFromInline var pending: [Pending] = []
    // Whether `pending` has anything: written under queueLock, read without
    // it. Read after unlocking sendLock, it closes the window in which a
    // thread queued while the holder was finishing (that thread's tryLock
    // failed): the leaving holder then delivers it.
    @usableFromInline let hasPending = Atomic<Bool>(false)
    // The batch being run, swapped with `pending`; under sendLock.
    @usableFromInline var running: [Pending] = []

    public init() {}

    @inlinable
    public func send(value: Value) {
        let thread = currentThreadRecord()
        if isDelivering(on: thread) {
            queue(.value(value))
        } else if enter(thread) {
            // Behind what was queued before this thread took the sink: a
            // sender's earlier queued values come first.
            if hasPending.load(ordering: .relaxed) {
                queue(.value(value))
            } else {
                deliver(value)
            }
            leave(thread)
        } else {
            queue(.value(value))
            deliverIfIdle(thread)
        }
    }

    // MARK: Internal, for Variable

    @inlinable
    func isDelivering(on thread: ThreadRecord) -> Bool {
        deliveringThread.load(ordering: .relaxed) == UInt(bitPattern: thread)
    }

    /// Takes the sink for a delivery on this thread: waits for it if the
    /// thread is inside no delivery, else only tries (false: queue instead).
    /// Not while delivering this sink on this thread.
    @inlinable
    func enter(_ thread: ThreadRecord) -> Bool {
        if thread.pointee == 0 {
            sendLock.lock()
        } else if !sendLock.tryLock() {
            return false
        }
        began(thread)
        return true
    }

    /// Runs what was queued, then lets the sink go. After `enter`.
    @inlinable
    func leave(_ thread: ThreadRecord) {
        if hasPending.load(ordering: .relaxed) {
            drainPending()
        }
        ending(thread)
        if hasPending.load(ordering: .sequentiallyConsistent) {
            deliverIfIdle(thread)
        }
    }

    /// Queues a delivery behind those queued. Whoever holds the sink runs it;
    /// one that is not the holder then calls `deliverIfIdle`.
    @inlinable
    func queue(_ item: Pending) {
        queueLock.withLock { queueLocked(item) }
    }

    /// `queue`, with queueLock held.
    @inlinable
    func queueLocked(_ item: Pending) {
        pending.append(item)
        hasPending.store(true, ordering: .sequentiallyConsistent)
    }

    /// Calls the current observers with `value`. Only while holding the sink.
    @inlinable
    func deliver(_ value: Value) {
        let current = observersLock.withLock { observers.elements }
        for observer in current {
            observer.execute(with: value)
        }
    }

    @inlinable
    func began(_ thread: ThreadRecord) {
        deliveringThread.store(UInt(bitPattern: thread), ordering: .relaxed)
        thread.pointee += 1
    }

    @inlinable
    func ending(_ thread: ThreadRecord) {
        thread.pointee -= 1
        deliveringThread.store(0, ordering: .relaxed)
        sendLock.unlock()
    }

    /// Delivers what is queued if no thread holds the sink; a thread that
    /// does will. Never waits.
    @usableFromInline
    func deliverIfIdle(_ thread: ThreadRecord) {
        while hasPending.load(ordering: .sequentiallyConsistent) && sendLock.tryLock() {
            began(thread)
            drainPending()
            ending(thread)
        }
    }

    /// Runs the queued deliveries, in order, until none is left: those that
    /// the ones run here queue too. Only while holding the sink.
    @usableFromInline
    func drainPending() {
        while true {
            let empty: Bool = queueLock.withLock {
                if pending.isEmpty { return true }
                swap(&pending, &running)
                hasPending.store(false, ordering: .sequentiallyConsistent)
                return false
            }
            if empty { return }
            for item in running {
                switch item {
                case .value(let value): deliver(value)
                case .action(let action): action()
                }
            }
            running.removeAll(keepingCapacity: true)
        }
    }

    @usableFromInline
    func subscribe(_ observer: Observer) -> Key {
        observersLock.withLock { observers.add(observer) }
    }

    @usableFromInline
    func unsubscribe(_ key: Key) {
        // Released outside the lock: the closure's deinit may come back here.
        let removed = observersLock.withLock { observers.remove(for: key) }
        _ = removed
    }
}
