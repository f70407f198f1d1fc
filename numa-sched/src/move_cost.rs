//! What a bucket move costs, learned from the moves made: a robust running fit of each
//! move's measured duration against the connections it carried, bounded, with the
//! policy's configured costs as the prior.
//!
//! The rebalancing policy ([`crate::rebalance`]) prices a move at a fixed cost plus a cost
//! per connection ([`MoveCost`]) and makes it only if the load it takes off the busier core
//! is worth more ([`crate::rebalance::RebalanceConfig::cost_horizon`]). The configured
//! prices (20 µs + 2 µs a connection, the design's targets) are what a move costs on a quiet
//! machine; session 58's soak on a shared 2-vCPU host measured moves of 12–22 ms (median),
//! p90 60–84 ms, and a policy that underprices moves moves too often under a skew that
//! moving cannot fix. [`MoveCostModel`] is the learning, pure like the policy: the caller
//! (the rebalancing loop, which sees each move's report) feeds it each move's connections
//! and duration ([`MoveCostModel::observe`]) and passes its [`MoveCostModel::estimate`] in
//! the policy's snapshot ([`crate::rebalance::LoadSnapshot::move_cost`]).
//!
//! The fit: over the last [`WINDOW`] moves, the Theil–Sen estimator (H. Theil 1950,
//! P. K. Sen 1968) in its weighted form (L. A. Jaeckel 1972, G. L. Sievers 1978): the slope
//! is the median of the slopes between every two moves with different connection counts,
//! each pair weighing the difference of its counts, the intercept the median of each
//! move's duration less the slope's part. Half the moves can be outliers (a move whose
//! worker was preempted for 400 ms) without moving it far. With few moves the estimate
//! leans on the prior: each part is `(k × prior + n × fit) / (k + n)` with `k` =
//! [`PRIOR_WEIGHT`] and `n` what the moves are worth to it: their number for the fixed
//! part; for the slope, each move as far as its connection count lies from the others'
//! mean, fully from [`SLOPE_SPREAD`] connections, as the square of the distance below
//! (moves of one or two connections, whose durations jitter by milliseconds, would
//! otherwise make a per-connection price of milliseconds). Each part is bounded by the
//! caller's ceiling, so that a host where moves took a long while once does not price
//! every move out for good.
//!
//! The moves age: each weighs `e^(−age / τ)` (τ: the model's memory, 60 s by default,
//! [`crate::rebalance::RebalanceConfig::move_cost_memory`]; the age from the time the
//! caller passes with each move and each estimate: this crate reads no clock), in the
//! medians (weighted medians; pairs weigh the product of their moves' weights) and in
//! `n`. All moves age alike, so the fitted line stays and only its weight against the
//! prior falls: while no move is made, the estimate goes back to the prior (a full window
//! of 64 moves weighs as much as the prior after τ × ln 16, 2.8 τ). Without it a high price
//! learned on a busy host would stay once the host quietened, for few moves are then
//! made to teach it otherwise.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

/// The moves the fit looks at: the latest ones (older ones are forgotten, so that the
/// estimate follows a host whose load changes). 64 moves: eight seconds of moves at the
/// policy's long-run rate, and 2 016 pairs for the slope.
pub const WINDOW: usize = 64;

/// How many moves the prior counts as: after that many moves the estimate is halfway
/// between the prior and what the moves showed.
pub const PRIOR_WEIGHT: f64 = 4.0;

/// How far (in connections) a move's count must lie from the moves' mean for the move to
/// count fully for the per-connection price (nearer ones count as the square of their
/// distance over it; see the module's documentation). Eight: buckets of one or two
/// connections, the common kind, never make a slope by themselves.
pub const SLOPE_SPREAD: f64 = 8.0;

/// The default memory τ of [`MoveCostModel`]: a move's weight falls by `e` in this time.
/// One minute: a host's load changes over minutes, and the policy's long-run rate (8 moves
/// a second) refills a window in 8 s while moves are being made.
pub const DEFAULT_MEMORY: Duration = Duration::from_secs(60);

