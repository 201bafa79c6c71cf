// The few platform services the engine needs: a mutex with a condition
// variable (Swift's standard library has no condition variable), the calling
// thread's identity, and a fallible allocator.
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
import Synchronization

/// A non-zero number unique to the calling thread while it lives. Public
/// only for the Flux module's inlinable code (which cannot use an SPI); not
/// part of the API.
@_documentation(visibility: internal) @inlinable
public func currentThreadID() -> UInt {
    #if canImport(Darwin)
        UInt(bitPattern: pthread_self())
    #else
        UInt(pthread_self())
    #endif
}

/// Whatever runs user code while another thread may be waiting for it to
/// finish -- each `Dispatcher`, the inits `registerStore` runs, and in Flux
/// each State type's store dispatch lock -- with a test of whether the
/// calling thread is running it now. Flux asks `containsCurrentThread()`
/// before a send waits for a delivery, or a store's dispatch for a dispatch,
/// on another thread: that thread may be waiting for this one's dispatch, so
/// the send (or dispatch) is handed over instead. A dispatch pays nothing for
/// it (each engine already records its dispatching thread); adding, removing
/// and asking take a lock. The tests read atomics, or take a lock that
/// guards no user code: no user code runs under the lock.
@_spi(Engine) public final class DispatchingThreads: @unchecked Sendable {
    // @unchecked: `entries` is only touched under `lock`.
    public static let shared = DispatchingThreads()
    private let lock: ConditionLock
    private struct Entry {
        let isRunningHere: @Sendable () -> Bool
        let fork: (@Sendable (ForkPhase) -> Void)?
    }
    private var entries: [ObjectIdentifier: Entry] = [:]

    private init() {
        // Swift's own allocations trap when memory runs out; so does this.
        guard let lock = ConditionLock() else { fatalError("DispatchingThreads: out of memory") }
        self.lock = lock
    }

    /// Adds `owner`'s test, and its engine's `fork` hook when it has one
    /// (see `ForkGuard`); `remove` it before `owner` goes.
    public func add(
        _ owner: AnyObject, _ isRunningHere: @escaping @Sendable () -> Bool,
        fork: (@Sendable (ForkPhase) -> Void)? = nil
    ) {
        if fork != nil { ForkGuard.install() }
        lock.lock()
        entries[ObjectIdentifier(owner)] = Entry(isRunningHere: isRunningHere, fork: fork)
        lock.unlock()
    }

    public func remove(_ owner: AnyObject) {
        lock.lock()
        let removed = entries.removeValue(forKey: ObjectIdentifier(owner))
        lock.unlock()
        _ = removed  // released outside the lock
    }

    /// Whether the object of identity `owner` is in. For tests.
    func contains(_ owner: ObjectIdentifier) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return entries[owner] != nil
    }

    /// True when the calling thread is running a dispatch of one of them.
    public func containsCurrentThread() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return entries.values.contains { $0.isRunningHere() }
    }

    // fork(), from `ForkGuard`'s handlers: the lock is held across it, so
    // no entry (nor the engine it names) goes meanwhile.
    fileprivate func prepareFork() {
        lock.lock()
        for entry in entries.values { entry.fork?(.prepare) }
    }

    fileprivate func afterFork(_ phase: ForkPhase) {
        for entry in entries.values { entry.fork?(phase) }
        lock.unlock()
    }
}

/// Which of pthread_atfork's handlers an engine's fork hook is called as.
@_spi(Engine) public enum ForkPhase: Sendable { case prepare, parent, child }

