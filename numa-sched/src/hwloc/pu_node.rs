//! Which NUMA node a logical CPU (an hwloc PU) is on.
//!
//! hwloc has no PU → node link: a node holds the PUs of its cpuset, and a memory-only node
//! (CXL, HBM, persistent memory) gets the cpuset of the node(s) nearest to it (see
//! `linux_nodes`), so several nodes can hold one PU. The node with the PU's own CPUs must
//! win, or the CPUs end up on a node where flowlane then places their memory while the real
//! node shows none.
//!
//! 1. Linux's node lists, when the loader has them (`Topology::from_system`) and they agree
//!    with hwloc: every PU listed by exactly one node, and that node's hwloc cpuset holds it;
//!    or that node is one hwloc left out and no node with CPUs of its own (by the lists)
//!    holds the PU. hwloc leaves out the nodes outside the process's `cpuset.mems` (e.g.
//!    Docker's `--cpuset-mems=0` on two sockets) but keeps their PUs, which then no node
//!    holds: they stay on their own node, not the first one, so that placement sees them
//!    as the remote CPUs they are (the loader adds the node, its memory unknown: the
//!    process may not allocate there). Otherwise the lists are not used at all.
//! 2. Else the tree: the holder with the smallest cpuset (a memory-only node has the union
//!    of its nearest nodes' cpusets, never less than the node of the PU); among equal
//!    cpusets, one hwloc marks as memory of another kind than DRAM loses (subtype `HBM`,
//!    `NVM`, `SPM`, `CXL-DRAM`, `MCDRAM`, `GPUMemory`... from hwloc 2.10's memory tiers, or
//!    a `DAXDevice` info: memory the kmem driver gave the kernel); then the lowest OS index.
//!
//! The limit of rule 2: a memory-only node that hwloc does not mark (hwloc 2.9 marks only
//! kmem DAX nodes) and that carries the same cpuset as a CPU node is indistinguishable from
//! it in hwloc's tree; the lower number takes the CPUs. Firmware usually numbers the nodes
//! with CPUs first (hwloc's "Heterogeneous Memory" documentation:
//! <https://www.open-mpi.org/projects/hwloc/doc/v2.13.0/heteromem.html>), and an XML export
//! or a synthetic description carries no node lists, so for them this is the best there is.

use std::collections::{BTreeMap, BTreeSet};

/// What the choice needs to know of one hwloc NUMA node.
#[derive(Debug)]
pub(super) struct NodeView {
    /// The node's OS index.
    pub(super) os_index: u32,
    /// The PUs of its hwloc cpuset.
    pub(super) cpus: BTreeSet<u32>,
    /// hwloc marks it as memory other than DRAM (a subtype other than `DRAM`, or a
    /// `DAXDevice` info).
    pub(super) other_memory: bool,
}

