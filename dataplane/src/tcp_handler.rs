//! TCP on the data path: one [`flowlane_tcp::Stack`] per queue, run to
//! completion on the queue's worker, with a handler per listener.
//!
//! ```text
//! RX frame ─ parse once (wire) ─ IPv4/IPv6 + TCP checksums ─ learn peer MAC ─ Stack::handle_tcp
//!          ─ events ─ ConnHandler callbacks (send/recv/close on the same core)
//! on_poll  ─ Stack::handle_timeout ─ events ─ callbacks
//!          ─ Stack::poll_transmit straight into a free UMEM frame at offset 34
//!          ─ emit_eth_ipv4_tcp_headers in front of it (TCP + IPv4 checksums) ─ TX ring
//!            (IPv6: the segment moves 20 bytes up, emit_eth_ipv6_tcp_headers)
//! ```
//!
//! Both address families are served: the stack listens on the interface's
//! IPv4 address and, when it has one, its IPv6 address ([`TcpConfig::local_ip6`]);
//! address resolution (ARP, neighbour discovery) stays with the kernel.
//!
//! Nothing is shared between queues: each worker owns its stack, its
//! neighbour table, its handlers and its ephemeral ports; RSS keeps every
//! segment of a connection on one queue (and [`EphemeralPorts`] makes that
//! true for active opens). The only cross-thread state is [`TcpCounters`],
//! relaxed atomics written by the worker and read by whoever reports.
//!
//! Received payload stays in the UMEM frame it arrived in (zero-copy
//! receive): the worker lends the stack the frame
//! ([`flowlane_tcp::Stack::handle_tcp_frame`] with the frame's slot in the
//! queue's [`HeldFrames`]), the application reads it in place
//! ([`Net::peek`] / [`Net::recv`] resolve kept payload through the held
//! frames), and the frame goes back to the fill ring when its last byte is
//! consumed. Payload the stack cannot keep in its frame (out of order,
//! behind copied bytes, short, or with the queue's held frames at their
//! bound) is copied once into the connection's receive buffer, and the
//! frame goes back at once. Transmitted segments are written by the stack
//! directly into the frame that goes on the TX ring — no intermediate
//! buffer on either side.
//!
//! The application implements [`flowlane_app::ConnHandler`] (events carry a
//! [`ConnHandle`]; calls go through [`flowlane_app::Net`], which this module
//! implements over the queue's stack; [`flowlane_app::Dispatcher`] maps
//! connections to handlers). A service starts through
//! [`crate::TcpService::start`], which makes each queue's [`TcpHandler`]
//! with the interface's own address and MAC and a random ISN secret
//! ([`crate::tcp_service::isn_secret`]), on every queue of the interface:
//!
//! ```no_run
//! use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt};
//! use flowlane_dataplane::{TcpService, TcpServiceConfig};
//!
//! /// Echoes every byte back. `Net::echo` moves only what the send buffer
//! /// takes and leaves the rest unread until `on_writable`, and closes once
//! /// the peer closed and everything went back: nothing is lost to a full
//! /// send buffer.
//! struct Echo {
//!     scratch: Vec<u8>,
//! }
//!
//! impl ConnHandler for Echo {
//!     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         net.echo(conn, &mut self.scratch);
//!     }
//!     fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         net.echo(conn, &mut self.scratch);
//!     }
//! }
//!
//! // Needs root (AF_XDP sockets, the XDP program).
//! let mut config = TcpServiceConfig::new("xsk0");
//! config.listen = vec![7];
//! let service = TcpService::start(config, |h| h.listen(7, Echo { scratch: vec![0; 16384] }))?;
//! // Serve until a queue fails (its handler panicked: the queue resets its
//! // connections) or what the data path attached to goes away.
//! while let Ok(()) = service.dataplane().check() {
//!     std::thread::sleep(std::time::Duration::from_millis(250));
//! }
//! drop(service);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flowlane_app::{CloseReason, ConnHandler, Dispatcher, HandlerId, Net, Placement, Setup, Wake};
use flowlane_numa_sched::RssState;
use flowlane_tcp::time::Instant;
use flowlane_tcp::{
    Config, ConnHandle, Delivery, Ecn, Error, Event, FourTuple, FrameRef, FrameStore, NoFrames,
    Stack, State, Stats,
};
use flowlane_wire::checksum::ChecksumPolicy;
use flowlane_wire::packet::{
    emit_eth_ipv4_tcp_headers, emit_eth_ipv6_tcp_headers, ETH_IPV4_TCP_OFFSET, ETH_IPV6_TCP_OFFSET,
};
use flowlane_wire::{icmp_error, IcmpErrorKind};
use flowlane_wire::{
    is_martian_source, parse_frame_with, EtherType, EthernetAddress, EthernetRepr, Frame,
    IpProtocol, Ipv4Repr, Ipv6Repr, Layer, Network, TcpRepr, Transport, VlanTags, WireError,
};

use crate::bucket_counters::{rss_bucket, BucketCounters, BusySampler, PassClock};
use crate::counters::{self, counters};
use crate::ephemeral::{EphemeralPorts, EPHEMERAL};
use crate::frame_batch::FrameBatch;
use crate::handoff::{Arrival, Mesh, Mover, Reply, Work};
use crate::neighbor::{Confirmation, Neighbors};
use crate::wake::FdWake;
use crate::worker::{
    HeldFrames, NoRing, QueueHandler, QueueInfo, RingAhead, RxAction, RxFrame, SpillPass, TxBatch,
    RX_BUDGET, STOP_PASSES,
};

/// How often the worker copies the stack's counters into [`TcpCounters`].
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// How often a worker trims its stack's free buffer memory
/// ([`Stack::trim_memory`]: half of what lay idle since the last trim goes
/// back to the allocator), with the publication due then.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Segments of each connection a receive pass aims to hold before the
/// ACKs go out ([`QueueHandler::rx_budget`]): about what Linux's receiver
/// acknowledges at once when its application reads 64 KiB at a time (one
/// ACK per 18 segments at 256 connections on the test bed). Out-of-order
/// segments still get an ACK each (RFC 5681 §4.2), sent at the pass's end.
const SEGMENTS_PER_ACK: usize = 16;

/// Connections on a queue (with a slot: compact TIME-WAIT records do not
/// count) from which the worker prefetches each frame's connection state
/// one frame ahead ([`QueueHandler::prefetch`]). Below it, the hot parts
/// of all of them (some 550 bytes each) fit in a core's L2 cache beside
/// the rest of the data path's working set, and the prefetch's own cost
/// (the next frame's endpoints read, the table's probe done a frame
/// early: about 100 instructions a frame more) buys nothing; above it,
/// each frame finds its connection cold (BENCHMARKS.md, session 32).
const PREFETCH_FROM: usize = 512;

/// Connections per part of a bucket's export ([`Stack::export_bucket_part`]):
/// the new worker imports a part while the old one exports the next, so a
/// move of n connections takes about the export of n and the import of
/// one part, not the two in turn. Each part costs a message (and, to a
/// sleeping worker, a wake-up).
const EXPORT_PART: usize = 32;
/// How many connections ahead of the one whose application side it
/// exports a worker prefetches what a moving bucket's connections' export
/// reads beyond the slot ([`TcpHandler::export_bucket`]: the table's and
/// the timer wheel's entries, whose addresses are in the slot), and twice
/// as many ahead the slot itself (eleven lines) and the application
/// entry: a few connections' worth of prefetches in flight.
const MOVE_AHEAD: usize = 4;
/// How long an active open waits for its peer's Ethernet address before
/// it ends ([`CloseReason::Timeout`], counted in `neighbor_unresolved`):
/// about what the kernel's address resolution takes to give up on an
/// address that does not answer (Linux: 3 ARP requests or neighbour
/// solicitations a second apart, `ucast_solicit`/`mcast_solicit` and
/// `retrans_time_ms`; RFC 4861 §7.3.3, `MAX_MULTICAST_SOLICIT` 3,
/// `RETRANS_TIMER` 1 s), after which its connect(2) fails
/// (EHOSTUNREACH). Until then its SYNs find no MAC (`no_neighbor`) while
/// the kernel is asked ([`Neighbors::lookup`]).
pub const UNRESOLVED_GIVE_UP: flowlane_tcp::time::Duration =
    flowlane_tcp::time::Duration::from_secs(3);

/// The frame a worker without a queue builds a segment in: what a UMEM
/// frame holds after its headroom (2 048 - 256 bytes).
const SPILL_FRAME: usize = 1792;

/// Everything a queue's TCP endpoint needs; cloned into every worker.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Our IPv4 address (segments to other addresses are dropped); None on
    /// an interface with an IPv6 address only, whose IPv4 segments are all
    /// dropped (and which opens no IPv4 connection).
    pub local_ip: Option<Ipv4Addr>,
    /// The length of the prefix [`TcpConfig::local_ip`] was given on the
    /// interface (`ip addr add A/N`: N; 32, the default, where it is not
    /// known): its directed broadcast address (every host bit set; none
    /// in a /31, RFC 3021, or a /32) is no peer's, refused as the limited
    /// broadcast is (RFC 1122 §4.2.3.10, §3.2.1.3).
    pub local_prefix_len: u8,
    /// Our IPv6 address, if any: listeners listen on it too, and segments
    /// to it are taken like those to [`TcpConfig::local_ip`].
    pub local_ip6: Option<Ipv6Addr>,
    /// Our Ethernet address (source of every frame we send).
    pub local_mac: EthernetAddress,
    /// Initial neighbour entries (static configuration and the kernel's
    /// table, for active opens); more are learned from received frames.
    pub neighbors: Neighbors,
    /// flowlane's ephemeral port range (inclusive) for active opens; the
    /// XDP program must steer it to flowlane (`DataplaneConfig::ephemeral`,
    /// the same range). None: the queue opens no connections
    /// (`Net::connect` answers [`Error::InvalidState`] at once), as where
    /// the range is not steered its replies would reach the kernel.
    pub ephemeral: Option<(u16, u16)>,
    /// The NIC's RSS configuration: active opens pick ports whose replies
    /// come back to the opening queue (needed with several queues), and
    /// the stack keeps its connections per RSS bucket (for rebalancing;
    /// without it, all are in one bucket).
    pub rss: Option<RssState>,
    /// The TCP stack's configuration (the ISN secret is mixed with the
    /// queue number per worker).
    pub tcp: Config,
    /// Set when the service's stop begins ([`TcpConfig::stopping`]'s
    /// clones are shared by every worker): each worker's next pass refuses
    /// its listeners' SYNs and asks its handlers about each connection
    /// ([`flowlane_app::ConnHandler::on_stop`]), publishing how many they
    /// are finishing (`finishing`), which the stop's drain waits for.
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
}

impl TcpConfig {
    /// Defaults: the stack's default configuration keyed by `isn_secret`,
    /// no IPv6 address, ephemeral ports [`EPHEMERAL`] (which
    /// `DataplaneConfig::ephemeral` must steer, for active opens), no
    /// static neighbours, no RSS. `local_ip`: an address, or None for an
    /// interface with an IPv6 one only ([`TcpConfig::local_ip6`], which must
    /// then be set).
    pub fn new(
        local_ip: impl Into<Option<Ipv4Addr>>,
        local_mac: [u8; 6],
        isn_secret: [u8; 16],
    ) -> TcpConfig {
        TcpConfig {
            local_ip: local_ip.into(),
            local_prefix_len: 32,
            local_ip6: None,
            local_mac: EthernetAddress(local_mac),
            neighbors: Neighbors::new(),
            ephemeral: Some(EPHEMERAL),
            rss: None,
            tcp: Config::new(isn_secret),
            stopping: Arc::default(),
        }
    }
}

/// Our addresses on the interface: one per family.
#[derive(Debug, Clone, Copy)]
struct LocalAddrs {
    v4: Option<Ipv4Addr>,
    /// The directed broadcast address of `v4`'s prefix, if it has one.
    v4_broadcast: Option<Ipv4Addr>,
    v6: Option<Ipv6Addr>,
}

impl LocalAddrs {
    /// `v4` given with a prefix of `prefix_len` bits, and `v6`.
    fn new(v4: Option<Ipv4Addr>, prefix_len: u8, v6: Option<Ipv6Addr>) -> LocalAddrs {
        // A /31 or /32 has no broadcast address (RFC 3021).
        let v4_broadcast = v4
            .filter(|_| prefix_len <= 30)
            .map(|v4| Ipv4Addr::from(u32::from(v4) | (u32::MAX >> prefix_len)));
        LocalAddrs {
            v4,
            v4_broadcast,
            v6,
        }
    }

    /// Whether `ip` can be no peer's (RFC 1122 §3.2.1.3, §4.2.3.10):
    /// broadcast (the limited one, or our prefix's directed one),
    /// multicast, this network, loopback, or one of our own addresses.
    #[inline]
    fn no_peer(&self, ip: IpAddr) -> bool {
        is_martian_source(ip)
            || self.is_ours(ip)
            || matches!(ip, IpAddr::V4(a) if Some(a) == self.v4_broadcast)
    }

    /// Our address of `peer`'s family, if we have one.
    fn of_family(&self, peer: IpAddr) -> Option<IpAddr> {
        match peer {
            IpAddr::V4(_) => self.v4.map(IpAddr::V4),
            IpAddr::V6(_) => self.v6.map(IpAddr::V6),
        }
    }

    /// Whether `ip` is one of ours.
    #[inline]
    fn is_ours(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => Some(a) == self.v4,
            IpAddr::V6(a) => Some(a) == self.v6,
        }
    }

    /// What a listener on `port` listens on: our IPv4 address, or, when
    /// we have an IPv6 one (beside it or alone), the unspecified address,
    /// which the stack matches in both families (frames to addresses not
    /// ours never reach it: [`TcpHandler::input`] drops them).
    fn listen_addr(&self, port: u16) -> SocketAddr {
        match (self.v4, self.v6) {
            (Some(v4), None) => SocketAddr::new(v4.into(), port),
            _ => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
        }
    }
}

/// A TCP segment of a parsed frame: its addresses (IPv4 or IPv6), the
/// IP header's ECN codepoint (RFC 3168 §5) and the TCP header.
struct Segment<'f> {
    src: IpAddr,
    dst: IpAddr,
    ecn: Ecn,
    tcp: &'f TcpRepr,
}

/// The TCP segment of a parsed frame; `None` for anything else.
#[inline]
fn tcp_segment<'f>(f: &'f Frame<'_>) -> Option<Segment<'f>> {
    let Transport::Tcp(tcp) = &f.transport else {
        return None;
    };
    let (src, dst, ecn) = match &f.network {
        Network::Ipv4(ip) => (ip.src_addr.into(), ip.dst_addr.into(), ip.ecn),
        Network::Ipv6(ip) => (ip.src_addr.into(), ip.dst_addr.into(), ip.traffic_class),
        _ => return None,
    };
    Some(Segment {
        src,
        dst,
        ecn: Ecn::from_bits(ecn),
        tcp,
    })
}

/// The queue's held frames resolve the payload the stack kept in them.
impl FrameStore for HeldFrames {
    fn frame(&self, id: u32) -> &[u8] {
        HeldFrames::frame(self, id)
    }
}

/// What became of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Not taken by the stack (not ours, malformed, held or forwarded for a
    /// bucket move, ICMP).
    Passed,
    /// Taken by the stack; the frame is free again.
    Taken,
    /// Taken, and its payload kept in the frame (lent with a slot).
    Kept,
}

/// [`Net`] over a queue's stack: what a handler's calls do on this queue.
struct StackNet<'a> {
    stack: &'a mut Stack,
    /// Where the payload the stack kept in received frames lies.
    frames: &'a dyn FrameStore,
    /// None: the queue has no ephemeral range and opens nothing.
    opens: Option<&'a mut ActiveOpens>,
    local: &'a LocalAddrs,
    now: Instant,
    placement: Placement,
    /// The queue's waker, made on first ask.
    wake: &'a mut Option<Arc<FdWake>>,
}

