@_spi(Engine) import FluxCore
import Synchronization

/// Sends values to the observers of its `signal`, in subscription order.
///
/// Sends are serialized: the observers of one sink never run concurrently.
/// A send is delivered synchronously, on the sending thread, before `send`
/// returns, waiting for a delivery in progress on another thread to end;
/// except where waiting could deadlock, that is, when the sending thread is
/// itself inside a delivery (of this sink or of another) or inside a
/// dispatch (a `Dispatcher`'s or a store's, which a delivering thread may be
/// waiting for). Then the value is queued and delivered by the thread
/// delivering this sink before that thread lets it go:
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

    // Guards the properties below (and a Variable's stored value). Never held
    // while user code runs, so it cannot be part of a deadlock. The lock (or
    // the turn) already makes accesses exclusive: no dynamic exclusivity
    // checks, which cost a runtime call per access in a client's build.
    @usableFromInline let lock = PosixLock()
    @usableFromInline @exclusivity(unchecked) var observers = ObserverList<Observer>()
    // The turn: the thread delivering now, or nil. Deliveries happen outside
    // the lock, one thread at a time.
    @usableFromInline @exclusivity(unchecked) var deliverer: ThreadRecord?
    // Deliveries handed to the deliverer, in the order queued. Empty whenever
    // nobody delivers: the deliverer runs them all before it lets go.
    @usableFromInline @exclusivity(unchecked) var pending: [Pending] = []
    // Threads waiting for the turn.
    @usableFromInline @exclusivity(unchecked) var waiting = 0
    @usableFromInline let turnEnded = PosixCondition()

    public init() {}

    @inlinable
    public func send(value: Value) {
        let thread = currentThreadRecord()
        lock.lock()
        guard takeTurn(thread) else {
            pending.append(.value(value))
            lock.unlock()
            return
        }
        let current = observers.elements
        lock.unlock()
        call(current, with: value)
        endTurn(thread)
    }

    // MARK: Internal, for Variable

    /// With `lock` held: takes the turn, waiting for it when the thread is
    /// inside no delivery, and returns true; or returns false when another
    /// delivery is in progress and the thread is inside one, which must not
    /// wait (two such threads could wait for each other): the caller queues
    /// in `pending` instead. Returns with `lock` held either way.
    @inlinable
    func takeTurn(_ thread: ThreadRecord) -> Bool {
        guard deliverer == nil else { return waitForTurn(thread) }
        deliverer = thread
        thread.pointee += 1
        return true
    }

    @usableFromInline
    func waitForTurn(_ thread: ThreadRecord) -> Bool {
        guard thread.pointee == 0 && !isInsideDispatch() else { return false }
        waiting += 1
        repeat {
            turnEnded.wait(lock)
        } while deliverer != nil
        waiting -= 1
        deliverer = thread
        thread.pointee += 1
        return true
    }

    /// Runs what was queued during the turn, then lets the turn go. Without
    /// `lock`, after `takeTurn`.
    @inlinable
    func endTurn(_ thread: ThreadRecord) {
        lock.lock()
        guard pending.isEmpty && waiting == 0 else { return drainAndEndTurn(thread) }
        deliverer = nil
        lock.unlock()
        thread.pointee -= 1
    }

    /// `endTurn`, entered with `lock` held.
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
        deliverer = nil
        if waiting > 0 {
            turnEnded.signal()
        }
        lock.unlock()
        thread.pointee -= 1
    }

    /// Calls the current observers with `value`. Only during the turn, without `lock`.
    @inlinable
    func deliver(_ value: Value) {
        lock.lock()
        let current = observers.elements
        lock.unlock()
        call(current, with: value)
    }

    @inlinable
    func call(_ observers: ContiguousArray<Observer>, with value: Value) {
        for observer in observers {
            observer.execute(with: value)
        }
    }

    // @inlinable, like send: observe specializes in the client.
    @inlinable
    func subscribe(_ observer: Observer) -> Key {
        lock.withLock { observers.add(observer) }
    }

    @inlinable
    func unsubscribe(_ key: Key) {
        // Released outside the lock: the closure's deinit may come back here.
        let removed = lock.withLock { observers.remove(for: key) }
        _ = removed
    }
}

/// What observing a sink returns: AnyDisposable's rules (dispose once, then
/// let go of the observer) in one object, where an AnyDisposable over a
/// closure took three allocations and a weak reference's box.
@usableFromInline
final class SinkSubscription<Value>: Disposable, @unchecked Sendable {
    @usableFromInline let disposed = Atomic<Bool>(false)
    // Written by init and by the one caller that wins the exchange in dispose().
    @usableFromInline @exclusivity(unchecked) var procedure: CancelableProcedure<Value>?
    // Weak: a subscription does not keep its sink, and what the sink's
    // observers hold, alive.
    @usableFromInline weak var sink: Sink<Value>?
    @usableFromInline let key: Sink<Value>.Key

    @inlinable
    init(_ procedure: CancelableProcedure<Value>, key: Sink<Value>.Key, sink: Sink<Value>) {
        self.procedure = procedure
        self.key = key
        self.sink = sink
    }

    @inlinable
    var isDisposed: Bool {
        disposed.load(ordering: .acquiring)
    }

    @inlinable
    func dispose() {
        guard disposed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else {
            return
        }
        procedure?.cancel()
        procedure = nil
        sink?.unsubscribe(key)
    }
}
