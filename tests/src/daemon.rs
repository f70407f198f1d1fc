//! `flowlane daemon` started for a test: its metrics on a free local
//! port, the services it reads from a run directory of the test's own,
//! its socket where the test says; killed if the test fails before
//! stopping it (it would otherwise keep the harness's stderr open).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::{flowlane_bin, kill_and_reap, terminate, wait_within};

/// A running daemon.
#[derive(Debug)]
pub struct TestDaemon {
    child: Child,
    /// Where its metrics page is served (`host:port`).
    pub metrics: String,
    /// Its ready line.
    pub ready: Value,
}

impl TestDaemon {
    /// Starts `flowlane daemon --metrics 127.0.0.1:0 --run-dir RUN_DIR
    /// --socket SOCKET` and waits for its ready line.
    pub fn start(run_dir: &Path, socket: &Path) -> TestDaemon {
        TestDaemon::start_with(run_dir, socket, &[])
    }

    /// [`TestDaemon::start`] with more flags (`--scrape-timeout-ms N`...).
    pub fn start_with(run_dir: &Path, socket: &Path, flags: &[&str]) -> TestDaemon {
        let mut child = Command::new(flowlane_bin())
            .args(["daemon", "--metrics", "127.0.0.1:0", "--run-dir"])
            .arg(run_dir)
            .arg("--socket")
            .arg(socket)
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("flowlane daemon");
        // Its stdout closed after the ready line: what it prints next
        // goes to a closed pipe, which it must bear.
        let (ready, _) = ready_line(&mut child);
        let metrics = ready["metrics"]
            .as_str()
            .expect("metrics address")
            .to_string();
        TestDaemon {
            child,
            metrics,
            ready,
        }
    }

    /// SIGTERM; asserts that it exits cleanly within 20 s.
    pub fn stop(self) {
        self.stop_within(Duration::from_secs(20));
    }

    /// SIGTERM; asserts that it exits cleanly within `limit`; returns how
    /// long it took.
    pub fn stop_within(mut self, limit: Duration) -> Duration {
        let began = std::time::Instant::now();
        terminate(&self.child);
        let st = wait_within(&mut self.child, limit);
        assert!(
            st.is_some_and(|s| s.success()),
            "the daemon stopped cleanly: {st:?}"
        );
        began.elapsed()
    }

    /// Its threads now (`/proc/PID/task`).
    pub fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.child.id())).map_or(0, |d| d.count())
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

/// Reads the ready line of a daemon spawned with its stdout piped (its
/// first line, JSON with `"event": "ready"`); kills it and fails the test
/// if it is not one. Returns the line and the rest of its stdout.
pub fn ready_line(child: &mut Child) -> (Value, BufReader<ChildStdout>) {
    let mut out = BufReader::new(child.stdout.take().expect("stdout piped"));
    let mut line = String::new();
    let read = out.read_line(&mut line);
    let ready = serde_json::from_str::<Value>(&line)
        .ok()
        .filter(|v| v["event"] == "ready");
    match (read, ready) {
        (Ok(_), Some(ready)) => (ready, out),
        (read, _) => {
            kill_and_reap(child);
            panic!("no ready line from the daemon ({read:?}): {line:?}")
        }
    }
}

/// The daemon's metrics page at `addr` (empty when it did not answer
/// within 10 s), as a scraper reads it: over HTTP, with curl.
pub fn metrics_page(addr: &str) -> String {
    let o = std::process::Command::new("curl")
        .args(["-s", "-m", "10", &format!("http://{addr}/metrics")])
        .output()
        .expect("running curl");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Polls `f` every 100 ms for at most 10 s until it returns Some (a page
/// the daemon serves follows what it reads on its next scrape).
pub fn within_10s<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
