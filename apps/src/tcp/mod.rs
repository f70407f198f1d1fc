//! TCP examples on flowlane's data path: `echo-server`, `http-server`,
//! `bulk-sink` and `bulk-source`. Each queue's worker runs its own
//! `flowlane_tcp::Stack` and the application handler to completion
//! (`flowlane_dataplane::tcp_handler`); the main thread only waits, writes
//! reports and prints results. With `--backend kernel` the same handlers
//! run on Linux TCP sockets (`flowlane_kernel`), one pinned loop per core.
//!
//! Output: one JSON line on stdout per finished transfer (bulk commands)
//! and a final `{"event":"summary",...}` line with the per-queue TCP
//! counters (corrupted segments dropped by checksum included) and each
//! worker's CPU time. `--report FILE` is written once the data path is up
//! (tests wait for it), on SIGUSR1 and at exit. SIGTERM/SIGINT exit cleanly.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_app::{Placement, Setup, SetupExt};
use flowlane_dataplane::control_socket::{QueuePairCounters, QueueSteering, RelayMemoryCounters};
use flowlane_dataplane::placement::machine_placement;
use flowlane_dataplane::service_args::{
    listen_port, queue_count, Backend, CongestionChoice, DataPathArgs, EcnChoice, ExecMode,
    RebalanceArgs,
};
use flowlane_dataplane::service_control::{move_line, ServiceControl};
use flowlane_dataplane::tcp_service;
use flowlane_dataplane::zoned_addr::{self, ZonedSocketAddr};
use flowlane_dataplane::{
    app_thread_cpu_ns, worker_cpu_ns, BucketSnapshot, TcpCountersSnapshot, TcpService,
    TcpServiceConfig,
};
use flowlane_kernel::{CoreCounters, KernelConfig, KernelService, Limits};
use flowlane_qp::{QueuePairConfig, QueuePairs, MAX_APP_THREADS};
use serde_json::{json, Value};

use crate::bed_entry;
use crate::service::{write_report, ServiceSignals, Watchdog};

mod allow;
mod bulk;
mod echo;
mod http;
mod http_framing;
mod http_stop;
mod hyper_server;
mod idle;
mod kernel_view;
mod rss;

use allow::{AllowArgs, AllowFrom};
use bulk::{Sink, Source};
use echo::Echo;
use http::{Http, HttpCounters};
use idle::IdleCounters;
use kernel_view::KernelView;
pub use rss::NicAccess;

/// The TCP example commands (flattened into `flowlane`'s command list).
#[derive(clap::Subcommand, Debug)]
pub enum TcpCmd {
    /// TCP echo server on flowlane's data path (flowlane-tcp, one stack per
    /// queue).
    EchoServer(EchoArgs),
    /// Minimal HTTP/1.1 responder (fixed response, keep-alive).
    HttpServer(HttpArgs),
    /// Receives bulk TCP transfers; prints bytes, time and sha256 of each.
    BulkSink(SinkArgs),
    /// Sends bulk TCP transfers of pseudo-random bytes to a server; prints
    /// bytes, time and sha256 of each.
    BulkSource(SourceArgs),
    /// HTTP/1.1 server written on hyper and tokio, served by flowlane's TCP
    /// (tokio on queue-pair mode), or by tokio's own listener with
    /// `--tokio-baseline`.
    HyperServer(HyperArgs),
}

/// Flags shared by the TCP examples.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Interface to serve.
    #[arg(long, default_value = "xsk0")]
    pub iface: String,
    /// Which TCP runs the service: flowlane's on AF_XDP, or the kernel's
    /// sockets (one pinned loop per core; `--queues` cores, default the
    /// interface's queue count). Default: xdp.
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Where the handlers run: `rtc` on the network cores, inline with
    /// packet processing; `queue-pair` on application threads fed through
    /// per-core queues. Default: rtc (hyper-server: queue-pair, its only
    /// mode).
    #[arg(long, value_enum)]
    pub mode: Option<ExecMode>,
    /// Application threads in queue-pair mode (default: one per core; at
    /// most one per core: each core is served by one thread).
    #[arg(long, value_name = "N", value_parser = queue_count::<u32>)]
    pub app_threads: Option<u32>,
    /// Workers in all, on the AF_XDP backend (default: one per queue).
    /// More than the queues: each extra worker serves an even share of one
    /// queue's RSS buckets, whose frames that queue's worker forwards to it
    /// and through which it sends (software spill, for a NIC with fewer
    /// queues than the cores to use). Buckets do not move between workers
    /// then (`--rebalance off`).
    #[arg(long, value_name = "N", value_parser = queue_count::<u32>)]
    pub workers: Option<u32>,
    /// The data path's flags (bed, queues, RSS, neighbours, busy polling).
    #[command(flatten)]
    pub data_path: DataPathArgs,
    /// `--rebalance auto|off`: moving buckets between queues.
    #[command(flatten)]
    pub rebalance: RebalanceArgs,
    /// Write a JSON report here (once up, on SIGUSR1 and on exit).
    #[arg(long, value_parser = crate::service::report_path)]
    pub report: Option<PathBuf>,
    /// Give up (exit 1) after this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub timeout: u64,
    /// Maximum segment lifetime in milliseconds (TIME-WAIT lasts twice
    /// this; default: the stack's, 30 s).
    #[arg(long)]
    pub msl_ms: Option<u64>,
}

impl Common {
    /// `--mode`, rtc unless given.
    fn mode(&self) -> ExecMode {
        self.mode.unwrap_or(ExecMode::Rtc)
    }

    /// `--backend`, xdp unless given.
    fn backend(&self) -> Backend {
        self.backend.unwrap_or(Backend::Xdp)
    }
}

/// Flags of `echo-server`.
#[derive(clap::Args, Debug, Clone)]
pub struct EchoArgs {
    #[command(flatten)]
    common: Common,
    /// TCP port.
    #[arg(long, default_value_t = 7, value_parser = listen_port)]
    port: u16,
    /// Seconds a connection may go without a byte echoed before it is
    /// closed (idle or stalled peers do not hold connection slots); 0:
    /// never.
    #[arg(long, default_value_t = 0)]
    idle_timeout: u64,
    #[command(flatten)]
    allow: AllowArgs,
}

