import Synchronization

/// Disposes everything added to it, in order, when disposed or deinitialized.
/// What is added after that is disposed at once.
public final class DisposableScope: Disposable, @unchecked Sendable {
    public var isDisposed: Bool {
        disposed.load(ordering: .acquiring)
    }

    private let disposed = Atomic<Bool>(false)
    private let lock = PosixLock()
    private var disposables: ContiguousArray<any Disposable>?  // nil once disposed

    deinit {
        dispose()
    }

    /// A scope holding `disposebles`, disposed with it.
    public init<Sequence: Swift.Sequence>(_ disposebles: Sequence) where Sequence.Element == any Disposable {
        disposables = ContiguousArray(disposebles)
    }

    /// An empty scope.
    public convenience init() {
        self.init([])
    }

    /// Keeps `disposable` until the scope is disposed; disposes it at once
    /// when the scope already is. Any thread.
    public func add(disposable: any Disposable) {
        // A disposed disposable is not kept (nothing would ever release it
        // earlier than this scope's end).
        if disposable.isDisposed { return }
        let added: Bool = lock.withLock {
            guard disposables != nil else { return false }
            disposables?.append(disposable)
            return true
        }
        if !added {
            disposable.dispose()
        }
    }

    /// Disposes what was added, in order, once; any thread, also from
    /// inside one of the disposals.
    public func dispose() {
        // Taken out under the lock, disposed outside it: a disposal may add
        // to or dispose this scope again.
        let taken: ContiguousArray<any Disposable>? = lock.withLock {
            let taken = disposables
            disposables = nil
            if taken != nil {
                disposed.store(true, ordering: .releasing)
            }
            return taken
        }
        guard let taken else { return }
        for disposable in taken {
            disposable.dispose()
        }
    }

    /// `add(disposable:)`.
    public static func += (disposableScope: DisposableScope, disposable: any Disposable) {
        disposableScope.add(disposable: disposable)
    }
}
