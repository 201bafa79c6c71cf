import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Flux
@testable import FluxCore  // Guarded: a pthread mutex, which ThreadSanitizer sees

// Three threads at once on shared sinks, variables, stores, a Dispatcher with
// registered stores, and DisposableScopes, each doing random documented
// operations (seeded), where observers, mutations and store listeners send,
// set and dispatch across objects. What is checked, with bookkeeping of our
// own:
// - once a `dispose()` (of a scope holding the observation, from any of the
//   threads) has returned, the observer gets no value sent after that
//   (Signal.observe, DisposableScope.dispose); nor does a removed store
//   listener run for a dispatch begun after `remove()` returned;
// - every observer gets the values of one sender in the order it sent them,
//   each once (Sink, Variable), also through `map` and `observe(on:)`;
// - an observation bound to an object's scope never runs once the object has
//   deinitialized (VUEFLUX.md 3 (a));
// - every dispatch to a store is committed exactly once (handed over or not);
// - `registerStore` from three threads gives one instance;
// - a variable's value is the value delivered last;
// - nothing deadlocks (bounded waits fail the test instead of hanging).

// MARK: Bookkeeping

/// A sent value: who sent it, and a global ticket taken just before the send
/// (so a ticket above a number read after `dispose()` returned was sent after).
private struct Message: Sendable, Equatable {
    let sender: UInt
    let ticket: Int
    /// 1 for what an observer, a mutation or a listener sent: those send
    /// nothing more (else a cascade over many observers need never end).
    var nested = false
}

/// Tickets, shared by every sender.
private let tickets = Atomic<Int>(0)

private func nextMessage(nested: Bool = false) -> Message {
    Message(
        sender: currentThreadID(), ticket: tickets.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue,
        nested: nested)
}

/// What one observation saw, and when it was disposed.
private final class Record: @unchecked Sendable {
    struct Seen {
        var lastBySender: [UInt: Int] = [:]
        var maxTicket = Int.min
        var outOfOrder: [String] = []
        var calls = 0
    }
    let label: String
    let seen = Guarded(Seen())
    /// The ticket counter read right after the earliest `dispose()` returned.
    let disposedAt = Atomic<Int>(Int.max)
    /// Whether order per sender holds for it (not across a map that resends).
    init(label: String) { self.label = label }

    func receive(_ message: Message) {
        seen.withLock { seen in
            seen.calls += 1
            seen.maxTicket = max(seen.maxTicket, message.ticket)
            if let last = seen.lastBySender[message.sender], last >= message.ticket {
                seen.outOfOrder.append("\(label): ticket \(message.ticket) after \(last) from one sender")
            }
            seen.lastBySender[message.sender] = message.ticket
        }
    }

    /// Called by each thread whose `dispose()` of it returned.
    func noteDisposed() {
        let now = tickets.load(ordering: .sequentiallyConsistent)
        var current = disposedAt.load(ordering: .relaxed)
        while now < current {
            let (exchanged, original) = disposedAt.compareExchange(
                expected: current, desired: now, ordering: .relaxed)
            if exchanged { break }
            current = original
        }
    }

    /// Problems found, once every thread and queue is done.
    func problems() -> [String] {
        let seen = seen.withLock { $0 }
        var problems = seen.outOfOrder
        let disposed = disposedAt.load(ordering: .relaxed)
        if seen.maxTicket > disposed {
            problems.append("\(label): got ticket \(seen.maxTicket) though disposed when tickets were at \(disposed)")
        }
        return problems
    }
}

/// An atomic integer that closures can capture.
private final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)
    var value: Int { atomic.load(ordering: .sequentiallyConsistent) }
    func set(_ value: Int) { atomic.store(value, ordering: .sequentiallyConsistent) }
    func increment() { atomic.wrappingAdd(1, ordering: .sequentiallyConsistent) }
}

/// A small seeded generator (SplitMix64), one per thread.
private struct Random {
    var state: UInt64
    mutating func next() -> UInt64 {
        defer { state &+= 0x9E37_79B9_7F4A_7C15 }
        return mix(state)
    }
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}

/// An object whose deinit is recorded, for scoped observations.
private final class Owner: Sendable {
    let deadBox: DeadBox
    init(_ box: DeadBox) {
        deadBox = box
    }
    deinit { deadBox.dead.store(true, ordering: .sequentiallyConsistent) }
}

private final class DeadBox: Sendable {
    let dead = Atomic<Bool>(false)
}

