//! `flowlane daemon` with real components: a flowlane `bulk-sink` on the
//! bed (queue-pair mode) receiving from kernel TCP senders, the daemon finding it through its
//! control socket, `promtool check metrics` on the page, and a real
//! Prometheus server scraping the daemon.

mod tcp_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::HashSet;

use flowlane_tests::{
    dashboard_queries, dashboards_dir, flowlane, flowlane_bin, flowlane_metric_names, ready_line,
    require_root, text, Bed, TestDaemon,
};
use serde_json::Value;
use tcp_common::*;

/// A child process killed and reaped when dropped (the daemon,
/// Prometheus), whatever the test's outcome.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `tool` runs here; prints why the test is skipped if not.
fn have(tool: &str, test: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("{test}: skipped: {tool} is not installed (scripts/setup.sh installs it)");
    }
    ok
}

/// An HTTP GET with curl: status code and body.
fn get(url: &str, accept: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-m", "10", "-w", "\n%{http_code}"]);
    if let Some(a) = accept {
        cmd.args(["-H", &format!("Accept: {a}")]);
    }
    let out = cmd.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The sum of the samples of `name` (exactly that metric, any labels) for
/// the service `service` on a text-format page.
fn sum_of(page: &str, name: &str, service: &str) -> f64 {
    let tag = format!("service=\"{service}\"");
    page.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&tag))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// `promtool check metrics` on `page`.
