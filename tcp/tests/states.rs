//! State machine scenarios over the simulated link.

mod sim;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{CloseReason, ConnHandle, Error, Event, KeepaliveConfig, Stack, State};
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use sim::peer::Peer;
use sim::{events, pattern, read_all, run_until, LinkConfig, Side, Sim, A_IP, B_IP};
use std::net::{IpAddr, SocketAddr};

fn a_addr(port: u16) -> SocketAddr {
    SocketAddr::new(A_IP, port)
}
fn b_addr(port: u16) -> SocketAddr {
    SocketAddr::new(B_IP, port)
}

/// Compares streams without dumping megabytes on failure.
fn assert_same(got: &[u8], want: &[u8]) {
    let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
    assert!(
        got.len() == want.len() && first_diff.is_none(),
        "got {} bytes, want {}; first difference at {:?}",
        got.len(),
        want.len(),
        first_diff
    );
}

#[test]
fn handshake_negotiates_options() {
    let mut sim = Sim::symmetric(1, LinkConfig::default());
    sim.tap = Some(Vec::new());
    let (a, b) = sim.establish();
    let tap = sim.tap.take().unwrap();
    let (syn, _) = TcpRepr::parse_segment(&tap[0].1).unwrap();
    let (syn_ack, _) = TcpRepr::parse_segment(&tap[1].1).unwrap();
    assert!(syn.flags.syn() && !syn.flags.ack());
    assert!(syn_ack.flags.syn() && syn_ack.flags.ack());
    assert_eq!(syn_ack.ack, syn.seq.wrapping_add(1));
    for s in [&syn, &syn_ack] {
        assert_eq!(s.options.mss, Some(1460));
        // Chosen for the 6 MiB the receive buffer may grow to (RFC 7323
        // §2.3), not for the initial 64 KiB.
        assert_eq!(s.options.window_scale, Some(7));
        assert!(s.options.timestamps.is_some());
        assert!(s.options.sack_permitted); // RFC 2018 §2, both ways
    }
    assert_eq!(sim.a.state(a), Ok(State::Established));
    assert_eq!(sim.b.state(b), Ok(State::Established));
}

#[test]
fn mss_option_limits_segment_size() {
    let mut b_cfg = sim::test_config(2);
    b_cfg.mss = 536;
    let mut sim = Sim::new(
        1,
        LinkConfig::default(),
        LinkConfig::default(),
        sim::test_config(1),
        b_cfg,
    );
    let (a, _) = sim.establish();
    sim.tap = Some(Vec::new());
    sim.a.send(a, &[7u8; 5000]).unwrap();
    sim.run_for(Duration::from_millis(200));
    let tap = sim.tap.take().unwrap();
    let sizes: Vec<usize> = tap
        .iter()
        .filter(|(to, _)| *to == Side::B)
        .map(|(_, seg)| TcpRepr::parse_segment(seg).unwrap().1.len())
        .filter(|&n| n > 0)
        .collect();
    // 536 minus the 12-byte timestamp option (RFC 9293 §3.7.1).
    assert_eq!(sizes.iter().copied().max(), Some(524));
    assert_eq!(sizes.iter().sum::<usize>(), 5000);
}

/// A peer's MSS option of 0 is no MSS option: RFC 9293 §3.7.1's default,
/// 536, as Linux reads it (`tcp_parse_options` skips a 0). Taken as a
/// size, it was raised to the 64-byte floor, and 1,200 bytes went out in
/// 52-byte segments (with timestamps) where Linux sends 524-byte ones
/// (`scripts/conformance.sh syn_mss_zero`).
#[test]
fn an_mss_option_of_zero_is_the_default_mss() {
    let options = TcpOptions {
        mss: Some(0),
        ..TcpOptions::default()
    };
    let mut p = Peer::with_options(60_000, options);
    p.a.send(p.conn, &[5u8; 1_200]).unwrap();
    let sizes: Vec<usize> = p
        .poll()
        .iter()
        .map(|&(_, n)| n)
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(sizes.iter().max(), Some(&536), "{sizes:?}");
}

#[test]
fn data_both_ways_and_clean_close() {
    let mut sim = Sim::symmetric(2, LinkConfig::default());
    let (a, b) = sim.establish();
    assert_eq!(sim.a.send(a, b"hello").unwrap(), 5);
    assert_eq!(sim.b.send(b, b"world!").unwrap(), 6);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.b, b), b"hello");
    assert_eq!(read_all(&mut sim.a, a), b"world!");
    assert_eq!(sim.a.recv(a, &mut [0; 8]), Err(Error::WouldBlock));
    // A closes first: A goes through FIN-WAIT-1/2 to TIME-WAIT, B through
    // CLOSE-WAIT and LAST-ACK.
    sim.a.close(a).unwrap();
    assert_eq!(sim.a.state(a), Ok(State::FinWait1));
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.a.state(a), Ok(State::FinWait2));
    assert_eq!(sim.b.state(b), Ok(State::CloseWait));
    assert!(events(&mut sim.b).contains(&Event::PeerClosed(b)));
    assert_eq!(sim.b.recv(b, &mut [0; 8]), Ok(0), "EOF");
    sim.b.close(b).unwrap();
    assert_eq!(sim.b.state(b), Ok(State::LastAck));
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.b.state(b), Err(Error::InvalidHandle));
    assert!(events(&mut sim.b).contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Normal
    }));
    // A closed, so its TIME-WAIT is a compact record: the handle ends now
    // and the record stays 2*MSL (60 s in the test config).
    assert_eq!(sim.a.state(a), Err(Error::InvalidHandle));
    assert!(events(&mut sim.a).contains(&Event::Closed {
        conn: a,
        reason: CloseReason::Normal
    }));
    assert_eq!(sim.a.time_wait_count(), 1);
    assert_eq!(sim.a.connection_count(), 1);
    let tw_start = sim.now;
    sim.run_for(Duration::from_secs(59));
    assert_eq!(sim.a.time_wait_count(), 1);
    run_until(&mut sim, Duration::from_secs(2), |s| {
        s.a.connection_count() == 0
    });
    assert!(sim.now - tw_start >= Duration::from_secs(59));
    assert_eq!(sim.a.time_wait_count(), 0);
}

/// Drops the first segment B sends with a FIN.
fn lose_bs_first_fin(sim: &mut Sim) {
    let mut fins = 0;
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, _) = TcpRepr::parse_segment(bytes).unwrap();
        side == Side::B && r.flags.fin() && {
            fins += 1;
            fins == 1
        }
    }));
}

/// RFC 9293 §3.10.7.4 LAST-ACK: only the ACK of our FIN deletes the
/// connection. An ACK of the data before it (the segment with the FIN was
/// lost) is processed as any other: the data is freed, the rest sent again,
/// and the connection stays in LAST-ACK until its FIN is acknowledged.
#[test]
fn last_ack_ends_only_with_the_ack_of_the_fin() {
    let mut sim = Sim::symmetric(3, LinkConfig::default());
    let (a, b) = sim.establish();
    // A half-closes: it still reads what B sends.
    sim.a.shutdown_write(a).unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.b.state(b), Ok(State::CloseWait));
    // B's first segment with a FIN (and the tail of its data) is lost.
    lose_bs_first_fin(&mut sim);
    assert_eq!(sim.b.send(b, &[7; 3000]).unwrap(), 3000);
    sim.b.close(b).unwrap();
    assert_eq!(sim.b.state(b), Ok(State::LastAck));
    run_until(&mut sim, Duration::from_secs(1), |s| {
        s.b.info(b).is_ok_and(|i| i.unsent + i.unacked < 3000)
    });
    let info = sim.b.info(b).expect("still there");
    assert_eq!(
        sim.b.state(b),
        Ok(State::LastAck),
        "the FIN is not acknowledged"
    );
    assert!(info.unacked > 0 && info.unacked < 3000, "{info:?}");
    run_until(&mut sim, Duration::from_secs(5), |s| s.b.state(b).is_err());
    assert!(events(&mut sim.b).contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Normal
    }));
    assert_eq!(read_all(&mut sim.a, a), vec![7; 3000]);
    assert_eq!(sim.a.recv(a, &mut [0; 8]), Ok(0), "EOF");
}

