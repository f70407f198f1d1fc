//! flowlane's packet codec: the one place where packet bytes are parsed and written.
//!
//! The design follows smoltcp's `wire` module:
//!
//! * a **view** (`EthernetFrame<T>`, `Ipv4Packet<T>`, `UdpPacket<T>`, …) wraps any
//!   `T: AsRef<[u8]>` (a UMEM frame, a sub-slice of one, a `Vec` in tests). Its
//!   `new_checked` constructor validates every length the accessors rely on *once*;
//!   after that the field accessors are infallible, `#[inline]` and allocation-free.
//!   Setters exist when `T: AsMut<[u8]>`.
//! * a **representation** (`Ipv4Repr`, `UdpRepr`, …) is plain `Copy` data parsed from a
//!   view with `parse(&view) -> Result<Repr, WireError>` and written back with
//!   `emit(&self, &mut view)`.
//!
//! On top of the per-protocol files, [`packet`] holds the per-packet classifier
//! [`parse_frame`] (Ethernet [+ 802.1Q/802.1ad] → ARP | IPv4 | IPv6 → ICMP/UDP/TCP) and the
//! in-place builders used on the transmit hot path. The classifier parses a TCP header
//! completely ([`TcpRepr`], options included) so that the TCP stack never parses it again.
//!
//! Nothing here allocates, nothing here uses `unsafe`, and no input, however malformed, makes
//! a parser panic (this is tested with exhaustive truncation loops, proptest, and the fuzz
//! target in `wire/fuzz`).
//!
//! # Features
//!
//! Protocols the data path does not answer itself are off by default:
//!
//! * `arp`: ARP (RFC 826), [`Network::Arp`](packet::Network) and `answer_arp`;
//! * `icmp`: ICMPv4 (RFC 792), ICMPv6 (RFC 4443) and NDP (RFC 4861), the ICMP variants of
//!   [`Transport`], `answer_icmp_echo` / `ndp_advert_for`, and the ICMP errors about our TCP segments
//!   (`icmp_error`: path MTU discovery's "packet too big", destination unreachable).
//!
//! Without them, ARP frames classify as [`Network::Other`] and ICMP as [`Transport::Other`].
//! The unit tests and the fuzz target need `--all-features`.
#![forbid(unsafe_code)]

#[cfg(feature = "arp")]
pub mod arp;
pub mod checksum;
pub mod ethernet;
#[cfg(feature = "icmp")]
pub mod icmp;
#[cfg(feature = "icmp")]
pub mod icmp_error;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod packet;
pub mod peek;
pub mod tcp;
pub mod udp;

#[cfg(test)]
mod testutil;

#[cfg(feature = "arp")]
pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use checksum::ChecksumPolicy;
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr, VlanTag, VlanTags};
#[cfg(feature = "icmp")]
pub use icmp::{
    Icmpv4Message, Icmpv4Packet, Icmpv4Repr, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, NdpAdvert,
    NeighborFlags,
};
#[cfg(feature = "icmp")]
pub use icmp_error::{icmp_error, IcmpError, IcmpErrorKind, Unreachable};
pub use ip::{is_martian_source, FragmentInfo, IpPair, IpProtocol};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6ExtHeader, Ipv6FragmentHeader, Ipv6Packet, Ipv6Repr, Ipv6Upper};
pub use packet::{parse_frame, parse_frame_with, Frame, Network, Transport};
pub use tcp::{TcpFlags, TcpOptions, TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};

use core::fmt;

/// The protocol layer an error or a checksum refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II header (IEEE 802.3).
    Ethernet,
    /// An IEEE 802.1Q / 802.1ad VLAN tag.
    Vlan,
    /// ARP (RFC 826).
    Arp,
    /// IPv4 header (RFC 791).
    Ipv4,
    /// IPv6 fixed header (RFC 8200).
    Ipv6,
    /// An IPv6 extension header (RFC 8200 §4).
    Ipv6Ext,
    /// ICMP for IPv4 (RFC 792).
    Icmpv4,
    /// ICMP for IPv6 (RFC 4443) including NDP (RFC 4861).
    Icmpv6,
    /// UDP (RFC 768).
    Udp,
    /// TCP (RFC 9293).
    Tcp,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "VLAN tag",
            Layer::Arp => "ARP",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Ipv6Ext => "IPv6 extension header",
            Layer::Icmpv4 => "ICMPv4",
            Layer::Icmpv6 => "ICMPv6",
            Layer::Udp => "UDP",
            Layer::Tcp => "TCP",
        })
    }
}

