//! `flowlane rebalance status|move`: a running TCP service's queues and RSS
//! buckets, and moving one bucket with its live connections by hand, over
//! the service's control socket (`flowlane_dataplane::control_socket`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use flowlane_dataplane::control_socket::{
    self, MoveCostStatus, QueueStatus, Request, Response, ServiceStatus, RUN_DIR,
};
use flowlane_dataplane::MoveReport;

/// How long a service may take to answer (a move waits on both workers).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// `flowlane rebalance ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum RebalanceCmd {
    /// Each queue's load (busy %, segments/s over the interval), its
    /// busiest RSS buckets, the table and the last moves.
    Status {
        #[command(flatten)]
        target: Target,
        /// Load measured over this many milliseconds (0: since the
        /// service started).
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Print the service's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move an RSS bucket, with its live connections, to another queue.
    Move {
        #[command(flatten)]
        target: Target,
        /// The bucket (indirection-table entry).
        #[arg(long)]
        bucket: u16,
        /// The queue to serve it.
        #[arg(long = "to-queue")]
        to_queue: u32,
    },
}

/// Which service.
#[derive(Args, Debug)]
pub(crate) struct Target {
    /// The service's control socket (default: the only live one in
    /// /run/flowlane).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

impl Target {
    fn path(&self) -> Result<PathBuf> {
        if let Some(p) = &self.socket {
            return Ok(p.clone());
        }
        let live = control_socket::live_sockets(Path::new(RUN_DIR));
        match live.as_slice() {
            [one] => Ok(one.clone()),
            [] => bail!(
                "no flowlane service is running here (no live control socket in {RUN_DIR}): start one, or give --socket PATH"
            ),
            many => bail!(
                "{} services are running; choose one with --socket: {}",
                many.len(),
                many.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

fn ask(path: &Path, request: &Request) -> Result<Response> {
    match control_socket::request(path, request, ANSWER_TIMEOUT)? {
        Response::Error { message } => bail!("{message}"),
        r => Ok(r),
    }
}

pub(crate) fn status(path: &Path) -> Result<ServiceStatus> {
    match ask(path, &Request::Status)? {
        Response::Status(s) => Ok(*s),
        other => bail!("the service answered {other:?} to a status request"),
    }
}

/// Runs `flowlane rebalance ...`.
pub(crate) fn run(cmd: RebalanceCmd) -> Result<()> {
    match cmd {
        RebalanceCmd::Status {
            target,
            interval_ms,
            json,
        } => {
            let path = target.path()?;
            let first = (interval_ms > 0).then(|| status(&path)).transpose()?;
            if first.is_some() {
                std::thread::sleep(Duration::from_millis(interval_ms));
            }
            let now = status(&path)?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&now)?);
            } else {
                out!("{}", render(first.as_ref(), &now));
            }
            Ok(())
        }
        RebalanceCmd::Move {
            target,
            bucket,
            to_queue,
        } => {
            let path = target.path()?;
            match ask(&path, &Request::Move { bucket, to_queue })? {
                Response::Moved(r) => {
                    outln!("{}", serde_json::to_string(&r)?);
                    Ok(())
                }
                other => bail!("the service answered {other:?} to a move"),
            }
        }
    }
}

/// The status screen: load over the interval between `before` and `now`
/// (since the start without `before`).
fn render(before: Option<&ServiceStatus>, now: &ServiceStatus) -> String {
    let span_ns = before.map_or(now.uptime_ns, |b| now.uptime_ns.saturating_sub(b.uptime_ns));
    let secs = span_ns.max(1) as f64 / 1e9;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} (pid {}) on {}: {}, rebalance {}{}, up {:.1} s; load over the last {:.2} s",
        now.service,
        now.pid,
        now.iface,
        now.shape(),
        now.rebalance,
        now.rebalance_off_because
            .as_deref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default(),
        now.uptime_ns as f64 / 1e9,
        secs
    );
    let _ = writeln!(
        s,
        "{:>6} {:>4} {:>4} {:>6} {:>10} {:>6} {:>7}  busiest buckets (busy %, segments/s, connections)",
        row_label(now),
        "cpu",
        "node",
        "busy%",
        "segs/s",
        "conns",
        "buckets"
    );
    for q in &now.queues {
        let prev = before.and_then(|b| b.queues.iter().find(|p| p.queue == q.queue));
        let busy = q.busy_ns.saturating_sub(prev.map_or(0, |p| p.busy_ns));
        let segs = q
            .segments_in
            .saturating_sub(prev.map_or(0, |p| p.segments_in));
        let served = served_buckets(q, &now.table);
        let mut rates: Vec<(u16, f64, u64, f64)> = served
            .iter()
            .map(|b| {
                let was = prev.and_then(|p| p.buckets.iter().find(|x| x.bucket == b.bucket));
                (
                    b.bucket,
                    b.segments_in
                        .saturating_sub(was.map_or(0, |x| x.segments_in))
                        as f64
                        / secs,
                    b.connections,
                    busy_percent(
                        b.busy_ns.saturating_sub(was.map_or(0, |x| x.busy_ns)),
                        span_ns,
                    ),
                )
            })
            .collect();
        rates.sort_by(|a, b| {
            b.3.total_cmp(&a.3)
                .then(b.1.total_cmp(&a.1))
                .then(b.2.cmp(&a.2))
        });
        let top: Vec<String> = rates
            .iter()
            .take(4)
            .filter(|r| r.1 > 0.0 || r.2 > 0)
            .map(|(b, r, c, busy)| format!("b{b} {busy:.0}% {r:.0}/s {c}c"))
            .collect();
        let _ = writeln!(
            s,
            "{:>6} {:>4} {:>4} {:>6.1} {:>10.0} {:>6} {:>7}  {}",
            q.queue,
            q.cpu.map_or("-".into(), |c| c.to_string()),
            q.node,
            busy_percent(busy, span_ns),
            segs as f64 / secs,
            q.connections,
            table_share(&now.table, q.queue),
            top.join(", ")
        );
    }
    for q in &now.queues {
        if let Some(carrier) = q.carrier {
            let _ = writeln!(
                s,
                "worker {} has no queue of its own: the queues' workers forward it its buckets' frames, and it sends through queue {carrier}",
                q.queue
            );
        }
    }
    if now.table.is_empty() {
        let why = if now.backend == "kernel" {
            "kernel sockets have no RSS buckets: buckets move on --backend xdp"
        } else {
            "one queue, or the NIC's RSS unknown"
        };
        let _ = writeln!(s, "buckets cannot move in this service ({why})");
    }
    let m = &now.moves;
    let _ = write!(s, "moves: {} done, {} failed", m.done, m.failed);
    if m.landed_with_error > 0 {
        let _ = write!(
            s,
            ", {} moved their bucket but reported an error",
            m.landed_with_error
        );
    }
    let _ = writeln!(s);
    if let Some(c) = &now.move_cost {
        let _ = writeln!(s, "{}", price_line(c));
    }
    for r in m.recent.iter().rev().take(5) {
        let _ = writeln!(s, "  {}", move_summary(r));
    }
    s
}

