#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
import CFFI
import CFlux
@_spi(Engine) import FluxCore

// The libffi half of include/flux.h: trampolines (flux_closure_*) and calls
// through a signature known only at run time (flux_call). The header
// documents the semantics; none of these functions can trap.

/// `flux_closure_handler`: `void (*)(void *userdata, void *ret, void **args)`,
/// as the header declares it.
public typealias FluxClosureHandler = flux_closure_handler

/// Written to `ClosureState.tag` while a closure lives ("fluxclos").
private let liveTag: UInt64 = 0x666c_7578_636c_6f73
/// Written to it by flux_closure_destroy(), just before the memory is freed.
private let deadTag: UInt64 = 0x6465_6164_636c_6f73

/// What a `flux_closure *` points at: the head of one malloc'd block that also
/// holds the ffi_cif and the argument type array libffi keeps pointers to.
/// Nothing in the block moves until flux_closure_destroy().
///
///     [ClosureState][ffi_cif][ffi_type *arguments[argumentCount]]
private struct ClosureState {
    var tag: UInt64
    let handler: FluxClosureHandler
    let userdata: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?
    let returnKind: FFIKind
    /// From ffi_closure_alloc: the writable side of the trampoline.
    let closure: UnsafeMutableRawPointer
    /// The executable side: what flux_closure_code() returns.
    let code: UnsafeMutableRawPointer
}

private var cifOffset: Int {
    roundUp(MemoryLayout<ClosureState>.stride, MemoryLayout<ffi_cif>.alignment)
}

private var typesOffset: Int {
    roundUp(cifOffset + MemoryLayout<ffi_cif>.size, MemoryLayout<UnsafeMutablePointer<ffi_type>?>.alignment)
}

/// The closure behind a handle, or nil for NULL and for a handle whose tag says
/// it is not a live closure (best effort: freed memory may have been reused).
private func liveClosure(_ handle: OpaquePointer?) -> UnsafeMutablePointer<ClosureState>? {
    guard let handle else { return nil }
    let state = UnsafeMutablePointer<ClosureState>(handle)
    return state.pointee.tag == liveTag ? state : nil
}

/// libffi calls this for every call of every trampoline; `userdata` is the
/// closure's ClosureState. Hands the arguments to the host's handler, then
/// turns the value it wrote into what libffi expects at `ret`.
private func closureEntry(
    _ cif: UnsafeMutablePointer<ffi_cif>?,
    _ ret: UnsafeMutableRawPointer?,
    _ args: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ userdata: UnsafeMutableRawPointer?
) {
    guard let state = userdata?.assumingMemoryBound(to: ClosureState.self) else { return }
    let handler = state.pointee.handler
    let context = state.pointee.userdata
    let kind = state.pointee.returnKind
    if kind == .void {
        handler(context, nil, args)
        return
    }
    // The handler writes the natural C type into 8 zeroed bytes of our own
    // (FLUX_CLOSURE_RET_SIZE; a compile-time check in cflux.h keeps them equal),
    // so it cannot overrun libffi's slot (4 bytes for a float) and returns 0
    // when it writes nothing.
    var slot: UInt64 = 0
    withUnsafeMutableBytes(of: &slot) { handler(context, $0.baseAddress, args) }
    guard let ret else { return }
    withUnsafeBytes(of: &slot) { value in
        switch kind {
        // libffi reads integral returns narrower than ffi_arg as a whole ffi_arg.
        case .int32 where MemoryLayout<ffi_arg>.size > 4:
            ret.storeBytes(of: ffi_sarg(value.load(as: Int32.self)), as: ffi_sarg.self)
        case .uint32 where MemoryLayout<ffi_arg>.size > 4:
            ret.storeBytes(of: ffi_arg(value.load(as: UInt32.self)), as: ffi_arg.self)
        default:
            if let source = value.baseAddress { ret.copyMemory(from: source, byteCount: kind.size) }
        }
    }
}

