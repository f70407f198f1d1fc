//! Test beds: `flowlane testbed up` under a unique name, removed on drop,
//! and what tests start on them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use crate::child::ready_within;
use crate::{flowlane, flowlane_bin, text};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique test bed name for this process and call.
pub fn unique_name(tag: &str) -> String {
    name_of(tag, std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// What the harness's names begin with: what tells them from other names
/// of the same shape (a user's bed `tenant-4242-1`), which the sweep
/// never touches.
const HARNESS: &str = "t_";

/// `t_<tag>_<pid>_<call>`: the tag, the process and the call, separated
/// (pid 1234's 10th name and pid 12341's first are not one; [`owner_pid`]
/// reads the pid back). At most 24 characters, a bed name's limit, for a
/// tag of 8, any pid (pid_max is at most 2^22) and 99 999 calls.
fn name_of(tag: &str, pid: u32, seq: u32) -> String {
    format!("{HARNESS}{tag}_{pid}_{seq}")
}

/// The test process a bed name of [`name_of`]'s shape was made by; `None`
/// for any other name.
fn owner_pid(name: &str) -> Option<u32> {
    pid_in(name, '_', |head| {
        head.strip_prefix(HARNESS)
            .is_some_and(|tag| !tag.is_empty())
    })
}

/// The test process a scratch namespace of flowlane-testbed's unit tests
/// (`flt-<tag>-<pid>-<n>`) was made by.
fn scratch_owner_pid(name: &str) -> Option<u32> {
    pid_in(name, '-', |head| {
        head.strip_prefix("flt-").is_some_and(|tag| !tag.is_empty())
    })
}

/// The pid of a name `<head><sep><pid><sep><n>` whose head `head_ok`
/// accepts.
fn pid_in(name: &str, sep: char, head_ok: impl Fn(&str) -> bool) -> Option<u32> {
    let mut parts = name.rsplitn(3, sep);
    let (seq, pid, head) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (head_ok(head) && digits(seq) && digits(pid))
        .then(|| pid.parse().ok())
        .flatten()
}

/// How much later than a leftover's making the process now under its
/// maker's pid must have started to be taken for another process (the pid
/// given again): the two times come from two clocks (the leftover's from
/// the wall clock when it was made, the process's from the boot-time
/// clock, put on the wall clock as it is now), and a wall clock stepped
/// since, or their coarseness, must not make a live test's bed look
/// orphaned. A leftover whose pid was given again sooner than this after
/// its making waits for a later sweep.
const PID_REUSE_MARGIN: Duration = Duration::from_secs(2);

/// Whether test process `pid`, whose name is on something made at `made`,
/// has gone: no process runs under its pid (a zombie has exited), or the
/// one that does started after `made` ([`PID_REUSE_MARGIN`]). A test
/// process in another pid namespace looks gone: the sweep is for one
/// host's (or container's) tests.
fn maker_gone(pid: u32, made: Option<SystemTime>) -> bool {
    match flowlane_testbed::proc_stat::started_at(pid) {
        None => true,
        Some(started) => made.is_some_and(|m| started > m + PID_REUSE_MARGIN),
    }
}

/// When the oldest part of bed `name` there was made: its namespaces'
/// names, its pinned maps' directory, its state file (the last two by
/// their change of contents).
fn bed_made(name: &str) -> Option<SystemTime> {
    let namespaces = [format!("flowlane-{name}"), format!("flowlane-{name}-peer")];
    let files = [
        Path::new(PINS).join(name),
        flowlane_testbed::state::state_dir().join(format!("{name}.json")),
    ];
    namespaces
        .iter()
        .filter_map(|ns| flowlane_testbed::netns::id(ns).map(|id| id.made_at()))
        .chain(
            files
                .iter()
                .filter_map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok()),
        )
        .min()
}

/// The directory of the beds' pinned maps.
const PINS: &str = "/sys/fs/bpf/flowlane";

static SWEPT: std::sync::Once = std::sync::Once::new();

/// Takes down, once per test process and before its first bed, what test
/// processes no longer running left behind (killed by a signal or a CI
/// timeout: their `Drop` never ran); see [`sweep`].
fn sweep_orphaned_beds() {
    SWEPT.call_once(sweep);
}

/// Removes what test processes that are gone ([`maker_gone`]) left, found
/// by the harness's names ([`name_of`]; no other name is touched): their
/// beds, whether recorded in the default run directory, in a temporary
/// one (`FLOWLANE_RUN_DIR`) or nowhere (half-made), seen by their state
/// files, namespaces and pinned maps (`testbed down --force`); and
/// flowlane-testbed's scratch namespaces (`flt-*`).
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
        } else if let Some(pid) = scratch_owner_pid(&ns) {
            let made = flowlane_testbed::netns::id(&ns).map(|id| id.made_at());
            if maker_gone(pid, made) {
                eprintln!("removing namespace {ns}, left by test process {pid} (gone)");
                let _ = Command::new("ip").args(["netns", "del", &ns]).output();
            }
        }
    }
    beds.extend(names(Path::new(PINS)));
    for bed in beds {
        let Some(pid) = owner_pid(&bed) else {
            continue;
        };
        if !maker_gone(pid, bed_made(&bed)) {
            continue;
        }
        eprintln!("taking down bed {bed}, left by test process {pid} (gone)");
        let _ = flowlane(&["testbed", "down", "--bed", &bed, "--force"]);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

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
        // Other names of the same shape are not the harness's: a user's,
        // the harness's older `t<tag>-<pid>-<n>`.
        for other in [
            "fl0",
            "t-1",
            "x-1-2",
            "tabc-12-3",
            "tenant-4242-1",
            "t__12_0",
            "t_abc_12_x",
            "tenant_4242_1",
        ] {
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

    /// A pid that was a test process and is gone.
    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        dead
    }

    /// Runs `cmd`, which must succeed.
    fn run(cmd: &mut Command) {
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{cmd:?}: {}", crate::text(&o));
    }

    /// The namespaces of `all` that are there.
    fn there(all: &[String]) -> Vec<&String> {
        all.iter()
            .filter(|ns| Path::new("/run/netns").join(ns).exists())
            .collect()
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
        let dead = dead_pid();
        let bed = format!("flowlane-{}", super::name_of("sweep", dead, 0));
        let scratch = format!("flt-sweep-{dead}-0");
        for ns in [&bed, &scratch] {
            run(Command::new("ip").args(["netns", "add", ns]));
        }
        super::sweep();
        let all = [bed, scratch];
        let left = there(&all);
        for ns in &left {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        assert!(left.is_empty(), "the sweep left {left:?}");
    }

    /// The sweep takes down a bed of the harness's naming whose process is
    /// gone, even one another run directory records, and one whose pid a
    /// process started since has; it leaves beds of other names with the
    /// same dead pid (a user's `tenant-<pid>-1`) and the harness's beds of
    /// live processes.
    #[test]
    fn the_sweep_takes_down_only_the_harness_beds_of_processes_gone() {
        if !crate::require_root("the_sweep_takes_down_only_the_harness_beds_of_processes_gone") {
            return;
        }
        let me = std::process::id();
        let dead = dead_pid();
        // Recorded by another run directory.
        let run_dir = std::env::temp_dir().join(crate::unique_name("sweeprun"));
        let left = super::name_of("q", dead, 0);
        run(Command::new(crate::flowlane_bin())
            .args(["testbed", "up", "--bed", &left, "--queues", "1"])
            .env("FLOWLANE_RUN_DIR", &run_dir));
        let others = [format!("tenant-{dead}-1"), format!("tq-{dead}-0")];
        let live = super::name_of("lv", me, 99_999);
        for bed in others.iter().chain([&live]) {
            run(Command::new("ip").args(["netns", "add", &format!("flowlane-{bed}")]));
        }
        // A namespace made before a process that has its maker's pid now:
        // another name (a bind mount) of one made before that process.
        let older = format!("sweep-src-{me}");
        run(Command::new("ip").args(["netns", "add", &older]));
        std::thread::sleep(super::PID_REUSE_MARGIN + std::time::Duration::from_millis(500));
        let mut later = Command::new("sleep").arg("60").spawn().unwrap();
        let reused = format!("flowlane-{}", super::name_of("r", later.id(), 0));
        let reused_path = Path::new("/run/netns").join(&reused);
        std::fs::write(&reused_path, b"").unwrap();
        run(Command::new("mount")
            .args(["--bind", &format!("/run/netns/{older}")])
            .arg(&reused_path));

        super::sweep();
        let all: Vec<String> = [format!("flowlane-{left}"), format!("flowlane-{left}-peer")]
            .into_iter()
            .chain([reused])
            .chain(
                others
                    .iter()
                    .chain([&live])
                    .map(|b| format!("flowlane-{b}")),
            )
            .collect();
        let after: Vec<String> = there(&all).into_iter().cloned().collect();

        let _ = later.kill();
        let _ = later.wait();
        let _ = Command::new(crate::flowlane_bin())
            .args(["testbed", "down", "--bed", &left, "--force"])
            .env("FLOWLANE_RUN_DIR", &run_dir)
            .output();
        for ns in there(&all).into_iter().chain([&older]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = std::fs::remove_file(&reused_path);
        let _ = std::fs::remove_dir_all(&run_dir);
        let kept: Vec<String> = others
            .iter()
            .chain([&live])
            .map(|b| format!("flowlane-{b}"))
            .collect();
        assert_eq!(
            after, kept,
            "the sweep took down another than the leftovers"
        );
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

    /// Makes it an IPv6-only network's bed: its IPv4 addresses removed
    /// (xsk0's 10.99.0.1/24, peer0's 10.99.0.2/24).
    pub fn remove_ipv4(&self) {
        for (ns, dev, addr) in [
            (&self.ns, "xsk0", "10.99.0.1/24"),
            (&self.peer_ns, "peer0", "10.99.0.2/24"),
        ] {
            let o = crate::in_ns(ns, &["ip", "addr", "del", addr, "dev", dev]);
            assert!(o.status.success(), "removing {addr}: {}", text(&o));
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

/// `bed`'s `xsk0` threaded-NAPI setting (`/sys/class/net/xsk0/threaded`).
pub fn threaded(bed: &Bed) -> String {
    let o = crate::in_ns(&bed.ns, &["cat", "/sys/class/net/xsk0/threaded"]);
    assert!(o.status.success(), "{}", crate::text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `(pid, allowed CPUs)` of every `napi/xsk0-*` thread of the host (thread
/// names are per namespace: other beds' veths are also xsk0, so a caller
/// keeps those that appeared in its test).
pub fn napi_threads() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("napi/xsk0-") {
            continue;
        }
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        if let Some(cpus) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            out.push((pid, cpus.trim().to_string()));
        }
    }
    out
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
