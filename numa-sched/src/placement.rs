//! Queue → CPU → NUMA node placement.
//!
//! The rules follow from how RSS pays off (see shared/seeds/numa-rss-tcpip.txt): interrupts
//! and protocol processing belong on processors of the NIC's node, spread so that no two
//! queues compete for one processor, and each queue's packet memory belongs to the node of
//! the core that touches it.
//!
//! 1. CPUs of the NIC's NUMA node first; other nodes only once the NIC's node has no allowed
//!    CPU left, nearest first (by the distance matrix if the snapshot has one, else by
//!    index). Each queue placed off the NIC's node is reported ([`PlacementNote::RemoteNode`]).
//! 2. Within a node, one thread of every physical core before any second thread (SMT
//!    siblings share execution units and L1/L2), counting only allowed threads (a core
//!    whose first thread is reserved or outside the budget is idle, and its next thread
//!    comes in the first round), and successive cores taken round-robin over the node's L3
//!    caches when the snapshot knows them (nodes with several L3s, such as AMD CCDs).
//! 3. Never the same logical CPU twice; never a CPU outside the budget or reserved.
//! 4. Packet memory on the node of the queue's CPU.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::topology::Topology;

/// Where one receive queue is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct QueuePlacement {
    /// The NIC receive queue (and its AF_XDP socket, worker and IRQ).
    pub queue: u16,
    /// The logical CPU of its worker (and IRQ).
    pub cpu: u32,
    /// The physical core of `cpu`.
    pub core_id: u32,
    /// The NUMA node of `cpu`.
    pub node: u32,
    /// The NUMA node for its packet memory (UMEM, rings): always the node of `cpu`.
    pub mem_node: u32,
}

/// Something about a plan that an operator should know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum PlacementNote {
    /// The NIC's node ran out of allowed CPUs: this queue is served from another node, and
    /// its packets cross the interconnect.
    RemoteNode {
        /// The queue placed remotely.
        queue: u16,
        /// The node serving it.
        node: u32,
        /// The NIC's node.
        nic_node: u32,
    },
    /// Physical cores ran out: this queue shares a core with another queue (SMT siblings).
    SharedCore {
        /// The queue on the sibling thread.
        queue: u16,
        /// Its CPU.
        cpu: u32,
        /// The shared physical core.
        core_id: u32,
    },
    /// The NIC's NUMA node is unknown (sysfs `numa_node` is -1) on a multi-node machine:
    /// nodes were filled in index order, and locality is a matter of luck.
    NicNodeUnknown,
    /// The NIC's NUMA node is not in the topology (hwloc leaves out the nodes outside the
    /// process's `cpuset.mems`, while sysfs still names the device's): the node was treated
    /// as unknown, nodes were filled in index order, and locality is a matter of luck.
    NicNodeNotInTopology {
        /// The node the NIC reports.
        node: u32,
    },
}

impl fmt::Display for PlacementNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::RemoteNode {
                queue,
                node,
                nic_node,
            } => write!(
                f,
                "queue {queue} runs on remote NUMA node {node} (the NIC is on node {nic_node}): \
                 no allowed CPU left on the NIC's node"
            ),
            Self::SharedCore {
                queue,
                cpu,
                core_id,
            } => write!(
                f,
                "queue {queue} on CPU {cpu} shares physical core {core_id} with another queue \
                 (SMT sibling): physical cores ran out"
            ),
            Self::NicNodeUnknown => write!(
                f,
                "the NIC's NUMA node is unknown: nodes filled in index order, locality not guaranteed"
            ),
            Self::NicNodeNotInTopology { node } => write!(
                f,
                "the NIC's NUMA node {node} is not in the topology (outside cpuset.mems?): \
                 treated as unknown, nodes filled in index order, locality not guaranteed"
            ),
        }
    }
}

/// A placement for every queue, plus the notes that qualify it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlacementPlan {
    /// The NIC's node, if known.
    pub nic_node: Option<u32>,
    /// One entry per queue, `queues[i].queue == i`.
    pub queues: Vec<QueuePlacement>,
    /// Warnings, in queue order.
    pub notes: Vec<PlacementNote>,
}

