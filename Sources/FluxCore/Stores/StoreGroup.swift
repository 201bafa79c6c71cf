/// Facebook's `FluxStoreGroup`: `callback` runs once per dispatch, after
/// every store of the group has handled the payload (the group registers a
/// callback that waits for all their tokens).
///
/// Keep a reference: the group is released when it goes away, or by
/// `release()`. Until then it keeps its stores alive (as a C group keeps its
/// stores from being destroyed): a store that went away would leave the
/// group waiting for a token that no longer exists.
public final class StoreGroup: Sendable {
    /// The stores and the group's registration, until `release()`.
    private let held: Guarded<Held?>

    private struct Held: Sendable {
        let stores: [any AnyObject & Sendable]
        let unregister: @Sendable () -> Void
    }

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
        let token = dispatcher.register(owner: .group) { [unowned dispatcher] _ in
            try dispatcher.waitFor(tokens)
            try callback()
        }
        held = Guarded(
            Held(
                stores: stores.map { $0 as any AnyObject & Sendable },
                unregister: { dispatcher.unregister(owned: token) }))
    }

    /// Unregisters the group's callback (no dispatch that starts later runs
    /// it) and lets go of its stores. Calling it again does nothing.
    public func release() {
        // Taken out under the lock, ended outside it: a store let go of here
        // may unregister itself.
        let held = self.held.exchange(nil)
        held?.unregister()
    }

    deinit { release() }
}
