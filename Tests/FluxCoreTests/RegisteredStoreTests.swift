import Synchronization
import Testing
@_spi(Engine) @testable import FluxCore
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// JBFlux's store model (DESIGN.md 11): store classes registered with the
/// dispatcher, listeners bound to their owner's life, changes that carry an
/// error.
@Suite struct RegisteredStoreTests {
    enum Action: Sendable {
        case refreshed(Result<String, Failure>)
        case other
    }
    struct Failure: Error, Equatable { let reason: String }

    /// JBFlux's example: the current user, refreshed by an action that may carry an error.
    final class CurrentUserStore: RegisteredStore {
        let users: ReduceStore<String?, Action>
        init(dispatcher: Dispatcher<Action>) {
            users = ReduceStore(dispatcher: dispatcher, initialState: nil) { user, action in
                guard case .refreshed(let result) = action else { return user }
                switch result {
                case .success(let name): return name
                case .failure(let failure): throw failure
                }
            }
        }
        var dispatchToken: DispatchToken { users.dispatchToken }
    }

    /// A store whose init registers the store it depends on.
    final class MessagesStore: RegisteredStore {
        let current: CurrentUserStore
        let log: FluxStore<Action>
        let seen = Log()
        init(dispatcher: Dispatcher<Action>) {
            current = dispatcher.registerStore(CurrentUserStore.self)
            let current = current, seen = seen
            log = FluxStore(dispatcher: dispatcher) { [unowned dispatcher] _, _ in
                try dispatcher.waitFor([current.dispatchToken])
                seen.append(current.users.state ?? "nobody")
            }
        }
        var dispatchToken: DispatchToken { log.dispatchToken }
    }

    final class Owner: Sendable {
        let log = Log()
    }

    @Test func aClassIsCreatedOnceAndHandedBackByClass() throws {
        let d = Dispatcher<Action>()
        #expect(d.store(CurrentUserStore.self) == nil)
        let first = d.registerStore(CurrentUserStore.self)
        #expect(d.registerStore(CurrentUserStore.self) === first)
        #expect(d.store(CurrentUserStore.self) === first)
        let messages = d.registerStore(MessagesStore.self)
        #expect(messages.current === first, "a dependency registered from an init is the same instance")
        #expect(d.stores.map { ObjectIdentifier($0) } == [ObjectIdentifier(first), ObjectIdentifier(messages)])
        try d.dispatch(.refreshed(.success("ada")))
        #expect(messages.seen.all == ["ada"], "waitFor on a registered store's token")
        d.removeAllStores()
    }

    @Test func aDependencyRegisteredByAnInitComesFirstInStores() {
        // The order is the one their creation finished in: MessagesStore's
        // init registers CurrentUserStore, which is made first.
        let d = Dispatcher<Action>()
        let messages = d.registerStore(MessagesStore.self)
        let order = d.stores.map { ObjectIdentifier($0) }
        #expect(order == [ObjectIdentifier(messages.current), ObjectIdentifier(messages)])
        d.removeAllStores()
    }

    @Test func eachDispatcherHasItsOwn() {
        let a = Dispatcher<Action>(), b = Dispatcher<Action>()
        #expect(a.registerStore(CurrentUserStore.self) !== b.registerStore(CurrentUserStore.self))
        a.removeAllStores()
        b.removeAllStores()
    }

    @Test func removeAllStoresFreesTheStoresAndTheDispatcher() {
        weak var weakDispatcher: Dispatcher<Action>?
        weak var weakStore: CurrentUserStore?
        do {
            let d = Dispatcher<Action>()
            weakDispatcher = d
            weakStore = d.registerStore(CurrentUserStore.self)
            d.removeAllStores()
            #expect(d.stores.isEmpty && d.store(CurrentUserStore.self) == nil)
        }
        #expect(weakStore == nil)
        #expect(weakDispatcher == nil)
    }

