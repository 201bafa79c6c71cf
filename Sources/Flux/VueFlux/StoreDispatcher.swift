@_spi(Engine) import FluxCore
import Synchronization

/// What a store subscribes to: a list of commit functions, called in
/// subscription order. Dispatches are serialized across threads by a
/// recursive lock, so a commit may dispatch again on the same thread
/// (VueFlux's recursive dispatch); each dispatch reaches the subscribers
/// present when it runs. Every dispatcher of one State type (the shared one
/// and each store's own) holds the same lock: a store is reached through two
/// of them, and with `.immediate` two dispatchers with locks of their own
/// would run its mutations concurrently (VueFlux does).
///
/// A dispatch that finds the lock held by another thread waits for it,
/// unless the dispatching thread is itself inside a dispatch or a delivery:
/// then it is handed to the holder, which runs it before letting go (see
/// `StoreDispatchLock`), and `dispatch` returns at once. Waiting there could
/// deadlock: two stores of different State types whose mutations dispatch
/// to each other's type from two threads would each hold one lock and wait
/// for the other.
///
/// Not FluxCore's `Dispatcher`: that one refuses a dispatch from inside a
/// callback, and its callbacks are @Sendable.
@usableFromInline
final class StoreDispatcher<State: Flux.State>: @unchecked Sendable {
    @usableFromInline typealias Observer = (State.Action) -> Void
    @usableFromInline typealias Key = ObserverList<Observer>.Key

    /// The dispatcher every `Store<State>` also subscribes to.
    @usableFromInline
    static var shared: StoreDispatcher<State> {
        StoreDispatcherRegistry.shared.dispatcher(for: State.self)
    }

    @usableFromInline let dispatchLock: StoreDispatchLock
    @usableFromInline let observersLock = PosixLock()
    @usableFromInline var observers = ObserverList<Observer>()

    /// The shared dispatcher of `State`.
    fileprivate init(dispatchLock: StoreDispatchLock) {
        self.dispatchLock = dispatchLock
    }

    /// A store's own dispatcher, serialized with the shared one.
    @usableFromInline
    init(sharingLockWith shared: StoreDispatcher<State>) {
        dispatchLock = shared.dispatchLock
    }

    @inlinable
    func dispatch(action: State.Action) {
        let thread = currentThreadID()
        guard dispatchLock.tryLock(thread) else { return dispatchContended(action, thread: thread) }
        deliver(action)
        dispatchLock.unlock(thread)
    }

    /// Another thread holds the lock: waits for it, or hands the dispatch
    /// over (the closure is made only here).
    @usableFromInline
    func dispatchContended(_ action: State.Action, thread: UInt) {
        guard dispatchLock.lockOrHandOver(thread, { [self] in deliver(action) }) else { return }
        deliver(action)
        dispatchLock.unlock(thread)
    }

    /// Calls the subscribers present now. With the lock held.
    @inlinable
    func deliver(_ action: State.Action) {
        let current = observersLock.withLock { observers.elements }
        for observer in current {
            observer(action)
        }
    }

    @usableFromInline @discardableResult
    func subscribe(_ observer: @escaping Observer) -> Key {
        observersLock.withLock { observers.add(observer) }
    }

    @usableFromInline
    func unsubscribe(for key: Key) {
        // The removed closure is released outside the lock: it may hold the
        // last reference to something whose deinit comes back here.
        let removed = observersLock.withLock { observers.remove(for: key) }
        _ = removed
    }
}

/// One shared dispatcher per State type, keyed by the exact type. Lives as
/// long as the process (VueFlux's DispatcherContext).
final class StoreDispatcherRegistry: @unchecked Sendable {
    static let shared = StoreDispatcherRegistry()

    // Internal, not private: a test holds it across a fork.
    let lock = PosixLock()
    private var dispatchers: [ObjectIdentifier: AnyObject] = [:]

    private init() {
        // Held across fork(), so that the child finds it free (see `StoreDispatchLock.register`).
        DispatchingThreads.shared.add(
            self, { false },
            fork: { [lock] phase in
                if phase == .prepare { lock.lock() } else { lock.unlock() }
            })
    }

    func dispatcher<State: Flux.State>(for stateType: State.Type) -> StoreDispatcher<State> {
        let identifier = ObjectIdentifier(stateType)
        if let dispatcher = lock.withLock({ dispatchers[identifier] as? StoreDispatcher<State> }) {
            return dispatcher
        }
        // Made, and added to DispatchingThreads, outside the lock: fork()'s
        // prepare takes this lock while it holds DispatchingThreads' lock.
        let made = StoreDispatcher<State>(dispatchLock: StoreDispatchLock())
        made.dispatchLock.register(sharedObserversLock: made.observersLock)
        let dispatcher: StoreDispatcher<State> = lock.withLock {
            if let existing = dispatchers[identifier] as? StoreDispatcher<State> { return existing }
            dispatchers[identifier] = made
            return made
        }
        // Another thread's came first: ours was never used.
        if dispatcher !== made {
            DispatchingThreads.shared.remove(made.dispatchLock)
        }
        return dispatcher
    }
}