/// Everything that can go wrong while parsing or building a packet.
///
/// Variants are small and `Copy` so that returning them on the per-packet path costs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the header (or the length its header announces) does.
    #[error("{layer}: truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Layer being parsed.
        layer: Layer,
        /// Bytes the layer needs.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// The IP version nibble is not the one expected.
    #[error("{layer}: bad version {version}")]
    BadVersion {
        /// Layer being parsed.
        layer: Layer,
        /// The version found.
        version: u8,
    },
    /// A header-length field is impossible (IPv4 IHL < 5, TCP data offset < 5 or past the
    /// segment, an ARP with non-Ethernet/IPv4 address sizes …), or a header to emit has one
    /// its field cannot say (IPv4 options not a multiple of 4 up to 40 bytes).
    #[error("{layer}: bad header length {len}")]
    BadHeaderLength {
        /// Layer being parsed or written.
        layer: Layer,
        /// The header length in bytes announced by the header (from an emit, the one asked for).
        len: usize,
    },
    /// A total-length field is smaller than the header it covers (IPv4 total length < IHL,
    /// UDP length < 8), or a packet to emit is longer than its length field can say (an IPv4
    /// packet or a UDP datagram over 65535 bytes, an IPv6 payload over 65535).
    #[error("{layer}: bad total length {len}")]
    BadTotalLength {
        /// Layer being parsed or written.
        layer: Layer,
        /// The length field's value (from an emit, the length asked for).
        len: usize,
    },
    /// A checksum does not verify.
    #[error("{layer}: bad checksum")]
    BadChecksum {
        /// Layer whose checksum failed.
        layer: Layer,
    },
    /// The packet is an IP fragment and the operation needs a whole datagram. Fragments are
    /// reported by [`parse_frame`] (see [`Frame::fragment`]) so that the caller can hand them
    /// to the kernel.
    #[error("{layer}: packet is a fragment")]
    Fragment {
        /// Layer (IPv4 or IPv6 extension header) that carries the fragment information.
        layer: Layer,
    },
    /// A well-formed packet this codec does not handle.
    #[error("{layer}: unsupported: {what}")]
    Unsupported {
        /// Layer being parsed.
        layer: Layer,
        /// What is not supported.
        what: &'static str,
    },
    /// A field holds a value that the protocol forbids.
    #[error("{layer}: malformed: {what}")]
    Malformed {
        /// Layer being parsed.
        layer: Layer,
        /// Which rule is broken.
        what: &'static str,
    },
    /// A valid packet that a reply-in-place helper does not answer (see [`NoAnswer`]).
    #[error("{layer}: not answered: {why}")]
    NotAnswered {
        /// Layer of the reply that would have been written.
        layer: Layer,
        /// Why not.
        why: NoAnswer,
    },
    /// An output buffer is too small for what a builder was asked to write.
    #[error("buffer too small: needed {needed} bytes, got {got}")]
    BufferTooSmall {
        /// Bytes the builder needs.
        needed: usize,
        /// Bytes in the buffer.
        got: usize,
    },
}

/// Why a turn-around helper ([`packet::turn_around_udp`], `answer_icmp_echo`) leaves a valid
/// packet unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAnswer {
    /// Sent to a broadcast or multicast address (MAC or IP): the reply would come from the
    /// group, and any host on the segment could aim replies at a victim (RFC 1122 §3.2.2.6,
    /// RFC 4443 §4.2).
    GroupDestination,
    /// From a source no reply can go to ([`ip::is_martian_source`]).
    MartianSource,
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoAnswer::GroupDestination => "sent to a broadcast or multicast address",
            NoAnswer::MartianSource => "from a source no reply can go to",
        })
    }
}

/// `Result` with [`WireError`].
pub type Result<T> = core::result::Result<T, WireError>;

/// Returns `Err(Truncated)` unless `got >= needed`.
#[inline(always)]
pub(crate) fn need(layer: Layer, needed: usize, got: usize) -> Result<()> {
    if got < needed {
        Err(WireError::Truncated { layer, needed, got })
    } else {
        Ok(())
    }
}

/// Reads a big-endian `u16` at `off`. Panics (bounds check) if out of range: callers only use
/// it on views whose length was checked.
#[inline(always)]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// Reads a big-endian `u32` at `off`.
#[inline(always)]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Writes a big-endian `u16` at `off`.
#[inline(always)]
pub(crate) fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian `u32` at `off`.
#[inline(always)]
pub(crate) fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}
