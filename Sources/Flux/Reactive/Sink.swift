import Synchronization

/// Sends values to the observers of its `signal`: synchronously, on the
/// sending thread, in subscription order.
///
/// Sends are serialized: the observers of one sink never run concurrently.
/// A send made from inside one of its observers, on the delivering thread,
/// is queued and delivered when the current delivery ends (VueFlux deadlocks
/// there), so every observer sees the values in the same order.
public final class Sink<Value>: @unchecked Sendable {
    /// A new signal each time; each observation of it adds an observer.
    public var signal: Signal<Value> {
        .init { send in
            let key = self.subscribe(send)
            return AnyDisposable { [weak self] in
                self?.unsubscribe(key)
            }
        }
    }

    typealias Observer = (Value) -> Void
    typealias Key = ObserverList<Observer>.Key

    private enum Pending {
        case value(Value)
        case action(() -> Void)
    }

    private let observersLock = PosixLock()
    private var observers = ObserverList<Observer>()

    // Held for a whole delivery, including the queued sends it drains.
    private let sendLock = PosixLock()
    // The thread inside a delivery, or 0. Only that thread ever finds its own
    // token here, so a relaxed load answers "am I delivering?" exactly.
    private let deliveringThread = Atomic<UInt>(0)
    // Sends made during a delivery by the delivering thread; under sendLock.
    private var pending: [Pending] = []

    public init() {}

    public func send(value: Value) {
        if isDeliveringOnCurrentThread {
            pending.append(.value(value))
        } else {
            serialized { deliver(value) }
        }
    }

    // MARK: Internal, for Variable

    var isDeliveringOnCurrentThread: Bool {
        deliveringThread.load(ordering: .relaxed) == currentThreadToken()
    }

    /// Runs `body` as a delivery: holding the send lock, then delivers what
    /// was queued meanwhile. Not to be called while delivering on this thread.
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
    func enqueue(_ action: @escaping () -> Void) {
        pending.append(.action(action))
    }

    /// Calls the current observers with `value`. Only inside `serialized`.
    func deliver(_ value: Value) {
        let current = observersLock.withLock { observers.elements }
        for observer in current {
            observer(value)
        }
    }

    func subscribe(_ observer: @escaping Observer) -> Key {
        observersLock.withLock { observers.add(observer) }
    }

    func unsubscribe(_ key: Key) {
        // Released outside the lock: the closure's deinit may come back here.
        let removed = observersLock.withLock { observers.remove(for: key) }
        _ = removed
    }

    private func drainPending() {
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
