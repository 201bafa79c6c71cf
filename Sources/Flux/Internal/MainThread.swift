import Dispatch

/// Whether the caller runs on the main thread, without Foundation: the main
/// queue carries a queue-specific value, which `getSpecific` finds on the
/// main thread (inside main-queue work or not) and nowhere else.
enum MainThread {
    private static let key: DispatchSpecificKey<UInt8> = {
        let key = DispatchSpecificKey<UInt8>()
        DispatchQueue.main.setSpecific(key: key, value: 1)
        return key
    }()

    static var isCurrent: Bool {
        DispatchQueue.getSpecific(key: key) != nil
    }
}
