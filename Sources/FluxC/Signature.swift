import CFFI
import CFlux

// The signature language of flux_closure_create() and flux_call():
// "R(A...)", one letter a type. The header documents it; this file parses it
// strictly and says where a malformed one goes wrong.

/// At most this many arguments: the header's FLUX_SIGNATURE_MAX_ARGS.
let maxSignatureArguments = Int(FLUX_SIGNATURE_MAX_ARGS)

/// One letter of the signature language.
enum FFIKind: UInt8 {
    case void, int32, uint32, int64, uint64, size, float, double, pointer

    init?(letter: UInt8) {
        switch letter {
        case UInt8(ascii: "v"): self = .void
        case UInt8(ascii: "i"): self = .int32
        case UInt8(ascii: "I"): self = .uint32
        case UInt8(ascii: "l"): self = .int64
        case UInt8(ascii: "L"): self = .uint64
        case UInt8(ascii: "z"): self = .size
        case UInt8(ascii: "f"): self = .float
        case UInt8(ascii: "d"): self = .double
        case UInt8(ascii: "p"): self = .pointer
        default: return nil
        }
    }

    /// libffi's descriptor of the type (static storage, never written).
    var type: UnsafeMutablePointer<ffi_type> {
        switch self {
        case .void: cffi_type_void()
        case .int32: cffi_type_sint32()
        case .uint32: cffi_type_uint32()
        case .int64: cffi_type_sint64()
        case .uint64: cffi_type_uint64()
        case .size: cffi_type_size()
        case .float: cffi_type_float()
        case .double: cffi_type_double()
        case .pointer: cffi_type_pointer()
        }
    }

    /// The size of the natural C type, in bytes.
    var size: Int {
        switch self {
        case .void: 0
        case .int32, .uint32, .float: 4
        case .int64, .uint64, .double: 8
        case .size: MemoryLayout<Int>.size
        case .pointer: MemoryLayout<UnsafeRawPointer>.size
        }
    }
}

/// A parsed signature; the argument types were written to the caller's buffer.
struct Signature {
    let returnKind: FFIKind
    let argumentCount: Int
}

/// Why a signature was rejected, naming the position; see `message(for:)`.
struct SignatureError: Error {
    /// e.g. "expected ')' at position 3, found the end of the signature"
    let problem: String
    let isNull: Bool

    init(_ problem: String, isNull: Bool = false) {
        self.problem = problem
        self.isNull = isNull
    }

    /// The text after "function: " in flux_last_error().
    func message(signature text: UnsafePointer<CChar>?) -> String {
        guard let text, !isNull else { return "signature is NULL" }
        return "signature \"\(displayed(text))\": \(problem)"
    }
}

private let letters = "v, i, I, l, L, z, f, d, p"

/// Parses the NUL-terminated signature `text`, writing the libffi type of each
/// argument to `argumentTypes` (room for `maxSignatureArguments`). Reads no
/// further than the first error, so at most `maxSignatureArguments + 4` bytes.
func parseSignature(
    _ text: UnsafePointer<CChar>?,
    argumentTypes: UnsafeMutablePointer<UnsafeMutablePointer<ffi_type>?>
) throws(SignatureError) -> Signature {
    guard let text else { throw SignatureError("", isNull: true) }
    let bytes = UnsafeRawPointer(text).assumingMemoryBound(to: UInt8.self)

    // Position 0: the return type.
    let first = bytes[0]
    if first == 0 {
        throw SignatureError("the signature is empty; expected a return type letter (one of \(letters)) at position 0")
    }
    guard let returnKind = FFIKind(letter: first) else {
        throw SignatureError(
            "expected a return type letter (one of \(letters)) at position 0, found \(describe(first))")
    }

    // Position 1: '('.
    let open = bytes[1]
    if open != UInt8(ascii: "(") {
        let extra =
            FFIKind(letter: open) != nil
            ? " (a signature is one return type letter, then the argument letters in parentheses)" : ""
        throw SignatureError("expected '(' at position 1, found \(describe(open))\(extra)")
    }

    // The arguments, up to ')'.
    var position = 2
    var count = 0
    while true {
        let byte = bytes[position]
        if byte == UInt8(ascii: ")") { break }
        if byte == 0 {
            throw SignatureError("expected ')' at position \(position), found the end of the signature")
        }
        guard let kind = FFIKind(letter: byte) else {
            let what = isASCIILetter(byte) ? "unknown type letter" : "unexpected"
            throw SignatureError(
                "\(what) \(describe(byte)) at position \(position) (expected one of \(letters) or ')')")
        }
        if kind == .void {
            throw SignatureError(
                "'v' (void) at position \(position) is only valid as the return type, not as an argument")
        }
        if count == maxSignatureArguments {
            throw SignatureError(
                "too many arguments: argument \(count + 1) at position \(position); at most \(maxSignatureArguments) (FLUX_SIGNATURE_MAX_ARGS)"
            )
        }
        argumentTypes[count] = kind.type
        count += 1
        position += 1
    }

    // Nothing after ')'.
    let trailing = bytes[position + 1]
    if trailing != 0 {
        throw SignatureError(
            "unexpected \(describe(trailing)) at position \(position + 1), after the closing ')' at position \(position)"
        )
    }
    return Signature(returnKind: returnKind, argumentCount: count)
}

private func isASCIILetter(_ byte: UInt8) -> Bool {
    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
}

/// 'x' for a printable ASCII byte, '\xNN' otherwise.
private func describe(_ byte: UInt8) -> String {
    if byte == 0 { return "the end of the signature" }
    return "'\(escaped(byte, quote: UInt8(ascii: "'")))'"
}

/// The byte as C would write it between `quote`s: printable ASCII as itself
/// (backslash and the quote escaped), anything else as \xNN.
private func escaped(_ byte: UInt8, quote: UInt8) -> String {
    switch byte {
    case UInt8(ascii: "\\"), quote: return "\\" + String(UnicodeScalar(byte))
    case 0x20...0x7e: return String(UnicodeScalar(byte))
    default:
        let hex = String(byte, radix: 16, uppercase: true)
        return "\\x" + (byte < 16 ? "0" : "") + hex
    }
}

/// The signature as shown in a message: escaped, at most 64 bytes of it.
private func displayed(_ text: UnsafePointer<CChar>) -> String {
    let bytes = UnsafeRawPointer(text).assumingMemoryBound(to: UInt8.self)
    var result = ""
    var index = 0
    while bytes[index] != 0 {
        if index == 64 { return result + "..." }
        result += escaped(bytes[index], quote: UInt8(ascii: "\""))
        index += 1
    }
    return result
}
