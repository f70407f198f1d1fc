//! CUBIC (RFC 9438) with HyStart++ (RFC 9406) end to end in the
//! deterministic simulator: transfers over lossy, long-delay paths arrive
//! byte-exact, slow start ends before a deep queue (the RTT rise) or a
//! one-BDP queue (the ACK train) overflows, and after a loss the window regrows along the cubic curve
//! (concave up to W_max at about K seconds, convex beyond), where NewReno
//! grows by one segment per round trip. The window is read off the wire:
//! bytes the sender has sent that the ACKs it received do not cover.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{Config, CongestionAlgorithm, ConnHandle, Error};
use flowlane_wire::tcp::TcpFlags;
use flowlane_wire::TcpRepr;
use sim::{Bulk, LinkConfig, Side, Sim};
use std::cell::RefCell;
use std::rc::Rc;

fn config(secret: u8, alg: CongestionAlgorithm) -> Config {
    let mut c = sim::test_config(secret);
    c.congestion = alg;
    c
}

/// A transcontinental path with random loss, duplication and reordering
/// behind a 50 Mbit/s bottleneck with a 60 ms queue.
fn lossy_long_path() -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(40),
        jitter: Duration::from_millis(1),
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_delay: Duration::from_millis(5),
        bandwidth_bps: 50_000_000,
        max_queue_delay: Duration::from_millis(60),
        ..LinkConfig::default()
    }
}

