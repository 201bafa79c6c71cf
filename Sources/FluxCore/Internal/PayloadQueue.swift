/// A FIFO ring buffer in malloc'd memory: growing reports failure instead of
/// trapping, so `enqueue` can return `noMemory`. Used under the engine's lock.
@usableFromInline
internal struct PayloadQueue<Element> {
    private var buffer: UnsafeMutablePointer<Element>?
    private var capacity = 0
    private var head = 0
    private(set) var count = 0

    init() {}

    var isEmpty: Bool { count == 0 }

    /// Makes room for one more element; false when memory runs out.
    mutating func reserveOne() -> Bool {
        if count < capacity { return true }
        let newCapacity = grownCapacity(capacity)
        guard let bigger = allocateElements(newCapacity, of: Element.self) else { return false }
        if let buffer {
            // Unwrap the ring into the new buffer, oldest first.
            let first = min(count, capacity - head)
            (bigger).moveInitialize(from: buffer + head, count: first)
            (bigger + first).moveInitialize(from: buffer, count: count - first)
            freeBytes(UnsafeMutableRawPointer(buffer))
        }
        buffer = bigger
        capacity = newCapacity
        head = 0
        return true
    }

    /// Appends; `reserveOne()` must have returned true.
    mutating func append(_ element: consuming Element) {
        guard let buffer else { return }
        (buffer + (head + count) % capacity).initialize(to: element)
        count += 1
    }

    mutating func popFirst() -> Element? {
        guard count > 0, let buffer else { return nil }
        let element = (buffer + head).move()
        head = (head + 1) % capacity
        count -= 1
        return element
    }

    /// Frees the buffer; the queue must be empty.
    mutating func deallocate() {
        while popFirst() != nil {}
        freeBytes(UnsafeMutableRawPointer(buffer))
        buffer = nil
        capacity = 0
        head = 0
    }
}