/// Flags of `http-server`.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpArgs {
    #[command(flatten)]
    common: Common,
    /// TCP port.
    #[arg(long, default_value_t = 80, value_parser = listen_port)]
    port: u16,
    /// Body of the fixed response.
    #[arg(long, default_value = "hello from flowlane\n")]
    body: String,
    /// Seconds a connection may go without a byte either way before it is
    /// closed (a FIN between requests, a reset in the middle of one), and
    /// that a request may take from its first byte, plus a second per 500
    /// bytes of its body (a reset): slow or stalled clients do not hold
    /// connection slots; 0: never.
    #[arg(long, default_value_t = 60)]
    idle_timeout: u64,
    #[command(flatten)]
    allow: AllowArgs,
}

/// Flags of `hyper-server`.
#[derive(clap::Args, Debug, Clone)]
pub struct HyperArgs {
    #[command(flatten)]
    common: Common,
    /// TCP port.
    #[arg(long, default_value_t = 80, value_parser = listen_port)]
    port: u16,
    /// Body of every response.
    #[arg(long, default_value = "hello from flowlane\n")]
    body: String,
    /// Serve the same hyper service on tokio's own `TcpListener` (kernel
    /// TCP, a multi-thread runtime with one worker per core) instead of
    /// flowlane: what hyper on flowlane is compared with.
    #[arg(long)]
    tokio_baseline: bool,
    /// Seconds a connection may go without a byte either way before it is
    /// closed, and that a request head may take from the connection's
    /// start or the previous response (hyper's header read timeout): slow
    /// or stalled clients do not hold connection slots; 0: never.
    #[arg(long, default_value_t = 60)]
    idle_timeout: u64,
    #[command(flatten)]
    allow: AllowArgs,
}

/// Flags of `bulk-sink`.
#[derive(clap::Args, Debug, Clone)]
pub struct SinkArgs {
    #[command(flatten)]
    common: Common,
    /// TCP port.
    #[arg(long, default_value_t = 5001, value_parser = listen_port)]
    port: u16,
    /// Exit after this many transfers (0: run until SIGTERM).
    #[arg(long, default_value_t = 0)]
    count: usize,
    /// Count bytes only (no sha256): for throughput measurements.
    #[arg(long)]
    no_hash: bool,
    /// Seconds a transfer may go without a byte before it is reset and
    /// reported (`ok: false`, `IdleTimeout`); 0: never.
    #[arg(long, default_value_t = 0)]
    idle_timeout: u64,
    #[command(flatten)]
    allow: AllowArgs,
}

/// Flags of `bulk-source`.
#[derive(clap::Args, Debug, Clone)]
pub struct SourceArgs {
    #[command(flatten)]
    common: Common,
    /// Server to send to: `ADDR:PORT` (`[V6]:PORT`), port 1-65535; a
    /// link-local IPv6 server as `[fe80::1%IF]:PORT` (RFC 4007 §11: the
    /// interface's name or index), or without `%IF` on `--iface`.
    #[arg(long, value_name = "ADDR:PORT", value_parser = server_address)]
    connect: ZonedSocketAddr,
    /// Bytes per connection.
    #[arg(long, default_value_t = 64 << 20)]
    bytes: u64,
    /// Connections (at least 1). Every queue's worker opens
    /// `connections / queues` of them (queue 0 the remainder) from ports
    /// whose replies RSS steers back to it.
    #[arg(long, default_value_t = 1, value_parser = connection_count)]
    connections: usize,
    /// Seed of the pseudo-random payload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The most connections `bulk-source` opens: each one to the server takes
/// a local port of its own.
const MAX_SOURCE_CONNECTIONS: usize = 65_535;

/// `bulk-source --connect ADDR:PORT`: port 0 is refused (no server
/// listens there: the run started, then every connect failed with only
/// "invalid address").
fn server_address(text: &str) -> std::result::Result<ZonedSocketAddr, String> {
    let addr = ZonedSocketAddr::parse(text).ok_or_else(|| {
        format!("{text}: give ADDR:PORT (10.0.0.1:5001, [fd00::1]:5001, [fe80::1%eth0]:5001)")
    })?;
    if addr.addr.port() == 0 {
        return Err(format!("{text}: a port must be 1-65535"));
    }
    Ok(addr)
}

/// `bulk-source`'s server as `backend` opens it: a link-local one scoped
/// by its zone or `--iface` on kernel sockets, and refused in one line,
/// before anything starts, with neither (connect(2) failed "invalid
/// address" after the start); see [`zoned_addr::scoped_peer`].
fn server_for(connect: &ZonedSocketAddr, c: &Common) -> Result<SocketAddr> {
    let zone = connect
        .zone_index()
        .map_err(|e| anyhow::anyhow!("--connect {e}"))?;
    let iface_index = nix::net::if_::if_nametoindex(c.iface.as_str()).ok();
    let keep_scope = c.backend() == Backend::Kernel;
    zoned_addr::scoped_peer(connect.addr, zone, &c.iface, iface_index, keep_scope)
        .map_err(|e| anyhow::anyhow!("--connect {connect}: {e}"))
}

/// `bulk-source --connections N`: at least one (none would be a transfer
/// that never ends), at most [`MAX_SOURCE_CONNECTIONS`] (4294967295 was
/// taken, and the process grew to 22 GB opening them, one core's start,
/// before the OOM killer ended it).
fn connection_count(text: &str) -> std::result::Result<usize, String> {
    use std::num::IntErrorKind;
    let too_many = || {
        format!(
            "at most {MAX_SOURCE_CONNECTIONS} (each connection to the server takes a local port \
             of its own)"
        )
    };
    match text.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1 (the connections to open)".into()),
        Ok(n) if n <= MAX_SOURCE_CONNECTIONS => Ok(n),
        Ok(_) => Err(too_many()),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => Err(too_many()),
        Err(_) => Err("expected a number of connections (at least 1)".into()),
    }
}

