public extension Signal {
    /// Each value transformed, per observer.
    func map<T>(_ transform: @escaping (Value) -> T) -> Signal<T> {
        operated { value, send in
            send(transform(value))
        }
    }

    /// Each value forwarded through `executor.execute`.
    func observe(on executor: Executor) -> Signal<Value> {
        operated { value, send in
            executor.execute { send(value) }
        }
    }
}
