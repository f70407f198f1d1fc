//! The rebalancing policy: which RSS buckets move to which queue, from per-bucket and
//! per-core load snapshots.
//!
//! The method is RSS++'s (T. Barbette, G. P. Katsikas, G. Q. Maguire Jr., D. Kostić,
//! "RSS++: load and state-aware receive side scaling", CoNEXT 2019, §3): a bucket's load is
//! its core's busy time times the bucket's share of the core's packets (or the busy time the
//! worker attributed to the bucket itself, when it measured that); the target of every core
//! is the mean load; when a core is more than a threshold above the mean, buckets are moved
//! greedily, the largest bucket that fits first, from the most loaded such core to the least
//! loaded one; a core that has just received buckets is left alone for a round (its
//! measurement does not show them yet); the period adapts to the imbalance. flowlane adds
//! what moving live TCP connections, and measuring on a live machine, need:
//!
//! - the policy acts on exponentially weighted averages over rounds
//!   ([`RebalanceConfig::smoothing`]) of each bucket's load and of each queue's load outside
//!   its buckets, not on one period's sample: a flow that switches on and off faster than
//!   that is seen at its mean, and moves no bucket back and forth;
//! - a bucket's load counts, in the loads the moves are planned on, only as far as it
//!   persisted: the least of its samples over the last [`RebalanceConfig::persistence`]
//!   (and never more than its average). A skew of the averages that no persisting load
//!   carries ([`RoundOutcome::Transient`]: bursts of short connections landing on random
//!   buckets, a flow that just ended) moves nothing, for moving a bucket gains only the
//!   load it goes on carrying;
//! - the unit is the CPU: queues that share one (more queues than CPUs) add up, and a bucket
//!   never moves between two queues of one CPU (that would change no CPU's load);
//! - only a core itself above `mean × (1 + threshold)` gives buckets (down to
//!   `mean × (1 + target)`): one hot core that no move can help does not make the others
//!   move on their noise;
//! - a move must lower the larger load of the two cores it touches by more than it costs
//!   ([`RebalanceConfig::move_cost`] plus [`RebalanceConfig::connection_cost`] per connection,
//!   spread over [`RebalanceConfig::cost_horizon`]), so no move raises the maximum load, and
//!   a bucket bigger than the gap it would close stays put;
//! - a move never takes a queue past its [`CoreLoad::connection_limit`] (its stack would
//!   reset the connections it cannot import): [`RoundOutcome::ConnectionLimit`] when that is
//!   all that keeps the load skewed;
//! - a bucket moved is held where it is for [`RebalanceConfig::hold_down`], doubled each time
//!   it goes back to the queue it last left (no ping-pong); a core that gave buckets takes
//!   none (and one that took gives none) in the same round nor for a hold-down after,
//!   doubled each time it switches within 8 of its holds of its last switch and halved
//!   again for each 8 holds it then kept one part, so that a load swinging more slowly than
//!   the averages follow moves few buckets while skews that come and go every 10 s or more
//!   are each met at once; a move that failed is not tried again for the same bucket and
//!   queue for a hold-down, doubled at each failure ([`Rebalancer::move_failed`]);
//! - at most [`RebalanceConfig::max_moves`] moves per round, and
//!   [`RebalanceConfig::move_rate`] per second over the long run
//!   ([`RebalanceConfig::move_burst`] at once);
//! - destinations on the source's NUMA node come first; another node (nearest first, by the
//!   [`Topology`]'s distances) only when the source's node is saturated: no other core of it
//!   below the mean would take any of the source's buckets with a gain (a core there that
//!   will once this round's skipped receivers and held buckets are free makes the source
//!   wait instead).
//!
//! Everything here is pure: the caller measures (busy time, packets per bucket), passes the
//! time in the snapshot ([`LoadSnapshot::now`]), applies the plan ([`RebalancePlan::apply`]
//! gives the new table and the entries to write through [`crate::nic::RssNic`]), says which
//! moves it could not make ([`Rebalancer::move_failed`], [`Rebalancer::move_not_made`]) and
//! calls [`Rebalancer::decide`] again after [`RebalancePlan::next_period`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::indirection::{EntryChange, IndirectionTable};
use crate::move_cost::MoveCost;
use crate::topology::Topology;

/// Slack for comparisons of loads computed in floating point.
const EPSILON: f64 = 1e-12;

/// A hold-down (of a bucket that keeps going back, or of a move that keeps failing) doubles
/// at most this many times: 128 hold-downs, 64 s by the defaults.
const MAX_DOUBLINGS: u32 = 7;

/// A bucket's last move (and a failed move) is remembered for this many times the hold-down
/// it set: a bucket that goes back to the queue it left within that time is held twice as
/// long as the last time.
const MEMORY: u32 = 32;

/// A core's switch between giving and taking counts as a flip (doubling its hold) when it
/// comes within this many of its holds of its last switch; each such span it keeps one
/// part takes a flip off. Eight: by the defaults a core that switches part within 4 s of
/// its last switch, again and again, holds its part ever longer (a load swinging faster
/// than that moves few buckets), and one that switches as skews come and go, every 10 s,
/// keeps the base hold-down (each new skew is met at once). The tests' adversary and
/// rotating skew (`tests/rebalance.rs`) passed from 12 to 20 before the persistence rule
/// ([`RebalanceConfig::persistence`]), which delays each move by its window: the rotating
/// skew's cores then switched within 16 holds and their holds grew past its phases; with
/// the rule, bursts no longer swing the cores' parts, and 8 passes both.
const FLIP_WINDOW: u32 = 8;

/// A bucket's load persists ([`RebalanceConfig::persistence`]) only if it shows in this
/// many rounds in a row at least, whatever their length: a long period's average may hold
/// a burst that ended long before its round, and a burst may straddle two periods, but one
/// shorter than a period never shows in three.
const PERSISTENCE_ROUNDS: usize = 3;

/// Averages below this are dropped (the bucket carries no load).
const NEGLIGIBLE: f64 = 1e-9;

/// The policy's settings. [`RebalanceConfig::default`] documents each default.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RebalanceConfig {
    /// Act only when the most loaded core is above `mean × (1 + threshold)`, and take
    /// buckets only from cores above it. Default 0.10: measured loads jitter by a few
    /// percent, and the goal is max/mean ≤ 1.2.
    pub threshold: f64,
    /// Once acting, a core above the threshold gives buckets until it is no longer above
    /// `mean × (1 + target)` (or no move helps). At most `threshold`. Default 0.02 (RSS++'s
    /// imbalance threshold).
    pub target: f64,
    /// Do nothing while the most loaded core is busy less than this fraction of its time
    /// (in this period's sample, or on average): an idle machine's relative imbalance is
    /// noise, and moves cost. Default 0.05.
    pub min_load: f64,
    /// The period at start, and the longest one while moves are still being made. Default
    /// 100 ms (RSS++).
    pub base_period: Duration,
    /// The period while the imbalance is above [`RebalanceConfig::urgent_imbalance`].
    /// Default 10 ms.
    pub min_period: Duration,
    /// The longest period, reached by doubling while nothing moves. Default 1 s.
    pub max_period: Duration,
    /// Above this imbalance (`max/mean − 1`) the period is halved. Default 0.2 (RSS++).
    pub fast_imbalance: f64,
    /// Above this imbalance the period drops to [`RebalanceConfig::min_period`]. Default
    /// 0.4 (RSS++).
    pub urgent_imbalance: f64,
    /// A bucket moved is not moved again before this much time has passed; twice as long
    /// each time it goes back to the queue it last left (up to 128 times). A core that gave
    /// buckets takes none before this much time has passed, nor gives any after taking;
    /// twice as long each time it switches within 8 such holds of its last switch (half as
    /// long again for each 8 holds it kept one part before switching). Default 500 ms: five
    /// base periods, and short enough that a new skew is met within the 1 s.
    pub hold_down: Duration,
    /// At most this many moves per round. Default 32 (a quarter of a 128-entry table; at
    /// the handoff's target of 100 µs per bucket of 100 connections, 3.2 ms of work).
    pub max_moves: usize,
    /// The fixed cost of one move, in the unit of the snapshot's busy and total times
    /// (nanoseconds of CPU time by the defaults). Default 20 000 (20 µs: table write,
    /// forwarding set-up, draining).
    pub move_cost: u64,
    /// The cost of moving one connection, same unit. Default 2 000 (2 µs, the design's p50
    /// target per connection).
    pub connection_cost: u64,
    /// What a move's cost is weighed against, same unit: a move is made only if the load
    /// it takes off the busier of its two cores, kept this long, is worth more than the
    /// move costs. Fixed (not the measured period, so that a quiet period does not make
    /// moves cheap). Default 500 000 000 (500 ms: the hold-down, the least a moved bucket
    /// stays). Must not be zero.
    pub cost_horizon: u64,
    /// The memory τ of the learned move cost ([`crate::move_cost::MoveCostModel`]): a
    /// move observed weighs `e^(−age / τ)` against the prior ([`RebalanceConfig::move_cost`],
    /// [`RebalanceConfig::connection_cost`]), so that a price learned while moves were slow
    /// goes back to the prior while none is made. Must not be zero. Default 60 s
    /// ([`crate::move_cost::DEFAULT_MEMORY`]: a full window of 64 moves then weighs as
    /// much as the prior after 2.8 minutes).
    pub move_cost_memory: Duration,
    /// Time constant of the averages the policy acts on: each bucket's load and each
    /// queue's load outside its buckets, over rounds, a sample weighing `1 − e^(−Δt / τ)`
    /// (Δt: the time since the last round). A flow switching on and off much faster than
    /// this counts at its mean load. Zero: each round acts on its sample alone. Default
    /// 500 ms.
    pub smoothing: Duration,
    /// How long a bucket's load must have lasted to count in the loads moves are planned
    /// on: a bucket counts as the least of its samples over this much time (the rounds
    /// that cover it, three at least), at most its average, and as nothing until its samples
    /// cover it (a
    /// bucket that appeared, the policy's first rounds). The cores' skew must then show in
    /// those loads too, so a burst on a few buckets, or a flow that ended, moves nothing;
    /// a skew that lasts is met this much later. Zero: a bucket counts as its average.
    /// Default 500 ms: the [`RebalanceConfig::cost_horizon`] a move must pay over (a
    /// load that lasted that long is worth moving for as long), and within the 1 s
    /// to meet a skew. Random bursts 50–200 ms long on random buckets, balanced on average,
    /// moved 16–50 buckets a minute without it, 0–5 with it (`tests/rebalance.rs`).
    pub persistence: Duration,
    /// Moves per second over the long run, all buckets together: a token bucket of
    /// [`RebalanceConfig::move_burst`] moves refilled at this rate bounds the churn whatever
    /// the load does. Default 8 (8 buckets of 100 connections: 0.1 % of a core).
    pub move_rate: f64,
    /// The moves allowed at once after a quiet spell (the token bucket's size). Default 128:
    /// a 128-entry table that starts on one queue is spread in one go.
    pub move_burst: u32,
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        Self {
            threshold: 0.10,
            target: 0.02,
            min_load: 0.05,
            base_period: Duration::from_millis(100),
            min_period: Duration::from_millis(10),
            max_period: Duration::from_secs(1),
            fast_imbalance: 0.2,
            urgent_imbalance: 0.4,
            hold_down: Duration::from_millis(500),
            max_moves: 32,
            move_cost: 20_000,
            connection_cost: 2_000,
            cost_horizon: 500_000_000,
            move_cost_memory: crate::move_cost::DEFAULT_MEMORY,
            smoothing: Duration::from_millis(500),
            persistence: Duration::from_millis(500),
            move_rate: 8.0,
            move_burst: 128,
        }
    }
}

