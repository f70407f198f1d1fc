//! The stack's pool of buffer chunks: the memory behind every connection's
//! send and receive bytes.
//!
//! Buffers take a chunk when a write reaches past the chunks they hold and
//! give it back as soon as its last byte is read (receive) or acknowledged
//! (send), so a connection holds memory only for bytes in flight or waiting
//! for the application, and an idle one holds none. Returned chunks are
//! kept (up to a bound) and handed out again last-in first-out, so the
//! chunks in use stay few and warm in the cache whatever the number of
//! connections. What a busy spell left free goes back to the allocator
//! gradually: each [`ChunkPool::trim`] gives back half of the free chunks
//! no buffer took since the previous one (the coldest, at the bottom of
//! the stack), so a steady load keeps what it cycles through and the peak
//! of a burst is gone a few trims after it ended.

/// Bytes per chunk: a few segments, so that taking and returning chunks is
/// rare next to the per-segment work.
#[cfg(not(test))]
pub(crate) const CHUNK_SIZE: usize = 8192;
/// Unit tests use small chunks so that every buffer operation crosses
/// chunk boundaries.
#[cfg(test)]
pub(crate) const CHUNK_SIZE: usize = 64;

/// Bytes per small chunk: what a buffer takes when the bytes it is first
/// given fit in one (a request, an answer, a short message), so that a
/// connection holding a few hundred bytes holds a quarter of a chunk, not
/// a whole one. One UMEM frame's size.
#[cfg(not(test))]
pub(crate) const SMALL_CHUNK_SIZE: usize = 2048;
/// Unit tests' small chunks.
#[cfg(test)]
pub(crate) const SMALL_CHUNK_SIZE: usize = 16;

use std::collections::VecDeque;

use crate::kept::{Kept, TRIM_FLOOR_BYTES};

/// One chunk of buffer memory: [`CHUNK_SIZE`] or [`SMALL_CHUNK_SIZE`]
/// bytes.
pub(crate) type Chunk = Box<[u8]>;

/// The chunks one buffer holds, in offset order (all of one size).
pub(crate) type ChunkList = VecDeque<Chunk>;

/// The largest list kept for reuse, in chunks it has room for: a list that
/// grew for a window of megabytes goes back to the allocator instead.
const KEPT_LIST_ROOM: usize = 8;

/// Free chunks of both sizes and what is handed out; empty chunk lists kept
/// for the next connection's first bytes.
#[derive(Debug, Default)]
pub(crate) struct ChunkPool {
    /// Free chunks of [`CHUNK_SIZE`].
    free: Kept<Chunk>,
    /// Free chunks of [`SMALL_CHUNK_SIZE`].
    free_small: Kept<Chunk>,
    /// Empty lists with room, from buffers released by closing
    /// connections: a new connection's buffer takes one instead of
    /// allocating its list (and the closing one frees none).
    lists: Kept<ChunkList>,
    /// Bytes of chunks given back to the allocator since
    /// [`ChunkPool::take_returned`] last asked: past the bound, or trimmed.
    returned: usize,
    /// Chunks handed out and not yet given back.
    in_use: usize,
    /// Their bytes.
    in_use_bytes: usize,
    /// Most free chunks of [`CHUNK_SIZE`] kept for reuse; beyond that,
    /// returned chunks go back to the allocator.
    keep: usize,
    /// Most free chunks of [`SMALL_CHUNK_SIZE`] kept.
    keep_small: usize,
    /// Bytes queued in the send buffers of the connections this pool
    /// serves (what `Config::send_memory` bounds), counted by the
    /// connections as they queue bytes and drop them.
    send_queued: usize,
}

impl ChunkPool {
    /// An empty pool that keeps free chunks for reuse up to `keep` bytes
    /// of each size.
    pub(crate) fn new(keep: usize) -> Self {
        ChunkPool {
            keep: keep / CHUNK_SIZE,
            keep_small: keep / SMALL_CHUNK_SIZE,
            ..ChunkPool::default()
        }
    }

    /// A chunk of [`SMALL_CHUNK_SIZE`] bytes if `small`, else of
    /// [`CHUNK_SIZE`] (contents unspecified: buffers read only what they
    /// wrote).
    #[inline]
    pub(crate) fn take(&mut self, small: bool) -> Chunk {
        let (free, size) = if small {
            (&mut self.free_small, SMALL_CHUNK_SIZE)
        } else {
            (&mut self.free, CHUNK_SIZE)
        };
        self.in_use += 1;
        self.in_use_bytes += size;
        match free.pop() {
            Some(c) => c,
            None => vec![0u8; size].into_boxed_slice(),
        }
    }

    /// Gives a chunk back.
    #[inline]
    pub(crate) fn give(&mut self, chunk: Chunk) {
        let size = chunk.len();
        self.in_use = self.in_use.saturating_sub(1);
        self.in_use_bytes = self.in_use_bytes.saturating_sub(size);
        let (free, keep) = if size == SMALL_CHUNK_SIZE {
            (&mut self.free_small, self.keep_small)
        } else {
            (&mut self.free, self.keep)
        };
        if free.len() < keep {
            free.push(chunk);
        } else {
            self.returned += size;
        }
    }

