//! Tests of the connection-state layout: its size budget (so that it cannot
//! grow unnoticed) and a property test that it stays whole
//! ([`Stack::check_layout`]) through every state transition random
//! traffic, application calls, losses and timers can cause; and states
//! that real traffic takes too long to reach (sequence numbers far along),
//! set up through the connection's fields.

use crate::connection::Connection;
use crate::time::{Duration, Instant};
use crate::{Config, ConnHandle, Delivery, Ecn, Event, FrameRef, FrameStore, Stack};
use proptest::prelude::*;
use std::net::SocketAddr;

/// Bytes a connection may take in its slot. Raising a budget is a design
/// decision: say why in the commit, with `sim_idle` and callgrind figures.
/// 632 until CUBIC (+16 bytes: the congestion controller grew from 32 to
/// 48 bytes, CUBIC's inline state with HyStart++ (RFC 9438 §4.9's saved
/// values, the stage's K, t_epoch and W_est, or HyStart++'s rounds and
/// minimum RTTs) in `u32`s, NewReno's 32 bytes and 8-byte alignment
/// rounding it up). 648 until RACK-TLP (+16 bytes: `rack::Rack`, the
/// pointer to the flight's send-time records, allocated only while data
/// is in flight, and what outlives a flight: min_RTT and the reordering
/// window's adaptation). 664 until PLPMTUD (+8 bytes: RFC 4821's search
/// in `SendState`, its top and the handshake's MTU, the probe's MTU and
/// first sequence number; the rest-time stamp fits `TimerState`'s padding).
/// 672 until zero-copy receive (+8 bytes: the receive queue's list of
/// pieces, payloads kept in lent frames and runs of chunked bytes in
/// stream order, a circular list named by its newest piece, and the bytes
/// in its frames). 680 until HyStart's ACK train (+8 bytes: when the
/// slow-start round began and its train's last ACK, two `u32` µs stamps in
/// `HyStart`, which had one spare byte; the train ends slow start before a
/// one-BDP queue overflows, where the delay rise alone came a round late).
/// 688 until the tuple was stored as a `FlowKey` (−24 bytes: five words
/// instead of two `SocketAddr`s). 656 until the receive side's rare
/// fields became `RecvRare` (−8: a FIN ahead and the D-SACK range without
/// their `Option`s, whose presence is in the flags). Unchanged by the
/// timers' split into a hot and a cold part (+8 bytes: the earliest
/// deadline armed, which spares a segment the other deadlines; −8: the RTT
/// sample's timed segment as a `TimedSegment`, 16 bytes instead of an
/// `Option`'s 24, and the keepalive probe count in a byte of padding).
/// 648 until the retransmission timer's expiry was kept while a loss
/// probe holds its slot (+8, in `TimerRare`: the slot's padding took it,
/// the slot is still eleven lines).
const CONNECTION_BUDGET: usize = 656;
/// A slab slot: the connection plus the stack's bookkeeping for it.
/// 664 until the timer wheel's cancel (8 bytes: the entry's place in the
/// wheel, so that no stale entry is left behind); 672 until CUBIC (+16,
/// as the connection); 688 until RACK-TLP (+16, as the connection); 704
/// until PLPMTUD (+8, as the connection); 712 until zero-copy receive
/// (+8, as the connection); 720 until HyStart's ACK train (+8, as the
/// connection); 728 until the `FlowKey` (−24, as the connection); 696
/// until `RecvRare` (−8, as the connection). 704 since slots are aligned
/// to a cache line (+16 of padding: a slot's hot part spans the fewest
/// lines and shares none with its neighbour; −7.5 % last-level misses at
/// 10 000 connections, BENCHMARKS.md session 36).
const SLOT_BUDGET: usize = 704;
/// A compact TIME-WAIT record (what a closed connection costs for 2 MSL,
/// index and expiry entry aside). 112 until the `FlowKey` (−24).
const TIME_WAIT_BUDGET: usize = 88;

/// Bytes from a slot's start to the end of what a segment of a steady
/// transfer reads: the slot's own fields and the connection's up to
/// `send_buf` (`Connection`'s layout; the cache lines each segment
/// touches are measured in BENCHMARKS.md, session 31). 520 when the
/// connection's fields were first put in this order; 496 since the tuple
/// is a `FlowKey`; 440 since the receive side's IRS, FIN ahead, last
/// out-of-order start and D-SACK range (`RecvRare`) and the timed
/// segment of the RTT sample (`Connection::rtt_seq`) left it; 400 since
/// the retransmission, persist, keepalive and close deadlines and the
/// timers' counters (`TimerRare`) left it, the stack reading only the
/// earliest deadline armed after each segment; 384 (six lines of an
/// aligned slot) since the receiver's RTT measurement without timestamps
/// moved to `RecvRare` and the buffers' counts came before their chunk
/// lists, `timers` before `recv_buf` (a receiver's segment reads the
/// slot's first four lines).
const HOT_BUDGET: usize = 384;