impl RebalanceConfig {
    /// Checks the ranges documented on each field.
    ///
    /// # Errors
    /// [`Error::RebalanceConfig`] naming the first setting out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason| Err(Error::RebalanceConfig { field, reason });
        let fraction = |x: f64| x.is_finite() && x >= 0.0;
        if !fraction(self.target) {
            return bad("target", "must be a finite number ≥ 0 (e.g. 0.02)");
        }
        if !fraction(self.threshold) || self.threshold < self.target {
            return bad(
                "threshold",
                "must be finite and at least `target` (e.g. 0.10)",
            );
        }
        if !fraction(self.min_load) || self.min_load > 1.0 {
            return bad("min_load", "must be a fraction from 0 to 1 (e.g. 0.05)");
        }
        if !fraction(self.fast_imbalance) || !fraction(self.urgent_imbalance) {
            return bad(
                "fast_imbalance",
                "the imbalance levels must be finite numbers ≥ 0 (e.g. 0.2 and 0.4)",
            );
        }
        if self.min_period.is_zero() {
            return bad("min_period", "must be longer than zero (e.g. 10 ms)");
        }
        if self.base_period < self.min_period || self.base_period > self.max_period {
            return bad(
                "base_period",
                "must lie between `min_period` and `max_period` (e.g. 10 ms ≤ 100 ms ≤ 1 s)",
            );
        }
        if self.cost_horizon == 0 {
            return bad(
                "cost_horizon",
                "must be longer than zero (e.g. 500 000 000 ns)",
            );
        }
        if self.move_cost_memory.is_zero() {
            return bad("move_cost_memory", "must be longer than zero (e.g. 60 s)");
        }
        if !fraction(self.move_rate) {
            return bad(
                "move_rate",
                "must be a finite number of moves per second ≥ 0 (e.g. 8)",
            );
        }
        Ok(())
    }

    /// The configured cost of a move ([`RebalanceConfig::move_cost`],
    /// [`RebalanceConfig::connection_cost`]): what the policy prices moves at when its
    /// snapshot brings no learned cost ([`LoadSnapshot::move_cost`]), and the prior of
    /// [`crate::move_cost::MoveCostModel`].
    #[must_use]
    pub fn move_costs(&self) -> MoveCost {
        MoveCost {
            fixed: self.move_cost,
            per_connection: self.connection_cost,
        }
    }

    /// The hold-down after `doublings` doublings.
    fn hold(&self, doublings: u32) -> Duration {
        self.hold_down
            .saturating_mul(1 << doublings.min(MAX_DOUBLINGS))
    }
}

/// One worker's load over the last period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CoreLoad {
    /// The receive queue the worker serves.
    pub queue: u16,
    /// The logical CPU the worker runs on. Queues on one CPU share it: their loads add up.
    pub cpu: u32,
    /// The NUMA node of `cpu`.
    pub node: u32,
    /// Time the worker spent working (not polling idle), in cycles or nanoseconds: one unit
    /// for the whole snapshot and the config's costs.
    pub busy_cycles: u64,
    /// Length of the period in the same unit (`busy_cycles / total_cycles` is the busy
    /// fraction; a worker that reports a fraction passes e.g. `total_cycles = 1_000_000`).
    pub total_cycles: u64,
    /// Live connections on the queue now (at least the sum of its buckets'
    /// [`BucketLoad::connections`] is assumed).
    pub connections: u32,
    /// The most live connections the queue takes (its stack's cap): no move takes it past
    /// this. None: no limit.
    pub connection_limit: Option<u32>,
}

/// One RSS bucket's traffic over the last period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BucketLoad {
    /// Index in the indirection table.
    pub bucket: usize,
    /// The queue that served it (the table's entry for it).
    pub queue: u16,
    /// Packets received; a bucket's share of its core's load is its share of the packets of
    /// that core's buckets without `busy_cycles`.
    pub packets: u64,
    /// Bytes received (carried into the plan's moves, for the move log).
    pub bytes: u64,
    /// Busy time the worker attributed to this bucket, same unit as [`CoreLoad`], when it
    /// measured that (then it is the bucket's load, instead of a share of packets).
    pub busy_cycles: Option<u64>,
    /// Live connections in the bucket: what a move must hand off.
    pub connections: u32,
}

/// Everything [`Rebalancer::decide`] looks at. Buckets absent from `buckets` carry no load.
#[derive(Clone, Copy, Debug)]
pub struct LoadSnapshot<'a> {
    /// The time the snapshot was taken, on any monotonic clock (the same for every call).
    pub now: Duration,
    /// The indirection table in force during the period.
    pub table: &'a IndirectionTable,
    /// The machine, for NUMA nodes and their distances.
    pub topology: &'a Topology,
    /// Every worker's load, one per queue; every queue the table uses must be here.
    pub cores: &'a [CoreLoad],
    /// Per-bucket traffic.
    pub buckets: &'a [BucketLoad],
    /// What a move costs, as the caller learned it from the moves made
    /// ([`crate::move_cost::MoveCostModel::estimate`]). None: the configured costs
    /// ([`RebalanceConfig::move_cost`], [`RebalanceConfig::connection_cost`]).
    pub move_cost: Option<MoveCost>,
}

/// Why a bucket goes where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveReason {
    /// To a core below the mean on the source's own NUMA node.
    SameNode {
        /// The node of both cores.
        node: u32,
    },
    /// To another node: no other core of the source's node would take any of its buckets
    /// with a gain.
    NodeSaturated {
        /// The source's node.
        from_node: u32,
        /// The destination's node (the nearest one with a core below the mean that takes
        /// the bucket with a gain).
        to_node: u32,
    },
}

/// One bucket to move.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BucketMove {
    /// The bucket (index in the indirection table).
    pub bucket: usize,
    /// The queue it leaves (its entry in the table the snapshot came with).
    pub from: u16,
    /// The queue it goes to (on another CPU).
    pub to: u16,
    /// Why there.
    pub reason: MoveReason,
    /// The bucket's load (averaged: [`RebalanceConfig::smoothing`]), as a fraction of one
    /// core.
    pub load: f64,
    /// Load of the CPU serving `from` just before this move, in the plan's model (the
    /// averaged loads, earlier moves of the round applied).
    pub from_load: f64,
    /// Load of the CPU serving `to` just before this move, in the same model.
    pub to_load: f64,
    /// How much the move lowers the larger load of the two cores, in the model:
    /// `min(load, from_load − to_load − load)`. Always more than `cost`.
    pub gain: f64,
    /// The move's cost as a fraction of one core over [`RebalanceConfig::cost_horizon`]:
    /// `cost_ns / cost_horizon`.
    pub cost: f64,
    /// The move's cost as priced, in the snapshot's unit (nanoseconds by the dataplane's
    /// snapshots): the fixed cost plus the cost per connection times `connections`, of the
    /// snapshot's [`LoadSnapshot::move_cost`] or else the configured costs
    /// ([`RebalanceConfig::move_costs`]).
    pub cost_ns: u64,
    /// Live connections of the bucket (for the move log; they set the cost).
    pub connections: u32,
    /// Packets the bucket received in the period (for the move log).
    pub packets: u64,
    /// Bytes the bucket received in the period (for the move log).
    pub bytes: u64,
}

/// What a round concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundOutcome {
    /// The most loaded core is below [`RebalanceConfig::min_load`] (measured, or on
    /// average): nothing worth moving.
    Idle,
    /// The imbalance is within [`RebalanceConfig::threshold`].
    Balanced,
    /// The averaged loads are above the threshold, but the loads that persisted
    /// ([`RebalanceConfig::persistence`]) are not: a burst, or a skew too young to act on.
    /// Nothing moves; the next round comes as soon as for [`RoundOutcome::Waiting`].
    Transient,
    /// The plan has moves.
    Moved,
    /// Above the threshold, but every helpful move waits: its bucket is held down, or the
    /// same move failed lately, or its source or destination received buckets last round
    /// or would switch between giving and taking too soon, or the round's move budget (per
    /// round or per second) is spent.
    Waiting,
    /// Above the threshold, and the only moves that would help would take their destination
    /// past its [`CoreLoad::connection_limit`].
    ConnectionLimit,
    /// Above the threshold, and no move would gain more than it costs (e.g. one bucket
    /// carries more than the mean on its own: buckets cannot be split).
    NoHelpfulMove,
}

