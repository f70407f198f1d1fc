//! `flowlane demo` on its own bed: the result kept under `--out`, and the
//! bed (`demo-<pid>`) and its echo service gone after it, whether it ends
//! normally or by SIGTERM mid-run.

use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_tests::{
    flowlane, flowlane_bin, kill_and_reap, ready_within, require_root, terminate, text,
    wait_bounded,
};

/// Whether the namespace `ns` exists.
fn netns_exists(ns: &str) -> bool {
    std::path::Path::new("/run/netns").join(ns).exists()
}

/// Whether `pid` has a child process (the demo's `udp-echo`).
fn echo_child(pid: u32) -> Option<u32> {
    // The bed's set-up runs `ip`/`tc` children too: only the echo service
    // (`ip netns exec` becomes flowlane in place) counts.
    let out = Command::new("pgrep")
        .args(["-P", &pid.to_string(), "-x", "flowlane"])
        .output()
        .expect("pgrep");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut pids = text.split_whitespace().filter_map(|p| p.parse().ok());
    match (pids.next(), pids.next()) {
        (Some(p), None) => Some(p),
        _ => None,
    }
}

/// Whether process `pid` still exists (and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

#[test]
fn demo_keeps_its_result_and_removes_its_own_bed() {
    if !require_root("demo_keeps_its_result_and_removes_its_own_bed") {
        return;
    }
    let out = std::env::temp_dir().join(format!("flowlane-demo-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let child = Command::new(flowlane_bin())
        .args(["demo", "--flows", "16", "--out"])
        .arg(out.join("nested"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bed = format!("demo-{}", child.id());
    let (o, _) = wait_bounded(child, Duration::from_secs(120), "flowlane demo");
    assert!(o.status.success(), "demo failed: {}", text(&o));
    let kept = out.join("nested/udp-rss.json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&kept).expect("udp-rss.json kept")).unwrap();
    assert_eq!(v["all_ok"], true);
    assert_eq!(v["bed"], bed.as_str());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("result kept in {}", kept.display())),
        "{stdout}"
    );
    assert!(!netns_exists(&format!("flowlane-{bed}")), "bed {bed} left");
    assert!(
        !netns_exists(&format!("flowlane-{bed}-peer")),
        "bed {bed} left"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn demo_removes_its_bed_and_service_when_terminated() {
    if !require_root("demo_removes_its_bed_and_service_when_terminated") {
        return;
    }
    // Enough flows to be still running when the signal comes.
    let mut child = Command::new(flowlane_bin())
        .args(["demo", "--flows", "5000", "--packets", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let bed = format!("demo-{pid}");
    let echo = ready_within(&mut child, Duration::from_secs(60), || {
        echo_child(pid).is_some()
    });
    if echo.is_err() {
        kill_and_reap(&mut child);
        panic!("demo never started its echo service ({echo:?})");
    }
    let Some(echo_pid) = echo_child(pid) else {
        kill_and_reap(&mut child);
        let _ = flowlane(&["testbed", "down", "--bed", &bed]);
        panic!("the demo's echo service went away before the signal");
    };
    std::thread::sleep(Duration::from_millis(500));
    terminate(&child);
    let (o, _) = wait_bounded(
        child,
        Duration::from_secs(30),
        "flowlane demo after SIGTERM",
    );
    assert_eq!(o.status.code(), Some(128 + 15), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("removing test bed {bed}")),
        "{}",
        text(&o)
    );
    assert!(!netns_exists(&format!("flowlane-{bed}")), "bed {bed} left");
    assert!(
        !netns_exists(&format!("flowlane-{bed}-peer")),
        "bed {bed} left"
    );
    assert!(!alive(echo_pid), "udp-echo of {bed} left running");
}
