//! Packetization-layer path MTU discovery (RFC 4821): over a path that
//! silently drops packets above its MTU (a black hole: no "packet too big"
//! ever arrives), a connection with `MtuProbing::Off` stalls, one with
//! `OnBlackHole` lowers its MSS after repeated timeouts and then searches
//! upward with probes until its MSS is within `mtu_probe_threshold` of the
//! largest that fits; `Always` searches from the handshake on and finds a
//! path that grew after `mtu_probe_interval`; and a lost probe is repaired
//! without a congestion response (RFC 4821 §7.6.2).

mod sim;

use std::cell::RefCell;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::rc::Rc;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{Config, ConnHandle, Event, MtuProbing};
use flowlane_wire::TcpRepr;
use sim::{events, read_all, test_config, LinkConfig, Side, Sim, A_IP, B_IP};

const A6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1));
const B6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2));

/// IPv4 (20) or IPv6 (40) header, TCP header (20) and timestamps (12).
fn overhead(v6: bool) -> usize {
    if v6 {
        72
    } else {
        52
    }
}

/// The payload length of every data segment A emitted, in order.
type Sizes = Rc<RefCell<Vec<usize>>>;

/// A stack pair whose A uses `mode`; A's data segment sizes recorded.
fn sim_with(mode: MtuProbing, tune: impl FnOnce(&mut Config), link: LinkConfig) -> (Sim, Sizes) {
    let mut a = test_config(1);
    a.mtu_probing = mode;
    tune(&mut a);
    let mut sim = Sim::new(7, link, link, a, test_config(2));
    let sizes: Sizes = Rc::default();
    let s = sizes.clone();
    sim.emit_tap = Some(Box::new(move |side, bytes| {
        let (_, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        if side == Side::A && !payload.is_empty() {
            s.borrow_mut().push(payload.len());
        }
    }));
    (sim, sizes)
}

/// Opens A → B:80 over IPv4 or IPv6.
fn connect(sim: &mut Sim, v6: bool) -> (ConnHandle, ConnHandle) {
    let (a_ip, b_ip) = if v6 { (A6, B6) } else { (A_IP, B_IP) };
    sim.b.listen(SocketAddr::new(b_ip, 80)).expect("listen");
    let a = sim
        .a
        .connect(
            sim.now,
            SocketAddr::new(a_ip, 10_000),
            SocketAddr::new(b_ip, 80),
        )
        .expect("connect");
    let mut b = None;
    let end = sim.now + Duration::from_secs(3);
    sim.run_until(end, |s| {
        for ev in events(&mut s.b) {
            if let Event::Accepted { conn, .. } = ev {
                b = Some(conn);
            }
        }
        b.is_some()
    });
    (a, b.expect("accepted"))
}

/// Writes `data` A → B as fast as A takes it, for at most `limit`;
/// returns what B read.
fn transfer(
    sim: &mut Sim,
    (a, b): (ConnHandle, ConnHandle),
    data: &[u8],
    limit: Duration,
) -> Vec<u8> {
    let (mut sent, mut got) = (0, Vec::new());
    let end = sim.now + limit;
    sim.run_until(end, |s| {
        if sent < data.len() {
            sent += s.a.send(a, &data[sent..]).unwrap_or(0);
        }
        got.extend(read_all(&mut s.b, b));
        got.len() == data.len()
    });
    got
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// The largest payload among the last `n` data segments A sent.
fn last_mss(sizes: &Sizes, n: usize) -> usize {
    let s = sizes.borrow();
    s.iter().rev().take(n).copied().max().unwrap_or(0)
}

fn black_hole(v6: bool, mode: MtuProbing, path_mtu: usize) -> (Sim, Sizes, Vec<u8>, Vec<u8>) {
    let (mut sim, sizes) = sim_with(mode, |_| {}, LinkConfig::default());
    let conns = connect(&mut sim, v6);
    sim.set_path_mtu(Side::A, path_mtu);
    let sent = data(3_000_000);
    let got = transfer(&mut sim, conns, &sent, Duration::from_secs(30));
    (sim, sizes, sent, got)
}

#[test]
fn without_probing_a_black_hole_stalls_the_connection() {
    for v6 in [false, true] {
        let (sim, _, _, got) = black_hole(v6, MtuProbing::Off, 1280 + 120 * usize::from(v6));
        assert!(
            got.is_empty(),
            "v6 {v6}: {} bytes passed a black hole",
            got.len()
        );
        assert_eq!(sim.a.stats().mtu_black_holes, 0);
        assert!(sim.stats.mtu_drops > 10, "{:?}", sim.stats);
    }
}

#[test]
fn on_black_hole_heals_it_and_settles_within_the_threshold() {
    // IPv4 through 1 280 bytes; IPv6 through 1 400 (its minimum, 1 280,
    // is what the black hole lowers it to at once).
    for (v6, path) in [(false, 1280), (true, 1400)] {
        let (sim, sizes, sent, got) = black_hole(v6, MtuProbing::OnBlackHole, path);
        assert!(
            got == sent,
            "v6 {v6}: {} of {} bytes",
            got.len(),
            sent.len()
        );
        let st = *sim.a.stats();
        assert!(st.mtu_black_holes >= 1, "v6 {v6}: {st:?}");
        assert!(st.mtu_probe_succeeded >= 1, "v6 {v6}: {st:?}");
        assert!(st.mtu_probe_failed >= 1, "v6 {v6}: {st:?}");
        // RFC 4821 §7.2: within the threshold (8 bytes) of what fits.
        let fits = path - overhead(v6);
        let mss = last_mss(&sizes, 200);
        assert!(
            mss <= fits && mss + 8 > fits,
            "v6 {v6}: settled at {mss}, {fits} fits; {st:?}"
        );
    }
}

#[test]
fn always_finds_a_path_that_grew_after_the_probe_interval() {
    for v6 in [false, true] {
        let interval = Duration::from_secs(5);
        let (mut sim, sizes) = sim_with(
            MtuProbing::Always,
            |c| c.mtu_probe_interval = interval,
            LinkConfig::default(),
        );
        let (a, b) = connect(&mut sim, v6);
        let narrow = 1280 + 120 * usize::from(v6);
        sim.set_path_mtu(Side::A, narrow);
        // 100 kB every 50 ms: enough to probe with, little to simulate.
        let chunk = data(100_000);
        let mut got = 0usize;
        let mut pump = |sim: &mut Sim, d: Duration| {
            let end = sim.now + d;
            while sim.now < end {
                let _ = sim.a.send(a, &chunk);
                let tick = sim.now + Duration::from_millis(50);
                sim.run_until(tick, |s| {
                    got += read_all(&mut s.b, b).len();
                    false
                });
            }
        };
        pump(&mut sim, Duration::from_secs(2));
        let fits = narrow - overhead(v6);
        let settled = last_mss(&sizes, 100);
        assert!(
            settled <= fits && settled + 8 > fits,
            "v6 {v6}: {settled} ({fits} fits) {:?}",
            sim.a.stats()
        );
        // The path grows; the search rests until its interval is over.
        sim.set_path_mtu(Side::A, 0);
        let grown = sizes.borrow().len();
        pump(&mut sim, Duration::from_secs(2));
        let early = sizes.borrow()[grown..].iter().copied().max();
        assert_eq!(early, Some(settled), "v6 {v6}: probed before the interval");
        pump(&mut sim, Duration::from_secs(6));
        let full = 1500 - overhead(v6);
        let mss = last_mss(&sizes, 100);
        assert!(
            mss <= full && mss + 8 > full,
            "v6 {v6}: {mss} after the path grew ({full} fits) {:?}",
            sim.a.stats()
        );
        assert!(got > 0);
    }
}

/// A → B over time: (ms, highest byte sent, cumulative ACK), as
/// A's segments go out and B's ACKs arrive, relative to the ISS.
#[derive(Default)]
struct Trace {
    iss: Option<u32>,
    sent: u32,
    acked: u32,
    /// Stream offset of the first segment too big for the path.
    dropped: Option<u32>,
    samples: Vec<(u64, u32, u32)>,
}

#[test]
fn a_lost_probe_does_not_reduce_the_window() {
    for v6 in [false, true] {
        // Nothing but the congestion window limits the flight, 100 ms
        // round trip; the path drops what exceeds 1 280 / 1 400 bytes.
        let link = LinkConfig {
            delay: Duration::from_millis(50),
            ..LinkConfig::default()
        };
        let path = 1280 + 120 * usize::from(v6);
        let (mut sim, _) = sim_with(
            MtuProbing::Always,
            |c| {
                c.send_buffer = 64 << 20;
                c.send_buffer_max = 64 << 20;
            },
            link,
        );
        let mut b_cfg = test_config(2);
        b_cfg.recv_buffer = 32 << 20;
        b_cfg.recv_buffer_max = 32 << 20;
        b_cfg.recv_memory = 256 << 20;
        sim.b = flowlane_tcp::Stack::new(b_cfg);
        let trace: Rc<RefCell<Trace>> = Rc::default();
        let t = trace.clone();
        let too_big = path - if v6 { 40 } else { 20 };
        sim.drop_filter = Some(Box::new(move |side, bytes| {
            let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
            let mut t = t.borrow_mut();
            if side != Side::A {
                return false;
            }
            let Some(iss) = t.iss else {
                t.iss = Some(r.seq);
                return false;
            };
            let off = r.seq.wrapping_sub(iss).wrapping_sub(1);
            if bytes.len() > too_big && t.dropped.is_none() {
                t.dropped = Some(off);
            }
            let end = off.wrapping_add(payload.len() as u32);
            if end > t.sent && end < 1 << 31 && bytes.len() <= too_big {
                t.sent = end;
            }
            false
        }));
        sim.tap = Some(Vec::new());
        let (a, b) = connect(&mut sim, v6);
        sim.set_path_mtu(Side::A, path);
        let t0 = sim.now;
        let chunk = data(1 << 20);
        sim.run_until(t0 + Duration::from_millis(1500), |s| {
            let _ = s.a.send(a, &chunk);
            read_all(&mut s.b, b);
            let mut t = trace.borrow_mut();
            let iss = t.iss.expect("SYN first");
            for (side, bytes) in s.tap.as_mut().expect("tap on").drain(..) {
                if side == Side::A {
                    let (r, _) = TcpRepr::parse_segment(&bytes).expect("our own segment");
                    let rel = r.ack.wrapping_sub(iss).wrapping_sub(1);
                    if rel > t.acked && rel < 1 << 31 {
                        t.acked = rel;
                    }
                }
            }
            let sample = (s.now.saturating_since(t0).as_millis(), t.sent, t.acked);
            t.samples.push(sample);
            false
        });
        let st = *sim.a.stats();
        assert!(st.mtu_probe_failed >= 1, "v6 {v6}: {st:?}");
        assert_eq!(st.rto_timeouts, 0, "v6 {v6}: {st:?}");
        let t = trace.borrow();
        let lost = t.dropped.expect("a probe was too big");
        // New data sent per round trip: in the one before the probe's
        // loss was found (a round trip before the first ACK beyond it, the
        // retransmission's) and in the one after that ACK. Slow start goes
        // on, so the second is no smaller (the rounds' edges fall between
        // ACKs: three quarters allowed); a reduction would halve it.
        let &(end, _, _) = t
            .samples
            .iter()
            .find(|&&(_, _, acked)| acked > lost)
            .expect("repaired");
        let sent_by = |ms: u64| {
            t.samples
                .iter()
                .take_while(|&&(at, _, _)| at < ms)
                .last()
                .map_or(0, |&(_, sent, _)| sent)
        };
        let round = |from: u64| sent_by(from + 100) - sent_by(from);
        let (at_loss, after) = (round(end - 200), round(end));
        assert!(
            after * 4 >= at_loss * 3,
            "v6 {v6}: {after} bytes sent in the round trip after the probe's repair, {at_loss} before; {st:?}"
        );
    }
}