/// A round's decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RebalancePlan {
    /// The moves, in the order chosen (each bucket at most once).
    pub moves: Vec<BucketMove>,
    /// What the round concluded.
    pub outcome: RoundOutcome,
    /// When to call [`Rebalancer::decide`] again.
    pub next_period: Duration,
    /// Mean CPU load the policy acted on (fraction of a core): each queue's averaged load
    /// outside its buckets plus its buckets' persisting loads
    /// ([`RebalanceConfig::persistence`]).
    pub mean_load: f64,
    /// Largest CPU load the policy acted on.
    pub max_load: f64,
    /// The level a CPU's load was above, at the round's start, to give buckets this round:
    /// `mean_load × (1 + threshold)` ([`RebalanceConfig::threshold`]). A CPU over it goes
    /// on giving while a move gains more than it costs, so a later move's
    /// [`BucketMove::from_load`] may be under it.
    pub over: f64,
    /// `max_load / mean_load` (1 when idle): the imbalance the policy acted on.
    pub max_over_mean: f64,
    /// `max / mean` of the averaged CPU loads ([`RebalanceConfig::smoothing`]; 1 when
    /// idle): what triggers a round, before the persistence rule.
    pub averaged_max_over_mean: f64,
    /// `max / mean` of the CPU loads measured in this period alone (1 when idle): the
    /// imbalance the goal (≤ 1.2) is about.
    pub measured_max_over_mean: f64,
    /// `max / mean` of the model once the moves are applied.
    pub predicted_max_over_mean: f64,
    /// The CPUs this round left above its target level for want of a move worth its price:
    /// each gave nothing more because no move of its buckets gained more than it cost
    /// ([`LoadSnapshot::move_cost`], else the configured costs), while at no cost one
    /// would have helped (same holds, limits and destinations). Moves refused for their
    /// price, one per CPU and round at most; 0 when the round was balanced or idle.
    pub priced_out: usize,
}

impl RebalancePlan {
    /// The moves as table entry changes, in the plan's order.
    #[must_use]
    pub fn changes(&self) -> Vec<EntryChange> {
        self.moves
            .iter()
            .map(|m| EntryChange {
                bucket: m.bucket,
                from: m.from,
                to: m.to,
            })
            .collect()
    }

    /// The table with the plan's moves applied, and the entries that differ (in bucket
    /// order, [`IndirectionTable::diff`]): what to write through [`crate::nic::RssNic`].
    ///
    /// # Errors
    /// [`Error::BucketOutOfRange`] if a move names a bucket the table lacks,
    /// [`Error::BucketOwnerMismatch`] if a bucket is not on the move's `from` queue (the
    /// table changed since the snapshot).
    pub fn apply(&self, table: &IndirectionTable) -> Result<(IndirectionTable, Vec<EntryChange>)> {
        let mut entries = table.entries().to_vec();
        for m in &self.moves {
            let size = entries.len();
            let entry = entries.get_mut(m.bucket).ok_or(Error::BucketOutOfRange {
                bucket: m.bucket,
                size,
            })?;
            if *entry != m.from {
                return Err(Error::BucketOwnerMismatch {
                    bucket: m.bucket,
                    claimed: m.from,
                    table: *entry,
                });
            }
            *entry = m.to;
        }
        let new = IndirectionTable::new(entries)?;
        let changes = table.diff(&new)?;
        Ok((new, changes))
    }
}

/// A bucket's last move.
#[derive(Clone, Copy, Debug)]
struct MoveRecord {
    at: Duration,
    /// Held until then.
    until: Duration,
    /// The queue it left (None: a move noted by hand).
    from: Option<u16>,
    /// How often its hold-down has doubled: moves back to the queue it had just left.
    returns: u32,
}

impl MoveRecord {
    fn forgotten(&self, now: Duration) -> bool {
        let hold = self.until.saturating_sub(self.at);
        now >= self.at.saturating_add(hold.saturating_mul(MEMORY))
    }
}

/// A move (bucket, destination) that failed lately.
#[derive(Clone, Copy, Debug)]
struct Failure {
    at: Duration,
    /// Not tried again before then.
    until: Duration,
    /// Failures in a row.
    count: u32,
}

/// A move of the last round, and the bucket's record before it (restored if the move
/// was not made).
#[derive(Clone, Copy, Debug)]
struct Planned {
    bucket: usize,
    from: u16,
    to: u16,
    prior: Option<MoveRecord>,
    /// The CPUs of `from` and `to`.
    cpus: [u32; 2],
}

/// A bucket's load over one round's period (the sample, or for a bucket moved in the
/// round before, its average: the sample splits it between its two queues).
#[derive(Clone, Copy, Debug)]
struct Span {
    /// The period's start (the last round; the round itself at the first one).
    start: Duration,
    load: f64,
}

/// A CPU's last part in moves: it gave buckets, or took them.
#[derive(Clone, Copy, Debug)]
struct Role {
    gave: bool,
    /// Its last move in this part.
    at: Duration,
    /// When it took this part (its first move in it).
    switched_at: Duration,
    /// How often it switched between giving and taking lately: it does not switch again
    /// before `hold_down × 2^flips` has passed since its last move.
    flips: u32,
}

impl Role {
    /// Until when it keeps its part.
    fn until(&self, config: &RebalanceConfig) -> Duration {
        self.at.saturating_add(config.hold(self.flips))
    }

    /// Its flips once it switches part at `now`: one more if the switch comes within
    /// [`FLIP_WINDOW`] holds of its last one; else one fewer for each [`FLIP_WINDOW`] holds
    /// it kept this part (the longest hold first). A load that swings back and forth keeps
    /// doubling the hold; cores that switch part now and then, as skews come and go, keep
    /// the base hold-down.
    fn flips_on_switch(&self, now: Duration, config: &RebalanceConfig) -> u32 {
        let window = |flips| config.hold(flips).saturating_mul(FLIP_WINDOW);
        let mut span = now.saturating_sub(self.switched_at);
        let mut flips = self.flips.min(MAX_DOUBLINGS);
        if span < window(flips) {
            return flips + 1;
        }
        while flips > 0 && span >= window(flips) {
            span -= window(flips);
            flips -= 1;
        }
        flips
    }
}

/// The policy with its memory between rounds: the averaged loads, buckets held down after
/// a move, failed moves backing off, the cores that took part in the last round's moves and
/// each core's last part (giving or taking), the move budget and the adaptive period.
///
/// Call [`Rebalancer::decide`] with a fresh snapshot every [`RebalancePlan::next_period`];
/// the rebalancer assumes its plans are carried out (tell it about moves that were not
/// with [`Rebalancer::move_failed`] and [`Rebalancer::move_not_made`], and about moves made
/// by hand with [`Rebalancer::note_move`]).
#[derive(Clone, Debug)]
pub struct Rebalancer {
    config: RebalanceConfig,
    /// Bucket → its last move.
    moved: BTreeMap<usize, MoveRecord>,
    /// (bucket, destination) → its last failure.
    failed: BTreeMap<(usize, u16), Failure>,
    /// The last round's moves.
    last_round: Vec<Planned>,
    /// Moves noted by hand since the last round: (bucket, destination).
    noted: Vec<(usize, u16)>,
    /// CPU → its last part in moves.
    roles: BTreeMap<u32, Role>,
    /// CPU → its part before the last round, for those that took part in it.
    prior_roles: BTreeMap<u32, Option<Role>>,
    /// Bucket → its averaged load.
    bucket_avg: BTreeMap<usize, f64>,
    /// Queue → its averaged load outside its buckets.
    residual_avg: BTreeMap<u16, f64>,
    /// Bucket → its loads over the rounds that cover the last
    /// [`RebalanceConfig::persistence`], oldest first (only buckets with an average).
    trail: BTreeMap<usize, VecDeque<Span>>,
    /// The last round's time.
    last_now: Option<Duration>,
    /// Moves the rate allows now.
    tokens: f64,
    period: Duration,
}

