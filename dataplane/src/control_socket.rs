//! A running TCP service's control socket: a Unix stream socket (mode 0600,
//! by default `/run/flowlane/SERVICE.PID.sock`) on which `flowlane
//! rebalance status|move` asks the service for its queues' load and moves
//! RSS buckets by hand.
//!
//! The protocol is one JSON line each way per connection: a [`Request`]
//! in, a [`Response`] out, then the service closes the connection. The
//! service answers from its main thread ([`ControlSocket::poll`], never
//! blocking on a client): every client that connects is taken, however
//! many arrive together (the daemon's hints and its scrape); a request
//! longer than [`MAX_REQUEST`] bytes is refused; a client that has not
//! sent a whole request within [`CLIENT_DEADLINE`] is dropped, and past
//! [`MAX_CLIENTS`] such clients a newcomer takes the place of the one that
//! sent nothing longest; an answer is queued and written as the client
//! takes it, over the next polls (each waits [`WRITE_WAIT`] at most),
//! and a client that has not taken it whole within [`ANSWER_DEADLINE`] is
//! dropped; the answers queued are bounded ([`ANSWER_MEMORY`]). Clients
//! dropped are counted ([`ControlSocket::clients_dropped`]). So a stuck,
//! slow or hostile local client (many connections that send nothing, or
//! read nothing) neither stalls the service nor exhausts its memory, and
//! holds back others for a deadline at most. The client side
//! ([`request`], and the daemon asking many at once with [`AnswerReader`])
//! is bounded the same way against a stuck or hostile service: the whole
//! exchange within its deadline, an answer of at most [`MAX_ANSWER`] bytes.
//!
//! Who may connect: the socket's owner (the user the service runs as) and
//! root, its mode 0600 from its bind(2) on ([`ControlSocket::bind`]); the
//! directories made for it are 0755, so that only their owner may put or
//! remove a socket there, and anyone may see which services run (a reader
//! without their privileges is told why it cannot connect,
//! [`refused_line`]).

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::bucket_counters::BucketSnapshot;
use crate::handoff::MoveReport;
use crate::{Error, Result};

/// Where services put their control sockets unless told otherwise.
pub const RUN_DIR: &str = "/run/flowlane";

/// Where `flowlane daemon` listens unless told otherwise: a directory of
/// its own, so that [`RUN_DIR`] holds only services (`flowlane rebalance
/// status` picks the only one there). A service registers there
/// ([`register_with_daemon`]) when a daemon runs.
pub const DAEMON_SOCKET: &str = "/run/flowlane-daemon/daemon.sock";

/// At most this many clients are held whose request is not whole yet, and
/// at most as many being answered; one more of either takes the place of
/// the one that made no progress longest (sent nothing, or took nothing),
/// which is dropped and counted. Clients whose request is whole never make
/// room, so that many arriving together are all answered.
pub const MAX_CLIENTS: usize = 64;

/// The longest request line accepted, in bytes.
pub const MAX_REQUEST: usize = 4096;

/// A client that has not sent a whole request by then is dropped.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(1);

/// A client that has not taken its whole answer by then (from when it was
/// queued) is dropped and counted: a local client reads a 15 MB answer in
/// milliseconds.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(5);

/// The answers queued at once, in bytes, at most (past it, with more than
/// one queued, the one whose client took nothing longest is dropped and
/// counted): four of the largest `status` answers.
pub const ANSWER_MEMORY: usize = 64 << 20;

/// The longest one poll waits for clients to take their answers: a client
/// reading as fast as a local socket goes takes megabytes in that time, so
/// that a large answer needs no more polls; one reading slowly costs each
/// poll this, no more.
pub const WRITE_WAIT: Duration = Duration::from_millis(2);

/// Connections accepted per poll at most; more wait in the listener's
/// backlog for the next poll.
const ACCEPTS_PER_POLL: usize = 2 * MAX_CLIENTS;

/// The longest answer a client reads, in bytes; a service that sends more
/// is not answering. The largest answer measured, a `status` of 1,024
/// queues sharing a 65,536-entry table (the largest RSS table,
/// `IndirectionTable::MAX_SIZE`) with 64 moves kept and every figure at
/// its longest, is 14.6 MB; a `counters` of 1,024 queues is 4.6 MB.
pub const MAX_ANSWER: usize = 32 << 20;

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// The service's queues, buckets, table and moves so far.
    Status,
    /// Every counter of every queue, and the moves so far (what a metrics
    /// exporter reads at each scrape).
    Counters,
    /// Which queue, CPU and NUMA node process a flow now.
    Hint {
        /// The flow as it arrives: the peer's address and port, then ours.
        flow: FlowQuery,
    },
    /// The NICs the daemon owns: their capabilities, the plan explained,
    /// and what the daemon changed (asked of `flowlane daemon`'s socket).
    Host,
    /// To the daemon: a service announces its control socket, so that the
    /// daemon reads it wherever it is (not only in its run directory).
    Register {
        /// The service's control socket (absolute).
        socket: PathBuf,
        /// The command serving.
        service: String,
        /// Its process id.
        pid: u32,
    },
    /// Move `bucket` to queue `to_queue` with its live connections.
    Move {
        /// The RSS bucket (indirection-table entry).
        bucket: u16,
        /// The queue to serve it from now on.
        to_queue: u32,
    },
}

/// What the service answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Response {
    /// The answer to [`Request::Status`] (boxed: the largest answer by far,
    /// as [`Response::Counters`]).
    Status(Box<ServiceStatus>),
    /// The answer to [`Request::Counters`].
    Counters(Box<ServiceCounters>),
    /// The answer to [`Request::Hint`].
    Hint(FlowAnswer),
    /// The answer to [`Request::Host`].
    Host(HostStatus),
    /// The daemon took a [`Request::Register`].
    Registered,
    /// The move asked for was done.
    Moved(MoveReport),
    /// The request was refused or failed.
    Error {
        /// What is wrong, in the user's terms.
        message: String,
    },
}

/// The NICs `flowlane daemon` owns.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostStatus {
    /// One report per `--iface`.
    pub nics: Vec<NicReport>,
    /// The control sockets of the services the daemon reads (its run
    /// directory's and those registered), live ones only.
    #[serde(default)]
    pub services: Vec<PathBuf>,
}

/// One NIC as the daemon found it and what it did to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicReport {
    /// What the NIC can do.
    pub caps: flowlane_numa_sched::NicCaps,
    /// Workers the plan is for (one per receive queue).
    pub workers: u32,
    /// The plan, part by part: hardware, kernel or flowlane, and why.
    pub plan: Vec<flowlane_numa_sched::PlanPart>,
    /// Whether the daemon only reported (`--dry-run`).
    pub dry_run: bool,
    /// What the daemon changed (or, dry, would change), a line each: only
    /// effects (the last ones, when planned again often).
    pub changes: Vec<String>,
    /// How many changes the daemon made (or, dry, would make) since it
    /// started, all of them: `changes` keeps the last ones only.
    #[serde(default)]
    pub changes_total: u64,
    /// What the daemon noticed or left alone, a line each (the NIC planned
    /// again and why, left as it is and why, unreadable for a while).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Whether the changes are undone when the daemon stops.
    pub restore_on_exit: bool,
}

/// One NIC queue's own counters (netdev `qstats-get`), those the driver
/// keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicQueueStats {
    /// Queue index.
    pub queue: u32,
    /// A receive queue (else transmit).
    pub rx: bool,
    /// Packets.
    pub packets: Option<u64>,
    /// Bytes.
    pub bytes: Option<u64>,
    /// Receive buffers the driver could not allocate.
    pub alloc_fail: Option<u64>,
    /// Packets the device dropped.
    pub hw_drops: Option<u64>,
}

/// A service's state, as `flowlane rebalance status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceStatus {
    /// The command serving (e.g. `bulk-sink`).
    pub service: String,
    /// Its process id.
    pub pid: u32,
    /// Nanoseconds since the service started.
    pub uptime_ns: u64,
    /// The backend serving: `xdp` (AF_XDP) or `kernel` (kernel sockets).
    #[serde(default = "xdp")]
    pub backend: String,
    /// The interface served (`*`: every interface, as kernel sockets
    /// listen).
    pub iface: String,
    /// The rebalancing loop: `off`, `auto` or `storm`.
    pub rebalance: String,
    /// Why the loop is off although no flag turned it off (one queue, the
    /// NIC's RSS unknown, software spill, moves that kept failing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance_off_because: Option<String>,
    /// The indirection table as the service last wrote it (queue per
    /// bucket); empty when buckets cannot move (one queue, or the NIC's
    /// RSS unknown).
    pub table: Vec<u32>,
    /// Each queue's load so far.
    pub queues: Vec<QueueStatus>,
    /// Moves since the service started.
    pub moves: MoveHistory,
    /// The service is stopping: its listeners closed, its connections
    /// finishing in the stop's drain (2 s at most), before it exits and
    /// its control socket goes. False from a service of an older version.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
    /// What its rebalancing loop prices a move at now, as learned from
    /// the moves made (the counters' [`ServiceCounters::move_cost`]); None
    /// where no loop runs, and from a service of an older version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_cost: Option<MoveCostStatus>,
}

