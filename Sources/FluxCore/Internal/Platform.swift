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

/// A non-zero number unique to the calling thread while it lives.
@inlinable
internal func currentThreadID() -> UInt {
    #if canImport(Darwin)
    UInt(bitPattern: pthread_self())
    #else
    UInt(pthread_self())
    #endif
}

/// A pthread mutex and condition variable at fixed heap addresses (they must
/// never move, so they cannot live inline in a Swift value).
@usableFromInline
internal final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    @usableFromInline func lock() { pthread_mutex_lock(mutex) }
    @usableFromInline func unlock() { pthread_mutex_unlock(mutex) }
    /// Atomically unlocks, sleeps until `broadcast`, and locks again.
    @usableFromInline func wait() { pthread_cond_wait(condition, mutex) }
    @usableFromInline func broadcast() { pthread_cond_broadcast(condition) }
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
