//! `irq_apply` on fake sysfs/procfs trees built in unique temp directories.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fake `/sys` + `/proc` pair, removed on drop.
struct FakeBox {
    dir: PathBuf,
    roots: Roots,
}

impl FakeBox {
    fn new(tag: &str) -> FakeBox {
        let dir = std::env::temp_dir().join(format!(
            "flowlane-irqtest-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let roots = Roots {
            sysfs_root: dir.join("sys"),
            procfs_root: dir.join("proc"),
        };
        std::fs::create_dir_all(&roots.sysfs_root).unwrap();
        std::fs::create_dir_all(&roots.procfs_root).unwrap();
        FakeBox { dir, roots }
    }

    fn file(&self, path: PathBuf, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// An interface with `rx` queues; `msi` makes it a PCI NIC on `node`.
    fn iface(&self, name: &str, rx: u32, node: i32, msi: Option<&[u32]>) {
        let d = self.roots.sysfs_root.join("class/net").join(name);
        for q in 0..rx {
            std::fs::create_dir_all(d.join(format!("queues/rx-{q}"))).unwrap();
            std::fs::create_dir_all(d.join(format!("queues/tx-{q}"))).unwrap();
        }
        self.file(d.join("threaded"), "0\n");
        if let Some(irqs) = msi {
            self.file(d.join("device/numa_node"), &format!("{node}\n"));
            for irq in irqs {
                self.file(d.join(format!("device/msi_irqs/{irq}")), "msix\n");
            }
        }
    }

    /// `/proc/interrupts` with `cpus` columns and the given IRQs, each with
    /// its `smp_affinity_list`.
    fn interrupts(&self, cpus: u32, irqs: &[(u32, &str, &str)]) {
        let mut text: String = (0..cpus).map(|c| format!("       CPU{c}")).collect();
        text.push('\n');
        for (irq, name, affinity) in irqs {
            text.push_str(&format!("{irq:>4}:"));
            for _ in 0..cpus {
                text.push_str("          7");
            }
            text.push_str(&format!("  IR-PCI-MSI 524288-edge      {name}\n"));
            self.file(
                self.roots
                    .procfs_root
                    .join(format!("irq/{irq}/smp_affinity_list")),
                &format!("{affinity}\n"),
            );
            self.file(
                self.roots
                    .procfs_root
                    .join(format!("irq/{irq}/smp_affinity")),
                "ffff\n",
            );
        }
        text.push_str(" NMI:          0          0   Non-maskable interrupts\n");
        self.file(self.roots.procfs_root.join("interrupts"), &text);
    }

    /// A task in the fake `/proc`.
    fn task(&self, pid: u32, comm: &str, allowed: &str) {
        let d = self.roots.procfs_root.join(pid.to_string());
        self.file(d.join("comm"), &format!("{comm}\n"));
        self.file(
            d.join("status"),
            &format!("Name:\t{comm}\nPid:\t{pid}\nCpus_allowed_list:\t{allowed}\n"),
        );
    }

    /// Every file under the box with its contents.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(base, &p, out);
                } else {
                    let text = std::fs::read_to_string(&p).unwrap();
                    out.insert(p.strip_prefix(base).unwrap().to_path_buf(), text);
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.dir, &self.dir, &mut out);
        out
    }
}

impl Drop for FakeBox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Files that differ between two snapshots, with their new contents.
fn changed(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
) -> BTreeMap<PathBuf, String> {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "files were created or removed"
    );
    after
        .iter()
        .filter(|(p, t)| before.get(*p) != Some(t))
        .map(|(p, t)| (p.clone(), t.clone()))
        .collect()
}

fn no_setter() -> impl FnMut(u32, &[u32]) -> Result<()> {
    |pid, _| panic!("no task affinity should be set (pid {pid})")
}

/// Two packages of four cores, one NUMA node each: CPUs 0-3 on node 0,
/// 4-7 on node 1.
fn two_node_topology() -> Topology {
    let t = Topology::from_synthetic_description("package:2 numa:1 core:4 pu:1").unwrap();
    assert_eq!(t.node_ids(), vec![0, 1]);
    t
}

