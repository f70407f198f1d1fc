//! Initial sequence numbers per RFC 6528 §3:
//! `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where
//! `M` is a timer ticking every 4 microseconds and `F` a keyed hash
//! (SipHash-2-4 here, keyed by a caller-supplied secret).

use crate::flow_key::FlowKey;
use crate::seq::SeqNumber;
use crate::siphash::SipHasher24;
use crate::time::Instant;
use std::cell::Cell;

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
        // The two halves of one tag are not the same value.
        assert_ne!(g.ts_offset(&t), g.isn_and_ts_offset(&t, Instant::ZERO).0 .0);
    }
}
