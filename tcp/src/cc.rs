//! Congestion control (RFC 5681, NewReno fast recovery per RFC 6582, the
//! window of SACK-based recovery per RFC 6675).
//!
//! Loss *detection* (duplicate ACK counting, the NewReno `recover` point,
//! the retransmission timer) lives in the connection; a
//! [`CongestionControl`] only decides the window. CUBIC (RFC 9438) can be
//! added as another variant of [`Controller`] implementing the same trait.

use crate::time::Instant;

/// The window-arithmetic half of congestion control. All sizes in bytes.
pub trait CongestionControl {
    /// The congestion window.
    fn window(&self) -> usize;
    /// The slow-start threshold.
    fn ssthresh(&self) -> usize;
    /// Updates the sender MSS (after the handshake negotiated it).
    fn set_mss(&mut self, smss: usize);
    /// `bytes_acked` new bytes were cumulatively acknowledged outside of
    /// fast recovery.
    fn on_ack(&mut self, now: Instant, bytes_acked: usize);
    /// Third duplicate ACK: a fast retransmit starts fast recovery with
    /// `flight_size` bytes outstanding.
    fn on_fast_retransmit(&mut self, flight_size: usize);
    /// Conservative SACK-based loss recovery starts with `flight_size`
    /// bytes outstanding (RFC 6675 §5 step (4.2)): no window inflation, the
    /// pipe estimate governs transmission.
    fn on_sack_recovery(&mut self, flight_size: usize);
    /// A further duplicate ACK during fast recovery.
    fn on_recovery_dup_ack(&mut self);
    /// A partial ACK during fast recovery acknowledged `bytes_acked`.
    fn on_partial_ack(&mut self, bytes_acked: usize);
    /// A full ACK ended fast recovery; `flight_size` bytes still outstanding.
    fn on_recovery_exit(&mut self, flight_size: usize);
    /// The retransmission timer expired with `flight_size` bytes outstanding.
    fn on_retransmit_timeout(&mut self, flight_size: usize);
    /// The fast retransmit that started the current recovery was spurious
    /// (RFC 3522 detection): `flight_size` bytes are outstanding after an ACK
    /// of `bytes_acked`, and `pipe_prev` was max(FlightSize, ssthresh) when
    /// the window was reduced.
    fn on_spurious_recovery(&mut self, flight_size: usize, bytes_acked: usize, pipe_prev: usize);
    /// The sender was idle for longer than an RTO.
    fn on_idle_restart(&mut self);
}

/// RFC 5681 §3.1: IW = min(4*SMSS, max(2*SMSS, 4380 bytes)).
pub fn initial_window(smss: usize) -> usize {
    (4 * smss).min((2 * smss).max(4380))
}

/// NewReno (RFC 5681 + RFC 6582), with appropriate byte counting in
/// congestion avoidance (RFC 5681 §3.1, RFC 3465).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewReno {
    cwnd: usize,
    ssthresh: usize,
    smss: usize,
    /// Bytes acknowledged since the last cwnd increase in congestion
    /// avoidance.
    bytes_acked: usize,
}

impl NewReno {
    /// A controller for a sender MSS of `smss` bytes.
    pub fn new(smss: usize) -> Self {
        let smss = smss.max(1);
        NewReno {
            cwnd: initial_window(smss),
            // RFC 5681 §3.1: "arbitrarily high".
            ssthresh: usize::MAX,
            smss,
            bytes_acked: 0,
        }
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

    fn on_ack(&mut self, _now: Instant, bytes_acked: usize) {
        let mut rest = bytes_acked;
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
        self.cwnd = self.cwnd.saturating_sub(bytes_acked);
        if bytes_acked >= self.smss {
            self.cwnd += self.smss;
        }
        self.cwnd = self.cwnd.max(self.smss);
    }

    fn on_recovery_exit(&mut self, flight_size: usize) {
        // RFC 6582 §3.2 step 4, option (1).
        self.cwnd = self.ssthresh.min(flight_size.max(self.smss) + self.smss);
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

    fn on_idle_restart(&mut self) {
        // RFC 5681 §4.1: cwnd = min(RW, cwnd), RW = min(IW, cwnd).
        self.cwnd = self.cwnd.min(initial_window(self.smss));
    }
}

/// The congestion controller of a connection, stored inline (no boxing) so
/// that connection state stays contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    /// NewReno.
    NewReno(NewReno),
}

/// Which congestion control algorithm new connections use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionAlgorithm {
    /// RFC 5681 + RFC 6582.
    #[default]
    NewReno,
}

