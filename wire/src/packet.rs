//! The per-packet classifier and the in-place builders of the data path.
//!
//! [`parse_frame`] walks Ethernet (+ up to two VLAN tags) → ARP | IPv4 | IPv6 (+ extension
//! headers) → TCP | UDP | ICMPv4 | ICMPv6 and returns offsets into the frame plus the parsed
//! headers, without copying or allocating. IP fragments are reported, not reassembled: the
//! caller hands them to the kernel.
//!
//! The builders write headers *in place* into a UMEM frame around a payload or TCP segment
//! that is already at its final offset, so nothing is copied on the transmit path.

#[cfg(feature = "arp")]
use super::arp::{self, ArpOperation, ArpPacket, ArpRepr};
use super::be16;
use super::checksum::{self, ChecksumPolicy};
use super::ethernet::{EtherType, EthernetFrame, EthernetRepr};
#[cfg(any(feature = "arp", feature = "icmp"))]
use super::ethernet::{EthernetAddress, VlanTags};
#[cfg(feature = "icmp")]
use super::icmp::{
    Icmpv4Message, Icmpv4Packet, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, NdpAdvert,
};
use super::ip::{FragmentInfo, IpPair, IpProtocol};
use super::ipv4::{self, Ipv4Packet, Ipv4Repr};
use super::ipv6::{self, walk_extension_headers, Ipv6Packet, Ipv6Repr};
#[cfg(feature = "icmp")]
use super::put16;
use super::tcp::{TcpPacket, TcpRepr};
use super::udp::{self, UdpPacket, UdpRepr};
use super::{Layer, NoAnswer, Result, WireError};
use core::ops::Range;
#[cfg(feature = "arp")]
use std::net::Ipv4Addr;
#[cfg(feature = "icmp")]
use std::net::Ipv6Addr;

/// Offset of a TCP segment in an untagged Ethernet + IPv4 (no options) frame.
pub const ETH_IPV4_TCP_OFFSET: usize = 14 + 20;
/// Offset of a TCP segment in an untagged Ethernet + IPv6 frame.
pub const ETH_IPV6_TCP_OFFSET: usize = 14 + 40;
/// Offset of the UDP payload in an untagged Ethernet + IPv4 (no options) + UDP frame.
pub const ETH_IPV4_UDP_PAYLOAD_OFFSET: usize = 14 + 20 + 8;
/// Offset of the UDP payload in an untagged Ethernet + IPv6 + UDP frame.
pub const ETH_IPV6_UDP_PAYLOAD_OFFSET: usize = 14 + 40 + 8;
/// Hop limit / TTL written by the turn-around helpers.
pub const REPLY_TTL: u8 = ipv4::DEFAULT_TTL;

/// The network layer of a classified frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// An Ethernet/IPv4 ARP packet (RFC 826). Without the `arp` feature ARP frames are
    /// [`Network::Other`].
    #[cfg(feature = "arp")]
    Arp(ArpRepr),
    /// An IPv4 packet whose header checksum verified (RFC 791).
    Ipv4(Ipv4Repr),
    /// An IPv6 packet (RFC 8200); extension headers were walked.
    Ipv6(Ipv6Repr),
    /// Any other EtherType: not parsed.
    Other(EtherType),
}

/// The transport layer of a classified frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A TCP segment (RFC 9293): the whole header, options parsed, so that the receiver
    /// never parses it again. The payload is [`Frame::payload`].
    Tcp(TcpRepr),
    /// A UDP datagram (RFC 768).
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
    },
    /// An ICMPv4 message (RFC 792). Without the `icmp` feature ICMP is [`Transport::Other`].
    #[cfg(feature = "icmp")]
    Icmpv4 {
        /// Type.
        msg_type: Icmpv4Message,
        /// Code.
        code: u8,
    },
    /// An ICMPv6 message (RFC 4443). Without the `icmp` feature ICMPv6 is
    /// [`Transport::Other`].
    #[cfg(feature = "icmp")]
    Icmpv6 {
        /// Type.
        msg_type: Icmpv6Message,
        /// Code.
        code: u8,
    },
    /// An IP packet of another protocol (or ESP, No Next Header …): not parsed.
    Other,
    /// No transport layer was parsed: not IP, or an IP fragment.
    None,
}

/// A classified frame: parsed headers and offsets into [`Frame::bytes`].
///
/// Offsets: the Ethernet header starts at 0; the network header at `l3_offset`; the
/// upper-layer header at `l4_offset` (after IPv4 options and IPv6 extension headers); the IP
/// datagram ends at `l3_end` (Ethernet padding after it is ignored); the application
/// payload (after the TCP/UDP/ICMP header) is `payload`. For non-IP frames `l4_offset ==
/// l3_end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The whole frame as received.
    pub bytes: &'a [u8],
    /// Ethernet header, VLAN tags and inner EtherType.
    pub ethernet: EthernetRepr,
    /// Offset of the network header (14, 18 or 22).
    pub l3_offset: usize,
    /// End of the network packet (IPv4 total length, IPv6 40 + payload length, ARP 28).
    pub l3_end: usize,
    /// Parsed network header.
    pub network: Network,
    /// Offset of the upper-layer header.
    pub l4_offset: usize,
    /// Upper-layer protocol (IP only).
    pub protocol: Option<IpProtocol>,
    /// Set when the packet is an IP fragment (then `transport` is [`Transport::None`]).
    pub fragment: Option<FragmentInfo>,
    /// Parsed transport header.
    pub transport: Transport,
    /// Application payload range within `bytes`.
    pub payload: Range<usize>,
}

impl<'a> Frame<'a> {
    /// The network packet (`l3_offset..l3_end`).
    #[inline]
    pub fn l3(&self) -> &'a [u8] {
        &self.bytes[self.l3_offset..self.l3_end]
    }

    /// The upper-layer segment: header and payload (`l4_offset..l3_end`).
    #[inline]
    pub fn l4(&self) -> &'a [u8] {
        &self.bytes[self.l4_offset..self.l3_end]
    }

    /// The application payload. Always inlined: a bounds-checked slice,
    /// on every received segment's path (the data path's receive had it
    /// out of line, +11 instructions a frame).
    #[inline(always)]
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.payload.clone()]
    }

    /// Whether the packet is an IP fragment.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.fragment.is_some()
    }

    /// Source and destination IP addresses, for IP packets.
    #[inline]
    pub fn ip_pair(&self) -> Option<IpPair> {
        match &self.network {
            Network::Ipv4(r) => Some(r.addrs()),
            Network::Ipv6(r) => Some(r.addrs()),
            _ => None,
        }
    }

    /// `(source, destination)` ports for TCP and UDP.
    #[inline]
    pub fn ports(&self) -> Option<(u16, u16)> {
        match self.transport {
            Transport::Tcp(TcpRepr {
                src_port, dst_port, ..
            })
            | Transport::Udp { src_port, dst_port } => Some((src_port, dst_port)),
            _ => None,
        }
    }
}

/// Classifies a frame, verifying every checksum ([`ChecksumPolicy::VERIFY_ALL`]).
#[inline]
pub fn parse_frame(frame: &[u8]) -> Result<Frame<'_>> {
    parse_frame_with(frame, ChecksumPolicy::VERIFY_ALL)
}

/// Classifies a frame. The IPv4 header checksum is always verified; TCP/UDP/ICMP checksums
/// when `policy.verify_l4`. Errors name the layer that failed; unknown EtherTypes and IP
/// protocols are not errors ([`Network::Other`], [`Transport::Other`]).
pub fn parse_frame_with(frame: &[u8], policy: ChecksumPolicy) -> Result<Frame<'_>> {
    let eth = EthernetFrame::new_checked(frame)?;
    let ethernet = EthernetRepr::parse(&eth)?;
    let l3_offset = ethernet.header_len();
    let l3 = &frame[l3_offset..];
    let mut f = Frame {
        bytes: frame,
        ethernet,
        l3_offset,
        l3_end: frame.len(),
        network: Network::Other(ethernet.ethertype),
        l4_offset: frame.len(),
        protocol: None,
        fragment: None,
        transport: Transport::None,
        payload: l3_offset..frame.len(),
    };
    match ethernet.ethertype {
        #[cfg(feature = "arp")]
        EtherType::Arp => {
            let p = ArpPacket::new_checked(l3)?;
            f.network = Network::Arp(ArpRepr::parse(&p)?);
            f.l3_end = l3_offset + arp::PACKET_LEN;
            f.l4_offset = f.l3_end;
            f.payload = f.l3_end..f.l3_end;
        }
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(l3)?;
            let r = Ipv4Repr::parse(&p)?;
            f.network = Network::Ipv4(r);
            f.l3_end = l3_offset + p.total_len();
            f.l4_offset = l3_offset + p.header_len();
            f.protocol = Some(r.protocol);
            if r.is_fragment() {
                f.fragment = Some(FragmentInfo {
                    ident: u32::from(r.ident),
                    offset: r.frag_offset,
                    more: r.more_frags,
                });
                f.payload = f.l4_offset..f.l3_end;
            } else {
                parse_l4(&mut f, r.addrs(), policy)?;
            }
        }
        EtherType::Ipv6 => {
            let p = Ipv6Packet::new_checked(l3)?;
            let r = Ipv6Repr::parse(&p)?;
            let up = walk_extension_headers(r.next_header, p.payload())?;
            f.network = Network::Ipv6(r);
            f.l3_end = l3_offset + ipv6::HEADER_LEN + r.payload_len;
            f.l4_offset = l3_offset + ipv6::HEADER_LEN + up.offset;
            f.protocol = Some(up.protocol);
            f.fragment = up.fragment;
            if up.fragment.is_some() {
                f.payload = f.l4_offset..f.l3_end;
            } else {
                parse_l4(&mut f, r.addrs(), policy)?;
            }
        }
        _ => {}
    }
    Ok(f)
}

