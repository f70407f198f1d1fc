//! The NIC capability model on recorded answers (`nic-recordings/`): a
//! ConnectX-6 Dx (mlx5) and an E810 (ice) written from their drivers'
//! sources, and this machine's virtio-net and a test-bed veth recorded by
//! `flowlane nic caps --record`. Each goes through `flowlane plan --explain
//! --nic-recording FILE` as a user would run it; what the hardware, the
//! kernel and flowlane do must follow from what each NIC can do.

mod common;

use std::path::PathBuf;

use common::{flowlane as run, text};
use serde_json::Value;

fn recording(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/nic-recordings")
        .join(name)
}

/// `plan --explain --json` for a recording and a worker count: part name →
/// (done by, what, action).
fn explain(name: &str, workers: u32) -> Vec<(String, String, String, Option<String>)> {
    let path = recording(name);
    let o = run(&[
        "plan",
        "--explain",
        "--json",
        "--nic-recording",
        path.to_str().unwrap(),
        "--queues",
        &workers.to_string(),
        "--synthetic",
        "pack:2 [numa] core:8 pu:1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["workers"], workers);
    v["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["part"].as_str().unwrap().to_string(),
                p["done_by"].as_str().unwrap().to_string(),
                p["what"].as_str().unwrap().to_string(),
                p["action"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn part<'a>(
    parts: &'a [(String, String, String, Option<String>)],
    name: &str,
) -> &'a (String, String, String, Option<String>) {
    parts
        .iter()
        .find(|p| p.0 == name)
        .unwrap_or_else(|| panic!("no part {name} in {parts:?}"))
}

#[test]
fn mlx5_does_it_all_in_hardware() {
    let p = explain("mlx5-connectx6dx.toml", 8);
    for name in [
        "rss-hash",
        "indirection-table",
        "queues",
        "af-xdp",
        "xdp-program",
        "interrupts",
        "numa",
    ] {
        assert_eq!(part(&p, name).1, "hardware", "{name}: {p:?}");
    }
    assert!(part(&p, "rss-hash").2.contains("40-byte key"));
    assert_eq!(
        part(&p, "indirection-table").2,
        "256 entries over 8 queue(s), 32 bucket(s) each"
    );
    assert!(part(&p, "interrupts").2.contains("0:148 1:149"), "{p:?}");
    assert!(part(&p, "numa").2.contains("node 1"));
    // Offered but unused: said so, not claimed.
    assert_eq!(part(&p, "tx-checksum").1, "flowlane");
    // ntuple available but off: the command to turn it on.
    assert_eq!(
        part(&p, "flow-steering").3.as_deref(),
        Some("ethtool -K enp129s0f0np0 ntuple on")
    );
    // Nine workers on at most eight channels: one spills, in software.
    let p = explain("mlx5-connectx6dx.toml", 9);
    assert_eq!(part(&p, "queues").1, "flowlane");
    assert!(part(&p, "queues")
        .2
        .contains("1 without a queue (software spill)"));
}

#[test]
fn ice_has_room_for_more_channels() {
    let p = explain("ice-e810.toml", 12);
    let q = part(&p, "queues");
    assert_eq!(q.1, "hardware");
    assert_eq!(q.3.as_deref(), Some("ethtool -L ens1f0 combined 12"));
    assert!(part(&p, "rss-hash").2.contains("52-byte key"));
    assert!(part(&p, "af-xdp").2.contains("up to 8 fragment(s)"));
    assert_eq!(part(&p, "flow-steering").3, None, "ntuple already on");
    // The IRQs named are those of the queues the workers use: 8 exist.
    assert!(part(&p, "interrupts").2.contains("7:103"), "{p:?}");
}

#[test]
fn this_machines_virtio_net() {
    let p = explain("virtio-net-kvm.toml", 1);
    assert_eq!(part(&p, "rss-hash").1, "flowlane", "no RSS in this device");
    assert_eq!(part(&p, "af-xdp").1, "hardware", "virtio-net has zero-copy");
    assert_eq!(part(&p, "interrupts").1, "hardware");
    assert!(part(&p, "interrupts").2.contains("0:38"), "matched by name");
    assert_eq!(part(&p, "numa").1, "flowlane");
    // No RSS, one queue: flowlane steers every frame in software.
    let two = explain("virtio-net-kvm.toml", 2);
    assert_eq!(part(&two, "queues").1, "flowlane");
    assert!(
        part(&two, "queues").2.contains("software steering"),
        "{two:?}"
    );
}

#[test]
fn the_test_beds_veth() {
    let p = explain("veth-bed.toml", 2);
    assert_eq!(part(&p, "rss-hash").1, "flowlane");
    assert_eq!(part(&p, "indirection-table").1, "flowlane");
    assert!(part(&p, "indirection-table")
        .2
        .contains("test bed's BPF map"));
    assert_eq!(part(&p, "queues").1, "hardware");
    assert_eq!(part(&p, "af-xdp").1, "kernel", "copy mode");
    assert_eq!(part(&p, "xdp-program").1, "hardware", "native XDP");
    assert_eq!(part(&p, "interrupts").1, "kernel");
    assert!(part(&p, "interrupts").2.contains("2 napi/xsk0-N"));
    // The bed's emulated RSS says each frame's bucket: a third worker spills.
    let three = explain("veth-bed.toml", 3);
    assert_eq!(part(&three, "queues").1, "flowlane");
}

/// The ConnectX-6 Dx with `ethtool -X IF xfrm symmetric-xor`: its hash is
/// not the one flowlane computes, and the plan says so (not "bit for
/// bit"), names the command that undoes it, and promises no bucket moves.
#[test]
fn a_symmetric_hash_is_not_called_predictable() {
    let recorded = std::fs::read_to_string(recording("mlx5-connectx6dx.toml")).unwrap();
    let symmetric = recorded.replace("input_xfrm = \"none\"", "input_xfrm = \"symmetric-xor\"");
    assert_ne!(recorded, symmetric);
    let dir = std::env::temp_dir().join(format!("flowlane-nicrec-sym-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mlx5-symmetric.toml");
    std::fs::write(&file, symmetric).unwrap();
    let o = run(&[
        "plan",
        "--explain",
        "--json",
        "--nic-recording",
        file.to_str().unwrap(),
        "--queues",
        "8",
        "--synthetic",
        "pack:2 [numa] core:8 pu:1",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let parts = v["parts"].as_array().unwrap();
    let find = |name: &str| parts.iter().find(|p| p["part"] == name).unwrap();
    let h = find("rss-hash");
    assert!(!h["why"].as_str().unwrap().contains("bit for bit"), "{h}");
    assert_eq!(h["action"], "ethtool -X enp129s0f0np0 xfrm none", "{h}");
    let t = find("indirection-table");
    assert!(!t["why"].as_str().unwrap().contains("rewriting"), "{t}");
    // As recorded, without the transformation: predicted, moves promised.
    let p = explain("mlx5-connectx6dx.toml", 8);
    assert_eq!(part(&p, "rss-hash").3, None);
}

#[test]
fn the_human_view_and_bad_recordings() {
    let path = recording("mlx5-connectx6dx.toml");
    let o = run(&[
        "plan",
        "--explain",
        "--nic-recording",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("enp129s0f0np0 (mlx5_core): 8 worker(s)"),
        "{out}"
    );
    assert!(out.contains("why: "), "{out}");

    let dir = std::env::temp_dir().join(format!("flowlane-nicrec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "iface = \"x\"\nrx_queues = 1\ntx_queues = 1\nlanes = 4\n",
    )
    .unwrap();
    let o = run(&[
        "plan",
        "--explain",
        "--nic-recording",
        bad.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("is not a NIC recording (line 4)"), "{err}");
    assert!(err.contains("lanes"), "{err}");
    let o = run(&["plan", "--explain", "--nic-recording", "/nonexistent.toml"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("reading /nonexistent.toml"));
    let o = run(&["plan", "--explain"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--explain needs a NIC"));
    let o = run(&["plan", "--nic-recording", path.to_str().unwrap()]);
    assert!(!o.status.success(), "--nic-recording without --explain");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn recordings_are_in_the_models_own_form() {
    // Each file reads back and writes out to the same model: no key the
    // model drops, none it would add.
    for name in [
        "mlx5-connectx6dx.toml",
        "ice-e810.toml",
        "virtio-net-kvm.toml",
        "veth-bed.toml",
    ] {
        let text = std::fs::read_to_string(recording(name)).unwrap();
        let caps: flowlane_numa_sched::NicCaps = toml::from_str(&text).unwrap();
        let again: flowlane_numa_sched::NicCaps =
            toml::from_str(&toml::to_string(&caps).unwrap()).unwrap();
        assert_eq!(caps, again, "{name}");
        assert!(caps.max_rx_queues() >= caps.rx_queues, "{name}");
    }
}