    /// Counts its instances; used by one test only (tests run in parallel).
    final class Counted: RegisteredStore {
        static let made = Atomic<Int>(0)
        let token: DispatchToken
        init(dispatcher: Dispatcher<Action>) {
            Self.made.add(1, ordering: .relaxed)
            pause(milliseconds: 1)  // widen the window for the other thread
            token = dispatcher.register { _ in }
        }
        var dispatchToken: DispatchToken { token }
    }

    @Test func twoThreadsRegisteringAtOnceGetOneInstance() {
        for _ in 0..<50 {
            let d = Dispatcher<Action>()
            let before = Counted.made.load(ordering: .relaxed)
            let got = Log()
            let threads = (0..<2).map { _ in
                Thread { got.append("\(ObjectIdentifier(d.registerStore(Counted.self)))") }
            }
            threads.forEach { $0.join() }
            #expect(got.all.count == 2 && Set(got.all).count == 1)
            #expect(Counted.made.load(ordering: .relaxed) - before == 1)
            d.removeAllStores()
        }
    }

    @Test func registeredDuringADispatchItTakesPartFromTheNext() throws {
        let d = Dispatcher<Action>()
        let registered = Box<CurrentUserStore?>(nil)
        d.register { [unowned d] _ in
            if registered.value == nil { registered.value = d.registerStore(CurrentUserStore.self) }
        }
        try d.dispatch(.refreshed(.success("first")))
        #expect(registered.value?.users.state == nil)
        try d.dispatch(.refreshed(.success("second")))
        #expect(registered.value?.users.state == "second")
        d.removeAllStores()
    }

    @Test func anOwnerBoundListenerDoesNotKeepItsOwnerAndStopsWhenItGoes() throws {
        let d = Dispatcher<Action>()
        let store = d.registerStore(CurrentUserStore.self)
        let heard = Log()
        weak var weakOwner: Owner?
        do {
            let owner = Owner()
            weakOwner = owner
            store.users.addListener(owner: owner) { owner in
                owner.log.append("refresh")
                heard.append("ran")
            }
            try d.dispatch(.refreshed(.success("a")))
            #expect(owner.log.all == ["refresh"])
        }
        #expect(weakOwner == nil, "the store held the owner weakly")
        try d.dispatch(.refreshed(.success("b")))
        #expect(heard.all == ["ran"], "gone: the listener never runs again")
        #expect(store.users.core.listenerCount == 0, "and it was removed")
        d.removeAllStores()
    }

    // An owner-bound listener whose owner went used to stay until the
    // store's next change: one that captured its store kept the store, and
    // so the dispatcher, alive after removeAllStores().
    @Test func removeAllStoresFreesAStoreWhoseGoneOwnersListenerCapturedIt() {
        weak var weakDispatcher: Dispatcher<Action>?
        weak var weakStore: ReduceStore<String?, Action>?
        do {
            let d = Dispatcher<Action>()
            weakDispatcher = d
            let users = d.registerStore(CurrentUserStore.self).users
            weakStore = users
            do {
                let owner = Owner()
                users.addListener(owner: owner) { _ in _ = users.state }
            }
            d.removeAllStores()
        }
        #expect(weakStore == nil, "the listener, and with it the store, was let go of")
        #expect(weakDispatcher == nil)
    }

    @Test func aGoneOwnersListenerIsReleasedAtTheNextDispatchThoughNothingChanged() throws {
        let d = Dispatcher<Action>()
        let users = d.registerStore(CurrentUserStore.self).users
        weak var captured: Owner?
        do {
            let owner = Owner(), object = Owner()
            captured = object
            users.addListener(owner: owner) { _ in _ = object }
        }
        #expect(captured != nil, "nothing looked yet")
        try d.dispatch(.other)
        #expect(captured == nil, "released by the dispatch, which changed nothing")
        #expect(users.core.listenerCount == 0)
        d.removeAllStores()
    }

