//! `--idle-timeout`: connections that go too long without a byte either way
//! are closed, so that idle or stalled peers do not hold a service's
//! connection slots (a listener's are bounded: a peer that opened them all
//! and sent nothing would otherwise lock it for good).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use flowlane_app::{ConnHandle, ConnMap};
use serde::Serialize;

/// How often idle connections are looked for.
pub(super) const SWEEP: Duration = Duration::from_secs(1);

/// `--idle-timeout SECS` as a limit: 0 is none.
pub(super) fn limit(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// Connections a service closed for `--idle-timeout`, over all its cores
/// (the summary's `application`, for the services that count nothing else).
#[derive(Debug, Default, Serialize)]
pub(super) struct IdleCounters {
    /// Connections closed after `--idle-timeout` without a byte either way.
    pub(super) idle_closed: AtomicU64,
}

/// Finds the connections idle past a limit, at most once a second.
#[derive(Debug)]
pub(super) struct IdleSweep {
    limit: Option<Duration>,
    last: Duration,
}

impl IdleSweep {
    /// Connections idle longer than `limit` are due; none without one.
    pub(super) fn new(limit: Option<Duration>) -> IdleSweep {
        IdleSweep {
            limit,
            last: Duration::ZERO,
        }
    }

    /// The limit (None: none).
    pub(super) fn limit(&self) -> Option<Duration> {
        self.limit
    }

    /// The connections of `conns` whose last byte either way (`active`
    /// reads it off their state) is older than the limit at `now`; empty
    /// without a limit or within a second of the last look.
    pub(super) fn due<T>(
        &mut self,
        now: Duration,
        conns: &ConnMap<T>,
        active: impl Fn(&T) -> Duration,
    ) -> Vec<ConnHandle> {
        self.due_within(now, conns, active, Duration::ZERO)
    }

    /// As [`IdleSweep::due`], with the connections due within `ahead` of
    /// `now` too: for a service that looks at them before their deadline
    /// (for bytes that moved where `active` does not see them) and checks
    /// which are due itself.
    pub(super) fn due_within<T>(
        &mut self,
        now: Duration,
        conns: &ConnMap<T>,
        active: impl Fn(&T) -> Duration,
        ahead: Duration,
    ) -> Vec<ConnHandle> {
        let Some(limit) = self.limit else {
            return Vec::new();
        };
        if now.saturating_sub(self.last) < SWEEP {
            return Vec::new();
        }
        self.last = now;
        conns
            .iter()
            .filter(|(_, st)| now.saturating_sub(active(st)).saturating_add(ahead) > limit)
            .map(|(conn, _)| conn)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn past_the_limit_is_due_once_a_second_at_most() {
        let mut conns = ConnMap::new();
        let (a, b) = (ConnHandle::from_parts(0, 0), ConnHandle::from_parts(1, 0));
        conns.insert(a, secs(10));
        conns.insert(b, secs(50));
        let mut sweep = IdleSweep::new(limit(30));
        assert_eq!(sweep.due(secs(41), &conns, |t| *t), [a]);
        assert!(
            sweep
                .due(secs(40) + Duration::from_millis(500), &conns, |t| *t)
                .is_empty(),
            "within a second of the last look"
        );
        assert_eq!(sweep.due(secs(81), &conns, |t| *t), [a, b]);
        let mut never = IdleSweep::new(limit(0));
        assert!(never.due(secs(10_000), &conns, |t| *t).is_empty());
    }

    #[test]
    fn due_within_adds_those_due_soon() {
        let mut conns = ConnMap::new();
        let (a, b) = (ConnHandle::from_parts(0, 0), ConnHandle::from_parts(1, 0));
        conns.insert(a, secs(10));
        conns.insert(b, secs(20));
        let mut sweep = IdleSweep::new(limit(30));
        assert_eq!(sweep.due_within(secs(39), &conns, |t| *t, secs(2)), [a]);
        assert!(sweep
            .due_within(
                secs(39) + Duration::from_millis(500),
                &conns,
                |t| *t,
                secs(2)
            )
            .is_empty());
        assert_eq!(sweep.due_within(secs(49), &conns, |t| *t, secs(2)), [a, b]);
    }
}
