import Dispatch
import Synchronization

/// Where a store commits and where `observe(on:)` and `bind` deliver.
///
/// A custom `Context` must accept calls from any thread: stores and sinks
/// call it from whichever thread dispatches or sends.
public struct Executor: @unchecked Sendable {
    public typealias Context = (@escaping () -> Void) -> Void

    /// Runs the function inline, before `execute` returns.
    public static var immediate: Executor {
        .init(runsInline: true) { function in function() }
    }

    /// Runs the function inline when called on the main thread (also inside
    /// another queue's `sync`) or inside the main queue's work, with nothing
    /// from this value still pending there; otherwise on `DispatchQueue.main`.
    /// So calls on one value run in call order. Each access makes a new value.
    public static var mainThread: Executor {
        let inner = MainThreadExecutor()
        return .init(inner.execute)
    }

    /// Always runs the function with `dispatchQueue.async`.
    public static func queue(_ dispatchQueue: DispatchQueue) -> Executor {
        .init { function in
            // DispatchQueue.async wants a @Sendable closure; the executor's
            // contract is that the function may run on another thread.
            nonisolated(unsafe) let function = function
            dispatchQueue.async { function() }
        }
    }

    private let context: Context
    /// True for `.immediate`: lets a store commit without wrapping the
    /// commit in a closure for `execute`.
    @usableFromInline let runsInline: Bool

    /// An executor that hands each function to `context`, which decides
    /// where and when it runs (and is called from any thread, see above).
    public init(_ context: @escaping Context) {
        self.context = context
        runsInline = false
    }

    private init(runsInline: Bool, _ context: @escaping Context) {
        self.context = context
        self.runsInline = runsInline
    }

    /// Runs `function` as this executor does; from any thread.
    public func execute(_ function: @escaping () -> Void) {
        context(function)
    }
}

/// The pending count behind one `Executor.mainThread` value: work that found
/// earlier work pending goes to the main queue behind it, keeping call order.
private final class MainThreadExecutor: Sendable {
    private let pending = Atomic<Int>(0)

    func execute(_ function: @escaping () -> Void) {
        let count = pending.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
        if count == 1 && MainThread.isCurrent {
            function()
            pending.wrappingSubtract(1, ordering: .acquiringAndReleasing)
        } else {
            nonisolated(unsafe) let function = function
            DispatchQueue.main.async {
                function()
                self.pending.wrappingSubtract(1, ordering: .acquiringAndReleasing)
            }
        }
    }
}
