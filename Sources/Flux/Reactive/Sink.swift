import Synchronization

/// Sends values to the observers of its `signal`: synchronously, on the
/// sending thread, in subscription order.
///
/// Sends are serialized: the observers of one sink never run concurrently.
/// A send made from inside one of its observers, on the delivering thread,
/// is queued and delivered when the current delivery ends (VueFlux deadlocks
/// there), so every observer sees the values in the same order. Each value
/// goes to the observers present when its delivery starts: one added during
/// a delivery misses that value and gets the ones queued behind it.
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

    @usableFromInline
    enum Pending {
        case value(Value)
        case action(() -> Void)
    }

    @usableFromInline let observersLock = PosixLock()
    @usableFromInline var observers = ObserverList<Observer>()

    // Held for a whole delivery, including the queued sends it drains.
    @usableFromInline let sendLock = PosixLock()
    // The thread inside a delivery, or 0. Only that thread ever finds its own
    // token here, so a relaxed load answers "am I delivering?" exactly.
    @usableFromInline let deliveringThread = Atomic<UInt>(0)
    // Sends made during a delivery by the delivering thread; under sendLock.
    @usableFromInline var pending: [Pending] = []

    public init() {}

    @inlinable
    public func send(value: Value) {
        if isDeliveringOnCurrentThread {
            pending.append(.value(value))
        } else {
            serialized { deliver(value) }
        }
    }

    // MARK: Internal, for Variable

    @inlinable
    var isDeliveringOnCurrentThread: Bool {
        deliveringThread.load(ordering: .relaxed) == currentThreadToken()
    }

    /// Runs `body` as a delivery: holding the send lock, then delivers what
    /// was queued meanwhile. Not to be called while delivering on this thread.
    @inlinable
    func serialized<Result>(_ body: () -> Result) -> Result {
        sendLock.lock()
        deliveringThread.store(currentThreadToken(), ordering: .relaxed)
        let result = body()
        if !pending.isEmpty {
            drainPending()
        }
        deliveringThread.store(0, ordering: .relaxed)
        sendLock.unlock()
        return result
    }

    /// Queues `action` behind the current delivery. Only while delivering on
    /// this thread.
    @inlinable
    func enqueue(_ action: @escaping () -> Void) {
        pending.append(.action(action))
    }

    /// Calls the current observers with `value`. Only inside `serialized`.
    @inlinable
    func deliver(_ value: Value) {
        let current = observersLock.withLock { observers.elements }
        for observer in current {
            observer.execute(with: value)
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

    @usableFromInline
    func drainPending() {
        var index = 0
        // Items run here may queue more; they go to the end and run in turn.
        while index < pending.count {
            let item = pending[index]
            index += 1
            switch item {
            case .value(let value): deliver(value)
            case .action(let action): action()
            }
        }
        pending.removeAll(keepingCapacity: true)
    }
}
