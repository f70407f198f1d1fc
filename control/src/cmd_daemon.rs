//! `flowlane daemon`: serves the running flowlane services' counters as
//! Prometheus metrics and answers flow hints until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args as ClapArgs;
use flowlane_apps::service::ServiceSignals;
use flowlane_daemon::{Daemon, DaemonConfig};

/// `flowlane daemon` flags; each wins over `--config`'s key of the same
/// name, and both over the defaults (contrib/flowlane/daemon.toml).
#[derive(ClapArgs, Debug)]
pub(crate) struct Args {
    /// A configuration file (TOML: metrics, run_dir, socket,
    /// scrape_timeout_ms).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address of the metrics endpoint (`GET /metrics`: the classic text
    /// format, OpenMetrics to scrapers that ask for it) [default:
    /// 127.0.0.1:9477].
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Where the services' control sockets are [default: /run/flowlane].
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// The daemon's Unix socket, where `flowlane hint --daemon` asks which
    /// queue, CPU and node process a flow (`none`: no socket) [default:
    /// /run/flowlane-daemon/daemon.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// How long a service may take to answer a scrape, in milliseconds
    /// [default: 500].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    scrape_timeout_ms: Option<u64>,
}

impl Args {
    /// The configuration: defaults, then the file, then the flags.
    fn config(&self) -> Result<DaemonConfig> {
        let mut c = match &self.config {
            Some(path) => DaemonConfig::from_file(path)?,
            None => DaemonConfig::default(),
        };
        if let Some(m) = self.metrics {
            c.metrics = m;
        }
        if let Some(d) = &self.run_dir {
            c.run_dir = d.clone();
        }
        if let Some(s) = &self.socket {
            c.socket = (s.as_os_str() != "none").then(|| s.clone());
        }
        if let Some(ms) = self.scrape_timeout_ms {
            c.scrape_timeout = Duration::from_millis(ms);
        }
        Ok(c)
    }
}

pub(crate) fn run(args: Args) -> Result<()> {
    let config = args.config()?;
    let signals = ServiceSignals::install()?;
    let mut daemon = Daemon::start(&config)?;
    println!(
        "{}",
        serde_json::json!({
            "event": "ready",
            "metrics": daemon.metrics_addr().to_string(),
            "socket": daemon.socket_path(),
            "run_dir": config.run_dir,
        })
    );
    while !signals.stop_requested() {
        daemon.poll();
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(daemon);
    Ok(())
}