#[test]
fn sizes_stay_within_budget() {
    let conn = std::mem::size_of::<Connection>();
    let slot = crate::stack::slot_size();
    assert!(
        conn <= CONNECTION_BUDGET,
        "Connection is {conn} bytes, budget {CONNECTION_BUDGET}"
    );
    assert!(
        slot <= SLOT_BUDGET,
        "slot is {slot} bytes, budget {SLOT_BUDGET}"
    );
    assert_eq!(std::mem::size_of::<crate::time::Deadline>(), 8);
    // The hot part: what a steady segment reads comes first, and before
    // `cc`, the first of the fields it does not read.
    let hot = crate::stack::slot_conn_offset() + Connection::HOT_LEN;
    assert!(
        hot <= HOT_BUDGET,
        "the hot part of a slot is {hot} bytes, budget {HOT_BUDGET}"
    );
    let tw = std::mem::size_of::<crate::time_wait::TimeWait>();
    assert!(
        tw <= TIME_WAIT_BUDGET,
        "TimeWait is {tw} bytes, budget {TIME_WAIT_BUDGET}"
    );
}

/// One step of the property test.
#[derive(Debug, Clone)]
enum Op {
    /// A opens a connection from port `10_000 + n`.
    Connect(u8),
    /// One side (true: A) writes `len` bytes on its `n`th connection.
    Send(bool, u8, u16),
    /// One side reads up to `len` bytes from its `n`th connection.
    Recv(bool, u8, u16),
    /// One side drops up to `len` bytes of what `peek` shows on its `n`th
    /// connection.
    Peek(bool, u8, u16),
    /// One side closes its `n`th connection.
    Close(bool, u8),
    /// One side shuts down writing.
    Shutdown(bool, u8),
    /// One side aborts its `n`th connection.
    Abort(bool, u8),
    /// Move every pending segment across, dropping those whose bit is set
    /// in the mask (bit `i % 16` for the `i`th segment).
    Deliver(u16),
    /// Time passes (ms) and timers run.
    Wait(u16),
    /// One side sets user data on its `n`th connection.
    UserData(bool, u8, u64),
    /// B moves RSS bucket `n % 3` to a fresh stack and back (export and
    /// import of the bucket's connections and TIME-WAIT records).
    MoveBucket(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6).prop_map(Op::Connect),
        (any::<bool>(), 0u8..6, 1u16..20_000).prop_map(|(s, n, l)| Op::Send(s, n, l)),
        (any::<bool>(), 0u8..6, 1u16..20_000).prop_map(|(s, n, l)| Op::Recv(s, n, l)),
        (any::<bool>(), 0u8..6, 1u16..3_000).prop_map(|(s, n, l)| Op::Peek(s, n, l)),
        (any::<bool>(), 0u8..6).prop_map(|(s, n)| Op::Close(s, n)),
        (any::<bool>(), 0u8..6).prop_map(|(s, n)| Op::Shutdown(s, n)),
        (any::<bool>(), 0u8..6).prop_map(|(s, n)| Op::Abort(s, n)),
        prop_oneof![Just(0u16), any::<u16>()].prop_map(Op::Deliver),
        prop_oneof![1u16..50, 100u16..3_000, Just(60_000u16)].prop_map(Op::Wait),
        (any::<bool>(), 0u8..6, any::<u64>()).prop_map(|(s, n, d)| Op::UserData(s, n, d)),
        (0u8..3).prop_map(Op::MoveBucket),
    ]
}

/// B's receive frames: B is lent the frame of most segments it receives
/// (zero-copy receive), as a data path lends them.
#[derive(Default)]
struct Frames {
    slots: Vec<Option<Vec<u8>>>,
    free: Vec<u32>,
}

impl FrameStore for Frames {
    fn frame(&self, id: u32) -> &[u8] {
        self.slots[id as usize]
            .as_deref()
            .expect("the stack reads only frames it holds")
    }
}

