#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
@_spi(Engine) import FluxCore

// flux_last_error(): one malloc'd, NUL-terminated message per thread, freed by
// the key's destructor when the thread exits.

private let emptyMessage: StaticString = ""
private let outOfMemoryMessage: StaticString = "flux: out of memory while recording an error message"
/// Stored instead of a buffer when none could be allocated; never freed.
private var outOfMemorySentinel: UnsafeMutableRawPointer {
    UnsafeMutableRawPointer(mutating: UnsafeRawPointer(outOfMemoryMessage.utf8Start))
}

private let lastErrorKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key) { message in
        if message != outOfMemorySentinel { free(message) }
    }
    return key
}()

/// Records "function: message" as this thread's last error and returns `status`.
func fail(_ function: StaticString, _ status: FluxError.Code, _ message: String) -> Int32 {
    let text = "\(function): \(message)"
    var old = pthread_getspecific(lastErrorKey)
    if old == outOfMemorySentinel { old = nil }
    let count = text.utf8.count
    if let buffer = realloc(old, count + 1) {
        text.withCString { buffer.copyMemory(from: $0, byteCount: count + 1) }
        pthread_setspecific(lastErrorKey, buffer)
    } else {
        free(old)
        pthread_setspecific(lastErrorKey, outOfMemorySentinel)
    }
    return status.rawValue
}

func fail(_ function: StaticString, _ error: FluxError) -> Int32 {
    fail(function, error.code, error.message)
}

func fail(_ function: StaticString, _ error: DispatchError<CallbackFailure>) -> Int32 {
    switch error {
    case .flux(let error):
        fail(function, error)
    case .callback(let failure, let token):
        fail(function, .callbackFailed,
             "callback for token \(token.rawValue) returned \(failure.value); the dispatch was aborted")
    }
}

extension StaticString {
    var cString: UnsafePointer<CChar> {
        UnsafeRawPointer(utf8Start).assumingMemoryBound(to: CChar.self)
    }
}

@_cdecl("flux_last_error")
public func flux_last_error() -> UnsafePointer<CChar> {
    if let message = pthread_getspecific(lastErrorKey) {
        return UnsafePointer(message.assumingMemoryBound(to: CChar.self))
    }
    return emptyMessage.cString
}
