//! "Packet too big" signals for TCP (path MTU discovery): ICMPv4 Destination
//! Unreachable, Fragmentation Needed (RFC 792; the next-hop MTU of RFC 1191
//! §4) and ICMPv6 Packet Too Big (RFC 4443 §3.2), with the TCP segment they
//! quote.
//!
//! Only what the quote says is parsed here; whether it is believable (the
//! quoted sequence number must be in flight, RFC 5927 §4.1) is for the TCP
//! connection it names to decide.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::icmp::{self, Icmpv4Message, Icmpv6Message};
use crate::ip::IpProtocol;
use crate::packet::{Frame, Network, Transport};

/// ICMPv4 Destination Unreachable code 4: fragmentation needed and DF set.
const FRAG_NEEDED: u8 = 4;
/// Bytes of the quoted TCP header needed: ports and sequence number.
const QUOTED_TCP: usize = 8;

/// A parsed "packet too big" about a TCP segment we sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooBig {
    /// The MTU the sender of the message reports (0 when an ICMPv4 router
    /// predates RFC 1191 and reports none).
    pub mtu: u32,
    /// The quoted segment's source: our side of the connection.
    pub local: SocketAddr,
    /// The quoted segment's destination: the peer.
    pub remote: SocketAddr,
    /// The quoted segment's sequence number.
    pub seq: u32,
}

/// The "packet too big" `frame` carries, if it is one that quotes a TCP
/// segment (the frame's checksums were verified by the classifier; the
/// quote has none to check). `None` for any other frame.
pub fn too_big(frame: &Frame<'_>) -> Option<TooBig> {
    let icmp = frame.l4();
    let quoted = icmp.get(icmp::HEADER_LEN..)?;
    let (mtu, (local, remote, tcp)) = match (&frame.network, frame.transport) {
        (
            Network::Ipv4(_),
            Transport::Icmpv4 {
                msg_type: Icmpv4Message::DstUnreachable,
                code: FRAG_NEEDED,
            },
        ) => (u32::from(be16(icmp, 6)?), quoted_v4(quoted)?),
        (
            Network::Ipv6(_),
            Transport::Icmpv6 {
                msg_type: Icmpv6Message::PktTooBig,
                code: 0,
            },
        ) => (be32(icmp, 4)?, quoted_v6(quoted)?),
        _ => return None,
    };
    let tcp = tcp.get(..QUOTED_TCP)?;
    Some(TooBig {
        mtu,
        local: SocketAddr::new(local, be16(tcp, 0)?),
        remote: SocketAddr::new(remote, be16(tcp, 2)?),
        seq: be32(tcp, 4)?,
    })
}

/// (source, destination, the bytes after the header) of a quoted IPv4
/// packet carrying TCP.
fn quoted_v4(q: &[u8]) -> Option<(IpAddr, IpAddr, &[u8])> {
    let ihl = usize::from(q.first()? & 0x0f) * 4;
    if q[0] >> 4 != 4 || ihl < 20 || *q.get(9)? != u8::from(IpProtocol::Tcp) {
        return None;
    }
    // A later fragment (RFC 791 §3.1: offset not 0) quotes no TCP header.
    if be16(q, 6)? & 0x1fff != 0 {
        return None;
    }
    let src = Ipv4Addr::from(<[u8; 4]>::try_from(q.get(12..16)?).ok()?);
    let dst = Ipv4Addr::from(<[u8; 4]>::try_from(q.get(16..20)?).ok()?);
    Some((src.into(), dst.into(), q.get(ihl..)?))
}

