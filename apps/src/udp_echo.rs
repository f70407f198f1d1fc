//! `flowlane udp-echo`: a UDP echo service on flowlane's data path. Each
//! queue's worker turns datagrams for the port around in place (no copy)
//! and records which flows it served, so that a run can be checked against
//! the RSS prediction.
//!
//! SIGUSR1 writes a report; SIGTERM/SIGINT write a final report and exit,
//! releasing the XDP program and sockets.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use flowlane_dataplane::placement::machine_placement;
use flowlane_dataplane::runtime::LocalAddress;
use flowlane_dataplane::{
    BindMode, Dataplane, DataplaneConfig, Proto, QueueCountersSnapshot, QueueHandler, QueueInfo,
    RxAction, TxBatch,
};
use flowlane_wire::packet::{parse_frame, turn_around_udp, Transport};
use serde::{Deserialize, Serialize};

use crate::bed_entry;
use crate::service::{write_report, ServiceSignals, Watchdog};
use flowlane_dataplane::service_args::{listen_port, DataPathArgs};
use flowlane_dataplane::umem::RingSizes;

/// Flags of `flowlane udp-echo`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Interface to serve.
    #[arg(long, default_value = "xsk0")]
    pub iface: String,
    /// UDP port to echo on.
    #[arg(long, default_value_t = 7777, value_parser = listen_port)]
    pub port: u16,
    /// The data path's flags: `--bed`, `--queues`, `--busy-poll`,
    /// `--rss-table` (the NIC's table: needed with fewer `--queues` than
    /// the NIC has, to check that it sends nothing to the others; `--bed`
    /// passes it on, with the key and neighbours, which an echo does not
    /// need).
    #[command(flatten)]
    pub data_path: DataPathArgs,
    /// Write a JSON report here (on start, on SIGUSR1 and on exit).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Copy or zero-copy AF_XDP binding.
    #[arg(long, value_enum, default_value = "auto")]
    pub bind_mode: BindModeArg,
    /// Receive only: parse and count each datagram, echo nothing (for the
    /// receive benchmark).
    #[arg(long)]
    pub sink: bool,
}

/// `--bind-mode` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum BindModeArg {
    /// Zero-copy where possible, else copy.
    Auto,
    /// Copy mode.
    Copy,
    /// Zero-copy only.
    ZeroCopy,
}

/// One flow as a queue saw it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FlowRecord {
    /// Queue that received it.
    pub queue: u32,
    /// Sender address.
    pub src: IpAddr,
    /// Sender port.
    pub src_port: u16,
    /// flowlane's address.
    pub dst: IpAddr,
    /// flowlane's port.
    pub dst_port: u16,
    /// Datagrams echoed.
    pub packets: u64,
}

/// Per-queue counters in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueReport {
    /// Queue.
    pub queue: u32,
    /// CPU of its worker.
    pub cpu: Option<u32>,
    /// Zero-copy bind.
    pub zero_copy: bool,
    /// Frames received.
    pub rx_packets: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Frames dropped by the handler.
    pub dropped: u64,
    /// Fill-ring starvation events.
    pub fill_ring_empty: u64,
    /// RX ring full drops.
    pub rx_ring_full: u64,
}

/// What `--report` files hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Increments with each report written.
    pub generation: u64,
    /// Per-queue counters.
    pub queues: Vec<QueueReport>,
    /// Every flow seen, per queue.
    pub flows: Vec<FlowRecord>,
    /// Datagrams that failed to parse or verify.
    pub malformed: u64,
    /// Datagrams echoed for flows beyond the per-queue table's bound
    /// ([`MAX_FLOWS`]): echoed, not listed.
    #[serde(default)]
    pub untracked: u64,
    /// Datagrams parsed and verified but not echoed, by reason.
    #[serde(default)]
    pub refused: Refused,
}

/// Datagrams `udp-echo` does not answer, by reason.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Refused {
    /// Sent to a broadcast or multicast address (a reply would come from
    /// the group).
    pub group_destination: u64,
    /// From a source no reply can go to (unspecified, loopback,
    /// broadcast, multicast, IPv4-mapped IPv6).
    pub martian_source: u64,
    /// From source port 0 (RFC 768: no reply expected).
    pub source_port_zero: u64,
    /// IP fragments, and IPv6 packets with a Routing header.
    pub unsupported: u64,
}

impl Refused {
    /// Counts one of `turn_around_udp`'s refusals (the datagram parsed
    /// and verified before it).
    fn count(&mut self, e: &flowlane_wire::WireError) {
        use flowlane_wire::{NoAnswer, WireError};
        let c = match e {
            WireError::NotAnswered {
                why: NoAnswer::GroupDestination,
                ..
            } => &mut self.group_destination,
            WireError::NotAnswered {
                why: NoAnswer::MartianSource,
                ..
            } => &mut self.martian_source,
            WireError::Malformed { .. } => &mut self.source_port_zero,
            _ => &mut self.unsupported,
        };
        *c += 1;
    }

