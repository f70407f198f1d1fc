//! A connection's user-space byte buffer: contiguous, of fixed capacity,
//! so that a handler can peek at what it holds in one slice. Its memory
//! is attached only while it holds bytes, from a per-core pool: a
//! connection with nothing buffered holds none, and the few buffers a
//! core's busy connections pass around stay in its caches (the kernel's
//! copy into user space writes one of them, not one per connection).

/// Buffers of one size, reused last-in first-out, and how many are out
/// (held by connections) against a bound: the core's memory budget.
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Vec<Box<[u8]>>,
    size: usize,
    keep: usize,
    /// Buffers handed out and not given back.
    out: usize,
    /// Most buffers out at once ([`BufferPool::has_room`]).
    limit: usize,
    /// The most that were out at once.
    peak: usize,
    /// Bytes of buffers given back to the allocator (past `keep`).
    returned: u64,
}

impl BufferPool {
    /// A pool of `size`-byte buffers that keeps at most `keep` free ones
    /// and has room for `limit` out at once.
    pub(crate) fn new(size: usize, keep: usize, limit: usize) -> BufferPool {
        BufferPool {
            free: Vec::new(),
            size,
            keep,
            out: 0,
            limit: limit.max(1),
            peak: 0,
            returned: 0,
        }
    }

    /// Whether a buffer may be handed out within the bound.
    pub(crate) fn has_room(&self) -> bool {
        self.out < self.limit
    }

    /// How many more buffers the bound lets out now.
    pub(crate) fn room(&self) -> usize {
        self.limit.saturating_sub(self.out)
    }

    /// Buffers held by connections now.
    pub(crate) fn out(&self) -> usize {
        self.out
    }

    /// The most buffers held at once so far.
    pub(crate) fn peak(&self) -> usize {
        self.peak
    }

    /// Bytes of buffers given back to the allocator so far: those freed
    /// past the `keep` kept for reuse.
    pub(crate) fn returned(&self) -> u64 {
        self.returned
    }

    fn get(&mut self) -> Box<[u8]> {
        self.out += 1;
        self.peak = self.peak.max(self.out);
        self.free
            .pop()
            .unwrap_or_else(|| vec![0; self.size].into_boxed_slice())
    }

    fn put(&mut self, b: Box<[u8]>) {
        self.out = self.out.saturating_sub(1);
        if b.len() == self.size && self.free.len() < self.keep {
            self.free.push(b);
        } else {
            self.returned += b.len() as u64;
        }
    }
}

/// Bytes `[start, end)` of an allocation of `capacity` bytes, attached
/// while bytes are held. Reading takes from the front; writing appends at
/// the back, moving what is held to the front first when the back has no
/// room.
#[derive(Debug)]
pub(crate) struct ByteBuffer {
    /// Empty while nothing is held (see [`ByteBuffer::attach`]).
    bytes: Box<[u8]>,
    capacity: usize,
    start: usize,
    end: usize,
}

impl ByteBuffer {
    /// An empty buffer of `capacity` bytes, no memory attached yet.
    pub(crate) fn new(capacity: usize) -> ByteBuffer {
        ByteBuffer {
            bytes: Box::default(),
            capacity,
            start: 0,
            end: 0,
        }
    }

    /// Bytes it can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Gives it memory from `pool` (its own size must be the pool's) before
    /// a write.
    pub(crate) fn attach(&mut self, pool: &mut BufferPool) {
        if self.bytes.is_empty() && self.capacity > 0 {
            debug_assert_eq!(pool.size, self.capacity);
            self.bytes = pool.get();
        }
    }

    /// Gives its memory back to `pool` if it holds nothing.
    pub(crate) fn detach(&mut self, pool: &mut BufferPool) {
        if self.is_empty() && !self.bytes.is_empty() {
            pool.put(std::mem::take(&mut self.bytes));
        }
    }

    /// Drops what it holds and gives its memory back to `pool` (the
    /// connection ended).
    pub(crate) fn discard(&mut self, pool: &mut BufferPool) {
        self.consume(self.len());
        self.detach(pool);
    }

