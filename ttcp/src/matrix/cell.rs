//! One matrix cell: a flowlane-ttcp receiver and sender in the bed's two
//! namespaces (the tested backend on flowlane's side, kernel TCP on the
//! peer's), through a delay line when the cell has a delay.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::bed::TableBefore;
use super::delay_line::DelayLine;
use super::failures::{both, cell_error, receiver_error};
use super::wire_frames::{WireSizeFrames, KERNEL_WIRE};
use flowlane_testbed::child::{stop, Watched};

/// The `--backend` flowlane-ttcp runs for a matrix backend.
fn ttcp_backend(matrix_backend: &str) -> &str {
    if matrix_backend == KERNEL_WIRE {
        "kernel"
    } else {
        matrix_backend
    }
}

/// The cool-down of every cell (seconds), both ends' `-C`.
pub(super) const COOLDOWN_S: f64 = 0.5;

/// How long a child left running on an error path gets after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// One end of a cell, its output read from the moment it starts (an end
/// that writes more than a pipe holds, a flowlane receiver's move lines,
/// is not blocked on it while the cell waits for the other end): stopped
/// (SIGTERM, then SIGKILL) and reaped when dropped before its output was
/// collected, so that an error path (the other end failing to start, no
/// result in time) leaves no receiver holding the control port for the
/// next cell.
struct End(Option<Watched>);

impl End {
    /// Watches a started end.
    fn new(child: Child) -> End {
        End(Some(Watched::new(child)))
    }

    /// Whether the end has exited, with a status other than success.
    fn failed(&mut self) -> Result<bool> {
        let w = self.0.as_mut().expect("not collected yet");
        Ok(w.child().try_wait()?.is_some_and(|st| !st.success()))
    }

    /// Waits at most `limit` for the end to exit; its output.
    fn output_within(mut self, limit: Duration) -> Result<Output> {
        self.0.take().expect("collected once").output_within(limit)
    }
}

impl Drop for End {
    fn drop(&mut self) {
        if let Some(w) = &mut self.0 {
            stop(w.child(), STOP_GRACE);
        }
    }
}

/// How often [`outputs`] looks at the two ends.
const POLL: Duration = Duration::from_millis(20);

/// The outputs of a cell's sender and receiver, each waited for at most
/// `limit`, the sender's first; both ends' pipes are read all along (see
/// [`End`]). A receiver that fails first (it could not start: its port
/// held) ends the cell at once with its error: the sender, which would
/// wait for it up to its `--wait`, is stopped.
fn outputs(mut tx: End, mut rx: End, limit: Duration) -> Result<(Output, Output)> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline
        && tx
            .0
            .as_mut()
            .expect("not collected")
            .child()
            .try_wait()?
            .is_none()
    {
        if rx.failed()? {
            drop(tx);
            bail!(receiver_error(&rx.output_within(STOP_GRACE)?));
        }
        std::thread::sleep(POLL);
    }
    let txo = tx.output_within(deadline.saturating_duration_since(Instant::now()))?;
    let rxo = rx.output_within(limit)?;
    Ok((txo, rxo))
}

/// One cell to run.
pub(super) struct CellSpec<'a> {
    /// flowlane-ttcp itself.
    pub(super) me: &'a Path,
    pub(super) bed: &'a str,
    pub(super) ns: &'a str,
    pub(super) peer_ns: &'a str,
    /// The bed's addresses of the matrix's family: flowlane's side (the
    /// tested backend's) and the peer's.
    pub(super) local: &'a str,
    pub(super) peer: &'a str,
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
    /// TCP retransmits of the sending side in the measured window
    /// ([`sender_retransmits`]).
    pub(super) sender_retrans: Option<u64>,
    /// The receiver's bucket moves ([`moves`]).
    pub(super) rx_moves: Vec<serde_json::Value>,
}

/// A flowlane receiver's bucket moves: its `move` lines on stderr
/// (`flowlane_dataplane::service_control::move_line`), one per move.
fn moves(stderr: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "move")
        .collect()
}