fn promtool_check(page: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A free TCP port on the loopback address (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Prometheus scraping `target` every second, its data in `dir`.
fn start_prometheus(dir: &Path, target: &str) -> (Reaped, String) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: flowlane\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("prometheus");
    (Reaped(child), listen)
}

/// An instant query's single value from Prometheus' HTTP API, if any.
fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let (_, result) = query_all(prometheus, promql);
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// An instant query's status and result series.
fn query_all(prometheus: &str, promql: &str) -> (String, Vec<Value>) {
    let out = Command::new("curl")
        .args(["-s", "-m", "5", "-G"])
        .arg(format!("http://{prometheus}/api/v1/query"))
        .arg("--data-urlencode")
        .arg(format!("query={promql}"))
        .output()
        .expect("curl");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let status = v["status"].as_str().unwrap_or("no answer").to_string();
    let error = v["error"].as_str().unwrap_or_default();
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    (format!("{status} {error}").trim().to_string(), result)
}

/// Every metric the dashboards and alert rules name is on the daemon's
/// page, and every panel's query returns data from Prometheus; but the
/// panels of what only kernel sockets export, which `daemon_kernel.rs`
/// checks against a kernel-socket service's page, and those of what only
/// a running rebalancing loop exports (this test's service runs without
/// one), which `dashboards.rs` checks.
fn dashboards_have_data(prometheus: &str, page: &str) {
    let on_page: HashSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .flat_map(|n| {
            // A histogram's series.
            ["", "_bucket", "_sum", "_count"].map(|s| format!("{n}{s}"))
        })
        .collect();
    let (mut queries, _) = dashboard_queries();
    queries.retain(|q| !q.kernel_sockets_only() && !q.rebalancing_loop_only());
    let rules =
        std::fs::read_to_string(dashboards_dir().join("prometheus/flowlane-alerts.yml")).unwrap();
    let mut named = flowlane_metric_names(&rules);
    for q in &queries {
        named.extend(flowlane_metric_names(&q.expr));
    }
    for name in named {
        assert!(
            on_page.contains(&name),
            "{name} is not on the daemon's page"
        );
    }
    // Rates need two scrapes in their window.
    std::thread::sleep(Duration::from_secs(3));
    // The panels of the traffic alone must show it, not just a series.
    let traffic: HashSet<&str> = [
        "flowlane_queue_rx_packets_total",
        "flowlane_queue_rx_bytes_total",
        "flowlane_tcp_received_bytes_total",
        "flowlane_tcp_segments_received_total",
    ]
    .into();
    let mut shown = 0;
    for q in &queries {
        let (status, result) = query_all(prometheus, &q.promql());
        assert_eq!(
            status,
            "success",
            "{} / {}: {}",
            q.file,
            q.panel,
            q.promql()
        );
        assert!(
            !result.is_empty(),
            "{} / {}: no data for {}",
            q.file,
            q.panel,
            q.promql()
        );
        let names = flowlane_metric_names(&q.expr);
        if !names.is_empty() && names.iter().all(|n| traffic.contains(n.as_str())) {
            let values: Vec<f64> = result
                .iter()
                .filter_map(|r| r["value"][1].as_str()?.parse().ok())
                .collect();
            assert!(
                values.iter().any(|&v| v > 0.0),
                "{} / {}: shows no traffic ({values:?}) for {}",
                q.file,
                q.panel,
                q.promql()
            );
            shown += 1;
        }
    }
    assert!(shown >= 3, "{shown} traffic panels checked");
}

#[test]
fn the_daemon_serves_a_running_service_s_counters_to_prometheus() {
    let test = "the_daemon_serves_a_running_service_s_counters_to_prometheus";
    if !require_root(test) || !have("promtool", test) || !have("prometheus", test) {
        return;
    }
    let bed = Bed::up("dmn", 2);
    let dir: PathBuf =
        std::env::temp_dir().join(format!("fl-daemon-{}-{}", bed.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("bulk-sink.sock");
    let sink = start(
        &bed,
        &[
            "bulk-sink",
            "--port",
            "5001",
            // Its handlers on application threads: the queue-pair series
            // the dashboards name are on the page (and every other one).
            "--mode",
            "queue-pair",
            "--control-socket",
            sock.to_str().unwrap(),
            // The moves counted below are made by hand, one of them.
            "--rebalance",
            "off",
        ],
        120,
    );
    // Its own socket in the run directory too: it must not take itself
    // for a service.
    let daemon = TestDaemon::start(&dir, &dir.join("daemon.sock"));
    let addr = &daemon.metrics;
    let metrics = format!("http://{addr}/metrics");

    // A real Prometheus scrapes the daemon from before the traffic starts,
    // so that rates see it arrive.
    let (_prometheus, prom) = start_prometheus(&dir, addr);
    let until_scraped = |promql: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = query(&prom, promql) {
                break v;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus never had {promql}: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let promql = r#"sum(flowlane_tcp_received_bytes_total{service="bulk-sink"})"#;
    assert_eq!(until_scraped(promql), 0.0, "scraped before any traffic");

    // Two transfers from kernel TCP in the peer namespace.
    let bytes: u64 = 4 << 20;
    for _ in 0..2 {
        peer_py(
            &bed,
            60,
            KERNEL_SEND,
            &["10.99.0.1:5001", &bytes.to_string()],
        );
    }
    // The stack publishes its counters every 50 ms.
    std::thread::sleep(Duration::from_millis(300));

    let (code, page) = get(&metrics, None);
    assert_eq!(code, 200, "{page}");
    promtool_check(&page);
    let received = sum_of(&page, "flowlane_tcp_received_bytes_total", "bulk-sink");
    assert_eq!(received, (2 * bytes) as f64, "{page}");
    assert_eq!(sum_of(&page, "flowlane_tcp_opens_total", "bulk-sink"), 2.0);
    assert!(
        sum_of(&page, "flowlane_queue_rx_packets_total", "bulk-sink") > (2 * bytes / 1500) as f64
    );
    assert!(page.contains("flowlane_daemon_services 1\n"), "{page}");
    // The interface's own counters, read by the service in its namespace.
    assert!(
        sum_of(&page, "flowlane_nic_rx_bytes_total", "bulk-sink") > (2 * bytes) as f64,
        "{page}"
    );
    assert!(
        page.contains(r#"flowlane_service_info{service="bulk-sink""#),
        "{page}"
    );
    // Two queues, each with its own series.
    for q in ["0", "1"] {
        assert!(
            page.contains(&format!("queue=\"{q}\"")),
            "queue {q}: {page}"
        );
    }
    let (code, om) = get(
        &metrics,
        Some("application/openmetrics-text; version=1.0.0"),
    );
    assert_eq!(code, 200);
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert_eq!(get(&format!("http://{addr}/elsewhere"), None).0, 404);

    // Prometheus saw the bytes arrive, and answers PromQL over them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while query(&prom, promql) != Some((2 * bytes) as f64) {
        assert!(Instant::now() < deadline, "{:?}", query(&prom, promql));
        std::thread::sleep(Duration::from_millis(500));
    }
    let rate = r#"sum(rate(flowlane_tcp_received_bytes_total{service="bulk-sink"}[1m]))"#;
    assert!(
        query(&prom, rate).is_some_and(|r| r > 0.0),
        "{:?}",
        query(&prom, rate)
    );
    assert_eq!(query(&prom, r#"up{job="flowlane"}"#), Some(1.0));
    assert_eq!(
        query(
            &prom,
            "count(count by (queue) (flowlane_queue_busy_seconds_total))"
        ),
        Some(2.0)
    );
    dashboards_have_data(&prom, &page);

    hints_follow_moves(&bed, &dir, &sock);
    // The move reached Prometheus: its count by reason, and a duration
    // the rebalancing dashboard's quantile panel can show.
    let moved =
        r#"sum(flowlane_rebalance_moves_total{service="bulk-sink",reason="manual",result="done"})"#;
    let deadline = Instant::now() + Duration::from_secs(30);
    while query(&prom, moved) != Some(1.0) {
        assert!(Instant::now() < deadline, "{:?}", query(&prom, moved));
        std::thread::sleep(Duration::from_millis(500));
    }
    let p99 = "histogram_quantile(0.99, sum by (le) (rate(flowlane_rebalance_move_duration_seconds_bucket[1m])))";
    let p99 = query(&prom, p99);
    assert!(
        p99.is_some_and(|s| s.is_finite() && s > 0.0),
        "move p99 {p99:?}"
    );
    // Its rebalancing loop is off: no learned move price to serve.
    for name in [
        "flowlane_rebalance_move_cost_fixed_ns",
        "flowlane_rebalance_move_cost_per_connection_ns",
        "flowlane_rebalance_move_cost_observed",
    ] {
        assert!(!page.contains(&format!("{name}{{")), "{name}: {page}");
    }
    // One screen, as JSON: the daemon runs, the sink with its two queues
    // and the move just made.
    let o = flowlane(&[
        "status",
        "--run-dir",
        dir.to_str().unwrap(),
        "--daemon-socket",
        dir.join("daemon.sock").to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let st: Value = serde_json::from_slice(&o.stdout).expect("status JSON");
    assert_eq!(st["daemon"]["running"], true, "{st}");
    let services = st["services"].as_array().unwrap();
    assert_eq!(services.len(), 1, "the daemon is not a service: {st}");
    assert_eq!(services[0]["service"], "bulk-sink", "{st}");
    assert_eq!(services[0]["queues"].as_array().unwrap().len(), 2, "{st}");
    assert_eq!(services[0]["moves_done"], 1, "{st}");
    // Now with a move in the histogram.
    let (_, page) = get(&metrics, None);
    promtool_check(&page);
    assert!(
        page.contains(r#"flowlane_rebalance_moves_total{service="bulk-sink""#)
            && sum_of(
                &page,
                "flowlane_rebalance_move_duration_seconds_count",
                "bulk-sink"
            ) == 1.0,
        "{page}"
    );

    // The service's own summary agrees with what the daemon served (the
    // hint test's connection sent 1 000 bytes more).
    let lines = sink.stop();
    assert_eq!(totals(&lines)["bytes_in"], 2 * bytes + 1000, "{lines:?}");
    // Gone with its socket: the next page has no service.
    let (_, page) = get(&metrics, None);
    assert!(page.contains("flowlane_daemon_services 0\n"), "{page}");
    assert!(!page.contains("service=\"bulk-sink\""), "{page}");
    drop(_prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel client that connects from port `argv[2]` to `argv[1]`, sends
/// 1 000 bytes, prints `ready` and keeps the connection open `argv[3]`
/// seconds.
const HOLD_CONNECTION: &str = r#"
import socket, sys, time
host, port = sys.argv[1].rsplit(':', 1)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('10.99.0.2', int(sys.argv[2])))
s.connect((host, int(port)))
s.sendall(b'x' * 1000)
print('ready', flush=True)
time.sleep(float(sys.argv[3]))
s.close()
"#;

/// `flowlane hint --daemon --json` for the `proto` flow 10.99.0.2:`sport` →
/// `dst`:`dport`.
fn ask_hint(dir: &Path, sport: u16, dst: &str, dport: u16, proto: &str) -> std::process::Output {
    flowlane(&[
        "hint",
        "--daemon",
        "--daemon-socket",
        dir.join("daemon.sock").to_str().unwrap(),
        "--src",
        "10.99.0.2",
        "--sport",
        &sport.to_string(),
        "--dst",
        dst,
        "--dport",
        &dport.to_string(),
        "--proto",
        proto,
        "--json",
    ])
}

/// [`ask_hint`] to the service's address, answered.
fn daemon_hint(dir: &Path, sport: u16) -> Value {
    let o = ask_hint(dir, sport, "10.99.0.1", 5001, "tcp");
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).expect("hint JSON")
}

/// The daemon's hint for a live connection names the bucket and queue the
/// service serves it on, and follows the bucket when it moves.
fn hints_follow_moves(bed: &Bed, dir: &Path, sock: &Path) {
    let sport = 40_123;
    let mut held = peer_py_spawn(
        bed,
        60,
        HOLD_CONNECTION,
        &["10.99.0.1:5001", &sport.to_string(), "4"],
    );
    wait_ready(&mut held);
    std::thread::sleep(Duration::from_millis(200));
    let sock = sock.to_str().unwrap();
    let o = flowlane(&[
        "rebalance",
        "status",
        "--socket",
        sock,
        "--json",
        "--interval-ms",
        "0",
    ]);
    let status: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("status JSON: {e}: {}", text(&o)));
    // The one bucket with a live connection, and its queue.
    let (bucket, queue) = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| {
            let queue = q["queue"].as_u64().unwrap();
            q["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b["connections"].as_u64() == Some(1))
                .map(move |b| (b["bucket"].as_u64().unwrap(), queue))
        })
        .next()
        .unwrap_or_else(|| panic!("no bucket with the connection: {status}"));
    let h = daemon_hint(dir, sport);
    assert_eq!(
        (h["bucket"].as_u64(), h["queue"].as_u64()),
        (Some(bucket), Some(queue)),
        "{h}"
    );
    assert_eq!(h["service"], "bulk-sink", "{h}");
    assert_eq!(h["iface"], status["iface"], "{h}");
    let cpu = &status["queues"][queue as usize]["cpu"];
    assert_eq!(&h["cpu"], cpu, "{h} {status}");
    // Moved by hand: the hint follows.
    let to = (1 - queue).to_string();
    let o = flowlane(&[
        "rebalance",
        "move",
        "--bucket",
        &bucket.to_string(),
        "--to-queue",
        &to,
        "--socket",
        sock,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let h = daemon_hint(dir, sport);
    assert_eq!(h["queue"].as_u64(), Some(1 - queue), "{h}");
    finish(held, Duration::from_secs(30));
    // A flow to an address the service does not have: one line, exit 1.
    let o = ask_hint(dir, 1, "192.0.2.1", 5001, "tcp");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("does not serve 192.0.2.1"),
        "{}",
        text(&o)
    );
    // To its address but to a port it does not take, or not TCP: not
    // served either (a service answering for every flow to its address
    // would make the daemon name whichever service registered first).
    let o = ask_hint(dir, sport, "10.99.0.1", 5002, "tcp");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("does not serve TCP port 5002"),
        "{}",
        text(&o)
    );
    let o = ask_hint(dir, sport, "10.99.0.1", 5001, "udp");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("serves TCP only"), "{}", text(&o));
}

#[test]
fn a_daemon_without_its_port_says_so_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(flowlane_bin())
        .args([
            "daemon",
            "--metrics",
            &addr,
            "--run-dir",
            "/nonexistent",
            "--socket",
            "none",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&addr) && err.contains("--metrics"), "{err}");
}

#[test]
fn a_config_file_sets_what_flags_do_not_and_its_mistakes_are_one_line() {
    let dir = std::env::temp_dir().join(format!("fl-daemon-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "metrics = \"127.0.0.1:0\"\nrun_dir = \"{}\"\nsocket = \"none\"\n",
            dir.display()
        ),
    )
    .unwrap();
    // The file's address and socket; the flag's run directory.
    let mut child = Reaped(
        Command::new(flowlane_bin())
            .args([
                "daemon",
                "--config",
                config.to_str().unwrap(),
                "--run-dir",
                "/tmp",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let (ready, _) = ready_line(&mut child.0);
    assert_eq!(ready["socket"], Value::Null, "{ready}");
    assert_eq!(ready["run_dir"], "/tmp", "{ready}");
    assert!(
        ready["metrics"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{ready}"
    );
    drop(child);
    std::fs::write(&config, "metrics = \"127.0.0.1:0\"\nsocket_path = \"x\"\n").unwrap();
    let out = Command::new(flowlane_bin())
        .args(["daemon", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("daemon.toml") && err.contains("socket_path"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
