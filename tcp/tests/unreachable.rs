//! ICMP destination unreachable (RFC 1122 §4.2.3.9, RFC 5461, RFC 5927,
//! RFC 6069): a connection attempt whose SYN (or SYN-ACK) it quotes ends
//! at once, saying why; a blind one changes nothing; a synchronized
//! connection keeps it as a soft error, the reason it ends with if it
//! then times out with no ACK in between, and one about its
//! retransmission at SND.UNA undoes a doubling of the RTO (TCP-LD).

mod sim;

use std::cell::RefCell;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::rc::Rc;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{CloseReason, ConnHandle, Delivery, Event, State, Unreachable};
use flowlane_wire::{TcpFlags, TcpRepr};
use sim::{read_all, run_until, test_config, LinkConfig, Side, Sim, A_IP, B_IP};

const LOCAL: u16 = 10_000;
const PORT: u16 = 80;

// ICMPv4 Destination Unreachable codes (RFC 792, RFC 1122 §3.2.2.1, RFC
// 1812 §5.2.7.1), as `Stack::handle_unreachable` takes them.
/// Net unreachable.
const NET: u8 = 0;
/// Host unreachable.
const HOST: u8 = 1;
/// Port unreachable.
const PORT_UNREACHABLE: u8 = 3;
/// Communication administratively prohibited.
const PROHIBITED: u8 = 13;

fn a_addr() -> SocketAddr {
    SocketAddr::new(A_IP, LOCAL)
}
fn b_addr() -> SocketAddr {
    SocketAddr::new(B_IP, PORT)
}

/// Sequence numbers a link filter recorded.
type Seen = Rc<RefCell<Vec<u32>>>;

/// A sim whose link drops `side`'s segments with `flags` while the flag
/// returned holds, recording their sequence numbers.
fn dropping(side: Side, flags: TcpFlags) -> (Sim, Seen, Rc<RefCell<bool>>) {
    dropping_at(side, flags, b_addr())
}

/// [`dropping`], B listening on `listen`.
fn dropping_at(side: Side, flags: TcpFlags, listen: SocketAddr) -> (Sim, Seen, Rc<RefCell<bool>>) {
    let mut sim = Sim::symmetric(3, LinkConfig::default());
    let seqs: Seen = Rc::default();
    let on: Rc<RefCell<bool>> = Rc::new(RefCell::new(true));
    let (s, o) = (seqs.clone(), on.clone());
    sim.drop_filter = Some(Box::new(move |from, bytes| {
        let (r, _) = TcpRepr::parse_segment(bytes).unwrap();
        let drop = *o.borrow() && from == side && r.flags == flags;
        if drop {
            s.borrow_mut().push(r.seq);
        }
        drop
    }));
    sim.b.listen(listen).expect("listen");
    (sim, seqs, on)
}

/// A connect whose SYN a router answers "port unreachable" (a firewall's
/// reject) ends at once, `Unreachable(Refused)`, long before the SYN's
/// retransmissions would run out.
#[test]
fn a_refused_syn_ends_the_connect_at_once() {
    let (mut sim, syns, _) = dropping(Side::A, TcpFlags::SYN);
    let a = sim.a.connect(sim.now, a_addr(), b_addr()).expect("connect");
    sim.run_for(Duration::from_millis(5));
    let iss = syns.borrow()[0];
    let now = sim.now;
    let d = sim
        .a
        .handle_unreachable(now, a_addr(), b_addr(), iss, PORT_UNREACHABLE);
    assert_eq!(d, Delivery::Taken);
    let mut closed = None;
    while let Some(e) = sim.a.poll_event() {
        if let Event::Closed { conn, reason } = e {
            assert_eq!(conn, a);
            closed = Some(reason);
        }
    }
    assert_eq!(closed, Some(CloseReason::Unreachable(Unreachable::Refused)));
    let st = *sim.a.stats();
    assert_eq!((st.unreachable_ended, st.unreachable_ignored), (1, 0));
    assert_eq!(sim.a.connections_in(State::SynSent), 0);
}

