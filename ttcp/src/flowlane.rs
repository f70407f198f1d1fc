//! The flowlane backend: data connections served by flowlane's TCP on the
//! AF_XDP data path (`flowlane_dataplane::tcp_handler`), one worker per
//! receive queue, run to completion.
//!
//! Each queue's worker owns a `flowlane_tcp::Stack` listening on the data
//! ports; its [`ConnHandler`] counts received payload by [`Phase`] in the
//! worker's own [`WorkerCounters`] (relaxed atomics written by that worker
//! only), which the measuring thread reads when the run ends. The control
//! (sync) channel stays on a kernel socket: flowlane shares the interface's
//! address with the kernel and owns only its ports (the data ports and the
//! ephemeral range 40000-44999), so the control port must be none of them
//! (`RunArgs::plan` checks).
//!
//! Run the receiver inside the namespace of the interface it serves; on a
//! test bed `--bed NAME` does that from the root namespace
//! ([`flowlane_testbed::reexec_in_bed`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use flowlane_app::{CloseReason, ConnHandle, ConnHandler, Net, SetupExt};
use flowlane_dataplane::counters;
use flowlane_dataplane::service_control::{move_line, ServiceControl};
use flowlane_dataplane::tcp_service::{self, rss_state};
use flowlane_dataplane::{TcpCountersSnapshot, TcpHandler, TcpService, TcpServiceConfig};

use crate::backend::{Backend, DataThreads, Phase, Shared, ThreadStats, Workers};
use crate::iface::iface_for;
use crate::plan::Plan;
use crate::sync::Mode;

/// flowlane's TCP on the AF_XDP data path.
#[derive(Debug)]
pub struct Flowlane;

/// One worker's counts: written by that worker only (the data path's
/// single-writer counters, `flowlane_dataplane::counters::add`), read by the
/// measuring thread. Indexed by [`Phase`], so not a named counter set;
/// aligned so that two workers never share a cache line.
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Payload bytes received (or echoed in latency mode: received) by [`Phase`].
    pub bytes: [AtomicU64; 5],
    /// Connections accepted.
    pub connections: AtomicU64,
}

impl WorkerCounters {
    fn add(&self, phase: Phase, n: usize) {
        counters::add(&self.bytes[phase as usize], n as u64);
    }

    /// The counts now, as a [`ThreadStats`].
    pub fn stats(&self) -> ThreadStats {
        let mut st = ThreadStats::default();
        for (o, c) in st.bytes.iter_mut().zip(&self.bytes) {
            *o = c.load(Ordering::Relaxed);
        }
        st.connections = self.connections.load(Ordering::Relaxed) as usize;
        st
    }
}

type Registry = Arc<Mutex<Vec<(u32, Arc<WorkerCounters>)>>>;