impl ServiceStatus {
    /// What serves it, as a user counts: `2 queues` (a worker each), `3
    /// workers on 2 queues (software spill)` (workers without a queue of
    /// their own, [`QueueStatus::carrier`]), or `2 cores` (kernel sockets:
    /// a loop per core, listed as queues).
    pub fn shape(&self) -> String {
        let n = self.queues.len();
        let plural = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
        if self.backend == "kernel" {
            return plural(n, "core");
        }
        let spill = self.queues.iter().filter(|q| q.carrier.is_some()).count();
        if spill == 0 {
            return plural(n, "queue");
        }
        format!(
            "{} on {} (software spill)",
            plural(n, "worker"),
            plural(n - spill, "queue")
        )
    }
}

/// A flow, as [`Request::Hint`] names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowQuery {
    /// The peer's address.
    pub src: std::net::IpAddr,
    /// The peer's port.
    pub sport: u16,
    /// The service's address.
    pub dst: std::net::IpAddr,
    /// The service's port.
    pub dport: u16,
    /// `tcp` or `udp`.
    pub proto: String,
}

impl FlowQuery {
    /// The flow as numa-sched hashes it; None for an unknown protocol or
    /// addresses of two families.
    pub fn tuple(&self) -> Option<flowlane_numa_sched::FlowTuple> {
        let protocol = match self.proto.as_str() {
            "tcp" => flowlane_numa_sched::Protocol::Tcp,
            "udp" => flowlane_numa_sched::Protocol::Udp,
            _ => return None,
        };
        (self.src.is_ipv4() == self.dst.is_ipv4()).then_some(flowlane_numa_sched::FlowTuple {
            src: self.src,
            src_port: self.sport,
            dst: self.dst,
            dst_port: self.dport,
            protocol,
        })
    }
}

/// Where a flow is processed now, and by which service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowAnswer {
    /// The command serving it (e.g. `bulk-sink`).
    pub service: String,
    /// Its process id.
    pub pid: u32,
    /// The backend serving it: `xdp` or `kernel`.
    #[serde(default = "xdp")]
    pub backend: String,
    /// The interface it serves (`*`: every interface).
    pub iface: String,
    /// Hash and bucket (AF_XDP only), queue, CPU and node.
    #[serde(flatten)]
    pub hint: crate::tcp_service::ServiceHint,
}

/// A service's counters, as `flowlane daemon` exports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceCounters {
    /// The command serving (e.g. `bulk-sink`).
    pub service: String,
    /// Its process id.
    pub pid: u32,
    /// Nanoseconds since the service started.
    pub uptime_ns: u64,
    /// When the service started, in nanoseconds since the Unix epoch (the
    /// wall clock then): the same in every answer, where the scrape's
    /// time less `uptime_ns` moves by how long the answer took. None from
    /// a service of an older version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ns: Option<u64>,
    /// The backend serving: `xdp` (AF_XDP) or `kernel` (kernel sockets).
    #[serde(default = "xdp")]
    pub backend: String,
    /// The interface served (`*`: every interface, as kernel sockets
    /// listen).
    pub iface: String,
    /// The rebalancing loop: `off`, `auto` or `storm`.
    pub rebalance: String,
    /// Each queue's counters.
    pub queues: Vec<QueueCounterSet>,
    /// What the XDP steering program did with each receive queue's frames
    /// (AF_XDP services; none for kernel sockets).
    #[serde(default)]
    pub steering: Vec<QueueSteering>,
    /// Moves since the service started.
    pub moves: MoveHistory,
    /// The interface's own counters, as the service's network namespace
    /// sees them (None if sysfs could not be read).
    #[serde(default)]
    pub nic: Option<crate::iface::InterfaceStats>,
    /// The busiest worker's busy time over the mean of all its workers',
    /// over the last full second (1: balanced, or idle).
    #[serde(default = "one")]
    pub imbalance: f64,
    /// Clients of its control socket it dropped so far
    /// ([`ControlSocket::clients_dropped`]: too slow to ask or to take
    /// their answer, or making room for others).
    #[serde(default)]
    pub control_clients_dropped: u64,
    /// Times the service asked the C allocator to hand the memory its
    /// queues gave back to the system (`malloc_trim`, glibc), once they
    /// had returned 16 MiB since the last, at most every 5 s.
    #[serde(default)]
    pub heap_trims: u64,
    /// Nanoseconds those trims took, together.
    #[serde(default)]
    pub heap_trim_ns: u64,
    /// Where a reader found the service when it cannot tell which process
    /// listens there (one outside its pid namespace: `pid` is then what
    /// the service calls itself, which replicas in containers share, all
    /// pid 1); None from the service itself. `flowlane daemon` serves it
    /// as a `socket` label, so that such replicas are not one series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// Queue-pair mode's counters (`--mode queue-pair`: the handlers run
    /// on application threads); None where they run on the network cores
    /// (`--mode rtc`), and from a service of an older version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_pair: Option<QueuePairCounters>,
    /// The service is stopping ([`ServiceStatus::stopping`]): the
    /// counters are those of its drain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
    /// What its rebalancing loop prices a move at now, as learned from
    /// the moves made; None where no loop runs, and from a service of an
    /// older version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_cost: Option<MoveCostStatus>,
}

/// What a service's rebalancing loop prices a bucket move at now: the
/// learned move cost (numa-sched's `MoveCostModel`: a robust fit of the
/// latest moves' durations against the connections they carried, weighed
/// with the configured prior as they age), or the configured price at
/// `--move-cost fixed`, as `flowlane daemon` serves it
/// (`flowlane_rebalance_move_cost_*`), and the moves the price refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MoveCostStatus {
    /// The price of a move with no connection, in nanoseconds.
    pub fixed_ns: u64,
    /// The price of each connection a move carries, in nanoseconds.
    pub per_connection_ns: u64,
    /// The moves the fit uses: the latest ones, at most 64 (0: the price
    /// is the configured prior).
    pub fit_moves: u64,
    /// The price is the configured one whatever the moves cost
    /// (`--move-cost fixed`: nothing is learned); false: learned.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fixed_price: bool,
    /// The moves the policy refused for their price since the loop
    /// started: in a round, a core left above the target load because no
    /// move of its buckets gained more than it cost, where at no cost one
    /// would have helped (numa-sched's `RebalancePlan::priced_out`).
    pub refused_for_cost: u64,
}

/// Queue-pair mode's counters: its application threads, the connections
/// its network cores reset for them or carried with a moved bucket, and
/// what each core's relay holds for them against its memory budget (what
/// a service's summary line reports as `queue_pair`, and `flowlane
/// daemon` serves as `flowlane_qp_*`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueuePairCounters {
    /// Application threads started.
    pub app_threads: u32,
    /// The application threads that died (a handler panicked), by
    /// number: the cores reset their connections and serve the others.
    pub dead_threads: Vec<u32>,
    /// Connections the cores reset because their application thread had
    /// died or stalled (a handler blocked past the stall limit).
    pub connections_orphaned: u64,
    /// Connections that reached another core with their RSS bucket (a
    /// move), their relay state with them.
    pub connections_moved: u64,
    /// Requests an application thread sent to a connection's old core
    /// after it moved: given back and sent again to the new one.
    pub requests_bounced: u64,
    /// Connections the handlers' `admit` refused on the application
    /// threads (reset before `on_accept`).
    pub application_refused: u64,
    /// Each network core's relay memory.
    pub relay_memory: Vec<RelayMemoryCounters>,
}

/// What one network core's relay holds for the application threads,
/// against its budget, each way: received bytes handed over and not read
/// yet (`rx_`), bytes the threads asked to send that the stack has not
/// taken yet (`tx_`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RelayMemoryCounters {
    /// The core (its queue, on AF_XDP).
    pub core: u32,
    /// Received bytes it may hold at once.
    pub rx_limit: u64,
    /// Received bytes it holds now.
    pub rx_held: u64,
    /// The most received bytes it held at once.
    pub rx_peak: u64,
    /// Connections that began to wait for receive memory.
    pub rx_waits: u64,
    /// Bytes to send it may hold at once.
    pub tx_limit: u64,
    /// Bytes to send it holds now.
    pub tx_held: u64,
    /// The most bytes to send it held at once.
    pub tx_peak: u64,
    /// Connections whose sends began to wait for send memory.
    pub tx_waits: u64,
    /// Bytes of receive buffers its pool keeps for reuse, as of its last
    /// trim (each second; what a busy spell left, halved each second it
    /// lies idle).
    pub pool_cached: u64,
    /// Bytes of idle receive buffers its trims gave back to the allocator
    /// so far: with the stacks' own, what the service's heap trim watches.
    pub returned: u64,
}

fn xdp() -> String {
    "xdp".into()
}

