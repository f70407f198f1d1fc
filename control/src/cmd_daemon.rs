//! `flowlane daemon`: owns the NICs it is given (reads what each can do,
//! applies the IRQ/NAPI and RSS plan, puts things back on exit), serves the
//! running flowlane services' counters and its NICs as Prometheus metrics,
//! and answers flow hints and host questions until SIGTERM, SIGINT, SIGHUP or SIGQUIT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args as ClapArgs;
use flowlane_apps::service::ServiceSignals;
use flowlane_daemon::{Daemon, DaemonConfig};
use flowlane_dataplane::affinity::allowed_cpus;
use flowlane_dataplane::control_socket;

use crate::host_plan::{self, Owned};
use crate::sysroot::Roots;
use crate::topology_args::TopologyArgs;

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
    /// A NIC the daemon owns (repeatable): its capabilities read, its
    /// IRQ/NAPI and RSS plan applied on start (replaces the file's
    /// `ifaces`).
    #[arg(long = "iface", value_name = "IF")]
    ifaces: Vec<String>,
    /// Only report what the plan would change on the NICs; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Leave the NICs as the plan configured them when the daemon stops
    /// (default: put back what it changed).
    #[arg(long)]
    keep_on_exit: bool,
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
        if !self.ifaces.is_empty() {
            c.ifaces = self.ifaces.clone();
        }
        c.dry_run |= self.dry_run;
        c.restore_on_exit &= !self.keep_on_exit;
        Ok(c)
    }
}

pub(crate) fn run(args: Args) -> Result<()> {
    let config = args.config()?;
    let signals = ServiceSignals::install()?;
    let owned = own_nics(&config)?;
    let mut daemon = match Daemon::start(&config) {
        Ok(d) => d,
        Err(e) => {
            let in_use = services_on(&control_socket::live_sockets(&config.run_dir));
            restore(owned, &config, &in_use);
            return Err(e.into());
        }
    };
    daemon.set_nics(owned.iter().map(|o| o.report.clone()).collect());
    if !owned.is_empty() {
        daemon.set_nic_stats(Box::new(|iface: &str| {
            crate::nic::caps::queue_stats(&Roots::default(), iface)
                .map_err(|e| tracing::debug!("{iface}'s per-queue counters: {e:#}"))
                .ok()
                .flatten()
        }));
    }
    flowlane_apps::outln!(
        "{}",
        serde_json::json!({
            "event": "ready",
            "metrics": daemon.metrics_addr().to_string(),
            "socket": daemon.socket_path(),
            "run_dir": config.run_dir,
            "nics": owned.iter().map(|o| serde_json::json!({
                "iface": o.report.caps.iface,
                "dry_run": o.report.dry_run,
                "changes": o.report.changes,
            })).collect::<Vec<_>>(),
        })
    );
    let mut owned = owned;
    let mut next_look = std::time::Instant::now() + LOOK_AGAIN;
    while !signals.stop_requested() {
        daemon.poll();
        if std::time::Instant::now() >= next_look {
            next_look = std::time::Instant::now() + LOOK_AGAIN;
            look_again(&mut owned, &daemon);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Which NICs running services use, asked while the daemon still knows
    // the services registered from elsewhere than the run directory.
    let in_use = services_on(&daemon.service_sockets());
    drop(daemon);
    restore(owned, &config, &in_use);
    Ok(())
}

/// How often the daemon looks again at the NICs it owns.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// Looks at each owned NIC again and plans again for those that changed
/// (interrupts to pin now that a service gave a veth NAPI, channels set,
/// IRQs made anew, a NIC back), and says so (a JSON line each).
fn look_again(owned: &mut [Owned], daemon: &Daemon) {
    if owned.is_empty() {
        return;
    }
    let (roots, budget) = (Roots::default(), allowed_cpus());
    let Ok(topo) = TopologyArgs::default().load() else {
        return;
    };
    let mut changed = false;
    for o in owned.iter_mut() {
        let before = o.report.changes.len();
        let iface = o.report.caps.iface.clone();
        let in_use = || services_on(&daemon.service_sockets()).contains(&iface);
        match o.look_again(&roots, &topo, Some(&budget), in_use) {
            Ok(true) => {
                changed = true;
                flowlane_apps::outln!(
                    "{}",
                    serde_json::json!({
                        "event": "planned",
                        "iface": o.report.caps.iface,
                        "changes": o.report.changes[before..],
                    })
                );
            }
            Ok(false) => {}
            Err(e) => tracing::warn!("{}: {e:#}", o.report.caps.iface),
        }
    }
    if changed {
        daemon.set_nics(owned.iter().map(|o| o.report.clone()).collect());
    }
}

/// Reads and plans each of `config.ifaces` (and applies the plan unless
/// dry); on a failure, puts back what the NICs before it got.
fn own_nics(config: &DaemonConfig) -> Result<Vec<Owned>> {
    if config.ifaces.is_empty() {
        return Ok(Vec::new());
    }
    let roots = Roots::default();
    let topo = TopologyArgs::default().load()?;
    let budget = allowed_cpus();
    // Before the daemon runs, only the run directory's services are known
    // (one elsewhere registers within 5 s of the daemon's start).
    let in_use = services_on(&control_socket::live_sockets(&config.run_dir));
    let mut owned = Vec::new();
    for iface in &config.ifaces {
        match host_plan::own(
            &roots,
            iface,
            &topo,
            Some(&budget),
            config.dry_run,
            config.restore_on_exit,
            in_use.contains(iface),
        ) {
            Ok(o) => owned.push(o),
            Err(e) => {
                restore(owned, config, &in_use);
                return Err(e);
            }
        }
    }
    Ok(owned)
}

/// The interfaces the services at `sockets` serve.
fn services_on(sockets: &[std::path::PathBuf]) -> Vec<String> {
    sockets
        .iter()
        .filter_map(|p| crate::cmd_rebalance::status(p).ok())
        .map(|s| s.iface)
        .collect()
}

/// Puts back what the daemon changed on its NICs, if so configured, and
/// says what it did (a JSON line per NIC); `in_use`: the interfaces running
/// services serve (their RSS tables stay).
fn restore(owned: Vec<Owned>, config: &DaemonConfig, in_use: &[String]) {
    if !config.restore_on_exit || config.dry_run {
        return;
    }
    for o in owned {
        let iface = o.report.caps.iface.clone();
        let busy = in_use.contains(&iface);
        let said = o.restore(&Roots::default(), busy);
        if !said.is_empty() {
            flowlane_apps::outln!(
                "{}",
                serde_json::json!({"event": "restored", "iface": iface, "done": said})
            );
        }
    }
}
