//! flowlane's sans-IO TCP stack: segments and time go in, segments and
//! application events come out. No threads, no syscalls, no clock reads, no
//! I/O. One worker core owns one [`Stack`] (a shard of connections); there is
//! no locking anywhere. Headers are parsed and written by `flowlane-wire`
//! ([`flowlane_wire::TcpRepr`]).
//!
//! The surface: [`Stack`] (whose documentation is the call contract: what to
//! call, in which order, and the time rule), its [`Config`] and
//! [`KeepaliveConfig`], the [`Event`]s it reports, the handles
//! [`ConnHandle`] and [`ListenerId`], [`FourTuple`], [`Transmit`], [`Stats`],
//! [`State`], [`CloseReason`], [`Error`], [`CongestionAlgorithm`],
//! [`InitialWindow`], [`Ecn`] and [`EcnMode`], [`MtuProbing`], the opaque
//! connection [`Snapshot`] for moving a connection between stacks, the
//! opaque [`BucketExport`] for moving an RSS bucket's connections at once
//! and its [`BucketStats`], zero-copy receive's [`FrameRef`], [`FrameStore`]
//! and [`NoFrames`] (payload left in the caller's frames), and [`time`]. Everything else (buffers, reassembly, SACK scoreboard, RTO,
//! congestion control, timer wheel, ISNs) is internal.
//!
//! ```
//! use flowlane_tcp::{Config, Event, Stack, time::Instant};
//!
//! let mut server = Stack::new(Config::new([1; 16]));
//! let mut client = Stack::new(Config::new([2; 16]));
//! let listener = server.listen("10.0.0.1:80".parse().unwrap()).unwrap();
//! let now = Instant::ZERO;
//! let conn = client
//!     .connect(now, "10.0.0.2:40000".parse().unwrap(), "10.0.0.1:80".parse().unwrap())
//!     .unwrap();
//! // Shuttle segments between the two stacks until both are connected.
//! let mut buf = [0u8; 1500];
//! for _ in 0..3 {
//!     while let Some(t) = client.poll_transmit(now, &mut buf) {
//!         server.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
//!     }
//!     while let Some(t) = server.poll_transmit(now, &mut buf) {
//!         client.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
//!     }
//! }
//! assert_eq!(client.poll_event(), Some(Event::Connected(conn)));
//! assert!(matches!(server.poll_event(), Some(Event::Accepted { listener: l, .. }) if l == listener));
//! ```
#![forbid(unsafe_code)]

mod assembler;
mod buckets;
mod buffer;
mod cc;
mod challenge;
mod chunk_pool;
mod conn_info;
mod connection;
mod ecn;
mod flow_key;
mod flow_label;
mod isn;
pub mod kept;
#[cfg(test)]
mod layout;
mod lent_frames;
mod mtu_probing;
mod owed_acks;
mod rack;
mod recv_buffer;
mod rto;
mod sack;
mod seq;
mod siphash;
mod stack;
mod state_hint;
mod syn_cookie;
mod table;
pub mod time;
mod time_wait;
mod timer;

use std::fmt;
use std::net::{IpAddr, SocketAddr};

pub use cc::{CongestionAlgorithm, InitialWindow};
pub use conn_info::ConnInfo;
pub use connection::{Snapshot, State};
pub use ecn::{Ecn, EcnMode};
pub use flowlane_wire::Unreachable;
pub use lent_frames::{FrameRef, FrameStore, NoFrames};
pub use mtu_probing::MtuProbing;
pub use stack::{BucketExport, Delivery, Stack};
pub use state_hint::{LookupHint, StateHint};

use time::Duration;

/// Asked at each SYN to a listener (and at each SYN cookie returned to it)
/// whether to take a connection, from its addresses alone: an allow-list,
/// a budget per peer. `false` answers the SYN with an RST (the peer sees
/// its connection refused) and keeps no state; the stack counts it
/// ([`Stats::syn_refused`]). It runs inline with packet processing, on
/// every SYN however many a flood sends: keep it short, never block, and
/// bound whatever it keeps per peer (a listener's filter is the stack's
/// `set_syn_filter`; an application's, its handler's `syn_filter`). One
/// filter may serve several listeners and cores (clones of the `Arc`):
/// state it keeps is shared, in atomics or behind a lock.
pub type SynFilter = std::sync::Arc<dyn Fn(&FourTuple) -> bool + Send + Sync>;

/// A connection's address pair, from this stack's point of view. Generic
/// over IPv4 and IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourTuple {
    /// Our address and port.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
}

/// A connection handle: a slab index plus a generation, so that a handle to
/// a closed connection never reaches a newer connection in the same slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnHandle {
    index: u32,
    generation: u32,
}

impl ConnHandle {
    /// The slab index (stable for the connection's lifetime on this stack).
    pub fn index(self) -> u32 {
        self.index
    }

    /// A handle for a backend that keeps its own connection table under
    /// the same application API (the kernel-socket backend): `index` into
    /// that table, `generation` of the slot. A stack recognises only the
    /// handles it issued.
    pub fn from_parts(index: u32, generation: u32) -> ConnHandle {
        ConnHandle { index, generation }
    }

    /// The generation of the slot (see [`ConnHandle::from_parts`]).
    pub fn generation(self) -> u32 {
        self.generation
    }
}

/// Identifies a listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(u32);

impl ListenerId {
    /// A listener's identity for a backend that keeps its own listeners
    /// (the kernel-socket backend): its index there.
    pub fn from_index(index: u32) -> ListenerId {
        ListenerId(index)
    }