impl Net for StackNet<'_> {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now.as_nanos())
    }

    fn placement(&self) -> Placement {
        self.placement
    }

    /// A port of the ephemeral range whose replies RSS steers to this queue,
    /// drawn from the destination's keyed hash (RFC 6056 §3.3.4) among
    /// those whose tuple is free: [`Error::AddrInUse`] only when none is,
    /// [`Error::NotSteeredHere`] when the RSS table gives the queue no
    /// bucket (no port's replies would reach it).
    /// [`Error::InvalidAddress`] at once, nothing sent, for a peer that
    /// cannot be one (broadcast, our prefix's directed one too
    /// ([`TcpConfig::local_prefix_len`]), multicast, loopback, this
    /// network, our own address).
    /// [`Error::InvalidState`] at once, nothing sent, on a queue without
    /// an ephemeral range ([`TcpConfig::ephemeral`]; a `TcpService` not
    /// started `active`): its SYN's replies would reach the kernel, and the
    /// open would retry unanswered for a minute. An open whose peer's
    /// Ethernet address does not resolve ends after
    /// [`UNRESOLVED_GIVE_UP`], as [`CloseReason::Timeout`].
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnHandle, Error> {
        let opens = self.opens.as_deref_mut().ok_or(Error::InvalidState)?;
        // An IPv4-mapped peer (`::ffff:10.99.0.2`, as a dual-stack socket
        // names an IPv4 one) is its IPv4 address, as connect(2) on such a
        // socket takes it: no IPv6 packet may carry a mapped address (RFC
        // 4291 §2.5.5.2).
        let remote = SocketAddr::new(remote.ip().to_canonical(), remote.port());
        // RFC 1122 §4.2.3.10: an OPEN to a broadcast (our prefix's
        // directed one too) or multicast address is an error; so is one
        // to an address no peer can answer from (this network, loopback:
        // martian sources, as `on_rx` drops them) or to one of ours (the
        // data path sends to the wire, not to itself). Refused at once,
        // nothing sent.
        if self.local.no_peer(remote.ip()) {
            return Err(Error::InvalidAddress);
        }
        let ports = &mut opens.ports;
        // Our address of the peer's family.
        let local_ip = self
            .local
            .of_family(remote.ip())
            .ok_or(Error::InvalidAddress)?;
        let stack = &*self.stack;
        let port = ports
            .next(local_ip, remote, stack.port_hash(local_ip, remote), |p| {
                stack.tuple_free(SocketAddr::new(local_ip, p), remote)
            })
            .ok_or(if ports.steered_here() {
                Error::AddrInUse
            } else {
                Error::NotSteeredHere
            })?;
        let conn = self
            .stack
            .connect(self.now, SocketAddr::new(local_ip, port), remote)?;
        opens.watch(self.now, conn, self.stack.config().max_connections);
        Ok(conn)
    }

    fn send(&mut self, conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        self.stack.send(conn, data)
    }

    fn recv(&mut self, conn: ConnHandle, buf: &mut [u8]) -> Result<usize, Error> {
        self.stack.recv_in(conn, buf, self.frames)
    }

    fn peek(&self, conn: ConnHandle) -> Result<&[u8], Error> {
        self.stack.peek_in(conn, self.frames)
    }

    fn consume(&mut self, conn: ConnHandle, n: usize) -> Result<usize, Error> {
        self.stack.consume(conn, n)
    }

    fn is_eof(&self, conn: ConnHandle) -> bool {
        self.stack.is_eof(conn).unwrap_or(false)
    }

    fn send_space(&self, conn: ConnHandle) -> Result<usize, Error> {
        self.stack.send_space(conn)
    }

    fn want_writable(&mut self, conn: ConnHandle) -> bool {
        if self.stack.send_space(conn).unwrap_or(1) > 0 {
            return false;
        }
        self.stack.want_writable(conn).is_ok()
    }

    fn shutdown_write(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.stack.shutdown_write(conn)
    }

    fn close(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.stack.close(conn)
    }

    fn abort(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.stack.abort(conn)
    }

    fn set_nodelay(&mut self, conn: ConnHandle, nodelay: bool) -> Result<(), Error> {
        self.stack.set_nodelay(conn, nodelay)
    }

    fn set_congestion(
        &mut self,
        conn: ConnHandle,
        alg: flowlane_tcp::CongestionAlgorithm,
    ) -> Result<(), Error> {
        self.stack.set_congestion(conn, alg)
    }

    fn set_keepalive(&mut self, conn: ConnHandle, on: bool) -> Result<(), Error> {
        self.stack.set_keepalive(conn, on)
    }

    fn set_send_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.stack.set_send_buffer(conn, bytes)
    }

    fn set_recv_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.stack.set_recv_buffer(conn, bytes)
    }

    fn info(&self, conn: ConnHandle) -> Result<flowlane_tcp::ConnInfo, Error> {
        self.stack.info(conn)
    }

    fn four_tuple(&self, conn: ConnHandle) -> Result<FourTuple, Error> {
        self.stack.four_tuple(conn)
    }

    fn state(&self, conn: ConnHandle) -> Result<State, Error> {
        self.stack.state(conn)
    }

    fn set_user_data(&mut self, conn: ConnHandle, data: u64) -> Result<(), Error> {
        self.stack.set_user_data(conn, data)
    }

    fn user_data(&self, conn: ConnHandle) -> Result<u64, Error> {
        self.stack.user_data(conn)
    }

    fn stats(&self) -> &Stats {
        self.stack.stats()
    }

    fn waker(&mut self) -> Option<Arc<dyn Wake>> {
        if self.wake.is_none() {
            *self.wake = FdWake::new().ok();
        }
        self.wake.clone().map(|w| w as Arc<dyn Wake>)
    }
}

/// What a queue that opens connections keeps for them: the ephemeral
/// ports, and its opens in SYN-SENT, oldest first, each with when it gives
/// up on its peer's Ethernet address ([`UNRESOLVED_GIVE_UP`]).
#[derive(Debug)]
struct ActiveOpens {
    ports: EphemeralPorts,
    /// (give up at, connection), in the order of the opens: at most the
    /// stack's connection limit (past it, an open is not watched, and ends
    /// as its SYNs' retransmissions run out).
    watched: VecDeque<(Instant, ConnHandle)>,
    /// Peers a segment (an open's SYN) found no Ethernet address for, and
    /// until when to look for it: once it resolves, their watched opens'
    /// SYNs go again at once ([`TcpHandler::resend_resolved_syns`]), not a
    /// retransmission timeout (a second) later. At most
    /// [`MAX_UNSENT_PEERS`].
    unsent: Vec<(IpAddr, Instant)>,
    /// When to look at `unsent` next.
    next_look: Instant,
}

/// Peers whose opens' SYNs wait for their address at once (past it, an
/// open waits for its retransmission timeout, as before).
const MAX_UNSENT_PEERS: usize = 64;

/// How often a worker looks whether a peer its SYNs wait for resolved.
const UNSENT_LOOK_EVERY: flowlane_tcp::time::Duration =
    flowlane_tcp::time::Duration::from_millis(1);

impl ActiveOpens {
    fn new(ports: EphemeralPorts) -> ActiveOpens {
        ActiveOpens {
            ports,
            watched: VecDeque::new(),
            unsent: Vec::new(),
            next_look: Instant::ZERO,
        }
    }

    /// A segment to `peer` found no Ethernet address at `now`.
    fn note_unsent(&mut self, now: Instant, peer: IpAddr) {
        if self.unsent.len() < MAX_UNSENT_PEERS && !self.unsent.iter().any(|&(p, _)| p == peer) {
            self.unsent.push((peer, now + UNRESOLVED_GIVE_UP));
            self.next_look = now + UNSENT_LOOK_EVERY;
        }
    }

    /// Watches the open `conn` made at `now`, while fewer than `most` are.
    fn watch(&mut self, now: Instant, conn: ConnHandle, most: usize) {
        if self.watched.len() < most {
            self.watched.push_back((now + UNRESOLVED_GIVE_UP, conn));
        }
    }
}

counters! {
    /// One queue's TCP counters, written by its worker (frame-level ones as
    /// they happen, the stack's every 50 ms) and read by anyone.
    TcpCounters / TcpCountersSnapshot {
        /// TCP frames (IPv4 or IPv6) for our address that reached the stack.
        segments_in,
        /// Segments sent.
        segments_out,
        /// Frames whose IPv4 header checksum failed.
        bad_ip_checksum,
        /// TCP segments whose checksum failed (dropped before the stack).
        bad_tcp_checksum,
        /// Frames that failed to parse or that the codec refuses (truncated,
        /// bad lengths, an IPv6 option RFC 8200 §4.2 says to discard …).
        malformed,
        /// Parsed frames that are not TCP (or a path MTU signal) to our
        /// address, or not sent to our MAC (a broadcast, multicast or
        /// another host's frame).
        not_ours,
        /// TCP segments from a source no datagram may have (broadcast, our
        /// prefix's directed one too, multicast, 0/8, loopback, or one of
        /// our own addresses: RFC 1122 §3.2.1.3), dropped before the stack:
        /// a SYN from one would hold a half-open slot and draw a SYN-ACK to
        /// that address.
        martian_source,
        /// Segments not sent because no MAC was known for the peer.
        no_neighbor,
        /// Active opens ended (`CloseReason::Timeout`) because their peer's
        /// MAC did not resolve within 3 s (`UNRESOLVED_GIVE_UP`: no answer
        /// to the kernel's ARP or neighbour solicitations; Linux's
        /// connect(2) fails with EHOSTUNREACH then).
        neighbor_unresolved,
        /// Neighbour entries, configured and confirmed (a gauge; sightings not included).
        neighbor_entries,
        /// Learned neighbours evicted to make room (least recently used first).
        neighbor_evicted,
        /// Frames whose source MAC was not their address's confirmed one (not learned).
        neighbor_mismatched,
        /// Frames a connection took from an address whose fresh confirmed
        /// entry has another MAC: not confirmed (one peer's connection does
        /// not take another's address over while that one talks).
        neighbor_confirm_refused,
        /// Live connections (any state but CLOSED, TIME-WAIT included).
        connections,
        /// Of those, closed connections held as compact TIME-WAIT records (a gauge).
        time_wait,
        /// Live connections in SYN-SENT (a gauge; the states' gauges add up
        /// to `connections`).
        in_syn_sent,
        /// Live connections in SYN-RECEIVED (half-open; a gauge).
        in_syn_received,
        /// Live connections in ESTABLISHED (a gauge).
        in_established,
        /// Live connections in FIN-WAIT-1 (a gauge).
        in_fin_wait1,
        /// Live connections in FIN-WAIT-2 (a gauge).
        in_fin_wait2,
        /// Live connections in CLOSING (a gauge).
        in_closing,
        /// Connections in TIME-WAIT, held in full or as compact records (a gauge).
        in_time_wait,
        /// Live connections in CLOSE-WAIT: the peer closed, the application
        /// has not (a gauge).
        in_close_wait,
        /// Live connections in LAST-ACK (a gauge).
        in_last_ack,
        /// Connections opened passively.
        passive_opens,
        /// Connections opened actively.
        active_opens,
        /// Connections that reached CLOSED.
        closed,
        /// Payload bytes delivered in order.
        bytes_in,
        /// Payload bytes sent (with retransmissions).
        bytes_out,
        /// Segments retransmitted.
        retransmits,
        /// Fast retransmits.
        fast_retransmits,
        /// Retransmission timeouts.
        rto_timeouts,
        /// Retransmission timeouts' doublings undone by a network or host unreachable
        /// about the retransmission at SND.UNA (RFC 6069, TCP-LD).
        rto_reverts,
        /// Segments received out of order.
        out_of_order,
        /// In-order data segments taken by header prediction.
        predicted,
        /// Segments whose connection the worker had named one frame ahead
        /// and prefetched (their table lookup skipped; from
        /// `PREFETCH_FROM` connections a queue).
        expected,
        /// SYNs that reopened a connection in TIME-WAIT (RFC 6191).
        time_wait_reopened,
        /// SYNs for a connection in TIME-WAIT dropped as possible old duplicates.
        time_wait_syn_dropped,
        /// TIME-WAIT records dropped early because the table was full.
        time_wait_evicted,
        /// Segments failing the sequence test.
        unacceptable,
        /// Segments dropped for their flags (no ACK where one is needed, an
        /// RST or a SYN with FIN at a listener, no SYN-ACK in SYN-SENT).
        bad_flags,
        /// Out-of-order segments dropped: the reassembler had no room for another hole.
        ooo_dropped,
        /// Segments inside the offered window cut short: the receive buffer had no room.
        recv_buffer_overrun,
        /// Segments whose window retracted the edge by under one unit of the window scale.
        window_retractions,
        /// FINs received ahead of a hole and forgotten: data then arrived past them.
        fin_overrun,
        /// Connections whose out-of-order data was given up (RFC 2018 §8): idle a
        /// second with a hole while the receive memory was under pressure.
        ooo_reneged,
        /// Connections whose receive window was parked under memory pressure: they
        /// received less than a segment over a second (idle or trickling), and
        /// committed nothing until they received a segment's worth.
        recv_parked,
        /// Segments for no connection and no listener (answered with an RST).
        no_connection,
        /// ICMP "packet too big" messages that lowered a connection's MSS (RFC 1191, RFC 8201).
        pmtu_lowered,
        /// "Packet too big" messages ignored: not about data in flight (RFC 5927), no
        /// connection, or no lower MTU.
        too_big_ignored,
        /// Connection attempts ended by an ICMP destination unreachable quoting their
        /// SYN or SYN-ACK (RFC 1122 §4.2.3.9, RFC 5461).
        unreachable_ended,
        /// ICMP destination unreachable messages a synchronized connection kept as its
        /// soft error (RFC 1122 §4.2.3.9, RFC 5461): the reason it ends with if it then
        /// times out with no ACK in between.
        unreachable_remembered,
        /// ICMP destination unreachable messages not acted on: not about data in flight
        /// (RFC 5927 §4.1), or no connection.
        unreachable_ignored,
        /// Path MTU black holes detected (RFC 4821 §7.3): full-sized segments timed
        /// out repeatedly, so the MSS was lowered.
        mtu_black_holes,
        /// Path MTU probes sent (RFC 4821 §7.4).
        mtu_probes,
        /// Path MTU probes acknowledged: the MSS rose (RFC 4821 §7.6.1).
        mtu_probe_succeeded,
        /// Path MTU probes lost: the search's top fell (RFC 4821 §7.6.2).
        mtu_probe_failed,
        /// Segments RACK deemed lost (RFC 8985 §6.2).
        rack_lost,
        /// D-SACK blocks beyond what the connection retransmitted (ignored).
        dsack_unexpected,
        /// RACK reordering timer expirations (RFC 8985 §6.3).
        rack_reo_timeouts,
        /// Loss probes at SND.UNA (two round trips without progress, without
        /// RACK-TLP or in fast recovery; also counted as retransmissions).
        loss_probes,
        /// Tail loss probes sent (RFC 8985 §7).
        tlp_probes,
        /// Losses a tail loss probe repaired (RFC 8985 §7.4).
        tlp_recoveries,
        /// Fast recoveries found spurious (RFC 3522) and undone (RFC 4015).
        spurious_recoveries,
        /// Connections that negotiated ECN (RFC 3168 §6.1.1).
        ecn_negotiated,
        /// Data segments received marked CE (congestion experienced) on ECN connections.
        ce_received,
        /// Congestion window reductions on an ECN-Echo (at most one per window).
        ecn_cwnd_reductions,
        /// RSTs not sent: the queue of RSTs to send was full.
        resets_dropped,
        /// Segments the stack found malformed.
        tcp_malformed,
        /// RSTs received and acted upon.
        resets_in,
        /// RSTs sent: the sum of the seven `resets_*` reasons below.
        resets_out,
        /// RSTs sent to segments for no connection and no listener.
        resets_no_connection,
        /// RSTs sent to ACKs a listener took for no connection of its own
        /// (a peer still sending on a connection this queue does not have).
        resets_listener_ack,
        /// RSTs sent to ACKs that did not acknowledge our SYN (SYN-SENT, SYN-RECEIVED).
        resets_handshake_ack,
        /// RSTs sent to SYNs (and returned cookies) a SYN filter refused.
        resets_refused,
        /// RSTs sent to data for connections their application had closed (RFC 2525).
        resets_data_after_close,
        /// RSTs sent for connections the application aborted or closed with data unread.
        resets_aborted,
        /// RSTs sent for connections whose retransmissions ran out.
        resets_timed_out,
        /// In-window RSTs not at RCV.NXT, challenged (RFC 5961 §3.2).
        rst_challenged,
        /// RSTs outside the window, dropped (RFC 5961 §3.2).
        rst_out_of_window,
        /// RSTs for connections in TIME-WAIT, ignored (RFC 1337).
        rst_in_time_wait,
        /// SYNs for synchronized connections, challenged (RFC 5961 §4.2).
        syn_challenged,
        /// Segments whose ACK is outside the acceptable range, dropped (RFC 5961 §5.2).
        ack_unacceptable,
        /// Challenge ACKs sent.
        challenge_acks,
        /// Challenge ACKs not sent: the stack's budget for the second was spent (RFC 5961 §7).
        challenge_acks_limited,
        /// ACKs to out-of-window segments not sent: the connection answered one too recently.
        invalid_acks_limited,
        /// SYN-ACKs not sent again for a copy of a half-open connection's SYN: it answered one too recently.
        syn_acks_limited,
        /// Segments dropped by PAWS (RFC 7323 §5).
        paws_rejected,
        /// SYNs dropped because the listener's backlog was full (SYN cookies off).
        syn_dropped,
        /// SYN-ACKs sent with a SYN cookie (a listener's half-open table was full).
        syn_cookies_sent,
        /// Connections opened by an ACK returning a valid SYN cookie.
        syn_cookies_accepted,
        /// ACKs whose SYN cookie did not check (forged or too old).
        syn_cookies_failed,
        /// Cookie ACKs whose timestamp option echoed none of ours: ignored (RFC 7323 §3.2).
        syn_cookies_ts_ignored,
        /// SYNs (and returned SYN cookies) a listener's SYN filter refused.
        syn_refused,
        /// SYNs and cookie ACKs dropped: the queue's stack or the listener held its most connections.
        connection_limit_refused,
        /// Connections of buckets moved here taken while the stack held its most connections (within an eighth past it).
        imports_past_cap,
        /// Connections of buckets moved here refused: the stack held its most connections and the eighth past it.
        imports_refused_at_cap,
        /// Connections of buckets moved here that left the queue's receive memory committed past its budget (taken whole).
        imports_past_recv_memory,
        /// Connections a handler's `admit` refused (reset before `on_accept`).
        application_refused,
        /// Connections whose handler, at the service's stop, said it would
        /// close them (`AtStop::Finish`) and has not yet (a gauge).
        finishing,
        /// RSS buckets this queue gave to another (rebalancing).
        buckets_out,
        /// RSS buckets this queue took over.
        buckets_in,
        /// Frames of buckets that left this queue, forwarded to their new queue.
        frames_forwarded,
        /// Of those, TCP segments that reached this queue after it had told
        /// the new queue that it was drained, the NIC's entry rewritten (they
        /// arrive there out of order); not ICMP errors, nor the frames of a
        /// bucket whose entry could not be written.
        frames_forwarded_late,
        /// The longest a frame forwarded late came after its bucket's drain
        /// marker, µs (a gauge, since the service started).
        frames_late_max_us,
        /// Frames forwarded here by other queues.
        frames_forwarded_in,
        /// Frames of buckets being taken over, held until the old queue drained.
        frames_held,
        /// Takeovers that stopped holding on the timeout, not the old queue's
        /// marker (nor the controller's cancel).
        hold_timeouts,
        /// Exports whose bucket's rewrite never came (the controller gave
        /// the move up unheard): the old queue stopped waiting after its bound.
        rewrite_timeouts,
        /// Frames not forwarded or held (no queue to forward to, forwarded
        /// too often, the new queue's inbox full for too long, or more held
        /// than a takeover keeps).
        forward_dropped,
        /// Connections that could not be imported with their bucket.
        import_failed,
        /// Frames of buckets served by a worker without a queue, forwarded
        /// to it by the worker of the queue that carries them (software
        /// spill).
        spill_forwarded,
        /// Frames a worker without a queue handed to its carrier to send.
        spill_handed,
        /// Frames this queue took from workers without a queue to send
        /// (they go out as its TX ring has room, in order; past 4 096
        /// waiting they are dropped and counted in `forward_dropped`).
        spill_transmitted,
        /// The most live connections the stack takes (its `max_connections`;
        /// imports of moved buckets may go an eighth past it, no further):
        /// the rebalancer moves no bucket that would take the queue past it.
        connection_limit,
        /// Publications of the per-bucket counters ([`BucketCounters`]),
        /// twice each: odd while the worker writes them, even once they,
        /// `buckets_published_ns` and `buckets_busy_ns` agree (the
        /// rebalancer reads until it sees the same even count before and
        /// after them).
        buckets_published_seq,
        /// The worker's clock (ns since the data path started) at the last
        /// publication of the per-bucket counters.
        buckets_published_ns,
        /// The worker's busy time (ns) up to that moment, as its passes that
        /// did work measure it (`PassClock`): what the rebalancer divides
        /// between the buckets published with it.
        buckets_busy_ns,
        /// Bytes of buffer memory the connections hold now (a gauge).
        buffer_memory,
        /// Bytes of free buffer memory the stack keeps for reuse (a gauge):
        /// what a busy spell left, halved each second it lies idle
        /// ([`Stack::trim_memory`]).
        buffer_memory_cached,
        /// Bytes of buffer memory the stack gave back to the allocator
        /// (`Stats::buffer_memory_returned`): what the service's heap trim
        /// (`heap_trim`, on the service's thread) watches.
        buffer_memory_returned,
        /// Receive memory committed now, of the stack's budget (a gauge).
        recv_memory_committed,
        /// Segments whose payload stayed in the frame it arrived in
        /// (zero-copy receive) until the application read it.
        frames_kept,
        /// Received frames the stack holds now, unread (a gauge; at most a
        /// quarter of the queue's frames).
        frames_lent,
        /// Kernel sockets only: the most bytes of receive buffers the
        /// core's connections held at once (a gauge, bounded by its
        /// receive memory).
        rx_memory_peak,
        /// Kernel sockets only: reads that waited for receive memory (the
        /// connection left unread, so that the kernel's window closes).
        rx_memory_waits,
        /// Kernel sockets only: the most bytes of send buffers held at once
        /// (a gauge, bounded by the core's send memory).
        tx_memory_peak,
        /// Writes taken only in part for want of send memory (the
        /// application is told to wait for writable): a kernel-socket
        /// core's, or the queue's stack's (`Config::send_memory`).
        tx_memory_waits,
    }
}

