//! TIME-WAIT: the compact record a closed connection leaves for 2 MSL (RFC
//! 9293 §3.10.7.4), the whole connection one that is still open keeps, and
//! RFC 6191 reuse of either by a newer SYN.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{CloseReason, ConnHandle, Error, Event, State};
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use sim::{events, read_all, run_until, test_config, LinkConfig, Side, Sim, A_IP, B_IP};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

fn a_addr(port: u16) -> SocketAddr {
    SocketAddr::new(A_IP, port)
}
fn b_addr(port: u16) -> SocketAddr {
    SocketAddr::new(B_IP, port)
}

/// How B ends its side before TIME-WAIT.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    /// `close()`: TIME-WAIT is a compact record, the handle is gone.
    Closed,
    /// `shutdown_write()` only: the connection stays whole (and readable).
    ShutDown,
}

/// B closes first and so holds the connection in TIME-WAIT (2 MSL = 60 s
/// here); returns the simulation (tap on) and B's handle.
fn server_in_time_wait(seed: u64, ending: Ending) -> (Sim, ConnHandle) {
    let mut sim = Sim::symmetric(seed, LinkConfig::default());
    sim.tap = Some(Vec::new());
    let (a, b) = sim.establish();
    b_closes_first(&mut sim, a, b, ending);
    assert_eq!(sim.a.connection_count(), 0, "A's side is gone");
    assert_eq!(sim.b.connection_count(), 1, "B is in TIME-WAIT");
    match ending {
        Ending::Closed => {
            assert_eq!(sim.b.time_wait_count(), 1);
            assert_eq!(sim.b.state(b), Err(Error::InvalidHandle));
        }
        Ending::ShutDown => {
            assert_eq!(sim.b.time_wait_count(), 0);
            assert_eq!(sim.b.state(b), Ok(State::TimeWait));
        }
    }
    events(&mut sim.a);
    events(&mut sim.b);
    (sim, b)
}

/// B ends its side first (`ending`), then A closes: B holds TIME-WAIT.
/// Every event is taken.
fn b_closes_first(sim: &mut Sim, a: ConnHandle, b: ConnHandle, ending: Ending) {
    match ending {
        Ending::Closed => sim.b.close(b).unwrap(),
        Ending::ShutDown => sim.b.shutdown_write(b).unwrap(),
    }
    sim.run_for(Duration::from_millis(50));
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(50));
    events(&mut sim.a);
    events(&mut sim.b);
}

/// The highest sequence number of B's segments the tap saw (B's last).
fn b_last_seq(sim: &Sim) -> u32 {
    let seen = to(sim, Side::A);
    let first = seen[0].seq;
    seen.iter()
        .map(|r| r.seq)
        .max_by_key(|&seq| seq.wrapping_sub(first))
        .unwrap()
}

/// How far past `old_last` B's SYN-ACK (the first the tap saw since it
/// was reset) starts.
fn syn_ack_past(sim: &Sim, old_last: u32) -> i32 {
    let syn_ack = to(sim, Side::A)
        .into_iter()
        .find(|r| r.flags.syn() && r.flags.ack())
        .expect("B's SYN-ACK");
    syn_ack.seq.wrapping_sub(old_last) as i32
}

/// The segments the tap saw going to `side`.
fn to(sim: &Sim, side: Side) -> Vec<TcpRepr> {
    sim.tapped_to(side)
}

/// A's FIN as B received it, for replaying.
fn peer_fin(sim: &Sim) -> Vec<u8> {
    sim.tap
        .as_ref()
        .unwrap()
        .iter()
        .rev()
        .find(|(s, b)| *s == Side::B && TcpRepr::parse_segment(b).unwrap().0.flags.fin())
        .expect("A sent a FIN")
        .1
        .clone()
}

fn emit(repr: &TcpRepr) -> Vec<u8> {
    let mut bytes = vec![0u8; 60];
    let n = repr.emit(&mut bytes).unwrap();
    bytes.truncate(n);
    bytes
}

