//! The matrix's emulated WAN delay: `flowlane testbed delay` (a user-space
//! delay line on the peer device that delays both directions, for every
//! backend alike) run as a child for the length of a cell.
//!
//! `tc netem` on both veth ends would not do: AF_XDP copy-mode transmit
//! bypasses the qdisc of flowlane's device, so flowlane's own packets would
//! go undelayed while the kernel backend's were delayed. (This project's
//! kernel has no `sch_netem` either.)

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use flowlane_testbed::child::{terminate, wait_within};

/// A running delay line; stopped (SIGTERM) on drop.
#[derive(Debug)]
pub struct DelayLine {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl DelayLine {
    /// Starts `flowlane testbed delay --bed BED --ms MS` and waits (at most
    /// 30 s) until frames are being delayed.
    pub fn start(flowlane: &Path, bed: &str, one_way_ms: f64) -> Result<DelayLine> {
        let mut child = Command::new(flowlane)
            .args(["testbed", "delay", "--bed", bed, "--json", "--ms"])
            .arg(one_way_ms.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", flowlane.display()))?;
        let out = child.stdout.take().context("delay line stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut line = DelayLine { child, lines };
        match line.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l.contains("delaying") => Ok(line),
            _ => {
                let _ = line.child.kill();
                let out = line.child.wait_with_output_stderr();
                bail!("the delay line did not start: {out}")
            }
        }
    }

    /// Stops the line (it releases what it holds first) and returns its
    /// JSON report.
    pub fn stop(mut self) -> Result<serde_json::Value> {
        terminate(&self.child);
        let Some(st) = wait_within(&mut self.child, Duration::from_secs(30))? else {
            let _ = self.child.kill();
            bail!("the delay line did not stop within 30 s");
        };
        if !st.success() {
            bail!(
                "the delay line failed ({st}): {}",
                self.child.wait_with_output_stderr()
            );
        }
        // The reader thread ends with the child's stdout.
        let json: Vec<String> = self.lines.iter().collect();
        serde_json::from_str(&json.join("\n")).context("the delay line's report")
    }
}

trait StderrText {
    fn wait_with_output_stderr(&mut self) -> String;
}

impl StderrText for Child {
    fn wait_with_output_stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s.trim().to_string()
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            terminate(&self.child);
            let _ = wait_within(&mut self.child, Duration::from_secs(10));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