impl TcpCounters {
    /// Copies the stack's counters (the worker, every [`PUBLISH_EVERY`]).
    fn publish(&self, stack: &Stack) {
        let set = counters::set;
        let s = stack.stats();
        set(&self.connections, stack.connection_count() as u64);
        set(&self.time_wait, stack.time_wait_count() as u64);
        let state = |st| stack.connections_in(st) as u64;
        set(&self.in_syn_sent, state(State::SynSent));
        set(&self.in_syn_received, state(State::SynReceived));
        set(&self.in_established, state(State::Established));
        set(&self.in_fin_wait1, state(State::FinWait1));
        set(&self.in_fin_wait2, state(State::FinWait2));
        set(&self.in_closing, state(State::Closing));
        set(&self.in_time_wait, state(State::TimeWait));
        set(&self.in_close_wait, state(State::CloseWait));
        set(&self.in_last_ack, state(State::LastAck));
        set(&self.buffer_memory, stack.buffer_memory() as u64);
        set(&self.buffer_memory_cached, stack.cached_memory() as u64);
        set(&self.buffer_memory_returned, s.buffer_memory_returned);
        set(
            &self.recv_memory_committed,
            stack.recv_memory_committed() as u64,
        );
        set(&self.passive_opens, s.passive_opens);
        set(&self.active_opens, s.active_opens);
        set(&self.closed, s.closed);
        set(&self.bytes_in, s.bytes_in);
        set(&self.frames_kept, s.frames_kept);
        set(&self.frames_lent, stack.lent_frames() as u64);
        set(&self.bytes_out, s.bytes_out);
        set(&self.retransmits, s.retransmits);
        set(&self.fast_retransmits, s.fast_retransmits);
        set(&self.rto_timeouts, s.rto_timeouts);
        set(&self.rto_reverts, s.rto_reverts);
        set(&self.out_of_order, s.out_of_order);
        set(&self.predicted, s.predicted);
        set(&self.expected, s.expected);
        set(&self.time_wait_reopened, s.time_wait_reopened);
        set(&self.time_wait_syn_dropped, s.time_wait_syn_dropped);
        set(&self.time_wait_evicted, s.time_wait_evicted);
        set(&self.unacceptable, s.unacceptable);
        set(&self.bad_flags, s.bad_flags);
        set(&self.ooo_dropped, s.ooo_dropped);
        set(&self.recv_buffer_overrun, s.recv_buffer_overrun);
        set(&self.window_retractions, s.window_retractions);
        set(&self.fin_overrun, s.fin_overrun);
        set(&self.ooo_reneged, s.ooo_reneged);
        set(&self.recv_parked, s.recv_parked);
        set(&self.loss_probes, s.loss_probes);
        set(&self.no_connection, s.no_connection);
        set(&self.pmtu_lowered, s.pmtu_lowered);
        set(&self.too_big_ignored, s.too_big_ignored);
        set(&self.unreachable_ended, s.unreachable_ended);
        set(&self.unreachable_remembered, s.unreachable_remembered);
        set(&self.unreachable_ignored, s.unreachable_ignored);
        set(&self.mtu_black_holes, s.mtu_black_holes);
        set(&self.mtu_probes, s.mtu_probes);
        set(&self.mtu_probe_succeeded, s.mtu_probe_succeeded);
        set(&self.mtu_probe_failed, s.mtu_probe_failed);
        set(&self.rack_lost, s.rack_lost);
        set(&self.dsack_unexpected, s.dsack_unexpected);
        set(&self.rack_reo_timeouts, s.rack_reo_timeouts);
        set(&self.tlp_probes, s.tlp_probes);
        set(&self.tlp_recoveries, s.tlp_recoveries);
        set(&self.spurious_recoveries, s.spurious_recoveries);
        set(&self.ecn_negotiated, s.ecn_negotiated);
        set(&self.ce_received, s.ce_received);
        set(&self.ecn_cwnd_reductions, s.ecn_cwnd_reductions);
        set(&self.resets_dropped, s.resets_dropped);
        set(&self.tcp_malformed, s.malformed);
        set(&self.resets_in, s.resets_in);
        set(&self.resets_out, s.resets_out);
        set(&self.resets_no_connection, s.resets_no_connection);
        set(&self.resets_listener_ack, s.resets_listener_ack);
        set(&self.resets_handshake_ack, s.resets_handshake_ack);
        set(&self.resets_refused, s.resets_refused);
        set(&self.resets_data_after_close, s.resets_data_after_close);
        set(&self.resets_aborted, s.resets_aborted);
        set(&self.resets_timed_out, s.resets_timed_out);
        set(&self.rst_challenged, s.rst_challenged);
        set(&self.rst_out_of_window, s.rst_out_of_window);
        set(&self.rst_in_time_wait, s.rst_in_time_wait);
        set(&self.syn_challenged, s.syn_challenged);
        set(&self.ack_unacceptable, s.ack_unacceptable);
        set(&self.challenge_acks, s.challenge_acks);
        set(&self.challenge_acks_limited, s.challenge_acks_limited);
        set(&self.invalid_acks_limited, s.invalid_acks_limited);
        set(&self.syn_acks_limited, s.syn_acks_limited);
        set(&self.paws_rejected, s.paws_rejected);
        set(&self.syn_dropped, s.syn_dropped);
        set(&self.syn_cookies_sent, s.syn_cookies_sent);
        set(&self.syn_cookies_accepted, s.syn_cookies_accepted);
        set(&self.syn_cookies_failed, s.syn_cookies_failed);
        set(&self.syn_cookies_ts_ignored, s.syn_cookies_ts_ignored);
        set(&self.syn_refused, s.syn_refused);
        set(&self.connection_limit_refused, s.connection_limit_refused);
        set(&self.imports_past_cap, s.imports_past_cap);
        set(&self.imports_refused_at_cap, s.imports_refused_at_cap);
        set(&self.imports_past_recv_memory, s.imports_past_recv_memory);
        set(&self.tx_memory_waits, s.send_memory_waits);
        set(&self.segments_out, s.segments_out);
    }

    /// Copies the worker's move counts.
    fn publish_moves(&self, mover: Option<&Mover>) {
        let Some(m) = mover else {
            return;
        };
        let (set, s) = (counters::set, m.stats);
        set(&self.buckets_out, s.buckets_out);
        set(&self.buckets_in, s.buckets_in);
        set(&self.frames_forwarded, s.frames_forwarded);
        set(&self.frames_forwarded_late, s.frames_forwarded_late);
        set(&self.frames_late_max_us, s.late_max_us);
        set(&self.frames_forwarded_in, s.frames_forwarded_in);
        set(&self.frames_held, s.frames_held);
        set(&self.hold_timeouts, s.hold_timeouts);
        set(&self.rewrite_timeouts, s.rewrite_timeouts);
        set(&self.forward_dropped, s.forward_dropped);
        set(&self.import_failed, s.import_failed);
        set(&self.spill_forwarded, s.spill_forwarded);
        set(&self.spill_handed, s.spill_tx_out);
        set(&self.spill_transmitted, s.spill_tx_in);
    }
}

/// The receive memory a queue's stack may promise ([`flowlane_tcp::Config::recv_memory`]):
/// half of the frames it receives into, a segment each. Every byte a
/// window offers can be in flight towards the queue at once, one segment
/// per frame; the other half covers the segment every connection may
/// always be offered outside the budget (for up to that many connections).
/// So the windows never promise more than the frames hold, and the
/// receiver never makes the sender retransmit by running out of frames —
/// but for connections moved in from another queue: the stack takes their
/// data and offered windows past its budget (they can be neither dropped
/// nor taken back), so until they drain a burst can outrun the frames.
fn recv_memory_for(rx_frames: u32, mss: u16) -> usize {
    (rx_frames as usize / 2) * usize::from(mss)
}

/// A queue's TCP endpoint: a [`QueueHandler`] owning the queue's stack,
/// neighbour table, ephemeral ports and application handlers.
pub struct TcpHandler {
    stack: Stack,
    local: LocalAddrs,
    local_mac: EthernetAddress,
    neighbors: Neighbors,
    /// The sender (IP, MAC) of the frame the stack is taking now: the
    /// events it causes confirm it as a neighbour.
    rx_sender: Option<(IpAddr, EthernetAddress)>,
    /// None: no ephemeral range ([`TcpConfig::ephemeral`]).
    opens: Option<ActiveOpens>,
    /// Whether an open ended for want of its peer's MAC was said (once).
    unresolved_said: bool,
    /// The connections a stopping worker has yet to reset
    /// ([`QueueHandler::on_stop`]), listed at its first pass.
    letting_go: Option<Vec<ConnHandle>>,
    /// The service's stop began ([`TcpConfig::stopping`]).
    stopping: Arc<std::sync::atomic::AtomicBool>,
    app: Dispatcher,
    /// The stack's listeners, each with its port ([`TcpHandler::listening`]).
    listeners: Vec<(flowlane_tcp::ListenerId, u16)>,
    counters: Arc<TcpCounters>,
    buckets: Arc<BucketCounters>,
    /// Each bucket's share of the worker's time, sampled.
    busy: BusySampler,
    /// The worker's busy time, published with the buckets' figures.
    passes: PassClock,
    placement: Placement,
    last_publish: Duration,
    /// When the stack's free buffer memory was last trimmed.
    last_trim: Duration,
    /// Where a worker without a queue builds its frames (software spill).
    spill_buf: Vec<u8>,
    /// This worker's side of bucket moves (with several queues and the
    /// NIC's RSS known).
    mover: Option<Mover>,
    /// Made when a handler asks for a waker ([`Net::waker`]).
    wake: Option<Arc<FdWake>>,
    /// The address of the frame last named to the stack as the one after
    /// next ([`Stack::lookup_hint`]): when it comes as the next call's
    /// `next`, its headers need no second read
    /// ([`QueueHandler::prefetch`]).
    ahead: usize,
    /// Whether a bucket's export and import prefetch the connections
    /// ahead ([`MOVE_AHEAD`]), however few the stack holds (unlike the
    /// receive path's [`PREFETCH_FROM`]: that threshold assumes that the
    /// traffic keeps touching the connections, where a moved bucket's are
    /// mostly idle, and the core's traffic sweeps them out of its caches
    /// whatever their number); off only to measure what it saves.
    move_prefetch: bool,
}

impl std::fmt::Debug for TcpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpHandler")
            .field("queue", &self.placement.queue)
            .field("local", &self.local)
            .field("handlers", &self.app.handler_count())
            .field("connections", &self.stack.connection_count())
            .finish()
    }
}

impl TcpHandler {
    /// The endpoint of `queue` (call from the `Dataplane::start` factory,
    /// which runs on the queue's core).
    pub fn new(queue: &QueueInfo, cfg: TcpConfig) -> TcpHandler {
        // The workers of one service share the stack's key: a bucket's
        // connections move between them, and with them the handshakes its
        // SYN cookies answered (checked by that key wherever the ACK lands)
        // and the tuples whose next incarnations' ISNs and timestamp
        // offsets must follow the last ones' (RFC 6528, RFC 6191).
        let mut tcp = cfg.tcp;
        tcp.recv_memory = tcp
            .recv_memory
            .min(recv_memory_for(queue.rx_frames, tcp.mss));
        let mut stack = Stack::new(tcp);
        if let Some(rss) = cfg.rss.clone() {
            stack
                .set_buckets(rss.table().size(), move |t| rss_bucket(&rss, t))
                .expect("a new stack holds no connection, and tables have at most 65 536 entries");
        }
        TcpHandler {
            buckets: Arc::new(BucketCounters::new(stack.bucket_count())),
            // Timed only where buckets can move ([`TcpHandler::with_mover`]).
            busy: BusySampler::new(1),
            passes: PassClock::default(),
            stack,
            local: LocalAddrs::new(cfg.local_ip, cfg.local_prefix_len, cfg.local_ip6),
            local_mac: cfg.local_mac,
            neighbors: cfg.neighbors,
            rx_sender: None,
            opens: cfg.ephemeral.map(|(first, last)| {
                ActiveOpens::new(EphemeralPorts::new(first, last, queue.queue, cfg.rss))
            }),
            unresolved_said: false,
            letting_go: None,
            stopping: cfg.stopping,
            app: Dispatcher::new(),
            listeners: Vec::new(),
            counters: Arc::new(TcpCounters::default()),
            placement: Placement {
                queue: queue.queue,
                cpu: queue.cpu,
                node: queue.node,
            },
            last_publish: Duration::ZERO,
            last_trim: Duration::ZERO,
            spill_buf: Vec::new(),
            ahead: 0,
            move_prefetch: true,
            mover: None,
            wake: None,
        }
    }

    /// The endpoint of `queue`, able to give and take RSS buckets with
    /// their connections through `mesh` ([`crate::TcpService::move_bucket`]).
    /// Needs the NIC's RSS in `cfg` (without it, the same as [`TcpHandler::new`]).
    /// Buckets the NIC's table gives other queues are marked away in the
    /// stack: a stray frame of one is forwarded to its queue, not answered.
    pub(crate) fn with_mover(queue: &QueueInfo, cfg: TcpConfig, mesh: Arc<Mesh>) -> TcpHandler {
        let rss = cfg.rss.clone();
        let mut h = TcpHandler::new(queue, cfg);
        if let Some(rss) = rss {
            let mover = Mover::new(queue.queue, mesh, rss);
            for b in 0..h.stack.bucket_count() as u16 {
                if mover.owner(b) != queue.queue {
                    h.stack.set_bucket_away(b, true);
                }
            }
            h.mover = Some(mover);
            h.busy = BusySampler::new(h.stack.bucket_count());
        }
        h
    }

    /// Makes this the handler of a worker without a queue (software
    /// spill): its frames go out through `carrier`'s queue. Needs the
    /// mover ([`TcpHandler::with_mover`]).
    pub(crate) fn set_spill_carrier(&mut self, carrier: u32) {
        if let Some(m) = self.mover.as_mut() {
            m.set_carrier(carrier);
        }
    }

    /// Says that workers `nic_queues..` have no queue (software spill):
    /// frames forwarded to them are counted as carried, not as late
    /// frames of a move.
    pub(crate) fn set_nic_queues(&mut self, nic_queues: u32) {
        if let Some(m) = self.mover.as_mut() {
            m.set_nic_queues(nic_queues);
        }
    }

    /// The queue this endpoint serves.
    pub fn queue(&self) -> u32 {
        self.placement.queue
    }

    /// The queue's counters, to read from another thread.
    pub fn counters(&self) -> Arc<TcpCounters> {
        self.counters.clone()
    }

    /// The queue's per-RSS-bucket counters, to read from another thread.
    pub fn bucket_counters(&self) -> Arc<BucketCounters> {
        self.buckets.clone()
    }

