//! RFC 5961: blind (and observed) RST, SYN and data injection against an
//! established connection, the challenge ACKs that answer them, and their
//! limits (§7). The forged segments reuse the real peer's tuple, and its
//! timestamps where a check needs them, so each reaches the check it is
//! aimed at.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{CloseReason, ConnHandle, Event, Stack, State, Stats};
use flowlane_wire::tcp::TcpFlags;
use flowlane_wire::TcpRepr;
use sim::{events, read_all, test_config, LinkConfig, Side, Sim, A_IP, B_IP};
use std::net::SocketAddr;

/// A connection with some data each way, the tap on.
fn established(seed: u64) -> (Sim, ConnHandle, ConnHandle) {
    let mut sim = Sim::symmetric(seed, LinkConfig::default());
    sim.tap = Some(Vec::new());
    let (a, b) = sim.establish();
    sim.a.send(a, &[1; 3000]).unwrap();
    sim.b.send(b, &[2; 2000]).unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.b, b).len(), 3000);
    assert_eq!(read_all(&mut sim.a, a).len(), 2000);
    events(&mut sim.a);
    events(&mut sim.b);
    (sim, a, b)
}

/// The segments delivered to `side` so far.
fn delivered(sim: &Sim, side: Side) -> Vec<TcpRepr> {
    sim.tapped_to(side)
}

/// The last segment A sent B on port `port`, with the end of its sequence
/// space: B's RCV.NXT after it, and A's view of B's SND.NXT (its ACK).
fn last_from_a(sim: &Sim, port: u16) -> (TcpRepr, u32) {
    let bytes = sim
        .tap
        .as_ref()
        .unwrap()
        .iter()
        .rev()
        .find(|(s, b)| *s == Side::B && TcpRepr::parse_segment(b).unwrap().0.src_port == port)
        .expect("A sent something")
        .1
        .clone();
    let (repr, payload) = TcpRepr::parse_segment(&bytes).unwrap();
    let end = repr
        .seq
        .wrapping_add(payload.len() as u32)
        .wrapping_add(u32::from(repr.flags.syn()) + u32::from(repr.flags.fin()));
    (repr, end)
}

/// Puts a forged segment towards B.
fn inject(sim: &mut Sim, repr: &TcpRepr, payload: &[u8]) {
    let mut bytes = vec![0u8; 60 + payload.len()];
    let n = repr.emit(&mut bytes).unwrap();
    bytes.truncate(n);
    bytes.extend_from_slice(payload);
    sim.inject(Side::B, A_IP, B_IP, &bytes);
}

/// A forgery from A's port `port` at sequence number `seq` with `flags`,
/// A's latest timestamp advanced by one.
fn forge(sim: &Sim, port: u16, seq: u32, flags: TcpFlags) -> TcpRepr {
    let (last, _) = last_from_a(sim, port);
    let mut r = last;
    r.seq = seq;
    r.flags = flags;
    r.options.sack_block_count = 0;
    r.options.timestamps = last.options.timestamps.map(|(v, e)| (v.wrapping_add(1), e));
    r
}

/// What B sent A after the first `since` segments.
fn answers_since(sim: &Sim, since: usize) -> Vec<TcpRepr> {
    delivered(sim, Side::A).into_iter().skip(since).collect()
}

const PORT: u16 = 10_000;

