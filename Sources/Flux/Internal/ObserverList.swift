// Observers in subscription order, each with a key for removal. Removal is
// by linear search (lists are short, and sends, which only read, must stay
// cheap: a send copies `elements`, a reference-count increment).
@usableFromInline
struct ObserverList<Element> {
    @usableFromInline
    struct Key: Hashable {
        @usableFromInline let rawValue: UInt64

        @inlinable
        init(rawValue: UInt64) {
            self.rawValue = rawValue
        }
    }

    @usableFromInline private(set) var elements = ContiguousArray<Element>()
    @usableFromInline var keys = ContiguousArray<UInt64>()
    @usableFromInline var nextKey: UInt64 = 0

    @inlinable
    init() {}

    @inlinable
    mutating func add(_ element: Element) -> Key {
        let key = nextKey
        nextKey &+= 1
        elements.append(element)
        keys.append(key)
        return Key(rawValue: key)
    }

    @inlinable @discardableResult
    mutating func remove(for key: Key) -> Element? {
        guard let index = keys.firstIndex(of: key.rawValue) else { return nil }
        keys.remove(at: index)
        return elements.remove(at: index)
    }
}
