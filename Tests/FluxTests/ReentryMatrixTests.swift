import Testing

@testable import Flux

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The Swift counterpart of Tests/c/test-reentry.c and the Python binding's
// test_reentry.py: every public call (a column) made from every kind of user
// code the library runs (a row), on the same objects, each cell in a fresh
// world and a forked child of its own (a trap or a hang fails that cell
// only). A cell checks the call's documented outcome, that the objects still
// work afterwards, and that the world's objects are freed once it is dropped.
@Suite struct ReentryMatrixTests {
    // The whole matrix in a process of its own (an exit test): forking is
    // safe only while no other test's threads run (a lock one of them held
    // at the fork would hang the child), and ThreadSanitizer cannot fork a
    // process with other threads at all. The process writes each problem
    // as a line of its standard error, and exits 0 when it got through.
    @Test func everyCellHoldsWhatTheDocsSay() async throws {
        let result = try #require(
            await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                // What the children run, once here first: the runtime sets
                // up types at first use, under locks.
                warmUp()
                for row in MatrixRow.allCases {
                    for problem in problems(of: row) {
                        _ = "\(problem)\n".withCString { write(2, $0, strlen($0)) }
                    }
                }
                exit(0)
            })
        let text = String(decoding: result.standardErrorContent, as: UTF8.self)
        for line in text.split(separator: "\n") where line.contains(" × ") {
            Issue.record(Comment(rawValue: String(line)))
        }
    }
}

/// What the cells of `row` found wrong, one line each ("row × column: ...").
private func problems(of row: MatrixRow) -> [String] {
    var found: [String] = []
    for column in MatrixColumn.allCases {
        let hangs = expectsHang(row, column)
        let trap = expectedTrap(row, column)
        let (problems, signal) = runInChild(seconds: hangs ? 0.2 : 2, stderr: trap != nil) {
            runCell(row, column)
        }
        if let trap {
            let named = problems.contains { $0.contains(trap) }
            if signal?.hasPrefix("trapped") != true || !named {
                found.append("\(row) × \(column): no trap naming \"\(trap)\"")
            }
            continue
        }
        if hangs {
            if signal?.hasPrefix("hung") != true {
                found.append("\(row) × \(column): the documented deadlock did not happen")
            }
            continue
        }
        if let signal { found.append("\(row) × \(column): \(signal) \(problems.joined(separator: "; "))") }
        for problem in problems where signal == nil { found.append("\(row) × \(column): \(problem)") }
    }
    return found
}

// MARK: Rows and columns

enum MatrixRow: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case callback, callbackViaWaitFor, fluxOnDispatch, reduce, areEqual, listener, ownerListener, group
    case observerDispatchBegin, observerCallbackEnd, observerDispatchEnd
    case registeredStoreInit, mutation, executorFunction, sinkObserver, variableObserver, binding
    case disposal, scopeDisposal
    case deinitByUnregister, deinitByUnregisterInDispatch, deinitByListenerRemove, deinitByGroupRelease
    case deinitBySinkDispose, deinitByRemoveAllStores, deinitByScopeDispose
    case enqueueOnError, stateDeinit, emitErrorDeinit, registeredStoreInitInDispatch, variableFirstValue, producer
    case mapTransform, deinitBySweepInDispatch, deinitBySweepInAddListener, deinitBySweepInRemoveAllStores
    case loneOnDispatch, loneListener, deinitByObserverClear, deinitByObserverClearInDispatch
    case deinitByListenerRemoveInEmit, deinitBySinkDisposeInDelivery, deinitByVariableDisposeInDelivery
    case deinitOfQueuedOnError, deinitOfGroupReleasedInDispatch
    case deinitByDispatcherClose, deinitBySinkClose, deinitByVariableClose, deinitByVueStoreDeinit
    case deinitByVueStoreDeinitInMutation, scopeDeinitDisposal, observerCallbackBegin, observerWaitFor
    case deinitOfQueuedPayload, atomicSynchronized, atomicSynchronizedRecursive, atomicModify, atomicReplacedDeinit
    var testDescription: String { rawValue }

    /// Where the row's code runs, which decides most columns' outcome.
    var context: Context {
        switch self {
        case .callback, .callbackViaWaitFor, .fluxOnDispatch, .reduce, .areEqual, .listener, .ownerListener, .group,
            .stateDeinit, .emitErrorDeinit, .registeredStoreInitInDispatch, .deinitBySweepInDispatch,
            .loneOnDispatch, .loneListener, .deinitByListenerRemoveInEmit:
            .callback
        // enqueue's onError: the dispatcher is dispatching until the queue
        // has drained (README, "enqueue").
        case .observerDispatchBegin, .observerCallbackEnd, .observerDispatchEnd, .enqueueOnError,
            .deinitOfQueuedOnError, .observerCallbackBegin, .observerWaitFor, .deinitOfQueuedPayload:
            .observer
        default: .idle
        }
    }
    enum Context { case callback, observer, idle }
}

enum MatrixColumn: String, CaseIterable, Sendable {
    case dispatch, enqueue, register, unregister, unregisterStoreToken, unregisterUnknown, waitFor, isDispatching
    case setObserver, addListener, removeListener, state, emitChange, hasChanged, storeError, newGroup, groupRelease
    case registerStore, lookupStore, storesList, removeAllStores, newFluxStore
    case actionsDispatch, sharedActionsDispatch, newStore, sinkSend, variableGet, variableSet, observeSink
    case observeVariable, disposeObservation, observeDuringScope, bind, scopeAdd, scopeDispose, anyDispose
    case executorExecute, registerSameStore, unregisterWaiter, removeOwnerListener, emitChangeWithError
    case enqueueWithOnError, disposeVariableObservation, readConstant, dropOwner, dropTarget, replaceGroup
    case replaceObserver, dropStores, newDispatcher, dispatchFailing, enqueueFailing
    case atomicGet, atomicSet, atomicModify, atomicSwap
    // Letting go of the world's objects from inside user code.
    case dropGroup, dropLoneStore, dropSink, dropVariable, dropStore, dropScope, dropWorld
}

