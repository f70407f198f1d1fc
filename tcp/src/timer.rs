//! A per-core hashed timer wheel (Varghese & Lauck, scheme 6).
//!
//! Entries are keyed by a connection slot index plus a generation. There is
//! no explicit cancel: the owner keeps, per connection, the deadline of the
//! one entry it considers live, and ignores entries whose generation or
//! deadline no longer match when they fire ("lazy cancel"). Insert and
//! cancel are O(1); expiry costs O(entries in the buckets passed).

use crate::time::{Duration, Instant};

/// One scheduled timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerEntry {
    /// Owner's slot index.
    pub key: u32,
    /// Owner's slot generation at insert time.
    pub generation: u32,
    /// When the timer is due.
    pub deadline: Instant,
}

/// A hashed timing wheel with `2^k` buckets of `tick` each. Deadlines more
/// than one rotation away stay in their bucket across rotations.
#[derive(Debug, Clone)]
pub(crate) struct TimerWheel {
    tick_ns: u64,
    mask: u64,
    buckets: Vec<Vec<TimerEntry>>,
    occupied: Vec<u64>,
    /// The next tick that `expire` has not processed yet.
    current: u64,
    len: usize,
}

impl TimerWheel {
    /// A wheel with ticks of `tick` (at least 1 µs) and `buckets` buckets,
    /// rounded up to a power of two and at least 64.
    pub(crate) fn new(tick: Duration, buckets: usize) -> Self {
        let n = buckets.max(64).next_power_of_two();
        TimerWheel {
            tick_ns: tick.as_nanos().max(1_000),
            mask: n as u64 - 1,
            buckets: vec![Vec::new(); n],
            occupied: vec![0; n / 64],
            current: 0,
            len: 0,
        }
    }

    /// Number of entries, including ones that will be ignored when fired.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the wheel holds no entries.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `key`/`generation` at `deadline`. `now` lets an empty wheel
    /// skip ahead, so that the next expiry is found without a long scan.
    pub(crate) fn insert(&mut self, now: Instant, key: u32, generation: u32, deadline: Instant) {
        if self.len == 0 {
            self.current = self.current.max(now.as_nanos() / self.tick_ns);
        }
        // Round up: a bucket is processed once its start time has passed.
        let tick = deadline.as_nanos().div_ceil(self.tick_ns).max(self.current);
        let slot = (tick & self.mask) as usize;
        self.buckets[slot].push(TimerEntry {
            key,
            generation,
            deadline,
        });
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.len += 1;
    }