@_cdecl("flux_closure_create")
public func flux_closure_create(
    _ signature: UnsafePointer<CChar>?,
    _ handler: FluxClosureHandler?,
    _ userdata: UnsafeMutableRawPointer?,
    _ destroy: FluxDestroyFunction?,
    _ out: UnsafeMutablePointer<OpaquePointer?>?
) -> Int32 {
    out?.pointee = nil
    let handedOver = HandedOver("flux_closure_create", userdata, destroy)
    guard let handler else { return handedOver.refuse(.invalidArgument, "handler is NULL") }
    guard let out else { return handedOver.refuse(.invalidArgument, "out is NULL") }

    return withUnsafeTemporaryAllocation(of: UnsafeMutablePointer<ffi_type>?.self, capacity: maxSignatureArguments) {
        argumentTypes -> Int32 in
        guard let types = argumentTypes.baseAddress else { return handedOver.refuse(.noMemory, "out of memory") }
        let parsed: Signature
        do throws(SignatureError) {
            parsed = try parseSignature(signature, argumentTypes: types)
        } catch {
            return handedOver.refuse(.invalidArgument, error.message(signature: signature))
        }

        // One block: state, cif, argument types (at least one slot, so that a
        // zero-argument signature still gets a distinct, non-NULL array).
        let typeStride = MemoryLayout<UnsafeMutablePointer<ffi_type>?>.stride
        guard let block = malloc(typesOffset + max(parsed.argumentCount, 1) * typeStride) else {
            return handedOver.refuse(.noMemory, "out of memory")
        }
        let cif = (block + cifOffset).bindMemory(to: ffi_cif.self, capacity: 1)
        cif.initialize(to: ffi_cif())
        let blockTypes = (block + typesOffset).bindMemory(
            to: UnsafeMutablePointer<ffi_type>?.self,
            capacity: max(parsed.argumentCount, 1))
        blockTypes.initialize(repeating: nil, count: max(parsed.argumentCount, 1))
        blockTypes.update(from: types, count: parsed.argumentCount)

        let prepared = ffi_prep_cif(
            cif, cffi_default_abi(), UInt32(parsed.argumentCount),
            parsed.returnKind.type, blockTypes)
        guard prepared == FFI_OK else {
            free(block)
            return handedOver.refuse(prepFailed(prepared))
        }
        var code: UnsafeMutableRawPointer? = nil
        guard let closure = ffi_closure_alloc(cffi_closure_size(), &code), let code else {
            free(block)
            return handedOver.refuse(.noMemory, "out of memory (ffi_closure_alloc failed)")
        }
        let state = block.bindMemory(to: ClosureState.self, capacity: 1)
        state.initialize(
            to: ClosureState(
                tag: liveTag, handler: handler, userdata: userdata, destroy: destroy,
                returnKind: parsed.returnKind, closure: closure, code: code))
        let linked = ffi_prep_closure_loc(
            closure.assumingMemoryBound(to: ffi_closure.self), cif,
            closureEntry, block, code)
        guard linked == FFI_OK else {
            state.pointee.tag = deadTag
            ffi_closure_free(closure)
            free(block)
            return handedOver.refuse(
                FluxError(
                    .invalidArgument,
                    template: "libffi could not make the trampoline (ffi_prep_closure_loc status \u{1})",
                    number: UInt64(linked.rawValue)))
        }
        out.pointee = OpaquePointer(block)
        return 0
    }
}

@_cdecl("flux_closure_code")
public func flux_closure_code(_ handle: OpaquePointer?) -> UnsafeMutableRawPointer? {
    liveClosure(handle)?.pointee.code
}

@_cdecl("flux_closure_destroy")
public func flux_closure_destroy(_ handle: OpaquePointer?) -> Int32 {
    guard let handle else { return 0 }
    guard let state = liveClosure(handle) else {
        return fail(
            "flux_closure_destroy", .invalidArgument,
            "not a live closure (destroyed already, or never returned by flux_closure_create)")
    }
    let destroy = state.pointee.destroy
    let userdata = state.pointee.userdata
    state.pointee.tag = deadTag
    ffi_closure_free(state.pointee.closure)
    state.deinitialize(count: 1)
    free(UnsafeMutableRawPointer(state))
    destroy?(userdata)
    return 0
}

@_cdecl("flux_call")
public func flux_call(
    _ function: UnsafeMutableRawPointer?,
    _ signature: UnsafePointer<CChar>?,
    _ ret: UnsafeMutableRawPointer?,
    _ args: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Int32 {
    guard let function else { return fail("flux_call", .invalidArgument, "function is NULL") }
    return withUnsafeTemporaryAllocation(of: UnsafeMutablePointer<ffi_type>?.self, capacity: maxSignatureArguments) {
        argumentTypes -> Int32 in
        guard let types = argumentTypes.baseAddress else { return fail("flux_call", .noMemory, "out of memory") }
        let parsed: Signature
        do throws(SignatureError) {
            parsed = try parseSignature(signature, argumentTypes: types)
        } catch {
            return fail("flux_call", .invalidArgument, error.message(signature: signature))
        }
        if args == nil && parsed.argumentCount > 0 {
            // A template, not interpolation: made without allocating, so it
            // is reported (not a trap) when memory has run out.
            return fail(
                "flux_call",
                FluxError(
                    .invalidArgument,
                    template: parsed.argumentCount == 1
                        ? "args is NULL but the signature has \u{1} argument"
                        : "args is NULL but the signature has \u{1} arguments",
                    number: UInt64(parsed.argumentCount)))
        }
        var cif = ffi_cif()
        let prepared = ffi_prep_cif(
            &cif, cffi_default_abi(), UInt32(parsed.argumentCount),
            parsed.returnKind.type, types)
        guard prepared == FFI_OK else {
            return fail("flux_call", prepFailed(prepared))
        }
        // libffi writes at least a whole ffi_arg; 8 bytes hold every type here
        // (and stay untouched for a void return).
        var slot: UInt64 = 0
        let kind = parsed.returnKind
        withUnsafeMutableBytes(of: &slot) { value in
            ffi_call(&cif, unsafeBitCast(function, to: (@convention(c) () -> Void).self), value.baseAddress, args)
            guard let ret, kind != .void else { return }
            switch kind {
            case .int32 where MemoryLayout<ffi_arg>.size > 4:
                ret.storeBytes(of: Int32(truncatingIfNeeded: value.load(as: ffi_sarg.self)), as: Int32.self)
            case .uint32 where MemoryLayout<ffi_arg>.size > 4:
                ret.storeBytes(of: UInt32(truncatingIfNeeded: value.load(as: ffi_arg.self)), as: UInt32.self)
            default:
                if let source = value.baseAddress { ret.copyMemory(from: source, byteCount: kind.size) }
            }
        }
        return 0
    }
}

/// libffi refusing a signature the parser accepted (not expected with the
/// built-in types): a template, so it is reported even with no memory.
private func prepFailed(_ status: ffi_status) -> FluxError {
    FluxError(
        .invalidArgument, template: "libffi rejected the signature (ffi_prep_cif status \u{1})",
        number: UInt64(status.rawValue))
}
