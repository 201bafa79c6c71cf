import Synchronization

// The rules of Facebook's FluxStore and FluxReduceStore, once, for every
// host: the Swift `FluxStore` and `ReduceStore` and the C `flux_store_*`
// exports each register a callback that calls `StoreCore.handle`, and keep
// their state wherever suits them (a `StoreReducer` says how to reach it).
// The core uses only what any dispatcher offers its callbacks: that it runs
// them on the dispatching thread, and whether that dispatch is aborting.

/// A store listener as a host stores it. `release()` runs exactly once per
/// listener added, never with the store's lock held.
@_spi(Engine) public protocol StoreListener {
    associatedtype Failure: Error
    /// Runs the listener; a non-nil result stops the emit and fails the dispatch.
    func invoke() -> Failure?
    func release()
}

/// How the core reaches a host's state and reduce function.
@_spi(Engine) public protocol StoreReducer {
    associatedtype State
    associatedtype Payload
    associatedtype Failure: Error
    /// The current state (only the dispatching thread changes it).
    func loadState() -> State
    func storeState(_ state: State)
    func reduce(_ state: State, _ payload: Payload) -> Result<State, Failure>
    /// The same state (C: the same pointer): no comparison, nothing released.
    func isSame(_ current: State, _ next: State) -> Bool
    func areEqual(_ current: State, _ next: State) -> Bool
    /// Lets go of a state the store no longer holds.
    func release(_ state: State)
}

/// Why a store's callback failed: its reduce, or one of its listeners.
@_spi(Engine) public enum StoreFailure<ReduceFailure: Error, ListenerFailure: Error>: Error {
    case reduce(ReduceFailure)
    case listener(ListenerFailure)
}

/// The per-store part of Facebook's stores: the changed flag, when
/// `emitChange` is legal, and the listener table with its emit semantics.
///
/// Lives in one `malloc` block (its address must not move: the lock is in
/// it), so that creating one reports running out of memory instead of
/// trapping. Three parts, each at its own offset in it:
///
/// - `flags`: touched only by the thread running the store's dispatch, and
///   read elsewhere only after checking that this thread is that one;
/// - `table`: the listeners, under `busy`, so any thread may add and remove;
/// - `busy`: a spin lock. It is held only for a few loads and stores (never
///   while a listener runs), and an emit takes it twice per listener, so a
///   pthread mutex's call and fences would cost more than the work it guards.
@_spi(Engine) public struct StoreCore<Listener: StoreListener>: ~Copyable, @unchecked Sendable {
    @usableFromInline
    struct Flags {
        /// What the most recent handling did (Facebook's `__changed`).
        @usableFromInline var changed = false
        /// True while the store's own reduce runs: `emitChange` is legal.
        @usableFromInline var reducing = false
    }

    @usableFromInline
    struct Entry {
        /// The listener's id; with `removedBit` set once removed.
        @usableFromInline var id: UInt64
        /// nil once removed: taken out by the removal, so what a Swift
        /// listener captured goes at once (an emit running it holds its
        /// own copy, and releases it when it returns).
        @usableFromInline var listener: Listener?
    }

    /// Marks a removed entry. Removing only marks, and the entries stay in
    /// add order -- so sorted by id, the bit aside -- which lets a removal
    /// find its entry by binary search and move nothing. The marked entries
    /// are dropped together (`compact`) by the next emit, when it ends, or
    /// once they are a quarter of the table and no emit holds indices into
    /// it: amortized O(1) moves per removal, and an emit skips at most one
    /// marked entry in four (then none until the next removal).
    /// (Ids never reach it: one add per nanosecond would take 292 years.)
    @usableFromInline static var removedBit: UInt64 { 1 << 63 }

    @usableFromInline
    struct Table {
        /// The listeners in add order, removed ones (marked) included.
        @usableFromInline var entries: UnsafeMutablePointer<Entry>?
        @usableFromInline var count = 0
        var capacity = 0
        /// How many of `entries` are marked removed.
        @usableFromInline var removed = 0
        var nextID: UInt64 = 1
        @usableFromInline var emitting = false
        /// The id of the listener the emit is running, 0 when none.
        @usableFromInline var running: UInt64 = 0
        /// Set by `releaseListeners`: the store is going, so an add (from a
        /// listener's release, say) is refused rather than outliving it.
        var closed = false
    }