/// A 4-queue NIC on node 1 beside a second NIC and unrelated IRQs.
fn two_node_nic_box() -> FakeBox {
    let b = FakeBox::new("twonode");
    b.iface("eth0", 4, 1, Some(&[120, 121, 122, 123, 124]));
    b.iface("eth1", 2, 0, Some(&[130, 131]));
    b.interrupts(
        8,
        &[
            (0, "timer", "0-7"),
            (120, "eth0-TxRx-0", "0-7"),
            (121, "eth0-TxRx-1", "0-7"),
            (122, "eth0-TxRx-2", "0-7"),
            (123, "eth0-TxRx-3", "0-7"),
            (124, "eth0", "0-7"), // the link/misc vector: not a queue
            (130, "eth1-TxRx-0", "0-7"),
            (131, "eth1-TxRx-1", "0-7"),
        ],
    );
    b
}

#[test]
fn show_pairs_queue_irqs_with_node_local_cpus() {
    let b = two_node_nic_box();
    let topo = two_node_topology();
    let v = inspect(&b.roots, "eth0", &topo, None, None).unwrap();
    assert_eq!(v.iface.numa_node, Some(1));
    let QueueIrqs::Msi { plan } = &v.irqs else {
        panic!("expected MSI IRQs")
    };
    let irqs: Vec<(u16, u32)> = plan.entries.iter().map(|e| (e.queue, e.irq)).collect();
    assert_eq!(irqs, vec![(0, 120), (1, 121), (2, 122), (3, 123)]);
    let mut cpus: Vec<u32> = plan.entries.iter().map(|e| e.planned[0]).collect();
    assert!(plan
        .entries
        .iter()
        .all(|e| e.current == (0..8).collect::<Vec<_>>()));
    cpus.sort_unstable();
    assert_eq!(cpus, vec![4, 5, 6, 7], "all on the NIC's node 1, distinct");
}

#[test]
fn apply_writes_exactly_the_changed_affinities() {
    let b = two_node_nic_box();
    let topo = two_node_topology();
    // Queue 0's IRQ already sits on its planned CPU: it must not be written.
    let q0 = inspect(&b.roots, "eth0", &topo, None, None)
        .unwrap()
        .placement
        .queues[0]
        .cpu;
    std::fs::write(
        b.roots.procfs_root.join("irq/120/smp_affinity_list"),
        format!("{q0}\n"),
    )
    .unwrap();
    let before = b.snapshot();

    let (view, done) = apply(&b.roots, "eth0", &topo, None, None, false, &mut no_setter()).unwrap();
    let after = b.snapshot();
    let expected: BTreeMap<PathBuf, String> = view
        .placement
        .queues
        .iter()
        .skip(1)
        .map(|p| {
            (
                PathBuf::from(format!(
                    "proc/irq/{}/smp_affinity_list",
                    120 + u32::from(p.queue)
                )),
                p.cpu.to_string(),
            )
        })
        .collect();
    assert_eq!(changed(&before, &after), expected);
    assert_eq!(done.writes.len(), 3);

    // Applying again changes nothing.
    let (_, again) = apply(&b.roots, "eth0", &topo, None, None, false, &mut no_setter()).unwrap();
    assert!(again.writes.is_empty());
    assert!(changed(&after, &b.snapshot()).is_empty());
}

#[test]
fn dry_run_writes_nothing() {
    let b = two_node_nic_box();
    let topo = two_node_topology();
    let before = b.snapshot();
    let (_, done) = apply(&b.roots, "eth0", &topo, None, None, true, &mut no_setter()).unwrap();
    assert_eq!(done.writes.len(), 4);
    assert!(changed(&before, &b.snapshot()).is_empty());
}

#[test]
fn more_queues_than_the_device_is_refused() {
    let b = two_node_nic_box();
    let topo = two_node_topology();
    let e = inspect(&b.roots, "eth0", &topo, Some(5), None).unwrap_err();
    assert!(format!("{e:#}").contains("eth0 has 4 receive queues; asked for 5"));
    let e = inspect(&b.roots, "nosuch0", &topo, None, None).unwrap_err();
    assert!(format!("{e:#}").contains("no interface nosuch0"));
}

#[test]
fn a_missing_target_stops_apply_before_any_write() {
    let b = two_node_nic_box();
    let topo = two_node_topology();
    std::fs::remove_file(b.roots.procfs_root.join("irq/123/smp_affinity_list")).unwrap();
    // inspect needs the current affinity of every queue IRQ.
    let e = apply(&b.roots, "eth0", &topo, None, None, false, &mut no_setter()).unwrap_err();
    assert!(format!("{e:#}").contains("irq/123/smp_affinity_list"));

    // A target that vanishes between planning and writing: nothing written.
    let b = two_node_nic_box();
    let before = b.snapshot();
    let writes = vec![
        (PathBuf::from("irq/120/smp_affinity_list"), "4".to_string()),
        (PathBuf::from("irq/999/smp_affinity_list"), "5".to_string()),
    ];
    let e = write_all(&b.roots.procfs_root, &writes, &["0-7".into(), "0-7".into()]).unwrap_err();
    assert!(format!("{e:#}").contains("nothing written"));
    assert!(changed(&before, &b.snapshot()).is_empty());
}

