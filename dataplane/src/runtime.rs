//! Starting and stopping the data path: steering program, per-node UMEM,
//! per-queue sockets and pinned workers, the kernel sockets that keep the
//! kernel off flowlane's ports ([`PortHolds`]); and [`Dataplane::check`],
//! which tells a running service that what it attached to went away or
//! that a queue failed ([`Dataplane::failed`]: a handler's panic fails its
//! queue closed, see [`crate::worker`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use flowlane_app::{StartError, StopError, Worker};
pub use flowlane_ebpf::steer::LocalAddress;
use flowlane_ebpf::steer::{Proto, SteerStats, Steering};

use crate::counters::{QueueCounters, QueueCountersSnapshot};
use crate::iface::{self, InterfaceInfo};
use crate::umem::{self, RingSizes};
use crate::worker::{self, LoopConfig, QueueHandler, QueueInfo};
use crate::xsk::{BindMode, QueueSocket};
use crate::{affinity, Error, Result};

/// Most frames a worker keeps out of the fill ring for transmissions.
const TX_RESERVE_MAX: usize = 1024;
/// A queue's handler may hold this fraction of its frames past their
/// arrival (zero-copy receive): the rest keep the fill ring fed whatever
/// the applications leave unread.
const HELD_FRACTION: usize = 4;

/// Where one queue's worker runs and where its memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueAssignment {
    /// Receive queue index.
    pub queue: u32,
    /// CPU to pin the worker to (None: leave it to the scheduler).
    pub cpu: Option<u32>,
    /// NUMA node of the queue's packet memory.
    pub node: u32,
}

/// Everything the data path needs to start.
#[derive(Debug, Clone)]
pub struct DataplaneConfig {
    /// Interface to attach to.
    pub ifname: String,
    /// One entry per queue to serve.
    pub queues: Vec<QueueAssignment>,
    /// Workers without a queue of their own (software spill, when there
    /// are more workers than the NIC has queues): their `queue` is a worker
    /// index past the queues'; their frames come from the queues' workers.
    pub spill: Vec<QueueAssignment>,
    /// CPUs of each NUMA node (for allocating the node's UMEM there).
    pub node_cpus: BTreeMap<u32, Vec<u32>>,
    /// Ports flowlane owns (listening ports), each for its protocol only.
    /// The start refuses a port a kernel socket uses on the addresses
    /// claimed ([`DataplaneConfig::local_v4`], `local_v6`), and holds it
    /// against the kernel's and other processes' use while the data path
    /// runs ([`PortHolds`]).
    pub ports: Vec<(Proto, u16)>,
    /// flowlane's ephemeral port range (inclusive), if any: the kernel
    /// must have it reserved (`net.ipv4.ip_local_reserved_ports`), or the
    /// start is refused.
    pub ephemeral: Option<(u16, u16)>,
    /// flowlane's own IPv4 address: only frames to it are steered to
    /// flowlane ([`LocalAddress::Only`]); [`LocalAddress::Unclaimed`]: it
    /// has none, all IPv4 is the kernel's; [`LocalAddress::Any`] (the
    /// default): every IPv4 address.
    pub local_v4: LocalAddress<Ipv4Addr>,
    /// The same for IPv6.
    pub local_v6: LocalAddress<Ipv6Addr>,
    /// The NIC's RSS indirection table (a queue per bucket), when known.
    /// Where the queues served leave some of the device's receive queues
    /// out, the start is refused unless this is known and every entry
    /// names a served queue: flowlane's frames hashed to another queue
    /// would be lost (dropped without a socket, or passed to the kernel,
    /// which resets the connection).
    pub nic_table: Option<Vec<u32>>,
    /// Ring and pool sizes.
    pub rings: RingSizes,
    /// Copy or zero-copy.
    pub bind_mode: BindMode,
    /// Spin instead of sleeping in poll(2) when idle.
    pub busy_poll: bool,
    /// Let handlers keep received frames (zero-copy receive), up to a
    /// quarter of each queue's frames; off: they copy what they keep.
    pub zero_copy_receive: bool,
    /// Root of sysfs (tests use fake trees).
    pub sysfs: PathBuf,
    /// The handlers size their frames by the interface's MTU at the start
    /// (a TCP service's MSS): [`Dataplane::check`] fails once the MTU falls
    /// below it, since frames sized for the old one would be dropped.
    pub sized_by_mtu: bool,
}

impl DataplaneConfig {
    /// A configuration serving `queues` on `ifname`, unpinned, on node 0.
    pub fn new(ifname: &str, queues: &[u32]) -> DataplaneConfig {
        DataplaneConfig {
            ifname: ifname.to_string(),
            queues: queues
                .iter()
                .map(|&queue| QueueAssignment {
                    queue,
                    cpu: None,
                    node: 0,
                })
                .collect(),
            spill: Vec::new(),
            node_cpus: BTreeMap::new(),
            ports: Vec::new(),
            ephemeral: None,
            local_v4: LocalAddress::Any,
            local_v6: LocalAddress::Any,
            nic_table: None,
            rings: RingSizes::default(),
            bind_mode: BindMode::Auto,
            busy_poll: false,
            zero_copy_receive: true,
            sysfs: PathBuf::from("/sys"),
            sized_by_mtu: false,
        }
    }
}

