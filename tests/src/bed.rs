//! Test beds: `flowlane testbed up` under a unique name, removed on drop,
//! and what tests start on them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::child::ready_within;
use crate::{flowlane, flowlane_bin, text};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique test bed name for this process and call.
pub fn unique_name(tag: &str) -> String {
    name_of(tag, std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// `tag`, the process and the call, separated (pid 1234's 10th name and pid
/// 12341's first are not one; [`owner_pid`] reads the pid back).
fn name_of(tag: &str, pid: u32, seq: u32) -> String {
    format!("t{tag}-{pid}-{seq}")
}

/// The test process a bed name of [`name_of`]'s shape was made by.
fn owner_pid(name: &str) -> Option<u32> {
    pid_in(name, |tag| tag.starts_with('t') && tag.len() > 1)
}

/// The test process a scratch namespace of flowlane-testbed's unit tests
/// (`flt-<tag>-<pid>-<n>`) was made by.
fn scratch_owner_pid(name: &str) -> Option<u32> {
    pid_in(name, |head| {
        head.strip_prefix("flt-").is_some_and(|tag| !tag.is_empty())
    })
}

/// The pid of a name `<head>-<pid>-<n>` whose head `head_ok` accepts.
fn pid_in(name: &str, head_ok: impl Fn(&str) -> bool) -> Option<u32> {
    let mut parts = name.rsplitn(3, '-');
    let (seq, pid, head) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (head_ok(head) && digits(seq) && digits(pid))
        .then(|| pid.parse().ok())
        .flatten()
}

static SWEPT: std::sync::Once = std::sync::Once::new();

/// Takes down, once per test process and before its first bed, what test
/// processes no longer running left behind (killed by a signal or a CI
/// timeout: their `Drop` never ran); see [`sweep`].
fn sweep_orphaned_beds() {
    SWEPT.call_once(sweep);
}

/// Removes what test processes no longer running left, found by the pid in
/// the names: their beds, whether recorded in the default run directory,
/// in a temporary one (`FLOWLANE_RUN_DIR`) or nowhere (half-made), seen
/// by their state files, namespaces and pinned maps (`testbed down
/// --force`); and flowlane-testbed's scratch namespaces (`flt-*`).
fn sweep() {
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let gone = |pid: u32| !Path::new(&format!("/proc/{pid}")).exists();
    let mut beds = BTreeSet::new();
    for file in names(&flowlane_testbed::state::state_dir()) {
        if let Some(bed) = file.strip_suffix(".json") {
            beds.insert(bed.to_string());
        }
    }
    for ns in names(Path::new("/run/netns")) {
        if let Some(side) = ns.strip_prefix("flowlane-") {
            // Bed names never end in "-peer": this is the far side's.
            beds.insert(side.strip_suffix("-peer").unwrap_or(side).to_string());
        } else if let Some(pid) = scratch_owner_pid(&ns).filter(|&p| gone(p)) {
            eprintln!("removing namespace {ns}, left by test process {pid} (gone)");
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        }
    }
    beds.extend(names(Path::new("/sys/fs/bpf/flowlane")));
    for bed in beds {
        let Some(pid) = owner_pid(&bed).filter(|&p| gone(p)) else {
            continue;
        };
        eprintln!("taking down bed {bed}, left by test process {pid} (gone)");
        let _ = flowlane(&["testbed", "down", "--bed", &bed, "--force"]);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_of_two_processes_never_meet() {
        assert_ne!(
            super::name_of("ping", 1234, 10),
            super::name_of("ping", 12341, 0)
        );
        assert_eq!(
            super::owner_pid(&super::name_of("spill1q", 77, 3)),
            Some(77)
        );
        assert_eq!(
            super::owner_pid(&super::name_of("caps-rec", 78, 0)),
            Some(78)
        );
        for other in ["fl0", "t-1", "x-1-2", "tabc-12-x", "tabc--1"] {
            assert_eq!(super::owner_pid(other), None, "{other}");
        }
        // Linux's largest pid (pid_max 2^22), a long tag, many beds.
        let n = super::name_of("spillact", 4_194_304, 99_999);
        assert!(flowlane_testbed::state::validate_name(&n).is_ok(), "{n}");
        // flowlane-testbed's scratch namespaces (`flt-<tag>-<pid>-<n>`).
        assert_eq!(super::scratch_owner_pid("flt-dh-4321-0"), Some(4321));
        for other in ["flt--12-0", "flt-dh-x-0", "fl0", "tdh-4321-0", "flt-dh-12"] {
            assert_eq!(super::scratch_owner_pid(other), None, "{other}");
        }
    }

    /// What a killed test process left without a state file (a half-made
    /// bed, a scratch namespace) is removed by the next one's sweep.
    #[test]
    fn the_sweep_removes_what_dead_test_processes_left_without_a_state_file() {
        if !crate::require_root(
            "the_sweep_removes_what_dead_test_processes_left_without_a_state_file",
        ) {
            return;
        }
        // A pid that was a test process and is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let bed = format!("flowlane-{}", super::name_of("sweep", dead, 0));
        let scratch = format!("flt-sweep-{dead}-0");
        for ns in [&bed, &scratch] {
            let o = std::process::Command::new("ip")
                .args(["netns", "add", ns])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", crate::text(&o));
        }
        super::sweep();
        let netns = std::path::Path::new("/run/netns");
        let left: Vec<&String> = [&bed, &scratch]
            .into_iter()
            .filter(|ns| netns.join(ns).exists())
            .collect();
        for ns in &left {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .output();
        }
        assert!(left.is_empty(), "the sweep left {left:?}");
    }
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
        sweep_orphaned_beds();
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
        sweep_orphaned_beds();
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
