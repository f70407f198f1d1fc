//! A daemon owning a NIC that is killed (SIGKILL, a crash: systemd's
//! `Restart=on-failure` starts another) puts nothing back itself; the one
//! started after it finds the originals in the NIC's state file (written
//! before the first change) and puts those back when it stops, not the
//! killed daemon's settings it finds on the NIC. On the test bed's veth:
//! threaded NAPI (off before the first daemon) and the NAPI threads'
//! affinities (with threaded NAPI on before it).

mod tcp_common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flowlane_tests::{
    flowlane_bin, in_ns, kill_and_reap, napi_threads, require_root, terminate, text, threaded,
    wait_within, Bed,
};
use serde_json::Value;
use tcp_common::*;

/// `flowlane daemon --iface xsk0` in the bed's namespace, its state files
/// in `dir/state`; killed if the test fails first.
struct Daemon {
    child: Option<Child>,
    ready: Value,
    /// The lines it prints after the ready line (read until it exits).
    rest: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Daemon {
    fn start(bed: &Bed, dir: &Path) -> Daemon {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &bed.ns])
            .arg(flowlane_bin())
            .args(["daemon", "--iface", "xsk0", "--metrics", "127.0.0.1:0"])
            .args(["--socket", "none", "--run-dir"])
            .arg(dir.join("run"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("flowlane daemon");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).expect("ready line");
        let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            kill_and_reap(&mut child);
            panic!("{e}: {line:?} {err}")
        });
        let rest =
            std::thread::spawn(move || out.lines().map_while(Result::ok).collect::<Vec<String>>());
        Daemon {
            child: Some(child),
            ready,
            rest: Some(rest),
        }
    }

    /// What it changed on xsk0 as it started.
    fn changes(&self) -> Vec<String> {
        self.ready["nics"][0]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    }

    /// SIGKILL: nothing put back.
    fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM: a clean exit, and what it printed after the ready line.
    fn stop(mut self) -> Vec<String> {
        let mut child = self.child.take().unwrap();
        terminate(&child);
        let st = wait_within(&mut child, Duration::from_secs(20)).expect("daemon stops");
        assert!(st.success(), "daemon exited with {st}");
        self.rest.take().unwrap().join().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_reap(&mut c);
        }
    }
}

/// The state files in `dir/state`.
fn state_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("state"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn a_daemon_started_after_one_that_was_killed_puts_the_nic_back_as_it_was() {
    let test = "a_daemon_started_after_one_that_was_killed_puts_the_nic_back_as_it_was";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("dkill", 2);
    let dir = std::env::temp_dir().join(format!("fl-{}", bed.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    // A service on the veth: its XDP program gives the veth NAPI.
    let sock = dir.join("run/echo.sock");
    let _service = start(
        &bed,
        &[
            "echo-server",
            "--port",
            "7",
            "--control-socket",
            sock.to_str().unwrap(),
        ],
        120,
    );

    // Threaded NAPI off before: the first daemon switches it on, and is
    // killed; the next one finds it on and switches it off as it stops.
    assert_eq!(threaded(&bed), "0", "a fresh bed has threaded NAPI off");
    let first = Daemon::start(&bed, &dir);
    assert_eq!(first.changes()[0], "switched threaded NAPI on xsk0");
    let kept = state_files(&dir);
    first.kill();
    assert_eq!(threaded(&bed), "1", "a killed daemon puts nothing back");
    let second = Daemon::start(&bed, &dir);
    assert!(
        second.changes().is_empty(),
        "the plan is in force already: {:?}",
        second.changes()
    );
    let after = second.stop();
    assert!(
        after
            .iter()
            .any(|l| l.contains("switched threaded NAPI off on xsk0")),
        "{after:?}"
    );
    assert_eq!(threaded(&bed), "0", "back as before the first daemon");
    assert_eq!(kept.len(), 1, "kept before the change: {kept:?}");
    assert!(state_files(&dir).is_empty(), "removed on a clean exit");

    // Threaded NAPI on before, its threads on their own CPUs: the first
    // daemon pins them and is killed; the next one puts them back.
    let others: Vec<u32> = napi_threads().iter().map(|t| t.0).collect();
    let o = in_ns(
        &bed.ns,
        &["sh", "-c", "echo 1 > /sys/class/net/xsk0/threaded"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let ours = || -> Vec<(u32, String)> {
        let mut t: Vec<(u32, String)> = napi_threads()
            .into_iter()
            .filter(|t| !others.contains(&t.0))
            .collect();
        t.sort();
        t
    };
    let originals = ours();
    assert_eq!(
        originals.len(),
        2,
        "one NAPI thread per queue: {originals:?}"
    );
    let first = Daemon::start(&bed, &dir);
    first.kill();
    let pinned = ours();
    assert!(
        pinned.iter().all(|(_, cpus)| cpus.parse::<u32>().is_ok()),
        "pinned one CPU each, and left so: {pinned:?}"
    );
    let second = Daemon::start(&bed, &dir);
    let after = second.stop();
    assert_eq!(
        ours(),
        originals,
        "the NAPI threads back on their CPUs before the first daemon: {after:?}"
    );
    assert_eq!(threaded(&bed), "1", "on before: left on");
    assert!(state_files(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
