//! IPv6 fixed header and extension-header walk (RFC 8200).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! |                   Source Address (128 bits)                   |
//! |                Destination Address (128 bits)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::ip::{FragmentInfo, IpPair, IpProtocol};
use super::{be16, be32, need, put16, put32, Layer, Result, WireError};
use std::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Length of the Fragment extension header (RFC 8200 §4.5).
pub const FRAGMENT_HEADER_LEN: usize = 8;

#[inline(always)]
fn addr_at(b: &[u8], off: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    Ipv6Addr::from(a)
}

/// The solicited-node multicast address of `addr`: `ff02::1:ff00:0/104` plus its low 24 bits
/// (RFC 4291 §2.7.1), where Neighbor Solicitations for it are sent (RFC 4861 §7.2.2).
#[inline]
pub fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// A zero-copy view of an IPv6 packet. `new_checked` validates the version and that the
/// payload length fits in the buffer; [`payload`](Self::payload) ends at the payload length
/// (padding excluded). Jumbograms (RFC 2675) are not supported: a zero payload length is
/// an empty payload.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer, checking: at least 40 bytes, version 6, 40 + payload length ≤ buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        need(Layer::Ipv6, HEADER_LEN, b.len())?;
        let version = b[0] >> 4;
        if version != 6 {
            return Err(WireError::BadVersion {
                layer: Layer::Ipv6,
                version,
            });
        }
        need(Layer::Ipv6, HEADER_LEN + usize::from(be16(b, 4)), b.len())?;
        Ok(Ipv6Packet { buffer })
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version nibble.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), 0) >> 4) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), 0) & 0x000f_ffff
    }

    /// Payload length (everything after the fixed header, extension headers included).
    #[inline]
    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), 4))
    }

    /// Next header (the first extension header or the upper layer).
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[6])
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), 8)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), 24)
    }

    /// Source and destination.
    #[inline]
    pub fn addrs(&self) -> IpPair {
        IpPair::V6 {
            src: self.src_addr(),
            dst: self.dst_addr(),
        }
    }

    /// The payload (extension headers and upper layer), `payload_len` bytes.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, traffic class and flow label (20 bits).
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        debug_assert!(
            flow_label <= 0x000f_ffff,
            "flow label {flow_label:#x} over 20 bits"
        );
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        put32(self.buffer.as_mut(), 0, v);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), 4, len);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[6] = p.into();
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[7] = h;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[8..24].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[24..40].copy_from_slice(&a.octets());
    }

    /// Swaps source and destination addresses.
    #[inline]
    pub fn swap_addrs(&mut self) {
        let (s, d) = self.buffer.as_mut()[8..40].split_at_mut(16);
        s.swap_with_slice(d);
    }

    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + self.payload_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: IpProtocol,
    /// Payload length.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// A header with hop limit 64, traffic class and flow label 0.
    #[inline]
    pub const fn new(
        src_addr: Ipv6Addr,
        dst_addr: Ipv6Addr,
        next_header: IpProtocol,
        payload_len: usize,
    ) -> Ipv6Repr {
        Ipv6Repr {
            src_addr,
            dst_addr,
            next_header,
            payload_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Parses a checked view.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        Ok(Ipv6Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: packet.payload_len(),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Length of the fixed header (40).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header + payload length.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Source and destination.
    #[inline]
    pub const fn addrs(&self) -> IpPair {
        IpPair::V6 {
            src: self.src_addr,
            dst: self.dst_addr,
        }
    }

    /// Writes the fixed header. Fails with `BadTotalLength` if the payload exceeds 65535
    /// bytes, `Malformed` if the flow label does not fit its 20 bits; panics if the buffer is
    /// shorter than 40 bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) -> Result<()> {
        if self.payload_len > usize::from(u16::MAX) {
            return Err(WireError::BadTotalLength {
                layer: Layer::Ipv6,
                len: self.payload_len,
            });
        }
        if self.flow_label > 0x000f_ffff {
            return Err(WireError::Malformed {
                layer: Layer::Ipv6,
                what: "flow label over 20 bits",
            });
        }
        packet.set_version_tc_flow(self.traffic_class, self.flow_label);
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(&self.src_addr);
        packet.set_dst_addr(&self.dst_addr);
        Ok(())
    }
}

/// A view of a generic IPv6 extension header with the common `Next Header | Hdr Ext Len`
/// layout in 8-octet units (Hop-by-Hop §4.3, Routing §4.4, Destination Options §4.6).
#[derive(Debug, Clone)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6ExtHeader { buffer }
    }

    /// Wraps a buffer, checking that the header it announces fits.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        need(Layer::Ipv6Ext, 2, b.len())?;
        need(Layer::Ipv6Ext, (usize::from(b[1]) + 1) * 8, b.len())?;
        Ok(Ipv6ExtHeader { buffer })
    }

    /// Next header.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[0])
    }

    /// Header length in bytes: (Hdr Ext Len + 1) × 8.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[1]) + 1) * 8
    }

    /// The options / type-specific data after the first two bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..self.header_len()]
    }
}

