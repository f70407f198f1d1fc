//! CUBIC (RFC 9438) with HyStart++ (RFC 9406) and HyStart's ACK train in
//! the initial slow start ([`super::hystart`]).
//!
//! Integer arithmetic throughout (deterministic on every platform): windows
//! in bytes (`u32`, at most [`CWND_MAX`]), time in milliseconds since the
//! start of the congestion avoidance stage, the cube root by bits
//! ([`icbrt`]). Loss recovery itself (RFC 6582 inflation and deflation, RFC
//! 6675's pipe) is the connection's and shared with NewReno; CUBIC decides
//! the reduction (β_cubic) and the growth between losses.

use super::hystart::{Growth, HyStart, TrainSample, CSS_GROWTH_DIVISOR};
use super::{
    deflate_on_partial_ack, initial_window, recovery_exit_window, restart_window, Ack,
    CongestionControl,
};
use crate::time::Duration;

/// RFC 9438 §4.6: β_cubic = 0.7 (as 7/10).
const BETA_NUM: u64 = 7;
const BETA_DEN: u64 = 10;
/// RFC 9438 §4.7: fast convergence releases bandwidth by remembering
/// W_max = cwnd * (1 + β_cubic) / 2 = 0.85 cwnd (as 17/20).
const FAST_CONV_NUM: u64 = 17;
const FAST_CONV_DEN: u64 = 20;
/// RFC 9438 §4.3: α_cubic = 3 (1 - β_cubic) / (1 + β_cubic) = 9/17, and 1
/// (17/17) once W_est reached cwnd_prior.
const ALPHA_NUM: u64 = 9;
const ALPHA_DEN: u64 = 17;
/// RFC 9438 §4.2: C = 0.4 segments/s³. With the time in ms and windows in
/// bytes, C·SMSS·(t/1000)³ = 2·SMSS·t³ / 5·10⁹.
const C_NUM: i128 = 2;
const C_DEN_MS3: i128 = 5_000_000_000;
/// K³ in ms³ per byte of (W_max - cwnd_epoch) and per 1/SMSS: 10⁹ / C.
const K3_MS3: u64 = 2_500_000_000;
/// The largest window (128 MiB, 2^27): every fixed-point product and
/// remainder below fits (17·cwnd in `u32`, K³ in `u64`).
pub(crate) const CWND_MAX: u32 = 1 << 27;
/// A congestion avoidance stage this old (about 12 days without a loss or
/// an idle period) starts over from the current window, so that the
/// wrapping millisecond clock of an epoch never wraps.
const EPOCH_MAX_MS: u32 = 1 << 30;
/// ssthresh before the first congestion event: "arbitrarily high" (RFC
/// 5681 §3.1).
const NO_SSTHRESH: u32 = u32::MAX;

/// Where the connection is between losses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The initial slow start, under HyStart++ (RFC 9406 §4.2; RFC 9438
    /// §4.10).
    SlowStart(HyStart),
    /// A congestion avoidance stage is running (RFC 9438 §4.2). Kept
    /// through fast recovery, so that a spurious congestion event can
    /// restore it (RFC 9438 §4.9).
    Epoch(Epoch),
    /// No stage running: the next ACK in congestion avoidance starts one.
    NoEpoch,
}

/// One congestion avoidance stage (RFC 9438 §4.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Epoch {
    /// t_epoch, in ms of the caller's clock (wrapping).
    start_ms: u32,
    /// K (RFC 9438 §4.2 equation (2)), in ms.
    k_ms: u32,
    /// W_est (RFC 9438 §4.3), bytes.
    w_est: u32,
    /// The fraction of a byte W_est has accumulated, over 17·cwnd.
    w_est_rem: u32,
}

/// CUBIC congestion control (RFC 9438) with HyStart++ (RFC 9406).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cubic {
    cwnd: u32,
    ssthresh: u32,
    /// W_max (RFC 9438 §4.1.2); 0 while undefined (no congestion event
    /// yet, or after an RTO, §4.8).
    w_max: u32,
    /// cwnd_prior (RFC 9438 §4.3, §4.6): the window before the last
    /// reduction; also prior_cwnd of §4.9.
    cwnd_prior: u32,
    /// prior_W_max of RFC 9438 §4.9.
    w_max_prior: u32,
    /// The fraction of a byte the window has accumulated: over cwnd in
    /// congestion avoidance, over CSS_GROWTH_DIVISOR in CSS.
    credit: u32,
    smss: u16,
    phase: Phase,
}

