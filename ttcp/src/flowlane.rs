//! The flowlane backend: data connections served by flowlane's TCP on the
//! AF_XDP data path (`flowlane_dataplane::tcp_handler`), one worker per
//! receive queue; the measurement's handlers ([`crate::handlers`]) run on
//! the workers (run to completion) or on application threads
//! (`--mode queue-pair`, [`crate::cores`]).
//!
//! Each queue's worker owns a `flowlane_tcp::Stack` listening on the data
//! ports. The control
//! (sync) channel stays on a kernel socket: flowlane shares the interface's
//! address with the kernel and owns only its ports (the data ports and the
//! ephemeral range 40000-44999), so the control port must be none of them
//! (`RunArgs::plan` checks).
//!
//! Run the receiver inside the namespace of the interface it serves; on a
//! test bed `--bed NAME` does that from the root namespace
//! ([`flowlane_testbed::reexec_in_bed`]).

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use flowlane_dataplane::placement::machine_placement;
use flowlane_dataplane::service_args::ExecMode;
use flowlane_dataplane::service_control::{move_line, ServiceControl};
use flowlane_dataplane::stoppable_thread::StoppableThread;
use flowlane_dataplane::tcp_service::{self, rss_state};
use flowlane_dataplane::{TcpCountersSnapshot, TcpService, TcpServiceConfig};

use crate::backend::{Backend, DataThreads, Shared, TcpReader, Workers};
use crate::cores::Placed;
use crate::handlers::{self, HandlerSetup};
use crate::iface::{iface_for, iface_on_subnet};
use crate::plan::Plan;
use crate::procfs::TcpSnmp;

/// flowlane's TCP on the AF_XDP data path, the handlers run to completion
/// or in queue-pair mode.
#[derive(Debug)]
pub struct Flowlane(pub ExecMode);