/// A view of the IPv6 Fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone)]
pub struct Ipv6FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6FragmentHeader<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6FragmentHeader { buffer }
    }

    /// Wraps a buffer, checking it holds 8 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        need(Layer::Ipv6Ext, FRAGMENT_HEADER_LEN, buffer.as_ref().len())?;
        Ok(Ipv6FragmentHeader { buffer })
    }

    /// Next header of the fragmentable part.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[0])
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), 2) & 0xfff8
    }

    /// M flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[3] & 1 != 0
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6FragmentHeader<T> {
    /// Writes the whole header.
    #[inline]
    pub fn set(&mut self, next_header: IpProtocol, offset: u16, more: bool, ident: u32) {
        let b = self.buffer.as_mut();
        b[0] = next_header.into();
        b[1] = 0;
        put16(b, 2, (offset & 0xfff8) | u16::from(more));
        put32(b, 4, ident);
    }
}

/// Where the upper-layer protocol starts in an IPv6 payload, found by
/// [`walk_extension_headers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Upper {
    /// Upper-layer protocol (for a non-first fragment, the protocol of the fragmented packet).
    pub protocol: IpProtocol,
    /// Offset of the upper-layer header within the IPv6 payload.
    pub offset: usize,
    /// Set when a Fragment header makes this packet a real fragment (not an atomic fragment,
    /// RFC 6946).
    pub fragment: Option<FragmentInfo>,
    /// Whether the walk met a Routing header (RFC 8200 §4.4; with no segments left, as any
    /// other is refused): the source chose the path.
    pub routing: bool,
}

/// Pad1, one of the option types of Hop-by-Hop and Destination Options headers that
/// [`walk_extension_headers`] knows (RFC 8200 §4.2).
const OPT_PAD1: u8 = 0;
/// PadN (RFC 8200 §4.2).
const OPT_PADN: u8 = 1;
/// Router Alert (RFC 2711 §2): for routers; a host skips it.
const OPT_ROUTER_ALERT: u8 = 5;
/// Jumbo Payload (RFC 2675 §2).
const OPT_JUMBO: u8 = 0xc2;

/// The most bytes of padding (Pad1 and PadN options) in a row: RFC 8200 §4.2 pads an option
/// to its alignment, which needs at most 7 (RFC 4942 §2.1.9.5), as Linux's `ip6_parse_tlv`
/// takes.
const MAX_PADDING: usize = 7;
/// The most options other than padding in one Hop-by-Hop or Destination Options header: Linux's
/// default (`net.ipv6.max_hbh_opts_number`, `max_dst_opts_number`: 8, RFC 8504 §5.3).
const MAX_OPTIONS: usize = 8;