struct WorkerHandle {
    info: QueueInfo,
    counters: Arc<QueueCounters>,
    /// The errno that made the worker give up its socket (0: none).
    failed: Arc<AtomicI32>,
    /// Whether the worker's loop panicked (the queue failed closed, or
    /// the worker ended).
    panicked: Arc<AtomicBool>,
    /// The passes its loop began ([`worker::Control::passes`]).
    passes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

/// What [`Dataplane::check`] found gone: one line, in the user's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Vanished(pub String);

/// Kernel sockets bound, never listening, to each port flowlane claims,
/// for the port's protocol, on each address the steering program claims it
/// on (an address of each family, or the wildcard of a family whose every
/// address is claimed, IPv6 sockets IPv6-only). Without them a kernel socket
/// on a claimed port lost its frames to flowlane: a server already
/// listening there (nginx on 80), a connection of the kernel's that got the
/// port as its local one (its SYN-ACK reached flowlane, which reset it; a
/// resolver's replies to udp-echo's port). Binding them fails if any kernel
/// socket uses the port there (the start is refused, one line, which tells
/// a port only connections that ended hold, TIME-WAIT, from one in use by
/// a server), and while
/// they are held the kernel's own choice of local ports (connect, sendto
/// from an unbound socket) skips the port and other sockets' binds to it
/// fail (`EADDRINUSE`, `SO_REUSEADDR` or not: these set neither it nor
/// `SO_REUSEPORT`). Released when dropped, with the data path.
///
/// flowlane's ephemeral range ([`DataplaneConfig::ephemeral`]) is not held
/// so (5 000 ports, two protocols, two families): the kernel's reserved
/// ports (`net.ipv4.ip_local_reserved_ports`, checked at start) keep its own
/// choice of local ports off it; a socket bound to a port of the range
/// explicitly, before the start or during the run, is not refused.
#[derive(Debug, Default)]
pub struct PortHolds {
    /// The sockets, each with the port it holds and its protocol.
    sockets: Vec<((Proto, u16), OwnedFd)>,
}

impl PortHolds {
    /// Holds `port` for `proto` on the addresses `v4` and `v6` name
    /// (`scope` is the interface index, for a link-local IPv6 address).
    /// A port held already is left as it is.
    ///
    /// # Errors
    /// [`Error::Setup`], one line: a kernel socket uses the port there (a
    /// server, or a connection of the kernel's), or no socket could be
    /// made or bound. What was held for this port before the error is let
    /// go; the ports held before stay held.
    pub fn hold(
        &mut self,
        proto: Proto,
        port: u16,
        v4: LocalAddress<Ipv4Addr>,
        v6: LocalAddress<Ipv6Addr>,
        scope: u32,
    ) -> Result<()> {
        if self.sockets.iter().any(|(p, _)| *p == (proto, port)) {
            return Ok(());
        }
        let mut addrs = Vec::new();
        match v4 {
            LocalAddress::Any => addrs.push(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))),
            LocalAddress::Only(a) => addrs.push(SocketAddr::from((a, port))),
            LocalAddress::Unclaimed => {}
        }
        let v6_scope = |a: Ipv6Addr| if a.is_unicast_link_local() { scope } else { 0 };
        match v6 {
            LocalAddress::Any => addrs.push(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::UNSPECIFIED,
                port,
                0,
                0,
            ))),
            LocalAddress::Only(a) => {
                addrs.push(SocketAddr::V6(SocketAddrV6::new(a, port, 0, v6_scope(a))))
            }
            LocalAddress::Unclaimed => {}
        }
        let mut held = Vec::with_capacity(addrs.len());
        for addr in addrs {
            if let Some(fd) = hold_one(proto, addr)? {
                held.push(((proto, port), fd));
            }
        }
        self.sockets.extend(held);
        Ok(())
    }

    /// Lets `port` go for `proto` (its sockets closed).
    fn let_go(&mut self, proto: Proto, port: u16) {
        self.sockets.retain(|(p, _)| *p != (proto, port));
    }
}

/// `tcp` or `udp`, as a port is written (`80/tcp`).
fn proto_name(proto: Proto) -> &'static str {
    match proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    }
}

/// A kernel socket of `proto` bound to `addr` (see [`PortHolds`]); None
/// for IPv6 on a kernel without it (no IPv6 socket to keep away).
fn hold_one(proto: Proto, addr: SocketAddr) -> Result<Option<OwnedFd>> {
    use nix::errno::Errno;
    use nix::sys::socket::{
        self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6,
    };

    let port = addr.port();
    let what = proto_name(proto);
    // The OS's error is the cause (a start error of kind `Os` whose
    // `io_error` is it: `AddrInUse`, `PermissionDenied`), the line says
    // what to do.
    let os = |what: String, e: Errno| Error::Io {
        what,
        source: std::io::Error::from(e),
    };
    let failed = |doing: &str, e: Errno| {
        os(
            format!(
                "holding port {port}/{what} on {} against the kernel's use: {doing} failed; \
                 check the address, the privileges (root, or CAP_NET_BIND_SERVICE below port \
                 1024) and the open-file limit",
                addr.ip()
            ),
            e,
        )
    };
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let ty = match proto {
        Proto::Tcp => SockType::Stream,
        Proto::Udp => SockType::Datagram,
    };
    let fd = match socket::socket(family, ty, SockFlag::SOCK_CLOEXEC, None) {
        Ok(fd) => fd,
        Err(Errno::EAFNOSUPPORT) if addr.is_ipv6() => return Ok(None),
        Err(e) => return Err(failed("socket(2)", e)),
    };
    if addr.is_ipv6() {
        // The wildcard holds IPv6 only: IPv4 is held apart, where claimed.
        socket::setsockopt(&fd, sockopt::Ipv6V6Only, &true)
            .map_err(|e| failed("IPV6_V6ONLY", e))?;
    }
    // An address not usable yet (IPv6 during duplicate address detection)
    // binds all the same; the port is held from now on.
    socket::setsockopt(&fd, sockopt::IpFreebind, &true).map_err(|e| failed("IP_FREEBIND", e))?;
    if proto == Proto::Udp {
        // Datagrams the steering program leaves to the kernel (a queue
        // past its map, a source route under way) queue here unread: as
        // little room as the kernel gives.
        let _ = socket::setsockopt(&fd, sockopt::RcvBuf, &0);
    }
    let bound = match addr {
        SocketAddr::V4(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn::from(a)),
        SocketAddr::V6(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn6::from(a)),
    };
    match bound {
        Ok(()) => Ok(Some(fd)),
        Err(e @ Errno::EADDRINUSE) if proto == Proto::Tcp && only_ended_connections(addr) => {
            Err(os(
                format!(
                    "port {port}/tcp is still held by kernel connections that ended there \
                     (TIME-WAIT or closing: a server stopped less than a minute ago?): wait for \
                     them to go (`ss -tan 'sport = :{port}'` lists them) or choose another port \
                     (TcpServiceConfig::listen)"
                ),
                e,
            ))
        }
        // Ended connections of a server that did not set `SO_REUSEADDR`
        // keep the probe out too (TIME-WAIT keeps its socket's setting).
        Err(e @ Errno::EADDRINUSE) => Err(os(
            format!(
                "port {port}/{what} is in use by a kernel socket (another server, or connections \
                 of one, maybe ended, in TIME-WAIT: `ss -{}an 'sport = :{port}'` lists them): \
                 choose another port (TcpServiceConfig::listen) or stop it",
                &what[..1]
            ),
            e,
        )),
        Err(e) => Err(failed("bind(2)", e)),
    }
}

