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

pub mod ask;
pub mod http;
pub mod metrics;
pub mod nic_state;
pub mod nic_xdp;
mod pages;
pub mod registry;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flowlane_dataplane::control_socket::{
    ControlSocket, FlowQuery, Handling, HostStatus, NicReport, Reply, Request, Response, SocketRole,
};
pub use http::MetricsServer;
pub use metrics::{render, Format, Scrape};
pub use registry::{NicStatsReader, Services};

/// What went wrong starting the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The metrics address cannot be listened on: said in one line, the
    /// OS error once (it is no [`std::error::Error::source`], which
    /// `{:#}` would print again), another exporter guessed only when the
    /// address is in use.
    #[error("cannot listen on {addr} for metrics: {why}{}", bind_hint(.why))]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        why: std::io::Error,
    },
    /// A system call failed.
    #[error("{0}")]
    Io(std::io::Error),
    /// The configuration file cannot be read or is not valid.
    #[error("--config {0}")]
    Config(String),
    /// The daemon's socket cannot be made: what is wrong and what to do,
    /// naming `--socket` once.
    #[error("{0}")]
    Socket(String),
    /// A NIC's state file cannot be read, written or removed
    /// ([`nic_state`]): what is wrong and what to do.
    #[error("{0}")]
    State(String),
}

/// What to do when the metrics address cannot be listened on: another
/// daemon or exporter is the likely cause only when the address is in use
/// (one that is not this host's, EADDRNOTAVAIL, is a mistyped address).
fn bind_hint(why: &std::io::Error) -> &'static str {
    match why.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (is another daemon or exporter using it? pick another with --metrics)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            " (no interface of this host has that address: give --metrics one that does)"
        }
        _ => " (pick another with --metrics)",
    }
}

/// The daemon's socket error: [`ControlSocket::bind_as`]'s, which names
/// `--socket` where the path is the problem, or, where the system refused
/// (a directory that cannot be made), with what to do added.
fn socket_error(e: flowlane_dataplane::Error) -> Error {
    match e {
        flowlane_dataplane::Error::Setup(message) => Error::Socket(message),
        other => Error::Socket(format!(
            "the daemon's socket: {other} (pick another with --socket, or none)"
        )),
    }
}

/// Where the daemon listens for hint requests unless told otherwise: a
/// directory of its own, so that the services' directory holds only
/// services (`flowlane rebalance status` picks the only one there).
pub const DEFAULT_SOCKET: &str = flowlane_dataplane::control_socket::DAEMON_SOCKET;

/// The daemon's socket, as its errors name it: `--socket` picks another.
const DAEMON_SOCKET_ROLE: SocketRole = SocketRole {
    name: "the daemon's socket",
    in_use_by: "a running daemon or service",
    flag: "--socket",
    or_else: ", or none",
};

/// The daemon's settings (`--config FILE`, then flags).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Where the metrics endpoint listens (in the file as the flag takes
    /// it: a link-local IPv6 address with its zone, the interface's name or
    /// index, `"[fe80::1%eth0]:9477"`, RFC 4007 §11).
    #[serde(deserialize_with = "listen_address")]
    pub metrics: SocketAddr,
    /// Where the services' control sockets are.
    pub run_dir: PathBuf,
    /// How long the services may take to answer a scrape, all asked at
    /// once (`scrape_timeout_ms` in the file: 1 to
    /// [`SCRAPE_TIMEOUT_MAX_MS`]).
    #[serde(rename = "scrape_timeout_ms", deserialize_with = "millis")]
    pub scrape_timeout: Duration,
    /// The daemon's own Unix socket (hints); None: none (`"none"` in the
    /// file).
    #[serde(deserialize_with = "socket_or_none")]
    pub socket: Option<PathBuf>,
    /// The NICs the daemon owns: their capabilities are read and their
    /// RSS and IRQ/NAPI plan applied on start (`--iface`, repeatable).
    pub ifaces: Vec<String>,
    /// Only report what the plan would change (`--dry-run`).
    pub dry_run: bool,
    /// Undo the daemon's changes to the NICs when it stops (the IRQ and
    /// NAPI affinities, threaded NAPI, an RSS table no service uses);
    /// false leaves them as configured (`--keep-on-exit`).
    pub restore_on_exit: bool,
    /// Where the originals of the NICs it owns are kept until it puts them
    /// back, for a daemon started after this one was killed
    /// (`--state-dir`; see [`nic_state`]).
    pub state_dir: PathBuf,
}

