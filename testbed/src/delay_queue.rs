//! The delay line's queue: frames held until a fixed delay after they
//! arrived, with a byte limit (like netem's `limit`), and optionally a
//! bottleneck: a rate per direction with a drop-tail queue in front of it
//! (like a router's output port). Pure: time comes in as arguments.
//!
//! Each direction is its own FIFO. Without a rate, one fixed delay keeps
//! arrival order, so the frame at a FIFO's head is always that direction's
//! next one due (no reordering, as with netem's `delay D` without jitter).
//! With a rate, each direction is a serializer: a frame starts on the wire
//! when it arrives or when the frame before it has been sent, whichever is
//! later, takes `wire bytes × 8 / rate` to send, and then travels for the
//! delay:
//!
//! ```text
//! due = max(arrival, previous frame's end of transmission) + bytes·8/rate + delay
//! ```
//!
//! which keeps departures at least one transmission time apart, so the
//! direction never carries more than the rate. A frame that would take the
//! bytes still waiting to be sent (the backlog, `(previous end of
//! transmission − arrival) × rate`) beyond the queue's bytes is dropped at the
//! tail; one that finds the queue empty is always taken, however large (a
//! GSO super-frame bigger than the queue: its first segment would start
//! sending at once). The two directions share nothing but the line's byte
//! limit, a [`ByteBudget`] that several queues (the line's lanes) may share.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which way a frame crosses the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From flowlane's side to the peer.
    ToPeer,
    /// From the peer to flowlane's side.
    FromPeer,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::ToPeer => 0,
            Direction::FromPeer => 1,
        }
    }
}

/// A bottleneck: the rate of each direction and its drop-tail queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bottleneck {
    /// Bits per second each direction carries (> 0).
    pub bits_per_sec: u64,
    /// Bytes waiting to be sent beyond which a direction drops arrivals.
    pub queue_bytes: usize,
}

impl Bottleneck {
    /// Time to send `bytes` at the rate.
    fn transmission(&self, bytes: usize) -> Duration {
        let ns = bytes as u128 * 8 * 1_000_000_000 / u128::from(self.bits_per_sec.max(1));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Bytes the rate sends in `t` (what a backlog of `t` holds).
    fn bytes_in(&self, t: Duration) -> u64 {
        let b = t.as_nanos() * u128::from(self.bits_per_sec) / 8 / 1_000_000_000;
        u64::try_from(b).unwrap_or(u64::MAX)
    }
}

/// Counters of one direction's bottleneck.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BottleneckStats {
    /// Frames dropped at the tail of the bottleneck's queue.
    pub dropped: u64,
    /// Largest backlog an arriving frame found (bytes).
    pub peak_queue_bytes: u64,
}

/// The most bytes held at once by the queues that share it (the delay
/// line's lanes: one flow stays in one lane, and may use the whole line's
/// limit). Each frame holds its bytes from push to pop.
#[derive(Debug)]
pub struct ByteBudget {
    limit: usize,
    used: AtomicUsize,
}

impl ByteBudget {
    /// A budget of `limit` bytes, none of them used.
    pub fn new(limit: usize) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes held now by the queues sharing it.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes if they fit.
    fn reserve(&self, n: usize) -> bool {
        // A counter, guarding no other memory: relaxed is enough.
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken by [`reserve`](Self::reserve).
    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }
}

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
    /// The bottleneck towards the peer (zero without a rate).
    pub bottleneck_to_peer: BottleneckStats,
    /// The bottleneck towards flowlane's side (zero without a rate).
    pub bottleneck_from_peer: BottleneckStats,
}

impl DelayQueueStats {
    /// Adds `other`'s counters (peaks too: queues peak at different
    /// moments, so the sum bounds the peak of them together).
    pub fn add(&mut self, other: &DelayQueueStats) {
        self.frames_in += other.frames_in;
        self.bytes_in += other.bytes_in;
        self.frames_out += other.frames_out;
        self.dropped_full += other.dropped_full;
        self.peak_bytes += other.peak_bytes;
        for (a, b) in [
            (&mut self.bottleneck_to_peer, &other.bottleneck_to_peer),
            (&mut self.bottleneck_from_peer, &other.bottleneck_from_peer),
        ] {
            a.dropped += b.dropped;
            a.peak_queue_bytes += b.peak_queue_bytes;
        }
    }

