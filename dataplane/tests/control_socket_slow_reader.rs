//! A client of a service's control socket that reads its answer slowly
//! does not hold the service's main thread, which polls the socket between
//! its other duties (the rebalancing loop, the watchdog, SIGTERM): each
//! poll returns within a bound, and the client still gets its whole
//! answer, written as it takes it over the polls.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use flowlane_dataplane::control_socket::{ControlSocket, Response};

#[test]
fn a_slow_reader_does_not_hold_the_service_s_main_thread() {
    let dir = std::env::temp_dir().join(format!("fl-slow-reader-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("svc.1.sock");
    let mut sock = ControlSocket::bind(&path).unwrap();
    let p = path;
    // Reads 64 KiB every 100 ms: a 2 MiB answer takes it about 3.2 s.
    let client = std::thread::spawn(move || {
        let mut s = UnixStream::connect(&p).unwrap();
        s.write_all(b"{\"op\":\"counters\"}\n").unwrap();
        let mut buf = vec![0u8; 64 << 10];
        let mut got = Vec::new();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got
    });
    let big = "x".repeat(2 << 20);
    let mut longest = Duration::ZERO;
    let began = Instant::now();
    while !client.is_finished() && began.elapsed() < Duration::from_secs(20) {
        let poll = Instant::now();
        sock.poll(|_| Response::Error {
            message: big.clone(),
        });
        longest = longest.max(poll.elapsed());
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = client.join().unwrap();
    // A correctness bound, with a wide margin: a poll waits 2 ms at most
    // for its clients (the one that answers also makes the answer: 2 MB
    // of JSON, a few hundred milliseconds in a debug build on a busy
    // machine).
    assert!(
        longest < Duration::from_secs(1),
        "one poll of the service's main thread took {longest:?}"
    );
    let answer: Response = serde_json::from_slice(got.trim_ascii_end())
        .unwrap_or_else(|e| panic!("{} bytes, not the whole answer: {e}", got.len()));
    assert_eq!(answer, Response::Error { message: big });
    assert_eq!(sock.clients_dropped(), 0);
    drop(sock);
    std::fs::remove_dir_all(&dir).unwrap();
}
