#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
import CFlux
@_spi(Engine) import FluxCore
import Synchronization

// The stores half of include/flux.h, over FluxCore's StoreCore (the same
// rules the Swift FluxStore and ReduceStore follow). A store is a malloc'd
// CStore registered with its dispatcher as a plain C callback; the
// registration's destroy frees it, so however the registration ends -- a
// failed register, flux_store_destroy, or a destroy racing a dispatch on
// another thread -- the state, the listeners and the context are released
// exactly once. Groups work the same way.

/// A C listener: the raw (function, context) pair and its destroy, and the
/// dispatcher, whose flux_store_listener_fail cell says whether it failed.
struct CListener: StoreListener {
    let function: FluxListenerFunction
    let context: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?
    let handle: OpaquePointer

    func invoke() -> CallbackFailure? {
        callListener(function, context, handle)
    }

    func release() { destroy?(context) }
}

/// Runs a listener or a group's function, inside which
/// flux_store_listener_fail may fail it; returns that failure.
@inline(__always)
private func callListener(
    _ function: FluxListenerFunction, _ context: UnsafeMutableRawPointer?, _ handle: OpaquePointer
) -> CallbackFailure? {
    let cells = handle.listenerCells
    // A listener may run others (through flux_wait_for): each sees its own
    // cell. The cell is 0 unless a failure is pending, so the common case
    // (no failure, not nested in a failed one) stores nothing to it.
    let outer = cells.pointee.listenerFailure
    if outer != 0 { cells.pointee.listenerFailure = 0 }
    cells.pointee.listenerDepth &+= 1  // bounded by the stack: no overflow check
    function(context)
    cells.pointee.listenerDepth &-= 1
    let value = cells.pointee.listenerFailure
    if value | outer != 0 { cells.pointee.listenerFailure = outer }
    return value == 0 ? nil : CallbackFailure(value: value)
}

/// What a `flux_store *` points at.
struct CStore: ~Copyable {
    let handle: OpaquePointer
    var token: UInt64 = 0
    /// The state pointer. Atomic so that flux_store_state() may read it on
    /// any thread; only the dispatching thread writes it.
    let state: Atomic<UInt>
    let reduce: FluxReduceFunction
    let equal: FluxEqualFunction?
    let releaseState: FluxReleaseFunction?
    let context: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?
    /// Live groups this store is in: while any, it cannot be destroyed.
    let groups = Atomic<Int>(0)
    let core: StoreCore<CListener>
}

extension OpaquePointer {
    @inline(__always)
    var store: UnsafeMutablePointer<CStore> { UnsafeMutablePointer(self) }
}

/// Where a store's reduce writes `*next`: a slot after the CStore in its
/// block, not a local, so the hot path passes no stack address out (which
/// would cost it a stack protector check). Only the dispatching thread
/// reduces, and a store's reduce never runs inside itself.
private let nextSlotOffset = roundUp(MemoryLayout<CStore>.size, MemoryLayout<UnsafeMutableRawPointer?>.alignment)
private let storeBlockSize = nextSlotOffset + MemoryLayout<UnsafeMutableRawPointer?>.size

extension UnsafeMutablePointer<CStore> {
    @inline(__always)
    var nextSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?> {
        (UnsafeMutableRawPointer(self) + nextSlotOffset).assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
    }
}

/// The reduce step of a C store, for StoreCore.handle.
struct CReducer: StoreReducer {
    let store: UnsafeMutablePointer<CStore>

    @inline(__always)
    func loadState() -> UnsafeMutableRawPointer? {
        UnsafeMutableRawPointer(bitPattern: store.pointee.state.load(ordering: .relaxed))
    }

    @inline(__always)
    func storeState(_ state: UnsafeMutableRawPointer?) {
        store.pointee.state.store(UInt(bitPattern: state), ordering: .releasing)
    }

    @inline(__always)
    func reduce(
        _ state: UnsafeMutableRawPointer?, _ payload: UnsafeRawPointer?
    )
        -> Result<UnsafeMutableRawPointer?, CallbackFailure>
    {
        let next = store.nextSlot
        next.pointee = state
        let result = store.pointee.reduce(store.pointee.context, state, payload, next)
        return result == 0 ? .success(next.pointee) : .failure(CallbackFailure(value: result))
    }

    /// Compared as addresses: `==` on two optionals tests each for nil
    /// first, five instructions more on every dispatch.
    @inline(__always)
    func isSame(_ current: UnsafeMutableRawPointer?, _ next: UnsafeMutableRawPointer?) -> Bool {
        UInt(bitPattern: current) == UInt(bitPattern: next)
    }

