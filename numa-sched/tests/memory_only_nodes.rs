//! A memory-only NUMA node (CXL, HBM, persistent memory) that hwloc attaches beside a node
//! with CPUs must not take that node's CPUs (`Topology::from_system`).
//!
//! Each test writes a fake Linux sysfs tree in a temporary directory and probes it with
//! hwloc in a child process of this test binary, with `HWLOC_FSROOT` pointing at it and
//! `HWLOC_COMPONENTS=linux,stop` (only the Linux backend: the x86 one would read this
//! machine's CPUID). The environment is set for the child only: it is process-wide, and
//! hwloc reads it in every probe, which other tests of a process may run at the same time.
//! The child prints the snapshot as JSON; the test rebuilds it and checks it.
#![cfg(feature = "hwloc")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use flowlane_numa_sched::{plan_placement, Core, NodeDistances, NumaNode, PlacementNote, Topology};
use serde_json::Value;

/// The line the child prints its snapshot on.
const MARK: &str = "FLOWLANE-TOPOLOGY ";

/// Run by the tests below in a child process, with `HWLOC_FSROOT` set there.
#[test]
#[ignore = "the child of the tests below: probes the fake tree HWLOC_FSROOT names"]
fn child_prints_the_probe() {
    let t = Topology::from_system().unwrap();
    println!("{MARK}{}", serde_json::to_string(&t).unwrap());
}

/// A fake `/sys` (and empty `/proc`), removed when dropped.
struct FakeRoot(PathBuf);

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The reviewer's machine: CPUs 0-3 and 8-11 online (4-7 offline), cores {n, n+8};
/// package 0 and node 0 hold CPUs 0, 1, 8, 9; package 1 and node 2 hold 2, 3, 10, 11;
/// node 1 has memory only, nearest to node 2 (distances 10 30 21 / 30 10 14 / 21 14 10).
struct Machine {
    /// Write Linux's `node<N>/cpulist` files (hwloc reads `cpumap`).
    cpulists: bool,
    /// Make node 1 a device-DAX region onlined by the kmem driver.
    dax_kmem: bool,
}

const ONLINE: [u32; 8] = [0, 1, 2, 3, 8, 9, 10, 11];
const NODE_CPUS: [&[u32]; 3] = [&[0, 1, 8, 9], &[], &[2, 3, 10, 11]];
const DISTANCES: [&str; 3] = ["10 30 21", "30 10 14", "21 14 10"];

/// A kernel CPU mask (`%*pb`: 32-bit hex words, most significant first).
fn mask(cpus: &[u32]) -> String {
    let bits: u64 = cpus.iter().map(|&c| 1u64 << c).sum();
    format!("{:08x},{:08x}", bits >> 32, bits & 0xffff_ffff)
}

/// A kernel CPU list (`%*pbl`), written plainly.
fn list(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{text}\n")).unwrap();
}

