//! Shared by the `tcp_*` integration tests: flowlane's TCP examples run on a
//! test bed (from the root namespace with `--bed`, which re-executes them
//! inside the bed), kernel peers in python3, and time bounds everywhere so
//! that a stall fails instead of hanging.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use flowlane_tests::{
    flowlane_bin, in_ns, kill_and_reap, ready_within, terminate, text, wait_within, Bed,
};
use serde_json::Value;

/// The Internet checksum (RFC 1071) in Python, `csum(bytes)`, for the
/// scripts that build raw segments: [`with_csum`] puts it in front of one.
const PY_CSUM: &str = r#"
import struct
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
"#;

/// `script` with [`PY_CSUM`] in front of it.
pub(crate) fn with_csum(script: &str) -> String {
    format!("{PY_CSUM}{script}")
}

/// Kernel clients' `local_port sha256` lines as sha256 by peer address
/// (`10.99.0.2:PORT`, as the sink reports its peers).
pub(crate) fn sent_by_peer(sent: &str) -> std::collections::HashMap<String, String> {
    sent.lines()
        .map(|l| {
            let (port, sha) = l.split_once(' ').expect("port sha256");
            (format!("10.99.0.2:{port}"), sha.to_string())
        })
        .collect()
}

/// The execution models every service test that is not about flowlane's
/// own TCP runs in: the same handlers run to completion on AF_XDP, on
/// application threads over AF_XDP (queue-pair mode), on kernel sockets,
/// and on application threads over kernel sockets.
pub(crate) const MODELS: [&[&str]; 4] = [
    &["--backend", "xdp", "--mode", "rtc"],
    &["--backend", "xdp", "--mode", "queue-pair"],
    &["--backend", "kernel", "--mode", "rtc"],
    &["--backend", "kernel", "--mode", "queue-pair"],
];

/// `args` followed by `model`'s flags.
pub(crate) fn in_model<'a>(args: &[&'a str], model: &[&'a str]) -> Vec<&'a str> {
    [args, model].concat()
}

/// A flowlane TCP example running in the background.
pub(crate) struct App {
    child: Option<Child>,
    /// Its `--report` file.
    pub(crate) report: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// Starts `flowlane <args> --bed <bed> --report F --timeout <limit>` and
/// waits until its data path is up.
pub(crate) fn start(bed: &Bed, args: &[&str], limit_s: u64) -> App {
    start_as(bed, args, limit_s, true)
}

/// As [`start`], but run in the bed's namespace on its `xsk0` as on any
/// NIC (`ip netns exec`, `--iface xsk0`, no `--bed`): the service knows
/// nothing of the bed's emulated RSS.
pub(crate) fn start_in_ns(bed: &Bed, args: &[&str], limit_s: u64) -> App {
    start_as(bed, args, limit_s, false)
}

fn start_as(bed: &Bed, args: &[&str], limit_s: u64, with_bed: bool) -> App {
    let flag = |name: &str, default: &'static str| {
        args.iter()
            .position(|a| *a == name)
            .map_or(default.to_string(), |i| args[i + 1].to_string())
    };
    let tag = format!(
        "{}-{}-{}-{}",
        bed.name,
        args[0],
        flag("--backend", "xdp"),
        flag("--mode", "rtc")
    );
    let dir = std::env::temp_dir();
    let report = dir.join(format!("{tag}.json"));
    let stdout = dir.join(format!("{tag}.out"));
    let stderr = dir.join(format!("{tag}.err"));
    let _ = std::fs::remove_file(&report);
    let mut cmd = if with_bed {
        let mut c = Command::new(flowlane_bin());
        c.args(args).args(["--bed", &bed.name]);
        c
    } else {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &bed.ns])
            .arg(flowlane_bin())
            .args(args)
            .args(["--iface", "xsk0"]);
        c
    };
    let child = cmd
        .args(["--timeout", &limit_s.to_string(), "--report"])
        .arg(&report)
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let mut app = App {
        child: Some(child),
        report,
        stdout,
        stderr,
    };
    let report = app.report.clone();
    let child = app.child.as_mut().unwrap();
    match ready_within(child, Duration::from_secs(30), || report.exists()) {
        Ok(()) => {}
        Err(Some(st)) => panic!("{args:?} exited early ({st}): {}", app.stderr_text()),
        Err(None) => panic!("{args:?} did not start"),
    }
    app
}

