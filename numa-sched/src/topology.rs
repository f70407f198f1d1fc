//! A plain-data snapshot of the machine: logical CPUs, physical cores, packages, NUMA nodes,
//! L3 caches and (when known) the NUMA distance matrix.
//!
//! Policy functions take this snapshot and nothing else. It is built either purely
//! ([`Topology::synthetic`], [`Topology::new`]) or, at the edge, by the hwloc loader
//! (`hwloc.rs`, cargo feature `hwloc`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::error::{Error, Result};

/// One logical CPU (an hwloc PU, a Linux "CPU n").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Core {
    /// The OS's number for this logical CPU (`/sys/devices/system/cpu/cpu<n>`, hwloc PU
    /// `os_index`): what affinity masks and `smp_affinity_list` name.
    pub os_index: u32,
    /// The physical core it runs on, unique machine-wide (hwloc's logical index of the
    /// Core object; Linux's own `core_id` is only unique within a package).
    pub core_id: u32,
    /// The package (socket) of the core.
    pub package: u32,
    /// The NUMA node whose memory is local to this CPU (OS numbering, as in `numactl`).
    pub numa_node: u32,
    /// Rank of this CPU among the hardware threads of its core: 0 for the first thread,
    /// 1 for its SMT sibling, and so on.
    pub smt_sibling_rank: u32,
}

/// A NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct NumaNode {
    /// The OS's number for the node (`/sys/devices/system/node/node<n>`).
    pub os_index: u32,
    /// The logical CPUs local to this node, in increasing order (may be empty: memory-only
    /// nodes exist).
    pub cpus: Vec<u32>,
    /// Local memory in bytes, when known.
    pub memory_bytes: Option<u64>,
}

/// A CPU cache shared by some logical CPUs (the snapshot keeps L3 caches).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Cache {
    /// Cache level (3 for L3).
    pub level: u8,
    /// Size in bytes, when known.
    pub size_bytes: Option<u64>,
    /// The logical CPUs sharing it, in increasing order.
    pub cpus: Vec<u32>,
}

/// Relative NUMA distances (ACPI SLIT convention: 10 = local, larger = farther).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct NodeDistances {
    nodes: Vec<u32>,
    values: Vec<u32>,
}

impl NodeDistances {
    /// A matrix over `nodes` (OS indices), row-major: `values[i * n + j]` is the distance
    /// from `nodes[i]` to `nodes[j]`.
    ///
    /// # Errors
    /// [`Error::InconsistentTopology`] if `values` is not `nodes.len()²` long or a node is
    /// listed twice.
    pub fn new(nodes: Vec<u32>, values: Vec<u32>) -> Result<Self> {
        if values.len() != nodes.len() * nodes.len() {
            return Err(Error::InconsistentTopology(format!(
                "distance matrix over {} nodes has {} values, expected {}",
                nodes.len(),
                values.len(),
                nodes.len() * nodes.len()
            )));
        }
        if nodes.iter().collect::<BTreeSet<_>>().len() != nodes.len() {
            return Err(Error::InconsistentTopology(
                "distance matrix lists a node twice".into(),
            ));
        }
        Ok(Self { nodes, values })
    }

    /// The nodes the matrix covers.
    #[must_use]
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// Distance from node `from` to node `to`, if the matrix covers both.
    #[must_use]
    pub fn get(&self, from: u32, to: u32) -> Option<u32> {
        let i = self.nodes.iter().position(|&n| n == from)?;
        let j = self.nodes.iter().position(|&n| n == to)?;
        Some(self.values[i * self.nodes.len() + j])
    }
}

/// A machine snapshot. Build it with [`Topology::new`], [`Topology::synthetic`] or the hwloc
/// loader; all three leave it validated and sorted by OS index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// Logical CPUs, by increasing `os_index`.
    pub cores: Vec<Core>,
    /// NUMA nodes, by increasing `os_index`.
    pub nodes: Vec<NumaNode>,
    /// L3 caches (empty when unknown).
    pub caches: Vec<Cache>,
    /// NUMA distances, when the firmware or the snapshot provides them.
    pub distances: Option<NodeDistances>,
}