/// RFC 9293 §3.10.7.4 FIN-WAIT-1, the eighth step: the peer's FIN enters
/// TIME-WAIT only once our FIN is acknowledged; before, it enters CLOSING,
/// which waits for the FIN sent again to be acknowledged. B closes first
/// (its handle closed, as a server's is), A half-closes as soon as data
/// arrives. With nothing lost, A's FIN acknowledges everything B sent, its
/// FIN last (the segment whose ACK processing is skipped); with B's first
/// FIN lost, A's FIN acknowledges only the data before it.
#[test]
fn fin_wait_enters_time_wait_only_once_our_fin_is_acknowledged() {
    for lose_fin in [false, true] {
        let mut sim = Sim::symmetric(3, LinkConfig::default());
        let (a, b) = sim.establish();
        if lose_fin {
            lose_bs_first_fin(&mut sim);
        }
        assert_eq!(sim.b.send(b, &[7; 3000]).unwrap(), 3000);
        sim.b.close(b).unwrap();
        assert_eq!(sim.b.state(b), Ok(State::FinWait1));
        run_until(&mut sim, Duration::from_secs(1), |s| {
            s.a.info(a).is_ok_and(|i| i.readable > 0)
        });
        sim.a.shutdown_write(a).unwrap();
        run_until(&mut sim, Duration::from_secs(1), |s| {
            s.b.state(b) != Ok(State::FinWait1)
        });
        if lose_fin {
            assert_eq!(
                sim.b.state(b),
                Ok(State::Closing),
                "our FIN is unacknowledged"
            );
            assert_eq!(sim.b.time_wait_count(), 0);
        } else {
            assert_eq!(
                sim.b.state(b),
                Err(Error::InvalidHandle),
                "a compact record now"
            );
            assert_eq!(sim.b.time_wait_count(), 1);
        }
        // Every byte arrives either way, and B is left in TIME-WAIT, in its
        // compact record.
        run_until(&mut sim, Duration::from_secs(5), |s| {
            s.a.info(a).is_ok_and(|i| i.readable == 3000)
        });
        assert_eq!(read_all(&mut sim.a, a), vec![7; 3000]);
        run_until(&mut sim, Duration::from_secs(5), |s| {
            s.b.state(b).is_err() && s.a.state(a) != Ok(State::LastAck)
        });
        assert_eq!(sim.b.time_wait_count(), 1, "lose_fin {lose_fin}");
        // Without loss A's LAST-ACK ended; with B's FIN lost, A's FIN
        // crossed it, and both sides are in TIME-WAIT (RFC 9293 §3.6,
        // simultaneous close).
        let a_state = if lose_fin {
            Ok(State::TimeWait)
        } else {
            Err(Error::InvalidHandle)
        };
        assert_eq!(sim.a.state(a), a_state, "lose_fin {lose_fin}");
        assert!(events(&mut sim.b).contains(&Event::Closed {
            conn: b,
            reason: CloseReason::Normal
        }));
        assert_eq!(sim.a.stats().resets_in, 0);
    }
}

/// The states of every connection the stack holds, as
/// [`Stack::connections_in`] counts them (`Listen` and `Closed` left out:
/// always zero).
fn held_states(s: &Stack) -> Vec<(State, usize)> {
    [
        State::SynSent,
        State::SynReceived,
        State::Established,
        State::FinWait1,
        State::FinWait2,
        State::Closing,
        State::TimeWait,
        State::CloseWait,
        State::LastAck,
    ]
    .into_iter()
    .map(|st| (st, s.connections_in(st)))
    .filter(|&(_, n)| n > 0)
    .collect()
}

#[test]
fn connections_are_counted_by_state_through_a_lifetime() {
    let mut sim = Sim::symmetric(3, LinkConfig::default());
    sim.b.listen(b_addr(80)).unwrap();
    let a = sim.a.connect(sim.now, a_addr(40_000), b_addr(80)).unwrap();
    assert_eq!(held_states(&sim.a), [(State::SynSent, 1)]);
    assert_eq!(sim.a.connections_in(State::Listen), 0);
    // Until B's SYN-ACK is acknowledged, B holds a half-open connection.
    let limit = sim.now + Duration::from_millis(50);
    assert!(sim.run_until(limit, |s| s.b.connections_in(State::SynReceived) == 1));
    assert_eq!(held_states(&sim.b), [(State::SynReceived, 1)]);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(held_states(&sim.a), [(State::Established, 1)]);
    assert_eq!(held_states(&sim.b), [(State::Established, 1)]);
    let b = events(&mut sim.b)
        .into_iter()
        .find_map(|e| match e {
            Event::Accepted { conn, .. } => Some(conn),
            _ => None,
        })
        .expect("accepted");
    // B closes first: B passes FIN-WAIT-1 and FIN-WAIT-2 into TIME-WAIT
    // (a compact record, counted too), A waits in CLOSE-WAIT, then
    // LAST-ACK.
    sim.b.close(b).unwrap();
    assert_eq!(held_states(&sim.b), [(State::FinWait1, 1)]);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(held_states(&sim.b), [(State::FinWait2, 1)]);
    assert_eq!(held_states(&sim.a), [(State::CloseWait, 1)]);
    sim.a.close(a).unwrap();
    assert_eq!(held_states(&sim.a), [(State::LastAck, 1)]);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(held_states(&sim.a), []);
    assert_eq!(held_states(&sim.b), [(State::TimeWait, 1)]);
    assert_eq!(
        sim.b.connections_in(State::TimeWait),
        sim.b.connection_count()
    );
    // A second connection, reset by its peer: its count goes with it.
    let a2 = sim.a.connect(sim.now, a_addr(40_001), b_addr(80)).unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.a.connections_in(State::Established), 1);
    assert_eq!(sim.b.connections_in(State::Established), 1);
    sim.a.abort(a2).unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(held_states(&sim.a), []);
    assert_eq!(held_states(&sim.b), [(State::TimeWait, 1)]);
}

#[test]
fn simultaneous_open_and_close() {
    let mut sim = Sim::symmetric(3, LinkConfig::default());
    let a = sim.a.connect(sim.now, a_addr(6000), b_addr(5000)).unwrap();
    let b = sim.b.connect(sim.now, b_addr(5000), a_addr(6000)).unwrap();
    sim.tap = Some(Vec::new());
    run_until(&mut sim, Duration::from_secs(5), |s| {
        s.a.state(a) == Ok(State::Established) && s.b.state(b) == Ok(State::Established)
    });
    // Both SYNs crossed: each side went SYN-SENT -> SYN-RECEIVED.
    let tap = sim.tap.take().unwrap();
    let syns = tap
        .iter()
        .filter(|(_, s)| TcpRepr::parse_segment(s).unwrap().0.flags.syn())
        .count();
    assert!(syns >= 4, "two SYNs and two SYN-ACKs, saw {syns}");
    assert!(events(&mut sim.a).contains(&Event::Connected(a)));
    assert!(events(&mut sim.b).contains(&Event::Connected(b)));
    sim.a.send(a, b"ping").unwrap();
    sim.b.send(b, b"pong").unwrap();
    sim.run_for(Duration::from_millis(50));
    assert_eq!(read_all(&mut sim.b, b), b"ping");
    assert_eq!(read_all(&mut sim.a, a), b"pong");
    // Simultaneous close: both FINs cross, both go CLOSING -> TIME-WAIT.
    sim.a.shutdown_write(a).unwrap();
    sim.b.shutdown_write(b).unwrap();
    sim.flush();
    sim.step();
    assert_eq!(sim.a.state(a), Ok(State::Closing));
    assert_eq!(sim.b.state(b), Ok(State::Closing));
    run_until(&mut sim, Duration::from_secs(1), |s| {
        s.a.state(a) == Ok(State::TimeWait) && s.b.state(b) == Ok(State::TimeWait)
    });
    run_until(&mut sim, Duration::from_secs(61), |s| {
        s.a.connection_count() == 0 && s.b.connection_count() == 0
    });
}

