import Synchronization
import Testing
@_spi(Engine) @testable import FluxCore

/// A store's token is its own from the first moment its callback can run:
/// a dispatch on another thread may start the instant the registration is
/// made, before the store's init has returned.
@Suite struct StoreTokenRaceTests {
    @Test func aStoresCallbackOnAnotherThreadSeesItsOwnToken() throws {
        let d = Dispatcher<Int>()
        let stop = Atomic<Bool>(false)
        let dispatcher = Thread {
            while !stop.load(ordering: .relaxed) { try? d.dispatch(0) }
        }
        // What each store's callback read as its own token, with the token
        // the engine ran it under (the observer's), while the creating
        // thread may not yet have returned from the store's init.
        let current = Atomic<UInt64>(0)
        let wrong = Log()
        d.setObserver(.init(callbackBegin: { current.store($0.rawValue, ordering: .relaxed) }))
        var stores: [FluxStore<Int>] = []
        // The creating thread need only be preempted in the gap once; each
        // store is a chance (most runs failed before the fix; under
        // ThreadSanitizer every run reported the race on the token).
        for _ in 0..<20_000 where wrong.all.isEmpty {
            stores.append(
                FluxStore(dispatcher: d) { store, _ in
                    let running = current.load(ordering: .relaxed)
                    if store.dispatchToken.rawValue != running {
                        wrong.append("\(store.dispatchToken.rawValue) for \(running)")
                    }
                })
            if stores.count > 8 { stores.removeFirst() }
        }
        stop.store(true, ordering: .relaxed)
        dispatcher.join()
        #expect(wrong.all.first == nil, "a callback read its store's token before it was set")
    }
}
