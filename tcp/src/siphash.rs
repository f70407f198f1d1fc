//! SipHash (Aumasson & Bernstein, "SipHash: a fast short-input PRF", 2012),
//! implemented without dependencies: SipHash-2-4 keys the RFC 6528 ISN and
//! timestamp offsets, and derives the connection table's hash key.

/// SipHash-2-4, the paper's recommended variant: two rounds per word, four
/// to finish.
#[derive(Clone)]
pub(crate) struct SipHasher24 {
    v: [u64; 4],
    tail: u64,
    ntail: usize,
    len: usize,
}

impl SipHasher24 {
    /// A hasher keyed with a 128-bit key.
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        let k0 = u64::from_le_bytes(key[0..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(key[8..16].try_into().expect("8 bytes"));
        SipHasher24 {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: 0,
            ntail: 0,
            len: 0,
        }
    }

    #[inline]
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13);
        v[1] ^= v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16);
        v[3] ^= v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21);
        v[3] ^= v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17);
        v[1] ^= v[2];
        v[2] = v[2].rotate_left(32);
    }

    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        Self::round(&mut self.v);
        Self::round(&mut self.v);
        self.v[0] ^= m;
    }

    /// Feeds bytes: whole little-endian words straight to the compression,
    /// only the ends byte by byte.
    pub(crate) fn write(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len();
        while self.ntail != 0 {
            let Some((&b, rest)) = bytes.split_first() else {
                return;
            };
            self.push_byte(b);
            bytes = rest;
        }
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.compress(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        // The partial word is empty here: the tail's bytes in one go (at
        // most a 4-, a 2- and a 1-byte load; byte by byte cost a third of
        // a 12-byte message's tag).
        let rest = words.remainder();
        self.tail = le_partial_word(rest);
        self.ntail = rest.len();
    }

    /// Feeds the eight bytes of `m` in little-endian order, as
    /// `write(&m.to_le_bytes())` would: one compression when no partial
    /// word is pending.
    #[inline]
    pub(crate) fn write_word(&mut self, m: u64) {
        if self.ntail == 0 {
            self.len += 8;
            self.compress(m);
        } else {
            self.write(&m.to_le_bytes());
        }
    }

    /// Feeds the low `n` (< 8) bytes of `v` in little-endian order, as
    /// `write(&v.to_le_bytes()[..n])` would; `v`'s other bytes must be
    /// zero. When no partial word is pending they become it, for
    /// [`SipHasher24::finish`] to take with the length.
    #[inline]
    pub(crate) fn write_partial(&mut self, v: u64, n: usize) {
        debug_assert!(n < 8 && v >> (8 * n) == 0, "{n} bytes of {v:#x}");
        if self.ntail == 0 {
            self.len += n;
            self.tail = v;
            self.ntail = n;
        } else {
            self.write(&v.to_le_bytes()[..n]);
        }
    }

    /// Adds one byte to the partial word, compressing it once full.
    #[inline]
    fn push_byte(&mut self, b: u8) {
        self.tail |= u64::from(b) << (8 * self.ntail);
        self.ntail += 1;
        if self.ntail == 8 {
            let m = self.tail;
            self.compress(m);
            self.tail = 0;
            self.ntail = 0;
        }
    }

    /// Finishes and returns the 64-bit tag.
    pub(crate) fn finish(mut self) -> u64 {
        let b = ((self.len as u64 & 0xff) << 56) | self.tail;
        self.compress(b);
        self.v[2] ^= 0xff;
        for _ in 0..4 {
            Self::round(&mut self.v);
        }
        self.v[0] ^ self.v[1] ^ self.v[2] ^ self.v[3]
    }
}