/// The bed's IPv6 addresses, A's and B's.
fn v6_addrs() -> (SocketAddr, SocketAddr) {
    let ip = |last| IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, last));
    (SocketAddr::new(ip(1), LOCAL), SocketAddr::new(ip(2), PORT))
}

/// Over IPv6, a connect whose SYN a router answers with code 5 (source
/// address failed policy) or 6 (reject route), RFC 4443 §3.1, or 7 (error
/// in a source routing header, RFC 6554 §6.3) or 8 (headers too long, RFC
/// 8883 §3.1) ends at once, `Unreachable(Prohibited)`, as Linux's connect
/// fails on each (`icmpv6_err_convert`: fatal, EACCES for 5 and 6, EPROTO
/// past 6); codes 7 and 8 were ignored, the connect retrying into a path
/// that refuses it. A code no RFC assigns is still ignored.
#[test]
fn over_ipv6_codes_5_to_8_end_a_connect() {
    let (a6, b6) = v6_addrs();
    for (code, ends) in [(5, true), (6, true), (7, true), (8, true), (9, false)] {
        let (mut sim, syns, _) = dropping_at(Side::A, TcpFlags::SYN, b6);
        let a = sim.a.connect(sim.now, a6, b6).expect("connect");
        sim.run_for(Duration::from_millis(5));
        let iss = syns.borrow()[0];
        let now = sim.now;
        assert_eq!(
            sim.a.handle_unreachable(now, a6, b6, iss, code),
            Delivery::Taken
        );
        let mut closed = None;
        while let Some(e) = sim.a.poll_event() {
            if let Event::Closed { conn, reason } = e {
                assert_eq!(conn, a);
                closed = Some(reason);
            }
        }
        let st = *sim.a.stats();
        if ends {
            assert_eq!(
                closed,
                Some(CloseReason::Unreachable(Unreachable::Prohibited)),
                "code {code}"
            );
            assert_eq!((st.unreachable_ended, st.unreachable_ignored), (1, 0));
        } else {
            assert_eq!(closed, None, "code {code}");
            assert_eq!((st.unreachable_ended, st.unreachable_ignored), (0, 1));
            assert_eq!(sim.a.connections_in(State::SynSent), 1);
        }
    }
}

/// Over IPv6, a synchronized connection keeps codes 7 and 8 about its
/// data as its soft error (Linux's `sk_err_soft`, EPROTO), not aborting
/// on them (RFC 5927 §5.2), and ends with it when its retransmissions run
/// out.
#[test]
fn over_ipv6_codes_7_and_8_are_a_synchronized_connections_soft_error() {
    for code in [7, 8] {
        let mut a_cfg = test_config(1);
        a_cfg.max_retransmits = 3;
        let link = LinkConfig::default();
        let mut sim = Sim::new(5, link, link, a_cfg, test_config(2));
        let (a, _b) = sim.establish_between(v6_addrs().0, v6_addrs().1);
        let (sent, _) = dark(&mut sim);
        assert_eq!(sim.a.send(a, &[7; 3000]), Ok(3000));
        let mut answered = 0;
        let (_, reason, _) = run_to_close(&mut sim, a, &sent, |s, seq| {
            if answered == 0 {
                answer_between(s, v6_addrs(), seq, code);
                answered += 1;
            }
        });
        assert_eq!(
            reason,
            CloseReason::Unreachable(Unreachable::Prohibited),
            "code {code}"
        );
        let st = *sim.a.stats();
        assert_eq!(
            (st.unreachable_remembered, st.unreachable_ended),
            (1, 0),
            "code {code}"
        );
    }
}

