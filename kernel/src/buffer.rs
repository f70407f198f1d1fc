//! A connection's user-space byte buffer: contiguous, of fixed capacity,
//! so that a handler can peek at what it holds in one slice.

/// Bytes `[start, end)` of a fixed allocation. Reading takes from the
/// front; writing appends at the back, moving what is held to the front
/// first when the back has no room.
#[derive(Debug)]
pub(crate) struct ByteBuffer {
    bytes: Box<[u8]>,
    start: usize,
    end: usize,
}

impl ByteBuffer {
    /// An empty buffer of `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> ByteBuffer {
        ByteBuffer {
            bytes: vec![0; capacity].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Bytes it can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.bytes.len()
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
        self.bytes.len() - self.len()
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
    /// [`ByteBuffer::space`]; follow a write into it with
    /// [`ByteBuffer::commit`].
    pub(crate) fn tail_mut(&mut self) -> &mut [u8] {
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
    pub(crate) fn push(&mut self, data: &[u8]) -> usize {
        let tail = self.tail_mut();
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
        let mut b = ByteBuffer::new(8);
        assert_eq!(b.push(b"abcdef"), 6);
        assert_eq!(b.consume(4), 4);
        assert_eq!(b.filled(), b"ef");
        assert_eq!(b.space(), 6);
        // The back has 2 free bytes; tail_mut makes room for all 6.
        assert_eq!(b.tail_mut().len(), 6);
        assert_eq!(b.push(b"ghijklmn"), 6);
        assert_eq!(b.filled(), b"efghijkl");
        assert_eq!(b.space(), 0);
        assert_eq!(b.consume(100), 8);
        assert!(b.is_empty());
        assert_eq!(b.space(), 8);
    }

    #[test]
    #[should_panic(expected = "commit past the tail")]
    fn a_commit_past_the_tail_is_refused() {
        let mut b = ByteBuffer::new(4);
        b.commit(5);
    }
}
