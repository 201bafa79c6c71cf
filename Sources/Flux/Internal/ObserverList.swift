// Observers in subscription order, each with a key for removal. Removal is
// by linear search (lists are short, and sends, which only read, must stay
// cheap: a send copies `elements`, a reference-count increment).
@usableFromInline
struct ObserverList<Element> {
    @usableFromInline
    struct Key: Hashable {
        fileprivate let rawValue: UInt64
    }

    @usableFromInline private(set) var elements = ContiguousArray<Element>()
    private var keys = ContiguousArray<UInt64>()
    private var nextKey: UInt64 = 0

    init() {}

    mutating func add(_ element: Element) -> Key {
        let key = nextKey
        nextKey &+= 1
        elements.append(element)
        keys.append(key)
        return Key(rawValue: key)
    }

    @discardableResult
    mutating func remove(for key: Key) -> Element? {
        guard let index = keys.firstIndex(of: key.rawValue) else { return nil }
        keys.remove(at: index)
        return elements.remove(at: index)
    }
}