impl App {
    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (at most `limit`) for the app to exit by itself; returns its
    /// JSON lines. Fails on a non-zero exit.
    pub(crate) fn wait(mut self, limit: Duration) -> Vec<Value> {
        self.finish(limit)
    }

    /// As [`App::wait`], with what it wrote on stderr (move lines,
    /// warnings).
    pub(crate) fn wait_with_stderr(mut self, limit: Duration) -> (Vec<Value>, String) {
        let lines = self.finish(limit);
        (lines, self.stderr_text())
    }

    /// Waits (at most `limit`) for the app to fail by itself (a non-zero
    /// exit); returns its JSON lines and what it wrote on stderr.
    pub(crate) fn wait_failed_with_stderr(mut self, limit: Duration) -> (Vec<Value>, String) {
        let lines = self.finish_expecting(limit, false);
        (lines, self.stderr_text())
    }

    fn finish(&mut self, limit: Duration) -> Vec<Value> {
        self.finish_expecting(limit, true)
    }

    /// Waits (at most `limit`) for the exit; asserts it succeeded, or with
    /// `!success` that it failed; returns the JSON lines.
    fn finish_expecting(&mut self, limit: Duration, success: bool) -> Vec<Value> {
        let mut child = self.child.take().unwrap();
        let Some(st) = wait_within(&mut child, limit) else {
            kill_and_reap(&mut child);
            panic!(
                "flowlane did not finish in {limit:?}: {}\n{:?}",
                self.stderr_text(),
                self.lines()
            );
        };
        let lines = self.lines();
        assert_eq!(
            st.success(),
            success,
            "flowlane exited with {st}: {}\n{lines:?}",
            self.stderr_text()
        );
        lines
    }

