//! ICMP for IPv4 (RFC 792), ICMPv6 (RFC 4443) and the IPv6 Neighbor Discovery messages the
//! data path answers (RFC 4861 §4.3, §4.4, §7.2.4).
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! |           Identifier          |        Sequence Number        |   (echo)
//! |     Data ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! There is no length field: an ICMP message is the whole IP payload, so views must be built
//! over exactly that payload.

use super::checksum;
use super::ethernet::EthernetAddress;
use super::ip::IpPair;
use super::ipv6::solicited_node;
use super::{be16, need, put16, Layer, Result, WireError};
use std::net::Ipv6Addr;

/// Length of the ICMP header (type, code, checksum, 4 bytes of "rest of header").
pub const HEADER_LEN: usize = 8;
/// Length of a Neighbor Solicitation/Advertisement without options.
pub const NDP_NS_NA_LEN: usize = 24;
/// Length of an NDP link-layer address option for Ethernet.
pub const NDP_LLADDR_OPT_LEN: usize = 8;
/// NDP option type: Source Link-Layer Address (RFC 4861 §4.6.1).
pub const NDP_OPT_SOURCE_LLADDR: u8 = 1;
/// NDP option type: Target Link-Layer Address (RFC 4861 §4.6.1).
pub const NDP_OPT_TARGET_LLADDR: u8 = 2;
/// `ff02::1`, the link-local all-nodes multicast address (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// ICMPv4 message types (RFC 792).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Message {
    /// 0: Echo Reply.
    EchoReply,
    /// 3: Destination Unreachable.
    DstUnreachable,
    /// 5: Redirect.
    Redirect,
    /// 8: Echo Request.
    EchoRequest,
    /// 11: Time Exceeded.
    TimeExceeded,
    /// 12: Parameter Problem.
    ParamProblem,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Icmpv4Message {
    #[inline]
    fn from(v: u8) -> Self {
        match v {
            0 => Icmpv4Message::EchoReply,
            3 => Icmpv4Message::DstUnreachable,
            5 => Icmpv4Message::Redirect,
            8 => Icmpv4Message::EchoRequest,
            11 => Icmpv4Message::TimeExceeded,
            12 => Icmpv4Message::ParamProblem,
            o => Icmpv4Message::Unknown(o),
        }
    }
}

impl From<Icmpv4Message> for u8 {
    #[inline]
    fn from(m: Icmpv4Message) -> u8 {
        match m {
            Icmpv4Message::EchoReply => 0,
            Icmpv4Message::DstUnreachable => 3,
            Icmpv4Message::Redirect => 5,
            Icmpv4Message::EchoRequest => 8,
            Icmpv4Message::TimeExceeded => 11,
            Icmpv4Message::ParamProblem => 12,
            Icmpv4Message::Unknown(v) => v,
        }
    }
}

/// ICMPv6 message types (RFC 4443 §2.1, RFC 4861 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Message {
    /// 1: Destination Unreachable.
    DstUnreachable,
    /// 2: Packet Too Big.
    PktTooBig,
    /// 3: Time Exceeded.
    TimeExceeded,
    /// 4: Parameter Problem.
    ParamProblem,
    /// 128: Echo Request.
    EchoRequest,
    /// 129: Echo Reply.
    EchoReply,
    /// 133: Router Solicitation.
    RouterSolicit,
    /// 134: Router Advertisement.
    RouterAdvert,
    /// 135: Neighbor Solicitation.
    NeighborSolicit,
    /// 136: Neighbor Advertisement.
    NeighborAdvert,
    /// 137: Redirect.
    Redirect,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Icmpv6Message {
    #[inline]
    fn from(v: u8) -> Self {
        match v {
            1 => Icmpv6Message::DstUnreachable,
            2 => Icmpv6Message::PktTooBig,
            3 => Icmpv6Message::TimeExceeded,
            4 => Icmpv6Message::ParamProblem,
            128 => Icmpv6Message::EchoRequest,
            129 => Icmpv6Message::EchoReply,
            133 => Icmpv6Message::RouterSolicit,
            134 => Icmpv6Message::RouterAdvert,
            135 => Icmpv6Message::NeighborSolicit,
            136 => Icmpv6Message::NeighborAdvert,
            137 => Icmpv6Message::Redirect,
            o => Icmpv6Message::Unknown(o),
        }
    }
}