    func areEqual(_ current: UnsafeMutableRawPointer?, _ next: UnsafeMutableRawPointer?) -> Bool {
        // NULL equal: pointer identity, and these are different pointers.
        guard let equal = store.pointee.equal else { return false }
        return equal(store.pointee.context, current, next) != 0
    }

    func release(_ state: UnsafeMutableRawPointer?) {
        store.pointee.releaseState?(store.pointee.context, state)
    }
}

/// The store's registered callback.
private let storeCallback: FluxCallbackFunction = { context, payload in
    guard let context else { return 1 }
    let store = context.assumingMemoryBound(to: CStore.self)
    guard
        let failure = store.pointee.core.handle(
            payload, CReducer(store: store),
            on: store.pointee.handle.dispatcher.pointee)
    else { return 0 }
    switch failure {
    case .reduce(let failure), .listener(let failure): return failure.value
    }
}

/// The store registration's destroy: releases the listeners, then the
/// state, then the context, and frees the store.
private let storeRelease: FluxDestroyFunction = { context in
    guard let context else { return }
    let store = context.assumingMemoryBound(to: CStore.self)
    store.pointee.core.releaseListeners()
    store.pointee.releaseState?(store.pointee.context, CReducer(store: store).loadState())
    finishRelease(store, destroy: store.pointee.destroy, context: store.pointee.context, handle: store.pointee.handle)
}

/// The end of a store's or a group's registration destroy: the host's
/// context, the block, and the dispatcher's count of them -- last, so that a
/// destroy function cannot free the dispatcher under us.
private func finishRelease<Block: ~Copyable>(
    _ block: UnsafeMutablePointer<Block>, destroy: FluxDestroyFunction?, context: UnsafeMutableRawPointer?,
    handle: OpaquePointer
) {
    destroy?(context)
    block.deinitialize(count: 1)
    free(block)
    handle.storeSide.pointee.count.subtract(1, ordering: .releasing)
}

@_cdecl("flux_store_create")
public func flux_store_create(
    _ handle: OpaquePointer?,
    _ initialState: UnsafeMutableRawPointer?,
    _ reduce: FluxReduceFunction?,
    _ equal: FluxEqualFunction?,
    _ releaseState: FluxReleaseFunction?,
    _ context: UnsafeMutableRawPointer?,
    _ destroy: FluxDestroyFunction?,
    _ out: UnsafeMutablePointer<OpaquePointer?>?
) -> Int32 {
    out?.pointee = nil
    /// Hands back what was handed over: the state, then the context.
    func refused(_ status: FluxError.Code, _ message: String) -> Int32 {
        releaseState?(context, initialState)
        return HandedOver("flux_store_create", context, destroy).refuse(status, message)
    }
    let missing =
        handle == nil ? "the dispatcher is NULL" : reduce == nil ? "reduce is NULL" : out == nil ? "out is NULL" : nil
    guard let handle, let reduce, let out, missing == nil else {
        return refused(.invalidArgument, missing ?? "")
    }
    guard let raw = malloc(storeBlockSize) else { return refused(.noMemory, "out of memory") }
    (raw + nextSlotOffset).bindMemory(to: UnsafeMutableRawPointer?.self, capacity: 1).initialize(to: nil)
    guard let core = StoreCore<CListener>() else {
        free(raw)
        return refused(.noMemory, "out of memory")
    }
    let store = raw.bindMemory(to: CStore.self, capacity: 1)
    store.initialize(
        to: CStore(
            handle: handle, state: Atomic(UInt(bitPattern: initialState)), reduce: reduce, equal: equal,
            releaseState: releaseState, context: context, destroy: destroy, core: core))
    // From here on the registration owns everything: when register fails it
    // runs storeRelease, which releases the state and the context.
    return status("flux_store_create") { () throws(FluxError) in
        store.pointee.token = try registerCounted(handle, storeCallback, raw, storeRelease)
        out.pointee = OpaquePointer(store)
    }
}

extension CCallback {
    /// A store's and a group's registrations are told apart by their
    /// function: only flux_store_destroy and flux_store_group_release end
    /// them, since they free what the store or the group still uses.
    func ownerRefusal(_ token: DispatchToken) -> String? {
        let function = unsafeBitCast(self.function, to: UnsafeRawPointer.self)
        if function == unsafeBitCast(storeCallback, to: UnsafeRawPointer.self) {
            return "token \u{1} belongs to a store: end it with flux_store_destroy()"
        }
        if function == unsafeBitCast(groupCallback, to: UnsafeRawPointer.self) {
            return "token \u{1} belongs to a store group: end it with flux_store_group_release()"
        }
        return nil
    }
}

