//! Zero-copy receive: payload left in the frames it arrived in.
//!
//! A caller that receives into frames of its own (AF_XDP UMEM) can lend the
//! stack the frame of a segment ([`Stack::handle_tcp_frame`](crate::Stack::handle_tcp_frame)).
//! When the segment's payload is in-order data of a connection that holds
//! no out-of-order bytes, the stack keeps a reference to the payload (frame
//! id, offset, length) instead of copying it, and the caller must leave the
//! frame alone until the stack releases it
//! ([`Stack::poll_released_frame`](crate::Stack::poll_released_frame)):
//! once the application has consumed its last byte, or the connection has
//! gone. The stack never reads a lent frame itself: reads that need the
//! bytes take the caller's [`FrameStore`].
//!
//! A connection's readable bytes are then a list of pieces in stream order
//! ([`PieceList`]): kept payloads, and runs of the bytes queued in its
//! chunks (what was copied: out-of-order data once its hole filled, short
//! payloads, payloads that came without a frame). A connection that never
//! kept a frame has an empty list, and its chunks hold everything. Each
//! piece is an entry of one per-stack slab ([`LentFrames`]); a connection
//! holds an 8-byte [`PieceList`].

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
        if start + data.len() > self.payload_len {
            return None;
        }
        let offset = self
            .frame
            .payload_offset
            .checked_add(u32::try_from(start).ok()?)?;
        (offset != CHUNKS).then_some((self.frame.id, offset))
    }
}

const NONE: u32 = u32::MAX;
/// The offset that marks a piece of chunked bytes (no frame offset is this
/// large: [`Lend::locate`] refuses it).
const CHUNKS: u32 = u32::MAX;

/// One piece of a connection's readable bytes: a kept payload (or what is
/// left of it to read), or a run of `len` bytes queued in the chunks.
#[derive(Debug, Clone, Copy)]
struct Piece {
    frame: u32,
    /// The payload's offset in the frame; [`CHUNKS`] for chunked bytes.
    offset: u32,
    len: u32,
    /// The next piece of the connection, or of the free list.
    next: u32,
}

impl Piece {
    /// What the piece is, as its receive queue reads it.
    #[inline]
    fn front(&self) -> Front {
        if self.offset == CHUNKS {
            Front::Chunks { len: self.len }
        } else {
            Front::Frame {
                frame: self.frame,
                offset: self.offset,
                len: self.len,
            }
        }
    }
}

/// The head of a connection's piece list, read by its receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Front {
    /// `len` bytes at `offset` of `frame`.
    Frame { frame: u32, offset: u32, len: u32 },
    /// The next `len` bytes queued in the chunks.
    Chunks { len: u32 },
}

/// A connection's pieces, oldest first, in the stack's slab: a circular
/// list named by its newest piece, whose `next` is the oldest (8 bytes in
/// the connection). Empty when the connection holds no kept payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PieceList {
    tail: u32,
    /// Bytes in the list's frames (its chunked runs not included).
    frame_bytes: u32,
}

impl Default for PieceList {
    fn default() -> Self {
        PieceList {
            tail: NONE,
            frame_bytes: 0,
        }
    }
}

impl PieceList {
    /// Readable bytes in the list's frames.
    #[inline]
    pub(crate) fn frame_bytes(&self) -> usize {
        self.frame_bytes as usize
    }

    /// Whether the list is empty (every readable byte is in the chunks).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.tail == NONE
    }
}

/// The stack's pieces (a slab with a free list), the frames released
/// back to the caller, and the frame lent with the segment being processed.
#[derive(Debug, Default)]
pub(crate) struct LentFrames {
    /// The frame lent with the segment being processed
    /// ([`Stack::handle_tcp_frame`](crate::Stack::handle_tcp_frame)); a
    /// receive queue that keeps it takes it.
    pub(crate) pending: Option<Lend>,
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

    /// Appends a kept payload: `len` bytes at `offset` of `frame`.
    #[inline]
    pub(crate) fn push_frame(&mut self, list: &mut PieceList, frame: u32, offset: u32, len: u32) {
        self.push(list, frame, offset, len);
        list.frame_bytes += len;
        self.held += 1;
    }

    /// Appends `len` bytes just queued in the chunks (to the last piece if
    /// that is chunked too).
    pub(crate) fn push_chunks(&mut self, list: &mut PieceList, len: u32) {
        if len == 0 {
            return;
        }
        if !list.is_empty() {
            let tail = &mut self.pieces[list.tail as usize];
            if tail.offset == CHUNKS {
                tail.len += len;
                return;
            }
        }
        self.push(list, 0, CHUNKS, len);
    }

    #[inline]
    fn push(&mut self, list: &mut PieceList, frame: u32, offset: u32, len: u32) {
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
    }

    /// `list`'s oldest piece (the list is not empty).
    #[inline]
    fn head(&self, list: &PieceList) -> u32 {
        self.pieces[list.tail as usize].next
    }

    /// The first piece of `list` (not empty).
    #[inline]
    pub(crate) fn front(&self, list: &PieceList) -> Front {
        self.pieces[self.head(list) as usize].front()
    }

