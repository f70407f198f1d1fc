//! `flowlane status`: one screen: whether the daemon runs and the NICs it
//! owns (what each can do, who does each part of the plan, what the daemon
//! changed), and each running flowlane service with its interface, queues
//! (CPU, node, connections, indirection-table entries), rebalancing mode
//! and moves.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args as ClapArgs;
use flowlane_dataplane::control_socket::{
    self, HostStatus, NicReport, Request, Response, ServiceStatus,
};
use flowlane_numa_sched::DoneBy;
use serde_json::{json, Value};

/// `flowlane status` flags.
#[derive(ClapArgs, Debug)]
pub(crate) struct Args {
    /// Where the services' control sockets are.
    #[arg(long, default_value = control_socket::RUN_DIR)]
    run_dir: PathBuf,
    /// The daemon's socket.
    #[arg(long, default_value = flowlane_daemon::DEFAULT_SOCKET)]
    daemon_socket: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One service's part of the screen.
fn service_json(s: &ServiceStatus) -> Value {
    let entries = |q: u32| s.table.iter().filter(|&&t| t == q).count();
    json!({
        "service": s.service,
        "pid": s.pid,
        "backend": s.backend,
        "iface": s.iface,
        "uptime_s": s.uptime_ns / 1_000_000_000,
        "rebalance": s.rebalance,
        "rebalance_off_because": s.rebalance_off_because,
        "connections": s.queues.iter().map(|q| q.connections).sum::<u64>(),
        "moves_done": s.moves.done,
        "moves_failed": s.moves.failed,
        "moves_landed_with_error": s.moves.landed_with_error,
        "queues": s.queues.iter().map(|q| json!({
            "queue": q.queue,
            "cpu": q.cpu,
            "node": q.node,
            "connections": q.connections,
            "table_entries": entries(q.queue),
        })).collect::<Vec<_>>(),
    })
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

/// Runs `flowlane status`.
pub(crate) fn run(args: Args) -> Result<()> {
    // A daemon whose socket refuses this user is running all the same: say
    // so (below, with the services' sockets that refuse it) rather than
    // "not running".
    let (daemon, daemon_refused) = match control_socket::answers_connect(&args.daemon_socket) {
        Ok(()) => (true, false),
        Err(e) => (false, e.kind() == std::io::ErrorKind::PermissionDenied),
    };
    let host = match daemon.then(|| {
        control_socket::request(
            &args.daemon_socket,
            &Request::Host,
            std::time::Duration::from_secs(1),
        )
    }) {
        Some(Ok(Response::Host(h))) => h,
        _ => HostStatus::default(),
    };
    let nics: Vec<Value> = host.nics.iter().map(nic_json).collect();
    // The run directory's services, and those registered with the daemon
    // elsewhere.
    let mut scan = control_socket::scan_sockets(&args.run_dir);
    if daemon_refused && !scan.refused.contains(&args.daemon_socket) {
        scan.refused.insert(0, args.daemon_socket.clone());
    }
    let refused = control_socket::refused_line(&scan.refused);
    let mut sockets = scan.live;
    for s in host.services {
        if !sockets.contains(&s) {
            sockets.push(s);
        }
    }
    let mut services = Vec::new();
    let mut unanswered = Vec::new();
    for path in sockets {
        if path == args.daemon_socket {
            continue;
        }
        match crate::cmd_rebalance::status(&path) {
            Ok(s) => services.push(service_json(&s)),
            Err(e) => unanswered.push(json!({"socket": path, "error": e.to_string()})),
        }
    }
    let screen = json!({
        "daemon": {"running": daemon, "socket": args.daemon_socket, "nics": nics},
        "run_dir": args.run_dir,
        "services": services,
        "unanswered": unanswered,
        "refused": scan.refused,
    });
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&screen)?);
        return refused.map_or(Ok(()), |line| Err(anyhow::anyhow!(line)));
    }
    if daemon {
        outln!("daemon    running, socket {}", args.daemon_socket.display());
    } else if daemon_refused {
        outln!(
            "daemon    running, its socket {} refuses this user",
            args.daemon_socket.display()
        );
    } else {
        outln!(
            "daemon    not running (no answer on {}; `flowlane daemon` starts it)",
            args.daemon_socket.display()
        );
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
        "services  {} in {}{}",
        services.len(),
        args.run_dir.display(),
        if services.is_empty() {
            " (none running)"
        } else {
            ""
        }
    );
    for s in &services {
        outln!(
            "  {} (pid {}) on {} ({}): up {} s, {} connections, rebalance {}{}, moves {} done, {} failed",
            s["service"].as_str().unwrap_or_default(),
            s["pid"],
            s["iface"].as_str().unwrap_or_default(),
            s["backend"].as_str().unwrap_or_default(),
            s["uptime_s"],
            s["connections"],
            s["rebalance"].as_str().unwrap_or_default(),
            s["rebalance_off_because"]
                .as_str()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default(),
            s["moves_done"],
            s["moves_failed"]
        );
        for q in s["queues"].as_array().into_iter().flatten() {
            // A kernel-socket service's cores are listed as queues.
            outln!(
                "    queue {:>3}  cpu {:>4}  node {:>2}  connections {:>7}  table entries {:>4}",
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
        outln!(
            "  no answer from {}: {}",
            u["socket"].as_str().unwrap_or_default(),
            u["error"].as_str().unwrap_or_default()
        );
    }
    // What could not be read is not "none running": the screen above is
    // incomplete, said in one line and a failing exit.
    refused.map_or(Ok(()), |line| Err(anyhow::anyhow!(line)))
}