impl From<Icmpv6Message> for u8 {
    #[inline]
    fn from(m: Icmpv6Message) -> u8 {
        match m {
            Icmpv6Message::DstUnreachable => 1,
            Icmpv6Message::PktTooBig => 2,
            Icmpv6Message::TimeExceeded => 3,
            Icmpv6Message::ParamProblem => 4,
            Icmpv6Message::EchoRequest => 128,
            Icmpv6Message::EchoReply => 129,
            Icmpv6Message::RouterSolicit => 133,
            Icmpv6Message::RouterAdvert => 134,
            Icmpv6Message::NeighborSolicit => 135,
            Icmpv6Message::NeighborAdvert => 136,
            Icmpv6Message::Redirect => 137,
            Icmpv6Message::Unknown(v) => v,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ICMPv4
// ---------------------------------------------------------------------------------------------

/// A zero-copy view of an ICMPv4 message (the whole IPv4 payload). `new_checked` ensures the
/// 8-byte header is present.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }

    /// Wraps a buffer, checking the 8-byte header is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        need(Layer::Icmpv4, HEADER_LEN, buffer.as_ref().len())?;
        Ok(Icmpv4Packet { buffer })
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message::from(self.buffer.as_ref()[0])
    }

    /// Code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Echo identifier (bytes 4..6).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Echo sequence number (bytes 6..8).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Data after the 8-byte header.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Whether the checksum over the whole message verifies (RFC 792).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the type.
    #[inline]
    pub fn set_msg_type(&mut self, t: Icmpv4Message) {
        self.buffer.as_mut()[0] = t.into();
    }

    /// Sets the code.
    #[inline]
    pub fn set_msg_code(&mut self, c: u8) {
        self.buffer.as_mut()[1] = c;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), 2, c);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 4, v);
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    /// Mutable data after the header.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes and stores the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// A parsed ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr<'a> {
    /// Echo Request (type 8).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data to be echoed.
        data: &'a [u8],
    },
    /// Echo Reply (type 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echoed data.
        data: &'a [u8],
    },
    /// Any other message, not interpreted.
    Other {
        /// Type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// Bytes 4..8 of the header.
        rest_of_header: [u8; 4],
        /// Data after the header.
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Parses a checked view and verifies its checksum.
    #[inline]
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Icmpv4Packet<&'a T>) -> Result<Icmpv4Repr<'a>> {
        checksum::check(packet.verify_checksum(), Layer::Icmpv4)?;
        let b: &'a [u8] = packet.buffer.as_ref();
        let data = &b[HEADER_LEN..];
        Ok(match (packet.msg_type(), packet.msg_code()) {
            (Icmpv4Message::EchoRequest, 0) => Icmpv4Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            },
            (Icmpv4Message::EchoReply, 0) => Icmpv4Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            },
            (t, code) => Icmpv4Repr::Other {
                msg_type: t.into(),
                code,
                rest_of_header: [b[4], b[5], b[6], b[7]],
                data,
            },
        })
    }

    /// Message length.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Icmpv4Repr::EchoRequest { data, .. }
                | Icmpv4Repr::EchoReply { data, .. }
                | Icmpv4Repr::Other { data, .. } => data.len(),
            }
    }

    /// The Echo Reply answering this Echo Request (RFC 792: same identifier, sequence number
    /// and data), or `None`.
    #[inline]
    pub fn echo_reply(&self) -> Option<Icmpv4Repr<'a>> {
        match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => Some(Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            }),
            _ => None,
        }
    }

    /// Writes the message (copying its data) and checksums the first
    /// [`buffer_len`](Self::buffer_len) bytes. Fails if the buffer is shorter.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv4Packet<T>) -> Result<()> {
        let len = self.buffer_len();
        let got = packet.buffer.as_ref().len();
        if got < len {
            return Err(WireError::BufferTooSmall { needed: len, got });
        }
        let b = &mut packet.buffer.as_mut()[..len];
        let (t, code, rest, data): (u8, u8, [u8; 4], &[u8]) = match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => (8, 0, echo_rest(ident, seq_no), data),
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => (0, 0, echo_rest(ident, seq_no), data),
            Icmpv4Repr::Other {
                msg_type,
                code,
                rest_of_header,
                data,
            } => (msg_type, code, rest_of_header, data),
        };
        b[0] = t;
        b[1] = code;
        b[2] = 0;
        b[3] = 0;
        b[4..8].copy_from_slice(&rest);
        b[8..].copy_from_slice(data);
        let c = checksum::checksum(b);
        put16(b, 2, c);
        Ok(())
    }
}

#[inline(always)]
fn echo_rest(ident: u16, seq_no: u16) -> [u8; 4] {
    let i = ident.to_be_bytes();
    let s = seq_no.to_be_bytes();
    [i[0], i[1], s[0], s[1]]
}

