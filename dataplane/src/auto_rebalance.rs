//! A TCP service's rebalancing loop (`--rebalance auto`): every period,
//! the queues' load over the period (each worker's busy time, at most its
//! time on a CPU, each RSS bucket's segments, bytes and sampled busy time,
//! as the worker published them together) as a numa-sched
//! [`LoadSnapshot`], and the
//! [`Rebalancer`]'s plan carried out bucket by bucket through
//! [`TcpService::move_bucket`]. Also the test mode that moves a random
//! bucket in use every few milliseconds whatever the load (a storm).
//!
//! It runs on the service's main thread (not on a worker): a few counter
//! reads per period, and the moves themselves.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use flowlane_numa_sched::{
    BucketLoad, BucketMove, CoreLoad, IndirectionTable, LoadSnapshot, MoveCost, MoveCostModel,
    MoveReason, RebalanceConfig, RebalancePlan, Rebalancer, Topology,
};
use serde::Serialize;

use crate::bucket_counters::BucketSnapshot;
use crate::control_socket::MoveCause;
use crate::cpu_time::{schedstat_ns, worker_schedstat};
use crate::handoff::MoveReport;
use crate::service_control::move_and_see;
use crate::tcp_handler::PUBLISH_EVERY;
use crate::tcp_service::TcpService;
use crate::{Error, Result};

/// The bucket counters are published every 50 ms: no shorter period.
const MIN_PERIOD: Duration = PUBLISH_EVERY;

/// A round that finds a queue which has not published since the last
/// one is tried again this much later.
const RETRY: Duration = Duration::from_millis(10);

/// Reads of the counters that met a publication, before the round gives
/// up until [`RETRY`].
const READ_TRIES: usize = 4;

/// The learned cost of a move ([`AutoRebalance::learn`]) is at most the
/// policy's cost horizon divided by this: 50 ms by the defaults, so that a
/// bucket carrying more than a tenth of a core still moves however slow
/// the moves seen were (the fit is robust, but a host where every move
/// waited for a CPU for a while must not price all moves out for good).
const CEILING_FIXED_DIVISOR: u64 = 10;

/// The learned cost of each connection a move carries is at most the
/// cost horizon divided by this: 1 ms by the defaults (500 times the
/// design's 2 µs).
const CEILING_PER_CONNECTION_DIVISOR: u64 = 500;

/// The longest wait after rounds whose moves failed (the wait doubles
/// from the policy's base period with each such round in a row).
const MAX_BACKOFF: Duration = Duration::from_secs(32);

/// What the rebalancing loop prices a bucket move at (a service's
/// `--move-cost`), against the load the move takes off the busier core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum MovePrice {
    /// What the moves made cost here: a fit of their measured durations
    /// against the connections they carried, the configured price its
    /// prior (numa-sched's `MoveCostModel`).
    #[default]
    Learned,
    /// The configured price (numa-sched's `RebalanceConfig::move_costs`:
    /// 20 µs + 2 µs a connection), whatever the moves cost: nothing is
    /// learned.
    Fixed,
}

/// What the loop does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Move buckets when the load is skewed (numa-sched's policy), each
    /// move priced as the flag says (`--move-cost`).
    Auto(MovePrice),
    /// Move a random bucket in use to another queue every `interval`.
    Storm {
        /// Time between moves.
        interval: Duration,
    },
}

/// What a service's flags say about its rebalancing loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wish {
    /// No `--rebalance` flag: `auto` (its moves priced so) where buckets
    /// can move, off elsewhere.
    Default(MovePrice),
    /// `--rebalance off`.
    Off,
    /// This loop, asked for: a service that cannot run it refuses to
    /// start.
    Run(Mode),
}

/// The rebalancing loop a service runs ([`Wish::choose`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebalancing {
    /// The loop; None: off.
    pub mode: Option<Mode>,
    /// Whether it runs because no flag said otherwise (a default loop
    /// whose moves keep failing stops; one asked for goes on).
    pub by_default: bool,
    /// Why it is off although no flag said so.
    pub off_because: Option<String>,
}

impl Wish {
    /// The loop for a service whose buckets can move, or cannot
    /// (`cannot`: why, a phrase). Without a flag, `auto` where buckets can
    /// move, and off (said once in the log) where they cannot.
    ///
    /// # Errors
    /// [`Error::Move`]: a loop was asked for and buckets cannot move.
    pub fn choose(self, cannot: Option<String>) -> Result<Rebalancing> {
        match (self, cannot) {
            (Wish::Run(_), Some(why)) => Err(Error::Move(format!(
                "--rebalance: {why} (or use --rebalance off)"
            ))),
            (Wish::Run(mode), None) => Ok(Rebalancing {
                mode: Some(mode),
                ..Rebalancing::default()
            }),
            (Wish::Off, _) => Ok(Rebalancing::default()),
            (Wish::Default(_), Some(why)) => {
                tracing::info!("rebalancing off: {why}");
                Ok(Rebalancing {
                    off_because: Some(why),
                    ..Rebalancing::default()
                })
            }
            (Wish::Default(price), None) => Ok(Rebalancing {
                mode: Some(Mode::Auto(price)),
                by_default: true,
                off_because: None,
            }),
        }
    }
}

/// How the loop prices moves now ([`AutoRebalance::move_cost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovePricing {
    /// As `--move-cost` said.
    pub price: MovePrice,
    /// The price of a move now: learned, or the configured one.
    pub cost: MoveCost,
    /// The moves the learned price is fitted on (0: the configured
    /// price; always 0 at a fixed price).
    pub fit_moves: u64,
    /// The moves the policy refused for their price since the loop
    /// started ([`RebalancePlan::priced_out`], summed).
    pub priced_out: u64,
}

/// A move the loop made or tried.
#[derive(Debug)]
pub struct Tried {
    /// Why it was made.
    pub cause: MoveCause,
    /// What the service answered.
    pub outcome: Result<MoveReport>,
    /// Whether the bucket is on the queue the move was for afterwards: the
    /// move succeeded, or it failed once the bucket had moved (the NIC's
    /// entry not written and the way back failed, or the new queue's last
    /// answer missing: [`TcpService::move_bucket`]).
    pub landed: bool,
    /// Why the policy made it (None: a storm's move).
    pub why: Option<MoveWhy>,
    /// How long it took, from the request to the service's answer (a
    /// move done also says its own `duration_us`, measured inside).
    pub took: Duration,
}

