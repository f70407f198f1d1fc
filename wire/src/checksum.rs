//! The Internet checksum (RFC 1071), its incremental update (RFC 1624), and the
//! pseudo-header checksums of TCP/UDP/ICMPv6 over IPv4 (RFC 768, RFC 9293 §3.1) and IPv6
//! (RFC 8200 §8.1, RFC 4443 §2.3).
//!
//! Conventions: a *sum* is the folded 16-bit ones'-complement sum of big-endian 16-bit words
//! (not complemented); a *checksum* is the complement of a sum, the value carried on the wire.
//! Partial sums of several buffers can be combined with [`add`] as long as every buffer but the
//! last has an even length (RFC 1071 §2(B)).

use super::ip::{IpPair, IpProtocol};
use super::{Layer, Result, WireError};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Which checksums [`parse_frame_with`](super::parse_frame_with) verifies. The IPv4 header
/// checksum is always verified; upper-layer (TCP/UDP/ICMP) checksums only if `verify_l4`.
/// Without it ([`IP_ONLY`](Self::IP_ONLY)) a frame is parsed whose upper-layer checksum
/// was verified already (the data path parsing a segment again) or is left for its receiver
/// to verify (the turn-around helpers, which keep a valid checksum valid and a corrupt one
/// corrupt). No NIC's verdict on a checksum reaches the codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumPolicy {
    /// Verify TCP, UDP, ICMPv4 and ICMPv6 checksums.
    pub verify_l4: bool,
}

impl Default for ChecksumPolicy {
    /// Verifies everything.
    fn default() -> Self {
        ChecksumPolicy { verify_l4: true }
    }
}

impl ChecksumPolicy {
    /// Verify everything (the default).
    pub const VERIFY_ALL: ChecksumPolicy = ChecksumPolicy { verify_l4: true };
    /// Verify the IPv4 header checksum only.
    pub const IP_ONLY: ChecksumPolicy = ChecksumPolicy { verify_l4: false };
}

/// Folds a 64-bit accumulator of 16-bit words down to 16 bits with end-around carry.
#[inline(always)]
fn fold(mut s: u64) -> u16 {
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Sums the buffer in native byte order into a `u64` (the "deferred carries" and "byte order
/// independence" tricks of RFC 1071 §2(A),(C)): the folded result is the ones'-complement sum
/// in native byte order.
///
/// Native 64-bit words are added into two 128-bit accumulators (an add and an add-with-carry
/// each, the two chains independent), whose carries go back in at the bottom at the end: a
/// 2^64 - 1 modulus is a multiple of the 16-bit sum's 2^16 - 1. Half the instructions of
/// 32-bit words summed into 64 bits (callgrind, `wire/examples/parse_cost.rs`).
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    let word = |c: &[u8]| {
        u128::from(u64::from_ne_bytes([
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
        ]))
    };
    let (mut a0, mut a1): (u128, u128) = (0, 0);
    let mut blocks = data.chunks_exact(64);
    for b in &mut blocks {
        a0 += word(&b[0..8]);
        a1 += word(&b[8..16]);
        a0 += word(&b[16..24]);
        a1 += word(&b[24..32]);
        a0 += word(&b[32..40]);
        a1 += word(&b[40..48]);
        a0 += word(&b[48..56]);
        a1 += word(&b[56..64]);
    }
    let mut acc = a0 + a1;
    let mut words = blocks.remainder().chunks_exact(8);
    for c in &mut words {
        acc += word(c);
    }
    // The last 0 to 7 bytes as a word padded with zeros (an odd trailing byte is the high
    // byte of a 16-bit word whose low byte is zero, RFC 1071 §4.1), in native order: byte
    // `i` at bits `8 i` of a little-endian word, swapped on a big-endian machine. Shifted in,
    // not copied into a buffer: the copy was a `memcpy` call on every segment.
    let mut t: u64 = 0;
    for (i, &b) in words.remainder().iter().enumerate() {
        t |= u64::from(b) << (8 * i);
    }
    acc += u128::from(u64::from_le(t));
    // Ones'-complement: the carries out of 64 bits go back in at the bottom.
    let (s, carry) = (acc as u64).overflowing_add((acc >> 64) as u64);
    s + u64::from(carry)
}

/// The folded ones'-complement sum of `data` taken as big-endian 16-bit words, an odd final
/// byte padded with zero (RFC 1071). Not complemented.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    u16::from_be(fold(sum_native(data)))
}

