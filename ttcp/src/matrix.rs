//! The test-bed matrix: backends × connections × buffer sizes × emulated WAN
//! delay, with a progress bar, JSON results, a side-by-side table and plots.
//!
//! Each cell runs a flowlane-ttcp receiver in flowlane's namespace (10.99.0.1;
//! kernel sockets, or flowlane's TCP on AF_XDP through `--bed`) and a kernel
//! sender in the peer namespace (10.99.0.2). Delay D is `flowlane testbed
//! delay --ms D` ([`crate::delay_line`]): a delay line on the peer device that
//! delays both directions by D (so the RTT grows by 2·D, as with the RDMA
//! paper's delay router), for both backends alike. The test bed is removed on
//! every path (including Ctrl-C: SIGINT/SIGTERM stop the matrix between cells).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::delay_line::DelayLine;
use serde::Serialize;

/// Matrix flags.
#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// Short variant: connections 1,16,256,1024; 64k buffers; delay 0,1,10 ms;
    /// the backends as receivers only; 2 s windows.
    #[arg(long)]
    pub quick: bool,
    /// Backends (comma-separated) of the receiver: `kernel` (Linux TCP) and
    /// `flowlane` (flowlane's TCP on AF_XDP, one worker per queue). The
    /// sender is always the kernel backend in the peer namespace.
    #[arg(long, default_value = "kernel,flowlane")]
    pub backends: String,
    /// Roles of the backend under test (comma-separated): `receiver` (the
    /// peer namespace sends with kernel TCP) and `sender` (the peer
    /// namespace receives with kernel TCP). Default: receiver,sender
    /// (quick: receiver).
    #[arg(long)]
    pub roles: Option<String>,
    /// Connection counts (default 1,16,256,1024,10000).
    #[arg(long)]
    pub conns: Option<String>,
    /// Buffer (message) sizes per write (default 1k,64k).
    #[arg(long)]
    pub sizes: Option<String>,
    /// One-way delays in ms, added in each direction by the test bed's delay
    /// line (default 0,1,10,50; the RTT grows by twice each).
    #[arg(long)]
    pub delays: Option<String>,
    /// Latency cells: ping-pong message sizes (comma-separated) with the
    /// tested backend echoing (one connection, kernel sender measuring), at
    /// every delay. Default 64,16k (quick: 64); `none` skips them.
    #[arg(long)]
    pub latency_sizes: Option<String>,
    /// Measured seconds per cell (default 3; quick 2).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Warm-up seconds per cell (default 1; 2 when delay >= 10 ms).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Output folder (default results/<UTC date>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The `flowlane` binary (test bed); default: beside this binary.
    #[arg(long)]
    pub flowlane: Option<PathBuf>,
    /// Test bed name.
    #[arg(long)]
    pub bed: Option<String>,
}

/// One cell's result.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Backend under test.
    pub backend: String,
    /// Its role: `receiver` or `sender` (the other end is kernel TCP).
    pub role: String,
    /// Connections.
    pub connections: usize,
    /// Buffer size per write/read.
    pub buffer: usize,
    /// One-way delay added in each direction (ms).
    pub delay_ms: f64,
    /// Round-trip time the delay line really added (ms): twice the delay
    /// plus twice its mean lateness.
    pub rtt_added_ms: Option<f64>,
    /// The delay line's report (frames, drops, lateness).
    pub delay_line: Option<serde_json::Value>,
    /// Receiver throughput (Mbit/s).
    pub mbit_s: Option<f64>,
    /// System-wide cycles per byte (receiver's window).
    pub cycles_per_byte_system: Option<f64>,
    /// Receiver process cycles per byte.
    pub cycles_per_byte_receiver: Option<f64>,
    /// Receiver data threads' cycles per byte (flowlane: its workers; kernel:
    /// the event-loop threads, without the kernel's softirq work).
    pub cycles_per_byte_receiver_threads: Option<f64>,
    /// Sender process cycles per byte.
    pub cycles_per_byte_sender: Option<f64>,
    /// Sender data threads' cycles per byte.
    pub cycles_per_byte_sender_threads: Option<f64>,
    /// System % of one CPU per Gbit/s.
    pub pct_one_cpu_per_gbit_system: Option<f64>,
    /// Segments the sender retransmitted: its namespace's counter for
    /// kernel TCP, flowlane's own counters for flowlane.
    pub retrans_sender: Option<u64>,
    /// Error, when the cell failed.
    pub error: Option<String>,
    /// Receiver report.
    pub receiver: Option<serde_json::Value>,
    /// Sender report.
    pub sender: Option<serde_json::Value>,
}

