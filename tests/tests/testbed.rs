//! The veth test bed: up is idempotent, down removes exactly what up made,
//! a half-made bed does not block the next up, two ups of one bed take
//! turns, the emulated NIC is programmable (and not under the services
//! that use it), and `up` and `down` leave another run directory's bed
//! alone.

use flowlane_numa_sched::nic::RssNic;
use flowlane_numa_sched::IndirectionTable;
use flowlane_tests::{
    flowlane, flowlane_bin, in_ns, kill_and_reap, ready_within, require_root, start_udp_echo, text,
    unique_name, wait_within, Bed, OpenDir,
};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn ns_exists(ns: &str) -> bool {
    std::path::Path::new("/run/netns").join(ns).exists()
}

/// The inode of a namespace's `/run/netns` entry: a bed made anew has
/// another.
fn ns_inode(ns: &str) -> u64 {
    std::fs::metadata(Path::new("/run/netns").join(ns))
        .unwrap_or_else(|e| panic!("{ns}: {e}"))
        .ino()
}

/// The emulated NIC's key and table as they are in its maps.
fn nic_rss(bed: &str) -> (Vec<u8>, Vec<u32>) {
    let s = flowlane_testbed::load(bed).unwrap().nic().rss().unwrap();
    (s.key, s.table)
}

/// The one line of a failed command's stderr.
fn one_line_failure(o: &Output) -> String {
    assert!(!o.status.success(), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr).trim_end().to_string();
    assert_eq!(err.lines().count(), 1, "{}", text(o));
    err
}

#[test]
fn up_is_idempotent_and_down_removes_everything() {
    if !require_root("up_is_idempotent_and_down_removes_everything") {
        return;
    }
    let bed = Bed::up("idem", 4);
    assert!(ns_exists(&bed.ns) && ns_exists(&bed.peer_ns));
    let inodes = (ns_inode(&bed.ns), ns_inode(&bed.peer_ns));
    let o = flowlane(&["testbed", "up", "--bed", &bed.name, "--queues", "4"]);
    assert!(o.status.success(), "second up: {}", text(&o));
    // The same namespaces: the second `up` did not rebuild the bed.
    assert_eq!(
        (ns_inode(&bed.ns), ns_inode(&bed.peer_ns)),
        inodes,
        "the second up made the bed anew"
    );
    let st = flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    assert!(st.status.success(), "{}", text(&st));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["intact"], true);
    assert_eq!(v["queues"], 4);
    assert_eq!(v["table_size"], 128);
    // The veth really has four queues on each side.
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "ls", "/sys/class/net/xsk0/queues"])
        .output()
        .unwrap();
    let qs = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        qs.split_whitespace()
            .filter(|q| q.starts_with("rx-"))
            .count(),
        4,
        "{qs}"
    );

    let name = bed.name.clone();
    let (ns, peer) = (bed.ns.clone(), bed.peer_ns.clone());
    drop(bed);
    assert!(!ns_exists(&ns) && !ns_exists(&peer));
    assert!(!std::path::Path::new("/sys/fs/bpf/flowlane")
        .join(&name)
        .exists());
    let o = flowlane(&["testbed", "down", "--bed", &name]);
    assert!(o.status.success(), "down of a removed bed: {}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("was not up"));
}