impl Backend for Flowlane {
    fn name(&self) -> &'static str {
        "flowlane"
    }

    fn data_threads(&self) -> DataThreads {
        DataThreads {
            prefix: "flowlane-q",
            label: "flowlane workers flowlane-q* (TCP + AF_XDP rings, run to completion)",
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
        let echo = plan.params.mode != Mode::Throughput;
        let buf_len = plan.params.buffer.max(plan.params.msg_size);
        let local_ip = plan.addr;
        let lports = ports.clone();
        start(
            plan,
            &ports,
            false,
            move |h, w, sh| {
                for &port in &lports {
                    let rx = Rx {
                        shared: sh.clone(),
                        w: w.clone(),
                        echo,
                        local: SocketAddr::new(local_ip, port),
                        buf: vec![0; buf_len],
                    };
                    h.listen(port, rx)
                        .map_err(|e| format!("queue {} port {port}: {e}", h.queue()))?;
                }
                Ok(())
            },
            shared,
        )
    }

    fn start_sender(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers> {
        let remote = plan.addr;
        let total = plan.connections();
        let (base, nports) = (plan.params.base_port, plan.params.ports);
        let buffer = plan.params.buffer;
        let queues = queue_count(plan)?;
        start(
            plan,
            &[],
            true,
            move |h, w, sh| {
                let q = h.queue();
                let mut n = total / queues as usize;
                if q == 0 {
                    n += total % queues as usize;
                }
                // Connection k of this queue goes to data port (first + k) mod P.
                let first = if q == 0 {
                    0
                } else {
                    (total / queues as usize) * q as usize + total % queues as usize
                };
                let to: Vec<SocketAddr> = (0..n)
                    .map(|k| {
                        let port = base + ((first + k) % usize::from(nports)) as u16;
                        SocketAddr::new(remote, port)
                    })
                    .collect();
                if !to.is_empty() {
                    h.add(Tx {
                        shared: sh.clone(),
                        w: w.clone(),
                        to,
                        conns: Vec::new(),
                        sending: false,
                        closed: false,
                        buf: vec![0x5a; buffer],
                    });
                }
                Ok(())
            },
            shared,
        )
    }
}

fn iface(plan: &Plan) -> Result<String> {
    match &plan.flowlane.iface {
        Some(i) => Ok(i.clone()),
        None if plan.receiver => iface_for(plan.addr).ok_or_else(|| {
            anyhow!(
                "no interface here holds {}: run inside the interface's namespace (on a test bed: --bed NAME)",
                plan.addr
            )
        }),
        // The sender's interface: the one with an address on the receiver's
        // subnet would need the routing table; the test bed's is xsk0.
        None => Ok("xsk0".into()),
    }
}

/// The service configuration of `plan` (interface, queues, CPUs, ports, RSS,
/// neighbours) with `queues` resolved.
fn service_config(plan: &Plan, ports: &[u16], active: bool) -> Result<(TcpServiceConfig, u32)> {
    let opts = &plan.flowlane.data_path;
    let mut config = TcpServiceConfig::new(&iface(plan)?);
    config.queues = opts.queues;
    let (_, queues) = config.interface()?;
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
    config.rss = match opts.rss_settings()? {
        Some(s) => Some(rss_state(&s.key, &s.table, queues)?),
        None if active && queues > 1 => bail!(
            "--backend flowlane sender on {queues} queues needs the NIC's RSS (--rss-key/--rss-table, or --bed NAME)"
        ),
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
    Ok(config.interface()?.1)
}

/// Starts the data path on the plan's interface, one worker per queue, each
/// with a `TcpHandler` that `setup` configures; `ports`: listening ports;
/// `active`: the workers open connections (ephemeral ports steered, RSS
/// needed). The returned [`Workers`] stop the data path and sum the
/// per-worker counters.
fn start(
    plan: &Plan,
    ports: &[u16],
    active: bool,
    setup: impl Fn(&mut TcpHandler, &Arc<WorkerCounters>, &Arc<Shared>) -> std::result::Result<(), String>
        + Send
        + Sync
        + 'static,
    shared: Arc<Shared>,
) -> Result<Workers> {
    if !nix::unistd::geteuid().is_root() {
        bail!("--backend flowlane needs root (AF_XDP sockets, XDP program)");
    }
    let (config, _) = service_config(plan, ports, active)?;
    let iface = config.iface.clone();
    let registry: Registry = Arc::default();
    let reg = registry.clone();
    let watched = shared.clone();
    let service = TcpService::start(config, move |h| {
        let w = Arc::new(WorkerCounters::default());
        setup(h, &w, &shared)?;
        reg.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((h.queue(), w));
        Ok::<_, String>(())
    })
    .with_context(|| format!("starting flowlane's data path on {iface}"))?;
    // The receiver moves buckets (`--rebalance`) and answers `flowlane
    // rebalance` on its control socket.
    let control = if active {
        None
    } else {
        let r = &plan.flowlane.rebalance;
        Some(ServiceControl::new(
            &service,
            "ttcp-receiver",
            r.mode(),
            r.socket(),
        )?)
    };
    let service = Arc::new(service);
    let watch = Watch::start(service.clone(), watched, control)?;
    Ok(Workers::custom(Box::new(move || {
        watch.stop();
        let service = Arc::into_inner(service).expect("the watch thread has ended");
        let mut summary = dataplane_summary(&service);
        // The TCP counters as each worker published them when it exited
        // (a move or segment of the last 50 ms is in them).
        let last = service.stop();
        set_tcp(&mut summary, &last.tcp);
        eprintln!("{summary}");
        let reg = registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = ThreadStats::default();
        for (_, w) in reg.iter() {
            total.merge(w.stats())?;
        }
        Ok(total)
    })))
}

/// A thread that checks, every [`WATCH_PERIOD`], that the data path's
/// interface, namespace, XDP program and sockets are still there; when one
/// vanished (the bed was removed under the run) it fails the run with one
/// line saying what, so the measurement stops instead of waiting forever.
/// On a receiver it also runs the service's control (rebalancing rounds,
/// the control socket) every [`CONTROL_PERIOD`], one JSON line on stderr
/// per move.
struct Watch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
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
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("flowlane-watch".into())
            .spawn(move || {
                let mut next_check = std::time::Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    if std::time::Instant::now() >= next_check {
                        if let Err(gone) = service.dataplane().check() {
                            shared.fail(format!("flowlane's data path stopped: {gone}"));
                            return;
                        }
                        next_check += WATCH_PERIOD;
                    }
                    match control.as_mut() {
                        Some(c) => {
                            for m in c.poll(&service) {
                                eprintln!("{}", move_line(&m));
                            }
                            std::thread::park_timeout(CONTROL_PERIOD);
                        }
                        None => std::thread::park_timeout(WATCH_PERIOD),
                    }
                }
            })
            .context("starting the data path's watch thread")?;
        Ok(Watch { stop, thread })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
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

/// A worker's sender handler: opens its connections at once, sends from t0
/// to the end of the cool-down (bytes counted by phase), then closes.
struct Tx {
    shared: Arc<Shared>,
    w: Arc<WorkerCounters>,
    to: Vec<SocketAddr>,
    conns: Vec<ConnHandle>,
    sending: bool,
    closed: bool,
    buf: Vec<u8>,
}

impl Tx {
    fn fill(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if !self.sending || self.closed {
            return;
        }
        loop {
            let space = net.send_space(conn).unwrap_or(0).min(self.buf.len());
            if space == 0 {
                net.want_writable(conn);
                return;
            }
            match net.send(conn, &self.buf[..space]) {
                Ok(0) | Err(_) => return,
                Ok(n) => self.w.add(self.shared.phase_at(Instant::now()), n),
            }
        }
    }
}

impl ConnHandler for Tx {
    fn on_start(&mut self, net: &mut dyn Net) {
        for &to in &self.to {
            match net.connect(to) {
                Ok(c) => self.conns.push(c),
                Err(e) => {
                    self.shared.fail(format!("connect to {to}: {e}"));
                    return;
                }
            }
        }
    }
    fn on_connected(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        counters::bump(&self.w.connections);
        if let Ok(t) = net.four_tuple(conn) {
            let _ = self.shared.local.set(t.local);
        }
        self.shared.connected.fetch_add(1, Ordering::Relaxed);
        self.fill(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.fill(net, conn);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        // The receiver does not answer in throughput mode: discard.
        net.discard(conn);
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        self.conns.retain(|&c| c != conn);
        let ph = self.shared.phase_at(Instant::now());
        if !self.closed && !matches!(ph, Phase::Cooldown | Phase::Post) {
            self.shared.fail(format!(
                "a data connection closed during {ph:?}: {reason:?}"
            ));
        }
    }
    fn on_tick(&mut self, net: &mut dyn Net) {
        if self.closed {
            return;
        }
        let ph = self.shared.phase_at(Instant::now());
        if ph == Phase::Post || self.shared.stopping() {
            self.closed = true;
            for &c in &self.conns {
                let _ = net.close(c);
            }
            return;
        }
        if !self.sending && ph != Phase::Pre {
            self.sending = true;
            for c in self.conns.clone() {
                self.fill(net, c);
            }
        }
    }
}

/// A worker's receiver handler (one per data port and worker).
struct Rx {
    shared: Arc<Shared>,
    w: Arc<WorkerCounters>,
    echo: bool,
    local: SocketAddr,
    buf: Vec<u8>,
}

impl Rx {
    /// Throughput mode: take everything the connection holds, count it.
    fn drain(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let mut total = 0;
        loop {
            let n = match net.peek(conn) {
                Ok(d) if !d.is_empty() => d.len(),
                _ => break,
            };
            let _ = net.consume(conn, n);
            total += n;
        }
        if total > 0 {
            self.w.add(self.shared.phase_at(Instant::now()), total);
        }
        if net.is_eof(conn) {
            let _ = net.close(conn);
        }
    }

    /// Latency/overlap modes: echo what arrived, as much as the send buffer takes.
    fn pump(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let n = net.echo(conn, &mut self.buf);
        if n > 0 {
            self.w.add(self.shared.phase_at(Instant::now()), n);
        }
    }

    fn serve(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.echo {
            self.pump(net, conn);
        } else {
            self.drain(net, conn);
        }
    }
}

impl ConnHandler for Rx {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.echo {
            let _ = net.set_nodelay(conn, true);
        }
        counters::bump(&self.w.connections);
        let _ = self.shared.local.set(self.local);
        self.shared.accepted.fetch_add(1, Ordering::Relaxed);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.serve(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.echo {
            self.pump(net, conn);
        }
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.serve(net, conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_counters_by_phase() {
        let w = WorkerCounters::default();
        w.add(Phase::Warmup, 3);
        w.add(Phase::Measured, 10);
        w.add(Phase::Measured, 5);
        w.connections.store(2, Ordering::Relaxed);
        let s = w.stats();
        assert_eq!(s.bytes, [0, 3, 15, 0, 0]);
        assert_eq!(s.connections, 2);
        assert_eq!(std::mem::align_of::<WorkerCounters>(), 64);
    }
}