/// Why the policy moved a bucket, for its move line
/// ([`crate::service_control::move_line`]): which queue was over what
/// level, and the gain the policy expected against the cost it priced.
/// Loads are fractions of one CPU in the policy's model (its averages, the
/// round's earlier moves applied).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoveWhy {
    /// The policy's reason for the destination: a core of the source's
    /// node, or another node's (`{"same_node":{"node":0}}`,
    /// `{"node_saturated":{"from_node":0,"to_node":1}}`).
    pub policy: MoveReason,
    /// The load of the source's CPU just before the move (the round's
    /// earlier moves applied: a CPU over [`MoveWhy::over`] at the round's
    /// start goes on giving while a move gains more than it costs, so this
    /// may be under it).
    pub from_load: f64,
    /// The load of the destination's CPU just before the move.
    pub to_load: f64,
    /// The mean load of the CPUs the policy acted on.
    pub mean_load: f64,
    /// The level a CPU was above, at the round's start, to give buckets
    /// this round: the mean times `1 + threshold`, as the policy computed
    /// it ([`RebalancePlan::over`]).
    pub over: f64,
    /// `max / mean` of the loads the policy acted on.
    pub max_over_mean: f64,
    /// The moved bucket's load (its persisting part).
    pub load: f64,
    /// How much the move lowers the larger load of the two CPUs, in the
    /// model: the gain expected.
    pub gain: f64,
    /// The cost priced, as a fraction of one CPU over the cost horizon
    /// (the gain is more).
    pub cost: f64,
    /// The cost priced, in microseconds: the fixed cost plus the cost per
    /// connection times the bucket's connections, as the policy priced it
    /// ([`BucketMove::cost_ns`]).
    pub cost_us: f64,
    /// How many moves the cost was fitted on: the latest ones the fit
    /// keeps, at most [`flowlane_numa_sched::move_cost::WINDOW`] (64), of
    /// all the moves observed (0: the configured prior,
    /// [`RebalanceConfig::move_cost`]).
    pub cost_fit_moves: u64,
    /// What those moves weighed against the prior's 4
    /// ([`flowlane_numa_sched::move_cost::PRIOR_WEIGHT`]) when the move
    /// was priced: each `e^(−age / τ)`
    /// ([`RebalanceConfig::move_cost_memory`]), so at most
    /// `cost_fit_moves`, and near 0 when they are old: the price is then
    /// the prior's.
    pub cost_fit_weight: f64,
}

impl MoveWhy {
    /// Why `m` of `plan` was planned, its cost fitted on `fit_moves`
    /// moves of weight `fit_weight`: the policy's own figures, none
    /// computed again.
    fn of(m: &BucketMove, plan: &RebalancePlan, (fit_moves, fit_weight): (u64, f64)) -> MoveWhy {
        MoveWhy {
            policy: m.reason,
            from_load: m.from_load,
            to_load: m.to_load,
            mean_load: plan.mean_load,
            over: plan.over,
            max_over_mean: plan.max_over_mean,
            load: m.load,
            gain: m.gain,
            cost: m.cost,
            cost_us: m.cost_ns as f64 / 1_000.0,
            cost_fit_moves: fit_moves,
            cost_fit_weight: fit_weight,
        }
    }
}

/// One queue's figures as its worker last published them together
/// ([`crate::TcpCounters`]'s `buckets_published_*`, and its buckets').
#[derive(Debug, Clone, Default)]
struct Reading {
    queue: u32,
    cpu: u32,
    node: u32,
    /// The worker's clock at the publication (ns).
    at_ns: u64,
    /// The worker's busy time up to then (ns).
    busy_ns: u64,
    /// Its stack's `max_connections` (0: not published yet).
    connection_limit: u64,
    buckets: Vec<BucketSnapshot>,
    /// When the loop read the worker thread's time on a CPU (ns on the
    /// loop's clock) and that time (ns, `schedstat`); None where it could
    /// not.
    cpu_time: Option<(u64, u64)>,
}

/// Every queue's last publication, read whole: the TCP counters before
/// and after the buckets' show the same even publication count
/// (`buckets_published_seq`). None when a publication got in the way
/// [`READ_TRIES`] times.
fn read(service: &TcpService) -> Option<Vec<Reading>> {
    let places: HashMap<u32, (u32, u32)> = service
        .dataplane()
        .queues()
        .iter()
        .map(|q| (q.queue, (q.cpu.unwrap_or(q.queue), q.node)))
        .collect();
    let seqs = |v: &[(u32, crate::TcpCountersSnapshot)]| -> Vec<u64> {
        v.iter().map(|(_, c)| c.buckets_published_seq).collect()
    };
    for _ in 0..READ_TRIES {
        let before = service.tcp_counters();
        fence(Ordering::Acquire);
        let buckets = service.bucket_counters();
        fence(Ordering::Acquire);
        let after = service.tcp_counters();
        if seqs(&before) != seqs(&after) || seqs(&after).iter().any(|s| s % 2 == 1) {
            continue;
        }
        let mut lists: HashMap<u32, Vec<BucketSnapshot>> = buckets.into_iter().collect();
        return Some(
            after
                .iter()
                .filter_map(|(queue, c)| {
                    let &(cpu, node) = places.get(queue)?;
                    Some(Reading {
                        queue: *queue,
                        cpu,
                        node,
                        at_ns: c.buckets_published_ns,
                        busy_ns: c.buckets_busy_ns,
                        connection_limit: c.connection_limit,
                        buckets: lists.remove(queue).unwrap_or_default(),
                        cpu_time: None,
                    })
                })
                .collect(),
        );
    }
    None
}

/// One service's rebalancing loop.
#[derive(Debug)]
pub struct AutoRebalance {
    mode: Mode,
    rebalancer: Rebalancer,
    /// What a move costs, learned from the moves made (the policy's
    /// snapshot carries its estimate).
    costs: MoveCostModel,
    topology: Topology,
    epoch: Instant,
    next: Instant,
    /// Each queue's publication time and busy time (ns) at the last round.
    last_queue: HashMap<u32, (u64, u64)>,
    /// Each (queue, bucket)'s segments, bytes and busy ns at the last round.
    last_buckets: HashMap<(u32, u16), (u64, u64, u64)>,
    /// Each queue's worker's CPU time reading at the last round
    /// ([`Reading::cpu_time`]).
    last_cpu: HashMap<u32, (u64, u64)>,
    /// Each queue's worker's `schedstat` file, once found.
    schedstat: HashMap<u32, PathBuf>,
    /// Rounds in a row with a move that failed with its bucket where it
    /// was (the loop waits longer after each).
    failed_rounds: u32,
    /// Moves the policy refused for their price since the start
    /// ([`RebalancePlan::priced_out`] summed over the rounds).
    priced_out: u64,
    /// The last round found a queue that had not published since the one
    /// before: the next comes after [`RETRY`].
    retry: bool,
    rng: u64,
}

impl AutoRebalance {
    /// The loop for `service` (which must be able to move buckets:
    /// [`TcpService::rss_table`] is `Some`).
    ///
    /// # Errors
    /// [`Error::Move`] if the service cannot move buckets;
    /// [`Error::Placement`] if the machine's topology cannot be read.
    pub fn new(service: &TcpService, mode: Mode) -> Result<AutoRebalance> {
        if let Some(why) = service.why_buckets_cannot_move() {
            return Err(Error::Move(format!("--rebalance: {why}")));
        }
        let mut me = AutoRebalance::on(Topology::from_system().map_err(Error::Placement)?, mode)?;
        if let Some(mut readings) = read(service) {
            me.read_cpu(&mut readings);
            me.sample(&readings);
        }
        me.next = me.epoch + me.period();
        Ok(me)
    }

    /// The loop's policy: numa-sched's defaults, its rounds no closer than
    /// the counters' publications.
    fn config() -> RebalanceConfig {
        RebalanceConfig {
            min_period: MIN_PERIOD,
            ..RebalanceConfig::default()
        }
    }

    /// The loop on a machine of `topology`, before its first sample.
    fn on(topology: Topology, mode: Mode) -> Result<AutoRebalance> {
        AutoRebalance::with(topology, mode, AutoRebalance::config())
    }