// ---------------------------------------------------------------------------------------------
// ICMPv6
// ---------------------------------------------------------------------------------------------

/// A zero-copy view of an ICMPv6 message (the whole upper-layer payload). `new_checked`
/// ensures the 8-byte header is present (4 bytes of type/code/checksum plus the 4-byte
/// message body every ICMPv6 message has, RFC 4443 §2.1).
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    /// Wraps a buffer, checking the 8-byte header is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        need(Layer::Icmpv6, HEADER_LEN, buffer.as_ref().len())?;
        Ok(Icmpv6Packet { buffer })
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv6Message {
        Icmpv6Message::from(self.buffer.as_ref()[0])
    }

    /// Code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Echo identifier.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Everything after the 8-byte header (echo data; for NS/NA, target address and options).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Whether the checksum verifies with the pseudo-header (RFC 4443 §2.3).
    #[inline]
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        checksum::verify_icmpv6_checksum(src, dst, self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the type.
    #[inline]
    pub fn set_msg_type(&mut self, t: Icmpv6Message) {
        self.buffer.as_mut()[0] = t.into();
    }

    /// Sets the code.
    #[inline]
    pub fn set_msg_code(&mut self, c: u8) {
        self.buffer.as_mut()[1] = c;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), 2, c);
    }

    /// Computes and stores the checksum with the pseudo-header.
    #[inline]
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        // Cannot fail: a checked view has at least 8 bytes.
        let _ = checksum::fill_icmpv6_checksum(src, dst, self.buffer.as_mut());
    }
}

/// The R, S and O flags of a Neighbor Advertisement (RFC 4861 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NeighborFlags {
    /// Router flag.
    pub router: bool,
    /// Solicited flag: sent in response to a Neighbor Solicitation.
    pub solicited: bool,
    /// Override flag: override an existing cache entry.
    pub override_: bool,
}

impl NeighborFlags {
    /// Decodes the flag byte (byte 4 of the message).
    #[inline]
    pub const fn from_byte(b: u8) -> NeighborFlags {
        NeighborFlags {
            router: b & 0x80 != 0,
            solicited: b & 0x40 != 0,
            override_: b & 0x20 != 0,
        }
    }

    /// Encodes the flag byte.
    #[inline]
    pub const fn to_byte(&self) -> u8 {
        ((self.router as u8) << 7) | ((self.solicited as u8) << 6) | ((self.override_ as u8) << 5)
    }
}

/// A parsed ICMPv6 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Repr<'a> {
    /// Echo Request (type 128, RFC 4443 §4.1).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data to be echoed.
        data: &'a [u8],
    },
    /// Echo Reply (type 129, RFC 4443 §4.2).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echoed data.
        data: &'a [u8],
    },
    /// Neighbor Solicitation (type 135, RFC 4861 §4.3).
    NeighborSolicit {
        /// The address whose link-layer address is asked for.
        target_addr: Ipv6Addr,
        /// The Source Link-Layer Address option, if present.
        source_lladdr: Option<EthernetAddress>,
    },
    /// Neighbor Advertisement (type 136, RFC 4861 §4.4).
    NeighborAdvert {
        /// R/S/O flags.
        flags: NeighborFlags,
        /// The address advertised.
        target_addr: Ipv6Addr,
        /// The Target Link-Layer Address option, if present.
        target_lladdr: Option<EthernetAddress>,
    },
    /// Any other message, not interpreted.
    Other {
        /// Type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// Everything after type, code and checksum.
        body: &'a [u8],
    },
}

/// Finds the Ethernet link-layer address option of `kind` in NDP options (RFC 4861 §4.6).
/// A zero-length option is `Malformed` (§4.6: "Nodes MUST silently discard an ND packet that
/// contains an option with length zero"); unknown options are skipped (§4.6, §7.1).
fn ndp_lladdr_option(mut opts: &[u8], kind: u8) -> Result<Option<EthernetAddress>> {
    let mut found = None;
    while !opts.is_empty() {
        need(Layer::Icmpv6, 2, opts.len())?;
        let len = usize::from(opts[1]) * 8;
        if len == 0 {
            return Err(WireError::Malformed {
                layer: Layer::Icmpv6,
                what: "NDP option with length zero",
            });
        }
        need(Layer::Icmpv6, len, opts.len())?;
        if opts[0] == kind && len == NDP_LLADDR_OPT_LEN && found.is_none() {
            found = Some(EthernetAddress::from_bytes(&opts[2..8]));
        }
        opts = &opts[len..];
    }
    Ok(found)
}

