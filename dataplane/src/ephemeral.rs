//! Local ports for active opens.
//!
//! A connection opened by a worker must get its replies on that worker's
//! queue, or another core's stack would answer them with RSTs. With the
//! NIC's RSS configuration known ([`RssState`]), the port is chosen among
//! those whose reply tuple `(remote → local:port)` hashes to this queue
//! ([`RssState::choose_source_port`]); without it (one queue, or a NIC
//! that steers by flow rules) among all the ports of the range.
//!
//! Which of them is RFC 6056 §3.3.4's double-hash algorithm: a keyed hash
//! of the destination (`F`, [`flowlane_tcp::Stack::port_hash`], under a key
//! derived from the service's secret, new every run) plus a counter of a
//! table slot that the same hash picks (`G`, `table[index]`) seeds the
//! draw, and [`pick_port`] draws uniformly among the ports that qualify
//! (reach this queue, and hold no connection or TIME-WAIT record for the
//! tuple), trying the whole range before it reports it exhausted. So no
//! one off path predicts a port (a blind RST or data injection needs it,
//! RFC 6056 §1), and a restarted service does not reopen the last run's
//! tuples, which a peer may still hold in TIME-WAIT (answering SYNs whose
//! new ISNs look old to it).

use std::net::{IpAddr, SocketAddr};

use flowlane_numa_sched::hints::pick_port;
use flowlane_numa_sched::indirection::IndirectionTable;
use flowlane_numa_sched::toeplitz::Protocol;
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_numa_sched::{PlacementPlan, QueuePlacement, RssHashConfig, RssState};

use crate::{Error, Result};

/// flowlane's ephemeral port range (inclusive) for active opens: the steering
/// program hands it to flowlane, and the test bed reserves it from the
/// kernel's own (`ip_local_reserved_ports`). 5 000 ports, of which a queue
/// of `q` gets about `5 000 / q` per destination (Linux draws from 28 232,
/// 32768–60999; RFC 6056 §3.2 would have all of 1024–65535): a service
/// sets another range with `TcpConfig::ephemeral` and
/// `DataplaneConfig::ephemeral`, the kernel's reserved ports covering it.
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

/// Bits of the destination's hash that pick its counter (RFC 6056
/// §3.3.4's `G`): a table of 256 counters per queue.
const COUNTER_BITS: u32 = 8;

/// Chooses local ports from flowlane's ephemeral range for one queue.
#[derive(Clone)]
pub struct EphemeralPorts {
    first: u16,
    last: u16,
    queue: u16,
    rss: Option<RssState>,
    /// RFC 6056 §3.3.4's `table`: counters, each moved on by every port
    /// chosen for a destination whose hash picks it, so that successive
    /// connections to one destination draw from different seeds.
    counters: Box<[u32; 1 << COUNTER_BITS]>,
}

/// The range and the queue; not the RSS key (a software steering key is
/// a secret) nor the counters.
impl std::fmt::Debug for EphemeralPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EphemeralPorts")
            .field("first", &self.first)
            .field("last", &self.last)
            .field("queue", &self.queue)
            .field("steered", &self.rss.is_some())
            .finish_non_exhaustive()
    }
}

impl EphemeralPorts {
    /// Ports `first..=last` for `queue`; `rss` steers replies to it.
    pub fn new(first: u16, last: u16, queue: u32, rss: Option<RssState>) -> EphemeralPorts {
        EphemeralPorts {
            first: first.max(1),
            last,
            queue: queue.min(u32::from(u16::MAX)) as u16,
            rss,
            counters: Box::new([0; 1 << COUNTER_BITS]),
        }
    }

    /// Whether replies can reach this queue at all: without RSS (one
    /// queue, or software steering by port), yes; with it, only while the
    /// indirection table gives the queue a bucket.
    pub fn steered_here(&self) -> bool {
        self.rss
            .as_ref()
            .is_none_or(|r| r.table().entries().contains(&self.queue))
    }

