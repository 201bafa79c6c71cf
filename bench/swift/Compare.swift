// The one measuring helper of the Swift benches (bench/swift/main.swift, and
// bench/vueflux/main.swift, whose build copies this file beside it): each
// row timed against its baseline in interleaved rounds of the same run.

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

/// Seven rounds of each, interleaved so that both sides see the same spells
/// of a noisy machine: the best round of each side, and the median of the
/// per-round ratios with the lowest and highest (as bench/ratio.h does in C).
let rounds = 7
struct Comparison {
    var measured = Double.infinity, baseline = Double.infinity
    var ratios: [Double] = []
    var median: Double { ratios.sorted()[ratios.count / 2] }
}

func compare(_ iterations: Int, _ measured: (Int) -> Void, against baseline: (Int) -> Void) -> Comparison {
    var result = Comparison()
    for _ in 0..<rounds {
        let b = time(iterations, baseline)
        let m = time(iterations, measured)
        result.baseline = min(result.baseline, b)
        result.measured = min(result.measured, m)
        result.ratios.append(m / b)
    }
    return result
}

func row(_ name: String, _ n: Int, _ c: Comparison) {
    func pad(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }
    func format(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
    func ratio(_ value: Double) -> String {
        let hundredths = Int((value * 100).rounded())
        return "\(hundredths / 100).\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100)"
    }
    let spread = "(\(ratio(c.ratios.min()!))-\(ratio(c.ratios.max()!)))"
    print(
        pad(name, 34), pad("\(n)", 4), pad(format(c.measured), 10), pad(format(c.baseline), 10),
        pad(ratio(c.median) + "x", 8), spread)
}
