@_spi(Engine) import FluxCore

// The dispatcher half of include/flux.h. Each function validates its
// arguments, calls the engine, and turns errors into a status plus
// flux_last_error(); none can trap. The header documents the semantics.

@_cdecl("flux_dispatcher_create")
public func flux_dispatcher_create() -> OpaquePointer? {
    guard let engine = CDispatcher(), let handle = allocateDispatcher() else {
        _ = fail("flux_dispatcher_create", .noMemory, "out of memory")
        return nil
    }
    handle.initialize(to: engine)
    registerForFork(handle)
    return OpaquePointer(handle)
}

@_cdecl("flux_dispatcher_close")
public func flux_dispatcher_close(_ handle: OpaquePointer?) -> Int32 {
    guard let handle else { return fail("flux_dispatcher_close", .invalidArgument, "the dispatcher is NULL") }
    // Closed already (by this function, or being so by another call).
    if handle.dispatcher.pointee.isClosed { return closedAlready(handle) }
    return close(handle, as: .close)
}

@_cdecl("flux_dispatcher_destroy")
public func flux_dispatcher_destroy(_ handle: OpaquePointer?) -> Int32 {
    guard let handle else { return 0 }
    let dispatcher = handle.dispatcher
    // Closed by flux_dispatcher_close(), which finished: only the freeing is
    // left. Closed otherwise, this is called from a destroy function that an
    // outer destroy or close runs (refused below): that destroy frees it, or
    // that close's caller destroys it once it has returned.
    let status =
        handle.storeSide.pointee.closedBy.load(ordering: .acquiring) == Closer.close.rawValue
        ? 0 : close(handle, as: .destroy)
    if status != 0 { return status }
    unregisterForFork(dispatcher)
    dispatcher.deinitialize(count: 1)
    freeDispatcher(dispatcher)
    return 0
}

/// Which call closes the engine (see `close`; `StoreSide.closedBy` keeps
/// the raw value).
private enum Closer: UInt8 {
    /// flux_dispatcher_close: a close another call made first counts as
    /// done (see `closedAlready`), and a close it finishes is recorded, so
    /// that destroy only frees.
    case close = 1
    /// flux_dispatcher_destroy, whose first half is the close: one another
    /// call made first is that call's (its error: the outer call frees).
    /// Recorded as the close becomes certain, before any destroy function
    /// runs.
    case destroy = 2

    var function: StaticString { self == .close ? "flux_dispatcher_close" : "flux_dispatcher_destroy" }
}

/// Closes the engine behind `handle` for good, releasing its registrations
/// and observer, unless it has stores or groups (which point into it), or a
/// dispatch runs.
private func close(_ handle: OpaquePointer, as closer: Closer) -> Int32 {
    let dispatcher = handle.dispatcher
    let function = closer.function
    // Stores and groups point into the dispatcher: it outlives them. A
    // dispatch running is reported first, as the close below would -- but
    // not left to close to report: one on another thread may end before
    // close looks, which would then close the dispatcher under its stores.
    // Counted again under the engine's lock: a store created on another
    // thread meanwhile (counted before it registers) either is seen there
    // or finds the dispatcher closed.
    func stillHasStores() -> FluxError? {
        let stores = handle.storeSide.pointee.count.load(ordering: .acquiring)
        guard stores > 0 else { return nil }
        return FluxError(
            .invalidArgument, template: "the dispatcher still has \u{1} store(s) or group(s); destroy them first",
            number: UInt64(stores))
    }
    if let error = stillHasStores() {
        return fail(function, dispatcher.pointee.isDispatching ? FluxError.closingWhileDispatching : error)
    }
    do {
        try dispatcher.pointee.close {
            let refused = stillHasStores()
            // Certain to close now: a destroy's close is noted before any
            // destroy function can run.
            if refused == nil && closer == .destroy {
                handle.storeSide.pointee.closedBy.store(closer.rawValue, ordering: .releasing)
            }
            return refused
        }
    } catch {
        if closer == .close, dispatcher.pointee.isClosed, error.code == .invalidArgument {
            return closedAlready(handle)
        }
        return fail(function, error)
    }
    if closer == .close { handle.storeSide.pointee.closedBy.store(closer.rawValue, ordering: .releasing) }
    return 0
}

/// flux_dispatcher_close on a dispatcher another call closed: done --
/// unless flux_dispatcher_destroy() closed it, from one of whose destroy
/// functions this is called: the dispatcher is freed once that returns, and
/// every call on it is refused (flux.h, "Ownership").
private func closedAlready(_ handle: OpaquePointer) -> Int32 {
    if handle.storeSide.pointee.closedBy.load(ordering: .acquiring) == Closer.destroy.rawValue {
        return fail("flux_dispatcher_close", .invalidArgument, "the dispatcher is being destroyed")
    }
    return 0
}