/// fork() for Swift `Dispatcher`s, as FluxC's list does it for C ones: each
/// engine's lock is held across fork() (the child gets consistent tables and
/// free locks) and, in the child, a dispatch another thread of the parent was
/// running is marked orphaned: it can never end there, so calls that would
/// wait for it are refused instead of hanging (`DispatchCore.childAfterFork`).
/// `DispatchWaits` is held last, after every engine's lock (a contended
/// dispatch takes it under its engine's). Flux's hooks hold its global tables
/// and each State type's store dispatch lock likewise; a lock a hook takes
/// must never be held while its holder takes `DispatchingThreads`' lock.
@_spi(Engine) public enum ForkGuard {
    /// Installs the handlers, once. FluxC calls it before installing its
    /// own: prepare handlers run in reverse order of installation, so its
    /// engines' locks are taken before `DispatchWaits`, which these take last.
    public static func install() {
        while true {
            let (won, state) = forkGuardState.compareExchange(expected: 0, desired: 1, ordering: .acquiring)
            if won {
                // DispatchWaits.shared is a lazy global, made under
                // swift_once, whose synchronization ThreadSanitizer cannot
                // see: made lazily by the first contended dispatch, another
                // thread's contended dispatch read it as a race (two threads'
                // first contended dispatches at once, Tests/c/test-three.c's
                // ring). Made here, before the release below, every thread
                // that finds the guard installed (every dispatcher's creator,
                // through FluxC's registry) is ordered after it.
                _ = DispatchWaits.shared
                _ = pthread_atfork(forkGuardPrepare, forkGuardParent, forkGuardChild)
                forkGuardState.store(2, ordering: .releasing)
                return
            }
            // Installed, or about to be by another thread: wait for it, so
            // that nothing installed after returning comes before it.
            if state == 2 { return }
            yieldThread()
        }
    }
}

/// 0: not installed; 1: being installed; 2: installed. An atomic, not a
/// lazy global (see `threadKey`).
private let forkGuardState = Atomic<Int>(0)

private func forkGuardPrepare() {
    DispatchingThreads.shared.prepareFork()
    StoreRegistry.prepareForkOfAll()  // taken under a registry's lock: after them
    DispatchWaits.shared.prepareFork()
}

private func forkGuardParent() {
    DispatchWaits.shared.parentAfterFork()
    StoreRegistry.parentAfterForkOfAll()
    DispatchingThreads.shared.afterFork(.parent)
}

private func forkGuardChild() {
    DispatchWaits.shared.childAfterFork()
    StoreRegistry.childAfterForkOfAll()
    DispatchingThreads.shared.afterFork(.child)
}

/// Which threads sleep in an engine's `beginSlow`, or in `registerStore` for
/// a class another thread's init is making, and for whom: each waiting
/// thread, the engine it waits for (for a class, that creation's identity)
/// and the thread it waits for, that engine's dispatching thread or the class's
/// creator. A thread inside a callback of one dispatcher that dispatches
/// another would otherwise sleep forever when the other's dispatching thread
/// is itself waiting, directly or through others, for the first: two
/// dispatchers dispatching each other from two threads, or an init that
/// dispatches while the dispatching thread waits for that init's class. The
/// thread whose wait would close such a cycle is refused instead of
/// sleeping (a dispatch fails, `registerStore` traps). Only the contended
/// start and the end of a dispatch that has waiters come here, and a
/// `registerStore` that waits.
@_spi(Engine) public final class DispatchWaits: Sendable {
    public static let shared = DispatchWaits()

    struct Wait {
        let thread: UInt
        let engine: UInt
        let holder: UInt
    }

    /// Malloc'd, as the engine's own lists: running out of memory is not a
    /// trap here but a wait refused (see `wait`).
    private let waits = Guarded(MallocList<Wait>())

    /// What `wait` found.
    enum Outcome {
        case recorded
        /// Waiting would close a cycle of this many threads.
        case deadlock(Int)
        case noMemory
    }

    /// Records that `thread` is about to sleep until `engine`, dispatched
    /// by `holder`, is free, and returns `.recorded`; or, when `holder` is
    /// waiting, through others, for `thread` (so none of them would ever
    /// wake), records nothing and returns how many threads that cycle has.
    /// With no memory to record the wait, returns `.noMemory`: the thread
    /// must not sleep unrecorded, since a cycle closed through it later
    /// would not be seen and every thread in it would sleep for good.
    func wait(_ thread: UInt, for engine: UInt, heldBy holder: UInt) -> Outcome {
        waits.withLock { waits in
            var length = 1
            var next = holder
            while next != thread {
                guard let edge = waits.first(where: { $0.thread == next }), length <= waits.count else {
                    guard waits.reserve(waits.count + 1) else { return .noMemory }
                    waits.append(Wait(thread: thread, engine: engine, holder: holder))
                    return .recorded
                }
                next = edge.holder
                length += 1
            }
            return .deadlock(length)
        }
    }

    /// Whether `thread` is waiting. For tests.
    func isWaiting(_ thread: UInt) -> Bool {
        waits.withLock { $0.first { $0.thread == thread } != nil }
    }

    /// `thread` no longer waits.
    func stopWaiting(_ thread: UInt) {
        waits.withLock { $0.removeAll { $0.thread == thread } }
    }

