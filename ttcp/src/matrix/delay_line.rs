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

use anyhow::{anyhow, bail, Context, Result};

use flowlane_testbed::child::{terminate, terminate_with_parent, wait_within};

/// A running delay line; stopped (SIGTERM) on drop.
#[derive(Debug)]
pub struct DelayLine {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl DelayLine {
    /// Starts `flowlane testbed delay --bed BED --ms MS` and waits (at most
    /// 30 s) until frames are being delayed. The line gets SIGTERM when the
    /// calling thread exits ([`terminate_with_parent`]): stop or drop it on
    /// that thread.
    pub fn start(flowlane: &Path, bed: &str, one_way_ms: f64) -> Result<DelayLine> {
        // A matrix killed outright (SIGKILL) takes its line with it: the
        // line gets SIGTERM and releases the bed. This thread outlives the
        // line (`run_with_line` starts and stops it).
        let mut child = terminate_with_parent(&mut Command::new(flowlane))
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
            Ok(l) if is_ready(&l) => Ok(line),
            _ => {
                let _ = line.child.kill();
                let out = line.child.wait_with_output_stderr();
                bail!("the delay line did not start: {out}")
            }
        }
    }

    /// Stops the line (it releases what it holds first): its JSON report
    /// (the line after the ready line) and how the stop went.
    pub fn stop(mut self) -> Stopped {
        terminate(&self.child);
        let error = match wait_within(&mut self.child, Duration::from_secs(30)) {
            Ok(Some(st)) if st.success() => Ok(()),
            Ok(Some(st)) => Err(anyhow!(
                "the delay line failed ({st}): {}",
                self.child.wait_with_output_stderr()
            )),
            Ok(None) => Err(anyhow!("the delay line did not stop within 30 s")),
            Err(e) => Err(anyhow!("waiting for the delay line: {e}")),
        };
        // Gone for certain, so that its stdout (and the reader) ends.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let json: Vec<String> = self.lines.iter().collect();
        match serde_json::from_str(&json.join("\n")) {
            Ok(report) => Stopped {
                report: Some(report),
                error,
            },
            // A line that failed printed no report: its own error says why.
            Err(e) => Stopped {
                report: None,
                error: error.and(Err::<(), _>(e).context("the delay line's report")),
            },
        }
    }
}

/// Whether `line` is `flowlane testbed delay --json`'s first stdout line,
/// `{"event":"ready",...}` (frames are being delayed).
fn is_ready(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v["event"] == "ready")
}

/// What a stopped [`DelayLine`] left.
#[derive(Debug)]
pub struct Stopped {
    /// Its JSON report (frames, drops, lateness), when it printed one
    /// that parsed, also when it then failed.
    pub report: Option<serde_json::Value>,
    /// Whether it stopped cleanly (and its report parsed).
    pub error: Result<()>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for `flowlane` whose delay line reports on SIGTERM and
    /// then fails.
    const FAILS_AFTER_ITS_REPORT: &str = r#"#!/bin/sh
trap 'echo "{\"mean_late_us\": 3}"; echo "lost its hooks" >&2; exit 1' TERM
echo "test bed x: delaying both directions by 1 ms" >&2
echo '{"event":"ready","bed":"x","one_way_ms":1}'
while :; do sleep 0.05; done
"#;

    /// A stand-in whose delay line leaves a mark when SIGTERM comes.
    const MARKS_ITS_TERM: &str = r#"#!/bin/sh
trap 'echo term > "$0.term"; exit 0' TERM
echo '{"event":"ready"}'
while :; do sleep 0.05; done
"#;

    /// Writes `script` as an executable stand-in for `flowlane` in a fresh
    /// directory.
    fn fake_flowlane(tag: &str, script: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ttcp-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("flowlane");
        std::fs::write(&fake, script).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        fake
    }

    /// Starts a line on `fake`, retrying while another test's fork holds the
    /// just-written file open (ETXTBSY).
    fn start_fake(fake: &Path) -> DelayLine {
        (0..50)
            .find_map(|_| match DelayLine::start(fake, "x", 1.0) {
                Ok(l) => Some(l),
                Err(e) if format!("{e:#}").contains("busy") => {
                    std::thread::sleep(Duration::from_millis(20));
                    None
                }
                Err(e) => panic!("{e:#}"),
            })
            .expect("the fake line started")
    }

    #[test]
    fn a_line_whose_parent_dies_is_terminated() {
        let fake = fake_flowlane("delay-orphan", MARKS_ITS_TERM);
        let mark = fake.with_extension("term");
        // The starting thread ends without stopping the line, as a matrix
        // killed outright would.
        let f = fake.clone();
        let pid = std::thread::spawn(move || {
            // Never dropped (which would stop it).
            let line = std::mem::ManuallyDrop::new(start_fake(&f));
            line.child.id()
        })
        .join()
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !mark.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let terminated = mark.exists();
        if !terminated {
            // Not left running by the failed test.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = std::fs::remove_dir_all(fake.parent().unwrap());
        assert!(terminated, "the orphaned line got no SIGTERM");
    }

    #[test]
    fn a_line_that_fails_after_its_report_keeps_the_report() {
        let fake = fake_flowlane("delay-line", FAILS_AFTER_ITS_REPORT);
        let stopped = start_fake(&fake).stop();
        let _ = std::fs::remove_dir_all(fake.parent().unwrap());
        assert_eq!(
            stopped.report,
            Some(serde_json::json!({"mean_late_us": 3})),
            "{:?}",
            stopped.error
        );
        let e = stopped.error.unwrap_err().to_string();
        assert!(
            e.contains("the delay line failed") && e.contains("lost its hooks"),
            "{e}"
        );
    }
}
