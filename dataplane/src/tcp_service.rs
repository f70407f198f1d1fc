//! The one way to run a TCP service on the data path: every flowlane TCP
//! program (the example services, flowlane-ttcp's flowlane backend) starts
//! here. It reads the interface, plans where the workers run (numa-sched's
//! placement, the same one `flowlane hint` predicts with), claims the ports,
//! builds each queue's [`TcpHandler`] on that queue's core, lets the
//! application register its handlers on it (a failure of any queue stops
//! everything and is returned), and keeps each queue's counters.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use flowlane_app::{IntoSetupResult, Setup, SetupError, StartError, StartErrorKind, StopError};
use flowlane_ebpf::steer::Proto;
use flowlane_numa_sched::RssState;

use crate::bucket_counters::{BucketCounters, BucketSnapshot};
use crate::checksum_watch::ChecksumWatch;
pub use crate::ephemeral::rss_state;
use crate::ephemeral::EPHEMERAL;
use crate::handoff::{self, Mesh, MoveError, MoveReport, NicWriter};
use crate::iface::{current_ifindex, local_ipv4_prefix_if_any, local_ipv6, InterfaceInfo};
use crate::kernel_neighbors::{kernel_neighbors, prime, route_to, Refresher, Route, PRIME_WAIT};
use crate::neighbor::Neighbors;
use crate::placement::machine_placement;
use crate::runtime::{Dataplane, DataplaneConfig, LocalAddress};
use crate::tcp_handler::{TcpConfig, TcpCounters, TcpCountersSnapshot, TcpHandler};
use crate::umem::RingSizes;
use crate::worker::QueueInfo;
use crate::xsk::BindMode;
use crate::{Error, Result};

/// What a TCP service needs: the flags every flowlane TCP program shares.
#[derive(Debug, Clone)]
pub struct TcpServiceConfig {
    /// Interface to serve.
    pub iface: String,
    /// Queues to serve, from queue 0 (None: all of the device's).
    pub queues: Option<u32>,
    /// Workers in all (default: one per queue). More than the queues:
    /// the extra workers have no queue of their own and take an even share
    /// of one queue's buckets each, whose frames that queue's worker
    /// forwards to them (software spill); needs the NIC's RSS (`rss`).
    pub workers: Option<u32>,
    /// Ports to listen on (steered to flowlane), held against the kernel's
    /// use before anything is attached. A port a handler listens on
    /// (`Setup::listen`) that is not here is claimed too, once the
    /// handlers are set up.
    pub listen: Vec<u16>,
    /// Whether the service opens connections (`Net::connect`): the
    /// ephemeral range is then steered to flowlane, and `rss` tells which
    /// ports come back where (needed on more than one queue). A service
    /// that does not is refused its opens at once
    /// (`flowlane_tcp::Error::InvalidState`).
    pub active: bool,
    /// The NIC's RSS (see [`rss_state`]): for active opens on several
    /// queues, and to keep connections per RSS bucket.
    pub rss: Option<RssState>,
    /// Neighbours known up front (static `--neighbor IP=MAC`, the kernel's
    /// table); more are learned from received frames, and the kernel's
    /// table is read again for peers the workers know nothing recent of
    /// ([`Refresher`]).
    pub neighbors: Neighbors,
    /// Spin when idle instead of sleeping in poll(2).
    pub busy_poll: bool,
    /// UMEM frames per queue (None: [`RingSizes::DEFAULT_FRAMES`]).
    pub frames_per_queue: Option<u32>,
    /// Send memory of each queue's stack in bytes (`--send-memory`; None:
    /// [`flowlane_tcp::Config::send_memory`]'s default).
    pub send_memory: Option<usize>,
    /// Leave received payload in its frame until read (zero-copy
    /// receive; `--copy-receive` turns it off).
    pub zero_copy_receive: bool,
    /// Maximum segment lifetime (TIME-WAIT lasts twice this); None: the
    /// stack's default.
    pub msl: Option<flowlane_tcp::time::Duration>,
    /// Congestion control of the connections (`--congestion`).
    pub congestion: flowlane_tcp::CongestionAlgorithm,
    /// ECN negotiation of the connections (`--ecn`).
    pub ecn: flowlane_tcp::EcnMode,
    /// CPUs the workers may use (None: those this process may run on);
    /// numa-sched places the queues on them.
    pub cpus: Option<Vec<u32>>,
    /// Root of sysfs (tests use fake trees).
    pub sysfs: PathBuf,
    /// The NIC whose indirection table [`TcpService::move_bucket`] writes
    /// (None: buckets cannot be moved).
    pub nic: Option<NicWriter>,
}

impl TcpServiceConfig {
    /// A passive service on `iface`, every queue, no neighbours, default
    /// timers.
    pub fn new(iface: &str) -> TcpServiceConfig {
        TcpServiceConfig {
            iface: iface.to_string(),
            queues: None,
            workers: None,
            listen: Vec::new(),
            active: false,
            rss: None,
            neighbors: Neighbors::new(),
            busy_poll: false,
            frames_per_queue: None,
            send_memory: None,
            zero_copy_receive: true,
            msl: None,
            congestion: flowlane_tcp::CongestionAlgorithm::default(),
            ecn: flowlane_tcp::EcnMode::default(),
            cpus: None,
            sysfs: PathBuf::from("/sys"),
            nic: None,
        }
    }

    /// The interface and the number of queues to serve (checked against the
    /// device).
    pub fn interface(&self) -> Result<(InterfaceInfo, u32)> {
        let info = InterfaceInfo::read(&self.sysfs, &self.iface)?;
        let queues = self.queues.unwrap_or(info.rx_queues);
        info.check_queues(queues)?;
        Ok((info, queues))
    }
}

/// What a stopped service's queues counted, by queue.
#[derive(Debug, Clone)]
pub struct FinalCounters {
    /// TCP counters ([`TcpService::tcp_counters`]).
    pub tcp: Vec<(u32, TcpCountersSnapshot)>,
    /// RSS buckets in use ([`TcpService::bucket_counters`]).
    pub buckets: Vec<(u32, Vec<BucketSnapshot>)>,
}

/// One queue's counters, and the ports its handlers listen on.
#[derive(Debug)]
struct QueueTcp {
    queue: u32,
    tcp: Arc<TcpCounters>,
    buckets: Arc<BucketCounters>,
    listening: Vec<u16>,
}

/// Each queue's counters, by queue.
type PerQueue = Vec<QueueTcp>;

/// Where a flow is processed now ([`TcpService::hint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceHint {
    /// The NIC's Toeplitz hash of the flow (None where the service does
    /// not steer by buckets: kernel sockets, whose core the kernel chose).
    pub hash: Option<u32>,
    /// Its RSS bucket (indirection-table entry), where there is one.
    pub bucket: Option<usize>,
    /// The queue the bucket is served by (a kernel-socket service: the
    /// core holding the connection).
    pub queue: u32,
    /// The CPU that queue's worker is pinned to, if pinned.
    pub cpu: Option<u32>,
    /// The NUMA node of that worker and its packet memory.
    pub node: u32,
}