/// The node of each of `pus` (OS indices), by the rules in the module documentation; a PU
/// no node holds is left out. `linux` is Linux's CPU → node map, if the loader read one.
pub(super) fn pu_nodes(
    pus: &[u32],
    nodes: &[NodeView],
    linux: Option<&BTreeMap<u32, u32>>,
) -> BTreeMap<u32, u32> {
    let holders = |cpu: u32| nodes.iter().filter(move |n| n.cpus.contains(&cpu));
    let agreed = linux.and_then(|linux| {
        let with_cpus: BTreeSet<u32> = linux.values().copied().collect();
        pus.iter()
            .map(|&cpu| {
                let node = *linux.get(&cpu)?;
                let agrees = if nodes.iter().any(|n| n.os_index == node) {
                    holders(cpu).any(|n| n.os_index == node)
                } else {
                    // A node hwloc left out (outside `cpuset.mems`).
                    holders(cpu).all(|n| !with_cpus.contains(&n.os_index))
                };
                agrees.then_some((cpu, node))
            })
            .collect::<Option<BTreeMap<u32, u32>>>()
    });
    if let Some(agreed) = agreed {
        return agreed;
    }
    pus.iter()
        .filter_map(|&cpu| {
            holders(cpu)
                .min_by_key(|n| (n.cpus.len(), n.other_memory, n.os_index))
                .map(|n| (cpu, n.os_index))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(os_index: u32, cpus: &[u32], other_memory: bool) -> NodeView {
        NodeView {
            os_index,
            cpus: cpus.iter().copied().collect(),
            other_memory,
        }
    }

    const PUS: [u32; 8] = [0, 1, 2, 3, 8, 9, 10, 11];

    /// The reviewer's machine as hwloc sees it: node 1 (memory only) carries node 2's
    /// cpuset.
    fn tied(other_memory: bool) -> Vec<NodeView> {
        vec![
            node(0, &[0, 1, 8, 9], false),
            node(1, &[2, 3, 10, 11], other_memory),
            node(2, &[2, 3, 10, 11], false),
        ]
    }

    fn on(map: &BTreeMap<u32, u32>, node: u32) -> Vec<u32> {
        map.iter()
            .filter(|&(_, &n)| n == node)
            .map(|(&c, _)| c)
            .collect()
    }

    #[test]
    fn linux_lists_decide_a_tie_hwloc_cannot() {
        let linux: BTreeMap<u32, u32> = [(0, 0), (1, 0), (8, 0), (9, 0)]
            .into_iter()
            .chain([2, 3, 10, 11].map(|c| (c, 2)))
            .collect();
        let map = pu_nodes(&PUS, &tied(false), Some(&linux));
        assert_eq!(on(&map, 2), [2, 3, 10, 11]);
        assert!(on(&map, 1).is_empty());
        assert_eq!(on(&map, 0), [0, 1, 8, 9]);
        // Without them the tie goes to the lower number: the documented limit.
        let map = pu_nodes(&PUS, &tied(false), None);
        assert_eq!(on(&map, 1), [2, 3, 10, 11]);
    }

    #[test]
    fn lists_that_disagree_with_hwloc_are_not_used() {
        // CPU 2 on node 0 by the lists, whose hwloc cpuset does not hold it (say, lists of
        // another machine than the XML hwloc loaded): the tree decides, for every CPU.
        let mut linux: BTreeMap<u32, u32> = PUS.iter().map(|&c| (c, 0)).collect();
        linux.extend([(3, 2), (10, 2), (11, 2)]);
        let map = pu_nodes(&PUS, &tied(true), Some(&linux));
        assert_eq!(on(&map, 2), [2, 3, 10, 11]);
        assert_eq!(on(&map, 0), [0, 1, 8, 9]);
        // A PU the lists do not name likewise.
        let linux: BTreeMap<u32, u32> = [(0, 0), (1, 0), (8, 0)]
            .into_iter()
            .chain([2, 3, 10, 11].map(|c| (c, 2)))
            .collect();
        let map = pu_nodes(&PUS, &tied(false), Some(&linux));
        assert_eq!(on(&map, 1), [2, 3, 10, 11], "tree rule, not the lists");
    }

    #[test]
    fn cpus_of_a_node_hwloc_left_out_stay_on_it() {
        // Two sockets, the process's `cpuset.mems` node 0 only: hwloc drops node 1 and
        // keeps its PUs 2 and 3, which no node holds. Linux lists them on node 1.
        let nodes = [node(0, &[0, 1], false)];
        let linux: BTreeMap<u32, u32> = [(0, 0), (1, 0), (2, 1), (3, 1)].into_iter().collect();
        let map = pu_nodes(&[0, 1, 2, 3], &nodes, Some(&linux));
        assert_eq!(on(&map, 0), [0, 1]);
        assert_eq!(on(&map, 1), [2, 3]);
        // Likewise when a memory-only node near them (no CPU of its own by the lists)
        // carries their cpuset.
        let nodes = [node(0, &[0, 1], false), node(3, &[2, 3], true)];
        let map = pu_nodes(&[0, 1, 2, 3], &nodes, Some(&linux));
        assert_eq!(on(&map, 1), [2, 3]);
        // But lists naming a node hwloc lacks for a CPU that hwloc puts on a node with CPUs
        // of its own are another machine's: the tree decides.
        let nodes = [node(0, &[0, 1, 2, 3], false)];
        let map = pu_nodes(&[0, 1, 2, 3], &nodes, Some(&linux));
        assert_eq!(on(&map, 0), [0, 1, 2, 3]);
    }

    #[test]
    fn a_node_marked_as_other_memory_loses_a_tie() {
        let map = pu_nodes(&PUS, &tied(true), None);
        assert_eq!(on(&map, 2), [2, 3, 10, 11]);
        assert!(on(&map, 1).is_empty());
    }

    #[test]
    fn the_smallest_cpuset_wins() {
        // A memory-only node 0 as near to nodes 1 and 2: hwloc gives it both cpusets.
        let nodes = [
            node(0, &[0, 1, 2, 3], false),
            node(1, &[0, 1], false),
            node(2, &[2, 3], false),
            node(3, &[], false),
        ];
        let map = pu_nodes(&[0, 1, 2, 3], &nodes, None);
        assert_eq!(on(&map, 1), [0, 1]);
        assert_eq!(on(&map, 2), [2, 3]);
        assert!(on(&map, 0).is_empty() && on(&map, 3).is_empty());
        // A PU no node holds is left to the caller.
        assert_eq!(pu_nodes(&[7], &nodes, None).len(), 0);
    }
}
