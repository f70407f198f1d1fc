//! Helpers for flowlane-ttcp's integration tests: run receiver/sender pairs as
//! processes (optionally inside network namespaces) with a hard deadline
//! (the shared harness's [`wait_bounded`]; beds and the root check are the
//! harness's too).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

pub(crate) use flowlane_tests::wait_bounded;

/// The binary under test.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_flowlane-ttcp")
}

static NEXT: AtomicU16 = AtomicU16::new(0);

/// A (control, data) port pair unique to this process and call, in 20000-31999.
pub(crate) fn ports() -> (u16, u16) {
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    let base = 20000 + (std::process::id() % 500) as u16 * 24 + k * 4;
    (base, base + 1)
}

/// `flowlane-ttcp <args>`, inside `ns` when given.
pub(crate) fn cmd(ns: Option<&str>, args: &[String]) -> Command {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, bin()]);
            c
        }
        None => Command::new(bin()),
    };
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Splits a flag string into arguments.
pub(crate) fn a(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// One-line stderr of a failed run.
pub(crate) fn err_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// Asserts a one-line error containing `want` and a non-zero exit.
pub(crate) fn assert_fails(o: &Output, want: &str) {
    let e = err_line(o);
    assert!(!o.status.success(), "expected failure, got success: {e}");
    assert!(e.contains(want), "expected {want:?} in: {e}");
    assert_eq!(e.lines().count(), 1, "not one line: {e}");
    assert!(e.starts_with("flowlane-ttcp: error: "), "{e}");
}

/// Parses a JSON report from stdout.
pub(crate) fn json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

/// Runs a receiver (in `rx_ns`) and a sender (in `tx_ns`) with the same flags
/// plus per-side extras, returning both outputs.
pub(crate) fn pair(
    rx_ns: Option<&str>,
    tx_ns: Option<&str>,
    common: &str,
    rx_extra: &str,
    tx_extra: &str,
) -> (Output, Output) {
    let (ctl, data) = ports();
    let base = format!("{common} --control-port {ctl} -p {data}");
    let rx = cmd(rx_ns, &a(&format!("-r {base} {rx_extra}")))
        .spawn()
        .expect("receiver");
    std::thread::sleep(Duration::from_millis(300));
    let tx = cmd(tx_ns, &a(&format!("-s {base} {tx_extra}")))
        .spawn()
        .expect("sender");
    let (txo, _) = wait_bounded(tx, Duration::from_secs(60), "sender");
    let (rxo, _) = wait_bounded(rx, Duration::from_secs(60), "receiver");
    (rxo, txo)
}

/// Reads the aggregate jiffies of work (busy less the hypervisor's steal,
/// what the cost figures count) and the total of /proc/stat.
pub(crate) fn proc_stat_busy_total() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap();
    let v: Vec<u64> = s
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let (idle, steal) = (v[3] + v[4], v[7]);
    let total: u64 = v.iter().take(8).sum();
    (total - idle - steal, total)
}

/// /proc/stat (busy, total) readings taken at marked stderr lines.
pub(crate) type Marks = std::thread::JoinHandle<Vec<(String, (u64, u64))>>;

/// Spawns `c` and, on each stderr line containing one of `marks`, reads
/// /proc/stat right away; returns the child and the readings.
pub(crate) fn spawn_watching_stderr(
    mut c: Command,
    marks: &'static [&'static str],
) -> (Child, Marks) {
    let mut child = c.spawn().expect("spawn");
    let err = child.stderr.take().unwrap();
    let h = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if let Some(m) = marks.iter().find(|m| line.contains(*m)) {
                seen.push((m.to_string(), proc_stat_busy_total()));
            }
        }
        seen
    });
    (child, h)
}