impl PlacementPlan {
    /// The placement of `queue`.
    #[must_use]
    pub fn get(&self, queue: u16) -> Option<&QueuePlacement> {
        self.queues
            .get(usize::from(queue))
            .filter(|p| p.queue == queue)
    }

    /// The CPUs used, in queue order.
    #[must_use]
    pub fn cpus(&self) -> Vec<u32> {
        self.queues.iter().map(|p| p.cpu).collect()
    }
}

impl fmt::Display for PlacementPlan {
    /// A table of queue, CPU, core, node and memory node, then the notes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.nic_node {
            Some(n) => writeln!(
                f,
                "placement for {} queue(s), NIC on NUMA node {n}",
                self.queues.len()
            )?,
            None => writeln!(
                f,
                "placement for {} queue(s), NIC node unknown",
                self.queues.len()
            )?,
        }
        writeln!(
            f,
            "{:>5} {:>5} {:>5} {:>5} {:>8}",
            "queue", "cpu", "core", "node", "mem_node"
        )?;
        for p in &self.queues {
            let remote = match self.nic_node {
                Some(n) if n != p.node => "  (remote)",
                _ => "",
            };
            writeln!(
                f,
                "{:>5} {:>5} {:>5} {:>5} {:>8}{remote}",
                p.queue, p.cpu, p.core_id, p.node, p.mem_node
            )?;
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        Ok(())
    }
}

/// Places `queues` receive queues on CPUs of `topo` (rules in the module documentation).
///
/// `nic_node` is the NIC's NUMA node (`/sys/class/net/<if>/device/numa_node`, `None` for
/// -1); a node the topology does not list (left out of a restricted `cpuset.mems`) is
/// treated as unknown, with a [`PlacementNote::NicNodeNotInTopology`]. `core_budget`
/// restricts the CPUs that may be used (`None`: all); `reserved` CPUs are never used
/// (housekeeping, the control plane).
///
/// # Errors
/// [`Error::UnknownCpu`] if a budget CPU is not in the topology, [`Error::NotEnoughCpus`]
/// if fewer CPUs are allowed than there are queues, [`Error::TooManyQueues`] beyond 65536
/// queues.
pub fn plan_placement(
    topo: &Topology,
    nic_node: Option<u32>,
    queues: usize,
    core_budget: Option<&[u32]>,
    reserved: &[u32],
) -> Result<PlacementPlan> {
    if queues > usize::from(u16::MAX) + 1 {
        return Err(Error::TooManyQueues { queues });
    }
    let unlisted = nic_node.filter(|&n| topo.node(n).is_none());
    let nic_node = nic_node.filter(|&n| topo.node(n).is_some());
    let mut allowed: BTreeSet<u32> = match core_budget {
        Some(budget) => {
            if let Some(&cpu) = budget.iter().find(|&&c| topo.cpu(c).is_none()) {
                return Err(Error::UnknownCpu { cpu });
            }
            budget.iter().copied().collect()
        }
        None => topo.cores.iter().map(|c| c.os_index).collect(),
    };
    for cpu in reserved {
        allowed.remove(cpu);
    }
    if queues > allowed.len() {
        return Err(Error::NotEnoughCpus {
            queues,
            allowed: allowed.len(),
        });
    }
    let node_order = match nic_node {
        Some(n) => topo.nodes_by_distance(n),
        None => topo.node_ids(),
    };
    let order = node_order
        .iter()
        .flat_map(|&node| node_cpu_order(topo, node, &allowed));
    let mut plan = PlacementPlan {
        nic_node,
        queues: Vec::with_capacity(queues),
        notes: Vec::new(),
    };
    match unlisted {
        Some(node) if queues > 0 => plan
            .notes
            .push(PlacementNote::NicNodeNotInTopology { node }),
        None if nic_node.is_none() && topo.nodes.len() > 1 && queues > 0 => {
            plan.notes.push(PlacementNote::NicNodeUnknown);
        }
        _ => {}
    }
    let mut used_cores = BTreeSet::new();
    for (queue, cpu) in (0..queues).zip(order) {
        let core = topo.cpu(cpu).copied().ok_or(Error::UnknownCpu { cpu })?;
        // `queues <= 65536` was checked above.
        let queue = queue as u16;
        if let Some(nic) = nic_node.filter(|&n| n != core.numa_node) {
            plan.notes.push(PlacementNote::RemoteNode {
                queue,
                node: core.numa_node,
                nic_node: nic,
            });
        }
        if !used_cores.insert(core.core_id) {
            plan.notes.push(PlacementNote::SharedCore {
                queue,
                cpu,
                core_id: core.core_id,
            });
        }
        plan.queues.push(QueuePlacement {
            queue,
            cpu,
            core_id: core.core_id,
            node: core.numa_node,
            mem_node: core.numa_node,
        });
    }
    Ok(plan)
}

