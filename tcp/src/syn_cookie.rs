//! SYN cookies (RFC 4987 §3.6): when a listener's half-open table is full,
//! its SYN-ACK carries the connection's state in its own sequence number
//! instead of the stack keeping it, so that a flood of spoofed SYNs costs
//! no memory and legitimate clients still connect.
//!
//! The cookie (our ISS) is, most significant bits first:
//!
//! ```text
//! | 5 bits: period counter | 3 bits: MSS index | 24 bits: MAC |
//! ```
//!
//! The period counter is the caller's clock in 64-second steps (mod 32);
//! the MAC is SipHash-2-4, keyed by a key derived from the stack's secret,
//! over the four-tuple, the client's ISN, the full period and the MSS
//! index. A cookie is accepted in its period and the next (64 to 128 s),
//! so an off-path attacker guessing one succeeds with probability 2^-24
//! per ACK. The window scale the client offered, whether it permits
//! SACK and whether ECN was agreed (RFC 3168 §6.1.1) do not fit: as Linux
//! does, they ride in the low 6 bits of our SYN-ACK's TSval, which the
//! client echoes in every TSecr; a client without timestamps gets a
//! SYN-ACK that offers none of them.

use crate::flow_key::FlowKey;
use crate::isn::derive_key;
use crate::seq::SeqNumber;
use crate::siphash::SipHasher24;
use crate::time::{Duration, Instant};

/// MSS values a cookie can carry: the largest not above the client's is
/// chosen (Linux's IPv4 table, with room for jumbo frames). The first is
/// the least MSS the stack takes from any SYN (64): a client announcing
/// less than 536 must never get larger segments than it said (RFC 9293
/// §3.7.1), so it gets that while the listener answers with cookies (a
/// client of 1452, PPPoE, gets 1440).
const MSS_TABLE: [u16; 8] = [64, 536, 1200, 1300, 1400, 1440, 1460, 8960];
/// Seconds per period of the cookie's counter.
const PERIOD_SECS: u64 = 64;
/// How long after sending a cookie a listener checks ACKs for one: the
/// longest a cookie stays valid (its period and the next).
pub(crate) const CHECKED_FOR: Duration = Duration::from_secs(2 * PERIOD_SECS);
/// Low bits of the SYN-ACK's TSval that carry the client's options.
pub(crate) const TS_OPTION_BITS: u32 = 6;
const TS_MASK: u32 = (1 << TS_OPTION_BITS) - 1;
/// The window-scale nibble meaning "not offered".
const NO_WSCALE: u32 = 0xf;
/// The TSval bit that says the client permits SACK.
const SACK_BIT: u32 = 1 << 4;
/// The TSval bit that says ECN was agreed (Linux `TS_OPT_ECN`).
const ECN_BIT: u32 = 1 << 5;

/// Makes and checks a stack's SYN cookies.
pub(crate) struct CookieJar {
    key: [u8; 16],
}

/// The key stays out of debug output (whoever knows it forges cookies).
impl std::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CookieJar").finish_non_exhaustive()
    }
}

/// The options a cookie ACK brings back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CookieOptions {
    /// The MSS (from the cookie's index).
    pub(crate) mss: u16,
    /// The client's window scale, if it offered one (from TSecr).
    pub(crate) window_scale: Option<u8>,
    /// The client permits SACK (from TSecr).
    pub(crate) sack_permitted: bool,
    /// ECN was agreed: the client's SYN asked for it and our SYN-ACK
    /// answered with ECE (from TSecr).
    pub(crate) ecn: bool,
}

impl CookieJar {
    /// A jar keyed by a key derived from the stack's `secret`.
    pub(crate) fn new(secret: &[u8; 16]) -> Self {
        CookieJar {
            key: derive_key(secret, b"flowlane syn cookie key"),
        }
    }

    fn period(now: Instant) -> u64 {
        now.as_millis() / 1000 / PERIOD_SECS
    }

