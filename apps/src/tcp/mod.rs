//! TCP examples on flowlane's data path: `echo-server`, `http-server`,
//! `bulk-sink` and `bulk-source`. Each queue's worker runs its own
//! `flowlane_tcp::Stack` and the application handler to completion
//! (`flowlane_dataplane::tcp_handler`); the main thread only waits, writes
//! reports and prints results.
//!
//! Output: one JSON line on stdout per finished transfer (bulk commands)
//! and a final `{"event":"summary",...}` line with the per-queue TCP
//! counters (corrupted segments dropped by checksum included) and each
//! worker's CPU time. `--report FILE` is written once the data path is up
//! (tests wait for it), on SIGUSR1 and at exit. SIGTERM/SIGINT exit cleanly.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_app::{CloseReason, ConnHandle, ConnHandler, Net};
use flowlane_dataplane::privileges::require_root;
use flowlane_dataplane::service_args::DataPathArgs;
use flowlane_dataplane::tcp_service::{self, rss_state};
use flowlane_dataplane::{
    thread_cpu_ns, worker_cpu_ns, TcpCountersSnapshot, TcpHandler, TcpService, TcpServiceConfig,
};
use flowlane_numa_sched::nic::RssSettings;
use flowlane_numa_sched::RssState;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::service::{write_report, ServiceSignals};

/// The TCP example commands (flattened into `flowlane`'s command list).
#[derive(clap::Subcommand, Debug)]
pub enum TcpCmd {
    /// TCP echo server on flowlane's data path (flowlane-tcp, one stack per
    /// queue).
    EchoServer(EchoArgs),
    /// Minimal HTTP/1.1 responder (fixed response, keep-alive).
    HttpServer(HttpArgs),
    /// Receives bulk TCP transfers; prints bytes, time and sha256 of each.
    BulkSink(SinkArgs),
    /// Sends bulk TCP transfers of pseudo-random bytes to a server; prints
    /// bytes, time and sha256 of each.
    BulkSource(SourceArgs),
}

/// Flags shared by the TCP examples.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Interface to serve.
    #[arg(long, default_value = "xsk0")]
    pub iface: String,
    /// The data path's flags (bed, queues, RSS, neighbours, busy polling).
    #[command(flatten)]
    pub data_path: DataPathArgs,
    /// Write a JSON report here (once up, on SIGUSR1 and on exit).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Give up (exit 1) after this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub timeout: u64,
    /// Maximum segment lifetime in milliseconds (TIME-WAIT lasts twice
    /// this; default: the stack's, 30 s).
    #[arg(long)]
    pub msl_ms: Option<u64>,
}

/// Flags of `echo-server`.
#[derive(clap::Args, Debug, Clone)]
pub struct EchoArgs {
    #[command(flatten)]
    common: Common,
    /// TCP port.
    #[arg(long, default_value_t = 7)]
    port: u16,
}

/// Flags of `http-server`.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpArgs {
    #[command(flatten)]
    common: Common,
    /// TCP port.
    #[arg(long, default_value_t = 80)]
    port: u16,
    /// Body of the fixed response.
    #[arg(long, default_value = "hello from flowlane\n")]
    body: String,
}

/// Flags of `bulk-sink`.
#[derive(clap::Args, Debug, Clone)]
pub struct SinkArgs {
    #[command(flatten)]
    common: Common,
    /// TCP port.
    #[arg(long, default_value_t = 5001)]
    port: u16,
    /// Exit after this many transfers (0: run until SIGTERM).
    #[arg(long, default_value_t = 0)]
    count: usize,
    /// Count bytes only (no sha256): for throughput measurements.
    #[arg(long)]
    no_hash: bool,
}

