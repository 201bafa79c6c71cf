import CFlux
@_spi(Engine) import FluxCore

// flux_enqueue and the observer (include/flux.h, "Queued dispatch" and
// "Observer"). Nothing here can trap; the header documents the semantics.

@_cdecl("flux_enqueue")
public func flux_enqueue(_ handle: OpaquePointer?, _ payload: UnsafeMutableRawPointer?, _ done: FluxDoneFunction?) -> Int32 {
    guard let handle else {
        let status = fail("flux_enqueue", .invalidArgument, "the dispatcher is NULL")
        done?(payload, flux_status(status))
        return status
    }
    switch handle.dispatcher.pointee.enqueue(UnsafeRawPointer(payload), done) {
    case .queued, .dispatched(nil):
        return 0
    case .dispatched(.some(let error)):
        // Again: a queued payload's failure may have replaced the message.
        return fail("flux_enqueue", error)
    case .refused(let error):
        return fail("flux_enqueue", error)
    }
}

/// The context pointer, sendable: it only ever reaches the caller's hooks.
private struct Context: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer?
}

@_cdecl("flux_dispatcher_set_observer")
public func flux_dispatcher_set_observer(
    _ handle: OpaquePointer?,
    _ hooks: UnsafePointer<flux_observer>?,
    _ context: UnsafeMutableRawPointer?,
    _ destroy: FluxDestroyFunction?
) -> Int32 {
    guard let handle else {
        destroy?(context)
        return fail("flux_dispatcher_set_observer", .invalidArgument, "the dispatcher is NULL")
    }
    var observer: CDispatcher.Observer?
    if let hooks {
        let h = hooks.pointee
        guard h.version == FLUX_OBSERVER_VERSION else {
            destroy?(context)
            return fail("flux_dispatcher_set_observer", .invalidArgument,
                        "hooks->version is \(h.version); this library knows FLUX_OBSERVER_VERSION \(FLUX_OBSERVER_VERSION)")
        }
        let ctx = Context(pointer: context)
        let (dispatchBegin, dispatchEnd, callbackBegin, callbackEnd, waitFor) =
            (h.dispatch_begin, h.dispatch_end, h.callback_begin, h.callback_end, h.wait_for)
        observer = CDispatcher.Observer(
            dispatchBegin: dispatchBegin.map { f in { payload in f(ctx.pointer, payload) } },
            dispatchEnd: dispatchEnd.map { f in { payload, error in f(ctx.pointer, payload, flux_status(statusCode(error))) } },
            callbackBegin: callbackBegin.map { f in { token in f(ctx.pointer, token.rawValue) } },
            callbackEnd: callbackEnd.map { f in { token, failure in f(ctx.pointer, token.rawValue, failure?.value ?? 0) } },
            waitFor: waitFor.map { f in { waiter, tokens in
                f(ctx.pointer, waiter.rawValue,
                  UnsafeRawPointer(tokens.baseAddress)?.assumingMemoryBound(to: UInt64.self), tokens.count)
            } },
            release: destroy.map { f in { f(ctx.pointer) } })
    } else if context != nil {
        // Clearing takes no context; one handed over is still released.
        destroy?(context)
    }
    do throws(FluxError) {
        try handle.dispatcher.pointee.setObserver(observer)
        return 0
    } catch {
        return fail("flux_dispatcher_set_observer", error)
    }
}

/// The flux_status a dispatch ended with.
private func statusCode(_ error: DispatchError<CallbackFailure>?) -> Int32 {
    switch error {
    case nil: 0
    case .flux(let error): error.code.rawValue
    case .callback: FluxError.Code.callbackFailed.rawValue
    }
}
