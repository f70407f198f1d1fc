//! `flowlane bench skew`: a skewed workload with and without live
//! rebalancing, same run (issue 13's goals: max/mean core load ≤ 1.2
//! within 1 s of a skew appearing; aggregate throughput with rebalancing
//! vs without).
//!
//! Per mode (`--modes off,auto`, alternated over `--rounds`): a fresh
//! two-queue test bed (or the user's, given back as it was after the run:
//! `bench_bed::with_bed`) whose emulated NIC puts every RSS bucket on
//! queue 0 (the skew); `flowlane bulk-sink --rebalance MODE` on it;
//! `--senders` kernel TCP connections from the peer namespace, from
//! source ports in different buckets (so that a policy has buckets to
//! move), streaming as fast as the kernel sends for `--seconds`. Every
//! `--interval-ms` the sink's status (control socket) gives a window of
//! the timeline: each queue's busy fraction, their max/mean, the bytes
//! received, the moves.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::ValueEnum as _;
use flowlane_dataplane::control_socket::{MoveHistory, ServiceStatus};
use flowlane_dataplane::service_args::RebalanceMode;
use flowlane_dataplane::MoveReport;
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_testbed::{netns, BedSpec};
use serde::Serialize;

use crate::bench_bed::{ports_in_distinct_buckets, quantile, socket_path, with_bed, Peer, Sink};
use flowlane_testbed::net_counters::{self, NetCounters};

/// Flags of `flowlane bench skew`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Test bed name (a two-queue bed, created and removed for each run,
    /// or, one that is up already with two queues, used and given back its
    /// RSS key and table after each run).
    #[arg(long, default_value = "benchsk")]
    pub bed: String,
    /// The sink's `--rebalance` modes, one run each, in this order.
    #[arg(long, value_delimiter = ',', default_values = ["off", "auto"])]
    pub modes: Vec<RebalanceMode>,
    /// Times every mode runs (alternated: off, auto, off, auto, ...).
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Kernel TCP connections streaming into the sink.
    #[arg(long, default_value_t = 16)]
    pub senders: usize,
    /// Seconds each run streams.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Milliseconds per window of the timeline.
    #[arg(long, default_value_t = 100)]
    pub interval_ms: u64,
    /// Print every figure and the timelines as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The load is balanced when the busiest queue's busy fraction is at most
/// this many times the mean (issue 13's goal).
pub const BALANCED: f64 = 1.2;

/// Windows whose mean busy fraction is below this carry no load to judge.
pub const MIN_MEAN: f64 = 0.05;

const PORT: u16 = 5010;

/// What one status answer says that the timeline needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sink's uptime, ns.
    pub uptime_ns: u64,
    /// Each queue's busy time so far, ns.
    pub busy_ns: Vec<u64>,
    /// Payload bytes received so far, every bucket on every queue (a
    /// bucket's bytes stay counted on the queue that received them).
    pub bytes_in: u64,
    /// Each queue's TCP segments received so far.
    pub segments_in: Vec<u64>,
    /// Moves done so far.
    pub moves_done: u64,
}

impl Sample {
    /// The sample of one status answer.
    pub fn of(s: &ServiceStatus) -> Sample {
        Sample {
            uptime_ns: s.uptime_ns,
            busy_ns: s.queues.iter().map(|q| q.busy_ns).collect(),
            bytes_in: s
                .queues
                .iter()
                .flat_map(|q| q.buckets.iter())
                .map(|b| b.bytes_in)
                .sum(),
            segments_in: s.queues.iter().map(|q| q.segments_in).collect(),
            moves_done: s.moves.done,
        }
    }
}

/// One window of the timeline: what happened between two samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Its start, ms since the run's first sample.
    pub start_ms: f64,
    /// Its length, ms (the sink's clock).
    pub ms: f64,
    /// Each queue's busy fraction.
    pub busy: Vec<f64>,
    /// The largest busy fraction over the mean; none when the mean is
    /// below [`MIN_MEAN`].
    pub max_mean: Option<f64>,
    /// Payload bytes received.
    pub bytes: u64,
    /// Each queue's TCP segments received.
    pub segments: Vec<u64>,
    /// Moves done.
    pub moves: u64,
}

