//! When a service asks the C allocator to hand freed memory back to the
//! system.
//!
//! Each worker's stack gives the free buffer memory a busy spell left back
//! to the allocator as it lies idle (`Stack::trim_memory`), and the chunks
//! it frees past what it keeps at once; in queue-pair mode each core's
//! relay does the same with its pool of receive buffers (counted in its
//! `RelayMemoryCounters::returned`, which the trim adds to the stacks').
//! glibc keeps what is freed in its arenas: the process's resident memory
//! stays at the spell's peak until `malloc_trim` returns the whole free
//! pages. The service's control loop (`service_control`, not a worker: a
//! trim walks every arena and takes milliseconds on a heap of gigabytes)
//! asks for one once the queues together returned [`HeapTrim::AFTER`]
//! bytes since the last, at most every [`HeapTrim::EVERY`]: after a
//! burst, not at each connection's end. What the trims of the pools give
//! back after that trim (half of what lies idle each second, a few MiB in
//! all) seldom adds up to another [`HeapTrim::AFTER`]: once it stops
//! growing (nothing more given back between two looks) with at least
//! [`HeapTrim::SETTLE`] given back since the last trim, one more trim
//! hands it to the system, so that a spell's end settles to the same
//! memory whenever the spell ended.

use std::time::{Duration, Instant};

/// The heap trims a service made, and when the next may be.
#[derive(Debug)]
pub(crate) struct HeapTrim {
    /// The queues' `buffer_memory_returned` (and the relays' `returned`),
    /// summed, at the last trim.
    returned_at_last: u64,
    /// When the last trim was made (or the service started).
    last: Instant,
    /// When the queues' figure was last read.
    looked: Instant,
    /// The queues' figure as of that read.
    seen: u64,
    /// Trims made.
    pub(crate) trims: u64,
    /// Nanoseconds they took, together.
    pub(crate) trim_ns: u64,
}

impl HeapTrim {
    /// Bytes the stacks must have returned since the last trim.
    pub(crate) const AFTER: u64 = 16 << 20;
    /// The least time between two trims.
    pub(crate) const EVERY: Duration = Duration::from_secs(5);
    /// Bytes given back since the last trim for which a trim is made once
    /// the figure stopped growing (the pools' trims after a spell ended).
    pub(crate) const SETTLE: u64 = 1 << 20;
    /// How often the queues' figure is read once a trim may be made.
    const LOOK_EVERY: Duration = Duration::from_secs(1);

    /// No trim yet; the first may come [`HeapTrim::EVERY`] after `now`.
    pub(crate) fn new(now: Instant) -> Self {
        HeapTrim {
            returned_at_last: 0,
            last: now,
            looked: now,
            seen: 0,
            trims: 0,
            trim_ns: 0,
        }
    }

    /// Whether a trim is due at `now`, the queues having returned
    /// `returned` bytes in all since the service started: [`HeapTrim::AFTER`]
    /// since the last, or [`HeapTrim::SETTLE`] and nothing more since the
    /// previous look.
    pub(crate) fn due(&self, now: Instant, returned: u64) -> bool {
        let since = returned.saturating_sub(self.returned_at_last);
        now.saturating_duration_since(self.last) >= Self::EVERY
            && (since >= Self::AFTER || (since >= Self::SETTLE && returned == self.seen))
    }

    /// Trims the heap if [`HeapTrim::due`] (`trim` does it), counting it;
    /// `returned` reads the queues' figure, at most once a second (also
    /// within [`HeapTrim::EVERY`] of the last trim: whether it still grows
    /// is what [`HeapTrim::SETTLE`]'s trim waits for).
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        returned: impl FnOnce() -> u64,
        trim: impl FnOnce(),
    ) {
        if now.saturating_duration_since(self.looked) < Self::LOOK_EVERY {
            return;
        }
        self.looked = now;
        let returned = returned();
        let due = self.due(now, returned);
        self.seen = returned;
        if !due {
            return;
        }
        let began = Instant::now();
        trim();
        self.trim_ns += began.elapsed().as_nanos() as u64;
        self.trims += 1;
        self.returned_at_last = returned;
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_follows_enough_returned_memory_and_no_sooner_than_every() {
        let t0 = Instant::now();
        let mut h = HeapTrim::new(t0);
        let mut made = 0;
        let mut at = |h: &mut HeapTrim, secs: u64, returned: u64| {
            h.poll(t0 + Duration::from_secs(secs), || returned, || made += 1);
            made
        };
        assert_eq!(at(&mut h, 1, 1 << 30), 0, "not within EVERY of the start");
        assert_eq!(at(&mut h, 5, HeapTrim::AFTER - 1), 0, "not enough yet");
        assert_eq!(at(&mut h, 6, HeapTrim::AFTER), 1);
        assert_eq!(at(&mut h, 10, 4 * HeapTrim::AFTER), 1, "within EVERY");
        assert_eq!(at(&mut h, 11, 4 * HeapTrim::AFTER), 2);
        assert_eq!(at(&mut h, 30, 4 * HeapTrim::AFTER), 2, "nothing new since");
        assert_eq!(at(&mut h, 31, 5 * HeapTrim::AFTER), 3);
        assert_eq!(h.trims, 3);
    }

    /// What the pools give back after a spell's trim (under
    /// [`HeapTrim::AFTER`], over [`HeapTrim::SETTLE`]) is trimmed once it
    /// stops growing, not while it grows; less than `SETTLE` never.
    #[test]
    fn what_the_pools_give_back_after_a_spell_is_trimmed_once_it_settles() {
        let t0 = Instant::now();
        let mut h = HeapTrim::new(t0);
        let mut made = 0;
        let mut at = |h: &mut HeapTrim, secs: u64, returned: u64| {
            h.poll(t0 + Duration::from_secs(secs), || returned, || made += 1);
            made
        };
        let spell = HeapTrim::AFTER;
        assert_eq!(at(&mut h, 5, spell), 1, "the spell's end");
        // The pools' trims, halving what lies idle each second.
        let mut after = spell;
        for (s, more) in [(6, 2 << 20), (7, 1 << 20), (8, 1 << 19), (9, 1 << 18)] {
            after += more;
            assert_eq!(at(&mut h, s, after), 1, "still growing at {s} s");
        }
        let trims = at(&mut h, 10, after);
        eprintln!("trims once the pools' give-back settled: {trims}");
        assert_eq!(trims, 2, "settled: trimmed");
        // Less than SETTLE since: left alone.
        assert_eq!(at(&mut h, 20, after + HeapTrim::SETTLE - 1), 2);
        assert_eq!(at(&mut h, 21, after + HeapTrim::SETTLE - 1), 2);
    }
}