    @Test func addListenerRemovesTheListenersOfGoneOwners() {
        let d = Dispatcher<Action>()
        let users = d.registerStore(CurrentUserStore.self).users
        do {
            let owner = Owner()
            users.addListener(owner: owner) { _ in }
        }
        users.addListener {}
        #expect(users.core.listenerCount == 1, "only the new one")
        d.removeAllStores()
    }

    @Test func removingAnOwnerBoundListenerByHandKeepsNothingOfIt() throws {
        let d = Dispatcher<Action>()
        let users = d.registerStore(CurrentUserStore.self).users
        let owner = Owner()
        for _ in 0..<3 { try users.addListener(owner: owner) { _ in }.remove() }
        #expect(users.ownerCount == 0, "nothing kept for a listener removed by hand")
        #expect(throws: FluxError.self) {
            let sub = users.addListener(owner: owner) { _ in }
            try sub.remove()
            try sub.remove()
        }
        withExtendedLifetime(owner) {}
        d.removeAllStores()
    }

    @Test func anOwnerCollectedDuringAnEmitIsSkippedFromThenOn() throws {
        let d = Dispatcher<Action>()
        let store = d.registerStore(CurrentUserStore.self)
        let heard = Log()
        let holder = Box<Owner?>(Owner())
        // The first listener lets go of the owner the second is bound to.
        store.users.addListener { holder.value = nil }
        store.users.addListener(owner: holder.value!) { _ in heard.append("bound") }
        try d.dispatch(.refreshed(.success("a")))
        try d.dispatch(.refreshed(.success("b")))
        #expect(heard.all.isEmpty)
        d.removeAllStores()
    }

    @Test func aChangeCanCarryAnError() throws {
        let d = Dispatcher<Action>()
        let users = ReduceStore<String?, Action>(dispatcher: d, initialState: "ada") { _, _ in nil }
        let seen = Box<[String]>([])
        let store = FluxStore<Action>(dispatcher: d) { store, action in
            if case .refreshed(.failure(let failure)) = action { try store.emitChange(error: failure) }
        }
        store.addListener { seen.value.append(store.error.map { "\($0)" } ?? "no error") }
        #expect(store.error == nil, "outside an emit: nil")
        try d.dispatch(.refreshed(.failure(Failure(reason: "offline"))))
        #expect(
            seen.value == ["\(Failure(reason: "offline"))"], "listeners ran though nothing changed, and saw the error")
        #expect(store.error == nil, "after the emit: nil again")
        try d.dispatch(.other)
        #expect(seen.value.count == 1)
        #expect(fluxCode { try store.emitChange(error: Failure(reason: "x")) } == .notDispatching)
        #expect(store.error == nil, "a refused emit keeps no error")
        _ = users
    }

    // `error` used to be set from emitChange(error:) on, so a store that
    // ran meanwhile (here through waitFor, before the emit) saw it.
    @Test("a change's error is seen only while its own emit runs")
    func anErrorIsSeenOnlyDuringItsEmit() throws {
        let d = Dispatcher<Action>()
        let other = Box<FluxStore<Action>?>(nil)
        let store = FluxStore<Action>(dispatcher: d) { store, action in
            if case .refreshed(.failure(let failure)) = action {
                try store.emitChange(error: failure)
                // The other store handles the payload, and emits, now.
                try d.waitFor([other.value!.dispatchToken])
            }
        }
        other.value = FluxStore<Action>(dispatcher: d) { store, _ in try store.emitChange() }
        let seen = Log()
        other.value!.addListener { [unowned store] in seen.append("other: \(store.error == nil ? "none" : "set")") }
        store.addListener { [unowned store] in seen.append("own: \(store.error == nil ? "none" : "set")") }
        try d.dispatch(.refreshed(.failure(Failure(reason: "offline"))))
        #expect(seen.all == ["other: none", "own: set"])
        #expect(store.error == nil)
    }

    /// An error whose deinit reads the store's error.
    final class ReadsTheErrorAsItGoes: Error, Sendable {
        let store = Box<FluxStore<Action>?>(nil)
        deinit { _ = store.value?.error }
    }

    // The error used to be dropped inside the store's error lock: reading
    // `error` from its deinit locked it again, and trapped.
    @Test("an error's deinit may read the store's error")
    func anErrorsDeinitMayReadTheError() throws {
        let d = Dispatcher<Action>()
        let store = FluxStore<Action>(dispatcher: d) { store, action in
            if case .other = action {
                let error = ReadsTheErrorAsItGoes()
                error.store.value = store
                try store.emitChange(error: error)
            }
        }
        let seen = Log()
        store.addListener { [unowned store] in seen.append(store.error == nil ? "none" : "set") }
        try d.dispatch(.other)
        #expect(seen.all == ["set"])
        #expect(store.error == nil)
    }

    @Test func aReduceStoreCanEmitAnErrorOnAnUnchangedState() throws {
        let d = Dispatcher<Action>()
        let box = Box<ReduceStore<Int, Action>?>(nil)
        let store = ReduceStore<Int, Action>(dispatcher: d, initialState: 0) { n, action in
            if case .refreshed(.failure(let failure)) = action { try box.value!.emitChange(error: failure) }
            return n
        }
        box.value = store
        let seen = Log()
        store.addListener { seen.append(store.error == nil ? "none" : "error") }
        try d.dispatch(.refreshed(.failure(Failure(reason: "x"))))
        try d.dispatch(.other)
        #expect(seen.all == ["error"])
        box.value = nil
    }

    // emitChange(error:)'s error lasts only while its own emit runs: when
    // the handling then fails, no listener runs and nothing is left over for
    // a dispatch queued behind the failed one (its callbacks read nil).
    @Test func anErrorWhoseEmitAFailureKeptFromRunningIsNeverSeen() throws {
        let d = Dispatcher<Action>()
        let read = Log()
        let box = Box<FluxStore<Action>?>(nil)
        // Registered before the store: reads its error in the queued dispatch.
        d.register { action in
            if case .other = action { read.append(box.value!.error == nil ? "none" : "error") }
        }
        let store = FluxStore<Action>(dispatcher: d) { [unowned d] store, action in
            if case .refreshed(.failure(let failure)) = action {
                try store.emitChange(error: failure)
                try d.enqueue(.other)
                throw Boom(id: 1)
            }
        }
        box.value = store
        let heard = Log()
        store.addListener { heard.append("listener") }
        #expect(throws: Boom(id: 1)) { try d.dispatch(.refreshed(.failure(Failure(reason: "x")))) }
        #expect(heard.all.isEmpty, "the failure kept the emit from running")
        #expect(read.all == ["none"])
        #expect(store.error == nil)
        box.value = nil
    }

    // `error` from another thread is nil or the error of an emit running
    // during the read -- never that of a handling whose emit has not begun.
    // It used to test whether an emit ran, then read the error: a reader
    // preempted between the two, across the end of one emit and the next
    // handling's emitChange(error:), returned the next error early. Here
    // each handling sets its error, then pauses before its emit begins, and
    // more readers than cores (so they are preempted) check every error
    // they read against the last handling that has finished its reduce.
    @Test func errorReadOnAnotherThreadIsNeverOneWhoseEmitHasNotBegun() throws {
        struct Numbered: Error { let n: Int }
        final class Progress: Sendable {
            let reduced = Atomic(0)  // the last handling whose reduce returned
            let stop = Atomic(false)
            let early = Atomic(0)  // errors read before their emit began
            let seen = Atomic(0)  // errors read
        }
        let d = Dispatcher<Int>()
        let progress = Progress()
        let store = FluxStore<Int>(dispatcher: d) { store, n in
            try store.emitChange(error: Numbered(n: n))
            pause(microseconds: 50)  // the error is set, the emit has not begun
            progress.reduced.store(n, ordering: .sequentiallyConsistent)
        }
        store.addListener { pause(microseconds: 50) }  // the emit lasts: readers find it running
        let readers = (0..<6).map { _ in
            Thread {
                while !progress.stop.load(ordering: .relaxed) {
                    guard let error = store.error as? Numbered else { continue }
                    progress.seen.add(1, ordering: .relaxed)
                    if progress.reduced.load(ordering: .sequentiallyConsistent) < error.n {
                        progress.early.add(1, ordering: .relaxed)
                    }
                }
            }
        }
        let end = ContinuousClock.now + .seconds(2)
        var n = 0
        while ContinuousClock.now < end {
            n += 1
            try d.dispatch(n)
        }
        progress.stop.store(true, ordering: .relaxed)
        for reader in readers { reader.join() }
        #expect(progress.seen.load(ordering: .relaxed) > 0, "the readers saw emits run")
        #expect(progress.early.load(ordering: .relaxed) == 0, "an error read before its emit began")
    }
}