/// RFC 7323 §2.2: in a simultaneous open, the segment that completes
/// SYN-RECEIVED is the peer's SYN-ACK, whose window is not scaled. Read as
/// scaled, B's 4 KiB became 512 KiB, and A's first flight overran it.
#[test]
fn a_simultaneous_open_reads_the_syn_ack_s_window_unscaled() {
    let (a_cfg, mut b_cfg) = (sim::test_config(1), sim::test_config(2));
    b_cfg.recv_buffer = 4096;
    let link = LinkConfig::default();
    let mut sim = Sim::new(4, link, link, a_cfg, b_cfg);
    let a = sim.a.connect(sim.now, a_addr(6000), b_addr(5000)).unwrap();
    let b = sim.b.connect(sim.now, b_addr(5000), a_addr(6000)).unwrap();
    sim.tap = Some(Vec::new());
    run_until(&mut sim, Duration::from_secs(5), |s| {
        s.a.state(a) == Ok(State::Established) && s.b.state(b) == Ok(State::Established)
    });
    sim.a.send(a, &vec![7u8; 60_000]).unwrap();
    sim.run_for(Duration::from_millis(100));
    // A's data delivered before B's first acknowledgement of data: A's
    // first flight, all within the window B offered.
    let mut first_flight = 0;
    let mut data_start = None;
    for (side, bytes) in sim.tap.as_ref().unwrap() {
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        match side {
            Side::B if !payload.is_empty() => {
                data_start.get_or_insert(r.seq);
                first_flight += payload.len();
            }
            Side::A if data_start.is_some_and(|s| r.ack.wrapping_sub(s) as i32 > 0) => break,
            _ => {}
        }
    }
    assert!(first_flight > 0);
    assert!(
        first_flight <= 4096,
        "A sent {first_flight} bytes into B's 4 KiB window"
    );
}

/// Karn (RFC 6298 §3): the server's SYN-ACK lost, the client's SYN sent
/// again (its timer shorter than the server's) has the server send its
/// SYN-ACK again; the ACK of that copy gives no RTT sample (timed from the
/// first copy it measured the whole wait: an SRTT of some 900 ms on a
/// 10 ms path, without timestamps).
#[test]
fn a_syn_ack_sent_again_gives_no_rtt_sample() {
    let (mut a_cfg, b_cfg) = (sim::test_config(1), sim::test_config(2));
    a_cfg.timestamps = false;
    a_cfg.initial_rto = Duration::from_millis(900);
    let link = LinkConfig::default();
    let mut sim = Sim::new(5, link, link, a_cfg, b_cfg);
    let mut dropped = false;
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, _) = TcpRepr::parse_segment(bytes).unwrap();
        let first_syn_ack = side == Side::B && r.flags.syn() && r.flags.ack() && !dropped;
        dropped |= first_syn_ack;
        first_syn_ack
    }));
    sim.b.listen(b_addr(80)).unwrap();
    let a = sim.a.connect(sim.now, a_addr(10_000), b_addr(80)).unwrap();
    let mut b = None;
    run_until(&mut sim, Duration::from_secs(10), |s| {
        for e in events(&mut s.b) {
            if let Event::Accepted { conn, .. } = e {
                b = Some(conn);
            }
        }
        b.is_some()
    });
    let b = b.expect("accepted");
    for _ in 0..3 {
        sim.b.send(b, &[0u8; 100]).unwrap();
        sim.run_for(Duration::from_millis(50));
        read_all(&mut sim.a, a);
    }
    let srtt = sim.b.info(b).unwrap().srtt.expect("sampled since");
    assert!(
        srtt < Duration::from_millis(100),
        "SRTT {srtt:?} on a 20 ms round trip"
    );
}

/// RFC 9293 §3.10.4: a shutdown in SYN-SENT deletes the connection when
/// nothing is queued to send. With data queued (a client that writes its
/// request and shuts down before the SYN-ACK, found by the `rx_frames`
/// fuzz target) the data and then the FIN follow the handshake, and the
/// response can still be read (the connection used to end at once,
/// `Normal`, its data dropped).
#[test]
fn a_shutdown_in_syn_sent_sends_the_queued_data_and_fin_after_the_handshake() {
    let mut sim = Sim::symmetric(4, LinkConfig::default());
    sim.b.listen(b_addr(80)).unwrap();
    // Nothing queued: the connection is gone at once.
    let idle = sim.a.connect(sim.now, a_addr(7000), b_addr(80)).unwrap();
    sim.a.shutdown_write(idle).unwrap();
    assert_eq!(sim.a.state(idle), Err(Error::InvalidHandle));
    assert!(events(&mut sim.a).contains(&Event::Closed {
        conn: idle,
        reason: CloseReason::Normal
    }));
    // A request queued in SYN-SENT, then the shutdown.
    let a = sim.a.connect(sim.now, a_addr(7001), b_addr(80)).unwrap();
    let request: Vec<u8> = (0..3000).map(|i| pattern(1, i)).collect();
    assert_eq!(sim.a.send(a, &request).unwrap(), request.len());
    sim.a.shutdown_write(a).unwrap();
    assert_eq!(sim.a.state(a), Ok(State::SynSent));
    let mut b = None;
    run_until(&mut sim, Duration::from_secs(5), |s| {
        while let Some(e) = s.b.poll_event() {
            if let Event::Accepted { conn, .. } = e {
                b = Some(conn);
            }
        }
        b.is_some_and(|b| s.b.state(b) == Ok(State::CloseWait))
    });
    let b = b.expect("accepted");
    assert_same(&read_all(&mut sim.b, b), &request);
    assert_eq!(sim.b.recv(b, &mut [0; 8]), Ok(0), "the FIN after the data");
    // A still reads B's answer, then both close.
    sim.b.send(b, b"answer").unwrap();
    sim.b.close(b).unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.a, a), b"answer");
    let a_events = events(&mut sim.a);
    assert!(a_events.contains(&Event::Connected(a)), "{a_events:?}");
    assert!(!a_events
        .iter()
        .any(|e| matches!(e, Event::Closed { reason, .. } if *reason != CloseReason::Normal)));
}

#[test]
fn rst_for_closed_port() {
    let mut sim = Sim::symmetric(4, LinkConfig::default());
    let a = sim.a.connect(sim.now, a_addr(10000), b_addr(81)).unwrap();
    run_until(&mut sim, Duration::from_secs(1), |s| s.a.state(a).is_err());
    assert_eq!(
        events(&mut sim.a),
        vec![Event::Closed {
            conn: a,
            reason: CloseReason::Reset
        }]
    );
    assert_eq!(sim.b.stats().resets_out, 1);
    assert_eq!(sim.b.stats().no_connection, 1);
    assert_eq!(
        sim.b.stats().resets_no_connection,
        1,
        "counted by its reason"
    );
}

#[test]
fn abort_resets_peer_and_handles_are_not_reused() {
    let mut sim = Sim::symmetric(5, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.tap = Some(Vec::new());
    sim.a.abort(a).unwrap();
    assert_eq!(
        events(&mut sim.a),
        vec![Event::Closed {
            conn: a,
            reason: CloseReason::Aborted
        }]
    );
    run_until(&mut sim, Duration::from_secs(1), |s| s.b.state(b).is_err());
    assert!(events(&mut sim.b).contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Reset
    }));
    assert_eq!(
        (sim.a.stats().resets_out, sim.a.stats().resets_aborted),
        (1, 1)
    );
    // A new connection reuses the slab slot but not the handle.
    let a2 = sim.a.connect(sim.now, a_addr(10001), b_addr(80)).unwrap();
    assert_eq!(a2.index(), a.index());
    assert_ne!(a2, a);
    assert_eq!(sim.a.send(a, b"x"), Err(Error::InvalidHandle));
    assert_eq!(sim.a.state(a2), Ok(State::SynSent));
}

/// A connection whose receiver (B) has a 4 KiB buffer.
fn small_receiver() -> (Sim, flowlane_tcp::ConnHandle, flowlane_tcp::ConnHandle) {
    let mut b_cfg = sim::test_config(2);
    b_cfg.recv_buffer = 4096;
    let mut sim = Sim::new(
        6,
        LinkConfig::default(),
        LinkConfig::default(),
        sim::test_config(1),
        b_cfg,
    );
    let (a, b) = sim.establish();
    (sim, a, b)
}

#[test]
fn zero_window_and_persist() {
    let (mut sim, a, b) = small_receiver();
    let data: Vec<u8> = (0..20_000u64).map(|i| pattern(9, i)).collect();
    let n = sim.a.send(a, &data).unwrap();
    assert_eq!(n, 20_000);
    // B does not read for 20 minutes: its window closes and A keeps probing
    // (from the persist timer, backed off to a probe a minute; flow
    // control, not loss: no retransmission timeout), without ever giving up
    // while B answers (RFC 1122 §4.2.2.17).
    sim.run_for(Duration::from_secs(1200));
    // The window scale (7, for the 6 MiB the buffer may grow to) rounds
    // the last windows up to 128-byte units: the right edge, which never
    // moves left, ends up to 127 bytes past the buffer per rounding, and B
    // accepts those bytes too (ring headroom) so that its window really
    // reaches zero instead of offering space it would not take.
    let got = sim.b.stats().bytes_in;
    assert!((4096..4096 + 4096 / 16).contains(&got), "{got}");
    let s = sim.a.stats();
    assert!(s.window_probes >= 20, "{s:?}");
    assert_eq!(s.rto_timeouts, 0, "{s:?}");
    assert_eq!(
        sim.a.state(a),
        Ok(State::Established),
        "zero window never times out"
    );
    // Reading opens the window; everything arrives intact.
    let mut got = Vec::new();
    let end = sim.now + Duration::from_secs(30);
    while got.len() < data.len() && sim.now < end {
        got.extend(read_all(&mut sim.b, b));
        sim.step();
    }
    assert_same(&got, &data);
}