/// Refuses, before anything starts (root and the bed included), flags
/// that the chosen backend or mode would ignore. (`hyper-server` runs
/// queue-pair mode only: its `--app-threads` always applies.)
fn refuse_ignored_flags(cmd: &TcpCmd, c: &Common) -> Result<()> {
    let has_rtc = !matches!(cmd, TcpCmd::HyperServer(_));
    if has_rtc && c.app_threads.is_some() && c.mode() != ExecMode::QueuePair {
        bail!(
            "--app-threads needs --mode queue-pair (in rtc mode the handlers run on the network \
             cores): add --mode queue-pair, or drop --app-threads"
        );
    }
    refuse_what_kernel_sockets_lack(c)?;
    c.rebalance.refuse_unpriced().map_err(anyhow::Error::msg)
}

/// Runs one of the TCP examples. `nic` reads the NIC's RSS when no
/// `--rss-key/--rss-table` (or `--bed`) is given, and writes it when
/// buckets move.
pub fn run(cmd: TcpCmd, nic: NicAccess) -> Result<()> {
    let (what, common, listen) = match &cmd {
        TcpCmd::EchoServer(a) => ("flowlane echo-server", &a.common, Some(a.port)),
        TcpCmd::HttpServer(a) => ("flowlane http-server", &a.common, Some(a.port)),
        TcpCmd::BulkSink(a) => ("flowlane bulk-sink", &a.common, Some(a.port)),
        TcpCmd::BulkSource(a) => ("flowlane bulk-source", &a.common, None),
        TcpCmd::HyperServer(a) => ("flowlane hyper-server", &a.common, Some(a.port)),
    };
    if let TcpCmd::HyperServer(a) = &cmd {
        hyper_server::check_flags(a)?;
    }
    refuse_ignored_flags(&cmd, common)?;
    // Root only for what the command does: a bed, AF_XDP (hyper's
    // `--tokio-baseline` serves on kernel sockets whatever `--backend`).
    let backend = match &cmd {
        TcpCmd::HyperServer(a) if a.tokio_baseline => Backend::Kernel,
        _ => common.backend(),
    };
    bed_entry::enter_on(what, backend, &common.data_path, listen.as_slice())?;
    match cmd {
        TcpCmd::HyperServer(a) => hyper_server::run(a, nic),
        TcpCmd::EchoServer(a) => {
            let port = a.port;
            let allow = a.allow.peers();
            let idle = idle::limit(a.idle_timeout);
            let counters = Arc::new(IdleCounters::default());
            let c = counters.clone();
            let _ = APPLICATION.set(Box::new(move || json!(&*c)));
            serve(
                "echo-server",
                &a.common,
                nic,
                &[port],
                None,
                0,
                move |h, _tx| {
                    h.listen(port, Echo::new(allow.clone(), idle, counters.clone()))?;
                    Ok(())
                },
            )
        }
        TcpCmd::HttpServer(a) => {
            let port = a.port;
            let body = a.body;
            let allow = a.allow.peers();
            let idle = idle::limit(a.idle_timeout);
            let counters = Arc::new(HttpCounters::default());
            let c = counters.clone();
            let _ = APPLICATION.set(Box::new(move || json!(&*c)));
            serve(
                "http-server",
                &a.common,
                nic,
                &[port],
                None,
                0,
                move |h, _tx| {
                    h.listen(
                        port,
                        Http::new(&body, allow.clone(), idle, counters.clone()),
                    )?;
                    Ok(())
                },
            )
        }
        TcpCmd::BulkSink(a) => {
            let (port, hash) = (a.port, !a.no_hash);
            let allow = a.allow.peers();
            let idle = idle::limit(a.idle_timeout);
            let counters = Arc::new(IdleCounters::default());
            let c = counters.clone();
            let _ = APPLICATION.set(Box::new(move || json!(&*c)));
            serve(
                "bulk-sink",
                &a.common,
                nic,
                &[port],
                None,
                a.count,
                move |h, tx| {
                    h.listen(
                        port,
                        Sink::new(hash, tx, allow.clone(), idle, counters.clone()),
                    )?;
                    Ok(())
                },
            )
        }
        TcpCmd::BulkSource(a) => {
            let remote = server_for(&a.connect, &a.common)?;
            let (bytes, seed, total) = (a.bytes, a.seed, a.connections);
            // Each core (or application thread) opens its share.
            let queues = match a.common.mode() {
                ExecMode::Rtc => cores(&a.common)?,
                ExecMode::QueuePair => app_threads(&a.common)?,
            };
            serve(
                "bulk-source",
                &a.common,
                nic,
                &[],
                Some(remote.ip()),
                total,
                move |h, tx| {
                    let q = h.queue();
                    let mut n = total / queues as usize;
                    if q == 0 {
                        n += total % queues as usize;
                    }
                    // On every queue, opening none where its share is
                    // none: a bucket moved here brings its connections to
                    // the handler of the same index (a queue without it
                    // aborted them: a one-connection transfer moved to the
                    // other queue never ended, seen once in CI).
                    h.add(Source::new(
                        remote,
                        bytes,
                        seed.wrapping_add(u64::from(q) << 32),
                        n,
                        tx,
                    ));
                    Ok(())
                },
            )
        }
    }
}

/// How many cores (workers, or kernel-socket loops) serve: `--workers`
/// where more than the queues, else `--queues`, else the interface's queue
/// count.
fn cores(c: &Common) -> Result<u32> {
    let queues = TcpServiceConfig {
        queues: c.data_path.queues,
        ..TcpServiceConfig::new(&c.iface)
    }
    .interface()?
    .1;
    Ok(c.workers.unwrap_or(queues).max(queues))
}

/// Application threads in queue-pair mode: `--app-threads`, else one per
/// core. At most one per core: each core's connections are served by one
/// application thread (`flowlane_qp`'s owner of the core), so a thread
/// more would serve no connection (and open none: its active opens have
/// no core); and at most [`MAX_APP_THREADS`], whose names Linux tells
/// apart.
fn app_threads(c: &Common) -> Result<u32> {
    let cores = cores(c)?;
    let most = cores.min(MAX_APP_THREADS as u32);
    match c.app_threads {
        Some(n) if n > most => bail!(
            "--app-threads {n}: at most {most}, one per network core ({cores} here: --queues, \
             --workers; {MAX_APP_THREADS} at most in all): each core is served by one \
             application thread, so more would serve nothing"
        ),
        Some(n) => Ok(n),
        None => Ok(most),
    }
}