/// A trap that is the documented behaviour, with what its message says:
/// registerStore's "an init that registers its own class again ... traps";
/// AtomicReference's "from inside `modify` ... any access to this reference
/// there traps".
private func expectedTrap(_ row: MatrixRow, _ column: MatrixColumn) -> String? {
    if column == .registerSameStore && (row == .registeredStoreInit || row == .registeredStoreInitInDispatch) {
        return "waiting for its init would deadlock"
    }
    if row == .atomicModify && [.atomicGet, .atomicSet, .atomicModify, .atomicSwap].contains(column) {
        return "used from inside its own modify"
    }
    return nil
}

/// A deadlock that is the documented behaviour: AtomicReference's "without
/// `recursive`, entering `synchronized` or `modify` again from inside one (or
/// reading `value` there) deadlocks, as in VueFlux".
private func expectsHang(_ row: MatrixRow, _ column: MatrixColumn) -> Bool {
    row == .atomicSynchronized && [.atomicGet, .atomicSet, .atomicModify, .atomicSwap].contains(column)
}

// MARK: The world

private final class Canary: @unchecked Sendable {
    let onDeinit: () -> Void
    init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
    deinit { onDeinit() }
}

private final class BindTarget {}

private final class Tracer: @unchecked Sendable {
    func touch() {}
}

/// The dispatchers' payload: a number, and a canary for the row whose code is
/// a queued payload's deinit.
private struct Msg: ExpressibleByIntegerLiteral, Sendable {
    var n: Int
    var canary: Canary?
    init(integerLiteral n: Int) { self.n = n }
    init(_ n: Int, canary: Canary?) {
        self.n = n
        self.canary = canary
    }
    static func == (a: Msg, b: Int) -> Bool { a.n == b }
}

private final class MatrixState: Flux.State {
    typealias Action = Int
    typealias Mutations = MatrixMutations
    var commits = 0
    var canary: Canary?
}

private struct MatrixMutations: Flux.Mutations {
    typealias State = MatrixState
    func commit(action: Int, state: MatrixState) {
        state.commits += 1
        if action == 1 { Cell.fire(.mutation) }
        if action == 1 && Cell.row == .deinitByVueStoreDeinitInMutation { Cell.world?.drop(\.secondStore) }
    }
}

private final class MatrixRegistered: RegisteredStore, @unchecked Sendable {
    let store: FluxStore<Msg>
    let canary: Canary?
    init(dispatcher: Dispatcher<Msg>) {
        store = FluxStore(dispatcher: dispatcher) { _, _ in }
        canary = Cell.world?.makeCanary(for: .deinitByRemoveAllStores)
        Cell.fire(.registeredStoreInit)
        Cell.fire(.registeredStoreInitInDispatch)
    }
    var dispatchToken: DispatchToken { store.dispatchToken }
}

private final class MatrixOther: RegisteredStore, @unchecked Sendable {
    let store: FluxStore<Msg>
    init(dispatcher: Dispatcher<Msg>) { store = FluxStore(dispatcher: dispatcher) { _, _ in } }
    var dispatchToken: DispatchToken { store.dispatchToken }
}

/// One cell's objects. The closures the library holds reach it through
/// `Cell.world` (set for the cell's life), never by capture: the leak check
/// then sees what the library itself keeps. What a column may let go of is
/// optional.
private final class World: @unchecked Sendable {
    let dispatcher = Dispatcher<Msg>()
    var waiterToken = DispatchToken(rawValue: 0)
    var waitedToken = DispatchToken(rawValue: 0)
    var plainToken = DispatchToken(rawValue: 0)
    var flux: FluxStore<Msg>!
    var reduce: ReduceStore<Int, Msg>!
    var lone: FluxStore<Msg>?
    var canaryStore: ReduceStore<Canary?, Msg>?
    var subscription: Subscription!
    var ownerSubscription: Subscription!
    var owner: BindTarget? = BindTarget()
    var sweptOwner: BindTarget? = BindTarget()
    var group: StoreGroup?
    var extraGroup: StoreGroup?
    var store: Store<MatrixState>? = Store(state: MatrixState(), mutations: MatrixMutations(), executor: .immediate)
    var extraStores: [AnyObject] = []
    var sink: Sink<Int>? = Sink<Int>()
    var variable: Variable<Int>? = Variable(0)
    var observation: (any Disposable)?
    var kept: [any Disposable] = []
    var scope: DisposableScope? = DisposableScope()
    var target: BindTarget? = BindTarget()
    var disposable: AnyDisposable?
    // The row's reference: recursive, but for the one row where re-entering
    // a plain one is the documented deadlock.
    lazy var atomic = AtomicReference<Canary?>(
        makeCanary(for: .atomicReplacedDeinit), recursive: Cell.row != .atomicSynchronized)
    // Objects of the same kinds whose end releases a canary (the close rows).
    var secondDispatcher: Dispatcher<Msg>?
    var secondSink: Sink<Int>?
    var secondVariable: Variable<Int>?
    var secondStore: Store<MatrixState>?
    let executor = Executor { function in function() }

    // Counters, for "still works" and for the queued/deferred outcomes.
    var plainCalls = 0
    var fluxCalls = 0
    var enqueuedCalls = 0
    var listenerCalls = 0
    var listenerSawError = false
    var observerEnds = 0
    var groupCalls = 0
    var sinkCalls = 0
    var variableCalls = 0

