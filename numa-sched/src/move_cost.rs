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
//! P. K. Sen 1968): the slope is the median of the slopes between every two moves with
//! different connection counts, the intercept the median of each move's duration less the
//! slope's part. Half the moves can be outliers (a move whose worker was preempted for
//! 400 ms) without moving it far. With few moves the estimate leans on the prior: each
//! part is `(k × prior + n × fit) / (k + n)` with `k` = [`PRIOR_WEIGHT`] and `n` the moves
//! that informed it (those with a connection count that differs from another move's, for
//! the slope). Each part is bounded by the caller's ceiling, so that a host where moves
//! took a long while once does not price every move out for good.

use std::collections::VecDeque;

use serde::Serialize;

/// The moves the fit looks at: the latest ones (older ones are forgotten, so that the
/// estimate follows a host whose load changes). 64 moves: eight seconds of moves at the
/// policy's long-run rate, and 2 016 pairs for the slope.
pub const WINDOW: usize = 64;

/// How many moves the prior counts as: after that many moves the estimate is halfway
/// between the prior and what the moves showed.
pub const PRIOR_WEIGHT: f64 = 4.0;

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

/// The running fit of measured moves (see the module's documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct MoveCostModel {
    prior: MoveCost,
    ceiling: MoveCost,
    /// The latest moves: (connections, duration), at most [`WINDOW`].
    moves: VecDeque<(u32, u64)>,
    /// Every move observed (for reports).
    observed: u64,
}

impl MoveCostModel {
    /// A model that estimates `prior` until moves are observed, and never more than
    /// `ceiling` (each part; the prior itself is bounded too).
    #[must_use]
    pub fn new(prior: MoveCost, ceiling: MoveCost) -> Self {
        Self {
            prior: prior.min(ceiling),
            ceiling,
            moves: VecDeque::with_capacity(WINDOW),
            observed: 0,
        }
    }

    /// Records a move that carried `connections` connections and took `duration` (the
    /// snapshot's unit). The oldest of [`WINDOW`] moves is forgotten.
    pub fn observe(&mut self, connections: u32, duration: u64) {
        if self.moves.len() == WINDOW {
            self.moves.pop_front();
        }
        self.moves.push_back((connections, duration));
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

    /// The prior: what the estimate is before any move.
    #[must_use]
    pub fn prior(&self) -> MoveCost {
        self.prior
    }

    /// What a move costs now: the fit of the latest moves, weighed with the prior, bounded
    /// by the ceiling.
    #[must_use]
    pub fn estimate(&self) -> MoveCost {
        if self.moves.is_empty() {
            return self.prior;
        }
        let ceiling = self.ceiling;
        let (slope, informed) = self.slope();
        let per_connection = blend(self.prior.per_connection as f64, slope, informed)
            .clamp(0.0, ceiling.per_connection as f64);
        let mut rest: Vec<f64> = self
            .moves
            .iter()
            .map(|&(c, d)| d as f64 - per_connection * f64::from(c))
            .collect();
        let intercept = median(&mut rest).max(0.0);
        let fixed = blend(self.prior.fixed as f64, intercept, self.moves.len())
            .clamp(0.0, ceiling.fixed as f64);
        MoveCost {
            fixed: fixed.round() as u64,
            per_connection: per_connection.round() as u64,
        }
    }

    /// The median slope between moves of different connection counts, and how many moves
    /// took part in such a pair (0: no slope, the moves all carried as many connections).
    fn slope(&self) -> (f64, usize) {
        let moves: Vec<(u32, u64)> = self.moves.iter().copied().collect();
        let mut slopes = Vec::new();
        let mut informed = vec![false; moves.len()];
        for (i, &(ci, di)) in moves.iter().enumerate() {
            for (j, &(cj, dj)) in moves.iter().enumerate().skip(i + 1) {
                if ci == cj {
                    continue;
                }
                slopes.push((dj as f64 - di as f64) / (f64::from(cj) - f64::from(ci)));
                informed[i] = true;
                informed[j] = true;
            }
        }
        if slopes.is_empty() {
            return (0.0, 0);
        }
        (median(&mut slopes), informed.iter().filter(|&&x| x).count())
    }
}

/// `(k × prior + n × fit) / (k + n)`, `k` = [`PRIOR_WEIGHT`].
fn blend(prior: f64, fit: f64, n: usize) -> f64 {
    let n = n as f64;
    (PRIOR_WEIGHT * prior + n * fit) / (PRIOR_WEIGHT + n)
}

/// The median of `xs` (the mean of the two middle ones for an even count); `xs` not empty.
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
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