/// Parses the upper layer of a non-fragment IP packet into `f`.
#[inline]
fn parse_l4(f: &mut Frame<'_>, addrs: IpPair, policy: ChecksumPolicy) -> Result<()> {
    let seg = &f.bytes[f.l4_offset..f.l3_end];
    #[cfg(feature = "icmp")]
    let v6 = matches!(addrs, IpPair::V6 { .. });
    let (transport, hl, end) = match f.protocol {
        Some(IpProtocol::Tcp) => {
            let t = TcpPacket::new_checked(seg)?;
            if policy.verify_l4 {
                checksum::check(t.verify_checksum(&addrs), Layer::Tcp)?;
            }
            // Built where it stays (the header is most frames' transport,
            // and moving it through temporaries costs more than parsing it).
            f.transport = Transport::Tcp(TcpRepr::fixed_header(&t));
            if let Transport::Tcp(r) = &mut f.transport {
                r.options.parse_into(t.options());
            }
            f.payload = f.l4_offset + t.header_len()..f.l4_offset + seg.len();
            return Ok(());
        }
        Some(IpProtocol::Udp) => {
            let u = UdpPacket::new_checked(seg)?;
            let r = UdpRepr::parse(&u, if policy.verify_l4 { Some(&addrs) } else { None })?;
            let tr = Transport::Udp {
                src_port: r.src_port,
                dst_port: r.dst_port,
            };
            (tr, udp::HEADER_LEN, u.len())
        }
        #[cfg(feature = "icmp")]
        Some(IpProtocol::Icmp) if !v6 => {
            let p = Icmpv4Packet::new_checked(seg)?;
            if policy.verify_l4 {
                checksum::check(p.verify_checksum(), Layer::Icmpv4)?;
            }
            let tr = Transport::Icmpv4 {
                msg_type: p.msg_type(),
                code: p.msg_code(),
            };
            (tr, super::icmp::HEADER_LEN, seg.len())
        }
        #[cfg(feature = "icmp")]
        Some(IpProtocol::Icmpv6) if v6 => {
            let p = Icmpv6Packet::new_checked(seg)?;
            if policy.verify_l4 {
                checksum::check(
                    checksum::verify_l4(&addrs, IpProtocol::Icmpv6, seg),
                    Layer::Icmpv6,
                )?;
            }
            let tr = Transport::Icmpv6 {
                msg_type: p.msg_type(),
                code: p.msg_code(),
            };
            (tr, super::icmp::HEADER_LEN, seg.len())
        }
        _ => (Transport::Other, 0, seg.len()),
    };
    f.transport = transport;
    f.payload = f.l4_offset + hl..f.l4_offset + end;
    Ok(())
}

// -------------------------------------------------------------------------------------------
// Builders
// -------------------------------------------------------------------------------------------

#[inline(always)]
fn room(buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(WireError::BufferTooSmall {
            needed,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Writes Ethernet + IPv4 headers for an upper-layer segment of `l4_len` bytes; returns
/// `(l4_offset, frame_len)`. The IPv4 checksum is filled; the upper layer's is the caller's.
#[inline(always)]
pub fn emit_eth_ipv4(
    buf: &mut [u8],
    eth: &EthernetRepr,
    ip: &Ipv4Repr,
    protocol: IpProtocol,
    l4_len: usize,
) -> Result<(usize, usize)> {
    let ip = Ipv4Repr {
        protocol,
        payload_len: l4_len,
        ..*ip
    };
    let eth = EthernetRepr {
        ethertype: EtherType::Ipv4,
        ..*eth
    };
    let l3 = eth.header_len();
    let l4 = l3 + ip.header_len();
    let end = l4 + l4_len;
    room(buf, end)?;
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..l3]));
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[l3..l4]))?;
    Ok((l4, end))
}

/// Writes Ethernet + IPv6 headers for an upper-layer segment of `l4_len` bytes; returns
/// `(l4_offset, frame_len)`. The upper layer's checksum is the caller's.
#[inline]
pub fn emit_eth_ipv6(
    buf: &mut [u8],
    eth: &EthernetRepr,
    ip: &Ipv6Repr,
    next_header: IpProtocol,
    l4_len: usize,
) -> Result<(usize, usize)> {
    let ip = Ipv6Repr {
        next_header,
        payload_len: l4_len,
        ..*ip
    };
    let eth = EthernetRepr {
        ethertype: EtherType::Ipv6,
        ..*eth
    };
    let l3 = eth.header_len();
    let l4 = l3 + ipv6::HEADER_LEN;
    let end = l4 + l4_len;
    room(buf, end)?;
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..l3]));
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut buf[l3..l4]))?;
    Ok((l4, end))
}

/// Writes Ethernet, IPv4 and UDP headers in front of a UDP payload of `payload_len` bytes that
/// the caller already placed at `eth.header_len() + ip.header_len() + 8`
/// ([`ETH_IPV4_UDP_PAYLOAD_OFFSET`] = 42 when untagged without options), and computes the
/// IPv4 and UDP checksums. `eth.ethertype`, `ip.protocol` and `ip.payload_len` are set by the
/// builder. Returns the frame length.
#[inline]
pub fn emit_eth_ipv4_udp(
    buf: &mut [u8],
    eth: &EthernetRepr,
    ip: &Ipv4Repr,
    udp: &UdpRepr,
    payload_len: usize,
) -> Result<usize> {
    let (l4, end) = emit_eth_ipv4(buf, eth, ip, IpProtocol::Udp, udp::HEADER_LEN + payload_len)?;
    let addrs = ip.addrs();
    udp.emit(
        &mut UdpPacket::new_unchecked(&mut buf[l4..end]),
        payload_len,
        &addrs,
    )?;
    Ok(end)
}

/// IPv6 counterpart of [`emit_eth_ipv4_udp`] (payload at [`ETH_IPV6_UDP_PAYLOAD_OFFSET`] =
/// 62 when untagged).
#[inline]
pub fn emit_eth_ipv6_udp(
    buf: &mut [u8],
    eth: &EthernetRepr,
    ip: &Ipv6Repr,
    udp: &UdpRepr,
    payload_len: usize,
) -> Result<usize> {
    let (l4, end) = emit_eth_ipv6(buf, eth, ip, IpProtocol::Udp, udp::HEADER_LEN + payload_len)?;
    let addrs = ip.addrs();
    udp.emit(
        &mut UdpPacket::new_unchecked(&mut buf[l4..end]),
        payload_len,
        &addrs,
    )?;
    Ok(end)
}

/// Writes Ethernet and IPv4 headers in front of a TCP segment of `tcp_len` bytes that
/// `flowlane-tcp` already wrote at `eth.header_len() + ip.header_len()`
/// ([`ETH_IPV4_TCP_OFFSET`] = 34 when untagged without options) with a zero checksum, and
/// fills the TCP checksum (RFC 9293 §3.1) and the IPv4 header checksum. Returns the frame
/// length.
#[inline(always)]
pub fn emit_eth_ipv4_tcp_headers(
    buf: &mut [u8],
    eth: &EthernetRepr,
    ip: &Ipv4Repr,
    tcp_len: usize,
) -> Result<usize> {
    let (l4, end) = emit_eth_ipv4(buf, eth, ip, IpProtocol::Tcp, tcp_len)?;
    checksum::fill_tcp_checksum(&ip.addrs(), &mut buf[l4..end])?;
    Ok(end)
}

/// IPv6 counterpart of [`emit_eth_ipv4_tcp_headers`] (segment at [`ETH_IPV6_TCP_OFFSET`] = 54
/// when untagged).
#[inline]
pub fn emit_eth_ipv6_tcp_headers(
    buf: &mut [u8],
    eth: &EthernetRepr,
    ip: &Ipv6Repr,
    tcp_len: usize,
) -> Result<usize> {
    let (l4, end) = emit_eth_ipv6(buf, eth, ip, IpProtocol::Tcp, tcp_len)?;
    checksum::fill_tcp_checksum(&ip.addrs(), &mut buf[l4..end])?;
    Ok(end)
}

#[cfg(feature = "arp")]
/// Writes an ARP frame: Ethernet header from `vlan`, `arp.source_hardware_addr` and (for a
/// request) broadcast or (otherwise) `arp.target_hardware_addr`. Returns the frame length
/// (not padded to 60 bytes).
#[inline]
pub fn emit_eth_arp(buf: &mut [u8], vlan: VlanTags, arp: &ArpRepr) -> Result<usize> {
    let eth = EthernetRepr {
        dst_addr: if arp.operation == ArpOperation::Request {
            EthernetAddress::BROADCAST
        } else {
            arp.target_hardware_addr
        },
        src_addr: arp.source_hardware_addr,
        vlan,
        ethertype: EtherType::Arp,
    };
    let l3 = eth.header_len();
    let end = l3 + arp::PACKET_LEN;
    room(buf, end)?;
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..l3]));
    arp.emit(&mut ArpPacket::new_unchecked(&mut buf[l3..end]));
    Ok(end)
}

