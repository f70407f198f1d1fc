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
use flowlane_daemon::ask::{ask_all, NoAnswer};
use flowlane_daemon::{Daemon, DaemonConfig};
use flowlane_dataplane::affinity::allowed_cpus;
use flowlane_dataplane::control_socket::{self, Request, Response};

use crate::host_plan::{self, Owned, PutBack};
use crate::sysroot::Roots;
use crate::topology_args::TopologyArgs;

/// `flowlane daemon` flags; each wins over `--config`'s key of the same
/// name, and both over the defaults (contrib/flowlane/daemon.toml).
#[derive(ClapArgs, Debug)]
pub(crate) struct Args {
    /// A configuration file (TOML: metrics, run_dir, socket,
    /// scrape_timeout_ms, ifaces, dry_run, restore_on_exit, state_dir).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address of the metrics endpoint (`GET /metrics`: the classic text
    /// format, OpenMetrics to scrapers that ask for it) [default:
    /// 127.0.0.1:9477]; a link-local IPv6 address as `[fe80::1%IF]:PORT`
    /// (RFC 4007 §11).
    #[arg(long, value_name = "ADDR:PORT", value_parser = flowlane_dataplane::zoned_addr::listen_address)]
    metrics: Option<SocketAddr>,
    /// Where the services' control sockets are [default: /run/flowlane].
    #[arg(long, value_parser = crate::cmd_status::run_dir)]
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
    /// (default: put back what it changed); their state files are removed
    /// all the same: the next daemon takes the NICs as this one leaves them.
    #[arg(long)]
    keep_on_exit: bool,
    /// Where the originals of the NICs the daemon owns are kept, a file
    /// each, written before it changes anything and removed when it stops
    /// cleanly: a daemon started after one that was killed puts back what
    /// was there before that one [default: /run/flowlane-daemon].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
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
        if let Some(d) = &self.state_dir {
            c.state_dir = d.clone();
        }
        c.dry_run |= self.dry_run;
        c.restore_on_exit &= !self.keep_on_exit;
        Ok(c)
    }
}

