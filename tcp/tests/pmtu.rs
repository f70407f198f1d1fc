//! Path MTU discovery by ICMP (RFC 1191, RFC 8201): a "packet too big"
//! about a segment in flight lowers the MSS and the lost segments go again
//! at once; one about anything else is ignored (RFC 5927 §4.1).

mod sim;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{ConnHandle, Delivery};
use flowlane_wire::TcpRepr;
use sim::{read_all, run_until, LinkConfig, Side, Sim, A_IP, B_IP};

fn a_addr(port: u16) -> SocketAddr {
    SocketAddr::new(A_IP, port)
}
fn b_addr(port: u16) -> SocketAddr {
    SocketAddr::new(B_IP, port)
}

/// A connection A → B over a path that silently drops every segment A
/// sends with more than `path_mss` bytes of payload; the sequence numbers
/// of those drops are recorded for the test to complain about.
fn narrow_path(path_mss: usize) -> (Sim, ConnHandle, ConnHandle, Rc<RefCell<Vec<u32>>>) {
    let mut sim = Sim::symmetric(5, LinkConfig::default());
    let dropped: Rc<RefCell<Vec<u32>>> = Rc::default();
    let d = dropped.clone();
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        let drop = side == Side::A && payload.len() > path_mss;
        if drop {
            d.borrow_mut().push(r.seq);
        }
        drop
    }));
    let (a, b) = sim.establish();
    (sim, a, b, dropped)
}

/// Sends `n` bytes A → B, calling `on_drop` with each dropped segment's
/// sequence number as it happens; returns what B read.
fn transfer(
    sim: &mut Sim,
    (a, b): (ConnHandle, ConnHandle),
    n: usize,
    dropped: &Rc<RefCell<Vec<u32>>>,
    limit: Duration,
    mut on_drop: impl FnMut(&mut Sim, u32),
) -> Vec<u8> {
    let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    let (mut sent, mut got, mut seen) = (0, Vec::new(), 0);
    run_until(sim, limit, |s| {
        if sent < n {
            sent += s.a.send(a, &data[sent..]).unwrap_or(0);
        }
        let drops: Vec<u32> = dropped.borrow()[seen..].to_vec();
        seen += drops.len();
        for seq in drops {
            on_drop(s, seq);
        }
        got.extend(read_all(&mut s.b, b));
        got.len() == n
    });
    assert_eq!(got, data);
    got
}

#[test]
fn a_genuine_too_big_lowers_the_mss_and_resends_without_a_timeout() {
    let (mut sim, a, b, dropped) = narrow_path(1228);
    let (local, remote) = (a_addr(sim::CLIENT_PORT_BASE), b_addr(sim::SERVER_PORT));
    assert_eq!(sim.a.four_tuple(a).unwrap().local, local);
    transfer(
        &mut sim,
        (a, b),
        300_000,
        &dropped,
        Duration::from_secs(5),
        |s, seq| {
            // The router's message: MTU 1280 (1280 - 40 - 12 = 1228).
            let now = s.now;
            assert_eq!(
                s.a.handle_too_big(now, local, remote, seq, 1280),
                Delivery::Taken
            );
        },
    );
    let st = *sim.a.stats();
    assert_eq!(st.pmtu_lowered, 1, "{st:?}");
    // Later messages about segments of the old size already in flight
    // report nothing lower.
    assert_eq!(st.too_big_ignored as usize, dropped.borrow().len() - 1);
    assert_eq!(st.rto_timeouts, 0, "resent at once, not after a timeout");
}

#[test]
fn forged_or_useless_messages_change_nothing() {
    let (mut sim, a, b, _) = narrow_path(usize::MAX);
    let (local, remote) = (a_addr(sim::CLIENT_PORT_BASE), b_addr(sim::SERVER_PORT));
    assert_eq!(sim.a.send(a, &vec![7; 50_000]).unwrap(), 50_000);
    sim.run_for(Duration::from_millis(1));
    let now = sim.now;
    // Blind: a sequence number the attacker guessed (the flight is about
    // 15 kB of the 4 GB space).
    sim.a.handle_too_big(now, local, remote, 0x1234_5678, 576);
    // No such connection.
    sim.a.handle_too_big(now, local, b_addr(81), 0, 576);
    let st = *sim.a.stats();
    assert_eq!((st.pmtu_lowered, st.too_big_ignored), (0, 2));
    let mut got = 0;
    run_until(&mut sim, Duration::from_secs(2), |s| {
        got += read_all(&mut s.b, b).len();
        got == 50_000
    });
    assert_eq!(sim.a.stats().retransmits, 0);
}

#[test]
fn reports_below_the_floor_are_raised_to_it() {
    // 552 - 40 - 12 = 500 bytes of payload fit the IPv4 floor.
    let (mut sim, a, b, dropped) = narrow_path(500);
    let (local, remote) = (a_addr(sim::CLIENT_PORT_BASE), b_addr(sim::SERVER_PORT));
    transfer(
        &mut sim,
        (a, b),
        50_000,
        &dropped,
        Duration::from_secs(5),
        |s, seq| {
            let now = s.now;
            s.a.handle_too_big(now, local, remote, seq, 68);
        },
    );
    assert_eq!(sim.a.stats().pmtu_lowered, 1);
}
