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
