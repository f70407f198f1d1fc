//! The bodies of flowlane-wire's fuzz targets, as plain functions: the libFuzzer binaries in
//! `fuzz_targets/` (feature `libfuzzer`) call them, and `tests/seeds.rs` runs them over the
//! seed corpus on stable.
#![forbid(unsafe_code)]

use flowlane_wire::{self as wire, ChecksumPolicy, EthernetAddress};
use std::net::Ipv4Addr;

/// Fuzzes the frame classifier and the in-place turn-around helpers: no input may panic, and
/// a frame whose checksums verify must still verify after being turned around.
pub fn parse_frame_target(data: &[u8]) {
    let verified = wire::parse_frame(data).is_ok();
    // The prefetch hint never panics, and where the classifier finds a TCP
    // segment that the hint read too, both name the same endpoints.
    let peeked = wire::peek::tcp_endpoints(data);
    if let Ok(f) = wire::parse_frame_with(data, ChecksumPolicy::IP_ONLY) {
        if let (Some(peeked), wire::Transport::Tcp(tcp), Some(ips)) =
            (peeked, f.transport, f.ip_pair())
        {
            let parsed = (
                std::net::SocketAddr::new(ips.src(), tcp.src_port),
                std::net::SocketAddr::new(ips.dst(), tcp.dst_port),
            );
            assert_eq!(peeked.socket_addrs(), parsed);
        }
        assert!(f.l3_end <= data.len());
        assert!(f.payload.start <= f.payload.end && f.payload.end <= f.l3_end);
        let _ = (f.l3(), f.l4(), f.payload());
        // A hostile quote in a too-big message: never a panic.
        let _ = wire::icmp_error(&f);
        let _ = wire::packet::ndp_advert_for(&f, EthernetAddress([2, 0, 0, 0, 0, 1]), |_| true);
    }
    let mut b = data.to_vec();
    if wire::packet::turn_around_udp(&mut b).is_ok() && verified {
        assert!(wire::parse_frame(&b).is_ok());
    }
    let mut b = data.to_vec();
    if wire::packet::answer_icmp_echo(&mut b).is_ok() && verified {
        assert!(wire::parse_frame(&b).is_ok());
    }
    let mut b = data.to_vec();
    let _ = wire::packet::answer_arp(
        &mut b,
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        Ipv4Addr::new(10, 0, 0, 2),
    );
}
