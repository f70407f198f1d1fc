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
/// resent the first 1,460 bytes at its first timeout, and B acknowledges
/// them with the rest SACKed but for 40 bytes. Before, the 40-byte hole
/// was held back as a small segment: nothing went out until a second
/// timeout.
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
    // Every ACK lost: A's timers run (a tail loss probe first, RFC 8985
    // §7: the handshake gave an RTT sample) up to its first
    // retransmission timeout, which resends from SND.UNA.
    let mut resent = Vec::new();
    while p.a.stats().rto_timeouts == 0 {
        let t = p.a.poll_timeout().expect("a timer");
        resent = p.run_until(t);
    }
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

/// Runs A's timers 23 ms on from [`sack_flight`]'s flight: past its
/// probe timeout (RFC 8985 §7.2: PTO = 2 SRTT, and a margin).
fn fire_the_probe_timer(p: &mut Peer) {
    let due = p.now + Duration::from_millis(23);
    while let Some(t) = p.a.poll_timeout().filter(|&t| t <= due) {
        p.now = t;
        p.a.handle_timeout(t);
    }
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
    // Control: with no ACK, the probe goes (the timer fired).
    let (mut control, _) = sack_flight();
    fire_the_probe_timer(&mut control);
    control.poll();
    assert_eq!(control.a.stats().tlp_probes, 1, "the probe timer fired");
    let (mut p, base) = sack_flight();
    fire_the_probe_timer(&mut p);
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

/// A retransmission decided by three duplicate ACKs, then, before A
/// polls, an ACK for everything that shuts B's window: nothing is left to
/// retransmit, and the window holds new data back. Before, the decision
/// stood and sent a segment of new data at SND.UNA into the zero window,
/// past the congestion window too.
#[test]
fn a_retransmission_overtaken_by_a_full_ack_sends_nothing() {
    let mut p = Peer::new(60_000);
    p.a.send(p.conn, &vec![9u8; 30 * 1_460]).unwrap();
    let flight = p.poll();
    let sent: usize = flight.iter().map(|(_, len)| len).sum();
    assert!(sent < 30 * 1_460, "some data waits for the window");
    for _ in 0..3 {
        p.ack(60_000);
    }
    p.b_rcv = p.b_rcv.wrapping_add(sent as u32);
    p.ack(0);
    let out = p.poll();
    assert!(
        out.iter().all(|(_, len)| *len == 0),
        "A sent data into a zero window: {:?}",
        out.iter().map(|(r, len)| (r.seq, *len)).collect::<Vec<_>>()
    );
}

/// NewReno (no SACK, RFC 6582): the segment a partial ACK resends is
/// deemed lost again once the segments ahead of it and three more have
/// each brought a duplicate ACK (`arm_lost_retransmit`), counted from the
/// partial ACK. Before, the duplicate ACKs of the episode's first
/// retransmission were added to that threshold (the count was reset only
/// after it was set): the second repair waited for 21 here, not 14.
#[test]
fn a_partial_ack_s_retransmission_is_judged_by_its_own_duplicate_acks() {
    let mut p = Peer::new(60_000);
    let base = p.b_rcv;
    p.a.send(p.conn, &vec![4u8; 40 * 1_460]).unwrap();
    p.poll();
    // Segments 0 and 5 of the first flight lost: B has 1-4 and 6-9, and
    // acknowledges each with a duplicate ACK; the third brings segment 0
    // again.
    for _ in 0..8 {
        p.ack(60_000);
    }
    let fast = p.poll();
    assert!(fast.iter().any(|(r, _)| r.seq == base), "fast retransmit");
    // Segment 0 arrives: a partial ACK, up to segment 5, which A resends.
    p.b_rcv = base.wrapping_add(5 * 1_460);
    p.ack(60_000);
    let hole = p.b_rcv;
    let repair = p.poll();
    assert!(
        repair.iter().any(|(r, _)| r.seq == hole),
        "partial ACK's repair"
    );
    let max_end = p
        .sent
        .iter()
        .filter(|(_, len)| *len > 0)
        .map(|(r, len)| r.seq.wrapping_add(*len as u32).wrapping_sub(base))
        .max()
        .unwrap();
    let ahead = (max_end - 5 * 1_460).div_ceil(1_460);
    // That repair is lost too; B's duplicate ACKs come for what follows.
    let mut dups = 0;
    let again = loop {
        dups += 1;
        p.ack(60_000);
        if p.poll().iter().any(|(r, len)| r.seq == hole && *len > 0) {
            break dups;
        }
        assert!(dups < 60, "the repair was never resent");
    };
    assert!(
        again <= ahead + 3,
        "resent after {again} duplicate ACKs, {ahead} segments ahead of it"
    );
}

/// The same rule with more than 252 segments in flight: the count of
/// duplicate ACKs stops at 255, so the threshold does too, and the count
/// starts again from each repair. Before, the threshold was past what the
/// count can reach, and a lost repair waited for the loss probe or the
/// retransmission timer.
#[test]
fn a_lost_repair_is_resent_with_hundreds_of_segments_in_flight() {
    let options = TcpOptions {
        mss: Some(1460),
        window_scale: Some(6),
        ..TcpOptions::default()
    };
    let mut p = Peer::with_options(65_535, options);
    p.a.set_send_buffer(p.conn, 1 << 22).unwrap();
    let chunk = vec![3u8; 1 << 20];
    // Slow start: B takes and acknowledges each flight whole.
    p.a.send(p.conn, &chunk).unwrap();
    let mut flight = p.poll();
    for _ in 0..10 {
        if flight.len() > 300 {
            break;
        }
        p.now += Duration::from_millis(1);
        p.take(&flight, usize::MAX);
        p.ack(65_535);
        p.a.send(p.conn, &chunk).unwrap();
        flight = p.poll();
    }
    assert!(flight.len() > 300, "{} segments in flight", flight.len());
    let hole = p.b_rcv;
    // The flight's first segment lost: duplicate ACKs, a fast
    // retransmission, and that lost too.
    for _ in 0..3 {
        p.ack(65_535);
    }
    assert!(p.poll().iter().any(|(r, len)| r.seq == hole && *len > 0));
    let mut dups = 3;
    let again = loop {
        dups += 1;
        p.ack(65_535);
        if p.poll().iter().any(|(r, len)| r.seq == hole && *len > 0) {
            break dups;
        }
        assert!(dups < 1_000, "the repair was never resent");
    };
    assert!(again <= 255, "resent after {again} duplicate ACKs");
    // The count starts again from that repair: 600 more duplicate ACKs
    // (the rest of the flight's, or a peer's forgeries) resend it at most
    // once for every 255 (before, the count stayed at its ceiling and each
    // one resent it: a segment for every forged ACK).
    let mut resends = 0;
    for _ in 0..600 {
        p.ack(65_535);
        resends += p
            .poll()
            .iter()
            .filter(|(r, len)| r.seq == hole && *len > 0)
            .count();
    }
    assert!(resends <= 3, "resent {resends} times more");
    assert_eq!((p.a.stats().rto_timeouts, p.a.stats().loss_probes), (0, 0));
}
