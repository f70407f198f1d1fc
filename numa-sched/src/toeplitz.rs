//! The Toeplitz RSS hash, bit-exact with NIC hardware.
//!
//! Reference: Microsoft, "Receive Side Scaling" specification, section "RSS Hashing
//! Functions" (Toeplitz hash), and Microsoft Learn, "Verifying the RSS Hash Calculation"
//! (the known-answer vectors in this module's tests). The Linux kernel's ethtool RSS
//! interface (`ethtool -x` / `-X hkey`, `rx-flow-hash`) programs the same function.
//!
//! For an input of `n` bytes the hash uses key bits `0 .. 8n + 32`: a 40-byte key covers the
//! longest standard input, the 36 bytes of an IPv6 4-tuple.

use core::fmt;
use core::net::IpAddr;
use core::str::FromStr;

use serde::{Serialize, Serializer};

use crate::error::{Error, Result};

/// Longest hash input the standard RSS types produce: IPv6 source and destination addresses
/// (2 × 16 bytes) plus source and destination ports (2 × 2 bytes).
pub const MAX_INPUT_LEN: usize = 36;

/// A Toeplitz secret key, at least 4 bytes long (the hash slides a 32-bit window over it).
///
/// NICs use 40-byte (most) or 52-byte (Intel ice/i40e) keys. Inputs longer than
/// `key length − 4` bytes reach past the key's end; there the key reads as zero bits, which is
/// what the specification's "shift K left" pseudo-code does.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RssKey {
    bytes: Vec<u8>,
}

/// The 40-byte key of the Microsoft RSS verification suite (also the default key of many
/// drivers and of DPDK's `rss_intel_key`).
const MICROSOFT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

impl RssKey {
    /// Shortest accepted key, in bytes.
    pub const MIN_LEN: usize = 4;

    /// Wraps raw key bytes.
    ///
    /// # Errors
    /// [`Error::KeyTooShort`] if there are fewer than [`RssKey::MIN_LEN`] bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.len() < Self::MIN_LEN {
            return Err(Error::KeyTooShort { len: bytes.len() });
        }
        Ok(Self { bytes })
    }

    /// The 40-byte key used by Microsoft's RSS verification vectors.
    #[must_use]
    pub fn microsoft_default() -> Self {
        Self {
            bytes: MICROSOFT_KEY.to_vec(),
        }
    }

    /// A key made of `0x6d5a` repeated, `len` bytes long.
    ///
    /// A key whose bits repeat every 16 bits makes the hash symmetric: swapping source and
    /// destination (addresses and ports together) leaves it unchanged, so both directions of a
    /// connection land on the same queue (S. Woo, K. Park, "Scalable TCP Session Monitoring
    /// with Symmetric Receive-side Scaling", KAIST tech. report, 2012). This holds while the
    /// input stays within the key (`len >= input length + 4`).
    ///
    /// # Errors
    /// [`Error::KeyTooShort`] if `len < 4`.
    pub fn symmetric(len: usize) -> Result<Self> {
        Self::new(
            [0x6d, 0x5a]
                .iter()
                .copied()
                .cycle()
                .take(len)
                .collect::<Vec<u8>>(),
        )
    }

    /// Parses a key written as colon-separated bytes, as `ethtool -x` prints it
    /// (`"6d:5a:56:da:..."`), or as plain hex (`"6d5a56da..."`, optionally with `0x`).
    /// Surrounding whitespace is ignored; the case of the digits does not matter.
    ///
    /// # Errors
    /// [`Error::KeyBadChar`], [`Error::KeyBadGroup`], [`Error::KeyOddDigits`] for malformed
    /// text (with the offset of the problem), [`Error::KeyTooShort`] for fewer than 4 bytes.
    pub fn parse_hex(text: &str) -> Result<Self> {
        let trimmed = text.trim();
        let mut offset = text.len() - text.trim_start().len();
        let body = match trimmed
            .strip_prefix("0x")
            .or_else(|| trimmed.strip_prefix("0X"))
        {
            Some(rest) => {
                offset += 2;
                rest
            }
            None => trimmed,
        };
        let bad_char = |i: usize, c: char| Error::KeyBadChar {
            offset: offset + i,
            found: c,
        };
        let mut bytes = Vec::with_capacity(body.len() / 2);
        if body.contains(':') {
            let mut group_start = 0;
            for group in body.split(':') {
                if let Some((i, c)) = group.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
                    return Err(bad_char(group_start + i, c));
                }
                if group.len() != 2 {
                    return Err(Error::KeyBadGroup {
                        offset: offset + group_start,
                        digits: group.len(),
                    });
                }
                bytes.push(hex_pair(group.as_bytes()));
                group_start += group.len() + 1;
            }
        } else {
            if let Some((i, c)) = body.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
                return Err(bad_char(i, c));
            }
            if body.len() % 2 != 0 {
                return Err(Error::KeyOddDigits { digits: body.len() });
            }
            bytes.extend(body.as_bytes().chunks_exact(2).map(hex_pair));
        }
        Self::new(bytes)
    }

    /// The key bytes, first byte first (the order `ethtool -x` prints and the NIC uses).
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Key bit `n` (bit 0 = most significant bit of byte 0); zero past the end of the key.
    fn bit(&self, n: usize) -> u32 {
        self.bytes
            .get(n / 8)
            .map_or(0, |&b| u32::from(b >> (7 - n % 8)) & 1)
    }

    /// The 32 key bits starting at bit `n`: the value the hash XORs in when input bit `n` is
    /// set. Key bits past the end of the key read as zero.
    fn window(&self, n: usize) -> u32 {
        let first = n / 8;
        let wide = (0..5).fold(0u64, |acc, i| {
            acc << 8 | u64::from(self.bytes.get(first + i).copied().unwrap_or(0))
        });
        // `wide` holds 40 key bits starting at bit 8 * first; drop the (n % 8) leading ones.
        (wide >> (8 - n % 8)) as u32
    }
}

