// The codes are include/flux.h's flux_status enumerators (the CFlux module),
// so Swift and C cannot disagree; nothing of the header is re-exported.
internal import CFlux

/// An error the dispatcher itself reports, modelled on swift-system's `Errno`:
/// a stable code, the same number the C ABI returns as `flux_status`, plus a
/// message for people that names the tokens involved.
///
/// Match on the code, never on the message:
///
///     do { try dispatcher.waitFor([token]) }
///     catch FluxError.Code.circularDependency { ... }
public struct FluxError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The kind of error. The raw value is the C `flux_status`.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int32
        @inlinable public init(rawValue: Int32) { self.rawValue = rawValue }
        /// The raw values are the header's own enumerators, never copies.
        init(_ status: flux_status) { self.init(rawValue: Int32(truncatingIfNeeded: status.rawValue)) }

        /// A missing or malformed argument. The corresponding C status is
        /// `FLUX_ERR_INVALID_ARGUMENT`.
        public static var invalidArgument: Code { Code(FLUX_ERR_INVALID_ARGUMENT) }
        /// A token never issued, already unregistered, or registered during the
        /// running dispatch. The corresponding C status is `FLUX_ERR_UNKNOWN_TOKEN`.
        public static var unknownToken: Code { Code(FLUX_ERR_UNKNOWN_TOKEN) }
        /// Dispatch from inside a dispatch (on this thread, or a wait for
        /// another thread's dispatch that would deadlock), or teardown while
        /// dispatching. The corresponding C status is
        /// `FLUX_ERR_ALREADY_DISPATCHING`.
        public static var alreadyDispatching: Code { Code(FLUX_ERR_ALREADY_DISPATCHING) }
        /// `waitFor` while this thread is not dispatching. The corresponding C
        /// status is `FLUX_ERR_NOT_DISPATCHING`.
        public static var notDispatching: Code { Code(FLUX_ERR_NOT_DISPATCHING) }
        /// `waitFor` on a callback that is running further up the stack. The
        /// corresponding C status is `FLUX_ERR_CIRCULAR`.
        public static var circularDependency: Code { Code(FLUX_ERR_CIRCULAR) }
        /// A callback failed and the dispatch was aborted. Swift callers see the
        /// callback's own error instead; the C status is `FLUX_ERR_CALLBACK_FAILED`.
        public static var callbackFailed: Code { Code(FLUX_ERR_CALLBACK_FAILED) }
        /// An allocation failed. The corresponding C status is `FLUX_ERR_NO_MEMORY`.
        public static var noMemory: Code { Code(FLUX_ERR_NO_MEMORY) }
        /// A `waitFor` chain reached the thread's stack limit; the dispatch
        /// was aborted, as if a callback had failed. The corresponding C
        /// status is `FLUX_ERR_TOO_DEEP`.
        public static var tooDeep: Code { Code(FLUX_ERR_TOO_DEEP) }

        public var description: String {
            switch self {
            case .invalidArgument: "invalidArgument"
            case .unknownToken: "unknownToken"
            case .alreadyDispatching: "alreadyDispatching"
            case .notDispatching: "notDispatching"
            case .circularDependency: "circularDependency"
            case .callbackFailed: "callbackFailed"
            case .noMemory: "noMemory"
            case .tooDeep: "tooDeep"
            default: "Code(\(rawValue))"
            }
        }

        /// Lets `catch FluxError.Code.unknownToken { }` match a thrown `FluxError`.
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? FluxError)?.code == code
        }
    }

    public let code: Code
    /// Whether `text` is a template (see `init(_:template:number:token:cycle:)`).
    /// Kept beside `code`, in what would be padding: an error is copied
    /// through every frame of a failing dispatch, and a larger one overflows
    /// a small stack where one that fits did not.
    private let templated: Bool
    /// `token`, as a flag in that padding too and a plain number: an
    /// optional token takes two words, and one word more than this makes
    /// `Optional<DispatchError>` too large for the compiler to destroy
    /// inline -- it goes through the runtime's generic value witnesses then,
    /// ~80 instructions on every dispatch, and their first use sets the
    /// type up on a deep stack (a first failure on a 16 KiB stack overflowed).
    private let hasToken: Bool
    private let tokenValue: UInt64
    /// The message, or with `templated` its template.
    private let text: String
    /// The number a template names.
    private let number: UInt64
    /// What went wrong, naming the tokens involved. Not a stable interface:
    /// `token` and `cycle` give the same facts as values.
    public var message: String {
        guard templated else { return text }
        return String(unsafeUninitializedCapacity: writeMessage(to: nil)) { writeMessage(to: $0.baseAddress) }
    }
    /// The token the error is about, when there is one: the first token a
    /// call rejected (`unknownToken`; nil when that is 0, which never names
    /// a registration, as C's 0 means none), the pending token a wait asked for
    /// (`circularDependency`), the token whose run would have gone too deep
    /// (`tooDeep`), the callback whose failure aborted the dispatch
    /// (`callbackFailed`). C: `flux_last_error_token()`.
    public var token: DispatchToken? { hasToken ? DispatchToken(rawValue: tokenValue) : nil }
    /// For `circularDependency`: the cycle, the waiter that called `waitFor`
    /// first, then the token it asked for, then whom that one is waiting for,
    /// and so on back to the waiter ("3 waits for 1, which waits for 2, which
    /// waits for 3" is [3, 1, 2, 3]). Empty for every other error.
    /// C: `flux_last_error_cycle()`.
    public let cycle: [DispatchToken]

    public init(_ code: Code, _ message: String, token: DispatchToken? = nil, cycle: [DispatchToken] = []) {
        self.code = code
        self.templated = false
        self.text = message
        self.number = 0
        self.hasToken = token != nil
        self.tokenValue = token?.rawValue ?? 0
        self.cycle = cycle
    }

    /// An error whose message costs no allocation to make: `template`, a
    /// string literal (never allocated), is filled in only when the message
    /// is read or written out. In it, "\u{1}" stands for `number`, "\u{4}"
    /// for `number` as a signed value, "\u{3}" for `token`, and "\u{2}"
    /// for the cycle ("3 waits for 1, which is waiting for 2"). The engine's
    /// errors are made so, and so are the C ABI's: a Swift string longer
    /// than 15 bytes is allocated, Swift stops the process when an
    /// allocation fails, and libflux reports errors when memory has run out.
    @_spi(Engine) public init(
        _ code: Code, template: String, number: UInt64 = 0, token: DispatchToken? = nil,
        cycle: [DispatchToken] = []
    ) {
        self.code = code
        self.templated = true
        self.text = template
        self.number = number
        self.hasToken = token != nil
        self.tokenValue = token?.rawValue ?? 0
        self.cycle = cycle
    }

    /// Writes the message's UTF-8 bytes (no NUL) at `out`, when given, and
    /// returns how many there are. Allocates nothing.
    @_spi(Engine) public func writeMessage(to out: UnsafeMutablePointer<UInt8>?) -> Int {
        var text = text
        return text.withUTF8 { bytes in
            guard templated else {
                if let out, let base = bytes.baseAddress { out.update(from: base, count: bytes.count) }
                return bytes.count
            }
            var used = 0
            func put(_ byte: UInt8) {
                out?[used] = byte
                used += 1
            }
            func put(_ value: UInt64, negative: Bool = false) {
                used += Self.writeDecimal(value, negative: negative, to: out.map { $0 + used })
            }
            func put(_ literal: StaticString) {
                out.map { ($0 + used).update(from: literal.utf8Start, count: literal.utf8CodeUnitCount) }
                used += literal.utf8CodeUnitCount
            }
            for byte in bytes {
                switch byte {
                case 1: put(number)
                case 4: put(Int64(bitPattern: number).magnitude, negative: Int64(bitPattern: number) < 0)
                case 3: put(token?.rawValue ?? 0)
                case 2:
                    guard cycle.count >= 2 else { break }
                    put(cycle[0].rawValue)
                    if cycle.count == 2 && cycle[0] == cycle[1] {
                        put(" waits for itself")
                        break
                    }
                    put(" waits for ")
                    put(cycle[1].rawValue)
                    for link in cycle.dropFirst(2) {
                        put(", which is waiting for ")
                        put(link.rawValue)
                    }
                default: put(byte)
                }
            }
            return used
        }
    }

    /// Writes `value` in decimal (after a '-' when `negative`) at `out`,
    /// when given; returns how many bytes that is.
    static func writeDecimal(_ value: UInt64, negative: Bool, to out: UnsafeMutablePointer<UInt8>?) -> Int {
        var digits = 1
        var rest = value / 10
        while rest != 0 {
            digits += 1
            rest /= 10
        }
        let sign = negative ? 1 : 0
        if let out {
            if negative { out.pointee = UInt8(ascii: "-") }
            rest = value
            for i in stride(from: sign + digits - 1, through: sign, by: -1) {
                out[i] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            }
        }
        return sign + digits
    }

    public var description: String { message }

    public static func == (a: FluxError, b: FluxError) -> Bool {
        a.code == b.code && a.token == b.token && a.cycle == b.cycle && a.message == b.message
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(token)
        hasher.combine(cycle)
        hasher.combine(message)
    }
}

extension FluxError {
    @usableFromInline static var alreadyDispatching: FluxError {
        FluxError(.alreadyDispatching, "cannot dispatch in the middle of a dispatch")
    }

    @usableFromInline static func circular(_ token: DispatchToken) -> FluxError {
        FluxError(
            .circularDependency, template: "circular dependency detected while waiting for token \u{3}", token: token)
    }
}