/// The same for a quoted IPv6 packet whose next header is TCP (a quote
/// with extension headers is not followed).
fn quoted_v6(q: &[u8]) -> Option<(IpAddr, IpAddr, &[u8])> {
    if q.first()? >> 4 != 6 || *q.get(6)? != u8::from(IpProtocol::Tcp) {
        return None;
    }
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(q.get(8..24)?).ok()?);
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(q.get(24..40)?).ok()?);
    Some((src.into(), dst.into(), q.get(40..)?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use crate::packet::parse_frame;

    /// An Ethernet frame from `from` to `to` carrying ICMP `ty`/`code`
    /// with bytes 4..8 `rest` and `quote` after the header, checksummed.
    fn icmp_frame(v6: bool, ty: u8, code: u8, rest: [u8; 4], quote: &[u8]) -> Vec<u8> {
        let mut icmp = vec![ty, code, 0, 0];
        icmp.extend_from_slice(&rest);
        icmp.extend_from_slice(quote);
        let mut f = vec![0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
            f.extend_from_slice(&[58, 64]);
            let (src, dst): (Ipv6Addr, Ipv6Addr) =
                ("fd99::2".parse().unwrap(), "fd99::1".parse().unwrap());
            f.extend_from_slice(&src.octets());
            f.extend_from_slice(&dst.octets());
            checksum::fill_icmpv6_checksum(&src, &dst, &mut icmp).unwrap();
        } else {
            let total = (20 + icmp.len()) as u16;
            let mut ip = vec![
                0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 1, 0, 0, 10, 99, 0, 2, 10, 99, 0, 1,
            ];
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            let s = checksum::checksum(&ip);
            ip[10..12].copy_from_slice(&s.to_be_bytes());
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend_from_slice(&ip);
            let sum = checksum::checksum(&icmp);
            icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        }
        f.extend_from_slice(&icmp);
        f
    }

    /// The first bytes of a TCP segment 40001 → 80 with sequence 7.
    const TCP8: [u8; 8] = [0x9c, 0x41, 0, 80, 0, 0, 0, 7];

    fn quote_v4() -> Vec<u8> {
        let mut q = vec![
            0x45, 0, 5, 0xdc, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 99, 0, 1, 10, 99, 0, 2,
        ];
        q.extend_from_slice(&TCP8);
        q
    }

    fn quote_v6() -> Vec<u8> {
        let mut q = vec![0x60, 0, 0, 0, 5, 0xb4, 6, 64];
        q.extend_from_slice(&"fd99::1".parse::<Ipv6Addr>().unwrap().octets());
        q.extend_from_slice(&"fd99::2".parse::<Ipv6Addr>().unwrap().octets());
        q.extend_from_slice(&TCP8);
        q
    }

    #[test]
    fn fragmentation_needed_and_packet_too_big_name_the_quoted_segment() {
        let f = icmp_frame(false, 3, 4, [0, 0, 0x05, 0x78], &quote_v4());
        let t = too_big(&parse_frame(&f).unwrap()).unwrap();
        assert_eq!(t.mtu, 1400);
        assert_eq!(t.local, "10.99.0.1:40001".parse().unwrap());
        assert_eq!(t.remote, "10.99.0.2:80".parse().unwrap());
        assert_eq!(t.seq, 7);
        let f = icmp_frame(true, 2, 0, 1280u32.to_be_bytes(), &quote_v6());
        let t = too_big(&parse_frame(&f).unwrap()).unwrap();
        assert_eq!(t.mtu, 1280);
        assert_eq!(t.local, "[fd99::1]:40001".parse().unwrap());
        assert_eq!(t.remote, "[fd99::2]:80".parse().unwrap());
    }

    #[test]
    fn other_messages_and_short_or_foreign_quotes_are_not_signals() {
        let q = quote_v4();
        // Port unreachable, not fragmentation needed.
        let f = icmp_frame(false, 3, 3, [0, 0, 5, 0x78], &q);
        assert_eq!(too_big(&parse_frame(&f).unwrap()), None);
        // A quote cut inside the TCP header, at every length.
        for cut in 0..q.len() {
            let f = icmp_frame(false, 3, 4, [0, 0, 5, 0x78], &q[..cut]);
            assert_eq!(too_big(&parse_frame(&f).unwrap()), None, "{cut}");
        }
        // A quoted UDP datagram.
        let mut udp = q.clone();
        udp[9] = 17;
        let f = icmp_frame(false, 3, 4, [0, 0, 5, 0x78], &udp);
        assert_eq!(too_big(&parse_frame(&f).unwrap()), None);
        // An ICMPv6 message of another type, and a v4 quote in a v6 message.
        let f = icmp_frame(true, 1, 0, 1280u32.to_be_bytes(), &quote_v6());
        assert_eq!(too_big(&parse_frame(&f).unwrap()), None);
        let f = icmp_frame(true, 2, 0, 1280u32.to_be_bytes(), &q);
        assert_eq!(too_big(&parse_frame(&f).unwrap()), None);
    }

    /// A quoted later fragment (offset not 0) carries no TCP header: the
    /// bytes after its IP header are no ports or sequence number.
    #[test]
    fn a_quoted_later_fragment_is_not_a_signal() {
        let mut q = quote_v4();
        q[6..8].copy_from_slice(&[0x00, 0xb9]);
        let f = icmp_frame(false, 3, 4, [0, 0, 5, 0x78], &q);
        assert_eq!(too_big(&parse_frame(&f).unwrap()), None);
    }
}
