import Synchronization

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

/// What `FluxStore` and `ReduceStore` share: the registration with their
/// dispatcher (ended when the store goes), the listeners, whether the store
/// changed, and the error a change may carry (JBFlux's
/// `emitChangeWithError:`). Not created directly: use one of the two.
///
/// Thread safety: `addListener`, `Subscription.remove` and `error` from any
/// thread; `hasChanged` and `emitChange` only on the dispatching thread.
public class StoreBase<Payload>: DispatchingStore, SweepsGoneOwners, @unchecked Sendable {
    // @unchecked: the core synchronizes the listeners, a mutex the error;
    // the rest is set once, in init.
    public let dispatcher: Dispatcher<Payload>
    /// Set once, by `register`, before any dispatch can run the store's
    /// callback (which may read it, on another thread, before init returns).
    public private(set) var dispatchToken = DispatchToken(rawValue: 0)
    let core: StoreCore<ClosureListener>
    /// The error of the emit now running (`emitChange(error:)`), else nil;
    /// with how many times it was set, so a reader can tell it did not
    /// change around its look at whether an emit runs (see `error`).
    private let emitError = Guarded<(error: (any Error)?, sets: UInt64)>((nil, 0))
    /// The owner-bound listeners not yet removed, by id, each with its owner
    /// held weakly: what the sweep looks at. `hasOwners` spares a dispatch
    /// the lock when there are none.
    private let owners = Guarded<[UInt64: any WeakOwner]>([:])
    private let hasOwners = Atomic<Bool>(false)

    init(dispatcher: Dispatcher<Payload>) {
        // Swift's own allocations trap when memory runs out; so does this.
        guard let core = StoreCore<ClosureListener>() else { fatalError("\(Self.self): out of memory") }
        self.core = core
        self.dispatcher = dispatcher
    }

    deinit {
        dispatcher.unregister(owned: dispatchToken)
        dispatcher.registry.forget(ObjectIdentifier(self))
    }

    /// Registers `handle` as the store's callback (held weakly: the
    /// dispatcher does not keep the store alive). An error set for this
    /// handling's emit lasts until its listeners have run.
    func register(_ handle: @escaping @Sendable (StoreBase<Payload>, Payload) throws -> Void) {
        // The token is noted by the engine, not assigned from the result:
        // a dispatch on another thread may run the callback before
        // `register` returns.
        _ = dispatcher.register(
            owner: .store,
            { [weak self] payload in
                guard let self else { return }
                self.sweepGoneOwners()
                defer { self.setEmitError(nil) }
                try handle(self, payload)
            },
            noting: { dispatchToken = $0 })
    }

    /// Whether the store changed in its most recent handling (call it after
    /// `waitFor([dispatchToken])` for this dispatch's answer).
    /// - Throws: `.notDispatching` unless this thread is dispatching.
    public func hasChanged() throws(FluxError) -> Bool {
        try core.hasChanged(on: dispatcher.core)
    }

    /// Marks the store changed: its listeners run once the store's handling
    /// of the payload returns (for a `ReduceStore`, even when its state
    /// compares equal: state changed in place).
    /// - Throws: `.notDispatching` unless called while the store handles a
    ///   payload (`onDispatch`, `reduce`), on the dispatching thread.
    public func emitChange() throws(FluxError) {
        try core.emitChange(on: dispatcher.core)
    }

    /// `emitChange()` for a change that happened because something failed
    /// (JBFlux's `emitChangeWithError:`): the listeners run, and `error` is
    /// `error` while they do.
    /// - Throws: `.notDispatching` as `emitChange()`; nothing is kept then.
    public func emitChange(error: any Error) throws(FluxError) {
        try core.emitChange(on: dispatcher.core)
        setEmitError(error)
    }

    /// The error the running emit carries (`emitChange(error:)`): set while
    /// that emit's listeners run, nil otherwise (also between
    /// `emitChange(error:)` and the emit). Any thread may read it.
    public var error: (any Error)? {
        // An error is set before its emit begins and cleared after it ends,
        // so one unchanged across a moment an emit ran is that emit's. (Read
        // after one look, it could be the next handling's, set after that
        // emit ended and before its own began.)
        while core.isEmitting {
            let (error, sets) = emitError.withLock { ($0.error, $0.sets) }
            guard core.isEmitting else { return nil }
            if emitError.withLock({ $0.sets }) == sets { return error }
        }
        return nil
    }