/// The counters of a report or summary: totals, then per queue its TCP
/// counters and the RSS buckets it serves (those in use).
fn counters_json(
    per_queue: &[(u32, TcpCountersSnapshot)],
    buckets: &[(u32, Vec<BucketSnapshot>)],
) -> Value {
    let total = per_queue
        .iter()
        .fold(TcpCountersSnapshot::default(), |a, (_, c)| a.add(c));
    json!({
        "total": total,
        "queues": per_queue.iter().map(|(q, c)| json!({
            "queue": q,
            "worker_cpu_ns": worker_cpu_ns(*q),
            "tcp": c,
            "buckets": buckets.iter().find(|(bq, _)| bq == q).map_or(&[][..], |(_, b)| b),
        })).collect::<Vec<_>>(),
    })
}

/// How a service registers its handlers on each core (AF_XDP queue or
/// kernel-socket loop), with the channel its results go to.
trait ServiceSetup:
    Fn(&mut dyn Setup, Sender<Value>) -> std::result::Result<(), flowlane_tcp::Error>
    + Send
    + Sync
    + 'static
{
}

impl<F> ServiceSetup for F where
    F: Fn(&mut dyn Setup, Sender<Value>) -> std::result::Result<(), flowlane_tcp::Error>
        + Send
        + Sync
        + 'static
{
}

/// Runs the service on the chosen backend, each core set up by `setup`,
/// until a signal, the timeout, or `expect` results (if not 0).
/// `connect_to`: the server of active opens. `name`: the command, for
/// messages.
fn serve(
    name: &'static str,
    c: &Common,
    nic: NicAccess,
    ports: &[u16],
    connect_to: Option<IpAddr>,
    expect: usize,
    setup: impl ServiceSetup,
) -> Result<()> {
    serve_with(name, c, nic, ports, connect_to, expect, |run| {
        match c.mode() {
            ExecMode::Rtc => run_backend(run, setup),
            ExecMode::QueuePair => {
                let tx = Mutex::new(run.results.sender());
                let qp = start_queue_pairs(c, move |t| {
                    setup(t, tx.lock().unwrap_or_else(|e| e.into_inner()).clone())
                })?;
                serve_queue_pairs(run, qp)
            }
        }
    })
}