    /// Lets go of a property's object outside the access to the property
    /// (its deinit may read the property).
    func drop<Object>(_ property: ReferenceWritableKeyPath<World, Object?>) {
        var taken: Object? = nil
        swap(&taken, &self[keyPath: property])
        taken = nil
    }

    func makeCanary(for row: MatrixRow) -> Canary? {
        Cell.row == row ? Canary { Cell.fire(row) } : nil
    }

    struct Failure: Error {}

    final class CanaryError: Error, @unchecked Sendable {
        let canary: Canary?
        init(_ canary: Canary?) { self.canary = canary }
    }

    func build() {
        let t = Cell.tracer!
        let row = Cell.row
        waiterToken = dispatcher.register { payload in
            t.touch()
            guard let world = Cell.world else { return }
            if payload == 3 { world.enqueuedCalls += 1 }
            if payload == 99 { throw Failure() }
            if payload == 1 && Cell.row == .callbackViaWaitFor { try world.dispatcher.waitFor([world.waitedToken]) }
        }
        flux = FluxStore(dispatcher: dispatcher) { store, payload in
            t.touch()
            Cell.world?.fluxCalls += 1
            guard payload == 1 else { return }
            Cell.fire(.fluxOnDispatch)
            if Cell.row == .emitErrorDeinit {
                try store.emitChange(error: CanaryError(Cell.world?.makeCanary(for: .emitErrorDeinit)))
            }
        }
        reduce = ReduceStore(
            dispatcher: dispatcher, initialState: 0,
            areEqual: { a, b in
                t.touch()
                Cell.fire(.areEqual)
                return a == b
            },
            reduce: { state, payload in
                t.touch()
                if payload == 1 { Cell.fire(.reduce) }
                return state + 1
            })
        let listenerCanary = makeCanary(for: .deinitByListenerRemove)
        subscription = reduce.addListener {
            t.touch()
            withExtendedLifetime(listenerCanary) {}
            Cell.world?.listenerCalls += 1
            Cell.world?.listenerSawError = Cell.world?.reduce?.error != nil
            Cell.fire(.listener)
        }
        ownerSubscription = reduce.addListener(owner: owner!) { _ in
            t.touch()
            Cell.fire(.ownerListener)
        }
        if let canary = makeCanary(for: .deinitBySweepInDispatch) ?? makeCanary(for: .deinitBySweepInAddListener)
            ?? makeCanary(for: .deinitBySweepInRemoveAllStores)
        {
            reduce.addListener(owner: sweptOwner!) { _ in withExtendedLifetime(canary) {} }
            sweptOwner = nil
        }
        lone = FluxStore(dispatcher: dispatcher) { store, payload in
            t.touch()
            try store.emitChange()
            if payload == 1 { Cell.fire(.loneOnDispatch) }
        }
        lone?.addListener {
            t.touch()
            Cell.fire(.loneListener)
        }
        if row == .deinitByListenerRemoveInEmit {
            let canary = makeCanary(for: row)
            nonisolated(unsafe) var own: Subscription?
            own = lone?.addListener {
                withExtendedLifetime(canary) {}
                try? own?.remove()
                own = nil
            }
        }
        if row == .stateDeinit {
            canaryStore = ReduceStore(
                dispatcher: dispatcher, initialState: Cell.world?.makeCanary(for: row),
                areEqual: { $0 === $1 }, reduce: { _, _ in nil })
        }
        waitedToken = dispatcher.register { payload in
            t.touch()
            if payload == 1 { Cell.fire(.callbackViaWaitFor) }
        }
        let unregisterCanary = makeCanary(for: .deinitByUnregister) ?? makeCanary(for: .deinitByUnregisterInDispatch)
        plainToken = dispatcher.register { payload in
            t.touch()
            withExtendedLifetime(unregisterCanary) {}
            guard let world = Cell.world else { return }
            world.plainCalls += 1
            if payload == 1 { Cell.fire(.callback) }
            if payload == 1 && Cell.row == .registeredStoreInitInDispatch {
                world.dispatcher.registerStore(MatrixRegistered.self)
            }
            if payload == 1 && Cell.row == .deinitByObserverClearInDispatch { world.dispatcher.setObserver(nil) }
            if payload == 1 && Cell.row == .deinitOfGroupReleasedInDispatch { world.group?.release() }
            if payload == 1 && Cell.row == .deinitOfQueuedPayload {
                try world.dispatcher.enqueue(Msg(5, canary: world.makeCanary(for: .deinitOfQueuedPayload)))
            }
            if payload == 1 && Cell.row == .deinitOfQueuedOnError {
                let canary = world.makeCanary(for: .deinitOfQueuedOnError)
                try world.dispatcher.enqueue(99) { _ in withExtendedLifetime(canary) {} }
            }
            if payload == 1 && Cell.row == .deinitByUnregisterInDispatch && !Cell.fired {
                try world.dispatcher.unregister(world.plainToken)
            }
        }
        let groupCanary = makeCanary(for: .deinitByGroupRelease) ?? makeCanary(for: .deinitOfGroupReleasedInDispatch)
        group = try! StoreGroup([flux!, reduce!]) {
            t.touch()
            withExtendedLifetime(groupCanary) {}
            Cell.world?.groupCalls += 1
            Cell.fire(.group)
        }
        let observerCanary =
            makeCanary(for: .deinitByObserverClear)
            ?? makeCanary(for: .deinitByObserverClearInDispatch)
        dispatcher.setObserver(
            .init(
                dispatchBegin: { payload in
                    t.touch()
                    withExtendedLifetime(observerCanary) {}
                    if payload == 1 { Cell.fire(.observerDispatchBegin) }
                },
                dispatchEnd: { payload, _ in
                    Cell.world?.observerEnds += 1
                    if payload == 1 { Cell.fire(.observerDispatchEnd) }
                },
                callbackBegin: { _ in Cell.fire(.observerCallbackBegin) },
                callbackEnd: { _, _ in Cell.fire(.observerCallbackEnd) },
                waitFor: { _, _ in Cell.fire(.observerWaitFor) }))
        let sinkCanary = makeCanary(for: .deinitBySinkDispose) ?? makeCanary(for: .deinitBySinkDisposeInDelivery)
        observation = sink!.signal.observe { value in
            t.touch()
            withExtendedLifetime(sinkCanary) {}
            Cell.world?.sinkCalls += 1
            if value == 1 { Cell.fire(.sinkObserver) }
            if value == 1 && Cell.row == .deinitBySinkDisposeInDelivery { Cell.world?.observation?.dispose() }
        }
        if row == .deinitByVariableDisposeInDelivery {
            let canary = makeCanary(for: row)
            nonisolated(unsafe) var own: (any Disposable)?
            own = variable!.signal.observe { value in
                withExtendedLifetime(canary) {}
                if value == 1 { own?.dispose() }
            }
        }
        kept.append(
            variable!.signal.observe { value in
                t.touch()
                Cell.world?.variableCalls += 1
                if value == 1 { Cell.fire(.variableObserver) }
            })
        if row == .binding {
            sink!.signal.bind(to: target!, on: .immediate) { _, value in if value == 1 { Cell.fire(.binding) } }
        }
        if row == .deinitByScopeDispose {
            let canary = makeCanary(for: row)
            scope! += AnyDisposable { withExtendedLifetime(canary) {} }
        }
        if row == .scopeDisposal { scope! += AnyDisposable { Cell.fire(.scopeDisposal) } }
        disposable = AnyDisposable {
            t.touch()
            Cell.fire(.disposal)
        }
        if let canary = makeCanary(for: .deinitByDispatcherClose) {
            secondDispatcher = Dispatcher()
            secondDispatcher?.register { _ in withExtendedLifetime(canary) {} }
        }
        if let canary = makeCanary(for: .deinitBySinkClose) {
            secondSink = Sink()
            secondSink?.signal.observe { _ in withExtendedLifetime(canary) {} }
        }
        if let canary = makeCanary(for: .deinitByVariableClose) {
            secondVariable = Variable(0)
            secondVariable?.signal.observe { _ in withExtendedLifetime(canary) {} }
        }
        if let canary = makeCanary(for: .deinitByVueStoreDeinit) ?? makeCanary(for: .deinitByVueStoreDeinitInMutation) {
            let state = MatrixState()
            state.canary = canary
            secondStore = Store(state: state, mutations: MatrixMutations(), executor: .immediate)
        }
        if row == .scopeDeinitDisposal { scope! += AnyDisposable { Cell.fire(.scopeDeinitDisposal) } }
    }

