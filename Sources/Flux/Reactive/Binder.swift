/// A binding to a target held weakly: the binding runs while the target
/// lives, and its registration ends with the target (at the next value, on
/// Linux; see `Signal.observe(duringScopeOf:_:)`).
public struct Binder<Value> {
    private let register: (Signal<Value>, Executor) -> any Disposable

    /// A binder calling `binding(target, value)`; `target` is held weakly.
    public init<Target: AnyObject>(target: Target, binding: @escaping (Target, Value) -> Void) {
        register = { [weak target] signal, executor in
            guard let target else { return AnyDisposable.disposed() }
            let scope = ScopeRegistry.shared.scope(for: target)
            let disposable =
                signal
                .whileAlive(target, scope: scope)
                .observe(on: executor)
                .observe { [weak target] value in
                    guard let target else { return }
                    binding(target, value)
                }
            scope += disposable
            return disposable
        }
    }

    /// Observes `signal` through `executor` while the target lives; an
    /// already-disposed disposable when the target is gone.
    public func bind(signal: Signal<Value>, on executor: Executor) -> any Disposable {
        register(signal, executor)
    }
}
