import Synchronization

/// The dispatcher engine: Facebook's Flux Dispatcher algorithm, thread-safe,
/// generic over how a callback is stored and called.
///
/// `Dispatcher<Payload>` wraps it for Swift callers with closures; the C ABI
/// specializes it over raw (function pointer, context) pairs. Each host gets
/// the hot paths specialized, with no witness-table calls: cross-module
/// optimization specializes the plain `package` entry points (`dispatch`,
/// `tryWaitFor`, `enqueue`) for the host's callback type, which it did not
/// do for them while they were `@inlinable`.
///
/// ## Concurrency design
///
/// One atomic state word decides who owns the registration table:
///
/// - **A dispatch** owns it from one compare-and-swap (`0 → dispatching`) to
///   another (`dispatching → 0`): the uncontended fast path takes no lock. While
///   it runs, the table is frozen -- no other thread moves or writes it -- so the
///   dispatching thread reads it without locking.
/// - **An idle mutator** (register, unregister, close, setObserver) takes the
///   lock, sets `mutating` while it changes the table, and clears it.
/// - **A mutator during a dispatch** leaves the table alone: a registration goes
///   to the `joined` side table (merged when the dispatch ends, so it first runs
///   in the next dispatch); an unregistration goes to the `leaving` list and
///   stamps the callback's mark `removedMark` (an atomic store into the frozen
///   table), which the dispatch loop and `waitFor` already read, so it costs
///   the hot path nothing; an observer waits in `nextObserver`; an enqueued
///   payload in the queue. Each sets `slowEnd`, which makes the ending swap
///   fail, so the end runs the slow path under the lock and does it all.
/// - **A second dispatching thread** sets `waiters` and sleeps on the condition
///   variable; the ending dispatch sees the bit and wakes it.
///
/// Per-dispatch bookkeeping is a mark per registration, stamped with the
/// dispatch's epoch (`2·epoch` pending, `2·epoch+1` handled), so starting a
/// dispatch resets nothing. Only callbacks that `waitFor` runs out of order get
/// marks; for the rest the dispatch loop's cursor says it all (see `phase`).
///
/// Observed or not is chosen once per dispatch, as it starts: the loop,
/// `invoke` and the waits are generic over an `ObserverChoice`, and
/// specialized for `Unobserved` every report compiles to nothing.
///
/// ## The state, in one place
///
/// **The state word**, one bit per meaning:
///
/// - `dispatching`: a thread runs a dispatch (or drains the queue after one);
///   it owns the table and the run, and `owner` holds its ID.
/// - `mutating`: an idle mutator holding the lock is changing the table; no
///   dispatch can start.
/// - `waiters`: threads sleep in `beginSlow` until the running dispatch ends.
/// - `slowEnd`: work waits for the end of the running dispatch (a
///   registration, a removal, an observer, a queued payload): its ending swap
///   fails and `endSlow` does the work under the lock.
/// - `closed`: set for good by `close()`; the fast path's swap then fails and
///   the slow paths refuse.
/// - `orphaned`: in a forked child, the dispatch another thread of the parent
///   was running, which can never end here.
///
/// **The run** (`Run`), written only by the dispatching thread: `pending`,
/// this dispatch's pending mark (twice its number, the epoch); `payload`,
/// nil outside a callback (between dispatches, while an observer's hook
/// runs, so that a hook cannot wait, and in an observed dispatch between
/// its callbacks); `cursor`, the loop's index, and `end`,
/// where it stops; `top`, the innermost callback a wait is running (-1:
/// none), which with the table's `waitedBy` is the stack of waits;
/// `aborted`, with the first failure in `failure` or `tooDeep`, and its
/// `failedToken`; `stackLimit`, the depth check's bound; `observer`, fixed
/// for the dispatch.
///
/// **The invariants** (checked in `FLUX_CHECK_INVARIANTS` builds, at every
/// change of the state word and as each dispatch ends; see the end of the file):
///
/// 1. Idle (no `dispatching`): no `waiters`, `slowEnd` or `mutating`; the
///    side tables, `leaving`, `releasing` and `retired` are empty and hold no
///    storage; the queue is empty (its buffer is kept for the next payloads
///    queued, so a steady stream of them allocates nothing); no observer
///    change is pending; no mark is `removedMark`.
/// 2. `mutating` never outlives its mutator's hold of the lock.
/// 3. A non-empty queue has `slowEnd` up.
/// 4. Tokens strictly increase through the table and on into `joined`, all
///    below `nextToken`; a closed dispatcher has no registrations.
/// 5. As a dispatch ends: no wait is running (`top == -1`), no mark of its
///    epoch is left pending, and `aborted` is set exactly when a failure is
///    recorded -- and then `end` is 0, else the table's count.
///
/// ## Why a noncopyable struct
///
/// Its address is its identity (the atomics and the lock must not move), so it
/// lives in one place: a C handle points at it, a Swift `Dispatcher` stores it.
/// Hosts reach it through that place by borrowing, with no reference counting
/// and no closure on the hot paths -- which a class reference behind a C
/// handle cannot avoid.
///
/// ## Why `@_spi(Engine) public`, not `package`
///
/// The engine is not API for Swift users: `import Flux` does not show it; the
/// C exports reach it with `@_spi(Engine) import FluxCore`. `package` would
/// hide it too, but with Swift 6.3 the hot paths' `@inlinable` bodies are then
/// not specialized into FluxC: `make bench` measured every dispatch 20-40x
/// slower (fixed cost ~400 ns instead of ~20, 569 bytes of stack per wait_for
/// level instead of 64). Keep new engine API in the same form.
@_spi(Engine) public struct DispatchCore<Callback: DispatchCallback>: ~Copyable, @unchecked Sendable {
    // The state word's bits (see "The state, in one place").
    @usableFromInline static var dispatchingBit: UInt { 1 }
    @usableFromInline static var mutatingBit: UInt { 2 }
    @usableFromInline static var waitersBit: UInt { 4 }
    @usableFromInline static var slowEndBit: UInt { 8 }
    @usableFromInline static var closedBit: UInt { 16 }
    @usableFromInline static var orphanedBit: UInt { 32 }

    @usableFromInline let state = Atomic<UInt>(0)
    /// The thread running the dispatch, 0 when none. Only that thread stores
    /// its own ID, so a thread reading its own ID here is certain to be it.
    @usableFromInline let owner = Atomic<UInt>(0)
    @usableFromInline let lock: ConditionLock
    /// All mutable state, behind pointers: the engine is shared by borrowing,
    /// and the hot paths change their state with plain stores, no exclusivity
    /// checks. Three parts, one per owner, each reached through its own
    /// pointer so that an access to one part is never an access to another
    /// (which ThreadSanitizer would rightly call a race):
    ///
    /// - `slots`: the registration table, read by the dispatching thread
    ///   without the lock (it is frozen while a dispatch runs), changed only
    ///   by the holder of the lock and the mutating bit, or by the ending
    ///   dispatch under the lock;
    /// - `run`: the running dispatch's state, touched only by the thread
    ///   running it; it sits at a fixed offset after `slots`, so the hot
    ///   paths keep one pointer where they need both;
    /// - `locked`: what mutators and waiting dispatchers share, under the lock.
    @usableFromInline let slots: UnsafeMutablePointer<SlotTable<Callback>>
    @usableFromInline let locked: UnsafeMutablePointer<Locked>

    /// Bind it to a local before writing through it (`let run = self.run`):
    /// a write through a computed property is, to ThreadSanitizer, an access
    /// to the whole engine, which other threads read.
    @inlinable @inline(__always)
    var run: UnsafeMutablePointer<Run> {
        (UnsafeMutableRawPointer(slots) + Self.runOffset).assumingMemoryBound(to: Run.self)
    }

    /// Where `run` and `locked` sit in the block `slots` starts.
    @inlinable static var runOffset: Int {
        roundUp(MemoryLayout<SlotTable<Callback>>.size, MemoryLayout<Run>.alignment)
    }
    static var lockedOffset: Int {
        roundUp(runOffset + MemoryLayout<Run>.size, MemoryLayout<Locked>.alignment)
    }
    static var blockSize: Int { lockedOffset + MemoryLayout<Locked>.size }
    static var blockAlignment: Int {
        max(MemoryLayout<SlotTable<Callback>>.alignment, MemoryLayout<Run>.alignment, MemoryLayout<Locked>.alignment)
    }