fn transfer(seed: u64, link: LinkConfig, a_to_b: u64, b_to_a: u64) -> Sim {
    let mut b = config(2, CongestionAlgorithm::Cubic);
    b.recv_buffer_max = 8 << 20;
    let mut sim = Sim::new(seed, link, link, config(1, CongestionAlgorithm::Cubic), b);
    let t0 = sim.now;
    let mut bulk = Bulk::start(&mut sim, 2, a_to_b, b_to_a);
    let done = sim.run_until(t0 + Duration::from_secs(900), |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    assert!(bulk.errors.is_empty(), "seed {seed}: {:?}", bulk.errors);
    assert!(
        done,
        "seed {seed}: stalled at {:?}: {} bytes delivered, A {:?}",
        sim.now,
        bulk.delivered(),
        sim.a.stats()
    );
    sim
}

#[test]
fn lossy_long_delay_transfers_are_byte_exact() {
    for seed in [1, 2, 3] {
        // Bulk checks every byte against its position in the stream.
        let sim = transfer(seed, lossy_long_path(), 6 << 20, 1 << 20);
        let (a, b) = (sim.a.stats(), sim.b.stats());
        assert!(sim.stats.lost > 0 && sim.stats.queue_drops + sim.stats.lost > 10);
        assert!(
            a.fast_retransmits + b.fast_retransmits > 0,
            "seed {seed}: losses were recovered from: A {a:?}"
        );
    }
    // A lossier, longer one (5 %, 300 ms round trip, no bottleneck).
    let link = LinkConfig {
        delay: Duration::from_millis(150),
        loss: 0.05,
        ..LinkConfig::default()
    };
    transfer(7, link, 2 << 20, 256 << 10);
}

/// What the wire tells about A's window: samples of (ms, bytes A sent that
/// the ACKs A received do not cover).
#[derive(Default)]
struct Trace {
    iss: Option<u32>,
    /// One past the highest byte A sent, relative to its ISS.
    sent: u32,
    /// The highest cumulative ACK A received, relative.
    acked: u32,
    /// The data segment at this stream offset is lost once.
    drop_at: u32,
    /// The stream offset of the segment lost.
    dropped: Option<u32>,
    /// (ms, flight, highest ACK).
    samples: Vec<(u64, u32, u32)>,
}

const RTT_MS: u64 = 100;

/// Where the one loss falls: segment 208 of the stream, in the slow-start
/// round that sends segments 150 to 309 (RFC 6928's initial window of 10
/// doubles to 160 there). The link has no rate limit, so a round is one
/// burst and its ACKs arrive together: the sender learns of the loss with
/// the rest of the round, 102 segments, in flight; that flight is W_max.
const LOSS_AT: u32 = 300_000;

/// A sends to B over a 100 ms round trip with no other limit than the
/// congestion window; the segment at stream offset `drop_at` is lost once,
/// in slow start. A's connection is switched to `alg` right after the
/// connect (these stacks start on NewReno). Returns the trace over
/// `secs` seconds.
fn window_after_one_loss(alg: CongestionAlgorithm, drop_at: u32, secs: u64) -> Trace {
    let link = LinkConfig {
        delay: Duration::from_millis(RTT_MS / 2),
        ..LinkConfig::default()
    };
    let mut a = config(1, CongestionAlgorithm::NewReno);
    // The send buffer never limits (so that W_max = cwnd = the flight).
    a.send_buffer = 64 << 20;
    a.send_buffer_max = 64 << 20;
    let mut b = config(2, CongestionAlgorithm::NewReno);
    b.recv_buffer = 32 << 20;
    b.recv_buffer_max = 32 << 20;
    b.recv_memory = 256 << 20;
    let mut sim = Sim::new(11, link, link, a, b);
    let trace = Rc::new(RefCell::new(Trace {
        drop_at,
        ..Trace::default()
    }));
    let t = trace.clone();
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        let mut t = t.borrow_mut();
        if side != Side::A {
            return false;
        }
        if r.flags.contains(TcpFlags::SYN) {
            t.iss = Some(r.seq);
            return false;
        }
        let off = r
            .seq
            .wrapping_sub(t.iss.expect("SYN first"))
            .wrapping_sub(1);
        let end = off.wrapping_add(payload.len() as u32);
        if !payload.is_empty() && t.dropped.is_none() && off >= t.drop_at {
            t.dropped = Some(off);
            return true;
        }
        if end > t.sent && end < 1 << 31 {
            t.sent = end;
        }
        false
    }));
    sim.tap = Some(Vec::new());
    let t0 = sim.now;
    let mut bulk = Bulk::start(&mut sim, 1, 1 << 40, 0);
    let h: ConnHandle = bulk.a_handle(0).expect("connecting");
    sim.a.set_congestion(h, alg).expect("a live connection");
    sim.run_until(t0 + Duration::from_secs(secs), |s| {
        bulk.on_step(s);
        let mut t = trace.borrow_mut();
        let Some(iss) = t.iss else {
            return false;
        };
        for (side, bytes) in s.tap.as_mut().expect("tap on").drain(..) {
            if side == Side::A {
                let (r, _) = TcpRepr::parse_segment(&bytes).expect("our own segment");
                let rel = r.ack.wrapping_sub(iss).wrapping_sub(1);
                if rel > t.acked && rel < 1 << 31 {
                    t.acked = rel;
                }
            }
        }
        let flight = t.sent.saturating_sub(t.acked);
        let ms = (s.now - t0).as_millis();
        let acked = t.acked;
        t.samples.push((ms, flight, acked));
        false
    });
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
    let t = std::mem::take(&mut *trace.borrow_mut());
    assert!(t.dropped.is_some(), "the loss happened");
    t
}

/// The window about `at_ms`: the largest flight within one round trip
/// after it (the flight ebbs between ACKs, not the window).
fn window_at(t: &Trace, at_ms: u64) -> f64 {
    t.samples
        .iter()
        .filter(|(ms, _, _)| (at_ms..at_ms + RTT_MS).contains(ms))
        .map(|&(_, f, _)| f)
        .max()
        .expect("samples there") as f64
}

/// (W_max, the time recovery ended): the flight when the ACKs reached the
/// lost segment (the duplicate ACKs arrive with that ACK, before the
/// sender refills the window: the flight at the congestion event), and
/// the first ACK beyond it (the retransmission arrived).
fn the_loss(t: &Trace) -> (f64, u64) {
    let lost = t.dropped.expect("a loss");
    let &(_, w_max, _) = t
        .samples
        .iter()
        .find(|&&(_, _, acked)| acked >= lost)
        .expect("samples at the loss");
    let &(end, _, _) = t
        .samples
        .iter()
        .find(|&&(_, _, acked)| acked > lost)
        .expect("recovered");
    (f64::from(w_max), end)
}