/// A message whose quoted sequence number is not the SYN's (a blind
/// guess), or about a connection there is not, is ignored: the attempt
/// goes on, and connects once the path works.
#[test]
fn a_blind_unreachable_leaves_the_attempt_alone() {
    let (mut sim, syns, on) = dropping(Side::A, TcpFlags::SYN);
    let a = sim.a.connect(sim.now, a_addr(), b_addr()).expect("connect");
    sim.run_for(Duration::from_millis(5));
    let iss = syns.borrow()[0];
    let now = sim.now;
    for seq in [iss.wrapping_add(1), iss.wrapping_sub(1), 0x1234_5678] {
        sim.a.handle_unreachable(now, a_addr(), b_addr(), seq, HOST);
    }
    let other = SocketAddr::new(B_IP, PORT + 1);
    sim.a.handle_unreachable(now, a_addr(), other, iss, HOST);
    let st = *sim.a.stats();
    assert_eq!((st.unreachable_ended, st.unreachable_ignored), (0, 4));
    *on.borrow_mut() = false;
    let mut connected = false;
    run_until(&mut sim, Duration::from_secs(5), |s| {
        while let Some(e) = s.a.poll_event() {
            connected |= e == Event::Connected(a);
        }
        connected
    });
}

/// A synchronized connection does not abort on a destination unreachable,
/// hard or soft, even one about data in flight (RFC 5927 §5.2): it keeps
/// it as a soft error, and every byte still arrives.
#[test]
fn an_established_connection_does_not_abort_on_it() {
    let mut sim = Sim::symmetric(4, LinkConfig::default());
    let (a, b) = sim.establish();
    let sent: Seen = Rc::default();
    let s = sent.clone();
    sim.drop_filter = Some(Box::new(move |from, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        if from == Side::A && !payload.is_empty() {
            s.borrow_mut().push(r.seq);
        }
        false
    }));
    assert_eq!(sim.a.send(a, &vec![9; 20_000]), Ok(20_000));
    sim.run_for(Duration::from_micros(10));
    let una = sent.borrow()[0];
    let now = sim.now;
    for code in [PORT_UNREACHABLE, HOST, PROHIBITED] {
        sim.a.handle_unreachable(now, a_addr(), b_addr(), una, code);
    }
    assert_eq!(sim.a.stats().unreachable_remembered, 3);
    let mut got = 0;
    run_until(&mut sim, Duration::from_secs(2), |s| {
        got += read_all(&mut s.b, b).len();
        got == 20_000
    });
    assert_eq!(sim.a.state(a), Ok(State::Established));
}

/// A SYN-ACK answered "host unreachable" takes the half-open connection
/// out of the listener's backlog, silently (the application never saw
/// it); the client's next SYN, once the path works, is served.
#[test]
fn an_unreachable_syn_ack_frees_the_half_open_connection() {
    let (mut sim, syn_acks, on) = dropping(Side::B, TcpFlags::SYN | TcpFlags::ACK);
    let a = sim.a.connect(sim.now, a_addr(), b_addr()).expect("connect");
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.b.connections_in(State::SynReceived), 1);
    let iss = syn_acks.borrow()[0];
    let now = sim.now;
    sim.b.handle_unreachable(now, b_addr(), a_addr(), iss, HOST);
    assert_eq!(sim.b.connections_in(State::SynReceived), 0);
    assert_eq!(sim.b.stats().unreachable_ended, 1);
    assert_eq!(sim.b.poll_event(), None);
    *on.borrow_mut() = false;
    let (mut connected, mut accepted) = (false, false);
    run_until(&mut sim, Duration::from_secs(5), |s| {
        while let Some(e) = s.a.poll_event() {
            connected |= e == Event::Connected(a);
        }
        while let Some(e) = s.b.poll_event() {
            accepted |= matches!(e, Event::Accepted { .. });
        }
        connected && accepted
    });
}

// ---------------------------------------------------------------------
// Soft errors of synchronized connections (RFC 1122 §4.2.3.9, RFC 5461)
// and TCP-LD's revert of the RTO backoff (RFC 6069).
// ---------------------------------------------------------------------

