//! The sender's loss recovery against a peer played by hand: which
//! segments are SACKed, which ACKs are lost and when each timer fires are
//! chosen, so that the orders of events a simulated link rarely produces
//! (a probe timer due as recovery starts, a hole under one segment after
//! a timeout) can be tried.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use sim::peer::Peer;

/// RFC 6675 §5.1 after a timeout: go-back-N resends what SACK blocks
/// arriving since do not cover, each hole as it is, however short (it
/// was sent before, so Nagle and sender SWS avoidance, RFC 9293 §3.7.4
/// and §3.8.6.2.1, which hold back new data, do not apply). A sent 30
/// segments of 100 bytes (no delay); B's ACKs were lost, A's timer
/// resent the first 1,460 bytes, and B acknowledges them with the rest
/// SACKed but for 40 bytes. Before, the 40-byte hole was held back as a
/// small segment: nothing went out until a second timeout.
#[test]
fn a_hole_under_one_segment_is_resent_at_once_after_a_timeout() {
    let options = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..TcpOptions::default()
    };
    let mut p = Peer::with_options(60_000, options);
    p.a.set_nodelay(p.conn, true).unwrap();
    let base = p.b_rcv;
    for _ in 0..30 {
        p.a.send(p.conn, &[5u8; 100]).unwrap();
        p.poll();
    }
    let first = p.sent.iter().filter(|(_, len)| *len > 0).count();
    assert_eq!(first, 30, "30 segments of 100 bytes");
    // Every ACK lost: A's timer resends from SND.UNA.
    let later = p.now + Duration::from_secs(2);
    let resent = p.run_until(later);
    assert_eq!(p.a.stats().rto_timeouts, 1);
    let (r, len) = *resent.first().expect("a retransmission");
    assert_eq!((r.seq, len), (base, 1_460));
    // B holds everything but [1 460, 1 500).
    p.b_rcv = base.wrapping_add(1_460);
    let mut sack = TcpOptions::default();
    sack.sack_blocks[0] = (base.wrapping_add(1_500), base.wrapping_add(3_000));
    sack.sack_block_count = 1;
    p.deliver(TcpFlags::ACK, 60_000, sack);
    let out = p.poll();
    assert!(
        out.iter()
            .any(|(r, len)| r.seq == base.wrapping_add(1_460) && *len == 40),
        "A sent {:?}",
        out.iter()
            .map(|(r, len)| (r.seq.wrapping_sub(base), *len))
            .collect::<Vec<_>>()
    );
    assert_eq!(p.a.stats().rto_timeouts, 1);
}

/// A with SACK, an RTT sample of 10 ms, and 10 segments out. Returns
/// the first byte's sequence number.
fn sack_flight() -> (Peer, u32) {
    let options = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..TcpOptions::default()
    };
    let mut p = Peer::with_options(60_000, options);
    // An RTT sample first, so that a probe timeout is armed.
    p.a.send(p.conn, &[1u8; 100]).unwrap();
    p.poll();
    p.now += Duration::from_millis(10);
    p.take(&p.sent.clone(), usize::MAX);
    p.ack(60_000);
    let base = p.b_rcv;
    p.a.send(p.conn, &[6u8; 14_600]).unwrap();
    let flight = p.poll();
    assert_eq!(flight.iter().filter(|(_, len)| *len == 1_460).count(), 10);
    (p, base)
}

/// B's duplicate ACK SACKing the last five of [`sack_flight`]'s
/// segments: A enters recovery (RFC 6675: five segments SACKed above
/// SND.UNA). Returns A's data segments right after, as sequence numbers
/// relative to the first byte, with lengths.
fn sack_the_last_five(p: &mut Peer, base: u32) -> Vec<(u32, usize)> {
    let mut sack = TcpOptions::default();
    sack.sack_blocks[0] = (base.wrapping_add(5 * 1_460), base.wrapping_add(10 * 1_460));
    sack.sack_block_count = 1;
    p.deliver(TcpFlags::ACK, 60_000, sack);
    let out = p.poll();
    out.iter()
        .filter(|(_, len)| *len > 0)
        .map(|(r, len)| (r.seq.wrapping_sub(base), *len))
        .collect()
}

