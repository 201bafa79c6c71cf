// swift-tools-version: 6.0
//
// libflux: the Flux dispatcher as a Swift library (`Flux`) and as a C library
// (`libflux.so`, the dynamic product `flux` built from `FluxC`).
//
// Targets, one idea each, so that the C library stays lean while `import Flux`
// gives Swift users everything:
//
//   FluxCore  engine, Dispatcher, tokens, errors, stores' core  (no Dispatch, no Foundation)
//   FluxC     @_cdecl("flux_...") exports over FluxCore (+ CFFI)   -> libflux.so
//   Flux      what Swift users import: re-exports FluxCore, adds the Swift-only layers
//
// The Makefile builds the shared library with the flags a manifest may not
// carry (static Swift stdlib, version script, SONAME); see `make lib`.
import PackageDescription

let package = Package(
    name: "libflux",
    products: [
        .library(name: "Flux", targets: ["Flux"]),
        .library(name: "flux", type: .dynamic, targets: ["FluxC"]),
    ],
    targets: [
        // include/flux.h as a Clang module: the header's status codes, version
        // and types, for the targets below (never re-exported to Swift users).
        .systemLibrary(name: "CFlux"),
        // Pure Swift core: dispatcher engine, errors. Its only C is the
        // header's status codes (FluxError.Code's raw values).
        // FLUX_CHECK_INVARIANTS compiles the engine's invariant checks in
        // (SQLite's SQLITE_DEBUG habit): in debug builds, so in swift test;
        // the Makefile adds it to the sanitizer and fuzz libraries. Never in
        // the shipped library.
        .target(
            name: "FluxCore", dependencies: ["CFlux"],
            swiftSettings: [.define("FLUX_CHECK_INVARIANTS", .when(configuration: .debug))]),
        // libffi (pkg-config "libffi"), for the trampolines of the C ABI only;
        // FluxCore never sees it.
        .systemLibrary(name: "CFFI", pkgConfig: "libffi", providers: [.apt(["libffi-dev"])]),
        // The C ABI: @_cdecl("flux_...") exports only, thin, over FluxCore (and
        // over libffi for flux_closure_* and flux_call).
        .target(name: "FluxC", dependencies: ["FluxCore", "CFlux", "CFFI"]),
        // Swift users' module: FluxCore re-exported, plus the Swift-only layers.
        .target(name: "Flux", dependencies: ["FluxCore"]),
        // The Swift counter example (make demo).
        .executableTarget(name: "counter", dependencies: ["Flux"], path: "examples/counter"),
        // JBFlux's store model: registered stores, owner-bound listeners (make demo).
        .executableTarget(name: "current-user", dependencies: ["Flux"], path: "examples/current-user"),
        // The Swift layer's benchmark (make bench, release build).
        .executableTarget(name: "flux-bench-swift", dependencies: ["Flux"], path: "bench/swift"),
        // CFlux too: the header as a plain module, as a Swift host imports it.
        .testTarget(
            name: "FluxCoreTests", dependencies: ["FluxCore", "CFlux"],
            swiftSettings: [.define("FLUX_CHECK_INVARIANTS", .when(configuration: .debug))]),
        // The VueFlux layer's tests: VueFlux's own suite, ported, and more.
        // Swift 5 mode, as VueFlux's: in Swift 6 XCTest's waitForExpectations
        // is main-actor isolated, and the tests' non-Sendable observers would
        // then be inferred @MainActor while being called on other threads.
        .testTarget(
            name: "FluxTests", dependencies: ["Flux"],
            swiftSettings: [.swiftLanguageMode(.v5)]),
    ],
    swiftLanguageModes: [.v6]
)
