//! Initial sequence numbers per RFC 6528 §3:
//! `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where
//! `M` is a timer ticking every 4 microseconds and `F` a keyed hash
//! (SipHash-2-4 here, keyed by a caller-supplied secret).

use crate::seq::SeqNumber;
use crate::time::Instant;
use crate::FourTuple;
use std::net::IpAddr;

/// SipHash-2-4 (Aumasson & Bernstein), implemented without dependencies.
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

    /// Feeds bytes.
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.tail |= (b as u64) << (8 * self.ntail);
            self.ntail += 1;
            self.len += 1;
            if self.ntail == 8 {
                let m = self.tail;
                self.compress(m);
                self.tail = 0;
                self.ntail = 0;
            }
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

/// Generates RFC 6528 initial sequence numbers and RFC 7323 §5.4
/// per-connection timestamp offsets from a secret.
#[derive(Clone)]
pub(crate) struct IsnGenerator {
    secret: [u8; 16],
}

impl IsnGenerator {
    /// A generator keyed by `secret` (should be random per boot/process).
    pub(crate) fn new(secret: [u8; 16]) -> Self {
        IsnGenerator { secret }
    }

    fn hash_tuple(&self, domain: u8, t: &FourTuple) -> u64 {
        let mut h = SipHasher24::new(&self.secret);
        h.write(&[domain]);
        write_ip(&mut h, t.local.ip());
        h.write(&t.local.port().to_be_bytes());
        write_ip(&mut h, t.remote.ip());
        h.write(&t.remote.port().to_be_bytes());
        h.finish()
    }

    /// The ISN for a connection at time `now` (RFC 6528 §3: `M` ticks every
    /// 4 µs).
    pub(crate) fn isn(&self, t: &FourTuple, now: Instant) -> SeqNumber {
        let m = (now.as_nanos() / 4_000) as u32;
        SeqNumber(m.wrapping_add(self.hash_tuple(0, t) as u32))
    }

    /// A per-connection random offset for TSval (RFC 7323 §5.4, RFC 7323
    /// Appendix: avoids leaking a global clock across connections).
    pub(crate) fn ts_offset(&self, t: &FourTuple) -> u32 {
        self.hash_tuple(1, t) as u32
    }
}

fn write_ip(h: &mut SipHasher24, ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => h.write(&a.octets()),
        IpAddr::V6(a) => h.write(&a.octets()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn key() -> [u8; 16] {
        core::array::from_fn(|i| i as u8)
    }

    #[test]
    fn siphash_reference_vectors() {
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
    fn isn_depends_on_tuple_secret_and_time() {
        let t = FourTuple {
            local: "10.0.0.1:80".parse::<SocketAddr>().unwrap(),
            remote: "10.0.0.2:40000".parse::<SocketAddr>().unwrap(),
        };
        let mut t2 = t;
        t2.remote.set_port(40001);
        let g = IsnGenerator::new(key());
        let a = g.isn(&t, Instant::ZERO);
        assert_eq!(a, g.isn(&t, Instant::ZERO), "deterministic");
        assert_ne!(a, g.isn(&t2, Instant::ZERO));
        assert_ne!(a, IsnGenerator::new([7; 16]).isn(&t, Instant::ZERO));
        // 4 µs clock: 1 ms later the ISN moved forward by 250.
        assert_eq!(g.isn(&t, Instant::from_millis(1)) - a, 250);
        assert_ne!(g.ts_offset(&t), g.ts_offset(&t2));
    }
}
