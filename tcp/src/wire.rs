//! TCP header parsing and emission (RFC 9293 §3.1, options per RFC 9293
//! §3.2, RFC 7323 and RFC 2018).
//!
//! Checksums are *not* computed or verified here: the IP layer owns the
//! pseudo-header and fills/verifies the checksum field. [`TcpRepr::emit`]
//! leaves the checksum field zero.

use crate::seq::SeqNumber;
use core::fmt;

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = 20;
/// Largest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;
/// Maximum number of SACK blocks kept from a parsed SACK option.
pub const MAX_SACK_BLOCKS: usize = 4;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

mod opt {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WSCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// Why a buffer is not a valid TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the fixed 20-byte header, or than the data offset says.
    Truncated,
    /// Data offset below 5 words.
    BadDataOffset,
    /// An option's length field runs past the end of the header.
    OptionPastHeader,
    /// An option's length field is malformed (< 2, or wrong for its kind).
    BadOptionLength,
    /// The output buffer is too small for the header and options.
    BufferTooSmall,
    /// The options do not fit into 40 bytes.
    OptionsTooLong,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WireError::Truncated => "segment truncated",
            WireError::BadDataOffset => "data offset below minimum header size",
            WireError::OptionPastHeader => "TCP option runs past the header",
            WireError::BadOptionLength => "malformed TCP option length",
            WireError::BufferTooSmall => "output buffer too small",
            WireError::OptionsTooLong => "TCP options exceed 40 bytes",
        };
        f.write_str(s)
    }
}

impl std::error::Error for WireError {}

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
    pub const fn empty() -> TcpFlags {
        TcpFlags(0)
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union of two flag sets.
    pub const fn union(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | other.0)
    }

    /// FIN set.
    pub const fn fin(self) -> bool {
        self.contains(Self::FIN)
    }
    /// SYN set.
    pub const fn syn(self) -> bool {
        self.contains(Self::SYN)
    }
    /// RST set.
    pub const fn rst(self) -> bool {
        self.contains(Self::RST)
    }
    /// PSH set.
    pub const fn psh(self) -> bool {
        self.contains(Self::PSH)
    }
    /// ACK set.
    pub const fn ack(self) -> bool {
        self.contains(Self::ACK)
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
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

/// The TCP options this stack understands. Unknown options are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (RFC 9293 §3.7.1). Only meaningful on SYNs.
    pub mss: Option<u16>,
    /// Window scale shift count as received (RFC 7323 §2); not clamped.
    pub window_scale: Option<u8>,
    /// SACK permitted (RFC 2018 §2). Parsed only; SACK is not implemented.
    pub sack_permitted: bool,
    /// Timestamps `(TSval, TSecr)` (RFC 7323 §3).
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks `(left, right)` (RFC 2018 §3); the first
    /// `sack_block_count` entries are valid. Parsed only.
    pub sack_blocks: [(SeqNumber, SeqNumber); MAX_SACK_BLOCKS],
    /// Number of valid entries in `sack_blocks`.
    pub sack_block_count: u8,
}

impl TcpOptions {
    /// Number of bytes these options occupy when emitted, padded to 4.
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
}

/// A read-only view of a TCP header at the start of a byte buffer.
#[derive(Clone, Copy)]
pub struct TcpHeader<'a> {
    buf: &'a [u8],
}

impl<'a> TcpHeader<'a> {
    /// Wraps `buf`, checking that the fixed header and the data offset fit.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let h = TcpHeader { buf };
        let hl = h.header_len();
        if hl < HEADER_LEN {
            return Err(WireError::BadDataOffset);
        }
        if hl > buf.len() {
            return Err(WireError::Truncated);
        }
        Ok(h)
    }

    fn u16_at(&self, i: usize) -> u16 {
        u16::from_be_bytes([self.buf[i], self.buf[i + 1]])
    }

    fn u32_at(&self, i: usize) -> u32 {
        u32::from_be_bytes([
            self.buf[i],
            self.buf[i + 1],
            self.buf[i + 2],
            self.buf[i + 3],
        ])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }
    /// Sequence number.
    pub fn seq(&self) -> SeqNumber {
        SeqNumber(self.u32_at(field::SEQ))
    }
    /// Acknowledgment number.
    pub fn ack(&self) -> SeqNumber {
        SeqNumber(self.u32_at(field::ACK))
    }
    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        ((self.buf[field::OFFSET] >> 4) as usize) * 4
    }
    /// Control bits.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buf[field::FLAGS])
    }
    /// Raw (unscaled) window field.
    pub fn window(&self) -> u16 {
        self.u16_at(field::WINDOW)
    }
    /// Checksum field as carried.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        self.u16_at(field::URGENT)
    }
    /// Raw option bytes.
    pub fn options(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..self.header_len()]
    }
    /// Payload after the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.header_len()..]
    }
}

