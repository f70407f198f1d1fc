//! Queue-pair mode's bounds on a test bed, the kernel as peer: what the
//! cores' relays hold for the application threads stays within their
//! per-core memory whatever the number of connections (peers that send
//! and never read), and an active open the core refuses at once says why,
//! as in run to completion.

mod tcp_common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowlane_tests::{flowlane_bin, kill_and_reap, require_root, terminate, wait_within, Bed};
use serde_json::Value;
use tcp_common::peer_py_spawn;

/// Each core's relay memory (qp/src/memory.rs): received bytes handed to
/// application threads and not read, and bytes to send the stack has not
/// taken, 64 MiB each.
const RELAY_MEMORY: u64 = 64 << 20;

/// What the process holds beyond the relays' budgets and what run to
/// completion holds with the same peers: buffers held at up to twice
/// their bytes, allocator slack.
const SLACK: u64 = 96 << 20;

/// Peers: `argv[3]` connections to `argv[1]:argv[2]` that send for
/// `argv[4]` seconds and never read; print `sent` and hold them open
/// until killed.
const NO_READ: &str = r#"
import os, resource, socket, sys, time
host, port, n, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))
ss = []
for i in range(n):
    s = socket.create_connection((host, port), timeout=10)
    s.setblocking(False)
    ss.append(s)
buf = os.urandom(65536)
t0 = time.time()
while time.time() - t0 < secs:
    moved = False
    for s in ss:
        try:
            s.send(buf)
            moved = True
        except BlockingIOError:
            pass
    if not moved:
        time.sleep(0.05)
print('sent', flush=True)
time.sleep(600)
"#;

/// A flowlane service run directly (its pid is the one whose memory is
/// read), its stdout to a file.
struct Service {
    child: Option<Child>,
    stdout: PathBuf,
    report: PathBuf,
}

impl Service {
    /// Starts `flowlane <args> --bed <bed>` and waits for its data path.
    fn start(bed: &Bed, tag: &str, args: &[&str]) -> Service {
        let dir = std::env::temp_dir();
        let stdout = dir.join(format!("{}-{tag}.out", bed.name));
        let report = dir.join(format!("{}-{tag}.json", bed.name));
        let _ = std::fs::remove_file(&report);
        let mut child = Command::new(flowlane_bin())
            .args(args)
            .args(["--bed", &bed.name, "--control-socket", "none"])
            .args(["--daemon-socket", "none", "--timeout", "300", "--report"])
            .arg(&report)
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !report.exists() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("{args:?} exited early ({st})");
            }
            assert!(Instant::now() < deadline, "{args:?} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Service {
            child: Some(child),
            stdout,
            report,
        }
    }

    /// Its resident memory now (bytes).
    fn rss(&self) -> u64 {
        let pid = self.child.as_ref().unwrap().id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS");
        kb << 10
    }

    /// SIGTERM; its JSON lines (whatever its exit status).
    fn stop(mut self) -> Vec<Value> {
        let mut child = self.child.take().unwrap();
        terminate(&child);
        if wait_within(&mut child, Duration::from_secs(30)).is_none() {
            kill_and_reap(&mut child);
            panic!("flowlane did not stop within 30 s");
        }
        std::fs::read_to_string(&self.stdout)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_reap(&mut c);
        }
        let _ = std::fs::remove_file(&self.stdout);
        let _ = std::fs::remove_file(&self.report);
    }
}

/// `peers` connections that send to an echo server on the kernel backend
/// in `mode` and never read; the server's resident memory once they sent
/// what they could, and its summary.
fn echo_under_non_readers(bed: &Bed, mode: &str, peers: u32) -> (u64, Value) {
    let port = "7007";
    let service = Service::start(
        bed,
        mode,
        &[
            "echo-server",
            "--port",
            port,
            "--backend",
            "kernel",
            "--mode",
            mode,
        ],
    );
    let mut client = peer_py_spawn(
        bed,
        120,
        NO_READ,
        &["10.99.0.1", port, &peers.to_string(), "8"],
    );
    let mut line = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "sent", "the peers failed");
    // What the server took in since settles.
    std::thread::sleep(Duration::from_secs(2));
    let rss = service.rss();
    kill_and_reap(&mut client);
    let lines = service.stop();
    let summary = lines
        .into_iter()
        .find(|v| v["event"] == "summary")
        .expect("a summary");
    (rss, summary)
}

