//! A connection's address pair as the stack stores, hashes and compares it.
//!
//! [`FourTuple`] (two `SocketAddr`s) is the public form: 64 bytes, with an
//! enum tag, IPv6's flow label and scope in each address, and an equality
//! that matches on both families. The stack compares a tuple with every
//! segment it receives (with the connection the last segment was for, then
//! in the table) and keeps one in every connection and TIME-WAIT record.
//! [`FlowKey`] is that tuple in five machine words, 40 bytes: each address
//! as 128 bits (an IPv4 address in the low 32 of the second word), both
//! ports and both families in the fifth word. Equality is five word
//! compares folded into one test, without branches; the families are part
//! of it, so an IPv4 connection never matches an IPv6 segment from the
//! IPv4-mapped address (RFC 4291 §2.5.5.2) of the same peer.

use crate::siphash::SipHasher24;
use crate::FourTuple;
use flowlane_wire::peek::Endpoints;
use std::hash::Hasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The fifth word's bit for an IPv6 local address.
const LOCAL_V6: u64 = 1 << 32;
/// The fifth word's bit for an IPv6 remote address.
const REMOTE_V6: u64 = 1 << 33;

/// A connection's 4-tuple in five words (see the module's documentation).
#[derive(Clone, Copy, Eq)]
pub(crate) struct FlowKey {
    /// Our address.
    local: [u64; 2],
    /// The peer's address.
    remote: [u64; 2],
    /// Our port in bits 16..32, the peer's in 0..16, and the families'
    /// bits ([`LOCAL_V6`], [`REMOTE_V6`]).
    ports: u64,
}

/// An address as two words, and whether it is IPv6.
#[inline]
fn words(ip: IpAddr) -> ([u64; 2], bool) {
    match ip {
        IpAddr::V4(a) => ([0, u64::from(u32::from(a))], false),
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            ([(bits >> 64) as u64, bits as u64], true)
        }
    }
}

/// The address two words hold.
#[inline]
fn address(w: [u64; 2], v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(u128::from(w[0]) << 64 | u128::from(w[1])))
    } else {
        IpAddr::V4(Ipv4Addr::from(w[1] as u32))
    }
}

impl FlowKey {
    /// The key of a segment's connection, from its header's fields as seen
    /// by this stack (our address and port are the segment's destination).
    #[inline]
    pub(crate) fn new(local: IpAddr, local_port: u16, remote: IpAddr, remote_port: u16) -> Self {
        let (local, local_v6) = words(local);
        let (remote, remote_v6) = words(remote);
        let ports = u64::from(local_port) << 16
            | u64::from(remote_port)
            | if local_v6 { LOCAL_V6 } else { 0 }
            | if remote_v6 { REMOTE_V6 } else { 0 };
        FlowKey {
            local,
            remote,
            ports,
        }
    }

    /// The key of a received segment's connection from its endpoints as
    /// read off its frame (our address and port are its destination):
    /// the numbers are the key's words already.
    #[inline]
    pub(crate) fn of_segment(e: &Endpoints) -> Self {
        let families = if e.v6 { LOCAL_V6 | REMOTE_V6 } else { 0 };
        FlowKey {
            local: [(e.dst >> 64) as u64, e.dst as u64],
            remote: [(e.src >> 64) as u64, e.src as u64],
            ports: u64::from(e.dst_port) << 16 | u64::from(e.src_port) | families,
        }
    }

    /// The key of a tuple.
    #[cfg(test)]
    pub(crate) fn of(t: &FourTuple) -> Self {
        Self::pair(t.local, t.remote)
    }

    /// The key of the connection between `local` (ours) and `remote`.
    #[inline]
    pub(crate) fn pair(local: SocketAddr, remote: SocketAddr) -> Self {
        Self::new(local.ip(), local.port(), remote.ip(), remote.port())
    }

    /// The tuple back (IPv6 addresses with no flow label and no scope, as
    /// a segment's header gives them).
    #[inline]
    pub(crate) fn tuple(&self) -> FourTuple {
        FourTuple {
            local: self.local(),
            remote: self.remote(),
        }
    }

