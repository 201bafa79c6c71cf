// The VueFlux layer against a plain Swift loop over an array of closures, in
// the same run: Sink.send and Variable.value's setter to N observers, a
// sink's signal observed and disposed (against a closure appended to and
// removed from an array), and
// Actions.dispatch with the .immediate executor (one store's own actions; the
// shared actions of N stores), and Executor.mainThread's inline path (this
// runs on the main thread). Run by `make bench`, built with `swift build -c release`.
//
// Every observer, commit and baseline closure adds its argument to one
// counter that is printed at the end, and the closures are made behind
// @inline(never), so the optimizer can neither drop nor fuse the calls.
import Flux

// A plain pointer, not a class property: no dynamic exclusivity check in
// the measured closures.
nonisolated(unsafe) let total = UnsafeMutablePointer<Int>.allocate(capacity: 1)

@inline(never)
func makeClosures(_ count: Int) -> [(Int) -> Void] {
    (0..<count).map { _ in { value in total.pointee &+= value } }
}

@inline(never)
func callAll(_ closures: [(Int) -> Void], _ value: Int) {
    for closure in closures {
        closure(value)
    }
}

final class BenchState: Flux.State {
    typealias Action = Int
    typealias Mutations = BenchMutations
    var total = 0
}

struct BenchMutations: Mutations {
    func commit(action: Int, state: BenchState) {
        total.pointee &+= action
    }
}

func benchSink(_ n: Int) {
    let iterations = 2_000_000 / n
    let closures = makeClosures(n)
    let sink = Sink<Int>()
    let disposables = makeClosures(n).map { sink.signal.observe($0) }
    row("Sink.send", n, compare(iterations, { sink.send(value: $0) }, against: { callAll(closures, $0) }))
    disposables.forEach { $0.dispose() }
}

func benchVariable(_ n: Int) {
    let iterations = 2_000_000 / n
    let closures = makeClosures(n)
    let variable = Variable(0)
    let disposables = makeClosures(n).map { variable.signal.observe($0) }
    row("Variable.value set", n, compare(iterations, { variable.value = $0 }, against: { callAll(closures, $0) }))
    disposables.forEach { $0.dispose() }
}

// The baseline of an observation's lifetime: a closure stored in a list and
// removed again.
@inline(never)
func appendAndRemove(_ list: inout [(Int) -> Void], _ closure: @escaping (Int) -> Void) {
    list.append(closure)
    list.removeLast()
}

func benchObserveDispose() {
    let iterations = 500_000
    let sink = Sink<Int>()
    let closure = makeClosures(1)[0]
    var list: [(Int) -> Void] = []
    row(
        "signal.observe + dispose", 1,
        compare(
            iterations, { _ in sink.signal.observe(closure).dispose() },
            against: { _ in appendAndRemove(&list, closure) }))
}

func benchStoreActions() {
    let iterations = 2_000_000
    let closures = makeClosures(1)
    let store = Store<BenchState>(state: .init(), mutations: .init(), executor: .immediate)
    row(
        "store.actions.dispatch", 1,
        compare(
            iterations, { store.actions.dispatch(action: $0) },
            against: { callAll(closures, $0) }))
}

func benchSharedActions(_ n: Int) {
    let iterations = 2_000_000 / n
    let closures = makeClosures(n)
    let stores = (0..<n).map { _ in
        Store<BenchState>(state: .init(), mutations: .init(), executor: .immediate)
    }
    // Taken once: each `Store<State>.actions` access also looks the shared
    // dispatcher up in a table (about 50 ns).
    let actions = Store<BenchState>.actions
    row(
        "Store<State>.actions.dispatch", n,
        compare(
            iterations, { actions.dispatch(action: $0) },
            against: { callAll(closures, $0) }))
    withExtendedLifetime(stores) {}
}

// Executor.mainThread on the main thread with nothing pending: the function
// runs inline, after the executor's main-thread test (against calling it).
@inline(never)
func callWork(_ work: () -> Void) {
    work()
}

func benchMainThreadExecutor() {
    let iterations = 2_000_000
    let work = makeClosures(1).map { closure in { closure(1) } }[0]
    let executor = Executor.mainThread
    row(
        "Executor.mainThread.execute", 1,
        compare(iterations, { _ in executor.execute(work) }, against: { _ in callWork(work) }))
}

print("Swift VueFlux layer vs a loop over [(Int) -> Void], ns per call (best round);")
print("ratio: the median of \(rounds) interleaved rounds (lowest-highest)")
print(String(repeating: " ", count: 34), "   N", "     Flux", "     loop", "   ratio")
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
benchMainThreadExecutor()
print("(checksum \(total.pointee))")