impl Cell {
    /// Cycles per byte of the tested backend's data threads (its workers or
    /// event loops), whichever role it had.
    pub fn tested_threads_cycles_per_byte(&self) -> Option<f64> {
        if self.role == "sender" {
            self.cycles_per_byte_sender_threads
        } else {
            self.cycles_per_byte_receiver_threads
        }
    }

    /// The name tables and plots give the cell's series: the backend when it
    /// receives, `<backend>-sender` when it sends.
    pub fn label(&self) -> String {
        if self.role == "sender" {
            format!("{}-sender", self.backend)
        } else {
            self.backend.clone()
        }
    }
}

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
        .map(|x| crate::cli::parse_size(x).map_err(|e| anyhow!("--sizes: {e}")))
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

struct BedGuard {
    flowlane: PathBuf,
    name: String,
}

impl Drop for BedGuard {
    fn drop(&mut self) {
        let _ = Command::new(&self.flowlane)
            .args(["testbed", "down", "--name", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn wait_child(mut c: std::process::Child, limit: Duration) -> Result<std::process::Output> {
    let t = Instant::now();
    loop {
        if c.try_wait()?.is_some() {
            return Ok(c.wait_with_output()?);
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            bail!("no result within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One cell to run.
struct CellSpec<'a> {
    /// flowlane-ttcp itself.
    me: &'a Path,
    bed: &'a str,
    ns: &'a str,
    peer_ns: &'a str,
    /// Backend under test (in flowlane's namespace).
    backend: &'a str,
    /// Whether it sends (else it receives); the peer is kernel TCP.
    sends: bool,
    conns: usize,
    buffer: usize,
    secs: f64,
    warm: f64,
    /// Extra flags of both ends (the latency mode).
    mode: String,
}

/// What a cell's two ends reported.
struct CellRun {
    rx: serde_json::Value,
    tx: serde_json::Value,
    /// TCP retransmits of the sending side: its namespace's counters for
    /// kernel TCP, flowlane's own counters for flowlane.
    sender_retrans: Option<u64>,
}

/// Sums `retransmits` over the queues of flowlane's `dataplane` report line
/// (on its stderr).
fn flowlane_retransmits(stderr: &[u8]) -> Option<u64> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "dataplane")
        .map(|v| {
            v["queues"]
                .as_array()
                .map(|qs| {
                    qs.iter()
                        .filter_map(|q| q["tcp"]["retransmits"].as_u64())
                        .sum()
                })
                .unwrap_or(0)
        })
}

fn run_cell(c: &CellSpec<'_>) -> Result<CellRun> {
    let threads = c.conns.min(2);
    let per = c.conns.div_ceil(threads);
    let (rx_ns, tx_ns, addr) = if c.sends {
        (c.peer_ns, c.ns, "10.99.0.2")
    } else {
        (c.ns, c.peer_ns, "10.99.0.1")
    };
    // flowlane's active opens draw on 5000 ephemeral ports per remote
    // address and port: spread many connections over several ports.
    let ports = c.conns.div_ceil(2000).max(1);
    let common = format!(
        "-m {threads},*,{addr} -P {ports} -b {} -W {} -t {} -C 0.5 -j --wait 30 {}",
        c.buffer, c.warm, c.secs, c.mode
    );
    let args = |role: &str, extra: &str| -> Vec<String> {
        format!("{role} {common} {extra}")
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let spawn = |ns: &str, a: Vec<String>| {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(c.me)
            .args(a)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    };
    // The tested side: flowlane runs from the root namespace (--bed reads
    // the bed's RSS and re-executes inside it; attaching XDP and filling the
    // rings takes a moment).
    let tested = |role: &str, extra: &str| -> std::io::Result<std::process::Child> {
        if c.backend == "flowlane" {
            Command::new(c.me)
                .args(args(
                    role,
                    &format!("--backend flowlane --bed {} {extra}", c.bed),
                ))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        } else {
            spawn(c.ns, args(role, &format!("--backend kernel {extra}")))
        }
    };
    let tx_extra = if c.mode.is_empty() {
        format!("-l {per}")
    } else {
        String::new()
    };
    let (rx, settle) = if c.sends {
        (spawn(rx_ns, args("-r", "--backend kernel"))?, 300)
    } else {
        (
            tested("-r", "")?,
            if c.backend == "flowlane" { 800 } else { 300 },
        )
    };
    std::thread::sleep(Duration::from_millis(settle));
    let tx = if c.sends {
        tested("-s", &tx_extra)?
    } else {
        spawn(tx_ns, args("-s", &format!("--backend kernel {tx_extra}")))?
    };
    let limit = Duration::from_secs_f64(c.warm + c.secs + 0.5 + 90.0);
    let txo = wait_child(tx, limit)?;
    let rxo = wait_child(rx, limit)?;
    for (o, who) in [(&txo, "sender"), (&rxo, "receiver")] {
        if !o.status.success() {
            bail!(
                "{who}: {}",
                String::from_utf8_lossy(&o.stderr).trim().replace('\n', " ")
            );
        }
    }
    let tx: serde_json::Value = serde_json::from_slice(&txo.stdout).context("sender JSON")?;
    let sender_retrans = if c.sends && c.backend == "flowlane" {
        flowlane_retransmits(&txo.stderr)
    } else {
        tx.get("tcp_retrans_segs_netns").and_then(|x| x.as_u64())
    };
    Ok(CellRun {
        rx: serde_json::from_slice(&rxo.stdout).context("receiver JSON")?,
        tx,
        sender_retrans,
    })
}

/// Runs a cell, through a delay line of `delay_ms` each way when it is not
/// 0; returns the cell's result and the line's report. A line that fails
/// fails the cell.
fn run_delayed(
    flowlane: &Path,
    bed: &str,
    delay_ms: f64,
    spec: &CellSpec<'_>,
) -> (Result<CellRun>, Option<serde_json::Value>) {
    if delay_ms <= 0.0 {
        return (run_cell(spec), None);
    }
    let line = match DelayLine::start(flowlane, bed, delay_ms) {
        Ok(l) => l,
        Err(e) => return (Err(e), None),
    };
    let r = run_cell(spec);
    match line.stop() {
        Ok(report) => (r, Some(report)),
        Err(e) => (Err(e), None),
    }
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
            "kernel" => {}
            "flowlane" => {}
            _ => bail!("--backends: unknown backend {b:?} (kernel, flowlane)"),
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
                .map(|x| crate::cli::parse_size(x).map_err(|e| anyhow!("--latency-sizes: {e}")))
                .collect::<Result<_>>()?,
        };
    let delays: Vec<f64> = list(
        a.delays
            .as_deref()
            .unwrap_or(if q { "0,1,10" } else { "0,1,10,50" }),
        "delays",
    )?;
    let secs = a.seconds.unwrap_or(if q { 2.0 } else { 3.0 });
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(utc_date(now.as_secs())));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;

    let name = a
        .bed
        .clone()
        .unwrap_or_else(|| format!("ttm{}", std::process::id()));
    let o = Command::new(&flowlane)
        .args(["testbed", "up", "--name", &name, "--queues", "2"])
        .output()?;
    let _bed = BedGuard {
        flowlane: flowlane.clone(),
        name: name.clone(),
    };
    if !o.status.success() {
        bail!("testbed up: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    let ns = format!("flowlane-{name}");
    let peer_ns = format!("flowlane-{name}-peer");
    if let Some(d) = delays.iter().find(|&&d| d < 0.0) {
        bail!("--delays: {d} is negative");
    }

    let total =
        (roles.len() * conns.len() * bufs.len() + lat_sizes.len()) * backends.len() * delays.len();
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
                        // Longer warm-up with delay: slow start needs RTTs.
                        let warm = a.warmup.unwrap_or(if d >= 10.0 { 2.0 } else { 1.0 });
                        let spec = CellSpec {
                            me: &me,
                            bed: &name,
                            ns: &ns,
                            peer_ns: &peer_ns,
                            backend: b,
                            sends,
                            conns: c,
                            buffer: buf,
                            secs,
                            warm,
                            mode: String::new(),
                        };
                        let (r, line_report) = run_delayed(&flowlane, &name, d, &spec);
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
                    backend: b,
                    sends: false,
                    conns: 1,
                    buffer: size.max(1024),
                    secs,
                    warm: 0.5,
                    mode: format!("--latency --msg-size {size}"),
                };
                let (r, _) = run_delayed(&flowlane, &name, d, &spec);
                let mut row = serde_json::json!({
                    "backend": b, "role": "receiver (echo)", "msg_size": size, "delay_ms": d,
                });
                match r {
                    Ok(run) => row["latency"] = run.tx["latency"].clone(),
                    Err(e) => {
                        pb.println(format!("{b} latency msg={size} delay={d}ms: {e:#}"));
                        row["error"] = serde_json::json!(format!("{e:#}"));
                    }
                }
                latency.push(row);
                pb.inc(1);
            }
        }
    }
    pb.finish_with_message("done");
    let params = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "quick": q, "backends": backends, "connections": conns, "buffers": bufs,
        "delays_ms_one_way": delays, "delay": "flowlane testbed delay (user-space delay line on peer0, both directions; RTT + 2 x delay)", "seconds": secs, "cooldown_s": 0.5,
        "warmup_s": a.warmup.map(|w| serde_json::json!(w)).unwrap_or_else(|| serde_json::json!("1 (2 when delay >= 10 ms)")),
        "roles": roles.iter().map(|&s| if s { "sender" } else { "receiver" }).collect::<Vec<_>>(),
        "peer": "kernel backend in the peer namespace (10.99.0.2); the backend named runs in flowlane's (10.99.0.1)",
        "bed": {"queues": 2, "mtu": 1500, "receiver": "10.99.0.1 (xsk0)", "sender": "10.99.0.2 (peer0)"},
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
    print!("{sbs}");
    if !latency.is_empty() {
        print!("\n{lat}");
    }
    match plots(&cells, &out) {
        Ok(files) => println!("plots: {}", files.join(", ")),
        Err(e) => println!("plots skipped: {e:#}"),
    }
    println!("results: {}", out.join("results.json").display());
    let failed = cells.iter().filter(|c| c.error.is_some()).count();
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted after {} of {total} cells", cells.len());
    }
    if failed > 0 {
        bail!("{failed} of {total} cells failed (see results.json)");
    }
    Ok(())
}

fn fmt(v: Option<f64>, d: usize) -> String {
    v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "—".into())
}

