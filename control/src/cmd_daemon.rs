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
use flowlane_daemon::ask::ask_all;
use flowlane_daemon::{Daemon, DaemonConfig};
use flowlane_dataplane::affinity::allowed_cpus;
use flowlane_dataplane::control_socket::{self, Request, Response};

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
    /// How long the services may take to answer a scrape, all asked at
    /// once, in milliseconds (at most 5000) [default: 500].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=flowlane_daemon::SCRAPE_TIMEOUT_MAX_MS))]
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
            let in_use = services_on(&control_socket::live_sockets(&config.run_dir), ASK_WITHIN);
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
                "notes": o.report.notes,
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
    // the services registered from elsewhere than the run directory; the
    // NICs put back before the metrics endpoint stops (it may wait for a
    // scrape under way), all well within systemd's TimeoutStopSec=10s.
    let in_use = services_on(&daemon.service_sockets(), ASK_WITHIN);
    restore(owned, &config, &in_use);
    drop(daemon);
    Ok(())
}

/// How often the daemon looks again at the NICs it owns.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// How long the running services may take, all asked at once, to say
/// which NIC they serve.
const ASK_WITHIN: Duration = Duration::from_secs(1);

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
        let iface = o.report.caps.iface.clone();
        let keep_table = || services_on(&daemon.service_sockets(), ASK_WITHIN).keeps_table(&iface);
        match o.look_again(&roots, &topo, Some(&budget), keep_table) {
            Ok(Some(looked)) => {
                changed = true;
                flowlane_apps::outln!(
                    "{}",
                    serde_json::json!({
                        "event": "planned",
                        "iface": iface,
                        "changes": looked.changes,
                        "notes": looked.notes,
                    })
                );
            }
            Ok(None) => {}
            Err(e) => {
                // What was done before the failure is in the report.
                changed = true;
                tracing::warn!("{iface}: {e:#}");
            }
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
    let in_use = services_on(&control_socket::live_sockets(&config.run_dir), ASK_WITHIN);
    let mut owned = Vec::new();
    for iface in &config.ifaces {
        match host_plan::own(
            &roots,
            iface,
            &topo,
            Some(&budget),
            config.dry_run,
            config.restore_on_exit,
            in_use.keeps_table(iface).as_deref(),
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

/// What the running services said of the NICs they serve.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct InUse {
    /// The interfaces the services that answered serve.
    ifaces: Vec<String>,
    /// The sockets of services that did not answer (stuck, stopped, busy,
    /// or refusing): any of them may serve any NIC.
    unanswered: Vec<PathBuf>,
}

impl InUse {
    /// Why `iface`'s RSS table must stay as it is, if it must: a running
    /// service uses it, or one that did not answer may (its buckets are
    /// its own: a table rewritten under it would send its flows to the
    /// wrong queues).
    fn keeps_table(&self, iface: &str) -> Option<String> {
        if self.ifaces.iter().any(|i| i == iface) {
            return Some(format!("a running service uses {iface}"));
        }
        let first = self.unanswered.first()?;
        let one = self.unanswered.len() == 1;
        Some(format!(
            "{} service{} did not say which NIC {} ({}{}): {iface} may be one",
            self.unanswered.len(),
            if one { "" } else { "s" },
            if one { "it serves" } else { "they serve" },
            first.display(),
            if one { "" } else { ", ..." }
        ))
    }
}

/// Which NICs the services at `sockets` serve, all asked at once and
/// given `within` to answer.
fn services_on(sockets: &[PathBuf], within: Duration) -> InUse {
    let mut in_use = InUse::default();
    for (path, answer) in sockets
        .iter()
        .zip(ask_all(sockets, &Request::Status, within))
    {
        match answer.map(|a| a.response) {
            Ok(Response::Status(s)) => in_use.ifaces.push(s.iface),
            other => {
                tracing::debug!(socket = %path.display(), answer = ?other, "no status");
                in_use.unanswered.push(path.clone());
            }
        }
    }
    in_use
}

/// Puts back what the daemon changed on its NICs, if so configured, and
/// says what it did (a JSON line per NIC); `in_use`: what the running
/// services said (the RSS tables they use, or may, stay).
fn restore(owned: Vec<Owned>, config: &DaemonConfig, in_use: &InUse) {
    if !config.restore_on_exit || config.dry_run {
        return;
    }
    for o in owned {
        let iface = o.report.caps.iface.clone();
        let keep = in_use.keeps_table(&iface);
        let said = o.restore(&Roots::default(), keep.as_deref());
        if !said.is_empty() {
            flowlane_apps::outln!(
                "{}",
                serde_json::json!({"event": "restored", "iface": iface, "done": said})
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    /// Services that take the connection and never answer (stuck, or
    /// stopped: the kernel queues the connection) may serve any NIC: their
    /// tables stay, said so; all are asked at once, within one deadline.
    #[test]
    fn a_service_that_does_not_answer_may_use_every_nic() {
        let dir = std::env::temp_dir().join(format!("fl-daemon-inuse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<PathBuf> = (0..3)
            .map(|i| dir.join(format!("stuck.{i}.sock")))
            .collect();
        let _listeners: Vec<UnixListener> = paths
            .iter()
            .map(|p| UnixListener::bind(p).unwrap())
            .collect();
        let within = Duration::from_millis(300);
        let began = Instant::now();
        let in_use = services_on(&paths, within);
        assert!(began.elapsed() < within * 2, "{:?}", began.elapsed());
        assert_eq!(in_use.unanswered, paths);
        let why = in_use.keeps_table("eth1").expect("the table stays");
        assert!(
            why.starts_with("3 services did not say which NIC they serve (")
                && why.ends_with("eth1 may be one"),
            "{why}"
        );
        assert_eq!(services_on(&[], within), InUse::default());
        assert_eq!(InUse::default().keeps_table("eth1"), None);
        let served = InUse {
            ifaces: vec!["eth1".into()],
            unanswered: Vec::new(),
        };
        assert_eq!(
            served.keeps_table("eth1").as_deref(),
            Some("a running service uses eth1")
        );
        assert_eq!(served.keeps_table("eth2"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
