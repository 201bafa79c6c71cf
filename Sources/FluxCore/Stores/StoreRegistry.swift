/// A store class the dispatcher creates once and hands back by class
/// (JBFlux's `registerStore:` / `store:`, Fluxible's `registerStore` /
/// `getStore`): the app's own class, usually wrapping a `ReduceStore` or a
/// `FluxStore`.
///
///     final class CurrentUserStore: RegisteredStore {
///         let users: ReduceStore<User?, AppAction>
///         init(dispatcher: Dispatcher<AppAction>) { users = ReduceStore(...) }
///         var dispatchToken: DispatchToken { users.dispatchToken }
///     }
///     let current = dispatcher.registerStore(CurrentUserStore.self)
public protocol RegisteredStore<Payload>: AnyObject, Sendable {
    associatedtype Payload
    /// Called once per dispatcher, by `registerStore`. It may register other
    /// store classes (its dependencies) on the same dispatcher; it must not
    /// dispatch (a dispatch that would wait for a thread waiting for this
    /// class is refused with `.alreadyDispatching`, and one made from a
    /// callback of that dispatcher is refused anyway). A Flux `Sink` send,
    /// `Variable` set or `Store` dispatch it makes while another thread
    /// delivers or dispatches there is handed to that thread, as from a
    /// dispatch's callback: that thread may be waiting for this class.
    init(dispatcher: Dispatcher<Payload>)
    /// The token other stores `waitFor`.
    var dispatchToken: DispatchToken { get }
}

/// A dispatcher's registered stores, one per class, in the order their
/// creation finished (a class whose init registers others comes after them).
/// A class is created outside the lock (its init registers with the
/// dispatcher and may register its own dependencies); another thread asking
/// for the same class meanwhile waits for that one instance.
final class StoreRegistry: @unchecked Sendable {
    // @unchecked: everything below is under `lock` (`creations` under its own too).
    private let lock: ConditionLock
    private var stores: [(type: ObjectIdentifier, store: AnyObject)] = []
    /// Who creates which class, in every dispatcher's registry; an entry
    /// of this registry changes only with `lock` held too. Who waits for
    /// whom is `DispatchWaits`' graph, shared with the dispatches' waits:
    /// an init may register a class on another dispatcher, or dispatch, so
    /// a cycle may pass through several registries and dispatchers.
    private static let creations = Guarded(Creations())
    struct Creations {
        struct Key: Hashable {
            let registry: ObjectIdentifier
            let type: ObjectIdentifier
        }
        /// Classes being created: the thread creating each, and the
        /// creation's identity as the "engine" of the waits for it in
        /// `DispatchWaits` (ended with it, before its waiters wake: a waiter
        /// not yet awake must not look like one still waiting).
        var creating: [Key: (thread: UInt, id: UInt)] = [:]
        /// The next creation's identity: the top bit set, so it is never an
        /// engine's (an address).
        var nextID: UInt = 1 << (UInt.bitWidth - 1)
        /// In a forked child: classes another thread of the parent was
        /// creating at the fork. That thread does not exist here, so the
        /// class can never be made: waiting for it would never end.
        var orphaned: Set<Key> = []
    }
    /// The live stores of this dispatcher that have had owner-bound
    /// listeners (held weakly), for `removeAllStores()` to sweep.
    private var ownerBound: [ObjectIdentifier: WeakStore] = [:]
    struct WeakStore { weak var store: (any SweepsGoneOwners)? }

    init() {
        // Swift's own allocations trap when memory runs out; so does this.
        guard let lock = ConditionLock() else { fatalError("Dispatcher: out of memory") }
        self.lock = lock
        _ = Self.creationsCountAsDispatching
    }

    /// A thread running an init counts as dispatching (one entry for every
    /// registry, added by the first): it must not wait for a sink's delivery
    /// or a State type's dispatch in progress on another thread (Flux's
    /// `Turn`), which may be waiting, in `registerStore`, for this very
    /// class. It hands its work over.
    private static let creationsCountAsDispatching: Void = DispatchingThreads.shared.add(
        creations, { StoreRegistry.isCreatingOnCurrentThread })