/// Flags of `bulk-source`.
#[derive(clap::Args, Debug, Clone)]
pub struct SourceArgs {
    #[command(flatten)]
    common: Common,
    /// Server to send to.
    #[arg(long)]
    connect: SocketAddrV4,
    /// Bytes per connection.
    #[arg(long, default_value_t = 64 << 20)]
    bytes: u64,
    /// Connections. Every queue's worker opens `connections / queues` of
    /// them (queue 0 the remainder) from ports whose replies RSS steers
    /// back to it.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Seed of the pseudo-random payload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Reads a NIC's RSS (key and table) by interface name, where the caller
/// knows how (the `flowlane` binary: ethtool).
pub type NicRssReader = fn(&str) -> Option<RssSettings>;

/// Runs one of the TCP examples. `read_nic_rss` tells active opens the
/// NIC's RSS when no `--rss-key/--rss-table` (or `--bed`) is given.
pub fn run(cmd: TcpCmd, read_nic_rss: NicRssReader) -> Result<()> {
    let common = match &cmd {
        TcpCmd::EchoServer(a) => &a.common,
        TcpCmd::HttpServer(a) => &a.common,
        TcpCmd::BulkSink(a) => &a.common,
        TcpCmd::BulkSource(a) => &a.common,
    };
    if let Some(bed) = &common.data_path.bed {
        return reexec_in_bed(bed);
    }
    match cmd {
        TcpCmd::EchoServer(a) => {
            let port = a.port;
            serve(&a.common, read_nic_rss, &[port], None, 0, move |h, _tx| {
                h.listen(
                    port,
                    Echo {
                        buf: vec![0; 16384],
                    },
                )?;
                Ok(())
            })
        }
        TcpCmd::HttpServer(a) => {
            let port = a.port;
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nServer: flowlane\r\n\r\n{}",
                a.body.len(),
                a.body
            )
            .into_bytes();
            serve(&a.common, read_nic_rss, &[port], None, 0, move |h, _tx| {
                h.listen(
                    port,
                    Http {
                        response: response.clone(),
                        conns: HashMap::new(),
                    },
                )?;
                Ok(())
            })
        }
        TcpCmd::BulkSink(a) => {
            let (port, hash) = (a.port, !a.no_hash);
            serve(
                &a.common,
                read_nic_rss,
                &[port],
                None,
                a.count,
                move |h, tx| {
                    h.listen(
                        port,
                        Sink {
                            hash,
                            conns: HashMap::new(),
                            done: tx,
                        },
                    )?;
                    Ok(())
                },
            )
        }
        TcpCmd::BulkSource(a) => {
            let (remote, bytes, seed, total) = (a.connect, a.bytes, a.seed, a.connections);
            let queues = TcpServiceConfig {
                queues: a.common.data_path.queues,
                ..TcpServiceConfig::new(&a.common.iface)
            }
            .interface()?
            .1;
            serve(
                &a.common,
                read_nic_rss,
                &[],
                Some(*remote.ip()),
                total,
                move |h, tx| {
                    let q = h.queue();
                    let mut n = total / queues as usize;
                    if q == 0 {
                        n += total % queues as usize;
                    }
                    if n > 0 {
                        h.add(Source {
                            remote,
                            bytes,
                            seed: seed.wrapping_add(u64::from(q) << 32),
                            to_open: n,
                            conns: HashMap::new(),
                            buf: vec![0; 65536],
                            done: tx,
                        });
                    }
                    Ok(())
                },
            )
        }
    }
}

/// `--bed`: reads the bed's RSS and peer MAC here (where its pinned maps
/// are visible), then becomes `ip netns exec <bed ns> flowlane <same args>`
/// with them as explicit flags (same pid: `exec`; see
/// `flowlane_testbed::reexec`).
fn reexec_in_bed(bed: &str) -> Result<()> {
    Err(flowlane_testbed::reexec_in_bed(bed))
}

/// The NIC's RSS as an `RssState` for `queues` queues (flags, else
/// ethtool).
fn rss(c: &Common, queues: u32, read_nic_rss: NicRssReader) -> Result<Option<RssState>> {
    let settings = c
        .data_path
        .rss_settings()?
        .or_else(|| read_nic_rss(&c.iface));
    Ok(settings
        .map(|s| rss_state(&s.key, &s.table, queues))
        .transpose()?)
}

/// Lower-case hex of a digest.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn counters_json(per_queue: &[(u32, TcpCountersSnapshot)]) -> Value {
    let total = per_queue
        .iter()
        .fold(TcpCountersSnapshot::default(), |a, (_, c)| a.add(c));
    json!({
        "total": total,
        "queues": per_queue.iter().map(|(q, c)| json!({
            "queue": q,
            "worker_cpu_ns": worker_cpu_ns(*q),
            "tcp": c,
        })).collect::<Vec<_>>(),
    })
}

