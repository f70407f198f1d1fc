//! Congestion control (RFC 5681, NewReno fast recovery per RFC 6582, the
//! window of SACK-based recovery per RFC 6675; CUBIC per RFC 9438 with
//! HyStart++ per RFC 9406 and HyStart's ACK-train heuristic).
//!
//! Loss *detection* (duplicate ACK counting, the NewReno `recover` point,
//! the retransmission timer, RTT samples, spurious-retransmission
//! detection) lives in the connection; a [`CongestionControl`] only
//! decides the window. Each algorithm is a variant of [`Controller`],
//! stored inline in the connection (no heap), one file each.

mod cubic;
mod hystart;
mod new_reno;

pub(crate) use cubic::Cubic;
pub(crate) use new_reno::NewReno;

use crate::seq::SeqNumber;
use crate::time::{Duration, Instant};

/// What the connection knows about an ACK that acknowledged new data
/// outside of loss recovery (RFC 5681 §3.1): everything an algorithm may
/// grow the window by. NewReno reads only `bytes_acked`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ack {
    /// The time the ACK arrived.
    pub now: Instant,
    /// New bytes cumulatively acknowledged (at most `flight`).
    pub bytes_acked: usize,
    /// Bytes that were outstanding before this ACK (SND.MAX - SND.UNA):
    /// whether the window was in use (RFC 9438 §5.8, RFC 7661).
    pub flight: usize,
    /// The new SND.UNA.
    pub ack: SeqNumber,
    /// The highest sequence number sent (SND.NXT of RFC 9406 §4.2, the
    /// end of the round that starts now).
    pub snd_max: SeqNumber,
    /// The RTT sample this ACK gave (RFC 6298 §3 / RFC 7323 §4), if any.
    pub rtt: Option<Duration>,
    /// The smoothed RTT (RFC 6298 §2), if measured.
    pub srtt: Option<Duration>,
    /// The connection's minimum RTT at microsecond precision (RACK.min_RTT,
    /// RFC 8985 §6.2 step 1), if measured: the scale of HyStart's ACK-train
    /// heuristic ([`hystart`]).
    pub min_rtt: Option<Duration>,
}

/// The window-arithmetic half of congestion control. All sizes in bytes.
pub(crate) trait CongestionControl {
    /// The congestion window.
    fn window(&self) -> usize;
    /// The slow-start threshold.
    fn ssthresh(&self) -> usize;
    /// Updates the sender MSS (after the handshake negotiated it).
    fn set_mss(&mut self, smss: usize);
    /// New data was cumulatively acknowledged outside of fast recovery.
    fn on_ack(&mut self, ack: &Ack);
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
    /// The sender was idle for `idle` (longer than an RTO) and sends
    /// again; `iw` is the connection's initial window (RFC 5681 §4.1: the
    /// restart window is min(IW, cwnd)).
    fn on_idle_restart(&mut self, idle: Duration, iw: usize);
    /// The handshake completed: the window starts at `iw` bytes (RFC 5681
    /// §3.1 / RFC 6928 §2; one SMSS if the SYN or SYN-ACK was lost).
    fn set_initial_window(&mut self, iw: usize);
    /// An ACK echoed a CE mark (ECE, RFC 3168 §6.1.2) with `flight_size`
    /// bytes outstanding: reduce as for a loss, but nothing is
    /// retransmitted and no recovery follows. The connection calls it at
    /// most once per window of data.
    fn on_ecn_echo(&mut self, flight_size: usize);
}

/// Which initial window (the congestion window when data transmission
/// starts) connections use ([`crate::Config::initial_window`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialWindow {
    /// RFC 6928: min(10·SMSS, max(2·SMSS, 14600 bytes)), ten segments of
    /// an Ethernet MSS (Linux's `TCP_INIT_CWND`).
    #[default]
    Rfc6928,
    /// RFC 5681 §3.1: min(4·SMSS, max(2·SMSS, 4380 bytes)), three
    /// segments of an Ethernet MSS.
    Rfc5681,
}

impl InitialWindow {
    /// The initial window in bytes for a sender MSS of `smss`.
    pub(crate) fn bytes(self, smss: usize) -> usize {
        match self {
            InitialWindow::Rfc6928 => initial_window(smss),
            InitialWindow::Rfc5681 => (4 * smss).min((2 * smss).max(4380)),
        }
    }
}

/// RFC 6928 §2: IW = min(10*SMSS, max(2*SMSS, 14600 bytes)), the window a
/// controller starts from before the connection sets the configured one
/// ([`CongestionControl::set_initial_window`]), and the cap of RFC 4015
/// §3.2's undo burst.
pub(crate) fn initial_window(smss: usize) -> usize {
    (10 * smss).min((2 * smss).max(14_600))
}

/// RFC 5681 §4.1: after an idle period, cwnd = min(RW, cwnd) with RW =
/// min(IW, cwnd).
pub(crate) fn restart_window(cwnd: usize, iw: usize) -> usize {
    cwnd.min(iw)
}

