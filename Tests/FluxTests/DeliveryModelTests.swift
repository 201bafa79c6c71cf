import Testing

@testable import Flux

// Random single-thread programs of sends, sets, observations, disposals and
// reads, where observers themselves send, set, observe, dispose and read,
// run against Sink and Variable and against a small model of the rules their
// doc comments state; the two logs must be the same. The rules modelled:
// - a delivery calls the observers present when it starts, in subscription
//   order, skipping one disposed meanwhile (never called once dispose()
//   returned);
// - a send or set from inside a delivery is queued, and the queue is
//   delivered in order once the current delivery ends;
// - a sink's observer added during a delivery misses that value and gets
//   the queued ones;
// - a variable's observer first gets the value delivered last: at once when
//   nothing is being delivered, else after the deliveries queued so far (a
//   disposal before then prevents it); a set stores its value when it is
//   delivered, and a set from inside an observer also stores it at once.

/// What an observer does when called: decided by a hash of the program, the
/// observer and how many times it was called, so the model and the real
/// thing decide alike as long as they agree.
private enum Reaction {
    case send(Int)
    case dispose(Int)  // the index of an observation, in the order observe() returned
    case observe
    case read
}

/// The decisions and the log shared by the model and the real runs.
private struct Script {
    let seed: UInt64
    var budget = 30  // nested sends and observations, so a program ends
    var calls: [Int: Int] = [:]
    var log: [String] = []

    mutating func reactions(of id: Int, registered: Int) -> [Reaction] {
        let n = calls[id, default: 0]
        calls[id] = n + 1
        var r = mix(seed ^ mix(UInt64(id) << 32 | UInt64(n)))
        var out: [Reaction] = []
        for _ in 0..<Int(r % 3) {
            r = mix(r)
            switch r % 8 {
            case 0, 1:
                if budget > 0 {
                    budget -= 1
                    out.append(.send(1000 * (id + 1) + n))
                }
            case 2, 3:
                if registered > 0 { out.append(.dispose(Int((r >> 8) % UInt64(registered)))) }
            case 4:
                if budget > 0 {
                    budget -= 1
                    out.append(.observe)
                }
            default:
                out.append(.read)
            }
        }
        return out
    }

    /// The top-level program: (operation, operand) pairs.
    func program(length: Int) -> [(Int, UInt64)] {
        var r = mix(seed)
        return (0..<length).map { _ in
            r = mix(r)
            return (Int(r % 6), r >> 8)
        }
    }
}

// MARK: The model

private final class Model {
    enum Item {
        case value(Int)
        case join(Int)
    }

    let isVariable: Bool
    var script: Script
    var observers: [Int] = []
    var disposed: Set<Int> = []
    var created = 0
    var registered: [Int] = []  // ids, in the order their observe() returned
    var queue: [Item] = []
    var delivering = false
    var storage = 0
    var delivered = 0

    init(seed: UInt64, isVariable: Bool) {
        script = Script(seed: seed)
        self.isVariable = isVariable
    }

    func send(_ value: Int) {
        if delivering {
            if isVariable { storage = value }
            queue.append(.value(value))
            return
        }
        delivering = true
        deliver(value)
        drain()
        delivering = false
    }

    func deliver(_ value: Int) {
        storage = value
        delivered = value
        for id in observers where !disposed.contains(id) {
            call(id, value)
        }
    }

    func drain() {
        while !queue.isEmpty {
            switch queue.removeFirst() {
            case .value(let value): deliver(value)
            case .join(let id): join(id)
            }
        }
    }

    func join(_ id: Int) {
        guard !disposed.contains(id) else { return }
        call(id, delivered)
        observers.append(id)
    }

    func observe() {
        let id = created
        created += 1
        if !isVariable {
            observers.append(id)
        } else if delivering {
            queue.append(.join(id))
        } else {
            delivering = true
            join(id)
            drain()
            delivering = false
        }
        registered.append(id)
    }

    func call(_ id: Int, _ value: Int) {
        script.log.append("\(id):\(value)")
        for reaction in script.reactions(of: id, registered: registered.count) {
            perform(reaction)
        }
    }

    func perform(_ reaction: Reaction) {
        switch reaction {
        case .send(let value): send(value)
        case .dispose(let index): disposed.insert(registered[index])
        case .observe: observe()
        case .read: script.log.append("read \(isVariable ? storage : -1)")
        }
    }
}

// MARK: The real thing

private final class Run {
    let sink = Sink<Int>()
    let variable: Variable<Int>?
    var script: Script
    var created = 0
    var disposables: [any Disposable] = []  // in the order observe() returned

    init(seed: UInt64, isVariable: Bool) {
        script = Script(seed: seed)
        variable = isVariable ? Variable(0) : nil
    }

    func send(_ value: Int) {
        if let variable { variable.value = value } else { sink.send(value: value) }
    }

    func observe() {
        let id = created
        created += 1
        let signal = variable?.signal ?? sink.signal
        disposables.append(
            signal.observe { [unowned self] value in
                script.log.append("\(id):\(value)")
                for reaction in script.reactions(of: id, registered: disposables.count) {
                    perform(reaction)
                }
            })
    }

    func perform(_ reaction: Reaction) {
        switch reaction {
        case .send(let value): send(value)
        case .dispose(let index): disposables[index].dispose()
        case .observe: observe()
        case .read: script.log.append("read \(variable?.value ?? -1)")
        }
    }
}

@Suite struct DeliveryModelTests {
    private func check(isVariable: Bool) {
        for seed in UInt64(0)..<3_000 {
            let model = Model(seed: seed, isVariable: isVariable)
            let run = Run(seed: seed, isVariable: isVariable)
            for (operation, operand) in model.script.program(length: 12) {
                switch operation {
                case 0, 1:
                    model.observe()
                    run.observe()
                case 2, 3:
                    model.send(Int(operand % 100))
                    run.send(Int(operand % 100))
                case 4:
                    if !model.registered.isEmpty {
                        let index = Int(operand % UInt64(model.registered.count))
                        model.perform(.dispose(index))
                        run.perform(.dispose(index))
                    }
                default:
                    model.perform(.read)
                    run.perform(.read)
                }
            }
            guard model.script.log == run.script.log else {
                let at = zip(model.script.log, run.script.log).prefix { $0 == $1 }.count
                Issue.record(
                    """
                    seed \(seed): the logs part at entry \(at): \
                    model \(model.script.log.dropFirst(at).prefix(6)), \
                    \(isVariable ? "Variable" : "Sink") \(run.script.log.dropFirst(at).prefix(6))
                    """)
                return
            }
        }
    }

    @Test func sinkDeliversAsItsRulesSay() {
        check(isVariable: false)
    }

    @Test func variableDeliversAsItsRulesSay() {
        check(isVariable: true)
    }
}
