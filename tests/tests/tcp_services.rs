//! flowlane's TCP servers on a 2-queue test bed with the Linux kernel as
//! client: echo (python3), HTTP/1.1 keep-alive (curl, two requests on one
//! connection), `Connection: close` and HTTP/1.0 answered per RFC 9112 §9.6
//! (curl and python's http.client), and 1000 concurrent connections doing
//! request/response, all served and closed; curl over IPv6 and IPv4 to
//! the same server, and an IPv6 client whose segments carry extension
//! headers; and
//! TIME-WAIT entries of connections flowlane closed expire after 2 MSL;
//! and a slow-reading echo client, whose unread payload stays in the
//! frames it arrived in (zero-copy receive). The tests of the services'
//! behaviour run each service in every execution model ([`MODELS`]:
//! `--backend xdp|kernel`, `--mode rtc|queue-pair`): the same handlers.

mod tcp_common;

use std::process::Command;

use flowlane_tests::{in_ns, require_root, text, Bed};
use tcp_common::*;

const ECHO_CLIENT: &str = r#"
import os, socket, sys
for i in range(int(sys.argv[2])):
    s = socket.create_connection((sys.argv[1], 7), timeout=10)
    msg = os.urandom(1000 + 7919 * i)
    s.sendall(msg)
    s.shutdown(socket.SHUT_WR)
    got = b''
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    assert got == msg, (i, len(got), len(msg))
print('ok')
"#;

#[test]
fn kernel_client_gets_its_bytes_echoed() {
    if !require_root("kernel_client_gets_its_bytes_echoed") {
        return;
    }
    let bed = Bed::up("tec", 2);
    echo_in_every_model(&bed, "10.99.0.1");
}

/// On an IPv6-only network's interface (the bed's IPv4 addresses
/// removed), the services start and serve over IPv6 in every model: the
/// AF_XDP ones refused to start ("xsk0 has no IPv4 address: add one").
#[test]
fn an_ipv6_only_interface_is_served_in_every_model() {
    if !require_root("an_ipv6_only_interface_is_served_in_every_model") {
        return;
    }
    let bed = Bed::up("te6", 2);
    bed.remove_ipv4();
    echo_in_every_model(&bed, "fd99::1");
}

/// `echo-server` in every model on `bed`, 8 connections from the kernel to
/// `addr`: every byte echoed, every connection closed.
fn echo_in_every_model(bed: &Bed, addr: &str) {
    for model in MODELS {
        let backend = model.join(" ");
        let app = start(bed, &in_model(&["echo-server", "--port", "7"], model), 120);
        let out = peer_py(bed, 60, ECHO_CLIENT, &[addr, "8"]);
        assert_eq!(out.trim(), "ok", "{backend}");
        let lines = app.stop();
        let t = totals(&lines);
        assert_eq!(t["passive_opens"], 8, "{backend}: {t}");
        assert_eq!(t["connections"], 0, "{backend}: {t}");
        if model.contains(&"xdp") {
            assert_eq!(t["bad_tcp_checksum"], 0, "{t}");
            // The steering program's counters, per receive queue: the
            // segments it redirected to the service.
            let summary = lines.iter().find(|v| v["event"] == "summary").unwrap();
            let steering = summary["steering"].as_array().expect("steering counters");
            let redirected: u64 = steering
                .iter()
                .map(|q| q["redirected"].as_u64().unwrap())
                .sum();
            assert!(redirected >= 8 * 3, "{backend}: {steering:?}");
        }
    }
}

/// A client that sends 24 MiB and reads the echo slowly (64 KiB every
/// 10 ms, in another thread): the echo server's send buffer stays full, so
/// it reads only what it can send back and leaves the rest of what came in
/// unread, in the frames it arrived in (zero-copy receive).
const SLOW_READER: &str = r#"
import hashlib, os, socket, sys, threading, time
s = socket.create_connection((sys.argv[1], 7), timeout=30)
msg = os.urandom(int(sys.argv[2]))
got = hashlib.sha256()
n = [0]
def read():
    while True:
        d = s.recv(65536)
        if not d:
            break
        got.update(d)
        n[0] += len(d)
        time.sleep(0.01)