/// flowlane's `dataplane` report line (on its stderr): per queue, the
/// AF_XDP socket's, the steering program's and the TCP stack's counters.
fn flowlane_dataplane(stderr: &[u8]) -> Option<serde_json::Value> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "dataplane")
}

/// Segments the sending end retransmitted in the measured window, from its
/// own report: flowlane's TCP counters at the window's edges for a flowlane
/// sender (`tcp_retrans_segs_data_path`; the kernel never sees its
/// segments), the namespace's `/proc/net/snmp` for kernel TCP; `None` (n/a)
/// when the report has no such figure. Not the `dataplane` line's counters:
/// those are the whole run's (set-up, warm-up and close too).
fn sender_retransmits(flowlane_sends: bool, tx: &serde_json::Value) -> Option<u64> {
    let key = if flowlane_sends {
        "tcp_retrans_segs_data_path"
    } else {
        "tcp_retrans_segs_netns"
    };
    tx.get(key).and_then(|x| x.as_u64())
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
        (c.peer_ns, c.ns, c.peer)
    } else {
        (c.ns, c.peer_ns, c.local)
    };
    // flowlane's active opens draw on 5000 ephemeral ports per remote
    // address and port: spread many connections over several ports.
    let ports = c.conns.div_ceil(2000).max(1);
    let common = format!(
        "-m {threads},*,{addr} -P {ports} -b {} -W {} -t {} -C {COOLDOWN_S} -j --wait 30 {}",
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
    let limit = Duration::from_secs_f64(c.warm + c.secs + COOLDOWN_S + 90.0);
    let (rx, settle) = if c.sends {
        (spawn(rx_ns, args("-r", "--backend kernel"))?, 300)
    } else {
        (
            tested("-r", "")?,
            if c.backend == "flowlane" { 800 } else { 300 },
        )
    };
    let rx = End::new(rx);
    std::thread::sleep(Duration::from_millis(settle));
    let tx = End::new(if c.sends {
        tested("-s", &tx_extra)?
    } else {
        spawn(tx_ns, args("-s", &format!("--backend kernel {tx_extra}")))?
    });
    let (txo, rxo) = outputs(tx, rx, limit)?;
    if let Some(e) = cell_error(&txo, &rxo) {
        bail!(e);
    }
    let mut tx: serde_json::Value = serde_json::from_slice(&txo.stdout).context("sender JSON")?;
    let mut rx: serde_json::Value = serde_json::from_slice(&rxo.stdout).context("receiver JSON")?;
    // flowlane's counters go with its end's report (`dataplane`).
    for (report, out) in [(&mut tx, &txo), (&mut rx, &rxo)] {
        if let (Some(obj), Some(d)) = (report.as_object_mut(), flowlane_dataplane(&out.stderr)) {
            obj.insert("dataplane".into(), d);
        }
    }
    let sender_retrans = sender_retransmits(c.sends && c.backend == "flowlane", &tx);
    Ok(CellRun {
        rx,
        tx,
        sender_retrans,
        rx_moves: moves(&rxo.stderr),
    })
}

/// What running a cell gave.
pub(super) struct Outcome {
    /// The two ends' reports, or why the cell failed.
    pub(super) run: Result<CellRun>,
    /// The delay line's report, when the cell had a line and it reported.
    pub(super) line_report: Option<serde_json::Value>,
    /// The bed's offloads could not be given back after a `kernel-wire`
    /// cell: the cells after it would run without them.
    pub(super) offloads_lost: bool,
    /// For a flowlane receiver's cell: whether the bed's RSS table had
    /// changed and was put back ([`TableBefore::put_back`]); `None` for the
    /// others, or when it could not be read.
    pub(super) rss_table_put_back: Option<bool>,
    /// The bed's RSS table could not be read or put back after a flowlane
    /// receiver's cell: the cells after it would run on another table.
    pub(super) rss_table_lost: bool,
}