// MARK: Stores

private final class StressState: State {
    typealias Action = Int
    typealias Mutations = StressMutations
    // Changed only by commits, which one State type's dispatch lock (or the
    // store's serial queue) serializes; atomic, for the test reads it on a
    // thread whose store another thread's dispatch to the State type may
    // be committing to right then (ThreadSanitizer saw that race).
    let commits = Atomic<Int>(0)
}

private struct StressMutations: Mutations {
    typealias State = StressState
    let sink: Sink<Message>

    func commit(action: Int, state: StressState) {
        state.commits.wrappingAdd(1, ordering: .relaxed)
        // A mutation sending to a sink another thread may be delivering
        // (whose observer may be dispatching to this State type).
        if action >= 0 && action % 5 == 0 {
            sink.send(value: nextMessage(nested: true))
        }
    }
}

/// A store class the dispatcher creates once.
private final class LoggedStore: RegisteredStore {
    let store: FluxStore<Message>
    init(dispatcher: Dispatcher<Message>) {
        store = FluxStore(dispatcher: dispatcher) { store, _ in
            try store.emitChange()
        }
    }
    var dispatchToken: DispatchToken { store.dispatchToken }
}

/// Depends on LoggedStore: its init registers that class (from any thread).
private final class DependentStore: RegisteredStore {
    let store: FluxStore<Message>
    let dependency: LoggedStore
    init(dispatcher: Dispatcher<Message>) {
        dependency = dispatcher.registerStore(LoggedStore.self)
        store = FluxStore(dispatcher: dispatcher) { [dependency] store, _ in
            try store.dispatcher.waitFor([dependency.dispatchToken])
            try store.emitChange()
        }
    }
    var dispatchToken: DispatchToken { store.dispatchToken }
}

// MARK: The shared world

private final class World: @unchecked Sendable {
    let sinks = [Sink<Message>(), Sink<Message>(), Sink<Message>()]
    let variables = [Variable(Message(sender: 0, ticket: 0)), Variable(Message(sender: 0, ticket: 0))]
    let dispatcher = Dispatcher<Message>()
    /// The ticket of the dispatch now running (set by its first callback),
    /// negative for a nested one; and its sender.
    let dispatching = Counter()
    let dispatchingSender = Guarded<UInt>(0)
    let stores: [Store<StressState>]
    let storeQueue = DispatchQueue(label: "three-thread store")
    let dispatchedTo = [Counter(), Counter()]
    let dispatchedShared = Counter()

    /// Observations any thread may dispose: each in a scope of its own (the
    /// documented way to dispose across threads), with its record.
    let pool = Guarded([(scope: DisposableScope, record: Record)]())
    /// Every record ever made, checked at the end.
    let records = Guarded([Record]())
    /// A scope several observations go in at once, replaced when disposed,
    /// with their records.
    let group = Guarded((scope: DisposableScope(), records: [Record]()))
    /// Executors' queues, drained before the checks.
    let queues = Guarded([DispatchQueue]())
    /// Store listeners: their subscription, record and whether removed.
    let listeners = Guarded([(subscription: Subscription, record: Record)]())
    let registered = Guarded([ObjectIdentifier]())
    let scopedViolations = Counter()

    init() {
        stores = [
            Store(state: StressState(), mutations: StressMutations(sink: sinks[0]), executor: .immediate),
            Store(state: StressState(), mutations: StressMutations(sink: sinks[1]), executor: .queue(storeQueue)),
        ]
        _ = dispatcher.register { [dispatching, dispatchingSender] message in
            dispatchingSender.withLock { $0 = message.sender }
            dispatching.set(message.nested ? -message.ticket : message.ticket)
        }
    }

    func send(_ index: Int, nested: Bool = false) {
        sinks[index].send(value: nextMessage(nested: nested))
    }

    func set(_ index: Int, nested: Bool = false) {
        variables[index].value = nextMessage(nested: nested)
    }

    /// A nested dispatch's action is negative: its mutation sends nothing.
    func dispatchStore(_ index: Int, nested: Bool = false) {
        dispatchedTo[index].increment()
        stores[index].actions.dispatch(action: nested ? -1 : tickets.load(ordering: .relaxed))
    }

    func dispatchShared(nested: Bool = false) {
        dispatchedShared.increment()
        Store<StressState>.actions.dispatch(action: nested ? -1 : tickets.load(ordering: .relaxed))
    }

