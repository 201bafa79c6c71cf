import Synchronization

/// Sends values to the observers of its `signal`, in subscription order.
///
/// Sends are serialized: the observers of one sink never run concurrently.
/// A send is delivered synchronously, on the sending thread, before `send`
/// returns, waiting for a delivery in progress on another thread to end;
/// except where waiting could deadlock, that is, when the sending thread is
/// itself inside a delivery (of this sink or of another) or inside a
/// dispatch (a `Dispatcher`'s or a store's, or a `RegisteredStore` init that
/// `registerStore` runs, which a delivering thread may be waiting for). Then
/// the value is queued and delivered by the thread delivering this sink
/// before that thread lets it go:
/// - a send from inside an observer of this sink is delivered when the
///   current delivery ends (VueFlux deadlocks there);
/// - a send from inside an observer of another sink, or from a dispatch's
///   callback or a store's mutation, while a second thread delivers this one
///   (two-way bindings set from two threads; an observer of this sink
///   dispatching to that dispatcher or store), is delivered by that thread.
/// Either way every observer gets the values of one sender in the order it
/// sent them. Each value goes to the observers present when its delivery
/// starts: one added during a delivery misses that value and gets the ones
/// queued behind it.
///
/// fork(): a sink has no fork hook (one per sink would cost every sink a
/// global lock). In a child forked while another thread delivered it, a send
/// may wait for good for that delivery; the child should use sinks it makes.
public final class Sink<Value>: @unchecked Sendable {
    /// A new signal each time; each observation of it adds an observer.
    @inlinable
    public var signal: Signal<Value> {
        .init(sink: self)
    }

    @usableFromInline let core = SinkCore<Value>()

    /// A sink with no observers.
    public init() {}

    // The observers go with the sink, not with its subscriptions (which hold
    // the core).
    deinit {
        core.close()
    }

    /// Calls the observers with `value` (see above for the thread, and when
    /// the call is handed to another thread's delivery instead). From any
    /// thread, and from inside an observer.
    @inlinable
    public func send(value: Value) {
        core.send(value: value)
    }
}

/// A sink's state and deliveries, and a Variable's. Subscriptions hold it
/// strongly, so that disposing needs no weak reference to the sink (a weak
/// reference gives the sink a side table, which makes every retain and
/// release of it slower, and costs four more atomic operations per
/// observation); the owner closes it when it goes, letting the observers go.
@usableFromInline
final class SinkCore<Value>: @unchecked Sendable {
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

    /// An observer in the sink's list: held by one retain taken at subscribe
    /// and given back at unsubscribe, so that a delivery can call it without
    /// a reference-count operation of its own.
    @usableFromInline
    struct Entry {
        @usableFromInline let key: UInt64
        @usableFromInline let observer: Unmanaged<Observer>

        @inlinable
        init(key: UInt64, observer: Unmanaged<Observer>) {
            self.key = key
            self.observer = observer
        }
    }

    /// The observers a delivery calls: the list as it was when the delivery
    /// began, read in place (see `snapshot()` for why it stays valid).
    @usableFromInline
    struct Snapshot {
        @usableFromInline let entries: UnsafeMutablePointer<Entry>?
        @usableFromInline let count: Int

        @inlinable
        init(entries: UnsafeMutablePointer<Entry>?, count: Int) {
            self.entries = entries
            self.count = count
        }
    }

    // The turn: the address of the delivering thread's record, or 0 when
    // nobody delivers; deliveries happen outside the lock, one thread at a
    // time. Taken only with `lock` held; given back without it by one
    // compare-and-swap, unless `Turn.slow` is set: someone queued a delivery,
    // waits for the turn, or retired what the deliverer may still read
    // (set with `lock` held, see `Turn.markSlow`), and the end of the turn must
    // take the lock. A send thus costs one lock, one unlock and one
    // compare-and-swap, and no reference counting. Who may wait for it and
    // who hands over instead: see `Turn`.
    @usableFromInline let turn = Atomic<UInt>(0)

    // Guards the properties below (and a Variable's stored value). Never held
    // while user code runs, so it cannot be part of a deadlock. The lock (or
    // the turn) already makes accesses exclusive: no dynamic exclusivity
    // checks, which cost a runtime call per access in a client's build.
    @usableFromInline let lock = PosixLock()
    // The observers, in subscription order, in a buffer of our own: a
    // delivery reads it without the lock and without retaining it. While a
    // delivery may be reading it (`snapshotTaken` during a turn), a change
    // copies it first and retires the old one; an observer removed during a
    // turn is retired too. What is retired is let go when the turn ends.
    @usableFromInline @exclusivity(unchecked) var entries: UnsafeMutablePointer<Entry>?
    @usableFromInline @exclusivity(unchecked) var count = 0
    @usableFromInline @exclusivity(unchecked) var capacity = 0
    @usableFromInline @exclusivity(unchecked) var nextKey: UInt64 = 0
    @usableFromInline @exclusivity(unchecked) var snapshotTaken = false
    @usableFromInline @exclusivity(unchecked) var retiredBuffers: [UnsafeMutablePointer<Entry>] = []
    @usableFromInline @exclusivity(unchecked) var retiredObservers: [Unmanaged<Observer>] = []
    // Deliveries handed to the deliverer, in the order queued. Empty whenever
    // nobody delivers: the deliverer runs them all before it lets go.
    @usableFromInline @exclusivity(unchecked) var pending: [Pending] = []
    // Threads waiting for the turn.
    @usableFromInline @exclusivity(unchecked) var waiting = 0
    @usableFromInline let turnEnded = PosixCondition()

