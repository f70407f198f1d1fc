//! The planning commands (`rss hash`, `plan`, `irq`, `hint`) from the
//! outside: results on a fake two-node NIC box, and bad input that must end
//! in one line on stderr, a non-zero exit and nothing written.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{flowlane, text, BIN};

fn one_line_error(o: &Output, needle: &str) {
    assert!(!o.status.success(), "expected failure: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line: {err}");
    assert!(
        lines[0].contains(needle),
        "expected {needle:?} in {:?}",
        lines[0]
    );
}

/// A fake /sys + /proc with a 4-queue NIC `eth0` on NUMA node 1; removed on drop.
struct FakeBox(PathBuf);

impl FakeBox {
    fn new(tag: &str) -> FakeBox {
        let dir = std::env::temp_dir().join(format!("flowlane-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let put = |p: &str, t: &str| {
            let p = dir.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, t).unwrap();
        };
        let mut interrupts = String::from("  CPU0 CPU1 CPU2 CPU3 CPU4 CPU5 CPU6 CPU7\n");
        for q in 0..4 {
            put(&format!("sys/class/net/eth0/queues/rx-{q}/rps_cpus"), "0\n");
            put(
                &format!("sys/class/net/eth0/device/msi_irqs/{}", 40 + q),
                "msix\n",
            );
            put(&format!("proc/irq/{}/smp_affinity_list", 40 + q), "0-7\n");
            interrupts.push_str(&format!(
                "{}: 1 2 3 4 5 6 7 8 PCI-MSIX-0000:3b:00.0 {q}-edge eth0-TxRx-{q}\n",
                40 + q
            ));
        }
        put("sys/class/net/eth0/device/numa_node", "1\n");
        put("proc/interrupts", &interrupts);
        FakeBox(dir)
    }

    fn roots(&self) -> Vec<String> {
        vec![
            "--sysfs-root".into(),
            self.0.join("sys").display().to_string(),
            "--procfs-root".into(),
            self.0.join("proc").display().to_string(),
        ]
    }

    fn affinity(&self, irq: u32) -> String {
        std::fs::read_to_string(self.0.join(format!("proc/irq/{irq}/smp_affinity_list")))
            .unwrap()
            .trim()
            .to_string()
    }
}

impl Drop for FakeBox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const TWO_NODES: &str = "package:2 numa:1 core:4 pu:1";

fn with(base: &[&str], extra: &[String]) -> Vec<String> {
    base.iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect()
}