/// A sim whose A gives up after `max_retransmits` timeouts, with an
/// established connection (A's handle, B's handle).
fn established(max_retransmits: u8) -> (Sim, ConnHandle, ConnHandle) {
    established_to(max_retransmits, test_config(2))
}

/// [`established`], B configured as `b_cfg`.
fn established_to(
    max_retransmits: u8,
    b_cfg: flowlane_tcp::Config,
) -> (Sim, ConnHandle, ConnHandle) {
    established_between(max_retransmits, b_cfg, (a_addr(), b_addr()))
}

/// [`established_to`], from A's `local` to B's `remote`.
fn established_between(
    max_retransmits: u8,
    b_cfg: flowlane_tcp::Config,
    (local, remote): (SocketAddr, SocketAddr),
) -> (Sim, ConnHandle, ConnHandle) {
    let mut a_cfg = test_config(1);
    a_cfg.max_retransmits = max_retransmits;
    let link = LinkConfig::default();
    let mut sim = Sim::new(5, link, link, a_cfg, b_cfg);
    let (a, b) = sim.establish_between(local, remote);
    (sim, a, b)
}

/// Records the sequence number of every data segment A sends, in the
/// list returned; while the flag returned holds, the link loses
/// everything A sends (its peer gone behind a router).
fn dark(sim: &mut Sim) -> (Seen, Rc<RefCell<bool>>) {
    let sent: Seen = Rc::default();
    let on: Rc<RefCell<bool>> = Rc::new(RefCell::new(true));
    let (s, o) = (sent.clone(), on.clone());
    sim.drop_filter = Some(Box::new(move |from, bytes| {
        if from != Side::A {
            return false;
        }
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        if !payload.is_empty() {
            s.borrow_mut().push(r.seq);
        }
        *o.borrow()
    }));
    (sent, on)
}

/// Steps `sim` until `done` holds (panics after `limit`), calling
/// `on_sent` with each data segment A sends (`dark`'s list) at the moment
/// it goes, where a router's answer would come back from. Returns when
/// each went.
fn run_answering(
    sim: &mut Sim,
    sent: &Seen,
    limit: Duration,
    mut on_sent: impl FnMut(&mut Sim, u32),
    mut done: impl FnMut(&mut Sim) -> bool,
) -> Vec<Instant> {
    let mut times = Vec::new();
    let mut seen = sent.borrow().len();
    run_until(sim, limit, |s| {
        s.flush();
        let new: Vec<u32> = sent.borrow()[seen..].to_vec();
        seen += new.len();
        for seq in new {
            times.push(s.now);
            on_sent(s, seq);
        }
        done(s)
    });
    times
}

/// Steps until A's connection `a` closes, answering its data segments
/// with `on_sent` ([`run_answering`]): when each went, and why and when
/// the connection closed.
fn run_to_close(
    sim: &mut Sim,
    a: ConnHandle,
    sent: &Seen,
    on_sent: impl FnMut(&mut Sim, u32),
) -> (Vec<Instant>, CloseReason, Instant) {
    let mut closed = None;
    let limit = Duration::from_secs(3600);
    let times = run_answering(sim, sent, limit, on_sent, |s| {
        while let Some(e) = s.a.poll_event() {
            if let Event::Closed { conn, reason } = e {
                assert_eq!(conn, a);
                closed = Some((reason, s.now));
            }
        }
        closed.is_some()
    });
    let (reason, at) = closed.expect("closed");
    (times, reason, at)
}

/// A router's destination unreachable of `code` about A's segment `seq`,
/// now.
fn answer(sim: &mut Sim, seq: u32, code: u8) {
    answer_between(sim, (a_addr(), b_addr()), seq, code);
}