/// Registers a store's or a group's block with the dispatcher, counted among
/// the dispatcher's stores and groups (flux_dispatcher_destroy refuses while
/// any live). The registration owns the block: when registering fails, `release`
/// has already run, undoing the count too.
private func registerCounted(
    _ handle: OpaquePointer, _ function: FluxCallbackFunction, _ block: UnsafeMutableRawPointer,
    _ release: FluxDestroyFunction
) throws(FluxError) -> UInt64 {
    handle.storeSide.pointee.count.add(1, ordering: .relaxed)
    let callback = CCallback(function: function, context: block, destroy: release)
    return try handle.dispatcher.pointee.register(callback).rawValue
}

@_cdecl("flux_store_state")
public func flux_store_state(_ s: OpaquePointer?) -> UnsafeMutableRawPointer? {
    guard let s else { return nil }
    return UnsafeMutableRawPointer(bitPattern: s.store.pointee.state.load(ordering: .acquiring))
}

@_cdecl("flux_store_token")
public func flux_store_token(_ s: OpaquePointer?) -> UInt64 {
    s?.store.pointee.token ?? 0
}

@_cdecl("flux_store_dispatcher")
public func flux_store_dispatcher(_ s: OpaquePointer?) -> OpaquePointer? {
    s?.store.pointee.handle
}

@_cdecl("flux_store_is_emitting")
public func flux_store_is_emitting(_ s: OpaquePointer?) -> Int32 {
    guard let s else { return 0 }
    return s.store.pointee.core.isEmitting ? 1 : 0
}

@_cdecl("flux_store_has_changed")
public func flux_store_has_changed(_ s: OpaquePointer?, _ changed: UnsafeMutablePointer<Int32>?) -> Int32 {
    changed?.pointee = 0
    guard let s else { return fail("flux_store_has_changed", .invalidArgument, "the store is NULL") }
    guard let changed else { return fail("flux_store_has_changed", .invalidArgument, "changed is NULL") }
    return status("flux_store_has_changed") { () throws(FluxError) in
        let store = s.store
        changed.pointee = try store.pointee.core.hasChanged(on: store.pointee.handle.dispatcher.pointee) ? 1 : 0
    }
}

@_cdecl("flux_store_emit_change")
public func flux_store_emit_change(_ s: OpaquePointer?) -> Int32 {
    guard let s else { return fail("flux_store_emit_change", .invalidArgument, "the store is NULL") }
    return status("flux_store_emit_change") { () throws(FluxError) in
        let store = s.store
        try store.pointee.core.emitChange(on: store.pointee.handle.dispatcher.pointee)
    }
}

@_cdecl("flux_store_add_listener")
public func flux_store_add_listener(
    _ s: OpaquePointer?,
    _ function: FluxListenerFunction?,
    _ context: UnsafeMutableRawPointer?,
    _ destroy: FluxDestroyFunction?,
    _ out: UnsafeMutablePointer<UInt64>?
) -> Int32 {
    out?.pointee = 0
    let missing = s == nil ? "the store is NULL" : function == nil ? "fn is NULL" : out == nil ? "out is NULL" : nil
    guard let s, let function, let out, missing == nil else {
        return HandedOver("flux_store_add_listener", context, destroy).refuse(.invalidArgument, missing ?? "")
    }
    return status("flux_store_add_listener") { () throws(FluxError) in
        out.pointee = try s.store.pointee.core.addListener(
            CListener(function: function, context: context, destroy: destroy, handle: s.store.pointee.handle))
    }
}

@_cdecl("flux_store_remove_listener")
public func flux_store_remove_listener(_ s: OpaquePointer?, _ listener: UInt64) -> Int32 {
    guard let s else { return fail("flux_store_remove_listener", .invalidArgument, "the store is NULL") }
    return status("flux_store_remove_listener") { () throws(FluxError) in
        try s.store.pointee.core.removeListener(listener)
    }
}

@_cdecl("flux_store_listener_fail")
public func flux_store_listener_fail(_ handle: OpaquePointer?, _ value: Int32) -> Int32 {
    guard let handle else { return fail("flux_store_listener_fail", .invalidArgument, "the dispatcher is NULL") }
    guard value != 0 else { return fail("flux_store_listener_fail", .invalidArgument, "value is 0") }
    // The depth is the dispatching thread's: check the thread first.
    guard handle.dispatcher.pointee.isDispatchingOnCurrentThread, handle.listenerCells.pointee.listenerDepth > 0 else {
        // From a destroy that flux_dispatcher_destroy runs: refused as every
        // call on a dispatcher being destroyed is (flux.h, "Ownership").
        if handle.dispatcher.pointee.isClosed {
            return fail("flux_store_listener_fail", .invalidArgument, "the dispatcher is closed (being destroyed)")
        }
        return fail(
            "flux_store_listener_fail", .notDispatching,
            "must be invoked from a store listener or a group function, on the dispatching thread")
    }
    handle.listenerCells.pointee.listenerFailure = value
    return 0
}

