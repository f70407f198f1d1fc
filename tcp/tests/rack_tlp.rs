//! RACK-TLP (RFC 8985) in the simulator: chosen segments of a burst are
//! lost or held back on a 10 ms round trip, and the sender's reaction is
//! read off the wire (A's segments, through the emit tap) and its counters.

mod sim;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{Config, ConnHandle, Stats};
use flowlane_wire::TcpRepr;
use sim::{LinkConfig, Side, Sim, A_IP, B_IP};
use std::cell::RefCell;
use std::rc::Rc;

const MSS: usize = 1448;

/// What the taps saw of A's data segments: (time, sequence number
/// relative to the first byte of the burst under test, payload length).
#[derive(Default)]
struct Wire {
    /// Sequence number of the first byte of the burst under test.
    base: Option<u32>,
    sent: Vec<(Instant, u32, usize)>,
    /// Relative sequence numbers to lose once (their first transmission).
    lose: Vec<u32>,
    /// Relative sequence numbers to hold back once (first transmission).
    hold: Vec<u32>,
    held: Vec<Vec<u8>>,
    /// Every data segment of A is lost until then.
    blackout_until: Option<Instant>,
    /// One past the highest byte A sent (absolute).
    max_end: u32,
}

struct Bed {
    sim: Sim,
    a: ConnHandle,
    b: ConnHandle,
    wire: Rc<RefCell<Wire>>,
    clock: Rc<RefCell<Instant>>,
}

fn new_bed(rack: bool) -> Bed {
    // 5 ms each way, 100 Mbit/s: a burst's segments arrive 120 µs apart.
    let link = LinkConfig {
        bandwidth_bps: 100_000_000,
        ..LinkConfig::default()
    };
    let mut ca: Config = sim::test_config(1);
    ca.rack = rack;
    let mut sim = Sim::new(1, link, link, ca, sim::test_config(2));
    let (a, b) = sim.establish();
    sim.a.set_nodelay(a, true).expect("live");
    let wire = Rc::new(RefCell::new(Wire::default()));
    let clock = Rc::new(RefCell::new(sim.now));
    let (w, c) = (wire.clone(), clock.clone());
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        if side != Side::A || payload.is_empty() {
            return false;
        }
        let mut w = w.borrow_mut();
        let end = r.seq.wrapping_add(payload.len() as u32);
        if (end.wrapping_sub(w.max_end) as i32) > 0 || w.max_end == 0 {
            w.max_end = end;
        }
        let Some(base) = w.base else {
            return false;
        };
        let rel = r.seq.wrapping_sub(base);
        let now = *c.borrow();
        w.sent.push((now, rel, payload.len()));
        if w.blackout_until.is_some_and(|t| now < t) {
            return true;
        }
        if let Some(i) = w.lose.iter().position(|&s| s == rel) {
            w.lose.remove(i);
            return true;
        }
        if let Some(i) = w.hold.iter().position(|&s| s == rel) {
            w.hold.remove(i);
            w.held.push(bytes.to_vec());
            return true;
        }
        false
    }));
    let mut bed = Bed {
        sim,
        a,
        b,
        wire,
        clock,
    };
    // Warm up: RTT samples (SRTT, min_RTT) and a congestion window of
    // more than a burst.
    bed.transfer(200_000);
    bed
}

