/// A value whose changes are a signal. Observing `signal` sends the current
/// value first, then every change; nothing is lost or sent twice.
///
/// Sets are delivered as a `Sink`'s sends are: synchronously, or, where
/// waiting would deadlock, queued behind the delivery in progress. `value`
/// can be read anywhere, including inside an observer while a set is being
/// delivered: there it is the value being delivered, unless the delivering
/// thread has set another since. A set queued on the delivering thread (made
/// inside an observer of this variable) stores at once, so the setter reads
/// it back; one queued for another thread's delivery stores when it is
/// delivered, so that `value` never runs ahead of what observers are getting
/// from other threads (a two-way binding guarded by `!=` then settles).
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
            changes.queueLock.withLock { storage }
        }
        set {
            let thread = currentThreadRecord()
            if changes.isDelivering(on: thread) {
                changes.queueLock.withLock {
                    storage = newValue
                    changes.queueLocked(.action(delivery(of: newValue)))
                }
            } else if changes.enter(thread) {
                if changes.hasPending.load(ordering: .relaxed) {
                    changes.queue(.action(delivery(of: newValue)))
                } else {
                    deliver(newValue)
                }
                changes.leave(thread)
            } else {
                changes.queue(.action(delivery(of: newValue)))
                changes.deliverIfIdle(thread)
            }
        }
    }

    // Its queueLock also guards `storage`.
    private let changes = Sink<Value>()
    private var storage: Value
    // The last value delivered to observers: what a new observer starts from.
    // Only touched by the thread holding the sink.
    private var delivered: Value

    public init(_ value: Value) {
        storage = value
        delivered = value
    }

    /// Stores and delivers `newValue`. Only while holding the sink.
    private func deliver(_ newValue: Value) {
        changes.queueLock.withLock { storage = newValue }
        delivered = newValue
        changes.deliver(newValue)
    }

    private func delivery(of newValue: Value) -> () -> Void {
        { [self] in deliver(newValue) }
    }

    private func observeChanges(_ send: @escaping (Value) -> Void) -> any Disposable {
        let thread = currentThreadRecord()
        let delivering = changes.isDelivering(on: thread)
        if !delivering && changes.enter(thread) {
            // After the sets queued before it: the first value is the one
            // delivered last before joining.
            changes.drainPending()
            send(delivered)
            let key = changes.subscribe(CancelableProcedure(send))
            changes.leave(thread)
            return subscription(key)
        }
        // Observed from inside an observer: join after the queued deliveries,
        // so the first value is the one delivered last before joining.
        let registration = DeferredRegistration<Value>()
        changes.queue(.action { [self] in
            guard registration.begin() else { return }
            send(delivered)
            registration.finish(key: changes.subscribe(CancelableProcedure(send)), sink: changes)
        })
        if !delivering {
            changes.deliverIfIdle(thread)
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
