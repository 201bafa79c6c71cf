import CFlux
@_spi(Engine) import FluxCore

// flux_enqueue and the observer (include/flux.h, "Queued dispatch" and
// "Observer"). Nothing here can trap; the header documents the semantics.

@_cdecl("flux_enqueue")
public func flux_enqueue(
    _ handle: OpaquePointer?, _ payload: UnsafeMutableRawPointer?, _ done: FluxDoneFunction?,
    _ context: UnsafeMutableRawPointer?
) -> Int32 {
    let done = CDone(function: done, context: context)
    guard let handle else {
        // As the engine refuses: done reads the failure while it runs, and
        // what it fails itself is gone once it returns.
        let error = FluxError(.invalidArgument, "the dispatcher is NULL")
        CCallback.complete(done, UnsafeRawPointer(payload), .flux(error))
        return fail("flux_enqueue", error)
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

@_cdecl("flux_dispatcher_set_observer")
public func flux_dispatcher_set_observer(
    _ handle: OpaquePointer?,
    _ hooks: UnsafePointer<flux_observer>?,
    _ context: UnsafeMutableRawPointer?,
    _ destroy: FluxDestroyFunction?
) -> Int32 {
    let handedOver = HandedOver("flux_dispatcher_set_observer", context, destroy)
    guard let handle else { return handedOver.refuse(.invalidArgument, "the dispatcher is NULL") }
    guard let hooks else {
        // Clearing takes no context; one handed over (NULL too: the
        // caller's destroy decides what that means) is still released --
        // once the engine is done with the handle, since that destroy may
        // close or destroy the dispatcher.
        do throws(FluxError) {
            try handle.dispatcher.pointee.setObserver(nil)
        } catch {
            return handedOver.refuse(error)
        }
        destroy?(context)
        return 0
    }
    let h = hooks.pointee
    guard h.version == FLUX_OBSERVER_VERSION else {
        return handedOver.refuse(
            .invalidArgument,
            "hooks->version is \(h.version); this library knows FLUX_OBSERVER_VERSION \(FLUX_OBSERVER_VERSION)")
    }
    let observer = CObserver(hooks: h, context: context, destroy: destroy)
    return status("flux_dispatcher_set_observer") { () throws(FluxError) in
        try handle.dispatcher.pointee.setObserver(observer)
    }
}

/// The caller's `flux_observer` hooks and context, kept by value in the
/// engine: setting an observer allocates nothing through Swift, so running
/// out of memory is a status (the engine's own room for retired observers
/// is malloc'd), never a trap.
struct CObserver: DispatchObserving {
    let hooks: flux_observer
    let context: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?

    func dispatchBegin(_ payload: UnsafeRawPointer?) { hooks.dispatch_begin?(context, payload) }
    func dispatchEnd(_ payload: UnsafeRawPointer?, _ error: DispatchError<CallbackFailure>?) {
        hooks.dispatch_end?(context, payload, flux_status(statusCode(error)))
    }
    func callbackBegin(_ token: DispatchToken) { hooks.callback_begin?(context, token.rawValue) }
    func callbackEnd(_ token: DispatchToken, _ failure: CallbackFailure?) {
        hooks.callback_end?(context, token.rawValue, failure?.value ?? 0)
    }
    var observesWaits: Bool { hooks.wait_for != nil }
    func waitFor(_ waiter: DispatchToken, _ tokens: UnsafeBufferPointer<DispatchToken>) {
        hooks.wait_for?(
            context, waiter.rawValue,
            UnsafeRawPointer(tokens.baseAddress)?.assumingMemoryBound(to: UInt64.self), tokens.count)
    }
    func release() { destroy?(context) }
}

/// The flux_status a dispatch ended with.
private func statusCode(_ error: DispatchError<CallbackFailure>?) -> Int32 {
    switch error {
    case nil: 0
    case .flux(let error): error.code.rawValue
    case .callback: FluxError.Code.callbackFailed.rawValue
    }
}