    /// Drops `n` bytes (at most the first piece's) from the front of `list`,
    /// releasing a frame whose last byte goes and freeing the entry of a
    /// piece that empties.
    #[inline]
    pub(crate) fn advance(&mut self, list: &mut PieceList, n: u32) {
        let i = self.head(list);
        let p = &mut self.pieces[i as usize];
        debug_assert!(n <= p.len);
        let frame = p.offset != CHUNKS;
        if frame {
            list.frame_bytes -= n;
        }
        if n < p.len {
            p.len -= n;
            if frame {
                p.offset += n;
            }
            return;
        }
        let next = p.next;
        let id = p.frame;
        if i == list.tail {
            list.tail = NONE;
        } else {
            self.pieces[list.tail as usize].next = next;
        }
        self.pieces[i as usize].next = self.free.unwrap_or(NONE);
        self.free = Some(i);
        if frame {
            self.released.push(id);
            self.held -= 1;
        }
    }

    /// Every piece of `list`, oldest first.
    pub(crate) fn iter<'a>(&'a self, list: &PieceList) -> impl Iterator<Item = Front> + 'a {
        let (tail, mut i, mut done) = (list.tail, NONE, list.is_empty());
        if !done {
            i = self.head(list);
        }
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let p = self.pieces[i as usize];
            done = i == tail;
            i = p.next;
            Some(p.front())
        })
    }

    /// Releases every frame of `list` and frees its pieces (its connection
    /// goes away).
    pub(crate) fn release(&mut self, list: &mut PieceList) {
        while !list.is_empty() {
            let len = match self.front(list) {
                Front::Frame { len, .. } | Front::Chunks { len } => len,
            };
            self.advance(list, len);
        }
    }

    /// Checks the slab against the lists handed in (`check_layout`): every
    /// piece is on exactly one list or the free list, each list's frame
    /// bytes are the sum of its frame pieces, no piece is empty, and the
    /// chunked runs add up to what each list's chunks queue (the second
    /// item of each pair).
    #[cfg(test)]
    pub(crate) fn check<'a>(
        &self,
        lists: impl Iterator<Item = (&'a PieceList, usize)>,
    ) -> Result<(), String> {
        let mut seen = vec![false; self.pieces.len()];
        let mut held = 0;
        for (list, chunked) in lists {
            let (mut frame_bytes, mut chunk_bytes) = (0u32, 0usize);
            if !list.is_empty() {
                let mut i = self.head(list);
                loop {
                    if std::mem::replace(&mut seen[i as usize], true) {
                        return Err(format!("piece {i} on two lists"));
                    }
                    let p = self.pieces[i as usize];
                    if p.len == 0 {
                        return Err(format!("piece {i} is empty"));
                    }
                    if p.offset == CHUNKS {
                        chunk_bytes += p.len as usize;
                    } else {
                        frame_bytes += p.len;
                        held += 1;
                    }
                    if i == list.tail {
                        break;
                    }
                    i = p.next;
                }
                if chunk_bytes != chunked {
                    return Err(format!(
                        "chunked runs of {chunk_bytes} bytes, chunks queue {chunked}"
                    ));
                }
            }
            if list.frame_bytes != frame_bytes {
                return Err(format!(
                    "a list counts {} frame bytes, its pieces {frame_bytes}",
                    list.frame_bytes
                ));
            }
        }
        let mut i = self.free.unwrap_or(NONE);
        while i != NONE {
            if std::mem::replace(&mut seen[i as usize], true) {
                return Err(format!("free piece {i} is on a list"));
            }
            i = self.pieces[i as usize].next;
        }
        if !seen.iter().all(|s| *s) {
            return Err("a piece is on no list".into());
        }
        if held != self.held {
            return Err(format!("{held} frames on lists, {} held", self.held));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_keep_stream_order_and_release_their_frames_once_consumed() {
        let mut lent = LentFrames::default();
        let mut list = PieceList::default();
        lent.push_chunks(&mut list, 5);
        lent.push_frame(&mut list, 0, 4, 6);
        lent.push_chunks(&mut list, 3);
        lent.push_chunks(&mut list, 2);
        lent.push_frame(&mut list, 1, 4, 4);
        assert_eq!(list.frame_bytes(), 10);
        let all: Vec<Front> = lent.iter(&list).collect();
        assert_eq!(
            all,
            [
                Front::Chunks { len: 5 },
                Front::Frame {
                    frame: 0,
                    offset: 4,
                    len: 6
                },
                Front::Chunks { len: 5 },
                Front::Frame {
                    frame: 1,
                    offset: 4,
                    len: 4
                },
            ]
        );
        lent.check([(&list, 10)].into_iter()).unwrap();
        lent.advance(&mut list, 5);
        lent.advance(&mut list, 4);
        assert_eq!(
            lent.front(&list),
            Front::Frame {
                frame: 0,
                offset: 8,
                len: 2
            }
        );
        assert_eq!(lent.poll_released(), None);
        lent.advance(&mut list, 2);
        assert_eq!(lent.poll_released(), Some(0));
        assert_eq!(lent.front(&list), Front::Chunks { len: 5 });
        lent.check([(&list, 5)].into_iter()).unwrap();
        lent.release(&mut list);
        assert_eq!(lent.poll_released(), Some(1));
        assert!(list.is_empty());
        assert_eq!(lent.held(), 0);
        // The freed entries are reused.
        lent.push_frame(&mut list, 1, 0, 3);
        lent.check([(&list, 0)].into_iter()).unwrap();
        assert_eq!(lent.pieces.len(), 4);
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