/// Ones'-complement addition of two partial sums.
#[inline(always)]
pub fn add(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// The Internet checksum of `data` (RFC 1071): the complement of [`sum`]. Computing it over a
/// header whose checksum field is zero gives the value to store in that field.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Incremental update of a checksum `old_checksum` when one 16-bit word of the covered data
/// changes from `old` to `new`: RFC 1624 eqn. 3, `HC' = ~(~HC + ~m + m')`, which (unlike
/// RFC 1141's eqn. 2) never produces the negative zero `0xffff` from a positive one.
#[inline]
pub fn update16(old_checksum: u16, old: u16, new: u16) -> u16 {
    !add(add(!old_checksum, !old), new)
}

/// Incremental update (RFC 1624 eqn. 3) for a change of several words: `old` and `new` are the
/// bytes of the changed region before and after (same, even length, starting at an even offset
/// of the covered data).
#[inline]
pub fn update(old_checksum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    !add(add(!old_checksum, !sum(old)), sum(new))
}

/// Sum of the IPv4 pseudo-header (RFC 768; RFC 9293 §3.1): source, destination, zero,
/// protocol, upper-layer length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: IpProtocol, len: u16) -> u16 {
    let s = src.octets();
    let d = dst.octets();
    let acc = u64::from(u16::from_be_bytes([s[0], s[1]]))
        + u64::from(u16::from_be_bytes([s[2], s[3]]))
        + u64::from(u16::from_be_bytes([d[0], d[1]]))
        + u64::from(u16::from_be_bytes([d[2], d[3]]))
        + u64::from(u8::from(proto))
        + u64::from(len);
    fold(acc)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1): source, (final) destination, 32-bit
/// upper-layer packet length, three zero bytes, next header.
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: IpProtocol, len: u32) -> u16 {
    let acc = u64::from(sum(&src.octets()))
        + u64::from(sum(&dst.octets()))
        + u64::from(len >> 16)
        + u64::from(len & 0xffff)
        + u64::from(u8::from(next_header));
    fold(acc)
}

/// Sum of the pseudo-header for `pair` (IPv4: `len` is truncated to 16 bits, as on the wire).
#[inline]
pub fn pseudo_header(pair: &IpPair, proto: IpProtocol, len: usize) -> u16 {
    match pair {
        IpPair::V4 { src, dst } => pseudo_header_v4(*src, *dst, proto, len as u16),
        IpPair::V6 { src, dst } => pseudo_header_v6(src, dst, proto, len as u32),
    }
}

/// Verifies the checksum of an upper-layer segment (`segment` is the whole L4 header and
/// payload, checksum field included) against its pseudo-header: the sum over both must be
/// `0xffff` (RFC 1071 §1). Does not apply UDP's "zero means none" rule: see
/// [`verify_udp_checksum`].
#[inline]
pub fn verify_l4(pair: &IpPair, proto: IpProtocol, segment: &[u8]) -> bool {
    add(pseudo_header(pair, proto, segment.len()), sum(segment)) == 0xffff
}

/// Computes the checksum of an upper-layer segment with its pseudo-header and stores it at
/// `checksum_offset` (which is zeroed first). Returns the stored value. Fails if the segment is
/// too short to hold the field.
#[inline]
pub fn fill_l4(
    pair: &IpPair,
    proto: IpProtocol,
    segment: &mut [u8],
    checksum_offset: usize,
) -> Result<u16> {
    let layer = match proto {
        IpProtocol::Udp => Layer::Udp,
        IpProtocol::Icmpv6 => Layer::Icmpv6,
        IpProtocol::Icmp => Layer::Icmpv4,
        _ => Layer::Tcp,
    };
    super::need(layer, checksum_offset + 2, segment.len())?;
    segment[checksum_offset] = 0;
    segment[checksum_offset + 1] = 0;
    let c = !add(pseudo_header(pair, proto, segment.len()), sum(segment));
    super::put16(segment, checksum_offset, c);
    Ok(c)
}

/// Offset of the checksum in a TCP header (RFC 9293 §3.1).
pub const TCP_CHECKSUM_OFFSET: usize = 16;
/// Offset of the checksum in a UDP header (RFC 768).
pub const UDP_CHECKSUM_OFFSET: usize = 6;
/// Offset of the checksum in an ICMP / ICMPv6 header (RFC 792, RFC 4443 §2.1).
pub const ICMP_CHECKSUM_OFFSET: usize = 2;