impl Frames {
    fn lend(&mut self, bytes: Vec<u8>) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(bytes);
                id
            }
            None => {
                self.slots.push(Some(bytes));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn give_back(&mut self, id: u32) {
        assert!(
            self.slots[id as usize].take().is_some(),
            "frame {id} released twice"
        );
        self.free.push(id);
    }

    fn held(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

struct Pair {
    a: Stack,
    b: Stack,
    frames: Frames,
    now: Instant,
    /// Handles each side knows, in the order it learnt them.
    a_conns: Vec<ConnHandle>,
    b_conns: Vec<ConnHandle>,
    buf: Vec<u8>,
}

impl Pair {
    /// A pair with one connection from A to B through its handshake.
    fn connected() -> Self {
        let mut p = Pair::new();
        p.apply(&Op::Connect(0));
        p.apply(&Op::Deliver(0));
        p.apply(&Op::Deliver(0));
        p
    }

    fn new() -> Self {
        let mut cfg_a = Config::new([1; 16]);
        let mut cfg_b = Config::new([2; 16]);
        for c in [&mut cfg_a, &mut cfg_b] {
            c.msl = Duration::from_secs(2);
            // Small enough that a few connections feel memory pressure.
            c.recv_memory = 96 * 1024;
            c.recv_buffer = 32 * 1024;
            c.send_buffer = 32 * 1024;
        }
        // A probes idle connections: its timers include keepalive, and
        // the wheel check sees the idle-to-active moves it makes.
        cfg_a.keepalive = Some(crate::KeepaliveConfig {
            idle: Duration::from_secs(5),
            interval: Duration::from_secs(1),
            probes: 3,
        });
        let mut b = Stack::new(cfg_b);
        b.listen("10.0.0.2:80".parse().expect("address"))
            .expect("listen");
        // B keeps its connections (and TIME-WAIT records) in 3 RSS buckets,
        // A in the one default bucket: both layouts are checked.
        b.set_buckets(3, |t| t.remote.port() % 3)
            .expect("no connections yet");
        Pair {
            a: Stack::new(cfg_a),
            b,
            frames: Frames::default(),
            now: Instant::from_millis(1),
            a_conns: Vec::new(),
            b_conns: Vec::new(),
            buf: vec![0; 65_536],
        }
    }

    fn side(&mut self, a: bool) -> (&mut Stack, &mut Vec<ConnHandle>) {
        if a {
            (&mut self.a, &mut self.a_conns)
        } else {
            (&mut self.b, &mut self.b_conns)
        }
    }

    fn conn(&mut self, a: bool, n: u8) -> Option<ConnHandle> {
        let (_, conns) = self.side(a);
        (!conns.is_empty()).then(|| conns[n as usize % conns.len()])
    }

    /// Reads from one side's connection (B through its frames).
    fn recv(&mut self, a: bool, h: ConnHandle, buf: &mut [u8]) -> Result<usize, crate::Error> {
        if a {
            self.a.recv(h, buf)
        } else {
            self.b.recv_in(h, buf, &self.frames)
        }
    }

    /// Takes back the frames B released, and checks that B holds exactly
    /// the others.
    fn frames_back(&mut self) {
        while let Some(id) = self.b.poll_released_frame() {
            self.frames.give_back(id);
        }
        assert_eq!(self.b.lent_frames(), self.frames.held(), "frames B holds");
    }

    /// Drains events (learning accepted handles, forgetting closed ones).
    fn events(&mut self) {
        for a in [true, false] {
            let (stack, conns) = self.side(a);
            while let Some(e) = stack.poll_event() {
                match e {
                    Event::Accepted { conn, .. } => conns.push(conn),
                    // A half-open connection imported where no listener
                    // takes it reports `Connected`.
                    Event::Connected(conn) if !conns.contains(&conn) => conns.push(conn),
                    Event::Closed { conn, .. } => conns.retain(|&c| c != conn),
                    _ => {}
                }
            }
        }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match *op {
            Op::Connect(n) => {
                let local: SocketAddr =
                    SocketAddr::new("10.0.0.1".parse().expect("ip"), 10_000 + u16::from(n));
                let remote = "10.0.0.2:80".parse().expect("address");
                if let Ok(h) = self.a.connect(now, local, remote) {
                    self.a_conns.push(h);
                }
            }
            Op::Send(a, n, len) => {
                if let Some(h) = self.conn(a, n) {
                    let data = vec![0x5a; usize::from(len)];
                    let _ = self.side(a).0.send(h, &data);
                }
            }
            Op::Recv(a, n, len) => {
                if let Some(h) = self.conn(a, n) {
                    let mut buf = vec![0; usize::from(len)];
                    let _ = self.recv(a, h, &mut buf);
                }
            }
            Op::Peek(a, n, len) => {
                if let Some(h) = self.conn(a, n) {
                    let (stack, frames): (&mut Stack, &dyn FrameStore) = if a {
                        (&mut self.a, &crate::NoFrames)
                    } else {
                        (&mut self.b, &self.frames)
                    };
                    let seen = stack.peek_in(h, frames).map_or(0, <[u8]>::len);
                    let take = seen.min(usize::from(len));
                    if seen > 0 {
                        assert_eq!(stack.consume(h, take), Ok(take));
                    }
                }
            }
            Op::Close(a, n) => {
                if let Some(h) = self.conn(a, n) {
                    let _ = self.side(a).0.close(h);
                }
            }
            Op::Shutdown(a, n) => {
                if let Some(h) = self.conn(a, n) {
                    let _ = self.side(a).0.shutdown_write(h);
                }
            }
            Op::Abort(a, n) => {
                if let Some(h) = self.conn(a, n) {
                    let _ = self.side(a).0.abort(h);
                }
            }
            Op::Deliver(mask) => self.deliver(mask),
            Op::Wait(ms) => {
                self.now += Duration::from_millis(u64::from(ms));
                self.a.handle_timeout(self.now);
                self.b.handle_timeout(self.now);
            }
            Op::UserData(a, n, d) => {
                if let Some(h) = self.conn(a, n) {
                    let stack = self.side(a).0;
                    stack.set_user_data(h, d).expect("live handle");
                    assert_eq!(stack.user_data(h), Ok(d));
                }
            }
            Op::MoveBucket(n) => self.move_bucket(u16::from(n % 3)),
        }
        self.events();
        self.frames_back();
    }

    /// B's bucket `bucket` goes to another stack and comes back, as a
    /// rebalancer would move it; B's handles follow.
    fn move_bucket(&mut self, bucket: u16) {
        let held = self.b.bucket_stats(bucket);
        let export = self.b.export_bucket_in(bucket, &self.frames);
        assert_eq!(self.b.bucket_stats(bucket).connections, 0);
        assert_eq!(self.b.bucket_stats(bucket).time_wait, 0);
        let mut other = Stack::new(self.b.config().clone());
        other
            .set_buckets(3, |t| t.remote.port() % 3)
            .expect("empty");
        let old: Vec<ConnHandle> = export.connections().iter().map(|c| c.0).collect();
        let moved = other.import_bucket(self.now, export);
        let there: Vec<ConnHandle> = moved.into_iter().map(|h| h.expect("imported")).collect();
        let back = other.export_bucket(bucket);
        // Back in the other stack's list order: its handles say which
        // connection each is.
        let order: Vec<ConnHandle> = back.connections().iter().map(|c| c.0).collect();
        let new = self.b.import_bucket(self.now, back);
        for (via, n) in order.iter().zip(new) {
            let n = n.expect("imported back");
            let i = there.iter().position(|h| h == via).expect("moved there");
            for h in self.b_conns.iter_mut().filter(|h| **h == old[i]) {
                *h = n;
            }
        }
        // Handles B's application never learnt (half-open connections) are
        // not in `b_conns`; every connection came back all the same.
        assert_eq!(self.b.bucket_stats(bucket).connections, held.connections);
        assert_eq!(self.b.bucket_stats(bucket).time_wait, held.time_wait);
    }

    /// Moves what each side has to send to the other, losing some.
    fn deliver(&mut self, mask: u16) {
        let mut i = 0usize;
        for from_a in [true, false] {
            let mut segs = Vec::new();
            let now = self.now;
            let mut buf = std::mem::take(&mut self.buf);
            let (stack, _) = self.side(from_a);
            while let Some(t) = stack.poll_transmit(now, &mut buf) {
                segs.push((t, buf[..t.len].to_vec()));
                if segs.len() > 2_000 {
                    break;
                }
            }
            self.buf = buf;
            for (t, bytes) in segs {
                // LAYOUT_TRACE=1 prints the segments of a failing case.
                if std::env::var_os("LAYOUT_TRACE").is_some() {
                    if let Ok((r, pl)) = flowlane_wire::TcpRepr::parse_segment(&bytes) {
                        let dir = if from_a { "A>B" } else { "B>A" };
                        let lost = mask & (1 << (i % 16)) != 0;
                        eprintln!(
                            "{now:?} {dir} {:?} seq={} ack={} len={} lost={lost}",
                            r.flags,
                            r.seq,
                            r.ack,
                            pl.len()
                        );
                    }
                }
                if mask & (1 << (i % 16)) == 0 {
                    if from_a && i % 5 != 4 {
                        // B is lent the frame (all but every fifth).
                        let id = self.frames.lend(bytes);
                        let seg = self.frames.frame(id);
                        let kept = match flowlane_wire::TcpRepr::parse_segment(seg) {
                            Ok((r, pl)) => {
                                let at = pl.as_ptr() as usize - seg.as_ptr() as usize;
                                let frame = FrameRef {
                                    id,
                                    payload_offset: at as u32,
                                };
                                let (src, dst) = (t.src.ip(), t.dst.ip());
                                let d = self.b.handle_tcp_frame(
                                    now,
                                    src,
                                    dst,
                                    Ecn::NotEct,
                                    &r,
                                    pl,
                                    frame,
                                );
                                d == Delivery::Kept
                            }
                            Err(_) => false,
                        };
                        if !kept {
                            self.frames.give_back(id);
                        }
                    } else {
                        let (to, _) = self.side(!from_a);
                        to.handle_segment(now, t.src.ip(), t.dst.ip(), &bytes);
                    }
                }
                i += 1;
            }
        }
    }
}

/// Issue 11: after 2^32 bytes SND.UNA comes back to the ISS, which once
/// marked "our SYN is not acknowledged yet": the send buffer was then read
/// one byte off and wrong bytes went out under a valid checksum. A's
/// connection is set up so that SND.UNA reaches the ISS after 3 000 bytes
/// of a 40 000-byte stream; B must read the stream exactly.
#[test]
fn the_send_stream_survives_snd_una_wrapping_onto_the_iss() {
    let mut p = Pair::connected();
    p.events();
    assert_eq!((p.a_conns.len(), p.b_conns.len()), (1, 1));
    let (a, b) = (p.a_conns[0], p.b_conns[0]);
    {
        let c = p.a.connection_mut(a);
        c.snd_rare.iss = c.snd.una + 3_000;
    }
    let sent: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let (mut off, mut got) = (0, Vec::new());
    let mut buf = vec![0; 65_536];
    for _ in 0..1_000 {
        // The first 3 000 bytes alone, until they are acknowledged: then
        // SND.UNA is exactly the ISS.
        let c = p.a.connection_mut(a);
        let upto = if c.snd.una < c.snd_rare.iss {
            3_000
        } else {
            sent.len()
        };
        if off < upto {
            off += p.a.send(a, &sent[off..upto]).expect("live");
        }
        p.apply(&Op::Deliver(0));
        let n = match p.recv(false, b, &mut buf) {
            Ok(n) => n,
            Err(crate::Error::WouldBlock) => 0,
            Err(e) => panic!("B's connection: {e:?}"),
        };
        got.extend_from_slice(&buf[..n]);
        p.apply(&Op::Deliver(0));
        p.apply(&Op::Wait(1));
        if got.len() == sent.len() {
            break;
        }
    }
    let c = p.a.connection_mut(a);
    assert!(c.snd.una > c.snd_rare.iss, "SND.UNA passed the ISS");
    assert!(p.b.stats().frames_kept > 0, "B kept payload in lent frames");
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "B read other bytes than A sent");
}

/// Moves every segment `from_a`'s side has to send to the other side, or
/// drops them all (`lose`).
fn one_way(p: &mut Pair, from_a: bool, lose: bool) {
    let now = p.now;
    let mut buf = vec![0; 65_536];
    let (from, to) = if from_a {
        (&mut p.a, &mut p.b)
    } else {
        (&mut p.b, &mut p.a)
    };
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        if !lose {
            to.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        }
    }
}

