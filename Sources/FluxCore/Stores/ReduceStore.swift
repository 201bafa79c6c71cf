import Synchronization

/// Facebook's `FluxReduceStore`: the state is `reduce(state, payload)`;
/// when the new state is not equal to the old one the store keeps it and
/// its listeners run once, still inside the dispatch.
///
///     let count = ReduceStore<Int, String>(dispatcher: d, initialState: 0) { n, action in
///         action == "inc" ? n + 1 : n
///     }
///     count.addListener { print(count.state) }
///
/// A `reduce` that throws fails the dispatch (the dispatcher rethrows that
/// error) and the store keeps its state. The dispatcher holds the store
/// weakly: keep a reference to it (a `StoreGroup` over it keeps it too).
///
/// Thread safety: `state` and `addListener` from any thread; `hasChanged`
/// only on the dispatching thread.
public final class ReduceStore<State, Payload>: DispatchingStore, @unchecked Sendable {
    // @unchecked: `state` is behind a mutex, the listeners behind the core's.
    public let dispatcher: Dispatcher<Payload>
    public private(set) var dispatchToken = DispatchToken(rawValue: 0)
    let core: StoreCore<ClosureListener>
    private let current: Mutex<Box>
    private let reduce: @Sendable (State, Payload) throws -> State
    private let areEqual: @Sendable (State, State) -> Bool

    /// Lets `Mutex` hold any State (it wants a Sendable value to hand out).
    private struct Box: @unchecked Sendable { var state: State }

    /// Registers the store with `dispatcher`. `areEqual(old, new)` decides
    /// whether a reduce changed anything.
    public init(
        dispatcher: Dispatcher<Payload>,
        initialState: State,
        areEqual: @escaping @Sendable (State, State) -> Bool,
        reduce: @escaping @Sendable (State, Payload) throws -> State
    ) {
        guard let core = StoreCore<ClosureListener>() else { fatalError("ReduceStore: out of memory") }
        self.core = core
        self.dispatcher = dispatcher
        self.current = Mutex(Box(state: initialState))
        self.reduce = reduce
        self.areEqual = areEqual
        dispatchToken = dispatcher.register(owner: .store) { [weak self] payload in
            guard let self else { return }
            if let failure = self.core.handle(payload, Reducer(store: self), on: self.dispatcher.core) {
                switch failure {
                case .reduce(let error): throw error
                }
            }
        }
    }

    deinit {
        dispatcher.unregister(owned: dispatchToken)
    }

    /// The current state.
    public var state: State { current.withLock { $0 }.state }

    private struct Reducer: StoreReducer {
        unowned(unsafe) let store: ReduceStore<State, Payload>
        func loadState() -> State { store.state }
        func storeState(_ state: State) { store.current.withLock { $0 = Box(state: state) } }
        func reduce(_ state: State, _ payload: Payload) -> Result<State, any Error> {
            Result { try store.reduce(state, payload) }
        }
        func isSame(_: State, _: State) -> Bool { false }
        func areEqual(_ a: State, _ b: State) -> Bool { store.areEqual(a, b) }
        func release(_: State) {}
    }

    /// Whether the most recent reduce changed the state (call it after
    /// `waitFor([dispatchToken])` for this dispatch's answer).
    /// - Throws: `.notDispatching` unless this thread is dispatching.
    public func hasChanged() throws(FluxError) -> Bool {
        try core.hasChanged(on: dispatcher.core)
    }

    /// Marks the store changed from inside `reduce` (for state changed in
    /// place, say in a class instance): its listeners run after the reduce.
    /// - Throws: `.notDispatching` unless called while `reduce` runs.
    public func emitChange() throws(FluxError) {
        try core.emitChange(on: dispatcher.core)
    }

    /// Adds `listener`, run once per dispatch that changed the state (from
    /// the next change on, when added during one).
    @discardableResult
    public func addListener(_ listener: @escaping @Sendable () -> Void) -> Subscription {
        addClosureListener(core, listener) { [weak self] id throws(FluxError) in
            guard let self else { throw FluxError(.unknownToken, "the store is gone") }
            try self.core.removeListener(id)
        }
    }
}

extension ReduceStore where State: Equatable & Sendable {
    /// A reduce store whose states compare with `==`. (Sendable: the
    /// comparison captures the type.)
    public convenience init(
        dispatcher: Dispatcher<Payload>,
        initialState: State,
        reduce: @escaping @Sendable (State, Payload) throws -> State
    ) {
        self.init(dispatcher: dispatcher, initialState: initialState, areEqual: { $0 == $1 }, reduce: reduce)
    }
}
