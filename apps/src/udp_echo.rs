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
use flowlane_dataplane::control_socket::QueueSteering;
use flowlane_dataplane::placement::machine_placement;
use flowlane_dataplane::runtime::LocalAddress;
use flowlane_dataplane::{
    BindMode, Dataplane, DataplaneConfig, Proto, QueueCountersSnapshot, QueueHandler, QueueInfo,
    RxAction, TxBatch,
};
use flowlane_wire::packet::{parse_frame, turn_around_udp, Transport};
use flowlane_wire::{IpProtocol, NoAnswer, WireError};
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
    #[arg(long, value_parser = crate::service::report_path)]
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
    /// What the XDP steering program did with each receive queue's
    /// frames: redirected to flowlane, passed to the kernel, dropped for
    /// want of a socket on the queue or as a first fragment.
    #[serde(default)]
    pub steering: Vec<QueueSteering>,
}

/// Datagrams `udp-echo` does not answer, by reason.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Refused {
    /// Sent to a broadcast or multicast address (a reply would come from
    /// the group).
    pub group_destination: u64,
    /// From a source no reply can go to (unspecified, loopback,
    /// broadcast, multicast, IPv4-mapped IPv6, a group source MAC), or
    /// from one of the interface's own addresses (a reply would go to the
    /// service itself; Linux drops such a source as martian unless
    /// `accept_local` is set) or its IPv4 subnets' broadcast addresses
    /// (RFC 1122 §3.2.1.3 (d): never a source).
    pub martian_source: u64,
    /// From source port 0 (RFC 768: no reply expected).
    pub source_port_zero: u64,
    /// From the service's own port or a port below 1024: another echo
    /// service, or a well-known reflector (echo 7, daytime 13, qotd 17,
    /// chargen 19, time 37, RFC 862-868), would answer the echo and the
    /// two would pass one datagram back and forth without end (a spoofed
    /// `B:7777 -> A:7777` between two echo services). inetd's `check_loop`
    /// guards its internal services the same way; clients send from
    /// ephemeral ports (RFC 6335 §6).
    #[serde(default)]
    pub loop_source: u64,
    /// IP fragments of UDP datagrams (flowlane does not reassemble),
    /// IPv4 packets with options other than EOL/NOP, and IPv6 packets
    /// with a Routing header.
    pub unsupported: u64,
}

/// One reason of [`Refused`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    GroupDestination,
    MartianSource,
    SourcePortZero,
    LoopSource,
    Unsupported,
}

impl Refusal {
    /// The reason of one of `turn_around_udp`'s refusals; `None` for an
    /// error that is no refusal (a datagram that does not parse or
    /// verify, counted as malformed).
    fn of(e: &WireError) -> Option<Refusal> {
        match e {
            WireError::NotAnswered {
                why: NoAnswer::GroupDestination,
                ..
            } => Some(Refusal::GroupDestination),
            WireError::NotAnswered {
                why: NoAnswer::MartianSource,
                ..
            } => Some(Refusal::MartianSource),
            WireError::Fragment { .. } | WireError::Unsupported { .. } => {
                Some(Refusal::Unsupported)
            }
            _ => None,
        }
    }
}

impl Refused {
    /// Counts one refusal.
    fn count(&mut self, r: Refusal) {
        let c = match r {
            Refusal::GroupDestination => &mut self.group_destination,
            Refusal::MartianSource => &mut self.martian_source,
            Refusal::SourcePortZero => &mut self.source_port_zero,
            Refusal::LoopSource => &mut self.loop_source,
            Refusal::Unsupported => &mut self.unsupported,
        };
        *c += 1;
    }

    fn add(&mut self, o: &Refused) {
        self.group_destination += o.group_destination;
        self.martian_source += o.martian_source;
        self.source_port_zero += o.source_port_zero;
        self.loop_source += o.loop_source;
        self.unsupported += o.unsupported;
    }
}