/// The recursive lock every dispatcher of one State type holds while its
/// commits run, with `Sink`'s hand-over (see `Turn`): a thread that finds
/// another holding it waits, unless it is inside a delivery or a dispatch,
/// which hands its dispatch to the holder instead. The holder runs what was
/// handed over, in the order handed, at its outermost `unlock`, before it
/// lets go. Whether a thread is inside a dispatch of this lock,
/// `Turn.mayWait` asks FluxCore's DispatchingThreads (`isHeld(by:)`), so
/// that a dispatch pays a thread identity and one compare-and-swap to take
/// the lock and one to give it back, no thread-local lookup.
@usableFromInline
final class StoreDispatchLock: @unchecked Sendable {
    /// The holder's `currentThreadID()`, or 0 when free; `Turn.slow` set when
    /// the holder's release must take `lock` (a dispatch was handed over, or
    /// a thread waits). Any thread reads it, to compare with its own identity.
    @usableFromInline let holder = Atomic<UInt>(0)
    /// How many dispatches the holder is inside (a commit may dispatch
    /// again). Only the holder touches it.
    @usableFromInline @exclusivity(unchecked) var depth = 0
    // Guards the hand-overs and the waiters; never held while user code runs.
    private let lock = PosixLock()
    private var handedOver: [() -> Void] = []
    private var waiting = 0
    private let released = PosixCondition()
    // What a forked child dropped (see `childAfterFork`).
    private var forkOrphans: [() -> Void] = []

    /// Adds it to DispatchingThreads (kept for the process's life, as its
    /// dispatcher is), with its fork hook: fork() holds `lock` and the shared
    /// dispatcher's observer lock across it, so the child finds them free and
    /// what they guard consistent.
    func register(sharedObserversLock: PosixLock) {
        DispatchingThreads.shared.add(
            self, { [self] in isHeld(by: currentThreadID()) },
            fork: { [self] phase in
                switch phase {
                case .prepare:
                    lock.lock()
                    sharedObserversLock.lock()
                case .parent:
                    sharedObserversLock.unlock()
                    lock.unlock()
                case .child:
                    sharedObserversLock.unlock()
                    childAfterFork()
                }
            })
    }

    /// fork()'s child handler, with `lock` held, on the child's only thread.
    /// No thread of the parent exists here: no waiter, and a dispatch another
    /// thread was running never ends, nor would it run what was handed over
    /// to it; it is dropped, with what was handed over, so that dispatches in
    /// the child do not wait for it for good. A dispatch this very thread was
    /// running (fork() from a mutation) goes on.
    private func childAfterFork() {
        released.reset()
        waiting = 0
        let thread = currentThreadID()
        if holder.load(ordering: .relaxed) & ~Turn.slow == thread {
            // Its release still runs what was handed over.
            if !handedOver.isEmpty { holder.store(thread | Turn.slow, ordering: .relaxed) }
        } else {
            // Kept, not released: their deinit could run user code here.
            forkOrphans += handedOver
            handedOver.removeAll()
            depth = 0
            holder.store(0, ordering: .relaxed)
        }
        lock.unlock()
    }

    /// Whether `thread` (a `currentThreadID()`) holds it.
    func isHeld(by thread: UInt) -> Bool {
        holder.load(ordering: .relaxed) & ~Turn.slow == thread
    }

    /// Takes the lock when it is free or `thread` holds it already (a commit
    /// dispatching again); false when another thread holds it.
    @inlinable
    func tryLock(_ thread: UInt) -> Bool {
        if holder.compareExchange(expected: 0, desired: thread, ordering: .acquiring).exchanged {
            depth = 1
            return true
        }
        guard holder.load(ordering: .relaxed) & ~Turn.slow == thread else { return false }
        depth += 1
        return true
    }

    /// After `tryLock` failed: waits for the lock and returns true; or, when
    /// the calling thread must not wait (`Turn.mayWait`), hands `dispatch` to
    /// the holder and returns false -- unless the lock came free meanwhile,
    /// which it then takes.
    @usableFromInline
    func lockOrHandOver(_ thread: UInt, _ dispatch: @escaping () -> Void) -> Bool {
        let mayWait = Turn.mayWait(currentThreadRecord())
        lock.lock()
        defer { lock.unlock() }
        while true {
            if Turn.markSlow(holder) {
                guard mayWait else {
                    handedOver.append(dispatch)
                    return false
                }
                waiting += 1
                released.wait(lock)
                waiting -= 1
            } else if holder.compareExchange(
                // Others still waiting: this holder's release must wake one.
                expected: 0, desired: thread | (waiting > 0 ? Turn.slow : 0), ordering: .acquiring
            ).exchanged {
                depth = 1
                return true
            }
        }
    }

    @inlinable
    func unlock(_ thread: UInt) {
        if depth > 1 {
            depth -= 1
        } else if !holder.compareExchange(expected: thread, desired: 0, ordering: .releasing).exchanged {
            runHandedOverAndUnlock()
        }
    }

    /// `unlock`'s slow path, at the outermost level: runs what was handed
    /// over (and what that hands over), then lets go and wakes a waiter.
    @usableFromInline
    func runHandedOverAndUnlock() {
        var batch: [() -> Void] = []
        lock.lock()
        while !handedOver.isEmpty {
            // What the batch hands over comes after it, in the next batch.
            swap(&batch, &handedOver)
            lock.unlock()
            for dispatch in batch {
                dispatch()
            }
            // Released outside the lock: what a dispatch captured may come back here.
            batch.removeAll(keepingCapacity: true)
            lock.lock()
        }
        holder.store(0, ordering: .releasing)
        if waiting > 0 {
            released.signal()
        }
        lock.unlock()
    }
}