    /// Whether the calling thread is running the init of a class it registers.
    static var isCreatingOnCurrentThread: Bool {
        let me = currentThreadID()
        return creations.withLock { $0.creating.values.contains { $0.thread == me } }
    }

    deinit { lock.destroy() }

    func store(_ type: ObjectIdentifier) -> AnyObject? {
        lock.lock()
        defer { lock.unlock() }
        return find(type)
    }

    private func find(_ type: ObjectIdentifier) -> AnyObject? {
        stores.first { $0.type == type }?.store
    }

    /// The store of `type`, made by `make` the first time.
    func store(_ type: ObjectIdentifier, name: @autoclosure () -> String, make: () -> AnyObject) -> AnyObject {
        let key = Creations.Key(registry: ObjectIdentifier(self), type: type)
        let me = currentThreadID()
        lock.lock()
        while true {
            if let found = find(type) {
                lock.unlock()
                return found
            }
            // Looked at and noted in one step, so that of two threads closing
            // a cycle the second sees the first's wait.
            let waits = Self.creations.withLock { creations in
                precondition(
                    !creations.orphaned.contains(key),
                    "registerStore(\(name())): another thread was creating it when this process forked; it can never be made here"
                )
                guard let (thread, id) = creations.creating[key] else { return false }
                // Waiting would close a cycle when the creator is this thread,
                // or waits (through other threads' creations or dispatches,
                // on any dispatcher) for this one: A's init registering B
                // while B's registers A, on two threads, would wait for each
                // other for good; so would an init dispatching a dispatcher
                // whose dispatching thread waits here.
                switch DispatchWaits.shared.wait(me, for: id, heldBy: thread) {
                case .recorded:
                    return true
                case .deadlock:
                    preconditionFailure(
                        "registerStore(\(name())): waiting for its init would deadlock (its init registers it again, "
                            + "a cycle of store classes, or waits for a dispatch this thread runs)")
                case .noMemory:
                    // Swift's own allocations trap when memory runs out; so does this.
                    fatalError("registerStore(\(name())): out of memory")
                }
            }
            guard waits else { break }
            lock.wait()
            DispatchWaits.shared.stopWaiting(me)
        }
        Self.creations.withLock { creations in
            creations.creating[key] = (me, creations.nextID)
            creations.nextID += 1
        }
        lock.unlock()
        let made = make()
        lock.lock()
        if let (_, id) = Self.creations.withLock({ $0.creating.removeValue(forKey: key) }) {
            DispatchWaits.shared.ended(id)
        }
        stores.append((type, made))
        lock.broadcast()
        lock.unlock()
        return made
    }

    // fork(): the dispatcher's fork hook holds `lock` across it, and
    // ForkGuard holds `creations` after every registry's lock (it is taken
    // under them), so the child gets both consistent and free.

    func prepareFork() { lock.lock() }
    func parentAfterFork() { lock.unlock() }
    /// The threads that waited for a creation are gone: the condition
    /// variable forgets them, as the engine's does (POSIX leaves one with
    /// waiters that vanished undefined).
    func childAfterFork() {
        lock.resetCondition()
        lock.unlock()
    }

    static func prepareForkOfAll() { creations.lockAcrossFork() }
    static func parentAfterForkOfAll() { creations.unlockAfterFork() }

    /// Only the forking thread exists in the child: what other threads were
    /// creating is orphaned (their waits go with DispatchWaits' own).
    static func childAfterForkOfAll() {
        let me = currentThreadID()
        creations.unlockAfterFork { creations in
            let gone = creations.creating.filter { $0.value.thread != me }
            for key in gone.keys {
                creations.creating[key] = nil
                creations.orphaned.insert(key)
            }
        }
    }

