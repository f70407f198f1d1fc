//! Topology loader backed by hwloc (through hwlocality), cargo feature `hwloc`.
//!
//! This is the one place in the crate that looks at the outside world, and only when asked
//! through these explicit constructors: [`Topology::from_system`] probes the machine
//! (sysfs/procfs, via hwloc, and Linux's NUMA node lists: `linux_nodes`),
//! [`Topology::from_xml_file`] reads an `lstopo --of xml` export. Everything else in the
//! crate works on the resulting snapshot. Which node each CPU is on: `pu_node`.
//!
//! hwlocality is built with feature `hwloc-2_8_0`: the API level of the oldest hwloc it must
//! run against (Debian 12 ships 2.9.0).

mod linux_nodes;
mod pu_node;

use std::collections::BTreeMap;
use std::path::Path;

use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;

use crate::error::{Error, Result};
use crate::topology::{Cache, Core, NodeDistances, NumaNode, Topology};

impl Topology {
    /// Probes this machine with hwloc.
    ///
    /// Each CPU's NUMA node is the one Linux lists it under
    /// (`/sys/devices/system/node/node<N>/cpulist`, read under the filesystem root hwloc
    /// read: `HWLOC_FSROOT` when set, else `/`) wherever those lists agree with hwloc's
    /// answer; hwloc alone cannot always tell a node with CPUs from a memory-only node
    /// (CXL, HBM) attached beside it. A CPU Linux lists under a node hwloc left out (a node
    /// outside the process's `cpuset.mems`: hwloc drops it but keeps its CPUs) stays on
    /// that node, which the snapshot then has with its memory unknown (the process may not
    /// allocate there). Otherwise as [`Topology::from_hwloc`].
    ///
    /// # Errors
    /// [`Error::Hwloc`] if hwloc fails, [`Error::InconsistentTopology`] if its answer does
    /// not fit the snapshot model.
    pub fn from_system() -> Result<Self> {
        let topology = hwlocality::Topology::new().map_err(|e| Error::Hwloc(e.to_string()))?;
        let linux = linux_nodes::cpu_nodes(&linux_nodes::fs_root());
        Self::convert(&topology, linux.as_ref())
    }

