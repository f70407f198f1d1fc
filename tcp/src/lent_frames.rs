//! Zero-copy receive: payload left in the frames it arrived in.
//!
//! A caller that receives into frames of its own (AF_XDP UMEM) can lend the
//! stack the frame of a segment ([`Stack::handle_tcp_frame`](crate::Stack::handle_tcp_frame)).
//! When the segment's payload is the next in-order data of a connection
//! whose receive queue holds nothing in chunks, the stack keeps a reference
//! to the payload (frame id, offset, length) instead of copying it, and the
//! caller must leave the frame alone until the stack releases it
//! ([`Stack::poll_released_frame`](crate::Stack::poll_released_frame)):
//! once the application has consumed its last byte, or the connection has
//! gone. The stack never reads a lent frame itself: reads that need the
//! bytes take the caller's [`FrameStore`].
//!
//! A connection's readable bytes are its lent pieces first, then its
//! chunks: a frame is kept only while the chunks hold nothing (no queued
//! and no out-of-order bytes), so arrival order and read order agree.
//! Each piece is an entry of one per-stack slab ([`LentFrames`]); a
//! connection holds an 8-byte [`FrameList`].

/// Where the caller keeps the frames it lent the stack: the stack resolves
/// a kept piece through it when the application reads, or when a
/// connection is exported.
pub trait FrameStore {
    /// The bytes of frame `id`, as they were when the frame was lent (the
    /// stack reads the payload at the offset it was given with the frame).
    /// Called only for frames the stack holds.
    fn frame(&self, id: u32) -> &[u8];
}

/// The [`FrameStore`] of a caller that lends no frames.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFrames;

impl FrameStore for NoFrames {
    /// Empty: a stack that holds lent frames must be read through the
    /// caller's store (the `_in` calls); debug builds panic here.
    fn frame(&self, id: u32) -> &[u8] {
        debug_assert!(false, "frame {id} read without the caller's FrameStore");
        &[]
    }
}

/// A frame lent with a segment ([`Stack::handle_tcp_frame`](crate::Stack::handle_tcp_frame)):
/// the caller's id for it and where the segment's payload starts in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef {
    /// The caller's id of the frame, handed back by
    /// [`Stack::poll_released_frame`](crate::Stack::poll_released_frame).
    pub id: u32,
    /// The offset of the payload's first byte in the frame.
    pub payload_offset: u32,
}

/// The frame lent with the segment being processed, and where its payload
/// lies in memory (an address only compared, never read: it locates the
/// part of the payload that reaches the receive queue).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lend {
    pub frame: FrameRef,
    pub payload_addr: usize,
    pub payload_len: usize,
}

impl Lend {
    /// The frame and offset of `data`, a part of the lent payload (None if
    /// it is not one).
    pub(crate) fn locate(&self, data: &[u8]) -> Option<(u32, u32)> {
        let start = (data.as_ptr() as usize).checked_sub(self.payload_addr)?;
        (start + data.len() <= self.payload_len).then(|| {
            (
                self.frame.id,
                self.frame.payload_offset + u32::try_from(start).unwrap_or(u32::MAX),
            )
        })
    }
}

const NONE: u32 = u32::MAX;

/// One kept payload (or what is left of it to read).
#[derive(Debug, Clone, Copy)]
struct Piece {
    frame: u32,
    offset: u32,
    len: u32,
    /// The next piece of the connection, or of the free list.
    next: u32,
}

/// A connection's kept pieces, oldest first, in the stack's slab: a
/// circular list named by its newest piece, whose `next` is the oldest
/// (8 bytes in the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameList {
    tail: u32,
    bytes: u32,
}

impl Default for FrameList {
    fn default() -> Self {
        FrameList {
            tail: NONE,
            bytes: 0,
        }
    }
}

impl FrameList {
    /// Readable bytes in the list's frames.
    #[inline]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes as usize
    }

    /// Whether the list holds no frame.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.tail == NONE
    }
}