    var all: [AnyObject] {
        lock.lock()
        defer { lock.unlock() }
        return stores.map(\.store)
    }

    /// Lets go of every store; returns them, to be released outside the lock.
    func removeAll() -> [AnyObject] {
        lock.lock()
        defer { lock.unlock() }
        let all = stores.map(\.store)
        stores = []
        return all
    }

    /// Notes that `store` has owner-bound listeners, until `forget`.
    func remember(_ store: some SweepsGoneOwners) {
        lock.lock()
        defer { lock.unlock() }
        ownerBound[ObjectIdentifier(store)] = WeakStore(store: store)
    }

    /// Called by a store's deinit (so no look at a weak reference, which
    /// may free what it looks at, runs under the lock).
    func forget(_ store: ObjectIdentifier) {
        lock.lock()
        defer { lock.unlock() }
        ownerBound[store] = nil
    }

    /// The live stores that have had owner-bound listeners; the caller
    /// sweeps them outside the lock.
    var storesWithOwners: [any SweepsGoneOwners] {
        lock.lock()
        defer { lock.unlock() }
        return ownerBound.values.compactMap(\.store)
    }
}

/// A store whose owner-bound listeners can be swept (`StoreBase`).
protocol SweepsGoneOwners: AnyObject, Sendable {
    func sweepGoneOwners()
}

extension Dispatcher {
    /// The store of class `type` on this dispatcher: created with
    /// `type.init(dispatcher: self)` the first time, the same instance every
    /// time after. The dispatcher keeps it until `removeAllStores()`; since a
    /// store keeps its dispatcher too, call that when done with both.
    /// From any thread: two threads asking for a class at once get one
    /// instance. Registered during a dispatch, a store takes part from the
    /// next dispatch. A cycle of store classes -- an init that registers its
    /// own class again, through other classes' inits too, on one thread or
    /// across threads, on this dispatcher or through others -- traps,
    /// naming the class; so does waiting for a class whose init, on another
    /// thread, waits for a dispatch this thread runs. So does asking, in a child process forked while
    /// another thread was creating the class, for that class: its creation
    /// can never end there.
    @discardableResult
    public func registerStore<Registered: RegisteredStore>(_ type: Registered.Type) -> Registered
    where Registered.Payload == Payload {
        let made = registry.store(ObjectIdentifier(type), name: "\(type)") { type.init(dispatcher: self) }
        return unsafeDowncast(made, to: type)
    }

    /// The registered store of class `type`, or nil: also while another
    /// thread's `registerStore` is still creating it (a lookup never waits;
    /// `registerStore` does, and returns that instance), and from inside its
    /// own init (it is registered once that returns).
    public func store<Registered: RegisteredStore>(_ type: Registered.Type) -> Registered?
    where Registered.Payload == Payload {
        registry.store(ObjectIdentifier(type)).map { unsafeDowncast($0, to: type) }
    }

    /// The registered stores, in the order their creation finished: a store
    /// whose init registers its dependencies comes after them.
    public var stores: [any RegisteredStore<Payload>] {
        registry.all.map { $0 as! any RegisteredStore<Payload> }  // each was made as one
    }

    /// Lets go of every registered store (ending the cycle between them and
    /// this dispatcher): with no other reference, they and the dispatcher
    /// are freed. Then every store of this dispatcher, registered or not,
    /// removes its owner-bound listeners whose owner went (a listener that
    /// captured its store kept that store alive). A listener whose owner is
    /// still alive stays, and so does what it captured: when such a
    /// listener captured its store, the store and this dispatcher are freed
    /// only once the owner has gone and the store has looked (its next
    /// dispatch or `addListener`, or another `removeAllStores()`).
    public func removeAllStores() {
        do {
            let released = registry.removeAll()
            withExtendedLifetime(released) {}
        }
        for store in registry.storesWithOwners { store.sweepGoneOwners() }
    }
}