/// 200 kB from A to B, all of it acknowledged, without idle pauses:
/// enough that A's congestion window has room for a burst (RFC 5681 §4.1
/// would shrink it back after a pause).
fn grow_the_window(p: &mut Pair, a: ConnHandle) {
    let mut sent = 0;
    for _ in 0..1_000 {
        if sent < 200_000 {
            sent += p.a.send(a, &[7; 16_000]).expect("live");
        }
        p.apply(&Op::Deliver(0));
        p.apply(&Op::Recv(false, 0, 40_000));
        p.apply(&Op::Wait(1));
        let c = p.a.connection_mut(a);
        if sent >= 200_000 && c.snd.una == c.snd.max {
            break;
        }
    }
}

/// Everything A sends now reaches B but the first segment.
fn send_losing_the_first(p: &mut Pair) {
    let now = p.now;
    let mut buf = vec![0; 65_536];
    let mut first = true;
    while let Some(t) = p.a.poll_transmit(now, &mut buf) {
        if !std::mem::take(&mut first) {
            p.b.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        }
    }
}

/// Issue 11: `recover` once doubled as "no loss episode yet" (`recover ==
/// ISS`); 2^31 bytes after the last episode, an old `recover` reads as
/// ahead of SND.UNA, and duplicate ACKs no longer started fast retransmit
/// unless RFC 6582's ACK heuristic happened to allow it (it does not after
/// a stretch ACK of more than 4 segments, common from Linux receivers with
/// GRO): every loss then waited for a timeout. Here A's `recover` is set
/// 2^31 + 1000 bytes behind SND.UNA, the last ACK a stretch ACK, and the
/// first segment of a burst is lost.
#[test]
fn fast_retransmit_does_not_wait_for_a_stale_recover() {
    let mut p = Pair::connected();
    p.events();
    let a = p.a_conns[0];
    grow_the_window(&mut p, a);
    {
        let c = p.a.connection_mut(a);
        assert_eq!(c.snd.una, c.snd.max, "all acknowledged");
        c.snd_rare.recover = c.snd.una - ((1usize << 31) + 1000);
        c.snd.prev_una = c.snd.una - 20 * 1460;
    }
    p.a.send(a, &vec![8; 20_000]).expect("live");
    let before = *p.a.stats();
    send_losing_the_first(&mut p);
    one_way(&mut p, false, false);
    let s = *p.a.stats();
    assert_eq!(s.fast_retransmits, before.fast_retransmits + 1, "{s:?}");
    assert_eq!(s.rto_timeouts, before.rto_timeouts);
}