fn run(args: &[String]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn rss_hash_matches_the_microsoft_vector() {
    // Microsoft RSS verification suite, IPv4 with TCP ports, first vector.
    let o = flowlane(&[
        "rss",
        "hash",
        "--src",
        "66.9.149.187",
        "--dst",
        "161.142.100.80",
        "--sport",
        "2794",
        "--dport",
        "1766",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["hash"], 0x51cc_c178u32);
    assert_eq!(v["reference"], 0x51cc_c178u32);
    assert_eq!(v["bucket"], 0x51cc_c178u32 as u64 % 128);
}

/// An IPv4-mapped address (as a dual-stack socket names an IPv4 peer) is
/// the IPv4 packet's: `rss hash` and `hint` hash its 12 bytes, as the NIC
/// does, not 36 of an IPv6 header that never comes; `hint` writes IPv6
/// endpoints in brackets.
#[test]
fn an_ipv4_mapped_flow_hashes_as_its_ipv4_packet() {
    let flow = |src: &str, dst: &str| {
        let o = flowlane(&[
            "rss", "hash", "--src", src, "--dst", dst, "--sport", "2794", "--dport", "1766",
            "--json",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v["hash"].as_u64(), v["input"].as_str().map(str::len))
    };
    let v4 = (Some(0x51cc_c178), Some(24));
    assert_eq!(flow("66.9.149.187", "161.142.100.80"), v4);
    assert_eq!(flow("::ffff:66.9.149.187", "::ffff:161.142.100.80"), v4);
    assert_eq!(flow("::ffff:66.9.149.187", "161.142.100.80"), v4);
    let hint = |src: &str, dst: &str| {
        let o = flowlane(&[
            "hint", "--src", src, "--sport", "2794", "--dst", dst, "--dport", "1766",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let t = hint("::ffff:66.9.149.187", "::ffff:161.142.100.80");
    assert!(
        t.contains(" 66.9.149.187:2794 ") && t.contains(" 0x51ccc178 "),
        "{t}"
    );
    let t = hint("fd99::2", "fd99::1");
    assert!(
        t.contains(" [fd99::2]:2794 ") && t.contains(" [fd99::1]:1766 "),
        "{t}"
    );
}

#[test]
fn plan_on_a_two_node_box_stays_on_the_nics_node() {
    let b = FakeBox::new("plan");
    let args = with(
        &[
            "plan",
            "--synthetic",
            TWO_NODES,
            "--iface",
            "eth0",
            "--json",
        ],
        &b.roots(),
    );
    let o = run(&args);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let queues = v["placement"]["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 4);
    assert!(queues.iter().all(|q| q["node"] == 1));
    assert_eq!(v["indirection"].as_array().unwrap().len(), 128);
    assert_eq!(v["irqs"]["kind"], "msi");
    assert_eq!(v["irqs"]["plan"]["entries"].as_array().unwrap().len(), 4);
    // plan reads, never writes.
    assert_eq!(b.affinity(40), "0-7");
}

#[test]
fn irq_apply_on_a_fake_box_writes_the_planned_cpus() {
    let b = FakeBox::new("apply");
    let o = run(&with(
        &["irq", "apply", "--iface", "eth0", "--synthetic", TWO_NODES],
        &b.roots(),
    ));
    assert!(o.status.success(), "{}", text(&o));
    let mut cpus: Vec<String> = (40..44).map(|i| b.affinity(i)).collect();
    cpus.sort();
    assert_eq!(cpus, vec!["4", "5", "6", "7"]);
}

#[test]
fn bad_input_is_one_line_and_nonzero() {
    one_line_error(
        &flowlane(&[
            "rss", "hash", "--src", "1.2.3.4", "--dst", "1.2.3.5", "--key", "6d:5a:zz",
        ]),
        "--key <KEY>': 'z' at position 7 is not a hex digit",
    );
    one_line_error(
        &flowlane(&[
            "rss",
            "hash",
            "--src",
            "1.2.3.4",
            "--dst",
            "1.2.3.5",
            "--table-size",
            "100",
        ]),
        "power of two",
    );
    one_line_error(
        &flowlane(&["rss", "hash", "--src", "1.2.3.4", "--dst", "::1"]),
        "must both be IPv4 or both IPv6",
    );
    one_line_error(
        &flowlane(&["plan", "--topology-xml", "/nonexistent/topo.xml"]),
        "cannot read /nonexistent/topo.xml",
    );
    one_line_error(
        &flowlane(&["plan", "--synthetic", TWO_NODES, "--nic-node", "5"]),
        "--nic-node 5 is not in the topology",
    );
    one_line_error(
        &flowlane(&[
            "hint", "--key", "abc", "--src", "1.1.1.1", "--sport", "1", "--dst", "2.2.2.2",
            "--dport", "2",
        ]),
        "odd number",
    );
    let b = FakeBox::new("bad");
    one_line_error(
        &run(&with(
            &[
                "plan",
                "--synthetic",
                TWO_NODES,
                "--iface",
                "eth0",
                "--queues",
                "5",
            ],
            &b.roots(),
        )),
        "eth0 has 4 receive queues; asked for 5",
    );
    one_line_error(
        &run(&with(
            &[
                "irq",
                "apply",
                "--iface",
                "eth0",
                "--synthetic",
                TWO_NODES,
                "--queues",
                "8",
            ],
            &b.roots(),
        )),
        "eth0 has 4 receive queues; asked for 8",
    );
    one_line_error(
        &run(&with(
            &[
                "irq",
                "show",
                "--iface",
                "nosuch0",
                "--synthetic",
                TWO_NODES,
            ],
            &b.roots(),
        )),
        "no interface nosuch0",
    );
    assert!((40..44).all(|i| b.affinity(i) == "0-7"), "nothing written");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

#[test]
fn no_permission_for_proc_irq_is_one_line_and_writes_nothing() {
    let b = FakeBox::new("perm");
    let args = with(
        &["irq", "apply", "--iface", "eth0", "--synthetic", TWO_NODES],
        &b.roots(),
    );
    let o = if is_root() {
        // Run as nobody: the fake tree's files are root's, mode 0644.
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        for d in [&b.0, &b.0.join("proc"), &b.0.join("sys")] {
            let _ = make_traversable(d);
        }
        cmd.args(&args).output().unwrap()
    } else {
        use std::os::unix::fs::PermissionsExt;
        let f = b.0.join("proc/irq/42/smp_affinity_list");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
        run(&args)
    };
    one_line_error(&o, "no permission to write");
    assert!((40..44).all(|i| b.affinity(i) == "0-7"), "nothing written");
}

fn make_traversable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}

/// `--nic-node` other than sysfs's: the IRQs follow the placement printed
/// (the node given), and the plan says that sysfs differs.
#[test]
fn plan_with_nic_node_plans_the_irqs_for_that_node() {
    let b = FakeBox::new("nicnode");
    let o = run(&with(
        &[
            "plan",
            "--synthetic",
            TWO_NODES,
            "--iface",
            "eth0",
            "--nic-node",
            "0",
            "--json",
        ],
        &b.roots(),
    ));
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cpu_of = |queue: &serde_json::Value| {
        v["placement"]["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| &q["queue"] == queue)
            .map(|q| q["cpu"].clone())
            .unwrap()
    };
    let entries = v["irqs"]["plan"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4);
    for e in entries {
        assert_eq!(
            e["planned"],
            serde_json::json!([cpu_of(&e["queue"])]),
            "{e}"
        );
        assert!(e["planned"][0].as_u64().unwrap() < 4, "node 0's CPUs: {e}");
    }
    assert_eq!(
        v["notes"],
        serde_json::json!([
            "--nic-node 0, though sysfs puts eth0 on node 1: placement and IRQs are planned for \
             node 0 (`flowlane irq apply` plans by sysfs's)"
        ])
    );
}

/// A NIC node without CPUs (memory only): one queue per CPU of the nearest
/// node that has some, as the placement puts them, and said.
#[test]
fn plan_for_a_memory_only_nic_node_takes_the_nearest_nodes_cpus() {
    let o = flowlane(&[
        "plan",
        "--synthetic",
        "pack:2 [numa] [numa] core:2 pu:1",
        "--nic-node",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let queues = v["placement"]["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2, "node 0's two CPUs, not one queue");
    assert!(queues.iter().all(|q| q["node"] == 0), "{queues:?}");
    let notes = v["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].as_str().unwrap().starts_with(
            "node 1 has no CPU the workers may use: 2 queue(s), one per CPU of node 0"
        ),
        "{notes:?}"
    );
}

/// More queues than table entries leave queues without a bucket: refused.
#[test]
fn more_queues_than_buckets_is_one_line() {
    one_line_error(
        &flowlane(&[
            "plan",
            "--synthetic",
            TWO_NODES,
            "--queues",
            "4",
            "--table-size",
            "2",
        ]),
        "4 queues and a 2-entry table: queues 2..=3 would get no bucket; use --table-size 4",
    );
    one_line_error(
        &flowlane(&[
            "rss", "hash", "--src", "1.2.3.4", "--dst", "1.2.3.5", "--queues", "200",
        ]),
        "200 queues and a 128-entry table: queues 128..=199 would get no bucket",
    );
}

/// A NIC with no receive queues, no --queues given: said so, not a
/// complaint about a flag nobody gave.
#[test]
fn plan_on_a_nic_without_receive_queues_says_so() {
    let b = FakeBox::new("noqueues");
    let dir = b.0.join("sys/class/net/eth1");
    std::fs::create_dir_all(dir.join("queues")).unwrap();
    std::fs::create_dir_all(dir.join("device")).unwrap();
    std::fs::write(dir.join("device/numa_node"), "0\n").unwrap();
    let o = run(&with(
        &["plan", "--synthetic", TWO_NODES, "--iface", "eth1"],
        &b.roots(),
    ));
    one_line_error(&o, "eth1 has no receive queues");
    assert!(!text(&o).contains("--queues"), "{}", text(&o));
}
