//! Send and receive buffer auto-tuning over the simulated link: receive
//! buffer dynamic right-sizing (Fisk & Feng, "Dynamic right-sizing in TCP";
//! Linux `tcp_rcv_space_adjust`) and send buffer growth with the congestion
//! window (Linux `tcp_sndbuf_expand`). Rates are in virtual time.

mod sim;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{Config, ConnHandle, Event, Stack, State};
use flowlane_wire::TcpRepr;
use sim::{LinkConfig, Side, Sim, A_IP, B_IP};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

/// A 1 Gbit/s path with a 50 ms RTT (bandwidth-delay product 6.25 MB),
/// with a bottleneck queue of one bandwidth-delay product (the classic
/// router buffer rule), so that slow start's bursts are queued, not dropped:
/// these tests measure the buffers, not loss recovery.
fn long_fat_link() -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(25),
        bandwidth_bps: 1_000_000_000,
        max_queue_delay: Duration::from_millis(50),
        ..LinkConfig::default()
    }
}

const RTT: Duration = Duration::from_millis(50);
const LINK_BPS: f64 = 1e9;

/// `a` before `b` in sequence space (RFC 9293 §3.4: modulo 2^32).
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Checks that the right edge of the window each side advertises
/// (SEG.ACK plus the scaled SEG.WND) never moves left (RFC 9293 §3.8.6, RFC 7323 §2.4),
/// over every segment a stack emits, lost ones included.
#[derive(Default)]
struct EdgeCheck {
    /// Window scale offered in each connection end's SYN, by (sending side,
    /// source port, destination port).
    offered: HashMap<(u8, u16, u16), Option<u8>>,
    /// Right edge (ACK + scaled window) last advertised, a sequence number.
    edges: HashMap<(u8, u16, u16), u32>,
    /// Segments checked.
    checked: u64,
    /// Largest window advertised by B (the receiver in these tests).
    max_b_window: usize,
    violations: Vec<String>,
}

impl EdgeCheck {
    fn install(sim: &mut Sim) -> Rc<RefCell<EdgeCheck>> {
        let check = Rc::new(RefCell::new(EdgeCheck::default()));
        let c = check.clone();
        sim.emit_tap = Some(Box::new(move |side, bytes| {
            c.borrow_mut().on_segment(side, bytes)
        }));
        check
    }

    fn on_segment(&mut self, side: Side, bytes: &[u8]) {
        let Ok((r, _)) = TcpRepr::parse_segment(bytes) else {
            self.violations.push("unparsable segment".into());
            return;
        };
        let s = u8::from(side == Side::B);
        let key = (s, r.src_port, r.dst_port);
        if r.flags.syn() {
            self.offered.insert(key, r.options.window_scale);
        }
        if r.flags.rst() || !r.flags.ack() {
            return;
        }
        // RFC 7323 §2.2: the window in a SYN is never scaled; otherwise
        // scaling applies only if both SYNs carried the option.
        let peer = (1 - s, r.dst_port, r.src_port);
        let shift = match (self.offered.get(&key), self.offered.get(&peer)) {
            (Some(Some(ours)), Some(Some(_))) if !r.flags.syn() => *ours,
            _ => 0,
        };
        let wnd = usize::from(r.window) << shift;
        let edge = r.ack.wrapping_add(wnd as u32);
        if side == Side::B {
            self.max_b_window = self.max_b_window.max(wnd);
        }
        if let Some(&prev) = self.edges.get(&key) {
            // RFC 7323 §2.4: a window truncated to the scale's unit may
            // retract the edge by less than one unit (a full buffer does,
            // so that its window closes: `advertise_window`).
            if prev.wrapping_sub(edge) as i32 >= 1 << shift {
                self.violations.push(format!(
                    "{side:?} {}->{}: right edge {} after {} (ack {} wnd {wnd})",
                    r.src_port, r.dst_port, edge, prev, r.ack
                ));
            }
        }
        let e = self.edges.entry(key).or_insert(edge);
        if seq_lt(*e, edge) {
            *e = edge;
        }
        self.checked += 1;
    }