/// The little-endian value of fewer than eight bytes (the high bytes
/// zero).
#[inline]
fn le_partial_word(b: &[u8]) -> u64 {
    debug_assert!(b.len() < 8);
    let (mut v, mut i) = (0u64, 0);
    if let Some(w) = b.first_chunk::<4>() {
        v = u64::from(u32::from_le_bytes(*w));
        i = 4;
    }
    if let Some(w) = b[i..].first_chunk::<2>() {
        v |= u64::from(u16::from_le_bytes(*w)) << (8 * i);
        i += 2;
    }
    if let Some(&x) = b.get(i) {
        v |= u64::from(x) << (8 * i);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> [u8; 16] {
        core::array::from_fn(|i| i as u8)
    }

    #[test]
    fn siphash24_reference_vectors() {
        // From the SipHash paper's reference implementation (vectors.h):
        // key = 00..0f, message = 00..(n-1).
        let expect: [(usize, u64); 3] = [
            (0, 0x726f_db47_dd0e_0e31),
            (1, 0x74f8_39c5_93dc_67fd),
            (15, 0xa129_ca61_49be_45e5),
        ];
        for (n, want) in expect {
            let msg: Vec<u8> = (0..n as u8).collect();
            let mut h = SipHasher24::new(&key());
            h.write(&msg);
            assert_eq!(h.finish(), want, "len {n}");
        }
        // Split writes give the same result.
        let msg: Vec<u8> = (0..15u8).collect();
        let mut h = SipHasher24::new(&key());
        h.write(&msg[..3]);
        h.write(&msg[3..]);
        assert_eq!(h.finish(), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn any_split_of_a_message_gives_the_one_write_tag() {
        let msg: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        for n in 0..=msg.len() {
            let mut whole = SipHasher24::new(&key());
            whole.write(&msg[..n]);
            let whole = whole.finish();
            for a in 0..=n {
                for b in a..=n {
                    let mut h = SipHasher24::new(&key());
                    h.write(&msg[..a]);
                    h.write(&msg[a..b]);
                    h.write(&msg[b..n]);
                    assert_eq!(h.finish(), whole, "len {n}, splits at {a} and {b}");
                }
            }
        }
    }

    /// Words and partial words give the tag of their little-endian bytes,
    /// whatever was written before them.
    #[test]
    fn words_are_their_little_endian_bytes() {
        let words = [
            0x0123_4567_89ab_cdef_u64,
            0xfeed_f00d,
            0x1122_3344_5566_7788,
        ];
        for before in 0..9usize {
            for n in 0..8usize {
                let prefix: Vec<u8> = (0..before as u8).collect();
                let part = words[1] & ((1u64 << (8 * n)) - 1);
                let mut bytes = prefix.clone();
                bytes.extend_from_slice(&words[0].to_le_bytes());
                bytes.extend_from_slice(&words[2].to_le_bytes());
                bytes.extend_from_slice(&part.to_le_bytes()[..n]);
                let mut want = SipHasher24::new(&key());
                want.write(&bytes);
                let mut h = SipHasher24::new(&key());
                h.write(&prefix);
                h.write_word(words[0]);
                h.write_word(words[2]);
                h.write_partial(part, n);
                assert_eq!(
                    h.finish(),
                    want.finish(),
                    "{before} bytes before, {n} after"
                );
            }
        }
    }

    /// Every length from 0 to 64 against the standard library's own
    /// SipHash-2-4 (deprecated as a public hasher, kept as a reference):
    /// an independent implementation, so that a wrong partial word shows.
    #[test]
    #[allow(deprecated)]
    fn every_length_matches_std_siphasher() {
        use std::hash::Hasher;
        let msg: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(151) ^ 0x5a).collect();
        for k in [key(), [0xa7; 16], core::array::from_fn(|i| (i * 29) as u8)] {
            let k0 = u64::from_le_bytes(k[..8].try_into().unwrap());
            let k1 = u64::from_le_bytes(k[8..].try_into().unwrap());
            for n in 0..=msg.len() {
                let mut reference = std::hash::SipHasher::new_with_keys(k0, k1);
                reference.write(&msg[..n]);
                let mut h = SipHasher24::new(&k);
                h.write(&msg[..n]);
                assert_eq!(h.finish(), reference.finish(), "len {n}");
            }
        }
    }
}
