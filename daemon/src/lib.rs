//! `flowlane daemon`: the host side of flowlane. This first part finds the
//! running flowlane services (through their control sockets), serves their
//! counters as Prometheus metrics and answers which queue, CPU and NUMA
//! node process a flow now (on its own Unix socket, the services' JSON-line
//! protocol); applications work without it.
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

use flowlane_dataplane::control_socket::{ControlSocket, Request, Response};
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
    /// The daemon's socket cannot be made.
    #[error("the daemon's socket: {0} (pick another with --socket, or --socket none)")]
    Socket(String),
}

/// Where the daemon listens for hint requests unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/flowlane/daemon.sock";

/// The daemon's settings.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Where the metrics endpoint listens.
    pub metrics: SocketAddr,
    /// Where the services' control sockets are.
    pub run_dir: PathBuf,
    /// How long a service may take to answer a scrape.
    pub scrape_timeout: Duration,
    /// The daemon's own Unix socket (hints); None: none.
    pub socket: Option<PathBuf>,
}

impl DaemonConfig {
    /// The defaults: metrics on 127.0.0.1:9477, services in
    /// `/run/flowlane`, 500 ms per service.
    pub fn new() -> DaemonConfig {
        DaemonConfig {
            metrics: SocketAddr::from(([127, 0, 0, 1], 9477)),
            run_dir: PathBuf::from(flowlane_dataplane::control_socket::RUN_DIR),
            scrape_timeout: Duration::from_millis(500),
            socket: Some(PathBuf::from(DEFAULT_SOCKET)),
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig::new()
    }
}

/// A running daemon; stops when dropped (its socket removed).
#[derive(Debug)]
pub struct Daemon {
    metrics: MetricsServer,
    services: Arc<Services>,
    socket: Option<ControlSocket>,
}

impl Daemon {
    /// Starts the daemon.
    ///
    /// # Errors
    /// See [`MetricsServer::start`]; [`Error::Socket`] when its socket
    /// cannot be made (or another daemon answers on it).
    pub fn start(cfg: &DaemonConfig) -> Result<Daemon, Error> {
        let socket = cfg
            .socket
            .as_deref()
            .map(ControlSocket::bind)
            .transpose()
            .map_err(|e| Error::Socket(e.to_string()))?;
        let services = Arc::new(
            Services::new(cfg.run_dir.clone(), cfg.scrape_timeout)
                .excluding(socket.as_ref().map(|s| s.path().to_path_buf())),
        );
        Ok(Daemon {
            metrics: MetricsServer::start(cfg.metrics, services.clone())?,
            services,
            socket,
        })
    }

    /// Answers what waits on the daemon's socket (without blocking when
    /// nothing does): hints, asked of the services.
    pub fn poll(&mut self) {
        let services = &self.services;
        if let Some(s) = self.socket.as_mut() {
            s.poll(|req| match req {
                Request::Hint { flow } => services.hint(&flow),
                other => Response::Error {
                    message: format!(
                        "the daemon answers hints; ask the service's own socket for {other:?}"
                    ),
                },
            });
        }
    }

    /// Where the daemon's socket is, if it has one.
    pub fn socket_path(&self) -> Option<&std::path::Path> {
        self.socket.as_ref().map(|s| s.path())
    }

    /// Where the metrics endpoint listens.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics.local_addr()
    }
}
