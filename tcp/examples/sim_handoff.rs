//! The stack's share of moving an RSS bucket of idle connections from one
//! core's stack to another's (issue 13's handoff): B accepts `N`
//! connections from A in the deterministic simulator, all in one bucket;
//! the bucket then goes back and forth between B and a second stack
//! `MOVES` times, each move an [`Stack::export_bucket`] on the stack that
//! holds it and an [`Stack::import_bucket`] on the other. Made to be run
//! under callgrind, each half collected on its own:
//!
//! ```text
//! cargo build --release -p flowlane-tcp --example sim_handoff
//! valgrind --tool=callgrind --toggle-collect='*measured_export*' \
//!     target/release/examples/sim_handoff 100 50
//! valgrind --tool=callgrind --toggle-collect='*measured_import*' \
//!     target/release/examples/sim_handoff 100 50
//! ```
//!
//! Arguments: connections (default 100), moves (default 50). Prints the
//! connections and moves, so that instructions per connection moved are
//! the collected total divided by their product. The connections are idle
//! established ones (nothing unread, nothing unacknowledged): the case of
//! the issue's handoff goal.

#[path = "../tests/sim/mod.rs"]
mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::time::Instant;
use flowlane_tcp::{BucketExport, ConnHandle, Event, Stack};
use sim::{LinkConfig, Sim, B_IP};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Client address `i`: 40 000 ports on each of as many addresses as needed.
fn client(i: usize) -> SocketAddr {
    let host = (i / 40_000) as u32;
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 1)) + host);
    SocketAddr::new(IpAddr::V4(ip), 20_000 + (i % 40_000) as u16)
}

#[inline(never)]
fn measured_export(s: &mut Stack) -> BucketExport {
    s.export_bucket(0)
}

#[inline(never)]
fn measured_import(s: &mut Stack, now: Instant, export: BucketExport) -> usize {
    s.import_bucket(now, export)
        .into_iter()
        .filter(Result::is_ok)
        .count()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let conns: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let moves: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(50);
    let link = LinkConfig {
        delay: Duration::from_micros(50),
        bandwidth_bps: 100_000_000_000,
        ..LinkConfig::default()
    };
    let server = || {
        let mut s = Stack::new(sim::test_config(2));
        s.set_buckets(1, |_| 0).expect("a fresh stack");
        s
    };
    let mut sim = Sim::new(7, link, link, sim::test_config(1), sim::test_config(2));
    sim.b = server();
    let listen = SocketAddr::new(B_IP, 80);
    sim.b.listen(listen).expect("listen on B:80");
    for i in 0..conns {
        sim.a.connect(sim.now, client(i), listen).expect("connect");
    }
    let mut accepted = 0;
    let limit = sim.now + Duration::from_secs(10);
    let ok = sim.run_until(limit, |s| {
        while s.a.poll_event().is_some() {}
        while let Some(e) = s.b.poll_event() {
            accepted += usize::from(matches!(e, Event::Accepted { .. }));
        }
        accepted == conns
    });
    assert!(ok, "only {accepted} of {conns} connections were accepted");
    // Let delayed ACKs and the like go out: the connections are idle.
    sim.run_for(Duration::from_millis(500));

    let mut other = server();
    other.listen(listen).expect("listen on the second stack");
    let mut handles: Vec<ConnHandle> = Vec::new();
    for _ in 0..moves {
        let now = sim.now;
        let export = measured_export(&mut sim.b);
        assert_eq!(export.connections().len(), conns, "the whole bucket");
        handles.clear();
        handles.extend(export.connections().iter().map(|c| c.0));
        let imported = measured_import(&mut other, now, export);
        assert_eq!(imported, conns, "every connection imported");
        while other.poll_event().is_some() {}
        std::mem::swap(&mut sim.b, &mut other);
    }
    assert_eq!(sim.b.connection_count(), conns);
    assert_eq!(other.connection_count(), 0);
    println!("connections {conns}");
    println!("moves {moves}");
}