impl Topology {
    /// Builds a snapshot from its parts. Each node's `cpus` is recomputed from `cores`
    /// (whatever the caller put there); nodes only named by a core are added.
    ///
    /// # Errors
    /// [`Error::InconsistentTopology`] if a logical CPU appears twice, a physical core
    /// spans packages or nodes, two threads of a core share an SMT rank, a cache names an
    /// unknown CPU, or the distance matrix names an unknown node.
    pub fn new(
        mut cores: Vec<Core>,
        nodes: Vec<NumaNode>,
        caches: Vec<Cache>,
        distances: Option<NodeDistances>,
    ) -> Result<Self> {
        cores.sort_by_key(|c| c.os_index);
        if let Some(w) = cores.windows(2).find(|w| w[0].os_index == w[1].os_index) {
            return Err(Error::InconsistentTopology(format!(
                "logical CPU {} is listed twice",
                w[0].os_index
            )));
        }
        let mut physical: BTreeMap<u32, (u32, u32, BTreeSet<u32>)> = BTreeMap::new();
        for c in &cores {
            let entry =
                physical
                    .entry(c.core_id)
                    .or_insert((c.package, c.numa_node, BTreeSet::new()));
            if (entry.0, entry.1) != (c.package, c.numa_node) {
                return Err(Error::InconsistentTopology(format!(
                    "physical core {} spans packages or NUMA nodes (CPU {})",
                    c.core_id, c.os_index
                )));
            }
            if !entry.2.insert(c.smt_sibling_rank) {
                return Err(Error::InconsistentTopology(format!(
                    "two threads of physical core {} have SMT rank {}",
                    c.core_id, c.smt_sibling_rank
                )));
            }
        }
        let mut by_node: BTreeMap<u32, NumaNode> = nodes
            .into_iter()
            .map(|n| {
                (
                    n.os_index,
                    NumaNode {
                        cpus: Vec::new(),
                        ..n
                    },
                )
            })
            .collect();
        for c in &cores {
            by_node
                .entry(c.numa_node)
                .or_insert_with(|| NumaNode {
                    os_index: c.numa_node,
                    cpus: Vec::new(),
                    memory_bytes: None,
                })
                .cpus
                .push(c.os_index);
        }
        let known: BTreeSet<u32> = cores.iter().map(|c| c.os_index).collect();
        let mut caches = caches;
        for cache in &mut caches {
            cache.cpus.sort_unstable();
            cache.cpus.dedup();
            if let Some(cpu) = cache.cpus.iter().find(|c| !known.contains(c)) {
                return Err(Error::InconsistentTopology(format!(
                    "an L{} cache names CPU {cpu}, which is not in the topology",
                    cache.level
                )));
            }
        }
        if let Some(d) = &distances {
            if let Some(n) = d.nodes().iter().find(|n| !by_node.contains_key(n)) {
                return Err(Error::InconsistentTopology(format!(
                    "the distance matrix names NUMA node {n}, which is not in the topology"
                )));
            }
        }
        Ok(Self {
            cores,
            nodes: by_node.into_values().collect(),
            caches,
            distances,
        })
    }

    /// A regular machine, built in Rust (no hwloc): `packages` packages, each with
    /// `nodes_per_package` NUMA nodes of `cores_per_node` physical cores of
    /// `threads_per_core` hardware threads.
    ///
    /// Numbering follows hwloc's synthetic topologies (so that this and
    /// `Topology::from_synthetic_description("package:P numa:N core:C pu:T")` agree):
    /// everything is numbered depth-first, the threads of a core are consecutive CPUs
    /// (`cpu = core_id * threads_per_core + rank`), nodes are numbered machine-wide. No
    /// caches, no distances (add them with [`Topology::with_distances`]).
    ///
    /// # Errors
    /// [`Error::EmptySynthetic`] if any count is zero, [`Error::InconsistentTopology`] if
    /// the machine would have more than `u32::MAX` CPUs.
    pub fn synthetic(
        packages: u32,
        nodes_per_package: u32,
        cores_per_node: u32,
        threads_per_core: u32,
    ) -> Result<Self> {
        for (what, n) in [
            ("packages", packages),
            ("nodes per package", nodes_per_package),
            ("cores per node", cores_per_node),
            ("threads per core", threads_per_core),
        ] {
            if n == 0 {
                return Err(Error::EmptySynthetic { what });
            }
        }
        let total = u64::from(packages)
            * u64::from(nodes_per_package)
            * u64::from(cores_per_node)
            * u64::from(threads_per_core);
        if total > u64::from(u32::MAX) {
            return Err(Error::InconsistentTopology(format!(
                "a synthetic machine of {total} CPUs is too large"
            )));
        }
        let mut cores = Vec::new();
        let mut core_id = 0;
        for package in 0..packages {
            for n in 0..nodes_per_package {
                let numa_node = package * nodes_per_package + n;
                for _ in 0..cores_per_node {
                    for rank in 0..threads_per_core {
                        cores.push(Core {
                            os_index: core_id * threads_per_core + rank,
                            core_id,
                            package,
                            numa_node,
                            smt_sibling_rank: rank,
                        });
                    }
                    core_id += 1;
                }
            }
        }
        Self::new(cores, Vec::new(), Vec::new(), None)
    }

