#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
@_spi(Engine) import FluxCore
import Synchronization

// flux_last_error() and its values: one malloc'd record per thread -- the
// token, the cycle's length and tokens, then the NUL-terminated message --
// freed by the key's destructor when the thread exits.

private let emptyMessage: StaticString = ""
private let outOfMemoryMessage: StaticString = "flux: out of memory while recording an error message"
/// Stored instead of a record when none could be allocated; never freed, and
/// read as a message with no token and no cycle.
private var outOfMemorySentinel: UnsafeMutableRawPointer {
    UnsafeMutableRawPointer(mutating: UnsafeRawPointer(outOfMemoryMessage.utf8Start))
}

/// The head of a thread's error record; `count` tokens of the cycle follow,
/// then the message.
private struct Record {
    var token: UInt64
    var count: Int
    static func messageOffset(_ count: Int) -> Int { MemoryLayout<Record>.stride + count * MemoryLayout<UInt64>.stride }
}

private let noKeyMessage: StaticString =
    "flux: no thread-specific key left for the error message (the process used up PTHREAD_KEYS_MAX)"

/// The key of this thread's record (see threadKey): nil when the process
/// has none left, and then no error is recorded -- flux_last_error() reads
/// `noKeyMessage`, the token and the cycle 0.
private let lastErrorKeyCell = Atomic<UInt>(0)

private var lastErrorKey: pthread_key_t? {
    threadKey(lastErrorKeyCell) { record in
        if record != outOfMemorySentinel { free(record) }
    }
}

/// This thread's record, or nil (none yet, no key, or the out-of-memory sentinel).
private func currentRecord() -> UnsafeMutableRawPointer? {
    guard let key = lastErrorKey, let record = pthread_getspecific(key), record != outOfMemorySentinel else {
        return nil
    }
    return record
}

/// Records "function: message", the token and the cycle as this thread's last
/// error and returns `status`. A literal message costs no allocation; one
/// built at run time does (see `FluxError.init(_:template:...)` for one that
/// does not).
func fail(
    _ function: StaticString, _ status: FluxError.Code, _ message: String,
    token: DispatchToken? = nil, cycle: [DispatchToken] = []
) -> Int32 {
    fail(function, FluxError(status, message, token: token, cycle: cycle))
}

/// Records `error` as this thread's last error, "function: " before its
/// message, and returns its status.
///
/// Allocates with realloc only, never through Swift (whose allocator traps
/// when memory runs out): this is how FLUX_ERR_NO_MEMORY is reported, and
/// how any error is when memory has run out.
func fail(_ function: StaticString, _ error: FluxError) -> Int32 {
    guard let key = lastErrorKey else { return error.code.rawValue }
    let name = function.utf8CodeUnitCount
    let start = Record.messageOffset(error.cycle.count)
    let count = name + 2 + error.writeMessage(to: nil)
    guard let record = realloc(currentRecord(), start + count + 1) else {
        free(currentRecord())
        pthread_setspecific(key, outOfMemorySentinel)
        return error.code.rawValue
    }
    record.storeBytes(of: Record(token: error.token?.rawValue ?? 0, count: error.cycle.count), as: Record.self)
    for (i, link) in error.cycle.enumerated() {
        record.storeBytes(of: link.rawValue, toByteOffset: MemoryLayout<Record>.stride + i * 8, as: UInt64.self)
    }
    let buffer = (record + start).assumingMemoryBound(to: UInt8.self)
    buffer.update(from: function.utf8Start, count: name)
    buffer[name] = UInt8(ascii: ":")
    buffer[name + 1] = UInt8(ascii: " ")
    _ = error.writeMessage(to: buffer + name + 2)
    buffer[count] = 0
    pthread_setspecific(key, record)
    return error.code.rawValue
}

