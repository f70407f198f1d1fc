//! The retransmission timer (RFC 6298) against the loss probe sharing its
//! slot (RFC 8985 §7.2), in the simulator: a lone segment after a bulk
//! transfer, whose receiver delays its ACK, times nothing out; and new
//! data sent on a path gone dark never puts the timer off for good; and a
//! second timeout after partial progress reduces the window from what was
//! resent since the first.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{CongestionAlgorithm, ConnHandle, Stats};
use flowlane_wire::TcpRepr;
use sim::{read_all, test_config, LinkConfig, Side, Sim};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// A connection whose sender, A, has sent `bulk` bytes over a path of
/// `one_way` each way (the receiver delaying its ACKs by `ack_delay`),
/// all acknowledged and read: RTTVAR has decayed on the steady ACKs.
fn after_bulk(
    one_way: Duration,
    ack_delay: Duration,
    bulk: usize,
) -> (Sim, ConnHandle, ConnHandle) {
    let link = LinkConfig {
        delay: one_way,
        ..LinkConfig::default()
    };
    let mut b_cfg = test_config(2);
    b_cfg.ack_delay = ack_delay;
    let mut sim = Sim::new(41, link, link, test_config(1), b_cfg);
    let (a, b) = sim.establish();
    let chunk = vec![1u8; 64 << 10];
    let mut sent = 0;
    let end = sim.now + Duration::from_secs(60);
    while sent < bulk && sim.now < end {
        if let Ok(n) = sim.a.send(a, &chunk[..chunk.len().min(bulk - sent)]) {
            sent += n;
        }
        if !sim.step() {
            sim.now += Duration::from_millis(1);
        }
        read_all(&mut sim.b, b);
    }
    let limit = sim.now + Duration::from_secs(10);
    sim.run_until(limit, |s| s.a.info(a).unwrap().unacked == 0);
    sim.run_for(Duration::from_millis(50));
    read_all(&mut sim.b, b);
    assert_eq!(sent, bulk);
    (sim, a, b)
}

/// RFC 6298 §2.4's floor (Linux's: on the variance term, so that it holds
/// on every path length): a lone segment's delayed ACK comes after RTT +
/// the receiver's delay, which a bulk transfer's prompt ACKs (every
/// second segment, RFC 5681 §4.2) never showed RTTVAR. Timing it out
/// cuts cwnd to one segment and ssthresh to two.
#[test]
fn a_lone_segment_s_delayed_ack_after_bulk_is_no_timeout() {
    for (one_way, ack_delay) in [
        (Duration::from_millis(125), Duration::from_millis(40)),
        (Duration::from_millis(85), Duration::from_millis(40)),
        (Duration::from_millis(1), Duration::from_millis(150)),
    ] {
        let (mut sim, a, b) = after_bulk(one_way, ack_delay, 2_000_000);
        let before = sim.a.info(a).unwrap();
        let stats: Stats = *sim.a.stats();
        sim.a.send(a, &[9u8; 100]).unwrap();
        sim.run_for(Duration::from_secs(2));
        read_all(&mut sim.b, b);
        let after = sim.a.info(a).unwrap();
        assert_eq!(after.unacked, 0);
        let case = format!("{one_way:?} each way, ACKs delayed {ack_delay:?}");
        assert_eq!(
            sim.a.stats().rto_timeouts,
            stats.rto_timeouts,
            "{case}: srtt {:?}",
            before.srtt
        );
        assert_eq!(after.cwnd, before.cwnd, "{case}");
        assert_eq!(after.ssthresh, before.ssthresh, "{case}");
    }
}

/// RFC 6298 §5.1 (a running timer is not restarted by new data) and RFC
/// 8985 §7.2 (`TLP_calc_PTO`: a probe armed after new data fires no later
/// than the retransmission timer would): an application writing a small
/// message every 10 ms to a peer gone silent hears the loss within an
/// RTO and a probe timeout of the last ACK, not after its writes filled
/// the window.
#[test]
fn new_data_on_a_dark_path_does_not_put_the_timer_off() {
    for sack in [true, false] {
        let link = LinkConfig {
            delay: Duration::from_millis(10),
            ..LinkConfig::default()
        };
        let (mut a_cfg, mut b_cfg) = (test_config(1), test_config(2));
        a_cfg.sack = sack;
        b_cfg.sack = sack;
        let mut sim = Sim::new(42, link, link, a_cfg, b_cfg);
        let (a, b) = sim.establish();
        sim.a.set_nodelay(a, true).unwrap();
        // A window of some 180 KB, grown by a bulk transfer.
        let chunk = vec![1u8; 64 << 10];
        let mut sent = 0;
        while sent < 300_000 {
            if let Ok(n) = sim.a.send(a, &chunk) {
                sent += n;
            }
            if !sim.step() {
                sim.now += Duration::from_millis(1);
            }
            read_all(&mut sim.b, b);
        }
        let limit = sim.now + Duration::from_secs(10);
        sim.run_until(limit, |s| s.a.info(a).unwrap().unacked == 0);
        let rto_bound = Duration::from_secs(1);
        let stats: Stats = *sim.a.stats();
        sim.link_up = false;
        let cut = sim.now;
        let mut next_write = sim.now;
        let reacted = |s: &Stats| {
            s.tlp_probes + s.loss_probes + s.rto_timeouts + s.retransmits
                > stats.tlp_probes + stats.loss_probes + stats.rto_timeouts + stats.retransmits
        };
        while sim.now < cut + rto_bound && !reacted(sim.a.stats()) {
            if sim.now >= next_write {
                sim.a.send(a, &[7u8; 100]).unwrap();
                next_write += Duration::from_millis(10);
            }
            sim.flush();
            match sim.next_event() {
                Some(t) if t <= next_write => {
                    sim.step();
                }
                _ => sim.now = sim.now.max(next_write),
            }
        }
        assert!(
            reacted(sim.a.stats()),
            "sack {sack}: no probe, retransmission or timeout within {rto_bound:?} of the cut \
             (srtt {:?})",
            sim.a.info(a).unwrap().srtt
        );
    }
}