/// In an exit test's child: ends it with `code` once `milliseconds` have
/// passed, so that a child still waiting then fails the expectation
/// instead of hanging the test.
private func exitIfStillRunning(after milliseconds: UInt32, with code: Int32) {
    _ = Thread {
        pause(milliseconds: milliseconds)
        exit(code)
    }
}

/// Two store classes whose inits register each other, each first waiting
/// (at most 2 s) until both inits are running, so that two threads
/// registering one each meet in the middle.
private let cycleBothInside = Gate()
private let cycleArrived = Guarded(0)

private func arriveAndWaitForTheOther() {
    let arrived = cycleArrived.withLock { count in
        count += 1
        return count
    }
    if arrived == 2 { cycleBothInside.open() }
    _ = cycleBothInside.wait(seconds: 2)
}

final class CycleA: RegisteredStore {
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<Int>) {
        arriveAndWaitForTheOther()
        dispatchToken = dispatcher.registerStore(CycleB.self).dispatchToken
    }
}

final class CycleB: RegisteredStore {
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<Int>) {
        arriveAndWaitForTheOther()
        dispatchToken = dispatcher.registerStore(CycleA.self).dispatchToken
    }
}

@Suite struct StoreClassCycleTests {
    // Across two threads each waited for the other's class for good.
    @Test("a cycle of store classes across two threads traps, not waits for good", .timeLimit(.minutes(1)))
    func aCycleAcrossTwoThreadsTraps() async {
        await #expect(processExitsWith: .failure) {
            let d = Dispatcher<Int>()
            let other = Thread { _ = d.registerStore(CycleB.self) }
            _ = d.registerStore(CycleA.self)
            other.join()
        }
    }

    @Test("a cycle of store classes on one thread traps")
    func aCycleOnOneThreadTraps() async {
        await #expect(processExitsWith: .failure) {
            cycleBothInside.open()
            _ = Dispatcher<Int>().registerStore(CycleA.self)
        }
    }
}