    #[test]
    fn without_moves_the_estimate_is_the_prior_bounded() {
        assert_eq!(MoveCostModel::new(PRIOR, CEILING).estimate(), PRIOR);
        let low = MoveCost {
            fixed: 10_000,
            per_connection: 1_000,
        };
        assert_eq!(MoveCostModel::new(PRIOR, low).estimate(), low);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn moves_of_one_connection_count_learn_the_fixed_cost_and_keep_the_prior_slope() {
        let mut m = MoveCostModel::new(PRIOR, CEILING);
        for _ in 0..WINDOW {
            m.observe(0, 15_000_000);
        }
        let e = m.estimate();
        assert_eq!(e.per_connection, PRIOR.per_connection);
        // 64 moves against a prior worth 4: 15 ms × 64/68 + 20 µs × 4/68.
        let want = (15_000_000.0 * 64.0 + 20_000.0 * 4.0) / 68.0;
        assert!((e.fixed as f64 - want).abs() < 1.0, "{e:?}");
    }

    #[test]
    fn one_move_weighs_against_the_prior() {
        let mut m = MoveCostModel::new(PRIOR, CEILING);
        m.observe(0, 10_020_000);
        // (4 × 20 µs + 1 × 10.02 ms) / 5.
        assert_eq!(m.estimate().fixed, 2_020_000);
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
        let mut m = MoveCostModel::new(PRIOR, CEILING);
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..WINDOW {
            let c = (next(&mut rng) % 201) as u32;
            let jitter = 0.9 + (next(&mut rng) % 1_000) as f64 / 5_000.0;
            let mut d = (12_000_000.0 + 40_000.0 * f64::from(c)) * jitter;
            if i % 4 == 3 {
                d += 200_000_000.0;
            }
            m.observe(c, d as u64);
        }
        let e = m.estimate();
        // The prior weighs 4 of 68: 12 ms × 64/68 ≈ 11.3 ms.
        let (fixed, per) = (e.fixed as f64, e.per_connection as f64);
        assert!((fixed - 11_300_000.0).abs() < 0.15 * 11_300_000.0, "{e:?}");
        assert!((per - 37_800.0).abs() < 0.15 * 37_800.0, "{e:?}");
    }

    #[test]
    fn the_estimate_follows_the_latest_moves() {
        let mut m = MoveCostModel::new(PRIOR, CEILING);
        for _ in 0..WINDOW {
            m.observe(1, 40_000_000);
        }
        for _ in 0..WINDOW {
            m.observe(1, 200_000);
        }
        let e = m.estimate();
        assert!(e.of(1) < 300_000, "{e:?}");
        assert_eq!(m.observed(), 2 * WINDOW as u64);
        assert_eq!(m.fit_moves(), WINDOW);
    }

    #[test]
    fn the_estimate_never_passes_the_ceiling() {
        let mut m = MoveCostModel::new(PRIOR, CEILING);
        for c in 0..WINDOW as u32 {
            m.observe(c, u64::MAX / 2 + u64::from(c) * 1_000_000_000_000);
        }
        assert_eq!(m.estimate(), CEILING);
    }

    proptest::proptest! {
        /// Whatever the moves, each part of the estimate lies between the least of the
        /// prior and what any move could show, and the most of them, within the ceiling:
        /// the fixed part between 0 and the ceiling, the slope never negative.
        #[test]
        fn prop_the_estimate_is_bounded(
            moves in proptest::collection::vec((0u32..10_000, 0u64..10_000_000_000), 0..150),
        ) {
            let mut m = MoveCostModel::new(PRIOR, CEILING);
            for &(c, d) in &moves {
                m.observe(c, d);
            }
            let e = m.estimate();
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
                let mut ds: Vec<f64> = latest.iter().map(|&(_, d)| d as f64).collect();
                let want = blend(PRIOR.fixed as f64, median(&mut ds), latest.len())
                    .min(CEILING.fixed as f64);
                proptest::prop_assert!((e.fixed as f64 - want).abs() <= 1.0, "{e:?} {want}");
            }
        }
    }
}