impl Bed {
    fn step_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Bed) -> bool) {
        let end = self.sim.now + limit;
        while !done(self) && self.sim.now <= end {
            *self.clock.borrow_mut() = self.sim.now;
            let mut buf = vec![0u8; 1 << 16];
            while self.sim.b.recv(self.b, &mut buf).is_ok_and(|n| n > 0) {}
            while self.sim.a.poll_event().is_some() {}
            while self.sim.b.poll_event().is_some() {}
            if !self.sim.step() {
                break;
            }
            *self.clock.borrow_mut() = self.sim.now;
        }
    }

    /// Sends `n` bytes and runs until they are acknowledged.
    fn transfer(&mut self, n: usize) {
        let data = vec![0x5a; n];
        let mut sent = 0;
        let before = self.sim.b.stats().bytes_in;
        self.step_until(Duration::from_secs(10), |bed| {
            if sent < n {
                sent += bed.sim.a.send(bed.a, &data[sent..]).unwrap_or(0);
            }
            sent == n && bed.sim.b.stats().bytes_in - before == n as u64 && bed.idle()
        });
        assert_eq!(self.sim.b.stats().bytes_in - before, n as u64, "delivered");
    }

    /// Everything A sent is acknowledged (its send space is all back).
    fn idle(&self) -> bool {
        self.sim.a.send_space(self.a).ok() == self.sim.a.send_capacity(self.a).ok()
    }

    /// Starts a burst of `segments` full segments, losing and holding
    /// back the ones given (indices), and returns when it was sent.
    fn burst(&mut self, segments: usize, lose: &[usize], hold: &[usize]) -> Instant {
        let base = self.wire.borrow().max_end;
        {
            let mut w = self.wire.borrow_mut();
            w.base = Some(base);
            w.sent.clear();
            w.lose = lose.iter().map(|&i| (i * MSS) as u32).collect();
            w.hold = hold.iter().map(|&i| (i * MSS) as u32).collect();
        }
        *self.clock.borrow_mut() = self.sim.now;
        let n = segments * MSS;
        assert_eq!(self.sim.a.send(self.a, &vec![0xa5; n]), Ok(n));
        self.sim.flush();
        self.sim.now
    }

    /// Releases the held-back segments into the link towards B now.
    fn release(&mut self) {
        let held = std::mem::take(&mut self.wire.borrow_mut().held);
        for seg in held {
            self.sim.inject(Side::B, A_IP, B_IP, &seg);
        }
    }

    fn stats(&self) -> Stats {
        *self.sim.a.stats()
    }

    /// Transmissions of the segment at relative `rel` after the first.
    fn resent(&self, rel: usize) -> Vec<Instant> {
        let w = self.wire.borrow();
        let all: Vec<Instant> = w
            .sent
            .iter()
            .filter(|&&(_, s, _)| s == (rel * MSS) as u32)
            .map(|&(t, _, _)| t)
            .collect();
        all.into_iter().skip(1).collect()
    }
}

/// A segment two from the end of a burst arrives 2 ms after its
/// successors (within min_RTT / 4 = 2.5 ms): RACK waits for the
/// reordering window (the two SACKed segments are fewer than DupThresh)
/// and the late original's ACK cancels the wait: no retransmission.
#[test]
fn reordering_within_the_window_is_not_a_loss() {
    let mut bed = new_bed(true);
    let before = bed.stats();
    bed.burst(8, &[], &[5]);
    // The burst reaches B at +5 ms; the held segment follows at +7 ms.
    bed.sim.run_for(Duration::from_millis(7));
    bed.release();
    bed.step_until(Duration::from_secs(2), |b| b.idle());
    let s = bed.stats();
    assert_eq!(s.retransmits, before.retransmits, "{s:?}");
    assert_eq!(s.rack_lost, before.rack_lost);
    assert!(bed.resent(5).is_empty());
}

/// A segment in the middle of a short burst is lost with only one segment
/// after it (one duplicate ACK, never three): RACK retransmits it once the
/// later segment's SACK arrives and the reordering window (min_RTT / 4)
/// has passed, about 1.25 RTT after it was sent, without a probe or an
/// RTO. Without RACK the same loss waits for the loss probe.
#[test]
fn a_lost_segment_is_retransmitted_after_rtt_plus_reo_wnd() {
    let mut bed = new_bed(true);
    let before = bed.stats();
    let t0 = bed.burst(4, &[2], &[]);
    bed.step_until(Duration::from_secs(2), |b| b.idle());
    let s = bed.stats();
    let resent = bed.resent(2);
    assert_eq!(resent.len(), 1, "{s:?}");
    let after = resent[0] - t0;
    // RTT 10 ms + reo_wnd 2.5 ms (a little more: SRTT from delayed ACKs).
    assert!(
        after >= Duration::from_millis(12) && after <= Duration::from_millis(16),
        "retransmitted {after:?} after the burst"
    );
    assert_eq!(s.rack_lost, before.rack_lost + 1);
    assert_eq!(s.rack_reo_timeouts, before.rack_reo_timeouts + 1);
    assert_eq!(s.dup_acks - before.dup_acks, 1);
    assert_eq!(s.rto_timeouts, before.rto_timeouts);
    assert_eq!(s.tlp_probes, before.tlp_probes);
    assert_eq!(s.retransmits, before.retransmits + 1);

    // Without RACK: the loss probe at twice the SRTT, later.
    let mut old = new_bed(false);
    let t0 = old.burst(4, &[2], &[]);
    old.step_until(Duration::from_secs(2), |b| b.idle());
    let resent = old.resent(2);
    assert!(resent[0] - t0 > after, "{:?}", resent[0] - t0);
}