    /// Its index (in the stack, or the backend that issued it).
    pub fn index(self) -> u32 {
        self.0
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Both FINs exchanged and acknowledged (after TIME-WAIT on the side
    /// that closed first).
    Normal,
    /// The peer reset the connection (or sent data after a local
    /// close).
    Reset,
    /// Retransmissions, keepalive probes or the FIN-WAIT-2 timer ran out.
    Timeout,
    /// This side aborted the connection (an `abort` call).
    Aborted,
    /// The connection attempt was answered with an ICMP destination
    /// unreachable saying why (which the backend handed to the stack); or a
    /// synchronized connection timed out (as [`CloseReason::Timeout`])
    /// after one about its data in flight, with no ACK from the peer
    /// since (the soft error it kept, RFC 1122 §4.2.3.9).
    Unreachable(Unreachable),
}

/// Something the application should know about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A passively opened connection completed its handshake.
    Accepted {
        /// The new connection.
        conn: ConnHandle,
        /// The listener it arrived on.
        listener: ListenerId,
    },
    /// An actively opened connection completed its handshake.
    Connected(ConnHandle),
    /// New in-order data can be read. Emitted again only after the
    /// application has called [`Stack::recv`] (or consumed data).
    Readable(ConnHandle),
    /// Send buffer space was freed after a [`Stack::send`] that could not
    /// queue everything, or is free after [`Stack::want_writable`]: at
    /// least half as much as is still queued (a third of a full buffer,
    /// Linux's rule for `POLLOUT`), so that a writer kept waiting queues
    /// a block per event, not a segment.
    Writable(ConnHandle),
    /// The peer sent FIN: after the buffered data, reads return end of
    /// stream.
    PeerClosed(ConnHandle),
    /// The connection is gone; its handle is now invalid.
    Closed {
        /// The connection.
        conn: ConnHandle,
        /// Why.
        reason: CloseReason,
    },
}

impl Event {
    /// The connection the event is about.
    pub fn conn(&self) -> ConnHandle {
        match *self {
            Event::Accepted { conn, .. }
            | Event::Connected(conn)
            | Event::Readable(conn)
            | Event::Writable(conn)
            | Event::PeerClosed(conn)
            | Event::Closed { conn, .. } => conn,
        }
    }
}

/// What one RSS bucket of a stack holds now and has received
/// ([`Stack::bucket_stats`]): the figures a rebalancer weighs buckets by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketStats {
    /// Live connections in the bucket (TIME-WAIT records not included).
    pub connections: u32,
    /// TIME-WAIT records in the bucket.
    pub time_wait: u32,
    /// Segments received for the bucket's connections and records since
    /// the stack started.
    pub segments_in: u64,
    /// Payload bytes in those segments.
    pub bytes_in: u64,
}

/// Errors from the application-facing calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The handle does not name a live connection (closed or exported).
    InvalidHandle,
    /// The address (or four-tuple) is already in use.
    AddrInUse,
    /// Local and remote addresses are of different families, or a port is 0.
    InvalidAddress,
    /// Nothing can be sent or received right now.
    WouldBlock,
    /// Writing was shut down, or the connection cannot carry data.
    InvalidState,
    /// A snapshot is inconsistent.
    InvalidSnapshot,
    /// The stack (one core) holds its most connections already (its
    /// configuration's `max_connections`).
    ConnectionLimit,
    /// An active open found no local port whose replies reach this core:
    /// the NIC's RSS indirection table sends none of its buckets to the
    /// core's queue (a backend that steers by RSS says so; the stack
    /// itself never does).
    NotSteeredHere,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Error::InvalidHandle => "invalid connection handle",
            Error::ConnectionLimit => "connection limit reached (Config::max_connections)",
            Error::AddrInUse => "address in use",
            Error::InvalidAddress => "invalid address",
            Error::WouldBlock => "operation would block",
            Error::InvalidState => "invalid connection state for this operation",
            Error::InvalidSnapshot => "inconsistent connection snapshot",
            Error::NotSteeredHere => {
                "no local port's replies reach this queue: the NIC's RSS table gives it no bucket"
            }
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}

/// Keepalive parameters (RFC 9293 §3.8.4, RFC 1122 §4.2.3.6). The default
/// is Linux's (`tcp_keepalive_time` 2 h, `_intvl` 75 s, `_probes` 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepaliveConfig {
    /// Idle time before the first probe (RFC 1122: at least two hours by
    /// default).
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub probes: u8,
}

impl Default for KeepaliveConfig {
    fn default() -> KeepaliveConfig {
        KeepaliveConfig {
            idle: time::Duration::from_secs(2 * 3600),
            interval: time::Duration::from_secs(75),
            probes: 9,
        }
    }
}