/// [`answer`] about A's connection from `local` to `remote`.
fn answer_between(sim: &mut Sim, (local, remote): (SocketAddr, SocketAddr), seq: u32, code: u8) {
    let now = sim.now;
    let d = sim.a.handle_unreachable(now, local, remote, seq, code);
    assert_eq!(d, Delivery::Taken);
}

/// RFC 1122 §4.2.3.9, RFC 5461 §4.1: a synchronized connection whose data
/// a router answered "unreachable" keeps retransmitting, and when its
/// retransmissions run out it ends with that reason (as Linux's
/// `tcp_write_err` reports the soft error it kept, `EHOSTUNREACH`, in
/// place of `ETIMEDOUT`), not `Timeout`; without the message it times out.
#[test]
fn a_connection_timing_out_after_an_unreachable_ends_with_its_reason() {
    for code in [None, Some(HOST), Some(PORT_UNREACHABLE)] {
        let what = code.map(|c| Unreachable::of_v4(c).unwrap());
        let (mut sim, a, _b) = established(4);
        let (sent, _) = dark(&mut sim);
        assert_eq!(sim.a.send(a, &[7; 3000]), Ok(3000));
        let mut answered = 0;
        let (_, reason, _) = run_to_close(&mut sim, a, &sent, |s, seq| {
            // The first flight's answers (its loss probes' too): no
            // backoff to revert yet.
            if let Some(code) = code.filter(|_| s.a.stats().rto_timeouts == 0) {
                answer(s, seq, code);
                answered += 1;
            }
        });
        let want = what.map_or(CloseReason::Timeout, CloseReason::Unreachable);
        assert_eq!(reason, want, "{what:?}");
        let st = *sim.a.stats();
        assert!(what.is_none() || answered > 0);
        assert_eq!(
            (
                st.unreachable_remembered,
                st.unreachable_ended,
                st.rto_reverts
            ),
            (answered, 0, 0),
            "{what:?}"
        );
        assert_eq!(
            st.rto_timeouts,
            4 + 1,
            "{what:?}: four retransmissions, then the end"
        );
    }
}

/// The peer's ACK of the data the message was about forgets it (Linux
/// clears `sk_err_soft` in `tcp_ack`): a later timeout is `Timeout`.
#[test]
fn an_ack_after_the_unreachable_forgets_it() {
    let (mut sim, a, b) = established(4);
    let (sent, on) = dark(&mut sim);
    assert_eq!(sim.a.send(a, &[7; 1000]), Ok(1000));
    sim.flush();
    let seq = sent.borrow()[0];
    answer(&mut sim, seq, HOST);
    assert_eq!(sim.a.stats().unreachable_remembered, 1);
    // The path comes back: the retransmission is acknowledged.
    *on.borrow_mut() = false;
    let mut got = 0;
    run_until(&mut sim, Duration::from_secs(5), |s| {
        got += read_all(&mut s.b, b).len();
        got == 1000 && s.a.info(a).unwrap().unacked == 0
    });
    *on.borrow_mut() = true;
    assert_eq!(sim.a.send(a, &[8; 1000]), Ok(1000));
    let (_, reason, _) = run_to_close(&mut sim, a, &sent, |_, _| {});
    assert_eq!(reason, CloseReason::Timeout);
}