/// Value of two ASCII hex digits (already validated).
fn hex_pair(pair: &[u8]) -> u8 {
    let digit = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    };
    digit(pair[0]) << 4 | digit(pair[1])
}

impl fmt::Display for RssKey {
    /// Colon-separated lowercase bytes, like `ethtool -x` prints and `ethtool -X hkey` takes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.bytes.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for RssKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RssKey({self})")
    }
}

impl FromStr for RssKey {
    type Err = Error;

    /// Same as [`RssKey::parse_hex`].
    fn from_str(s: &str) -> Result<Self> {
        Self::parse_hex(s)
    }
}

impl Serialize for RssKey {
    /// Serialized in ethtool colon style, the form an operator can paste into `ethtool -X`.
    fn serialize<S: Serializer>(&self, serializer: S) -> core::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Bit-serial Toeplitz hash, a literal transcription of the specification's pseudo-code
/// (Microsoft RSS spec, "RSS Hashing Functions"):
///
/// ```text
/// ComputeHash(input[], n)
///   result = 0
///   for each bit b in input[] from left to right
///     if (b == 1) result ^= (left-most 32 bits of K)
///     shift K left 1 bit position
///   return result
/// ```
///
/// Slow (one step per input bit); it is the oracle that [`Toeplitz`] is tested against.
#[must_use]
pub fn hash_reference(key: &RssKey, input: &[u8]) -> u32 {
    let mut result = 0u32;
    // Left-most 32 bits of K.
    let mut window = key.window(0);
    // Index of the key bit that enters the window at the next shift.
    let mut next = 32;
    for &byte in input {
        for shift in (0..8).rev() {
            if (byte >> shift) & 1 == 1 {
                result ^= window;
            }
            window = window << 1 | key.bit(next);
            next += 1;
        }
    }
    result
}

/// Table-driven Toeplitz hash.
///
/// The hash is linear over GF(2): it is the XOR of the contributions of the input's bytes,
/// and the contribution of byte value `v` at position `i` depends only on `(i, v)` and the
/// key. So one 256-entry table per input position turns the hash into one lookup and one XOR
/// per byte. Built for [`MAX_INPUT_LEN`] positions by default (36 KiB of tables, shared by
/// clones: a worker that learns of a bucket move clones its RSS state, and copying the tables
/// each time cost a move some microseconds); bytes beyond the tabulated length are still
/// hashed correctly, bit by bit.
#[derive(Clone)]
pub struct Toeplitz {
    key: RssKey,
    tables: std::sync::Arc<[[u32; 256]]>,
}

impl Toeplitz {
    /// Precomputes the tables of `key` for inputs up to [`MAX_INPUT_LEN`] bytes.
    #[must_use]
    pub fn new(key: &RssKey) -> Self {
        Self::with_max_input_len(key, MAX_INPUT_LEN)
    }