    func dispatchFlux(nested: Bool = false) {
        // Refused (alreadyDispatching) when this thread is in a dispatch of
        // it; otherwise waits for another thread's.
        try? dispatcher.dispatch(nextMessage(nested: nested))
    }

    /// What an observer does besides recording, now and then: across objects.
    func react(_ reaction: Int, to message: Message) {
        guard !message.nested && message.ticket % 7 == 0 else { return }
        switch reaction {
        case 1: send((message.ticket / 7) % 3, nested: true)
        case 2: set((message.ticket / 7) % 2, nested: true)
        case 3: dispatchStore((message.ticket / 7) % 2, nested: true)
        case 4: dispatchShared(nested: true)
        case 5: dispatchFlux(nested: true)
        default: break
        }
    }

    func observe(_ random: inout Random) {
        let record = Record(label: "observation \(random.next() % 100_000)")
        let reaction = random.below(8)
        let observer: (Message) -> Void = { [self] message in
            record.receive(message)
            react(reaction, to: message)
        }
        let disposable: any Disposable
        switch random.below(6) {
        case 0, 1:
            disposable = sinks[random.below(3)].signal.observe(observer)
        case 2:
            disposable = variables[random.below(2)].signal.observe(observer)
        case 3:
            disposable = sinks[random.below(3)].signal.map { $0 }.observe(observer)
        case 4:
            let queue = DispatchQueue(label: "three-thread observer")
            queues.withLock { $0.append(queue) }
            let signal = random.below(2) == 0 ? sinks[random.below(3)].signal : variables[random.below(2)].signal
            disposable = signal.observe(on: .queue(queue)).observe(observer)
        default:
            disposable = sinks[random.below(3)].signal.observe(observer)
        }
        let scope = DisposableScope([disposable])
        records.withLock { $0.append(record) }
        pool.withLock { $0.append((scope, record)) }
        if random.below(3) == 0 {
            // Into the group scope too: disposed with it, or on its own.
            // Added under the lock that disposeGroup() takes it out under:
            // else it could dispose the group, and note the record disposed,
            // before this add (which then disposes it, later).
            group.withLock { group in
                group.records.append(record)
                group.scope.add(disposable: scope)
            }
        }
    }

    func disposeOne(_ random: inout Random) {
        let picked: (scope: DisposableScope, record: Record)? = pool.withLock { pool in
            guard !pool.isEmpty else { return nil }
            let index = random.below(pool.count)
            // Sometimes left in the pool: another thread may dispose it again,
            // concurrently (the scope's second-caller path).
            return random.below(2) == 0 ? pool.remove(at: index) : pool[index]
        }
        guard let picked else { return }
        picked.scope.dispose()
        picked.record.noteDisposed()
    }

    func disposeGroup() {
        let taken = group.withLock { group in
            defer { group = (DisposableScope(), []) }
            return group
        }
        taken.scope.dispose()
        for record in taken.records { record.noteDisposed() }
    }

    func observeScoped(_ random: inout Random) -> Owner {
        let box = DeadBox()
        let owner = Owner(box)
        let violations = scopedViolations
        let record = Record(label: "scoped \(random.next() % 100_000)")
        records.withLock { $0.append(record) }
        sinks[random.below(3)].signal.observe(duringScopeOf: owner) { message in
            if box.dead.load(ordering: .sequentiallyConsistent) {
                violations.increment()
            }
            record.receive(message)
        }
        return owner
    }

    func addListener(_ random: inout Random, owner: Owner?) {
        let logged = dispatcher.registerStore(LoggedStore.self)
        let record = Record(label: "listener \(random.next() % 100_000)")
        let dispatching = dispatching
        let sender = dispatchingSender
        let violations = scopedViolations
        let subscription: Subscription
        if let owner {
            subscription = logged.store.addListener(owner: owner) { owner in
                if owner.deadBox.dead.load(ordering: .sequentiallyConsistent) {
                    violations.increment()
                }
                record.receive(Message(sender: sender.withLock { $0 }, ticket: abs(dispatching.value)))
            }
        } else {
            subscription = logged.store.addListener {
                record.receive(Message(sender: sender.withLock { $0 }, ticket: abs(dispatching.value)))
            }
        }
        records.withLock { $0.append(record) }
        listeners.withLock { $0.append((subscription, record)) }
    }

