//! The rebalancing policy: which RSS buckets move to which queue, from per-bucket and
//! per-core load snapshots.
//!
//! The method is RSS++'s (T. Barbette, G. P. Katsikas, G. Q. Maguire Jr., D. Kostić,
//! "RSS++: load and state-aware receive side scaling", CoNEXT 2019, §3): a bucket's load is
//! its core's busy time times the bucket's share of the core's packets (or the busy time the
//! worker attributed to the bucket itself, when it measured that); the target of every core
//! is the mean load; when the most loaded core is more than a threshold above the mean,
//! buckets are moved greedily, the largest bucket that fits first, from the most loaded core
//! to the least loaded one; a core that has just received buckets is left alone for a round
//! (its measurement does not show them yet); the period adapts to the imbalance. flowlane
//! adds what moving live TCP connections needs:
//!
//! - a move must lower the larger load of the two cores it touches by more than it costs
//!   ([`RebalanceConfig::move_cost`] plus [`RebalanceConfig::connection_cost`] per connection:
//!   the handoff exports, forwards and imports them), so no move raises the maximum load, and
//!   a bucket bigger than the gap it would close stays put;
//! - a bucket moved is held where it is for [`RebalanceConfig::hold_down`] (no ping-pong);
//! - destinations on the source's NUMA node come first; another node (nearest first, by the
//!   [`Topology`]'s distances) only when the source's node is saturated: no other core of it
//!   below the mean would take any of the source's buckets with a gain (a core there that
//!   will once this round's skipped receivers and held buckets are free makes the source
//!   wait instead);
//! - at most [`RebalanceConfig::max_moves`] moves per round.
//!
//! Everything here is pure: the caller measures (busy time, packets per bucket), passes the
//! time in the snapshot ([`LoadSnapshot::now`]), applies the plan ([`RebalancePlan::apply`]
//! gives the new table and the entries to write through [`crate::nic::RssNic`]) and calls
//! [`Rebalancer::decide`] again after [`RebalancePlan::next_period`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::indirection::{EntryChange, IndirectionTable};
use crate::topology::Topology;

/// Slack for comparisons of loads computed in floating point.
const EPSILON: f64 = 1e-12;

/// The policy's settings. [`RebalanceConfig::default`] documents each default.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RebalanceConfig {
    /// Act only when the most loaded core is above `mean × (1 + threshold)`. Default 0.10:
    /// measured loads jitter by a few percent, and the goal is max/mean ≤ 1.2.
    pub threshold: f64,
    /// Once acting, move buckets until no core is above `mean × (1 + target)` (or no move
    /// helps). At most `threshold`. Default 0.02 (RSS++'s imbalance threshold).
    pub target: f64,
    /// Do nothing while the most loaded core is busy less than this fraction of its time:
    /// an idle machine's relative imbalance is noise, and moves cost. Default 0.05.
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
    /// A bucket moved is not moved again before this much time has passed. Default 500 ms:
    /// five base periods, and short enough that a new skew is met within the 1 s.
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
        Ok(())
    }
}

/// One worker's load over the last period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CoreLoad {
    /// The receive queue the worker serves.
    pub queue: u16,
    /// The logical CPU the worker runs on.
    pub cpu: u32,
    /// The NUMA node of `cpu`.
    pub node: u32,
    /// Time the worker spent working (not polling idle), in cycles or nanoseconds: one unit
    /// for the whole snapshot and the config's costs.
    pub busy_cycles: u64,
    /// Length of the period in the same unit (`busy_cycles / total_cycles` is the busy
    /// fraction; a worker that reports a fraction passes e.g. `total_cycles = 1_000_000`).
    pub total_cycles: u64,
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
    /// The queue it goes to.
    pub to: u16,
    /// Why there.
    pub reason: MoveReason,
    /// The bucket's load, as a fraction of one core.
    pub load: f64,
    /// Load of `from` just before this move, in the plan's model (earlier moves of the
    /// round applied).
    pub from_load: f64,
    /// Load of `to` just before this move, in the same model.
    pub to_load: f64,
    /// How much the move lowers the larger load of the two cores, in the model:
    /// `min(load, from_load − to_load − load)`. Always more than `cost`.
    pub gain: f64,
    /// The move's cost as a fraction of one period of the source core.
    pub cost: f64,
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
    /// The most loaded core is below [`RebalanceConfig::min_load`]: nothing worth moving.
    Idle,
    /// The imbalance is within [`RebalanceConfig::threshold`].
    Balanced,
    /// The plan has moves.
    Moved,
    /// Above the threshold, but every helpful move waits: its bucket is held down, or its
    /// destination received buckets last round, or the round's move budget is zero.
    Waiting,
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
    /// Mean core load measured (fraction of a core).
    pub mean_load: f64,
    /// Largest core load measured.
    pub max_load: f64,
    /// `max_load / mean_load` measured (1 when idle): the imbalance the goal
    /// (≤ 1.2) is about.
    pub max_over_mean: f64,
    /// `max / mean` of the model once the moves are applied.
    pub predicted_max_over_mean: f64,
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

