import Dispatch
import Flux
import XCTest

@testable import FluxCore  // Guarded: a pthread mutex, which ThreadSanitizer sees

// Probes of what VUEFLUX.md and the doc comments promise about lifetimes,
// threads and re-entrancy, beyond what the ported VueFlux tests cover.
final class ContractProbeTests: XCTestCase {
    final class Owner {}

    // Sink's deinit: "The observers go with the sink, not with its
    // subscriptions." A held disposable must not keep the observer (and what
    // it captures) alive once the sink is gone: otherwise an object that keeps
    // its own subscription and whose observer captures it never goes.
    func testHeldSinkSubscriptionLetsObserverGoWithTheSink() {
        var sink: Sink<Int>? = Sink<Int>()
        var owner: Owner? = Owner()
        weak let weakOwner = owner
        let held = sink!.signal.observe { [owner] _ in _ = owner }
        owner = nil
        XCTAssertNotNil(weakOwner)

        sink = nil

        XCTAssertNil(weakOwner)
        held.dispose()
        XCTAssertTrue(held.isDisposed)
    }

    func testHeldVariableSubscriptionLetsObserverGoWithTheVariable() {
        var variable: Variable<Int>? = Variable(0)
        var owner: Owner? = Owner()
        weak let weakOwner = owner
        let held = variable!.signal.observe { [owner] _ in _ = owner }
        owner = nil
        XCTAssertNotNil(weakOwner)

        variable = nil

        XCTAssertNil(weakOwner)
        withExtendedLifetime(held) {}
    }

    func testHeldMappedSubscriptionLetsObserverGoWithTheSink() {
        var sink: Sink<Int>? = Sink<Int>()
        var owner: Owner? = Owner()
        weak let weakOwner = owner
        let held = sink!.signal.map { $0 + 1 }.observe(on: .immediate).observe { [owner] _ in _ = owner }
        owner = nil
        XCTAssertNotNil(weakOwner)

        sink = nil

        XCTAssertNil(weakOwner)
        withExtendedLifetime(held) {}
    }

    // The same for an observer that joined after the deliveries in progress
    // (observed inside an observer of the variable).
    func testHeldJoinedLaterSubscriptionLetsObserverGoWithTheVariable() {
        var variable: Variable<Int>? = Variable(0)
        var owner: Owner? = Owner()
        weak let weakOwner = owner
        var held: (any Disposable)?
        var seen = [Int]()
        variable!.signal.observe { [unowned variable = variable!] value in
            if value == 1 {
                held = variable.signal.observe { [owner] in
                    _ = owner
                    seen.append($0)
                }
            }
        }
        variable!.value = 1
        owner = nil
        XCTAssertEqual(seen, [1])
        XCTAssertNotNil(weakOwner)

        variable = nil

        XCTAssertNil(weakOwner)
        withExtendedLifetime(held) {}
    }

    // The retain cycle a careful user writes: an object keeps its
    // subscriptions in a scope, and its observer captures the object.
    func testObjectKeepingItsOwnSubscriptionGoesWhenTheSinkGoes() {
        final class Screen {
            let scope = DisposableScope()
            var last = 0
            init(_ signal: Signal<Int>) {
                scope += signal.observe { value in self.last = value }
            }
        }
        var sink: Sink<Int>? = Sink<Int>()
        var screen: Screen? = Screen(sink!.signal)
        weak let weakScreen = screen
        sink!.send(value: 3)
        XCTAssertEqual(screen?.last, 3)
        screen = nil
        XCTAssertNotNil(weakScreen)  // the sink's observer holds it, as in VueFlux

        sink = nil

        XCTAssertNil(weakScreen)
    }

    // Scoped observing: once the object and the sink are both gone, nothing
    // should keep the observer's captures.
    func testScopedObserverGoesWhenObjectAndSinkAreGone() {
        final class Object {}
        var sink: Sink<Int>? = Sink<Int>()
        var object: Object? = Object()
        var owner: Owner? = Owner()
        weak let weakOwner = owner
        sink!.signal.observe(duringScopeOf: object!) { [owner] _ in _ = owner }
        owner = nil
        object = nil
        sink = nil

        XCTAssertNil(weakOwner)
    }

    // MARK: probes expected to hold

    func testDisposableAddedToScopeDuringItsDisposeIsDisposed() {
        let scope = DisposableScope()
        let late = AnyDisposable()
        scope += AnyDisposable { scope += late }
        scope.dispose()
        XCTAssertTrue(late.isDisposed)
    }