    fn assert_ok(&self) {
        assert!(
            self.violations.is_empty(),
            "{} of {} segments moved the right edge left: {:?}",
            self.violations.len(),
            self.checked,
            &self.violations[..self.violations.len().min(5)]
        );
        assert!(self.checked > 0);
    }
}

/// Stream contents: byte `i` is `PATTERN[i % PERIOD]`; the period is prime
/// so that it lines up with no buffer size. Checking a chunk is a slice
/// comparison (cheap in a debug build).
const PERIOD: usize = 65_521;
const CHUNK: usize = 64 * 1024;

fn pattern_table() -> Vec<u8> {
    (0..PERIOD + CHUNK)
        .map(|i| {
            let i = i % PERIOD;
            (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8
        })
        .collect()
}

/// Outcome of a one-way bulk transfer.
struct Transfer {
    bytes: usize,
    /// Virtual time from the first byte queued to the last byte read.
    elapsed: Duration,
    /// Goodput over the second half of the bytes, in bits per second.
    second_half_bps: f64,
    /// Capacities at the end: (A's send buffer, B's receive buffer).
    send_capacity: usize,
    recv_capacity: usize,
}

impl Transfer {
    fn report(&self, name: &str) {
        eprintln!(
            "{name}: {} bytes in {:?} (virtual); second half {:.1} Mbit/s; \
             final send buffer {} B, receive buffer {} B",
            self.bytes,
            self.elapsed,
            self.second_half_bps / 1e6,
            self.send_capacity,
            self.recv_capacity
        );
    }
}

/// B reads what it has (in chunks of at most 64 KiB), checking each byte
/// against the pattern; `got` counts the stream's bytes read so far.
fn read_checked(sim: &mut Sim, b: ConnHandle, table: &[u8], got: &mut usize) {
    let mut rx = vec![0u8; CHUNK];
    while let Ok(n) = sim.b.recv(b, &mut rx) {
        if n == 0 {
            break;
        }
        let at = *got % PERIOD;
        assert!(rx[..n] == table[at..at + n], "corrupt data at {got}");
        *got += n;
    }
}

/// A sends `bytes` to B as fast as the application can: A keeps its send
/// buffer full, B reads everything as soon as it arrives (in chunks of at
/// most 64 KiB) and checks it. Nagle is off so that the last, partial
/// segment does not wait a round trip for the ACK of the rest.
fn one_way(sim: &mut Sim, a: ConnHandle, b: ConnHandle, bytes: usize, limit: Duration) -> Transfer {
    sim.a.set_nodelay(a, true).expect("nodelay");
    let table = pattern_table();
    let (mut sent, mut got) = (0usize, 0usize);
    let start = sim.now;
    let end = start + limit;
    let mut half_at: Option<Instant> = None;
    while got < bytes && sim.now < end {
        while sent < bytes {
            let n = (bytes - sent).min(CHUNK);
            let at = sent % PERIOD;
            match sim.a.send(a, &table[at..at + n]) {
                Ok(k) => sent += k,
                Err(_) => break,
            }
        }
        read_checked(sim, b, &table, &mut got);
        if half_at.is_none() && got >= bytes / 2 {
            half_at = Some(sim.now);
        }
        while sim.a.poll_event().is_some() {}
        while sim.b.poll_event().is_some() {}
        if got < bytes {
            sim.step();
        }
    }
    assert_eq!(
        got,
        bytes,
        "stalled at {:?}: A {:?} B {:?} link {:?}",
        sim.now,
        sim.a.stats(),
        sim.b.stats(),
        sim.stats
    );
    let half = half_at.expect("half way");
    let second = (bytes - bytes / 2) as f64 * 8.0;
    let secs = (sim.now - half).as_nanos() as f64 / 1e9;
    Transfer {
        bytes,
        elapsed: sim.now - start,
        second_half_bps: second / secs,
        send_capacity: sim.a.send_capacity(a).expect("live"),
        recv_capacity: sim.b.recv_capacity(b).expect("live"),
    }
}

/// Defaults (64 KiB initial buffers, growing to 4 MiB send / 6 MiB
/// receive) or, with `autotune` false, buffers fixed at 64 KiB.
fn config(secret: u8, autotune: bool) -> Config {
    let mut c = sim::test_config(secret);
    if !autotune {
        c.send_buffer_max = c.send_buffer;
        c.recv_buffer_max = c.recv_buffer;
    }
    c
}

/// A bulk transfer over a 1 Gbit/s, 50 ms RTT path: with 64 KiB buffers
/// the window caps goodput at 64 KiB per RTT (10.5 Mbit/s); with
/// auto-tuning both buffers grow (the send buffer to its 4 MiB maximum,
/// which bounds the flight at 4 MiB per RTT = 671 Mbit/s) and the second
/// half of the transfer runs at more than half the link rate. Every
/// segment either side emits keeps the advertised right edge from moving
/// left.
#[test]
fn autotuning_fills_a_long_fat_pipe() {
    let link = long_fat_link();
    let mut sim = Sim::new(1, link, link, config(1, true), config(2, true));
    let edges = EdgeCheck::install(&mut sim);
    let (a, b) = sim.establish();
    let t = one_way(&mut sim, a, b, 32 << 20, Duration::from_secs(30));
    t.report("auto-tuning on, 1 Gbit/s, 50 ms RTT");
    edges.borrow().assert_ok();
    assert!(
        t.second_half_bps > 0.5 * LINK_BPS,
        "second half at {:.1} Mbit/s; A {:?}",
        t.second_half_bps / 1e6,
        sim.a.stats()
    );
    assert_eq!(
        t.send_capacity,
        4 << 20,
        "the send buffer reached its maximum"
    );
    assert!(
        t.recv_capacity > 4 << 20,
        "receive buffer {}",
        t.recv_capacity
    );
    assert!(edges.borrow().max_b_window > 4 << 20);
}

/// The same path with auto-tuning off (maximum = initial = 64 KiB): the
/// receive window stays at 64 KiB and goodput at about 64 KiB per RTT,
/// which shows that the test above measures the buffers.
#[test]
fn without_autotuning_the_window_caps_goodput() {
    let link = long_fat_link();
    let mut sim = Sim::new(1, link, link, config(1, false), config(2, false));
    let edges = EdgeCheck::install(&mut sim);
    let (a, b) = sim.establish();
    let t = one_way(&mut sim, a, b, 2 << 20, Duration::from_secs(30));
    t.report("auto-tuning off, 1 Gbit/s, 50 ms RTT");
    edges.borrow().assert_ok();
    let cap_bps = 65536.0 * 8.0 / (RTT.as_nanos() as f64 / 1e9);
    assert!(
        t.second_half_bps < 1.1 * cap_bps && t.second_half_bps > 0.5 * cap_bps,
        "second half at {:.2} Mbit/s, 64 KiB/RTT is {:.2}",
        t.second_half_bps / 1e6,
        cap_bps / 1e6
    );
    assert_eq!((t.send_capacity, t.recv_capacity), (65536, 65536));
    assert!(edges.borrow().max_b_window <= 65536);
}

/// Without timestamps the receiver estimates its RTT as the time one
/// advertised window takes to arrive (the DRS paper's estimate); the
/// buffers still grow enough for more than half the link rate.
#[test]
fn autotuning_without_timestamps() {
    let link = long_fat_link();
    let (mut ca, mut cb) = (config(1, true), config(2, true));
    ca.timestamps = false;
    cb.timestamps = false;
    let mut sim = Sim::new(2, link, link, ca, cb);
    let edges = EdgeCheck::install(&mut sim);
    let (a, b) = sim.establish();
    let t = one_way(&mut sim, a, b, 32 << 20, Duration::from_secs(30));
    t.report("auto-tuning on, no timestamps, 1 Gbit/s, 50 ms RTT");
    edges.borrow().assert_ok();
    assert!(
        t.second_half_bps > 0.5 * LINK_BPS,
        "second half at {:.1} Mbit/s",
        t.second_half_bps / 1e6
    );
}

/// The window scale is chosen for the largest receive buffer (RFC 7323
/// §2.3): 7 for 6 MiB, and what the initial buffer needs when auto-tuning
/// is off.
#[test]
fn window_scale_follows_the_maximum() {
    for (autotune, want) in [(true, 7u8), (false, 1)] {
        let mut sim = Sim::new(
            3,
            LinkConfig::default(),
            LinkConfig::default(),
            config(1, autotune),
            config(2, autotune),
        );
        sim.tap = Some(Vec::new());
        sim.establish();
        let tap = sim.tap.take().expect("tap");
        for (_, seg) in tap.iter().take(2) {
            let (r, _) = TcpRepr::parse_segment(seg).expect("parse");
            assert!(r.flags.syn());
            assert_eq!(r.options.window_scale, Some(want), "autotune {autotune}");
        }
    }
}

/// 1,000 connections that only exchange small requests and responses keep
/// their initial buffers: memory grows only on demand.
#[test]
fn idle_connections_keep_initial_buffers() {
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        bandwidth_bps: 1_000_000_000,
        ..LinkConfig::default()
    };
    let mut sim = Sim::new(4, link, link, config(1, true), config(2, true));
    sim.b.listen(SocketAddr::new(B_IP, 80)).expect("listen");
    let n = 1000;
    let mut a = Vec::new();
    for i in 0..n {
        let local = SocketAddr::new(A_IP, 20000 + i as u16);
        a.push(
            sim.a
                .connect(sim.now, local, SocketAddr::new(B_IP, 80))
                .expect("connect"),
        );
    }
    let mut b = Vec::new();
    let ok = sim.run_until(sim.now + Duration::from_secs(10), |s| {
        while let Some(e) = s.b.poll_event() {
            if let Event::Accepted { conn, .. } = e {
                b.push(conn);
            }
        }
        while s.a.poll_event().is_some() {}
        b.len() == n
    });
    assert!(ok);
    // A few request/response rounds, with idle time between them.
    let mut buf = [0u8; 4096];
    for round in 0..3 {
        for &h in &a {
            assert_eq!(sim.a.send(h, &[round; 300]), Ok(300));
        }
        sim.run_for(Duration::from_millis(100));
        for &h in &b {
            assert_eq!(sim.b.recv(h, &mut buf), Ok(300));
            assert_eq!(sim.b.send(h, &[round; 1000]), Ok(1000));
        }
        sim.run_for(Duration::from_millis(100));
        for &h in &a {
            assert_eq!(sim.a.recv(h, &mut buf), Ok(1000));
        }
        sim.run_for(Duration::from_secs(2));
    }
    for (stack, handles) in [(&sim.a, &a), (&sim.b, &b)] {
        for &h in handles {
            assert_eq!(stack.state(h), Ok(State::Established));
            assert_eq!(stack.send_capacity(h), Ok(64 * 1024));
            assert_eq!(stack.recv_capacity(h), Ok(64 * 1024));
        }
    }
}

