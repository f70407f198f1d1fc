//! A dropped `flowlane_tokio::TcpListener` on flowlane's TCP (AF_XDP;
//! the kernel in the bed's peer namespace is the client): a connection
//! that arrives after the drop is refused at its SYN, as a kernel
//! listener's closed port is (the client's connect fails
//! `ConnectionRefused`, and the stack counts the SYN in `syn_refused`),
//! where it completed its handshake and was reset after; the listener
//! taken again (`Local::listener`) serves again.
//!
//! The service is flowlane's library, not a `flowlane` command: this test
//! binary again, run inside the bed's namespace.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlane_app::Placement;
use flowlane_dataplane::{TcpService, TcpServiceConfig};
use flowlane_qp::QueuePairConfig;
use flowlane_testbed::netns::in_netns;
use flowlane_tests::{kill_and_reap, require_root, rerun_in_ns, Bed, Report};
use flowlane_tokio::{AsyncConfig, Local, TcpListener};
use tokio::io::AsyncWriteExt;

/// Set in the child that runs the service: the file it reports to.
const CHILD: &str = "FLOWLANE_TOKIO_LISTENER_DROP_CHILD";
/// The port the service listens on.
const PORT: u16 = 7;
/// The connections tried while the listener is dropped.
const TRIES: u64 = 4;

/// The file whose existence tells the child to take the listener again.
fn go_file(report: &Path) -> PathBuf {
    report.with_extension("go")
}

/// Serves one connection: `hello`, then its FIN.
async fn serve_one(listener: &TcpListener) {
    let (mut s, _) = listener.accept().await.unwrap();
    s.write_all(b"hello\n").await.unwrap();
    s.shutdown().await.unwrap();
}

/// The application thread: serves one connection, drops its listener,
/// takes it again once told to, serves one more, and holds it.
async fn app(mut local: Local, report: PathBuf, served: Arc<AtomicBool>) {
    let listener = local.listener(PORT).unwrap();
    serve_one(&listener).await;
    drop(listener);
    Report::say(&report, "DROPPED");
    while !go_file(&report).exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listener = local.listener(PORT).expect("the listener taken again");
    Report::say(&report, "REBOUND");
    serve_one(&listener).await;
    served.store(true, Ordering::Release);
    std::future::pending::<()>().await;
}

/// The service, in the child: tokio on queue-pair mode over AF_XDP on the
/// bed's two queues, for at most a minute; once the second connection was
/// served, says the refused SYNs and the connections reset after their
/// handshake (`COUNTS <syn_refused> <refused_backlog>`).
fn serve(report: PathBuf) {
    let served = Arc::new(AtomicBool::new(false));
    let place = |queue| Placement {
        queue,
        cpu: None,
        node: 0,
    };
    let (r, s) = (report.clone(), served.clone());
    let started = flowlane_tokio::start(
        AsyncConfig {
            queue_pairs: QueuePairConfig {
                cores: vec![place(0), place(1)],
                app_threads: vec![place(0)],
                pin: |_| Ok(()),
                stall_after: Duration::from_secs(10),
            },
            ports: vec![PORT],
            backlog: 64,
            syn_filter: None,
        },
        move |local| app(local, r.clone(), s.clone()),
    );
    let (qp, counters) = match started {
        Ok(started) => started,
        Err(e) => return Report::say(&report, &format!("START {e}")),
    };
    let qp = Arc::new(qp);
    let q = qp.clone();
    let mut config = TcpServiceConfig::new("xsk0");
    config.listen = vec![PORT];
    let service =
        match TcpService::start(config, move |h| q.setup_core(h).map_err(|e| e.to_string())) {
            Ok(s) => s,
            Err(e) => {
                let _ = qp.stop();
                return Report::say(&report, &format!("START {e}"));
            }
        };
    Report::say(&report, "READY");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !served.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // As the workers stopped (they publish their counters every 50 ms
    // while they run, and as they stop).
    let (last, stopped) = service.stop();
    stopped.expect("no queue failed");
    let refused: u64 = last.tcp.iter().map(|(_, c)| c.syn_refused).sum();
    qp.stop().expect("no application thread failed");
    let reset = counters.refused_backlog.load(Ordering::Relaxed);
    Report::say(&report, &format!("COUNTS {refused} {reset}"));
}

/// How one connection from the peer went: what it read until the
/// server's FIN, or the error of its connect or read.
type Attempt = Result<String, ErrorKind>;

/// One connection from the peer ([`Attempt`]).
fn attempt() -> Attempt {
    let server: SocketAddr = ([10, 99, 0, 1], PORT).into();
    let mut s =
        TcpStream::connect_timeout(&server, Duration::from_secs(5)).map_err(|e| e.kind())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).map_err(|e| e.kind())?;
    Ok(got)
}

#[test]
fn a_dropped_tokio_listener_refuses_new_connections_at_the_syn() {
    let test = "a_dropped_tokio_listener_refuses_new_connections_at_the_syn";
    if let Some(report) = std::env::var_os(CHILD) {
        return serve(report.into());
    }
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("tldrop", 2);
    let report = Report::new(&bed.name, "listener-drop");
    let go = go_file(&report.0);
    let _ = std::fs::remove_file(&go);
    let mut child = rerun_in_ns(&bed.ns, test, (CHILD, report.0.as_os_str()), false);
    let said = || report.said();
    // Waits (30 s at most) for the child to say `what`: false if it did
    // not, or could not start.
    let wait_for = |what: &str| report.wait_for(what, Duration::from_secs(30));
    let ns = bed.peer_ns.clone();
    let run = || -> Result<(Attempt, Vec<Attempt>, Attempt), String> {
        if !wait_for("READY") {
            return Err(format!("the service did not start: {}", said()));
        }
        let first = in_netns(&ns, || Ok(attempt())).unwrap();
        if !wait_for("DROPPED") {
            return Err(format!(
                "the listener was not dropped (first connection: {first:?}): {}",
                said()
            ));
        }
        let dropped = in_netns(&ns, || Ok((0..TRIES).map(|_| attempt()).collect())).unwrap();
        std::fs::write(&go, b"").unwrap();
        if !wait_for("REBOUND") {
            return Err(format!("the listener was not taken again: {}", said()));
        }
        let again = in_netns(&ns, || Ok(attempt())).unwrap();
        if !wait_for("COUNTS") {
            return Err(format!("no counts: {}", said()));
        }
        Ok((first, dropped, again))
    };
    let outcome = run();
    kill_and_reap(&mut child);
    let service = said();
    let _ = std::fs::remove_file(&go);
    let (first, dropped, again) = outcome.unwrap();
    assert_eq!(first.as_deref(), Ok("hello\n"), "{service}");
    assert!(
        dropped
            .iter()
            .all(|r| *r == Err(ErrorKind::ConnectionRefused)),
        "after the drop: {dropped:?}; {service}"
    );
    assert_eq!(again.as_deref(), Ok("hello\n"), "{service}");
    let counts: Vec<u64> = service
        .lines()
        .find_map(|l| l.strip_prefix("COUNTS "))
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    // Each refused at its SYN; none accepted, then reset.
    assert_eq!(
        counts,
        [TRIES, 0],
        "syn_refused, refused_backlog: {service}"
    );
}