/// The side-by-side table (one row per cell; backends side by side once there are two).
pub fn table(cells: &[Cell]) -> String {
    let mut s = String::from(
        "| backend (role) | connections | buffer | delay (each way) | RTT added | Mbit/s | cycles/B system | cycles/B receiver proc | cycles/B receiver data threads | cycles/B sender proc | cycles/B sender data threads | % of one CPU per Gbit/s (system) | retrans (sender) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in cells {
        s.push_str(&format!(
            "| {} | {} | {} | {} ms | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            c.label(),
            c.connections,
            c.buffer,
            c.delay_ms,
            c.rtt_added_ms
                .map(|r| format!("{r:.2} ms"))
                .unwrap_or_else(|| "—".into()),
            c.error
                .as_ref()
                .map(|e| format!("failed: {e}"))
                .unwrap_or_else(|| fmt(c.mbit_s, 0)),
            fmt(c.cycles_per_byte_system, 2),
            fmt(c.cycles_per_byte_receiver, 2),
            fmt(c.cycles_per_byte_receiver_threads, 2),
            fmt(c.cycles_per_byte_sender, 2),
            fmt(c.cycles_per_byte_sender_threads, 2),
            fmt(c.pct_one_cpu_per_gbit_system, 1),
            c.retrans_sender
                .map(|r| r.to_string())
                .unwrap_or_else(|| "—".into()),
        ));
    }
    s
}

