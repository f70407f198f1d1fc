//! `contrib/systemd/flowlane-daemon.service`: systemd accepts it (`verify`),
//! its sandbox keeps the exposure low (`security --offline`), and the
//! command it runs starts the daemon and stops cleanly on SIGTERM; with its
//! drop-in `own-nics.conf` (the daemon owning NICs) it is still accepted and
//! gains two capabilities, no more.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_tests::{flowlane_bin, terminate, wait_within};

fn unit_text() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../contrib/systemd/flowlane-daemon.service");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The unit with its binary path pointing at the one under test, in a
/// directory of its own.
fn installed_copy(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fl-unit-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flowlane-daemon.service");
    let text = unit_text().replace("/usr/local/bin/flowlane", flowlane_bin().to_str().unwrap());
    std::fs::write(&path, text).unwrap();
    path
}

fn systemd_analyze(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("systemd-analyze").args(args).output() {
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("skipped: systemd-analyze not available ({e})");
            None
        }
    }
}

/// `systemd-analyze verify` of the unit at `u` (with the drop-ins next to
/// it) says nothing and succeeds; false when systemd-analyze is missing
/// (the test is skipped).
fn verified(u: &str) -> bool {
    let Some(o) = systemd_analyze(&["verify", u]) else {
        return false;
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && said.trim().is_empty(),
        "verify {u}: {said}"
    );
    true
}

/// The exposure level `systemd-analyze security --offline` gives the unit
/// at `u` (with the drop-ins next to it).
fn exposure(u: &str) -> f64 {
    let o = systemd_analyze(&["security", "--offline=true", u]).unwrap();
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    said.lines()
        .find_map(|l| {
            l.split("exposure level for flowlane-daemon.service: ")
                .nth(1)
        })
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level: {said}"))
}

#[test]
fn the_drop_in_that_owns_nics_adds_only_what_it_needs() {
    let unit = installed_copy("drop-in");
    let dir = unit.with_extension("service.d");
    std::fs::create_dir_all(&dir).unwrap();
    let drop_in = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../contrib/systemd/flowlane-daemon.service.d/own-nics.conf"),
    )
    .unwrap();
    std::fs::write(
        dir.join("own-nics.conf"),
        drop_in.replace("/usr/local/bin/flowlane", flowlane_bin().to_str().unwrap()),
    )
    .unwrap();
    let u = unit.to_str().unwrap();
    if !verified(u) {
        return;
    }
    let level = exposure(u);
    assert!(level <= 3.0, "exposure with the drop-in: {level}");
    assert!(drop_in.contains("\nCapabilityBoundingSet=CAP_NET_ADMIN CAP_SYS_NICE\n"));
    assert!(drop_in.contains("--config /etc/flowlane/daemon.toml"));
    let _ = std::fs::remove_dir_all(unit.parent().unwrap());
}

#[test]
fn systemd_accepts_the_unit_and_its_sandbox_is_tight() {
    let unit = installed_copy("unit");
    let u = unit.to_str().unwrap();
    if !verified(u) {
        return;
    }
    let level = exposure(u);
    assert!(level <= 2.0, "exposure {level}");
    // No capability at all: root's uid is what the sockets need.
    assert!(unit_text().contains("\nCapabilityBoundingSet=\n"));
    let _ = std::fs::remove_dir_all(unit.parent().unwrap());
}

#[test]
fn the_unit_s_command_runs_the_daemon_and_sigterm_stops_it() {
    let text = unit_text();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/flowlane"));
    // The unit's flags, with a free port and a directory of the test's.
    let dir = std::env::temp_dir().join(format!("fl-unit-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<String> = words
        .map(|w| match w {
            "127.0.0.1:9477" => "127.0.0.1:0".to_string(),
            "/run/flowlane" => dir.display().to_string(),
            "/run/flowlane-daemon/daemon.sock" => dir.join("daemon.sock").display().to_string(),
            other => other.to_string(),
        })
        .collect();
    let mut child = Command::new(flowlane_bin())
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("\"event\":\"ready\""), "{line}");
    assert!(dir.join("daemon.sock").exists());
    terminate(&child);
    let st = wait_within(&mut child, Duration::from_secs(10)).expect("stops on SIGTERM");
    assert!(st.success(), "{st}");
    assert!(!dir.join("daemon.sock").exists(), "socket left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The daemon's default state directory is the unit's runtime directory,
/// and systemd keeps it across restarts: a daemon that systemd starts again
/// after a crash (`Restart=on-failure`) finds the NICs' state files the
/// crashed one wrote, and puts their originals back (with systemd's
/// default, the directory is removed when the service stops, files and all).
#[test]
fn the_nics_state_files_outlive_a_restart() {
    let unit = unit_text();
    let runtime_dir = unit
        .lines()
        .find_map(|l| l.strip_prefix("RuntimeDirectory="))
        .expect("RuntimeDirectory=");
    assert_eq!(
        format!("/run/{runtime_dir}"),
        flowlane_daemon::nic_state::DEFAULT_STATE_DIR
    );
    assert!(
        unit.lines()
            .any(|l| l == "RuntimeDirectoryPreserve=restart"),
        "{unit}"
    );
}
