import Synchronization
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

    // A child forked while another thread's registerStore ran the class's
    // init waited for good in a registerStore of that class: the creating
    // thread does not exist there. It traps now, naming the class (as
    // `register` traps on a dispatch the fork orphaned); other classes
    // still register.
    @Test(.timeLimit(.minutes(1)))
    func aChildTrapsOnAStoreClassAnotherThreadWasCreating() async {
        await #expect(processExitsWith: .success) {
            exit(forkWhileAnotherThreadCreatesAStore())
        }
    }
}

/// A store class whose init, the first time, waits to be let go on.
private final class MadeSlowly: RegisteredStore {
    static let entered = Gate()
    static let release = Gate()
    static let first = Atomic(true)
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<Int>) {
        if Self.first.exchange(false, ordering: .relaxed) {
            Self.entered.open()
            _ = Self.release.wait()
        }
        dispatchToken = dispatcher.register { _ in }
    }
}

private final class MadeAtOnce: RegisteredStore {
    let dispatchToken: DispatchToken
    init(dispatcher: Dispatcher<Int>) { dispatchToken = dispatcher.register { _ in } }
}

/// 0 when everything held; 1: the child hung; 2: it did not trap; 4: the
/// parent's registry was harmed; 100, 101: no set-up.
private func forkWhileAnotherThreadCreatesAStore() -> Int32 {
    let d = Dispatcher<Int>()
    // What the child runs, once here first (see forkWhileAnotherThreadDispatches).
    let warm = Dispatcher<Int>()
    _ = warm.registerStore(MadeAtOnce.self)
    warm.removeAllStores()
    let maker = Thread { _ = d.registerStore(MadeSlowly.self) }
    guard MadeSlowly.entered.wait() else { return 100 }
    // A thread waiting for that creation at the fork: in the child, the
    // condition variable it waited on must not hold up the next broadcast.
    let waiter = Thread { _ = d.registerStore(MadeSlowly.self) }
    pause(milliseconds: 50)  // waiting by now (if not, the test checks less)
    let pid = fork()
    if pid == 0 {
        // The lock and the records came through the fork whole: another
        // class registers (its creation's broadcast does not wait for the
        // parent's waiter); the orphaned one traps rather than waits.
        _ = d.registerStore(MadeAtOnce.self)
        _ = d.registerStore(MadeSlowly.self)
        _exit(0)
    }
    guard pid > 0 else { return 101 }
    let (ended, status) = reap(pid)
    var failed: Int32 = 0
    if !ended {
        failed |= 1
    } else if status & 0x7f == 0 {
        failed |= 2  // exited: registerStore returned
    }
    MadeSlowly.release.open()
    maker.join()
    waiter.join()
    if d.store(MadeSlowly.self) == nil || d.registerStore(MadeAtOnce.self) !== d.store(MadeAtOnce.self) { failed |= 4 }
    d.removeAllStores()
    return failed
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
    let (ended, status) = reap(pid)
    release.open()
    holder.join()
    var failed: Int32 = ended ? 0 : 64
    if status & 0x7f != 0 { failed |= 32 } else { failed |= (status >> 8) & 0x1f }
    // The parent's dispatcher is unharmed.
    if fluxCode({ try d.dispatch(2) }) != nil || fluxCode({ try d.unregister(token) }) != nil { failed |= 128 }
    return failed
}

/// Waits up to 10 s for child `pid`, killing it then: whether it ended by
/// itself, and its wait status.
private func reap(_ pid: pid_t) -> (ended: Bool, status: Int32) {
    var status: Int32 = 0
    for _ in 0..<1000 {
        if waitpid(pid, &status, WNOHANG) == pid { return (true, status) }
        pause(milliseconds: 10)
    }
    kill(pid, SIGKILL)
    _ = waitpid(pid, &status, 0)
    return (false, status)
}