impl Backend for Flowlane {
    fn name(&self) -> &'static str {
        "flowlane"
    }

    fn data_threads(&self) -> DataThreads {
        match self.0 {
            ExecMode::Rtc => DataThreads {
                prefixes: &["flowlane-q"],
                label: "flowlane workers flowlane-q* (TCP + AF_XDP rings, run to completion)",
            },
            ExecMode::QueuePair => DataThreads {
                prefixes: &["flowlane-q", "flowlane-app"],
                label: "flowlane workers flowlane-q* (TCP + AF_XDP rings) and application threads flowlane-app*",
            },
        }
    }

    fn start_receiver(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers> {
        let ports: Vec<u16> = (0..plan.params.ports)
            .map(|p| plan.params.base_port + p)
            .collect();
        if ports.contains(&plan.flowlane.control_port) {
            bail!(
                "control port {} is one of the data ports flowlane takes",
                plan.flowlane.control_port
            );
        }
        start(
            plan,
            self.0,
            &ports,
            false,
            handlers::receiver(plan),
            shared,
        )
    }

    fn start_sender(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers> {
        let queues = queue_count(plan)?;
        start(
            plan,
            self.0,
            &[],
            true,
            handlers::sender(plan, queues),
            shared,
        )
    }
}

/// The interface the data path serves: `--nic NAME` (which must be here),
/// else the receiver's that holds its address, or the sender's that has an
/// address on the receiver's subnet.
fn iface(plan: &Plan) -> Result<String> {
    let on_a_bed = "on a test bed: --bed NAME";
    match &plan.flowlane.iface {
        Some(i) => {
            if nix::net::if_::if_nametoindex(i.as_str()).is_err() {
                bail!(
                    "--nic {i}: no interface {i} in this network namespace (see `ip link`; {on_a_bed})"
                );
            }
            Ok(i.clone())
        }
        None if plan.receiver => iface_for(plan.addr).ok_or_else(|| {
            anyhow!(
                "no interface here holds {}: run inside the interface's namespace, or name it with --nic NAME ({on_a_bed})",
                plan.addr
            )
        }),
        None => iface_on_subnet(plan.addr).ok_or_else(|| {
            anyhow!(
                "no interface here has an address on receiver {}'s subnet: name the sender's with --nic NAME ({on_a_bed})",
                plan.addr
            )
        }),
    }
}

/// The service configuration of `plan` (interface, queues, CPUs, ports, RSS,
/// neighbours) with `queues` resolved.
fn service_config(plan: &Plan, ports: &[u16], active: bool) -> Result<(TcpServiceConfig, u32)> {
    let opts = &plan.flowlane.data_path;
    let mut config = TcpServiceConfig::new(&iface(plan)?);
    config.queues = opts.queues;
    let queues = interface_queues(&config)?;
    // Workers are placed on the CPUs the -m mappings name, if any.
    let named: Vec<u32> = plan.threads.iter().flatten().map(|&c| c as u32).collect();
    config.cpus = (!named.is_empty()).then_some(named);
    config.listen = ports.to_vec();
    config.active = active;
    config.busy_poll = opts.busy_poll;
    config.frames_per_queue = opts.frames_per_queue;
    config.zero_copy_receive = !opts.copy_receive;
    config.congestion = opts.congestion.algorithm();
    config.ecn = opts.ecn.mode();
    config.neighbors = tcp_service::neighbors(&opts.neighbor, &config.iface, None)?;
    // A sender on several queues without the NIC's RSS: refused by
    // `TcpService::start`.
    config.rss = match opts.rss_settings()? {
        Some(s) => Some(rss_state(&s.key, &s.table, queues)?),
        None => None,
    };
    if let Some(id) = opts.rss_table_map {
        config.nic = Some(flowlane_testbed::table_writer::table_writer(id)?);
    }
    if active && opts.neighbor.is_empty() {
        bail!(
            "--backend flowlane sender needs the receiver's MAC: --neighbor IP=MAC (or --bed NAME)"
        );
    }
    Ok((config, queues))
}

fn queue_count(plan: &Plan) -> Result<u32> {
    let mut config = TcpServiceConfig::new(&iface(plan)?);
    config.queues = plan.flowlane.data_path.queues;
    interface_queues(&config)
}

/// The queues `config` serves on its interface, checked (`--queues` within
/// the interface's); an error in ttcp's flags, as `TcpService::start`'s.
fn interface_queues(config: &TcpServiceConfig) -> Result<u32> {
    let (_, queues) = config
        .interface()
        .map_err(|e| anyhow!("{}", ttcp_flags(&format!("{e:#}"))))?;
    Ok(queues)
}

/// Starts the data path on the plan's interface, one worker per queue,
/// the handlers `setup` registers placed for `mode`; `ports`: listening
/// ports; `active`: the workers open connections (ephemeral ports
/// steered, RSS needed). The returned [`Workers`] stop the data path and
/// sum the per-thread counters.
fn start(
    plan: &Plan,
    mode: ExecMode,
    ports: &[u16],
    active: bool,
    setup: impl HandlerSetup,
    shared: Arc<Shared>,
) -> Result<Workers> {
    if !nix::unistd::geteuid().is_root() {
        bail!("--backend flowlane needs root (AF_XDP sockets, XDP program)");
    }
    let (config, queues) = service_config(plan, ports, active)?;
    let iface = config.iface.clone();
    let cores = machine_placement(None, queues as usize, config.cpus.as_deref())
        .context("placing the workers")?
        .cores();
    let watched = shared.clone();
    let interrupted = shared.clone();
    let placed = Placed::new(mode, &cores, setup, shared)?;
    let core_setup = placed.core_setup.clone();
    let service = TcpService::start(config, move |h| core_setup(h)).map_err(|e| {
        anyhow!(
            "starting flowlane's data path on {iface}: {}",
            ttcp_flags(&format!("{e:#}"))
        )
    })?;
    // The report's threads: the workers, where the data path pinned them.
    let worker_cpus = service
        .dataplane()
        .queues()
        .iter()
        .map(|q| q.cpu.map(|c| c as usize))
        .collect();
    // The receiver moves buckets (`--rebalance`), answers `flowlane
    // rebalance` and the daemon on its control socket, and registers with
    // the daemon where one runs.
    let control = if active {
        None
    } else {
        let r = &plan.flowlane.rebalance;
        let mut control =
            ServiceControl::new(&service, "ttcp-receiver", r.wish(), None, r.socket())?;
        if let Some(daemon) = r.daemon() {
            control.register_with_daemon(&daemon);
        }
        Some(control)
    };
    let service = Arc::new(service);
    // The report's retransmits at the window edges: flowlane's own counters
    // (the kernel's /proc/net/snmp never sees its segments). A weak
    // reference: the snapshots end before the run stops the service.
    let weak = Arc::downgrade(&service);
    let tcp: TcpReader = Arc::new(move || weak.upgrade().map(|s| tcp_snmp(&s.tcp_counters())));
    let watch = Watch::start(service.clone(), watched, control)?;
    let workers = Workers::custom(Box::new(move || {
        let rebalance = watch.stop();
        let service = Arc::into_inner(service).expect("the watch thread has ended");
        let mut summary = dataplane_summary(&service);
        if let Some(mode) = rebalance {
            summary["rebalance"] = mode.into();
        }
        if interrupted.interrupted() {
            summary["interrupted"] = true.into();
        }
        // The TCP counters as each worker published them when it exited
        // (a move or segment of the last 50 ms is in them).
        // A queue that failed while it ran is the watch's to say
        // (`Dataplane::check`), as before the stop returned it.
        let (last, _) = service.stop();
        set_tcp(&mut summary, &last.tcp);
        eprintln!("{summary}");
        placed.finish()
    }));
    Ok(workers.with_tcp(tcp).with_thread_cpus(worker_cpus))
}

/// A data-path error as ttcp's flags say it: the configuration fields it
/// names as the services' flags (`service_args::cli_terms`), the services'
/// `--port` as ttcp's `-p` (its data ports `-p`..`-p`+`-P`-1) and their
/// `--iface` as ttcp's `--nic`.
fn ttcp_flags(error: &str) -> String {
    flowlane_dataplane::service_args::cli_terms(error)
        .replace("another --port", "another -p")
        .replace("use --iface NAME", "use --nic NAME")
}

/// flowlane's TCP counters summed over the queues, as `/proc/net/snmp`'s
/// (its `segments_out` counts retransmitted segments too). The stack
/// publishes them every 50 ms: a read is that recent.
fn tcp_snmp(queues: &[(u32, TcpCountersSnapshot)]) -> TcpSnmp {
    let mut t = TcpSnmp::default();
    for (_, c) in queues {
        t.in_segs += c.segments_in;
        t.out_segs += c.segments_out;
        t.retrans_segs += c.retransmits;
    }
    t
}

/// A thread that checks, every [`WATCH_PERIOD`], that the data path's
/// interface, namespace, XDP program and sockets are still there; when one
/// vanished (the bed was removed under the run) it fails the run with one
/// line saying what, so the measurement stops instead of waiting forever.
/// On a receiver it also runs the service's control (rebalancing rounds,
/// the control socket) every [`CONTROL_PERIOD`], one JSON line on stderr
/// per move.
struct Watch {
    /// Returns the rebalancing loop's mode at the end (a receiver's).
    thread: StoppableThread<Option<&'static str>>,
}

/// How often [`Watch`] looks.
const WATCH_PERIOD: std::time::Duration = std::time::Duration::from_millis(250);

/// How often [`Watch`] runs the receiver's control.
const CONTROL_PERIOD: std::time::Duration = std::time::Duration::from_millis(10);

impl Watch {
    fn start(
        service: Arc<TcpService>,
        shared: Arc<Shared>,
        mut control: Option<ServiceControl>,
    ) -> Result<Watch> {
        let thread = StoppableThread::spawn("flowlane-watch", move |stop| {
            let mut next_check = std::time::Instant::now();
            while !stop.is_set() {
                if std::time::Instant::now() >= next_check {
                    if let Err(gone) = service.dataplane().check() {
                        shared.fail(format!("flowlane's data path stopped: {gone}"));
                        break;
                    }
                    next_check += WATCH_PERIOD;
                }
                match control.as_mut() {
                    Some(c) => {
                        for m in c.poll(&service) {
                            eprintln!("{}", move_line(&m));
                        }
                        stop.sleep(CONTROL_PERIOD);
                    }
                    None => {
                        stop.sleep(WATCH_PERIOD);
                    }
                }
            }
            control.map(|c| c.rebalance_mode())
        })
        .context("starting the data path's watch thread")?;
        Ok(Watch { thread })
    }

    /// Stops the thread; returns the receiver's rebalancing mode (`auto`,
    /// `off`, `storm`), None on a sender.
    fn stop(self) -> Option<&'static str> {
        self.thread.stop().flatten()
    }
}