#[cfg(feature = "arp")]
/// If `frame` is an ARP request for `our_ip`, the reply to send (RFC 826), in the same VLAN.
#[inline]
pub fn arp_reply_for(
    frame: &Frame<'_>,
    our_mac: EthernetAddress,
    our_ip: Ipv4Addr,
) -> Option<(VlanTags, ArpRepr)> {
    match frame.network {
        Network::Arp(req) => req
            .reply_to(our_mac, our_ip)
            .map(|r| (frame.ethernet.vlan, r)),
        _ => None,
    }
}

#[cfg(feature = "arp")]
/// Answers an ARP request for `our_ip` in place: the received frame is rewritten into the reply
/// (same VLAN tags). Returns the length to transmit, `None` if the frame is not a request
/// for us (nothing is written then).
pub fn answer_arp(
    frame: &mut [u8],
    our_mac: EthernetAddress,
    our_ip: Ipv4Addr,
) -> Result<Option<usize>> {
    let reply = arp_reply_for(&parse_frame(frame)?, our_mac, our_ip);
    match reply {
        Some((vlan, r)) => emit_eth_arp(frame, vlan, &r).map(Some),
        None => Ok(None),
    }
}

#[cfg(feature = "icmp")]
/// If `frame` is a valid Neighbor Solicitation (RFC 4861 §7.1.1) for an address `is_ours`
/// accepts, the Neighbor Advertisement to send (§7.2.4). Errors are those of parsing the
/// ICMPv6 message (checksum, malformed options).
pub fn ndp_advert_for(
    frame: &Frame<'_>,
    our_mac: EthernetAddress,
    is_ours: impl FnOnce(&Ipv6Addr) -> bool,
) -> Result<Option<NdpAdvert>> {
    let (Network::Ipv6(ip), Transport::Icmpv6 { msg_type, .. }) = (&frame.network, frame.transport)
    else {
        return Ok(None);
    };
    if msg_type != Icmpv6Message::NeighborSolicit {
        return Ok(None);
    }
    let p = Icmpv6Packet::new_checked(frame.l4())?;
    let ns = Icmpv6Repr::parse(&ip.src_addr, &ip.dst_addr, &p)?;
    Ok(NdpAdvert::for_solicit(
        &ns,
        &ip.src_addr,
        &ip.dst_addr,
        ip.hop_limit,
        frame.ethernet.src_addr,
        our_mac,
        is_ours,
    ))
}

#[cfg(feature = "icmp")]
/// Writes a Neighbor Advertisement frame (Ethernet in `vlan`, IPv6 with hop limit 255 as
/// RFC 4861 §7.1.2 requires, NA with Target Link-Layer Address option). Returns the frame
/// length.
pub fn emit_ndp_advert(buf: &mut [u8], vlan: VlanTags, adv: &NdpAdvert) -> Result<usize> {
    let icmp = adv.icmp_repr();
    let eth = EthernetRepr {
        dst_addr: adv.dst_mac,
        src_addr: adv.our_mac,
        vlan,
        ethertype: EtherType::Ipv6,
    };
    let ip = Ipv6Repr {
        hop_limit: 255,
        ..Ipv6Repr::new(adv.src_addr, adv.dst_addr, IpProtocol::Icmpv6, 0)
    };
    let (l4, end) = emit_eth_ipv6(buf, &eth, &ip, IpProtocol::Icmpv6, icmp.buffer_len())?;
    icmp.emit(
        &adv.src_addr,
        &adv.dst_addr,
        &mut Icmpv6Packet::new_unchecked(&mut buf[l4..end]),
    )?;
    Ok(end)
}

/// Offsets of a received IP frame that a turn-around helper needs after the parse borrow ends.
struct Turn {
    l3: usize,
    l4: usize,
    end: usize,
    v6: bool,
}

/// Swaps MACs and IP addresses, resets TTL / hop limit and clears the ECN field of a parsed
/// IP frame, in place. The reply is a packet of its own, from a sender with no ECN-capable
/// transport: it goes as Not-ECT (RFC 3168 §5), not with the request's codepoint (a CE mark
/// reflected would be a congestion signal the path back never gave). The IPv4 header checksum
/// is updated incrementally for both changes (RFC 1624); IPv6 has none, and the UDP and ICMPv6
/// pseudo-headers do not cover the traffic class (RFC 8200 §8.1).
#[inline]
fn turn_ip(frame: &mut [u8], t: &Turn) {
    EthernetFrame::new_unchecked(&mut *frame).swap_addrs();
    if t.v6 {
        let mut ip = Ipv6Packet::new_unchecked(&mut frame[t.l3..t.end]);
        ip.swap_addrs();
        ip.set_hop_limit(REPLY_TTL);
        let (tc, flow) = (ip.traffic_class(), ip.flow_label());
        ip.set_version_tc_flow(tc & !ECN_MASK, flow);
    } else {
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[t.l3..t.end]);
        ip.swap_addrs();
        ip.set_ttl_update_checksum(REPLY_TTL);
        let old = be16(ip.header(), 0);
        ip.set_dscp_ecn(ip.dscp(), 0);
        let new = be16(ip.header(), 0);
        ip.set_checksum(checksum::update16(ip.checksum(), old, new));
    }
}

/// Drops an IPv6 request's extension headers from its reply, in place: the upper-layer
/// header and payload (`upper`, its protocol number) moved up behind the fixed header, the
/// Next Header and Payload Length set for them; returns the reply's offsets. What
/// [`ip_turn`] lets through are Hop-by-Hop and Destination Options (RFC 8200 §4.3, §4.6: the
/// request's, for its path and its destination) and an atomic Fragment header (RFC 6946: of
/// the request's sender): reflected, they were options flowlane never chose (a Router Alert
/// its path would act on) and a fragment identification not its own; a host's reply carries
/// none of them (Linux's UDP answers from a fresh header). The upper layer's checksum stays
/// valid: its pseudo-header has the upper-layer length and protocol, not the headers between
/// (RFC 8200 §8.1). An IPv4 frame, or an IPv6 one without extension headers, is unchanged.
#[inline]
fn drop_ipv6_extensions(frame: &mut [u8], t: Turn, upper: IpProtocol) -> Turn {
    let fixed_end = t.l3 + ipv6::HEADER_LEN;
    if !t.v6 || t.l4 == fixed_end {
        return t;
    }
    let upper_len = t.end - t.l4;
    frame.copy_within(t.l4..t.end, fixed_end);
    let mut ip = Ipv6Packet::new_unchecked(&mut frame[t.l3..fixed_end + upper_len]);
    ip.set_next_header(upper);
    // At most the request's payload length: it fits.
    ip.set_payload_len(upper_len as u16);
    Turn {
        l4: fixed_end,
        end: fixed_end + upper_len,
        ..t
    }
}

/// The ECN field (RFC 3168 §5): the low two bits of the IPv4 TOS octet and of the IPv6 traffic
/// class; `00` is Not-ECT.
const ECN_MASK: u8 = 0x03;

/// Turns a received UDP-over-IPv4/IPv6 frame around in place for an echo service: swaps MAC
/// addresses, IP addresses and ports, resets the TTL/hop limit to 64 and the ECN field to
/// Not-ECT (IPv4 header checksum updated incrementally, RFC 1624). The UDP checksum is left as is: the pseudo-header and
/// header sums do not depend on which address/port is source and which destination, so a
/// valid checksum stays valid (and a corrupt one stays detectably corrupt, which is why only
/// the IP header is verified here). An IPv6 request's extension headers (Hop-by-Hop,
/// Destination Options, an atomic Fragment header) are not carried back: the UDP header and
/// payload move up behind the fixed header. Returns the length to transmit (Ethernet padding dropped).
///
/// Fragments are `Fragment`; non-UDP frames, IPv4 packets with options other than EOL/NOP and
/// IPv6 packets with a Routing header are `Unsupported`; a datagram to a group or from a martian
/// source (a group source MAC included) is `NotAnswered`; a datagram from source port 0
/// (RFC 768: no reply expected) is `Malformed`. Which source ports an echo service answers
/// beyond that (its own, the well-known reflectors') is the service's policy, not checked here.
pub fn turn_around_udp(frame: &mut [u8]) -> Result<usize> {
    let t = {
        let f = parse_frame_with(frame, ChecksumPolicy::IP_ONLY)?;
        ip_turn(&f, Layer::Udp)?;
        match f.transport {
            Transport::Udp { src_port: 0, .. } => {
                // RFC 768: a zero source port means "no reply expected"; a reply would also
                // go to the reserved destination port 0.
                return Err(WireError::Malformed {
                    layer: Layer::Udp,
                    what: "source port 0: no reply possible",
                });
            }
            Transport::Udp { .. } => {}
            _ => {
                return Err(WireError::Unsupported {
                    layer: Layer::Udp,
                    what: "not a UDP datagram",
                })
            }
        }
        turn_of(&f)
    };
    turn_ip(frame, &t);
    let t = drop_ipv6_extensions(frame, t, IpProtocol::Udp);
    UdpPacket::new_unchecked(&mut frame[t.l4..t.end]).swap_ports();
    Ok(t.end)
}

