//! `Stack::info`: a connection's queues, round-trip time, window and
//! retransmissions, read over the simulated link.

mod sim;

use flowlane_tcp::time::Duration;
use sim::{LinkConfig, Sim};

#[test]
fn info_tells_the_queues_the_round_trip_time_and_the_window() {
    let mut sim = Sim::symmetric(11, LinkConfig::default());
    let (a, b) = sim.establish();
    let data = vec![7u8; 30_000];
    let n = sim.a.send(a, &data).unwrap();
    assert_eq!(n, data.len());
    // Queued, nothing sent yet.
    let i = sim.a.info(a).unwrap();
    assert_eq!((i.unsent, i.unacked), (n, 0), "{i:?}");
    assert!(i.mss > 0 && i.cwnd >= usize::from(i.mss), "{i:?}");
    // Half a round trip later: the initial window in flight, none
    // acknowledged, the rest waiting.
    sim.run_for(Duration::from_millis(2));
    let i = sim.a.info(a).unwrap();
    assert_eq!(i.unacked, i.cwnd.min(n), "{i:?}");
    assert_eq!(i.unsent, n - i.unacked, "{i:?}");
    // Once B acknowledged (its delayed ACK included): readable there (it read
    // nothing).
    sim.run_for(Duration::from_millis(200));
    let i = sim.a.info(a).unwrap();
    assert_eq!((i.unsent, i.unacked), (0, 0), "{i:?}");
    let ib = sim.b.info(b).unwrap();
    assert_eq!(ib.readable, n, "{ib:?}");
    // The link's round trip is 10 ms.
    let srtt = i.srtt.expect("sampled");
    assert!(
        srtt >= Duration::from_millis(9) && srtt <= Duration::from_millis(20),
        "{srtt:?}"
    );
    assert_eq!(i.retransmits, 0);
    let mut buf = vec![0; 64 << 10];
    assert_eq!(sim.b.recv(b, &mut buf).unwrap(), n);
    assert_eq!(sim.b.info(b).unwrap().readable, 0);
}

