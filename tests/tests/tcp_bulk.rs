//! Bulk TCP between flowlane (one `flowlane_tcp::Stack` per queue on the
//! AF_XDP data path) and the Linux kernel on a 2-queue test bed, both
//! directions, checked by sha256: 1 GiB each way, as the issue asks.

mod tcp_common;

use std::time::Duration;

use flowlane_tests::{require_root, Bed};
use tcp_common::*;

#[test]
fn kernel_to_flowlane_sink_sha256_equal() {
    if !require_root("kernel_to_flowlane_sink_sha256_equal") {
        return;
    }
    let bed = Bed::up("tbk", 2);
    let bytes = bulk_bytes();
    let limit = if bytes > 64 << 20 { 900 } else { 120 };
    let sink = start(
        &bed,
        &["bulk-sink", "--port", "5001", "--count", "1"],
        limit,
    );
    let sent = peer_py(
        &bed,
        limit,
        KERNEL_SEND,
        &["10.99.0.1:5001", &bytes.to_string()],
    );
    let lines = sink.wait(Duration::from_secs(30));
    let r = lines
        .iter()
        .find(|v| v["event"] == "sink")
        .expect("sink line");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["bytes"], bytes, "{r}");
    assert_eq!(r["sha256"], sent.trim(), "{r}");
    eprintln!(
        "kernel -> flowlane: {} bytes in {:.2} s ({:.2} Gbit/s, {:.1} worker ns/byte)",
        r["bytes"],
        r["secs"].as_f64().unwrap(),
        r["gbit_per_s"].as_f64().unwrap(),
        r["cpu_ns_per_byte"].as_f64().unwrap()
    );
    let t = totals(&lines);
    assert_eq!(t["connections"], 0, "{t}");
}

#[test]
fn flowlane_source_to_kernel_sha256_equal() {
    if !require_root("flowlane_source_to_kernel_sha256_equal") {
        return;
    }
    let bed = Bed::up("tbs", 2);
    let bytes = bulk_bytes();
    let limit = if bytes > 64 << 20 { 900 } else { 120 };
    let mut peer = peer_py_spawn(&bed, limit, KERNEL_RECV, &["10.99.0.2:5002"]);
    wait_ready(&mut peer);
    let src = start(
        &bed,
        &[
            "bulk-source",
            "--connect",
            "10.99.0.2:5002",
            "--bytes",
            &bytes.to_string(),
        ],
        limit,
    );
    let lines = src.wait(Duration::from_secs(limit));
    let got = finish(peer, Duration::from_secs(30));
    let r = lines
        .iter()
        .find(|v| v["event"] == "source")
        .expect("source line");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        got.trim(),
        format!("{} {}", bytes, r["sha256"].as_str().unwrap()),
        "{r}"
    );
    eprintln!(
        "flowlane -> kernel: {} bytes in {:.2} s ({:.2} Gbit/s)",
        r["bytes"],
        r["secs"].as_f64().unwrap(),
        r["gbit_per_s"].as_f64().unwrap()
    );
}
