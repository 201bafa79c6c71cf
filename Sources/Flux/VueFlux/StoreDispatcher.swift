@_spi(Engine) import FluxCore
import Synchronization

/// What a store subscribes to: a list of commit functions, called in
/// subscription order. Dispatches are serialized across threads by a
/// recursive lock, so a commit may dispatch again on the same thread
/// (VueFlux's recursive dispatch); each dispatch reaches the subscribers
/// present when it started. Every dispatcher of one State type (the shared
/// one and each store's own) holds the same lock: a store is reached through
/// two of them, and with `.immediate` two dispatchers with locks of their own
/// would run its mutations concurrently (VueFlux does). Not FluxCore's `Dispatcher`: that one refuses a
/// dispatch from inside a callback, and its callbacks are @Sendable.
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
        dispatchLock.lock()
        defer { dispatchLock.unlock() }
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

    private let lock = PosixLock()
    private var dispatchers: [ObjectIdentifier: AnyObject] = [:]

    private init() {}

    func dispatcher<State: Flux.State>(for stateType: State.Type) -> StoreDispatcher<State> {
        lock.withLock {
            let identifier = ObjectIdentifier(stateType)
            if let dispatcher = dispatchers[identifier] as? StoreDispatcher<State> {
                return dispatcher
            }
            let dispatchLock = StoreDispatchLock()
            // Kept for the process's life, as the dispatcher is.
            DispatchingThreads.shared.add(dispatchLock) {
                dispatchLock.owner.load(ordering: .relaxed) == currentThreadID()
            }
            let dispatcher = StoreDispatcher<State>(dispatchLock: dispatchLock)
            dispatchers[identifier] = dispatcher
            return dispatcher
        }
    }
}

/// The recursive lock every dispatcher of one State type holds while its
/// commits run, and the thread holding it. Another thread may be waiting for
/// it from inside a Sink's delivery, so a send from a mutation must not wait
/// for that delivery (see Sink): Sink's slow path asks FluxCore's
/// DispatchingThreads, and the dispatch pays a thread identity and two
/// stores, no thread-local lookup.
@usableFromInline
final class StoreDispatchLock: @unchecked Sendable {
    @usableFromInline let mutex = PosixLock(recursive: true)
    /// The holder's `currentThreadID()`, 0 when free. Written under `mutex`; read
    /// by any thread, which only compares it with its own identity.
    @usableFromInline let owner = Atomic<UInt>(0)
    /// How many times the holder holds it (a commit may dispatch again).
    @usableFromInline @exclusivity(unchecked) var depth = 0

    @inlinable
    func lock() {
        mutex.lock()
        if depth == 0 { owner.store(currentThreadID(), ordering: .relaxed) }
        depth += 1
    }

    @inlinable
    func unlock() {
        depth -= 1
        if depth == 0 { owner.store(0, ordering: .relaxed) }
        mutex.unlock()
    }
}
