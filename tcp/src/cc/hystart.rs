//! HyStart++ (RFC 9406): leaving the initial slow start on a rise of the
//! round-trip time instead of a loss, through Conservative Slow Start (CSS).
//!
//! This is only the state machine of RFC 9406 §4.2 (rounds, minimum RTTs,
//! the exit and the spurious-exit checks); the window arithmetic stays with
//! the congestion controller, which asks [`HyStart::on_ack`] how to grow.

use crate::seq::SeqNumber;
use crate::time::Duration;

/// RFC 9406 §4.3: MIN_RTT_THRESH = 4 ms (in µs).
const MIN_RTT_THRESH_US: u32 = 4_000;
/// RFC 9406 §4.3: MAX_RTT_THRESH = 16 ms (in µs).
const MAX_RTT_THRESH_US: u32 = 16_000;
/// RFC 9406 §4.3: MIN_RTT_DIVISOR = 8.
const MIN_RTT_DIVISOR: u32 = 8;
/// RFC 9406 §4.3: N_RTT_SAMPLE = 8 RTT samples per round before deciding.
const N_RTT_SAMPLE: u8 = 8;
/// RFC 9406 §4.3: CSS_GROWTH_DIVISOR = 4 (CSS grows a quarter as fast).
pub(crate) const CSS_GROWTH_DIVISOR: u32 = 4;
/// RFC 9406 §4.3: CSS_ROUNDS = 5 rounds of CSS before congestion avoidance.
const CSS_ROUNDS: u8 = 5;
/// An RTT not yet measured in a round ("infinity" in RFC 9406 §4.2).
const NO_RTT: u32 = u32::MAX;

/// How the window may grow on this ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Growth {
    /// Standard slow start (RFC 5681 §3.1).
    SlowStart,
    /// Conservative Slow Start: the slow-start increase divided by
    /// [`CSS_GROWTH_DIVISOR`] (RFC 9406 §4.2).
    Conservative,
    /// CSS lasted [`CSS_ROUNDS`] rounds: enter congestion avoidance with
    /// ssthresh = cwnd (RFC 9406 §4.2).
    Avoidance,
}

/// HyStart++ state of one connection's initial slow start (RFC 9406
/// §4.2). RTTs are kept in microseconds (saturating at about 71 minutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HyStart {
    /// `windowEnd`: the round ends when this sequence number is
    /// acknowledged; SND.NXT (the highest sequence number sent) when the
    /// round started.
    window_end: SeqNumber,
    /// `lastRoundMinRTT`.
    last_round_min_rtt: u32,
    /// `currentRoundMinRTT`.
    current_round_min_rtt: u32,
    /// `cssBaselineMinRtt`.
    css_baseline_min_rtt: u32,
    /// `rttSampleCount` of the current round.
    rtt_sample_count: u8,
    /// Rounds begun in CSS; 0 while in standard slow start.
    css_rounds: u8,
    /// Whether a round has begun (`windowEnd` is set).
    started: bool,
}

impl Default for HyStart {
    fn default() -> Self {
        HyStart::new()
    }
}

fn micros(d: Duration) -> u32 {
    (d.as_nanos() / 1000).min(u64::from(NO_RTT - 1)) as u32
}

impl HyStart {
    /// RFC 9406 §4.2 initialization: both minimum RTTs infinite, no round.
    pub(crate) const fn new() -> Self {
        HyStart {
            window_end: SeqNumber(0),
            last_round_min_rtt: NO_RTT,
            current_round_min_rtt: NO_RTT,
            css_baseline_min_rtt: NO_RTT,
            rtt_sample_count: 0,
            css_rounds: 0,
            started: false,
        }
    }

    /// Whether the connection is in Conservative Slow Start.
    pub(crate) fn in_css(&self) -> bool {
        self.css_rounds > 0
    }

