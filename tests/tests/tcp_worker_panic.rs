//! A handler that panics on an AF_XDP queue: the queue fails closed, as a
//! kernel-socket service's core does. Its connections' peers get an RST at
//! once (not a minute of silence until their timeouts), a new connection
//! the NIC steers to it is refused (an RST to its SYN), the other queue
//! serves on, and the service says it failed (`TcpService::failed`,
//! `Dataplane::check`), and its stop reports the queue that panicked
//! (`StopErrorKind::Panicked`, the queue's `Worker::Core`). Also: a port
//! only a handler listens on (left out of `TcpServiceConfig::listen`) is
//! served, not refused by the kernel; a set-up that panics fails the
//! start with a `StartErrorKind::Worker` error naming its queue, as on
//! the other backends.
//!
//! The service is flowlane's library, not a `flowlane` command: this test
//! binary again, run inside the bed's namespace; the kernel in the peer
//! namespace is the client.

mod tcp_common;

use std::path::Path;
use std::time::{Duration, Instant};

use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt};
use flowlane_dataplane::{TcpService, TcpServiceConfig};
use flowlane_tests::{kill_and_reap, require_root, rerun_in_ns, Bed, Report};
use tcp_common::*;

/// Set in the child that runs the service: the file it reports to.
const CHILD: &str = "FLOWLANE_WORKER_PANIC_CHILD";
/// The port the configuration lists.
const PORT: u16 = 7;
/// A port only the handlers listen on.
const UNLISTED: u16 = 9;

/// Answers each command a connection sends (one at a time, each within
/// one read): `WHERE` with the queue that serves it, `PANIC` by
/// panicking.
struct Commands;

impl ConnHandler for Commands {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let mut buf = [0u8; 64];
        while let Ok(n) = net.recv(conn, &mut buf) {
            if n == 0 {
                let _ = net.close(conn);
                return;
            }
            if buf[..n].starts_with(b"PANIC") {
                panic!("the handler was asked to panic");
            }
            let _ = net.send(conn, format!("{}\n", net.queue()).as_bytes());
        }
    }
}

