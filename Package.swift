// swift-tools-version: 6.0
//
// libflux: the Flux dispatcher as a Swift library (`Flux`) and as a C library
// (`libflux.so`, the dynamic product `flux` built from `FluxC`).
//
// The Makefile builds the shared library with the flags a manifest may not
// carry (static Swift stdlib, version script, SONAME); see `make lib`.
import PackageDescription

let package = Package(
    name: "flux",
    products: [
        .library(name: "Flux", targets: ["Flux"]),
        .library(name: "flux", type: .dynamic, targets: ["FluxC"]),
    ],
    targets: [
        // Pure Swift core: dispatcher engine, errors. Knows nothing of C.
        .target(name: "Flux"),
        // libffi (pkg-config "libffi"), for the trampolines of the C ABI only;
        // Flux itself never sees it.
        .systemLibrary(name: "CFFI", pkgConfig: "libffi", providers: [.apt(["libffi-dev"])]),
        // The C ABI: @_cdecl("flux_...") exports only, thin, over Flux (and
        // over libffi for flux_closure_* and flux_call).
        .target(name: "FluxC", dependencies: ["Flux", "CFFI"]),
        .testTarget(name: "FluxTests", dependencies: ["Flux"]),
    ],
    swiftLanguageModes: [.v6]
)
