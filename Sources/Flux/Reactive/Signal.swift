import Synchronization

/// A stream of values that can be observed. Made by a `Sink`, a `Variable`,
/// or a producer that receives the send function and returns what stops it.
/// Not `Sendable` (its producer closure is not): capture the sink or
/// variable in a `@Sendable` closure instead.
public struct Signal<Value> {
    /// Receives the send function of one observation and returns what ends it.
    public typealias Producer = (@escaping (Value) -> Void) -> any Disposable

    @usableFromInline
    enum Source {
        case producer(Producer)
        // A sink's signal: observing registers with the sink directly.
        case sink(Sink<Value>)
        // A variable's signal: the current value, then registered as a sink's.
        case variable(Variable<Value>)
    }

    @usableFromInline let source: Source

    /// A signal that runs `producer` once per observation; values sent after
    /// that observation is disposed are dropped.
    public init(_ producer: @escaping Producer) {
        source = .producer(producer)
    }

    @inlinable
    init(sink: Sink<Value>) {
        source = .sink(sink)
    }

    @inlinable
    init(variable: Variable<Value>) {
        source = .variable(variable)
    }

    /// Calls `observer` with every value until the result is disposed. Once
    /// `dispose()` has returned, the observer is not called again, even for
    /// values an executor had already queued (a call that another thread had
    /// already begun, as in VueFlux, still runs to its end), and it is let go
    /// of, with what it captures, once no delivery in progress holds it.
    ///
    /// A `Variable`'s signal first sends the current value, before `observe`
    /// returns, except when a delivery of that variable is in progress and
    /// the observing thread is inside a delivery (an observer of that
    /// variable or of any sink) or a dispatch: then the first value comes
    /// from the delivering thread, after `observe` has returned (see
    /// `Variable`).
    @inlinable @discardableResult
    public func observe(_ observer: @escaping (Value) -> Void) -> any Disposable {
        let procedure = CancelableProcedure<Value>(observer)
        switch source {
        case .sink(let sink):
            return SinkSubscription(key: sink.core.subscribe(procedure), sink: sink.core)
        case .variable(let variable):
            return variable.observe(procedure)
        case .producer(let producer):
            let link = ProducerLink(procedure)
            let disposable = producer { value in
                link.send(value)
            }
            return ObserverDisposable(procedure: nil, ending: disposable, link: link)
        }
    }

    /// Observes until `object` is gone. Linux has no associated objects, so
    /// the observation ends at the first value that finds the object gone
    /// (never calling `observer` then), not at the object's deinit. `object`
    /// is not retained, except during a call of `observer`, so that the
    /// observer never runs after the object's deinit (which another thread
    /// may otherwise be running meanwhile).
    @discardableResult
    public func observe(duringScopeOf object: AnyObject, _ observer: @escaping (Value) -> Void) -> any Disposable {
        let scope = ScopeRegistry.shared.scope(for: object)
        let disposable = whileAlive(object, scope: scope).observe(observer)
        scope += disposable
        return disposable
    }

    /// Binds to `binder` on `executor` (default: the main thread).
    @discardableResult
    public func bind(to binder: Binder<Value>, on executor: Executor = .mainThread) -> any Disposable {
        binder.bind(signal: self, on: executor)
    }

    /// Calls `binding(target, value)` on `executor` for each value while
    /// `target` lives (held weakly; see `Binder`).
    @discardableResult
    public func bind<Target: AnyObject>(
        to target: Target, on executor: Executor = .mainThread,
        binding: @escaping (Target, Value) -> Void
    ) -> any Disposable {
        bind(to: .init(target: target, binding: binding), on: executor)
    }

    /// Sets `target[keyPath:]` to each value on `executor` while `target` lives.
    @discardableResult
    public func bind<Target: AnyObject>(
        to target: Target, _ keyPath: ReferenceWritableKeyPath<Target, Value>,
        on executor: Executor = .mainThread
    ) -> any Disposable {
        bind(to: target, on: executor) { target, value in
            target[keyPath: keyPath] = value
        }
    }