/// Source ports below this are the well-known ones (RFC 6335 §6): no
/// client of an echo sends from one, and the services there may answer.
const FIRST_UNPRIVILEGED_PORT: u16 = 1024;

/// The service's own policy on a datagram that parsed and verified, before
/// `turn_around_udp`'s checks (which every echo shares): which sources it
/// does not answer.
fn policy(own: &[IpAddr], port: u16, src: IpAddr, src_port: u16) -> Option<Refusal> {
    if own.contains(&src) {
        Some(Refusal::MartianSource)
    } else if src_port == 0 {
        Some(Refusal::SourcePortZero)
    } else if src_port == port || src_port < FIRST_UNPRIVILEGED_PORT {
        Some(Refusal::LoopSource)
    } else {
        None
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
    /// Sources refused as the service's own ([`own_addresses`]).
    own: Arc<[IpAddr]>,
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
                // A fragment has no parsed transport (not reassembled): the
                // XDP program drops a first fragment to the port before it
                // gets here, but one that comes (another steering) is counted.
                _ if f.is_fragment() && f.protocol == Some(IpProtocol::Udp) && !self.sink => {
                    self.flows.refused.count(Refusal::Unsupported);
                    return RxAction::Consumed;
                }
                _ => return RxAction::Drop,
            },
            Err(_) if self.sink => return RxAction::Drop,
            Err(_) => {
                self.flows.malformed += 1;
                return RxAction::Consumed;
            }
        };
        // Counted drops (refusals, malformed datagrams) and the sink's
        // datagrams are the handler's own: `Consumed`, not the worker's
        // `dropped`, which is left for frames nothing here counts.
        if self.sink {
            return RxAction::Consumed;
        }
        if let Some(r) = policy(&self.own, self.port, key.0, key.1) {
            self.flows.refused.count(r);
            return RxAction::Consumed;
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
                match Refusal::of(&e) {
                    Some(r) => self.flows.refused.count(r),
                    None => self.flows.malformed += 1,
                }
                RxAction::Consumed
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
        steering: dp
            .steering_counters()
            .iter()
            .map(|(q, s)| QueueSteering::new(*q, s))
            .collect(),
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

/// The addresses no datagram to the service may come from: every address
/// of `iface` (a reply would go to the service itself) and the broadcast
/// address of each of its IPv4 subnets (RFC 1122 §3.2.1.3 (d); none for
/// /31 and /32, RFC 3021).
fn own_addresses(iface: &str) -> Result<Vec<IpAddr>> {
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| anyhow::anyhow!("listing the addresses of {iface}: {e}"))?;
    let mut own = Vec::new();
    for a in addrs.filter(|a| a.interface_name == iface) {
        let Some(addr) = a.address.as_ref() else {
            continue;
        };
        if let Some(v4) = addr.as_sockaddr_in() {
            own.push(IpAddr::V4(v4.ip()));
            let mask = a.netmask.as_ref().and_then(|m| m.as_sockaddr_in());
            if let Some(b) = mask.and_then(|m| subnet_broadcast(v4.ip(), m.ip())) {
                own.push(IpAddr::V4(b));
            }
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            own.push(IpAddr::V6(v6.ip()));
        }
    }
    own.sort_unstable();
    own.dedup();
    Ok(own)
}