/// Any ACK from the peer at SND.UNA forgets it too, not only one that
/// acknowledges the data (Linux's `tcp_ack` clears `sk_err_soft` on every
/// ACK not older than SND.UNA): here the peer's own data, which
/// acknowledges nothing of ours (our segments are all lost), shows the
/// peer reachable, and when A's retransmissions run out it ends `Timeout`
/// (before: `Unreachable(Host)`, the router's message kept through the
/// peer's segments).
#[test]
fn the_peers_data_at_snd_una_forgets_it() {
    let (mut sim, a, b) = established(4);
    let (sent, _) = dark(&mut sim);
    assert_eq!(sim.a.send(a, &[7; 1000]), Ok(1000));
    sim.flush();
    let seq = sent.borrow()[0];
    answer(&mut sim, seq, HOST);
    assert_eq!(sim.a.stats().unreachable_remembered, 1);
    let una = sim.a.info(a).unwrap().unacked;
    assert_eq!(sim.b.send(b, &[5; 100]), Ok(100));
    let mut got = 0;
    run_until(&mut sim, Duration::from_secs(1), |s| {
        got += read_all(&mut s.a, a).len();
        got == 100
    });
    assert_eq!(
        sim.a.info(a).unwrap().unacked,
        una,
        "nothing of A's acknowledged"
    );
    let (_, reason, _) = run_to_close(&mut sim, a, &sent, |_, _| {});
    assert_eq!(reason, CloseReason::Timeout);
}

/// A peer that answers a zero-window probe (its window still shut) is
/// heard: the message about that probe is forgotten, and when the peer
/// later vanishes, the probes' timeout is `Timeout`.
#[test]
fn an_answered_window_probe_forgets_it() {
    // B's buffer does not grow, and its window is offered unscaled: shut,
    // the buffer is full, and a probe's byte is refused.
    let mut b_cfg = test_config(2);
    (b_cfg.recv_buffer, b_cfg.recv_buffer_max) = (8192, 8192);
    let (mut sim, a, _b) = established_to(4, b_cfg);
    // B never reads: its window shuts, and A probes it.
    while sim.a.send(a, &[1; 4096]).is_ok_and(|n| n > 0) {
        sim.run_for(Duration::from_millis(50));
    }
    sim.run_for(Duration::from_secs(1));
    let (sent, on) = dark(&mut sim);
    *on.borrow_mut() = false;
    // The next probe is answered "unreachable" as it goes, then by the
    // peer, whose window is still shut.
    let probes = sim.a.stats().window_probes;
    let answered_at: Rc<RefCell<Option<Instant>>> = Rc::default();
    run_answering(
        &mut sim,
        &sent,
        Duration::from_secs(120),
        |s, seq| {
            if answered_at.borrow().is_none() {
                answer(s, seq, HOST);
                *answered_at.borrow_mut() = Some(s.now);
            }
        },
        |s| {
            answered_at
                .borrow()
                .is_some_and(|t| s.now > t + Duration::from_millis(50))
        },
    );
    let st = *sim.a.stats();
    assert_eq!(st.unreachable_remembered, 1);
    assert!(st.window_probes > probes, "a probe went");
    assert_eq!(sim.a.info(a).unwrap().unacked, 1, "its byte was not taken");
    *on.borrow_mut() = true;
    let (_, reason, _) = run_to_close(&mut sim, a, &sent, |_, _| {});
    assert_eq!(reason, CloseReason::Timeout);
}

/// RFC 6069 §4: a network or host unreachable (ICMPv4 code 0 or 1) about
/// the retransmission at SND.UNA, the RTO backed off three times (to 8
/// RTOs), undoes one doubling: the next retransmission comes 4 RTOs after
/// this one; past that already (the message 5 RTOs after it), at once.
/// Not for a port unreachable or a filter's (no disruption), nor one
/// about a segment other than SND.UNA's.
#[test]
fn an_unreachable_about_the_retransmission_undoes_a_doubling() {
    // (the code, its sequence number past SND.UNA, RTOs after the third
    // retransmission it comes, RTOs from that to the next)
    for (code, past_una, after, next) in [
        (HOST, 0, 0, 4),
        (NET, 0, 1, 4),
        (HOST, 0, 5, 5),
        (PORT_UNREACHABLE, 0, 0, 8),
        (PROHIBITED, 0, 0, 8),
        (HOST, 1, 0, 8),
    ] {
        next_retransmission_after((a_addr(), b_addr()), code, past_una, after, next);
    }
}

