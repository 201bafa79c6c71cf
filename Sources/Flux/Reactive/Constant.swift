/// A read-only view of a `Variable`.
public struct Constant<Value> {
    public var signal: Signal<Value> {
        variable.signal
    }

    public var value: Value {
        variable.value
    }

    private let variable: Variable<Value>

    /// A constant that never changes (over a private variable).
    public init(_ value: Value) {
        variable = .init(value)
    }

    public init(variable: Variable<Value>) {
        self.variable = variable
    }
}
