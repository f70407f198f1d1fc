//! `bulk-sink` and `bulk-source`: hashed bulk transfers with one JSON line per
//! finished transfer.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use flowlane_app::conn_state::{export_entry, import_entry};
use flowlane_app::{
    CloseReason, ConnHandle, ConnHandler, ConnInfo, ConnMap, ConnState, Net, SynFilter,
};
use flowlane_dataplane::cpu_time::thread_cpu_ns;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::idle::{IdleCounters, IdleSweep};
use super::AllowFrom;

struct Transfer {
    /// The peer's address (`"ip:port"`; empty if unknown).
    peer: String,
    bytes: u64,
    hasher: Option<Sha256>,
    start: Duration,
    /// When the last byte came (or the connection opened).
    active: Duration,
    cpu_start: u64,
    /// The connection's TCP figures when the last byte was handed to the
    /// stack: what the result says if none can be had at the end (a kernel
    /// socket in TIME-WAIT has none).
    last_info: Option<ConnInfo>,
}

impl Transfer {
    fn new(net: &dyn Net, hash: bool) -> Transfer {
        Transfer {
            peer: String::new(),
            bytes: 0,
            hasher: hash.then(Sha256::new),
            start: net.now(),
            active: net.now(),
            cpu_start: thread_cpu_ns(),
            last_info: None,
        }
    }

    fn result(self, net: &dyn Net, role: &str, conn: ConnHandle, extra: Value) -> Value {
        let secs = net.now().saturating_sub(self.start).as_secs_f64();
        let cpu = thread_cpu_ns().saturating_sub(self.cpu_start);
        let mut v = json!({
            "event": role,
            "queue": net.queue(),
            "conn": conn.index(),
            "peer": self.peer,
            "bytes": self.bytes,
            "secs": secs,
            "gbit_per_s": if secs > 0.0 { self.bytes as f64 * 8.0 / secs / 1e9 } else { 0.0 },
            "worker_cpu_ns": cpu,
            "cpu_ns_per_byte": if self.bytes > 0 { cpu as f64 / self.bytes as f64 } else { 0.0 },
            "sha256": self.hasher.map(|h| hex(&h.finalize())),
            // The connection's TCP figures at the end (in queue-pair mode,
            // as of the peer's FIN for a connection asked for before: the
            // sink asks as it accepts).
            "tcp": net.info(conn).ok().or(self.last_info).map(|i| json!({
                "srtt_us": i.srtt.map(|d| d.as_nanos() / 1_000),
                "cwnd": i.cwnd,
                "mss": i.mss,
                "retransmits": i.retransmits,
            })),
        });
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    }
}

/// Reads everything, hashing it; reports each transfer at end of stream,
/// or when it went `--idle-timeout` without a byte (reset, not `ok`).
pub(super) struct Sink {
    hash: bool,
    conns: ConnMap<Transfer>,
    done: Sender<Value>,
    allow: AllowFrom,
    idle: IdleSweep,
    counters: Arc<IdleCounters>,
}

impl Sink {
    /// Reports each finished transfer on `done`; hashes the bytes if
    /// `hash`; takes connections from the peers `allow` names; resets
    /// those idle for `idle_timeout` (counted in `counters`, shared by the
    /// cores).
    pub(super) fn new(
        hash: bool,
        done: Sender<Value>,
        allow: AllowFrom,
        idle_timeout: Option<Duration>,
        counters: Arc<IdleCounters>,
    ) -> Sink {
        Sink {
            hash,
            conns: ConnMap::new(),
            done,
            allow,
            idle: IdleSweep::new(idle_timeout),
            counters,
        }
    }
}