/// RFC 6582 §3.2 step 5: on a partial ACK, deflate the window by the
/// amount acknowledged and add back one SMSS if at least one SMSS was.
pub(crate) fn deflate_on_partial_ack(cwnd: usize, bytes_acked: usize, smss: usize) -> usize {
    let mut cwnd = cwnd.saturating_sub(bytes_acked);
    if bytes_acked >= smss {
        cwnd += smss;
    }
    cwnd.max(smss)
}

/// RFC 6582 §3.2 step 4, option (1): the window when a full ACK ends
/// fast recovery with `flight_size` bytes still outstanding.
pub(crate) fn recovery_exit_window(ssthresh: usize, flight_size: usize, smss: usize) -> usize {
    ssthresh.min(flight_size.max(smss) + smss)
}

/// Which congestion control algorithm new connections use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionAlgorithm {
    /// RFC 5681 + RFC 6582.
    NewReno,
    /// CUBIC (RFC 9438) with HyStart++ (RFC 9406) in the initial slow
    /// start, as Linux, Windows and Apple stacks default to; the default.
    #[default]
    Cubic,
}

/// The congestion controller of a connection, stored inline (no boxing) so
/// that connection state stays contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    /// NewReno.
    NewReno(NewReno),
    /// CUBIC with HyStart++.
    Cubic(Cubic),
}

/// Calls `$call` on the controller inside (a match, not a `dyn` call, so
/// that the per-ACK path is inlined).
macro_rules! dispatch {
    ($self:expr, $c:ident => $call:expr) => {
        match $self {
            Controller::NewReno($c) => $call,
            Controller::Cubic($c) => $call,
        }
    };
}

impl Controller {
    /// A controller of the given algorithm.
    pub(crate) fn new(alg: CongestionAlgorithm, smss: usize) -> Self {
        match alg {
            CongestionAlgorithm::NewReno => Controller::NewReno(NewReno::new(smss)),
            CongestionAlgorithm::Cubic => Controller::Cubic(Cubic::new(smss)),
        }
    }

    /// The algorithm of this controller.
    pub(crate) fn algorithm(&self) -> CongestionAlgorithm {
        match self {
            Controller::NewReno(_) => CongestionAlgorithm::NewReno,
            Controller::Cubic(_) => CongestionAlgorithm::Cubic,
        }
    }

    /// Switches to `alg` (a no-op if it is the current one). The window
    /// and the slow-start threshold carry over, as Linux does on
    /// `TCP_CONGESTION`; the new algorithm starts its own state from them.
    pub(crate) fn set_algorithm(&mut self, alg: CongestionAlgorithm) {
        if alg == self.algorithm() {
            return;
        }
        let (cwnd, ssthresh, smss) = dispatch!(self, c => (c.window(), c.ssthresh(), c.smss()));
        *self = match alg {
            CongestionAlgorithm::NewReno => {
                Controller::NewReno(NewReno::with_window(cwnd, ssthresh, smss))
            }
            CongestionAlgorithm::Cubic => {
                Controller::Cubic(Cubic::with_window(cwnd, ssthresh, smss))
            }
        };
    }
}

impl CongestionControl for Controller {
    #[inline]
    fn window(&self) -> usize {
        dispatch!(self, c => c.window())
    }
    #[inline]
    fn ssthresh(&self) -> usize {
        dispatch!(self, c => c.ssthresh())
    }
    fn set_mss(&mut self, smss: usize) {
        dispatch!(self, c => c.set_mss(smss))
    }
    #[inline]
    fn on_ack(&mut self, ack: &Ack) {
        dispatch!(self, c => c.on_ack(ack))
    }
    fn on_fast_retransmit(&mut self, flight_size: usize) {
        dispatch!(self, c => c.on_fast_retransmit(flight_size))
    }
    fn on_sack_recovery(&mut self, flight_size: usize) {
        dispatch!(self, c => c.on_sack_recovery(flight_size))
    }
    fn on_recovery_dup_ack(&mut self) {
        dispatch!(self, c => c.on_recovery_dup_ack())
    }
    fn on_partial_ack(&mut self, bytes_acked: usize) {
        dispatch!(self, c => c.on_partial_ack(bytes_acked))
    }
    fn on_recovery_exit(&mut self, flight_size: usize) {
        dispatch!(self, c => c.on_recovery_exit(flight_size))
    }
    fn on_retransmit_timeout(&mut self, flight_size: usize) {
        dispatch!(self, c => c.on_retransmit_timeout(flight_size))
    }
    fn on_spurious_recovery(&mut self, flight_size: usize, bytes_acked: usize, pipe_prev: usize) {
        dispatch!(self, c => c.on_spurious_recovery(flight_size, bytes_acked, pipe_prev))
    }
    fn on_idle_restart(&mut self, idle: Duration, iw: usize) {
        dispatch!(self, c => c.on_idle_restart(idle, iw))
    }
    fn set_initial_window(&mut self, iw: usize) {
        dispatch!(self, c => c.set_initial_window(iw))
    }
    fn on_ecn_echo(&mut self, flight_size: usize) {
        dispatch!(self, c => c.on_ecn_echo(flight_size))
    }
}