    /// Whether memory is attached.
    pub(crate) fn has_memory(&self) -> bool {
        !self.bytes.is_empty()
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Bytes that can still be appended.
    pub(crate) fn space(&self) -> usize {
        self.capacity - self.len()
    }

    /// What is held, in order.
    pub(crate) fn filled(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    /// Drops the first `n` held bytes (at most all of them); returns how
    /// many were dropped.
    pub(crate) fn consume(&mut self, n: usize) -> usize {
        let n = n.min(self.len());
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        n
    }

    /// The free space after what is held, made as large as
    /// [`ByteBuffer::space`] (memory attached from `pool` if it had none);
    /// follow a write into it with [`ByteBuffer::commit`].
    pub(crate) fn tail_mut(&mut self, pool: &mut BufferPool) -> &mut [u8] {
        self.attach(pool);
        if self.start > 0 {
            self.bytes.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.bytes[self.end..]
    }

    /// Counts `n` bytes written into [`ByteBuffer::tail_mut`] as held.
    pub(crate) fn commit(&mut self, n: usize) {
        assert!(self.end + n <= self.bytes.len(), "commit past the tail");
        self.end += n;
    }

    /// Appends as much of `data` as fits; returns how much did.
    pub(crate) fn push(&mut self, data: &[u8], pool: &mut BufferPool) -> usize {
        if data.is_empty() {
            return 0;
        }
        let tail = self.tail_mut(pool);
        let n = data.len().min(tail.len());
        tail[..n].copy_from_slice(&data[..n]);
        self.commit(n);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_out_in_order_across_compaction() {
        let mut pool = BufferPool::new(8, 4, usize::MAX);
        let mut b = ByteBuffer::new(8);
        assert_eq!(b.push(b"abcdef", &mut pool), 6);
        assert_eq!(b.consume(4), 4);
        assert_eq!(b.filled(), b"ef");
        assert_eq!(b.space(), 6);
        // The back has 2 free bytes; tail_mut makes room for all 6.
        assert_eq!(b.tail_mut(&mut pool).len(), 6);
        assert_eq!(b.push(b"ghijklmn", &mut pool), 6);
        assert_eq!(b.filled(), b"efghijkl");
        assert_eq!(b.space(), 0);
        assert_eq!(b.consume(100), 8);
        assert!(b.is_empty());
        assert_eq!(b.space(), 8);
    }

    #[test]
    fn memory_is_held_only_while_bytes_are() {
        let mut pool = BufferPool::new(8, 1, usize::MAX);
        let (mut a, mut b) = (ByteBuffer::new(8), ByteBuffer::new(8));
        assert_eq!(a.filled(), b"");
        assert_eq!(a.space(), 8);
        a.push(b"abc", &mut pool);
        a.detach(&mut pool);
        // Still holding bytes: kept.
        assert_eq!(a.filled(), b"abc");
        a.consume(3);
        a.detach(&mut pool);
        assert_eq!(pool.free.len(), 1);
        // The next buffer to need memory gets the same allocation.
        b.push(b"xyz", &mut pool);
        assert_eq!(pool.free.len(), 0);
        assert_eq!(b.filled(), b"xyz");
        // A pool keeps at most `keep` free buffers.
        a.push(b"q", &mut pool);
        a.consume(1);
        b.consume(3);
        a.detach(&mut pool);
        b.detach(&mut pool);
        assert_eq!(pool.free.len(), 1);
        // The other went back to the allocator, and is counted so (what
        // the service's heap trim watches).
        assert_eq!(pool.returned(), 8);
    }

    #[test]
    fn the_pool_counts_what_is_out_against_its_bound() {
        let mut pool = BufferPool::new(8, 1, 2);
        let (mut a, mut b, mut c) = (ByteBuffer::new(8), ByteBuffer::new(8), ByteBuffer::new(8));
        a.push(b"a", &mut pool);
        assert!(pool.has_room());
        b.push(b"b", &mut pool);
        assert!(!pool.has_room(), "two out, a bound of two");
        assert_eq!((pool.out(), pool.room(), pool.peak()), (2, 0, 2));
        // A buffer given back, kept or not, is no longer out.
        a.consume(1);
        a.detach(&mut pool);
        b.discard(&mut pool);
        assert_eq!((pool.out(), pool.room(), pool.peak()), (0, 2, 2));
        assert!(!b.has_memory() && b.is_empty());
        c.push(b"c", &mut pool);
        assert_eq!(pool.out(), 1);
    }

    #[test]
    #[should_panic(expected = "commit past the tail")]
    fn a_commit_past_the_tail_is_refused() {
        let mut pool = BufferPool::new(4, 1, usize::MAX);
        let mut b = ByteBuffer::new(4);
        b.tail_mut(&mut pool);
        b.commit(5);
    }
}
