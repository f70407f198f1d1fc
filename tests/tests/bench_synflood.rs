//! `flowlane bench synflood` end to end, briefly (one second measured per
//! phase at 10 000 SYNs per second): the XDP generator's SYNs reach each
//! target; nobody answers the no-listener address; flowlane and the kernel
//! answer (both with SYN cookies, which only a flood of more distinct
//! 4-tuples than the half-open tables hold brings out); the legitimate
//! client gets through every time; the bed is gone afterwards. Once with
//! IPv4 sources, once with IPv6 ones (`--sources` of fd99::/64: the flood
//! goes to the bed's fd99::1, SYN-ACKs are counted by `Ip6.InAddrErrors`).

use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_tests::{flowlane_bin, require_root, wait_bounded, ToolBed};
use serde_json::Value;

#[test]
fn flowlane_and_the_kernel_answer_a_generated_syn_flood_with_cookies() {
    if !require_root("flowlane_and_the_kernel_answer_a_generated_syn_flood_with_cookies") {
        return;
    }
    answer_a_syn_flood("sb", None);
}

#[test]
fn flowlane_and_the_kernel_answer_a_generated_ipv6_syn_flood_with_cookies() {
    if !require_root("flowlane_and_the_kernel_answer_a_generated_ipv6_syn_flood_with_cookies") {
        return;
    }
    answer_a_syn_flood("sb6", Some("fd99::100-fd99::1f9"));
}

/// Runs the bench on a bed named after `bed`, flooding from `sources`
/// (the bench's default, IPv4, when `None`), and checks every phase.
fn answer_a_syn_flood(bed: &str, sources: Option<&str>) {
    let bed = ToolBed::new(bed);
    let mut cmd = Command::new(flowlane_bin());
    cmd.args(["bench", "synflood", "--rates", "10000", "--seconds", "1"])
        .args(["--json", "--bed", &bed.0]);
    if let Some(s) = sources {
        cmd.args(["--sources", s]);
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting flowlane bench synflood");
    let (o, took) = wait_bounded(child, Duration::from_secs(90), "flowlane bench synflood");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "bench synflood failed: {stderr}");
    eprintln!("took {took:?}");
    assert!(!bed.exists(), "the benchmark left its bed {} behind", bed.0);
    let report: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let runs = report["runs"].as_array().expect("runs");
    let run = |t: &str| {
        runs.iter()
            .find(|r| r["target"] == t)
            .unwrap_or_else(|| panic!("no {t} run in {report}"))
    };
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
    for t in ["nobody", "flowlane", "kernel"] {
        let r = run(t);
        eprintln!(
            "{t}: {:.0} SYN/s sent, {:.0} delivered, {:.0} SYN-ACK/s back, flowlane {}, kernel {}, \
             connects {}",
            f(r, "syns_per_s"),
            f(r, "delivered_per_s"),
            f(r, "synacks_per_s"),
            r["flowlane"],
            r["kernel"],
            r["connects_ms"]
        );
        // The throttle holds the rate (within the VM's scheduling), and
        // the frames reach their target.
        assert!(
            (5_000.0..15_000.0).contains(&f(r, "syns_per_s")),
            "{t}: {r}"
        );
        assert!(
            f(r, "delivered_per_s") >= 0.9 * f(r, "syns_per_s"),
            "{t}: {r}"
        );
    }
    let nobody = run("nobody");
    assert!(
        f(nobody, "synacks_per_s") < 0.01 * f(nobody, "syns_per_s"),
        "nobody answers the no-listener address: {nobody}"
    );
    for (t, cookies) in [
        ("flowlane", &run("flowlane")["flowlane"]["syn_cookies_sent"]),
        ("kernel", &run("kernel")["kernel"]["TcpExt.SyncookiesSent"]),
    ] {
        let r = run(t);
        assert!(
            cookies.as_u64().unwrap_or(0) > 0,
            "{t} answered with SYN cookies: {r}"
        );
        assert!(
            f(r, "synacks_per_s") >= 0.5 * f(r, "syns_per_s"),
            "{t} answered most SYNs: {r}"
        );
        let connects = r["connects_ms"].as_array().expect("connects_ms");
        assert!(!connects.is_empty(), "{t}: {r}");
        assert!(
            connects.iter().all(|c| c.as_f64().is_some()),
            "{t}: every legitimate connection gets through: {r}"
        );
    }
    assert_eq!(run("flowlane")["flowlane"]["syn_dropped"], 0);
}
