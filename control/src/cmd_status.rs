//! `flowlane status`: one screen: whether the daemon runs and the NICs it
//! owns (what each can do, who does each part of the plan, what the daemon
//! changed), and each running flowlane service with its interface, queues
//! (CPU, node, connections, indirection-table entries), rebalancing mode
//! and moves.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use clap::Args as ClapArgs;
use flowlane_daemon::ask::{ask_all, NoAnswer};
use flowlane_dataplane::control_socket::{
    self, HostStatus, MoveCostStatus, NicReport, Request, Response, ServiceStatus,
};
use flowlane_numa_sched::DoneBy;
use serde_json::{json, Value};

/// `flowlane status` flags.
#[derive(ClapArgs, Debug)]
pub(crate) struct Args {
    /// Where the services' control sockets are.
    #[arg(long, default_value = control_socket::RUN_DIR, value_parser = run_dir)]
    run_dir: PathBuf,
    /// The daemon's socket (`none`: the daemon is not asked).
    #[arg(long, default_value = flowlane_daemon::DEFAULT_SOCKET)]
    daemon_socket: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `--run-dir DIR` (`status`, `daemon`): a folder, or nothing yet (no
/// service has run); something else there is refused (a file given by
/// mistake read as a folder without services: "0 services", exit 0).
pub(crate) fn run_dir(text: &str) -> std::result::Result<PathBuf, String> {
    let dir = PathBuf::from(text);
    match std::fs::metadata(&dir) {
        Ok(m) if !m.is_dir() => Err(format!(
            "{text} is not a folder: give --run-dir the folder the services keep their control \
             sockets in ({} by default)",
            control_socket::RUN_DIR
        )),
        _ => Ok(dir),
    }
}

/// One service's part of the screen; `pid`: the process listening on its
/// socket as this process sees it (SO_PEERCRED), where it can tell: a
/// service in a PID namespace of its own calls itself by that one's.
fn service_json(s: &ServiceStatus, pid: Option<u32>) -> Value {
    let entries = |q: u32| s.table.iter().filter(|&&t| t == q).count();
    json!({
        "service": s.service,
        "pid": pid.unwrap_or(s.pid),
        "backend": s.backend,
        "iface": s.iface,
        "uptime_s": s.uptime_ns / 1_000_000_000,
        "stopping": s.stopping,
        "serves": s.shape(),
        "rebalance": s.rebalance,
        "rebalance_off_because": s.rebalance_off_because,
        "connections": s.queues.iter().map(|q| q.connections).sum::<u64>(),
        "moves_done": s.moves.done,
        "moves_failed": s.moves.failed,
        "moves_landed_with_error": s.moves.landed_with_error,
        // What the rebalancing loop prices a move at, as `flowlane
        // rebalance status --json` says it (the service's own answer).
        "move_cost": s.move_cost,
        "queues": s.queues.iter().map(|q| json!({
            "queue": q.queue,
            "cpu": q.cpu,
            "node": q.node,
            "connections": q.connections,
            "carrier": q.carrier,
            "table_entries": entries(q.queue),
        })).collect::<Vec<_>>(),
    })
}

/// The line of a service's part of the screen (`service_json`) that says
/// what its rebalancing loop prices a move at, as `flowlane rebalance
/// status` says it; None without a loop.
fn price_text(s: &Value) -> Option<String> {
    let cost: MoveCostStatus = serde_json::from_value(s.get("move_cost")?.clone()).ok()?;
    Some(crate::cmd_rebalance::price_line(&cost))
}

/// One owned NIC's part of the screen.
fn nic_json(n: &NicReport) -> Value {
    let by = |who: DoneBy| -> Vec<&str> {
        n.plan
            .iter()
            .filter(|p| p.done_by == who)
            .map(|p| p.part.as_str())
            .collect()
    };
    json!({
        "iface": n.caps.iface,
        "driver": n.caps.driver,
        "rx_queues": n.caps.rx_queues,
        "rx_queues_max": n.caps.max_rx_queues(),
        "node": n.caps.numa_node,
        "hardware": by(DoneBy::Hardware),
        "kernel": by(DoneBy::Kernel),
        "flowlane": by(DoneBy::Flowlane),
        "refused": by(DoneBy::Refused),
        "unknown": by(DoneBy::Unknown),
        "dry_run": n.dry_run,
        "changes": n.changes,
        "notes": n.notes,
        "restore_on_exit": n.restore_on_exit,
    })
}

/// How long the services may take to answer, all asked at once.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// What became of asking the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DaemonSaid {
    /// `--daemon-socket none`: not asked.
    NotAsked,
    /// Nothing listens on its socket.
    NotRunning(String),
    /// Its socket refuses this user: it runs, its NICs and the services
    /// registered with it unknown.
    Refused,
    /// It runs and did not answer (stopped, stuck): the same unknowns.
    NoAnswer(String),
    /// It answered.
    Answered,
}

/// Runs `flowlane status`.
pub(crate) fn run(args: Args) -> Result<()> {
    let not_asked = args.daemon_socket.as_os_str() == "none";
    let (said, host) = if not_asked {
        (DaemonSaid::NotAsked, HostStatus::default())
    } else {
        ask_daemon(&args.daemon_socket)
    };
    let nics: Vec<Value> = host.nics.iter().map(nic_json).collect();
    // The run directory's services, and those registered with the daemon
    // elsewhere.
    let scan = control_socket::scan_sockets(&args.run_dir);
    let mut refused = scan.refused;
    let mut sockets = scan.live;
    let in_run_dir = sockets.len();
    for s in host.services {
        if !sockets.contains(&s) && !refused.contains(&s) {
            sockets.push(s);
        }
    }
    sockets.retain(|p| *p != args.daemon_socket);
    // All asked at once: one that does not answer (stopped, stuck) costs
    // the screen this once, however many they are.
    let mut services = Vec::new();
    let (mut unanswered, mut errors) = (Vec::new(), Vec::new());
    let (mut from_run_dir, mut elsewhere) = (0, 0);
    let answers = ask_all(&sockets, &Request::Status, ASK_WITHIN);
    for (i, (path, answer)) in sockets.iter().zip(answers).enumerate() {
        let why = match answer.map(|a| (a.response, a.pid)) {
            Ok((Response::Status(s), pid)) => {
                services.push(service_json(&s, pid));
                if i < in_run_dir {
                    from_run_dir += 1;
                } else {
                    elsewhere += 1;
                }
                continue;
            }
            // Another daemon's socket (one in a bed's namespace given this
            // run directory): no service.
            Ok((r, _)) if flowlane_daemon::is_daemon_answer(&r) => continue,
            // Ended since it was found: no service.
            Err(NoAnswer::Gone(_)) => continue,
            Err(NoAnswer::Refused(_)) => {
                refused.push(path.clone());
                continue;
            }
            Err(NoAnswer::Failed(e)) => e,
            // It answered, refusing: said as its answer, not as silence.
            Ok((Response::Error { message }, _)) => {
                errors.push(json!({"socket": path, "error": message}));
                continue;
            }
            Ok((other, _)) => format!("it answered {other:?} to a status request"),
        };
        unanswered.push(json!({"socket": path, "error": why}));
    }
    // What could not be read makes the screen incomplete: said in one line
    // and a failing exit.
    let mut incomplete = Vec::new();
    if said == DaemonSaid::Refused {
        incomplete.push(control_socket::daemon_refused_line(&args.daemon_socket));
    }
    if let DaemonSaid::NoAnswer(e) = &said {
        incomplete.push(format!("the daemon did not answer: {e}"));
    }
    incomplete.extend(control_socket::refused_line(&refused));
    if let Some(first) = unanswered.first() {
        incomplete.push(format!(
            "no answer from {} service{} ({}{}): not on the screen (stopped, or stuck?)",
            unanswered.len(),
            if unanswered.len() == 1 { "" } else { "s" },
            first["socket"].as_str().unwrap_or_default(),
            if unanswered.len() > 1 { ", ..." } else { "" }
        ));
    }
    if let Some(first) = errors.first() {
        incomplete.push(format!(
            "{} service{} answered with an error ({}: {}{}): not on the screen",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            first["socket"].as_str().unwrap_or_default(),
            first["error"].as_str().unwrap_or_default(),
            if errors.len() > 1 { "; ..." } else { "" }
        ));
    }
    let incomplete = (!incomplete.is_empty()).then(|| incomplete.join("; "));
    let screen = json!({
        "daemon": {
            // Running: it answered, or its socket refused this user (a
            // socket nothing listens on refuses nobody); null: not asked.
            "running": match &said {
                DaemonSaid::NotAsked => Value::Null,
                DaemonSaid::NotRunning(_) => false.into(),
                _ => true.into(),
            },
            "answered": said == DaemonSaid::Answered,
            "refused": said == DaemonSaid::Refused,
            "socket": (!not_asked).then_some(&args.daemon_socket),
            "nics": nics,
        },
        "run_dir": args.run_dir,
        "services": services,
        "unanswered": unanswered,
        "errors": errors,
        "refused": refused,
    });
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&screen)?);
        return incomplete.map_or(Ok(()), |line| Err(anyhow::anyhow!(line)));
    }
    let socket = args.daemon_socket.display();
    match &said {
        DaemonSaid::NotAsked => outln!("daemon    not asked (--daemon-socket none)"),
        DaemonSaid::NotRunning(e) => outln!(
            "daemon    not running (no answer on {socket}: {e}; `flowlane daemon` starts it)"
        ),
        DaemonSaid::Refused => {
            outln!("daemon    running, its socket {socket} refuses this user")
        }
        DaemonSaid::NoAnswer(e) => outln!("daemon    running, socket {socket}, no answer: {e}"),
        DaemonSaid::Answered => outln!("daemon    running, socket {socket}"),
    }
    for n in &nics {
        // The strings of the NIC's list `k`.
        let lines = |k: &str| -> Vec<&str> {
            n[k].as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .collect()
        };
        let list = |k: &str| lines(k).join(", ");
        outln!(
            "nic       {} ({}): {} of {} rx queues, node {}",
            n["iface"].as_str().unwrap_or_default(),
            n["driver"].as_str().unwrap_or("driver unknown"),
            n["rx_queues"],
            n["rx_queues_max"],
            n["node"]
                .as_u64()
                .map_or_else(|| "none".into(), |x| x.to_string())
        );
        for who in ["hardware", "kernel", "flowlane", "refused", "unknown"] {
            let parts = list(who);
            if !parts.is_empty() {
                outln!("          {who:<9} {parts}");
            }
        }
        let (changes, notes) = (lines("changes"), lines("notes"));
        let when = if n["dry_run"] == true {
            " (dry run: nothing changed)"
        } else if n["restore_on_exit"] == true {
            " (put back when the daemon stops)"
        } else {
            " (kept when the daemon stops)"
        };
        if !changes.is_empty() {
            outln!("          changes   {}{when}", changes.join("; "));
        } else if notes.is_empty() {
            outln!("          changes   none: the NIC was as planned");
        } else {
            outln!("          changes   none");
        }
        if !notes.is_empty() {
            outln!("          notes     {}", notes.join("; "));
        }
    }
    outln!(
        "services  {}",
        services_line(
            &args.run_dir,
            (from_run_dir, elsewhere),
            refused.len() + unanswered.len() + errors.len(),
            &said
        )
    );
    for s in &services {
        outln!(
            "  {} (pid {}) on {} ({}, {}): {}, {} connections, rebalance {}{}, moves {} done, {} failed",
            s["service"].as_str().unwrap_or_default(),
            s["pid"],
            s["iface"].as_str().unwrap_or_default(),
            s["backend"].as_str().unwrap_or_default(),
            s["serves"].as_str().unwrap_or_default(),
            if s["stopping"] == true {
                format!("stopping (draining its connections) after {} s up", s["uptime_s"])
            } else {
                format!("up {} s", s["uptime_s"])
            },
            s["connections"],
            s["rebalance"].as_str().unwrap_or_default(),
            s["rebalance_off_because"]
                .as_str()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default(),
            s["moves_done"],
            s["moves_failed"]
        );
        if let Some(line) = price_text(s) {
            outln!("    {line}");
        }
        let kernel = s["backend"] == "kernel";
        for q in s["queues"].as_array().into_iter().flatten() {
            // A kernel-socket service's cores are listed as queues, and so
            // are the workers without a queue (software spill).
            let (label, via) = match q["carrier"].as_u64() {
                Some(c) => ("worker", format!("  (no queue: sends through queue {c})")),
                None if kernel => ("core", String::new()),
                None => ("queue", String::new()),
            };
            outln!(
                "    {label:<6} {:>3}  cpu {:>4}  node {:>2}  connections {:>7}  table entries {:>4}{via}",
                q["queue"],
                q["cpu"]
                    .as_u64()
                    .map_or_else(|| "-".into(), |c| c.to_string()),
                q["node"],
                q["connections"],
                q["table_entries"]
            );
        }
    }
    for u in &unanswered {
        let (socket, why) = (
            u["socket"].as_str().unwrap_or_default(),
            u["error"].as_str().unwrap_or_default(),
        );
        if why.contains(socket) {
            outln!("  {why}");
        } else {
            outln!("  no answer from {socket}: {why}");
        }
    }
    for e in &errors {
        outln!(
            "  {} answered with an error: {}",
            e["socket"].as_str().unwrap_or_default(),
            e["error"].as_str().unwrap_or_default()
        );
    }
    // What could not be read is not "none running": the screen above is
    // incomplete, said in one line and a failing exit.
    incomplete.map_or(Ok(()), |line| Err(anyhow::anyhow!(line)))
}