/// A thousand peers that send to an echo server and never read: in
/// queue-pair mode the server holds at most its relays' memory more than
/// in run to completion (each core's relay stops taking received bytes,
/// and its threads' sends wait, at its budget: the peers' bytes stay in
/// the kernel, whose windows close), where without a per-core bound each
/// connection held its full credits (512 KiB) on top. The relays say how
/// often connections waited, and that no core held more than its budget.
#[test]
fn non_reading_peers_hold_at_most_the_relays_memory() {
    if !require_root("non_reading_peers_hold_at_most_the_relays_memory") {
        return;
    }
    let bed = Bed::up("qpmem", 2);
    let peers = 1000;
    let (rtc, _) = echo_under_non_readers(&bed, "rtc", peers);
    let (qp, summary) = echo_under_non_readers(&bed, "queue-pair", peers);
    eprintln!(
        "{peers} peers that do not read: run to completion {} MiB, queue-pair {} MiB",
        rtc >> 20,
        qp >> 20
    );
    let cores = 2;
    let bound = rtc + cores * 2 * RELAY_MEMORY + SLACK;
    assert!(
        qp <= bound,
        "queue-pair mode holds {} MiB with {peers} peers that do not read, run to completion {} \
         MiB: more than the relays' {} MiB per core",
        qp >> 20,
        rtc >> 20,
        (2 * RELAY_MEMORY) >> 20
    );
    let q = &summary["queue_pair"];
    assert!(q["rx_memory_waits"].as_u64().unwrap() > 0, "{q}");
    assert!(q["tx_memory_waits"].as_u64().unwrap() > 0, "{q}");
    for m in q["relay_memory"].as_array().unwrap() {
        assert_eq!(m["rx_limit"], RELAY_MEMORY, "{m}");
        assert_eq!(m["tx_limit"], RELAY_MEMORY, "{m}");
        assert!(m["rx_peak"].as_u64().unwrap() <= RELAY_MEMORY, "{m}");
        assert!(m["tx_peak"].as_u64().unwrap() <= RELAY_MEMORY, "{m}");
    }
    let threads = summary["app_thread_cpu_ns"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    assert!(threads.iter().all(Value::is_u64), "{threads:?}");
}

/// Kernel listener in the peer namespace on `argv[1]`: accepts nothing
/// (the kernel completes the handshakes its backlog holds); prints
/// `ready`.
const LISTEN: &str = r#"
import socket, sys, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('10.99.0.2', int(sys.argv[1])))
l.listen(8192)
print('ready', flush=True)
time.sleep(600)
"#;

/// More active opens than flowlane's outgoing ports: those a core's stack
/// refuses at once (no local port) fail with that error in queue-pair mode
/// as in run to completion (`connect: address in use`), not as an open
/// that ended `Aborted`.
#[test]
fn a_connect_refused_at_once_says_why_in_queue_pair_mode() {
    if !require_root("a_connect_refused_at_once_says_why_in_queue_pair_mode") {
        return;
    }
    let bed = Bed::up("qpcon", 2);
    let mut peer = peer_py_spawn(&bed, 120, LISTEN, &["5001"]);
    tcp_common::wait_ready(&mut peer);
    for mode in ["rtc", "queue-pair"] {
        let service = Service::start(
            &bed,
            mode,
            &[
                "bulk-source",
                "--connect",
                "10.99.0.2:5001",
                "--connections",
                "6000",
                "--bytes",
                "1",
                "--mode",
                mode,
            ],
        );
        // The opens all go at the start: their refusals are reported then.
        let deadline = Instant::now() + Duration::from_secs(20);
        let refused = |lines: &[Value]| {
            lines
                .iter()
                .filter(|v| v["error"] == "connect: address in use")
                .count()
        };
        loop {
            let text = std::fs::read_to_string(&service.stdout).unwrap_or_default();
            let lines: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            if refused(&lines) > 0 || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let lines = service.stop();
        assert!(refused(&lines) > 0, "{mode}: no refusal said why");
        let aborted: Vec<&Value> = lines.iter().filter(|v| v["close"] == "Aborted").collect();
        assert!(
            aborted.is_empty(),
            "{mode}: {} opens ended Aborted, e.g. {}",
            aborted.len(),
            aborted[0]
        );
    }
    kill_and_reap(&mut peer);
}
