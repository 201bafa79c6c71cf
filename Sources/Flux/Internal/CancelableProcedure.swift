import Synchronization

/// A function that stops running once canceled. Cancellation is a flag, not
/// the release of the function: a delivery on another thread may be reading
/// it, and the function goes when the last holder of the procedure does.
@usableFromInline
final class CancelableProcedure<Value>: @unchecked Sendable {
    @usableFromInline let canceled = Atomic<Bool>(false)
    @usableFromInline let function: (Value) -> Void

    @inlinable
    init(_ function: @escaping (Value) -> Void) {
        self.function = function
    }

    var isCanceled: Bool { canceled.load(ordering: .acquiring) }

    @inlinable
    func execute(with value: Value) {
        guard !canceled.load(ordering: .acquiring) else { return }
        function(value)
    }

    @inlinable
    func cancel() {
        canceled.store(true, ordering: .releasing)
    }
}