/// The policy with its memory between rounds: buckets held down after a move, the cores
/// that received buckets in the last round, and the adaptive period.
///
/// Call [`Rebalancer::decide`] with a fresh snapshot every [`RebalancePlan::next_period`];
/// the rebalancer assumes its plans are carried out (tell it about moves made by hand with
/// [`Rebalancer::note_move`]).
#[derive(Clone, Debug)]
pub struct Rebalancer {
    config: RebalanceConfig,
    /// Bucket → when it last moved.
    moved_at: BTreeMap<usize, Duration>,
    /// Queues that received buckets in the last round: not destinations in this one.
    receivers: BTreeSet<u16>,
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
            moved_at: BTreeMap::new(),
            receivers: BTreeSet::new(),
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

    /// Whether `bucket` is held where it is at time `now` (it moved less than
    /// [`RebalanceConfig::hold_down`] before).
    #[must_use]
    pub fn is_held(&self, bucket: usize, now: Duration) -> bool {
        self.moved_at
            .get(&bucket)
            .is_some_and(|&t| now < t.saturating_add(self.config.hold_down))
    }

    /// Records a move the rebalancer did not plan (an operator's `rebalance move`): the
    /// bucket is held down from `now`, and `to` is not a destination in the next round.
    pub fn note_move(&mut self, bucket: usize, to: u16, now: Duration) {
        self.moved_at.insert(bucket, now);
        self.receivers.insert(to);
    }

    /// One round: validates the snapshot, measures the imbalance, plans the moves (module
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
        let mut model = Model::build(snapshot)?;
        let now = snapshot.now;
        let hold = self.config.hold_down;
        self.moved_at.retain(|_, t| now < t.saturating_add(hold));
        let skip = std::mem::take(&mut self.receivers);

