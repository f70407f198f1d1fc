//! Every UMEM frame a queue owns is accounted for: the worker's
//! `frames_*` gauges (free list, with the kernel to receive into, being
//! sent, held) sum to the queue's `--frames-per-queue` once it is idle,
//! with none held or being sent, after a transfer whose slow reader made
//! the echo server hold received payload in its frames (zero-copy
//! receive) mid-way. A frame lost on any path (a reset, a close, a
//! dropped segment) would leave the sum short for good.

mod tcp_common;

use std::path::Path;
use std::time::{Duration, Instant};

use flowlane_dataplane::control_socket::{request, Request, Response, ServiceCounters};
use flowlane_tests::{require_root, Bed};
use tcp_common::*;

/// Frames per queue: the smallest a queue may own.
const FRAMES: u64 = 4096;

/// Sends `argv[2]` bytes to the echo server and reads them back slowly at
/// first (so that the server holds received frames it cannot echo yet),
/// then at full speed; prints `ok` when every byte came back.
const SLOW_THEN_FAST: &str = r#"
import socket, sys, threading, time
n = int(sys.argv[2])
s = socket.create_connection((sys.argv[1], 7), timeout=30)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
def send():
    s.sendall(b'f' * n)
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send)
t.start()
print('ready', flush=True)
got, start = 0, time.time()
while True:
    d = s.recv(4096 if time.time() - start < 3 else 1 << 16)
    if not d:
        break
    got += len(d)
    if time.time() - start < 3:
        time.sleep(0.01)
t.join()
s.close()
assert got == n, (got, n)
print('ok', flush=True)
"#;

/// The service's counters, asked of its control socket.
fn counters(socket: &Path) -> ServiceCounters {
    match request(socket, &Request::Counters, Duration::from_secs(5)) {
        Ok(Response::Counters(c)) => *c,
        other => panic!("counters from {}: {other:?}", socket.display()),
    }
}

/// Each queue's `frames_*` gauges: (free, fill, tx, held).
fn frames(c: &ServiceCounters) -> Vec<(u64, u64, u64, u64)> {
    c.queues
        .iter()
        .map(|q| {
            (
                q.io.frames_free,
                q.io.frames_fill,
                q.io.frames_tx,
                q.io.frames_held,
            )
        })
        .collect()
}

#[test]
fn every_frame_is_back_once_the_queues_are_idle() {
    if !require_root("every_frame_is_back_once_the_queues_are_idle") {
        return;
    }
    let bed = Bed::up("umf", 2);
    let per_queue = FRAMES.to_string();
    let socket = std::env::temp_dir().join(format!("{}-frames.sock", bed.name));
    let app = start(
        &bed,
        &[
            "echo-server",
            "--port",
            "7",
            "--frames-per-queue",
            &per_queue,
            "--control-socket",
            socket.to_str().unwrap(),
        ],
        120,
    );
    let mut client = peer_py_spawn(&bed, 60, SLOW_THEN_FAST, &["10.99.0.1", "16000000"]);
    wait_ready(&mut client);
    std::thread::sleep(Duration::from_millis(1500));
    let mid = frames(&counters(&socket));
    eprintln!("mid-transfer (free, fill, tx, held) per queue: {mid:?}");
    assert!(
        mid.iter().any(|f| f.3 > 0),
        "the slow reader's payload is held in frames mid-transfer: {mid:?}"
    );
    assert_eq!(finish(client, Duration::from_secs(60)).trim(), "ok");
    // Idle once the connection is gone (TIME-WAIT holds no frame).
    let deadline = Instant::now() + Duration::from_secs(10);
    let idle = loop {
        let c = counters(&socket);
        let f = frames(&c);
        let busy = f.iter().any(|q| q.2 > 0 || q.3 > 0);
        if !busy && c.queues.iter().all(|q| q.tcp.frames_lent == 0) || Instant::now() > deadline {
            break f;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("idle (free, fill, tx, held) per queue: {idle:?}");
    assert_eq!(idle.len(), 2, "{idle:?}");
    for (q, &(free, fill, tx, held)) in idle.iter().enumerate() {
        assert_eq!(
            (tx, held),
            (0, 0),
            "queue {q}: nothing sent or held when idle"
        );
        assert_eq!(
            free + fill,
            FRAMES,
            "queue {q}: every frame free or with the kernel: {idle:?}"
        );
    }
    app.stop();
}