impl ConnHandler for Sink {
    fn syn_filter(&self, _port: u16) -> Option<SynFilter> {
        self.allow.filter()
    }
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let mut t = Transfer::new(net, self.hash);
        if let Ok(tuple) = net.four_tuple(conn) {
            t.peer = tuple.remote.to_string();
        }
        // Asked now so that the figures are there when the transfer ends:
        // in queue-pair mode a first asking has none, and the core sends
        // those of a connection asked for with the peer's FIN
        // (`Net::info`).
        let _ = net.info(conn);
        self.conns.insert(conn, t);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some(t) = self.conns.get_mut(conn) else {
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
            t.active = net.now();
            let _ = net.consume(conn, n);
        }
        if net.is_eof(conn) {
            let _ = net.close(conn);
            if let Some(t) = self.conns.remove(conn) {
                let v = t.result(net, "sink", conn, json!({"ok": true}));
                let _ = self.done.send(v);
            }
        }
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.on_data(net, conn);
    }
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        export_entry(&mut self.conns, conn)
    }
    fn on_import(&mut self, _net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        import_entry(&mut self.conns, conn, state);
    }
    fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        if let Some(t) = self.conns.remove(conn) {
            let v = t.result(
                net,
                "sink",
                conn,
                json!({"ok": false, "close": format!("{reason:?}")}),
            );
            let _ = self.done.send(v);
        }
    }
    fn on_tick(&mut self, net: &mut dyn Net) {
        for conn in self.idle.due(net.now(), &self.conns, |t| t.active) {
            self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            let _ = net.abort(conn);
            if let Some(t) = self.conns.remove(conn) {
                let v = t.result(
                    net,
                    "sink",
                    conn,
                    json!({"ok": false, "close": "IdleTimeout"}),
                );
                let _ = self.done.send(v);
            }
        }
    }
}

/// xorshift64* stream: the payload of `bulk-source`, the same bytes for a
/// seed however the sender cuts it into chunks (the send buffer's room
/// decides those).
struct Payload {
    state: u64,
    /// The last word made, of which `word[used..]` is not sent yet.
    word: [u8; 8],
    used: usize,
}

impl Payload {
    fn new(seed: u64) -> Payload {
        Payload {
            state: seed,
            word: [0; 8],
            used: 8,
        }
    }

    fn next_word(&mut self) -> [u8; 8] {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes()
    }

    fn fill(&mut self, buf: &mut [u8]) {
        // What is left of the last word, then whole words, then the start
        // of one more, whose rest the next chunk begins with.
        let left = (8 - self.used).min(buf.len());
        buf[..left].copy_from_slice(&self.word[self.used..self.used + left]);
        self.used += left;
        let mut words = buf[left..].chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.next_word());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            self.word = self.next_word();
            tail.copy_from_slice(&self.word[..tail.len()]);
            self.used = tail.len();
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

impl Outgoing {
    /// Whether the send buffer took every byte of the transfer (and so
    /// the close that puts our FIN after them was asked for).
    fn all_sent(&self) -> bool {
        self.remaining == 0 && self.carry.is_empty()
    }
}

/// Opens connections and sends `bytes` on each, then closes.
pub(super) struct Source {
    remote: SocketAddr,
    bytes: u64,
    seed: u64,
    to_open: usize,
    conns: ConnMap<Outgoing>,
    buf: Vec<u8>,
    done: Sender<Value>,
}

impl Source {
    /// Opens `to_open` connections to `remote`, each sending `bytes` of the
    /// payload seeded with `seed`, and reports each transfer on `done`.
    pub(super) fn new(
        remote: SocketAddr,
        bytes: u64,
        seed: u64,
        to_open: usize,
        done: Sender<Value>,
    ) -> Source {
        Source {
            remote,
            bytes,
            seed,
            to_open,
            conns: ConnMap::new(),
            buf: vec![0; 65536],
            done,
        }
    }

