//! `--send-memory` reaches a queue's stack: with 1 MiB a queue, 64 kernel
//! clients whose echoes wait in the server (they read nothing for a while)
//! make the echo server's writes wait for memory (`tx_memory_waits`), and
//! every byte still comes back once they read. (At the default, 256 MiB,
//! the same clients make no write wait: the flag, not the load, is what
//! this sees.)

mod tcp_common;

use std::time::Duration;

use flowlane_tests::{require_root, Bed};
use tcp_common::*;

/// `argv[2]` connections to the echo server push up to `argv[3]` bytes
/// each for 2 s without reading (non-blocking: a send the windows refuse
/// is tried again), then read back exactly what each sent, all at once;
/// prints `ok` and the bytes sent.
const PUSH_THEN_READ: &str = r#"
import select, socket, sys, time
n, size = int(sys.argv[2]), int(sys.argv[3])
socks = []
for i in range(n):
    s = socket.create_connection((sys.argv[1], 7), timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    socks.append([s, 0])
print('ready', flush=True)
data, end = b'm' * size, time.time() + 2
while time.time() < end:
    for e in socks:
        if e[1] < size:
            try:
                e[1] += e[0].send(data[e[1]:])
            except (BlockingIOError, InterruptedError):
                pass
    time.sleep(0.01)
sent = sum(e[1] for e in socks)
assert sent > 0
# Read every connection at once: memory one holds frees for the others.
left = {e[0]: e[1] for e in socks}
end = time.time() + 40
while left and time.time() < end:
    ready, _, _ = select.select(list(left), [], [], 1)
    for s in ready:
        d = s.recv(1 << 16)
        assert d, left[s]
        left[s] -= len(d)
        if left[s] <= 0:
            assert left[s] == 0
            del left[s]
            s.close()
assert not left, sum(left.values())
print('ok', sent, flush=True)
"#;

/// The echo server's total `tx_memory_waits` after the clients, with
/// `extra` flags.
fn writes_waiting(name: &str, extra: &[&str]) -> u64 {
    let bed = Bed::up(name, 2);
    let mut args = vec!["echo-server", "--port", "7"];
    args.extend_from_slice(extra);
    let app = start(&bed, &args, 120);
    let mut client = peer_py_spawn(&bed, 60, PUSH_THEN_READ, &["10.99.0.1", "64", "262144"]);
    wait_ready(&mut client);
    let out = finish(client, Duration::from_secs(60));
    assert!(out.trim().starts_with("ok"), "{out}");
    let lines = app.stop();
    let t = totals(&lines);
    eprintln!("{extra:?}: client {}, {t}", out.trim());
    t["tx_memory_waits"]
        .as_u64()
        .unwrap_or_else(|| panic!("{t}"))
}

#[test]
fn a_small_send_memory_makes_writes_wait_and_loses_nothing() {
    if !require_root("a_small_send_memory_makes_writes_wait_and_loses_nothing") {
        return;
    }
    assert!(writes_waiting("sndm", &["--send-memory", "1"]) > 0);
}
