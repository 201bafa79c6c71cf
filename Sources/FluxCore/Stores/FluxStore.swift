/// A store on a `Dispatcher`: Facebook's `FluxStore` (and the common part of
/// `ReduceStore`). Its registered callback hands each payload to the store;
/// when the store changed, its listeners run once, still inside the dispatch.
public protocol DispatchingStore<Payload>: AnyObject, Sendable {
    associatedtype Payload
    /// The dispatcher the store is registered with.
    var dispatcher: Dispatcher<Payload> { get }
    /// The store's registration, for `waitFor` and `StoreGroup`. It is the
    /// store's: `Dispatcher.unregister` refuses it (the store unregisters
    /// when it is deallocated).
    var dispatchToken: DispatchToken { get }
}

/// A listener handle from `addListener`: `remove()` ends the subscription.
/// Dropping the handle does not remove the listener (as with Facebook's
/// emitter subscriptions); the store keeps it until `remove()` or its end.
public final class Subscription: Sendable {
    /// The listener's id within its store: they count up from 1.
    public let id: UInt64
    private let body: @Sendable (UInt64) throws(FluxError) -> Void

    init(id: UInt64, remove body: @escaping @Sendable (UInt64) throws(FluxError) -> Void) {
        self.id = id
        self.body = body
    }

    /// Removes the listener. It is not called by any emit after this returns
    /// on this thread; if it is running now, it is released once it returns.
    /// - Throws: `FluxError` with `.unknownToken` when already removed.
    public func remove() throws(FluxError) {
        try body(id)
    }
}

/// A Swift closure as a store listener.
@_spi(Engine) public struct ClosureListener: StoreListener {
    let body: @Sendable () -> Void
    @_spi(Engine) public func invoke() -> Never? {
        body()
        return nil
    }
    // Dropping the closure is its release; the core drops it once.
    @_spi(Engine) public func release() {}
}

/// Facebook's `FluxStore`: `onDispatch` handles every payload itself and
/// calls `emitChange()` when it changed something.
///
///     let log = FluxStore(dispatcher: d) { store, action in
///         if case .append = action { ...; try store.emitChange() }
///     }
///     let sub = log.addListener { print("changed") }
///
/// The dispatcher holds the store weakly: keep a reference to it (a
/// `StoreGroup` over it keeps it too). When the store goes away it
/// unregisters itself.
///
/// Thread safety: `addListener` and `Subscription.remove` from any thread;
/// `hasChanged` and `emitChange` only on the dispatching thread (see each).
public final class FluxStore<Payload>: DispatchingStore, @unchecked Sendable {
    // @unchecked: the core synchronizes the listeners; `onDispatch` runs on
    // the dispatching thread only.
    public let dispatcher: Dispatcher<Payload>
    public private(set) var dispatchToken = DispatchToken(rawValue: 0)
    let core: StoreCore<ClosureListener>
    private let onDispatch: @Sendable (FluxStore<Payload>, Payload) throws -> Void

    /// Registers the store with `dispatcher`; `onDispatch(store, payload)`
    /// runs for every dispatch.
    public init(
        dispatcher: Dispatcher<Payload>,
        onDispatch: @escaping @Sendable (FluxStore<Payload>, Payload) throws -> Void
    ) {
        guard let core = StoreCore<ClosureListener>() else { fatalError("FluxStore: out of memory") }
        self.core = core
        self.dispatcher = dispatcher
        self.onDispatch = onDispatch
        dispatchToken = dispatcher.register(owner: .store) { [weak self] payload in
            guard let self else { return }
            try self.handle(payload)
        }
    }

    deinit {
        dispatcher.unregister(owned: dispatchToken)
    }

    private func handle(_ payload: Payload) throws {
        if let failure = core.handle(payload, Handler(store: self), on: dispatcher.core) {
            switch failure {
            case .reduce(let error): throw error
            }
        }
    }

    private struct Handler: StoreReducer {
        unowned(unsafe) let store: FluxStore<Payload>
        func loadState() {}
        func storeState(_: ()) {}
        func reduce(_: (), _ payload: Payload) -> Result<Void, any Error> {
            Result { try store.onDispatch(store, payload) }
        }
        func isSame(_: (), _: ()) -> Bool { true }
        func areEqual(_: (), _: ()) -> Bool { true }
        func release(_: ()) {}
    }

    /// Whether the store changed in its most recent handling (call it after
    /// `waitFor([dispatchToken])` for this dispatch's answer).
    /// - Throws: `.notDispatching` unless this thread is dispatching.
    public func hasChanged() throws(FluxError) -> Bool {
        try core.hasChanged(on: dispatcher.core)
    }

    /// Marks the store changed: its listeners run once `onDispatch` returns.
    /// - Throws: `.notDispatching` unless called while `onDispatch` runs.
    public func emitChange() throws(FluxError) {
        try core.emitChange(on: dispatcher.core)
    }

    /// Adds `listener`, run once per dispatch that changed the store (from
    /// the next change on, when added during one).
    @discardableResult
    public func addListener(_ listener: @escaping @Sendable () -> Void) -> Subscription {
        addClosureListener(core, listener) { [weak self] id throws(FluxError) in
            guard let self else { throw FluxError(.unknownToken, "the store is gone") }
            try self.core.removeListener(id)
        }
    }
}

func addClosureListener(
    _ core: borrowing StoreCore<ClosureListener>,
    _ listener: @escaping @Sendable () -> Void,
    remove: @escaping @Sendable (UInt64) throws(FluxError) -> Void
) -> Subscription {
    do {
        return Subscription(id: try core.addListener(ClosureListener(body: listener)), remove: remove)
    } catch {
        // Swift's own allocations trap when memory runs out; so does this.
        fatalError("addListener: \(error)")
    }
}