    /// Its `--report` now (SIGUSR1; waits at most 5 s for the file).
    pub(crate) fn report_now(&self) -> Value {
        let _ = std::fs::remove_file(&self.report);
        let pid = self.child.as_ref().unwrap().id().to_string();
        let _ = Command::new("kill").args(["-USR1", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(t) = std::fs::read_to_string(&self.report) {
                if let Ok(v) = serde_json::from_str(&t) {
                    return v;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no report from flowlane: {}", self.stderr_text());
    }

    /// SIGTERM, then its JSON lines (the last is the summary).
    pub(crate) fn stop(self) -> Vec<Value> {
        terminate(self.child.as_ref().unwrap());
        self.wait(Duration::from_secs(20))
    }

    /// SIGTERM, then its JSON lines; asserts that it exits non-zero (a
    /// bulk sink some transfer of which failed).
    pub(crate) fn stop_failed(mut self) -> Vec<Value> {
        terminate(self.child.as_ref().unwrap());
        self.finish_expecting(Duration::from_secs(20), false)
    }

    /// As [`App::stop`], with what it wrote on stderr.
    pub(crate) fn stop_with_stderr(self) -> (Vec<Value>, String) {
        terminate(self.child.as_ref().unwrap());
        self.wait_with_stderr(Duration::from_secs(20))
    }

    /// SIGKILL, as a crash: nothing of the service's clean-up runs.
    pub(crate) fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.stdout)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_reap(&mut c);
        }
        // Its files go with it (a failed assertion has printed what it
        // needed of them).
        for f in [&self.report, &self.stdout, &self.stderr] {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Kernel client with a small receive buffer: one HTTP request to
/// `argv[1]:argv[2]`; once the head of its response came it prints
/// `ready`, then reads `argv[4]` bytes every `argv[3]` seconds until the
/// connection ends, and prints how: `{"end": "FIN"|"RST"|"open", "body":
/// bytes of body read, "length": its Content-Length, "after_s": seconds
/// from `ready` to the end}`.
pub(crate) const SLOW_READER: &str = r#"
import json, re, socket, sys, time
host, port, pace, chunk = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.settimeout(20)
s.connect((host, port))
s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\n\r\n')
got = b''
while b'\r\n\r\n' not in got:
    d = s.recv(chunk)
    if not d:
        sys.exit('closed before its head')
    got += d
print('ready', flush=True)
t0 = time.monotonic()
end = 'open'
while time.monotonic() - t0 < 15:
    time.sleep(pace)
    try:
        d = s.recv(chunk)
    except ConnectionResetError:
        end = 'RST'
        break
    if not d:
        end = 'FIN'
        break
    got += d
head, body = got.split(b'\r\n\r\n', 1)
length = int(re.search(rb'content-length: (\d+)', head, re.I).group(1))
print(json.dumps({'end': end, 'body': len(body), 'length': length,
                  'after_s': round(time.monotonic() - t0, 2)}), flush=True)
"#;

/// Kernel clients: `argv[3]` keep-alive connections to `argv[1]:argv[2]`,
/// each with one HTTP request answered (up to the end of a head: an echo
/// server's echo answers too); prints `ready`, then waits (at most
/// `argv[4]` seconds) for each connection to end and prints how they
/// ended: `{"RST": n, "FIN": n, "open": n}`.
pub(crate) const HOLD_KEEPALIVE: &str = r#"
import json, select, socket, sys, time
host, port, n, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks = []
for _ in range(n):
    s = socket.create_connection((host, port), timeout=10)
    assert s.getsockname()[0].startswith('10.99.'), s.getsockname()
    s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\n\r\n')
    got = b''
    while b'\r\n\r\n' not in got:
        d = s.recv(4096)
        if not d:
            sys.exit('closed before its answer')
        got += d
    socks.append(s)
print('ready', flush=True)
ended = {}
left = set(socks)
deadline = time.monotonic() + wait
while left and time.monotonic() < deadline:
    readable, _, _ = select.select(list(left), [], [], 0.1)
    for s in readable:
        try:
            if s.recv(65536):
                continue  # the rest of an answer
            ended[s] = 'FIN'
        except ConnectionResetError:
            ended[s] = 'RST'
        left.discard(s)
how = list(ended.values())
print(json.dumps({'RST': how.count('RST'), 'FIN': how.count('FIN'), 'open': len(left)}), flush=True)
"#;

/// The summary line's total TCP counters.
pub(crate) fn totals(lines: &[Value]) -> Value {
    let s = lines
        .iter()
        .find(|v| v["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {lines:?}"));
    s["counters"]["total"].clone()
}

/// Runs a python3 script in the bed's peer namespace (killed after
/// `limit_s` seconds); asserts success and returns stdout.
pub(crate) fn peer_py(bed: &Bed, limit_s: u64, script: &str, args: &[&str]) -> String {
    let o = peer_py_output(bed, limit_s, script, args);
    assert!(o.status.success(), "kernel peer failed: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// As [`peer_py`], without the assertion.
pub(crate) fn peer_py_output(bed: &Bed, limit_s: u64, script: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.peer_ns,
            "timeout",
            &limit_s.to_string(),
        ])
        .args(["python3", "-c", script])
        .args(args)
        .output()
        .unwrap()
}

/// Starts a python3 script in the peer namespace in the background.
pub(crate) fn peer_py_spawn(bed: &Bed, limit_s: u64, script: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.peer_ns,
            "timeout",
            &limit_s.to_string(),
        ])
        .args(["python3", "-c", script])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Kernel client: sends `argv[2]` bytes of random data to `argv[1]`
/// (host:port), half-closes, waits for the server's close; prints the
/// sha256 of what it sent, and with `argv[3]` = `timed` a second line: the
/// seconds from the connection's establishment to the server's close (what
/// `bulk-source` reports as `secs`).
pub(crate) const KERNEL_SEND: &str = r#"
import hashlib, os, socket, sys, time
host, port = sys.argv[1].rsplit(':', 1)
host = host.strip('[]')
total = int(sys.argv[2])
timed = len(sys.argv) > 3 and sys.argv[3] == 'timed'
s = socket.create_connection((host, int(port)), timeout=30)
t0 = time.monotonic()
h = hashlib.sha256()
block = bytearray(os.urandom(1 << 20))
sent = 0
while sent < total:
    n = min(len(block), total - sent)
    block[0:8] = sent.to_bytes(8, 'little')
    chunk = bytes(block[:n])
    s.sendall(chunk)
    h.update(chunk)
    sent += n
s.shutdown(socket.SHUT_WR)
while s.recv(65536):
    pass
s.close()
print(h.hexdigest())
if timed:
    print(round(time.monotonic() - t0, 3))
"#;

/// Kernel server: accepts one connection on `argv[1]` (host:port), reads
/// to end of stream, closes; prints `bytes sha256`. Prints `ready` first.
pub(crate) const KERNEL_RECV: &str = r#"
import hashlib, socket, sys
host, port = sys.argv[1].rsplit(':', 1)
host = host.strip('[]')
l = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((host, int(port)))
l.listen(16)
print('ready', flush=True)
c, _ = l.accept()
c.settimeout(60)
h = hashlib.sha256()
n = 0
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    h.update(d)
    n += len(d)
c.close()
print(n, h.hexdigest(), flush=True)
"#;

/// Kernel echo server in the bed's own namespace (beside flowlane, on a
/// port its XDP program leaves to the kernel), one thread per connection;
/// prints `ready`. For comparing flowlane with Linux on the same bed.
const KERNEL_ECHO: &str = r#"
import socket, sys, threading
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('10.99.0.1', int(sys.argv[1])))
l.listen(1024)
print('ready', flush=True)
def serve(c):
    try:
        while True:
            d = c.recv(65536)
            if not d: break
            c.sendall(d)
    except OSError:
        pass
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// Starts [`KERNEL_ECHO`] on `port` in the bed's namespace (for at most
/// `limit_s`) and waits until it listens; the caller kills it.
pub(crate) fn kernel_echo_server(bed: &Bed, port: u16, limit_s: u64) -> Child {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "timeout", &limit_s.to_string()])
        .args(["python3", "-c", KERNEL_ECHO, &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(&mut child);
    child
}

/// Waits for a spawned peer to print `ready`.
pub(crate) fn wait_ready(child: &mut Child) {
    use std::io::{BufRead, BufReader};
    let out = child.stdout.take().unwrap();
    let mut r = BufReader::new(out);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "kernel peer did not start");
    child.stdout = None;
    // Keep reading in the background into a file-less buffer: hand the
    // reader back through a thread that returns the rest.
    let handle = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut r, &mut rest);
        rest
    });
    READERS.with(|m| m.borrow_mut().push((child.id(), handle)));
}