/// The longest `scrape_timeout_ms`: well within Prometheus' default
/// scrape timeout (10 s), so that a scrape that waited for services that
/// do not answer still reaches the scraper.
pub const SCRAPE_TIMEOUT_MAX_MS: u64 = 5_000;

fn millis<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let ms = <u64 as serde::Deserialize>::deserialize(d)?;
    if !(1..=SCRAPE_TIMEOUT_MAX_MS).contains(&ms) {
        return Err(serde::de::Error::custom(format!(
            "scrape_timeout_ms is 1 to {SCRAPE_TIMEOUT_MAX_MS}, not {ms}"
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// The `metrics` key, read by `--metrics`'s own parser
/// ([`flowlane_dataplane::zoned_addr::listen_address`]): a zone named by
/// its interface, and a link-local address without a zone refused here
/// rather than at bind (EINVAL).
fn listen_address<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    flowlane_dataplane::zoned_addr::listen_address(&text).map_err(serde::de::Error::custom)
}

fn socket_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let p = <PathBuf as serde::Deserialize>::deserialize(d)?;
    Ok((p.as_os_str() != "none").then_some(p))
}

impl DaemonConfig {
    /// The defaults: metrics on 127.0.0.1:9477, services in
    /// `/run/flowlane`, 500 ms per service, the NICs' state in
    /// `/run/flowlane-daemon`.
    pub fn new() -> DaemonConfig {
        DaemonConfig {
            metrics: SocketAddr::from(([127, 0, 0, 1], 9477)),
            run_dir: PathBuf::from(flowlane_dataplane::control_socket::RUN_DIR),
            scrape_timeout: Duration::from_millis(500),
            socket: Some(PathBuf::from(DEFAULT_SOCKET)),
            ifaces: Vec::new(),
            dry_run: false,
            restore_on_exit: true,
            state_dir: PathBuf::from(nic_state::DEFAULT_STATE_DIR),
        }
    }
}

impl DaemonConfig {
    /// Reads a configuration file (TOML; keys left out keep their
    /// defaults, unknown keys are errors).
    ///
    /// # Errors
    /// [`Error::Config`] naming the file and what is wrong in it.
    pub fn from_file(path: &std::path::Path) -> Result<DaemonConfig, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            Error::Config(format!("{}: {first}: {}", path.display(), e.message()))
        })
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig::new()
    }
}

/// Hints answered at once, at most: each asks every service, under the
/// scrape timeout, on a thread of its own (off the daemon's loop, which
/// must stay free for signals); more are told to ask again.
pub const HINTS_AT_ONCE: usize = 8;

/// A running daemon; stops when dropped (its socket removed).
#[derive(Debug)]
pub struct Daemon {
    metrics: MetricsServer,
    services: Arc<Services>,
    socket: Option<ControlSocket>,
    /// Hints being answered now.
    hints: Arc<AtomicUsize>,
}

/// One of [`HINTS_AT_ONCE`] places, freed when dropped.
struct HintPlace(Arc<AtomicUsize>);

impl HintPlace {
    /// A place, if one is free.
    fn take(taken: &Arc<AtomicUsize>) -> Option<HintPlace> {
        taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < HINTS_AT_ONCE).then_some(n + 1)
            })
            .ok()
            .map(|_| HintPlace(taken.clone()))
    }
}