    fn mac(&self, tuple: &FlowKey, client_isn: SeqNumber, period: u64, mss_index: u32) -> u32 {
        let mut h = SipHasher24::new(&self.key);
        tuple.prf_into(&mut h);
        h.write(&client_isn.0.to_be_bytes());
        h.write(&period.to_le_bytes());
        h.write(&[mss_index as u8]);
        (h.finish() & 0xff_ffff) as u32
    }

    /// The ISS of a cookie SYN-ACK answering a SYN from `tuple.remote` with
    /// sequence number `client_isn` and MSS option `client_mss`.
    pub(crate) fn make(
        &self,
        tuple: &FlowKey,
        client_isn: SeqNumber,
        client_mss: u16,
        now: Instant,
    ) -> SeqNumber {
        let index = MSS_TABLE
            .iter()
            .rposition(|&m| m <= client_mss)
            .unwrap_or(0) as u32;
        let period = Self::period(now);
        let mac = self.mac(tuple, client_isn, period, index);
        SeqNumber(((period as u32 & 0x1f) << 27) | (index << 24) | mac)
    }

    /// Checks the cookie an ACK returns (`ack` − 1) for `tuple`, the
    /// client's ISN being `seq` − 1; returns the MSS it carries if it is
    /// genuine and at most one period old.
    pub(crate) fn check(
        &self,
        tuple: &FlowKey,
        seq: SeqNumber,
        ack: SeqNumber,
        now: Instant,
    ) -> Option<u16> {
        let cookie = (ack - 1usize).0;
        let client_isn = seq - 1usize;
        let index = (cookie >> 24) & 0x7;
        let now_period = Self::period(now);
        (0..=1u64).find_map(|age| {
            let period = now_period.checked_sub(age)?;
            let genuine = (cookie >> 27) == (period as u32 & 0x1f)
                && cookie & 0xff_ffff == self.mac(tuple, client_isn, period, index);
            genuine.then_some(MSS_TABLE[index as usize])
        })
    }
}

/// Our SYN-ACK's TSval `tsval` with the client's window scale (`None`: not
/// offered), SACK permission and ECN agreement in its low bits, never later
/// than `tsval` (so the connection's later TSvals still only grow).
pub(crate) fn encode_options(tsval: u32, window_scale: Option<u8>, sack: bool, ecn: bool) -> u32 {
    let ws = window_scale.map_or(NO_WSCALE, |w| u32::from(w.min(14)));
    let bits = ws | if sack { SACK_BIT } else { 0 } | if ecn { ECN_BIT } else { 0 };
    let ts = (tsval & !TS_MASK) | bits;
    if (ts.wrapping_sub(tsval) as i32) > 0 {
        ts.wrapping_sub(TS_MASK + 1)
    } else {
        ts
    }
}