impl Controller {
    /// A controller of the given algorithm.
    pub fn new(alg: CongestionAlgorithm, smss: usize) -> Self {
        match alg {
            CongestionAlgorithm::NewReno => Controller::NewReno(NewReno::new(smss)),
        }
    }

    fn inner(&mut self) -> &mut dyn CongestionControl {
        match self {
            Controller::NewReno(c) => c,
        }
    }

    fn inner_ref(&self) -> &dyn CongestionControl {
        match self {
            Controller::NewReno(c) => c,
        }
    }
}

impl CongestionControl for Controller {
    fn window(&self) -> usize {
        self.inner_ref().window()
    }
    fn ssthresh(&self) -> usize {
        self.inner_ref().ssthresh()
    }
    fn set_mss(&mut self, smss: usize) {
        self.inner().set_mss(smss)
    }
    fn on_ack(&mut self, now: Instant, bytes_acked: usize) {
        self.inner().on_ack(now, bytes_acked)
    }
    fn on_fast_retransmit(&mut self, flight_size: usize) {
        self.inner().on_fast_retransmit(flight_size)
    }
    fn on_sack_recovery(&mut self, flight_size: usize) {
        self.inner().on_sack_recovery(flight_size)
    }
    fn on_recovery_dup_ack(&mut self) {
        self.inner().on_recovery_dup_ack()
    }
    fn on_partial_ack(&mut self, bytes_acked: usize) {
        self.inner().on_partial_ack(bytes_acked)
    }
    fn on_recovery_exit(&mut self, flight_size: usize) {
        self.inner().on_recovery_exit(flight_size)
    }
    fn on_retransmit_timeout(&mut self, flight_size: usize) {
        self.inner().on_retransmit_timeout(flight_size)
    }
    fn on_spurious_recovery(&mut self, flight_size: usize, bytes_acked: usize, pipe_prev: usize) {
        self.inner()
            .on_spurious_recovery(flight_size, bytes_acked, pipe_prev)
    }
    fn on_idle_restart(&mut self) {
        self.inner().on_idle_restart()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    #[test]
    fn initial_window_rfc5681() {
        assert_eq!(initial_window(1460), 4380);
        assert_eq!(initial_window(1000), 4000);
        assert_eq!(initial_window(2500), 5000);
        assert_eq!(initial_window(536), 2144);
    }

    #[test]
    fn slow_start_then_avoidance() {
        let mut c = NewReno::new(MSS);
        assert_eq!(c.window(), 4000);
        c.on_ack(Instant::ZERO, 500);
        assert_eq!(c.window(), 4500);
        c.on_ack(Instant::ZERO, 3000); // a stretch ACK: byte counting
        assert_eq!(c.window(), 7500);
        c.on_retransmit_timeout(11_000);
        assert_eq!(c.ssthresh(), 5500);
        c.on_retransmit_timeout(10_000);
        assert_eq!(c.ssthresh(), 5000);
        assert_eq!(c.window(), MSS);
        // Slow start up to ssthresh; the excess counts towards avoidance.
        for _ in 0..3 {
            c.on_ack(Instant::ZERO, MSS);
        }
        assert_eq!(c.window(), 4000);
        c.on_ack(Instant::ZERO, 2 * MSS);
        assert_eq!(c.window(), 5000);
        c.on_ack(Instant::ZERO, 4000);
        assert_eq!(c.window(), 6000);
        c.on_retransmit_timeout(10_000);
        for _ in 0..4 {
            c.on_ack(Instant::ZERO, MSS);
        }
        assert_eq!(c.window(), 5000);
        // ...then one SMSS per window of acknowledged bytes.
        for _ in 0..4 {
            c.on_ack(Instant::ZERO, MSS);
        }
        assert_eq!(c.window(), 5000);
        c.on_ack(Instant::ZERO, MSS);
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

    #[test]
    fn idle_restart_and_controller_dispatch() {
        let mut c = Controller::new(CongestionAlgorithm::NewReno, MSS);
        c.on_ack(Instant::ZERO, 10 * MSS);
        assert_eq!(c.window(), 14_000);
        c.on_idle_restart();
        assert_eq!(c.window(), 4000);
        c.set_mss(1460);
        assert_eq!(c.window(), 4380);
    }
}