    /// The application's view of this queue at `now` (kept payload read
    /// through `frames`), and its dispatcher.
    fn net<'a>(
        &'a mut self,
        now: Instant,
        frames: &'a dyn FrameStore,
    ) -> (StackNet<'a>, &'a mut Dispatcher) {
        (
            StackNet {
                stack: &mut self.stack,
                frames,
                opens: self.opens.as_mut(),
                local: &self.local,
                now,
                placement: self.placement,
                wake: &mut self.wake,
            },
            &mut self.app,
        )
    }

    /// Delivers the stack's queued events to their handlers.
    fn dispatch(&mut self, now: Instant, frames: &dyn FrameStore) {
        while let Some(ev) = self.stack.poll_event() {
            if let Some(sender) = self.rx_sender {
                self.confirm_sender(now, &ev, sender);
            }
            let (mut net, app) = self.net(now, frames);
            app.dispatch(ev, &mut net);
        }
    }

    /// Confirms the sender of the frame being taken as the neighbour of
    /// its IP when the frame completed a handshake or delivered data: an
    /// established connection took it, so it came from the peer that holds
    /// the sequence numbers (issue 11: never from a spoofed SYN). The
    /// table is per address, a connection is one peer's: a sender with
    /// another MAC than the address's fresh entry is refused and counted
    /// (`neighbor_confirm_refused`).
    fn confirm_sender(&mut self, now: Instant, ev: &Event, (ip, mac): (IpAddr, EthernetAddress)) {
        let (Event::Accepted { conn, .. } | Event::Connected(conn) | Event::Readable(conn)) = *ev
        else {
            return;
        };
        if self.neighbors.needs_confirmation(ip, mac)
            && self
                .stack
                .four_tuple(conn)
                .is_ok_and(|t| t.remote.ip() == ip)
            && self.neighbors.confirm(now, ip, mac) == Confirmation::Refused
        {
            counters::bump(&self.counters.neighbor_confirm_refused);
        }
    }

    /// [`TcpHandler::input`], then the events the frame caused. `slot`:
    /// the frame's slot in `frames`, if the stack may keep payload in it.
    fn receive(
        &mut self,
        now: Instant,
        frame: &[u8],
        hops: u8,
        (slot, frames): (Option<u32>, &dyn FrameStore),
    ) -> Fate {
        let fate = self.input(now, frame, hops, slot);
        if fate != Fate::Passed {
            self.dispatch(now, frames);
            self.rx_sender = None;
        }
        fate
    }

    fn start(&mut self, now: Instant, frames: &dyn FrameStore) {
        let (mut net, app) = self.net(now, frames);
        app.start(&mut net);
        self.dispatch(now, frames);
    }

    /// Gives the frames the stack no longer holds back to the worker.
    fn release_frames(&mut self, held: &mut HeldFrames) {
        while let Some(slot) = self.stack.poll_released_frame() {
            held.release(slot);
        }
    }

    /// Validates one frame and hands its segment to the stack, lending it
    /// the frame when it has a `slot`; says what became of it. `hops`: how
    /// often the frame was forwarded from another queue (0: it arrived
    /// here). A frame of a bucket this queue is taking over is held; one
    /// the stack hands back goes to the queue that serves its bucket.
    fn input(&mut self, now: Instant, frame: &[u8], hops: u8, slot: Option<u32>) -> Fate {
        let c = &*self.counters;
        // The TCP checksum is verified before the options are parsed, so a
        // corrupted segment counts as corrupted whatever its options look like.
        let f = match parse_frame_with(frame, ChecksumPolicy::VERIFY_ALL) {
            Ok(f) => f,
            Err(WireError::BadChecksum { layer: Layer::Ipv4 }) => {
                counters::bump(&c.bad_ip_checksum);
                return Fate::Passed;
            }
            Err(WireError::BadChecksum { layer: Layer::Tcp }) => {
                counters::bump(&c.bad_tcp_checksum);
                return Fate::Passed;
            }
            Err(_) => {
                counters::bump(&c.malformed);
                return Fate::Passed;
            }
        };
        // Only frames sent to this interface's MAC (XDP steers by IP
        // alone): RFC 1122 §3.3.6, a host SHOULD silently discard a
        // datagram received via a link-layer broadcast that is not to an
        // IP broadcast or multicast address; Linux takes no frame that is
        // not PACKET_HOST (`ip_rcv_core` drops another host's,
        // `tcp_v4_rcv` and `tcp_v6_rcv` a group's).
        if f.ethernet.dst_addr != self.local_mac {
            counters::bump(&c.not_ours);
            return Fate::Passed;
        }
        let Some(Segment { src, dst, ecn, tcp }) = tcp_segment(&f) else {
            self.icmp_input(now, &f, hops);
            return Fate::Passed;
        };
        if !self.local.is_ours(dst) || f.ethernet.vlan.count() != 0 {
            counters::bump(&c.not_ours);
            return Fate::Passed;
        }
        if self.local.no_peer(src) {
            counters::bump(&c.martian_source);
            return Fate::Passed;
        }
        if let Some(m) = self.mover.as_mut().filter(|m| hops == 0 && m.holding()) {
            let tuple = FourTuple {
                local: SocketAddr::new(dst, tcp.dst_port),
                remote: SocketAddr::new(src, tcp.src_port),
            };
            if let Some(b) = m.held_bucket(&tuple) {
                m.hold(b, frame);
                return Fate::Passed;
            }
        }
        self.neighbors.observe(now, src, f.ethernet.src_addr);
        // The classifier parsed the whole TCP header: hand it over as is.
        let payload = f.payload();
        let delivery = match slot {
            Some(id) => {
                let lent = FrameRef {
                    id,
                    payload_offset: (payload.as_ptr() as usize - frame.as_ptr() as usize) as u32,
                };
                self.stack
                    .handle_tcp_frame(now, src, dst, ecn, tcp, payload, lent)
            }
            None => self.stack.handle_tcp_ecn(now, src, dst, ecn, tcp, payload),
        };
        match delivery {
            Delivery::Taken | Delivery::Kept => {
                counters::bump(&c.segments_in);
                self.rx_sender = Some((src, f.ethernet.src_addr));
                if delivery == Delivery::Kept {
                    Fate::Kept
                } else {
                    Fate::Taken
                }
            }
            Delivery::Away { bucket } => {
                match self.mover.as_mut() {
                    Some(m) => m.forward(duration(now), bucket, hops, frame),
                    None => counters::bump(&self.counters.forward_dropped),
                }
                Fate::Passed
            }
        }
    }

    /// A frame that is not TCP: a path MTU signal about one of our
    /// segments goes to the stack (the XDP program passes only those, and
    /// they arrive on whichever queue the NIC hashes the ICMP packet to:
    /// one about another queue's connection is forwarded there like a
    /// segment); anything else is not ours. No event follows.
    #[cold]
    fn icmp_input(&mut self, now: Instant, f: &Frame<'_>, hops: u8) {
        let to_us = f.ip_pair().is_some_and(|p| self.local.is_ours(p.dst()));
        let Some(e) = icmp_error(f).filter(|e| to_us && self.local.is_ours(e.local.ip())) else {
            counters::bump(&self.counters.not_ours);
            return;
        };
        let delivery = match e.kind {
            IcmpErrorKind::TooBig { mtu } => self
                .stack
                .handle_too_big(now, e.local, e.remote, e.seq, mtu),
            IcmpErrorKind::Unreachable { code, .. } => self
                .stack
                .handle_unreachable(now, e.local, e.remote, e.seq, code),
        };
        if let Delivery::Away { bucket } = delivery {
            match self.mover.as_mut() {
                Some(m) => m.forward_icmp(duration(now), bucket, hops, f.bytes),
                None => counters::bump(&self.counters.forward_dropped),
            }
        }
    }

    /// Charges the time since `since` (the frame's parse, its segment and
    /// every callback it caused) to the bucket of `frame`, which the stack
    /// took.
    fn charge(&mut self, frame: &[u8], since: std::time::Instant) {
        let spent = since.elapsed();
        let Some(rss) = self.mover.as_ref().map(Mover::rss) else {
            return;
        };
        // Taken by the stack: a valid TCP frame (checked once already).
        let Ok(f) = parse_frame_with(frame, ChecksumPolicy::IP_ONLY) else {
            return;
        };
        let Some(Segment { src, dst, tcp, .. }) = tcp_segment(&f) else {
            return;
        };
        let tuple = FourTuple {
            local: SocketAddr::new(dst, tcp.dst_port),
            remote: SocketAddr::new(src, tcp.src_port),
        };
        self.busy.charge(rss_bucket(rss, &tuple), spent);
    }

    /// Serves the moves of RSS buckets (the worker's poll, once per pass):
    /// markers due, then the inbox in order (exports, imports, forwarded
    /// and released frames), then, while a bucket given away drains, a
    /// look at the RX ring's frames for its own and the markers that
    /// allows, then everything queued for other workers. `rx`: the
    /// worker's RX ring.
    fn serve_moves(
        &mut self,
        now: Instant,
        now_d: Duration,
        rx: &mut dyn RingAhead,
        frames: &dyn FrameStore,
    ) {
        let Some(mut mover) = self.mover.take() else {
            return;
        };
        mover.send_markers(now_d, rx.consumed());
        for work in mover.take_work(now_d) {
            match work {
                Work::Export { bucket, to, reply } => {
                    // A connection a handler opens during the export takes
                    // a port of a bucket that stays.
                    mover.leaving(bucket, to);
                    if let Some(opens) = self.opens.as_mut() {
                        opens.ports.set_rss(mover.rss().clone());
                    }
                    let (arrival, reply_msg) =
                        self.export_bucket(now, bucket, frames, &mut |part| {
                            mover.export_part(to, part);
                        });
                    // The last part goes into the new queue's inbox before
                    // the controller hears that the export is done: what
                    // it sends the new queue next (an undo's `Export`)
                    // comes behind it.
                    mover.exported(bucket, to, arrival);
                    let _ = reply.send(reply_msg);
                }
                Work::Import(arrival) => {
                    let bucket = arrival.bucket;
                    let complete = arrival.export.complete();
                    let failed = self.import_bucket(now, *arrival, frames);
                    mover.imported(bucket, failed, complete);
                    if let Some(opens) = self.opens.as_mut().filter(|_| complete) {
                        opens.ports.set_rss(mover.rss().clone());
                    }
                }
                Work::Rewritten {
                    bucket,
                    reply,
                    written,
                } => mover.rewritten(bucket, reply, written, rx.end_now()),
                Work::Frames(batches) => {
                    self.mover = Some(mover);
                    // As on the RX ring: each frame's successor's state
                    // prefetched (a spill worker's whole receive path).
                    let mut ahead = batches.iter().flat_map(FrameBatch::iter);
                    let (mut this, mut next, mut after) =
                        (ahead.next(), ahead.next(), ahead.next());
                    while let Some((hops, f)) = this {
                        if let Some((_, n)) = next {
                            self.prefetch(n, after.map(|(_, a)| a));
                        }
                        self.receive(now, f, hops, (None, frames));
                        (this, next, after) = (next, after, ahead.next());
                    }
                    mover = self.mover.take().expect("put back above");
                }
            }
        }
        if mover.draining() {
            let waiting_too = mover.take_new_drain();
            let covered = rx.scan_ahead(waiting_too, &mut |frame| mover.take_ahead(now_d, frame));
            mover.send_markers(now_d, covered);
        }
        mover.flush();
        self.mover = Some(mover);
    }

    /// Takes `bucket` out: each connection's application side first (its
    /// handler may still use it), then the connections themselves,
    /// [`EXPORT_PART`] at a time: every part but the last goes to `send`
    /// as soon as it is out, so that the new worker imports it while this
    /// one exports the next; the last is returned with the controller's
    /// answer. Kept payload is copied into the export out of `frames`
    /// (whose frames the stack then releases).
    ///
    /// A handler's `on_export` may close connections of the bucket: one
    /// whose turn has not come stays with its handler, which hears its
    /// `on_closed`; one whose application side is out already (listed
    /// earlier, or the one being exported) leaves the stack without being
    /// exported, and its handler gets its state back through
    /// `on_import_failed` (its owner entry is gone: its `Closed` reaches
    /// nobody). A connection opened meanwhile lands in a bucket that stays
    /// (the ports follow [`Mover::leaving`]).
    fn export_bucket(
        &mut self,
        now: Instant,
        bucket: u16,
        frames: &dyn FrameStore,
        send: &mut dyn FnMut(Box<Arrival>),
    ) -> (Box<Arrival>, Reply) {
        let conns = self.stack.bucket_connections(bucket);
        let mut apps = Vec::with_capacity(conns.len());
        // The connections' slots and application entries lie scattered and
        // cold on a busy core: each one's are prefetched a few connections
        // ahead, so that its misses overlap the work on those before it.
        // Its slot is then in this core's caches when the stack exports it
        // below (a bucket of 100 connections' slots is 70 KiB).
        let prefetch = self.moves_prefetch();
        if prefetch {
            for &c in conns.iter().take(2 * MOVE_AHEAD) {
                self.prefetch_moving(c);
            }
            for &c in conns.iter().take(MOVE_AHEAD) {
                self.prefetch_removal(c);
            }
        }
        for (i, &c) in conns.iter().enumerate() {
            if prefetch {
                if let Some(&far) = conns.get(i + 2 * MOVE_AHEAD) {
                    self.prefetch_moving(far);
                }
                if let Some(&near) = conns.get(i + MOVE_AHEAD) {
                    self.prefetch_removal(near);
                }
            }
            // Closed by an earlier `on_export`: its handler keeps it and
            // hears of its end.
            if self.stack.state(c).is_err() {
                continue;
            }
            let (mut net, app) = self.net(now, frames);
            apps.push((c, app.export_conn(c, &mut net)));
        }
        // The stack exports in the listing's order (`Stack::export_bucket`),
        // so each application side is the next one — unless a handler's
        // `on_export` closed or opened a connection of the bucket
        // meanwhile: then it is looked up (a search per connection made a
        // bucket of n connections cost n²/2 comparisons).
        let mut next = 0;
        let mut app_of = |h: ConnHandle| match apps.get_mut(next) {
            Some((c, a)) if *c == h => {
                next += 1;
                a.take()
            }
            _ => apps
                .iter_mut()
                .find(|(c, _)| *c == h)
                .and_then(|(_, a)| a.take()),
        };
        let (mut connections, mut time_wait) = (0, 0);
        let last = loop {
            let export = self.stack.export_bucket_part(bucket, EXPORT_PART, frames);
            connections += export.connections().len();
            time_wait += export.time_wait_count();
            let apps = export
                .connections()
                .iter()
                .map(|(h, _)| app_of(*h))
                .collect();
            let mut peers: Vec<IpAddr> = export
                .connections()
                .iter()
                .map(|(_, snap)| snap.four_tuple().remote.ip())
                .collect();
            peers.sort_unstable();
            peers.dedup();
            let neighbors = peers
                .into_iter()
                .filter_map(|ip| self.neighbors.known(ip))
                .collect();
            let complete = export.complete();
            let arrival = Box::new(Arrival {
                bucket,
                export,
                apps,
                neighbors,
            });
            if complete {
                break arrival;
            }
            send(arrival);
        };
        // Application sides no exported connection took: their connections
        // were closed in an `on_export` from their own on.
        for a in apps.into_iter().filter_map(|(_, a)| a) {
            let (mut net, app) = self.net(now, frames);
            app.import_failed(a, &mut net);
        }
        let reply = Reply::Exported {
            connections,
            time_wait,
        };
        (last, reply)
    }

    /// Whether a move prefetches the connections ahead ([`TcpHandler::move_prefetch`]).
    fn moves_prefetch(&self) -> bool {
        self.move_prefetch
    }

    /// Prefetches what exporting `conn` reads: its whole slot and its
    /// application entry.
    fn prefetch_moving(&self, conn: ConnHandle) {
        if let Some(hint) = self.stack.slot_hint(conn) {
            crate::prefetch::state(hint);
            if let Some(owner) = self.app.owner_address(hint.slot()) {
                crate::prefetch::line_at(owner);
            }
        }
    }

    /// Prefetches what taking `conn` out of the stack reads beyond its
    /// slot (which must be in the cache by now: [`Stack::removal_lines`]).
    fn prefetch_removal(&self, conn: ConnHandle) {
        for line in self.stack.removal_lines(conn) {
            crate::prefetch::line_at(line);
        }
    }

    /// Adds a bucket's connections and gives each its application side;
    /// returns how many could not be imported.
    fn import_bucket(&mut self, now: Instant, arrival: Arrival, frames: &dyn FrameStore) -> usize {
        let Arrival {
            export,
            apps,
            neighbors,
            ..
        } = arrival;
        for k in neighbors {
            self.neighbors.adopt(now, k);
        }
        let prefetch = self.moves_prefetch();
        let handles = if prefetch {
            self.stack
                .import_bucket_prefetching(now, export, &mut crate::prefetch::state)
        } else {
            self.stack.import_bucket(now, export)
        };
        let mut failed = 0;
        for (i, (h, app_side)) in handles.iter().zip(apps).enumerate() {
            // The dispatcher's entry for the connection a few ahead, which
            // its import writes.
            if let Some(Ok(ahead)) = handles.get(i + MOVE_AHEAD).filter(|_| prefetch) {
                if let Some(owner) = self.app.owner_address(ahead.index()) {
                    crate::prefetch::line_at(owner);
                }
            }
            match (*h, app_side) {
                (Ok(h), Some(a)) => {
                    let (mut net, app) = self.net(now, frames);
                    app.import_conn(h, a, &mut net);
                }
                (Ok(_), None) => {}
                (Err(_), side) => {
                    failed += 1;
                    if let Some(a) = side {
                        let (mut net, app) = self.net(now, frames);
                        app.import_failed(a, &mut net);
                    }
                }
            }
        }
        self.dispatch(now, frames);
        failed
    }

    /// Copies the stack's, the moves', the neighbour table's and the
    /// buckets' figures to the shared counters; the buckets' with the
    /// worker's busy time up to the same moment, between two steps of
    /// `buckets_published_seq` (a reader that sees the same even count
    /// before and after reading them saw one publication).
    fn publish(&self) {
        self.counters.publish(&self.stack);
        counters::set(&self.counters.application_refused, self.app.refused());
        counters::set(&self.counters.finishing, self.app.finishing() as u64);
        self.counters.publish_moves(self.mover.as_ref());
        let n = self.neighbors.stats();
        counters::set(&self.counters.neighbor_entries, self.neighbors.len() as u64);
        counters::set(&self.counters.neighbor_evicted, n.evicted);
        counters::set(&self.counters.neighbor_mismatched, n.mismatched);
        let c = &*self.counters;
        counters::set(
            &c.connection_limit,
            self.stack.config().max_connections as u64,
        );
        let seq = c.buckets_published_seq.load(Ordering::Relaxed);
        counters::set(&c.buckets_published_seq, seq.wrapping_add(1));
        fence(Ordering::Release);
        self.buckets.publish(&self.stack, &self.busy);
        let (busy, at) = self.passes.busy_until_now();
        counters::set(&c.buckets_busy_ns, busy.as_nanos() as u64);
        counters::set(&c.buckets_published_ns, at.as_nanos() as u64);
        c.buckets_published_seq
            .store(seq.wrapping_add(2), Ordering::Release);
    }

    /// Writes every segment the stack has to send into free frames.
    fn output(&mut self, now: Instant, tx: &mut TxBatch<'_>) {
        loop {
            let mut produced = false;
            let sent = tx.send_with(|buf| {
                let (p, len) = self.build_frame(now, buf);
                produced = p;
                len
            });
            if !sent && !produced {
                // No free frame (the stack keeps the segment), or nothing
                // left to send.
                break;
            }
        }
    }

    /// One pass up to the output: the application's start, timers, the
    /// inbox (moves, forwarded frames), the application's tick, events.
    /// `frames`: where kept received frames are; `rx`: the worker's RX
    /// ring.
    fn pass(
        &mut self,
        now: Instant,
        now_d: Duration,
        frames: &dyn FrameStore,
        rx: &mut dyn RingAhead,
    ) {
        if !self.app.started() {
            self.start(now, frames);
        }
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
            self.dispatch(now, frames);
        }
        if self.mover.is_some() {
            self.serve_moves(now, now_d, rx, frames);
        }
        if self
            .opens
            .as_ref()
            .is_some_and(|o| !o.unsent.is_empty() && now >= o.next_look)
        {
            self.resend_resolved_syns(now);
        }
        if self.opens.as_ref().is_some_and(|o| !o.watched.is_empty()) {
            self.end_unresolved_opens(now, frames);
        }
        if let Some(w) = &self.wake {
            w.clear();
        }
        if !self.app.stopping() && self.stopping.load(Ordering::Relaxed) {
            self.begin_stop(now, frames);
        }
        let (mut net, app) = self.net(now, frames);
        app.tick(&mut net);
        self.dispatch(now, frames);
    }

    /// The service's stop began ([`TcpConfig::stopping`]): the listeners
    /// refuse their SYNs from now on (an RST, counted in `syn_refused`: no
    /// connection is taken that the stop would reset), and each handler
    /// hears of each of its connections ([`Dispatcher::stop`]), closing
    /// those it can end cleanly. Published at once: the stop's drain
    /// waits for the connections being finished.
    fn begin_stop(&mut self, now: Instant, frames: &dyn FrameStore) {
        let refuse: flowlane_tcp::SynFilter = Arc::new(|_| false);
        for &(l, _) in &self.listeners {
            let _ = self.stack.set_syn_filter(l, Some(refuse.clone()));
        }
        let (mut net, app) = self.net(now, frames);
        app.stop(&mut net);
        self.dispatch(now, frames);
        self.publish();
    }

    /// Sends again at once the SYNs of the watched opens to peers whose
    /// Ethernet address resolved since their SYN found none
    /// ([`ActiveOpens::unsent`]; RFC 1122 §2.3.2.2: a host may queue a
    /// packet until the address resolves, as Linux's neighbour queue
    /// does): the first open to a new peer then takes the resolution's
    /// time, not a second's retransmission timeout. Peers given up on
    /// ([`UNRESOLVED_GIVE_UP`]) leave the list.
    fn resend_resolved_syns(&mut self, now: Instant) {
        let Some(opens) = self.opens.as_mut() else {
            return;
        };
        opens.next_look = now + UNSENT_LOOK_EVERY;
        let mut resolved = Vec::new();
        let neighbors = &mut self.neighbors;
        opens.unsent.retain(|&(peer, until)| {
            if neighbors.lookup(now, peer).is_some() {
                resolved.push(peer);
                false
            } else {
                now < until
            }
        });
        for peer in resolved {
            for &(_, conn) in &opens.watched {
                if self
                    .stack
                    .four_tuple(conn)
                    .is_ok_and(|t| t.remote.ip() == peer)
                {
                    // Refused (nothing done) for one no longer in SYN-SENT.
                    let _ = self.stack.resend_syn(conn);
                }
            }
        }
    }

    /// Ends the watched opens ([`ActiveOpens`]) whose peer's Ethernet
    /// address did not resolve within [`UNRESOLVED_GIVE_UP`] and that are
    /// still in SYN-SENT: aborted (RFC 9293 §3.10.5: in SYN-SENT nothing
    /// is sent), their handlers told [`CloseReason::Timeout`] (as the
    /// kernel-socket backend tells an open whose connect(2) failed with
    /// EHOSTUNREACH), counted in `neighbor_unresolved` and said once.
    /// Opens no longer in SYN-SENT (connected, closed, moved) leave the
    /// watch as they come to its front. Once per pass, not per frame, and
    /// only while opens are watched.
    fn end_unresolved_opens(&mut self, now: Instant, frames: &dyn FrameStore) {
        let mut ended = std::collections::HashSet::new();
        let Some(opens) = self.opens.as_mut() else {
            return;
        };
        while let Some(&(due, conn)) = opens.watched.front() {
            if self.stack.state(conn) != Ok(State::SynSent) {
                opens.watched.pop_front();
                continue;
            }
            if due > now {
                break;
            }
            opens.watched.pop_front();
            let Ok(peer) = self.stack.four_tuple(conn).map(|t| t.remote.ip()) else {
                continue;
            };
            if self.neighbors.lookup(now, peer).is_some() {
                // Resolved since: the next SYN goes.
                continue;
            }
            let _ = self.stack.abort(conn);
            counters::bump(&self.counters.neighbor_unresolved);
            if !std::mem::replace(&mut self.unresolved_said, true) {
                tracing::warn!(
                    queue = self.placement.queue,
                    "no Ethernet address for {peer} after {} s (nothing answered the kernel's \
                     ARP or neighbour solicitation: no host there?): its open ends as timed out \
                     (counted in neighbor_unresolved; `ip neigh show {peer}` in this network \
                     namespace)",
                    UNRESOLVED_GIVE_UP.as_millis() / 1000
                );
            }
            ended.insert(conn);
        }
        if ended.is_empty() {
            return;
        }
        // The aborts' `Closed`, told as the time-out they are.
        while let Some(ev) = self.stack.poll_event() {
            let ev = match ev {
                Event::Closed {
                    conn,
                    reason: CloseReason::Aborted,
                } if ended.contains(&conn) => Event::Closed {
                    conn,
                    reason: CloseReason::Timeout,
                },
                ev => ev,
            };
            let (mut net, app) = self.net(now, frames);
            app.dispatch(ev, &mut net);
        }
    }

    /// Puts the frames workers without a queue handed this one (software
    /// spill) on its TX ring, in order; what finds no free frame waits for
    /// the next pass.
    fn send_for_others(&mut self, tx: &mut TxBatch<'_>) {
        let Some(m) = self.mover.as_mut() else { return };
        m.send_transmits(|f| {
            if tx.available() == 0 {
                return None;
            }
            // Longer than a frame: not sent (no pass would send it).
            Some(tx.send_with(|buf| {
                let out = buf.get_mut(..f.len())?;
                out.copy_from_slice(f);
                Some(f.len())
            }))
        });
    }

    /// A worker without a queue (software spill): every segment the stack
    /// has to send, built and handed to the carrier's queue; what it
    /// handed out.
    fn spill_output(&mut self, now: Instant) -> SpillPass {
        let mut pass = SpillPass::default();
        let mut buf = std::mem::take(&mut self.spill_buf);
        buf.resize(SPILL_FRAME, 0);
        loop {
            match self.build_frame(now, &mut buf) {
                (true, Some(n)) => {
                    pass.sent += 1;
                    pass.sent_bytes += n as u64;
                    if let Some(m) = self.mover.as_mut() {
                        m.transmit_via_carrier(&buf[..n]);
                    }
                }
                (true, None) => {}
                (false, _) => break,
            }
        }
        self.spill_buf = buf;
        if let Some(m) = self.mover.as_mut() {
            m.flush();
        }
        pass
    }

    /// Resets up to `budget` of the connections this queue still holds at
    /// the data path's stop, as the kernel-socket backend lets its go
    /// (`flowlane_kernel`: every connection not ended quietly is reset):
    /// every connection is aborted (RFC 9293 §3.10.5 ABORT: an RST where
    /// the state sends one, counted in `resets_aborted`; none in SYN-SENT),
    /// so that its peer learns at once that it is gone instead of holding
    /// it until it next sends and the kernel resets it; but those in
    /// TIME-WAIT (both FINs exchanged and acknowledged: nothing left to
    /// tell) and the half-open ones (SYN-RECEIVED: no application has
    /// them, and a flood's spoofed sources would be sent RSTs), which go
    /// quietly, as the kernel drops its own at a listener's close. Handlers
    /// hear nothing more (their `Closed` events are dropped: the service
    /// is over). The connections are listed at the first call; returns
    /// whether some are left. `budget`: what the stack's RST queue and the
    /// queue's free frames take now.
    fn let_go(&mut self, budget: usize) -> bool {
        let stack = &self.stack;
        let left = self.letting_go.get_or_insert_with(|| {
            (0..stack.bucket_count())
                .flat_map(|b| stack.bucket_connections(b as u16))
                .filter(|&c| {
                    stack
                        .state(c)
                        .is_ok_and(|st| !matches!(st, State::TimeWait | State::SynReceived))
                })
                .collect()
        });
        let keep = left.len().saturating_sub(budget);
        for conn in left.drain(keep..) {
            let _ = self.stack.abort(conn);
        }
        while self.stack.poll_event().is_some() {}
        keep > 0
    }

    /// Publishes the counters if [`PUBLISH_EVERY`] has passed, trimming
    /// the stack's free memory first if [`TRIM_EVERY`] has.
    fn publish_due(&mut self, now_d: Duration) {
        if now_d.saturating_sub(self.last_publish) >= PUBLISH_EVERY {
            self.last_publish = now_d;
            if now_d.saturating_sub(self.last_trim) >= TRIM_EVERY {
                self.last_trim = now_d;
                self.stack.trim_memory();
            }
            self.publish();
        }
    }

    /// A segment to `peer` found no Ethernet address: dropped (counted),
    /// the peer noted for its opens' SYNs ([`ActiveOpens::note_unsent`]).
    /// Out of line: `build_frame`'s path with an address stays short.
    #[cold]
    #[inline(never)]
    fn no_neighbor(&mut self, now: Instant, peer: IpAddr) {
        counters::bump(&self.counters.no_neighbor);
        if let Some(opens) = self.opens.as_mut() {
            opens.note_unsent(now, peer);
        }
    }

    /// Lets the stack write its next segment at offset 34 of `buf` (a free
    /// UMEM frame) and puts Ethernet and IP headers in front of it (an IPv6
    /// segment first moves up by the 20 bytes its longer header needs: the
    /// IPv4 path, the common one, pays nothing for IPv6). Returns whether
    /// the stack produced a segment, and the frame length if it is to be
    /// sent.
    fn build_frame(&mut self, now: Instant, buf: &mut [u8]) -> (bool, Option<usize>) {
        let Some(seg_buf) = buf.get_mut(ETH_IPV4_TCP_OFFSET..) else {
            return (false, None);
        };
        let Some(t) = self.stack.poll_transmit(now, seg_buf) else {
            return (false, None);
        };
        let Some(peer_mac) = self.neighbors.lookup(now, t.dst.ip()) else {
            self.no_neighbor(now, t.dst.ip());
            return (true, None);
        };
        let mut eth = EthernetRepr {
            dst_addr: peer_mac,
            src_addr: self.local_mac,
            vlan: VlanTags::NONE,
            ethertype: EtherType::Ipv4,
        };
        let sent = match (t.src.ip(), t.dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let mut ip = Ipv4Repr::new(src, dst, IpProtocol::Tcp, t.len);
                ip.ecn = t.ecn.bits();
                emit_eth_ipv4_tcp_headers(buf, &eth, &ip, t.len)
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                if buf.len() < ETH_IPV6_TCP_OFFSET + t.len {
                    return (true, None);
                }
                buf.copy_within(
                    ETH_IPV4_TCP_OFFSET..ETH_IPV4_TCP_OFFSET + t.len,
                    ETH_IPV6_TCP_OFFSET,
                );
                eth.ethertype = EtherType::Ipv6;
                let mut ip = Ipv6Repr::new(src, dst, IpProtocol::Tcp, t.len);
                ip.flow_label = self.flow_label(&t);
                // DSCP 0, the ECN codepoint the stack chose (RFC 3168 §5).
                ip.traffic_class = t.ecn.bits();
                emit_eth_ipv6_tcp_headers(buf, &eth, &ip, t.len)
            }
            // The stack never mixes families in one connection.
            _ => return (true, None),
        };
        (true, sent.ok())
    }

    /// The flow label of `t`'s connection (RFC 6437 §3): the stack's, a
    /// keyed hash of its addresses and ports under the service's secret,
    /// the same for every segment and on every queue.
    fn flow_label(&self, t: &flowlane_tcp::Transmit) -> u32 {
        self.stack.flow_label(t.src, t.dst)
    }
}