    /// The block the three parts live in, at fixed offsets: one pointer
    /// for a store's callback to keep, not three.
    @usableFromInline let block: UnsafeMutableRawPointer

    @inlinable var flags: UnsafeMutablePointer<Flags> { block.assumingMemoryBound(to: Flags.self) }
    @inlinable var table: UnsafeMutablePointer<Table> {
        (block + Self.tableOffset).assumingMemoryBound(to: Table.self)
    }
    @inlinable var busy: UnsafeMutablePointer<Atomic<Bool>> {
        (block + Self.busyOffset).assumingMemoryBound(to: Atomic<Bool>.self)
    }

    @inlinable static var tableOffset: Int { roundUp(MemoryLayout<Flags>.size, MemoryLayout<Table>.alignment) }
    @inlinable static var busyOffset: Int {
        roundUp(tableOffset + MemoryLayout<Table>.size, MemoryLayout<Atomic<Bool>>.alignment)
    }

    /// A store core with no listeners, or nil when memory runs out.
    @_spi(Engine) public init?() {
        guard let block = allocateBytes(Self.busyOffset + MemoryLayout<Atomic<Bool>>.size) else { return nil }
        block.bindMemory(to: Flags.self, capacity: 1).initialize(to: Flags())
        (block + Self.tableOffset).bindMemory(to: Table.self, capacity: 1).initialize(to: Table())
        (block + Self.busyOffset).bindMemory(to: Atomic<Bool>.self, capacity: 1).initialize(to: Atomic(false))
        self.block = block
    }

    /// Releases the remaining listeners, in the order they were added.
    deinit {
        releaseListeners()
        busy.deinitialize(count: 1)
        table.deinitialize(count: 1)
        flags.deinitialize(count: 1)
        freeBytes(block)
    }

    /// Releases every listener, in the order they were added, leaving none,
    /// and refuses later adds. Hosts call it when the store goes away,
    /// before releasing the state.
    @_spi(Engine) public func releaseListeners() {
        lock()
        table.pointee.closed = true
        let entries = table.pointee.entries
        let count = table.pointee.count
        table.pointee.entries = nil
        table.pointee.count = 0
        table.pointee.capacity = 0
        table.pointee.removed = 0
        unlock()
        guard let entries else { return }
        for i in 0..<count {
            (entries + i).move().listener?.release()
        }
        freeBytes(entries)
    }

    @inlinable @inline(__always)
    func lock() {
        if !busy.pointee.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged {
            lockSlow()
        }
    }

    @usableFromInline
    func lockSlow() {
        var spins = 0
        while !busy.pointee.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged {
            spins += 1
            // The holder may have been preempted: let it run.
            if spins > 64 { yieldThread() }
        }
    }

    @inlinable @inline(__always)
    func unlock() { busy.pointee.store(false, ordering: .releasing) }

    // MARK: - Handling a dispatch

    /// What the store's registered callback does with each payload
    /// (Facebook's `__invokeOnDispatch`): forget the last change, reduce,
    /// keep `next` unless it is the same or an equal state, then, when the
    /// store changed, run its listeners. Called on the dispatching thread
    /// by the store's own callback of `engine`, into which it is inlined
    /// with the emit: two calls and their frames fewer per dispatch, the
    /// larger share of a store's cost over a plain callback.
    @inlinable @inline(__always)
    @_spi(Engine) public func handle<Callback, Reducer: StoreReducer>(
        _ payload: Reducer.Payload, _ reducer: Reducer, on engine: borrowing DispatchCore<Callback>
    ) -> StoreFailure<Reducer.Failure, Listener.Failure>? {
        let flags = self.flags
        flags.pointee.changed = false
        let current = reducer.loadState()
        flags.pointee.reducing = true
        let result = reducer.reduce(current, payload)
        flags.pointee.reducing = false
        let next: Reducer.State
        switch result {
        case .failure(let failure):
            flags.pointee.changed = false
            return .reduce(failure)
        case .success(let state):
            next = state
        }
        let same = reducer.isSame(current, next)
        // Nothing changed and nothing to release: whether the dispatch is
        // aborting does not matter (the common no-change path stops here).
        if same && !flags.pointee.changed { return nil }
        if engine.isAbortingInCallback {
            // Something failed earlier in this dispatch (maybe in a wait the
            // reduce ignored): keep the old state, tell nobody.
            flags.pointee.changed = false
            if !same { reducer.release(next) }
            return nil
        }
        if !same {
            if reducer.areEqual(current, next) {
                reducer.release(next)
            } else if engine.isAbortingInCallback {
                // equal's own wait met a failure: aborting from now on too.
                flags.pointee.changed = false
                reducer.release(next)
                return nil
            } else {
                reducer.storeState(next)
                flags.pointee.changed = true
                reducer.release(current)
            }
        }
        guard flags.pointee.changed else { return nil }
        if let failure = emit(on: engine) { return .listener(failure) }
        return nil
    }