#[test]
fn syn_with_newer_timestamp_reopens_time_wait() {
    for ending in [Ending::Closed, Ending::ShutDown] {
        // RFC 6191 §2: A's new SYN carries a newer timestamp than B last saw.
        let (mut sim, _) = server_in_time_wait(15, ending);
        sim.run_for(Duration::from_millis(200));
        let a = sim.a.connect(sim.now, a_addr(10_000), b_addr(80)).unwrap();
        let start = sim.now;
        run_until(&mut sim, Duration::from_secs(5), |s| {
            events(&mut s.a).contains(&Event::Connected(a))
        });
        assert!(
            sim.now.saturating_since(start) < Duration::from_millis(100),
            "{ending:?}: connected at once, not after a SYN timeout: {:?}",
            sim.now.saturating_since(start)
        );
        assert_eq!(sim.b.stats().time_wait_reopened, 1, "{ending:?}");
        assert_eq!(sim.b.stats().time_wait_syn_dropped, 0, "{ending:?}");
        assert_eq!(sim.b.time_wait_count(), 0, "{ending:?}");
        sim.a.send(a, b"again").unwrap();
        sim.run_for(Duration::from_millis(50));
        let b = events(&mut sim.b)
            .into_iter()
            .find_map(|e| match e {
                Event::Accepted { conn, .. } => Some(conn),
                _ => None,
            })
            .expect("the new incarnation was accepted");
        assert_eq!(read_all(&mut sim.b, b), b"again", "{ending:?}");
    }
}

/// RFC 9293 §3.6.1 (MAY-2; RFC 1122 §4.2.2.13): a SYN reopens TIME-WAIT
/// only if the new incarnation's ISS lies past every sequence number the
/// old one used (Linux: its SND.NXT + 65537). Without timestamps PAWS
/// cannot tell the old incarnation's delayed segments from the new one's,
/// so an ISS from the clock, a few thousand past the old ISS after 2 MB
/// sent, would put the old data in the new connection's window.
#[test]
fn a_reopened_time_wait_starts_past_the_old_sequence_space() {
    for ending in [Ending::Closed, Ending::ShutDown] {
        let (mut a_cfg, b_cfg) = (test_config(1), test_config(2));
        a_cfg.timestamps = false;
        let link = LinkConfig::default();
        let mut sim = Sim::new(16, link, link, a_cfg, b_cfg);
        sim.tap = Some(Vec::new());
        let (a, b) = sim.establish();
        let data = vec![0xaa; 2_000_000];
        let (mut sent, mut got) = (0, 0);
        run_until(&mut sim, Duration::from_secs(20), |s| {
            sent += s.b.send(b, &data[sent..]).unwrap_or(0);
            got += read_all(&mut s.a, a).len();
            got == data.len()
        });
        let old_last = b_last_seq(&sim);
        b_closes_first(&mut sim, a, b, ending);
        sim.tap = Some(Vec::new());
        let a = sim.a.connect(sim.now, a_addr(10_000), b_addr(80)).unwrap();
        run_until(&mut sim, Duration::from_secs(5), |s| {
            events(&mut s.a).contains(&Event::Connected(a))
        });
        assert_eq!(sim.b.stats().time_wait_reopened, 1, "{ending:?}");
        let past = syn_ack_past(&sim, old_last);
        assert!(
            past > 65_535,
            "{ending:?}: the new ISS is {past} from the old space's end"
        );
    }
}