/// Whether the cell's tested end is a flowlane receiver, which may move
/// the bed's RSS buckets.
pub(super) fn flowlane_receives(spec: &CellSpec<'_>) -> bool {
    spec.backend == "flowlane" && !spec.sends
}

/// [`run_offloaded`], the bed's RSS table read before the cell and put back
/// after it when its tested end is a flowlane receiver, so that no cell
/// sees the buckets an earlier one moved and the bed is left as found.
pub(super) fn run_delayed(
    flowlane: &Path,
    bed: &str,
    delay_ms: f64,
    spec: &CellSpec<'_>,
) -> Outcome {
    if !flowlane_receives(spec) {
        return run_offloaded(flowlane, bed, delay_ms, spec);
    }
    let before = match TableBefore::read(bed) {
        Ok(t) => t,
        Err(e) => {
            return Outcome {
                run: Err(e),
                line_report: None,
                offloads_lost: false,
                rss_table_put_back: None,
                rss_table_lost: true,
            }
        }
    };
    let mut o = run_offloaded(flowlane, bed, delay_ms, spec);
    match before.put_back() {
        Ok(put) => o.rss_table_put_back = Some(put),
        Err(e) => {
            o.run = both(o.run, Err(e));
            o.rss_table_lost = true;
        }
    }
    o
}

/// Runs a cell, through a delay line of `delay_ms` each way when it is not
/// 0, with the bed's offloads off for a `kernel-wire` cell. A line that
/// fails, or offloads not given back, fail the cell too (beside its own
/// error, when it has one).
fn run_offloaded(flowlane: &Path, bed: &str, delay_ms: f64, spec: &CellSpec<'_>) -> Outcome {
    if spec.backend != KERNEL_WIRE {
        let (run, line_report) = run_with_line(flowlane, bed, delay_ms, spec);
        return Outcome {
            run,
            line_report,
            offloads_lost: false,
            rss_table_put_back: None,
            rss_table_lost: false,
        };
    }
    let state = match flowlane_testbed::load(bed) {
        Ok(s) => s,
        Err(e) => {
            return Outcome {
                run: Err(e),
                line_report: None,
                offloads_lost: false,
                rss_table_put_back: None,
                rss_table_lost: false,
            }
        }
    };
    let (wire, off) = WireSizeFrames::off(&state);
    let (run, line_report) = match off {
        Ok(()) => run_with_line(flowlane, bed, delay_ms, spec),
        Err(e) => (Err(e), None),
    };
    let given_back = wire.give_back();
    Outcome {
        offloads_lost: given_back.is_err(),
        run: both(run, given_back),
        line_report,
        rss_table_put_back: None,
        rss_table_lost: false,
    }
}

