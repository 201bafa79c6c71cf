import Flux

// VUEFLUX.md section 2's `@unchecked Sendable` marks (the `// +` lines),
// where they are checked: a Swift 6 client. Without one of them this
// package does not build (`make check-swift-client`); FluxTests, in Swift 5
// mode, cannot tell.

private func sendable<T: Sendable>(_: T.Type) {}

private final class ProbeState: Flux.State {
    typealias Action = Void
    typealias Mutations = ProbeMutations
}

private struct ProbeMutations: Flux.Mutations {
    typealias State = ProbeState
    func commit(action: Void, state: ProbeState) {}
}

private final class SendableProbeState: Flux.State, Sendable {
    typealias Action = Void
    typealias Mutations = SendableProbeMutations
}

private struct SendableProbeMutations: Flux.Mutations {
    typealias State = SendableProbeState
    func commit(action: Void, state: SendableProbeState) {}
}

// The README's shared store: `static let` needs Store to be Sendable, and
// Swift 6 asks the subclass to restate it.
private final class ProbeStore: Store<ProbeState>, @unchecked Sendable {
    static let shared = ProbeStore()
    init() { super.init(state: .init(), mutations: .init(), executor: .immediate) }
}

func probeVueFluxSendability() {
    sendable(Store<ProbeState>.self)
    sendable(ProbeStore.self)
    sendable(Actions<ProbeState>.self)
    sendable(Computed<SendableProbeState>.self)
    sendable(Executor.self)
    sendable(AtomicReference<ProbeState>.self)
    sendable(AnyDisposable.self)
    sendable(DisposableScope.self)
    sendable(Sink<ProbeState>.self)
    sendable(Variable<ProbeState>.self)
}