/// Fills the checksum of a TCP segment (header + payload, as emitted by `flowlane-tcp` with a
/// zero checksum field at offset 16) for the given IP addresses.
#[inline]
pub fn fill_tcp_checksum(pair: &IpPair, segment: &mut [u8]) -> Result<()> {
    super::need(Layer::Tcp, 20, segment.len())?;
    fill_l4(pair, IpProtocol::Tcp, segment, TCP_CHECKSUM_OFFSET).map(|_| ())
}

/// Verifies the checksum of a TCP segment (header + payload). `false` if shorter than a TCP
/// header.
#[inline]
pub fn verify_tcp_checksum(pair: &IpPair, segment: &[u8]) -> bool {
    segment.len() >= 20 && verify_l4(pair, IpProtocol::Tcp, segment)
}

/// Fills the checksum of a UDP datagram (header + payload). A computed value of zero is sent
/// as `0xffff` (RFC 768: zero means "no checksum"; RFC 8200 §8.1 for IPv6).
#[inline]
pub fn fill_udp_checksum(pair: &IpPair, datagram: &mut [u8]) -> Result<()> {
    super::need(Layer::Udp, 8, datagram.len())?;
    let c = fill_l4(pair, IpProtocol::Udp, datagram, UDP_CHECKSUM_OFFSET)?;
    if c == 0 {
        super::put16(datagram, UDP_CHECKSUM_OFFSET, 0xffff);
    }
    Ok(())
}

/// Verifies the checksum of a UDP datagram (header + payload). Over IPv4 a zero checksum field
/// means the sender computed none and is accepted (RFC 768); over IPv6 the checksum is
/// mandatory and zero is rejected (RFC 8200 §8.1).
#[inline]
pub fn verify_udp_checksum(pair: &IpPair, datagram: &[u8]) -> bool {
    if datagram.len() < 8 {
        return false;
    }
    if datagram[6] == 0 && datagram[7] == 0 {
        return matches!(pair, IpPair::V4 { .. });
    }
    verify_l4(pair, IpProtocol::Udp, datagram)
}

/// Fills the checksum of an ICMPv6 message (RFC 4443 §2.3: includes the IPv6 pseudo-header).
#[inline]
pub fn fill_icmpv6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, message: &mut [u8]) -> Result<()> {
    super::need(Layer::Icmpv6, 4, message.len())?;
    let pair = IpPair::V6 {
        src: *src,
        dst: *dst,
    };
    fill_l4(&pair, IpProtocol::Icmpv6, message, ICMP_CHECKSUM_OFFSET).map(|_| ())
}

/// Verifies the checksum of an ICMPv6 message (RFC 4443 §2.3).
#[inline]
pub fn verify_icmpv6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, message: &[u8]) -> bool {
    let pair = IpPair::V6 {
        src: *src,
        dst: *dst,
    };
    message.len() >= 4 && verify_l4(&pair, IpProtocol::Icmpv6, message)
}