/// Starts the data path with a `TcpHandler` per queue, set up by `setup`,
/// and runs until a signal, the timeout, or `expect` results (if not 0).
/// `connect_to`: the server of active opens (its MAC is resolved first).
fn serve<F>(
    c: &Common,
    read_nic_rss: NicRssReader,
    ports: &[u16],
    connect_to: Option<Ipv4Addr>,
    expect: usize,
    setup: F,
) -> Result<()>
where
    F: Fn(&mut TcpHandler, Sender<Value>) -> std::result::Result<(), flowlane_tcp::Error>
        + Send
        + Sync
        + 'static,
{
    require_root("flowlane TCP examples")?;
    let mut config = TcpServiceConfig::new(&c.iface);
    config.queues = c.data_path.queues;
    config.listen = ports.to_vec();
    config.active = connect_to.is_some();
    config.busy_poll = c.data_path.busy_poll;
    config.msl = c.msl_ms.map(flowlane_tcp::time::Duration::from_millis);
    let (_, queues) = config.interface()?;
    if config.active {
        config.rss = rss(c, queues, read_nic_rss)?;
    }
    config.neighbors = tcp_service::neighbors(&c.data_path.neighbor, &c.iface, connect_to)?;

    let (done_tx, done_rx) = mpsc::channel::<Value>();
    let done_tx = Mutex::new(done_tx);
    let service = TcpService::start(config, move |h| {
        let tx = done_tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        setup(h, tx).map_err(|e| format!("queue {}: {e}", h.queue()))
    })
    .context("setting up TCP")?;
    let r = wait(c, &service, &done_rx, expect);
    let cpu: Vec<Option<u64>> = (0..queues).map(worker_cpu_ns).collect();
    let counters = service.stop();
    let summary = json!({"event": "summary", "counters": counters_json(&counters),
                         "worker_cpu_ns": cpu});
    outln!("{summary}");
    if let Some(p) = &c.report {
        write_report(p, &summary)?;
    }
    r
}

