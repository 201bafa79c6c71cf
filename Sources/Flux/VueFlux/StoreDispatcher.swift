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

    @usableFromInline let dispatchLock: PosixLock
    @usableFromInline let observersLock = PosixLock()
    @usableFromInline var observers = ObserverList<Observer>()

    /// The shared dispatcher of `State`.
    fileprivate init() {
        dispatchLock = PosixLock(recursive: true)
    }

    /// A store's own dispatcher, serialized with the shared one.
    @usableFromInline
    init(sharingLockWith shared: StoreDispatcher<State>) {
        dispatchLock = shared.dispatchLock
    }

    @inlinable
    func dispatch(action: State.Action) {
        dispatchLock.lock()
        // Mutations run under the lock, which another thread may be waiting
        // for from inside a Sink's delivery: here counts as inside one, so a
        // send or Variable set from a mutation is handed over instead of
        // waiting for that Sink's turn (see Sink).
        let thread = currentThreadRecord()
        thread.pointee += 1
        defer {
            thread.pointee -= 1
            dispatchLock.unlock()
        }
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
            let dispatcher = StoreDispatcher<State>()
            dispatchers[identifier] = dispatcher
            return dispatcher
        }
    }
}
