//! A reader without the services' privileges is told so: `flowlane status`
//! and `flowlane daemon` run as `nobody` (through `setpriv`) against a
//! root-owned service socket (mode 0600, as services make theirs) say, in
//! one line, that the socket refused them and what to do, instead of
//! showing no service at all.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use flowlane_tests::{
    as_nobody, flowlane_bin, metrics_page, ready_line, require_root, text, OpenDir,
};

/// A service's socket, root's alone: bound and listening, mode 0600.
fn root_socket(dir: &OpenDir) -> (UnixListener, PathBuf) {
    let path = dir.0.join("svc.4242.sock");
    let l = UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (l, path)
}

#[test]
fn status_without_the_services_privileges_says_so_in_one_line() {
    let test = "status_without_the_services_privileges_says_so_in_one_line";
    if !require_root(test) {
        return;
    }
    let run = OpenDir::new("fl-unpriv-run");
    let (_listener, sock) = root_socket(&run);
    let args = [
        "status",
        "--run-dir",
        run.0.to_str().unwrap(),
        "--daemon-socket",
        "/nonexistent/daemon.sock",
    ];
    let o = as_nobody(&args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(err.lines().count(), 1, "{}", text(&o));
    assert!(
        err.contains("permission denied on 1 service socket")
            && err.contains(sock.to_str().unwrap())
            && err.contains("run this as that user"),
        "{}",
        text(&o)
    );
    // The JSON screen names the socket too, and fails the same way.
    let mut json = args.to_vec();
    json.push("--json");
    let o = as_nobody(&json).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON screen");
    assert_eq!(v["refused"][0], sock.to_str().unwrap(), "{v}");
    // Root reads it: no such line (the socket answers nothing useful, so
    // it is listed as unanswered, not refused).
    let o = Command::new(flowlane_bin()).args(args).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_daemon_without_the_services_privileges_says_so_once() {
    let test = "a_daemon_without_the_services_privileges_says_so_once";
    if !require_root(test) {
        return;
    }
    let run = OpenDir::new("fl-unpriv-drun");
    let own = OpenDir::new("fl-unpriv-dsock");
    std::fs::set_permissions(&own.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (_listener, sock) = root_socket(&run);
    let mut daemon = as_nobody(&[
        "daemon",
        "--metrics",
        "127.0.0.1:0",
        "--run-dir",
        run.0.to_str().unwrap(),
        "--socket",
        own.0.join("daemon.sock").to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("flowlane daemon");
    let (ready, _) = ready_line(&mut daemon);
    let addr = ready["metrics"]
        .as_str()
        .expect("metrics address")
        .to_string();
    // Three scrapes: the line comes once.
    for _ in 0..3 {
        assert!(metrics_page(&addr).contains("flowlane_daemon_services 0\n"));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    let out = daemon.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("permission denied on 1 service socket"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(sock.to_str().unwrap()), "{err}");
}