#[inline(always)]
fn ipv6_at(b: &[u8], off: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    Ipv6Addr::from(a)
}

impl<'a> Icmpv6Repr<'a> {
    /// Parses a checked view, verifying the checksum against the pseudo-header of `src`/`dst`.
    /// NS/NA are validated per RFC 4861 §7.1.1/§7.1.2 as far as the message itself allows
    /// (code 0, ≥ 24 bytes, target not multicast, no zero-length option, no Source Link-Layer
    /// option when the source is unspecified); the IP hop limit of 255 is the caller's check.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &Icmpv6Packet<&'a T>,
    ) -> Result<Icmpv6Repr<'a>> {
        checksum::check(packet.verify_checksum(src, dst), Layer::Icmpv6)?;
        let b: &'a [u8] = packet.buffer.as_ref();
        let code = packet.msg_code();
        let ndp_malformed = |what| WireError::Malformed {
            layer: Layer::Icmpv6,
            what,
        };
        Ok(match packet.msg_type() {
            Icmpv6Message::EchoRequest if code == 0 => Icmpv6Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: &b[HEADER_LEN..],
            },
            Icmpv6Message::EchoReply if code == 0 => Icmpv6Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: &b[HEADER_LEN..],
            },
            t @ (Icmpv6Message::NeighborSolicit | Icmpv6Message::NeighborAdvert) => {
                if code != 0 {
                    return Err(ndp_malformed("NDP code is not 0"));
                }
                need(Layer::Icmpv6, NDP_NS_NA_LEN, b.len())?;
                let target_addr = ipv6_at(b, 8);
                if target_addr.is_multicast() {
                    return Err(ndp_malformed("NDP target is multicast"));
                }
                let opts = &b[NDP_NS_NA_LEN..];
                if t == Icmpv6Message::NeighborSolicit {
                    let source_lladdr = ndp_lladdr_option(opts, NDP_OPT_SOURCE_LLADDR)?;
                    if src.is_unspecified() && source_lladdr.is_some() {
                        return Err(ndp_malformed("NS from :: with a source link-layer option"));
                    }
                    Icmpv6Repr::NeighborSolicit {
                        target_addr,
                        source_lladdr,
                    }
                } else {
                    let flags = NeighborFlags::from_byte(b[4]);
                    if flags.solicited && dst.is_multicast() {
                        return Err(ndp_malformed("solicited NA to a multicast address"));
                    }
                    Icmpv6Repr::NeighborAdvert {
                        flags,
                        target_addr,
                        target_lladdr: ndp_lladdr_option(opts, NDP_OPT_TARGET_LLADDR)?,
                    }
                }
            }
            t => Icmpv6Repr::Other {
                msg_type: t.into(),
                code,
                body: &b[4..],
            },
        })
    }

    /// Message length.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv6Repr::EchoRequest { data, .. } | Icmpv6Repr::EchoReply { data, .. } => {
                HEADER_LEN + data.len()
            }
            Icmpv6Repr::NeighborSolicit { source_lladdr, .. } => {
                NDP_NS_NA_LEN + if source_lladdr.is_some() { 8 } else { 0 }
            }
            Icmpv6Repr::NeighborAdvert { target_lladdr, .. } => {
                NDP_NS_NA_LEN + if target_lladdr.is_some() { 8 } else { 0 }
            }
            Icmpv6Repr::Other { body, .. } => 4 + body.len(),
        }
    }

    /// The Echo Reply answering this Echo Request (RFC 4443 §4.2), or `None`.
    #[inline]
    pub fn echo_reply(&self) -> Option<Icmpv6Repr<'a>> {
        match *self {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => Some(Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data,
            }),
            _ => None,
        }
    }

    /// Writes the message into the first [`buffer_len`](Self::buffer_len) bytes and fills the
    /// checksum for `src`/`dst`. Fails if the buffer is shorter, and with `Malformed` for an
    /// [`Other`](Self::Other) whose body is under the 4 bytes every message has (RFC 4443
    /// §2.1; [`Icmpv6Packet::new_checked`] refuses a message under 8 bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &mut Icmpv6Packet<T>,
    ) -> Result<()> {
        let len = self.buffer_len();
        if len < HEADER_LEN {
            return Err(WireError::Malformed {
                layer: Layer::Icmpv6,
                what: "message under 8 bytes",
            });
        }
        let got = packet.buffer.as_ref().len();
        if got < len {
            return Err(WireError::BufferTooSmall { needed: len, got });
        }
        let b = &mut packet.buffer.as_mut()[..len];
        b[1] = 0;
        match *self {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            }
            | Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                b[0] = if matches!(self, Icmpv6Repr::EchoRequest { .. }) {
                    128
                } else {
                    129
                };
                b[4..8].copy_from_slice(&echo_rest(ident, seq_no));
                b[8..].copy_from_slice(data);
            }
            Icmpv6Repr::NeighborSolicit {
                target_addr,
                source_lladdr,
            } => {
                b[0] = 135;
                b[4..8].fill(0);
                b[8..24].copy_from_slice(&target_addr.octets());
                if let Some(ll) = source_lladdr {
                    write_lladdr_opt(&mut b[24..32], NDP_OPT_SOURCE_LLADDR, ll);
                }
            }
            Icmpv6Repr::NeighborAdvert {
                flags,
                target_addr,
                target_lladdr,
            } => {
                b[0] = 136;
                b[4] = flags.to_byte();
                b[5..8].fill(0);
                b[8..24].copy_from_slice(&target_addr.octets());
                if let Some(ll) = target_lladdr {
                    write_lladdr_opt(&mut b[24..32], NDP_OPT_TARGET_LLADDR, ll);
                }
            }
            Icmpv6Repr::Other {
                msg_type,
                code,
                body,
            } => {
                b[0] = msg_type;
                b[1] = code;
                b[4..].copy_from_slice(body);
            }
        }
        checksum::fill_icmpv6_checksum(src, dst, b)
    }
}

