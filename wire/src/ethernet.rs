//! Ethernet II frames (IEEE 802.3 with an EtherType, RFC 894 for IPv4, RFC 2464 for IPv6) and
//! IEEE 802.1Q (C-tag) / 802.1ad (S-tag, "QinQ") VLAN tags.
//!
//! ```text
//!  0                 6                 12      14
//! +-----------------+-----------------+-------+----------
//! | destination MAC |   source MAC    | type  | payload …
//! +-----------------+-----------------+-------+----------
//! with a VLAN tag:                    | TPID  | TCI | type | payload …
//! ```

use super::{be16, need, put16, Layer, Result, WireError};
use core::fmt;
use std::net::Ipv6Addr;

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q / 802.1ad tag (TPID + TCI).
pub const VLAN_TAG_LEN: usize = 4;

/// A 48-bit IEEE MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// Builds an address from a 6-byte slice. Panics if `b.len() != 6`.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(b);
        EthernetAddress(a)
    }

    /// The six octets.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// `ff:ff:ff:ff:ff:ff`.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Group bit set (includes broadcast).
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Neither multicast nor broadcast.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// Locally administered bit set.
    #[inline]
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }

    /// The Ethernet multicast address of an IPv6 multicast address: `33:33` followed by its last
    /// 32 bits (RFC 2464 §7).
    #[inline]
    pub fn ipv6_multicast(addr: &Ipv6Addr) -> EthernetAddress {
        let o = addr.octets();
        EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// An EtherType (IEEE 802 numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800 (RFC 894).
    Ipv4,
    /// 0x0806 (RFC 826).
    Arp,
    /// 0x86DD (RFC 2464).
    Ipv6,
    /// 0x8100: IEEE 802.1Q customer VLAN tag.
    Vlan,
    /// 0x88A8: IEEE 802.1ad service VLAN tag (QinQ outer tag).
    QinQ,
    /// Anything else (including 802.3 length values < 0x0600).
    Unknown(u16),
}

impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::QinQ,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(t: EtherType) -> u16 {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => 0x8100,
            EtherType::QinQ => 0x88a8,
            EtherType::Unknown(v) => v,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Ipv4 => f.write_str("IPv4"),
            EtherType::Arp => f.write_str("ARP"),
            EtherType::Ipv6 => f.write_str("IPv6"),
            EtherType::Vlan => f.write_str("802.1Q"),
            EtherType::QinQ => f.write_str("802.1ad"),
            EtherType::Unknown(v) => write!(f, "0x{v:04x}"),
        }
    }
}

/// A VLAN tag's Tag Control Information (IEEE 802.1Q §9.6): priority, drop eligibility, VLAN id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority Code Point (3 bits).
    pub pcp: u8,
    /// Drop Eligible Indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    /// Decodes a TCI.
    #[inline]
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    /// Encodes the TCI (out-of-range `pcp`/`vid` bits are masked off).
    #[inline]
    pub const fn tci(&self) -> u16 {
        ((self.pcp as u16 & 0x7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }
}

/// Up to two VLAN tags. A single-tagged frame has only `outer`; a QinQ frame has both (`outer`
/// the service tag, `inner` the 802.1Q C-tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTags {
    /// First tag after the source MAC.
    pub outer: Option<VlanTag>,
    /// Second tag, only when `outer` is present.
    pub inner: Option<VlanTag>,
    /// The outer tag's TPID is 802.1ad's 0x88a8 (else 802.1Q's 0x8100): as received, and as
    /// emitted, so that a reply carries the tags its request came with (double 802.1Q tags
    /// and a single S-tag both occur).
    pub s_tag: bool,
}

impl VlanTags {
    /// No tags.
    pub const NONE: VlanTags = VlanTags {
        outer: None,
        inner: None,
        s_tag: false,
    };

    /// Number of tags (0, 1 or 2).
    #[inline]
    pub const fn count(&self) -> usize {
        self.outer.is_some() as usize + (self.outer.is_some() && self.inner.is_some()) as usize
    }

    /// The VLAN id the frame belongs to on this host: the inner (C-tag) id when two tags are
    /// present, otherwise the only one.
    #[inline]
    pub fn vid(&self) -> Option<u16> {
        match (self.outer, self.inner) {
            (Some(_), Some(i)) => Some(i.vid),
            (Some(o), None) => Some(o.vid),
            _ => None,
        }
    }
}