/// What moving buckets between a service's queues needs: the workers'
/// inboxes, the table as the service last wrote it, and the NIC.
#[derive(Debug)]
struct Moves {
    mesh: Arc<Mesh>,
    /// Queue per bucket; the lock also makes moves one at a time.
    table: Mutex<Vec<u32>>,
    nic: Option<NicWriter>,
}

/// A running TCP service: the data path and each queue's TCP counters.
/// Dropping it stops the workers and releases everything, resetting the
/// connections still open, as [`TcpService::stop`] does.
///
/// A handler that panics (or any panic on a queue's worker) fails its
/// queue closed, as a kernel-socket service's core does: the queue's
/// application is dropped, its connections are reset, and every
/// connection the NIC steers to it from then on is reset too (a SYN gets
/// an RST: the peer's connect is refused), while the other queues serve
/// on. Nothing else stops: the application learns of it from
/// [`TcpService::failed`] (cheap, for any thread) or from
/// `service.dataplane().check()` (which says what failed, in words), and
/// should then stop the service and start it again.
#[derive(Debug)]
pub struct TcpService {
    dataplane: Dataplane,
    counters: PerQueue,
    moves: Option<Moves>,
    /// The NIC's RSS as modelled at the start (key, hash fields, the
    /// table then), and the service's addresses: what hints need.
    rss: Option<RssState>,
    local: Vec<std::net::IpAddr>,
    /// The carrier queue of each worker past the queues (software spill).
    carriers: Vec<u16>,
    /// Re-reads the kernel's neighbour table for the workers (None: the
    /// interface's index or the thread could not be had).
    _refresher: Option<Refresher>,
    /// Warns once should every segment received fail its checksum (a
    /// local veth sender with checksum offload on).
    _checksums: Option<ChecksumWatch>,
    /// Tells the workers that the stop began ([`TcpConfig::stopping`]).
    stopping: Arc<std::sync::atomic::AtomicBool>,
}

impl TcpService {
    /// Starts the service: `setup` runs once per queue, on that queue's core,
    /// with the queue's fresh [`TcpHandler`] to register listeners and
    /// handlers on: the same set-up as every backend's
    /// ([`IntoSetupResult`]: it returns nothing, what it registered, or a
    /// `Result` whose error converts). Needs root (AF_XDP sockets, the XDP program). The
    /// ports the handlers listen on are claimed for flowlane (held against
    /// the kernel's use and steered), those of
    /// [`TcpServiceConfig::listen`] first.
    ///
    /// A handler that panics later fails its queue closed (see
    /// [`TcpService`]): [`TcpService::failed`] says so.
    ///
    /// # Errors
    /// A [`StartError`], the type every backend's start returns, by its
    /// kind ([`StartErrorKind`]):
    /// - `Setup`: a queue's `setup` that failed (its error the source) or
    ///   panicked;
    /// - `Os`: a system call the data path made that failed, its
    ///   `io::Error` the source ([`StartError::io_error`]); the steering
    ///   program or its maps refused;
    /// - `Config`: a configuration that cannot work, in one line naming
    ///   the field (for instance [`TcpServiceConfig::active`] on several
    ///   queues without [`TcpServiceConfig::rss`]); a port a kernel socket
    ///   uses; the data path's other refusals ([`Dataplane::start`]).
    ///
    /// The data path's own errors ([`Error`]) say their cause in their
    /// message: they become the start error's message, not its source.
    pub fn start<S, R>(
        config: TcpServiceConfig,
        setup: S,
    ) -> std::result::Result<TcpService, StartError>
    where
        S: Fn(&mut dyn Setup) -> R + Send + Sync + 'static,
        R: IntoSetupResult,
    {
        TcpService::start_inner(config, setup).map_err(start_error)
    }

