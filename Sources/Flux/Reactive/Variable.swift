/// A value whose changes are a signal. Observing `signal` sends the current
/// value first, then every change; nothing is lost or sent twice.
///
/// `value` can be read anywhere, including inside an observer while a set is
/// being delivered. A set made inside an observer, on the delivering thread,
/// stores at once and is delivered when the current delivery ends.
public final class Variable<Value>: @unchecked Sendable {
    public var constant: Constant<Value> {
        .init(variable: self)
    }

    public var signal: Signal<Value> {
        .init { send in
            self.observeChanges(send)
        }
    }

    public var value: Value {
        get {
            valueLock.withLock { storage }
        }
        set {
            if changes.isDeliveringOnCurrentThread {
                // Setters are serialized by the send lock, which this thread
                // holds: storing now keeps `value` in step with set order.
                valueLock.withLock { storage = newValue }
                changes.enqueue { [self] in
                    delivered = newValue
                    changes.deliver(newValue)
                }
            } else {
                changes.serialized {
                    valueLock.withLock { storage = newValue }
                    delivered = newValue
                    changes.deliver(newValue)
                }
            }
        }
    }

    private let changes = Sink<Value>()
    private let valueLock = PosixLock()
    private var storage: Value
    // The last value delivered to observers: what a new observer starts from.
    // Only touched inside the sink's deliveries.
    private var delivered: Value

    public init(_ value: Value) {
        storage = value
        delivered = value
    }

    private func observeChanges(_ send: @escaping (Value) -> Void) -> any Disposable {
        if !changes.isDeliveringOnCurrentThread {
            return changes.serialized {
                send(delivered)
                return subscription(changes.subscribe(CancelableProcedure(send)))
            }
        }
        // Observed from inside an observer: join after the queued deliveries,
        // so the first value is the one delivered last before joining.
        let registration = DeferredRegistration<Value>()
        changes.enqueue { [self] in
            guard registration.begin() else { return }
            send(delivered)
            registration.finish(key: changes.subscribe(CancelableProcedure(send)), sink: changes)
        }
        return AnyDisposable { registration.cancel() }
    }

    private func subscription(_ key: Sink<Value>.Key) -> any Disposable {
        AnyDisposable { [weak changes] in
            changes?.unsubscribe(key)
        }
    }
}

/// A subscription made later than its disposable: disposing before it is
/// made prevents it, disposing after removes it.
private final class DeferredRegistration<Value>: @unchecked Sendable {
    private let lock = PosixLock()
    private var canceled = false
    private var key: Sink<Value>.Key?
    private weak var sink: Sink<Value>?

    func begin() -> Bool {
        lock.withLock { !canceled }
    }

    func finish(key: Sink<Value>.Key, sink: Sink<Value>) {
        let canceledMeanwhile: Bool = lock.withLock {
            if !canceled {
                self.key = key
                self.sink = sink
            }
            return canceled
        }
        if canceledMeanwhile {
            sink.unsubscribe(key)
        }
    }

    func cancel() {
        let registered: (Sink<Value>.Key, Sink<Value>?)? = lock.withLock {
            canceled = true
            return key.map { ($0, sink) }
        }
        if let (key, sink) = registered {
            sink?.unsubscribe(key)
        }
    }
}
