//! IPv4 header (RFC 791 §3.1; DSCP/ECN per RFC 2474 and RFC 3168).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! |         Identification        |Flags|      Fragment Offset    |
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! |                    Options (IHL > 5)                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::checksum;
use super::ip::{IpPair, IpProtocol};
use super::{be16, need, put16, Layer, Result, WireError};
use std::net::Ipv4Addr;

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Longest IPv4 header (IHL = 15).
pub const MAX_HEADER_LEN: usize = 60;
/// Default TTL used by [`Ipv4Repr::new`] (the Linux default).
pub const DEFAULT_TTL: u8 = 64;

/// A zero-copy view of an IPv4 packet. `new_checked` validates version, IHL and total length
/// against the buffer, so every accessor is infallible; [`payload`](Self::payload) ends at the
/// total length (Ethernet padding excluded). Options are kept in place and exposed as bytes.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer, checking: at least 20 bytes; version 4; IHL ≥ 5 and the header within the
    /// buffer; header length ≤ total length ≤ buffer length (RFC 791 §3.1; RFC 1122 §3.2.1.1,
    /// §3.2.1.2).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        need(Layer::Ipv4, MIN_HEADER_LEN, b.len())?;
        let version = b[0] >> 4;
        if version != 4 {
            return Err(WireError::BadVersion {
                layer: Layer::Ipv4,
                version,
            });
        }
        let hl = usize::from(b[0] & 0x0f) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLength {
                layer: Layer::Ipv4,
                len: hl,
            });
        }
        need(Layer::Ipv4, hl, b.len())?;
        let total = usize::from(be16(b, 2));
        if total < hl {
            return Err(WireError::BadTotalLength {
                layer: Layer::Ipv4,
                len: total,
            });
        }
        need(Layer::Ipv4, total, b.len())?;
        Ok(Ipv4Packet { buffer })
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

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// Differentiated Services Code Point (RFC 2474).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[1] >> 2
    }

    /// Explicit Congestion Notification bits (RFC 3168).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x03
    }

    /// Total length (header + payload).
    #[inline]
    pub fn total_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), 2))
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[6] & 0x40 != 0
    }

    /// More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[6] & 0x20 != 0
    }

    /// Fragment offset in bytes (the field counts 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), 6) & 0x1fff) << 3
    }

    /// Whether this packet is a fragment (MF set or a non-zero offset): it must be reassembled
    /// (by the kernel) before its upper layer can be processed.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), 6) & 0x3fff != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    /// Upper-layer protocol.
    #[inline]
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[9])
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 10)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }

    /// Source and destination.
    #[inline]
    pub fn addrs(&self) -> IpPair {
        IpPair::V4 {
            src: self.src_addr(),
            dst: self.dst_addr(),
        }
    }

    /// Option bytes (empty when IHL = 5). Not interpreted.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// The header, options included.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// Whether the header checksum verifies (RFC 791 §3.1, RFC 1071).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.header()) == 0xffff
    }

    /// The payload: from the end of the header to the total length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len & 3 == 0 && (MIN_HEADER_LEN..=MAX_HEADER_LEN).contains(&len));
        self.buffer.as_mut()[0] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    /// Sets DSCP (6 bits) and ECN (2 bits).
    #[inline]
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        debug_assert!(dscp < 64 && ecn < 4, "DSCP {dscp} or ECN {ecn} too wide");
        self.buffer.as_mut()[1] = (dscp << 2) | (ecn & 0x03);
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), 2, len);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, id: u16) {
        put16(self.buffer.as_mut(), 4, id);
    }

    /// Sets DF, MF and the fragment offset (in bytes; must be a multiple of 8).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        debug_assert!(
            offset & 7 == 0,
            "fragment offset {offset} not a multiple of 8"
        );
        let v = (u16::from(dont_frag) << 14) | (u16::from(more_frags) << 13) | (offset >> 3);
        put16(self.buffer.as_mut(), 6, v);
    }

    /// Sets the TTL (the checksum is not updated).
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[8] = ttl;
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[9] = p.into();
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), 10, c);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[12..16].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[16..20].copy_from_slice(&a.octets());
    }

    /// Swaps source and destination addresses (the checksum stays valid: the ones'-complement
    /// sum does not depend on word order).
    #[inline]
    pub fn swap_addrs(&mut self) {
        let (s, d) = self.buffer.as_mut()[12..20].split_at_mut(4);
        s.swap_with_slice(d);
    }

    /// Sets the TTL and updates the header checksum incrementally (RFC 1624 eqn. 3).
    #[inline]
    pub fn set_ttl_update_checksum(&mut self, ttl: u8) {
        let b = self.buffer.as_mut();
        let old = be16(b, 8);
        let new = (u16::from(ttl) << 8) | (old & 0x00ff);
        b[8] = ttl;
        let c = checksum::update16(be16(b, 10), old, new);
        put16(b, 10, c);
    }

    /// Computes and stores the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }

    /// Mutable option bytes.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[MIN_HEADER_LEN..hl]
    }

    /// Mutable payload (header end to total length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len());
        &mut self.buffer.as_mut()[hl..tl]
    }
}