/// `high_rxt` (RFC 6675's HighRxt) outlives the recovery that set it, so
/// that a recovery entered before SND.UNA passes an ended one's
/// retransmissions does not send them again (`enter_recovery`). Left as
/// it was, 4 GiB of data later the old value reads as lying ahead of
/// SND.UNA again: a recovery entered then did not resend SND.UNA, and the
/// loss waited for the probe timer. Here A's `high_rxt` is set 2^32 − 1,000
/// bytes behind SND.UNA (1,000 ahead, as sequence numbers compare) with no
/// recovery behind it, and the first segment of a burst is lost.
#[test]
fn a_recovery_resends_snd_una_whatever_an_old_high_rxt_says() {
    let mut p = Pair::connected();
    p.events();
    let a = p.a_conns[0];
    grow_the_window(&mut p, a);
    let una = p.a.connection_mut(a).snd.una;
    p.a.send(a, &vec![8; 20_000]).expect("live");
    let before = *p.a.stats();
    send_losing_the_first(&mut p);
    {
        let c = p.a.connection_mut(a);
        assert!(c.snd.max - una > 10_000, "a burst out");
        c.snd_rare.high_rxt = una + 1_000;
    }
    // B's duplicate ACKs and SACKs: A enters recovery and resends
    // SND.UNA.
    one_way(&mut p, false, false);
    assert_eq!(p.a.stats().fast_retransmits, before.fast_retransmits + 1);
    let mut resent = false;
    let mut buf = vec![0; 65_536];
    while let Some(t) = p.a.poll_transmit(p.now, &mut buf) {
        let (seg, payload) = flowlane_wire::TcpRepr::parse_segment(&buf[..t.len]).expect("ours");
        resent |= seg.seq == una.0 && !payload.is_empty();
    }
    assert!(resent, "SND.UNA resent at once");
}