/// Whether what keeps `addr`'s TCP port from a plain bind is only sockets
/// that let `SO_REUSEADDR` bind past them: connections in TIME-WAIT (or
/// closing ones a stopped server accepted), no listener. A probe, dropped
/// at once: the hold itself never sets `SO_REUSEADDR` (another socket
/// setting it could then bind the port beside it).
fn only_ended_connections(addr: SocketAddr) -> bool {
    use nix::sys::socket::{
        self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6,
    };
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let Ok(fd) = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None) else {
        return false;
    };
    let set = socket::setsockopt(&fd, sockopt::ReuseAddr, &true).is_ok()
        && socket::setsockopt(&fd, sockopt::IpFreebind, &true).is_ok()
        && (addr.is_ipv4() || socket::setsockopt(&fd, sockopt::Ipv6V6Only, &true).is_ok());
    set && match addr {
        SocketAddr::V4(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn::from(a)),
        SocketAddr::V6(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn6::from(a)),
    }
    .is_ok()
}

/// A running data path. Dropping it stops the workers, closes the sockets,
/// detaches the XDP program and lets the claimed ports go ([`PortHolds`]).
pub struct Dataplane {
    iface: InterfaceInfo,
    /// The sysfs root it read the interface from.
    sysfs: PathBuf,
    /// The named network namespace the data path started in, if any.
    netns: Option<String>,
    /// [`DataplaneConfig::sized_by_mtu`].
    sized_by_mtu: bool,
    /// What [`Dataplane::check`] last said of the interface's state and
    /// address.
    noticed: crate::iface_watch::Noticed,
    workers: Vec<WorkerHandle>,
    stop: Arc<AtomicBool>,
    /// The addresses the ports are claimed on.
    local: (LocalAddress<Ipv4Addr>, LocalAddress<Ipv6Addr>),
    steering: Steering,
    /// Dropped after the program is detached: the kernel has the ports
    /// back only once flowlane no longer takes their frames.
    holds: PortHolds,
    /// flowlane's ephemeral range (inclusive), if its own connections use one.
    ephemeral: Option<(u16, u16)>,
}

impl std::fmt::Debug for Dataplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataplane")
            .field("iface", &self.iface.name)
            .field("queues", &self.workers.len())
            .finish()
    }
}