    /// Runs the row's user code once.
    func trigger() throws {
        switch Cell.row {
        case .callback, .callbackViaWaitFor, .fluxOnDispatch, .reduce, .areEqual, .listener, .ownerListener, .group,
            .observerDispatchBegin, .observerCallbackEnd, .observerDispatchEnd, .deinitByUnregisterInDispatch,
            .stateDeinit, .emitErrorDeinit, .observerCallbackBegin, .observerWaitFor:
            try dispatcher.dispatch(1)
        case .registeredStoreInit, .deinitByRemoveAllStores:
            dispatcher.registerStore(MatrixRegistered.self)
            if Cell.row == .deinitByRemoveAllStores { dispatcher.removeAllStores() }
        case .mutation: store?.actions.dispatch(action: 1)
        case .executorFunction: executor.execute { Cell.fire(.executorFunction) }
        case .sinkObserver, .binding: sink?.send(value: 1)
        case .variableObserver: variable?.value = 1
        case .disposal: disposable?.dispose()
        case .scopeDisposal, .deinitByScopeDispose: scope?.dispose()
        case .deinitByUnregister: try dispatcher.unregister(plainToken)
        case .deinitByListenerRemove: try subscription.remove()
        case .deinitByGroupRelease: group?.release()
        case .deinitBySinkDispose: observation?.dispose()
        case .enqueueOnError: try dispatcher.enqueue(99) { _ in Cell.fire(.enqueueOnError) }
        case .registeredStoreInitInDispatch, .deinitBySweepInDispatch, .loneOnDispatch, .loneListener,
            .deinitByListenerRemoveInEmit, .deinitByObserverClearInDispatch, .deinitOfQueuedOnError,
            .deinitOfGroupReleasedInDispatch, .deinitOfQueuedPayload:
            try dispatcher.dispatch(1)
        case .deinitBySinkDisposeInDelivery: sink?.send(value: 1)
        case .deinitByVariableDisposeInDelivery: variable?.value = 1
        case .deinitByObserverClear: dispatcher.setObserver(nil)
        case .deinitByDispatcherClose: drop(\.secondDispatcher)
        case .deinitBySinkClose: drop(\.secondSink)
        case .deinitByVariableClose: drop(\.secondVariable)
        case .deinitByVueStoreDeinit: drop(\.secondStore)
        case .deinitByVueStoreDeinitInMutation: store?.actions.dispatch(action: 1)
        case .scopeDeinitDisposal: drop(\.scope)
        case .atomicSynchronized: atomic.synchronized { _ in Cell.fire(.atomicSynchronized) }
        case .atomicSynchronizedRecursive: atomic.synchronized { _ in Cell.fire(.atomicSynchronizedRecursive) }
        case .atomicModify: atomic.modify { _ in Cell.fire(.atomicModify) }
        // "The value replaced is let go of after the lock is released: its
        // deinit may use this reference."
        case .atomicReplacedDeinit: atomic.value = nil
        case .variableFirstValue: kept.append(variable!.signal.observe { _ in Cell.fire(.variableFirstValue) })
        case .producer:
            kept.append(
                Signal<Int> { _ in
                    Cell.fire(.producer)
                    return AnyDisposable()
                }.observe { _ in })
        case .mapTransform:
            kept.append(
                sink!.signal.map {
                    Cell.fire(.mapTransform); return $0
                }.observe { _ in })
            sink?.send(value: 1)
        case .deinitBySweepInAddListener: reduce.addListener {}
        case .deinitBySweepInRemoveAllStores: dispatcher.removeAllStores()
        }
    }
}