@_cdecl("flux_register")
public func flux_register(
    _ handle: OpaquePointer?,
    _ function: FluxCallbackFunction?,
    _ context: UnsafeMutableRawPointer?,
    _ destroy: FluxDestroyFunction?,
    _ outToken: UnsafeMutablePointer<UInt64>?
) -> Int32 {
    outToken?.pointee = 0
    let missing =
        handle == nil
        ? "the dispatcher is NULL" : function == nil ? "callback is NULL" : outToken == nil ? "out_token is NULL" : nil
    guard let handle, let function, let outToken, missing == nil else {
        // The context was handed over: release it on every path.
        return HandedOver("flux_register", context, destroy).refuse(.invalidArgument, missing ?? "")
    }
    let callback = CCallback(function: function, context: context, destroy: destroy)
    return status("flux_register") { () throws(FluxError) in
        outToken.pointee = try handle.dispatcher.pointee.register(callback).rawValue
    }
}

@_cdecl("flux_unregister")
public func flux_unregister(_ handle: OpaquePointer?, _ token: UInt64) -> Int32 {
    guard let handle else { return fail("flux_unregister", .invalidArgument, "the dispatcher is NULL") }
    return status("flux_unregister") { () throws(FluxError) in
        try handle.dispatcher.pointee.unregister(DispatchToken(rawValue: token))
    }
}

// Hot paths: inlined into the C entry point, which would otherwise be a
// jump to the Swift-convention function.
@_cdecl("flux_dispatch") @inline(__always)
public func flux_dispatch(_ handle: OpaquePointer?, _ payload: UnsafeRawPointer?) -> Int32 {
    guard let handle else { return fail("flux_dispatch", .invalidArgument, "the dispatcher is NULL") }
    return status("flux_dispatch") { () throws(DispatchError<CallbackFailure>) in
        try handle.dispatcher.pointee.dispatch(payload)
    }
}

@_cdecl("flux_try_dispatch") @inline(__always)
public func flux_try_dispatch(_ handle: OpaquePointer?, _ payload: UnsafeRawPointer?) -> Int32 {
    guard let handle else { return fail("flux_try_dispatch", .invalidArgument, "the dispatcher is NULL") }
    return status("flux_try_dispatch") { () throws(DispatchError<CallbackFailure>) in
        try handle.dispatcher.pointee.dispatch(payload, waits: false)
    }
}

@_cdecl("flux_wait_for") @inline(__always)
public func flux_wait_for(_ handle: OpaquePointer?, _ tokens: UnsafePointer<UInt64>?, _ count: Int) -> Int32 {
    // One token is the common case and every link of a wait_for chain: the
    // core's non-throwing single-token wait, inlined into one frame per link.
    guard count == 1 else { return waitForMany(handle, tokens, count) }
    guard let handle, let tokens else { return waitForMany(handle, tokens, count) }
    let token = DispatchToken(rawValue: tokens.pointee)
    guard let failure = handle.dispatcher.pointee.tryWaitFor(token) else { return 0 }
    return waitForFailed(handle, token, failure)
}

/// A one-token wait's failure, as a status and a message.
@inline(never)
private func waitForFailed(_ handle: OpaquePointer, _ token: DispatchToken, _ failure: CDispatcher.WaitFailure) -> Int32
{
    fail("flux_wait_for", handle.dispatcher.pointee.error(failure, waiting: token))
}

/// flux_wait_for with any count. Its frame is one link of a chain of
/// many-token waits, so the argument errors are formatted out of line.
@inline(never)
private func waitForMany(_ handle: OpaquePointer?, _ tokens: UnsafePointer<UInt64>?, _ count: Int) -> Int32 {
    // size_t arrives as Int: a count above Int.max shows up negative.
    guard count >= 0, tokens != nil || count == 0, let handle else { return badWait(handle, tokens, count) }
    let raw = UnsafeRawPointer(tokens)?.assumingMemoryBound(to: DispatchToken.self)
    let refused = handle.dispatcher.pointee.tryWaitFor(UnsafeBufferPointer(start: raw, count: count))
    guard let refused else { return 0 }
    return waitForFailed(handle, refused.token, refused.failure)
}

/// flux_wait_for's argument errors.
@inline(never)
private func badWait(_ handle: OpaquePointer?, _ tokens: UnsafePointer<UInt64>?, _ count: Int) -> Int32 {
    if count < 0 || (tokens == nil && count > 0) {
        return fail(
            "flux_wait_for",
            FluxError(
                .invalidArgument,
                template: count < 0 ? "count \u{1} is too large" : "tokens is NULL but count is \u{1}",
                number: UInt64(UInt(bitPattern: count))))
    }
    return fail("flux_wait_for", .invalidArgument, "the dispatcher is NULL")
}

@_cdecl("flux_is_dispatching")
public func flux_is_dispatching(_ handle: OpaquePointer?) -> Int32 {
    guard let handle else { return 0 }
    return handle.dispatcher.pointee.isDispatching ? 1 : 0
}
