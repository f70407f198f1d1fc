//! Send and receive byte buffers, in chunks from the stack's pool.
//!
//! A buffer is a queue of bytes with a bound ([`ChunkBuffer::capacity`], the
//! window it can offer or the data it may queue), not a reservation: it takes
//! chunks from the stack's [`ChunkPool`] as writes reach past the chunks it
//! holds and gives each back once its last byte is read (receive) or
//! acknowledged (send). Memory so follows the bytes held, an idle connection
//! holds no chunk, and auto-tuning moves the bound without copying anything.
//!
//! Bytes can also be written past the queued ones and committed later
//! (out-of-order reassembly): they keep their offsets from the read position
//! while the application drains what precedes them.

use crate::chunk_pool::{ChunkList, ChunkPool, CHUNK_SIZE, SMALL_CHUNK_SIZE};

/// A byte queue in pooled chunks. "Allocated" bytes are the `len()` queued
/// bytes starting at the read position; the space after them is
/// "unallocated" and can be written at an offset before being committed
/// (used for out-of-order reassembly).
///
/// The buffer holds [`ChunkBuffer::capacity`] bytes plus an optional
/// headroom: [`ChunkBuffer::window`] and [`ChunkBuffer::enqueue_slice`] see
/// only the capacity, while out-of-order writes and commits may also use the
/// headroom. A receiver that advertises its window from the capacity can so
/// still accept everything up to a right edge that window-scale rounding
/// (RFC 7323 §2.4) put a little past it.
///
/// The counts come first and the chunk list last (`repr(C)`): a receive
/// queue whose bytes stay in lent frames reads only the counts, so the
/// list's words stay out of the cache lines a receiver's segment touches
/// (see `Connection`'s layout).
#[derive(Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct ChunkBuffer {
    /// Queued bytes.
    len: u32,
    capacity: u32,
    headroom: u32,
    /// One past the furthest offset written (queued or not): chunks up to it
    /// are kept while the queued bytes drain.
    written: u32,
    /// The read position inside the first chunk.
    head: u32,
    /// log2 of the size of the chunks held: [`SMALL_CHUNK_SIZE`] when the
    /// bytes the buffer was first given (since it last held none) fit in
    /// one, [`CHUNK_SIZE`] otherwise. Chosen whenever the buffer takes its
    /// first chunk.
    shift: u8,
    /// Chunk `i` holds offsets `[i * size - head, (i + 1) * size - head)`
    /// from the read position, `size` being the chunks' size
    /// (`1 << shift`).
    chunks: ChunkList,
}

/// log2 of [`SMALL_CHUNK_SIZE`].
const SMALL_SHIFT: u8 = SMALL_CHUNK_SIZE.trailing_zeros() as u8;
/// log2 of [`CHUNK_SIZE`].
const LARGE_SHIFT: u8 = CHUNK_SIZE.trailing_zeros() as u8;
const _: () = assert!(SMALL_CHUNK_SIZE.is_power_of_two() && CHUNK_SIZE.is_power_of_two());

