import CFlux
@_spi(Engine) import FluxCore

// Version and status names come from include/flux.h itself (the CFlux
// module): FLUX_VERSION_NUMBER, FLUX_VERSION_STRING and the enumerators'
// spelling, through cflux.h's static inline accessors.

private let unknownStatusName: StaticString = "FLUX_ERR_UNKNOWN"

@_cdecl("flux_version")
public func flux_version() -> UInt32 {
    cflux_version_number()
}

@_cdecl("flux_version_string")
public func flux_version_string() -> UnsafePointer<CChar> {
    cflux_version_string()
}

@_cdecl("flux_status_name")
public func flux_status_name(_ status: Int32) -> UnsafePointer<CChar> {
    cflux_status_name(status) ?? unknownStatusName.cString
}
