import Synchronization

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
/// the dispatching thread throws `FluxError.Code.alreadyDispatching` at once,
/// and so does dispatching from anything else a dispatch runs on that thread
/// until its queue has drained (an `Observer`'s closures, an `enqueue`'s
/// `onError`).
/// Dispatching another dispatcher from a callback is fine; but when its
/// dispatching thread is itself waiting, directly or through others, to
/// dispatch this one (two dispatchers dispatching each other from callbacks
/// on two threads), neither could ever go on: the dispatch whose wait would
/// close that cycle throws `.alreadyDispatching` instead (`enqueue` never
/// waits). Callbacks run on the thread that called `dispatch(_:)`.
public final class Dispatcher<Payload>: @unchecked Sendable {
    // @unchecked: the core synchronizes everything; a payload stays on the
    // thread that dispatches it, but for one `enqueue` queues for another
    // thread's dispatch, which is `sending`: the caller gives it up.
    public typealias Callback = @Sendable (Payload) throws -> Void

    let core: DispatchCore<ClosureCallback<Payload>>
    /// Failures of queued dispatches that had no `onError`, for the
    /// outermost call of the thread that ran them (keyed by thread).
    let queuedFailures = QueuedFailures()
    /// The stores `registerStore` made, one per class.
    let registry = StoreRegistry()

    public init() {
        // Swift's own allocations trap when memory runs out; so does this.
        guard let core = DispatchCore<ClosureCallback<Payload>>() else { fatalError("Dispatcher: out of memory") }
        self.core = core
        // Unowned: deinit removes the test and the fork hook first, under
        // the lock any call of them holds, so none runs on a dispatcher that
        // is going. The hook holds the engine's and the store registry's
        // locks across fork() and, in the child, refuses what would wait for
        // a dispatch another thread of the parent was running (see
        // `ForkGuard`).
        DispatchingThreads.shared.add(
            self, { [unowned(unsafe) self] in self.core.isDispatchingOnCurrentThread },
            fork: { [unowned(unsafe) self] phase in
                switch phase {
                case .prepare:
                    self.core.prepareFork()
                    self.registry.prepareFork()
                case .parent:
                    self.registry.parentAfterFork()
                    self.core.parentAfterFork()
                case .child:
                    self.registry.childAfterFork()
                    self.core.childAfterFork()
                }
            })
    }

    deinit {
        DispatchingThreads.shared.remove(self)
        // No dispatch can run: one would hold a reference to self.
        try? core.close()
    }

    /// Registers `callback` for every dispatch that starts after this returns
    /// (a callback registered during a dispatch first runs in the next one).
    /// Traps when memory runs out, as Swift's own allocations do, and in a
    /// child process forked while another thread dispatched this dispatcher
    /// (the registration would join when that dispatch ends: never).
    /// - Returns: a token for `waitFor(_:)` and `unregister(_:)`.
    @discardableResult
    public func register(_ callback: @escaping Callback) -> DispatchToken {
        register(owner: .caller, callback)
    }

    /// `register` for stores and groups: only `unregister(owned:)` ends
    /// their registrations. `noting` gets the token before any dispatch can
    /// run `callback` (see `DispatchCore.register`).
    func register(
        owner: RegistrationOwner, _ callback: @escaping Callback, noting: (DispatchToken) -> Void = { _ in }
    ) -> DispatchToken {
        do {
            return try core.register(ClosureCallback(body: callback, owner: owner), noting: noting)
        } catch {
            // Only running out of memory, or a forked child's registration on
            // a dispatch the fork orphaned (it would never join), can get
            // here; `close()` is deinit-only.
            fatalError("Dispatcher.register: \(error)")
        }
    }

    /// Removes a callback. It is not called after this returns by a dispatch
    /// on this thread, nor by any dispatch that starts later. A callback may
    /// unregister itself. What it captured is let go of at once, or, during a
    /// dispatch, once that dispatch has ended (the dispatcher is idle then).
    /// - Throws: `FluxError` with `.unknownToken` when the token is not
    ///   registered; `.invalidArgument` when it is a store's or a
    ///   `StoreGroup`'s (they end it themselves: a store when it is
    ///   deallocated, a group with `release()`); `.noMemory` during a dispatch
    ///   when memory to note the removal ran out; `.alreadyDispatching` in a
    ///   child process forked while another thread dispatched this dispatcher
    ///   (the release would wait for that dispatch's end: never). On error
    ///   nothing changed.
    public func unregister(_ token: DispatchToken) throws(FluxError) {
        try core.unregister(token)
    }

