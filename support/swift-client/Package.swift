// swift-tools-version: 6.0
//
// A Swift user's package, as the README shows it, depending on this checkout
// by path: CI builds and runs it (make check-swift-client), so the manifest's
// name, the `Flux` product and what `import Flux` exposes are tested the way
// a user meets them.
import PackageDescription

let package = Package(
    name: "swift-client",
    dependencies: [
        .package(name: "libflux", path: "../..")
    ],
    targets: [
        .executableTarget(
            name: "FluxClient",
            dependencies: [.product(name: "Flux", package: "libflux")]
        )
    ],
    swiftLanguageModes: [.v6]
)