@_cdecl("flux_store_destroy")
public func flux_store_destroy(_ s: OpaquePointer?) -> Int32 {
    guard let s else { return 0 }
    let store = s.store
    let handle = store.pointee.handle
    let dispatching = FluxError(.alreadyDispatching, "cannot destroy a store while its dispatcher is dispatching")
    if handle.dispatcher.pointee.isDispatching { return fail("flux_store_destroy", dispatching) }
    // From one of the store's own releases (a listener's destroy,
    // release_state, destroy): the outer call frees it; a second would
    // release everything twice.
    if store.pointee.core.isReleased {
        return fail("flux_store_destroy", .invalidArgument, "the store is being destroyed")
    }
    let groups = store.pointee.groups.load(ordering: .acquiring)
    if groups > 0 {
        return fail(
            "flux_store_destroy",
            FluxError(
                .invalidArgument,
                // Memberships, not groups: one group may list a store twice.
                template: "the store is a member of a live group (\u{1} membership(s)); release its groups first",
                number: UInt64(groups)))
    }
    return status("flux_store_destroy") { () throws(FluxError) in
        // Runs storeRelease now. Refused, as above, should a dispatch have
        // started on another thread since: that dispatch would run the
        // store's reduce and listeners after this returned.
        try handle.dispatcher.pointee.unregister(
            DispatchToken(rawValue: store.pointee.token), asOwner: true, whileDispatching: dispatching)
    }
}

// MARK: - Groups

/// What a `flux_store_group *` points at; the stores and their tokens follow
/// it in the same block.
struct CGroup: ~Copyable {
    let handle: OpaquePointer
    var token: UInt64 = 0
    let count: Int
    let stores: UnsafeMutablePointer<OpaquePointer>
    let tokens: UnsafeMutablePointer<DispatchToken>
    let function: FluxListenerFunction
    let context: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?
    /// Set once the stores no longer count the group (`letGoOfStores`).
    let storesLetGo = Atomic<Bool>(false)
}

/// Stops the group counting in its stores, once: as flux_store_group_release
/// succeeds, or as the registration goes (a failed create). The release
/// itself may wait for the end of a running dispatch, and the dispatcher is
/// idle before it runs: the stores must be free to destroy by then. Never
/// undone (a store destroyed meanwhile on another thread would be freed
/// under the group): a release lets go only once it is certain.
private func letGoOfStores(_ group: UnsafeMutablePointer<CGroup>) {
    if group.pointee.storesLetGo.exchange(true, ordering: .acquiringAndReleasing) { return }
    countInStores(group, -1)
}

/// Adds `delta` to each of the group's stores' count of live groups.
private func countInStores(_ group: UnsafeMutablePointer<CGroup>, _ delta: Int) {
    for i in 0..<group.pointee.count {
        group.pointee.stores[i].store.pointee.groups.add(delta, ordering: .acquiringAndReleasing)
    }
}

/// The group's registered callback: wait for every store, then call fn.
private let groupCallback: FluxCallbackFunction = { context, _ in
    guard let context else { return 1 }
    let group = context.assumingMemoryBound(to: CGroup.self)
    do throws(DispatchError<CallbackFailure>) {
        try group.pointee.handle.dispatcher.pointee.waitFor(
            UnsafeBufferPointer(start: group.pointee.tokens, count: group.pointee.count))
    } catch {
        // A store failed (the dispatch is aborting and reports that store),
        // or a store waited for this group (a cycle): fail too.
        return 1
    }
    // Released while it waited (by a store's reduce or listener that the
    // wait ran, say): once the release has returned, the dispatch does not
    // call fn (flux.h). The release sets this as it succeeds.
    if group.pointee.storesLetGo.load(ordering: .acquiring) { return 0 }
    return callListener(group.pointee.function, group.pointee.context, group.pointee.handle)?.value ?? 0
}

/// The group registration's destroy: lets go of the stores, destroys the
/// context, frees the group.
private let groupRelease: FluxDestroyFunction = { context in
    guard let context else { return }
    let group = context.assumingMemoryBound(to: CGroup.self)
    letGoOfStores(group)
    finishRelease(group, destroy: group.pointee.destroy, context: group.pointee.context, handle: group.pointee.handle)
}

