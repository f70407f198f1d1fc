//! Out-of-order reassembly bookkeeping (RFC 9293 §3.10.7.4, "seventh,
//! process the segment text": segments beyond RCV.NXT may be held).
//!
//! The data itself lives in the receive ring's unallocated space; the
//! assembler only remembers which byte ranges past `RCV.NXT` are filled. The
//! number of disjoint ranges is bounded so per-connection state stays small
//! and fixed-size; a segment that would need one more range is dropped (the
//! peer retransmits it).

/// Maximum number of disjoint out-of-order ranges kept per connection.
pub const MAX_RANGES: usize = 4;

/// The set of filled ranges, as offsets relative to `RCV.NXT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Assembler {
    /// Sorted, disjoint, non-adjacent half-open ranges, all starting > 0.
    ranges: [(u32, u32); MAX_RANGES],
    count: u8,
}

/// The segment would need more than [`MAX_RANGES`] ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyRanges;

impl Assembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no out-of-order data is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The held ranges `(start, end)` relative to `RCV.NXT`.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges[..self.count as usize]
    }

    /// Records `[offset, offset + len)` as filled. Returns how many bytes
    /// are now contiguous from offset 0; those are removed and the remaining
    /// ranges are shifted down (the caller advances `RCV.NXT` by that much).
    pub fn add(&mut self, offset: u32, len: u32) -> Result<u32, TooManyRanges> {
        if len == 0 {
            return Ok(0);
        }
        let new = (offset, offset.saturating_add(len));
        let mut tmp = [(0u32, 0u32); MAX_RANGES + 1];
        let mut n = 0;
        let mut placed = false;
        for &r in self.ranges() {
            if !placed && new.0 <= r.0 {
                tmp[n] = new;
                n += 1;
                placed = true;
            }
            tmp[n] = r;
            n += 1;
        }
        if !placed {
            tmp[n] = new;
            n += 1;
        }
        // Merge overlapping or adjacent ranges.
        let mut m = 0;
        for i in 1..n {
            if tmp[i].0 <= tmp[m].1 {
                tmp[m].1 = tmp[m].1.max(tmp[i].1);
            } else {
                m += 1;
                tmp[m] = tmp[i];
            }
        }
        let merged = m + 1;
        let front = if tmp[0].0 == 0 { tmp[0].1 } else { 0 };
        let skip = usize::from(front > 0);
        if merged - skip > MAX_RANGES {
            return Err(TooManyRanges);
        }
        self.count = (merged - skip) as u8;
        for (dst, src) in self.ranges.iter_mut().zip(&tmp[skip..merged]) {
            *dst = (src.0 - front, src.1 - front);
        }
        Ok(front)
    }

    /// Forgets all held ranges.
    pub fn clear(&mut self) {
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_passes_through() {
        let mut a = Assembler::new();
        assert_eq!(a.add(0, 10), Ok(10));
        assert!(a.is_empty());
    }

    #[test]
    fn fills_holes() {
        let mut a = Assembler::new();
        assert_eq!(a.add(10, 5), Ok(0));
        assert_eq!(a.add(20, 5), Ok(0));
        assert_eq!(a.ranges(), &[(10, 15), (20, 25)]);
        assert_eq!(a.add(15, 5), Ok(0));
        assert_eq!(a.ranges(), &[(10, 25)]);
        assert_eq!(a.add(0, 12), Ok(25));
        assert!(a.is_empty());
    }

    #[test]
    fn bounded() {
        let mut a = Assembler::new();
        for i in 0..MAX_RANGES as u32 {
            assert_eq!(a.add(10 + 10 * i, 1), Ok(0));
        }
        let before = a;
        assert_eq!(a.add(100, 1), Err(TooManyRanges));
        assert_eq!(a, before);
        // Merging into an existing range is fine, and so is filling the
        // front even though that momentarily makes MAX_RANGES + 1 ranges.
        assert_eq!(a.add(11, 2), Ok(0));
        assert_eq!(a.add(0, 10), Ok(13));
        assert_eq!(a.ranges().len(), MAX_RANGES - 1);
        assert_eq!(a.ranges()[0], (7, 8));
    }

    proptest::proptest! {
        #[test]
        fn matches_bitmap_model(segs in proptest::collection::vec((0u32..64, 1u32..16), 0..40)) {
            let mut a = Assembler::new();
            // Big enough for every reach: delivered (at most 40 * 15) + 64 + 16.
            let mut model = [false; 2048];
            let mut delivered = 0u32;
            for (off, len) in segs {
                // Offsets are relative to what has been delivered so far.
                let abs = delivered + off;
                if let Ok(front) = a.add(off, len) {
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
                for w in a.ranges().windows(2) {
                    proptest::prop_assert!(w[0].1 < w[1].0);
                }
                for r in a.ranges() {
                    proptest::prop_assert!(r.0 > 0 && r.0 < r.1);
                }
            }
        }
    }
}