/// The stack's kept pieces (a slab with a free list) and the frames
/// released back to the caller.
#[derive(Debug, Default)]
pub(crate) struct LentFrames {
    pieces: Vec<Piece>,
    free: Option<u32>,
    released: Vec<u32>,
    held: usize,
}

impl LentFrames {
    /// Frames held now.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// The next frame given back to the caller.
    pub(crate) fn poll_released(&mut self) -> Option<u32> {
        self.released.pop()
    }

    /// Appends `len` bytes at `offset` of `frame` to `list`.
    pub(crate) fn push(&mut self, list: &mut FrameList, frame: u32, offset: u32, len: u32) {
        let piece = Piece {
            frame,
            offset,
            len,
            next: NONE,
        };
        let at = match self.free {
            Some(i) => {
                let next = self.pieces[i as usize].next;
                self.free = (next != NONE).then_some(next);
                self.pieces[i as usize] = piece;
                i
            }
            None => {
                self.pieces.push(piece);
                (self.pieces.len() - 1) as u32
            }
        };
        if list.tail == NONE {
            self.pieces[at as usize].next = at;
        } else {
            let tail = &mut self.pieces[list.tail as usize];
            self.pieces[at as usize].next = std::mem::replace(&mut tail.next, at);
        }
        list.tail = at;
        list.bytes += len;
        self.held += 1;
    }

    /// Unlinks `list`'s first piece, releases its frame and frees the entry.
    fn pop(&mut self, list: &mut FrameList) {
        let i = self.head(list);
        let p = self.pieces[i as usize];
        if i == list.tail {
            list.tail = NONE;
        } else {
            self.pieces[list.tail as usize].next = p.next;
        }
        list.bytes -= p.len;
        self.pieces[i as usize].next = self.free.unwrap_or(NONE);
        self.free = Some(i);
        self.released.push(p.frame);
        self.held -= 1;
    }

    /// `list`'s oldest piece (the list is not empty).
    #[inline]
    fn head(&self, list: &FrameList) -> u32 {
        self.pieces[list.tail as usize].next
    }