/// RFC 5681 §3.1 equation (4), and RFC 9438 §4.8 for CUBIC (β_cubic of
/// it): a timeout sets ssthresh from FlightSize. After a first timeout's
/// go-back-N and partial progress (the ACKs of some retransmissions reset
/// the timer's count, so the next timeout reduces again), a second
/// timeout's FlightSize is what was resent since: the rest of the flight
/// before the first timeout, past SND.NXT, was given up as lost then and
/// is not resent yet. Reducing from SND.MAX − SND.UNA instead would leave
/// ssthresh near the first timeout's.
#[test]
fn a_second_timeout_after_partial_progress_reduces_from_what_was_resent() {
    for (algo, beta) in [
        (CongestionAlgorithm::Cubic, 0.7),
        (CongestionAlgorithm::NewReno, 0.5),
    ] {
        let link = LinkConfig {
            delay: Duration::from_millis(10),
            ..LinkConfig::default()
        };
        let mut a_cfg = test_config(1);
        a_cfg.congestion = algo;
        let mut sim = Sim::new(43, link, link, a_cfg, test_config(2));
        let (a, b) = sim.establish();
        // A blackout of A's segments (B's ACKs of what arrived before it
        // still come back), and what the wire saw: the end of every
        // segment A sent, B's highest ACK.
        let dark = Rc::new(Cell::new(false));
        let d = dark.clone();
        sim.drop_filter = Some(Box::new(move |from, _| from == Side::A && d.get()));
        let seen = Rc::new(RefCell::new((Vec::<u32>::new(), 0u32)));
        let w = seen.clone();
        sim.emit_tap = Some(Box::new(move |from, bytes| {
            let (seg, payload) = TcpRepr::parse_segment(bytes).unwrap();
            let mut w = w.borrow_mut();
            match from {
                Side::A => w.0.push(seg.seq.wrapping_add(payload.len() as u32)),
                Side::B if (seg.ack.wrapping_sub(w.1) as i32) > 0 || w.1 == 0 => w.1 = seg.ack,
                Side::B => {}
            }
        }));
        let chunk = vec![1u8; 64 << 10];
        // Steps A's bulk transfer (B reads everything) until `done`, or
        // for 20 s.
        let pump = |sim: &mut Sim, done: &mut dyn FnMut(&mut Sim) -> bool| {
            let end = sim.now + Duration::from_secs(20);
            while !done(sim) {
                assert!(sim.now < end, "{algo:?}: not reached");
                let _ = sim.a.send(a, &chunk);
                if !sim.step() {
                    sim.now += Duration::from_millis(1);
                }
                read_all(&mut sim.b, b);
            }
        };
        let rtos = |sim: &Sim| sim.a.stats().rto_timeouts;
        // A flight of 64 segments or more.
        pump(&mut sim, &mut |s| {
            let i = s.a.info(a).unwrap();
            i.unacked >= 64 * usize::from(i.mss)
        });
        let mss = usize::from(sim.a.info(a).unwrap().mss);
        // The first timeout; the path is back for its retransmission.
        dark.set(true);
        let before = rtos(&sim);
        pump(&mut sim, &mut |s| rtos(s) > before);
        dark.set(false);
        let first = sim.a.info(a).unwrap();
        seen.borrow_mut().0.clear();
        // Partial progress: slow start from one segment, with most of the
        // flight before the timeout still to resend.
        pump(&mut sim, &mut |s| s.a.info(a).unwrap().cwnd >= 8 * mss);
        // The second timeout.
        dark.set(true);
        let before = rtos(&sim);
        let mut last = sim.a.info(a).unwrap();
        pump(&mut sim, &mut |s| {
            if rtos(s) > before {
                return true;
            }
            last = s.a.info(a).unwrap();
            false
        });
        dark.set(false);
        let second = sim.a.info(a).unwrap();
        // FlightSize at the second timeout, SND.NXT − SND.UNA: the end of
        // what A sent since the first timeout (all of it resent) less
        // what B acknowledged.
        let flight = {
            let w = seen.borrow();
            let una = w.1;
            w.0.iter()
                .map(|&end| end.wrapping_sub(una) as i32)
                .max()
                .unwrap()
                .max(0) as usize
        };
        let case = format!(
            "{algo:?}: ssthresh {} after the first timeout, {} after the second; \
             {flight} B resent since and unacknowledged, {} unacknowledged",
            first.ssthresh, second.ssthresh, last.unacked
        );
        assert!(flight >= 4 * mss, "{case}");
        // Most of the flight before the first timeout is still to resend:
        // reducing from it would leave ssthresh several times higher.
        assert!(last.unacked >= 3 * flight, "{case}");
        let want = ((flight as f64 * beta) as usize).max(2 * mss);
        assert!(
            second.ssthresh.abs_diff(want) <= mss,
            "{case}: want about {want}"
        );
        assert_eq!(second.cwnd, mss, "{case}");
        // And the transfer goes on.
        pump(&mut sim, &mut |s| s.a.info(a).unwrap().cwnd >= 8 * mss);
    }
}
