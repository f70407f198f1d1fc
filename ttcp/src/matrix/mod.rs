//! The test-bed matrix: backends × connections × buffer sizes × emulated WAN
//! delay, with a progress bar, JSON results, a side-by-side table and plots.
//!
//! Each cell runs a flowlane-ttcp receiver in flowlane's namespace (10.99.0.1;
//! kernel sockets, or flowlane's TCP on AF_XDP through `--bed`) and a kernel
//! sender in the peer namespace (10.99.0.2). Delay D is `flowlane testbed
//! delay --ms D` ([`delay_line`]): a delay line on the peer device that
//! delays both directions by D (so the RTT grows by 2·D, as with the RDMA
//! paper's delay router), for both backends alike. A test bed the matrix
//! made is removed on every path (including Ctrl-C: SIGINT/SIGTERM stop the
//! matrix between cells, and a bed that `up` left half-made is removed
//! too); one that was up before is used as it was found and left so
//! (`bed`). The flowlane receiver runs with `--rebalance off` unless
//! `--rebalance auto` is asked; either way the bed's RSS table is read
//! before each of its cells and put back after it (`bed::TableBefore`), and
//! the cell records the mode, the receiver's moves and whether the table
//! was put back, so that no cell depends on the ones before.

//!
//! Files: this one runs the matrix (flags, the loop over cells, the
//! outputs); `bed` brings the bed up (and down, when the matrix made it),
//! `cell` runs one cell, [`delay_line`] its delay, `wire_frames` the
//! `kernel-wire` backend's offloads, and `failures` says why a cell failed;
//! the results are [`results::Cell`]s, shown by [`tables`] and
//! [`plots`](mod@plots).

mod bed;
mod cell;
pub mod delay_line;
mod failures;
pub mod plots;
pub mod results;
pub mod tables;
mod wire_frames;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use flowlane_apps::{out, outln};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{parse_size, MatrixArgs};
use bed::MatrixBed;
use cell::{flowlane_receives, run_delayed, CellSpec, Outcome, COOLDOWN_S};
use failures::{no_round_trip, nothing_measured};
use flowlane_dataplane::service_args::RebalanceMode;
use flowlane_dataplane::umem::RingSizes;
use plots::plots;
use results::Cell;
use tables::{latency_table, side_by_side, table};

fn list<T: std::str::FromStr>(s: &str, what: &str) -> Result<Vec<T>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| anyhow!("--{what}: {x:?} is not valid"))
        })
        .collect()
}

fn sizes(s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|x| parse_size(x).map_err(|e| anyhow!("--sizes: {e}")))
        .collect()
}

/// Today's UTC date as YYYY-MM-DD (civil-from-days, no time-zone database).
pub fn utc_date(unix_secs: u64) -> String {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The longest a matrix time may be (seconds), as for a run's -W/-t.
const MAX_SECONDS: f64 = 86_400.0;

/// The warm-up of a latency cell (seconds).
const LATENCY_WARMUP_S: f64 = 0.5;

/// The warm-up of a throughput cell at `delay_ms` each way: `--warmup`'s,
/// else 1 s, 2 s from 10 ms on (slow start needs round trips).
fn warmup_s(flag: Option<f64>, delay_ms: f64) -> f64 {
    flag.unwrap_or(if delay_ms >= 10.0 { 2.0 } else { 1.0 })
}

/// Checks the matrix's times before anything starts: `--seconds` (above
/// 0), `--warmup` (0 or more) and `--delays` (milliseconds, 0 or more), all
/// finite and at most a day; an error names the bound.
fn check_times(seconds: f64, warmup: Option<f64>, delays_ms: &[f64]) -> Result<()> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS) {
        bail!("--seconds {seconds}: give the measured seconds per cell, above 0 and at most {MAX_SECONDS}");
    }
    if let Some(w) = warmup {
        if !(w.is_finite() && (0.0..=MAX_SECONDS).contains(&w)) {
            bail!("--warmup {w}: give the warm-up seconds per cell, from 0 to {MAX_SECONDS}");
        }
    }
    if let Some(d) = delays_ms
        .iter()
        .find(|d| !(d.is_finite() && (0.0..=MAX_SECONDS * 1000.0).contains(*d)))
    {
        bail!(
            "--delays: {d} is not a one-way delay in milliseconds: give 0 to {}",
            MAX_SECONDS * 1000.0
        );
    }
    Ok(())
}

