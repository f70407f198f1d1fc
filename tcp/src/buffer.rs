//! Byte ring buffers for send and receive data.
//!
//! Storage is reserved on first write and initialised only as far as it has
//! been written, so idle or one-directional connections do not pay for both
//! buffers, and a new connection does not zero its whole buffer up front.

/// A fixed-capacity byte ring. "Allocated" bytes are the `len()` queued
/// bytes starting at the read position; the space after them is
/// "unallocated" and can be written at an offset before being committed
/// (used for out-of-order reassembly).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RingBuffer {
    storage: Vec<u8>,
    capacity: usize,
    read_at: usize,
    len: usize,
}

impl RingBuffer {
    /// An empty ring of `capacity` bytes (not allocated yet).
    pub fn new(capacity: usize) -> Self {
        RingBuffer {
            storage: Vec::new(),
            capacity,
            read_at: 0,
            len: 0,
        }
    }

    fn ensure_storage(&mut self) {
        if self.storage.capacity() < self.capacity {
            self.storage
                .reserve_exact(self.capacity - self.storage.len());
        }
    }

    /// Makes ring positions `[0, end)` initialised (`end <= capacity`).
    fn touch(&mut self, end: usize) {
        if self.storage.len() < end {
            self.storage.resize(end, 0);
        }
    }

    /// Total capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queued (allocated) bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes are queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free space after the queued bytes.
    pub fn window(&self) -> usize {
        self.capacity - self.len
    }

    /// Copies `data` into `[at, at + data.len())` (ring positions), which
    /// must lie within the capacity.
    fn copy_in(&mut self, at: usize, data: &[u8]) {
        self.touch((at + data.len()).min(self.capacity));
        let first = data.len().min(self.capacity - at);
        self.storage[at..at + first].copy_from_slice(&data[..first]);
        self.storage[..data.len() - first].copy_from_slice(&data[first..]);
    }

    /// Copies ring positions starting at `at`; never-written positions
    /// read as zero.
    fn copy_out(&self, at: usize, out: &mut [u8]) {
        let first = out.len().min(self.capacity - at);
        let (head, tail) = out.split_at_mut(first);
        for (dst, start) in [(head, at), (tail, 0)] {
            let avail = self.storage.len().saturating_sub(start).min(dst.len());
            dst[..avail].copy_from_slice(&self.storage[start..start + avail]);
            dst[avail..].fill(0);
        }
    }

    fn pos(&self, offset: usize) -> usize {
        let p = self.read_at + offset;
        if p >= self.capacity {
            p - self.capacity
        } else {
            p
        }
    }

    /// Appends as much of `data` as fits; returns the number of bytes taken.
    pub fn enqueue_slice(&mut self, data: &[u8]) -> usize {
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
    pub fn dequeue_slice(&mut self, out: &mut [u8]) -> usize {
        let n = self.read_allocated(0, out);
        self.dequeue_allocated(n);
        n
    }

    /// Copies queued bytes starting `offset` bytes from the front into
    /// `out`, without removing them. Returns the number copied.
    pub fn read_allocated(&self, offset: usize, out: &mut [u8]) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = out.len().min(self.len - offset);
        let at = self.pos(offset);
        self.copy_out(at, &mut out[..n]);
        n
    }

    /// Drops `n` bytes (at most `len()`) from the front.
    pub fn dequeue_allocated(&mut self, n: usize) -> usize {
        let n = n.min(self.len);
        self.read_at = self.pos(n);
        // The read position is not reset when the ring empties: data
        // written past the end (out-of-order segments) must stay put.
        self.len -= n;
        n
    }

    /// The longest contiguous run of queued bytes at the front (zero-copy
    /// read; follow with [`RingBuffer::dequeue_allocated`]).
    pub fn peek(&self) -> &[u8] {
        let n = self.len.min(self.capacity - self.read_at);
        if n == 0 {
            return &[];
        }
        // Queued bytes were written, so they are initialised.
        &self.storage[self.read_at..self.read_at + n]
    }

    /// Writes `data` into the free space starting `offset` bytes after the
    /// queued bytes, without committing it. Bytes beyond the capacity are
    /// dropped; returns the number written.
    pub fn write_unallocated(&mut self, offset: usize, data: &[u8]) -> usize {
        let free = self.window();
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
    pub fn read_unallocated(&self, offset: usize, out: &mut [u8]) -> usize {
        let free = self.window();
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
    pub fn enqueue_unallocated(&mut self, n: usize) {
        debug_assert!(n <= self.window());
        self.len += n.min(self.window());
    }

    /// Copies all queued bytes into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
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