/// What one bucket move costs, in the unit of the policy's snapshot (nanoseconds by the
/// loop's snapshots): `fixed + per_connection × connections`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MoveCost {
    /// The cost of a move with no connection (table write, forwarding set-up, draining).
    pub fixed: u64,
    /// The cost of each connection the move carries.
    pub per_connection: u64,
}

impl MoveCost {
    /// The cost of a move carrying `connections` connections (saturating).
    #[must_use]
    pub fn of(&self, connections: u32) -> u64 {
        self.fixed
            .saturating_add(self.per_connection.saturating_mul(u64::from(connections)))
    }

    /// Each part at most `ceiling`'s.
    #[must_use]
    pub fn min(self, ceiling: MoveCost) -> MoveCost {
        MoveCost {
            fixed: self.fixed.min(ceiling.fixed),
            per_connection: self.per_connection.min(ceiling.per_connection),
        }
    }
}

/// One move observed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Observed {
    connections: u32,
    /// How long it took (the snapshot's unit).
    duration: u64,
    /// When it was observed, on the caller's clock.
    at: Duration,
}

/// The running fit of measured moves (see the module's documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct MoveCostModel {
    prior: MoveCost,
    ceiling: MoveCost,
    /// τ: a move's weight is `e^(−age / τ)`.
    memory: Duration,
    /// The latest moves, at most [`WINDOW`], oldest first.
    moves: VecDeque<Observed>,
    /// Every move observed (for reports).
    observed: u64,
}

impl MoveCostModel {
    /// A model that estimates `prior` until moves are observed, and never more than
    /// `ceiling` (each part; the prior itself is bounded too), whose moves weigh
    /// `e^(−age / memory)` (a zero `memory` is taken as one nanosecond: a move counts only
    /// at the time it was made).
    #[must_use]
    pub fn new(prior: MoveCost, ceiling: MoveCost, memory: Duration) -> Self {
        Self {
            prior: prior.min(ceiling),
            ceiling,
            memory: memory.max(Duration::from_nanos(1)),
            moves: VecDeque::with_capacity(WINDOW),
            observed: 0,
        }
    }

    /// Records a move that carried `connections` connections and took `duration` (the
    /// snapshot's unit), observed at `at` (any monotonic clock, the one
    /// [`MoveCostModel::estimate`] is asked on). The oldest of [`WINDOW`] moves is
    /// forgotten.
    pub fn observe(&mut self, connections: u32, duration: u64, at: Duration) {
        if self.moves.len() == WINDOW {
            self.moves.pop_front();
        }
        self.moves.push_back(Observed {
            connections,
            duration,
            at,
        });
        self.observed = self.observed.saturating_add(1);
    }

    /// Every move observed since the start (the fit uses the latest
    /// [`MoveCostModel::fit_moves`] of them).
    #[must_use]
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// The moves the fit uses: the latest ones, at most [`WINDOW`].
    #[must_use]
    pub fn fit_moves(&self) -> usize {
        self.moves.len()
    }

    /// What the fit's moves weigh at `now` against the prior's [`PRIOR_WEIGHT`]: each
    /// `e^(−age / τ)`, so at most [`MoveCostModel::fit_moves`], and less as they age.
    #[must_use]
    pub fn fit_weight(&self, now: Duration) -> f64 {
        // A fold from +0.0: `Sum` of no f64 is −0.0, which a move line
        // printed as `cost_fit_weight: -0.0` before any move was learned.
        self.weights(now).iter().fold(0.0, |sum, w| sum + w)
    }

    /// The memory τ.
    #[must_use]
    pub fn memory(&self) -> Duration {
        self.memory
    }

    /// Each move's weight at `now`: `e^(−age / τ)` (a move from after `now` weighs 1).
    fn weights(&self, now: Duration) -> Vec<f64> {
        let tau = self.memory.as_secs_f64();
        self.moves
            .iter()
            .map(|m| (-now.saturating_sub(m.at).as_secs_f64() / tau).exp())
            .collect()
    }