/// A SYN that would reopen TIME-WAIT while the listener cannot take it
/// (the stack at its connection cap) leaves TIME-WAIT as it is (the SYN is
/// challenged, as where nothing listens): dropped after the old
/// incarnation was forgotten, the client's next SYN would open a
/// connection whose ISS nothing keeps out of the old sequence space. Once
/// there is room, the client's next SYN reopens it past that space.
#[test]
fn a_syn_the_listener_cannot_take_keeps_time_wait() {
    for ending in [Ending::Closed, Ending::ShutDown] {
        let (a_cfg, mut b_cfg) = (test_config(1), test_config(2));
        // The TIME-WAIT connection itself counts while it is whole.
        b_cfg.max_connections = if ending == Ending::Closed { 1 } else { 2 };
        let link = LinkConfig::default();
        let mut sim = Sim::new(17, link, link, a_cfg, b_cfg);
        sim.tap = Some(Vec::new());
        let (a, b) = sim.establish();
        b_closes_first(&mut sim, a, b, ending);
        let old_last = b_last_seq(&sim);
        // Another client takes the stack's last slot.
        let other = sim.a.connect(sim.now, a_addr(10_001), b_addr(80)).unwrap();
        run_until(&mut sim, Duration::from_secs(5), |s| {
            events(&mut s.a).contains(&Event::Connected(other))
        });
        sim.run_for(Duration::from_millis(20));
        let b_other = events(&mut sim.b)
            .into_iter()
            .find_map(|e| match e {
                Event::Accepted { conn, .. } => Some(conn),
                _ => None,
            })
            .expect("the other client was accepted");
        let refused = sim.b.stats().connection_limit_refused;
        sim.tap = Some(Vec::new());
        let a = sim.a.connect(sim.now, a_addr(10_000), b_addr(80)).unwrap();
        sim.run_for(Duration::from_millis(100));
        assert!(
            sim.b.stats().connection_limit_refused > refused,
            "{ending:?}"
        );
        assert_eq!(sim.b.stats().time_wait_reopened, 0, "{ending:?}");
        match ending {
            Ending::Closed => assert_eq!(sim.b.time_wait_count(), 1, "{ending:?}: kept"),
            Ending::ShutDown => assert_eq!(sim.b.connection_count(), 2, "{ending:?}: kept"),
        }
        // Room again: the client's next SYN reopens it, past the old space.
        sim.b.abort(b_other).unwrap();
        run_until(&mut sim, Duration::from_secs(10), |s| {
            // (A slot counts until its `Closed` is taken.)
            events(&mut s.b);
            events(&mut s.a).contains(&Event::Connected(a))
        });
        assert_eq!(sim.b.stats().time_wait_reopened, 1, "{ending:?}");
        let past = syn_ack_past(&sim, old_last);
        assert!(
            past > 65_535,
            "{ending:?}: the new ISS is {past} from the old space's end"
        );
    }
}

#[test]
fn syn_with_old_timestamp_is_dropped_in_time_wait() {
    for ending in [Ending::Closed, Ending::ShutDown] {
        let (mut sim, _) = server_in_time_wait(16, ending);
        // The last timestamp B saw from A.
        let recent = to(&sim, Side::B)
            .iter()
            .filter_map(|r| r.options.timestamps)
            .map(|(tsval, _)| tsval)
            .next_back()
            .expect("A sent timestamps");
        sim.tap = Some(Vec::new());
        // An old duplicate SYN: a timestamp older than that one.
        let syn = TcpRepr {
            src_port: 10_000,
            dst_port: 80,
            seq: 1,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 65_535,
            urgent: 0,
            options: TcpOptions {
                mss: Some(1460),
                timestamps: Some((recent.wrapping_sub(1_000), 0)),
                ..Default::default()
            },
        };
        sim.inject(Side::B, A_IP, B_IP, &emit(&syn));
        sim.run_for(Duration::from_millis(50));
        assert_eq!(sim.b.stats().time_wait_syn_dropped, 1, "{ending:?}");
        assert_eq!(sim.b.stats().time_wait_reopened, 0, "{ending:?}");
        assert_eq!(
            sim.b.connection_count(),
            1,
            "{ending:?}: still in TIME-WAIT"
        );
        assert!(to(&sim, Side::A).is_empty(), "{ending:?}: dropped silently");
    }
}