    // Set by close(): observers subscribed later are not kept.
    @usableFromInline @exclusivity(unchecked) var closed = false

    @usableFromInline init() {}

    deinit {
        for index in 0..<count {
            entries![index].observer.release()
        }
        entries?.deallocate()
    }

    /// Lets every observer go: the owner (sink or variable) is gone. No turn
    /// can be in progress, as a delivery holds the owner.
    func close() {
        lock.lock()
        closed = true
        let observers = (0..<count).map { entries![$0].observer }
        count = 0
        lock.unlock()
        // Released outside the lock: an observer's deinit may come back here.
        for observer in observers {
            observer.release()
        }
    }

    @inlinable
    func send(value: Value) {
        let thread = currentThreadRecord()
        lock.lock()
        guard takeTurn(thread) else {
            pending.append(.value(value))
            lock.unlock()
            return
        }
        let current = snapshot()
        lock.unlock()
        call(current, with: value)
        endTurn(thread)
    }

    // MARK: Internal, for Variable

    /// With `lock` held: takes the turn, waiting for it when the thread is
    /// inside no delivery or dispatch, and returns true; or returns false
    /// when another delivery is in progress and the thread is inside one,
    /// which must not wait (two such threads could wait for each other): the
    /// caller queues in `pending` instead. Returns with `lock` held either way.
    @inlinable
    func takeTurn(_ thread: ThreadRecord) -> Bool {
        guard turn.load(ordering: .acquiring) == 0 && waiting == 0 else { return waitForTurn(thread) }
        turn.store(UInt(bitPattern: thread), ordering: .relaxed)
        snapshotTaken = false
        thread.pointee += 1
        return true
    }

    @usableFromInline
    func waitForTurn(_ thread: ThreadRecord) -> Bool {
        if !Turn.mayWait(thread) {
            // Queue rather than wait, unless the turn has been given back
            // meanwhile.
            if Turn.markSlow(turn) { return false }
        } else {
            waiting += 1
            while Turn.markSlow(turn) {
                turnEnded.wait(lock)
            }
            waiting -= 1
        }
        // Others still waiting: the end of this turn must wake one.
        turn.store(UInt(bitPattern: thread) | (waiting > 0 ? Turn.slow : 0), ordering: .relaxed)
        snapshotTaken = false
        thread.pointee += 1
        return true
    }

    /// Whether `thread` holds the turn.
    func isDelivering(_ thread: ThreadRecord) -> Bool {
        turn.load(ordering: .relaxed) & ~Turn.slow == UInt(bitPattern: thread)
    }

    /// With `lock` held, during the turn: the observers to deliver to now.
    /// Valid until the turn ends: a change made meanwhile copies the list
    /// (see `prepareChange`), and a removed observer is retired.
    @inlinable
    func snapshot() -> Snapshot {
        snapshotTaken = true
        return Snapshot(entries: entries, count: count)
    }

    /// Runs what was queued during the turn, then lets the turn go. Without
    /// `lock`, after `takeTurn`.
    @inlinable
    func endTurn(_ thread: ThreadRecord) {
        guard turn.compareExchange(expected: UInt(bitPattern: thread), desired: 0, ordering: .releasing).exchanged
        else {
            lock.lock()
            return drainAndEndTurn(thread)
        }
        thread.pointee -= 1
    }

    /// `endTurn`'s slow path, entered with `lock` held.
    @usableFromInline
    func drainAndEndTurn(_ thread: ThreadRecord) {
        var batch: [Pending] = []
        while !pending.isEmpty {
            // What the batch queues comes after it, in the next batch.
            swap(&batch, &pending)
            lock.unlock()
            for item in batch {
                switch item {
                case .value(let value): deliver(value)
                case .action(let action): action()
                }
            }
            // Released outside the lock: a value's deinit may come back here.
            batch.removeAll(keepingCapacity: true)
            lock.lock()
        }
        snapshotTaken = false
        let buffers = retiredBuffers
        let observers = retiredObservers
        if !buffers.isEmpty { retiredBuffers = [] }
        if !observers.isEmpty { retiredObservers = [] }
        turn.store(0, ordering: .releasing)
        if waiting > 0 {
            turnEnded.signal()
        }
        lock.unlock()
        thread.pointee -= 1
        for buffer in buffers {
            buffer.deallocate()
        }
        // Released outside the lock: an observer's deinit may come back here.
        for observer in observers {
            observer.release()
        }
    }

