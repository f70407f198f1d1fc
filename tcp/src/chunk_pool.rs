//! The stack's pool of buffer chunks: the memory behind every connection's
//! send and receive bytes.
//!
//! Buffers take a chunk when a write reaches past the chunks they hold and
//! give it back as soon as its last byte is read (receive) or acknowledged
//! (send), so a connection holds memory only for bytes in flight or waiting
//! for the application, and an idle one holds none. Returned chunks are
//! kept (up to a bound) and handed out again last-in first-out, so the
//! chunks in use stay few and warm in the cache whatever the number of
//! connections.

/// Bytes per chunk: a few segments, so that taking and returning chunks is
/// rare next to the per-segment work, and small enough that a connection
/// with little data pending holds little.
#[cfg(not(test))]
pub(crate) const CHUNK_SIZE: usize = 8192;
/// Unit tests use small chunks so that every buffer operation crosses
/// chunk boundaries.
#[cfg(test)]
pub(crate) const CHUNK_SIZE: usize = 64;

use std::collections::VecDeque;

/// One chunk of buffer memory.
pub(crate) type Chunk = Box<[u8; CHUNK_SIZE]>;

/// The chunks one buffer holds, in offset order.
pub(crate) type ChunkList = VecDeque<Chunk>;

/// The largest list kept for reuse, in chunks it has room for: a list that
/// grew for a window of megabytes goes back to the allocator instead.
const KEPT_LIST_ROOM: usize = 8;

/// Free chunks and the count of chunks handed out; empty chunk lists kept
/// for the next connection's first bytes.
#[derive(Debug, Default)]
pub(crate) struct ChunkPool {
    free: Vec<Chunk>,
    /// Empty lists with room, from buffers released by closing
    /// connections: a new connection's buffer takes one instead of
    /// allocating its list (and the closing one frees none).
    lists: Vec<ChunkList>,
    /// Chunks handed out and not yet given back.
    in_use: usize,
    /// Most free chunks kept for reuse; beyond that, returned chunks go
    /// back to the allocator.
    keep: usize,
}

impl ChunkPool {
    /// An empty pool that keeps up to `keep` free chunks for reuse.
    pub(crate) fn new(keep: usize) -> Self {
        ChunkPool {
            free: Vec::new(),
            lists: Vec::new(),
            in_use: 0,
            keep,
        }
    }

    /// A chunk (contents unspecified: buffers read only what they wrote).
    #[inline]
    pub(crate) fn take(&mut self) -> Chunk {
        self.in_use += 1;
        match self.free.pop() {
            Some(c) => c,
            None => new_chunk(),
        }
    }

    /// Gives a chunk back.
    #[inline]
    pub(crate) fn give(&mut self, chunk: Chunk) {
        self.in_use = self.in_use.saturating_sub(1);
        if self.free.len() < self.keep {
            self.free.push(chunk);
        }
    }

    /// An empty chunk list, with room when a released one was kept.
    #[inline]
    pub(crate) fn take_list(&mut self) -> ChunkList {
        self.lists.pop().unwrap_or_default()
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

    /// Chunks held by buffers.
    pub(crate) fn in_use(&self) -> usize {
        self.in_use
    }

    /// Free chunks kept for reuse.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.free.len()
    }

    /// Empty chunk lists kept for reuse.
    #[cfg(test)]
    pub(crate) fn cached_lists(&self) -> usize {
        self.lists.len()
    }
}

fn new_chunk() -> Chunk {
    vec![0u8; CHUNK_SIZE]
        .into_boxed_slice()
        .try_into()
        .expect("CHUNK_SIZE bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_last_returned_and_bounds_the_cache() {
        let mut p = ChunkPool::new(1);
        let mut a = p.take();
        a[0] = 7;
        let b = p.take();
        assert_eq!(p.in_use(), 2);
        p.give(a);
        p.give(b);
        assert_eq!((p.in_use(), p.cached()), (0, 1));
        // The kept one is the first returned (the second found the cache full).
        assert_eq!(p.take()[0], 7);
    }

    #[test]
    fn keeps_small_empty_lists_whatever_the_chunks_bound() {
        let mut p = ChunkPool::new(2);
        assert_eq!(p.take_list().capacity(), 0, "nothing kept yet");
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
}