    /// An empty chunk list with room: a released one kept, or a new one
    /// for [`KEPT_LIST_ROOM`]` / 2` chunks (made empty, it grew on the
    /// first chunk: a reallocation through `VecDeque::grow`, some 260
    /// instructions per new connection in a burst).
    #[inline]
    pub(crate) fn take_list(&mut self) -> ChunkList {
        self.lists
            .pop()
            .unwrap_or_else(|| ChunkList::with_capacity(KEPT_LIST_ROOM / 2))
    }

    /// Takes back a buffer's chunk list once its chunks were given back:
    /// kept if small, whatever the number. Buffers take lists only here
    /// ([`ChunkPool::take_list`]), so the lists in use and kept together
    /// are never more than the most buffers ever held one at once (a burst
    /// of short connections, two each), and the next burst finds them.
    #[inline]
    pub(crate) fn give_list(&mut self, list: ChunkList) {
        debug_assert!(list.is_empty(), "chunks go back one by one first");
        let room = list.capacity();
        if room > 0 && room <= KEPT_LIST_ROOM {
            self.lists.push(list);
        }
    }

    /// Gives back to the allocator half of the free chunks of each size,
    /// and of the empty lists, that no buffer took since the previous
    /// trim, keeping [`TRIM_FLOOR_BYTES`] of each size (and as many
    /// lists as large chunks); the bytes given back.
    pub(crate) fn trim(&mut self) -> usize {
        let chunks = self.free.trim(TRIM_FLOOR_BYTES / CHUNK_SIZE) * CHUNK_SIZE
            + self.free_small.trim(TRIM_FLOOR_BYTES / SMALL_CHUNK_SIZE) * SMALL_CHUNK_SIZE;
        self.lists.trim(TRIM_FLOOR_BYTES / CHUNK_SIZE);
        self.returned += chunks;
        chunks
    }

    /// Bytes of chunks given back to the allocator since the last call.
    pub(crate) fn take_returned(&mut self) -> usize {
        std::mem::take(&mut self.returned)
    }

    /// Bytes of the free chunks kept for reuse.
    pub(crate) fn cached_bytes(&self) -> usize {
        self.free.len() * CHUNK_SIZE + self.free_small.len() * SMALL_CHUNK_SIZE
    }