/// The options [`encode_options`] put in a TSval, read from the client's
/// echo of it (`tsecr`) and the MSS the cookie carried.
pub(crate) fn decode_options(tsecr: Option<u32>, mss: u16) -> CookieOptions {
    match tsecr {
        Some(ts) => {
            let ws = ts & NO_WSCALE;
            CookieOptions {
                mss,
                window_scale: (ws != NO_WSCALE).then_some(ws as u8),
                sack_permitted: ts & SACK_BIT != 0,
                ecn: ts & ECN_BIT != 0,
            }
        }
        None => CookieOptions {
            mss,
            window_scale: None,
            sack_permitted: false,
            ecn: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FourTuple;
    use std::net::SocketAddr;

    fn tuple(port: u16) -> FlowKey {
        FlowKey::of(&FourTuple {
            local: "10.0.0.1:80".parse::<SocketAddr>().unwrap(),
            remote: SocketAddr::new("10.0.0.2".parse().unwrap(), port),
        })
    }

    /// Whoever reads the key forges cookies: a stack's debug output (a
    /// log line, a panic message) must not carry it.
    #[test]
    fn the_key_stays_out_of_debug_output() {
        let jar = CookieJar::new(&[3; 16]);
        let s = format!("{jar:?}");
        let k = jar.key;
        assert!(!s.contains(&format!("{}, {}, {}", k[0], k[1], k[2])), "{s}");
        assert!(!s.contains("key"), "{s}");
    }

    #[test]
    fn a_cookie_checks_for_its_tuple_and_isn_within_two_periods() {
        let jar = CookieJar::new(&[3; 16]);
        let t = tuple(40_000);
        let isn = SeqNumber(0xdead_beef);
        // The start of a period: the cookie then lives two full periods.
        let at = Instant::from_millis(20 * 64_000);
        let c = jar.make(&t, isn, 1460, at);
        let (seq, ack) = (isn + 1usize, c + 1usize);
        assert_eq!(jar.check(&t, seq, ack, at), Some(1460));
        assert_eq!(
            jar.check(&t, seq, ack, Instant::from_millis(20 * 64_000 + 120_000)),
            Some(1460)
        );
        assert_eq!(
            jar.check(&t, seq, ack, Instant::from_millis(20 * 64_000 + 130_000)),
            None,
            "too old"
        );
        assert_eq!(
            jar.check(&tuple(40_001), seq, ack, at),
            None,
            "another tuple"
        );
        assert_eq!(jar.check(&t, seq + 1usize, ack, at), None, "another ISN");
        assert_eq!(jar.check(&t, seq, ack + 1usize, at), None, "another cookie");
        let other = CookieJar::new(&[4; 16]);
        assert_eq!(other.check(&t, seq, ack, at), None, "another secret");
        // The MSS index is authenticated too: flipping it fails.
        let flipped = SeqNumber(c.0 ^ (1 << 24)) + 1usize;
        assert_eq!(jar.check(&t, seq, flipped, at), None);
    }

    #[test]
    fn the_mss_is_rounded_down_to_the_table() {
        let jar = CookieJar::new(&[3; 16]);
        let t = tuple(1);
        let at = Instant::from_millis(5);
        for (offered, carried) in [
            (1460, 1460),
            (1459, 1440),
            (9000, 8960),
            // Never more than the client said (RFC 9293 §3.7.1).
            (100, 64),
            (535, 64),
            (536, 536),
            (64, 64),
        ] {
            let c = jar.make(&t, SeqNumber(7), offered, at);
            assert_eq!(
                jar.check(&t, SeqNumber(8), c + 1usize, at),
                Some(carried),
                "{offered}"
            );
        }
    }

    #[test]
    fn random_acks_almost_never_check() {
        let jar = CookieJar::new(&[9; 16]);
        let t = tuple(5);
        let at = Instant::from_millis(10_000);
        let mut x = 0x1234_5678u32;
        let hits = (0..200_000)
            .filter(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                jar.check(&t, SeqNumber(99), SeqNumber(x), at).is_some()
            })
            .count();
        // 2 periods x 2^-24 per guess: about 0.02 expected.
        assert!(hits <= 1, "{hits}");
    }

    #[test]
    fn options_ride_in_the_tsval_without_moving_it_forward() {
        for tsval in [0u32, 1, 63, 64, 1_000_003, u32::MAX, u32::MAX - 70] {
            for ws in [None, Some(0), Some(7), Some(14)] {
                for (sack, ecn) in [(false, false), (true, false), (false, true), (true, true)] {
                    let ts = encode_options(tsval, ws, sack, ecn);
                    assert!((tsval.wrapping_sub(ts) as i32) >= 0, "{tsval} -> {ts}");
                    assert!(tsval.wrapping_sub(ts) < 64);
                    let o = decode_options(Some(ts), 1460);
                    assert_eq!((o.window_scale, o.sack_permitted, o.ecn), (ws, sack, ecn));
                }
            }
        }
        let none = decode_options(None, 536);
        assert_eq!(
            (none.mss, none.window_scale, none.sack_permitted, none.ecn),
            (536, None, false, false)
        );
    }
}
