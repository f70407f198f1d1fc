//! TCP (RFC 9293 §3.1): the segment view [`TcpPacket`], the parsed header [`TcpRepr`] with
//! its options ([`TcpOptions`]: RFC 9293 §3.2, RFC 7323, RFC 2018) and the checksum helpers.
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! |                        Sequence Number                        |
//! |                    Acknowledgment Number                      |
//! |  Data |       |C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//! |           Checksum            |         Urgent Pointer        |
//! |                    Options                    |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Sequence numbers are plain `u32` here; `flowlane-tcp` wraps them in its modular
//! sequence-number type. [`TcpRepr::emit`] leaves the checksum field zero: the IP layer owns
//! the pseudo-header ([`TcpPacket::fill_checksum`], [`checksum::fill_tcp_checksum`]).

use super::checksum;
use super::ip::IpPair;
use super::{be16, be32, need, Layer, Result, WireError};
use core::fmt;

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = 20;
/// Length of a TCP header without options (alias of [`HEADER_LEN`]).
pub const MIN_HEADER_LEN: usize = HEADER_LEN;
/// Largest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;
/// Maximum number of SACK blocks kept from a parsed SACK option (and emitted).
pub const MAX_SACK_BLOCKS: usize = 4;

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const SEQ: usize = 4;
    pub(super) const ACK: usize = 8;
    pub(super) const OFFSET: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: usize = 14;
    pub(super) const CHECKSUM: usize = 16;
    pub(super) const URGENT: usize = 18;
}

mod opt {
    pub(super) const EOL: u8 = 0;
    pub(super) const NOP: u8 = 1;
    pub(super) const MSS: u8 = 2;
    pub(super) const WSCALE: u8 = 3;
    pub(super) const SACK_PERMITTED: u8 = 4;
    pub(super) const SACK: u8 = 5;
    pub(super) const TIMESTAMPS: u8 = 8;
}