t = threading.Thread(target=read)
t.start()
print('ready', flush=True)
s.sendall(msg)
s.shutdown(socket.SHUT_WR)
t.join()
s.close()
assert n[0] == len(msg), (n[0], len(msg))
assert got.digest() == hashlib.sha256(msg).digest()
print('ok')
"#;

/// Zero-copy receive on the bed: while the echo server cannot send (its
/// client reads slowly), what it has not read stays in the received frames
/// across its callbacks (`frames_lent` > 0 mid-transfer), every byte comes
/// back in order, and every frame is given back once the connection is
/// gone.
#[test]
fn a_slow_reader_leaves_payload_in_lent_frames_and_gets_every_byte() {
    if !require_root("a_slow_reader_leaves_payload_in_lent_frames_and_gets_every_byte") {
        return;
    }
    let bed = Bed::up("tzc", 2);
    let app = start(&bed, &["echo-server", "--port", "7"], 180);
    let mut client = peer_py_spawn(
        &bed,
        120,
        SLOW_READER,
        &["10.99.0.1", &(24 << 20).to_string()],
    );
    wait_ready(&mut client);
    // 1.5 s in, the client has read at most 9.6 MB of 24 MiB.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mid = app.report_now()["counters"]["total"].clone();
    eprintln!(
        "mid-transfer: lent {} kept {} buffer memory {}",
        mid["frames_lent"], mid["frames_kept"], mid["buffer_memory"]
    );
    let out = finish(client, std::time::Duration::from_secs(120));
    assert_eq!(out.trim(), "ok");
    assert!(mid["frames_lent"].as_u64() > Some(0), "mid-transfer: {mid}");
    let lines = app.stop();
    let t = totals(&lines);
    assert!(t["frames_kept"].as_u64() > Some(1000), "{t}");
    assert_eq!(t["frames_lent"], 0, "{t}");
    // The window closed and opened against the kernel's full-sized
    // segments (not multiples of the window scale's unit: a full buffer's
    // window was truncated, `advertise_window`) without a byte dropped
    // inside it.
    assert_eq!(t["recv_buffer_overrun"], 0, "{t}");
    // How often its window retracted (11 to 49 in three runs here).
    eprintln!("window retractions: {}", t["window_retractions"]);
    assert!(t["window_retractions"].is_u64(), "{t}");
    assert_eq!(t["connections"], 0, "{t}");
}

#[test]
fn curl_gets_two_responses_on_one_connection() {
    if !require_root("curl_gets_two_responses_on_one_connection") {
        return;
    }
    let bed = Bed::up("tht", 2);
    for model in MODELS {
        curl_keep_alive(&bed, model);
    }
}

fn curl_keep_alive(bed: &Bed, model: &[&str]) {
    let backend = model.join(" ");
    let app = start(
        bed,
        &in_model(
            &[
                "http-server",
                "--port",
                "8080",
                "--body",
                "flowlane says hi\n",
            ],
            model,
        ),
        120,
    );
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.peer_ns, "timeout", "30"])
        .args(["curl", "-sv", "--max-time", "10"])
        .args(["http://10.99.0.1:8080/a", "http://10.99.0.1:8080/b"])
        .output()
        .unwrap();
    assert!(o.status.success(), "curl: {}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "flowlane says hi\nflowlane says hi\n"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Re-using existing connection") || err.contains("Reusing existing connection"),
        "curl did not keep the connection alive: {err}"
    );
    // curl has closed; in queue-pair mode the close goes through the
    // application thread and back, so wait for the service to have
    // closed its side too before stopping it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while app.report_now()["counters"]["total"]["connections"] != 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines = app.stop();
    let t = totals(&lines);
    assert_eq!(
        t["passive_opens"], 1,
        "{backend}: one connection for both requests: {t}"
    );
    assert_eq!(t["connections"], 0, "{backend}: {t}");
}

