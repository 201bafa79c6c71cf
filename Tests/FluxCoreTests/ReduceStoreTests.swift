import Testing
@_spi(Engine) @testable import FluxCore

/// Facebook's FluxReduceStore-test.js over the Swift `ReduceStore`.
@Suite struct ReduceStoreTests {
    enum Action: Sendable { case foo(Int), bar(Int), foobar(Int, Int), boom, fail }

    /// FooStore: an immutable map; `==` decides what changed.
    static func fooStore(_ d: Dispatcher<Action>) -> ReduceStore<[String: Int], Action> {
        ReduceStore(dispatcher: d, initialState: [:]) { state, action in
            var state = state
            switch action {
            case .foo(let foo): state["foo"] = foo
            case .bar(let bar): state["bar"] = bar
            case .foobar(let foo, let bar): state["foo"] = foo; state["bar"] = bar
            case .boom: state = [:]
            case .fail: throw Boom(id: 9)
            }
            return state
        }
    }

    /// The store and a count of its change events.
    static func setUp() -> (Dispatcher<Action>, ReduceStore<[String: Int], Action>, Box<Int>) {
        let d = Dispatcher<Action>()
        let store = fooStore(d)
        let onChange = Box(0)
        store.addListener { onChange.value += 1 }
        return (d, store, onChange)
    }

    @Test("should respond to actions") func respondsToActions() throws {
        let (d, store, _) = Self.setUp()
        #expect(store.state["foo"] == nil)
        try d.dispatch(.foo(100))
        #expect(store.state["foo"] == 100)
    }

    @Test("should only emit one change for multiple cache changes") func oneEmitForManyChanges() throws {
        let (d, store, onChange) = Self.setUp()
        try d.dispatch(.foo(100))
        #expect(onChange.value == 1)
        #expect(store.state["foo"] == 100)
        try d.dispatch(.foobar(200, 400))
        #expect(onChange.value == 2)
        #expect(store.state == ["foo": 200, "bar": 400])
    }

    @Test("should not emit for empty changes") func noEmitForEmptyChanges() throws {
        let (d, store, onChange) = Self.setUp()
        try d.dispatch(.foo(100))
        #expect(onChange.value == 1)
        try d.dispatch(.foo(100))
        #expect(onChange.value == 1)
        #expect(store.state["foo"] == 100)
    }

    @Test("should clear the cache") func clearsTheCache() throws {
        let (d, store, onChange) = Self.setUp()
        try d.dispatch(.foo(100))
        #expect(onChange.value == 1)
        try d.dispatch(.boom)
        #expect(onChange.value == 2)
        #expect(store.state["foo"] == nil)
    }

    // MARK: - DESIGN.md section 6

    @Test func aThrowingReduceFailsTheDispatchAndKeepsTheState() throws {
        let (d, store, onChange) = Self.setUp()
        try d.dispatch(.foo(1))
        #expect(throws: Boom(id: 9)) { try d.dispatch(.fail) }
        #expect(store.state == ["foo": 1])
        #expect(onChange.value == 1)
        try d.dispatch(.foo(2))
        #expect(store.state == ["foo": 2])
    }

    @Test func reduceFailingMidChainKeepsEveryStateAndRunsNoListener() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let low = Box<ReduceStore<Int, Int>?>(nil)
        // top runs first, waits for low (which fails), ignores the failure
        // and returns a new state: the dispatch is aborted, so it is dropped.
        let top = ReduceStore<Int, Int>(dispatcher: d, initialState: 100) { [unowned d] n, _ in
            do {
                try d.waitFor([low.value!.dispatchToken])
            } catch {
                log.append("top saw \(error)")
            }
            return n + 1
        }
        low.value = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in
            if p < 0 { throw Boom(id: 3) }
            return n + p
        }
        low.value!.addListener { log.append("low") }
        top.addListener { log.append("top") }
        #expect(throws: Boom(id: 3)) { try d.dispatch(-1) }
        #expect(low.value!.state == 0)
        #expect(top.state == 100)
        #expect(log.all == ["top saw Boom(id: 3)"])
        try d.dispatch(1)
        #expect(low.value!.state == 1 && top.state == 101)
        #expect(log.all == ["top saw Boom(id: 3)", "low", "top"])
    }

    /// The abort met after the reduce, by a wait in areEqual: the store
    /// keeps its old state and runs no listener, as for one met by reduce.
    @Test func aFailureMetByAreEqualKeepsTheStateAndRunsNoListener() throws {
        let d = Dispatcher<Int>()
        let log = Log()
        let low = Box<ReduceStore<Int, Int>?>(nil)
        let top = ReduceStore<Int, Int>(
            dispatcher: d, initialState: 100,
            areEqual: { [unowned d] a, b in
                do {
                    try d.waitFor([low.value!.dispatchToken])
                } catch {
                    log.append("equal saw \(error)")
                }
                return a == b
            }
        ) { n, _ in n + 1 }
        low.value = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { n, p in
            if p < 0 { throw Boom(id: 3) }
            return n + p
        }
        top.addListener { log.append("top") }
        #expect(throws: Boom(id: 3)) { try d.dispatch(-1) }
        #expect(top.state == 100)
        #expect(log.all == ["equal saw Boom(id: 3)"])
        try d.dispatch(1)
        #expect(top.state == 101)
        #expect(log.all == ["equal saw Boom(id: 3)", "top"])
    }

    @Test func anotherStoreWaitsForAStoreAndReadsItsNewState() throws {
        let d = Dispatcher<Int>()
        let seen = Box<[Int]>([])
        let late = Box<ReduceStore<Int, Int>?>(nil)
        let early = ReduceStore<Int, Int>(dispatcher: d, initialState: 0) { [unowned d] n, _ in
            guard let late = late.value else { return n }
            try d.waitFor([late.dispatchToken])
            seen.value.append(late.state)
            #expect(try late.hasChanged())
            return n
        }
        late.value = ReduceStore(dispatcher: d, initialState: 10) { n, p in n + p }
        try d.dispatch(5)
        #expect(seen.value == [15])
        _ = early
    }

    @Test func customEqualityDecidesWhatChanged() throws {
        let d = Dispatcher<Int>()
        let store = ReduceStore<Int, Int>(dispatcher: d, initialState: 0, areEqual: { $0 / 10 == $1 / 10 }) { _, p in p
        }
        let onChange = Box(0)
        store.addListener { onChange.value += 1 }
        try d.dispatch(5)
        #expect(store.state == 0 && onChange.value == 0)
        try d.dispatch(15)
        #expect(store.state == 15 && onChange.value == 1)
    }
}