    /// An ACK that acknowledged new data in slow start: `ack` is the new
    /// SND.UNA, `snd_max` the highest sequence number sent, `rtt` this
    /// ACK's RTT sample if it gave one. Returns how the window may grow.
    pub(crate) fn on_ack(
        &mut self,
        ack: SeqNumber,
        snd_max: SeqNumber,
        rtt: Option<Duration>,
    ) -> Growth {
        // RFC 9406 §4.2: rounds are delimited by sequence numbers; a round
        // ends when windowEnd is acknowledged, and the next one starts with
        // lastRoundMinRTT = currentRoundMinRTT, currentRoundMinRTT =
        // infinity, rttSampleCount = 0, windowEnd = SND.NXT.
        if !self.started || ack >= self.window_end {
            self.started = true;
            self.last_round_min_rtt = self.current_round_min_rtt;
            self.current_round_min_rtt = NO_RTT;
            self.rtt_sample_count = 0;
            self.window_end = snd_max;
            if self.in_css() {
                // RFC 9406 §4.2: "If CSS_ROUNDS rounds are complete, enter
                // congestion avoidance".
                if self.css_rounds >= CSS_ROUNDS {
                    return Growth::Avoidance;
                }
                self.css_rounds += 1;
            }
        }
        // RFC 9406 §4.2: keep track of the minimum observed RTT.
        if let Some(r) = rtt {
            self.current_round_min_rtt = self.current_round_min_rtt.min(micros(r));
            self.rtt_sample_count = self.rtt_sample_count.saturating_add(1);
        }
        let decide = self.rtt_sample_count >= N_RTT_SAMPLE
            && self.current_round_min_rtt != NO_RTT
            && self.last_round_min_rtt != NO_RTT;
        if !self.in_css() {
            // RFC 9406 §4.2: RttThresh = max(MIN_RTT_THRESH,
            // min(lastRoundMinRTT / MIN_RTT_DIVISOR, MAX_RTT_THRESH)); a
            // round whose minimum RTT rose by RttThresh ends slow start.
            if decide {
                let thresh = (self.last_round_min_rtt / MIN_RTT_DIVISOR)
                    .clamp(MIN_RTT_THRESH_US, MAX_RTT_THRESH_US);
                if self.current_round_min_rtt >= self.last_round_min_rtt.saturating_add(thresh) {
                    self.css_baseline_min_rtt = self.current_round_min_rtt;
                    self.css_rounds = 1;
                    return Growth::Conservative;
                }
            }
            Growth::SlowStart
        } else {
            // RFC 9406 §4.2: a CSS round whose minimum RTT fell below the
            // baseline shows that the exit was spurious: back to slow
            // start (with HyStart++).
            if decide && self.current_round_min_rtt < self.css_baseline_min_rtt {
                self.css_baseline_min_rtt = NO_RTT;
                self.css_rounds = 0;
                return Growth::SlowStart;
            }
            Growth::Conservative
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one round of `samples` ACKs with RTT `rtt_ms` from `*seq`,
    /// one segment of 1000 bytes each; returns the last growth. The first
    /// ACK acknowledges the previous round's windowEnd (so it begins this
    /// round) and the round's windowEnd is `samples` segments on.
    fn round(h: &mut HyStart, seq: &mut u32, samples: u32, rtt_ms: u64) -> Growth {
        let start = *seq;
        let end = start + samples * 1000;
        *seq = end;
        let mut g = Growth::SlowStart;
        for i in 0..samples {
            g = h.on_ack(
                SeqNumber(start + i * 1000),
                SeqNumber(end),
                Some(Duration::from_millis(rtt_ms)),
            );
            if g == Growth::Avoidance {
                break;
            }
        }
        g
    }

    #[test]
    fn rtt_increase_enters_css_then_avoidance() {
        let mut h = HyStart::new();
        let mut seq = 0;
        // Rounds at 40 ms: no exit (nothing to compare the first with,
        // then no increase).
        for _ in 0..3 {
            assert_eq!(round(&mut h, &mut seq, 10, 40), Growth::SlowStart);
        }
        // 40 ms / 8 = 5 ms threshold: 44 ms is not enough.
        assert_eq!(round(&mut h, &mut seq, 10, 44), Growth::SlowStart);
        assert!(!h.in_css());
        // Relative to the 44 ms round (threshold 5.5 ms), 50 ms is enough:
        // CSS, on the N_RTT_SAMPLE-th sample of the round.
        let (start, end) = (seq, seq + 10_000);
        seq = end;
        let mut first_css = None;
        for i in 0..10 {
            let g = h.on_ack(
                SeqNumber(start + i * 1000),
                SeqNumber(end),
                Some(Duration::from_millis(50)),
            );
            if g == Growth::Conservative && first_css.is_none() {
                first_css = Some(i + 1);
            }
        }
        assert_eq!(first_css, Some(u32::from(N_RTT_SAMPLE)));
        assert!(h.in_css());
        // CSS_ROUNDS rounds of CSS (the one it began in counts), then
        // congestion avoidance.
        for _ in 0..4 {
            assert_eq!(round(&mut h, &mut seq, 10, 50), Growth::Conservative);
        }
        assert_eq!(round(&mut h, &mut seq, 10, 50), Growth::Avoidance);
    }

    #[test]
    fn rtt_falling_back_returns_to_slow_start() {
        let mut h = HyStart::new();
        let mut seq = 0;
        round(&mut h, &mut seq, 10, 20);
        // 20 ms / 8 < 4 ms: the threshold is MIN_RTT_THRESH.
        assert_eq!(round(&mut h, &mut seq, 10, 23), Growth::SlowStart);
        assert_eq!(round(&mut h, &mut seq, 10, 28), Growth::Conservative);
        assert_eq!(round(&mut h, &mut seq, 10, 28), Growth::Conservative);
        // The queue drained: below the 28 ms baseline, slow start again.
        assert_eq!(round(&mut h, &mut seq, 10, 25), Growth::SlowStart);
        assert!(!h.in_css());
        // ...and HyStart++ still runs.
        assert_eq!(round(&mut h, &mut seq, 10, 25), Growth::SlowStart);
        assert_eq!(round(&mut h, &mut seq, 10, 40), Growth::Conservative);
    }

    #[test]
    fn few_samples_decide_nothing() {
        let mut h = HyStart::new();
        let mut seq = 0;
        round(&mut h, &mut seq, 7, 10);
        // Seven samples per round (< N_RTT_SAMPLE): even a doubling of
        // the RTT is not acted on.
        assert_eq!(round(&mut h, &mut seq, 7, 100), Growth::SlowStart);
        // The high threshold caps at MAX_RTT_THRESH: 200 ms -> +16 ms.
        let mut h = HyStart::new();
        let mut seq = 0;
        round(&mut h, &mut seq, 8, 200);
        assert_eq!(round(&mut h, &mut seq, 8, 215), Growth::SlowStart);
        assert_eq!(round(&mut h, &mut seq, 8, 231), Growth::Conservative);
    }
}
