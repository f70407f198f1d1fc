//! Bulk transfers over the simulated link.

mod sim;

use flowlane_tcp::time::{Duration, Instant};
use sim::{Bulk, LinkConfig, Sim};

fn run_bulk(sim: &mut Sim, conns: usize, a_to_b: u64, b_to_a: u64, limit: Duration) -> Bulk {
    let mut bulk = Bulk::start(sim, conns, a_to_b, b_to_a);
    let deadline = sim.now + limit;
    let done = sim.run_until(deadline, |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    assert!(bulk.errors.is_empty(), "errors: {:?}", bulk.errors);
    assert!(
        done,
        "stalled at {:?}: delivered {} bytes, closed {}/{}, link {:?}, A {:?}, B {:?}",
        sim.now,
        bulk.delivered(),
        bulk.closed_a,
        bulk.closed_b,
        sim.stats,
        sim.a.stats(),
        sim.b.stats()
    );
    assert_eq!(sim.a.connection_count(), 0);
    assert_eq!(sim.b.connection_count(), 0);
    bulk
}

#[test]
fn clean_link_one_connection() {
    let mut sim = Sim::symmetric(1, LinkConfig::default());
    let t0 = sim.now;
    run_bulk(&mut sim, 1, 1_000_000, 0, Duration::from_secs(120));
    let s = sim.a.stats();
    assert_eq!(s.retransmits, 0);
    assert_eq!(sim.b.stats().bytes_in, 1_000_000);
    // 1 MB at a 10 ms RTT is ~0.2 s of transfer even with the initial 64 KiB
    // windows (auto-tuning grows them); the rest is TIME-WAIT (2*MSL = 60 s).
    assert!(
        sim.now - t0 < Duration::from_secs(62),
        "took {:?}",
        sim.now - t0
    );
}

#[test]
fn clean_link_bidirectional_many() {
    let mut sim = Sim::symmetric(2, LinkConfig::default());
    run_bulk(&mut sim, 20, 50_000, 70_000, Duration::from_secs(120));
    assert_eq!(sim.b.stats().bytes_in, 20 * 50_000);
    assert_eq!(sim.a.stats().bytes_in, 20 * 70_000);
}

#[test]
fn lossy_link_recovers() {
    let mut sim = Sim::symmetric(3, LinkConfig::hostile(0.05));
    run_bulk(&mut sim, 2, 300_000, 100_000, Duration::from_secs(300));
    let s = sim.a.stats();
    assert!(s.retransmits > 0);
    assert!(s.fast_retransmits > 0, "{s:?}");
    assert!(sim.stats.checksum_drops > 0);
    assert!(sim.b.stats().out_of_order > 0);
}

#[test]
fn thousand_concurrent_connections() {
    let link = LinkConfig {
        bandwidth_bps: 1_000_000_000,
        loss: 0.01,
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(4, link);
    run_bulk(&mut sim, 1000, 4000, 1000, Duration::from_secs(300));
    assert_eq!(sim.b.stats().passive_opens, 1000);
}

/// B's configuration on the impaired links: Linux's SYN-ACK budget (5
/// retransmissions, a half-open connection kept about a minute) instead of
/// flowlane's default 2 (about 7 s, short against spoofed SYNs). With 15 %
/// loss and 5 % corruption both ways, a client's handshake-completing ACK
/// and every retransmission of its first data can all be lost for longer
/// than 7 s (CI found such a seed: A's data arrived after 24 s); B has then
/// dropped the half-open connection and answers with a reset, as it
/// should. These tests are about the bytes, not that policy.
fn hostile_link_server() -> flowlane_tcp::Config {
    let mut b = sim::test_config(2);
    b.max_synack_retransmits = 5;
    b
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        // SIM_CASES=N runs more seeds (the default keeps `cargo test` fast).
        cases: std::env::var("SIM_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        failure_persistence: None,
        ..Default::default()
    })]

    /// Every byte arrives exactly once and in order, the transfer completes
    /// within a virtual-time bound, and both sides reach CLOSED after
    /// TIME-WAIT, for arbitrary seeds and impairments.
    #[test]
    fn every_byte_once_in_order(
        seed: u64,
        loss in 0.0f64..0.15,
        dup in 0.0f64..0.1,
        reorder in 0.0f64..0.2,
        corrupt in 0.0f64..0.05,
        delay_ms in 1u64..50,
        a_to_b in 0u64..60_000,
        b_to_a in 0u64..20_000,
        conns in 1usize..4,
        bw in proptest::sample::select(vec![0u64, 10_000_000, 1_000_000_000]),
        nagle: bool,
    ) {
        let link = LinkConfig {
            delay: Duration::from_millis(delay_ms),
            jitter: Duration::from_millis(delay_ms / 2),
            loss,
            duplicate: dup,
            reorder,
            reorder_delay: Duration::from_millis(delay_ms),
            reorder_jitter: Duration::ZERO,
            corrupt,
            bandwidth_bps: bw,
            max_queue_delay: Duration::from_millis(50),
            mtu: 1500,
        };
        let mut a = sim::test_config(1);
        a.nagle = nagle;
        let mut sim = Sim::new(seed, link, link, a, hostile_link_server());
        // The bound covers RTO backoff up to the 60 s maximum on the lossiest
        // links (retransmissions and ACKs are lost too) plus TIME-WAIT.
        run_bulk(&mut sim, conns, a_to_b, b_to_a, Duration::from_secs(1800));
        proptest::prop_assert_eq!(sim.b.stats().bytes_in, conns as u64 * a_to_b);
        proptest::prop_assert_eq!(sim.a.stats().bytes_in, conns as u64 * b_to_a);
        proptest::prop_assert!(sim.now <= Instant::from_millis(1) + Duration::from_secs(1800));
    }
}