/// Buffer sizes are bounded by the window field (2^30 with the largest
/// shift), so `u32` holds every offset.
fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl ChunkBuffer {
    /// An empty buffer bounded at `capacity` bytes (holding no memory).
    pub(crate) fn new(capacity: usize) -> Self {
        ChunkBuffer {
            capacity: to_u32(capacity),
            ..ChunkBuffer::default()
        }
    }

    /// The size of the chunks held (`1 << shift`).
    #[inline]
    fn chunk_size(&self) -> usize {
        1 << self.shift
    }

    /// Capacity in bytes, headroom excluded.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Bytes beyond the capacity usable by unallocated writes (see the type
    /// documentation).
    pub(crate) fn headroom(&self) -> usize {
        self.headroom as usize
    }

    /// Queued (allocated) bytes; more than the capacity if committed
    /// unallocated writes reached into the headroom.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no bytes are queued.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether bytes were written past the queued ones (out-of-order
    /// bytes waiting for a hole to fill).
    #[inline]
    pub(crate) fn has_unqueued(&self) -> bool {
        self.written > self.len
    }

    /// Chunks held.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Bytes of the chunks held.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    /// Free space after the queued bytes, up to the capacity.
    #[inline]
    pub(crate) fn window(&self) -> usize {
        self.capacity().saturating_sub(self.len())
    }

    /// Free space after the queued bytes, headroom included.
    fn free_with_headroom(&self) -> usize {
        (self.capacity() + self.headroom()).saturating_sub(self.len())
    }

    /// Takes chunks until offsets `[0, end)` from the read position are
    /// held.
    #[inline]
    fn hold(&mut self, pool: &mut ChunkPool, end: usize) {
        if self.chunks.is_empty() {
            // Nothing held (so the read position is 0): the chunks' size
            // is chosen for these bytes.
            let small = end <= SMALL_CHUNK_SIZE;
            self.shift = if small { SMALL_SHIFT } else { LARGE_SHIFT };
            if self.chunks.capacity() == 0 && end > 0 {
                self.chunks = pool.take_list();
            }
        }
        let end = self.head as usize + end;
        if end > SMALL_CHUNK_SIZE && self.shift == SMALL_SHIFT {
            self.outgrow_small(pool);
        }
        let need = (end + self.chunk_size() - 1) >> self.shift;
        let small = self.shift == SMALL_SHIFT;
        while self.chunks.len() < need {
            self.chunks.push_back(pool.take(small));
        }
    }

    /// The bytes outgrew one small chunk: the small chunk (the only one a
    /// buffer of small chunks ever holds) is replaced by a chunk of
    /// [`CHUNK_SIZE`] with the same bytes at the same offsets, and the
    /// buffer takes chunks of that size from then on (until it holds none
    /// again). One copy of at most [`SMALL_CHUNK_SIZE`] bytes, so that a
    /// stream that started with a short segment is not carried in small
    /// chunks.
    #[cold]
    #[inline(never)]
    fn outgrow_small(&mut self, pool: &mut ChunkPool) {
        self.shift = LARGE_SHIFT;
        if let Some(small) = self.chunks.pop_front() {
            debug_assert!(self.chunks.is_empty(), "one small chunk at most");
            let mut large = pool.take(false);
            let (from, to) = (self.head as usize, (self.head + self.written) as usize);
            large[from..to].copy_from_slice(&small[from..to]);
            pool.give(small);
            self.chunks.push_back(large);
        }
    }

    /// Copies `data` to offset `at` from the read position (held already).
    #[inline]
    fn copy_in(&mut self, at: usize, mut data: &[u8]) {
        let mut pos = self.head as usize + at;
        let size = self.chunk_size();
        while !data.is_empty() {
            let (i, o) = (pos >> self.shift, pos & (size - 1));
            let n = data.len().min(size - o);
            self.chunks[i][o..o + n].copy_from_slice(&data[..n]);
            data = &data[n..];
            pos += n;
        }
    }

    /// Copies from offset `at` from the read position into `out` (written
    /// bytes only: the caller bounds `out`).
    #[inline]
    fn copy_out(&self, at: usize, mut out: &mut [u8]) {
        let mut pos = self.head as usize + at;
        let size = self.chunk_size();
        while !out.is_empty() {
            let (i, o) = (pos >> self.shift, pos & (size - 1));
            let n = out.len().min(size - o);
            let (dst, rest) = out.split_at_mut(n);
            dst.copy_from_slice(&self.chunks[i][o..o + n]);
            out = rest;
            pos += n;
        }
    }

    /// Appends as much of `data` as fits; returns the number of bytes taken.
    pub(crate) fn enqueue_slice(&mut self, pool: &mut ChunkPool, data: &[u8]) -> usize {
        let n = data.len().min(self.window());
        if n == 0 {
            return 0;
        }
        let at = self.len();
        self.hold(pool, at + n);
        self.copy_in(at, &data[..n]);
        self.len += n as u32;
        self.written = self.written.max(self.len);
        n
    }

    /// Removes up to `out.len()` bytes from the front into `out`.
    #[cfg(test)]
    pub(crate) fn dequeue_slice(&mut self, pool: &mut ChunkPool, out: &mut [u8]) -> usize {
        let n = self.read_allocated(0, out);
        self.dequeue_allocated(pool, n);
        n
    }

    /// Copies queued bytes starting `offset` bytes from the front into
    /// `out`, without removing them. Returns the number copied.
    #[inline]
    pub(crate) fn read_allocated(&self, offset: usize, out: &mut [u8]) -> usize {
        if offset >= self.len() {
            return 0;
        }
        let n = out.len().min(self.len() - offset);
        self.copy_out(offset, &mut out[..n]);
        n
    }

    /// Drops `n` bytes (at most `len()`) from the front, giving back every
    /// chunk that no longer holds a byte to keep.
    #[inline]
    pub(crate) fn dequeue_allocated(&mut self, pool: &mut ChunkPool, n: usize) -> usize {
        let n = n.min(self.len());
        let n32 = n as u32;
        self.len -= n32;
        self.written -= n32;
        if self.written == 0 {
            // Nothing queued and nothing written past it: hold no chunk
            // (the chunk list keeps its small allocation for the next
            // burst; `release` drops that too).
            self.give_back(pool);
            return n;
        }
        let mut head = self.head as usize + n;
        let size = self.chunk_size();
        while head >= size {
            if let Some(c) = self.chunks.pop_front() {
                pool.give(c);
            }
            head -= size;
        }
        self.head = head as u32;
        n
    }

    /// The longest contiguous run of queued bytes at the front (zero-copy
    /// read; follow with [`ChunkBuffer::dequeue_allocated`]).
    #[inline]
    pub(crate) fn peek(&self) -> &[u8] {
        match self.chunks.front() {
            Some(c) if self.len > 0 => {
                let h = self.head as usize;
                &c[h..(h + self.len()).min(c.len())]
            }
            _ => &[],
        }
    }

    /// Writes `data` into the free space starting `offset` bytes after the
    /// queued bytes, without committing it. Bytes beyond the capacity and
    /// headroom are dropped; returns the number written.
    #[inline]
    pub(crate) fn write_unallocated(
        &mut self,
        pool: &mut ChunkPool,
        offset: usize,
        data: &[u8],
    ) -> usize {
        let free = self.free_with_headroom();
        if offset >= free {
            return 0;
        }
        let n = data.len().min(free - offset);
        if n == 0 {
            return 0;
        }
        let at = self.len() + offset;
        self.hold(pool, at + n);
        self.copy_in(at, &data[..n]);
        self.written = self.written.max((at + n) as u32);
        n
    }

    /// Reads uncommitted bytes `offset` bytes after the queued ones, as far
    /// as they were written; returns the number read.
    pub(crate) fn read_unallocated(&self, offset: usize, out: &mut [u8]) -> usize {
        let at = self.len() + offset;
        let n = out.len().min((self.written as usize).saturating_sub(at));
        self.copy_out(at, &mut out[..n]);
        n
    }

    /// Commits `n` bytes previously written with
    /// [`ChunkBuffer::write_unallocated`] at offset 0.
    #[inline]
    pub(crate) fn enqueue_unallocated(&mut self, n: usize) {
        debug_assert!(self.len() + n <= self.written as usize);
        self.len += n.min((self.written - self.len) as usize) as u32;
    }

    /// Raises the capacity to `new_capacity`, keeping the headroom (no-op
    /// if it is not larger).
    pub(crate) fn grow(&mut self, new_capacity: usize) {
        self.resize(new_capacity, self.headroom());
    }

    /// Sets the capacity to `capacity`, lower or higher (the application
    /// fixed the buffer's size), keeping the headroom. Queued bytes past a
    /// lowered capacity stay; the window is zero until they drain.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = to_u32(capacity);
    }

    /// Raises the capacity and the headroom to at least `capacity` and
    /// `headroom` (neither ever shrinks). Only the bound moves: queued and
    /// out-of-order bytes keep their offsets, and no memory is taken.
    pub(crate) fn resize(&mut self, capacity: usize, headroom: usize) {
        self.capacity = self.capacity.max(to_u32(capacity));
        self.headroom = self.headroom.max(to_u32(headroom));
    }

    /// Forgets bytes written past the queued ones (out-of-order data that
    /// will never be committed) and gives back the chunks only they used;
    /// with nothing queued, the buffer then holds no memory at all.
    pub(crate) fn forget_unqueued(&mut self, pool: &mut ChunkPool) {
        self.forget_unqueued_past(pool, 0);
    }

    /// Forgets bytes written more than `keep` bytes past the queued ones
    /// (those of an out-of-order segment that was refused after it was
    /// written) and gives back the chunks only they used.
    pub(crate) fn forget_unqueued_past(&mut self, pool: &mut ChunkPool, keep: usize) {
        if self.len == 0 && keep == 0 {
            self.release(pool);
            return;
        }
        self.written = self.written.min(self.len + to_u32(keep));
        let need =
            (self.head as usize + self.written as usize + self.chunk_size() - 1) >> self.shift;
        while self.chunks.len() > need {
            if let Some(c) = self.chunks.pop_back() {
                pool.give(c);
            }
        }
    }

    /// Drops every byte, queued or not, and gives all chunks back.
    #[inline]
    fn give_back(&mut self, pool: &mut ChunkPool) {
        // Popped one by one: a `drain(..)` costs some 60 instructions even
        // when there is nothing to give (a connection that held no chunk,
        // the common case when it closes).
        while let Some(c) = self.chunks.pop_front() {
            pool.give(c);
        }
        self.head = 0;
        self.len = 0;
        self.written = 0;
    }

    /// Drops every byte, gives all chunks back and the chunk list itself:
    /// the buffer then holds no memory at all (closing and TIME-WAIT
    /// connections).
    #[inline]
    pub(crate) fn release(&mut self, pool: &mut ChunkPool) {
        if self.chunks.capacity() == 0 {
            // No list, so no chunk: the buffer of an idle connection (or
            // one that never held data) closing or moving, the common case.
            self.head = 0;
            self.len = 0;
            self.written = 0;
            return;
        }
        self.release_list(pool);
    }

    /// [`ChunkBuffer::release`] with a list: out of line, so that the
    /// check above is all that the closing and exporting paths inline.
    #[inline(never)]
    fn release_list(&mut self, pool: &mut ChunkPool) {
        self.give_back(pool);
        pool.give_list(std::mem::take(&mut self.chunks));
    }

    /// Copies all queued bytes into a new vector.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        if self.len == 0 {
            return Vec::new();
        }
        let mut v = vec![0; self.len()];
        self.read_allocated(0, &mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn queues_across_chunks_and_gives_them_back() {
        let mut p = ChunkPool::new(64 * CHUNK_SIZE);
        let mut r = ChunkBuffer::new(3 * CHUNK_SIZE);
        assert_eq!(r.window(), 3 * CHUNK_SIZE);
        let a = bytes(CHUNK_SIZE + 10, 1);
        assert_eq!(r.enqueue_slice(&mut p, &a), a.len());
        assert_eq!((r.chunks(), p.in_use()), (2, 2));
        let mut out = vec![0u8; CHUNK_SIZE - 4];
        assert_eq!(r.dequeue_slice(&mut p, &mut out), out.len());
        assert_eq!(&out[..], &a[..CHUNK_SIZE - 4]);
        assert_eq!(r.peek(), &a[CHUNK_SIZE - 4..CHUNK_SIZE]);
        let mut rest = vec![0u8; 14];
        assert_eq!(r.read_allocated(0, &mut rest), 14);
        assert_eq!(&rest[..], &a[CHUNK_SIZE - 4..]);
        r.dequeue_allocated(&mut p, 4);
        assert_eq!(
            (r.chunks(), p.in_use()),
            (1, 1),
            "the drained chunk went back"
        );
        r.dequeue_allocated(&mut p, 10);
        assert!(r.is_empty());
        assert_eq!((r.chunks(), p.in_use()), (0, 0), "empty holds nothing");
        assert_eq!(r.peek(), b"");
        // Capacity is a bound, not memory.
        assert_eq!(
            r.enqueue_slice(&mut p, &bytes(5 * CHUNK_SIZE, 2)),
            3 * CHUNK_SIZE
        );
        assert_eq!(r.window(), 0);
        r.release(&mut p);
        assert_eq!((r.len(), p.in_use()), (0, 0));
    }

    #[test]
    fn unallocated_writes() {
        let mut p = ChunkPool::new(8 * CHUNK_SIZE);
        let mut r = ChunkBuffer::new(8);
        r.enqueue_slice(&mut p, b"xyz");
        r.dequeue_allocated(&mut p, 2);
        assert_eq!(r.write_unallocated(&mut p, 2, b"CDEFGHIJ"), 5); // free = 7
        assert_eq!(r.write_unallocated(&mut p, 0, b"AB"), 2);
        let mut out = [0u8; 7];
        assert_eq!(r.read_unallocated(0, &mut out), 7);
        assert_eq!(&out, b"ABCDEFG");
        r.enqueue_unallocated(4);
        assert_eq!(r.to_vec(), b"zABCD");
        assert_eq!(r.write_unallocated(&mut p, 2, b"QQ"), 1);
        assert_eq!(r.write_unallocated(&mut p, 3, b"Q"), 0);
    }

    #[test]
    fn out_of_order_data_survives_draining() {
        // Out-of-order data written past the end keeps its chunks and its
        // offset while the application drains the in-order bytes.
        let mut p = ChunkPool::new(8 * CHUNK_SIZE);
        let mut r = ChunkBuffer::new(4 * CHUNK_SIZE);
        r.enqueue_slice(&mut p, &bytes(CHUNK_SIZE - 1, 3));
        let far = bytes(20, 9);
        assert_eq!(r.write_unallocated(&mut p, CHUNK_SIZE + 5, &far), 20);
        r.dequeue_allocated(&mut p, CHUNK_SIZE - 1);
        assert!(r.chunks() > 0, "out-of-order bytes keep their chunks");
        let fill = bytes(CHUNK_SIZE + 5, 4);
        assert_eq!(r.write_unallocated(&mut p, 0, &fill), fill.len());
        r.enqueue_unallocated(CHUNK_SIZE + 25);
        let all = r.to_vec();
        assert_eq!(&all[..CHUNK_SIZE + 5], &fill[..]);
        assert_eq!(&all[CHUNK_SIZE + 5..], &far[..]);
        r.dequeue_allocated(&mut p, all.len());
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn headroom_takes_unallocated_writes_only() {
        let mut p = ChunkPool::new(8 * CHUNK_SIZE);
        let mut r = ChunkBuffer::new(8);
        r.resize(8, 4);
        assert_eq!((r.capacity(), r.headroom(), r.window()), (8, 4, 8));
        assert_eq!(r.enqueue_slice(&mut p, b"abcdefghijk"), 8);
        assert_eq!(r.window(), 0);
        assert_eq!(r.write_unallocated(&mut p, 0, b"lmnopq"), 4);
        r.enqueue_unallocated(4);
        assert_eq!(r.len(), 12);
        assert_eq!(r.window(), 0);
        assert_eq!(r.to_vec(), b"abcdefghlmno");
        r.dequeue_allocated(&mut p, 6);
        assert_eq!(r.window(), 2);
        assert_eq!(r.to_vec(), b"ghlmno");
    }

    #[test]
    fn growing_takes_no_memory() {
        let mut p = ChunkPool::new(8 * CHUNK_SIZE);
        let mut r = ChunkBuffer::new(64 * 1024);
        r.grow(1 << 20);
        assert_eq!(r.capacity(), 1 << 20);
        assert_eq!(p.in_use(), 0);
        assert_eq!(r.enqueue_slice(&mut p, b"abc"), 3);
        assert_eq!(r.to_vec(), b"abc");
        assert_eq!(p.in_use(), 1);
        r.grow(10); // never shrinks
        assert_eq!(r.capacity(), 1 << 20);
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
            (0usize..200).prop_map(Op::Push),
            (0usize..200).prop_map(Op::Pop),
            (0usize..300, 1usize..150).prop_map(|(o, n)| Op::Ooo(o, n)),
            (0usize..200).prop_map(Op::Commit),
            (0usize..250).prop_map(Op::Grow),
            (0usize..100).prop_map(Op::Headroom),
        ]
    }

    proptest::proptest! {
        /// Against a model (the committed bytes and, per offset after them,
        /// the byte last written there), across chunk boundaries: queueing,
        /// draining, out-of-order writes (into the headroom too), commits and
        /// growth lose nothing; the buffer holds exactly the chunks its
        /// written bytes span, and every chunk goes back to the pool.
        #[test]
        fn model(
            initial in 1usize..200,
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            let mut p = ChunkPool::new(4 * CHUNK_SIZE);
            let mut r = ChunkBuffer::new(initial);
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
                        // In-order data never arrives while holes exist.
                        if ooo.iter().all(Option::is_none) {
                            let data = fresh(n);
                            let took = r.enqueue_slice(&mut p, &data);
                            let room = r.capacity().saturating_sub(committed.len());
                            proptest::prop_assert_eq!(took, n.min(room));
                            committed.extend(&data[..took]);
                            ooo.clear();
                        }
                    }
                    Op::Pop(n) => {
                        let mut out = vec![0; n];
                        let got = r.dequeue_slice(&mut p, &mut out);
                        let want: Vec<u8> = committed.drain(..n.min(committed.len())).collect();
                        proptest::prop_assert_eq!(&out[..got], &want[..]);
                    }
                    Op::Ooo(off, n) => {
                        let data = fresh(n);
                        let wrote = r.write_unallocated(&mut p, off, &data);
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
                proptest::prop_assert_eq!(p.in_use(), r.chunks());
                let span = committed.len() + ooo.len();
                proptest::prop_assert!(r.chunks() <= span.div_ceil(r.chunk_size()) + 1);
                if span == 0 {
                    proptest::prop_assert_eq!(r.chunks(), 0);
                }
            }
            r.release(&mut p);
            proptest::prop_assert_eq!(p.in_use(), 0);
        }
    }
}