#[test]
fn retransmitted_fin_is_acknowledged_and_restarts_the_wait() {
    for ending in [Ending::Closed, Ending::ShutDown] {
        let (mut sim, _) = server_in_time_wait(17, ending);
        let fin = peer_fin(&sim);
        let entered = sim.now;
        sim.run_for(Duration::from_secs(30));
        // What B sends, kept from A: A has no connection any more and
        // would answer B's ACK with an RST, which ends TIME-WAIT as well
        // (see the next test).
        let sent = Rc::new(RefCell::new(Vec::new()));
        let s = sent.clone();
        sim.emit_tap = Some(Box::new(move |side, bytes| {
            if side == Side::B {
                s.borrow_mut()
                    .push(TcpRepr::parse_segment(bytes).unwrap().0);
            }
        }));
        sim.link_up = false;
        sim.inject(Side::B, A_IP, B_IP, &fin);
        sim.run_for(Duration::from_millis(50));
        let acks = sent.borrow().clone();
        assert_eq!(acks.len(), 1, "{ending:?}: one ACK for the FIN: {acks:?}");
        let fin_repr = TcpRepr::parse_segment(&fin).unwrap().0;
        assert_eq!(acks[0].flags, TcpFlags::ACK, "{ending:?}");
        assert_eq!(acks[0].ack, fin_repr.seq.wrapping_add(1), "{ending:?}");
        assert!(acks[0].options.timestamps.is_some(), "{ending:?}");
        // 2 MSL from the retransmission, not from entering TIME-WAIT.
        sim.run_for(Duration::from_secs(45));
        assert_eq!(sim.b.connection_count(), 1, "{ending:?}: restarted");
        run_until(&mut sim, Duration::from_secs(20), |s| {
            s.b.connection_count() == 0
        });
        assert!(sim.now.saturating_since(entered) >= Duration::from_secs(89));
    }
}

#[test]
fn rsts_never_end_time_wait() {
    for ending in [Ending::Closed, Ending::ShutDown] {
        let (mut sim, _) = server_in_time_wait(18, ending);
        let fin = TcpRepr::parse_segment(&peer_fin(&sim)).unwrap().0;
        let rcv_nxt = fin.seq.wrapping_add(1);
        let rst = |seq: u32| TcpRepr {
            src_port: 10_000,
            dst_port: 80,
            seq,
            ack: 0,
            flags: TcpFlags::RST,
            window: 0,
            urgent: 0,
            options: TcpOptions::default(),
        };
        sim.tap = Some(Vec::new());
        // A blind RST far from the window: ignored, no answer.
        sim.inject(
            Side::B,
            A_IP,
            B_IP,
            &emit(&rst(rcv_nxt.wrapping_add(1 << 30))),
        );
        // A bare ACK at RCV.NXT (with a fresh timestamp): nothing to answer.
        let ack = TcpRepr {
            flags: TcpFlags::ACK,
            seq: rcv_nxt,
            ack: fin.ack,
            window: 1000,
            options: TcpOptions {
                timestamps: fin.options.timestamps.map(|(v, e)| (v.wrapping_add(5), e)),
                ..Default::default()
            },
            ..rst(0)
        };
        sim.inject(Side::B, A_IP, B_IP, &emit(&ack));
        // A segment without timestamps once they were negotiated: dropped.
        let no_ts = TcpRepr {
            options: TcpOptions::default(),
            ..ack
        };
        sim.inject(Side::B, A_IP, B_IP, &emit(&no_ts));
        sim.run_for(Duration::from_millis(50));
        assert_eq!(sim.b.connection_count(), 1, "{ending:?}");
        assert!(to(&sim, Side::A).is_empty(), "{ending:?}: nothing answered");
        // Even an RST at RCV.NXT leaves TIME-WAIT alone (RFC 1337 §3,
        // fix F1: "TIME-WAIT assassination"), counted, unanswered.
        let before = *sim.b.stats();
        sim.inject(Side::B, A_IP, B_IP, &emit(&rst(rcv_nxt)));
        sim.inject(Side::B, A_IP, B_IP, &emit(&rst(rcv_nxt.wrapping_add(10))));
        sim.run_for(Duration::from_millis(50));
        assert_eq!(sim.b.connection_count(), 1, "{ending:?}");
        assert!(to(&sim, Side::A).is_empty(), "{ending:?}: nothing answered");
        let after = *sim.b.stats();
        // (Past RCV.NXT is out of the window once the peer's FIN is in.)
        assert_eq!(after.rst_in_time_wait, before.rst_in_time_wait + 1);
        assert_eq!(after.rst_out_of_window, 2, "the blind one and RCV.NXT + 10");
        assert_eq!(after.resets_in, before.resets_in);
        // The 2 MSL wait ends on time all the same.
        sim.run_for(Duration::from_secs(61));
        assert_eq!(sim.b.connection_count(), 0, "{ending:?}");
    }
}