fn one() -> f64 {
    1.0
}

/// One queue's counters: its AF_XDP socket and worker, and its TCP stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueCounterSet {
    /// Queue number.
    pub queue: u32,
    /// The CPU its worker is pinned to, if pinned.
    pub cpu: Option<u32>,
    /// The NUMA node of its memory.
    pub node: u32,
    /// The socket's and worker's counters.
    pub io: crate::counters::QueueCountersSnapshot,
    /// The TCP stack's counters.
    pub tcp: crate::tcp_handler::TcpCountersSnapshot,
}

/// What the XDP steering program did with the frames of one of the
/// interface's receive queues, served or not (its counters, summed over
/// CPUs: `flowlane_ebpf::steer::SteerStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueSteering {
    /// Receive queue number.
    pub queue: u32,
    /// Frames handed to the queue's AF_XDP socket.
    pub redirected: u64,
    /// Frames passed to the kernel (not flowlane's).
    pub passed: u64,
    /// flowlane's frames dropped because the queue had no socket of the
    /// service (the NIC's table sends flowlane's flows to a queue it does
    /// not serve).
    pub no_socket: u64,
    /// First fragments of datagrams to flowlane's ports, dropped
    /// (flowlane does not reassemble).
    pub fragment_dropped: u64,
}

impl QueueSteering {
    /// Queue `queue`'s counters `s`.
    pub fn new(queue: u32, s: &crate::SteerStats) -> QueueSteering {
        QueueSteering {
            queue,
            redirected: s.redirected,
            passed: s.passed,
            no_socket: s.no_socket,
            fragment_dropped: s.fragment_dropped,
        }
    }
}

/// One queue's cumulative load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueStatus {
    /// Queue number.
    pub queue: u32,
    /// The CPU its worker is pinned to, if pinned.
    pub cpu: Option<u32>,
    /// The NUMA node of its memory.
    pub node: u32,
    /// Nanoseconds its worker spent busy (not waiting in poll(2)).
    pub busy_ns: u64,
    /// TCP segments it received.
    pub segments_in: u64,
    /// Live connections it serves.
    pub connections: u64,
    /// For a worker without a queue of its own (software spill: more
    /// workers than queues, `queue` then numbers the worker): the queue
    /// it sends through, whose worker also forwards it its buckets'
    /// frames. None for a queue's own worker (and a kernel-socket core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<u32>,
    /// The RSS buckets it has served (those with figures).
    pub buckets: Vec<BucketSnapshot>,
}

/// Why a bucket was moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveCause {
    /// The rebalancing loop (`--rebalance auto`), to a core of the
    /// bucket's own NUMA node.
    BalanceSameNode,
    /// The rebalancing loop, to another NUMA node: no other core of the
    /// bucket's node would have taken one of the source's buckets with a
    /// gain.
    BalanceOtherNode,
    /// Asked by hand (`flowlane rebalance move`, the control socket's
    /// `move`).
    Manual,
    /// The test storm (`--rebalance-storm-ms`: a random bucket in use).
    Storm,
}

impl MoveCause {
    /// Every cause, in the order of [`MoveHistory::by_cause`].
    pub const ALL: [MoveCause; 4] = [
        MoveCause::BalanceSameNode,
        MoveCause::BalanceOtherNode,
        MoveCause::Manual,
        MoveCause::Storm,
    ];

    /// The cause's name, as in JSON and metrics' `reason` label.
    pub fn name(self) -> &'static str {
        match self {
            MoveCause::BalanceSameNode => "balance_same_node",
            MoveCause::BalanceOtherNode => "balance_other_node",
            MoveCause::Manual => "manual",
            MoveCause::Storm => "storm",
        }
    }
}

/// The moves made for one cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CauseCount {
    /// Why.
    pub cause: MoveCause,
    /// Moves done.
    pub done: u64,
    /// Moves that failed, their bucket where it was.
    pub failed: u64,
    /// Moves that failed once their bucket had moved: it is served where
    /// it was sent, the move's error notwithstanding.
    #[serde(default)]
    pub landed_with_error: u64,
}

/// The moves a service made (by hand, or by its rebalancing loop).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MoveHistory {
    /// Moves done.
    pub done: u64,
    /// Moves that failed, their bucket where it was.
    pub failed: u64,
    /// Moves that failed once their bucket had moved (it is served where
    /// it was sent; the error is the move's own, after the NIC's entry was
    /// written).
    #[serde(default)]
    pub landed_with_error: u64,
    /// Moves by cause and result, one entry per [`MoveCause::ALL`] once
    /// any was recorded; they add up to `done`, `failed` and
    /// `landed_with_error`.
    #[serde(default)]
    pub by_cause: Vec<CauseCount>,
    /// The last [`MoveHistory::KEEP`] moves done, oldest first.
    pub recent: Vec<MoveReport>,
    /// Moves done by duration: how many took at most each of
    /// [`MoveHistory::DURATION_BOUNDS_US`] (cumulative, as a Prometheus
    /// histogram's buckets; the count of all is `done`).
    #[serde(default)]
    pub duration_le: Vec<u64>,
    /// The durations of all moves done, in microseconds.
    #[serde(default)]
    pub duration_sum_us: f64,
}

impl MoveHistory {
    /// How many moves [`MoveHistory::recent`] keeps.
    pub const KEEP: usize = 64;

    /// The upper bounds of [`MoveHistory::duration_le`], in microseconds:
    /// an idle bucket moves in about a hundred, a busy one in milliseconds
    /// (BENCHMARKS.md, "Handoff time per move").
    pub const DURATION_BOUNDS_US: [f64; 10] = [
        50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 25_000.0, 100_000.0,
    ];

    /// Counts one outcome of a move made for `cause` (`landed`: its
    /// bucket is where it was sent, which a move that failed may have
    /// left it) and keeps it if it is a move done.
    pub fn record(&mut self, cause: MoveCause, outcome: &Result<MoveReport>, landed: bool) {
        if self.by_cause.is_empty() {
            self.by_cause = MoveCause::ALL
                .map(|cause| CauseCount {
                    cause,
                    done: 0,
                    failed: 0,
                    landed_with_error: 0,
                })
                .to_vec();
        }
        if let Some(c) = self.by_cause.iter_mut().find(|c| c.cause == cause) {
            match outcome {
                Ok(_) => c.done += 1,
                Err(_) if landed => c.landed_with_error += 1,
                Err(_) => c.failed += 1,
            }
        }
        match outcome {
            Ok(r) => {
                self.done += 1;
                self.duration_le.resize(Self::DURATION_BOUNDS_US.len(), 0);
                for (n, bound) in self.duration_le.iter_mut().zip(Self::DURATION_BOUNDS_US) {
                    *n += u64::from(r.duration_us <= bound);
                }
                self.duration_sum_us += r.duration_us;
                if self.recent.len() == Self::KEEP {
                    self.recent.remove(0);
                }
                self.recent.push(r.clone());
            }
            Err(_) if landed => self.landed_with_error += 1,
            Err(_) => self.failed += 1,
        }
    }
}

/// A client whose request is not whole yet, and what it sent so far.
struct Reader {
    stream: UnixStream,
    buf: Vec<u8>,
    /// When it was taken: its request is due within [`CLIENT_DEADLINE`].
    since: Instant,
    /// When it last sent something.
    last: Instant,
}

/// A client being answered: its answer, and how much of it the socket
/// took so far.
struct Writer {
    stream: UnixStream,
    line: Vec<u8>,
    written: usize,
    /// When the answer was queued: taken whole within the answer deadline.
    since: Instant,
    /// When the socket last took some of it.
    last: Instant,
}

/// Where an answer is after a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// All written: the connection is closed.
    Done,
    /// The socket takes no more for now.
    Pending,
    /// The client went (its connection failed).
    Gone,
}

impl Writer {
    fn left(&self) -> &[u8] {
        &self.line[self.written..]
    }