/// RFC 8985 §7.3-7.4: a tail loss probe is for a flight without loss
/// recovery under way. The probe timer fired, then before the probe went
/// out an ACK started recovery: the repairs go first, and no probe goes.
/// Before, the probe went anyway, ahead of the repairs: the last segment,
/// which B had SACKed, taking the congestion window's room, and its
/// episode reduced the window a second time.
#[test]
fn a_probe_decided_before_recovery_does_not_go_in_it() {
    let (mut p, base) = sack_flight();
    // PTO = 2 SRTT and a margin (RFC 8985 §7.2): past 20 ms.
    let due = p.now + Duration::from_millis(23);
    while let Some(t) = p.a.poll_timeout().filter(|&t| t <= due) {
        p.now = t;
        p.a.handle_timeout(t);
    }
    let out = sack_the_last_five(&mut p, base);
    assert_eq!(out.first(), Some(&(0, 1_460)), "A sent {out:?}");
    assert!(
        out.iter().all(|&(seq, _)| seq < 5 * 1_460),
        "A resent SACKed data: {out:?}"
    );
    assert_eq!(p.a.stats().tlp_probes, 0);
}

/// Recovery entered 18 ms after the flight went, just before the probe
/// timer armed for it (2 SRTT): the timer counts from the recovery's start
/// (the repairs just sent), not from the flight. Before, it fired 4 ms
/// into the recovery as "two round trips without progress" and resent
/// everything un-SACKed a second time.
#[test]
fn recovery_restarts_the_probe_timer() {
    let (mut p, base) = sack_flight();
    p.now += Duration::from_millis(18);
    let repairs = sack_the_last_five(&mut p, base);
    assert_eq!(repairs.len(), 5, "the five holes resent: {repairs:?}");
    let later = p.now + Duration::from_millis(15);
    let again: Vec<_> = p
        .run_until(later)
        .iter()
        .filter(|(_, len)| *len > 0)
        .map(|(r, len)| (r.seq.wrapping_sub(base), *len))
        .collect();
    assert_eq!(again, [], "resent again within one round trip");
    assert_eq!(p.a.stats().loss_probes, 0);
}

/// RFC 3522 / RFC 4015 (Eifel) undo a fast retransmit's reduction when
/// the ACK that follows echoes a timestamp older than the
/// retransmission's. A retransmission timeout after that fast retransmit
/// starts another episode (go-back-N from SND.UNA, a window of one
/// segment): the fast retransmit's undo state goes with it. Before, it
/// stayed: the peer's first ACK after the timeout, echoing a timestamp from
/// before the fast retransmit (its original segments arrived late), undid
/// the "spurious recovery", set the window from the whole old flight while
/// SND.NXT was rewound, and A resent that flight in one burst.
#[test]
fn a_timeout_ends_the_fast_retransmit_s_undo() {
    let ts = |val: u32, ecr: u32| TcpOptions {
        timestamps: Some((val, ecr)),
        ..TcpOptions::default()
    };
    let options = TcpOptions {
        mss: Some(1460),
        timestamps: Some((1, 0)),
        ..TcpOptions::default()
    };
    let mut p = Peer::with_options(60_000, options);
    let base = p.b_rcv;
    p.a.send(p.conn, &vec![8u8; 20 * 1_448]).unwrap();
    let flight = p.poll();
    let data: Vec<_> = flight.iter().filter(|(_, len)| *len > 0).collect();
    assert!(
        data.len() >= 10,
        "A's first flight: {} segments",
        data.len()
    );
    let first_tsval = data[0].0.options.timestamps.expect("timestamps").0;
    // Three duplicate ACKs: the first segment lost. A resends it.
    p.now += Duration::from_millis(5);
    for _ in 0..3 {
        p.deliver(TcpFlags::ACK, 60_000, ts(2, first_tsval));
    }
    let fast = p.poll();
    assert!(
        fast.iter().any(|(r, len)| r.seq == base && *len > 0),
        "fast retransmit: {fast:?}"
    );
    assert_eq!(p.a.stats().fast_retransmits, 1);
    // Nothing more from B until A's retransmission timer fires.
    let timeout = p.now + Duration::from_secs(3);
    while p.a.stats().rto_timeouts == 0 {
        let t = p.a.poll_timeout().expect("a timer");
        assert!(t <= timeout, "no retransmission timeout");
        p.now = t;
        p.a.handle_timeout(t);
        p.poll();
    }
    // B's ACK for the first four segments (their originals arrived,
    // late), echoing the first one's timestamp.
    p.b_rcv = base.wrapping_add(4 * 1_448);
    p.deliver(TcpFlags::ACK, 60_000, ts(3, first_tsval));
    let sent = p.poll().iter().filter(|(_, len)| *len > 0).count();
    assert_eq!(p.a.stats().spurious_recoveries, 0);
    // The timeout's window of one segment, grown in slow start by the
    // four acknowledged (before: 10, the undo's window).
    assert!(
        sent <= 5,
        "A sent {sent} segments after the timeout's first ACK"
    );
}