impl Drop for HintPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
            .map(|path| ControlSocket::bind_as(path, &DAEMON_SOCKET_ROLE))
            .transpose()
            .map_err(socket_error)?;
        let services = Arc::new(
            Services::new(cfg.run_dir.clone(), cfg.scrape_timeout)
                .excluding(socket.as_ref().map(|s| s.path().to_path_buf())),
        );
        Ok(Daemon {
            metrics: MetricsServer::start(cfg.metrics, services.clone())?,
            services,
            socket,
            hints: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Answers what waits on the daemon's socket, never blocking: the NICs
    /// it owns and registrations at once, their answers written as the
    /// clients take them (over the next polls, as a service's socket does:
    /// a client that reads slowly holds up nothing); hints, which ask the
    /// services, each on a thread of its own ([`HINTS_AT_ONCE`] at most),
    /// so that services that do not answer never hold up the caller's loop
    /// (its signals: the NICs put back before systemd's stop timeout).
    pub fn poll(&mut self) {
        let (services, hints) = (&self.services, &self.hints);
        if let Some(s) = self.socket.as_mut() {
            s.poll_deferring(|req| match req {
                Request::Hint { flow } => Handling::Defer(Box::new(move |reply| {
                    hint_aside(services, hints, flow, reply)
                })),
                other => Handling::Answer(Box::new(answer(services, other))),
            });
        }
    }

    /// Records the NICs the daemon owns (read and planned by the caller,
    /// which holds the effects): served on the metrics page and the socket.
    pub fn set_nics(&self, nics: Vec<NicReport>) {
        self.services.set_nics(nics);
    }

    /// How each scrape reads the owned NICs' per-queue counters (the
    /// caller holds the effect: netdev `qstats-get`).
    pub fn set_nic_stats(&self, reader: NicStatsReader) {
        self.services.set_nic_stats(reader);
    }

    /// The running services' control sockets: those in the run directory
    /// and those registered on the daemon's socket from elsewhere.
    pub fn service_sockets(&self) -> Vec<std::path::PathBuf> {
        self.services.sockets()
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

/// Answers a hint on a thread of its own, if a place is free; otherwise
/// says to ask again.
fn hint_aside(services: &Arc<Services>, hints: &Arc<AtomicUsize>, flow: FlowQuery, reply: Reply) {
    let Some(place) = HintPlace::take(hints) else {
        reply.send(&Response::Error {
            message: format!("the daemon is answering {HINTS_AT_ONCE} hints already: ask again"),
        });
        return;
    };
    let services = services.clone();
    let asked = std::thread::Builder::new()
        .name("flowlane-hint".into())
        .spawn(move || {
            let _place = place;
            reply.send(&services.hint(&flow));
        });
    if let Err(e) = asked {
        // The hint (and its connection) dropped: closed unanswered.
        tracing::warn!("a hint left unanswered: no thread for it: {e}");
    }
}

/// The answer to what is not a hint: the NICs the daemon owns, a
/// registration.
fn answer(services: &Services, request: Request) -> Response {
    match request {
        Request::Host => Response::Host(HostStatus {
            nics: services.nics(),
            services: services.sockets(),
        }),
        Request::Register {
            socket,
            service,
            pid,
        } => match services.register(&socket) {
            Ok(new) => {
                // Services announce themselves again every 5 s: said once.
                if new {
                    tracing::info!(%service, pid, socket = %socket.display(), "registered");
                } else {
                    tracing::debug!(%service, pid, socket = %socket.display(), "registered again");
                }
                Response::Registered
            }
            Err(message) => Response::Error { message },
        },
        other => Response::Error {
            message: format!("{NOT_A_SERVICE}; ask the service's own socket for {other:?}"),
        },
    }
}

/// How a daemon's answer to what only a service answers (its counters,
/// status, moves) begins: a daemon's socket in a run directory (a daemon
/// in a bed's namespace given the host's) is told from a service's by it,
/// and left out of what is said of the services.
pub const NOT_A_SERVICE: &str = "the daemon answers hints and host questions";

/// Whether `r` is a daemon's answer to a request only a service answers
/// ([`NOT_A_SERVICE`]): the socket asked is a daemon's.
pub fn is_daemon_answer(r: &Response) -> bool {
    matches!(r, Response::Error { message } if message.starts_with(NOT_A_SERVICE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::time::Instant;

    /// Hints asked of a service that never answers, as many as are
    /// answered at once, all waiting when the daemon's loop looks: one
    /// poll does not wait for them (its loop stays free for signals); each
    /// is answered within about the scrape timeout; one more meanwhile is
    /// told to ask again.
    #[test]
    fn hints_do_not_hold_up_the_daemon_s_loop() {
        let dir = std::env::temp_dir().join(format!("fl-daemon-hints-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        let _silent = UnixListener::bind(run.join("silent.1.sock")).unwrap();
        let timeout = Duration::from_millis(300);
        let cfg = DaemonConfig {
            metrics: SocketAddr::from(([127, 0, 0, 1], 0)),
            run_dir: run,
            scrape_timeout: timeout,
            socket: Some(dir.join("daemon.sock")),
            ..DaemonConfig::default()
        };
        let mut daemon = Daemon::start(&cfg).unwrap();
        let line = flowlane_dataplane::control_socket::request_line(&Request::Hint {
            flow: FlowQuery {
                src: [10, 0, 0, 1].into(),
                sport: 1,
                dst: [10, 0, 0, 2].into(),
                dport: 2,
                proto: "tcp".into(),
            },
        })
        .unwrap();
        let ask = || {
            let mut c = UnixStream::connect(dir.join("daemon.sock")).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(&line).unwrap();
            c
        };
        let answer_of = |mut c: UnixStream| {
            let mut out = String::new();
            let _ = c.read_to_string(&mut out);
            out
        };
        let clients: Vec<UnixStream> = (0..HINTS_AT_ONCE).map(|_| ask()).collect();
        let began = Instant::now();
        daemon.poll();
        let took = began.elapsed();
        assert!(took < timeout * 3 / 2, "one poll took {took:?}");
        // One more while they are under way: told at once.
        let more = ask();
        daemon.poll();
        let told = answer_of(more);
        assert!(told.contains("ask again"), "{told}");
        let answers: Vec<String> = clients.into_iter().map(answer_of).collect();
        assert!(began.elapsed() < timeout * 3, "{:?}", began.elapsed());
        for a in answers {
            assert!(a.contains("no answer on"), "{a}");
        }
        drop(daemon);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A client that asks the daemon for its NICs and reads the answer
    /// slowly holds up none of the daemon's polls (its loop stays free for
    /// signals: the NICs put back on SIGTERM), and gets its whole answer,
    /// written as it takes it.
    #[test]
    fn a_slow_reader_of_the_host_answer_does_not_hold_up_the_daemon_s_loop() {
        let dir = std::env::temp_dir().join(format!("fl-daemon-slowhost-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let cfg = DaemonConfig {
            metrics: SocketAddr::from(([127, 0, 0, 1], 0)),
            run_dir: dir.join("run"),
            socket: Some(dir.join("daemon.sock")),
            ..DaemonConfig::default()
        };
        let mut daemon = Daemon::start(&cfg).unwrap();
        // A report of about 2 MB.
        daemon.set_nics(vec![NicReport {
            caps: flowlane_numa_sched::NicCaps {
                iface: "eth1".into(),
                ..Default::default()
            },
            workers: 1,
            plan: Vec::new(),
            dry_run: false,
            changes: Vec::new(),
            changes_total: 0,
            notes: vec!["n".repeat(1 << 10); 2 << 10],
            restore_on_exit: true,
        }]);
        let path = dir.join("daemon.sock");
        // Reads 64 KiB every 100 ms: the answer takes it about 3.2 s.
        let client = std::thread::spawn(move || {
            let mut c = UnixStream::connect(path).unwrap();
            c.write_all(b"{\"op\":\"host\"}\n").unwrap();
            let mut buf = vec![0u8; 64 << 10];
            let mut got = Vec::new();
            loop {
                std::thread::sleep(Duration::from_millis(100));
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            got
        });
        let began = Instant::now();
        let mut longest = Duration::ZERO;
        while !client.is_finished() && began.elapsed() < Duration::from_secs(20) {
            let poll = Instant::now();
            daemon.poll();
            longest = longest.max(poll.elapsed());
            std::thread::sleep(Duration::from_millis(5));
        }
        let got = client.join().unwrap();
        // A correctness bound with a wide margin: the poll that answers
        // makes the answer (2 MB of JSON: a few hundred milliseconds in a
        // debug build on a busy machine), the others wait 2 ms at most.
        assert!(
            longest < Duration::from_secs(1),
            "one poll took {longest:?}"
        );
        match serde_json::from_slice(got.trim_ascii_end()) {
            Ok(Response::Host(h)) => assert_eq!(h.nics[0].notes.len(), 2 << 10),
            other => panic!("{} bytes, not the whole answer: {other:?}", got.len()),
        }
        drop(daemon);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `e` with its causes, as `flowlane` prints an error (`{:#}`).
    fn said(e: &Error) -> String {
        let mut line = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            line.push_str(&format!(": {c}"));
            cause = c.source();
        }
        line
    }

    /// A metrics address that cannot be listened on is said in one line,
    /// the OS error once; another daemon or exporter is guessed only when
    /// the address is in use.
    #[test]
    fn a_metrics_address_that_cannot_be_listened_on_is_said_once() {
        let services = || {
            Arc::new(Services::new(
                std::env::temp_dir(),
                Duration::from_millis(1),
            ))
        };
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = MetricsServer::start(taken.local_addr().unwrap(), services()).unwrap_err();
        let line = said(&e);
        assert_eq!(line.matches("os error").count(), 1, "{line}");
        assert!(line.contains("another daemon or exporter"), "{line}");
        // TEST-NET-1 (RFC 5737): no interface of this host has it.
        let e = MetricsServer::start("192.0.2.55:19479".parse().unwrap(), services()).unwrap_err();
        let line = said(&e);
        assert_eq!(line.matches("os error").count(), 1, "{line}");
        assert!(!line.contains("another daemon"), "{line}");
        assert!(line.contains("--metrics") && !line.contains('\n'), "{line}");
    }

    /// The daemon's socket errors name its own flag, `--socket`, once: a
    /// path that is no socket, and one another daemon answers on.
    #[test]
    fn the_daemon_s_socket_errors_name_its_own_flag_once() {
        let dir = std::env::temp_dir().join(format!("fl-daemon-sockflag-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let cfg = |socket: PathBuf| DaemonConfig {
            metrics: SocketAddr::from(([127, 0, 0, 1], 0)),
            run_dir: dir.join("run"),
            socket: Some(socket),
            ..DaemonConfig::default()
        };
        let file = dir.join("not-a-socket");
        std::fs::write(&file, "x").unwrap();
        let first = Daemon::start(&cfg(dir.join("daemon.sock"))).unwrap();
        for path in [file, dir.join("daemon.sock")] {
            let e = Daemon::start(&cfg(path)).unwrap_err().to_string();
            assert_eq!(e.matches("--socket").count(), 1, "{e}");
            assert!(
                e.ends_with("--socket, or none)")
                    || e.ends_with("--socket a path of its own, or none"),
                "{e}"
            );
        }
        drop(first);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn file(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("fl-daemon-cfg-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The documented configuration is the defaults, key for key.
    #[test]
    fn the_documented_config_is_the_default() {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contrib/flowlane/daemon.toml");
        assert_eq!(
            DaemonConfig::from_file(&path).unwrap(),
            DaemonConfig::default()
        );
    }

    #[test]
    fn keys_left_out_keep_their_defaults_and_none_means_no_socket() {
        let p = file(
            "partial.toml",
            "socket = \"none\"\nscrape_timeout_ms = 50\n",
        );
        let c = DaemonConfig::from_file(&p).unwrap();
        assert_eq!(c.socket, None);
        assert_eq!(c.scrape_timeout, Duration::from_millis(50));
        assert_eq!(c.metrics, DaemonConfig::default().metrics);
        std::fs::remove_file(p).unwrap();
    }

    /// The file's `metrics` takes what `--metrics` takes: a link-local
    /// address's zone by the interface's name (`lo`, index 1 in every
    /// network namespace) or index, the scope id bind(2) needs.
    #[test]
    fn the_metrics_key_takes_a_zone_by_name_as_the_flag_does() {
        for (zone, name) in [("lo", "name"), ("1", "index")] {
            let p = file(
                &format!("zone-{name}.toml"),
                &format!("metrics = \"[fe80::1%{zone}]:9477\"\n"),
            );
            let c = DaemonConfig::from_file(&p).unwrap();
            std::fs::remove_file(p).unwrap();
            let SocketAddr::V6(v6) = c.metrics else {
                panic!("{:?}", c.metrics)
            };
            assert_eq!(
                (v6.ip().to_string(), v6.port(), v6.scope_id()),
                ("fe80::1".to_string(), 9477, 1),
                "zone by {name}"
            );
        }
    }

    #[test]
    fn mistakes_are_named_with_the_file() {
        for (text, says) in [
            ("metric = \"1.2.3.4:5\"\n", "unknown field `metric`"),
            ("metrics = \"localhost\"\n", "localhost: give ADDR:PORT"),
            (
                "metrics = \"[fe80::1]:9477\"\n",
                "fe80::1 is link-local: name its interface, [fe80::1%IF]:9477",
            ),
            (
                "metrics = \"[fe80::1%nosuchif0]:9477\"\n",
                "no interface nosuchif0 here",
            ),
            ("scrape_timeout_ms = 0\n", "scrape_timeout_ms is 1 to 5000"),
            (
                "scrape_timeout_ms = 10000\n",
                "scrape_timeout_ms is 1 to 5000",
            ),
            ("run_dir = \n", ""),
        ] {
            let p = file("bad.toml", text);
            let e = DaemonConfig::from_file(&p).unwrap_err().to_string();
            assert!(
                e.starts_with("--config ") && e.contains("bad.toml") && e.contains(says),
                "{e}"
            );
            std::fs::remove_file(p).unwrap();
        }
        let e =
            DaemonConfig::from_file(std::path::Path::new("/nonexistent/daemon.toml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/daemon.toml"), "{e}");
    }
}