@_cdecl("flux_store_group_create")
public func flux_store_group_create(
    _ stores: UnsafePointer<OpaquePointer?>?,
    _ count: Int,
    _ function: FluxListenerFunction?,
    _ context: UnsafeMutableRawPointer?,
    _ destroy: FluxDestroyFunction?,
    _ out: UnsafeMutablePointer<OpaquePointer?>?
) -> Int32 {
    out?.pointee = nil
    let handedOver = HandedOver("flux_store_group_create", context, destroy)
    // size_t arrives as Int: a count above Int.max shows up negative.
    if count <= 0 {
        return handedOver.refuse(
            FluxError(
                .invalidArgument,
                template: count == 0 ? "a group needs at least one store" : "count \u{1} is too large",
                number: UInt64(UInt(bitPattern: count))))
    }
    guard let stores else {
        return handedOver.refuse(
            FluxError(.invalidArgument, template: "stores is NULL but count is \u{1}", number: UInt64(count)))
    }
    guard let function else { return handedOver.refuse(.invalidArgument, "fn is NULL") }
    guard let out else { return handedOver.refuse(.invalidArgument, "out is NULL") }
    guard let first = stores[0] else { return handedOver.refuse(.invalidArgument, "stores[0] is NULL") }
    let handle = first.store.pointee.handle
    for i in 0..<count {
        guard let store = stores[i] else {
            return handedOver.refuse(FluxError(.invalidArgument, template: "stores[\u{1}] is NULL", number: UInt64(i)))
        }
        // Called from a destroy that flux_store_destroy() runs: the store is
        // freed once it returns, and the group would count in freed memory.
        if store.store.pointee.core.isReleased {
            return handedOver.refuse(
                FluxError(.invalidArgument, template: "stores[\u{1}] is being destroyed", number: UInt64(i)))
        }
        if store.store.pointee.handle != handle {
            return handedOver.refuse(
                FluxError(
                    .invalidArgument, template: "stores[\u{1}] is on another dispatcher than stores[0]",
                    number: UInt64(i)))
        }
    }
    // One block: the group, then the store pointers, then their tokens.
    let storesOffset = roundUp(MemoryLayout<CGroup>.size, MemoryLayout<OpaquePointer>.alignment)
    let (listBytes, o1) = count.multipliedReportingOverflow(
        by: MemoryLayout<OpaquePointer>.stride
            + MemoryLayout<DispatchToken>.stride)
    let (total, o2) = storesOffset.addingReportingOverflow(listBytes)
    guard !o1, !o2, let raw = malloc(total) else { return handedOver.refuse(.noMemory, "out of memory") }
    let storeList = (raw + storesOffset).bindMemory(to: OpaquePointer.self, capacity: count)
    let tokens = (raw + storesOffset + count * MemoryLayout<OpaquePointer>.stride)
        .bindMemory(to: DispatchToken.self, capacity: count)
    for i in 0..<count {
        let store = stores[i] ?? first  // checked non-NULL above
        (storeList + i).initialize(to: store)
        (tokens + i).initialize(to: DispatchToken(rawValue: store.store.pointee.token))
    }
    let group = raw.bindMemory(to: CGroup.self, capacity: 1)
    group.initialize(
        to: CGroup(
            handle: handle, count: count, stores: storeList, tokens: tokens,
            function: function, context: context, destroy: destroy))
    countInStores(group, 1)
    // On failure, groupRelease has undone all of the above.
    return status("flux_store_group_create") { () throws(FluxError) in
        group.pointee.token = try registerCounted(handle, groupCallback, raw, groupRelease)
        out.pointee = OpaquePointer(group)
    }
}

@_cdecl("flux_store_group_token")
public func flux_store_group_token(_ g: OpaquePointer?) -> UInt64 {
    guard let g else { return 0 }
    return UnsafeMutablePointer<CGroup>(g).pointee.token
}

@_cdecl("flux_store_group_release")
public func flux_store_group_release(_ g: OpaquePointer?) -> Int32 {
    guard let g else { return 0 }
    let group = UnsafeMutablePointer<CGroup>(g)
    let handle = group.pointee.handle
    let token = DispatchToken(rawValue: group.pointee.token)
    return status("flux_store_group_release") { () throws(FluxError) in
        // Once the unregistration is certain, under the dispatcher's lock:
        // not before (refused, it leaves the stores as they were), not after
        // (the release, at the end of a dispatch on another thread, may have
        // freed the group).
        try handle.dispatcher.pointee.unregister(token, asOwner: true) { letGoOfStores(group) }
    }
}
