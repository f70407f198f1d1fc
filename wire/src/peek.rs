//! A TCP segment's endpoints read straight off its frame, before the frame
//! is classified: for a caller that prefetches the segment's connection
//! state one frame ahead of processing it. [`crate::parse_frame_with`] still
//! classifies and checks every frame; nothing here is verified (no
//! checksum, no length field), so the answer is a hint: a malformed frame
//! gives `None` or endpoints that match nothing, never a panic.

use crate::be16;
use crate::ethernet::{EtherType, EthernetFrame};
use crate::ip::IpProtocol;
use crate::ipv6::walk_extension_headers;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// IANA protocol number of TCP (RFC 9293 §3.1).
const TCP: u8 = 6;

/// A TCP segment's addresses and ports as its headers carry them: each
/// address as its number (an IPv4 address in the low 32 bits), with the
/// family they share. Plain numbers, so that a caller can key its lookup
/// off them without building `SocketAddr`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoints {
    /// Whether both addresses are IPv6 (else both are IPv4).
    pub v6: bool,
    /// The source address.
    pub src: u128,
    /// The destination address.
    pub dst: u128,
    /// The source port.
    pub src_port: u16,
    /// The destination port.
    pub dst_port: u16,
}

impl Endpoints {
    /// The endpoints of a segment from `src` to `dst`; `None` when their
    /// families differ (no segment carries such a pair).
    pub fn new(src: SocketAddr, dst: SocketAddr) -> Option<Self> {
        let (v6, s, d) = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (false, u32::from(s).into(), u32::from(d).into()),
            (IpAddr::V6(s), IpAddr::V6(d)) => (true, u128::from(s), u128::from(d)),
            _ => return None,
        };
        Some(Endpoints {
            v6,
            src: s,
            dst: d,
            src_port: src.port(),
            dst_port: dst.port(),
        })
    }

    /// `(source, destination)` as socket addresses.
    pub fn socket_addrs(&self) -> (SocketAddr, SocketAddr) {
        let ip = |bits: u128| -> IpAddr {
            if self.v6 {
                Ipv6Addr::from(bits).into()
            } else {
                Ipv4Addr::from(bits as u32).into()
            }
        };
        (
            SocketAddr::new(ip(self.src), self.src_port),
            SocketAddr::new(ip(self.dst), self.dst_port),
        )
    }
}

/// The endpoints of the TCP segment in an Ethernet frame: up to two VLAN
/// tags, then IPv4 that is not a later fragment (RFC 791 §3.1: a non-zero
/// fragment offset carries no TCP header) or IPv6 with TCP next, or behind
/// extension headers that are not a fragment's (RFC 8200 §4). `None` for
/// anything else and for a frame too short for the fields read.
#[inline]
pub fn tcp_endpoints(frame: &[u8]) -> Option<Endpoints> {
    let (_, ethertype, l3) = EthernetFrame::new_checked(frame).ok()?.parse_tags().ok()?;
    let ip = frame.get(l3..)?;
    let (v6, src, dst, l4) = match ethertype {
        EtherType::Ipv4 => {
            let h: &[u8; 20] = ip.get(..20)?.try_into().ok()?;
            if h[0] >> 4 != 4 || h[9] != TCP || be16(h, 6) & 0x1fff != 0 {
                return None;
            }
            let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
            let ihl = usize::from(h[0] & 0x0f) * 4;
            // RFC 791 §3.1: a header of at least five words, and ports
            // within the datagram (not in the frame's padding).
            if ihl < 20 || usize::from(be16(h, 2)) < ihl + 4 {
                return None;
            }
            (false, src.into(), dst.into(), ihl)
        }
        EtherType::Ipv6 => {
            let h: &[u8; 40] = ip.get(..40)?.try_into().ok()?;
            if h[0] >> 4 != 6 {
                return None;
            }
            let payload_len = usize::from(be16(h, 4));
            let l4 = if h[6] == TCP {
                40
            } else {
                40 + tcp_behind_extension_headers(h[6], ip, payload_len)?
            };
            // RFC 8200 §3: the payload (its length) holds the ports.
            if payload_len + 40 < l4 + 4 {
                return None;
            }
            let src = u128::from_be_bytes(h[8..24].try_into().ok()?);
            let dst = u128::from_be_bytes(h[24..40].try_into().ok()?);
            (true, src, dst, l4)
        }
        _ => return None,
    };
    let ports = ip.get(l4..l4 + 4)?;
    Some(Endpoints {
        v6,
        src,
        dst,
        src_port: be16(ports, 0),
        dst_port: be16(ports, 2),
    })
}