    /// Precomputes the tables of `key` for inputs up to `max_input_len` bytes.
    #[must_use]
    pub fn with_max_input_len(key: &RssKey, max_input_len: usize) -> Self {
        let tables = (0..max_input_len)
            .map(|pos| {
                let mut table = [0u32; 256];
                for v in 1..256usize {
                    // Add the lowest set bit of v to the entry without it; bit value
                    // 1 << low sits at input bit 8 * pos + (7 - low).
                    let low = v.trailing_zeros() as usize;
                    table[v] = table[v & (v - 1)] ^ key.window(8 * pos + 7 - low);
                }
                table
            })
            .collect::<Vec<_>>()
            .into();
        Self {
            key: key.clone(),
            tables,
        }
    }

    /// The key the tables were built from.
    #[must_use]
    pub fn key(&self) -> &RssKey {
        &self.key
    }

    /// The input length covered by tables; longer inputs take a slower path for the rest.
    #[must_use]
    pub fn max_input_len(&self) -> usize {
        self.tables.len()
    }

    /// Toeplitz hash of `input`, equal to [`hash_reference`] with the same key.
    #[inline]
    #[must_use]
    pub fn hash(&self, input: &[u8]) -> u32 {
        let (head, tail) = input.split_at(input.len().min(self.tables.len()));
        let mut hash = 0;
        for (table, &byte) in self.tables.iter().zip(head) {
            hash ^= table[usize::from(byte)];
        }
        for (i, &byte) in tail.iter().enumerate() {
            hash ^= self.byte_contribution(head.len() + i, byte);
        }
        hash
    }

    /// What byte value `byte` at input position `pos` XORs into the hash.
    #[inline]
    pub(crate) fn byte_contribution(&self, pos: usize, byte: u8) -> u32 {
        match self.tables.get(pos) {
            Some(table) => table[usize::from(byte)],
            None => (0..8)
                .filter(|bit| (byte << bit) & 0x80 != 0)
                .fold(0, |acc, bit| acc ^ self.key.window(8 * pos + bit)),
        }
    }
}

impl fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toeplitz")
            .field("key", &self.key)
            .field("max_input_len", &self.tables.len())
            .finish()
    }
}

/// Transport protocol of a flow, as far as RSS cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Protocol {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
    /// Any other IP protocol number; RSS hashes such packets on addresses only.
    Other(u8),
}

impl Protocol {
    /// The protocol for an IP protocol / IPv6 next-header number.
    #[must_use]
    pub const fn from_number(number: u8) -> Self {
        match number {
            6 => Self::Tcp,
            17 => Self::Udp,
            n => Self::Other(n),
        }
    }

    /// The IP protocol number.
    #[must_use]
    pub const fn number(self) -> u8 {
        match self {
            Self::Tcp => 6,
            Self::Udp => 17,
            Self::Other(n) => n,
        }
    }
}