    /// Chunks held by buffers.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.in_use
    }

    /// Bytes of the chunks held by buffers.
    pub(crate) fn in_use_bytes(&self) -> usize {
        self.in_use_bytes
    }

    /// Bytes queued in send buffers.
    #[inline]
    pub(crate) fn send_queued(&self) -> usize {
        self.send_queued
    }

    /// `n` more bytes queued in a send buffer.
    #[inline]
    pub(crate) fn queued_to_send(&mut self, n: usize) {
        self.send_queued += n;
    }

    /// `n` bytes a send buffer held dropped (acknowledged, or the
    /// connection went).
    #[inline]
    pub(crate) fn dropped_from_send(&mut self, n: usize) {
        self.send_queued = self.send_queued.saturating_sub(n);
    }

    /// Free chunks kept for reuse.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.free.len() + self.free_small.len()
    }

    /// Empty chunk lists kept for reuse.
    #[cfg(test)]
    pub(crate) fn cached_lists(&self) -> usize {
        self.lists.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_last_returned_and_bounds_the_cache() {
        let mut p = ChunkPool::new(CHUNK_SIZE);
        let mut a = p.take(false);
        a[0] = 7;
        let b = p.take(false);
        assert_eq!((p.in_use(), p.in_use_bytes()), (2, 2 * CHUNK_SIZE));
        p.give(a);
        p.give(b);
        assert_eq!((p.in_use(), p.cached()), (0, 1));
        // The kept one is the first returned (the second found the cache full).
        assert_eq!(p.take(false)[0], 7);
    }

    #[test]
    fn small_chunks_are_their_own_size_and_count_by_bytes() {
        let mut p = ChunkPool::new(CHUNK_SIZE + 2 * SMALL_CHUNK_SIZE);
        let (mut s, l) = (p.take(true), p.take(false));
        assert_eq!((s.len(), l.len()), (SMALL_CHUNK_SIZE, CHUNK_SIZE));
        assert_eq!(p.in_use_bytes(), SMALL_CHUNK_SIZE + CHUNK_SIZE);
        s[0] = 9;
        p.give(s);
        p.give(l);
        assert_eq!((p.in_use(), p.in_use_bytes(), p.cached()), (0, 0, 2));
        assert_eq!(
            p.take(true)[0],
            9,
            "a small chunk comes back as a small one"
        );
        assert_eq!(p.take(false).len(), CHUNK_SIZE);
        // The bound is in bytes of each size: one large, and small ones
        // up to the same bytes.
        let bound = (CHUNK_SIZE + 2 * SMALL_CHUNK_SIZE) / SMALL_CHUNK_SIZE;
        let small: Vec<Chunk> = (0..bound + 3).map(|_| p.take(true)).collect();
        let (d, e) = (p.take(false), p.take(false));
        p.give(d);
        p.give(e);
        for x in small {
            p.give(x);
        }
        assert_eq!(
            p.cached(),
            1 + bound,
            "one large one and {bound} small ones"
        );
    }

    #[test]
    fn keeps_small_empty_lists_whatever_the_chunks_bound() {
        let mut p = ChunkPool::new(2 * CHUNK_SIZE);
        assert_eq!(
            p.take_list().capacity(),
            KEPT_LIST_ROOM / 2,
            "nothing kept yet: a new one"
        );
        let small = ChunkList::with_capacity(4);
        let room = small.capacity();
        p.give_list(small);
        p.give_list(ChunkList::new()); // no room: nothing to keep
        p.give_list(ChunkList::with_capacity(KEPT_LIST_ROOM * 4)); // too large
        assert_eq!(p.cached_lists(), 1);
        p.give_list(ChunkList::with_capacity(4));
        p.give_list(ChunkList::with_capacity(4)); // past the chunks' bound of 2
        assert_eq!(p.cached_lists(), 3);
        assert_eq!(p.take_list().capacity(), room);
    }

    /// Free large chunks a trim keeps whatever was idle.
    const FLOOR: usize = TRIM_FLOOR_BYTES / CHUNK_SIZE;

    #[test]
    fn a_trim_gives_back_half_of_what_was_not_taken_since_the_last() {
        let n = FLOOR + 64;
        let mut p = ChunkPool::new(n * CHUNK_SIZE);
        let burst: Vec<Chunk> = (0..n).map(|_| p.take(false)).collect();
        burst.into_iter().for_each(|c| p.give(c));
        assert_eq!((p.cached(), p.take_returned()), (n, 0));
        // Freed since the last trim (there was none): not idle yet.
        assert_eq!(p.trim(), 0);
        // Idle since: half of them beyond the floor goes, round after round.
        assert_eq!(p.trim(), 32 * CHUNK_SIZE);
        assert_eq!(p.trim(), 16 * CHUNK_SIZE);
        assert_eq!(p.take_returned(), 48 * CHUNK_SIZE);
        assert_eq!(p.cached(), FLOOR + 16);
        for _ in 0..16 {
            p.trim();
        }
        assert_eq!(p.cached(), FLOOR, "the floor stays");
        assert_eq!(p.cached_bytes(), TRIM_FLOOR_BYTES);
    }

    #[test]
    fn what_a_steady_load_cycles_through_is_kept() {
        let mut p = ChunkPool::new((FLOOR + 1024) * CHUNK_SIZE);
        let peak: Vec<Chunk> = (0..FLOOR + 100).map(|_| p.take(false)).collect();
        peak.into_iter().for_each(|c| p.give(c));
        p.trim();
        for _ in 0..8 {
            // Between two trims the load takes 80 chunks at once.
            let busy: Vec<Chunk> = (0..80).map(|_| p.take(false)).collect();
            busy.into_iter().for_each(|c| p.give(c));
            p.trim();
        }
        // Of the 100 past the floor, only the 20 the load never took
        // went (10, 5, 3, 1, 1).
        assert_eq!(p.cached(), FLOOR + 80);
        assert_eq!(p.take_returned(), 20 * CHUNK_SIZE);
    }

    #[test]
    fn chunks_past_the_bound_count_as_returned_and_small_ones_trim_too() {
        let mut p = ChunkPool::new(TRIM_FLOOR_BYTES + 8 * CHUNK_SIZE);
        let small_floor = TRIM_FLOOR_BYTES / SMALL_CHUNK_SIZE;
        let big: Vec<Chunk> = (0..FLOOR + 10).map(|_| p.take(false)).collect();
        let small: Vec<Chunk> = (0..small_floor + 4).map(|_| p.take(true)).collect();
        big.into_iter().for_each(|c| p.give(c));
        small.into_iter().for_each(|c| p.give(c));
        assert_eq!(p.take_returned(), 2 * CHUNK_SIZE, "two past the bound");
        p.trim();
        assert_eq!(p.trim(), 4 * CHUNK_SIZE + 2 * SMALL_CHUNK_SIZE);
    }

    #[test]
    fn idle_lists_are_trimmed_too() {
        let mut p = ChunkPool::new(CHUNK_SIZE);
        for _ in 0..FLOOR + 8 {
            p.give_list(ChunkList::with_capacity(4));
        }
        p.trim();
        p.trim();
        assert_eq!(p.cached_lists(), FLOOR + 4);
        // One taken and given back: the idle ones are those below it.
        let l = p.take_list();
        p.give_list(l);
        p.trim();
        assert_eq!(p.cached_lists(), FLOOR + 2);
    }
}