#[test]
fn retransmission_timeout_gives_up() {
    let mut sim = Sim::symmetric(7, LinkConfig::default());
    let (a, _b) = sim.establish();
    sim.link_up = false;
    let start = sim.now;
    sim.a.send(a, b"into the void").unwrap();
    run_until(&mut sim, Duration::from_secs(3600), |s| {
        s.a.state(a).is_err()
    });
    assert!(events(&mut sim.a).contains(&Event::Closed {
        conn: a,
        reason: CloseReason::Timeout
    }));
    sim.step();
    let s = sim.a.stats();
    assert_eq!(s.rto_timeouts, 16, "15 retransmissions, then give up");
    assert_eq!(
        (s.resets_out, s.resets_timed_out),
        (1, 1),
        "the RST at the end"
    );
    // Backoff: 200 ms doubling to the 60 s cap (RFC 6298 §5.5).
    let took = sim.now - start;
    assert!(
        took > Duration::from_secs(400) && took < Duration::from_secs(800),
        "{took:?}"
    );
}

/// A simulation whose A stack probes after 10 s idle, 2 s apart, 3 probes;
/// B's has no keepalive.
fn keepalive_sim(seed: u64) -> Sim {
    let mut a_cfg = sim::test_config(1);
    a_cfg.keepalive = Some(KeepaliveConfig {
        idle: Duration::from_secs(10),
        interval: Duration::from_secs(2),
        probes: 3,
    });
    Sim::new(
        seed,
        LinkConfig::default(),
        LinkConfig::default(),
        a_cfg,
        sim::test_config(2),
    )
}

#[test]
fn keepalive_probes_then_times_out() {
    let mut sim = keepalive_sim(8);
    let (a, _b) = sim.establish();
    // Idle but alive: probes are answered and the connection stays.
    sim.run_for(Duration::from_secs(35));
    assert!(sim.a.stats().keepalive_probes >= 3);
    assert_eq!(sim.a.state(a), Ok(State::Established));
    // Peer unreachable: idle + probes * interval later it is dropped.
    sim.link_up = false;
    let cut = sim.now;
    run_until(&mut sim, Duration::from_secs(60), |s| s.a.state(a).is_err());
    assert!(sim.now - cut <= Duration::from_secs(10 + 4 * 2 + 1));
    assert!(events(&mut sim.a).contains(&Event::Closed {
        conn: a,
        reason: CloseReason::Timeout
    }));
}

#[test]
fn keepalive_per_connection_overrides_the_stack_s() {
    let mut sim = keepalive_sim(18);
    let (a, b) = sim.establish();
    // Off on A's connection: no probe however long it idles.
    sim.a.set_keepalive(a, false).unwrap();
    sim.run_for(Duration::from_secs(60));
    assert_eq!(sim.a.stats().keepalive_probes, 0);
    // On at B, whose stack has no keepalive: the default timings (2 h idle,
    // 75 s apart, 9 probes).
    sim.b.set_keepalive(b, true).unwrap();
    sim.run_for(Duration::from_secs(2 * 3600 - 70));
    assert_eq!(sim.b.stats().keepalive_probes, 0);
    sim.run_for(Duration::from_secs(3 * 75));
    assert!(sim.b.stats().keepalive_probes >= 1, "{:?}", sim.b.stats());
    assert_eq!(sim.b.state(b), Ok(State::Established));
    // Back on at A: its stack's 10 s.
    sim.a.set_keepalive(a, true).unwrap();
    sim.run_for(Duration::from_secs(15));
    assert!(sim.a.stats().keepalive_probes >= 1);
}

#[test]
fn nagle_and_delayed_ack() {
    let mut sim = Sim::symmetric(9, LinkConfig::default());
    let (a, b) = sim.establish();
    let mut buf = [0u8; 1500];
    // Two full-sized segments are acknowledged at once (RFC 5681 §4.2).
    sim.a.send(a, &[b'f'; 2896]).unwrap();
    let now = sim.now;
    let mut segs = Vec::new();
    while let Some(t) = sim.a.poll_transmit(now, &mut buf) {
        segs.push(buf[..t.len].to_vec());
    }
    assert_eq!(segs.len(), 2);
    sim.b.handle_segment(now, A_IP, B_IP, &segs[0]);
    assert!(sim.b.poll_transmit(now, &mut buf).is_none());
    sim.b.handle_segment(now, A_IP, B_IP, &segs[1]);
    let ack = sim
        .b
        .poll_transmit(now, &mut buf)
        .expect("second full segment: ACK now");
    let ack_seg = buf[..ack.len].to_vec();
    sim.a.handle_segment(now, B_IP, A_IP, &ack_seg);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.b, b), vec![b'f'; 2896]);
    let now = sim.now;
    // Nagle: the second small write waits for the first one's ACK.
    sim.a.send(a, b"x").unwrap();
    let t1 = sim.a.poll_transmit(now, &mut buf).unwrap();
    let seg1 = buf[..t1.len].to_vec();
    sim.a.send(a, b"y").unwrap();
    assert!(sim.a.poll_transmit(now, &mut buf).is_none(), "Nagle holds");
    // B delays its ACK for a single small segment...
    sim.b.handle_segment(now, A_IP, B_IP, &seg1);
    assert!(sim.b.poll_transmit(now, &mut buf).is_none(), "ACK delayed");
    // poll_timeout may be early (a far timer is filed coarsely until it
    // comes near): run timers as it says until the ACK goes out.
    let (t, ack) = loop {
        let t = sim.b.poll_timeout().unwrap();
        assert!(t <= now + Duration::from_millis(41));
        sim.b.handle_timeout(t);
        if let Some(ack) = sim.b.poll_transmit(t, &mut buf) {
            break (t, ack);
        }
    };
    assert!(t >= now + Duration::from_millis(40), "{t:?}");
    let ack_seg = buf[..ack.len].to_vec();
    // ...and once it arrives the held byte goes out.
    sim.a.handle_segment(t, B_IP, A_IP, &ack_seg);
    assert!(sim.a.poll_transmit(t, &mut buf).is_some());
    // With TCP_NODELAY small writes go out back to back.
    sim.a.set_nodelay(a, true).unwrap();
    sim.a.send(a, b"1").unwrap();
    assert!(sim.a.poll_transmit(t, &mut buf).is_some());
    sim.a.send(a, b"2").unwrap();
    assert!(sim.a.poll_transmit(t, &mut buf).is_some());
    // Those segments were dropped on the floor here; the RTO resends them.
    sim.run_for(Duration::from_secs(3));
    assert_eq!(read_all(&mut sim.b, b), b"xy12");
}