    /// The loop on a machine of `topology` with the policy `config`.
    fn with(topology: Topology, mode: Mode, config: RebalanceConfig) -> Result<AutoRebalance> {
        let rebalancer = Rebalancer::new(config).map_err(Error::Placement)?;
        let ceiling = MoveCost {
            fixed: config.cost_horizon / CEILING_FIXED_DIVISOR,
            per_connection: config.cost_horizon / CEILING_PER_CONNECTION_DIVISOR,
        };
        let now = Instant::now();
        Ok(AutoRebalance {
            mode,
            rebalancer,
            costs: MoveCostModel::new(config.move_costs(), ceiling, config.move_cost_memory),
            topology,
            epoch: now,
            next: now,
            last_queue: HashMap::new(),
            last_buckets: HashMap::new(),
            last_cpu: HashMap::new(),
            schedstat: HashMap::new(),
            failed_rounds: 0,
            priced_out: 0,
            retry: false,
            rng: 0x2545_f491_4f6c_dd1d ^ u64::from(std::process::id()),
        })
    }

    /// A loop with no service behind it, on a two-core machine (tests of
    /// what it remembers and does with a plan), whose policy acts on a
    /// round's loads at once: numa-sched's persistence rule (its own tests)
    /// would hold a first round's moves back.
    #[cfg(test)]
    pub(crate) fn bare() -> AutoRebalance {
        AutoRebalance::bare_priced(MovePrice::Learned)
    }

    /// [`AutoRebalance::bare`] pricing its moves as `price` says.
    #[cfg(test)]
    pub(crate) fn bare_priced(price: MovePrice) -> AutoRebalance {
        let topology = Topology::synthetic(1, 1, 2, 1).expect("a small machine");
        let config = RebalanceConfig {
            persistence: Duration::ZERO,
            ..AutoRebalance::config()
        };
        AutoRebalance::with(topology, Mode::Auto(price), config).expect("the default policy")
    }

    /// Whether the policy holds `bucket` where it is now.
    #[cfg(test)]
    pub(crate) fn is_held(&self, bucket: u16) -> bool {
        self.rebalancer
            .is_held(usize::from(bucket), self.clock(Instant::now()))
    }

    /// What the loop does.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Records a move the loop did not make (by hand, `flowlane rebalance
    /// move`) that took `bucket` to queue `to`: the bucket is held where
    /// it is for the policy's hold-down, and `to` takes part in no move of
    /// the next round ([`Rebalancer::note_move`]), so that the loop does
    /// not move it straight back.
    pub fn note_move(&mut self, bucket: u16, to: u32) {
        let now = self.clock(Instant::now());
        self.rebalancer
            .note_move(usize::from(bucket), to as u16, now);
    }

    /// Learns what a move costs from one that was made now (the loop's
    /// storm's, or one by hand): its duration, from the request to the new
    /// queue serving the bucket, against the connections it carried. The
    /// policy prices the next rounds' moves by the fit of the latest ones
    /// ([`MoveCostModel`]), the configured costs its prior, each move
    /// weighing less as it ages ([`RebalanceConfig::move_cost_memory`]).
    pub fn learn(&mut self, report: &MoveReport) {
        let now = self.clock(Instant::now());
        self.learn_at(report, now);
    }

    /// Learns from a move asked for now, whatever came of it
    /// ([`AutoRebalance::learn`] for one done): one that failed under way
    /// costs the time from its request to its error, `took` (a move that
    /// timed out, or was undone, is the dearest kind; leaving failures out
    /// would price moves at the ones that went well), carrying the
    /// `connections` its bucket held. A move refused before anything moved
    /// ([`Error::MoveRefused`]) teaches nothing.
    pub fn learn_outcome(
        &mut self,
        outcome: &Result<MoveReport>,
        connections: u32,
        took: Duration,
    ) {
        let now = self.clock(Instant::now());
        self.learn_outcome_at(outcome, connections, took, now);
    }

    /// [`AutoRebalance::learn_outcome`] at `at` (the policy's clock).
    fn learn_outcome_at(
        &mut self,
        outcome: &Result<MoveReport>,
        connections: u32,
        took: Duration,
        at: Duration,
    ) {
        match outcome {
            Ok(report) => self.learn_at(report, at),
            Err(Error::MoveRefused(_)) => {}
            Err(_) if self.price() == MovePrice::Fixed => {}
            Err(_) => {
                let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
                self.costs.observe(connections, ns, at);
            }
        }
    }

    /// How the loop prices moves: as `--move-cost` said (a storm's moves
    /// are not priced; what they cost is learned).
    fn price(&self) -> MovePrice {
        match self.mode {
            Mode::Auto(price) => price,
            Mode::Storm { .. } => MovePrice::Learned,
        }
    }

    /// [`AutoRebalance::learn`] of a move made at `at` (the policy's clock).
    /// Nothing is learned at a fixed price (`--move-cost fixed`).
    fn learn_at(&mut self, report: &MoveReport, at: Duration) {
        if self.price() == MovePrice::Fixed {
            return;
        }
        let connections = u32::try_from(report.connections).unwrap_or(u32::MAX);
        let ns = (report.duration_us * 1_000.0).clamp(0.0, u64::MAX as f64) as u64;
        self.costs.observe(connections, ns, at);
    }

    /// What the loop prices a move at now (as learned, or the
    /// configured price at `--move-cost fixed`), how many moves the fit
    /// used (the latest, at most
    /// [`flowlane_numa_sched::move_cost::WINDOW`]; 0 at a fixed price)
    /// and the moves refused for their price since the start
    /// ([`RebalancePlan::priced_out`]).
    pub fn move_cost(&self) -> MovePricing {
        let now = self.clock(Instant::now());
        MovePricing {
            price: self.price(),
            cost: self.costs.estimate(now),
            fit_moves: self.costs.fit_moves() as u64,
            priced_out: self.priced_out,
        }
    }