/// [`serve`]'s frame: the results channel and the [`Run`] that `start`
/// runs the backend with.
fn serve_with(
    name: &'static str,
    c: &Common,
    nic: NicAccess,
    ports: &[u16],
    connect_to: Option<IpAddr>,
    expect: usize,
    start: impl FnOnce(Run<'_>) -> Result<()>,
) -> Result<()> {
    let (done_tx, done_rx) = mpsc::channel::<Value>();
    let results = Results {
        tx: Mutex::new(done_tx),
        rx: done_rx,
    };
    start(Run {
        name,
        c,
        nic,
        ports,
        connect_to,
        expect,
        qp: None,
        results: &results,
    })
}

/// The service's own counters (the HTTP servers' refusals and timeouts,
/// the others' idle closes),
/// where it keeps any: the summary's `application`. One service runs per
/// process.
static APPLICATION: OnceLock<Box<dyn Fn() -> Value + Send + Sync>> = OnceLock::new();

fn application_json() -> Value {
    APPLICATION.get().map_or(Value::Null, |f| f())
}

/// Runs the backend with queue-pair mode's relays on its cores (the
/// handlers run on `qp`'s application threads), then stops `qp`.
fn serve_queue_pairs(run: Run<'_>, qp: QueuePairs) -> Result<()> {
    let qp = Arc::new(qp);
    let q = qp.clone();
    let relays =
        move |core: &mut dyn Setup, _: Sender<Value>| q.setup_core(core).map_err(Into::into);
    let r = run_backend(
        Run {
            qp: Some(&qp),
            ..run
        },
        relays,
    );
    match (r, qp.stop()) {
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) => Err(anyhow::anyhow!("{e:#}")),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// Where the service's handlers report finished transfers, and where the
/// wait loop reads them.
struct Results {
    tx: Mutex<Sender<Value>>,
    rx: Receiver<Value>,
}

impl Results {
    fn sender(&self) -> Sender<Value> {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One run of a service, besides its set-up.
#[derive(Clone, Copy)]
struct Run<'a> {
    name: &'static str,
    c: &'a Common,
    nic: NicAccess,
    ports: &'a [u16],
    connect_to: Option<IpAddr>,
    expect: usize,
    qp: Option<&'a Arc<QueuePairs>>,
    results: &'a Results,
}

/// Runs the chosen backend with `setup` on each core (the service's
/// handlers, or queue-pair relays), until the service ends.
fn run_backend(run: Run<'_>, setup: impl ServiceSetup) -> Result<()> {
    match run.c.backend() {
        Backend::Xdp => serve_xdp(run, setup),
        Backend::Kernel => serve_kernel(run, setup),
    }
}

/// How long a stopping AF_XDP service waits at most for its connections to
/// finish: those its handlers end gracefully at the stop, and closes under
/// way ([`TcpService::linger`], the drain).
const LINGER: Duration = Duration::from_secs(2);

/// Starts queue-pair mode's application threads, each set up by `setup`.
fn start_queue_pairs(
    c: &Common,
    setup: impl Fn(&mut dyn Setup) -> std::result::Result<(), flowlane_tcp::Error>
        + Send
        + Sync
        + 'static,
) -> Result<QueuePairs> {
    // The start error names the thread whose set-up failed.
    QueuePairs::start(queue_pair_config(c)?, setup)
        .map_err(|e| anyhow::anyhow!("starting queue-pair mode: {e:#}"))
}

/// Queue-pair mode's cores and application threads, placed.
fn queue_pair_config(c: &Common) -> Result<QueuePairConfig> {
    let n = cores(c)?;
    let threads = app_threads(c)?;
    let placed =
        machine_placement(None, n as usize, None).with_context(|| format!("placing {n} cores"))?;
    let cores = placed.cores();
    // Application threads on the CPUs the cores leave free, on the node of
    // the core they serve where they can be; unpinned where the cores take
    // every CPU.
    let taken: Vec<u32> = cores.iter().filter_map(|p| p.cpu).collect();
    let free: Vec<u32> = placed
        .node_cpus
        .values()
        .flatten()
        .copied()
        .filter(|c| !taken.contains(c))
        .collect();
    let app_threads: Vec<Placement> = (0..threads)
        .map(|t| {
            let node = cores[t as usize % cores.len()].node;
            let on_node: Vec<u32> = placed
                .node_cpus
                .get(&node)
                .into_iter()
                .flatten()
                .copied()
                .filter(|c| free.contains(c))
                .collect();
            let pool = if on_node.is_empty() { &free } else { &on_node };
            Placement {
                queue: t,
                cpu: (!pool.is_empty()).then(|| pool[t as usize % pool.len()]),
                node,
            }
        })
        .collect();
    // Pinned by `flowlane_qp::pin_to`, stalled after its `STALL_AFTER`.
    Ok(QueuePairConfig {
        app_threads,
        ..QueuePairConfig::new(&cores)
    })
}

/// Each application thread's CPU time so far (ns; empty when handlers
/// run to completion): one read per thread, by the id it ran under.
fn app_threads_cpu(qp: Option<&QueuePairs>) -> Vec<Option<u64>> {
    qp.map_or(Vec::new(), |q| {
        q.app_thread_tids()
            .into_iter()
            .map(|tid| tid.and_then(app_thread_cpu_ns))
            .collect()
    })
}

/// Keeps in `last` each reading of `now` that is there (a thread's CPU
/// time while it runs): what was read last of a thread that has ended.
fn latest(now: impl IntoIterator<Item = Option<u64>>, last: &mut Vec<Option<u64>>) {
    for (i, v) in now.into_iter().enumerate() {
        if i == last.len() {
            last.push(None);
        }
        if v.is_some() {
            last[i] = v;
        }
    }
}

/// Says once, per application thread that died (it panicked), that the
/// cores reset its connections and go on.
fn report_dead_threads(qp: Option<&QueuePairs>, reported: &mut Vec<u32>) {
    for t in qp.map(QueuePairs::dead_threads).unwrap_or_default() {
        if !reported.contains(&t) {
            reported.push(t);
            eprintln!(
                "flowlane: application thread {t} died; the cores reset its connections and \
                 serve the others"
            );
        }
    }
}

/// Queue-pair mode's counters now: what the summary reports and the
/// control socket answers (`flowlane daemon`'s `flowlane_qp_*`), with
/// what the cores' relays hold for the application threads against their
/// memory budgets, per core.
fn queue_pair_counters(q: &QueuePairs) -> QueuePairCounters {
    QueuePairCounters {
        app_threads: q.app_threads(),
        dead_threads: q.dead_threads(),
        connections_orphaned: q.orphaned(),
        connections_moved: q.moved(),
        requests_bounced: q.bounced(),
        application_refused: q.application_refused(),
        relay_memory: q
            .memory()
            .iter()
            .zip(0..)
            .map(|(m, core)| RelayMemoryCounters {
                core,
                rx_limit: m.rx_limit,
                rx_held: m.rx_held,
                rx_peak: m.rx_peak,
                rx_waits: m.rx_waits,
                tx_limit: m.tx_limit,
                tx_held: m.tx_held,
                tx_peak: m.tx_peak,
                tx_waits: m.tx_waits,
                pool_cached: m.pool_cached,
                returned: m.returned,
            })
            .collect(),
    }
}

/// In queue-pair mode, has `control` answer [`queue_pair_counters`] in
/// its counters; returns the queue pairs for the service's other uses.
fn report_queue_pairs<'a>(
    control: &mut ServiceControl,
    qp: Option<&'a Arc<QueuePairs>>,
) -> Option<&'a QueuePairs> {
    if let Some(q) = qp {
        let q = q.clone();
        control.report_queue_pairs(move || queue_pair_counters(&q));
    }
    qp.map(Arc::as_ref)
}

/// Queue-pair mode's part of a summary: [`queue_pair_counters`] (per
/// core, `relay_memory`), and the relays' waits summed.
fn queue_pair_json(qp: Option<&QueuePairs>) -> Value {
    qp.map_or(Value::Null, |q| {
        let counters = queue_pair_counters(q);
        let mut v = json!(counters);
        let waits = |f: fn(&RelayMemoryCounters) -> u64| -> u64 {
            counters.relay_memory.iter().map(f).sum()
        };
        v["rx_memory_waits"] = json!(waits(|m| m.rx_waits));
        v["tx_memory_waits"] = json!(waits(|m| m.tx_waits));
        v
    })
}

/// A running service as the wait loop sees it.
trait Running {
    /// The cores serving.
    fn cores(&self) -> usize;
    /// The report's and summary's counters.
    fn counters(&self) -> Value;
    /// Per-pass duties (the watchdog, the control socket); an error ends
    /// the service.
    fn check(&mut self) -> Result<()>;
    /// The stop begins: the control socket says so from now on (and a
    /// kernel-socket service's cores begin their drain; an AF_XDP
    /// service's begins with `TcpService::linger`).
    fn begin_stop(&mut self);
    /// Answers the control socket during the stop: status and counters,
    /// the service listed as stopping (no rebalancing, no watchdog).
    fn answer(&mut self);
}

/// How often the control socket is answered during a stop's drain (as in
/// [`wait`]'s loop).
const ANSWER_EVERY: Duration = Duration::from_millis(10);

/// Begins the stop of `running` and keeps its control socket answering
/// until `drained` says the stop's drain is over: a draining service is
/// still listed (stopping) by `flowlane status` and on the daemon's
/// metrics page, with what its drain waits for (`finishing`), until it
/// exits and its control socket goes.
fn answer_until(running: &mut dyn Running, mut drained: impl FnMut() -> bool) {
    running.begin_stop();
    while !drained() {
        running.answer();
        std::thread::sleep(ANSWER_EVERY);
    }
}

struct XdpRunning<'a> {
    service: &'a TcpService,
    control: ServiceControl,
    watchdog: Watchdog,
    qp: Option<&'a QueuePairs>,
    dead_reported: Vec<u32>,
}