    fn fill(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some(o) = self.conns.get_mut(conn) else {
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
                if o.t.last_info.is_none() {
                    o.t.last_info = net.info(conn).ok();
                }
                // What the peer sent is not read (a sink does not answer,
                // but a SYN-ACK may carry text, RFC 9293 §3.10.7.3, and
                // `on_connected` runs before its Readable): dropped first,
                // or the close resets the connection for unread bytes (RFC
                // 1122 §4.2.2.13) and the transfer fails.
                net.discard(conn);
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
                    t.peer = self.remote.to_string();
                    self.conns.insert(
                        c,
                        Outgoing {
                            t,
                            remaining: self.bytes,
                            payload: Payload::new(
                                self.seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9),
                            ),
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
        if let Some(o) = self.conns.get_mut(conn) {
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
    /// after TIME-WAIT.) A peer that closed its side before every byte
    /// went (a half-close, `shutdown(SHUT_WR)`, as `nc -N` does) may still
    /// read: the sending goes on, and `on_closed` tells how it ended.
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.on_data(net, conn);
        let finished = self.conns.get(conn).is_some_and(Outgoing::all_sent);
        if finished {
            // The figures before the close hands the socket back (on kernel
            // sockets nothing can be asked of it after).
            if let Some(o) = self.conns.remove(conn) {
                let v = o.t.result(net, "source", conn, json!({"ok": true}));
                let _ = self.done.send(v);
            }
            let _ = net.close(conn);
        }
    }
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        export_entry(&mut self.conns, conn)
    }
    fn on_import(&mut self, _net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        import_entry(&mut self.conns, conn, state);
    }
    /// The connection ended with its transfer not yet reported (no FIN of
    /// the peer's came after every byte went). It is complete if every
    /// byte went and it closed normally: the peer closed its side first
    /// and read on, and our FIN after the last byte ended it (RFC 9293
    /// §3.6, case 2: CLOSE-WAIT, LAST-ACK, CLOSED once our FIN is
    /// acknowledged; kernel sockets end once the kernel has it). A reset,
    /// a timeout, or an end before every byte went is a failure.
    fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        if let Some(o) = self.conns.remove(conn) {
            let extra = if reason == CloseReason::Normal && o.all_sent() {
                json!({"ok": true})
            } else {
                json!({"ok": false, "close": format!("{reason:?}")})
            };
            let v = o.t.result(net, "source", conn, extra);
            let _ = self.done.send(v);
        }
    }
}

/// Lower-case hex of a digest.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, Receiver};

    use flowlane_app::testing::OneConn;

    use super::*;

    /// One actively opened connection whose send buffer takes `room`
    /// bytes until the test frees it again; no stack.
    fn fake(room: usize) -> OneConn {
        OneConn {
            now: Duration::from_secs(1),
            send_room: Some(room),
            ..OneConn::default()
        }
    }

    fn c() -> ConnHandle {
        ConnHandle::from_parts(0, 0)
    }

    const BYTES: u64 = 10_000;

    /// A source of `BYTES` on one connection, connected, whose first
    /// 4000 bytes the send buffer took (it is full then); the peer
    /// half-closed first if `peer_fin_first`.
    fn started(net: &mut OneConn, peer_fin_first: bool) -> (Source, Receiver<Value>) {
        let (tx, rx) = channel();
        let mut s = Source::new("10.99.0.2:5001".parse().unwrap(), BYTES, 1, 1, tx);
        s.on_start(net);
        s.on_connected(net, c());
        assert_eq!(net.sent.len(), 4000);
        if peer_fin_first {
            net.peer_fin = true;
            s.on_peer_closed(net, c());
            assert!(rx.try_recv().is_err(), "nothing decided at the peer's FIN");
        }
        (s, rx)
    }

    /// Frees the send buffer until every byte went.
    fn send_the_rest(s: &mut Source, net: &mut OneConn) {
        while !net.did("close") {
            net.send_room = Some(4000);
            s.on_writable(net, c());
        }
        assert_eq!(net.sent.len() as u64, BYTES);
    }

    /// The sha256 of the bytes the source sent.
    fn sent_sha(net: &OneConn) -> String {
        hex(&Sha256::digest(&net.sent))
    }

