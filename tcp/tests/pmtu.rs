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

/// Without SACK, fast recovery inflates the window by a segment per
/// duplicate ACK (RFC 5681 §3.2 step 4). A believed "packet too big" in
/// the middle of it ends the recovery (everything in flight goes again at
/// the new size): the window is deflated to the slow-start threshold as
/// when a recovery ends (RFC 6582 §3.2 step 4), not left inflated.
#[test]
fn a_too_big_during_newreno_recovery_deflates_the_window() {
    let mut cfg = sim::test_config(1);
    cfg.sack = false;
    cfg.rack = false;
    let link = LinkConfig {
        bandwidth_bps: 100_000_000,
        ..LinkConfig::default()
    };
    let mut sim = Sim::new(5, link, link, cfg, sim::test_config(2));
    // A's 150th data segment is lost; every data segment's sequence
    // number is noted (the latest is in flight).
    let seqs: Rc<RefCell<Vec<u32>>> = Rc::default();
    let s2 = seqs.clone();
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        if side != Side::A || payload.is_empty() {
            return false;
        }
        let mut s = s2.borrow_mut();
        s.push(r.seq);
        s.len() == 150
    }));
    let (a, b) = sim.establish();
    let (local, remote) = (a_addr(sim::CLIENT_PORT_BASE), b_addr(sim::SERVER_PORT));
    let data = vec![7u8; 2_000_000];
    let (mut sent, mut got) = (0, 0);
    let mut dups_at_recovery = None;
    let mut after = None;
    run_until(&mut sim, Duration::from_secs(20), |s| {
        if sent < data.len() {
            sent += s.a.send(a, &data[sent..]).unwrap_or(0);
        }
        let st = *s.a.stats();
        if st.fast_retransmits > 0 && after.is_none() {
            let at = *dups_at_recovery.get_or_insert(st.dup_acks);
            if st.dup_acks >= at + 10 {
                let inflated = s.a.info(a).unwrap();
                let seq = *seqs.borrow().last().unwrap();
                let now = s.now;
                assert_eq!(
                    s.a.handle_too_big(now, local, remote, seq, 1280),
                    Delivery::Taken
                );
                after = Some((inflated, s.a.info(a).unwrap()));
            }
        }
        got += read_all(&mut s.b, b).len();
        got == data.len()
    });
    assert_eq!(got, data.len());
    let (inflated, after) = after.expect("a recovery with ten duplicate ACKs");
    assert!(inflated.cwnd > inflated.ssthresh, "inflated: {inflated:?}");
    assert!(after.cwnd <= after.ssthresh, "deflated: {after:?}");
}
