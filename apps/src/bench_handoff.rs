//! `flowlane bench handoff`: what moving one RSS bucket with its live
//! connections costs (issue 13's handoff time per move, p50/p99), for a
//! bucket of idle connections and for a busy one.
//!
//! A two-queue test bed; `flowlane bulk-sink` on it (its own process, as
//! deployed, `--no-hash`); in the peer namespace, kernel TCP connections
//! from source ports that the emulated NIC's Toeplitz hash puts in one
//! bucket: `idle` of them open and silent, `busy` of them streaming as fast
//! as the kernel sends; and, with `--background`, streaming connections in
//! other buckets of both queues, so that the workers are loaded and the
//! moved bucket's connection state is out of their caches when a move
//! comes, as when a rebalancer moves a bucket off a busy core (without
//! them both workers are idle and a bucket's state stays in their caches
//! between moves). The bucket is then moved back and forth between
//! the two queues through the sink's control socket
//! (`flowlane rebalance move` does the same), one move every interval; the
//! sink measures each move (`MoveReport`: from the request to the new
//! queue serving the bucket, export and NIC write included).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_dataplane::MoveReport;
use flowlane_testbed::{netns, BedSpec, BedState};
use serde::Serialize;

use crate::bench_bed::{
    ports_in_bucket, ports_outside_bucket, quantile, socket_path, with_bed, Peer, Sink,
};

/// Flags of `flowlane bench handoff`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Test bed name (a two-queue bed; created and removed by the run, or,
    /// one that is up already with two queues, used and given back its RSS
    /// key and table).
    #[arg(long, default_value = "benchho")]
    pub bed: String,
    /// Idle connections in the moved bucket, one case per value.
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 100])]
    pub idle: Vec<usize>,
    /// Streaming connections in the moved bucket, one case per value
    /// (combined with every `--idle` value).
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 4])]
    pub busy: Vec<usize>,
    /// Streaming connections in other buckets (spread over both queues'
    /// buckets), one case per value (combined with the others): they load
    /// both workers and push the moved bucket's state out of their caches.
    #[arg(long, value_delimiter = ',', default_values_t = [0usize])]
    pub background: Vec<usize>,
    /// Moves per case.
    #[arg(long, default_value_t = 200)]
    pub moves: usize,
    /// Milliseconds between moves.
    #[arg(long, default_value_t = 5)]
    pub interval_ms: u64,
    /// The sink's workers spin when idle (its `--busy-poll`) instead of
    /// sleeping in poll(2): a move's messages then find them awake, as on
    /// dedicated cores; without it each move first wakes two idle workers.
    #[arg(long)]
    pub busy_poll: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One case's figures.
#[derive(Debug, Serialize)]
pub struct HandoffFigure {
    /// Whether the sink's workers spun when idle (`--busy-poll`).
    pub busy_poll: bool,
    /// Idle connections in the bucket.
    pub idle: usize,
    /// Streaming connections in the bucket.
    pub busy: usize,
    /// Streaming connections in other buckets.
    pub background: usize,
    /// Moves measured.
    pub moves: usize,
    /// Connections carried per move (mean).
    pub connections: f64,
    /// Time per move, µs: p50, p99, max.
    pub duration_us: [f64; 3],
    /// Of which, from the request to the old queue's answer that the
    /// bucket is out of its stack, µs: p50, p99.
    pub export_us: [f64; 2],
    /// Writing the NIC's entry (while the old queue exports), µs: p50, p99.
    pub nic_write_us: [f64; 2],
    /// Of which, from the end of the export (the entry written by then) to
    /// the new queue serving the bucket (the old queue's drain), µs: p50,
    /// p99.
    pub drain_us: [f64; 2],
    /// Frames the old queue forwarded per move: mean, max.
    pub frames_forwarded: [f64; 2],
    /// Frames the new queue held per move: mean, max.
    pub frames_held: [f64; 2],
    /// Frames the old queue looked at on its RX ring ahead of handing
    /// them on, from the rewrite to its marker, per move: mean, max.
    pub frames_scanned: [f64; 2],
    /// Moves that ended on the hold timeout instead of the drain marker.
    pub hold_timeouts: usize,
}