    /// Facebook's `hasChanged()`: what the store's most recent handling did.
    ///
    /// - Throws: `notDispatching` unless this thread runs a dispatch of `engine`.
    @_spi(Engine) public func hasChanged<Callback>(
        on engine: borrowing DispatchCore<Callback>
    ) throws(FluxError) -> Bool {
        guard engine.isDispatchingOnCurrentThread else {
            throw FluxError(.notDispatching, "has_changed must be invoked while dispatching, on the dispatching thread")
        }
        return flags.pointee.changed
    }

    /// Facebook's `__emitChange()`: marks the store changed, so its listeners
    /// run once its handling returns.
    ///
    /// - Throws: `notDispatching` unless this store's reduce is running on
    ///   this thread (anything it calls counts; its listeners do not).
    @_spi(Engine) public func emitChange<Callback>(on engine: borrowing DispatchCore<Callback>) throws(FluxError) {
        guard engine.isDispatchingOnCurrentThread, flags.pointee.reducing else {
            throw FluxError(.notDispatching, "emit_change must be invoked while the store handles a payload")
        }
        flags.pointee.changed = true
    }

    // MARK: - Listeners

    /// Adds a listener; returns its id (ids count up from 1 and are never
    /// reused). An emit already running does not call it.
    ///
    /// - Throws: `noMemory`, or `invalidArgument` once the store is going
    ///   (`releaseListeners`); either way `listener.release()` has run.
    @_spi(Engine) public func addListener(_ listener: Listener) throws(FluxError) -> UInt64 {
        lock()
        let table = self.table
        if table.pointee.closed {
            unlock()
            listener.release()
            throw FluxError(.invalidArgument, "the store is being destroyed")
        }
        // Full: make room by dropping removed entries before growing.
        if table.pointee.count == table.pointee.capacity && table.pointee.removed > 0 && !table.pointee.emitting {
            compact()
        }
        if table.pointee.count == table.pointee.capacity {
            let capacity = table.pointee.capacity
            let bigger = grownCapacity(capacity)
            guard let entries = allocateElements(bigger, of: Entry.self) else {
                unlock()
                listener.release()
                throw .outOfMemory
            }
            if let old = table.pointee.entries {
                entries.moveInitialize(from: old, count: table.pointee.count)
                freeBytes(old)
            }
            table.pointee.entries = entries
            table.pointee.capacity = bigger
        }
        guard let entries = table.pointee.entries else {  // capacity > 0 here: not reached
            unlock()
            listener.release()
            throw .outOfMemory
        }
        let id = table.pointee.nextID
        table.pointee.nextID += 1
        (entries + table.pointee.count).initialize(to: Entry(id: id, listener: listener))
        table.pointee.count += 1
        unlock()
        return id
    }

    /// Whether the store's listeners are being run (by the dispatching
    /// thread); any thread may ask.
    @_spi(Engine) public var isEmitting: Bool {
        lock()
        defer { unlock() }
        return table.pointee.emitting
    }

    /// Whether `releaseListeners` has run: the store is going. Any thread
    /// may ask (a host's release functions, say, which run after it).
    @_spi(Engine) public var isReleased: Bool {
        lock()
        defer { unlock() }
        return table.pointee.closed
    }

    /// How many listeners the store has (removed ones not counted).
    var listenerCount: Int {
        lock()
        defer { unlock() }
        return table.pointee.count - table.pointee.removed
    }