#[test]
fn window_scaling_allows_large_windows() {
    let link = LinkConfig {
        delay: Duration::from_millis(50),
        ..LinkConfig::default()
    };
    let mut a_cfg = sim::test_config(1);
    let mut b_cfg = sim::test_config(2);
    for c in [&mut a_cfg, &mut b_cfg] {
        c.send_buffer = 1 << 20;
        c.recv_buffer = 1 << 20;
    }
    let mut sim = Sim::new(10, link, link, a_cfg, b_cfg);
    let (a, b) = sim.establish();
    let total = 8usize << 20;
    let chunk = vec![0x5au8; 1 << 16];
    let mut sent = 0;
    let mut got = 0;
    let start = sim.now;
    let end = sim.now + Duration::from_secs(30);
    let mut buf = vec![0u8; 1 << 16];
    while got < total && sim.now < end {
        while sent < total {
            match sim.a.send(a, &chunk[..(total - sent).min(chunk.len())]) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        while let Ok(n) = sim.b.recv(b, &mut buf) {
            got += n;
        }
        sim.step();
    }
    assert_eq!(got, total);
    // A 64 KiB window at a 100 ms RTT caps at 640 KiB/s (13 s for 8 MiB);
    // the scaled 1 MiB window does it in a few seconds.
    let took = sim.now - start;
    assert!(
        took < Duration::from_secs(4),
        "took {took:?} {:?} {:?}",
        sim.a.stats(),
        sim.stats
    );
}

#[test]
fn export_import_mid_transfer() {
    // A lossy link so that B holds out-of-order data and A holds unacked
    // data at the moment of the move.
    let link = LinkConfig::hostile(0.05);
    let mut sim = Sim::symmetric(11, link);
    let (a, b) = sim.establish();
    let total = 300_000u64;
    let data: Vec<u8> = (0..total).map(|i| pattern(3, i)).collect();
    let mut sent = 0usize;
    let mut got = Vec::new();
    let (mut a, mut b) = (a, b);
    let mut moves = 0;
    let end = sim.now + Duration::from_secs(300);
    while (got.len() as u64) < total && sim.now < end {
        if let Ok(n) = sim.a.send(a, &data[sent..]) {
            sent += n;
        }
        got.extend(read_all(&mut sim.b, b));
        sim.step();
        // Move both ends to fresh stacks ("other cores") every 50 KB.
        if got.len() / 50_000 > moves {
            moves += 1;
            let snap_a = sim.a.export(a).unwrap();
            let snap_b = sim.b.export(b).unwrap();
            assert_eq!(sim.a.connection_count(), 0);
            let mut a2 = Stack::new(sim::test_config(1));
            let mut b2 = Stack::new(sim::test_config(2));
            a = a2.import(sim.now, snap_a).unwrap();
            b = b2.import(sim.now, snap_b).unwrap();
            assert_eq!(a2.state(a), Ok(State::Established));
            sim.a = a2;
            sim.b = b2;
        }
    }
    assert!(moves >= 5);
    assert_same(&got, &data);
}

#[test]
fn user_data_stays_with_the_connection() {
    let mut sim = Sim::symmetric(13, LinkConfig::default());
    let (a, b) = sim.establish();
    assert_eq!(sim.b.user_data(b), Ok(0), "zero until set");
    sim.b.set_user_data(b, 0xfeed_f00d).unwrap();
    sim.a.set_user_data(a, 7).unwrap();
    assert_eq!(sim.b.user_data(b), Ok(0xfeed_f00d));
    assert_eq!(sim.a.user_data(a), Ok(7), "per connection, per stack");
    // It moves with the connection to another stack.
    let snap = sim.b.export(b).unwrap();
    assert_eq!(sim.b.user_data(b), Err(Error::InvalidHandle));
    let mut b2 = Stack::new(sim::test_config(2));
    let b = b2.import(sim.now, snap).unwrap();
    assert_eq!(b2.user_data(b), Ok(0xfeed_f00d));
    sim.b = b2;
    // A closed connection's handle no longer reaches it.
    sim.a.abort(a).unwrap();
    assert_eq!(sim.a.set_user_data(a, 1), Err(Error::InvalidHandle));
}

/// Moves every segment `from` has to send into `to`; returns how many.
fn hand_over(from: &mut Stack, to: &mut Stack, now: Instant) -> usize {
    let mut buf = vec![0u8; 65_536];
    let mut n = 0;
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        to.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        n += 1;
    }
    n
}

#[test]
fn handshake_completed_after_a_syn_ack_timeout_still_sends() {
    // B's SYN-ACK retransmission timer fires (rewinding SND.NXT to resend
    // the SYN-ACK), and A's ACK completes the handshake before B sent the
    // SYN-ACK again: B must still send its data and its FIN (it once sent
    // nothing more, its SND.NXT left below SND.UNA).
    let mut a = Stack::new(sim::test_config(1));
    let mut b = Stack::new(sim::test_config(2));
    b.listen(b_addr(80)).unwrap();
    let t0 = Instant::from_millis(1);
    let ha = a.connect(t0, a_addr(10_000), b_addr(80)).unwrap();
    assert_eq!(hand_over(&mut a, &mut b, t0), 1, "SYN");
    assert_eq!(hand_over(&mut b, &mut a, t0), 1, "SYN-ACK");
    let mut buf = vec![0u8; 2048];
    let ack = a.poll_transmit(t0, &mut buf).expect("A's ACK");
    let ack_bytes = buf[..ack.len].to_vec();
    let t1 = t0 + Duration::from_millis(1_500);
    b.handle_timeout(t1);
    b.handle_segment(t1, ack.src.ip(), ack.dst.ip(), &ack_bytes);
    let hb = events(&mut b)
        .into_iter()
        .find_map(|e| match e {
            Event::Accepted { conn, .. } => Some(conn),
            _ => None,
        })
        .expect("accepted");
    b.send(hb, b"hello").unwrap();
    b.close(hb).unwrap();
    let t2 = t1 + Duration::from_millis(1);
    hand_over(&mut b, &mut a, t2);
    assert_eq!(read_all(&mut a, ha), b"hello");
    assert!(a.is_eof(ha).unwrap(), "B's FIN arrived");
}

#[test]
fn closing_an_orphan_again_does_not_extend_fin_wait_2() {
    let mut sim = Sim::symmetric(14, LinkConfig::default());
    let (a, _b) = sim.establish();
    sim.a.shutdown_write(a).unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.a.state(a), Ok(State::FinWait2));
    sim.a.close(a).unwrap();
    // 2 MSL is 60 s here; closing again every 10 s must not push it back.
    for _ in 0..5 {
        sim.run_for(Duration::from_secs(10));
        let _ = sim.a.close(a);
    }
    sim.run_for(Duration::from_secs(15));
    assert_eq!(
        sim.a.state(a),
        Err(Error::InvalidHandle),
        "timed out after 2 MSL"
    );
}