/// Issue 11: an abort's RST goes out at SND.MAX, which is the peer's
/// RCV.NXT once everything sent arrived, even if a timeout rewound SND.NXT
/// (here B received all of A's data, but B's ACKs were lost, and A's
/// retransmission timer went back to SND.UNA): at SND.NXT it would fall
/// below B's window, and B would never learn of the abort.
#[test]
fn an_abort_resets_the_peer_even_after_a_timeout_rewound_snd_nxt() {
    let mut p = Pair::connected();
    p.events();
    let (a, b) = (p.a_conns[0], p.b_conns[0]);
    // Within the initial window and without Nagle, so that all of it is
    // out at once: a tail loss probe (RFC 8985 §7.3) then sends the last
    // segment again, not new data that B would not have. A byte from B
    // first brings A B's window past the segment its SYN-ACK offered (a
    // half-open connection's buffer, under this pair's small receive
    // memory).
    p.a.set_nodelay(a, true).expect("live");
    p.b.send(b, &[7; 1]).expect("live");
    one_way(&mut p, false, false);
    p.a.send(a, &[7; 4_000]).expect("live");
    one_way(&mut p, true, false);
    one_way(&mut p, false, true);
    // Loss probes and the retransmission timeout fire; what they send is
    // lost too.
    for _ in 0..20 {
        p.apply(&Op::Wait(200));
        one_way(&mut p, true, true);
        if p.a.stats().rto_timeouts > 0 {
            break;
        }
    }
    {
        let c = p.a.connection_mut(a);
        assert!(c.snd.nxt < c.snd.max, "the timeout rewound SND.NXT");
    }
    p.a.abort(a).expect("live");
    let before = p.b.stats().resets_in;
    one_way(&mut p, true, false);
    assert_eq!(p.b.stats().resets_in, before + 1, "B took the RST");
    assert_eq!(p.b.state(b), Err(crate::Error::InvalidHandle));
}

/// Issue 11 measured 9 600 wheel entries for one keepalive connection
/// after as many idle-to-active exchanges: each left its far keepalive
/// entry behind. Now a connection has at most one entry.
#[test]
fn keepalive_leaves_no_stale_wheel_entries() {
    let mut p = Pair::connected();
    assert_eq!((p.a_conns.len(), p.b_conns.len()), (1, 1));
    for round in 0..2_000u32 {
        // Active: data both ways, its ACKs, retransmission and delayed-ACK
        // timers armed ahead of the keepalive.
        p.apply(&Op::Send(round % 2 == 0, 0, 100));
        p.apply(&Op::Deliver(0));
        p.apply(&Op::Recv(true, 0, 1_000));
        p.apply(&Op::Recv(false, 0, 1_000));
        p.apply(&Op::Deliver(0));
        // Idle, shorter than the keepalive's idle time (a delayed ACK may
        // cross only at the next round: under 5 s in all).
        p.apply(&Op::Wait(2_000));
        assert!(p.a.wheel_len() <= p.a.connection_count(), "round {round}");
        assert!(p.b.wheel_len() <= p.b.connection_count(), "round {round}");
    }
    p.a.check_layout().unwrap();
    // The exchanges kept it alive: no probe went out.
    assert_eq!(p.a.stats().keepalive_probes, 0);
    // Idle past the keepalive's 5 s: probes, answered, and it stays.
    for _ in 0..12 {
        p.apply(&Op::Wait(1_000));
        p.apply(&Op::Deliver(0));
    }
    assert!(p.a.stats().keepalive_probes >= 1);
    assert_eq!(p.a.connection_count(), 1);
}