fn wait(c: &Common, service: &TcpService, done: &Receiver<Value>, expect: usize) -> Result<()> {
    let signals = ServiceSignals::install()?;
    let report = |ready: bool| -> Result<()> {
        if let Some(p) = &c.report {
            write_report(
                p,
                &json!({"event": "report", "ready": ready,
                        "queues": service.dataplane().queues().len(),
                        "counters": counters_json(&service.tcp_counters())}),
            )?;
        }
        Ok(())
    };
    report(true)?;
    eprintln!(
        "flowlane: TCP on {} queues of {}",
        service.dataplane().queues().len(),
        c.iface
    );
    let start = Instant::now();
    let mut results = 0;
    let mut failed = false;
    while !signals.stop_requested() {
        match done.recv_timeout(Duration::from_millis(20)) {
            Ok(v) => {
                outln!("{v}");
                failed |= v["ok"] == false;
                results += 1;
                if expect > 0 && results >= expect {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        if signals.take_report_request() {
            report(true)?;
        }
        if c.timeout > 0 && start.elapsed() > Duration::from_secs(c.timeout) {
            bail!(
                "timed out after {} s with {results} of {expect} transfers done",
                c.timeout
            );
        }
    }
    // The last transfer's result comes at end of stream, before our FIN is
    // acknowledged: let the closes finish (bounded) so that no connection is
    // cut off by the exit.
    let linger = Instant::now();
    while counters_json(&service.tcp_counters())["total"]["connections"]
        .as_u64()
        .unwrap_or(0)
        > 0
        && linger.elapsed() < Duration::from_secs(3)
        && !signals.stop_requested()
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    if failed {
        bail!("a transfer failed (see the lines above)");
    }
    Ok(())
}

// -------------------------------------------------------------------------
// The handlers (run on the workers)
// -------------------------------------------------------------------------

/// Echoes every byte back; closes when the peer has closed and everything
/// was echoed.
struct Echo {
    buf: Vec<u8>,
}

impl Echo {
    fn pump(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.buf);
    }
}

impl ConnHandler for Echo {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let _ = net.set_nodelay(conn, true);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pump(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pump(net, conn);
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pump(net, conn);
    }
}

/// Requests larger than this (headers) reset the connection.
const MAX_REQUEST: usize = 16 * 1024;

#[derive(Default)]
struct HttpConn {
    input: Vec<u8>,
    output: Vec<u8>,
    close_after: bool,
}

/// A fixed-response HTTP/1.1 server with keep-alive.
struct Http {
    response: Vec<u8>,
    conns: HashMap<ConnHandle, HttpConn>,
}

impl Http {
    fn drive(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let st = self.conns.entry(conn).or_default();
        let mut buf = [0u8; 4096];
        let mut eof = false;
        loop {
            match net.recv(conn, &mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => st.input.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        while let Some(end) = st.input.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&st.input[..end]).to_ascii_lowercase();
            let http10 = head.lines().next().is_some_and(|l| l.ends_with("http/1.0"));
            if head.contains("\nconnection: close")
                || (http10 && !head.contains("\nconnection: keep-alive"))
            {
                st.close_after = true;
            }
            st.output.extend_from_slice(&self.response);
            st.input.drain(..end + 4);
            if st.close_after {
                break;
            }
        }
        if st.input.len() > MAX_REQUEST {
            let _ = net.abort(conn);
            return;
        }
        if eof {
            st.close_after = true;
        }
        if !st.output.is_empty() {
            if let Ok(n) = net.send(conn, &st.output) {
                st.output.drain(..n);
            }
        }
        if st.output.is_empty() && st.close_after {
            let _ = net.close(conn);
        }
    }
}

impl ConnHandler for Http {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let _ = net.set_nodelay(conn, true);
        self.conns.insert(conn, HttpConn::default());
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.drive(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.drive(net, conn);
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.drive(net, conn);
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, _r: CloseReason) {
        self.conns.remove(&conn);
    }
}

struct Transfer {
    bytes: u64,
    hasher: Option<Sha256>,
    start: Duration,
    cpu_start: u64,
}

impl Transfer {
    fn new(net: &dyn Net, hash: bool) -> Transfer {
        Transfer {
            bytes: 0,
            hasher: hash.then(Sha256::new),
            start: net.now(),
            cpu_start: thread_cpu_ns(),
        }
    }

    fn result(self, net: &dyn Net, role: &str, conn: ConnHandle, extra: Value) -> Value {
        let secs = net.now().saturating_sub(self.start).as_secs_f64();
        let cpu = thread_cpu_ns().saturating_sub(self.cpu_start);
        let mut v = json!({
            "event": role,
            "queue": net.queue(),
            "conn": conn.index(),
            "bytes": self.bytes,
            "secs": secs,
            "gbit_per_s": if secs > 0.0 { self.bytes as f64 * 8.0 / secs / 1e9 } else { 0.0 },
            "worker_cpu_ns": cpu,
            "cpu_ns_per_byte": if self.bytes > 0 { cpu as f64 / self.bytes as f64 } else { 0.0 },
            "sha256": self.hasher.map(|h| hex(&h.finalize())),
        });
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    }
}

/// Reads everything, hashing it; reports each transfer at end of stream.
struct Sink {
    hash: bool,
    conns: HashMap<ConnHandle, Transfer>,
    done: Sender<Value>,
}

impl ConnHandler for Sink {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.conns.insert(conn, Transfer::new(net, self.hash));
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some(t) = self.conns.get_mut(&conn) else {
            return;
        };
        loop {
            let n = match net.peek(conn) {
                Ok(d) if !d.is_empty() => {
                    if let Some(h) = t.hasher.as_mut() {
                        h.update(d);
                    }
                    d.len()
                }
                _ => break,
            };
            t.bytes += n as u64;
            let _ = net.consume(conn, n);
        }
        if net.is_eof(conn) {
            let _ = net.close(conn);
            if let Some(t) = self.conns.remove(&conn) {
                let v = t.result(net, "sink", conn, json!({"ok": true}));
                let _ = self.done.send(v);
            }
        }
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.on_data(net, conn);
    }
    fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        if let Some(t) = self.conns.remove(&conn) {
            let v = t.result(
                net,
                "sink",
                conn,
                json!({"ok": false, "close": format!("{reason:?}")}),
            );
            let _ = self.done.send(v);
        }
    }
}