impl Rebalancer {
    /// A rebalancer with no history, its period at [`RebalanceConfig::base_period`].
    ///
    /// # Errors
    /// [`Error::RebalanceConfig`] if a setting is out of range.
    pub fn new(config: RebalanceConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            moved: BTreeMap::new(),
            failed: BTreeMap::new(),
            last_round: Vec::new(),
            noted: Vec::new(),
            roles: BTreeMap::new(),
            prior_roles: BTreeMap::new(),
            bucket_avg: BTreeMap::new(),
            residual_avg: BTreeMap::new(),
            trail: BTreeMap::new(),
            last_now: None,
            tokens: f64::from(config.move_burst),
            period: config.base_period,
        })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &RebalanceConfig {
        &self.config
    }

    /// The current period (the last plan's `next_period`).
    #[must_use]
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Whether `bucket` is held where it is at time `now` (it moved less than its
    /// hold-down before: [`RebalanceConfig::hold_down`], doubled for each time it went back
    /// to the queue it had just left).
    #[must_use]
    pub fn is_held(&self, bucket: usize, now: Duration) -> bool {
        self.held_until(bucket).is_some_and(|t| now < t)
    }

    /// Until when `bucket` is held by its last move, if the rebalancer remembers one.
    #[must_use]
    pub fn held_until(&self, bucket: usize) -> Option<Duration> {
        self.moved.get(&bucket).map(|r| r.until)
    }

    /// Whether moving `bucket` to `to` waits at time `now` after failing lately
    /// ([`Rebalancer::move_failed`]).
    #[must_use]
    pub fn is_backing_off(&self, bucket: usize, to: u16, now: Duration) -> bool {
        self.failed
            .get(&(bucket, to))
            .is_some_and(|f| now < f.until)
    }

    /// Records a move the rebalancer did not plan (an operator's `rebalance move`): the
    /// bucket is held down from `now`, and `to` takes part in no move of the next round.
    pub fn note_move(&mut self, bucket: usize, to: u16, now: Duration) {
        let returns = self.moved.get(&bucket).map_or(0, |r| r.returns);
        self.moved.insert(
            bucket,
            MoveRecord {
                at: now,
                until: now.saturating_add(self.config.hold_down),
                from: None,
                returns,
            },
        );
        self.noted.push((bucket, to));
    }

    /// Says that a move of the last plan was not tried (e.g. an earlier one failed): the
    /// bucket is as free as before the plan, its destination no receiver, and the move's
    /// share of the rate given back.
    pub fn move_not_made(&mut self, m: &BucketMove) {
        if self.unplan(m) {
            self.tokens = (self.tokens + 1.0).min(f64::from(self.config.move_burst));
        }
    }

    /// Says that a move of the last plan failed with the bucket where it was (e.g. the NIC
    /// refused the table write): the bucket is as free as before the plan, but this bucket
    /// does not go to this queue again before [`RebalanceConfig::hold_down`] has passed,
    /// doubled for each failure in a row of the same move (time `now`).
    pub fn move_failed(&mut self, m: &BucketMove, now: Duration) {
        self.unplan(m);
        let count = self
            .failed
            .get(&(m.bucket, m.to))
            .map_or(1, |f| f.count.saturating_add(1));
        let until = now.saturating_add(self.config.hold(count - 1));
        self.failed.insert(
            (m.bucket, m.to),
            Failure {
                at: now,
                until,
                count,
            },
        );
    }

    /// Takes `m` out of the last round's moves, restoring its bucket's record; whether it
    /// was there.
    fn unplan(&mut self, m: &BucketMove) -> bool {
        let Some(i) = self
            .last_round
            .iter()
            .position(|p| p.bucket == m.bucket && p.to == m.to)
        else {
            return false;
        };
        let p = self.last_round.remove(i);
        match p.prior {
            Some(r) => self.moved.insert(p.bucket, r),
            None => self.moved.remove(&p.bucket),
        };
        // A CPU that took part in no other move of the round gets its part back.
        for cpu in p.cpus {
            if self.last_round.iter().all(|q| !q.cpus.contains(&cpu)) {
                match self.prior_roles.get(&cpu).copied().flatten() {
                    Some(r) => self.roles.insert(cpu, r),
                    None => self.roles.remove(&cpu),
                };
            }
        }
        true
    }

    /// One round: validates the snapshot, updates the averages, plans the moves (module
    /// documentation) and the next period, and remembers the moves as if carried out.
    ///
    /// # Errors
    /// [`Error::DuplicateQueue`] (a queue with two worker loads), [`Error::UnknownCpu`] /
    /// [`Error::UnknownNode`] / [`Error::InconsistentTopology`] (a worker's CPU or node
    /// that the topology does not have, or not together), [`Error::QueueWithoutLoad`] (the
    /// table uses a queue without a worker load), [`Error::BucketOutOfRange`],
    /// [`Error::DuplicateBucket`], [`Error::BucketOwnerMismatch`] (a bucket load whose queue
    /// is not the table's). Nothing is remembered from a snapshot that fails.
    pub fn decide(&mut self, snapshot: &LoadSnapshot<'_>) -> Result<RebalancePlan> {
        let sample = Sample::build(snapshot)?;
        let now = snapshot.now;
        let config = self.config;
        self.moved.retain(|_, r| !r.forgotten(now));
        self.roles.retain(|_, r| {
            now < r
                .at
                .saturating_add(config.hold(r.flips).saturating_mul(MEMORY))
        });
        self.failed.retain(|_, f| {
            let span = f.until.saturating_sub(f.at);
            now < f.at.saturating_add(span.saturating_mul(MEMORY))
        });
        // The last round's moves were made: their failures are over.
        let last = std::mem::take(&mut self.last_round);
        let noted = std::mem::take(&mut self.noted);
        for p in &last {
            self.failed.remove(&(p.bucket, p.to));
        }
        let receivers: BTreeSet<u16> = last
            .iter()
            .map(|p| p.to)
            .chain(noted.iter().map(|&(_, to)| to))
            .collect();
        let touched: BTreeSet<u16> = receivers
            .iter()
            .copied()
            .chain(last.iter().map(|p| p.from))
            .collect();
        let fresh: BTreeSet<usize> = last
            .iter()
            .map(|p| p.bucket)
            .chain(noted.iter().map(|&(b, _)| b))
            .collect();

        let elapsed = self.last_now.map(|t| now.saturating_sub(t));
        self.last_now = Some(now);
        self.smooth(&sample, elapsed, &touched, &fresh);
        self.follow(&sample, now, elapsed, &fresh);
        if let Some(dt) = elapsed {
            self.tokens = (self.tokens + dt.as_secs_f64() * config.move_rate)
                .min(f64::from(config.move_burst));
        }

        let costs = snapshot.move_cost.unwrap_or(config.move_costs());
        let averaged =
            Model::build(&sample, &self.bucket_avg, &self.residual_avg, costs).mean_max();
        let averaged_ratio = ratio(averaged);
        let mut model = Model::build(&sample, &self.persisting(now), &self.residual_avg, costs);
        let (mean, max) = model.mean_max();
        let max_over_mean = ratio((mean, max));
        let over = mean * (1.0 + config.threshold);
        let eligible: Vec<bool> = model.cpus.iter().map(|c| c.load > over + EPSILON).collect();
        // A CPU that received last round neither gives nor takes; one that gave (took)
        // lately takes (gives) only once its part's hold has passed.
        let role = |c: &CpuState, gave: bool| {
            self.roles
                .get(&c.cpu)
                .is_some_and(|r| r.gave == gave && now < r.until(&config))
        };
        let received = |c: &CpuState| c.queues.iter().any(|q| receivers.contains(&q.queue));
        let no_source: Vec<bool> = model
            .cpus
            .iter()
            .map(|c| received(c) || role(c, false))
            .collect();
        let no_dest: Vec<bool> = model
            .cpus
            .iter()
            .map(|c| received(c) || role(c, true))
            .collect();
        let budget = config.max_moves.min(self.tokens.max(0.0).floor() as usize);
        let mut moves = Vec::new();
        let measured = sample.mean_max();
        let balanced = |ratio: f64| ratio <= 1.0 + config.threshold + EPSILON;
        let mut priced_out = 0;
        let outcome = if averaged.1.min(measured.1) < config.min_load || averaged.0 <= EPSILON {
            RoundOutcome::Idle
        } else if balanced(averaged_ratio) {
            RoundOutcome::Balanced
        } else if max < config.min_load || balanced(max_over_mean) {
            RoundOutcome::Transient
        } else {
            let held = |b| self.is_held(b, now);
            let blocked = |b, q| self.is_backing_off(b, q, now);
            let filter = Filter {
                no_source: &no_source,
                no_dest: &no_dest,
                is_held: &held,
                blocked: &blocked,
            };
            priced_out = self.greedy(&mut model, mean, &eligible, &filter, budget, &mut moves);
            if !moves.is_empty() {
                RoundOutcome::Moved
            } else if budget == 0 || model.any_move(mean, &eligible, &config, None, true) {
                RoundOutcome::Waiting
            } else if model.any_move(mean, &eligible, &config, None, false) {
                RoundOutcome::ConnectionLimit
            } else {
                RoundOutcome::NoHelpfulMove
            }
        };
        let cpu_of: BTreeMap<u16, u32> = sample.queues.iter().map(|q| (q.queue, q.cpu)).collect();
        self.prior_roles.clear();
        for m in &moves {
            for (queue, gave) in [(m.from, true), (m.to, false)] {
                let cpu = cpu_of[&queue];
                let prior = self.roles.get(&cpu).copied();
                self.prior_roles.entry(cpu).or_insert(prior);
                let role = match prior {
                    Some(r) if r.gave == gave => Role { at: now, ..r },
                    Some(r) => Role {
                        gave,
                        at: now,
                        switched_at: now,
                        flips: r.flips_on_switch(now, &config),
                    },
                    None => Role {
                        gave,
                        at: now,
                        switched_at: now,
                        flips: 0,
                    },
                };
                self.roles.insert(cpu, role);
            }
            let prior = self.moved.get(&m.bucket).copied();
            let returns = match prior {
                Some(r) if r.from == Some(m.to) => r.returns.saturating_add(1),
                Some(r) => r.returns,
                None => 0,
            };
            self.moved.insert(
                m.bucket,
                MoveRecord {
                    at: now,
                    until: now.saturating_add(config.hold(returns)),
                    from: Some(m.from),
                    returns,
                },
            );
            self.last_round.push(Planned {
                bucket: m.bucket,
                from: m.from,
                to: m.to,
                prior,
                cpus: [cpu_of[&m.from], cpu_of[&m.to]],
            });
        }
        self.tokens -= moves.len() as f64;
        let (_, predicted_max) = model.mean_max();
        self.period = self.next_period(outcome, averaged_ratio - 1.0);
        Ok(RebalancePlan {
            moves,
            outcome,
            next_period: self.period,
            mean_load: mean,
            max_load: max,
            over,
            max_over_mean,
            averaged_max_over_mean: averaged_ratio,
            measured_max_over_mean: ratio(measured),
            predicted_max_over_mean: ratio((mean, predicted_max)),
            priced_out,
        })
    }

    /// Adds this round's load of every bucket with an average to its trail (a bucket moved
    /// in the last round: its average, as [`Rebalancer::smooth`] keeps it) and forgets what
    /// the trail no longer needs: spans that end before the last
    /// [`RebalanceConfig::persistence`] once a later one reaches back that far, the last
    /// [`PERSISTENCE_ROUNDS`] kept whatever their length. A bucket without an average (none yet, or it fell to
    /// nothing) has no trail: its next one starts afresh.
    fn follow(
        &mut self,
        sample: &Sample,
        now: Duration,
        elapsed: Option<Duration>,
        fresh: &BTreeSet<usize>,
    ) {
        let window = self.config.persistence;
        if window.is_zero() {
            return;
        }
        let start = now.saturating_sub(elapsed.unwrap_or_default());
        let reach = now.saturating_sub(window);
        let measured: BTreeMap<usize, f64> =
            sample.buckets.iter().map(|b| (b.bucket, b.load)).collect();
        let avg = &self.bucket_avg;
        self.trail.retain(|b, _| avg.contains_key(b));
        for (&b, &average) in avg {
            let load = if fresh.contains(&b) {
                average
            } else {
                measured.get(&b).copied().unwrap_or(0.0)
            };
            let spans = self.trail.entry(b).or_default();
            spans.push_back(Span { start, load });
            while spans.len() > PERSISTENCE_ROUNDS && spans[1].start <= reach {
                spans.pop_front();
            }
        }
    }

    /// Each bucket's load as far as it persisted ([`RebalanceConfig::persistence`]): the
    /// least of its loads over the rounds covering the last `persistence`
    /// ([`PERSISTENCE_ROUNDS`] at least), at most its average; nothing where its trail does not reach back that far.
    /// Its average when `persistence` is zero.
    fn persisting(&self, now: Duration) -> BTreeMap<usize, f64> {
        let window = self.config.persistence;
        if window.is_zero() {
            return self.bucket_avg.clone();
        }
        let reach = now.saturating_sub(window);
        self.bucket_avg
            .iter()
            .filter_map(|(&b, &average)| {
                let spans = self.trail.get(&b)?;
                if spans.len() < PERSISTENCE_ROUNDS || spans.front().is_none_or(|s| s.start > reach)
                {
                    return None;
                }
                let least = spans.iter().map(|s| s.load).fold(average, f64::min);
                (least > NEGLIGIBLE).then_some((b, least))
            })
            .collect()
    }

    /// Folds the sample into the averages: a weight of `1 − e^(−elapsed / smoothing)` (all
    /// of it at the first round, and without smoothing). With smoothing, the buckets moved
    /// in the last round and the queues that gave or took them keep their averages for this
    /// round: the period's sample splits a moved bucket's load between its two queues.
    fn smooth(
        &mut self,
        sample: &Sample,
        elapsed: Option<Duration>,
        touched: &BTreeSet<u16>,
        fresh: &BTreeSet<usize>,
    ) {
        let tau = self.config.smoothing;
        let empty = (BTreeSet::new(), BTreeSet::new());
        let (weight, touched, fresh) = match elapsed {
            Some(dt) if !tau.is_zero() => (
                1.0 - (-dt.as_secs_f64() / tau.as_secs_f64()).exp(),
                touched,
                fresh,
            ),
            _ => (1.0, &empty.0, &empty.1),
        };
        let mix = |old: f64, new: f64| old + weight * (new - old);
        let measured: BTreeMap<usize, f64> =
            sample.buckets.iter().map(|b| (b.bucket, b.load)).collect();
        let keys: BTreeSet<usize> = measured
            .keys()
            .chain(self.bucket_avg.keys())
            .copied()
            .filter(|&b| b < sample.entries.len())
            .collect();
        let mut buckets = BTreeMap::new();
        for b in keys {
            let old = self.bucket_avg.get(&b).copied();
            let avg = match old {
                Some(old) if fresh.contains(&b) => old,
                _ => mix(old.unwrap_or(0.0), measured.get(&b).copied().unwrap_or(0.0)),
            };
            if avg > NEGLIGIBLE {
                buckets.insert(b, avg);
            }
        }
        self.bucket_avg = buckets;
        let mut residuals = BTreeMap::new();
        for q in &sample.queues {
            let avg = match self.residual_avg.get(&q.queue).copied() {
                Some(old) if touched.contains(&q.queue) => old,
                Some(old) => mix(old, q.residual),
                None => q.residual,
            };
            residuals.insert(q.queue, avg);
        }
        self.residual_avg = residuals;
    }

    /// The greedy loop: the most loaded core still above the stop level, among those that
    /// were above the threshold at the start, gives its best bucket to the best destination;
    /// a core with no helpful move is passed over for the rest of the round, and a core that
    /// gave is no destination for the rest of it (a bucket bigger than the gap can leave it
    /// below the mean; it would give and take in one round). Returns how many cores were
    /// passed over for want of a move worth its price ([`RebalancePlan::priced_out`]).
    fn greedy(
        &self,
        model: &mut Model,
        mean: f64,
        eligible: &[bool],
        filter: &Filter<'_>,
        budget: usize,
        moves: &mut Vec<BucketMove>,
    ) -> usize {
        let mut priced_out = 0;
        let stop = mean * (1.0 + self.config.target);
        let mut exhausted = vec![false; model.cpus.len()];
        let mut no_dest = filter.no_dest.to_vec();
        while moves.len() < budget {
            let source = (0..model.cpus.len())
                .filter(|&c| {
                    eligible[c]
                        && !filter.no_source[c]
                        && !exhausted[c]
                        && model.cpus[c].load > stop + EPSILON
                })
                .max_by(|&a, &b| {
                    let (la, lb) = (model.cpus[a].load, model.cpus[b].load);
                    la.total_cmp(&lb).then(b.cmp(&a))
                });
            let Some(source) = source else { break };
            let round = Filter {
                no_dest: &no_dest,
                ..*filter
            };
            match model.best_move(source, mean, &self.config, Some(&round), true) {
                Some(choice) => {
                    moves.push(model.apply(source, choice));
                    no_dest[source] = true;
                }
                None => {
                    exhausted[source] = true;
                    if model.helps_at_no_cost(source, mean, &self.config, &round) {
                        priced_out += 1;
                    }
                }
            }
        }
        priced_out
    }

    /// RSS++'s adaptive period: the minimum above the urgent imbalance, halved above the
    /// fast one, doubled while nothing can move, and once moves are made no longer than the
    /// base (a shorter period, an urgent round's, stays while moves go on).
    fn next_period(&self, outcome: RoundOutcome, imbalance: f64) -> Duration {
        let c = &self.config;
        match outcome {
            RoundOutcome::Idle
            | RoundOutcome::Balanced
            | RoundOutcome::NoHelpfulMove
            | RoundOutcome::ConnectionLimit => self.period.saturating_mul(2).min(c.max_period),
            RoundOutcome::Moved | RoundOutcome::Waiting | RoundOutcome::Transient => {
                if imbalance > c.urgent_imbalance {
                    c.min_period
                } else if imbalance > c.fast_imbalance {
                    (self.period / 2).max(c.min_period)
                } else {
                    self.period.min(c.base_period)
                }
            }
        }
    }
}

