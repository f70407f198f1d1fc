//! Out-of-order reassembly bookkeeping (RFC 9293 §3.10.7.4, "seventh,
//! process the segment text": segments beyond RCV.NXT may be held).
//!
//! The data itself lives in the receive ring's unallocated space; the
//! assembler only remembers which byte ranges past `RCV.NXT` are filled. The
//! number of disjoint ranges is bounded (a segment that would need one more
//! range is dropped; the peer retransmits it), and the ranges live in a heap
//! allocation that exists only while out-of-order data is held, so an
//! in-order connection pays one pointer-sized field for it.
//!
//! A large flight that loses many segments at once (a slow-start overshoot
//! into a drop-tail queue loses every other segment of a window) leaves as
//! many holes; each one the receiver cannot keep costs the sender another
//! round trip, so the bound is generous (a 1 Gbit/s, 10 ms path with a
//! 10 ms queue loses about 1,250 segments to one overshoot). Ranges are kept
//! sorted and stored as positions in a free-running 32-bit byte counter
//! (`base` is RCV.NXT's position), so that advancing RCV.NXT never rewrites
//! the ranges: an insertion is a binary search plus at most one `memmove`
//! of the ranges after it (8 bytes each), and the common cases (extending
//! the highest range, filling the lowest hole) touch one or two entries
//! besides that move.

/// Maximum number of disjoint out-of-order ranges kept per connection.
pub(crate) const MAX_RANGES: usize = 1024;

/// Bytes of receive buffer per range a connection may hold (at least
/// [`MIN_RANGES`], at most [`MAX_RANGES`]): a sender of full segments
/// leaves a hole per two segments at worst, some 2,900 bytes a range, so
/// this bounds only a peer that sends slivers to pin range memory (8 bytes
/// a range, not counted with the buffer's) out of proportion to its window.
pub(crate) const BYTES_PER_RANGE: usize = 64;

/// Ranges every connection may hold, however small its buffer.
pub(crate) const MIN_RANGES: usize = 16;

/// The ranges a connection with a receive buffer of `capacity` bytes may
/// hold.
#[inline]
pub(crate) fn max_ranges(capacity: usize) -> usize {
    (capacity / BYTES_PER_RANGE).clamp(MIN_RANGES, MAX_RANGES)
}

/// The set of filled ranges, relative to `RCV.NXT`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Assembler {
    /// Sorted, disjoint, non-adjacent half-open ranges as positions
    /// (relative offset + `base`, wrapping); all start after `base`.
    ranges: Vec<(u32, u32)>,
    /// Position of offset 0 (RCV.NXT).
    base: u32,
}

/// The segment would need more ranges than the connection may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyRanges;

impl Assembler {
    /// An empty assembler.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether no out-of-order data is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Where the highest held range ends, relative to `RCV.NXT` (0 when
    /// nothing is held).
    pub(crate) fn held_end(&self) -> u32 {
        self.ranges
            .last()
            .map_or(0, |&(_, e)| e.wrapping_sub(self.base))
    }