impl Dataplane {
    /// Attaches to the interface and starts one worker per queue. `factory`
    /// builds each queue's handler on the queue's own core; if it fails (or
    /// panics) for any queue, everything started is stopped and released
    /// (workers joined, sockets closed, the XDP program detached) and that
    /// error is returned ([`Error::Handler`]). Returns once every worker has
    /// filled its rings and is polling; the listening ports
    /// ([`DataplaneConfig::ports`]) are steered to flowlane then, last,
    /// after being held against the kernel's use from the start
    /// ([`PortHolds`]: a port a kernel socket uses refuses the start).
    pub fn start<H, E, F>(config: DataplaneConfig, factory: F) -> Result<Dataplane>
    where
        H: QueueHandler + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
        F: Fn(&QueueInfo) -> std::result::Result<H, E> + Send + Sync + 'static,
    {
        let iface = InterfaceInfo::read(&config.sysfs, &config.ifname)?;
        // Before libbpf's load, whose EPERM names no capability (a program
        // on the library, or `flowlane-ttcp` without `--bed`, has not
        // checked them as the `flowlane` commands do).
        let what = format!("flowlane's data path on {}", iface.name);
        crate::privileges::require_capabilities(&what, crate::privileges::DATA_PATH)?;
        crate::privileges::require_descriptors(&what, config.queues.len() + config.spill.len())?;
        if config.queues.is_empty() {
            return Err(Error::Setup("no queues to serve".into()));
        }
        let mut seen = BTreeSet::new();
        for q in &config.queues {
            iface.check_queues(q.queue + 1)?;
            if !seen.insert(q.queue) {
                return Err(Error::Setup(format!("queue {} is listed twice", q.queue)));
            }
        }
        check_unserved_queues(
            &iface.name,
            iface.rx_queues,
            &seen,
            config.nic_table.as_deref(),
        )?;
        for w in &config.spill {
            if !seen.insert(w.queue) {
                return Err(Error::Setup(format!(
                    "worker {} without a queue has the index of another worker",
                    w.queue
                )));
            }
        }
        // Another process's XDP program makes the interface busy: say whose
        // (before libbpf tries and prints its own line).
        if let Some(holder) = iface::xdp_holder(iface.ifindex) {
            return Err(busy(&iface.name, &holder));
        }
        // The listening ports, held against the kernel's use before
        // anything is attached: one a kernel socket uses refuses the start
        // here, with nothing to undo.
        let mut holds = PortHolds::default();
        for &(proto, port) in &config.ports {
            holds.hold(proto, port, config.local_v4, config.local_v6, iface.ifindex)?;
        }
        let steering = Steering::attach(iface.ifindex).map_err(|e| {
            match iface::xdp_holder(iface.ifindex) {
                Some(holder) => busy(&iface.name, &holder),
                // Drivers take a program without multi-buffer support
                // (flowlane's frames are one buffer each) only while a
                // frame fits a page: veth refuses it with ERANGE past an
                // MTU of 3,506, mlx5 and ice past about 3,498.
                None if iface.mtu > ETHERNET_MTU => Error::Steering {
                    what: format!(
                        "attaching the steering XDP program to {} failed with its MTU at {}, \
                         more than XDP takes without multi-buffer frames: lower it (ip link \
                         set dev {} mtu {ETHERNET_MTU}: flowlane's TCP sends no larger frames) \
                         and start again",
                        iface.name, iface.mtu, iface.name
                    ),
                    source: e,
                },
                None => Error::Steering {
                    what: format!("attaching the steering XDP program to {}", iface.name),
                    source: e,
                },
            }
        })?;
        // The addresses and the ephemeral range before the listening
        // ports: a port claimed first would, for a moment, be claimed on
        // every address.
        steering
            .set_local_addresses(config.local_v4, config.local_v6)
            .map_err(|source| Error::Steering {
                what: "steering only flowlane's addresses to it".into(),
                source,
            })?;
        if let Some((lo, hi)) = config.ephemeral {
            // Replies to a port the kernel chose for its own connection
            // would reach flowlane, which knows no such connection and
            // resets it.
            let reserved = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_reserved_ports")
                .unwrap_or_default();
            if !crate::ephemeral::reserved_covers(&reserved, lo, hi) {
                return Err(Error::Setup(format!(
                    "flowlane's own connections use local ports {lo}-{hi}, which the kernel \
                     may also pick for its own (their replies would reach flowlane, which \
                     would reset them): add {lo}-{hi} to net.ipv4.ip_local_reserved_ports \
                     (sysctl) in this network namespace and start again (the test bed does)"
                )));
            }
            steering
                .set_ephemeral_range(lo, hi)
                .map_err(|source| Error::Steering {
                    what: format!("steering the ephemeral ports {lo}-{hi} to flowlane"),
                    source,
                })?;
        }
        // The listening ports are claimed last, once every worker is ready
        // (below): until then their frames are the kernel's, as before the
        // service ran, instead of dropped for want of a socket or of fill
        // buffers while the UMEM is made and the sockets bound.

        // One UMEM per node, shared by that node's queues.
        let mut by_node: BTreeMap<u32, Vec<QueueAssignment>> = BTreeMap::new();
        for q in &config.queues {
            by_node.entry(q.node).or_default().push(*q);
        }
        let mut sockets = Vec::new();
        for (node, queues) in &by_node {
            let cpus = config.node_cpus.get(node).cloned().unwrap_or_default();
            let mem = umem::create_on_node(*node, &cpus, queues.len(), config.rings)?;
            for (assignment, frames) in queues.iter().zip(mem.pools) {
                let sock = QueueSocket::bind(
                    &config.ifname,
                    assignment.queue,
                    &mem.umem,
                    mem.len,
                    frames,
                    config.rings,
                    config.bind_mode,
                )?;
                steering
                    .set_socket(assignment.queue, sock.fd())
                    .map_err(|source| Error::Steering {
                        what: format!("registering queue {}'s socket", assignment.queue),
                        source,
                    })?;
                sockets.push((*assignment, sock));
            }
        }

        let stop = Arc::new(AtomicBool::new(false));
        let factory = Arc::new(factory);
        let epoch = Instant::now();
        let loop_cfg = LoopConfig {
            busy_poll: config.busy_poll,
            // Replies and ACKs need few frames at a time (TX frames come
            // back within the pass, see `worker`); the rest feed the fill ring.
            tx_reserve: (config.rings.frames_per_queue as usize / 4).min(TX_RESERVE_MAX),
            held_frames: if config.zero_copy_receive {
                config.rings.frames_per_queue as usize / HELD_FRACTION
            } else {
                0
            },
        };
        let (ready_tx, ready_rx) = crossbeam_channel::unbounded::<Result<()>>();
        let mut workers = Vec::new();
        let spill = config.spill.iter().map(|a| (*a, None));
        for (a, sock) in sockets.into_iter().map(|(a, s)| (a, Some(s))).chain(spill) {
            let info = QueueInfo {
                queue: a.queue,
                cpu: a.cpu,
                node: a.node,
                zero_copy: sock.as_ref().is_some_and(|s| s.zero_copy),
                rx_frames: config
                    .rings
                    .frames_per_queue
                    .saturating_sub(loop_cfg.tx_reserve as u32),
            };
            let counters = Arc::new(QueueCounters::default());
            let failed = Arc::new(AtomicI32::new(0));
            let loop_panicked = Arc::new(AtomicBool::new(false));
            let passes = Arc::new(AtomicU64::new(0));
            let (stop2, counters2, factory2, ready, failed2, panicked2, passes2) = (
                stop.clone(),
                counters.clone(),
                factory.clone(),
                ready_tx.clone(),
                failed.clone(),
                loop_panicked.clone(),
                passes.clone(),
            );
            let thread = std::thread::Builder::new()
                // Workers without a queue too: tools account CPU time by
                // this prefix.
                .name(crate::cpu_time::worker_thread_name(a.queue))
                .spawn(move || {
                    if let Some(cpu) = info.cpu {
                        if let Err(e) = affinity::pin_current_thread(&[cpu]) {
                            let _ = ready.send(Err(Error::Setup(format!(
                                "pinning queue {} to CPU {cpu}: {e}",
                                info.queue
                            ))));
                            return;
                        }
                    }
                    // A set-up that panics fails the start as one that
                    // returns an error does (the other workers would wait
                    // for this one's word for good otherwise).
                    let made =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory2(&info)));
                    let handler = match made {
                        Ok(Ok(h)) => h,
                        Ok(Err(e)) => {
                            let _ = ready.send(Err(Error::Handler {
                                queue: info.queue,
                                source: e.into(),
                            }));
                            return;
                        }
                        Err(panic) => {
                            let _ = ready.send(Err(Error::Handler {
                                queue: info.queue,
                                source: panicked(panic.as_ref()).into(),
                            }));
                            return;
                        }
                    };
                    let ctl = worker::Control {
                        stop: stop2,
                        failed: failed2,
                        panicked: panicked2,
                        passes: passes2,
                    };
                    // Said once the rings are filled; the sender goes with
                    // it, so a worker that dies before has none left and
                    // the start hears of it (a closed channel).
                    let ready = move || {
                        let _ = ready.send(Ok(()));
                    };
                    match sock {
                        Some(sock) => {
                            worker::run(sock, info, handler, loop_cfg, ctl, counters2, epoch, ready)
                        }
                        None => {
                            worker::run_spill(info, handler, loop_cfg, ctl, counters2, epoch, ready)
                        }
                    }
                });
            let thread = match thread {
                Ok(t) => t,
                Err(source) => {
                    // The workers already running stop before the error
                    // goes back: none is left behind, polling its socket.
                    let _ = stop_workers(&stop, &mut workers);
                    return Err(Error::Io {
                        what: "spawning a worker".into(),
                        source,
                    });
                }
            };
            workers.push(WorkerHandle {
                info,
                counters,
                failed,
                panicked: loop_panicked,
                passes,
                thread: Some(thread),
            });
        }
        drop(ready_tx);
        let dp = Dataplane {
            iface,
            sysfs: config.sysfs,
            netns: iface::netns_name(),
            sized_by_mtu: config.sized_by_mtu,
            noticed: Default::default(),
            workers,
            stop,
            local: (config.local_v4, config.local_v6),
            steering,
            holds,
            ephemeral: config.ephemeral,
        };
        // Returning an error drops `dp`: the workers stop and are joined,
        // the sockets closed and the XDP program detached.
        for _ in 0..dp.workers.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(Error::Setup(
                        "a worker thread died while starting (see the panic message above); \
                         the data path was stopped and released"
                            .into(),
                    ))
                }
            }
        }
        for &(proto, port) in &config.ports {
            dp.steering
                .add_port(proto, port)
                .map_err(|source| Error::Steering {
                    what: format!("steering {proto:?} port {port} to flowlane"),
                    source,
                })?;
        }
        Ok(dp)
    }

    /// The interface served.
    pub fn interface(&self) -> &InterfaceInfo {
        &self.iface
    }

    /// The interface's own counters now (see [`crate::InterfaceStats`]).
    ///
    /// # Errors
    /// When sysfs cannot be read.
    pub fn interface_stats(&self) -> Result<crate::iface::InterfaceStats> {
        crate::iface::InterfaceStats::read(&self.sysfs, &self.iface.name)
    }

    /// The queues served, with where they run.
    pub fn queues(&self) -> Vec<QueueInfo> {
        self.workers.iter().map(|w| w.info).collect()
    }

    /// Counters of every served queue.
    pub fn counters(&self) -> Vec<(QueueInfo, QueueCountersSnapshot)> {
        self.workers
            .iter()
            .map(|w| (w.info, w.counters.snapshot()))
            .collect()
    }

    /// The XDP program's counters for `queue`.
    pub fn steering_stats(&self, queue: u32) -> Result<SteerStats> {
        self.steering
            .stats(queue)
            .map_err(|source| Error::Steering {
                what: format!("reading queue {queue}'s steering counters"),
                source,
            })
    }

    /// The XDP program's counters of every receive queue of the
    /// interface, by queue: the served ones and the others (flowlane's
    /// frames that reach a queue without a socket are dropped there,
    /// counted `no_socket`), up to the program's limit of queues. A queue
    /// whose counters cannot be read is left out.
    pub fn steering_counters(&self) -> Vec<(u32, SteerStats)> {
        let queues = self.iface.rx_queues.min(flowlane_ebpf::limits::MAX_QUEUES);
        (0..queues)
            .filter_map(|q| Some((q, self.steering.stats(q).ok()?)))
            .collect()
    }

    /// Whether the steering program gives flowlane the frames to `port`
    /// for `proto` on the data path's addresses: a port it claimed (its
    /// listening ports), or one of its ephemeral range (its own
    /// connections' local ports, either protocol, as the program takes them).
    pub fn takes_port(&self, proto: Proto, port: u16) -> bool {
        self.ephemeral
            .is_some_and(|(lo, hi)| (lo..=hi).contains(&port))
            || self.holds.sockets.iter().any(|(p, _)| *p == (proto, port))
    }

    /// Claims one more port for flowlane while it runs, through the
    /// start's checks: held against the kernel's use on the claimed
    /// addresses first ([`PortHolds`]: one a kernel socket uses is
    /// refused, and nothing is claimed), then steered to flowlane. A port
    /// stays claimed until the data path stops: there is no release.
    ///
    /// # Errors
    /// [`PortHolds::hold`]'s, or the steering program's map refusing it
    /// (the port is then let go).
    pub fn claim_port(&mut self, proto: Proto, port: u16) -> Result<()> {
        let (v4, v6) = self.local;
        let new = !self.holds.sockets.iter().any(|(p, _)| *p == (proto, port));
        self.holds.hold(proto, port, v4, v6, self.iface.ifindex)?;
        self.steering.add_port(proto, port).map_err(|source| {
            if new {
                self.holds.let_go(proto, port);
            }
            Error::Steering {
                what: format!("steering {proto:?} port {port} to flowlane"),
                source,
            }
        })
    }

    /// Whether everything the data path attached to is still there: the
    /// interface (same index), the named network namespace it started in
    /// (`/run/netns/<name>`), the XDP program (this process's link on the
    /// interface) and every queue's socket and worker; and that the
    /// interface can still be served as it was at the start: no more
    /// receive queues (`ethtool -L`: the new ones would have no socket),
    /// no smaller MTU where the handlers sized their frames by it
    /// ([`DataplaneConfig::sized_by_mtu`]). Not on the packet
    /// path: a few system calls, meant for the service's main thread a few
    /// times a second. On `Err` the service should log the line, drop the
    /// data path (releasing everything) and exit non-zero. A queue whose
    /// handler panicked is one such `Err`: it failed closed (its
    /// connections reset, every new one reset too) while the other queues
    /// serve on. What it serves on through is logged once as it happens
    /// (a warning): the interface down or up again, flowlane's IPv4
    /// address removed or back.
    pub fn check(&self) -> std::result::Result<(), Vanished> {
        let name = &self.iface.name;
        self.interface_still_there()?;
        if let Some(ns) = &self.netns {
            if !iface::netns_still_named(ns) {
                return Err(Vanished(format!(
                    "network namespace {ns} of interface {name} was removed (was its test bed \
                     removed?); restart the service once it is back"
                )));
            }
        }
        // More receive queues than at the start (`ethtool -L`): the NIC
        // spreads flowlane's frames over queues no socket serves, where the
        // program drops them (the start refuses such a NIC, and the kernel
        // refuses fewer queues while the sockets are bound).
        let dir = self.sysfs.join("class/net").join(name);
        if let Ok(now) = iface::count_queues(&dir, "rx-") {
            let was = self.iface.rx_queues;
            if now > was {
                return Err(Vanished(format!(
                    "{name} has {now} receive queues now, {was} when the service started: \
                     flowlane's frames the NIC steers to the new ones are lost (no socket \
                     serves them); restart the service, or set the channels back to {was} \
                     (ethtool -L {name})"
                )));
            }
        }
        if self.sized_by_mtu {
            let started = self.iface.mtu;
            match iface::current_mtu(&self.sysfs, name) {
                Some(now) if now < started => {
                    return Err(Vanished(format!(
                        "the MTU of {name} fell from {started} to {now} while serving: the \
                         connections' segments were sized for {started} and would be dropped; \
                         restart the service (it sizes them by the MTU it starts with)"
                    )))
                }
                _ => {}
            }
        }
        if !iface::xdp_links(std::process::id()).contains(&self.iface.ifindex) {
            // Deleting the interface detaches the program too: if it went
            // between the first look and this one, say so, not "detached".
            self.interface_still_there()?;
            return Err(Vanished(format!(
                "the XDP program on {name} was detached; restart the service"
            )));
        }
        for w in &self.workers {
            let errno = w.failed.load(Ordering::Relaxed);
            if errno != 0 {
                return Err(Vanished(format!(
                    "the AF_XDP socket of {name} queue {} failed ({}); restart the service",
                    w.info.queue,
                    std::io::Error::from_raw_os_error(errno)
                )));
            }
            if w.thread.as_ref().is_some_and(|t| t.is_finished()) {
                return Err(Vanished(format!(
                    "the worker of {name} queue {} stopped; restart the service",
                    w.info.queue
                )));
            }
            if w.panicked.load(Ordering::Relaxed) {
                return Err(Vanished(format!(
                    "the handler of {name} queue {} panicked (the panic message above says \
                     where): the queue reset its connections and resets every new one; \
                     restart the service",
                    w.info.queue
                )));
            }
        }
        // What it serves on through, said once as it happens.
        let v4 = match self.local.0 {
            LocalAddress::Only(ip) => Some(IpAddr::V4(ip)),
            _ => None,
        };
        let v6 = match self.local.1 {
            LocalAddress::Only(ip) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        self.noticed.look(&self.sysfs, name, [v4, v6]);
        Ok(())
    }

    /// The queues whose worker failed: its loop panicked (the queue failed
    /// closed, see [`crate::QueueHandler::fail_closed`]: its connections
    /// were reset, and it resets every connection the NIC steers to it
    /// until the data path stops), it gave its socket up, or its thread
    /// ended. No system call: a few atomic loads per queue, for any
    /// thread as often as it likes; [`Dataplane::check`] says what
    /// happened, in words, and also watches the interface, namespace and
    /// XDP program.
    pub fn failed_queues(&self) -> Vec<u32> {
        self.workers
            .iter()
            .filter(|w| {
                w.panicked.load(Ordering::Relaxed)
                    || w.failed.load(Ordering::Relaxed) != 0
                    || w.thread.as_ref().is_some_and(|t| t.is_finished())
            })
            .map(|w| w.info.queue)
            .collect()
    }

    /// Whether a queue's worker failed ([`Dataplane::failed_queues`] is
    /// not empty).
    pub fn failed(&self) -> bool {
        !self.failed_queues().is_empty()
    }

    /// `Err` if the interface is gone or another of its name replaced it.
    fn interface_still_there(&self) -> std::result::Result<(), Vanished> {
        let name = &self.iface.name;
        match iface::current_ifindex(name) {
            Some(i) if i == self.iface.ifindex => Ok(()),
            Some(_) => Err(Vanished(format!(
                "interface {name} was removed and replaced by another of the same name \
                 (was its test bed rebuilt?); restart the service"
            ))),
            None => Err(Vanished(
                match iface::name_of_index(&self.sysfs, self.iface.ifindex) {
                    Some(now) => format!(
                        "interface {name} was renamed {now}; restart the service on {now}, or \
                         give the interface its name back (ip link set dev {now} name {name})"
                    ),
                    None => format!(
                        "interface {name} vanished (was its test bed removed?); restart the \
                         service once it is back"
                    ),
                },
            )),
        }
    }

    /// Stops the workers and waits for them. Each, told to stop, lets its
    /// handler let go of what it holds before its socket closes
    /// ([`QueueHandler::on_stop`]: a TCP handler resets its connections).
    /// Returns what went wrong while they ran, by queue
    /// ([`Worker::Core`]): a worker whose loop panicked
    /// ([`StopErrorKind::Panicked`](flowlane_app::StopErrorKind::Panicked):
    /// its queue failed closed, or its thread ended; the panic's words
    /// where its thread ended with them, else they are in the log), one
    /// that gave its socket up
    /// ([`StopErrorKind::Failed`](flowlane_app::StopErrorKind::Failed),
    /// the OS error its source).
    pub fn stop(mut self) -> std::result::Result<(), StopError> {
        StopError::collect(self.shutdown())
    }

    fn shutdown(&mut self) -> Vec<StopError> {
        // The kernel answers new SYNs from here (an RST: it has no socket
        // for them), where in the workers' last passes and until the
        // program is detached they would wait on sockets no one reads
        // (the rolling-restart run: ~3 % of connects in a stop's last
        // 100 ms unanswered, their clients' SYNs retransmitted a second
        // later). What still comes for the connections the workers reset
        // is reset by the kernel too.
        // The SYNs already on the workers' RX rings are answered by a pass
        // that begins after the release: each worker is waited for until
        // it has made one whole (an idle worker's poll wakes on a frame,
        // and at least every 10 ms). A fixed wait did not do: on a loaded
        // machine a worker may not run for tens of milliseconds (one
        // connect in 27,762 of the check's CI run went unanswered after a
        // 20 ms wait).
        match self.steering.release_ports() {
            Ok(()) => wait_for_a_pass(&self.workers),
            Err(e) => {
                tracing::warn!(error = %e, "giving flowlane's ports back to the kernel at the stop")
            }
        }
        stop_workers(&self.stop, &mut self.workers)
    }
}

