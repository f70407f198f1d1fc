//! What every long-running `flowlane` service shares: SIGTERM/SIGINT stop
//! it, SIGUSR1 asks it for a report, and reports are written atomically.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};

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
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
        }
        signal_hook::flag::register(signal_hook::consts::SIGUSR1, report.clone())
            .context("installing signal handlers")?;
        Ok(ServiceSignals { stop, report })
    }

    /// Whether SIGTERM or SIGINT arrived.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether SIGUSR1 arrived since the last call.
    pub fn take_report_request(&self) -> bool {
        self.report.swap(false, Ordering::Relaxed)
    }
}

/// Writes `value` as pretty JSON to `path` through a temporary file and a
/// rename, so that readers never see half a report.
pub fn write_report(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
