//! `Stack::output_pending`: the connections a batch of input touched, until
//! `poll_transmit` drains them (what the data path sizes its receive pass
//! by, one ACK per such connection at the pass's end).

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{ConnHandle, Stack};
use sim::{events, LinkConfig, Sim, A_IP, B_IP};
use std::net::SocketAddr;

fn drain(s: &mut Stack, now: flowlane_tcp::time::Instant) -> usize {
    let mut buf = vec![0u8; 2048];
    let mut n = 0;
    while s.poll_transmit(now, &mut buf).is_some() {
        n += 1;
    }
    n
}

#[test]
fn counts_the_connections_a_batch_touched_until_they_are_polled() {
    let mut sim = Sim::symmetric(77, LinkConfig::default());
    sim.b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let clients: Vec<ConnHandle> = (0..5)
        .map(|i| {
            let local = SocketAddr::new(A_IP, 20_000 + i);
            sim.a
                .connect(sim.now, local, SocketAddr::new(B_IP, 80))
                .unwrap()
        })
        .collect();
    sim.run_for(Duration::from_millis(100));
    events(&mut sim.b);
    drain(&mut sim.b, sim.now);
    assert_eq!(sim.b.output_pending(), 0);

    // Three of the five send; their segments reach B as one batch, B not
    // polled in between.
    for &h in &clients[..3] {
        sim.a.send(h, &[7; 3000]).unwrap();
    }
    let mut buf = vec![0u8; 2048];
    let mut batch = Vec::new();
    while let Some(t) = sim.a.poll_transmit(sim.now, &mut buf) {
        batch.push((t.src.ip(), t.dst.ip(), buf[..t.len].to_vec()));
    }
    assert!(
        batch.len() >= 6,
        "two full segments per sender: {}",
        batch.len()
    );
    for (src, dst, seg) in &batch {
        sim.b.handle_segment(sim.now, *src, *dst, seg);
    }
    assert_eq!(
        sim.b.output_pending(),
        3,
        "one entry per connection, not per segment"
    );
    events(&mut sim.b);
    assert_eq!(drain(&mut sim.b, sim.now), 3, "one ACK per connection");
    assert_eq!(sim.b.output_pending(), 0);
}