/// An IPv6 echo client whose segments carry extension headers (argv: the
/// server's address, then `dst` for a Destination Options header or
/// `hbh+dst` for Hop-by-Hop Options too; both sticky options the kernel
/// puts on every segment of the connection, each one PadN of four bytes).
const EXT_HEADER_CLIENT: &str = r#"
import os, socket, sys
pad = bytes([0, 0, 1, 4, 0, 0, 0, 0])
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.settimeout(10)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_DSTOPTS, pad)
if sys.argv[2] == 'hbh+dst':
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_HOPOPTS, pad)
s.connect((sys.argv[1], 7))
msg = os.urandom(300000)
s.sendall(msg)
s.shutdown(socket.SHUT_WR)
got = b''
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
s.close()
assert got == msg, (len(got), len(msg))
print('ok')
"#;

/// Segments to flowlane's port behind IPv6 extension headers are
/// flowlane's: the XDP program walks the headers to the port (the kernel,
/// handed them, finds no socket and resets the connection).
#[test]
fn ipv6_segments_behind_extension_headers_reach_flowlane() {
    let test = "ipv6_segments_behind_extension_headers_reach_flowlane";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("tx6", 2);
    let app = start(&bed, &["echo-server", "--port", "7"], 120);
    for headers in ["dst", "hbh+dst"] {
        let out = peer_py(&bed, 60, EXT_HEADER_CLIENT, &["fd99::1", headers]);
        assert_eq!(out.trim(), "ok", "{headers}");
    }
    let t = totals(&app.stop());
    assert_eq!(t["passive_opens"], 2, "{t}");
    assert_eq!(t["connections"], 0, "{t}");
    assert_eq!(t["bad_tcp_checksum"], 0, "{t}");
}

#[test]
fn curl_reaches_the_same_server_over_ipv6_and_ipv4() {
    if !require_root("curl_reaches_the_same_server_over_ipv6_and_ipv4") {
        return;
    }
    let bed = Bed::up("th6", 2);
    for model in MODELS {
        curl_dual_stack(&bed, model);
    }
}

fn curl_dual_stack(bed: &Bed, model: &[&str]) {
    let backend = model.join(" ");
    let app = start(
        bed,
        &in_model(
            &["http-server", "--port", "8080", "--body", "dual stack\n"],
            model,
        ),
        120,
    );
    for (flag, url) in [
        ("-6", "http://[fd99::1]:8080/"),
        ("-4", "http://10.99.0.1:8080/"),
        ("-6", "http://[fd99::1]:8080/again"),
    ] {
        let o = Command::new("ip")
            .args(["netns", "exec", &bed.peer_ns, "timeout", "30"])
            .args(["curl", "-s", flag, "--max-time", "10", url])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{backend}: curl {flag} {url}: {}",
            text(&o)
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout), "dual stack\n", "{url}");
    }
    let lines = app.stop();
    let t = totals(&lines);
    assert_eq!(t["passive_opens"], 3, "{backend}: {t}");
    assert_eq!(t["connections"], 0, "{backend}: {t}");
    if model.contains(&"xdp") {
        assert_eq!(t["bad_tcp_checksum"], 0, "{t}");
    }
}

/// Lower-cased `Connection` response headers curl printed (`-v`: `< name: value`).
fn curl_connection_headers(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("< "))
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| l.starts_with("connection:"))
        .collect()
}

/// python's http.client: what `Connection` header each response carried and
/// whether the server then closed the connection or kept it open (argv:
/// port). One line per case. Kept open is seen as a second request
/// answered on it, not as no FIN within a wait (5 s a case, most of the
/// test's time).
const HTTP_CLIENT: &str = r#"
import http.client, socket, sys
port = int(sys.argv[1])
def after(sock):
    sock.settimeout(10)
    try:
        sock.sendall(b'GET / HTTP/1.1\r\nHost: a\r\n\r\n')
        got = b''
        while len(got) < 12:
            d = sock.recv(65536)
            if not d:
                return 'closed'
            got += d
    except ConnectionError:
        return 'closed'
    except socket.timeout:
        return 'stalled'
    return 'open' if got.startswith(b'HTTP/1.1 200') else 'answered %r' % got
