import FluxCore
import Synchronization

/// Disposes everything added to it, in order, when disposed or deinitialized.
/// What is added after that is disposed at once. What it holds that is
/// disposed meanwhile it lets go of, now and then, as it grows.
public final class DisposableScope: Disposable, @unchecked Sendable {
    public var isDisposed: Bool {
        disposed.load(ordering: .acquiring)
    }

    private let disposed = Atomic<Bool>(false)
    private let lock = PosixLock()
    private var disposables: ContiguousArray<any Disposable>?  // nil once disposed
    // What the first dispose() took, while it disposes it (see there).
    private var disposing: ContiguousArray<any Disposable>?
    // The threads in a later call's sweep of `disposing` (see dispose()).
    private var sweeping: [UInt] = []
    // When `disposables` reaches it, `add` lets go of those disposed since
    // (see there); then twice what is left, so that each add costs O(1).
    private var pruneAt = 32

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
        // earlier than this scope's end), and is disposed again, as VueFlux
        // does (a no-op for a Disposable that keeps the protocol's word).
        if disposable.isDisposed { return disposable.dispose() }
        // An object's scope (`observe(duringScopeOf:)`, `bind`) lives as long
        // as the object: registrations disposed one by one while it lives
        // would pile up in it, each keeping its sink's core, were the scope
        // not to let go of those disposed now and then. Only this module's
        // disposables are asked, under the lock (their `isDisposed` is an
        // atomic load; anyone else's could come back here).
        var dropped: [any Disposable] = []
        let added: Bool = lock.withLock {
            guard disposables != nil else { return false }
            disposables!.append(disposable)
            if disposables!.count >= pruneAt {
                var kept = ContiguousArray<any Disposable>()
                kept.reserveCapacity(disposables!.count)
                for element in disposables! {
                    if element is any AtomicallyDisposed && element.isDisposed {
                        dropped.append(element)
                    } else {
                        kept.append(element)
                    }
                }
                disposables = kept
                pruneAt = Swift.max(32, kept.count * 2)
            }
            return true
        }
        if !added {
            disposable.dispose()
        }
        // Released outside the lock: a deinit may come back here.
        dropped.removeAll()
    }

    /// Disposes what was added, in order, once; any thread, also from
    /// inside one of the disposals. When it returns, this module's
    /// disposables it holds are disposed, even if another call (on another
    /// thread, or further up this one) is still disposing them; except a
    /// call made, on the same thread, by such a later call's own disposals
    /// (a scope held by itself, directly or through scopes it holds), which
    /// returns at once, as VueFlux's second call does: the later call goes on.
    public func dispose() {
        // Taken out under the lock, disposed outside it: a disposal may add
        // to or dispose this scope again.
        var me: UInt = 0
        let (taken, first): (ContiguousArray<any Disposable>?, Bool) = lock.withLock {
            guard let taken = disposables else {
                // Back on a thread already sweeping it: the scope is inside
                // itself (directly, or through scopes it holds), and that
                // sweep, further up, goes on; sweeping again would recurse
                // until the stack overflowed.
                me = currentThreadID()
                guard let disposing, !sweeping.contains(me) else { return (nil, false) }
                sweeping.append(me)
                return (disposing, false)
            }
            disposables = nil
            disposing = taken
            disposed.store(true, ordering: .releasing)
            return (taken, true)
        }
        guard let taken else { return }
        guard first else {
            // Another call is disposing it and may not have reached them
            // all: this module's disposables (every dispose() of which
            // cancels, on any thread) are disposed here too, so that an
            // observer of the scope is never called once this returns
            // (Signal.observe's promise). Anyone else's are left to that
            // call: they need not bear a second thread's dispose().
            for disposable in taken where disposable is any AtomicallyDisposed {
                disposable.dispose()
            }
            _ = lock.withLock { sweeping.remove(at: sweeping.firstIndex(of: me)!) }
            return
        }
        for disposable in taken {
            disposable.dispose()
        }
        lock.withLock { disposing = nil }
    }

    /// `add(disposable:)`.
    public static func += (disposableScope: DisposableScope, disposable: any Disposable) {
        disposableScope.add(disposable: disposable)
    }
}

/// This module's disposables, whose `isDisposed` runs no one else's code, so
/// a scope may ask it with its lock held.
protocol AtomicallyDisposed: Disposable {}

extension AnyDisposable: AtomicallyDisposed {}
extension DisposableScope: AtomicallyDisposed {}