/// Waits until each running worker has made a whole pass that began
/// after the call (and after [`RELEASE_SETTLE`], for the frames the
/// steering program redirected with what it read before the release to
/// land on the rings), at most [`RELEASE_WAIT`].
fn wait_for_a_pass(workers: &[WorkerHandle]) {
    let running = |w: &WorkerHandle| w.thread.as_ref().is_some_and(|t| !t.is_finished());
    if !workers.iter().any(running) {
        return;
    }
    std::thread::sleep(RELEASE_SETTLE);
    // A pass counted `n` may have begun before the settle's end: `n + 1`
    // began after it, and is whole once `n + 2` begins.
    let marks: Vec<u64> = workers
        .iter()
        .map(|w| w.passes.load(Ordering::Acquire) + 2)
        .collect();
    let deadline = Instant::now() + RELEASE_WAIT;
    while workers
        .iter()
        .zip(&marks)
        .any(|(w, &m)| running(w) && w.passes.load(Ordering::Acquire) < m)
    {
        if Instant::now() >= deadline {
            tracing::warn!(
                waited_ms = RELEASE_WAIT.as_millis() as u64,
                "a worker made no pass since the ports were given back; the SYNs on its ring \
                 go unanswered"
            );
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The error of a queue's set-up that panicked with `payload` (its
/// message's first line): a start error of kind
/// [`Worker`](flowlane_app::StartErrorKind::Worker), as on the other
/// backends, which [`Error::Handler`] names the queue of.
pub(crate) fn panicked(payload: &(dyn std::any::Any + Send)) -> StartError {
    let msg = worker::panic_message(payload);
    StartError::worker(format!(
        "the handler's set-up panicked ({}); nothing was left running: fix the set-up \
         (the panic message above says where)",
        msg.lines().next().unwrap_or_default()
    ))
}

/// How long a stop waits, once the ports are the kernel's again, before
/// it counts the workers' passes: the steering program's runs that read
/// the ports before the release end within their softirq, far shorter.
const RELEASE_SETTLE: std::time::Duration = std::time::Duration::from_millis(2);

/// The longest a stop waits for a worker's pass after the release (a
/// worker that makes none is stuck; the stop goes on without it).
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Tells the workers to stop and waits for each; returns what went wrong
/// while they ran ([`Dataplane::stop`]).
fn stop_workers(stop: &AtomicBool, workers: &mut [WorkerHandle]) -> Vec<StopError> {
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for w in workers {
        let q = w.info.queue;
        let Some(t) = w.thread.take() else { continue };
        if let Err(panic) = t.join() {
            tracing::error!(queue = q, "worker panicked");
            let words = StopError::panic_words(panic.as_ref());
            failures.push(StopError::panicked(Worker::Core(q), words));
        } else if w.panicked.load(Ordering::Relaxed) {
            // Caught: the queue failed closed, its words logged then.
            failures.push(StopError::panicked(Worker::Core(q), IN_THE_LOG));
        } else {
            let errno = w.failed.load(Ordering::Relaxed);
            if errno != 0 {
                failures.push(StopError::failed(
                    Worker::Core(q),
                    format!("queue {q}: its AF_XDP socket failed, the queue stopped serving"),
                    std::io::Error::from_raw_os_error(errno),
                ));
            }
        }
    }
    failures
}

/// The panic's words of a worker whose queue failed closed: the worker
/// logged them as it caught the panic.
pub(crate) const IN_THE_LOG: &str = "(its words are in the service's log, logged as the queue \
                                     failed closed)";

/// Refuses to serve only some of `ifname`'s `rx_queues` receive queues
/// (those in `served`) unless the NIC's indirection `table` is known and
/// names served queues only: the XDP program drops flowlane's frames that
/// reach a queue without a socket (and passes to the kernel, which resets
/// the connection, those on a queue past the XSKMAP).
pub(crate) fn check_unserved_queues(
    ifname: &str,
    rx_queues: u32,
    served: &BTreeSet<u32>,
    table: Option<&[u32]>,
) -> Result<()> {
    if (0..rx_queues).all(|q| served.contains(&q)) {
        return Ok(());
    }
    let why = match table {
        None => "its RSS indirection table is unknown (not read from the NIC, nor given in \
             TcpServiceConfig::rss)"
            .to_string(),
        Some(t) => match t.iter().enumerate().find(|(_, q)| !served.contains(q)) {
            None => return Ok(()),
            Some((bucket, q)) => format!("its RSS table sends bucket {bucket} to queue {q}"),
        },
    };
    let n = served.len();
    // The served queues as `--queues N` makes them: 0..N.
    let first_n = served.iter().copied().eq(0..n as u32);
    let point = if first_n {
        let list: Vec<String> = (0..n).map(|q| q.to_string()).collect();
        format!(
            "reduce its channels to {n} (ethtool -L {ifname} combined {n}), or point its table \
             at queues {} only (flowlane nic set-rss --iface {ifname} --equal {n}; on a test \
             bed: flowlane testbed set-rss --bed NAME --spread {})",
            list.join(","),
            list.join(",")
        )
    } else {
        "or point its table at the served queues only (flowlane nic set-rss)".to_string()
    };
    Err(Error::Setup(format!(
        "serving {n} of {ifname}'s {rx_queues} receive queues, but {why}: flowlane's frames \
         on the others would be lost; set TcpServiceConfig::queues to {rx_queues}, {point}"
    )))
}

/// Ethernet's MTU: the largest flowlane's TCP uses (its MSS, 1460, is this
/// less the IPv4 and TCP headers).
const ETHERNET_MTU: u32 = 1500;

/// The error for an interface whose XDP hook `holder` holds.
fn busy(ifname: &str, holder: &iface::Process) -> Error {
    Error::Setup(format!(
        "{ifname} is busy: {holder} has its XDP program attached; stop that process \
         (kill {}) or serve another interface",
        holder.pid
    ))
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port a kernel socket holds is the OS's refusal, kept as the
    /// cause (`Error::Io`: a start error of kind `Os` whose `io_error` is
    /// `AddrInUse`, as on the kernel-socket backend), the line saying what
    /// to do. Before, a `Setup` string: no `io::Error` to match.
    #[test]
    fn a_port_in_use_is_the_os_s_address_in_use() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        match hold_one(Proto::Tcp, addr) {
            Err(Error::Io { what, source }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse, "{what}");
                assert!(
                    what.starts_with(&format!(
                        "port {}/tcp is in use by a kernel socket",
                        addr.port()
                    )),
                    "{what}"
                );
            }
            other => panic!("{other:?}"),
        }
        let start = crate::tcp_service::start_error(hold_one(Proto::Tcp, addr).unwrap_err());
        assert_eq!(start.kind(), flowlane_app::StartErrorKind::Os, "{start}");
        assert_eq!(
            start.io_error().map(|e| e.kind()),
            Some(std::io::ErrorKind::AddrInUse),
            "{start}"
        );
        drop(taken);
        assert!(hold_one(Proto::Tcp, addr).unwrap().is_some());
    }

    fn served(n: u32) -> BTreeSet<u32> {
        (0..n).collect()
    }

    #[test]
    fn every_queue_served_needs_no_table() {
        assert!(check_unserved_queues("xsk0", 4, &served(4), None).is_ok());
        assert!(check_unserved_queues("xsk0", 4, &served(4), Some(&[0, 1, 2, 3])).is_ok());
    }

    #[test]
    fn fewer_queues_need_the_table_on_them() {
        // A table over the served queues only: the NIC sends nothing
        // elsewhere.
        assert!(check_unserved_queues("xsk0", 4, &served(2), Some(&[0, 1, 1, 0])).is_ok());
        let e = check_unserved_queues("xsk0", 4, &served(2), None)
            .unwrap_err()
            .to_string();
        for needle in [
            "serving 2 of xsk0's 4 receive queues",
            "unknown",
            "set TcpServiceConfig::queues to 4",
            "ethtool -L xsk0 combined 2",
            "flowlane nic set-rss --iface xsk0 --equal 2",
            "--spread 0,1",
        ] {
            assert!(e.contains(needle), "{needle:?} in {e}");
        }
        assert_eq!(e.lines().count(), 1, "{e}");
        let e = check_unserved_queues("xsk0", 4, &served(2), Some(&[0, 1, 2, 3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bucket 2 to queue 2"), "{e}");
        // Other queues than the first ones.
        let e = check_unserved_queues("xsk0", 4, &[1, 3].into(), Some(&[1, 3, 0]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bucket 2 to queue 0"), "{e}");
        assert!(e.contains("point its table at the served queues"), "{e}");
    }
}
