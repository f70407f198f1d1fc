//! The hyper example (`flowlane hyper-server`): an HTTP/1.1 server written
//! on hyper and tokio, served by flowlane's TCP through `flowlane-tokio`
//! on AF_XDP and on kernel sockets, with curl and hyper's own client (in
//! the bed's peer namespace, on kernel TCP) as clients; and the same
//! service on tokio's own listener (`--tokio-baseline`), the comparison's
//! other side.

mod tcp_common;

use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_testbed::netns::in_netns;
use flowlane_tests::{
    flowlane_bin, kill_and_reap, ready_within, require_root, terminate, text, wait_bounded, Bed,
};
use http_body_util::{BodyExt, Empty};
use tcp_common::*;

const PORT: &str = "8083";
const BODY: &str = "hi from hyper\n";

/// `flowlane hyper-server` on `bed` with `extra` flags, up.
fn hyper_server(bed: &Bed, extra: &[&str]) -> App {
    let args = [&["hyper-server", "--port", PORT, "--body", BODY][..], extra].concat();
    start(bed, &args, 120)
}

/// curl fetches two URLs on one connection: both answered, the connection
/// kept alive between them.
fn curl_keeps_alive(bed: &Bed) {
    let url = format!("http://10.99.0.1:{PORT}/");
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.peer_ns, "timeout", "30"])
        .args(["curl", "-sv", "--max-time", "10", &url, &url])
        .output()
        .unwrap();
    assert!(o.status.success(), "curl: {}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), BODY.repeat(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.to_ascii_lowercase()
            .contains("re-using existing connection"),
        "curl opened a second connection: {err}"
    );
}

/// hyper's client, in the peer namespace: `conns` connections of
/// `requests` keep-alive requests each, every answer checked. Returns the
/// responses read.
fn hyper_client(bed: &Bed, conns: usize, requests: usize) -> usize {
    in_netns(&bed.peer_ns, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let mut ok = 0;
            for _ in 0..conns {
                let stream = tokio::net::TcpStream::connect(format!("10.99.0.1:{PORT}")).await?;
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await?;
                let driver = tokio::spawn(conn);
                for i in 0..requests {
                    sender.ready().await?;
                    let req = hyper::Request::get(format!("/{i}"))
                        .header("host", "10.99.0.1")
                        .body(Empty::<bytes::Bytes>::new())?;
                    let resp = sender.send_request(req).await?;
                    anyhow::ensure!(resp.status() == 200, "status {}", resp.status());
                    let body = resp.into_body().collect().await?.to_bytes();
                    anyhow::ensure!(&body[..] == BODY.as_bytes(), "body {body:?}");
                    ok += 1;
                }
                drop(sender);
                driver.await??;
            }
            Ok(ok)
        })
    })
    .unwrap()
}

#[test]
fn hyper_on_flowlane_answers_curl_and_hyper_s_client() {
    if !require_root("hyper_on_flowlane_answers_curl_and_hyper_s_client") {
        return;
    }
    let bed = Bed::up("thy", 2);
    for backend in ["xdp", "kernel"] {
        let app = hyper_server(&bed, &["--backend", backend]);
        curl_keeps_alive(&bed);
        assert_eq!(hyper_client(&bed, 4, 100), 400, "{backend}");
        let lines = app.stop();
        let t = totals(&lines);
        assert_eq!(t["passive_opens"], 5, "{backend}: {t}");
        let summary = lines.iter().find(|v| v["event"] == "summary").unwrap();
        assert_eq!(
            summary["queue_pair"]["connections_orphaned"], 0,
            "{summary}"
        );
    }
}

#[test]
fn hyper_on_tokio_s_own_listener_answers_the_same() {
    if !require_root("hyper_on_tokio_s_own_listener_answers_the_same") {
        return;
    }
    let bed = Bed::up("thb", 2);
    let app = hyper_server(&bed, &["--tokio-baseline"]);
    curl_keeps_alive(&bed);
    assert_eq!(hyper_client(&bed, 2, 50), 100);
    let lines = app.stop();
    let summary = lines.iter().find(|v| v["event"] == "summary").unwrap();
    assert!(summary["process_cpu_ns"].as_u64().unwrap() > 0, "{summary}");
}

/// hyper and tokio on flowlane while a bucket in use moves every 10 ms:
/// the connections move between cores under the tokio streams (queue-pair
/// mode's relay state goes with them), and every answer arrives.
#[test]
fn hyper_on_flowlane_answers_through_a_rebalancing_storm() {
    if !require_root("hyper_on_flowlane_answers_through_a_rebalancing_storm") {
        return;
    }
    let bed = Bed::up("thr", 2);
    let app = hyper_server(&bed, &["--rebalance-storm-ms", "10"]);
    assert_eq!(hyper_client(&bed, 8, 500), 4_000);
    let (lines, stderr) = app.stop_with_stderr();
    let moves = stderr
        .lines()
        .filter(|l| l.contains(r#""event":"move""#) && !l.contains(r#""error""#))
        .count();
    let summary = lines.iter().find(|v| v["event"] == "summary").unwrap();
    let qp = &summary["queue_pair"];
    assert!(moves > 0, "no move: {stderr}");
    assert!(qp["connections_moved"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(qp["connections_orphaned"], 0, "{summary}");
    // At most one reset per connection, to a duplicate ACK of the
    // server's FIN that a move held (see rebalance.rs, the echo storm).
    let t = totals(&lines);
    assert!(t["resets_out"].as_u64().unwrap() <= 8, "{t}");
    eprintln!("{moves} moves; {qp}");
}

/// The tokio baseline out of descriptors: while peers hold more
/// connections than the process may open (`prlimit --nofile=64`), its
/// accepts fail (EMFILE); once they let go it answers again (its accept
/// loop went on, counting the failures, rather than ending and leaving
/// the service up but deaf).
#[test]
fn the_tokio_baseline_answers_again_once_descriptors_free_up() {
    if !require_root("the_tokio_baseline_answers_again_once_descriptors_free_up") {
        return;
    }
    let bed = Bed::up("thd", 1);
    let report = std::env::temp_dir().join(format!("{}-nofile.json", bed.name));
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new("prlimit")
        .args(["--nofile=64:64", "--"])
        .arg(flowlane_bin())
        .args(["hyper-server", "--tokio-baseline", "--queues", "1"])
        .args(["--port", PORT, "--body", BODY, "--bed", &bed.name])
        .args(["--timeout", "120", "--report"])
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting hyper-server under prlimit");
    if ready_within(&mut child, Duration::from_secs(30), || report.exists()).is_err() {
        kill_and_reap(&mut child);
        panic!("hyper-server --tokio-baseline did not come up");
    }
    let held = in_netns(&bed.peer_ns, || {
        let addr = format!("10.99.0.1:{PORT}");
        let held = (0..100)
            .map(|_| std::net::TcpStream::connect(&addr))
            .collect::<std::io::Result<Vec<_>>>()?;
        // The server accepts until its descriptors run out.
        std::thread::sleep(Duration::from_millis(500));
        Ok(held)
    })
    .unwrap();
    drop(held);
    curl_keeps_alive(&bed);
    terminate(&child);
    let (o, _) = wait_bounded(child, Duration::from_secs(10), "hyper-server");
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let summary: serde_json::Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &serde_json::Value| v["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {stdout}"));
    let failed = summary["application"]["accept_failed"].as_u64();
    assert!(failed.is_some_and(|n| n > 0), "{summary}");
    let _ = std::fs::remove_file(&report);
}