    fn bottleneck(&mut self, dir: Direction) -> &mut BottleneckStats {
        match dir {
            Direction::ToPeer => &mut self.bottleneck_to_peer,
            Direction::FromPeer => &mut self.bottleneck_from_peer,
        }
    }
}

/// One direction: its FIFO and, with a bottleneck, when its serializer has
/// sent everything it accepted.
#[derive(Debug, Default)]
struct Lane {
    held: VecDeque<Held>,
    sent_by: Option<Instant>,
}

/// Frames held for a fixed delay, behind an optional bottleneck.
#[derive(Debug)]
pub struct DelayQueue {
    delay: Duration,
    budget: Arc<ByteBudget>,
    bottleneck: Option<Bottleneck>,
    /// Bytes this queue holds (its share of the budget).
    bytes: usize,
    dirs: [Lane; 2],
    stats: DelayQueueStats,
}

impl DelayQueue {
    /// A queue delaying every frame by `delay`, holding at most
    /// `limit_bytes` (frames beyond are dropped, as a full link buffer would).
    pub fn new(delay: Duration, limit_bytes: usize) -> DelayQueue {
        DelayQueue::sharing(delay, ByteBudget::new(limit_bytes))
    }

    /// A queue delaying every frame by `delay` whose frames count against
    /// `budget`, which other queues may share: frames beyond it are dropped.
    pub fn sharing(delay: Duration, budget: Arc<ByteBudget>) -> DelayQueue {
        DelayQueue {
            delay,
            budget,
            bottleneck: None,
            bytes: 0,
            dirs: [Lane::default(), Lane::default()],
            stats: DelayQueueStats::default(),
        }
    }

    /// The same queue behind `bottleneck` in each direction.
    pub fn with_bottleneck(mut self, bottleneck: Bottleneck) -> DelayQueue {
        self.bottleneck = Some(bottleneck);
        self
    }

    /// Takes a frame going `dir` that arrived at `arrived`; the bottleneck
    /// (if any) charges it `frame.len()` bytes. See [`push_sized`](Self::push_sized).
    pub fn push(&mut self, arrived: Instant, dir: Direction, frame: &[u8]) -> bool {
        self.push_sized(arrived, dir, frame, frame.len())
    }

    /// Takes a frame going `dir` that arrived at `arrived` and takes
    /// `wire_bytes` on the wire (a GSO super-frame: all its segments); it is
    /// due `delay` after the bottleneck has sent it. Arrival times should not
    /// go backwards (a later arrival stamped earlier is treated as arriving
    /// with the frame before it, keeping order). Returns false when the frame
    /// was dropped: the line full, or the bottleneck's queue.
    pub fn push_sized(
        &mut self,
        arrived: Instant,
        dir: Direction,
        frame: &[u8],
        wire_bytes: usize,
    ) -> bool {
        if !self.budget.reserve(frame.len()) {
            self.stats.dropped_full += 1;
            return false;
        }
        let lane = &mut self.dirs[dir.index()];
        let mut due = arrived + self.delay;
        if let Some(b) = self.bottleneck {
            let start = lane.sent_by.map_or(arrived, |s| s.max(arrived));
            let backlog = b.bytes_in(start - arrived);
            let st = self.stats.bottleneck(dir);
            st.peak_queue_bytes = st.peak_queue_bytes.max(backlog);
            if backlog > 0 && backlog + wire_bytes as u64 > b.queue_bytes as u64 {
                st.dropped += 1;
                self.budget.release(frame.len());
                return false;
            }
            let sent = start + b.transmission(wire_bytes);
            lane.sent_by = Some(sent);
            due = sent + self.delay;
        }
        if let Some(last) = lane.held.back() {
            due = due.max(last.due);
        }
        self.bytes += frame.len();
        self.stats.frames_in += 1;
        self.stats.bytes_in += frame.len() as u64;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.bytes as u64);
        lane.held.push_back(Held {
            due,
            frame: frame.into(),
        });
        true
    }

    /// The direction whose head is due first, if any frame is held.
    fn first(&self) -> Option<usize> {
        let due = |i: usize| self.dirs[i].held.front().map(|h| h.due);
        match (due(0), due(1)) {
            (Some(a), Some(b)) => Some(if b < a { 1 } else { 0 }),
            (Some(_), None) => Some(0),
            (None, Some(_)) => Some(1),
            (None, None) => None,
        }
    }

    /// When the next frame is due, if any is held.
    pub fn next_due(&self) -> Option<Instant> {
        self.first()
            .and_then(|i| self.dirs[i].held.front().map(|h| h.due))
    }

    /// Moves up to `max` frames due at `now` into `out`, in order of their
    /// due times, each with how late it leaves (`now - due`).
    pub fn pop_due(&mut self, now: Instant, max: usize, out: &mut Vec<(Box<[u8]>, Duration)>) {
        while out.len() < max {
            let Some(i) = self.first() else { break };
            let held = &mut self.dirs[i].held;
            match held.front() {
                Some(h) if h.due <= now => {
                    let h = held.pop_front().expect("front exists");
                    self.bytes -= h.frame.len();
                    self.budget.release(h.frame.len());
                    self.stats.frames_out += 1;
                    out.push((h.frame, now - h.due));
                }
                _ => break,
            }
        }
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.dirs.iter().all(|d| d.held.is_empty())
    }

    /// Counters.
    pub fn stats(&self) -> DelayQueueStats {
        self.stats
    }
}