    /// `engine`'s dispatch is over: its waiters, woken, no longer wait for
    /// its holder (each records itself again if it must sleep again).
    func ended(_ engine: UInt) {
        waits.withLock { $0.removeAll { $0.engine == engine } }
    }

    // fork(): `ForkGuard`'s handlers call these, after every engine's
    // prepareFork, Swift's and C's (a contended dispatch takes this lock
    // under its engine's), so the child gets the list consistent and the
    // lock free.

    /// pthread_atfork's prepare.
    public func prepareFork() { waits.lockAcrossFork() }

    /// pthread_atfork's parent handler.
    public func parentAfterFork() { waits.unlockAfterFork() }

    /// pthread_atfork's child handler. Every wait recorded was another
    /// thread's (the forking one was not asleep): none exists here, and a
    /// thread of the child that got one's pthread_t would be taken for it,
    /// refusing its waits as deadlocks.
    public func childAfterFork() { waits.unlockAfterFork { $0.drain { _ in } } }
}

/// Lets another thread run: for a wait on a state that lasts a few instructions
/// (a dispatch about to record its owner, a store's spin lock held by a
/// preempted thread).
func yieldThread() { sched_yield() }

/// A pthread mutex and condition variable at fixed heap addresses (they must
/// never move, so they cannot live inline in a Swift value), in one malloc'd
/// block: creating one fails with nil, instead of trapping, when memory runs
/// out. The engine frees it with `destroy()`.
@usableFromInline
internal struct ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init?() {
        let offset = roundUp(MemoryLayout<pthread_mutex_t>.size, MemoryLayout<pthread_cond_t>.alignment)
        guard max(MemoryLayout<pthread_mutex_t>.alignment, MemoryLayout<pthread_cond_t>.alignment) <= 16,
            let block = malloc(offset + MemoryLayout<pthread_cond_t>.size)
        else { return nil }
        mutex = block.bindMemory(to: pthread_mutex_t.self, capacity: 1)
        condition = (block + offset).bindMemory(to: pthread_cond_t.self, capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    func destroy() {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        free(UnsafeMutableRawPointer(mutex))
    }

    @usableFromInline func lock() { pthread_mutex_lock(mutex) }
    @usableFromInline func unlock() { pthread_mutex_unlock(mutex) }
    /// Atomically unlocks, sleeps until `broadcast`, and locks again. Not
    /// a cancellation point: a thread cancelled here would unwind holding
    /// the mutex (pthread_cond_wait takes it back first), which no Swift
    /// frame above lets go of, and the engine would hang for good. A
    /// cancel waits for the next cancellation point after the call.
    @usableFromInline func wait() {
        let state = disableCancellation()
        pthread_cond_wait(condition, mutex)
        restoreCancellation(state)
    }
    @usableFromInline func broadcast() { pthread_cond_broadcast(condition) }
    /// In a child process after fork(), alone: forgets waiters that were
    /// threads of the parent.
    func resetCondition() { pthread_cond_init(condition, nil) }
}

/// A value behind a pthread mutex: what FluxCore's classes share between
/// threads. Not Synchronization.Mutex: on Linux ThreadSanitizer does not see
/// its futex, so `make check-thread` would be blind to what it guards.
final class Guarded<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var value: Value

    init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// For fork(): locked by pthread_atfork's prepare, unlocked by its parent
    /// and child handlers -- in the child after `body`, alone there.
    func lockAcrossFork() { pthread_mutex_lock(mutex) }

    func unlockAfterFork(_ body: (inout Value) -> Void = { _ in }) {
        body(&value)
        pthread_mutex_unlock(mutex)
    }

    /// Puts `newValue` in and hands back the value it replaces, for the
    /// caller to let go of with the lock released (its deinit may come back
    /// here).
    func exchange(_ newValue: Value) -> Value {
        withLock { current in
            defer { current = newValue }
            return current
        }
    }
}

/// `value` rounded up to a multiple of `alignment`: where a part of a block
/// laid out by hand starts (the engine's, the C handle's, a closure's).
@inlinable
@_spi(Engine) public func roundUp(_ value: Int, _ alignment: Int) -> Int {
    (value + alignment - 1) / alignment * alignment
}

/// `malloc` that reports failure instead of trapping, so running out of memory
/// reaches C callers as `FLUX_ERR_NO_MEMORY`.
@usableFromInline
internal func allocateBytes(_ count: Int) -> UnsafeMutableRawPointer? {
    malloc(count)
}

