//! Test beds: `flowlane testbed up` under a unique name, removed on drop,
//! and what tests start on them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::child::ready_within;
use crate::{flowlane, flowlane_bin, text};

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
#[derive(Debug)]
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
            "--bed",
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
        let o = flowlane(&["testbed", "down", "--bed", &self.name]);
        if !o.status.success() {
            eprintln!("testbed down failed: {}", text(&o));
        }
    }
}

/// The name of a bed that a tool (a `flowlane bench`) brings up and takes
/// down itself; dropped, it takes the bed down should the tool have left
/// it (a hang killed mid-run).
#[derive(Debug)]
pub struct ToolBed(pub String);

impl ToolBed {
    /// A unique name (see [`unique_name`]).
    pub fn new(tag: &str) -> ToolBed {
        ToolBed(unique_name(tag))
    }

    /// Whether either of the bed's namespaces exists.
    pub fn exists(&self) -> bool {
        let ns = std::path::Path::new("/run/netns");
        ns.join(format!("flowlane-{}", self.0)).exists()
            || ns.join(format!("flowlane-{}-peer", self.0)).exists()
    }
}

impl Drop for ToolBed {
    fn drop(&mut self) {
        if self.exists() {
            let _ = flowlane(&["testbed", "down", "--bed", &self.0]);
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
    match ready_within(&mut child, Duration::from_secs(30), || report.exists()) {
        Ok(()) => (child, report),
        Err(Some(_)) => panic!("udp-echo exited early"),
        Err(None) => panic!("udp-echo did not start within 30 s"),
    }
}