/// A delayed ACK is queued, not filed on the wheel (`Stack::acks_due`): a
/// new connection's first data segment leaves B's wheel entry (its
/// SYN-ACK's retransmission timeout, a second away) where it was, and the
/// ACK still goes out `ack_delay` after the segment, not before. Armed
/// again within the delay (an immediate ACK went in between), it is
/// not queued twice: the entry, come up, finds it not due and files it on
/// the wheel, and it goes out on time too.
#[test]
fn a_delayed_ack_is_queued_not_filed_on_the_wheel() {
    let mut p = Pair::connected();
    let b = p.b_conns[0];
    let delay = p.b.config().ack_delay;
    let step = Duration::from_millis(1);
    let entry = p.b.wheel_deadline(b);
    // B's next segment, at `at`: none before, a pure ACK of `acked` bytes
    // of A's then.
    let ack_at = |p: &mut Pair, at: Instant, acked: u32| {
        let mut buf = vec![0; 2_048];
        while p.now + step < at {
            p.apply(&Op::Wait(1));
            assert!(
                p.b.poll_transmit(p.now, &mut buf).is_none(),
                "at {:?}",
                p.now
            );
            p.b.check_layout().unwrap();
        }
        p.apply(&Op::Wait(1));
        assert_eq!(p.now, at);
        let t = p.b.poll_transmit(p.now, &mut buf).expect("the delayed ACK");
        let (r, pl) = flowlane_wire::TcpRepr::parse_segment(&buf[..t.len]).unwrap();
        assert!(pl.is_empty() && r.flags.ack());
        assert_eq!(
            r.ack.wrapping_sub(p.b.connection_mut(b).rcv_rare.irs.0),
            1 + acked
        );
        p.a.handle_segment(p.now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
    };
    p.apply(&Op::Send(true, 0, 100));
    p.apply(&Op::Deliver(0));
    let first = p.now;
    assert_eq!(p.b.wheel_deadline(b), entry, "the wheel entry stays");
    assert!(entry.is_some_and(|e| e > first + delay));
    ack_at(&mut p, first + delay, 100);
    // Armed, acknowledged with data, armed again within the delay.
    p.apply(&Op::Send(true, 0, 100));
    p.apply(&Op::Deliver(0));
    let second = p.now;
    p.apply(&Op::Wait(10));
    // Two full segments: acknowledged at once (RFC 5681 §4.2).
    p.apply(&Op::Send(true, 0, 2_896));
    p.apply(&Op::Deliver(0));
    assert!(p.b.connection_mut(b).timers.delayed_ack.is_none());
    p.apply(&Op::Wait(10));
    p.apply(&Op::Send(true, 0, 100));
    p.apply(&Op::Deliver(0));
    let third = p.now;
    assert!(third < second + delay);
    ack_at(&mut p, third + delay, 3_196);
    p.b.check_layout().unwrap();
}

/// A zero window arms the persist timer (`Flags::PERSISTING` set, its
/// deadline filed on the wheel), probes back off while the window stays
/// shut, and the window's opening clears all of it: the flag that spares
/// every in-order segment a read of the persist timer is never clear while
/// the timer or its backoff is set (`check_layout`).
#[test]
fn the_persist_timer_is_flagged_from_a_zero_window_to_its_opening() {
    use crate::connection::Flags;
    let mut p = Pair::connected();
    let (a, b) = (p.a_conns[0], p.b_conns[0]);
    // B does not read, and its buffer is set small (the pair's memory
    // budget always leaves a connection one segment): its window closes
    // with A's data still queued.
    p.b.set_recv_buffer(b, 8 * 1024).expect("live");
    let (mut queued, data) = (0, vec![5; 20_000]);
    while queued < 120_000 {
        match p.a.send(a, &data) {
            Ok(n) => queued += n,
            Err(_) => break,
        }
        p.apply(&Op::Deliver(0));
        p.apply(&Op::Wait(1));
        p.apply(&Op::Deliver(0));
    }
    for _ in 0..4 {
        p.apply(&Op::Wait(50));
        p.apply(&Op::Deliver(0));
    }
    let persisting = |p: &mut Pair| {
        let c = p.a.connection_mut(a);
        (
            c.snd.wnd,
            c.flags.has(Flags::PERSISTING),
            c.timers_rare.persist.is_some(),
            c.timers_rare.persist_backoff,
        )
    };
    let (wnd, flagged, armed, _) = persisting(&mut p);
    let mss = u32::from(p.a.connection_mut(a).snd.mss);
    assert!(queued > 8 * 1024, "A queued more than B's buffer");
    assert!(wnd < mss, "B's window is shut, or too small to send into");
    assert!(flagged && armed, "the persist timer runs, flagged");
    p.a.check_layout().unwrap();
    // Probes go out and back off while the window stays shut.
    let probes = p.a.stats().segments_out;
    for _ in 0..3 {
        p.apply(&Op::Wait(3_000));
        p.apply(&Op::Deliver(0));
        p.a.check_layout().unwrap();
    }
    let (wnd, flagged, _, backoff) = persisting(&mut p);
    assert!(p.a.stats().segments_out > probes, "window probes went out");
    assert!(
        wnd == 0 && flagged && backoff > 0,
        "backed off, still flagged"
    );
    // B reads: the window opens, and the timer, its backoff and the flag
    // are cleared.
    let mut buf = vec![0; 65_536];
    while matches!(p.recv(false, b, &mut buf), Ok(n) if n > 0) {}
    for _ in 0..4 {
        p.apply(&Op::Deliver(0));
        p.apply(&Op::Wait(300));
    }
    let (wnd, flagged, armed, backoff) = persisting(&mut p);
    assert!(wnd > 0, "B's window opened");
    assert!(!flagged && !armed && backoff == 0, "persist cleared");
    p.a.check_layout().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn layout_survives_every_transition(ops in proptest::collection::vec(op(), 1..120)) {
        let mut p = Pair::new();
        for (i, op) in ops.iter().enumerate() {
            p.apply(op);
            for (name, s) in [("A", &p.a), ("B", &p.b)] {
                if let Err(e) = s.check_layout() {
                    return Err(TestCaseError::fail(format!("{name} after op {i} {op:?}: {e}")));
                }
            }
        }
        // Let everything finish: the applications read what is left and
        // close every connection they know (including ones accepted only
        // now); every connection ends and nothing is left behind.
        for _ in 0..40 {
            for a in [true, false] {
                let conns = p.side(a).1.clone();
                for h in conns {
                    let mut buf = vec![0; 65_536];
                    while matches!(p.recv(a, h, &mut buf), Ok(n) if n > 0) {}
                    let _ = p.side(a).0.close(h);
                }
            }
            p.apply(&Op::Deliver(0));
            p.apply(&Op::Wait(3_000));
        }
        for (name, s) in [("A", &p.a), ("B", &p.b)] {
            prop_assert!(s.check_layout().is_ok(), "{name}: {:?}", s.check_layout());
            prop_assert_eq!(s.connection_count(), 0, "{} keeps connections", name);
            prop_assert_eq!(s.buffer_memory(), 0, "{} keeps buffer memory", name);
            prop_assert_eq!(s.lent_frames(), 0, "{} keeps frames", name);
        }
        prop_assert_eq!(p.frames.held(), 0, "frames not given back");
    }
}

/// A connection closed while its `Closed` waits to be taken keeps its
/// slot, and the connection itself for [`Stack::info`], but no segment
/// reaches it there: one of its tuple that comes then, named by the last
/// segment's slot (`last_flow`) or by a slot [`Stack::expect`] named, is
/// answered as for no connection (a reset, RFC 9293 §3.10.7.1), and the
/// stack's layout stays whole. Its final figures are told while its
/// `Closed` is handled, then the slot is free.
#[test]
fn a_connection_held_for_its_closed_takes_no_segment() {
    let mut p = Pair::connected();
    p.apply(&Op::Connect(1));
    p.apply(&Op::Deliver(0));
    p.apply(&Op::Deliver(0));
    assert_eq!((p.a_conns.len(), p.b_conns.len()), (2, 2));
    let mut buf = vec![0; 4_096];
    // A's next segment on its connection `n`, not delivered.
    let segment = |p: &mut Pair, n: usize, buf: &mut Vec<u8>| {
        let h = p.a_conns[n];
        assert_eq!(p.a.send(h, &[7; 100]), Ok(100));
        let t = p.a.poll_transmit(p.now, buf).expect("A's segment");
        (t.src, t.dst, buf[..t.len].to_vec())
    };
    // B's connection of A's `n` (B learnt them in the same order).
    let resets_out = |p: &mut Pair, buf: &mut Vec<u8>| {
        let mut resets = Vec::new();
        while let Some(t) = p.b.poll_transmit(p.now, buf) {
            let (r, _) = flowlane_wire::TcpRepr::parse_segment(&buf[..t.len]).unwrap();
            if r.flags.rst() {
                resets.push((t.src, t.dst));
            }
        }
        resets
    };
    for by_expect in [false, true] {
        // The connection to close (0, then A's 1) and a segment of it,
        // which comes again once it closed (a duplicate); before it
        // closes, B's last segment was its own (`last_flow`) or the other
        // connection's, `expect` having named it.
        let (x, y) = if by_expect { (1, 0) } else { (0, 1) };
        let (src, dst, first) = segment(&mut p, x, &mut buf);
        p.b.handle_segment(p.now, src.ip(), dst.ip(), &first);
        if by_expect {
            let (ysrc, ydst, other) = segment(&mut p, y, &mut buf);
            p.b.handle_segment(p.now, ysrc.ip(), ydst.ip(), &other);
            let ends = flowlane_wire::peek::Endpoints::new(src, dst).expect("one family");
            assert!(p.b.expect(&ends).is_some(), "named ahead");
        }
        let bx = p.b_conns[x];
        let before = p.b.info(bx).expect("live");
        p.b.abort(bx).expect("live");
        resets_out(&mut p, &mut buf);
        // Its `Closed` not taken yet: the slot is held.
        p.b.handle_segment(p.now, src.ip(), dst.ip(), &first);
        p.b.check_layout().unwrap();
        assert_eq!(
            resets_out(&mut p, &mut buf),
            vec![(dst, src)],
            "by_expect {by_expect}: answered as for no connection"
        );
        // Its figures while its `Closed` is handled, then none.
        let mut told = None;
        while let Some(e) = p.b.poll_event() {
            if let Event::Closed { conn, .. } = e {
                assert_eq!(conn, bx);
                told = Some(p.b.info(bx));
            }
        }
        assert_eq!(told, Some(Ok(before)), "by_expect {by_expect}");
        assert_eq!(p.b.info(bx), Err(crate::Error::InvalidHandle));
        p.b.check_layout().unwrap();
        p.b_conns.retain(|&c| c != bx);
        // The resets were not delivered: A's connection goes by its own
        // abort.
        p.a.abort(p.a_conns[x]).expect("live");
        p.apply(&Op::Deliver(0));
        p.a.check_layout().unwrap();
        if !by_expect {
            // A's `1` is now its `0`, B's `1` its `0`.
            assert_eq!((p.a_conns.len(), p.b_conns.len()), (1, 1));
            p.apply(&Op::Connect(2));
            p.apply(&Op::Deliver(0));
            p.apply(&Op::Deliver(0));
            assert_eq!((p.a_conns.len(), p.b_conns.len()), (2, 2));
        }
    }
}
