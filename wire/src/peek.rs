//! A TCP segment's endpoints read straight off its frame, before the frame
//! is classified: for a caller that prefetches the segment's connection
//! state one frame ahead of processing it. [`crate::parse_frame_with`] still
//! classifies and checks every frame; nothing here is verified (no
//! checksum, no length field), so the answer is a hint: a malformed frame
//! gives `None` or endpoints that match nothing, never a panic.

use crate::be16;
use crate::ethernet::{EtherType, EthernetFrame};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// IANA protocol number of TCP (RFC 9293 §3.1).
const TCP: u8 = 6;

/// `(source, destination)` of the TCP segment in an Ethernet frame: up to
/// two VLAN tags, then IPv4 that is not a later fragment (RFC 791 §3.1:
/// a non-zero fragment offset carries no TCP header) or IPv6 whose first
/// next header is TCP (RFC 8200 §3; extension headers give `None`). `None`
/// for anything else and for a frame too short for the fields read.
#[inline]
pub fn tcp_endpoints(frame: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    let (_, ethertype, l3) = EthernetFrame::new_checked(frame).ok()?.parse_tags().ok()?;
    let ip = frame.get(l3..)?;
    let (src, dst, l4) = match ethertype {
        EtherType::Ipv4 => {
            let h = ip.get(..20)?;
            if h[0] >> 4 != 4 || h[9] != TCP || be16(h, 6) & 0x1fff != 0 {
                return None;
            }
            let src: [u8; 4] = h[12..16].try_into().ok()?;
            let dst: [u8; 4] = h[16..20].try_into().ok()?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            (Ipv4Addr::from(src).into(), Ipv4Addr::from(dst).into(), ihl)
        }
        EtherType::Ipv6 => {
            let h = ip.get(..40)?;
            if h[0] >> 4 != 6 || h[6] != TCP {
                return None;
            }
            let src: [u8; 16] = h[8..24].try_into().ok()?;
            let dst: [u8; 16] = h[24..40].try_into().ok()?;
            (Ipv6Addr::from(src).into(), Ipv6Addr::from(dst).into(), 40)
        }
        _ => return None,
    };
    let ports = ip.get(l4..l4 + 4)?;
    Some((
        SocketAddr::new(src, be16(ports, 0)),
        SocketAddr::new(dst, be16(ports, 2)),
    ))
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
                assert_eq!(tcp_endpoints(&v4_frame(tags, options)), Some(want));
            }
        }
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
            assert_eq!(tcp_endpoints(&f), want, "{f:02x?}");
        }
        assert_eq!(tcp_frames, 3);
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
    }
}