#[test]
fn an_rst_inside_the_window_is_challenged_and_only_an_exact_one_resets() {
    let (mut sim, a, b) = established(50);
    let (last, rcv_nxt) = last_from_a(&sim, PORT);
    let before = delivered(&sim, Side::A).len();
    // RFC 5961 §3.2: in the window, not at RCV.NXT.
    let rst = forge(&sim, PORT, rcv_nxt.wrapping_add(100), TcpFlags::RST);
    inject(&mut sim, &rst, &[]);
    sim.run_for(Duration::from_millis(20));
    assert_eq!(sim.b.state(b), Ok(State::Established), "not reset");
    let answers = answers_since(&sim, before);
    assert_eq!(answers.len(), 1, "one challenge ACK: {answers:?}");
    let ch = &answers[0];
    assert_eq!(ch.flags, TcpFlags::ACK);
    assert_eq!(ch.ack, rcv_nxt, "<ACK=RCV.NXT>");
    assert_eq!(ch.seq, last.ack, "<SEQ=SND.NXT>");
    let s = *sim.b.stats();
    assert_eq!((s.rst_challenged, s.challenge_acks, s.resets_in), (1, 1, 0));
    // The connection goes on.
    sim.a.send(a, b"still here").unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.b, b), b"still here");
    // An RST exactly at RCV.NXT (what the real peer sends) resets it.
    let (_, rcv_nxt) = last_from_a(&sim, PORT);
    let rst = forge(&sim, PORT, rcv_nxt, TcpFlags::RST);
    inject(&mut sim, &rst, &[]);
    sim.run_for(Duration::from_millis(20));
    assert!(events(&mut sim.b).contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Reset
    }));
    assert_eq!(sim.b.stats().resets_in, 1);
}

#[test]
fn an_rst_outside_the_window_is_dropped_silently() {
    let (mut sim, _a, b) = established(51);
    let (_, rcv_nxt) = last_from_a(&sim, PORT);
    let before = delivered(&sim, Side::A).len();
    for seq in [
        rcv_nxt.wrapping_add(1 << 30),
        rcv_nxt.wrapping_sub(1),
        rcv_nxt.wrapping_sub(1 << 20),
    ] {
        let rst = forge(&sim, PORT, seq, TcpFlags::RST);
        inject(&mut sim, &rst, &[]);
    }
    sim.run_for(Duration::from_millis(20));
    assert_eq!(sim.b.state(b), Ok(State::Established));
    assert!(answers_since(&sim, before).is_empty(), "no answer");
    let s = *sim.b.stats();
    assert_eq!((s.rst_out_of_window, s.challenge_acks), (3, 0));
}

#[test]
fn a_syn_on_an_established_connection_is_challenged_whatever_its_sequence() {
    let (mut sim, a, b) = established(52);
    let (_, rcv_nxt) = last_from_a(&sim, PORT);
    let before = delivered(&sim, Side::A).len();
    // In the window.
    let syn = forge(&sim, PORT, rcv_nxt.wrapping_add(5), TcpFlags::SYN);
    inject(&mut sim, &syn, &[]);
    sim.run_for(Duration::from_millis(20));
    assert_eq!(answers_since(&sim, before).len(), 1, "challenged");
    // Far outside it, within the connection's interval: counted, not
    // answered (Linux `tcp_invalid_ratelimit`).
    let syn = forge(&sim, PORT, rcv_nxt.wrapping_add(1 << 31), TcpFlags::SYN);
    inject(&mut sim, &syn, &[]);
    sim.run_for(Duration::from_millis(20));
    assert_eq!(answers_since(&sim, before).len(), 1, "limited");
    // After the interval, challenged again.
    sim.run_for(Duration::from_millis(500));
    let before2 = delivered(&sim, Side::A).len();
    let syn_ack = forge(
        &sim,
        PORT,
        rcv_nxt.wrapping_sub(1 << 31),
        TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
    );
    inject(&mut sim, &syn_ack, &[]);
    sim.run_for(Duration::from_millis(20));
    let answers = answers_since(&sim, before2);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].ack, rcv_nxt);
    let s = *sim.b.stats();
    assert_eq!(s.syn_challenged, 3);
    assert_eq!(s.challenge_acks, 2);
    assert_eq!(s.invalid_acks_limited, 1);
    assert_eq!(sim.b.state(b), Ok(State::Established));
    sim.a.send(a, b"on").unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.b, b), b"on");
}