/// The TCP control bits (RFC 9293 §3.1, RFC 3168 for ECE/CWR).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// Urgent pointer field is significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN echo.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion window reduced.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// No flags.
    #[inline]
    pub const fn empty() -> TcpFlags {
        TcpFlags(0)
    }

    /// Whether every bit of `other` is set in `self`.
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union of two flag sets.
    #[inline]
    pub const fn union(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | other.0)
    }

    /// FIN set.
    #[inline]
    pub const fn fin(self) -> bool {
        self.contains(Self::FIN)
    }
    /// SYN set.
    #[inline]
    pub const fn syn(self) -> bool {
        self.contains(Self::SYN)
    }
    /// RST set.
    #[inline]
    pub const fn rst(self) -> bool {
        self.contains(Self::RST)
    }
    /// PSH set.
    #[inline]
    pub const fn psh(self) -> bool {
        self.contains(Self::PSH)
    }
    /// ACK set.
    #[inline]
    pub const fn ack(self) -> bool {
        self.contains(Self::ACK)
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    #[inline]
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        self.union(rhs)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        let mut first = true;
        for (i, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// The TCP options this codec understands. Unknown options are skipped when parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (RFC 9293 §3.7.1). Only meaningful on SYNs.
    pub mss: Option<u16>,
    /// Window scale shift count as received (RFC 7323 §2); not clamped.
    pub window_scale: Option<u8>,
    /// SACK permitted (RFC 2018 §2).
    pub sack_permitted: bool,
    /// Timestamps `(TSval, TSecr)` (RFC 7323 §3).
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks `(left, right)` (RFC 2018 §3); the first `sack_block_count` entries are
    /// valid.
    pub sack_blocks: [(u32, u32); MAX_SACK_BLOCKS],
    /// Number of valid entries in `sack_blocks`.
    pub sack_block_count: u8,
}

impl TcpOptions {
    /// Number of bytes these options occupy when emitted, padded to 4.
    #[inline]
    pub fn emitted_len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.window_scale.is_some() {
            n += 4; // NOP + 3
        }
        if self.sack_permitted {
            n += 4; // NOP NOP + 2
        }
        if self.timestamps.is_some() {
            n += 12; // NOP NOP + 10
        }
        if self.sack_block_count > 0 {
            n += 4 + 8 * self.sack_block_count as usize; // NOP NOP + 2 + 8n
        }
        n
    }

    /// The valid SACK blocks.
    #[inline]
    pub fn sack_blocks(&self) -> &[(u32, u32)] {
        &self.sack_blocks[..usize::from(self.sack_block_count).min(MAX_SACK_BLOCKS)]
    }

    /// Parses the option area of a header (RFC 9293 §3.2: kinds 0 and 1 are single bytes,
    /// every other option is kind, length, data; unknown kinds are skipped using their
    /// length). Total: an option area never makes a segment unparseable. An illegal
    /// length (below 2, or running past the header) ends the parse, the options before it
    /// kept; a known option of the wrong length is skipped as an unknown one is (RFC 9293
    /// §3.2 MUST-7 asks only that such lengths be handled; Linux's `tcp_parse_options`
    /// does both, and accepts the segment).
    ///
    /// The layout RFC 7323 Appendix A recommends for timestamps alone (NOP, NOP, kind 8,
    /// length 10), which Linux and flowlane put on every data segment and pure ACK of a
    /// connection that uses timestamps, is recognised in one comparison (as Linux's
    /// `tcp_parse_aligned_timestamp` does). So are the two SYN layouts a server meets most:
    /// Linux's (MSS, SACK permitted, timestamps, NOP, window scale: 20 bytes) and the one
    /// flowlane emits (MSS, NOP and window scale, two NOPs and SACK permitted, two NOPs and
    /// timestamps: 24 bytes). Anything else goes through the general loop, which gives the
    /// same result for each of them.
    #[inline]
    pub fn parse(o: &[u8]) -> TcpOptions {
        let mut out = TcpOptions::default();
        out.parse_into(o);
        out
    }

    /// [`TcpOptions::parse`] into `self`, which must be the default (what a
    /// header without options has): filled in place, so that the parsed
    /// header is not copied from one temporary to the next.
    #[inline]
    pub(crate) fn parse_into(&mut self, o: &[u8]) {
        if let [opt::NOP, opt::NOP, opt::TIMESTAMPS, 10, ts @ ..] = o {
            if let Ok(ts) = <&[u8; 8]>::try_from(ts) {
                self.timestamps = Some((be32(ts, 0), be32(ts, 4)));
                return;
            }
        }
        if o.is_empty() {
            return;
        }
        *self = Self::parse_other(o);
    }

    /// [`TcpOptions::parse`] past the aligned timestamps: a SYN layout or
    /// the loop. Out of line: inlined, the SYN layouts made the data
    /// segments' path longer (callgrind's `rx_cost`, 9 instructions a
    /// frame).
    #[inline(never)]
    fn parse_other(o: &[u8]) -> TcpOptions {
        match Self::parse_syn_layout(o) {
            Some(syn) => syn,
            None => Self::parse_any(o),
        }
    }

    /// The options of a SYN in Linux's layout or flowlane's (see [`TcpOptions::parse`]);
    /// `None` for any other option area.
    #[inline]
    #[rustfmt::skip]
    fn parse_syn_layout(o: &[u8]) -> Option<TcpOptions> {
        use opt::{MSS, NOP, SACK_PERMITTED as SACK_OK, TIMESTAMPS as TS, WSCALE as WS};
        let (mss, ws, ts) = match *o {
            // Linux.
            [
                MSS, 4, m0, m1,
                SACK_OK, 2, TS, 10, a0, a1, a2, a3, b0, b1, b2, b3,
                NOP, WS, 3, ws,
            ]
            // flowlane.
            | [
                MSS, 4, m0, m1,
                NOP, WS, 3, ws,
                NOP, NOP, SACK_OK, 2,
                NOP, NOP, TS, 10, a0, a1, a2, a3, b0, b1, b2, b3,
            ] => ([m0, m1], ws, [a0, a1, a2, a3, b0, b1, b2, b3]),
            _ => return None,
        };
        Some(TcpOptions {
            mss: Some(u16::from_be_bytes(mss)),
            window_scale: Some(ws),
            sack_permitted: true,
            timestamps: Some((be32(&ts, 0), be32(&ts, 4))),
            ..TcpOptions::default()
        })
    }

    /// [`TcpOptions::parse`] for any layout: the loop over the options.
    fn parse_any(mut o: &[u8]) -> TcpOptions {
        let mut out = TcpOptions::default();
        while let Some(&kind) = o.first() {
            match kind {
                opt::EOL => break,
                opt::NOP => {
                    o = &o[1..];
                    continue;
                }
                _ => {}
            }
            // RFC 9293 §3.2 (MUST-7): an illegal length, below 2 (which
            // would not move past the option) or past the header (a
            // partial option), leaves nothing after it to read: the parse
            // ends there, as Linux's does ("silly options", "don't parse
            // partial options").
            let len = match o.get(1) {
                Some(&len) if len >= 2 && usize::from(len) <= o.len() => usize::from(len),
                _ => break,
            };
            let data = &o[2..len];
            // A known kind of a length other than its own is skipped by
            // that length, as an unknown one is (RFC 9293 §3.2 MUST-6;
            // Linux takes none of them either).
            match (kind, len) {
                (opt::MSS, 4) => out.mss = Some(be16(data, 0)),
                (opt::WSCALE, 3) => out.window_scale = Some(data[0]),
                (opt::SACK_PERMITTED, 2) => out.sack_permitted = true,
                (opt::TIMESTAMPS, 10) => out.timestamps = Some((be32(data, 0), be32(data, 4))),
                (opt::SACK, _) if len > 2 && (len - 2) % 8 == 0 => {
                    let mut n = 0;
                    for block in data.chunks_exact(8).take(MAX_SACK_BLOCKS) {
                        out.sack_blocks[n] = (be32(block, 0), be32(block, 4));
                        n += 1;
                    }
                    out.sack_block_count = n as u8;
                }
                _ => {}
            }
            o = &o[len..];
        }
        out
    }

    /// Writes the options (padded to 4 bytes, [`TcpOptions::emitted_len`] of them) to the
    /// front of `o`, which must be long enough.
    #[inline]
    fn emit(&self, o: &mut [u8]) -> usize {
        let mut i = 0;
        if let Some(mss) = self.mss {
            o[i..i + 2].copy_from_slice(&[opt::MSS, 4]);
            o[i + 2..i + 4].copy_from_slice(&mss.to_be_bytes());
            i += 4;
        }
        if let Some(ws) = self.window_scale {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::WSCALE, 3, ws]);
            i += 4;
        }
        if self.sack_permitted {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::SACK_PERMITTED, 2]);
            i += 4;
        }
        if let Some((tsval, tsecr)) = self.timestamps {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::TIMESTAMPS, 10]);
            o[i + 4..i + 8].copy_from_slice(&tsval.to_be_bytes());
            o[i + 8..i + 12].copy_from_slice(&tsecr.to_be_bytes());
            i += 12;
        }
        let n = self.sack_block_count as usize;
        if n > 0 {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::SACK, (2 + 8 * n) as u8]);
            i += 4;
            for &(l, r) in &self.sack_blocks[..n] {
                o[i..i + 4].copy_from_slice(&l.to_be_bytes());
                o[i + 4..i + 8].copy_from_slice(&r.to_be_bytes());
                i += 8;
            }
        }
        i
    }
}

