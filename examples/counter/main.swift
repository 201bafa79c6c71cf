// The counter of VueFlux's README, in Swift 6 on Linux: a Store whose state
// holds a Variable, Actions and Computed extended with the app's names, and a
// label bound to the count. Run with `make demo` (or `swift run counter`).
import Flux

final class CounterState: Flux.State {
    typealias Action = CounterAction
    typealias Mutations = CounterMutations

    fileprivate let count = Variable(0)
}

enum CounterAction {
    case increment
    case decrement
    case reset
}

struct CounterMutations: Mutations {
    func commit(action: CounterAction, state: CounterState) {
        switch action {
        case .increment: state.count.value += 1
        case .decrement: state.count.value -= 1
        case .reset: state.count.value = 0
        }
    }
}

extension Actions where State == CounterState {
    func increment() { dispatch(action: .increment) }
    func decrement() { dispatch(action: .decrement) }
    func reset() { dispatch(action: .reset) }
}

extension Computed where State == CounterState {
    var count: Constant<Int> { state.count.constant }
}

// Swift 6 asks a Store subclass to restate the inherited conformance.
final class CounterStore: Store<CounterState>, @unchecked Sendable {
    static let shared = CounterStore()

    init() {
        super.init(state: .init(), mutations: .init(), executor: .immediate)
    }
}

/// Stands in for a view controller: main-actor state, bound to the store.
@MainActor
final class CounterView {
    var text = "" {
        didSet { print("label:", text) }
    }

    init(store: CounterStore) {
        // bind(to:) delivers on the main thread (inline when the value comes
        // from the main thread), which this main-actor state needs, and ends
        // when the view goes away.
        store.computed.count.signal
            .map { "count \($0)" }
            .bind(to: self, \.text)
    }
}

let store = CounterStore.shared
let view = CounterView(store: store)

store.actions.increment()
store.actions.increment()
store.actions.decrement()

// Store<CounterState>.actions reaches every live CounterState store.
let other = Store<CounterState>(state: .init(), mutations: .init(), executor: .immediate)
Store<CounterState>.actions.increment()
print("shared store:", store.computed.count.value, "other store:", other.computed.count.value)

store.actions.reset()