    /// Writes what the socket takes now, without waiting.
    fn write_now(&mut self) -> Progress {
        loop {
            match (&self.stream).write(&self.line[self.written..]) {
                Ok(0) => return Progress::Gone,
                Ok(n) => {
                    self.written += n;
                    self.last = Instant::now();
                    if self.written == self.line.len() {
                        return Progress::Done;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::Pending,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Progress::Gone,
            }
        }
    }

    /// Writes what the socket takes within `wait`.
    fn write_within(&mut self, wait: Duration) -> Progress {
        match write_for(&self.stream, &self.line[self.written..], wait) {
            Ok(0) => Progress::Pending,
            Ok(n) => {
                self.written += n;
                self.last = Instant::now();
                if self.written == self.line.len() {
                    Progress::Done
                } else {
                    Progress::Pending
                }
            }
            Err(_) => Progress::Gone,
        }
    }
}

/// The service side: a listening socket, removed when dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
    /// Clients whose request is not whole yet.
    readers: Vec<Reader>,
    /// Clients being answered.
    writers: Vec<Writer>,
    /// Clients dropped so far (see [`ControlSocket::clients_dropped`]).
    dropped: u64,
    /// [`ANSWER_DEADLINE`] (shorter in tests).
    answer_deadline: Duration,
}

impl std::fmt::Debug for ControlSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlSocket")
            .field("path", &self.path)
            .field("reading", &self.readers.len())
            .field("answering", &self.writers.len())
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// The default socket of this process serving `service`.
pub fn default_path(service: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{service}.{}.sock", std::process::id()))
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

/// The mode of the directories [`ControlSocket::bind`] makes: only their
/// owner may put or remove a socket there; anyone may look.
const DIR_MODE: u32 = 0o755;

/// The mode of a control socket: its owner's alone.
const SOCKET_MODE: u32 = 0o600;

/// A request taken off a [`ControlSocket`] to be answered later, from any
/// thread ([`Handling::Defer`]): the client's connection, closed
/// unanswered if this is dropped.
#[derive(Debug)]
pub struct Reply {
    stream: UnixStream,
}

impl Reply {
    /// Sends the answer and closes the connection, waiting for the client
    /// to take it at most [`ANSWER_DEADLINE`] in all (a client that has not
    /// taken it whole by then loses it): for a thread of its own, not a
    /// loop that must go on.
    pub fn send(self, response: &Response) {
        let Some(line) = answer_line(response) else {
            return;
        };
        let deadline = Instant::now() + ANSWER_DEADLINE;
        let mut at = 0;
        while at < line.len() {
            let Some(left) = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return;
            };
            match write_for(&self.stream, &line[at..], left) {
                Ok(n) => at += n,
                Err(_) => return,
            }
        }
    }
}

/// What the caller of [`ControlSocket::poll_deferring`] does with a
/// request.
pub enum Handling<'a> {
    /// Answers it with this: the socket writes it as the client takes it,
    /// over the next polls (boxed: a response is large).
    Answer(Box<Response>),
    /// Answers it later (from another thread: an answer that waits for
    /// others), through the [`Reply`] this is given at once.
    Defer(Box<dyn FnOnce(Reply) + 'a>),
}

impl std::fmt::Debug for Handling<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Handling::Answer(r) => f.debug_tuple("Answer").field(r).finish(),
            Handling::Defer(_) => f.write_str("Defer"),
        }
    }
}

/// Whose socket [`ControlSocket::bind_as`] makes, as its errors name it:
/// a service's (`--control-socket`) or the daemon's (`--socket`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketRole {
    /// The socket, in words (`control socket`, `the daemon's socket`).
    pub name: &'static str,
    /// Who may be answering there already (`a running service`).
    pub in_use_by: &'static str,
    /// The flag that gives another path (`--control-socket`).
    pub flag: &'static str,
    /// Another way out, said after the flag (`, or none`), or
    /// nothing.
    pub or_else: &'static str,
}

/// A service's control socket ([`ControlSocket::bind`]).
pub const SERVICE_SOCKET: SocketRole = SocketRole {
    name: "control socket",
    in_use_by: "a running service",
    flag: "--control-socket",
    or_else: "",
};

impl ControlSocket {
    /// A service's control socket at `path`: [`ControlSocket::bind_as`]
    /// with [`SERVICE_SOCKET`] (its errors name `--control-socket`).
    ///
    /// # Errors
    /// As [`ControlSocket::bind_as`].
    pub fn bind(path: &Path) -> Result<ControlSocket> {
        ControlSocket::bind_as(path, &SERVICE_SOCKET)
    }

    /// Listens at `path`, its owner's alone (mode 0600 from its bind(2) on,
    /// whatever the umask; the directories made for it are 0755). A socket
    /// left there by a service that is gone (nothing listens on it) is
    /// replaced; any other file there is left alone and refused. Never
    /// waits for whoever listens there (a stopped service's full backlog
    /// counts as in use).
    ///
    /// # Errors
    /// [`Error::Setup`] when a running service answers at `path`, or a file
    /// that is not a socket is there (each naming `role`'s flag once);
    /// [`Error::Io`] when the directory or socket cannot be made, or
    /// whether the socket there is in use cannot be told.
    pub fn bind_as(path: &Path, role: &SocketRole) -> Result<ControlSocket> {
        use std::os::unix::fs::DirBuilderExt;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(io(format!(
                    "creating {} for the control socket",
                    dir.display()
                )))?;
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            // Only a socket is taken for a stale one: a mistyped path must
            // not cost whatever file is there.
            if !meta.file_type().is_socket() {
                return Err(Error::Setup(format!(
                    "{} exists and is not a socket: give {} a path of its own{}",
                    path.display(),
                    role.flag,
                    role.or_else
                )));
            }
            match answers_connect(path) {
                Ok(()) => {
                    return Err(Error::Setup(format!(
                        "{} {} is in use by {} (give another {}{})",
                        role.name,
                        path.display(),
                        role.in_use_by,
                        role.flag,
                        role.or_else
                    )))
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    // Nothing listens ([`nothing_listens`]): a service that
                    // is gone left it.
                    std::fs::remove_file(path)
                        .or_else(|e| match e.kind() {
                            ErrorKind::NotFound => Ok(()),
                            _ => Err(e),
                        })
                        .map_err(io(format!("removing the stale socket {}", path.display())))?;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(io(format!(
                        "telling whether the socket at {} is in use",
                        path.display()
                    ))(e))
                }
            }
        }
        let listener = listen_owner_only(path).map_err(io(format!(
            "listening on the control socket {}",
            path.display()
        )))?;
        let me = ControlSocket {
            listener,
            path: path.to_path_buf(),
            readers: Vec::new(),
            writers: Vec::new(),
            dropped: 0,
            answer_deadline: ANSWER_DEADLINE,
        };
        // Already so on Linux; elsewhere, the socket's mode was the umask's.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
            .map_err(io(format!("restricting {} to its owner", path.display())))?;
        Ok(me)
    }

    /// Where it listens.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Clients dropped so far: those that did not send a whole request
    /// within [`CLIENT_DEADLINE`], or did not take their answer within
    /// [`ANSWER_DEADLINE`], or made room for others ([`MAX_CLIENTS`],
    /// [`ANSWER_MEMORY`]).
    pub fn clients_dropped(&self) -> u64 {
        self.dropped
    }

    /// Accepts waiting clients, answers every complete request with
    /// `answer`'s response and writes what the clients take of their
    /// answers; never blocks on a client (waits [`WRITE_WAIT`] at most for
    /// them to take their answers).
    pub fn poll(&mut self, mut answer: impl FnMut(Request) -> Response) {
        self.poll_deferring(|request| Handling::Answer(Box::new(answer(request))));
    }

    /// As [`ControlSocket::poll`], but hands every complete request to
    /// `take`, which answers it now or defers it ([`Handling`]). A request
    /// deferred no longer counts among the clients held.
    pub fn poll_deferring<'a>(&mut self, mut take: impl FnMut(Request) -> Handling<'a>) {
        let now = Instant::now();
        self.accept(now);
        for (stream, request) in self.read(now) {
            match request {
                Ok(request) => match take(request) {
                    Handling::Answer(response) => self.answer(stream, &response),
                    Handling::Defer(give) => give(Reply { stream }),
                },
                Err(message) => self.answer(stream, &Response::Error { message }),
            }
        }
        self.write();
    }

    /// Takes the clients waiting in the listener's backlog (at most
    /// [`ACCEPTS_PER_POLL`]; an accept that fails, out of descriptors,
    /// leaves them there for the next poll).
    fn accept(&mut self, now: Instant) {
        for _ in 0..ACCEPTS_PER_POLL {
            let Ok((stream, _)) = self.listener.accept() else {
                break;
            };
            if stream.set_nonblocking(true).is_err() {
                continue; // closed unanswered
            }
            self.readers.push(Reader {
                stream,
                buf: Vec::new(),
                since: now,
                last: now,
            });
        }
    }

    /// Reads what the clients sent; returns those whose request is whole,
    /// each with it or why it is refused. Clients that went are closed,
    /// those whose deadline passed dropped, and past [`MAX_CLIENTS`] those
    /// that sent nothing longest.
    fn read(&mut self, now: Instant) -> Vec<(UnixStream, std::result::Result<Request, String>)> {
        let mut whole = Vec::new();
        let mut kept = Vec::with_capacity(self.readers.len());
        'clients: for mut c in std::mem::take(&mut self.readers) {
            let mut chunk = [0u8; 512];
            let before = c.buf.len();
            // The client shut down its side (a request written and then
            // a half-close, as `nc -N` or `socat` do): what came before
            // still gets its answer.
            let mut eof = false;
            loop {
                match c.stream.read(&mut chunk) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    // Gone: closed unanswered.
                    Err(_) => continue 'clients,
                }
                if c.buf.len() > MAX_REQUEST {
                    break;
                }
            }
            if c.buf.len() > before {
                c.last = now;
            }
            match c.buf.iter().position(|&b| b == b'\n') {
                Some(end) if end <= MAX_REQUEST => {
                    let request = serde_json::from_slice(&c.buf[..end])
                        .map_err(|e| format!("bad request: {e}"));
                    whole.push((c.stream, request));
                }
                _ if c.buf.len() > MAX_REQUEST => whole.push((
                    c.stream,
                    Err(format!("request longer than {MAX_REQUEST} bytes")),
                )),
                // Gone before a whole request: closed unanswered.
                _ if eof => {}
                _ if now.duration_since(c.since) < CLIENT_DEADLINE => kept.push(c),
                // Too slow: closed unanswered.
                _ => self.dropped += 1,
            }
        }
        if kept.len() > MAX_CLIENTS {
            // Those that sent something last stay.
            kept.sort_by_key(|c| std::cmp::Reverse(c.last));
            self.dropped += (kept.len() - MAX_CLIENTS) as u64;
            kept.truncate(MAX_CLIENTS);
        }
        self.readers = kept;
        whole
    }

    /// Queues `response` for the client on `stream`, what its socket takes
    /// written at once; past the bounds on answers queued
    /// ([`MAX_CLIENTS`], [`ANSWER_MEMORY`]), the one whose client took
    /// nothing longest is dropped.
    fn answer(&mut self, stream: UnixStream, response: &Response) {
        let Some(line) = answer_line(response) else {
            return;
        };
        let now = Instant::now();
        let mut w = Writer {
            stream,
            line,
            written: 0,
            since: now,
            last: now,
        };
        if w.write_now() != Progress::Pending {
            return;
        }
        self.writers.push(w);
        let queued = |ws: &[Writer]| ws.iter().map(|w| w.left().len()).sum::<usize>();
        while self.writers.len() > 1
            && (self.writers.len() > MAX_CLIENTS || queued(&self.writers) > ANSWER_MEMORY)
        {
            let stalest = (0..self.writers.len())
                .min_by_key(|&i| self.writers[i].last)
                .expect("more than one");
            self.writers.swap_remove(stalest);
            self.dropped += 1;
        }
    }

    /// Writes what the clients take of their answers: at once what their
    /// sockets take, then, while answers remain, waiting for them at most
    /// [`WRITE_WAIT`] in all; a client whose deadline passed is dropped.
    fn write(&mut self) {
        if self.writers.is_empty() {
            return;
        }
        let began = Instant::now();
        let deadline = self.answer_deadline;
        let mut dropped = 0;
        self.writers.retain_mut(|w| match w.write_now() {
            Progress::Pending if began.duration_since(w.since) < deadline => true,
            Progress::Pending => {
                dropped += 1;
                false
            }
            Progress::Done | Progress::Gone => false,
        });
        self.dropped += dropped;
        let until = began + WRITE_WAIT;
        'wait: while !self.writers.is_empty() {
            let mut i = 0;
            while i < self.writers.len() {
                let Some(left) = until
                    .checked_duration_since(Instant::now())
                    .filter(|d| !d.is_zero())
                else {
                    break 'wait;
                };
                match self.writers[i].write_within(left) {
                    Progress::Pending => i += 1,
                    Progress::Done | Progress::Gone => {
                        self.writers.swap_remove(i);
                    }
                }
            }
        }
    }
}