/// A zero-copy view of a TCP segment (header, options and payload). `new_checked` validates
/// that the 20-byte fixed header is present and that the data offset is ≥ 5 words and within
/// the segment; every accessor is then infallible.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps a segment (exactly the IP payload: the segment length is the buffer length),
    /// checking the fixed header and the data offset.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        need(Layer::Tcp, HEADER_LEN, b.len())?;
        let hl = usize::from(b[field::OFFSET] >> 4) * 4;
        if hl < HEADER_LEN || hl > b.len() {
            return Err(WireError::BadHeaderLength {
                layer: Layer::Tcp,
                len: hl,
            });
        }
        Ok(TcpPacket { buffer })
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgment number (meaningful when the ACK flag is set).
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::OFFSET] >> 4) * 4
    }

    /// Control bits.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[field::FLAGS])
    }

    /// Raw (unscaled) window field.
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field as carried.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }

    /// Raw option bytes (between the fixed header and the payload).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The whole segment.
    #[inline]
    pub fn segment(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The payload after header and options.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Verifies the checksum with the pseudo-header of `addrs`.
    #[inline]
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        checksum::verify_tcp_checksum(addrs, self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Computes and stores the checksum with the pseudo-header of `addrs`.
    #[inline]
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        // Cannot fail on a checked view (>= 20 bytes).
        let _ = checksum::fill_tcp_checksum(addrs, self.buffer.as_mut());
    }

    /// Swaps the ports (checksum-neutral).
    #[inline]
    pub fn swap_ports(&mut self) {
        let (s, d) = self.buffer.as_mut()[0..4].split_at_mut(2);
        s.swap_with_slice(d);
    }
}

