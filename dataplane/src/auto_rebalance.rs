//! A TCP service's rebalancing loop (`--rebalance auto`): every period,
//! the queues' load over the period (each worker's busy time, each RSS
//! bucket's segments and bytes) as a numa-sched [`LoadSnapshot`], and the
//! [`Rebalancer`]'s plan carried out bucket by bucket through
//! [`TcpService::move_bucket`]. Also the test mode that moves a random
//! bucket in use every few milliseconds whatever the load (a storm).
//!
//! It runs on the service's main thread (not on a worker): a few counter
//! reads per period, and the moves themselves.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use flowlane_numa_sched::{
    BucketLoad, BucketMove, CoreLoad, IndirectionTable, LoadSnapshot, MoveReason, RebalanceConfig,
    Rebalancer, Topology,
};

use crate::control_socket::MoveCause;
use crate::handoff::MoveReport;
use crate::service_control::move_and_see;
use crate::tcp_service::TcpService;
use crate::{Error, Result};

/// The bucket counters are published every 50 ms: no shorter period.
const MIN_PERIOD: Duration = Duration::from_millis(50);

/// What the loop does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Move buckets when the load is skewed (numa-sched's policy).
    Auto,
    /// Move a random bucket in use to another queue every `interval`.
    Storm {
        /// Time between moves.
        interval: Duration,
    },
}

/// What a service's flags say about its rebalancing loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wish {
    /// No flag: `auto` where buckets can move, off elsewhere.
    Default,
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
            (Wish::Default, Some(why)) => {
                tracing::info!("rebalancing off: {why}");
                Ok(Rebalancing {
                    off_because: Some(why),
                    ..Rebalancing::default()
                })
            }
            (Wish::Default, None) => Ok(Rebalancing {
                mode: Some(Mode::Auto),
                by_default: true,
                off_because: None,
            }),
        }
    }
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
}

