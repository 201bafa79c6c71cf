import Testing
@_spi(Engine) @testable import FluxCore

#if FLUX_CHECK_INVARIANTS
    /// The invariant checks compiled into test builds (FLUX_CHECK_INVARIANTS)
    /// really look: each broken invariant, made by hand on a dispatcher no one
    /// else uses, is named -- and a sound engine passes.
    @Suite struct InvariantTests {
        @Test func aSoundEngineHasNoViolation() throws {
            let d = Dispatcher<Int>()
            d.register { _ in }
            try d.dispatch(1)
            d.core.lock.lock()
            defer { d.core.lock.unlock() }
            #expect(d.core.invariantViolationLocked() == nil)
        }

        @Test func aStateBitWithoutADispatchIsCaught() {
            let d = Dispatcher<Int>()
            d.core.lock.lock()
            defer { d.core.lock.unlock() }
            for bit in [
                DispatchCore<ClosureCallback<Int>>.waitersBit, DispatchCore<ClosureCallback<Int>>.slowEndBit,
                DispatchCore<ClosureCallback<Int>>.mutatingBit, 1 << 20,
            ] {
                d.core.state.store(bit, ordering: .relaxed)
                #expect(d.core.invariantViolationLocked() != nil, "bit \(bit) set on an idle engine")
            }
            d.core.state.store(0, ordering: .relaxed)
            #expect(d.core.invariantViolationLocked() == nil)
        }

        @Test func tokensOutOfOrderAreCaught() {
            let d = Dispatcher<Int>()
            d.register { _ in }
            d.register { _ in }
            d.core.lock.lock()
            defer { d.core.lock.unlock() }
            let table = d.core.slots.pointee
            let (first, second) = (table.tokens[0], table.tokens[1])
            table.tokens[0] = second
            table.tokens[1] = first
            #expect(d.core.invariantViolationLocked()?.contains("strictly increase") == true)
            table.tokens[0] = first
            table.tokens[1] = second
        }

        @Test func aRunLeftInconsistentIsCaught() throws {
            let d = Dispatcher<Int>()
            d.register { _ in }
            try d.dispatch(1)
            let pending = d.core.run.pointee.pending
            #expect(d.core.runViolation(pending) == nil, "after a dispatch the run is at rest")
            // A callback left marked pending, as if a wait never returned.
            d.core.slots.pointee.setMark(0, pending)
            #expect(d.core.runViolation(pending)?.contains("still marked pending") == true)
            d.core.slots.pointee.setMark(0, pending | 1)
            // Aborted with no failure recorded.
            d.core.run.pointee.aborted = true
            #expect(d.core.runViolation(pending)?.contains("aborted") == true)
            d.core.run.pointee.aborted = false
            #expect(d.core.runViolation(pending) == nil)
        }
    }
#endif
