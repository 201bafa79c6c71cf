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
/// Thread safety: `state` from any thread; the rest as `StoreBase`.
public final class ReduceStore<State, Payload>: StoreBase<Payload>, @unchecked Sendable {
    // @unchecked: `state` is behind a mutex, the listeners behind the core's.
    private let current: Guarded<State>
    private let reduce: @Sendable (State, Payload) throws -> State
    private let areEqual: @Sendable (State, State) -> Bool

    /// Registers the store with `dispatcher`. `areEqual(old, new)` decides
    /// whether a reduce changed anything.
    public init(
        dispatcher: Dispatcher<Payload>,
        initialState: State,
        areEqual: @escaping @Sendable (State, State) -> Bool,
        reduce: @escaping @Sendable (State, Payload) throws -> State
    ) {
        self.current = Guarded(initialState)
        self.reduce = reduce
        self.areEqual = areEqual
        super.init(dispatcher: dispatcher)
        register { base, payload in
            let store = unsafeDowncast(base, to: ReduceStore<State, Payload>.self)
            if let failure = store.core.handle(payload, Reducer(store: store), on: store.dispatcher.core) {
                switch failure {
                case .reduce(let error): throw error
                }
            }
        }
    }

    /// The current state.
    public var state: State { current.withLock { $0 } }

    private struct Reducer: StoreReducer {
        unowned(unsafe) let store: ReduceStore<State, Payload>
        func loadState() -> State { store.state }
        func storeState(_ state: State) {
            _ = store.current.exchange(state)  // let go of outside the lock: its deinit may read `state`
        }
        func reduce(_ state: State, _ payload: Payload) -> Result<State, any Error> {
            Result { try store.reduce(state, payload) }
        }
        func isSame(_: State, _: State) -> Bool { false }
        func areEqual(_ a: State, _ b: State) -> Bool { store.areEqual(a, b) }
        func release(_: State) {}
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
