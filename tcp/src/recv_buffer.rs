//! A connection's receive queue: payload kept in lent frames, and chunks.
//!
//! Bytes that were copied (out-of-order data, short payloads, payloads that
//! came without a frame) are queued in the connection's [`ChunkBuffer`];
//! kept payloads stay in the caller's frames. While the connection holds
//! kept payload, its [`PieceList`] says in which order the two kinds of
//! bytes are read: kept payloads, and runs of the chunks' queued bytes.
//! With no kept payload the list is empty and the chunks are the whole
//! queue, the path of a stack that is lent no frames. Out-of-order bytes
//! are written into the chunks at their offsets from RCV.NXT (kept
//! payloads take no chunk space, so these are the chunks' own offsets
//! past their queued bytes), and a frame is kept only while there are none
//! ([`RecvBuffer::keep_frame`]). The bound (capacity and headroom) covers
//! both kinds.

use crate::buffer::ChunkBuffer;
use crate::chunk_pool::ChunkPool;
use crate::lent_frames::{FrameStore, Front, LentFrames, PieceList};

/// See the module documentation. The piece list first, then the chunks'
/// counts, their list last (`repr(C)`; see [`ChunkBuffer`]).
#[derive(Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct RecvBuffer {
    pieces: PieceList,
    chunks: ChunkBuffer,
}

impl RecvBuffer {
    /// An empty queue bounded at `capacity` bytes (holding no memory).
    pub(crate) fn new(capacity: usize) -> Self {
        RecvBuffer {
            pieces: PieceList::default(),
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
        self.pieces.frame_bytes() + self.chunks.len()
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

    /// Chunks held.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.chunks()
    }

    /// Bytes of the chunks held.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.chunks.held_bytes()
    }

    /// The piece list and the bytes the chunks queue (`check_layout`).
    #[cfg(test)]
    pub(crate) fn pieces(&self) -> (&PieceList, usize) {
        (&self.pieces, self.chunks.len())
    }

    /// Raises the capacity (see [`ChunkBuffer::grow`]).
    pub(crate) fn grow(&mut self, new_capacity: usize) {
        self.chunks.grow(new_capacity);
    }

