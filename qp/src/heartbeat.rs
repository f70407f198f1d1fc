//! An application thread's heartbeat: when it last showed progress (a
//! pass ended, or a handler's call began), on the coarse monotonic clock;
//! stored by the thread, read by the network cores' relays, which tell by
//! it a stalled thread (stuck in one call) from a busy one (many calls).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

/// Now, in nanoseconds of the coarse monotonic clock: a few nanoseconds to
/// read, fine to a kernel tick (1 to 10 ms), ample against stall limits of
/// a fraction of a second and more.
pub(crate) fn coarse_now() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC_COARSE)
        .or_else(|_| clock_gettime(ClockId::CLOCK_MONOTONIC))
        .map_or(0, |t| {
            (t.tv_sec() as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(t.tv_nsec() as u64)
        })
}

/// One application thread's heartbeat, shared by the thread and the
/// relays.
#[derive(Clone, Debug)]
pub(crate) struct Heartbeat(Arc<AtomicU64>);

impl Heartbeat {
    /// A heartbeat that beat now.
    pub(crate) fn new() -> Heartbeat {
        Heartbeat(Arc::new(AtomicU64::new(coarse_now())))
    }

    /// The thread shows progress. Stored only when the coarse clock moved
    /// on (once a tick at most), so that a thread beating at each event
    /// seldom takes back the cache line the relays read.
    pub(crate) fn beat(&self) {
        let now = coarse_now();
        if self.0.load(Ordering::Relaxed) != now {
            self.0.store(now, Ordering::Relaxed);
        }
    }

    /// Whether the thread showed progress within `limit` before `now`
    /// ([`coarse_now`]).
    pub(crate) fn fresh(&self, now: u64, limit: Duration) -> bool {
        let limit = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        now.saturating_sub(self.0.load(Ordering::Relaxed)) <= limit
    }
}