    /// Loads an hwloc XML export (`lstopo --of xml machine.xml`), e.g. of a machine other
    /// than this one.
    ///
    /// # Errors
    /// [`Error::Hwloc`] if the file cannot be read or parsed.
    pub fn from_xml_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        // Read the file here rather than with `TopologyBuilder::from_xml_file`: hwlocality
        // 1.0.0-alpha.13 panics ("unreachable code") when hwloc reports ENOENT.
        let xml = std::fs::read_to_string(path)
            .map_err(|e| Error::Hwloc(format!("cannot read {}: {e}", path.display())))?;
        let topology = hwlocality::Topology::builder()
            .from_xml(&xml)
            .map_err(|e| Error::Hwloc(format!("{}: {e}", path.display())))?
            .build()
            .map_err(|e| Error::Hwloc(e.to_string()))?;
        Self::from_hwloc(&topology)
    }

    /// Builds a topology from an hwloc synthetic description such as
    /// `"package:2 numa:2 core:4 pu:2"` (syntax: <https://hwloc.readthedocs.io/en/stable/synthetic.html>).
    ///
    /// # Errors
    /// [`Error::Hwloc`] if hwloc rejects the description.
    pub fn from_synthetic_description(description: &str) -> Result<Self> {
        let topology = hwlocality::Topology::builder()
            .from_synthetic(description)
            .map_err(|e| Error::Hwloc(format!("synthetic description {description:?}: {e}")))?
            .build()
            .map_err(|e| Error::Hwloc(e.to_string()))?;
        Self::from_hwloc(&topology)
    }

    /// Converts an hwloc topology into a snapshot.
    ///
    /// Logical CPUs are hwloc PUs; `core_id` is the logical index of the PU's Core ancestor
    /// (a PU without one, as in a `package:1 pu:4` description, is a core of its own);
    /// `smt_sibling_rank` is the PU's position within its core's cpuset; the NUMA node is,
    /// among the nodes whose cpuset holds the PU, the one with the smallest cpuset, then one
    /// hwloc does not mark as memory other than DRAM (HBM, NVM, CXL, a kmem DAX device),
    /// then the lowest OS index: a memory-only node carries the cpuset of the CPUs nearest
    /// to it, and where it carries exactly that of one node hwloc cannot tell them apart
    /// (rules and limits in `hwloc/pu_node.rs`; [`Topology::from_system`] asks Linux). A PU
    /// no node holds goes to the first node. Distances come from the first node-to-node
    /// matrix hwloc has (on Linux, the ACPI SLIT's `NUMALatency`).
    ///
    /// # Errors
    /// [`Error::Hwloc`] if a PU or node has no OS index, [`Error::InconsistentTopology`] as
    /// for [`Topology::new`].
    pub fn from_hwloc(topology: &hwlocality::Topology) -> Result<Self> {
        Self::convert(topology, None)
    }

    /// [`Topology::from_hwloc`], each CPU's node taken from `linux` (CPU → node, Linux's
    /// node lists) where those agree with hwloc (a node they name that hwloc left out is
    /// added by [`Topology::new`]).
    fn convert(
        topology: &hwlocality::Topology,
        linux: Option<&BTreeMap<u32, u32>>,
    ) -> Result<Self> {
        let os_index = |obj: &TopologyObject| {
            obj.os_index()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| {
                    Error::Hwloc(format!("{} has no usable OS index", obj.object_type()))
                })
        };
        let numa: Vec<&TopologyObject> = topology.objects_with_type(ObjectType::NUMANode).collect();
        let nodes = numa
            .iter()
            .map(|n| {
                Ok(NumaNode {
                    os_index: os_index(n)?,
                    cpus: Vec::new(),
                    memory_bytes: Some(n.total_memory()).filter(|&m| m > 0),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let views = numa
            .iter()
            .zip(&nodes)
            .map(|(n, node)| pu_node::NodeView {
                os_index: node.os_index,
                cpus: n
                    .cpuset()
                    .map(|set| set.iter_set().map(|i| usize::from(i) as u32).collect())
                    .unwrap_or_default(),
                other_memory: other_memory(n),
            })
            .collect::<Vec<_>>();
        let pus = topology
            .objects_with_type(ObjectType::PU)
            .map(os_index)
            .collect::<Result<Vec<u32>>>()?;
        let pu_nodes = pu_node::pu_nodes(&pus, &views, linux);
        let core_count = topology.objects_with_type(ObjectType::Core).count();
        let mut coreless = 0;
        let mut cores = Vec::new();
        for pu in topology.objects_with_type(ObjectType::PU) {
            let cpu = os_index(pu)?;
            let (core_id, smt_sibling_rank) = match pu.first_ancestor_with_type(ObjectType::Core) {
                Some(core) => {
                    let rank = core
                        .cpuset()
                        .and_then(|set| set.iter_set().position(|i| usize::from(i) == cpu as usize))
                        .unwrap_or(0);
                    (core.logical_index(), rank)
                }
                None => {
                    coreless += 1;
                    (core_count + coreless - 1, 0)
                }
            };
            let package = pu
                .first_ancestor_with_type(ObjectType::Package)
                .map_or(0, |p| p.os_index().unwrap_or(p.logical_index()));
            let numa_node = match pu_nodes.get(&cpu) {
                Some(&n) => n,
                None => nodes.first().map_or(0, |n| n.os_index),
            };
            cores.push(Core {
                os_index: cpu,
                core_id: to_u32(core_id)?,
                package: to_u32(package)?,
                numa_node,
                smt_sibling_rank: to_u32(smt_sibling_rank)?,
            });
        }
        let caches = topology
            .objects_with_type(ObjectType::L3Cache)
            .map(|c| Cache {
                level: 3,
                size_bytes: match c.attributes() {
                    Some(ObjectAttributes::Cache(attr)) => attr.size().map(u64::from),
                    _ => None,
                },
                cpus: c
                    .cpuset()
                    .map(|set| set.iter_set().map(|i| usize::from(i) as u32).collect())
                    .unwrap_or_default(),
            })
            .collect();
        Self::new(cores, nodes, caches, node_distances(topology))
    }
}

/// Whether hwloc marks `node` as memory other than DRAM: a subtype other than `DRAM`
/// (hwloc 2.10+ memory tiers: `HBM`, `NVM`, `SPM`, `CXL-DRAM`, `CXL-NVM`, `GPUMemory`; KNL's
/// `MCDRAM`; <https://www.open-mpi.org/projects/hwloc/doc/v2.13.0/attributes.html>), or a
/// `DAXDevice` info (hwloc's Linux backend, for a node made of a device-DAX region the
/// kmem driver onlined: persistent memory, CXL, soft-reserved HBM).
fn other_memory(node: &TopologyObject) -> bool {
    node.info("DAXDevice").is_some() || node.subtype().is_some_and(|s| s.to_bytes() != b"DRAM")
}

fn to_u32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Hwloc(format!("index {n} does not fit 32 bits")))
}

