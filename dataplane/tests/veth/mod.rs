//! A veth pair of two queues between two network namespaces of their own,
//! for the data path's tests that need an interface (dataplane cannot use
//! the test bed crate): made and removed by the test, the test's body run
//! inside flowlane's namespace by re-executing the test binary under `ip
//! netns exec` (which mounts the namespace's own /sys, where the data
//! path reads the interface); the peer's namespace holds the kernel side
//! ([`peer_ns`]). Needs root; tests skip with the reason printed otherwise.

#![allow(dead_code)]

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use flowlane_dataplane::worker::{QueueHandler, QueueInfo, RxAction};

/// Set in the child run inside flowlane's namespace: the peer's namespace.
const INSIDE: &str = "FLOWLANE_DATAPLANE_TEST_IN_NS";
/// The prefix of the namespaces these tests make.
const PREFIX: &str = "flowlane-dpt-";

/// The interface flowlane's side serves (two queues).
pub(crate) const IFACE: &str = "v0";
/// The peer end of the pair, in the peer's namespace.
pub(crate) const PEER: &str = "v1";
/// Flowlane's side's address (the kernel's there too: it answers ARP).
pub(crate) const LOCAL_V4: &str = "10.98.0.1";
/// The peer's address.
pub(crate) const PEER_V4: &str = "10.98.0.2";

/// Whether the tests run as root; prints the skip reason when not.
pub(crate) fn require_root(test: &str) -> bool {
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

/// Whether this process is the child run inside flowlane's namespace.
pub(crate) fn inside() -> bool {
    std::env::var_os(INSIDE).is_some()
}

/// Inside: the peer's namespace.
pub(crate) fn peer_ns() -> String {
    std::env::var(INSIDE).expect("run inside a namespace")
}

/// The namespaces holding the veth pair, removed on drop.
pub(crate) struct Veth {
    /// Flowlane's namespace.
    pub(crate) ns: String,
    /// The peer's.
    pub(crate) peer_ns: String,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn run(cmd: &[&str]) -> Output {
    Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn ok(cmd: &[&str]) {
    let o = run(cmd);
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Removes the namespaces of test processes that are gone (killed before
/// their `Drop` ran).
fn sweep() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(&["ip", "netns", "del", &name]);
        }
    }
}

impl Veth {
    /// Makes the namespaces, `v0` (two queues, [`LOCAL_V4`]) in the first
    /// and its peer `v1` ([`PEER_V4`]) in the second, both up; the peer
    /// sends finished checksums, as a wire carries them.
    pub(crate) fn up() -> Veth {
        sweep();
        let ns = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let peer_ns = format!("{ns}-peer");
        ok(&["ip", "netns", "add", &ns]);
        let veth = Veth {
            ns: ns.clone(),
            peer_ns: peer_ns.clone(),
        };
        ok(&["ip", "netns", "add", &peer_ns]);
        ok(&[
            "ip",
            "-n",
            &ns,
            "link",
            "add",
            IFACE,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            PEER,
            "netns",
            &peer_ns,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ]);
        for (n, dev, v4) in [(&ns, IFACE, LOCAL_V4), (&peer_ns, PEER, PEER_V4)] {
            ok(&[
                "ip",
                "-n",
                n,
                "addr",
                "add",
                &format!("{v4}/24"),
                "dev",
                dev,
            ]);
            ok(&["ip", "-n", n, "link", "set", dev, "up"]);
        }
        ok(&[
            "ip", "netns", "exec", &peer_ns, "ethtool", "-K", PEER, "tx", "off",
        ]);
        veth
    }

    /// Runs the test `name` of this binary inside flowlane's namespace;
    /// returns its output (asserting nothing).
    pub(crate) fn run_inside(&self, name: &str) -> Output {
        let exe = std::env::current_exe().expect("test executable");
        Command::new("timeout")
            .args(["60", "ip", "netns", "exec", &self.ns])
            .arg(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(INSIDE, &self.peer_ns)
            .output()
            .expect("running the test inside the namespace")
    }

    /// Whether an XDP program is attached to `iface` in flowlane's
    /// namespace.
    pub(crate) fn xdp_attached(&self, iface: &str) -> bool {
        let o = run(&["ip", "-n", &self.ns, "-d", "link", "show", "dev", iface]);
        String::from_utf8_lossy(&o.stdout).contains("xdp")
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.ns]);
        let _ = run(&["ip", "netns", "del", &self.peer_ns]);
    }
}

/// Runs `body` inside fresh namespaces (by re-executing test `name`) and
/// asserts that the inner run passed and left no XDP program; returns its
/// output text. Inside, runs `body` itself. Skips (printing why) when not
/// root.
pub(crate) fn in_veth(name: &str, body: impl FnOnce()) -> Option<String> {
    if inside() {
        body();
        return None;
    }
    if !require_root(name) {
        return None;
    }
    let veth = Veth::up();
    let o = veth.run_inside(name);
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("--- inside {} ---\n{text}--- end ---", veth.ns);
    assert!(
        o.status.success(),
        "inside {}: {:?}\n{text}",
        veth.ns,
        o.status
    );
    assert!(
        text.contains(&format!("test {name} ... ok")),
        "the inner run did not run {name}:\n{text}"
    );
    assert!(
        !veth.xdp_attached(IFACE),
        "an XDP program was left on {IFACE}"
    );
    Some(text)
}

/// A handler that takes every frame and does nothing.
pub(crate) struct Nop;

impl QueueHandler for Nop {
    fn on_rx(&mut self, _: &QueueInfo, _: std::time::Duration, _: &mut [u8], _: usize) -> RxAction {
        RxAction::Consumed
    }
}