/// Which header fields feed the hash for one flow type (ethtool `rx-flow-hash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum HashFields {
    /// Source and destination addresses (ethtool `sd`; the spec's "2-tuple").
    Addresses,
    /// Addresses and source and destination ports (ethtool `sdfn`; the "4-tuple").
    AddressesAndPorts,
}

impl HashFields {
    /// The ethtool `rx-flow-hash` field letters: `"sd"` or `"sdfn"`.
    #[must_use]
    pub const fn ethtool_letters(self) -> &'static str {
        match self {
            Self::Addresses => "sd",
            Self::AddressesAndPorts => "sdfn",
        }
    }

    /// Reads ethtool `rx-flow-hash` field letters (in any order). `None` for sets that
    /// include fields this model does not cover (e.g. `m` for the MAC address, `v` VLAN).
    #[must_use]
    pub fn from_ethtool_letters(letters: &str) -> Option<Self> {
        let mut seen = [false; 4];
        for c in letters.chars() {
            let i = "sdfn".find(c)?;
            seen[i] = true;
        }
        match seen {
            [true, true, false, false] => Some(Self::Addresses),
            [true, true, true, true] => Some(Self::AddressesAndPorts),
            _ => None,
        }
    }

    /// Whether ports are part of the hash input.
    #[must_use]
    pub const fn with_ports(self) -> bool {
        matches!(self, Self::AddressesAndPorts)
    }
}

/// Hash fields per flow type, the equivalent of ethtool's `rx-flow-hash tcp4|udp4|tcp6|udp6`.
/// Other protocols are always hashed on addresses only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct RssHashConfig {
    /// TCP over IPv4.
    pub tcp4: HashFields,
    /// UDP over IPv4.
    pub udp4: HashFields,
    /// TCP over IPv6.
    pub tcp6: HashFields,
    /// UDP over IPv6.
    pub udp6: HashFields,
}

impl RssHashConfig {
    /// Every TCP and UDP flow hashed on the 4-tuple: flowlane's test bed setting.
    #[must_use]
    pub const fn four_tuple() -> Self {
        let f = HashFields::AddressesAndPorts;
        Self {
            tcp4: f,
            udp4: f,
            tcp6: f,
            udp6: f,
        }
    }

    /// TCP on the 4-tuple, UDP on addresses only: the default of many NICs (fragmented UDP
    /// datagrams carry no ports after the first fragment, so drivers avoid hashing them).
    #[must_use]
    pub const fn tcp_four_udp_two() -> Self {
        Self {
            tcp4: HashFields::AddressesAndPorts,
            udp4: HashFields::Addresses,
            tcp6: HashFields::AddressesAndPorts,
            udp6: HashFields::Addresses,
        }
    }

    /// The fields hashed for `protocol` over IPv4 (`ipv6 == false`) or IPv6.
    #[must_use]
    pub const fn fields_for(&self, protocol: Protocol, ipv6: bool) -> HashFields {
        match (protocol.number(), ipv6) {
            (6, false) => self.tcp4,
            (17, false) => self.udp4,
            (6, true) => self.tcp6,
            (17, true) => self.udp6,
            _ => HashFields::Addresses,
        }
    }
}

impl Default for RssHashConfig {
    /// [`RssHashConfig::four_tuple`], the test bed's setting.
    fn default() -> Self {
        Self::four_tuple()
    }
}

/// A flow's 5-tuple, oriented as the packet travels: `src` is the sender of the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct FlowTuple {
    /// Source address of the packet.
    pub src: IpAddr,
    /// Destination address of the packet.
    pub dst: IpAddr,
    /// Source port (ignored for protocols without ports).
    pub src_port: u16,
    /// Destination port (ignored for protocols without ports).
    pub dst_port: u16,
    /// Transport protocol.
    pub protocol: Protocol,
}