for name, version, hdrs in [
    ('close11', 11, {'Connection': 'foo, close'}),
    ('plain10', 10, {}),
    ('keepalive10', 10, {'Connection': 'Keep-Alive'}),
    ('plain11', 11, {}),
]:
    c = http.client.HTTPConnection('10.99.0.1', port, timeout=10)
    c._http_vsn, c._http_vsn_str = version, 'HTTP/1.%d' % (version - 10)
    c.connect()
    sock = c.sock.dup()  # http.client closes its own on `Connection: close`
    c.request('GET', '/', headers=hdrs)
    r = c.getresponse()
    body = r.read()
    assert r.status == 200 and body == b'hi\n', (name, r.status, body)
    print(name, r.getheader('Connection'), after(sock))
    sock.close()
"#;

/// One connection, every request pipelined in one write: a HEAD (no body
/// back), a chunked POST, a 20 KB PUT that asks for `100 Continue`, a GET
/// that closes. Prints each status line and whether a body followed, then
/// whether the server closed.
const HTTP_FRAMING: &str = r#"
import socket, sys
port = int(sys.argv[1])
s = socket.create_connection(('10.99.0.1', port), timeout=10)
reqs = (b'HEAD / HTTP/1.1\r\nHost: a\r\n\r\n'
        b'POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'
        b'PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n' + b'x' * 20000 +
        b'GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')
s.sendall(reqs)
data = b''
while True:
    d = s.recv(65536)
    if not d:
        break
    data += d
while data:
    head, _, data = data.partition(b'\r\n\r\n')
    status = head.split(b'\r\n')[0].decode()
    length = 0
    for line in head.split(b'\r\n')[1:]:
        k, _, v = line.partition(b':')
        if k.strip().lower() == b'content-length':
            length = int(v)
    head_only = status.startswith('HTTP/1.1 200') and data[:length] != b'hi\n'
    if status.startswith('HTTP/1.1 200') and not head_only:
        data = data[length:]
    print(status, 'no-body' if head_only else 'body')
print('closed')
"#;

/// Three pipelined GETs of a 100 KB response in one write (more than a
/// queue pair's send credit): all three arrive.
const HTTP_BIG_PIPELINE: &str = r#"
import socket, sys
port, size = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(('10.99.0.1', port), timeout=20)
s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\n\r\n' * 2 + b'GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')
data = b''
while True:
    d = s.recv(1 << 20)
    if not d:
        break
    data += d
print(data.count(b'HTTP/1.1 200 OK'), data.count(b'y' * size))
"#;

#[test]
fn http_server_says_connection_close_when_it_closes() {
    if !require_root("http_server_says_connection_close_when_it_closes") {
        return;
    }
    let bed = Bed::up("thc", 2);
    for model in MODELS {
        connection_close(&bed, model);
    }
}