    /// [`TcpService::start`], with the data path's own error.
    fn start_inner<S, R>(config: TcpServiceConfig, setup: S) -> Result<TcpService>
    where
        S: Fn(&mut dyn Setup) -> R + Send + Sync + 'static,
        R: IntoSetupResult,
    {
        let (info, queues) = config.interface()?;
        // The NIC's own table (before software spill makes a table of the
        // workers'): with queues left unserved, the data path starts only
        // if it sends nothing to them.
        let nic_table = config.rss.as_ref().map(|r| r.table().to_queue_list());
        let workers = config.workers.unwrap_or(queues);
        if workers < queues || workers > u32::from(u16::MAX) {
            return Err(Error::Setup(format!(
                "{workers} workers for {queues} queues: give at least one worker per queue"
            )));
        }
        check_active_opens(&config.iface, config.active, config.rss.is_some(), queues)?;
        let placed = machine_placement(info.numa_node, workers as usize, config.cpus.as_deref())?;
        if let Some(w) = &placed.shared {
            tracing::warn!("{w}");
        }
        let mut dp = DataplaneConfig::new(&config.iface, &(0..queues).collect::<Vec<_>>());
        dp.apply_placement(&placed);
        // Software spill: the workers past the queues, and the table of
        // which worker serves each bucket (the NIC's stays as it is).
        let mut carriers = Vec::new();
        let mut config = config;
        if workers > queues {
            let nic_rss = match config.rss.clone() {
                Some(r) => r,
                // One queue: software steering by a hash of flowlane's own.
                None if queues == 1 => software_rss(128)?,
                None => {
                    return Err(Error::Setup(format!(
                        "{workers} workers on {queues} queues (software spill) needs the NIC's RSS key and table: {GIVE_RSS}, or one queue"
                    )))
                }
            };
            let (table, c) = nic_rss
                .table()
                .spill(queues as u16, workers as u16)
                .map_err(|e| {
                    Error::Setup(format!("spreading buckets over {workers} workers: {e}"))
                })?;
            carriers = c;
            config.rss = Some(
                RssState::new(nic_rss.key(), table, *nic_rss.hash_config(), &placed.plan)
                    .map_err(|e| Error::Setup(format!("the workers' RSS table: {e}")))?,
            );
            dp.spill = placed.plan.queues[queues as usize..]
                .iter()
                .map(|p| crate::runtime::QueueAssignment {
                    queue: u32::from(p.queue),
                    cpu: Some(p.cpu),
                    node: p.mem_node,
                })
                .collect();
        }
        dp.sysfs = config.sysfs.clone();
        dp.nic_table = nic_table;
        dp.ports = config.listen.iter().map(|&p| (Proto::Tcp, p)).collect();
        dp.busy_poll = config.busy_poll;
        dp.zero_copy_receive = config.zero_copy_receive;
        if let Some(frames) = config.frames_per_queue {
            dp.rings = RingSizes::with_frames(frames)?;
        }
        dp.bind_mode = BindMode::Auto;
        // The MSS below is the MTU's: a smaller MTU later ends the service.
        dp.sized_by_mtu = true;
        dp.ephemeral = config.active.then_some(EPHEMERAL);
        // Either family alone will do: an IPv6-only network's interface
        // has no IPv4 address.
        let (v4, v6) = (
            local_ipv4_prefix_if_any(&config.iface)?,
            local_ipv6(&config.iface)?,
        );
        if v4.is_none() && v6.is_none() {
            return Err(Error::Setup(format!(
                "{0} has no IPv4 address and no IPv6 one but link-local: add one (ip addr add \
                 A/N dev {0})",
                config.iface
            )));
        }
        let mut tcp = TcpConfig::new(v4.map(|(ip, _)| ip), info.mac, isn_secret()?);
        tcp.local_prefix_len = v4.map_or(32, |(_, prefix)| prefix);
        // A passive service's queues open nothing: its ephemeral range is
        // not steered, and an open's replies would reach the kernel.
        tcp.ephemeral = dp.ephemeral;
        tcp.local_ip6 = v6;
        // The steering program takes only these addresses' frames: the
        // interface's others (secondary, link-local) stay the kernel's, and
        // so does all of a family the interface has no (global) address of.
        dp.local_v4 = LocalAddress::from_option(tcp.local_ip);
        dp.local_v6 = LocalAddress::from_option(tcp.local_ip6);
        if let Some(msl) = config.msl {
            tcp.tcp.msl = msl;
        }
        tcp.tcp.congestion = config.congestion;
        if let Some(bytes) = config.send_memory {
            tcp.tcp.send_memory = bytes;
        }
        tcp.tcp.ecn = config.ecn;
        // What the interface's MTU carries, not Ethernet's 1460 whatever the
        // link: a peer told 1460 on a 1280-byte link sends frames the NIC
        // drops, and the connection stalls.
        tcp.tcp.mss = mss_for_mtu(info.mtu, tcp.tcp.mss);
        tcp.tcp.mtu_probe_base_mss = tcp.tcp.mtu_probe_base_mss.min(tcp.tcp.mss);
        // With several queues and the NIC's RSS known, buckets can move
        // between queues with their connections.
        let moves = match &config.rss {
            Some(rss) if workers > 1 => Some(Moves {
                mesh: Arc::new(Mesh::new(workers).map_err(|source| Error::Io {
                    what: "creating the workers' inboxes".into(),
                    source,
                })?),
                table: Mutex::new(rss.table().to_queue_list()),
                nic: config.nic.clone(),
            }),
            _ => None,
        };
        let mesh = moves.as_ref().map(|m| m.mesh.clone());
        let rss = config.rss.clone();
        let local: Vec<std::net::IpAddr> = (tcp.local_ip.map(Into::into).into_iter())
            .chain(tcp.local_ip6.map(Into::into))
            .collect();
        tcp.rss = config.rss;
        // The workers ask the kernel again about peers they know nothing
        // recent of (a stale entry, or none).
        let refresher = current_ifindex(&config.iface).and_then(|ifindex| {
            Refresher::start(ifindex)
                .map_err(|e| {
                    tracing::warn!(
                        "neighbour refresh thread: {e}; the kernel's table is read at start only"
                    )
                })
                .ok()
        });
        if let Some(r) = &refresher {
            config.neighbors.refresh_through(r.shared());
        }
        tcp.neighbors = config.neighbors;
        let stopping = tcp.stopping.clone();
        let listen = config.listen;

        let registry: Arc<Mutex<PerQueue>> = Arc::default();
        let reg = registry.clone();
        let spill_carriers = carriers.clone();
        let mut dataplane = Dataplane::start(dp, move |q: &QueueInfo| {
            // Each queue's stack tags its handles with the queue's index:
            // a handle taken to another queue's handler is refused there.
            let mut tcp = tcp.clone();
            tcp.tcp.handle_tag = q.queue;
            let mut h = match &mesh {
                Some(mesh) => TcpHandler::with_mover(q, tcp, mesh.clone()),
                None => TcpHandler::new(q, tcp),
            };
            if let Some(&c) = q
                .queue
                .checked_sub(queues)
                .and_then(|i| spill_carriers.get(i as usize))
            {
                h.set_spill_carrier(u32::from(c));
            }
            if !spill_carriers.is_empty() {
                h.set_nic_queues(queues);
            }
            setup(&mut h).into_setup_result()?;
            reg.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(QueueTcp {
                    queue: q.queue,
                    tcp: h.counters(),
                    buckets: h.bucket_counters(),
                    listening: h.listening(),
                });
            Ok::<_, SetupError>(h)
        })?;
        // Every worker ran its setup before `start` returned.
        let mut counters = std::mem::take(&mut *registry.lock().unwrap_or_else(|e| e.into_inner()));
        counters.sort_by_key(|c| c.queue);
        // The ports the handlers listen on that the configuration did not
        // list: claimed now, or their frames would stay the kernel's (which
        // refuses every connection) while the listeners wait.
        let mut unlisted: Vec<u16> = counters
            .iter()
            .flat_map(|c| c.listening.iter().copied())
            .filter(|p| !listen.contains(p))
            .collect();
        unlisted.sort_unstable();
        unlisted.dedup();
        for port in unlisted {
            dataplane.claim_port(Proto::Tcp, port)?;
        }
        let checksums = ChecksumWatch::start(
            &dataplane.interface().name,
            counters.iter().map(|c| c.tcp.clone()).collect(),
        );
        Ok(TcpService {
            dataplane,
            counters,
            moves,
            rss,
            local,
            carriers,
            _refresher: refresher,
            _checksums: checksums,
            stopping,
        })
    }

    /// Where `flow` (as it arrives: the peer's address and port first) is
    /// processed now: the NIC's Toeplitz hash and bucket, the queue the
    /// table gives as this service last wrote it (after any move), and
    /// that queue's worker CPU and NUMA node.
    ///
    /// # Errors
    /// Why this service does not serve the flow (a predicate, after the
    /// service's name): not TCP, not to one of its addresses, not to a
    /// port its data path takes (a listening port, or its own
    /// connections' ephemeral range), or the NIC's RSS unknown (not
    /// modelled). Only the service that serves a flow answers it, so the
    /// daemon, which asks every service, names that one.
    pub fn hint(
        &self,
        flow: &flowlane_numa_sched::FlowTuple,
    ) -> std::result::Result<ServiceHint, String> {
        let iface = &self.dataplane.interface().name;
        if flow.protocol != flowlane_numa_sched::Protocol::Tcp {
            return Err(format!("serves TCP only, on {iface}"));
        }
        if !self.local.contains(&flow.dst) {
            return Err(format!(
                "does not serve {} on {iface} (not one of its addresses)",
                flow.dst
            ));
        }
        if !self.dataplane.takes_port(Proto::Tcp, flow.dst_port) {
            return Err(format!(
                "does not serve TCP port {} on {iface} (neither a listening port nor its connections' ephemeral range)",
                flow.dst_port
            ));
        }
        let unknown = || format!("cannot place flows on {iface}: the NIC's RSS is unknown");
        let rss = self.rss.as_ref().ok_or_else(unknown)?;
        let hash = rss.hash(flow);
        let bucket = rss.table().bucket_for_hash(hash);
        let queue = match self.rss_table() {
            Some(t) => t.get(bucket).copied(),
            None => rss.table().entries().get(bucket).map(|&q| u32::from(q)),
        }
        .ok_or_else(unknown)?;
        let info = self
            .dataplane
            .queues()
            .into_iter()
            .find(|q| q.queue == queue)
            .ok_or_else(|| {
                format!("serves no queue {queue} on {iface}, where the NIC's table sends the flow")
            })?;
        Ok(ServiceHint {
            hash: Some(hash),
            bucket: Some(bucket),
            queue,
            cpu: info.cpu,
            node: info.node,
        })
    }

