//! Header prediction changes nothing but speed: the same transfers over the
//! same (seeded, deterministic) links, with prediction on and off, put the
//! same segments on the wire, byte for byte, in the same order and at the
//! same virtual times, and deliver the same bytes.

mod sim;

use flowlane_tcp::time::Duration;
use sim::{Bulk, LinkConfig, Side, Sim};
use std::cell::RefCell;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::rc::Rc;

/// Everything both stacks emitted, hashed in order, and B's prediction count.
fn run(link: LinkConfig, seed: u64, conns: usize, bytes: u64, predict: bool) -> (u64, u64, u64) {
    let mut a = sim::test_config(1);
    let mut b = sim::test_config(2);
    a.header_prediction = predict;
    b.header_prediction = predict;
    let mut sim = Sim::new(seed, link, link, a, b);
    let wire = Rc::new(RefCell::new((DefaultHasher::new(), 0u64)));
    let tap = Rc::clone(&wire);
    sim.emit_tap = Some(Box::new(move |side, bytes| {
        let mut w = tap.borrow_mut();
        (side == Side::A).hash(&mut w.0);
        bytes.hash(&mut w.0);
        w.1 += 1;
    }));
    let mut bulk = Bulk::start(&mut sim, conns, bytes, bytes / 4);
    let limit = sim.now + Duration::from_secs(600);
    let done = sim.run_until(limit, |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    assert!(done, "transfer did not finish (prediction {predict})");
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
    let (h, n) = {
        let w = wire.borrow();
        (w.0.finish(), w.1)
    };
    assert!(n > 0);
    (
        h ^ sim.now.as_nanos(),
        bulk.delivered(),
        sim.b.stats().predicted,
    )
}

fn same_with_and_without(link: LinkConfig, seed: u64, conns: usize, bytes: u64) {
    let on = run(link, seed, conns, bytes, true);
    let off = run(link, seed, conns, bytes, false);
    assert_eq!(off.2, 0, "prediction off predicts nothing");
    assert!(on.2 > 0, "prediction on took no segment");
    assert_eq!(on.1, off.1, "same bytes delivered");
    assert_eq!(on.0, off.0, "same segments on the wire at the same times");
}

#[test]
fn clean_link() {
    let link = LinkConfig {
        delay: Duration::from_millis(1),
        bandwidth_bps: 1_000_000_000,
        max_queue_delay: Duration::from_millis(10),
        ..LinkConfig::default()
    };
    same_with_and_without(link, 1, 1, 3_000_000);
    same_with_and_without(link, 2, 64, 100_000);
}

#[test]
fn hostile_links() {
    for (seed, loss) in [(3, 0.01), (4, 0.05), (5, 0.1)] {
        same_with_and_without(LinkConfig::hostile(loss), seed, 4, 300_000);
    }
}