/// The integer cube root: the largest `y` with `y³ <= x` (bit by bit, as
/// in Hacker's Delight §11-2, widened to 64 bits).
pub(crate) fn icbrt(x: u64) -> u64 {
    let mut x = x;
    let mut y: u64 = 0;
    let mut s: i32 = 63;
    while s >= 0 {
        y *= 2;
        // (y + 1)³ - y³ for the doubled y, compared at scale 2^s.
        let b = 3 * y * (y + 1) + 1;
        if (x >> s) >= b {
            x -= b << s;
            y += 1;
        }
        s -= 3;
    }
    y
}

/// K (RFC 9438 §4.2 equation (2)) in ms: cbrt((W_max - cwnd_epoch) /
/// (C·SMSS)) seconds, for `gap` = W_max - cwnd_epoch bytes.
fn k_ms(gap: u32, smss: u16) -> u32 {
    let x = u64::from(gap) * K3_MS3 / u64::from(smss.max(1));
    icbrt(x) as u32
}

/// W_cubic(t) (RFC 9438 §4.2 equation (1)) in bytes, for `t_ms` ms into
/// the stage: C·(t - K)³ + W_max, within [0, CWND_MAX].
fn w_cubic(t_ms: u32, k_ms: u32, w_max: u32, smss: u16) -> u32 {
    let d = i128::from(t_ms) - i128::from(k_ms);
    let delta = C_NUM * i128::from(smss) * d * d * d / C_DEN_MS3;
    (i128::from(w_max) + delta).clamp(0, i128::from(CWND_MAX)) as u32
}

fn clamp_u32(n: usize) -> u32 {
    n.min(u32::MAX as usize) as u32
}

impl Cubic {
    /// A controller for a sender MSS of `smss` bytes: the initial window,
    /// slow start under HyStart++.
    pub(crate) fn new(smss: usize) -> Self {
        let smss = smss.clamp(1, usize::from(u16::MAX));
        Cubic {
            cwnd: initial_window(smss) as u32,
            ssthresh: NO_SSTHRESH,
            w_max: 0,
            cwnd_prior: 0,
            w_max_prior: 0,
            credit: 0,
            smss: smss as u16,
            phase: Phase::SlowStart(HyStart::new()),
        }
    }

    /// A controller that carries on from another algorithm's window (with
    /// HyStart++ if that one was still in its initial slow start).
    pub(crate) fn with_window(cwnd: usize, ssthresh: usize, smss: usize) -> Self {
        let mut c = Cubic::new(smss);
        c.cwnd = clamp_u32(cwnd).clamp(u32::from(c.smss), CWND_MAX);
        if ssthresh != usize::MAX {
            c.ssthresh = clamp_u32(ssthresh).min(NO_SSTHRESH - 1);
            c.phase = Phase::NoEpoch;
        }
        c
    }

    /// The sender MSS.
    pub(crate) fn smss(&self) -> usize {
        usize::from(self.smss)
    }

    fn smss32(&self) -> u32 {
        u32::from(self.smss)
    }

    /// RFC 9438 §4.2 / §4.3 / §4.8 / §4.10: a congestion avoidance stage
    /// starts at `now_ms` with cwnd_epoch = cwnd and W_est = cwnd_epoch.
    /// If W_max is above cwnd_epoch, K follows equation (2); if it is not
    /// (undefined after an RTO or a HyStart++ exit, or the window already
    /// passed it), K = 0 and W_max = cwnd_epoch.
    fn start_epoch(&mut self, now_ms: u32) -> Epoch {
        let k = if self.w_max > self.cwnd {
            k_ms(self.w_max - self.cwnd, self.smss)
        } else {
            self.w_max = self.cwnd;
            0
        };
        self.credit = 0;
        Epoch {
            start_ms: now_ms,
            k_ms: k,
            w_est: self.cwnd,
            w_est_rem: 0,
        }
    }