    /// The NIC's indirection table as this service last wrote it (queue
    /// per bucket); None when buckets cannot move (one queue, or the
    /// NIC's RSS unknown).
    pub fn rss_table(&self) -> Option<Vec<u32>> {
        let m = self.moves.as_ref()?;
        Some(m.table.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Why this service's buckets cannot move (a phrase), or None when
    /// they can.
    pub fn why_buckets_cannot_move(&self) -> Option<String> {
        why_buckets_cannot_move(
            self.rss.is_some(),
            self.moves.is_some(),
            self.moves.as_ref().is_some_and(|m| m.nic.is_some()),
        )
        .map(str::to_string)
    }

    /// Moves RSS bucket `bucket` (an indirection-table entry) to queue
    /// `to`, with its live connections (complete TCP state and the
    /// application's state, see `flowlane_app::ConnHandler::on_export`)
    /// and TIME-WAIT records, and writes the NIC's entry. The old queue
    /// forwards the bucket's frames that still reach it and the new queue
    /// holds its own until the old one has drained, so that normally no
    /// segment is lost or reordered. Past the bounds that keep a move's
    /// memory and wait finite, some are, each counted in the queues'
    /// counters ([`TcpService::tcp_counters`]): frames forwarded past 6 MiB
    /// waiting for a full inbox, or held past 32 768 for one takeover, are
    /// dropped (`forward_dropped`; their senders retransmit them); a
    /// segment reaching the old queue after it sent its drain marker gets
    /// to the new one out of order (`frames_forwarded_late`); a hold that
    /// ends on its timeout releases its frames ahead of any the old queue
    /// still forwards (`hold_timeouts`); and a connection the new queue
    /// cannot take is lost, its peer reset by the new queue
    /// (`import_failed`, the report's `connections_refused`). One move at
    /// a time; a few hundred microseconds for an idle bucket. The
    /// application sees no event it would not have seen.
    ///
    /// # Errors
    /// [`Error::MoveRefused`]: buckets cannot move in this service (one
    /// queue, RSS unknown, no NIC to write, software spill), a bucket or
    /// queue out of range, the bucket already there, or either queue
    /// failed ([`TcpService::failed`]: a queue that failed closed would
    /// reset the bucket's connections, one whose worker ended would answer
    /// no move). [`Error::Move`]: a
    /// worker that did not answer, or a NIC write that failed (the move is
    /// then undone: the bucket and its connections go back to the old
    /// queue, which the NIC still sends them to; only if that fails too
    /// does the bucket stay on the new queue, its old queue forwarding its
    /// frames).
    pub fn move_bucket(&self, bucket: u16, to: u32) -> Result<MoveReport> {
        let fail = |e: String| Error::MoveRefused(e);
        let cannot = || fail(self.why_buckets_cannot_move().unwrap_or_default());
        let m = self.moves.as_ref().ok_or_else(cannot)?;
        let nic = m.nic.as_ref().ok_or_else(cannot)?;
        if !self.carriers.is_empty() {
            return Err(fail(format!(
                "buckets do not move while {} workers share {} queues (software spill)",
                m.mesh.queues(),
                m.mesh.queues() as usize - self.carriers.len()
            )));
        }
        let mut table = m.table.lock().unwrap_or_else(|e| e.into_inner());
        let Some(&from) = table.get(usize::from(bucket)) else {
            return Err(fail(format!(
                "bucket {bucket} is out of range: the table has {} entries",
                table.len()
            )));
        };
        if to >= m.mesh.queues() {
            return Err(fail(format!(
                "queue {to} is not served: this service has {} queues",
                m.mesh.queues()
            )));
        }
        if from == to {
            return Err(fail(format!("bucket {bucket} is already on queue {to}")));
        }
        check_move_queues(from, to, &self.dataplane.failed_queues()).map_err(fail)?;
        match handoff::move_bucket(&m.mesh, nic.0.as_ref(), bucket, from, to) {
            Ok(report) => {
                table[usize::from(bucket)] = to;
                Ok(report)
            }
            Err(MoveError::Stayed(e)) => Err(Error::Move(e)),
            Err(MoveError::Moved(e)) => {
                table[usize::from(bucket)] = to;
                Err(Error::Move(e))
            }
        }
    }

    /// The data path (interface, queues, AF_XDP and steering counters).
    pub fn dataplane(&self) -> &Dataplane {
        &self.dataplane
    }

    /// The queue that worker `worker` sends through when it has no queue
    /// of its own (software spill: [`TcpServiceConfig::workers`] past the
    /// NIC's queues); None for a queue's own worker.
    pub fn spill_carrier(&self, worker: u32) -> Option<u32> {
        // Every worker has its counters; those past the queues, a carrier.
        let nic_queues = (self.counters.len() - self.carriers.len()) as u32;
        let i = worker.checked_sub(nic_queues)?;
        self.carriers.get(i as usize).map(|&c| u32::from(c))
    }

    /// Whether a queue failed: its handler panicked (the queue failed
    /// closed: its connections reset, and every new one too, see
    /// [`TcpService`]), or its worker or socket stopped. As
    /// `flowlane_kernel::KernelService::failed`: no system call, for any
    /// thread as often as it likes; [`Dataplane::failed_queues`] says
    /// which, and [`Dataplane::check`] what happened, in words. The
    /// service should then be stopped and started again.
    pub fn failed(&self) -> bool {
        self.dataplane.failed()
    }

    /// Each queue's TCP counters now, by queue.
    pub fn tcp_counters(&self) -> Vec<(u32, TcpCountersSnapshot)> {
        Self::read(&self.counters)
    }

    fn read(counters: &PerQueue) -> Vec<(u32, TcpCountersSnapshot)> {
        counters
            .iter()
            .map(|c| (c.queue, c.tcp.snapshot()))
            .collect()
    }

    /// Each queue's RSS buckets in use now (connections, records, segments
    /// and bytes received), by queue. Without RSS
    /// ([`TcpServiceConfig::rss`]) a queue has one bucket, 0.
    pub fn bucket_counters(&self) -> Vec<(u32, Vec<BucketSnapshot>)> {
        Self::read_buckets(&self.counters)
    }

    fn read_buckets(counters: &PerQueue) -> Vec<(u32, Vec<BucketSnapshot>)> {
        counters
            .iter()
            .map(|c| (c.queue, c.buckets.snapshot()))
            .collect()
    }

    /// Begins the stop and lets connections finish before the service
    /// stops, for at most `deadline`. First each worker refuses its
    /// listeners' SYNs and asks its handlers about each connection
    /// ([`flowlane_app::ConnHandler::on_stop`]): a handler closes those it
    /// can end cleanly (an idle keep-alive connection: a FIN) and says
    /// which it will close once what is under way is done; the drain
    /// waits for those (`finishing`), and until none is in CLOSE-WAIT (its application has
    /// not closed it yet, or its close request is still on its way from an
    /// application thread in queue-pair mode), FIN-WAIT-1, CLOSING or
    /// LAST-ACK (our FIN not acknowledged: only a running worker sends it
    /// again). A service stopped at once after its application closed a
    /// connection left the peer waiting for a FIN that never came (the
    /// queue-pair storm test's sender, in FIN-WAIT-2 until its timeout).
    /// Returns whether every close finished. Reads the workers' counters,
    /// so it first waits two of their publishing periods: a close the
    /// application just made must have reached them.
    pub fn linger(&self, deadline: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // Seen at each worker's next pass (10 ms apart at most, as
        // handlers' `on_tick`), before the publications waited for.
        std::thread::sleep(2 * crate::tcp_handler::PUBLISH_EVERY);
        loop {
            let closing: u64 = self
                .tcp_counters()
                .iter()
                .map(|(_, c)| c.unfinished_at_stop())
                .sum();
            if closing == 0 {
                return true;
            }
            if start.elapsed() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Stops the workers and releases the data path; returns each queue's
    /// final counters (published by each worker as it exits), and what
    /// went wrong while the workers ran ([`Dataplane::stop`]'s: a queue
    /// whose handler panicked, `flowlane_app::StopErrorKind::Panicked` and
    /// its queue; one whose socket failed, `Failed` and the OS error). The
    /// counters come either way: `let (counters, stopped) = service.stop();`.
    ///
    /// Each worker, told to stop, resets the connections its queue still
    /// holds before its socket closes, as the kernel-socket backend's stop
    /// does (`SO_LINGER` 0): every one is aborted (RFC 9293 §3.10.5: an
    /// RST to its peer, counted in `resets_aborted`; the connection
    /// counted `closed`, so that opens add up to closes and the half-open
    /// connections left) but those in TIME-WAIT and the half-open ones
    /// (SYN-RECEIVED, whose sources a SYN flood spoofs), which go quietly,
    /// and its handlers hear nothing more. Its peer learns
    /// at once that the connection is gone, where it would have held it
    /// (a client's pool, an idle keep-alive) until it next sent. What the
    /// TX ring takes in [`crate::worker::STOP_PASSES`] passes goes out; a
    /// worker without a queue (software spill) hands its RSTs to the
    /// carrying queue's, which may already have stopped. Call
    /// [`TcpService::linger`] first to let closes under way finish with
    /// their FINs, and the handlers close what they can end cleanly (a
    /// FIN to an idle keep-alive connection, as nginx's graceful stop).
    pub fn stop(self) -> (FinalCounters, std::result::Result<(), StopError>) {
        let TcpService {
            dataplane,
            counters,
            ..
        } = self;
        let stopped = dataplane.stop();
        let counters = FinalCounters {
            tcp: Self::read(&counters),
            buckets: Self::read_buckets(&counters),
        };
        (counters, stopped)
    }
}

impl TcpCountersSnapshot {
    /// The connections a stop's drain ([`TcpService::linger`]) waits for
    /// as these counters tell: those their handler is finishing
    /// (`finishing`), and those whose close is under way (CLOSE-WAIT,
    /// FIN-WAIT-1, CLOSING, LAST-ACK). Read as the drain ends, the
    /// connections the stop then resets for want of time.
    pub fn unfinished_at_stop(&self) -> u64 {
        self.in_close_wait + self.in_fin_wait1 + self.in_closing + self.in_last_ack + self.finishing
    }
}

/// Where the NIC's RSS comes from, for a message that needs it: the
/// field (`service_args::cli_terms` names the flags instead).
pub(crate) const GIVE_RSS: &str = "give it (TcpServiceConfig::rss, see rss_state)";

/// The MSS to advertise over IPv4 on an interface of `mtu` bytes, at most
/// `most`: the MTU less the fixed IPv4 and TCP headers (RFC 9293 §3.7.1;
/// what Linux advertises from the route's MTU).
fn mss_for_mtu(mtu: u32, most: u16) -> u16 {
    u16::try_from(mtu.saturating_sub(40))
        .unwrap_or(u16::MAX)
        .min(most)
}

/// Refuses a service that opens connections (`active`) on several
/// `queues` of `iface` without the NIC's RSS (`rss_known`): the ports its
/// opens draw from could not be chosen so that the replies come back to
/// the opening queue, and a reply that reaches another queue is reset
/// there (about half the opens, on two queues). One line naming the
/// fields and what to do.
pub(crate) fn check_active_opens(
    iface: &str,
    active: bool,
    rss_known: bool,
    queues: u32,
) -> Result<()> {
    if active && !rss_known && queues > 1 {
        return Err(Error::Setup(format!(
            "opening connections (TcpServiceConfig::active) on {queues} queues of {iface} \
             needs the NIC's RSS key and table, or their replies reach other queues, which \
             reset them: {GIVE_RSS}, or serve one queue"
        )));
    }
    Ok(())
}

/// The [`StartError`] of a data path's error at start: a queue's set-up's
/// own error stays its source (a [`StartError`] it returned stays as it
/// is; a set-up that panicked is a `Worker` one, its queue named), an OS
/// error its source; the others, whose message says their cause, keep
/// their message.
pub(crate) fn start_error(e: Error) -> StartError {
    match e {
        Error::Handler { queue, source } => match source.downcast::<StartError>() {
            Ok(own) if own.kind() == StartErrorKind::Worker => {
                StartError::worker(format!("queue {queue}: {}", own.message()))
            }
            Ok(own) => *own,
            Err(source) => StartError::setup(format!("queue {queue}: the set-up failed"), source),
        },
        Error::Io { what, source } => StartError::os(what, source),
        e @ Error::Steering { .. } => StartError::new(StartErrorKind::Os, e.to_string()),
        e => StartError::config(e.to_string()),
    }
}

/// Refuses a move of a bucket from queue `from` to queue `to` when either
/// is among the `failed` queues ([`Dataplane::failed_queues`]): a queue
/// that failed closed resets every connection it holds or is sent (the
/// bucket's, moved there), and one whose worker ended answers no move.
/// The reason, in one line, for [`Error::MoveRefused`].
fn check_move_queues(from: u32, to: u32, failed: &[u32]) -> std::result::Result<(), String> {
    match [to, from].into_iter().find(|q| failed.contains(q)) {
        Some(q) => Err(format!(
            "queue {q} failed (its handler panicked, or its worker stopped: see the service's \
             log), and buckets do not move {} a failed queue: restart the service",
            if q == to { "to" } else { "from" }
        )),
        None => Ok(()),
    }
}

/// Why a service's buckets cannot move (a phrase saying what to do), or
/// None when they can: that needs the NIC's RSS known (`rss_known`),
/// several queues to move them between (`several_queues`, with the RSS
/// known), and a NIC to write the moved buckets' entries to (`nic`).
/// Without the last, every move would fail: a service that said its
/// buckets can move would take `--rebalance auto` and then fail each move.
fn why_buckets_cannot_move(
    rss_known: bool,
    several_queues: bool,
    nic: bool,
) -> Option<&'static str> {
    if !rss_known {
        Some("buckets move only with the NIC's RSS known (use --bed, or --rss-key/--rss-table)")
    } else if !several_queues {
        Some("one queue: buckets move only between several")
    } else if !nic {
        Some(
            "no NIC to write RSS entries to: buckets move only where flowlane can write the \
             NIC's indirection table (use --bed, or a NIC whose RSS flowlane can write)",
        )
    } else {
        None
    }
}

/// A per-run secret for TCP initial sequence numbers, and the keys the
/// stack derives from it (SYN cookies, ephemeral ports): 128 bits from the
/// kernel's random number generator (getrandom(2)). An error (one line) if
/// the kernel gives none: a service keyed by a guessable secret must not
/// start.
pub fn isn_secret() -> Result<[u8; 16]> {
    secret()
}

/// `N` secret bytes, every one of them from the kernel's random number
/// generator (getrandom(2), which waits only for the generator's seeding
/// at boot): nothing of the clock, and no fallback on error.
fn secret<const N: usize>() -> Result<[u8; N]> {
    secret_from(getrandom::fill)
}

/// `N` secret bytes as `fill` (the kernel's generator; a test's stand-in)
/// gives them, or the error that stops the start.
fn secret_from<const N: usize>(
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), getrandom::Error>,
) -> Result<[u8; N]> {
    let mut s = [0u8; N];
    fill(&mut s).map_err(|e| {
        Error::Setup(format!(
            "no secret: the kernel's random number generator (getrandom) failed: {e}"
        ))
    })?;
    Ok(s)
}

/// The RSS flowlane steers by in software on a NIC with one receive queue
/// and no RSS it can read: every frame reaches queue 0, so the buckets
/// are flowlane's to choose. A secret key of its own (40 bytes, as NICs'
/// Toeplitz keys), so that peers cannot pick the worker that serves them,
/// and a table of `table_size` entries, all queue 0, as the NIC delivers.
fn software_rss(table_size: usize) -> Result<RssState> {
    rss_state(&secret::<40>()?, &vec![0; table_size], 1)
}

/// Neighbours for a service: static `IP=MAC` specs, then the kernel's table
/// for `iface` (both families, as if learned at start). With `connect_to`,
/// the kernel is first made to resolve that address
/// ([`crate::kernel_neighbors::prime`]: ARP and neighbour discovery stay
/// with the kernel).
///
/// # Errors
/// A bad spec; a `connect_to` without a spec that flowlane cannot reach
/// from `iface` (no route, or one through a router or another interface:
/// flowlane sends to on-link peers only), at once, in one line, where the
/// kernel's connect(2) would fail with ENETUNREACH.
pub fn neighbors(specs: &[String], iface: &str, connect_to: Option<IpAddr>) -> Result<Neighbors> {
    // An IPv4-mapped peer is its IPv4 address (the connect takes it so).
    let connect_to = connect_to.map(|ip| ip.to_canonical());
    let mut n = Neighbors::new();
    for e in specs {
        n.insert_spec(e)
            .map_err(|e| Error::Setup(format!("bad --neighbor: {e}")))?;
    }
    // A peer of a family the interface has no address of: no connection
    // to it has a source, with or without its MAC given.
    if let Some(ip) = connect_to {
        let has = (
            local_ipv4_prefix_if_any(iface)?.is_some(),
            local_ipv6(iface)?.is_some(),
        );
        if let Some(why) = no_source_address(iface, ip, has) {
            return Err(Error::Setup(why));
        }
    }
    if let Some(ip) = connect_to.filter(|&ip| !n.contains(ip)) {
        if let Some(why) = unreachable(iface, current_ifindex(iface), ip, &route_to(ip)) {
            return Err(Error::Setup(why));
        }
        prime(ip);
        std::thread::sleep(PRIME_WAIT);
    }
    if let Some(index) = current_ifindex(iface) {
        match kernel_neighbors(index) {
            Ok(entries) => add_kernel_entries(&mut n, entries),
            // Not fatal: peers are learned as they connect.
            Err(e) => tracing::warn!("reading the kernel's neighbour table: {e}"),
        }
    }
    Ok(n)
}

/// Why flowlane cannot open a connection to `ip` from `iface`, whose own
/// addresses are `(IPv4, IPv6 but link-local)` as `has` says: none of
/// `ip`'s family to send from (the open failed "invalid address" after the
/// start); None when it has one.
fn no_source_address(iface: &str, ip: IpAddr, has: (bool, bool)) -> Option<String> {
    let (family, add) = match ip {
        IpAddr::V4(_) if !has.0 => ("IPv4", "10.0.0.1/24"),
        IpAddr::V6(_) if !has.1 => ("IPv6 (but link-local)", "fd00::1/64"),
        _ => return None,
    };
    Some(format!(
        "{iface} has no {family} address to open a connection to {ip} from: add one (ip addr \
         add {add} dev {iface}), or connect to an address of the family {iface} has"
    ))
}

/// Why `ip` cannot be reached from `iface` (index `ifindex`) by flowlane,
/// whose frames go to the Ethernet address of their destination itself
/// (on-link peers only, see [`crate::neighbor`]), given the kernel's
/// `route` to it ([`route_to`]); None when it can (or when the kernel
/// could not be asked: the open then finds out on the wire).
fn unreachable(
    iface: &str,
    ifindex: Option<u32>,
    ip: IpAddr,
    route: &std::io::Result<Route>,
) -> Option<String> {
    let only = format!(
        "flowlane opens connections to peers on {iface}'s own networks only (`ip route` lists \
         them), and to those given a MAC by --neighbor IP=MAC"
    );
    // The kernel routes 0.0.0.0 as one of this host's addresses, but has
    // no route to :: at all: either is no peer's (RFC 4291 §2.5.2).
    if ip.is_unspecified() {
        return Some(format!(
            "{ip} is no unicast peer (the unspecified address): {only}"
        ));
    }
    match route {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENETUNREACH | libc::EHOSTUNREACH)
            ) =>
        {
            Some(format!("no route to {ip} ({e}): {only}"))
        }
        Err(e) => {
            tracing::warn!("asking the kernel for a route to {ip}: {e}");
            None
        }
        Ok(r) if !r.unicast => Some(format!(
            "{ip} is no unicast peer (one of this host's addresses, or a broadcast, \
             black-hole or unreachable route: `ip route get {ip}`): {only}"
        )),
        Ok(Route {
            gateway: Some(g), ..
        }) => Some(format!(
            "{ip} is reached through the router {g} (`ip route get {ip}`): {only}"
        )),
        Ok(r) if ifindex.is_some() && r.oif != ifindex => Some(format!(
            "{ip} is reached through another interface than {iface} (`ip route get {ip}`): {only}"
        )),
        Ok(_) => None,
    }
}

