//! A stopping service is seen until it exits: through its stop's drain
//! (2 s at most, connections finishing) its control socket answers, so
//! `flowlane status` lists it as stopping and the daemon's metrics page
//! carries its series (`flowlane_service_stopping` 1, and
//! `flowlane_tcp_stop_finishing`, what the drain waits for); once it
//! exited, its socket is gone and so are its series. Its summary's
//! `finishing` is what the drain still waited for when it ended (reset
//! then): 0 when every connection finished in time. On AF_XDP and on
//! kernel sockets, against a real daemon and kernel clients in a bed's
//! peer namespace.

mod tcp_common;

use std::io::{BufRead, BufReader};
use std::path::Path;

use flowlane_tests::{flowlane, metrics_page, require_root, text, within_10s, Bed, TestDaemon};
use serde_json::Value;
use tcp_common::*;

/// A kernel client that connects to `argv[1]:argv[2]`, prints `ready`
/// and sends nothing: a connection whose first request has not come,
/// which http-server answers if it comes within the drain, so the drain
/// waits for it (`finishing`) to its end. Held 30 s at most.
const SILENT: &str = r#"
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
print('ready', flush=True)
time.sleep(30)
"#;

/// `flowlane status --json` of the run directory `run`, the daemon not
/// asked.
fn status(run: &Path) -> Value {
    let o = flowlane(&[
        "status",
        "--json",
        "--run-dir",
        run.to_str().unwrap(),
        "--daemon-socket",
        "none",
    ]);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

/// The sum of `name`'s series of http-server on `page`.
fn series_sum(page: &str, name: &str) -> Option<u64> {
    let rows: Vec<u64> = page
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{service=\"http-server\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!rows.is_empty()).then(|| rows.iter().sum())
}

/// http-server on `backend` (port `port`) stops with a silent client
/// held: listed as stopping, with its connection finishing, on the screen
/// and the page through the drain; gone after it; its summary's
/// `finishing` 1 (the drain ended waiting for that connection). Then a
/// stop whose drain finishes in time reports `finishing` 0.
fn seen_while_stopping(bed: &Bed, backend: &str, port: u16) {
    let dir = std::env::temp_dir().join(format!("fl-stopseen-{backend}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let daemon_sock = dir.join("daemon.sock");
    let own = run.join("http-server.sock");
    let daemon = TestDaemon::start(&run, &daemon_sock);
    let port = port.to_string();
    let args = [
        "http-server",
        "--backend",
        backend,
        "--port",
        &port,
        "--control-socket",
        own.to_str().unwrap(),
        "--daemon-socket",
        daemon_sock.to_str().unwrap(),
    ];
    let app = start(bed, &args, 120);
    let mut client = peer_py_spawn(bed, 60, SILENT, &["10.99.0.1", &port]);
    let mut line = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        "ready",
        "{backend}: the client did not connect"
    );
    // The service holds it before it stops.
    let held = within_10s(|| {
        let s = status(&run);
        (s["services"][0]["connections"] == 1).then_some(())
    });
    assert!(held.is_some(), "{backend}: {}", status(&run));

    let stopping = std::thread::spawn(move || app.stop());
    // Through the drain: listed, stopping, its connection finishing, on
    // the screen and on the page.
    let listed = within_10s(|| {
        let s = status(&run);
        (s["services"][0]["stopping"] == true).then_some(s)
    })
    .unwrap_or_else(|| panic!("{backend}: never listed as stopping: {}", status(&run)));
    assert_eq!(listed["services"][0]["service"], "http-server", "{listed}");
    // The drain waits for the silent connection (as the cores last
    // published: every 50 or 100 ms).
    let page = within_10s(|| {
        let p = metrics_page(&daemon.metrics);
        (series_sum(&p, "flowlane_service_stopping") == Some(1)
            && series_sum(&p, "flowlane_tcp_stop_finishing") == Some(1))
        .then_some(p)
    })
    .unwrap_or_else(|| {
        panic!(
            "{backend}: not stopping, or no connection finishing: {}",
            metrics_page(&daemon.metrics)
        )
    });
    assert!(
        page.contains("flowlane_daemon_services 1\n"),
        "{backend}: {page}"
    );
    // A bucket moved by hand now would move connections the stop is
    // about to reset: refused, saying why.
    if backend == "xdp" {
        let o = flowlane(&[
            "rebalance",
            "move",
            "--socket",
            own.to_str().unwrap(),
            "--bucket",
            "0",
            "--to-queue",
            "1",
        ]);
        assert!(
            !o.status.success() && text(&o).contains("http-server is stopping"),
            "{}",
            text(&o)
        );
    }

    let lines = stopping.join().unwrap();
    let _ = client.kill();
    let _ = client.wait();
    // Gone once it exited.
    assert!(!own.exists(), "{backend}: the control socket outlived it");
    assert_eq!(status(&run)["services"], serde_json::json!([]));
    let gone = within_10s(|| {
        let p = metrics_page(&daemon.metrics);
        p.contains("flowlane_daemon_services 0\n").then_some(())
    });
    assert!(
        gone.is_some(),
        "{backend}: still on the page after its exit"
    );
    // The drain ended waiting for the silent connection, reset then.
    let t = totals(&lines);
    assert_eq!(t["finishing"], 1, "{backend}: {t}");

    // A drain that finishes in time (idle keep-alive clients get a FIN at
    // once): nothing left finishing.
    let (t, line) = stop_beside(bed, &args, HOLD_KEEPALIVE, &["10.99.0.1", &port, "3", "20"]);
    assert_eq!(
        serde_json::from_str::<Value>(line.trim()).unwrap()["FIN"],
        3,
        "{backend}: {line}"
    );
    assert_eq!(t["finishing"], 0, "{backend}: {t}");

    // A response the stack took whole (30 kB, within its 64 KiB send
    // buffer), its handler's close made, its bytes still going to a
    // reader too slow for the drain (1 KiB every 100 ms): the drain ends
    // waiting for that close, and the stop resets it, counted in
    // `finishing` (the handler's own count was 0 by then). Kernel sockets
    // hold the whole response: the kernel sends it after the exit, then
    // its FIN, and nothing was left.
    let body = "x".repeat(30_000);
    let slow = [&args[..], &["--body", &body]].concat();
    let (t, line) = stop_beside(
        bed,
        &slow,
        SLOW_READER,
        &["10.99.0.1", &port, "0.1", "1024"],
    );
    let how: Value = serde_json::from_str(line.trim()).unwrap();
    match (how["end"].as_str(), backend) {
        (Some("RST"), _) => assert_eq!(t["finishing"], 1, "{backend}: {how} {t}"),
        (Some("FIN"), "kernel") => {
            assert_eq!(how["body"], 30_000, "{how}");
            assert_eq!(t["finishing"], 0, "{backend}: {how} {t}");
        }
        _ => panic!("{backend}: not reset at the drain's end: {how} {t}"),
    }

    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stopping_service_is_seen_until_it_exits() {
    if !require_root("a_stopping_service_is_seen_until_it_exits") {
        return;
    }
    let bed = Bed::up("stopseen", 2);
    // Ports apart: the kernel backend's TIME-WAIT holds its port against
    // an AF_XDP service's.
    seen_while_stopping(&bed, "xdp", 8191);
    seen_while_stopping(&bed, "kernel", 8192);
}

/// Starts the service (`args`) and a python client (`script`, `argv`) in
/// the bed's peer namespace, which prints `ready` once it is set, then
/// stops the service: its summary's totals, and the client's last line
/// (how its connections ended).
fn stop_beside(bed: &Bed, args: &[&str], script: &str, argv: &[&str]) -> (Value, String) {
    let app = start(bed, args, 120);
    let mut client = peer_py_spawn(bed, 60, script, argv);
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "{args:?}");
    let t = totals(&app.stop());
    line.clear();
    out.read_line(&mut line).unwrap();
    let _ = client.wait();
    (t, line)
}