/// The allowed CPUs of `node` in placement order: by ordinal among the allowed threads of
/// their core (one allowed thread of every core, then a second one of the cores that have
/// two, ...; a core whose first thread is reserved or outside the budget takes part in the
/// first round with its next one), and within an ordinal round-robin over L3 caches, by
/// core within one.
fn node_cpu_order(topo: &Topology, node: u32, allowed: &BTreeSet<u32>) -> Vec<u32> {
    let l3_of = |cpu: u32| {
        topo.caches
            .iter()
            .position(|c| c.level == 3 && c.cpus.contains(&cpu))
            .unwrap_or(usize::MAX)
    };
    // core → its allowed threads, by SMT rank.
    let mut threads: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    for core in topo
        .cpus_on_node(node)
        .filter(|c| allowed.contains(&c.os_index))
    {
        threads
            .entry(core.core_id)
            .or_default()
            .push((core.smt_sibling_rank, core.os_index));
    }
    // ordinal → L3 → CPUs ordered by core.
    let mut levels: BTreeMap<usize, BTreeMap<usize, Vec<(u32, u32)>>> = BTreeMap::new();
    for (core_id, mut cpus) in threads {
        cpus.sort_unstable();
        for (ordinal, (_, cpu)) in cpus.into_iter().enumerate() {
            levels
                .entry(ordinal)
                .or_default()
                .entry(l3_of(cpu))
                .or_default()
                .push((core_id, cpu));
        }
    }
    let mut order = Vec::new();
    for groups in levels.into_values() {
        let mut groups: Vec<Vec<(u32, u32)>> = groups.into_values().collect();
        for g in &mut groups {
            g.sort_unstable();
        }
        let longest = groups.iter().map(Vec::len).max().unwrap_or(0);
        for i in 0..longest {
            order.extend(groups.iter().filter_map(|g| g.get(i)).map(|&(_, cpu)| cpu));
        }
    }
    order
}

/// How close to a flow's worker an application thread should run
/// ([`cpus_near`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Near {
    /// Sharing the worker's core (its SMT siblings), else its last-level
    /// cache: the flow's data is warm in the caches the worker filled.
    Core,
    /// On the worker's NUMA node: the flow's packet memory is local.
    Node,
}

