#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
@_spi(Engine) import FluxCore
import Synchronization

// fork(): every live C dispatcher is on one list, and pthread_atfork handlers
// hold each one's lock across fork() (so the child gets consistent tables and
// free locks) and, in the child, mark dispatches that another thread of the
// parent was running: they can never end there, and a dispatch in the child
// fails at once (FLUX_ERR_ALREADY_DISPATCHING) instead of waiting forever.
// The engine's record of who waits for whom (DispatchWaits) is held across
// fork() too, and emptied in the child, by FluxCore's ForkGuard, which does
// the same for Swift dispatchers.
// Only create and destroy touch the list; the hot paths never do.

/// The list: a mutex and the head, in one malloc'd block made (and the fork
/// handlers installed) by the first flux_dispatcher_create(). Nil while that
/// allocation fails: fork is then left unguarded, as it is when
/// pthread_atfork fails.
// A bare pthread mutex: the fork handlers lock it in one function and unlock
// it in another, which Synchronization.Mutex cannot do, and it needs no
// condition (the engine's ConditionLock).
// @unchecked: the pointers are fixed; what they point at is guarded by the mutex.
private struct ForkRegistry: @unchecked Sendable {
    let mutex: UnsafeMutablePointer<pthread_mutex_t>
    let head: UnsafeMutablePointer<UnsafeMutablePointer<CDispatcher>?>

    static var headOffset: Int {
        roundUp(MemoryLayout<pthread_mutex_t>.size, MemoryLayout<UnsafeMutableRawPointer>.alignment)
    }
    static var size: Int { headOffset + MemoryLayout<UnsafeMutableRawPointer>.size }

    init(block: UnsafeMutableRawPointer) {
        mutex = block.assumingMemoryBound(to: pthread_mutex_t.self)
        head = (block + Self.headOffset).assumingMemoryBound(to: UnsafeMutablePointer<CDispatcher>?.self)
    }
}

/// The registry's block, 0 until made: an atomic, not a lazy global, for the
/// reasons threadKey gives (two threads' first flux_dispatcher_create() at
/// once was a ThreadSanitizer report).
private let forkRegistryBlock = Atomic<UInt>(0)

private var forkRegistry: ForkRegistry? {
    if let block = UnsafeMutableRawPointer(bitPattern: forkRegistryBlock.load(ordering: .acquiring)) {
        return ForkRegistry(block: block)
    }
    guard let block = malloc(ForkRegistry.size) else { return nil }
    block.bindMemory(to: pthread_mutex_t.self, capacity: 1)
    (block + ForkRegistry.headOffset).bindMemory(to: UnsafeMutablePointer<CDispatcher>?.self, capacity: 1)
        .initialize(to: nil)
    let registry = ForkRegistry(block: block)
    pthread_mutex_init(registry.mutex, nil)
    let (won, existing) = forkRegistryBlock.compareExchange(
        expected: 0, desired: UInt(bitPattern: block), ordering: .acquiringAndReleasing)
    guard won else {
        // Another thread made it first: use that one.
        pthread_mutex_destroy(registry.mutex)
        free(block)
        return UnsafeMutableRawPointer(bitPattern: existing).map(ForkRegistry.init(block:))
    }
    // Installed once, by the thread whose block was kept; the handlers find
    // the registry through forkRegistryBlock. FluxCore's first, so that its
    // prepare (Swift dispatchers' locks, then DispatchWaits') runs after
    // this one's: DispatchWaits is taken after every engine's lock.
    ForkGuard.install()
    _ = pthread_atfork(forkPrepare, forkParent, forkChild)
    return registry
}

func registerForFork(_ dispatcher: UnsafeMutablePointer<CDispatcher>) {
    guard let registry = forkRegistry else { return }
    pthread_mutex_lock(registry.mutex)
    let first = registry.head.pointee
    OpaquePointer(dispatcher).forkLinks.pointee = ForkLinks(previous: nil, next: first)
    if let first { OpaquePointer(first).forkLinks.pointee.previous = dispatcher }
    registry.head.pointee = dispatcher
    pthread_mutex_unlock(registry.mutex)
}

func unregisterForFork(_ dispatcher: UnsafeMutablePointer<CDispatcher>) {
    guard let registry = forkRegistry else { return }
    pthread_mutex_lock(registry.mutex)
    let mine = OpaquePointer(dispatcher).forkLinks.pointee
    if let previous = mine.previous {
        OpaquePointer(previous).forkLinks.pointee.next = mine.next
    } else if registry.head.pointee == dispatcher {
        registry.head.pointee = mine.next
    }
    if let next = mine.next { OpaquePointer(next).forkLinks.pointee.previous = mine.previous }
    OpaquePointer(dispatcher).forkLinks.pointee = ForkLinks()
    pthread_mutex_unlock(registry.mutex)
}

private func forEachDispatcher(_ body: (UnsafeMutablePointer<CDispatcher>) -> Void) {
    guard let registry = forkRegistry else { return }
    var current = registry.head.pointee
    while let dispatcher = current {
        body(dispatcher)
        current = OpaquePointer(dispatcher).forkLinks.pointee.next
    }
}

private func forkPrepare() {
    guard let registry = forkRegistry else { return }
    pthread_mutex_lock(registry.mutex)
    forEachDispatcher { $0.pointee.prepareFork() }
    // DispatchWaits: ForkGuard's handlers, after Swift dispatchers' locks.
}

private func forkParent() {
    guard let registry = forkRegistry else { return }
    forEachDispatcher { $0.pointee.parentAfterFork() }
    pthread_mutex_unlock(registry.mutex)
}

private func forkChild() {
    guard let registry = forkRegistry else { return }
    forEachDispatcher { $0.pointee.childAfterFork() }
    pthread_mutex_unlock(registry.mutex)
}
