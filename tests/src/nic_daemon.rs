//! `flowlane daemon --iface xsk0` owning a test bed's veth (run in the
//! bed's namespace), and the directory of a test's own it works in: what
//! the tests of the daemon's NIC plan, its put-back and its state files
//! share.

use std::ffi::OsStr;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use crate::daemon::ready_line;
use crate::{flowlane_bin, kill_and_reap, terminate, wait_within, Bed, OpenDir};

/// A directory of a test's own (uniquely named, removed when dropped):
/// `run/`, the run directory where services put their control sockets,
/// and `state/`, for the daemon's state files.
#[derive(Debug)]
pub struct NicDir {
    dir: OpenDir,
    echo_sock: String,
}

impl NicDir {
    /// Made under the temporary directory, named after `tag`, with `run/`.
    pub fn new(tag: &str) -> NicDir {
        let dir = OpenDir::new(tag);
        std::fs::create_dir_all(dir.path("run")).expect("the run directory");
        let echo_sock = dir.path("run/echo.sock").to_string_lossy().into_owned();
        NicDir { dir, echo_sock }
    }

    /// `name` in it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path(name)
    }

    /// The run directory (`run/`).
    pub fn run(&self) -> PathBuf {
        self.path("run")
    }

    /// The state files in `state/`.
    pub fn state_files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.path("state"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    /// The flags of a daemon kept to this directory: no socket, `run/`
    /// its run directory, `state` its state directory.
    pub fn daemon_flags(&self, state: &Path) -> Vec<PathBuf> {
        let run = self.run();
        ["--socket", "none", "--run-dir"]
            .map(PathBuf::from)
            .into_iter()
            .chain([run, "--state-dir".into(), state.to_path_buf()])
            .collect()
    }

    /// The arguments of an echo server on port 7 whose control socket is
    /// `run/echo.sock`, where the daemon's registry finds it.
    pub fn echo_server(&self) -> [&str; 5] {
        [
            "echo-server",
            "--port",
            "7",
            "--control-socket",
            &self.echo_sock,
        ]
    }
}

/// `flowlane daemon --iface xsk0` in a bed's namespace, stopped with
/// SIGTERM, or SIGKILL as a crash; killed if the test fails first.
#[derive(Debug)]
pub struct NicDaemon {
    child: Option<Child>,
    /// Its ready line.
    pub ready: Value,
    /// The lines it prints after the ready line (read until it exits).
    rest: Option<JoinHandle<Vec<String>>>,
}

impl NicDaemon {
    /// `ip netns exec NS flowlane daemon --iface xsk0 --metrics
    /// 127.0.0.1:0 FLAGS...` for `bed`'s namespace.
    pub fn command<S: AsRef<OsStr>>(bed: &Bed, flags: &[S]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &bed.ns])
            .arg(flowlane_bin())
            .args(["daemon", "--iface", "xsk0", "--metrics", "127.0.0.1:0"])
            .args(flags);
        c
    }

    /// Starts [`NicDaemon::command`] and waits for its ready line.
    pub fn start<S: AsRef<OsStr>>(bed: &Bed, flags: &[S]) -> NicDaemon {
        let mut child = NicDaemon::command(bed, flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("flowlane daemon");
        let (ready, out) = ready_line(&mut child);
        let rest =
            std::thread::spawn(move || out.lines().map_while(Result::ok).collect::<Vec<String>>());
        NicDaemon {
            child: Some(child),
            ready,
            rest: Some(rest),
        }
    }

    /// [`NicDaemon::start`] kept to `dir`: no socket, `dir`'s `run/` and
    /// `state/` its run and state directories.
    pub fn start_in(bed: &Bed, dir: &NicDir) -> NicDaemon {
        NicDaemon::start(bed, &dir.daemon_flags(&dir.path("state")))
    }

    /// Its pid (`ip netns exec` execs in place).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What it said of xsk0 as it started: `"changes"` or `"notes"`.
    pub fn said(&self, what: &str) -> Vec<String> {
        self.ready["nics"][0][what]
            .as_array()
            .unwrap_or_else(|| panic!("no {what} in {}", self.ready))
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    }

    /// SIGKILL, as a crash: nothing put back.
    pub fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM: how it exited (within 20 s), and the JSON lines it printed
    /// after the ready line.
    pub fn stop(mut self) -> (ExitStatus, Vec<Value>) {
        let mut child = self.child.take().expect("running");
        terminate(&child);
        let st = wait_within(&mut child, Duration::from_secs(20)).expect("daemon stops");
        let lines = self
            .rest
            .take()
            .expect("read")
            .join()
            .unwrap()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        (st, lines)
    }

    /// [`NicDaemon::stop`], asserting a clean exit.
    pub fn stop_cleanly(self) -> Vec<Value> {
        let (st, lines) = self.stop();
        assert!(st.success(), "daemon exited with {st}: {lines:?}");
        lines
    }
}

impl Drop for NicDaemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_reap(&mut c);
        }
    }
}

/// What a daemon's `restored` lines (of [`NicDaemon::stop`]) say it put
/// back, in order.
pub fn put_back(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|v| v["event"] == "restored")
        .flat_map(|v| v["done"].as_array().cloned().unwrap_or_default())
        .map(|d| d.as_str().unwrap_or_default().to_string())
        .collect()
}