/// When congestion avoidance began: the first time from `from` on that
/// the window reached `ssthresh` (a full ACK that ends recovery with
/// little in flight leaves cwnd at FlightSize + SMSS, RFC 6582 §3.2 step
/// 4, and slow start climbs back to ssthresh first).
fn avoidance_start(t: &Trace, from: u64, ssthresh: f64) -> u64 {
    t.samples
        .iter()
        .find(|&&(ms, f, _)| ms >= from && f64::from(f) >= ssthresh)
        .expect("back at ssthresh")
        .0
}

#[test]
fn window_regrows_along_the_cubic_curve_after_a_loss() {
    let t = window_after_one_loss(CongestionAlgorithm::Cubic, LOSS_AT, 16);
    let (w_max, recovered) = the_loss(&t);
    let smss = 1448.0;
    // Taken in slow start: W_max is well above the initial window.
    assert!(w_max > 80.0 * smss, "W_max {}", w_max / smss);
    let epoch = avoidance_start(&t, recovered, 0.66 * w_max);
    // RFC 9438 §4.6: β_cubic = 0.7: the stage starts at ssthresh.
    let floor = window_at(&t, epoch);
    assert!(
        (0.66..0.76).contains(&(floor / w_max)),
        "{floor} of {w_max}"
    );
    // RFC 9438 §4.2: K = cbrt(W_max (1 - β) / C), in segments.
    let k_ms = ((w_max / smss) * 0.3 / 0.4).cbrt() * 1000.0;
    let at = |f: f64| window_at(&t, epoch + (k_ms * f) as u64) / w_max;
    let (half, k, two_k) = (at(0.5), at(1.0), at(2.0));
    // Concave: W_cubic(K/2) = W_max - C (K/2)³ = 96 % of W_max (NewReno
    // would be near 0.7 + K/2 / RTT segments: about 80 %).
    assert!((0.93..1.0).contains(&half), "K/2: {half}, K {k_ms:.0} ms");
    // W_max again at about K (the plateau).
    assert!((0.97..1.04).contains(&k), "K: {k}, K {k_ms:.0} ms");
    // Convex: W_cubic(2K) = W_max + C K³ = 1.3 W_max.
    assert!((1.2..1.4).contains(&two_k), "2K: {two_k}, K {k_ms:.0} ms");
}

#[test]
fn newreno_connection_regrows_linearly() {
    // The same path and loss with the connection left on NewReno: the
    // window is halved and grows back by one segment per round trip, far
    // below CUBIC's concave curve (set_congestion decides).
    let t = window_after_one_loss(CongestionAlgorithm::NewReno, LOSS_AT, 10);
    let (w_max, recovered) = the_loss(&t);
    let smss = 1448.0;
    let epoch = avoidance_start(&t, recovered, 0.47 * w_max);
    let floor = window_at(&t, epoch);
    assert!(
        (0.47..0.56).contains(&(floor / w_max)),
        "{floor} of {w_max}"
    );
    let k_ms = ((w_max / smss) * 0.3 / 0.4).cbrt() * 1000.0;
    let k = window_at(&t, epoch + k_ms as u64) / w_max;
    // 0.5 W_max + K / RTT segments.
    let want = 0.5 + (k_ms / RTT_MS as f64) / (w_max / smss);
    assert!((k - want).abs() < 0.06, "K: {k} vs {want}");
    // Where CUBIC is at 96 % (see above), NewReno is near 75 %.
    let half = window_at(&t, epoch + (k_ms / 2.0) as u64) / w_max;
    assert!(half < 0.82, "K/2: {half}");
}

#[test]
fn set_congestion_needs_a_live_connection() {
    let mut sim = Sim::symmetric(1, LinkConfig::default());
    let (a, _) = sim.establish();
    sim.a.set_congestion(a, CongestionAlgorithm::Cubic).unwrap();
    sim.a.abort(a).unwrap();
    assert_eq!(
        sim.a.set_congestion(a, CongestionAlgorithm::NewReno),
        Err(Error::InvalidHandle)
    );
}

