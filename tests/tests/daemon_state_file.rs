//! A NIC's state file (`flowlane_daemon::nic_state`) as the daemon that
//! owns a test bed's veth keeps it: what could not be put back when the
//! daemon stopped stays in it for the next daemon (threaded NAPI, which
//! the kernel will not switch off while the veth has no NAPI instances,
//! its service stopped), and goes once put back; one daemon owns a NIC at
//! a time; a `--state-dir` that is a file is said to be one.

mod tcp_common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use flowlane_tests::{
    flowlane_bin, kill_and_reap, require_root, terminate, text, threaded, wait_within, Bed,
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

/// The daemon's command line in the bed's namespace, state in `state`.
fn daemon_command(bed: &Bed, dir: &Path, state: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &bed.ns])
        .arg(flowlane_bin())
        .args(["daemon", "--iface", "xsk0", "--metrics", "127.0.0.1:0"])
        .args(["--socket", "none", "--run-dir"])
        .arg(dir.join("run"))
        .arg("--state-dir")
        .arg(state);
    c
}

impl Daemon {
    fn start(bed: &Bed, dir: &Path) -> Daemon {
        let mut child = daemon_command(bed, dir, &dir.join("state"))
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

    /// Its pid (`ip netns exec` execs in place).
    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// What it said of xsk0 as it started: its changes, or its notes.
    fn said(&self, what: &str) -> Vec<String> {
        self.ready["nics"][0][what]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    }

    /// SIGTERM: how it exited, and what it said it put back.
    fn stop(mut self) -> (ExitStatus, Vec<String>) {
        let mut child = self.child.take().unwrap();
        terminate(&child);
        let st = wait_within(&mut child, Duration::from_secs(20)).expect("daemon stops");
        let lines = self.rest.take().unwrap().join().unwrap();
        let done = lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == "restored")
            .flat_map(|v| v["done"].as_array().cloned().unwrap_or_default())
            .map(|d| d.as_str().unwrap_or_default().to_string())
            .collect();
        (st, done)
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

/// A directory of the test's own, named after the bed.
fn test_dir(bed: &Bed) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fl-{}", bed.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    dir
}

/// An echo server on the bed's veth, its XDP program giving it NAPI.
fn service(bed: &Bed, dir: &Path) -> App {
    let sock = dir.join("run/echo.sock");
    start(
        bed,
        &[
            "echo-server",
            "--port",
            "7",
            "--control-socket",
            sock.to_str().unwrap(),
        ],
        120,
    )
}

#[test]
fn threaded_napi_the_kernel_keeps_on_is_kept_for_the_next_daemon() {
    let test = "threaded_napi_the_kernel_keeps_on_is_kept_for_the_next_daemon";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("dleft", 2);
    let dir = test_dir(&bed);
    assert_eq!(threaded(&bed), "0", "a fresh bed has threaded NAPI off");
    let echo = service(&bed, &dir);
    let first = Daemon::start(&bed, &dir);
    assert_eq!(first.said("changes")[0], "switched threaded NAPI on xsk0");
    // The service stops: its XDP program detached, the veth has no NAPI
    // instances, and the kernel keeps threaded NAPI on (for those made
    // next) but will not switch it off.
    echo.stop();
    let (st, done) = first.stop();
    assert_eq!(st.code(), Some(1), "something is left: {done:?}");
    let left = done.last().cloned().unwrap_or_default();
    assert!(
        done.iter().any(|l| l.starts_with(
            "threaded NAPI left on: xsk0 has no NAPI instances now (a veth has them only while \
             an XDP program is attached)"
        )) && left.starts_with("xsk0 is not all put back (threaded NAPI on): kept in "),
        "{done:?}"
    );
    assert_eq!(threaded(&bed), "1");
    assert_eq!(state_files(&dir).len(), 1, "kept: what is left to put back");

    // The next service gets NAPI threads again; the next daemon takes the
    // originals kept and puts them back as it stops.
    let echo = service(&bed, &dir);
    let second = Daemon::start(&bed, &dir);
    assert!(
        second
            .said("notes")
            .iter()
            .any(|n| n.starts_with("took xsk0's originals from ")),
        "{:?}",
        second.ready
    );
    let (st, done) = second.stop();
    assert!(st.success(), "{st} {done:?}");
    assert!(
        done.iter()
            .any(|l| l == "switched threaded NAPI off on xsk0"),
        "{done:?}"
    );
    assert_eq!(threaded(&bed), "0", "back as before the first daemon");
    assert!(state_files(&dir).is_empty(), "removed once put back");
    echo.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_daemon_owns_a_nic_and_its_state_dir_is_a_directory() {
    let test = "one_daemon_owns_a_nic_and_its_state_dir_is_a_directory";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("dlock", 1);
    let dir = test_dir(&bed);
    let first = Daemon::start(&bed, &dir);
    let refused = |state: &Path| {
        let o = daemon_command(&bed, &dir, state)
            .output()
            .expect("flowlane daemon");
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).trim_end().to_string();
        assert_eq!(err.lines().count(), 1, "{}", text(&o));
        err
    };
    // A second daemon, the same --state-dir or another: refused, naming
    // the first.
    for state in [dir.join("state"), dir.join("another-state")] {
        let err = refused(&state);
        assert!(
            err.contains(&format!(
                "another daemon (pid {}) owns xsk0: one daemon owns a NIC at a time",
                first.pid()
            )),
            "{err}"
        );
    }
    let (st, done) = first.stop();
    assert!(st.success(), "{st} {done:?}");
    // The NIC free, a --state-dir that is a file.
    let file = dir.join("not-a-dir");
    std::fs::write(&file, "x\n").unwrap();
    let err = refused(&file);
    assert!(
        err.contains(&format!(
            "--state-dir {} is not a directory: give --state-dir a directory",
            file.display()
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