    /// Sets the optional `target[keyPath:]` to each value on `executor` while `target` lives.
    @discardableResult
    public func bind<Target: AnyObject>(
        to target: Target, _ keyPath: ReferenceWritableKeyPath<Target, Value?>,
        on executor: Executor = .mainThread
    ) -> any Disposable {
        bind(to: target, on: executor) { target, value in
            target[keyPath: keyPath] = value as Value?
        }
    }
}

/// What an observation that is not a sink's returns: an AnyDisposable
/// (VueFlux's type) with its rules (end what it ends once, then let go of
/// it), except that every `dispose()` cancels the observer before it
/// returns, not only the first: a call that loses the race to another
/// thread's `dispose()` must not return while the winner has yet to cancel
/// it (Signal.observe's promise).
@usableFromInline
final class ObserverDisposable<Value>: AnyDisposable, @unchecked Sendable {
    // Weakly: whoever may still call it (a queued registration, a sink's
    // list) holds it; the disposable must not keep the observer alive once
    // they are gone (see SinkSubscription).
    private weak let procedure: CancelableProcedure<Value>?
    // Written by init and by the one caller that wins the exchange in dispose().
    private var ending: (any Disposable)?
    // A producer's observation has this instead of `procedure`, weakly too:
    // the producer's send function holds it while it may be called.
    private weak let link: ProducerLink<Value>?

    @usableFromInline
    init(procedure: CancelableProcedure<Value>?, ending: any Disposable, link: ProducerLink<Value>? = nil) {
        self.procedure = procedure
        self.ending = ending
        self.link = link
        super.init()
    }

    @usableFromInline
    override func dispose() {
        procedure?.cancel()
        link?.cancel()
        guard disposed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else {
            return
        }
        let ending = self.ending
        self.ending = nil
        ending?.dispose()
    }
}

/// What the send function a producer gets calls: the observation's
/// procedure until the observation is disposed, then nothing. So the
/// observer, and what it captures, goes at `dispose()`, as in VueFlux (whose
/// cancel releases it), although the producer, or work an executor queued
/// for `observe(on:)`, may hold the send function for longer. A send takes
/// its own reference under the lock: a call in progress on another thread
/// keeps the observer until it returns (VueFlux's release races with it).
@usableFromInline
final class ProducerLink<Value>: @unchecked Sendable {
    @usableFromInline let lock = PosixLock()
    @usableFromInline var procedure: CancelableProcedure<Value>?

    @usableFromInline
    init(_ procedure: CancelableProcedure<Value>) {
        self.procedure = procedure
    }

    @inlinable
    func send(_ value: Value) {
        guard let procedure = lock.withLock({ self.procedure }) else { return }
        procedure.execute(with: value)
    }

    /// Cancels the procedure and lets go of it. Under the lock, so that a
    /// second call, which finds it gone, returns after the first canceled it.
    func cancel() {
        let released: CancelableProcedure<Value>? = lock.withLock {
            procedure?.cancel()
            defer { procedure = nil }
            return procedure
        }
        // Released here, outside the lock: the observer's deinit may send again.
        _ = released
    }
}

extension Signal {
    /// Forwards values while `object` lives; the first value that finds it
    /// gone disposes `scope` (and with it every registration of the object).
    func whileAlive(_ object: AnyObject, scope: DisposableScope) -> Signal<Value> {
        operated { [weak object, weak scope] value, send in
            guard let object else {
                scope?.dispose()
                return
            }
            // Held until the value has been passed on: otherwise the object
            // could deinitialize on another thread between this check and
            // the observer's call, which would then run after the deinit
            // (VUEFLUX.md 3 (a)). Its deinit may then run here, after it.
            withExtendedLifetime(object) {
                send(value)
            }
        }
    }

    func operated<T>(_ operation: @escaping (Value, @escaping (T) -> Void) -> Void) -> Signal<T> {
        .init { send in
            self.observe { value in
                operation(value, send)
            }
        }
    }
}