/// `Err(BadChecksum { layer })` unless `ok`.
#[inline(always)]
pub(crate) fn check(ok: bool, layer: Layer) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(WireError::BadChecksum { layer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward reference: big-endian 16-bit words, u32 accumulator, fold at the end.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for pair in data.chunks(2) {
            let hi = u64::from(pair[0]) << 8;
            let lo = pair.get(1).copied().map_or(0, u64::from);
            acc += hi | lo;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    /// Every length up to a few blocks, at every alignment, with bytes that make every
    /// 64-bit word carry (0xff runs) and without: the block loop, the words after it and the
    /// odd tail against the reference.
    #[test]
    fn sum_matches_reference_at_every_length_and_alignment() {
        let mut buf = [0u8; 200];
        for fill in [0xffu8, 0x5a, 0] {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = if fill == 0 { (i * 37 + 11) as u8 } else { fill };
            }
            for start in 0..8 {
                for len in 0..=(buf.len() - start) {
                    let d = &buf[start..start + len];
                    assert_eq!(
                        sum(d),
                        reference_sum(d),
                        "fill {fill:#x} start {start} len {len}"
                    );
                }
            }
        }
        // Words whose 128-bit total is 2^65 - 1: the carry out of 64 bits when the two halves
        // are added must go back in (without it the sum is 0, not 1).
        let mut d = vec![0xffu8; 16];
        d.extend_from_slice(&1u64.to_ne_bytes());
        assert_eq!(sum(&d), reference_sum(&d));
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the sum of 0001 f203 f4f5 f6f7 is ddf2 (checksum 220d).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
    }

    #[test]
    fn odd_lengths_and_empty() {
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        let all_ff = [0xffu8; 1501];
        assert_eq!(sum(&all_ff), reference_sum(&all_ff));
        for n in 0..100usize {
            let d: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(sum(&d), reference_sum(&d), "len {n}");
        }
    }

    #[test]
    fn ipv4_header_known() {
        // The classic example header (checksum b861 at offset 10).
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
    }

    #[test]
    fn rfc1624_example() {
        // RFC 1624 §4: m = 0x5555 -> m' = 0x3285, HC = 0xdd2f; eqn. 3 gives 0x0000.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    #[test]
    fn pseudo_v4_matches_explicit_bytes() {
        let src = Ipv4Addr::new(192, 168, 1, 10);
        let dst = Ipv4Addr::new(10, 0, 0, 1);
        let mut ph = Vec::new();
        ph.extend_from_slice(&src.octets());
        ph.extend_from_slice(&dst.octets());
        ph.extend_from_slice(&[0, 17, 0x01, 0x23]);
        assert_eq!(
            pseudo_header_v4(src, dst, IpProtocol::Udp, 0x0123),
            sum(&ph)
        );
    }

    #[test]
    fn pseudo_v6_matches_explicit_bytes() {
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8::ffff:1".parse().unwrap();
        let mut ph = Vec::new();
        ph.extend_from_slice(&src.octets());
        ph.extend_from_slice(&dst.octets());
        ph.extend_from_slice(&0x0001_0203u32.to_be_bytes());
        ph.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(
            pseudo_header_v6(&src, &dst, IpProtocol::Icmpv6, 0x0001_0203),
            sum(&ph)
        );
    }

    #[test]
    fn udp_zero_becomes_ffff_and_v6_zero_rejected() {
        let v4 = IpPair::V4 {
            src: Ipv4Addr::new(1, 1, 1, 1),
            dst: Ipv4Addr::new(2, 2, 2, 2),
        };
        let v6 = IpPair::V6 {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
        };
        let mut d = [0u8, 1, 0, 2, 0, 8, 0, 0];
        assert!(verify_udp_checksum(&v4, &d), "zero = no checksum over IPv4");
        assert!(!verify_udp_checksum(&v6, &d), "zero is invalid over IPv6");
        // Find a 2-byte payload that makes the computed checksum zero, check 0xffff is sent.
        let mut found = false;
        for x in 0..=0xffffu16 {
            let mut dg = [0u8, 1, 0, 2, 0, 10, 0, 0, 0, 0];
            dg[8..10].copy_from_slice(&x.to_be_bytes());
            fill_udp_checksum(&v4, &mut dg).unwrap();
            assert_ne!(&dg[6..8], &[0, 0]);
            assert!(verify_udp_checksum(&v4, &dg));
            if dg[6..8] == [0xff, 0xff] {
                found = true;
            }
        }
        assert!(found);
        fill_udp_checksum(&v6, &mut d).unwrap();
        assert!(verify_udp_checksum(&v6, &d));
        assert!(fill_udp_checksum(&v6, &mut d[..7]).is_err());
    }

    #[test]
    fn tcp_fill_verify() {
        let pair = IpPair::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        };
        let mut seg = [0u8; 25];
        seg[12] = 5 << 4;
        seg[20..].copy_from_slice(b"hello");
        assert!(!verify_tcp_checksum(&pair, &seg) || sum(&seg) == 0);
        fill_tcp_checksum(&pair, &mut seg).unwrap();
        assert!(verify_tcp_checksum(&pair, &seg));
        seg[24] ^= 1;
        assert!(!verify_tcp_checksum(&pair, &seg));
        assert!(fill_tcp_checksum(&pair, &mut [0u8; 19]).is_err());
        assert!(!verify_tcp_checksum(&pair, &[0u8; 19]));
    }

    proptest! {
        #[test]
        fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            prop_assert_eq!(sum(&data), reference_sum(&data));
        }

        #[test]
        fn incremental_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 2..200),
            idx in any::<prop::sample::Index>(),
            new in any::<u16>(),
        ) {
            let words = data.len() / 2;
            let i = idx.index(words) * 2;
            let c0 = checksum(&data);
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let c1 = checksum(&data);
            let inc = update16(c0, old, new);
            // Equal, or both representations of zero in ones' complement.
            prop_assert!(inc == c1 || (inc == 0 && c1 == 0xffff) || (inc == 0xffff && c1 == 0));
        }

        #[test]
        fn combine_even_split(data in proptest::collection::vec(any::<u8>(), 0..300), split in 0usize..150) {
            let s = (split * 2).min(data.len() & !1);
            prop_assert_eq!(add(sum(&data[..s]), sum(&data[s..])), reference_sum(&data));
        }
    }
}
