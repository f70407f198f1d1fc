//! The sender's SACK scoreboard (RFC 6675 §3 and §4): which bytes above
//! SND.UNA the receiver reported holding (RFC 2018 §3), and the derived
//! quantities of conservative SACK-based loss recovery: `IsLost`, the
//! `pipe` estimate and the candidates of `NextSeg`.
//!
//! The ranges live in a heap allocation that exists only while the receiver
//! reports out-of-order data, i.e. around a loss episode, so a connection
//! that sees no loss pays one pointer-sized field for it. At most
//! [`MAX_SACKED_RANGES`] ranges are kept; a block that would need one more is
//! ignored, which only makes recovery more conservative (RFC 6675 §1: a
//! sender may always under-use SACK information).

use crate::assembler::MAX_RANGES;
use crate::seq::SeqNumber;

/// RFC 6675 §2 `DupThresh`.
pub(crate) const DUP_THRESH: usize = 3;

/// Most SACKed ranges the scoreboard keeps: as many holes as the receiver
/// can hold out-of-order ranges for (see [`MAX_RANGES`]).
pub(crate) const MAX_SACKED_RANGES: usize = MAX_RANGES;

/// SACKed ranges above SND.UNA, sorted, disjoint and non-adjacent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Scoreboard {
    ranges: Vec<(SeqNumber, SeqNumber)>,
}

impl Scoreboard {
    /// An empty scoreboard.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether nothing above SND.UNA is SACKed.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The SACKed ranges, lowest first.
    pub(crate) fn ranges(&self) -> &[(SeqNumber, SeqNumber)] {
        &self.ranges
    }

    /// Forgets everything (RFC 2018 §8 after a retransmission timeout: the
    /// receiver may have reneged).
    pub(crate) fn clear(&mut self) {
        self.ranges = Vec::new();
    }

    /// Records `[l, r)` as SACKed (RFC 6675 §4 `Update()`). Returns whether
    /// it reported anything new.
    pub(crate) fn add(&mut self, l: SeqNumber, r: SeqNumber) -> bool {
        if r <= l {
            return false;
        }
        let lo = self.ranges.partition_point(|&(_, e)| e < l);
        let hi = self.ranges.partition_point(|&(s, _)| s <= r);
        if lo < hi {
            let (s, e) = (self.ranges[lo].0.min(l), self.ranges[hi - 1].1.max(r));
            if hi == lo + 1 && self.ranges[lo] == (s, e) {
                return false;
            }
            self.ranges[lo] = (s, e);
            self.ranges.drain(lo + 1..hi);
            return true;
        }
        if self.ranges.len() >= MAX_SACKED_RANGES {
            return false;
        }
        if self.ranges.capacity() == 0 {
            self.ranges.reserve_exact(8);
        }
        self.ranges.insert(lo, (l, r));
        true
    }

    /// Whether [`Scoreboard::add`] would record `[l, r)`: there is room for
    /// another range, or the block touches one held. A block it would
    /// refuse is not looked at by RACK either (`update_scoreboard`): never
    /// recorded, it would look new on every ACK, and a receiver that fills
    /// the scoreboard and then repeats blocks inside a large hole would
    /// make each ACK walk thousands of send-time records again (the
    /// CPU-exhaustion pattern of CVE-2019-11478).
    #[inline]
    pub(crate) fn takes(&self, l: SeqNumber, r: SeqNumber) -> bool {
        if self.ranges.len() < MAX_SACKED_RANGES {
            return true;
        }
        let lo = self.ranges.partition_point(|&(_, e)| e < l);
        let hi = self.ranges.partition_point(|&(s, _)| s <= r);
        lo < hi
    }

    /// Drops what SND.UNA = `una` now acknowledges cumulatively.
    pub(crate) fn prune(&mut self, una: SeqNumber) {
        let n = self.ranges.partition_point(|&(_, e)| e <= una);
        if n > 0 {
            self.ranges.drain(..n);
        }
        if let Some(first) = self.ranges.first_mut() {
            first.0 = first.0.max(una);
        } else if self.ranges.capacity() > 0 {
            self.ranges = Vec::new();
        }
    }

    /// SACKed bytes within `[a, b)`.
    pub(crate) fn sacked_in(&self, a: SeqNumber, b: SeqNumber) -> usize {
        if b <= a {
            return 0;
        }
        let from = self.ranges.partition_point(|&(_, e)| e <= a);
        let mut n = 0;
        for &(s, e) in &self.ranges[from..] {
            if s >= b {
                break;
            }
            n += e.min(b) - s.max(a);
        }
        n
    }

