//! The daemon's registry against real services: two flowlane services on
//! two beds announce their control sockets (kept outside the daemon's run
//! directory) to the daemon's socket; both show on its metrics page; one
//! stopped cleanly and one killed with SIGKILL (its socket file left
//! behind, answering nothing) both leave it. A daemon restarted finds
//! them again: services announce themselves every few seconds.

mod tcp_common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use flowlane_tests::{flowlane_bin, metrics_page, require_root, Bed, TestDaemon};
use serde_json::Value;
use tcp_common::*;

/// The services on the page, as `service/pid`.
fn services_on(addr: &str) -> Vec<String> {
    let mut v: Vec<String> = metrics_page(addr)
        .lines()
        .filter_map(|l| l.strip_prefix("flowlane_service_info{service=\""))
        .filter_map(|l| {
            let (service, rest) = l.split_once('"')?;
            let pid = rest.split("pid=\"").nth(1)?.split('"').next()?;
            Some(format!("{service}/{pid}"))
        })
        .collect();
    v.sort();
    v
}

/// Waits (at most 10 s) until the page lists exactly `want` services.
fn until_services(addr: &str, want: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = services_on(addr);
        if now.len() == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_service(bed: &Bed, dir: &Path, cmd: &str, port: &str) -> App {
    let own = dir.join(format!("{cmd}.sock"));
    start(
        bed,
        &[
            cmd,
            "--port",
            port,
            "--control-socket",
            own.to_str().unwrap(),
            "--daemon-socket",
            dir.join("daemon.sock").to_str().unwrap(),
        ],
        120,
    )
}

#[test]
fn services_register_and_leave_the_registry_when_stopped_or_killed() {
    if !require_root("services_register_and_leave_the_registry_when_stopped_or_killed") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("fl-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let empty = dir.join("run");
    std::fs::create_dir_all(&empty).unwrap();
    // The daemon looks for services in an empty run directory: it can only
    // learn of them by their registration.
    let daemon = TestDaemon::start(&empty, &dir.join("daemon.sock"));
    let addr = daemon.metrics.clone();
    assert!(services_on(&addr).is_empty());

    let (bed_a, bed_b) = (Bed::up("rega", 2), Bed::up("regb", 2));
    let echo = start_service(&bed_a, &dir, "echo-server", "7");
    let sink = start_service(&bed_b, &dir, "bulk-sink", "5001");
    let both = until_services(&addr, 2);
    assert_eq!(both.len(), 2, "both registered: {both:?}");
    assert!(
        both.iter().any(|s| s.starts_with("echo-server/")),
        "{both:?}"
    );
    assert!(both.iter().any(|s| s.starts_with("bulk-sink/")), "{both:?}");
    // `flowlane status` finds them through the daemon too.
    let o = Command::new(flowlane_bin())
        .args(["status", "--json", "--run-dir"])
        .arg(&empty)
        .arg("--daemon-socket")
        .arg(dir.join("daemon.sock"))
        .output()
        .unwrap();
    let st: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut names: Vec<&str> = st["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["service"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["bulk-sink", "echo-server"], "{st}");

    // A daemon restarted knows nothing; the services announce themselves
    // again every few seconds and are back on its page.
    daemon.stop();
    let daemon = TestDaemon::start(&empty, &dir.join("daemon.sock"));
    let addr = daemon.metrics.clone();
    let again = until_services(&addr, 2);
    assert_eq!(again, both, "registered again after the daemon's restart");

    // Stopped cleanly: its socket goes with it.
    let lines = echo.stop();
    assert!(lines.iter().any(|l| l["event"] == "summary"));
    let one = until_services(&addr, 1);
    assert_eq!(one.len(), 1, "{one:?}");
    assert!(one[0].starts_with("bulk-sink/"));

    // Killed: its socket file stays, nothing answers on it.
    sink.kill();
    assert!(
        dir.join("bulk-sink.sock").exists(),
        "a killed service leaves its socket"
    );
    let none = until_services(&addr, 0);
    assert!(none.is_empty(), "{none:?}");

    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