@usableFromInline
internal func freeBytes(_ pointer: UnsafeMutableRawPointer?) {
    free(pointer)
}

/// Room for `count` values of `Element`, malloc'd; nil when memory runs out
/// or the size overflows. Every growable buffer of FluxCore allocates here.
internal func allocateElements<Element>(
    _ count: Int, of _: Element.Type = Element.self
) -> UnsafeMutablePointer<Element>? {
    let (bytes, overflow) = max(count, 1).multipliedReportingOverflow(by: max(MemoryLayout<Element>.stride, 1))
    guard !overflow, MemoryLayout<Element>.alignment <= 16, let raw = allocateBytes(bytes) else { return nil }
    return raw.bindMemory(to: Element.self, capacity: count)
}

/// The capacity a full buffer grows to, for every growable buffer of
/// FluxCore: half again (amortized O(1) appends with less slack than
/// doubling: a registration costs under 48 bytes, see `make bench`), at
/// least `needed` and 4; saturating instead of trapping, since allocation
/// fails long before.
internal func grownCapacity(_ capacity: Int, needed: Int = 0) -> Int {
    max(capacity < Int.max / 2 ? capacity + capacity / 2 + 1 : Int.max, needed, 4)
}

// MARK: - Stack depth

/// The calling thread's stack pointer, near enough: the address of a local.
/// Stacks grow down on every platform Swift runs on. Taken unprotected: the
/// address is only compared, never written through, and a protected one
/// gives its function -- every link of a wait_for chain -- a stack-protector
/// canary to set and check.
@inlinable @inline(__always)
internal func currentStackAddress() -> UInt {
    var marker: UInt8 = 0
    return _withUnprotectedUnsafeMutablePointer(to: &marker) { UInt(bitPattern: $0) }
}

/// A pthread key made by the first thread that asks for it, kept in `cell`
/// (0: not made yet; otherwise the key + 1); nil when none can be made (the
/// process used up PTHREAD_KEYS_MAX), and the next call tries again.
///
/// Not a lazily initialized global: Swift runs those under swift_once, whose
/// synchronization ThreadSanitizer cannot see (two threads' first failing
/// calls were reported as a race on the key), and a pthread_key_create that
/// failed left key 0 there -- some other library's key, whose values a
/// caller would then have overwritten. An `Atomic` global with a constant
/// initializer is static data: nothing runs to make `cell`.
@_spi(Engine) public func threadKey(
    _ cell: borrowing Atomic<UInt>, destructor: ThreadKeyDestructor? = nil
) -> pthread_key_t? {
    let made = cell.load(ordering: .acquiring)
    if made != 0 { return numericCast(made - 1) }
    var key = pthread_key_t()
    guard pthread_key_create(&key, destructor) == 0 else { return nil }
    let (won, existing) = cell.compareExchange(
        expected: 0, desired: UInt(key) + 1, ordering: .acquiringAndReleasing)
    if won { return key }
    // Another thread made one first: use that one.
    pthread_key_delete(key)
    return numericCast(existing - 1)
}

/// What pthread_key_create calls with a thread's value as the thread exits.
#if canImport(Darwin)
    @_spi(Engine) public typealias ThreadKeyDestructor = @convention(c) (UnsafeMutableRawPointer) -> Void
#else
    @_spi(Engine) public typealias ThreadKeyDestructor = @convention(c) (UnsafeMutableRawPointer?) -> Void
#endif

/// Per-thread cache of `computeStackBounds()`: a block made on the thread's
/// first wait, freed as it exits. One block, not a key per value: each
/// lookup costs ~45 instructions, and every dispatch that waits makes one.
private let stackBoundsKey = Atomic<UInt>(0)
private let freeStackBounds: ThreadKeyDestructor = { freeBytes($0) }

/// How much stack must remain when a `waitFor` invokes one more callback:
/// room for that callback's own frames before it waits again (a Python
/// callback goes through ctypes, libffi and the interpreter: a few KiB),
/// and for reporting the error. A quarter of a small stack at most, so a
/// thread with a small stack can still wait a few links deep -- but never
/// less than `minimumStackMargin`.
private let stackMargin: UInt = 256 * 1024