#[test]
fn info_counts_the_connection_s_retransmissions() {
    let link = LinkConfig {
        loss: 0.1,
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(12, link);
    let (a, b) = sim.establish();
    let before = sim.a.stats().retransmits;
    let data = vec![3u8; 300_000];
    let (mut sent, mut got) = (0, 0);
    let mut buf = vec![0; 64 << 10];
    let done = sim.run_until(sim.now + Duration::from_secs(60), |s| {
        if sent < data.len() {
            sent += s.a.send(a, &data[sent..]).unwrap_or(0);
        }
        while let Ok(k) = s.b.recv(b, &mut buf) {
            if k == 0 {
                break;
            }
            got += k;
        }
        got == data.len()
    });
    assert!(done, "{got} of {} bytes", data.len());
    let i = sim.a.info(a).unwrap();
    // One connection: the stack's count since it opened is the
    // connection's.
    let stack = sim.a.stats().retransmits - before;
    assert!(i.retransmits > 0, "{i:?}");
    assert_eq!(u64::from(i.retransmits), stack, "{i:?}");
}

/// Takes `stack`'s events up to and including `conn`'s `Closed`, and
/// returns its reason and what `info` answers right after it (while the
/// application would handle it).
fn info_at_close(
    stack: &mut flowlane_tcp::Stack,
    conn: flowlane_tcp::ConnHandle,
) -> (
    flowlane_tcp::CloseReason,
    Result<flowlane_tcp::ConnInfo, flowlane_tcp::Error>,
) {
    while let Some(e) = stack.poll_event() {
        if let flowlane_tcp::Event::Closed { conn: c, reason } = e {
            if c == conn {
                return (reason, stack.info(conn));
            }
        }
    }
    panic!("no Closed for {conn:?}");
}

/// A connection's final figures are readable while its `Closed` is
/// handled (until the next `poll_event`), as Linux answers `TCP_INFO` on a
/// closed socket: for one the peer reset with bytes still unread, and for
/// one the application aborted (its queues as they were).
#[test]
fn info_tells_the_final_figures_while_the_closed_is_handled() {
    let mut sim = Sim::symmetric(13, LinkConfig::default());
    let (a, b) = sim.establish();
    // B sends 1 000 bytes; A reads 600 of them and sends 5 000, all read
    // and acknowledged.
    assert_eq!(sim.b.send(b, &[1u8; 1000]).unwrap(), 1000);
    sim.run_for(Duration::from_millis(50));
    let mut buf = [0u8; 600];
    assert_eq!(sim.a.recv(a, &mut buf).unwrap(), 600);
    assert_eq!(sim.a.send(a, &[2u8; 5000]).unwrap(), 5000);
    sim.run_for(Duration::from_millis(300));
    assert_eq!(sim::read_all(&mut sim.b, b).len(), 5000);
    let before = sim.a.info(a).unwrap();
    assert_eq!(
        (before.readable, before.unsent, before.unacked),
        (400, 0, 0)
    );
    // B resets: A's figures at its Closed are those it had.
    sim.b.abort(b).unwrap();
    sim.run_for(Duration::from_millis(50));
    let (reason, told) = info_at_close(&mut sim.a, a);
    assert_eq!(reason, flowlane_tcp::CloseReason::Reset);
    assert_eq!(told, Ok(before), "the figures at the reset");
    // Until the next poll_event only.
    assert_eq!(sim.a.poll_event(), None);
    assert_eq!(sim.a.info(a), Err(flowlane_tcp::Error::InvalidHandle));

    // A connection the application aborts with 30 000 bytes queued: gone
    // at once (`InvalidHandle` before its Closed is taken), its queues as
    // they were at the abort while its Closed is handled.
    let (a, _b) = sim.establish_between(
        "10.0.0.1:10001".parse().unwrap(),
        "10.0.0.2:81".parse().unwrap(),
    );
    assert_eq!(sim.a.send(a, &vec![3u8; 30_000]).unwrap(), 30_000);
    let queued = sim.a.info(a).unwrap();
    assert_eq!(queued.unsent + queued.unacked, 30_000, "{queued:?}");
    sim.a.abort(a).unwrap();
    assert_eq!(sim.a.info(a), Err(flowlane_tcp::Error::InvalidHandle));
    let (reason, told) = info_at_close(&mut sim.a, a);
    assert_eq!(reason, flowlane_tcp::CloseReason::Aborted);
    assert_eq!(told, Ok(queued));
}

/// A round trip under the timestamp clock's millisecond (a LAN, a veth:
/// 25-35 µs on the test bed, as the kernel's sockets report it) reads as
/// itself in `info`, at both ends: from the handshake on, the SYN and the
/// SYN-ACK timed like any segment (RFC 6298 §3; Linux's
/// `tcp_synack_rtt_meas` and the SYN's send time), where the handshake's
/// echo says 0 ms; then the sender's, after bursts whose ACKs, several a
/// round trip, each echo a TSval 0 or 1 ms old, from its timed segments,
/// exact to the clock, not from the echoes (Linux's `tcp_ack_update_rtt`
/// takes an echo only when no segment's send time measures the ACK); and
/// the receiver's, which sends no data to time, stays its handshake's.
#[test]
fn info_tells_a_sub_millisecond_round_trip_from_the_handshake_at_both_ends() {
    // A gigabit bottleneck spreads a burst's segments 12 µs apart, so that
    // the receiver acknowledges every second one.
    let link = LinkConfig {
        delay: Duration::from_micros(50),
        bandwidth_bps: 1_000_000_000,
        max_queue_delay: Duration::from_millis(10),
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(13, link);
    let (a, b) = sim.establish();
    let in_range =
        |srtt: Duration| srtt >= Duration::from_micros(90) && srtt < Duration::from_millis(1);
    for (side, srtt) in [("a", sim.a.info(a)), ("b", sim.b.info(b))] {
        let srtt = srtt.unwrap().srtt;
        assert!(
            srtt.is_some_and(in_range),
            "{side} after the handshake: {srtt:?}"
        );
    }
    // Fifty bursts of ten segments, a millisecond apart, all read.
    let burst = vec![3u8; 10 * 1448];
    let mut buf = vec![0u8; 65_536];
    let mut got = 0;
    for _ in 0..50 {
        assert_eq!(sim.a.send(a, &burst).unwrap(), burst.len());
        sim.run_for(Duration::from_millis(1));
        while let Ok(n) = sim.b.recv(b, &mut buf) {
            got += n;
        }
    }
    assert_eq!(got, 50 * burst.len());
    for (side, srtt) in [("a", sim.a.info(a)), ("b", sim.b.info(b))] {
        let srtt = srtt.unwrap().srtt;
        assert!(
            srtt.is_some_and(in_range),
            "{side} after the bursts: {srtt:?}"
        );
    }
}

/// A round trip under the timestamp clock's millisecond (a LAN, a veth:
/// 25-35 µs on the test bed, as the kernel's sockets report it) reads as
/// itself in `info` (or not at all before a timed segment's ACK), after
/// bursts whose ACKs, several a round trip, each echo a TSval 0 or 1 ms
/// old: the timed segment's samples, exact to the clock, not the echoes'
/// (as Linux's `tcp_ack_update_rtt`). Session 58's test, as written then.
#[test]
fn info_tells_a_sub_millisecond_round_trip() {
    // A gigabit bottleneck spreads a burst's segments 12 µs apart, so that
    // the receiver acknowledges every second one.
    let link = LinkConfig {
        delay: Duration::from_micros(50),
        bandwidth_bps: 1_000_000_000,
        max_queue_delay: Duration::from_millis(10),
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(13, link);
    let (a, b) = sim.establish();
    let in_range =
        |srtt: Duration| srtt >= Duration::from_micros(90) && srtt < Duration::from_millis(1);
    // The handshake's echo, 0 ms, is no sample: none yet, not 0.
    let srtt = sim.a.info(a).unwrap().srtt;
    assert!(srtt.is_none_or(in_range), "{srtt:?}");
    // Fifty bursts of ten segments, a millisecond apart, all read.
    let burst = vec![3u8; 10 * 1448];
    let mut buf = vec![0u8; 65_536];
    let mut got = 0;
    for _ in 0..50 {
        assert_eq!(sim.a.send(a, &burst).unwrap(), burst.len());
        sim.run_for(Duration::from_millis(1));
        while let Ok(n) = sim.b.recv(b, &mut buf) {
            got += n;
        }
    }
    assert_eq!(got, 50 * burst.len());
    let srtt = sim.a.info(a).unwrap().srtt.unwrap();
    assert!(in_range(srtt), "{srtt:?}");
}
