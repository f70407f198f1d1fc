//! Initial sequence numbers per RFC 6528 §3:
//! `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where
//! `M` is a timer ticking every 4 microseconds and `F` a keyed hash
//! (SipHash-2-4 here, keyed by a caller-supplied secret).

use crate::seq::SeqNumber;
use crate::siphash::SipHasher24;
use crate::time::Instant;
use crate::FourTuple;
use std::net::IpAddr;

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

#[inline]
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