impl Window {
    /// The window from sample `a` to the later `b`; `t0_ns` is the run's
    /// first sample's uptime.
    pub fn between(a: &Sample, b: &Sample, t0_ns: u64) -> Window {
        let dt = b.uptime_ns.saturating_sub(a.uptime_ns);
        let busy: Vec<f64> = a
            .busy_ns
            .iter()
            .zip(&b.busy_ns)
            .map(|(x, y)| {
                if dt == 0 {
                    0.0
                } else {
                    y.saturating_sub(*x) as f64 / dt as f64
                }
            })
            .collect();
        let mean = busy.iter().sum::<f64>() / busy.len().max(1) as f64;
        let max = busy.iter().copied().fold(0.0, f64::max);
        Window {
            start_ms: a.uptime_ns.saturating_sub(t0_ns) as f64 / 1e6,
            ms: dt as f64 / 1e6,
            busy,
            max_mean: (mean >= MIN_MEAN).then(|| max / mean),
            bytes: b.bytes_in.saturating_sub(a.bytes_in),
            segments: counts_since(&a.segments_in, &b.segments_in),
            moves: b.moves_done.saturating_sub(a.moves_done),
        }
    }

    fn end_ms(&self) -> f64 {
        self.start_ms + self.ms
    }
}

/// Each of `later`'s counters minus `earlier`'s.
fn counts_since(earlier: &[u64], later: &[u64]) -> Vec<u64> {
    earlier
        .iter()
        .zip(later)
        .map(|(a, b)| b.saturating_sub(*a))
        .collect()
}

/// The timeline's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Balance {
    /// Payload received over the whole run, Gbit/s.
    pub goodput_gbps: f64,
    /// Payload received over the run's second half, Gbit/s.
    pub goodput_second_half_gbps: f64,
    /// From the start of the first window with traffic to the end of the
    /// first window with max/mean ≤ [`BALANCED`], ms; none if never.
    pub time_to_balance_ms: Option<f64>,
    /// Of the windows after that one (with load), the share above
    /// [`BALANCED`].
    pub share_above_after: Option<f64>,
    /// Mean max/mean of the second half's windows with load.
    pub max_mean_second_half: Option<f64>,
}

/// Gbit/s of `windows`' bytes over their length.
fn gbps(windows: &[Window]) -> f64 {
    let ms: f64 = windows.iter().map(|w| w.ms).sum();
    let bytes: u64 = windows.iter().map(|w| w.bytes).sum();
    if ms <= 0.0 {
        0.0
    } else {
        bytes as f64 * 8.0 / (ms * 1e6)
    }
}

/// The figures of a timeline.
pub fn balance(windows: &[Window]) -> Balance {
    let second = &windows[windows.len() / 2..];
    let ratios: Vec<f64> = second.iter().filter_map(|w| w.max_mean).collect();
    let mut out = Balance {
        goodput_gbps: gbps(windows),
        goodput_second_half_gbps: gbps(second),
        max_mean_second_half: (!ratios.is_empty())
            .then(|| ratios.iter().sum::<f64>() / ratios.len() as f64),
        ..Balance::default()
    };
    let Some(first) = windows.iter().position(|w| w.bytes > 0) else {
        return out;
    };
    let Some(at) = windows[first..]
        .iter()
        .position(|w| w.max_mean.is_some_and(|r| r <= BALANCED))
        .map(|i| first + i)
    else {
        return out;
    };
    out.time_to_balance_ms = Some(windows[at].end_ms() - windows[first].start_ms);
    let after: Vec<f64> = windows[at + 1..]
        .iter()
        .filter_map(|w| w.max_mean)
        .collect();
    out.share_above_after = (!after.is_empty())
        .then(|| after.iter().filter(|&&r| r > BALANCED).count() as f64 / after.len() as f64);
    out
}

