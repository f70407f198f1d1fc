//! Retransmission timeout computation (RFC 6298).

use crate::time::{Duration, Instant};

/// SRTT/RTTVAR/RTO state with exponential backoff.
///
/// Karn's rule (RFC 6298 §3) is applied by the caller: only samples from
/// segments that were not retransmitted (or timestamp echoes, RFC 7323 §4)
/// are fed to [`RttEstimator::on_sample`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RttEstimator {
    /// Smoothed RTT, once `sampled`. Not an `Option`: an `Option<Duration>`
    /// has the largest niche of a connection's fields, and the slot's
    /// `Option<Connection>` would keep its tag here, outside the cache
    /// lines a segment reads (see `Connection`'s layout).
    srtt: Duration,
    rttvar: Duration,
    /// RTO before backoff.
    base_rto: Duration,
    /// Number of consecutive backoffs (RFC 6298 §5.5).
    backoff: u8,
    /// When the timer that expired first of the consecutive timeouts was
    /// started, in wrapping milliseconds ([`RttEstimator::backoff_start`]):
    /// in the struct's padding.
    backoff_from_ms: u32,
    /// Whether a sample arrived (`srtt` is set).
    sampled: bool,
    min_rto: Duration,
    max_rto: Duration,
}

/// Clock granularity `G` of RFC 6298 §2. Our clock is nanoseconds, so the
/// granularity term only keeps RTO strictly above SRTT.
const GRANULARITY: Duration = Duration::from_millis(1);

/// RFC 6298 §5.7: the RTO once a handshake needed a retransmission.
const FALLBACK_RTO: Duration = Duration::from_secs(3);

