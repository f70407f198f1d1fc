//! The sender against a peer played by hand: its segments written one by
//! one, so that windows a simulated stack would never offer (reopened
//! below one segment after a zero window) can be tried.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::CongestionAlgorithm;
use flowlane_wire::tcp::TcpOptions;
use sim::peer::Peer;
use sim::test_config;

/// RFC 9293 §3.8.6.1 (zero-window probing) and §3.8.6.2.1 (the sender's
/// SWS override timeout): data that waits on the send window must always
/// have a timer behind it. When the peer reopens a zero window to less
/// than an MSS and less than half its largest window (a receiver without
/// SWS avoidance, or one under memory pressure), `update_send_window`
/// rewinds SND.NXT and clears the retransmission timer, the SWS rule then
/// holds the bytes back, and the persist timer is not armed because
/// SND.MAX is still past SND.UNA (the probe byte): no timer is left, and
/// the connection stalls for good.
#[test]
fn a_window_reopened_below_one_segment_does_not_stall_the_sender() {
    let mut p = Peer::new(60_000);
    let conn = p.conn;
    let queued = p.a.send(conn, &vec![7u8; 100_000]).unwrap();
    assert!(queued > 20_000, "{queued}");
    // B takes the first flight and closes its window.
    let first = p.poll();
    let took = p.take(&first, usize::MAX);
    assert!(took > 0);
    p.ack(0);
    // A probes the zero window; B drops each probe and answers it with the
    // window still zero.
    let probes: Vec<_> = p
        .probe_shut_window(Duration::from_secs(30))
        .into_iter()
        .map(|(_, r, len)| (r, len))
        .collect();
    assert!(!probes.is_empty(), "A probed the zero window");
    eprintln!(
        "B at {}; probes (seq, len): {:?}",
        p.b_rcv,
        probes.iter().map(|(r, l)| (r.seq, *l)).collect::<Vec<_>>()
    );
    // B's application reads a little: B reopens the window to 500 bytes.
    p.ack(500);
    let mut after = p.poll();
    let end = p.now + Duration::from_secs(600);
    after.extend(p.run_until(end));
    let data: usize = after.iter().map(|(_, len)| *len).sum();
    assert!(
        data > 0,
        "ten minutes after the window reopened to 500 bytes A sent no data \
         (segments: {:?}); next timer: {:?}, state {:?}",
        after
            .iter()
            .map(|(r, l)| (r.seq, *l, r.flags))
            .collect::<Vec<_>>(),
        p.a.poll_timeout(),
        p.a.state(conn)
    );
}

/// Zero-window probing is flow control, not loss (RFC 9293 §3.8.6.1, RFC
/// 1122 §4.2.2.17): a peer that keeps its window shut for half a minute,
/// answering every probe, costs the sender neither its congestion window
/// nor its slow-start threshold, and no retransmission timeout runs; the
/// probes come from the persist timer, backed off, each the first byte
/// outside the window again.
#[test]
fn probing_a_zero_window_leaves_the_congestion_window_alone() {
    probe_a_shut_window_for_half_a_minute(Peer::shut_after_first_flight());
}

/// The same where A timed its SYN (no timestamps: RFC 6298 §3), so that
/// its RTO is the handshake's (the minimum), shorter than the backed-off
/// gaps between probes: the probes, each after more than an RTO without
/// sending, are no idle restart (RFC 5681 §4.1), which would cut the
/// congestion window to the initial window while flow control, not the
/// network, held the data back.
#[test]
fn probing_a_zero_window_is_no_idle_restart() {
    let mut cfg = test_config(1);
    cfg.timestamps = false;
    let p = Peer::shut_after_first_flight_with(cfg);
    assert!(p.a.info(p.conn).unwrap().srtt.is_some(), "the SYN timed");
    probe_a_shut_window_for_half_a_minute(p);
}