/// An [`Ack`] of `bytes` with nothing else known (for tests).
#[cfg(test)]
pub(crate) fn test_ack(now: Instant, bytes: usize) -> Ack {
    Ack {
        now,
        bytes_acked: bytes,
        flight: usize::MAX / 2,
        ack: SeqNumber(0),
        snd_max: SeqNumber(0),
        rtt: None,
        srtt: None,
        min_rtt: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    #[test]
    fn initial_windows() {
        // RFC 6928 §2 (the default).
        assert_eq!(initial_window(1460), 14_600);
        assert_eq!(initial_window(1448), 14_480);
        assert_eq!(initial_window(1000), 10_000);
        assert_eq!(initial_window(2500), 14_600);
        assert_eq!(initial_window(9000), 18_000);
        assert_eq!(initial_window(536), 5360);
        assert_eq!(InitialWindow::default().bytes(1460), 14_600);
        // RFC 5681 §3.1.
        let old = InitialWindow::Rfc5681;
        assert_eq!(old.bytes(1460), 4380);
        assert_eq!(old.bytes(1000), 4000);
        assert_eq!(old.bytes(2500), 5000);
        assert_eq!(old.bytes(536), 2144);
    }

    #[test]
    fn initial_window_and_ecn_echo_through_the_controller() {
        for alg in [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic] {
            let mut c = Controller::new(alg, MSS);
            assert_eq!(c.window(), 10 * MSS, "{alg:?}");
            c.set_initial_window(MSS);
            assert_eq!(c.window(), MSS, "{alg:?}");
            c.set_initial_window(4 * MSS);
            c.on_ack(&test_ack(Instant::ZERO, 16 * MSS));
            assert_eq!(c.window(), 20 * MSS, "{alg:?}");
            // RFC 3168 §6.1.2: as a loss; NewReno halves the flight, CUBIC
            // multiplies it by beta_cubic = 0.7 (RFC 9438 §4.6).
            c.on_ecn_echo(20 * MSS);
            let want = match alg {
                CongestionAlgorithm::NewReno => 10 * MSS,
                CongestionAlgorithm::Cubic => 14 * MSS,
            };
            assert_eq!((c.window(), c.ssthresh()), (want, want), "{alg:?}");
            // Never below 2 SMSS (RFC 5681 §3.1 equation (4)).
            c.on_ecn_echo(MSS);
            assert_eq!((c.window(), c.ssthresh()), (2 * MSS, 2 * MSS), "{alg:?}");
        }
    }

    #[test]
    fn idle_restart_and_controller_dispatch() {
        for alg in [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic] {
            let mut c = Controller::new(alg, MSS);
            c.on_ack(&test_ack(Instant::ZERO, 10 * MSS));
            assert_eq!(c.window(), 20_000, "{alg:?}");
            c.on_idle_restart(Duration::from_secs(1), 10 * MSS);
            assert_eq!(c.window(), 10_000, "{alg:?}");
            c.set_mss(1460);
            assert_eq!(c.window(), 14_600, "{alg:?}");
            c.on_idle_restart(Duration::from_secs(1), 4380);
            assert_eq!(c.window(), 4380, "{alg:?}");
        }
    }

    #[test]
    fn switching_algorithm_keeps_the_window() {
        let mut c = Controller::new(CongestionAlgorithm::NewReno, MSS);
        c.on_ack(&test_ack(Instant::ZERO, 10 * MSS));
        c.on_sack_recovery(20_000);
        assert_eq!((c.window(), c.ssthresh()), (10_000, 10_000));
        c.set_algorithm(CongestionAlgorithm::Cubic);
        assert_eq!(c.algorithm(), CongestionAlgorithm::Cubic);
        assert_eq!((c.window(), c.ssthresh()), (10_000, 10_000));
        // CUBIC's decrease from here: beta_cubic = 0.7.
        c.on_sack_recovery(10_000);
        assert_eq!((c.window(), c.ssthresh()), (7000, 7000));
        c.set_algorithm(CongestionAlgorithm::NewReno);
        assert_eq!((c.window(), c.ssthresh()), (7000, 7000));
        // In slow start, ssthresh stays "arbitrarily high" either way.
        let mut c = Controller::new(CongestionAlgorithm::Cubic, MSS);
        c.set_algorithm(CongestionAlgorithm::NewReno);
        assert_eq!(c.ssthresh(), usize::MAX);
        c.set_algorithm(CongestionAlgorithm::Cubic);
        assert_eq!(c.ssthresh(), usize::MAX);
    }

    #[test]
    fn recovery_helpers() {
        assert_eq!(restart_window(100_000, 4000), 4000);
        assert_eq!(restart_window(3000, 4000), 3000);
        assert_eq!(deflate_on_partial_ack(14_000, 3000, MSS), 12_000);
        assert_eq!(deflate_on_partial_ack(12_000, 500, MSS), 11_500);
        assert_eq!(deflate_on_partial_ack(1500, 3000, MSS), MSS);
        assert_eq!(recovery_exit_window(10_000, 4000, MSS), 5000);
        assert_eq!(recovery_exit_window(10_000, 50_000, MSS), 10_000);
        assert_eq!(recovery_exit_window(10_000, 0, MSS), 2000);
    }
}