#[inline(always)]
fn write_lladdr_opt(b: &mut [u8], kind: u8, ll: EthernetAddress) {
    b[0] = kind;
    b[1] = 1;
    b[2..8].copy_from_slice(&ll.0);
}

/// A Neighbor Advertisement to send in answer to a Neighbor Solicitation for one of our
/// addresses (RFC 4861 §7.2.4), with everything the lower layers need. Build it with
/// [`NdpAdvert::for_solicit`] and write it with
/// [`emit_ndp_advert`](super::packet::emit_ndp_advert).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NdpAdvert {
    /// Ethernet destination: the solicitor's link-layer address, or `33:33:00:00:00:01`.
    pub dst_mac: EthernetAddress,
    /// Our MAC: Ethernet source and the Target Link-Layer Address option.
    pub our_mac: EthernetAddress,
    /// IPv6 source: the target address (ours).
    pub src_addr: Ipv6Addr,
    /// IPv6 destination: the solicitor, or all-nodes when it was `::` (DAD).
    pub dst_addr: Ipv6Addr,
    /// R/S/O flags.
    pub flags: NeighborFlags,
}

impl NdpAdvert {
    /// Decides the answer to a parsed Neighbor Solicitation (`ns`, received from `ip_src` to
    /// `ip_dst` with hop limit `hop_limit`, in an Ethernet frame from `eth_src`), when
    /// `is_ours` says the target is one of our unicast addresses. `None` when it is not a
    /// valid NS for us (RFC 4861 §7.1.1: hop limit 255; a `::` source only towards the
    /// target's solicited-node address and without a source link-layer address option; a
    /// multicast source is no solicitor), when its source is no station's (loopback or
    /// IPv4-mapped, RFC 4291 §2.5.3 and §2.5.5.2: [`crate::ip::is_martian_source`], `::` aside),
    /// and when the frame's source or the solicitor's link-layer address is a group's (IEEE
    /// Std 802's individual/group bit: no station sends from one, and the unicast answer would
    /// go to the whole segment).
    ///
    /// Per §7.2.4: to a solicitor with an address, unicast with S=1; to `::` (Duplicate
    /// Address Detection), multicast to all-nodes with S=0. O=1 and the Target Link-Layer
    /// Address option are always set (we are not an anycast responder or a router).
    pub fn for_solicit(
        ns: &Icmpv6Repr<'_>,
        ip_src: &Ipv6Addr,
        ip_dst: &Ipv6Addr,
        hop_limit: u8,
        eth_src: EthernetAddress,
        our_mac: EthernetAddress,
        is_ours: impl FnOnce(&Ipv6Addr) -> bool,
    ) -> Option<NdpAdvert> {
        let Icmpv6Repr::NeighborSolicit {
            target_addr,
            source_lladdr,
        } = *ns
        else {
            return None;
        };
        let dad = ip_src.is_unspecified();
        let dst_mac = if dad {
            EthernetAddress::ipv6_multicast(&ALL_NODES)
        } else {
            source_lladdr.unwrap_or(eth_src)
        };
        if hop_limit != 255
            || (!dad && crate::ip::is_martian_source((*ip_src).into()))
            || (dad && (source_lladdr.is_some() || *ip_dst != solicited_node(&target_addr)))
            || eth_src.is_multicast()
            || (!dad && dst_mac.is_multicast())
            || !is_ours(&target_addr)
        {
            return None;
        }
        Some(NdpAdvert {
            dst_mac,
            our_mac,
            src_addr: target_addr,
            dst_addr: if dad { ALL_NODES } else { *ip_src },
            flags: NeighborFlags {
                router: false,
                solicited: !dad,
                override_: true,
            },
        })
    }