#[test]
fn hystart_leaves_slow_start_before_the_bottleneck_queue_overflows() {
    const QUEUE_MS: u64 = 500;
    // A 20 Mbit/s bottleneck on a 60 ms round trip (100 segments) with a
    // deep queue (400 ms, bufferbloat): slow start doubles the window
    // until the queue overflows and loses a window's worth; HyStart++
    // sees the RTT rise as the queue builds, leaves slow start for CSS
    // and then congestion avoidance (RFC 9406 §4.2), before any loss.
    // NewReno on the same path overflows the queue.
    //
    // CSS still grows by a quarter of what is acknowledged for 5 rounds;
    // once the queue dominates the round trip that is a quarter of the
    // bottleneck's rate (0.43 segments per ms here) for rounds that keep
    // getting longer, so the queue has to be deep: with RFC 6928's
    // initial window, HyStart++ leaves slow start at a 96 ms round trip
    // (RFC 5681's: 72 ms, one doubling earlier) and the flight peaks at
    // 809 segments (651), where a 400 ms queue holds 767.
    let link = LinkConfig {
        delay: Duration::from_millis(30),
        bandwidth_bps: 20_000_000,
        max_queue_delay: Duration::from_millis(QUEUE_MS),
        ..LinkConfig::default()
    };
    let run = |alg| {
        let a = config(1, alg);
        let mut b = config(2, alg);
        b.recv_buffer = 8 << 20;
        b.recv_buffer_max = 8 << 20;
        let mut sim = Sim::new(5, link, link, a, b);
        let t0 = sim.now;
        let bytes = 8 << 20;
        let mut bulk = Bulk::start(&mut sim, 1, bytes, 0);
        let done = sim.run_until(t0 + Duration::from_secs(120), |s| {
            bulk.on_step(s);
            bulk.delivered() == bytes
        });
        assert!(done && bulk.errors.is_empty(), "{alg:?}: {:?}", bulk.errors);
        (sim.stats.queue_drops, *sim.a.stats())
    };
    let (drops, stats) = run(CongestionAlgorithm::Cubic);
    assert_eq!(drops, 0, "CUBIC: {stats:?}");
    assert_eq!(stats.retransmits, 0, "{stats:?}");
    let (drops, _) = run(CongestionAlgorithm::NewReno);
    assert!(drops > 0, "NewReno fills the queue");
}

#[test]
fn the_ack_train_leaves_slow_start_before_a_one_bdp_queue_overflows() {
    // 50 Mbit/s, 10 ms each way, a drop-tail queue of one BDP (20 ms):
    // the test bed's path (tests/tests/tcp_cubic.rs). A rise of the
    // round's minimum RTT shows only once the window is about twice the
    // BDP, which this queue cannot hold; the ACK train shows the pipe full
    // a round earlier (Ha and Rhee §3.1), and slow start ends without a
    // loss.
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        bandwidth_bps: 50_000_000,
        max_queue_delay: Duration::from_millis(20),
        ..LinkConfig::default()
    };
    let a = config(1, CongestionAlgorithm::Cubic);
    let mut b = config(2, CongestionAlgorithm::Cubic);
    b.recv_buffer = 8 << 20;
    b.recv_buffer_max = 8 << 20;
    let mut sim = Sim::new(7, link, link, a, b);
    let t0 = sim.now;
    let bytes = 4 << 20;
    let mut bulk = Bulk::start(&mut sim, 1, bytes, 0);
    let done = sim.run_until(t0 + Duration::from_secs(60), |s| {
        bulk.on_step(s);
        bulk.delivered() == bytes
    });
    assert!(done && bulk.errors.is_empty(), "{:?}", bulk.errors);
    // Without the ACK train: 279 drops and 279 segments resent.
    let stats = *sim.a.stats();
    assert_eq!(sim.stats.queue_drops, 0, "{stats:?}");
    assert_eq!(stats.retransmits, 0, "{stats:?}");
}
