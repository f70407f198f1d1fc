//! A service stopped (SIGTERM) with keep-alive connections open tells
//! their peers: every one its handler does not close itself at the stop
//! (`ConnHandler::on_stop`'s default: the echo server's here) is
//! reset, at once, on every backend and mode (run-to-completion,
//! queue-pair mode's relays, kernel sockets), as the kernel-socket backend
//! always did (`SO_LINGER` 0). (The HTTP servers close their idle ones
//! with a FIN: `tcp_graceful_stop.rs`.) An AF_XDP service used
//! to stop silently: its clients kept their connections ESTABLISHED until
//! they next sent (the namespace's kernel answered that with an RST), and
//! pools kept dead connections. The summary's counters add up: every
//! connection opened is closed, the resets counted as aborts.

mod tcp_common;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use flowlane_tests::{require_root, Bed};
use serde_json::Value;
use tcp_common::*;

const PORT: &str = "8086";
/// Keep-alive connections held when the service stops.
const CLIENTS: usize = 20;

/// Starts `args` on the bed, holds [`CLIENTS`] keep-alive connections to
/// it, stops it (SIGTERM) and checks that every client saw its connection
/// reset within a few seconds (not held open until its 20 s wait ends),
/// and that the summary's opens add up to its closes, the resets counted
/// as aborts.
fn stop_resets(bed: &Bed, args: &[&str]) {
    let app = start(bed, args, 120);
    let mut clients = peer_py_spawn(
        bed,
        60,
        HOLD_KEEPALIVE,
        &["10.99.0.1", PORT, &CLIENTS.to_string(), "20"],
    );
    let mut out = BufReader::new(clients.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "ready",
        "{args:?}: the clients did not connect"
    );
    let stopped = Instant::now();
    let stopping = std::thread::spawn(move || app.stop());
    line.clear();
    out.read_line(&mut line).unwrap();
    let took = stopped.elapsed();
    let _ = clients.wait();
    let how: Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("{args:?}: the clients said {line:?}: {e}"));
    assert_eq!(
        how,
        serde_json::json!({"RST": CLIENTS, "FIN": 0, "open": 0}),
        "{args:?}: how the clients' connections ended at the stop"
    );
    // The stop's own wait for closing connections is 2 s at most.
    assert!(
        took < Duration::from_secs(8),
        "{args:?}: reset {took:?} after the SIGTERM"
    );
    let lines = stopping.join().unwrap();
    let t = totals(&lines);
    let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k} in {t}"));
    assert!(n("passive_opens") >= CLIENTS as u64, "{args:?}: {t}");
    assert_eq!(
        n("passive_opens"),
        n("closed"),
        "{args:?}: opens add up to closes: {t}"
    );
    assert_eq!(n("resets_out"), CLIENTS as u64, "{args:?}: {t}");
    // The kernel-socket backend's summary has no reasons for its resets.
    if t.get("resets_aborted").is_some() {
        assert_eq!(
            n("resets_aborted"),
            CLIENTS as u64,
            "{args:?}: the resets are aborts: {t}"
        );
    }
}

#[test]
fn a_stopped_service_resets_its_open_connections() {
    if !require_root("a_stopped_service_resets_its_open_connections") {
        return;
    }
    let bed = Bed::up("dp53sr", 2);
    let own = ["--control-socket", "none", "--daemon-socket", "none"];
    for model in [
        &["--backend", "xdp", "--mode", "rtc"][..],
        &["--backend", "xdp", "--mode", "queue-pair"],
        &["--backend", "kernel", "--mode", "rtc"],
    ] {
        // The echo server echoes the clients' requests: their answers.
        let args = [&["echo-server", "--port", PORT][..], &own, model].concat();
        stop_resets(&bed, &args);
    }
}