/// Kernel and flowlane side by side: one row per (connections, buffer,
/// delay), Mbit/s and cycles/byte of each backend and role. The data threads
/// are those of the tested side: flowlane's workers (TCP and AF_XDP rings:
/// all of its work) or the kernel backend's event loops (copies only: the
/// kernel's TCP runs in softirq), so compare the system-wide column first.
pub fn side_by_side(cells: &[Cell]) -> String {
    let mut backends: Vec<String> = Vec::new();
    let mut keys: Vec<(usize, usize, f64)> = Vec::new();
    for c in cells {
        if !backends.contains(&c.label()) {
            backends.push(c.label());
        }
        let k = (c.connections, c.buffer, c.delay_ms);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut s = String::from("| connections | buffer | delay (each way) |");
    for b in &backends {
        s.push_str(&format!(
            " {b} Mbit/s | {b} cycles/B system | {b} cycles/B data threads |"
        ));
    }
    s.push('\n');
    s.push_str(&"| --- ".repeat(3 + 3 * backends.len()));
    s.push_str("|\n");
    for (n, buf, d) in keys {
        s.push_str(&format!("| {n} | {buf} | {d} ms |"));
        for b in &backends {
            let c = cells.iter().find(|c| {
                c.label() == *b && c.connections == n && c.buffer == buf && c.delay_ms == d
            });
            match c {
                Some(c) if c.error.is_none() => s.push_str(&format!(
                    " {} | {} | {} |",
                    fmt(c.mbit_s, 0),
                    fmt(c.cycles_per_byte_system, 2),
                    fmt(c.tested_threads_cycles_per_byte(), 2)
                )),
                Some(_) => s.push_str(" failed | — | — |"),
                None => s.push_str(" — | — | — |"),
            }
        }
        s.push('\n');
    }
    s
}

/// Latency rows: one per (backend, message size, delay), RTT percentiles in
/// microseconds.
pub fn latency_table(rows: &[serde_json::Value]) -> String {
    let mut s = String::from(
        "| backend (echo) | message | delay (each way) | round trips/s | p50 µs | p90 µs | p99 µs | p99.9 µs |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let l = &r["latency"];
        let f = |k: &str, d: usize| fmt(l.get(k).and_then(|x| x.as_f64()), d);
        if let Some(e) = r["error"].as_str() {
            s.push_str(&format!(
                "| {} | {} | {} ms | failed: {e} | | | | |\n",
                r["backend"].as_str().unwrap_or("?"),
                r["msg_size"],
                r["delay_ms"]
            ));
            continue;
        }
        s.push_str(&format!(
            "| {} | {} | {} ms | {} | {} | {} | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["msg_size"],
            r["delay_ms"],
            f("round_trips_per_s", 0),
            f("rtt_p50_us", 0),
            f("rtt_p90_us", 0),
            f("rtt_p99_us", 0),
            f("rtt_p999_us", 0),
        ));
    }
    s
}

fn register_font() -> Result<()> {
    let candidates = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ];
    let path = candidates
        .iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| {
            anyhow!("no DejaVu/Liberation sans font found (apt-get install fonts-dejavu-core)")
        })?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path}: not a usable font"))?;
    Ok(())
}

