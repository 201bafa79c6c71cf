/// Broadcasts payloads to registered callbacks: Facebook's Flux Dispatcher.
///
/// Every payload goes to every callback, in registration order. A callback
/// can defer itself until others have run with `waitFor(_:)`:
///
///     let dispatcher = Dispatcher<String>()
///     let country = dispatcher.register { action in ... }
///     dispatcher.register { [unowned dispatcher] action in
///         try dispatcher.waitFor([country])   // country's callback has run now
///     }
///     try dispatcher.dispatch("country-update")
///
/// Thread safety: every method may be called from any thread. Dispatches from
/// different threads run one at a time; dispatching from inside a callback on
/// the dispatching thread throws `FluxError.Code.alreadyDispatching` at once.
/// Callbacks run on the thread that called `dispatch(_:)`.
public final class Dispatcher<Payload>: @unchecked Sendable {
    // @unchecked: the core synchronizes everything; payloads never leave the
    // dispatching thread.
    public typealias Callback = @Sendable (Payload) throws -> Void

    let core: DispatchCore<ClosureCallback<Payload>>

    public init() {
        // Swift's own allocations trap when memory runs out; so does this.
        guard let core = DispatchCore<ClosureCallback<Payload>>() else { fatalError("Dispatcher: out of memory") }
        self.core = core
    }

    deinit {
        // No dispatch can run: one would hold a reference to self.
        try? core.close()
    }

    /// Registers `callback` for every dispatch that starts after this returns
    /// (a callback registered during a dispatch first runs in the next one).
    /// - Returns: a token for `waitFor(_:)` and `unregister(_:)`.
    @discardableResult
    public func register(_ callback: @escaping Callback) -> DispatchToken {
        do {
            return try core.register(ClosureCallback(body: callback))
        } catch {
            // Only running out of memory can get here; `close()` is deinit-only.
            fatalError("Dispatcher.register: \(error)")
        }
    }

    /// Removes a callback. It is not called after this returns by a dispatch
    /// on this thread, nor by any dispatch that starts later. A callback may
    /// unregister itself.
    /// - Throws: `FluxError` with `.unknownToken` when the token is not
    ///   registered; `.noMemory` during a dispatch when memory to note the
    ///   removal ran out (the callback stays registered).
    public func unregister(_ token: DispatchToken) throws(FluxError) {
        try core.unregister(token)
    }

    /// Calls every registered callback with `payload`.
    /// - Throws: the error a callback threw (the dispatch was aborted: no
    ///   further callback ran, and the dispatcher is ready for the next
    ///   dispatch), or `FluxError` with `.alreadyDispatching` when called from
    ///   inside a callback on the dispatching thread.
    public func dispatch(_ payload: Payload) throws {
        do {
            try core.dispatch(payload)
        } catch {
            throw error.unwrapped
        }
    }

    /// From inside a callback: runs the callbacks of `tokens` that have not
    /// run yet in this dispatch, before returning.
    /// - Throws: `FluxError` with `.notDispatching`, `.unknownToken` or
    ///   `.circularDependency` (checked for every token before any callback
    ///   runs); or the error of a callback that failed in this dispatch.
    public func waitFor(_ tokens: some Collection<DispatchToken>) throws {
        do {
            try core.waitFor(tokens)
        } catch {
            throw error.unwrapped
        }
    }

    /// True while a dispatch runs, on any thread.
    public var isDispatching: Bool { core.isDispatching }
}

/// A Swift closure as a dispatcher callback.
package struct ClosureCallback<Payload>: DispatchCallback {
    package let body: @Sendable (Payload) throws -> Void

    @inlinable package init(body: @escaping @Sendable (Payload) throws -> Void) { self.body = body }
    @inlinable package func invoke(_ payload: Payload) -> (any Error)? {
        do {
            try body(payload)
            return nil
        } catch {
            return error
        }
    }
    @inlinable package func release() {}
}

extension DispatchError where Failure == any Error {
    /// The error Swift callers see: the callback's own, or the dispatcher's.
    var unwrapped: any Error {
        switch self {
        case .flux(let error): error
        case .callback(let error, _): error
        }
    }
}
