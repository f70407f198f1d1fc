//! The minimal TCP view the data path needs to demultiplex and checksum segments (RFC 9293
//! §3.1). The full header (sequence numbers, options, window …) is parsed by `flowlane-tcp`.
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
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::checksum;
use super::ip::IpPair;
use super::{be16, need, Layer, Result, WireError};

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// TCP flag bits in byte 13 (RFC 9293 §3.1, RFC 3168 for CWR/ECE).
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
    /// ECE.
    pub const ECE: u8 = 0x40;
    /// CWR.
    pub const CWR: u8 = 0x80;
}

/// A zero-copy view of a TCP segment (header + payload): ports, data offset, flags and
/// checksum. `new_checked` validates that the 20-byte fixed header is present and that the
/// data offset is ≥ 5 words and within the segment.
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
        need(Layer::Tcp, MIN_HEADER_LEN, b.len())?;
        let hl = usize::from(b[12] >> 4) * 4;
        if hl < MIN_HEADER_LEN || hl > b.len() {
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
        be16(self.buffer.as_ref(), 0)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Header length in bytes (data offset × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }

    /// The flag byte (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[13]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 16)
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

    #[test]
    fn known_syn() {
        let t = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (43210, 80));
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.flags(), flags::SYN);
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

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(t) = TcpPacket::new_checked(&data[..]) {
                let _ = t.payload();
                let _ = t.verify_checksum(&addrs());
            }
        }
    }
}
