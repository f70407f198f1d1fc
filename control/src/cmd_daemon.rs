//! `flowlane daemon`: serves the running flowlane services' counters as
//! Prometheus metrics until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args as ClapArgs;
use flowlane_apps::service::ServiceSignals;
use flowlane_daemon::{Daemon, DaemonConfig};

/// `flowlane daemon` flags.
#[derive(ClapArgs, Debug)]
pub(crate) struct Args {
    /// Address of the metrics endpoint (`GET /metrics`: the classic text
    /// format, OpenMetrics to scrapers that ask for it).
    #[arg(long, default_value = "127.0.0.1:9477")]
    metrics: SocketAddr,
    /// Where the services' control sockets are.
    #[arg(long, default_value = flowlane_dataplane::control_socket::RUN_DIR)]
    run_dir: PathBuf,
    /// The daemon's Unix socket, where `flowlane hint --daemon` asks which
    /// queue, CPU and node process a flow (`none`: no socket).
    #[arg(long, value_name = "PATH", default_value = flowlane_daemon::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// How long a service may take to answer a scrape, in milliseconds.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    scrape_timeout_ms: u64,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let signals = ServiceSignals::install()?;
    let mut daemon = Daemon::start(&DaemonConfig {
        metrics: args.metrics,
        run_dir: args.run_dir.clone(),
        scrape_timeout: Duration::from_millis(args.scrape_timeout_ms),
        socket: (args.socket.as_os_str() != "none").then(|| args.socket.clone()),
    })?;
    println!(
        "{}",
        serde_json::json!({
            "event": "ready",
            "metrics": daemon.metrics_addr().to_string(),
            "socket": daemon.socket_path(),
            "run_dir": args.run_dir,
        })
    );
    while !signals.stop_requested() {
        daemon.poll();
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(daemon);
    Ok(())
}
