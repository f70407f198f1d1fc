//! HyStart++ (RFC 9406): leaving the initial slow start on a rise of the
//! round-trip time instead of a loss, through Conservative Slow Start (CSS);
//! and beside it HyStart's ACK-train heuristic (Ha and Rhee, "Taming the
//! elephants: New TCP slow start", Computer Networks 55(9), 2011, §3.1),
//! which Linux's CUBIC runs too.
//!
//! Why both. A rise of the round's minimum RTT shows a queue only one
//! round after the window passed the path's BDP: a round's first segments
//! left while the previous round's queue had drained, so its minimum RTT is
//! the base RTT until the window is about twice the BDP. With a queue of
//! one BDP (a common router buffer) that is already its overflow, and
//! CSS's five rounds at 1.25x each (RFC 9406 §4.3) add to it: on the test
//! bed's 50 Mbit/s, 20 ms path, flowlane's window reached 3.2 times the BDP
//! and lost about 200 segments, where a Linux sender left slow start
//! without a loss. The ACK train measures the pipe instead: the ACKs of a
//! round arrive spaced by the bottleneck, so once they keep coming for half
//! the minimum RTT, the previous round's window filled half the pipe and
//! this one (twice that) fills it. RFC 9406 §1 leaves the heuristic out
//! because ACK compression defeats it; that makes it miss (the ACKs bunch
//! up and the train looks short), not fire early, so running it beside
//! the delay check only adds exits the path justifies.
//!
//! This is only the state machine (rounds, minimum RTTs, the exits and the
//! spurious-exit checks); the window arithmetic stays with the congestion
//! controller, which asks [`HyStart::on_ack`] how to grow.

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
/// ACKs this close (µs) belong to one train (Ha and Rhee §3.1; Linux's
/// `hystart_ack_delta_us`): a longer gap ends the round's train. On short
/// paths the bound is an eighth of the minimum RTT instead
/// ([`ACK_TRAIN_GAP_RTT_DIVISOR`]).
const ACK_TRAIN_GAP_US: u32 = 2_000;
/// A gap of more than minimum RTT / 8 ends a train too: between the trains
/// of a window below the BDP the pipe idles for the rest of the round
/// trip, and on a 2 ms path that idle time is shorter than
/// [`ACK_TRAIN_GAP_US`], so without this every round would look like one
/// train and slow start would end at a fraction of the BDP.
const ACK_TRAIN_GAP_RTT_DIVISOR: u32 = 8;
/// Windows below this many segments leave slow start on no ACK train
/// (Linux's `hystart_low_window`): on short paths the train of even a small
/// window outlasts half the minimum RTT.
const ACK_TRAIN_LOW_WINDOW: u32 = 16;

/// What the ACK-train heuristic needs of an ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TrainSample {
    /// The ACK's arrival, in µs of the caller's clock (wrapping).
    pub now_us: u32,
    /// The connection's minimum RTT, µs, if known at microsecond
    /// precision (the millisecond timestamps of RFC 7323 would make it 0 on
    /// a LAN); without it, only RFC 9406 decides.
    pub min_rtt_us: Option<u32>,
    /// The congestion window, in segments.
    pub cwnd_segments: u32,
}

impl TrainSample {
    /// The µs value of `t` on the wrapping clock a [`TrainSample`] uses.
    pub(crate) fn micros(t: crate::time::Instant) -> u32 {
        (t.as_nanos() / 1000) as u32
    }
}