/// B keeps its window shut for 30 s, answering each of A's probes, then
/// reopens it: A's congestion window and slow-start threshold are as
/// before, and it sends as much as before.
fn probe_a_shut_window_for_half_a_minute(mut p: Peer) {
    let conn = p.conn;
    let before = p.a.info(conn).unwrap();
    let rto_before = p.a.stats().rto_timeouts;
    let probes: Vec<_> = p
        .probe_shut_window(Duration::from_secs(30))
        .into_iter()
        .map(|(t, r, len)| (t, r.seq, len))
        .collect();
    assert!(probes.len() >= 3, "{probes:?}");
    assert!(
        probes
            .iter()
            .all(|&(_, seq, len)| seq == p.b_rcv && len == 1),
        "each probe is the first byte outside the window: {probes:?}"
    );
    let gaps: Vec<_> = probes.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0]),
        "backed off: {gaps:?}"
    );
    let s = p.a.stats();
    assert_eq!(s.rto_timeouts, rto_before, "no retransmission timeout");
    // The window reopens: A sends as much as before the pause.
    p.ack(60_000);
    let info = p.a.info(conn).unwrap();
    assert_eq!(info.ssthresh, before.ssthresh, "{info:?}");
    assert!(info.cwnd >= before.cwnd, "{before:?} -> {info:?}");
    let after = p.poll();
    let data: usize = after.iter().map(|(_, l)| *l).sum();
    assert!(
        data >= before.cwnd.min(60_000) - 1460,
        "{data} after reopening"
    );
}

/// A peer that closed its window and then went silent (crashed, its route
/// gone): the probes go unanswered, and after `Config::max_retransmits`
/// of them the connection ends (reset, `Timeout`), as one whose
/// retransmissions go unanswered does; the application still holds it.
/// A peer that answers its probes is probed for good (the test above).
#[test]
fn a_peer_silent_behind_a_zero_window_is_given_up() {
    let mut p = Peer::shut_after_first_flight();
    let conn = p.conn;
    // B answers nothing from now on.
    let limit = p.now + Duration::from_secs(3600);
    let mut probes = 0;
    while let Some(t) = p.a.poll_timeout() {
        if t > limit || p.a.state(conn).is_err() {
            break;
        }
        p.now = t;
        p.a.handle_timeout(t);
        probes += p
            .poll()
            .iter()
            .filter(|(r, len)| *len > 0 && !r.flags.rst())
            .count();
    }
    assert!(p.a.state(conn).is_err(), "given up after {probes} probes");
    assert_eq!(probes, 15, "Config::max_retransmits probes");
    let closed = std::iter::from_fn(|| p.a.poll_event())
        .any(|e| matches!(e, flowlane_tcp::Event::Closed { conn: c, reason: flowlane_tcp::CloseReason::Timeout } if c == conn));
    assert!(closed, "told as a timeout");
}

/// A receiver alternating a zero and an open window in pure ACKs that
/// acknowledge nothing: the data in flight when it shut its window is not
/// sent again with each pair (the rewind after a reopened window is for
/// the persist timer's probes only). Before, 2,000 such ACKs drew the
/// initial flight a thousand times over (14.6 MB for 108 kB of ACKs),
/// with no retransmission timeout, no congestion response and the
/// retransmission count cleared each time.
#[test]
fn a_window_shut_and_reopened_in_pure_acks_draws_no_flight_again() {
    let mut p = Peer::new(60_000);
    p.a.send(p.conn, &vec![7u8; 100_000]).unwrap();
    let first: usize = p.poll().iter().filter(|(_, len)| *len > 0).count();
    assert!(first >= 10, "the initial window went out: {first}");
    let mut again = 0;
    for _ in 0..1_000 {
        p.ack(0);
        p.poll();
        p.ack(60_000);
        again += p.poll().iter().filter(|(_, len)| *len > 0).count();
    }
    assert!(
        again <= first,
        "{again} segments sent again for 2,000 ACKs that acknowledged nothing \
         (first flight {first})"
    );
}