    @usableFromInline
    struct Run {
        /// This dispatch's pending mark: twice its epoch, so even; its
        /// handled mark is `pending | 1`. Kept doubled so that the loop
        /// compares a mark with it straight from memory.
        @usableFromInline var pending: UInt64 = 0
        @usableFromInline var payload: Callback.Payload?
        @usableFromInline var failure: Callback.Failure?
        /// failure != nil, as a flag `waitFor` can test cheaply.
        @usableFromInline var aborted = false
        @usableFromInline var failedToken: UInt64 = 0
        /// The index the dispatch loop is calling, -1 before the first.
        @usableFromInline var cursor = -1
        /// Where the dispatch loop stops: the table's count, or 0 once a
        /// callback failed, so one compare per callback covers both.
        @usableFromInline var end = 0
        /// The observer of this dispatch, fixed when it starts (nil: the
        /// unobserved loop, chosen once per dispatch).
        @usableFromInline var observer: Observer?
        /// The index of the innermost callback `waitFor` is running (-1:
        /// none, the cursor's callback is innermost). With the table's
        /// `waitedBy`, what names a cycle and an observer's waiter.
        @usableFromInline var top = -1
        /// The engine's own reason for aborting, when no callback failed: a
        /// `waitFor` chain too deep (`failedToken` is the link that did not
        /// fit), reported as `FluxError.tooDeep`. A flag, not the error: the
        /// error is made only when reported, off the hot path.
        @usableFromInline var tooDeep = false
        /// `waitFor` invokes a callback only while the stack pointer is at or
        /// above this address. `.max` at the start of each dispatch (so the
        /// first wait looks the dispatching thread's bound up, once), then
        /// that thread's low-water mark: one compare per link of a chain.
        @usableFromInline var stackLimit: UInt = .max
    }

    @_spi(Engine) public typealias Observer = Callback.Observer
    @usableFromInline typealias Queued = (payload: Callback.Payload, completion: Callback.Completion)

    @usableFromInline
    struct Locked {
        var nextToken: UInt64 = 1
        var joined: SlotTable<Callback>?
        /// A table big enough for the table plus `joined`, reserved when a
        /// registration joins, so the merge at the end cannot fail.
        var spare: SlotTable<Callback>?
        /// Tokens unregistered from the frozen table during the running dispatch.
        var leaving = MallocList<UInt64>()
        /// Callbacks to release when the running dispatch ends: those that
        /// joined and left, then (at the end) those in `leaving`. Room for
        /// both is reserved by each unregistration, so the end cannot fail.
        var releasing = MallocList<Callback>()
        var waiters = 0
        /// Enqueued payloads, FIFO, for the thread running the dispatch.
        var queue = PayloadQueue<Queued>()
        /// An observer set during a dispatch, installed when it ends.
        var observerChanged = false
        var nextObserver: Observer?
        /// Observers replaced during a dispatch, released when it ends.
        /// Observers replaced during the running call, released when it is
        /// over; room is reserved by each change (`setObserver`).
        var retired = MallocList<Observer>()
        /// The cancelability to give back as the running call ends, when its
        /// thread waited for another's dispatch (see `beginSlow`).
        var cancelState: Int32?
    }

    /// A dispatcher with no callbacks, or nil when memory runs out.
    @_spi(Engine) public init?() {
        // malloc, not Swift's allocator, which traps when memory runs out.
        guard Self.blockAlignment <= 16, let table = SlotTable<Callback>.allocate(capacity: 8) else { return nil }
        guard let block = allocateBytes(Self.blockSize) else {
            table.deallocate()
            return nil
        }
        guard let lock = ConditionLock() else {
            freeBytes(block)
            table.deallocate()
            return nil
        }
        self.lock = lock
        slots = block.bindMemory(to: SlotTable<Callback>.self, capacity: 1)
        slots.initialize(to: table)
        (block + Self.runOffset).bindMemory(to: Run.self, capacity: 1).initialize(to: Run())
        locked = (block + Self.lockedOffset).bindMemory(to: Locked.self, capacity: 1)
        locked.initialize(to: Locked())
    }

    deinit {
        var callbacks: [Callback] = []
        slots.pointee.removeAll { callbacks.append($0) }
        locked.pointee.joined?.removeAll { callbacks.append($0) }
        slots.pointee.deallocate()
        locked.pointee.joined?.deallocate()
        locked.pointee.spare?.deallocate()
        locked.pointee.queue.deallocate()
        let observer = run.pointee.observer
        locked.pointee.leaving.drain { _ in }
        locked.pointee.releasing.drain { callbacks.append($0) }
        locked.pointee.retired.drain { $0.release() }
        locked.deinitialize(count: 1)
        run.deinitialize(count: 1)
        slots.deinitialize(count: 1)
        freeBytes(UnsafeMutableRawPointer(slots))
        lock.destroy()
        for callback in callbacks { callback.release() }
        observer?.release()
    }

    // MARK: - Queries

    /// True while a dispatch runs, on any thread. Never waits.
    @_spi(Engine) public var isDispatching: Bool {
        state.load(ordering: .acquiring) & Self.dispatchingBit != 0
    }

    /// True once `close()` has begun (the dispatcher is being destroyed):
    /// every later call on it is refused. Set under the lock; any thread
    /// may read it, and never waits.
    @_spi(Engine) public var isClosed: Bool {
        state.load(ordering: .acquiring) & Self.closedBit != 0
    }

    /// True while the calling thread is running a dispatch of this dispatcher.
    @inlinable
    @_spi(Engine) public var isDispatchingOnCurrentThread: Bool {
        owner.load(ordering: .relaxed) == currentThreadID()
    }

    /// From inside a callback this engine is running: whether a failure is
    /// aborting the dispatch (stores use it to keep their state). Only the
    /// dispatching thread writes the run state, and a callback runs on it,
    /// so this needs no check of the thread's identity -- and means nothing
    /// anywhere else.
    @inlinable
    @_spi(Engine) public var isAbortingInCallback: Bool { run.pointee.aborted }

    // MARK: - Registration

    /// Registers `callback`, to be called by every dispatch that starts after
    /// this returns. Never waits for a running dispatch.
    ///
    /// - Throws: `noMemory`; `invalidArgument` once the dispatcher is closed;
    ///   `alreadyDispatching` in a forked child whose dispatch another thread
    ///   of the parent was running (it never ends, so the callback would
    ///   never join).
    ///   On error `callback.release()` has run: the registration is never half made.
    ///
    /// `noting` gets the token under the lock, before any dispatch can see
    /// the callback (it must not call in): an owner that keeps its token
    /// where its callback reads it sets it there, for a dispatch on another
    /// thread may call the callback before this returns.
    @_spi(Engine) public func register(
        _ callback: Callback, noting: (DispatchToken) -> Void = { _ in }
    ) throws(FluxError) -> DispatchToken {
        lock.lock()
        let result = insertLocked(callback, noting)
        checkInvariantsLocked()
        lock.unlock()
        switch result {
        case .success(let token):
            return DispatchToken(rawValue: token)
        case .failure(let error):
            callback.release()
            throw error
        }
    }

    private func insertLocked(_ callback: Callback, _ noting: (DispatchToken) -> Void) -> Result<UInt64, FluxError> {
        if isClosed { return .failure(.closed) }
        // It would join when the orphaned dispatch ends: never, so its
        // callback would never run nor its context be released.
        if state.load(ordering: .relaxed) & Self.orphanedBit != 0 { return .failure(.orphaned) }
        let token = locked.pointee.nextToken
        // Noted before the table lets any dispatch see the callback: a
        // dispatch starts without the lock, synchronized by the table's
        // release; a joined callback is merged under the lock.
        if claimTable(orSet: Self.slowEndBit) {
            defer { releaseTable() }
            if slots.pointee.isFull {
                guard var bigger = SlotTable<Callback>.allocate(capacity: grownCapacity(slots.pointee.capacity)) else {
                    return .failure(.outOfMemory)
                }
                slots.pointee.moveAll(appendingTo: &bigger)
                slots.pointee.deallocate()
                slots.pointee = bigger
            }
            slots.pointee.append(token, callback)
            noting(DispatchToken(rawValue: token))
        } else {
            guard reserveJoinedSlot() else { return .failure(.outOfMemory) }
            locked.pointee.joined?.append(token, callback)
            noting(DispatchToken(rawValue: token))
        }
        locked.pointee.nextToken += 1
        return .success(token)
    }

    /// Makes room in `joined` for one more registration, and makes sure the
    /// merge at the end of the dispatch will have room. Under the lock.
    private func reserveJoinedSlot() -> Bool {
        let joinedCount = locked.pointee.joined?.count ?? 0
        if locked.pointee.joined?.isFull ?? true {
            guard var bigger = SlotTable<Callback>.allocate(capacity: grownCapacity(joinedCount)) else { return false }
            if var old = locked.pointee.joined {
                old.moveAll(appendingTo: &bigger)
                old.deallocate()
            }
            locked.pointee.joined = bigger
        }
        let needed = slots.pointee.count + joinedCount + 1
        if needed > slots.pointee.capacity && needed > (locked.pointee.spare?.capacity ?? 0) {
            guard
                let spare = SlotTable<Callback>.allocate(
                    capacity: grownCapacity(slots.pointee.capacity, needed: needed))
            else {
                return false
            }
            locked.pointee.spare?.deallocate()
            locked.pointee.spare = spare
        }
        return true
    }