impl RttEstimator {
    /// A fresh estimator: RTO = `initial_rto` (RFC 6298 §2.1 says 1 s),
    /// clamped to `[min_rto, max_rto]`.
    pub(crate) fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator {
            srtt: Duration::ZERO,
            sampled: false,
            rttvar: Duration::ZERO,
            base_rto: initial_rto.max(min_rto).min(max_rto),
            backoff: 0,
            backoff_from_ms: 0,
            min_rto,
            max_rto,
        }
    }

    /// Feeds an RTT measurement `r` (RFC 6298 §2.2 and §2.3), and clears
    /// the backoff (RFC 6298 §5.7 leaves this to the implementation; a valid
    /// sample proves the path works).
    pub(crate) fn on_sample(&mut self, r: Duration) {
        if self.sampled {
            // RFC 6298 §2.3: beta = 1/4, alpha = 1/8.
            let srtt = self.srtt;
            let delta = srtt.0.abs_diff(r.0);
            self.rttvar = Duration((3 * (self.rttvar.0 / 4)) + delta / 4);
            self.srtt = Duration(srtt.0 - srtt.0 / 8 + r.0 / 8);
        } else {
            // RFC 6298 §2.2
            self.srtt = r;
            self.rttvar = Duration(r.0 / 2);
            self.sampled = true;
        }
        let srtt = self.srtt;
        // RFC 6298 §2.3's K*RTTVAR, at least `G` and at least the minimum
        // RTO: the floor of §2.4 on the variance term, as Linux puts it
        // (`tcp_rto_min` bounds its `rttvar`), not on the sum. Sampled on
        // every ACK (RFC 7323 §4.2 warns of it), RTTVAR decays to nothing
        // on a steady path, where a bulk transfer's ACKs come promptly
        // (every second segment, RFC 5681 §4.2): the sum would then be
        // SRTT + 1 ms, and a lone segment's delayed ACK, RTT plus up to
        // 500 ms later, would time out and collapse the window.
        let k_rttvar = self
            .rttvar
            .saturating_mul(4)
            .max(GRANULARITY)
            .max(self.min_rto);
        // RFC 6298 §2.5 (maximum).
        self.base_rto = (srtt + k_rttvar).min(self.max_rto);
        self.backoff = 0;
    }

    /// The timer expired: double the RTO (RFC 6298 §5.5), up to the maximum.
    pub(crate) fn on_timeout(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// RFC 6298 §5.7: the SYN (or SYN-ACK) was retransmitted, and data
    /// transmission begins. With no RTT sample from the handshake (a
    /// timestamp echo gives one even after a retransmission, RFC 7323
    /// §4), the RTO starts at 3 s, unbacked-off, as Linux does
    /// (`TCP_TIMEOUT_FALLBACK`); a sample keeps what it computed.
    pub(crate) fn on_handshake_retransmitted(&mut self) {
        if !self.sampled {
            self.base_rto = FALLBACK_RTO.max(self.min_rto).min(self.max_rto);
            self.backoff = 0;
        }
    }

    /// RFC 6069 §4 (TCP-LD): an ICMP destination unreachable
    /// about the retransmission at SND.UNA says the path, not congestion,
    /// lost it: one doubling of RFC 6298 §5.5 is undone. False (nothing
    /// changed) when the RTO is not backed off: never below the RTO a
    /// sample gave (Linux's `tcp_ld_RTO_revert` needs `icsk_backoff`).
    pub(crate) fn revert_backoff(&mut self) -> bool {
        if self.backoff == 0 {
            return false;
        }
        self.backoff -= 1;
        true
    }

    /// Notes that the first of a run of consecutive timeouts expired at
    /// `expired` (before [`RttEstimator::on_timeout`]): its timer was
    /// started the current RTO earlier, which
    /// [`RttEstimator::backed_off_for`] counts from.
    pub(crate) fn backoff_start(&mut self, expired: Instant) {
        let started = expired.0.saturating_sub(self.rto().0);
        self.backoff_from_ms = (started / 1_000_000) as u32;
    }

    /// How long ago, at `now`, the timer that expired first of the
    /// consecutive timeouts was started (to the millisecond; runs under
    /// 49 days).
    pub(crate) fn backed_off_for(&self, now: Instant) -> Duration {
        let ms = ((now.0 / 1_000_000) as u32).wrapping_sub(self.backoff_from_ms);
        Duration::from_millis(u64::from(ms))
    }

    /// The time `timeouts` + 1 expiries of a timer doubled after each
    /// (RFC 6298 §5.5, up to the maximum) take from its first start: what
    /// a connection's retransmissions take to run out at `timeouts`
    /// retransmissions when nothing reverts a doubling (Linux's
    /// `tcp_model_timeout`, which measures `tcp_retries2` in time).
    pub(crate) fn backoff_span(&self, timeouts: u8) -> Duration {
        (0..=timeouts).fold(Duration::ZERO, |sum, b| sum + self.rto_at(b))
    }

    /// Current RTO, including backoff.
    pub(crate) fn rto(&self) -> Duration {
        self.rto_at(self.backoff)
    }

    /// The RTO after `backoff` doublings, at most the maximum.
    fn rto_at(&self, backoff: u8) -> Duration {
        let shift = u32::from(backoff.min(32));
        let ns = self.base_rto.0.checked_shl(shift).unwrap_or(u64::MAX);
        if shift > 0 && ns >> shift != self.base_rto.0 {
            return self.max_rto;
        }
        Duration(ns).min(self.max_rto)
    }

    /// Smoothed RTT, if measured.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.sampled.then_some(self.srtt)
    }

    /// RTT variance.
    #[cfg(test)]
    pub(crate) fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// Number of consecutive backoffs since the last valid sample.
    pub(crate) fn backoff(&self) -> u8 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retransmitted_handshake_starts_data_at_three_seconds() {
        let mut e = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
        );
        e.on_timeout();
        assert_eq!(e.rto(), Duration::from_secs(2));
        e.on_handshake_retransmitted();
        assert_eq!(e.rto(), Duration::from_secs(3));
        // With a sample (a timestamp echo), the sample rules.
        let mut e = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
        );
        e.on_timeout();
        e.on_sample(Duration::from_millis(10));
        e.on_handshake_retransmitted();
        assert_eq!(e.rto(), Duration::from_millis(210));
    }

    fn est() -> RttEstimator {
        RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn first_and_second_sample() {
        let mut e = est();
        assert_eq!(e.rto(), Duration::from_secs(1));
        e.on_sample(Duration::from_millis(100));
        assert_eq!(e.srtt(), Some(Duration::from_millis(100)));
        assert_eq!(e.rttvar(), Duration::from_millis(50));
        // 100 + 4*50 = 300ms
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.on_sample(Duration::from_millis(200));
        // RTTVAR = 3/4*50 + 1/4*100 = 62.5; SRTT = 7/8*100 + 1/8*200 = 112.5
        assert_eq!(e.rttvar(), Duration::from_micros(62_500));
        assert_eq!(e.srtt(), Some(Duration::from_micros(112_500)));
        assert_eq!(e.rto(), Duration::from_micros(362_500));
    }

    #[test]
    fn min_max_and_backoff() {
        let mut e = est();
        e.on_sample(Duration::from_millis(1));
        assert_eq!(e.rto(), Duration::from_millis(201), "SRTT + the minimum");
        e.on_timeout();
        assert_eq!(e.rto(), Duration::from_millis(402));
        e.on_timeout();
        assert_eq!(e.rto(), Duration::from_millis(804));
        for _ in 0..100 {
            e.on_timeout();
        }
        assert_eq!(e.rto(), Duration::from_secs(60), "clamped to max");
        e.on_sample(Duration::from_millis(1));
        assert_eq!(e.backoff(), 0);
        assert_eq!(e.rto(), Duration::from_millis(201));
    }

    /// TCP-LD's revert (RFC 6069 §4) undoes one doubling at a time and
    /// never goes below the unbacked-off RTO; the span of a run of
    /// timeouts is the sum of its doubled RTOs, each at most the maximum.
    #[test]
    fn a_revert_undoes_one_doubling_and_the_span_sums_the_doublings() {
        let mut e = est();
        assert!(!e.revert_backoff(), "nothing to undo");
        e.on_timeout();
        e.on_timeout();
        assert_eq!(e.rto(), Duration::from_secs(4));
        assert!(e.revert_backoff());
        assert_eq!(e.rto(), Duration::from_secs(2));
        assert_eq!(e.backoff_span(2), Duration::from_secs(1 + 2 + 4));
        // 1 + 2 + ... + 32, then the maximum, 60 s, twice.
        assert_eq!(e.backoff_span(7), Duration::from_secs(63 + 60 + 60));
        e.backoff_start(Instant::from_millis(10_500));
        assert_eq!(
            e.backed_off_for(Instant::from_millis(20_000)),
            Duration::from_millis(20_000 - 8_500),
            "from the expiry less the RTO it ran for"
        );
    }

    /// The minimum bounds the variance term, not the sum: on a long steady
    /// path RTTVAR decays to nothing, and the RTO must still leave room
    /// for a delayed ACK beyond SRTT.
    #[test]
    fn the_minimum_bounds_the_variance_term() {
        let mut e = est();
        for _ in 0..200 {
            e.on_sample(Duration::from_millis(250));
        }
        assert!(e.rttvar() < Duration::from_millis(1));
        assert_eq!(e.rto(), Duration::from_millis(450));
        // A variance above the minimum rules.
        let mut e = est();
        e.on_sample(Duration::from_millis(100));
        assert_eq!(e.rto(), Duration::from_millis(300));
    }
}