/// A parsed IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Upper-layer protocol.
    pub protocol: IpProtocol,
    /// Payload length (total length − header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// More Fragments.
    pub more_frags: bool,
    /// Fragment offset in bytes.
    pub frag_offset: u16,
    /// Length of the options (0..=40, a multiple of 4). Their content is not parsed; it stays
    /// in the packet ([`Ipv4Packet::options`]). [`emit`](Self::emit) writes that many bytes of
    /// End-of-Option-List (zero) padding.
    pub options_len: u8,
}

impl Ipv4Repr {
    /// A header with TTL 64, DF set, no options, DSCP/ECN 0, identification 0.
    #[inline]
    pub const fn new(
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        protocol: IpProtocol,
        payload_len: usize,
    ) -> Ipv4Repr {
        Ipv4Repr {
            src_addr,
            dst_addr,
            protocol,
            payload_len,
            ttl: DEFAULT_TTL,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options_len: 0,
        }
    }

    /// Parses a checked view and verifies its header checksum (`BadChecksum`).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        checksum::check(packet.verify_checksum(), Layer::Ipv4)?;
        Ok(Self::parse_unverified(packet))
    }

    /// Parses a checked view without looking at the checksum.
    #[inline]
    pub fn parse_unverified<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Ipv4Repr {
        let hl = packet.header_len();
        Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.total_len() - hl,
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
            options_len: (hl - MIN_HEADER_LEN) as u8,
        }
    }

    /// Header length (20 + options).
    #[inline]
    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options_len as usize
    }

    /// Header + payload length.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Whether MF or a fragment offset is set.
    #[inline]
    pub const fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }

    /// Source and destination.
    #[inline]
    pub const fn addrs(&self) -> IpPair {
        IpPair::V4 {
            src: self.src_addr,
            dst: self.dst_addr,
        }
    }

    /// Writes the header (options as zero bytes) and its checksum. Does not touch the payload.
    /// Fails with `BadHeaderLength` if the options length is not a multiple of 4 up to 40,
    /// and `BadTotalLength` if header + payload exceeds 65535 bytes; panics if the buffer is
    /// shorter than [`header_len`](Self::header_len). The fragment offset must be a multiple
    /// of 8, the DSCP fit 6 bits and the ECN 2 (a caller's bug otherwise: asserted in debug
    /// builds; release builds drop the bits the header has no room for).
    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) -> Result<()> {
        let total = self.buffer_len();
        if self.options_len & 3 != 0 || self.options_len > 40 || total > usize::from(u16::MAX) {
            return Err(self.unfit(total));
        }
        // Fields wider than the header's are a caller's bug, not input: asserted in debug
        // builds (and by the round-trip test), spared the transmit path's every frame (+20
        // instructions a frame when tested at run time, BENCHMARKS.md session 49).
        debug_assert!(
            self.frag_offset & 7 == 0 && self.dscp < 64 && self.ecn < 4,
            "{self:?}: a field wider than the header's"
        );
        packet.set_header_len(self.header_len());
        packet.set_dscp_ecn(self.dscp, self.ecn);
        packet.set_total_len(total as u16);
        packet.set_ident(self.ident);
        packet.set_frag(self.dont_frag, self.more_frags, self.frag_offset);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.options_mut().fill(0);
        packet.fill_checksum();
        Ok(())
    }

    /// Why [`emit`](Self::emit) refuses this header (`total`: its buffer length).
    #[cold]
    fn unfit(&self, total: usize) -> WireError {
        if self.options_len & 3 != 0 || self.options_len > 40 {
            WireError::BadHeaderLength {
                layer: Layer::Ipv4,
                len: self.header_len(),
            }
        } else {
            WireError::BadTotalLength {
                layer: Layer::Ipv4,
                len: total,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The classic example header: 192.168.0.1 → 192.168.0.199, UDP, total 0x73, DF, TTL 64,
    /// checksum 0xb861.
    const HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn packet() -> Vec<u8> {
        let mut p = HEADER.to_vec();
        p.resize(0x73, 0xaa);
        p
    }

    #[test]
    fn parse_known_header() {
        let p = packet();
        let v = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert!(v.verify_checksum());
        let r = Ipv4Repr::parse(&v).unwrap();
        assert_eq!(r.src_addr, Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(r.dst_addr, Ipv4Addr::new(192, 168, 0, 199));
        assert_eq!(r.protocol, IpProtocol::Udp);
        assert_eq!(r.payload_len, 0x73 - 20);
        assert_eq!(r.ttl, 64);
        assert!(r.dont_frag && !r.more_frags && !r.is_fragment());
        assert_eq!(r.options_len, 0);
        let mut out = vec![0u8; 20];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out, HEADER);
    }

    #[test]
    fn padding_excluded_from_payload() {
        let mut p = packet();
        p.extend_from_slice(&[0; 6]); // Ethernet padding
        let v = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert_eq!(v.payload().len(), 0x73 - 20);
    }

    #[test]
    fn options_preserved() {
        // IHL 6 with a Router Alert option (RFC 2113: 94 04 00 00).
        let mut p = vec![
            0x46, 0xb8, 0x00, 0x20, 0x12, 0x34, 0x20, 0x00, 0x01, 0x02, 0x00, 0x00, 10, 0, 0, 1,
            224, 0, 0, 22, 0x94, 0x04, 0x00, 0x00,
        ];
        p.resize(32, 0x55);
        Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
        let v = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert_eq!(v.header_len(), 24);
        assert_eq!(v.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(v.payload(), &[0x55; 8]);
        let r = Ipv4Repr::parse(&v).unwrap();
        assert_eq!(r.options_len, 4);
        assert_eq!((r.dscp, r.ecn), (46, 0));
        assert!(r.more_frags && r.is_fragment());
        assert_eq!(r.protocol, IpProtocol::Unknown(2));
        // Round trip: emit writes EOL padding for options; re-parse gives the same repr.
        let mut out = [0u8; 32];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        let r2 = Ipv4Repr::parse(&Ipv4Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(r, r2);
    }

    #[test]
    fn fragment_fields() {
        let mut p = packet();
        Ipv4Packet::new_unchecked(&mut p[..]).set_frag(false, false, 1480);
        Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
        let r = Ipv4Repr::parse(&Ipv4Packet::new_checked(&p[..]).unwrap()).unwrap();
        assert_eq!(r.frag_offset, 1480);
        assert!(r.is_fragment() && !r.more_frags && !r.dont_frag);
    }

    #[test]
    fn malformed() {
        let p = packet();
        for n in 0..p.len() {
            assert!(matches!(
                Ipv4Packet::new_checked(&p[..n]),
                Err(WireError::Truncated {
                    layer: Layer::Ipv4,
                    ..
                })
            ));
        }
        let mut b = p.clone();
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::BadVersion {
                layer: Layer::Ipv4,
                version: 6
            }
        );
        let mut b = p.clone();
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::BadHeaderLength {
                layer: Layer::Ipv4,
                len: 16
            }
        );
        let mut b = p.clone();
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::BadTotalLength {
                layer: Layer::Ipv4,
                len: 19
            }
        );
        let mut b = p.clone();
        b[0] = 0x4f; // IHL 15: a 60-byte header still fits in the total length
        assert!(Ipv4Packet::new_checked(&b[..]).is_ok());
        let mut b = p.clone();
        b[2..4].copy_from_slice(&200u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::Truncated {
                layer: Layer::Ipv4,
                needed: 200,
                got: 0x73
            }
        );
        let mut b = p;
        b[15] ^= 0x01;
        let v = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Ipv4Repr::parse(&v).unwrap_err(),
            WireError::BadChecksum { layer: Layer::Ipv4 }
        );
    }

    #[test]
    fn ttl_incremental_update() {
        let mut p = packet();
        let mut v = Ipv4Packet::new_checked(&mut p[..]).unwrap();
        for ttl in [63u8, 0, 255, 1, 64] {
            v.set_ttl_update_checksum(ttl);
            assert!(v.verify_checksum(), "ttl {ttl}");
        }
        v.swap_addrs();
        assert!(v.verify_checksum());
        assert_eq!(v.src_addr(), Ipv4Addr::new(192, 168, 0, 199));
    }

    #[test]
    fn emit_too_long() {
        let r = Ipv4Repr::new(
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            IpProtocol::Udp,
            65516,
        );
        let mut out = [0u8; 20];
        assert!(r
            .emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
            .is_err());
    }

    /// Fields wider than the header's are asserted in debug builds.
    #[cfg(debug_assertions)]
    #[test]
    fn fields_wider_than_the_header_s_are_asserted() {
        let ok = Ipv4Repr::new(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, IpProtocol::Udp, 0);
        for r in [
            Ipv4Repr {
                frag_offset: 1481,
                ..ok
            },
            Ipv4Repr { dscp: 64, ..ok },
            Ipv4Repr { ecn: 4, ..ok },
        ] {
            let emitted = std::panic::catch_unwind(|| {
                let mut out = [0u8; 60];
                r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
            });
            assert!(emitted.is_err(), "{r:?} emitted");
        }
    }

    #[test]
    fn emit_refuses_what_the_header_cannot_carry() {
        let ok = Ipv4Repr::new(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, IpProtocol::Udp, 0);
        let emit = |r: Ipv4Repr| {
            let mut out = [0u8; 60];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
        };
        assert!(emit(ok).is_ok());
        for options_len in [2, 44] {
            assert_eq!(
                emit(Ipv4Repr { options_len, ..ok }),
                Err(WireError::BadHeaderLength {
                    layer: Layer::Ipv4,
                    len: 20 + usize::from(options_len)
                })
            );
        }
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(v) = Ipv4Packet::new_checked(&data[..]) {
                let r = Ipv4Repr::parse_unverified(&v);
                prop_assert!(r.buffer_len() <= data.len());
                let _ = v.payload();
                let _ = v.options();
            }
        }

        /// Whatever the options length, emit either refuses it or writes what parse reads
        /// back (any value a quarter of the time, one the header can carry otherwise); the
        /// other fields as wide as the header's.
        #[test]
        fn round_trip(src in any::<u32>(), dst in any::<u32>(), proto in any::<u8>(),
                      len in 0usize..1500, ttl in any::<u8>(), dscp in 0u8..64, ecn in 0u8..4,
                      ident in any::<u16>(), df in any::<bool>(), mf in any::<bool>(),
                      off in 0u16..8192,
                      opts in prop_oneof![3 => (0u8..11).prop_map(|o| o * 4), 1 => any::<u8>()]) {
            let r = Ipv4Repr {
                src_addr: src.into(), dst_addr: dst.into(), protocol: proto.into(),
                payload_len: len, ttl, dscp, ecn, ident, dont_frag: df, more_frags: mf,
                frag_offset: off << 3, options_len: opts,
            };
            let valid = opts & 3 == 0 && opts <= 40;
            let mut buf = vec![0u8; r.buffer_len()];
            match r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])) {
                Ok(()) => {
                    let v = Ipv4Packet::new_checked(&buf[..]).unwrap();
                    prop_assert_eq!(Ipv4Repr::parse(&v).unwrap(), r);
                }
                Err(e) => prop_assert!(!valid, "{:?} refused: {}", r, e),
            }
        }
    }
}
