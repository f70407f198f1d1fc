//! The matrix end to end on a small scale (root): both backends, both roles,
//! no delay and a delay through the test bed's delay line, latency cells,
//! JSON, tables and plots.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use flowlane_tests::{
    flowlane_bin, kill_and_reap, require_root, start_udp_echo, text, unique_name, Bed,
};

#[test]
fn both_backends_both_roles_with_and_without_delay() {
    if !require_root("both_backends_both_roles_with_and_without_delay") {
        return;
    }
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix"));
    let bed = unique_name("tmx");
    let v = matrix(
        &bed,
        &out,
        &[
            "--backends",
            "kernel,flowlane",
            "--roles",
            "receiver,sender",
            "--conns",
            "2",
            "--latency-sizes",
            "64",
            "--delays",
            "0,5",
        ],
        300,
    );

    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2 * 2 * 2, "backends x roles x delays: {v}");
    for c in cells {
        let what = format!("{} {} delay {}", c["backend"], c["role"], c["delay_ms"]);
        assert!(c["error"].is_null(), "{what}: {}", c["error"]);
        assert!(c["mbit_s"].as_f64().unwrap() > 1.0, "{what}: {c}");
        let delay = c["delay_ms"].as_f64().unwrap();
        if delay > 0.0 {
            // The line delayed both directions: the RTT grew by at least 2 x 5 ms.
            assert!(c["rtt_added_ms"].as_f64().unwrap() >= 10.0, "{what}");
            let hooks = &c["delay_line"]["hooks"];
            assert!(hooks["to_line_egress"].as_u64().unwrap() > 0, "{what}");
            assert!(hooks["to_line_ingress"].as_u64().unwrap() > 0, "{what}");
        } else {
            assert!(c["delay_line"].is_null(), "{what}");
        }
    }
    // A flowlane sender's retransmits come from flowlane's own counters.
    assert!(cells.iter().any(|c| c["backend"] == "flowlane"
        && c["role"] == "sender"
        && c["retrans_sender"].is_u64()));

    let lat = v["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 2 * 2, "backends x delays: {v}");
    for l in lat {
        let p50 = l["latency"]["rtt_p50_us"]
            .as_f64()
            .unwrap_or_else(|| panic!("{l}"));
        if l["delay_ms"].as_f64().unwrap() > 0.0 {
            assert!(p50 >= 10_000.0, "a 5 ms line each way: {l}");
        } else {
            assert!(p50 < 10_000.0, "{l}");
        }
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("flowlane-sender Mbit/s"), "{table}");
    assert!(table.contains("p99.9"), "{table}");
    assert!(out.join("throughput_vs_delay.svg").exists());
    let _ = std::fs::remove_dir_all(&out);
    // The matrix removed its bed.
    assert!(!std::path::Path::new("/run/netns")
        .join(format!("flowlane-{bed}"))
        .exists());
}

/// `kernel-wire` cells run kernel TCP with TSO/GSO off, so that wire-size
/// frames cross the veth (the fair baseline for flowlane's sender), and the
/// next cell gets the bed's offloads back: GSO super-frames cross the veth
/// as one packet each.
#[test]
fn kernel_wire_sends_wire_size_frames_and_gives_the_offloads_back() {
    if !require_root("kernel_wire_sends_wire_size_frames_and_gives_the_offloads_back") {
        return;
    }
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix-wire"));
    let bed = unique_name("tmw");
    let v = matrix(
        &bed,
        &out,
        &[
            "--backends",
            "kernel-wire,kernel",
            "--roles",
            "sender",
            "--conns",
            "1",
            "--latency-sizes",
            "none",
            "--delays",
            "0",
        ],
        120,
    );
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{v}");
    // Payload bytes per packet on the sender's interface.
    let frame = |backend: &str| {
        let c = cells
            .iter()
            .find(|c| c["backend"] == backend)
            .unwrap_or_else(|| panic!("no {backend} cell: {v}"));
        assert!(c["error"].is_null(), "{backend}: {}", c["error"]);
        c["sender"]["avg_frame_size"]
            .as_f64()
            .unwrap_or_else(|| panic!("{backend}: {c}"))
    };
    let (wire, gso) = (frame("kernel-wire"), frame("kernel"));
    eprintln!("payload bytes per packet: kernel-wire {wire:.0}, kernel {gso:.0}");
    assert!(wire <= 1500.0, "kernel-wire sent {wire} bytes per packet");
    assert!(
        gso > 3000.0,
        "after kernel-wire, kernel sent {gso} bytes per packet (offloads not restored?)"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `--bed NAME` of a bed that was up before the matrix: one in use is
/// refused and left as it was, its user still running (`testbed down`
/// would have stopped it and removed the bed); one free to use is used and
/// left up.
#[test]
fn a_bed_that_was_up_before_is_left_up() {
    if !require_root("a_bed_that_was_up_before_is_left_up") {
        return;
    }
    let bed = Bed::up("tmxb", 2);
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix-bed"));
    let (mut echo, _) = start_udp_echo(&bed, 7777);
    let child = Command::new(bin())
        .arg("matrix")
        .arg("--flowlane")
        .arg(flowlane_bin())
        .args(["--bed", &bed.name, "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("flowlane-ttcp matrix");
    let (o, _) = wait_bounded(child, Duration::from_secs(60), "matrix on a bed in use");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("in use"), "{}", text(&o));
    assert!(
        echo.try_wait().unwrap().is_none(),
        "the bed's user was stopped"
    );
    assert!(bed_is_up(&bed.name), "the bed in use was removed");
    kill_and_reap(&mut echo);

    let v = matrix(
        &bed.name,
        &out,
        &[
            "--backends",
            "kernel",
            "--roles",
            "receiver",
            "--conns",
            "1",
            "--latency-sizes",
            "none",
            "--delays",
            "0",
        ],
        120,
    );
    let cells = v["cells"].as_array().unwrap();
    assert!(cells.len() == 1 && cells[0]["error"].is_null(), "{v}");
    assert!(
        bed_is_up(&bed.name),
        "the bed that was up before was removed"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Whether bed `name`'s namespaces are there.
fn bed_is_up(name: &str) -> bool {
    let ns = std::path::Path::new("/run/netns");
    ns.join(format!("flowlane-{name}")).exists()
        && ns.join(format!("flowlane-{name}-peer")).exists()
}

/// Runs a small matrix (64 KiB buffers, 0.3 s warm-up, 0.7 s cells) on bed
/// `bed` with the flags `args`, writing to `out`, within `limit_s`
/// seconds; its `results.json`.
fn matrix(bed: &str, out: &std::path::Path, args: &[&str], limit_s: u64) -> serde_json::Value {
    let child = Command::new(bin())
        .arg("matrix")
        .arg("--flowlane")
        .arg(flowlane_bin())
        .args([
            "--bed",
            bed,
            "--sizes",
            "64k",
            "--warmup",
            "0.3",
            "--seconds",
            "0.7",
        ])
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("flowlane-ttcp matrix");
    let (o, took) = wait_bounded(child, Duration::from_secs(limit_s), "matrix");
    assert!(o.status.success(), "matrix: {}", text(&o));
    eprintln!("matrix took {took:?}");
    serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap()
}
