//! Flow hints: which queue, CPU and NUMA node a flow lands on, predicted in software.
//!
//! This is the piece the RSS paper (shared/seeds/numa-rss-tcpip.txt) names as missing:
//! telling the application which node processed its flow, so that it can run next to its
//! data. Since the hash is the NIC's own (bit-exact Toeplitz, same key, same fields, same
//! table), the prediction holds before the first packet arrives — which also lets an
//! outgoing connection pick a source port whose replies land on the calling core.

use std::net::IpAddr;
use std::ops::RangeInclusive;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::indirection::IndirectionTable;
use crate::placement::PlacementPlan;
use crate::toeplitz::{FlowTuple, Protocol, RssHashConfig, RssKey, Toeplitz};

/// Where a flow's packets are received and processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct FlowHint {
    /// The Toeplitz hash the NIC computes.
    pub hash: u32,
    /// The indirection-table bucket it selects.
    pub bucket: usize,
    /// The receive queue.
    pub queue: u16,
    /// The CPU serving that queue.
    pub cpu: u32,
    /// The NUMA node of that CPU (and of the queue's packet memory).
    pub node: u32,
}

/// The NIC's RSS configuration together with the queue placement: everything needed to
/// predict where a flow goes.
///
/// Invariant: every queue the table points at has a placement.
#[derive(Clone, Debug)]
pub struct RssState {
    toeplitz: Toeplitz,
    table: IndirectionTable,
    hash_config: RssHashConfig,
    /// `(cpu, node)` by queue index.
    queue_cpu: Vec<Option<(u32, u32)>>,
}

impl RssState {
    /// Combines an RSS configuration with a placement.
    ///
    /// # Errors
    /// [`Error::QueueNotPlaced`] if the table points at a queue without a placement.
    pub fn new(
        key: &RssKey,
        table: IndirectionTable,
        hash_config: RssHashConfig,
        placement: &PlacementPlan,
    ) -> Result<Self> {
        let mut queue_cpu = Vec::new();
        for p in &placement.queues {
            let q = usize::from(p.queue);
            if queue_cpu.len() <= q {
                queue_cpu.resize(q + 1, None);
            }
            queue_cpu[q] = Some((p.cpu, p.node));
        }
        let state = Self {
            toeplitz: Toeplitz::new(key),
            table,
            hash_config,
            queue_cpu,
        };
        state.check_table(&state.table)?;
        Ok(state)
    }

    fn check_table(&self, table: &IndirectionTable) -> Result<()> {
        match table.entries().iter().find(|&&q| self.placed(q).is_none()) {
            Some(&queue) => Err(Error::QueueNotPlaced { queue }),
            None => Ok(()),
        }
    }

    fn placed(&self, queue: u16) -> Option<(u32, u32)> {
        self.queue_cpu.get(usize::from(queue)).copied().flatten()
    }

    /// Replaces the indirection table (after a rebalance).
    ///
    /// # Errors
    /// [`Error::QueueNotPlaced`] as for [`RssState::new`]; the state is then unchanged.
    pub fn set_table(&mut self, table: IndirectionTable) -> Result<()> {
        self.check_table(&table)?;
        self.table = table;
        Ok(())
    }

    /// The RSS key.
    #[must_use]
    pub fn key(&self) -> &RssKey {
        self.toeplitz.key()
    }

    /// The hasher built from the key.
    #[must_use]
    pub fn toeplitz(&self) -> &Toeplitz {
        &self.toeplitz
    }

    /// The indirection table.
    #[must_use]
    pub fn table(&self) -> &IndirectionTable {
        &self.table
    }

    /// The hash fields per flow type.
    #[must_use]
    pub fn hash_config(&self) -> &RssHashConfig {
        &self.hash_config
    }

    /// The NIC's hash of `flow`, oriented as its packets arrive at the NIC.
    #[must_use]
    pub fn hash(&self, flow: &FlowTuple) -> u32 {
        self.toeplitz
            .hash(flow.hash_input_for(&self.hash_config).as_bytes())
    }