impl Running for XdpRunning<'_> {
    fn cores(&self) -> usize {
        self.service.dataplane().queues().len()
    }
    fn counters(&self) -> Value {
        counters_json(
            &self.service.tcp_counters(),
            &self.service.bucket_counters(),
        )
    }
    fn check(&mut self) -> Result<()> {
        report_dead_threads(self.qp, &mut self.dead_reported);
        self.watchdog.check(self.service.dataplane())?;
        for m in self.control.poll(self.service) {
            eprintln!("{}", move_line(&m));
        }
        Ok(())
    }
    fn begin_stop(&mut self) {
        self.control.begin_stop();
    }
    fn answer(&mut self) {
        // A stopping service's control moves nothing (refused).
        self.control.poll_view(self.service);
    }
}

/// Starts the data path with a `TcpHandler` per queue, set up by `setup`.
fn serve_xdp(run: Run<'_>, setup: impl ServiceSetup) -> Result<()> {
    // First: a SIGTERM during the set-up (the control socket bound, the
    // daemon told) ends the service through its summary and clean-up,
    // not by the default action.
    let signals = ServiceSignals::install()?;
    let Run {
        name,
        c,
        nic,
        ports,
        connect_to,
        expect,
        qp,
        results,
    } = run;
    let mut config = TcpServiceConfig::new(&c.iface);
    config.queues = c.data_path.queues;
    config.workers = c.workers;
    config.listen = ports.to_vec();
    config.active = connect_to.is_some();
    config.busy_poll = c.data_path.busy_poll;
    config.frames_per_queue = c.data_path.frames_per_queue;
    config.send_memory = c.data_path.send_memory;
    config.zero_copy_receive = !c.data_path.copy_receive;
    config.congestion = c.data_path.congestion.algorithm();
    config.ecn = c.data_path.ecn.mode();
    config.msl = c.msl_ms.map(flowlane_tcp::time::Duration::from_millis);
    let (_, queues) = config.interface()?;
    let spill = c.workers.filter(|&w| w > queues).map(|w| {
        format!("buckets cannot move between queues while {w} workers share {queues} queues (software spill)")
    });
    if let (Some(why), Some(_)) = (&spill, c.rebalance.requested()) {
        bail!("--rebalance: {why}: use --rebalance off");
    }
    // Active opens pick their ports by it; every service keeps its
    // connections per RSS bucket with it. A passive service on a NIC whose
    // RSS flowlane cannot model (read from the NIC, not given by flags)
    // serves without buckets rather than not at all.
    config.rss = match rss::rss(c, queues, nic) {
        Ok(r) => r,
        Err(e) if !config.active && matches!(c.data_path.rss_settings(), Ok(None)) => {
            tracing::warn!("{e:#}; meanwhile connections are not kept per RSS bucket");
            None
        }
        Err(e) => return Err(e),
    };
    config.neighbors = tcp_service::neighbors(&c.data_path.neighbor, &c.iface, connect_to)?;
    config.nic = rss::writer(c, config.rss.as_ref(), nic)?;

    let done_tx = Mutex::new(results.sender());
    // The start error names the queue whose set-up failed.
    let service = TcpService::start(config, move |h| {
        let tx = done_tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        setup(h, tx)
    })
    .context("setting up TCP")?;
    let mut control = ServiceControl::new(
        &service,
        name,
        c.rebalance.wish(),
        spill,
        c.rebalance.socket(),
    )?;
    let qp = report_queue_pairs(&mut control, qp);
    if let Some(daemon) = c.rebalance.daemon() {
        control.register_with_daemon(&daemon);
    }
    let workers = service.dataplane().queues().len();
    eprintln!(
        "flowlane: TCP on {queues} queues of {}{}{}",
        c.iface,
        if workers > queues as usize {
            format!(
                ", {workers} workers ({} without a queue: software spill)",
                workers - queues as usize
            )
        } else {
            String::new()
        },
        control
            .socket_path()
            .map(|p| format!(" (control socket {})", p.display()))
            .unwrap_or_default()
    );
    let mut running = XdpRunning {
        service: &service,
        control,
        watchdog: Watchdog::new(name),
        qp,
        dead_reported: Vec::new(),
    };
    let r = wait(c, &signals, &mut running, &results.rx, expect);
    // The stop begins: listeners closed, the handlers told
    // (`ConnHandler::on_stop`: an HTTP server's idle connections get a FIN,
    // its responses under way finish), and the closes the application made
    // last (in queue-pair mode still on their way to the cores) get their
    // FINs out and acknowledged; the stop then resets every connection
    // still open (`TcpService::stop`), as the kernel backend's does. The
    // control socket answers through the drain (`answer_until`).
    let finished = std::thread::scope(|s| {
        let lingering = s.spawn(|| service.linger(LINGER));
        answer_until(&mut running, || lingering.is_finished());
        lingering
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    drop(running);
    if !finished {
        tracing::info!("stopping with connections still closing after {LINGER:?}");
    }
    // The connections the drain still waited for as it ended (being
    // finished by their handlers, or their closes under way), which the
    // stop resets: the summary's `finishing`, as on kernel sockets (the
    // workers' last publication counts only the former, as of before or
    // after the resets).
    let left: Vec<(u32, u64)> = service
        .tcp_counters()
        .iter()
        .map(|(q, t)| (*q, t.unfinished_at_stop()))
        .collect();
    let workers = c.workers.unwrap_or(queues).max(queues);
    let cpu: Vec<Option<u64>> = (0..workers).map(worker_cpu_ns).collect();
    let app_cpu = app_threads_cpu(qp);
    let qp_summary = queue_pair_json(qp);
    // What the steering program did, per receive queue (read before the
    // program goes with the data path).
    let steering: Vec<QueueSteering> = service
        .dataplane()
        .steering_counters()
        .iter()
        .map(|(q, s)| QueueSteering::new(*q, s))
        .collect();
    let (mut counters, stopped) = service.stop();
    for (q, t) in &mut counters.tcp {
        t.finishing = left.iter().find(|(l, _)| l == q).map_or(0, |(_, n)| *n);
    }
    let summary = json!({"event": "summary",
                         "counters": counters_json(&counters.tcp, &counters.buckets),
                         "steering": steering,
                         "worker_cpu_ns": cpu,
                         "app_thread_cpu_ns": app_cpu,
                         "queue_pair": qp_summary,
                         "application": application_json()});
    outln!("{summary}");
    if let Some(p) = &c.report {
        write_report(p, &summary)?;
    }
    // A queue that failed while the service ran ended the run with its
    // error (`check`); one found only by the stop is said here.
    r?;
    stopped.map_err(|e| anyhow::anyhow!("{e:#}"))
}

/// The flags that configure flowlane's TCP and AF_XDP data path, given
/// (`--congestion` and `--ecn`, which have defaults, only with another
/// value): what a service on another TCP ignores.
pub(super) fn flowlane_tcp_flags(c: &Common) -> Vec<&'static str> {
    let d = &c.data_path;
    [
        (c.msl_ms.is_some(), "--msl-ms"),
        (d.busy_poll, "--busy-poll"),
        (d.frames_per_queue.is_some(), "--frames-per-queue"),
        (d.copy_receive, "--copy-receive"),
        (d.congestion != CongestionChoice::default(), "--congestion"),
        (d.ecn != EcnChoice::default(), "--ecn"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect()
}

/// The flags only the AF_XDP backend has a meaning for, refused with the
/// kernel backend (before anything starts). `--congestion` and `--ecn`
/// too: a kernel socket takes the system's (`sysctl
/// net.ipv4.tcp_congestion_control`, `net.ipv4.tcp_ecn`), and a handler
/// may choose its connection's algorithm (`Net::set_congestion`).
fn refuse_what_kernel_sockets_lack(c: &Common) -> Result<()> {
    if c.backend() != Backend::Kernel {
        return Ok(());
    }
    if c.rebalance.requested().is_some() {
        bail!("--rebalance needs --backend xdp (kernel sockets have no RSS buckets to move)");
    }
    if c.rebalance.move_cost != flowlane_dataplane::service_args::MovePrice::Learned {
        bail!("--move-cost needs --backend xdp (kernel sockets have no RSS buckets to move)");
    }
    if c.workers.is_some() {
        bail!(
            "--workers needs --backend xdp (kernel sockets: one loop per core, --queues of them)"
        );
    }
    let given = flowlane_tcp_flags(c);
    let (verb, them) = match given.len() {
        0 => return Ok(()),
        1 => ("configures", "it"),
        _ => ("configure", "them"),
    };
    bail!(
        "{} {verb} flowlane's TCP and data path, which --backend kernel does not use (Linux's \
         TCP sockets take the system's settings, sysctl net.ipv4.tcp_*): drop {them}, or use \
         --backend xdp",
        given.join(", ")
    );
}

/// Runs `setup`'s handlers on kernel sockets: one pinned loop per core,
/// each with its own `SO_REUSEPORT` listeners.
fn serve_kernel(run: Run<'_>, setup: impl ServiceSetup) -> Result<()> {
    // First, as in `serve_xdp`.
    let signals = ServiceSignals::install()?;
    let Run {
        name,
        c,
        expect,
        qp,
        results,
        ..
    } = run;
    let n = cores(c)?;
    let placed =
        machine_placement(None, n as usize, None).with_context(|| format!("placing {n} cores"))?;
    if let Some(w) = &placed.shared {
        tracing::warn!("{w}");
    }
    let config = KernelConfig {
        cores: placed.cores(),
        limits: Limits {
            tx_memory: c
                .data_path
                .send_memory
                .unwrap_or(Limits::default().tx_memory),
            ..Limits::default()
        },
        ..KernelConfig::default()
    };
    let done_tx = Mutex::new(results.sender());
    // The start error names the core whose set-up failed.
    let service = KernelService::start(config, move |core| {
        let tx = done_tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        setup(core, tx)
    })
    .map_err(|e| anyhow::anyhow!("{name}: setting up kernel TCP: {e:#}"))?;
    let mut control = ServiceControl::without_rebalancing(name, c.rebalance.socket())?;
    let qp = report_queue_pairs(&mut control, qp);
    if let Some(daemon) = c.rebalance.daemon() {
        control.register_with_daemon(&daemon);
    }
    eprintln!(
        "flowlane: {}{}",
        kernel_banner(n),
        control
            .socket_path()
            .map(|p| format!(" (control socket {})", p.display()))
            .unwrap_or_default()
    );
    let mut running = KernelRunning {
        service: &service,
        control,
        qp,
        dead_reported: Vec::new(),
    };
    let r = wait(c, &signals, &mut running, &results.rx, expect);
    // The cores drain (`KernelCore::run`) while the control socket answers.
    // They end with their drain, and queue-pair mode's application threads
    // with them: their CPU times are the last read while they ran.
    let mut cpu: Vec<Option<u64>> = Vec::new();
    let mut app_cpu = Vec::new();
    answer_until(&mut running, || {
        latest((0..n).map(worker_cpu_ns), &mut cpu);
        latest(app_threads_cpu(qp), &mut app_cpu);
        service.stopped()
    });
    drop(running);
    let qp_summary = queue_pair_json(qp);
    let (counters, stopped) = service.stop();
    let summary = json!({"event": "summary", "backend": "kernel",
                         "counters": kernel_counters_json(&counters),
                         "worker_cpu_ns": cpu,
                         "app_thread_cpu_ns": app_cpu,
                         "queue_pair": qp_summary,
                         "application": application_json()});
    outln!("{summary}");
    if let Some(p) = &c.report {
        write_report(p, &summary)?;
    }
    if let Err(e) = stopped {
        bail!("{e:#}");
    }
    r
}

struct KernelRunning<'a> {
    service: &'a KernelService,
    control: ServiceControl,
    qp: Option<&'a QueuePairs>,
    dead_reported: Vec<u32>,
}

impl Running for KernelRunning<'_> {
    fn cores(&self) -> usize {
        self.service.counters().len()
    }
    fn counters(&self) -> Value {
        kernel_counters_json(&self.service.counters())
    }
    fn check(&mut self) -> Result<()> {
        report_dead_threads(self.qp, &mut self.dead_reported);
        if self.service.failed() {
            bail!("a core's loop ended (its error follows at exit)");
        }
        // No buckets: a move asked for by hand is refused, and nothing
        // moves to log.
        self.answer();
        Ok(())
    }
    fn begin_stop(&mut self) {
        self.control.begin_stop();
        self.service.begin_stop();
    }
    fn answer(&mut self) {
        self.control.poll_view(&KernelView(self.service));
    }
}

/// The kernel backend's counters in the summary's shape: totals, then per
/// core (`queues[].queue`, `queues[].tcp`, with the core's buffer memory
/// peaks; the totals sum the waits, not the peaks, which are per core).
fn kernel_counters_json(per_core: &[(u32, CoreCounters)]) -> Value {
    let one = |c: &CoreCounters| {
        let s = &c.stats;
        json!({
            "rx_memory_waits": c.rx_memory_waits,
            "tx_memory_waits": c.tx_memory_waits,
            "accept_failed": c.accept_failed,
            "accept_aborted": c.accept_aborted,
            "connections": c.connections,
            "passive_opens": s.passive_opens,
            "active_opens": s.active_opens,
            "closed": s.closed,
            "bytes_in": s.bytes_in,
            "bytes_out": s.bytes_out,
            "resets_in": s.resets_in,
            "resets_out": s.resets_out,
            "connection_limit_refused": s.connection_limit_refused,
            "syn_refused": s.syn_refused,
            "application_refused": c.application_refused,
            "finishing": c.finishing,
        })
    };
    let mut total = CoreCounters::default();
    for (_, c) in per_core {
        total.connections += c.connections;
        let (t, s) = (&mut total.stats, &c.stats);
        t.passive_opens += s.passive_opens;
        t.active_opens += s.active_opens;
        t.closed += s.closed;
        t.bytes_in += s.bytes_in;
        t.bytes_out += s.bytes_out;
        t.resets_in += s.resets_in;
        t.resets_out += s.resets_out;
        t.connection_limit_refused += s.connection_limit_refused;
        t.syn_refused += s.syn_refused;
        total.application_refused += c.application_refused;
        total.finishing += c.finishing;
        total.rx_memory_waits += c.rx_memory_waits;
        total.tx_memory_waits += c.tx_memory_waits;
        total.accept_failed += c.accept_failed;
        total.accept_aborted += c.accept_aborted;
    }
    json!({
        "total": one(&total),
        "queues": per_core.iter().map(|(q, c)| {
            let mut tcp = one(c);
            tcp["rx_memory_peak"] = json!(c.rx_memory_peak);
            tcp["tx_memory_peak"] = json!(c.tx_memory_peak);
            json!({
                "queue": q,
                "worker_cpu_ns": worker_cpu_ns(*q),
                "tcp": tcp,
            })
        }).collect::<Vec<_>>(),
    })
}

fn wait(
    c: &Common,
    signals: &ServiceSignals,
    service: &mut dyn Running,
    done: &Receiver<Value>,
    expect: usize,
) -> Result<()> {
    let report = |service: &dyn Running, ready: bool| -> Result<()> {
        if let Some(p) = &c.report {
            write_report(
                p,
                &json!({"event": "report", "ready": ready,
                        "queues": service.cores(),
                        "counters": service.counters()}),
            )?;
        }
        Ok(())
    };
    report(service, true)?;
    let start = Instant::now();
    let mut results = 0;
    let mut failed = false;
    while !signals.stop_requested() {
        service.check()?;
        match done.recv_timeout(Duration::from_millis(20)) {
            Ok(v) => {
                outln!("{v}");
                failed |= v["ok"] == false;
                results += 1;
                if expect > 0 && results >= expect {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        if signals.take_report_request() {
            report(service, true)?;
        }
        if c.timeout > 0 && start.elapsed() > Duration::from_secs(c.timeout) {
            bail!("{}", timed_out(c.timeout, results, expect));
        }
    }
    // The last transfer's result comes at end of stream, before our FIN is
    // acknowledged: let the closes finish (bounded) so that no connection is
    // cut off by the exit.
    let linger = Instant::now();
    while service.counters()["total"]["connections"]
        .as_u64()
        .unwrap_or(0)
        > 0
        && linger.elapsed() < Duration::from_secs(3)
        && !signals.stop_requested()
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    if failed {
        bail!("a transfer failed (see the lines above)");
    }
    Ok(())
}

/// What `--timeout` (`timeout_s`) says when it ends a service: the
/// transfers done (`results`), of those it waited for (`expect`, if not
/// 0), for a service that counts transfers; nothing of transfers for one
/// that has none to count (an echo or HTTP server, or a sink that got
/// none).
fn timed_out(timeout_s: u64, results: usize, expect: usize) -> String {
    match (results, expect) {
        (0, 0) => format!("timed out after {timeout_s} s"),
        (1, 0) => format!("timed out after {timeout_s} s with 1 transfer done"),
        (n, 0) => format!("timed out after {timeout_s} s with {n} transfers done"),
        (n, e) => format!("timed out after {timeout_s} s with {n} of {e} transfers done"),
    }
}

/// What a kernel-socket service says it runs on: `kernel TCP on 1 core`,
/// `kernel TCP on 4 cores`.
fn kernel_banner(cores: u32) -> String {
    let noun = if cores == 1 { "core" } else { "cores" };
    format!("kernel TCP on {cores} {noun}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One core is one core, not "1 cores".
    #[test]
    fn the_kernel_banner_counts_its_cores() {
        assert_eq!(kernel_banner(1), "kernel TCP on 1 core");
        assert_eq!(kernel_banner(2), "kernel TCP on 2 cores");
    }

    /// A service with no transfers to count (`echo-server --timeout 2`)
    /// says nothing of transfers; one that counts them says how many.
    #[test]
    fn a_timeout_speaks_of_transfers_only_where_there_are_some() {
        assert_eq!(timed_out(2, 0, 0), "timed out after 2 s");
        assert_eq!(
            timed_out(2, 1, 0),
            "timed out after 2 s with 1 transfer done"
        );
        assert_eq!(
            timed_out(2, 3, 0),
            "timed out after 2 s with 3 transfers done"
        );
        assert_eq!(
            timed_out(5, 0, 4),
            "timed out after 5 s with 0 of 4 transfers done"
        );
    }
}