/// What the rebalancing loop prices a move at now: its fixed part, its
/// part a connection, and the moves it was learned from (none: the
/// configured prior; or the configured price, `--move-cost fixed`), and
/// the moves the policy refused for their price. `flowlane rebalance
/// status` and `flowlane status` both say it so.
pub(crate) fn price_line(c: &MoveCostStatus) -> String {
    let learned = match c.fit_moves {
        _ if c.fixed_price => "the configured price, --move-cost fixed".to_string(),
        0 => "the configured prior, no move made yet".to_string(),
        1 => "learned from the latest move".to_string(),
        n => format!("learned from the latest {n} moves"),
    };
    format!(
        "a move is priced at {} + {} a connection ({learned}); {} refused for {} price",
        duration_text(c.fixed_ns),
        duration_text(c.per_connection_ns),
        match c.refused_for_cost {
            1 => "1 move".to_string(),
            n => format!("{n} moves"),
        },
        if c.refused_for_cost == 1 {
            "its"
        } else {
            "their"
        }
    )
}

/// `ns` in the unit that reads best: 850 ns, 20.0 us, 9.86 ms.
fn duration_text(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

/// What a row of the status screen stands for: a queue (and its worker),
/// a worker (software spill: some have no queue) or a core (kernel
/// sockets).
fn row_label(s: &ServiceStatus) -> &'static str {
    if s.backend == "kernel" {
        "core"
    } else if s.queues.iter().any(|q| q.carrier.is_some()) {
        "worker"
    } else {
        "queue"
    }
}

/// `busy_ns` of an interval `span_ns` long, in percent, at most 100: a
/// worker counts a pass's busy time when the pass ends, so a pass that
/// began before the interval counts whole in it (and the service reads
/// its clock for the interval's ends when it answers, not when its
/// workers last counted).
fn busy_percent(busy_ns: u64, span_ns: u64) -> f64 {
    (100.0 * busy_ns as f64 / span_ns.max(1) as f64).min(100.0)
}

/// The buckets of `q` that the table gives it now (all it counted when the
/// table is unknown).
fn served_buckets<'a>(
    q: &'a QueueStatus,
    table: &[u32],
) -> Vec<&'a flowlane_dataplane::BucketSnapshot> {
    q.buckets
        .iter()
        .filter(|b| table.is_empty() || table.get(usize::from(b.bucket)) == Some(&q.queue))
        .collect()
}