    /// Where the packets of `flow` are received. `flow` is the tuple as it arrives at the
    /// NIC: `src` is the remote peer, `dst` the local address (for a local connection's
    /// outgoing 5-tuple, pass [`FlowTuple::reversed`]).
    #[must_use]
    pub fn hint(&self, flow: &FlowTuple) -> FlowHint {
        let hash = self.hash(flow);
        let bucket = self.table.bucket_for_hash(hash);
        let queue = self.table.entries()[bucket];
        // Invariant: every queue in the table is placed.
        let (cpu, node) = self.placed(queue).unwrap_or((u32::MAX, u32::MAX));
        FlowHint {
            hash,
            bucket,
            queue,
            cpu,
            node,
        }
    }

    /// Picks a local port for an outgoing connection so that its replies — the tuple
    /// `(src = remote_ip:remote_port, dst = local_ip:port)` — land on `desired_queue`.
    ///
    /// The port is drawn by [`pick_port`] from `seed`: uniformly among the ports of
    /// `port_range` that hash to a bucket of `desired_queue` and that `is_free` accepts,
    /// and found whenever one exists. `None` if no port qualifies: the queue has no bucket,
    /// the range is exhausted, or the protocol is hashed without ports and the addresses
    /// alone map elsewhere. The ports are only as unpredictable as `seed`: a secret keyed
    /// hash of the destination and a counter (RFC 6056 §3.3.4), not a public value.
    ///
    /// With the port as the only unknown, the hash is `H(tuple with port 0) ^ H(port bytes)`
    /// (Toeplitz is linear), so each candidate costs two table lookups.
    #[allow(clippy::too_many_arguments)]
    pub fn choose_source_port(
        &self,
        local_ip: IpAddr,
        remote_ip: IpAddr,
        remote_port: u16,
        protocol: Protocol,
        desired_queue: u16,
        port_range: RangeInclusive<u16>,
        seed: u64,
        is_free: impl Fn(u16) -> bool,
    ) -> Option<u16> {
        let (first, last) = (*port_range.start(), *port_range.end());
        if first > last || !self.table.entries().contains(&desired_queue) {
            return None;
        }
        let reply = FlowTuple {
            src: remote_ip,
            dst: local_ip,
            src_port: remote_port,
            dst_port: 0,
            protocol,
        };
        let input = reply.hash_input_for(&self.hash_config);
        let base = self.toeplitz.hash(input.as_bytes());
        let with_ports = self
            .hash_config
            .fields_for(protocol, reply.is_ipv6())
            .with_ports();
        if !with_ports {
            return (self.table.queue_for_hash(base) == desired_queue)
                .then(|| pick_port(port_range, seed, is_free))
                .flatten();
        }
        // The destination port is the input's last two bytes.
        let pos = input.as_bytes().len() - 2;
        pick_port(port_range, seed, |port| {
            let [hi, lo] = port.to_be_bytes();
            let hash = base
                ^ self.toeplitz.byte_contribution(pos, hi)
                ^ self.toeplitz.byte_contribution(pos + 1, lo);
            self.table.queue_for_hash(hash) == desired_queue && is_free(port)
        })
    }
}

/// Random probes [`pick_port`] makes before it scans the range: a queue among `q` owns
/// about one port in `q`, so with up to 64 queues and the range at most half taken, the
/// probes miss (and the scan runs) once in about 3 000 picks.
pub const PORT_PROBES: u32 = 1024;

