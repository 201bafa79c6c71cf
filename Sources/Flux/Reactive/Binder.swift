/// A binding to a target held weakly: the binding runs while the target
/// lives, and its registration ends with the target (at the next value, on
/// Linux; see `Signal.observe(duringScopeOf:_:)`).
public struct Binder<Value> {
    private let register: (Signal<Value>, Executor) -> any Disposable

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

    public func bind(signal: Signal<Value>, on executor: Executor) -> any Disposable {
        register(signal, executor)
    }
}