/// The cell running in this (child) process.
private enum Cell {
    nonisolated(unsafe) static var row: MatrixRow = .callback
    nonisolated(unsafe) static var column: MatrixColumn = .dispatch
    nonisolated(unsafe) static var world: World?
    /// Captured by every closure the cell hands the library: gone once they all are.
    nonisolated(unsafe) static var tracer: Tracer?
    nonisolated(unsafe) static var fired = false
    nonisolated(unsafe) static var problems: [String] = []
    /// Checks to make once the trigger has returned (deferred outcomes).
    nonisolated(unsafe) static var after: [() -> Void] = []

    static func fail(_ message: String) { problems.append(message) }

    /// Runs the cell's column once, from the row's code.
    static func fire(_ at: MatrixRow) {
        guard at == row, !fired, let world else { return }
        fired = true
        perform(column, row, world)
    }
}

// MARK: The columns' calls and their documented outcomes

/// What `body` threw: nil when it returned, else the FluxError code's name
/// or "other".
private func outcome(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let error as FluxError {
        return "\(error.code)"
    } catch {
        return "other: \(error)"
    }
}

private func expect(_ got: String?, _ want: String?, _ what: String) {
    if got != want { Cell.fail("\(what): got \(got ?? "success"), documented \(want ?? "success")") }
}

