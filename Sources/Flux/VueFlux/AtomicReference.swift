/// A value behind a lock. `recursive: true` lets the thread that holds the
/// lock enter `synchronized`, `modify`, `swap` or `value` again from inside
/// `synchronized`; never from inside `modify`, which lends the value out in
/// place: any access to this reference there traps (Swift's exclusivity
/// rule: the nested access would alias the `inout` value). Its lock runs
/// the caller's code, so fork() does not wait for it: a child forked while
/// another thread held it must not use it.
public final class AtomicReference<Value>: @unchecked Sendable {
    /// Reads or replaces the value under the lock. The value replaced is
    /// let go of after the lock is released: its deinit may use this reference.
    public var value: Value {
        get { synchronized { $0 } }
        set { _ = swap(newValue) }
    }

    private var storage: Value
    private let lock: PosixLock
    /// True while `modify`'s function runs (under the lock: only the thread
    /// holding it reads it, so it is true there only for a re-entry).
    private var modifying = false

    /// Without `recursive`, entering `synchronized` or `modify` again from
    /// inside one (or reading `value` there) deadlocks, as in VueFlux. With
    /// it, see above: from inside `modify` it traps.
    public init(_ value: Value, recursive: Bool = false) {
        storage = value
        lock = PosixLock(recursive: recursive)
    }

    /// Calls `function` with the value, holding the lock.
    @discardableResult
    public func synchronized<Result>(_ function: (Value) throws -> Result) rethrows -> Result {
        lockOutsideModify()
        defer { lock.unlock() }
        return try function(storage)
    }

    /// Lets `function` change the value in place, holding the lock. Using
    /// this reference from inside `function` traps (see above).
    @discardableResult
    public func modify<Result>(_ function: (inout Value) throws -> Result) rethrows -> Result {
        lockOutsideModify()
        defer { lock.unlock() }
        modifying = true
        defer { modifying = false }
        return try function(&storage)
    }

    /// Takes the lock. A re-entry from inside `modify` traps here, by name,
    /// rather than in the runtime's exclusivity check, which names no culprit.
    private func lockOutsideModify() {
        lock.lock()
        precondition(!modifying, "AtomicReference: used from inside its own modify")
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