fn connection_close(bed: &Bed, model: &[&str]) {
    let backend = model.join(" ");
    let app = start(
        bed,
        &in_model(&["http-server", "--port", "8082", "--body", "hi\n"], model),
        120,
    );
    let curl = |extra: &[&str]| {
        let o = Command::new("ip")
            .args(["netns", "exec", &bed.peer_ns, "timeout", "30"])
            .args(["curl", "-sv", "--max-time", "10"])
            .args(extra)
            .arg("http://10.99.0.1:8082/")
            .output()
            .unwrap();
        assert!(o.status.success(), "curl {extra:?}: {}", text(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\n");
        curl_connection_headers(&String::from_utf8_lossy(&o.stderr))
    };
    assert_eq!(curl(&["-H", "Connection: close"]), ["connection: close"]);
    assert_eq!(curl(&["--http1.0"]), ["connection: close"]);
    assert_eq!(
        curl(&["--http1.0", "-H", "Connection: keep-alive"]),
        ["connection: keep-alive"]
    );
    assert_eq!(curl(&[]), Vec::<String>::new(), "keep-alive unchanged");

    let out = peer_py(bed, 60, HTTP_CLIENT, &["8082"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "close11 close closed",
            "plain10 close closed",
            "keepalive10 keep-alive open",
            "plain11 None open",
        ],
        "{backend}: {out}"
    );
    let out = peer_py(bed, 60, HTTP_FRAMING, &["8082"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "HTTP/1.1 200 OK no-body",
            "HTTP/1.1 200 OK body",
            "HTTP/1.1 100 Continue body",
            "HTTP/1.1 200 OK body",
            "HTTP/1.1 200 OK body",
            "closed",
        ],
        "{backend}: {out}"
    );
    let t = totals(&app.stop());
    assert_eq!(t["passive_opens"], 9, "{backend}: {t}");

    // Responses larger than what a send takes at once (a queue pair's
    // credit, a kernel socket's buffer): the rest goes at `on_writable`.
    let size = 100_000;
    let body = "y".repeat(size);
    let app = start(
        bed,
        &in_model(&["http-server", "--port", "8084", "--body", &body], model),
        120,
    );
    let out = peer_py(bed, 60, HTTP_BIG_PIPELINE, &["8084", &size.to_string()]);
    assert_eq!(out.trim(), "3 3", "{backend}: {out}");
    app.stop();
}

const MANY_CLIENTS: &str = r#"
import socket, sys, threading
n = int(sys.argv[1])
socks = []
for i in range(n):
    s = socket.create_connection(('10.99.0.1', 7), timeout=30)
    socks.append(s)
errors = []
def run(i, s):
    try:
        msg = b'request %d ' % i * 10
        s.sendall(msg)
        got = b''
        while len(got) < len(msg):
            d = s.recv(65536)
            if not d:
                break
            got += d
        if got != msg:
            errors.append((i, got))
        s.shutdown(socket.SHUT_WR)
        if s.recv(10) != b'':
            errors.append((i, 'no close'))
        s.close()
    except Exception as e:
        errors.append((i, repr(e)))
threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(socks)]
for t in threads: t.start()
for t in threads: t.join()
print(len(errors), errors[:3])
"#;

#[test]
fn concurrent_connections_all_served_and_closed() {
    if !require_root("concurrent_connections_all_served_and_closed") {
        return;
    }
    let n: u32 = 1000;
    let bed = Bed::up("tmc", 2);
    for model in MODELS {
        let backend = model.join(" ");
        let app = start(&bed, &in_model(&["echo-server", "--port", "7"], model), 180);
        let out = peer_py(&bed, 120, MANY_CLIENTS, &[&n.to_string()]);
        assert!(out.starts_with("0 "), "{backend}: client errors: {out}");
        // The client closed first: flowlane's side ends in LAST-ACK ->
        // CLOSED; give the last ACKs a moment.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let lines = app.stop();
        let t = totals(&lines);
        assert_eq!(t["passive_opens"], n, "{backend}: {t}");
        assert_eq!(t["closed"], n, "{backend}: {t}");
        assert_eq!(
            t["connections"], 0,
            "{backend}: no connection left open: {t}"
        );
    }
}

/// `n` HTTP requests, each on its own connection with `Connection: close`,
/// so that flowlane closes first and its side goes through TIME-WAIT.
const CLOSE_CLIENT: &str = r#"
import socket, sys
n = int(sys.argv[1])
for i in range(n):
    s = socket.create_connection(('10.99.0.1', 8081), timeout=10)
    s.sendall(b'GET /%d HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' % i)
    got = b''
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    assert got.startswith(b'HTTP/1.1 200'), got[:40]
print('ok')
"#;

#[test]
fn time_wait_entries_expire() {
    if !require_root("time_wait_entries_expire") {
        return;
    }
    let bed = Bed::up("ttw", 2);
    let n = 20u32;
    // Default MSL (30 s): right after the requests every connection flowlane
    // closed is still in TIME-WAIT.
    let app = start(&bed, &["http-server", "--port", "8081"], 60);
    assert_eq!(
        peer_py(&bed, 60, CLOSE_CLIENT, &[&n.to_string()]).trim(),
        "ok"
    );
    let t = totals(&app.stop());
    assert_eq!(t["passive_opens"], n, "{t}");
    assert_eq!(t["connections"], n, "all in TIME-WAIT with a 30 s MSL: {t}");
    // MSL 250 ms: TIME-WAIT (2 MSL) is over half a second after the last close.
    let app = start(
        &bed,
        &["http-server", "--port", "8081", "--msl-ms", "250"],
        60,
    );
    assert_eq!(
        peer_py(&bed, 60, CLOSE_CLIENT, &[&n.to_string()]).trim(),
        "ok"
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let t = totals(&app.stop());
    assert_eq!(t["passive_opens"], n, "{t}");
    assert_eq!(t["closed"], n, "{t}");
    assert_eq!(t["connections"], 0, "TIME-WAIT entries expired: {t}");
}

/// Two connections to `argv[1]:argv[2]`: one that sends `argv[3]` (`-`:
/// nothing) and then nothing more, one that sends a byte every 0.4 s (and
/// reads its echo where there is one, `argv[4]`) until the quiet one has
/// ended and 4 s have gone by (twice the timeout: past the look that would
/// close a connection idle since it opened), 5.2 s at most. Prints `busy
/// ok` if the busy one was never closed, then how the quiet one ended, and
/// after how many seconds.
const IDLE_CLIENT: &str = r#"
import select, socket, sys, time
addr = (sys.argv[1], int(sys.argv[2]))
quiet = socket.create_connection(addr, timeout=20)
if sys.argv[3] != '-':
    quiet.sendall(sys.argv[3].encode())
t = time.monotonic()
busy = socket.create_connection(addr, timeout=5)
kind = sys.argv[4]
end = None
def quiet_ended():
    # Reads what the quiet one has (an echo, its FIN, a reset): how it
    # ended and when, or None while it is open.
    try:
        if quiet.recv(100) == b'':
            return ('fin', time.monotonic() - t)
    except ConnectionResetError:
        return ('rst', time.monotonic() - t)
    return None
for _ in range(13):
    if kind == 'http':
        # Whole requests: a head trickling in is itself closed once
        # older than the timeout (slowloris).
        busy.sendall(b'GET / HTTP/1.1\r\nHost: a\r\n\r\n')
        got = b''
        while b'\r\n\r\n' not in got:
            got += busy.recv(1000)
        assert got.startswith(b'HTTP/1.1 200'), got
        head, body = got.split(b'\r\n\r\n', 1)
        length = int(head.lower().split(b'content-length:')[1].split(b'\r\n')[0])
        while len(body) < length:
            body += busy.recv(1000)
    else:
        busy.sendall(b'x')
        if kind == 'echo':
            assert busy.recv(10) == b'x'
    if end is not None and time.monotonic() - t >= 4:
        break
    if end is None and select.select([quiet], [], [], 0.4)[0]:
        end = quiet_ended()
    elif end is not None:
        time.sleep(0.4)
busy.close()
print('busy ok')
while end is None:
    end = quiet_ended()
print(end[0], round(end[1]))
"#;

/// `--idle-timeout 2`: a connection that moves no byte for 2 s is closed
/// by each server (echo: FIN, in every execution model; HTTP in the middle
/// of a request and the bulk sink in the middle of a transfer: a reset),
/// one that keeps moving bytes is not, and the summary counts the closes.
/// Three tests, each on its own bed, so that the test threads run them two
/// at once (about 5 s of waiting a case, little CPU; 35 s in one test).
#[test]
fn idle_connections_are_closed_and_busy_ones_are_not_by_echo_on_af_xdp() {
    idle_cases(
        "idle_connections_are_closed_and_busy_ones_are_not_by_echo_on_af_xdp",
        "tid0",
        &[ECHO],
        &MODELS[..2],
    );
}

#[test]
fn idle_connections_are_closed_and_busy_ones_are_not_by_echo_on_kernel_sockets() {
    idle_cases(
        "idle_connections_are_closed_and_busy_ones_are_not_by_echo_on_kernel_sockets",
        "tid1",
        &[ECHO],
        &MODELS[2..],
    );
}

#[test]
fn idle_connections_are_closed_and_busy_ones_are_not_by_http_and_the_sink() {
    idle_cases(
        "idle_connections_are_closed_and_busy_ones_are_not_by_http_and_the_sink",
        "tid2",
        &[
            (
                &["http-server", "--port", "80"],
                "80",
                "GET / HTTP/1.1\r\n",
                "rst",
            ),
            (&["bulk-sink", "--port", "5001"], "5001", "bytes", "rst"),
        ],
        &MODELS[..1],
    );
}

/// A server's arguments, its port, what the quiet connection sends, and how
/// the server ends it (`fin`, `rst`).
type IdleCase<'a> = (&'a [&'a str], &'a str, &'a str, &'a str);

/// The echo server: the quiet connection's FIN.
const ECHO: IdleCase<'static> = (&["echo-server", "--port", "7"], "7", "hi", "fin");

/// Each of `cases` in each of `models`, on one bed (`tag`), with
/// [`IDLE_CLIENT`].
fn idle_cases(test: &str, tag: &str, cases: &[IdleCase<'_>], models: &[&[&str]]) {
    if !require_root(test) {
        return;
    }
    let bed = Bed::up(tag, 2);
    for &(args, port, send, end) in cases {
        for model in models {
            let what = format!("{} {}", args[0], model.join(" "));
            let args = [args, &["--idle-timeout", "2"][..]].concat();
            let app = start(&bed, &in_model(&args, model), 60);
            let kind = match args[0] {
                "echo-server" => "echo",
                "http-server" => "http",
                _ => "-",
            };
            let out = peer_py(&bed, 40, IDLE_CLIENT, &["10.99.0.1", port, send, kind]);
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines[0], "busy ok", "{what}: {out}");
            let (how, secs) = lines[1].split_once(' ').unwrap();
            assert_eq!(how, end, "{what}: {out}");
            // Idle from about when the busy connection opened, seen
            // within 0.4 s of its end: the 2 s, the once-a-second look,
            // and slack for a loaded machine.
            let secs: u64 = secs.parse().unwrap();
            assert!((2..=6).contains(&secs), "{what}: {out}");
            // The sink exits 1 when a transfer failed: the idle one did.
            let all = if args[0] == "bulk-sink" {
                app.stop_failed()
            } else {
                app.stop()
            };
            let summary = all.iter().find(|v| v["event"] == "summary").unwrap();
            assert_eq!(
                summary["application"]["idle_closed"], 1,
                "{what}: {summary}"
            );
            if args[0] == "bulk-sink" {
                let reported = all
                    .iter()
                    .find(|v| v["event"] == "sink" && v["close"] == "IdleTimeout")
                    .unwrap_or_else(|| panic!("no idle transfer in {all:?}"));
                assert_eq!(reported["bytes"], 5, "{reported}");
            }
        }
    }
}

/// A kernel server on the interface's secondary address, on a port
/// flowlane serves on its own address: its client reaches it (the steering
/// program took every frame to that port, whatever the address, and
/// flowlane dropped them as not its own).
const KERNEL_ON_SECONDARY: &str = r#"
import socket, sys, threading
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], 7))
l.listen()
print('ready', flush=True)
c, _ = l.accept()
c.sendall(b'kernel:' + c.recv(100))
c.close()
"#;