/// How the window may grow on this ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Growth {
    /// Standard slow start (RFC 5681 §3.1).
    SlowStart,
    /// Conservative Slow Start: the slow-start increase divided by
    /// [`CSS_GROWTH_DIVISOR`] (RFC 9406 §4.2).
    Conservative,
    /// CSS lasted [`CSS_ROUNDS`] rounds (RFC 9406 §4.2), or a round's ACK
    /// train outlasted half the minimum RTT: enter congestion avoidance
    /// with ssthresh = cwnd.
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
    /// When the round began (its first ACK), µs (wrapping).
    round_start_us: u32,
    /// The last ACK of the round's train so far, µs (wrapping).
    train_last_us: u32,
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
            round_start_us: 0,
            train_last_us: 0,
            started: false,
        }
    }

    /// Whether the connection is in Conservative Slow Start.
    pub(crate) fn in_css(&self) -> bool {
        self.css_rounds > 0
    }

    /// An ACK that acknowledged new data in slow start: `ack` is the new
    /// SND.UNA, `snd_max` the highest sequence number sent, `rtt` this
    /// ACK's RTT sample if it gave one, `train` what the ACK-train
    /// heuristic needs. Returns how the window may grow.
    pub(crate) fn on_ack(
        &mut self,
        ack: SeqNumber,
        snd_max: SeqNumber,
        rtt: Option<Duration>,
        train: TrainSample,
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
            self.round_start_us = train.now_us;
            self.train_last_us = train.now_us;
            if self.in_css() {
                // RFC 9406 §4.2: "If CSS_ROUNDS rounds are complete, enter
                // congestion avoidance".
                if self.css_rounds >= CSS_ROUNDS {
                    return Growth::Avoidance;
                }
                self.css_rounds += 1;
            }
        }
        // The ACK train (Ha and Rhee §3.1): ACKs no more than
        // ACK_TRAIN_GAP_US (or min RTT / 8) apart since the round began,
        // for longer than half the minimum RTT, show the pipe full:
        // congestion avoidance at once (ssthresh = cwnd, as Linux), in CSS
        // too.
        if let Some(min_rtt) = train.min_rtt_us {
            let gap = ACK_TRAIN_GAP_US.min(min_rtt / ACK_TRAIN_GAP_RTT_DIVISOR);
            if train.now_us.wrapping_sub(self.train_last_us) <= gap {
                self.train_last_us = train.now_us;
                let length = train.now_us.wrapping_sub(self.round_start_us);
                if train.cwnd_segments >= ACK_TRAIN_LOW_WINDOW && length > min_rtt / 2 {
                    return Growth::Avoidance;
                }
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
                NO_TRAIN,
            );
            if g == Growth::Avoidance {
                break;
            }
        }
        g
    }

    /// An ACK the ACK-train heuristic cannot judge (no minimum RTT).
    const NO_TRAIN: TrainSample = TrainSample {
        now_us: 0,
        min_rtt_us: None,
        cwnd_segments: 100,
    };

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
                NO_TRAIN,
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

    /// Feeds one round of ACKs `spacing_us` apart from `start_us` (the first
    /// begins the round), for a window of `cwnd` segments and a minimum RTT
    /// of `min_rtt_us`; returns the index of the ACK that left slow start.
    fn train(
        h: &mut HyStart,
        seq: &mut u32,
        start_us: u32,
        spacing_us: &[u32],
        cwnd: u32,
        min_rtt_us: Option<u32>,
    ) -> Option<usize> {
        let n = spacing_us.len() as u32 + 1;
        let (first, end) = (*seq, *seq + n * 1000);
        *seq = end;
        let mut now = start_us;
        for i in 0..n as usize {
            if i > 0 {
                now = now.wrapping_add(spacing_us[i - 1]);
            }
            let t = TrainSample {
                now_us: now,
                min_rtt_us,
                cwnd_segments: cwnd,
            };
            let g = h.on_ack(SeqNumber(first + i as u32 * 1000), SeqNumber(end), None, t);
            if g == Growth::Avoidance {
                return Some(i);
            }
        }
        None
    }

    #[test]
    fn an_ack_train_past_half_the_minimum_rtt_ends_slow_start() {
        // 20 ms minimum RTT, ACKs 250 µs apart (a 50 Mbit/s bottleneck
        // spacing 1514-byte frames about 240 µs): the 41st ACK of the round
        // is 10.25 ms after the first, past half the minimum RTT.
        let mut h = HyStart::new();
        let mut seq = 0;
        assert_eq!(
            train(&mut h, &mut seq, 0, &[250; 39], 40, Some(20_000)),
            None
        );
        assert_eq!(
            train(&mut h, &mut seq, 30_000, &[250; 80], 80, Some(20_000)),
            Some(41)
        );
        // The wrapping clock: the same round across the wrap.
        let mut h = HyStart::new();
        let mut seq = 0;
        let start = u32::MAX - 5_000;
        assert_eq!(
            train(&mut h, &mut seq, start, &[250; 80], 80, Some(20_000)),
            Some(41)
        );
    }

    #[test]
    fn a_gap_ends_the_train_and_small_or_unmeasured_windows_never_exit() {
        let mut h = HyStart::new();
        let mut seq = 0;
        // A 2.5 ms gap after 20 ACKs (5 ms) ends the round's train: the
        // 40 ACKs after it, however long they go on, do not count.
        let mut gaps = vec![250; 19];
        gaps.push(2_500);
        gaps.extend([250; 40]);
        assert_eq!(train(&mut h, &mut seq, 0, &gaps, 80, Some(20_000)), None);
        // A gap of exactly ACK_TRAIN_GAP_US does not end it: 4.75 ms, the
        // gap, then 14 more ACKs reach 10.25 ms.
        let mut gaps = vec![250; 19];
        gaps.push(ACK_TRAIN_GAP_US);
        gaps.extend([250; 40]);
        assert_eq!(
            train(&mut h, &mut seq, 100_000, &gaps, 80, Some(20_000)),
            Some(34)
        );
        // Below ACK_TRAIN_LOW_WINDOW segments, or with no microsecond
        // minimum RTT, no train ends slow start.
        let mut h = HyStart::new();
        let mut seq = 0;
        let low = ACK_TRAIN_LOW_WINDOW - 1;
        assert_eq!(
            train(&mut h, &mut seq, 0, &[250; 80], low, Some(20_000)),
            None
        );
        assert_eq!(train(&mut h, &mut seq, 50_000, &[250; 80], 80, None), None);
    }

    #[test]
    fn on_a_short_path_an_eighth_of_the_minimum_rtt_ends_the_train() {
        // 2 ms minimum RTT: gaps above 250 µs end the train (2 ms would
        // join a window's trains across the idle part of each round trip).
        let mut h = HyStart::new();
        let mut seq = 0;
        assert_eq!(
            train(&mut h, &mut seq, 0, &[300; 20], 40, Some(2_000)),
            None
        );
        // 100 µs apart: past 1 ms on the 11th ACK.
        assert_eq!(
            train(&mut h, &mut seq, 10_000, &[100; 20], 40, Some(2_000)),
            Some(11)
        );
    }
}
