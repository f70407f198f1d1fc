//! Congestion control (RFC 5681, NewReno fast recovery per RFC 6582, the
//! window of SACK-based recovery per RFC 6675).
//!
//! Loss *detection* (duplicate ACK counting, the NewReno `recover` point,
//! the retransmission timer) lives in the connection; a
//! [`CongestionControl`] only decides the window. CUBIC (RFC 9438) can be
//! added as another variant of [`Controller`] implementing the same trait.

mod new_reno;

pub(crate) use new_reno::NewReno;

use crate::time::Instant;

/// The window-arithmetic half of congestion control. All sizes in bytes.
pub(crate) trait CongestionControl {
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
pub(crate) fn initial_window(smss: usize) -> usize {
    (4 * smss).min((2 * smss).max(4380))
}

/// The congestion controller of a connection, stored inline (no boxing) so
/// that connection state stays contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
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
    pub(crate) fn new(alg: CongestionAlgorithm, smss: usize) -> Self {
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