/// Regression: found by `every_byte_once_in_order`.
#[test]
fn regression_lossy_small_transfer() {
    let link = LinkConfig {
        delay: Duration::from_millis(34),
        jitter: Duration::from_millis(17),
        loss: 0.10532886412054343,
        duplicate: 0.055340526874426456,
        reorder: 0.032828444596615616,
        reorder_delay: Duration::from_millis(34),
        reorder_jitter: Duration::ZERO,
        corrupt: 0.015440759520567582,
        bandwidth_bps: 0,
        max_queue_delay: Duration::from_millis(50),
        mtu: 1500,
    };
    let mut a = sim::test_config(1);
    a.nagle = false;
    let mut sim = Sim::new(8382984795084445916, link, link, a, sim::test_config(2));
    run_bulk(&mut sim, 3, 4345, 5792, Duration::from_secs(600));
}

/// Regression: found by `every_byte_once_in_order` (B reset at close).
#[test]
fn regression_reset_at_close() {
    let link = LinkConfig {
        delay: Duration::from_millis(45),
        jitter: Duration::from_millis(22),
        loss: 0.14134306700037924,
        duplicate: 0.07342440978268563,
        reorder: 0.07846819702754627,
        reorder_delay: Duration::from_millis(45),
        reorder_jitter: Duration::ZERO,
        corrupt: 0.049680131212387374,
        bandwidth_bps: 10_000_000,
        max_queue_delay: Duration::from_millis(50),
        mtu: 1500,
    };
    let mut a = sim::test_config(1);
    a.nagle = false;
    let mut sim = Sim::new(1381868310946106657, link, link, a, sim::test_config(2));
    run_bulk(&mut sim, 3, 15965, 17377, Duration::from_secs(600));
}

/// Regression: found by `every_byte_once_in_order` (stall).
#[test]
fn regression_stall() {
    let link = LinkConfig {
        delay: Duration::from_millis(13),
        jitter: Duration::from_millis(6),
        loss: 0.13664859019601155,
        duplicate: 0.0747751618180206,
        reorder: 0.08850115997013148,
        reorder_delay: Duration::from_millis(13),
        reorder_jitter: Duration::ZERO,
        corrupt: 0.01052054217060442,
        bandwidth_bps: 10_000_000,
        max_queue_delay: Duration::from_millis(50),
        mtu: 1500,
    };
    let mut a = sim::test_config(1);
    a.nagle = false;
    let mut sim = Sim::new(7730085378806777090, link, link, a, sim::test_config(2));
    run_bulk(&mut sim, 3, 49233, 5793, Duration::from_secs(600));
}