impl Drop for TcpHandler {
    /// The worker is done: publish the final counters.
    fn drop(&mut self) {
        self.publish();
    }
}

impl TcpHandler {
    /// [`QueueHandler::prefetch`]'s work, out of the worker's loop: the
    /// frame's endpoints, the stack told, the slot's hot part and the
    /// connection's owner entry prefetched; and the table's line that
    /// `expect` will read for the frame after it.
    #[inline(never)]
    fn prefetch_state(&mut self, frame: &[u8], after: Option<&[u8]>) {
        let hint = if std::mem::take(&mut self.ahead) == frame.as_ptr() as usize {
            self.stack.expect_looked_up()
        } else {
            flowlane_wire::peek::tcp_endpoints(frame).and_then(|seg| self.stack.expect(&seg))
        };
        if let Some(hint) = hint {
            crate::prefetch::state(hint);
            // The dispatcher's owner entry, which its event reads first.
            if let Some(owner) = self.app.owner_address(hint.slot()) {
                crate::prefetch::line_at(owner);
            }
        }
        let Some(after) = after else {
            return;
        };
        if let Some(seg) = flowlane_wire::peek::tcp_endpoints(after) {
            self.ahead = after.as_ptr() as usize;
            if let Some(line) = self.stack.lookup_hint(&seg) {
                crate::prefetch::line_at(line.line());
            }
        }
    }

    /// One received frame (lent with `slot`, resolved through `frames`):
    /// starts the application on the first, times one in 16.
    fn rx_one(&mut self, now: Instant, frame: &[u8], lend: (Option<u32>, &dyn FrameStore)) -> Fate {
        if !self.app.started() {
            self.start(now, lend.1);
        }
        let timed = self.busy.start();
        let fate = self.receive(now, frame, 0, lend);
        if fate != Fate::Passed {
            if let Some(since) = timed {
                self.charge(frame, since);
            }
        }
        fate
    }
}

fn instant(now: Duration) -> Instant {
    Instant::from_nanos(now.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// The worker's clock back from the stack's.
fn duration(now: Instant) -> Duration {
    Duration::from_nanos(now.as_nanos())
}

/// A service registers its handlers on each queue's endpoint through the
/// backend-neutral [`Setup`].
impl Setup for TcpHandler {
    fn queue(&self) -> u32 {
        self.placement.queue
    }

    /// Listens on `port` of our addresses (IPv4, and IPv6 when we have
    /// one); `handler` gets the connections of both.
    fn listen_boxed(
        &mut self,
        port: u16,
        handler: Box<dyn ConnHandler>,
    ) -> Result<HandlerId, Error> {
        let l = self.stack.listen(self.local.listen_addr(port))?;
        let id = self.app.add_boxed(handler);
        self.bind_listener(l, id, port)?;
        Ok(id)
    }

    fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId {
        self.app.add_boxed(handler)
    }

    fn listen_with(&mut self, port: u16, handler: HandlerId) -> Result<(), Error> {
        // Before the listener opens: nothing is left listening for a
        // handler this core does not have.
        self.app.check_handler(handler)?;
        let l = self.stack.listen(self.local.listen_addr(port))?;
        self.bind_listener(l, handler, port)
    }
}

impl TcpHandler {
    /// Connections on listener `l` (on `port`) go to `handler`, whose SYN
    /// filter the stack asks at each SYN to it.
    fn bind_listener(
        &mut self,
        l: flowlane_tcp::ListenerId,
        handler: HandlerId,
        port: u16,
    ) -> Result<(), Error> {
        self.stack
            .set_syn_filter(l, self.app.syn_filter(handler, port))?;
        self.app.bind_listener(l, handler)?;
        self.listeners.push((l, port));
        Ok(())
    }

    /// The ports this queue listens on (its handlers' `Setup::listen`),
    /// in the order they were opened. [`crate::TcpService::start`] claims
    /// those its configuration did not list, so that their frames reach
    /// the queues.
    pub fn listening(&self) -> Vec<u16> {
        self.listeners.iter().map(|&(_, port)| port).collect()
    }
}

/// Every received frame is [`RxAction::Consumed`]: taken by the stack, or
/// dropped and counted under the reason's own name in [`TcpCounters`]
/// (`bad_ip_checksum`, `bad_tcp_checksum`, `malformed`, `not_ours`,
/// `martian_source`, `forward_dropped`), so the worker's `dropped` counts
/// none of them twice, and none taken.
impl QueueHandler for TcpHandler {
    /// A frame handed in without a slot (tests): the stack copies what it
    /// keeps.
    fn on_rx(&mut self, _q: &QueueInfo, now: Duration, buf: &mut [u8], len: usize) -> RxAction {
        self.passes.note(now, true);
        let now = instant(now);
        let Some(frame) = buf.get(..len) else {
            // A length past the buffer: counted by the worker.
            return RxAction::Drop;
        };
        self.rx_one(now, frame, (None, &NoFrames));
        RxAction::Consumed
    }

    /// The next frame's connection state, prefetched while this one is
    /// processed (its endpoints read off the frame unverified: a wrong
    /// guess costs a wasted prefetch and the table's lookup it would have
    /// saved), and the table's line that finds the connection of the
    /// frame after it, once the queue holds enough connections for their
    /// state to leave the core's caches.
    #[inline]
    fn prefetch(&mut self, next: &[u8], after: Option<&[u8]>) {
        if self.stack.connections_in_slots() >= PREFETCH_FROM {
            self.prefetch_state(next, after);
        }
    }

    fn on_rx_frame(&mut self, _q: &QueueInfo, now: Duration, mut rx: RxFrame<'_>) -> RxAction {
        self.passes.note(now, true);
        let now = instant(now);
        let kept = self.rx_one(now, rx.data(), (rx.slot(), rx.held())) == Fate::Kept;
        if kept {
            rx.keep();
        }
        self.release_frames(rx.held_mut());
        RxAction::Consumed
    }

    /// Long enough for about `SEGMENTS_PER_ACK` (16) segments of each
    /// connection that owes an ACK so far in the pass: every such
    /// connection sends one ACK at the pass's end, so a pass of
    /// [`RX_BUDGET`] frames spread over hundreds of connections would
    /// acknowledge every few segments (each ACK a transmitted frame here
    /// and work at the sender). A queue with few connections keeps the
    /// short pass: its flows already fill a pass, and a longer one would
    /// only release larger bursts per ACK. A message of a move waiting in
    /// the worker's inbox ends the pass after the batch at hand.
    fn rx_budget(&self) -> usize {
        if self.mover.as_ref().is_some_and(Mover::urgent) {
            return 0;
        }
        (SEGMENTS_PER_ACK * self.stack.output_pending()).max(RX_BUDGET)
    }

    fn on_poll(&mut self, _q: &QueueInfo, now_d: Duration, tx: &mut TxBatch<'_>) {
        let now = instant(now_d);
        self.passes.note(now_d, false);
        {
            let (mut rx, held) = tx.rx_progress();
            self.pass(now, now_d, held, &mut rx);
        }
        let free = tx.available();
        if self.mover.is_some() {
            self.send_for_others(tx);
        }
        self.output(now, tx);
        self.passes.note(now_d, tx.available() < free);
        self.release_frames(tx.held_mut());
        self.publish_due(now_d);
    }

    fn on_spill_poll(&mut self, _q: &QueueInfo, now_d: Duration) -> SpillPass {
        let now = instant(now_d);
        let before = self.mover.as_ref().map(|m| m.stats);
        self.pass(now, now_d, &NoFrames, &mut NoRing);
        let mut pass = self.spill_output(now);
        if let (Some(b), Some(m)) = (before, self.mover.as_ref()) {
            pass.received = m.stats.frames_forwarded_in - b.frames_forwarded_in;
            pass.received_bytes = m.stats.bytes_forwarded_in - b.bytes_forwarded_in;
        }
        self.passes.note(now_d, pass.received > 0 || pass.sent > 0);
        self.publish_due(now_d);
        pass
    }

    fn next_wakeup(&self) -> Option<Duration> {
        let stack = self.stack.poll_timeout().map(duration);
        let moves = self.mover.as_ref().and_then(Mover::next_wakeup);
        let unsent = self
            .opens
            .as_ref()
            .filter(|o| !o.unsent.is_empty())
            .map(|o| duration(o.next_look));
        [stack, moves, unsent].into_iter().flatten().min()
    }

    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.mover.as_ref().and_then(Mover::wake_fd)
    }

    fn app_wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.wake.as_ref().map(|w| w.raw_fd())
    }

    /// The queue fails closed: the application goes (its handlers
    /// dropped: nothing of it runs again), every listener refuses its SYNs
    /// with an RST (RFC 9293 §3.10.7.2, as a listener whose SYN filter
    /// refuses them: counted in `syn_refused`), and every connection is
    /// aborted (RFC 9293 §3.10.5: an RST to its peer where its state sends
    /// one, counted in `resets_aborted`), the RSTs going out on the
    /// worker's next pass. From then on the stack answers the queue's
    /// segments without the application: a segment of a connection it no
    /// longer has gets an RST (RFC 9293 §3.10.7.1), a connection a SYN
    /// cookie completes is reset at its accept (no handler takes it).
    /// Bounded: one abort per connection the stack holds. A panic here (a
    /// stack left inconsistent by the first) ends the worker.
    fn fail_closed(&mut self, _q: &QueueInfo, _now: Duration) -> bool {
        self.rx_sender = None;
        drop(std::mem::take(&mut self.app));
        let refuse: flowlane_tcp::SynFilter = Arc::new(|_| false);
        for &(l, _) in &self.listeners {
            let _ = self.stack.set_syn_filter(l, Some(refuse.clone()));
        }
        for bucket in 0..self.stack.bucket_count() {
            for conn in self.stack.bucket_connections(bucket as u16) {
                let _ = self.stack.abort(conn);
            }
        }
        // Their `Closed` events: no handler is left to hear them.
        while self.stack.poll_event().is_some() {}
        true
    }

    /// The data path stops: the queue's connections are reset
    /// (`TcpHandler::let_go`), each pass as many as the stack's RST
    /// queue and the free frames take, and the RSTs written out for the
    /// worker to transmit. After the worker's loop, [`STOP_PASSES`] passes
    /// at most.
    fn on_stop(&mut self, _q: &QueueInfo, now_d: Duration, tx: &mut TxBatch<'_>) -> bool {
        let now = instant(now_d);
        let budget = tx.available().min(self.stack.config().max_pending_resets);
        let more = self.let_go(budget);
        self.output(now, tx);
        self.release_frames(tx.held_mut());
        more
    }

    /// [`QueueHandler::on_stop`] for a worker without a queue: its
    /// connections reset (`TcpHandler::let_go`, in [`STOP_PASSES`]
    /// passes of the stack's RST queue at most), the RSTs handed to its
    /// carrier.
    fn on_spill_stop(&mut self, _q: &QueueInfo, now_d: Duration) -> SpillPass {
        let now = instant(now_d);
        let mut pass = SpillPass::default();
        for _ in 0..STOP_PASSES {
            let more = self.let_go(self.stack.config().max_pending_resets);
            let out = self.spill_output(now);
            pass.sent += out.sent;
            pass.sent_bytes += out.sent_bytes;
            if !more {
                break;
            }
        }
        pass
    }
}

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod handoff_tests;