    fn add(&mut self, o: &Refused) {
        self.group_destination += o.group_destination;
        self.martian_source += o.martian_source;
        self.source_port_zero += o.source_port_zero;
        self.unsupported += o.unsupported;
    }
}

/// Most flows each queue lists in its report (the table is keyed by
/// peer-controlled values, so it is bounded).
pub const MAX_FLOWS: usize = 1 << 16;

type FlowKey = (IpAddr, u16, IpAddr, u16);

/// Each queue's published flow table, for the report.
type FlowTables = Vec<(u32, Arc<Published>)>;

#[derive(Default, Clone)]
struct QueueFlows {
    flows: HashMap<FlowKey, u64>,
    malformed: u64,
    untracked: u64,
    refused: Refused,
}

/// A queue's flow table as its worker last published it. The worker owns
/// the live table (no lock per datagram); the reporting thread raises
/// `wanted`, and the worker copies its table here on its next loop pass
/// (at most 10 ms away when idle) and sets `done` to that value.
#[derive(Default)]
struct Published {
    wanted: AtomicU64,
    done: AtomicU64,
    copy: Mutex<QueueFlows>,
}

impl Published {
    /// Asks the worker for a fresh copy; true once it is there (waits up to
    /// 1 s).
    fn refresh(&self) -> bool {
        let want = self.wanted.fetch_add(1, Ordering::AcqRel) + 1;
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while self.done.load(Ordering::Acquire) < want {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

struct Echo {
    port: u16,
    sink: bool,
    flows: QueueFlows,
    published: Arc<Published>,
}

impl QueueHandler for Echo {
    fn on_rx(&mut self, _q: &QueueInfo, _now: Duration, buf: &mut [u8], len: usize) -> RxAction {
        // Every checksum is verified: a corrupted datagram is dropped, not echoed.
        let key = match parse_frame(&buf[..len]) {
            Ok(f) => match (f.transport, f.ip_pair()) {
                (Transport::Udp { src_port, dst_port }, Some(ips)) if dst_port == self.port => {
                    (ips.src(), src_port, ips.dst(), dst_port)
                }
                _ => return RxAction::Drop,
            },
            Err(_) if self.sink => return RxAction::Drop,
            Err(_) => {
                self.flows.malformed += 1;
                return RxAction::Drop;
            }
        };
        if self.sink {
            return RxAction::Drop;
        }
        match turn_around_udp(&mut buf[..len]) {
            Ok(out) => {
                let t = &mut self.flows;
                if let Some(n) = t.flows.get_mut(&key) {
                    *n += 1;
                } else if t.flows.len() < MAX_FLOWS {
                    t.flows.insert(key, 1);
                } else {
                    t.untracked += 1;
                }
                RxAction::Transmit(out)
            }
            Err(e) => {
                self.flows.refused.count(&e);
                RxAction::Drop
            }
        }
    }

    fn on_poll(&mut self, _q: &QueueInfo, _now: Duration, _tx: &mut TxBatch<'_>) {
        let p = &self.published;
        let want = p.wanted.load(Ordering::Acquire);
        if want != p.done.load(Ordering::Relaxed) {
            *p.copy.lock().unwrap_or_else(|e| e.into_inner()) = self.flows.clone();
            p.done.store(want, Ordering::Release);
        }
    }
}

fn snapshot(generation: u64, dp: &Dataplane, tables: &[(u32, Arc<Published>)]) -> Report {
    let counters: Vec<(QueueInfo, QueueCountersSnapshot)> = dp.counters();
    let mut flows = Vec::new();
    let (mut malformed, mut untracked, mut refused) = (0, 0, Refused::default());
    for (queue, p) in tables {
        if !p.refresh() {
            tracing::warn!(queue, "the worker did not publish its flows within 1 s");
        }
        let t = p.copy.lock().unwrap_or_else(|e| e.into_inner());
        malformed += t.malformed;
        untracked += t.untracked;
        refused.add(&t.refused);
        for (&(src, src_port, dst, dst_port), &packets) in &t.flows {
            flows.push(FlowRecord {
                queue: *queue,
                src,
                src_port,
                dst,
                dst_port,
                packets,
            });
        }
    }
    flows.sort_by_key(|f| (f.src_port, f.queue));
    Report {
        generation,
        queues: counters
            .iter()
            .map(|(i, c)| QueueReport {
                queue: i.queue,
                cpu: i.cpu,
                zero_copy: i.zero_copy,
                rx_packets: c.rx_packets,
                tx_packets: c.tx_packets,
                dropped: c.dropped,
                fill_ring_empty: c.fill_ring_empty,
                rx_ring_full: c.rx_ring_full,
            })
            .collect(),
        flows,
        malformed,
        untracked,
        refused,
    }
}

/// The data path's flags that only TCP services use: given to `udp-echo`,
/// one line and exit 1 rather than being ignored.
fn refuse_tcp_flags(d: &DataPathArgs) -> Result<()> {
    use flowlane_dataplane::service_args::{CongestionChoice, EcnChoice};
    let given = [
        (d.copy_receive, "--copy-receive"),
        (d.congestion != CongestionChoice::default(), "--congestion"),
        (d.ecn != EcnChoice::default(), "--ecn"),
    ];
    if let Some((_, flag)) = given.iter().find(|(set, _)| *set) {
        anyhow::bail!("{flag} is a TCP service's flag; udp-echo has no TCP (leave it out)");
    }
    Ok(())
}

/// The interface's first IPv4 address, if it has one (the TCP services
/// take the same, see `flowlane_dataplane::iface::local_ipv4`).
fn first_ipv4(iface: &str) -> Result<Option<Ipv4Addr>> {
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| anyhow::anyhow!("listing the addresses of {iface}: {e}"))?;
    Ok(addrs
        .filter(|a| a.interface_name == iface)
        .find_map(|a| a.address.as_ref()?.as_sockaddr_in().map(|s| s.ip())))
}

/// Runs the service until SIGTERM/SIGINT.
pub fn run(args: Args) -> Result<()> {
    refuse_tcp_flags(&args.data_path)?;
    bed_entry::enter("flowlane udp-echo", &args.data_path, &[args.port])?;
    // Before the data path starts: a SIGTERM during the set-up ends the
    // service through its clean-up, not by the default action.
    let signals = ServiceSignals::install()?;
    let info = flowlane_dataplane::InterfaceInfo::read(std::path::Path::new("/sys"), &args.iface)?;
    let queues = args.data_path.queues.unwrap_or(info.rx_queues);
    info.check_queues(queues)?;
    // numa-sched's placement: NIC-node CPUs first, physical cores before SMT
    // siblings; memory on each worker's node.
    let placed = machine_placement(info.numa_node, queues as usize, None)?;
    if let Some(w) = &placed.shared {
        eprintln!("flowlane udp-echo: warning: {w}");
    }
    let mut config = DataplaneConfig::new(&args.iface, &(0..queues).collect::<Vec<_>>());
    config.apply_placement(&placed);
    // The port is claimed on the interface's address of each family (its
    // first IPv4 one, its first IPv6 one not link-local, as the TCP
    // services'): its other addresses, and a family it has no address of,
    // stay the kernel's.
    let v4 = first_ipv4(&args.iface)?;
    let v6 = flowlane_dataplane::iface::local_ipv6(&args.iface)?;
    if v4.is_none() && v6.is_none() {
        anyhow::bail!(
            "{0} has no address to echo on: add one (ip addr add A/N dev {0})",
            args.iface
        );
    }
    config.local_v4 = LocalAddress::from_option(v4);
    config.local_v6 = LocalAddress::from_option(v6);
    // The NIC's table as --rss-table (or --bed) gives it: with fewer
    // queues than the NIC's, the data path starts only if it names served
    // queues only.
    config.nic_table = args.data_path.rss_table.clone();
    config.ports = vec![(Proto::Udp, args.port)];
    config.busy_poll = args.data_path.busy_poll;
    if let Some(frames) = args.data_path.frames_per_queue {
        config.rings = RingSizes::with_frames(frames)?;
    }
    config.bind_mode = match args.bind_mode {
        BindModeArg::Auto => BindMode::Auto,
        BindModeArg::Copy => BindMode::Copy,
        BindModeArg::ZeroCopy => BindMode::ZeroCopy,
    };
    let registry: Arc<Mutex<FlowTables>> = Arc::default();
    let reg = registry.clone();
    let (port, sink) = (args.port, args.sink);
    let dp = Dataplane::start(config, move |q: &QueueInfo| {
        let published = Arc::new(Published::default());
        reg.lock()
            .expect("registry lock")
            .push((q.queue, published.clone()));
        Ok::<_, std::convert::Infallible>(Echo {
            port,
            sink,
            flows: QueueFlows::default(),
            published,
        })
    })?;
    let tables = registry.lock().expect("registry lock").clone();

    let mut generation = 0;
    if let Some(p) = &args.report {
        write_report(p, &snapshot(generation, &dp, &tables))?;
    }
    eprintln!(
        "flowlane udp-echo: serving UDP port {} on {} queues of {}",
        args.port, queues, args.iface
    );
    let mut watchdog = Watchdog::new("udp-echo");
    while !signals.stop_requested() {
        // Gone: the workers cannot publish a last report; drop the data
        // path (releasing everything) and say what vanished.
        watchdog.check(&dp)?;
        std::thread::sleep(Duration::from_millis(20));
        if signals.take_report_request() {
            generation += 1;
            if let Some(p) = &args.report {
                write_report(p, &snapshot(generation, &dp, &tables))?;
            }
        }
    }
    generation += 1;
    let last = snapshot(generation, &dp, &tables);
    dp.stop();
    if let Some(p) = &args.report {
        write_report(p, &last)?;
    }
    Ok(())
}
