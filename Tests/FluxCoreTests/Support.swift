import Synchronization
@_spi(Engine) @testable import FluxCore

/// A thread-safe list of what happened, in order.
final class Log: Sendable {
    private let entries = Guarded<[String]>([])
    func append(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
    func count(of entry: String) -> Int { all.filter { $0 == entry }.count }
}

/// A value shared with callbacks, which must be @Sendable.
final class Box<Value: Sendable>: Sendable {
    private let storage: Guarded<Value>
    init(_ value: Value) { storage = Guarded(value) }
    var value: Value {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}

struct Boom: Error, Equatable { let id: Int }

/// The FluxError code `body` throws, or nil when it throws something else or nothing.
func fluxCode(_ body: () throws -> Void) -> FluxError.Code? {
    do {
        try body()
        return nil
    } catch let error as FluxError {
        return error.code
    } catch {
        return nil
    }
}

func fluxMessage(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let error as FluxError {
        return error.message
    } catch {
        return nil
    }
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A joinable thread running a closure (Foundation's Thread cannot be joined).
final class Thread: @unchecked Sendable {
    private var handle = pthread_t()
    private let body: @Sendable () -> Void

    /// `stackSize`: for a test that needs that much stack, which a thread's
    /// default (the parent's `ulimit -s`) may not give.
    init(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        self.body = body
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        if let stackSize { precondition(pthread_attr_setstacksize(&attributes, stackSize) == 0) }
        let context = Unmanaged.passRetained(self).toOpaque()
        let result = pthread_create(
            &handle, &attributes,
            { context in
                let thread = Unmanaged<Thread>.fromOpaque(context!).takeRetainedValue()
                thread.body()
                return nil
            }, context)
        precondition(result == 0, "pthread_create failed")
    }

    func join() { pthread_join(handle, nil) }
}

/// A one-shot signal between threads.
final class Gate: Sendable {
    private let opened = Guarded(false)
    func open() { opened.withLock { $0 = true } }
    /// Waits up to `seconds` for `open()`; returns whether it opened.
    func wait(seconds: Double = 10) -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while !opened.withLock({ $0 }) {
            if ContinuousClock.now > deadline { return false }
            usleep(100)
        }
        return true
    }
}

func pause(milliseconds: UInt32) { usleep(milliseconds * 1000) }
func pause(microseconds: UInt32) { usleep(microseconds) }