    /// Follows a change of the NIC's RSS (a bucket moved between queues):
    /// ports are chosen by the new table from now on.
    pub fn set_rss(&mut self, rss: RssState) {
        self.rss = Some(rss);
    }

    /// A port for a connection from `local` to `remote`: one whose replies
    /// reach this queue and that `is_free` accepts
    /// ([`flowlane_tcp::Stack::tuple_free`]: no connection or TIME-WAIT
    /// record holds the tuple), uniformly among those, drawn from `hash`,
    /// the destination's keyed hash ([`flowlane_tcp::Stack::port_hash`]).
    /// `None` only when no port of the range qualifies ("address in
    /// use").
    ///
    /// RFC 6056 §3.3.4: the seed is `F + table[G]`, `F` the hash and `G`
    /// its top bits (Linux, too, takes both from one keyed hash), and the
    /// counter moves on by one at every call.
    pub fn next(
        &mut self,
        local: IpAddr,
        remote: SocketAddr,
        hash: u64,
        is_free: impl Fn(u16) -> bool,
    ) -> Option<u16> {
        if self.first > self.last {
            return None;
        }
        let counter = &mut self.counters[(hash >> (64 - COUNTER_BITS)) as usize];
        let seed = hash.wrapping_add(u64::from(*counter));
        *counter = counter.wrapping_add(1);
        let range = self.first..=self.last;
        match &self.rss {
            Some(rss) => rss.choose_source_port(
                local,
                remote.ip(),
                remote.port(),
                Protocol::Tcp,
                self.queue,
                range,
                seed,
                is_free,
            ),
            None => pick_port(range, seed, is_free),
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
    use flowlane_tcp::{Config, Stack};

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

    /// Whether replies from `remote` to `local:port` reach queue `q`.
    fn reaches(state: &RssState, local: IpAddr, remote: SocketAddr, port: u16, q: u32) -> bool {
        let reply = FlowTuple {
            src: remote.ip(),
            dst: local,
            src_port: remote.port(),
            dst_port: port,
            protocol: Protocol::Tcp,
        };
        u32::from(state.hint(&reply).queue) == q
    }

    /// A stack keyed by `secret` (a service's), that asks for ports as a
    /// worker's does ([`crate::tcp_handler`]'s `connect`).
    fn stack(secret: u8) -> Stack {
        Stack::new(Config::new([secret; 16]))
    }

    /// A port for a connection to `remote`, asked of `ports` as a worker
    /// asks.
    fn port(
        stack: &Stack,
        ports: &mut EphemeralPorts,
        local: IpAddr,
        remote: SocketAddr,
    ) -> Option<u16> {
        ports.next(local, remote, stack.port_hash(local, remote), |p| {
            stack.tuple_free(SocketAddr::new(local, p), remote)
        })
    }

    fn ports_of(secret: u8, rss: Option<RssState>, n: usize) -> Vec<u16> {
        let s = stack(secret);
        let local: IpAddr = "10.99.0.1".parse().unwrap();
        let remote: SocketAddr = "10.99.0.2:443".parse().unwrap();
        let mut p = EphemeralPorts::new(EPHEMERAL.0, EPHEMERAL.1, 1, rss);
        (0..n)
            .map(|_| port(&s, &mut p, local, remote).unwrap())
            .collect()
    }

    #[test]
    fn ports_steer_replies_to_the_queue_for_both_families() {
        let state = rss(4);
        let s = stack(1);
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
                    let port = port(&s, &mut p, local, remote).unwrap();
                    assert!((40000..=44999).contains(&port));
                    seen.insert(port);
                    assert!(reaches(&state, local, remote, port, q), "{local}");
                }
                assert!(seen.len() > 10, "successive calls spread: {seen:?}");
            }
        }
    }

    /// The ports hang on the service's secret, new every run: another
    /// secret, other ports (a restart does not reopen the last run's
    /// tuples, and no one without the secret predicts them), with or
    /// without RSS; and they do not follow one another.
    #[test]
    fn ports_follow_the_secret_and_not_each_other() {
        for rss in [None, Some(rss(4))] {
            let a = ports_of(1, rss.clone(), 64);
            let b = ports_of(2, rss.clone(), 64);
            assert_eq!(a, ports_of(1, rss.clone(), 64), "the secret decides");
            let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
            assert!(same <= 2, "{same} of 64 the same: {a:?} {b:?}");
            let steps = |v: &[u16]| v.windows(2).filter(|w| w[1].abs_diff(w[0]) <= 8).count();
            assert!(steps(&a) <= 4 && steps(&b) <= 4, "close steps: {a:?}");
        }
    }

    /// Each of the queue's ports is about as likely as another (Pearson's
    /// chi-square under the mean plus six standard deviations), with fixed
    /// secrets (deterministic).
    #[test]
    fn ports_spread_uniformly_over_the_queues_ports() {
        let state = rss(4);
        let local: IpAddr = "10.99.0.1".parse().unwrap();
        let remote: SocketAddr = "10.99.0.2:443".parse().unwrap();
        let mine: Vec<u16> = (EPHEMERAL.0..=EPHEMERAL.1)
            .filter(|&p| reaches(&state, local, remote, p, 1))
            .collect();
        let mut counts = vec![0u64; mine.len()];
        for secret in 1..=4 {
            let s = stack(secret);
            let mut p = EphemeralPorts::new(EPHEMERAL.0, EPHEMERAL.1, 1, Some(state.clone()));
            for _ in 0..25 * mine.len() {
                // Every port free: where each draw lands.
                let hash = s.port_hash(local, remote);
                let port = p.next(local, remote, hash, |_| true).unwrap();
                counts[mine.binary_search(&port).unwrap()] += 1;
            }
        }
        let expected = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        let chi: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        let dof = counts.len() as f64 - 1.0;
        assert!(
            chi < dof + 6.0 * (2.0 * dof).sqrt(),
            "chi-square {chi:.0} over {} ports",
            mine.len()
        );
    }

    /// Connections open until every port of the queue holds one: "address
    /// in use" only then.
    #[test]
    fn every_port_of_the_queue_is_used_before_addr_in_use() {
        let state = rss(4);
        let local: IpAddr = "10.99.0.1".parse().unwrap();
        let remote: SocketAddr = "10.99.0.2:5001".parse().unwrap();
        let now = flowlane_tcp::time::Instant::from_millis(1);
        for q in [0u32, 3] {
            let usable = (EPHEMERAL.0..=EPHEMERAL.1)
                .filter(|&p| reaches(&state, local, remote, p, q))
                .count();
            let mut s = stack(5);
            let mut p = EphemeralPorts::new(EPHEMERAL.0, EPHEMERAL.1, q, Some(state.clone()));
            let mut opened = 0;
            while let Some(port) = port(&s, &mut p, local, remote) {
                s.connect(now, SocketAddr::new(local, port), remote)
                    .expect("a free port");
                opened += 1;
            }
            assert_eq!(opened, usable, "queue {q}");
            // Another destination still has them all.
            let other: SocketAddr = "10.99.0.3:5001".parse().unwrap();
            assert!(port(&s, &mut p, local, other).is_some());
        }
    }

    /// Without RSS every port of the range serves, each about as often,
    /// and not one after the other.
    #[test]
    fn without_rss_any_port_of_the_range() {
        let s = stack(1);
        let mut p = EphemeralPorts::new(40000, 40003, 0, None);
        let remote: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let mut counts = [0u32; 4];
        for _ in 0..400 {
            let port = port(&s, &mut p, local, remote).unwrap();
            counts[usize::from(port - 40000)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (60..=140).contains(&c)),
            "{counts:?}"
        );
        let all = ports_of(1, None, 1000);
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        // 1 000 uniform draws of 5 000 ports: about 906 distinct.
        assert!(distinct.len() > 850, "{} distinct", distinct.len());
        let ones = all.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(ones < 10, "{ones} steps of one");
        let mut empty = EphemeralPorts::new(5, 4, 0, None);
        assert_eq!(empty.next(local, remote, 0, |_| true), None);
    }
}