const CLIENT_OF: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], 7), timeout=5)
s.sendall(b'hi')
s.shutdown(socket.SHUT_WR)
got = b''
while True:
    d = s.recv(100)
    if not d:
        break
    got += d
print(got.decode())
"#;

#[test]
fn the_kernel_keeps_the_interface_s_other_addresses() {
    if !require_root("the_kernel_keeps_the_interface_s_other_addresses") {
        return;
    }
    let bed = Bed::up("tsec", 1);
    let add = in_ns(
        &bed.ns,
        &["ip", "addr", "add", "10.99.0.11/24", "dev", "xsk0"],
    );
    assert!(add.status.success(), "{}", text(&add));
    let app = start(&bed, &["echo-server", "--port", "7"], 120);
    let kernel = std::process::Command::new("ip")
        .args(["netns", "exec", &bed.ns, "timeout", "60", "python3", "-c"])
        .args([KERNEL_ON_SECONDARY, "10.99.0.11"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    /// Stopped however the test ends.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            flowlane_tests::kill_and_reap(&mut self.0);
        }
    }
    let mut kernel = Reaped(kernel);
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(kernel.0.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    let out = peer_py(&bed, 30, CLIENT_OF, &["10.99.0.11"]);
    assert_eq!(out.trim(), "kernel:hi", "the kernel's server answers");
    let out = peer_py(&bed, 30, CLIENT_OF, &["10.99.0.1"]);
    assert_eq!(out.trim(), "hi", "flowlane's echo answers");
    drop(kernel);
    app.stop();
}
