//! `flowlane http-server --idle-timeout` and a client that reads a long
//! response slowly (a small receive buffer, 1,000 bytes every 100 ms):
//! the bytes it acknowledges move, so it is not idle and gets the whole
//! response, in every execution model, though the server's sends make no
//! progress for longer than the timeout (a stack wakes a writer only once
//! a third of its send buffer is free).

mod tcp_common;

use flowlane_tests::{require_root, Bed};
use tcp_common::*;

const PORT: &str = "8085";
/// The response's body: about 12 s of reading.
const BODY: usize = 120_000;

/// One GET, read 1,000 bytes every 100 ms through a 4 KiB receive buffer;
/// prints how it ended (`complete`, `FIN`, `RST`, `timeout`), the bytes
/// read and the seconds.
const SLOW_READER: &str = r#"
import re, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(('10.99.0.1', int(sys.argv[1])))
# The bed's peer, not a host the root namespace's routes reach.
assert s.getsockname()[0].startswith('10.99.'), s.getsockname()
s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\n\r\n')
s.settimeout(10)
out, end, t0 = b'', 'timeout', time.time()
try:
    while True:
        d = s.recv(1000)
        if not d:
            end = 'FIN'
            break
        out += d
        if b'\r\n\r\n' in out:
            hl = out.index(b'\r\n\r\n') + 4
            m = re.search(rb'(?i)\r\ncontent-length: *(\d+)', out[:hl])
            if m and len(out) >= hl + int(m.group(1)):
                end = 'complete'
                break
        time.sleep(0.1)
except ConnectionResetError:
    end = 'RST'
except socket.timeout:
    pass
print(end, len(out), round(time.time() - t0, 1))
"#;

// One test per execution model, each on its own bed: the reading takes
// 12 s and little CPU, so the test threads run two models at once (the
// four in one test took 51 s).
#[test]
fn a_slow_reader_gets_its_whole_response_within_the_idle_timeout_xdp_rtc() {
    slow_reader_gets_its_whole_response(0, "hsr0");
}

#[test]
fn a_slow_reader_gets_its_whole_response_within_the_idle_timeout_xdp_queue_pair() {
    slow_reader_gets_its_whole_response(1, "hsr1");
}

#[test]
fn a_slow_reader_gets_its_whole_response_within_the_idle_timeout_kernel_rtc() {
    slow_reader_gets_its_whole_response(2, "hsr2");
}

#[test]
fn a_slow_reader_gets_its_whole_response_within_the_idle_timeout_kernel_queue_pair() {
    slow_reader_gets_its_whole_response(3, "hsr3");
}

/// The slow reader against `http-server` in `MODELS[model]`, on a bed of
/// its own (`tag`).
fn slow_reader_gets_its_whole_response(model: usize, tag: &str) {
    let model = MODELS[model];
    let what = model.join(" ");
    if !require_root(&format!(
        "a_slow_reader_gets_its_whole_response_within_the_idle_timeout ({what})"
    )) {
        return;
    }
    let bed = Bed::up(tag, 2);
    let body = "x".repeat(BODY);
    let args = [
        "http-server",
        "--port",
        PORT,
        "--body",
        &body,
        "--idle-timeout",
        "2",
        "--control-socket",
        "none",
        "--daemon-socket",
        "none",
    ];
    let app = start(&bed, &in_model(&args, model), 120);
    let out = peer_py(&bed, 60, SLOW_READER, &[PORT]);
    let summary = app
        .stop()
        .into_iter()
        .find(|v| v["event"] == "summary")
        .unwrap();
    assert!(out.starts_with("complete "), "{what}: {out}");
    let a = &summary["application"];
    assert_eq!(a["idle_closed"], 0, "{what}: {summary}");
    assert_eq!(a["requests"], 1, "{what}: {summary}");
}