    /// The prior: what the estimate is before any move.
    #[must_use]
    pub fn prior(&self) -> MoveCost {
        self.prior
    }

    /// What a move costs at `now` (the clock of [`MoveCostModel::observe`]): the fit of the
    /// latest moves, weighed with the prior by their weight at `now`, bounded by the
    /// ceiling.
    ///
    /// The fitted line (the slope, bounded by 0 and the ceiling, and the intercept under
    /// it) does not change as the moves age, for they all age alike; each part is then
    /// weighed with the prior's by the weight of the moves that informed it, which does.
    #[must_use]
    pub fn estimate(&self, now: Duration) -> MoveCost {
        let weights = self.weights(now);
        let ceiling = self.ceiling;
        let prior = self.prior;
        let total: f64 = weights.iter().sum();
        let (slope, informed) = self.slope(&weights);
        let prior_slope = prior.per_connection as f64;
        // The fit's slope is bounded before it is weighed: a slope of seconds a connection
        // that the prior outweighs must not pass as one of the ceiling's.
        let fit_slope = slope
            .unwrap_or(prior_slope)
            .clamp(0.0, ceiling.per_connection as f64);
        let per_connection =
            blend(prior_slope, fit_slope, informed).clamp(0.0, ceiling.per_connection as f64);
        let line_slope = fit_slope;
        let rest: Vec<(f64, f64)> = self
            .moves
            .iter()
            .zip(&weights)
            .map(|(m, &w)| (m.duration as f64 - line_slope * f64::from(m.connections), w))
            .collect();
        let fixed = match weighted_median(rest) {
            Some(intercept) => blend(prior.fixed as f64, intercept.max(0.0), total),
            None => prior.fixed as f64,
        }
        .clamp(0.0, ceiling.fixed as f64);
        MoveCost {
            fixed: fixed.round() as u64,
            per_connection: per_connection.round() as u64,
        }
    }

    /// The slope: the weighted median of the slopes between moves of different connection
    /// counts, a pair weighing `|Δconnections|` (the weighted Theil–Sen estimator of
    /// L. A. Jaeckel 1972 and G. L. Sievers 1978: a pair whose counts lie far apart
    /// measures the slope better than one a connection apart) times its moves' `weights`.
    /// With it the weight the slope carries against the prior (see
    /// [`MoveCostModel::slope_weight`]). None and 0: no slope (the moves all carried as
    /// many connections, or weigh nothing).
    fn slope(&self, weights: &[f64]) -> (Option<f64>, f64) {
        let mut slopes = Vec::new();
        for (i, a) in self.moves.iter().enumerate() {
            for (j, b) in self.moves.iter().enumerate().skip(i + 1) {
                if a.connections == b.connections {
                    continue;
                }
                let dc = f64::from(b.connections) - f64::from(a.connections);
                let slope = (b.duration as f64 - a.duration as f64) / dc;
                slopes.push((slope, dc.abs() * weights[i] * weights[j]));
            }
        }
        match weighted_median(slopes) {
            Some(slope) => (Some(slope), self.slope_weight(weights)),
            None => (None, 0.0),
        }
    }

    /// What the moves are worth to the slope against the prior's [`PRIOR_WEIGHT`]: each
    /// move its weight times `min(1, ((c − c̄) / SLOPE_SPREAD)²)`, `c̄` the moves' weighted
    /// mean connection count. A slope's variance goes as `σ² / Σ (c − c̄)²`, so moves whose
    /// counts barely differ say little about it however many they are: 64 moves of 1 and
    /// 2 connections are worth a quarter of a move, so that their durations' jitter
    /// (milliseconds) cannot set a per-connection price (microseconds); a move
    /// [`SLOPE_SPREAD`] or more from the mean counts fully. Aging scales it as it scales
    /// every weight.
    fn slope_weight(&self, weights: &[f64]) -> f64 {
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            return 0.0;
        }
        let mean = self
            .moves
            .iter()
            .zip(weights)
            .map(|(m, &w)| w * f64::from(m.connections))
            .sum::<f64>()
            / total;
        self.moves
            .iter()
            .zip(weights)
            .map(|(m, &w)| {
                let d = (f64::from(m.connections) - mean) / SLOPE_SPREAD;
                w * (d * d).min(1.0)
            })
            .sum()
    }
}