/// The data path's counters per queue as one JSON line (written to stderr
/// when the run ends, beside the JSON report on stdout): the AF_XDP
/// socket's (`rx_ring_full`, `fill_ring_empty`, `rx_dropped`, TX kicks …),
/// the steering program's and the TCP stack's. Loss at many connections
/// shows here as `fill_ring_empty`/`rx_dropped`.
fn dataplane_summary(service: &TcpService) -> serde_json::Value {
    let dp = service.dataplane();
    let queues: Vec<serde_json::Value> = dp
        .counters()
        .into_iter()
        .map(|(q, xsk)| {
            let steer = dp.steering_stats(q.queue).ok().map(|s| {
                serde_json::json!({
                    "redirected": s.redirected,
                    "passed": s.passed,
                    "no_socket": s.no_socket,
                    "fragment_dropped": s.fragment_dropped,
                })
            });
            serde_json::json!({"queue": q.queue, "xsk": xsk, "tcp": null, "steer": steer})
        })
        .collect();
    serde_json::json!({"event": "dataplane", "queues": queues})
}

/// Puts each queue's TCP counters into a [`dataplane_summary`].
fn set_tcp(summary: &mut serde_json::Value, tcp: &[(u32, TcpCountersSnapshot)]) {
    let Some(queues) = summary["queues"].as_array_mut() else {
        return;
    };
    for q in queues {
        let c = tcp.iter().find(|(n, _)| q["queue"] == *n).map(|(_, c)| c);
        q["tcp"] = serde_json::to_value(c).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::test_plan as plan;

    /// A port-in-use error names ttcp's own flag.
    #[test]
    fn a_port_in_use_names_ttcps_flag() {
        let e = ttcp_flags(
            "port 5001/tcp is in use by a kernel socket (…): choose another --port or stop it",
        );
        assert!(e.ends_with("choose another -p or stop it"), "{e}");
        let e = ttcp_flags(&format!(
            "no interface eth9 ({})",
            flowlane_dataplane::iface::NOT_HERE
        ));
        assert!(e.contains("use --nic NAME"), "{e}");
        assert!(!e.contains("--iface"), "{e}");
    }

    /// `--queues` past the interface's is said in ttcp's flags, not in
    /// the library's configuration fields (`lo` has one queue).
    #[test]
    fn too_many_queues_are_said_in_ttcps_flags() {
        let e = queue_count(&plan("-s -m 1,*,127.0.0.9 --backend flowlane --queues 3"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("asked for 3 (use --queues 1..=1)"), "{e}");
        assert!(!e.contains("TcpServiceConfig"), "{e}");
    }

    /// The interface is `--nic`'s, or found from the addresses: never a
    /// name guessed for the sender, and a missing one is named with the
    /// flag that gave it.
    #[test]
    fn the_interface_is_named_or_found_never_guessed() {
        let e = iface(&plan("-s -m 1,*,203.0.113.7 --backend flowlane"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("203.0.113.7's subnet") && e.contains("--nic NAME"),
            "{e}"
        );
        assert_eq!(
            iface(&plan("-s -m 1,*,127.0.0.9 --backend flowlane")).unwrap(),
            "lo"
        );
        let e = iface(&plan(
            "-s -m 1,*,127.0.0.9 --backend flowlane --nic nosuch0",
        ))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("--nic nosuch0: no interface nosuch0"), "{e}");
        assert!(!e.contains("--iface"), "{e}");
        assert_eq!(
            iface(&plan("-r -m 1,*,127.0.0.1 --backend flowlane --nic lo")).unwrap(),
            "lo"
        );
        // An IPv6 receiver: found by its family's subnets as well
        // (2001:db8::/32, RFC 3849, is no machine's).
        let e = iface(&plan("-s -m 1,*,2001:db8::7 --backend flowlane"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2001:db8::7's subnet"), "{e}");
        for side in ["-r", "-s"] {
            assert_eq!(
                iface(&plan(&format!("{side} -m 1,*,::1 --backend flowlane"))).unwrap(),
                "lo"
            );
        }
    }
}