    func testAnyDisposableDisposedFromInsideItsOwnClosureRunsOnce() {
        var runs = 0
        var disposable: AnyDisposable?
        disposable = AnyDisposable {
            runs += 1
            disposable?.dispose()
        }
        disposable!.dispose()
        XCTAssertEqual(runs, 1)
    }

    func testVariableSetInsideItsObserverIsSeenInOneOrderByAll() {
        let variable = Variable(0)
        var a = [Int](), b = [Int]()
        variable.signal.observe { v in
            a.append(v)
            if v == 1 { variable.value = 2 }
        }
        variable.signal.observe { v in b.append(v) }
        variable.value = 1
        XCTAssertEqual(a, [0, 1, 2])
        XCTAssertEqual(b, [0, 1, 2])
        XCTAssertEqual(variable.value, 2)
    }

    func testRecursiveSharedDispatchReachesEveryStore() {
        var storeCount = 0
        var commits = 0
        var stores: [Store<CallbackState>] = []
        for _ in 0..<3 {
            stores.append(
                callbackStore {
                    commits += 1
                    if commits == 1 { Store<CallbackState>.actions.dispatch(action: ()) }
                })
            storeCount += 1
        }
        Store<CallbackState>.actions.dispatch(action: ())
        XCTAssertEqual(commits, 6)
        withExtendedLifetime(stores) {}
    }

    func testBinderOnQueueNeverCallsBindingAfterTargetIsGone() {
        final class Target {
            var value = 0
        }
        let queue = DispatchQueue(label: "hostile.binder")
        let sink = Sink<Int>()
        let calls = Guarded(0)
        for _ in 0..<200 {
            var target: Target? = Target()
            let binder = Binder<Int>(target: target!) { _, _ in calls.withLock { $0 += 1 } }
            queue.suspend()
            sink.signal.bind(to: binder, on: .queue(queue))
            sink.send(value: 1)
            target = nil
            queue.resume()
            queue.sync {}
        }
        XCTAssertEqual(calls.withLock { $0 }, 0)
    }

