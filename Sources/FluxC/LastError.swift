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
///
/// Allocates with realloc only, never through Swift (whose allocator traps
/// when memory runs out): this is how FLUX_ERR_NO_MEMORY is reported. Pass a
/// literal message on those paths, since building one allocates.
func fail(_ function: StaticString, _ status: FluxError.Code, _ message: String) -> Int32 {
    var message = message
    message.withUTF8 { text in
        let name = function.utf8CodeUnitCount
        let count = name + 2 + text.count
        var old = pthread_getspecific(lastErrorKey)
        if old == outOfMemorySentinel { old = nil }
        if let buffer = realloc(old, count + 1) {
            buffer.copyMemory(from: function.utf8Start, byteCount: name)
            buffer.storeBytes(of: UInt8(ascii: ":"), toByteOffset: name, as: UInt8.self)
            buffer.storeBytes(of: UInt8(ascii: " "), toByteOffset: name + 1, as: UInt8.self)
            if let base = text.baseAddress { (buffer + name + 2).copyMemory(from: base, byteCount: text.count) }
            buffer.storeBytes(of: 0, toByteOffset: count, as: UInt8.self)
            pthread_setspecific(lastErrorKey, buffer)
        } else {
            free(old)
            pthread_setspecific(lastErrorKey, outOfMemorySentinel)
        }
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
