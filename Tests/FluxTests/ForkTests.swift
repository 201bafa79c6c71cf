import Dispatch
import Testing

@testable import Flux

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The layer's locks had no fork hook (FluxCore's dispatchers' had): a child
// forked while another thread held one hung at its first store or scoped
// observation. Each test runs in a process of its own (see FluxCoreTests'
// ForkTests for why) and returns a bit per failure, 64 when the child hung.
@Suite struct ForkTests {
    @Test(.timeLimit(.minutes(1)))
    func aChildDispatchesToAStateTypeAnotherThreadOfTheParentWasDispatching() async {
        await #expect(processExitsWith: .success) {
            exit(forkWhileAnotherThreadCommits())
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aChildFindsTheRegistriesFreeThatAnotherThreadHeldAtTheFork() async {
        await #expect(processExitsWith: .success) {
            exit(forkWhileAnotherThreadHoldsTheRegistries())
        }
    }
}

private final class ForkState: Flux.State {
    typealias Action = Int
    typealias Mutations = ForkMutations
    nonisolated(unsafe) var commits = 0
}

private struct ForkMutations: Flux.Mutations {
    typealias State = ForkState
    nonisolated(unsafe) static var entered: DispatchSemaphore?
    nonisolated(unsafe) static var release: DispatchSemaphore?

    func commit(action: Int, state: ForkState) {
        if action == 0 {
            Self.entered?.signal()
            Self.release?.wait()
        }
        state.commits += 1
    }
}

private func forkWhileAnotherThreadCommits() -> Int32 {
    let entered = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    ForkMutations.entered = entered
    ForkMutations.release = release
    let store = Store(state: ForkState(), mutations: ForkMutations(), executor: .immediate)
    // What the child runs, run once here first (the runtime sets up types
    // at first use, under locks a thread of the parent may hold).
    Store<ForkState>.actions.dispatch(action: 1)
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
        store.actions.dispatch(action: 0)
        done.signal()
    }
    entered.wait()
    let pid = fork()
    if pid == 0 {
        var failed: Int32 = 0
        let fresh = Store(state: ForkState(), mutations: ForkMutations(), executor: .immediate)
        Store<ForkState>.actions.dispatch(action: 1)
        if fresh.computed.state.commits != 1 { failed |= 1 }
        fresh.actions.dispatch(action: 2)
        if fresh.computed.state.commits != 2 { failed |= 2 }
        _exit(failed)
    }
    guard pid > 0 else { return 101 }
    var failed = waitForChild(pid)
    release.signal()
    done.wait()
    // The parent's dispatch lock is unharmed.
    Store<ForkState>.actions.dispatch(action: 3)
    if store.computed.state.commits != 3 { failed |= 128 }
    return failed
}

private func forkWhileAnotherThreadHoldsTheRegistries() -> Int32 {
    final class Owner {}
    let owner = Owner()
    let sink = Sink<Int>()
    sink.signal.observe(duringScopeOf: owner) { _ in }
    _ = StoreDispatcherRegistry.shared
    let held = DispatchSemaphore(value: 0)
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
        ScopeRegistry.shared.lock.lock()
        StoreDispatcherRegistry.shared.lock.lock()
        held.signal()
        // fork() now waits for these to be let go.
        usleep(200_000)
        StoreDispatcherRegistry.shared.lock.unlock()
        ScopeRegistry.shared.lock.unlock()
        done.signal()
    }
    held.wait()
    let pid = fork()
    if pid == 0 {
        var failed: Int32 = 0
        var received: [Int] = []
        let childOwner = Owner()
        sink.signal.observe(duringScopeOf: childOwner) { received.append($0) }
        sink.send(value: 1)
        if received != [1] { failed |= 1 }
        withExtendedLifetime(childOwner) {}
        let store = Store(state: ForkState(), mutations: ForkMutations(), executor: .immediate)
        Store<ForkState>.actions.dispatch(action: 1)
        if store.computed.state.commits != 1 { failed |= 2 }
        _exit(failed)
    }
    guard pid > 0 else { return 101 }
    let failed = waitForChild(pid)
    done.wait()
    return failed
}

/// The child's exit status, or 64 when it hung (killed after 10 s).
private func waitForChild(_ pid: pid_t) -> Int32 {
    let (ended, status) = reap(pid, seconds: 10)
    var failed: Int32 = ended ? 0 : 64
    if status & 0x7f != 0 { failed |= 32 } else { failed |= (status >> 8) & 0x1f }
    return failed
}