#[test]
fn paws_drops_old_timestamps() {
    let mut sim = Sim::symmetric(12, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.tap = Some(Vec::new());
    sim.a.send(a, b"first").unwrap();
    sim.run_for(Duration::from_millis(100));
    sim.a.send(a, b"second").unwrap();
    sim.run_for(Duration::from_millis(100));
    let tap = sim.tap.take().unwrap();
    let old = tap
        .iter()
        .find(|(to, s)| *to == Side::B && TcpRepr::parse_segment(s).unwrap().1 == b"first")
        .unwrap()
        .1
        .clone();
    assert_eq!(read_all(&mut sim.b, b), b"firstsecond");
    // Replaying the old segment (as a wrapped-sequence duplicate would be):
    // dropped by PAWS, nothing delivered.
    let before = sim.b.stats().paws_rejected;
    sim.b.handle_segment(sim.now, A_IP, B_IP, &old);
    assert_eq!(sim.b.stats().paws_rejected, before + 1);
    assert_eq!(sim.b.recv(b, &mut [0; 16]), Err(Error::WouldBlock));
    let _ = Instant::ZERO;
}

/// `seg` with its TSval replaced by `tsval` (the checksum is
/// `Sim::inject`'s).
fn with_tsval(seg: &[u8], tsval: u32) -> Vec<u8> {
    let (mut r, payload) = TcpRepr::parse_segment(seg).unwrap();
    let (_, ecr) = r.options.timestamps.expect("timestamps negotiated");
    r.options.timestamps = Some((tsval, ecr));
    let mut out = vec![0; r.header_len() + payload.len()];
    let hl = r.emit(&mut out).unwrap();
    out[hl..].copy_from_slice(payload);
    out
}

/// RFC 7323 §5.5: after an idle longer than 2^31 ms (24.9 days; here
/// 30), the peer's TSval looks older than TS.Recent. The 24-day rule lets
/// its segment past PAWS, and that segment refreshes TS.Recent (as Linux's
/// `tcp_paws_check` with `TCP_PAWS_24DAYS`): the ACK echoes its TSval,
/// and PAWS guards the connection again at once. Kept, the old TS.Recent
/// would be echoed, and PAWS be off, for up to 24.9 days more.
#[test]
fn a_segment_after_a_long_idle_refreshes_ts_recent() {
    let mut sim = Sim::symmetric(14, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.a.send(a, b"before").unwrap();
    sim.run_for(Duration::from_secs(1));
    assert_eq!(read_all(&mut sim.b, b), b"before");
    sim.now += Duration::from_secs(30 * 24 * 3600);
    sim.tap = Some(Vec::new());
    sim.a.send(a, b"after").unwrap();
    sim.run_for(Duration::from_secs(1));
    assert_eq!(read_all(&mut sim.b, b), b"after");
    let tap = sim.tap.take().unwrap();
    let after = tap
        .iter()
        .find(|(to, s)| *to == Side::B && TcpRepr::parse_segment(s).unwrap().1 == b"after")
        .unwrap()
        .1
        .clone();
    let (seg, _) = TcpRepr::parse_segment(&after).unwrap();
    let (tsval, _) = seg.options.timestamps.unwrap();
    // B's ACK of it echoes its TSval, not the one from before the idle.
    let ack = tap
        .iter()
        .map(|(to, s)| (*to, TcpRepr::parse_segment(s).unwrap().0))
        .rfind(|(to, r)| *to == Side::A && r.ack == seg.seq.wrapping_add(5))
        .expect("B's ACK")
        .1;
    assert_eq!(ack.options.timestamps.map(|(_, ecr)| ecr), Some(tsval));
    // PAWS is on again: the same segment with a TSval a second older
    // is dropped by it.
    let before = sim.b.stats().paws_rejected;
    sim.inject(
        Side::B,
        A_IP,
        B_IP,
        &with_tsval(&after, tsval.wrapping_sub(1000)),
    );
    sim.run_for(Duration::from_millis(10));
    assert_eq!(sim.b.stats().paws_rejected, before + 1);
    // And the connection goes on both ways.
    sim.b.send(b, b"reply").unwrap();
    sim.run_for(Duration::from_secs(1));
    assert_eq!(read_all(&mut sim.a, a), b"reply");
}

/// RTT samples from timestamp echoes (RFC 7323 §4) go on past 24.9 days
/// (2^31 ms) without a timeout: the floor that keeps echoes of copies sent
/// before the last timeout out (set at the connection's creation here)
/// would otherwise compare as after every echo (RFC 7323 §5.2's modular
/// comparison), and the estimate fall back to one timed segment a round
/// trip, too few to follow a path whose delay changed. A connection that
/// exchanges a little every 12 hours for 26 days, then one window of data
/// over a path ten times as long: SRTT follows it.
#[test]
fn rtt_samples_from_echoes_go_on_past_24_days() {
    let link = LinkConfig {
        bandwidth_bps: 20_000_000,
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(15, link);
    let (a, b) = sim.establish();
    // Two full-sized segments at a time: each acknowledged at once.
    let pair = 2 * usize::from(sim.a.info(a).unwrap().mss);
    let start = sim.now;
    while sim.now < start + Duration::from_secs(26 * 24 * 3600) {
        sim.a.send(a, &vec![3; pair]).unwrap();
        sim.run_for(Duration::from_secs(1));
        assert_eq!(read_all(&mut sim.b, b).len(), pair);
        sim.now += Duration::from_secs(12 * 3600);
    }
    let srtt = sim.a.info(a).unwrap().srtt.unwrap();
    assert!(srtt < Duration::from_millis(15), "{srtt:?}");
    // 150 ms: longer than ten times the old, shorter than the RTO (200
    // ms at least past SRTT), so that no timeout moves the floor.
    for side in [Side::A, Side::B] {
        sim.link_mut(side).delay = Duration::from_millis(75);
    }
    let rtos = sim.a.stats().rto_timeouts;
    sim.a.send(a, &vec![4; 14 * pair]).unwrap();
    let mut got = 0;
    run_until(&mut sim, Duration::from_secs(5), |s| {
        got += read_all(&mut s.b, b).len();
        got == 14 * pair && s.a.info(a).unwrap().unacked == 0
    });
    assert_eq!(sim.a.stats().rto_timeouts, rtos);
    let srtt = sim.a.info(a).unwrap().srtt.unwrap();
    assert!(
        srtt > Duration::from_millis(110),
        "SRTT {srtt:?} on a 150 ms path"
    );
}

/// An orphan (closed by its application, data still queued) whose peer
/// asked for data and never reads, answering every probe with a zero
/// window (sockstress): it is probed `Config::orphan_retries` times and
/// then reset, where a live connection in the same state is kept (above,
/// RFC 1122 §4.2.2.17; RFC 6429 lets a sender end an orphan).
#[test]
fn an_orphan_in_the_persist_condition_is_reset_after_its_probes() {
    let (mut sim, a, b) = small_receiver();
    assert_eq!(sim.a.send(a, &vec![5; 20_000]).unwrap(), 20_000);
    sim.run_for(Duration::from_secs(10));
    // A (the server) gives up on its client and closes; B never reads.
    sim.a.close(a).unwrap();
    assert_eq!(sim.a.state(a), Ok(State::FinWait1));
    run_until(&mut sim, Duration::from_secs(3600), |s| {
        s.a.connection_count() == 0
    });
    // About 7 minutes: the retransmission timer's backoff, 8 times.
    assert!(sim.now < Instant::from_millis(600_000), "{:?}", sim.now);
    sim.run_for(Duration::from_secs(1));
    let s = *sim.a.stats();
    assert_eq!(s.resets_timed_out, 1, "{s:?}");
    let closed = events(&mut sim.b);
    assert!(
        closed
            .iter()
            .any(|e| matches!(e, Event::Closed { conn, reason: CloseReason::Reset } if *conn == b)),
        "B heard the reset: {closed:?}"
    );
}

/// `want_writable` asks for `Writable` without queueing bytes: at once while
/// there is send space, after the ACK that frees space once the buffer is
/// full; refused after `shutdown_write`.
#[test]
fn want_writable_without_sending() {
    let mut sim = Sim::symmetric(21, LinkConfig::default());
    let (a, _b) = sim.establish();
    events(&mut sim.a);
    sim.a.want_writable(a).unwrap();
    assert_eq!(events(&mut sim.a), vec![Event::Writable(a)]);
    // Fill the send buffer; B does not read, so its window closes too.
    let chunk = vec![7u8; 16 * 1024];
    while sim.a.send(a, &chunk).is_ok() {}
    assert_eq!(sim.a.send_space(a), Ok(0));
    let queued = sim.b.stats().bytes_in;
    events(&mut sim.a);
    sim.a.want_writable(a).unwrap();
    assert!(events(&mut sim.a).is_empty(), "no space yet: no event");
    run_until(&mut sim, Duration::from_secs(5), |s| {
        s.a.poll_event() == Some(Event::Writable(a))
    });
    assert!(sim.b.stats().bytes_in > queued, "space freed by an ACK");
    sim.a.shutdown_write(a).unwrap();
    assert_eq!(sim.a.want_writable(a), Err(Error::InvalidState));
}

/// A writer kept waiting is woken once the free space is at least half of
/// what is still queued (a third of a full buffer; Linux's
/// `sk_stream_is_writeable`), not by the first ACK that frees a segment or
/// two: a bulk writer then queues a block per wake-up.
#[test]
fn a_waiting_writer_is_woken_once_a_third_of_the_buffer_is_free() {
    let mut sim = Sim::symmetric(22, LinkConfig::default());
    let (a, b) = sim.establish();
    let chunk = vec![7u8; 16 * 1024];
    while sim.a.send(a, &chunk).is_ok() {}
    assert_eq!(sim.a.send_space(a), Ok(0));
    events(&mut sim.a);
    // (free, queued) when the event came, and how often space freed before.
    let mut woken = None;
    let mut freed_before = 0;
    run_until(&mut sim, Duration::from_secs(10), |s| {
        read_all(&mut s.b, b);
        let free = s.a.send_space(a).unwrap();
        let info = s.a.info(a).unwrap();
        while let Some(e) = s.a.poll_event() {
            if e == Event::Writable(a) {
                woken = Some((free, info.unsent + info.unacked));
            }
        }
        freed_before += usize::from(woken.is_none() && free > 0);
        woken.is_some()
    });
    let (free, queued) = woken.unwrap();
    assert!(
        free >= queued / 2,
        "woken with {free} B free, {queued} B queued"
    );
    assert!(freed_before > 0, "ACKs freed space before the wake-up");
}

/// RFC 6298 §5.7: when the SYN had to be sent again and the handshake
/// gave no RTT sample (no timestamps: Karn's rule discards it), the first
/// data segment is retransmitted after 3 s, not after the handshake's
/// backed-off 2 s.
#[test]
fn a_lost_syn_starts_data_with_a_three_second_rto() {
    let mut cfg = sim::test_config(1);
    cfg.timestamps = false;
    let mut sim = Sim::new(
        7,
        LinkConfig::default(),
        LinkConfig::default(),
        cfg,
        sim::test_config(2),
    );
    sim.link_up = false;
    sim.b.listen(b_addr(80)).unwrap();
    let a = sim.a.connect(sim.now, a_addr(10_000), b_addr(80)).unwrap();
    sim.run_for(Duration::from_millis(500));
    sim.link_up = true;
    run_until(&mut sim, Duration::from_secs(5), |s| {
        events(&mut s.a).contains(&Event::Connected(a))
    });
    assert_eq!(sim.a.stats().rto_timeouts, 1, "the SYN went twice");
    sim.link_up = false;
    sim.a.send(a, b"lost").unwrap();
    sim.flush();
    let sent = sim.now;
    run_until(&mut sim, Duration::from_secs(10), |s| {
        s.a.stats().rto_timeouts == 2
    });
    let rto = sim.now - sent;
    assert!(
        rto >= Duration::from_secs(3) && rto <= Duration::from_millis(3_002),
        "{rto:?}"
    );
}

/// Data for a connection its application closed has no reader: the
/// stack resets it (RFC 2525 §2.17) and names why.
#[test]
fn data_after_the_application_closed_draws_a_named_reset() {
    let mut sim = Sim::symmetric(8, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.b.close(b).unwrap();
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.a.state(a), Ok(State::CloseWait), "B's FIN arrived");
    sim.a.send(a, b"nobody reads this").unwrap();
    run_until(&mut sim, Duration::from_secs(1), |s| s.a.state(a).is_err());
    assert!(events(&mut sim.a).contains(&Event::Closed {
        conn: a,
        reason: CloseReason::Reset
    }));
    let s = sim.b.stats();
    assert_eq!((s.resets_out, s.resets_data_after_close), (1, 1), "{s:?}");
}

/// B's peer sends more than B reads, then its FIN; B shuts down its
/// writing half before reading it all and A acknowledges B's FIN: the
/// exchange is over (RFC 9293 would delete the TCB) but the bytes B has not
/// read stay readable, as a kernel socket's do, and the connection goes
/// (Closed, Normal) once they are read. No RST reaches A: it is done.
#[test]
fn bytes_unread_at_the_end_of_last_ack_stay_readable() {
    let mut sim = Sim::symmetric(4, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.tap = Some(Vec::new());
    let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(sim.a.send(a, &data).unwrap(), data.len());
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.b.state(b), Ok(State::CloseWait));
    let mut got = vec![0; 1000];
    assert_eq!(sim.b.recv(b, &mut got), Ok(1000));
    sim.b.shutdown_write(b).unwrap();
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.b.state(b), Ok(State::LastAck), "held for its bytes");
    let info = sim.b.info(b).unwrap();
    assert_eq!(info.unacked, 0, "{info:?}");
    assert!(!events(&mut sim.b)
        .iter()
        .any(|e| matches!(e, Event::Closed { .. })));
    // A minute later (no timer runs, nothing is sent) the bytes are there.
    let tapped = sim.tapped_to(Side::A).len();
    sim.run_for(Duration::from_secs(60));
    assert_eq!(sim.tapped_to(Side::A).len(), tapped);
    got.truncate(1000);
    got.extend(read_all(&mut sim.b, b));
    assert_eq!(got, data);
    assert_eq!(sim.b.state(b), Err(Error::InvalidHandle));
    assert!(events(&mut sim.b).contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Normal
    }));
}