/// `--family`'s IP version (4 or 6; clap takes no other).
fn family(flag: &str) -> Result<u8> {
    match flag {
        "4" => Ok(4),
        "6" => Ok(6),
        other => bail!("--family {other}: give 4 or 6"),
    }
}

/// The bed's addresses of IP version `family`: (flowlane's side, the
/// peer's), as its state file records them.
fn addresses(bed: &flowlane_testbed::BedState, family: u8) -> (&str, &str) {
    if family == 6 {
        (&bed.local_v6, &bed.peer_v6)
    } else {
        (&bed.local_v4, &bed.peer_v4)
    }
}

/// Why the matrix stops before its next cell: the bed is no longer as the
/// cells after would be labelled (`None`: it is).
fn bed_changed(offloads_lost: bool, rss_lost: bool) -> Option<&'static str> {
    if offloads_lost {
        Some("the bed's offloads could not be given back after a kernel-wire cell")
    } else if rss_lost {
        Some("the bed's RSS table could not be read or put back after a flowlane receiver's cell")
    } else {
        None
    }
}

/// The name of a `--rebalance` mode, as the flag and results.json write it.
fn rebalance_name(mode: RebalanceMode) -> &'static str {
    match mode {
        RebalanceMode::Auto => "auto",
        RebalanceMode::Off => "off",
    }
}

/// The flowlane receiver's extra flags: `--rebalance` always given (the
/// receiver's own default is `auto` on the two-queue bed, which would move
/// buckets during the cells of a matrix that asked for none).
fn flowlane_rx_flags(mode: RebalanceMode) -> String {
    format!("--rebalance {}", rebalance_name(mode))
}

/// The failures of a finished matrix as one line (`None` when every cell
/// succeeded): throughput and latency cells counted apart, each against
/// its own number.
fn failures_line(
    cells: &[Cell],
    cells_planned: usize,
    latency: &[serde_json::Value],
    latency_planned: usize,
) -> Option<String> {
    let failed = cells.iter().filter(|c| c.error.is_some()).count();
    // A latency cell that failed fails the run too (its row says why).
    let latency_failed = latency.iter().filter(|r| r.get("error").is_some()).count();
    (failed > 0 || latency_failed > 0).then(|| {
        format!(
            "{failed} of {cells_planned} cells and {latency_failed} of {latency_planned} latency \
             cells failed (see results.json)"
        )
    })
}