/// Both ends move to fresh stacks ("other cores") mid-transfer, after their
/// buffers grew and while the lossy link leaves out-of-order data in B's
/// buffer: the snapshots carry the grown capacities, and every byte still
/// arrives once and in order.
#[test]
fn export_import_keeps_grown_buffers() {
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        bandwidth_bps: 200_000_000,
        loss: 0.002,
        reorder: 0.01,
        reorder_delay: Duration::from_millis(2),
        ..LinkConfig::default()
    };
    let mut sim = Sim::new(5, link, link, config(1, true), config(2, true));
    let (mut a, mut b) = sim.establish();
    let table = pattern_table();
    let total = 12usize << 20;
    let (mut sent, mut got) = (0usize, 0usize);
    let mut moves = 0;
    let end = sim.now + Duration::from_secs(60);
    while got < total && sim.now < end {
        while sent < total {
            let at = sent % PERIOD;
            match sim.a.send(a, &table[at..at + (total - sent).min(CHUNK)]) {
                Ok(k) => sent += k,
                Err(_) => break,
            }
        }
        read_checked(&mut sim, b, &table, &mut got);
        while sim.a.poll_event().is_some() {}
        while sim.b.poll_event().is_some() {}
        sim.step();
        if got > (moves + 1) * (2 << 20) {
            moves += 1;
            // The snapshot is opaque: read the grown capacities before the move.
            let (send_cap, recv_cap) = (
                sim.a.send_capacity(a).expect("send capacity"),
                sim.b.recv_capacity(b).expect("recv capacity"),
            );
            let sa = sim.a.export(a).expect("export a");
            let sb = sim.b.export(b).expect("export b");
            let mut a2 = Stack::new(config(1, true));
            let mut b2 = Stack::new(config(2, true));
            a = a2.import(sim.now, sa).expect("import a");
            b = b2.import(sim.now, sb.clone()).expect("import b");
            assert_eq!(a2.send_capacity(a), Ok(send_cap));
            assert_eq!(b2.recv_capacity(b), Ok(recv_cap));
            assert_eq!(b2.export(b).expect("re-export"), sb, "snapshot round trip");
            b = b2.import(sim.now, sb).expect("import b");
            if moves >= 2 {
                assert!(send_cap > 64 * 1024, "{send_cap}");
                assert!(recv_cap > 64 * 1024, "{recv_cap}");
            }
            sim.a = a2;
            sim.b = b2;
        }
    }
    assert_eq!(got, total);
    assert!(moves >= 4, "{moves} moves");
    eprintln!("{moves} moves");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: std::env::var("SIM_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(12),
        failure_persistence: None,
        ..Default::default()
    })]

    /// On impaired links, with small initial buffers that grow many times
    /// while out-of-order data is held: every byte arrives once and in
    /// order (checked by the bulk driver) and no emitted segment moves the
    /// advertised right edge left.
    #[test]
    fn growth_keeps_data_and_right_edge(
        seed: u64,
        loss in 0.0f64..0.05,
        reorder in 0.0f64..0.1,
        dup in 0.0f64..0.05,
        delay_ms in 1u64..30,
        recv_buffer in 15_000usize..40_000,
        a_to_b in 100_000u64..600_000,
        b_to_a in 0u64..50_000,
    ) {
        let link = LinkConfig {
            delay: Duration::from_millis(delay_ms),
            jitter: Duration::from_millis(delay_ms / 4),
            loss,
            duplicate: dup,
            reorder,
            reorder_delay: Duration::from_millis(delay_ms / 2 + 1),
            bandwidth_bps: 100_000_000,
            max_queue_delay: Duration::from_millis(50),
            ..LinkConfig::default()
        };
        let (mut ca, mut cb) = (config(1, true), config(2, true));
        for c in [&mut ca, &mut cb] {
            c.recv_buffer = recv_buffer;
            c.recv_buffer_max = 1 << 20;
            c.send_buffer = 16 * 1024;
            c.send_buffer_max = 1 << 20;
        }
        let mut sim = Sim::new(seed, link, link, ca, cb);
        let edges = EdgeCheck::install(&mut sim);
        let mut bulk = sim::Bulk::start(&mut sim, 1, a_to_b, b_to_a);
        let done = sim.run_until(sim.now + Duration::from_secs(1800), |s| {
            bulk.on_step(s);
            bulk.finished()
        });
        proptest::prop_assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
        proptest::prop_assert!(done, "stalled at {:?}", sim.now);
        edges.borrow().assert_ok();
    }
}

