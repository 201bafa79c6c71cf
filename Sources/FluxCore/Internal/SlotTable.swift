import Synchronization

/// The registrations of a dispatcher, in registration order, as three parallel
/// arrays in one heap block: tokens, per-dispatch marks, callbacks.
///
/// Parallel arrays because the fields have different owners during a dispatch:
/// tokens and callbacks are immutable and may be read by any thread holding the
/// engine's lock; marks are written by the dispatching thread, and by an
/// unregistering thread that stamps `removedMark` so the dispatch skips the
/// callback. Marks are therefore relaxed atomics (plain moves on x86-64 and
/// arm64). Tokens are strictly increasing, which makes lookup cheap (see
/// `index(of:)`).
/// A table never grows in place: growing means allocating a bigger table and
/// moving into it, which the engine only does when no dispatch is reading.
@usableFromInline
internal struct SlotTable<Callback> {
    @usableFromInline let tokens: UnsafeMutablePointer<UInt64>
    @usableFromInline let marks: UnsafeMutablePointer<Atomic<UInt64>>
    /// waitedBy[i]: the index of the callback whose wait runs callback i (-1:
    /// the dispatch loop's), written by the dispatching thread as it starts
    /// i, meaningful while i is pending; names a cycle's every link. Never
    /// moved with the registrations: it is per dispatch.
    @usableFromInline let waitedBy: UnsafeMutablePointer<Int32>
    @usableFromInline let callbacks: UnsafeMutablePointer<Callback>
    @usableFromInline var count: Int
    @usableFromInline let capacity: Int
    private let block: UnsafeMutableRawPointer

    /// A mark meaning "unregistered during this dispatch: skip".
    @usableFromInline static var removedMark: UInt64 { .max }

    /// An empty table with room for `capacity` (at least 1) registrations, or
    /// nil when memory runs out.
    static func allocate(capacity: Int) -> SlotTable? {
        let capacity = max(capacity, 1)
        let stride = MemoryLayout<Callback>.stride
        let align = max(MemoryLayout<Callback>.alignment, MemoryLayout<UInt64>.alignment)
        let (header, o1) = capacity.multipliedReportingOverflow(
            by: 2 * MemoryLayout<UInt64>.stride + MemoryLayout<Int32>.stride)
        let (body, o2) = capacity.multipliedReportingOverflow(by: max(stride, 1))
        let offset = roundUp(header, align)
        let (total, o3) = offset.addingReportingOverflow(body)
        guard !o1, !o2, !o3, align <= 16, let block = allocateBytes(total) else { return nil }
        return SlotTable(block: block, capacity: capacity, callbacksOffset: offset)
    }

    private init(block: UnsafeMutableRawPointer, capacity: Int, callbacksOffset: Int) {
        self.block = block
        self.capacity = capacity
        self.count = 0
        tokens = block.bindMemory(to: UInt64.self, capacity: capacity)
        marks = (block + capacity * MemoryLayout<UInt64>.stride).bindMemory(to: Atomic<UInt64>.self, capacity: capacity)
        waitedBy = (block + 2 * capacity * MemoryLayout<UInt64>.stride).bindMemory(to: Int32.self, capacity: capacity)
        callbacks = (block + callbacksOffset).bindMemory(to: Callback.self, capacity: capacity)
    }

    /// Frees the block. The table must be empty (its callbacks moved out).
    func deallocate() {
        assert(count == 0, "SlotTable deallocated with live callbacks")
        freeBytes(block)
    }

    var isFull: Bool { count == capacity }

    /// The mark of the registration at `index`.
    @inlinable @inline(__always)
    func mark(_ index: Int) -> UInt64 { marks[index].load(ordering: .relaxed) }

    @inlinable @inline(__always)
    func setMark(_ index: Int, _ mark: UInt64) { marks[index].store(mark, ordering: .relaxed) }

    /// Appends a registration; the table must not be full.
    mutating func append(_ token: UInt64, _ callback: consuming Callback) {
        tokens[count] = token
        (marks + count).initialize(to: Atomic(0))
        (callbacks + count).initialize(to: callback)
        count += 1
    }

    /// Moves every registration to the end of `other`, which must have room.
    mutating func moveAll(appendingTo other: inout SlotTable) {
        (other.tokens + other.count).update(from: tokens, count: count)
        for i in 0..<count { (other.marks + other.count + i).initialize(to: Atomic(mark(i))) }
        (other.callbacks + other.count).moveInitialize(from: callbacks, count: count)
        other.count += count
        count = 0
    }

    /// Removes the registration at `index`, keeping order, and returns its callback.
    mutating func remove(at index: Int) -> Callback {
        let callback = (callbacks + index).move()
        let tail = count - index - 1
        (tokens + index).update(from: tokens + index + 1, count: tail)
        for i in index..<index + tail { setMark(i, mark(i + 1)) }
        (callbacks + index).moveInitialize(from: callbacks + index + 1, count: tail)
        count -= 1
        return callback
    }

    /// Removes every registration whose mark is `removedMark`, keeping order,
    /// and hands its callback to `body`.
    mutating func removeMarked(_ body: (consuming Callback) -> Void) {
        var kept = 0
        for i in 0..<count {
            if mark(i) == Self.removedMark {
                body((callbacks + i).move())
            } else {
                if kept != i {
                    tokens[kept] = tokens[i]
                    setMark(kept, mark(i))
                    (callbacks + kept).moveInitialize(from: callbacks + i, count: 1)
                }
                kept += 1
            }
        }
        count = kept
    }

    /// Moves every callback out, in order, emptying the table.
    mutating func removeAll(_ body: (consuming Callback) -> Void) {
        for i in 0..<count { body((callbacks + i).move()) }
        count = 0
    }

    /// The index of `token`, or nil.
    ///
    /// Tokens strictly increase, so a token can sit no later than
    /// `token - tokens[0]`: that guess is exact until something is unregistered,
    /// and bounds a binary search afterwards.
    @inlinable @inline(__always)
    func index(of token: UInt64) -> Int? {
        guard count > 0, token >= tokens[0] else { return nil }
        let distance = token - tokens[0]
        var high = distance < UInt64(count) ? Int(distance) : count - 1
        if tokens[high] == token { return high }
        if tokens[high] < token { return nil }
        var low = 0
        while low < high {
            // Wrapping arithmetic: 0 <= low < high < count, so nothing can
            // overflow, and no overflow trap is compiled in.
            let mid = low &+ (high &- low) >> 1
            if tokens[mid] < token { low = mid &+ 1 } else { high = mid }
        }
        return tokens[low] == token ? low : nil
    }
}
