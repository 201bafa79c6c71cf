// A pthread mutex at a fixed heap address. The store dispatcher and
// `AtomicReference(recursive: true)` need a recursive lock, which
// Synchronization.Mutex is not; pthread mutexes are also what
// ThreadSanitizer understands best.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// @usableFromInline and @inlinable here and in the other hot paths (send,
// dispatch): so that clients' release builds specialize the generic layer;
// unspecialized, a send spends most of its time looking up generic metadata.
@usableFromInline
final class PosixLock: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init(recursive: Bool = false) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        if recursive {
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE))
            pthread_mutex_init(mutex, &attributes)
            pthread_mutexattr_destroy(&attributes)
        } else {
            pthread_mutex_init(mutex, nil)
        }
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    @inlinable func lock() { pthread_mutex_lock(mutex) }
    @inlinable func unlock() { pthread_mutex_unlock(mutex) }
    @inlinable func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }

    @inlinable
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// The calling thread's record in this layer: how many deliveries, of any
/// sink, the thread is inside (a thread inside none may wait for a sink; one
/// inside a delivery must not, or two of them can wait for each other). Its
/// address stands for the thread while the thread lives (never 0).
@usableFromInline
func currentThreadRecord() -> UnsafeMutablePointer<Int> {
    if let record = pthread_getspecific(threadRecordKey) {
        return record.assumingMemoryBound(to: Int.self)
    }
    // The first use on this thread: freed when the thread exits.
    guard let raw = calloc(1, MemoryLayout<Int>.size) else { fatalError("out of memory") }
    pthread_setspecific(threadRecordKey, raw)
    return raw.assumingMemoryBound(to: Int.self)
}

private let threadRecordKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key) { record in free(record) }
    return key
}()