/// Stack configuration.
#[derive(Clone)]
pub struct Config {
    /// Secret keying the RFC 6528 ISN hash; should be random per process.
    pub isn_secret: [u8; 16],
    /// MSS we advertise over IPv4 (RFC 9293 §3.7.1); 1460 for Ethernet.
    /// IPv6 connections use 20 bytes less ([`Config::mss_for`]).
    pub mss: u16,
    /// Initial send buffer bytes per connection.
    pub send_buffer: usize,
    /// Largest send buffer a connection may grow to (like Linux
    /// `tcp_wmem[2]`). While the application keeps the buffer full and it,
    /// not the congestion window, limits what is in flight, it grows to
    /// about twice the congestion window (like Linux `tcp_sndbuf_expand`).
    /// At most `send_buffer` disables growth.
    pub send_buffer_max: usize,
    /// Initial receive buffer bytes per connection (the window offered at
    /// first).
    pub recv_buffer: usize,
    /// Largest receive buffer (and so receive window) a connection may grow
    /// to by dynamic right-sizing (like Linux `tcp_rmem[2]`): the buffer
    /// follows about twice the data the application reads per round trip
    /// (Fisk & Feng, "Dynamic right-sizing in TCP", 2001; Linux
    /// `tcp_rcv_space_adjust`). The window scale offered in the SYN is
    /// chosen for this size (RFC 7323 §2.3). At most `recv_buffer` disables
    /// growth.
    pub recv_buffer_max: usize,
    /// Receive memory of the whole stack, in bytes (the role of Linux
    /// `tcp_mem`): what every connection's window promises and its receive
    /// buffer holds, together, stays within it, but for connections
    /// imported from another stack ([`Stack::import`],
    /// [`Stack::import_bucket`]): each brings the bytes it holds and the
    /// window it offered, which can be neither dropped nor taken back (RFC
    /// 9293 §3.8.6), so it is taken past the budget (refusing it would
    /// lose a live connection, as for [`Config::max_connections`]); until
    /// that drains, no other window grows (each may still be offered the
    /// one segment every connection always may). Windows are offered from
    /// what is left; past half of it (pressure) each connection is held to
    /// its share and buffers stop growing. A data path sets it to what its
    /// receive frames can hold, so that no frame is ever dropped below TCP
    /// for want of room. Buffer memory is taken from a per-stack pool of
    /// chunks as data arrives and given back as it is read (8 KiB chunks,
    /// or 2 KiB ones for a buffer whose bytes fit in one); the pool keeps
    /// up to this much free memory in chunks of each size for reuse.
    pub recv_memory: usize,
    /// Send memory of the whole stack, in bytes (the send half of Linux
    /// `tcp_mem`, the kernel backend's `tx_memory`): the bytes queued in
    /// every connection's send buffer, together, stay within it. Past it
    /// [`Stack::send`] takes only what is left (nothing: `WouldBlock`),
    /// counted ([`Stats::send_memory_waits`]), and the connection waits,
    /// oldest first, for a [`Event::Writable`] once ACKs or closes free
    /// memory; its own buffer's size ([`Config::send_buffer`]) bounds it
    /// as before. Without it, peers that keep their windows shut (they
    /// read nothing) held a send buffer's worth each, whatever their
    /// number. Connections imported from another stack bring what they
    /// hold past it, as for [`Config::recv_memory`]. Default 256 MiB.
    pub send_memory: usize,
    /// The least payload a receive queue keeps in the frame it arrived in
    /// when the caller lends frames ([`Stack::handle_tcp_frame`]); smaller
    /// payloads are copied, so that a frame's memory is not held for a few
    /// bytes. Default 1 024 (half a 2 KiB frame).
    pub zero_copy_min: usize,
    /// Offer window scaling (RFC 7323 §2).
    pub window_scaling: bool,
    /// Offer timestamps (RFC 7323 §3) and use PAWS.
    pub timestamps: bool,
    /// Offer SACK (RFC 2018 §2). As a receiver, ACKs then carry SACK blocks
    /// for out-of-order data (RFC 2018 §4) and D-SACK blocks for duplicates
    /// (RFC 2883 §4), which a SACK sender (any kernel) needs to recover
    /// from several losses per window and to recognise reordering. As a
    /// sender, when the peer permits SACK too, loss recovery is RFC 6675's
    /// conservative SACK-based recovery (a scoreboard of SACKed ranges,
    /// the pipe estimate, several holes repaired per round trip); without
    /// it, NewReno (RFC 6582) on cumulative ACKs.
    pub sack: bool,
    /// RACK-TLP (RFC 8985) on connections with SACK (on by default, as in
    /// Linux): loss is detected from per-segment send times (a segment is
    /// lost once one sent after it is delivered and it is older than the
    /// RTT plus a reordering window that adapts to D-SACKs), not from
    /// `DupThresh` duplicate ACKs, and a tail loss probe (new data, or the
    /// last segment) goes out two round trips after the last ACK. Off, or
    /// without SACK: RFC 6675 / RFC 5681 detection and a loss probe at
    /// SND.UNA.
    pub rack: bool,
    /// RTO before any RTT sample (RFC 6298 §2.1: 1 s).
    pub initial_rto: Duration,
    /// Lower bound on the RTO's variance term (RFC 6298 §2.4 says 1 s on
    /// the RTO; 200 ms is common practice): the RTO is at least SRTT +
    /// `min_rto`, as Linux bounds it, so that a delayed ACK fits on any
    /// path length once RTTVAR has decayed.
    pub min_rto: Duration,
    /// Upper bound on the RTO (RFC 6298 §2.5: at least 60 s).
    pub max_rto: Duration,
    /// Consecutive data retransmission timeouts before giving up.
    pub max_retransmits: u8,
    /// Retransmission timeouts and window probes a connection the
    /// application closed (an orphan, its data or FIN not yet
    /// acknowledged) sends before it is reset (Linux's
    /// `tcp_orphan_retries`, 8 in effect there). Unlike a live
    /// connection's, its probes count even while the peer answers them
    /// with a zero window: RFC 1122 §4.2.2.17 keeps such a connection
    /// open, but RFC 6429 lets a sender end one for its resources, and an
    /// orphan has nobody left to wait for it; a peer that asks for data
    /// and never reads (sockstress) would hold it, its slot and its send
    /// buffer for good. 8 by default.
    pub orphan_retries: u8,
    /// SYN retransmissions of an active open before giving up.
    pub max_syn_retransmits: u8,
    /// SYN-ACK retransmissions of a half-open connection before it is
    /// dropped (Linux `tcp_synack_retries`, 5 there). 2 by default: a
    /// half-open connection then lives about 7 s (1 + 2 + 4 s) and sends
    /// 3 SYN-ACKs, so a spoofed SYN holds its backlog place briefly and
    /// turns into at most 3 segments towards the forged source. A real
    /// client whose final ACK is lost still gets through: its data
    /// carries the ACK, and its retransmitted SYN is answered again.
    pub max_synack_retransmits: u8,
    /// Maximum segment lifetime; TIME-WAIT lasts 2*MSL (RFC 9293 §3.4.2).
    pub msl: Duration,
    /// Delayed ACK timeout (RFC 5681 §4.2: under 500 ms).
    pub ack_delay: Duration,
    /// Nagle's algorithm for new connections (RFC 9293 §3.7.4).
    pub nagle: bool,
    /// Keepalive; `None` (the default) disables it.
    pub keepalive: Option<KeepaliveConfig>,
    /// Congestion control algorithm for new connections: CUBIC (RFC 9438)
    /// with HyStart++ (RFC 9406; the default, as in Linux) or NewReno (RFC
    /// 5681, RFC 6582). [`Stack::set_congestion`] changes one connection's.
    pub congestion: CongestionAlgorithm,
    /// The congestion window a connection starts with once its handshake
    /// is done: RFC 6928's min(10·SMSS, max(2·SMSS, 14600 bytes)) by
    /// default (as Linux, `TCP_INIT_CWND`), or RFC 5681 §3.1's
    /// min(4·SMSS, max(2·SMSS, 4380 bytes)). Either way it is one SMSS if
    /// the SYN or SYN-ACK had to be sent again (RFC 5681 §3.1, RFC 6928
    /// §2), and the window after an idle period restarts from it (RFC
    /// 5681 §4.1).
    pub initial_window: InitialWindow,
    /// ECN (RFC 3168): [`EcnMode::Accept`] by default (as Linux's
    /// `tcp_ecn = 2`: used when the peer's SYN asks for it, never asked
    /// for), [`EcnMode::On`] to ask in our SYNs too, [`EcnMode::Off`].
    /// On a connection that negotiated it, new data goes out ECT(0)
    /// ([`Transmit::ecn`]), a CE mark received
    /// ([`Stack::handle_tcp_ecn`]) is echoed until the peer reduces its
    /// window, and an echo reduces ours once per window of data, as a loss
    /// would, without retransmitting. A SYN-cookie handshake keeps ECN
    /// only when the client uses timestamps (the cookie carries it in our
    /// TSval, as Linux does).
    pub ecn: EcnMode,
    /// Packetization-layer path MTU discovery (RFC 4821; Linux
    /// `tcp_mtu_probing`): [`MtuProbing::OnBlackHole`] by default. A
    /// connection whose retransmission timer fires a fourth time in a row
    /// (three retransmissions unanswered, Linux `tcp_retries1`) while
    /// probing is on takes the segments to be too big for the path (RFC
    /// 4821 §7.3, a black hole: the "packet too big" messages are lost or
    /// filtered): its MSS falls to
    /// `mtu_probe_base_mss`, then halves per further timeout (never below
    /// a 552-byte IPv4 or 1 280-byte IPv6 path), and from then on it
    /// probes upward (RFC 4821 §7): one segment of the search range's
    /// midpoint at a time, sent as new data when the windows allow; its
    /// ACK raises the MSS, its loss (repaired without a congestion
    /// response, RFC 4821 §7.6.2) lowers the range's top. A believed ICMP
    /// message lowers the top as well ([`Stack::handle_too_big`]).
    pub mtu_probing: MtuProbing,
    /// The MSS a black hole first lowers a connection to, and below which
    /// a search does not start (RFC 4821 §7.2's search_low; Linux
    /// `tcp_base_mss`, 1 024): what nearly every path carries.
    pub mtu_probe_base_mss: u16,
    /// How long a finished search rests before it starts again from the
    /// MSS the handshake allowed, since the path may have grown (RFC 4821
    /// §7.7; Linux `tcp_probe_interval`, 600 s). At most 18 hours (the
    /// connection keeps the time in 16 bits of seconds).
    pub mtu_probe_interval: Duration,
    /// The search stops once its range is narrower than this many bytes
    /// (RFC 4821 §7.2; Linux `tcp_probe_threshold`, 8).
    pub mtu_probe_threshold: u16,
    /// Half-open (SYN-RECEIVED) connections allowed per listener. Until its
    /// handshake completes, a half-open connection's SYN-ACK offers at most
    /// `recv_memory / listen_backlog`, and one segment once a quarter of
    /// the backlog is half-open, so that a spoofed flood that fills the
    /// backlog promises at most a quarter of the receive memory.
    pub listen_backlog: usize,
    /// Once a listener holds `listen_backlog` half-open connections,
    /// answer further SYNs with SYN cookies (RFC 4987 §3.6; Linux
    /// `tcp_syncookies = 1`): the SYN-ACK's sequence number carries what
    /// the connection needs, nothing is kept, and the client's ACK opens
    /// the connection. Off: such SYNs are dropped (`Stats::syn_dropped`).
    /// A cookie keeps the MSS (rounded down to one of 8 values) and, when
    /// the client uses timestamps, its window scale and SACK permission;
    /// without timestamps the SYN-ACK offers neither.
    pub syn_cookies: bool,
    /// Timer wheel granularity (deadlines are rounded up to it). The wheel
    /// is hierarchical: any deadline fits, and far ones cost nothing until
    /// they come near.
    pub timer_tick: Duration,
    /// Maximum queued RSTs for segments to no connection, and likewise
    /// cookie SYN-ACKs; more are dropped.
    pub max_pending_resets: usize,
    /// Most TIME-WAIT records kept (Linux `tcp_max_tw_buckets`): once the
    /// application has closed a connection in TIME-WAIT, the stack keeps a
    /// record of 112 bytes for 2 MSL instead of the connection; at
    /// the cap the oldest record is dropped ([`Stats::time_wait_evicted`]).
    /// At least one is kept (0 reads as 1).
    pub time_wait_max: usize,
    /// Header prediction: the next in-order data segment that changes
    /// nothing else skips the general checks (on by default; off only to
    /// compare against the general path, which must give the same result).
    pub header_prediction: bool,
    /// Challenge ACKs (RFC 5961 §3.2, §4.2, §5.2) this stack sends per
    /// second, on average (RFC 5961 §7; Linux `tcp_challenge_ack_limit`).
    /// Each second's budget is drawn at random from half to one and a
    /// half times this (as Linux does since CVE-2016-5696), so that
    /// counting challenge ACKs tells an off-path attacker nothing about
    /// other connections. `u32::MAX` (the default, as in Linux since 6.0):
    /// no stack-wide limit, each connection held to one challenge per
    /// [`Config::invalid_ack_interval`]; a shared budget is a resource any
    /// peer may spend, leaving none for a peer that needs its challenge to
    /// recover a connection it lost (RFC 5961 §4).
    pub challenge_ack_limit: u32,
    /// Least time between two ACKs a connection sends to out-of-window
    /// segments without data, challenge ACKs included (Linux
    /// `tcp_invalid_ratelimit`): two stacks that disagree about a window
    /// cannot keep each other busy, and a flood aimed at one connection
    /// gets one answer per interval. Data segments (duplicates) are always
    /// answered (RFC 5681 §4.2).
    pub invalid_ack_interval: Duration,
    /// Most connections this stack holds (every state; compact TIME-WAIT
    /// records have their own cap, `time_wait_max`). At the cap a SYN or
    /// an ACK returning a SYN cookie is dropped, not reset, so that the
    /// client tries again later ([`Stats::connection_limit_refused`];
    /// Linux drops them likewise when its accept queue is full), and
    /// [`Stack::connect`] fails with [`Error::ConnectionLimit`].
    /// Connections imported from another stack are taken past the cap by
    /// at most an eighth of it (a move adds no connection to the system,
    /// and one refused at import is lost), refused beyond
    /// ([`Stats::imports_past_cap`], [`Stats::imports_refused_at_cap`]). A closed
    /// connection's slot counts until its `Closed` event is taken
    /// ([`Stack::poll_event`]), though [`Stack::connection_count`] no
    /// longer does.
    pub max_connections: usize,
    /// Most connections one listener holds, half-open ones included, so
    /// that a flood of connections to one service cannot take every slot
    /// of the others; refused like [`Config::max_connections`].
    /// Established connections imported by a bucket move do not count
    /// against it (the stack's cap still bounds them). The default is no
    /// more than the stack's cap.
    pub listener_max_connections: usize,
    /// Tells this stack's connection handles from those of the other
    /// stacks of one service (each queue's stack gets its own: the data
    /// path gives it the queue's index), so that a handle taken to the
    /// wrong core is refused there (`InvalidHandle`) instead of naming the
    /// connection that happens to hold its slot. A slot's generation
    /// starts at [`Config::first_generation`] of the tag and counts up by
    /// one per connection it held. Two tables with tags below `n` (up to
    /// 65 536) can confuse a handle only once one of them gave its slot
    /// more than 2^32 / (3n) connections more than the other gave the
    /// same slot (1.4 million for 1 024 tags). Default 0.
    pub handle_tag: u32,
}