#[test]
fn data_with_an_acknowledgment_out_of_range_is_dropped() {
    let (mut sim, a, b) = established(53);
    let (last, rcv_nxt) = last_from_a(&sim, PORT);
    let b_snd_nxt = last.ack;
    let before = delivered(&sim, Side::A).len();
    // RFC 5961 §5.2: an ACK older than SND.UNA - MAX.SND.WND (a blind
    // attacker's guess), then one for data never sent.
    for ack in [
        b_snd_nxt.wrapping_sub(1 << 30),
        b_snd_nxt.wrapping_add(1 << 20),
    ] {
        let mut data = forge(&sim, PORT, rcv_nxt, TcpFlags::ACK);
        data.ack = ack;
        inject(&mut sim, &data, b"INJECTED");
        sim.run_for(Duration::from_millis(600));
    }
    assert!(read_all(&mut sim.b, b).is_empty(), "nothing delivered");
    assert_eq!(answers_since(&sim, before).len(), 2, "two challenge ACKs");
    let s = *sim.b.stats();
    assert_eq!((s.ack_unacceptable, s.challenge_acks), (2, 2));
    // The real bytes at that sequence number arrive intact.
    sim.a.send(a, b"genuine!").unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.b, b), b"genuine!");
}

/// `n` connections from A (ports PORT..) to B, configured `cfg_b`, tap on.
fn connections(cfg_b: flowlane_tcp::Config, n: u16) -> Sim {
    let mut sim = Sim::new(
        54,
        LinkConfig::default(),
        LinkConfig::default(),
        test_config(1),
        cfg_b,
    );
    sim.tap = Some(Vec::new());
    sim.b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    for i in 0..n {
        sim.a
            .connect(
                sim.now,
                SocketAddr::new(A_IP, PORT + i),
                SocketAddr::new(B_IP, 80),
            )
            .unwrap();
    }
    sim.run_for(Duration::from_millis(100));
    let accepted = events(&mut sim.b)
        .iter()
        .filter(|e| matches!(e, Event::Accepted { .. }))
        .count();
    assert_eq!(accepted, n as usize);
    sim
}

/// One in-window RST on each of the `n` connections, all in one second of
/// B's clock: the challenge ACKs B sent for them, and those it held back.
fn challenge_all(sim: &mut Sim, n: u16) -> (u64, u64) {
    let before = *sim.b.stats();
    for i in 0..n {
        let (_, rcv_nxt) = last_from_a(sim, PORT + i);
        let rst = forge(sim, PORT + i, rcv_nxt.wrapping_add(1), TcpFlags::RST);
        inject(sim, &rst, &[]);
    }
    sim.run_for(Duration::from_millis(10));
    let s = *sim.b.stats();
    (
        s.challenge_acks - before.challenge_acks,
        s.challenge_acks_limited - before.challenge_acks_limited,
    )
}

#[test]
fn challenge_acks_are_held_to_a_randomized_budget_per_second() {
    let mut cfg_b = test_config(2);
    cfg_b.challenge_ack_limit = 20;
    const N: u16 = 60;
    let mut sim = connections(cfg_b, N);
    let mut budgets = Vec::new();
    for round in 0..3 {
        let (sent, limited) = challenge_all(&mut sim, N);
        assert_eq!(sent + limited, u64::from(N), "round {round}");
        assert!((10..30).contains(&sent), "round {round}: {sent} sent");
        budgets.push(sent);
        sim.run_for(Duration::from_millis(1100));
    }
    eprintln!("challenge ACKs per second, limit 20: {budgets:?}");
    assert_eq!(sim.b.connection_count(), usize::from(N), "none reset");
}

/// By default there is no stack-wide budget (as in Linux since 6.0): it is
/// a resource every connection shares and anyone may spend (a challenge a
/// connection every 500 ms across a few thousand connections would leave
/// none for a peer that restarted and needs its challenge to recover,
/// RFC 5961 §4). Each connection's own interval bounds what it sends.
#[test]
fn by_default_challenges_on_many_connections_are_not_held_back() {
    const N: u16 = 2000;
    let mut sim = connections(test_config(2), N);
    let (sent, limited) = challenge_all(&mut sim, N);
    assert_eq!((sent, limited), (u64::from(N), 0));
    // The connections' own interval still holds: a second round at once
    // is not answered.
    let (sent, _) = challenge_all(&mut sim, N);
    assert_eq!(sent, 0);
}

