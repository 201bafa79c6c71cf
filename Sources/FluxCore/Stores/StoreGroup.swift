import Synchronization

/// Facebook's `FluxStoreGroup`: `callback` runs once per dispatch, after
/// every store of the group has handled the payload (the group registers a
/// callback that waits for all their tokens).
///
/// Keep a reference: the group is released when it goes away, or by
/// `release()`. Until then it keeps its stores alive (as a C group keeps its
/// stores from being destroyed): a store that went away would leave the
/// group waiting for a token that no longer exists. Its registration holds
/// them, so they outlive a dispatch that may still be running the group.
public final class StoreGroup: Sendable {
    /// Ends the group's registration; nil once `release()` has.
    private let unregister: Guarded<(@Sendable () -> Void)?>
    /// Set by `release()` before it unregisters: a run of the group already
    /// waiting for its stores (a listener of one released it) looks after
    /// its wait, and does not call `callback` then.
    private let released: Released

    /// - Throws: `FluxError` with `.invalidArgument` when `stores` is empty
    ///   or the stores are not all on one dispatcher.
    public init<Payload>(
        _ stores: [any DispatchingStore<Payload>],
        _ callback: @escaping @Sendable () throws -> Void
    ) throws(FluxError) {
        guard let first = stores.first else {
            throw FluxError(.invalidArgument, "a store group needs at least one store")
        }
        let dispatcher = first.dispatcher
        guard stores.allSatisfy({ $0.dispatcher === dispatcher }) else {
            throw FluxError(.invalidArgument, "all stores in a store group must use the same dispatcher")
        }
        let tokens = stores.map(\.dispatchToken)
        // The stores go with the registration: at once when it ends while the
        // dispatcher is idle, else when the running dispatch ends -- which
        // may be running the group on another thread, and its wait must not
        // meet a store that unregistered meanwhile.
        let kept = stores.map { $0 as any AnyObject & Sendable }
        let released = Released()
        let token = dispatcher.register(owner: .group) { [unowned dispatcher] _ in
            try withExtendedLifetime(kept) {
                try dispatcher.waitFor(tokens)
                guard !released.flag.load(ordering: .acquiring) else { return }
                try callback()
            }
        }
        self.released = released
        unregister = Guarded({ dispatcher.unregister(owned: token) })
    }

    /// Unregisters the group's callback and lets go of its stores: at once,
    /// or, while a dispatch runs (on any thread), when that dispatch ends.
    /// No dispatch that starts later calls `callback`, nor does a dispatch
    /// on this thread once this returns, even one whose run of the group has
    /// begun and is waiting for its stores (released by a store's listener
    /// or reduce that wait ran). A release on another thread may return
    /// while `callback` runs. Calling it again does nothing.
    public func release() {
        released.flag.store(true, ordering: .releasing)
        // Taken out under the lock, ended outside it: a store let go of here
        // may unregister itself.
        let unregister = self.unregister.exchange(nil)
        unregister?()
    }

    deinit { release() }
}

/// Whether a `StoreGroup` was released (see `StoreGroup.released`).
private final class Released: Sendable {
    let flag = Atomic<Bool>(false)
}
