//! NewReno (RFC 5681 + RFC 6582) with appropriate byte counting (RFC 3465).

use super::{
    deflate_on_partial_ack, initial_window, recovery_exit_window, restart_window, Ack,
    CongestionControl,
};
use crate::time::Duration;

/// NewReno (RFC 5681 + RFC 6582), with appropriate byte counting in
/// congestion avoidance (RFC 5681 §3.1, RFC 3465).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NewReno {
    cwnd: usize,
    ssthresh: usize,
    smss: usize,
    /// Bytes acknowledged since the last cwnd increase in congestion
    /// avoidance.
    bytes_acked: usize,
}

impl NewReno {
    /// A controller for a sender MSS of `smss` bytes.
    pub(crate) fn new(smss: usize) -> Self {
        let smss = smss.max(1);
        NewReno {
            cwnd: initial_window(smss),
            // RFC 5681 §3.1: "arbitrarily high".
            ssthresh: usize::MAX,
            smss,
            bytes_acked: 0,
        }
    }

    /// A controller that carries on from another algorithm's window.
    pub(crate) fn with_window(cwnd: usize, ssthresh: usize, smss: usize) -> Self {
        let smss = smss.max(1);
        NewReno {
            cwnd: cwnd.max(smss),
            ssthresh,
            smss,
            bytes_acked: 0,
        }
    }

    /// The sender MSS.
    pub(crate) fn smss(&self) -> usize {
        self.smss
    }

    fn half_flight(&self, flight_size: usize) -> usize {
        // RFC 5681 §3.1 equation (4).
        (flight_size / 2).max(2 * self.smss)
    }
}

