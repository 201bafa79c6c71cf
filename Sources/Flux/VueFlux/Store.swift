/// Holds a `State`, commits actions to it through its `Mutations` on its
/// `Executor`, and exposes `actions` and `computed` for extensions. On which
/// thread a dispatch runs, and when it waits: see `Actions`.
///
/// A subclass restates the conformance in Swift 6:
/// `final class CounterStore: Store<CounterState>, @unchecked Sendable`.
open class Store<State: Flux.State>: @unchecked Sendable {
    @usableFromInline let dispatcher: StoreDispatcher<State>
    @usableFromInline let sharedDispatcher: StoreDispatcher<State>

    @usableFromInline let commitProcedure: CancelableProcedure<State.Action>
    @usableFromInline let dispatcherKey: StoreDispatcher<State>.Key
    @usableFromInline let sharedDispatcherKey: StoreDispatcher<State>.Key

    /// Dispatches to every live store whose State is exactly `State`.
    @inlinable
    public static var actions: Actions<State> {
        .init(dispatcher: StoreDispatcher<State>.shared)
    }

    /// Dispatches to this store only.
    public let actions: Actions<State>

    /// Read access to the state.
    public let computed: Computed<State>

    /// Subscribes to this store's own dispatcher and to the shared one of
    /// `State`; from any thread, also from inside a commit (the store then
    /// misses the action being dispatched).
    @inlinable
    public init(state: State, mutations: State.Mutations, executor: Executor) {
        let commitProcedure = CancelableProcedure<State.Action> { action in
            mutations.commit(action: action, state: state)
        }
        // The cancel check runs when the executor gets to the commit, so a
        // commit queued before the store went away is dropped too.
        let commit: (State.Action) -> Void
        if executor.runsInline {
            // .immediate: no closure to allocate per commit.
            commit = { action in commitProcedure.execute(with: action) }
        } else {
            // Weakly from the queued work: the mutations and the state go
            // with the store, as in VueFlux (whose cancel releases them),
            // not when the executor has run what it had queued.
            commit = { action in
                executor.execute { [weak commitProcedure] in commitProcedure?.execute(with: action) }
            }
        }

        self.commitProcedure = commitProcedure
        let sharedDispatcher = StoreDispatcher<State>.shared
        let dispatcher = StoreDispatcher<State>(sharingLockWith: sharedDispatcher)
        self.sharedDispatcher = sharedDispatcher
        self.dispatcher = dispatcher
        actions = .init(dispatcher: dispatcher)
        computed = .init(state: state)
        dispatcherKey = dispatcher.subscribe(commit)
        sharedDispatcherKey = sharedDispatcher.subscribe(commit)
    }

    deinit {
        commitProcedure.cancel()
        dispatcher.unsubscribe(for: dispatcherKey)
        sharedDispatcher.unsubscribe(for: sharedDispatcherKey)
    }
}

/// A store's state: a class, with its action type and its mutations.
public protocol State: AnyObject {
    associatedtype Action
    associatedtype Mutations: Flux.Mutations where Mutations.State == Self
}

/// The only place a state changes: one commit per dispatched action.
public protocol Mutations {
    associatedtype State: Flux.State

    func commit(action: State.Action, state: State)
}

/// Dispatches actions to a store (`store.actions`) or to every store of a
/// State type (`Store<State>.actions`). Extend it with named actions.
/// Once its store is gone it reaches nothing.
///
/// Dispatches to the stores of one State type are serialized across
/// threads, and a mutation may dispatch again (recursively, before the outer
/// commit goes on). A dispatch runs on the dispatching thread and hands each
/// store's commit to its executor before `dispatch` returns, waiting for a
/// dispatch of that State type in progress on another thread. Except where
/// waiting could deadlock: when the dispatching thread is itself inside a
/// dispatch (a store's mutation, a `Dispatcher`'s callback, a
/// `RegisteredStore` init that `registerStore` runs) or a delivery
/// (an observer of a `Sink` or `Variable`), the dispatch is handed to the
/// thread in progress, which runs it, after the dispatches handed over
/// before it, before that thread's own dispatch returns; `dispatch` then
/// returns at once, its commits not yet made. (Stores of two State types
/// whose mutations dispatch to each other's type from two threads would
/// otherwise wait for each other.)
///
/// fork(): a child forked while another thread dispatched to a State type
/// drops that dispatch (it cannot end there), and its own dispatches of
/// that type work (`StoreDispatchLock`).
public struct Actions<State: Flux.State>: @unchecked Sendable {
    @usableFromInline let dispatcher: StoreDispatcher<State>

    @usableFromInline
    init(dispatcher: StoreDispatcher<State>) {
        self.dispatcher = dispatcher
    }

    /// Commits `action` to the store (or every store of `State`) on its
    /// executor; see above for the thread and when it returns.
    @inlinable
    public func dispatch(action: State.Action) {
        dispatcher.dispatch(action: action)
    }
}

/// Read access to a store's state. Extend it with computed properties.
public struct Computed<State: Flux.State> {
    public let state: State

    @usableFromInline
    init(state: State) {
        self.state = state
    }
}

extension Computed: Sendable where State: Sendable {}
