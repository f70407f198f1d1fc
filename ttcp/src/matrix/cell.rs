//! One matrix cell: a flowlane-ttcp receiver and sender in the bed's two
//! namespaces (the tested backend on flowlane's side, kernel TCP on the
//! peer's), through a delay line when the cell has a delay.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::delay_line::DelayLine;
use flowlane_testbed::child::output_within;
use flowlane_testbed::offloads::{self, Frames};

/// The backend name of kernel TCP sending wire-size frames: the bed's
/// kernels with TSO and GSO off for the cell, so that they segment in
/// software before the device, as for a NIC without TSO
/// ([`Frames::Segmented`]; flowlane sends wire-size frames always). The
/// fair baseline for the sender; `kernel` is the kernel with its offloads.
pub(super) const KERNEL_WIRE: &str = "kernel-wire";

/// The `--backend` flowlane-ttcp runs for a matrix backend.
fn ttcp_backend(matrix_backend: &str) -> &str {
    if matrix_backend == KERNEL_WIRE {
        "kernel"
    } else {
        matrix_backend
    }
}

/// The bed's kernels segmenting in software while it lives; their
/// offloads restored when it is dropped (every exit path of the cell).
struct WireSizeFrames<'a>(&'a flowlane_testbed::BedState);

impl<'a> WireSizeFrames<'a> {
    fn on(bed: &'a flowlane_testbed::BedState) -> Result<Self> {
        let guard = WireSizeFrames(bed);
        offloads::set(bed, Frames::Segmented).context("turning the bed's offloads off")?;
        Ok(guard)
    }
}

impl Drop for WireSizeFrames<'_> {
    fn drop(&mut self) {
        let _ = offloads::set(self.0, Frames::Gso);
    }
}

/// One cell to run.
pub(super) struct CellSpec<'a> {
    /// flowlane-ttcp itself.
    pub(super) me: &'a Path,
    pub(super) bed: &'a str,
    pub(super) ns: &'a str,
    pub(super) peer_ns: &'a str,
    /// Backend under test (in flowlane's namespace).
    pub(super) backend: &'a str,
    /// Whether it sends (else it receives); the peer is kernel TCP.
    pub(super) sends: bool,
    pub(super) conns: usize,
    pub(super) buffer: usize,
    pub(super) secs: f64,
    pub(super) warm: f64,
    /// Extra flags of both ends (the latency mode).
    pub(super) mode: String,
    /// Extra flags of the flowlane backend (`--frames-per-queue N`,
    /// `--copy-receive`).
    pub(super) flowlane_flags: &'a str,
    /// Extra flags of the flowlane backend as the receiver (`--rebalance`).
    pub(super) flowlane_rx_flags: &'a str,
}

/// What a cell's two ends reported.
pub(super) struct CellRun {
    pub(super) rx: serde_json::Value,
    pub(super) tx: serde_json::Value,
    /// TCP retransmits of the sending side: its namespace's counters for
    /// kernel TCP, flowlane's own counters for flowlane.
    pub(super) sender_retrans: Option<u64>,
}

/// flowlane's `dataplane` report line (on its stderr): per queue, the
/// AF_XDP socket's, the steering program's and the TCP stack's counters.
fn flowlane_dataplane(stderr: &[u8]) -> Option<serde_json::Value> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "dataplane")
}

/// Sums `retransmits` over the queues of flowlane's `dataplane` report.
fn flowlane_retransmits(report: &serde_json::Value) -> u64 {
    report["queues"]
        .as_array()
        .map(|qs| {
            qs.iter()
                .filter_map(|q| q["tcp"]["retransmits"].as_u64())
                .sum()
        })
        .unwrap_or(0)
}

/// The sender's threads and connections per thread for `conns`
/// connections: two threads where they split evenly, else one, so that
/// exactly `conns` are opened (the cell is labelled with that count).
fn split(conns: usize) -> (usize, usize) {
    let threads = if conns >= 2 && conns % 2 == 0 { 2 } else { 1 };
    (threads, conns / threads)
}

fn run_cell(c: &CellSpec<'_>) -> Result<CellRun> {
    let (threads, per) = split(c.conns);
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
                    &format!(
                        "--backend flowlane --bed {} {} {} {extra}",
                        c.bed,
                        c.flowlane_flags,
                        if role == "-r" {
                            c.flowlane_rx_flags
                        } else {
                            ""
                        }
                    ),
                ))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        } else {
            spawn(
                c.ns,
                args(
                    role,
                    &format!("--backend {} {extra}", ttcp_backend(c.backend)),
                ),
            )
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
    let txo = output_within(tx, limit)?;
    let rxo = output_within(rx, limit)?;
    for (o, who) in [(&txo, "sender"), (&rxo, "receiver")] {
        if !o.status.success() {
            bail!(
                "{who}: {}",
                String::from_utf8_lossy(&o.stderr).trim().replace('\n', " ")
            );
        }
    }
    let mut tx: serde_json::Value = serde_json::from_slice(&txo.stdout).context("sender JSON")?;
    let mut rx: serde_json::Value = serde_json::from_slice(&rxo.stdout).context("receiver JSON")?;
    let tx_dataplane = flowlane_dataplane(&txo.stderr);
    let sender_retrans = if c.sends && c.backend == "flowlane" {
        tx_dataplane.as_ref().map(flowlane_retransmits)
    } else {
        tx.get("tcp_retrans_segs_netns").and_then(|x| x.as_u64())
    };
    // flowlane's counters go with its end's report (`dataplane`).
    for (report, dataplane) in [
        (&mut tx, tx_dataplane),
        (&mut rx, flowlane_dataplane(&rxo.stderr)),
    ] {
        if let (Some(obj), Some(d)) = (report.as_object_mut(), dataplane) {
            obj.insert("dataplane".into(), d);
        }
    }
    Ok(CellRun {
        rx,
        tx,
        sender_retrans,
    })
}

/// Runs a cell, through a delay line of `delay_ms` each way when it is not
/// 0; returns the cell's result and the line's report. A line that fails
/// fails the cell.
pub(super) fn run_delayed(
    flowlane: &Path,
    bed: &str,
    delay_ms: f64,
    spec: &CellSpec<'_>,
) -> (Result<CellRun>, Option<serde_json::Value>) {
    let bed_state;
    let _wire = if spec.backend == KERNEL_WIRE {
        bed_state = match flowlane_testbed::load(bed) {
            Ok(s) => s,
            Err(e) => return (Err(e), None),
        };
        match WireSizeFrames::on(&bed_state) {
            Ok(g) => Some(g),
            Err(e) => return (Err(e), None),
        }
    } else {
        None
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_opens_exactly_the_connections_it_is_labelled_with() {
        for c in [1, 2, 3, 5, 16, 10_001] {
            let (threads, per) = split(c);
            assert_eq!(threads * per, c, "{c}");
        }
        assert_eq!(split(16), (2, 8));
    }
}