/// The first distance matrix whose objects are all NUMA nodes with OS indices.
fn node_distances(topology: &hwlocality::Topology) -> Option<NodeDistances> {
    let matrices = topology.distances(None).ok()?;
    matrices.iter().find_map(|m| {
        let nodes: Option<Vec<u32>> = m
            .objects()
            .map(|o| {
                o.filter(|o| o.object_type() == ObjectType::NUMANode)
                    .and_then(|o| o.os_index())
                    .and_then(|i| u32::try_from(i).ok())
            })
            .collect();
        let values: BTreeMap<(usize, usize), u64> = m.enumerate_distances().collect();
        let values = values
            .into_values()
            .map(|v| u32::try_from(v).ok())
            .collect::<Option<Vec<u32>>>()?;
        NodeDistances::new(nodes?, values).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pure constructor and hwloc's synthetic backend describe the same machines.
    #[test]
    fn hwloc_synthetic_agrees_with_pure_synthetic() {
        for (p, n, c, t) in [
            (2, 1, 8, 1),
            (1, 4, 2, 1),
            (1, 1, 4, 2),
            (2, 2, 4, 2),
            (2, 1, 8, 2),
        ] {
            let description = format!("package:{p} numa:{n} core:{c} pu:{t}");
            let loaded = Topology::from_synthetic_description(&description).unwrap();
            let pure = Topology::synthetic(p, n, c, t).unwrap();
            assert_eq!(loaded.cores, pure.cores, "{description}");
            let cpus = |t: &Topology| {
                t.nodes
                    .iter()
                    .map(|n| (n.os_index, n.cpus.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(cpus(&loaded), cpus(&pure), "{description}");
        }
    }

    #[test]
    fn hwloc_synthetic_distances_and_caches() {
        // hwloc's synthetic syntax carries cache sizes and node memory too.
        let loaded = Topology::from_synthetic_description(
            "pack:2 [numa(memory=1GiB)] l3:1(size=32MiB) core:2 pu:2",
        )
        .unwrap();
        assert_eq!(loaded.cores.len(), 8);
        assert_eq!(loaded.node_ids(), vec![0, 1]);
        assert_eq!(loaded.caches.len(), 2);
        assert_eq!(loaded.caches[1].cpus, vec![4, 5, 6, 7]);
        assert_eq!(loaded.caches[0].size_bytes, Some(32 << 20));
        assert_eq!(loaded.node(1).unwrap().memory_bytes, Some(1 << 30));
        assert_eq!(loaded.l3_caches_of_node(1).count(), 1);
    }

    /// Distances added to an hwloc topology reach the snapshot, and an XML export of it
    /// loads back as the same snapshot.
    #[test]
    fn distances_and_xml_round_trip() {
        use hwlocality::object::distance::{AddDistancesFlags, DistancesKind};
        use hwlocality::topology::export::xml::XMLExportFlags;

        let mut topology = hwlocality::Topology::builder()
            .from_synthetic("package:2 numa:2 core:2 pu:2")
            .unwrap()
            .build()
            .unwrap();
        #[rustfmt::skip]
        let matrix: Vec<u64> = vec![
            10, 12, 21, 31,
            12, 10, 31, 21,
            21, 31, 10, 12,
            31, 21, 12, 10,
        ];
        topology.edit(|editor| {
            editor
                // No name: hwlocality 1.0.0-alpha.13 hands hwloc a dangling name pointer
                // (the export then holds garbage bytes where the name should be).
                .add_distances(
                    None,
                    DistancesKind::FROM_USER | DistancesKind::MEANS_LATENCY,
                    AddDistancesFlags::empty(),
                    |t| {
                        (
                            t.objects_with_type(ObjectType::NUMANode)
                                .map(Some)
                                .collect(),
                            matrix.clone(),
                        )
                    },
                )
                .unwrap();
        });
        let snapshot = Topology::from_hwloc(&topology).unwrap();
        assert_eq!(snapshot.nodes_by_distance(1), vec![1, 0, 3, 2]);
        assert_eq!(snapshot.distance(0, 3), Some(31));
        assert_eq!(
            snapshot.cores,
            Topology::synthetic(2, 2, 2, 2).unwrap().cores
        );

        let path =
            std::env::temp_dir().join(format!("flowlane-numa-sched-{}.xml", std::process::id()));
        topology
            .export_xml_file(Some(&path), XMLExportFlags::empty())
            .unwrap();
        let reloaded = Topology::from_xml_file(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(reloaded.unwrap(), snapshot);
    }

    /// hwloc leaves out a node outside `cpuset.mems` but keeps its PUs (here: a restriction
    /// by node set, as hwloc's Linux backend applies the process's allowed nodes): with
    /// Linux's lists the PUs stay on their own node, not on the first one.
    #[test]
    fn cpus_of_a_node_hwloc_left_out_keep_their_node() {
        use hwlocality::memory::nodeset::NodeSet;
        use hwlocality::topology::editor::RestrictFlags;

        let mut topology = hwlocality::Topology::builder()
            .from_synthetic("package:2 numa:1 core:2 pu:1")
            .unwrap()
            .build()
            .unwrap();
        topology.edit(|editor| {
            editor
                .restrict(&NodeSet::from_range(0..=0), RestrictFlags::empty())
                .unwrap();
        });
        assert_eq!(topology.objects_with_type(ObjectType::NUMANode).count(), 1);
        assert_eq!(topology.objects_with_type(ObjectType::PU).count(), 4);
        let linux: BTreeMap<u32, u32> = [(0, 0), (1, 0), (2, 1), (3, 1)].into_iter().collect();
        let t = Topology::convert(&topology, Some(&linux)).unwrap();
        let nodes: Vec<u32> = t.cores.iter().map(|c| c.numa_node).collect();
        assert_eq!(nodes, [0, 0, 1, 1]);
        assert_eq!(t.node(1).unwrap().cpus, [2, 3]);
        assert_eq!(t.node(1).unwrap().memory_bytes, None);
    }

    #[test]
    fn hwloc_rejects_bad_description() {
        let err = Topology::from_synthetic_description("package:two").unwrap_err();
        assert!(matches!(err, Error::Hwloc(m) if m.contains("package:two")));
        assert!(matches!(
            Topology::from_xml_file("/nonexistent/flowlane-topology.xml"),
            Err(Error::Hwloc(_))
        ));
    }

    /// The probe of this machine yields a usable snapshot (whatever the machine is).
    #[test]
    fn from_system_is_consistent() {
        let t = Topology::from_system().unwrap();
        assert!(!t.cores.is_empty());
        assert!(!t.nodes.is_empty());
        for c in &t.cores {
            assert!(t.node(c.numa_node).unwrap().cpus.contains(&c.os_index));
        }
    }
}