/// The moves done since `done_before` that `h` still keeps (all of them
/// unless more than [`MoveHistory::KEEP`] were done in between).
pub fn moves_since(done_before: u64, h: &MoveHistory) -> &[MoveReport] {
    let new = usize::try_from(h.done.saturating_sub(done_before)).unwrap_or(usize::MAX);
    &h.recent[h.recent.len().saturating_sub(new)..]
}

/// The moves' figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Moves {
    /// Moves done.
    pub done: u64,
    /// Moves that failed.
    pub failed: u64,
    /// Moves whose reports were read (all done unless the history
    /// overflowed between two samples).
    pub reported: usize,
    /// Connections moved, frames forwarded and held (sums over the
    /// reported moves).
    pub connections: u64,
    /// Frames the old queue forwarded.
    pub frames_forwarded: u64,
    /// Frames the new queue held.
    pub frames_held: u64,
    /// Moves that ended on the hold timeout.
    pub hold_timeouts: usize,
    /// Time per move, µs: p50, p99.
    pub duration_us: [f64; 2],
}

impl Moves {
    fn of(reports: &[MoveReport], done: u64, failed: u64) -> Moves {
        let mut d: Vec<f64> = reports.iter().map(|r| r.duration_us).collect();
        d.sort_by(f64::total_cmp);
        Moves {
            done,
            failed,
            reported: reports.len(),
            connections: reports.iter().map(|r| r.connections as u64).sum(),
            frames_forwarded: reports.iter().map(|r| r.frames_forwarded).sum(),
            frames_held: reports.iter().map(|r| r.frames_held).sum(),
            hold_timeouts: reports.iter().filter(|r| r.hold_timed_out).count(),
            duration_us: [quantile(&d, 0.5), quantile(&d, 0.99)],
        }
    }
}

/// The senders' own counters over the run (their namespace's).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Senders {
    /// TCP segments sent (`Tcp.OutSegs`).
    pub out_segs: u64,
    /// Of which retransmitted (`Tcp.RetransSegs`).
    pub retrans_segs: u64,
    /// Reordering they detected (`TcpExt.TCPSACKReorder` +
    /// `TcpExt.TCPTSReorder`).
    pub reorder: u64,
}

impl Senders {
    fn between(before: &NetCounters, after: &NetCounters) -> Senders {
        let d = |n| net_counters::delta(before, after, n);
        Senders {
            out_segs: d("Tcp.OutSegs"),
            retrans_segs: d("Tcp.RetransSegs"),
            reorder: d("TcpExt.TCPSACKReorder") + d("TcpExt.TCPTSReorder"),
        }
    }