    /// Growth in congestion avoidance by `acked` bytes (RFC 9438 §4.2 to
    /// §4.5).
    fn avoidance(&mut self, a: &Ack, acked: u32) {
        let now_ms = a.now.as_millis() as u32;
        let mut ep = match self.phase {
            Phase::Epoch(e) if now_ms.wrapping_sub(e.start_ms) <= EPOCH_MAX_MS => e,
            _ => self.start_epoch(now_ms),
        };
        let t = now_ms.wrapping_sub(ep.start_ms);
        let cwnd = u64::from(self.cwnd);
        // RFC 9438 §4.3: W_est += α_cubic · segments_acked / cwnd, with
        // α_cubic = 1 once W_est >= cwnd_prior. In bytes: α · acked ·
        // SMSS / cwnd, the remainder carried.
        let alpha = if ep.w_est >= self.cwnd_prior {
            ALPHA_DEN
        } else {
            ALPHA_NUM
        };
        let num = u64::from(ep.w_est_rem) + alpha * u64::from(acked) * u64::from(self.smss);
        let den = ALPHA_DEN * cwnd;
        ep.w_est = clamp_u32((u64::from(ep.w_est) + num / den) as usize).min(CWND_MAX);
        ep.w_est_rem = (num % den) as u32;
        if w_cubic(t, ep.k_ms, self.w_max, self.smss) < ep.w_est {
            // RFC 9438 §4.3: the Reno-friendly region: cwnd = W_est.
            self.cwnd = self.cwnd.max(ep.w_est);
        } else {
            // RFC 9438 §4.2: target = W_cubic(t + RTT), at least cwnd and
            // at most 1.5 cwnd; cwnd grows by (target - cwnd) / cwnd per
            // acknowledged segment, whether below W_max (concave, §4.4)
            // or above it (convex, §4.5).
            let rtt_ms = a.srtt.map_or(0, |d| d.as_millis().min(u64::from(u32::MAX))) as u32;
            let target = w_cubic(t.saturating_add(rtt_ms), ep.k_ms, self.w_max, self.smss)
                .clamp(self.cwnd, self.cwnd + self.cwnd / 2);
            let num = u64::from(self.credit) + u64::from(target - self.cwnd) * u64::from(acked);
            self.cwnd += (num / cwnd) as u32;
            self.credit = (num % cwnd) as u32;
        }
        self.cwnd = self.cwnd.min(CWND_MAX);
        self.phase = Phase::Epoch(ep);
    }

    /// A congestion event with `flight_size` bytes outstanding: RFC 9438
    /// §4.9 saves what an undo restores, §4.7 sets W_max (fast
    /// convergence), §4.6 sets ssthresh = flight_size · β_cubic (at least
    /// 2 SMSS, RFC 5681 §3.1 equation (4)'s floor). The stage (t_epoch, K,
    /// W_est) is kept until recovery ends, for §4.9.
    ///
    /// W_max is the window in use, min(cwnd, flight_size): the part of
    /// cwnd above the flight was never validated (RFC 9438 §5.8, RFC 7661
    /// §4.4 reduces from the flight too). In slow start that part is
    /// large when a batch of ACKs is handled before the sender refills the
    /// window: the one that doubled cwnd and the duplicate ACKs behind it
    /// arrive together, and cwnd would overstate the path by up to 2x.
    fn congestion_event(&mut self, flight_size: usize) {
        self.cwnd_prior = self.cwnd;
        self.w_max_prior = self.w_max;
        let in_use = self.cwnd.min(clamp_u32(flight_size));
        self.w_max = if in_use < self.w_max {
            (u64::from(in_use) * FAST_CONV_NUM / FAST_CONV_DEN) as u32
        } else {
            in_use
        };
        let reduced = (flight_size as u64).saturating_mul(BETA_NUM) / BETA_DEN;
        self.ssthresh = clamp_u32(reduced as usize)
            .min(CWND_MAX)
            .max(2 * self.smss32());
        self.credit = 0;
    }
}

impl CongestionControl for Cubic {
    fn window(&self) -> usize {
        self.cwnd as usize
    }

    fn ssthresh(&self) -> usize {
        if self.ssthresh == NO_SSTHRESH {
            usize::MAX
        } else {
            self.ssthresh as usize
        }
    }

    fn set_mss(&mut self, smss: usize) {
        let smss = smss.clamp(1, usize::from(u16::MAX));
        if self.cwnd as usize == initial_window(self.smss()) {
            self.cwnd = initial_window(smss) as u32;
        }
        self.smss = smss as u16;
    }