    func testMainThreadExecutorKeepsCallOrderAcrossThreads() {
        let executor = Executor.mainThread
        let order = Guarded([Int]())
        let expectation = self.expectation(description: "done")
        let gate = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            executor.execute { order.withLock { $0.append(1) } }
            gate.signal()
        }
        gate.wait()
        executor.execute { order.withLock { $0.append(2) } }
        executor.execute {
            order.withLock { $0.append(3) }
            expectation.fulfill()
        }
        waitForExpectations(timeout: 5)
        XCTAssertEqual(order.withLock { $0 }, [1, 2, 3])
    }

    func testVariableSetInsideInitialCallbackReachesEveryObserverInOrder() {
        let variable = Variable(0)
        var a = [Int](), b = [Int]()
        variable.signal.observe { a.append($0) }
        variable.signal.observe { v in
            b.append(v)
            if v == 0 { variable.value = 5 }
        }
        XCTAssertEqual(a, [0, 5])
        XCTAssertEqual(b, [0, 5])
        XCTAssertEqual(variable.value, 5)
    }

    func testStoreReleasedInsideItsOwnCommitGetsNoMoreCommits() {
        var commits = 0
        var store: Store<CallbackState>?
        store = callbackStore {
            commits += 1
            let actions = store!.actions
            store = nil
            actions.dispatch(action: ())
            Store<CallbackState>.actions.dispatch(action: ())
        }
        store!.actions.dispatch(action: ())
        XCTAssertNil(store)
        XCTAssertEqual(commits, 1)
    }

    // Held subscriptions disposed on one thread while their sinks go on
    // another: the cancel made in `unsubscribe` races with `close`.
    func testDisposingHeldSubscriptionsWhileTheirSinksGo() {
        for _ in 0..<500 {
            let sinkBox = Guarded<Sink<Int>?>(Sink<Int>())
            let received = Guarded(0)
            let disposables = (0..<8).map { _ in
                sinkBox.withLock { $0!.signal.observe { _ in received.withLock { $0 += 1 } } }
            }
            let variable = Guarded<Variable<Int>?>(Variable(0))
            let variableDisposables = (0..<8).map { _ in
                variable.withLock { $0!.signal.observe { _ in } }
            }
            DispatchQueue.concurrentPerform(iterations: 2) { thread in
                if thread == 0 {
                    sinkBox.withLock { $0?.send(value: 1) }
                    _ = sinkBox.exchange(nil)
                    _ = variable.exchange(nil)
                } else {
                    disposables.forEach { $0.dispose() }
                    variableDisposables.forEach { $0.dispose() }
                }
            }
            XCTAssertTrue(disposables.allSatisfy(\.isDisposed))
        }
    }

    func testSubscriptionOrderSurvivesRemovalsAndAdditionsDuringADelivery() {
        let sink = Sink<Int>()
        var log = [String]()
        var disposables = [String: any Disposable]()
        for name in ["a", "b", "c"] {
            disposables[name] = sink.signal.observe { value in
                log.append("\(name)\(value)")
                if name == "a" && value == 1 {
                    disposables["b"]!.dispose()
                    disposables["d"] = sink.signal.observe { log.append("d\($0)") }
                    disposables["a"]!.dispose()
                    disposables["e"] = sink.signal.observe { log.append("e\($0)") }
                }
            }
        }
        sink.send(value: 1)
        sink.send(value: 2)
        XCTAssertEqual(log, ["a1", "c1", "c2", "d2", "e2"])
    }

    // Objects observed and bound from two threads while they die on both:
    // the registry, the weak checks and the scopes under ThreadSanitizer.
    func testScopedObservingAndBindingWhileObjectsDieOnTwoThreads() {
        final class Object {
            var value = 0
        }
        let sink = Sink<Int>()
        let variable = Variable(0)
        let calledAfterDeath = Guarded(0)
        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            for index in 0..<2_000 {
                if thread == 0 {
                    sink.send(value: index)
                    variable.value = index
                } else {
                    let object = Guarded<Object?>(Object())
                    weak let weakObject = object.withLock { $0 }
                    let a = object.withLock { o in
                        sink.signal.observe(duringScopeOf: o!) { _ in
                            if weakObject == nil { calledAfterDeath.withLock { $0 += 1 } }
                        }
                    }
                    let b = object.withLock { o in
                        variable.signal.bind(to: o!, on: .immediate) { target, value in target.value = value }
                    }
                    _ = object.exchange(nil)
                    if index % 2 == 0 {
                        a.dispose()
                        b.dispose()
                    }
                }
            }
        }
        sink.send(value: -1)
        variable.value = -1
        XCTAssertEqual(calledAfterDeath.withLock { $0 }, 0)
    }

    // VUEFLUX.md 3 (a): once the object has deinitialized, the observer is
    // never called again. The object dies on one thread while another sends.
    func testScopedObserverIsNeverCalledAfterItsObjectDeinitializedOnAnotherThread() {
        final class Object {
            let gone: Guarded<Bool>
            init(_ gone: Guarded<Bool>) { self.gone = gone }
            deinit { gone.withLock { $0 = true } }
        }
        let sink = Sink<Int>()
        let violations = Guarded(0)
        let done = Guarded(false)
        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            if thread == 0 {
                while !done.withLock({ $0 }) {
                    sink.send(value: 0)
                }
            } else {
                for _ in 0..<60_000 {
                    let gone = Guarded(false)
                    let object = Guarded<Object?>(Object(gone))
                    object.withLock { object in
                        _ = sink.signal.observe(duringScopeOf: object!) { _ in
                            if gone.withLock({ $0 }) { violations.withLock { $0 += 1 } }
                        }
                    }
                    _ = object.exchange(nil)
                }
                done.withLock { $0 = true }
            }
        }
        XCTAssertEqual(violations.withLock { $0 }, 0)
    }

    // A replaced value's deinit reads and sets the variable: the value must
    // not be released under the variable's lock.
    func testReplacedValueDeinitMayUseTheVariable() {
        final class Box {
            let onDeinit: () -> Void
            init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
            deinit { onDeinit() }
        }
        let variable = Variable<Box?>(nil)
        var seen = [Bool]()
        variable.signal.observe { seen.append($0 != nil) }
        var reads = 0
        variable.value = Box {
            reads += variable.value == nil ? 0 : 1
            variable.value = nil
        }
        variable.value = Box {}
        XCTAssertEqual(reads, 1)
        XCTAssertNil(variable.value)
        XCTAssertEqual(seen, [false, true, true, false])
    }

    // Stores of one State type come and go on one thread while another
    // dispatches to all of them; one of them dispatches recursively.
    func testSharedDispatchWhileStoresComeAndGoOnAnotherThread() {
        let commits = Guarded(0)
        let done = Guarded(false)
        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            if thread == 0 {
                while !done.withLock({ $0 }) {
                    Store<CallbackState>.actions.dispatch(action: ())
                }
            } else {
                for _ in 0..<5_000 {
                    let depth = Guarded(0)
                    let store = callbackStore {
                        commits.withLock { $0 += 1 }
                        let outermost = depth.withLock { depth in
                            depth += 1
                            return depth == 1
                        }
                        if outermost {
                            Store<CallbackState>.actions.dispatch(action: ())
                        }
                        depth.withLock { $0 -= 1 }
                    }
                    store.actions.dispatch(action: ())
                }
                done.withLock { $0 = true }
            }
        }
        let before = commits.withLock { $0 }
        Store<CallbackState>.actions.dispatch(action: ())
        XCTAssertEqual(commits.withLock { $0 }, before)
        XCTAssertGreaterThanOrEqual(before, 10_000)
    }

    // Actions stay usable after the store is gone, reaching nothing; they
    // must not keep the state (or the mutations' captures) alive.
    func testActionsKeptAfterStoreDoNotKeepItsState() {
        var state: TestState? = TestState()
        weak let weakState = state
        var store: Store<TestState>? = .init(state: state!, mutations: .init(), executor: .queue(.globalDefault()))
        state = nil
        let actions = store!.actions
        store = nil
        actions.check()
        Store<TestState>.actions.check()
        XCTAssertNil(weakState)
    }

    // ScopeRegistry's doc: a dead object's entry is disposed when the table
    // is swept, so a sink that never sends again does not keep the observer.
    func testDeadObjectsObserverGoesAtTheRegistrysSweepWithoutAnotherSend() {
        final class Object {}
        let sink = Sink<Int>()
        var owner: Owner? = Owner()
        weak let weakOwner = owner
        var object: Object? = Object()
        sink.signal.observe(duringScopeOf: object!) { [owner] _ in _ = owner }
        owner = nil
        object = nil
        XCTAssertNotNil(weakOwner)  // no value has found the object gone yet

        let others = (0..<1_000).map { _ in Object() }
        for other in others {
            sink.signal.observe(duringScopeOf: other) { _ in }
        }

        XCTAssertNil(weakOwner)
    }

    // VUEFLUX.md 3 (b) with an executor that defers: the registration is
    // disposed by the send that finds the target gone, not later on the queue.
    func testBindingOnAQueueIsDisposedByTheSendThatFindsTheTargetGone() {
        final class Target {
            var value = 0
        }
        let queue = DispatchQueue(label: "hostile.binding")
        let sink = Sink<Int>()
        var target: Target? = Target()
        let disposable = sink.signal.bind(to: target!, \.value, on: .queue(queue))
        queue.suspend()
        target = nil
        sink.send(value: 1)
        XCTAssertTrue(disposable.isDisposed)
        queue.resume()
        queue.sync {}
    }
}

