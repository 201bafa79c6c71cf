import Synchronization

/// Something that can be stopped once, such as an observation. Not
/// `Sendable` (as in VueFlux): across threads, pass an `AnyDisposable` or a
/// `DisposableScope`, which are.
public protocol Disposable {
    /// True once `dispose()` has been called.
    var isDisposed: Bool { get }

    /// Stops it; calling it again does nothing.
    func dispose()
}

/// Runs a closure at the first `dispose()`, then lets go of it. It is also
/// what observing a signal returns, as in VueFlux (`observe`, and so
/// `observe(duringScopeOf:)` and `bind`).
///
/// Not `final`, unlike VueFlux's, though no other module can tell (a
/// `public` class cannot be subclassed outside its module): observing
/// returns one of this module's subclasses, which end the observation in
/// the same object and, once a client has inlined `observe`, in its
/// specialized code.
public class AnyDisposable: Disposable, @unchecked Sendable {
    public var isDisposed: Bool {
        disposed.load(ordering: .acquiring)
    }

    @usableFromInline let disposed = Atomic<Bool>(false)
    // Written by init and by the one caller that wins the exchange in dispose().
    @usableFromInline var action: (() -> Void)?

    /// Runs `dispose` at the first `dispose()`, on the thread that calls it.
    public init(_ dispose: @escaping () -> Void) {
        action = dispose
    }

    /// A disposable that does nothing but record that it was disposed.
    @inlinable
    public init() {
        action = nil
    }

    /// Runs the closure if this is the first call (from any thread, also
    /// from inside the closure itself: once only).
    public func dispose() {
        guard disposed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else {
            return
        }
        let action = self.action
        self.action = nil
        action?()
    }

    /// An already-disposed disposable (for a binding whose target is gone).
    static func disposed() -> AnyDisposable {
        let disposable = AnyDisposable()
        disposable.dispose()
        return disposable
    }
}