/// An answer as sent: one JSON line (None: it cannot be encoded, never
/// for these types).
fn answer_line(response: &Response) -> Option<Vec<u8>> {
    let mut line = serde_json::to_vec(response).ok()?;
    line.push(b'\n');
    Some(line)
}

/// Writes what `stream` (a client's, non-blocking) takes of `bytes`
/// within `wait`: one write, what the client read by then, perhaps
/// nothing. The stream is non-blocking again afterwards.
///
/// # Errors
/// The write's, but for its timing out (`Ok(0)`).
fn write_for(stream: &UnixStream, bytes: &[u8], wait: Duration) -> std::io::Result<usize> {
    stream.set_nonblocking(false)?;
    // A zero timeout would be none.
    stream.set_write_timeout(Some(wait.max(Duration::from_micros(1))))?;
    let wrote = loop {
        match (&*stream).write(bytes) {
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                break Ok(0)
            }
            other => break other,
        }
    };
    stream.set_nonblocking(true)?;
    wrote
}

/// A listening Unix socket at `path`, non-blocking, whose file is its
/// owner's alone from the start: Linux makes the file with the mode of the
/// socket's own inode (less the umask), set here before bind(2), so that
/// no one else can connect in the moment before a chmod.
fn listen_owner_only(path: &Path) -> std::io::Result<UnixListener> {
    use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    nix::sys::stat::fchmod(
        fd.as_raw_fd(),
        nix::sys::stat::Mode::from_bits_truncate(SOCKET_MODE),
    )?;
    socket::bind(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    // The backlog std gives a listener: the system's largest.
    socket::listen(&fd, Backlog::MAXALLOWABLE)?;
    Ok(UnixListener::from(fd))
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends `request` to the service listening at `path` and returns its
/// response: the whole exchange (the connect, the request, the answer of
/// at most [`MAX_ANSWER`] bytes) within `timeout`.
///
/// # Errors
/// [`Error::Setup`] when nothing listens there, the socket refuses this
/// user ([`refused_line`]: running, but its user's alone), or the answer
/// is not a response; [`Error::Io`] when the exchange fails or does not
/// end in time.
pub fn request(path: &Path, request: &Request, timeout: Duration) -> Result<Response> {
    let deadline = Instant::now() + timeout;
    let stream = connect_within(path, timeout).map_err(|e| {
        Error::Setup(match e.kind() {
            // Running, but not this user's to ask.
            ErrorKind::PermissionDenied => {
                refused_line(&[path.to_path_buf()]).unwrap_or_default()
            }
            _ => format!(
                "no flowlane service answers on {}: {e} (is it running? `flowlane rebalance status` lists the sockets in {RUN_DIR})",
                path.display()
            ),
        })
    })?;
    let left = deadline.saturating_duration_since(Instant::now());
    request_on(stream, path, request, left)
}

/// [`request`] on a stream already connected to `path` (with
/// [`connect_within`]; the caller may first ask who listens there): the
/// request sent and the whole answer read within `timeout`.
///
/// # Errors
/// As [`request`].
pub fn request_on(
    mut stream: UnixStream,
    path: &Path,
    request: &Request,
    timeout: Duration,
) -> Result<Response> {
    let what = || format!("talking to the service on {}", path.display());
    let deadline = Instant::now() + timeout;
    // What is left of the deadline: a socket timeout of zero would be none.
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!("no whole answer within {} ms", timeout.as_millis()),
                )
            })
    };
    let line = request_line(request)?;
    stream
        .set_write_timeout(Some(left().map_err(io(what()))?))
        .and_then(|()| stream.write_all(&line))
        .map_err(io(what()))?;
    let mut answer = AnswerReader::default();
    loop {
        stream
            .set_read_timeout(Some(left().map_err(io(what()))?))
            .map_err(io(what()))?;
        match answer.read_once(&mut stream) {
            Ok(true) => return answer.response(path),
            Ok(false) => {}
            // The read timed out: the deadline says whether to go on.
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {}
            Err(e) => return Err(io(what())(e)),
        }
    }
}

