/// Facebook's `FluxStoreGroup`: `callback` runs once per dispatch, after
/// every store of the group has handled the payload (the group registers a
/// callback that waits for all their tokens).
///
/// Keep a reference: the group is released when it goes away, or by `release()`.
public final class StoreGroup: Sendable {
    private let unregister: @Sendable () -> Void

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
        let token = dispatcher.register { [unowned dispatcher] _ in
            try dispatcher.waitFor(tokens)
            try callback()
        }
        unregister = { try? dispatcher.unregister(token) }
    }

    /// Unregisters the group's callback: no dispatch that starts later runs it.
    /// Calling it again does nothing.
    public func release() { unregister() }

    deinit { release() }
}