type Series = (String, Vec<(f64, f64)>);

fn plot_png_svg(
    out: &Path,
    stem: &str,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_x: bool,
    series: &[Series],
) -> Result<Vec<String>> {
    use plotters::prelude::*;
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    if pts.is_empty() {
        bail!("{stem}: no data");
    }
    let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let xmin = pts.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1e-9;
    let mut files = Vec::new();
    macro_rules! draw {
        ($backend:expr) => {{
            let root = $backend.into_drawing_area();
            root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
            let mut b = ChartBuilder::on(&root);
            b.caption(title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60);
            macro_rules! body {
                ($chart:expr) => {{
                    let mut chart = $chart;
                    chart
                        .configure_mesh()
                        .x_desc(x_desc)
                        .y_desc(y_desc)
                        .draw()
                        .map_err(|e| anyhow!("{e:?}"))?;
                    for (i, (name, s)) in series.iter().enumerate() {
                        let col = Palette99::pick(i).to_rgba();
                        chart
                            .draw_series(LineSeries::new(s.iter().copied(), col.stroke_width(2)))
                            .map_err(|e| anyhow!("{e:?}"))?
                            .label(name.as_str())
                            .legend(move |(x, y)| {
                                PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2))
                            });
                        chart
                            .draw_series(s.iter().map(|&p| Circle::new(p, 3, col.filled())))
                            .map_err(|e| anyhow!("{e:?}"))?;
                    }
                    chart
                        .configure_series_labels()
                        .background_style(WHITE.mix(0.8))
                        .border_style(BLACK)
                        .draw()
                        .map_err(|e| anyhow!("{e:?}"))?;
                }};
            }
            if log_x {
                body!(b
                    .build_cartesian_2d((xmin.max(0.5)..xmax * 1.5).log_scale(), 0.0..ymax)
                    .map_err(|e| anyhow!("{e:?}"))?);
            } else {
                body!(b
                    .build_cartesian_2d(xmin.min(0.0)..xmax * 1.05 + 1.0, 0.0..ymax)
                    .map_err(|e| anyhow!("{e:?}"))?);
            }
            root.present().map_err(|e| anyhow!("{e:?}"))?;
        }};
    }
    let png = out.join(format!("{stem}.png"));
    draw!(BitMapBackend::new(&png, (900, 560)));
    files.push(png.display().to_string());
    let svg = out.join(format!("{stem}.svg"));
    draw!(SVGBackend::new(&svg, (900, 560)));
    files.push(svg.display().to_string());
    Ok(files)
}

