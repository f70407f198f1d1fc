//! Types shared by IPv4 (RFC 791) and IPv6 (RFC 8200): protocol numbers and address pairs.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP protocol number / IPv6 "Next Header" value (IANA "Assigned Internet Protocol
/// Numbers"; RFC 791 §3.1 "Protocol", RFC 8200 §3 "Next Header").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    /// 0: IPv6 Hop-by-Hop Options (RFC 8200 §4.3).
    HopByHop,
    /// 1: ICMP (RFC 792).
    Icmp,
    /// 6: TCP (RFC 9293).
    Tcp,
    /// 17: UDP (RFC 768).
    Udp,
    /// 43: IPv6 Routing header (RFC 8200 §4.4).
    Ipv6Route,
    /// 44: IPv6 Fragment header (RFC 8200 §4.5).
    Ipv6Frag,
    /// 50: Encapsulating Security Payload (RFC 4303).
    Esp,
    /// 51: Authentication Header (RFC 4302).
    Ah,
    /// 58: ICMPv6 (RFC 4443).
    Icmpv6,
    /// 59: IPv6 No Next Header (RFC 8200 §4.7).
    Ipv6NoNxt,
    /// 60: IPv6 Destination Options (RFC 8200 §4.6).
    Ipv6Opts,
    /// Any other protocol number.
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    #[inline]
    fn from(v: u8) -> Self {
        match v {
            0 => IpProtocol::HopByHop,
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            43 => IpProtocol::Ipv6Route,
            44 => IpProtocol::Ipv6Frag,
            50 => IpProtocol::Esp,
            51 => IpProtocol::Ah,
            58 => IpProtocol::Icmpv6,
            59 => IpProtocol::Ipv6NoNxt,
            60 => IpProtocol::Ipv6Opts,
            other => IpProtocol::Unknown(other),
        }
    }
}

impl From<IpProtocol> for u8 {
    #[inline]
    fn from(p: IpProtocol) -> u8 {
        match p {
            IpProtocol::HopByHop => 0,
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Ipv6Route => 43,
            IpProtocol::Ipv6Frag => 44,
            IpProtocol::Esp => 50,
            IpProtocol::Ah => 51,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Ipv6NoNxt => 59,
            IpProtocol::Ipv6Opts => 60,
            IpProtocol::Unknown(v) => v,
        }
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpProtocol::HopByHop => f.write_str("Hop-by-Hop"),
            IpProtocol::Icmp => f.write_str("ICMP"),
            IpProtocol::Tcp => f.write_str("TCP"),
            IpProtocol::Udp => f.write_str("UDP"),
            IpProtocol::Ipv6Route => f.write_str("IPv6-Route"),
            IpProtocol::Ipv6Frag => f.write_str("IPv6-Frag"),
            IpProtocol::Esp => f.write_str("ESP"),
            IpProtocol::Ah => f.write_str("AH"),
            IpProtocol::Icmpv6 => f.write_str("ICMPv6"),
            IpProtocol::Ipv6NoNxt => f.write_str("IPv6-NoNxt"),
            IpProtocol::Ipv6Opts => f.write_str("IPv6-Opts"),
            IpProtocol::Unknown(v) => write!(f, "protocol {v}"),
        }
    }
}

/// The source and destination addresses of an IP packet: what an upper-layer checksum's
/// pseudo-header needs (RFC 768, RFC 9293 §3.1, RFC 8200 §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpPair {
    /// IPv4 source and destination.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
    /// IPv6 source and (final) destination.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address (the final one if a Routing header is present).
        dst: Ipv6Addr,
    },
}