#[test]
fn closing_a_connection_in_time_wait_compacts_it() {
    let (mut sim, b) = server_in_time_wait(19, Ending::ShutDown);
    assert_eq!(read_all(&mut sim.b, b), b"", "EOF, nothing left to read");
    sim.b.close(b).unwrap();
    assert_eq!(
        events(&mut sim.b),
        vec![Event::Closed {
            conn: b,
            reason: CloseReason::Normal
        }]
    );
    assert_eq!(sim.b.state(b), Err(Error::InvalidHandle));
    assert_eq!(sim.b.time_wait_count(), 1);
    // Counted as a connection, but it holds no slot.
    assert_eq!(
        (sim.b.connection_count(), sim.b.connections_in_slots()),
        (1, 0)
    );
    // The record still holds the tuple: a new active open from it waits.
    assert_eq!(
        sim.b.connect(sim.now, b_addr(80), a_addr(10_000)),
        Err(Error::AddrInUse)
    );
    run_until(&mut sim, Duration::from_secs(61), |s| {
        s.b.connection_count() == 0
    });
}

#[test]
fn the_oldest_records_go_first_at_the_cap() {
    let mut b_cfg = test_config(2);
    b_cfg.time_wait_max = 2;
    let link = LinkConfig::default();
    let mut sim = Sim::new(20, link, link, test_config(1), b_cfg);
    sim.b.listen(b_addr(80)).unwrap();
    for port in [10_001, 10_002, 10_003] {
        let a = sim.a.connect(sim.now, a_addr(port), b_addr(80)).unwrap();
        let mut b = None;
        run_until(&mut sim, Duration::from_secs(5), |s| {
            for e in events(&mut s.b) {
                if let Event::Accepted { conn, .. } = e {
                    b = Some(conn);
                }
            }
            b.is_some()
        });
        sim.b.close(b.unwrap()).unwrap();
        sim.run_for(Duration::from_millis(50));
        sim.a.close(a).unwrap();
        sim.run_for(Duration::from_secs(1));
    }
    assert_eq!(sim.b.time_wait_count(), 2);
    assert_eq!(sim.b.stats().time_wait_evicted, 1);
    // The first connection's record was the one dropped: its port is free.
    let b = sim.b.connect(sim.now, b_addr(80), a_addr(10_001));
    assert!(b.is_ok(), "{b:?}");
    assert_eq!(
        sim.b.connect(sim.now, b_addr(80), a_addr(10_003)),
        Err(Error::AddrInUse)
    );
}

