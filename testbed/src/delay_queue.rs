//! The delay line's queue: frames held in arrival order until a fixed delay
//! after they arrived, with a byte limit (like netem's `limit`). Pure: time
//! comes in as arguments.
//!
//! One fixed delay keeps arrival order, so a FIFO suffices and the frame at
//! the head is always the next one due (no reordering, as with netem's
//! `delay D` without jitter).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A frame waiting in the line.
#[derive(Debug)]
struct Held {
    due: Instant,
    frame: Box<[u8]>,
}

/// Counters of a [`DelayQueue`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DelayQueueStats {
    /// Frames accepted.
    pub frames_in: u64,
    /// Bytes accepted.
    pub bytes_in: u64,
    /// Frames released.
    pub frames_out: u64,
    /// Frames dropped because the line was full.
    pub dropped_full: u64,
    /// Most bytes held at once.
    pub peak_bytes: u64,
}

/// Frames held for a fixed delay.
#[derive(Debug)]
pub struct DelayQueue {
    delay: Duration,
    limit_bytes: usize,
    bytes: usize,
    held: VecDeque<Held>,
    stats: DelayQueueStats,
}

impl DelayQueue {
    /// A queue delaying every frame by `delay`, holding at most
    /// `limit_bytes` (frames beyond are dropped, as a full link buffer would).
    pub fn new(delay: Duration, limit_bytes: usize) -> DelayQueue {
        DelayQueue {
            delay,
            limit_bytes,
            bytes: 0,
            held: VecDeque::new(),
            stats: DelayQueueStats::default(),
        }
    }

    /// Takes a frame that arrived at `arrived`; it is due `delay` later.
    /// Arrival times must not go backwards (a later arrival stamped earlier
    /// is treated as arriving with the frame before it, keeping order).
    /// Returns false when the frame was dropped because the line is full.
    pub fn push(&mut self, arrived: Instant, frame: &[u8]) -> bool {
        if self.bytes + frame.len() > self.limit_bytes {
            self.stats.dropped_full += 1;
            return false;
        }
        let mut due = arrived + self.delay;
        if let Some(last) = self.held.back() {
            due = due.max(last.due);
        }
        self.bytes += frame.len();
        self.stats.frames_in += 1;
        self.stats.bytes_in += frame.len() as u64;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.bytes as u64);
        self.held.push_back(Held {
            due,
            frame: frame.into(),
        });
        true
    }

    /// When the next frame is due, if any is held.
    pub fn next_due(&self) -> Option<Instant> {
        self.held.front().map(|h| h.due)
    }

    /// Moves up to `max` frames due at `now` into `out`, in order, each with
    /// how late it leaves (`now - due`).
    pub fn pop_due(&mut self, now: Instant, max: usize, out: &mut Vec<(Box<[u8]>, Duration)>) {
        while out.len() < max {
            match self.held.front() {
                Some(h) if h.due <= now => {
                    let h = self.held.pop_front().expect("front exists");
                    self.bytes -= h.frame.len();
                    self.stats.frames_out += 1;
                    out.push((h.frame, now - h.due));
                }
                _ => break,
            }
        }
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Counters.
    pub fn stats(&self) -> DelayQueueStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn frames_leave_exactly_one_delay_after_arriving() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(10 * MS, 1 << 20);
        assert!(q.push(t0, b"a"));
        assert!(q.push(t0 + 3 * MS, b"bb"));
        assert_eq!(q.next_due(), Some(t0 + 10 * MS));
        let mut out = Vec::new();
        q.pop_due(t0 + 9 * MS, 16, &mut out);
        assert!(out.is_empty(), "nothing is due before its delay");
        q.pop_due(t0 + 10 * MS, 16, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(&*out[0].0, b"a");
        assert_eq!(out[0].1, Duration::ZERO);
        assert_eq!(q.next_due(), Some(t0 + 13 * MS));
        out.clear();
        q.pop_due(t0 + 20 * MS, 16, &mut out);
        assert_eq!(&*out[0].0, b"bb");
        assert_eq!(out[0].1, 7 * MS, "lateness is reported");
        assert!(q.is_empty());
        assert_eq!(q.stats().frames_out, 2);
    }

    #[test]
    fn the_byte_limit_drops_and_frees() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(MS, 10);
        assert!(q.push(t0, &[0; 6]));
        assert!(!q.push(t0, &[0; 6]), "over the limit");
        assert!(q.push(t0, &[0; 4]));
        assert_eq!(q.stats().dropped_full, 1);
        assert_eq!(q.stats().peak_bytes, 10);
        let mut out = Vec::new();
        q.pop_due(t0 + MS, 1, &mut out);
        assert_eq!(out.len(), 1, "max is honoured");
        assert!(q.push(t0 + MS, &[0; 6]), "released bytes make room");
    }

    proptest! {
        /// Whatever the arrival pattern, frames leave in arrival order, none
        /// before its delay, none lost below the limit.
        #[test]
        fn order_and_delay_hold(gaps in proptest::collection::vec(0u64..5_000, 1..200),
                                delay_us in 0u64..20_000,
                                step_us in 1u64..3_000) {
            let t0 = Instant::now();
            let delay = Duration::from_micros(delay_us);
            let mut q = DelayQueue::new(delay, usize::MAX);
            let mut t = t0;
            let mut arrivals = Vec::new();
            for (i, g) in gaps.iter().enumerate() {
                t += Duration::from_micros(*g);
                arrivals.push(t);
                prop_assert!(q.push(t, &(i as u32).to_le_bytes()));
            }
            let mut now = t0;
            let mut seen = 0u32;
            let mut out = Vec::new();
            while !q.is_empty() {
                now += Duration::from_micros(step_us);
                out.clear();
                q.pop_due(now, usize::MAX, &mut out);
                for (f, late) in &out {
                    let i = u32::from_le_bytes(f[..4].try_into().unwrap());
                    prop_assert_eq!(i, seen, "arrival order");
                    let due = arrivals[i as usize] + delay;
                    prop_assert!(due <= now, "released before due");
                    prop_assert_eq!(*late, now - due);
                    seen += 1;
                }
            }
            prop_assert_eq!(seen as usize, gaps.len());
        }
    }
}