/// Where the TCP header starts in the IPv6 payload of `ip` (`payload_len`
/// bytes by its header) behind extension headers beginning with `first`,
/// walked as the classifier walks them ([`walk_extension_headers`]); `None`
/// for another upper layer or a fragment. Rare (flowlane's XDP program
/// passes such segments too), so out of line.
#[cold]
fn tcp_behind_extension_headers(first: u8, ip: &[u8], payload_len: usize) -> Option<usize> {
    let payload = ip.get(40..)?;
    let payload = &payload[..payload.len().min(payload_len)];
    let up = walk_extension_headers(IpProtocol::from(first), payload).ok()?;
    (up.protocol == IpProtocol::Tcp && up.fragment.is_none()).then_some(up.offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_frame, Transport};

    /// Ethernet (+ `tags` VLAN tags) + IPv4 (20 bytes of options when
    /// `options`) + a 20-byte TCP header, checksums left at zero.
    fn v4_frame(tags: usize, options: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        for _ in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let ihl = if options { 10 } else { 5 };
        let total = ihl * 4 + 20;
        f.extend_from_slice(&[0x40 | ihl as u8, 0, 0, total as u8, 0, 0, 0x40, 0, 64, TCP]);
        f.extend_from_slice(&[0, 0, 10, 0, 0, 2, 10, 0, 0, 1]);
        f.resize(f.len() + (ihl - 5) * 4, 1);
        f.extend_from_slice(&[0x9c, 0x41, 0x13, 0x89]);
        // Sequence and acknowledgment numbers, data offset 5, flags.
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&[0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
        f
    }

    #[test]
    fn reads_ipv4_with_tags_and_options() {
        let want = (
            "10.0.0.2:40001".parse().unwrap(),
            "10.0.0.1:5001".parse().unwrap(),
        );
        for tags in 0..=2 {
            for options in [false, true] {
                let got = tcp_endpoints(&v4_frame(tags, options)).map(|e| e.socket_addrs());
                assert_eq!(got, Some(want));
            }
        }
    }

    /// A header length under five words, or a total length that puts the
    /// ports past the datagram (in the frame's padding): frames the
    /// classifier refuses give no endpoints (they read ports out of the
    /// IP header or the padding).
    #[test]
    fn malformed_ipv4_lengths_give_none() {
        for ihl in 0..5u8 {
            let mut f = v4_frame(0, false);
            f[14] = 0x40 | ihl;
            assert!(parse_frame(&f).is_err());
            assert_eq!(tcp_endpoints(&f), None, "IHL {ihl}");
        }
        let mut f = v4_frame(0, false);
        f[14 + 3] = 20; // the TCP header is padding now
        f.resize(60, 0);
        assert!(!matches!(
            parse_frame(&f).map(|p| p.transport),
            Ok(Transport::Tcp { .. })
        ));
        assert_eq!(tcp_endpoints(&f), None);
    }

    /// Against the classifier, on the known-good frames of every kind
    /// (`testutil`): the same endpoints for each TCP segment, `None` for
    /// the rest.
    #[test]
    fn agrees_with_the_classifier() {
        use crate::testutil::*;
        let mut tcp_frames = 0;
        for f in [
            ARP_REQUEST,
            ICMP_ECHO,
            UDP4,
            UDP4_PADDED,
            UDP4_VLAN,
            UDP4_QINQ,
            UDP4_OPTS,
            TCP4_SYN,
            TCP4_DATA,
            UDP6,
            UDP6_EXT,
            TCP6,
            TCP6_EXT,
            ICMP6_ECHO,
            NDP_NS,
            IPV4_FRAG_FIRST,
            IPV4_FRAG_LATER,
            IPV6_FRAG,
        ] {
            let f = hex(f);
            let parsed = parse_frame(&f).unwrap();
            let want = match (parsed.transport, parsed.ip_pair()) {
                (Transport::Tcp(tcp), Some(ips)) if !parsed.is_fragment() => Some((
                    SocketAddr::new(ips.src(), tcp.src_port),
                    SocketAddr::new(ips.dst(), tcp.dst_port),
                )),
                _ => None,
            };
            tcp_frames += usize::from(want.is_some());
            let got = tcp_endpoints(&f);
            assert_eq!(got.map(|e| e.socket_addrs()), want, "{f:02x?}");
            if let Some((src, dst)) = want {
                assert_eq!(got, Endpoints::new(src, dst), "the numbers, both ways");
            }
        }
        assert_eq!(tcp_frames, 4);
    }

    #[test]
    fn refuses_what_carries_no_tcp_header() {
        let f = v4_frame(0, false);
        let mut later_fragment = f.clone();
        later_fragment[14 + 7] = 1;
        let mut udp = f.clone();
        udp[14 + 9] = 17;
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        for bad in [later_fragment, udp, arp] {
            assert_eq!(tcp_endpoints(&bad), None);
        }
        // Cut anywhere before the ports' end: None, never a panic.
        for len in 0..14 + 20 + 4 {
            assert_eq!(tcp_endpoints(&f[..len]), None, "{len} bytes");
        }
        // Behind an extension header too.
        let f = crate::testutil::hex(crate::testutil::TCP6_EXT);
        for len in 0..14 + 40 + 8 + 4 {
            assert_eq!(tcp_endpoints(&f[..len]), None, "{len} bytes");
        }
        assert!(tcp_endpoints(&f[..14 + 40 + 8 + 4]).is_some());
    }

    #[test]
    fn endpoints_of_socket_addresses_round_trip() {
        let v4: SocketAddr = "10.0.0.2:40001".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:80".parse().unwrap();
        for (src, dst) in [(v4, v4), (v6, v6), (v6, mapped)] {
            let e = Endpoints::new(src, dst).unwrap();
            assert_eq!(e.socket_addrs(), (src, dst));
        }
        let e = Endpoints::new(v4, "10.0.0.1:5001".parse().unwrap()).unwrap();
        assert_eq!((e.v6, e.src, e.dst), (false, 0x0a00_0002, 0x0a00_0001));
        // No segment carries addresses of two families (an IPv4-mapped
        // IPv6 address is IPv6's).
        assert_eq!(Endpoints::new(v4, v6), None);
        assert_eq!(Endpoints::new(mapped, v4), None);
    }
}
