import Flux

// The dispatcher half of include/flux.h. Each function validates its
// arguments, calls the engine, and turns errors into a status plus
// flux_last_error(); none can trap. The header documents the semantics.

@_cdecl("flux_dispatcher_create")
public func flux_dispatcher_create() -> OpaquePointer? {
    guard let dispatcher = CDispatcher() else {
        _ = fail("flux_dispatcher_create", .noMemory, "out of memory")
        return nil
    }
    return OpaquePointer(Unmanaged.passRetained(dispatcher).toOpaque())
}

@_cdecl("flux_dispatcher_destroy")
public func flux_dispatcher_destroy(_ handle: OpaquePointer?) -> Int32 {
    guard let handle else { return 0 }
    let dispatcher = Unmanaged<CDispatcher>.fromOpaque(UnsafeRawPointer(handle))
    do {
        try dispatcher.takeUnretainedValue().close()
    } catch {
        return fail("flux_dispatcher_destroy", error)
    }
    dispatcher.release()
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
    let missing = handle == nil ? "the dispatcher" : function == nil ? "callback" : outToken == nil ? "out_token" : nil
    guard let function, let outToken, missing == nil else {
        // The context was handed over: release it on every path.
        destroy?(context)
        return fail("flux_register", .invalidArgument, "\(missing ?? "an argument") is NULL")
    }
    let callback = CCallback(function: function, context: context, destroy: destroy)
    let status = handle.withDispatcher { dispatcher -> Int32 in
        do throws(FluxError) {
            outToken.pointee = try dispatcher.register(callback).rawValue
            return 0
        } catch {
            return fail("flux_register", error)
        }
    }
    return status ?? 0
}

@_cdecl("flux_unregister")
public func flux_unregister(_ handle: OpaquePointer?, _ token: UInt64) -> Int32 {
    let status = handle.withDispatcher { dispatcher -> Int32 in
        do throws(FluxError) {
            try dispatcher.unregister(DispatchToken(rawValue: token))
            return 0
        } catch {
            return fail("flux_unregister", error)
        }
    }
    return status ?? fail("flux_unregister", .invalidArgument, "the dispatcher is NULL")
}

@_cdecl("flux_dispatch")
public func flux_dispatch(_ handle: OpaquePointer?, _ payload: UnsafeRawPointer?) -> Int32 {
    let status = handle.withDispatcher { dispatcher -> Int32 in
        do throws(DispatchError<CallbackFailure>) {
            try dispatcher.dispatch(payload)
            return 0
        } catch {
            return fail("flux_dispatch", error)
        }
    }
    return status ?? fail("flux_dispatch", .invalidArgument, "the dispatcher is NULL")
}

@_cdecl("flux_wait_for")
public func flux_wait_for(_ handle: OpaquePointer?, _ tokens: UnsafePointer<UInt64>?, _ count: Int) -> Int32 {
    // size_t arrives as Int: a count above Int.max shows up negative.
    if count < 0 || (tokens == nil && count > 0) {
        return fail("flux_wait_for", .invalidArgument,
                    count < 0 ? "count \(UInt(bitPattern: count)) is too large" : "tokens is NULL but count is \(count)")
    }
    let status = handle.withDispatcher { dispatcher -> Int32 in
        let raw = UnsafeRawPointer(tokens)?.assumingMemoryBound(to: DispatchToken.self)
        do throws(DispatchError<CallbackFailure>) {
            // One token: the core's single-token entry, inlined here, keeps a
            // wait_for chain to one frame per link (208 instead of 304 bytes
            // of stack per level in make bench).
            if count == 1, let raw {
                try dispatcher.waitFor(raw.pointee)
            } else {
                try dispatcher.waitFor(UnsafeBufferPointer(start: raw, count: count))
            }
            return 0
        } catch {
            return fail("flux_wait_for", error)
        }
    }
    return status ?? fail("flux_wait_for", .invalidArgument, "the dispatcher is NULL")
}

@_cdecl("flux_is_dispatching")
public func flux_is_dispatching(_ handle: OpaquePointer?) -> Int32 {
    handle.withDispatcher { $0.isDispatching ? 1 : 0 } ?? 0
}