/// Every field but the secret: whoever reads `isn_secret` predicts the
/// stack's ISNs (RFC 6528 §3), forges its SYN cookies and its ports, so it
/// stays out of debug output (a log line, a panic message). Destructured,
/// so that a new field cannot be left out unnoticed.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Config {
            isn_secret: _,
            mss,
            send_buffer,
            send_buffer_max,
            recv_buffer,
            recv_buffer_max,
            recv_memory,
            send_memory,
            zero_copy_min,
            window_scaling,
            timestamps,
            sack,
            rack,
            initial_rto,
            min_rto,
            max_rto,
            max_retransmits,
            orphan_retries,
            max_syn_retransmits,
            max_synack_retransmits,
            msl,
            ack_delay,
            nagle,
            keepalive,
            congestion,
            initial_window,
            ecn,
            mtu_probing,
            mtu_probe_base_mss,
            mtu_probe_interval,
            mtu_probe_threshold,
            listen_backlog,
            syn_cookies,
            timer_tick,
            max_pending_resets,
            time_wait_max,
            header_prediction,
            challenge_ack_limit,
            invalid_ack_interval,
            max_connections,
            listener_max_connections,
            handle_tag,
        } = self;
        f.debug_struct("Config")
            .field("isn_secret", &format_args!("<redacted>"))
            .field("mss", mss)
            .field("send_buffer", send_buffer)
            .field("send_buffer_max", send_buffer_max)
            .field("recv_buffer", recv_buffer)
            .field("recv_buffer_max", recv_buffer_max)
            .field("recv_memory", recv_memory)
            .field("send_memory", send_memory)
            .field("zero_copy_min", zero_copy_min)
            .field("window_scaling", window_scaling)
            .field("timestamps", timestamps)
            .field("sack", sack)
            .field("rack", rack)
            .field("initial_rto", initial_rto)
            .field("min_rto", min_rto)
            .field("max_rto", max_rto)
            .field("max_retransmits", max_retransmits)
            .field("orphan_retries", orphan_retries)
            .field("max_syn_retransmits", max_syn_retransmits)
            .field("max_synack_retransmits", max_synack_retransmits)
            .field("msl", msl)
            .field("ack_delay", ack_delay)
            .field("nagle", nagle)
            .field("keepalive", keepalive)
            .field("congestion", congestion)
            .field("initial_window", initial_window)
            .field("ecn", ecn)
            .field("mtu_probing", mtu_probing)
            .field("mtu_probe_base_mss", mtu_probe_base_mss)
            .field("mtu_probe_interval", mtu_probe_interval)
            .field("mtu_probe_threshold", mtu_probe_threshold)
            .field("listen_backlog", listen_backlog)
            .field("syn_cookies", syn_cookies)
            .field("timer_tick", timer_tick)
            .field("max_pending_resets", max_pending_resets)
            .field("time_wait_max", time_wait_max)
            .field("header_prediction", header_prediction)
            .field("challenge_ack_limit", challenge_ack_limit)
            .field("invalid_ack_interval", invalid_ack_interval)
            .field("max_connections", max_connections)
            .field("listener_max_connections", listener_max_connections)
            .field("handle_tag", handle_tag)
            .finish()
    }
}