    /// Ends a registration. When idle, `release()` runs before this returns;
    /// during a dispatch the callback is not called again on the dispatching
    /// thread after this returns, and `release()` runs when the dispatch ends
    /// (so a callback may unregister itself). Never waits for a running dispatch.
    ///
    /// A store's or a group's registration (one whose `ownerRefusal` is not
    /// nil) is ended only by its owner, with `asOwner`.
    ///
    /// `ending` runs, under the lock (it must not call in), once the
    /// registration is certain to end and before `release()` can run: what
    /// must hold from then on, and not when this throws, is set there with
    /// no window for another thread to see it set and then undone.
    ///
    /// - Throws: `unknownToken` when the token was never issued or is already
    ///   unregistered; `invalidArgument` when it belongs to a store or a group
    ///   and `asOwner` is false (nothing changed); `noMemory` during a
    ///   dispatch, when there is no memory to note the removal (nothing changed);
    ///   `alreadyDispatching` in a forked child whose dispatch another thread
    ///   of the parent was running (nothing changed: the release would wait
    ///   for its end, which never comes); `whileDispatching`, when given, if
    ///   a dispatch is running -- decided under the lock, so none can start
    ///   between that test and the removal, and a callback ended so is never
    ///   called again, nor runs on another thread, once this returns.
    @_spi(Engine) public func unregister(
        _ token: DispatchToken, asOwner: Bool = false, whileDispatching: FluxError? = nil, ending: () -> Void = {}
    ) throws(FluxError) {
        lock.lock()
        let t = token.rawValue
        var released: Callback?
        var error: FluxError?
        // Room to note one more removal during a dispatch, made before
        // anything changes (malloc, so that running out is an error).
        func reserveLeaving(table: Bool) -> Bool {
            let leaving = locked.pointee.leaving.count + (table ? 1 : 0)
            return (!table || locked.pointee.leaving.reserve(leaving))
                && locked.pointee.releasing.reserve(locked.pointee.releasing.count + leaving + 1)
        }
        // The owner's refusal, before anything changes.
        func refusal(_ table: SlotTable<Callback>?, _ i: Int) -> FluxError? {
            guard !asOwner, let table, let message = table.callbacks[i].ownerRefusal(token) else { return nil }
            return FluxError(.invalidArgument, template: message, number: token.rawValue)
        }
        if isClosed {
            error = .closed
        } else if state.load(ordering: .relaxed) & Self.orphanedBit != 0 {
            // Released when the orphaned dispatch ends: never. Refused, so
            // the status does not promise a release that cannot come.
            error = .orphaned
        } else if let i = locked.pointee.joined?.index(of: t) {
            // Joined during the running dispatch, which never calls it; still,
            // every removal during a dispatch is released when it ends.
            if let refused = refusal(locked.pointee.joined, i) {
                error = refused
            } else if let whileDispatching {
                error = whileDispatching
            } else if reserveLeaving(table: false), let callback = locked.pointee.joined?.remove(at: i) {
                locked.pointee.releasing.append(callback)
            } else {
                error = .outOfMemory
            }
        } else if let i = slots.pointee.index(of: t), !locked.pointee.leaving.contains(where: { $0 == t }) {
            if let refused = refusal(slots.pointee, i) {
                error = refused
            } else if claimTable(orSet: Self.slowEndBit) {
                released = slots.pointee.remove(at: i)
                releaseTable()
            } else if let whileDispatching {
                // As for running out of memory below: the slow-end bit
                // changes nothing but the dispatch end's path.
                error = whileDispatching
            } else if reserveLeaving(table: true) {
                // The table is frozen, so `i` stays right until the dispatch
                // ends; from here on it skips the callback.
                locked.pointee.leaving.append(t)
                slots.pointee.setMark(i, SlotTable<Callback>.removedMark)
            } else {
                // Nothing changed: the slow-end bit only sends the end of
                // the dispatch down its slow path, which finds nothing to do.
                error = .outOfMemory
            }
        } else {
            error = unknownTokenLocked(t)
        }
        if error == nil { ending() }
        checkInvariantsLocked()
        lock.unlock()
        released?.release()
        if let error { throw error }
    }

    /// Unregisters everything, releasing in registration order, and makes
    /// every later register, unregister, dispatch and close fail with
    /// `invalidArgument` (release functions may still call in). Fails while a
    /// dispatch runs.
    ///
    /// `refusal`, asked under the lock once no dispatch runs (it must not
    /// call in), may refuse the close with its error: a host's own reason,
    /// checked where no registration can join meanwhile.
    ///
    /// - Throws: `alreadyDispatching` when a dispatch is running;
    ///   `invalidArgument` when already closed -- say, by a release function
    ///   run by this very close, which must not free the engine under it;
    ///   what `refusal` returned. Either way nothing changes.
    @_spi(Engine) public func close(refusal: () -> FluxError? = { nil }) throws(FluxError) {
        lock.lock()
        if isClosed {
            lock.unlock()
            throw .closed
        }
        guard claimTable(orSet: 0) else {
            lock.unlock()
            throw .closingWhileDispatching
        }
        if let error = refusal() {
            releaseTable()
            lock.unlock()
            throw error
        }
        // Taken out by value, not copied into an array (which would
        // allocate, and Swift's allocator traps when memory runs out): the
        // closed table keeps its block, now empty, and nothing can append to
        // it again; the callbacks are released from `taken` after the lock.
        var taken = slots.pointee
        slots.pointee.count = 0
        // Idle and holding the table: the run state is ours too.
        let run = self.run
        let observer = run.pointee.observer
        run.pointee.observer = nil
        state.bitwiseOr(Self.closedBit, ordering: .relaxed)
        releaseTable()
        checkInvariantsLocked()
        lock.unlock()
        taken.removeAll { $0.release() }
        observer?.release()
    }

    /// Under the lock: when idle, sets the mutating bit and returns true (the
    /// caller may change the table, then calls `releaseTable()`); when a
    /// dispatch runs, sets `bits` for the dispatching thread and returns false.
    private func claimTable(orSet bits: UInt) -> Bool {
        var current = state.load(ordering: .relaxed)
        while true {
            let idle = current & Self.dispatchingBit == 0
            let desired = idle ? current | Self.mutatingBit : current | bits
            let (exchanged, original) = state.compareExchange(
                expected: current, desired: desired, ordering: .acquiringAndReleasing)
            if exchanged { return idle }
            current = original
        }
    }

    private func releaseTable() {
        state.bitwiseAnd(~Self.mutatingBit, ordering: .releasing)
    }

    // MARK: - Dispatch

    /// Calls every registered callback with `payload`, in registration order,
    /// each at most once. Waits while another thread dispatches.
    ///
    /// - Throws: `.flux(alreadyDispatching)` from inside a callback on the
    ///   dispatching thread (the running dispatch goes on unharmed), or when
    ///   the dispatching thread waits, itself or through others, for this
    ///   one (see `DispatchWaits`); `.flux(noMemory)` when it must wait and
    ///   there is no memory to note the wait (nothing ran);
    ///   `.callback(failure, token)` when a callback failed, or
    ///   `.flux(tooDeep)` when a `waitFor` chain went too deep: the dispatch
    ///   was aborted and the dispatcher is idle again.
    ///
    /// With `waits: false` (flux_try_dispatch) it never waits: while another
    /// thread dispatches it throws `.flux(alreadyDispatching)` at once,
    /// having done nothing -- a host holding a lock that thread's callbacks
    /// need (Python's GIL) tries first, and lets go of the lock to wait.
    @inlinable @inline(__always)
    @_spi(Engine) public func dispatch(
        _ payload: Callback.Payload, waits: Bool = true
    ) throws(DispatchError<Callback.Failure>) {
        let me = currentThreadID()
        if !state.compareExchange(expected: 0, desired: Self.dispatchingBit, ordering: .acquiring).exchanged {
            if let error = beginSlow(me, waits: waits) { throw .flux(error) }
        }
        owner.store(me, ordering: .relaxed)
        // The common case -- unobserved, nothing failed -- holds no error
        // value, so its cost does not hang on the error type's layout: with
        // `FluxError` a word larger, destroying even a nil
        // `Optional<DispatchError>` went through the runtime's generic value
        // witnesses, ~100 instructions a dispatch (`make check-cost`).
        // (The observer is fixed for the dispatch: a change waits for its end.)
        let unobserved = run.pointee.observer == nil
        if unobserved {
            runCallbacks(payload, Unobserved<Observer>())
            if !run.pointee.aborted {
                resetRun()
                endDispatch()
                return
            }
        }
        try finishDispatch(payload, ran: unobserved)
    }

    /// The rest of a dispatch that is observed (`ran` false: its callbacks
    /// are still to run) or whose callbacks failed: the error is made, the
    /// dispatch ended, the error thrown.
    @usableFromInline @inline(never)
    func finishDispatch(_ payload: Callback.Payload, ran: Bool) throws(DispatchError<Callback.Failure>) {
        let error = ran ? finishRun() : runBody(payload)
        endDispatch()
        if let error { throw error }
    }