/// Runs a cell, through a delay line when `delay_ms` is not 0; the cell's
/// result and the line's report (kept whenever it parsed).
fn run_with_line(
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
    let stopped = line.stop();
    (both(r, stopped.error), stopped.report)
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

    /// A flowlane sender's retransmits are its report's, over the measured
    /// window (3), not the `dataplane` line's whole-run total (40); a report
    /// without the figure is n/a, not 0.
    #[test]
    fn a_flowlane_senders_retransmits_are_the_measured_windows() {
        let dataplane = serde_json::json!({"event": "dataplane", "queues": [
            {"queue": 0, "tcp": {"retransmits": 25}},
            {"queue": 1, "tcp": {"retransmits": 15}},
        ]});
        let tx = serde_json::json!({
            "tcp_retrans_segs_data_path": 3,
            "tcp_retrans_segs_netns": 7,
            "dataplane": dataplane,
        });
        assert_eq!(sender_retransmits(true, &tx), Some(3));
        assert_eq!(sender_retransmits(false, &tx), Some(7));
        // Counters that could not be read: no figure, whatever the line says.
        let tx = serde_json::json!({
            "tcp_retrans_segs_data_path": null,
            "tcp_retrans_segs_netns": 0,
            "dataplane": {"event": "dataplane", "queues": [{"queue": 0, "tcp": null}]},
        });
        assert_eq!(sender_retransmits(true, &tx), None);
    }

    /// An end that writes more than a pipe holds before it exits is read
    /// while it runs: it exits, and all it wrote is there.
    #[test]
    fn an_end_that_writes_much_is_not_blocked_on_its_pipe() {
        let c = Command::new("sh")
            .args(["-c", "head -c 300000 /dev/zero >&2; echo done"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = End::new(c).output_within(Duration::from_secs(5)).unwrap();
        assert!(o.status.success());
        assert_eq!((o.stderr.len(), &o.stdout[..]), (300_000, &b"done\n"[..]));
        // Past the deadline: an error, and the end is stopped and reaped.
        let c = Command::new("sleep")
            .arg("30")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let proc_dir = std::path::PathBuf::from(format!("/proc/{}", c.id()));
        let e = End::new(c)
            .output_within(Duration::from_millis(100))
            .unwrap_err();
        assert!(e.to_string().contains("no result within"), "{e}");
        assert!(!proc_dir.exists(), "the end still runs (or is unreaped)");
    }

    /// A receiver that writes more than a pipe holds while the sender runs
    /// is read all along, not from when the sender is done: a sender that
    /// needs the receiver to go on (here: to see it finish) is not held up
    /// until its deadline.
    #[test]
    fn a_receiver_that_writes_much_is_read_while_the_sender_runs() {
        let dir = std::env::temp_dir().join(format!("fl-cell-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let done = dir.join("rx-done");
        let sh = |script: String| {
            Command::new("sh")
                .args(["-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let rx = End::new(sh(format!(
            "head -c 200000 /dev/zero >&2; touch {}",
            done.display()
        )));
        let tx = End::new(sh(format!(
            "while [ ! -e {} ]; do sleep 0.05; done; echo sent",
            done.display()
        )));
        let t = std::time::Instant::now();
        let r = outputs(tx, rx, Duration::from_secs(5));
        let took = t.elapsed();
        std::fs::remove_dir_all(&dir).unwrap();
        let (txo, rxo) = r.unwrap();
        assert_eq!(txo.stdout, b"sent\n");
        assert_eq!(rxo.stderr.len(), 200_000, "the receiver's output is whole");
        assert!(took < Duration::from_secs(4), "{took:?}");
    }

    /// A receiver that fails to start (its port held) ends the cell at
    /// once with its error, not when the sender gives up waiting for it.
    #[test]
    fn a_receiver_that_fails_to_start_ends_the_cell_at_once() {
        let sh = |script: &str| {
            Command::new("sh")
                .args(["-c", script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let rx = End::new(sh("echo 'control port in use' >&2; exit 1"));
        let tx = sh("sleep 20");
        let tx_proc = std::path::PathBuf::from(format!("/proc/{}", tx.id()));
        let t = std::time::Instant::now();
        let e = outputs(End::new(tx), rx, Duration::from_secs(60)).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(e.to_string(), "receiver: control port in use");
        assert!(!tx_proc.exists(), "the sender still runs (or is unreaped)");
    }

    /// A flowlane receiver's moves are its stderr's `move` lines.
    #[test]
    fn a_receivers_moves_are_its_move_lines() {
        let stderr = b"{\"event\":\"move\",\"bucket\":3,\"from\":0,\"to\":1}\nsome line\n{\"event\":\"dataplane\"}\n";
        let m = moves(stderr);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["bucket"], 3);
    }

    #[test]
    fn an_end_dropped_on_an_error_path_is_stopped_and_reaped() {
        let c = Command::new("sleep").arg("30").spawn().unwrap();
        let proc_dir = std::path::PathBuf::from(format!("/proc/{}", c.id()));
        let t = std::time::Instant::now();
        drop(End::new(c));
        assert!(!proc_dir.exists(), "the child still runs (or is unreaped)");
        assert!(t.elapsed() < STOP_GRACE, "{:?}", t.elapsed());
    }
}
