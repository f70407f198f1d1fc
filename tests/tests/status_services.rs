//! What `flowlane status` says of the sockets in a run directory: a
//! daemon's socket there (a daemon in a bed's namespace given the host's
//! run directory) is no service, not one that did not answer; a service
//! that answers with an error is said to have, with its error, not to be
//! silent; and each service is named by the pid this host sees it by
//! (SO_PEERCRED, as the daemon's metrics do), not the one it calls itself
//! in a PID namespace of its own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flowlane_dataplane::control_socket::{ControlSocket, Request, Response};
use flowlane_tests::{flowlane, text, OpenDir, TestDaemon};

/// A service at `path` answering a status request with `status`, polled
/// as a service polls its socket until `stop`.
fn service(path: &Path, status: Response, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let mut sock = ControlSocket::bind(path).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            sock.poll(|r| match r {
                Request::Status => status.clone(),
                _ => Response::Error {
                    message: "not asked in this test".into(),
                },
            });
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

/// `flowlane status --json` of `run` alone (the daemon not asked).
fn status(run: &Path) -> (std::process::Output, serde_json::Value) {
    let o = flowlane(&[
        "status",
        "--run-dir",
        run.to_str().unwrap(),
        "--daemon-socket",
        "none",
        "--json",
    ]);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    (o, v)
}

#[test]
fn status_tells_daemons_errors_and_pids_apart() {
    let run = OpenDir::new("fl-status-run");
    let elsewhere = OpenDir::new("fl-status-own");
    let daemon_sock: PathBuf = run.path("daemon-ns.sock");
    let daemon = TestDaemon::start(&elsewhere.0, &daemon_sock);
    let stop = Arc::new(AtomicBool::new(false));
    // A service in a PID namespace of its own calls itself pid 1.
    let named: Response = serde_json::from_str(concat!(
        r#"{"result":"status","service":"echo-server","pid":1,"uptime_ns":1,"#,
        r#""backend":"kernel","iface":"xsk0","rebalance":"off","table":[],"queues":[],"#,
        r#""moves":{"done":0,"failed":0,"recent":[]}}"#
    ))
    .unwrap();
    let svc = service(&run.path("echo.1.sock"), named, stop.clone());

    // The daemon's socket is no service: the screen is whole.
    let (o, v) = status(&run.0);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(v["unanswered"], serde_json::json!([]), "{v}");
    assert_eq!(v["services"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(
        v["services"][0]["pid"],
        std::process::id(),
        "the pid this host sees: {v}"
    );

    // A service that answers with an error: said so, with the error.
    let refusing = Response::Error {
        message: "busy: ask again".into(),
    };
    let sock = run.path("busy.2.sock");
    let busy = service(&sock, refusing, stop.clone());
    let (o, v) = status(&run.0);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{}", text(&o));
    assert!(
        err.contains(&format!(
            "1 service answered with an error ({}: busy: ask again): not on the screen",
            sock.display()
        )) && !err.contains("no answer"),
        "{err}"
    );
    assert_eq!(v["errors"][0]["error"], "busy: ask again", "{v}");
    assert_eq!(v["unanswered"], serde_json::json!([]), "{v}");

    stop.store(true, Ordering::Relaxed);
    svc.join().unwrap();
    busy.join().unwrap();
    daemon.stop();
}