    /// Replaces the emit's error; the one replaced goes after the lock is
    /// released (its deinit may read `error`).
    private func setEmitError(_ error: (any Error)?) {
        _ = emitError.withLock { current in
            defer { current = (error, current.sets &+ 1) }
            return current.error
        }
    }

    /// Adds `listener`, run once per dispatch that changed the store (from
    /// the next change on, when added during one: by a listener of its emit;
    /// added earlier in a dispatch, it runs for that dispatch's change).
    @discardableResult
    public func addListener(_ listener: @escaping @Sendable () -> Void) -> Subscription {
        sweepGoneOwners()
        return addClosureListener(core, listener) { [weak self] id throws(FluxError) in
            guard let self else { throw FluxError(.unknownToken, "the store is gone") }
            try self.core.removeListener(id)
        }
    }

    /// Adds a listener bound to `owner`'s life (JBFlux's
    /// `registerObject:forChangeEvents:`): the store holds `owner` weakly
    /// and passes it to `listener`; once `owner` is gone the listener never
    /// runs again and is removed without a `remove()`, releasing what it
    /// captured. Swift tells no one when an object goes, so the store looks:
    /// the listener is removed at the first of the store's next dispatch,
    /// its next `addListener`, or the dispatcher's `removeAllStores()`.
    @discardableResult
    public func addListener<Owner: AnyObject & Sendable>(
        owner: Owner, _ listener: @escaping @Sendable (Owner) -> Void
    ) -> Subscription {
        sweepGoneOwners()
        let weakOwner = Weak(object: owner)
        let subscription = addClosureListener(
            core,
            { [weak self] in
                guard let owner = weakOwner.object else {
                    self?.sweepGoneOwners()  // removes this one too
                    return
                }
                listener(owner)
            },
            remove: { [weak self] id throws(FluxError) in
                guard let self else { throw FluxError(.unknownToken, "the store is gone") }
                self.forgetOwner(of: id)
                try self.core.removeListener(id)
            })
        // Not gone before this: the caller holds `owner` for the call.
        owners.withLock {
            $0[subscription.id] = weakOwner
            hasOwners.store(true, ordering: .relaxed)
        }
        dispatcher.registry.remember(self)
        return subscription
    }

    /// How many owner-bound listeners the store tracks (for tests).
    var ownerCount: Int { owners.withLock { $0.count } }

    /// Removes the owner-bound listeners whose owner went. Owners are looked
    /// at outside the lock (a look holds the owner for a moment, and letting
    /// go of it may run its deinit, which may call the store), and so is
    /// what a removed listener captured released.
    func sweepGoneOwners() {
        guard hasOwners.load(ordering: .relaxed) else { return }
        let snapshot = owners.withLock { $0 }
        var gone: [UInt64] = []
        for (id, owner) in snapshot where owner.isGone { gone.append(id) }
        guard !gone.isEmpty else { return }
        // Only the caller that takes an entry out removes its listener.
        let taken = gone.filter { forgetOwner(of: $0) }
        for id in taken { try? core.removeListener(id) }
    }

    /// Drops listener `id`'s entry; returns whether it was there.
    @discardableResult
    private func forgetOwner(of id: UInt64) -> Bool {
        owners.withLock { owners in
            defer { hasOwners.store(!owners.isEmpty, ordering: .relaxed) }
            return owners.removeValue(forKey: id) != nil
        }
    }
}

/// An owner-bound listener's owner, held weakly.
protocol WeakOwner: Sendable {
    var isGone: Bool { get }
}

struct Weak<Object: AnyObject & Sendable>: WeakOwner, @unchecked Sendable {
    // @unchecked: set once, in init; a weak load is thread-safe.
    weak var object: Object?
    var isGone: Bool { object == nil }
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
/// Thread safety: as `StoreBase`.
public final class FluxStore<Payload>: StoreBase<Payload>, @unchecked Sendable {
    private let onDispatch: @Sendable (FluxStore<Payload>, Payload) throws -> Void

    /// Registers the store with `dispatcher`; `onDispatch(store, payload)`
    /// runs for every dispatch.
    public init(
        dispatcher: Dispatcher<Payload>,
        onDispatch: @escaping @Sendable (FluxStore<Payload>, Payload) throws -> Void
    ) {
        self.onDispatch = onDispatch
        super.init(dispatcher: dispatcher)
        register { store, payload in try unsafeDowncast(store, to: FluxStore<Payload>.self).handle(payload) }
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
