import FluxCore

// Keep in step with FLUX_VERSION_* in include/flux.h; the C harness checks
// flux_version() == FLUX_VERSION_NUMBER.
private let versionMajor: UInt32 = 0
private let versionMinor: UInt32 = 1
private let versionPatch: UInt32 = 0
private let versionString: StaticString = "0.1.0"

@_cdecl("flux_version")
public func flux_version() -> UInt32 {
    versionMajor * 10000 + versionMinor * 100 + versionPatch
}

@_cdecl("flux_version_string")
public func flux_version_string() -> UnsafePointer<CChar> {
    versionString.cString
}

@_cdecl("flux_status_name")
public func flux_status_name(_ status: Int32) -> UnsafePointer<CChar> {
    let name: StaticString =
        switch status {
        case 0: "FLUX_OK"
        case 1: "FLUX_ERR_INVALID_ARGUMENT"
        case 2: "FLUX_ERR_UNKNOWN_TOKEN"
        case 3: "FLUX_ERR_ALREADY_DISPATCHING"
        case 4: "FLUX_ERR_NOT_DISPATCHING"
        case 5: "FLUX_ERR_CIRCULAR"
        case 6: "FLUX_ERR_CALLBACK_FAILED"
        case 7: "FLUX_ERR_NO_MEMORY"
        case 8: "FLUX_ERR_TOO_DEEP"
        default: "FLUX_ERR_UNKNOWN"
        }
    return name.cString
}
