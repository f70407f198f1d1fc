//! Time as seen by the stack: a monotonic instant and a duration, both in
//! nanoseconds. The stack never reads a clock; the caller passes `now` in.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the
/// caller (for example the worker's start, or `CLOCK_MONOTONIC`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub u64);

impl Instant {
    /// The epoch (time zero).
    pub const ZERO: Instant = Instant(0);

    /// Builds an instant from nanoseconds since the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// Builds an instant from milliseconds since the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

/// An optional deadline in 8 bytes (`Option<Instant>` takes 16): nanoseconds,
/// with `u64::MAX` for none. Connection timers use it, so that a
/// connection's deadlines fit in fewer cache lines, and so do the optional
/// instants a connection keeps (the timed segment's send time, the start
/// of a receive-RTT measurement).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline(u64);

impl Deadline {
    /// No deadline.
    pub(crate) const NONE: Deadline = Deadline(u64::MAX);

    /// A deadline at `t` (the last representable nanosecond, 584 years
    /// after the epoch, stands for none and is moved one earlier).
    #[inline]
    pub(crate) const fn at(t: Instant) -> Self {
        Deadline(if t.0 == u64::MAX { u64::MAX - 1 } else { t.0 })
    }

    /// The deadline, if any.
    #[inline]
    pub(crate) const fn get(self) -> Option<Instant> {
        if self.0 == u64::MAX {
            None
        } else {
            Some(Instant(self.0))
        }
    }

    /// Whether no deadline is set.
    #[inline]
    pub(crate) const fn is_none(self) -> bool {
        self.0 == u64::MAX
    }

    /// Whether a deadline is set.
    #[inline]
    pub(crate) const fn is_some(self) -> bool {
        self.0 != u64::MAX
    }

    /// The earlier of two deadlines (none is later than any).
    #[inline]
    pub(crate) fn min(self, other: Deadline) -> Deadline {
        Deadline(self.0.min(other.0))
    }

    /// Whether the deadline is set and due at `now`.
    #[inline]
    pub(crate) fn due(self, now: Instant) -> bool {
        self.0 <= now.0
    }
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl Duration {
    /// Zero duration.
    pub const ZERO: Duration = Duration(0);
    /// The largest representable duration.
    pub const MAX: Duration = Duration(u64::MAX);

    /// A duration of `ns` nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        Duration(ns)
    }

    /// A duration of `us` microseconds.
    pub const fn from_micros(us: u64) -> Self {
        Duration(us.saturating_mul(1_000))
    }

    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms.saturating_mul(1_000_000))
    }

    /// A duration of `s` seconds.
    pub const fn from_secs(s: u64) -> Self {
        Duration(s.saturating_mul(1_000_000_000))
    }

    /// Length in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Length in whole milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// `self * k`, saturating at [`Duration::MAX`].
    pub const fn saturating_mul(self, k: u64) -> Duration {
        Duration(self.0.saturating_mul(k))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating difference: zero if `rhs` is later than `self`.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl Sub for Duration {
    type Output = Duration;
    /// Saturating difference.
    fn sub(self, d: Duration) -> Duration {
        Duration(self.0.saturating_sub(d.0))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1_000_000 {
            write!(
                f,
                "{}.{:03}ms",
                self.0 / 1_000_000,
                (self.0 % 1_000_000) / 1_000
            )
        } else {
            write!(f, "{}ns", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(3), Instant::from_millis(8));
        assert_eq!(Instant::from_millis(3) - t, Duration::ZERO);
        assert_eq!(t - Instant::from_millis(2), Duration::from_millis(3));
        assert_eq!(
            Instant(u64::MAX) + Duration::from_secs(1),
            Instant(u64::MAX)
        );
        assert_eq!(Duration::from_secs(2).as_millis(), 2000);
        assert_eq!(Duration::MAX.saturating_mul(2), Duration::MAX);
    }
}
