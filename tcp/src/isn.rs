//! Initial sequence numbers per RFC 6528 §3:
//! `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where
//! `M` is a timer ticking every 4 microseconds and `F` a keyed hash
//! (SipHash-2-4 here, keyed by a caller-supplied secret).
//!
//! The same secret keys the stack's other hashes, each under a key of its
//! own ([`derive_key`]): SYN cookies, and the keyed hash of a destination
//! that active opens pick their local port by ([`port_hash`], RFC 6056).

use crate::flow_key::FlowKey;
use crate::seq::SeqNumber;
use crate::siphash::SipHasher24;
use crate::time::Instant;
use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};

/// The label [`port_hash`]'s key is derived under.
const PORT_KEY_LABEL: &[u8] = b"flowlane rfc6056 port key";

/// A 16-byte key for one purpose, derived from the stack's `secret` under
/// `label`: two SipHash-2-4 tags keyed by the secret, of the label and a
/// byte (0, then 1). SipHash is a PRF, so a derived key tells nothing of
/// the secret, of the ISNs, or of the key of another label.
pub(crate) fn derive_key(secret: &[u8; 16], label: &[u8]) -> [u8; 16] {
    let mut key = [0; 16];
    for (i, half) in key.chunks_mut(8).enumerate() {
        let mut h = SipHasher24::new(secret);
        h.write(label);
        h.write(&[i as u8]);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    key
}

/// The keyed hash of a destination that an active open picks its local
/// port by: RFC 6056 §3.3.4's `F(local_addr, remote_addr, remote_port,
/// secret_key)`, SipHash-2-4 under a key derived from `secret`
/// ([`derive_key`]), over the tuple with our port 0. Not guessable without
/// the secret, so that an off-path attacker cannot predict the ports of a
/// host's connections (RFC 6056 §1, §3.3.4), and new with every secret, so
/// that a restarted service does not reuse the last run's 4-tuples.
pub(crate) fn port_hash(secret: &[u8; 16], local: IpAddr, remote: SocketAddr) -> u64 {
    let mut h = SipHasher24::new(&derive_key(secret, PORT_KEY_LABEL));
    FlowKey::new(local, 0, remote.ip(), remote.port()).prf_into(&mut h);
    h.finish()
}

/// Generates RFC 6528 initial sequence numbers and RFC 7323 §5.4
/// per-connection timestamp offsets from a secret.
#[derive(Clone)]
pub(crate) struct IsnGenerator {
    /// SipHash-2-4 keyed by the secret, before any message.
    keyed: SipHasher24,
    /// The last `M` handed out, in 4 µs ticks (64 bits: compared as
    /// numbers, it never wraps): each ISN takes a later one, even within
    /// one tick (see [`IsnGenerator::isn_and_ts_offset`]).
    last_m: Cell<u64>,
}

impl IsnGenerator {
    /// A generator keyed by `secret` (should be random per boot/process).
    pub(crate) fn new(secret: [u8; 16]) -> Self {
        IsnGenerator {
            keyed: SipHasher24::new(&secret),
            last_m: Cell::new(0),
        }
    }

    /// One SipHash-2-4 tag of the tuple ([`FlowKey::prf_into`]: 12 bytes
    /// for IPv4, 37 for IPv6, fed a word at a time).
    fn hash_tuple(&self, t: &FlowKey) -> u64 {
        let mut h = self.keyed.clone();
        t.prf_into(&mut h);
        h.finish()
    }

    /// The ISN for a connection at time `now` and its timestamp offset.
    /// Both come from one tag: `F` of RFC 6528 §3 is its low half and the
    /// RFC 7323 §5.4 offset its high half, two independent outputs of the
    /// keyed PRF (one reveals nothing about the other). `M` ticks every
    /// 4 µs, and moves on by one at least from one ISN to the next: a
    /// connection opened again on the same tuple in the same tick (an
    /// application that aborts and reconnects from the same port in one
    /// pass, its RST lost) must not reuse the old ISS. With the same one,
    /// the peer's old connection answers the SYN with a challenge ACK
    /// (RFC 5961 §4.2) that acknowledges exactly ISS + 1, which SYN-SENT
    /// takes as acceptable and drops (RFC 9293 §3.10.7.3), instead of
    /// resetting the old connection with it: neither side moves until
    /// one of them times out.
    /// `M` is kept in 64 bits and only its low 32 go into the ISN: a
    /// 32-bit comparison with the last one took a clock 2^31 ticks (2.4
    /// hours) ahead of it for one behind, after a stack had opened nothing
    /// that long, and `M` then crept by one an ISN for hours instead of
    /// following the clock (RFC 6528 §3, RFC 9293 §3.4.1).
    pub(crate) fn isn_and_ts_offset(&self, t: &FlowKey, now: Instant) -> (SeqNumber, u32) {
        let tag = self.hash_tuple(t);
        let clock = now.as_nanos() / 4_000;
        let m = clock.max(self.last_m.get() + 1);
        self.last_m.set(m);
        (
            SeqNumber((m as u32).wrapping_add(tag as u32)),
            (tag >> 32) as u32,
        )
    }

    /// A per-connection random offset for TSval (RFC 7323 §5.4, RFC 7323
    /// Appendix: avoids leaking a global clock across connections); the
    /// one [`IsnGenerator::isn_and_ts_offset`] gives.
    pub(crate) fn ts_offset(&self, t: &FlowKey) -> u32 {
        (self.hash_tuple(t) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FourTuple;
    use std::net::SocketAddr;

    fn key() -> [u8; 16] {
        core::array::from_fn(|i| i as u8)
    }

    #[test]
    fn isn_depends_on_tuple_secret_and_time() {
        let mut t = FourTuple {
            local: "10.0.0.1:80".parse::<SocketAddr>().unwrap(),
            remote: "10.0.0.2:40000".parse::<SocketAddr>().unwrap(),
        };
        let k = FlowKey::of(&t);
        t.remote.set_port(40001);
        let (t, t2) = (k, FlowKey::of(&t));
        let g = IsnGenerator::new(key());
        let isn = |g: &IsnGenerator, t: &FlowKey, at| g.isn_and_ts_offset(t, at).0;
        let at = Instant::from_millis(5);
        let a = isn(&g, &t, at);
        assert_eq!(a, isn(&IsnGenerator::new(key()), &t, at), "deterministic");
        assert_ne!(a, isn(&g, &t2, at));
        assert_ne!(a, isn(&IsnGenerator::new([7; 16]), &t, at));
        // 4 µs clock: 1 ms later the ISN moved forward by 250.
        assert_eq!(isn(&g, &t, Instant::from_millis(6)) - a, 250);
        // Within one tick, the same tuple never gets the same ISN twice.
        let again = isn(&g, &t, Instant::from_millis(6));
        assert_eq!(again - a, 251, "one tick on at least");
        assert_ne!(g.ts_offset(&t), g.ts_offset(&t2));
        assert_eq!(
            g.ts_offset(&t),
            g.isn_and_ts_offset(&t, Instant::from_millis(9)).1,
            "the timestamp offset does not move with time"
        );
        // After a long time with no ISN (2^31 ticks and more: 2.4 hours),
        // the clock still rules: 30 minutes later, 30 minutes' ticks on.
        let g = IsnGenerator::new(key());
        let first = isn(&g, &t, Instant::from_millis(5));
        let hours = |h: u64| Instant::from_millis(5 + h * 3_600_000 / 2);
        let later = isn(&g, &t, hours(5));
        let half_hour_on = isn(&g, &t, hours(6));
        assert_eq!(
            half_hour_on - later,
            450_000_000,
            "a half hour of 4 µs ticks"
        );
        assert_eq!(
            later.0.wrapping_sub(first.0),
            2_250_000_000,
            "2.5 hours of ticks"
        );
    }

    /// RFC 7323 §5.4: the timestamp offset must not reveal the ISN's
    /// hash (nor the other way round), or a peer that reads one connection's
    /// TSval learns `F` of RFC 6528 §3 and with it the clock `M`: the offset
    /// is not `F`, for several tuples of both families.
    #[test]
    fn the_timestamp_offset_is_not_the_isn_hash() {
        let g = IsnGenerator::new(key());
        for (local, remote) in [
            ("10.0.0.1:80", "10.0.0.2:40000"),
            ("10.0.0.1:80", "10.0.0.2:40001"),
            ("10.0.0.1:443", "10.0.0.3:5000"),
            ("192.0.2.1:1", "198.51.100.7:65535"),
            ("[fd00::1]:80", "[fd00::2]:40000"),
            ("[fd00::1]:8080", "[2001:db8::9]:1234"),
        ] {
            let t = FlowKey::of(&FourTuple {
                local: local.parse().unwrap(),
                remote: remote.parse().unwrap(),
            });
            // A fresh generator's first ISN at time zero takes M = 1 (one
            // tick past the "last" 0): ISN - 1 is F.
            let (isn, offset) = IsnGenerator::new(key()).isn_and_ts_offset(&t, Instant::ZERO);
            let f = isn.0.wrapping_sub(1);
            assert_ne!(offset, f, "{local} {remote}");
            assert_ne!(g.ts_offset(&t), f, "{local} {remote}");
        }
    }

    #[test]
    fn derived_keys_differ_by_label_and_secret() {
        let a = derive_key(&key(), b"one");
        assert_eq!(a, derive_key(&key(), b"one"), "deterministic");
        assert_ne!(a, derive_key(&key(), b"two"));
        assert_ne!(a, derive_key(&[7; 16], b"one"));
        assert_ne!(a, key(), "not the secret");
    }

    /// RFC 6056 §3.3.4's F: a function of the destination and the secret
    /// only (our port is not an input), new with another secret.
    #[test]
    fn port_hash_depends_on_destination_and_secret() {
        let local: IpAddr = "10.0.0.1".parse().unwrap();
        let remote: SocketAddr = "10.0.0.2:443".parse().unwrap();
        let h = port_hash(&key(), local, remote);
        assert_eq!(h, port_hash(&key(), local, remote));
        assert_ne!(h, port_hash(&[7; 16], local, remote));
        assert_ne!(h, port_hash(&key(), local, "10.0.0.2:444".parse().unwrap()));
        assert_ne!(h, port_hash(&key(), local, "10.0.0.3:443".parse().unwrap()));
        assert_ne!(h, port_hash(&key(), "10.0.0.9".parse().unwrap(), remote));
        let v6 = port_hash(
            &key(),
            "fd00::1".parse().unwrap(),
            "[fd00::2]:443".parse().unwrap(),
        );
        assert_ne!(h, v6);
    }
}