    /// Gives the dispatcher up, doing what waited for its end (`endSlow`).
    @inlinable @inline(__always)
    func endDispatch() {
        owner.store(0, ordering: .relaxed)
        if !state.compareExchange(expected: Self.dispatchingBit, desired: 0, ordering: .releasing).exchanged {
            endSlow()
        }
    }

    /// From inside a callback: runs the named callbacks that have not yet run
    /// in this dispatch, in order. Checks every token before invoking any.
    ///
    /// - Throws: `.flux` with `notDispatching` (this thread is not running a
    ///   dispatch), `unknownToken`, or `circularDependency` (the callback is
    ///   running further up the stack); `.callback(failure, token)` when a
    ///   callback failed in this dispatch, now or earlier.
    @inlinable
    @_spi(Engine) public func waitFor<Tokens: Collection<DispatchToken>>(
        _ tokens: Tokens
    ) throws(DispatchError<Callback.Failure>) {
        if let refused = tryWaitFor(tokens) { throw error(refused.failure, waiting: refused.token) }
    }

    /// `waitFor(tokens)` for hosts that report errors themselves: nil when
    /// every callback has run; otherwise why not, and the token that is
    /// about (for `error(_:waiting:)`). As `tryWaitFor(_:)`, nothing is
    /// thrown or formatted here: every link of a chain of many-token waits
    /// keeps small frames.
    @inlinable
    @_spi(Engine) public func tryWaitFor<Tokens: Collection<DispatchToken>>(
        _ tokens: Tokens
    ) -> (failure: WaitFailure, token: DispatchToken)? {
        if tokens.count == 1, let token = tokens.first { return tryWaitFor(token).map { ($0, token) } }
        guard isDispatchingOnCurrentThread else { return (.notDispatching, DispatchToken(rawValue: 0)) }
        if run.pointee.observer != nil { return observedWaitAll(tokens) }
        return waitAll(tokens, Unobserved<Observer>())
    }

    /// `waitAll` with the observer, out of line (see `observedWait`).
    @usableFromInline @inline(never)
    func observedWaitAll<Tokens: Collection<DispatchToken>>(
        _ tokens: Tokens
    ) -> (failure: WaitFailure, token: DispatchToken)? {
        guard let observer = run.pointee.observer else { return waitAll(tokens, Unobserved<Observer>()) }
        return waitAll(tokens, Observed(observer))
    }

    /// `waitFor` of one token (the common case, and every link of a chain):
    /// one lookup, and the error worked out only on failure.
    @inlinable @inline(__always)
    @_spi(Engine) public func waitFor(_ token: DispatchToken) throws(DispatchError<Callback.Failure>) {
        if let failure = tryWaitFor(token) { throw error(failure, waiting: token) }
    }

    /// Why a wait did not end with its callback handled.
    @_spi(Engine) public enum WaitFailure {
        /// This thread is not running a dispatch of this dispatcher (or the
        /// caller is an observer's hook).
        case notDispatching
        /// A callback failed in this dispatch, now or earlier.
        case aborted
        /// Never issued, or unregistered.
        case unknownToken
        /// Running further up this thread's stack.
        case circular
    }

    /// `waitFor(token)` for hosts that report errors themselves (the C ABI):
    /// nil when the callback has run in this dispatch, now or before;
    /// otherwise why not, which `error(_:waiting:)` turns into the error.
    /// Nothing is thrown or formatted here, so this inlines into one small
    /// frame per link of a chain of waits.
    @inlinable @inline(__always)
    @_spi(Engine) public func tryWaitFor(_ token: DispatchToken) -> WaitFailure? {
        guard isDispatchingOnCurrentThread else { return .notDispatching }
        if run.pointee.observer != nil { return observedWait(token) }
        return wait(token, Unobserved<Observer>())
    }

    /// `wait` with the observer, out of line: the rare case, kept out of the
    /// frame the unobserved chain of waits repeats per link. It reads the
    /// observer itself: passed in, the C observer (64 bytes) would be copied
    /// into that frame.
    @usableFromInline @inline(never)
    func observedWait(_ token: DispatchToken) -> WaitFailure? {
        guard let observer = run.pointee.observer else { return wait(token, Unobserved<Observer>()) }
        return wait(token, Observed(observer))
    }

    /// The one wait for one token, on the dispatching thread.
    @inlinable @inline(__always)
    func wait<Choice: ObserverChoice<Observer>>(_ token: DispatchToken, _ choice: Choice) -> WaitFailure? {
        let run = self.run
        guard let payload = run.pointee.payload else { return .notDispatching }
        if let observer = choice.observer { reportWait(observer, token) }
        if run.pointee.aborted { return .aborted }
        let table = slots.pointee
        let pending = run.pointee.pending
        switch standing(token, table, pending) {
        case .handled: return nil
        case .toRun(let i): return invoke(choice, table, i, payload, pending) ? nil : .aborted
        case .refused(let failure): return failure
        }
    }

    /// The wait for several tokens: every token is checked before any
    /// callback runs, then each that has not run is run, in order.
    @inlinable
    func waitAll<Tokens: Collection<DispatchToken>, Choice: ObserverChoice<Observer>>(
        _ tokens: Tokens, _ choice: Choice
    ) -> (failure: WaitFailure, token: DispatchToken)? {
        let run = self.run
        guard let payload = run.pointee.payload else { return (.notDispatching, DispatchToken(rawValue: 0)) }
        if let observer = choice.observer { reportWait(observer, tokens) }
        if run.pointee.aborted { return (.aborted, DispatchToken(rawValue: 0)) }
        let table = slots.pointee
        let pending = run.pointee.pending
        for token in tokens {
            if case .refused(let failure) = standing(token, table, pending) { return (failure, token) }
        }
        for token in tokens {
            // The table cannot change shape mid-dispatch: what the first
            // pass found is still there.
            if case .toRun(let i) = standing(token, table, pending), !invoke(choice, table, i, payload, pending) {
                return (.aborted, token)
            }
        }
        return nil
    }

    /// Where a waited-for token stands in this dispatch.
    @usableFromInline
    enum Standing {
        case handled
        /// Not run yet: at this index.
        case toRun(Int)
        case refused(WaitFailure)
    }

    @inlinable @inline(__always)
    func standing(_ token: DispatchToken, _ table: SlotTable<Callback>, _ pending: UInt64) -> Standing {
        guard let i = table.index(of: token.rawValue) else { return .refused(.unknownToken) }
        switch phase(table, i, pending) {
        case .handled: return .handled
        case .notRun: return .toRun(i)
        case .pending: return .refused(.circular)
        case .removed: return .refused(.unknownToken)
        }
    }

    /// The error of a wait for `token` that failed with `failure`, called
    /// right after it (still inside the waiting callback). Cold.
    ///
    /// A cycle found on a thread whose stack is too small to wait at all
    /// aborts the dispatch as too deep instead: its report, the first of a
    /// process, sets up Swift's array types deeper than such a stack (a
    /// 16 KiB thread's callback waiting for itself overflowed it).
    @_spi(Engine) public func error(
        _ failure: WaitFailure, waiting token: DispatchToken
    ) -> DispatchError<Callback.Failure> {
        switch failure {
        // A call from a destroy that flux_dispatcher_destroy runs: refused
        // as every call on a dispatcher being destroyed is.
        case .notDispatching: return .flux(isClosed ? .closed : notDispatchingError())
        case .aborted: return currentFailure()
        case .unknownToken: return .flux(unknownTokenError(token))
        case .circular:
            if stackCannotWait(at: currentStackAddress()) {
                // Not aborting yet: a circular wait is refused before anything runs.
                abortAsTooDeep(token: token.rawValue)
                return .flux(.tooDeep(token))
            }
            return .flux(circularError(token, slots.pointee.index(of: token.rawValue) ?? -1))
        }
    }

    /// The failure that is aborting this dispatch (only called when aborted).
    @usableFromInline
    func currentFailure() -> DispatchError<Callback.Failure> {
        guard let failure = run.pointee.failure else {
            let token = DispatchToken(rawValue: run.pointee.failedToken)
            return .flux(
                run.pointee.tooDeep
                    ? .tooDeep(token)
                    : FluxError(.callbackFailed, "the dispatch was aborted", token: token))
        }
        return .callback(failure, DispatchToken(rawValue: run.pointee.failedToken))
    }

    @usableFromInline
    enum Phase { case notRun, pending, handled, removed }

    /// Where the callback at `i` stands in this dispatch. Callbacks run by
    /// `waitFor` carry marks; the outer loop marks nothing, so before its
    /// cursor everything is handled and at its cursor the callback is pending.
    ///
    /// Every mark this dispatch can find is at least `pending`: its own two
    /// (`pending`, `pending | 1`) and `removedMark`; marks of earlier
    /// dispatches are below it. So one compare sends the common case -- no
    /// mark yet -- to the cursor.
    @inlinable @inline(__always)
    func phase(_ table: SlotTable<Callback>, _ i: Int, _ pending: UInt64) -> Phase {
        let mark = table.mark(i)
        if mark < pending {
            let cursor = run.pointee.cursor
            return i < cursor ? .handled : i == cursor ? .pending : .notRun
        }
        if mark == pending { return .pending }
        return mark == SlotTable<Callback>.removedMark ? .removed : .handled
    }