        let (mean, max) = model.mean_max();
        let max_over_mean = if mean > EPSILON { max / mean } else { 1.0 };
        let mut moves = Vec::new();
        let outcome = if max < self.config.min_load || mean <= EPSILON {
            RoundOutcome::Idle
        } else if max_over_mean <= 1.0 + self.config.threshold + EPSILON {
            RoundOutcome::Balanced
        } else {
            self.greedy(&mut model, mean, &skip, now, &mut moves);
            if !moves.is_empty() {
                RoundOutcome::Moved
            } else if self.config.max_moves == 0 || model.any_move(mean, &self.config, None) {
                RoundOutcome::Waiting
            } else {
                RoundOutcome::NoHelpfulMove
            }
        };
        for m in &moves {
            self.moved_at.insert(m.bucket, now);
            self.receivers.insert(m.to);
        }
        let (_, predicted_max) = model.mean_max();
        self.period = self.next_period(outcome, max_over_mean - 1.0);
        Ok(RebalancePlan {
            moves,
            outcome,
            next_period: self.period,
            mean_load: mean,
            max_load: max,
            max_over_mean,
            predicted_max_over_mean: if mean > EPSILON {
                predicted_max / mean
            } else {
                1.0
            },
        })
    }

    /// The greedy loop: the most loaded core above the stop level gives its best bucket to
    /// the best destination; a core with no helpful move is passed over for the rest of the
    /// round.
    fn greedy(
        &self,
        model: &mut Model,
        mean: f64,
        skip: &BTreeSet<u16>,
        now: Duration,
        moves: &mut Vec<BucketMove>,
    ) {
        let stop = mean * (1.0 + self.config.target);
        let mut exhausted = vec![false; model.cores.len()];
        let filter = Filter {
            skip,
            is_held: &|b| self.is_held(b, now),
        };
        while moves.len() < self.config.max_moves {
            let source = (0..model.cores.len())
                .filter(|&c| !exhausted[c] && model.cores[c].load > stop + EPSILON)
                .max_by(|&a, &b| {
                    let (la, lb) = (model.cores[a].load, model.cores[b].load);
                    la.total_cmp(&lb).then(b.cmp(&a))
                });
            let Some(source) = source else { break };
            match model.best_move(source, mean, &self.config, Some(&filter)) {
                Some(choice) => moves.push(model.apply(source, choice)),
                None => exhausted[source] = true,
            }
        }
    }

    /// RSS++'s adaptive period: the minimum above the urgent imbalance, halved above the
    /// fast one, doubled while nothing can move, and once moves are made no longer than the
    /// base (a shorter period, an urgent round's, stays while moves go on).
    fn next_period(&self, outcome: RoundOutcome, imbalance: f64) -> Duration {
        let c = &self.config;
        match outcome {
            RoundOutcome::Idle | RoundOutcome::Balanced | RoundOutcome::NoHelpfulMove => {
                self.period.saturating_mul(2).min(c.max_period)
            }
            RoundOutcome::Moved | RoundOutcome::Waiting => {
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

/// Which destinations and buckets a round may not use.
struct Filter<'a> {
    /// Queues that received buckets last round.
    skip: &'a BTreeSet<u16>,
    /// Buckets held down.
    is_held: &'a dyn Fn(usize) -> bool,
}

/// A core in the round's model.
#[derive(Debug)]
struct CoreState {
    queue: u16,
    node: u32,
    load: f64,
    total: u64,
    /// Its buckets with load, largest first; moved buckets are taken out.
    buckets: Vec<BucketState>,
}

#[derive(Clone, Copy, Debug)]
struct BucketState {
    bucket: usize,
    load: f64,
    connections: u32,
    packets: u64,
    bytes: u64,
}

/// A chosen move: destination core index, bucket position in the source's list, reason,
/// gain and cost.
struct Choice {
    dest: usize,
    position: usize,
    reason: MoveReason,
    gain: f64,
    cost: f64,
}

/// The snapshot as loads: a core's load is its busy fraction, and a bucket's load moves
/// with it.
#[derive(Debug)]
struct Model {
    cores: Vec<CoreState>,
    /// Node order from each node, nearest first (itself excluded).
    remote_order: BTreeMap<u32, Vec<u32>>,
}

impl Model {
    fn build(snapshot: &LoadSnapshot<'_>) -> Result<Self> {
        let topo = snapshot.topology;
        let table = snapshot.table;
        let mut index: BTreeMap<u16, usize> = BTreeMap::new();
        let mut cores = Vec::with_capacity(snapshot.cores.len());
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
            cores.push(CoreState {
                queue: c.queue,
                node: c.node,
                load,
                total: c.total_cycles,
                buckets: Vec::new(),
            });
        }
        if let Some(&queue) = table.entries().iter().find(|q| !index.contains_key(q)) {
            return Err(Error::QueueWithoutLoad { queue });
        }
        let mut seen = vec![false; table.size()];
        let mut explicit: Vec<Vec<(BucketLoad, f64)>> = vec![Vec::new(); cores.len()];
        let mut shared: Vec<Vec<BucketLoad>> = vec![Vec::new(); cores.len()];
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
            let c = index[&owner];
            match b.busy_cycles {
                Some(cycles) if cores[c].total > 0 => {
                    explicit[c].push((*b, cycles as f64 / cores[c].total as f64));
                }
                Some(_) => explicit[c].push((*b, 0.0)),
                None => shared[c].push(*b),
            }
        }
        for (c, core) in cores.iter_mut().enumerate() {
            // Attributed time beyond the core's own busy time (counters read at slightly
            // different moments) is scaled down to it.
            let attributed: f64 = explicit[c].iter().map(|&(_, l)| l).sum();
            let scale = if attributed > core.load && attributed > 0.0 {
                core.load / attributed
            } else {
                1.0
            };
            let remainder = (core.load - attributed * scale).max(0.0);
            let packets: u64 = shared[c].iter().map(|b| b.packets).sum();
            let state = |b: &BucketLoad, load: f64| BucketState {
                bucket: b.bucket,
                load,
                connections: b.connections,
                packets: b.packets,
                bytes: b.bytes,
            };
            core.buckets
                .extend(explicit[c].iter().map(|(b, l)| state(b, l * scale)));
            if packets > 0 {
                core.buckets.extend(
                    shared[c]
                        .iter()
                        .map(|b| state(b, remainder * b.packets as f64 / packets as f64)),
                );
            }
            core.buckets.retain(|b| b.load > 0.0);
            core.buckets
                .sort_by(|a, b| b.load.total_cmp(&a.load).then(a.bucket.cmp(&b.bucket)));
        }
        let nodes: BTreeSet<u32> = cores.iter().map(|c| c.node).collect();
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
            cores,
            remote_order,
        })
    }

    fn mean_max(&self) -> (f64, f64) {
        if self.cores.is_empty() {
            return (0.0, 0.0);
        }
        let sum: f64 = self.cores.iter().map(|c| c.load).sum();
        let max = self.cores.iter().map(|c| c.load).fold(0.0, f64::max);
        (sum / self.cores.len() as f64, max)
    }

    /// Whether any core above the stop level has a helpful move when nothing is held or
    /// skipped (tells [`RoundOutcome::Waiting`] from [`RoundOutcome::NoHelpfulMove`]).
    fn any_move(&self, mean: f64, config: &RebalanceConfig, filter: Option<&Filter<'_>>) -> bool {
        let stop = mean * (1.0 + config.target);
        (0..self.cores.len()).any(|c| {
            self.cores[c].load > stop + EPSILON && self.best_move(c, mean, config, filter).is_some()
        })
    }

    /// The best move out of `source`: to its own node when a core there takes one of its
    /// buckets with a gain; to another node (nearest first) only when none there would, even
    /// without the round's skipped destinations and held buckets (those make the source
    /// wait, not cross).
    fn best_move(
        &self,
        source: usize,
        mean: f64,
        config: &RebalanceConfig,
        filter: Option<&Filter<'_>>,
    ) -> Option<Choice> {
        let node = self.cores[source].node;
        if let Some(choice) = self.move_to_node(source, node, mean, config, filter) {
            return Some(choice);
        }
        if filter.is_some()
            && self
                .move_to_node(source, node, mean, config, None)
                .is_some()
        {
            return None;
        }
        self.remote_order
            .get(&node)?
            .iter()
            .find_map(|&to| self.move_to_node(source, to, mean, config, filter))
    }

    /// The move of a bucket of `source` to the least loaded usable core of `node` below the
    /// mean: the largest bucket that keeps it at or below the mean and gains more than it
    /// costs, else the bucket with the largest net gain.
    fn move_to_node(
        &self,
        source: usize,
        node: u32,
        mean: f64,
        config: &RebalanceConfig,
        filter: Option<&Filter<'_>>,
    ) -> Option<Choice> {
        let dest = (0..self.cores.len())
            .filter(|&i| {
                let c = &self.cores[i];
                i != source
                    && c.node == node
                    && c.load < mean - EPSILON
                    && filter.is_none_or(|f| !f.skip.contains(&c.queue))
            })
            .min_by(|&a, &b| {
                self.cores[a]
                    .load
                    .total_cmp(&self.cores[b].load)
                    .then(a.cmp(&b))
            })?;
        let (position, gain, cost) = self.pick_bucket(source, dest, mean, config, filter)?;
        let from_node = self.cores[source].node;
        let reason = if node == from_node {
            MoveReason::SameNode { node }
        } else {
            MoveReason::NodeSaturated {
                from_node,
                to_node: node,
            }
        };
        Some(Choice {
            dest,
            position,
            reason,
            gain,
            cost,
        })
    }

    /// The bucket of `source` to give `dest`, with its gain and cost.
    fn pick_bucket(
        &self,
        source: usize,
        dest: usize,
        mean: f64,
        config: &RebalanceConfig,
        filter: Option<&Filter<'_>>,
    ) -> Option<(usize, f64, f64)> {
        let src = &self.cores[source];
        let dst = &self.cores[dest];
        let gap = src.load - dst.load;
        let room = mean - dst.load;
        let mut best: Option<(usize, f64, f64)> = None;
        for (i, b) in src.buckets.iter().enumerate() {
            if filter.is_some_and(|f| (f.is_held)(b.bucket)) {
                continue;
            }
            let gain = b.load.min(gap - b.load);
            let cost = if src.total == 0 {
                f64::INFINITY
            } else {
                (config.move_cost as f64 + f64::from(b.connections) * config.connection_cost as f64)
                    / src.total as f64
            };
            if gain <= cost + EPSILON {
                continue;
            }
            // Largest first: the first bucket that fits is the largest one that does.
            if b.load <= room + EPSILON {
                return Some((i, gain, cost));
            }
            if best.is_none_or(|(_, g, c)| gain - cost > g - c + EPSILON) {
                best = Some((i, gain, cost));
            }
        }
        best
    }

    fn apply(&mut self, source: usize, choice: Choice) -> BucketMove {
        let b = self.cores[source].buckets.remove(choice.position);
        let (from_load, to_load) = (self.cores[source].load, self.cores[choice.dest].load);
        self.cores[source].load -= b.load;
        self.cores[choice.dest].load += b.load;
        BucketMove {
            bucket: b.bucket,
            from: self.cores[source].queue,
            to: self.cores[choice.dest].queue,
            reason: choice.reason,
            load: b.load,
            from_load,
            to_load,
            gain: choice.gain,
            cost: choice.cost,
            connections: b.connections,
            packets: b.packets,
            bytes: b.bytes,
        }
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

    /// Rebalancer without move costs.
    fn free() -> Rebalancer {
        Rebalancer::new(RebalanceConfig {
            move_cost: 0,
            connection_cost: 0,
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
            let model = Model::build(&LoadSnapshot {
                now: MS,
                table: &table,
                topology: &topology,
                cores: &cores,
                buckets: b,
            })
            .unwrap();
            model.cores[0]
                .buckets
                .iter()
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
        // bucket 0 gains most (0.2); then queue 1 (0.4) is the hot one and gives bucket 2.
        let (c, b) = four(&table, [30_000, 30_000, 5_000, 5_000]);
        let plan = decide(&mut r, t0, &table, &c, &b).unwrap();
        assert_eq!(
            plan.changes(),
            vec![
                EntryChange {
                    bucket: 0,
                    from: 0,
                    to: 1
                },
                EntryChange {
                    bucket: 2,
                    from: 1,
                    to: 0
                }
            ]
        );
        assert!(r.is_held(0, t0 + 499 * MS) && !r.is_held(0, t0 + 500 * MS));
        assert!(r.is_held(2, t0) && !r.is_held(1, t0));
        // Both queues received: the next round waits, however skewed.
        let table = plan.apply(&table).unwrap().0;
        let (c, b) = four(&table, [5_000, 20_000, 20_000, 5_000]);
        let plan = decide(&mut r, t0 + 10 * MS, &table, &c, &b).unwrap();
        assert_eq!(plan.outcome, RoundOutcome::Waiting);
        // The round after, bucket 1 (not held; bucket 2 is) moves, and bucket 3 evens out.
        let plan = decide(&mut r, t0 + 20 * MS, &table, &c, &b).unwrap();
        assert_eq!(
            plan.changes(),
            vec![
                EntryChange {
                    bucket: 1,
                    from: 0,
                    to: 1
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