/// The broadcast address of `addr`'s subnet under `mask`: all host bits
/// set (RFC 919, RFC 922); `None` for a /31 or /32, which have none.
fn subnet_broadcast(addr: Ipv4Addr, mask: Ipv4Addr) -> Option<Ipv4Addr> {
    let m = u32::from(mask);
    (m.count_ones() <= 30).then(|| Ipv4Addr::from(u32::from(addr) | !m))
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
    let own: Arc<[IpAddr]> = own_addresses(&args.iface)?.into();
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
            own: own.clone(),
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
    // A worker that failed is not udp-echo's to report (it never was).
    let _ = dp.stop();
    if let Some(p) = &args.report {
        write_report(p, &last)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_wire::packet::{emit_eth_ipv4_udp, ETH_IPV4_UDP_PAYLOAD_OFFSET};
    use flowlane_wire::{EtherType, EthernetAddress, EthernetRepr, Ipv4Packet, Ipv4Repr, UdpRepr};

    const PORT: u16 = 7777;
    const US: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
    const PEER: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
    const US_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
    const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

    fn own() -> Vec<IpAddr> {
        vec![
            IpAddr::V4(US),
            IpAddr::V4(Ipv4Addr::new(10, 99, 0, 255)),
            "fd99::1".parse().unwrap(),
        ]
    }

    fn echo() -> Echo {
        Echo {
            port: PORT,
            sink: false,
            own: own().into(),
            flows: QueueFlows::default(),
            published: Arc::default(),
        }
    }

    /// An Ethernet + IPv4 + UDP frame from `src:sport` (MAC `src_mac`) to
    /// the service, checksums filled.
    fn datagram(src_mac: [u8; 6], src: Ipv4Addr, sport: u16) -> Vec<u8> {
        let payload = b"hello";
        let mut b = vec![0u8; 128];
        b[ETH_IPV4_UDP_PAYLOAD_OFFSET..][..payload.len()].copy_from_slice(payload);
        let eth = EthernetRepr {
            dst_addr: EthernetAddress(US_MAC),
            src_addr: EthernetAddress(src_mac),
            vlan: Default::default(),
            ethertype: EtherType::Ipv4,
        };
        let ip = Ipv4Repr::new(src, US, IpProtocol::Udp, 8 + payload.len());
        let udp = UdpRepr {
            src_port: sport,
            dst_port: PORT,
        };
        let n = emit_eth_ipv4_udp(&mut b, &eth, &ip, &udp, payload.len()).unwrap();
        b.truncate(n);
        b
    }

    fn rx(e: &mut Echo, frame: &[u8]) -> RxAction {
        let q = QueueInfo {
            queue: 0,
            cpu: None,
            node: 0,
            zero_copy: false,
            rx_frames: 0,
        };
        let mut b = frame.to_vec();
        let len = b.len();
        e.on_rx(&q, Duration::ZERO, &mut b, len)
    }

    #[test]
    fn own_sources_port_zero_and_loop_ports_are_refused_by_name() {
        let own = own();
        let p = |src: &str, sport| policy(&own, PORT, src.parse().unwrap(), sport);
        assert_eq!(p("10.99.0.2", 40000), None);
        assert_eq!(p("10.99.0.2", 1024), None);
        assert_eq!(p("fd99::2", 40000), None);
        // The service's own addresses and its subnet's broadcast address.
        assert_eq!(p("10.99.0.1", 40000), Some(Refusal::MartianSource));
        assert_eq!(p("10.99.0.255", 40000), Some(Refusal::MartianSource));
        assert_eq!(p("fd99::1", 40000), Some(Refusal::MartianSource));
        assert_eq!(p("10.99.0.2", 0), Some(Refusal::SourcePortZero));
        // Its own port (another echo service) and the well-known
        // reflectors: echo, daytime, qotd, chargen, time; any port below 1024.
        for sport in [PORT, 7, 13, 17, 19, 37, 1, 1023] {
            assert_eq!(p("10.99.0.2", sport), Some(Refusal::LoopSource), "{sport}");
            assert_eq!(p("fd99::2", sport), Some(Refusal::LoopSource), "{sport}");
        }
    }

    #[test]
    fn every_wire_error_maps_to_its_own_reason() {
        let layer = flowlane_wire::Layer::Udp;
        let of = |e| Refusal::of(&e);
        assert_eq!(
            of(WireError::NotAnswered {
                layer,
                why: NoAnswer::GroupDestination
            }),
            Some(Refusal::GroupDestination)
        );
        assert_eq!(
            of(WireError::NotAnswered {
                layer,
                why: NoAnswer::MartianSource
            }),
            Some(Refusal::MartianSource)
        );
        assert_eq!(
            of(WireError::Fragment {
                layer: flowlane_wire::Layer::Ipv4
            }),
            Some(Refusal::Unsupported)
        );
        assert_eq!(
            of(WireError::Unsupported {
                layer: flowlane_wire::Layer::Ipv4,
                what: "IPv4 options other than EOL and NOP"
            }),
            Some(Refusal::Unsupported)
        );
        // A datagram that does not parse or verify is malformed, not a
        // refusal: not "source port 0" for every Malformed.
        assert_eq!(
            of(WireError::Malformed {
                layer,
                what: "destination port 0"
            }),
            None
        );
        assert_eq!(of(WireError::BadChecksum { layer }), None);
    }

    #[test]
    fn the_handler_echoes_a_client_and_counts_each_refusal() {
        let mut e = echo();
        let ok = datagram(PEER_MAC, PEER, 40000);
        assert!(matches!(rx(&mut e, &ok), RxAction::Transmit(_)));
        let expect = |e: &Echo, want: Refused, malformed: u64| {
            assert_eq!(e.flows.refused, want);
            assert_eq!(e.flows.malformed, malformed);
        };
        let mut want = Refused::default();
        // (Counted by the echo itself: `Consumed`, not the worker's drop.)
        // One spoofed datagram from another echo service's port (B:7777 ->
        // A:7777), and one from a reflector's (chargen).
        for sport in [PORT, 19] {
            assert_eq!(
                rx(&mut e, &datagram(PEER_MAC, PEER, sport)),
                RxAction::Consumed
            );
            want.loop_source += 1;
            expect(&e, want, 0);
        }
        for src in [US, Ipv4Addr::new(10, 99, 0, 255), Ipv4Addr::LOCALHOST] {
            assert_eq!(
                rx(&mut e, &datagram(PEER_MAC, src, 40000)),
                RxAction::Consumed
            );
            want.martian_source += 1;
            expect(&e, want, 0);
        }
        let mut group = PEER_MAC;
        group[0] |= 1;
        assert_eq!(
            rx(&mut e, &datagram(group, PEER, 40000)),
            RxAction::Consumed
        );
        want.martian_source += 1;
        expect(&e, want, 0);
        assert_eq!(rx(&mut e, &datagram(PEER_MAC, PEER, 0)), RxAction::Consumed);
        want.source_port_zero += 1;
        expect(&e, want, 0);
        // A first fragment (More Fragments set): no transport parsed, but
        // counted.
        let mut frag = ok.clone();
        frag[20] |= 0x20;
        Ipv4Packet::new_unchecked(&mut frag[14..]).fill_checksum();
        assert!(parse_frame(&frag).unwrap().is_fragment());
        assert_eq!(rx(&mut e, &frag), RxAction::Consumed);
        want.unsupported += 1;
        expect(&e, want, 0);
        // A corrupted datagram: malformed, no refusal.
        let mut bad = ok.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(rx(&mut e, &bad), RxAction::Consumed);
        expect(&e, want, 1);
        // The client was echoed once, and is still.
        assert!(matches!(rx(&mut e, &ok), RxAction::Transmit(_)));
        let key = (IpAddr::V4(PEER), 40000, IpAddr::V4(US), PORT);
        assert_eq!(e.flows.flows.get(&key), Some(&2));
    }

    #[test]
    fn subnet_broadcast_of_an_address() {
        let b = |a: &str, m: &str| subnet_broadcast(a.parse().unwrap(), m.parse().unwrap());
        assert_eq!(
            b("10.99.0.1", "255.255.255.0"),
            Some(Ipv4Addr::new(10, 99, 0, 255))
        );
        assert_eq!(
            b("10.99.0.1", "255.255.255.252"),
            Some(Ipv4Addr::new(10, 99, 0, 3))
        );
        assert_eq!(b("10.99.0.1", "255.255.255.254"), None);
        assert_eq!(b("10.99.0.1", "255.255.255.255"), None);
    }
}