    /// A store's or a group's own unregistration.
    func unregister(owned token: DispatchToken) {
        // Only their deinit and release() get here, once each, so only
        // running out of memory to note the removal during a dispatch can
        // fail it: that traps, as `register` does, rather than leave a gone
        // store's or group's callback registered.
        do {
            try core.unregister(token, asOwner: true)
        } catch {
            if error.code == .noMemory { fatalError("Dispatcher.unregister: \(error)") }
        }
    }

    /// Calls every registered callback with `payload`.
    /// - Throws: the error a callback threw (the dispatch was aborted: no
    ///   further callback ran, and the dispatcher is ready for the next
    ///   dispatch), `FluxError` with `.tooDeep` when a `waitFor` chain went
    ///   too deep for the stack (aborted the same way), or `FluxError` with
    ///   `.alreadyDispatching` when called from inside a callback on the
    ///   dispatching thread (or an `Observer`'s closure, or an `onError`,
    ///   which also run while it dispatches), or when waiting for another
    ///   thread's dispatch would deadlock (see the class's "Thread safety"), or in a child
    ///   process forked while another thread dispatched this dispatcher (that
    ///   dispatch can never end there), or `.noMemory`
    ///   when it must wait and there is no memory to note the wait. Payloads
    ///   enqueued meanwhile are dispatched before this returns; their
    ///   failures with no `onError` are thrown too, by this call whatever
    ///   its own outcome (see `enqueue(_:onError:)`).
    public func dispatch(_ payload: Payload) throws {
        // Failures this thread had pending before are an enclosing call's
        // (this one runs, say, from a deinit its end triggered): not ours.
        let mark = queuedFailures.mark
        do {
            try core.dispatch(payload)
        } catch {
            // Refused: not the outermost call, it ran nothing.
            if error.isRefusal { throw error.unwrapped }
            // It ran, failed (a callback's error, or too deep), and drained
            // the queue: what failed there comes out with it, not later.
            try queuedFailures.throwPending(first: error.unwrapped, since: mark)
        }
        if queuedFailures.any { try queuedFailures.throwPending(first: nil, since: mark) }
    }

    /// Dispatches `payload` now when idle; while a dispatch runs (from a
    /// callback, or on another thread), queues it for the thread running the
    /// dispatch, which dispatches it -- a full dispatch of its own -- before
    /// its own `dispatch` or `enqueue` returns. Never waits.
    ///
    /// The payload's error -- a callback's, or `FluxError` `.tooDeep` when
    /// a `waitFor` chain went too deep -- goes to `onError` when given (on
    /// the thread that dispatched it, which is still dispatching: `dispatch`
    /// from it throws `.alreadyDispatching`, `enqueue` queues), and nowhere
    /// else. Otherwise the outermost `dispatch`/`enqueue` call of that thread throws it once the
    /// queue has drained (this very call when the dispatcher was idle): the
    /// first failure unchanged when it is the only one, else
    /// `QueuedDispatchFailures` with all of them in order. Never a later
    /// call, never another thread's.
    ///
    /// The payload is `sending`: it may be dispatched on another thread, so
    /// the caller gives it up (a non-`Sendable` payload cannot be used after
    /// this call, nor be one a callback received).
    ///
    /// - Throws: as above; `FluxError` `.noMemory` when the queue cannot grow;
    ///   `.alreadyDispatching` in a child process forked while another
    ///   thread dispatched this dispatcher (the queue would never drain).
    public func enqueue(_ payload: sending Payload, onError: (@Sendable (any Error) -> Void)? = nil) throws {
        let mark = queuedFailures.mark  // as in `dispatch`
        switch core.enqueue(payload, EnqueueCompletion(onError: onError, failures: queuedFailures)) {
        case .queued:
            return
        case .refused(let error):
            throw error
        case .dispatched:
            // The outermost call: its own failure was recorded first.
            if queuedFailures.any { try queuedFailures.throwPending(first: nil, since: mark) }
        }
    }

