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
    /// What went wrong, naming the tokens involved. Not a stable interface:
    /// `token` and `cycle` give the same facts as values.
    public let message: String
    /// The token the error is about, when there is one: the first token a
    /// call rejected (`unknownToken`), the pending token a wait asked for
    /// (`circularDependency`), the token whose run would have gone too deep
    /// (`tooDeep`), the callback whose failure aborted the dispatch
    /// (`callbackFailed`). C: `flux_last_error_token()`.
    public let token: DispatchToken?
    /// For `circularDependency`: the cycle, the waiter that called `waitFor`
    /// first, then the token it asked for, then whom that one is waiting for,
    /// and so on back to the waiter ("3 waits for 1, which waits for 2, which
    /// waits for 3" is [3, 1, 2, 3]). Empty for every other error.
    /// C: `flux_last_error_cycle()`.
    public let cycle: [DispatchToken]

    public init(_ code: Code, _ message: String, token: DispatchToken? = nil, cycle: [DispatchToken] = []) {
        self.code = code
        self.message = message
        self.token = token
        self.cycle = cycle
    }

    public var description: String { message }
}

extension FluxError {
    @usableFromInline static var alreadyDispatching: FluxError {
        FluxError(.alreadyDispatching, "cannot dispatch in the middle of a dispatch")
    }

    @usableFromInline static func circular(_ token: DispatchToken) -> FluxError {
        FluxError(
            .circularDependency, "circular dependency detected while waiting for token \(token.rawValue)",
            token: token)
    }
}