    /// Runs the callback at `i` for a wait, marking it pending, then
    /// handled, with the observer's events around it when there is one.
    /// Returns false when the dispatch must stop (this callback, or one it
    /// waited for, failed; or the chain is too deep).
    @inlinable
    func invoke<Choice: ObserverChoice<Observer>>(
        _ choice: Choice, _ table: SlotTable<Callback>, _ i: Int, _ payload: Callback.Payload, _ pending: UInt64
    ) -> Bool {
        // Every callback a wait runs is one more link on this thread's stack:
        // past the low-water mark, abort instead of overflowing.
        if currentStackAddress() < run.pointee.stackLimit && !stackHasRoom(token: table.tokens[i]) { return false }
        // Read again past the depth check's call rather than kept across it:
        // fewer registers to save in every link's frame.
        let table = slots.pointee
        table.setMark(i, pending)
        // Who waits for whom, for circular errors and observers: the waiter
        // stays in a register, one store records it. (Indices fit in Int32:
        // a table of 2^31 slots cannot be allocated.)
        let run = self.run
        let waiter = run.pointee.top
        table.waitedBy[i] = Int32(truncatingIfNeeded: waiter)
        // Unregistered by the hook: nothing to wait for any more.
        if let observer = choice.observer, !begin(observer, table, i, putAside: true) { return true }
        run.pointee.top = i
        let error = table.callbacks[i].invoke(payload)
        run.pointee.top = waiter
        // The table and the epoch are read again rather than kept across the
        // call (they cannot change during a dispatch): fewer registers to
        // save, so a smaller frame for every link of a chain of waits.
        let after = slots.pointee
        if let observer = choice.observer {
            hook { observer.callbackEnd(DispatchToken(rawValue: after.tokens[i]), error) }
        }
        // Handled, unless the callback was unregistered meanwhile (removedMark
        // is the largest mark, so max keeps it). An unregistration from
        // another thread can slip in between the load and the store and be
        // overwritten; that only loses the skip hint for a callback that has
        // already run, and the end of the dispatch removes it by `leaving`.
        after.setMark(i, max(after.mark(i), run.pointee.pending | 1))
        if let error { recordFailure(error, token: after.tokens[i]) }
        return !run.pointee.aborted
    }

    /// The slow half of the depth check: finds this thread's low-water mark
    /// (cached per thread) and keeps it for the rest of the dispatch; below
    /// it, aborts the dispatch with `tooDeep` and returns false.
    @usableFromInline @inline(never)
    func stackHasRoom(token: UInt64) -> Bool {
        let address = currentStackAddress()
        // On another stack (a fiber's): no check there, and none kept -- a
        // limit of 0 kept would leave the thread's own stack unchecked for
        // the rest of the dispatch.
        guard let limit = stackLimit(at: address) else { return true }
        let run = self.run
        if address >= limit {
            run.pointee.stackLimit = limit
            return true
        }
        // invoke() is reached only when the dispatch is not aborting.
        abortAsTooDeep(token: token)
        return false
    }

    /// Aborts the running dispatch, not aborting yet, as too deep at `token`.
    private func abortAsTooDeep(token: UInt64) {
        let run = self.run
        run.pointee.aborted = true
        run.pointee.end = 0
        run.pointee.failedToken = token
        run.pointee.tooDeep = true
    }

    @usableFromInline
    func recordFailure(_ error: Callback.Failure, token: UInt64) {
        // Keep the first failure: a waiter re-reporting it is not the cause.
        let run = self.run
        if !run.pointee.aborted {
            run.pointee.aborted = true
            run.pointee.end = 0
            run.pointee.failure = error
            run.pointee.failedToken = token
        }
    }

    /// The contended start: refuses a dispatch from inside a dispatch on this
    /// thread, or one whose wait would deadlock (or, unless it `waits`, any
    /// that would wait), otherwise sleeps until the running dispatch ends and
    /// claims it.
    @usableFromInline
    func beginSlow(_ me: UInt, waits: Bool) -> FluxError? {
        if owner.load(ordering: .relaxed) == me { return .alreadyDispatching }
        lock.lock()
        defer { lock.unlock() }
        if isClosed { return .closed }
        locked.pointee.waiters += 1
        defer { locked.pointee.waiters -= 1 }
        // Cancellation is off from the first sleep to the end of the dispatch
        // it then runs (`endSlow` gives it back; the slow-end bit takes the
        // end there): a cancel taken while asleep would act at the first
        // cancellation point of a callback, unwinding out of the engine with
        // the dispatcher still claimed, and flux.h promises it acts once
        // flux_dispatch() has returned.
        var cancelState: Int32?
        var claimed = false
        defer { if let cancelState, !claimed { restoreCancellation(cancelState) } }
        while true {
            let current = state.load(ordering: .acquiring)
            // Looked at on every turn: while this thread slept, the dispatch
            // it waited for may have ended and a close() run before it got
            // the lock back. Claiming the dispatcher now would wipe the
            // closed bit with the word built below.
            if current & Self.closedBit != 0 { return .closed }
            if current & Self.orphanedBit != 0 { return .orphaned }
            if current & Self.dispatchingBit == 0 {
                // Idle; the mutating bit cannot be set, mutators hold the lock.
                // Leave the waiters bit up for those still sleeping.
                let desired =
                    Self.dispatchingBit | (locked.pointee.waiters > 1 ? Self.waitersBit : 0)
                    | (cancelState != nil ? Self.slowEndBit : 0)
                if state.compareExchange(expected: current, desired: desired, ordering: .acquiringAndReleasing)
                    .exchanged
                {
                    locked.pointee.cancelState = cancelState
                    claimed = true
                    checkInvariantsLocked()
                    return nil
                }
            } else if !waits {
                return .wouldWait
            } else if current & Self.waitersBit == 0 {
                // Announce ourselves, then look again: the dispatch may have
                // ended by the fast path in between, with nobody to wake us.
                _ = state.compareExchange(
                    expected: current, desired: current | Self.waitersBit, ordering: .acquiringAndReleasing)
            } else {
                if cancelState == nil { cancelState = disableCancellation() }
                if let refused = sleepUnlessDeadlocked(me) { return refused }
            }
        }
    }

    /// `beginSlow`'s sleep, under the lock, unless the thread running the
    /// dispatch is waiting, itself or through others, for this one (a
    /// callback of one dispatcher dispatching another, on two threads):
    /// then refused, or none of them would ever wake. Refused too when the
    /// wait cannot be noted (no memory): an unnoted sleeper hides a cycle.
    private func sleepUnlessDeadlocked(_ me: UInt) -> FluxError? {
        let holder = owner.load(ordering: .relaxed)
        // Dispatching with no owner yet (or between two queued
        // dispatches): it lasts a few instructions, and sleeping without
        // knowing whom for could miss a cycle.
        guard holder != 0 else {
            lock.unlock()
            yieldThread()
            lock.lock()
            return nil
        }
        switch DispatchWaits.shared.wait(me, for: engineID, heldBy: holder) {
        case .recorded:
            break
        case .deadlock(let threads):
            return FluxError(
                .alreadyDispatching,
                template:
                    "cannot dispatch: waiting would deadlock (\u{1} threads each waiting for another, through dispatches from callbacks or store classes being made)",
                number: UInt64(threads))
        case .noMemory:
            // Unrecorded, a cycle closed through this wait later would go
            // unseen and deadlock: refuse, having run nothing.
            return FluxError(
                .noMemory, "cannot wait for another thread's dispatch: out of memory to note the wait")
        }
        lock.wait()
        DispatchWaits.shared.stopWaiting(me)
        return nil
    }

    /// This engine's identity for `DispatchWaits`: the address of its block.
    private var engineID: UInt { UInt(bitPattern: slots) }

    /// The contended end: merges registrations that joined, drops those that
    /// left, installs an observer set meanwhile, runs the queued payloads
    /// (each a dispatch of its own, still owning the dispatcher), wakes
    /// waiting dispatchers, then releases what left and retired observers
    /// (outside the lock, after the dispatch is over).
    @usableFromInline
    func endSlow() {
        lock.lock()
        while true {
            mergeLocked()
            guard runNextQueued() else { break }
            owner.store(0, ordering: .relaxed)
            lock.lock()
        }
        // Every removal of the whole call, queued dispatches included, is
        // released now that it is over (room was reserved for each).
        var released = locked.pointee.releasing
        locked.pointee.releasing = MallocList()
        var retired = locked.pointee.retired
        locked.pointee.retired = MallocList()
        let cancelState = locked.pointee.cancelState.take()
        state.store(0, ordering: .releasing)
        checkInvariantsLocked()
        if locked.pointee.waiters > 0 {
            DispatchWaits.shared.ended(engineID)
            lock.broadcast()
        }
        lock.unlock()
        released.drain { $0.release() }
        retired.drain { $0.release() }
        // Last: the call is over, nothing of it left to run (see beginSlow).
        if let cancelState { restoreCancellation(cancelState) }
    }