/// The kernel's neighbour entries, read at start, as if learned then
/// ([`Neighbors::confirm`]): an operator's `--neighbor` (pinned: its
/// defence against spoofing) is never replaced by them, and one of them
/// gives way to a newer sighting after the peer fell silent (a failover
/// that changed its MAC, or an entry the kernel held stale), where pinned
/// it would have been used for good; once stale, the workers ask the
/// kernel again while they send to it.
fn add_kernel_entries(n: &mut Neighbors, entries: Vec<(IpAddr, flowlane_wire::EthernetAddress)>) {
    for (ip, mac) in entries {
        // Only a configured entry is kept (no entry is fresh yet).
        let _ = n.confirm(flowlane_tcp::time::Instant::ZERO, ip, mac);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_numa_sched::toeplitz::RssKey;
    use std::net::Ipv4Addr;

    /// A queue's set-up that panicked (the worker thread's error for it)
    /// fails the start as a worker that ended, naming the queue and the
    /// panic's words, as on the other backends; not as a set-up's error.
    #[test]
    fn a_set_up_that_panicked_is_a_worker_start_error() {
        let payload = std::panic::catch_unwind(|| panic!("a set-up bug")).unwrap_err();
        let e = start_error(Error::Handler {
            queue: 1,
            source: crate::runtime::panicked(payload.as_ref()).into(),
        });
        assert_eq!(e.kind(), StartErrorKind::Worker, "{e:#}");
        assert!(
            e.to_string()
                .starts_with("queue 1: the handler's set-up panicked (a set-up bug)"),
            "{e}"
        );
        // A set-up's own error stays a set-up error.
        let e = start_error(Error::Handler {
            queue: 2,
            source: "no room".into(),
        });
        assert_eq!(e.kind(), StartErrorKind::Setup, "{e:#}");
        assert_eq!(format!("{e:#}"), "queue 2: the set-up failed: no room");
    }

    /// The MSS follows the link's MTU below Ethernet's and stays at the
    /// stack's above it (frames hold no more).
    #[test]
    fn the_mss_is_what_the_mtu_carries() {
        assert_eq!(mss_for_mtu(1500, 1460), 1460);
        assert_eq!(mss_for_mtu(1280, 1460), 1240);
        assert_eq!(mss_for_mtu(576, 1460), 536);
        assert_eq!(mss_for_mtu(9000, 1460), 1460);
        assert_eq!(mss_for_mtu(u32::MAX, 1460), 1460);
    }

    /// A peer of a family the interface has no address of is refused in
    /// one line saying what to do; one of a family it has is not.
    #[test]
    fn a_peer_of_a_family_the_interface_lacks_is_refused() {
        let (v4, v6): (IpAddr, IpAddr) = ("10.99.0.2".parse().unwrap(), "fd99::2".parse().unwrap());
        let said = no_source_address("xsk0", v4, (false, true)).unwrap();
        assert!(
            said.starts_with("xsk0 has no IPv4 address to open a connection to 10.99.0.2 from: ")
                && said.contains("ip addr add")
                && !said.contains('\n'),
            "{said}"
        );
        let said = no_source_address("xsk0", v6, (true, false)).unwrap();
        assert!(
            said.starts_with("xsk0 has no IPv6 (but link-local) address"),
            "{said}"
        );
        assert_eq!(no_source_address("xsk0", v4, (true, false)), None);
        assert_eq!(no_source_address("xsk0", v6, (false, true)), None);
    }

    /// An operator's `--neighbor` outranks what the kernel's table says of
    /// the same address (a stale entry, or one an on-link spoofer planted
    /// before the service started); the kernel's other entries are taken.
    #[test]
    fn a_static_neighbour_outranks_the_kernels_entry() {
        let mac = |s| crate::neighbor::parse_mac(s).unwrap();
        let mut n = Neighbors::new();
        n.insert_spec("10.0.0.1=02:00:00:00:00:99").unwrap();
        add_kernel_entries(
            &mut n,
            vec![
                ("10.0.0.1".parse().unwrap(), mac("02:fc:00:00:00:05")),
                ("10.0.0.2".parse().unwrap(), mac("02:fc:00:00:00:06")),
            ],
        );
        let now = flowlane_tcp::time::Instant::ZERO;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            n.lookup(now, ip("10.0.0.1")),
            Some(mac("02:00:00:00:00:99"))
        );
        assert_eq!(
            n.lookup(now, ip("10.0.0.2")),
            Some(mac("02:fc:00:00:00:06"))
        );
    }

    /// A peer flowlane cannot reach from its interface is refused at
    /// once, in one line saying why and what to do: no route (where the
    /// kernel's connect fails with ENETUNREACH), a router or another
    /// interface on the way, not a unicast peer; an on-link one is not,
    /// nor one whose route the kernel could not be asked about.
    #[test]
    fn a_peer_off_the_interface_s_networks_is_refused_at_once() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let on_link = Route {
            oif: Some(7),
            gateway: None,
            unicast: true,
        };
        let why = |r: std::io::Result<Route>| unreachable("xsk0", Some(7), ip, &r);
        assert_eq!(why(Ok(on_link)), None);
        // The unspecified address of either family, whatever the kernel
        // says of its route (none for ::), as bulk-source --connect said
        // `no route to ::` where 0.0.0.0 was `no unicast peer`.
        for any in ["::", "0.0.0.0"] {
            let enetunreach = Err(std::io::Error::from_raw_os_error(libc::ENETUNREACH));
            let said = unreachable("xsk0", Some(7), any.parse().unwrap(), &enetunreach).unwrap();
            assert!(
                said.starts_with(&format!(
                    "{any} is no unicast peer (the unspecified address): "
                )),
                "{said}"
            );
        }
        let none = why(Err(std::io::Error::from_raw_os_error(libc::ENETUNREACH))).unwrap();
        assert!(
            none.starts_with("no route to 192.0.2.1 (")
                && none.contains("on xsk0's own networks only")
                && none.contains("--neighbor IP=MAC")
                && !none.contains('\n'),
            "{none}"
        );
        let router = why(Ok(Route {
            gateway: Some("10.99.0.254".parse().unwrap()),
            ..on_link
        }));
        assert!(
            router.is_some_and(|m| m.contains("through the router 10.99.0.254")),
            "a router"
        );
        let other = why(Ok(Route {
            oif: Some(1),
            ..on_link
        }));
        assert!(other.is_some_and(|m| m.contains("another interface than xsk0")));
        let local = why(Ok(Route {
            unicast: false,
            ..on_link
        }));
        assert!(local.is_some_and(|m| m.contains("no unicast peer")));
        // The kernel not asked (no netlink): found out on the wire.
        assert_eq!(why(Err(std::io::Error::other("no netlink"))), None);
    }

    #[test]
    fn static_neighbours_parse_and_bad_ones_are_refused() {
        let n = neighbors(&["10.99.0.2=02:00:00:00:00:02".into()], "nosuch0", None).unwrap();
        assert!(n.contains(Ipv4Addr::new(10, 99, 0, 2)));
        let e = neighbors(&["10.99.0.2".into()], "nosuch0", None).unwrap_err();
        assert!(e.to_string().contains("--neighbor"), "{e}");
    }

    #[test]
    fn software_steering_keys_its_own_hash_with_a_fresh_secret() {
        let (a, b) = (software_rss(128).unwrap(), software_rss(128).unwrap());
        assert_eq!(a.table().entries().len(), 128);
        assert!(a.table().entries().iter().all(|&q| q == 0), "one queue");
        assert_eq!(a.key().as_bytes().len(), 40);
        assert_ne!(a.key(), b.key(), "a secret per run");
        assert_ne!(a.key(), &RssKey::microsoft_default(), "not a known key");
    }

    /// A secret is the kernel's random bytes and nothing else (no clock
    /// mixed in, which a source that gives zeros would show), and a start
    /// without them fails, in one line, instead of falling back on the
    /// clock.
    #[test]
    fn the_secret_is_the_kernels_randomness_or_the_start_fails() {
        let zeros: [u8; 40] = secret_from(|b| {
            b.fill(0);
            Ok(())
        })
        .unwrap();
        assert_eq!(zeros, [0; 40], "nothing but the generator's bytes");
        let e = secret_from::<16>(|_| Err(getrandom::Error::UNSUPPORTED)).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("random number generator") && !m.contains('\n'),
            "{m}"
        );
        // The kernel's: two draws differ (2^-128 by chance).
        assert_ne!(isn_secret().unwrap(), isn_secret().unwrap());
    }

    /// Buckets move only with the NIC's RSS known, several queues and a
    /// NIC to write their entries to; without the last, the service says
    /// so (and `--rebalance auto` is refused at the start) rather than
    /// failing every move.
    #[test]
    fn buckets_cannot_move_without_a_nic_to_write() {
        assert_eq!(why_buckets_cannot_move(true, true, true), None);
        let why = why_buckets_cannot_move(true, true, false).expect("a reason");
        assert!(
            why.starts_with("no NIC to write RSS entries to") && why.contains("--bed"),
            "{why}"
        );
        assert!(!why.contains('\n'), "one line: {why}");
        assert!(
            why_buckets_cannot_move(true, false, false).is_some_and(|w| w.starts_with("one queue"))
        );
        assert!(
            why_buckets_cannot_move(false, false, false).is_some_and(|w| w.contains("RSS known"))
        );
    }

    /// A move to or from a queue that failed is refused before anything
    /// moves (a queue that failed closed would reset the bucket's
    /// connections), saying which queue and what to do; moves between
    /// healthy queues are not.
    #[test]
    fn buckets_do_not_move_to_or_from_a_failed_queue() {
        assert_eq!(check_move_queues(0, 1, &[]), Ok(()));
        assert_eq!(check_move_queues(0, 1, &[2]), Ok(()));
        let to = check_move_queues(0, 1, &[1]).unwrap_err();
        assert!(
            to.starts_with("queue 1 failed") && to.contains("move to a failed queue"),
            "{to}"
        );
        let from = check_move_queues(2, 0, &[2]).unwrap_err();
        assert!(
            from.contains("queue 2 failed") && from.contains("from a failed"),
            "{from}"
        );
        assert!(from.contains("restart the service") && !from.contains('\n'));
    }

    /// A service that opens connections on several queues without the
    /// NIC's RSS is refused before anything starts, in one line naming the
    /// fields (about half its opens would get their replies on another
    /// queue, which resets them); on one queue it needs none.
    #[test]
    fn active_opens_on_several_queues_need_the_nic_s_rss() {
        let root = std::env::temp_dir().join(format!("flowlane-active-{}", std::process::id()));
        let d = root.join("class/net/flact0");
        for q in 0..2 {
            std::fs::create_dir_all(d.join(format!("queues/rx-{q}"))).unwrap();
            std::fs::create_dir_all(d.join(format!("queues/tx-{q}"))).unwrap();
        }
        std::fs::write(d.join("ifindex"), "7\n").unwrap();
        std::fs::write(d.join("mtu"), "1500\n").unwrap();
        std::fs::write(d.join("address"), "02:00:00:aa:bb:cc\n").unwrap();
        let mut config = TcpServiceConfig::new("flact0");
        config.sysfs = root.clone();
        config.active = true;
        let start = |c: &TcpServiceConfig| {
            TcpService::start(c.clone(), |_| ())
                .unwrap_err()
                .to_string()
        };
        let kind = TcpService::start(config.clone(), |_| ())
            .unwrap_err()
            .kind();
        assert_eq!(kind, StartErrorKind::Config);
        let e = start(&config);
        assert!(
            e.contains("(TcpServiceConfig::active) on 2 queues of flact0")
                && e.contains("TcpServiceConfig::rss")
                && !e.contains('\n'),
            "{e}"
        );
        // One queue: no RSS needed (the start fails further on, at the
        // fake interface's address).
        config.queues = Some(1);
        let e = start(&config);
        assert!(!e.contains("TcpServiceConfig::rss"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn rss_state_checks_key_and_table() {
        let key = RssKey::microsoft_default();
        assert!(rss_state(key.as_bytes(), &[0, 1, 0, 1], 2).is_ok());
        assert!(matches!(rss_state(&[1, 2], &[0, 1], 2), Err(Error::Rss(_))));
        assert!(matches!(
            rss_state(key.as_bytes(), &[0, 1, 0], 2),
            Err(Error::Rss(_))
        ));
    }
}