/// How many table entries point at `queue` (`-` without a table).
fn table_share(table: &[u32], queue: u32) -> String {
    if table.is_empty() {
        return "-".into();
    }
    table.iter().filter(|&&q| q == queue).count().to_string()
}

/// One move in a line.
fn move_summary(r: &MoveReport) -> String {
    format!(
        "bucket {} queue {} -> {}: {} connections{}, {} TIME-WAIT, {} frames forwarded, {} held, {:.0} us{}",
        r.bucket,
        r.from,
        r.to,
        r.connections,
        if r.connections_refused > 0 {
            format!(" ({} refused by queue {})", r.connections_refused, r.to)
        } else {
            String::new()
        },
        r.time_wait,
        r.frames_forwarded,
        r.frames_held,
        r.duration_us,
        if r.hold_timed_out { " (hold timed out)" } else { "" }
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flowlane_dataplane::control_socket::{MoveCause, MoveHistory};
    use flowlane_dataplane::BucketSnapshot;

    /// Buckets as (bucket, segments, connections, busy ns).
    fn queue(queue: u32, busy_ns: u64, segs: u64, buckets: &[(u16, u64, u64, u64)]) -> QueueStatus {
        QueueStatus {
            queue,
            cpu: Some(queue),
            node: 0,
            busy_ns,
            segments_in: segs,
            connections: buckets.iter().map(|b| b.2).sum(),
            carrier: None,
            buckets: buckets
                .iter()
                .map(
                    |&(bucket, segments_in, connections, busy_ns)| BucketSnapshot {
                        bucket,
                        segments_in,
                        connections,
                        busy_ns,
                        ..BucketSnapshot::default()
                    },
                )
                .collect(),
        }
    }

    pub(crate) fn status(
        uptime_s: u64,
        queues: Vec<QueueStatus>,
        moves: MoveHistory,
    ) -> ServiceStatus {
        ServiceStatus {
            service: "bulk-sink".into(),
            pid: 42,
            uptime_ns: uptime_s * 1_000_000_000,
            backend: "xdp".into(),
            iface: "xsk0".into(),
            rebalance: "off".into(),
            rebalance_off_because: None,
            table: vec![0, 0, 0, 1],
            queues,
            moves,
            stopping: false,
            move_cost: None,
        }
    }

    #[test]
    fn load_is_shown_over_the_interval_and_only_for_buckets_served() {
        let before = status(
            10,
            vec![
                queue(0, 1_000_000_000, 1000, &[(0, 500, 2, 0), (3, 500, 1, 0)]),
                queue(1, 0, 0, &[]),
            ],
            MoveHistory::default(),
        );
        let mut moves = MoveHistory::default();
        moves.record(
            MoveCause::Manual,
            &Ok(MoveReport {
                bucket: 3,
                from: 0,
                to: 1,
                connections: 1,
                frames_forwarded: 7,
                frames_held: 2,
                duration_us: 250.0,
                ..MoveReport::default()
            }),
            true,
        );
        let now = status(
            12,
            vec![
                // Queue 0 was busy 1.5 of the 2 s; bucket 3 is on queue 1 now.
                queue(
                    0,
                    2_500_000_000,
                    3000,
                    &[(0, 2500, 2, 1_000_000_000), (3, 500, 0, 0)],
                ),
                queue(1, 500_000_000, 400, &[(3, 400, 1, 0)]),
            ],
            moves,
        );
        let text = render(Some(&before), &now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("load over the last 2.00 s"), "{text}");
        let q0: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            &q0[..7],
            ["0", "0", "0", "75.0", "1000", "2", "3"],
            "{text}"
        );
        assert!(
            lines[2].contains("b0 50% 1000/s 2c") && !lines[2].contains("b3"),
            "{text}"
        );
        let q1: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(&q1[..7], ["1", "1", "0", "25.0", "200", "1", "1"], "{text}");
        assert!(text.contains("moves: 1 done, 0 failed"), "{text}");
        assert!(
            text.contains("bucket 3 queue 0 -> 1: 1 connections, 0 TIME-WAIT, 7 frames forwarded, 2 held, 250 us"),
            "{text}"
        );
    }

    /// A pass that began before the interval counts whole in it: the
    /// busy time may exceed the interval a little, and reads 100 %, not
    /// more (100.5 % was seen), for the worker and for its buckets.
    #[test]
    fn busy_time_reads_at_most_the_whole_interval() {
        let before = status(
            10,
            vec![queue(0, 0, 0, &[(0, 0, 1, 0)]), queue(1, 0, 0, &[])],
            MoveHistory::default(),
        );
        let over = 1_010_000_000;
        let now = status(
            11,
            vec![
                queue(0, over, 100, &[(0, 100, 1, over)]),
                queue(1, 0, 0, &[]),
            ],
            MoveHistory::default(),
        );
        let text = render(Some(&before), &now);
        let q0: Vec<&str> = text.lines().nth(2).unwrap().split_whitespace().collect();
        assert_eq!(q0[3], "100.0", "{text}");
        assert!(text.contains("b0 100% 100/s 1c"), "{text}");
        assert_eq!(busy_percent(500, 1000), 50.0);
        assert_eq!(busy_percent(1005, 1000), 100.0);
    }

    /// The learned move price is shown where a loop runs (fixed part, part
    /// a connection, moves it was learned from), and not otherwise.
    #[test]
    fn the_learned_move_price_is_shown() {
        let mut s = status(1, vec![queue(0, 0, 0, &[])], MoveHistory::default());
        assert!(!render(None, &s).contains("priced"), "{}", render(None, &s));
        s.move_cost = Some(MoveCostStatus {
            fixed_ns: 9_860_000,
            per_connection_ns: 2_000,
            fit_moves: 12,
            refused_for_cost: 3,
            ..MoveCostStatus::default()
        });
        let text = render(None, &s);
        assert!(
            text.contains("a move is priced at 9.86 ms + 2.0 us a connection (learned from the latest 12 moves); 3 moves refused for their price"),
            "{text}"
        );
        s.move_cost = Some(MoveCostStatus {
            fixed_ns: 20_000,
            per_connection_ns: 850,
            fit_moves: 0,
            ..MoveCostStatus::default()
        });
        let text = render(None, &s);
        assert!(
            text.contains("a move is priced at 20.0 us + 850 ns a connection (the configured prior, no move made yet); 0 moves refused for their price"),
            "{text}"
        );
        s.move_cost = Some(MoveCostStatus {
            fixed_ns: 20_000,
            per_connection_ns: 2_000,
            fit_moves: 0,
            fixed_price: true,
            refused_for_cost: 1,
        });
        let text = render(None, &s);
        assert!(
            text.contains("a move is priced at 20.0 us + 2.0 us a connection (the configured price, --move-cost fixed); 1 move refused for its price"),
            "{text}"
        );
    }

    #[test]
    fn a_loop_off_by_itself_says_why() {
        let mut s = status(1, vec![queue(0, 0, 0, &[])], MoveHistory::default());
        assert!(
            render(None, &s).contains("rebalance off, up"),
            "{}",
            render(None, &s)
        );
        s.rebalance_off_because = Some("one queue".into());
        let text = render(None, &s);
        assert!(text.contains("rebalance off (one queue), up"), "{text}");
    }

    /// A service with more workers than queues (software spill) is said
    /// to run so many workers on so many queues, its rows are workers,
    /// and each worker without a queue says which queue it sends through.
    #[test]
    fn workers_without_a_queue_are_not_counted_as_queues() {
        let mut spill = queue(2, 0, 0, &[]);
        spill.carrier = Some(0);
        let s = status(
            1,
            vec![queue(0, 0, 0, &[]), queue(1, 0, 0, &[]), spill],
            MoveHistory::default(),
        );
        let text = render(None, &s);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("on xsk0: 3 workers on 2 queues (software spill), rebalance off"),
            "{text}"
        );
        assert!(!text.contains("3 queues"), "{text}");
        assert_eq!(lines[1].split_whitespace().next(), Some("worker"), "{text}");
        assert!(
            text.contains("worker 2 has no queue of its own: the queues' workers forward it its buckets' frames, and it sends through queue 0"),
            "{text}"
        );
        // A worker per queue: queues; a kernel-socket service: cores.
        let mut s = status(
            1,
            vec![queue(0, 0, 0, &[]), queue(1, 0, 0, &[])],
            MoveHistory::default(),
        );
        let text = render(None, &s);
        assert!(text.contains("on xsk0: 2 queues, rebalance"), "{text}");
        assert_eq!(
            text.lines().nth(1).unwrap().split_whitespace().next(),
            Some("queue")
        );
        s.backend = "kernel".into();
        let text = render(None, &s);
        assert!(text.contains("on xsk0: 2 cores, rebalance"), "{text}");
        assert_eq!(
            text.lines().nth(1).unwrap().split_whitespace().next(),
            Some("core")
        );
    }

    /// Why buckets cannot move is the service's: a kernel-socket service
    /// has none (not one queue, nor an unknown RSS).
    #[test]
    fn why_buckets_cannot_move_is_the_backend_s() {
        let mut s = status(1, vec![queue(0, 0, 0, &[])], MoveHistory::default());
        s.table.clear();
        let text = render(None, &s);
        assert!(
            text.contains(
                "buckets cannot move in this service (one queue, or the NIC's RSS unknown)"
            ),
            "{text}"
        );
        s.backend = "kernel".into();
        s.iface = "*".into();
        let text = render(None, &s);
        assert!(
            text.contains("buckets cannot move in this service (kernel sockets have no RSS buckets: buckets move on --backend xdp)"),
            "{text}"
        );
    }
}