/// Two store classes on two dispatchers whose inits register each other
/// (A on `crossCycle.ints` registers B on `crossCycle.strings`, and B
/// registers A back), each first waiting until both inits are running.
private let crossCycle = (ints: Dispatcher<Int>(), strings: Dispatcher<String>())
private let crossCycleBothInside = Gate()
private let crossCycleArrived = Guarded(0)

private func crossCycleArriveAndWaitForTheOther() {
    let arrived = crossCycleArrived.withLock { count in
        count += 1
        return count
    }
    if arrived == 2 { crossCycleBothInside.open() }
    _ = crossCycleBothInside.wait(seconds: 2)
}

final class CrossCycleA: RegisteredStore {
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<Int>) {
        crossCycleArriveAndWaitForTheOther()
        _ = crossCycle.strings.registerStore(CrossCycleB.self)
        dispatchToken = dispatcher.register { _ in }
    }
}

final class CrossCycleB: RegisteredStore {
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<String>) {
        crossCycleArriveAndWaitForTheOther()
        _ = crossCycle.ints.registerStore(CrossCycleA.self)
        dispatchToken = dispatcher.register { _ in }
    }
}

@Suite struct StoreClassCrossDispatcherCycleTests {
    // Each registry saw only the waits for its own classes: a thread waiting
    // in the other dispatcher's registry was invisible, so two threads each
    // creating a class that registers the other's, on two dispatchers,
    // waited for each other for good. (The child exits 0 if it still waits
    // after 10 s: the expectation then fails instead of hanging.)
    @Test("a cycle of store classes across two dispatchers and two threads traps, not waits for good")
    func aCycleAcrossTwoDispatchersTraps() async {
        await #expect(processExitsWith: .failure) {
            exitIfStillRunning(after: 10_000, with: 0)
            let other = Thread { _ = crossCycle.strings.registerStore(CrossCycleB.self) }
            _ = crossCycle.ints.registerStore(CrossCycleA.self)
            other.join()
        }
    }
}