impl IpPair {
    /// Source address.
    #[inline]
    pub fn src(&self) -> IpAddr {
        match *self {
            IpPair::V4 { src, .. } => IpAddr::V4(src),
            IpPair::V6 { src, .. } => IpAddr::V6(src),
        }
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> IpAddr {
        match *self {
            IpPair::V4 { dst, .. } => IpAddr::V4(dst),
            IpPair::V6 { dst, .. } => IpAddr::V6(dst),
        }
    }

    /// The same pair with source and destination swapped (the addresses of a reply).
    #[inline]
    pub fn reversed(&self) -> IpPair {
        match *self {
            IpPair::V4 { src, dst } => IpPair::V4 { src: dst, dst: src },
            IpPair::V6 { src, dst } => IpPair::V6 { src: dst, dst: src },
        }
    }
}

/// Fragmentation information of an IP packet that is a fragment (IPv4: RFC 791 §3.2 MF flag
/// and offset; IPv6: Fragment header, RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentInfo {
    /// Identification (16 bits in IPv4, 32 in IPv6).
    pub ident: u32,
    /// Offset of this fragment's data in the original payload, in bytes.
    pub offset: u16,
    /// More Fragments flag.
    pub more: bool,
}

impl FragmentInfo {
    /// Whether this is the first fragment (offset 0): only that one carries the upper-layer
    /// header.
    #[inline]
    pub const fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// Whether `src` cannot be a datagram's source (RFC 1122 §3.2.1.3: a host
/// MUST silently discard a datagram whose source is a broadcast or
/// multicast address; "this network" (0/8) and loopback (127/8) are not
/// valid sources on a wire either; RFC 4291 §2.7 and §2.5.2-3 for IPv6's
/// multicast, unspecified and loopback). Linux drops the same as martian
/// sources (`ip_route_input_slow`); 240/4 is not among them, as there. An
/// IPv4-mapped IPv6 source (`::ffff:0:0/96`) never appears on a wire (RFC
/// 4291 §2.5.5.2; Linux's `ip6_rcv_core` drops it).
#[inline]
pub fn is_martian_source(src: IpAddr) -> bool {
    match src {
        IpAddr::V4(a) => {
            let first = a.octets()[0];
            first == 0 || first == 127 || (224..240).contains(&first) || a.is_broadcast()
        }
        IpAddr::V6(a) => {
            a.is_multicast()
                || a.is_unspecified()
                || a.is_loopback()
                || a.to_ipv4_mapped().is_some()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn martian_sources() {
        for a in [
            "0.1.2.3",
            "127.0.0.1",
            "224.0.0.1",
            "239.255.255.255",
            "255.255.255.255",
            "ff02::1",
            "::",
            "::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_martian_source(a.parse().unwrap()), "{a}");
        }
        for a in [
            "10.0.0.1",
            "240.0.0.1",
            "fe80::1",
            "2001:db8::1",
            "::10.0.0.1",
        ] {
            assert!(!is_martian_source(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn protocol_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(v)), v);
        }
        assert_eq!(IpProtocol::from(6), IpProtocol::Tcp);
        assert_eq!(IpProtocol::from(200), IpProtocol::Unknown(200));
        assert_eq!(IpProtocol::Udp.to_string(), "UDP");
    }

    #[test]
    fn pair_reversed() {
        let p = IpPair::V4 {
            src: Ipv4Addr::new(1, 2, 3, 4),
            dst: Ipv4Addr::new(5, 6, 7, 8),
        };
        assert_eq!(p.reversed().src(), IpAddr::V4(Ipv4Addr::new(5, 6, 7, 8)));
        assert_eq!(p.reversed().reversed(), p);
    }

    #[test]
    fn broadcast_multicast_zero_and_loopback_sources_are_martian() {
        for bad in [
            "255.255.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "ff02::1",
            "::",
            "::1",
        ] {
            assert!(is_martian_source(bad.parse().unwrap()), "{bad}");
        }
        for good in [
            "10.0.0.1",
            "192.0.2.7",
            "223.255.255.255",
            "240.0.0.1",
            "fd00::1",
            "2001:db8::1",
        ] {
            assert!(!is_martian_source(good.parse().unwrap()), "{good}");
        }
    }
}
