//! How many ACKs a stack sends to segments it refuses (RFC 5961 §7).
//!
//! A challenge ACK (RFC 5961 §3.2 in-window RST, §4.2 SYN, §5.2 ACK out of
//! range) tells an off-path attacker something whenever it is sent or not:
//! with a fixed global limit, counting the challenge ACKs a victim's
//! connection elicits revealed whether a guessed tuple was in use
//! (CVE-2016-5696). The stack's budget per second is therefore drawn anew
//! each second, uniformly from `limit / 2 ..= limit / 2 + limit - 1` (mean:
//! `limit`), as Linux has done since that CVE; the draw is a keyed hash of
//! the second, so the stack needs no random source and no clock of its own.
//!
//! A connection also answers out-of-window segments that carry no data
//! (challenges included) at most once per interval (Linux
//! `tcp_invalid_ratelimit`, 500 ms), so that two endpoints that disagree
//! about their windows cannot feed each other ACKs without end (an ACK
//! loop), and a flood at one tuple costs one ACK per interval.

use crate::siphash::SipHasher24;
use crate::time::{Duration, Instant};

/// The stack-wide budget of challenge ACKs (RFC 5961 §7).
pub(crate) struct ChallengeBudget {
    key: [u8; 16],
    /// Average challenge ACKs per second; `u32::MAX`: no limit.
    limit: u32,
    /// The second the budget was drawn for (`u64::MAX`: none yet).
    second: u64,
    /// Challenge ACKs left in it.
    left: u32,
}

/// The key stays out of debug output: the budgets it draws are what an
/// off-path attacker must not predict.
impl std::fmt::Debug for ChallengeBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChallengeBudget")
            .field("key", &"<redacted>")
            .field("limit", &self.limit)
            .field("second", &self.second)
            .field("left", &self.left)
            .finish()
    }
}

impl ChallengeBudget {
    /// A budget of `limit` challenge ACKs per second on average, drawn with
    /// a key derived from the stack's `secret`.
    pub(crate) fn new(secret: &[u8; 16], limit: u32) -> Self {
        ChallengeBudget {
            key: crate::isn::derive_key(secret, b"flowlane rfc5961 challenge budget"),
            limit,
            second: u64::MAX,
            left: 0,
        }
    }

    /// The budget of second `s`: `limit / 2 + H(s) mod limit`.
    fn draw(&self, s: u64) -> u32 {
        if self.limit == u32::MAX {
            return u32::MAX;
        }
        if self.limit == 0 {
            return 0;
        }
        let mut h = SipHasher24::new(&self.key);
        h.write(&s.to_le_bytes());
        (self.limit / 2).saturating_add((h.finish() % u64::from(self.limit)) as u32)
    }

    /// Takes one challenge ACK from the budget of the second `now` falls
    /// in; false if that budget is spent.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        let s = now.as_nanos() / 1_000_000_000;
        if s != self.second {
            self.second = s;
            self.left = self.draw(s);
        }
        if self.left == 0 {
            return false;
        }
        if self.limit != u32::MAX {
            self.left -= 1;
        }
        true
    }
}

/// When a connection (or TIME-WAIT record) last answered an out-of-window
/// segment: milliseconds of the caller's clock, truncated to 16 bits so that
/// it fits the padding of a TIME-WAIT record; 0 for never (a time whose
/// truncation is 0 is stored as 1). The clock wraps every 65.5 s: an answer
/// due a multiple of that after the last may be skipped once, which costs
/// the peer one retransmission at worst.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OowAckTime(u16);

impl OowAckTime {
    /// Whether another answer may go out at `now` (at least `interval`,
    /// at most 65 s, after the last, or none yet); if so, `now` becomes
    /// the last.
    pub(crate) fn take(&mut self, now: Instant, interval: Duration) -> bool {
        let ms = (now.as_millis() as u16).max(1);
        let interval = interval.as_millis().min(u64::from(u16::MAX));
        if self.0 != 0 && u64::from(ms.wrapping_sub(self.0)) < interval {
            return false;
        }
        self.0 = ms;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget_of_second(b: &mut ChallengeBudget, s: u64) -> u32 {
        let at = Instant::from_millis(s * 1000 + 10);
        let mut n = 0;
        while b.take(at) {
            n += 1;
            assert!(n <= 10_000, "unbounded");
        }
        n
    }

    #[test]
    fn each_second_draws_a_budget_around_the_limit() {
        let mut b = ChallengeBudget::new(&[9; 16], 1000);
        let budgets: Vec<u32> = (0..200).map(|s| budget_of_second(&mut b, s)).collect();
        assert!(
            budgets.iter().all(|&n| (500..1500).contains(&n)),
            "{budgets:?}"
        );
        let mean = budgets.iter().map(|&n| f64::from(n)).sum::<f64>() / 200.0;
        assert!((900.0..1100.0).contains(&mean), "mean {mean}");
        // Drawn, not fixed: many different values.
        let mut distinct = budgets;
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 150, "{} distinct", distinct.len());
        // Within a second, a spent budget stays spent.
        assert!(!b.take(Instant::from_millis(199 * 1000 + 999)));
    }

    #[test]
    fn the_draw_depends_on_the_secret() {
        let mut a = ChallengeBudget::new(&[1; 16], 1000);
        let mut b = ChallengeBudget::new(&[2; 16], 1000);
        let differ = (0..20)
            .filter(|&s| budget_of_second(&mut a, s) != budget_of_second(&mut b, s))
            .count();
        assert!(differ >= 18, "{differ} of 20 seconds differ");
    }

    #[test]
    fn no_limit_and_zero() {
        let mut b = ChallengeBudget::new(&[1; 16], u32::MAX);
        assert!((0..100_000).all(|_| b.take(Instant::from_millis(5))));
        let mut z = ChallengeBudget::new(&[1; 16], 0);
        assert!(!z.take(Instant::from_millis(5)));
    }

    #[test]
    fn out_of_window_answers_are_spaced() {
        let iv = Duration::from_millis(500);
        let mut t = OowAckTime::default();
        assert!(t.take(Instant::from_millis(0), iv), "the first, even at 0");
        assert!(!t.take(Instant::from_millis(499), iv));
        // (0 is stored as 1 ms: "never" is 0.)
        assert!(t.take(Instant::from_millis(501), iv));
        assert!(!t.take(Instant::from_millis(1000), iv));
        assert!(t.take(Instant::from_millis(1001), iv));
        // Across the 16-bit wrap of the millisecond clock.
        let mut w = OowAckTime::default();
        let near = (1u64 << 40) - 100;
        assert!(w.take(Instant::from_millis(near), iv));
        assert!(!w.take(Instant::from_millis(near + 300), iv));
        assert!(w.take(Instant::from_millis(near + 500), iv));
    }
}