impl CongestionControl for NewReno {
    fn window(&self) -> usize {
        self.cwnd
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn set_mss(&mut self, smss: usize) {
        let smss = smss.max(1);
        if self.cwnd == initial_window(self.smss) {
            self.cwnd = initial_window(smss);
        }
        self.smss = smss;
    }

    fn on_ack(&mut self, ack: &Ack) {
        // RFC 7661 §4.3 (as CUBIC, RFC 9438 §5.8): a window the sender
        // does not use (the application, the send buffer or the peer's
        // window limits it) does not grow; in use is pipeACK >= cwnd / 2,
        // the flight before this ACK as pipeACK. Grown anyway, an
        // application-limited connection's window reaches megabytes it
        // never validated and may send in one burst later.
        if ack.flight.saturating_mul(2) < self.cwnd {
            return;
        }
        let mut rest = ack.bytes_acked;
        if self.cwnd < self.ssthresh {
            // RFC 5681 §3.1 slow start with byte counting (RFC 3465 §2.2):
            // grow by the bytes acknowledged, up to ssthresh. RFC 3465 caps
            // one ACK's credit at L = 2*SMSS; we do not (as Linux does not),
            // because a sans-IO receiver that handles a batch of segments
            // before polling for output sends one stretch ACK per batch, and
            // the cap would make slow start linear. Byte counting already
            // defeats ACK division.
            let inc = rest.min(self.ssthresh - self.cwnd);
            self.cwnd += inc;
            rest -= inc;
        }
        if rest > 0 && self.cwnd >= self.ssthresh {
            // RFC 5681 §3.1 congestion avoidance: one SMSS per cwnd acked.
            self.bytes_acked += rest;
            while self.bytes_acked >= self.cwnd {
                self.bytes_acked -= self.cwnd;
                self.cwnd += self.smss;
            }
        }
    }

    fn on_fast_retransmit(&mut self, flight_size: usize) {
        // RFC 6582 §3.2 step 2 / RFC 5681 §3.2 steps 2-3.
        self.ssthresh = self.half_flight(flight_size);
        self.cwnd = self.ssthresh + 3 * self.smss;
        self.bytes_acked = 0;
    }

    fn on_sack_recovery(&mut self, flight_size: usize) {
        // RFC 6675 §5 step (4.2): cwnd = ssthresh = FlightSize / 2 (RFC
        // 5681 §3.1 equation (4)).
        self.ssthresh = self.half_flight(flight_size);
        self.cwnd = self.ssthresh;
        self.bytes_acked = 0;
    }

    fn on_recovery_dup_ack(&mut self) {
        // RFC 6582 §3.2 step 3: artificially inflate.
        self.cwnd += self.smss;
    }

    fn on_partial_ack(&mut self, bytes_acked: usize) {
        // RFC 6582 §3.2 step 5: deflate by the amount acked, add back one
        // SMSS if at least one SMSS was acked.
        self.cwnd = deflate_on_partial_ack(self.cwnd, bytes_acked, self.smss);
    }

    fn on_recovery_exit(&mut self, flight_size: usize) {
        // RFC 6582 §3.2 step 4, option (1).
        self.cwnd = recovery_exit_window(self.ssthresh, flight_size, self.smss);
        self.bytes_acked = 0;
    }

    fn on_retransmit_timeout(&mut self, flight_size: usize) {
        // RFC 5681 §3.1: ssthresh per equation (4), cwnd = loss window.
        self.ssthresh = self.half_flight(flight_size);
        self.cwnd = self.smss;
        self.bytes_acked = 0;
    }

    fn on_spurious_recovery(&mut self, flight_size: usize, bytes_acked: usize, pipe_prev: usize) {
        // RFC 4015 §3.2 steps (4) and (5): resume from the flight size in
        // slow start (no burst), back up to the threshold before the false
        // alarm.
        self.cwnd = (flight_size + bytes_acked.min(initial_window(self.smss))).max(self.smss);
        self.ssthresh = pipe_prev.max(2 * self.smss);
        self.bytes_acked = 0;
    }

    fn on_idle_restart(&mut self, _idle: Duration, iw: usize) {
        // RFC 5681 §4.1: cwnd = min(RW, cwnd), RW = min(IW, cwnd).
        self.cwnd = restart_window(self.cwnd, iw);
    }

    fn set_initial_window(&mut self, iw: usize) {
        // RFC 5681 §3.1 / RFC 6928 §2.
        self.cwnd = iw.max(self.smss);
        self.bytes_acked = 0;
    }

    fn on_ecn_echo(&mut self, flight_size: usize) {
        // RFC 3168 §6.1.2: halve cwnd and reduce ssthresh, as for a loss
        // (RFC 5681 §3.1 equation (4)), with no recovery to follow.
        self.ssthresh = self.half_flight(flight_size);
        self.cwnd = self.ssthresh;
        self.bytes_acked = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::test_ack;
    use crate::time::Instant;

    const MSS: usize = 1000;

    #[test]
    fn application_limited_window_does_not_grow() {
        let mut c = NewReno::new(MSS);
        let mut ack = test_ack(Instant::ZERO, MSS);
        // Two segments in flight of a ten-segment window, ACK after ACK:
        // the window is not in use.
        ack.flight = 2 * MSS;
        for _ in 0..100 {
            c.on_ack(&ack);
        }
        assert_eq!(c.window(), 10 * MSS);
        // Half of it in use: it grows.
        ack.flight = 5 * MSS;
        c.on_ack(&ack);
        assert_eq!(c.window(), 11 * MSS);
    }

    #[test]
    fn slow_start_then_avoidance() {
        let mut c = NewReno::new(MSS);
        assert_eq!(c.window(), 10_000);
        c.set_initial_window(4000);
        assert_eq!(c.window(), 4000);
        c.on_ack(&test_ack(Instant::ZERO, 500));
        assert_eq!(c.window(), 4500);
        c.on_ack(&test_ack(Instant::ZERO, 3000)); // a stretch ACK: byte counting
        assert_eq!(c.window(), 7500);
        c.on_retransmit_timeout(11_000);
        assert_eq!(c.ssthresh(), 5500);
        c.on_retransmit_timeout(10_000);
        assert_eq!(c.ssthresh(), 5000);
        assert_eq!(c.window(), MSS);
        // Slow start up to ssthresh; the excess counts towards avoidance.
        for _ in 0..3 {
            c.on_ack(&test_ack(Instant::ZERO, MSS));
        }
        assert_eq!(c.window(), 4000);
        c.on_ack(&test_ack(Instant::ZERO, 2 * MSS));
        assert_eq!(c.window(), 5000);
        c.on_ack(&test_ack(Instant::ZERO, 4000));
        assert_eq!(c.window(), 6000);
        c.on_retransmit_timeout(10_000);
        for _ in 0..4 {
            c.on_ack(&test_ack(Instant::ZERO, MSS));
        }
        assert_eq!(c.window(), 5000);
        // ...then one SMSS per window of acknowledged bytes.
        for _ in 0..4 {
            c.on_ack(&test_ack(Instant::ZERO, MSS));
        }
        assert_eq!(c.window(), 5000);
        c.on_ack(&test_ack(Instant::ZERO, MSS));
        assert_eq!(c.window(), 6000);
    }

    #[test]
    fn fast_recovery() {
        let mut c = NewReno::new(MSS);
        c.on_fast_retransmit(20_000);
        assert_eq!(c.ssthresh(), 10_000);
        assert_eq!(c.window(), 13_000);
        c.on_recovery_dup_ack();
        assert_eq!(c.window(), 14_000);
        c.on_partial_ack(3000);
        assert_eq!(c.window(), 12_000);
        c.on_partial_ack(500);
        assert_eq!(c.window(), 11_500);
        c.on_recovery_exit(4000);
        assert_eq!(c.window(), 5000);
        c.on_recovery_exit(50_000);
        assert_eq!(c.window(), 10_000);
        c.on_sack_recovery(30_000);
        assert_eq!((c.ssthresh(), c.window()), (15_000, 15_000));
        // Small flights never drop ssthresh below 2 SMSS.
        c.on_fast_retransmit(1000);
        assert_eq!(c.ssthresh(), 2 * MSS);
    }
}