/// A request as sent: one JSON line.
///
/// # Errors
/// [`Error::Setup`] if it cannot be encoded (never, for these types).
pub fn request_line(request: &Request) -> Result<Vec<u8>> {
    let mut line = serde_json::to_vec(request).map_err(|e| Error::Setup(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

/// A service's answer as it is read: the bytes so far, at most
/// [`MAX_ANSWER`]; whole once the service closes the connection. Read by
/// [`request_on`] on a blocking stream, and by a caller asking many
/// services at once on non-blocking ones.
#[derive(Debug, Default)]
pub struct AnswerReader {
    buf: Vec<u8>,
}

impl AnswerReader {
    /// Reads once from `stream` (retrying an interrupted read): true once
    /// the service has closed the connection (the answer is whole), false
    /// when more came.
    ///
    /// # Errors
    /// The read's (`WouldBlock` when nothing is there yet, on a
    /// non-blocking stream or one whose read timeout passed), or
    /// `InvalidData` once the answer would be longer than [`MAX_ANSWER`].
    pub fn read_once(&mut self, stream: &mut impl Read) -> std::io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        let n = loop {
            match stream.read(&mut chunk) {
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        if n == 0 {
            return Ok(true);
        }
        let len = self.buf.len() + n;
        if len > MAX_ANSWER {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("an answer longer than {MAX_ANSWER} bytes"),
            ));
        }
        if len > self.buf.capacity() {
            // Doubling, but never past the bound.
            let to = (self.buf.capacity() * 2).clamp(len, MAX_ANSWER);
            self.buf.reserve_exact(to - self.buf.len());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(false)
    }

    /// The whole answer, from the service on `path`.
    ///
    /// # Errors
    /// [`Error::Setup`] when it is not a response.
    pub fn response(&self, path: &Path) -> Result<Response> {
        serde_json::from_slice(self.buf.trim_ascii_end()).map_err(|e| {
            Error::Setup(format!(
                "the service on {} gave no valid answer: {e}",
                path.display()
            ))
        })
    }
}

/// Connects to the Unix socket at `path`, waiting at most `wait` for room
/// in its listener's backlog (a blocking connect(2) waits for as long as
/// the listener accepts nothing: a service stopped or stuck), not at all
/// for a zero `wait`. The stream is blocking, with `wait` as its write
/// timeout.
///
/// # Errors
/// connect(2)'s: `WouldBlock` when the backlog stayed full, as for
/// [`answers_connect`].
pub fn connect_within(path: &Path, wait: Duration) -> std::io::Result<UnixStream> {
    use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    let flags = if wait.is_zero() {
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK
    } else {
        SockFlag::SOCK_CLOEXEC
    };
    let fd = socket::socket(AddressFamily::Unix, SockType::Stream, flags, None)?;
    if !wait.is_zero() {
        // SO_SNDTIMEO bounds a Unix connect's wait for the backlog (zero
        // would mean no bound: at least a microsecond).
        let micros = wait.as_micros().clamp(1, i64::MAX as u128) as i64;
        let tv = nix::sys::time::TimeVal::new((micros / 1_000_000) as _, (micros % 1_000_000) as _);
        socket::setsockopt(&fd, sockopt::SendTimeout, &tv)?;
    }
    let addr = UnixAddr::new(path)?;
    while let Err(e) = socket::connect(fd.as_raw_fd(), &addr) {
        if e != nix::errno::Errno::EINTR {
            return Err(e.into());
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Whether a listener is at `path`, without waiting for it: connected, or
/// its backlog full (a service that stopped accepting is still there, and
/// a request to it times out and is counted). Errors are connect(2)'s:
/// `ConnectionRefused` or `NotFound` where nothing listens,
/// `PermissionDenied` where this process may not connect.
///
/// # Errors
/// As above.
pub fn answers_connect(path: &Path) -> std::io::Result<()> {
    match connect_within(path, Duration::ZERO) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the sockets in `dir` that services which are gone left behind
/// (killed before they could remove their own): files named
/// `SERVICE.PID.sock` ([`default_path`]) whose process no longer exists
/// and on which nothing listens. A socket whose process lives is kept even
/// if it does not answer yet (it may be between bind(2) and listen(2)); so
/// is one that answers whatever its name says (a service in another pid
/// namespace sharing the directory, a container's: its pid is not this
/// one's), asked without waiting ([`answers_connect`]). Returns how many
/// were removed.
pub fn sweep_stale(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| owner_pid(p).is_some_and(|pid| !process_exists(pid)))
        .filter(|p| nothing_listens(p))
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

/// Whether nothing listens at `path` (a connect is refused), asked without
/// waiting: a socket left by a service that is gone, or not a socket.
fn nothing_listens(path: &Path) -> bool {
    matches!(answers_connect(path), Err(e) if e.kind() == ErrorKind::ConnectionRefused)
}

/// The process id in a default socket's name (`SERVICE.PID.sock`).
fn owner_pid(path: &Path) -> Option<i32> {
    if path.extension()? != "sock" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    let (_, pid) = stem.rsplit_once('.')?;
    pid.parse().ok().filter(|&p: &i32| p > 0)
}

/// Whether a process with this id exists (signal 0: permission errors
/// mean it does).
fn process_exists(pid: i32) -> bool {
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Tells the daemon listening on `daemon` that this process serves its
/// control socket at `own`. A daemon that is not running is not an error
/// the caller need report: applications work without one.
///
/// # Errors
/// No daemon answers, or it refused the registration.
pub fn register_with_daemon(daemon: &Path, own: &Path, service: &str) -> Result<()> {
    let own = if own.is_absolute() {
        own.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::Setup(format!("the working directory: {e}")))?
            .join(own)
    };
    let register = Request::Register {
        socket: own,
        service: service.to_string(),
        pid: std::process::id(),
    };
    match request(daemon, &register, Duration::from_millis(500))? {
        Response::Registered => Ok(()),
        Response::Error { message } => Err(Error::Setup(message)),
        other => Err(Error::Setup(format!("the daemon answered {other:?}"))),
    }
}

/// The control sockets in `dir` that answer a connect (`*.sock`,
/// sorted): those of the running services.
pub fn live_sockets(dir: &Path) -> Vec<PathBuf> {
    scan_sockets(dir).live
}

/// What a look at a run directory found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SocketScan {
    /// Sockets that answer a connect (sorted).
    pub live: Vec<PathBuf>,
    /// Sockets this process may not connect to (permission denied: a
    /// service's socket is its user's alone, mode 0600), sorted.
    pub refused: Vec<PathBuf>,
}

/// Looks at every `*.sock` in `dir`: which answer (or have a listener
/// whose backlog is full, [`answers_connect`]: never waiting for one), and
/// which refuse this process for want of permission (the rest are gone
/// services' leftovers).
pub fn scan_sockets(dir: &Path) -> SocketScan {
    let mut scan = SocketScan::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return scan;
    };
    for p in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if p.extension().is_none_or(|x| x != "sock") {
            continue;
        }
        match answers_connect(&p) {
            Ok(()) => scan.live.push(p),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => scan.refused.push(p),
            Err(_) => {}
        }
    }
    scan.live.sort();
    scan.refused.sort();
    scan
}

/// One line for the daemon's socket at `path` refusing this user: what is
/// wrong and what to do.
pub fn daemon_refused_line(path: &Path) -> String {
    format!(
        "permission denied on the daemon's socket ({}): it is its user's alone (mode 0600); run this as that user (root for the packaged daemon)",
        path.display()
    )
}

/// One line for sockets that refused this user: what is wrong and what
/// to do.
pub fn refused_line(refused: &[PathBuf]) -> Option<String> {
    let first = refused.first()?;
    Some(format!(
        "permission denied on {} service socket{} ({}{}): a service's socket is its user's alone (mode 0600); run this as that user (root for the packaged services)",
        refused.len(),
        if refused.len() == 1 { "" } else { "s" },
        first.display(),
        if refused.len() > 1 { ", ..." } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "flowlane-ctl-{tag}-{}-{:?}.sock",
            std::process::id(),
            std::thread::current().id()
        ))
    }

    /// Runs `poll` on another thread until `done`.
    fn serve_until<T: Send>(
        sock: &mut ControlSocket,
        client: impl FnOnce() -> T + Send,
        answer: impl FnMut(Request) -> Response + Send,
    ) -> T {
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut answer = answer;
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let r = client();
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                r
            });
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                sock.poll(&mut answer);
                std::thread::sleep(Duration::from_millis(1));
            }
            h.join().unwrap()
        })
    }

    #[test]
    fn a_request_gets_its_answer_and_the_socket_goes_with_the_service() {
        let path = temp_path("answer");
        let mut sock = ControlSocket::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(live_sockets(path.parent().unwrap()).contains(&path));
        let got = serve_until(
            &mut sock,
            || {
                request(
                    &path,
                    &Request::Move {
                        bucket: 7,
                        to_queue: 1,
                    },
                    Duration::from_secs(2),
                )
            },
            |r| Response::Error {
                message: format!("{r:?}"),
            },
        )
        .unwrap();
        assert_eq!(
            got,
            Response::Error {
                message: "Move { bucket: 7, to_queue: 1 }".into()
            }
        );
        drop(sock);
        assert!(!path.exists());
        assert!(request(&path, &Request::Status, Duration::from_secs(1)).is_err());
    }

    /// A path that holds some other file (a mistyped `--control-socket`)
    /// is refused, and the file kept.
    #[test]
    fn a_file_that_is_not_a_socket_is_neither_taken_nor_removed() {
        let path = temp_path("notasocket");
        std::fs::write(&path, b"precious").unwrap();
        let Err(err) = ControlSocket::bind(&path) else {
            panic!("a file that is not a socket was taken");
        };
        assert!(err.to_string().contains("is not a socket"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
        std::fs::remove_file(&path).unwrap();
    }

    /// A client that writes its request and then shuts down its side (`nc
    /// -N`, `socat`, `printf ... | ...`) still gets the answer.
    #[test]
    fn a_request_followed_by_a_half_close_is_answered() {
        let path = temp_path("halfclose");
        let mut sock = ControlSocket::bind(&path).unwrap();
        let client = || {
            let mut s = UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.write_all(b"{\"op\":\"status\"}\n").unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            out
        };
        let out = serve_until(&mut sock, client, |_| Response::Error {
            message: "answered".into(),
        });
        assert!(out.contains("answered"), "no answer: {out:?}");
    }

    #[test]
    fn garbage_and_oversized_requests_are_refused_and_the_service_goes_on() {
        let path = temp_path("garbage");
        let mut sock = ControlSocket::bind(&path).unwrap();
        let raw = |bytes: Vec<u8>| {
            let path = path.clone();
            move || {
                let mut s = UnixStream::connect(&path).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let _ = s.write_all(&bytes);
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                out
            }
        };
        let never = |_| -> Response { panic!("no request should reach the service") };
        let out = serve_until(&mut sock, raw(b"{\"op\":\"explode\"}\n".to_vec()), never);
        assert!(out.contains("bad request"), "{out}");
        let out = serve_until(&mut sock, raw(vec![b'x'; MAX_REQUEST + 10]), never);
        assert!(out.contains("longer than"), "{out}");
        // Still answering.
        let got = serve_until(
            &mut sock,
            || request(&path, &Request::Status, Duration::from_secs(2)),
            |_| Response::Error {
                message: "fine".into(),
            },
        );
        assert!(matches!(got, Ok(Response::Error { message }) if message == "fine"));
    }

    #[test]
    fn a_silent_client_is_dropped_and_a_stale_socket_replaced() {
        let path = temp_path("silent");
        let mut sock = ControlSocket::bind(&path).unwrap();
        // A second service may not take a live socket.
        assert!(matches!(ControlSocket::bind(&path), Err(Error::Setup(_))));
        let _silent = UnixStream::connect(&path).unwrap();
        sock.poll(|_| unreachable!());
        assert_eq!(sock.readers.len(), 1);
        std::thread::sleep(CLIENT_DEADLINE + Duration::from_millis(50));
        sock.poll(|_| unreachable!());
        assert_eq!(sock.readers.len(), 0);
        assert_eq!(sock.clients_dropped(), 1);
        drop(sock);
        // What a crashed service leaves: the file, nobody listening.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        assert!(!live_sockets(path.parent().unwrap()).contains(&path));
        let sock = ControlSocket::bind(&path).unwrap();
        drop(sock);
        assert!(!path.exists());
    }

    /// A service at `path` that answers each connection with what `talk`
    /// writes until the client goes (its writes fail); counts the bytes
    /// it got out. Ends after one connection.
    fn bad_service(
        path: &Path,
        talk: fn(&mut UnixStream) -> std::io::Result<usize>,
    ) -> (
        std::thread::JoinHandle<()>,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        let listener = UnixListener::bind(path).unwrap();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = sent.clone();
        let t = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            while let Ok(n) = talk(&mut s) {
                counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        });
        (t, sent)
    }

    /// What a service that answers without end writes, again and again.
    const CHUNK: &[u8] = &[b' '; 64 * 1024];

    /// Answers without end, as fast as the client reads.
    fn stream_endlessly(s: &mut UnixStream) -> std::io::Result<usize> {
        s.write_all(CHUNK).map(|()| CHUNK.len())
    }

    /// Answers a byte every 20 ms, never the end.
    fn trickle(s: &mut UnixStream) -> std::io::Result<usize> {
        std::thread::sleep(Duration::from_millis(20));
        s.write_all(b" ").map(|()| 1)
    }

    /// `f` on a thread, given `within` to end: None if it did not.
    fn ends_within<T: Send + 'static>(
        within: Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(within).ok()
    }

    /// A service that answers without end: the client stops reading at
    /// [`MAX_ANSWER`], well before its deadline, and closes (the service's
    /// writes fail); its memory is bounded by that.
    #[test]
    fn an_endless_answer_is_cut_at_its_bound() {
        let path = temp_path("endless");
        let (t, sent) = bad_service(&path, stream_endlessly);
        let p = path.clone();
        let got = ends_within(Duration::from_secs(20), move || {
            request(&p, &Request::Counters, Duration::from_secs(10))
        })
        .expect("the exchange ends");
        let e = got.unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
        assert!(
            ends_within(Duration::from_secs(5), move || t.join()).is_some(),
            "the client closed: the service's writes fail"
        );
        let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
        // What was read, and what the socket's buffers held.
        assert!(sent <= MAX_ANSWER + (8 << 20), "{sent}");
        std::fs::remove_file(&path).unwrap();
    }

    /// A service that trickles its answer a byte at a time never ends it:
    /// the whole exchange ends at the deadline, not at the first read that
    /// waits longer than it.
    #[test]
    fn a_trickled_answer_ends_at_the_deadline() {
        let path = temp_path("trickle");
        let (t, _) = bad_service(&path, trickle);
        let p = path.clone();
        let began = Instant::now();
        let got = ends_within(Duration::from_secs(5), move || {
            request(&p, &Request::Counters, Duration::from_millis(300))
        })
        .expect("the exchange ends");
        let took = began.elapsed();
        assert!(took < Duration::from_millis(600), "{took:?}");
        let e = got.unwrap_err().to_string();
        assert!(e.contains("no whole answer within"), "{e}");
        assert!(ends_within(Duration::from_secs(5), move || t.join()).is_some());
        std::fs::remove_file(&path).unwrap();
    }

    /// A client that asks `request` and reads its whole answer; the
    /// answer's text.
    fn ask_raw(path: &Path, request: &[u8]) -> std::thread::JoinHandle<String> {
        let mut s = UnixStream::connect(path).unwrap();
        s.write_all(request).unwrap();
        std::thread::spawn(move || {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            out
        })
    }

    /// More clients than the old bound of eight, all connected and asking
    /// before the service polls (the daemon's hints and its scrape arrive
    /// so): every one is answered, none dropped.
    #[test]
    fn clients_that_arrive_together_are_all_answered() {
        let path = temp_path("together");
        let mut sock = ControlSocket::bind(&path).unwrap();
        let clients: Vec<_> = (0..40)
            .map(|_| ask_raw(&path, b"{\"op\":\"status\"}\n"))
            .collect();
        let began = Instant::now();
        while !clients.iter().all(|c| c.is_finished()) && began.elapsed() < Duration::from_secs(10)
        {
            sock.poll(|_| Response::Error {
                message: "answered".into(),
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        let answered = clients
            .into_iter()
            .map(|c| c.join().unwrap())
            .filter(|a| a.contains("answered"))
            .count();
        assert_eq!(answered, 40);
        assert_eq!(sock.clients_dropped(), 0);
    }

    /// A hostile local client opens many connections and sends nothing:
    /// the service holds at most [`MAX_CLIENTS`] of them (its memory is
    /// bounded), drops the rest (counted), and a request behind them is
    /// answered all the same, at once, not after their deadline.
    #[test]
    fn connections_that_send_nothing_do_not_keep_a_request_out() {
        let path = temp_path("hostile");
        let mut sock = ControlSocket::bind(&path).unwrap();
        let silent: Vec<UnixStream> = (0..200)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        let asked = ask_raw(&path, b"{\"op\":\"status\"}\n");
        let began = Instant::now();
        while !asked.is_finished() && began.elapsed() < Duration::from_secs(10) {
            sock.poll(|_| Response::Error {
                message: "answered".into(),
            });
            assert!(sock.readers.len() <= MAX_CLIENTS, "{}", sock.readers.len());
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            began.elapsed() < CLIENT_DEADLINE,
            "answered after {:?}: behind the silent ones' deadline",
            began.elapsed()
        );
        assert!(asked.join().unwrap().contains("answered"));
        assert_eq!(sock.clients_dropped(), (200 - MAX_CLIENTS) as u64);
        drop(silent);
    }

    /// A client that asks and takes nothing of a large answer: each poll
    /// after the one that answered returns at once (it waits
    /// [`WRITE_WAIT`] at most, not for the client), the answer stays queued
    /// until its deadline, then the client is dropped and counted.
    #[test]
    fn a_client_that_takes_nothing_is_dropped_at_its_deadline() {
        let path = temp_path("takesnothing");
        let mut sock = ControlSocket::bind(&path).unwrap();
        sock.answer_deadline = Duration::from_millis(300);
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"{\"op\":\"status\"}\n").unwrap();
        let big = "x".repeat(4 << 20);
        let began = Instant::now();
        let mut longest = Duration::ZERO;
        while (sock.writers.len() == 1 || began.elapsed() < Duration::from_millis(10))
            && began.elapsed() < Duration::from_secs(10)
        {
            let poll = Instant::now();
            let mut answered = false;
            sock.poll(|_| {
                answered = true;
                Response::Error {
                    message: big.clone(),
                }
            });
            if !answered {
                // The one that answered also made the answer (4 MB of
                // JSON, slow in a debug build).
                longest = longest.max(poll.elapsed());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            longest < Duration::from_millis(200),
            "one poll took {longest:?}"
        );
        assert!(
            began.elapsed() >= Duration::from_millis(300),
            "dropped after {:?}, before its deadline",
            began.elapsed()
        );
        assert!(sock.writers.is_empty());
        assert_eq!(sock.clients_dropped(), 1);
        // What the client can still read is a part, not a whole answer.
        client.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let _ = client.read_to_end(&mut got);
        assert!(got.len() < big.len(), "{}", got.len());
    }

    /// Clients that ask for large answers and read nothing: the answers
    /// queued stay within [`ANSWER_MEMORY`] (and one answer), those whose
    /// clients took nothing longest dropped and counted.
    #[test]
    fn the_answers_queued_are_bounded() {
        let path = temp_path("answermemory");
        let mut sock = ControlSocket::bind(&path).unwrap();
        let answer = 5 << 20;
        let clients: Vec<UnixStream> = (0..16)
            .map(|_| {
                let mut c = UnixStream::connect(&path).unwrap();
                c.write_all(b"{\"op\":\"status\"}\n").unwrap();
                c
            })
            .collect();
        let big = "x".repeat(answer);
        let mut answered = 0;
        let began = Instant::now();
        while answered < clients.len() && began.elapsed() < Duration::from_secs(10) {
            sock.poll(|_| {
                answered += 1;
                Response::Error {
                    message: big.clone(),
                }
            });
            let queued: usize = sock.writers.iter().map(|w| w.left().len()).sum();
            assert!(queued <= ANSWER_MEMORY + answer + 64, "{queued}");
        }
        assert_eq!(answered, clients.len());
        // 16 answers of 5 MiB, less what the sockets took, past 64 MiB.
        assert!(sock.clients_dropped() >= 2, "{}", sock.clients_dropped());
        assert_eq!(
            sock.clients_dropped() as usize + sock.writers.len(),
            clients.len()
        );
    }

    /// A request taken off the socket is answered later, from another
    /// thread, and no longer holds one of the waiting clients' places.
    #[test]
    fn a_deferred_request_is_answered_from_another_thread() {
        let path = temp_path("deferred");
        let mut sock = ControlSocket::bind(&path).unwrap();
        let mut replies = Vec::new();
        let client =
            std::thread::spawn(move || request(&path, &Request::Status, Duration::from_secs(5)));
        let began = Instant::now();
        while replies.is_empty() && began.elapsed() < Duration::from_secs(5) {
            let taken = std::cell::RefCell::new(&mut replies);
            sock.poll_deferring(|req| {
                let taken = &taken;
                Handling::Defer(Box::new(move |reply| taken.borrow_mut().push((req, reply))))
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        let (req, reply) = replies.pop().expect("the request was taken");
        assert_eq!(req, Request::Status);
        assert_eq!((sock.readers.len(), sock.writers.len()), (0, 0));
        std::thread::spawn(move || {
            reply.send(&Response::Error {
                message: "later".into(),
            })
        })
        .join()
        .unwrap();
        assert_eq!(
            client.join().unwrap().unwrap(),
            Response::Error {
                message: "later".into()
            }
        );
    }

    /// The socket's file is its owner's alone from its bind on, whatever
    /// the umask (the test runs with the usual 022, which would give 0755),
    /// not only after a chmod.
    #[test]
    fn the_socket_is_made_owner_only() {
        let path = temp_path("mode");
        let l = listen_owner_only(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(l);
        std::fs::remove_file(&path).unwrap();
        // The directories made for a socket are 0755, whatever the umask
        // allows more.
        let dir = temp_path("dirmode").with_extension("d");
        let sock = ControlSocket::bind(&dir.join("a/s.sock")).unwrap();
        for d in [dir.join("a"), dir.clone()] {
            let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & !0o755, 0, "{}: {mode:o}", d.display());
        }
        drop(sock);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A listener whose backlog is full (a stopped service): a new service
    /// at its path is refused at once, not hung in a blocking connect.
    #[test]
    fn a_socket_whose_backlog_is_full_is_in_use() {
        use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog};
        use nix::sys::socket::{SockFlag, SockType, UnixAddr};
        use std::os::fd::AsRawFd;
        let path = temp_path("fullbacklog");
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(fd.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        listen(&fd, Backlog::new(0).unwrap()).unwrap();
        let mut held = Vec::new();
        while let Ok(s) = connect_within(&path, Duration::ZERO) {
            held.push(s);
            assert!(held.len() < 64, "the backlog does not fill");
        }
        let p = path.clone();
        let got = ends_within(Duration::from_secs(5), move || {
            ControlSocket::bind(&p).map(drop).map_err(|e| e.to_string())
        })
        .expect("bind does not wait for the stopped service");
        assert!(got.unwrap_err().contains("in use"));
        assert!(path.exists(), "its socket kept");
        drop(fd);
        std::fs::remove_file(&path).unwrap();
    }

    /// A socket whose name's pid is no process here but which answers (a
    /// service in another pid namespace sharing the run directory) is not
    /// swept.
    #[test]
    fn a_socket_that_answers_is_not_swept_whatever_its_pid() {
        let dir = std::env::temp_dir().join(format!(
            "flowlane-sweep-live-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let live = dir.join(format!("svc.{gone}.sock"));
        let _listener = UnixListener::bind(&live).unwrap();
        let dead = dir.join(format!("old.{gone}.sock"));
        drop(UnixListener::bind(&dead).unwrap());
        assert_eq!(sweep_stale(&dir), 1);
        assert!(live.exists(), "a live service's socket kept");
        assert!(!dead.exists(), "a dead one's swept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sockets_of_services_that_are_gone_are_swept() {
        let dir = std::env::temp_dir().join(format!("flowlane-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let names = [
            format!("bulk-sink.{gone}.sock"),  // its process is gone: swept
            format!("bulk-sink.{me}.sock"),    // alive (not listening yet): kept
            "chosen-by-hand.sock".to_string(), // no pid in the name: kept
            format!("notes.{gone}.txt"),       // not a socket name: kept
        ];
        for n in &names {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        assert_eq!(sweep_stale(&dir), 1);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = names[1..].to_vec();
        want.sort();
        assert_eq!(left, want);
        assert_eq!(sweep_stale(&dir.join("absent")), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A counters answer with queue-pair mode's counters reads back the
    /// same; one without them (a service in rtc mode, or of an older
    /// version) carries no such field and still reads, as none.
    #[test]
    fn queue_pair_counters_travel_in_the_counters_answer_and_old_answers_still_read() {
        let mut c = ServiceCounters {
            service: "echo-server".into(),
            pid: 7,
            uptime_ns: 1,
            started_unix_ns: None,
            backend: "xdp".into(),
            iface: "fl0".into(),
            rebalance: "off".into(),
            queues: Vec::new(),
            steering: Vec::new(),
            moves: MoveHistory::default(),
            nic: None,
            imbalance: 1.0,
            control_clients_dropped: 0,
            heap_trims: 0,
            heap_trim_ns: 0,
            socket: None,
            stopping: false,
            move_cost: None,
            queue_pair: Some(QueuePairCounters {
                app_threads: 2,
                dead_threads: vec![1],
                connections_orphaned: 4,
                connections_moved: 5,
                requests_bounced: 6,
                application_refused: 7,
                relay_memory: (0..2)
                    .map(|core| RelayMemoryCounters {
                        core,
                        rx_limit: 4 << 20,
                        rx_held: 10,
                        rx_peak: 20,
                        rx_waits: 1,
                        tx_limit: 4 << 20,
                        tx_held: 30,
                        tx_peak: 40,
                        tx_waits: 2,
                        pool_cached: 256 << 10,
                        returned: 3 << 20,
                    })
                    .collect(),
            }),
        };
        let answer = Response::Counters(Box::new(c.clone()));
        let line = serde_json::to_string(&answer).unwrap();
        assert_eq!(
            serde_json::from_str::<Response>(&line).unwrap(),
            answer,
            "{line}"
        );
        // In rtc mode: no such field, as in an answer of an older
        // version, which reads as none.
        c.queue_pair = None;
        let line = serde_json::to_string(&c).unwrap();
        assert!(!line.contains("queue_pair"), "{line}");
        assert_eq!(serde_json::from_str::<ServiceCounters>(&line).unwrap(), c);
        // A newer one whose counters carry more than these: read.
        let newer = r#"{"app_threads":1,"relay_memory":[{"core":0,"rx_peak":9,"rx_bytes_later":3}],"later":1}"#;
        let qp: QueuePairCounters = serde_json::from_str(newer).unwrap();
        assert_eq!((qp.app_threads, qp.relay_memory[0].rx_peak), (1, 9));
    }

    #[test]
    fn history_keeps_the_last_moves() {
        let mut h = MoveHistory::default();
        for b in 0..(MoveHistory::KEEP as u16 + 5) {
            h.record(
                MoveCause::Manual,
                &Ok(MoveReport {
                    bucket: b,
                    ..MoveReport::default()
                }),
                true,
            );
        }
        h.record(MoveCause::Manual, &Err(Error::Move("no".into())), false);
        h.record(MoveCause::Storm, &Err(Error::Move("late".into())), true);
        assert_eq!(
            (h.done, h.failed, h.landed_with_error),
            (MoveHistory::KEEP as u64 + 5, 1, 1)
        );
        let storm = h.by_cause.iter().find(|c| c.cause == MoveCause::Storm);
        assert_eq!(
            storm.map(|c| (c.done, c.failed, c.landed_with_error)),
            Some((0, 0, 1))
        );
        assert_eq!(h.recent.len(), MoveHistory::KEEP);
        assert_eq!(h.recent[0].bucket, 5);
    }
}
