@_spi(Engine) import FluxCore
import Dispatch

/// Whether `Executor.mainThread` may run work inline: on the process's main
/// thread (FluxCore's `isMainThread()`, even inside `someQueue.sync { }`,
/// where the main queue is not the current queue), or inside the main
/// queue's work, wherever it runs (after `dispatchMain()` the main thread is
/// gone and the main queue's work runs on a worker thread). The latter,
/// without Foundation: the main queue carries a queue-specific value, which
/// `getSpecific` finds inside its work.
enum MainThread {
    private static let key: DispatchSpecificKey<UInt8> = {
        let key = DispatchSpecificKey<UInt8>()
        DispatchQueue.main.setSpecific(key: key, value: 1)
        return key
    }()

    static var isCurrent: Bool {
        isMainThread() || DispatchQueue.getSpecific(key: key) != nil
    }
}