pub(crate) fn run(args: Args) -> Result<()> {
    let mut config = args.config()?;
    config.ifaces = distinct_ifaces(&config.ifaces);
    let signals = ServiceSignals::install()?;
    // What the daemon changes on its NICs goes back however it ends: on
    // its way out below, or on an error or a panic (unwinding drops this),
    // the run directory's services then asked which NICs they use. A
    // systemd restart would otherwise take the daemon's own settings for
    // what was there before it.
    let mut owned = PutBack::new({
        let config = config.clone();
        move |nics| {
            let in_use = in_use(
                &control_socket::live_sockets(&config.run_dir),
                ASK_WITHIN,
                &config.ifaces,
            );
            if let Err(e) = restore(nics, &config, &in_use) {
                tracing::error!("{e:#}");
            }
        }
    });
    own_nics(&config, owned.nics_mut())?;
    let mut daemon = Daemon::start(&config)?;
    daemon.set_nics(owned.nics().iter().map(|o| o.report.clone()).collect());
    if !owned.nics().is_empty() {
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
            "nics": owned.nics().iter().map(|o| serde_json::json!({
                "iface": o.report.caps.iface,
                "dry_run": o.report.dry_run,
                "changes": o.report.changes,
                "notes": o.report.notes,
            })).collect::<Vec<_>>(),
        })
    );
    let mut next_look = std::time::Instant::now() + LOOK_AGAIN;
    while !signals.stop_requested() {
        daemon.poll();
        if std::time::Instant::now() >= next_look {
            next_look = std::time::Instant::now() + LOOK_AGAIN;
            look_again(owned.nics_mut(), &daemon);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Which NICs running services use, asked while the daemon still knows
    // the services registered from elsewhere than the run directory; the
    // NICs put back before the metrics endpoint stops (it may wait for a
    // scrape under way), all well within systemd's TimeoutStopSec=10s.
    let in_use = in_use(&daemon.service_sockets(), ASK_WITHIN, &config.ifaces);
    let mut restored = Ok(());
    owned.finish(|nics| restored = restore(nics, &config, &in_use));
    drop(daemon);
    restored
}

/// `ifaces`, each NIC once: the names of one interface (a name given
/// twice, a name and an alternative name of it) are one NIC, owned by its
/// name as sysfs knows it; a name no interface has now is kept as given
/// (owning it fails, in one line). Said once per NIC named twice.
fn distinct_ifaces(ifaces: &[String]) -> Vec<String> {
    let mut seen: Vec<(Option<u32>, String)> = Vec::new();
    let mut out = Vec::new();
    for given in ifaces {
        let index = nix::net::if_::if_nametoindex(given.as_str()).ok();
        let name = index
            .and_then(|i| nix::net::if_::if_indextoname(i).ok())
            .and_then(|n| n.into_string().ok())
            .unwrap_or_else(|| given.clone());
        let same = |(i, n): &(Option<u32>, String)| match (index, i) {
            (Some(a), Some(b)) => a == *b,
            _ => *n == name,
        };
        if let Some((_, first)) = seen.iter().find(|s| same(s)) {
            tracing::warn!("--iface {given} names {first} again: owned once");
            continue;
        }
        seen.push((index, name.clone()));
        out.push(name);
    }
    out
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
        let keep_table = || {
            in_use(
                &daemon.service_sockets(),
                ASK_WITHIN,
                std::slice::from_ref(&iface),
            )
            .keeps_table(&iface)
        };
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
/// dry) into `owned`; stops at the first failure (what the NICs before it
/// got is in `owned`, for the caller to put back).
fn own_nics(config: &DaemonConfig, owned: &mut Vec<Owned>) -> Result<()> {
    if config.ifaces.is_empty() {
        return Ok(());
    }
    let roots = Roots::default();
    let topo = TopologyArgs::default().load()?;
    let budget = allowed_cpus();
    // Before the daemon runs, only the run directory's services are known
    // (one elsewhere registers within 5 s of the daemon's start; until
    // then its XDP program tells that it serves its NIC).
    let in_use = in_use(
        &control_socket::live_sockets(&config.run_dir),
        ASK_WITHIN,
        &config.ifaces,
    );
    for iface in &config.ifaces {
        owned.push(host_plan::own(
            &roots,
            iface,
            &topo,
            Some(&budget),
            config.dry_run,
            config.restore_on_exit,
            in_use.keeps_table(iface).as_deref(),
            Some(&config.state_dir),
        )?);
    }
    Ok(())
}

/// What the running services said of the NICs they serve, and which
/// NICs carry an XDP program.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct InUse {
    /// The interfaces the services that answered serve.
    ifaces: Vec<String>,
    /// The sockets of services that did not answer (stuck, stopped, busy,
    /// or refusing): any of them may serve any NIC.
    unanswered: Vec<PathBuf>,
    /// NICs an XDP program is attached to (or of which that cannot be
    /// told), each with why it may be in use: a service the daemon cannot
    /// ask (`--control-socket none`, not registered yet) may serve it.
    xdp: Vec<(String, String)>,
}

impl InUse {
    /// Why `iface`'s RSS table must stay as it is, if it must: a running
    /// service uses it, an XDP program is attached to it (a service the
    /// daemon cannot ask may serve it), or a service that did not answer
    /// may use it (its buckets are its own: a table rewritten under it
    /// would send its flows to the wrong queues).
    fn keeps_table(&self, iface: &str) -> Option<String> {
        if self.ifaces.iter().any(|i| i == iface) {
            return Some(format!("a running service uses {iface}"));
        }
        if let Some((_, why)) = self.xdp.iter().find(|(i, _)| i == iface) {
            return Some(why.clone());
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
/// given `within` to answer, and which of `owned` (the NICs the daemon
/// owns) carry an XDP program.
fn in_use(sockets: &[PathBuf], within: Duration, owned: &[String]) -> InUse {
    InUse {
        xdp: owned
            .iter()
            .filter_map(|iface| Some((iface.clone(), xdp_on(iface)?)))
            .collect(),
        ..services_on(sockets, within)
    }
}

/// Why `iface` may be in use because of an XDP program, if it may: one is
/// attached (named with the process that holds it, where this process
/// may see that), or whether one is cannot be told. A NIC that is gone
/// has none.
fn xdp_on(iface: &str) -> Option<String> {
    match flowlane_daemon::nic_xdp::xdp_program(iface) {
        Ok(None) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Ok(Some(id)) => {
            let holder = nix::net::if_::if_nametoindex(iface)
                .ok()
                .and_then(flowlane_dataplane::iface::xdp_holder)
                .map(|p| format!(", held by {p}"))
                .unwrap_or_default();
            Some(format!(
                "an XDP program (id {id}{holder}) is attached to {iface}: a service the daemon \
                 cannot ask (--control-socket none, or not registered yet) may serve it"
            ))
        }
        Err(e) => Some(format!(
            "whether an XDP program is attached to {iface} cannot be told ({e}): a service may \
             serve it"
        )),
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
            // Gone since it was found, or another daemon's socket: no
            // service.
            Err(NoAnswer::Gone(_)) => {}
            Ok(r) if flowlane_daemon::is_daemon_answer(&r) => {}
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
/// services said (the RSS tables they use, or may, stay). The NICs' state
/// files go (put back, or handed over as configured), except where
/// something could not be put back: the file keeps that for the next
/// daemon.
///
/// # Errors
/// Something of a NIC could not be put back: what is left, where it is
/// kept and what to do, a clause per NIC, in one line.
fn restore(owned: Vec<Owned>, config: &DaemonConfig, in_use: &InUse) -> Result<()> {
    if !config.restore_on_exit {
        for o in owned {
            let iface = o.report.caps.iface.clone();
            if let Some(e) = o.hand_over() {
                tracing::warn!("{iface}: {e}");
            }
        }
        return Ok(());
    }
    if config.dry_run {
        return Ok(());
    }
    let mut left = Vec::new();
    for o in owned {
        let iface = o.report.caps.iface.clone();
        let keep = in_use.keeps_table(&iface);
        let done = o.restore(&Roots::default(), keep.as_deref());
        if !done.is_empty() {
            flowlane_apps::outln!(
                "{}",
                serde_json::json!({"event": "restored", "iface": iface, "done": done})
            );
        }
        left.extend(done.left);
    }
    match left.is_empty() {
        true => Ok(()),
        false => Err(anyhow::anyhow!("{}", left.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::process::Command;
    use std::time::Instant;

    /// A veth pair of its own for a test (`NAME` and `NAMEp`), removed on
    /// drop; None, said, where this test cannot make one (not root, no
    /// `ip`).
    struct Veth(String);

    impl Veth {
        fn new(tag: &str) -> Option<Veth> {
            if !nix::unistd::geteuid().is_root() {
                eprintln!("skipped: making a veth pair needs root");
                return None;
            }
            let name = format!("fl{tag}{}", std::process::id() % 100_000);
            let peer = format!("{name}p");
            let made = Command::new("ip")
                .args(["link", "add", &name, "type", "veth", "peer", "name", &peer])
                .status();
            match made {
                Ok(s) if s.success() => Some(Veth(name)),
                other => {
                    eprintln!("skipped: `ip link add {name} type veth` failed: {other:?}");
                    None
                }
            }
        }

        fn ip(&self, args: &[&str]) -> bool {
            Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        }
    }

    impl Drop for Veth {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).status();
        }
    }

    /// Attaches a program that passes every frame to `veth` (generic XDP,
    /// through netlink: no process holds it), compiled here; false, said,
    /// where this test cannot.
    fn attach_xdp_pass(veth: &Veth) -> bool {
        let dir = std::env::temp_dir().join(format!("fl-xdp-pass-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let (src, obj) = (dir.join("pass.c"), dir.join("pass.o"));
        std::fs::write(
            &src,
            "__attribute__((section(\"xdp\"), used)) int pass(void *ctx) { return 2; }\n\
             char _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n",
        )
        .unwrap();
        let compiled = Command::new("clang")
            .args(["-O2", "-target", "bpf", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .is_ok_and(|s| s.success());
        let attached = compiled
            && veth.ip(&[
                "link",
                "set",
                "dev",
                &veth.0,
                "xdpgeneric",
                "obj",
                obj.to_str().unwrap(),
                "sec",
                "xdp",
            ]);
        let _ = std::fs::remove_dir_all(&dir);
        if !attached {
            eprintln!("skipped: cannot compile (clang -target bpf) or attach an XDP program");
        }
        attached
    }

    /// A NIC an XDP program is attached to is in use although no service
    /// answers for it (one with `--control-socket none`, or not registered
    /// yet): its RSS table stays, said why; without the program it does not.
    #[test]
    fn a_nic_with_an_xdp_program_keeps_its_table() {
        let Some(veth) = Veth::new("xdp") else {
            return;
        };
        let name = veth.0.clone();
        let owned = std::slice::from_ref(&name);
        let within = Duration::from_millis(100);
        assert_eq!(in_use(&[], within, owned).keeps_table(&name), None);
        if !attach_xdp_pass(&veth) {
            return;
        }
        let why = in_use(&[], within, owned)
            .keeps_table(&name)
            .expect("the table stays");
        assert!(
            why.starts_with("an XDP program (id ")
                && why.contains(&format!(") is attached to {name}: ")),
            "{why}"
        );
        assert_eq!(
            in_use(&[], within, &["eth-not-owned".into()]).keeps_table(&name),
            None,
            "asked only of the NICs owned"
        );
        assert!(veth.ip(&["link", "set", "dev", &name, "xdpgeneric", "off"]));
        assert_eq!(in_use(&[], within, owned).keeps_table(&name), None);
    }

    /// One NIC named twice, or by its name and an alternative name, is
    /// owned once, by the name sysfs knows; names no interface has are
    /// kept as given, each once.
    #[test]
    fn the_names_of_one_nic_are_owned_once() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(distinct_ifaces(&names(&["lo", "lo"])), ["lo"]);
        assert_eq!(
            distinct_ifaces(&names(&["flnone0", "lo", "flnone0", "flnone1"])),
            ["flnone0", "lo", "flnone1"]
        );
        let Some(veth) = Veth::new("alt") else {
            return;
        };
        let alt = format!("{}alt", veth.0);
        if !veth.ip(&["link", "property", "add", "dev", &veth.0, "altname", &alt]) {
            eprintln!("skipped: this kernel or ip has no alternative names");
            return;
        }
        let owned = distinct_ifaces(&[alt.clone(), veth.0.clone(), alt]);
        assert_eq!(owned, std::slice::from_ref(&veth.0));
    }

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
            ..InUse::default()
        };
        assert_eq!(
            served.keeps_table("eth1").as_deref(),
            Some("a running service uses eth1")
        );
        assert_eq!(served.keeps_table("eth2"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
