//! UDP (RFC 768; over IPv6: RFC 8200 §8.1).
//!
//! ```text
//!  0      7 8     15 16    23 24    31
//! +--------+--------+--------+--------+
//! |   Source Port   |   Dest. Port    |
//! |     Length      |    Checksum     |
//! +--------+--------+--------+--------+
//! ```

use super::checksum;
use super::ip::IpPair;
use super::{be16, need, put16, Layer, Result, WireError};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A zero-copy view of a UDP datagram. `new_checked` validates `8 ≤ length ≤ buffer`;
/// [`payload`](Self::payload) ends at the length field.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps a buffer (normally the IP payload), checking the header is present, that the
    /// length field is at least 8 (`BadTotalLength`) and within the buffer (`Truncated`).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        need(Layer::Udp, HEADER_LEN, b.len())?;
        let len = usize::from(be16(b, 4));
        if len < HEADER_LEN {
            return Err(WireError::BadTotalLength {
                layer: Layer::Udp,
                len,
            });
        }
        need(Layer::Udp, len, b.len())?;
        Ok(UdpPacket { buffer })
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

    /// Length field (header + payload).
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), 4))
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }

    /// Checksum field (0: none, IPv4 only).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// The datagram (header + payload) as delimited by the length field.
    #[inline]
    pub fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.len()]
    }

    /// Payload, up to the length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len()]
    }

    /// Verifies the checksum with the pseudo-header of `addrs` (zero accepted over IPv4 only).
    #[inline]
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        checksum::verify_udp_checksum(addrs, self.datagram())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), 0, p);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), 2, p);
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), 4, len);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), 6, c);
    }

    /// Swaps the ports (checksum-neutral).
    #[inline]
    pub fn swap_ports(&mut self) {
        let (s, d) = self.buffer.as_mut()[0..4].split_at_mut(2);
        s.swap_with_slice(d);
    }

    /// Computes and stores the checksum over the datagram (length field) with the
    /// pseudo-header of `addrs`; a computed zero is stored as `0xffff`.
    #[inline]
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        let len = self.len();
        // Cannot fail: the datagram holds at least the 8-byte header.
        let _ = checksum::fill_udp_checksum(addrs, &mut self.buffer.as_mut()[..len]);
    }

    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }
}

/// Destination port 0, reserved (RFC 768): refused by [`UdpRepr::parse`] and
/// [`UdpRepr::emit`].
const DST_PORT_ZERO: WireError = WireError::Malformed {
    layer: Layer::Udp,
    what: "destination port 0",
};

