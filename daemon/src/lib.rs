//! `flowlane daemon`: the host side of flowlane. This first part finds the
//! running flowlane services (through their control sockets) and serves
//! their counters as Prometheus metrics; applications work without it.
//!
//! ```text
//! flowlane daemon --metrics 127.0.0.1:9477
//! curl -s 127.0.0.1:9477/metrics | promtool check metrics
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod http;
pub mod metrics;
pub mod registry;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use http::MetricsServer;
pub use metrics::{render, Format, Scrape};
pub use registry::Services;

/// What went wrong starting the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The metrics address cannot be listened on.
    #[error("cannot listen on {addr} for metrics: {source} (is another daemon or exporter using it? pick another with --metrics)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("{0}")]
    Io(std::io::Error),
}

/// The daemon's settings.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Where the metrics endpoint listens.
    pub metrics: SocketAddr,
    /// Where the services' control sockets are.
    pub run_dir: PathBuf,
    /// How long a service may take to answer a scrape.
    pub scrape_timeout: Duration,
}

impl DaemonConfig {
    /// The defaults: metrics on 127.0.0.1:9477, services in
    /// `/run/flowlane`, 500 ms per service.
    pub fn new() -> DaemonConfig {
        DaemonConfig {
            metrics: SocketAddr::from(([127, 0, 0, 1], 9477)),
            run_dir: PathBuf::from(flowlane_dataplane::control_socket::RUN_DIR),
            scrape_timeout: Duration::from_millis(500),
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig::new()
    }
}

/// A running daemon; stops when dropped.
#[derive(Debug)]
pub struct Daemon {
    metrics: MetricsServer,
}

impl Daemon {
    /// Starts the daemon.
    ///
    /// # Errors
    /// See [`MetricsServer::start`].
    pub fn start(cfg: &DaemonConfig) -> Result<Daemon, Error> {
        let services = Arc::new(Services::new(cfg.run_dir.clone(), cfg.scrape_timeout));
        Ok(Daemon {
            metrics: MetricsServer::start(cfg.metrics, services)?,
        })
    }

    /// Where the metrics endpoint listens.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics.local_addr()
    }
}
