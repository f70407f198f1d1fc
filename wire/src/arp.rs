//! ARP for Ethernet and IPv4 (RFC 826).
//!
//! ```text
//!  0        2        4    5    6        8                14          18                24          28
//! +--------+--------+----+----+--------+-----------------+-----------+-----------------+-----------+
//! | htype  | ptype  |hlen|plen|  oper  | sender hw addr  | sender IP | target hw addr  | target IP |
//! +--------+--------+----+----+--------+-----------------+-----------+-----------------+-----------+
//! ```

use super::ethernet::{EtherType, EthernetAddress};
use super::ip::is_martian_source;
use super::{be16, need, put16, Layer, Result, WireError};
use std::net::Ipv4Addr;

/// Length of an ARP packet for Ethernet/IPv4.
pub const PACKET_LEN: usize = 28;
/// Fixed part (up to and including the operation).
const FIXED_LEN: usize = 8;

/// Hardware type 1: Ethernet (RFC 826 `ar$hrd`).
pub const HTYPE_ETHERNET: u16 = 1;

/// ARP operation (RFC 826 `ar$op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    /// 1: request.
    Request,
    /// 2: reply.
    Reply,
    /// Anything else (RARP etc.).
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            o => ArpOperation::Unknown(o),
        }
    }
}

impl From<ArpOperation> for u16 {
    #[inline]
    fn from(o: ArpOperation) -> u16 {
        match o {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(v) => v,
        }
    }
}

/// A zero-copy view of an ARP packet. `new_checked` ensures the fixed part and the four
/// addresses (of the sizes the packet announces, and at least the 28 bytes of the
/// Ethernet/IPv4 flavour) are present. The address accessors read Ethernet/IPv4 offsets: their
/// values are meaningful when [`ArpPacket::is_ethernet_ipv4`] holds.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wraps a buffer, checking it holds the packet the header describes and at least 28 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        need(Layer::Arp, FIXED_LEN, b.len())?;
        let len = FIXED_LEN + 2 * (usize::from(b[4]) + usize::from(b[5]));
        need(Layer::Arp, len.max(PACKET_LEN), b.len())?;
        Ok(ArpPacket { buffer })
    }

    /// Hardware type (1 = Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// Protocol type (an EtherType; 0x0800 = IPv4).
    #[inline]
    pub fn protocol_type(&self) -> EtherType {
        EtherType::from(be16(self.buffer.as_ref(), 2))
    }

    /// Hardware address length.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    /// Protocol address length.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[5]
    }

    /// Whether this is the Ethernet/IPv4 flavour (htype 1, ptype 0x0800, lengths 6 and 4).
    #[inline]
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HTYPE_ETHERNET
            && self.protocol_type() == EtherType::Ipv4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }

    /// Operation.
    #[inline]
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(be16(self.buffer.as_ref(), 6))
    }

    /// Sender hardware address.
    #[inline]
    pub fn source_hardware_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[8..14])
    }

    /// Sender protocol address.
    #[inline]
    pub fn source_protocol_addr(&self) -> Ipv4Addr {
        ip4(&self.buffer.as_ref()[14..18])
    }

    /// Target hardware address.
    #[inline]
    pub fn target_hardware_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[18..24])
    }

    /// Target protocol address.
    #[inline]
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        ip4(&self.buffer.as_ref()[24..28])
    }
}

#[inline(always)]
fn ip4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Sets hardware type, protocol type and address lengths for Ethernet/IPv4.
    #[inline]
    pub fn set_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        put16(b, 0, HTYPE_ETHERNET);
        put16(b, 2, EtherType::Ipv4.into());
        b[4] = 6;
        b[5] = 4;
    }

    /// Sets the operation.
    #[inline]
    pub fn set_operation(&mut self, op: ArpOperation) {
        put16(self.buffer.as_mut(), 6, op.into());
    }

    /// Sets the sender hardware address.
    #[inline]
    pub fn set_source_hardware_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[8..14].copy_from_slice(&a.0);
    }

    /// Sets the sender protocol address.
    #[inline]
    pub fn set_source_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[14..18].copy_from_slice(&a.octets());
    }

    /// Sets the target hardware address.
    #[inline]
    pub fn set_target_hardware_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[18..24].copy_from_slice(&a.0);
    }

    /// Sets the target protocol address.
    #[inline]
    pub fn set_target_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[24..28].copy_from_slice(&a.octets());
    }
}

