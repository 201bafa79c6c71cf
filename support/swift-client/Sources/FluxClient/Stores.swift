import Flux

// The README's "Stores" Swift block, compiled here: check-readme checks that
// these lines are that block, indented one level (statements need a body).
func readmeStores(_ d: Dispatcher<String>) throws -> [any Sendable] {
    let counter = ReduceStore<Int, String>(dispatcher: d, initialState: 0) { n, action in
        action == "inc" ? n + 1 : n  // a throw fails the dispatch
    }
    let subscription = counter.addListener { print(counter.state) }
    let group = try StoreGroup([counter]) { print("after the store") }
    try d.dispatch("inc")
    return [counter, subscription, group]  // kept alive by the caller, as a program would
}
