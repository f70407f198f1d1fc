//! `flowlane bench skew` end to end (issue 13's skewed workload): both
//! modes run on their own skewed bed, the `off` run moves nothing, the
//! `auto` run moves buckets and ends better balanced than `off`.

use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_tests::{flowlane_bin, require_root, wait_bounded, ToolBed};
use serde_json::Value;

#[test]
fn auto_rebalancing_balances_a_skew_that_off_keeps() {
    if !require_root("auto_rebalancing_balances_a_skew_that_off_keeps") {
        return;
    }
    let bed = ToolBed::new("sk");
    let child = Command::new(flowlane_bin())
        .args([
            "bench",
            "skew",
            "--seconds",
            "3",
            "--senders",
            "8",
            "--json",
        ])
        .args(["--bed", &bed.0])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting flowlane bench skew");
    let (o, took) = wait_bounded(child, Duration::from_secs(90), "flowlane bench skew");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "bench skew failed: {stderr}");
    let runs: Vec<Value> = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let by_mode = |m: &str| {
        runs.iter()
            .find(|r| r["mode"] == m)
            .unwrap_or_else(|| panic!("no {m} run in {runs:?}"))
    };
    let (off, auto) = (by_mode("off"), by_mode("auto"));
    for r in [off, auto] {
        let bytes: u64 = r["timeline"]
            .as_array()
            .expect("timeline")
            .iter()
            .map(|w| w["bytes"].as_u64().unwrap())
            .sum();
        let s = &r["sender_counters"];
        eprintln!(
            "{}: {:.2} Gbit/s (2nd half {:.2}), to <= 1.2: {} ms, 2nd-half max/mean {}, moves {}, \
             fwd {} held {}, senders out {} retrans {} reorder {}, segments per queue {}, \
             {bytes} bytes in {} windows",
            r["mode"],
            r["goodput_gbps"].as_f64().unwrap(),
            r["goodput_second_half_gbps"].as_f64().unwrap(),
            r["time_to_balance_ms"],
            r["max_mean_second_half"],
            r["moves"]["done"],
            r["moves"]["frames_forwarded"],
            r["moves"]["frames_held"],
            s["out_segs"],
            s["retrans_segs"],
            s["reorder"],
            r["segments_per_queue"],
            r["timeline"].as_array().unwrap().len()
        );
        assert!(bytes > 0, "{} run received nothing", r["mode"]);
        // The senders' counters are their namespace's: at least one
        // segment per 64 KiB received.
        assert!(
            s["out_segs"].as_u64().unwrap() >= bytes >> 16,
            "senders' counters do not match what they sent: {s}"
        );
    }
    eprintln!("took {took:?}");
    assert_eq!(off["moves"]["done"], 0, "the off run moved buckets");
    assert!(
        auto["moves"]["done"].as_u64().unwrap() >= 1,
        "the auto run moved nothing"
    );
    let ratio = |r: &Value| {
        r["max_mean_second_half"]
            .as_f64()
            .expect("a loaded second half")
    };
    assert!(
        ratio(auto) < ratio(off),
        "auto's second half max/mean {} is not below off's {}",
        ratio(auto),
        ratio(off)
    );
}
