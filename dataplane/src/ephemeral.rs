//! Local ports for active opens.
//!
//! A connection opened by a worker must get its replies on that worker's
//! queue, or another core's stack would answer them with RSTs. With the
//! NIC's RSS configuration known ([`RssState`]), the port is chosen so that
//! the reply tuple `(remote → local:port)` hashes to this queue
//! ([`RssState::choose_source_port`]); without it (one queue, or a NIC
//! that steers by flow rules) any port of the range will do.

use std::net::{IpAddr, SocketAddr};

use flowlane_numa_sched::indirection::IndirectionTable;
use flowlane_numa_sched::toeplitz::Protocol;
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_numa_sched::{PlacementPlan, QueuePlacement, RssHashConfig, RssState};

use crate::{Error, Result};

/// flowlane's ephemeral port range (inclusive) for active opens: the steering
/// program hands it to flowlane, and the test bed reserves it from the
/// kernel's own (`ip_local_reserved_ports`).
pub const EPHEMERAL: (u16, u16) = (40000, 44999);

/// Whether the kernel's reserved ports (`net.ipv4.ip_local_reserved_ports`:
/// `a,b-c,…`) hold every port of `lo..=hi`.
pub fn reserved_covers(reserved: &str, lo: u16, hi: u16) -> bool {
    let mut ranges: Vec<(u32, u32)> = reserved
        .trim()
        .split(',')
        .filter_map(|part| {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        })
        .collect();
    ranges.sort_unstable();
    let mut next = u32::from(lo);
    for (a, b) in ranges {
        if a > next {
            break;
        }
        next = next.max(b + 1);
        if next > u32::from(hi) {
            return true;
        }
    }
    next > u32::from(hi)
}

/// Chooses local ports from flowlane's ephemeral range for one queue.
#[derive(Debug, Clone)]
pub struct EphemeralPorts {
    first: u16,
    last: u16,
    queue: u16,
    rss: Option<RssState>,
    seed: u64,
}

impl EphemeralPorts {
    /// Ports `first..=last` for `queue`; `rss` steers replies to it.
    pub fn new(first: u16, last: u16, queue: u32, rss: Option<RssState>) -> EphemeralPorts {
        EphemeralPorts {
            first: first.max(1),
            last,
            queue: queue.min(u32::from(u16::MAX)) as u16,
            rss,
            // Different queues start at different points of the range.
            seed: u64::from(queue).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        }
    }

    /// Follows a change of the NIC's RSS (a bucket moved between queues):
    /// ports are chosen by the new table from now on.
    pub fn set_rss(&mut self, rss: RssState) {
        self.rss = Some(rss);
    }

    /// The next candidate port for a connection from `local` to `remote`:
    /// successive calls return different ports (a caller whose connect
    /// fails with "address in use" asks again). `None` if no port of the
    /// range steers replies to this queue.
    pub fn next(&mut self, local: IpAddr, remote: SocketAddr) -> Option<u16> {
        if self.first > self.last {
            return None;
        }
        self.seed = self.seed.wrapping_add(1);
        match &self.rss {
            Some(rss) => rss.choose_source_port(
                local,
                remote.ip(),
                remote.port(),
                Protocol::Tcp,
                self.queue,
                self.first..=self.last,
                self.seed,
                |_| true,
            ),
            None => {
                let span = u64::from(self.last - self.first) + 1;
                Some(self.first + (self.seed % span) as u16)
            }
        }
    }
}

/// The NIC's RSS (`key`, indirection `table`) as the [`RssState`] that
/// active opens pick their ports by, for `queues` served queues (placement is
/// irrelevant to the port choice: queue q on "CPU" q, node 0).
pub fn rss_state(key: &[u8], table: &[u32], queues: u32) -> Result<RssState> {
    let bad = |e: flowlane_numa_sched::Error| Error::Rss(e);
    let max_q = table
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(queues.saturating_sub(1));
    let plan = PlacementPlan {
        nic_node: None,
        queues: (0..=max_q as u16)
            .map(|q| QueuePlacement {
                queue: q,
                cpu: u32::from(q),
                core_id: u32::from(q),
                node: 0,
                mem_node: 0,
            })
            .collect(),
        notes: Vec::new(),
    };
    let table = IndirectionTable::new(table.iter().map(|&q| q as u16).collect()).map_err(bad)?;
    let key = RssKey::new(key.to_vec()).map_err(bad)?;
    RssState::new(&key, table, RssHashConfig::default(), &plan).map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_numa_sched::toeplitz::{FlowTuple, RssKey};
    use flowlane_numa_sched::IndirectionTable;

    #[test]
    fn the_reserved_ports_must_hold_the_whole_range() {
        assert!(reserved_covers("40000-44999\n", 40000, 44999));
        assert!(reserved_covers("80,40000-42000,42001-44999", 40000, 44999));
        assert!(reserved_covers("30000-50000", 40000, 44999));
        assert!(!reserved_covers("", 40000, 44999));
        assert!(!reserved_covers("\n", 40000, 44999));
        assert!(!reserved_covers("40000-44998", 40000, 44999));
        assert!(!reserved_covers("40000-41000,41002-44999", 40000, 44999));
        assert!(!reserved_covers("40001-44999", 40000, 44999));
        assert!(reserved_covers("40000,40001-44999", 40000, 44999));
        assert!(reserved_covers("65535", 65535, 65535));
    }

    fn rss(queues: u16) -> RssState {
        let table = IndirectionTable::even(128, &(0..queues).collect::<Vec<_>>()).unwrap();
        rss_state(
            RssKey::microsoft_default().as_bytes(),
            &table.to_queue_list(),
            u32::from(queues),
        )
        .unwrap()
    }

    #[test]
    fn ports_steer_replies_to_the_queue_for_both_families() {
        let state = rss(4);
        for (local, remote) in [
            ("10.99.0.1", "10.99.0.2:5001"),
            ("fd99::1", "[fd99::2]:5001"),
        ] {
            let local: IpAddr = local.parse().unwrap();
            let remote: SocketAddr = remote.parse().unwrap();
            for q in 0..4u32 {
                let mut p = EphemeralPorts::new(40000, 44999, q, Some(state.clone()));
                let mut seen = std::collections::BTreeSet::new();
                for _ in 0..20 {
                    let port = p.next(local, remote).unwrap();
                    assert!((40000..=44999).contains(&port));
                    seen.insert(port);
                    let reply = FlowTuple {
                        src: remote.ip(),
                        dst: local,
                        src_port: remote.port(),
                        dst_port: port,
                        protocol: Protocol::Tcp,
                    };
                    assert_eq!(u32::from(state.hint(&reply).queue), q, "{local}");
                }
                assert!(seen.len() > 10, "successive calls spread: {seen:?}");
            }
        }
    }

    #[test]
    fn without_rss_any_port_of_the_range() {
        let mut p = EphemeralPorts::new(40000, 40003, 0, None);
        let remote: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..10 {
            let port = p.next(local, remote).unwrap();
            assert!((40000..=40003).contains(&port));
        }
        let mut empty = EphemeralPorts::new(5, 4, 0, None);
        assert_eq!(empty.next(local, remote), None);
    }
}