/// Checks the options of a Hop-by-Hop or Destination Options header (`data`: what follows
/// its Next Header and Hdr Ext Len) as RFC 8200 §4.2 has a node process them, as Linux's
/// `ip6_parse_tlv` does: Pad1 is one byte, every other option a type, a length and that many
/// bytes, which must end within the header (`Malformed` otherwise). An unrecognized option
/// whose type's two high-order bits are not `00` says to discard the packet (`Unsupported`);
/// so does a Jumbo Payload option, jumbograms (RFC 2675) being unsupported. A header that is
/// no use but to make a host walk it is `Malformed` too, as Linux drops it (RFC 8504 §5.3:
/// limits on the options a host processes, against denial of service): more than
/// [`MAX_PADDING`] bytes of padding in a row, a PadN whose bytes are not zero (RFC 4942
/// §2.1.9.5: a covert channel), more than [`MAX_OPTIONS`] other options. Without those
/// limits, a 1 500-byte packet of Pad1s or of empty unknown options cost over a thousand
/// steps of this loop, to be answered as any other.
#[inline]
fn check_options(data: &[u8]) -> Result<()> {
    let mut i = 0;
    let mut padding = 0usize;
    let mut options = 0usize;
    let too_much_padding = WireError::Malformed {
        layer: Layer::Ipv6Ext,
        what: "more than 7 bytes of padding in a row",
    };
    while let Some(&kind) = data.get(i) {
        if kind == OPT_PAD1 {
            padding += 1;
            if padding > MAX_PADDING {
                return Err(too_much_padding);
            }
            i += 1;
            continue;
        }
        let overrun = WireError::Malformed {
            layer: Layer::Ipv6Ext,
            what: "option running past the end of its header",
        };
        let Some(&len) = data.get(i + 1) else {
            return Err(overrun);
        };
        let end = i + 2 + usize::from(len);
        if end > data.len() {
            return Err(overrun);
        }
        if kind == OPT_PADN {
            padding += 2 + usize::from(len);
            if padding > MAX_PADDING {
                return Err(too_much_padding);
            }
            if data[i + 2..end].iter().any(|&b| b != 0) {
                return Err(WireError::Malformed {
                    layer: Layer::Ipv6Ext,
                    what: "PadN option with non-zero bytes",
                });
            }
            i = end;
            continue;
        }
        padding = 0;
        options += 1;
        if options > MAX_OPTIONS {
            return Err(WireError::Malformed {
                layer: Layer::Ipv6Ext,
                what: "more than 8 options in one header",
            });
        }
        match kind {
            OPT_ROUTER_ALERT => {}
            OPT_JUMBO => {
                return Err(WireError::Unsupported {
                    layer: Layer::Ipv6Ext,
                    what: "Jumbo Payload option",
                })
            }
            // §4.2: 01, 10 and 11 discard the packet (10 and 11 with an ICMP Parameter
            // Problem, which is not this codec's to send).
            _ if kind & 0xc0 != 0 => {
                return Err(WireError::Unsupported {
                    layer: Layer::Ipv6Ext,
                    what: "unrecognized option whose type says discard",
                })
            }
            _ => {} // §4.2: 00, skip over this option.
        }
        i = end;
    }
    Ok(())
}