/// What the refusal itself may need: the first error a process reports
/// instantiates Swift metadata, about 9 KiB deep on x86-64, so a quarter of
/// a 16 or 24 KiB stack overflowed before the error got out. A stack this
/// small or smaller cannot wait at all: every wait is refused.
private let minimumStackMargin: UInt = 16 * 1024

/// The margin for a stack of `size` bytes.
private func margin(forStackOf size: UInt) -> UInt {
    max(min(stackMargin, size / 4), minimumStackMargin)
}

#if canImport(Glibc)
    // GNU extensions the Glibc module hides (Swift does not import them without
    // _GNU_SOURCE); both take and return plain C integers and pointers.
    @_silgen_name("pthread_getattr_np")
    private func pthread_getattr_np(_ thread: pthread_t, _ attributes: UnsafeMutablePointer<pthread_attr_t>) -> Int32
    @_silgen_name("gettid")
    private func flux_gettid() -> pid_t
#endif

/// Whether the calling thread is the process's main thread (the one `main`
/// started on), which is not always the thread running the main queue's
/// work, nor is the main queue always current on it (inside
/// `someQueue.sync { }`). Public only for the Flux module's
/// `Executor.mainThread`. Asked of the system once per thread: the answer is
/// cached in a thread-specific value (1 main, 2 not; 0 not asked yet).
@_spi(Engine) public func isMainThread() -> Bool {
    let key = threadKey(mainThreadKey)
    if let key {
        let cached = UInt(bitPattern: pthread_getspecific(key))
        if cached != 0 { return cached == 1 }
    }
    #if canImport(Glibc)
        let isMain = getpid() == flux_gettid()
    #elseif canImport(Darwin)
        let isMain = pthread_main_np() != 0
    #else
        let isMain = false
    #endif
    if let key { pthread_setspecific(key, UnsafeRawPointer(bitPattern: isMain ? 1 : 2)) }
    return isMain
}

private let mainThreadKey = Atomic<UInt>(0)

/// This thread's stack as (low-water mark, bottom, top): below the mark,
/// `waitFor` refuses to go deeper. (0, 0, .max) when the bounds cannot be
/// found, which disables the check.
private func computeStackBounds() -> (limit: UInt, low: UInt, top: UInt) {
    #if canImport(Glibc)
        var attributes = pthread_attr_t()
        guard pthread_getattr_np(pthread_self(), &attributes) == 0 else { return (0, 0, .max) }
        defer { pthread_attr_destroy(&attributes) }
        var address: UnsafeMutableRawPointer?
        var size = 0
        var guardSize = 0
        guard pthread_attr_getstack(&attributes, &address, &size) == 0, let address, size > 0 else {
            return (0, 0, .max)
        }
        pthread_attr_getguardsize(&attributes, &guardSize)
        let low = UInt(bitPattern: address)
        let top = low &+ UInt(size)
        var reserve = margin(forStackOf: UInt(size)) &+ UInt(guardSize)
        // The main thread's stack grows on demand up to RLIMIT_STACK, and glibc
        // reports that extent (less a page) -- unless another mapping sits
        // closer (always so when the limit is infinite), in which case the
        // kernel keeps a guard gap (1 MiB by default) below the stack that the
        // stack can never grow into. Stay clear of it too.
        if isMainThread() {
            var limit = rlimit()
            if getrlimit(__rlimit_resource_t(RLIMIT_STACK.rawValue), &limit) == 0,
                limit.rlim_cur == rlim_t.max || UInt(size) &+ 64 * 1024 < UInt(limit.rlim_cur)
            {
                reserve &+= min(1 << 20, UInt(size) / 4)
            }
        }
        return (low &+ reserve, low, top)
    #elseif canImport(Darwin)
        let thread = pthread_self()
        let top = UInt(bitPattern: pthread_get_stackaddr_np(thread))
        let size = UInt(pthread_get_stacksize_np(thread))
        guard size > 0, top > size else { return (0, 0, .max) }
        return (top - size + min(margin(forStackOf: size), size), top - size, top)
    #else
        return (0, 0, .max)
    #endif
}