    /// Under the lock, from `endSlow`: pops the next queued payload, and
    /// false when there is none (the lock still held). Else dispatches and
    /// completes it with the lock let go and the dispatcher this thread's,
    /// and returns true with both still so: the entry (its payload, its
    /// completion) is let go of here, before `endSlow` gives up ownership and
    /// retakes the lock -- a deinit it runs may call in, and is then refused
    /// or queued, as from the completion, not left waiting for this very
    /// call, or for the lock, forever.
    private func runNextQueued() -> Bool {
        guard let next = locked.pointee.queue.popFirst() else { return false }
        // Still dispatching: keep the waiters' bit, and the slow-end bit
        // while payloads remain, so the next end comes back here.
        state.store(
            Self.dispatchingBit
                | (locked.pointee.waiters > 0 ? Self.waitersBit : 0)
                | (locked.pointee.queue.isEmpty ? 0 : Self.slowEndBit), ordering: .releasing)
        checkInvariantsLocked()
        lock.unlock()
        owner.store(currentThreadID(), ordering: .relaxed)
        let error = runBody(next.payload)
        Callback.complete(next.completion, next.payload, error)
        return true
    }

    /// Under the lock, at the end of a dispatch: what mutators left for it.
    /// Allocates nothing for registrations (room was reserved by each).
    private func mergeLocked() {
        if !locked.pointee.leaving.isEmpty {
            // Stamp them again: waitFor may have overwritten a stamp (see invoke).
            locked.pointee.leaving.forEach { token in
                if let i = slots.pointee.index(of: token) { slots.pointee.setMark(i, SlotTable<Callback>.removedMark) }
            }
            // Room reserved by each unregistration: no allocation here.
            slots.pointee.removeMarked { locked.pointee.releasing.append($0) }
        }
        // Empty, it may still hold storage: an unregistration that ran out
        // of memory after reserving room here changed nothing else.
        locked.pointee.leaving.drain { _ in }
        if var joined = locked.pointee.joined {
            if slots.pointee.count + joined.count > slots.pointee.capacity, var spare = locked.pointee.spare {
                slots.pointee.moveAll(appendingTo: &spare)
                slots.pointee.deallocate()
                slots.pointee = spare
                locked.pointee.spare = nil
            }
            // reserveJoinedSlot() guaranteed the room.
            joined.moveAll(appendingTo: &slots.pointee)
            joined.deallocate()
            locked.pointee.joined = nil
        }
        locked.pointee.spare?.deallocate()
        locked.pointee.spare = nil
        if locked.pointee.observerChanged {
            let run = self.run
            // Room reserved by the change (setObserver).
            if let old = run.pointee.observer { locked.pointee.retired.append(old) }
            run.pointee.observer = locked.pointee.nextObserver
            locked.pointee.nextObserver = nil
            locked.pointee.observerChanged = false
        }
    }

    // MARK: - Queued dispatch

    /// What `enqueue` did with a payload.
    @_spi(Engine) public enum EnqueueOutcome {
        /// Dispatched at once on this thread (completion has run; so has the
        /// queue); the error is the payload's own outcome.
        case dispatched(DispatchError<Callback.Failure>?)
        /// Queued for the thread running the dispatch; completion runs there.
        case queued
        /// Refused (closed, out of memory, orphaned by fork()); completion
        /// has run with it.
        case refused(FluxError)
    }

    /// Dispatches `payload` now when idle (then completes it, then runs what
    /// got queued, before returning); while a dispatch runs, on this thread
    /// or another, appends it to the queue and returns at once. Never waits.
    /// `Callback.complete(completion, ...)` runs exactly once per call.
    @_spi(Engine) public func enqueue(_ payload: Callback.Payload, _ completion: Callback.Completion) -> EnqueueOutcome
    {
        if !state.compareExchange(expected: 0, desired: Self.dispatchingBit, ordering: .acquiring).exchanged {
            lock.lock()
            let entry = enqueueLocked(payload, completion)
            checkInvariantsLocked()
            lock.unlock()
            switch entry {
            case .refused(let error):
                // Refused from inside this thread's own dispatch (a callback
                // out of memory), the completion runs inside that callback:
                // with the run's payload put aside, as for a hook, so that a
                // wait from it is refused rather than run callbacks out of turn.
                hook(isDispatchingOnCurrentThread) { Callback.complete(completion, payload, .flux(error)) }
                return .refused(error)
            case .queued:
                return .queued
            case .claimed:
                break  // found idle: dispatch it here
            }
        }
        owner.store(currentThreadID(), ordering: .relaxed)
        let error = runBody(payload)
        // The dispatcher stays ours until the queue is drained, so a
        // dispatch from the completion is refused and an enqueue queues.
        Callback.complete(completion, payload, error)
        owner.store(0, ordering: .relaxed)
        if !state.compareExchange(expected: Self.dispatchingBit, desired: 0, ordering: .releasing).exchanged {
            endSlow()
        }
        return .dispatched(error)
    }

    /// What `enqueueLocked` did.
    private enum QueueEntry {
        /// Appended to the queue of the running dispatch.
        case queued
        /// Not queued, for this reason.
        case refused(FluxError)
        /// The dispatcher was idle, and is now the caller's to dispatch in.
        case claimed
    }

    /// Under the lock: queues the payload, refuses it, or claims the idle
    /// dispatcher for the caller.
    private func enqueueLocked(_ payload: Callback.Payload, _ completion: Callback.Completion) -> QueueEntry {
        if isClosed { return .refused(.closed) }
        var current = state.load(ordering: .relaxed)
        while true {
            // A dispatch orphaned by fork() never drains its queue: refuse,
            // as dispatch does, so the completion runs now, not never.
            if current & Self.orphanedBit != 0 { return .refused(.orphaned) }
            if current & Self.dispatchingBit == 0 {
                // Idle: the dispatch ended before we got here (never lost).
                let (exchanged, original) = state.compareExchange(
                    expected: current, desired: current | Self.dispatchingBit, ordering: .acquiringAndReleasing)
                if exchanged { return .claimed }
                current = original
                continue
            }
            guard locked.pointee.queue.reserveOne() else { return .refused(.outOfMemory) }
            // The bit first: once it is up, the running dispatch cannot end
            // by its fast path, and its slow end needs this lock.
            let (exchanged, original) = state.compareExchange(
                expected: current, desired: current | Self.slowEndBit, ordering: .acquiringAndReleasing)
            if exchanged {
                locked.pointee.queue.append((payload, completion))
                return .queued
            }
            current = original
        }
    }

    /// One whole dispatch of `payload` by the thread that owns the
    /// dispatcher, leaving it owned. Returns its failure. Observed or not is
    /// decided here, once per dispatch. Inlined into `dispatch` (the hot
    /// path); the queue's drain calls it too.
    @inlinable @inline(__always)
    func runBody(_ payload: Callback.Payload) -> DispatchError<Callback.Failure>? {
        if run.pointee.observer != nil { return observedRun(payload) }
        return runLoop(payload, Unobserved<Observer>())
    }

    /// `runLoop` with the observer, out of line: the rare case, kept out of
    /// the hot path (which it would otherwise copy the observer into).
    @usableFromInline @inline(never)
    func observedRun(_ payload: Callback.Payload) -> DispatchError<Callback.Failure>? {
        guard let observer = run.pointee.observer else { return runLoop(payload, Unobserved<Observer>()) }
        return runLoop(payload, Observed(observer))
    }

    /// The dispatch loop: every callback in registration order, but those a
    /// wait already ran (or is running) and those removed; stops at the
    /// first failure.
    @inlinable @inline(__always)
    func runLoop<Choice: ObserverChoice<Observer>>(
        _ payload: Callback.Payload, _ choice: Choice
    ) -> DispatchError<Callback.Failure>? {
        runCallbacks(payload, choice)
        let error = finishRun()
        choice.observer?.dispatchEnd(payload, error)
        return error
    }

    /// The loop itself; the run's failure, if any, is left in the run.
    @inlinable @inline(__always)
    func runCallbacks<Choice: ObserverChoice<Observer>>(_ payload: Callback.Payload, _ choice: Choice) {
        // Before the run has its payload: a wait from the hook is refused.
        choice.observer?.dispatchBegin(payload)
        let run = self.run
        // Observed, the run holds the payload only while a callback runs,
        // so the hooks between callbacks find none with nothing put aside.
        let table = startRun(choice.observer == nil ? payload : nil)
        var i = 0
        // `end` drops to 0 when a callback fails, here or in a waitFor.
        // It and the pending mark are read through `run` each time (after an
        // opaque call they would be anyway): kept in registers, they left none
        // for the payload, which was then spilled and reloaded per callback.
        // The mark is kept doubled (`pending`) so that the compare reads it
        // from memory as it is: a callback a wait already ran is skipped in
        // as few instructions as when it sat in a register.
        while i < run.pointee.end {
            // The cursor stands in for this callback's pending mark.
            if table.mark(i) < run.pointee.pending {
                run.pointee.cursor = i
                if let observer = choice.observer {
                    if !begin(observer, table, i, putAside: false) {
                        i &+= 1
                        continue
                    }
                    run.pointee.payload = payload
                }
                let error = table.callbacks[i].invoke(payload)
                if let observer = choice.observer {
                    run.pointee.payload = nil
                    observer.callbackEnd(DispatchToken(rawValue: table.tokens[i]), error)
                }
                if let error { recordFailure(error, token: table.tokens[i]) }
            }
            i &+= 1
        }
    }