    fn on_ack(&mut self, a: &Ack) {
        // RFC 9438 §5.8: a window the sender does not use (the application,
        // the send buffer or the peer's window limits it) does not grow,
        // in slow start either (W_max and ssthresh are taken from it). In
        // use means RFC 7661 §4.3's validated phase, pipeACK >= cwnd / 2,
        // with the flight before this ACK as pipeACK: a batch of ACKs
        // handled before the sender refills the window still counts.
        if a.flight.saturating_mul(2) < self.cwnd as usize {
            return;
        }
        let mut rest = clamp_u32(a.bytes_acked);
        if self.cwnd < self.ssthresh {
            let train = TrainSample {
                now_us: TrainSample::micros(a.now),
                min_rtt_us: a
                    .min_rtt
                    .map(|d| (d.as_nanos() / 1000).min(u64::from(u32::MAX)) as u32),
                cwnd_segments: self.cwnd / self.smss32(),
            };
            let growth = match &mut self.phase {
                Phase::SlowStart(h) => h.on_ack(a.ack, a.snd_max, a.rtt, train),
                _ => Growth::SlowStart,
            };
            match growth {
                Growth::SlowStart => {
                    // RFC 5681 §3.1 slow start with byte counting, up to
                    // ssthresh. Neither RFC 3465's L = 2 nor RFC 9406
                    // §4.2's L = 8 caps one ACK's credit, for the reason
                    // given in NewReno (one stretch ACK per receive batch).
                    let inc = rest.min(self.ssthresh - self.cwnd);
                    self.cwnd += inc;
                    rest -= inc;
                }
                Growth::Conservative => {
                    // RFC 9406 §4.2: cwnd += N / CSS_GROWTH_DIVISOR.
                    let n = self.credit + rest;
                    self.cwnd += n / CSS_GROWTH_DIVISOR;
                    self.credit = n % CSS_GROWTH_DIVISOR;
                    rest = 0;
                }
                Growth::Avoidance => {
                    // RFC 9406 §4.2: after CSS_ROUNDS, ssthresh = cwnd
                    // (and so after an ACK train, as Linux does).
                    // RFC 9438 §4.10: cwnd_prior = cwnd, and W_max is
                    // undefined (the stage starts with K = 0).
                    self.ssthresh = self.cwnd;
                    self.cwnd_prior = self.cwnd;
                    self.w_max = 0;
                    self.phase = Phase::NoEpoch;
                }
            }
        }
        if rest > 0 && self.cwnd >= self.ssthresh {
            self.avoidance(a, rest);
        }
        self.cwnd = self.cwnd.min(CWND_MAX);
    }

    fn on_fast_retransmit(&mut self, flight_size: usize) {
        // RFC 9438 §4.6 reduction with RFC 5681 §3.2 steps 2-3 / RFC 6582
        // §3.2 step 2 inflation.
        self.congestion_event(flight_size);
        self.cwnd = self.ssthresh + 3 * self.smss32();
    }

    fn on_sack_recovery(&mut self, flight_size: usize) {
        // RFC 6675 §5 step (4.2): cwnd = ssthresh, the RFC 9438 §4.6 one.
        self.congestion_event(flight_size);
        self.cwnd = self.ssthresh;
    }

    fn on_recovery_dup_ack(&mut self) {
        // RFC 6582 §3.2 step 3: artificially inflate.
        self.cwnd = (self.cwnd + self.smss32()).min(CWND_MAX);
    }

    fn on_partial_ack(&mut self, bytes_acked: usize) {
        // RFC 6582 §3.2 step 5.
        self.cwnd = deflate_on_partial_ack(self.cwnd as usize, bytes_acked, self.smss()) as u32;
    }

    fn on_recovery_exit(&mut self, flight_size: usize) {
        // RFC 6582 §3.2 step 4, option (1); a new congestion avoidance
        // stage begins with the next ACK (RFC 9438 §4.2, t_epoch).
        self.cwnd = recovery_exit_window(self.ssthresh as usize, flight_size, self.smss()) as u32;
        self.phase = Phase::NoEpoch;
        self.credit = 0;
    }

    fn on_retransmit_timeout(&mut self, flight_size: usize) {
        // RFC 9438 §4.8: ssthresh with β_cubic (§4.6), cwnd as Reno does
        // (RFC 5681 §3.1: the loss window, one SMSS); the first stage
        // after it starts with K = 0 and W_max = W_est = cwnd_epoch.
        self.congestion_event(flight_size);
        self.cwnd = self.smss32();
        self.w_max = 0;
        self.phase = Phase::NoEpoch;
    }