/// The last segment of a burst is lost: no ACK can reveal it. The tail
/// loss probe goes out about two SRTTs after the last ACK and resends the
/// last segment (not SND.UNA, which is the segment before it while that
/// one's ACK is delayed); the probe's ACK repairs the loss without an
/// RTO, and the next ACK beyond it counts the loss repaired by the probe.
#[test]
fn a_tail_loss_is_repaired_by_a_probe_of_the_last_segment() {
    let mut bed = new_bed(true);
    let before = bed.stats();
    let t0 = bed.burst(6, &[5], &[]);
    bed.step_until(Duration::from_secs(2), |b| b.idle());
    let s = bed.stats();
    assert_eq!(s.tlp_probes, before.tlp_probes + 1, "{s:?}");
    assert_eq!(s.rto_timeouts, before.rto_timeouts);
    assert_eq!(s.retransmits, before.retransmits + 1);
    let probe = bed.resent(5);
    assert_eq!(probe.len(), 1, "the probe is the last segment");
    assert!(bed.resent(4).is_empty(), "not SND.UNA's segment");
    // ACK of segments 0-3 at +10 ms, PTO 2 * SRTT after it.
    let at = probe[0] - t0;
    assert!(at < Duration::from_millis(50), "probe after {at:?}");
    bed.transfer(10 * MSS);
    assert_eq!(bed.stats().tlp_recoveries, before.tlp_recoveries + 1);
}

/// Probes of a tail loss of several segments: the probe (the last
/// segment) is SACKed, and RACK then finds the others lost at once.
#[test]
fn a_probe_reveals_a_longer_tail_loss_to_rack() {
    let mut bed = new_bed(true);
    let before = bed.stats();
    bed.burst(8, &[5, 6, 7], &[]);
    bed.step_until(Duration::from_secs(2), |b| b.idle());
    let s = bed.stats();
    assert_eq!(s.tlp_probes, before.tlp_probes + 1, "{s:?}");
    assert_eq!(s.rto_timeouts, before.rto_timeouts);
    assert_eq!(s.rack_lost, before.rack_lost + 2);
    assert_eq!(s.fast_retransmits, before.fast_retransmits + 1);
    assert_eq!(bed.resent(7).len(), 1);
}

/// The first segment of each burst arrives 6 ms late (more than min_RTT /
/// 4 = 2.5 ms and 2 * min_RTT / 4): the first bursts see it as lost and
/// retransmit it needlessly, the D-SACKs of those retransmissions grow the
/// reordering window (RFC 8985 §6.2 step 4) until it covers the delay, and
/// later bursts retransmit nothing. Without RACK, every burst does.
#[test]
fn dsacks_grow_the_reordering_window() {
    let run = |rack: bool| -> Vec<u64> {
        let mut bed = new_bed(rack);
        (0..6)
            .map(|_| {
                let before = bed.stats().retransmits;
                bed.burst(4, &[], &[0]);
                bed.sim.run_for(Duration::from_millis(11));
                bed.release();
                bed.step_until(Duration::from_secs(2), |b| b.idle());
                bed.sim.run_for(Duration::from_millis(20));
                bed.stats().retransmits - before
            })
            .collect()
    };
    let with = run(true);
    let without = run(false);
    assert!(with[0] >= 1, "{with:?}");
    assert_eq!(&with[3..], &[0, 0, 0], "{with:?}");
    assert!(without[3..].iter().sum::<u64>() >= 1, "{without:?}");
}