/// A parsed TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: SeqNumber,
    /// Acknowledgment number (meaningful when `flags.ack()`).
    pub ack: SeqNumber,
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
    /// Parses a whole segment: returns the header and the payload.
    pub fn parse(buf: &[u8]) -> Result<(TcpRepr, &[u8]), WireError> {
        let h = TcpHeader::new_checked(buf)?;
        let options = parse_options(h.options())?;
        let repr = TcpRepr {
            src_port: h.src_port(),
            dst_port: h.dst_port(),
            seq: h.seq(),
            ack: h.ack(),
            flags: h.flags(),
            window: h.window(),
            urgent: h.urgent(),
            options,
        };
        Ok((repr, h.payload()))
    }

    /// Header length including options when emitted.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.emitted_len()
    }

    /// Writes header and options into the front of `buf`, checksum zero.
    /// Returns the header length; the payload goes right after it.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let olen = self.options.emitted_len();
        if olen > MAX_HEADER_LEN - HEADER_LEN {
            return Err(WireError::OptionsTooLong);
        }
        let hl = HEADER_LEN + olen;
        if buf.len() < hl {
            return Err(WireError::BufferTooSmall);
        }
        let b = &mut buf[..hl];
        b[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        b[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        b[4..8].copy_from_slice(&self.seq.0.to_be_bytes());
        b[8..12].copy_from_slice(&self.ack.0.to_be_bytes());
        b[field::OFFSET] = ((hl / 4) as u8) << 4;
        b[field::FLAGS] = self.flags.0;
        b[14..16].copy_from_slice(&self.window.to_be_bytes());
        b[16..18].copy_from_slice(&[0, 0]);
        b[18..20].copy_from_slice(&self.urgent.to_be_bytes());
        let o = &mut b[HEADER_LEN..];
        let mut i = 0;
        if let Some(mss) = self.options.mss {
            o[i..i + 2].copy_from_slice(&[opt::MSS, 4]);
            o[i + 2..i + 4].copy_from_slice(&mss.to_be_bytes());
            i += 4;
        }
        if let Some(ws) = self.options.window_scale {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::WSCALE, 3, ws]);
            i += 4;
        }
        if self.options.sack_permitted {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::SACK_PERMITTED, 2]);
            i += 4;
        }
        if let Some((tsval, tsecr)) = self.options.timestamps {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::TIMESTAMPS, 10]);
            o[i + 4..i + 8].copy_from_slice(&tsval.to_be_bytes());
            o[i + 8..i + 12].copy_from_slice(&tsecr.to_be_bytes());
            i += 12;
        }
        let n = self.options.sack_block_count as usize;
        if n > 0 {
            o[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::SACK, (2 + 8 * n) as u8]);
            i += 4;
            for &(l, r) in &self.options.sack_blocks[..n] {
                o[i..i + 4].copy_from_slice(&l.0.to_be_bytes());
                o[i + 4..i + 8].copy_from_slice(&r.0.to_be_bytes());
                i += 8;
            }
        }
        debug_assert_eq!(i, olen);
        Ok(hl)
    }
}