/// xorshift64* stream: the payload of `bulk-source`.
struct Payload(u64);

impl Payload {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let w = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }
}

struct Outgoing {
    t: Transfer,
    remaining: u64,
    payload: Payload,
    /// Generated bytes the send buffer did not take yet.
    carry: Vec<u8>,
}

/// Opens connections and sends `bytes` on each, then closes.
struct Source {
    remote: SocketAddrV4,
    bytes: u64,
    seed: u64,
    to_open: usize,
    conns: HashMap<ConnHandle, Outgoing>,
    buf: Vec<u8>,
    done: Sender<Value>,
}

impl Source {
    fn fill(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some(o) = self.conns.get_mut(&conn) else {
            return;
        };
        loop {
            if !o.carry.is_empty() {
                match net.send(conn, &o.carry) {
                    Ok(n) => {
                        o.carry.drain(..n);
                    }
                    Err(_) => return,
                }
                if !o.carry.is_empty() {
                    return;
                }
            }
            if o.remaining == 0 {
                let _ = net.close(conn);
                return;
            }
            let space = net.send_space(conn).unwrap_or(0);
            if space == 0 {
                net.want_writable(conn);
                return;
            }
            let n = (space.min(self.buf.len()) as u64).min(o.remaining) as usize;
            let chunk = &mut self.buf[..n];
            o.payload.fill(chunk);
            if let Some(h) = o.t.hasher.as_mut() {
                h.update(&*chunk);
            }
            o.remaining -= n as u64;
            o.t.bytes += n as u64;
            match net.send(conn, chunk) {
                Ok(k) if k == n => {}
                Ok(k) => o.carry.extend_from_slice(&chunk[k..]),
                Err(_) => o.carry.extend_from_slice(chunk),
            }
        }
    }
}

impl ConnHandler for Source {
    fn on_start(&mut self, net: &mut dyn Net) {
        for i in 0..self.to_open {
            match net.connect(self.remote) {
                Ok(c) => {
                    let mut t = Transfer::new(net, true);
                    t.start = net.now();
                    self.conns.insert(
                        c,
                        Outgoing {
                            t,
                            remaining: self.bytes,
                            payload: Payload(self.seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9)),
                            carry: Vec::new(),
                        },
                    );
                }
                Err(e) => {
                    let _ = self.done.send(json!({
                        "event": "source", "ok": false, "error": format!("connect: {e}"),
                    }));
                }
            }
        }
    }
    fn on_connected(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if let Some(o) = self.conns.get_mut(&conn) {
            o.t.start = net.now();
            o.t.cpu_start = thread_cpu_ns();
        }
        self.fill(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.fill(net, conn);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        // The sink is not supposed to answer: discard.
        net.discard(conn);
    }
    /// The peer closes after reading everything we sent (our FIN
    /// included): the transfer is complete. (`on_closed` would only come
    /// after TIME-WAIT.)
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.on_data(net, conn);
        let finished = self
            .conns
            .get(&conn)
            .is_some_and(|o| o.remaining == 0 && o.carry.is_empty());
        if finished {
            let _ = net.close(conn);
            if let Some(o) = self.conns.remove(&conn) {
                let v = o.t.result(net, "source", conn, json!({"ok": true}));
                let _ = self.done.send(v);
            }
        }
    }
    fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        if let Some(o) = self.conns.remove(&conn) {
            let v = o.t.result(
                net,
                "source",
                conn,
                json!({"ok": false, "close": format!("{reason:?}")}),
            );
            let _ = self.done.send(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_deterministic_over_word_aligned_chunks() {
        let mut a = Payload(7);
        let mut whole = vec![0u8; 64];
        a.fill(&mut whole);
        let mut b = Payload(7);
        let mut parts = vec![0u8; 64];
        b.fill(&mut parts[..32]);
        b.fill(&mut parts[32..]);
        assert_eq!(whole, parts);
        assert_ne!(whole[..8], whole[8..16]);
    }

    #[test]
    fn hex_digest() {
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