/// Checks that a parsed frame is an IP packet a turn-around helper may answer: not a
/// fragment, not sent to a group (a broadcast or multicast MAC or IP destination: the reply's
/// source would be the group, and every host on the segment could aim the echo's replies at a
/// victim; RFC 1122 §3.2.2.6 and RFC 4443 §4.2 leave group echoes unanswered or answered from a
/// unicast address), from a source a reply can go to (a group source MAC is one no station
/// sends from, IEEE Std 802's individual/group bit: the reply, whose destination MAC is the
/// request's source, would go to the whole segment), and with no IPv4 options but EOL and NOP
/// (RFC 791 §3.1: a source route or a record route would have to be reversed or copied into the
/// reply, RFC 1122 §3.2.1.8 and §3.2.2.6, which these in-place helpers do not do; reflected
/// as they are, a source route would steer the reply along the sender's choice of path).
#[inline]
fn ip_turn(f: &Frame<'_>, layer: Layer) -> Result<()> {
    let group_ip = f.ip_pair().is_some_and(|ips| match ips.dst() {
        std::net::IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
        std::net::IpAddr::V6(a) => a.is_multicast(),
    });
    if f.ethernet.dst_addr.is_multicast() || group_ip {
        return Err(WireError::NotAnswered {
            layer,
            why: NoAnswer::GroupDestination,
        });
    }
    if f.ethernet.src_addr.is_multicast()
        || f.ip_pair()
            .is_some_and(|ips| super::ip::is_martian_source(ips.src()))
    {
        return Err(WireError::NotAnswered {
            layer,
            why: NoAnswer::MartianSource,
        });
    }
    if let Some(_frag) = f.fragment {
        return Err(WireError::Fragment {
            layer: if matches!(f.network, Network::Ipv6(_)) {
                Layer::Ipv6Ext
            } else {
                Layer::Ipv4
            },
        });
    }
    if let Network::Ipv4(r) = &f.network {
        let options = &f.l3()[ipv4::MIN_HEADER_LEN..][..usize::from(r.options_len)];
        if !only_eol_nop(options) {
            return Err(WireError::Unsupported {
                layer: Layer::Ipv4,
                what: "IPv4 options other than EOL and NOP",
            });
        }
    }
    // A Routing header (even with no segments left) means the source chose a path; an echo
    // would have to reverse it. Not supported.
    if ipv6_routing(f) {
        return Err(WireError::Unsupported {
            layer,
            what: "IPv6 Routing header",
        });
    }
    Ok(())
}

/// Whether an IPv4 options field holds nothing but No Operation (1) up to End of Option List
/// (0) or its end (RFC 791 §3.1; what follows End of Option List is padding).
fn only_eol_nop(options: &[u8]) -> bool {
    for &kind in options {
        match kind {
            0 => return true,
            1 => {}
            _ => return false,
        }
    }
    true
}

/// Whether an IPv6 packet's extension headers include a Routing header (RFC 8200 §4.4, with
/// no segments left: [`walk_extension_headers`] refuses any other): the walk of the parse
/// again, for the turn-around helpers only (the receive path pays nothing for it).
fn ipv6_routing(f: &Frame<'_>) -> bool {
    let Network::Ipv6(r) = &f.network else {
        return false;
    };
    let payload = &f.bytes[f.l3_offset + ipv6::HEADER_LEN..f.l3_end];
    walk_extension_headers(r.next_header, payload).is_ok_and(|up| up.routing)
}

#[inline]
fn turn_of(f: &Frame<'_>) -> Turn {
    Turn {
        l3: f.l3_offset,
        l4: f.l4_offset,
        end: f.l3_end,
        v6: matches!(f.network, Network::Ipv6(_)),
    }
}

#[cfg(feature = "icmp")]
/// Answers an ICMPv4 Echo Request (RFC 792) or ICMPv6 Echo Request (RFC 4443 §4.2) in place:
/// addresses swapped, TTL/hop limit 64, type changed to Echo Reply with the ICMP checksum
/// updated incrementally (RFC 1624; the ICMPv6 pseudo-header sum is symmetric in the
/// addresses). Returns the length to transmit. Anything else is `Unsupported`.
pub fn answer_icmp_echo(frame: &mut [u8]) -> Result<usize> {
    let t = {
        let f = parse_frame_with(frame, ChecksumPolicy::IP_ONLY)?;
        ip_turn(&f, Layer::Icmpv4)?;
        let ok = matches!(
            f.transport,
            Transport::Icmpv4 {
                msg_type: Icmpv4Message::EchoRequest,
                code: 0
            } | Transport::Icmpv6 {
                msg_type: Icmpv6Message::EchoRequest,
                code: 0
            }
        );
        if !ok {
            return Err(WireError::Unsupported {
                layer: Layer::Icmpv4,
                what: "not an ICMP echo request",
            });
        }
        turn_of(&f)
    };
    turn_ip(frame, &t);
    let upper = if t.v6 {
        IpProtocol::Icmpv6
    } else {
        IpProtocol::Icmp
    };
    let t = drop_ipv6_extensions(frame, t, upper);
    let icmp = &mut frame[t.l4..t.end];
    let old = be16(icmp, 0);
    let new_type: u8 = if t.v6 {
        Icmpv6Message::EchoReply.into()
    } else {
        Icmpv4Message::EchoReply.into()
    };
    icmp[0] = new_type;
    let new = be16(icmp, 0);
    let c = checksum::update16(be16(icmp, 2), old, new);
    put16(icmp, 2, c);
    Ok(t.end)
}

// The tests use every protocol: run them with `--all-features`.
#[cfg(all(test, feature = "arp", feature = "icmp"))]
mod tests {
    use super::*;
    use crate::ethernet::VlanTag;
    use crate::testutil::{self, hex};
    use proptest::prelude::*;

