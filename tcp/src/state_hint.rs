//! Where a segment's connection keeps the state its processing reads
//! first: [`crate::Stack::expect`] names it, so that a caller may
//! prefetch it one segment ahead (issue 12, item 5: with thousands of
//! connections each segment finds its connection's lines cold, and the
//! misses of the next one overlap the work on this one).

/// A range of a stack's memory that processing a segment will read: the
/// hot part of its connection's slot (the slot's own fields and the
/// connection's up to its congestion state, `layout.rs`). Addresses only:
/// nothing can be read or written through it, and it is stale once the
/// stack changes.
#[derive(Debug, Clone, Copy)]
pub struct StateHint {
    start: *const u8,
    len: usize,
    slot: u32,
}

/// Where a lookup of a segment's connection starts reading: the cache
/// line of the connection table's entries at the tuple's home position
/// ([`crate::Stack::lookup_hint`]). A caller prefetches it a segment
/// before it asks [`crate::Stack::expect`] (whose probe then reads a line
/// already on its way), two before the segment itself. An address only,
/// stale once the stack changes.
#[derive(Debug, Clone, Copy)]
pub struct LookupHint {
    line: *const u8,
}

impl LookupHint {
    pub(crate) fn new(line: *const u8) -> LookupHint {
        LookupHint { line }
    }

    /// An address in the line to prefetch.
    #[inline]
    pub fn line(self) -> *const u8 {
        self.line
    }
}

/// Bytes of a cache line on every CPU the data path runs on.
const LINE: usize = 64;

impl StateHint {
    pub(crate) fn new(start: *const u8, len: usize, slot: u32) -> StateHint {
        StateHint { start, len, slot }
    }

    /// The slot it names, as [`crate::ConnHandle::index`] numbers them: for
    /// a caller that keeps per-connection state of its own by slot (an
    /// `app::ConnMap`) and prefetches that too.
    #[inline]
    pub fn slot(self) -> u32 {
        self.slot
    }

    /// The address of each cache line the range touches, first to last.
    #[inline]
    pub fn lines(self) -> impl Iterator<Item = *const u8> {
        let skew = self.start as usize % LINE;
        let first = self.start.wrapping_sub(skew);
        (0..(skew + self.len).div_ceil(LINE)).map(move |i| first.wrapping_add(i * LINE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cover_the_range_once_each() {
        let buf = [0u8; 512];
        let base = buf.as_ptr();
        for start in [0, 1, 63, 64, 100] {
            for len in [1, 63, 64, 65, 300] {
                let lines: Vec<usize> = StateHint::new(base.wrapping_add(start), len, 0)
                    .lines()
                    .map(|p| p as usize)
                    .collect();
                let (a, b) = (base as usize + start, base as usize + start + len);
                assert_eq!(lines[0], a - a % LINE, "{start}+{len}");
                assert!(lines.windows(2).all(|w| w[1] - w[0] == LINE));
                let last = *lines.last().unwrap();
                assert!(last < b && last + LINE >= b, "{start}+{len}");
            }
        }
    }
}