#[test]
fn a_cap_of_zero_still_acknowledges_the_peers_fin() {
    let mut b_cfg = test_config(2);
    b_cfg.time_wait_max = 0;
    let link = LinkConfig::default();
    let mut sim = Sim::new(21, link, link, test_config(1), b_cfg);
    let (a, b) = sim.establish();
    sim.b.close(b).unwrap();
    sim.run_for(Duration::from_millis(50));
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(50));
    // A got its FIN acknowledged: a clean close, no RST.
    assert!(events(&mut sim.a).contains(&Event::Closed {
        conn: a,
        reason: CloseReason::Normal
    }));
    assert_eq!(sim.b.stats().resets_out, 0);
    assert!(sim.b.time_wait_count() <= 1);
}

/// Many short exchanges where the server closes first (HTTP's
/// `Connection: close`), over a lossy link: every byte arrives both ways,
/// every connection ends normally on both sides, and the TIME-WAIT records
/// are the server's (B's), one per connection, while the client (A),
/// the passive closer, keeps none.
#[test]
fn servers_that_close_first_keep_the_time_wait_records() {
    let link = LinkConfig {
        loss: 0.02,
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(11, link);
    let mut bulk = sim::Bulk::start(&mut sim, 200, 300, 5_000);
    bulk.b_closes_first = true;
    let done = sim.run_until(sim.now + Duration::from_secs(30), |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    assert!(done, "not finished: {:?}", bulk.errors);
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
    assert_eq!(bulk.late_resets, 0);
    assert_eq!(sim.b.time_wait_count(), 200);
    assert_eq!(sim.a.time_wait_count(), 0);
    assert_eq!(sim.b.stats().passive_opens, 200);
}

/// A SYN to `to` from `from`'s port `from_port`, with timestamp `tsval`.
fn bare_syn(from_port: u16, to_port: u16, tsval: u32) -> Vec<u8> {
    emit(&TcpRepr {
        src_port: from_port,
        dst_port: to_port,
        seq: 7,
        ack: 0,
        flags: TcpFlags::SYN,
        window: 65_535,
        urgent: 0,
        options: TcpOptions {
            mss: Some(1460),
            timestamps: Some((tsval, 0)),
            ..Default::default()
        },
    })
}

/// The last timestamp the tap saw going to `side`.
fn last_tsval(sim: &Sim, side: Side) -> u32 {
    to(sim, side)
        .iter()
        .filter_map(|r| r.options.timestamps)
        .map(|(tsval, _)| tsval)
        .next_back()
        .expect("timestamps")
}

/// B shut down writing and A sent "resp" and closed: B is in TIME-WAIT
/// with "resp" unread. A newer SYN for the tuple (anyone's who knows it)
/// would open a new incarnation, but not by throwing those bytes away and
/// reporting a normal close: it is dropped, and B's application reads all.
#[test]
fn a_syn_in_time_wait_never_takes_unread_bytes_with_it() {
    let mut sim = Sim::symmetric(21, LinkConfig::default());
    sim.tap = Some(Vec::new());
    let (a, b) = sim.establish();
    sim.b.shutdown_write(b).unwrap();
    sim.run_for(Duration::from_millis(50));
    sim.a.send(a, b"resp").unwrap();
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.b.state(b), Ok(State::TimeWait));
    events(&mut sim.b);
    let syn = bare_syn(
        sim::CLIENT_PORT_BASE,
        80,
        last_tsval(&sim, Side::B).wrapping_add(1),
    );
    sim.inject(Side::B, A_IP, B_IP, &syn);
    sim.run_for(Duration::from_millis(50));
    assert!(
        !events(&mut sim.b)
            .iter()
            .any(|e| matches!(e, Event::Closed { conn, .. } if *conn == b)),
        "the connection stays"
    );
    assert_eq!(read_all(&mut sim.b, b), b"resp");
    assert_eq!(sim.b.stats().time_wait_reopened, 0);
    assert_eq!(sim.b.stats().time_wait_syn_dropped, 1);
}

/// A's connection (the client's, no listener on its port) is in TIME-WAIT.
/// A SYN to it there is no connection request: RFC 6191 reuse needs a
/// listener. The record stays (its 2 MSL guard old duplicates from the next
/// connection on the tuple, RFC 1337), and no RST goes to the server.
#[test]
fn a_syn_to_a_client_s_time_wait_keeps_the_record() {
    let mut sim = Sim::symmetric(22, LinkConfig::default());
    sim.tap = Some(Vec::new());
    let (a, b) = sim.establish();
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(50));
    sim.b.close(b).unwrap();
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.a.time_wait_count(), 1);
    events(&mut sim.a);
    // A newer timestamp than A saw last: with a listener, a reuse.
    let syn = bare_syn(
        80,
        sim::CLIENT_PORT_BASE,
        last_tsval(&sim, Side::A).wrapping_add(1),
    );
    sim.tap = Some(Vec::new());
    sim.inject(Side::A, B_IP, A_IP, &syn);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.a.time_wait_count(), 1, "the record stays");
    assert_eq!(sim.a.stats().time_wait_reopened, 0);
    assert_eq!(sim.a.stats().resets_no_connection, 0);
    assert!(
        to(&sim, Side::B).iter().all(|r| !r.flags.rst()),
        "no RST to the server"
    );
}

