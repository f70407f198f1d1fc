//! A `flowlane udp-echo` child process run inside a test bed, with its
//! report file, for the demo and the benchmarks. Dropping it stops the child
//! (SIGTERM, then SIGKILL after 5 s); so does a signal that ends the run
//! ([`crate::bed_guard`]), which removes the report too.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bed_guard;
use crate::udp_echo::Report;
use flowlane_testbed::BedState;

/// A `flowlane udp-echo` child process in a test bed's namespace.
#[derive(Debug)]
pub struct EchoProcess {
    /// The child (its pid is flowlane's: `ip netns exec` execs in place).
    pub child: Child,
    report: PathBuf,
}

/// Where this process's echo child on bed `bed` writes its report.
fn report_path(bed: &str) -> PathBuf {
    std::env::temp_dir().join(format!("flowlane-demo-{bed}-{}.json", std::process::id()))
}

impl EchoProcess {
    /// Starts it with `extra` flags and waits for its first report.
    pub fn start(bed: &BedState, port: u16, extra: &[&str]) -> Result<EchoProcess> {
        let exe = std::env::current_exe().context("finding the flowlane binary")?;
        let report = report_path(&bed.name);
        let _ = std::fs::remove_file(&report);
        bed_guard::remove_on_signal(report.clone());
        let child = bed_guard::spawn_child(
            Command::new("ip")
                .args(["netns", "exec", &bed.netns])
                .arg(exe)
                .args([
                    "udp-echo",
                    "--iface",
                    &bed.local_if,
                    "--port",
                    &port.to_string(),
                    "--report",
                ])
                .arg(&report)
                .args(extra),
        )
        .context("starting flowlane udp-echo in the test bed")?;
        let mut p = EchoProcess { child, report };
        p.wait_generation(0)?;
        Ok(p)
    }

    fn read(&self) -> Option<Report> {
        serde_json::from_slice(&std::fs::read(&self.report).ok()?).ok()
    }

    fn wait_generation(&mut self, g: u64) -> Result<Report> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(r) = self.read() {
                if r.generation >= g {
                    return Ok(r);
                }
            }
            if let Some(st) = self.child.try_wait()? {
                bail!("flowlane udp-echo exited early ({st})");
            }
            if Instant::now() > deadline {
                bail!("flowlane udp-echo did not report within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asks for report `g` (SIGUSR1) and waits for it.
    pub fn snapshot(&mut self, g: u64) -> Result<Report> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::SIGUSR1,
        )?;
        self.wait_generation(g)
    }
}

impl Drop for EchoProcess {
    fn drop(&mut self) {
        bed_guard::stop_child(&mut self.child);
        let _ = std::fs::remove_file(&self.report);
    }
}
