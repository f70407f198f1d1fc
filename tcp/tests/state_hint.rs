//! `Stack::expect` (and `lookup_hint` with `expect_looked_up`): what a
//! prefetching caller is told about the next segment's connection.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{Event, Stack, StateHint};
use flowlane_wire::peek::Endpoints;
use sim::{Bulk, LinkConfig, Rng, Side, Sim, A_IP, B_IP};
use std::cell::RefCell;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

/// B's hint for a segment of its connection `conn` (from the peer's side).
fn hint(b: &mut Stack, conn: flowlane_tcp::ConnHandle) -> Option<StateHint> {
    let t = b.four_tuple(conn).unwrap();
    b.expect(&Endpoints::new(t.remote, t.local).unwrap())
}

fn first_line(h: Option<StateHint>) -> usize {
    h.expect("a hint").lines().next().unwrap() as usize
}

#[test]
fn names_each_connections_slot_but_not_the_last_flows() {
    let mut fresh = Stack::new(sim::test_config(2));
    let (peer, ours) = (SocketAddr::new(A_IP, 10000), SocketAddr::new(B_IP, 80));
    assert!(
        fresh.expect(&Endpoints::new(peer, ours).unwrap()).is_none(),
        "an empty table"
    );

    let mut sim = Sim::symmetric(7, LinkConfig::default());
    let (a1, b1) = sim.establish();
    let _a2 = sim
        .a
        .connect(sim.now, SocketAddr::new(A_IP, 10001), ours)
        .unwrap();
    let mut b2 = None;
    assert!(sim.run_until(sim.now + Duration::from_secs(5), |s| {
        while let Some(e) = s.b.poll_event() {
            if let Event::Accepted { conn, .. } = e {
                b2 = Some(conn);
            }
        }
        b2.is_some()
    }));
    let b2 = b2.unwrap();
    // The second handshake's ACK was B's last segment: its slot is hot.
    assert!(hint(&mut sim.b, b2).is_none());
    let h1 = hint(&mut sim.b, b1).expect("the other connection's slot");
    // The slot's own fields and the connection's hot part: at most 6
    // lines (`layout.rs` bounds it at 384 bytes, and a slot starts a
    // line), more than the 4 of a receiver's segment alone.
    let lines = h1.lines().count();
    assert!((5..=6).contains(&lines), "{lines} lines");

    // Named a segment ahead: the table's line, then the same slot.
    let t = sim.b.four_tuple(b1).unwrap();
    let seg = Endpoints::new(t.remote, t.local).unwrap();
    assert!(sim.b.lookup_hint(&seg).is_some());
    assert_eq!(first_line(sim.b.expect_looked_up()), first_line(Some(h1)));
    assert!(sim.b.expect_looked_up().is_none(), "named once, used once");

    // A segment of the first connection makes it the last flow.
    sim.a.send(a1, b"x").unwrap();
    sim.run_for(Duration::from_millis(50));
    assert!(hint(&mut sim.b, b1).is_none());
    assert_ne!(first_line(hint(&mut sim.b, b2)), first_line(Some(h1)));
}

/// Everything both stacks emitted, hashed in order, and the bytes
/// delivered; with `expect`, B is told before each segment that a segment
/// of some flow comes next: its own flow half the time, the previous
/// segment's a quarter, a flow of no connection (a port at random) the
/// rest, as a wrong guess off a frame would.
fn run(link: LinkConfig, seed: u64, conns: usize, bytes: u64, expect: bool) -> (u64, u64) {
    let mut sim = Sim::new(seed, link, link, sim::test_config(1), sim::test_config(2));
    let wire = Rc::new(RefCell::new(DefaultHasher::new()));
    let tap = Rc::clone(&wire);
    sim.emit_tap = Some(Box::new(move |side, bytes| {
        let mut w = tap.borrow_mut();
        (side == Side::A).hash(&mut *w);
        bytes.hash(&mut *w);
    }));
    if expect {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut previous: Option<(SocketAddr, SocketAddr)> = None;
        sim.before_b = Some(Box::new(move |b, src: IpAddr, dst: IpAddr, seg| {
            let port = |i: usize| u16::from_be_bytes([seg[i], seg[i + 1]]);
            let own = (SocketAddr::new(dst, port(2)), SocketAddr::new(src, port(0)));
            let (local, remote) = match rng.below(4) {
                0 | 1 => own,
                2 => previous.unwrap_or(own),
                _ => (own.0, SocketAddr::new(src, rng.below(65_536) as u16)),
            };
            let seg = Endpoints::new(remote, local).expect("one family");
            // As the data path calls it: told directly, or named a
            // segment ahead first (`lookup_hint`, then `expect_looked_up`
            // for that segment; in a pipeline, `expect_looked_up` goes
            // with what the call before named, here another flow's guess).
            match rng.below(3) {
                0 => {
                    b.expect(&seg);
                }
                1 => {
                    b.lookup_hint(&seg);
                    b.expect_looked_up();
                }
                _ => {
                    b.expect_looked_up();
                    b.lookup_hint(&seg);
                }
            }
            previous = Some(own);
        }));
    }
    let mut bulk = Bulk::start(&mut sim, conns, bytes, bytes / 4);
    let done = sim.run_until(sim.now + Duration::from_secs(600), |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    assert!(done, "transfer did not finish (expect {expect})");
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
    let h = wire.borrow().finish();
    // Segments found where `expect` named them: some when told, else none.
    assert_eq!(sim.b.stats().expected > 0, expect);
    (h ^ sim.now.as_nanos(), bulk.delivered())
}

/// `expect` changes nothing but where the lookup starts: the same
/// segments on the wire at the same times, the same bytes delivered,
/// whatever it was told (right, wrong, stale), on clean and hostile links.
#[test]
fn changes_nothing_on_the_wire() {
    let clean = LinkConfig {
        delay: Duration::from_millis(1),
        bandwidth_bps: 1_000_000_000,
        max_queue_delay: Duration::from_millis(10),
        ..LinkConfig::default()
    };
    for (link, seed, conns, bytes) in [
        (clean, 1, 200, 50_000),
        (LinkConfig::hostile(0.05), 2, 16, 200_000),
    ] {
        let with = run(link, seed, conns, bytes, true);
        let without = run(link, seed, conns, bytes, false);
        assert_eq!(with, without, "seed {seed}");
    }
}
