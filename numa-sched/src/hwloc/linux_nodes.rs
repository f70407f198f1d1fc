//! Linux's own answer to "which NUMA node is CPU n on": the node lists in sysfs.
//!
//! hwloc gives a memory-only NUMA node (CXL, HBM, persistent memory: no CPUs of its own) the
//! cpuset of the node(s) nearest to it, by the firmware's distances or the HMAT's initiators
//! (hwloc 2.x `topology-linux.c`, `fixup_cpuless_node_locality_from_distances` and
//! `read_node_initiators`), and attaches it beside them: in hwloc's tree such a node and the
//! node whose CPUs it borrowed can be identical but for their numbers. The kernel keeps the
//! distinction: `/sys/devices/system/node/node<N>/cpulist` holds the online CPUs of node N
//! only (`drivers/base/node.c`, `node_read_cpumap`: `cpumask_of_node(N) & cpu_online_mask`),
//! empty for a memory-only node (Documentation/ABI/stable/sysfs-devices-node).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::irq::parse_cpu_list;

/// The filesystem root hwloc's Linux backend reads: `HWLOC_FSROOT` when set, else `/`
/// (hwloc's environment variables: <https://www.open-mpi.org/projects/hwloc/doc/v2.13.0/envvar.html>).
pub(super) fn fs_root() -> PathBuf {
    std::env::var_os("HWLOC_FSROOT").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// CPU → NUMA node as Linux lists it under `root` (`<root>/sys/devices/system/node/node<N>/cpulist`),
/// or `None` when there is no such list to trust: no node directory (a kernel without
/// `CONFIG_NUMA`), a node without a readable, parseable `cpulist`, or a CPU listed by two
/// nodes.
pub(super) fn cpu_nodes(root: &Path) -> Option<BTreeMap<u32, u32>> {
    let dir = root.join("sys/devices/system/node");
    let mut by_cpu = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name();
        let Some(node) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let list = std::fs::read_to_string(entry.path().join("cpulist")).ok()?;
        for cpu in parse_cpu_list(&list).ok()? {
            if by_cpu.insert(cpu, node).is_some() {
                return None;
            }
        }
    }
    (!by_cpu.is_empty()).then_some(by_cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(nodes: &[(&str, Option<&str>)]) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "flowlane-numa-sched-linux-nodes-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let dir = root.join("sys/devices/system/node");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("online"), "0-2\n").unwrap();
        for (name, list) in nodes {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            if let Some(list) = list {
                std::fs::write(dir.join(name).join("cpulist"), format!("{list}\n")).unwrap();
            }
        }
        root
    }

    fn read(nodes: &[(&str, Option<&str>)]) -> Option<Vec<(u32, u32)>> {
        let root = tree(nodes);
        let found = cpu_nodes(&root);
        std::fs::remove_dir_all(&root).unwrap();
        found.map(|m| m.into_iter().collect())
    }

    #[test]
    fn node_lists_map_cpus_and_a_memory_only_node_has_none() {
        assert_eq!(
            read(&[
                ("node0", Some("0-1,8-9")),
                ("node1", Some("")),
                ("node2", Some("2-3,10-11")),
                ("power", None),
            ]),
            Some(vec![
                (0, 0),
                (1, 0),
                (2, 2),
                (3, 2),
                (8, 0),
                (9, 0),
                (10, 2),
                (11, 2)
            ])
        );
    }

    #[test]
    fn lists_that_cannot_be_trusted_are_not_used() {
        assert_eq!(
            read(&[("node0", Some("0-1")), ("node1", Some("1-2"))]),
            None
        );
        assert_eq!(read(&[("node0", Some("0-1")), ("node1", None)]), None);
        assert_eq!(read(&[("node0", Some("0-x"))]), None);
        assert_eq!(read(&[("node0", Some(""))]), None);
        assert_eq!(
            cpu_nodes(Path::new("/nonexistent/flowlane-numa-sched")),
            None
        );
    }
}