/// A's stack restarted with `cfg` and connecting again from the same port
/// to B, which still holds the old connection: whether B's stale
/// connection was reset and the new one opened within 10 s, and B's
/// counters.
fn reconnect_after_restart(seed: u64, cfg: flowlane_tcp::Config) -> (bool, bool, Stats) {
    let (mut sim, _a, b) = established(seed);
    sim.a = Stack::new(cfg);
    sim.run_for(Duration::from_secs(2));
    let fresh = sim
        .a
        .connect(
            sim.now,
            SocketAddr::new(A_IP, PORT),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    let mut connected = false;
    let mut reset = false;
    let mut accepted = false;
    let limit = sim.now + Duration::from_secs(10);
    while sim.now < limit && !(connected && accepted) {
        sim.run_for(Duration::from_millis(10));
        connected |= events(&mut sim.a).contains(&Event::Connected(fresh));
        for e in events(&mut sim.b) {
            reset |= e
                == Event::Closed {
                    conn: b,
                    reason: CloseReason::Reset,
                };
            accepted |= matches!(e, Event::Accepted { .. });
        }
    }
    (reset, connected && accepted, *sim.b.stats())
}

#[test]
fn a_peer_that_lost_its_connection_resets_it_through_the_challenge() {
    // RFC 5961 §4: the peer restarted and connects from the same port. Its
    // SYN gets a challenge ACK, which acknowledges nothing it sent; it
    // answers with an RST at that ACK's number, exactly RCV.NXT, which
    // ends the stale connection; its next SYN opens a new one.
    let (reset, open, s) = reconnect_after_restart(55, test_config(7));
    assert!(reset, "the stale connection was reset");
    assert!(open, "the new one is open");
    assert_eq!((s.syn_challenged, s.challenge_acks, s.resets_in), (1, 1, 1));
}

/// The same when the new SYN carries no timestamp option, though the
/// stale connection negotiated them (another host behind the same NAT
/// port, or timestamps switched off since): RFC 7323 §3.2 drops a segment
/// without one silently, but a SYN is still challenged (RFC 5961 §4, as
/// Linux does). Before, its SYNs were dropped unanswered: no reset, no new
/// connection, for as long as the stale one lived (the conformance run's
/// `syn_in_established`).
#[test]
fn a_peer_back_without_timestamps_resets_it_through_the_challenge() {
    let mut cfg = test_config(7);
    cfg.timestamps = false;
    let (reset, open, s) = reconnect_after_restart(56, cfg);
    assert!(reset, "the stale connection was reset");
    assert!(open, "the new one is open");
    assert_eq!((s.syn_challenged, s.challenge_acks, s.resets_in), (1, 1, 1));
}

/// A forged FIN ahead of the data (in the window, with an acceptable ACK
/// and timestamp: every check a blind attacker can be held to) neither
/// ends the stream when the data reaches it nor hides the peer's real FIN
/// when that one arrives out of order.
#[test]
fn a_forged_fin_ahead_of_the_data_does_not_hide_the_real_one() {
    let (mut sim, _a, b) = established(55);
    let (_, rcv_nxt) = last_from_a(&sim, PORT);
    let send = |sim: &mut Sim, offset: u32, flags: TcpFlags, data: &[u8]| {
        let seg = forge(sim, PORT, rcv_nxt.wrapping_add(offset), flags);
        inject(sim, &seg, data);
        sim.run_for(Duration::from_millis(10));
    };
    let fin_ack = TcpFlags::FIN | TcpFlags::ACK;
    send(&mut sim, 500, fin_ack, &[]);
    // The peer's real stream: 1 000 bytes (past the forged FIN), then its
    // last 500 with the FIN, ahead of the 1 000 between.
    send(&mut sim, 0, TcpFlags::ACK, &[7; 1000]);
    assert_eq!(
        sim.b.state(b),
        Ok(State::Established),
        "the forged FIN ended nothing"
    );
    send(&mut sim, 2000, fin_ack, &[9; 500]);
    send(&mut sim, 1000, TcpFlags::ACK, &[8; 1000]);
    assert_eq!(
        sim.b.state(b),
        Ok(State::CloseWait),
        "the real FIN, once in order"
    );
    let got = read_all(&mut sim.b, b);
    let want: Vec<u8> = [[7; 1000].as_slice(), &[8; 1000], &[9; 500]].concat();
    assert_eq!(got, want);
    assert_eq!(sim.b.stats().fin_overrun, 1);
}

/// A forgery towards B at B's RCV.NXT - `back` with `flags`, its ACK A's
/// plus `ack_off`, a TSval far ahead of A's (0x7000_0000 later), and
/// `payload`: a segment that overlaps RCV.NXT passes the window check
/// (trimmed to RCV.NXT) and is then dropped by a later one.
fn forge_tsval_ahead(sim: &mut Sim, back: u32, flags: TcpFlags, ack_off: u32, payload: &[u8]) {
    let (last, rcv_nxt) = last_from_a(sim, PORT);
    let (tsval, tsecr) = last.options.timestamps.expect("timestamps negotiated");
    let mut r = forge(sim, PORT, rcv_nxt.wrapping_sub(back), flags);
    r.ack = last.ack.wrapping_add(ack_off);
    r.options.timestamps = Some((tsval.wrapping_add(0x7000_0000), tsecr));
    inject(sim, &r, payload);
}

/// After a forgery B dropped, A's next bytes still reach B's application.
fn genuine_data_still_flows(mut sim: Sim, a: ConnHandle, b: ConnHandle, what: &str) {
    sim.run_for(Duration::from_millis(20));
    sim.a.send(a, b"after the forgery").unwrap();
    sim.run_for(Duration::from_secs(5));
    let s = *sim.b.stats();
    assert_eq!(
        read_all(&mut sim.b, b),
        b"after the forgery",
        "{what}: genuine data refused after a dropped forgery (B: paws_rejected {}, \
         ack_unacceptable {}, state {:?})",
        s.paws_rejected,
        s.ack_unacceptable,
        sim.b.state(b)
    );
}

/// RFC 7323 §4.3 with RFC 9293 §3.10.7.4's fifth check ("if the ACK bit is
/// off drop the segment"): a segment without ACK that overlaps RCV.NXT,
/// carrying a TSval far ahead, must not become TS.Recent. If it did,
/// PAWS (§5.3 R1) would drop every genuine segment after it, and the
/// connection would be dead to a blind attacker who guessed the sequence
/// number to within a payload and no ACK at all.
#[test]
fn a_segment_without_ack_does_not_move_ts_recent() {
    let (mut sim, a, b) = established(60);
    // 100 bytes from 60 before RCV.NXT: trimmed to RCV.NXT, then dropped.
    forge_tsval_ahead(&mut sim, 60, TcpFlags(0), 0, &[9; 100]);
    genuine_data_still_flows(sim, a, b, "no ACK bit");
}

/// The same with an ACK out of RFC 5961 §5.2's range (dropped with a
/// challenge ACK).
#[test]
fn a_segment_with_an_unacceptable_ack_does_not_move_ts_recent() {
    let (mut sim, a, b) = established(61);
    forge_tsval_ahead(&mut sim, 60, TcpFlags::ACK, 1 << 30, &[9; 100]);
    genuine_data_still_flows(sim, a, b, "ACK far beyond SND.NXT");
}

/// The same with the SYN bit (RFC 5961 §4.2: challenged, dropped).
#[test]
fn a_challenged_syn_does_not_move_ts_recent() {
    let (mut sim, a, b) = established(64);
    forge_tsval_ahead(&mut sim, 60, TcpFlags::SYN, 0, &[9; 100]);
    genuine_data_still_flows(sim, a, b, "SYN");
}

/// Once the peer's FIN is in (CLOSE-WAIT here), an RST at RCV.NXT - 1,
/// the FIN's own sequence number (a peer that resets from it; Linux
/// `tcp_reset_check` takes it), ends the connection, although the window
/// check alone would drop a zero-length segment below RCV.NXT.
#[test]
fn close_wait_takes_an_rst_at_the_peers_fin() {
    let (mut sim, a, b) = established(63);
    sim.a.shutdown_write(a).unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.b.state(b), Ok(State::CloseWait));
    let (last, rcv_nxt) = last_from_a(&sim, PORT);
    assert!(last.flags.fin(), "{last:?}");
    let mut rst = forge(&sim, PORT, rcv_nxt.wrapping_sub(1), TcpFlags::RST);
    rst.options.timestamps = None;
    inject(&mut sim, &rst, &[]);
    sim.run_for(Duration::from_millis(20));
    let s = *sim.b.stats();
    assert!(
        sim.b.state(b).is_err(),
        "still {:?}: resets_in {}, rst_out_of_window {}, rst_challenged {}",
        sim.b.state(b),
        s.resets_in,
        s.rst_out_of_window,
        s.rst_challenged
    );
    assert_eq!(s.resets_in, 1);
}