    /// Removes a listener: releases it now, or, when it is running, right
    /// after it returns (the emit that runs it does that).
    ///
    /// - Throws: `unknownToken` when `id` is 0, was never issued, or was removed.
    @_spi(Engine) public func removeListener(_ id: UInt64) throws(FluxError) {
        lock()
        let table = self.table
        guard id != 0, id < table.pointee.nextID, let i = index(of: id), let entries = table.pointee.entries else {
            let next = table.pointee.nextID
            unlock()
            throw FluxError(
                .unknownToken,
                template: id == 0
                    ? "listener 0 is never a valid listener"
                    : id >= next
                        ? "listener \u{1} was never added to this store" : "listener \u{1} was already removed",
                number: id)
        }
        // Marked, not moved (see removedBit); a running listener is
        // released by the emit running it, once it returns.
        entries[i].id |= Self.removedBit
        table.pointee.removed += 1
        let taken = entries[i].listener.take()
        let released = table.pointee.running == id ? nil : taken
        if !table.pointee.emitting && table.pointee.removed * 4 > table.pointee.count { compact() }
        unlock()
        released?.release()
    }

    /// The index of listener `id`'s live entry, nil when it has none (never
    /// added, or removed). Under the lock.
    private func index(of id: UInt64) -> Int? {
        guard let entries = table.pointee.entries else { return nil }
        // The first entry whose id, unmarked, is not below `id`.
        var low = 0
        var high = table.pointee.count
        while low < high {
            let middle = low + (high - low) / 2
            if entries[middle].id & ~Self.removedBit < id { low = middle + 1 } else { high = middle }
        }
        return low < table.pointee.count && entries[low].id == id ? low : nil
    }

    /// Runs the listeners present now, in the order they were added,
    /// skipping any removed meanwhile; stops at the first that fails, or
    /// once the dispatch is aborting (a listener's wait met a failure it
    /// did not report; or, before the first, equal's or a release's did).
    /// Inlined into each host's store callback, so the listener calls are
    /// direct.
    @inlinable @inline(__always)
    func emit<Callback>(on engine: borrowing DispatchCore<Callback>) -> Listener.Failure? {
        lock()
        let table = self.table
        table.pointee.emitting = true
        let count = table.pointee.count
        var failure: Listener.Failure?
        var i = 0
        while i < count {
            // Re-read: an add during the emit may have moved the entries.
            guard let entries = table.pointee.entries else { break }
            let id = entries[i].id
            // The emit's own reference, in one variable and no other copy:
            // once the listener is removed it may be the last, and dropping
            // it runs what the listener captured (deinits that may call this
            // store), so it is dropped only with the lock released.
            var listener = id < Self.removedBit ? entries[i].listener : nil
            if listener != nil {
                // Checked before each listener, not after: the dispatch may
                // be aborting before the first (a wait in equal, or in the
                // release of the replaced state, met a failure), or since
                // the last (a listener's wait met one it did not report).
                if engine.isAbortingInCallback { break }
                table.pointee.running = id
                unlock()
                failure = listener.unsafelyUnwrapped.invoke()
                lock()
                table.pointee.running = 0
                if let entries = table.pointee.entries, entries[i].id >= Self.removedBit {
                    // Removed while it ran: its release was left to us.
                    unlock()
                    listener.unsafelyUnwrapped.release()
                    listener = nil
                    lock()
                }
                // Not removed, the table still holds it: going under the
                // lock (at the end of this iteration) does not free it.
                if failure != nil { break }
            }
            i += 1
        }
        table.pointee.emitting = false
        // Whatever was removed goes now, so the next emits skip nothing.
        if table.pointee.removed > 0 { compact() }
        unlock()
        return failure
    }

    /// Drops the removed entries (their listeners already released),
    /// keeping the others in order. Under the lock, with no emit running.
    @usableFromInline
    func compact() {
        guard let entries = table.pointee.entries else { return }
        var kept = 0
        for i in 0..<table.pointee.count {
            if entries[i].id >= Self.removedBit {
                (entries + i).deinitialize(count: 1)
            } else {
                if kept != i { (entries + kept).moveInitialize(from: entries + i, count: 1) }
                kept += 1
            }
        }
        table.pointee.count = kept
        table.pointee.removed = 0
    }
}
