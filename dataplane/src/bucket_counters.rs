//! Per-RSS-bucket load of one queue, for the rebalancer (issue 13): what
//! each indirection-table entry's connections hold and received and the
//! worker time they cost, copied by the queue's worker (the only writer,
//! with the other TCP counters, every 50 ms) and read by anyone as a
//! snapshot.
//!
//! The stack counts per bucket as it looks up each segment's connection
//! ([`flowlane_tcp::Stack::bucket_stats`]); the data path gives it the
//! NIC's Toeplitz hash and table size ([`rss_bucket`]), so its buckets are
//! the NIC's. The stack reads no clock: the worker times one received
//! frame in [`SAMPLE_EVERY`] itself (from the frame's parse to the last
//! application callback it caused) and charges that bucket
//! (`BusySampler`), so a bucket's busy time is an unbiased estimate at
//! the cost of two clock reads per [`SAMPLE_EVERY`] frames. With them the
//! worker publishes its busy time up to the same moment (`PassClock`,
//! in its TCP counters): the rebalancer shares out one window's busy time
//! by one window's bucket figures.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use flowlane_numa_sched::toeplitz::{FlowTuple, Protocol};
use flowlane_numa_sched::RssState;
use flowlane_tcp::{FourTuple, Stack};
use serde::{Deserialize, Serialize};

use crate::counters;

/// One bucket's published figures.
#[derive(Debug, Default)]
struct Cell {
    connections: AtomicU64,
    time_wait: AtomicU64,
    segments_in: AtomicU64,
    bytes_in: AtomicU64,
    busy_ns: AtomicU64,
}

/// One queue's per-bucket counters (single writer: the queue's worker).
#[derive(Debug)]
pub struct BucketCounters {
    cells: Box<[Cell]>,
}

/// A bucket's figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketSnapshot {
    /// The indirection-table entry.
    pub bucket: u16,
    /// Live connections (TIME-WAIT records not included).
    pub connections: u64,
    /// TIME-WAIT records.
    pub time_wait: u64,
    /// Segments received for the bucket's connections and records.
    pub segments_in: u64,
    /// Payload bytes in those segments.
    pub bytes_in: u64,
    /// Nanoseconds of the worker's time the bucket's received frames cost
    /// (estimated from one frame in [`SAMPLE_EVERY`]; transmission and
    /// timers are not attributed to buckets).
    #[serde(default)]
    pub busy_ns: u64,
}

impl BucketCounters {
    /// Counters for `count` buckets, all zero.
    pub fn new(count: usize) -> BucketCounters {
        BucketCounters {
            cells: (0..count).map(|_| Cell::default()).collect(),
        }
    }

    /// Copies the stack's per-bucket figures and the sampled busy time
    /// (the worker).
    pub(crate) fn publish(&self, stack: &Stack, busy: &BusySampler) {
        for (b, cell) in self.cells.iter().enumerate() {
            let s = stack.bucket_stats(b as u16);
            counters::set(&cell.connections, u64::from(s.connections));
            counters::set(&cell.time_wait, u64::from(s.time_wait));
            counters::set(&cell.segments_in, s.segments_in);
            counters::set(&cell.bytes_in, s.bytes_in);
            counters::set(&cell.busy_ns, busy.ns.get(b).copied().unwrap_or(0));
        }
    }

    /// Every bucket that holds a connection or record or has received a
    /// segment, in bucket order.
    pub fn snapshot(&self) -> Vec<BucketSnapshot> {
        let load = |c: &AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        self.cells
            .iter()
            .enumerate()
            .map(|(b, c)| BucketSnapshot {
                bucket: b as u16,
                connections: load(&c.connections),
                time_wait: load(&c.time_wait),
                segments_in: load(&c.segments_in),
                bytes_in: load(&c.bytes_in),
                busy_ns: load(&c.busy_ns),
            })
            .filter(|s| s.connections + s.time_wait + s.segments_in != 0)
            .collect()
    }
}