private func perform(_ column: MatrixColumn, _ row: MatrixRow, _ w: World) {
    let d = w.dispatcher
    let inCallback = row.context == .callback
    let dispatching = row.context != .idle
    let t = Cell.tracer!
    switch column {
    case .dispatch:
        let before = w.plainCalls
        let got = outcome { try d.dispatch(2) }
        // Dispatcher: from inside a callback (or an observer's closure, on
        // the dispatching thread) throws .alreadyDispatching at once.
        expect(got, dispatching ? "alreadyDispatching" : nil, "dispatch")
        if !dispatching && w.plainCalls != before + 1
            && row != .deinitByUnregister && row != .deinitByUnregisterInDispatch
        {
            Cell.fail("dispatch ran the plain callback \(w.plainCalls - before) times")
        }
    case .enqueue:
        let before = w.enqueuedCalls
        expect(outcome { try d.enqueue(3) }, nil, "enqueue")
        if dispatching {
            // Queued: dispatched before the running dispatch returns.
            if w.enqueuedCalls != before { Cell.fail("enqueue during a dispatch did not queue") }
            Cell.after.append {
                if w.enqueuedCalls != before + 1 { Cell.fail("enqueued payload not dispatched by the outer dispatch") }
            }
        } else if w.enqueuedCalls != before + 1 {
            Cell.fail("enqueue while idle did not dispatch at once")
        }
    case .register:
        nonisolated(unsafe) var calls = 0
        d.register { _ in
            t.touch()
            calls += 1
        }
        Cell.after.append {
            // Registered during a dispatch: first runs in the next one.
            if dispatching && calls != 0 { Cell.fail("a callback registered during a dispatch ran in it") }
            let before = calls
            _ = try? d.dispatch(4)
            if calls != before + 1 {
                Cell.fail("a callback registered from the row is not called by the next dispatch")
            }
        }
    case .unregister:
        let got = outcome { try d.unregister(w.plainToken) }
        // Already gone in the rows that unregister it themselves.
        let gone = row == .deinitByUnregister || row == .deinitByUnregisterInDispatch
        expect(got, gone ? "unknownToken" : nil, "unregister")
        // Not called after this returns by a dispatch on this thread.
        let atUnregister = w.plainCalls
        Cell.after.append {
            if w.plainCalls != atUnregister { Cell.fail("unregistered callback called by the running dispatch") }
            let before = w.plainCalls
            _ = try? d.dispatch(4)
            if w.plainCalls != before { Cell.fail("unregistered callback still called") }
        }
    case .unregisterStoreToken:
        expect(outcome { try d.unregister(w.flux.dispatchToken) }, "invalidArgument", "unregister(store's token)")
    case .unregisterUnknown:
        expect(outcome { try d.unregister(DispatchToken(rawValue: 9999)) }, "unknownToken", "unregister(unknown)")
    case .waitFor:
        let got = outcome { try d.waitFor([w.flux.dispatchToken]) }
        let want: String?
        if !inCallback {
            want = "notDispatching"
        } else if row == .fluxOnDispatch || row == .emitErrorDeinit {
            want = "circularDependency"  // the store's own callback waits for itself
        } else {
            want = nil
        }
        expect(got, want, "waitFor")
    case .isDispatching:
        if d.isDispatching != dispatching { Cell.fail("isDispatching is \(d.isDispatching)") }
    case .setObserver:
        // Set during a dispatch, it takes effect from the next one.
        let ends = w.observerEnds
        d.setObserver(nil)
        Cell.after.append {
            let endsNow = w.observerEnds
            // The running dispatch's end is still to come, except after it
            // (its dispatchEnd, and the queue's onError).
            let ended: Set<MatrixRow> = [
                .observerDispatchEnd, .enqueueOnError, .deinitOfQueuedOnError, .deinitOfQueuedPayload,
            ]
            let want = ends + (dispatching && !ended.contains(row) ? 1 : 0)
            if endsNow != want { Cell.fail("the observer saw \(endsNow - ends) dispatch ends after it was removed") }
            _ = try? d.dispatch(4)
            if w.observerEnds != endsNow { Cell.fail("a removed observer still observes") }
        }
    case .addListener:
        nonisolated(unsafe) var calls = 0
        let subscription = w.reduce.addListener {
            t.touch()
            calls += 1
        }
        Cell.after.append {
            // Added during the store's emit: from the next change on. (Added
            // earlier in the dispatch, it takes part in that dispatch's emit.)
            if row == .listener && calls != 0 { Cell.fail("a listener added during an emit ran in it") }
            if addedBeforeTheEmit.contains(row) && calls != 1 { Cell.fail("a listener added before an emit missed it") }
            _ = try? d.dispatch(4)
            if calls == 0 { Cell.fail("a listener added from the row never ran") }
            _ = try? subscription.remove()
        }
    case .removeListener:
        let removedAlready = row == .deinitByListenerRemove
        expect(outcome { try w.subscription.remove() }, removedAlready ? "unknownToken" : nil, "Subscription.remove")
        Cell.after.append {
            let before = w.listenerCalls
            _ = try? d.dispatch(4)
            if w.listenerCalls != before { Cell.fail("removed listener still called") }
        }
    case .state:
        _ = w.reduce.state
    case .emitChange:
        let got = outcome { try w.reduce.emitChange() }
        // Only while the store handles a payload (reduce).
        let want: String? = row == .reduce ? nil : "notDispatching"
        expect(got, want, "emitChange")
    case .hasChanged:
        let got = outcome { _ = try w.reduce.hasChanged() }
        expect(got, dispatching ? nil : "notDispatching", "hasChanged")
    case .storeError:
        // Set only while the emit of an emitChange(error:) runs.
        if w.reduce.error != nil || w.flux.error != nil { Cell.fail("error set outside its emit") }
    case .newGroup:
        w.extraGroup = try! StoreGroup([w.reduce!]) { t.touch() }
    case .groupRelease:
        w.group?.release()
        Cell.after.append {
            let before = w.groupCalls
            _ = try? d.dispatch(4)
            if w.groupCalls != before { Cell.fail("a released group's function still runs") }
        }
    case .registerStore:
        let other = d.registerStore(MatrixOther.self)
        if d.store(MatrixOther.self) !== other { Cell.fail("registerStore: lookup finds another instance") }
    case .lookupStore:
        // nil while its init runs ("also while ... still creating it").
        let creating = row == .registeredStoreInit || row == .registeredStoreInitInDispatch
        if creating && d.store(MatrixRegistered.self) != nil { Cell.fail("store(_:) found a store its init is making") }
    case .storesList:
        _ = d.stores
    case .removeAllStores:
        d.removeAllStores()
    case .newFluxStore:
        w.extraStores.append(FluxStore(dispatcher: d) { _, _ in t.touch() })
    case .actionsDispatch, .sharedActionsDispatch:
        guard let store = w.store else { return }
        let before = store.computed.state.commits
        if column == .actionsDispatch {
            store.actions.dispatch(action: 5)
        } else {
            Store<MatrixState>.actions.dispatch(action: 5)
        }
        // One thread: the lock is free or this thread's, so the commit runs
        // before dispatch returns (recursively inside a mutation).
        if store.computed.state.commits != before + 1 { Cell.fail("actions.dispatch did not commit at once") }
    case .newStore:
        w.extraStores.append(Store(state: MatrixState(), mutations: MatrixMutations(), executor: .immediate))
    case .sinkSend:
        let before = w.sinkCalls
        w.sink?.send(value: 6)
        // From inside a delivery of this sink: delivered when it ends.
        let nested = row == .sinkObserver || row == .binding || row == .mapTransform
        // Those rows disposed the observer.
        let observed = row == .deinitBySinkDispose || row == .deinitBySinkDisposeInDelivery ? 0 : 1
        if nested {
            if w.sinkCalls != before { Cell.fail("nested send delivered at once") }
            Cell.after.append { if w.sinkCalls != before + 1 { Cell.fail("nested send never delivered") } }
        } else if w.sinkCalls != before + observed {
            Cell.fail("send not delivered at once")
        }
    case .variableGet:
        _ = w.variable?.value
    case .variableSet:
        let before = w.variableCalls
        w.variable?.value = 7
        if w.variable?.value != 7 { Cell.fail("a set is not read back by its setter") }
        // Inside a call of an observer of this variable (its first value
        // too): stored at once, delivered when the current delivery ends.
        if row == .variableObserver || row == .variableFirstValue {
            if w.variableCalls != before { Cell.fail("nested set delivered at once") }
            Cell.after.append { if w.variableCalls != before + 1 { Cell.fail("nested set never delivered") } }
        } else if w.variableCalls != before + 1 {
            Cell.fail("set not delivered at once")
        }
    case .observeSink:
        nonisolated(unsafe) var seen: [Int] = []
        w.kept.append(
            w.sink!.signal.observe {
                t.touch()
                seen.append($0)
            })
        Cell.after.append {
            // Added during a delivery: misses that value.
            if seen.contains(1) { Cell.fail("an observer added during a delivery got its value") }
            w.sink?.send(value: 8)
            if seen.last != 8 { Cell.fail("an observer added from the row misses later sends") }
        }
    case .observeVariable:
        nonisolated(unsafe) var seen: [Int] = []
        w.kept.append(
            w.variable!.signal.observe {
                t.touch()
                seen.append($0)
            })
        if row != .variableObserver && row != .variableFirstValue && seen.isEmpty {
            Cell.fail("observe did not send the current value at once")
        }
        Cell.after.append { if seen.isEmpty { Cell.fail("a variable observer never got its first value") } }
    case .disposeObservation:
        w.observation?.dispose()
        Cell.after.append {
            let before = w.sinkCalls
            w.sink?.send(value: 8)
            if w.sinkCalls != before { Cell.fail("a disposed observer is still called") }
        }
    case .observeDuringScope:
        w.kept.append(w.sink!.signal.observe(duringScopeOf: w.target!) { _ in t.touch() })
    case .bind:
        w.kept.append(w.sink!.signal.bind(to: w.target!, on: .immediate) { _, _ in t.touch() })
    case .scopeAdd:
        let added = AnyDisposable()
        guard let scope = w.scope else { return }
        scope += added
        let scopeDone = row == .scopeDisposal || row == .deinitByScopeDispose
        // Added to a disposed scope: disposed at once.
        if scopeDone && !added.isDisposed { Cell.fail("added to a disposed scope, not disposed") }
    case .scopeDispose:
        guard let scope = w.scope else { return }
        scope.dispose()
        if !scope.isDisposed { Cell.fail("scope not disposed") }
    case .anyDispose:
        w.disposable?.dispose()
        if w.disposable?.isDisposed == false { Cell.fail("AnyDisposable not disposed") }
    case .executorExecute:
        var ran = false
        w.executor.execute { ran = true }
        if !ran { Cell.fail("an inline executor did not run the function") }
    case .registerSameStore:
        // From its own init: a cycle of store classes, a documented trap.
        let made = d.registerStore(MatrixRegistered.self)
        if d.store(MatrixRegistered.self) !== made { Cell.fail("registerStore: lookup finds another instance") }
    case .unregisterWaiter:
        expect(outcome { try d.unregister(w.waiterToken) }, nil, "unregister(waiter)")
    case .removeOwnerListener:
        expect(outcome { try w.ownerSubscription.remove() }, nil, "owner-bound Subscription.remove")
    case .emitChangeWithError:
        let got = outcome { try w.reduce.emitChange(error: World.Failure()) }
        expect(got, row == .reduce ? nil : "notDispatching", "emitChange(error:)")
        if row == .reduce {
            if w.reduce.error != nil { Cell.fail("error set before its emit") }
            Cell.after.append { if !w.listenerSawError { Cell.fail("the listeners did not see the emit's error") } }
        }
    case .enqueueWithOnError:
        nonisolated(unsafe) var errors = 0
        expect(
            outcome {
                try d.enqueue(99) { _ in
                    t.touch()
                    errors += 1
                }
            }, nil, "enqueue(onError:)")
        if !dispatching && errors != 1 { Cell.fail("onError not called by an idle enqueue") }
        Cell.after.append { if errors != 1 { Cell.fail("onError called \(errors) times") } }
    case .disposeVariableObservation:
        w.kept.first?.dispose()
        Cell.after.append {
            let before = w.variableCalls
            w.variable?.value = 20
            if w.variableCalls != before { Cell.fail("a disposed variable observer is still called") }
        }
    case .readConstant:
        if let variable = w.variable { _ = variable.constant.value }
    case .dropOwner: w.drop(\.owner)
    case .dropTarget: w.drop(\.target)
    case .replaceGroup:
        w.group = try! StoreGroup([w.flux!, w.reduce!]) {
            t.touch()
            Cell.world?.groupCalls += 1
        }
    case .replaceObserver:
        d.setObserver(.init(dispatchBegin: { _ in t.touch() }, dispatchEnd: { _, _ in t.touch() }))
    case .dropStores:
        // Every store goes (the group kept them): here, or when the running
        // dispatch ends.
        w.drop(\.group)
        w.drop(\.flux)
        w.drop(\.reduce)
        w.drop(\.lone)
    case .newDispatcher:
        let fresh = Dispatcher<Msg>()
        nonisolated(unsafe) var calls = 0
        fresh.register { _ in calls += 1 }
        expect(outcome { try fresh.dispatch(1) }, nil, "a new dispatcher's dispatch")
        if calls != 1 { Cell.fail("a new dispatcher's callback did not run") }
    case .dispatchFailing:
        expect(
            outcome { try d.dispatch(99) }, dispatching ? "alreadyDispatching" : "other: Failure()", "dispatch(failing)"
        )
    case .enqueueFailing:
        // Queued during a dispatch: the outermost call throws its failure.
        expect(outcome { try d.enqueue(99) }, dispatching ? nil : "other: Failure()", "enqueue(failing)")
    case .atomicGet:
        _ = w.atomic.value
    case .atomicSet:
        w.atomic.value = nil
    case .atomicModify:
        w.atomic.modify { _ in }
    case .atomicSwap:
        _ = w.atomic.swap(nil)
    case .dropGroup: w.drop(\.group)
    case .dropLoneStore: w.drop(\.lone)
    case .dropSink: w.drop(\.sink)
    case .dropVariable: w.drop(\.variable)
    case .dropStore: w.drop(\.store)
    case .dropScope: w.drop(\.scope)
    case .dropWorld:
        var taken = Cell.world
        Cell.world = nil
        taken = nil
        _ = taken
    }
}