/// The CPUs an application thread serving a flow should run on: next to
/// the flow's worker (on `worker_cpu`, node `node`) as `near` asks, never
/// on a CPU of `avoid` (the workers') while another qualifies, widening to
/// the node, then to the worker's own CPU, then to every CPU when nothing
/// narrower exists. A node of the topology without CPUs (memory only: CXL,
/// HBM) stands for the nearest node with CPUs, as in [`plan_placement`].
/// Sorted, never empty for a topology with CPUs.
#[must_use]
pub fn cpus_near(
    topo: &Topology,
    worker_cpu: Option<u32>,
    node: u32,
    near: Near,
    avoid: &[u32],
) -> Vec<u32> {
    let free = |c: u32| Some(c) != worker_cpu && !avoid.contains(&c);
    let sorted = |mut v: Vec<u32>| {
        v.sort_unstable();
        v.dedup();
        v
    };
    if near == Near::Core {
        if let Some(w) = worker_cpu {
            let siblings: Vec<u32> = topo
                .smt_siblings(w)
                .map(|c| c.os_index)
                .filter(|&c| free(c))
                .collect();
            if !siblings.is_empty() {
                return sorted(siblings);
            }
            let cache: Vec<u32> = topo
                .caches
                .iter()
                .filter(|c| c.level == 3 && c.cpus.contains(&w))
                .flat_map(|c| c.cpus.iter().copied())
                .filter(|&c| free(c))
                .collect();
            if !cache.is_empty() {
                return sorted(cache);
            }
        }
    }
    let node = match topo.node(node) {
        Some(n) if n.cpus.is_empty() => topo
            .nodes_by_distance(node)
            .into_iter()
            .find(|&m| topo.cpus_on_node(m).next().is_some())
            .unwrap_or(node),
        _ => node,
    };
    let on_node: Vec<u32> = topo.cpus_on_node(node).map(|c| c.os_index).collect();
    let wanted: Vec<u32> = on_node.iter().copied().filter(|&c| free(c)).collect();
    if !wanted.is_empty() {
        return sorted(wanted);
    }
    match worker_cpu {
        Some(w) if topo.cpu(w).is_some() => vec![w],
        _ if !on_node.is_empty() => sorted(on_node),
        _ => sorted(topo.cores.iter().map(|c| c.os_index).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_threads_go_next_to_their_flow() {
        // Two nodes of two cores with two hyperthreads: node 0 CPUs 0-3
        // (cores {0,1} and {2,3}), node 1 CPUs 4-7.
        let t = Topology::synthetic(2, 1, 2, 2).unwrap();
        assert_eq!(
            cpus_near(&t, Some(4), 1, Near::Core, &[]),
            [5],
            "the SMT sibling"
        );
        assert_eq!(
            cpus_near(&t, Some(4), 1, Near::Core, &[5]),
            [6, 7],
            "the sibling is a worker: the rest of the node"
        );
        assert_eq!(cpus_near(&t, Some(4), 1, Near::Node, &[6]), [5, 7]);
        assert_eq!(
            cpus_near(&t, Some(4), 1, Near::Node, &[5, 6, 7]),
            [4],
            "every other CPU is a worker's: the flow's own"
        );
        assert_eq!(
            cpus_near(&t, None, 0, Near::Core, &[]),
            [0, 1, 2, 3],
            "unpinned worker"
        );
        assert_eq!(
            cpus_near(&t, None, 9, Near::Node, &[]).len(),
            8,
            "unknown node: anywhere"
        );
        // A memory-only node: the nearest node with CPUs.
        let mut with_memory_only = t.nodes.clone();
        with_memory_only.push(crate::topology::NumaNode {
            os_index: 2,
            cpus: Vec::new(),
            memory_bytes: None,
        });
        #[rustfmt::skip]
        let d = NodeDistances::new(vec![0, 1, 2], vec![
            10, 20, 30,
            20, 10, 12,
            30, 12, 10,
        ]).unwrap();
        let m = Topology::new(t.cores, with_memory_only, Vec::new(), Some(d)).unwrap();
        assert_eq!(cpus_near(&m, None, 2, Near::Node, &[]), [4, 5, 6, 7]);
        assert_eq!(cpus_near(&m, None, 2, Near::Node, &[4, 5]), [6, 7]);
        // One core per node, no SMT: the node's others.
        let flat = Topology::synthetic(1, 1, 2, 1).unwrap();
        assert_eq!(cpus_near(&flat, Some(0), 0, Near::Core, &[]), [1]);
        assert_eq!(cpus_near(&flat, Some(0), 0, Near::Core, &[1]), [0]);
    }
    use crate::topology::{Cache, NodeDistances};
    use proptest::prelude::*;

    #[test]
    fn one_node_physical_cores_before_siblings() {
        // 1 node, 4 cores × 2 threads: CPUs 2k and 2k+1 share core k.
        let t = Topology::synthetic(1, 1, 4, 2).unwrap();
        let plan = plan_placement(&t, Some(0), 6, None, &[]).unwrap();
        assert_eq!(plan.cpus(), vec![0, 2, 4, 6, 1, 3]);
        assert_eq!(
            plan.notes,
            vec![
                PlacementNote::SharedCore {
                    queue: 4,
                    cpu: 1,
                    core_id: 0
                },
                PlacementNote::SharedCore {
                    queue: 5,
                    cpu: 3,
                    core_id: 1
                },
            ]
        );
        assert!(plan.queues.iter().all(|p| p.node == 0 && p.mem_node == 0));
    }

    #[test]
    fn two_nodes_local_first_then_remote_with_notes() {
        let t = Topology::synthetic(2, 1, 2, 2).unwrap(); // node 0: CPUs 0-3, node 1: 4-7
        let plan = plan_placement(&t, Some(1), 6, None, &[]).unwrap();
        assert_eq!(plan.cpus(), vec![4, 6, 5, 7, 0, 2]);
        assert_eq!(
            plan.notes
                .iter()
                .filter(|n| matches!(n, PlacementNote::RemoteNode { .. }))
                .count(),
            2
        );
        assert!(plan.notes.contains(&PlacementNote::RemoteNode {
            queue: 4,
            node: 0,
            nic_node: 1
        }));
        assert_eq!(plan.get(5).unwrap().mem_node, 0);
        let table = plan.to_string();
        assert!(table.contains("NIC on NUMA node 1"), "{table}");
        assert!(
            table.contains("    4     0     0     0        0  (remote)"),
            "{table}"
        );
        assert!(
            table.contains("note: queue 5 runs on remote NUMA node 0"),
            "{table}"
        );
    }

    #[test]
    fn four_nodes_nearest_remote_first() {
        let t = Topology::synthetic(2, 2, 2, 1).unwrap(); // node n: CPUs 2n, 2n+1
        #[rustfmt::skip]
        let d = NodeDistances::new(vec![0, 1, 2, 3], vec![
            10, 32, 12, 32,
            32, 10, 32, 12,
            12, 32, 10, 32,
            32, 12, 32, 10,
        ]).unwrap();
        let t = t.with_distances(d).unwrap();
        let plan = plan_placement(&t, Some(0), 8, None, &[]).unwrap();
        let nodes: Vec<u32> = plan.queues.iter().map(|p| p.node).collect();
        assert_eq!(nodes, vec![0, 0, 2, 2, 1, 1, 3, 3]);
        // Without a matrix, remote nodes go by index.
        let t = Topology::synthetic(2, 2, 2, 1).unwrap();
        let plan = plan_placement(&t, Some(2), 8, None, &[]).unwrap();
        let nodes: Vec<u32> = plan.queues.iter().map(|p| p.node).collect();
        assert_eq!(nodes, vec![2, 2, 0, 0, 1, 1, 3, 3]);
    }

    #[test]
    fn budget_reserved_and_errors() {
        let t = Topology::synthetic(1, 2, 4, 1).unwrap(); // node 0: 0-3, node 1: 4-7
        let plan = plan_placement(&t, Some(0), 4, Some(&[1, 2, 5, 6, 7]), &[2]).unwrap();
        assert_eq!(plan.cpus(), vec![1, 5, 6, 7]);
        assert_eq!(
            plan_placement(&t, Some(0), 5, Some(&[1, 2, 5, 6, 7]), &[2]),
            Err(Error::NotEnoughCpus {
                queues: 5,
                allowed: 4
            })
        );
        assert_eq!(
            plan_placement(&t, Some(0), 1, Some(&[1, 8]), &[]),
            Err(Error::UnknownCpu { cpu: 8 })
        );
        let none = plan_placement(&t, None, 3, None, &[0]).unwrap();
        assert_eq!(none.cpus(), vec![1, 2, 3]);
        assert_eq!(none.notes, vec![PlacementNote::NicNodeUnknown]);
        assert!(plan_placement(&t, Some(0), 0, None, &[])
            .unwrap()
            .queues
            .is_empty());
    }

    #[test]
    fn a_nic_node_the_topology_does_not_list_is_treated_as_unknown() {
        // hwloc leaves out the nodes outside cpuset.mems while sysfs still gives the
        // NIC's own.
        let t = Topology::synthetic(1, 1, 2, 1).unwrap();
        let plan = plan_placement(&t, Some(1), 2, None, &[]).unwrap();
        assert_eq!(plan.cpus(), vec![0, 1]);
        assert_eq!(plan.nic_node, None);
        assert_eq!(
            plan.notes,
            vec![PlacementNote::NicNodeNotInTopology { node: 1 }]
        );
        let text = plan.to_string();
        assert!(
            text.contains("note: the NIC's NUMA node 1 is not in the topology"),
            "{text}"
        );
        // Several nodes: filled in index order, as for an unknown node.
        let t = Topology::synthetic(1, 2, 4, 1).unwrap(); // node 0: 0-3, node 1: 4-7
        let plan = plan_placement(&t, Some(3), 5, None, &[]).unwrap();
        assert_eq!(plan.cpus(), vec![0, 1, 2, 3, 4]);
        assert_eq!(
            plan.notes,
            vec![PlacementNote::NicNodeNotInTopology { node: 3 }]
        );
        assert!(plan_placement(&t, Some(3), 0, None, &[])
            .unwrap()
            .notes
            .is_empty());
    }

    #[test]
    fn a_core_whose_first_thread_is_taken_still_counts_as_idle() {
        // 4 cores × 2 threads (core c: CPUs 2c, 2c+1); core 2's first thread reserved.
        let t = Topology::synthetic(1, 1, 4, 2).unwrap();
        let plan = plan_placement(&t, Some(0), 4, None, &[4]).unwrap();
        assert_eq!(
            plan.cpus(),
            vec![0, 2, 5, 6],
            "CPU 5 before a busy core's sibling"
        );
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
        // Out of the budget likewise; siblings only once every core has a queue.
        let plan = plan_placement(&t, Some(0), 6, Some(&[0, 1, 2, 3, 5, 7]), &[]).unwrap();
        assert_eq!(plan.cpus(), vec![0, 2, 5, 7, 1, 3]);
        assert_eq!(
            plan.notes,
            vec![
                PlacementNote::SharedCore {
                    queue: 4,
                    cpu: 1,
                    core_id: 0
                },
                PlacementNote::SharedCore {
                    queue: 5,
                    cpu: 3,
                    core_id: 1
                },
            ]
        );
    }

    #[test]
    fn spreads_over_l3_caches_within_a_node() {
        let mut t = Topology::synthetic(1, 1, 8, 1).unwrap();
        t.caches = vec![
            Cache {
                level: 3,
                size_bytes: None,
                cpus: vec![0, 1, 2, 3],
            },
            Cache {
                level: 3,
                size_bytes: None,
                cpus: vec![4, 5, 6, 7],
            },
        ];
        let plan = plan_placement(&t, Some(0), 4, None, &[]).unwrap();
        assert_eq!(plan.cpus(), vec![0, 4, 1, 5]);
    }

    fn shapes() -> impl Strategy<Value = (Topology, Option<u32>, Vec<bool>, Vec<bool>)> {
        (1u32..=2, 1u32..=3, 1u32..=4, 1u32..=3).prop_flat_map(|(p, n, c, t)| {
            let topo = Topology::synthetic(p, n, c, t).unwrap();
            let cpus = topo.cores.len();
            let nodes = p * n;
            (
                Just(topo),
                // Node `nodes` is one the topology does not list.
                proptest::option::weighted(0.8, 0..=nodes),
                proptest::collection::vec(proptest::bool::weighted(0.8), cpus),
                proptest::collection::vec(proptest::bool::weighted(0.15), cpus),
            )
        })
    }

    proptest! {
        #[test]
        fn prop_placement_rules(
            (topo, nic, in_budget, is_reserved) in shapes(),
            queue_fraction in 0.0f64..=1.0,
        ) {
            let budget: Vec<u32> = (0..in_budget.len() as u32).filter(|&c| in_budget[c as usize]).collect();
            let reserved: Vec<u32> = (0..is_reserved.len() as u32).filter(|&c| is_reserved[c as usize]).collect();
            let allowed: BTreeSet<u32> = budget.iter().copied().filter(|c| !reserved.contains(c)).collect();
            let queues = (allowed.len() as f64 * queue_fraction) as usize;
            let plan = plan_placement(&topo, nic, queues, Some(&budget), &reserved).unwrap();
            prop_assert_eq!(plan.queues.len(), queues);
            let used: BTreeSet<u32> = plan.cpus().into_iter().collect();
            prop_assert_eq!(used.len(), queues, "a CPU used twice");
            prop_assert!(used.is_subset(&allowed));
            for (i, p) in plan.queues.iter().enumerate() {
                let core = topo.cpu(p.cpu).unwrap();
                prop_assert_eq!(usize::from(p.queue), i);
                prop_assert_eq!((p.node, p.mem_node, p.core_id), (core.numa_node, core.numa_node, core.core_id));
            }
            // Nodes are entered in order, and a node is left only when its allowed CPUs are
            // all used.
            let known_nic = nic.filter(|&n| topo.node(n).is_some());
            let order = known_nic.map_or_else(|| topo.node_ids(), |n| topo.nodes_by_distance(n));
            let pos = |node: u32| order.iter().position(|&n| n == node).unwrap();
            for w in plan.queues.windows(2) {
                prop_assert!(pos(w[0].node) <= pos(w[1].node));
                if w[0].node != w[1].node {
                    let left = topo.cpus_on_node(w[0].node).filter(|c| allowed.contains(&c.os_index));
                    for c in left {
                        prop_assert!(used.contains(&c.os_index), "left node {} with CPU {} free", w[0].node, c.os_index);
                    }
                }
            }
            // Within a node, cores are filled round by round: a queue's CPU is on a core with
            // no more used threads than the core of any allowed CPU of that node still free
            // (so an allowed CPU whose core has no used thread is used before any CPU whose
            // core already has one), and a queue shares a core exactly when the note says so.
            let busy = |before: &[QueuePlacement], cpu: u32| {
                let core = topo.cpu(cpu).unwrap().core_id;
                before.iter().filter(|q| q.core_id == core).count()
            };
            for (i, p) in plan.queues.iter().enumerate() {
                let before = &plan.queues[..i];
                let k = busy(before, p.cpu);
                for c in topo.cpus_on_node(p.node) {
                    let free = allowed.contains(&c.os_index) && before.iter().all(|q| q.cpu != c.os_index);
                    if free {
                        prop_assert!(
                            k <= busy(before, c.os_index),
                            "queue {} on CPU {} (core with {} used) while CPU {} is free", i, p.cpu, k, c.os_index
                        );
                    }
                }
                let shared = plan.notes.iter().any(|n| matches!(n, PlacementNote::SharedCore { queue, .. } if usize::from(*queue) == i));
                prop_assert_eq!(shared, k > 0);
            }
            let remote = plan.queues.iter().filter(|p| known_nic.is_some_and(|n| n != p.node)).count();
            let remote_notes = plan.notes.iter().filter(|n| matches!(n, PlacementNote::RemoteNode { .. })).count();
            prop_assert_eq!(remote, remote_notes);
            // A NIC node the topology does not list is treated as unknown, and said.
            let unlisted = nic.filter(|_| known_nic.is_none() && queues > 0);
            prop_assert_eq!(
                plan.notes.iter().find(|n| matches!(n, PlacementNote::NicNodeNotInTopology { .. })).copied(),
                unlisted.map(|node| PlacementNote::NicNodeNotInTopology { node })
            );
            // One more queue than allowed CPUs is refused.
            prop_assert_eq!(
                plan_placement(&topo, nic, allowed.len() + 1, Some(&budget), &reserved),
                Err(Error::NotEnoughCpus { queues: allowed.len() + 1, allowed: allowed.len() })
            );
        }
    }
}