    /// The policy's clock at `at`: the time since the loop started.
    fn clock(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.epoch)
    }

    fn period(&self) -> Duration {
        match self.mode {
            Mode::Auto(_) => self.rebalancer.period().max(MIN_PERIOD),
            Mode::Storm { interval } => interval,
        }
    }

    /// The time to the next round: [`RETRY`] after a round that found a
    /// queue without a new publication; the period, or longer after
    /// rounds whose moves failed with their bucket where it was (a NIC
    /// refusing table writes refuses every bucket's): the policy's base
    /// period, doubled for each such round in a row, up to
    /// [`MAX_BACKOFF`].
    fn wait(&mut self) -> Duration {
        if std::mem::take(&mut self.retry) {
            return RETRY;
        }
        let backoff = match self.failed_rounds {
            0 => Duration::ZERO,
            n => self
                .rebalancer
                .config()
                .base_period
                .saturating_mul(1 << (n - 1).min(16))
                .min(MAX_BACKOFF),
        };
        self.period().max(backoff)
    }

    /// Runs a round if one is due; returns each move made or tried.
    pub fn poll(&mut self, service: &TcpService) -> Vec<Tried> {
        let now = Instant::now();
        if now < self.next {
            return Vec::new();
        }
        let out = match self.mode {
            Mode::Auto(_) => self.round(service, now),
            Mode::Storm { .. } => self.storm(service).into_iter().collect(),
        };
        self.next = Instant::now() + self.wait();
        out
    }

    /// Each reading's worker CPU time now ([`Reading::cpu_time`]), from its
    /// thread's `schedstat` (found once; looked for again if it fails).
    fn read_cpu(&mut self, readings: &mut [Reading]) {
        for r in readings {
            let path = match self.schedstat.get(&r.queue) {
                Some(p) => Some(p.clone()),
                None => worker_schedstat(r.queue),
            };
            let cpu = path.as_deref().and_then(schedstat_ns);
            match (cpu, path) {
                (Some(_), Some(p)) => {
                    self.schedstat.insert(r.queue, p);
                }
                _ => {
                    self.schedstat.remove(&r.queue);
                }
            }
            let at = self.clock(Instant::now()).as_nanos() as u64;
            r.cpu_time = cpu.map(|c| (at, c));
        }
    }

    /// The load since the last round, from each queue's publication: its
    /// busy time and the time between its two publications (ns), each
    /// bucket's segments, bytes, connections and busy time. A bucket's
    /// busy time is its share of what the worker timed on its buckets'
    /// frames, times the worker's busy time (RSS++'s load, with the share
    /// measured in time rather than packets: transmission and timers cost
    /// in proportion). A worker's busy time is the wall-clock time of its
    /// passes that did work, preemption included: it counts at most the
    /// share of the window the worker's thread was on a CPU between this
    /// round's reading of its CPU time and the last's (`schedstat`). On a
    /// host whose CPUs other tasks share, a worker waiting for its CPU in
    /// the middle of a pass is not busy: session 58's soak, on 2 vCPUs
    /// shared with builds, had queues 44-75 % busy by their passes' clock
    /// that were on a CPU 10 % of the time, waiting for it 75-80 %, and
    /// the policy moved buckets on it. None, with nothing recorded but the
    /// first reading of a queue (or of a worker whose clock went back),
    /// when a queue has not published since the last round: its window
    /// would be empty.
    fn sample(&mut self, readings: &[Reading]) -> Option<(Vec<CoreLoad>, Vec<BucketLoad>)> {
        let mut on_cpu = HashMap::new();
        for r in readings {
            let Some((at, cpu)) = r.cpu_time else {
                self.last_cpu.remove(&r.queue);
                continue;
            };
            if let Some((was_at, was)) = self.last_cpu.insert(r.queue, (at, cpu)) {
                if at > was_at && cpu >= was {
                    let share = (cpu - was) as f64 / (at - was_at) as f64;
                    on_cpu.insert(r.queue, share.min(1.0));
                }
            }
        }
        let advanced = |r: &Reading, last: &HashMap<u32, (u64, u64)>| {
            last.get(&r.queue).map(|&(at, _)| r.at_ns > at)
        };
        if readings
            .iter()
            .any(|r| advanced(r, &self.last_queue) != Some(true))
        {
            for r in readings {
                let restart = match self.last_queue.get(&r.queue) {
                    None => true,
                    Some(&(at, _)) => r.at_ns < at,
                };
                if restart {
                    self.last_queue.insert(r.queue, (r.at_ns, r.busy_ns));
                    self.last_buckets.retain(|&(q, _), _| q != r.queue);
                    for b in &r.buckets {
                        self.last_buckets
                            .insert((r.queue, b.bucket), (b.segments_in, b.bytes_in, b.busy_ns));
                    }
                }
            }
            return None;
        }
        let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        let mut cores = Vec::with_capacity(readings.len());
        let mut buckets = Vec::new();
        for r in readings {
            let (at, busy_before) = self
                .last_queue
                .insert(r.queue, (r.at_ns, r.busy_ns))
                .unwrap_or((r.at_ns, r.busy_ns));
            let total = r.at_ns.saturating_sub(at);
            let mut busy = r.busy_ns.saturating_sub(busy_before).min(total);
            if let Some(&share) = on_cpu.get(&r.queue) {
                busy = busy.min((share * total as f64) as u64);
            }
            let first = buckets.len();
            let mut timed = Vec::with_capacity(r.buckets.len());
            let mut connections = 0;
            for b in &r.buckets {
                let was = self
                    .last_buckets
                    .insert((r.queue, b.bucket), (b.segments_in, b.bytes_in, b.busy_ns))
                    .unwrap_or_default();
                timed.push(b.busy_ns.saturating_sub(was.2));
                connections += b.connections;
                buckets.push(BucketLoad {
                    bucket: usize::from(b.bucket),
                    queue: r.queue as u16,
                    packets: b.segments_in.saturating_sub(was.0),
                    bytes: b.bytes_in.saturating_sub(was.1),
                    busy_cycles: None,
                    connections: count(b.connections),
                });
            }
            for (b, share) in buckets[first..].iter_mut().zip(busy_shares(busy, &timed)) {
                b.busy_cycles = share;
            }
            cores.push(CoreLoad {
                queue: r.queue as u16,
                cpu: r.cpu,
                node: r.node,
                busy_cycles: busy,
                total_cycles: total.max(1),
                connections: count(connections),
                connection_limit: (r.connection_limit > 0).then(|| count(r.connection_limit)),
            });
        }
        Some((cores, buckets))
    }

    /// The snapshot's parts for the table in force (`table`: queue per
    /// bucket) from `readings`: only what each bucket's current queue
    /// counted (a bucket that moved during the period left its earlier
    /// figures on its old queue). None: no round now.
    fn loads(
        &mut self,
        table: &[u32],
        readings: &[Reading],
    ) -> Option<(IndirectionTable, Vec<CoreLoad>, Vec<BucketLoad>)> {
        let Some((cores, all)) = self.sample(readings) else {
            self.retry = true;
            return None;
        };
        let table = IndirectionTable::new(table.iter().map(|&q| q as u16).collect()).ok()?;
        let buckets = all
            .into_iter()
            .filter(|b| table.entries().get(b.bucket) == Some(&b.queue))
            .collect();
        Some((table, cores, buckets))
    }

    /// One round of the policy.
    fn round(&mut self, service: &TcpService, now: Instant) -> Vec<Tried> {
        let Some(table) = service.rss_table() else {
            return Vec::new();
        };
        let Some(mut readings) = read(service) else {
            self.retry = true;
            return Vec::new();
        };
        self.read_cpu(&mut readings);
        self.round_on(now, &table, &readings, |bucket, to| {
            move_and_see(service, bucket, to)
        })
    }

    /// [`AutoRebalance::round`] on `readings`, with `table` in force at
    /// `at`, moving through `try_move`.
    fn round_on(
        &mut self,
        at: Instant,
        table: &[u32],
        readings: &[Reading],
        try_move: impl FnMut(u16, u32) -> (Result<MoveReport>, bool, Duration),
    ) -> Vec<Tried> {
        let Some((table, cores, buckets)) = self.loads(table, readings) else {
            return Vec::new();
        };
        let now = self.clock(at);
        // At a fixed price the snapshot brings none: the policy's
        // configured costs (the model, never fed, estimates them too).
        let costs = match self.price() {
            MovePrice::Learned => Some(self.costs.estimate(now)),
            MovePrice::Fixed => None,
        };
        let snapshot = LoadSnapshot {
            now,
            table: &table,
            topology: &self.topology,
            cores: &cores,
            buckets: &buckets,
            move_cost: costs,
        };
        let plan = match self.rebalancer.decide(&snapshot) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("rebalancing: {e}");
                return Vec::new();
            }
        };
        self.priced_out = self.priced_out.saturating_add(plan.priced_out as u64);
        let fit = (self.costs.fit_moves() as u64, self.costs.fit_weight(now));
        let whys = plan
            .moves
            .iter()
            .map(|m| MoveWhy::of(m, &plan, fit))
            .collect();
        self.carry_out(now, &plan.moves, whys, try_move)
    }

    /// Carries out a plan's `moves` through `try_move` (its outcome, and
    /// whether the bucket landed: [`Tried::landed`]) in the plan's order,
    /// up to the first that fails: the later moves were planned on the
    /// loads the earlier ones make, and a NIC that refused one table write
    /// would refuse the rest (each refusal costs two handoffs: the move
    /// and its undo). The policy remembered every move of its plan as made
    /// at `now` ([`Rebalancer::decide`]); it is told of each that was not:
    /// the move that failed with its bucket where it was
    /// ([`Rebalancer::move_failed`]: that bucket does not go to that queue
    /// again for a while, doubled at each failure) and those never tried
    /// ([`Rebalancer::move_not_made`]: free again). A move that failed once
    /// its bucket had moved stands. A round with a move that failed with
    /// its bucket where it was makes the loop wait longer
    /// ([`AutoRebalance::wait`]); one whose moves all landed ends that.
    /// Each move tried is learned from, failed or not
    /// ([`AutoRebalance::learn_outcome`]: one that failed carried the
    /// connections the plan counted in its bucket); `whys`
    /// (one per move) go with them into their [`Tried`].
    fn carry_out(
        &mut self,
        now: Duration,
        moves: &[BucketMove],
        whys: Vec<MoveWhy>,
        mut try_move: impl FnMut(u16, u32) -> (Result<MoveReport>, bool, Duration),
    ) -> Vec<Tried> {
        let mut out = Vec::new();
        let mut failed = false;
        for (m, why) in moves.iter().zip(whys) {
            if failed {
                self.rebalancer.move_not_made(m);
                continue;
            }
            let cause = match m.reason {
                MoveReason::SameNode { .. } => MoveCause::BalanceSameNode,
                MoveReason::NodeSaturated { .. } => MoveCause::BalanceOtherNode,
            };
            let (outcome, landed, took) = try_move(m.bucket as u16, u32::from(m.to));
            failed = outcome.is_err();
            if !landed {
                self.rebalancer.move_failed(m, now);
            }
            self.learn_outcome_at(&outcome, m.connections, took, now);
            out.push(Tried {
                cause,
                outcome,
                landed,
                why: Some(why),
                took,
            });
        }
        if out.iter().any(|t| !t.landed) {
            self.failed_rounds = self.failed_rounds.saturating_add(1);
        } else if !out.is_empty() {
            self.failed_rounds = 0;
        }
        out
    }

    /// A move of a random bucket in use to another random queue.
    fn storm(&mut self, service: &TcpService) -> Option<Tried> {
        let table = service.rss_table()?;
        let queues = service.dataplane().queues().len() as u64;
        let mut in_use: Vec<(u16, u64)> = Vec::new();
        for (q, list) in service.bucket_counters() {
            in_use.extend(
                list.iter()
                    .filter(|b| b.connections > 0 && table[usize::from(b.bucket)] == q)
                    .map(|b| (b.bucket, b.connections)),
            );
        }
        if in_use.is_empty() || queues < 2 {
            return None;
        }
        let (bucket, connections) = in_use[(self.random() % in_use.len() as u64) as usize];
        let from = u64::from(table[usize::from(bucket)]);
        let to = (from + 1 + self.random() % (queues - 1)) % queues;
        let (outcome, landed, took) = move_and_see(service, bucket, to as u32);
        let connections = u32::try_from(connections).unwrap_or(u32::MAX);
        self.learn_outcome(&outcome, connections, took);
        Some(Tried {
            cause: MoveCause::Storm,
            outcome,
            landed,
            why: None,
            took,
        })
    }

    /// xorshift64.
    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

