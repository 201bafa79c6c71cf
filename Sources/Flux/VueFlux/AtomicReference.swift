/// A value behind a lock. `recursive: true` lets the thread that holds the
/// lock enter `synchronized` or `modify` again.
public final class AtomicReference<Value>: @unchecked Sendable {
    /// Reads or replaces the value under the lock.
    public var value: Value {
        get { synchronized { $0 } }
        set { modify { $0 = newValue } }
    }

    private var storage: Value
    private let lock: PosixLock

    public init(_ value: Value, recursive: Bool = false) {
        storage = value
        lock = PosixLock(recursive: recursive)
    }

    /// Calls `function` with the value, holding the lock.
    @discardableResult
    public func synchronized<Result>(_ function: (Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try function(storage)
    }

    /// Lets `function` change the value in place, holding the lock.
    @discardableResult
    public func modify<Result>(_ function: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try function(&storage)
    }

    /// Stores `newValue` and returns the value it replaced, in one step.
    @discardableResult
    public func swap(_ newValue: Value) -> Value {
        modify { value in
            let oldValue = value
            value = newValue
            return oldValue
        }
    }
}
