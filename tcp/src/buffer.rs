//! Byte ring buffers for send and receive data.
//!
//! Storage is reserved on first write and initialised only as far as it has
//! been written, so idle or one-directional connections do not pay for both
//! buffers, and a new connection does not zero its whole buffer up front.
//!
//! A ring can grow ([`RingBuffer::grow`]) for buffer auto-tuning: queued
//! bytes and bytes written past them (out-of-order data) keep their offsets
//! from the read position. It never shrinks.

/// A byte ring. "Allocated" bytes are the `len()` queued bytes starting at
/// the read position; the space after them is "unallocated" and can be
/// written at an offset before being committed (used for out-of-order
/// reassembly).
///
/// The ring holds [`RingBuffer::capacity`] bytes plus an optional headroom:
/// [`RingBuffer::window`] and [`RingBuffer::enqueue_slice`] see only the
/// capacity, while out-of-order writes and commits may also use the
/// headroom. A receiver that advertises its window from the capacity can so
/// still accept everything up to a right edge that window-scale rounding
/// (RFC 7323 §2.4) put a little past it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RingBuffer {
    storage: Vec<u8>,
    /// Ring size: capacity plus headroom.
    size: usize,
    headroom: usize,
    read_at: usize,
    len: usize,
}

impl RingBuffer {
    /// An empty ring of `capacity` bytes (not allocated yet).
    pub(crate) fn new(capacity: usize) -> Self {
        RingBuffer {
            storage: Vec::new(),
            size: capacity,
            headroom: 0,
            read_at: 0,
            len: 0,
        }
    }

    fn ensure_storage(&mut self) {
        if self.storage.capacity() < self.size {
            self.storage.reserve_exact(self.size - self.storage.len());
        }
    }

    /// Makes ring positions `[0, end)` initialised (`end <= size`).
    fn touch(&mut self, end: usize) {
        if self.storage.len() < end {
            self.storage.resize(end, 0);
        }
    }

    /// Capacity in bytes, headroom excluded.
    pub(crate) fn capacity(&self) -> usize {
        self.size - self.headroom
    }

    /// Bytes beyond the capacity usable by unallocated writes (see the type
    /// documentation).
    pub(crate) fn headroom(&self) -> usize {
        self.headroom
    }

    /// Queued (allocated) bytes; more than the capacity if committed
    /// unallocated writes reached into the headroom.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes are queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free space after the queued bytes, up to the capacity.
    pub(crate) fn window(&self) -> usize {
        self.capacity().saturating_sub(self.len)
    }

    /// Free space after the queued bytes, headroom included.
    fn free_with_headroom(&self) -> usize {
        self.size - self.len
    }

    /// Copies `data` into `[at, at + data.len())` (ring positions), which
    /// must lie within the ring.
    fn copy_in(&mut self, at: usize, data: &[u8]) {
        self.touch((at + data.len()).min(self.size));
        let first = data.len().min(self.size - at);
        self.storage[at..at + first].copy_from_slice(&data[..first]);
        self.storage[..data.len() - first].copy_from_slice(&data[first..]);
    }

    /// Copies ring positions starting at `at`; never-written positions
    /// read as zero.
    fn copy_out(&self, at: usize, out: &mut [u8]) {
        let first = out.len().min(self.size - at);
        let (head, tail) = out.split_at_mut(first);
        for (dst, start) in [(head, at), (tail, 0)] {
            let avail = self.storage.len().saturating_sub(start).min(dst.len());
            dst[..avail].copy_from_slice(&self.storage[start..start + avail]);
            dst[avail..].fill(0);
        }
    }

    fn pos(&self, offset: usize) -> usize {
        let p = self.read_at + offset;
        if p >= self.size {
            p - self.size
        } else {
            p
        }
    }