    /// Number of held ranges.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The held ranges `(start, end)` relative to `RCV.NXT`, lowest first.
    pub(crate) fn ranges(
        &self,
    ) -> impl DoubleEndedIterator<Item = (u32, u32)> + ExactSizeIterator + '_ {
        let b = self.base;
        self.ranges
            .iter()
            .map(move |&(s, e)| (s.wrapping_sub(b), e.wrapping_sub(b)))
    }

    /// The first part of `[offset, offset + len)` already held (relative
    /// to `RCV.NXT`), if any: what a duplicate segment brought again.
    pub(crate) fn held_part(&self, offset: u32, len: u32) -> Option<(u32, u32)> {
        let end = offset.saturating_add(len);
        let b = self.base;
        let rel = |p: u32| p.wrapping_sub(b);
        let i = self.ranges.partition_point(|&(_, e)| rel(e) <= offset);
        let &(s, e) = self.ranges.get(i)?;
        let (s, e) = (rel(s).max(offset), rel(e).min(end));
        (s < e).then_some((s, e))
    }

    /// The held range (relative to `RCV.NXT`) that contains `offset`.
    pub(crate) fn range_with(&self, offset: u32) -> Option<(u32, u32)> {
        let b = self.base;
        let rel = |p: u32| p.wrapping_sub(b);
        let i = self.ranges.partition_point(|&(_, e)| rel(e) <= offset);
        let &(s, e) = self.ranges.get(i)?;
        (rel(s) <= offset).then(|| (rel(s), rel(e)))
    }

    /// Records `[offset, offset + len)` as filled, holding at most
    /// [`max_ranges`]`(capacity)` ranges, `capacity` being the receive
    /// buffer's. Returns how many bytes are now contiguous from offset 0;
    /// those are removed (the caller advances `RCV.NXT` by that much).
    /// Offsets must stay below 2^31.
    pub(crate) fn add(
        &mut self,
        offset: u32,
        len: u32,
        capacity: usize,
    ) -> Result<u32, TooManyRanges> {
        if len == 0 {
            return Ok(0);
        }
        let end = offset.saturating_add(len);
        if self.ranges.is_empty() {
            if offset == 0 {
                self.base = self.base.wrapping_add(end);
                return Ok(end);
            }
            self.ranges.reserve_exact(8);
            self.ranges
                .push((self.base.wrapping_add(offset), self.base.wrapping_add(end)));
            return Ok(0);
        }
        let b = self.base;
        let rel = |p: u32| p.wrapping_sub(b);
        // First range that ends at or after the new start (it may merge),
        // and first range that starts after the new end (it may not).
        let lo = self.ranges.partition_point(|&(_, e)| rel(e) < offset);
        let hi = self.ranges.partition_point(|&(s, _)| rel(s) <= end);
        let (mut s, mut e) = (offset, end);
        if lo < hi {
            s = s.min(rel(self.ranges[lo].0));
            e = e.max(rel(self.ranges[hi - 1].1));
        }
        if s == 0 {
            // Contiguous from RCV.NXT: [0, e) leaves; ranges lo..hi merged
            // into it, and lo == 0 since nothing lies below offset 0.
            self.ranges.drain(..hi);
            self.base = b.wrapping_add(e);
            if self.ranges.is_empty() {
                self.ranges = Vec::new();
            }
            return Ok(e);
        }
        let new = (b.wrapping_add(s), b.wrapping_add(e));
        if lo == hi {
            if self.ranges.len() >= max_ranges(capacity) {
                return Err(TooManyRanges);
            }
            self.ranges.insert(lo, new);
        } else {
            self.ranges[lo] = new;
            self.ranges.drain(lo + 1..hi);
        }
        Ok(0)
    }

    /// Forgets all held ranges.
    pub(crate) fn clear(&mut self) {
        self.ranges = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_passes_through() {
        let mut a = Assembler::new();
        assert_eq!(a.add(0, 10, usize::MAX), Ok(10));
        assert!(a.is_empty());
    }

    #[test]
    fn fills_holes() {
        let mut a = Assembler::new();
        assert_eq!(a.add(10, 5, usize::MAX), Ok(0));
        assert_eq!(a.add(20, 5, usize::MAX), Ok(0));
        assert!(a.ranges().eq([(10, 15), (20, 25)]));
        assert_eq!(a.add(15, 5, usize::MAX), Ok(0));
        assert!(a.ranges().eq([(10, 25)]));
        assert_eq!(a.add(0, 12, usize::MAX), Ok(25));
        assert!(a.is_empty());
    }

    #[test]
    fn bounded() {
        let mut a = Assembler::new();
        for i in 0..MAX_RANGES as u32 {
            assert_eq!(a.add(10 + 10 * i, 1, usize::MAX), Ok(0));
        }
        let before = a.clone();
        assert_eq!(
            a.add(10 + 10 * MAX_RANGES as u32, 1, usize::MAX),
            Err(TooManyRanges)
        );
        assert_eq!(a, before);
        // Merging into an existing range is fine, and so is filling the
        // front even though that momentarily makes MAX_RANGES + 1 ranges.
        assert_eq!(a.add(11, 2, usize::MAX), Ok(0));
        assert_eq!(a.add(0, 10, usize::MAX), Ok(13));
        assert_eq!(a.ranges().len(), MAX_RANGES - 1);
        assert_eq!(a.ranges().next(), Some((7, 8)));
    }

    #[test]
    fn positions_wrap() {
        let mut a = Assembler::new();
        // Move the base close to the end of the 32-bit position space.
        assert_eq!(a.add(0, u32::MAX - 5, usize::MAX), Ok(u32::MAX - 5));
        assert_eq!(a.add(10, 5, usize::MAX), Ok(0));
        assert_eq!(a.add(20, 5, usize::MAX), Ok(0));
        assert!(a.ranges().eq([(10, 15), (20, 25)]));
        assert_eq!(a.add(12, 10, usize::MAX), Ok(0));
        assert!(a.ranges().eq([(10, 25)]));
        assert_eq!(a.add(0, 10, usize::MAX), Ok(25));
        assert!(a.is_empty());
    }

    /// Many holes at once (a slow-start overshoot that lost every other
    /// segment): up to `MAX_RANGES` are kept, filled in any order.
    #[test]
    fn many_holes() {
        let mut a = Assembler::new();
        for i in 0..MAX_RANGES as u32 {
            assert_eq!(a.add(2000 * i + 1000, 1000, usize::MAX), Ok(0));
        }
        assert_eq!(a.len(), MAX_RANGES);
        for i in (1..MAX_RANGES as u32).rev() {
            assert_eq!(a.add(2000 * i, 1000, usize::MAX), Ok(0));
        }
        assert_eq!(a.len(), 1);
        assert_eq!(a.add(0, 1000, usize::MAX), Ok(2000 * MAX_RANGES as u32));
        assert!(a.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn matches_bitmap_model_wide(segs in proptest::collection::vec((0u32..3000, 1u32..4), 0..800)) {
            let mut a = Assembler::new();
            let mut model = vec![false; 8192];
            let mut delivered = 0u32;
            for (off, len) in segs {
                let abs = delivered + off;
                if abs + len > 8192 {
                    continue;
                }
                if let Ok(front) = a.add(off, len, usize::MAX) {
                    for b in abs..abs + len {
                        model[b as usize] = true;
                    }
                    let mut expect = 0;
                    while model[(delivered + expect) as usize] {
                        expect += 1;
                    }
                    proptest::prop_assert_eq!(front, expect);
                    delivered += front;
                } else {
                    proptest::prop_assert_eq!(a.len(), MAX_RANGES);
                }
                // The ranges are exactly the filled runs past `delivered`.
                let mut runs = Vec::new();
                let mut i = delivered as usize;
                while i < model.len() {
                    if model[i] {
                        let s = i;
                        while i < model.len() && model[i] {
                            i += 1;
                        }
                        runs.push(((s as u32) - delivered, (i as u32) - delivered));
                    } else {
                        i += 1;
                    }
                }
                proptest::prop_assert_eq!(a.ranges().collect::<Vec<_>>(), runs);
            }
        }

        #[test]
        fn matches_bitmap_model(segs in proptest::collection::vec((0u32..64, 1u32..16), 0..40)) {
            let mut a = Assembler::new();
            // Big enough for every reach: delivered (at most 40 * 15) + 64 + 16.
            let mut model = [false; 2048];
            let mut delivered = 0u32;
            for (off, len) in segs {
                // Offsets are relative to what has been delivered so far.
                let abs = delivered + off;
                if let Ok(front) = a.add(off, len, usize::MAX) {
                    for b in abs..abs + len {
                        if (b as usize) < model.len() {
                            model[b as usize] = true;
                        }
                    }
                    let mut expect = 0;
                    while (delivered + expect) < 2048 && model[(delivered + expect) as usize] {
                        expect += 1;
                    }
                    if delivered + off + len <= 2048 {
                        proptest::prop_assert_eq!(front, expect);
                    }
                    delivered += front;
                }
                proptest::prop_assert!(a.ranges().len() <= MAX_RANGES);
                let v: Vec<_> = a.ranges().collect();
                for w in v.windows(2) {
                    proptest::prop_assert!(w[0].1 < w[1].0);
                }
                for r in a.ranges() {
                    proptest::prop_assert!(r.0 > 0 && r.0 < r.1);
                }
            }
        }
    }

    #[test]
    fn a_small_buffer_holds_fewer_ranges() {
        assert_eq!(max_ranges(4096), 64);
        assert_eq!(max_ranges(0), MIN_RANGES);
        assert_eq!(max_ranges(usize::MAX), MAX_RANGES);
        let mut a = Assembler::new();
        for i in 0..64u32 {
            assert_eq!(a.add(2 + 2 * i, 1, 4096), Ok(0));
        }
        assert_eq!(a.add(1000, 1, 4096), Err(TooManyRanges));
        // Growing a range held already needs none more.
        assert_eq!(a.add(3, 1, 4096), Ok(0));
        assert_eq!(a.len(), 63);
    }

    /// What a duplicate brings again, and which range holds an offset,
    /// relative to RCV.NXT after the base moved (a range handed on).
    #[test]
    fn held_parts_and_the_range_holding_an_offset() {
        let mut a = Assembler::new();
        assert_eq!(a.held_part(0, 100), None);
        assert_eq!(a.range_with(5), None);
        assert_eq!(a.add(0, 5, usize::MAX), Ok(5)); // the base moves by 5
        assert_eq!(a.add(10, 10, usize::MAX), Ok(0)); // [10, 20)
        assert_eq!(a.add(30, 5, usize::MAX), Ok(0)); // [30, 35)
        assert_eq!(a.held_part(0, 10), None);
        assert_eq!(a.held_part(0, 12), Some((10, 12)));
        assert_eq!(a.held_part(15, 100), Some((15, 20)), "the first part only");
        assert_eq!(a.held_part(20, 10), None);
        assert_eq!(a.held_part(32, 1), Some((32, 33)));
        assert_eq!(a.range_with(9), None);
        assert_eq!(a.range_with(10), Some((10, 20)));
        assert_eq!(a.range_with(19), Some((10, 20)));
        assert_eq!(a.range_with(20), None);
        assert_eq!(a.range_with(34), Some((30, 35)));
        assert_eq!(a.range_with(35), None);
    }
}