/// Throughput and cycles/byte against connections (one line per backend and
/// delay) and against delay (one line per backend and connection count), for
/// the largest buffer size.
pub fn plots(cells: &[Cell], out: &Path) -> Result<Vec<String>> {
    register_font()?;
    let ok: Vec<&Cell> = cells.iter().filter(|c| c.mbit_s.is_some()).collect();
    let buf = ok
        .iter()
        .map(|c| c.buffer)
        .max()
        .ok_or_else(|| anyhow!("no successful cells"))?;
    let ok: Vec<&Cell> = ok.into_iter().filter(|c| c.buffer == buf).collect();
    let mut keys_d: Vec<(String, f64)> = Vec::new();
    let mut keys_c: Vec<(String, usize)> = Vec::new();
    for c in &ok {
        if !keys_d.iter().any(|k| k.0 == c.label() && k.1 == c.delay_ms) {
            keys_d.push((c.label(), c.delay_ms));
        }
        if !keys_c
            .iter()
            .any(|k| k.0 == c.label() && k.1 == c.connections)
        {
            keys_c.push((c.label(), c.connections));
        }
    }
    let by_conns = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<Series> {
        keys_d
            .iter()
            .map(|(b, d)| {
                let mut v: Vec<(f64, f64)> = ok
                    .iter()
                    .filter(|c| c.label() == *b && c.delay_ms == *d)
                    .filter_map(|c| f(c).map(|y| (c.connections as f64, y)))
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                (format!("{b}, delay {d} ms"), v)
            })
            .collect()
    };
    let by_delay = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<Series> {
        keys_c
            .iter()
            .map(|(b, n)| {
                let mut v: Vec<(f64, f64)> = ok
                    .iter()
                    .filter(|c| c.label() == *b && c.connections == *n)
                    .filter_map(|c| f(c).map(|y| (c.delay_ms, y)))
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                (format!("{b}, {n} conn"), v)
            })
            .collect()
    };
    let thr = |c: &Cell| c.mbit_s;
    let cpb = |c: &Cell| c.cycles_per_byte_system;
    let bl = format!("{buf}-byte buffers, MTU 1500, veth test bed");
    let mut files = Vec::new();
    files.extend(plot_png_svg(
        out,
        "throughput_vs_connections",
        &format!("Throughput vs connections ({bl})"),
        "connections",
        "Mbit/s (receiver)",
        true,
        &by_conns(&thr),
    )?);
    files.extend(plot_png_svg(
        out,
        "cycles_per_byte_vs_connections",
        &format!("Cycles/byte (system) vs connections ({bl})"),
        "connections",
        "cycles per payload byte",
        true,
        &by_conns(&cpb),
    )?);
    files.extend(plot_png_svg(
        out,
        "throughput_vs_delay",
        &format!("Throughput vs one-way delay ({bl})"),
        "delay added in each direction (ms; RTT + 2x)",
        "Mbit/s (receiver)",
        false,
        &by_delay(&thr),
    )?);
    files.extend(plot_png_svg(
        out,
        "cycles_per_byte_vs_delay",
        &format!("Cycles/byte (system) vs one-way delay ({bl})"),
        "delay added in each direction (ms; RTT + 2x)",
        "cycles per payload byte",
        false,
        &by_delay(&cpb),
    )?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_767_225_599), "2025-12-31");
    }

    fn cell(c: usize, d: f64, mbit: f64) -> Cell {
        Cell {
            backend: "kernel".into(),
            role: "receiver".into(),
            connections: c,
            buffer: 65536,
            delay_ms: d,
            rtt_added_ms: None,
            delay_line: None,
            mbit_s: Some(mbit),
            cycles_per_byte_system: Some(3.0),
            cycles_per_byte_receiver: Some(1.0),
            cycles_per_byte_receiver_threads: Some(0.5),
            cycles_per_byte_sender: Some(1.5),
            cycles_per_byte_sender_threads: Some(1.4),
            pct_one_cpu_per_gbit_system: Some(30.0),
            retrans_sender: Some(0),
            error: None,
            receiver: None,
            sender: None,
        }
    }

    #[test]
    fn table_and_plots_from_synthetic_cells() {
        let cells = vec![
            cell(1, 0.0, 5000.0),
            cell(16, 0.0, 4000.0),
            cell(1, 10.0, 900.0),
        ];
        let t = table(&cells);
        assert_eq!(t.lines().count(), 5);
        assert!(
            t.contains("| kernel | 16 | 65536 | 0 ms | — | 4000 |"),
            "{t}"
        );
        let mut f = cell(16, 0.0, 4500.0);
        f.backend = "flowlane".into();
        let mut both = cells.clone();
        both.push(f);
        let sbs = side_by_side(&both);
        assert_eq!(sbs.lines().count(), 2 + 3, "{sbs}");
        assert!(
            sbs.contains("| 16 | 65536 | 0 ms | 4000 | 3.00 | 0.50 | 4500 | 3.00 | 0.50 |"),
            "{sbs}"
        );
        assert!(
            sbs.contains("| 1 | 65536 | 0 ms | 5000 | 3.00 | 0.50 | — | — | — |"),
            "{sbs}"
        );
        let dir = std::env::temp_dir().join(format!("ttcp-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        match plots(&cells, &dir) {
            Ok(files) => {
                assert_eq!(files.len(), 8);
                for f in files {
                    assert!(std::fs::metadata(&f).unwrap().len() > 1000, "{f}");
                }
            }
            // A machine without the font still gets the JSON and the table.
            Err(e) => assert!(e.to_string().contains("font"), "{e:#}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
