import Testing

@_spi(Engine) @testable import FluxCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite struct ForkTests {
    // A Swift dispatcher was on no fork list (only C ones were): in a child
    // forked while another thread dispatched it, unregister "succeeded",
    // enqueue queued a payload no thread would ever run (its error lost)
    // and dispatch slept for good -- where the docs promise
    // `.alreadyDispatching` for each. A dispatcher idle at the fork works.
    // In a process of its own: forking the test runner, whose other threads
    // may hold runtime locks at the fork, could hang the child for reasons
    // of its own.
    @Test(.timeLimit(.minutes(1)))
    func aChildRefusesCallsOnADispatchAnotherThreadOfTheParentWasRunning() async {
        await #expect(processExitsWith: .success) {
            exit(forkWhileAnotherThreadDispatches())
        }
    }
}

/// The test's body: 0 when everything held, else a bit per failure (64: the
/// child hung, 128: the parent's dispatcher was harmed; 100 and 101: the
/// test could not set itself up).
private func forkWhileAnotherThreadDispatches() -> Int32 {
    let d = Dispatcher<Int>()
    let idle = Dispatcher<Int>()
    let ran = Box(0)
    idle.register { _ in ran.value += 1 }
    let entered = Gate()
    let release = Gate()
    let token = d.register { p in
        if p == 0 {
            entered.open()
            _ = release.wait()
        }
    }
    // What the child runs, run once here first: the child must not be the
    // first to set up the types' metadata (the holder thread could hold the
    // runtime's lock at the fork).
    _ = fluxCode { try d.unregister(DispatchToken(rawValue: 999)) }
    let warm = Dispatcher<Int>()
    warm.register { [unowned warm] p in
        guard p == 0 else { return }
        _ = fluxCode { try warm.dispatch(1) }
        try warm.enqueue(1, onError: { _ in })
    }
    _ = try? warm.dispatch(0)
    _ = try? warm.enqueue(0, onError: { _ in })
    let holder = Thread { try? d.dispatch(0) }
    guard entered.wait() else { return 100 }
    let pid = fork()
    if pid == 0 {
        // Bit by bit, what did not hold; a hang is caught by the parent.
        var failed: Int32 = 0
        if fluxCode({ try d.unregister(token) }) != .alreadyDispatching { failed |= 1 }
        let onError = Box(0)
        if fluxCode({ try d.enqueue(1, onError: { _ in onError.value += 1 }) }) != .alreadyDispatching {
            failed |= 2
        }
        if onError.value != 0 { failed |= 4 }
        if fluxCode({ try d.dispatch(1) }) != .alreadyDispatching { failed |= 8 }
        if (try? idle.dispatch(1)) == nil || ran.value != 1 { failed |= 16 }
        _exit(failed)
    }
    guard pid > 0 else { return 101 }
    var status: Int32 = 0
    var waited: pid_t = 0
    for _ in 0..<1000 {
        waited = waitpid(pid, &status, WNOHANG)
        if waited != 0 { break }
        pause(milliseconds: 10)
    }
    if waited == 0 {
        kill(pid, SIGKILL)
        _ = waitpid(pid, &status, 0)
    }
    release.open()
    holder.join()
    var failed: Int32 = waited == pid ? 0 : 64
    if status & 0x7f != 0 { failed |= 32 } else { failed |= (status >> 8) & 0x1f }
    // The parent's dispatcher is unharmed.
    if fluxCode({ try d.dispatch(2) }) != nil || fluxCode({ try d.unregister(token) }) != nil { failed |= 128 }
    return failed
}