/// Which cores, buckets and moves a round may not use.
struct Filter<'a> {
    /// By CPU (model index): not a source (it received buckets last round, or took some
    /// lately).
    no_source: &'a [bool],
    /// By CPU: not a destination (it received buckets last round, or gave some lately or
    /// earlier in the round).
    no_dest: &'a [bool],
    /// Buckets held down.
    is_held: &'a dyn Fn(usize) -> bool,
    /// (bucket, destination queue) backing off after a failure.
    blocked: &'a dyn Fn(usize, u16) -> bool,
}

/// One queue's figures in the period's sample.
#[derive(Debug)]
struct QueueSample {
    queue: u16,
    cpu: u32,
    node: u32,
    /// Its load (busy fraction; scaled down with its CPU's other queues' when they add up
    /// to more than the CPU).
    load: f64,
    /// The part of `load` in none of its buckets.
    residual: f64,
    connections: u64,
    limit: Option<u64>,
}

/// One bucket's figures in the period's sample.
#[derive(Clone, Copy, Debug)]
struct BucketSample {
    bucket: usize,
    load: f64,
    connections: u32,
    packets: u64,
    bytes: u64,
}

/// The snapshot checked, as loads.
#[derive(Debug)]
struct Sample {
    entries: Vec<u16>,
    queues: Vec<QueueSample>,
    buckets: Vec<BucketSample>,
    /// Node order from each node, nearest first (itself excluded).
    remote_order: BTreeMap<u32, Vec<u32>>,
}

impl Sample {
    fn build(snapshot: &LoadSnapshot<'_>) -> Result<Self> {
        let topo = snapshot.topology;
        let table = snapshot.table;
        let mut index: BTreeMap<u16, usize> = BTreeMap::new();
        let mut queues = Vec::with_capacity(snapshot.cores.len());
        let mut totals = Vec::with_capacity(snapshot.cores.len());
        for (i, c) in snapshot.cores.iter().enumerate() {
            if index.insert(c.queue, i).is_some() {
                return Err(Error::DuplicateQueue { queue: c.queue });
            }
            let cpu = topo.cpu(c.cpu).ok_or(Error::UnknownCpu { cpu: c.cpu })?;
            if topo.node(c.node).is_none() {
                return Err(Error::UnknownNode {
                    node: c.node,
                    known: topo.node_ids(),
                });
            }
            if cpu.numa_node != c.node {
                return Err(Error::InconsistentTopology(format!(
                    "the load snapshot puts queue {}'s CPU {} on NUMA node {}, the topology on node {}",
                    c.queue, c.cpu, c.node, cpu.numa_node
                )));
            }
            let load = if c.total_cycles == 0 {
                0.0
            } else {
                (c.busy_cycles as f64 / c.total_cycles as f64).min(1.0)
            };
            queues.push(QueueSample {
                queue: c.queue,
                cpu: c.cpu,
                node: c.node,
                load,
                residual: load,
                connections: u64::from(c.connections),
                limit: c.connection_limit.map(u64::from),
            });
            totals.push(c.total_cycles);
        }
        if let Some(&queue) = table.entries().iter().find(|q| !index.contains_key(q)) {
            return Err(Error::QueueWithoutLoad { queue });
        }
        let mut seen = vec![false; table.size()];
        let mut explicit: Vec<Vec<(BucketLoad, f64)>> = vec![Vec::new(); queues.len()];
        let mut shared: Vec<Vec<BucketLoad>> = vec![Vec::new(); queues.len()];
        let mut in_buckets = vec![0u64; queues.len()];
        for b in snapshot.buckets {
            let owner = *table
                .entries()
                .get(b.bucket)
                .ok_or(Error::BucketOutOfRange {
                    bucket: b.bucket,
                    size: table.size(),
                })?;
            if std::mem::replace(&mut seen[b.bucket], true) {
                return Err(Error::DuplicateBucket { bucket: b.bucket });
            }
            if owner != b.queue {
                return Err(Error::BucketOwnerMismatch {
                    bucket: b.bucket,
                    claimed: b.queue,
                    table: owner,
                });
            }
            let q = index[&owner];
            in_buckets[q] += u64::from(b.connections);
            match b.busy_cycles {
                Some(cycles) if totals[q] > 0 => {
                    explicit[q].push((*b, cycles as f64 / totals[q] as f64));
                }
                Some(_) => explicit[q].push((*b, 0.0)),
                None => shared[q].push(*b),
            }
        }
        let mut buckets = Vec::new();
        for (q, queue) in queues.iter_mut().enumerate() {
            queue.connections = queue.connections.max(in_buckets[q]);
            // Attributed time beyond the core's own busy time (counters read at slightly
            // different moments) is scaled down to it.
            let attributed: f64 = explicit[q].iter().map(|&(_, l)| l).sum();
            let scale = if attributed > queue.load && attributed > 0.0 {
                queue.load / attributed
            } else {
                1.0
            };
            let remainder = (queue.load - attributed * scale).max(0.0);
            let packets: u64 = shared[q].iter().map(|b| b.packets).sum();
            let state = |b: &BucketLoad, load: f64| BucketSample {
                bucket: b.bucket,
                load,
                connections: b.connections,
                packets: b.packets,
                bytes: b.bytes,
            };
            let first = buckets.len();
            buckets.extend(explicit[q].iter().map(|(b, l)| state(b, l * scale)));
            if packets > 0 {
                buckets.extend(
                    shared[q]
                        .iter()
                        .map(|b| state(b, remainder * b.packets as f64 / packets as f64)),
                );
            } else {
                buckets.extend(shared[q].iter().map(|b| state(b, 0.0)));
            }
            let in_queue: f64 = buckets[first..].iter().map(|b| b.load).sum();
            queue.residual = (queue.load - in_queue).max(0.0);
        }
        // Queues sharing a CPU: their busy times (wall-clock) add up to more than the CPU
        // when they preempt each other; scaled down to one CPU's worth.
        let mut per_cpu: BTreeMap<u32, f64> = BTreeMap::new();
        for q in &queues {
            *per_cpu.entry(q.cpu).or_default() += q.load;
        }
        let mut factor = vec![1.0; queues.len()];
        for (i, q) in queues.iter_mut().enumerate() {
            let sum = per_cpu[&q.cpu];
            if sum > 1.0 {
                factor[i] = 1.0 / sum;
                q.load *= factor[i];
                q.residual *= factor[i];
            }
        }
        for b in &mut buckets {
            b.load *= factor[index[&table.entries()[b.bucket]]];
        }
        let nodes: BTreeSet<u32> = queues.iter().map(|q| q.node).collect();
        let remote_order = nodes
            .iter()
            .map(|&n| {
                let order = topo
                    .nodes_by_distance(n)
                    .into_iter()
                    .filter(|&m| m != n && nodes.contains(&m))
                    .collect();
                (n, order)
            })
            .collect();
        Ok(Self {
            entries: table.entries().to_vec(),
            queues,
            buckets,
            remote_order,
        })
    }