#[test]
fn a_half_made_bed_does_not_block_up() {
    if !require_root("a_half_made_bed_does_not_block_up") {
        return;
    }
    // A crash of `up` (SIGKILL) after the first namespace was made leaves a
    // half-made bed behind, without a state file.
    let name = unique_name("crash");
    let ns = format!("flowlane-{name}");
    let state = flowlane_testbed::state::state_dir().join(format!("{name}.json"));
    let mut half_made = false;
    for _ in 0..5 {
        let mut up = Command::new(flowlane_bin())
            .args(["testbed", "up", "--bed", &name, "--queues", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ns_exists(&ns) && up.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = up.kill();
        let _ = up.wait();
        half_made = ns_exists(&ns) && !state.exists();
        if half_made {
            break;
        }
        // It finished first: try again.
        let _ = flowlane(&["testbed", "down", "--bed", &name]);
    }
    let o = flowlane(&["testbed", "up", "--bed", &name, "--queues", "2"]);
    let ok = o.status.success();
    let down = flowlane(&["testbed", "down", "--bed", &name]);
    assert!(half_made, "every killed up had finished");
    assert!(ok, "up over leftovers: {}", text(&o));
    assert!(down.status.success(), "{}", text(&down));
    assert!(!ns_exists(&ns));
}

/// Two `up`s of one bed at once (two processes, here two threads) take
/// turns: neither deletes what the other is making, and the state file
/// describes the bed that is there.
#[test]
fn concurrent_ups_of_one_bed_take_turns() {
    if !require_root("concurrent_ups_of_one_bed_take_turns") {
        return;
    }
    struct Down(String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = flowlane_testbed::down(&self.0);
        }
    }
    let bed = Down(unique_name("race"));
    let name = bed.0.as_str();
    let spec = |queues: u16| flowlane_testbed::BedSpec {
        name: name.to_string(),
        queues: queues.into(),
        key: (1..=40).collect(),
        table: IndirectionTable::even(128, &(0..queues).collect::<Vec<_>>())
            .unwrap()
            .to_queue_list(),
    };
    // Each up rebuilds the bed the other made (another queue count).
    let failures: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = [1, 2]
            .map(|q| {
                let spec = spec(q);
                s.spawn(move || {
                    (0..4)
                        .filter_map(|_| flowlane_testbed::up(&spec).err())
                        .map(|e| format!("{e:#}"))
                        .collect::<Vec<_>>()
                })
            })
            .into_iter()
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{failures:?}");
    let s = flowlane_testbed::load(name).unwrap();
    let live_mac = |ns: &str, dev: &str| {
        let o = in_ns(ns, &["ip", "-o", "link", "show", dev]);
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .map(str::to_string)
    };
    assert_eq!(live_mac(&s.netns, "xsk0").as_deref(), Some(&*s.local_mac));
    assert_eq!(
        live_mac(&s.peer_netns, "peer0").as_deref(),
        Some(&*s.peer_mac)
    );
    let o = in_ns(&s.netns, &["ls", "/sys/class/net/xsk0/queues"]);
    let rx = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter(|q| q.starts_with("rx-"))
        .count();
    assert_eq!(
        rx, s.queues as usize,
        "the state's queue count is the bed's"
    );
}

#[test]
fn set_rss_programs_the_emulated_nic() {
    if !require_root("set_rss_programs_the_emulated_nic") {
        return;
    }
    let bed = Bed::up("rss", 4);
    let (key, table) = nic_rss(&bed.name);
    assert_eq!(
        table,
        IndirectionTable::even(128, &[0, 1, 2, 3])
            .unwrap()
            .to_queue_list()
    );
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--spread", "1,3"]);
    assert!(o.status.success(), "{}", text(&o));
    let spread = IndirectionTable::even(128, &[1, 3])
        .unwrap()
        .to_queue_list();
    assert_eq!(nic_rss(&bed.name), (key, spread.clone()));
    // A key alone leaves the table as it is.
    let new_key: Vec<u8> = (1..=40).collect();
    let hex: Vec<String> = new_key.iter().map(|b| format!("{b:02x}")).collect();
    let o = flowlane(&[
        "testbed",
        "set-rss",
        "--bed",
        &bed.name,
        "--key",
        &hex.join(":"),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(nic_rss(&bed.name), (new_key.clone(), spread));
    let st = flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["key"], hex.join(":"), "{}", text(&st));
    // An explicit table (of the NIC's size: RssCaps refuses another).
    let explicit: Vec<u32> = (0..128).map(|b| [3, 2, 0, 1, 1][b % 5]).collect();
    let list: Vec<String> = explicit.iter().map(u32::to_string).collect();
    let o = flowlane(&[
        "testbed",
        "set-rss",
        "--bed",
        &bed.name,
        "--table",
        &list.join(","),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(nic_rss(&bed.name), (new_key.clone(), explicit.to_vec()));

    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--key", "6d:5a"]);
    let err = one_line_failure(&o);
    assert!(err.contains("key"), "{err}");
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--spread", "0,9"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("queue 9"),
        "{}",
        text(&o)
    );
    // Nothing refused was written.
    assert_eq!(nic_rss(&bed.name), (new_key, explicit.to_vec()));
}

#[test]
fn set_rss_refuses_a_bed_in_use_unless_forced() {
    if !require_root("set_rss_refuses_a_bed_in_use_unless_forced") {
        return;
    }
    let bed = Bed::up("rssuse", 2);
    let before = nic_rss(&bed.name);
    let (mut echo, report) = start_udp_echo(&bed, 7790);
    // Everything asked while the service runs, checked once it is stopped
    // (the bed's `down` would stop it too, but leave its report).
    let plain = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--spread", "1"]);
    let after_refusal = nic_rss(&bed.name);
    let o = flowlane(&[
        "testbed", "set-rss", "--bed", &bed.name, "--spread", "1", "--force",
    ]);
    let forced = (o.status.success(), text(&o), nic_rss(&bed.name));
    let still_running = echo.try_wait().unwrap().is_none();
    kill_and_reap(&mut echo);
    let _ = std::fs::remove_file(&report);
    let refused = one_line_failure(&plain);
    assert!(
        refused.contains("in use by") && refused.contains(&format!("pid {}", echo.id())),
        "{refused}"
    );
    assert!(refused.contains("--force"), "{refused}");
    assert_eq!(after_refusal, before, "the refused set-rss wrote the NIC");
    assert!(forced.0, "{}", forced.1);
    assert_eq!(forced.2 .1, vec![1; 128]);
    assert!(still_running, "set-rss --force stopped the service");
}

#[test]
fn up_refuses_a_table_naming_queues_the_bed_lacks() {
    if !require_root("up_refuses_a_table_naming_queues_the_bed_lacks") {
        return;
    }
    let name = unique_name("badtable");
    let spec = flowlane_testbed::BedSpec {
        name: name.clone(),
        queues: 2,
        key: (1..=40).collect(),
        table: vec![0, 1, 2, 1],
    };
    let r = flowlane_testbed::up(&spec);
    let made = ns_exists(&format!("flowlane-{name}"));
    if r.is_ok() || made {
        let _ = flowlane_testbed::down(&name);
    }
    let e = format!("{:#}", r.expect_err("a table naming queue 2 of 2"));
    assert!(e.contains("queue 2") && e.contains(&name), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(!made, "the refused bed was made");
}

/// `flowlane testbed <args>` with the beds' state in `run_dir`.
fn testbed_in(run_dir: &Path, args: &[&str]) -> Output {
    Command::new(flowlane_bin())
        .arg("testbed")
        .args(args)
        .env("FLOWLANE_RUN_DIR", run_dir)
        .output()
        .unwrap()
}

/// Takes the bed down from its own run directory and removes both run
/// directories, whatever the test's outcome.
struct TwoRunDirs {
    bed: String,
    own: std::path::PathBuf,
    other: std::path::PathBuf,
}

impl TwoRunDirs {
    /// A bed named after `tag` and two fresh run directories.
    fn new(tag: &str) -> TwoRunDirs {
        TwoRunDirs {
            bed: unique_name(tag),
            own: std::env::temp_dir().join(unique_name("runown")),
            other: std::env::temp_dir().join(unique_name("runother")),
        }
    }
}

impl Drop for TwoRunDirs {
    fn drop(&mut self) {
        let _ = testbed_in(&self.own, &["down", "--bed", &self.bed]);
        let _ = testbed_in(&self.other, &["down", "--bed", &self.bed, "--force"]);
        let _ = std::fs::remove_dir_all(&self.own);
        let _ = std::fs::remove_dir_all(&self.other);
    }
}

#[test]
fn down_leaves_another_run_directorys_bed_unless_forced() {
    if !require_root("down_leaves_another_run_directorys_bed_unless_forced") {
        return;
    }
    let dirs = TwoRunDirs::new("rundown");
    let (name, ns) = (&dirs.bed, format!("flowlane-{}", dirs.bed));
    let o = testbed_in(&dirs.own, &["up", "--bed", name, "--queues", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = testbed_in(&dirs.other, &["down", "--bed", name]);
    let err = one_line_failure(&o);
    assert!(
        err.contains("no record") && err.contains("--force") && err.contains(name),
        "{err}"
    );
    assert!(ns_exists(&ns), "the refused down removed the bed");
    let o = testbed_in(&dirs.own, &["status", "--bed", name, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = testbed_in(&dirs.other, &["down", "--bed", name, "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!ns_exists(&ns));
    // Its own run directory's state file is what is left: `down` there
    // removes it.
    let o = testbed_in(&dirs.own, &["down", "--bed", name]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!dirs.own.join(format!("testbed/{name}.json")).exists());
}

#[test]
fn up_leaves_another_run_directorys_bed_unless_removed_by_force() {
    if !require_root("up_leaves_another_run_directorys_bed_unless_removed_by_force") {
        return;
    }
    let dirs = TwoRunDirs::new("runup");
    let (name, ns) = (&dirs.bed, format!("flowlane-{}", dirs.bed));
    let peer = format!("{ns}-peer");
    let o = testbed_in(&dirs.own, &["up", "--bed", name, "--queues", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let inodes = (ns_inode(&ns), ns_inode(&peer));
    let o = testbed_in(&dirs.other, &["up", "--bed", name, "--queues", "1"]);
    let err = one_line_failure(&o);
    assert!(
        err.contains("no record") && err.contains("down --force") && err.contains(name),
        "{err}"
    );
    assert_eq!(
        (ns_inode(&ns), ns_inode(&peer)),
        inodes,
        "the refused up touched the bed"
    );
    assert!(!dirs.other.join(format!("testbed/{name}.json")).exists());
    let o = testbed_in(&dirs.own, &["status", "--bed", name, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["intact"], true, "{}", text(&o));
    // Removed by force, the name is the other run directory's to use.
    let o = testbed_in(&dirs.other, &["down", "--bed", name, "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = testbed_in(&dirs.other, &["up", "--bed", name, "--queues", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(dirs.other.join(format!("testbed/{name}.json")).exists());
    // The first run directory's state file, left there, records its own
    // bed, removed since: not the other's bed under the name now. Its
    // plain `up` neither rewrites nor rebuilds that bed, its `status`
    // does not describe it, and its plain `down` leaves it.
    let theirs = (ns_inode(&ns), ns_inode(&peer));
    assert!(dirs.own.join(format!("testbed/{name}.json")).exists());
    let o = testbed_in(&dirs.own, &["up", "--bed", name, "--queues", "1"]);
    let err = one_line_failure(&o);
    assert!(
        err.contains("no record") && err.contains("down --force"),
        "{err}"
    );
    let o = testbed_in(&dirs.own, &["status", "--bed", name]);
    let err = one_line_failure(&o);
    assert!(err.contains("does not record the namespaces"), "{err}");
    let o = testbed_in(&dirs.own, &["down", "--bed", name]);
    let err = one_line_failure(&o);
    assert!(
        err.contains("no record") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        (ns_inode(&ns), ns_inode(&peer)),
        theirs,
        "a stale record's up or down touched the other run directory's bed"
    );
    let o = testbed_in(&dirs.other, &["status", "--bed", name, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    // `up --force` takes it back in one step: it removes the bed the run
    // directory has no record of, then makes its own.
    let o = testbed_in(
        &dirs.own,
        &["up", "--bed", name, "--queues", "1", "--force"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(dirs.own.join(format!("testbed/{name}.json")).exists());
}

/// `up --force` checks its flags (the emulated NIC's limits, which clap
/// does not know) before it stops or removes anything: a bed it would have
/// removed stays when they are refused.
#[test]
fn up_force_checks_its_flags_before_removing_a_bed() {
    if !require_root("up_force_checks_its_flags_before_removing_a_bed") {
        return;
    }
    let dirs = TwoRunDirs::new("runflag");
    let (name, ns) = (&dirs.bed, format!("flowlane-{}", dirs.bed));
    let peer = format!("{ns}-peer");
    let o = testbed_in(&dirs.own, &["up", "--bed", name, "--queues", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let inodes = (ns_inode(&ns), ns_inode(&peer));
    for bad in [&["--table-size", "4096"][..], &["--queues", "300"][..]] {
        let mut args = vec!["up", "--bed", name, "--force"];
        args.extend_from_slice(bad);
        let o = testbed_in(&dirs.other, &args);
        let err = one_line_failure(&o);
        assert!(
            err.contains(name) || err.contains("queue"),
            "{bad:?}: {err}"
        );
        assert_eq!(
            (ns_inode(&ns), ns_inode(&peer)),
            inodes,
            "{bad:?}: the refused up --force removed the bed"
        );
    }
    let o = testbed_in(&dirs.own, &["status", "--bed", name, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Receiver of [`impair_loss_towards_flowlane_is_loss_on_the_wire`]: reads
/// one connection to its end and answers with the byte count.
const SINK: &str = r#"
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('10.99.0.1', int(sys.argv[1]))); s.listen(1); s.settimeout(60)
c, _ = s.accept(); c.settimeout(60); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
c.sendall(b'%d\n' % n); c.close()
"#;

/// Sender: `bytes` to 10.99.0.1:`port`, then its segments sent and
/// retransmitted (`tcp_info`'s tcpi_segs_out and tcpi_total_retrans).
const SOURCE: &str = r#"
import socket, struct, sys, time
port, total = int(sys.argv[1]), int(sys.argv[2])
for _ in range(100):
    try:
        s = socket.create_connection(('10.99.0.1', port), timeout=60); break
    except OSError:
        time.sleep(0.1)
s.sendall(b'x' * total); s.shutdown(socket.SHUT_WR)
got = int(s.makefile().readline())
i = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
retrans, = struct.unpack_from('I', i, 100); segs_out, = struct.unpack_from('I', i, 136)
print(got, segs_out, retrans)
"#;

/// `impair --loss` towards flowlane loses segments on the wire: a kernel
/// TCP sender in the peer namespace retransmits about the configured share
/// of its segments. (A loss reported to the sender as a local drop is sent
/// again at once, never retransmitted: none were before the fix.)
#[test]
fn impair_loss_towards_flowlane_is_loss_on_the_wire() {
    if !require_root("impair_loss_towards_flowlane_is_loss_on_the_wire") {
        return;
    }
    let bed = Bed::up("iloss", 1);
    let o = flowlane(&["testbed", "impair", "--bed", &bed.name, "--loss", "5"]);
    assert!(o.status.success(), "{}", text(&o));
    let port = "5301";
    let total = 3u64 << 20;
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "python3", "-c", SINK, port])
        .stdout(Stdio::null())
        .spawn()
        .expect("starting the sink");
    let o = in_ns(
        &bed.peer_ns,
        &["python3", "-c", SOURCE, port, &total.to_string()],
    );
    kill_and_reap(&mut sink);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Vec<u64> = out.split_whitespace().map(|w| w.parse().unwrap()).collect();
    let (got, segs, retrans) = (v[0], v[1], v[2]);
    assert_eq!(got, total, "{out}");
    // 5 % of the data segments lost, and some retransmissions with them;
    // the bounds leave room for chance (≈2000 segments) and for the
    // kernel sender's own choices: its tail-loss probes and RACK resend
    // more than was lost when the VM is loaded (19.7 % in one CI run,
    // 534 of 2,711). The lower bound is the point: a loss reported to the
    // sender as a local drop is never retransmitted.
    let share = retrans as f64 / segs as f64;
    assert!(
        (0.02..=0.35).contains(&share),
        "{retrans} of {segs} segments retransmitted ({:.1} %) at 5 % loss",
        share * 100.0
    );
}

/// `testbed delay --json`'s stdout is JSON lines: `{"event":"ready",...}`
/// once frames are delayed, then the report; the banner is on stderr.
#[test]
fn delay_json_stdout_is_json_lines() {
    if !require_root("delay_json_stdout_is_json_lines") {
        return;
    }
    use std::io::{BufRead, BufReader};
    let bed = Bed::up("dljs", 1);
    let mut child = Command::new(flowlane_bin())
        .args([
            "testbed", "delay", "--bed", &bed.name, "--json", "--ms", "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the delay line");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).expect("the ready line");
    let ready: serde_json::Value = serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("first stdout line {first:?} is not JSON: {e}"));
    assert_eq!(ready["event"], "ready", "{first}");
    assert_eq!(ready["one_way_ms"], 1.0, "{first}");
    flowlane_tests::terminate(&child);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<&str> = rest.lines().collect();
    assert_eq!(lines.len(), 1, "the report is one line: {rest:?}");
    let report: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert!(report["queue"].is_object(), "{rest}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("delaying both directions"),
        "{}",
        text(&o)
    );
}

/// A bad `--slow-rate` is one line and leaves no slow path behind; a
/// failing step of `impair` removes what the earlier ones set up.
#[test]
fn impair_refuses_a_bad_slow_rate_and_leaves_nothing_half_made() {
    if !require_root("impair_refuses_a_bad_slow_rate_and_leaves_nothing_half_made") {
        return;
    }
    let bed = Bed::up("irate", 1);
    let qdisc = || {
        let o = in_ns(&bed.peer_ns, &["tc", "qdisc", "show", "dev", "peer0"]);
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    for bad in ["10xyz", "0"] {
        let o = flowlane(&[
            "testbed",
            "impair",
            "--bed",
            &bed.name,
            "--reorder",
            "5",
            "--slow-rate",
            bad,
        ]);
        let err = one_line_failure(&o);
        assert!(err.contains("--slow-rate") && err.contains(bad), "{err}");
        assert!(!qdisc().contains("htb"), "{bad}: {}", qdisc());
    }
    // A step that fails after the slow path on peer0 was made: the ifb
    // device's name is taken by a VXLAN device whose UDP port a socket
    // holds, so that it cannot be brought up (EADDRINUSE).
    let mut holder = Command::new("ip")
        .args(["netns", "exec", &bed.peer_ns, "python3", "-c"])
        .arg(
            "import socket, sys, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.bind(('0.0.0.0', 4789)); print('bound', flush=True); time.sleep(60)",
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("holding UDP port 4789");
    let mut bound = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut bound,
    )
    .unwrap();
    assert_eq!(bound.trim(), "bound");
    let o = in_ns(
        &bed.peer_ns,
        &[
            "ip", "link", "add", "flifb0", "type", "vxlan", "id", "5", "dstport", "4789",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = flowlane(&["testbed", "impair", "--bed", &bed.name, "--loss", "1"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("impairment removed"),
        "{}",
        text(&o)
    );
    kill_and_reap(&mut holder);
    assert!(!qdisc().contains("htb"), "half-made: {}", qdisc());
}

/// `testbed status` shows the table (compactly), the impairment settings
/// and the counters, in both forms.
#[test]
fn status_shows_the_table_and_the_impairments() {
    if !require_root("status_shows_the_table_and_the_impairments") {
        return;
    }
    let bed = Bed::up("stat", 2);
    let o = flowlane(&[
        "testbed", "impair", "--bed", &bed.name, "--loss", "5", "--ce", "0.5",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = flowlane(&["testbed", "status", "--bed", &bed.name]);
    assert!(o.status.success(), "{}", text(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("indirection table: 128 entries: [0 1] ×64"),
        "{t}"
    );
    assert!(
        t.contains("loss 5%") && t.contains("ce 0.5%") && t.contains("duplicate 0%"),
        "{t}"
    );
    assert!(t.contains("to flowlane:") && t.contains("lost"), "{t}");
    // Both families' addresses, so that a user of either finds them.
    assert!(
        t.contains(" xsk0 10.99.0.1 fd99::1 ") && t.contains(" peer0 10.99.0.2 fd99::2 "),
        "{t}"
    );
    let o = flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status JSON");
    let table: Vec<u64> = v["table"]
        .as_array()
        .unwrap_or_else(|| panic!("no table: {v}"))
        .iter()
        .map(|q| q.as_u64().unwrap())
        .collect();
    assert_eq!(table, (0..128).map(|i| i % 2).collect::<Vec<u64>>());
    let s = &v["impairment"]["settings"];
    assert_eq!(
        (s["loss_ppm"].as_u64(), s["ce_ppm"].as_u64()),
        (Some(50_000), Some(5_000)),
        "{v}"
    );
    assert!(v["impairment"]["to_flowlane"]["seen"].is_u64(), "{v}");
    assert_eq!(
        (v["local_v6"].as_str(), v["peer_v6"].as_str()),
        (Some("fd99::1"), Some("fd99::2")),
        "{v}"
    );
}

/// `up --key` takes the 40 bytes `set-rss --key` does; `set-rss` without a
/// change and `impair --clear` with impairments are refused, one line each.
#[test]
fn testbed_flags_that_would_do_nothing_or_the_wrong_thing_are_refused() {
    if !require_root("testbed_flags_that_would_do_nothing_or_the_wrong_thing_are_refused") {
        return;
    }
    let name = unique_name("flags");
    let key: Vec<String> = (1..=16).map(|b| format!("{b:02x}")).collect();
    let o = flowlane(&[
        "testbed",
        "up",
        "--bed",
        &name,
        "--queues",
        "1",
        "--key",
        &key.join(":"),
    ]);
    if o.status.success() {
        // Not left behind by an `up` that should have refused.
        let _ = flowlane(&["testbed", "down", "--bed", &name]);
    }
    let err = one_line_failure(&o);
    assert!(err.contains("16 bytes") && err.contains("40"), "{err}");
    assert!(!ns_exists(&format!("flowlane-{name}")), "a bed was made");

    let bed = Bed::up("flags", 1);
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name]);
    let err = one_line_failure(&o);
    assert!(err.contains("--key, --spread or --table"), "{err}");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = flowlane(&[
        "testbed", "impair", "--bed", &bed.name, "--clear", "--loss", "5",
    ]);
    let err = one_line_failure(&o);
    assert!(err.contains("--clear") && err.contains("--loss"), "{err}");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// A data path whose program is not called flowlane (a service built on
/// flowlane's libraries; here flowlane's own binary under another name)
/// uses its bed by the AF_XDP sockets it holds there: `status` names it,
/// and `down` names it and stops it before removing the bed, as it does
/// flowlane's own services.
#[test]
fn a_data_path_not_named_flowlane_is_a_user_of_its_bed() {
    if !require_root("a_data_path_not_named_flowlane_is_a_user_of_its_bed") {
        return;
    }
    let bed = Bed::up("libuser", 2);
    let dir = OpenDir::new("libuser");
    let program = dir.path("echo-service");
    std::fs::copy(flowlane_bin(), &program).unwrap();
    let report = dir.path("report.json");
    let mut service = Command::new("ip")
        .args(["netns", "exec", &bed.ns])
        .arg(&program)
        .args(["udp-echo", "--iface", "xsk0", "--port", "7792", "--report"])
        .arg(&report)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Err(e) = ready_within(&mut service, Duration::from_secs(30), || report.exists()) {
        kill_and_reap(&mut service);
        panic!("the renamed udp-echo did not start: {e:?}");
    }
    let pid = format!("pid {} (echo-service", service.id());
    let st = flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    let down = flowlane(&["testbed", "down", "--bed", &bed.name]);
    let stopped = wait_within(&mut service, Duration::from_secs(10));
    if stopped.is_none() {
        kill_and_reap(&mut service);
    }
    assert!(st.status.success(), "{}", text(&st));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let users = v["users"].as_array().unwrap();
    assert!(
        users.iter().any(|u| u.as_str().unwrap().starts_with(&pid)),
        "{users:?}"
    );
    assert!(down.status.success(), "{}", text(&down));
    assert!(
        String::from_utf8_lossy(&down.stdout).contains(&format!("stopped {pid}")),
        "{}",
        text(&down)
    );
    assert!(stopped.is_some(), "down left the service running");
}

/// Bed commands run inside a bed's namespace (`ip netns exec`, whose /sys
/// hides the beds' pinned maps) are refused in one line naming the bed,
/// and leave the bed as it was: `up` there once took the bed for
/// half-made and made it again over itself (exit 0, the namespaces' names
/// left pointing at nothing), `down` left its pins behind. So is a `--bed`
/// command that also gives the RSS the bed gives.
#[test]
fn bed_commands_from_inside_a_bed_are_refused_and_leave_it_whole() {
    if !require_root("bed_commands_from_inside_a_bed_are_refused_and_leave_it_whole") {
        return;
    }
    let bed = Bed::up("inside", 2);
    let inodes = (ns_inode(&bed.ns), ns_inode(&bed.peer_ns));
    let before = nic_rss(&bed.name);
    let bin = flowlane_bin();
    for (ns, args) in [
        (
            &bed.ns,
            vec!["testbed", "up", "--bed", &bed.name, "--queues", "2"],
        ),
        (&bed.peer_ns, vec!["testbed", "down", "--bed", &bed.name]),
        (&bed.ns, vec!["testbed", "status", "--bed", &bed.name]),
        (&bed.ns, vec!["demo", "--flows", "4"]),
        (&bed.ns, vec!["echo-server", "--bed", &bed.name]),
    ] {
        let o = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(&bin)
            .args(&args)
            .output()
            .unwrap();
        let err = one_line_failure(&o);
        assert!(
            err.contains(&format!(
                "inside network namespace {ns} (test bed {}'s)",
                bed.name
            )) && err.contains("run it without `ip netns exec`"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        (ns_inode(&bed.ns), ns_inode(&bed.peer_ns)),
        inodes,
        "the bed was made anew"
    );
    assert_eq!(nic_rss(&bed.name), before);
    let o = flowlane(&["testbed", "status", "--bed", &bed.name]);
    assert!(o.status.success(), "{}", text(&o));
    let o = flowlane(&["echo-server", "--bed", &bed.name, "--rss-table", "1,1"]);
    let err = one_line_failure(&o);
    assert!(
        err.contains("--rss-table and --bed") && err.contains("drop --rss-table"),
        "{err}"
    );
}