    fn on_spurious_recovery(&mut self, _flight_size: usize, _bytes_acked: usize, pipe_prev: usize) {
        // RFC 9438 §4.9: if cwnd < prior_cwnd, restore cwnd, ssthresh,
        // W_max, K, epoch_start and W_est. The stage (K, t_epoch, W_est)
        // was kept through the recovery; ssthresh comes back as RFC 4015
        // §3.2 step (5)'s pipe_prev = max(FlightSize, ssthresh) at the
        // event ("arbitrarily high" if the event ended a slow start).
        if self.cwnd < self.cwnd_prior {
            self.cwnd = self.cwnd_prior;
            self.w_max = self.w_max_prior;
            self.ssthresh = if pipe_prev == usize::MAX {
                NO_SSTHRESH
            } else {
                clamp_u32(pipe_prev)
                    .min(NO_SSTHRESH - 1)
                    .max(2 * self.smss32())
            };
        }
        self.credit = 0;
    }

    fn on_idle_restart(&mut self, idle: Duration, iw: usize) {
        // RFC 5681 §4.1: cwnd = min(RW, cwnd), RW = min(IW, cwnd).
        let rw = clamp_u32(restart_window(self.cwnd as usize, iw));
        if rw < self.cwnd {
            // Slow start back to ssthresh, then a new stage.
            self.cwnd = rw;
            self.credit = 0;
            if let Phase::Epoch(_) = self.phase {
                self.phase = Phase::NoEpoch;
            }
        } else if let Phase::Epoch(e) = &mut self.phase {
            // RFC 9438 §5.8: the idle period is no part of t, so the
            // window resumes where the curve left it.
            e.start_ms = e
                .start_ms
                .wrapping_add(idle.as_millis().min(u64::from(EPOCH_MAX_MS)) as u32);
        }
    }

    fn set_initial_window(&mut self, iw: usize) {
        // RFC 5681 §3.1 / RFC 6928 §2; slow start (under HyStart++) goes on.
        self.cwnd = clamp_u32(iw).clamp(self.smss32(), CWND_MAX);
        self.credit = 0;
    }

