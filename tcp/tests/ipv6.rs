//! IPv6 connections: the MSS follows the family (RFC 9293 §3.7.1 with
//! RFC 8200's 40-byte header), and data flows as over IPv4.

mod sim;

use std::cell::RefCell;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::rc::Rc;

use flowlane_tcp::time::Duration;
use flowlane_tcp::Event;
use flowlane_wire::TcpRepr;
use sim::{events, read_all, run_until, LinkConfig, Side, Sim};

const A6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1));
const B6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2));

/// (side, MSS option, payload length) of a segment a stack emitted.
type Emitted = (Side, Option<u16>, usize);

#[test]
fn an_ipv6_connection_advertises_and_sends_20_bytes_less_than_ipv4() {
    let mut sim = Sim::symmetric(3, LinkConfig::default());
    let seen: Rc<RefCell<Vec<Emitted>>> = Rc::default();
    let tap = seen.clone();
    sim.emit_tap = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        tap.borrow_mut().push((side, r.options.mss, payload.len()));
    }));
    sim.b.listen(SocketAddr::new(B6, 80)).unwrap();
    let a = sim
        .a
        .connect(
            sim.now,
            SocketAddr::new(A6, 10_000),
            SocketAddr::new(B6, 80),
        )
        .unwrap();
    let mut b = None;
    run_until(&mut sim, Duration::from_secs(2), |s| {
        for ev in events(&mut s.b) {
            if let Event::Accepted { conn, .. } = ev {
                b = Some(conn);
            }
        }
        b.is_some()
    });
    let b = b.expect("accepted over IPv6");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    run_until(&mut sim, Duration::from_secs(30), |s| {
        if sent < data.len() {
            sent += s.a.send(a, &data[sent..]).unwrap_or(0);
        }
        got.extend(read_all(&mut s.b, b));
        got.len() == data.len()
    });
    assert_eq!(got, data);
    let seen = seen.borrow();
    let mss: Vec<_> = seen.iter().filter_map(|&(s, m, _)| Some((s, m?))).collect();
    assert_eq!(mss, [(Side::A, 1440), (Side::B, 1440)], "SYN and SYN-ACK");
    let largest = seen.iter().map(|&(_, _, len)| len).max().unwrap();
    // 1440 less the 12 bytes of the timestamp option in every segment.
    assert_eq!(largest, 1428);
}

#[test]
fn the_ipv6_mss_never_exceeds_the_configured_mss() {
    let v4 = IpAddr::from([192, 0, 2, 1]);
    let mss_for = |mss| {
        let cfg = flowlane_tcp::Config {
            mss,
            ..flowlane_tcp::Config::new([7; 16])
        };
        (cfg.mss_for(v4), cfg.mss_for(A6))
    };
    assert_eq!(mss_for(1460), (1460, 1440));
    // Down to IPv6's minimum link MTU of 1 280, then no lower ...
    assert_eq!(mss_for(1240), (1240, 1220));
    assert_eq!(mss_for(1230), (1230, 1220));
    // ... but never above what the caller's frames hold.
    assert_eq!(mss_for(1000), (1000, 1000));
    assert_eq!(mss_for(536), (536, 536));
}