impl FlowTuple {
    /// The same flow seen in the other direction (addresses and ports swapped).
    #[must_use]
    pub const fn reversed(&self) -> Self {
        Self {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }

    /// Whether the hash input is IPv6 (either address is IPv6).
    #[must_use]
    pub const fn is_ipv6(&self) -> bool {
        self.src.is_ipv6() || self.dst.is_ipv6()
    }

    /// The bytes the NIC hashes: source address, destination address, then (if
    /// `with_ports`) source port and destination port, all in network byte order
    /// (Microsoft RSS spec, "RSS Hashing Types": IPv4 12 or 8 bytes, IPv6 36 or 32 bytes).
    ///
    /// A tuple mixing families (which no packet carries) is hashed as IPv6, the IPv4 address
    /// written as IPv4-mapped (`::ffff:a.b.c.d`).
    #[must_use]
    pub fn hash_input(&self, with_ports: bool) -> HashInput {
        let mut input = HashInput {
            bytes: [0; MAX_INPUT_LEN],
            len: 0,
        };
        if self.is_ipv6() {
            input.push(&v6_octets(self.src));
            input.push(&v6_octets(self.dst));
        } else {
            input.push(&v4_octets(self.src));
            input.push(&v4_octets(self.dst));
        }
        if with_ports {
            input.push(&self.src_port.to_be_bytes());
            input.push(&self.dst_port.to_be_bytes());
        }
        input
    }

    /// The hash input under `config` (ports included only where the config says so for this
    /// flow's protocol and family).
    #[must_use]
    pub fn hash_input_for(&self, config: &RssHashConfig) -> HashInput {
        self.hash_input(
            config
                .fields_for(self.protocol, self.is_ipv6())
                .with_ports(),
        )
    }
}

fn v6_octets(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

fn v4_octets(addr: IpAddr) -> [u8; 4] {
    match addr {
        IpAddr::V4(a) => a.octets(),
        // Unreachable by construction (callers checked `is_ipv6`); keep it total anyway.
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |a| a.octets()),
    }
}

/// A hash input on the stack: at most [`MAX_INPUT_LEN`] bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashInput {
    bytes: [u8; MAX_INPUT_LEN],
    len: u8,
}

impl HashInput {
    fn push(&mut self, data: &[u8]) {
        let start = usize::from(self.len);
        self.bytes[start..start + data.len()].copy_from_slice(data);
        self.len += data.len() as u8;
    }