/// RFC 6069 §3 and §4 name ICMPv4 codes 0 and 1 alone as a connectivity
/// disruption (as Linux's `tcp_v4_err` reverts on them alone): the codes
/// told as the same reasons (`Network`: 6 destination network unknown, 11
/// network unreachable for the type of service; `Host`: 5 source route
/// failed, 7 destination host unknown, 8 source host isolated, 12 host
/// unreachable for the type of service) undo no doubling, and the
/// connection keeps backing off (before: each reverted as 0 and 1 do),
/// though each is kept as the soft error it names.
#[test]
fn only_codes_0_and_1_undo_a_doubling_over_ipv4() {
    for code in [5, 6, 7, 8, 11, 12] {
        next_retransmission_after((a_addr(), b_addr()), code, 0, 0, 8);
    }
}

/// RFC 6069 §3: over IPv6 only "no route to destination" (ICMPv6 code 0)
/// tells of a disruption, as Linux's `tcp_v6_err` takes it; an "address
/// unreachable" (code 3: a last hop's neighbour discovery failed, the
/// host gone from its link) or "beyond the scope of the source address"
/// (code 2) undoes no doubling, and the connection keeps backing off
/// (before: it retransmitted an unbacked-off RTO apart toward the missing
/// host, each time another discovery on its link); nor does code 1,
/// "administratively prohibited" (ICMPv4's host unreachable by number).
#[test]
fn over_ipv6_only_no_route_undoes_a_doubling() {
    let a6 = SocketAddr::new(
        IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1)),
        LOCAL,
    );
    let b6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2)), PORT);
    next_retransmission_after((a6, b6), 0, 0, 0, 4);
    for code in [1, 2, 3] {
        next_retransmission_after((a6, b6), code, 0, 0, 8);
    }
}

/// A's connection from `addrs.0` to `addrs.1`, its path dark, has its RTO
/// backed off three times (to 8 RTOs); a router's destination
/// unreachable of `code` about its segment at SND.UNA + `past_una`,
/// `after` RTOs after the third retransmission, must have the next one
/// come `next` RTOs after that retransmission (8: no doubling undone).
fn next_retransmission_after(
    addrs: (SocketAddr, SocketAddr),
    code: u8,
    past_una: u32,
    after: u64,
    next: u64,
) {
    let case = format!("code {code} at SND.UNA + {past_una}, {after} RTOs later, {addrs:?}");
    let (mut sim, a, _b) = established_between(15, test_config(2), addrs);
    let (sent, _) = dark(&mut sim);
    assert_eq!(sim.a.send(a, &[7; 100]), Ok(100));
    let una = sent.borrow().first().copied();
    // The timeouts' retransmissions (loss probes aside).
    let rtx: Rc<RefCell<Vec<Instant>>> = Rc::default();
    let r = rtx.clone();
    run_answering(
        &mut sim,
        &sent,
        Duration::from_secs(60),
        |s, _| {
            if s.a.stats().rto_timeouts > r.borrow().len() as u64 {
                r.borrow_mut().push(s.now);
            }
        },
        |_| rtx.borrow().len() == 3,
    );
    let rtx = rtx.borrow().clone();
    let una = una.or(sent.borrow().first().copied()).expect("sent");
    let rto = (rtx[1] - rtx[0]).as_nanos() / 2;
    assert_eq!((rtx[2] - rtx[1]).as_nanos(), 4 * rto, "{case}: {rtx:?}");
    sim.run_for(Duration::from_nanos(after * rto));
    let reverts = sim.a.stats().rto_reverts;
    answer_between(&mut sim, addrs, una.wrapping_add(past_una), code);
    let n = sent.borrow().len();
    let times = run_answering(
        &mut sim,
        &sent,
        Duration::from_secs(60),
        |_, _| {},
        |_| sent.borrow().len() > n,
    );
    let gap = (times[0] - rtx[2]).as_nanos();
    assert_eq!(gap, next * rto, "{case}: {gap} ns, the RTO {rto} ns");
    let reverted = u64::from(next < 8);
    assert_eq!(sim.a.stats().rto_reverts, reverts + reverted, "{case}");
    assert_eq!(sim.a.stats().unreachable_remembered, 1, "{case}");
}