/// A store class whose init dispatches `waitCycle.d` once the thread that
/// dispatches it waits for this class (`initDispatchesLast`), or before that
/// thread asks for the class (`initDispatchesFirst`); `waitCycle.refused`
/// is whether the init's dispatch was refused as a deadlock.
private final class WaitCycle: Sendable {
    let d = Dispatcher<Int>()
    let initEntered = Gate()
    let initDispatchesLast = Atomic(true)
    let dispatchingThread = Atomic<UInt>(0)
    let initThread = Atomic<UInt>(0)
    let refused = Atomic(false)
}
private let waitCycle = WaitCycle()

final class DispatchingInit: RegisteredStore {
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<Int>) {
        waitCycle.initThread.store(currentThreadID(), ordering: .releasing)
        waitCycle.initEntered.open()
        // Until the other thread runs its dispatch, and, dispatching last,
        // waits in registerStore for this class.
        let last = waitCycle.initDispatchesLast.load(ordering: .acquiring)
        while true {
            let thread = waitCycle.dispatchingThread.load(ordering: .acquiring)
            if thread != 0 && (!last || DispatchWaits.shared.isWaiting(thread)) { break }
            pause(microseconds: 100)
        }
        do {
            try dispatcher.dispatch(1)
        } catch let error as FluxError where error.code == .alreadyDispatching {
            waitCycle.refused.store(true, ordering: .releasing)
        } catch {}
        dispatchToken = dispatcher.register { _ in }
    }
}

/// Dispatches 0 on a new thread; its callback registers DispatchingInit
/// (which `other` is making), after `before` returns.
private func dispatchAndRegisterWhileAnotherThreadMakesIt(before: @escaping @Sendable () -> Void) {
    let other = Thread { _ = waitCycle.d.registerStore(DispatchingInit.self) }
    _ = waitCycle.initEntered.wait()
    let token = waitCycle.d.register { payload in
        guard payload == 0 else { return }
        waitCycle.dispatchingThread.store(currentThreadID(), ordering: .releasing)
        before()
        _ = waitCycle.d.registerStore(DispatchingInit.self)
    }
    try? waitCycle.d.dispatch(0)
    try? waitCycle.d.unregister(token)
    other.join()
}

