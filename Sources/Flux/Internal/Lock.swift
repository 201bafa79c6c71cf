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

    @inlinable
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A condition variable, for threads that wait for their turn on a
/// `PosixLock` (a thread waits for a sink's delivery to end).
@usableFromInline
final class PosixCondition: @unchecked Sendable {
    @usableFromInline let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
    }

    /// With `lock` held; returns with it held again.
    @usableFromInline func wait(_ lock: PosixLock) { pthread_cond_wait(condition, lock.mutex) }
    @usableFromInline func signal() { pthread_cond_signal(condition) }

    /// In a forked child: the threads that waited on it do not exist there,
    /// and a condition variable with waiters that never wake is not safe to use.
    func reset() { pthread_cond_init(condition, nil) }
}

/// How many deliveries, of any sink, the calling thread is inside. A thread
/// inside none may wait for a sink's turn (unless it is inside a dispatch,
/// see Sink); one inside a delivery must not, or two of them can wait for
/// each other. Its address also stands
/// for the thread while the thread lives.
@usableFromInline typealias ThreadRecord = UnsafeMutablePointer<Int>

@inlinable
func currentThreadRecord() -> ThreadRecord {
    if let record = pthread_getspecific(threadRecordKey) {
        return record.assumingMemoryBound(to: Int.self)
    }
    return newThreadRecord()
}

@usableFromInline
func newThreadRecord() -> ThreadRecord {
    let record = ThreadRecord.allocate(capacity: 1)
    record.initialize(to: 0)
    pthread_setspecific(threadRecordKey, record)
    return record
}

// The key's destructor frees a thread's record when the thread exits.
@usableFromInline
let threadRecordKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key) { record in record?.deallocate() }
    return key
}()