/// Buffers the application fixes (`Stack::set_recv_buffer`,
/// `Stack::set_send_buffer`: Linux's `SO_RCVBUF` and `SO_SNDBUF`) keep
/// their size over a transfer that grows tuned ones to megabytes, and bound
/// the window: 256 KiB of receive buffer on a 50 ms path caps goodput at
/// 256 KiB per RTT (42 Mbit/s), 128 KiB of send buffer at 21 Mbit/s.
#[test]
fn fixed_buffers_are_not_tuned_and_bound_the_window() {
    let link = long_fat_link();
    // Goodput of a window of `bytes` per RTT, within 10 % above and half
    // below (slow start, losses).
    let window_bound = |t: &Transfer, bytes: usize| {
        let cap = bytes as f64 * 8.0 / (RTT.as_nanos() as f64 / 1e9);
        let bps = t.second_half_bps;
        assert!(
            (0.5 * cap..=1.1 * cap).contains(&bps),
            "{bps} bit/s for {bytes} B per RTT"
        );
    };

    let mut sim = Sim::new(41, link, link, config(1, true), config(2, true));
    let edges = EdgeCheck::install(&mut sim);
    let (a, b) = sim.establish();
    sim.b.set_recv_buffer(b, 256 << 10).unwrap();
    let t = one_way(&mut sim, a, b, 8 << 20, Duration::from_secs(60));
    t.report("receive buffer fixed at 256 KiB");
    edges.borrow().assert_ok();
    assert_eq!(t.recv_capacity, 256 << 10, "not tuned");
    let max_window = edges.borrow().max_b_window;
    assert!(max_window <= (256 << 10) + 128, "B offered {max_window}");
    assert!(max_window >= 200 << 10, "B offered only {max_window}");
    window_bound(&t, 256 << 10);

    let mut sim = Sim::new(42, link, link, config(1, true), config(2, true));
    let (a, b) = sim.establish();
    sim.a.set_send_buffer(a, 128 << 10).unwrap();
    let t = one_way(&mut sim, a, b, 4 << 20, Duration::from_secs(60));
    t.report("send buffer fixed at 128 KiB");
    assert_eq!(t.send_capacity, 128 << 10, "not tuned");
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.a.send(a, &vec![7u8; 1 << 20]), Ok(128 << 10));
    window_bound(&t, 128 << 10);
    // Sizes out of range are clamped: one segment at least, the stack's
    // largest at most.
    sim.a.set_send_buffer(a, 1).unwrap();
    let mss = sim.a.info(a).unwrap().mss as usize;
    assert_eq!(sim.a.send_capacity(a), Ok(mss));
    sim.b.set_recv_buffer(b, usize::MAX).unwrap();
    assert_eq!(sim.b.recv_capacity(b), Ok(6 << 20));
}

