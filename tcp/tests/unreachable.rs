//! ICMP destination unreachable (RFC 1122 §4.2.3.9, RFC 5461, RFC 5927):
//! a connection attempt whose SYN (or SYN-ACK) it quotes ends at once,
//! saying why; a blind one, or one about a synchronized connection,
//! changes nothing.

mod sim;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{CloseReason, Delivery, Event, State, Unreachable};
use flowlane_wire::{TcpFlags, TcpRepr};
use sim::{read_all, run_until, LinkConfig, Side, Sim, A_IP, B_IP};

const LOCAL: u16 = 10_000;
const PORT: u16 = 80;

fn a_addr() -> SocketAddr {
    SocketAddr::new(A_IP, LOCAL)
}
fn b_addr() -> SocketAddr {
    SocketAddr::new(B_IP, PORT)
}

/// Sequence numbers a link filter recorded.
type Seen = Rc<RefCell<Vec<u32>>>;

/// A sim whose link drops `side`'s segments with `flags` while the flag
/// returned holds, recording their sequence numbers.
fn dropping(side: Side, flags: TcpFlags) -> (Sim, Seen, Rc<RefCell<bool>>) {
    let mut sim = Sim::symmetric(3, LinkConfig::default());
    let seqs: Seen = Rc::default();
    let on: Rc<RefCell<bool>> = Rc::new(RefCell::new(true));
    let (s, o) = (seqs.clone(), on.clone());
    sim.drop_filter = Some(Box::new(move |from, bytes| {
        let (r, _) = TcpRepr::parse_segment(bytes).unwrap();
        let drop = *o.borrow() && from == side && r.flags == flags;
        if drop {
            s.borrow_mut().push(r.seq);
        }
        drop
    }));
    sim.b.listen(b_addr()).expect("listen");
    (sim, seqs, on)
}

/// A connect whose SYN a router answers "port unreachable" (a firewall's
/// reject) ends at once, `Unreachable(Refused)`, long before the SYN's
/// retransmissions would run out.
#[test]
fn a_refused_syn_ends_the_connect_at_once() {
    let (mut sim, syns, _) = dropping(Side::A, TcpFlags::SYN);
    let a = sim.a.connect(sim.now, a_addr(), b_addr()).expect("connect");
    sim.run_for(Duration::from_millis(5));
    let iss = syns.borrow()[0];
    let now = sim.now;
    let d = sim
        .a
        .handle_unreachable(now, a_addr(), b_addr(), iss, Unreachable::Refused);
    assert_eq!(d, Delivery::Taken);
    let mut closed = None;
    while let Some(e) = sim.a.poll_event() {
        if let Event::Closed { conn, reason } = e {
            assert_eq!(conn, a);
            closed = Some(reason);
        }
    }
    assert_eq!(closed, Some(CloseReason::Unreachable(Unreachable::Refused)));
    let st = *sim.a.stats();
    assert_eq!((st.unreachable_ended, st.unreachable_ignored), (1, 0));
    assert_eq!(sim.a.connections_in(State::SynSent), 0);
}

/// A message whose quoted sequence number is not the SYN's (a blind
/// guess), or about a connection there is not, is ignored: the attempt
/// goes on, and connects once the path works.
#[test]
fn a_blind_unreachable_leaves_the_attempt_alone() {
    let (mut sim, syns, on) = dropping(Side::A, TcpFlags::SYN);
    let a = sim.a.connect(sim.now, a_addr(), b_addr()).expect("connect");
    sim.run_for(Duration::from_millis(5));
    let iss = syns.borrow()[0];
    let now = sim.now;
    for seq in [iss.wrapping_add(1), iss.wrapping_sub(1), 0x1234_5678] {
        sim.a
            .handle_unreachable(now, a_addr(), b_addr(), seq, Unreachable::Host);
    }
    let other = SocketAddr::new(B_IP, PORT + 1);
    sim.a
        .handle_unreachable(now, a_addr(), other, iss, Unreachable::Host);
    let st = *sim.a.stats();
    assert_eq!((st.unreachable_ended, st.unreachable_ignored), (0, 4));
    *on.borrow_mut() = false;
    let mut connected = false;
    run_until(&mut sim, Duration::from_secs(5), |s| {
        while let Some(e) = s.a.poll_event() {
            connected |= e == Event::Connected(a);
        }
        connected
    });
}

/// A synchronized connection does not abort on a destination unreachable,
/// hard or soft, even one about data in flight (RFC 5927 §5.2): every byte
/// still arrives.
#[test]
fn an_established_connection_does_not_abort_on_it() {
    let mut sim = Sim::symmetric(4, LinkConfig::default());
    let (a, b) = sim.establish();
    let sent: Seen = Rc::default();
    let s = sent.clone();
    sim.drop_filter = Some(Box::new(move |from, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        if from == Side::A && !payload.is_empty() {
            s.borrow_mut().push(r.seq);
        }
        false
    }));
    assert_eq!(sim.a.send(a, &vec![9; 20_000]), Ok(20_000));
    sim.run_for(Duration::from_micros(10));
    let una = sent.borrow()[0];
    let now = sim.now;
    for what in [
        Unreachable::Refused,
        Unreachable::Host,
        Unreachable::Prohibited,
    ] {
        sim.a.handle_unreachable(now, a_addr(), b_addr(), una, what);
    }
    assert_eq!(sim.a.stats().unreachable_ignored, 3);
    let mut got = 0;
    run_until(&mut sim, Duration::from_secs(2), |s| {
        got += read_all(&mut s.b, b).len();
        got == 20_000
    });
    assert_eq!(sim.a.state(a), Ok(State::Established));
}

/// A SYN-ACK answered "host unreachable" takes the half-open connection
/// out of the listener's backlog, silently (the application never saw
/// it); the client's next SYN, once the path works, is served.
#[test]
fn an_unreachable_syn_ack_frees_the_half_open_connection() {
    let (mut sim, syn_acks, on) = dropping(Side::B, TcpFlags::SYN | TcpFlags::ACK);
    let a = sim.a.connect(sim.now, a_addr(), b_addr()).expect("connect");
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.b.connections_in(State::SynReceived), 1);
    let iss = syn_acks.borrow()[0];
    let now = sim.now;
    sim.b
        .handle_unreachable(now, b_addr(), a_addr(), iss, Unreachable::Host);
    assert_eq!(sim.b.connections_in(State::SynReceived), 0);
    assert_eq!(sim.b.stats().unreachable_ended, 1);
    assert_eq!(sim.b.poll_event(), None);
    *on.borrow_mut() = false;
    let (mut connected, mut accepted) = (false, false);
    run_until(&mut sim, Duration::from_secs(5), |s| {
        while let Some(e) = s.a.poll_event() {
            connected |= e == Event::Connected(a);
        }
        while let Some(e) = s.b.poll_event() {
            accepted |= matches!(e, Event::Accepted { .. });
        }
        connected && accepted
    });
}