    /// The ICMPv6 message of this advertisement.
    #[inline]
    pub fn icmp_repr(&self) -> Icmpv6Repr<'static> {
        Icmpv6Repr::NeighborAdvert {
            flags: self.flags,
            target_addr: self.src_addr,
            target_lladdr: Some(self.our_mac),
        }
    }

    /// The IP pair of the advertisement.
    #[inline]
    pub fn addrs(&self) -> IpPair {
        IpPair::V6 {
            src: self.src_addr,
            dst: self.dst_addr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A Windows-style echo request: id 1, seq 9, 32 bytes "abcdefghijklmnopqrstuvwabcdefghi".
    /// Checksum 0x4d52 computed independently (Python, RFC 1071).
    fn echo_request() -> Vec<u8> {
        let mut b = vec![0x08, 0x00, 0x4d, 0x52, 0x00, 0x01, 0x00, 0x09];
        b.extend_from_slice(b"abcdefghijklmnopqrstuvwabcdefghi");
        b
    }

    #[test]
    fn icmpv4_echo_known() {
        let b = echo_request();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        let r = Icmpv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Icmpv4Repr::EchoRequest {
                ident: 1,
                seq_no: 9,
                data: b"abcdefghijklmnopqrstuvwabcdefghi"
            }
        );
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out, b);
        // The reply differs only in type and checksum (0x4d52 + 0x0800).
        let reply = r.echo_reply().unwrap();
        reply
            .emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(&out[..4], &[0x00, 0x00, 0x55, 0x52]);
        assert_eq!(&out[4..], &b[4..]);
    }

    #[test]
    fn icmpv4_other_and_errors() {
        let mut b = vec![3u8, 3, 0, 0, 0, 0, 0, 0, 0x45, 0];
        Icmpv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        let orig = b.clone();
        let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&orig[..]).unwrap()).unwrap();
        assert!(matches!(
            r,
            Icmpv4Repr::Other {
                msg_type: 3,
                code: 3,
                ..
            }
        ));
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out, b);
        b[9] = 1;
        assert_eq!(
            Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&b[..]).unwrap()).unwrap_err(),
            WireError::BadChecksum {
                layer: Layer::Icmpv4
            }
        );
        for n in 0..8 {
            assert!(Icmpv4Packet::new_checked(&b[..n]).is_err());
        }
        let mut small = [0u8; 9];
        assert!(r
            .emit(&mut Icmpv4Packet::new_unchecked(&mut small[..]))
            .is_err());
    }

    fn ns_src() -> Ipv6Addr {
        "fe80::5054:ff:fe12:3456".parse().unwrap()
    }
    fn ns_dst() -> Ipv6Addr {
        "ff02::1:ff00:2".parse().unwrap()
    }
    fn target() -> Ipv6Addr {
        "2001:db8::2".parse().unwrap()
    }

    /// NS for 2001:db8::2 from fe80::5054:ff:fe12:3456 with SLLA 52:54:00:12:34:56.
    /// Checksum 0x42e8 computed independently (Python, RFC 4443 pseudo-header).
    fn ns_bytes() -> Vec<u8> {
        let mut b = vec![135u8, 0, 0x42, 0xe8, 0, 0, 0, 0];
        b.extend_from_slice(&target().octets());
        b.extend_from_slice(&[1, 1, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        b
    }

    #[test]
    fn ndp_solicit_known_and_advert() {
        let b = ns_bytes();
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(&ns_src(), &ns_dst()));
        let r = Icmpv6Repr::parse(&ns_src(), &ns_dst(), &p).unwrap();
        let mac = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(
            r,
            Icmpv6Repr::NeighborSolicit {
                target_addr: target(),
                source_lladdr: Some(mac)
            }
        );
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(
            &ns_src(),
            &ns_dst(),
            &mut Icmpv6Packet::new_unchecked(&mut out[..]),
        )
        .unwrap();
        assert_eq!(out, b);

        let ours = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
        let na =
            NdpAdvert::for_solicit(&r, &ns_src(), &ns_dst(), 255, mac, ours, |a| *a == target())
                .unwrap();
        assert_eq!(na.dst_mac, mac);
        assert_eq!(na.dst_addr, ns_src());
        assert_eq!(na.src_addr, target());
        assert!(na.flags.solicited && na.flags.override_ && !na.flags.router);
        assert!(
            NdpAdvert::for_solicit(&r, &ns_src(), &ns_dst(), 64, mac, ours, |_| true).is_none()
        );
        assert!(
            NdpAdvert::for_solicit(&r, &ns_src(), &ns_dst(), 255, mac, ours, |_| false).is_none()
        );
        // DAD: from ::, answered to all-nodes without S.
        let dad = Icmpv6Repr::NeighborSolicit {
            target_addr: target(),
            source_lladdr: None,
        };
        let unspec = Ipv6Addr::UNSPECIFIED;
        let na2 =
            NdpAdvert::for_solicit(&dad, &unspec, &ns_dst(), 255, mac, ours, |_| true).unwrap();
        assert_eq!(na2.dst_addr, ALL_NODES);
        assert_eq!(na2.dst_mac.to_string(), "33:33:00:00:00:01");
        assert!(!na2.flags.solicited);
        // RFC 4861 §7.1.1: a DAD solicitation only to the target's solicited-node address and
        // without a source link-layer address; no multicast solicitor.
        assert_eq!(solicited_node(&target()), ns_dst());
        let unicast = target();
        assert!(
            NdpAdvert::for_solicit(&dad, &unspec, &unicast, 255, mac, ours, |_| true).is_none()
        );
        assert!(NdpAdvert::for_solicit(&r, &unspec, &ns_dst(), 255, mac, ours, |_| true).is_none());
        let group = ALL_NODES;
        assert!(NdpAdvert::for_solicit(&r, &group, &ns_dst(), 255, mac, ours, |_| true).is_none());

        // The advertisement round-trips.
        let adv = na.icmp_repr();
        let mut out = vec![0u8; adv.buffer_len()];
        adv.emit(
            &na.src_addr,
            &na.dst_addr,
            &mut Icmpv6Packet::new_unchecked(&mut out[..]),
        )
        .unwrap();
        assert_eq!(out.len(), 32);
        assert_eq!(out[4], 0x60);
        assert_eq!(&out[24..26], &[2, 1]);
        let p = Icmpv6Packet::new_checked(&out[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&na.src_addr, &na.dst_addr, &p).unwrap(),
            adv
        );
    }

    /// No advertisement to a group link-layer address (in the SLLAO or as the frame's
    /// source), nor to a loopback or IPv4-mapped solicitor; DAD's all-nodes answer stays.
    #[test]
    fn ndp_no_advert_to_a_group_mac_or_a_martian_solicitor() {
        let ours = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
        let peer = EthernetAddress([0x52, 0x54, 0, 0x12, 0x34, 0x56]);
        let ns = |source_lladdr| Icmpv6Repr::NeighborSolicit {
            target_addr: target(),
            source_lladdr,
        };
        let advert = |ns: &Icmpv6Repr<'_>, src: &Ipv6Addr, dst: &Ipv6Addr, eth_src| {
            NdpAdvert::for_solicit(ns, src, dst, 255, eth_src, ours, |a| *a == target())
        };
        let groups = [
            EthernetAddress::BROADCAST,
            EthernetAddress([0x33, 0x33, 0, 0, 0, 1]),
            EthernetAddress([0x01, 0, 0x5e, 0, 0, 1]),
        ];
        for g in groups {
            assert_eq!(
                advert(&ns(Some(g)), &ns_src(), &ns_dst(), peer),
                None,
                "{g}"
            );
            assert_eq!(advert(&ns(None), &ns_src(), &ns_dst(), g), None, "{g}");
            assert_eq!(
                advert(&ns(Some(peer)), &ns_src(), &ns_dst(), g),
                None,
                "{g}"
            );
        }
        for martian in ["::1", "::ffff:10.0.0.1"] {
            let src: Ipv6Addr = martian.parse().unwrap();
            assert_eq!(
                advert(&ns(Some(peer)), &src, &ns_dst(), peer),
                None,
                "{martian}"
            );
        }
        assert_eq!(
            advert(&ns(None), &ns_src(), &ns_dst(), peer).map(|a| a.dst_mac),
            Some(peer)
        );
        let dad = advert(&ns(None), &Ipv6Addr::UNSPECIFIED, &ns_dst(), peer).unwrap();
        assert_eq!(dad.dst_mac, EthernetAddress::ipv6_multicast(&ALL_NODES));
    }

    #[test]
    fn ndp_malformed() {
        let b = ns_bytes();
        // Truncations: the checksum fails first or the length check does; never a panic.
        for n in 0..b.len() {
            if let Ok(p) = Icmpv6Packet::new_checked(&b[..n]) {
                assert!(Icmpv6Repr::parse(&ns_src(), &ns_dst(), &p).is_err());
            }
        }
        let fix = |mut m: Vec<u8>| {
            Icmpv6Packet::new_unchecked(&mut m[..]).fill_checksum(&ns_src(), &ns_dst());
            m
        };
        let parse = |m: &Vec<u8>| {
            Icmpv6Repr::parse(
                &ns_src(),
                &ns_dst(),
                &Icmpv6Packet::new_checked(&m[..]).unwrap(),
            )
            .map(|_| ())
        };
        let mut m = b.clone();
        m[25] = 0; // zero-length option
        assert!(matches!(parse(&fix(m)), Err(WireError::Malformed { .. })));
        let mut m = b.clone();
        m[25] = 2; // option runs past the end
        assert!(matches!(parse(&fix(m)), Err(WireError::Truncated { .. })));
        let mut m = b.clone();
        m[8] = 0xff; // multicast target
        assert!(matches!(parse(&fix(m)), Err(WireError::Malformed { .. })));
        let mut m = b.clone();
        m[1] = 1; // code
        assert!(matches!(parse(&fix(m)), Err(WireError::Malformed { .. })));
        let m = fix(b[..20].to_vec()); // shorter than 24
        assert!(matches!(parse(&m), Err(WireError::Truncated { .. })));
        // Unknown option skipped.
        let mut m = b.clone();
        m.extend_from_slice(&[99, 1, 0, 0, 0, 0, 0, 0]);
        assert!(parse(&fix(m)).is_ok());
        // Bad checksum.
        let mut m = b;
        m[31] ^= 1;
        assert!(matches!(parse(&m), Err(WireError::BadChecksum { .. })));
    }

    #[test]
    fn icmpv6_echo_round_trip() {
        let r = Icmpv6Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 7,
            data: b"ping",
        };
        let (s, d) = (ns_src(), target());
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&s, &d, &mut Icmpv6Packet::new_unchecked(&mut out[..]))
            .unwrap();
        let p = Icmpv6Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&s, &d, &p).unwrap(), r);
        // Wrong pseudo-header: rejected.
        assert!(Icmpv6Repr::parse(&d, &d, &p).is_err());
        let other = Icmpv6Repr::Other {
            msg_type: 2,
            code: 0,
            body: &[0, 0, 5, 220],
        };
        let mut out = vec![0u8; other.buffer_len()];
        other
            .emit(&s, &d, &mut Icmpv6Packet::new_unchecked(&mut out[..]))
            .unwrap();
        let p = Icmpv6Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&s, &d, &p).unwrap(), other);
        // A body under 4 bytes would make a message under 8, which parse refuses.
        for n in 0..4 {
            let short = Icmpv6Repr::Other {
                msg_type: 2,
                code: 0,
                body: &[0, 0, 5, 220][..n],
            };
            let mut out = [0u8; 8];
            assert!(matches!(
                short.emit(&s, &d, &mut Icmpv6Packet::new_unchecked(&mut out[..])),
                Err(WireError::Malformed {
                    layer: Layer::Icmpv6,
                    ..
                })
            ));
        }
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80), fix in any::<bool>()) {
            let mut data = data;
            if fix && data.len() >= 8 {
                Icmpv6Packet::new_unchecked(&mut data[..]).fill_checksum(&ns_src(), &ns_dst());
            }
            if let Ok(p) = Icmpv6Packet::new_checked(&data[..]) {
                let _ = Icmpv6Repr::parse(&ns_src(), &ns_dst(), &p);
            }
            if fix && data.len() >= 8 {
                Icmpv4Packet::new_unchecked(&mut data[..]).fill_checksum();
            }
            if let Ok(p) = Icmpv4Packet::new_checked(&data[..]) {
                let _ = Icmpv4Repr::parse(&p);
            }
        }

        #[test]
        fn mutated_ns_never_panics(idx in 0usize..40, val in any::<u8>(), extra in proptest::collection::vec(any::<u8>(), 0..24)) {
            let mut m = ns_bytes();
            m.extend_from_slice(&extra);
            let i = idx % m.len();
            m[i] = val;
            Icmpv6Packet::new_unchecked(&mut m[..]).fill_checksum(&ns_src(), &ns_dst());
            let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
            let _ = Icmpv6Repr::parse(&ns_src(), &ns_dst(), &p);
        }
    }
}