/// The rows that run before the reduce store's emit in their dispatch.
private let addedBeforeTheEmit: Set<MatrixRow> = [
    .callbackViaWaitFor, .fluxOnDispatch, .reduce, .areEqual, .observerDispatchBegin, .observerCallbackBegin,
    .observerCallbackEnd, .emitErrorDeinit, .deinitBySweepInDispatch,
]

// MARK: One cell

private func runCell(_ row: MatrixRow, _ column: MatrixColumn) -> [String] {
    Cell.row = row
    Cell.column = column
    Cell.fired = false
    Cell.problems = []
    Cell.after = []
    var weak: [(String, Weakly)] = []
    Cell.tracer = Tracer()
    do {
        Cell.world = World()
        Cell.world!.build()
        let w = Cell.world!
        weak = [
            ("Dispatcher", Weakly(w.dispatcher)), ("FluxStore", Weakly(w.flux)), ("ReduceStore", Weakly(w.reduce)),
            ("lone FluxStore", Weakly(w.lone)), ("Store", Weakly(w.store)), ("Sink", Weakly(w.sink)),
            ("Variable", Weakly(w.variable)), ("StoreGroup", Weakly(w.group)), ("DisposableScope", Weakly(w.scope)),
            ("canary store", Weakly(w.canaryStore)), ("World", Weakly(w)),
            ("closures' captures", Weakly(Cell.tracer)),
        ]
    }
    // Held only by Cell.world (and the call) while the row runs: a column
    // may let go of it.
    let got = outcome { try Cell.world?.trigger() }
    // A failing payload queued from inside a dispatch: the outermost call
    // (the trigger) throws its failure, whatever its own outcome.
    let want = column == .enqueueFailing && row.context != .idle ? "other: Failure()" : nil
    if got != want { Cell.fail("the row's trigger: got \(got ?? "success"), documented \(want ?? "success")") }
    if !Cell.fired { Cell.fail("the row's code never ran") }
    for check in Cell.after { check() }
    Cell.after = []
    if let world = Cell.world {
        weak.append(("registered store", Weakly(world.dispatcher.store(MatrixRegistered.self))))
        weak.append(("other registered store", Weakly(world.dispatcher.store(MatrixOther.self))))
        stillWorks(world)
        // Dropped: the registry's stores and the groups are the caller's to end.
        world.dispatcher.removeAllStores()
        world.group?.release()
        world.extraGroup?.release()
        Cell.world = nil
    } else if let dispatcher = weak[0].1.object as? Dispatcher<Msg> {
        // The world went from inside the row: its registered stores still
        // hold the dispatcher until removeAllStores() (documented).
        dispatcher.removeAllStores()
    }
    Cell.tracer = nil
    for (name, object) in weak where object.object != nil { Cell.fail("leak: the \(name) outlives its world") }
    return Cell.problems
}