    /// The input bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl AsRef<[u8]> for HashInput {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for HashInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HashInput(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn flow(src: &str, sport: u16, dst: &str, dport: u16) -> FlowTuple {
        FlowTuple {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            src_port: sport,
            dst_port: dport,
            protocol: Protocol::Tcp,
        }
    }

    /// Microsoft Learn, "Verifying the RSS Hash Calculation", IPv4 table (also in
    /// shared/rss-vectors.txt): (destination, dst port, source, src port, IPv4 only, with TCP).
    const IPV4_VECTORS: [(&str, u16, &str, u16, u32, u32); 5] = [
        (
            "161.142.100.80",
            1766,
            "66.9.149.187",
            2794,
            0x323e_8fc2,
            0x51cc_c178,
        ),
        (
            "65.69.140.83",
            4739,
            "199.92.111.2",
            14230,
            0xd718_262a,
            0xc626_b0ea,
        ),
        (
            "12.22.207.184",
            38024,
            "24.19.198.95",
            12898,
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        (
            "209.142.163.6",
            2217,
            "38.27.205.30",
            48228,
            0x8298_9176,
            0xafc7_327f,
        ),
        (
            "202.188.127.2",
            1303,
            "153.39.163.191",
            44251,
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];

    /// Same document, IPv6 table. Taken from the document's text (Microsoft Learn's
    /// "Verifying the RSS Hash Calculation", English page; identical in DPDK's
    /// app/test/test_thash.c), not reconstructed: they pass against `hash_reference`,
    /// which is itself pinned by the IPv4 table.
    const IPV6_VECTORS: [(&str, u16, &str, u16, u32, u32); 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc1_8cd5,
            0x4020_7d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c_461c,
            0xdde5_1bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61_e985,
            0x02d1_feef,
        ),
    ];

    fn check_vectors(vectors: &[(&str, u16, &str, u16, u32, u32)], input_lens: (usize, usize)) {
        let key = RssKey::microsoft_default();
        let fast = Toeplitz::new(&key);
        for &(dst, dport, src, sport, addrs_only, with_ports) in vectors {
            let f = flow(src, sport, dst, dport);
            let two = f.hash_input(false);
            let four = f.hash_input(true);
            assert_eq!((two.as_bytes().len(), four.as_bytes().len()), input_lens);
            assert_eq!(
                hash_reference(&key, two.as_bytes()),
                addrs_only,
                "{f:?} 2-tuple ref"
            );
            assert_eq!(
                hash_reference(&key, four.as_bytes()),
                with_ports,
                "{f:?} 4-tuple ref"
            );
            assert_eq!(fast.hash(two.as_bytes()), addrs_only, "{f:?} 2-tuple fast");
            assert_eq!(fast.hash(four.as_bytes()), with_ports, "{f:?} 4-tuple fast");
        }
    }

    #[test]
    fn microsoft_ipv4_vectors() {
        check_vectors(&IPV4_VECTORS, (8, 12));
    }

    #[test]
    fn microsoft_ipv6_vectors() {
        check_vectors(&IPV6_VECTORS, (32, 36));
    }

    #[test]
    fn hash_input_layout() {
        let f = flow("1.2.3.4", 0x0506, "7.8.9.10", 0x0b0c);
        assert_eq!(
            f.hash_input(true).as_bytes(),
            [1, 2, 3, 4, 7, 8, 9, 10, 5, 6, 11, 12]
        );
        assert_eq!(f.hash_input(false).as_bytes(), [1, 2, 3, 4, 7, 8, 9, 10]);
        // Mixed families are hashed as IPv6 with the IPv4 address mapped.
        let mixed = FlowTuple {
            dst: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..f
        };
        let input = mixed.hash_input(true);
        assert_eq!(input.as_bytes().len(), 36);
        assert_eq!(
            &input.as_bytes()[..16],
            &Ipv4Addr::new(1, 2, 3, 4).to_ipv6_mapped().octets()
        );
    }

    #[test]
    fn hash_config_selects_ports() {
        let mut f = flow("66.9.149.187", 2794, "161.142.100.80", 1766);
        let nic = RssHashConfig::tcp_four_udp_two();
        assert_eq!(f.hash_input_for(&nic).as_bytes().len(), 12);
        f.protocol = Protocol::Udp;
        assert_eq!(f.hash_input_for(&nic).as_bytes().len(), 8);
        assert_eq!(
            f.hash_input_for(&RssHashConfig::default()).as_bytes().len(),
            12
        );
        f.protocol = Protocol::Other(47);
        assert_eq!(
            f.hash_input_for(&RssHashConfig::default()).as_bytes().len(),
            8
        );
        // Protocol::Other carrying TCP's number is still TCP for hashing.
        f.protocol = Protocol::Other(6);
        assert_eq!(f.hash_input_for(&nic).as_bytes().len(), 12);
        assert_eq!(Protocol::from_number(17), Protocol::Udp);
        assert_eq!(Protocol::Other(132).number(), 132);
    }

    #[test]
    fn ethtool_letters_round_trip() {
        for f in [HashFields::Addresses, HashFields::AddressesAndPorts] {
            assert_eq!(
                HashFields::from_ethtool_letters(f.ethtool_letters()),
                Some(f)
            );
        }
        assert_eq!(
            HashFields::from_ethtool_letters("nfds"),
            Some(HashFields::AddressesAndPorts)
        );
        assert_eq!(HashFields::from_ethtool_letters("sdm"), None);
        assert_eq!(HashFields::from_ethtool_letters("sdf"), None);
    }

    #[test]
    fn key_text_round_trip_and_errors() {
        let key = RssKey::microsoft_default();
        let text = key.to_string();
        assert!(text.starts_with("6d:5a:56:da:25:5b"));
        assert_eq!(text.len(), 40 * 3 - 1);
        assert_eq!(text.parse::<RssKey>().unwrap(), key);
        let plain =
            "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
        assert_eq!(RssKey::parse_hex(plain).unwrap(), key);
        assert_eq!(
            RssKey::parse_hex(&format!(" 0x{}\n", plain.to_uppercase())).unwrap(),
            key
        );

        assert_eq!(
            RssKey::parse_hex("6d:5a:5g:da"),
            Err(Error::KeyBadChar {
                offset: 7,
                found: 'g'
            })
        );
        assert_eq!(
            RssKey::parse_hex("6d:5a:5:da:00"),
            Err(Error::KeyBadGroup {
                offset: 6,
                digits: 1
            })
        );
        assert_eq!(
            RssKey::parse_hex("6d:5a::da:00"),
            Err(Error::KeyBadGroup {
                offset: 6,
                digits: 0
            })
        );
        assert_eq!(
            RssKey::parse_hex("6d5a56d"),
            Err(Error::KeyOddDigits { digits: 7 })
        );
        assert_eq!(
            RssKey::parse_hex("  6d5a 56da"),
            Err(Error::KeyBadChar {
                offset: 6,
                found: ' '
            })
        );
        assert_eq!(
            RssKey::parse_hex("6d:5a:56"),
            Err(Error::KeyTooShort { len: 3 })
        );
        assert_eq!(RssKey::parse_hex(""), Err(Error::KeyTooShort { len: 0 }));
        assert_eq!(
            RssKey::new(vec![1, 2, 3]),
            Err(Error::KeyTooShort { len: 3 })
        );
        assert_eq!(
            format!("{:?}", RssKey::new([1, 2, 3, 0xff]).unwrap()),
            "RssKey(01:02:03:ff)"
        );
    }

    #[test]
    fn symmetric_key_hashes_both_directions_alike() {
        let key = RssKey::symmetric(40).unwrap();
        assert_eq!(&key.as_bytes()[..4], [0x6d, 0x5a, 0x6d, 0x5a]);
        let fast = Toeplitz::new(&key);
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..1000 {
            let v4 = FlowTuple {
                src: IpAddr::V4(Ipv4Addr::from(rng.gen::<u32>())),
                dst: IpAddr::V4(Ipv4Addr::from(rng.gen::<u32>())),
                src_port: rng.gen(),
                dst_port: rng.gen(),
                protocol: Protocol::Tcp,
            };
            let v6 = FlowTuple {
                src: IpAddr::V6(Ipv6Addr::from(rng.gen::<u128>())),
                dst: IpAddr::V6(Ipv6Addr::from(rng.gen::<u128>())),
                ..v4
            };
            for f in [v4, v6] {
                for ports in [false, true] {
                    assert_eq!(
                        fast.hash(f.hash_input(ports).as_bytes()),
                        fast.hash(f.reversed().hash_input(ports).as_bytes())
                    );
                }
            }
        }
        // The Microsoft key is not symmetric: the property above is the key's doing.
        let ms = Toeplitz::new(&RssKey::microsoft_default());
        let f = flow("66.9.149.187", 2794, "161.142.100.80", 1766);
        assert_ne!(
            ms.hash(f.hash_input(true).as_bytes()),
            ms.hash(f.reversed().hash_input(true).as_bytes())
        );
    }

    #[test]
    fn short_key_reads_zero_past_its_end() {
        // A 4-byte key: only the first input bit's window is the key itself; later windows
        // shift zeros in, so input bit i contributes key << i.
        let key = RssKey::new([0x80, 0, 0, 1]).unwrap();
        assert_eq!(hash_reference(&key, &[0x80]), 0x8000_0001);
        assert_eq!(hash_reference(&key, &[0x40]), 0x0000_0002);
        assert_eq!(hash_reference(&key, &[0, 0, 0, 0, 0x80]), 0);
        let fast = Toeplitz::with_max_input_len(&key, 2);
        for input in [&[0xffu8, 0xff, 0xff][..], &[0x12, 0x34, 0x56, 0x78, 0x9a]] {
            assert_eq!(fast.hash(input), hash_reference(&key, input));
        }
        assert_eq!(fast.hash(&[]), 0);
    }

    /// Fast against reference on `n` random inputs, with a new random key (40 to 52 bytes)
    /// every 10,000 inputs and input lengths cycling through the four standard ones.
    fn fast_matches_reference_n(n: usize) {
        let mut rng = StdRng::seed_from_u64(0x005e_ed0f_f10e_1a7e);
        let mut input = [0u8; MAX_INPUT_LEN];
        let mut key = RssKey::microsoft_default();
        let mut fast = Toeplitz::new(&key);
        for i in 0..n {
            if i % 10_000 == 9_999 {
                let len = rng.gen_range(40..=52);
                key = RssKey::new((0..len).map(|_| rng.gen()).collect::<Vec<u8>>()).unwrap();
                fast = Toeplitz::new(&key);
            }
            let len = [8, 12, 32, 36][i % 4];
            rng.fill(&mut input[..len]);
            let input = &input[..len];
            assert_eq!(
                fast.hash(input),
                hash_reference(&key, input),
                "key {key}, input {input:02x?}"
            );
        }
    }

    /// The million. Unoptimized, the bit-serial reference makes it take 6.5 s on an idle
    /// 2-vCPU VM (18 s under load), so debug builds skip it and run the 100k test below;
    /// `cargo test --release` (or `-- --ignored`) runs it, in well under a second.
    #[test]
    #[cfg_attr(debug_assertions, ignore = "1M bit-serial hashes: run with --release")]
    fn fast_matches_reference_on_a_million_inputs() {
        fast_matches_reference_n(1_000_000);
    }

    /// Debug builds' stand-in for the million.
    #[test]
    #[cfg_attr(not(debug_assertions), ignore = "the 1M test runs in release")]
    fn fast_matches_reference_on_100k_inputs() {
        fast_matches_reference_n(100_000);
    }

    proptest! {
        #[test]
        fn prop_fast_equals_reference(
            key in proptest::collection::vec(any::<u8>(), 4..64),
            input in proptest::collection::vec(any::<u8>(), 0..48),
            tabulated in 0..=MAX_INPUT_LEN,
        ) {
            let key = RssKey::new(key).unwrap();
            let fast = Toeplitz::with_max_input_len(&key, tabulated);
            prop_assert_eq!(fast.hash(&input), hash_reference(&key, &input));
        }

        #[test]
        fn prop_hash_is_linear(
            a in proptest::collection::vec(any::<u8>(), 36),
            b in proptest::collection::vec(any::<u8>(), 36),
        ) {
            // Toeplitz is linear over GF(2): H(a ^ b) = H(a) ^ H(b). This is what makes
            // the per-byte tables (and source-port search by delta) valid.
            let key = RssKey::microsoft_default();
            let x: Vec<u8> = a.iter().zip(&b).map(|(x, y)| x ^ y).collect();
            prop_assert_eq!(
                hash_reference(&key, &x),
                hash_reference(&key, &a) ^ hash_reference(&key, &b)
            );
        }

        #[test]
        fn prop_key_text_round_trips(key in proptest::collection::vec(any::<u8>(), 4..64)) {
            let key = RssKey::new(key).unwrap();
            prop_assert_eq!(key.to_string().parse::<RssKey>().unwrap(), key);
        }
    }
}