/// A parsed Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request, reply or other.
    pub operation: ArpOperation,
    /// Sender MAC.
    pub source_hardware_addr: EthernetAddress,
    /// Sender IPv4 address.
    pub source_protocol_addr: Ipv4Addr,
    /// Target MAC (zero in requests).
    pub target_hardware_addr: EthernetAddress,
    /// Target IPv4 address.
    pub target_protocol_addr: Ipv4Addr,
}

impl ArpRepr {
    /// Parses an Ethernet/IPv4 ARP packet; other hardware/protocol types are `Unsupported`.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> Result<ArpRepr> {
        if !packet.is_ethernet_ipv4() {
            return Err(WireError::Unsupported {
                layer: Layer::Arp,
                what: "not Ethernet/IPv4 ARP",
            });
        }
        Ok(ArpRepr {
            operation: packet.operation(),
            source_hardware_addr: packet.source_hardware_addr(),
            source_protocol_addr: packet.source_protocol_addr(),
            target_hardware_addr: packet.target_hardware_addr(),
            target_protocol_addr: packet.target_protocol_addr(),
        })
    }

    /// Length of the emitted packet (28).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet. Panics if the buffer is shorter than 28 bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ArpPacket<T>) {
        packet.set_ethernet_ipv4();
        packet.set_operation(self.operation);
        packet.set_source_hardware_addr(self.source_hardware_addr);
        packet.set_source_protocol_addr(self.source_protocol_addr);
        packet.set_target_hardware_addr(self.target_hardware_addr);
        packet.set_target_protocol_addr(self.target_protocol_addr);
    }

    /// If this is a request for `our_ip` (and not a gratuitous announcement of it by someone
    /// else), the reply to send (RFC 826 "Packet Reception": swap sender/target, fill in our
    /// hardware address, opcode reply). The reply goes to the requester's MAC, which is
    /// `reply.target_hardware_addr`.
    ///
    /// Not answered: a group sender MAC (IEEE Std 802's individual/group bit: the reply would
    /// go to the whole segment), and a sender IP no station has ([`is_martian_source`]:
    /// broadcast, multicast, loopback, "this network"; Linux's `arp_process` refuses them
    /// through its route lookup). An ARP Probe's `0.0.0.0` is answered (RFC 5227 §2.1.1: the
    /// prober learns that the address is in use; Linux answers it too).
    #[inline]
    pub fn reply_to(&self, our_mac: EthernetAddress, our_ip: Ipv4Addr) -> Option<ArpRepr> {
        let sender = self.source_protocol_addr;
        if self.operation != ArpOperation::Request
            || self.target_protocol_addr != our_ip
            || sender == our_ip
            || self.source_hardware_addr.is_multicast()
            || (!sender.is_unspecified() && is_martian_source(sender.into()))
        {
            return None;
        }
        Some(ArpRepr {
            operation: ArpOperation::Reply,
            source_hardware_addr: our_mac,
            source_protocol_addr: our_ip,
            target_hardware_addr: self.source_hardware_addr,
            target_protocol_addr: self.source_protocol_addr,
        })
    }

    /// A request asking who has `target_ip`, from `our_mac`/`our_ip` (to be sent to the
    /// broadcast MAC).
    #[inline]
    pub fn request(our_mac: EthernetAddress, our_ip: Ipv4Addr, target_ip: Ipv4Addr) -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: our_mac,
            source_protocol_addr: our_ip,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target_ip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A captured ARP request (Ethernet payload only): who has 24.166.173.159? tell
    /// 24.166.172.1 (00:07:0d:af:f4:54).
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, 0x18,
        0xa6, 0xac, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x18, 0xa6, 0xad, 0x9f,
    ];

    #[test]
    fn parse_captured_request() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let r = ArpRepr::parse(&p).unwrap();
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.source_hardware_addr.to_string(), "00:07:0d:af:f4:54");
        assert_eq!(r.source_protocol_addr, Ipv4Addr::new(24, 166, 172, 1));
        assert_eq!(r.target_hardware_addr, EthernetAddress([0; 6]));
        assert_eq!(r.target_protocol_addr, Ipv4Addr::new(24, 166, 173, 159));
        let mut out = [0u8; 28];
        r.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, REQUEST);
    }

    #[test]
    fn reply() {
        let r = ArpRepr::parse(&ArpPacket::new_checked(&REQUEST[..]).unwrap()).unwrap();
        let mac = EthernetAddress([0x02, 0, 0, 0, 0, 0x99]);
        assert_eq!(r.reply_to(mac, Ipv4Addr::new(24, 166, 173, 158)), None);
        let reply = r.reply_to(mac, Ipv4Addr::new(24, 166, 173, 159)).unwrap();
        let mut out = [0u8; 28];
        reply.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        let expected: [u8; 28] = [
            0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, // reply
            0x02, 0x00, 0x00, 0x00, 0x00, 0x99, 24, 166, 173, 159, // us
            0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, 24, 166, 172, 1, // them
        ];
        assert_eq!(out, expected);
        // No reply to a reply, nor to a gratuitous announcement of our own address.
        assert_eq!(reply.reply_to(mac, Ipv4Addr::new(24, 166, 172, 1)), None);
        let grat = ArpRepr::request(mac, Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(grat.reply_to(mac, Ipv4Addr::new(1, 2, 3, 4)), None);
    }

    /// No reply to a sender IP no station has, nor to a group sender MAC; an ARP Probe's
    /// `0.0.0.0` is answered, to the prober's MAC (RFC 5227 §2.1.1).
    #[test]
    fn no_reply_to_a_martian_sender() {
        let ours = Ipv4Addr::new(10, 0, 0, 1);
        let me = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let them = EthernetAddress([2, 0, 0, 0, 0, 9]);
        let asked_by = |sender: Ipv4Addr, sha| ArpRepr {
            source_hardware_addr: sha,
            ..ArpRepr::request(sha, sender, ours)
        };
        for martian in [
            "127.0.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "0.1.2.3",
        ] {
            let sender = martian.parse().unwrap();
            assert_eq!(asked_by(sender, them).reply_to(me, ours), None, "{martian}");
        }
        let group = EthernetAddress([0x01, 0, 0x5e, 0, 0, 1]);
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(asked_by(peer, group).reply_to(me, ours), None);
        assert_eq!(
            asked_by(peer, EthernetAddress::BROADCAST).reply_to(me, ours),
            None
        );
        let probe = asked_by(Ipv4Addr::UNSPECIFIED, them)
            .reply_to(me, ours)
            .unwrap();
        assert_eq!(
            (probe.target_hardware_addr, probe.target_protocol_addr),
            (them, Ipv4Addr::UNSPECIFIED)
        );
        assert!(asked_by(peer, them).reply_to(me, ours).is_some());
    }

    #[test]
    fn truncated_and_unsupported() {
        for n in 0..REQUEST.len() {
            assert!(matches!(
                ArpPacket::new_checked(&REQUEST[..n]),
                Err(WireError::Truncated {
                    layer: Layer::Arp,
                    ..
                })
            ));
        }
        let mut b = REQUEST;
        b[1] = 6; // IEEE 802 hardware type
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert!(matches!(
            ArpRepr::parse(&p),
            Err(WireError::Unsupported { .. })
        ));
        let mut b = REQUEST;
        b[4] = 16; // longer addresses than the buffer holds
        assert!(ArpPacket::new_checked(&b[..]).is_err());
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = ArpPacket::new_checked(&data[..]) {
                let _ = ArpRepr::parse(&p);
            }
        }
    }
}