/// One service's rebalancing loop.
#[derive(Debug)]
pub struct AutoRebalance {
    mode: Mode,
    rebalancer: Rebalancer,
    topology: Topology,
    epoch: Instant,
    next: Instant,
    last_at: Instant,
    /// Each queue's busy nanoseconds at the last round.
    last_busy: HashMap<u32, u64>,
    /// Each (queue, bucket)'s segments, bytes and busy ns at the last round.
    last_buckets: HashMap<(u32, u16), (u64, u64, u64)>,
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
        me.sample(service);
        me.next = me.epoch + me.period();
        Ok(me)
    }

    /// The loop on a machine of `topology`, before its first sample.
    fn on(topology: Topology, mode: Mode) -> Result<AutoRebalance> {
        let config = RebalanceConfig {
            min_period: MIN_PERIOD,
            ..RebalanceConfig::default()
        };
        let rebalancer = Rebalancer::new(config).map_err(Error::Placement)?;
        let now = Instant::now();
        Ok(AutoRebalance {
            mode,
            rebalancer,
            topology,
            epoch: now,
            next: now,
            last_at: now,
            last_busy: HashMap::new(),
            last_buckets: HashMap::new(),
            rng: 0x2545_f491_4f6c_dd1d ^ u64::from(std::process::id()),
        })
    }

    /// A loop with no service behind it, on a two-core machine (tests of
    /// what it remembers).
    #[cfg(test)]
    pub(crate) fn bare() -> AutoRebalance {
        let topology = Topology::synthetic(1, 1, 2, 1).expect("a small machine");
        AutoRebalance::on(topology, Mode::Auto).expect("the default policy")
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
    /// it is for the policy's hold-down, and `to` takes no bucket in the
    /// next round ([`Rebalancer::note_move`]), so that the loop does not
    /// move it straight back.
    pub fn note_move(&mut self, bucket: u16, to: u32) {
        let now = self.clock(Instant::now());
        self.rebalancer
            .note_move(usize::from(bucket), to as u16, now);
    }

    /// The policy's clock at `at`: the time since the loop started, plus
    /// one hold-down, so that a hold can always be lifted by noting a move
    /// one hold-down before now ([`AutoRebalance::carry_out`]).
    fn clock(&self, at: Instant) -> Duration {
        self.rebalancer.config().hold_down + at.saturating_duration_since(self.epoch)
    }

    fn period(&self) -> Duration {
        match self.mode {
            Mode::Auto => self.rebalancer.period().max(MIN_PERIOD),
            Mode::Storm { interval } => interval,
        }
    }

    /// Runs a round if one is due; returns each move made or tried.
    pub fn poll(&mut self, service: &TcpService) -> Vec<Tried> {
        let now = Instant::now();
        if now < self.next {
            return Vec::new();
        }
        let out = match self.mode {
            Mode::Auto => self.round(service, now),
            Mode::Storm { .. } => self.storm(service).into_iter().collect(),
        };
        self.next = Instant::now() + self.period();
        out
    }

    /// The load since the last sample: each queue's busy time and the
    /// period's length (ns), each bucket's segments, bytes and busy time.
    /// A bucket's busy time is its share of what the worker timed on its
    /// buckets' frames, times the worker's busy time (RSS++'s load, with
    /// the share measured in time rather than packets: transmission and
    /// timers cost in proportion).
    fn sample(&mut self, service: &TcpService) -> (Vec<CoreLoad>, Vec<BucketLoad>) {
        let now = Instant::now();
        let total = now.duration_since(self.last_at).as_nanos() as u64;
        self.last_at = now;
        let mut cores = Vec::new();
        for (info, c) in service.dataplane().counters() {
            let before = self
                .last_busy
                .insert(info.queue, c.busy_ns)
                .unwrap_or(c.busy_ns);
            cores.push(CoreLoad {
                queue: info.queue as u16,
                cpu: info.cpu.unwrap_or(info.queue),
                node: info.node,
                busy_cycles: c.busy_ns.saturating_sub(before).min(total),
                total_cycles: total.max(1),
            });
        }
        let mut buckets = Vec::new();
        for (queue, list) in service.bucket_counters() {
            let first = buckets.len();
            let mut timed = Vec::with_capacity(list.len());
            for b in list {
                let was = self
                    .last_buckets
                    .insert((queue, b.bucket), (b.segments_in, b.bytes_in, b.busy_ns))
                    .unwrap_or_default();
                timed.push(b.busy_ns.saturating_sub(was.2));
                buckets.push(BucketLoad {
                    bucket: usize::from(b.bucket),
                    queue: queue as u16,
                    packets: b.segments_in.saturating_sub(was.0),
                    bytes: b.bytes_in.saturating_sub(was.1),
                    busy_cycles: None,
                    connections: b.connections as u32,
                });
            }
            let core_busy = cores
                .iter()
                .find(|c| u32::from(c.queue) == queue)
                .map_or(0, |c| c.busy_cycles);
            let shares = busy_shares(core_busy, &timed);
            for (b, share) in buckets[first..].iter_mut().zip(shares) {
                b.busy_cycles = share;
            }
        }
        (cores, buckets)
    }

    /// One round of the policy.
    fn round(&mut self, service: &TcpService, now: Instant) -> Vec<Tried> {
        let (cores, all) = self.sample(service);
        let Some(table) = service.rss_table() else {
            return Vec::new();
        };
        let Ok(table) = IndirectionTable::new(table.iter().map(|&q| q as u16).collect()) else {
            return Vec::new();
        };
        // Only what each bucket's current queue counted: a bucket that
        // moved during the period left its earlier figures on its old queue.
        let buckets: Vec<BucketLoad> = all
            .into_iter()
            .filter(|b| table.entries().get(b.bucket) == Some(&b.queue))
            .collect();
        let now = self.clock(now);
        let snapshot = LoadSnapshot {
            now,
            table: &table,
            topology: &self.topology,
            cores: &cores,
            buckets: &buckets,
        };
        let plan = match self.rebalancer.decide(&snapshot) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("rebalancing: {e}");
                return Vec::new();
            }
        };
        self.carry_out(now, &plan.moves, |bucket, to| {
            move_and_see(service, bucket, to)
        })
    }

    /// Carries out a plan's `moves` through `try_move` (its outcome, and
    /// whether the bucket landed: [`Tried::landed`]) in the plan's order,
    /// up to the first that fails: the later moves were planned on the
    /// loads the earlier ones make, and a NIC that refused one table write
    /// would refuse the rest (each refusal costs two handoffs: the move
    /// and its undo). The policy remembered every move of its plan as made
    /// at `now` ([`Rebalancer::decide`]): the hold-down of each bucket that
    /// did not land (the move failed with the bucket where it was, or it
    /// was never tried) is lifted, by noting its move one hold-down before
    /// `now` ([`AutoRebalance::clock`]).
    fn carry_out(
        &mut self,
        now: Duration,
        moves: &[BucketMove],
        mut try_move: impl FnMut(u16, u32) -> (Result<MoveReport>, bool),
    ) -> Vec<Tried> {
        let mut out = Vec::new();
        let mut failed = false;
        for m in moves {
            let landed = !failed && {
                let cause = match m.reason {
                    MoveReason::SameNode { .. } => MoveCause::BalanceSameNode,
                    MoveReason::NodeSaturated { .. } => MoveCause::BalanceOtherNode,
                };
                let (outcome, landed) = try_move(m.bucket as u16, u32::from(m.to));
                failed = outcome.is_err();
                out.push(Tried {
                    cause,
                    outcome,
                    landed,
                });
                landed
            };
            if !landed {
                let hold = self.rebalancer.config().hold_down;
                self.rebalancer
                    .note_move(m.bucket, m.to, now.saturating_sub(hold));
            }
        }
        out
    }

    /// A move of a random bucket in use to another random queue.
    fn storm(&mut self, service: &TcpService) -> Option<Tried> {
        let table = service.rss_table()?;
        let queues = service.dataplane().queues().len() as u64;
        let mut in_use: Vec<u16> = Vec::new();
        for (q, list) in service.bucket_counters() {
            in_use.extend(
                list.iter()
                    .filter(|b| b.connections > 0 && table[usize::from(b.bucket)] == q)
                    .map(|b| b.bucket),
            );
        }
        if in_use.is_empty() || queues < 2 {
            return None;
        }
        let bucket = in_use[(self.random() % in_use.len() as u64) as usize];
        let from = u64::from(table[usize::from(bucket)]);
        let to = (from + 1 + self.random() % (queues - 1)) % queues;
        let (outcome, landed) = move_and_see(service, bucket, to as u32);
        Some(Tried {
            cause: MoveCause::Storm,
            outcome,
            landed,
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
            mode: Some(Mode::Auto),
            by_default,
            off_because: None,
        };
        assert_eq!(Wish::Default.choose(None).unwrap(), on(true));
        assert_eq!(Wish::Run(Mode::Auto).choose(None).unwrap(), on(false));
        assert_eq!(Wish::Off.choose(None).unwrap(), Rebalancing::default());
    }

    #[test]
    fn where_buckets_cannot_move_only_a_loop_asked_for_is_refused() {
        let why = || Some("one queue".to_string());
        let off = Wish::Default.choose(why()).unwrap();
        assert_eq!((off.mode, off.off_because), (None, why()));
        assert_eq!(Wish::Off.choose(why()).unwrap(), Rebalancing::default());
        let storm = Mode::Storm {
            interval: std::time::Duration::from_millis(5),
        };
        for mode in [Mode::Auto, storm] {
            let e = Wish::Run(mode).choose(why()).unwrap_err().to_string();
            assert!(
                e.contains("one queue") && e.contains("--rebalance off"),
                "{e}"
            );
        }
    }

    /// A plan's move to `to` of `bucket`.
    fn planned(bucket: usize, to: u16) -> BucketMove {
        BucketMove {
            bucket,
            from: 1 - to,
            to,
            reason: MoveReason::SameNode { node: 0 },
            load: 0.1,
            from_load: 0.9,
            to_load: 0.1,
            gain: 0.1,
            cost: 0.0,
            connections: 0,
            packets: 0,
            bytes: 0,
        }
    }

    /// The policy remembers its plan's moves as made; the loop keeps the
    /// hold-down of those whose bucket landed (a move that failed once the
    /// bucket had moved included), and lifts that of the others: the move
    /// that failed with its bucket where it was, and those after it, never
    /// tried.
    #[test]
    fn only_the_buckets_that_moved_are_held_down() {
        /// (failed, landed) of each move tried.
        type Tries = &'static [(bool, bool)];
        let cases: [(Tries, [bool; 3]); 2] = [
            // The moves tried; the buckets held afterwards.
            (&[(false, true), (true, true)], [true, true, false]),
            (&[(true, false)], [false, false, false]),
        ];
        for (tried, held) in cases {
            let mut a = AutoRebalance::bare();
            let now = a.clock(Instant::now());
            let plan = [planned(3, 1), planned(4, 0), planned(5, 1)];
            // What `Rebalancer::decide` remembers of its plan.
            for m in &plan {
                a.rebalancer.note_move(m.bucket, m.to, now);
            }
            let mut outcomes = tried.iter();
            let out = a.carry_out(now, &plan, |_, _| {
                let &(failed, landed) = outcomes.next().expect("no move after a failure");
                let outcome = if failed {
                    Err(Error::Move("the NIC refused".into()))
                } else {
                    Ok(MoveReport::default())
                };
                (outcome, landed)
            });
            assert_eq!(out.len(), tried.len());
            let now_held = [3, 4, 5].map(|b| a.is_held(b));
            assert_eq!(now_held, held, "{tried:?}");
        }
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