    fn on_ecn_echo(&mut self, flight_size: usize) {
        // RFC 9438 §4.6: an ECE is a congestion event like a loss:
        // ssthresh = flight_size · β_cubic, cwnd_prior and W_max as there;
        // cwnd = max(ssthresh, 1 SMSS), here ssthresh itself (never below 2
        // SMSS). Nothing is retransmitted and no recovery will end the
        // event, so the next ACK starts a new stage (§4.2, t_epoch) and
        // nothing is kept for an undo (§4.9 applies to losses).
        self.congestion_event(flight_size);
        self.cwnd = self.ssthresh;
        self.phase = Phase::NoEpoch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::test_ack;
    use crate::seq::SeqNumber;
    use crate::time::Instant;

    const MSS: usize = 1000;

    /// A controller in congestion avoidance after one loss at `w_max`
    /// segments (SACK recovery, then a full ACK with the reduced window
    /// in flight).
    fn after_loss(w_max_segs: usize) -> Cubic {
        let mut c = Cubic::new(MSS);
        c.on_ack(&test_ack(Instant::ZERO, w_max_segs * MSS - c.window()));
        assert_eq!(c.window(), w_max_segs * MSS);
        c.on_sack_recovery(w_max_segs * MSS);
        c.on_recovery_exit(w_max_segs * MSS);
        c
    }

    fn ack_at(ms: u64, bytes: usize, flight: usize, srtt_ms: u64) -> Ack {
        Ack {
            flight,
            srtt: Some(Duration::from_millis(srtt_ms)),
            ..test_ack(Instant::from_millis(ms), bytes)
        }
    }

    #[test]
    fn cube_root_is_exact_and_floored() {
        for y in [0u64, 1, 2, 3, 7, 100, 1000, 2_097_151, 2_642_245] {
            let c = y * y * y;
            assert_eq!(icbrt(c), y, "cbrt({c})");
            if c > 0 {
                assert_eq!(icbrt(c - 1), y - 1, "cbrt({c} - 1)");
            }
            if y < 2_642_245 {
                assert_eq!(icbrt(c + 1), y.max(1).min(y + 1), "cbrt({c} + 1)");
            }
        }
        assert_eq!(icbrt(u64::MAX), 2_642_245);
        // Against f64 over a spread of magnitudes.
        let mut x: u64 = 1;
        while x < u64::MAX / 3 {
            let f = (x as f64).cbrt().floor() as u64;
            let y = icbrt(x);
            assert!(y * y * y <= x && (y + 1) * (y + 1) * (y + 1) > x, "{x}");
            assert!(y.abs_diff(f) <= 1, "{x}");
            x = x * 3 + 7;
        }
    }

    #[test]
    fn k_follows_equation_2() {
        // RFC 9438 §4.2: K = cbrt((W_max - cwnd_epoch) / C), W in segments,
        // C = 0.4: W_max = 100, cwnd_epoch = 70 -> cbrt(75) = 4.2172 s.
        assert_eq!(k_ms(30 * 1000, 1000), 4217);
        // The MSS is the unit: the same gap in 1460-byte segments.
        assert_eq!(k_ms(30 * 1460, 1460), 4217);
        // W_max = 1000, β = 0.7: cbrt(300 / 0.4) = 9.0856 s.
        assert_eq!(k_ms(300 * 1460, 1460), 9085);
        assert_eq!(k_ms(0, 1460), 0);
        // The largest gap fits.
        let k = k_ms(CWND_MAX, 1);
        assert!(k > 600_000, "{k}");
    }

    #[test]
    fn w_cubic_matches_the_rfc_formula() {
        // W_max = 100 segments of 1460 bytes, cwnd_epoch = 70 segments.
        let smss = 1460u16;
        let w_max = 100 * 1460;
        let k = k_ms(30 * 1460, smss);
        let k_s = (30.0f64 / 0.4).cbrt();
        for t in [
            0u32, 500, 1000, 2000, 4000, 4217, 5000, 8000, 12_000, 20_000,
        ] {
            let ts = f64::from(t) / 1000.0;
            let want_segs = 0.4 * (ts - k_s).powi(3) + 100.0;
            let got = f64::from(w_cubic(t, k, w_max, smss)) / 1460.0;
            // K is floored to the ms: at most 3·C·(t-K)²·1 ms off.
            let tol = 0.01 + 1.2 * (ts - k_s).powi(2) * 0.001;
            assert!(
                (got - want_segs).abs() <= tol,
                "t={t}: {got} vs {want_segs}"
            );
        }
        // Starts at cwnd_epoch, reaches W_max at K.
        assert!((f64::from(w_cubic(0, k, w_max, smss)) / 1460.0 - 70.0).abs() < 0.01);
        assert_eq!(w_cubic(k, k, w_max, smss), w_max);
        // Far in the past it floors at zero; far ahead at CWND_MAX.
        assert_eq!(w_cubic(0, 1_000_000, w_max, smss), 0);
        assert_eq!(w_cubic(u32::MAX, 0, w_max, smss), CWND_MAX);
    }

    #[test]
    fn multiplicative_decrease_and_fast_convergence() {
        let mut c = Cubic::new(MSS);
        c.on_ack(&test_ack(Instant::ZERO, 96_000)); // cwnd 100 segments
        c.on_fast_retransmit(100_000);
        // RFC 9438 §4.6: ssthresh = 0.7 flight; W_max = cwnd (first event).
        assert_eq!(c.ssthresh(), 70_000);
        assert_eq!(c.window(), 73_000); // + 3 SMSS (RFC 5681 §3.2)
        assert_eq!(c.w_max, 100_000);
        c.on_recovery_exit(70_000);
        assert_eq!(c.window(), 70_000);
        // A second event below W_max: fast convergence, W_max = 0.85 cwnd.
        c.on_sack_recovery(70_000);
        assert_eq!(c.w_max, 59_500);
        assert_eq!((c.window(), c.ssthresh()), (49_000, 49_000));
        // Above W_max: W_max = cwnd.
        let mut c = after_loss(100);
        c.cwnd = 120_000;
        c.on_sack_recovery(120_000);
        assert_eq!(c.w_max, 120_000);
        // A window larger than the flight: W_max is the flight (the
        // window in use), ssthresh 0.7 of it.
        let mut c = Cubic::with_window(300_000, usize::MAX, MSS);
        c.on_sack_recovery(100_000);
        assert_eq!(
            (c.w_max, c.ssthresh(), c.cwnd_prior),
            (100_000, 70_000, 300_000)
        );
        // Small flights keep ssthresh at 2 SMSS.
        c.on_sack_recovery(1000);
        assert_eq!(c.ssthresh(), 2 * MSS);
    }

    #[test]
    fn concave_then_convex_growth_reaches_w_max_after_k() {
        // W_max = 100 segments, cwnd_epoch = 70: K = 4.217 s. RTT 100 ms,
        // a full window acknowledged per RTT, one segment per ACK.
        let mut c = after_loss(100);
        assert_eq!(c.window(), 70_000);
        let rtt = 100;
        let mut t = 0;
        let mut at_half_k = 0;
        let mut reached = None;
        while t <= 8000 {
            let w = c.window();
            for _ in 0..w / MSS {
                c.on_ack(&ack_at(t, MSS, w, rtt));
            }
            if t == 2100 {
                at_half_k = c.window();
            }
            if reached.is_none() && c.window() >= 100_000 {
                reached = Some(t);
            }
            t += rtt;
        }
        // Concave: most of the way back by K/2 (NewReno, one segment per
        // RTT, would be at 91; W_cubic(2.1 s + RTT) = 96.7).
        assert!((95_000..100_000).contains(&at_half_k), "{at_half_k}");
        // W_max reached about K after the stage began (the target looks
        // one RTT ahead).
        let r = reached.expect("reached W_max");
        assert!((4000..=4300).contains(&r), "reached at {r} ms");
        // Convex beyond: W_cubic(8 s) = 100 + 0.4 (8 - 4.217)³ = 121.7.
        let w = c.window() as f64 / 1000.0;
        assert!((118.0..126.0).contains(&w), "{w}");
    }

    #[test]
    fn reno_friendly_region() {
        // A short RTT and a small W_max: Reno's line (W_est) is above the
        // cubic curve, and cwnd follows W_est (RFC 9438 §4.3).
        let mut c = after_loss(20);
        assert_eq!(c.window(), 14_000);
        let rtt = 1;
        let mut t = 0;
        // 200 RTTs = 0.2 s: W_cubic(0.2 s) is still about 14.1 segments
        // (K = cbrt(6/0.4) = 2.47 s), while W_est grows by α_cubic = 9/17
        // segment per RTT until it reaches cwnd_prior = 20, then by 1.
        let mut w_at = Vec::new();
        while t < 200 {
            let w = c.window();
            for _ in 0..w / MSS {
                c.on_ack(&ack_at(t, MSS, w, rtt));
            }
            t += rtt;
            w_at.push(c.window());
        }
        let Phase::Epoch(ep) = c.phase else {
            panic!("in a stage")
        };
        assert_eq!(c.window(), ep.w_est as usize);
        // 14 -> 20 at 9/17 per RTT takes about 11.3 RTTs...
        let to_prior = w_at.iter().position(|&w| w >= 20_000).unwrap();
        assert!((10..=13).contains(&to_prior), "{to_prior}");
        // ...then one segment per RTT (Reno's rate, α = 1).
        let after = w_at[to_prior + 50];
        assert!((69_000..=71_500).contains(&after), "{after}");
    }

    #[test]
    fn application_limited_window_does_not_grow() {
        let mut c = after_loss(100);
        for i in 0..200 {
            // Only 30 segments in flight: the window is not in use.
            c.on_ack(&ack_at(i * 100, 30 * MSS, 30 * MSS, 100));
        }
        assert_eq!(c.window(), 70_000);
    }

    #[test]
    fn rto_then_k_zero_from_the_new_stage() {
        let mut c = after_loss(100);
        c.on_ack(&ack_at(0, MSS, 70_000, 100));
        c.on_retransmit_timeout(80_000);
        // RFC 9438 §4.8: ssthresh = 0.7 flight, cwnd = 1 SMSS.
        assert_eq!((c.window(), c.ssthresh()), (MSS, 56_000));
        // Slow start up to ssthresh...
        c.on_ack(&ack_at(1000, 55_000, 80_000, 100));
        assert_eq!(c.window(), 56_000);
        // ...then a stage with K = 0 and W_max = cwnd_epoch: convex growth
        // from 56 segments at once, W_cubic(t) = 56 + 0.4 t³.
        c.on_ack(&ack_at(1000, MSS, 56_000, 100));
        let Phase::Epoch(ep) = c.phase else {
            panic!("in a stage")
        };
        // W_est = cwnd_epoch, plus this ACK's 9/17 · 1000 · 1000 / 56000.
        assert_eq!((ep.k_ms, c.w_max, ep.w_est), (0, 56_000, 56_009));
        assert_eq!(ep.start_ms, 1000);
        let mut t = 1000;
        while t < 7000 {
            let w = c.window();
            for _ in 0..w / MSS {
                c.on_ack(&ack_at(t, MSS, w, 100));
            }
            t += 100;
        }
        // 5.9 s into the stage, cwnd follows the target W_cubic(t + RTT) =
        // 56 + 0.4 · 6³ = 142.4 segments (Reno's line is near 100).
        let w = c.window() as f64 / 1000.0;
        assert!((136.0..=147.0).contains(&w), "{w}");
        let Phase::Epoch(ep) = c.phase else {
            panic!("in a stage")
        };
        assert!(ep.w_est < 110_000, "{}", ep.w_est);
    }

    #[test]
    fn spurious_event_restores_the_stage() {
        let mut c = after_loss(100);
        for t in (0..2000).step_by(100) {
            let w = c.window();
            for _ in 0..w / MSS {
                c.on_ack(&ack_at(t, MSS, w, 100));
            }
        }
        let before = c;
        let Phase::Epoch(ep) = before.phase else {
            panic!("in a stage")
        };
        c.on_fast_retransmit(c.window());
        assert!(c.window() < before.window());
        // RFC 9438 §4.9: everything back, the stage included.
        c.on_spurious_recovery(c.window(), MSS, before.window());
        assert_eq!(c.window(), before.window());
        assert_eq!(c.w_max, before.w_max);
        assert_eq!(c.ssthresh(), before.window());
        assert_eq!(c.phase, Phase::Epoch(ep));
        // A spurious event that ended the initial slow start gives slow
        // start back, HyStart++ included.
        let mut c = Cubic::new(MSS);
        c.on_ack(&test_ack(Instant::ZERO, 14_000));
        c.on_sack_recovery(24_000);
        c.on_spurious_recovery(20_000, MSS, usize::MAX);
        assert_eq!((c.window(), c.ssthresh()), (24_000, usize::MAX));
        assert!(matches!(c.phase, Phase::SlowStart(_)));
    }

    #[test]
    fn idle_restart() {
        // A window above the restart window: back to IW, a new stage later.
        let mut c = after_loss(100);
        c.on_ack(&ack_at(0, MSS, 70_000, 100));
        c.on_idle_restart(Duration::from_secs(5), 10 * MSS);
        assert_eq!(c.window(), 10 * MSS);
        assert_eq!(c.phase, Phase::NoEpoch);
        // A window at most IW: the idle time is taken out of t (RFC 9438
        // §5.8).
        let mut c = Cubic::with_window(3000, 2000, MSS);
        c.on_ack(&ack_at(1000, MSS, 3000, 100));
        let Phase::Epoch(ep) = c.phase else {
            panic!("in a stage")
        };
        let w = c.window();
        c.on_idle_restart(Duration::from_millis(2500), 10 * MSS);
        assert_eq!(c.window(), w);
        let Phase::Epoch(shifted) = c.phase else {
            panic!("in a stage")
        };
        assert_eq!(shifted.start_ms, ep.start_ms + 2500);
    }

    #[test]
    fn hystart_exit_enters_avoidance_with_k_zero() {
        // Rounds of 8 ACKs of one segment each; the RTT rises from 50 to
        // 60 ms in round 3 (CSS), then 5 rounds of CSS end slow start.
        let mut c = Cubic::new(MSS);
        let mut una = 0u32;
        let mut now = 0u64;
        // The first ACK of a round acknowledges the previous round's end.
        let mut round = |c: &mut Cubic, rtt: u64| {
            let start = una;
            una += 8 * MSS as u32;
            let before = c.window();
            for i in 0..8 {
                c.on_ack(&Ack {
                    ack: SeqNumber(start + i * MSS as u32),
                    snd_max: SeqNumber(una),
                    rtt: Some(Duration::from_millis(rtt)),
                    srtt: Some(Duration::from_millis(rtt)),
                    ..test_ack(Instant::from_millis(now), MSS)
                });
            }
            now += rtt;
            c.window() - before
        };
        assert_eq!(round(&mut c, 50), 8000);
        assert_eq!(round(&mut c, 50), 8000);
        // The 8th sample of the round shows the rise: that ACK already
        // grows at a quarter.
        assert_eq!(round(&mut c, 60), 7000 + 250);
        for _ in 0..4 {
            assert_eq!(round(&mut c, 60), 2000);
        }
        assert_eq!(c.ssthresh(), usize::MAX);
        let w = c.window();
        round(&mut c, 60);
        // CSS_ROUNDS done: ssthresh = cwnd, congestion avoidance, K = 0.
        assert_eq!(c.ssthresh(), w);
        assert_eq!(c.cwnd_prior as usize, w);
        let Phase::Epoch(ep) = c.phase else {
            panic!("in a stage")
        };
        assert_eq!((ep.k_ms, c.w_max as usize), (0, w));
    }
}