/// Runs `body` with `error` recorded as this thread's last error (`body`
/// gets its status), then frees that record and puts back the one that was
/// there: an enqueued payload's done reads its failure while it runs, and
/// the call that ran the payload may yet succeed -- and successful calls
/// leave flux_last_error() unchanged. (Kept, the records of a long run of
/// failing payloads would pile up; flux.h tells the done to copy.)
func whileRecorded(
    _ function: StaticString, _ error: DispatchError<CallbackFailure>, _ body: (Int32) -> Void
) {
    guard let key = lastErrorKey else { return body(fail(function, error)) }
    let saved = pthread_getspecific(key)
    pthread_setspecific(key, nil)
    body(fail(function, error))
    // body may have failed calls of its own, which replaced the record.
    free(currentRecord())
    pthread_setspecific(key, saved)
}

func fail(_ function: StaticString, _ error: DispatchError<CallbackFailure>) -> Int32 {
    switch error {
    case .flux(let error):
        fail(function, error)
    case .callback(let failure, let token):
        fail(
            function,
            FluxError(
                .callbackFailed, template: "callback for token \u{3} returned \u{4}; the dispatch was aborted",
                number: UInt64(bitPattern: Int64(failure.value)), token: token))
    }
}

/// An error a C export turns into its status: recorded as the thread's last
/// error (message, token, cycle) for the function that failed.
protocol RecordedError: Error {
    func record(_ function: StaticString) -> Int32
}

extension FluxError: RecordedError {
    func record(_ function: StaticString) -> Int32 { fail(function, self) }
}

extension DispatchError: RecordedError where Failure == CallbackFailure {
    func record(_ function: StaticString) -> Int32 { fail(function, self) }
}

/// The status of a throwing body, as swift-system's `nothingOrErrno`: 0 when
/// it returns, else its error, recorded for `function`. Inlined: on the hot
/// paths it costs what a hand-written `do`/`catch` does.
@inline(__always)
func status<Failure: RecordedError>(_ function: StaticString, _ body: () throws(Failure) -> Void) -> Int32 {
    do {
        try body()
        return 0
    } catch {
        return error.record(function)
    }
}

/// A context handed to a call: the library's whatever the outcome (flux.h,
/// "Ownership"), so each way the call refuses destroys it, once, before the
/// failure is recorded for `function`. One per entry point that takes a
/// context, made before its first check.
struct HandedOver {
    let function: StaticString
    let context: UnsafeMutableRawPointer?
    let destroy: FluxDestroyFunction?

    init(_ function: StaticString, _ context: UnsafeMutableRawPointer?, _ destroy: FluxDestroyFunction?) {
        self.function = function
        self.context = context
        self.destroy = destroy
    }

    /// Destroys the context, records the failure; returns its status.
    func refuse(_ code: FluxError.Code, _ message: String) -> Int32 {
        refuse(FluxError(code, message))
    }

    func refuse(_ error: FluxError) -> Int32 {
        destroy?(context)
        return fail(function, error)
    }
}

extension StaticString {
    var cString: UnsafePointer<CChar> {
        UnsafeRawPointer(utf8Start).assumingMemoryBound(to: CChar.self)
    }
}

@_cdecl("flux_last_error")
public func flux_last_error() -> UnsafePointer<CChar> {
    guard let key = lastErrorKey else { return noKeyMessage.cString }
    guard let record = pthread_getspecific(key) else { return emptyMessage.cString }
    guard record != outOfMemorySentinel else { return outOfMemoryMessage.cString }
    let count = record.load(as: Record.self).count
    return UnsafePointer((record + Record.messageOffset(count)).assumingMemoryBound(to: CChar.self))
}

@_cdecl("flux_last_error_token")
public func flux_last_error_token() -> UInt64 {
    currentRecord()?.load(as: Record.self).token ?? 0
}

@_cdecl("flux_last_error_cycle")
public func flux_last_error_cycle(_ tokens: UnsafeMutablePointer<UInt64>?, _ capacity: UInt) -> UInt {
    guard let record = currentRecord() else { return 0 }
    let count = record.load(as: Record.self).count
    if let tokens {
        for i in 0..<min(count, Int(clamping: capacity)) {
            tokens[i] = record.load(fromByteOffset: MemoryLayout<Record>.stride + i * 8, as: UInt64.self)
        }
    }
    return UInt(count)
}
