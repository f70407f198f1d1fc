//! WAN delay on the test bed (`flowlane testbed delay`, a user-space delay
//! line: this project's kernel has no `sch_netem`): the round trip grows by
//! twice the one-way delay, flowlane's TCP moves data both ways across it
//! byte-exact, the line removes itself on SIGTERM, and a killed line fails
//! open instead of black-holing the bed.

mod tcp_common;

use std::time::Duration;

use flowlane_tests::{in_ns, require_root, Bed};
use tcp_common::*;

fn tc_filters(bed: &Bed) -> String {
    let mut all = String::new();
    for dir in ["egress", "ingress"] {
        let o = in_ns(&bed.peer_ns, &["tc", "filter", "show", "dev", "peer0", dir]);
        all.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    all
}

#[test]
fn delay_line_delays_both_ways_carries_tcp_and_removes_itself() {
    if !require_root("delay_line_delays_both_ways_carries_tcp_and_removes_itself") {
        return;
    }
    let bed = Bed::up("tdl", 2);
    let before = ping_rtts(&bed, 3);
    assert!(
        before.iter().all(|&t| t < 10.0),
        "undelayed RTTs {before:?}"
    );

    let line = DelayLine::start(&bed, &["--ms", "20"]);
    let rtts = ping_rtts(&bed, 5);
    eprintln!("RTTs through a 20 ms line: {rtts:?}");
    assert_eq!(rtts.len(), 5);
    for t in &rtts {
        // 20 ms each way; the line's error is bounded by scheduling.
        assert!(
            (40.0..60.0).contains(t),
            "RTT {t} ms, expected 40 ms + a little"
        );
    }

    // flowlane's TCP across the delay, both directions, byte-exact.
    kernel_to_flowlane(&bed, 4 << 20, 120);
    flowlane_to_kernel(&bed, 4 << 20, 120);

    let report = line.stop();
    eprintln!("delay line report: {report}");
    let hooks = &report["hooks"];
    // Frames in both directions, from both hooks. Their counts are not
    // segments: the kernel's GSO frames (up to 64 KiB, their size set by its
    // pacing) pass the egress hooks whole, so only a floor is asserted here
    // and the bytes below say that both transfers went through.
    for h in [
        "to_line_egress",
        "to_line_ingress",
        "back_egress",
        "back_ingress",
    ] {
        assert!(hooks[h].as_u64().unwrap() > 0, "{h}: {report}");
    }
    assert_eq!(hooks["stale"], 0, "{report}");
    let q = &report["queue"];
    assert!(
        q["bytes_in"].as_u64().unwrap() >= 2 * (4 << 20),
        "both 4 MiB transfers crossed the line: {report}"
    );
    assert_eq!(
        q["frames_in"], q["frames_out"],
        "everything held was released: {report}"
    );
    assert_eq!(q["dropped_full"], 0, "{report}");
    assert_eq!(report["refused"], 0, "{report}");
    assert_eq!(report["truncated"], 0, "{report}");
    assert_eq!(report["unsupported_gso"], 0, "{report}");
    // Every frame the hooks sent into the line is accounted for.
    assert_eq!(report["unaccounted"], 0, "{report}");

    // Gone: the line's devices, its filters, and the delay.
    assert!(!in_ns(&bed.peer_ns, &["ip", "link", "show", "fll0"])
        .status
        .success());
    let filters = tc_filters(&bed);
    assert!(!filters.contains("flowlane_delay"), "{filters}");
    assert!(
        filters.contains("flowlane_rss"),
        "the RSS emulator stays: {filters}"
    );
    let after = ping_rtts(&bed, 3);
    assert!(
        after.iter().all(|&t| t < 10.0),
        "RTTs after the line {after:?}"
    );
}

#[test]
fn killed_delay_line_fails_open_and_a_new_one_replaces_it() {
    if !require_root("killed_delay_line_fails_open_and_a_new_one_replaces_it") {
        return;
    }
    let bed = Bed::up("tdk", 1);
    let line = DelayLine::start(&bed, &["--ms", "30"]);
    let rtts = ping_rtts(&bed, 2);
    assert!(rtts.iter().all(|&t| t >= 60.0), "delayed RTTs {rtts:?}");
    line.signal("-KILL");
    drop(line);
    // The hooks stay attached but their heartbeat goes stale within 1 s.
    std::thread::sleep(Duration::from_millis(1500));
    let rtts = ping_rtts(&bed, 3);
    assert!(rtts.iter().all(|&t| t < 10.0), "fail-open RTTs {rtts:?}");

    // A new line replaces the stale devices and hooks.
    let line = DelayLine::start(&bed, &["--ms", "5"]);
    let rtts = ping_rtts(&bed, 3);
    assert!(
        rtts.iter().all(|&t| (10.0..30.0).contains(&t)),
        "RTTs {rtts:?}"
    );
    let report = line.stop();
    assert_eq!(report["queue"]["dropped_full"], 0, "{report}");
    let filters = tc_filters(&bed);
    assert!(!filters.contains("flowlane_delay"), "{filters}");
}