/// RFC 5681 §3.2's note on duplicate-ACK spoofing (Savage et al. 1999): a
/// receiver without SACK that repeats its duplicate ACK cannot inflate the
/// window in fast recovery past what was outstanding when recovery began.
/// Before, 2,000 forged duplicates grew it by 2,000 segments with 41
/// outstanding, for both congestion controllers.
#[test]
fn forged_duplicate_acks_inflate_the_window_no_further_than_the_flight() {
    for cc in [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic] {
        let mut cfg = test_config(1);
        cfg.congestion = cc;
        let options = TcpOptions {
            mss: Some(1460),
            ..TcpOptions::default()
        };
        let mut p = Peer::with_config(cfg, 60_000, options);
        p.a.send(p.conn, &vec![7u8; 1 << 20]).unwrap();
        p.poll();
        for _ in 0..3 {
            p.ack(60_000);
        }
        p.poll();
        let entry = p.a.info(p.conn).unwrap();
        assert!(
            entry.ssthresh < usize::MAX / 2,
            "{cc:?}: in recovery {entry:?}"
        );
        for _ in 0..2_000 {
            p.ack(60_000);
            p.poll();
        }
        let info = p.a.info(p.conn).unwrap();
        assert!(
            info.cwnd <= entry.ssthresh + 3 * 1460 + entry.unacked,
            "{cc:?}: the window grew to {} with {} outstanding at recovery (ssthresh {})",
            info.cwnd,
            entry.unacked,
            entry.ssthresh
        );
    }
}

/// RFC 2883 §5 / RFC 8985 §6.2 step 4: a D-SACK reports a retransmission
/// that was not needed, and grows RACK's reordering window. A receiver
/// repeating a D-SACK block for data never retransmitted, on ACKs while
/// nothing is in flight, grew the window by one step per ACK (each ACK a
/// new D-SACK round), slowing the detection of the next real loss to a
/// whole SRTT. Such D-SACKs are counted and ignored (as Linux takes no
/// more D-SACKed segments than it retransmitted): the next flight's loss
/// is found a quarter of min_RTT past the RTT, as without them.
#[test]
fn d_sacks_of_nothing_retransmitted_grow_no_reordering_window() {
    let options = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..TcpOptions::default()
    };
    let rtt = Duration::from_millis(10);
    let mut p = Peer::with_options(60_000, options);
    let conn = p.conn;
    p.a.set_nodelay(conn, true).unwrap();
    // One round trip of 10 ms: min_RTT and SRTT.
    p.a.send(conn, &[1u8; 1460]).unwrap();
    let first = p.poll();
    assert_eq!(first.len(), 1);
    p.now += rtt;
    p.b_rcv = first[0].0.seq.wrapping_add(1460);
    p.ack(60_000);
    let acked = p.b_rcv;
    // Fifty ACKs, nothing in flight, each with a D-SACK block below the
    // cumulative ACK for bytes sent once.
    let forged = TcpOptions {
        sack_blocks: [(acked.wrapping_sub(1460), acked), (0, 0), (0, 0), (0, 0)],
        sack_block_count: 1,
        ..TcpOptions::default()
    };
    let before = p.a.stats().dsack_unexpected;
    for _ in 0..50 {
        p.deliver(flowlane_wire::tcp::TcpFlags::ACK, 60_000, forged);
    }
    assert_eq!(p.a.stats().dsack_unexpected, before + 50);
    // A flight of three segments; the second and third are SACKed one RTT
    // later, the first is lost.
    p.a.send(conn, &[2u8; 3 * 1460]).unwrap();
    let flight = p.poll();
    assert_eq!(flight.len(), 3);
    let sent_at = p.now;
    p.now += rtt;
    let start = flight[1].0.seq;
    let sacked = TcpOptions {
        sack_blocks: [
            (start, start.wrapping_add(2 * 1460)),
            (0, 0),
            (0, 0),
            (0, 0),
        ],
        sack_block_count: 1,
        ..TcpOptions::default()
    };
    p.deliver(flowlane_wire::tcp::TcpFlags::ACK, 60_000, sacked);
    p.poll();
    // RTT + min_RTT / 4 after it was sent (with a few ms to spare), the
    // first segment went again; a grown window would wait a whole SRTT.
    let resent = p.run_until(sent_at + rtt + Duration::from_millis(5));
    assert!(
        resent
            .iter()
            .any(|(r, len)| r.seq == flight[0].0.seq && *len == 1460),
        "the first segment not sent again 15 ms after it was sent: {resent:?}"
    );
}