/// A port of `range` that `qualifies` (steers replies to the right queue, is free):
/// uniformly among those that do, and `None` only when none does.
///
/// [`PORT_PROBES`] probes at ports drawn from `seed` (the outputs of a SplitMix64
/// generator seeded with it, mapped onto the range by multiply-shift, a bias below
/// `len / 2^32`) take the first that qualifies: rejection sampling, so each qualifying
/// port is as likely as another, whatever the gaps between them. Should every probe
/// miss (a range nearly exhausted), every port is tried once, from a point the same
/// generator draws, so that a free port is found while one is left (RFC 6056 §3.3.4
/// tries the whole range before giving up).
///
/// The choice is only as unpredictable as `seed`: RFC 6056 §3.3.4 makes it a keyed hash
/// of the destination (secret, new with every secret) plus a counter per destination, so
/// that no one off path predicts a port, and successive connections to one destination
/// take different ports.
pub fn pick_port(
    range: RangeInclusive<u16>,
    seed: u64,
    qualifies: impl Fn(u16) -> bool,
) -> Option<u16> {
    let (first, last) = (*range.start(), *range.end());
    if first > last {
        return None;
    }
    let len = u64::from(last - first) + 1;
    let mut state = seed;
    let mut draw = || {
        state = state.wrapping_add(GOLDEN_GAMMA);
        // The high 32 bits times the length, over 2^32: an offset below `len`.
        (((mix64(state) >> 32) * len) >> 32) as u16
    };
    for _ in 0..PORT_PROBES {
        let port = first + draw();
        if qualifies(port) {
            return Some(port);
        }
    }
    let start = u64::from(draw());
    (0..len)
        .map(|i| first + ((start + i) % len) as u16)
        .find(|&port| qualifies(port))
}