/// Regression: found by `every_byte_once_in_order` (slow recovery).
#[test]
fn regression_slow_recovery() {
    let link = LinkConfig {
        delay: Duration::from_millis(40),
        jitter: Duration::from_millis(20),
        loss: 0.1478248773720278,
        duplicate: 0.06128538091057076,
        reorder: 0.13617903039954912,
        reorder_delay: Duration::from_millis(40),
        reorder_jitter: Duration::ZERO,
        corrupt: 0.02064029650037753,
        bandwidth_bps: 1_000_000_000,
        max_queue_delay: Duration::from_millis(50),
        mtu: 1500,
    };
    let mut a = sim::test_config(1);
    a.nagle = false;
    let mut sim = Sim::new(5828390517167937967, link, link, a, sim::test_config(2));
    // 15% loss in both directions, including retransmissions and ACKs:
    // exponential backoff up to the 60 s maximum RTO makes this slow (about
    // 10 virtual minutes) but it must still complete.
    run_bulk(&mut sim, 2, 24617, 1449, Duration::from_secs(1800));
}

/// Regression: found by `every_byte_once_in_order` in CI (session 22: A's
/// connection 1 reset, see [`hostile_link_server`]).
#[test]
fn regression_reset_on_a_corrupting_link() {
    let link = LinkConfig {
        delay: Duration::from_millis(28),
        jitter: Duration::from_millis(14),
        loss: 0.12243201953156113,
        duplicate: 0.002117973369190517,
        reorder: 0.032622464767447276,
        reorder_delay: Duration::from_millis(28),
        reorder_jitter: Duration::ZERO,
        corrupt: 0.03830623066675762,
        bandwidth_bps: 10_000_000,
        max_queue_delay: Duration::from_millis(50),
        mtu: 1500,
    };
    let mut a = sim::test_config(1);
    a.nagle = false;
    let mut sim = Sim::new(1553371668298651610, link, link, a, hostile_link_server());
    run_bulk(&mut sim, 2, 20273, 8689, Duration::from_secs(1800));
    assert_eq!(sim.b.stats().bytes_in, 2 * 20273);
    assert_eq!(sim.a.stats().bytes_in, 2 * 8689);
    // With flowlane's default SYN-ACK budget a run on this link can reset
    // a connection: B dropped it half-open before A's first data came. (The
    // seed is one where it does, found again whenever the stack's segments
    // change the run; session 22's seed did until session 44.)
    let seed = 252;
    let mut a = sim::test_config(1);
    a.nagle = false;
    let mut sim = Sim::new(seed, link, link, a.clone(), hostile_link_server());
    run_bulk(&mut sim, 2, 20273, 8689, Duration::from_secs(1800));
    let mut sim = Sim::new(seed, link, link, a, sim::test_config(2));
    let mut bulk = Bulk::start(&mut sim, 2, 20273, 8689);
    let deadline = sim.now + Duration::from_secs(1800);
    sim.run_until(deadline, |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    assert_eq!(
        bulk.errors.first().map(String::as_str),
        Some("A conn 0 closed: Reset")
    );
    assert_eq!(sim.b.stats().resets_out, 1);
    assert_eq!(
        sim.b.stats().resets_listener_ack,
        1,
        "A's data found no connection"
    );
}

#[test]
fn push_marks_only_the_segment_that_empties_the_send_buffer() {
    // RFC 9293 §3.9.1: PSH goes on the last segment of what is queued. On
    // every segment it made Linux receivers ACK each one (a full-sized PSH
    // segment is ACKed as soon as the application reads it), doubling the
    // ACKs of a bulk transfer. One 2 MB write: its segments carry PSH only
    // where the buffer ran dry (at least the last one), a small fraction.
    use flowlane_wire::TcpRepr;
    use sim::Side;
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut sim = Sim::symmetric(11, LinkConfig::default());
    let seen = Rc::new(RefCell::new((0u64, 0u64)));
    let s = Rc::clone(&seen);
    sim.emit_tap = Some(Box::new(move |side, bytes| {
        if let (Side::A, Ok((r, payload))) = (side, TcpRepr::parse_segment(bytes)) {
            if !payload.is_empty() {
                let mut s = s.borrow_mut();
                s.0 += 1;
                s.1 += u64::from(r.flags.psh());
            }
        }
    }));
    run_bulk(&mut sim, 1, 2_000_000, 0, Duration::from_secs(120));
    let (data, pushed) = *seen.borrow();
    assert!(data > 1000, "{data} data segments");
    assert!(pushed >= 1, "the last segment is pushed");
    assert!(
        pushed * 20 < data,
        "{pushed} of {data} data segments pushed"
    );
}