#[test]
fn permission_denied_is_one_line_and_writes_nothing() {
    let b = two_node_nic_box();
    let topo = two_node_topology();
    let target = b.roots.procfs_root.join("irq/122/smp_affinity_list");
    if nix::unistd::geteuid().is_root() {
        // Root ignores permission bits: control/tests/irq_cli.rs runs the
        // binary as nobody (setpriv) on a fake tree instead.
        eprintln!("skipping: root ignores permission bits; see control/tests/irq_cli.rs");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = b.snapshot();
    let r = apply(&b.roots, "eth0", &topo, None, None, false, &mut no_setter());
    let e = format!("{:#}", r.unwrap_err());
    assert!(e.contains("no permission to write"), "{e}");
    assert!(!e.contains('\n'));
    assert!(changed(&before, &b.snapshot()).is_empty());
}

#[test]
fn veth_uses_threaded_napi_threads() {
    let b = FakeBox::new("napi");
    b.iface("xsk0", 4, -1, None);
    b.interrupts(2, &[(0, "timer", "0-1")]);
    b.task(1, "systemd", "0-1");
    b.task(500, "napi/xsk0-8195", "0-1");
    b.task(501, "napi/xsk0-8193", "0-1");
    b.task(502, "napi/xsk0-8194", "1");
    b.task(503, "napi/xsk0-8196", "0-1");
    b.task(504, "napi/peer0-8197", "0-1"); // another interface's
    b.task(505, "napi/xsk01-8198", "0-1"); // a longer name
    std::fs::write(b.roots.sysfs_root.join("class/net/xsk0/threaded"), "1\n").unwrap();
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();

    let v = inspect(&b.roots, "xsk0", &topo, None, None).unwrap();
    assert!(v.shared.is_some(), "4 queues on 2 CPUs share");
    let QueueIrqs::Napi { threaded, threads } = &v.irqs else {
        panic!("expected NAPI threads")
    };
    assert!(threaded);
    let found: Vec<(u16, u32, u32)> = threads
        .iter()
        .map(|t| (t.queue, t.napi_id, t.pid))
        .collect();
    assert_eq!(
        found,
        vec![
            (0, 8193, 501),
            (1, 8194, 502),
            (2, 8195, 500),
            (3, 8196, 503)
        ]
    );
    let planned: Vec<u32> = threads.iter().map(|t| t.planned).collect();
    assert_eq!(planned, vec![0, 1, 0, 1]);

    let before = b.snapshot();
    let mut set = Vec::new();
    let mut rec = |pid: u32, cpus: &[u32]| {
        set.push((pid, cpus.to_vec()));
        Ok(())
    };
    let (_, done) = apply(&b.roots, "xsk0", &topo, None, None, false, &mut rec).unwrap();
    // Queue 1's thread already runs on CPU 1 only.
    assert_eq!(set, vec![(501, vec![0]), (500, vec![0]), (503, vec![1])]);
    assert!(done.writes.is_empty());
    assert!(changed(&before, &b.snapshot()).is_empty());
}

#[test]
fn napi_apply_switches_threaded_on_first() {
    let b = FakeBox::new("napioff");
    b.iface("xsk0", 2, -1, None);
    b.interrupts(2, &[]);
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();
    let before = b.snapshot();
    let (v, done) = apply(&b.roots, "xsk0", &topo, None, None, true, &mut no_setter()).unwrap();
    assert!(matches!(
        v.irqs,
        QueueIrqs::Napi {
            threaded: false,
            ..
        }
    ));
    assert!(done.enabled_threaded);
    assert!(changed(&before, &b.snapshot()).is_empty(), "dry run");

    let (_, done) = apply(&b.roots, "xsk0", &topo, None, None, false, &mut no_setter()).unwrap();
    assert!(done.enabled_threaded);
    let diff = changed(&before, &b.snapshot());
    assert_eq!(
        diff,
        BTreeMap::from([(
            PathBuf::from("sys/class/net/xsk0/threaded"),
            "1".to_string()
        )])
    );
}

#[test]
fn napi_threads_of_same_named_interfaces_elsewhere_are_refused() {
    let b = FakeBox::new("napiamb");
    b.iface("xsk0", 1, -1, None);
    b.task(10, "napi/xsk0-1", "0");
    b.task(11, "napi/xsk0-7", "0");
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();
    let e = inspect(&b.roots, "xsk0", &topo, None, None).unwrap_err();
    assert!(format!("{e:#}").contains("cannot be told apart"));
}

/// Kernels before 5.17 show `napi/veth-fl0-8193` and `napi/veth-fl0-8194`
/// both as `napi/veth-fl0-8`: without napi-get, one line saying so.
#[test]
fn napi_threads_with_one_cut_name_are_refused() {
    let b = FakeBox::new("napicut");
    b.iface("veth-fl0", 2, -1, None);
    std::fs::write(
        b.roots.sysfs_root.join("class/net/veth-fl0/threaded"),
        "1\n",
    )
    .unwrap();
    b.task(20, "napi/veth-fl0-8", "0-1");
    b.task(21, "napi/veth-fl0-8", "0-1");
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();
    let e = format!(
        "{:#}",
        inspect(&b.roots, "veth-fl0", &topo, None, None).unwrap_err()
    );
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.contains("2 threads show as `napi/veth-fl0-8`")
            && e.contains("cut thread names to 15 bytes"),
        "{e}"
    );
    assert!(e.contains("rename the interface"), "{e}");
}