/// RFC 9293 §3.10.7.4: with a zero receive window, a segment is
/// acceptable only at RCV.NXT. While A probes B's shut window, A's
/// SND.MAX is one past B's RCV.NXT (the probe byte B dropped); the ACK
/// for B's own data goes out at B's window edge, SND.UNA here, not at
/// SND.MAX (Linux's `tcp_acceptable_seq`, as A's resets already do).
/// Before, it went at SND.MAX, and B (Linux's `tcp_sequence`, or A's own
/// `check_sequence`) dropped it: B's data went unacknowledged until its
/// retransmission timer, for as long as B's window stayed shut.
#[test]
fn acks_while_probing_a_shut_window_are_within_it() {
    let mut p = Peer::shut_after_first_flight();
    let probes = p.probe_shut_window(Duration::from_millis(1_500));
    assert!(
        probes
            .iter()
            .any(|(_, r, len)| *len == 1 && r.seq == p.b_rcv),
        "A probed: {probes:?}"
    );
    // B's window stays shut.
    p.b_window = 0;
    p.data(0, flowlane_wire::tcp::TcpFlags::empty(), &[3u8; 500]);
    let mut acks = p.poll();
    let later = p.now + Duration::from_millis(250);
    acks.extend(p.run_until(later));
    let Some((ack, _)) = acks.iter().find(|(r, len)| *len == 0 && r.ack == p.b_nxt) else {
        panic!("A sent {acks:?}");
    };
    assert_eq!(ack.seq, p.b_rcv, "the ACK's sequence number is B's RCV.NXT");
}

/// A window scale's unit (RFC 7323 §2.4): B pulls its right edge back by
/// under one unit (it truncates its window to the unit, as A's receiver
/// does under memory pressure) after A filled the old edge. A's pure ACK
/// for B's data then goes at SND.MAX, not at the new edge: B may have
/// taken everything up to the old edge, and the new one lies below its
/// RCV.NXT (Linux's `tcp_acceptable_seq` allows a unit for this). At the
/// new edge, B would have dropped the ACK.
#[test]
fn an_ack_past_an_edge_pulled_back_under_one_unit_goes_at_snd_max() {
    let options = TcpOptions {
        mss: Some(1460),
        window_scale: Some(7),
        ..TcpOptions::default()
    };
    let mut p = Peer::with_options(60_000, options);
    // B's window: 100 units of 128 bytes; A fills it.
    p.ack(100);
    p.a.set_nodelay(p.conn, true).unwrap();
    p.a.send(p.conn, &[2u8; 12_800]).unwrap();
    let sent: usize = p.poll().iter().map(|(_, len)| len).sum();
    assert_eq!(sent, 12_800, "A filled B's window");
    let old_edge = p.b_rcv.wrapping_add(12_800);
    // B's data, sent when it had all but A's last 1 064 bytes, with 8
    // units: an edge 40 bytes left of the old one.
    p.b_rcv = old_edge.wrapping_sub(1_064);
    p.b_window = 8;
    p.data(0, flowlane_wire::tcp::TcpFlags::empty(), &[5u8; 100]);
    let mut out = p.poll();
    let later = p.now + Duration::from_millis(250);
    out.extend(p.run_until(later));
    let Some((ack, _)) = out.iter().find(|(r, len)| *len == 0 && r.ack == p.b_nxt) else {
        panic!("A sent {out:?}");
    };
    assert_eq!(ack.seq, old_edge, "the ACK's sequence number is SND.MAX");
}