/// Runs the matrix.
pub fn run(a: &MatrixArgs) -> Result<()> {
    let me = std::env::current_exe()?;
    let flowlane = a
        .flowlane
        .clone()
        .unwrap_or_else(|| me.with_file_name("flowlane"));
    if !flowlane.exists() {
        bail!(
            "{} is missing: build it (cargo build -p flowlane-control) or pass --flowlane",
            flowlane.display()
        );
    }
    let backends: Vec<String> = a
        .backends
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    for b in &backends {
        match b.as_str() {
            "kernel" | "flowlane" | wire_frames::KERNEL_WIRE => {}
            _ => bail!("--backends: unknown backend {b:?} (kernel, kernel-wire, flowlane)"),
        }
    }
    let q = a.quick;
    let conns: Vec<usize> = list(
        a.conns.as_deref().unwrap_or(if q {
            "1,16,256,1024"
        } else {
            "1,16,256,1024,10000"
        }),
        "conns",
    )?;
    if conns.contains(&0) {
        bail!("--conns: 0 connections is no cell (give counts of 1 or more)");
    }
    let bufs = sizes(
        a.sizes
            .as_deref()
            .unwrap_or(if q { "64k" } else { "1k,64k" }),
    )?;
    let roles: Vec<bool> = a
        .roles
        .as_deref()
        .unwrap_or(if q { "receiver" } else { "receiver,sender" })
        .split(',')
        .map(|r| match r.trim() {
            "receiver" => Ok(false),
            "sender" => Ok(true),
            other => Err(anyhow!(
                "--roles: unknown role {other:?} (receiver, sender)"
            )),
        })
        .collect::<Result<_>>()?;
    let lat_sizes: Vec<usize> =
        match a
            .latency_sizes
            .as_deref()
            .unwrap_or(if q { "64" } else { "64,16k" })
        {
            "none" => Vec::new(),
            l => l
                .split(',')
                .map(|x| parse_size(x).map_err(|e| anyhow!("--latency-sizes: {e}")))
                .collect::<Result<_>>()?,
        };
    let delays: Vec<f64> = list(
        a.delays
            .as_deref()
            .unwrap_or(if q { "0,1,10" } else { "0,1,10,50" }),
        "delays",
    )?;
    let secs = a.seconds.unwrap_or(if q { 2.0 } else { 3.0 });
    check_times(secs, a.warmup, &delays)?;
    let mut flowlane_flags = a
        .frames_per_queue
        .map(|n| format!("--frames-per-queue {n}"))
        .unwrap_or_default();
    if a.copy_receive {
        flowlane_flags = format!("{flowlane_flags} --copy-receive")
            .trim()
            .to_string();
    }
    let rebalance = rebalance_name(a.rebalance);
    let flowlane_rx_flags = flowlane_rx_flags(a.rebalance);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(utc_date(now.as_secs())));

    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;

    let name = a
        .bed
        .clone()
        .unwrap_or_else(|| format!("ttm{}", std::process::id()));
    let bed = MatrixBed::up(
        &flowlane,
        &name,
        backends.iter().any(|b| b == wire_frames::KERNEL_WIRE),
    )?;
    let (ns, peer_ns) = (bed.state().netns.clone(), bed.state().peer_netns.clone());
    let family = family(&a.family)?;
    let (local, peer) = addresses(bed.state(), family);
    // Made once the run starts: a matrix that refuses to run leaves none.
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let cells_planned = roles.len() * conns.len() * bufs.len() * backends.len() * delays.len();
    let latency_planned = lat_sizes.len() * backends.len() * delays.len();
    let total = cells_planned + latency_planned;
    // Set when the bed's offloads could not be given back: the cells after
    // would run without them, labelled as with them, so none runs.
    let mut offloads_lost = false;
    // Set when the bed's RSS table could not be read or put back after a
    // flowlane receiver's cell: the cells after would run on another one.
    let mut rss_lost = false;
    let mut latency: Vec<serde_json::Value> = Vec::new();
    let pb = ProgressBar::new(total as u64);
    pb.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("progress template"),
    );
    let mut cells = Vec::new();
    'all: for &d in &delays {
        for &sends in &roles {
            for b in &backends {
                for &buf in &bufs {
                    for &c in &conns {
                        if stop.load(Ordering::Relaxed) {
                            pb.abandon_with_message("interrupted");
                            break 'all;
                        }
                        let role = if sends { "sender" } else { "receiver" };
                        pb.set_message(format!("{b} {role} conns={c} buf={buf} delay={d}ms"));
                        let warm = warmup_s(a.warmup, d);
                        let spec = CellSpec {
                            me: &me,
                            bed: &name,
                            ns: &ns,
                            peer_ns: &peer_ns,
                            local,
                            peer,
                            backend: b,
                            sends,
                            conns: c,
                            buffer: buf,
                            secs,
                            warm,
                            mode: String::new(),
                            flowlane_flags: &flowlane_flags,
                            flowlane_rx_flags: &flowlane_rx_flags,
                        };
                        let receives = flowlane_receives(&spec);
                        let Outcome {
                            run: r,
                            line_report,
                            offloads_lost: lost,
                            rss_table_put_back,
                            rss_table_lost: table_lost,
                        } = run_delayed(&flowlane, &name, d, &spec);
                        offloads_lost |= lost;
                        rss_lost |= table_lost;
                        let rtt_added_ms = line_report.as_ref().and_then(|l| {
                            Some(2.0 * (d + l.get("mean_late_us")?.as_f64()? / 1000.0))
                        });
                        let mut cell = Cell {
                            backend: b.clone(),
                            role: role.into(),
                            connections: c,
                            buffer: buf,
                            delay_ms: d,
                            rtt_added_ms,
                            delay_line: line_report,
                            mbit_s: None,
                            cycles_per_byte_system: None,
                            cycles_per_byte_receiver: None,
                            cycles_per_byte_receiver_threads: None,
                            cycles_per_byte_sender: None,
                            cycles_per_byte_sender_threads: None,
                            pct_one_cpu_per_gbit_system: None,
                            retrans_sender: None,
                            rebalance: receives.then(|| rebalance.into()),
                            rss_moves: None,
                            rss_table_put_back,
                            error: None,
                            receiver: None,
                            sender: None,
                        };
                        match r {
                            Ok(run) => {
                                let (rx, tx) = (run.rx, run.tx);
                                let g = |v: &serde_json::Value, k: &str| {
                                    v.get(k).and_then(|x| x.as_f64())
                                };
                                cell.mbit_s = g(&rx, "throughput_mbit_s");
                                cell.cycles_per_byte_system = g(&rx, "cycles_per_byte_system");
                                cell.cycles_per_byte_receiver = g(&rx, "cycles_per_byte_process");
                                cell.cycles_per_byte_receiver_threads =
                                    g(&rx, "cycles_per_byte_data_threads");
                                cell.cycles_per_byte_sender = g(&tx, "cycles_per_byte_process");
                                cell.cycles_per_byte_sender_threads =
                                    g(&tx, "cycles_per_byte_data_threads");
                                cell.pct_one_cpu_per_gbit_system =
                                    g(&rx, "pct_one_cpu_per_gbit_system");
                                cell.retrans_sender = run.sender_retrans;
                                cell.rss_moves = receives.then_some(run.rx_moves);
                                if let Some(e) = nothing_measured(&rx) {
                                    pb.println(format!(
                                        "{b} {role} conns={c} buf={buf} delay={d}ms: {e}"
                                    ));
                                    cell.error = Some(e);
                                }
                                cell.receiver = Some(rx);
                                cell.sender = Some(tx);
                            }
                            Err(e) => {
                                pb.println(format!(
                                    "{b} {role} conns={c} buf={buf} delay={d}ms: {e:#}"
                                ));
                                cell.error = Some(format!("{e:#}"));
                            }
                        }
                        cells.push(cell);
                        pb.inc(1);
                        if let Some(why) = bed_changed(offloads_lost, rss_lost) {
                            pb.abandon_with_message(format!("stopped: {why}"));
                            break 'all;
                        }
                    }
                }
            }
        }
        for b in &backends {
            for &size in &lat_sizes {
                if stop.load(Ordering::Relaxed) {
                    pb.abandon_with_message("interrupted");
                    break 'all;
                }
                pb.set_message(format!("{b} latency msg={size} delay={d}ms"));
                let spec = CellSpec {
                    me: &me,
                    bed: &name,
                    ns: &ns,
                    peer_ns: &peer_ns,
                    local,
                    peer,
                    backend: b,
                    sends: false,
                    conns: 1,
                    buffer: size.max(1024),
                    secs,
                    warm: LATENCY_WARMUP_S,
                    mode: format!("--latency --msg-size {size}"),
                    flowlane_flags: &flowlane_flags,
                    flowlane_rx_flags: &flowlane_rx_flags,
                };
                let receives = flowlane_receives(&spec);
                let outcome = run_delayed(&flowlane, &name, d, &spec);
                offloads_lost |= outcome.offloads_lost;
                rss_lost |= outcome.rss_table_lost;
                let mut row = serde_json::json!({
                    "backend": b, "role": "receiver (echo)", "msg_size": size, "delay_ms": d,
                });
                if receives {
                    row["rebalance"] = rebalance.into();
                    row["rss_table_put_back"] = outcome.rss_table_put_back.into();
                }
                let error = match outcome.run {
                    Ok(run) => {
                        row["latency"] = run.tx["latency"].clone();
                        if receives {
                            row["rss_moves"] = run.rx_moves.into();
                        }
                        no_round_trip(&row["latency"])
                    }
                    Err(e) => Some(format!("{e:#}")),
                };
                if let Some(e) = error {
                    pb.println(format!("{b} latency msg={size} delay={d}ms: {e}"));
                    row["error"] = serde_json::json!(e);
                }
                latency.push(row);
                pb.inc(1);
                if let Some(why) = bed_changed(offloads_lost, rss_lost) {
                    pb.abandon_with_message(format!("stopped: {why}"));
                    break 'all;
                }
            }
        }
    }
    if !pb.is_finished() {
        pb.finish_with_message("done");
    }
    let st = bed.state();
    let params = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "quick": q, "backends": backends, "connections": conns, "buffers": bufs,
        "delays_ms_one_way": delays, "delay": format!("flowlane testbed delay (user-space delay line on {}, both directions; RTT + 2 x delay)", st.peer_if), "seconds": secs, "cooldown_s": COOLDOWN_S,
        "warmup_s": delays.iter().map(|&d| serde_json::json!({"delay_ms": d, "warmup_s": warmup_s(a.warmup, d)})).collect::<Vec<_>>(),
        "latency_warmup_s": LATENCY_WARMUP_S,
        "roles": roles.iter().map(|&s| if s { "sender" } else { "receiver" }).collect::<Vec<_>>(),
        "family": family,
        "peer": format!("kernel backend in the peer namespace ({peer}); the backend named runs in flowlane's ({local})"),
        "bed": {"name": st.name, "made_by_matrix": bed.made(), "queues": st.queues, "mtu": bed.mtu(), "receiver": format!("{local} ({})", st.local_if), "sender": format!("{peer} ({})", st.peer_if)},
        "flowlane_frames_per_queue": a.frames_per_queue.unwrap_or(RingSizes::DEFAULT_FRAMES),
        "flowlane_receive": if a.copy_receive { "copy" } else { "zero-copy" },
        "flowlane_rebalance": rebalance,
    });
    let json = serde_json::json!({"params": params, "cells": cells, "latency": latency});
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    let sbs = side_by_side(&cells);
    let lat = latency_table(&latency);
    let table = format!("{sbs}\nLatency (ping-pong, tested backend echoing, kernel sender measuring):\n\n{lat}\nAll cells:\n\n{}", table(&cells));
    std::fs::write(out.join("table.md"), &table)?;
    // A closed pipe (`| head`) drops the lines: the outputs are written.
    out!("{sbs}");
    if !latency.is_empty() {
        out!("\n{lat}");
    }
    match plots(&cells, &out) {
        Ok(files) => outln!("plots: {}", files.join(", ")),
        Err(e) => outln!("plots skipped: {e:#}"),
    }
    outln!("results: {}", out.join("results.json").display());
    let ran = cells.len() + latency.len();
    if let Some(why) = bed_changed(offloads_lost, rss_lost) {
        bail!("stopped after {ran} of {total} cells: {why} (see its error in results.json)");
    }
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted after {ran} of {total} cells");
    }
    if let Some(f) = failures_line(&cells, cells_planned, &latency, latency_planned) {
        bail!(f);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warmup_is_the_flags_or_longer_with_delay() {
        assert_eq!(warmup_s(None, 0.0), 1.0);
        assert_eq!(warmup_s(None, 10.0), 2.0);
        assert_eq!(warmup_s(Some(0.3), 50.0), 0.3);
    }

    /// The flowlane receiver runs with `--rebalance off` unless the matrix
    /// is asked otherwise: its own default (`auto` on the bed) never
    /// applies.
    #[test]
    fn the_flowlane_receiver_moves_no_bucket_unless_asked() {
        use clap::Parser;
        let matrix = |extra: &[&str]| {
            let mut a = vec!["flowlane-ttcp", "matrix"];
            a.extend_from_slice(extra);
            match crate::cli::Cli::try_parse_from(a).unwrap().cmd {
                Some(crate::cli::Sub::Matrix(m)) => m,
                None => panic!("no matrix"),
            }
        };
        assert_eq!(flowlane_rx_flags(matrix(&[]).rebalance), "--rebalance off");
        assert_eq!(
            flowlane_rx_flags(matrix(&["--rebalance", "auto"]).rebalance),
            "--rebalance auto"
        );
        assert_eq!(rebalance_name(matrix(&[]).rebalance), "off");
    }

    /// `--family 6` runs the cells between the bed's IPv6 addresses, as
    /// its state file records them; 4 (the default) between its IPv4 ones;
    /// no other is taken.
    #[test]
    fn the_family_picks_the_beds_addresses_of_that_version() {
        use clap::Parser;
        let bed: flowlane_testbed::BedState = serde_json::from_str(
            r#"{"name":"b","netns":"flowlane-b","peer_netns":"flowlane-b-peer","local_if":"xsk0",
               "peer_if":"peer0","queues":2,"local_v4":"10.98.0.1","peer_v4":"10.98.0.2",
               "local_v6":"fd98::1","peer_v6":"fd98::2",
               "local_mac":"02:00:00:00:00:01","peer_mac":"02:00:00:00:00:02","pin_dir":"/x"}"#,
        )
        .unwrap();
        let matrix = |extra: &[&str]| {
            let mut a = vec!["flowlane-ttcp", "matrix"];
            a.extend_from_slice(extra);
            crate::cli::Cli::try_parse_from(a).map(|c| match c.cmd {
                Some(crate::cli::Sub::Matrix(m)) => family(&m.family).unwrap(),
                None => panic!("no matrix"),
            })
        };
        assert_eq!(matrix(&[]).unwrap(), 4);
        assert_eq!(addresses(&bed, 4), ("10.98.0.1", "10.98.0.2"));
        assert_eq!(matrix(&["--family", "6"]).unwrap(), 6);
        assert_eq!(addresses(&bed, 6), ("fd98::1", "fd98::2"));
        assert!(matrix(&["--family", "5"]).is_err());
    }

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_767_225_599), "2025-12-31");
    }

    #[test]
    fn times_are_checked_before_anything_starts() {
        check_times(2.0, None, &[0.0, 1.5]).unwrap();
        check_times(2.0, Some(0.0), &[]).unwrap();
        for (secs, warm, delays, want) in [
            (f64::NAN, None, vec![], "--seconds NaN"),
            (-1.0, None, vec![], "--seconds -1"),
            (0.0, None, vec![], "--seconds 0"),
            (f64::INFINITY, None, vec![], "--seconds inf"),
            (2.0, Some(-0.5), vec![], "--warmup -0.5"),
            (2.0, Some(f64::NAN), vec![], "--warmup NaN"),
            (2.0, Some(1e300), vec![], "--warmup 1"),
            (2.0, None, vec![0.0, -1.0], "--delays: -1"),
            (2.0, None, vec![f64::NAN], "--delays: NaN"),
            (
                2.0,
                None,
                vec![99_999_999.0],
                "--delays: 99999999 is not a one-way delay in milliseconds: give 0 to 86400000",
            ),
        ] {
            let e = check_times(secs, warm, &delays).unwrap_err().to_string();
            assert!(e.starts_with(want), "{want}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn failures_count_cells_and_latency_cells_apart() {
        let ok = results::test_cell(1, 0.0, 100.0);
        let mut failed = ok.clone();
        failed.error = Some("receiver: gave up".into());
        let lat_ok = serde_json::json!({"latency": {"round_trips": 3}});
        let lat_failed = serde_json::json!({"error": "no round trip finished"});
        assert_eq!(
            failures_line(
                std::slice::from_ref(&ok),
                1,
                std::slice::from_ref(&lat_ok),
                1
            ),
            None
        );
        assert_eq!(
            failures_line(&[ok, failed], 2, &[lat_ok, lat_failed], 2).as_deref(),
            Some("1 of 2 cells and 1 of 2 latency cells failed (see results.json)")
        );
    }
}