impl Config {
    /// Defaults, keyed by `isn_secret`.
    pub fn new(isn_secret: [u8; 16]) -> Self {
        Config {
            isn_secret,
            mss: 1460,
            send_buffer: 64 * 1024,
            send_buffer_max: 4 * 1024 * 1024,
            recv_buffer: 64 * 1024,
            recv_buffer_max: 6 * 1024 * 1024,
            recv_memory: 64 * 1024 * 1024,
            send_memory: 256 * 1024 * 1024,
            zero_copy_min: 1024,
            window_scaling: true,
            timestamps: true,
            sack: true,
            rack: true,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            max_retransmits: 15,
            orphan_retries: 8,
            max_syn_retransmits: 6,
            max_synack_retransmits: 2,
            msl: Duration::from_secs(30),
            ack_delay: Duration::from_millis(40),
            nagle: true,
            keepalive: None,
            congestion: CongestionAlgorithm::Cubic,
            initial_window: InitialWindow::Rfc6928,
            ecn: EcnMode::Accept,
            mtu_probing: MtuProbing::OnBlackHole,
            mtu_probe_base_mss: 1024,
            mtu_probe_interval: Duration::from_secs(600),
            mtu_probe_threshold: 8,
            listen_backlog: 1024,
            max_connections: 65_536,
            listener_max_connections: 65_536,
            syn_cookies: true,
            timer_tick: Duration::from_millis(1),
            max_pending_resets: 1024,
            time_wait_max: 262_144,
            header_prediction: true,
            challenge_ack_limit: u32::MAX,
            invalid_ack_interval: Duration::from_millis(500),
            handle_tag: 0,
        }
    }