/// The calling thread's low-water mark, computed once per thread, when
/// `address` (the caller's stack pointer) lies on the thread's own stack
/// (0 -- no limit -- when the bounds cannot be found); nil on another stack
/// (say, a fiber's or a signal handler's alternate stack), where the bounds
/// say nothing.
@usableFromInline
internal func stackLimit(at address: UInt) -> UInt? {
    let (limit, low, top) = stackBounds()
    if limit == 0 { return 0 }
    // Below the stack's bottom (past its guard, where this thread's own
    // frames cannot be) or above its top: not on it. Not a margin below the
    // mark, as it was: a fiber's stack malloc'd on a thread is often mapped
    // right below the thread's, and its waits were refused as too deep.
    return address > top || address < low ? nil : limit
}

/// Whether `address` (the caller's stack pointer) lies on a thread stack so
/// small that the margin covers all of it (16 KiB or so, with its guard):
/// no wait may run a callback there (flux.h, "Depth"). False on another
/// stack, or when the bounds are unknown.
internal func stackCannotWait(at address: UInt) -> Bool {
    let (limit, low, top) = stackBounds()
    return limit != 0 && address >= low && address <= top && limit >= top
}

/// This thread's `computeStackBounds()`, cached.
private func stackBounds() -> (limit: UInt, low: UInt, top: UInt) {
    typealias Bounds = (limit: UInt, low: UInt, top: UInt)
    let key = threadKey(stackBoundsKey, destructor: freeStackBounds)
    if let key, let cached = pthread_getspecific(key) { return cached.load(as: Bounds.self) }
    // With no key or no memory to cache them in, they are computed every
    // time.
    let bounds = computeStackBounds()
    if let key, let block = allocateBytes(MemoryLayout<Bounds>.size) {
        block.initializeMemory(as: Bounds.self, to: bounds)
        if pthread_setspecific(key, block) != 0 { freeBytes(block) }
    }
    return bounds
}

/// Turns the calling thread's cancellation off; returns the state for
/// `restoreCancellation`.
func disableCancellation() -> Int32 {
    var state: Int32 = 0
    pthread_setcancelstate(Int32(PTHREAD_CANCEL_DISABLE), &state)
    return state
}

func restoreCancellation(_ state: Int32) { pthread_setcancelstate(state, nil) }

// MARK: - A list that reports running out of memory

/// A growable list in malloc'd storage: making room reports failure instead
/// of trapping (as Swift's Array does when memory runs out), so that the
/// engine's bookkeeping during a dispatch can fail with `noMemory`. Room is
/// made ahead (`reserve`), so that `append` itself cannot fail.
@usableFromInline
internal struct MallocList<Element> {
    private(set) var base: UnsafeMutablePointer<Element>?
    private(set) var count = 0
    private(set) var capacity = 0

    init() {}

    var isEmpty: Bool { count == 0 }

    /// Makes room for `needed` elements in all; false when memory runs out
    /// (the list is unchanged).
    mutating func reserve(_ needed: Int) -> Bool {
        if needed <= capacity { return true }
        let wanted = grownCapacity(capacity, needed: needed)
        guard let bigger = allocateElements(wanted, of: Element.self) else { return false }
        if let base {
            bigger.moveInitialize(from: base, count: count)
            freeBytes(base)
        }
        base = bigger
        capacity = wanted
        return true
    }

    /// Appends; there must be room (see `reserve`).
    mutating func append(_ element: consuming Element) {
        precondition(count < capacity, "MallocList.append without room")
        (base! + count).initialize(to: element)
        count += 1
    }

    func first(where match: (Element) -> Bool) -> Element? {
        guard let base else { return nil }
        for i in 0..<count where match(base[i]) { return base[i] }
        return nil
    }

    /// Removes the elements `match` picks, keeping the others in order;
    /// frees the storage once none is left.
    mutating func removeAll(where match: (Element) -> Bool) {
        guard let base else { return }
        var kept = 0
        for i in 0..<count {
            if match(base[i]) {
                (base + i).deinitialize(count: 1)
            } else {
                if kept != i { (base + kept).moveInitialize(from: base + i, count: 1) }
                kept += 1
            }
        }
        count = kept
        if kept == 0 { drain { _ in } }
    }

    func contains(where match: (Element) -> Bool) -> Bool {
        first(where: match) != nil
    }

    func forEach(_ body: (Element) -> Void) {
        guard let base else { return }
        for i in 0..<count { body(base[i]) }
    }

    /// Moves every element out, in order, into `body`, and frees the storage.
    mutating func drain(_ body: (consuming Element) -> Void) {
        if let base {
            for i in 0..<count { body((base + i).move()) }
            freeBytes(base)
        }
        base = nil
        count = 0
        capacity = 0
    }
}