    /// Sets the run state up for a dispatch holding `payload` (nil: none
    /// until a callback runs): a new epoch, no callback running yet, the
    /// stack limit to look up again, and the loop's end. Returns the frozen
    /// table.
    @inlinable @inline(__always)
    func startRun(_ payload: Callback.Payload?) -> SlotTable<Callback> {
        let run = self.run
        run.pointee.pending &+= 2
        run.pointee.payload = payload
        run.pointee.cursor = -1
        run.pointee.stackLimit = .max
        let table = slots.pointee
        run.pointee.end = table.count
        return table
    }

    /// Reports that the callback at `i` begins; false when the hook
    /// unregistered it, which then ends at once, not run: flux_unregister
    /// promises no call once it returned on the dispatching thread. The
    /// loop's callers hold no payload to put aside (see `runLoop`).
    @inlinable
    func begin(_ observer: Observer, _ table: SlotTable<Callback>, _ i: Int, putAside: Bool) -> Bool {
        let token = DispatchToken(rawValue: table.tokens[i])
        hook(putAside) { observer.callbackBegin(token) }
        guard table.mark(i) == SlotTable<Callback>.removedMark else { return true }
        hook(putAside) { observer.callbackEnd(token, nil) }
        return false
    }

    /// Runs an observer hook with the run's payload put aside. A callback
    /// may wait, a hook may not: its wait would be reported as the running
    /// callback's and run callbacks out of turn (a `waitFor` hook that
    /// waits, forever). With no payload a wait finds no callback running,
    /// so it is refused with `notDispatching` and reports nothing, as from
    /// `dispatchBegin`/`dispatchEnd` (called with none) or a completion.
    /// `putAside` false: nothing to put aside -- the run holds none (the
    /// observed loop's), or is not this thread's (a refused enqueue's).
    @inlinable @inline(__always)
    func hook(_ putAside: Bool = true, _ call: () -> Void) {
        guard putAside else { return call() }
        let run = self.run
        let payload = run.pointee.payload.take()
        call()
        run.pointee.payload = payload
    }

    /// Resets the run state after the loop; returns the dispatch's failure.
    @inlinable @inline(__always)
    func finishRun() -> DispatchError<Callback.Failure>? {
        let run = self.run
        guard run.pointee.aborted else {
            resetRun()
            return nil
        }
        checkRunAtEnd(run.pointee.pending)
        let failure = run.pointee.failure.take()
        let tooDeep = run.pointee.tooDeep
        run.pointee.tooDeep = false
        run.pointee.aborted = false
        run.pointee.payload = nil
        if let failure { return .callback(failure, DispatchToken(rawValue: run.pointee.failedToken)) }
        return tooDeep ? tooDeepFailure() : nil
    }

    /// The end of a run that did not fail.
    @inlinable @inline(__always)
    func resetRun() {
        let run = self.run
        checkRunAtEnd(run.pointee.pending)
        run.pointee.payload = nil
    }

    /// The failure of a dispatch the engine aborted, its chain too deep. Cold.
    @usableFromInline @inline(never)
    func tooDeepFailure() -> DispatchError<Callback.Failure> {
        .flux(.tooDeep(DispatchToken(rawValue: run.pointee.failedToken)))
    }

    // MARK: - Observer

    /// Sets (nil: clears) the observer. Idle, it takes effect at once and the
    /// previous one is released before this returns; during a dispatch, it
    /// takes effect from the next dispatch (a queued one included) and the
    /// previous one is released when the running call returns. Never waits.
    ///
    /// - Throws: `invalidArgument` once closed; `alreadyDispatching` in a
    ///   forked child whose dispatch another thread of the parent was
    ///   running (it never ends, so the change would stay pending, and the
    ///   observer held, for good); `noMemory`. Each time `observer.release`
    ///   has run.
    @_spi(Engine) public func setObserver(_ observer: Observer?) throws(FluxError) {
        lock.lock()
        if isClosed {
            lock.unlock()
            observer?.release()
            throw .closed
        }
        if state.load(ordering: .relaxed) & Self.orphanedBit != 0 {
            lock.unlock()
            observer?.release()
            throw .orphaned
        }
        var old: Observer?
        if claimTable(orSet: Self.slowEndBit) {
            let run = self.run
            old = run.pointee.observer
            run.pointee.observer = observer
            releaseTable()
        } else {
            // Room for what this change retires when the call ends: the
            // pending observer it replaces, or, for the first change, the
            // one the running dispatch uses. Reserved now, so the end of
            // the dispatch cannot run out of memory.
            let replacing = locked.pointee.observerChanged && locked.pointee.nextObserver != nil
            let needed = locked.pointee.retired.count + (replacing ? 1 : 0) + 1  // + 1: the running one's
            guard locked.pointee.retired.reserve(needed) else {
                lock.unlock()
                observer?.release()
                throw .outOfMemory
            }
            if replacing, let replaced = locked.pointee.nextObserver { locked.pointee.retired.append(replaced) }
            locked.pointee.nextObserver = observer
            locked.pointee.observerChanged = true
        }
        checkInvariantsLocked()
        lock.unlock()
        old?.release()
    }

    /// Reports a wait of the running callback, when a callback is running.
    @usableFromInline
    func reportWait<Tokens: Collection<DispatchToken>>(_ observer: Observer, _ tokens: Tokens) {
        guard observer.observesWaits, run.pointee.payload != nil else { return }
        let waiter = DispatchToken(rawValue: slots.pointee.tokens[waiterIndex])
        hook {
            if let done: Void = tokens.withContiguousStorageIfAvailable({ observer.waitFor(waiter, $0) }) {
                return done
            }
            // Not contiguous (no C caller passes such): a copy, Swift-allocated.
            let copy = Array(tokens)
            copy.withUnsafeBufferPointer { observer.waitFor(waiter, $0) }
        }
    }

    /// `reportWait` for a one-token wait (every link of a chain), from a
    /// local: a `CollectionOfOne` has no contiguous storage, so the generic
    /// path copied it into a Swift array -- an allocation per observed wait,
    /// which traps when memory runs out (and nothing across the C ABI may).
    @usableFromInline
    func reportWait(_ observer: Observer, _ token: DispatchToken) {
        withUnsafePointer(to: token) { reportWait(observer, UnsafeBufferPointer(start: $0, count: 1)) }
    }

    /// The index of the callback running innermost (the waiter of a wait).
    var waiterIndex: Int { run.pointee.top >= 0 ? run.pointee.top : run.pointee.cursor }

    /// The cycle a wait on the pending callback at `target` closes, named in
    /// full from the chain of waiting frames: "token 3 waits for 1, which is
    /// waiting for 2, which is waiting for 3". Cold: the success path keeps
    /// only the frame links.
    @usableFromInline
    func circularError(_ token: DispatchToken, _ target: Int) -> FluxError {
        // The running callbacks, innermost first, down to the cursor's.
        var chain: [Int] = []
        let table = slots.pointee
        var node = run.pointee.top
        while node >= 0, node < table.count, chain.count <= table.count {
            chain.append(node)
            node = Int(table.waitedBy[node])
        }
        chain.append(run.pointee.cursor)
        let tokens = slots.pointee.tokens
        guard let k = chain.firstIndex(of: target), let waiter = chain.first else { return .circular(token) }
        // The cycle as values: the waiter, the target, then back down the
        // chain of waits to the waiter again.
        var cycle = [DispatchToken(rawValue: tokens[waiter]), token]
        for j in stride(from: k - 1, through: 0, by: -1) {
            cycle.append(DispatchToken(rawValue: tokens[chain[j]]))
        }
        // "token 3 waits for 1, which is waiting for 2", or "for itself".
        return FluxError(.circularDependency, template: "circular dependency: token \u{2}", token: token, cycle: cycle)
    }

    // MARK: - fork()

    /// pthread_atfork's prepare: holds the lock across fork(), so the child
    /// gets the tables in a consistent state and the lock free.
    @_spi(Engine) public func prepareFork() { lock.lock() }

    /// pthread_atfork's parent handler.
    @_spi(Engine) public func parentAfterFork() { lock.unlock() }