@Suite struct StoreCreationDispatchCycleTests {
    // A thread dispatching D waited in registerStore for a class whose init,
    // on another thread, dispatched D: each waited for the other for good.
    // The waits are one graph now: the init's dispatch is refused. (The
    // child exits 1 if it still waits after 10 s.)
    @Test("an init's dispatch that would wait for a thread waiting for its class is refused, not a hang")
    func anInitDispatchClosingACycleIsRefused() async {
        await #expect(processExitsWith: .success) {
            exitIfStillRunning(after: 10_000, with: 1)
            dispatchAndRegisterWhileAnotherThreadMakesIt(before: {})
            exit(waitCycle.refused.load(ordering: .acquiring) && waitCycle.d.store(DispatchingInit.self) != nil ? 0 : 2)
        }
    }

    // The other way round: the init waits for the dispatch first; the
    // registerStore that would close the cycle traps, as a cycle of store
    // classes does.
    @Test("registerStore that would wait for an init waiting for this thread's dispatch traps, not hangs")
    func aRegisterStoreClosingACycleTraps() async {
        await #expect(processExitsWith: .failure) {
            exitIfStillRunning(after: 10_000, with: 0)
            waitCycle.initDispatchesLast.store(false, ordering: .releasing)
            dispatchAndRegisterWhileAnotherThreadMakesIt(before: {
                // Until the init waits for this thread's dispatch.
                while !DispatchWaits.shared.isWaiting(waitCycle.initThread.load(ordering: .acquiring)) {
                    pause(microseconds: 100)
                }
            })
        }
    }
}

/// A store class whose init returns once the thread dispatching
/// `staleWait.d` waits in registerStore for it.
private final class StaleWait: Sendable {
    let initEntered = Atomic(false)
    let dispatchingThread = Atomic<UInt>(0)
}
private let staleWait = StaleWait()

final class MadeWhileAnotherWaits: RegisteredStore {
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<Int>) {
        staleWait.initEntered.store(true, ordering: .releasing)
        while true {
            let thread = staleWait.dispatchingThread.load(ordering: .acquiring)
            if thread != 0 && DispatchWaits.shared.isWaiting(thread) { break }
            pause(microseconds: 50)
        }
        dispatchToken = dispatcher.register { _ in }
    }
}

@Suite struct StoreCreationWaitEndTests {
    // A creation's waiters are woken, not yet awake, when its init returns:
    // their waits end with the creation, so a dispatch the creator then
    // makes waits for theirs instead of being refused as a deadlock.
    @Test func aDispatchRightAfterACreationIsNotRefusedByItsWaitersWaits() throws {
        for _ in 0..<200 {
            let d = Dispatcher<Int>()
            staleWait.initEntered.store(false, ordering: .releasing)
            staleWait.dispatchingThread.store(0, ordering: .releasing)
            let refused = Guarded(false)
            let maker = Thread {
                _ = d.registerStore(MadeWhileAnotherWaits.self)
                do { try d.dispatch(1) } catch { refused.withLock { $0 = true } }
            }
            d.register { payload in
                guard payload == 0 else { return }
                // The other thread makes it: this one waits for it.
                while !staleWait.initEntered.load(ordering: .acquiring) { pause(microseconds: 50) }
                staleWait.dispatchingThread.store(currentThreadID(), ordering: .releasing)
                _ = d.registerStore(MadeWhileAnotherWaits.self)
            }
            try d.dispatch(0)
            maker.join()
            #expect(!refused.withLock { $0 })
            d.removeAllStores()
        }
    }
}

/// Records whether its init's thread counted as dispatching.
private final class AsksWhetherDispatching: RegisteredStore {
    static let sawDispatching = Guarded<Bool?>(nil)
    let token: DispatchToken
    init(dispatcher: Dispatcher<Int>) {
        let inside = DispatchingThreads.shared.containsCurrentThread()
        Self.sawDispatching.withLock { $0 = inside }
        token = dispatcher.register { _ in }
    }
    var dispatchToken: DispatchToken { token }
}

@Suite struct StoreCreationCountsAsDispatchingTests {
    // Flux's sinks and State-type dispatches ask this before they wait for
    // another thread, which may be waiting in registerStore for the class
    // this thread's init makes: such a thread hands its work over instead.
    @Test func aThreadRunningAnInitCountsAsDispatchingUntilItReturns() {
        let d = Dispatcher<Int>()
        _ = d.registerStore(AsksWhetherDispatching.self)
        #expect(AsksWhetherDispatching.sawDispatching.withLock { $0 } == true)
        #expect(!DispatchingThreads.shared.containsCurrentThread())
        d.removeAllStores()
    }
}
