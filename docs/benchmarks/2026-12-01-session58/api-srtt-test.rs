// Append to tcp/tests/conn_info.rs: fails on main (Some(0ns)); passes with 6a8b5a8 (reverted in 2806611, see the session note).
/// A round trip under the timestamp clock's millisecond (a LAN, a veth:
/// 25-35 µs on the test bed, as the kernel's sockets report it) reads as
/// itself in `info` (or not at all before a timed segment's ACK), after
/// bursts whose ACKs, several a round trip, each echo a TSval 0 or 1 ms old: the timed segment's
/// samples, exact to the clock, not the echoes' (as Linux's
/// `tcp_ack_update_rtt`).
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