    /// Our address and port.
    #[inline]
    pub(crate) fn local(&self) -> SocketAddr {
        SocketAddr::new(self.local_ip(), self.local_port())
    }

    /// The peer's address and port.
    #[inline]
    pub(crate) fn remote(&self) -> SocketAddr {
        SocketAddr::new(self.remote_ip(), self.remote_port())
    }

    /// Our address.
    #[inline]
    pub(crate) fn local_ip(&self) -> IpAddr {
        address(self.local, self.ports & LOCAL_V6 != 0)
    }

    /// The peer's address.
    #[inline]
    pub(crate) fn remote_ip(&self) -> IpAddr {
        address(self.remote, self.ports & REMOTE_V6 != 0)
    }

    /// Whether the peer's address is IPv6 (its headers are IPv6's).
    #[inline]
    pub(crate) fn is_ipv6(&self) -> bool {
        self.ports & REMOTE_V6 != 0
    }

    /// Our port.
    #[inline]
    pub(crate) fn local_port(&self) -> u16 {
        (self.ports >> 16) as u16
    }

    /// The peer's port.
    #[inline]
    pub(crate) fn remote_port(&self) -> u16 {
        self.ports as u16
    }

    /// Feeds the key to a hasher: two words when both addresses are IPv4
    /// (both in one, the ports and families in the other), five otherwise.
    #[inline]
    pub(crate) fn hash_into(&self, h: &mut impl Hasher) {
        if self.ports & (LOCAL_V6 | REMOTE_V6) == 0 {
            h.write_u64(self.local[1] << 32 | self.remote[1]);
        } else {
            h.write_u64(self.local[0]);
            h.write_u64(self.local[1]);
            h.write_u64(self.remote[0]);
            h.write_u64(self.remote[1]);
        }
        h.write_u64(self.ports);
    }

    /// Feeds the key to a keyed PRF (the ISN's, RFC 6528 §3: the
    /// connection's addresses and ports; SYN cookies'): when both
    /// addresses are IPv4, one word of both (ours high) and the ports in
    /// four bytes, 12 bytes that SipHash takes in two compressions;
    /// otherwise the four address words and the ports and families in
    /// five bytes. The two forms differ in length, which SipHash's last
    /// word carries.
    #[inline]
    pub(crate) fn prf_into(&self, h: &mut SipHasher24) {
        if self.ports & (LOCAL_V6 | REMOTE_V6) == 0 {
            h.write_word(self.local[1] << 32 | self.remote[1]);
            h.write_partial(self.ports, 4);
        } else {
            h.write_word(self.local[0]);
            h.write_word(self.local[1]);
            h.write_word(self.remote[0]);
            h.write_word(self.remote[1]);
            h.write_partial(self.ports, 5);
        }
    }
}

impl PartialEq for FlowKey {
    /// All five words at once: a connection's segments match (the common
    /// case) only after every word is compared anyway, so the compares are
    /// folded into one test instead of five branches.
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        ((self.local[0] ^ o.local[0])
            | (self.local[1] ^ o.local[1])
            | (self.remote[0] ^ o.remote[0])
            | (self.remote[1] ^ o.remote[1])
            | (self.ports ^ o.ports))
            == 0
    }
}