/// A connection exported and imported in the middle of a loss keeps its
/// RACK state (the snapshot round trip is exact, send times included), and
/// RACK goes on to detect the loss as if nothing had happened.
#[test]
fn the_snapshot_keeps_rack_state() {
    let mut bed = new_bed(true);
    let before = bed.stats();
    bed.burst(4, &[2], &[]);
    // The burst is out; the SACK for segment 3 has not come back yet.
    bed.sim.run_for(Duration::from_millis(2));
    let snap = bed.sim.a.export(bed.a).expect("live");
    let again = bed.sim.a.import(bed.sim.now, snap.clone()).expect("import");
    let round_trip = bed.sim.a.export(again).expect("live");
    assert_eq!(round_trip, snap);
    bed.a = bed.sim.a.import(bed.sim.now, round_trip).expect("import");
    bed.step_until(Duration::from_secs(2), |b| b.idle());
    let s = bed.stats();
    assert_eq!(s.rack_lost, before.rack_lost + 1, "{s:?}");
    assert_eq!(s.rto_timeouts, before.rto_timeouts);
    assert_eq!(bed.resent(2).len(), 1);
}

/// A whole window, its probe and the first retransmission timeouts are
/// lost (a 1.5 s blackout of A's data). Once the path is back, the
/// timeout's retransmission is acknowledged, and RACK finds the segments
/// sent before the timeout lost: the timeout's own loss episode, already
/// answered by a window of one segment (RFC 5681 §3.1), which grows by
/// slow start. They are not a new fast recovery whose window is half of
/// what was in flight before the timeout (a burst of half the old window
/// one RTT after the strongest congestion signal).
#[test]
fn after_a_timeout_the_window_grows_from_one_segment() {
    for rack in [true, false] {
        let mut bed = new_bed(rack);
        let before = bed.stats();
        let back = bed.sim.now + Duration::from_millis(1500);
        bed.wire.borrow_mut().blackout_until = Some(back);
        bed.burst(40, &[], &[]);
        // The first transmission of SND.UNA's segment once the path is back.
        bed.step_until(Duration::from_secs(10), |b| {
            b.wire
                .borrow()
                .sent
                .iter()
                .any(|&(t, s, _)| s == 0 && t >= back)
        });
        let t_rtx = bed
            .wire
            .borrow()
            .sent
            .iter()
            .find(|&&(t, s, _)| s == 0 && t >= back)
            .map(|&(t, _, _)| t)
            .expect("a retransmission after the blackout");
        assert!(bed.stats().rto_timeouts > before.rto_timeouts);
        // Its ACK, about one RTT later, and a millisecond past it.
        let unacked = bed.sim.a.info(bed.a).expect("live").unacked;
        bed.step_until(Duration::from_millis(100), |b| {
            b.sim.a.info(b.a).expect("live").unacked < unacked
        });
        let t_ack = bed.sim.now;
        assert!(t_ack > t_rtx, "rack {rack}: acknowledged");
        bed.step_until(Duration::from_millis(1), |b| {
            b.sim.now >= t_ack + Duration::from_millis(1)
        });
        let info = bed.sim.a.info(bed.a).expect("live");
        let sent_on_ack = bed
            .wire
            .borrow()
            .sent
            .iter()
            .filter(|&&(t, _, _)| t >= t_ack)
            .count();
        assert!(
            info.cwnd <= 2 * MSS && sent_on_ack <= 2,
            "rack {rack}: cwnd {} ssthresh {}, {sent_on_ack} segments sent on the first ACK",
            info.cwnd,
            info.ssthresh
        );
        bed.step_until(Duration::from_secs(10), |b| b.idle());
        assert!(bed.idle(), "rack {rack}: everything delivered");
    }
}
