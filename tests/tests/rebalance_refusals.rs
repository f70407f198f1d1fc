//! What live rebalancing refuses, and what it leaves as it found: a service
//! whose NIC's table flowlane cannot write (the bed's veth run as any NIC,
//! given the RSS by `--rss-key/--rss-table` without `--bed`: its table
//! lives in a BPF map that only `--bed` hands over) refuses `--rebalance
//! auto` in one line and runs its default loop off, saying why, rather
//! than failing every move; and the rebalancing benchmarks run on a bed the
//! user had up give it back with its key and table, or refuse it (another
//! queue count) without touching it.

use std::process::Output;
use std::time::{Duration, Instant};

use flowlane_tests::{flowlane, flowlane_bin, require_root, text, Bed};
use serde_json::Value;

/// `flowlane testbed status --bed NAME --json`.
fn bed_status(name: &str) -> Value {
    let o = flowlane(&["testbed", "status", "--bed", name, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).expect("status JSON")
}

/// The bed's key and table in the flags' form (`--rss-key`,
/// `--rss-table`).
fn rss_flags(bed: &Bed) -> (String, String) {
    let st = bed_status(&bed.name);
    let key = st["key"].as_str().expect("key").to_string();
    let table: Vec<String> = st["table"]
        .as_array()
        .expect("table")
        .iter()
        .map(|q| q.as_u64().expect("a queue").to_string())
        .collect();
    (key, table.join(","))
}

/// `bulk-sink` on the bed's xsk0 as on any NIC (inside its namespace, no
/// `--bed`), given the bed's RSS, with `extra` flags.
fn sink_in_ns(bed: &Bed, extra: &[&str]) -> std::process::Command {
    let (key, table) = rss_flags(bed);
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", &bed.ns])
        .arg(flowlane_bin())
        .args(["bulk-sink", "--iface", "xsk0", "--port", "5005"])
        .args(["--rss-key", &key, "--rss-table", &table])
        .args(["--daemon-socket", "none", "--timeout", "30"])
        .args(extra);
    c
}

/// The lines of `o`'s stderr that are not blank.
fn stderr_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// The service's status on `socket` (None until it answers).
fn service_status(socket: &str) -> Option<Value> {
    let o = flowlane(&[
        "rebalance",
        "status",
        "--socket",
        socket,
        "--json",
        "--interval-ms",
        "0",
    ]);
    serde_json::from_slice(&o.stdout).ok()
}

#[test]
fn rebalancing_where_the_nic_s_table_cannot_be_written_is_refused_or_off() {
    if !require_root("rebalancing_where_the_nic_s_table_cannot_be_written_is_refused_or_off") {
        return;
    }
    let bed = Bed::up("rf53nw", 2);
    // Asked for: refused in one line, exit 1, before serving.
    let o = sink_in_ns(&bed, &["--rebalance", "auto", "--control-socket", "none"])
        .output()
        .expect("starting bulk-sink");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "one line: {}", text(&o));
    assert!(
        lines[0].contains("--rebalance: no NIC to write RSS entries to")
            && lines[0].contains("use --rebalance off"),
        "{}",
        lines[0]
    );

    // By default: off, and the status says why; a move by hand is refused
    // in one line, exit 1, and counted as no move at all.
    let sock = std::env::temp_dir().join(format!("{}.sock", bed.name));
    let p = sock.to_str().unwrap();
    let _ = std::fs::remove_file(&sock);
    let mut sink = sink_in_ns(&bed, &["--control-socket", p])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting bulk-sink");
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        if let Some(st) = service_status(p) {
            break st;
        }
        if let Some(exit) = sink.try_wait().unwrap() {
            panic!("bulk-sink exited early ({exit})");
        }
        assert!(Instant::now() < deadline, "bulk-sink did not answer");
        std::thread::sleep(Duration::from_millis(50));
    };
    let table = st["table"].as_array().expect("table").clone();
    let to = (1 - table[0].as_u64().expect("a queue")).to_string();
    let o = flowlane(&[
        "rebalance",
        "move",
        "--socket",
        p,
        "--bucket",
        "0",
        "--to-queue",
        &to,
    ]);
    let screen = flowlane(&["rebalance", "status", "--socket", p]);
    let after = service_status(p).expect("status");
    flowlane_tests::terminate(&sink);
    let out = sink.wait_with_output().expect("bulk-sink's exit");
    let _ = std::fs::remove_file(&sock);
    assert_eq!(st["rebalance"], "off", "{st}");
    let because = st["rebalance_off_because"].as_str().unwrap_or_default();
    assert!(because.contains("no NIC to write RSS entries to"), "{st}");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(stderr_lines(&o).len(), 1, "{}", text(&o));
    assert!(
        text(&o).contains("no NIC to write RSS entries to"),
        "{}",
        text(&o)
    );
    let screen = String::from_utf8_lossy(&screen.stdout);
    assert!(
        screen.contains("rebalance off (no NIC to write RSS entries to")
            && screen.contains("moves: 0 done, 0 failed"),
        "{screen}"
    );
    assert_eq!(
        (&after["moves"]["done"], &after["moves"]["failed"]),
        (&Value::from(0), &Value::from(0)),
        "{after}"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("\"event\":\"move\""), "{said}");
}

/// `flowlane bench handoff` on bed `name`, two moves of an empty bucket.
fn short_handoff(name: &str) -> Output {
    flowlane(&[
        "bench", "handoff", "--bed", name, "--idle", "0", "--busy", "0", "--moves", "2",
    ])
}

#[test]
fn a_benchmark_gives_back_a_bed_the_user_had_up() {
    if !require_root("a_benchmark_gives_back_a_bed_the_user_had_up") {
        return;
    }
    let bed = Bed::up("rf53bb", 2);
    // The user's own table and key.
    let o = flowlane(&[
        "testbed",
        "set-rss",
        "--bed",
        &bed.name,
        "--spread",
        "1",
        "--key",
        &vec!["3c"; 40].join(":"),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let before = bed_status(&bed.name);
    let o = short_handoff(&bed.name);
    assert!(o.status.success(), "{}", text(&o));
    let after = bed_status(&bed.name);
    assert_eq!(
        (&after["key"], &after["table"]),
        (&before["key"], &before["table"]),
        "the bed's key and table were not put back"
    );
    assert_eq!(after["queues"], 2, "{after}");

    // A bed of another queue count than the benchmark's is refused in one
    // line, and left as it was (not rebuilt, not removed).
    let four = Bed::up("rf53b4", 4);
    let before = bed_status(&four.name);
    let made = flowlane_testbed::netns::id(&four.ns);
    assert!(made.is_some(), "no namespace {}", four.ns);
    let o = short_handoff(&four.name);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "{}", text(&o));
    assert!(
        lines[0].contains(&format!(
            "test bed {} is up with 4 queues, and the benchmark needs 2",
            four.name
        )),
        "{}",
        lines[0]
    );
    let after = bed_status(&four.name);
    assert_eq!(
        (&after["queues"], &after["key"], &after["table"]),
        (&before["queues"], &before["key"], &before["table"])
    );
    assert_eq!(
        flowlane_testbed::netns::id(&four.ns),
        made,
        "the bed was made again"
    );
}