    /// The mean and the largest of the CPUs' sampled loads.
    fn mean_max(&self) -> (f64, f64) {
        let mut per_cpu: BTreeMap<u32, f64> = BTreeMap::new();
        for q in &self.queues {
            *per_cpu.entry(q.cpu).or_default() += q.load;
        }
        if per_cpu.is_empty() {
            return (0.0, 0.0);
        }
        let sum: f64 = per_cpu.values().sum();
        let max = per_cpu.values().copied().fold(0.0, f64::max);
        (sum / per_cpu.len() as f64, max)
    }
}

/// A CPU in the round's model.
#[derive(Debug)]
struct CpuState {
    cpu: u32,
    node: u32,
    load: f64,
    /// The queues it serves.
    queues: Vec<QueueState>,
    /// The buckets of its queues with load, largest first; moved buckets are taken out.
    buckets: Vec<BucketState>,
}

#[derive(Debug)]
struct QueueState {
    queue: u16,
    connections: u64,
    limit: Option<u64>,
}

impl QueueState {
    /// Whether `connections` more keep it within its limit.
    fn has_room(&self, connections: u32) -> bool {
        self.limit
            .is_none_or(|l| self.connections + u64::from(connections) <= l)
    }
}

#[derive(Clone, Copy, Debug)]
struct BucketState {
    bucket: usize,
    /// Its queue now.
    queue: u16,
    load: f64,
    connections: u32,
    packets: u64,
    bytes: u64,
}

/// A chosen move: destination CPU (model index) and queue, bucket position in the source's
/// list, reason, gain and cost.
struct Choice {
    dest: usize,
    queue: u16,
    position: usize,
    reason: MoveReason,
    gain: f64,
    cost: f64,
    /// `cost` in the snapshot's unit.
    cost_ns: u64,
}

/// A bucket [`Model::pick_bucket`] chose: its position in the source's list, the queue of
/// the destination to give it to, the gain and the cost (a fraction of one CPU over the
/// horizon, and in the snapshot's unit).
#[derive(Clone, Copy)]
struct Pick {
    position: usize,
    queue: u16,
    gain: f64,
    cost: f64,
    cost_ns: u64,
}

/// The averaged loads by CPU: a CPU's load is the sum of its queues' loads outside their
/// buckets and of their buckets' loads, and a bucket's load moves with it.
#[derive(Debug)]
struct Model {
    cpus: Vec<CpuState>,
    /// What a move costs (the snapshot's, else the configured one).
    costs: MoveCost,
    /// Node order from each node, nearest first (itself excluded).
    remote_order: BTreeMap<u32, Vec<u32>>,
}

impl Model {
    fn build(
        sample: &Sample,
        bucket_avg: &BTreeMap<usize, f64>,
        residual_avg: &BTreeMap<u16, f64>,
        costs: MoveCost,
    ) -> Self {
        let mut cpus: Vec<CpuState> = Vec::new();
        let mut cpu_index: BTreeMap<u32, usize> = BTreeMap::new();
        let mut queue_cpu: BTreeMap<u16, usize> = BTreeMap::new();
        for q in &sample.queues {
            let c = *cpu_index.entry(q.cpu).or_insert_with(|| {
                cpus.push(CpuState {
                    cpu: q.cpu,
                    node: q.node,
                    load: 0.0,
                    queues: Vec::new(),
                    buckets: Vec::new(),
                });
                cpus.len() - 1
            });
            queue_cpu.insert(q.queue, c);
            cpus[c].load += residual_avg.get(&q.queue).copied().unwrap_or(0.0);
            cpus[c].queues.push(QueueState {
                queue: q.queue,
                connections: q.connections,
                limit: q.limit,
            });
        }
        let measured: BTreeMap<usize, &BucketSample> =
            sample.buckets.iter().map(|b| (b.bucket, b)).collect();
        for (&bucket, &load) in bucket_avg {
            let Some(&queue) = sample.entries.get(bucket) else {
                continue;
            };
            let c = queue_cpu[&queue];
            let m = measured.get(&bucket);
            cpus[c].load += load;
            cpus[c].buckets.push(BucketState {
                bucket,
                queue,
                load,
                connections: m.map_or(0, |b| b.connections),
                packets: m.map_or(0, |b| b.packets),
                bytes: m.map_or(0, |b| b.bytes),
            });
        }
        for c in &mut cpus {
            c.buckets
                .sort_by(|a, b| b.load.total_cmp(&a.load).then(a.bucket.cmp(&b.bucket)));
        }
        Self {
            cpus,
            costs,
            remote_order: sample.remote_order.clone(),
        }
    }

    fn mean_max(&self) -> (f64, f64) {
        if self.cpus.is_empty() {
            return (0.0, 0.0);
        }
        let sum: f64 = self.cpus.iter().map(|c| c.load).sum();
        let max = self.cpus.iter().map(|c| c.load).fold(0.0, f64::max);
        (sum / self.cpus.len() as f64, max)
    }

    /// Whether any eligible core above the stop level has a helpful move with `filter`
    /// (None: nothing held or skipped), within the connection limits if `limits` (tells
    /// [`RoundOutcome::Waiting`], [`RoundOutcome::ConnectionLimit`] and
    /// [`RoundOutcome::NoHelpfulMove`] apart).
    /// Whether `source` would have a move at no cost ([`Model::best_move`] with the costs
    /// at zero, the same `filter` and limits): the move it has none of at its price was
    /// refused for that price.
    fn helps_at_no_cost(
        &mut self,
        source: usize,
        mean: f64,
        config: &RebalanceConfig,
        filter: &Filter<'_>,
    ) -> bool {
        let costs = std::mem::take(&mut self.costs);
        let helps = self
            .best_move(source, mean, config, Some(filter), true)
            .is_some();
        self.costs = costs;
        helps
    }

    fn any_move(
        &self,
        mean: f64,
        eligible: &[bool],
        config: &RebalanceConfig,
        filter: Option<&Filter<'_>>,
        limits: bool,
    ) -> bool {
        let stop = mean * (1.0 + config.target);
        (0..self.cpus.len()).any(|c| {
            eligible[c]
                && self.cpus[c].load > stop + EPSILON
                && self.best_move(c, mean, config, filter, limits).is_some()
        })
    }

    /// The best move out of `source`: to its own node when a core there takes one of its
    /// buckets with a gain; to another node (nearest first) only when none there would, even
    /// without the round's skipped cores, held buckets and failed moves (those make the
    /// source wait, not cross).
    fn best_move(
        &self,
        source: usize,
        mean: f64,
        config: &RebalanceConfig,
        filter: Option<&Filter<'_>>,
        limits: bool,
    ) -> Option<Choice> {
        let node = self.cpus[source].node;
        if let Some(choice) = self.move_to_node(source, node, mean, config, filter, limits) {
            return Some(choice);
        }
        if filter.is_some()
            && self
                .move_to_node(source, node, mean, config, None, limits)
                .is_some()
        {
            return None;
        }
        self.remote_order
            .get(&node)?
            .iter()
            .find_map(|&to| self.move_to_node(source, to, mean, config, filter, limits))
    }

    /// The move of a bucket of `source` to a usable core of `node` below the mean, the
    /// least loaded first: the largest bucket that keeps it at or below the mean and gains
    /// more than it costs, else the bucket with the largest net gain.
    fn move_to_node(
        &self,
        source: usize,
        node: u32,
        mean: f64,
        config: &RebalanceConfig,
        filter: Option<&Filter<'_>>,
        limits: bool,
    ) -> Option<Choice> {
        let mut dests: Vec<usize> = (0..self.cpus.len())
            .filter(|&i| {
                let c = &self.cpus[i];
                i != source
                    && c.node == node
                    && c.load < mean - EPSILON
                    && filter.is_none_or(|f| !f.no_dest[i])
            })
            .collect();
        dests.sort_by(|&a, &b| {
            self.cpus[a]
                .load
                .total_cmp(&self.cpus[b].load)
                .then(a.cmp(&b))
        });
        let from_node = self.cpus[source].node;
        let reason = if node == from_node {
            MoveReason::SameNode { node }
        } else {
            MoveReason::NodeSaturated {
                from_node,
                to_node: node,
            }
        };
        dests.into_iter().find_map(|dest| {
            let pick = self.pick_bucket(source, dest, mean, config, filter, limits)?;
            Some(Choice {
                dest,
                queue: pick.queue,
                position: pick.position,
                reason,
                gain: pick.gain,
                cost: pick.cost,
                cost_ns: pick.cost_ns,
            })
        })
    }