/// Every segment `stack` has to send at `now`, parsed.
fn drain(stack: &mut flowlane_tcp::Stack, now: flowlane_tcp::time::Instant) -> Vec<TcpRepr> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Some(t) = stack.poll_transmit(now, &mut buf) {
        out.push(TcpRepr::parse_segment(&buf[..t.len]).unwrap().0);
    }
    out
}

/// A SYN that would reopen TIME-WAIT but that the listener's filter
/// refuses is answered as the filter's refusals are (an RST, counted) and
/// leaves TIME-WAIT as it is: the old incarnation's retransmitted FIN is
/// still acknowledged (RFC 9293 §3.10.7.4), and its sequence space still
/// keeps a later incarnation's ISS past it. The record used to be dropped
/// before the filter was asked, and that FIN then drew an RST.
#[test]
fn a_syn_the_filter_refuses_keeps_time_wait() {
    for ending in [Ending::Closed, Ending::ShutDown] {
        let (mut sim, b) = server_in_time_wait(15, ending);
        let fin = peer_fin(&sim);
        let l = flowlane_tcp::ListenerId::from_index(0);
        sim.b
            .set_syn_filter(l, Some(std::sync::Arc::new(|t| t.remote.port() != 10_000)))
            .unwrap();
        // Newer than anything B saw: RFC 6191 would let it reopen.
        let tsval = last_tsval(&sim, Side::B).wrapping_add(1000);
        let now = sim.now;
        sim.b
            .handle_segment(now, A_IP, B_IP, &bare_syn(10_000, 80, tsval));
        let replies = drain(&mut sim.b, now);
        match ending {
            Ending::Closed => assert_eq!(sim.b.time_wait_count(), 1, "{ending:?}: kept"),
            Ending::ShutDown => assert_eq!(sim.b.state(b), Ok(State::TimeWait), "{ending:?}"),
        }
        assert!(
            matches!(&replies[..], [r] if r.flags.rst() && r.ack == 8),
            "{ending:?}: the refusal's RST: {replies:?}"
        );
        let s = *sim.b.stats();
        assert_eq!(s.syn_refused, 1, "{ending:?}");
        assert_eq!(s.time_wait_reopened, 0, "{ending:?}");
        // The old incarnation's FIN again: TIME-WAIT acknowledges it.
        sim.b.handle_segment(now, A_IP, B_IP, &fin);
        let replies = drain(&mut sim.b, now);
        assert!(
            matches!(&replies[..], [r] if r.flags == TcpFlags::ACK),
            "{ending:?}: the old FIN is acknowledged: {replies:?}"
        );
        assert_eq!(sim.b.stats().syn_refused, 1, "{ending:?}: asked once");
    }
}