/// Parses the option area of a header (RFC 9293 §3.2: kinds 0 and 1 are
/// single bytes, every other option is kind, length, data; unknown kinds are
/// skipped using their length).
pub fn parse_options(mut o: &[u8]) -> Result<TcpOptions, WireError> {
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
        let len = *o.get(1).ok_or(WireError::OptionPastHeader)? as usize;
        if len < 2 {
            return Err(WireError::BadOptionLength);
        }
        if len > o.len() {
            return Err(WireError::OptionPastHeader);
        }
        let data = &o[2..len];
        match kind {
            opt::MSS => {
                if len != 4 {
                    return Err(WireError::BadOptionLength);
                }
                out.mss = Some(u16::from_be_bytes([data[0], data[1]]));
            }
            opt::WSCALE => {
                if len != 3 {
                    return Err(WireError::BadOptionLength);
                }
                out.window_scale = Some(data[0]);
            }
            opt::SACK_PERMITTED => {
                if len != 2 {
                    return Err(WireError::BadOptionLength);
                }
                out.sack_permitted = true;
            }
            opt::TIMESTAMPS => {
                if len != 10 {
                    return Err(WireError::BadOptionLength);
                }
                let tsval = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                let tsecr = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
                out.timestamps = Some((tsval, tsecr));
            }
            opt::SACK => {
                if (len - 2) % 8 != 0 || len == 2 {
                    return Err(WireError::BadOptionLength);
                }
                let mut n = 0;
                for block in data.chunks_exact(8).take(MAX_SACK_BLOCKS) {
                    let l = u32::from_be_bytes([block[0], block[1], block[2], block[3]]);
                    let r = u32::from_be_bytes([block[4], block[5], block[6], block[7]]);
                    out.sack_blocks[n] = (SeqNumber(l), SeqNumber(r));
                    n += 1;
                }
                out.sack_block_count = n as u8;
            }
            _ => {}
        }
        o = &o[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syn() -> TcpRepr {
        TcpRepr {
            src_port: 40000,
            dst_port: 80,
            seq: SeqNumber(0x0102_0304),
            ack: SeqNumber(0),
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
    fn emit_parse_roundtrip() {
        let r = syn();
        let mut buf = [0xaau8; 64];
        let hl = r.emit(&mut buf).unwrap();
        assert_eq!(hl, 20 + 24);
        assert_eq!(hl % 4, 0);
        assert_eq!(&buf[16..18], &[0, 0], "checksum left zero");
        let (p, payload) = TcpRepr::parse(&buf[..hl + 3]).unwrap();
        assert_eq!(p, r);
        assert_eq!(payload, &[0xaa; 3]);
    }

    #[test]
    fn sack_blocks_roundtrip() {
        let mut r = syn();
        r.flags = TcpFlags::ACK;
        r.options = TcpOptions::default();
        r.options.timestamps = Some((5, 6));
        r.options.sack_blocks[0] = (SeqNumber(10), SeqNumber(20));
        r.options.sack_blocks[1] = (SeqNumber(30), SeqNumber(40));
        r.options.sack_block_count = 2;
        let mut buf = [0u8; 60];
        let hl = r.emit(&mut buf).unwrap();
        let (p, _) = TcpRepr::parse(&buf[..hl]).unwrap();
        assert_eq!(p, r);
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
        let (r, payload) = TcpRepr::parse(&seg).unwrap();
        assert!(payload.is_empty());
        assert_eq!(r.src_port, 0xa0b2);
        assert_eq!(r.dst_port, 80);
        assert_eq!(r.seq, SeqNumber(0x1122_3344));
        assert_eq!(r.flags, TcpFlags::SYN);
        assert_eq!(r.window, 0xfaf0);
        assert_eq!(r.options.mss, Some(1460));
        assert!(r.options.sack_permitted);
        assert_eq!(r.options.timestamps, Some((7, 0)));
        assert_eq!(r.options.window_scale, Some(7));
        assert_eq!(TcpHeader::new_checked(&seg).unwrap().checksum(), 0x1234);
    }

    #[test]
    fn errors() {
        let mut buf = [0u8; 60];
        let hl = syn().emit(&mut buf).unwrap();
        assert_eq!(TcpRepr::parse(&buf[..19]), Err(WireError::Truncated));
        assert_eq!(TcpRepr::parse(&buf[..hl - 1]), Err(WireError::Truncated));
        let mut b = buf;
        b[12] = 4 << 4;
        assert_eq!(TcpRepr::parse(&b[..hl]), Err(WireError::BadDataOffset));
        // Option whose length runs past the header.
        let mut b = [0u8; 24];
        b[12] = 6 << 4;
        b[20..24].copy_from_slice(&[1, 1, 8, 10]);
        assert_eq!(TcpRepr::parse(&b), Err(WireError::OptionPastHeader));
        // Kind without a length byte.
        b[20..24].copy_from_slice(&[1, 1, 1, 2]);
        assert_eq!(TcpRepr::parse(&b), Err(WireError::OptionPastHeader));
        // Length below 2.
        b[20..24].copy_from_slice(&[2, 1, 0, 0]);
        assert_eq!(TcpRepr::parse(&b), Err(WireError::BadOptionLength));
        // MSS with wrong length.
        b[20..24].copy_from_slice(&[2, 3, 0, 0]);
        assert_eq!(TcpRepr::parse(&b), Err(WireError::BadOptionLength));
        // Unknown option is skipped; EOL stops parsing.
        b[20..24].copy_from_slice(&[99, 2, 0, 0xff]);
        assert!(TcpRepr::parse(&b).is_ok());
        // Output buffer too small.
        assert_eq!(syn().emit(&mut [0u8; 30]), Err(WireError::BufferTooSmall));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            if let Ok((r, payload)) = TcpRepr::parse(&bytes) {
                proptest::prop_assert!(payload.len() <= bytes.len() - HEADER_LEN);
                let _ = r.header_len();
            }
        }
    }
}