impl std::fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} <- {}", self.local(), self.remote())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|a| IpAddr::V4(a.into())),
            any::<u128>().prop_map(|a| IpAddr::V6(a.into())),
            // IPv4-mapped IPv6 addresses, to tell them from IPv4.
            any::<u32>().prop_map(|a| IpAddr::V6(Ipv4Addr::from(a).to_ipv6_mapped())),
        ]
    }

    fn tuple() -> impl Strategy<Value = FourTuple> {
        (ip(), any::<u16>(), ip(), any::<u16>()).prop_map(|(l, lp, r, rp)| FourTuple {
            local: SocketAddr::new(l, lp),
            remote: SocketAddr::new(r, rp),
        })
    }

    /// The PRF's message, built from the tuple's `SocketAddr`s: both
    /// IPv4, one word of both addresses (ours high) and the ports' four
    /// bytes; otherwise each address in 16 bytes (as two words, high
    /// first), then the ports and the families' byte.
    fn prf_message_of(t: &FourTuple) -> Vec<u8> {
        let port_bits = u64::from(t.local.port()) << 16 | u64::from(t.remote.port());
        match (t.local.ip(), t.remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                let both = u64::from(u32::from(l)) << 32 | u64::from(u32::from(r));
                let mut msg = both.to_le_bytes().to_vec();
                msg.extend_from_slice(&port_bits.to_le_bytes()[..4]);
                msg
            }
            (l, r) => {
                let mut msg = Vec::new();
                for ip in [l, r] {
                    let bits = match ip {
                        IpAddr::V4(a) => u128::from(u32::from(a)),
                        IpAddr::V6(a) => u128::from(a),
                    };
                    msg.extend_from_slice(&((bits >> 64) as u64).to_le_bytes());
                    msg.extend_from_slice(&(bits as u64).to_le_bytes());
                }
                let families = u64::from(l.is_ipv6()) << 32 | u64::from(r.is_ipv6()) << 33;
                msg.extend_from_slice(&(port_bits | families).to_le_bytes()[..5]);
                msg
            }
        }
    }

    proptest! {
        #[test]
        fn round_trips_and_compares_as_the_tuple(a in tuple(), b in tuple()) {
            let (ka, kb) = (FlowKey::of(&a), FlowKey::of(&b));
            prop_assert_eq!(ka.tuple(), a);
            prop_assert_eq!(ka.local_port(), a.local.port());
            prop_assert_eq!(ka.remote_ip(), a.remote.ip());
            prop_assert_eq!(ka == kb, a == b);
            prop_assert!(ka == FlowKey::of(&a));
            let key = [7u8; 16];
            let mut h = SipHasher24::new(&key);
            ka.prf_into(&mut h);
            let mut want = SipHasher24::new(&key);
            want.write(&prf_message_of(&a));
            prop_assert_eq!(h.finish(), want.finish());
        }

        /// A segment's endpoints read off its frame give its connection's
        /// key, for every tuple whose addresses share a family.
        #[test]
        fn a_segments_endpoints_give_its_connections_key(a in tuple()) {
            match Endpoints::new(a.remote, a.local) {
                Some(seg) => prop_assert!(FlowKey::of_segment(&seg) == FlowKey::of(&a)),
                None => prop_assert_ne!(a.local.is_ipv4(), a.remote.is_ipv4()),
            }
        }

        #[test]
        fn one_field_changed_is_another_key(a in tuple(), which in 0..4usize) {
            let mut b = a;
            match which {
                0 => b.local.set_port(a.local.port() ^ 1),
                1 => b.remote.set_port(a.remote.port() ^ 0x8000),
                2 => std::mem::swap(&mut b.local, &mut b.remote),
                _ => b.remote.set_ip(match a.remote.ip() {
                    IpAddr::V4(x) => IpAddr::V6(x.to_ipv6_mapped()),
                    IpAddr::V6(x) => match x.to_ipv4_mapped() {
                        Some(v4) => IpAddr::V4(v4),
                        None => IpAddr::V6((u128::from(x) ^ 1).into()),
                    },
                }),
            }
            prop_assert_eq!(FlowKey::of(&a) == FlowKey::of(&b), a == b);
        }
    }

    #[test]
    fn ipv4_is_not_its_mapped_ipv6() {
        let v4 = FourTuple {
            local: "10.0.0.1:80".parse().unwrap(),
            remote: "10.0.0.2:4000".parse().unwrap(),
        };
        let mapped = FourTuple {
            local: "[::ffff:10.0.0.1]:80".parse().unwrap(),
            remote: "[::ffff:10.0.0.2]:4000".parse().unwrap(),
        };
        assert!(FlowKey::of(&v4) != FlowKey::of(&mapped));
        assert_eq!(std::mem::size_of::<FlowKey>(), 40);
    }
}