/// A parsed UDP header: the ports. The length is the payload's; the checksum is verified by
/// [`parse`](Self::parse) and computed by [`emit`](Self::emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses a checked view, verifying the checksum against `addrs` when given. Port 0 as
    /// destination is `Malformed` (RFC 768 reserves it).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>, addrs: Option<&IpPair>) -> Result<UdpRepr> {
        if packet.dst_port() == 0 {
            return Err(DST_PORT_ZERO);
        }
        if let Some(a) = addrs {
            checksum::check(packet.verify_checksum(a), Layer::Udp)?;
        }
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// Header + payload length.
    #[inline]
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Writes the header for a payload of `payload_len` bytes that is already in place after
    /// it, and fills the checksum for `addrs`. Fails if the destination port is 0
    /// (`Malformed`, as [`parse`](Self::parse) would find it), the datagram would exceed 65535
    /// bytes or the buffer is shorter than `8 + payload_len`.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        payload_len: usize,
        addrs: &IpPair,
    ) -> Result<()> {
        if self.dst_port == 0 {
            return Err(DST_PORT_ZERO);
        }
        let len = HEADER_LEN + payload_len;
        if len > usize::from(u16::MAX) {
            return Err(WireError::BadTotalLength {
                layer: Layer::Udp,
                len,
            });
        }
        let got = packet.buffer.as_ref().len();
        if got < len {
            return Err(WireError::BufferTooSmall { needed: len, got });
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len as u16);
        packet.fill_checksum(addrs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// A DNS query 192.168.1.2:54321 → 8.8.8.8:53 ("example.com" A). The checksum 0x77e1 was
    /// computed independently of this crate (by hand with Python's `sum` over the
    /// pseudo-header and datagram words).
    const DATAGRAM: [u8; 37] = [
        0xd4, 0x31, 0x00, 0x35, 0x00, 0x25, 0x77, 0xe1, // header
        0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DNS header
        0x07, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 0x03, b'c', b'o', b'm', 0x00, // qname
        0x00, 0x01, 0x00, 0x01, // A IN
    ];

    fn v4() -> IpPair {
        IpPair::V4 {
            src: Ipv4Addr::new(192, 168, 1, 2),
            dst: Ipv4Addr::new(8, 8, 8, 8),
        }
    }

    #[test]
    fn known_datagram() {
        let p = UdpPacket::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (54321, 53, 37));
        assert!(p.verify_checksum(&v4()));
        let r = UdpRepr::parse(&p, Some(&v4())).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 54321,
                dst_port: 53
            }
        );
        // Emit over the same payload reproduces the captured bytes.
        let mut out = DATAGRAM;
        out[..8].fill(0);
        r.emit(&mut UdpPacket::new_unchecked(&mut out[..]), 29, &v4())
            .unwrap();
        assert_eq!(out, DATAGRAM);
    }

    #[test]
    fn malformed() {
        for n in 0..DATAGRAM.len() {
            assert!(matches!(
                UdpPacket::new_checked(&DATAGRAM[..n]),
                Err(WireError::Truncated {
                    layer: Layer::Udp,
                    ..
                })
            ));
        }
        let mut b = DATAGRAM;
        b[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            WireError::BadTotalLength {
                layer: Layer::Udp,
                len: 7
            }
        );
        let mut b = DATAGRAM;
        b[36] ^= 0xff;
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            UdpRepr::parse(&p, Some(&v4())).unwrap_err(),
            WireError::BadChecksum { layer: Layer::Udp }
        );
        assert!(UdpRepr::parse(&p, None).is_ok());
        let mut b = DATAGRAM;
        b[6] = 0;
        b[7] = 0;
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(UdpRepr::parse(&p, Some(&v4())).is_ok(), "no checksum, IPv4");
        let v6 = IpPair::V6 {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
        };
        assert!(
            UdpRepr::parse(&p, Some(&v6)).is_err(),
            "zero is invalid over IPv6"
        );
    }

    #[test]
    fn longer_buffer_and_emit_errors() {
        let mut b = DATAGRAM.to_vec();
        b.extend_from_slice(&[0xee; 5]);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 29);
        assert!(p.verify_checksum(&v4()));
        let r = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let mut small = [0u8; 10];
        let to_zero = UdpRepr {
            src_port: 1,
            dst_port: 0,
        };
        assert_eq!(
            to_zero.emit(&mut UdpPacket::new_unchecked(&mut small[..]), 0, &v4()),
            Err(DST_PORT_ZERO)
        );
        assert!(matches!(
            r.emit(&mut UdpPacket::new_unchecked(&mut small[..]), 3, &v4()),
            Err(WireError::BufferTooSmall {
                needed: 11,
                got: 10
            })
        ));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = UdpPacket::new_checked(&data[..]) {
                let _ = UdpRepr::parse(&p, Some(&v4()));
                prop_assert!(p.payload().len() + 8 <= data.len());
            }
        }

        #[test]
        fn round_trip(sp in any::<u16>(), dp in prop_oneof![15 => 1u16.., 1 => Just(0u16)], payload in proptest::collection::vec(any::<u8>(), 0..100), v6 in any::<bool>()) {
            let addrs = if v6 {
                IpPair::V6 { src: "2001:db8::1".parse().unwrap(), dst: "2001:db8::2".parse().unwrap() }
            } else { v4() };
            let mut buf = vec![0u8; 8 + payload.len()];
            buf[8..].copy_from_slice(&payload);
            let r = UdpRepr { src_port: sp, dst_port: dp };
            let emitted = r.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), payload.len(), &addrs);
            if dp == 0 {
                prop_assert_eq!(emitted, Err(DST_PORT_ZERO));
                return Ok(());
            }
            emitted.unwrap();
            let p = UdpPacket::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(UdpRepr::parse(&p, Some(&addrs)).unwrap(), r);
            prop_assert_eq!(p.payload(), &payload[..]);
        }
    }
}
