//! ICMP errors about TCP segments we sent, with the segment they quote:
//! "packet too big" signals for path MTU discovery (ICMPv4 Destination
//! Unreachable, Fragmentation Needed, RFC 792 with the next-hop MTU of RFC
//! 1191 §4; ICMPv6 Packet Too Big, RFC 4443 §3.2) and the other
//! Destination Unreachable messages (RFC 792, RFC 1812 §5.2.7.1, RFC 4443
//! §3.1), sorted into what a connection attempt reports.
//!
//! Only what the quote says is parsed here; whether it is believable (the
//! quoted sequence number must be in flight, RFC 5927 §4.1) and what it
//! does to a connection (RFC 1122 §4.2.3.9, RFC 5461) are for the TCP
//! connection it names to decide.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::icmp::{self, Icmpv4Message, Icmpv6Message};
use crate::ip::IpProtocol;
use crate::packet::{Frame, Network, Transport};

/// ICMPv4 Destination Unreachable code 4: fragmentation needed and DF set.
const FRAG_NEEDED: u8 = 4;
/// Bytes of the quoted TCP header needed: ports and sequence number.
const QUOTED_TCP: usize = 8;

/// What a Destination Unreachable message says could not be reached, as
/// Linux reports it to a connection attempt (`icmp_err_convert`,
/// `icmpv6_err_convert`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unreachable {
    /// No route to the network (ICMPv4 codes 0, 6, 11; ICMPv6 code 0):
    /// `ENETUNREACH`.
    Network,
    /// The host did not answer on its link, or is out of the source's
    /// scope (ICMPv4 codes 1, 5, 7, 8, 12; ICMPv6 codes 2, 3):
    /// `EHOSTUNREACH`.
    Host,
    /// Nothing listens there: the port (ICMPv4 code 3, ICMPv6 code 4) or
    /// the protocol (ICMPv4 code 2) is unreachable: `ECONNREFUSED`.
    Refused,
    /// A filter refused it (communication administratively prohibited:
    /// ICMPv4 codes 9, 10, 13, 14, 15; ICMPv6 codes 1, 5, 6), or a router
    /// refused the packet for its headers (ICMPv6 codes 7, error in a
    /// source routing header, RFC 6554 §6.3, and 8, headers too long, RFC
    /// 8883 §3.1: every packet so built is refused on that path).
    Prohibited,
}

impl Unreachable {
    /// The ICMPv4 Destination Unreachable `code`'s meaning (RFC 792, RFC
    /// 1122 §3.2.2.1, RFC 1812 §5.2.7.1); `None` for fragmentation needed
    /// (a path MTU signal) and codes no RFC assigns.
    pub fn of_v4(code: u8) -> Option<Unreachable> {
        Some(match code {
            0 | 6 | 11 => Unreachable::Network,
            1 | 5 | 7 | 8 | 12 => Unreachable::Host,
            2 | 3 => Unreachable::Refused,
            9 | 10 | 13..=15 => Unreachable::Prohibited,
            _ => return None,
        })
    }

    /// The ICMPv6 Destination Unreachable `code`'s meaning (RFC 4443
    /// §3.1, RFC 6554 §6.3's code 7, RFC 8883 §3.1's code 8); `None` for
    /// codes no RFC assigns. Codes 7 and 8 end a connect as Linux's
    /// `tcp_v6_err` ends it (`icmpv6_err_convert`: any code past
    /// REJECT_ROUTE, 6, is fatal, `EPROTO`); told as `Prohibited`, the
    /// path's refusal of the packet as built.
    pub fn of_v6(code: u8) -> Option<Unreachable> {
        Some(match code {
            0 => Unreachable::Network,
            2 | 3 => Unreachable::Host,
            4 => Unreachable::Refused,
            1 | 5..=8 => Unreachable::Prohibited,
            _ => return None,
        })
    }
}