    /// Watches every dispatch: see `Observer`. nil removes it. Set during a
    /// dispatch, it takes effect from the next one; the observer it replaces
    /// (what its closures captured) is let go of at once, or once that
    /// dispatch has ended. Never waits. Running out of memory to note it
    /// during a dispatch traps, as `register` does, and so does a child
    /// process forked while another thread dispatched this dispatcher (the
    /// change would wait for that dispatch's end: never).
    public func setObserver(_ observer: Observer?) {
        do {
            try core.setObserver(observer.map { $0.engineObserver })
        } catch {
            // Only running out of memory, or a forked child's change on a
            // dispatch the fork orphaned, can get here; `close()` is deinit-only.
            fatalError("Dispatcher.setObserver: \(error)")
        }
    }

    /// From inside a callback: runs the callbacks of `tokens` that have not
    /// run yet in this dispatch, before returning.
    /// - Throws: `FluxError` with `.notDispatching`, `.unknownToken` or
    ///   `.circularDependency` (checked for every token before any callback
    ///   runs: a token whose callback one of them unregisters is then
    ///   skipped); the error of a callback that failed in this dispatch; or
    ///   `FluxError` with `.tooDeep` when this wait, or one it ran, went too
    ///   deep for the stack (the dispatch is aborted, as by a failure).
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

extension Dispatcher {
    /// Closures called on the dispatching thread as a dispatch runs, in this
    /// order: `dispatchBegin`; `callbackBegin` … `callbackEnd` around each
    /// callback (with the error it threw, nil when none); `waitFor` on entry
    /// to a callback's `waitFor` (the waiter's token and the tokens as given,
    /// whatever it then throws), then the pairs of the callbacks it runs,
    /// nested inside the waiter's; `dispatchEnd` last, with the dispatch's
    /// error (nil when it succeeded). `waitFor` from any of these closures
    /// throws `.notDispatching` and reports nothing: only callbacks wait.
    public struct Observer: Sendable {
        public var dispatchBegin: (@Sendable (Payload) -> Void)?
        public var dispatchEnd: (@Sendable (Payload, (any Error)?) -> Void)?
        public var callbackBegin: (@Sendable (DispatchToken) -> Void)?
        public var callbackEnd: (@Sendable (DispatchToken, (any Error)?) -> Void)?
        public var waitFor: (@Sendable (DispatchToken, [DispatchToken]) -> Void)?

        public init(
            dispatchBegin: (@Sendable (Payload) -> Void)? = nil,
            dispatchEnd: (@Sendable (Payload, (any Error)?) -> Void)? = nil,
            callbackBegin: (@Sendable (DispatchToken) -> Void)? = nil,
            callbackEnd: (@Sendable (DispatchToken, (any Error)?) -> Void)? = nil,
            waitFor: (@Sendable (DispatchToken, [DispatchToken]) -> Void)? = nil
        ) {
            self.dispatchBegin = dispatchBegin
            self.dispatchEnd = dispatchEnd
            self.callbackBegin = callbackBegin
            self.callbackEnd = callbackEnd
            self.waitFor = waitFor
        }

        var engineObserver: DispatchCore<ClosureCallback<Payload>>.Observer {
            let end = dispatchEnd
            let wait = waitFor
            return DispatchObserver(
                dispatchBegin: dispatchBegin,
                dispatchEnd: end.map { f in { payload, error in f(payload, error?.unwrapped) } },
                callbackBegin: callbackBegin,
                callbackEnd: callbackEnd.map { f in { token, error in f(token, error) } },
                waitFor: wait.map { f in { waiter, tokens in f(waiter, Array(tokens)) } })
        }
    }
}

/// Where an enqueued payload's outcome goes: its `onError`, or the failures
/// the outermost call throws.
@_spi(Engine) public struct EnqueueCompletion: @unchecked Sendable {
    let onError: (@Sendable (any Error) -> Void)?
    let failures: QueuedFailures
}

/// Failures of queued dispatches waiting to be thrown, per thread: the
/// thread that drained the queue throws them from its outermost call.
final class QueuedFailures: @unchecked Sendable {
    // @unchecked: `byThread` is guarded by `lock`; `count` is atomic, so the
    // common check (nothing pending) takes no lock.
    private let lock: ConditionLock
    /// Each failure with its number in `added`, in the order added.
    private var byThread: [UInt: [(number: UInt64, error: any Error)]] = [:]
    private let count = Atomic<Int>(0)
    /// How many failures were ever added: each is numbered by it.
    private let added = Atomic<UInt64>(0)

