// The module Swift users import. It re-exports the dispatcher core, so
// `import Flux` gives `Dispatcher`, `DispatchToken`, `FluxError` and the
// stores, and adds the Swift-only layers built on them (which may use
// Dispatch; FluxCore, and so libflux.so, must not).
@_exported import FluxCore