    /// Appends as much of `data` as fits; returns the number of bytes taken.
    pub(crate) fn enqueue_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.window());
        if n == 0 {
            return 0;
        }
        self.ensure_storage();
        let at = self.pos(self.len);
        self.copy_in(at, &data[..n]);
        self.len += n;
        n
    }

    /// Removes up to `out.len()` bytes from the front into `out`.
    pub(crate) fn dequeue_slice(&mut self, out: &mut [u8]) -> usize {
        let n = self.read_allocated(0, out);
        self.dequeue_allocated(n);
        n
    }

    /// Copies queued bytes starting `offset` bytes from the front into
    /// `out`, without removing them. Returns the number copied.
    pub(crate) fn read_allocated(&self, offset: usize, out: &mut [u8]) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = out.len().min(self.len - offset);
        let at = self.pos(offset);
        self.copy_out(at, &mut out[..n]);
        n
    }

    /// Drops `n` bytes (at most `len()`) from the front.
    pub(crate) fn dequeue_allocated(&mut self, n: usize) -> usize {
        let n = n.min(self.len);
        self.read_at = self.pos(n);
        // The read position is not reset when the ring empties: data
        // written past the end (out-of-order segments) must stay put.
        self.len -= n;
        n
    }

    /// The longest contiguous run of queued bytes at the front (zero-copy
    /// read; follow with [`RingBuffer::dequeue_allocated`]).
    pub(crate) fn peek(&self) -> &[u8] {
        let n = self.len.min(self.size - self.read_at);
        if n == 0 {
            return &[];
        }
        // Queued bytes were written, so they are initialised.
        &self.storage[self.read_at..self.read_at + n]
    }

    /// Writes `data` into the free space starting `offset` bytes after the
    /// queued bytes, without committing it. Bytes beyond the capacity and
    /// headroom are dropped; returns the number written.
    pub(crate) fn write_unallocated(&mut self, offset: usize, data: &[u8]) -> usize {
        let free = self.free_with_headroom();
        if offset >= free {
            return 0;
        }
        let n = data.len().min(free - offset);
        if n == 0 {
            return 0;
        }
        self.ensure_storage();
        let at = self.pos(self.len + offset);
        self.copy_in(at, &data[..n]);
        n
    }

    /// Reads uncommitted bytes `offset` bytes after the queued ones.
    pub(crate) fn read_unallocated(&self, offset: usize, out: &mut [u8]) -> usize {
        let free = self.free_with_headroom();
        if offset >= free {
            return 0;
        }
        let n = out.len().min(free - offset);
        let at = self.pos(self.len + offset);
        self.copy_out(at, &mut out[..n]);
        n
    }

    /// Commits `n` bytes previously written with
    /// [`RingBuffer::write_unallocated`] at offset 0.
    pub(crate) fn enqueue_unallocated(&mut self, n: usize) {
        debug_assert!(n <= self.free_with_headroom());
        self.len += n.min(self.free_with_headroom());
    }

    /// Raises the capacity to `new_capacity`, keeping the headroom (no-op
    /// if it is not larger). See [`RingBuffer::resize`].
    pub(crate) fn grow(&mut self, new_capacity: usize) {
        self.resize(new_capacity, self.headroom);
    }

    /// Raises the capacity and the headroom to at least `capacity` and
    /// `headroom` (neither ever shrinks). Every position keeps its offset
    /// from the read position, so queued bytes and uncommitted bytes written
    /// with [`RingBuffer::write_unallocated`] (the reassembler's out-of-order
    /// data) stay readable at the same offsets; the new space follows the
    /// old ring's worth of offsets. Storage that was never reserved stays
    /// unreserved; otherwise the old ring's bytes are copied once into a
    /// reservation of the new size (pages past what is written are not
    /// touched), so growing geometrically costs amortised O(1) per byte.
    pub(crate) fn resize(&mut self, capacity: usize, headroom: usize) {
        let capacity = capacity.max(self.capacity());
        let headroom = headroom.max(self.headroom);
        let new_size = capacity + headroom;
        let old = self.size;
        self.headroom = headroom;
        if new_size == old {
            return;
        }
        self.size = new_size;
        if self.storage.capacity() == 0 {
            // Nothing written yet: only the bound moves.
            self.read_at = 0;
            return;
        }
        // Linearise: offset i from the read position moves to position i.
        // Only offsets that map to initialised positions need copying; the
        // rest read as zero and stay uninitialised.
        let init = self.storage.len();
        let mut storage = Vec::with_capacity(new_size);
        if self.read_at < init {
            storage.extend_from_slice(&self.storage[self.read_at..init]);
        }
        // Positions [init, old) were never written; [0, read_at) follow them.
        let head = self.read_at.min(init);
        if head > 0 {
            storage.resize(old - self.read_at, 0);
            storage.extend_from_slice(&self.storage[..head]);
        }
        self.storage = storage;
        self.read_at = 0;
    }

    /// Copies all queued bytes into a new vector.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.read_allocated(0, &mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let mut r = RingBuffer::new(8);
        assert_eq!(r.window(), 8);
        assert_eq!(r.enqueue_slice(b"abcdef"), 6);
        let mut out = [0u8; 4];
        assert_eq!(r.dequeue_slice(&mut out), 4);
        assert_eq!(&out, b"abcd");
        assert_eq!(r.enqueue_slice(b"ghijklmn"), 6); // only 6 free
        assert_eq!(r.len(), 8);
        assert_eq!(r.peek(), b"efgh");
        let mut all = [0u8; 8];
        assert_eq!(r.read_allocated(1, &mut all), 7);
        assert_eq!(&all[..7], b"fghijkl");
        assert_eq!(r.to_vec(), b"efghijkl");
        r.dequeue_allocated(8);
        assert!(r.is_empty());
        assert_eq!(r.peek(), b"");
    }

    #[test]
    fn unallocated_writes() {
        let mut r = RingBuffer::new(8);
        r.enqueue_slice(b"xyz");
        r.dequeue_allocated(2);
        assert_eq!(r.write_unallocated(2, b"CDEFGHIJ"), 5); // free = 7
        assert_eq!(r.write_unallocated(0, b"AB"), 2);
        let mut out = [0u8; 7];
        assert_eq!(r.read_unallocated(0, &mut out), 7);
        assert_eq!(&out, b"ABCDEFG");
        r.enqueue_unallocated(4);
        assert_eq!(r.to_vec(), b"zABCD");
        assert_eq!(r.write_unallocated(2, b"QQ"), 1);
        assert_eq!(r.write_unallocated(3, b"Q"), 0);
    }

    #[test]
    fn unallocated_data_survives_draining() {
        // Out-of-order data written past the end must not move when the
        // application drains the in-order bytes.
        let mut r = RingBuffer::new(8);
        r.enqueue_slice(b"abc");
        assert_eq!(r.write_unallocated(2, b"XY"), 2);
        r.dequeue_allocated(3);
        assert_eq!(r.write_unallocated(0, b"VW"), 2);
        r.enqueue_unallocated(4);
        assert_eq!(r.to_vec(), b"VWXY");
    }

    #[test]
    fn grow_keeps_queued_and_out_of_order_bytes() {
        let mut r = RingBuffer::new(8);
        r.enqueue_slice(b"abcdef");
        r.dequeue_allocated(5);
        r.enqueue_slice(b"ghij"); // wraps: "fghij" queued from position 5
        assert_eq!(r.write_unallocated(1, b"XY"), 2);
        r.grow(20);
        assert_eq!(r.capacity(), 20);
        assert_eq!(r.window(), 15);
        assert_eq!(r.to_vec(), b"fghij");
        let mut out = [0u8; 3];
        assert_eq!(r.read_unallocated(0, &mut out), 3);
        assert_eq!(&out[1..], b"XY"); // out[0]: a stale byte, never committed
                                      // The new space is usable past the old capacity.
        assert_eq!(r.write_unallocated(3, b"0123456789AB"), 12);
        assert_eq!(r.write_unallocated(0, b"W"), 1);
        r.enqueue_unallocated(15);
        assert_eq!(r.to_vec(), b"fghijWXY0123456789AB");
        r.grow(10); // never shrinks
        assert_eq!(r.capacity(), 20);
    }

    #[test]
    fn headroom_takes_unallocated_writes_only() {
        let mut r = RingBuffer::new(8);
        r.resize(8, 4);
        assert_eq!((r.capacity(), r.headroom(), r.window()), (8, 4, 8));
        assert_eq!(r.enqueue_slice(b"abcdefghijk"), 8);
        assert_eq!(r.window(), 0);
        assert_eq!(r.write_unallocated(0, b"lmnopq"), 4);
        r.enqueue_unallocated(4);
        assert_eq!(r.len(), 12);
        assert_eq!(r.window(), 0);
        assert_eq!(r.to_vec(), b"abcdefghlmno");
        r.dequeue_allocated(6);
        assert_eq!(r.window(), 2);
        assert_eq!(r.to_vec(), b"ghlmno");
    }

    #[test]
    fn grow_before_first_write_reserves_nothing() {
        let mut r = RingBuffer::new(64 * 1024);
        r.grow(1 << 20);
        assert_eq!(r.capacity(), 1 << 20);
        assert_eq!(r.storage.capacity(), 0);
        assert_eq!(r.enqueue_slice(b"abc"), 3);
        assert_eq!(r.to_vec(), b"abc");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(usize),
        Pop(usize),
        /// Out-of-order write: (offset after the queued bytes, length).
        Ooo(usize, usize),
        /// Commit `n` uncommitted bytes at offset 0 (as the reassembler does
        /// once a hole is filled).
        Commit(usize),
        Grow(usize),
        Headroom(usize),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0usize..40).prop_map(Op::Push),
            (0usize..40).prop_map(Op::Pop),
            (0usize..60, 1usize..30).prop_map(|(o, n)| Op::Ooo(o, n)),
            (0usize..40).prop_map(Op::Commit),
            (0usize..50).prop_map(Op::Grow),
            (0usize..20).prop_map(Op::Headroom),
        ]
    }

    proptest::proptest! {
        /// Growing (capacity or headroom) at any moment, with queued bytes
        /// wrapped around the end and out-of-order bytes written past them
        /// (into the headroom too), loses nothing: a model
        /// keeps the committed bytes and, per offset after them, the byte
        /// last written there (if any).
        #[test]
        fn grow_preserves_queued_and_out_of_order_data(
            initial in 1usize..40,
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            let mut r = RingBuffer::new(initial);
            let mut committed = std::collections::VecDeque::new();
            // Uncommitted bytes by offset after the committed ones.
            let mut ooo: Vec<Option<u8>> = Vec::new();
            let mut next = 0u8;
            let mut fresh = |n: usize| -> Vec<u8> {
                (0..n).map(|_| { next = next.wrapping_add(1); next }).collect()
            };
            for op in ops {
                match op {
                    Op::Push(n) => {
                        // Appending overwrites uncommitted bytes, as in-order
                        // data would never do while holes exist; only push
                        // when nothing is held out of order.
                        if ooo.iter().all(Option::is_none) {
                            let data = fresh(n);
                            let took = r.enqueue_slice(&data);
                            let room = r.capacity().saturating_sub(committed.len());
                            proptest::prop_assert_eq!(took, n.min(room));
                            committed.extend(&data[..took]);
                            ooo.clear();
                        }
                    }
                    Op::Pop(n) => {
                        let mut out = vec![0; n];
                        let got = r.dequeue_slice(&mut out);
                        let want: Vec<u8> = committed.drain(..n.min(committed.len())).collect();
                        proptest::prop_assert_eq!(&out[..got], &want[..]);
                    }
                    Op::Ooo(off, n) => {
                        let data = fresh(n);
                        let wrote = r.write_unallocated(off, &data);
                        let free = r.capacity() + r.headroom() - committed.len();
                        proptest::prop_assert_eq!(wrote, n.min(free.saturating_sub(off)));
                        if ooo.len() < off + wrote {
                            ooo.resize(off + wrote, None);
                        }
                        for (i, &b) in data[..wrote].iter().enumerate() {
                            ooo[off + i] = Some(b);
                        }
                    }
                    Op::Commit(n) => {
                        // Only a filled prefix is ever committed.
                        let filled = ooo.iter().take_while(|b| b.is_some()).count();
                        let n = n.min(filled);
                        r.enqueue_unallocated(n);
                        committed.extend(ooo.drain(..n).map(|b| b.expect("filled")));
                    }
                    Op::Grow(by) => {
                        let h = r.headroom();
                        r.grow(r.capacity() + by);
                        proptest::prop_assert_eq!(r.headroom(), h);
                    }
                    Op::Headroom(by) => {
                        let c = r.capacity();
                        r.resize(c, r.headroom() + by);
                        proptest::prop_assert_eq!(r.capacity(), c);
                    }
                }
                proptest::prop_assert_eq!(r.len(), committed.len());
                proptest::prop_assert_eq!(r.to_vec(), committed.iter().copied().collect::<Vec<_>>());
                for (off, b) in ooo.iter().enumerate() {
                    if let Some(b) = *b {
                        let mut one = [0u8];
                        proptest::prop_assert_eq!(r.read_unallocated(off, &mut one), 1);
                        proptest::prop_assert_eq!(one[0], b, "offset {}", off);
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn fifo_model(ops in proptest::collection::vec((proptest::prelude::any::<bool>(), 0usize..20), 0..100)) {
            let mut r = RingBuffer::new(13);
            let mut model = std::collections::VecDeque::new();
            let mut next = 0u8;
            for (push, n) in ops {
                if push {
                    let data: Vec<u8> = (0..n).map(|_| { next = next.wrapping_add(1); next }).collect();
                    let took = r.enqueue_slice(&data);
                    proptest::prop_assert_eq!(took, n.min(13 - model.len()));
                    model.extend(&data[..took]);
                    next = next.wrapping_sub((n - took) as u8);
                } else {
                    let mut out = vec![0; n];
                    let got = r.dequeue_slice(&mut out);
                    let want: Vec<u8> = model.drain(..n.min(model.len())).collect();
                    proptest::prop_assert_eq!(&out[..got], &want[..]);
                }
                proptest::prop_assert_eq!(r.len(), model.len());
            }
        }
    }
}
