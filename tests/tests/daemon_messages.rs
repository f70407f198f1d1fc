//! What `flowlane daemon`, `flowlane status`, `flowlane hint --daemon` and
//! `flowlane rebalance status` say when something is wrong: one line, the
//! daemon's own flags (it has no `--bed` and no `--control-socket`), an OS
//! error once, a socket that refuses this user said to be root's (not "is
//! it running?"), and a screen that could not be read whole is a failing
//! exit, the JSON saying what the text says.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Output;

use flowlane_tests::{as_nobody, flowlane, require_root, text, OpenDir, TestDaemon};

/// A socket that takes connections and never answers (a stopped service,
/// or daemon), root's alone as flowlane's are.
fn silent_socket(path: &Path) -> UnixListener {
    let l = UnixListener::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    l
}

/// `args` as the `&str`s the runners take.
fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Its stderr, asserted to be one line.
fn one_line(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).trim_end().to_string();
    assert_eq!(err.lines().count(), 1, "{}", text(o));
    err
}

#[test]
fn the_daemon_s_errors_name_its_own_flags_once() {
    // An interface not in this namespace: run the daemon in the bed's
    // namespace (it has no --bed).
    let o = flowlane(&[
        "daemon",
        "--iface",
        "flnosuch0",
        "--metrics",
        "127.0.0.1:0",
        "--socket",
        "none",
    ]);
    let err = one_line(&o);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("no interface flnosuch0")
            && err.contains("ip netns exec flowlane-NAME flowlane daemon")
            && !err.contains("--bed"),
        "{err}"
    );
    // A path that is not a socket, and one another daemon answers on:
    // --socket, once, never the services' --control-socket.
    let dir = OpenDir::new("fl-dmsg");
    let sock = dir.path("daemon.sock");
    let first = TestDaemon::start(&dir.path("run"), &sock);
    for path in ["/etc/passwd", sock.to_str().unwrap()] {
        let o = flowlane(&[
            "daemon",
            "--metrics",
            "127.0.0.1:0",
            "--run-dir",
            dir.path("run").to_str().unwrap(),
            "--socket",
            path,
        ]);
        let err = one_line(&o);
        assert!(!o.status.success());
        assert_eq!(err.matches("--socket").count(), 1, "{err}");
        assert!(!err.contains("--control-socket"), "{err}");
    }
    drop(first);
    // An address not this host's (TEST-NET-1, RFC 5737): the OS error
    // once, and no guess at another exporter (that is for an address in
    // use).
    let o = flowlane(&[
        "daemon",
        "--metrics",
        "192.0.2.55:19479",
        "--socket",
        "none",
    ]);
    let err = one_line(&o);
    assert_eq!(err.matches("os error 99").count(), 1, "{err}");
    assert!(!err.contains("another daemon"), "{err}");
}

#[test]
fn status_says_what_it_could_not_read_and_fails() {
    let test = "status_says_what_it_could_not_read_and_fails";
    if !require_root(test) {
        return;
    }
    let dir = OpenDir::new("fl-dstatus");
    let run = dir.path("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let daemon = dir.path("daemon.sock");
    let _daemon = silent_socket(&daemon);
    let _stopped = silent_socket(&run.join("svc.4242.sock"));
    let args = |json: bool| {
        let mut a = vec![
            "status".to_string(),
            "--run-dir".into(),
            run.to_str().unwrap().into(),
            "--daemon-socket".into(),
            daemon.to_str().unwrap().into(),
        ];
        if json {
            a.push("--json".into());
        }
        a
    };

    // Not root: the daemon runs (its socket refuses this user), in the text
    // and the JSON alike; the service refused is no "none running"; the
    // daemon's socket is not called a service's; the exit says the screen
    // is incomplete.
    let o = as_nobody(&strs(&args(false))).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("daemon    running, its socket"), "{out}");
    assert!(!out.contains("none running"), "{out}");
    let err = one_line(&o);
    assert!(
        err.contains("permission denied on the daemon's socket")
            && err.contains("permission denied on 1 service socket (")
            && !err.contains(&format!("service socket ({}", daemon.display())),
        "{err}"
    );
    let o = as_nobody(&strs(&args(true))).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON screen");
    assert_eq!(v["daemon"]["running"], true, "{v}");
    assert_eq!(v["daemon"]["refused"], true, "{v}");

    // Root: nothing answers (a stopped daemon and service): listed, and the
    // exit fails, as the screen lacks them.
    for json in [false, true] {
        let o = flowlane(&strs(&args(json)));
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = one_line(&o);
        assert!(err.contains("no answer from 1 service ("), "{err}");
    }

    // --daemon-socket none: the daemon is not asked, said so.
    let o = flowlane(&[
        "status",
        "--run-dir",
        "/nonexistent",
        "--daemon-socket",
        "none",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("daemon    not asked (--daemon-socket none)") && !out.contains("on none"),
        "{out}"
    );
}

#[test]
fn a_socket_that_refuses_this_user_is_said_to_be_its_owner_s() {
    let test = "a_socket_that_refuses_this_user_is_said_to_be_its_owner_s";
    if !require_root(test) {
        return;
    }
    let dir = OpenDir::new("fl-drefuse");
    let sock = dir.path("root.sock");
    let _l = silent_socket(&sock);
    let sock = sock.to_str().unwrap();
    let o = as_nobody(&[
        "hint",
        "--daemon",
        "--daemon-socket",
        sock,
        "--src",
        "10.99.0.2",
        "--sport",
        "1",
        "--dst",
        "10.99.0.1",
        "--dport",
        "7",
    ])
    .output()
    .unwrap();
    let err = one_line(&o);
    assert!(
        err.contains("permission denied on the daemon's socket") && !err.contains("running?"),
        "{err}"
    );
    let o = as_nobody(&["rebalance", "status", "--socket", sock])
        .output()
        .unwrap();
    let err = one_line(&o);
    assert!(
        err.contains("permission denied on 1 service socket") && !err.contains("running?"),
        "{err}"
    );
}

/// A flow of two families is bad usage: refused before anything is asked,
/// one line, exit 2 (not a sentence per service from the daemon).
#[test]
fn a_hint_of_two_families_is_refused_as_bad_usage() {
    let o = flowlane(&[
        "hint",
        "--daemon",
        "--daemon-socket",
        "/nonexistent/daemon.sock",
        "--src",
        "fe80::1",
        "--sport",
        "1",
        "--dst",
        "10.99.0.1",
        "--dport",
        "7",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = one_line(&o);
    assert!(err.contains("not of one family"), "{err}");
}