    /// Offset (in buckets) from `start` to the next occupied bucket.
    fn next_occupied(&self, start: usize) -> Option<usize> {
        let n = self.buckets.len();
        let words = self.occupied.len();
        let (w0, b0) = (start / 64, start % 64);
        let first = self.occupied[w0] & (!0u64 << b0);
        if first != 0 {
            return Some(w0 * 64 + first.trailing_zeros() as usize - start);
        }
        for i in 1..=words {
            let w = (w0 + i) % words;
            let bits = if i == words {
                self.occupied[w] & ((1u64 << b0) - 1)
            } else {
                self.occupied[w]
            };
            if bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                return Some((slot + n - start) % n);
            }
        }
        None
    }

    /// The start time of the next bucket holding entries. Entries may be due
    /// later than that (a later rotation); calling [`TimerWheel::expire`]
    /// then simply finds nothing due.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let start = (self.current & self.mask) as usize;
        let off = self.next_occupied(start)? as u64;
        Some(Instant((self.current + off).saturating_mul(self.tick_ns)))
    }

    /// Moves every entry due at or before `now` into `out`.
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<TimerEntry>) {
        let now_tick = now.as_nanos() / self.tick_ns;
        if now_tick < self.current {
            return;
        }
        if self.len > 0 {
            let n = self.buckets.len() as u64;
            let count = (now_tick - self.current + 1).min(n);
            let mut i = 0;
            while i < count {
                let start = ((self.current + i) & self.mask) as usize;
                let Some(off) = self.next_occupied(start) else {
                    break;
                };
                i += off as u64;
                if i >= count {
                    break;
                }
                let slot = ((self.current + i) & self.mask) as usize;
                let bucket = &mut self.buckets[slot];
                let mut j = 0;
                while j < bucket.len() {
                    if bucket[j].deadline <= now {
                        out.push(bucket.swap_remove(j));
                        self.len -= 1;
                    } else {
                        j += 1;
                    }
                }
                if bucket.is_empty() {
                    self.occupied[slot / 64] &= !(1 << (slot % 64));
                }
                i += 1;
            }
        }
        self.current = now_tick + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    #[test]
    fn fires_in_order_and_not_early() {
        let mut w = TimerWheel::new(Duration::from_millis(1), 64);
        w.insert(ms(0), 1, 0, ms(10));
        w.insert(ms(0), 2, 0, Instant(ms(5).0 + 1)); // rounds up to tick 6
        w.insert(ms(0), 3, 0, ms(100)); // beyond one rotation (64 ms)
        assert_eq!(w.len(), 3);
        assert_eq!(w.next_expiry(), Some(ms(6)));
        let mut out = Vec::new();
        w.expire(ms(5), &mut out);
        assert!(out.is_empty());
        w.expire(ms(6), &mut out);
        assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), [2]);
        out.clear();
        assert_eq!(w.next_expiry(), Some(ms(10)));
        w.expire(ms(50), &mut out);
        assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), [1]);
        out.clear();
        // Entry 3 lives in bucket 100 % 64 = 36, i.e. tick 100 (next pass).
        assert_eq!(w.next_expiry(), Some(ms(100)));
        w.expire(ms(99), &mut out);
        assert!(out.is_empty());
        w.expire(ms(1000), &mut out);
        assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), [3]);
        assert!(w.is_empty());
        assert_eq!(w.next_expiry(), None);
    }

    #[test]
    fn past_deadlines_fire_on_next_expire() {
        let mut w = TimerWheel::new(Duration::from_millis(1), 64);
        let mut out = Vec::new();
        w.expire(ms(20), &mut out);
        w.insert(ms(20), 7, 3, ms(1));
        assert!(w.next_expiry().unwrap() <= ms(21));
        w.expire(ms(21), &mut out);
        assert_eq!(
            out,
            [TimerEntry {
                key: 7,
                generation: 3,
                deadline: ms(1)
            }]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Against a model: every entry fires exactly once, never before its
        /// deadline, and no later than the first expire at/after it, when
        /// expire is called at each advertised next_expiry.
        #[test]
        fn matches_model(deadlines in proptest::collection::vec(0u64..5_000_000_000, 1..60), step in 1u64..300) {
            let mut w = TimerWheel::new(Duration::from_millis(1), 128);
            for (i, d) in deadlines.iter().enumerate() {
                w.insert(Instant::ZERO, i as u32, 0, Instant(*d));
            }
            let mut fired = vec![false; deadlines.len()];
            let mut now = Instant::ZERO;
            let mut out = Vec::new();
            let mut guard = 0;
            while let Some(t) = w.next_expiry() {
                guard += 1;
                proptest::prop_assert!(guard < 100_000);
                // Either jump to the advertised expiry or take a fixed step.
                now = if guard % 2 == 0 { t.max(now) } else { Instant(now.0 + step * 1_000_000) };
                w.expire(now, &mut out);
                for e in out.drain(..) {
                    let i = e.key as usize;
                    proptest::prop_assert!(!fired[i]);
                    proptest::prop_assert!(Instant(deadlines[i]) <= now);
                    fired[i] = true;
                }
                // Nothing due (deadline rounded up to the tick) may remain.
                for (i, d) in deadlines.iter().enumerate() {
                    let rounded = d.div_ceil(1_000_000) * 1_000_000;
                    proptest::prop_assert!(fired[i] || Instant(rounded) > now);
                }
            }
            proptest::prop_assert!(fired.iter().all(|f| *f));
        }
    }
}
