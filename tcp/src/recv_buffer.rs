//! A connection's receive queue: payload kept in lent frames, then chunks.
//!
//! The readable bytes are the connection's lent pieces ([`FrameList`])
//! followed by the bytes queued in its [`ChunkBuffer`]; out-of-order bytes
//! are written into the chunks at their offsets past all of them. A frame
//! is kept only while the chunks hold nothing at all (see
//! [`RecvBuffer::keep_frame`]), so the two parts never interleave. The
//! bound (capacity and headroom) covers both parts.

use crate::buffer::ChunkBuffer;
use crate::chunk_pool::ChunkPool;
use crate::lent_frames::{FrameList, FrameStore, LentFrames};

/// See the module documentation.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct RecvBuffer {
    frames: FrameList,
    chunks: ChunkBuffer,
}

impl RecvBuffer {
    /// An empty queue bounded at `capacity` bytes (holding no memory).
    pub(crate) fn new(capacity: usize) -> Self {
        RecvBuffer {
            frames: FrameList::default(),
            chunks: ChunkBuffer::new(capacity),
        }
    }

    /// Capacity in bytes, headroom excluded.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.chunks.capacity()
    }

    /// Bytes beyond the capacity that out-of-order writes may use.
    #[inline]
    pub(crate) fn headroom(&self) -> usize {
        self.chunks.headroom()
    }

    /// Readable bytes, in frames and chunks.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.frames.bytes() + self.chunks.len()
    }

    /// Whether nothing is readable.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free space after the readable bytes, up to the capacity.
    #[inline]
    pub(crate) fn window(&self) -> usize {
        self.capacity().saturating_sub(self.len())
    }

    /// Free space after the readable bytes, headroom included.
    #[inline]
    fn free_with_headroom(&self) -> usize {
        (self.capacity() + self.headroom()).saturating_sub(self.len())
    }

    /// Chunks held.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.chunks()
    }

    /// The lent pieces.
    #[cfg(test)]
    pub(crate) fn frame_list(&self) -> &FrameList {
        &self.frames
    }

    /// Raises the capacity (see [`ChunkBuffer::grow`]).
    pub(crate) fn grow(&mut self, new_capacity: usize) {
        self.chunks.grow(new_capacity);
    }

    /// Raises capacity and headroom (see [`ChunkBuffer::resize`]).
    pub(crate) fn resize(&mut self, capacity: usize, headroom: usize) {
        self.chunks.resize(capacity, headroom);
    }

    /// Queues `len` in-order bytes at `offset` of the caller's `frame`
    /// without copying them, if the chunks hold nothing (so the bytes go
    /// after every readable one and before any out-of-order one) and they
    /// fit. Returns whether the frame was kept.
    #[inline]
    pub(crate) fn keep_frame(
        &mut self,
        lent: &mut LentFrames,
        (frame, offset): (u32, u32),
        len: usize,
    ) -> bool {
        if !self.chunks.holds_nothing() || len > self.free_with_headroom() {
            return false;
        }
        lent.push(&mut self.frames, frame, offset, len as u32);
        true
    }

    /// Writes out-of-order (or not yet committed) bytes `offset` bytes past
    /// the readable ones, within the bound; returns the number written.
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
        self.chunks.write_unallocated(pool, offset, &data[..n])
    }

    /// Reads uncommitted bytes `offset` bytes past the readable ones.
    pub(crate) fn read_unallocated(&self, offset: usize, out: &mut [u8]) -> usize {
        self.chunks.read_unallocated(offset, out)
    }

    /// Commits `n` bytes written at offset 0.
    #[inline]
    pub(crate) fn enqueue_unallocated(&mut self, n: usize) {
        self.chunks.enqueue_unallocated(n);
    }

    /// Forgets out-of-order bytes (see [`ChunkBuffer::forget_unqueued`]).
    pub(crate) fn forget_unqueued(&mut self, pool: &mut ChunkPool) {
        self.chunks.forget_unqueued(pool);
    }

    /// The next contiguous readable bytes: the first lent piece (resolved
    /// through `store`), else the chunks' first run.
    #[inline]
    pub(crate) fn peek<'a>(&'a self, lent: &LentFrames, store: &'a dyn FrameStore) -> &'a [u8] {
        if self.frames.is_empty() {
            self.chunks.peek()
        } else {
            lent.front(&self.frames, store)
        }
    }

    /// Drops `n` readable bytes from the front (frames first, each released
    /// once its last byte goes); returns the number dropped.
    #[inline]
    pub(crate) fn dequeue(
        &mut self,
        pool: &mut ChunkPool,
        lent: &mut LentFrames,
        n: usize,
    ) -> usize {
        let mut dropped = 0;
        if !self.frames.is_empty() {
            dropped = lent.consume(&mut self.frames, n);
        }
        if dropped < n {
            dropped += self.chunks.dequeue_allocated(pool, n - dropped);
        }
        dropped
    }

    /// Moves up to `out.len()` readable bytes into `out`; returns the
    /// number moved.
    pub(crate) fn dequeue_slice(
        &mut self,
        pool: &mut ChunkPool,
        lent: &mut LentFrames,
        store: &dyn FrameStore,
        out: &mut [u8],
    ) -> usize {
        let n = self.read(lent, store, out);
        self.dequeue(pool, lent, n)
    }

    /// Copies readable bytes from the front into `out` without removing
    /// them; returns the number copied.
    fn read(&self, lent: &LentFrames, store: &dyn FrameStore, out: &mut [u8]) -> usize {
        let mut n = 0;
        if !self.frames.is_empty() {
            n = lent.copy_out(&self.frames, store, out);
            if n < self.frames.bytes() {
                return n;
            }
        }
        n + self.chunks.read_allocated(0, &mut out[n..])
    }

    /// All readable bytes, copied.
    pub(crate) fn to_vec(&self, lent: &LentFrames, store: &dyn FrameStore) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        let n = self.read(lent, store, &mut v);
        v.truncate(n);
        v
    }

    /// Drops every byte and gives back every chunk and frame: the queue
    /// then holds no memory.
    pub(crate) fn release(&mut self, pool: &mut ChunkPool, lent: &mut LentFrames) {
        lent.release(&mut self.frames);
        self.chunks.release(pool);
    }
}