    /// The bucket of `source` to give `dest`, the queue of `dest` to give it to, the gain
    /// and the cost.
    fn pick_bucket(
        &self,
        source: usize,
        dest: usize,
        mean: f64,
        config: &RebalanceConfig,
        filter: Option<&Filter<'_>>,
        limits: bool,
    ) -> Option<Pick> {
        let src = &self.cpus[source];
        let dst = &self.cpus[dest];
        let gap = src.load - dst.load;
        let room = mean - dst.load;
        let mut best: Option<Pick> = None;
        for (i, b) in src.buckets.iter().enumerate() {
            if filter.is_some_and(|f| (f.is_held)(b.bucket)) {
                continue;
            }
            let gain = b.load.min(gap - b.load);
            let cost_ns = self.costs.of(b.connections);
            let cost = cost_ns as f64 / config.cost_horizon as f64;
            if gain <= cost + EPSILON {
                continue;
            }
            // The queue of `dest` with the fewest connections that takes the bucket.
            let Some(queue) = dst
                .queues
                .iter()
                .filter(|q| !limits || q.has_room(b.connections))
                .filter(|q| filter.is_none_or(|f| !(f.blocked)(b.bucket, q.queue)))
                .min_by_key(|q| q.connections)
                .map(|q| q.queue)
            else {
                continue;
            };
            let pick = Pick {
                position: i,
                queue,
                gain,
                cost,
                cost_ns,
            };
            // Largest first: the first bucket that fits is the largest one that does.
            if b.load <= room + EPSILON {
                return Some(pick);
            }
            if best.is_none_or(|p| gain - cost > p.gain - p.cost + EPSILON) {
                best = Some(pick);
            }
        }
        best
    }

    fn apply(&mut self, source: usize, choice: Choice) -> BucketMove {
        let b = self.cpus[source].buckets.remove(choice.position);
        let (from_load, to_load) = (self.cpus[source].load, self.cpus[choice.dest].load);
        self.cpus[source].load -= b.load;
        self.cpus[choice.dest].load += b.load;
        let conns = u64::from(b.connections);
        if let Some(q) = self.cpus[source]
            .queues
            .iter_mut()
            .find(|q| q.queue == b.queue)
        {
            q.connections = q.connections.saturating_sub(conns);
        }
        if let Some(q) = self.cpus[choice.dest]
            .queues
            .iter_mut()
            .find(|q| q.queue == choice.queue)
        {
            q.connections += conns;
        }
        BucketMove {
            bucket: b.bucket,
            from: b.queue,
            to: choice.queue,
            reason: choice.reason,
            load: b.load,
            from_load,
            to_load,
            gain: choice.gain,
            cost: choice.cost,
            cost_ns: choice.cost_ns,
            connections: b.connections,
            packets: b.packets,
            bytes: b.bytes,
        }
    }
}

/// `max / mean` of a (mean, max) pair; 1 when the mean is nothing (idle).
fn ratio((mean, max): (f64, f64)) -> f64 {
    if mean > EPSILON {
        max / mean
    } else {
        1.0
    }
}

