// Linux stand-ins for the Darwin atomics VueFlux's sources call (AtomicBool,
// Executor.mainThread): the same operations on the same Int32 cells, through
// the standard library's atomics. Compiled into both VueFlux modules, as
// VueFluxInternalCore is.
#if !canImport(Darwin)
    import Synchronization

    private func atomic(_ address: UnsafeMutablePointer<Int32>) -> UnsafeMutablePointer<Atomic<Int32>> {
        UnsafeMutableRawPointer(address).assumingMemoryBound(to: Atomic<Int32>.self)
    }

    func OSAtomicCompareAndSwap32Barrier(_ old: Int32, _ new: Int32, _ address: UnsafeMutablePointer<Int32>) -> Bool {
        atomic(address).pointee.compareExchange(expected: old, desired: new, ordering: .sequentiallyConsistent)
            .exchanged
    }

    @discardableResult
    func OSAtomicIncrement32(_ address: UnsafeMutablePointer<Int32>) -> Int32 {
        atomic(address).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
    }

    @discardableResult
    func OSAtomicDecrement32(_ address: UnsafeMutablePointer<Int32>) -> Int32 {
        atomic(address).pointee.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue
    }
#endif