/// Moves every segment `from` has to send into `to`, at `now`; how many.
fn pump(from: &mut Stack, to: &mut Stack, now: flowlane_tcp::time::Instant) -> usize {
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        to.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        n += 1;
    }
    n
}

/// An application that aborts and at once opens the same tuple again (its
/// RST lost, so the peer still holds the old connection), all within one
/// tick of the ISN clock (a caller's coarse clock): the new SYN must not
/// carry the old ISS. With it, the old connection's challenge ACK (RFC
/// 5961 §4.2) acknowledges exactly the new ISS + 1, which SYN-SENT takes
/// as acceptable and drops (RFC 9293 §3.10.7.3), and neither side moves
/// until one times out. With another ISS, the challenge ACK draws an RST
/// that ends the old connection, and the next SYN opens the new one.
#[test]
fn a_tuple_opened_again_in_the_same_tick_after_a_lost_rst_connects() {
    let now = flowlane_tcp::time::Instant::from_millis(1);
    let (mut a, mut b) = (Stack::new(test_config(1)), Stack::new(test_config(2)));
    b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let (local, remote) = (SocketAddr::new(A_IP, 10_000), SocketAddr::new(B_IP, 80));
    let old = a.connect(now, local, remote).unwrap();
    while pump(&mut a, &mut b, now) + pump(&mut b, &mut a, now) > 0 {}
    assert_eq!(a.state(old), Ok(State::Established));
    events(&mut b);
    a.abort(old).unwrap();
    let mut lost = [0u8; 2048];
    while a.poll_transmit(now, &mut lost).is_some() {}
    let new = a.connect(now, local, remote).unwrap();
    // The SYN, the challenge ACK, A's RST for it; then A's SYN again.
    for _ in 0..4 {
        while pump(&mut a, &mut b, now) + pump(&mut b, &mut a, now) > 0 {}
        if let Some(t) = a.poll_timeout() {
            a.handle_timeout(t);
        }
    }
    assert_eq!(
        a.state(new),
        Ok(State::Established),
        "B: {:?}",
        events(&mut b)
    );
}