/// A reader that stopped has a full buffer and a zero window; raising its
/// receive buffer sends the larger window at once (not at the sender's
/// next zero-window probe), and lowering it never takes back the window
/// already offered (RFC 9293 §3.8.6): the smaller size shows once the
/// application reads.
#[test]
fn resizing_a_full_receive_buffer() {
    let link = LinkConfig {
        delay: Duration::from_millis(5),
        ..LinkConfig::default()
    };
    let mut sim = Sim::new(43, link, link, config(1, true), config(2, true));
    let edges = EdgeCheck::install(&mut sim);
    let (a, b) = sim.establish();
    let table = pattern_table();
    let mut sent = 0;
    let feed = |sim: &mut Sim, sent: &mut usize| {
        while *sent < 4 << 20 {
            let at = *sent % PERIOD;
            match sim.a.send(a, &table[at..at + CHUNK]) {
                Ok(k) if k > 0 => *sent += k,
                _ => break,
            }
        }
    };
    let readable = |sim: &Sim| sim.b.info(b).unwrap().readable;
    for _ in 0..100 {
        feed(&mut sim, &mut sent);
        sim.run_for(Duration::from_millis(10));
    }
    let full = readable(&sim);
    assert!((60 << 10..=80 << 10).contains(&full), "{full} readable");
    assert!(edges.borrow().max_b_window <= 80 << 10);
    sim.b.set_recv_buffer(b, 512 << 10).unwrap();
    sim.run_for(Duration::from_millis(1));
    let offered = edges.borrow().max_b_window;
    assert!(
        offered >= 440 << 10,
        "B offered {offered} right after the raise"
    );
    // The sender fills it (once it recovered from the probe it lost to the
    // full buffer: its retransmission timer).
    for _ in 0..300 {
        feed(&mut sim, &mut sent);
        sim.run_for(Duration::from_millis(10));
    }
    let grown = readable(&sim);
    assert!(grown >= 500 << 10, "{grown} readable after the raise");

    // Lowered to 16 KiB while 512 KiB are queued and unread.
    sim.b.set_recv_buffer(b, 16 << 10).unwrap();
    let mut got = 0;
    let mut tail = None;
    while got < 2 << 20 {
        feed(&mut sim, &mut sent);
        read_checked(&mut sim, b, &table, &mut got);
        if got > 1 << 20 && tail.is_none() {
            // From here on every window B offers is the small buffer's.
            tail = Some(EdgeCheck::install(&mut sim));
        }
        sim.step();
    }
    edges.borrow().assert_ok();
    let tail = tail.unwrap();
    tail.borrow().assert_ok();
    let max_window = tail.borrow().max_b_window;
    assert!(max_window <= (16 << 10) + 128, "B offered {max_window}");
    assert_eq!(sim.b.recv_capacity(b), Ok(16 << 10));
}
