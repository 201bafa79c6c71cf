/*
 * shim.h -- the few things Swift needs from libffi that it cannot use as
 * imported: libffi's built-in type descriptors are mutable globals
 * (`ffi_type ffi_type_sint32;`), which Swift 6 strict concurrency rejects, so
 * each gets a static inline accessor returning its address. libffi never
 * writes to them after load, and neither does libflux.
 *
 * Header-only: everything is static inline, so the CFFI target needs no .c
 * file and adds no symbol to libflux.so.
 */
#ifndef FLUX_CFFI_SHIM_H
#define FLUX_CFFI_SHIM_H

#include <ffi.h>
#include <stddef.h>
#include <stdint.h>

static inline ffi_type *cffi_type_void(void) { return &ffi_type_void; }
static inline ffi_type *cffi_type_sint32(void) { return &ffi_type_sint32; }
static inline ffi_type *cffi_type_uint32(void) { return &ffi_type_uint32; }
static inline ffi_type *cffi_type_sint64(void) { return &ffi_type_sint64; }
static inline ffi_type *cffi_type_uint64(void) { return &ffi_type_uint64; }
static inline ffi_type *cffi_type_float(void) { return &ffi_type_float; }
static inline ffi_type *cffi_type_double(void) { return &ffi_type_double; }
static inline ffi_type *cffi_type_pointer(void) { return &ffi_type_pointer; }

/* size_t: libffi has no ffi_type_size_t; pick the unsigned type of its width. */
static inline ffi_type *cffi_type_size(void)
{
    return sizeof(size_t) == sizeof(uint64_t) ? &ffi_type_uint64 : &ffi_type_uint32;
}

/* The ABI ffi_prep_cif should use (an enum constant whose value differs by
 * target). */
static inline ffi_abi cffi_default_abi(void) { return FFI_DEFAULT_ABI; }

/* sizeof(ffi_closure), for ffi_closure_alloc (the struct holds a union and a
 * target-specific trampoline array that Swift may not import faithfully). */
static inline size_t cffi_closure_size(void) { return sizeof(ffi_closure); }

/* libffi writes integral return values narrower than this as a whole ffi_arg
 * (sign- or zero-extended) and reads them back the same way. */
static inline size_t cffi_arg_size(void) { return sizeof(ffi_arg); }

#endif /* FLUX_CFFI_SHIM_H */