/// The same held connection closed by the application before it read
/// everything: it goes at once (Aborted, as any close with unread bytes)
/// and sends nothing.
#[test]
fn closing_a_connection_held_for_unread_bytes_sends_no_reset() {
    let mut sim = Sim::symmetric(5, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.tap = Some(Vec::new());
    assert_eq!(sim.a.send(a, &[9; 5000]).unwrap(), 5000);
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(200));
    sim.b.shutdown_write(b).unwrap();
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.b.state(b), Ok(State::LastAck));
    let tapped = sim.tapped_to(Side::A).len();
    sim.b.close(b).unwrap();
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.b.state(b), Err(Error::InvalidHandle));
    assert!(events(&mut sim.b).contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Aborted
    }));
    assert_eq!(sim.tapped_to(Side::A).len(), tapped, "nothing sent");
}

/// The active closer's side: B shuts down first, A sends and closes; B,
/// not reading, goes through TIME-WAIT, whose end keeps the bytes B has
/// not read, as LAST-ACK's does.
#[test]
fn bytes_unread_at_the_end_of_time_wait_stay_readable() {
    let mut sim = Sim::symmetric(6, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.b.shutdown_write(b).unwrap();
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.a.send(a, &[3; 7000]).unwrap(), 7000);
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.b.state(b), Ok(State::TimeWait));
    sim.run_for(Duration::from_secs(120));
    assert_eq!(sim.b.state(b), Ok(State::TimeWait), "held for its bytes");
    assert!(!events(&mut sim.b)
        .iter()
        .any(|e| matches!(e, Event::Closed { .. })));
    assert_eq!(read_all(&mut sim.b, b), vec![3; 7000]);
    assert_eq!(sim.b.state(b), Err(Error::InvalidHandle));
    assert!(events(&mut sim.b).contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Normal
    }));
}

/// An out-of-order segment whose first byte is inside B's window and the
/// rest beyond it, with a FIN: RFC 9293 §3.10.7.4 trims what lies outside
/// the window, FIN included. B keeps (and SACKs) nothing past its right
/// edge, and records no FIN there.
#[test]
fn an_out_of_order_segment_is_trimmed_at_the_right_edge() {
    use flowlane_wire::tcp::{TcpFlags, TcpOptions};
    let mut b_cfg = sim::test_config(2);
    b_cfg.recv_buffer = 4096;
    let mut sim = Sim::new(
        6,
        LinkConfig::default(),
        LinkConfig::default(),
        sim::test_config(1),
        b_cfg,
    );
    sim.tap = Some(Vec::new());
    let (a, _b) = sim.establish();
    // B's window scale, from its SYN-ACK.
    let wscale = sim
        .tapped_to(Side::A)
        .iter()
        .find(|r| r.flags.syn())
        .and_then(|r| r.options.window_scale)
        .unwrap_or(0);
    // B holds 2 000 unread bytes: its window is what is left of 4 096.
    sim.a.send(a, &[7u8; 2000]).unwrap();
    sim.run_for(Duration::from_millis(100));
    let to_a = sim.tapped_to(Side::A);
    let last_ack = to_a.last().expect("B acknowledged");
    let to_b = sim.tapped_to(Side::B);
    let last_data = to_b.last().expect("A sent");
    let edge = last_ack
        .ack
        .wrapping_add(u32::from(last_ack.window) << wscale);
    let (tsval, _) = last_data.options.timestamps.expect("timestamps");
    let (b_tsval, _) = last_ack.options.timestamps.expect("timestamps");
    let seg = TcpRepr {
        src_port: last_data.src_port,
        dst_port: last_data.dst_port,
        seq: edge.wrapping_sub(10),
        ack: last_data.ack,
        flags: TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN,
        window: last_data.window,
        urgent: 0,
        options: TcpOptions {
            timestamps: Some((tsval.wrapping_add(1), b_tsval)),
            ..Default::default()
        },
    };
    let mut bytes = vec![0u8; 60 + 1000];
    let hl = seg.emit(&mut bytes).unwrap();
    bytes.truncate(hl);
    bytes.extend_from_slice(&[9u8; 1000]);
    sim.tap = Some(Vec::new());
    sim.inject(Side::B, A_IP, B_IP, &bytes);
    sim.run_for(Duration::from_millis(5));
    let acks = sim.tapped_to(Side::A);
    let sacked_end = acks
        .iter()
        .flat_map(|r| r.options.sack_blocks[..usize::from(r.options.sack_block_count)].to_vec())
        .map(|(_, r)| r)
        .max_by_key(|&r| r.wrapping_sub(edge) as i32);
    let end = sacked_end.expect("the in-window part was SACKed");
    assert!(
        (end.wrapping_sub(edge) as i32) <= 0,
        "SACKed up to {} bytes past the window's right edge",
        end.wrapping_sub(edge) as i32
    );
}

/// `recv` with an empty buffer: `Ok(0)` is the end of the stream only
/// (`Net::recv`'s contract on every backend); with bytes waiting it is
/// `WouldBlock`, and the bytes stay.
#[test]
fn an_empty_read_is_end_of_stream_only_at_the_end() {
    let mut sim = Sim::symmetric(41, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.a.send(a, b"waiting").unwrap();
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.b.recv(b, &mut []), Err(Error::WouldBlock));
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(50));
    assert_eq!(
        sim.b.recv(b, &mut []),
        Err(Error::WouldBlock),
        "bytes unread"
    );
    assert_eq!(read_all(&mut sim.b, b), b"waiting");
    assert_eq!(sim.b.recv(b, &mut []), Ok(0), "the end");
}

