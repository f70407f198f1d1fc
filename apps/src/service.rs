//! What every long-running `flowlane` service shares: SIGTERM, SIGINT,
//! SIGHUP (its terminal gone) and SIGQUIT stop it, through its clean-up, SIGUSR1 asks it for a report, reports are written atomically, and a
//! [`Watchdog`] stops it when its interface, namespace, XDP program or a
//! socket goes away.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use flowlane_dataplane::Dataplane;

/// The service's signal flags.
#[derive(Debug)]
pub struct ServiceSignals {
    stop: Arc<AtomicBool>,
    report: Arc<AtomicBool>,
}

impl ServiceSignals {
    /// Installs the handlers (flags only: nothing runs in signal context).
    pub fn install() -> Result<ServiceSignals> {
        let (stop, report) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        // A hang-up (an ssh session gone) or a quit must not end a service
        // by the default action, past its clean-up (XDP programs, the
        // host's IRQ affinities and RSS table the daemon puts back).
        for sig in [SIGTERM, SIGINT, SIGHUP, SIGQUIT] {
            signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
        }
        signal_hook::flag::register(signal_hook::consts::SIGUSR1, report.clone())
            .context("installing signal handlers")?;
        Ok(ServiceSignals { stop, report })
    }

    /// Whether SIGTERM, SIGINT, SIGHUP or SIGQUIT arrived.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether SIGUSR1 arrived since the last call.
    pub fn take_report_request(&self) -> bool {
        self.report.swap(false, Ordering::Relaxed)
    }
}

/// `--report FILE` (every service's): refused when something other than a
/// regular file is at the path, which writing the report would replace
/// ([`write_report`] renames over it: `--report /dev/full` replaced the
/// device node by the JSON).
pub fn report_path(text: &str) -> std::result::Result<PathBuf, String> {
    if text.is_empty() {
        return Err("give --report a file's path".into());
    }
    let path = PathBuf::from(text);
    match not_replaceable(&path) {
        Some(why) => Err(why),
        None => Ok(path),
    }
}

/// Why a report may not be renamed over `path`: something other than a
/// regular file (or nothing) is there.
fn not_replaceable(path: &Path) -> Option<String> {
    let kind = std::fs::symlink_metadata(path).ok()?.file_type();
    let what = if kind.is_file() {
        return None;
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a folder"
    } else {
        "a device, FIFO or socket"
    };
    Some(format!(
        "{} is {what}, which the report would replace (it is written beside the path and \
         renamed over it): give --report a file's path",
        path.display()
    ))
}

/// Writes `value` as pretty JSON to `path` through a temporary file and a
/// rename, so that readers never see half a report; never over something
/// other than a regular file ([`report_path`]).
pub fn write_report(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    if let Some(why) = not_replaceable(path) {
        anyhow::bail!("cannot write the report: {why}");
    }
    let tmp = path.with_extension("tmp");
    let written = std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        match (e.kind(), dir) {
            (std::io::ErrorKind::NotFound, Some(d)) => anyhow::anyhow!(
                "cannot write the report {}: directory {} does not exist (create it, or give --report another path)",
                path.display(),
                d.display()
            ),
            _ => anyhow::anyhow!("cannot write the report {}: {e}", path.display()),
        }
    })
}

/// How often a service's main thread checks what its data path attached to.
pub const WATCH_PERIOD: Duration = Duration::from_millis(250);

/// Checks from a service's main loop, at most every [`WATCH_PERIOD`], that
/// what the data path attached to is still there
/// ([`Dataplane::check`]): a service whose bed is removed under it stops
/// within a second with one line saying what vanished, instead of running on
/// a dead socket.
#[derive(Debug)]
pub struct Watchdog {
    /// The service's name, for the message.
    service: &'static str,
    next: Instant,
}

impl Watchdog {
    /// A watchdog for `service` (its command name), first checking at once.
    pub fn new(service: &'static str) -> Watchdog {
        Watchdog {
            service,
            next: Instant::now(),
        }
    }

    /// `Err` (one line: what vanished) once `dp`'s interface, namespace,
    /// XDP program or a socket is gone; the caller drops the data path and
    /// returns the error (exit status 1).
    pub fn check(&mut self, dp: &Dataplane) -> Result<()> {
        let now = Instant::now();
        if now < self.next {
            return Ok(());
        }
        self.next = now + WATCH_PERIOD;
        dp.check()
            .with_context(|| format!("{} stopped", self.service))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    /// A report is renamed over its path: never over a FIFO (or a device),
    /// which it would replace by a file.
    #[test]
    fn a_report_replaces_only_a_regular_file() {
        let dir = std::env::temp_dir().join(format!("fl-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let file = dir.join("report.json");
        let wrote = write_report(&fifo, &1);
        let still_fifo = std::fs::symlink_metadata(&fifo).map(|m| m.file_type().is_fifo());
        let to_file = write_report(&file, &1).map(|()| std::fs::read_to_string(&file));
        std::fs::remove_dir_all(&dir).unwrap();
        let e = wrote.expect_err("a FIFO is refused").to_string();
        assert!(e.contains("a device, FIFO or socket"), "{e}");
        assert!(still_fifo.unwrap(), "the FIFO is left as it was");
        assert_eq!(to_file.unwrap().unwrap(), "1");
        assert!(report_path("").is_err());
        assert!(report_path("/dev/null").unwrap_err().contains("--report"));
    }
}
