//! The initial window in the deterministic simulator: ten segments after
//! the handshake (RFC 6928 §2), three with RFC 5681 §3.1's, and one
//! segment when the SYN or SYN-ACK had to be sent again (RFC 5681 §3.1,
//! RFC 6928 §2).

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{Config, ConnHandle, InitialWindow};
use flowlane_wire::tcp::TcpFlags;
use flowlane_wire::TcpRepr;
use sim::{LinkConfig, Side, Sim};
use std::cell::RefCell;
use std::rc::Rc;

/// Data segments each side emitted so far.
type Counts = Rc<RefCell<[usize; 2]>>;

/// A simulator that loses the first segment `lose` matches once, and
/// counts data segments per side.
fn sim_losing(
    a: Config,
    b: Config,
    mut lose: impl FnMut(Side, &TcpRepr) -> bool + 'static,
) -> (Sim, Counts) {
    let mut sim = Sim::new(1, LinkConfig::default(), LinkConfig::default(), a, b);
    let counts: Counts = Rc::default();
    let c = counts.clone();
    let mut lost = false;
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        if !payload.is_empty() {
            c.borrow_mut()[usize::from(side == Side::B)] += 1;
        }
        if !lost && lose(side, &r) {
            lost = true;
            return true;
        }
        false
    }));
    (sim, counts)
}

/// After the handshake, each side queues 100 kB; returns how many data
/// segments each sends before any ACK of data can come back.
fn first_flights(sim: &mut Sim, counts: &Counts, a: ConnHandle, b: ConnHandle) -> [usize; 2] {
    // Whatever the handshake left (a delayed final ACK) settles first.
    sim.run_for(Duration::from_millis(100));
    *counts.borrow_mut() = [0; 2];
    let data = vec![5u8; 100_000];
    sim.a.send(a, &data).unwrap();
    sim.b.send(b, &data).unwrap();
    sim.flush();
    let c = *counts.borrow();
    c
}

#[test]
fn ten_segments_after_the_handshake() {
    let (mut sim, counts) = sim_losing(sim::test_config(1), sim::test_config(2), |_, _| false);
    let (a, b) = sim.establish();
    assert_eq!(first_flights(&mut sim, &counts, a, b), [10, 10]);
}

#[test]
fn rfc5681_initial_window_on_request() {
    let mut a = sim::test_config(1);
    a.initial_window = InitialWindow::Rfc5681;
    let (mut sim, counts) = sim_losing(a, sim::test_config(2), |_, _| false);
    let (a, b) = sim.establish();
    // 4380 bytes: three segments of 1448.
    assert_eq!(first_flights(&mut sim, &counts, a, b), [3, 10]);
}

#[test]
fn one_segment_after_a_lost_syn() {
    let (mut sim, counts) = sim_losing(sim::test_config(1), sim::test_config(2), |side, r| {
        side == Side::A && r.flags.contains(TcpFlags::SYN)
    });
    let (a, b) = sim.establish();
    // A's SYN went twice: A starts from one segment; B never knew.
    assert_eq!(first_flights(&mut sim, &counts, a, b), [1, 10]);
}

#[test]
fn one_segment_after_a_lost_syn_ack() {
    // B's timer fires before A's, so that B sends its SYN-ACK again itself.
    let mut b = sim::test_config(2);
    b.initial_rto = Duration::from_millis(300);
    let (mut sim, counts) = sim_losing(sim::test_config(1), b, |side, r| {
        side == Side::B && r.flags.contains(TcpFlags::SYN | TcpFlags::ACK)
    });
    let (a, b) = sim.establish();
    assert_eq!(first_flights(&mut sim, &counts, a, b), [10, 1]);
    assert_eq!(sim.b.stats().retransmits, 1);
}