    /// A receiver that half-closes first (`shutdown(SHUT_WR)` at accept,
    /// then reads to end of stream and closes: `nc -N` with its stdin at
    /// end) gets every byte: the transfer is ok when the connection
    /// closes normally after our FIN, not failed because the peer's FIN
    /// came first.
    #[test]
    fn a_peer_that_half_closes_first_and_reads_everything_is_a_complete_transfer() {
        let mut net = fake(4000);
        let (mut s, rx) = started(&mut net, true);
        send_the_rest(&mut s, &mut net);
        assert!(rx.try_recv().is_err(), "reported before the end");
        s.on_closed(&mut net, c(), CloseReason::Normal);
        let v = rx.try_recv().expect("the transfer's result");
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["bytes"], BYTES, "{v}");
        assert_eq!(v["sha256"], sent_sha(&net), "{v}");
    }

    /// The usual order, our FIN first: the peer's FIN after every byte
    /// ends the transfer, ok.
    #[test]
    fn a_peer_fin_after_every_byte_went_is_a_complete_transfer() {
        let mut net = fake(4000);
        let (mut s, rx) = started(&mut net, false);
        send_the_rest(&mut s, &mut net);
        s.on_peer_closed(&mut net, c());
        let v = rx.try_recv().expect("the transfer's result");
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["sha256"], sent_sha(&net), "{v}");
    }

    /// Bytes the peer sent before the last of ours went (text on its
    /// SYN-ACK, read before the Readable event comes) are dropped before
    /// the close: closed with them unread, the connection was reset and
    /// the transfer failed.
    #[test]
    fn bytes_from_the_peer_do_not_turn_the_close_into_a_reset() {
        let mut net = fake(usize::MAX);
        net.inbox = b"hello".to_vec();
        let (tx, rx) = channel();
        let mut s = Source::new("10.99.0.2:5001".parse().unwrap(), 3000, 1, 1, tx);
        s.on_start(&mut net);
        s.on_connected(&mut net, c());
        assert!(net.did("close"), "{:?}", net.calls);
        assert!(!net.reset, "closed with the peer's bytes unread: reset");
        s.on_peer_closed(&mut net, c());
        let v = rx.try_recv().expect("the transfer's result");
        assert_eq!(v["ok"], true, "{v}");
    }

    /// Failures stay failures, whichever FIN came first: a reset after
    /// every byte went, a reset or timeout before, and an end before
    /// every byte went even if normal.
    #[test]
    fn a_transfer_ended_by_a_reset_or_before_every_byte_went_failed() {
        for peer_fin_first in [false, true] {
            for (all, reason) in [
                (true, CloseReason::Reset),
                (false, CloseReason::Reset),
                (false, CloseReason::Timeout),
                (false, CloseReason::Normal),
            ] {
                let mut net = fake(4000);
                let (mut s, rx) = started(&mut net, peer_fin_first);
                if all {
                    send_the_rest(&mut s, &mut net);
                }
                s.on_closed(&mut net, c(), reason);
                let v = rx.try_recv().expect("the transfer's result");
                assert_eq!(v["ok"], false, "{peer_fin_first} {all} {reason:?}: {v}");
                assert_eq!(v["close"], format!("{reason:?}"), "{v}");
            }
        }
    }

    /// A seed's payload is the same bytes however it is cut (the send
    /// buffer's room decides the chunks: cut at odd sizes, the rest of a
    /// word was skipped, and `--seed` fixed no transfer's sha256).
    #[test]
    fn payload_is_the_same_however_it_is_cut() {
        let mut a = Payload::new(7);
        let mut whole = vec![0u8; 1000];
        a.fill(&mut whole);
        assert_ne!(whole[..8], whole[8..16]);
        for cuts in [&[32usize, 64][..], &[3, 5, 13, 1, 0, 7, 8, 9, 100], &[999]] {
            let mut b = Payload::new(7);
            let mut parts = vec![0u8; 1000];
            let mut at = 0;
            for &n in cuts.iter().cycle() {
                let end = (at + n).min(parts.len());
                b.fill(&mut parts[at..end]);
                at = end;
                if at == parts.len() {
                    break;
                }
            }
            assert_eq!(whole, parts, "cut at {cuts:?}");
        }
    }

    #[test]
    fn hex_digest() {
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
