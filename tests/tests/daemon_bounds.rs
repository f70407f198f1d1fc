//! What clients of `flowlane daemon` can cost it, with a service that never
//! answers (frozen: the kernel still queues its connections), so that each
//! scrape and each hint waits its whole timeout: requests that send their
//! headers and go away leave no thread behind, and hints waiting on that
//! service do not hold up its stop (the NICs must be put back before
//! systemd's TimeoutStopSec). No root needed: the daemon owns no NIC here.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flowlane_tests::daemon::TestDaemon;
use flowlane_tests::unique_name;

/// A directory of the test's own, with a service socket that never
/// answers; removed when dropped.
struct Run {
    dir: PathBuf,
    _silent: UnixListener,
}

impl Run {
    fn new(tag: &str) -> Run {
        let dir = std::env::temp_dir().join(unique_name(tag));
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let silent = UnixListener::bind(dir.join("run/frozen.1.sock")).unwrap();
        Run {
            dir,
            _silent: silent,
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `flowlane daemon` reading `run`, its socket `socket`, each scrape and
/// hint given `timeout_ms`; killed when dropped.
fn daemon(run: &Run, socket: &Path, timeout_ms: u64) -> TestDaemon {
    let timeout = timeout_ms.to_string();
    TestDaemon::start_with(
        &run.dir.join("run"),
        socket,
        &["--scrape-timeout-ms", &timeout],
    )
}

/// Requests for the page that go away as soon as they are sent, hundreds
/// of them while a scrape waits for a service that never answers: the
/// daemon's threads stay few (each request used to leave a blocking task,
/// a thread, waiting for the scrape).
#[test]
fn requests_that_go_away_leave_no_threads_behind() {
    let run = Run::new("fl-daemon-gone");
    let daemon = daemon(&run, Path::new("none"), 3000);
    let before = daemon.threads();
    for _ in 0..300 {
        let Ok(mut c) = std::net::TcpStream::connect(&daemon.metrics) else {
            continue;
        };
        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    std::thread::sleep(Duration::from_millis(500));
    let during = daemon.threads();
    assert!(
        during <= before + 16,
        "{before} threads before, {during} with the requests gone"
    );
    // Still answering.
    let mut c = std::net::TcpStream::connect(&daemon.metrics).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    let _ = c.read_to_string(&mut page);
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains("flowlane_daemon_services 0"), "{page}");
}

/// A hint request for the service that never answers, sent.
fn hint(socket: &Path) -> UnixStream {
    let mut c = UnixStream::connect(socket).unwrap();
    c.write_all(
        br#"{"op":"hint","flow":{"src":"10.0.0.1","sport":1,"dst":"10.0.0.2","dport":2,"proto":"tcp"}}"#,
    )
    .unwrap();
    c.write_all(b"\n").unwrap();
    c
}

/// Eight hints waiting on a service that never answers, each for the
/// longest scrape timeout: SIGTERM stops the daemon within a few seconds,
/// not after the hints one by one (40 s).
#[test]
fn hints_waiting_on_a_frozen_service_do_not_hold_up_the_stop() {
    let run = Run::new("fl-daemon-hints");
    let socket = run.dir.join("daemon.sock");
    let daemon = daemon(&run, &socket, 5000);
    let _hints: Vec<UnixStream> = (0..8).map(|_| hint(&socket)).collect();
    // Taken off the socket.
    std::thread::sleep(Duration::from_millis(300));
    let took = daemon.stop_within(Duration::from_secs(30));
    assert!(took < Duration::from_secs(4), "stopped after {took:?}");
}