/// The most loaded over the mean of `loads` (each core's busy time or
/// fraction over one interval): 1 when balanced, and when idle.
#[must_use]
pub fn max_over_mean(loads: &[f64]) -> f64 {
    if loads.is_empty() {
        return 1.0;
    }
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    let max = loads.iter().copied().fold(0.0, f64::max);
    if mean > EPSILON {
        max / mean
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_over_mean_of_loads() {
        assert_eq!(max_over_mean(&[]), 1.0);
        assert_eq!(max_over_mean(&[0.0, 0.0]), 1.0, "idle");
        assert_eq!(max_over_mean(&[0.5, 0.5]), 1.0);
        assert_eq!(max_over_mean(&[0.9, 0.3]), 1.5);
        assert_eq!(max_over_mean(&[3.0, 0.0, 0.0]), 3.0);
    }

    const MS: Duration = Duration::from_millis(1);

    fn core(queue: u16, cpu: u32, busy: f64) -> CoreLoad {
        CoreLoad {
            queue,
            cpu,
            node: 0,
            busy_cycles: (busy * 1e6) as u64,
            total_cycles: 1_000_000,
            connections: 0,
            connection_limit: None,
        }
    }

    fn bucket(bucket: usize, queue: u16, packets: u64) -> BucketLoad {
        BucketLoad {
            bucket,
            queue,
            packets,
            bytes: packets * 1000,
            busy_cycles: None,
            connections: 0,
        }
    }

    /// Rebalancer without move costs, acting on each round's sample alone (these tests are
    /// about one round's decisions; the averages and the persistence rule have tests of
    /// their own).
    fn free() -> Rebalancer {
        Rebalancer::new(RebalanceConfig {
            move_cost: 0,
            connection_cost: 0,
            smoothing: Duration::ZERO,
            persistence: Duration::ZERO,
            ..RebalanceConfig::default()
        })
        .unwrap()
    }

    fn decide(
        r: &mut Rebalancer,
        now: Duration,
        table: &IndirectionTable,
        cores: &[CoreLoad],
        buckets: &[BucketLoad],
    ) -> Result<RebalancePlan> {
        let topology = Topology::synthetic(1, 1, 4, 1).unwrap();
        r.decide(&LoadSnapshot {
            now,
            table,
            topology: &topology,
            cores,
            buckets,
            move_cost: None,
        })
    }

    #[test]
    fn config_ranges() {
        assert!(RebalanceConfig::default().validate().is_ok());
        let field = |c: RebalanceConfig| match Rebalancer::new(c) {
            Err(Error::RebalanceConfig { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let d = RebalanceConfig::default();
        assert_eq!(field(RebalanceConfig { target: -0.1, ..d }), "target");
        assert_eq!(
            field(RebalanceConfig {
                threshold: 0.01,
                ..d
            }),
            "threshold"
        );
        assert_eq!(
            field(RebalanceConfig {
                threshold: f64::NAN,
                ..d
            }),
            "threshold"
        );
        assert_eq!(field(RebalanceConfig { min_load: 1.5, ..d }), "min_load");
        assert_eq!(
            field(RebalanceConfig {
                urgent_imbalance: f64::INFINITY,
                ..d
            }),
            "fast_imbalance"
        );
        assert_eq!(
            field(RebalanceConfig {
                min_period: Duration::ZERO,
                ..d
            }),
            "min_period"
        );
        assert_eq!(
            field(RebalanceConfig {
                base_period: 2 * d.max_period,
                ..d
            }),
            "base_period"
        );
        assert_eq!(
            field(RebalanceConfig {
                move_cost_memory: Duration::ZERO,
                ..d
            }),
            "move_cost_memory"
        );
        let e = Rebalancer::new(RebalanceConfig { target: -1.0, ..d }).unwrap_err();
        assert!(e.to_string().contains("`target`"), "{e}");
    }

    #[test]
    fn inconsistent_snapshots_are_refused_and_forgotten() {
        let table = IndirectionTable::new(vec![0, 0, 1, 1]).unwrap();
        let cores = [core(0, 0, 0.9), core(1, 1, 0.1)];
        let buckets = [bucket(0, 0, 10), bucket(1, 0, 10), bucket(2, 1, 1)];
        let mut r = free();
        let period = r.period();
        let t = Duration::from_secs(1);
        let err = |r: &mut Rebalancer, cores: &[CoreLoad], buckets: &[BucketLoad]| {
            decide(r, t, &table, cores, buckets).unwrap_err()
        };
        assert_eq!(
            err(&mut r, &[cores[0], core(0, 1, 0.1)], &buckets),
            Error::DuplicateQueue { queue: 0 }
        );
        assert_eq!(
            err(&mut r, &[cores[0], core(1, 9, 0.1)], &buckets),
            Error::UnknownCpu { cpu: 9 }
        );
        let mut remote = cores[1];
        remote.node = 3;
        assert!(matches!(
            err(&mut r, &[cores[0], remote], &buckets),
            Error::UnknownNode { node: 3, .. }
        ));
        let two_nodes = Topology::synthetic(1, 2, 2, 1).unwrap();
        let mut wrong = core(1, 2, 0.1);
        wrong.node = 0;
        let e = r
            .decide(&LoadSnapshot {
                now: t,
                table: &table,
                topology: &two_nodes,
                cores: &[cores[0], wrong],
                buckets: &buckets,
                move_cost: None,
            })
            .unwrap_err();
        assert!(matches!(e, Error::InconsistentTopology(ref m) if m.contains("queue 1's CPU 2")));
        let e = err(&mut r, &cores[..1], &buckets);
        assert_eq!(e, Error::QueueWithoutLoad { queue: 1 });
        assert!(e.to_string().contains("no worker for it"));
        assert_eq!(
            err(&mut r, &cores, &[bucket(4, 0, 1)]),
            Error::BucketOutOfRange { bucket: 4, size: 4 }
        );
        assert_eq!(
            err(&mut r, &cores, &[bucket(1, 0, 1), bucket(1, 0, 1)]),
            Error::DuplicateBucket { bucket: 1 }
        );
        assert_eq!(
            err(&mut r, &cores, &[bucket(2, 0, 1)]),
            Error::BucketOwnerMismatch {
                bucket: 2,
                claimed: 0,
                table: 1
            }
        );
        // Nothing was remembered; the same rebalancer plans from a good snapshot.
        assert_eq!(r.period(), period);
        let plan = decide(&mut r, t, &table, &cores, &buckets).unwrap();
        assert_eq!(plan.outcome, RoundOutcome::Moved);
        // A queue without buckets is a fine destination; absent buckets carry no load.
        let plan = decide(
            &mut free(),
            t,
            &IndirectionTable::new(vec![0; 4]).unwrap(),
            &[core(0, 0, 0.8), core(3, 3, 0.0)],
            &[bucket(1, 0, 5), bucket(2, 0, 5)],
        )
        .unwrap();
        assert_eq!(plan.moves.len(), 1);
        assert_eq!((plan.moves[0].to, plan.moves[0].load), (3, 0.4));
    }

    #[test]
    fn apply_checks_the_table_and_reuses_diff() {
        let table = IndirectionTable::new(vec![0, 0, 1, 1]).unwrap();
        let mut plan = decide(
            &mut free(),
            MS,
            &table,
            &[core(0, 0, 0.9), core(1, 1, 0.1)],
            &[bucket(0, 0, 10), bucket(1, 0, 30), bucket(2, 1, 1)],
        )
        .unwrap();
        // Bucket 1 (0.675) does not fit under the mean (0.5) and gains 0.125; bucket 0
        // (0.225) fits and gains 0.225.
        assert_eq!(
            plan.changes(),
            vec![EntryChange {
                bucket: 0,
                from: 0,
                to: 1
            }]
        );
        let (new, changes) = plan.apply(&table).unwrap();
        assert_eq!(new.entries(), &[1, 0, 1, 1]);
        assert_eq!(changes, plan.changes());
        assert_eq!(
            plan.apply(&new),
            Err(Error::BucketOwnerMismatch {
                bucket: 0,
                claimed: 0,
                table: 1
            })
        );
        plan.moves[0].bucket = 8;
        assert_eq!(
            plan.apply(&table),
            Err(Error::BucketOutOfRange { bucket: 8, size: 4 })
        );
    }

    #[test]
    fn attributed_cycles_are_bucket_loads_and_the_rest_stays() {
        // Queue 0 busy 0.8: bucket 0 measured 0.5; bucket 1 measured at 0.1; bucket 2 shares
        // the remaining 0.2 by packets with bucket 3 (1 : 3).
        let table = IndirectionTable::new(vec![0, 0, 0, 0, 1, 1, 1, 1]).unwrap();
        let mut b = [
            bucket(0, 0, 1),
            bucket(1, 0, 1),
            bucket(2, 0, 1),
            bucket(3, 0, 3),
        ];
        b[0].busy_cycles = Some(500_000);
        b[1].busy_cycles = Some(100_000);
        let cores = [core(0, 0, 0.8), core(1, 1, 0.0)];
        let topology = Topology::synthetic(1, 1, 2, 1).unwrap();
        // Queue 0's bucket loads, rounded, as the model sees them.
        let loads_of = |b: &[BucketLoad]| -> Vec<(usize, f64)> {
            let sample = Sample::build(&LoadSnapshot {
                now: MS,
                table: &table,
                topology: &topology,
                cores: &cores,
                buckets: b,
                move_cost: None,
            })
            .unwrap();
            let model = Model::build(
                &sample,
                &sample.buckets.iter().map(|b| (b.bucket, b.load)).collect(),
                &BTreeMap::new(),
                RebalanceConfig::default().move_costs(),
            );
            model.cpus[0]
                .buckets
                .iter()
                .filter(|b| b.load > 0.0)
                .map(|b| (b.bucket, (b.load * 1e6).round() / 1e6))
                .collect()
        };
        let loads = loads_of(&b);
        assert_eq!(loads, vec![(0, 0.5), (3, 0.15), (1, 0.1), (2, 0.05)]);
        // Attributed beyond the busy time: scaled down to it, nothing left to share.
        b[0].busy_cycles = Some(1_200_000);
        b[1].busy_cycles = Some(400_000);
        let loads = loads_of(&b);
        assert_eq!(loads, vec![(0, 0.6), (1, 0.2)]);
    }

    /// Two queues, bucket 0 and bucket 1 on queue 0, buckets 2 and 3 on queue 1, with the
    /// given packets (queue loads follow the packets: 1 % of a core per 1 000).
    fn four(table: &IndirectionTable, packets: [u64; 4]) -> (Vec<CoreLoad>, Vec<BucketLoad>) {
        let mut per_queue = [0u64; 2];
        let buckets: Vec<BucketLoad> = (0..4)
            .map(|b| {
                let q = table.entries()[b];
                per_queue[usize::from(q)] += packets[b];
                bucket(b, q, packets[b])
            })
            .collect();
        let cores = (0..2)
            .map(|q| core(q as u16, q as u32, per_queue[q] as f64 / 100_000.0))
            .collect();
        (cores, buckets)
    }

    #[test]
    fn a_moved_bucket_is_held_down_and_its_receiver_skipped() {
        let mut r = free();
        let table = IndirectionTable::new(vec![0, 0, 1, 1]).unwrap();
        let t0 = Duration::from_secs(10);
        // Queue 0 at 0.6, queue 1 at 0.1: neither hot bucket fits under the mean (0.35);
        // bucket 0 gains most (0.2). Queue 1 then carries 0.4, 14 % above the mean, but it
        // was not above the threshold when the round began: it gives nothing back.
        let (c, b) = four(&table, [30_000, 30_000, 5_000, 5_000]);
        let plan = decide(&mut r, t0, &table, &c, &b).unwrap();
        assert_eq!(
            plan.changes(),
            vec![EntryChange {
                bucket: 0,
                from: 0,
                to: 1
            }]
        );
        assert!(r.is_held(0, t0 + 499 * MS) && !r.is_held(0, t0 + 500 * MS));
        assert!(!r.is_held(1, t0) && !r.is_held(2, t0));
        // Queue 1 received: the next round neither gives it buckets nor takes any from it
        // (its measurement does not show the new bucket's load yet), however skewed.
        let table = plan.apply(&table).unwrap().0;
        // Queue 0 at 0.05, queue 1 at 0.35.
        let (c, b) = four(&table, [20_000, 5_000, 10_000, 5_000]);
        let plan = decide(&mut r, t0 + 10 * MS, &table, &c, &b).unwrap();
        assert_eq!((plan.outcome, plan.moves.len()), (RoundOutcome::Waiting, 0));
        // The round after, queue 1 is no longer a receiver of the last round, but it took
        // buckets and queue 0 gave: neither switches part before a hold-down has passed.
        let plan = decide(&mut r, t0 + 20 * MS, &table, &c, &b).unwrap();
        assert_eq!((plan.outcome, plan.moves.len()), (RoundOutcome::Waiting, 0));
        // Then bucket 2 moves (bucket 0 would not fit under the mean), and bucket 3 evens out.
        let plan = decide(&mut r, t0 + 500 * MS, &table, &c, &b).unwrap();
        assert_eq!(
            plan.changes(),
            vec![
                EntryChange {
                    bucket: 2,
                    from: 1,
                    to: 0
                },
                EntryChange {
                    bucket: 3,
                    from: 1,
                    to: 0
                }
            ]
        );
        assert!((plan.predicted_max_over_mean - 1.0).abs() < 1e-9);

        // Only a held bucket could help (queue 1's other 0.15 is its own, in no bucket):
        // the round waits until the hold-down ends.
        let table = IndirectionTable::new(vec![1, 0, 1, 1]).unwrap();
        let c = [core(0, 0, 0.01), core(1, 1, 0.35)];
        let mut b = [bucket(0, 1, 1), bucket(1, 0, 1), bucket(2, 1, 0)];
        b[0].busy_cycles = Some(200_000);
        let mut r = free();
        r.note_move(0, 1, t0);
        let plan = decide(&mut r, t0 + 10 * MS, &table, &c, &b).unwrap();
        assert_eq!((plan.outcome, plan.moves.len()), (RoundOutcome::Waiting, 0));
        let plan = decide(&mut r, t0 + 499 * MS, &table, &c, &b).unwrap();
        assert_eq!((plan.outcome, plan.moves.len()), (RoundOutcome::Waiting, 0));
        let plan = decide(&mut r, t0 + 500 * MS, &table, &c, &b).unwrap();
        assert_eq!(
            plan.changes()[0],
            EntryChange {
                bucket: 0,
                from: 1,
                to: 0
            }
        );
    }

    #[test]
    fn the_period_adapts_to_the_imbalance() {
        let mut r = free();
        let ms = |plan: &RebalancePlan| plan.next_period.as_millis();
        let table = IndirectionTable::new(vec![0, 0, 1, 1]).unwrap();
        let t = Duration::from_secs(5);
        // max/mean 1.5: urgent, minimum period.
        let (c, b) = four(&table, [30_000, 30_000, 10_000, 10_000]);
        assert_eq!(ms(&decide(&mut r, t, &table, &c, &b).unwrap()), 10);
        // Balanced: doubles up to 1 s.
        let (c, b) = four(&table, [10_000, 10_000, 10_000, 10_000]);
        let doubling: Vec<u128> = (0..8)
            .map(|i| ms(&decide(&mut r, t + i * MS, &table, &c, &b).unwrap()))
            .collect();
        assert_eq!(doubling, vec![20, 40, 80, 160, 320, 640, 1000, 1000]);
        // max/mean 1.3 with moves: halved; 1.15 with moves: back to the base.
        let (c, b) = four(&table, [20_000, 6_000, 10_000, 4_000]);
        let plan = decide(&mut r, t + 10 * MS, &table, &c, &b).unwrap();
        assert!((plan.max_over_mean - 1.3).abs() < 1e-9);
        assert_eq!((plan.outcome, ms(&plan)), (RoundOutcome::Moved, 500));
        let (c, b) = four(&table, [20_000, 3_000, 10_000, 7_000]);
        let plan = decide(&mut free(), t, &table, &c, &b).unwrap();
        assert_eq!(plan.outcome, RoundOutcome::Moved);
        let mut slow = free();
        slow.period = Duration::from_secs(1);
        let plan = decide(&mut slow, t, &table, &c, &b).unwrap();
        assert!((plan.max_over_mean - 1.15).abs() < 1e-9);
        assert_eq!(ms(&plan), 100);
        // Idle: doubles.
        let (c, b) = four(&table, [4_000, 0, 0, 0]);
        let plan = decide(&mut free(), t, &table, &c, &b).unwrap();
        assert_eq!((plan.outcome, ms(&plan)), (RoundOutcome::Idle, 200));
    }
}