    /// Retransmitted segments, % of those sent.
    pub fn retrans_pct(&self) -> f64 {
        100.0 * self.retrans_segs as f64 / self.out_segs.max(1) as f64
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SkewRun {
    /// The sink's `--rebalance` mode.
    pub mode: String,
    /// The round (from 0).
    pub round: usize,
    /// Streaming connections.
    pub senders: usize,
    /// The timeline's figures.
    #[serde(flatten)]
    pub balance: Balance,
    /// The moves made.
    pub moves: Moves,
    /// The senders' counters.
    pub sender_counters: Senders,
    /// Each queue's TCP segments received over the run.
    pub segments_per_queue: Vec<u64>,
    /// The timeline.
    pub timeline: Vec<Window>,
}

fn mode_name(m: RebalanceMode) -> String {
    m.to_possible_value()
        .map_or_else(|| format!("{m:?}"), |v| v.get_name().to_string())
}

/// One run: a skewed bed (fresh, or the user's given back after it), the
/// sink in `mode`, the senders streaming.
fn run_one(args: &Args, mode: RebalanceMode, round: usize) -> Result<SkewRun> {
    let spec = BedSpec {
        name: args.bed.clone(),
        queues: 2,
        key: RssKey::microsoft_default().as_bytes().to_vec(),
        // Every bucket on queue 0: the skew.
        table: vec![0; 128],
    };
    let mode = mode_name(mode);
    with_bed("bench skew", &spec, |bed| {
        let sink = Sink::start(bed, &socket_path("skew"), PORT, &["--rebalance", &mode])?;
        let ports = ports_in_distinct_buckets(bed, PORT, args.senders, 20_000)?;
        let before = net_counters::read_in(&bed.peer_netns)?;
        let first = sink.status()?;
        let t0 = first.uptime_ns;
        let mut last = Sample::of(&first);
        let (first_sample, done_before) = (last.clone(), first.moves.done);
        let failed_before = first.moves.failed;
        let mut timeline = Vec::new();
        let mut reports = Vec::new();
        let mut done = done_before;
        let peer = Peer::open(bed, PORT, &[], &ports)?;
        let start = Instant::now();
        let interval = Duration::from_millis(args.interval_ms);
        let end = start + Duration::from_secs(args.seconds);
        let mut next = start;
        let mut status = first;
        while next < end {
            next += interval;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            status = sink.status()?;
            let s = Sample::of(&status);
            timeline.push(Window::between(&last, &s, t0));
            reports.extend_from_slice(moves_since(done, &status.moves));
            done = status.moves.done;
            last = s;
        }
        drop(peer);
        let after = net_counters::read_in(&bed.peer_netns)?;
        Ok(SkewRun {
            mode: mode.clone(),
            round,
            senders: args.senders,
            balance: balance(&timeline),
            moves: Moves::of(
                &reports,
                done - done_before,
                status.moves.failed.saturating_sub(failed_before),
            ),
            sender_counters: Senders::between(&before, &after),
            segments_per_queue: counts_since(&first_sample.segments_in, &last.segments_in),
            timeline,
        })
    })
}

/// The flags' values a run cannot work with.
fn check(args: &Args) -> Result<()> {
    if args.senders == 0 {
        bail!("--senders must be at least 1 (kernel connections streaming into the sink)");
    }
    if args.seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if args.interval_ms == 0 || args.interval_ms >= args.seconds * 1000 {
        bail!(
            "--interval-ms must be at least 1 and shorter than --seconds ({} s)",
            args.seconds
        );
    }
    Ok(())
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    check(&args)?;
    netns::require_root("flowlane bench skew")?;
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        for &mode in &args.modes {
            runs.push(run_one(&args, mode, round)?);
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(());
    }
    outln!("mode  round  Gbit/s all/2nd-half  to<=1.2 ms  >1.2 after % max/mean 2nd  moves done/failed  fwd  held  hold_to  retrans %  reorder  segments per queue");
    for r in &runs {
        let b = &r.balance;
        outln!(
            "{:<4}  {:>5}  {:>8.2} /{:>8.2}  {:>10}  {:>10}  {:>12}  {:>10} /{:>6}  {:>3}  {:>4}  {:>7}  {:>9.3}  {:>7}  {:?}",
            r.mode,
            r.round,
            b.goodput_gbps,
            b.goodput_second_half_gbps,
            opt(b.time_to_balance_ms, 0),
            opt(b.share_above_after.map(|s| s * 100.0), 0),
            opt(b.max_mean_second_half, 2),
            r.moves.done,
            r.moves.failed,
            r.moves.frames_forwarded,
            r.moves.frames_held,
            r.moves.hold_timeouts,
            r.sender_counters.retrans_pct(),
            r.sender_counters.reorder,
            r.segments_per_queue
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, busy_ms: [u64; 2], bytes: u64, moves: u64) -> Sample {
        Sample {
            uptime_ns: ms * 1_000_000,
            busy_ns: busy_ms.iter().map(|b| b * 1_000_000).collect(),
            bytes_in: bytes,
            segments_in: vec![ms, 2 * ms],
            moves_done: moves,
        }
    }

    fn window(start_ms: f64, busy: [f64; 2], bytes: u64) -> Window {
        let mean = (busy[0] + busy[1]) / 2.0;
        Window {
            start_ms,
            ms: 100.0,
            busy: busy.to_vec(),
            max_mean: (mean >= MIN_MEAN).then(|| busy[0].max(busy[1]) / mean),
            bytes,
            segments: vec![0, 0],
            moves: 0,
        }
    }

    #[test]
    fn a_window_is_the_difference_of_two_samples() {
        let a = sample(1_000, [200, 100], 5_000, 1);
        let b = sample(1_100, [290, 130], 1_255_000, 3);
        let w = Window::between(&a, &b, 500_000_000);
        assert_eq!(w.start_ms, 500.0);
        assert_eq!(w.ms, 100.0);
        assert_eq!(w.busy, vec![0.9, 0.3]);
        assert!((w.max_mean.unwrap() - 1.5).abs() < 1e-12);
        assert_eq!(w.bytes, 1_250_000);
        assert_eq!(w.moves, 2);
        assert_eq!(w.segments, vec![100, 200]);
        // Too little load to judge: no ratio.
        let idle = Window::between(&a, &sample(1_100, [204, 102], 5_000, 1), 0);
        assert_eq!(idle.max_mean, None);
        // The same uptime twice: nothing, not a division by zero.
        let none = Window::between(&a, &a, 0);
        assert_eq!(none.busy, vec![0.0, 0.0]);
        assert_eq!(none.max_mean, None);
    }

    #[test]
    fn a_status_sums_bytes_over_every_queue() {
        use flowlane_dataplane::control_socket::QueueStatus;
        use flowlane_dataplane::BucketSnapshot;
        let q = |queue: u32, busy_ns: u64, buckets: &[(u16, u64)]| QueueStatus {
            queue,
            cpu: None,
            node: 0,
            busy_ns,
            segments_in: queue as u64 + 10,
            connections: 0,
            carrier: None,
            buckets: buckets
                .iter()
                .map(|&(bucket, bytes_in)| BucketSnapshot {
                    bucket,
                    bytes_in,
                    ..BucketSnapshot::default()
                })
                .collect(),
        };
        let s = ServiceStatus {
            service: "bulk-sink".into(),
            pid: 1,
            uptime_ns: 7,
            backend: "xdp".into(),
            iface: "x".into(),
            rebalance: "auto".into(),
            rebalance_off_because: None,
            stopping: false,
            move_cost: None,
            table: vec![],
            // Bucket 3 moved from queue 0 to 1: counted on both.
            queues: vec![q(0, 50, &[(3, 100), (4, 20)]), q(1, 60, &[(3, 5)])],
            moves: MoveHistory {
                done: 2,
                ..MoveHistory::default()
            },
        };
        let got = Sample::of(&s);
        assert_eq!(got.bytes_in, 125);
        assert_eq!(got.busy_ns, vec![50, 60]);
        assert_eq!(got.segments_in, vec![10, 11]);
        assert_eq!((got.uptime_ns, got.moves_done), (7, 2));
    }

    #[test]
    fn balance_is_timed_from_the_first_window_with_traffic() {
        let w = vec![
            window(0.0, [0.0, 0.01], 0),        // before traffic
            window(100.0, [1.0, 0.02], 1_000),  // traffic, skewed
            window(200.0, [0.9, 0.5], 1_000),   // 1.29
            window(300.0, [0.6, 0.5], 1_000),   // 1.09: balanced
            window(400.0, [0.9, 0.3], 1_000),   // 1.5: above again
            window(500.0, [0.55, 0.5], 1_000),  // 1.05
            window(600.0, [0.5, 0.5], 1_000),   // 1.0
            window(700.0, [0.01, 0.01], 1_000), // no load to judge
        ];
        let b = balance(&w);
        assert_eq!(b.time_to_balance_ms, Some(300.0));
        // After the balanced window: 1.5, 1.05, 1.0 (the idle one left out).
        assert!((b.share_above_after.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // Second half: windows 4..8, ratios 1.5, 1.1/1.05.., 1.0.
        let r = [0.9 / 0.6, 0.55 / 0.525, 1.0];
        let mean = r.iter().sum::<f64>() / 3.0;
        assert!((b.max_mean_second_half.unwrap() - mean).abs() < 1e-12);
        // 7000 bytes in 800 ms; 4000 in the last 400.
        assert!((b.goodput_gbps - 7000.0 * 8.0 / 800e6).abs() < 1e-15);
        assert!((b.goodput_second_half_gbps - 4000.0 * 8.0 / 400e6).abs() < 1e-15);
    }

    #[test]
    fn a_load_never_balanced_has_no_time() {
        let w = vec![window(0.0, [1.0, 0.0], 10), window(100.0, [1.0, 0.05], 10)];
        let b = balance(&w);
        assert_eq!(b.time_to_balance_ms, None);
        assert_eq!(b.share_above_after, None);
        assert!(b.max_mean_second_half.unwrap() > 1.9);
        // Balanced before any traffic does not count.
        let w = vec![window(0.0, [0.5, 0.5], 0), window(100.0, [1.0, 0.0], 10)];
        assert_eq!(balance(&w).time_to_balance_ms, None);
        assert_eq!(balance(&[]), Balance::default());
    }

    #[test]
    fn new_moves_are_the_last_of_the_history() {
        let m = |bucket| MoveReport {
            bucket,
            ..MoveReport::default()
        };
        let h = MoveHistory {
            done: 5,
            failed: 0,
            recent: (0..5).map(m).collect(),
            ..MoveHistory::default()
        };
        let buckets = |r: &[MoveReport]| r.iter().map(|r| r.bucket).collect::<Vec<_>>();
        assert_eq!(buckets(moves_since(3, &h)), vec![3, 4]);
        assert!(moves_since(5, &h).is_empty());
        // More done than kept: what is kept.
        assert_eq!(
            buckets(moves_since(0, &MoveHistory { done: 9, ..h })).len(),
            5
        );
    }

    #[test]
    fn moves_are_summed_and_timed() {
        let r = |d: f64, fwd: u64, held: u64, to: bool| MoveReport {
            connections: 1,
            duration_us: d,
            frames_forwarded: fwd,
            frames_held: held,
            hold_timed_out: to,
            ..MoveReport::default()
        };
        let m = Moves::of(&[r(30.0, 3, 1, false), r(10.0, 4, 0, true)], 2, 1);
        assert_eq!((m.done, m.failed, m.reported), (2, 1, 2));
        assert_eq!(
            (m.connections, m.frames_forwarded, m.frames_held),
            (2, 7, 1)
        );
        assert_eq!(m.hold_timeouts, 1);
        assert_eq!(m.duration_us, [10.0, 30.0]);
    }

    #[test]
    fn senders_counters_are_deltas() {
        let c = |o, r, s, t| {
            NetCounters::from([
                ("Tcp.OutSegs".to_string(), o),
                ("Tcp.RetransSegs".to_string(), r),
                ("TcpExt.TCPSACKReorder".to_string(), s),
                ("TcpExt.TCPTSReorder".to_string(), t),
            ])
        };
        let s = Senders::between(&c(100, 1, 0, 0), &c(1100, 6, 2, 1));
        assert_eq!((s.out_segs, s.retrans_segs, s.reorder), (1000, 5, 3));
        assert!((s.retrans_pct() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn flags_a_run_cannot_use_are_refused() {
        let ok = Args {
            bed: "b".into(),
            modes: vec![RebalanceMode::Off],
            rounds: 1,
            senders: 16,
            seconds: 10,
            interval_ms: 100,
            json: false,
        };
        assert!(check(&ok).is_ok());
        let e = check(&Args {
            senders: 0,
            ..ok.clone()
        })
        .unwrap_err();
        assert!(e.to_string().contains("--senders"), "{e}");
        assert!(check(&Args {
            interval_ms: 10_000,
            ..ok.clone()
        })
        .is_err());
        assert!(check(&Args { rounds: 0, ..ok }).is_err());
        assert_eq!(mode_name(RebalanceMode::Auto), "auto");
    }
}