/// The service, in the child: first a start whose set-up panics on
/// queue 1 (`SETUP <kind> <error>`), then both ports, and what it says of
/// itself written to `report` (`READY`, then `FAILED <queues> <check>`
/// once a queue failed, then `STOPPED <kind> <worker> <error>`, its
/// stop's), for at most a minute.
fn serve(report: &Path) {
    let say = |line: String| Report::say(report, &line);
    let panics = TcpService::start(TcpServiceConfig::new("xsk0"), |h| {
        if h.queue() == 1 {
            panic!("a set-up bug on queue 1");
        }
        h.listen(PORT, Commands).map(drop)
    });
    match panics {
        Ok(_) => say("SETUP started".into()),
        Err(e) => say(format!("SETUP {:?} {e:#}", e.kind())),
    }
    let mut config = TcpServiceConfig::new("xsk0");
    config.listen = vec![PORT];
    let service = TcpService::start(config, |h| {
        h.listen(PORT, Commands)?;
        h.listen(UNLISTED, Commands).map(drop)
    });
    let service = match service {
        Ok(s) => s,
        Err(e) => return say(format!("START {e}")),
    };
    say("READY".into());
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if service.failed() {
            let check = service.dataplane().check().unwrap_err();
            let queues = service.dataplane().failed_queues();
            say(format!("FAILED {queues:?} {check}"));
            let stopped = match service.stop() {
                (_, Ok(())) => "nothing".to_string(),
                (_, Err(e)) => format!("{:?} {:?} {e:#}", e.kind(), e.worker()),
            };
            say(format!("STOPPED {stopped}"));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
}

/// The client, in the peer namespace: one connection to the unlisted
/// port, eight to the listed one (at least four on one of the two
/// queues: the victim), one `PANIC` on the victim queue; then what each
/// connection of the victim queue saw (`reset`, `timeout`, ...), what
/// the other queue's answered, and what eight new connections got.
const CLIENT: &str = r#"
import socket, sys
host, port, unlisted = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def ask(s):
    s.sendall(b"WHERE\n")
    return int(s.recv(100))
u = socket.create_connection((host, unlisted), timeout=5)
print("unlisted", ask(u))
conns = []
for i in range(8):
    s = socket.create_connection((host, port), timeout=5)
    conns.append((s, ask(s)))
queues = [q for _, q in conns]
victim = max(set(queues), key=queues.count)
print("victim", victim)
same = [s for s, q in conns if q == victim]
same[0].sendall(b"PANIC\n")
def fate(s):
    try:
        return "data" if s.recv(100) else "closed"
    except ConnectionResetError:
        return "reset"
    except socket.timeout:
        return "timeout"
print("same", " ".join(fate(s) for s in same))
print("other", " ".join(str(ask(s)) for s, q in conns if q != victim))
def fresh():
    try:
        s = socket.create_connection((host, port), timeout=5)
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    try:
        return "served%d" % ask(s)
    except ConnectionResetError:
        return "reset"
    except socket.timeout:
        return "timeout"
print("new", " ".join(fresh() for i in range(8)))
"#;

#[test]
fn a_handler_that_panics_fails_its_queue_closed() {
    let test = "a_handler_that_panics_fails_its_queue_closed";
    if let Some(report) = std::env::var_os(CHILD) {
        return serve(Path::new(&report));
    }
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("wpanic", 2);
    let report = Report::new(&bed.name, "worker-panic");
    let mut child = rerun_in_ns(&bed.ns, test, (CHILD, report.0.as_os_str()), false);
    if !report.wait_for("READY", Duration::from_secs(30)) {
        kill_and_reap(&mut child);
        panic!("the service did not start: {}", report.said());
    }
    let out = peer_py_output(
        &bed,
        90,
        CLIENT,
        &["10.99.0.1", &PORT.to_string(), &UNLISTED.to_string()],
    );
    let client = String::from_utf8_lossy(&out.stdout).into_owned();
    // The service's word, once the client is done (it failed by then),
    // and its stop's.
    report.wait_for("STOPPED", Duration::from_secs(10));
    kill_and_reap(&mut child);
    let service = report.said();
    assert!(
        out.status.success(),
        "client: {client} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |tag: &str| -> Vec<String> {
        client
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{tag} ")))
            .unwrap_or_else(|| panic!("no {tag:?} in {client}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // The port only the handlers listen on was claimed and served.
    assert_eq!(line("unlisted").len(), 1, "{client}");
    let victim = line("victim")[0].clone();
    // Every connection of the queue whose handler panicked was reset at
    // once, the one that asked for the panic and the others alike.
    let same = line("same");
    assert!(same.len() >= 4, "{client}");
    assert!(same.iter().all(|f| f == "reset"), "{client}");
    // The other queue serves on: its connections answered, from it.
    let live = 1 - victim.parse::<u32>().unwrap();
    let other = client
        .lines()
        .find_map(|l| l.strip_prefix("other"))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert!(other.iter().all(|q| *q == live.to_string()), "{client}");
    // A new connection is served by the other queue or refused by the
    // failed one; none waits for a timeout.
    let served = format!("served{live}");
    let new = line("new");
    assert!(
        new.iter()
            .all(|f| f == "refused" || f == "reset" || *f == served),
        "{client}"
    );
    // The service knows: the failed queue, and a check that says so.
    assert!(
        service.contains(&format!("FAILED [{victim}]")) && service.contains("panicked"),
        "service: {service}; client: {client}"
    );
    // Its stop reports the queue that panicked, and nothing else.
    let stopped = service
        .lines()
        .find_map(|l| l.strip_prefix("STOPPED "))
        .unwrap_or_else(|| panic!("no STOPPED in {service}"));
    let said = format!("Panicked Some(Core({victim})) queue {victim} panicked: ");
    assert!(
        stopped.starts_with(&said) && !stopped.contains(';'),
        "service: {service}"
    );
    // A set-up that panicked: a worker that ended during the start, its
    // queue and the panic's words in the line.
    let setup = service
        .lines()
        .find_map(|l| l.strip_prefix("SETUP "))
        .unwrap_or_else(|| panic!("no SETUP in {service}"));
    assert!(
        setup.starts_with("Worker queue 1: ") && setup.contains("a set-up bug on queue 1"),
        "{setup}"
    );
}
