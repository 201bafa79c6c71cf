/// A value whose changes are a signal; nothing is lost or sent twice.
///
/// Sets are delivered as a `Sink`'s sends are: synchronously, on the setting
/// thread, before the setter returns; or, where waiting could deadlock (the
/// setting thread is inside a delivery or a dispatch while another delivery
/// of this variable is in progress), handed to the delivery in progress. A
/// set stores its value when it is delivered, so `value` follows the order
/// observers get values in, never runs ahead of them, and ends at the value
/// delivered last (a two-way binding guarded by `!=` then settles). So:
/// - A set handed to another thread's delivery is not visible through
///   `value`, not even on the setting thread, until that thread delivers it.
/// - The one exception: a set made inside an observer of this variable, on
///   the delivering thread, also stores at once, so the setter reads it
///   back; it is delivered (and stored again) when the current delivery ends.
///
/// `value` can be read anywhere, including inside an observer while a set is
/// being delivered.
///
/// Observing `signal` calls the observer with the current value (the value
/// delivered last) and then with every change. The first call is made at
/// once, on the observing thread, before `observe` returns, except where
/// waiting could deadlock: when a delivery of this variable is in progress
/// and the observing thread is inside a delivery (of this variable or of any
/// sink) or a dispatch, the observer joins after the deliveries queued so
/// far. Its first value, the value delivered last before it joined, then
/// comes from the delivering thread after `observe` has returned (from the
/// observing thread itself when it observes inside an observer of this
/// variable, when the current delivery ends).
public final class Variable<Value>: @unchecked Sendable {
    /// A read-only view of this variable.
    public var constant: Constant<Value> {
        .init(variable: self)
    }

    /// The current value, then every change (see above).
    @inlinable
    public var signal: Signal<Value> {
        .init(variable: self)
    }

    /// The value delivered last (see above for a set's ordering). Any
    /// thread may get or set it, also inside an observer.
    // @inlinable, as are the members it uses: so that a client's release
    // build specializes a set (unspecialized, it spends most of its time
    // looking up generic metadata).
    @inlinable
    public var value: Value {
        get {
            changes.lock.withLock { storage }
        }
        set {
            let thread = currentThreadRecord()
            changes.lock.lock()
            guard changes.takeTurn(thread) else { return queue(newValue, from: thread) }
            let current = store(newValue)
            delivered = newValue
            changes.call(current, with: newValue)
            changes.endTurn(thread)
        }
    }

    // Its lock also guards `storage` (so no dynamic exclusivity checks, as
    // in Sink). A value replaced in `storage` is never released there, under
    // the lock: `delivered` or a queued delivery still holds it.
    @usableFromInline let changes = SinkCore<Value>()
    @usableFromInline @exclusivity(unchecked) var storage: Value
    // The last value delivered to observers: what a new observer starts from.
    // Only touched during the sink's turn.
    @usableFromInline @exclusivity(unchecked) var delivered: Value

    /// A variable holding `value`, with no observers.
    public init(_ value: Value) {
        storage = value
        delivered = value
    }

    // The observers go with the variable, not with its subscriptions.
    deinit {
        changes.close()
    }

    /// Entered with the sink's lock held, during the turn: stores `newValue`,
    /// lets go of the lock, and returns the observers to deliver it to.
    @inlinable
    func store(_ newValue: Value) -> SinkCore<Value>.Snapshot {
        storage = newValue
        let current = changes.snapshot()
        changes.lock.unlock()
        return current
    }

    /// A set while another delivery of this variable is in progress and the
    /// thread must not wait for it (see Sink.takeTurn): entered with the lock
    /// held, queues the set's delivery, which stores the value as it delivers
    /// it, so that `value` follows the order observers get values in.
    @usableFromInline
    func queue(_ newValue: Value, from thread: ThreadRecord) {
        // Set inside an observer of this variable: also stored at once, so
        // that the setter reads it back. Stored again when delivered: a set
        // handed over by another thread may be delivered in between.
        if changes.isDelivering(thread) {
            storage = newValue
        }
        changes.pending.append(
            .action { [self] in
                changes.lock.lock()
                let current = store(newValue)
                delivered = newValue
                changes.call(current, with: newValue)
            })
        changes.lock.unlock()
    }

    /// Signal.observe of `signal`: sends the value last delivered, then
    /// subscribes, both within one turn, so that nothing is lost or sent
    /// twice. The procedure itself is the observer (as a sink's are), and the
    /// subscription the one a sink's observation returns.
    @inlinable
    func observe(_ procedure: CancelableProcedure<Value>) -> any Disposable {
        let thread = currentThreadRecord()
        changes.lock.lock()
        guard changes.takeTurn(thread) else { return observeAfterDeliveries(procedure) }
        changes.lock.unlock()
        procedure.execute(with: delivered)
        let key = changes.subscribe(procedure)
        changes.endTurn(thread)
        return SinkSubscription(key: key, sink: changes)
    }

    /// Observed during a delivery in progress (entered with the lock held):
    /// joins after the deliveries queued, so the first value is the one
    /// delivered last before joining.
    @usableFromInline
    func observeAfterDeliveries(_ procedure: CancelableProcedure<Value>) -> any Disposable {
        let registration = DeferredRegistration<Value>()
        changes.pending.append(
            .action { [self] in
                guard registration.begin() else { return }
                procedure.execute(with: delivered)
                registration.finish(key: changes.subscribe(procedure), sink: changes)
            })
        changes.lock.unlock()
        // As in Signal.observe: the queued registration, then the sink's
        // list, hold the procedure while it may be called.
        return ObserverDisposable(procedure: procedure, ending: registration)
    }
}

/// A subscription made later than its disposable: disposing before it is
/// made prevents it, disposing after removes it.
final class DeferredRegistration<Value>: Disposable, @unchecked Sendable {
    private let lock = PosixLock()
    private var canceled = false
    private var key: SinkCore<Value>.Key?
    private var sink: SinkCore<Value>?

    func begin() -> Bool {
        lock.withLock { !canceled }
    }

    func finish(key: SinkCore<Value>.Key, sink: SinkCore<Value>) {
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

    var isDisposed: Bool {
        lock.withLock { canceled }
    }

    func dispose() {
        let registered: (SinkCore<Value>.Key, SinkCore<Value>?)? = lock.withLock {
            canceled = true
            return key.map { ($0, sink) }
        }
        if let (key, sink) = registered {
            sink?.unsubscribe(key)
        }
    }
}
