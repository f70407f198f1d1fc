//! The one harness of flowlane's integration tests (this crate's `tests/`
//! and flowlane-ttcp's): the root check, the `flowlane` binary, uniquely
//! named test beds that remove themselves ([`bed`]), and child processes
//! with a deadline ([`child`]), so that a stall fails a test instead of
//! hanging it.
//!
//! Tests that need root (namespaces, BPF, AF_XDP) call [`require_root`]
//! first and skip with a printed reason otherwise; CI runs as root.

#![forbid(unsafe_code)]

pub mod bed;
pub mod child;

pub use bed::{start_udp_echo, unique_name, xdp_attached, Bed, ToolBed};
pub use child::{kill_and_reap, ready_within, stop, terminate, wait_bounded, wait_within};

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