/// SplitMix64's increment (Steele, Lea, Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): 2^64 over the golden ratio, odd.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function (the same paper): a bijective mix of the generator's state.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::plan_placement;
    use crate::topology::Topology;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// Two nodes of two cores; 4 queues on CPUs 0, 1 (node 0) and 2, 3 (node 1).
    fn state(config: RssHashConfig) -> RssState {
        let topo = Topology::synthetic(2, 1, 2, 1).unwrap();
        let placement = plan_placement(&topo, Some(0), 4, None, &[]).unwrap();
        let table = IndirectionTable::even(128, &[0, 1, 2, 3]).unwrap();
        RssState::new(&RssKey::microsoft_default(), table, config, &placement).unwrap()
    }

    #[test]
    fn hint_follows_hash_table_and_placement() {
        let s = state(RssHashConfig::default());
        // Microsoft vector 1: 66.9.149.187:2794 -> 161.142.100.80:1766, hash 0x51ccc178.
        let flow = FlowTuple {
            src: IpAddr::V4(Ipv4Addr::new(66, 9, 149, 187)),
            dst: IpAddr::V4(Ipv4Addr::new(161, 142, 100, 80)),
            src_port: 2794,
            dst_port: 1766,
            protocol: Protocol::Tcp,
        };
        let hint = s.hint(&flow);
        assert_eq!(hint.hash, 0x51cc_c178);
        assert_eq!(hint.bucket, 0x78);
        assert_eq!(hint.queue, (0x78 % 4) as u16);
        assert_eq!((hint.cpu, hint.node), (0, 0));
        // Hashed on addresses only under the common NIC default for UDP.
        let udp = FlowTuple {
            protocol: Protocol::Udp,
            ..flow
        };
        assert_eq!(
            state(RssHashConfig::tcp_four_udp_two()).hint(&udp).hash,
            0x323e_8fc2
        );
    }

    #[test]
    fn table_must_be_covered_by_placement() {
        let topo = Topology::synthetic(1, 1, 2, 1).unwrap();
        let placement = plan_placement(&topo, Some(0), 2, None, &[]).unwrap();
        let key = RssKey::microsoft_default();
        let table = IndirectionTable::even(64, &[0, 1, 2]).unwrap();
        assert_eq!(
            RssState::new(&key, table.clone(), RssHashConfig::default(), &placement).unwrap_err(),
            Error::QueueNotPlaced { queue: 2 }
        );
        let good = IndirectionTable::even(64, &[1]).unwrap();
        let mut s =
            RssState::new(&key, good.clone(), RssHashConfig::default(), &placement).unwrap();
        assert_eq!(s.set_table(table), Err(Error::QueueNotPlaced { queue: 2 }));
        assert_eq!(s.table(), &good);
        assert_eq!(s.key(), &key);
    }

    #[test]
    fn chosen_ports_hint_to_the_desired_queue() {
        let s = state(RssHashConfig::default());
        let local = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let remote = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let mut chosen = BTreeSet::new();
        for seed in 0..200u64 {
            let queue = (seed % 4) as u16;
            let port = s
                .choose_source_port(
                    local,
                    remote,
                    5201,
                    Protocol::Tcp,
                    queue,
                    32768..=60999,
                    seed,
                    |p| p % 7 != 0,
                )
                .unwrap();
            assert!((32768..=60999).contains(&port) && port % 7 != 0);
            let reply = FlowTuple {
                src: remote,
                dst: local,
                src_port: 5201,
                dst_port: port,
                protocol: Protocol::Tcp,
            };
            assert_eq!(s.hint(&reply).queue, queue);
            chosen.insert(port);
        }
        assert!(
            chosen.len() > 150,
            "ports do not spread: {} distinct",
            chosen.len()
        );
        // A queue without buckets cannot be reached.
        assert_eq!(
            s.choose_source_port(local, remote, 80, Protocol::Tcp, 9, 1..=65535, 0, |_| true),
            None
        );
        assert_eq!(
            s.choose_source_port(local, remote, 80, Protocol::Tcp, 0, 1..=65535, 0, |_| false),
            None
        );
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 10..=9;
        assert_eq!(
            s.choose_source_port(local, remote, 80, Protocol::Tcp, 0, empty, 0, |_| true),
            None
        );
    }

    #[test]
    fn port_choice_without_ports_in_hash() {
        let s = state(RssHashConfig::tcp_four_udp_two());
        let local = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let remote = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let reply = FlowTuple {
            src: remote,
            dst: local,
            src_port: 53,
            dst_port: 0,
            protocol: Protocol::Udp,
        };
        let queue = s.hint(&reply).queue;
        for q in 0..4 {
            let got =
                s.choose_source_port(local, remote, 53, Protocol::Udp, q, 1000..=2000, 5, |_| {
                    true
                });
            assert_eq!(got.is_some(), q == queue, "queue {q}");
        }
    }

    /// Pearson's chi-square of `counts` against a uniform spread of their sum.
    fn chi_square(counts: &[u64]) -> f64 {
        let expected = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    }

    /// The local ports of `range` whose replies from `remote:443` to `local` reach `queue`.
    fn ports_reaching(
        s: &RssState,
        local: IpAddr,
        remote: IpAddr,
        queue: u16,
        range: RangeInclusive<u16>,
    ) -> Vec<u16> {
        range
            .filter(|&p| {
                let reply = FlowTuple {
                    src: remote,
                    dst: local,
                    src_port: 443,
                    dst_port: p,
                    protocol: Protocol::Tcp,
                };
                s.hint(&reply).queue == queue
            })
            .collect()
    }

    /// A bound a uniform spread over `cells` stays under: the chi-square
    /// distribution's mean (its degrees of freedom) plus six standard deviations.
    fn uniform_bound(cells: usize) -> f64 {
        let dof = cells as f64 - 1.0;
        dof + 6.0 * (2.0 * dof).sqrt()
    }

    /// Each port of the queue is as likely as another: not the port after a random
    /// point, which favours the ports that follow a long run of other queues' ports
    /// (with 4 queues some gaps are 1 port long, some 15).
    #[test]
    fn chosen_ports_are_uniform_among_the_queues_ports() {
        let s = state(RssHashConfig::default());
        let local = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1));
        let remote = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2));
        let (first, last) = (40000u16, 40999u16);
        for queue in 0..4u16 {
            let mine = ports_reaching(&s, local, remote, queue, first..=last);
            let mut counts = vec![0u64; mine.len()];
            // Fixed seeds: the test is deterministic.
            for seed in 0..200 * mine.len() as u64 {
                let p = s
                    .choose_source_port(
                        local,
                        remote,
                        443,
                        Protocol::Tcp,
                        queue,
                        first..=last,
                        seed.wrapping_mul(0x2545_f491_4f6c_dd1d),
                        |_| true,
                    )
                    .unwrap();
                counts[mine.binary_search(&p).unwrap()] += 1;
            }
            let chi = chi_square(&counts);
            assert!(
                chi < uniform_bound(mine.len()),
                "queue {queue}: chi-square {chi:.0} over {} ports",
                mine.len()
            );
        }
    }

    /// Without steering (every port reaches the queue) the choice is uniform over the
    /// range, and successive seeds do not give successive ports.
    #[test]
    fn picked_ports_are_uniform_and_not_sequential() {
        let range = 40000u16..=40099;
        let mut counts = vec![0u64; 100];
        let mut steps_of_one = 0;
        let mut last = None;
        for seed in 0..100_000u64 {
            let p = pick_port(range.clone(), seed, |_| true).unwrap();
            counts[usize::from(p - 40000)] += 1;
            steps_of_one += u32::from(last.map(|l: u16| l.wrapping_add(1)) == Some(p));
            last = Some(p);
        }
        assert!(chi_square(&counts) < uniform_bound(100), "{counts:?}");
        // About one in 100 by chance.
        assert!(steps_of_one < 2_000, "{steps_of_one} steps of one");
    }

    /// A free port is found while one is left, however few: the last free port of a
    /// range, and of the ports that reach the queue.
    #[test]
    fn the_last_free_port_is_found() {
        let s = state(RssHashConfig::default());
        let local = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1));
        let remote = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2));
        for seed in 0..50u64 {
            let only = 40000 + (seed as u16 * 97) % 5000;
            assert_eq!(pick_port(40000..=44999, seed, |p| p == only), Some(only));
            assert_eq!(pick_port(40000..=44999, seed, |_| false), None);
            let queue = (seed % 4) as u16;
            let reaches = ports_reaching(&s, local, remote, queue, 40000..=44999);
            let only = reaches[(seed as usize * 31) % reaches.len()];
            let got = s.choose_source_port(
                local,
                remote,
                443,
                Protocol::Tcp,
                queue,
                40000..=44999,
                seed,
                |p| p == only,
            );
            assert_eq!(got, Some(only));
        }
    }

    proptest! {
        /// A port is returned exactly when one qualifies, and it qualifies.
        #[test]
        fn prop_choose_source_port_is_exact(
            local in any::<[u8; 16]>(),
            remote in any::<[u8; 16]>(),
            v6 in any::<bool>(),
            remote_port in any::<u16>(),
            queue in 0u16..4,
            start in any::<u16>(),
            span in 0u16..64,
            seed in any::<u64>(),
            free_mod in 1u16..5,
        ) {
            let s = state(RssHashConfig::default());
            let addr = |b: [u8; 16]| if v6 {
                IpAddr::V6(Ipv6Addr::from(b))
            } else {
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            };
            let (local, remote) = (addr(local), addr(remote));
            let end = start.saturating_add(span);
            let is_free = |p: u16| p % free_mod == 0;
            let reaches = |p: u16| {
                let reply = FlowTuple { src: remote, dst: local, src_port: remote_port, dst_port: p, protocol: Protocol::Tcp };
                s.hint(&reply).queue == queue
            };
            let got = s.choose_source_port(local, remote, remote_port, Protocol::Tcp, queue, start..=end, seed, is_free);
            let exists = (start..=end).any(|p| is_free(p) && reaches(p));
            prop_assert_eq!(got.is_some(), exists);
            if let Some(p) = got {
                prop_assert!((start..=end).contains(&p) && is_free(p) && reaches(p));
            }
        }
    }
}