    /// RFC 6675 §4 `IsLost`, as a boundary: every un-SACKed byte below the
    /// returned sequence number has `DupThresh` discontiguous SACKed ranges
    /// or more than `(DupThresh - 1) * SMSS` SACKed bytes above it and is
    /// deemed lost; none above it is. `una` when nothing is lost.
    pub(crate) fn lost_boundary(&self, una: SeqNumber, smss: usize) -> SeqNumber {
        let mut bytes = 0;
        for (count, &(s, e)) in self.ranges.iter().rev().enumerate() {
            bytes += e - s;
            if count + 1 >= DUP_THRESH || bytes > (DUP_THRESH - 1) * smss {
                return s.max(una);
            }
        }
        una
    }

    /// The first un-SACKed sequence number at or after `from`, and the start
    /// of the SACKed range that follows it (if any).
    pub(crate) fn next_unsacked(&self, from: SeqNumber) -> (SeqNumber, Option<SeqNumber>) {
        let i = self.ranges.partition_point(|&(_, e)| e <= from);
        match self.ranges.get(i) {
            Some(&(s, e)) if s <= from => (e, self.ranges.get(i + 1).map(|r| r.0)),
            Some(&(s, _)) => (from, Some(s)),
            None => (from, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u32) -> SeqNumber {
        SeqNumber(n.wrapping_add(0xffff_ff00))
    }

    #[test]
    fn add_merge_prune() {
        let mut b = Scoreboard::new();
        assert!(b.add(s(10), s(20)));
        assert!(b.add(s(30), s(40)));
        assert!(!b.add(s(12), s(18)));
        assert!(b.add(s(20), s(30)));
        assert_eq!(b.ranges(), &[(s(10), s(40))]);
        assert!(b.add(s(50), s(60)));
        assert_eq!(b.sacked_in(s(0), s(100)), 40);
        assert_eq!(b.sacked_in(s(15), s(55)), 30);
        b.prune(s(15));
        assert_eq!(b.ranges(), &[(s(15), s(40)), (s(50), s(60))]);
        b.prune(s(60));
        assert!(b.is_empty());
    }

    #[test]
    fn is_lost_and_next_unsacked() {
        let mut b = Scoreboard::new();
        // una = 0, SMSS 10: holes [0,10), [20,30), [40,50); SACKed 10-20,
        // 30-40, 50-60.
        for i in 0..3 {
            b.add(s(10 + 20 * i), s(20 + 20 * i));
        }
        // Three ranges above 0: lost; above 20, two ranges and 20 bytes:
        // not lost (20 is not more than 2 * SMSS).
        assert_eq!(b.lost_boundary(s(0), 10), s(10));
        // With a small SMSS the byte rule marks more.
        assert_eq!(b.lost_boundary(s(0), 5), s(30));
        assert_eq!(b.next_unsacked(s(0)), (s(0), Some(s(10))));
        assert_eq!(b.next_unsacked(s(12)), (s(20), Some(s(30))));
        assert_eq!(b.next_unsacked(s(55)), (s(60), None));
        assert_eq!(b.next_unsacked(s(70)), (s(70), None));
    }

    #[test]
    fn bounded() {
        let mut b = Scoreboard::new();
        for i in 0..MAX_SACKED_RANGES as u32 {
            assert!(b.add(s(10 * i + 5), s(10 * i + 6)));
        }
        assert!(!b.add(s(1_000_000), s(1_000_001)));
        assert!(b.add(s(5), s(7)));
        assert_eq!(b.ranges().len(), MAX_SACKED_RANGES);
    }

    /// `takes` says what `add` would record: anything while there is room;
    /// when full, only a block touching a held range (which merges).
    #[test]
    fn takes_what_add_records() {
        let mut b = Scoreboard::new();
        assert!(b.takes(s(0), s(1)));
        for i in 0..MAX_SACKED_RANGES as u32 {
            assert!(b.takes(s(10 * i + 5), s(10 * i + 6)));
            assert!(b.add(s(10 * i + 5), s(10 * i + 6)));
        }
        for (l, r, touches) in [
            (1_000_000, 1_000_001, false),
            (7, 9, false),
            (6, 9, true),
            (2, 5, true),
            (0, 100, true),
        ] {
            assert_eq!(b.takes(s(l), s(r)), touches, "[{l}, {r})");
            let before = b.ranges().to_vec();
            b.add(s(l), s(r));
            assert_eq!(b.ranges() != before.as_slice(), touches, "[{l}, {r})");
        }
    }
}
