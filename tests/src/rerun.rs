//! A test run again, by its own test binary, as a child in a bed's network
//! namespace: how an integration test serves a TCP service built on the
//! libraries in-process (a handler that panics, a tokio listener dropped,
//! a kernel-socket service) while the parent drives kernel peers and reads
//! what the child says of itself, line by line, in a report file.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts this test binary again in network namespace `ns`, running the
/// one test `test` (`--ignored` too when it is marked so), with the
/// environment variable `key` set to `value`: the child's cue that it is
/// the child, and what it is told. Its output is discarded.
pub fn rerun_in_ns(ns: &str, test: &str, (key, value): (&str, &OsStr), ignored: bool) -> Child {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test]);
    if ignored {
        cmd.arg("--ignored");
    }
    cmd.env(key, value)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test binary again")
}

/// The file a child started by [`rerun_in_ns`] writes its lines to (`READY`
/// once it serves, `START <why>` when it could not start, then whatever
/// its test reads), removed when dropped.
#[derive(Debug)]
pub struct Report(pub PathBuf);

impl Report {
    /// A fresh report for `what` on bed `bed` in the temporary directory.
    pub fn new(bed: &str, what: &str) -> Report {
        let path = std::env::temp_dir().join(format!("{bed}-{what}.txt"));
        let _ = std::fs::remove_file(&path);
        Report(path)
    }

    /// The child's side: appends `line` to the report at `path`.
    pub fn say(path: &Path, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .expect("the report");
        writeln!(f, "{line}").expect("a line of the report");
    }

    /// Everything the child said so far.
    pub fn said(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }

    /// Waits (`limit` at most) until the child has said `what`: false if
    /// it did not, or said it could not start (`START`).
    pub fn wait_for(&self, what: &str, limit: Duration) -> bool {
        let t = Instant::now();
        loop {
            let said = self.said();
            if said.contains(what) {
                return true;
            }
            if said.contains("START") || t.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