private struct Weakly {
    weak var object: AnyObject?
    init(_ object: AnyObject?) { self.object = object }
}

/// A plain dispatch, send, set and commit run everything afterwards.
private func stillWorks(_ world: World) {
    nonisolated(unsafe) var fresh = 0
    world.dispatcher.register { _ in fresh += 1 }
    if let got = outcome({ try world.dispatcher.dispatch(10) }) { Cell.fail("a later dispatch threw \(got)") }
    if fresh != 1 { Cell.fail("a later dispatch did not run a new callback") }
    if world.dispatcher.isDispatching { Cell.fail("still dispatching afterwards") }
    if let sink = world.sink {
        var sent: [Int] = []
        let observation = sink.signal.observe { sent.append($0) }
        sink.send(value: 11)
        if sent != [11] { Cell.fail("a later send was not delivered") }
        observation.dispose()
    }
    if let variable = world.variable {
        var set: [Int] = []
        let observation = variable.signal.observe { set.append($0) }
        variable.value = 12
        if set.last != 12 || variable.value != 12 { Cell.fail("a later set was not delivered") }
        observation.dispose()
    }
    if let store = world.store {
        let commits = store.computed.state.commits
        store.actions.dispatch(action: 13)
        if store.computed.state.commits != commits + 1 { Cell.fail("a later commit did not run") }
    }
}

private func warmUp() {
    _ = runCell(.callback, .dispatch)
    _ = runCell(.mutation, .sinkSend)
}

// MARK: Children

/// Runs `body` in a forked child; its problems, and the signal that ended it
/// (or "hung") when it did not exit.
/// `stderr`: the child's standard error goes to the problems too (a trap's message).
private func runInChild(seconds: Double, stderr: Bool = false, _ body: () -> [String]) -> ([String], String?) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { return (["pipe failed"], nil) }
    let pid = fork()
    if pid == 0 {
        close(fds[0])
        // A trap ends the child there and then: the runtime's crash handler
        // (its backtracer, which under TSan never finished) is not run.
        for trap in [SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS] { signal(trap, SIG_DFL) }
        if stderr { dup2(fds[1], 2) }
        let problems = body()
        let text = problems.joined(separator: "\n")
        _ = text.withCString { write(fds[1], $0, strlen($0)) }
        _exit(0)
    }
    close(fds[1])
    guard pid > 0 else {
        close(fds[0])
        return (["fork failed"], nil)
    }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
    // Drained while waiting too: a child blocked on a full pipe would hang.
    func drain() {
        while true {
            let n = read(fds[0], &buffer, buffer.count)
            if n <= 0 { break }
            output += buffer[0..<n]
        }
    }
    let (ended, status) = reap(pid, seconds: seconds, meanwhile: drain)
    var signal: String?
    if !ended {
        signal = "hung (killed after \(seconds) s)"
    } else if status & 0x7f != 0 {
        signal = "trapped (signal \(status & 0x7f))"
    }
    drain()
    close(fds[0])
    let text = String(decoding: output, as: UTF8.self)
    return (text.isEmpty ? [] : text.split(separator: "\n").map(String.init), signal)
}
