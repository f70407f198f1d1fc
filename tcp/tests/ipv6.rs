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

/// A listener on an unspecified address is dual-stack, whichever family
/// names it: `0.0.0.0` takes IPv6 SYNs and `[::]` IPv4 ones (the data
/// path listens on `[::]` for both); a listener on a specific address
/// takes only SYNs to that address.
#[test]
fn an_unspecified_listener_takes_both_families() {
    use flowlane_tcp::time::Instant;
    use flowlane_tcp::Stack;
    use flowlane_wire::tcp::{TcpFlags, TcpOptions};
    use std::net::Ipv4Addr;
    let mut b = Stack::new(sim::test_config(2));
    b.listen(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 80))
        .unwrap();
    b.listen(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 81))
        .unwrap();
    b.listen(SocketAddr::new(B6, 82)).unwrap();
    let a4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let b4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let now = Instant::from_millis(1);
    let answer = |b: &mut Stack, src: IpAddr, dst: IpAddr, port: u16| {
        let syn = TcpRepr {
            src_port: 40_000,
            dst_port: port,
            seq: 1,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 65_535,
            urgent: 0,
            options: TcpOptions {
                mss: Some(1460),
                ..TcpOptions::default()
            },
        };
        let mut bytes = vec![0u8; 60];
        let n = syn.emit(&mut bytes).unwrap();
        b.handle_segment(now, src, dst, &bytes[..n]);
        let mut buf = vec![0u8; 2048];
        let t = b.poll_transmit(now, &mut buf).expect("an answer");
        assert_eq!(t.dst.ip(), src);
        TcpRepr::parse_segment(&buf[..t.len]).unwrap().0.flags
    };
    let syn_ack = TcpFlags::SYN | TcpFlags::ACK;
    assert_eq!(answer(&mut b, A6, B6, 80), syn_ack, "0.0.0.0 takes IPv6");
    assert_eq!(answer(&mut b, a4, b4, 80), syn_ack, "0.0.0.0 takes IPv4");
    assert_eq!(answer(&mut b, a4, b4, 81), syn_ack, "[::] takes IPv4");
    assert_eq!(answer(&mut b, A6, B6, 81), syn_ack, "[::] takes IPv6");
    assert_eq!(answer(&mut b, A6, B6, 82), syn_ack, "its own address");
    assert!(
        answer(&mut b, a4, b4, 82).rst(),
        "a specific IPv6 listener takes no IPv4 SYN"
    );
}

/// Each SYN goes to the listener on its port, however many listeners
/// there are and in whatever order they were opened; a port without one
/// answers with an RST, and a port is listened on once.
#[test]
fn each_port_finds_its_listener() {
    use flowlane_tcp::time::Instant;
    use flowlane_tcp::{Error, Stack};
    use flowlane_wire::tcp::{TcpFlags, TcpOptions};
    use std::net::Ipv4Addr;
    let mut b = Stack::new(sim::test_config(2));
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let ports = [9000, 80, 65_535, 443, 1, 8080, 81];
    for p in ports {
        b.listen(SocketAddr::new(any, p)).unwrap();
    }
    for p in ports {
        assert_eq!(
            b.listen(SocketAddr::new(any, p)),
            Err(Error::AddrInUse),
            "port {p} again"
        );
    }
    let a4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let b4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let now = Instant::from_millis(1);
    let mut answer = |port: u16| {
        let syn = TcpRepr {
            src_port: 40_000,
            dst_port: port,
            seq: 1,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 65_535,
            urgent: 0,
            options: TcpOptions::default(),
        };
        let mut bytes = vec![0u8; 60];
        let n = syn.emit(&mut bytes).unwrap();
        b.handle_segment(now, a4, b4, &bytes[..n]);
        let mut buf = vec![0u8; 2048];
        let t = b.poll_transmit(now, &mut buf).expect("an answer");
        let r = TcpRepr::parse_segment(&buf[..t.len]).unwrap().0;
        assert_eq!(r.src_port, port);
        r.flags
    };
    for p in ports {
        assert_eq!(answer(p), TcpFlags::SYN | TcpFlags::ACK, "port {p}");
    }
    for p in [2, 79, 82, 444, 8999, 9001, 65_534] {
        assert!(answer(p).rst(), "port {p} has no listener");
    }
}