thread_local! {
    static READERS: std::cell::RefCell<Vec<(u32, std::thread::JoinHandle<String>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Waits (bounded) for a spawned peer started with [`wait_ready`] and
/// returns the rest of its stdout.
pub(crate) fn finish(mut child: Child, limit: Duration) -> String {
    let Some(st) = wait_within(&mut child, limit) else {
        kill_and_reap(&mut child);
        panic!("kernel peer did not finish in {limit:?}");
    };
    let id = child.id();
    let rest = READERS.with(|m| {
        let mut v = m.borrow_mut();
        let i = v.iter().position(|(p, _)| *p == id).unwrap();
        v.remove(i).1.join().unwrap()
    });
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(st.success(), "kernel peer failed ({st}): {rest} {err}");
    rest
}

/// Makes the kernel on flowlane's side of the bed send wire-size frames
/// (TSO/GSO off, `gso_max_segs 1` on `xsk0`), as flowlane does: a 64 KiB
/// GSO super-frame would meet a bottleneck's drop-tail queue as one frame,
/// and pass a smaller MTU on the peer's side that its segments exceed
/// (veth forwards GSO frames whatever their size).
pub(crate) fn kernel_sends_wire_size_frames(bed: &Bed) {
    let ns = bed.ns.as_str();
    for args in [
        &[
            "netns", "exec", ns, "ethtool", "-K", "xsk0", "tso", "off", "gso", "off",
        ][..],
        &["-n", ns, "link", "set", "dev", "xsk0", "gso_max_segs", "1"][..],
    ] {
        let o = Command::new("ip").args(args).output().unwrap();
        assert!(
            o.status.success(),
            "ip {args:?}: {}",
            flowlane_tests::text(&o)
        );
    }
}

/// Total bytes for the clean-link bulk tests: the issue's 1 GiB (about 40 s
/// for both directions on the CI VM); 4.5 GiB with `FLOWLANE_TCP_HUGE=1`.
pub(crate) fn bulk_bytes() -> u64 {
    // Opt-in: past 2^32 bytes, where both ends' sequence numbers wrap and
    // SND.UNA passes the ISS again (issue 11).
    if std::env::var_os("FLOWLANE_TCP_HUGE").is_some() {
        return (1 << 32) + (512 << 20);
    }
    1 << 30
}

/// The bed's address family a test runs over: flowlane's side and the
/// peer's addresses (`xsk0` and `peer0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    V4,
    V6,
}

impl Family {
    /// flowlane's `host:port` (IPv6 in brackets, as URLs and sockets
    /// addresses write it).
    pub(crate) fn ours(self, port: u16) -> String {
        match self {
            Family::V4 => format!("10.99.0.1:{port}"),
            Family::V6 => format!("[fd99::1]:{port}"),
        }
    }

    /// The peer's `host:port`.
    pub(crate) fn peer(self, port: u16) -> String {
        match self {
            Family::V4 => format!("10.99.0.2:{port}"),
            Family::V6 => format!("[fd99::2]:{port}"),
        }
    }
}

/// Kernel (python3 in the peer namespace) → flowlane `bulk-sink` on port
/// 5001 over IPv4: sends `bytes`, checks the sha256 both sides computed;
/// returns the sink's transfer line and all its JSON lines.
pub(crate) fn kernel_to_flowlane(bed: &Bed, bytes: u64, limit_s: u64) -> (Value, Vec<Value>) {
    kernel_to_flowlane_over(bed, Family::V4, bytes, limit_s, MODELS[0])
}

/// [`kernel_to_flowlane`] over `family`, the sink in `model`.
pub(crate) fn kernel_to_flowlane_over(
    bed: &Bed,
    family: Family,
    bytes: u64,
    limit_s: u64,
    model: &[&str],
) -> (Value, Vec<Value>) {
    let sink = start(
        bed,
        &in_model(&["bulk-sink", "--port", "5001", "--count", "1"], model),
        limit_s,
    );
    let sent = peer_py(
        bed,
        limit_s,
        KERNEL_SEND,
        &[&family.ours(5001), &bytes.to_string()],
    );
    let lines = sink.wait(Duration::from_secs(limit_s));
    let r = lines
        .iter()
        .find(|v| v["event"] == "sink")
        .expect("sink line")
        .clone();
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["bytes"], bytes, "{r}");
    assert_eq!(r["sha256"], sent.trim(), "{r}");
    (r, lines)
}