/// Walks Hop-by-Hop, Routing, Destination Options and Fragment headers from `first` (the
/// fixed header's Next Header) through `payload` (the IPv6 payload) to the upper-layer
/// protocol, with bounds checks at every step (RFC 8200 §4).
///
/// * Hop-by-Hop anywhere but first is `Malformed` (§4.1).
/// * The options of Hop-by-Hop and Destination Options headers are walked (§4.2): one that
///   runs past its header is `Malformed`, and so is a header past RFC 8504 §5.3's limits
///   (more than 7 bytes of padding in a row, a PadN of non-zero bytes, more than 8 other
///   options); an unrecognized one whose type says to discard the packet, or a Jumbo Payload
///   option, is `Unsupported`.
/// * A Routing header with Segments Left ≠ 0 is `Unsupported`: this host is not the final
///   destination, and the upper-layer pseudo-header would need the final address (§8.1).
///   One with none left is walked and reported (`routing`).
/// * A Fragment header with a non-zero offset stops the walk (what follows is fragment data);
///   a first fragment is walked further. Either way `fragment` is reported.
/// * Authentication (AH), ESP, No Next Header and any unknown value end the walk as the
///   "upper layer": what AH or ESP protect is not to be taken without the IPsec processing
///   this codec does not do (RFC 4302 §3.4, RFC 4303 §3.4, RFC 4301 §5.2).
#[inline]
pub fn walk_extension_headers(first: IpProtocol, payload: &[u8]) -> Result<Ipv6Upper> {
    let mut next = first;
    let mut off = 0usize;
    let mut fragment = None;
    let mut routing = false;
    loop {
        match next {
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Opts => {
                if next == IpProtocol::HopByHop && off != 0 {
                    return Err(WireError::Malformed {
                        layer: Layer::Ipv6Ext,
                        what: "Hop-by-Hop Options header not first",
                    });
                }
                let rest = &payload[off..];
                let h = Ipv6ExtHeader::new_checked(rest)?;
                if next == IpProtocol::Ipv6Route {
                    if rest[3] != 0 {
                        // `rest` has at least 8 bytes: header_len >= 8 was checked.
                        return Err(WireError::Unsupported {
                            layer: Layer::Ipv6Ext,
                            what: "Routing header with segments left",
                        });
                    }
                    routing = true;
                } else {
                    check_options(h.data())?;
                }
                next = h.next_header();
                off += h.header_len();
            }
            IpProtocol::Ipv6Frag => {
                let h = Ipv6FragmentHeader::new_checked(&payload[off..])?;
                off += FRAGMENT_HEADER_LEN;
                next = h.next_header();
                let (offset, more) = (h.frag_offset(), h.more_frags());
                if offset == 0 && !more {
                    continue; // atomic fragment: a whole packet (RFC 6946)
                }
                fragment = Some(FragmentInfo {
                    ident: h.ident(),
                    offset,
                    more,
                });
                if offset != 0 {
                    return Ok(Ipv6Upper {
                        protocol: next,
                        offset: off,
                        fragment,
                        routing,
                    });
                }
            }
            _ => {
                return Ok(Ipv6Upper {
                    protocol: next,
                    offset: off,
                    fragment,
                    routing,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(next: u8, payload_len: u16) -> Vec<u8> {
        let mut b = vec![0x60, 0x0a, 0xbc, 0xde];
        b.extend_from_slice(&payload_len.to_be_bytes());
        b.push(next);
        b.push(255);
        b.extend_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(&"ff02::1:ff00:2".parse::<Ipv6Addr>().unwrap().octets());
        b
    }

    #[test]
    fn fixed_header() {
        let mut b = header(58, 4);
        b.extend_from_slice(&[1, 2, 3, 4, 0, 0]); // + 2 bytes of padding
        let v = Ipv6Packet::new_checked(&b[..]).unwrap();
        let r = Ipv6Repr::parse(&v).unwrap();
        assert_eq!(r.traffic_class, 0x00);
        assert_eq!(r.flow_label, 0xabcde);
        assert_eq!(r.next_header, IpProtocol::Icmpv6);
        assert_eq!(r.hop_limit, 255);
        assert_eq!(r.src_addr, "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v.payload(), &[1, 2, 3, 4]);
        let mut out = [0u8; 40];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(&out[..], &b[..40]);
        for n in 0..44 {
            assert!(matches!(
                Ipv6Packet::new_checked(&b[..n]),
                Err(WireError::Truncated { .. })
            ));
        }
        let mut bad = b.clone();
        bad[0] = 0x45;
        assert!(matches!(
            Ipv6Packet::new_checked(&bad[..]),
            Err(WireError::BadVersion { version: 4, .. })
        ));
    }

    #[test]
    fn traffic_class_round_trip() {
        let r = Ipv6Repr {
            traffic_class: 0xb9,
            flow_label: 0xfffff,
            ..Ipv6Repr::new(
                Ipv6Addr::LOCALHOST,
                Ipv6Addr::UNSPECIFIED,
                IpProtocol::Udp,
                0,
            )
        };
        let mut out = [0u8; 40];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_checked(&out[..]).unwrap()).unwrap(),
            r
        );
    }

    /// HBH (8 bytes, PadN) → Routing (type 4, segments left 0, 24 bytes) → Dest opts
    /// (16 bytes: an option and padding) → Fragment (first fragment, M=1) → UDP.
    fn chain() -> Vec<u8> {
        let mut p = vec![43, 0, 1, 4, 0, 0, 0, 0]; // HBH, next Routing
        p.extend_from_slice(&[60, 2, 4, 0]); // Routing: next DestOpts, 24 bytes, type 4, SL 0
        p.extend_from_slice(&[0; 20]);
        p.extend_from_slice(&[44, 1, 0x1e, 10]); // DestOpts: next Frag, 16 bytes, a skipped
        p.extend_from_slice(&[0xab; 10]); // option of type 0x1e (00xxxxxx), 12 bytes,
        p.extend_from_slice(&[0; 2]); // two Pad1
        p.extend_from_slice(&[17, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]); // Frag: UDP, off 0, M
        p.extend_from_slice(&[0; 8]); // UDP header
        p
    }

    #[test]
    fn extension_chain() {
        let p = chain();
        let u = walk_extension_headers(IpProtocol::HopByHop, &p).unwrap();
        assert_eq!(u.protocol, IpProtocol::Udp);
        assert_eq!(u.offset, 8 + 24 + 16 + 8);
        assert_eq!(
            u.fragment,
            Some(FragmentInfo {
                ident: 0xdeadbeef,
                offset: 0,
                more: true
            })
        );
        // Every truncation of the headers is an error (never a panic); the upper-layer header
        // itself is not the walk's business.
        for n in 0..u.offset {
            assert!(
                walk_extension_headers(IpProtocol::HopByHop, &p[..n]).is_err(),
                "{n}"
            );
        }
    }

    #[test]
    fn non_first_fragment_stops() {
        let p = [6u8, 0, 0x05, 0xc8, 0, 0, 0, 7, 0xff, 0xff]; // TCP, offset 1480, M=0
        let u = walk_extension_headers(IpProtocol::Ipv6Frag, &p).unwrap();
        assert_eq!(u.protocol, IpProtocol::Tcp);
        assert_eq!(u.offset, 8);
        assert_eq!(
            u.fragment,
            Some(FragmentInfo {
                ident: 7,
                offset: 1480,
                more: false
            })
        );
        let mut hdr = [0u8; 8];
        Ipv6FragmentHeader::new_unchecked(&mut hdr[..]).set(IpProtocol::Tcp, 1480, false, 7);
        assert_eq!(hdr, p[..8]);
    }

    #[test]
    fn atomic_fragment_is_whole() {
        let p = [58u8, 0, 0, 0, 0, 0, 0, 1, 128, 0];
        let u = walk_extension_headers(IpProtocol::Ipv6Frag, &p).unwrap();
        assert_eq!(u.protocol, IpProtocol::Icmpv6);
        assert_eq!(u.fragment, None);
    }

    #[test]
    fn malformed_chains() {
        // HBH not first.
        let p = [0u8, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            walk_extension_headers(IpProtocol::Ipv6Opts, &p),
            Err(WireError::Malformed { .. })
        ));
        // Length running past the buffer.
        let p = [17u8, 5, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            walk_extension_headers(IpProtocol::Ipv6Opts, &p),
            Err(WireError::Truncated {
                layer: Layer::Ipv6Ext,
                needed: 48,
                got: 8
            })
        ));
        // Routing header with segments left.
        let p = [17u8, 0, 4, 1, 0, 0, 0, 0];
        assert!(matches!(
            walk_extension_headers(IpProtocol::Ipv6Route, &p),
            Err(WireError::Unsupported { .. })
        ));
    }

    /// RFC 4302 §3.4, RFC 4301 §5.2: without IPsec, what an Authentication Header protects is
    /// not to be taken; the walk ends at AH as at ESP, TCP behind it included.
    #[test]
    fn walk_ends_at_ah() {
        // AH: 12 bytes announced (len 1), then TCP.
        let mut p = vec![6u8, 1];
        p.extend_from_slice(&[0; 10]);
        p.extend_from_slice(&[0; 20]);
        let u = walk_extension_headers(IpProtocol::Ah, &p).unwrap();
        assert_eq!((u.protocol, u.offset), (IpProtocol::Ah, 0));
        // Behind a Destination Options header too.
        let mut q = vec![51u8, 0, 1, 4, 0, 0, 0, 0];
        q.extend_from_slice(&p);
        let u = walk_extension_headers(IpProtocol::Ipv6Opts, &q).unwrap();
        assert_eq!((u.protocol, u.offset), (IpProtocol::Ah, 8));
    }

    /// RFC 8200 §4.2: the options of Hop-by-Hop and Destination Options headers are walked.
    #[test]
    fn options_walked() {
        let opts = |first: IpProtocol, h: [u8; 8]| walk_extension_headers(first, &h);
        let unsupported = |r: Result<Ipv6Upper>| matches!(r, Err(WireError::Unsupported { .. }));
        let malformed = |r: Result<Ipv6Upper>| matches!(r, Err(WireError::Malformed { .. }));
        // Unknown options whose type's high bits are 01, 10, 11: discard.
        for kind in [0x40, 0x80, 0xc0, 0x7f, 0xbe, 0xff] {
            let h = [6, 0, kind, 4, 0, 0, 0, 0];
            assert!(unsupported(opts(IpProtocol::Ipv6Opts, h)), "{kind:#x}");
            assert!(unsupported(opts(IpProtocol::HopByHop, h)), "{kind:#x}");
        }
        // Jumbo Payload (RFC 2675) in a packet with a payload length.
        assert!(unsupported(opts(
            IpProtocol::HopByHop,
            [6, 0, 0xc2, 4, 0, 1, 0, 0]
        )));
        // Options running past the header: a PadN of 200, a type with no length byte
        // (PadN, or an unknown one), a length one over.
        for h in [
            [6, 0, 1, 200, 0, 0, 0, 0],
            [6, 0, 0, 0, 0, 0, 0, 1],
            [6, 0, 1, 2, 0, 0, 0, 0x80],
            [6, 0, 0x1e, 5, 0, 0, 0, 0],
        ] {
            assert!(malformed(opts(IpProtocol::Ipv6Opts, h)), "{h:?}");
        }
        // Skipped: Pad1s, PadN, Router Alert (RFC 2711), an unknown option of type 00xxxxxx.
        for h in [
            [6, 0, 0, 0, 0, 0, 0, 0],
            [6, 0, 1, 4, 0, 0, 0, 0],
            [6, 0, 5, 2, 0, 0, 1, 0],
            [6, 0, 0x1e, 4, 0xff, 0xff, 0xff, 0xff],
            [6, 0, 0x3f, 0, 0, 1, 1, 0],
        ] {
            let u = opts(IpProtocol::HopByHop, h).unwrap();
            assert_eq!((u.protocol, u.offset), (IpProtocol::Tcp, 8), "{h:?}");
        }
    }

    /// RFC 8504 §5.3, as Linux's `ip6_parse_tlv`: a header of padding or of many options,
    /// there only to be walked, is refused; the padding an option needs is not.
    #[test]
    fn options_that_only_cost_a_walk_are_refused() {
        // A Destination Options header (`len` 8-byte units past the first) holding `data`,
        // the rest Pad1s.
        let header = |units: u8, data: &[u8]| {
            let mut h = vec![6u8, units];
            h.extend_from_slice(data);
            h.resize(8 * (usize::from(units) + 1), 0);
            walk_extension_headers(IpProtocol::Ipv6Opts, &h)
        };
        let refused = |r: Result<Ipv6Upper>, what: &str| matches!(r, Err(WireError::Malformed { what: w, .. }) if w == what);
        let padding = "more than 7 bytes of padding in a row";
        // 14 Pad1s (an empty 16-byte header) and the same of PadN; 8 in a row; Pad1s after a
        // PadN; a header of 2 KiB of Pad1s.
        assert!(refused(header(1, &[]), padding));
        assert!(refused(header(1, &[1, 12]), padding));
        assert!(refused(header(1, &[5, 2, 0, 0]), padding)); // Router Alert, 10 Pad1s
        assert!(refused(header(1, &[1, 4, 0, 0, 0, 0, 0, 0]), padding));
        assert!(refused(header(255, &[]), padding));
        // At most 7 in a row: around an option, each run is counted apart.
        let mut h = vec![1u8, 3, 0, 0, 0, 0, 0x1e, 0, 1, 3, 0, 0, 0, 0];
        assert!(header(1, &h).is_ok(), "7, an option, 5");
        h.push(0x1e);
        h.push(0);
        assert!(header(2, &h).is_ok(), "then an option, then 6 Pad1s");
        // PadN bytes are zero (RFC 4942 §2.1.9.5).
        assert!(refused(
            header(0, &[1, 4, 0, 0, 7, 0]),
            "PadN option with non-zero bytes"
        ));
        // Eight options other than padding in one header, not nine.
        let options = |n: usize| {
            let mut d = Vec::new();
            for _ in 0..n {
                d.extend_from_slice(&[0x1e, 0]);
            }
            let units = (2 + d.len()).div_ceil(8) - 1;
            header(units as u8, &d)
        };
        assert!(options(8).is_ok());
        assert!(refused(options(9), "more than 8 options in one header"));
        assert!(refused(options(600), "more than 8 options in one header"));
    }

    #[test]
    fn routing_reported() {
        assert!(
            walk_extension_headers(IpProtocol::HopByHop, &chain())
                .unwrap()
                .routing
        );
        let p = [6u8, 0, 1, 4, 0, 0, 0, 0];
        assert!(
            !walk_extension_headers(IpProtocol::Ipv6Opts, &p)
                .unwrap()
                .routing
        );
    }

    #[test]
    fn emit_refuses_wide_flow_label() {
        let r = Ipv6Repr {
            flow_label: 0x10_0000,
            ..Ipv6Repr::new(
                Ipv6Addr::LOCALHOST,
                Ipv6Addr::UNSPECIFIED,
                IpProtocol::Udp,
                0,
            )
        };
        let mut out = [0u8; 40];
        assert!(matches!(
            r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..])),
            Err(WireError::Malformed {
                layer: Layer::Ipv6,
                ..
            })
        ));
    }

    #[test]
    fn solicited_node_addr() {
        let a: Ipv6Addr = "2001:db8::abcd:ef12:3456".parse().unwrap();
        assert_eq!(
            solicited_node(&a),
            "ff02::1:ff12:3456".parse::<Ipv6Addr>().unwrap()
        );
    }

    proptest! {
        #[test]
        fn walk_never_panics(first in any::<u8>(), data in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(u) = walk_extension_headers(IpProtocol::from(first), &data) {
                prop_assert!(u.offset <= data.len());
            }
        }

        #[test]
        fn mutated_chain_never_panics(idx in 0usize..64, val in any::<u8>(), cut in 0usize..64) {
            let mut p = chain();
            let i = idx % p.len();
            p[i] = val;
            let n = cut.min(p.len());
            if let Ok(u) = walk_extension_headers(IpProtocol::HopByHop, &p[..n]) {
                prop_assert!(u.offset <= n);
            }
        }
    }
}