// MARK: VUEFLUX.md section 2, as it spells the API

// Every declaration of section 2, used with the labels and types given
// there, so that the build fails when a name or a signature drifts: a
// function reference carries the whole type (another label, parameter type,
// or a `throws` does not convert), `same` needs two spellings of one type,
// the `where State ==` / `where Value ==`
// extensions the generic parameters' names, the conformances below the
// protocols' requirements (a further requirement would leave them
// unsatisfied), and a call whose result is unused a `@discardableResult`
// (a warning otherwise: an error under `-warnings-as-errors`). The
// `@unchecked Sendable` marks are probed where Swift 6 checks them (this
// target is Swift 5 mode, where a missing conformance passes a `Sendable`
// requirement silently): support/swift-client, SendableProbe.swift.

private func same<T>(_: T.Type, _: T.Type) {}

private struct ProbeError: Error {}

private final class ProbeState: Flux.State {
    typealias Action = Int
    typealias Mutations = ProbeMutations
    var log: [Int] = []
}

private struct ProbeMutations: Flux.Mutations {
    typealias State = ProbeState
    func commit(action: ProbeState.Action, state: ProbeState) {
        state.log.append(action)
    }
}

// `open class Store`: subclassed outside the module, restating the conformance.
private final class ProbeStore: Store<ProbeState>, @unchecked Sendable {
    init() {
        super.init(state: .init(), mutations: .init(), executor: .immediate)
    }
}

private final class ProbeDisposable: Disposable {
    private(set) var isDisposed = false
    func dispose() { isDisposed = true }
}

private final class ProbeTarget {
    var value = 0
    var optional: Int?
}

