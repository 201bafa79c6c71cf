// The Swift layer (Flux) side by side with VueFlux itself, built from its own
// sources for Linux (make bench-vueflux; bench/vueflux/prepare.py), in one
// process: the same workloads through both, timed in interleaved rounds by
// bench/swift/Compare.swift. Ratio: Flux / VueFlux (goal: <= 0.5x).
//
// Every observer and commit adds its argument to one counter printed at the
// end, and the closures are made behind @inline(never), so the optimizer can
// neither drop nor fuse the calls.
import Flux
import VueFlux
import VueFluxReactive

let total = UnsafeMutablePointer<Int>.allocate(capacity: 1)

@inline(never)
func makeObserver() -> (Int) -> Void {
    { value in total.pointee &+= value }
}

final class OurState: Flux.State {
    typealias Action = Int
    typealias Mutations = OurMutations
}

struct OurMutations: Flux.Mutations {
    typealias State = OurState
    func commit(action: Int, state: OurState) {
        total.pointee &+= action
    }
}

final class TheirState: VueFlux.State {
    typealias Action = Int
    typealias Mutations = TheirMutations
}

struct TheirMutations: VueFlux.Mutations {
    typealias State = TheirState
    func commit(action: Int, state: TheirState) {
        total.pointee &+= action
    }
}

func benchSink(_ n: Int) {
    let ours = Flux.Sink<Int>()
    let theirs = VueFluxReactive.Sink<Int>()
    let ourDisposables = (0..<n).map { _ in ours.signal.observe(makeObserver()) }
    let theirDisposables = (0..<n).map { _ in theirs.signal.observe(makeObserver()) }
    row(
        "Sink.send", n,
        compare(2_000_000 / n, { ours.send(value: $0) }, against: { theirs.send(value: $0) }))
    ourDisposables.forEach { $0.dispose() }
    theirDisposables.forEach { $0.dispose() }
}

func benchVariable(_ n: Int) {
    let ours = Flux.Variable(0)
    let theirs = VueFluxReactive.Variable(0)
    let ourDisposables = (0..<n).map { _ in ours.signal.observe(makeObserver()) }
    let theirDisposables = (0..<n).map { _ in theirs.signal.observe(makeObserver()) }
    row(
        "Variable.value set", n,
        compare(2_000_000 / n, { ours.value = $0 }, against: { theirs.value = $0 }))
    ourDisposables.forEach { $0.dispose() }
    theirDisposables.forEach { $0.dispose() }
}

func benchObserveDispose() {
    let observer = makeObserver()
    let ourSink = Flux.Sink<Int>()
    let theirSink = VueFluxReactive.Sink<Int>()
    row(
        "sink.signal.observe + dispose", 1,
        compare(
            500_000, { _ in ourSink.signal.observe(observer).dispose() },
            against: { _ in theirSink.signal.observe(observer).dispose() }))
    let ourVariable = Flux.Variable(0)
    let theirVariable = VueFluxReactive.Variable(0)
    row(
        "variable.signal.observe + dispose", 1,
        compare(
            500_000, { _ in ourVariable.signal.observe(observer).dispose() },
            against: { _ in theirVariable.signal.observe(observer).dispose() }))
}

func benchStoreActions() {
    let ours = Flux.Store<OurState>(state: .init(), mutations: .init(), executor: .immediate)
    let theirs = VueFlux.Store<TheirState>(state: .init(), mutations: .init(), executor: .immediate)
    row(
        "store.actions.dispatch", 1,
        compare(
            2_000_000, { ours.actions.dispatch(action: $0) },
            against: { theirs.actions.dispatch(action: $0) }))
}

func benchSharedActions(_ n: Int) {
    let ourStores = (0..<n).map { _ in
        Flux.Store<OurState>(state: .init(), mutations: .init(), executor: .immediate)
    }
    let theirStores = (0..<n).map { _ in
        VueFlux.Store<TheirState>(state: .init(), mutations: .init(), executor: .immediate)
    }
    // Taken once: each access to `Store<State>.actions` looks the shared
    // dispatcher up in a table, in both.
    let ours = Flux.Store<OurState>.actions
    let theirs = VueFlux.Store<TheirState>.actions
    row(
        "Store<State>.actions.dispatch", n,
        compare(2_000_000 / n, { ours.dispatch(action: $0) }, against: { theirs.dispatch(action: $0) }))
    withExtendedLifetime((ourStores, theirStores)) {}
}

print("Flux's VueFlux layer vs VueFlux itself (its sources, same process), ns per call (best round);")
print("ratio Flux / VueFlux: the median of \(rounds) interleaved rounds (lowest-highest); goal <= 0.50x")
print(String(repeating: " ", count: 34), "   N", "     Flux", "  VueFlux", "   ratio")
for n in [1, 10, 100] {
    benchSink(n)
}
for n in [1, 10, 100] {
    benchVariable(n)
}
benchObserveDispose()
benchStoreActions()
for n in [1, 10, 100] {
    benchSharedActions(n)
}
print("(checksum \(total.pointee))")