/// Bounded as Linux bounds TCP-LD (it measures `tcp_retries2` in time,
/// `retransmits_timed_out`): a router that answers every retransmission
/// "host unreachable" has the connection retransmit at its unbacked-off
/// RTO, many more times, yet end no sooner than its doubled timeouts would
/// have ended it (and with the router's reason); counted, it would end
/// after its limit of retransmissions, a few unbacked-off RTOs in.
#[test]
fn answered_retransmissions_do_not_end_the_connection_sooner() {
    let mut ends = Vec::new();
    for answered in [false, true] {
        let (mut sim, a, _b) = established(6);
        let (sent, _) = dark(&mut sim);
        assert_eq!(sim.a.send(a, &[7; 100]), Ok(100));
        let (times, reason, at) = run_to_close(&mut sim, a, &sent, |s, seq| {
            if answered && s.a.stats().rto_timeouts > 0 {
                answer(s, seq, HOST);
            }
        });
        ends.push((times.len(), reason, at, sim.a.stats().rto_reverts));
    }
    let (plain, ld) = (ends[0], ends[1]);
    assert_eq!((plain.1, plain.3), (CloseReason::Timeout, 0));
    assert_eq!(ld.1, CloseReason::Unreachable(Unreachable::Host));
    assert!(ld.3 > 50, "reverts: {ld:?}");
    assert!(
        ld.0 > 50 && plain.0 < 12,
        "retransmissions: {plain:?} {ld:?}"
    );
    let (p, l) = (plain.2.as_nanos(), ld.2.as_nanos());
    // Within a millisecond's rounding of the start, and an RTO after.
    assert!(l + 1_000_000 >= p, "ended sooner: {ld:?}, {plain:?}");
    assert!(l <= p + 500_000_000, "ended later: {ld:?}, {plain:?}");
}

/// RFC 4821 §7.3's black-hole detection reads retransmission timeouts as
/// silent losses of segments too big for the path. A run TCP-LD paced is
/// no such thing: a router answered every retransmission "host
/// unreachable", and the run's timeouts, an unbacked-off RTO apart, would
/// otherwise take the MSS to its floor (1,448 to 500 bytes in a 2 s
/// outage, where a silent one of that length costs one step, to the base
/// MSS). The path back, the MSS is what it was; silent, the heuristic
/// still acts.
#[test]
fn an_answered_outage_is_no_black_hole() {
    for answered in [false, true] {
        let (mut sim, a, b) = established(15);
        let mss = sim.a.info(a).unwrap().mss;
        let (sent, on) = dark(&mut sim);
        assert_eq!(sim.a.send(a, &[7; 100]), Ok(100));
        let end = sim.now + Duration::from_secs(2);
        run_answering(
            &mut sim,
            &sent,
            Duration::from_secs(5),
            |s, seq| {
                if answered && s.a.stats().rto_timeouts > 0 {
                    answer(s, seq, HOST);
                }
            },
            |s| s.now >= end,
        );
        *on.borrow_mut() = false;
        let mut got = 0;
        run_until(&mut sim, Duration::from_secs(60), |s| {
            got += read_all(&mut s.b, b).len();
            got == 100 && s.a.info(a).unwrap().unacked == 0
        });
        let st = *sim.a.stats();
        let after = sim.a.info(a).unwrap().mss;
        if answered {
            assert!(st.rto_reverts > 3, "{st:?}");
            assert_eq!((st.mtu_black_holes, after), (0, mss), "answered");
        } else {
            assert_eq!(st.rto_reverts, 0);
            assert!(st.mtu_black_holes > 0 && after < mss, "silent: {after}");
        }
    }
}