/// Asks the daemon at `socket` for its NICs and the services registered
/// with it.
fn ask_daemon(socket: &Path) -> (DaemonSaid, HostStatus) {
    // A daemon whose socket refuses this user is running all the same: say
    // so rather than "not running".
    let asked = control_socket::connect_within(socket, Duration::from_secs(1))
        .map_err(|e| match e.kind() {
            ErrorKind::PermissionDenied => DaemonSaid::Refused,
            ErrorKind::NotFound | ErrorKind::ConnectionRefused => {
                DaemonSaid::NotRunning(e.to_string())
            }
            _ => DaemonSaid::NoAnswer(e.to_string()),
        })
        .and_then(|stream| {
            control_socket::request_on(stream, socket, &Request::Host, Duration::from_secs(1))
                .map_err(|e| DaemonSaid::NoAnswer(e.to_string()))
        });
    match asked {
        Ok(Response::Host(h)) => (DaemonSaid::Answered, h),
        Ok(other) => (
            DaemonSaid::NoAnswer(format!("it answered {other:?} to a host request")),
            HostStatus::default(),
        ),
        Err(said) => (said, HostStatus::default()),
    }
}

/// The services line of the screen: how many answered and where they were
/// found; more that could not be read (`unread`), or whose registration
/// with the daemon could not be known, are said, not called "none".
fn services_line(
    run_dir: &Path,
    (in_run_dir, elsewhere): (usize, usize),
    unread: usize,
    daemon: &DaemonSaid,
) -> String {
    let shown = in_run_dir + elsewhere;
    let mut line = if elsewhere == 0 {
        format!("{shown} in {}", run_dir.display())
    } else {
        format!(
            "{shown}: {in_run_dir} in {}, {elsewhere} registered with the daemon elsewhere",
            run_dir.display()
        )
    };
    if unread > 0 {
        line.push_str(&format!("; {unread} more could not be read"));
    }
    // Those registered elsewhere are known only to the daemon.
    let unknown = match daemon {
        DaemonSaid::Refused => Some("its socket refuses this user"),
        DaemonSaid::NoAnswer(_) => Some("it did not answer"),
        DaemonSaid::NotAsked => Some("not asked: --daemon-socket none"),
        DaemonSaid::NotRunning(_) | DaemonSaid::Answered => None,
    };
    match unknown {
        Some(why) => line.push_str(&format!(
            "; those registered with the daemon elsewhere unknown ({why})"
        )),
        None if shown + unread == 0 => line.push_str(" (none running)"),
        None => {}
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service's part of `flowlane status --json` carries its loop's
    /// move price as `flowlane rebalance status --json` does (the same
    /// field of the service's answer), and the text form says it in
    /// `flowlane rebalance status`'s words; neither without a loop.
    #[test]
    fn a_service_shows_its_move_price_as_rebalance_status_does() {
        let mut s = crate::cmd_rebalance::tests::status(1, Vec::new(), Default::default());
        let shown = service_json(&s, None);
        assert_eq!(shown["move_cost"], Value::Null, "{shown}");
        assert_eq!(price_text(&shown), None);
        s.move_cost = Some(MoveCostStatus {
            fixed_ns: 9_860_000,
            per_connection_ns: 2_000,
            fit_moves: 12,
            fixed_price: false,
            refused_for_cost: 3,
        });
        let shown = service_json(&s, None);
        let rebalance_status = serde_json::to_value(&s).unwrap();
        assert_eq!(shown["move_cost"], rebalance_status["move_cost"], "{shown}");
        assert_eq!(shown["move_cost"]["fixed_ns"], 9_860_000);
        assert_eq!(shown["move_cost"]["per_connection_ns"], 2_000);
        assert_eq!(shown["move_cost"]["fit_moves"], 12);
        assert_eq!(shown["move_cost"]["refused_for_cost"], 3);
        assert_eq!(
            price_text(&shown).as_deref(),
            Some(
                "a move is priced at 9.86 ms + 2.0 us a connection (learned from the latest \
                 12 moves); 3 moves refused for their price"
            )
        );
    }

    /// Services that could not be read, or registered where only a daemon
    /// that could not be asked knows, are said, never "none running".
    #[test]
    fn the_services_line_calls_none_running_only_what_is_known() {
        let run = Path::new("/run/flowlane");
        assert_eq!(
            services_line(run, (0, 0), 0, &DaemonSaid::Answered),
            "0 in /run/flowlane (none running)"
        );
        assert_eq!(
            services_line(run, (1, 2), 0, &DaemonSaid::Answered),
            "3: 1 in /run/flowlane, 2 registered with the daemon elsewhere"
        );
        assert_eq!(
            services_line(run, (0, 0), 2, &DaemonSaid::Refused),
            "0 in /run/flowlane; 2 more could not be read; those registered with the daemon \
             elsewhere unknown (its socket refuses this user)"
        );
        assert_eq!(
            services_line(run, (0, 0), 0, &DaemonSaid::NotAsked),
            "0 in /run/flowlane; those registered with the daemon elsewhere unknown (not asked: \
             --daemon-socket none)"
        );
    }
}