/// RFC 5681 §4.2: an ACK for at least every second full-sized segment, the
/// full size being the peer's current one: after a "packet too big" A's
/// segments shrink, and B acknowledges every second of the smaller ones
/// (it went on waiting for two of the old size, every third segment).
#[test]
fn delayed_ack_follows_the_peers_segments_when_they_shrink() {
    let mut sim = Sim::symmetric(9, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.a.set_nodelay(a, true).unwrap();
    let flight = |sim: &mut Sim, bytes: usize| {
        let mut buf = [0u8; 1500];
        sim.a.send(a, &vec![b'f'; bytes]).unwrap();
        let now = sim.now;
        let mut segs = Vec::new();
        while let Some(t) = sim.a.poll_transmit(now, &mut buf) {
            segs.push(buf[..t.len].to_vec());
        }
        // B's answer to each segment in turn: whether it acknowledged.
        let acks: Vec<bool> = segs
            .iter()
            .map(|s| {
                sim.b.handle_segment(now, A_IP, B_IP, s);
                let mut ack = [0u8; 1500];
                let mut any = false;
                while let Some(t) = sim.b.poll_transmit(now, &mut ack) {
                    any = true;
                    sim.a.handle_segment(now, B_IP, A_IP, &ack[..t.len]);
                }
                any
            })
            .collect();
        sim.run_for(Duration::from_millis(100));
        assert_eq!(read_all(&mut sim.b, b).len(), bytes);
        acks
    };
    assert_eq!(flight(&mut sim, 2 * 1448), [false, true]);
    // A segment of the old size meets a 1280-byte link: the router's
    // message lowers A's MSS, and A sends those bytes again, smaller.
    sim.a.send(a, &[b'g'; 1448]).unwrap();
    let now = sim.now;
    let mut buf = [0u8; 1500];
    let t = sim.a.poll_transmit(now, &mut buf).expect("the segment");
    let (lost, _) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
    let four = sim.a.four_tuple(a).unwrap();
    let told = sim
        .a
        .handle_too_big(now, four.local, four.remote, lost.seq, 1280);
    assert_eq!(told, flowlane_tcp::Delivery::Taken);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(read_all(&mut sim.b, b), vec![b'g'; 1448]);
    // 1228-byte segments now (1280 - 40 - 12): every second acknowledged.
    assert_eq!(flight(&mut sim, 4 * 1228), [false, true, false, true]);
}

/// A SYN the data path could not put on the wire (no link-layer address
/// for the peer yet) is sent again at once when asked (`resend_syn`), not
/// a retransmission timeout later; counted as a retransmission, with the
/// timer's backoff unchanged. Refused in any other state.
#[test]
fn a_syn_that_never_left_is_resent_at_once_when_asked() {
    let mut a = Stack::new(sim::test_config(1));
    let now = Instant::from_millis(1);
    let conn = a.connect(now, a_addr(40_000), b_addr(80)).unwrap();
    let mut buf = [0u8; 1500];
    let first = a.poll_transmit(now, &mut buf).expect("the SYN");
    let syn = TcpRepr::parse_segment(&buf[..first.len]).unwrap().0;
    assert!(syn.flags.syn() && !syn.flags.ack());
    assert!(a.poll_transmit(now, &mut buf).is_none(), "nothing more yet");
    // The data path dropped it; the address resolves 2 ms later.
    let later = Instant::from_millis(3);
    assert_eq!(a.resend_syn(conn), Ok(()));
    let again = a.poll_transmit(later, &mut buf).expect("the SYN again");
    let resent = TcpRepr::parse_segment(&buf[..again.len]).unwrap().0;
    assert!(resent.flags.syn() && resent.seq == syn.seq);
    assert_eq!(a.stats().retransmits, 1);
    assert!(a.poll_transmit(later, &mut buf).is_none());
    // The retransmission timeout still comes a second after the first SYN.
    let rto = a.poll_timeout().expect("armed");
    assert!(rto <= Instant::from_millis(1_003), "{rto:?}");
    assert_eq!(
        a.resend_syn(ConnHandle::from_parts(7, 7)),
        Err(Error::InvalidHandle)
    );
}

/// What `a` sends now, parsed.
fn sent_now(a: &mut Stack, now: Instant) -> Vec<(TcpRepr, usize)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    while let Some(t) = a.poll_transmit(now, &mut buf) {
        let (repr, payload) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
        out.push((repr, payload.len()));
    }
    out
}

/// Feeds `a` (port 10 000 at `a_ip`) a SYN-ACK from port 80 at `b_ip`
/// acknowledging `ack`, with `options`.
fn syn_ack_to(
    a: &mut Stack,
    now: Instant,
    (b_ip, a_ip): (IpAddr, IpAddr),
    ack: u32,
    options: TcpOptions,
) {
    let repr = TcpRepr {
        src_port: 80,
        dst_port: 10_000,
        seq: 77_000,
        ack,
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: 65_535,
        urgent: 0,
        options,
    };
    let mut bytes = vec![0u8; 60];
    let n = repr.emit(&mut bytes).unwrap();
    a.handle_segment(now, b_ip, a_ip, &bytes[..n]);
}

/// RFC 9293 §3.10.7.3: in SYN-SENT, a SYN-ACK whose ACK is not our SYN's
/// (a peer holding an old connection on the 4-tuple: its SYN-ACK, or RFC
/// 5961 §4's challenge ACK) draws RST <SEQ=SEG.ACK>; the SYN then goes
/// again at once, as Linux sends it, not a whole RTO (1 s) later: the RST
/// ended the old connection there. Once per open: a second such segment
/// draws the RST alone.
#[test]
fn an_unacceptable_ack_in_syn_sent_draws_the_reset_then_the_syn_again() {
    let mut a = Stack::new(sim::test_config(1));
    let now = Instant::from_millis(1_000);
    let conn = a.connect(now, a_addr(10_000), b_addr(80)).unwrap();
    let syn = sent_now(&mut a, now).pop().expect("SYN").0;
    let wrong = syn.seq.wrapping_add(1000);
    let mss = TcpOptions {
        mss: Some(1460),
        ..TcpOptions::default()
    };
    let flags = |segs: Vec<(TcpRepr, usize)>| {
        segs.iter()
            .map(|(s, _)| (s.flags.rst(), s.flags.syn(), s.seq))
            .collect::<Vec<_>>()
    };
    syn_ack_to(&mut a, now, (B_IP, A_IP), wrong, mss);
    assert_eq!(
        flags(sent_now(&mut a, now)),
        [(true, false, wrong), (false, true, syn.seq)],
        "the reset, then the SYN at once"
    );
    syn_ack_to(&mut a, now, (B_IP, A_IP), wrong, mss);
    assert_eq!(
        flags(sent_now(&mut a, now)),
        [(true, false, wrong)],
        "once per open"
    );
    assert_eq!(a.state(conn), Ok(State::SynSent));
    syn_ack_to(&mut a, now, (B_IP, A_IP), syn.seq.wrapping_add(1), mss);
    assert_eq!(a.state(conn), Ok(State::Established));
}

/// RFC 9293 §3.7.1 (MUST-15): a peer that announces no MSS (or 0) is sent
/// segments of 1220 bytes over IPv6 (1280 - 60), 536 over IPv4; over IPv6
/// they were 536 too (conformance run, active_synack_mss_zero: Linux 1208
/// with timestamps, flowlane 524).
#[test]
fn the_default_mss_over_ipv6_is_1220() {
    let (a6, b6): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
    for (mss, want) in [(None, 1220), (Some(0), 1220)] {
        let mut a = Stack::new(sim::test_config(1));
        let now = Instant::from_millis(1_000);
        let conn = a
            .connect(now, SocketAddr::new(a6, 10_000), SocketAddr::new(b6, 80))
            .unwrap();
        let syn = sent_now(&mut a, now).pop().expect("SYN").0;
        let options = TcpOptions {
            mss,
            ..TcpOptions::default()
        };
        syn_ack_to(&mut a, now, (b6, a6), syn.seq.wrapping_add(1), options);
        assert_eq!(a.state(conn), Ok(State::Established));
        a.send(conn, &[5u8; 3_000]).unwrap();
        let sizes: Vec<usize> = sent_now(&mut a, now)
            .iter()
            .map(|&(_, n)| n)
            .filter(|&n| n > 0)
            .collect();
        assert_eq!(
            sizes.iter().max(),
            Some(&want),
            "MSS option {mss:?}: {sizes:?}"
        );
    }
}