/// A parsed TCP header: every field, options parsed. Plain `Copy` data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful when `flags.ack()`).
    pub ack: u32,
    /// Control bits.
    pub flags: TcpFlags,
    /// Raw (unscaled) window field.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options.
    pub options: TcpOptions,
}

impl TcpRepr {
    /// Parses the header of a checked view (the checksum is not verified here).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Result<TcpRepr> {
        let mut repr = TcpRepr::fixed_header(p);
        repr.options.parse_into(p.options());
        Ok(repr)
    }

    /// The fixed header's fields, no options.
    #[inline(always)]
    pub(crate) fn fixed_header<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> TcpRepr {
        TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq_number(),
            ack: p.ack_number(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            options: TcpOptions::default(),
        }
    }

    /// Checks and parses a whole segment (checksum not verified): the header and the
    /// payload. (Built in the value it returns: the header is not copied from a
    /// temporary, a tenth of a received segment's instructions once.)
    #[inline]
    pub fn parse_segment(segment: &[u8]) -> Result<(TcpRepr, &[u8])> {
        let p = TcpPacket::new_checked(segment)?;
        let hl = p.header_len();
        let mut out = (TcpRepr::fixed_header(&p), &segment[hl..]);
        out.0.options.parse_into(p.options());
        Ok(out)
    }

    /// Header length including options when emitted.
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.emitted_len()
    }

    /// Writes header and options into the front of `buf`, checksum zero. Returns the header
    /// length; the payload goes right after it.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let olen = self.options.emitted_len();
        if olen > MAX_HEADER_LEN - HEADER_LEN {
            return Err(WireError::Malformed {
                layer: Layer::Tcp,
                what: "options exceed 40 bytes",
            });
        }
        let hl = HEADER_LEN + olen;
        if buf.len() < hl {
            return Err(WireError::BufferTooSmall {
                needed: hl,
                got: buf.len(),
            });
        }
        let b = &mut buf[..hl];
        b[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        b[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        b[4..8].copy_from_slice(&self.seq.to_be_bytes());
        b[8..12].copy_from_slice(&self.ack.to_be_bytes());
        b[field::OFFSET] = ((hl / 4) as u8) << 4;
        b[field::FLAGS] = self.flags.0;
        b[14..16].copy_from_slice(&self.window.to_be_bytes());
        b[16..18].copy_from_slice(&[0, 0]);
        b[18..20].copy_from_slice(&self.urgent.to_be_bytes());
        let i = self.options.emit(&mut b[HEADER_LEN..]);
        debug_assert_eq!(i, olen);
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    /// A SYN 10.0.0.1:43210 → 10.0.0.2:80 with MSS option (data offset 6). Checksum 0xe017
    /// computed independently (Python, RFC 1071 over pseudo-header + segment).
    const SYN: [u8; 24] = [
        0xa8, 0xca, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x60, 0x02, 0xfa,
        0xf0, 0xe0, 0x17, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
    ];

    fn addrs() -> IpPair {
        IpPair::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        }
    }

    fn syn() -> TcpRepr {
        TcpRepr {
            src_port: 40000,
            dst_port: 80,
            seq: 0x0102_0304,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 65535,
            urgent: 0,
            options: TcpOptions {
                mss: Some(1460),
                window_scale: Some(7),
                sack_permitted: true,
                timestamps: Some((1, 0)),
                ..TcpOptions::default()
            },
        }
    }

    #[test]
    fn known_syn() {
        let t = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (43210, 80));
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.flags(), TcpFlags::SYN);
        assert!(t.payload().is_empty());
        assert!(t.verify_checksum(&addrs()));
        let mut z = SYN;
        z[16] = 0;
        z[17] = 0;
        let mut t = TcpPacket::new_checked(&mut z[..]).unwrap();
        t.fill_checksum(&addrs());
        assert_eq!(z, SYN);
    }

    #[test]
    fn malformed() {
        for n in 0..SYN.len() {
            assert!(TcpPacket::new_checked(&SYN[..n]).is_err(), "{n}");
        }
        let mut b = SYN;
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            WireError::BadHeaderLength {
                layer: Layer::Tcp,
                len: 16
            }
        );
        b[12] = 0x70;
        assert!(TcpPacket::new_checked(&b[..]).is_err());
        let mut b = SYN;
        b[23] ^= 1;
        assert!(!TcpPacket::new_checked(&b[..])
            .unwrap()
            .verify_checksum(&addrs()));
    }

    #[test]
    fn emit_parse_roundtrip() {
        let r = syn();
        let mut buf = [0xaau8; 64];
        let hl = r.emit(&mut buf).unwrap();
        assert_eq!(hl, 20 + 24);
        assert_eq!(hl % 4, 0);
        assert_eq!(&buf[16..18], &[0, 0], "checksum left zero");
        let (p, payload) = TcpRepr::parse_segment(&buf[..hl + 3]).unwrap();
        assert_eq!(p, r);
        assert_eq!(payload, &[0xaa; 3]);
    }

    #[test]
    fn sack_blocks_roundtrip() {
        let mut r = syn();
        r.flags = TcpFlags::ACK;
        r.options = TcpOptions::default();
        r.options.timestamps = Some((5, 6));
        r.options.sack_blocks[0] = (10, 20);
        r.options.sack_blocks[1] = (30, 40);
        r.options.sack_block_count = 2;
        let mut buf = [0u8; 60];
        let hl = r.emit(&mut buf).unwrap();
        let (p, _) = TcpRepr::parse_segment(&buf[..hl]).unwrap();
        assert_eq!(p, r);
        assert_eq!(p.options.sack_blocks(), &[(10, 20), (30, 40)]);
    }

    #[test]
    fn known_bytes() {
        // A SYN as captured from Linux: ports 0xa0b2 -> 80, MSS 1460,
        // SACK-permitted, timestamps, NOP, window scale 7.
        let seg: [u8; 40] = [
            0xa0, 0xb2, 0x00, 0x50, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02,
            0xfa, 0xf0, 0x12, 0x34, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a,
            0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
        ];
        let (r, payload) = TcpRepr::parse_segment(&seg).unwrap();
        assert!(payload.is_empty());
        assert_eq!(r.src_port, 0xa0b2);
        assert_eq!(r.dst_port, 80);
        assert_eq!(r.seq, 0x1122_3344);
        assert_eq!(r.flags, TcpFlags::SYN);
        assert_eq!(r.window, 0xfaf0);
        assert_eq!(r.options.mss, Some(1460));
        assert!(r.options.sack_permitted);
        assert_eq!(r.options.timestamps, Some((7, 0)));
        assert_eq!(r.options.window_scale, Some(7));
        assert_eq!(TcpPacket::new_checked(&seg[..]).unwrap().checksum(), 0x1234);
    }

    #[test]
    fn errors() {
        let truncated = |needed, got| WireError::Truncated {
            layer: Layer::Tcp,
            needed,
            got,
        };
        let mut buf = [0u8; 60];
        let hl = syn().emit(&mut buf).unwrap();
        assert_eq!(TcpRepr::parse_segment(&buf[..19]), Err(truncated(20, 19)));
        assert_eq!(
            TcpRepr::parse_segment(&buf[..hl - 1]),
            Err(WireError::BadHeaderLength {
                layer: Layer::Tcp,
                len: hl
            })
        );
        let mut b = buf;
        b[12] = 4 << 4;
        assert_eq!(
            TcpRepr::parse_segment(&b[..hl]),
            Err(WireError::BadHeaderLength {
                layer: Layer::Tcp,
                len: 16
            })
        );
        // Output buffer too small.
        assert_eq!(
            syn().emit(&mut [0u8; 30]),
            Err(WireError::BufferTooSmall {
                needed: 44,
                got: 30
            })
        );
    }

    /// RFC 9293 §3.2 MUST-7, as Linux's `tcp_parse_options`: an illegal
    /// option length ends the parse (what came before it kept) and a known
    /// option of the wrong length is skipped; the segment parses either way
    /// (before: refused, "option runs past the header" or "bad option
    /// length", so that a SYN so mangled was never answered).
    #[test]
    fn illegal_option_lengths_end_the_parse_and_the_segment_stands() {
        const MSS: [u8; 4] = [2, 4, 0x05, 0xb4];
        const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];
        let segment = |opts: &[u8]| {
            assert_eq!(opts.len() % 4, 0, "{opts:?}");
            let mut b = vec![0u8; HEADER_LEN + opts.len()];
            b[12] = (((HEADER_LEN + opts.len()) / 4) << 4) as u8;
            b[13] = TcpFlags::SYN.0;
            b[HEADER_LEN..].copy_from_slice(opts);
            b.extend_from_slice(b"text");
            b
        };
        let parsed = |opts: &[u8]| {
            let b = segment(opts);
            let (r, payload) = TcpRepr::parse_segment(&b).expect("parses");
            assert_eq!(payload, b"text");
            r.options
        };
        let (mss, ts) = (Some(1460), Some((7, 9)));
        // (the option area, the MSS and timestamps taken)
        let cases: [(&[u8], _, _); 8] = [
            // A length past the header, after the MSS.
            (&[MSS, [1, 1, 8, 10]].concat(), mss, None),
            // A kind without its length byte.
            (&[MSS, [1, 1, 1, 30]].concat(), mss, None),
            // Lengths 0 and 1: the rest is not read.
            (&[&MSS[..], &[99, 0, 0, 0], &TS].concat(), mss, None),
            (&[&MSS[..], &[99, 1, 0, 0], &TS].concat(), mss, None),
            // Known kinds of the wrong length, skipped by it.
            (&[&[2, 3, 5, 1][..], &TS].concat(), None, ts),
            (
                &[&MSS[..], &[1, 1, 8, 6, 0, 0, 0, 7], &TS].concat(),
                mss,
                ts,
            ),
            (
                &[&[1, 1, 5, 4, 0, 0][..], &MSS, &[1, 1]].concat(),
                mss,
                None,
            ),
            // SACK blocks of a length not 2 + 8n.
            (&[&[1, 1, 5, 6, 0, 0, 0, 1][..], &TS].concat(), None, ts),
        ];
        for (i, (opts, mss, ts)) in cases.iter().enumerate() {
            let o = parsed(opts);
            assert_eq!((o.mss, o.timestamps), (*mss, *ts), "case {i}: {opts:?}");
            assert_eq!(o.sack_block_count, 0, "case {i}");
        }
        // The window scale option of length 2 is skipped; SACK permitted of
        // length 3 too.
        let o = parsed(&[1, 3, 2, 1, 4, 3, 0, 0]);
        assert_eq!((o.window_scale, o.sack_permitted), (None, false));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(t) = TcpPacket::new_checked(&data[..]) {
                let _ = t.payload();
                let _ = t.verify_checksum(&addrs());
            }
        }
    }

    proptest! {
        /// The aligned-timestamps shortcut gives what the general loop gives, for every
        /// option area it takes (the 12 bytes of its layout, any timestamp values).
        #[test]
        fn the_timestamp_shortcut_agrees_with_the_loop(tsval: u32, tsecr: u32) {
            let mut o = vec![opt::NOP, opt::NOP, opt::TIMESTAMPS, 10];
            o.extend_from_slice(&tsval.to_be_bytes());
            o.extend_from_slice(&tsecr.to_be_bytes());
            let fast = TcpOptions::parse(&o);
            prop_assert_eq!(fast, TcpOptions::parse_any(&o));
            prop_assert_eq!(fast.timestamps, Some((tsval, tsecr)));
        }
    }

    proptest! {
        /// The SYN layouts' shortcut gives what the general loop gives, for Linux's layout
        /// and flowlane's, any values in them; and the loop alone sees an area that differs
        /// from either by one byte (or is one byte shorter), with the same result as
        /// `parse` gives.
        #[test]
        fn the_syn_shortcut_agrees_with_the_loop(
            mss: u16, ws: u8, tsval: u32, tsecr: u32, at in 0usize..24, x: u8,
        ) {
            let ts: Vec<u8> = [tsval.to_be_bytes(), tsecr.to_be_bytes()].concat();
            let mut linux = vec![opt::MSS, 4];
            linux.extend_from_slice(&mss.to_be_bytes());
            linux.extend_from_slice(&[opt::SACK_PERMITTED, 2, opt::TIMESTAMPS, 10]);
            linux.extend_from_slice(&ts);
            linux.extend_from_slice(&[opt::NOP, opt::WSCALE, 3, ws]);
            let ours = TcpOptions {
                mss: Some(mss),
                window_scale: Some(ws),
                sack_permitted: true,
                timestamps: Some((tsval, tsecr)),
                ..TcpOptions::default()
            };
            let mut emitted = [0u8; 24];
            prop_assert_eq!(ours.emit(&mut emitted), 24);
            for area in [&linux[..], &emitted[..]] {
                prop_assert_eq!(TcpOptions::parse_syn_layout(area), Some(ours));
                prop_assert_eq!(TcpOptions::parse(area), TcpOptions::parse_any(area));
                prop_assert_eq!(TcpOptions::parse(area), ours);
                let mut changed = area.to_vec();
                let i = at % changed.len();
                changed[i] ^= x.max(1);
                prop_assert_eq!(TcpOptions::parse(&changed), TcpOptions::parse_any(&changed));
                prop_assert_eq!(
                    TcpOptions::parse(&area[..area.len() - 1]),
                    TcpOptions::parse_any(&area[..area.len() - 1])
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok((r, payload)) = TcpRepr::parse_segment(&bytes) {
                prop_assert!(payload.len() <= bytes.len() - HEADER_LEN);
                let _ = r.header_len();
            }
        }
    }
}