    /// Sets the capacity (see [`ChunkBuffer::set_capacity`]).
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.chunks.set_capacity(capacity);
    }

    /// Raises capacity and headroom (see [`ChunkBuffer::resize`]).
    pub(crate) fn resize(&mut self, capacity: usize, headroom: usize) {
        self.chunks.resize(capacity, headroom);
    }

    /// Queues `len` in-order bytes at `offset` of the caller's `frame`
    /// without copying them, if no out-of-order bytes are held (they would
    /// be read before it) and the bytes fit the bound. Returns whether the
    /// frame was kept.
    #[inline]
    pub(crate) fn keep_frame(
        &mut self,
        lent: &mut LentFrames,
        (frame, offset): (u32, u32),
        len: usize,
    ) -> bool {
        let bound = self.capacity() + self.headroom();
        if self.chunks.has_unqueued() || self.len() + len > bound {
            return false;
        }
        if self.pieces.is_empty() {
            // Everything readable so far is in the chunks, and read first.
            lent.push_chunks(&mut self.pieces, self.chunks.len() as u32);
        }
        lent.push_frame(&mut self.pieces, frame, offset, len as u32);
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
        let kept = self.pieces.frame_bytes();
        if kept == 0 {
            return self.chunks.write_unallocated(pool, offset, data);
        }
        // The chunks' own bound does not see the kept bytes.
        let free = (self.capacity() + self.headroom()).saturating_sub(self.len());
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

    /// Commits `n` bytes written at offset 0: they are read after
    /// everything readable now.
    #[inline]
    pub(crate) fn enqueue_unallocated(&mut self, lent: &mut LentFrames, n: usize) {
        self.chunks.enqueue_unallocated(n);
        if !self.pieces.is_empty() {
            lent.push_chunks(&mut self.pieces, n as u32);
        }
    }

    /// Forgets out-of-order bytes (see [`ChunkBuffer::forget_unqueued`]).
    pub(crate) fn forget_unqueued(&mut self, pool: &mut ChunkPool) {
        self.chunks.forget_unqueued(pool);
    }

    /// Forgets out-of-order bytes more than `keep` bytes past the queued
    /// ones (see [`ChunkBuffer::forget_unqueued_past`]).
    pub(crate) fn forget_unqueued_past(&mut self, pool: &mut ChunkPool, keep: usize) {
        self.chunks.forget_unqueued_past(pool, keep);
    }

    /// The next contiguous readable bytes: a kept payload (resolved
    /// through `store`), or a run of the chunks.
    #[inline]
    pub(crate) fn peek<'a>(&'a self, lent: &LentFrames, store: &'a dyn FrameStore) -> &'a [u8] {
        if self.pieces.is_empty() {
            return self.chunks.peek();
        }
        match lent.front(&self.pieces) {
            Front::Frame { frame, offset, len } => frame_bytes(store, frame, offset, len),
            Front::Chunks { len } => {
                let run = self.chunks.peek();
                &run[..run.len().min(len as usize)]
            }
        }
    }

    /// Drops `n` readable bytes from the front (a kept frame is released
    /// once its last byte goes); returns the number dropped.
    #[inline]
    pub(crate) fn dequeue(
        &mut self,
        pool: &mut ChunkPool,
        lent: &mut LentFrames,
        n: usize,
    ) -> usize {
        // A read that found nothing (an application reads until it would
        // block) leaves the chunk list's line alone.
        if n == 0 {
            return 0;
        }
        if self.pieces.is_empty() {
            return self.chunks.dequeue_allocated(pool, n);
        }
        let mut dropped = 0;
        while dropped < n && !self.pieces.is_empty() {
            let take = match lent.front(&self.pieces) {
                Front::Frame { len, .. } => len.min((n - dropped) as u32),
                Front::Chunks { len } => {
                    let take = len.min((n - dropped) as u32);
                    self.chunks.dequeue_allocated(pool, take as usize);
                    take
                }
            };
            lent.advance(&mut self.pieces, take);
            dropped += take as usize;
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
        if self.pieces.is_empty() {
            return self.chunks.read_allocated(0, out);
        }
        let (mut n, mut chunked) = (0, 0);
        for piece in lent.iter(&self.pieces) {
            if n == out.len() {
                break;
            }
            let (got, len) = match piece {
                Front::Frame { frame, offset, len } => {
                    let bytes = frame_bytes(store, frame, offset, len);
                    let k = bytes.len().min(out.len() - n);
                    out[n..n + k].copy_from_slice(&bytes[..k]);
                    (k, len as usize)
                }
                Front::Chunks { len } => {
                    let want = (len as usize).min(out.len() - n);
                    let k = self.chunks.read_allocated(chunked, &mut out[n..n + want]);
                    chunked += len as usize;
                    (k, len as usize)
                }
            };
            n += got;
            if got < len {
                break;
            }
        }
        n
    }

    /// All readable bytes, copied.
    pub(crate) fn to_vec(&self, lent: &LentFrames, store: &dyn FrameStore) -> Vec<u8> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut v = vec![0; self.len()];
        let n = self.read(lent, store, &mut v);
        debug_assert_eq!(n, v.len(), "a kept payload the store does not hold");
        v.truncate(n);
        v
    }

    /// Drops every byte and gives back every chunk and frame: the queue
    /// then holds no memory.
    pub(crate) fn release(&mut self, pool: &mut ChunkPool, lent: &mut LentFrames) {
        lent.release(&mut self.pieces);
        self.chunks.release(pool);
    }
}

/// The `len` bytes at `offset` of `frame` in `store` (empty if the store
/// does not have them).
#[inline]
fn frame_bytes(store: &dyn FrameStore, frame: u32, offset: u32, len: u32) -> &[u8] {
    let (s, e) = (offset as usize, offset as usize + len as usize);
    store.frame(frame).get(s..e).unwrap_or(&[])
}