    fn all_frames() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("ARP_REQUEST", hex(testutil::ARP_REQUEST)),
            ("ICMP_ECHO", hex(testutil::ICMP_ECHO)),
            ("UDP4", hex(testutil::UDP4)),
            ("UDP4_PADDED", hex(testutil::UDP4_PADDED)),
            ("UDP4_VLAN", hex(testutil::UDP4_VLAN)),
            ("UDP4_QINQ", hex(testutil::UDP4_QINQ)),
            ("UDP4_OPTS", hex(testutil::UDP4_OPTS)),
            ("TCP4_SYN", hex(testutil::TCP4_SYN)),
            ("TCP4_DATA", hex(testutil::TCP4_DATA)),
            ("UDP6", hex(testutil::UDP6)),
            ("UDP6_EXT", hex(testutil::UDP6_EXT)),
            ("TCP6", hex(testutil::TCP6)),
            ("ICMP6_ECHO", hex(testutil::ICMP6_ECHO)),
            ("NDP_NS", hex(testutil::NDP_NS)),
            ("IPV4_FRAG_FIRST", hex(testutil::IPV4_FRAG_FIRST)),
            ("IPV4_FRAG_LATER", hex(testutil::IPV4_FRAG_LATER)),
            ("IPV6_FRAG", hex(testutil::IPV6_FRAG)),
        ]
    }

    const A: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    const B: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);

    #[test]
    fn all_known_frames_parse() {
        for (name, b) in all_frames() {
            let f = parse_frame(&b).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                f.l3_offset <= f.l4_offset && f.l4_offset <= f.l3_end,
                "{name}"
            );
            assert!(f.l3_end <= b.len(), "{name}");
            assert!(
                f.payload.start <= f.payload.end && f.payload.end <= f.l3_end,
                "{name}"
            );
        }
    }

    #[test]
    fn udp4() {
        let b = hex(testutil::UDP4);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.ethernet.src_addr, A);
        assert_eq!(f.ethernet.dst_addr, B);
        assert_eq!(f.l3_offset, 14);
        assert_eq!(f.l4_offset, 34);
        assert_eq!(f.protocol, Some(IpProtocol::Udp));
        assert_eq!(
            f.transport,
            Transport::Udp {
                src_port: 54321,
                dst_port: 53
            }
        );
        assert_eq!(f.ports(), Some((54321, 53)));
        assert_eq!(
            f.ip_pair(),
            Some(IpPair::V4 {
                src: Ipv4Addr::new(192, 168, 1, 2),
                dst: Ipv4Addr::new(8, 8, 8, 8)
            })
        );
        assert_eq!(f.payload.start, 42);
        assert_eq!(f.payload().len(), 29);
        assert_eq!(&f.payload()[13..20], b"example");
        assert!(!f.is_fragment());
    }

    #[test]
    fn padded_frame_payload_excludes_padding() {
        let b = hex(testutil::UDP4_PADDED);
        assert_eq!(b.len(), 60);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.payload(), b"hi");
        assert_eq!(f.l3_end, 14 + 30);
    }

    #[test]
    fn vlan_frames() {
        let b = hex(testutil::UDP4_VLAN);
        let f = parse_frame(&b).unwrap();
        assert_eq!(
            f.ethernet.vlan.outer,
            Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(f.l3_offset, 18);
        assert_eq!(f.payload().len(), 29);
        let b = hex(testutil::UDP4_QINQ);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.ethernet.vlan.outer.map(|t| t.vid), Some(10));
        assert_eq!(f.ethernet.vlan.inner.map(|t| t.vid), Some(200));
        assert_eq!(f.l3_offset, 22);
        assert_eq!(f.ports(), Some((54321, 53)));
    }

    #[test]
    fn ipv4_options() {
        let b = hex(testutil::UDP4_OPTS);
        let f = parse_frame(&b).unwrap();
        let Network::Ipv4(r) = f.network else {
            panic!()
        };
        assert_eq!(r.options_len, 8);
        assert_eq!(f.l4_offset, 14 + 28);
        assert_eq!(&f.l3()[20..28], &[0x94, 4, 0, 0, 1, 1, 1, 0]);
        assert_eq!(f.ports(), Some((54321, 53)));
    }

    #[test]
    fn tcp() {
        let b = hex(testutil::TCP4_SYN);
        let f = parse_frame(&b).unwrap();
        let Transport::Tcp(t) = f.transport else {
            panic!("{:?}", f.transport)
        };
        assert_eq!((t.src_port, t.dst_port), (43210, 80));
        assert_eq!(t.flags, crate::tcp::TcpFlags::SYN);
        assert_eq!(t.options.mss, Some(1460));
        assert_eq!(t.header_len(), 24);
        assert_eq!(f.l4_offset + 24, f.payload.start);
        assert!(f.payload().is_empty());
        let b = hex(testutil::TCP4_DATA);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.payload(), b"HTTP/1.1 200 OK\r\n");
        let b = hex(testutil::TCP6);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.ports(), Some((443, 50000)));
        assert_eq!(f.payload(), b"data");
        assert_eq!(f.l4_offset, ETH_IPV6_TCP_OFFSET);
    }

    #[test]
    fn ipv6_and_extensions() {
        let b = hex(testutil::UDP6);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.payload(), b"hello");
        assert_eq!(f.payload.start, ETH_IPV6_UDP_PAYLOAD_OFFSET);
        let b = hex(testutil::UDP6_EXT);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.l4_offset, 14 + 40 + 16);
        assert_eq!(f.protocol, Some(IpProtocol::Udp));
        assert_eq!(f.payload(), b"hello");
        assert_eq!(f.ports(), Some((5000, 6000)));
    }

    /// RFC 8200 §4.2: a Destination Options header's options are walked, and a packet with an
    /// unrecognized option whose type says discard is refused (as Linux's `ip6_parse_tlv`
    /// drops it); RFC 4302 §3.4: TCP behind an Authentication Header is not taken as TCP.
    #[test]
    fn ipv6_options_and_ah() {
        let b = hex(testutil::TCP6_EXT);
        let f = parse_frame(&b).unwrap();
        assert!(matches!(f.transport, Transport::Tcp(_)));
        assert!(!ipv6_routing(&f));
        let mut b = hex(testutil::TCP6_EXT);
        assert_eq!(b[14 + 40 + 2], 1, "the PadN option");
        b[14 + 40 + 2] = 0x80;
        assert!(matches!(
            parse_frame(&b),
            Err(WireError::Unsupported {
                layer: Layer::Ipv6Ext,
                ..
            })
        ));
        // The same frame with its Destination Options header made an AH (Payload Len 0:
        // 8 bytes): no TCP segment.
        let mut b = hex(testutil::TCP6_EXT);
        b[20] = 51;
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.protocol, Some(IpProtocol::Ah));
        assert_eq!(f.l4_offset, 14 + 40);
        assert_eq!(f.transport, Transport::Other);
    }

    #[test]
    fn icmp_and_arp() {
        let b = hex(testutil::ICMP_ECHO);
        let f = parse_frame(&b).unwrap();
        assert_eq!(
            f.transport,
            Transport::Icmpv4 {
                msg_type: Icmpv4Message::EchoRequest,
                code: 0
            }
        );
        assert_eq!(f.payload(), b"abcdefghijklmnopqrstuvwabcdefghi");
        let b = hex(testutil::ICMP6_ECHO);
        let f = parse_frame(&b).unwrap();
        assert_eq!(
            f.transport,
            Transport::Icmpv6 {
                msg_type: Icmpv6Message::EchoRequest,
                code: 0
            }
        );
        assert_eq!(f.payload(), b"ping6");
        let b = hex(testutil::ARP_REQUEST);
        let f = parse_frame(&b).unwrap();
        let Network::Arp(a) = f.network else { panic!() };
        assert_eq!(a.target_protocol_addr, Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(f.l3_end, 42);
        assert_eq!(f.transport, Transport::None);
    }

    #[test]
    fn fragments_reported() {
        let f_bytes = hex(testutil::IPV4_FRAG_FIRST);
        let f = parse_frame(&f_bytes).unwrap();
        assert_eq!(
            f.fragment,
            Some(FragmentInfo {
                ident: 0x1c46,
                offset: 0,
                more: true
            })
        );
        assert_eq!(f.transport, Transport::None);
        let b = hex(testutil::IPV4_FRAG_LATER);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.fragment.map(|x| (x.offset, x.more)), Some((16, false)));
        let b = hex(testutil::IPV6_FRAG);
        let f = parse_frame(&b).unwrap();
        assert_eq!(
            f.fragment,
            Some(FragmentInfo {
                ident: 42,
                offset: 16,
                more: false
            })
        );
        assert_eq!(f.protocol, Some(IpProtocol::Udp));
        assert_eq!(f.payload(), b"fragment data...");
        let mut b = b;
        assert_eq!(
            turn_around_udp(&mut b).unwrap_err(),
            WireError::Fragment {
                layer: Layer::Ipv6Ext
            }
        );
        let mut b = f_bytes;
        assert_eq!(
            turn_around_udp(&mut b).unwrap_err(),
            WireError::Fragment { layer: Layer::Ipv4 }
        );
    }

    #[test]
    fn every_prefix_is_an_error_not_a_panic() {
        for (name, b) in all_frames() {
            let full = parse_frame(&b).unwrap();
            for n in 0..b.len() {
                let r = parse_frame(&b[..n]);
                if n < full.l3_end {
                    assert!(r.is_err(), "{name} cut at {n}: {r:?}");
                } else {
                    // Only Ethernet padding was cut.
                    assert_eq!(r.unwrap().network, full.network, "{name} {n}");
                }
            }
        }
    }

    #[test]
    fn bad_checksums() {
        // Flip a payload bit: the L4 checksum fails, unless the policy skips it.
        for (name, layer) in [
            ("UDP4", Layer::Udp),
            ("TCP4_DATA", Layer::Tcp),
            ("ICMP_ECHO", Layer::Icmpv4),
            ("ICMP6_ECHO", Layer::Icmpv6),
            ("UDP6", Layer::Udp),
            ("TCP6", Layer::Tcp),
        ] {
            let mut b = all_frames()
                .into_iter()
                .find(|(n, _)| *n == name)
                .unwrap()
                .1;
            let last = parse_frame(&b).unwrap().l3_end - 1;
            b[last] ^= 0x01;
            assert_eq!(
                parse_frame(&b).unwrap_err(),
                WireError::BadChecksum { layer },
                "{name}"
            );
            assert!(
                parse_frame_with(&b, ChecksumPolicy::IP_ONLY).is_ok(),
                "{name}"
            );
        }
        // IPv4 header checksum is always verified.
        let mut b = hex(testutil::UDP4);
        b[14 + 8] ^= 1; // TTL
        assert_eq!(
            parse_frame_with(&b, ChecksumPolicy::IP_ONLY).unwrap_err(),
            WireError::BadChecksum { layer: Layer::Ipv4 }
        );
        // UDP over IPv4 without checksum is fine; over IPv6 it is not.
        let mut b = hex(testutil::UDP4);
        b[40] = 0;
        b[41] = 0;
        assert!(parse_frame(&b).is_ok());
        let mut b = hex(testutil::UDP6);
        b[60] = 0;
        b[61] = 0;
        assert_eq!(
            parse_frame(&b).unwrap_err(),
            WireError::BadChecksum { layer: Layer::Udp }
        );
    }

    #[test]
    fn bad_lengths() {
        // IPv4 total length beyond the frame.
        let mut b = hex(testutil::UDP4);
        let tl = be16(&b, 16) + 1;
        put16(&mut b, 16, tl);
        Ipv4Packet::new_unchecked(&mut b[14..]).fill_checksum();
        assert!(matches!(
            parse_frame(&b),
            Err(WireError::Truncated {
                layer: Layer::Ipv4,
                ..
            })
        ));
        // UDP length beyond the IP payload.
        let mut b = hex(testutil::UDP4);
        put16(&mut b, 38, 38);
        assert!(matches!(
            parse_frame(&b),
            Err(WireError::Truncated {
                layer: Layer::Udp,
                ..
            })
        ));
        // TCP data offset beyond the segment.
        let mut b = hex(testutil::TCP4_SYN);
        b[34 + 12] = 0xf0;
        assert!(matches!(
            parse_frame(&b),
            Err(WireError::BadHeaderLength {
                layer: Layer::Tcp,
                len: 60
            })
        ));
        // IPv6 payload length beyond the frame.
        let mut b = hex(testutil::UDP6);
        put16(&mut b, 18, 200);
        assert!(matches!(
            parse_frame(&b),
            Err(WireError::Truncated {
                layer: Layer::Ipv6,
                ..
            })
        ));
        // IPv6 extension header whose length runs past the payload.
        let mut b = hex(testutil::UDP6_EXT);
        b[54 + 8 + 1] = 9;
        assert!(matches!(
            parse_frame(&b),
            Err(WireError::Truncated {
                layer: Layer::Ipv6Ext,
                ..
            })
        ));
        // Wrong IP version behind the IPv4 EtherType.
        let mut b = hex(testutil::UDP6);
        b[12] = 0x08;
        b[13] = 0x00;
        assert!(matches!(
            parse_frame(&b),
            Err(WireError::BadVersion { version: 6, .. })
        ));
    }

    #[test]
    fn unknown_ethertype_and_protocol() {
        let mut b = hex(testutil::UDP4);
        b[12] = 0x88;
        b[13] = 0xcc; // LLDP
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.network, Network::Other(EtherType::Unknown(0x88cc)));
        assert_eq!(f.payload.start, 14);
        let mut b = hex(testutil::UDP4);
        b[14 + 9] = 47; // GRE
        Ipv4Packet::new_unchecked(&mut b[14..]).fill_checksum();
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.transport, Transport::Other);
        assert_eq!(f.protocol, Some(IpProtocol::Unknown(47)));
        assert_eq!(f.payload.start, 34);
    }

    #[test]
    fn build_udp4_matches_independent_bytes() {
        let expected = hex(testutil::UDP4);
        let mut buf = vec![0u8; 2048];
        buf[ETH_IPV4_UDP_PAYLOAD_OFFSET..ETH_IPV4_UDP_PAYLOAD_OFFSET + 29]
            .copy_from_slice(&expected[42..]);
        let eth = EthernetRepr {
            dst_addr: B,
            src_addr: A,
            vlan: VlanTags::NONE,
            ethertype: EtherType::Unknown(0),
        };
        let ip = Ipv4Repr {
            ident: 0x1c46,
            ..Ipv4Repr::new(
                Ipv4Addr::new(192, 168, 1, 2),
                Ipv4Addr::new(8, 8, 8, 8),
                IpProtocol::Tcp, // overridden
                0,               // overridden
            )
        };
        let udp = UdpRepr {
            src_port: 54321,
            dst_port: 53,
        };
        let n = emit_eth_ipv4_udp(&mut buf, &eth, &ip, &udp, 29).unwrap();
        assert_eq!(&buf[..n], &expected[..]);
        assert!(matches!(
            emit_eth_ipv4_udp(&mut buf[..70], &eth, &ip, &udp, 29),
            Err(WireError::BufferTooSmall {
                needed: 71,
                got: 70
            })
        ));
    }

    #[test]
    fn build_tcp_matches_independent_bytes() {
        let expected = hex(testutil::TCP4_DATA);
        let mut buf = vec![0u8; 2048];
        let seg_len = expected.len() - ETH_IPV4_TCP_OFFSET;
        buf[ETH_IPV4_TCP_OFFSET..ETH_IPV4_TCP_OFFSET + seg_len]
            .copy_from_slice(&expected[ETH_IPV4_TCP_OFFSET..]);
        buf[ETH_IPV4_TCP_OFFSET + 16] = 0; // as flowlane-tcp emits it
        buf[ETH_IPV4_TCP_OFFSET + 17] = 0;
        let eth = EthernetRepr {
            dst_addr: A,
            src_addr: B,
            vlan: VlanTags::NONE,
            ethertype: EtherType::Ipv4,
        };
        let ip = Ipv4Repr {
            ident: 0x1c46,
            ..Ipv4Repr::new(
                Ipv4Addr::new(10, 0, 0, 2),
                Ipv4Addr::new(10, 0, 0, 1),
                IpProtocol::Tcp,
                0,
            )
        };
        let n = emit_eth_ipv4_tcp_headers(&mut buf, &eth, &ip, seg_len).unwrap();
        assert_eq!(&buf[..n], &expected[..]);

        let expected = hex(testutil::TCP6);
        let seg_len = expected.len() - ETH_IPV6_TCP_OFFSET;
        let mut buf = vec![0u8; 2048];
        buf[ETH_IPV6_TCP_OFFSET..ETH_IPV6_TCP_OFFSET + seg_len]
            .copy_from_slice(&expected[ETH_IPV6_TCP_OFFSET..]);
        buf[ETH_IPV6_TCP_OFFSET + 16] = 0;
        buf[ETH_IPV6_TCP_OFFSET + 17] = 0;
        let ip6 = Ipv6Repr::new(
            "2001:db8::2".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            IpProtocol::Tcp,
            0,
        );
        let n = emit_eth_ipv6_tcp_headers(&mut buf, &eth, &ip6, seg_len).unwrap();
        assert_eq!(&buf[..n], &expected[..]);
    }

    #[test]
    fn build_udp6_matches_independent_bytes() {
        let expected = hex(testutil::UDP6);
        let mut buf = vec![0u8; 256];
        buf[ETH_IPV6_UDP_PAYLOAD_OFFSET..ETH_IPV6_UDP_PAYLOAD_OFFSET + 5].copy_from_slice(b"hello");
        let eth = EthernetRepr {
            dst_addr: B,
            src_addr: A,
            vlan: VlanTags::NONE,
            ethertype: EtherType::Ipv6,
        };
        let ip = Ipv6Repr::new(
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            IpProtocol::Udp,
            0,
        );
        let udp = UdpRepr {
            src_port: 5000,
            dst_port: 6000,
        };
        let n = emit_eth_ipv6_udp(&mut buf, &eth, &ip, &udp, 5).unwrap();
        assert_eq!(&buf[..n], &expected[..]);
    }

    #[test]
    fn build_with_vlan_round_trips() {
        let mut buf = vec![0u8; 256];
        let eth = EthernetRepr {
            dst_addr: B,
            src_addr: A,
            vlan: VlanTags {
                outer: Some(VlanTag {
                    pcp: 1,
                    dei: false,
                    vid: 7,
                }),
                inner: Some(VlanTag {
                    pcp: 0,
                    dei: false,
                    vid: 8,
                }),
                s_tag: true,
            },
            ethertype: EtherType::Ipv4,
        };
        let ip = Ipv4Repr::new(
            Ipv4Addr::new(1, 1, 1, 1),
            Ipv4Addr::new(2, 2, 2, 2),
            IpProtocol::Udp,
            0,
        );
        let off = eth.header_len() + 20 + 8;
        buf[off..off + 3].copy_from_slice(b"abc");
        let udp = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let n = emit_eth_ipv4_udp(&mut buf, &eth, &ip, &udp, 3).unwrap();
        let f = parse_frame(&buf[..n]).unwrap();
        assert_eq!(f.ethernet.vlan, eth.vlan);
        assert_eq!(f.payload(), b"abc");
        assert_eq!(f.ports(), Some((1, 2)));
    }

    /// `b` with TTL / hop limit `ttl` and ECN field `ecn` (the IPv4 header checksum refilled;
    /// no transport checksum covers either).
    fn with_ttl_ecn(b: &[u8], ttl: u8, ecn: u8) -> Vec<u8> {
        let mut b = b.to_vec();
        let f = parse_frame(&b).unwrap();
        let (l3, v6) = (f.l3_offset, matches!(f.network, Network::Ipv6(_)));
        if v6 {
            let mut ip = Ipv6Packet::new_unchecked(&mut b[l3..]);
            ip.set_hop_limit(ttl);
            let (tc, flow) = (ip.traffic_class(), ip.flow_label());
            ip.set_version_tc_flow((tc & !ECN_MASK) | ecn, flow);
        } else {
            let mut ip = Ipv4Packet::new_unchecked(&mut b[l3..]);
            ip.set_ttl(ttl);
            ip.set_dscp_ecn(ip.dscp(), ecn);
            ip.fill_checksum();
        }
        b
    }

    /// TTL / hop limit, DSCP and ECN field of a parsed IP frame.
    fn ttl_dscp_ecn(f: &Frame<'_>) -> (u8, u8, u8) {
        match f.network {
            Network::Ipv4(r) => (r.ttl, r.dscp, r.ecn),
            Network::Ipv6(r) => (
                r.hop_limit,
                r.traffic_class >> 2,
                r.traffic_class & ECN_MASK,
            ),
            _ => panic!("not IP: {:?}", f.network),
        }
    }

    /// `b` (an IPv6 frame without extension headers) with a Hop-by-Hop header (a Router
    /// Alert, RFC 2711) and an atomic Fragment header (RFC 6946) before its upper layer.
    fn with_hbh_and_atomic_fragment(b: &[u8]) -> Vec<u8> {
        let upper = b[14 + 6];
        let mut out = b[..14 + 40].to_vec();
        out[14 + 6] = 0; // Hop-by-Hop
        out.extend_from_slice(&[44, 0, 5, 2, 0, 0, 1, 0]); // Router Alert, PadN
        out.extend_from_slice(&[upper, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]); // offset 0, M 0
        out.extend_from_slice(&b[14 + 40..]);
        let len = (out.len() - 14 - 40) as u16;
        out[14 + 4..14 + 6].copy_from_slice(&len.to_be_bytes());
        out
    }

    /// An IPv6 request's Hop-by-Hop and atomic Fragment headers are not carried back in the
    /// UDP or ICMPv6 echo (they were, reflected in place): the reply is the fixed header and
    /// the upper layer, its checksum still valid, as a host's own reply.
    #[test]
    fn an_ipv6_echo_carries_no_extension_header_back() {
        for fixture in [testutil::UDP6, testutil::ICMP6_ECHO] {
            let plain = hex(fixture);
            let orig = with_hbh_and_atomic_fragment(&plain);
            let before = parse_frame(&orig).unwrap();
            assert_eq!(before.l4_offset, 14 + 40 + 16, "{fixture}");
            assert!(before.fragment.is_none(), "atomic: not a fragment");
            let mut b = orig.clone();
            let n = if fixture == testutil::UDP6 {
                turn_around_udp(&mut b).unwrap()
            } else {
                answer_icmp_echo(&mut b).unwrap()
            };
            assert_eq!(n, plain.len(), "{fixture}");
            let after = parse_frame(&b[..n]).unwrap(); // verifies all checksums
            assert_eq!(after.l4_offset, 14 + 40, "{fixture}");
            assert_eq!(b[14 + 6], plain[14 + 6], "Next Header: the upper layer's");
            assert_eq!(b[14 + 4..14 + 6], plain[14 + 4..14 + 6], "Payload Length");
            assert_eq!(after.payload(), before.payload(), "{fixture}");
            assert_eq!(
                after.ip_pair(),
                before.ip_pair().map(|p| p.reversed()),
                "{fixture}"
            );
        }
    }

    #[test]
    fn turn_around_udp_v4_v6_vlan() {
        for name in ["UDP4", "UDP4_VLAN", "UDP6", "UDP6_EXT", "UDP4_PADDED"] {
            let fixture = all_frames()
                .into_iter()
                .find(|(n, _)| *n == name)
                .unwrap()
                .1;
            // Every fixture comes with TTL / hop limit 64 (REPLY_TTL) and Not-ECT: a copy with
            // TTL 7 and CE (RFC 3168 §5) shows that both are rewritten, not left as they were.
            for orig in [fixture.clone(), with_ttl_ecn(&fixture, 7, 3)] {
                let mut b = orig.clone();
                let n = turn_around_udp(&mut b).unwrap();
                let before = parse_frame(&orig).unwrap();
                let after = parse_frame(&b[..n]).unwrap(); // verifies all checksums
                assert_eq!(after.ethernet.src_addr, before.ethernet.dst_addr, "{name}");
                assert_eq!(after.ethernet.dst_addr, before.ethernet.src_addr, "{name}");
                assert_eq!(
                    after.ip_pair(),
                    before.ip_pair().map(|p| p.reversed()),
                    "{name}"
                );
                let (s, d) = before.ports().unwrap();
                assert_eq!(after.ports(), Some((d, s)), "{name}");
                assert_eq!(after.payload(), before.payload(), "{name}");
                // UDP6_EXT's Hop-by-Hop and Destination Options are not in the reply.
                let dropped = if name == "UDP6_EXT" { 16 } else { 0 };
                assert_eq!(n, before.l3_end - dropped, "{name}");
                // TTL / hop limit 64, DSCP kept, Not-ECT.
                let dscp = ttl_dscp_ecn(&before).1;
                assert_eq!(ttl_dscp_ecn(&after), (REPLY_TTL, dscp, 0), "{name}");
            }
        }
        // IPv4 options (RFC 791 §3.1): UDP4_OPTS carries a Router Alert (RFC 2113), refused
        // like a loose or strict source route and a record route; the same datagram with only
        // NOPs and End of Option List in their place is answered.
        let opts = hex(testutil::UDP4_OPTS);
        let with_opts = |o: [u8; 8]| {
            let mut b = opts.clone();
            b[34..42].copy_from_slice(&o);
            Ipv4Packet::new_unchecked(&mut b[14..]).fill_checksum();
            assert!(parse_frame(&b).is_ok());
            b
        };
        for b in [
            opts.clone(),
            with_opts([0x83, 7, 4, 10, 0, 0, 1, 0]), // LSRR
            with_opts([0x89, 7, 4, 10, 0, 0, 1, 0]), // SSRR
            with_opts([1, 7, 3, 4, 0, 0, 0, 0]),     // NOP, then Record Route
        ] {
            let mut c = b.clone();
            assert_eq!(
                turn_around_udp(&mut c),
                Err(WireError::Unsupported {
                    layer: Layer::Ipv4,
                    what: "IPv4 options other than EOL and NOP"
                })
            );
            assert_eq!(c, b, "nothing written");
        }
        for o in [[1, 1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 0, 0]] {
            let mut b = with_opts(o);
            let n = turn_around_udp(&mut b).unwrap();
            assert_eq!(parse_frame(&b[..n]).unwrap().ports(), Some((53, 54321)));
        }
        let mut b = hex(testutil::TCP4_SYN);
        assert!(matches!(
            turn_around_udp(&mut b),
            Err(WireError::Unsupported { .. })
        ));
        let mut b = hex(testutil::ARP_REQUEST);
        assert!(turn_around_udp(&mut b).is_err());
        // Source port 0 (found by cargo-fuzz): no reply, else the reply would go to port 0.
        let mut b = hex(testutil::UDP4_PADDED);
        b[34] = 0;
        b[35] = 0;
        crate::checksum::fill_udp_checksum(
            &parse_frame_with(&b, ChecksumPolicy::IP_ONLY)
                .unwrap()
                .ip_pair()
                .unwrap(),
            &mut b[34..44],
        )
        .unwrap();
        assert!(parse_frame(&b).is_ok());
        assert!(matches!(
            turn_around_udp(&mut b),
            Err(WireError::Malformed {
                layer: Layer::Udp,
                ..
            })
        ));
    }

    #[test]
    fn turn_around_rejects_routing_header() {
        // UDP6 with a Routing header (segments left 0) in front of UDP.
        let orig = hex(testutil::UDP6);
        let mut b = orig[..54].to_vec();
        b[20] = 43; // next header: Routing
        b.extend_from_slice(&[17, 0, 4, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&orig[54..]);
        let pl = be16(&b, 18) + 8;
        put16(&mut b, 18, pl);
        let f = parse_frame(&b).unwrap();
        assert_eq!(f.ports(), Some((5000, 6000)));
        assert!(ipv6_routing(&f));
        assert!(matches!(
            turn_around_udp(&mut b),
            Err(WireError::Unsupported { .. })
        ));
    }

    #[test]
    fn answer_echo_v4_v6() {
        for name in ["ICMP_ECHO", "ICMP6_ECHO"] {
            let orig = all_frames()
                .into_iter()
                .find(|(n, _)| *n == name)
                .unwrap()
                .1;
            let mut b = orig.clone();
            let n = answer_icmp_echo(&mut b).unwrap();
            let f = parse_frame(&b[..n]).unwrap(); // verifies checksums
            let before = parse_frame(&orig).unwrap();
            assert!(matches!(
                f.transport,
                Transport::Icmpv4 {
                    msg_type: Icmpv4Message::EchoReply,
                    ..
                } | Transport::Icmpv6 {
                    msg_type: Icmpv6Message::EchoReply,
                    ..
                }
            ));
            assert_eq!(f.ip_pair(), before.ip_pair().map(|p| p.reversed()));
            assert_eq!(f.payload(), before.payload());
            // A request with TTL 7 and CE: the reply has TTL 64 and is Not-ECT.
            let mut b = with_ttl_ecn(&orig, 7, 3);
            let n = answer_icmp_echo(&mut b).unwrap();
            let f = parse_frame(&b[..n]).unwrap();
            assert_eq!(ttl_dscp_ecn(&f), (REPLY_TTL, 0, 0), "{name}");
        }
        let mut b = hex(testutil::UDP4);
        assert!(answer_icmp_echo(&mut b).is_err());
    }

    #[test]
    fn arp_answered_in_place() {
        let mut b = hex(testutil::ARP_REQUEST);
        assert_eq!(
            answer_arp(&mut b, B, Ipv4Addr::new(10, 0, 0, 9)).unwrap(),
            None
        );
        let n = answer_arp(&mut b, B, Ipv4Addr::new(10, 0, 0, 2))
            .unwrap()
            .unwrap();
        assert_eq!(n, 42);
        // Expected reply, written out by hand (RFC 826).
        let expected = [
            0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x02, 0, 0, 0, 0, 0x02, 0x08, 0x06, // eth
            0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, // reply
            0x02, 0, 0, 0, 0, 0x02, 10, 0, 0, 2, // us
            0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 10, 0, 0, 1, // them
        ];
        assert_eq!(&b[..n], &expected[..]);
        // A request, built and parsed back.
        let req = ArpRepr::request(B, Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
        let mut out = [0u8; 64];
        let n = emit_eth_arp(&mut out, VlanTags::NONE, &req).unwrap();
        let f = parse_frame(&out[..n]).unwrap();
        assert!(f.ethernet.dst_addr.is_broadcast());
        assert_eq!(f.network, Network::Arp(req));
    }

    /// A datagram or echo request to a group (broadcast or multicast MAC or IP), or from a
    /// source no reply can go to, is not turned around: its reply would come from the group.
    #[test]
    fn group_destinations_and_martian_sources_are_not_echoed() {
        let udp4 = hex(testutil::UDP4);
        let f = parse_frame(&udp4).unwrap();
        let (l3, l4, v4_src) = (f.l3_offset, f.l4_offset, 12);
        // Rewrites one IPv4 address (at `off` in the IP header) and refills both checksums.
        let with_v4 = |at: usize, addr: [u8; 4], mac: Option<[u8; 6]>| {
            let mut b = udp4.clone();
            b[l3 + at..l3 + at + 4].copy_from_slice(&addr);
            if let Some(m) = mac {
                b[0..6].copy_from_slice(&m);
            }
            let mut ip = Ipv4Packet::new_unchecked(&mut b[l3..]);
            ip.fill_checksum();
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            let end = l3 + ip.total_len();
            let mut u = UdpPacket::new_unchecked(&mut b[l4..end]);
            u.fill_checksum(&IpPair::V4 { src, dst });
            b
        };
        let udp6 = hex(testutil::UDP6);
        let f = parse_frame(&udp6).unwrap();
        let (l3_6, l4_6, v6_src, v6_dst) = (f.l3_offset, f.l4_offset, 8, 24);
        // Rewrites one IPv6 address (at `at` in the IP header) and refills the UDP checksum.
        let with_v6 = |at: usize, addr: &str, mac: Option<[u8; 6]>| {
            let mut b = udp6.clone();
            let a: Ipv6Addr = addr.parse().unwrap();
            b[l3_6 + at..l3_6 + at + 16].copy_from_slice(&a.octets());
            if let Some(m) = mac {
                b[0..6].copy_from_slice(&m);
            }
            let ip = Ipv6Packet::new_unchecked(&b[l3_6..]);
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            let mut u = UdpPacket::new_unchecked(&mut b[l4_6..]);
            u.fill_checksum(&IpPair::V6 { src, dst });
            b
        };
        // Sets the group bit of the MAC address at `at` (0: destination, 6: source).
        let group_mac = |b: &[u8], at: usize| -> Vec<u8> {
            let mut b = b.to_vec();
            b[at] |= 1;
            b
        };
        let bcast = Some([0xff; 6]);
        let (why_group, why_martian) = (NoAnswer::GroupDestination, NoAnswer::MartianSource);
        for (case, b, why) in [
            (
                "v4 broadcast",
                with_v4(16, [255, 255, 255, 255], bcast),
                why_group,
            ),
            (
                "v4 multicast",
                with_v4(16, [224, 0, 0, 1], Some([0x01, 0, 0x5e, 0, 0, 1])),
                why_group,
            ),
            (
                "v4 broadcast IP, unicast MAC",
                with_v4(16, [255, 255, 255, 255], None),
                why_group,
            ),
            ("v4 group dst MAC", group_mac(&udp4, 0), why_group),
            (
                "v4 source 0",
                with_v4(v4_src, [0, 0, 0, 0], None),
                why_martian,
            ),
            (
                "v4 source loopback",
                with_v4(v4_src, [127, 0, 0, 1], None),
                why_martian,
            ),
            ("v4 group source MAC", group_mac(&udp4, 6), why_martian),
            (
                "v4 broadcast source MAC",
                {
                    let mut b = udp4.clone();
                    b[6..12].copy_from_slice(&[0xff; 6]);
                    b
                },
                why_martian,
            ),
            (
                "v6 multicast",
                with_v6(v6_dst, "ff02::1", Some([0x33, 0x33, 0, 0, 0, 1])),
                why_group,
            ),
            (
                "v6 multicast IP, unicast MAC",
                with_v6(v6_dst, "ff0e::1", None),
                why_group,
            ),
            ("v6 group dst MAC", group_mac(&udp6, 0), why_group),
            ("v6 source ::", with_v6(v6_src, "::", None), why_martian),
            ("v6 source ::1", with_v6(v6_src, "::1", None), why_martian),
            (
                "v6 multicast source",
                with_v6(v6_src, "ff02::1", None),
                why_martian,
            ),
            (
                "v6 IPv4-mapped source",
                with_v6(v6_src, "::ffff:10.0.0.1", None),
                why_martian,
            ),
            ("v6 group source MAC", group_mac(&udp6, 6), why_martian),
        ] {
            assert!(parse_frame(&b).is_ok(), "{case}");
            let mut c = b.clone();
            let e = turn_around_udp(&mut c).unwrap_err();
            assert_eq!(
                e,
                WireError::NotAnswered {
                    layer: Layer::Udp,
                    why
                },
                "{case}"
            );
            assert_eq!(c, b, "{case}: nothing written");
        }
        // The untouched datagrams are answered.
        for b in [&udp4, &udp6] {
            let mut c = b.clone();
            assert!(turn_around_udp(&mut c).is_ok());
        }
        // The ICMP echo shares the check: a request from a group source MAC is not answered.
        for b in [hex(testutil::ICMP_ECHO), hex(testutil::ICMP6_ECHO)] {
            let b = group_mac(&b, 6);
            let mut c = b.clone();
            assert!(matches!(
                answer_icmp_echo(&mut c),
                Err(WireError::NotAnswered {
                    why: NoAnswer::MartianSource,
                    ..
                })
            ));
            assert_eq!(c, b, "nothing written");
        }
    }

    #[test]
    fn ndp_answered() {
        let b = hex(testutil::NDP_NS);
        let f = parse_frame(&b).unwrap();
        let target: Ipv6Addr = "2001:db8::2".parse().unwrap();
        assert!(ndp_advert_for(&f, B, |_| false).unwrap().is_none());
        let adv = ndp_advert_for(&f, B, |a| *a == target).unwrap().unwrap();
        let vlan = f.ethernet.vlan;
        let mut out = vec![0u8; 128];
        let n = emit_ndp_advert(&mut out, vlan, &adv).unwrap();
        assert_eq!(n, 14 + 40 + 32);
        let g = parse_frame(&out[..n]).unwrap();
        assert_eq!(g.ethernet.dst_addr, A);
        assert_eq!(g.ethernet.src_addr, B);
        let Network::Ipv6(ip) = g.network else {
            panic!()
        };
        assert_eq!(ip.hop_limit, 255);
        assert_eq!(ip.src_addr, target);
        assert_eq!(ip.dst_addr, "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        let p = Icmpv6Packet::new_checked(g.l4()).unwrap();
        let na = Icmpv6Repr::parse(&ip.src_addr, &ip.dst_addr, &p).unwrap();
        assert_eq!(
            na,
            Icmpv6Repr::NeighborAdvert {
                flags: crate::icmp::NeighborFlags {
                    router: false,
                    solicited: true,
                    override_: true
                },
                target_addr: target,
                target_lladdr: Some(B)
            }
        );
        // Not answered with a wrong hop limit (RFC 4861 §7.1.1).
        let mut b2 = b.clone();
        b2[21] = 64;
        let f2 = parse_frame(&b2).unwrap();
        assert!(ndp_advert_for(&f2, B, |_| true).unwrap().is_none());
        // Other frames: None.
        let u = hex(testutil::UDP6);
        assert!(ndp_advert_for(&parse_frame(&u).unwrap(), B, |_| true)
            .unwrap()
            .is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_frame(&data);
            let _ = parse_frame_with(&data, ChecksumPolicy::IP_ONLY);
            let mut d = data.clone();
            let _ = turn_around_udp(&mut d);
            let mut d = data;
            let _ = answer_icmp_echo(&mut d);
        }

        #[test]
        fn mutated_frames_never_panic(which in 0usize..17, edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), cut in any::<prop::sample::Index>()) {
            let frames = all_frames();
            let mut b = frames[which % frames.len()].1.clone();
            for (i, v) in edits {
                let i = i.index(b.len());
                b[i] = v;
            }
            // Keep the IPv4 header checksum valid half the time so deeper layers get exercised.
            if b.len() >= 34 && b[12] == 0x08 && b[13] == 0x00 && b[14] >> 4 == 4 {
                let hl = usize::from(b[14] & 0xf) * 4;
                if hl >= 20 && 14 + hl <= b.len() && b[0] & 1 == 0 {
                    Ipv4Packet::new_unchecked(&mut b[14..]).fill_checksum();
                }
            }
            let n = cut.index(b.len() + 1);
            let slice = &b[..n];
            if let Ok(f) = parse_frame_with(slice, ChecksumPolicy::IP_ONLY) {
                prop_assert!(f.l3_end <= n && f.payload.end <= f.l3_end && f.payload.start <= f.payload.end);
                let _ = (f.l3(), f.l4(), f.payload());
                let _ = ndp_advert_for(&f, B, |_| true);
            }
            let _ = parse_frame(slice);
            let mut c = slice.to_vec();
            if turn_around_udp(&mut c).is_ok() {
                // A frame whose checksums verified before still verifies after.
                if parse_frame(slice).is_ok() {
                    prop_assert!(parse_frame(&c).is_ok());
                }
            }
            let mut c = slice.to_vec();
            if answer_icmp_echo(&mut c).is_ok() && parse_frame(slice).is_ok() {
                prop_assert!(parse_frame(&c).is_ok());
            }
            let mut c = slice.to_vec();
            let _ = answer_arp(&mut c, B, Ipv4Addr::new(10, 0, 0, 2));
        }

        #[test]
        fn builder_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..1400), sp in 1u16.., dp in 1u16.., src in any::<u32>(), dst in any::<u32>(), v6 in any::<bool>()) {
            let mut buf = vec![0u8; 2048];
            let eth = EthernetRepr { dst_addr: A, src_addr: B, vlan: VlanTags::NONE, ethertype: EtherType::Ipv4 };
            let udp = UdpRepr { src_port: sp, dst_port: dp };
            let n = if v6 {
                buf[ETH_IPV6_UDP_PAYLOAD_OFFSET..ETH_IPV6_UDP_PAYLOAD_OFFSET + payload.len()].copy_from_slice(&payload);
                let ip = Ipv6Repr::new(Ipv6Addr::from(u128::from(src) << 64 | 1), Ipv6Addr::from(u128::from(dst)), IpProtocol::Udp, 0);
                emit_eth_ipv6_udp(&mut buf, &eth, &ip, &udp, payload.len()).unwrap()
            } else {
                buf[ETH_IPV4_UDP_PAYLOAD_OFFSET..ETH_IPV4_UDP_PAYLOAD_OFFSET + payload.len()].copy_from_slice(&payload);
                let ip = Ipv4Repr::new(src.into(), dst.into(), IpProtocol::Udp, 0);
                emit_eth_ipv4_udp(&mut buf, &eth, &ip, &udp, payload.len()).unwrap()
            };
            let f = parse_frame(&buf[..n]).unwrap();
            prop_assert_eq!(f.payload(), &payload[..]);
            prop_assert_eq!(f.ports(), Some((sp, dp)));
            let mut b = buf[..n].to_vec();
            let ips = f.ip_pair().unwrap();
            let unanswerable = crate::ip::is_martian_source(ips.src()) || match ips.dst() {
                std::net::IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
                std::net::IpAddr::V6(a) => a.is_multicast(),
            };
            match turn_around_udp(&mut b) {
                Ok(m) => {
                    prop_assert!(!unanswerable);
                    let g = parse_frame(&b[..m]).unwrap();
                    prop_assert_eq!(g.ports(), Some((dp, sp)));
                }
                Err(e) => prop_assert!(unanswerable, "{:?}", e),
            }
        }
    }
}