    func removeListener(_ random: inout Random) {
        let picked: (subscription: Subscription, record: Record)? = listeners.withLock { listeners in
            guard !listeners.isEmpty else { return nil }
            return listeners.remove(at: random.below(listeners.count))
        }
        guard let picked else { return }
        // Fails when an owner-bound one was swept already: then it never
        // runs again anyway.
        try? picked.subscription.remove()
        picked.record.noteDisposed()
    }

    func register() {
        let store: AnyObject =
            tickets.load(ordering: .relaxed) % 2 == 0
            ? dispatcher.registerStore(LoggedStore.self) : dispatcher.registerStore(DependentStore.self).dependency
        registered.withLock { $0.append(ObjectIdentifier(store)) }
    }
}

@Suite struct ThreeThreadTests {
    /// Three threads doing random operations on one world; the checks above.
    @Test(.serialized, arguments: [UInt64(1), 2, 3])
    func randomOperationsKeepTheDocumentedGuarantees(seed: UInt64) {
        let world = World()
        // Live store listeners send and set, across objects.
        let logged = world.dispatcher.registerStore(LoggedStore.self)
        logged.store.addListener { [world] in
            // Not for a nested dispatch's (negative), which ends there.
            let ticket = world.dispatching.value
            if ticket > 0 && ticket % 3 == 0 { world.send(ticket % 3, nested: true) }
            if ticket > 0 && ticket % 4 == 0 { world.set(ticket % 2, nested: true) }
        }
        let steps = 2_500
        let bodies: [() -> Void] = (0..<3).map { thread in
            {
                var random = Random(state: seed &* 1_000_003 &+ UInt64(thread))
                var owners: [Owner] = []
                for _ in 0..<steps {
                    switch random.below(20) {
                    case 0...4: world.send(random.below(3))
                    case 5, 6: world.set(random.below(2))
                    case 7, 8: world.observe(&random)
                    case 9, 10: world.disposeOne(&random)
                    case 11: if random.below(4) == 0 { world.disposeGroup() }
                    case 12: world.dispatchStore(random.below(2))
                    case 13: world.dispatchShared()
                    case 14: world.dispatchFlux()
                    case 15:
                        owners.append(world.observeScoped(&random))
                        if owners.count > 4 { owners.remove(at: random.below(owners.count)) }
                    case 16:
                        world.addListener(&random, owner: random.below(2) == 0 ? owners.randomElement() : nil)
                    case 17: world.removeListener(&random)
                    case 18: world.register()
                    default:
                        // A store made and dropped on this thread while others
                        // dispatch to its State type.
                        let store = Store<StressState>(
                            state: StressState(), mutations: StressMutations(sink: world.sinks[2]), executor: .immediate
                        )
                        store.actions.dispatch(action: 1)
                        #expect(store.computed.state.commits.load(ordering: .relaxed) >= 1)
                    }
                }
                owners.removeAll()
            }
        }
        #expect(onThreads(bodies, seconds: 60), "three threads did not finish: deadlock?")

        // Drain what executors queued.
        for queue in world.queues.withLock({ $0 }) { queue.sync {} }
        world.storeQueue.sync {}

        var problems: [String] = []
        for record in world.records.withLock({ $0 }) { problems += record.problems() }
        #expect(problems.isEmpty, "\(problems.prefix(10))")
        #expect(world.scopedViolations.value == 0, "an observer ran after its owner's deinit")

        // Every dispatch committed once (shared ones reach both stores).
        let shared = world.dispatchedShared.value
        for index in 0..<2 {
            let committed = world.stores[index].computed.state.commits.load(ordering: .relaxed)
            let expected = world.dispatchedTo[index].value + shared
            #expect(committed == expected, "store \(index): \(committed) commits for \(expected) dispatches")
        }

        // One registered instance of each class, whoever asked first.
        let identities = Set(world.registered.withLock { $0 })
        #expect(identities.count <= 1)
        #expect(identities.allSatisfy { $0 == ObjectIdentifier(logged) })

        // Nothing reacts any more.
        for (scope, _) in world.pool.withLock({ $0 }) { scope.dispose() }
        world.disposeGroup()

        // A variable's value is the value delivered last: what a new
        // observer gets first, and what a still-subscribed direct observer
        // got last.
        for variable in world.variables {
            let last = Guarded<Message?>(nil)
            let probe = variable.signal.observe { message in last.withLock { $0 = message } }
            #expect(last.withLock { $0 } == variable.value)
            let next = nextMessage()
            variable.value = next
            #expect(last.withLock { $0 } == next)
            probe.dispose()
        }

        world.dispatcher.removeAllStores()
    }
}