/// Received frames per timed frame (the worker's busy-time sampler).
pub const SAMPLE_EVERY: u32 = 16;

/// A timed frame counts at most this many times the running mean.
const OUTLIER: u64 = 32;
/// ... and at most this (ns) while the mean is small.
const MIN_CAP: u64 = 50_000;

/// One worker's busy time per RSS bucket, estimated by timing one received
/// frame in [`SAMPLE_EVERY`] and charging that many times its cost to its
/// bucket (single owner: the worker).
#[derive(Debug)]
pub(crate) struct BusySampler {
    countdown: u32,
    /// Running mean of the timed frames' cost, ns (1/16 weight per frame).
    mean_ns: u64,
    /// Frames per timed frame: [`SAMPLE_EVERY`], or `u32::MAX` (about
    /// never) without buckets.
    every: u32,
    ns: Vec<u64>,
}

impl BusySampler {
    /// A sampler for `count` buckets; with one or none, nothing is timed
    /// (about never: once in 2^32 frames).
    pub(crate) fn new(count: usize) -> BusySampler {
        let every = if count > 1 { SAMPLE_EVERY } else { u32::MAX };
        BusySampler {
            countdown: every,
            mean_ns: 0,
            every,
            ns: vec![0; count],
        }
    }

    /// Called before each received frame: the time to charge from, for
    /// one frame in [`SAMPLE_EVERY`].
    #[inline]
    pub(crate) fn start(&mut self) -> Option<Instant> {
        self.countdown -= 1;
        if self.countdown != 0 {
            return None;
        }
        self.countdown = self.every;
        Some(Instant::now())
    }

    /// Charges `bucket` with `spent` on one timed frame, scaled to the
    /// frames it stands for. A frame timed at more than [`OUTLIER`] times
    /// the running mean (at least [`MIN_CAP`]) counts as that much: the
    /// excess is the thread being preempted, not the bucket's cost, and
    /// scaled by [`SAMPLE_EVERY`] one such frame would outweigh thousands.
    pub(crate) fn charge(&mut self, bucket: u16, spent: Duration) {
        let cap = self.mean_ns.saturating_mul(OUTLIER).max(MIN_CAP);
        let ns = (spent.as_nanos() as u64).min(cap);
        self.mean_ns = self.mean_ns - self.mean_ns / 16 + ns / 16;
        if let Some(n) = self.ns.get_mut(usize::from(bucket)) {
            *n += ns.saturating_mul(u64::from(self.every));
        }
    }
}

/// A worker's busy time as its handler sees it, for the rebalancer: the
/// time from the start of each pass that did work (received or sent a
/// frame, or took part in a move) to the start of the next. A pass that
/// found work is followed at once by the next (the worker sleeps only
/// after idle passes), so this is its loop's own measure (the queue's
/// `busy_ns`) less the passes that only reaped completions; unlike that
/// counter it is known to the handler, which publishes it at the moment
/// it publishes the bucket counters: both cover the same time.
#[derive(Debug, Default)]
pub(crate) struct PassClock {
    /// The current pass's start (the worker's clock).
    start: Duration,
    /// Whether it did work so far.
    worked: bool,
    /// Busy time of the passes before it.
    busy: Duration,
}

impl PassClock {
    /// Notes that the pass starting at `now` (the worker's clock: the
    /// same for every call of one pass) runs, and did work if `worked`.
    #[inline]
    pub(crate) fn note(&mut self, now: Duration, worked: bool) {
        if now != self.start {
            if self.worked {
                self.busy += now.saturating_sub(self.start);
            }
            self.start = now;
            self.worked = false;
        }
        self.worked |= worked;
    }

    /// The busy time of the passes before the current one, and the
    /// current one's start: the busy time up to that moment.
    pub(crate) fn busy_until_now(&self) -> (Duration, Duration) {
        (self.busy, self.start)
    }
}