#[cfg(test)]
#[path = "rx_prefetch_bench.rs"]
mod rx_prefetch_bench;

#[cfg(test)]
#[path = "move_prefetch_bench.rs"]
mod move_prefetch_bench;

#[cfg(any(test, feature = "fuzzing"))]
#[path = "frame_harness.rs"]
mod frame_harness;

#[cfg(any(test, feature = "fuzzing"))]
#[path = "fuzz_rx.rs"]
pub mod fuzz_rx;

#[cfg(test)]
mod tests {
    //! The handler against a second `flowlane_tcp::Stack` acting as the
    //! peer, frames passed by hand (no sockets): checksums, corruption
    //! counting, MAC learning, zero-copy output and the callbacks.
    use super::*;
    use flowlane_app::{CloseReason, SetupExt};
    use flowlane_tcp::Event;
    use flowlane_wire::packet::parse_frame;

    pub(super) use super::frame_harness::{frame, info, poll, OUR_MAC, PEER_MAC};

    /// The callbacks an [`Echo`] heard, in order.
    type CallLog = Arc<std::sync::Mutex<Vec<String>>>;

    /// Echo handler that also records its callbacks.
    #[derive(Default)]
    struct Echo {
        log: CallLog,
    }

    impl ConnHandler for Echo {
        fn on_accept(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {
            self.log.lock().unwrap().push("accept".into());
        }
        fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
            let mut buf = [0u8; 2048];
            while let Ok(n) = net.recv(conn, &mut buf) {
                if n == 0 {
                    break;
                }
                net.send(conn, &buf[..n]).unwrap();
            }
        }
        fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, r: CloseReason) {
            self.log.lock().unwrap().push(format!("closed {r:?}"));
        }
    }

    #[test]
    fn echoes_through_ipv4_frames_and_counts_corruption() {
        echoes_through_frames_and_counts_corruption("10.99.0.1", "10.99.0.2");
    }

    #[test]
    fn echoes_through_ipv6_frames_and_counts_corruption() {
        echoes_through_frames_and_counts_corruption("fd99::1", "fd99::2");
    }

    /// The worker's `dropped` counts only frames nobody counted: an echo
    /// exchange (handshake, data, FINs) leaves it at 0, and so do frames
    /// the stack drops, each counted under its reason's name; a length
    /// past the buffer, which nothing else counts, is the worker's drop.
    #[test]
    fn frames_processed_normally_are_no_worker_drop() {
        use crate::worker::{rx_verdict, RxVerdict};
        let (ours, peer_ip): (IpAddr, IpAddr) =
            ("10.99.0.1".parse().unwrap(), "10.99.0.2".parse().unwrap());
        let t0 = Duration::from_millis(1);
        let (mut h, mut peer, conn) = handler_and_peer(ours, peer_ip, Echo::default(), t0);
        let (mut seg, mut buf) = ([0u8; 1600], [0u8; 100]);
        let (frames, worker_drops) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
        let (mut echoed, mut last) = (Vec::new(), Vec::new());
        // One frame as the worker takes it: whether it counts it dropped.
        let rx = |h: &mut TcpHandler, now, f: &mut Vec<u8>| {
            let len = f.len();
            frames.set(frames.get() + 1);
            if rx_verdict(h.on_rx(&info(), now, f, len)) == RxVerdict::Drop {
                worker_drops.set(worker_drops.get() + 1);
            }
        };
        for round in 0..200u64 {
            let now = t0 + Duration::from_millis(round);
            while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
                let mut f = frame(&seg[..t.len], peer_ip, ours);
                last = f.clone();
                rx(&mut h, now, &mut f);
            }
            for f in poll(&mut h, now) {
                let parsed = parse_frame(&f).unwrap();
                peer.handle_segment(instant(now), ours, peer_ip, parsed.l4());
            }
            while let Some(ev) = peer.poll_event() {
                if let Event::Connected(_) = ev {
                    peer.send(conn, b"hello flowlane").unwrap();
                }
            }
            if let Ok(n) = peer.recv(conn, &mut buf) {
                echoed.extend_from_slice(&buf[..n]);
                if echoed.len() == 14 {
                    peer.close(conn).unwrap();
                }
            }
        }
        assert_eq!(echoed, b"hello flowlane");
        let c = h.counters().snapshot();
        assert!(c.segments_in >= 4, "{c:?}");
        assert_eq!((worker_drops.get(), frames.get()), (0, c.segments_in));
        // Dropped by the stack: counted there, by reason, not by the worker.
        let now = t0 + Duration::from_millis(300);
        let mut bad = last;
        bad[..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]); // another host's MAC
        rx(&mut h, now, &mut bad);
        rx(&mut h, now, &mut vec![0u8; 10]); // truncated
        let c = h.counters().snapshot();
        assert_eq!(
            (c.not_ours, c.malformed, worker_drops.get()),
            (1, 1, 0),
            "{c:?}"
        );
        // Nothing counts a length past the buffer but the worker.
        let mut short = vec![0u8; 10];
        assert_eq!(
            rx_verdict(h.on_rx(&info(), now, &mut short, 11)),
            RxVerdict::Drop
        );
    }

    /// The handlers of one service (one secret) give a connection the
    /// same flow label (RFC 6437 §3: one label for the connection's every
    /// segment), so that it keeps its label when its bucket moves to
    /// another queue (RFC 6438: ECMP hashing on the label would reroute
    /// it).
    #[test]
    fn a_connection_s_flow_label_is_the_service_s_not_the_queue_s() {
        let cfg = || {
            let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
            cfg.local_ip6 = Some("fd99::1".parse().unwrap());
            cfg
        };
        let (a, b) = (
            TcpHandler::new(&info(), cfg()),
            TcpHandler::new(&info(), cfg()),
        );
        let t = flowlane_tcp::Transmit {
            src: "[fd99::1]:7".parse().unwrap(),
            dst: "[fd99::2]:40001".parse().unwrap(),
            len: 20,
            ecn: flowlane_tcp::Ecn::NotEct,
        };
        assert_eq!(a.flow_label(&t), b.flow_label(&t));
    }

    /// Our handler at `ours` (IPv4 10.99.0.1, IPv6 fd99::1) serving
    /// `service` on port 7, and a peer stack at `peer_ip` that has begun
    /// to connect to it at `t0`: (handler, peer, the peer's handle).
    fn handler_and_peer(
        ours: IpAddr,
        peer_ip: IpAddr,
        service: impl ConnHandler + 'static,
        t0: Duration,
    ) -> (TcpHandler, Stack, ConnHandle) {
        let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        cfg.local_ip6 = Some("fd99::1".parse().unwrap());
        let mut h = TcpHandler::new(&info(), cfg);
        h.listen(7, service).unwrap();
        let mut peer = Stack::new(Config::new([9; 16]));
        let conn = peer
            .connect(
                instant(t0),
                SocketAddr::new(peer_ip, 40001),
                SocketAddr::new(ours, 7),
            )
            .unwrap();
        (h, peer, conn)
    }

    /// A peer stack at `peer_ip` talks to our echo service at `ours`
    /// through Ethernet frames, some of them corrupted.
    fn echoes_through_frames_and_counts_corruption(ours: &str, peer_ip: &str) {
        let ours: IpAddr = ours.parse().unwrap();
        let peer_ip: IpAddr = peer_ip.parse().unwrap();
        let echo = Echo::default();
        let log = echo.log.clone();
        let t0 = Duration::from_millis(1);
        let (mut h, mut peer, conn) = handler_and_peer(ours, peer_ip, echo, t0);
        let mut seg = [0u8; 1600];
        let mut received = Vec::new();
        let mut sent_data = false;
        let mut corrupted = 0;
        let mut labels = std::collections::BTreeSet::new();
        for round in 0..50u64 {
            let now = t0 + Duration::from_millis(round);
            while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
                let mut f = frame(&seg[..t.len], peer_ip, ours);
                // Corrupt one copy of every fourth frame in the payload or
                // TCP header: it must be dropped and counted, the good copy
                // accepted.
                if round % 4 == 1 {
                    let mut bad = f.clone();
                    let last = bad.len() - 1;
                    bad[last] ^= 0x40;
                    bad[ETH_IPV6_TCP_OFFSET + 4] ^= 1;
                    let len = bad.len();
                    // Dropped by the stack, counted there (not by the
                    // worker as well).
                    assert_eq!(h.on_rx(&info(), now, &mut bad, len), RxAction::Consumed);
                    corrupted += 1;
                }
                let len = f.len();
                h.on_rx(&info(), now, &mut f, len);
            }
            for f in poll(&mut h, now) {
                let parsed = parse_frame(&f).expect("valid frame with checksums");
                assert_eq!(parsed.ethernet.dst_addr, EthernetAddress(PEER_MAC));
                if let Network::Ipv6(ip) = parsed.network {
                    labels.insert(ip.flow_label);
                }
                peer.handle_segment(instant(now), ours, peer_ip, parsed.l4());
            }
            while let Some(ev) = peer.poll_event() {
                if let Event::Connected(_) = ev {
                    peer.send(conn, b"hello flowlane").unwrap();
                    sent_data = true;
                }
            }
            let mut buf = [0u8; 100];
            if let Ok(n) = peer.recv(conn, &mut buf) {
                received.extend_from_slice(&buf[..n]);
                if received.len() == 14 {
                    peer.close(conn).unwrap();
                }
            }
        }
        assert!(sent_data);
        assert_eq!(received, b"hello flowlane");
        // RFC 6437: one non-zero label for the connection's every segment.
        if ours.is_ipv6() {
            assert_eq!(labels.len(), 1, "{labels:?}");
            assert!(!labels.contains(&0));
        }
        let c = h.counters().snapshot();
        assert_eq!(c.bad_tcp_checksum, corrupted);
        assert!(corrupted > 0);
        assert_eq!(log.lock().unwrap()[0], "accept");
        // The peer closed after reading: the handler's default closes too.
        let mut now = t0 + Duration::from_millis(60);
        for _ in 0..200 {
            now += Duration::from_millis(5);
            while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
                let mut f = frame(&seg[..t.len], peer_ip, ours);
                let len = f.len();
                h.on_rx(&info(), now, &mut f, len);
            }
            for f in poll(&mut h, now) {
                let parsed = parse_frame(&f).unwrap();
                peer.handle_segment(instant(now), ours, peer_ip, parsed.l4());
            }
        }
        assert_eq!(h.stack.connection_count(), 0);
        assert!(log.lock().unwrap().iter().any(|l| l.starts_with("closed")));
    }

    #[test]
    fn garbage_frames_never_panic() {
        let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        let mut h = TcpHandler::new(&info(), cfg);
        h.listen(7, Echo::default()).unwrap();
        let mut x: u64 = 0x1234_5678;
        let valid = frame(
            &[
                0, 1, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
            ],
            Ipv4Addr::new(10, 99, 0, 2),
            Ipv4Addr::new(10, 99, 0, 1),
        );
        for i in 0..20_000u32 {
            let mut f = valid.clone();
            let flips = 1 + (i % 4);
            for _ in 0..flips {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % f.len();
                f[pos] = (x >> 32) as u8;
            }
            let len = (x as usize >> 8) % (f.len() + 1);
            f.resize(2048, 0);
            h.on_rx(&info(), Duration::from_millis(u64::from(i)), &mut f, len);
        }
        let _ = poll(&mut h, Duration::from_secs(100));
    }

    /// Frames lent to the handler's stack in tests: slots of received
    /// frames, as a worker's `HeldFrames`.
    #[derive(Default)]
    struct TestFrames {
        slots: Vec<Option<Vec<u8>>>,
    }

    impl FrameStore for TestFrames {
        fn frame(&self, id: u32) -> &[u8] {
            self.slots[id as usize].as_deref().expect("a held frame")
        }
    }

    /// Reads nothing when data arrives; takes everything on the loop's
    /// tick, in place (`peek`/`consume`).
    #[derive(Default)]
    struct Lazy {
        conns: Vec<ConnHandle>,
        got: Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl ConnHandler for Lazy {
        fn on_accept(&mut self, _net: &mut dyn Net, conn: ConnHandle) {
            self.conns.push(conn);
        }
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
        fn on_tick(&mut self, net: &mut dyn Net) {
            for &c in &self.conns {
                while let Ok(b) = net.peek(c) {
                    if b.is_empty() {
                        break;
                    }
                    let n = b.len();
                    self.got.lock().unwrap().extend_from_slice(b);
                    net.consume(c, n).unwrap();
                }
            }
        }
    }

    /// Zero-copy receive through the handler: full-sized payloads stay in
    /// the frames lent with them across callbacks (the application reads
    /// them only on its tick, through `Net::peek`), the short last one is
    /// copied, and every frame is released once read.
    #[test]
    fn payload_stays_in_lent_frames_until_the_application_reads_it() {
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let peer_ip: IpAddr = "10.99.0.2".parse().unwrap();
        let lazy = Lazy::default();
        let got = lazy.got.clone();
        let t0 = Duration::from_millis(1);
        let (mut h, mut peer, conn) = handler_and_peer(ours, peer_ip, lazy, t0);
        let data: Vec<u8> = (0..5_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut frames = TestFrames::default();
        let mut seg = [0u8; 1600];
        let mut sent = false;
        for round in 0..20u64 {
            let now = t0 + Duration::from_millis(round);
            while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
                let id = frames.slots.len() as u32;
                frames.slots.push(Some(frame(&seg[..t.len], peer_ip, ours)));
                let f = frames.slots[id as usize].as_deref().unwrap();
                if h.rx_one(instant(now), f, (Some(id), &frames)) != Fate::Kept {
                    frames.slots[id as usize] = None;
                }
                while let Some(slot) = h.stack.poll_released_frame() {
                    frames.slots[slot as usize].take().expect("released once");
                }
            }
            for f in poll(&mut h, now) {
                let parsed = parse_frame(&f).unwrap();
                peer.handle_segment(instant(now), ours, peer_ip, parsed.l4());
            }
            while let Some(ev) = peer.poll_event() {
                if let Event::Connected(_) = ev {
                    assert_eq!(peer.send(conn, &data), Ok(data.len()));
                    sent = true;
                }
            }
        }
        assert!(sent);
        let held = frames.slots.iter().filter(|f| f.is_some()).count();
        assert_eq!(held, 3, "three full-sized payloads kept");
        assert_eq!(h.stack.lent_frames(), 3);
        assert!(got.lock().unwrap().is_empty(), "nothing read yet");
        // The loop's tick: the application reads in place.
        let now = instant(t0 + Duration::from_millis(30));
        let (mut net, app) = h.net(now, &frames);
        app.tick(&mut net);
        assert_eq!(*got.lock().unwrap(), data);
        while let Some(slot) = h.stack.poll_released_frame() {
            frames.slots[slot as usize].take().expect("released once");
        }
        assert!(frames.slots.iter().all(Option::is_none), "every frame back");
        assert_eq!(h.stack.lent_frames(), 0);
    }

    /// Reads what arrives at once, in place (`peek`/`consume`), as a bulk
    /// sink does; counts the bytes.
    #[derive(Default)]
    struct Sink {
        bytes: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl ConnHandler for Sink {
        fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
            while let Ok(b) = net.peek(conn) {
                if b.is_empty() {
                    break;
                }
                let n = b.len();
                self.bytes
                    .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                net.consume(conn, n).unwrap();
            }
        }
    }

    /// One received frame through the data path: classification and
    /// checksums, the stack, the application's callbacks (what `rx_cost`
    /// measures).
    #[inline(never)]
    fn rx_measured(
        h: &mut TcpHandler,
        now: Instant,
        f: &[u8],
        id: u32,
        frames: &TestFrames,
    ) -> Fate {
        h.rx_one(now, f, (Some(id), frames))
    }

    /// The data path's instructions per received frame, for callgrind. A
    /// measurement, not a check (the tests above cover the same path), so
    /// ignored:
    ///
    /// ```text
    /// cargo test --release -p flowlane-dataplane --lib --no-run
    /// valgrind --tool=callgrind --toggle-collect='*rx_measured*' <that test binary> \
    ///     --ignored --exact tcp_handler::tests::rx_cost --nocapture
    /// ```
    ///
    /// 16 MiB from a peer stack over one connection, every frame lent, the
    /// sink reading in place as data arrives; divide the instructions by
    /// the frames it prints.
    #[test]
    #[ignore]
    fn rx_cost() {
        use std::sync::atomic::Ordering;
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let peer_ip: IpAddr = "10.99.0.2".parse().unwrap();
        let sink = Sink::default();
        let got = sink.bytes.clone();
        let t0 = Duration::from_millis(1);
        let (mut h, mut peer, conn) = handler_and_peer(ours, peer_ip, sink, t0);
        const TOTAL: usize = 16 << 20;
        let data = vec![0x5a_u8; 65_536];
        let mut frames = TestFrames::default();
        let mut free: Vec<u32> = Vec::new();
        let (mut sent, mut received, mut connected) = (0, 0u64, false);
        let mut seg = [0u8; 1600];
        for round in 0..1_000_000u64 {
            let now = t0 + Duration::from_micros(round * 100);
            while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
                let f = frame(&seg[..t.len], peer_ip, ours);
                let id = match free.pop() {
                    Some(id) => {
                        frames.slots[id as usize] = Some(f);
                        id
                    }
                    None => {
                        frames.slots.push(Some(f));
                        (frames.slots.len() - 1) as u32
                    }
                };
                received += 1;
                let f = frames.slots[id as usize].as_deref().unwrap();
                if rx_measured(&mut h, instant(now), f, id, &frames) != Fate::Kept {
                    frames.slots[id as usize] = None;
                    free.push(id);
                }
                while let Some(slot) = h.stack.poll_released_frame() {
                    frames.slots[slot as usize].take().expect("released once");
                    free.push(slot);
                }
            }
            for f in poll(&mut h, now) {
                let parsed = parse_frame(&f).unwrap();
                peer.handle_segment(instant(now), ours, peer_ip, parsed.l4());
            }
            while let Some(ev) = peer.poll_event() {
                connected |= matches!(ev, Event::Connected(_));
            }
            while connected && sent < TOTAL {
                match peer.send(conn, &data[..(TOTAL - sent).min(data.len())]) {
                    Ok(n) if n > 0 => sent += n,
                    _ => break,
                }
            }
            if got.load(Ordering::Relaxed) == TOTAL {
                break;
            }
        }
        assert_eq!(got.load(Ordering::Relaxed), TOTAL, "every byte read");
        println!("frames received {received}");
    }

    /// Sends a fixed number of bytes on each connection it accepts, as
    /// fast as its send buffer takes them.
    struct Source {
        left: usize,
        data: Vec<u8>,
    }

    impl Source {
        fn fill(&mut self, net: &mut dyn Net, conn: ConnHandle) {
            while self.left > 0 {
                match net.send(conn, &self.data[..self.left.min(self.data.len())]) {
                    Ok(n) if n > 0 => self.left -= n,
                    _ => {
                        net.want_writable(conn);
                        return;
                    }
                }
            }
        }
    }

    impl ConnHandler for Source {
        fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
            self.fill(net, conn);
        }
        fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
            self.fill(net, conn);
        }
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    }

    /// One received ACK through the data path on the sender's side (what
    /// `tx_cost` measures with [`tx_build_measured`]).
    #[inline(never)]
    fn tx_ack_measured(h: &mut TcpHandler, now: Instant, f: &[u8]) -> Fate {
        h.rx_one(now, f, (None, &NoFrames))
    }

    /// One frame built for the TX ring: the stack's segment, the
    /// application's writes it makes room for, the headers and checksums.
    #[inline(never)]
    fn tx_build_measured(
        h: &mut TcpHandler,
        now: Instant,
        buf: &mut [u8],
    ) -> (bool, Option<usize>) {
        h.build_frame(now, buf)
    }

    /// The data path's instructions per frame sent, for callgrind: the
    /// sender's twin of `rx_cost`. A measurement, not a check, so ignored:
    ///
    /// ```text
    /// cargo test --release -p flowlane-dataplane --lib --no-run
    /// valgrind --tool=callgrind --toggle-collect='*tx_*_measured*' <that test binary> \
    ///     --ignored --exact tcp_handler::tests::tx_cost --nocapture
    /// ```
    ///
    /// Our service sends 16 MiB over one connection to a peer stack that
    /// reads as data arrives; the measured part is every frame our handler
    /// builds (segments, their headers and checksums, and the
    /// application's writes that ACKs make room for) and every ACK it
    /// takes in. Divide the instructions by the data frames it prints.
    #[test]
    #[ignore]
    fn tx_cost() {
        const TOTAL: usize = 16 << 20;
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let peer_ip: IpAddr = "10.99.0.2".parse().unwrap();
        let source = Source {
            left: TOTAL,
            data: vec![0x5a_u8; 65_536],
        };
        let t0 = Duration::from_millis(1);
        let (mut h, mut peer, conn) = handler_and_peer(ours, peer_ip, source, t0);
        let mut seg = [0u8; 1600];
        let mut buf = vec![0u8; 2048];
        let mut rbuf = vec![0u8; 1 << 20];
        let (mut got, mut data_frames, mut acks) = (0usize, 0u64, 0u64);
        for round in 0..1_000_000u64 {
            let now = t0 + Duration::from_micros(round * 100);
            while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
                let f = frame(&seg[..t.len], peer_ip, ours);
                acks += 1;
                tx_ack_measured(&mut h, instant(now), &f);
            }
            if h.stack.poll_timeout().is_some_and(|t| t <= instant(now)) {
                h.stack.handle_timeout(instant(now));
                h.dispatch(instant(now), &NoFrames);
            }
            loop {
                match tx_build_measured(&mut h, instant(now), &mut buf) {
                    (true, Some(n)) => {
                        let parsed = parse_frame(&buf[..n]).unwrap();
                        let l4 = parsed.l4();
                        data_frames += u64::from(l4.len() > 32);
                        peer.handle_segment(instant(now), ours, peer_ip, l4);
                        // The peer answers as a kernel would, an ACK for
                        // every second full segment, before ours sends on.
                        while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
                            let f = frame(&seg[..t.len], peer_ip, ours);
                            acks += 1;
                            tx_ack_measured(&mut h, instant(now), &f);
                        }
                    }
                    (true, None) => {}
                    (false, _) => break,
                }
            }
            while peer.poll_event().is_some() {}
            while let Ok(n) = peer.recv(conn, &mut rbuf) {
                if n == 0 {
                    break;
                }
                got += n;
            }
            if got == TOTAL {
                break;
            }
        }
        assert_eq!(got, TOTAL, "every byte read");
        let s = h.stack.stats();
        println!(
            "frames with data sent {data_frames} (stack: {} data segments, {} retransmitted), ACKs received {acks}",
            s.data_segments_out, s.retransmits
        );
    }

    /// RFC 1122 §3.2.1.3: a SYN from a broadcast (our /24's directed one
    /// too), multicast, "this network", loopback or our own address is
    /// dropped before the stack (no half-open connection, no SYN-ACK to
    /// that address) and counted.
    #[test]
    fn a_syn_from_a_martian_source_is_dropped_and_counted() {
        // SYN from port 1 to port 7, seq 1, window 65535.
        let syn = [
            0, 1, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
        ];
        let ours = Ipv4Addr::new(10, 99, 0, 1);
        let sources = [
            "255.255.255.255",
            "10.99.0.255",
            "224.0.0.1",
            "10.99.0.1",
            "0.0.0.0",
            "127.0.0.1",
        ];
        let mut cfg = TcpConfig::new(ours, OUR_MAC, [1; 16]);
        cfg.local_prefix_len = 24;
        let mut h = TcpHandler::new(&info(), cfg);
        h.listen(7, Echo::default()).unwrap();
        for src in sources {
            let src: Ipv4Addr = src.parse().unwrap();
            let f = frame(&syn, src, ours);
            h.rx_one(Instant::from_millis(1), &f, (None, &NoFrames));
            assert!(
                poll(&mut h, Duration::from_millis(1)).is_empty(),
                "answered {src}"
            );
        }
        assert_eq!(h.stack.connection_count(), 0);
        assert_eq!(h.counters().snapshot().martian_source, sources.len() as u64);
        // A real peer's SYN is still answered.
        let f = frame(&syn, Ipv4Addr::new(10, 99, 0, 2), ours);
        h.neighbors
            .insert(Ipv4Addr::new(10, 99, 0, 2), EthernetAddress(PEER_MAC));
        h.rx_one(Instant::from_millis(1), &f, (None, &NoFrames));
        assert_eq!(poll(&mut h, Duration::from_millis(1)).len(), 1, "SYN-ACK");
    }

    #[test]
    fn no_neighbor_drops_and_counts() {
        let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        let mut h = TcpHandler::new(&info(), cfg);
        struct Opener;
        impl ConnHandler for Opener {
            fn on_start(&mut self, net: &mut dyn Net) {
                let c = net.connect("10.99.0.2:5001".parse().unwrap()).unwrap();
                let port = net.four_tuple(c).unwrap().local.port();
                assert!((40000..=44999).contains(&port));
            }
            fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
        }
        h.add(Opener);
        h.start(Instant::ZERO, &NoFrames);
        assert_eq!(h.stack.connection_count(), 1);
        assert!(poll(&mut h, Duration::ZERO).is_empty());
        assert_eq!(h.counters().snapshot().no_neighbor, 1);
        // Once the peer's MAC is known, the retransmitted SYN goes out.
        h.neighbors
            .insert(Ipv4Addr::new(10, 99, 0, 2), EthernetAddress(PEER_MAC));
        let frames = poll(&mut h, Duration::from_secs(2));
        assert_eq!(frames.len(), 1);
        let f = parse_frame(&frames[0]).unwrap();
        assert_eq!(f.ethernet.dst_addr, EthernetAddress(PEER_MAC));
    }

    /// A peer stack on the link, sending from `mac`.
    struct LinkPeer {
        stack: Stack,
        mac: EthernetAddress,
        conn: ConnHandle,
    }

    impl LinkPeer {
        /// A connection from `ip`:`port` to port 7 of `ours`.
        fn connect(now: Duration, mac: [u8; 6], ip: IpAddr, port: u16, ours: IpAddr) -> Self {
            let mut stack = Stack::new(Config::new([mac[5]; 16]));
            let conn = stack
                .connect(
                    instant(now),
                    SocketAddr::new(ip, port),
                    SocketAddr::new(ours, 7),
                )
                .unwrap();
            LinkPeer {
                stack,
                mac: EthernetAddress(mac),
                conn,
            }
        }

        /// Five rounds, a millisecond apart, of the peer's segments to the
        /// handler and the handler's back (a handshake, an exchange of
        /// data or of FINs, done); returns the time of the last.
        fn talk(
            &mut self,
            h: &mut TcpHandler,
            mut now: Duration,
            addrs: (IpAddr, IpAddr),
        ) -> Duration {
            for _ in 0..5 {
                now += Duration::from_millis(1);
                self.send_to(h, now, addrs);
                exchange(h, &mut [&mut *self], now, addrs);
            }
            now
        }

        /// What the peer has to send, into the handler.
        fn send_to(&mut self, h: &mut TcpHandler, now: Duration, (ip, ours): (IpAddr, IpAddr)) {
            let mut seg = [0u8; 1600];
            while let Some(t) = self.stack.poll_transmit(instant(now), &mut seg) {
                let mut f = frame(&seg[..t.len], ip, ours);
                f[6..12].copy_from_slice(&self.mac.0);
                h.rx_one(instant(now), &f, (None, &NoFrames));
            }
        }
    }

    /// The handler's frames, each to the peers whose MAC it is sent to;
    /// returns (destination MAC, payload length) of each.
    fn exchange(
        h: &mut TcpHandler,
        peers: &mut [&mut LinkPeer],
        now: Duration,
        (ip, ours): (IpAddr, IpAddr),
    ) -> Vec<(EthernetAddress, usize)> {
        let mut out = Vec::new();
        for f in poll(h, now) {
            let parsed = parse_frame(&f).unwrap();
            let dst = parsed.ethernet.dst_addr;
            out.push((dst, parsed.payload().len()));
            for p in peers.iter_mut().filter(|p| p.mac == dst) {
                p.stack.handle_segment(instant(now), ours, ip, parsed.l4());
            }
        }
        for p in peers.iter_mut() {
            while p.stack.poll_event().is_some() {}
        }
        out
    }

    /// Our handler at 10.99.0.1, configured by `cfg`, serving an [`Echo`]
    /// on port 7, and a peer at `ip` (10.99.0.2) whose connection from
    /// port 40001 it has taken: (handler, the echo's log of callbacks,
    /// the peer, when the handshake ended).
    fn echo_with_a_peer(
        cfg: TcpConfig,
        (ip, ours): (IpAddr, IpAddr),
    ) -> (TcpHandler, CallLog, LinkPeer, Duration) {
        let mut h = TcpHandler::new(&info(), cfg);
        let echo = Echo::default();
        let log = echo.log.clone();
        h.listen(7, echo).unwrap();
        let t0 = Duration::from_millis(1);
        let mut p = LinkPeer::connect(t0, PEER_MAC, ip, 40001, ours);
        let now = p.talk(&mut h, t0, (ip, ours));
        assert_eq!(p.stack.state(p.conn), Ok(State::Established));
        (h, log, p, now)
    }

    /// A queue that failed closed (its handler panicked): its connection's
    /// peer gets an RST at once, a new connection's SYN gets one too (a
    /// refused connect, counted as a refused SYN), and the application
    /// hears nothing more (it was dropped).
    #[test]
    fn a_queue_that_failed_closed_resets_its_connections_and_refuses_new_ones() {
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let ip: IpAddr = "10.99.0.2".parse().unwrap();
        let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        let (mut h, log, mut p, mut now) = echo_with_a_peer(cfg, (ip, ours));
        assert_eq!(*log.lock().unwrap(), ["accept"]);
        assert!(h.fail_closed(&info(), now));
        now += Duration::from_millis(1);
        exchange(&mut h, &mut [&mut p], now, (ip, ours));
        assert!(p.stack.state(p.conn).is_err(), "the peer was reset");
        let mut q = LinkPeer::connect(now, PEER_MAC, ip, 40002, ours);
        q.talk(&mut h, now, (ip, ours));
        assert!(
            q.stack.state(q.conn).is_err(),
            "the new connection was refused"
        );
        assert_eq!(h.stack.connection_count(), 0);
        h.publish();
        let c = h.counters().snapshot();
        assert_eq!((c.resets_aborted, c.syn_refused), (1, 1), "{c:?}");
        assert_eq!(
            *log.lock().unwrap(),
            ["accept"],
            "the application heard nothing"
        );
    }

    /// At the data path's stop the queue resets its connections (the
    /// established one's peer gets an RST, counted as an abort, the
    /// connection counted closed: opens add up to closes), but not one in
    /// TIME-WAIT nor a half-open one (a flood's spoofed sources are sent
    /// nothing), which are left to go quietly; the application hears
    /// nothing more.
    /// Done in passes of the budget given: a pass of one leaves the other
    /// for the next.
    #[test]
    fn a_stopping_queue_resets_its_connections_but_half_open_and_time_wait_ones() {
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let ip: IpAddr = "10.99.0.2".parse().unwrap();
        let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        cfg.tcp.msl = flowlane_tcp::time::Duration::from_secs(30);
        let (mut h, log, mut p, mut now) = echo_with_a_peer(cfg, (ip, ours));
        // A second connection from the same peer (one at a time: the
        // peers' frames go by MAC).
        let mut q = LinkPeer::connect(now, PEER_MAC, ip, 40002, ours);
        now = q.talk(&mut h, now, (ip, ours));
        assert_eq!(q.stack.state(q.conn), Ok(State::Established));
        // `q`'s connection closes, ours first: TIME-WAIT here.
        let ours_q = h
            .stack
            .bucket_connections(0)
            .into_iter()
            .find(|&c| {
                h.stack
                    .four_tuple(c)
                    .is_ok_and(|t| t.remote.port() == 40002)
            })
            .unwrap();
        h.stack.close(ours_q).unwrap();
        q.stack.close(q.conn).unwrap();
        now = q.talk(&mut h, now, (ip, ours));
        // (Held as a compact record, or in full.)
        assert_eq!(h.stack.connections_in(State::TimeWait), 1);
        // A half-open one: its SYN taken, the SYN-ACK lost.
        let mut r = LinkPeer::connect(now, PEER_MAC, ip, 40003, ours);
        r.send_to(&mut h, now, (ip, ours));
        let _ = poll(&mut h, now);
        assert_eq!(h.stack.connections_in(State::SynReceived), 1);
        let heard = log.lock().unwrap().len();
        assert!(h.let_go(0), "nothing reset yet: one is left");
        assert!(!h.let_go(1), "the established one, and none is left");
        now += Duration::from_millis(1);
        let sent = exchange(&mut h, &mut [&mut p, &mut q], now, (ip, ours));
        assert_eq!(sent.len(), 1, "one RST: {sent:?}");
        assert!(p.stack.state(p.conn).is_err(), "the peer was reset");
        assert_eq!(h.stack.connections_in(State::TimeWait), 1, "left alone");
        assert_eq!(h.stack.connections_in(State::SynReceived), 1, "left alone");
        h.publish();
        let c = h.counters().snapshot();
        assert_eq!((c.resets_aborted, c.resets_out), (1, 1), "{c:?}");
        // Opens add up to closes (a connection in TIME-WAIT is counted
        // closed) and the half-open one left.
        assert_eq!(
            (c.passive_opens, c.closed, c.in_syn_received),
            (3, 2, 1),
            "{c:?}"
        );
        assert_eq!(
            log.lock().unwrap().len(),
            heard,
            "the application heard nothing"
        );
    }

    /// Closes each connection at the service's stop (a FIN), logging it.
    struct CloseAtStop {
        log: CallLog,
    }

    impl ConnHandler for CloseAtStop {
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
        fn on_stop(&mut self, net: &mut dyn Net, conn: ConnHandle) -> flowlane_app::AtStop {
            self.log.lock().unwrap().push("stop".into());
            net.close(conn).unwrap();
            flowlane_app::AtStop::Finish
        }
    }

    /// Once the service's stop began (`TcpConfig::stopping`), the
    /// worker's next pass asks the handlers about each connection, once
    /// (one closed then: its peer gets our FIN, and nothing is left
    /// finishing), and its listeners refuse new connections (an RST to
    /// the SYN, counted).
    #[test]
    fn a_stop_s_first_pass_asks_the_handlers_and_refuses_new_connections() {
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let ip: IpAddr = "10.99.0.2".parse().unwrap();
        let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        let stopping = cfg.stopping.clone();
        let mut h = TcpHandler::new(&info(), cfg);
        let log = CallLog::default();
        h.listen(7, CloseAtStop { log: log.clone() }).unwrap();
        let t0 = Duration::from_millis(1);
        let mut p = LinkPeer::connect(t0, PEER_MAC, ip, 40001, ours);
        let mut now = p.talk(&mut h, t0, (ip, ours));
        assert_eq!(p.stack.state(p.conn), Ok(State::Established));
        assert!(log.lock().unwrap().is_empty(), "no stop yet");
        stopping.store(true, Ordering::Relaxed);
        for _ in 0..2 {
            now += Duration::from_millis(1);
            // The worker's pass (the harness's `poll` has no application
            // part).
            h.pass(instant(now), now, &NoFrames, &mut NoRing);
            exchange(&mut h, &mut [&mut p], now, (ip, ours));
        }
        assert_eq!(*log.lock().unwrap(), ["stop"], "asked once");
        assert_eq!(p.stack.state(p.conn), Ok(State::CloseWait), "our FIN came");
        let mut q = LinkPeer::connect(now, PEER_MAC, ip, 40002, ours);
        q.talk(&mut h, now, (ip, ours));
        assert!(q.stack.state(q.conn).is_err(), "refused");
        h.publish();
        let c = h.counters().snapshot();
        assert_eq!((c.finishing, c.syn_refused), (0, 1), "{c:?}");
    }

    /// An active open whose peer's MAC never resolves (nothing answers
    /// the kernel's ARP: no host at that on-link address) ends after
    /// [`UNRESOLVED_GIVE_UP`], its handler told it timed out, counted;
    /// not once its SYNs' retransmissions ran out, two minutes on. One
    /// whose peer's MAC comes in time goes on.
    #[test]
    fn an_open_whose_peer_s_mac_never_resolves_ends_after_three_seconds() {
        type Ended = Arc<std::sync::Mutex<Vec<(Duration, CloseReason)>>>;
        struct Opener(Ended);
        impl ConnHandler for Opener {
            fn on_start(&mut self, net: &mut dyn Net) {
                net.connect("10.99.0.77:5001".parse().unwrap()).unwrap();
            }
            fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
            fn on_closed(&mut self, net: &mut dyn Net, _conn: ConnHandle, r: CloseReason) {
                self.0.lock().unwrap().push((net.now(), r));
            }
        }
        let t0 = Duration::from_millis(1);
        for resolves in [false, true] {
            let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
            let mut h = TcpHandler::new(&info(), cfg);
            let ended = Ended::default();
            h.add(Opener(ended.clone()));
            // The worker's passes (more often in truth), 5 s of them.
            let mut at = t0;
            while at <= t0 + Duration::from_secs(5) {
                if resolves && at == t0 + Duration::from_secs(2) {
                    h.neighbors
                        .insert(Ipv4Addr::new(10, 99, 0, 77), EthernetAddress(PEER_MAC));
                }
                h.pass(instant(at), at, &NoFrames, &mut NoRing);
                let _ = poll(&mut h, at);
                at += Duration::from_millis(100);
            }
            let ended = ended.lock().unwrap().clone();
            let unresolved = h.counters().snapshot().neighbor_unresolved;
            if resolves {
                assert_eq!((&ended[..], unresolved), (&[][..], 0), "its SYN went");
                assert_eq!(h.stack.connection_count(), 1);
            } else {
                assert_eq!(ended, [(t0 + Duration::from_secs(3), CloseReason::Timeout)]);
                assert_eq!(unresolved, 1);
                assert!(
                    h.counters().snapshot().no_neighbor >= 2,
                    "its SYNs found no MAC"
                );
                assert_eq!(h.stack.connection_count(), 0);
            }
        }
    }

    /// An open's SYN that found no Ethernet address for its peer goes
    /// again as soon as the address resolves (the next look, a
    /// millisecond on), to that address, not a retransmission timeout (a
    /// second) later.
    #[test]
    fn an_open_s_syn_goes_as_soon_as_its_peer_resolves() {
        struct Opener;
        impl ConnHandler for Opener {
            fn on_start(&mut self, net: &mut dyn Net) {
                net.connect("10.99.0.77:5001".parse().unwrap()).unwrap();
            }
            fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
        }
        let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        let mut h = TcpHandler::new(&info(), cfg);
        h.add(Opener);
        let t0 = Duration::from_millis(1);
        let mut sent_at = None;
        let mut at = t0;
        while at <= t0 + Duration::from_millis(1_500) && sent_at.is_none() {
            if at == t0 + Duration::from_millis(5) {
                h.neighbors
                    .insert(Ipv4Addr::new(10, 99, 0, 77), EthernetAddress(PEER_MAC));
            }
            h.pass(instant(at), at, &NoFrames, &mut NoRing);
            if let Some(f) = poll(&mut h, at).first() {
                let f = parse_frame(f).unwrap();
                assert_eq!(f.ethernet.dst_addr, EthernetAddress(PEER_MAC));
                sent_at = Some(at);
            }
            if let Some(next) = h.next_wakeup() {
                assert!(next > at, "no wake-up in the past");
            }
            at += Duration::from_millis(1);
        }
        assert_eq!(h.counters().snapshot().no_neighbor, 1, "the first SYN");
        let sent_at = sent_at.expect("the SYN went");
        assert!(
            sent_at <= t0 + Duration::from_millis(7),
            "the SYN went at {sent_at:?}"
        );
    }

    /// What an open to `remote` from queue 0's `on_start` returned, and
    /// the frames the queue sent then, with `cfg`.
    fn open_at_start(
        mut cfg: TcpConfig,
        remote: &str,
    ) -> (Result<ConnHandle, Error>, Vec<Vec<u8>>) {
        type Got = Arc<std::sync::Mutex<Option<Result<ConnHandle, Error>>>>;
        struct Opener(Got, SocketAddr);
        impl ConnHandler for Opener {
            fn on_start(&mut self, net: &mut dyn Net) {
                *self.0.lock().unwrap() = Some(net.connect(self.1));
            }
            fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
        }
        let t0 = Duration::from_millis(1);
        cfg.neighbors
            .insert_spec("10.99.0.2=02:00:00:00:00:02")
            .unwrap();
        let mut h = TcpHandler::new(&info(), cfg);
        let got = Got::default();
        h.add(Opener(got.clone(), remote.parse().unwrap()));
        h.start(instant(t0), &NoFrames);
        let opened = got.lock().unwrap().take().expect("on_start ran");
        (opened, poll(&mut h, t0))
    }

    /// A queue without an ephemeral range (a service not started
    /// `active`: replies to its opens would reach the kernel) refuses an
    /// open at once, sending nothing; with one, the open goes out.
    #[test]
    fn a_queue_without_an_ephemeral_range_refuses_opens_at_once() {
        for range in [None, Some(EPHEMERAL)] {
            let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
            cfg.ephemeral = range;
            let (opened, sent) = open_at_start(cfg, "10.99.0.2:80");
            match range {
                None => {
                    assert_eq!(opened, Err(Error::InvalidState));
                    assert!(sent.is_empty(), "no SYN");
                }
                Some(_) => {
                    assert!(opened.is_ok(), "{opened:?}");
                    assert_eq!(sent.len(), 1, "the SYN");
                }
            }
        }
    }

    /// An open to an address no peer can have (broadcast, our /24's
    /// directed one too, multicast, loopback, this network, our own) is
    /// refused at once, nothing sent (RFC 1122 §4.2.3.10), not left to
    /// time out.
    #[test]
    fn an_open_to_an_address_no_peer_can_have_is_refused_at_once() {
        for remote in [
            "255.255.255.255:80",
            "10.99.0.255:80",
            "224.0.0.1:80",
            "127.0.0.1:80",
            "0.0.0.1:80",
            "10.99.0.1:80",
        ] {
            let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
            cfg.local_prefix_len = 24;
            cfg.ephemeral = Some(EPHEMERAL);
            let (opened, sent) = open_at_start(cfg, remote);
            assert_eq!(opened, Err(Error::InvalidAddress), "{remote}");
            assert!(sent.is_empty(), "{remote}: no SYN");
        }
    }

    /// An open to an IPv4-mapped address (as a dual-stack socket names
    /// an IPv4 peer) goes out as IPv4 to the address it maps, as the
    /// kernel-socket backend's connect(2) sends it; it was refused as an
    /// IPv6 peer no address of ours could reach. A mapped address no peer
    /// can have is refused as its IPv4 one is.
    #[test]
    fn an_open_to_an_ipv4_mapped_address_goes_out_as_ipv4() {
        let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        cfg.local_prefix_len = 24;
        cfg.ephemeral = Some(EPHEMERAL);
        let (opened, sent) = open_at_start(cfg.clone(), "[::ffff:10.99.0.2]:80");
        assert!(opened.is_ok(), "{opened:?}");
        assert_eq!(sent.len(), 1, "the SYN");
        let syn = parse_frame(&sent[0]).unwrap();
        assert!(
            matches!(
                syn.ip_pair(),
                Some(flowlane_wire::IpPair::V4 { dst, .. }) if dst == Ipv4Addr::new(10, 99, 0, 2)
            ),
            "{:?}",
            syn.ip_pair()
        );
        for remote in ["[::ffff:10.99.0.255]:80", "[::ffff:127.0.0.1]:80"] {
            let (opened, sent) = open_at_start(cfg.clone(), remote);
            assert_eq!(opened, Err(Error::InvalidAddress), "{remote}");
            assert!(sent.is_empty(), "{remote}: no SYN");
        }
    }

    /// An interface with an IPv6 address only: no IPv4 address is ours
    /// (nor a broadcast), an IPv4 peer has no address of ours to be
    /// reached from, and listeners take IPv6.
    #[test]
    fn an_ipv6_only_queue_has_no_ipv4_address() {
        let v6: Ipv6Addr = "fd99::1".parse().unwrap();
        let local = LocalAddrs::new(None, 24, Some(v6));
        assert_eq!(local.v4_broadcast, None);
        assert!(!local.is_ours("0.0.0.0".parse().unwrap()));
        assert!(local.is_ours(v6.into()));
        assert_eq!(local.of_family("10.99.0.2".parse().unwrap()), None);
        assert_eq!(local.of_family("fd99::2".parse().unwrap()), Some(v6.into()));
        assert_eq!(local.listen_addr(7), "[::]:7".parse().unwrap());
    }

    /// Our prefix's directed broadcast address is the one with every host
    /// bit set, and a /31 or /32 has none (RFC 3021): an open to the
    /// other address of a /31 is not refused.
    #[test]
    fn a_prefix_s_directed_broadcast_is_its_last_address_but_in_a_31_or_32() {
        let ours = Ipv4Addr::new(10, 99, 0, 1);
        for (prefix, broadcast) in [
            (24, Some([10, 99, 0, 255])),
            (16, Some([10, 99, 255, 255])),
            (30, Some([10, 99, 0, 3])),
            (31, None),
            (32, None),
        ] {
            let local = LocalAddrs::new(Some(ours), prefix, None);
            let want = broadcast.map(Ipv4Addr::from);
            assert_eq!(local.v4_broadcast, want, "/{prefix}");
        }
        let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 0), OUR_MAC, [1; 16]);
        cfg.local_prefix_len = 31;
        cfg.ephemeral = Some(EPHEMERAL);
        let (opened, _) = open_at_start(cfg, "10.99.0.1:80");
        assert!(opened.is_ok(), "{opened:?}");
    }

    /// A queue the NIC's RSS table gives no bucket (every bucket on the
    /// other queue) has no port whose replies would reach it: its open is
    /// refused at once saying so (`NotSteeredHere`), not as "address in
    /// use" (the range used up); given a bucket, it opens.
    #[test]
    fn an_open_on_a_queue_without_a_bucket_is_refused_saying_why() {
        for (table, want_ok) in [(vec![1u32; 128], false), ([0u32, 1].repeat(64), true)] {
            let mut cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
            cfg.ephemeral = Some(EPHEMERAL);
            cfg.rss = Some(
                crate::ephemeral::rss_state(
                    flowlane_numa_sched::toeplitz::RssKey::microsoft_default().as_bytes(),
                    &table,
                    2,
                )
                .unwrap(),
            );
            let (opened, sent) = open_at_start(cfg, "10.99.0.2:80");
            if want_ok {
                assert!(opened.is_ok(), "{opened:?}");
                assert_eq!(sent.len(), 1, "the SYN");
            } else {
                assert_eq!(opened, Err(Error::NotSteeredHere));
                assert!(sent.is_empty(), "no SYN");
                assert!(Error::NotSteeredHere.to_string().contains("no bucket"));
            }
        }
    }

    /// The neighbour table is per address, connections are per peer: a
    /// second station that once got a connection from a peer's address
    /// (while the peer's entry was stale: the documented window) does not
    /// take the address back while the peer talks. Its data is taken, its
    /// MAC not confirmed (counted), and the peer's echo goes to the peer.
    #[test]
    fn another_stations_connection_does_not_take_over_a_fresh_entry() {
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let ip: IpAddr = "10.99.0.2".parse().unwrap();
        let mac_x = [2, 0, 0, 0, 0, 0x66];
        let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        let mut h = TcpHandler::new(&info(), cfg);
        h.listen(7, Echo::default()).unwrap();
        let t0 = Duration::from_millis(1);
        let mut p = LinkPeer::connect(t0, PEER_MAC, ip, 40001, ours);
        p.talk(&mut h, t0, (ip, ours));
        assert!(h.neighbors.contains(ip));
        // The peer silent for 31 s: X connects from its address.
        let t1 = Duration::from_secs(32);
        let mut x = LinkPeer::connect(t1, mac_x, ip, 40002, ours);
        for i in 0..5 {
            let now = t1 + Duration::from_millis(i);
            x.send_to(&mut h, now, (ip, ours));
            exchange(&mut h, &mut [&mut p, &mut x], now, (ip, ours));
        }
        assert_eq!(x.stack.state(x.conn).unwrap(), State::Established);
        // X silent for 31 s; the peer talks (its entry again), and X sends
        // one byte in the same pass.
        let t2 = Duration::from_secs(63);
        p.stack.send(p.conn, b"ping").unwrap();
        p.send_to(&mut h, t2, (ip, ours));
        x.stack.send(x.conn, b"!").unwrap();
        x.send_to(&mut h, t2, (ip, ours));
        let out = exchange(&mut h, &mut [&mut p, &mut x], t2, (ip, ours));
        assert!(
            out.contains(&(EthernetAddress(PEER_MAC), 4)),
            "the peer's echo to the peer: {out:?}"
        );
        assert!(
            out.iter().all(|&(mac, _)| mac == EthernetAddress(PEER_MAC)),
            "{out:?}"
        );
        assert_eq!(h.counters().snapshot().neighbor_confirm_refused, 1);
    }

    /// A TCP frame not sent to the interface's MAC (a broadcast, a
    /// multicast, another host's) is not taken, however its IP header
    /// reads: counted as not ours, no SYN-ACK, no half-open connection.
    #[test]
    fn frames_not_sent_to_our_mac_are_dropped_and_counted() {
        let ours: IpAddr = "10.99.0.1".parse().unwrap();
        let ip: IpAddr = "10.99.0.2".parse().unwrap();
        let cfg = TcpConfig::new(Ipv4Addr::new(10, 99, 0, 1), OUR_MAC, [1; 16]);
        let mut h = TcpHandler::new(&info(), cfg);
        h.listen(7, Echo::default()).unwrap();
        let now = Duration::from_millis(1);
        let mut p = Stack::new(Config::new([9; 16]));
        p.connect(
            instant(now),
            SocketAddr::new(ip, 40001),
            SocketAddr::new(ours, 7),
        )
        .unwrap();
        let mut seg = [0u8; 1600];
        let t = p.poll_transmit(instant(now), &mut seg).unwrap();
        let syn = frame(&seg[..t.len], ip, ours);
        let others: [[u8; 6]; 3] = [[0xff; 6], [0x01, 0, 0x5e, 0, 0, 1], [2, 0, 0, 0, 0, 0x99]];
        for dst in others {
            let mut f = syn.clone();
            f[0..6].copy_from_slice(&dst);
            assert_eq!(h.rx_one(instant(now), &f, (None, &NoFrames)), Fate::Passed);
            assert!(poll(&mut h, now).is_empty(), "answered a SYN to {dst:x?}");
        }
        let c = h.counters().snapshot();
        assert_eq!((c.not_ours, c.segments_in), (others.len() as u64, 0));
        assert_eq!(h.stack.connection_count(), 0);
        // To our MAC, it is answered.
        h.rx_one(instant(now), &syn, (None, &NoFrames));
        assert_eq!(poll(&mut h, now).len(), 1, "SYN-ACK");
    }
}
