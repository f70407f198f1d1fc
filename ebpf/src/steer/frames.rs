//! Crafted frames for the steering program's tests and cost figures:
//! Ethernet, IPv4 or IPv6 (with extension headers), and a TCP SYN or a UDP
//! datagram to a port; the program's set-up and verdicts they share.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{LocalAddress, Maps, Proto};

/// Sets the program up as the data path does: `PORT` claimed, TCP and
/// UDP, on `v4` and `v6`.
pub(super) fn claim_port(maps: &Maps, v4: LocalAddress<Ipv4Addr>, v6: LocalAddress<Ipv6Addr>) {
    maps.set_local_addresses(v4, v6).unwrap();
    maps.add_port(Proto::Tcp, PORT).unwrap();
    maps.add_port(Proto::Udp, PORT).unwrap();
}

pub(super) const XDP_DROP: u32 = 1;
pub(super) const XDP_PASS: u32 = 2;
/// Claimed for TCP and UDP.
pub(super) const PORT: u16 = 7777;
pub(super) const UNCLAIMED: u16 = 7778;
pub(super) const OURS_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
pub(super) const OTHER_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 9);
pub(super) const OURS_V6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1);
pub(super) const LINK_LOCAL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
pub(super) const TCP: u8 = 6;
pub(super) const UDP: u8 = 17;
/// IPv4 "more fragments".
pub(super) const MF: u16 = 0x2000;

pub(super) fn ethernet(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// A TCP SYN's header (or a UDP header and payload) to `dport`.
pub(super) fn transport(proto: u8, dport: u16) -> Vec<u8> {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&40000u16.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    if proto == TCP {
        l4.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        l4.extend_from_slice(&[0, 16, 0, 0]);
    }
    l4.extend_from_slice(&[0xab; 8]);
    l4
}

/// Ethernet + IPv4 (no options, `frag_off` as on the wire: flags and
/// offset) + `proto` to `dst`:`dport`.
pub(super) fn v4(dst: Ipv4Addr, proto: u8, frag_off: u16, dport: u16) -> Vec<u8> {
    let l4 = transport(proto, dport);
    let mut f = ethernet(0x0800);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34]);
    f.extend_from_slice(&frag_off.to_be_bytes());
    f.extend_from_slice(&[64, proto, 0, 0, 10, 99, 0, 2]);
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&l4);
    f
}

/// Ethernet + IPv4 whose header carries `options` (padded with End of
/// Option List to a multiple of four bytes) + `proto` to `dst`:`dport`.
pub(super) fn v4_options(dst: Ipv4Addr, options: &[u8], proto: u8, dport: u16) -> Vec<u8> {
    let mut opts = options.to_vec();
    opts.resize(options.len().div_ceil(4) * 4, 0);
    let l4 = transport(proto, dport);
    let header = 20 + opts.len();
    let mut f = ethernet(0x0800);
    f.extend_from_slice(&[0x40 | (header / 4) as u8, 0]);
    f.extend_from_slice(&((header + l4.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34, 0, 0, 64, proto, 0, 0, 10, 99, 0, 2]);
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&opts);
    f.extend_from_slice(&l4);
    f
}

/// An IPv4 loose (131) or strict (137) source route option naming
/// `hops` addresses, its pointer at `pointer` (4: the first address; past
/// the option's length: the route is finished, RFC 791 §3.1).
pub(super) fn source_route(kind: u8, hops: u8, pointer: u8) -> Vec<u8> {
    let mut o = vec![kind, 3 + 4 * hops, pointer];
    for h in 0..hops {
        o.extend_from_slice(&[10, 99, 1, h + 1]);
    }
    o
}

/// Ethernet + IPv6 (+ a Fragment header whose offset-and-M field is
/// `frag`) + `proto` to `dst`:`dport`.
pub(super) fn v6(dst: Ipv6Addr, frag: Option<u16>, proto: u8, dport: u16) -> Vec<u8> {
    let chain: Vec<Ext> = frag.into_iter().map(fragment).collect();
    v6_chain(dst, &chain, proto, dport)
}

/// An IPv6 extension header: its Next Header value and its bytes (the
/// first, its own Next Header field, is set by [`v6_chain`]).
pub(super) type Ext = (u8, Vec<u8>);

/// A Fragment header whose offset-and-M field is `off_m`.
pub(super) fn fragment(off_m: u16) -> Ext {
    let o = off_m.to_be_bytes();
    (44, vec![0, 0, o[0], o[1], 0, 0, 0x56, 0x78])
}

/// An 8-byte options header (Hop-by-Hop 0, Destination Options 60):
/// one PadN option of four bytes.
pub(super) fn options(kind: u8) -> Ext {
    (kind, vec![0, 0, 1, 4, 0, 0, 0, 0])
}

/// A Routing header (type 4) with `segments_left`.
pub(super) fn routing(segments_left: u8) -> Ext {
    (43, vec![0, 0, 4, segments_left, 0, 0, 0, 0])
}

/// Ethernet + IPv6 + the extension headers of `chain`, in order, +
/// `proto` to `dst`:`dport`.
pub(super) fn v6_chain(dst: Ipv6Addr, chain: &[Ext], proto: u8, dport: u16) -> Vec<u8> {
    let mut payload = Vec::new();
    for (i, (_, bytes)) in chain.iter().enumerate() {
        let next = chain.get(i + 1).map_or(proto, |e| e.0);
        payload.push(next);
        payload.extend_from_slice(&bytes[1..]);
    }
    payload.extend_from_slice(&transport(proto, dport));
    let mut f = ethernet(0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.push(chain.first().map_or(proto, |e| e.0));
    f.push(64);
    f.extend_from_slice(&Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2).octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&payload);
    f
}

/// Ethernet + IPv4 + ICMPv4 `ty`/`code` to `OURS_V4`, quoting an IPv4
/// header and the first 8 bytes of a TCP segment from `OURS_V4`:`sport`.
pub(super) fn icmp_v4(ty: u8, code: u8, sport: u16) -> Vec<u8> {
    let mut icmp = vec![ty, code, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&[0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, TCP, 0, 0]);
    icmp.extend_from_slice(&OURS_V4.octets());
    icmp.extend_from_slice(&[10, 99, 0, 2]);
    icmp.extend_from_slice(&sport.to_be_bytes());
    icmp.extend_from_slice(&[0, 80, 0, 0, 0, 1]);
    let mut f = ethernet(0x0800);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(20 + icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34, 0, 0, 64, 1, 0, 0, 10, 99, 0, 2]);
    f.extend_from_slice(&OURS_V4.octets());
    f.extend_from_slice(&icmp);
    f
}

/// Ethernet + IPv6 + ICMPv6 `ty`/`code` to `OURS_V6`, quoting an IPv6
/// header and the first 8 bytes of a TCP segment from `OURS_V6`:`sport`.
pub(super) fn icmp_v6(ty: u8, code: u8, sport: u16) -> Vec<u8> {
    let peer = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2);
    let mut icmp = vec![ty, code, 0, 0, 0, 0, 5, 0];
    icmp.extend_from_slice(&[0x60, 0, 0, 0, 0, 40, TCP, 64]);
    icmp.extend_from_slice(&OURS_V6.octets());
    icmp.extend_from_slice(&peer.octets());
    icmp.extend_from_slice(&sport.to_be_bytes());
    icmp.extend_from_slice(&[0, 80, 0, 0, 0, 1]);
    let mut f = ethernet(0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 64]);
    f.extend_from_slice(&peer.octets());
    f.extend_from_slice(&OURS_V6.octets());
    f.extend_from_slice(&icmp);
    f
}