/// `(k × prior + n × fit) / (k + n)`, `k` = [`PRIOR_WEIGHT`], `n` the fit's weight.
fn blend(prior: f64, fit: f64, n: f64) -> f64 {
    (PRIOR_WEIGHT * prior + n * fit) / (PRIOR_WEIGHT + n)
}

/// The weighted median of `(value, weight)` pairs: the least value whose weight and the
/// lesser values' reach half the total, or the mean of it and the next value when they
/// make exactly half (so that equal weights give the ordinary median, the mean of the two
/// middle values for an even count). None when nothing weighs anything (pairs of weight 0
/// are left out).
fn weighted_median(mut xs: Vec<(f64, f64)>) -> Option<f64> {
    xs.retain(|&(_, w)| w > 0.0);
    xs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = xs.iter().map(|&(_, w)| w).sum();
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let half = total / 2.0;
    let mut below = 0.0;
    for (i, &(x, w)) in xs.iter().enumerate() {
        below += w;
        if below >= half {
            let exact = (below - half).abs() <= 1e-12 * total;
            return Some(match xs.get(i + 1) {
                Some(&(next, _)) if exact => (x + next) / 2.0,
                _ => x,
            });
        }
    }
    xs.last().map(|&(x, _)| x)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIOR: MoveCost = MoveCost {
        fixed: 20_000,
        per_connection: 2_000,
    };
    const CEILING: MoveCost = MoveCost {
        fixed: 50_000_000,
        per_connection: 1_000_000,
    };

    /// When the tests' moves are made (and estimated, unless a test ages them).
    const T0: Duration = Duration::from_secs(100);

    fn model() -> MoveCostModel {
        MoveCostModel::new(PRIOR, CEILING, DEFAULT_MEMORY)
    }

    #[test]
    fn without_moves_the_estimate_is_the_prior_bounded() {
        assert_eq!(model().estimate(T0), PRIOR);
        // Nothing weighs: +0.0, not the −0.0 a move line printed.
        let w = model().fit_weight(T0);
        assert!(w == 0.0 && w.is_sign_positive(), "{w:?}");
        let low = MoveCost {
            fixed: 10_000,
            per_connection: 1_000,
        };
        assert_eq!(
            MoveCostModel::new(PRIOR, low, DEFAULT_MEMORY).estimate(T0),
            low
        );
    }

    /// Equal weights: the ordinary median. Else the value at half the weight.
    #[test]
    fn weighted_median_of_odd_and_even_counts() {
        let even = |xs: &[f64], w: f64| weighted_median(xs.iter().map(|&x| (x, w)).collect());
        assert_eq!(even(&[3.0, 1.0, 2.0], 1.0), Some(2.0));
        assert_eq!(even(&[4.0, 1.0, 3.0, 2.0], 1.0), Some(2.5));
        assert_eq!(even(&[4.0, 1.0, 3.0, 2.0], 0.3), Some(2.5));
        assert_eq!(even(&[4.0, 1.0], 0.0), None);
        assert_eq!(weighted_median(Vec::new()), None);
        // 1 weighs more than the rest together.
        let heavy = vec![(1.0, 5.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0)];
        assert_eq!(weighted_median(heavy), Some(1.0));
        // Weightless values are left out.
        let light = vec![(1.0, 1.0), (2.0, 1.0), (100.0, 0.0), (3.0, 1.0)];
        assert_eq!(weighted_median(light), Some(2.0));
    }

    #[test]
    fn moves_of_one_connection_count_learn_the_fixed_cost_and_keep_the_prior_slope() {
        let mut m = model();
        for _ in 0..WINDOW {
            m.observe(0, 15_000_000, T0);
        }
        let e = m.estimate(T0);
        assert_eq!(e.per_connection, PRIOR.per_connection);
        // 64 moves against a prior worth 4: 15 ms × 64/68 + 20 µs × 4/68.
        let want = (15_000_000.0 * 64.0 + 20_000.0 * 4.0) / 68.0;
        assert!((e.fixed as f64 - want).abs() < 1.0, "{e:?}");
    }

    #[test]
    fn one_move_weighs_against_the_prior() {
        let mut m = model();
        m.observe(0, 10_020_000, T0);
        // (4 × 20 µs + 1 × 10.02 ms) / 5.
        assert_eq!(m.estimate(T0).fixed, 2_020_000);
        assert_eq!(m.observed(), 1);
    }

    /// xorshift64, for synthetic histories.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Moves of 0 to 200 connections taking 12 ms + 40 µs a connection, ±10 %, and
    /// a quarter of them preempted (200 ms more, whatever they carried): the fit finds
    /// the line within 15 %, where a least-squares fit would follow the outliers.
    /// (Outliers ten times as long lie on a line ten times as steep, and bias the
    /// median slope by ~16 %: 43 984 ns a connection here.)
    #[test]
    fn the_fit_finds_the_line_through_outliers() {
        let mut m = model();
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..WINDOW {
            let c = (next(&mut rng) % 201) as u32;
            let jitter = 0.9 + (next(&mut rng) % 1_000) as f64 / 5_000.0;
            let mut d = (12_000_000.0 + 40_000.0 * f64::from(c)) * jitter;
            if i % 4 == 3 {
                d += 200_000_000.0;
            }
            m.observe(c, d as u64, T0);
        }
        let e = m.estimate(T0);
        // The prior weighs 4 of 68: 12 ms × 64/68 ≈ 11.3 ms.
        let (fixed, per) = (e.fixed as f64, e.per_connection as f64);
        assert!((fixed - 11_300_000.0).abs() < 0.15 * 11_300_000.0, "{e:?}");
        assert!((per - 37_800.0).abs() < 0.15 * 37_800.0, "{e:?}");
    }

    #[test]
    fn the_estimate_follows_the_latest_moves() {
        let mut m = model();
        for _ in 0..WINDOW {
            m.observe(1, 40_000_000, T0);
        }
        for _ in 0..WINDOW {
            m.observe(1, 200_000, T0);
        }
        let e = m.estimate(T0);
        assert!(e.of(1) < 300_000, "{e:?}");
        assert_eq!(m.observed(), 2 * WINDOW as u64);
    }

    #[test]
    fn the_estimate_never_passes_the_ceiling() {
        let mut m = model();
        for c in 0..WINDOW as u32 {
            m.observe(c, u64::MAX / 2 + u64::from(c) * 1_000_000_000_000, T0);
        }
        let e = m.estimate(T0);
        assert_eq!(e.fixed, CEILING.fixed, "{e:?}");
        // The slope's fit is the ceiling's, weighed with the prior by the moves' spread.
        assert!(e.per_connection <= CEILING.per_connection, "{e:?}");
        assert!(e.per_connection > CEILING.per_connection * 9 / 10, "{e:?}");
    }

    /// Moves of 1 and 2 connections whose durations jitter by ±10 ms around 15 ms (the
    /// bed's usual moves): their pairwise slopes are milliseconds a connection either way,
    /// and say nothing of the per-connection price, which stays near the prior; a
    /// one-connection move is priced near 15 ms (the median of 64 draws: within 5 ms). At
    /// most a tenth of the ceiling (half and half: the moves are worth a quarter of a move
    /// to the slope, 60 µs at most); before, the slope took the ceiling.
    #[test]
    fn jitter_among_one_and_two_connection_moves_sets_no_slope() {
        for seed in 1..=20u64 {
            let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for twos in [2, 8, 32] {
                let mut m = model();
                for i in 0..WINDOW {
                    let c = if i % (WINDOW / twos) == 0 { 2 } else { 1 };
                    let jitter = (next(&mut rng) % 20_001) as i64 - 10_000;
                    m.observe(c, (15_000_000 + jitter * 1_000) as u64, T0);
                }
                let e = m.estimate(T0);
                assert!(
                    e.per_connection < 100_000,
                    "seed {seed}, {twos} moves of 2: {e:?}"
                );
                let one = e.of(1) as f64;
                assert!(
                    (one - 15_000_000.0).abs() < 5_000_000.0,
                    "seed {seed}, {twos} moves of 2: {e:?}"
                );
            }
        }
    }

    /// A clean line over 1..=64 connections (8 ms + 50 µs a connection) is still found.
    #[test]
    fn a_clean_line_over_many_connection_counts_is_found() {
        let mut m = model();
        for c in 1..=WINDOW as u32 {
            m.observe(c, 8_000_000 + 50_000 * u64::from(c), T0);
        }
        let e = m.estimate(T0);
        assert!(e.per_connection.abs_diff(50_000) < 5_000, "{e:?}");
        assert!(e.fixed.abs_diff(8_000_000) < 800_000, "{e:?}");
    }

    const TAU: Duration = DEFAULT_MEMORY;

    /// A price learned on a busy host (64 moves of 40 ms) goes back to the prior while no
    /// move is made: by its weight against the prior's, `64 e^(−age/τ)` against 4.
    #[test]
    fn an_old_high_price_goes_back_to_the_prior() {
        let mut m = model();
        for _ in 0..WINDOW {
            m.observe(1, 40_000_000, T0);
        }
        let at = |k: u32| m.estimate(T0 + TAU * k);
        let fixed: Vec<u64> = [0, 1, 3, 10, 40].map(|k| at(k).fixed).to_vec();
        assert!(fixed.windows(2).all(|w| w[1] < w[0]), "{fixed:?}");
        assert!(fixed[0] > 37_000_000, "{fixed:?}");
        // After τ: the moves weigh 64/e. The line's slope is the prior's (one connection
        // count), its intercept 40 ms less 2 µs.
        let w = 64.0 * (-1.0f64).exp();
        let want = (4.0 * 20_000.0 + w * 39_998_000.0) / (4.0 + w);
        assert!((fixed[1] as f64 - want).abs() < 1.0, "{fixed:?} {want}");
        assert!((m.fit_weight(T0 + TAU) - w).abs() < 1e-9);
        // After 10 τ: within 30 µs of the prior; after 40 τ, the prior.
        assert!(fixed[3] < PRIOR.fixed + 30_000, "{fixed:?}");
        assert_eq!(at(40), PRIOR);
        assert_eq!(m.fit_moves(), WINDOW, "the window still holds them");
    }

    /// Fresh moves outweigh old ones in the medians: 4 moves of 1 ms now against 64 of
    /// 40 ms ten memories ago (without aging the median would be 40 ms).
    #[test]
    fn fresh_moves_outweigh_old_ones() {
        let mut m = model();
        for _ in 0..WINDOW - 4 {
            m.observe(1, 40_000_000, T0);
        }
        let now = T0 + TAU * 10;
        for _ in 0..4 {
            m.observe(1, 1_000_000, now);
        }
        let e = m.estimate(now);
        // Prior 4 against the fresh 4: halfway between 20 µs and 1 ms, the old moves'
        // weight (0.003) aside.
        assert!(e.fixed > 490_000 && e.fixed < 600_000, "{e:?}");
        let unaged = MoveCostModel::new(PRIOR, CEILING, Duration::MAX);
        let mut u = unaged;
        for _ in 0..WINDOW - 4 {
            u.observe(1, 40_000_000, T0);
        }
        for _ in 0..4 {
            u.observe(1, 1_000_000, now);
        }
        assert!(u.estimate(now).fixed > 35_000_000, "{:?}", u.estimate(now));
    }

    /// The memory sets how fast: after 10 s, a one-second memory has forgotten what a
    /// minute's still remembers. (Moves of 0 to 56 connections, spread enough to make a
    /// slope, [`SLOPE_SPREAD`].)
    #[test]
    fn the_memory_sets_how_fast_moves_are_forgotten() {
        let mut short = MoveCostModel::new(PRIOR, CEILING, Duration::from_secs(1));
        let mut long = model();
        for m in [&mut short, &mut long] {
            for c in (0..64).step_by(8) {
                m.observe(c, 10_000_000 + u64::from(c) * 1_000_000, T0);
            }
        }
        let later = T0 + Duration::from_secs(10);
        let (s, l) = (short.estimate(later), long.estimate(later));
        assert!(s.fixed < PRIOR.fixed + 1_000, "{s:?}");
        assert!(s.per_connection < PRIOR.per_connection + 100, "{s:?}");
        assert!(l.fixed > 5_000_000 && l.per_connection > 500_000, "{l:?}");
        assert_eq!(short.memory(), Duration::from_secs(1));
        // A zero memory forgets a move as soon as time passes.
        let mut zero = MoveCostModel::new(PRIOR, CEILING, Duration::ZERO);
        zero.observe(0, 10_000_000, T0);
        assert!(zero.estimate(T0).fixed > 1_000_000);
        assert_eq!(zero.estimate(T0 + Duration::from_millis(1)), PRIOR);
    }

    proptest::proptest! {
        /// Whatever the moves, each part of the estimate lies between the least of the
        /// prior and what any move could show, and the most of them, within the ceiling:
        /// the fixed part between 0 and the ceiling, the slope never negative.
        #[test]
        fn prop_the_estimate_is_bounded(
            moves in proptest::collection::vec((0u32..10_000, 0u64..10_000_000_000), 0..150),
        ) {
            let mut m = model();
            for &(c, d) in &moves {
                m.observe(c, d, T0);
            }
            let e = m.estimate(T0);
            proptest::prop_assert!(e.fixed <= CEILING.fixed);
            proptest::prop_assert!(e.per_connection <= CEILING.per_connection);
            let latest = &moves[moves.len().saturating_sub(WINDOW)..];
            if let Some(&most) = latest.iter().map(|(_, d)| d).max() {
                // No move costs more than the longest move seen (or the prior).
                proptest::prop_assert!(e.fixed <= most.max(PRIOR.fixed), "{e:?}");
            }
            // Moves of one connection count: that count's cost is their median, weighed
            // with the prior's.
            if latest.iter().all(|&(c, _)| c == 0) && !latest.is_empty() {
                let ds: Vec<(f64, f64)> = latest.iter().map(|&(_, d)| (d as f64, 1.0)).collect();
                let want = blend(PRIOR.fixed as f64, weighted_median(ds).unwrap(), latest.len() as f64)
                    .min(CEILING.fixed as f64);
                proptest::prop_assert!((e.fixed as f64 - want).abs() <= 1.0, "{e:?} {want}");
            }
        }

        /// While no move is made, each part of the estimate only comes nearer the prior,
        /// and reaches it once the moves are old enough, whenever they were made.
        #[test]
        fn prop_without_moves_the_estimate_goes_back_to_the_prior(
            moves in proptest::collection::vec(
                (0u32..500, 0u64..200_000_000, 0u64..100_000),
                1..100,
            ),
            waits in proptest::collection::vec(0u64..600_000, 1..8),
        ) {
            let mut m = model();
            let mut last = Duration::ZERO;
            for &(c, d, at_ms) in &moves {
                let at = Duration::from_millis(at_ms);
                last = last.max(at);
                m.observe(c, d, at);
            }
            let mut now = last;
            let mut was = m.estimate(now);
            let gap = |a: u64, b: u64| a.abs_diff(b);
            for &w in &waits {
                now += Duration::from_millis(w);
                let e = m.estimate(now);
                proptest::prop_assert!(
                    gap(e.fixed, PRIOR.fixed) <= gap(was.fixed, PRIOR.fixed) + 1,
                    "{was:?} then {e:?}"
                );
                proptest::prop_assert!(
                    gap(e.per_connection, PRIOR.per_connection)
                        <= gap(was.per_connection, PRIOR.per_connection) + 1,
                    "{was:?} then {e:?}"
                );
                was = e;
            }
            proptest::prop_assert_eq!(m.estimate(now + DEFAULT_MEMORY * 60), PRIOR);
        }
    }
}
