@_spi(Engine) import FluxCore

/// The per-object `DisposableScope` that VueFlux keeps as an Objective-C
/// associated object, here a table keyed by identity. An entry whose object
/// is gone is disposed when its address is reused, or when the table is
/// swept (each time it has doubled since the last sweep); a registration
/// also disposes its object's scope itself at the first value that finds the
/// object gone.
final class ScopeRegistry: @unchecked Sendable {
    static let shared = ScopeRegistry()

    private struct Entry {
        weak var object: AnyObject?
        let scope: DisposableScope
    }

    private static let minimumSweepCount = 64

    // Internal, not private: a test looks at whether a deinit runs under it.
    let lock = PosixLock()
    private var entries: [ObjectIdentifier: Entry] = [:]
    private var sweepCount = ScopeRegistry.minimumSweepCount

    private init() {
        // Held across fork(), so that the child finds it free and the table
        // whole (DispatchingThreads' fork hooks; the lock runs no user code).
        DispatchingThreads.shared.add(
            self, { false },
            fork: { [lock] phase in
                if phase == .prepare { lock.lock() } else { lock.unlock() }
            })
    }

    /// Makes the next registration sweep, whatever the table's size: a
    /// test of the sweep starts from there, not from the size earlier tests
    /// left (a table grown by them first swept only after as many again).
    func sweepAtNextRegistration() {
        lock.withLock { sweepCount = 0 }
    }

    func scope(for object: AnyObject) -> DisposableScope {
        var dead: [DisposableScope] = []
        // The objects a sweep found alive, let go of after the lock: another
        // thread may drop its last reference meanwhile, and the deinit would
        // otherwise run here, under the lock (a deinit that binds deadlocks).
        var swept: [AnyObject] = []
        let scope: DisposableScope = lock.withLock {
            let identifier = ObjectIdentifier(object)
            if let entry = entries[identifier] {
                // The same address may belong to a newer object: compare identity.
                if entry.object === object { return entry.scope }
                dead.append(entry.scope)
            }
            let scope = DisposableScope()
            entries[identifier] = Entry(object: object, scope: scope)
            if entries.count >= sweepCount {
                for (key, entry) in entries {
                    if let alive = entry.object {
                        swept.append(alive)
                    } else {
                        dead.append(entry.scope)
                        entries[key] = nil
                    }
                }
                sweepCount = max(Self.minimumSweepCount, entries.count * 2)
            }
            return scope
        }
        // Outside the lock: a disposal may observe another object's scope.
        for scope in dead {
            scope.dispose()
        }
        swept.removeAll()
        return scope
    }
}
