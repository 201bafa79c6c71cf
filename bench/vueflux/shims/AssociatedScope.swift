// Linux has no Objective-C associated objects, which VueFluxReactive uses to
// give each object one DisposableScope (observe(duringScopeOf:), Binder). A
// table by object identity stands in; the bench uses neither, so the table
// is never swept.
import Foundation

private let scopesLock = NSLock()
private var scopes: [ObjectIdentifier: DisposableScope] = [:]

extension DisposableScope {
    static func associated(with object: AnyObject) -> DisposableScope {
        scopesLock.lock()
        defer { scopesLock.unlock() }
        if let scope = scopes[ObjectIdentifier(object)] {
            return scope
        }
        let scope = DisposableScope()
        scopes[ObjectIdentifier(object)] = scope
        return scope
    }
}
