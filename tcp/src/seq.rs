//! Sequence number arithmetic modulo 2^32 (RFC 9293 §3.4).
//!
//! Comparisons are only meaningful between numbers less than 2^31 apart,
//! which TCP's window limits guarantee (RFC 7323 §2.3 caps windows at 2^30).

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A TCP sequence (or acknowledgment) number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct SeqNumber(pub u32);

impl SeqNumber {
    /// The greater of two sequence numbers (in wrapping order).
    pub(crate) fn max(self, other: SeqNumber) -> SeqNumber {
        if self > other {
            self
        } else {
            other
        }
    }

    /// The lesser of two sequence numbers (in wrapping order).
    pub(crate) fn min(self, other: SeqNumber) -> SeqNumber {
        if self < other {
            self
        } else {
            other
        }
    }

    /// RFC 9293 §3.10.7.4 (the table under "first check sequence
    /// number"): whether a segment starting here and occupying `seg_len`
    /// sequence numbers is acceptable to a receiver expecting `nxt` with a
    /// window of `wnd` bytes. A segment without data may sit at the
    /// window's right edge too (as Linux's `tcp_sequence` takes it): a
    /// sender that filled the window sends its pure ACKs at its SND.NXT,
    /// the edge, while that data is on its way (the RFC's strict bound
    /// dropped them, and their acknowledgment and SACK blocks with them).
    #[inline]
    pub(crate) fn acceptable(self, seg_len: usize, nxt: SeqNumber, wnd: usize) -> bool {
        match (seg_len, wnd) {
            (0, 0) => self == nxt,
            (0, _) => nxt <= self && self <= nxt + wnd,
            (_, 0) => false,
            (_, _) => {
                self.in_range(nxt, nxt + wnd) || (self + (seg_len - 1)).in_range(nxt, nxt + wnd)
            }
        }
    }

    /// Signed distance `self - other`.
    pub(crate) fn diff(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self - other` as a byte count, or 0 if `other` is after `self`.
    pub(crate) fn saturating_sub(self, other: SeqNumber) -> usize {
        let d = self.diff(other);
        if d > 0 {
            d as usize
        } else {
            0
        }
    }

    /// `lo <= self < hi` in wrapping order.
    pub(crate) fn in_range(self, lo: SeqNumber, hi: SeqNumber) -> bool {
        lo <= self && self < hi
    }
}

impl Add<usize> for SeqNumber {
    type Output = SeqNumber;
    fn add(self, n: usize) -> SeqNumber {
        // Offsets are bounded by windows (< 2^31); truncation is the modulo.
        SeqNumber(self.0.wrapping_add(n as u32))
    }
}

impl AddAssign<usize> for SeqNumber {
    fn add_assign(&mut self, n: usize) {
        *self = *self + n;
    }
}

impl Sub<usize> for SeqNumber {
    type Output = SeqNumber;
    fn sub(self, n: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(n as u32))
    }
}

impl Sub for SeqNumber {
    type Output = usize;
    /// Forward distance from `rhs` to `self`.
    ///
    /// # Panics
    /// In debug builds, if `rhs` is after `self`.
    fn sub(self, rhs: SeqNumber) -> usize {
        let d = self.diff(rhs);
        debug_assert!(d >= 0, "sequence subtraction underflow: {self:?} - {rhs:?}");
        d.max(0) as usize
    }
}

impl PartialOrd for SeqNumber {
    fn partial_cmp(&self, other: &SeqNumber) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl fmt::Debug for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_around() {
        let a = SeqNumber(u32::MAX - 1);
        let b = a + 4;
        assert_eq!(b, SeqNumber(2));
        assert!(a < b);
        assert!(b > a);
        assert_eq!(b - a, 4);
        assert_eq!(b.diff(a), 4);
        assert_eq!(a.diff(b), -4);
        assert_eq!(a.saturating_sub(b), 0);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
        assert!((a + 1).in_range(a, b));
        assert!(!b.in_range(a, b));
    }

    proptest::proptest! {
        #[test]
        fn add_then_sub_roundtrips(x: u32, n in 0usize..(1 << 31)) {
            let s = SeqNumber(x);
            proptest::prop_assert_eq!((s + n) - s, n);
            proptest::prop_assert!(s + n >= s);
            proptest::prop_assert_eq!((s + n) - n, s);
        }
    }
}