impl Drop for DelayQueue {
    /// Gives what the queue still holds back to the budget it shares.
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use Direction::{FromPeer, ToPeer};

    const MS: Duration = Duration::from_millis(1);

    /// 8 Mbit/s: 1,000 bytes take 1 ms.
    fn slow(queue_bytes: usize) -> Bottleneck {
        Bottleneck {
            bits_per_sec: 8_000_000,
            queue_bytes,
        }
    }

    /// Releases everything due at `now`: (first byte, lateness).
    fn drain(q: &mut DelayQueue, now: Instant) -> Vec<(u8, Duration)> {
        let mut out = Vec::new();
        q.pop_due(now, usize::MAX, &mut out);
        out.into_iter().map(|(f, l)| (f[0], l)).collect()
    }

    #[test]
    fn frames_leave_exactly_one_delay_after_arriving() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(10 * MS, 1 << 20);
        assert!(q.push(t0, ToPeer, b"a"));
        assert!(q.push(t0 + 3 * MS, ToPeer, b"bb"));
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
        assert!(q.push(t0, ToPeer, &[0; 6]));
        assert!(!q.push(t0, FromPeer, &[0; 6]), "over the limit, both ways");
        assert!(q.push(t0, ToPeer, &[0; 4]));
        assert_eq!(q.stats().dropped_full, 1);
        assert_eq!(q.stats().peak_bytes, 10);
        let mut out = Vec::new();
        q.pop_due(t0 + MS, 1, &mut out);
        assert_eq!(out.len(), 1, "max is honoured");
        assert!(q.push(t0 + MS, ToPeer, &[0; 6]), "released bytes make room");
    }

    #[test]
    fn the_rate_spaces_departures_by_their_transmission_time() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(10 * MS, 1 << 30).with_bottleneck(slow(1 << 20));
        // 100 frames of 1,000 bytes at once: one per millisecond leaves.
        for i in 0..100u8 {
            assert!(q.push(t0, ToPeer, &[i; 1000]));
        }
        assert_eq!(q.next_due(), Some(t0 + 11 * MS), "sent, then delayed");
        let out = drain(&mut q, t0 + 60 * MS);
        assert_eq!(out.len(), 50, "8 Mbit/s for 50 ms after the delay");
        assert!(out.iter().enumerate().all(|(i, (b, _))| *b == i as u8));
        // The i-th frame (from 0) was due at t0 + (i + 1) ms + 10 ms.
        assert_eq!(out[49].1, Duration::ZERO);
        assert_eq!(out[0].1, 49 * MS);
        assert_eq!(q.stats().bottleneck_to_peer.dropped, 0);
        assert_eq!(q.stats().bottleneck_to_peer.peak_queue_bytes, 99_000);
    }

    #[test]
    fn a_full_bottleneck_queue_drops_at_the_tail_and_counts() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(MS, 1 << 30).with_bottleneck(slow(5_000));
        let accepted: Vec<bool> = (0..10u8).map(|i| q.push(t0, ToPeer, &[i; 1000])).collect();
        // The k-th frame finds k × 1,000 bytes unsent; 5 fit in 5,000.
        assert_eq!(
            accepted,
            [true, true, true, true, true, false, false, false, false, false]
        );
        let st = q.stats();
        assert_eq!(st.bottleneck_to_peer.dropped, 5);
        assert_eq!(st.bottleneck_from_peer.dropped, 0);
        assert_eq!(st.dropped_full, 0, "bottleneck drops are counted apart");
        assert_eq!(st.frames_in, 5);
        // One millisecond later one frame has been sent: room for one more.
        assert!(q.push(t0 + MS, ToPeer, &[10; 1000]));
        assert!(!q.push(t0 + MS, ToPeer, &[11; 1000]));
        let out = drain(&mut q, t0 + 100 * MS);
        let firsts: Vec<u8> = out.iter().map(|(b, _)| *b).collect();
        assert_eq!(firsts, [0, 1, 2, 3, 4, 10]);
    }

    #[test]
    fn an_empty_bottleneck_queue_takes_a_frame_larger_than_itself() {
        let t0 = Instant::now();
        let budget = ByteBudget::new(1 << 30);
        let mut q = DelayQueue::sharing(MS, budget.clone()).with_bottleneck(slow(5_000));
        // A GSO super-frame of 8,000 wire bytes: its first segment would
        // start sending at once.
        assert!(q.push_sized(t0, ToPeer, &[1; 100], 8_000));
        assert!(!q.push_sized(t0, ToPeer, &[2; 100], 8_000), "not behind it");
        assert!(!q.push(t0, ToPeer, &[3; 1000]), "nor anything else");
        // Once it has been sent (8 ms), the queue is empty again.
        assert!(q.push_sized(t0 + 8 * MS, ToPeer, &[4; 100], 8_000));
        let st = q.stats().bottleneck_to_peer;
        assert_eq!((st.dropped, st.peak_queue_bytes), (2, 8_000));
        assert_eq!(budget.used(), 200, "dropped frames hold no bytes");
        drop(q);
        assert_eq!(budget.used(), 0, "a queue gone holds none");
    }

    #[test]
    fn an_idle_bottleneck_adds_only_the_transmission_time() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(20 * MS, 1 << 30).with_bottleneck(slow(2_000));
        // Frames 5 ms apart, 1 ms each: never queued, never dropped.
        for i in 0..10u8 {
            let at = t0 + u32::from(i) * 5 * MS;
            assert!(q.push(at, FromPeer, &[i; 1000]));
        }
        assert_eq!(q.next_due(), Some(t0 + 21 * MS));
        let mut now = t0;
        let mut seen = 0;
        while !q.is_empty() {
            now += Duration::from_micros(100);
            for (b, late) in drain(&mut q, now) {
                let arrived = t0 + u32::from(b) * 5 * MS;
                assert_eq!(now - late, arrived + 21 * MS, "delay + 1 ms transmission");
                seen += 1;
            }
        }
        assert_eq!(seen, 10);
        assert_eq!(q.stats().bottleneck_from_peer.dropped, 0);
        assert_eq!(q.stats().bottleneck_from_peer.peak_queue_bytes, 0);
    }

    #[test]
    fn the_directions_are_independent() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(10 * MS, 1 << 30).with_bottleneck(slow(4_000));
        // Towards the peer: a backlog and drops.
        for i in 0..8u8 {
            q.push(t0, ToPeer, &[i; 1000]);
        }
        // Back: an ACK arriving behind that backlog is not held by it.
        assert!(q.push(t0 + MS, FromPeer, &[200; 100]));
        let st = q.stats();
        assert_eq!(st.bottleneck_to_peer.dropped, 4);
        assert_eq!(st.bottleneck_from_peer.dropped, 0);
        assert_eq!(st.bottleneck_from_peer.peak_queue_bytes, 0);
        // 100 bytes at 8 Mbit/s: 100 µs.
        let ack_due = t0 + 11 * MS + Duration::from_micros(100);
        let out = drain(&mut q, ack_due);
        let firsts: Vec<u8> = out.iter().map(|(b, _)| *b).collect();
        assert_eq!(
            firsts,
            [0, 200],
            "the ACK overtakes the data queued before it"
        );
        assert_eq!(out[1].1, Duration::ZERO);
    }

    proptest! {
        /// Whatever the arrival pattern, each direction's frames leave in
        /// arrival order, exactly one delay after arriving, none lost below
        /// the limit.
        #[test]
        fn order_and_delay_hold(gaps in proptest::collection::vec((0u64..5_000, any::<bool>()), 1..200),
                                delay_us in 0u64..20_000,
                                step_us in 1u64..3_000) {
            let t0 = Instant::now();
            let delay = Duration::from_micros(delay_us);
            let mut q = DelayQueue::new(delay, usize::MAX);
            let mut t = t0;
            let mut arrivals = Vec::new();
            for (i, (g, back)) in gaps.iter().enumerate() {
                t += Duration::from_micros(*g);
                arrivals.push((t, *back));
                let dir = if *back { FromPeer } else { ToPeer };
                prop_assert!(q.push(t, dir, &(i as u32).to_le_bytes()));
            }
            let mut now = t0;
            let mut last = [None::<u32>; 2];
            let mut seen = 0usize;
            let mut out = Vec::new();
            while !q.is_empty() {
                now += Duration::from_micros(step_us);
                out.clear();
                q.pop_due(now, usize::MAX, &mut out);
                for (f, late) in &out {
                    let i = u32::from_le_bytes(f[..4].try_into().unwrap());
                    let (arrived, back) = arrivals[i as usize];
                    let d = usize::from(back);
                    prop_assert!(last[d].is_none_or(|l| l < i), "arrival order");
                    last[d] = Some(i);
                    let due = arrived + delay;
                    prop_assert!(due <= now, "released before due");
                    prop_assert_eq!(*late, now - due);
                    seen += 1;
                }
            }
            prop_assert_eq!(seen, gaps.len());
        }

        /// With a bottleneck, each direction's departures are at least one
        /// transmission time apart and at least the delay plus the
        /// transmission after arrival; what is accepted is released in order.
        #[test]
        fn the_rate_holds(frames in proptest::collection::vec((0u64..400, any::<bool>(), 40usize..1500), 1..300),
                          mbit in 1u64..200,
                          queue in 1_500usize..40_000) {
            let t0 = Instant::now();
            let delay = 5 * MS;
            let b = Bottleneck { bits_per_sec: mbit * 1_000_000, queue_bytes: queue };
            let mut q = DelayQueue::new(delay, usize::MAX).with_bottleneck(b);
            let mut t = t0;
            let mut accepted = Vec::new();
            for (i, (g, back, len)) in frames.iter().enumerate() {
                t += Duration::from_micros(*g);
                let dir = if *back { FromPeer } else { ToPeer };
                let mut f = vec![0u8; *len];
                f[..4].copy_from_slice(&(i as u32).to_le_bytes());
                if q.push(t, dir, &f) {
                    accepted.push(i);
                }
            }
            let st = q.stats();
            prop_assert_eq!(st.frames_in as usize, accepted.len());
            prop_assert_eq!(
                (st.bottleneck_to_peer.dropped + st.bottleneck_from_peer.dropped) as usize,
                frames.len() - accepted.len()
            );
            let mut out = Vec::new();
            q.pop_due(t + Duration::from_secs(3600), usize::MAX, &mut out);
            prop_assert_eq!(out.len(), accepted.len());
            let far = t + Duration::from_secs(3600);
            let mut prev: [Option<(u32, Instant)>; 2] = [None, None];
            let mut arrived = t0;
            let arrival: Vec<Instant> = frames.iter().map(|(g, _, _)| { arrived += Duration::from_micros(*g); arrived }).collect();
            for (f, late) in &out {
                let i = u32::from_le_bytes(f[..4].try_into().unwrap());
                let (_, back, len) = frames[i as usize];
                let due = far - *late;
                let tx = b.transmission(len);
                prop_assert!(due >= arrival[i as usize] + delay + tx);
                let d = usize::from(back);
                if let Some((p, pdue)) = prev[d] {
                    prop_assert!(p < i, "order");
                    prop_assert!(due >= pdue + tx, "spaced by the transmission time");
                }
                prev[d] = Some((i, due));
            }
        }
    }
}