/// Each bucket's part of a worker's busy time `core_busy`, in proportion
/// to the time the worker measured on its frames (`timed`, one per
/// bucket); `None` for all when nothing was timed (the policy then shares
/// the core's load by packets).
fn busy_shares(core_busy: u64, timed: &[u64]) -> Vec<Option<u64>> {
    let sum: u64 = timed.iter().sum();
    if sum == 0 {
        return vec![None; timed.len()];
    }
    timed
        .iter()
        .map(|&t| Some((u128::from(core_busy) * u128::from(t) / u128::from(sum)) as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebalancing_is_on_by_default_where_buckets_can_move() {
        let on = |by_default| Rebalancing {
            mode: Some(Mode::Auto(MovePrice::Learned)),
            by_default,
            off_because: None,
        };
        let learned = MovePrice::Learned;
        assert_eq!(Wish::Default(learned).choose(None).unwrap(), on(true));
        assert_eq!(
            Wish::Run(Mode::Auto(learned)).choose(None).unwrap(),
            on(false)
        );
        assert_eq!(Wish::Off.choose(None).unwrap(), Rebalancing::default());
    }

    #[test]
    fn where_buckets_cannot_move_only_a_loop_asked_for_is_refused() {
        let why = || Some("one queue".to_string());
        let off = Wish::Default(MovePrice::Learned).choose(why()).unwrap();
        assert_eq!((off.mode, off.off_because), (None, why()));
        assert_eq!(Wish::Off.choose(why()).unwrap(), Rebalancing::default());
        let storm = Mode::Storm {
            interval: std::time::Duration::from_millis(5),
        };
        for mode in [Mode::Auto(MovePrice::Learned), storm] {
            let e = Wish::Run(mode).choose(why()).unwrap_err().to_string();
            assert!(
                e.contains("one queue") && e.contains("--rebalance off"),
                "{e}"
            );
        }
    }

    const MS: u64 = 1_000_000;

    /// A bucket's figures: (bucket, segments, busy ns, connections).
    fn bucket(b: (u16, u64, u64, u64)) -> BucketSnapshot {
        BucketSnapshot {
            bucket: b.0,
            connections: b.3,
            segments_in: b.1,
            bytes_in: 1_000 * b.1,
            busy_ns: b.2,
            ..BucketSnapshot::default()
        }
    }

    /// Queue `queue` (on CPU `queue`) as published at `at_ms` with
    /// `busy_ms` of busy time and `buckets`.
    fn reading(queue: u32, at_ms: u64, busy_ms: u64, buckets: &[(u16, u64, u64, u64)]) -> Reading {
        Reading {
            queue,
            cpu: queue,
            node: 0,
            at_ns: at_ms * MS,
            busy_ns: busy_ms * MS,
            connection_limit: 1_000,
            buckets: buckets.iter().copied().map(bucket).collect(),
            cpu_time: None,
        }
    }

    /// The loop on two queues after a first publication of each at 100 ms:
    /// queue 0 holds buckets 0 to 5, queue 1 buckets 6 and 7, nothing
    /// counted yet.
    fn started() -> AutoRebalance {
        let mut a = AutoRebalance::bare();
        let first = [
            reading(0, 100, 0, &[(0, 0, 0, 0), (3, 0, 0, 0)]),
            reading(1, 100, 0, &[]),
        ];
        assert!(a.sample(&first).is_none(), "a first reading is no window");
        a
    }

    const TABLE: [u32; 8] = [0, 0, 0, 0, 0, 0, 1, 1];

    #[test]
    fn the_sample_is_the_window_between_two_publications() {
        let mut a = started();
        // Queue 1 has not published since: no window yet, and nothing
        // recorded of queue 0's new figures.
        let stale = [
            reading(0, 150, 30, &[(0, 5, 1_000, 2)]),
            reading(1, 100, 0, &[]),
        ];
        assert!(a.sample(&stale).is_none());
        // Both have: 100 ms for queue 0, of which 60 ms busy, shared by the
        // time sampled on each bucket's frames (3 : 1; bucket 3 new).
        let fresh = [
            reading(0, 200, 60, &[(0, 60, 3_000, 7), (3, 30, 1_000, 3)]),
            reading(1, 180, 8, &[(6, 4, 0, 1)]),
        ];
        let (cores, buckets) = a.sample(&fresh).expect("a window");
        let c0 = cores[0];
        assert_eq!((c0.busy_cycles, c0.total_cycles), (60 * MS, 100 * MS));
        assert_eq!((c0.connections, c0.connection_limit), (10, Some(1_000)));
        assert_eq!(
            (cores[1].busy_cycles, cores[1].total_cycles),
            (8 * MS, 80 * MS)
        );
        let b: Vec<(usize, u64, Option<u64>, u32)> = buckets
            .iter()
            .map(|b| (b.bucket, b.packets, b.busy_cycles, b.connections))
            .collect();
        assert_eq!(
            b,
            [
                (0, 60, Some(45 * MS), 7),
                (3, 30, Some(15 * MS), 3),
                // Nothing timed on queue 1: the policy shares by packets.
                (6, 4, None, 1),
            ]
        );
        // The next window starts where this one ended.
        let next = [
            reading(0, 300, 70, &[(0, 70, 3_500, 7), (3, 30, 1_000, 3)]),
            reading(1, 280, 9, &[(6, 4, 0, 1)]),
        ];
        let (cores, buckets) = a.sample(&next).expect("a window");
        assert_eq!(
            (cores[0].busy_cycles, cores[0].total_cycles),
            (10 * MS, 100 * MS)
        );
        assert_eq!(
            (buckets[0].packets, buckets[0].busy_cycles),
            (10, Some(10 * MS))
        );
        assert_eq!((buckets[1].packets, buckets[1].busy_cycles), (0, Some(0)));
    }

    #[test]
    fn a_worker_waiting_for_its_cpu_is_not_busy() {
        // Queue 0 busy 80 ms of a 100 ms window by its passes' clock, its
        // thread on a CPU 10 ms of the 100 ms between the loop's readings:
        // 10 ms busy. Queue 1 busy 30 ms, on a CPU 50 ms (its idle
        // passes): 30 ms. Then queue 0's CPU time unknown: its clock's.
        let mut a = started();
        let with_cpu = |mut r: Reading, at_ms: u64, cpu_ms: u64| {
            r.cpu_time = Some((at_ms * MS, cpu_ms * MS));
            r
        };
        // The publications the loop started from (no window yet), with the
        // first readings of the CPU time.
        let first = [
            with_cpu(reading(0, 100, 0, &[]), 1_000, 500),
            with_cpu(reading(1, 100, 0, &[]), 1_000, 700),
        ];
        assert!(a.sample(&first).is_none());
        let next = [
            with_cpu(reading(0, 200, 80, &[(0, 50, 1_000, 1)]), 1_100, 510),
            with_cpu(reading(1, 200, 30, &[(6, 50, 1_000, 1)]), 1_100, 750),
        ];
        let (cores, buckets) = a.sample(&next).expect("a window");
        let busy: Vec<u64> = cores.iter().map(|c| c.busy_cycles / MS).collect();
        assert_eq!(busy, [10, 30]);
        // The buckets share what is left of the core's busy time.
        assert_eq!(buckets[0].busy_cycles, Some(10 * MS));
        let last = [
            reading(0, 300, 160, &[]),
            with_cpu(reading(1, 300, 60, &[]), 1_200, 800),
        ];
        let (cores, _) = a.sample(&last).expect("a window");
        let busy: Vec<u64> = cores.iter().map(|c| c.busy_cycles / MS).collect();
        assert_eq!(busy, [80, 30]);
    }

    #[test]
    fn a_bucket_counts_on_its_current_queue_only() {
        let mut a = started();
        // Bucket 3 moved to queue 1 during the period: queue 0 still lists
        // what it counted of it before; queue 1 counts it from its arrival.
        let readings = [
            reading(0, 200, 50, &[(0, 40, 5_000, 1), (3, 50, 5_000, 0)]),
            reading(1, 200, 20, &[(3, 10, 1_000, 4)]),
        ];
        let mut table = TABLE;
        table[3] = 1;
        let (_, cores, buckets) = a.loads(&table, &readings).expect("a round");
        let b: Vec<(usize, u16, u64)> = buckets
            .iter()
            .map(|b| (b.bucket, b.queue, b.packets))
            .collect();
        assert_eq!(b, [(0, 0, 40), (3, 1, 10)]);
        // Queue 0's busy time stays whole; its share of bucket 0 is what
        // the bucket's frames cost of it (the rest left with bucket 3).
        assert_eq!(cores[0].busy_cycles, 50 * MS);
        assert_eq!(buckets[0].busy_cycles, Some(25 * MS));
    }

    #[test]
    fn the_policy_moves_the_bucket_that_costs_the_time() {
        // Queue 0 busy 90 % of a window: bucket 3's frames took twice the
        // time of bucket 5's, though bucket 5 had twice the segments. By
        // time, bucket 5 (0.3) fits under the mean on queue 1 and moves; by
        // packets it would have been bucket 3.
        let mut a = AutoRebalance::bare();
        let first = [
            reading(0, 100, 0, &[(3, 0, 0, 1), (5, 0, 0, 1)]),
            reading(1, 100, 0, &[(6, 0, 0, 1)]),
        ];
        assert!(a.sample(&first).is_none());
        let readings = [
            reading(0, 200, 90, &[(3, 100, 2_000, 1), (5, 200, 1_000, 1)]),
            reading(1, 200, 10, &[(6, 10, 500, 1)]),
        ];
        let mut moved = Vec::new();
        let table = [0, 0, 0, 0, 0, 0, 1, 1];
        let out = a.round_on(Instant::now(), &table, &readings, |bucket, to| {
            moved.push((bucket, to));
            (Ok(MoveReport::default()), true, Duration::ZERO)
        });
        assert_eq!(moved, [(5, 1)]);
        assert!(out.iter().all(|t| t.landed));
        assert!(a.is_held(5));
    }

    /// Queue 0 at 90 % in six buckets of 15 %, queue 1 at 10 %, from
    /// `at_ms` (a window of 100 ms after the last).
    fn skewed(at_ms: u64, round: u64) -> [Reading; 2] {
        let n = round + 1;
        let six: Vec<(u16, u64, u64, u64)> = (0..6).map(|b| (b, 10 * n, 1_000 * n, 1)).collect();
        [
            reading(0, at_ms, 90 * n, &six),
            reading(1, at_ms, 10 * n, &[(6, n, 500 * n, 1), (7, n, 500 * n, 1)]),
        ]
    }

    /// The policy remembers its plan's moves as made; the loop keeps the
    /// hold-down of those whose bucket landed (a move that failed once the
    /// bucket had moved included), and frees the others: the move that
    /// failed with its bucket where it was (which backs off from that
    /// queue) and those after it, never tried.
    #[test]
    fn only_the_buckets_that_moved_are_held_down() {
        /// (failed, landed) of each move tried.
        type Tries = &'static [(bool, bool)];
        let cases: [(Tries, [bool; 3], [bool; 3]); 2] = [
            // The moves tried; the buckets held afterwards; backing off.
            (
                &[(false, true), (true, true)],
                [true, true, false],
                [false, false, false],
            ),
            (
                &[(true, false)],
                [false, false, false],
                [true, false, false],
            ),
        ];
        for (tried, held, backing_off) in cases {
            let mut a = AutoRebalance::bare();
            let t0 = a.epoch;
            assert!(a.sample(&skewed(100, 0)).is_none());
            let mut outcomes = tried.iter();
            let mut planned = Vec::new();
            let out = a.round_on(t0, &TABLE, &skewed(200, 1), |bucket, to| {
                planned.push((bucket, to));
                let &(failed, landed) = outcomes.next().expect("no move after a failure");
                let outcome = if failed {
                    Err(Error::Move("the NIC refused".into()))
                } else {
                    Ok(MoveReport::default())
                };
                (outcome, landed, Duration::ZERO)
            });
            assert_eq!(out.len(), tried.len());
            // The plan: three of queue 0's buckets to queue 1.
            let plan: [usize; 3] = [0, 1, 2];
            assert!(
                planned
                    .iter()
                    .all(|&(b, to)| plan.contains(&usize::from(b)) && to == 1),
                "{planned:?}"
            );
            let now = a.clock(t0);
            let now_held = plan.map(|b| a.rebalancer.is_held(b, now));
            assert_eq!(now_held, held, "{tried:?}");
            let now_backing_off = plan.map(|b| a.rebalancer.is_backing_off(b, 1, now));
            assert_eq!(now_backing_off, backing_off, "{tried:?}");
        }
    }

    /// Each move that landed teaches the loop what a move costs (its
    /// duration against its connections), and each of the policy's moves
    /// says why it was made: the source over the round's level, the gain
    /// expected above the cost priced; its move line carries that.
    #[test]
    fn the_loop_learns_from_its_moves_and_says_why_it_made_them() {
        let mut a = AutoRebalance::bare();
        let t0 = a.epoch;
        assert!(a.sample(&skewed(100, 0)).is_none());
        let prior = a.rebalancer.config().move_costs();
        assert_eq!((a.move_cost().cost, a.move_cost().fit_moves), (prior, 0));
        let out = a.round_on(t0, &TABLE, &skewed(200, 1), |bucket, to| {
            let report = MoveReport {
                bucket,
                to,
                connections: 1,
                duration_us: 30_000.0,
                ..MoveReport::default()
            };
            (Ok(report), true, Duration::ZERO)
        });
        assert_eq!(out.len(), 3);
        let (learned, from) = (a.move_cost().cost, a.move_cost().fit_moves);
        assert_eq!(from, 3);
        assert!(learned.fixed > 10 * prior.fixed, "{learned:?}");
        // The round's first move comes from a CPU over the level (later
        // ones from the same CPU may be under it by then: the loads are
        // those just before each move).
        let first = out[0].why.as_ref().expect("the policy's move says why");
        assert!(first.from_load > first.over, "{first:?}");
        for t in &out {
            let why = t.why.as_ref().expect("the policy's move says why");
            assert!(why.gain > why.cost, "{why:?}");
            assert_eq!(
                why.cost_fit_moves, 0,
                "the first round is priced at the prior"
            );
        }
        let line = crate::service_control::move_line(&crate::service_control::LoggedMove {
            cause: out[0].cause,
            outcome: Ok(MoveReport::default()),
            why: out[0].why.clone(),
            failed_after: None,
        });
        assert_eq!(line["cause"], "balance_same_node", "{line}");
        for key in ["from_load", "over", "gain", "cost", "cost_us", "policy"] {
            assert!(!line["why"][key].is_null(), "{key}: {line}");
        }
    }

    /// `--move-cost`: at the learned price, moves that took a second each
    /// (the price at its ceiling, 50 ms, a tenth of a core over the 500 ms
    /// horizon) keep the policy from moving buckets of 5 % of a core, and
    /// it counts them refused for their price; at the fixed price the same
    /// moves teach nothing, the configured 20 µs + 2 µs stands and the
    /// buckets move.
    #[test]
    fn the_move_price_is_learned_or_fixed_as_the_flag_says() {
        // Queue 0 at 60 % in twelve buckets of 5 %, queue 1 at 20 %.
        let table: Vec<u32> = [vec![0; 12], vec![1; 4]].concat();
        let skew = |at_ms: u64, n: u64| {
            let twelve: Vec<(u16, u64, u64, u64)> =
                (0..12).map(|b| (b, 10 * n, 1_000 * n, 1)).collect();
            [
                reading(0, at_ms, 60 * n, &twelve),
                reading(
                    1,
                    at_ms,
                    20 * n,
                    &[(12, n, 500 * n, 1), (13, n, 500 * n, 1)],
                ),
            ]
        };
        let slow = MoveReport {
            connections: 1,
            duration_us: 1_000_000.0,
            ..MoveReport::default()
        };
        let mut seen = Vec::new();
        for price in [MovePrice::Learned, MovePrice::Fixed] {
            let mut a = AutoRebalance::bare_priced(price);
            let prior = a.rebalancer.config().move_costs();
            let t0 = a.epoch;
            for _ in 0..64 {
                a.learn_at(&slow, Duration::ZERO);
            }
            assert!(a.sample(&skew(100, 0)).is_none());
            let out = a.round_on(t0, &table, &skew(200, 1), |bucket, to| {
                let report = MoveReport {
                    bucket,
                    to,
                    connections: 1,
                    duration_us: 100.0,
                    ..MoveReport::default()
                };
                (Ok(report), true, Duration::ZERO)
            });
            let p = a.move_cost();
            assert_eq!(p.price, price);
            match price {
                MovePrice::Learned => {
                    assert_eq!(p.cost.fixed, 50_000_000, "{p:?}: the ceiling");
                    assert!(out.is_empty(), "{} moves at the learned price", out.len());
                    assert!(p.priced_out >= 1, "{p:?}");
                }
                MovePrice::Fixed => {
                    assert_eq!((p.cost, p.fit_moves), (prior, 0), "{p:?}: nothing learned");
                    assert!(!out.is_empty(), "no move at the fixed price");
                    assert_eq!(p.priced_out, 0, "{p:?}");
                }
            }
            seen.push((price, out.len(), p.priced_out));
        }
        eprintln!("(price, moves, refused for cost): {seen:?}");
    }

    /// A move's `why` is the policy's plan as it stands: the level and the
    /// price the policy computed, not the loop's own reckoning of them
    /// (which would drift from the policy's if either changed).
    #[test]
    fn why_reads_the_level_and_the_price_from_the_plan() {
        let m = BucketMove {
            bucket: 3,
            from: 0,
            to: 1,
            reason: MoveReason::SameNode { node: 0 },
            load: 0.2,
            from_load: 0.7,
            to_load: 0.1,
            gain: 0.2,
            cost: 0.004,
            cost_ns: 2_000_000,
            connections: 7,
            packets: 10,
            bytes: 10_000,
        };
        let plan = RebalancePlan {
            moves: vec![m],
            outcome: flowlane_numa_sched::RoundOutcome::Moved,
            next_period: Duration::from_millis(100),
            mean_load: 0.4,
            max_load: 0.7,
            // Not the default threshold's 0.44: the policy's figure is
            // what the line says.
            over: 0.5,
            max_over_mean: 1.75,
            averaged_max_over_mean: 1.75,
            measured_max_over_mean: 1.75,
            predicted_max_over_mean: 1.25,
            priced_out: 0,
        };
        let why = MoveWhy::of(&m, &plan, (5, 4.5));
        assert_eq!((why.over, why.cost_us), (0.5, 2_000.0), "{why:?}");
        assert_eq!((why.cost, why.gain, why.load), (0.004, 0.2, 0.2));
    }

    /// The move line says how many moves the price was fitted on: the
    /// latest 64 of the 70 observed, not 70.
    #[test]
    fn the_line_counts_the_moves_in_the_fit() {
        let mut a = AutoRebalance::bare();
        let t0 = a.epoch;
        assert!(a.sample(&skewed(100, 0)).is_none());
        let report = MoveReport {
            connections: 1,
            duration_us: 500.0,
            ..MoveReport::default()
        };
        for _ in 0..70 {
            a.learn(&report);
        }
        let window = flowlane_numa_sched::move_cost::WINDOW as u64;
        assert_eq!(a.move_cost().fit_moves, window);
        let out = a.round_on(t0, &TABLE, &skewed(200, 1), |_, _| {
            (Ok(MoveReport::default()), true, Duration::ZERO)
        });
        let why = out[0].why.as_ref().expect("the policy's move says why");
        assert_eq!(why.cost_fit_moves, window, "{why:?}");
        let line = crate::service_control::move_line(&crate::service_control::LoggedMove {
            cause: out[0].cause,
            outcome: Ok(MoveReport::default()),
            why: out[0].why.clone(),
            failed_after: None,
        });
        assert_eq!(line["why"]["cost_fit_moves"], window, "{line}");
    }

    /// A price learned from slow moves goes back to the prior while no
    /// move is made: 64 moves of 40 ms price the next round's moves near
    /// 40 ms, but a round 20 minutes later (20 of the policy's 60 s
    /// memories) prices them at the prior's 20 µs + 2 µs a connection.
    #[test]
    fn a_learned_price_is_forgotten_while_no_move_is_made() {
        let slow = MoveReport {
            connections: 1,
            duration_us: 40_000.0,
            ..MoveReport::default()
        };
        let priced_after = |wait: Duration| {
            let mut a = AutoRebalance::bare();
            let t0 = a.epoch;
            for _ in 0..64 {
                a.learn_at(&slow, Duration::ZERO);
            }
            assert!(a.sample(&skewed(100, 0)).is_none());
            let out = a.round_on(t0 + wait, &TABLE, &skewed(200, 1), |_, _| {
                (Ok(MoveReport::default()), true, Duration::ZERO)
            });
            out[0].why.clone().expect("the policy's move says why")
        };
        let fresh = priced_after(Duration::ZERO);
        assert!(fresh.cost_us > 35_000.0, "{fresh:?}");
        assert_eq!((fresh.cost_fit_moves, fresh.cost_fit_weight), (64, 64.0));
        let old = priced_after(Duration::from_secs(20 * 60));
        assert!(old.cost_us < 23.0, "{old:?}");
        assert_eq!(old.cost_fit_moves, 64, "{old:?}");
        assert!(old.cost_fit_weight < 1e-6, "{old:?}");
    }

    /// A move that failed is learned too, at the time from its request to
    /// its error: a move that timed out after 2 s (the handoff's step
    /// timeout) raises the price as far as the ceiling (a tenth of the
    /// horizon: 50 ms), where leaving it out kept the prior. A move
    /// refused before anything moved teaches nothing.
    #[test]
    fn a_failed_move_is_learned_at_what_it_took() {
        let mut a = AutoRebalance::bare();
        let t0 = a.epoch;
        assert!(a.sample(&skewed(100, 0)).is_none());
        let prior = a.rebalancer.config().move_costs();
        let out = a.round_on(t0, &TABLE, &skewed(200, 1), |bucket, _| {
            let e = format!("queue 1 did not answer the export within 2s: bucket {bucket} stays");
            (Err(Error::Move(e)), false, Duration::from_secs(2))
        });
        assert_eq!(out.len(), 1, "a round stops at its first failure");
        assert_eq!(out[0].took, Duration::from_secs(2));
        let (learned, fit_moves) = (a.move_cost().cost, a.move_cost().fit_moves);
        assert_eq!(fit_moves, 1, "{learned:?}");
        // (4 × 20 µs + 1 × 2 s) / 5, bounded by the ceiling.
        let ceiling = a.rebalancer.config().cost_horizon / CEILING_FIXED_DIVISOR;
        assert_eq!(learned.fixed, ceiling, "{learned:?}");
        assert_eq!(learned.per_connection, prior.per_connection);
        // Refused before anything moved: nothing learned.
        a.learn_outcome(
            &Err(Error::MoveRefused("bucket 3 is already on queue 1".into())),
            1,
            Duration::from_secs(5),
        );
        assert_eq!(a.move_cost().fit_moves, 1);
        // Its move line says how long the failure took.
        let line = crate::service_control::move_line(&crate::service_control::LoggedMove {
            cause: out[0].cause,
            outcome: Err(Error::Move("timed out".into())),
            why: out[0].why.clone(),
            failed_after: Some(out[0].took),
        });
        assert_eq!(line["duration_us"], 2_000_000.0, "{line}");
        assert_eq!(line["error"], "timed out", "{line}");
    }

    /// A NIC refusing every table write: each round's first move fails
    /// and the loop waits twice as long as after the last; the same
    /// bucket is tried on the same queue again only after the policy's
    /// hold-down, doubled for each failure of that move.
    /// Once a move lands, the wait is the policy's period again.
    #[test]
    fn a_refusing_nic_slows_the_loop_down() {
        let mut a = AutoRebalance::bare();
        let t0 = a.epoch;
        assert!(a.sample(&skewed(100, 0)).is_none());
        let config = *a.rebalancer.config();
        let mut at = t0;
        let mut waits = Vec::new();
        let mut tried: HashMap<(u16, u32), Vec<Instant>> = HashMap::new();
        for round in 1..=6 {
            let mut pairs = Vec::new();
            let out = a.round_on(at, &TABLE, &skewed(100 + 100 * round, round), |b, to| {
                pairs.push((b, to));
                (
                    Err(Error::Move("the NIC refused".into())),
                    false,
                    Duration::ZERO,
                )
            });
            assert_eq!(out.len(), 1, "one move tried a round");
            tried.entry(pairs[0]).or_default().push(at);
            let wait = a.wait();
            waits.push(wait);
            at += wait;
        }
        let base = config.base_period;
        assert_eq!(waits, (0..6).map(|k| base * (1 << k)).collect::<Vec<_>>());
        for times in tried.values() {
            for (k, t) in times.windows(2).enumerate() {
                assert!(t[1] - t[0] >= config.hold_down * (1 << k), "{tried:?}");
            }
        }
        // A move that lands: the loop's own period again.
        a.round_on(at, &TABLE, &skewed(700, 6), |_, _| {
            (Ok(MoveReport::default()), true, Duration::ZERO)
        });
        assert!(a.wait() <= a.period());
    }

    #[test]
    fn a_core_busy_time_is_shared_by_measured_time() {
        assert_eq!(
            busy_shares(1_000, &[300, 100, 0]),
            [Some(750), Some(250), Some(0)]
        );
        // Nothing timed: the policy falls back to packets.
        assert_eq!(busy_shares(1_000, &[0, 0]), [None, None]);
        // An idle core gives its buckets nothing, whatever was timed.
        assert_eq!(busy_shares(0, &[5, 5]), [Some(0), Some(0)]);
        assert!(busy_shares(7, &[]).is_empty());
    }
}
