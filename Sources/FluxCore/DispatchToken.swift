/// Identifies one registration with a dispatcher.
///
/// Tokens are unique within a dispatcher and never reused: they count up from
/// 1, so the raw value 0 never names a registration. The raw value is the C
/// `flux_token`.
@frozen
public struct DispatchToken: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: UInt64
    @inlinable public init(rawValue: UInt64) { self.rawValue = rawValue }
    @inlinable public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String { "token \(rawValue)" }
}
