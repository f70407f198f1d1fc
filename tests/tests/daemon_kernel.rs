//! A service on kernel sockets (`--backend kernel`) has a control socket
//! like an AF_XDP one: it registers with the daemon, shows on the metrics
//! page (backend `kernel`, only the series kernel sockets let it count),
//! in `flowlane status`, and answers hints for the connections it holds
//! with the core holding each; it refuses bucket moves. Against a real
//! daemon, a real bed and a kernel client in the peer namespace.

mod tcp_common;

use std::io::{BufRead, BufReader};

use flowlane_tests::{
    dashboard_queries, flowlane, flowlane_metric_names, kill_and_reap, metrics_page, require_root,
    text, within_10s, Bed, PanelQuery, TestDaemon, KERNEL_SOCKETS_PANEL,
};
use serde_json::Value;
use tcp_common::*;

/// A kernel client in the peer namespace: one connection to the echo
/// server, one byte echoed, then its local port printed; it holds the
/// connection until killed.
const HOLD: &str = r#"
import socket, sys, time
s = socket.create_connection(("10.99.0.1", 7))
s.sendall(b"x")
assert s.recv(1) == b"x"
print(s.getsockname()[1], flush=True)
time.sleep(60)
"#;

#[test]
fn a_kernel_socket_service_registers_reports_and_answers_hints() {
    if !require_root("a_kernel_socket_service_registers_reports_and_answers_hints") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("fl-dkernel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let empty = dir.join("run");
    std::fs::create_dir_all(&empty).unwrap();
    let daemon_sock = dir.join("daemon.sock");
    let own = dir.join("echo.sock");
    let daemon = TestDaemon::start(&empty, &daemon_sock);
    let addr = daemon.metrics.clone();

    let bed = Bed::up("dkern", 2);
    let echo = start(
        &bed,
        &[
            "echo-server",
            "--backend",
            "kernel",
            "--queues",
            "2",
            "--port",
            "7",
            "--control-socket",
            own.to_str().unwrap(),
            "--daemon-socket",
            daemon_sock.to_str().unwrap(),
        ],
        120,
    );

    // Registered: on the page as a kernel-socket service, one series per
    // core of what it counts, none of what only flowlane's TCP knows.
    let info = within_10s(|| {
        metrics_page(&addr)
            .lines()
            .find(|l| l.starts_with("flowlane_service_info{service=\"echo-server\""))
            .map(str::to_string)
    })
    .expect("the service registered and shows on the page");
    assert!(info.contains(r#"backend="kernel""#), "{info}");
    assert!(info.contains(r#"iface="*""#), "{info}");

    // One connection from the kernel client: the hint names the core that
    // holds it, and that core's counters show it.
    let mut client = peer_py_spawn(&bed, 60, HOLD, &[]);
    let mut port = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let port = port.trim().to_string();
    assert!(port.parse::<u16>().is_ok(), "client's port: {port:?}");
    let hint = |sport: &str| {
        flowlane(&[
            "hint",
            "--daemon",
            "--daemon-socket",
            daemon_sock.to_str().unwrap(),
            "--src",
            "10.99.0.2",
            "--sport",
            sport,
            "--dst",
            "10.99.0.1",
            "--dport",
            "7",
            "--proto",
            "tcp",
            "--json",
        ])
    };
    let o = hint(&port);
    assert!(o.status.success(), "{}", text(&o));
    let h: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(h["backend"], "kernel", "{h}");
    assert_eq!(h["service"], "echo-server", "{h}");
    assert!(h["hash"].is_null() && h["bucket"].is_null(), "{h}");
    let queue = h["queue"].as_u64().expect("a core") as usize;
    assert!(queue < 2, "{h}");

    let per_core = within_10s(|| {
        let o = flowlane(&[
            "status",
            "--json",
            "--run-dir",
            empty.to_str().unwrap(),
            "--daemon-socket",
            daemon_sock.to_str().unwrap(),
        ]);
        let st: Value = serde_json::from_slice(&o.stdout).ok()?;
        let s = st["services"].as_array()?.first()?.clone();
        let conns: Vec<u64> = s["queues"]
            .as_array()?
            .iter()
            .map(|q| q["connections"].as_u64().unwrap_or(0))
            .collect();
        (conns.iter().sum::<u64>() == 1).then_some((s, conns))
    });
    let (service, conns) = per_core.expect("status shows the connection");
    assert_eq!(service["backend"], "kernel", "{service}");
    assert_eq!(conns[queue], 1, "the hinted core holds it: {service}");

    // The page as of a core's report after the echo: a core reports every
    // 100 ms, and a report can fall between the pass that accepted the
    // connection and the one that read its byte (the count then shows,
    // the receive buffer's peak not yet: CI saw it once).
    let page_now = within_10s(|| {
        let p = metrics_page(&addr);
        p.lines()
            .any(|l| {
                l.starts_with("flowlane_tcp_memory_peak_bytes{service=\"echo-server\"")
                    && l.contains(&format!("queue=\"{queue}\""))
                    && l.contains(r#"direction="receive""#)
                    && !l.ends_with(" 0")
            })
            .then_some(p)
    })
    .unwrap_or_else(|| {
        panic!(
            "no receive memory peak for queue {queue}: {}",
            metrics_page(&addr)
        )
    });
    let live = page_now
        .lines()
        .find(|l| {
            l.starts_with("flowlane_tcp_connections{service=\"echo-server\"")
                && l.contains(&format!("queue=\"{queue}\""))
                && l.contains(r#"state="open""#)
        })
        .unwrap_or_else(|| panic!("{page_now}"));
    assert!(live.ends_with(" 1"), "{live}");
    // The core's buffer memory: the echoed byte took one 64 KiB receive
    // buffer on the hinted core (its peak), none on the other; no waits.
    let series = |name: &str, q: usize, dir: &str| {
        page_now
            .lines()
            .find(|l| {
                l.starts_with(&format!("{name}{{service=\"echo-server\""))
                    && l.contains(&format!("queue=\"{q}\""))
                    && l.contains(&format!("direction=\"{dir}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{name} {q} {dir}: {page_now}"))
    };
    assert_eq!(
        series("flowlane_tcp_memory_peak_bytes", queue, "receive"),
        "65536"
    );
    assert_eq!(
        series("flowlane_tcp_memory_peak_bytes", 1 - queue, "receive"),
        "0"
    );
    assert_eq!(
        series("flowlane_tcp_memory_waits_total", queue, "receive"),
        "0"
    );
    assert_eq!(
        series("flowlane_tcp_memory_waits_total", queue, "send"),
        "0"
    );
    // The dashboards' panels of what only kernel sockets export name
    // series of this page (daemon_metrics.rs checks the others').
    let (queries, _) = dashboard_queries();
    let kernel_only: Vec<&PanelQuery> =
        queries.iter().filter(|q| q.kernel_sockets_only()).collect();
    assert!(!kernel_only.is_empty(), "no {KERNEL_SOCKETS_PANEL:?} panel");
    for q in kernel_only {
        for name in flowlane_metric_names(&q.expr) {
            assert!(
                page_now
                    .lines()
                    .any(|l| l.starts_with(&format!("{name}{{service=\"echo-server\""))),
                "{} / {}: {name} is not on a kernel-socket service's page: {page_now}",
                q.file,
                q.panel
            );
        }
    }
    assert!(
        !page_now
            .lines()
            .any(|l| l.starts_with("flowlane_tcp_segments_received_total{service=\"echo-server\"")),
        "segments are flowlane TCP's count, not shown for kernel sockets"
    );

    // A flow no core holds: one line saying why, a non-zero exit.
    let other = if port == "1" { "2" } else { "1" };
    let o = hint(other);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("holds no connection from"),
        "{}",
        text(&o)
    );

    // No buckets to move.
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
    assert!(!o.status.success());
    assert!(text(&o).contains("no RSS buckets to move"), "{}", text(&o));

    kill_and_reap(&mut client);
    let lines = echo.stop();
    let summary = lines
        .iter()
        .find(|l| l["event"] == "summary")
        .expect("a summary");
    let cores = summary["counters"]["queues"].as_array().expect("cores");
    let core = cores
        .iter()
        .find(|c| c["queue"] == queue as u64)
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(core["tcp"]["rx_memory_peak"], 65536, "{summary}");
    assert_eq!(core["tcp"]["rx_memory_waits"], 0, "{summary}");
    assert_eq!(
        summary["counters"]["total"]["tx_memory_waits"], 0,
        "{summary}"
    );
    assert!(!own.exists(), "the control socket goes with the service");
    let gone = within_10s(|| {
        (!metrics_page(&addr).contains("flowlane_service_info{service=\"echo-server\""))
            .then_some(())
    });
    assert!(gone.is_some(), "the stopped service left the page");

    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