    /// The same snapshot with a NUMA distance matrix.
    ///
    /// # Errors
    /// [`Error::InconsistentTopology`] if the matrix names an unknown node.
    pub fn with_distances(self, distances: NodeDistances) -> Result<Self> {
        Self::new(self.cores, self.nodes, self.caches, Some(distances))
    }

    /// The logical CPU with OS index `os_index`.
    #[must_use]
    pub fn cpu(&self, os_index: u32) -> Option<&Core> {
        self.cores
            .binary_search_by_key(&os_index, |c| c.os_index)
            .ok()
            .map(|i| &self.cores[i])
    }

    /// The NUMA node with OS index `os_index`.
    #[must_use]
    pub fn node(&self, os_index: u32) -> Option<&NumaNode> {
        self.nodes.iter().find(|n| n.os_index == os_index)
    }

    /// OS indices of all NUMA nodes, increasing.
    #[must_use]
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.os_index).collect()
    }

    /// The logical CPUs of node `node`.
    pub fn cpus_on_node(&self, node: u32) -> impl Iterator<Item = &Core> + '_ {
        self.cores.iter().filter(move |c| c.numa_node == node)
    }

    /// The other hardware threads of `cpu`'s physical core.
    pub fn smt_siblings(&self, cpu: u32) -> impl Iterator<Item = &Core> + '_ {
        let core = self.cpu(cpu).map(|c| c.core_id);
        self.cores
            .iter()
            .filter(move |c| Some(c.core_id) == core && c.os_index != cpu)
    }

    /// Number of distinct physical cores.
    #[must_use]
    pub fn physical_core_count(&self) -> usize {
        self.cores
            .iter()
            .map(|c| c.core_id)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Distance between two nodes: from the matrix if there is one; otherwise 10 for a
    /// node to itself and `None` between different nodes.
    #[must_use]
    pub fn distance(&self, from: u32, to: u32) -> Option<u32> {
        match &self.distances {
            Some(d) => d.get(from, to),
            None => (from == to).then_some(10),
        }
    }

    /// All nodes, nearest to `from` first: `from` itself, then by increasing distance when
    /// the matrix knows it, then (and for ties) by OS index.
    #[must_use]
    pub fn nodes_by_distance(&self, from: u32) -> Vec<u32> {
        let mut ids = self.node_ids();
        ids.sort_by_key(|&n| (n != from, self.distance(from, n).unwrap_or(u32::MAX), n));
        ids
    }

    /// The L3 caches shared by CPUs of `node`.
    pub fn l3_caches_of_node(&self, node: u32) -> impl Iterator<Item = &Cache> + '_ {
        self.caches.iter().filter(move |cache| {
            cache.level == 3
                && cache
                    .cpus
                    .iter()
                    .any(|&cpu| self.cpu(cpu).is_some_and(|c| c.numa_node == node))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_shape_and_numbering() {
        let t = Topology::synthetic(2, 2, 4, 2).unwrap();
        assert_eq!(t.cores.len(), 32);
        assert_eq!(t.physical_core_count(), 16);
        assert_eq!(t.node_ids(), vec![0, 1, 2, 3]);
        assert_eq!(t.node(1).unwrap().cpus, (8..16).collect::<Vec<_>>());
        let c = t.cpu(13).unwrap();
        assert_eq!(
            (c.core_id, c.package, c.numa_node, c.smt_sibling_rank),
            (6, 0, 1, 1)
        );
        assert_eq!(t.cpu(31).unwrap().package, 1);
        assert_eq!(
            t.smt_siblings(13).map(|c| c.os_index).collect::<Vec<_>>(),
            vec![12]
        );
        assert_eq!(
            Topology::synthetic(1, 0, 1, 1),
            Err(Error::EmptySynthetic {
                what: "nodes per package"
            })
        );
    }

    #[test]
    fn new_rejects_inconsistent_snapshots() {
        let core = |os_index, core_id, numa_node, smt_sibling_rank| Core {
            os_index,
            core_id,
            package: 0,
            numa_node,
            smt_sibling_rank,
        };
        let dup = Topology::new(
            vec![core(0, 0, 0, 0), core(0, 1, 0, 0)],
            vec![],
            vec![],
            None,
        );
        assert!(matches!(dup, Err(Error::InconsistentTopology(m)) if m.contains("CPU 0")));
        let split = Topology::new(
            vec![core(0, 0, 0, 0), core(1, 0, 1, 1)],
            vec![],
            vec![],
            None,
        );
        assert!(matches!(split, Err(Error::InconsistentTopology(m)) if m.contains("spans")));
        let rank = Topology::new(
            vec![core(0, 0, 0, 0), core(1, 0, 0, 0)],
            vec![],
            vec![],
            None,
        );
        assert!(matches!(rank, Err(Error::InconsistentTopology(m)) if m.contains("SMT rank")));
        let cache = Cache {
            level: 3,
            size_bytes: None,
            cpus: vec![0, 5],
        };
        let bad_cache = Topology::new(vec![core(0, 0, 0, 0)], vec![], vec![cache], None);
        assert!(matches!(bad_cache, Err(Error::InconsistentTopology(m)) if m.contains("CPU 5")));
        let d = NodeDistances::new(vec![0, 7], vec![10, 20, 20, 10]).unwrap();
        let bad_d = Topology::new(vec![core(0, 0, 0, 0)], vec![], vec![], Some(d));
        assert!(matches!(bad_d, Err(Error::InconsistentTopology(m)) if m.contains("node 7")));
        assert!(NodeDistances::new(vec![0, 1], vec![10, 20, 20]).is_err());
        assert!(NodeDistances::new(vec![1, 1], vec![10; 4]).is_err());
    }

    #[test]
    fn memory_only_nodes_are_kept_and_cpus_recomputed() {
        let t = Topology::new(
            vec![Core {
                os_index: 0,
                core_id: 0,
                package: 0,
                numa_node: 0,
                smt_sibling_rank: 0,
            }],
            vec![NumaNode {
                os_index: 2,
                cpus: vec![99],
                memory_bytes: Some(1 << 30),
            }],
            vec![],
            None,
        )
        .unwrap();
        assert_eq!(t.node_ids(), vec![0, 2]);
        assert!(t.node(2).unwrap().cpus.is_empty());
        assert_eq!(t.node(0).unwrap().cpus, vec![0]);
    }

    #[test]
    fn nodes_by_distance_uses_matrix_then_index() {
        let t = Topology::synthetic(1, 4, 1, 1).unwrap();
        assert_eq!(t.nodes_by_distance(2), vec![2, 0, 1, 3]);
        #[rustfmt::skip]
        let d = NodeDistances::new(vec![0, 1, 2, 3], vec![
            10, 21, 31, 12,
            21, 10, 12, 31,
            31, 12, 10, 21,
            12, 31, 21, 10,
        ]).unwrap();
        let t = t.with_distances(d).unwrap();
        assert_eq!(t.nodes_by_distance(0), vec![0, 3, 1, 2]);
        assert_eq!(t.nodes_by_distance(2), vec![2, 1, 3, 0]);
        assert_eq!(t.distance(1, 3), Some(31));
    }

    #[test]
    fn l3_caches_by_node() {
        let mut t = Topology::synthetic(2, 1, 2, 1).unwrap();
        t.caches = vec![
            Cache {
                level: 3,
                size_bytes: Some(32 << 20),
                cpus: vec![0, 1],
            },
            Cache {
                level: 3,
                size_bytes: None,
                cpus: vec![2, 3],
            },
        ];
        let sizes: Vec<_> = t.l3_caches_of_node(1).map(|c| c.size_bytes).collect();
        assert_eq!(sizes, vec![None]);
    }
}
