/// A read-only view of a `Variable`.
public struct Constant<Value> {
    /// The variable's signal: its current value, then every change.
    public var signal: Signal<Value> {
        variable.signal
    }

    /// The variable's current value.
    public var value: Value {
        variable.value
    }

    private let variable: Variable<Value>

    /// A constant that never changes (over a private variable).
    public init(_ value: Value) {
        variable = .init(value)
    }

    /// A read-only view of `variable`, which it keeps alive.
    public init(variable: Variable<Value>) {
        self.variable = variable
    }
}
