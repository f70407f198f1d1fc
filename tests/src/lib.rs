//! The one harness of flowlane's integration tests (this crate's `tests/`
//! and flowlane-ttcp's): the root check, the `flowlane` binary, uniquely
//! named test beds that remove themselves ([`bed`]), and child processes
//! with a deadline ([`child`]), so that a stall fails a test instead of
//! hanging it; the daemon started for a test ([`daemon`]), and one owning
//! a bed's NIC ([`nic_daemon`]); a script of `scripts/` run with fakes
//! ([`script_repo`]).
//!
//! Tests that need root (namespaces, BPF, AF_XDP) call [`require_root`]
//! first and skip with a printed reason otherwise; CI runs as root.

#![forbid(unsafe_code)]

pub mod bed;
pub mod child;
pub mod daemon;
pub mod nic_daemon;
pub mod rerun;
pub mod script_repo;

pub use bed::{napi_threads, start_udp_echo, threaded, unique_name, xdp_attached, Bed, ToolBed};
pub use child::{kill_and_reap, ready_within, stop, terminate, wait_bounded, wait_within};
pub use daemon::{metrics_page, ready_line, within_10s, TestDaemon};
pub use nic_daemon::{put_back, NicDaemon, NicDir};
pub use rerun::{rerun_in_ns, Report};

use std::path::PathBuf;
use std::process::{Command, Output};

/// Whether the tests run as root; prints the skip reason when not.
pub fn require_root(test: &str) -> bool {
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

/// Path of the `flowlane` binary built beside the test executable.
pub fn flowlane_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/flowlane
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("flowlane");
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p flowlane-control`)",
        bin.display()
    );
    bin
}

/// Runs `flowlane <args>`.
pub fn flowlane(args: &[&str]) -> Output {
    Command::new(flowlane_bin())
        .args(args)
        .output()
        .expect("running flowlane")
}

/// `flowlane ARGS` as user `nobody` (65534), through `setpriv`: what a
/// user without the services' privileges sees.
pub fn as_nobody(args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(flowlane_bin())
        .args(args);
    c
}

/// A temporary directory (uniquely named) any user may enter and list
/// (mode 0755), for sockets and run directories a test shares with
/// [`as_nobody`]; removed when dropped.
#[derive(Debug)]
pub struct OpenDir(pub PathBuf);

impl OpenDir {
    /// Made under the temporary directory, named after `tag`.
    pub fn new(tag: &str) -> OpenDir {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(unique_name(tag));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        OpenDir(d)
    }

    /// `name` in it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for OpenDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a command inside a network namespace.
pub fn in_ns(ns: &str, cmd: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .output()
        .expect("running ip netns exec")
}

/// Output as text, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The repository's `dashboards/` directory.
pub fn dashboards_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("dashboards")
}

/// How the title of a panel begins whose metrics only a service on kernel
/// sockets (`--backend kernel`) exports: `daemon_metrics.rs`, whose
/// service runs on AF_XDP, leaves such panels to `daemon_kernel.rs`.
pub const KERNEL_SOCKETS_PANEL: &str = "Kernel sockets: ";

/// How the title of a panel begins whose metrics only a service whose
/// rebalancing loop runs exports (the learned move price):
/// `daemon_metrics.rs`, whose service runs with its loop off (its moves
/// are made by hand and counted), leaves such panels to `dashboards.rs`,
/// which checks that their queries parse and name families the daemon
/// exports.
pub const REBALANCING_LOOP_PANEL: &str = "Rebalancing loop: ";

/// One query of a Grafana dashboard panel.
#[derive(Debug, Clone)]
pub struct PanelQuery {
    /// The dashboard's file name.
    pub file: String,
    /// The panel's title.
    pub panel: String,
    /// The PromQL, with the dashboard's variables as written (`$service`,
    /// `$queue`, `$__rate_interval`).
    pub expr: String,
}

impl PanelQuery {
    /// Whether its panel shows what only a service on kernel sockets
    /// exports ([`KERNEL_SOCKETS_PANEL`]).
    pub fn kernel_sockets_only(&self) -> bool {
        self.panel.starts_with(KERNEL_SOCKETS_PANEL)
    }

    /// Whether its panel shows what only a service whose rebalancing loop
    /// runs exports ([`REBALANCING_LOOP_PANEL`]).
    pub fn rebalancing_loop_only(&self) -> bool {
        self.panel.starts_with(REBALANCING_LOOP_PANEL)
    }

    /// The query as Prometheus would get it with every service and queue
    /// chosen and a one-minute rate window.
    pub fn promql(&self) -> String {
        self.expr
            .replace("$__rate_interval", "1m")
            .replace("$service", ".*")
            .replace("$queue", ".*")
    }
}

/// Every panel query of every dashboard in `dashboards/grafana`, and the
/// dashboards' parsed JSON (file name, value).
pub fn dashboard_queries() -> (Vec<PanelQuery>, Vec<(String, serde_json::Value)>) {
    let dir = dashboards_dir().join("grafana");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut queries = Vec::new();
    let mut boards = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let board: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for p in board["panels"].as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                queries.push(PanelQuery {
                    file: file.clone(),
                    panel: p["title"].as_str().unwrap_or_default().to_string(),
                    expr: t["expr"].as_str().unwrap_or_default().to_string(),
                });
            }
        }
        boards.push((file, board));
    }
    (queries, boards)
}

/// The metric names (`flowlane_...`) a PromQL expression or rule file
/// refers to, sorted and without repeats.
pub fn flowlane_metric_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("flowlane_"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}
