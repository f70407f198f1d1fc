//! Shared helpers for flowlane's integration tests: the `flowlane` binary,
//! uniquely named test beds that remove themselves, and the root check.
//!
//! Tests that need root (namespaces, BPF, AF_XDP) call [`require_root`]
//! first and skip with a printed reason otherwise; CI runs as root.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Whether the tests run as root; prints the skip reason when not.
pub fn require_root(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("skipping {test}: needs root (network namespaces, BPF, AF_XDP)");
    }
    root
}

/// Path of the `flowlane` binary built beside the test executable.
pub fn flowlane_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/flowlane
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("flowlane");
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p flowlane-control`)",
        bin.display()
    );
    bin
}

/// Runs `flowlane <args>`.
pub fn flowlane(args: &[&str]) -> Output {
    Command::new(flowlane_bin())
        .args(args)
        .output()
        .expect("running flowlane")
}

/// Runs a command inside a network namespace.
pub fn in_ns(ns: &str, cmd: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .output()
        .expect("running ip netns exec")
}

/// Output as text, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique test bed name for this process and call.
pub fn unique_name(tag: &str) -> String {
    format!(
        "t{}{}{}",
        tag,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A test bed that is removed when dropped.
pub struct Bed {
    /// Bed name.
    pub name: String,
    /// flowlane's namespace.
    pub ns: String,
    /// The far side's namespace.
    pub peer_ns: String,
}

impl Bed {
    /// Brings up a uniquely named bed with `queues` queues.
    pub fn up(tag: &str, queues: u32) -> Bed {
        let name = unique_name(tag);
        let o = flowlane(&[
            "testbed",
            "up",
            "--name",
            &name,
            "--queues",
            &queues.to_string(),
        ]);
        assert!(o.status.success(), "testbed up failed: {}", text(&o));
        Bed {
            ns: format!("flowlane-{name}"),
            peer_ns: format!("flowlane-{name}-peer"),
            name,
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let o = flowlane(&["testbed", "down", "--name", &self.name]);
        if !o.status.success() {
            eprintln!("testbed down failed: {}", text(&o));
        }
    }
}

/// Whether an XDP program is attached to `dev` in `ns`.
pub fn xdp_attached(ns: &str, dev: &str) -> bool {
    let o = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show", dev])
        .output()
        .expect("ip link");
    let s = String::from_utf8_lossy(&o.stdout);
    s.split_whitespace().any(|w| w.starts_with("xdp"))
}

/// Starts `flowlane udp-echo --report` on all queues of `bed`'s `xsk0` (in
/// the bed's namespace) and waits for its first report; returns the child
/// (its pid is flowlane's: `ip netns exec` execs in place) and the report
/// path.
pub fn start_udp_echo(bed: &Bed, port: u16) -> (Child, PathBuf) {
    let report = std::env::temp_dir().join(format!("{}-echo-{port}.json", bed.name));
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new("ip")
        .args(["netns", "exec", &bed.ns])
        .arg(flowlane_bin())
        .args([
            "udp-echo",
            "--iface",
            "xsk0",
            "--port",
            &port.to_string(),
            "--report",
        ])
        .arg(&report)
        .stderr(Stdio::null())
        .spawn()
        .expect("starting flowlane udp-echo");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !report.exists() {
        assert!(
            child.try_wait().expect("udp-echo status").is_none(),
            "udp-echo exited early"
        );
        assert!(
            Instant::now() < deadline,
            "udp-echo did not start within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, report)
}
