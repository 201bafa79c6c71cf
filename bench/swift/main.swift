// The VueFlux layer against a plain Swift loop over an array of closures, in
// the same run: Sink.send to N observers, and Actions.dispatch with the
// .immediate executor (one store's own actions; the shared actions of N
// stores). Run by `make bench`, built with `swift build -c release`.
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

/// Nanoseconds per call of `body`, over `iterations` calls.
func time(_ iterations: Int, _ body: (Int) -> Void) -> Double {
    let clock = ContinuousClock()
    let start = clock.now
    for index in 0..<iterations {
        body(index)
    }
    let elapsed = start.duration(to: clock.now).components
    let nanoseconds = Double(elapsed.seconds) * 1e9 + Double(elapsed.attoseconds) / 1e9
    return nanoseconds / Double(iterations)
}

/// The best of seven rounds of each, the rounds interleaved so that both
/// sides see the same spells of a noisy machine.
func compare(_ iterations: Int, _ measured: (Int) -> Void, against baseline: (Int) -> Void) -> (Double, Double) {
    var best = (Double.infinity, Double.infinity)
    for _ in 0..<7 {
        best.1 = min(best.1, time(iterations, baseline))
        best.0 = min(best.0, time(iterations, measured))
    }
    return best
}

func row(_ name: String, _ n: Int, _ measured: Double, _ baseline: Double) {
    func pad(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }
    func format(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
    print(pad(name, 34), pad("\(n)", 4), pad(format(measured), 10), pad(format(baseline), 10),
          pad(format(measured / baseline) + "x", 8))
}

func benchSink(_ n: Int) {
    let iterations = 2_000_000 / n
    let closures = makeClosures(n)
    let sink = Sink<Int>()
    let disposables = makeClosures(n).map { sink.signal.observe($0) }
    let (sent, baseline) = compare(iterations, { sink.send(value: $0) }, against: { callAll(closures, $0) })
    row("Sink.send", n, sent, baseline)
    disposables.forEach { $0.dispose() }
}

func benchStoreActions() {
    let iterations = 2_000_000
    let closures = makeClosures(1)
    let store = Store<BenchState>(state: .init(), mutations: .init(), executor: .immediate)
    let (dispatched, baseline) = compare(iterations, { store.actions.dispatch(action: $0) },
                                         against: { callAll(closures, $0) })
    row("store.actions.dispatch", 1, dispatched, baseline)
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
    let (dispatched, baseline) = compare(iterations, { actions.dispatch(action: $0) },
                                         against: { callAll(closures, $0) })
    row("Store<State>.actions.dispatch", n, dispatched, baseline)
    withExtendedLifetime(stores) {}
}

print("Swift VueFlux layer vs a loop over [(Int) -> Void], ns per call (best of 7, interleaved)")
print(String(repeating: " ", count: 34), "   N", "     Flux", "     loop", "   ratio")
for n in [1, 10, 100] {
    benchSink(n)
}
benchStoreActions()
for n in [1, 10, 100] {
    benchSharedActions(n)
}
print("(checksum \(total.pointee))")