/// flowlane `bulk-source` → a kernel receiver (python3 on 10.99.0.2:5002):
/// sends `bytes`, checks the sha256 both sides computed; returns the
/// source's transfer line and all its JSON lines.
pub(crate) fn flowlane_to_kernel(bed: &Bed, bytes: u64, limit_s: u64) -> (Value, Vec<Value>) {
    let (r, lines) = flowlane_to_kernel_over(bed, Family::V4, bytes, limit_s, MODELS[0]);
    tcp_figures_told(&r);
    (r, lines)
}

/// A transfer line's `tcp` figures (`Net::info` at its end) are there and
/// plausible.
pub(crate) fn tcp_figures_told(r: &Value) {
    let t = &r["tcp"];
    assert!(t["mss"].as_u64().unwrap_or(0) > 0, "{r}");
    assert!(
        t["cwnd"].as_u64().unwrap_or(0) >= t["mss"].as_u64().unwrap_or(1),
        "{r}"
    );
    assert!(t["srtt_us"].as_u64().is_some(), "{r}");
}

/// [`flowlane_to_kernel`] over `family`, the source in `model`.
pub(crate) fn flowlane_to_kernel_over(
    bed: &Bed,
    family: Family,
    bytes: u64,
    limit_s: u64,
    model: &[&str],
) -> (Value, Vec<Value>) {
    let to = family.peer(5002);
    let mut peer = peer_py_spawn(bed, limit_s, KERNEL_RECV, &[&to]);
    wait_ready(&mut peer);
    let bytes_arg = bytes.to_string();
    let src = start(
        bed,
        &in_model(
            &["bulk-source", "--connect", &to, "--bytes", &bytes_arg],
            model,
        ),
        limit_s,
    );
    let lines = src.wait(Duration::from_secs(limit_s));
    let got = finish(peer, Duration::from_secs(60));
    let r = source_checked(&lines, &got, bytes);
    assert_eq!(r["peer"], to.as_str(), "the peer it sent to: {r}");
    (r, lines)
}