    /// Calls the current observers with `value`. Only during the turn, without `lock`.
    @inlinable
    func deliver(_ value: Value) {
        lock.lock()
        let current = snapshot()
        lock.unlock()
        call(current, with: value)
    }

    @inlinable
    func call(_ observers: Snapshot, with value: Value) {
        guard let entries = observers.entries else { return }
        for index in 0..<observers.count {
            // Held by the list's retain (or, once removed, the retired one).
            entries[index].observer._withUnsafeGuaranteedRef { $0.execute(with: value) }
        }
    }

    /// With `lock` held, before changing the list: copies it when a delivery
    /// may be reading it, and makes room for `extra` more entries.
    @inlinable
    func prepareChange(extra: Int) {
        if snapshotTaken {
            snapshotTaken = false
            if Turn.markSlow(turn) {
                return replaceBuffer(capacity: Swift.max(capacity, count + extra), retiring: true)
            }
        }
        if count + extra > capacity {
            replaceBuffer(capacity: Swift.max(4, capacity * 2), retiring: false)
        }
    }

    @usableFromInline
    func replaceBuffer(capacity newCapacity: Int, retiring: Bool) {
        let buffer = UnsafeMutablePointer<Entry>.allocate(capacity: newCapacity)
        if let entries {
            buffer.initialize(from: entries, count: count)
            if retiring {
                retiredBuffers.append(entries)
            } else {
                entries.deallocate()
            }
        }
        entries = buffer
        capacity = newCapacity
    }

    // @inlinable, like send: observe specializes in the client.
    @inlinable
    func subscribe(_ observer: Observer) -> Key {
        lock.lock()
        let key = nextKey
        nextKey &+= 1
        guard !closed else {
            lock.unlock()
            return Key(rawValue: key)
        }
        prepareChange(extra: 1)
        (entries! + count).initialize(to: Entry(key: key, observer: .passRetained(observer)))
        count += 1
        lock.unlock()
        return Key(rawValue: key)
    }

    @inlinable
    func unsubscribe(_ key: Key) {
        lock.lock()
        var index = 0
        while index < count && entries![index].key != key.rawValue {
            index += 1
        }
        guard index < count else { return lock.unlock() }
        prepareChange(extra: 0)
        let removed = entries![index].observer
        // Canceled here, where the subscription finds it, rather than through
        // a reference the subscription keeps: a held subscription must not
        // keep its observer (and what that captures, often the object that
        // holds the subscription) alive once the sink is gone.
        removed._withUnsafeGuaranteedRef { $0.cancel() }
        (entries! + index).moveInitialize(from: entries! + index + 1, count: count - index - 1)
        count -= 1
        // During a turn a delivery may still be calling it: retired, and
        // released when the turn ends.
        let retired = Turn.markSlow(turn)
        if retired {
            retiredObservers.append(removed)
        }
        lock.unlock()
        // Released outside the lock: the closure's deinit may come back here.
        if !retired {
            removed.release()
        }
    }
}

/// What observing a sink returns: an AnyDisposable (VueFlux's type) with its
/// rules (dispose once, then let go of the observer), in one object, where
/// an AnyDisposable over a closure took three allocations and a weak
/// reference's box.
///
/// It holds the key, not the observer: the sink's list holds that, and
/// `unsubscribe` cancels it. So the observer goes with the sink even while
/// the subscription is kept (an object keeping its subscriptions in a
/// `DisposableScope`, whose observer captures the object, goes once the sink
/// has gone; holding the observer here made that a cycle).
@usableFromInline
final class SinkSubscription<Value>: AnyDisposable, @unchecked Sendable {
    // The core, not the sink: a subscription does not keep its sink, and
    // what the sink's observers hold, alive.
    @usableFromInline let sink: SinkCore<Value>
    @usableFromInline let key: SinkCore<Value>.Key

    @inlinable
    init(key: SinkCore<Value>.Key, sink: SinkCore<Value>) {
        self.key = key
        self.sink = sink
        super.init()
    }

    @inlinable
    override func dispose() {
        // Every call unsubscribes, not only the first: one that loses the race
        // to another thread's dispose must not return while the observer is
        // still in the list (the winner may not have reached it yet), and a
        // key is never reused, so a second removal finds nothing.
        disposed.store(true, ordering: .releasing)
        // Cancels the observer too, if the sink still has it (see above).
        sink.unsubscribe(key)
    }
}