    /// The generation at which a connection table tagged `handle_tag`
    /// starts its slots ([`Config::handle_tag`]; the same for every
    /// backend's table): the tag times 2^32 / φ (Fibonacci hashing), so
    /// that the tags of a service's cores, however few, land far apart in
    /// the generations' space. Distinct tags start at distinct
    /// generations; tag 0 at 0.
    #[inline]
    pub fn first_generation(handle_tag: u32) -> u32 {
        handle_tag.wrapping_mul(0x9E37_79B9)
    }

    /// The MSS we advertise and send at most on a connection whose peer is
    /// `peer`: [`Config::mss`] for IPv4; for IPv6, whose fixed header is 20
    /// bytes longer (RFC 8200 §3), 20 less, but not below 1 220, what
    /// IPv6's minimum link MTU of 1 280 carries (RFC 8200 §5; RFC 9293
    /// §3.7.1: MSS = MTU - fixed IP header - fixed TCP header). Never more
    /// than [`Config::mss`], which bounds what the caller's frames hold.
    #[inline]
    pub fn mss_for(&self, peer: IpAddr) -> u16 {
        match peer {
            IpAddr::V4(_) => self.mss,
            IpAddr::V6(_) => self.mss.saturating_sub(20).max(IPV6_MIN_MSS.min(self.mss)),
        }
    }
}

/// The MSS of IPv6's minimum link MTU (1 280 - 40 - 20; RFC 8200 §5).
const IPV6_MIN_MSS: u16 = 1220;

/// A segment written by [`Stack::poll_transmit`]: `len` bytes of TCP header,
/// options and payload at the start of the caller's buffer, checksum zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Source address and port (for the IP header and pseudo-header).
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Bytes written.
    pub len: usize,
    /// The ECN codepoint to put in the IP header (RFC 3168 §5): ECT(0) for
    /// new data of a connection that negotiated ECN, Not-ECT for
    /// everything else (SYNs, pure ACKs, retransmissions and window
    /// probes: RFC 3168 §6.1.1, §6.1.4, §6.1.5, §6.1.6; RSTs).
    pub ecn: Ecn,
}