impl Machine {
    fn build(&self) -> FakeRoot {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let root = FakeRoot(std::env::temp_dir().join(format!(
            "flowlane-numa-sched-fsroot-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )));
        let r = &root.0;
        let cpu = r.join("sys/devices/system/cpu");
        write(&cpu.join("possible"), "0-11");
        write(&cpu.join("present"), "0-11");
        write(&cpu.join("online"), "0-3,8-11");
        write(&cpu.join("offline"), "4-7");
        for c in 0..12u32 {
            let dir = cpu.join(format!("cpu{c}"));
            let online = ONLINE.contains(&c);
            write(&dir.join("online"), if online { "1" } else { "0" });
            if !online {
                continue;
            }
            let package: &[u32] = if NODE_CPUS[0].contains(&c) {
                NODE_CPUS[0]
            } else {
                NODE_CPUS[2]
            };
            let core = [c % 8, c % 8 + 8];
            let topo = dir.join("topology");
            write(
                &topo.join("physical_package_id"),
                if package == NODE_CPUS[0] { "0" } else { "1" },
            );
            write(&topo.join("core_id"), &(c % 8).to_string());
            for name in ["core_cpus", "thread_siblings"] {
                write(&topo.join(name), &mask(&core));
                write(&topo.join(format!("{name}_list")), &list(&core));
            }
            for name in ["package_cpus", "core_siblings"] {
                write(&topo.join(name), &mask(package));
                write(&topo.join(format!("{name}_list")), &list(package));
            }
        }
        let node = r.join("sys/devices/system/node");
        write(&node.join("possible"), "0-2");
        write(&node.join("online"), "0-2");
        write(&node.join("has_cpu"), "0,2");
        write(&node.join("has_memory"), "0-2");
        for (n, cpus) in NODE_CPUS.iter().enumerate() {
            let dir = node.join(format!("node{n}"));
            write(&dir.join("cpumap"), &mask(cpus));
            if self.cpulists {
                write(&dir.join("cpulist"), &list(cpus));
            }
            write(&dir.join("distance"), DISTANCES[n]);
            write(
                &dir.join("meminfo"),
                &format!("Node {n} MemTotal:       1048576 kB"),
            );
        }
        if self.dax_kmem {
            let dax = r.join("sys/bus/dax");
            write(&dax.join("devices/dax0.0/target_node"), "1");
            std::fs::create_dir_all(dax.join("drivers/kmem/dax0.0")).unwrap();
        }
        std::fs::create_dir_all(r.join("proc")).unwrap();
        root
    }

    /// Probes the tree in a child process and rebuilds its snapshot.
    fn probe(&self) -> Topology {
        let root = self.build();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "child_prints_the_probe",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HWLOC_FSROOT", &root.0)
            .env("HWLOC_COMPONENTS", "linux,stop")
            .env_remove("HWLOC_XMLFILE")
            .env_remove("HWLOC_SYNTHETIC")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let json = stdout
            .lines()
            .find_map(|l| l.split_once(MARK).map(|(_, json)| json))
            .unwrap_or_else(|| {
                panic!(
                    "the child printed no snapshot ({}):\n{stdout}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        snapshot(&serde_json::from_str(json).unwrap())
    }
}

/// The snapshot back from its JSON form (caches left out).
fn snapshot(v: &Value) -> Topology {
    let n = |v: &Value| u32::try_from(v.as_u64().unwrap()).unwrap();
    let ns = |v: &Value| v.as_array().unwrap().iter().map(n).collect::<Vec<_>>();
    let cores = v["cores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Core {
            os_index: n(&c["os_index"]),
            core_id: n(&c["core_id"]),
            package: n(&c["package"]),
            numa_node: n(&c["numa_node"]),
            smt_sibling_rank: n(&c["smt_sibling_rank"]),
        })
        .collect();
    let nodes = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| NumaNode {
            os_index: n(&x["os_index"]),
            cpus: ns(&x["cpus"]),
            memory_bytes: x["memory_bytes"].as_u64(),
        })
        .collect();
    let distances = (!v["distances"].is_null()).then(|| {
        NodeDistances::new(ns(&v["distances"]["nodes"]), ns(&v["distances"]["values"])).unwrap()
    });
    Topology::new(cores, nodes, Vec::new(), distances).unwrap()
}

fn cpus(t: &Topology, node: u32) -> Vec<u32> {
    t.node(node).unwrap().cpus.clone()
}

#[test]
fn a_memory_only_node_numbered_below_a_cpu_node_takes_none_of_its_cpus() {
    let t = Machine {
        cpulists: true,
        dax_kmem: false,
    }
    .probe();
    assert_eq!(t.node_ids(), [0, 1, 2]);
    assert_eq!(cpus(&t, 0), [0, 1, 8, 9]);
    assert_eq!(cpus(&t, 1), [] as [u32; 0], "node 1 has memory only");
    assert_eq!(cpus(&t, 2), [2, 3, 10, 11]);
    assert_eq!(t.cpu(10).unwrap().numa_node, 2);
    assert_eq!(t.node(1).unwrap().memory_bytes, Some(1 << 30));
    assert_eq!(t.distance(1, 2), Some(14));

    // The NIC on node 2: its CPUs, no queue remote.
    let plan = plan_placement(&t, Some(2), 4, None, &[]).unwrap();
    assert!(plan.queues.iter().all(|q| q.node == 2 && q.mem_node == 2));
    assert!(
        !plan
            .notes
            .iter()
            .any(|n| matches!(n, PlacementNote::RemoteNode { .. })),
        "{:?}",
        plan.notes
    );
    // A NIC on the memory-only node: the nearest node with CPUs (2, at 14), then node 0.
    let plan = plan_placement(&t, Some(1), 6, None, &[]).unwrap();
    let nodes: Vec<u32> = plan.queues.iter().map(|q| q.mem_node).collect();
    assert_eq!(nodes, [2, 2, 2, 2, 0, 0]);
    assert!(plan.notes.contains(&PlacementNote::RemoteNode {
        queue: 0,
        node: 2,
        nic_node: 1
    }));
}

#[test]
fn without_linux_lists_a_kmem_dax_node_loses_the_tie() {
    let t = Machine {
        cpulists: false,
        dax_kmem: true,
    }
    .probe();
    assert_eq!(cpus(&t, 1), [] as [u32; 0]);
    assert_eq!(cpus(&t, 2), [2, 3, 10, 11]);
}

/// The documented limit: with neither Linux's lists nor a mark from hwloc, the two nodes
/// are identical in hwloc's tree but for their numbers, and the lower one takes the CPUs.
#[test]
fn without_linux_lists_or_a_mark_the_lower_number_takes_the_tie() {
    let t = Machine {
        cpulists: false,
        dax_kmem: false,
    }
    .probe();
    assert_eq!(cpus(&t, 1), [2, 3, 10, 11]);
    assert_eq!(cpus(&t, 2), [] as [u32; 0]);
}