/// A zero-copy view of an Ethernet II frame. `new_checked` guarantees the 14-byte header is
/// present; VLAN tags are decoded by [`EthernetFrame::parse_tags`].
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking anything: accessors may panic on a short buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer, checking it holds at least an untagged header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        need(Layer::Ethernet, HEADER_LEN, buffer.as_ref().len())?;
        Ok(EthernetFrame { buffer })
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[0..6])
    }

    /// Source MAC address.
    #[inline]
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[6..12])
    }

    /// The EtherType at offset 12 (a TPID if the frame is tagged).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(be16(self.buffer.as_ref(), 12))
    }

    /// Decodes up to two VLAN tags (802.1ad/802.1Q outer, 802.1Q inner) and returns them with
    /// the inner EtherType and the total L2 header length. More than two tags is
    /// `Unsupported`; a tag cut short is `Truncated`.
    #[inline]
    pub fn parse_tags(&self) -> Result<(VlanTags, EtherType, usize)> {
        let b = self.buffer.as_ref();
        let mut tags = VlanTags::NONE;
        let mut ty = self.ethertype();
        let mut off = HEADER_LEN;
        if matches!(ty, EtherType::Vlan | EtherType::QinQ) {
            need(Layer::Vlan, off + VLAN_TAG_LEN, b.len())?;
            tags.s_tag = ty == EtherType::QinQ;
            tags.outer = Some(VlanTag::from_tci(be16(b, off)));
            ty = EtherType::from(be16(b, off + 2));
            off += VLAN_TAG_LEN;
            if ty == EtherType::Vlan {
                need(Layer::Vlan, off + VLAN_TAG_LEN, b.len())?;
                tags.inner = Some(VlanTag::from_tci(be16(b, off)));
                ty = EtherType::from(be16(b, off + 2));
                off += VLAN_TAG_LEN;
            }
            if matches!(ty, EtherType::Vlan | EtherType::QinQ) {
                return Err(WireError::Unsupported {
                    layer: Layer::Vlan,
                    what: "more than two VLAN tags",
                });
            }
        }
        Ok((tags, ty, off))
    }

    /// Everything after the 14-byte untagged header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[0..6].copy_from_slice(&a.0);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[6..12].copy_from_slice(&a.0);
    }

    /// Sets the EtherType at offset 12.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        put16(self.buffer.as_mut(), 12, t.into());
    }

    /// Swaps source and destination MAC addresses in place.
    #[inline]
    pub fn swap_addrs(&mut self) {
        let b = self.buffer.as_mut();
        let (dst, src) = b[..12].split_at_mut(6);
        dst.swap_with_slice(src);
    }

    /// Mutable payload after the 14-byte untagged header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// A parsed Ethernet header: addresses, VLAN tags and the (inner) EtherType of the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst_addr: EthernetAddress,
    /// Source MAC address.
    pub src_addr: EthernetAddress,
    /// VLAN tags, if any.
    pub vlan: VlanTags,
    /// EtherType of the payload (after any VLAN tags).
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Parses the header, including VLAN tags.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        let (vlan, ethertype, _) = frame.parse_tags()?;
        Ok(EthernetRepr {
            dst_addr: frame.dst_addr(),
            src_addr: frame.src_addr(),
            vlan,
            ethertype,
        })
    }

    /// Header length including tags: 14, 18 or 22.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + VLAN_TAG_LEN * self.vlan.count()
    }

    /// Writes the header (the outer tag's TPID 0x88a8 for an S-tag, else 0x8100; the inner
    /// tag's 0x8100).
    /// Panics if the buffer is shorter than [`header_len`](Self::header_len).
    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        let b = frame.buffer.as_mut();
        let mut off = 12;
        if let Some(outer) = self.vlan.outer {
            let tpid = if self.vlan.s_tag {
                EtherType::QinQ
            } else {
                EtherType::Vlan
            };
            put16(b, off, tpid.into());
            put16(b, off + 2, outer.tci());
            off += VLAN_TAG_LEN;
            if let Some(inner) = self.vlan.inner {
                put16(b, off, EtherType::Vlan.into());
                put16(b, off + 2, inner.tci());
                off += VLAN_TAG_LEN;
            }
        }
        put16(b, off, self.ethertype.into());
    }

    /// The header of a reply: addresses swapped, same tags and EtherType.
    #[inline]
    pub fn reversed(&self) -> EthernetRepr {
        EthernetRepr {
            dst_addr: self.src_addr,
            src_addr: self.dst_addr,
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UNTAGGED: [u8; 16] = [
        0x00, 0x1b, 0x21, 0x3a, 0x4b, 0x5c, // dst
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // src
        0x08, 0x00, // IPv4
        0x45, 0x00,
    ];

    #[test]
    fn untagged() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.dst_addr.to_string(), "00:1b:21:3a:4b:5c");
        assert_eq!(r.src_addr.to_string(), "52:54:00:12:34:56");
        assert_eq!(r.ethertype, EtherType::Ipv4);
        assert_eq!(r.vlan, VlanTags::NONE);
        assert_eq!(r.header_len(), 14);
        assert_eq!(f.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn single_tag() {
        // 802.1Q tag, PCP 5, DEI 0, VID 100, inner IPv6.
        let mut b = UNTAGGED[..12].to_vec();
        b.extend_from_slice(&[0x81, 0x00, 0xa0, 0x64, 0x86, 0xdd, 0x60]);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        let (tags, ty, len) = f.parse_tags().unwrap();
        assert_eq!(
            tags.outer,
            Some(VlanTag {
                pcp: 5,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(tags.inner, None);
        assert_eq!(tags.vid(), Some(100));
        assert_eq!(ty, EtherType::Ipv6);
        assert_eq!(len, 18);
        let r = EthernetRepr::parse(&f).unwrap();
        let mut out = vec![0u8; r.header_len()];
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &b[..18]);
    }

    #[test]
    fn qinq() {
        // S-tag 0x88a8 VID 10, C-tag 0x8100 VID 4094 DEI, inner ARP.
        let mut b = UNTAGGED[..12].to_vec();
        b.extend_from_slice(&[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x1f, 0xfe, 0x08, 0x06]);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.vlan.outer.unwrap().vid, 10);
        let inner = r.vlan.inner.unwrap();
        assert_eq!((inner.vid, inner.dei, inner.pcp), (4094, true, 0));
        assert_eq!(r.vlan.vid(), Some(4094));
        assert_eq!(r.ethertype, EtherType::Arp);
        assert_eq!(r.header_len(), 22);
        let mut out = vec![0u8; 22];
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        // Every prefix: error, never panic.
        for n in 0..b.len() {
            let res = EthernetFrame::new_checked(&b[..n]).and_then(|f| EthernetRepr::parse(&f));
            assert!(
                matches!(res, Err(WireError::Truncated { .. })),
                "{n}: {res:?}"
            );
        }
    }

    #[test]
    fn tags_emit_with_the_tpids_they_came_with() {
        // Double 802.1Q (0x8100 twice), and a single S-tag (0x88a8): each round-trips.
        for tags in [
            &[0x81, 0x00, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14, 0x08, 0x06][..],
            &[0x88, 0xa8, 0x00, 0x0a, 0x08, 0x00][..],
            &[0x81, 0x00, 0x00, 0x0a, 0x08, 0x00][..],
        ] {
            let mut b = UNTAGGED[..12].to_vec();
            b.extend_from_slice(tags);
            let r = EthernetRepr::parse(&EthernetFrame::new_checked(&b[..]).unwrap()).unwrap();
            let mut out = vec![0u8; b.len()];
            r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
            assert_eq!(out, b);
        }
    }

    #[test]
    fn three_tags_unsupported() {
        let mut b = UNTAGGED[..12].to_vec();
        b.extend_from_slice(&[
            0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x81, 0x00, 0, 3, 0x08, 0x00,
        ]);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert!(matches!(
            f.parse_tags(),
            Err(WireError::Unsupported {
                layer: Layer::Vlan,
                ..
            })
        ));
    }

    #[test]
    fn setters_and_helpers() {
        let mut b = UNTAGGED;
        let mut f = EthernetFrame::new_checked(&mut b[..]).unwrap();
        f.swap_addrs();
        assert_eq!(f.src_addr().to_string(), "00:1b:21:3a:4b:5c");
        f.set_ethertype(EtherType::Unknown(0x1234));
        assert_eq!(f.ethertype(), EtherType::Unknown(0x1234));
        assert!(EthernetAddress::BROADCAST.is_broadcast());
        assert!(EthernetAddress::BROADCAST.is_multicast());
        assert!(!EthernetAddress([0x52, 0, 0, 0, 0, 1]).is_multicast());
        assert!(EthernetAddress([0x52, 0, 0, 0, 0, 1]).is_local());
        let m = EthernetAddress::ipv6_multicast(&"ff02::1:ff00:1234".parse().unwrap());
        assert_eq!(m.to_string(), "33:33:ff:00:12:34");
        for v in [0x0800u16, 0x0806, 0x86dd, 0x8100, 0x88a8, 0x1234] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
        let t = VlanTag {
            pcp: 7,
            dei: true,
            vid: 0xfff,
        };
        assert_eq!(VlanTag::from_tci(t.tci()), t);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(f) = EthernetFrame::new_checked(&data[..]) {
                if let Ok(r) = EthernetRepr::parse(&f) {
                    prop_assert!(r.header_len() <= data.len());
                }
            }
        }
    }
}