/// Per-stack counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments handed to [`Stack::handle_tcp`] (or
    /// [`Stack::handle_segment`]).
    pub segments_in: u64,
    /// Segments produced by [`Stack::poll_transmit`].
    pub segments_out: u64,
    /// Received segments carrying payload.
    pub data_segments_in: u64,
    /// Sent segments carrying payload.
    pub data_segments_out: u64,
    /// Payload bytes delivered in order to receive buffers.
    pub bytes_in: u64,
    /// Segments whose payload a receive queue kept in the caller's frame
    /// (zero-copy receive, [`Stack::handle_tcp_frame`]).
    pub frames_kept: u64,
    /// Payload bytes sent (including retransmissions).
    pub bytes_out: u64,
    /// Segments that failed to parse.
    pub malformed: u64,
    /// Segments retransmitted (timeout, fast retransmit or probe).
    pub retransmits: u64,
    /// Fast retransmits (RFC 5681 §3.2).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub rto_timeouts: u64,
    /// Loss probes sent (the segment at SND.UNA after two RTTs without
    /// progress; also counted in `retransmits`): without RACK-TLP, or in
    /// fast recovery.
    pub loss_probes: u64,
    /// Segments deemed lost by RACK (RFC 8985 §6.2: a segment sent later
    /// was delivered and this one is older than RACK.rtt plus the
    /// reordering window).
    pub rack_lost: u64,
    /// RACK reordering timer expiries (RFC 8985 §6.3).
    pub rack_reo_timeouts: u64,
    /// Tail loss probes sent (RFC 8985 §7.3: new data, or the last
    /// segment again; a retransmission is also counted in `retransmits`).
    pub tlp_probes: u64,
    /// Losses repaired by a tail loss probe (RFC 8985 §7.4: its ACK came
    /// without a D-SACK; the congestion window was reduced).
    pub tlp_recoveries: u64,
    /// D-SACK blocks (RFC 2883) beyond what the connection retransmitted:
    /// a duplicate the network made, or a forged one (§5). Ignored by
    /// RACK: they grow no reordering window (Linux's `tcp_check_dsack`
    /// likewise takes no more D-SACKed segments than were retransmitted).
    pub dsack_unexpected: u64,
    /// Fast recoveries found spurious and undone: the first ACK of the
    /// retransmission echoed an older timestamp, so the original had
    /// arrived (Eifel detection, RFC 3522), and the window went back to
    /// what it was (RFC 4015).
    pub spurious_recoveries: u64,
    /// Duplicate ACKs received (RFC 5681 §2 definition).
    pub dup_acks: u64,
    /// Segments received out of order.
    pub out_of_order: u64,
    /// In-order data segments taken by header prediction (the fast path
    /// that skips the general checks).
    pub predicted: u64,
    /// Segments whose connection [`Stack::expect`] had named (their table
    /// lookup skipped): the caller's prefetch at work.
    pub expected: u64,
    /// Out-of-order segments dropped because the reassembler was full.
    pub ooo_dropped: u64,
    /// Segments inside the window offered whose bytes the receive buffer
    /// had no room for, in part or in whole (dropped unacknowledged: the
    /// peer sends them again). A safety count, expected to stay 0: the
    /// window offers at most one unit of the window scale (RFC 7323 §2.4)
    /// past what the buffer holds, and the buffer's headroom reaches one
    /// unit, or the buffer's own size if that is more.
    pub recv_buffer_overrun: u64,
    /// Segments whose window offered a right edge left of one offered
    /// before, by less than one unit of the window scale: a full buffer's
    /// window truncated to the unit so that it closes (RFC 7323 §2.4,
    /// Appendix F; bytes up to the earlier edge are still taken).
    pub window_retractions: u64,
    /// FINs received ahead of a hole and forgotten because data then
    /// arrived past them (never sent by a working peer; a forged FIN).
    pub fin_overrun: u64,
    /// Connections whose out-of-order data was given up (RFC 2018 §8
    /// reneging): idle for a second with a hole, while
    /// the receive memory was under pressure (a peer that leaves holes to
    /// pin memory; a working one fills them within a few round trips).
    pub ooo_reneged: u64,
    /// Times a connection's receive promise was parked under memory
    /// pressure: it received less than a segment over a second (idle or
    /// trickling), and its window committed nothing until it received a
    /// segment's worth within a second.
    pub recv_parked: u64,
    /// Segments failing the sequence acceptability test.
    pub unacceptable: u64,
    /// Segments dropped for their flags (RFC 9293 §3.10.7): without ACK in
    /// a synchronized state; at a listener an RST, or neither SYN nor ACK,
    /// or a SYN with FIN; in SYN-SENT anything but a SYN or an RST with
    /// ACK.
    pub bad_flags: u64,
    /// Segments dropped by PAWS (RFC 7323 §5).
    pub paws_rejected: u64,
    /// RSTs received that were acted upon.
    pub resets_in: u64,
    /// RSTs inside the window but not at RCV.NXT: answered with a
    /// challenge ACK, the connection kept (RFC 5961 §3.2).
    pub rst_challenged: u64,
    /// RSTs outside the window: dropped (RFC 5961 §3.2; also counted in
    /// `unacceptable`).
    pub rst_out_of_window: u64,
    /// RSTs for a connection in TIME-WAIT: ignored (RFC 1337
    /// "TIME-WAIT assassination"; the 2 MSL wait runs on).
    pub rst_in_time_wait: u64,
    /// SYNs for a synchronized connection: answered with a challenge ACK,
    /// dropped (RFC 5961 §4.2).
    pub syn_challenged: u64,
    /// Segments whose acknowledgment number is outside (SND.UNA −
    /// MAX.SND.WND, SND.MAX]: dropped, answered with a challenge ACK
    /// (RFC 5961 §5.2).
    pub ack_unacceptable: u64,
    /// Challenge ACKs sent (RFC 5961 §3.2, §4.2, §5.2).
    pub challenge_acks: u64,
    /// Challenge ACKs not sent because the stack's budget for the second
    /// was spent ([`Config::challenge_ack_limit`], RFC 5961 §7).
    pub challenge_acks_limited: u64,
    /// ACKs to out-of-window segments without data (challenges included)
    /// not sent because the connection answered one less than
    /// [`Config::invalid_ack_interval`] ago.
    pub invalid_acks_limited: u64,
    /// SYN-ACKs not sent again for a copy of the SYN that opened a
    /// half-open connection (SYN-RECEIVED), because it answered one less
    /// than [`Config::invalid_ack_interval`] ago (Linux
    /// `TCPACKSkippedSynRecv`).
    pub syn_acks_limited: u64,
    /// RSTs sent: the sum of the `resets_*` counters below, which say why.
    pub resets_out: u64,
    /// RSTs sent to a segment for no connection and no listener (RFC 9293
    /// §3.10.7.1; each also counted in `no_connection`).
    pub resets_no_connection: u64,
    /// RSTs sent to an ACK that reached a listener and opened nothing: no
    /// SYN cookie sent lately, or one that did not check (RFC 9293
    /// §3.10.7.2). A peer still sending on a connection this stack no
    /// longer has (closed, or never here) lands here.
    pub resets_listener_ack: u64,
    /// RSTs sent to an ACK that did not acknowledge our SYN, in SYN-SENT or
    /// SYN-RECEIVED (RFC 9293 §3.10.7.3, §3.10.7.4).
    pub resets_handshake_ack: u64,
    /// RSTs sent to SYNs (and returned cookies) the listener's
    /// [`SynFilter`] refused (also counted in `syn_refused`).
    pub resets_refused: u64,
    /// RSTs sent to data for a connection the application had closed
    /// (RFC 2525 §2.17): the connection ended.
    pub resets_data_after_close: u64,
    /// RSTs sent for connections the application aborted or closed with
    /// data unread (RFC 9293 §3.10.5, RFC 2525 §2.17), whose listener
    /// went away before their handshake completed, or that no stack took
    /// when they moved (an import refused).
    pub resets_aborted: u64,
    /// RSTs sent for connections whose retransmissions ran out.
    pub resets_timed_out: u64,
    /// RSTs not sent because the queue was full.
    pub resets_dropped: u64,
    /// Segments to no connection and no listener.
    pub no_connection: u64,
    /// "Packet too big" messages that lowered a connection's MSS (RFC
    /// 1191, RFC 8201; [`Stack::handle_too_big`]).
    pub pmtu_lowered: u64,
    /// "Packet too big" messages ignored: their quoted sequence number was
    /// not in flight (RFC 5927 §4.1: blind or stale), they named no
    /// connection, or they reported no MTU lower than the one in use.
    pub too_big_ignored: u64,
    /// Connection attempts ended by an ICMP destination unreachable
    /// ([`Stack::handle_unreachable`], [`CloseReason::Unreachable`]).
    pub unreachable_ended: u64,
    /// ICMP destination unreachable messages a synchronized connection
    /// kept as its soft error (RFC 1122 §4.2.3.9, RFC 5461; RFC 5927
    /// §5.2: it does not abort on them): told as why it ended if it then
    /// times out ([`CloseReason::Unreachable`]).
    pub unreachable_remembered: u64,
    /// ICMP destination unreachable messages not acted on: their quoted
    /// sequence number was not in flight (RFC 5927 §4.1: blind or stale),
    /// or they named no connection.
    pub unreachable_ignored: u64,
    /// Retransmission timeouts' doublings undone by a network or host
    /// unreachable about the retransmission at SND.UNA (RFC 6069, TCP-LD):
    /// the timer restarted for the halved RTO, or fired at once.
    pub rto_reverts: u64,
    /// Black holes detected (RFC 4821 §7.3): full-sized segments timed
    /// out four times in a row, so the MSS was lowered
    /// ([`Config::mtu_probing`]).
    pub mtu_black_holes: u64,
    /// Path MTU probes sent (RFC 4821 §7.4: one segment larger than the
    /// MSS, new data).
    pub mtu_probes: u64,
    /// Probes acknowledged: the MSS rose to the probe's size (RFC 4821
    /// §7.6.1).
    pub mtu_probe_succeeded: u64,
    /// Probes lost (or reported too big by ICMP and then lost): the
    /// search's upper bound fell below them; repaired without a congestion
    /// response (RFC 4821 §7.6.2).
    pub mtu_probe_failed: u64,
    /// SYNs dropped because the listener backlog was full (and SYN
    /// cookies are off).
    pub syn_dropped: u64,
    /// SYN-ACKs sent with a SYN cookie (the listener's half-open table
    /// was full; [`Config::syn_cookies`]).
    pub syn_cookies_sent: u64,
    /// Connections opened by an ACK that returned a valid SYN cookie.
    pub syn_cookies_accepted: u64,
    /// ACKs to a listener that had sent cookies recently whose cookie did
    /// not check (forged, or too old): answered with an RST.
    pub syn_cookies_failed: u64,
    /// Cookie ACKs whose timestamp option echoed no TSval of ours (our
    /// SYN-ACK carried none): the option ignored (RFC 7323 §3.2), the
    /// connection built without the options a TSecr would carry.
    pub syn_cookies_ts_ignored: u64,
    /// SYNs (and returned SYN cookies) that the listener's
    /// [`SynFilter`] refused: answered with an RST, no state kept.
    pub syn_refused: u64,
    /// SYNs and cookie ACKs dropped because the stack or the listener held
    /// its most connections ([`Config::max_connections`],
    /// [`Config::listener_max_connections`]).
    pub connection_limit_refused: u64,
    /// Connections imported from another stack (a bucket move) while this
    /// one held [`Config::max_connections`] or more: the headroom past the
    /// cap a move may take (an eighth of it; [`Stack::import_bucket`]).
    pub imports_past_cap: u64,
    /// Connections imported from another stack that left this one's
    /// receive memory committed past [`Config::recv_memory`]: a moved
    /// connection's data and offered window are taken whole
    /// ([`Stack::import`]), and until they drain no other window grows.
    pub imports_past_recv_memory: u64,
    /// Connections refused at import ([`Error::ConnectionLimit`]): the stack
    /// held its cap and the headroom past it.
    pub imports_refused_at_cap: u64,
    /// Sends cut short by the stack's send memory ([`Config::send_memory`]):
    /// the connection waits for memory to free.
    pub send_memory_waits: u64,
    /// Bytes of buffer memory given back to the allocator: free chunks past
    /// what the stack keeps for reuse, and those [`Stack::trim_memory`]
    /// found idle (counted at each call of it).
    pub buffer_memory_returned: u64,
    /// SYNs that reopened a connection in TIME-WAIT (RFC 6191: newer
    /// timestamp or sequence number than its last incarnation's).
    pub time_wait_reopened: u64,
    /// SYNs for a connection in TIME-WAIT dropped as possibly old
    /// duplicates (RFC 6191 §2: neither newer timestamp nor sequence).
    pub time_wait_syn_dropped: u64,
    /// TIME-WAIT records dropped before their 2 MSL were over because the
    /// table was full ([`Config::time_wait_max`]).
    pub time_wait_evicted: u64,
    /// Zero-window / persist probes sent.
    pub window_probes: u64,
    /// Keepalive probes sent.
    pub keepalive_probes: u64,
    /// Connections opened actively.
    pub active_opens: u64,
    /// Connections opened passively.
    pub passive_opens: u64,
    /// Connections that reached CLOSED.
    pub closed: u64,
    /// Connections established with ECN negotiated (RFC 3168 §6.1.1).
    pub ecn_negotiated: u64,
    /// Data segments received marked CE on ECN connections (RFC 3168
    /// §6.1.3: each starts or continues echoing ECE).
    pub ce_received: u64,
    /// Congestion window reductions in answer to ECE (RFC 3168 §6.1.2: at
    /// most one per window of data).
    pub ecn_cwnd_reductions: u64,
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    /// `bytes` as `{:?}` prints an array's first three elements.
    fn printed(bytes: &[u8]) -> String {
        format!("{}, {}, {}", bytes[0], bytes[1], bytes[2])
    }

    /// The secret (and the SYN cookie key derived from it) stays out of a
    /// configuration's and a stack's debug output; the rest is shown.
    #[test]
    fn debug_output_redacts_the_secret_and_the_cookie_key() {
        let secret = [0xAB; 16];
        let cfg = Config::new(secret);
        let s = format!("{cfg:?}");
        assert!(!s.contains(&printed(&secret)), "{s}");
        assert!(s.contains("isn_secret: <redacted>"), "{s}");
        assert!(
            s.contains("mss: 1460") && s.contains("handle_tag: 0"),
            "{s}"
        );
        let stack = Stack::new(cfg);
        let d = format!("{stack:?}");
        assert!(!d.contains(&printed(&secret)), "the secret in {d}");
        let cookie_key = isn::derive_key(&secret, b"flowlane syn cookie key");
        assert!(!d.contains(&printed(&cookie_key)), "the cookie key in {d}");
        let challenge_key = isn::derive_key(&secret, b"flowlane rfc5961 challenge budget");
        assert!(
            !d.contains(&printed(&challenge_key)),
            "the challenge key in {d}"
        );
    }
}