/// What an ICMP error about one of our TCP segments says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpErrorKind {
    /// "Packet too big": the MTU the sender of the message reports (0
    /// when an ICMPv4 router predates RFC 1191 and reports none).
    TooBig {
        /// The reported MTU.
        mtu: u32,
    },
    /// Destination unreachable, for the reason given.
    Unreachable {
        /// What could not be reached ([`Unreachable::of_v4`],
        /// [`Unreachable::of_v6`]).
        what: Unreachable,
        /// The message's code as received (ICMPv4 or ICMPv6, as the
        /// quoted segment's family): the grouping into `what` merges codes
        /// that TCP tells apart (RFC 6069 §3 takes only some of them as a
        /// connectivity disruption).
        code: u8,
    },
}

/// A parsed ICMP error about a TCP segment we sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpError {
    /// What the message says.
    pub kind: IcmpErrorKind,
    /// The quoted segment's source: our side of the connection.
    pub local: SocketAddr,
    /// The quoted segment's destination: the peer.
    pub remote: SocketAddr,
    /// The quoted segment's sequence number.
    pub seq: u32,
}

/// The ICMP error `frame` carries, if it is a "packet too big" or a
/// destination unreachable that quotes a TCP segment (the frame's
/// checksums were verified by the classifier; the quote has none to
/// check). `None` for any other frame.
pub fn icmp_error(frame: &Frame<'_>) -> Option<IcmpError> {
    let icmp = frame.l4();
    let quoted = icmp.get(icmp::HEADER_LEN..)?;
    let (kind, (local, remote, tcp)) = match (&frame.network, frame.transport) {
        (
            Network::Ipv4(_),
            Transport::Icmpv4 {
                msg_type: Icmpv4Message::DstUnreachable,
                code,
            },
        ) => {
            let kind = if code == FRAG_NEEDED {
                IcmpErrorKind::TooBig {
                    mtu: u32::from(be16(icmp, 6)?),
                }
            } else {
                IcmpErrorKind::Unreachable {
                    what: Unreachable::of_v4(code)?,
                    code,
                }
            };
            (kind, quoted_v4(quoted)?)
        }
        (
            Network::Ipv6(_),
            Transport::Icmpv6 {
                msg_type: Icmpv6Message::PktTooBig,
                code: 0,
            },
        ) => (
            IcmpErrorKind::TooBig {
                mtu: be32(icmp, 4)?,
            },
            quoted_v6(quoted)?,
        ),
        (
            Network::Ipv6(_),
            Transport::Icmpv6 {
                msg_type: Icmpv6Message::DstUnreachable,
                code,
            },
        ) => (
            IcmpErrorKind::Unreachable {
                what: Unreachable::of_v6(code)?,
                code,
            },
            quoted_v6(quoted)?,
        ),
        _ => return None,
    };
    let tcp = tcp.get(..QUOTED_TCP)?;
    Some(IcmpError {
        kind,
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

    fn parsed(f: &[u8]) -> Option<IcmpError> {
        icmp_error(&parse_frame(f).unwrap())
    }

    #[test]
    fn fragmentation_needed_and_packet_too_big_name_the_quoted_segment() {
        let f = icmp_frame(false, 3, 4, [0, 0, 0x05, 0x78], &quote_v4());
        let t = parsed(&f).unwrap();
        assert_eq!(t.kind, IcmpErrorKind::TooBig { mtu: 1400 });
        assert_eq!(t.local, "10.99.0.1:40001".parse().unwrap());
        assert_eq!(t.remote, "10.99.0.2:80".parse().unwrap());
        assert_eq!(t.seq, 7);
        let f = icmp_frame(true, 2, 0, 1280u32.to_be_bytes(), &quote_v6());
        let t = parsed(&f).unwrap();
        assert_eq!(t.kind, IcmpErrorKind::TooBig { mtu: 1280 });
        assert_eq!(t.local, "[fd99::1]:40001".parse().unwrap());
        assert_eq!(t.remote, "[fd99::2]:80".parse().unwrap());
    }

    /// Every assigned Destination Unreachable code of either version is
    /// sorted as Linux reports it to a connect; unassigned ones are not
    /// signals.
    #[test]
    fn destination_unreachable_codes_name_what_was_unreachable() {
        use Unreachable::*;
        let v4 = [
            (0, Network),
            (1, Host),
            (2, Refused),
            (3, Refused),
            (5, Host),
            (6, Network),
            (7, Host),
            (8, Host),
            (9, Prohibited),
            (10, Prohibited),
            (11, Network),
            (12, Host),
            (13, Prohibited),
            (14, Prohibited),
            (15, Prohibited),
        ];
        for (code, what) in v4 {
            let t = parsed(&icmp_frame(false, 3, code, [0; 4], &quote_v4())).unwrap();
            assert_eq!(
                t.kind,
                IcmpErrorKind::Unreachable { what, code },
                "v4 code {code}"
            );
            assert_eq!((t.local.port(), t.remote.port(), t.seq), (40001, 80, 7));
        }
        assert_eq!(parsed(&icmp_frame(false, 3, 16, [0; 4], &quote_v4())), None);
        let v6 = [
            (0, Network),
            (1, Prohibited),
            (2, Host),
            (3, Host),
            (4, Refused),
            (5, Prohibited),
            (6, Prohibited),
            // RFC 6554 §6.3, RFC 8883 §3.1: the path refuses the headers.
            (7, Prohibited),
            (8, Prohibited),
        ];
        for (code, what) in v6 {
            let t = parsed(&icmp_frame(true, 1, code, [0; 4], &quote_v6())).unwrap();
            assert_eq!(
                t.kind,
                IcmpErrorKind::Unreachable { what, code },
                "v6 code {code}"
            );
            assert_eq!(t.remote, "[fd99::2]:80".parse().unwrap());
        }
        assert_eq!(parsed(&icmp_frame(true, 1, 9, [0; 4], &quote_v6())), None);
    }

    #[test]
    fn other_messages_and_short_or_foreign_quotes_are_not_signals() {
        let q = quote_v4();
        // Time exceeded and a redirect quote our segments too: not errors
        // a connection acts on.
        for ty in [5, 11, 12] {
            let f = icmp_frame(false, ty, 0, [0, 0, 5, 0x78], &q);
            assert_eq!(parsed(&f), None, "type {ty}");
        }
        // A quote cut inside the TCP header, at every length, for a too
        // big and an unreachable.
        for code in [3, 4] {
            for cut in 0..q.len() {
                let f = icmp_frame(false, 3, code, [0, 0, 5, 0x78], &q[..cut]);
                assert_eq!(parsed(&f), None, "{code} {cut}");
            }
        }
        // A quoted UDP datagram.
        let mut udp = q.clone();
        udp[9] = 17;
        let f = icmp_frame(false, 3, 4, [0, 0, 5, 0x78], &udp);
        assert_eq!(parsed(&f), None);
        let f = icmp_frame(false, 3, 3, [0, 0, 5, 0x78], &udp);
        assert_eq!(parsed(&f), None);
        // An ICMPv6 message of another type, and a v4 quote in a v6 message.
        let f = icmp_frame(true, 3, 0, 1280u32.to_be_bytes(), &quote_v6());
        assert_eq!(parsed(&f), None);
        let f = icmp_frame(true, 2, 0, 1280u32.to_be_bytes(), &q);
        assert_eq!(parsed(&f), None);
        let f = icmp_frame(true, 1, 4, [0; 4], &q);
        assert_eq!(parsed(&f), None);
    }

    /// A quoted later fragment (offset not 0) carries no TCP header: the
    /// bytes after its IP header are no ports or sequence number.
    #[test]
    fn a_quoted_later_fragment_is_not_a_signal() {
        let mut q = quote_v4();
        q[6..8].copy_from_slice(&[0x00, 0xb9]);
        let f = icmp_frame(false, 3, 4, [0, 0, 5, 0x78], &q);
        assert_eq!(parsed(&f), None);
        let f = icmp_frame(false, 3, 3, [0, 0, 5, 0x78], &q);
        assert_eq!(parsed(&f), None);
    }
}