/// A pure ACK at the right edge of A's window (SEG.SEQ = RCV.NXT +
/// RCV.WND) is taken, as Linux's `tcp_sequence` takes it: a peer that
/// filled A's window sends its ACKs at its SND.NXT, that edge, while the
/// data is on its way. RFC 9293's table bounds the sequence number
/// strictly below the edge; A dropped those ACKs, and with them the
/// acknowledgment of its own data. One past the edge is still dropped.
#[test]
fn a_pure_ack_at_the_right_edge_of_the_window_is_taken() {
    let mut p = sim::peer::Peer::new(60_000);
    p.a.send(p.conn, &[1u8; 1_000]).unwrap();
    p.poll();
    let window = u32::from(p.a_window());
    assert!(window > 0);
    p.b_rcv = p.b_rcv.wrapping_add(1_000);
    let before = p.a.stats().unacceptable;
    let ack = |p: &mut sim::peer::Peer, ahead| {
        p.segment(ahead, TcpFlags::ACK, 60_000, Default::default(), &[]);
    };
    ack(&mut p, window + 1);
    assert_eq!(p.a.stats().unacceptable, before + 1, "past the edge");
    assert_eq!(p.a.info(p.conn).unwrap().unacked, 1_000);
    ack(&mut p, window);
    assert_eq!(p.a.stats().unacceptable, before + 1, "at the edge");
    assert_eq!(
        p.a.info(p.conn).unwrap().unacked,
        0,
        "A's data acknowledged"
    );
}