    /// pthread_atfork's child handler, on the only thread of the child (the
    /// one that forked). No thread of the parent exists here: none sleeps
    /// on the condition, and a dispatch another thread was running can
    /// never end. A dispatch this very thread was running (fork() from a
    /// callback) goes on.
    @_spi(Engine) public func childAfterFork() {
        lock.resetCondition()
        locked.pointee.waiters = 0
        var word = state.load(ordering: .relaxed) & ~Self.waitersBit
        if word & Self.dispatchingBit != 0 && owner.load(ordering: .relaxed) != currentThreadID() {
            word |= Self.orphanedBit
            // No thread of the child runs it; and a new thread may get the
            // dead owner's pthread_t (glibc reuses its stack), which must
            // not pass for it.
            owner.store(0, ordering: .relaxed)
        }
        state.store(word, ordering: .relaxed)
        lock.unlock()
    }

    // MARK: - Invariants (FLUX_CHECK_INVARIANTS builds)

    // SQLite's SQLITE_DEBUG habit: the checks below are compiled only where
    // tests run -- swift test's debug build, and the libraries that
    // `make check-address`, `make check-thread-c` and `make fuzz` build --
    // and trap at the first broken invariant. The shipped library (`make
    // lib`) compiles every call to nothing.

    /// Under the lock, at every change of the state word: checks the word
    /// against the tables, and the tables themselves.
    @inline(__always)
    func checkInvariantsLocked() {
        #if FLUX_CHECK_INVARIANTS
            if let broken = invariantViolationLocked() { preconditionFailure("libflux invariant: \(broken)") }
        #endif
    }

    /// On the dispatching thread, as each dispatch of a call ends (before its
    /// run state is reset): checks the run's own state. Inlinable, so that
    /// without the condition it is nothing at all in the dispatch loop.
    @inlinable @inline(__always)
    func checkRunAtEnd(_ pending: UInt64) {
        #if FLUX_CHECK_INVARIANTS
            if let broken = runViolation(pending) { preconditionFailure("libflux invariant: \(broken)") }
        #endif
    }

    #if FLUX_CHECK_INVARIANTS
        /// The first invariant of the state word and the tables that does not
        /// hold, or nil. Under the lock.
        func invariantViolationLocked() -> String? {
            let word = state.load(ordering: .acquiring)
            let known =
                Self.dispatchingBit | Self.mutatingBit | Self.waitersBit | Self.slowEndBit | Self.closedBit
                | Self.orphanedBit
            if word & ~known != 0 { return "state word \(word) has unknown bits" }
            if word & Self.mutatingBit != 0 { return "the mutating bit outlives its mutator (state \(word))" }
            let dispatching = word & Self.dispatchingBit != 0
            if !dispatching {
                if word & (Self.waitersBit | Self.slowEndBit) != 0 {
                    return "waiters or slow-end without a dispatch (state \(word))"
                }
                if !locked.pointee.queue.isEmpty { return "queued payloads without a dispatch" }
                if locked.pointee.observerChanged { return "an observer change left pending without a dispatch" }
                if !locked.pointee.retired.isEmpty || locked.pointee.retired.capacity != 0 {
                    return "retired observers outlive their dispatch"
                }
                if locked.pointee.joined != nil || locked.pointee.spare != nil {
                    return "side tables without a dispatch"
                }
                if !locked.pointee.leaving.isEmpty || !locked.pointee.releasing.isEmpty {
                    return "leavers without a dispatch"
                }
                if locked.pointee.leaving.capacity != 0 || locked.pointee.releasing.capacity != 0 {
                    return "bookkeeping storage outlives its dispatch"
                }
            }
            if !locked.pointee.queue.isEmpty && word & Self.slowEndBit == 0 {
                return "queued payloads without the slow-end bit"
            }
            if locked.pointee.waiters < 0 { return "negative waiter count" }
            if word & Self.closedBit != 0, slots.pointee.count != 0 || locked.pointee.joined != nil {
                return "a closed dispatcher has registrations"
            }
            if let broken = tableViolation(slots.pointee, below: locked.pointee.nextToken, idle: !dispatching) {
                return broken
            }
            if let joined = locked.pointee.joined {
                if let broken = tableViolation(joined, below: locked.pointee.nextToken, idle: false) { return broken }
                if joined.count > 0, slots.pointee.count > 0,
                    joined.tokens[0] <= slots.pointee.tokens[slots.pointee.count - 1]
                {
                    return "joined tokens must follow the table's"
                }
            }
            return nil
        }

        private func tableViolation(_ table: SlotTable<Callback>, below next: UInt64, idle: Bool) -> String? {
            if table.count < 0 || table.count > table.capacity {
                return "table count \(table.count) of \(table.capacity)"
            }
            // Whole when small; for a big table only its tail, where appends
            // land, so that tests registering many callbacks stay fast.
            let first = table.count <= 256 ? 0 : table.count - 16
            var previous: UInt64 = first == 0 ? 0 : table.tokens[first - 1]
            for i in first..<table.count {
                let token = table.tokens[i]
                if token <= previous || token >= next { return "tokens must strictly increase below nextToken" }
                if idle && table.mark(i) == SlotTable<Callback>.removedMark {
                    return "a removal mark outlives its dispatch"
                }
                previous = token
            }
            return nil
        }

        /// The first invariant of the run's state that does not hold as a
        /// dispatch (epoch `pending / 2`) ends, or nil.
        @usableFromInline
        func runViolation(_ pending: UInt64) -> String? {
            let run = self.run.pointee
            if run.top != -1 { return "the stack of running callbacks is not empty (top \(run.top))" }
            if run.aborted != (run.failure != nil || run.tooDeep) {
                return
                    "aborted is \(run.aborted), but a failure is \(run.failure != nil || run.tooDeep ? "" : "not ")recorded"
            }
            let table = slots.pointee
            if run.aborted ? run.end != 0 : run.end != table.count {
                return "the loop's end \(run.end) disagrees with aborted"
            }
            if run.pending != pending { return "the epoch moved during its dispatch" }
            let first = table.count <= 256 ? 0 : table.count - 256
            for i in first..<table.count {
                let mark = table.mark(i)
                // Marks of this epoch: handled (pending | 1), or removed; never
                // left pending -- every callback a wait started has returned.
                if mark == pending { return "callback \(i) is still marked pending at the end of its dispatch" }
                if mark > (pending | 1) && mark != SlotTable<Callback>.removedMark {
                    return "callback \(i) has a mark from the future"
                }
            }
            return nil
        }
    #endif

    // MARK: - Error messages (cold)

    @usableFromInline
    func notDispatchingError() -> FluxError {
        if isDispatchingOnCurrentThread {
            // An observer hook or an enqueue's completion: the thread runs
            // the dispatch, but no callback of it.
            return FluxError(
                .notDispatching,
                "must be invoked from inside a callback of the dispatch (this thread runs it, but no callback is running)"
            )
        }
        return isDispatching
            ? FluxError(
                .notDispatching,
                "must be invoked while dispatching, on the dispatching thread (a dispatch is running on another thread)"
            )
            : FluxError(.notDispatching, "must be invoked while dispatching")
    }

    @usableFromInline
    func unknownTokenError(_ token: DispatchToken) -> FluxError {
        lock.lock()
        defer { lock.unlock() }
        return unknownTokenLocked(token.rawValue)
    }

    private func unknownTokenLocked(_ t: UInt64) -> FluxError {
        let why: String
        if t == 0 {
            why = "token 0 is never a valid token"
        } else if locked.pointee.joined?.index(of: t) != nil {
            why = "token \u{1} was registered during this dispatch; it is first called by the next dispatch"
        } else if locked.pointee.leaving.contains(where: { $0 == t }) {
            why = "token \u{1} was unregistered during this dispatch"
        } else if t >= locked.pointee.nextToken {
            why = "token \u{1} was never issued by this dispatcher"
        } else {
            why = "token \u{1} does not map to a registered callback (it was unregistered)"
        }
        return FluxError(.unknownToken, template: why, number: t, token: t == 0 ? nil : DispatchToken(rawValue: t))
    }
}

extension FluxError {
    static var closed: FluxError { FluxError(.invalidArgument, "the dispatcher is closed (being destroyed)") }
    static var outOfMemory: FluxError { FluxError(.noMemory, "out of memory") }
    /// `close()` refused: a dispatch runs. (flux_dispatcher_destroy reports
    /// it without calling `close()` when the dispatcher has stores.)
    @_spi(Engine) public static var closingWhileDispatching: FluxError {
        FluxError(.alreadyDispatching, "cannot destroy a dispatcher while it is dispatching")
    }
    /// A dispatch that does not wait, while another thread dispatches.
    static var wouldWait: FluxError {
        FluxError(.alreadyDispatching, "another thread is dispatching (a try does not wait for it)")
    }
    @usableFromInline static var orphaned: FluxError {
        FluxError(
            .alreadyDispatching,
            "a dispatch was running on another thread when this process forked; it cannot finish in this process")
    }
    @usableFromInline static func tooDeep(_ token: DispatchToken) -> FluxError {
        FluxError(.tooDeep, "the chain of waiting callbacks is too deep for this thread's stack", token: token)
    }
}
