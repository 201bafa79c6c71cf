import Foundation
import XCTest
import Flux

final class DisposableTests: XCTestCase {
    func testAnyDisposable() {
        var value = 0

        let disposable = AnyDisposable {
            value += 1
        }

        XCTAssertEqual(disposable.isDisposed, false)

        disposable.dispose()

        XCTAssertEqual(value, 1)
        XCTAssertEqual(disposable.isDisposed, true)

        disposable.dispose()

        XCTAssertEqual(value, 1)
        XCTAssertEqual(disposable.isDisposed, true)
    }

    func testNopDisposable() {
        let disposable = AnyDisposable()

        XCTAssertEqual(disposable.isDisposed, false)

        disposable.dispose()

        XCTAssertEqual(disposable.isDisposed, true)

    }

    // Beyond VueFlux's suite: the closure is let go of once it has run, so
    // what it captures does not live on with a kept disposable.
    func testAnyDisposableLetsGoOfItsClosureWhenDisposed() {
        final class Captured {}
        var captured: Captured? = Captured()
        weak let weakCaptured = captured
        let disposable = AnyDisposable { [captured] in _ = captured }
        captured = nil

        XCTAssertNotNil(weakCaptured)

        disposable.dispose()

        XCTAssertNil(weakCaptured)
    }
}