const PORT: u16 = 5009;

/// The connections of one case.
#[derive(Debug, Clone, Copy)]
struct Load {
    idle: usize,
    busy: usize,
    background: usize,
}

/// Source ports of the first case; each case takes ports no case took
/// before (its connections leave TIME-WAIT behind).
const PORTS_FROM: u16 = 20_000;

/// One case, the `n`th: `idle` + `busy` connections in one bucket, moved
/// `moves` times, with `background` connections streaming in other
/// buckets. Each case moves another bucket, so that its ports are not
/// thinned out by those the cases before took (100 ports of one bucket of
/// 128 span 12 800 ports).
fn case(
    bed: &BedState,
    sink: &Sink,
    (n, taken): (usize, &mut HashSet<u16>),
    load: Load,
    args: &Args,
) -> Result<HandoffFigure> {
    let Load {
        idle,
        busy,
        background,
    } = load;
    let status = sink.status()?;
    // A bucket on queue 0 (the table of a fresh bed spreads them), the
    // `n`th.
    let on_0: Vec<usize> = (0..status.table.len())
        .filter(|&b| status.table[b] == 0)
        .collect();
    let bucket = *on_0
        .get(n % on_0.len().max(1))
        .context("no bucket on queue 0")?;
    let ports = ports_in_bucket(bed, PORT, bucket, idle + busy, (PORTS_FROM, taken))?;
    taken.extend(&ports);
    let others = ports_outside_bucket(bed, PORT, bucket, background, (PORTS_FROM, taken))?;
    taken.extend(&others);
    let b = bucket as u16;
    // The background first: the moved bucket's connections are then
    // served by workers that are already loaded.
    let _background = Peer::open(bed, PORT, &[], &others)?;
    let peer = Peer::open(bed, PORT, &ports[..idle], &ports[idle..])?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.connections(b)? < (idle + busy) as u64
        || sink.total_connections()? < (idle + busy + background) as u64
    {
        if Instant::now() > deadline {
            bail!(
                "the sink does not serve all {} connections",
                idle + busy + background
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut reports = Vec::with_capacity(args.moves);
    let mut at = 0u32;
    for _ in 0..args.moves {
        std::thread::sleep(Duration::from_millis(args.interval_ms));
        at = 1 - at;
        reports.push(sink.move_bucket(b, at)?);
    }
    drop(peer);
    Ok(figure(load, args.busy_poll, &reports))
}

/// The figures of one case's moves.
fn figure(load: Load, busy_poll: bool, reports: &[MoveReport]) -> HandoffFigure {
    let sorted = |f: fn(&MoveReport) -> f64| {
        let mut v: Vec<f64> = reports.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let n = reports.len().max(1) as f64;
    let mean_max = |f: fn(&MoveReport) -> u64| {
        let v: Vec<u64> = reports.iter().map(f).collect();
        [
            v.iter().sum::<u64>() as f64 / n,
            v.iter().copied().max().unwrap_or(0) as f64,
        ]
    };
    let d = sorted(|r| r.duration_us);
    let e = sorted(|r| r.export_us);
    let w = sorted(|r| r.nic_write_us);
    let dr = sorted(|r| r.drain_us);
    HandoffFigure {
        busy_poll,
        idle: load.idle,
        busy: load.busy,
        background: load.background,
        moves: reports.len(),
        connections: reports.iter().map(|r| r.connections as f64).sum::<f64>() / n,
        duration_us: [
            quantile(&d, 0.5),
            quantile(&d, 0.99),
            d.last().copied().unwrap_or(0.0),
        ],
        export_us: [quantile(&e, 0.5), quantile(&e, 0.99)],
        nic_write_us: [quantile(&w, 0.5), quantile(&w, 0.99)],
        drain_us: [quantile(&dr, 0.5), quantile(&dr, 0.99)],
        frames_forwarded: mean_max(|r| r.frames_forwarded),
        frames_held: mean_max(|r| r.frames_held),
        frames_scanned: mean_max(|r| r.frames_scanned),
        hold_timeouts: reports.iter().filter(|r| r.hold_timed_out).count(),
    }
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    netns::require_root("flowlane bench handoff")?;
    if args.moves == 0 {
        bail!("--moves must be at least 1");
    }
    let key = flowlane_numa_sched::toeplitz::RssKey::microsoft_default();
    let spec = BedSpec {
        name: args.bed.clone(),
        queues: 2,
        key: key.as_bytes().to_vec(),
        table: (0..128).map(|i| i % 2).collect(),
    };
    let socket = socket_path("handoff");
    let figures = with_bed("bench handoff", &spec, |bed| {
        // Only the bench's own moves: no rebalancing loop beside them.
        let extra: &[&str] = if args.busy_poll {
            &["--rebalance", "off", "--busy-poll"]
        } else {
            &["--rebalance", "off"]
        };
        let sink = Sink::start(bed, &socket, PORT, extra)?;
        let mut taken = HashSet::new();
        let mut out = Vec::new();
        for &background in &args.background {
            for &busy in &args.busy {
                for &idle in &args.idle {
                    let load = Load {
                        idle,
                        busy,
                        background,
                    };
                    let n = out.len();
                    out.push(case(bed, &sink, (n, &mut taken), load, &args)?);
                }
            }
        }
        Ok(out)
    })?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        outln!(
            "sink workers {}",
            if args.busy_poll {
                "spin when idle (--busy-poll)"
            } else {
                "sleep in poll(2) when idle"
            }
        );
        outln!("idle  busy  bgnd  moves  conns/move  move_us p50/p99/max    export_us p50/p99  nic_write_us p50/p99  drain_us p50/p99  fwd/move mean,max  held/move mean,max  scanned/move mean,max  hold_timeouts");
        for f in &figures {
            outln!(
                "{:>4}  {:>4}  {:>4}  {:>5}  {:>10.1}  {:>7.0} /{:>6.0} /{:>6.0}  {:>8.1} /{:>6.1}  {:>9.1} /{:>6.1}  {:>7.0} /{:>6.0}  {:>8.1}, {:>6.0}  {:>8.1}, {:>6.0}  {:>11.1}, {:>7.0}  {:>13}",
                f.idle,
                f.busy,
                f.background,
                f.moves,
                f.connections,
                f.duration_us[0],
                f.duration_us[1],
                f.duration_us[2],
                f.export_us[0],
                f.export_us[1],
                f.nic_write_us[0],
                f.nic_write_us[1],
                f.drain_us[0],
                f.drain_us[1],
                f.frames_forwarded[0],
                f.frames_forwarded[1],
                f.frames_held[0],
                f.frames_held[1],
                f.frames_scanned[0],
                f.frames_scanned[1],
                f.hold_timeouts
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_summarise_the_moves() {
        let r = |d: f64, fwd: u64, held: u64| MoveReport {
            connections: 100,
            duration_us: d,
            frames_forwarded: fwd,
            frames_held: held,
            ..MoveReport::default()
        };
        let load = Load {
            idle: 100,
            busy: 0,
            background: 0,
        };
        let f = figure(load, false, &[r(30.0, 0, 0), r(10.0, 4, 1), r(20.0, 2, 0)]);
        assert_eq!(f.duration_us, [20.0, 30.0, 30.0]);
        assert_eq!(f.frames_forwarded, [2.0, 4.0]);
        assert_eq!(f.frames_held, [1.0 / 3.0, 1.0]);
        assert_eq!(f.connections, 100.0);
    }
}
