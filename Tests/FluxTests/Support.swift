import Dispatch
import Foundation
import Flux

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Waits up to `seconds` for child `pid`, calling `meanwhile` before each
/// look (to drain its output, say), then kills it: whether it ended by
/// itself, and its wait status.
func reap(_ pid: pid_t, seconds: Double, meanwhile: () -> Void = {}) -> (ended: Bool, status: Int32) {
    var status: Int32 = 0
    for _ in 0..<Int(seconds * 500) {
        meanwhile()
        if waitpid(pid, &status, WNOHANG) == pid { return (true, status) }
        usleep(2_000)
    }
    kill(pid, SIGKILL)
    _ = waitpid(pid, &status, 0)
    return (false, status)
}

// VueFlux's test fixtures (VueFluxTests.swift), ported.

final class TestState: State {
    typealias Action = Void
    typealias Mutations = TestMutations

    let didSetValue: (Int) -> Void
    private var innerValue = 0
    var value: Int {
        get { return innerValue }
        set {
            innerValue = newValue
            didSetValue(newValue)
        }
    }

    init(didSetValue: @escaping (Int) -> Void = { _ in }) {
        self.didSetValue = didSetValue
    }
}

struct TestMutations: Mutations {
    typealias State = TestState

    func commit(action: Void, state: TestState) {
        state.value += 1
    }
}

extension Computed where State == TestState {
    var value: Int {
        return state.value
    }
}

extension Actions where State == TestState {
    func check() {
        dispatch(action: ())
    }
}

extension DispatchQueue {
    static func globalDefault() -> DispatchQueue {
        return .global()
    }
}

// For VueFlux's dispatcher scenarios, which subscribed closures to its
// internal Dispatcher: here a store whose every commit calls the state's
// closure. A State type of its own, so that `Store<CallbackState>.actions`
// reaches only the stores these tests create.

final class CallbackState: State {
    typealias Action = Void
    typealias Mutations = CallbackMutations

    let onCommit: () -> Void

    init(_ onCommit: @escaping () -> Void) {
        self.onCommit = onCommit
    }
}

struct CallbackMutations: Mutations {
    typealias State = CallbackState

    func commit(action: Void, state: CallbackState) {
        state.onCommit()
    }
}

func callbackStore(_ onCommit: @escaping () -> Void) -> Store<CallbackState> {
    return Store<CallbackState>(state: .init(onCommit), mutations: .init(), executor: .immediate)
}

/// Runs each body on a thread of its own, all at once (dispatch queues may
/// run them one after another when their threads are busy or blocked), and
/// says whether all of them returned within `seconds`.
func onThreads(_ bodies: [() -> Void], seconds: Double = 120) -> Bool {
    let done = DispatchGroup()
    for body in bodies {
        done.enter()
        nonisolated(unsafe) let body = body
        Thread {
            body()
            done.leave()
        }.start()
    }
    return done.wait(timeout: .now() + seconds) == .success
}

/// SplitMix64's output for `value`: the seeded randomness of the model and
/// stress tests, the same on every run and platform.
func mix(_ value: UInt64) -> UInt64 {
    var z = value &+ 0x9E37_79B9_7F4A_7C15
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
}
