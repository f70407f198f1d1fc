//! Queue-pair mode's counters on the daemon's metrics page: an echo
//! server in `--mode queue-pair` (on AF_XDP, then on kernel sockets)
//! registers with a real daemon, a kernel client's echo goes through the
//! network cores' relays to the application threads and back, and the
//! page's `flowlane_qp_*` series say what the service's summary line says
//! when it stops (SIGTERM). Against a real daemon, a real bed and a kernel
//! client in the peer namespace.

mod tcp_common;

use flowlane_tests::{metrics_page, require_root, within_10s, Bed, TestDaemon};
use tcp_common::*;

/// A kernel client in the peer namespace: echoes `argv[1]` bytes through
/// the echo server, 16 KiB at a time, checks them, prints `ok`.
const ECHO: &str = r#"
import socket, sys
s = socket.create_connection(("10.99.0.1", 7), timeout=30)
chunk = bytes(range(256)) * 64
for _ in range(int(sys.argv[1]) // len(chunk)):
    s.sendall(chunk)
    got = b""
    while len(got) < len(chunk):
        b = s.recv(len(chunk) - len(got))
        assert b, "closed early"
        got += b
    assert got == chunk
s.close()
print("ok", flush=True)
"#;

/// The echo server's `flowlane_qp_*` sample on `page` whose labels
/// include each of `labels`, as a number.
fn sample(page: &str, name: &str, labels: &[(&str, String)]) -> Option<u64> {
    page.lines()
        .filter(|l| l.starts_with(&format!("{name}{{service=\"echo-server\"")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[test]
fn queue_pair_counters_on_the_page_are_those_of_the_summary() {
    if !require_root("queue_pair_counters_on_the_page_are_those_of_the_summary") {
        return;
    }
    let bed = Bed::up("qpm", 2);
    let dir = std::env::temp_dir().join(format!("fl-dqp-{}", bed.name));
    let _ = std::fs::remove_dir_all(&dir);
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let daemon_sock = dir.join("daemon.sock");
    let own = dir.join("echo.sock");
    let daemon = TestDaemon::start(&run, &daemon_sock);
    let addr = daemon.metrics.clone();
    for backend in ["xdp", "kernel"] {
        let echo = start(
            &bed,
            &[
                "echo-server",
                "--backend",
                backend,
                "--mode",
                "queue-pair",
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
        // Registered, and in queue-pair mode on the page.
        within_10s(|| sample(&metrics_page(&addr), "flowlane_qp_app_threads", &[]))
            .unwrap_or_else(|| panic!("{backend}: no queue-pair series: {}", metrics_page(&addr)));

        let out = peer_py(&bed, 60, ECHO, &[&(256 << 10).to_string()]);
        assert_eq!(out.trim(), "ok", "{backend}");
        // The page once the relays hold nothing (the echo all taken),
        // with the echo in their peaks: what the summary will say.
        let held = |p: &str, dir: &str| {
            (0..2)
                .map(|q| {
                    let labels = [("queue", q.to_string()), ("direction", dir.to_string())];
                    sample(p, "flowlane_qp_memory_bytes", &labels)
                })
                .sum::<Option<u64>>()
        };
        let peaks = |p: &str, dir: &str| {
            (0..2)
                .map(|q| {
                    let labels = [("queue", q.to_string()), ("direction", dir.to_string())];
                    sample(p, "flowlane_qp_memory_peak_bytes", &labels)
                })
                .sum::<Option<u64>>()
        };
        let shown = within_10s(|| {
            let p = metrics_page(&addr);
            let settled = ["receive", "send"]
                .iter()
                .all(|d| held(&p, d) == Some(0) && peaks(&p, d) > Some(0));
            settled.then_some(p)
        })
        .unwrap_or_else(|| panic!("{backend}: relays never settled: {}", metrics_page(&addr)));

        let lines = echo.stop();
        let summary = lines
            .iter()
            .find(|l| l["event"] == "summary")
            .unwrap_or_else(|| panic!("{backend}: no summary in {lines:?}"));
        let qp = &summary["queue_pair"];
        eprintln!("{backend}: queue pairs {qp}");
        let of = |name: &str, labels: &[(&str, String)]| {
            sample(&shown, name, labels)
                .unwrap_or_else(|| panic!("{backend}: {name} {labels:?} not on {shown}"))
        };
        assert_eq!(of("flowlane_qp_app_threads", &[]), 2, "{backend}");
        for (name, field) in [
            ("flowlane_qp_app_threads", "app_threads"),
            (
                "flowlane_qp_connections_orphaned_total",
                "connections_orphaned",
            ),
            ("flowlane_qp_connections_moved_total", "connections_moved"),
            ("flowlane_qp_requests_bounced_total", "requests_bounced"),
            (
                "flowlane_qp_application_refused_total",
                "application_refused",
            ),
        ] {
            assert_eq!(
                Some(of(name, &[])),
                qp[field].as_u64(),
                "{backend}: {name}: {qp}"
            );
        }
        assert_eq!(
            Some(of("flowlane_qp_dead_threads", &[]) as usize),
            qp["dead_threads"].as_array().map(Vec::len),
            "{backend}: {qp}"
        );
        let cores = qp["relay_memory"].as_array().expect("relay_memory");
        assert_eq!(cores.len(), 2, "{backend}: {qp}");
        for m in cores {
            let core = m["core"].as_u64().unwrap().to_string();
            for (direction, way) in [("receive", "rx"), ("send", "tx")] {
                let labels = [("queue", core.clone()), ("direction", direction.into())];
                for (name, field) in [
                    ("flowlane_qp_memory_bytes", "held"),
                    ("flowlane_qp_memory_limit_bytes", "limit"),
                    ("flowlane_qp_memory_peak_bytes", "peak"),
                    ("flowlane_qp_memory_waits_total", "waits"),
                ] {
                    assert_eq!(
                        Some(of(name, &labels)),
                        m[format!("{way}_{field}")].as_u64(),
                        "{backend}: {name} {labels:?}: {m}"
                    );
                }
            }
            // The relay's pool: trimmed each second, so the summary, read
            // later, shows as much given back at least, and its gauge.
            let labels = [("queue", core.clone())];
            let returned = of("flowlane_qp_buffer_memory_returned_bytes_total", &labels);
            assert!(
                m["returned"].as_u64().is_some_and(|r| r >= returned),
                "{backend}: returned {returned} on the page: {m}"
            );
            of("flowlane_qp_buffer_memory_cached_bytes", &labels);
            assert!(m["pool_cached"].as_u64().is_some(), "{backend}: {m}");
        }
        // The series of the core's queue, labelled as the per-queue ones.
        let busy = shown
            .lines()
            .find(|l| l.starts_with("flowlane_queue_busy_seconds_total{service=\"echo-server\""))
            .unwrap_or_else(|| panic!("{shown}"));
        let queue_labels = busy
            .split_once(",queue=")
            .unwrap()
            .1
            .split_once('}')
            .unwrap()
            .0;
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with("flowlane_qp_memory_limit_bytes{")
                    && l.contains(&format!(",queue={queue_labels},direction="))),
            "{backend}: {queue_labels}: {shown}"
        );
        assert_eq!(
            shown
                .lines()
                .filter(|l| l.starts_with("flowlane_qp_"))
                .count(),
            6 + 2 * 2 * 4 + 2 * 2,
            "{backend}: {shown}"
        );
        let gone = within_10s(|| {
            (!metrics_page(&addr).contains("flowlane_service_info{service=\"echo-server\""))
                .then_some(())
        });
        assert!(
            gone.is_some(),
            "{backend}: the stopped service left the page"
        );
    }
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