    /// The bytes of `list`'s first piece, resolved through `store` (empty
    /// if the list is, or the store does not hold the frame).
    #[inline]
    pub(crate) fn front<'a>(&self, list: &FrameList, store: &'a dyn FrameStore) -> &'a [u8] {
        if list.is_empty() {
            return &[];
        }
        let p = self.pieces[self.head(list) as usize];
        let (s, e) = (p.offset as usize, (p.offset + p.len) as usize);
        store.frame(p.frame).get(s..e).unwrap_or(&[])
    }

    /// Drops up to `n` bytes from the front of `list`, releasing each frame
    /// whose last byte goes; returns the bytes dropped.
    pub(crate) fn consume(&mut self, list: &mut FrameList, n: usize) -> usize {
        let mut left = n.min(list.bytes()) as u32;
        let dropped = left as usize;
        while left > 0 {
            let head = self.head(list);
            let p = &mut self.pieces[head as usize];
            if left < p.len {
                p.offset += left;
                p.len -= left;
                list.bytes -= left;
                break;
            }
            left -= p.len;
            self.pop(list);
        }
        dropped
    }

    /// Copies `list`'s bytes, from the front, into `out` (as many as fit),
    /// resolved through `store`; returns the number copied.
    pub(crate) fn copy_out(
        &self,
        list: &FrameList,
        store: &dyn FrameStore,
        mut out: &mut [u8],
    ) -> usize {
        if list.is_empty() {
            return 0;
        }
        let mut copied = 0;
        let mut i = self.head(list);
        loop {
            let p = self.pieces[i as usize];
            let (s, e) = (p.offset as usize, (p.offset + p.len) as usize);
            let bytes = store.frame(p.frame).get(s..e).unwrap_or(&[]);
            let n = bytes.len().min(out.len());
            let (dst, rest) = out.split_at_mut(n);
            dst.copy_from_slice(&bytes[..n]);
            out = rest;
            copied += n;
            if n < p.len as usize || i == list.tail || out.is_empty() {
                break;
            }
            i = p.next;
        }
        copied
    }

    /// Releases every frame of `list` (its connection goes away).
    pub(crate) fn release(&mut self, list: &mut FrameList) {
        while !list.is_empty() {
            self.pop(list);
        }
    }

    /// Checks the slab against the lists handed in (`check_layout`): every
    /// piece is on exactly one list or the free list, and each list's byte
    /// count is the sum of its pieces.
    #[cfg(test)]
    pub(crate) fn check<'a>(&self, lists: impl Iterator<Item = &'a FrameList>) {
        let mut seen = vec![false; self.pieces.len()];
        let mut held = 0;
        for list in lists {
            let mut bytes = 0u32;
            if !list.is_empty() {
                let mut i = self.head(list);
                loop {
                    assert!(!seen[i as usize], "piece {i} on two lists");
                    seen[i as usize] = true;
                    bytes += self.pieces[i as usize].len;
                    held += 1;
                    if i == list.tail {
                        break;
                    }
                    i = self.pieces[i as usize].next;
                }
            }
            assert_eq!(list.bytes, bytes, "a frame list's bytes");
        }
        let mut i = self.free.unwrap_or(NONE);
        while i != NONE {
            assert!(!seen[i as usize], "free piece {i} is on a list");
            seen[i as usize] = true;
            i = self.pieces[i as usize].next;
        }
        assert!(seen.iter().all(|s| *s), "a piece is on no list");
        assert_eq!(held, self.held, "frames held");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Store(Vec<Vec<u8>>);

    impl FrameStore for Store {
        fn frame(&self, id: u32) -> &[u8] {
            &self.0[id as usize]
        }
    }

    #[test]
    fn pieces_read_in_order_and_release_their_frames_once_consumed() {
        let store = Store(vec![b"hdr-abcdef".to_vec(), b"hdr-ghij".to_vec()]);
        let mut lent = LentFrames::default();
        let mut list = FrameList::default();
        lent.push(&mut list, 0, 4, 6);
        lent.push(&mut list, 1, 4, 4);
        assert_eq!(list.bytes(), 10);
        assert_eq!(lent.front(&list, &store), b"abcdef");
        let mut out = [0; 8];
        assert_eq!(lent.copy_out(&list, &store, &mut out), 8);
        assert_eq!(&out, b"abcdefgh");
        assert_eq!(lent.consume(&mut list, 4), 4);
        assert_eq!(lent.front(&list, &store), b"ef");
        assert_eq!(lent.poll_released(), None);
        assert_eq!(lent.consume(&mut list, 3), 3);
        assert_eq!(lent.poll_released(), Some(0));
        assert_eq!(lent.front(&list, &store), b"hij");
        lent.check([&list].into_iter());
        lent.release(&mut list);
        assert_eq!(lent.poll_released(), Some(1));
        assert!(list.is_empty());
        assert_eq!(lent.held(), 0);
        // The freed entries are reused.
        lent.push(&mut list, 1, 0, 3);
        lent.check([&list].into_iter());
        assert_eq!(lent.pieces.len(), 2);
    }

    #[test]
    fn a_piece_is_located_only_inside_the_lent_payload() {
        let payload = [0u8; 100];
        let lend = Lend {
            frame: FrameRef {
                id: 7,
                payload_offset: 54,
            },
            payload_addr: payload.as_ptr() as usize,
            payload_len: payload.len(),
        };
        assert_eq!(lend.locate(&payload[10..60]), Some((7, 64)));
        assert_eq!(lend.locate(&payload[..]), Some((7, 54)));
        let other = [0u8; 10];
        let inside = (other.as_ptr() as usize) >= payload.as_ptr() as usize
            && (other.as_ptr() as usize) < payload.as_ptr() as usize + 100;
        if !inside {
            assert_eq!(lend.locate(&other), None);
        }
    }
}