/// napi-get names each NAPI's thread: cut names do not matter then.
#[test]
fn napi_get_pids_come_before_names() {
    use flowlane_numa_sched::nic_caps::NapiFacts;
    let b = FakeBox::new("napiget");
    b.iface("veth-fl0", 2, -1, None);
    std::fs::write(
        b.roots.sysfs_root.join("class/net/veth-fl0/threaded"),
        "1\n",
    )
    .unwrap();
    b.task(20, "napi/veth-fl0-8", "1");
    b.task(21, "napi/veth-fl0-8", "0-1");
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();
    let netdev = |_: &Roots, name: &str| {
        Some(NicCaps {
            iface: name.into(),
            rx_queues: 2,
            napis: vec![
                NapiFacts {
                    id: 8194,
                    irq: None,
                    pid: Some(20),
                },
                NapiFacts {
                    id: 8193,
                    irq: None,
                    pid: Some(21),
                },
            ],
            ..NicCaps::default()
        })
    };
    let v = inspect_with(&b.roots, "veth-fl0", &topo, None, None, &netdev).unwrap();
    let QueueIrqs::Napi { threads, .. } = &v.irqs else {
        panic!("expected NAPI threads")
    };
    let found: Vec<(u16, u32, u32, &str, Vec<u32>)> = threads
        .iter()
        .map(|t| {
            (
                t.queue,
                t.napi_id,
                t.pid,
                t.name.as_str(),
                t.current.clone(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (0, 8193, 21, "napi/veth-fl0-8193", vec![0, 1]),
            (1, 8194, 20, "napi/veth-fl0-8194", vec![1]),
        ]
    );
    // A kernel without napi-get threads: by name, which here cannot tell them.
    let none = |_: &Roots, _: &str| None;
    assert!(inspect_with(&b.roots, "veth-fl0", &topo, None, None, &none).is_err());
}

/// A name of exactly 15 bytes that one thread shows is that thread's (a
/// kernel since 5.17 shows it whole; an older one cut no digit that tells
/// the threads apart).
#[test]
fn napi_threads_named_in_15_bytes_are_found() {
    let b = FakeBox::new("napi15");
    b.iface("veth0", 2, -1, None);
    std::fs::write(b.roots.sysfs_root.join("class/net/veth0/threaded"), "1\n").unwrap();
    b.task(30, "napi/veth0-8194", "0-1");
    b.task(31, "napi/veth0-8193", "0-1");
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();
    let v = inspect(&b.roots, "veth0", &topo, None, None).unwrap();
    let QueueIrqs::Napi { threads, .. } = &v.irqs else {
        panic!("expected NAPI threads")
    };
    let found: Vec<(u16, u32, u32)> = threads
        .iter()
        .map(|t| (t.queue, t.napi_id, t.pid))
        .collect();
    assert_eq!(found, vec![(0, 8193, 31), (1, 8194, 30)]);
}

#[test]
fn virtio_net_irqs_come_from_the_pci_parent() {
    let b = FakeBox::new("virtio");
    let pci = b.roots.sysfs_root.join("devices/pci0000:00/0000:00:03.0");
    std::fs::create_dir_all(pci.join("virtio2")).unwrap();
    for irq in [37, 38, 39] {
        b.file(pci.join(format!("msi_irqs/{irq}")), "msix\n");
    }
    b.file(pci.join("numa_node"), "0\n");
    let d = b.roots.sysfs_root.join("class/net/eth0");
    std::fs::create_dir_all(d.join("queues/rx-0")).unwrap();
    std::os::unix::fs::symlink(pci.join("virtio2"), d.join("device")).unwrap();
    b.interrupts(
        2,
        &[
            (37, "virtio2-config", "0-1"),
            (38, "virtio2-input.0", "0-1"),
            (39, "virtio2-output.0", "0-1"),
            (41, "virtio3-rx", "0-1"),
        ],
    );
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();
    let v = inspect(&b.roots, "eth0", &topo, None, None).unwrap();
    assert_eq!(v.iface.numa_node, Some(0));
    assert_eq!(v.iface.msi_irqs, Some(vec![37, 38, 39]));
    let QueueIrqs::Msi { plan } = &v.irqs else {
        panic!("expected MSI IRQs")
    };
    assert_eq!(plan.entries.len(), 1);
    assert_eq!((plan.entries[0].queue, plan.entries[0].irq), (0, 38));
}

/// A NAPI thread that cannot be pinned (gone meanwhile, or no
/// CAP_SYS_NICE): the threads pinned before it go back to where they ran,
/// since the caller records nothing to put back of a failed apply.
#[test]
fn a_failed_napi_pin_puts_back_the_earlier_ones() {
    let b = FakeBox::new("napifail");
    b.iface("xsk0", 4, -1, None);
    b.interrupts(2, &[(0, "timer", "0-1")]);
    b.task(500, "napi/xsk0-8195", "0-1");
    b.task(501, "napi/xsk0-8193", "0-1");
    b.task(502, "napi/xsk0-8194", "1");
    b.task(503, "napi/xsk0-8196", "0-1");
    std::fs::write(b.roots.sysfs_root.join("class/net/xsk0/threaded"), "1\n").unwrap();
    let topo = Topology::from_synthetic_description("package:1 core:2 pu:1").unwrap();
    let mut set = Vec::new();
    let mut rec = |pid: u32, cpus: &[u32]| {
        set.push((pid, cpus.to_vec()));
        if pid == 500 {
            anyhow::bail!("no such process");
        }
        Ok(())
    };
    let e = apply(&b.roots, "xsk0", &topo, None, None, false, &mut rec).unwrap_err();
    assert!(format!("{e:#}").contains("put back"), "{e:#}");
    // 501 pinned to CPU 0, 500 failed, 501 back on 0-1.
    assert_eq!(set, vec![(501, vec![0]), (500, vec![0]), (501, vec![0, 1])]);
}

/// An ENA NIC (AWS: `<if>-Tx-Rx-<n>`) is planned; a driver whose IRQ
/// names flowlane does not know is named in the error, not blamed on the
/// link.
#[test]
fn ena_queue_irqs_are_found_and_unknown_names_are_shown() {
    let b = FakeBox::new("ena");
    b.iface("eth0", 2, 0, Some(&[39, 40, 41]));
    b.interrupts(
        8,
        &[
            (39, "ena-mgmnt@pci:0000:00:05.0", "0-7"),
            (40, "eth0-Tx-Rx-0", "0-7"),
            (41, "eth0-Tx-Rx-1", "0-7"),
        ],
    );
    let topo = two_node_topology();
    let v = inspect(&b.roots, "eth0", &topo, None, None).unwrap();
    let QueueIrqs::Msi { plan } = &v.irqs else {
        panic!("expected MSI IRQs")
    };
    let irqs: Vec<(u16, u32)> = plan.entries.iter().map(|e| (e.queue, e.irq)).collect();
    assert_eq!(irqs, vec![(0, 40), (1, 41)]);

    let odd = FakeBox::new("odd");
    odd.iface("eth0", 2, 0, Some(&[50, 51]));
    odd.interrupts(8, &[(50, "foo-q0", "0-7"), (51, "foo-q1", "0-7")]);
    let e = inspect(&odd.roots, "eth0", &topo, None, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("foo-q0") && !e.contains("is the interface up"),
        "{e}"
    );
}