/// The `bulk-source` transfer line among `lines`, checked: it succeeded,
/// and the kernel receiver's report `got` ("BYTES SHA256") names the same
/// `bytes` and sha256.
pub(crate) fn source_checked(lines: &[Value], got: &str, bytes: u64) -> Value {
    let r = lines
        .iter()
        .find(|v| v["event"] == "source")
        .expect("source line")
        .clone();
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        got.trim(),
        format!("{} {}", bytes, r["sha256"].as_str().unwrap()),
        "sha256 differs: {r}"
    );
    r
}

/// The bed's impairment counters of both directions (`to_flowlane`,
/// `from_flowlane`), from `testbed status --json`.
pub(crate) fn impair_counters(bed: &Bed) -> Value {
    let o = flowlane_tests::flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    assert!(o.status.success(), "testbed status: {}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("status JSON");
    v["impairment"].clone()
}

/// `flowlane testbed delay` running in the background.
pub(crate) struct DelayLine {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl DelayLine {
    /// Starts the line with `args` (`--ms D`, and more) and waits (at most
    /// 30 s) for its ready line.
    pub(crate) fn start(bed: &Bed, args: &[&str]) -> DelayLine {
        let mut child = Command::new(flowlane_bin())
            .args(["testbed", "delay", "--bed", &bed.name, "--json"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the delay line did not start: {:?}", child.try_wait()));
        // `--json`: stdout is JSON lines, the ready line first.
        let ready: Value = serde_json::from_str(&first)
            .unwrap_or_else(|e| panic!("ready line {first:?} is not JSON: {e}"));
        assert_eq!(ready["event"], "ready", "{first}");
        DelayLine { child, lines }
    }

    pub(crate) fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status();
    }

    /// SIGTERM; waits for a clean exit and returns the JSON report.
    pub(crate) fn stop(mut self) -> serde_json::Value {
        self.signal("-TERM");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "the delay line did not stop");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "delay line exited with {status}");
        // Everything it printed: the reader thread ends at the pipe's end,
        // which may come after the exit is seen (a report read while the
        // last lines were on their way was empty, seen once in CI).
        let mut report = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => report.push(l),
                Err(_) => break,
            }
        }
        let json = report.join("\n");
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("report {json:?}: {e}"))
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Round-trip times (ms) of `count` pings from the peer to flowlane's side.
pub(crate) fn ping_rtts(bed: &Bed, count: u32) -> Vec<f64> {
    let o = in_ns(
        &bed.peer_ns,
        &[
            "ping",
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            "0.2",
            "-W",
            "2",
            "10.99.0.1",
        ],
    );
    assert!(o.status.success(), "ping: {}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}