/// The NIC's RSS bucket of a connection: its packets as they arrive (the
/// peer's address and port as source) through the Toeplitz hash and the
/// table's size.
pub fn rss_bucket(rss: &RssState, tuple: &FourTuple) -> u16 {
    let flow = FlowTuple {
        src: tuple.remote.ip(),
        dst: tuple.local.ip(),
        src_port: tuple.remote.port(),
        dst_port: tuple.local.port(),
        protocol: Protocol::Tcp,
    };
    // Tables hold at most 65 536 entries (`IndirectionTable::MAX_SIZE`).
    rss.table().bucket_for_hash(rss.hash(&flow)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_numa_sched::toeplitz::RssKey;

    #[test]
    fn buckets_follow_the_nic_hash_and_table() {
        let rss =
            crate::ephemeral::rss_state(RssKey::microsoft_default().as_bytes(), &[0, 1, 0, 1], 2)
                .expect("valid RSS");
        let tuple = FourTuple {
            local: "10.0.0.1:80".parse().expect("address"),
            remote: "10.0.0.2:12345".parse().expect("address"),
        };
        let flow = FlowTuple {
            src: tuple.remote.ip(),
            dst: tuple.local.ip(),
            src_port: 12345,
            dst_port: 80,
            protocol: Protocol::Tcp,
        };
        assert_eq!(
            usize::from(rss_bucket(&rss, &tuple)),
            rss.hint(&flow).bucket
        );
    }

    #[test]
    fn the_sampler_times_one_frame_in_sample_every_and_scales_it() {
        let mut s = BusySampler::new(4);
        let timed: Vec<Instant> = (0..3 * SAMPLE_EVERY).filter_map(|_| s.start()).collect();
        assert_eq!(timed.len(), 3);
        s.charge(2, Duration::from_micros(10));
        s.charge(2, Duration::from_micros(5));
        assert_eq!(s.ns, [0, 0, 15_000 * u64::from(SAMPLE_EVERY), 0]);
        // Out of range: ignored.
        s.charge(9, Duration::from_micros(10));
        // A preempted frame counts as 32 times the running mean at most.
        let mut p = BusySampler::new(2);
        for _ in 0..200 {
            p.charge(0, Duration::from_micros(2));
        }
        let before = p.ns[1];
        p.charge(1, Duration::from_millis(8));
        let added = (p.ns[1] - before) / u64::from(SAMPLE_EVERY);
        assert!((60_000..=64_000).contains(&added), "{added}");
        // A stack without buckets is never timed.
        let mut one = BusySampler::new(1);
        assert!((0..10 * SAMPLE_EVERY).all(|_| one.start().is_none()));
    }

    #[test]
    fn the_pass_clock_counts_passes_that_worked_to_the_next_start() {
        let ms = Duration::from_millis;
        let mut c = PassClock::default();
        // Pass at 10 ms: idle at first, a frame later in the pass.
        c.note(ms(10), false);
        c.note(ms(10), true);
        // Pass at 13 ms: idle; the 3 ms before it were busy.
        c.note(ms(13), false);
        assert_eq!(c.busy_until_now(), (ms(3), ms(13)));
        // The worker slept; an idle pass costs nothing, however long the
        // sleep after it.
        c.note(ms(40), true);
        assert_eq!(c.busy_until_now(), (ms(3), ms(40)));
        c.note(ms(41), false);
        c.note(ms(41), false);
        assert_eq!(c.busy_until_now(), (ms(4), ms(41)));
    }

    #[test]
    fn snapshot_lists_only_buckets_in_use() {
        let c = BucketCounters::new(8);
        assert!(c.snapshot().is_empty());
        counters::set(&c.cells[3].segments_in, 5);
        counters::set(&c.cells[3].bytes_in, 700);
        counters::set(&c.cells[6].connections, 1);
        let s = c.snapshot();
        assert_eq!(s.iter().map(|b| b.bucket).collect::<Vec<_>>(), [3, 6]);
        assert_eq!((s[0].segments_in, s[0].bytes_in), (5, 700));
    }
}