    init() {
        // Swift's own allocations trap when memory runs out; so does this.
        guard let lock = ConditionLock() else { fatalError("Dispatcher: out of memory") }
        self.lock = lock
    }

    deinit { lock.destroy() }

    var any: Bool { count.load(ordering: .relaxed) != 0 }

    /// Noted by a call as it starts: the failures this thread adds from then
    /// on are numbered above it. (Relaxed is enough: a thread's own adds
    /// and loads of one atomic keep their order.)
    var mark: UInt64 { added.load(ordering: .relaxed) }

    func add(_ error: any Error) {
        lock.lock()
        let number = added.wrappingAdd(1, ordering: .relaxed).newValue
        byThread[currentThreadID(), default: []].append((number, error))
        lock.unlock()
        count.add(1, ordering: .relaxed)
    }

    /// Throws `first` (the outer call's own error) or else the first of the
    /// failures this thread added since `mark`; later ones ride along in
    /// `QueuedDispatchFailures`. Those added before `mark` are left for the
    /// call that was running then.
    func throwPending(first: (any Error)?, since mark: UInt64) throws {
        let me = currentThreadID()
        lock.lock()
        var mine: [any Error] = []
        if var pending = byThread.removeValue(forKey: me) {
            let split = pending.firstIndex { $0.number > mark } ?? pending.endIndex
            mine = pending[split...].map(\.error)
            pending.removeSubrange(split...)
            if !pending.isEmpty { byThread[me] = pending }
        }
        lock.unlock()
        count.subtract(mine.count, ordering: .relaxed)
        var all = mine
        if let first { all.insert(first, at: 0) }
        guard let head = all.first else { return }
        if all.count == 1 { throw head }
        throw QueuedDispatchFailures(first: head, later: Array(all.dropFirst()))
    }
}

/// Thrown by the outermost `dispatch`/`enqueue` when more than one dispatch
/// it ran (its own, or queued ones with no `onError`) failed: the first
/// error, and the later ones in the order they happened.
public struct QueuedDispatchFailures: Error, @unchecked Sendable {
    public let first: any Error
    public let later: [any Error]
}

/// Whose a Swift registration is: a store's or a group's is ended only by them.
@_spi(Engine) public enum RegistrationOwner: Sendable {
    case caller, store, group
}

/// A Swift closure as a dispatcher callback.
@_spi(Engine) public struct ClosureCallback<Payload>: DispatchCallback {
    @_spi(Engine) public let body: @Sendable (Payload) throws -> Void
    @_spi(Engine) public let owner: RegistrationOwner

    @inlinable @_spi(Engine) public init(
        body: @escaping @Sendable (Payload) throws -> Void, owner: RegistrationOwner = .caller
    ) {
        self.body = body
        self.owner = owner
    }
    @inlinable @_spi(Engine) public func invoke(_ payload: Payload) -> (any Error)? {
        do {
            try body(payload)
            return nil
        } catch {
            return error
        }
    }
    @inlinable @_spi(Engine) public func release() {}

    @_spi(Engine) public func ownerRefusal(_ token: DispatchToken) -> String? {
        switch owner {
        case .caller: nil
        case .store: "token \u{1} belongs to a store: the store unregisters it when it is deallocated"
        case .group: "token \u{1} belongs to a StoreGroup: end it with the group's release()"
        }
    }

    @_spi(Engine) public static func complete(
        _ completion: EnqueueCompletion, _ payload: Payload, _ error: DispatchError<any Error>?
    ) {
        // A refusal is thrown by enqueue itself; a dispatch that ran and
        // failed (a callback's error, or too deep) goes to onError, or to
        // the outermost call of this thread.
        guard let error, !error.isRefusal else { return }
        if let onError = completion.onError {
            onError(error.unwrapped)
        } else {
            completion.failures.add(error.unwrapped)
        }
    }
}

extension DispatchError where Failure == any Error {
    /// The error Swift callers see: the callback's own, or the dispatcher's.
    var unwrapped: any Error {
        switch self {
        case .flux(let error): error
        case .callback(let error, _): error
        }
    }

    /// Whether the call was refused before it dispatched anything (closed,
    /// already dispatching, no memory), as opposed to a dispatch that ran
    /// and failed: a callback's error, or `tooDeep`, the one engine error a
    /// dispatch that ran can end with.
    var isRefusal: Bool {
        if case .flux(let error) = self { return error.code != .tooDeep }
        return false
    }
}