extension Store where State == ProbeState {
    fileprivate var probeLog: [Int] { computed.state.log }
}
extension Actions where State == ProbeState {
    fileprivate func probe(_ value: Int) { dispatch(action: value) }
}
extension Computed where State == ProbeState {
    fileprivate var probeLog: [Int] { state.log }
}
extension AtomicReference where Value == Int {
    fileprivate var probeValue: Int { value }
}
extension Sink where Value == Int {
    fileprivate func probeSend() { send(value: 0) }
}
extension Signal where Value == Int {
    fileprivate var probeSignal: Signal<Int> { self }
}
extension Binder where Value == Int {
    fileprivate var probeBinder: Binder<Int> { self }
}
extension Variable where Value == Int {
    fileprivate var probeValue: Int { value }
}
extension Constant where Value == Int {
    fileprivate var probeValue: Int { value }
}

// The protocols' associated types, by name, and `State: AnyObject`.
private func probeStateRequirements<S: Flux.State>(
    _ state: S, _ mutations: S.Mutations, _ action: S.Action
) -> AnyObject {
    same(S.Mutations.State.self, S.self)
    same(S.Mutations.State.Action.self, S.Action.self)
    mutations.commit(action: action, state: state)
    return state
}

extension ContractProbeTests {
    func testTheAPIAsVUEFLUXmdSpellsIt() throws {
        // Store, State, Mutations, Actions, Computed
        let makeStore: (ProbeState, ProbeMutations, Executor) -> Store<ProbeState> =
            Store<ProbeState>.init(state:mutations:executor:)
        let store = makeStore(ProbeState(), ProbeMutations(), .immediate)
        let sharedActions: Actions<ProbeState> = Store<ProbeState>.actions
        let actions: Actions<ProbeState> = store.actions
        let computed: Computed<ProbeState> = store.computed
        let dispatch: (ProbeState.Action) -> Void = actions.dispatch(action:)
        dispatch(1)
        sharedActions.probe(2)
        let state: ProbeState = computed.state
        XCTAssertEqual(state.log, [1, 2])
        XCTAssertEqual(store.probeLog, [1, 2])
        XCTAssertEqual(computed.probeLog, [1, 2])
        let subclassed: Store<ProbeState> = ProbeStore()
        subclassed.actions.probe(3)
        XCTAssertEqual(subclassed.computed.probeLog, [3])
        XCTAssertTrue(probeStateRequirements(ProbeState(), ProbeMutations(), 4) is ProbeState)
        same(ProbeState.Mutations.self, ProbeMutations.self)
        same(ProbeMutations.State.self, ProbeState.self)

        // Executor (the module's, not _Concurrency's protocol)
        same(Executor.Context.self, ((@escaping () -> Void) -> Void).self)
        let _: Executor = Executor.immediate
        let _: Executor = Executor.mainThread
        let _: (DispatchQueue) -> Executor = Executor.queue(_:)
        let makeExecutor: (@escaping Executor.Context) -> Executor = Executor.init(_:)
        let executor = makeExecutor { function in function() }
        let execute: (@escaping () -> Void) -> Void = executor.execute(_:)
        var executed = false
        execute { executed = true }
        XCTAssertTrue(executed)

        // AtomicReference
        let makeReference: (Int, Bool) -> AtomicReference<Int> = AtomicReference<Int>.init(_:recursive:)
        let reference = AtomicReference(0)
        let recursive = makeReference(0, true)
        reference.value = 1
        let _: Int = reference.value
        let _: String = reference.synchronized { "\($0)" }
        reference.synchronized { $0 }
        reference.modify { $0 += 1 }
        reference.modify { $0 }
        let _: Int = reference.modify { $0 }
        let _: Int = reference.swap(3)
        reference.swap(4)
        XCTAssertThrowsError(try reference.synchronized { _ in throw ProbeError() })
        XCTAssertThrowsError(try reference.modify { _ in throw ProbeError() })
        recursive.synchronized { _ in _ = recursive.value }
        XCTAssertEqual(reference.probeValue, 4)

        // Disposable, AnyDisposable, DisposableScope
        let makeAnyDisposable: (@escaping () -> Void) -> AnyDisposable = AnyDisposable.init(_:)
        let anyDisposable = makeAnyDisposable {}
        let noop: AnyDisposable = AnyDisposable()
        let _: Bool = anyDisposable.isDisposed
        let _: any Disposable = anyDisposable
        let fromArray = DisposableScope([anyDisposable as any Disposable])
        let fromSequence = DisposableScope(CollectionOfOne<any Disposable>(noop))
        let scope = DisposableScope()
        scope.add(disposable: ProbeDisposable())
        scope += ProbeDisposable()
        let add: (any Disposable) -> Void = scope.add(disposable:)
        add(AnyDisposable())
        let plusEquals: (DisposableScope, any Disposable) -> Void = (+=)
        plusEquals(scope, AnyDisposable())
        let _: any Disposable = scope
        let _: Bool = scope.isDisposed
        fromArray.dispose()
        fromSequence.dispose()
        scope.dispose()
        XCTAssertTrue(anyDisposable.isDisposed && noop.isDisposed)

        // Sink, Signal
        let sink = Sink<Int>()
        let signal: Signal<Int> = sink.signal
        let send: (Int) -> Void = sink.send(value:)
        sink.probeSend()
        same(Signal<Int>.Producer.self, ((@escaping (Int) -> Void) -> any Disposable).self)
        let makeSignal: (@escaping Signal<Int>.Producer) -> Signal<Int> = Signal<Int>.init(_:)
        let produced = makeSignal { send in
            send(1)
            return AnyDisposable()
        }
        var received: [Int] = []
        let observe: (@escaping (Int) -> Void) -> any Disposable = produced.observe(_:)
        _ = observe { received.append($0) }
        XCTAssertEqual(received, [1])
        signal.observe { _ in }
        let target = ProbeTarget()
        let observeDuring: (AnyObject, @escaping (Int) -> Void) -> any Disposable =
            signal.observe(duringScopeOf:_:)
        _ = observeDuring(target) { _ in }
        signal.observe(duringScopeOf: target) { _ in }
        let makeBinder: (ProbeTarget, @escaping (ProbeTarget, Int) -> Void) -> Binder<Int> =
            Binder<Int>.init(target:binding:)
        let binder = makeBinder(target) { target, value in target.value = value }
        let bindSignal: (Signal<Int>, Executor) -> any Disposable = binder.bind(signal:on:)
        _ = bindSignal(signal, .immediate)
        _ = binder.probeBinder
        let bindBinder: (Binder<Int>, Executor) -> any Disposable = signal.bind(to:on:)
        _ = bindBinder(binder, .immediate)
        signal.bind(to: binder)
        signal.bind(to: binder, on: .immediate)
        let bindClosure: (ProbeTarget, Executor, @escaping (ProbeTarget, Int) -> Void) -> any Disposable =
            signal.bind(to:on:binding:)
        _ = bindClosure(target, .immediate) { target, value in target.value = value }
        signal.bind(to: target) { target, value in target.value = value }
        signal.bind(to: target, on: .immediate) { target, value in target.value = value }
        let bindKeyPath: (ProbeTarget, ReferenceWritableKeyPath<ProbeTarget, Int>, Executor) -> any Disposable =
            signal.bind(to:_:on:)
        _ = bindKeyPath(target, \.value, .immediate)
        signal.bind(to: target, \.value)
        signal.bind(to: target, \.value, on: .immediate)
        let bindOptional: (ProbeTarget, ReferenceWritableKeyPath<ProbeTarget, Int?>, Executor) -> any Disposable =
            signal.bind(to:_:on:)
        _ = bindOptional(target, \.optional, .immediate)
        signal.bind(to: target, \.optional)
        signal.bind(to: target, \.optional, on: .immediate)
        let map: (@escaping (Int) -> String) -> Signal<String> = signal.map
        let _: Signal<String> = map { "\($0)" }
        let _: Signal<String> = signal.map { "\($0)" }
        let observeOn: (Executor) -> Signal<Int> = signal.observe(on:)
        let _: Signal<Int> = observeOn(.immediate)
        send(7)
        XCTAssertEqual(target.value, 7)
        XCTAssertEqual(target.optional, 7)
        _ = signal.probeSignal

        // Variable, Constant
        let makeVariable: (Int) -> Variable<Int> = Variable<Int>.init(_:)
        let variable = makeVariable(0)
        let _: Constant<Int> = variable.constant
        let _: Signal<Int> = variable.signal
        variable.value = 1
        XCTAssertEqual(variable.probeValue, 1)
        let makeConstant: (Int) -> Constant<Int> = Constant<Int>.init(_:)
        let makeConstantOfVariable: (Variable<Int>) -> Constant<Int> = Constant<Int>.init(variable:)
        let constant = makeConstant(2)
        let _: Signal<Int> = constant.signal
        let _: Int = constant.value
        XCTAssertEqual(makeConstantOfVariable(variable).probeValue, 1)
        XCTAssertEqual(constant.probeValue, 2)
    }
}
