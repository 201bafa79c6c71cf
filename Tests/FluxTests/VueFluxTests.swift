import Foundation
import XCTest
import Flux

final class VueFluxTests: XCTestCase {
    func testMutations() {
        let state = TestState()
        let mutations = TestMutations()

        XCTAssertEqual(state.value, 0)

        mutations.commit(action: (), state: state)

        XCTAssertEqual(state.value, 1)
    }

    func testDispatch() {
        let store = Store<TestState>(state: .init(), mutations: .init(), executor: .immediate)

        XCTAssertEqual(store.computed.value, 0)

        store.actions.check()

        XCTAssertEqual(store.computed.value, 1)
    }

    func testDispatchOnTargetThread() {
        let state1 = TestState { _ in
            XCTAssertTrue(Thread.isMainThread)
        }
        let store1 = Store<TestState>(state: state1, mutations: .init(), executor: .mainThread)

        store1.actions.check()

        XCTAssertEqual(store1.computed.value, 1)

        let expectation = self.expectation(description: "testDispatchOnTargetThread")

        let state2 = TestState { _ in
            XCTAssertFalse(Thread.isMainThread)
            expectation.fulfill()
        }
        let store2 = Store<TestState>(state: state2, mutations: .init(), executor: .queue(.globalDefault()))

        store2.actions.check()

        waitForExpectations(timeout: 1) { _ in
            XCTAssertEqual(store2.computed.value, 1)
        }
    }

    func testGlobalDispatch() {
        let store1 = Store<TestState>(state: .init(), mutations: .init(), executor: .immediate)
        let store2 = Store<TestState>(state: .init(), mutations: .init(), executor: .immediate)

        store1.actions.check()

        XCTAssertEqual(store1.computed.value, 1)
        XCTAssertEqual(store2.computed.value, 0)

        Store<TestState>.actions.check()

        XCTAssertEqual(store1.computed.value, 2)
        XCTAssertEqual(store2.computed.value, 1)
    }

    func testStoreDeinit() {
        var store: Store<TestState>? = .init(state: .init(), mutations: .init(), executor: .immediate)
        let computed = store!.computed
        let actions = store!.actions

        actions.check()

        XCTAssertEqual(computed.value, 1)

        Store<TestState>.actions.check()

        XCTAssertEqual(computed.value, 2)

        store = nil

        actions.check()

        XCTAssertEqual(computed.value, 2)

        Store<TestState>.actions.check()

        XCTAssertEqual(computed.value, 2)
    }

    func testImmediatelyCancelCommiting() {
        let queue = DispatchQueue(label: "testImmediatelyCancelCommiting")
        var store: Store<TestState>? = .init(state: .init(), mutations: .init(), executor: .queue(queue))
        let computed = store!.computed
        let actions = store!.actions

        queue.suspend()

        actions.check()
        Store<TestState>.actions.check()

        store = nil

        queue.resume()

        let expectation = self.expectation(description: "testImmediatelyCancelCommiting")

        queue.async {
            expectation.fulfill()
        }

        waitForExpectations(timeout: 1) { _ in
            XCTAssertEqual(computed.value, 0)
        }
    }
}
