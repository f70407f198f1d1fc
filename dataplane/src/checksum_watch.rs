//! A warning, once, when a TCP service receives only segments whose
//! checksum fails: what a sender on the same host sends through a veth
//! (a container's, a test bed's made by hand) while its transmit checksum
//! offload is on. The kernel hands such segments over with the checksum
//! unfinished (`CHECKSUM_PARTIAL`, finished only by a real NIC on the way
//! out), XDP sees them as they are, and flowlane drops every one, counted
//! (`bad_tcp_checksum`) but otherwise in silence: the service looks up and
//! no connection ever opens. Off the packet path: a thread that reads the
//! queues' counters once a second.

use std::sync::Arc;
use std::time::Duration;

use crate::stoppable_thread::{StopFlag, StoppableThread};
use crate::tcp_handler::TcpCounters;

/// How often the counters are read.
const PERIOD: Duration = Duration::from_secs(1);

/// Segments with a failed checksum in a row, no good one between them,
/// that make the warning: more than a corrupted frame or two (a single
/// client's SYN and its retransmissions, 1, 3 and 7 s later, are four).
const BAD_AT_LEAST: u64 = 4;

/// The thread that watches; stopped and joined on drop.
#[derive(Debug)]
pub(crate) struct ChecksumWatch {
    _thread: StoppableThread,
}

impl ChecksumWatch {
    /// Watches `queues`' counters of the service on `iface`; None when no
    /// thread could be started (nothing is watched then).
    pub(crate) fn start(iface: &str, queues: Vec<Arc<TcpCounters>>) -> Option<ChecksumWatch> {
        let iface = iface.to_string();
        StoppableThread::spawn("flowlane-csum", move |stop| watch(&iface, &queues, &stop))
            .ok()
            .map(|t| ChecksumWatch { _thread: t })
    }
}

/// Segments received with a failed TCP checksum, and good ones, over all
/// queues.
fn totals(queues: &[Arc<TcpCounters>]) -> (u64, u64) {
    queues
        .iter()
        .map(|q| q.snapshot())
        .fold((0, 0), |(bad, good), s| {
            (bad + s.bad_tcp_checksum, good + s.segments_in)
        })
}

/// The segments that failed their checksum since the last good one, after
/// a period in which `bad` failed and `good` passed (`streak` before it).
fn streak_after(streak: u64, bad: u64, good: u64) -> u64 {
    if good > 0 {
        0
    } else {
        streak + bad
    }
}

fn watch(iface: &str, queues: &[Arc<TcpCounters>], stop: &StopFlag) {
    let mut last = totals(queues);
    let mut streak = 0;
    while stop.sleep(PERIOD) {
        let now = totals(queues);
        streak = streak_after(streak, now.0 - last.0, now.1 - last.1);
        last = now;
        if streak >= BAD_AT_LEAST {
            tracing::warn!(
                "{iface}: every TCP segment received lately ({streak}) failed its checksum: a \
                 sender on this host through a veth with transmit checksum offload on hands \
                 them over unfinished; turn it off on that side (ethtool -K PEER tx off) or \
                 use the kernel-socket backend (counted as bad_tcp_checksum)"
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_checksums_count_until_a_good_segment() {
        // A client's SYN, then its retransmissions, none good.
        let mut s = 0;
        for bad in [1, 1, 0, 1, 0, 0, 0, 1] {
            s = streak_after(s, bad, 0);
        }
        assert!(s >= BAD_AT_LEAST);
        // Corruption among good segments never adds up.
        assert_eq!(streak_after(3, 100, 1), 0);
        assert_eq!(streak_after(0, 0, 0), 0);
    }
}
