//! The body of the data path's fuzz target `rx_frames` (`dataplane/fuzz`,
//! `scripts/fuzz.sh rx_frames`): what a queue's TCP endpoint makes of the
//! frames a hostile network hands it, above the stack that `tcp_input`
//! fuzzes alone.
//!
//! Two queues' endpoints ([`TcpHandler`], an echo service on port 7 at
//! 10.99.0.1 and fd99::1, an RSS table of 8 buckets over them) and a peer
//! stack at 10.99.0.2 and fd99::2 with up to 16 connections, its frames
//! routed by the table as a NIC routes them. The input decodes into steps:
//! the peer's connections opened, written, read, shut down, closed or
//! aborted; the frames exchanged; time passing; one endpoint's pass alone
//! (its RX ring's next frames, then its inbox, as a worker's loop); a
//! connection's bucket moved to the other queue; the NIC's entry written
//! at a step of the input's choosing; and what the network adds: raw
//! bytes; a copy of the peer's last frame
//! with a byte changed, a bit flipped or cut short; forged TCP segments
//! with valid checksums, any flags, sequence numbers, window, options and
//! payload, from tuples the peer's connections do not use; ICMP "packet
//! too big" and destination unreachable of any code (v4 and v6) quoting a
//! live connection with any MTU and sequence number. Frames wait on the RX ring of the endpoint the
//! emulated NIC's table names until that endpoint's next pass. Each goes
//! through the next-frame prefetch first (which reads a frame's endpoints
//! unverified), with the following frame as the one after it, and is lent
//! to the endpoint's stack as a worker lends its UMEM frames (zero-copy
//! receive: in-order payload stays in the frame until the application
//! reads it), up to [`LEND_MAX`] frames an endpoint, then handed over
//! unlent.
//!
//! A move is the service's own: the controller (`handoff::move_bucket`)
//! runs on a thread of its own and the endpoints exchange `Prepare`, the
//! export's parts, the rewrite, forwarded and held frames and the drain
//! marker through their `Mesh` inboxes, while the harness steps both
//! endpoints on its thread. The controller's NIC write waits until the
//! input performs it, and the harness waits at each of the controller's
//! sends, so that a run is the input's alone and replays exactly. A move
//! still under way after `MOVE_STEPS_MAX` steps (or at a new move, or at
//! the end) is brought to its end: the entry written, passes until the new
//! endpoint answers the controller. A move that fails is a finding.
//!
//! Checked after every step: no panic; every frame an endpoint emits
//! parses with its checksums; every byte the peer reads back is the byte
//! it wrote at that offset on that connection (the echo never carries
//! anything a forgery or a damaged frame put in); a connection ends only
//! after the peer closed or aborted it, or shut it down and read its
//! whole echo; a stack gives back only frames it was lent and still holds,
//! each once, and holds exactly those it has not given back; no connection
//! is live on both endpoints. At the end, with the network quiet again,
//! every connection the peer did not close or abort (a shut-down one
//! included) gets all it wrote echoed back.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt};
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_numa_sched::RssState;
use flowlane_tcp::{Config, ConnHandle as PeerConn, FourTuple, FrameStore, Stack};
use flowlane_wire::checksum;
use flowlane_wire::packet::{emit_eth_ipv4, emit_eth_ipv6, parse_frame};
use flowlane_wire::{
    EtherType, EthernetAddress, EthernetRepr, IpProtocol, Ipv4Repr, Ipv6Repr, VlanTags,
};

use super::frame_harness::{echo, frame, info, poll_in, FakeRing, OUR_MAC, PEER_MAC};
use super::Fate;
use super::{instant, TcpConfig, TcpHandler};
use crate::bucket_counters::rss_bucket;
use crate::ephemeral::rss_state;
use crate::handoff::{move_bucket, Mesh, MoveError, MoveReport, RssTableWriter};

const OURS_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const PEER_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// A host on the link that no peer connection uses (forgeries come from it
/// too).
const OTHER_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 3);
const PORT: u16 = 7;
/// The peer's connections, at most (source ports from [`PEER_PORT`]).
const MAX_CONNS: usize = 16;
const PEER_PORT: u16 = 40_000;
/// RSS buckets, alternating between the two queues.
const BUCKETS: u32 = 8;
/// Bytes the peer writes at most per step.
const WRITE_MAX: usize = 20_000;
/// Frames an endpoint's stack may hold lent at once (a worker's
/// `held_frames`); past it, frames are handed over unlent.
pub const LEND_MAX: usize = 64;
/// Rounds of the final exchange before an unfinished echo is a failure
/// (10 ms of virtual time each: 60 s).
const SETTLE_ROUNDS: usize = 6_000;
/// Steps a move may stay under way before the harness brings it to its
/// end (the controller's replies wait 2 s of real time).
const MOVE_STEPS_MAX: usize = 64;
/// Rounds of 1 ms in which a move brought to its end must end (the old
/// endpoint's marker waits at most 20 ms, a hold 200 ms).
const MOVE_ROUNDS: usize = 2_000;
/// Virtual time a NIC write the input leaves pending may take before the
/// harness makes it: a real NIC's ends within this (control's ethtool
/// netlink requests wait 2 s at most for their answer, and a write is a
/// read of the table and the write), well inside the 10 s the old worker
/// waits for the rewrite (`handoff::REWRITE_TIMEOUT`). A write left
/// pending past that would stand for a writer that blocks for good, which
/// none of the service's writers can.
const NIC_WRITE_BOUND: Duration = Duration::from_secs(4);
/// Real time the harness and the controller wait for each other at most.
const SPIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

fn ours_v6() -> Ipv6Addr {
    Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1)
}

fn peer_v6() -> Ipv6Addr {
    Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2)
}

/// The byte the peer writes at `offset` of its connection `k`.
fn pattern(k: usize, offset: u64) -> u8 {
    ((k as u64 * 131 + offset) % 251) as u8
}

/// Reads the input: bytes, little-endian numbers, zero once it runs out.
struct Cursor<'a> {
    data: &'a [u8],
}

impl Cursor<'_> {
    fn done(&self) -> bool {
        self.data.is_empty()
    }

    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | (u32::from(self.u16()) << 16)
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let (b, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        b
    }
}

/// An endpoint's frames, as its UMEM: a frame lent to the stack stays
/// until the stack gives it back.
#[derive(Default)]
struct Store {
    slots: Vec<Option<Vec<u8>>>,
    free: Vec<u32>,
    lent: usize,
}

impl FrameStore for Store {
    fn frame(&self, id: u32) -> &[u8] {
        self.slots[id as usize]
            .as_deref()
            .expect("the stack reads only frames it holds")
    }
}

impl Store {
    /// Stores `f`, if there is room, for lending.
    fn put(&mut self, f: &[u8]) -> Option<u32> {
        if self.lent >= LEND_MAX {
            return None;
        }
        self.lent += 1;
        let id = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            (self.slots.len() - 1) as u32
        });
        self.slots[id as usize] = Some(f.to_vec());
        Some(id)
    }

    /// Takes frame `id` back.
    fn release(&mut self, id: u32) {
        let slot = self.slots.get_mut(id as usize);
        assert!(
            slot.is_some_and(|s| s.take().is_some()),
            "frame {id} given back, but not lent or given back before"
        );
        self.lent -= 1;
        self.free.push(id);
    }
}

/// Echoes what it reads, as far as its send buffer takes it.
#[derive(Default)]
struct Echo;

impl ConnHandler for Echo {
    fn on_accept(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if echo(net, conn).1 {
            // Everything read and echoed: our FIN after the echo.
            let _ = net.close(conn);
        }
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.on_data(net, conn);
    }
}

/// Waits (spinning) until `done`; a harness stuck for [`SPIN_LIMIT`] is a
/// failure, naming `what` it waited for.
fn spin_until(mut done: impl FnMut() -> bool, what: &str) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < SPIN_LIMIT, "stuck waiting for {what}");
        std::thread::yield_now();
    }
}

/// The emulated NIC as a move's controller sees it: the write waits until
/// the harness performs it (it rewrites its own table first), at a step
/// of the input's choosing.
#[derive(Default)]
struct StagedNic {
    asked: AtomicBool,
    written: AtomicBool,
}

impl RssTableWriter for StagedNic {
    fn set_entry(&self, _bucket: u16, _queue: u32) -> Result<(), String> {
        self.asked.store(true, Ordering::Release);
        spin_until(
            || self.written.load(Ordering::Acquire),
            "the harness's NIC write",
        );
        Ok(())
    }
}

/// Where a move under way is, as the harness steps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// `Prepare` and `Export` sent; the new endpoint has not taken the
    /// `Prepare` yet.
    Announced,
    /// The new endpoint holds the bucket's frames; the controller waits
    /// for the NIC's entry to be written.
    Asked,
    /// The entry names the new endpoint; `Rewritten` is in the old one's
    /// inbox.
    Written,
    /// The old endpoint sent its drain marker: the new one's next pass
    /// answers the controller.
    Marked,
}

/// A move under way: its controller's thread, its NIC write, its stage.
struct InFlight {
    bucket: u16,
    from: usize,
    to: usize,
    nic: Arc<StagedNic>,
    controller: JoinHandle<Result<MoveReport, MoveError>>,
    stage: Stage,
    steps: usize,
    /// When the controller asked for the NIC write (virtual time).
    asked_at: Duration,
}

/// One of the peer's connections.
struct PeerSide {
    handle: PeerConn,
    v6: bool,
    port: u16,
    /// Bytes the peer's stack took to send, and bytes read back.
    sent: u64,
    got: u64,
    /// The peer shut down its sending side (it still reads the echo).
    shut: bool,
    /// Closed (both ways: data arriving later resets it) or aborted by
    /// the peer.
    done: bool,
}

impl PeerSide {
    /// The connection's tuple on our side.
    fn tuple(&self) -> FourTuple {
        let (ours, peer): (IpAddr, IpAddr) = if self.v6 {
            (ours_v6().into(), peer_v6().into())
        } else {
            (OURS_V4.into(), PEER_V4.into())
        };
        FourTuple {
            local: SocketAddr::new(ours, PORT),
            remote: SocketAddr::new(peer, self.port),
        }
    }
}

struct Harness {
    now: Duration,
    rss: RssState,
    eps: [TcpHandler; 2],
    /// Each endpoint's frames.
    stores: [Store; 2],
    /// Each endpoint's RX ring: frames the NIC steered there, waiting for
    /// its next pass.
    rings: [FakeRing; 2],
    /// The endpoints' inboxes.
    mesh: Arc<Mesh>,
    /// The move under way.
    moving: Option<InFlight>,
    /// Moves done.
    moves: u64,
    /// Which endpoint each bucket's frames reach (the emulated NIC's
    /// table; a move rewrites it when its controller writes the entry).
    owner: Vec<usize>,
    peer: Stack,
    conns: Vec<PeerSide>,
    /// The peer's last frame, for damaged copies.
    last: Vec<u8>,
    /// Frames a stack kept (lent, payload left in them).
    kept: u64,
    /// Print every step (environment `FLOWLANE_FUZZ_TRACE` set), to read a
    /// finding.
    trace: bool,
    scratch: Vec<u8>,
}

impl Harness {
    fn new() -> Harness {
        let table: Vec<u32> = (0..BUCKETS).map(|b| b % 2).collect();
        let rss =
            rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).expect("a valid table");
        let mesh = Arc::new(Mesh::new(2).expect("the endpoints' inboxes"));
        let ep = |queue: u32| {
            let mut cfg = TcpConfig::new(OURS_V4, OUR_MAC, [1; 16]);
            cfg.local_ip6 = Some(ours_v6());
            cfg.rss = Some(rss.clone());
            let mut i = info();
            i.queue = queue;
            let mut h = TcpHandler::with_mover(&i, cfg, mesh.clone());
            h.listen(PORT, Echo).expect("listen");
            h
        };
        Harness {
            now: Duration::from_millis(1),
            owner: table.iter().map(|&q| q as usize).collect(),
            eps: [ep(0), ep(1)],
            stores: Default::default(),
            rings: Default::default(),
            mesh,
            moving: None,
            moves: 0,
            rss,
            peer: Stack::new(Config::new([9; 16])),
            conns: Vec::new(),
            last: Vec::new(),
            kept: 0,
            trace: std::env::var_os("FLOWLANE_FUZZ_TRACE").is_some(),
            scratch: vec![0; 65_536],
        }
    }

    fn ours(v6: bool) -> IpAddr {
        if v6 {
            ours_v6().into()
        } else {
            OURS_V4.into()
        }
    }

    /// The endpoint the NIC gives a frame from `remote` to our `local`.
    fn route(&self, local: SocketAddr, remote: SocketAddr) -> usize {
        let b = rss_bucket(&self.rss, &FourTuple { local, remote });
        self.owner[usize::from(b)]
    }

    /// The endpoint of a frame, by its TCP ports (any other frame: the one
    /// `hint` names).
    fn route_frame(&self, f: &[u8], hint: u8) -> usize {
        match parse_frame(f).ok().and_then(|p| {
            let ips = p.ip_pair()?;
            let tcp = flowlane_wire::peek::tcp_endpoints(f)?;
            Some((ips, tcp))
        }) {
            Some((ips, seg)) => self.route(
                SocketAddr::new(ips.dst(), seg.dst_port),
                SocketAddr::new(ips.src(), seg.src_port),
            ),
            None => usize::from(hint & 1),
        }
    }

    /// Puts `f` on endpoint `to`'s RX ring, for its next pass.
    fn deliver(&mut self, to: usize, f: Vec<u8>) {
        self.rings[to].ring.push_back(f);
    }

    /// One pass of endpoint `i`, as its worker's loop makes it: up to
    /// `budget` frames off its RX ring, then its inbox and moves
    /// ([`TcpHandler::pass`], which may look ahead on the ring); then
    /// whatever the move under way waits for from it. Returns the frames
    /// it took off the ring.
    fn pass_of(&mut self, i: usize, budget: usize) -> usize {
        let batch: Vec<Vec<u8>> = std::iter::from_fn(|| self.rings[i].next())
            .take(budget)
            .collect();
        for (k, f) in batch.iter().enumerate() {
            self.take_in(i, f, batch.get(k + 1).map(Vec::as_slice));
        }
        let now = instant(self.now);
        let (ep, store, ring) = (&mut self.eps[i], &self.stores[i], &mut self.rings[i]);
        ep.pass(now, self.now, store, ring);
        self.take_back(i);
        self.after_pass(i);
        batch.len()
    }

    /// Hands `f` to endpoint `to`, prefetching it first with `after` as the
    /// frame after it (as the worker does) and lending it while there is
    /// room, then takes back the frames its stack gave up.
    fn take_in(&mut self, to: usize, f: &[u8], after: Option<&[u8]>) {
        let now = instant(self.now);
        let (ep, store) = (&mut self.eps[to], &mut self.stores[to]);
        ep.prefetch_state(f, after);
        match store.put(f) {
            Some(id) => {
                let frame = store.frame(id).to_vec();
                if ep.rx_one(now, &frame, (Some(id), &*store)) == Fate::Kept {
                    self.kept += 1;
                } else {
                    store.release(id);
                }
            }
            // Not lent, but the application's reads still go through the
            // frames the stack holds, as in a worker whose held frames ran out.
            None => {
                ep.rx_one(now, f, (None, &*store));
            }
        }
        self.take_back(to);
    }

    /// The frames endpoint `to`'s stack gives back; checks that it holds
    /// the others.
    fn take_back(&mut self, to: usize) {
        let (ep, store) = (&mut self.eps[to], &mut self.stores[to]);
        while let Some(id) = ep.stack.poll_released_frame() {
            store.release(id);
        }
        assert_eq!(
            ep.stack.lent_frames(),
            store.lent,
            "frames endpoint {to} holds"
        );
    }

    /// Everything the endpoints emit goes to the peer.
    fn endpoints_to_peer(&mut self) -> usize {
        let mut moved = 0;
        for i in 0..2 {
            let out = poll_in(&mut self.eps[i], self.now, &self.stores[i]);
            self.take_back(i);
            for f in out {
                let p = parse_frame(&f).expect("the endpoint emits valid frames");
                assert_eq!(p.ethernet.src_addr, EthernetAddress(OUR_MAC));
                let ips = p.ip_pair().expect("an IP frame");
                self.peer
                    .handle_segment(instant(self.now), ips.src(), ips.dst(), p.l4());
                moved += 1;
            }
        }
        moved
    }

    /// Everything the peer sends goes to the endpoints, the last one kept
    /// for damaged copies.
    fn peer_to_endpoints(&mut self) -> usize {
        let mut out = Vec::new();
        while let Some(t) = self
            .peer
            .poll_transmit(instant(self.now), &mut self.scratch)
        {
            out.push(frame(&self.scratch[..t.len], t.src.ip(), t.dst.ip()));
        }
        let n = out.len();
        if let Some(f) = out.last() {
            self.last = f.clone();
        }
        for f in out {
            let to = self.route_frame(&f, 0);
            self.deliver(to, f);
        }
        n
    }

    /// Moves frames both ways until quiet (bounded), each endpoint making
    /// a pass in between, reading what the peer's connections have.
    fn exchange(&mut self) {
        for _ in 0..64 {
            let mut moved = self.peer_to_endpoints();
            for i in 0..2 {
                moved += self.pass_of(i, usize::MAX);
            }
            moved += self.endpoints_to_peer() + self.mesh.pending(0) + self.mesh.pending(1);
            for k in 0..self.conns.len() {
                self.read(k);
            }
            self.peer_events();
            if moved == 0 {
                return;
            }
        }
    }

    /// The peer's events: a connection ends only after the peer closed or
    /// aborted it, or shut it down and read its whole echo (nothing the
    /// network adds may end one).
    fn peer_events(&mut self) {
        while let Some(ev) = self.peer.poll_event() {
            if self.trace {
                eprintln!("  peer event {ev:?}");
            }
            if let flowlane_tcp::Event::Closed { conn, reason } = ev {
                if let Some((k, c)) = self
                    .conns
                    .iter()
                    .enumerate()
                    .find(|(_, c)| c.handle == conn)
                {
                    assert!(
                        c.done || (c.shut && c.got == c.sent),
                        "connection {k} ended ({reason:?}) while the peer kept it open \
                         or before its echo ({} of {} bytes)",
                        c.got,
                        c.sent
                    );
                }
            }
        }
    }

    /// The peer reads connection `k`, checking every byte.
    fn read(&mut self, k: usize) {
        let Some(c) = self.conns.get_mut(k).filter(|c| !c.done) else {
            return;
        };
        while let Ok(n) = self.peer.recv(c.handle, &mut self.scratch) {
            if n == 0 {
                break;
            }
            for (i, &b) in self.scratch[..n].iter().enumerate() {
                let at = c.got + i as u64;
                assert_eq!(
                    b,
                    pattern(k, at),
                    "connection {k}: byte {at} is not the one sent"
                );
            }
            c.got += n as u64;
            assert!(c.got <= c.sent, "connection {k}: more read back than sent");
        }
    }

    fn connect(&mut self, v6: bool) {
        if self.conns.len() >= MAX_CONNS {
            return;
        }
        let port = PEER_PORT + self.conns.len() as u16;
        let (local, remote) = if v6 {
            (IpAddr::from(peer_v6()), IpAddr::from(ours_v6()))
        } else {
            (PEER_V4.into(), OURS_V4.into())
        };
        let now = instant(self.now);
        if let Ok(handle) = self.peer.connect(
            now,
            SocketAddr::new(local, port),
            SocketAddr::new(remote, PORT),
        ) {
            self.conns.push(PeerSide {
                handle,
                v6,
                port,
                sent: 0,
                got: 0,
                shut: false,
                done: false,
            });
        }
    }

    fn write(&mut self, k: usize, len: usize) {
        let Some(c) = self.conns.get_mut(k).filter(|c| !c.shut && !c.done) else {
            return;
        };
        let data: Vec<u8> = (0..len as u64).map(|i| pattern(k, c.sent + i)).collect();
        if let Ok(n) = self.peer.send(c.handle, &data) {
            c.sent += n as u64;
        }
    }

    /// The peer ends connection `k`: `how` 0 shuts its sending side down
    /// (half close), 1 closes it, 2 aborts it.
    fn close(&mut self, k: usize, how: u8) {
        let Some(c) = self.conns.get_mut(k).filter(|c| !c.done) else {
            return;
        };
        match how % 3 {
            0 => {
                let _ = self.peer.shutdown_write(c.handle);
                c.shut = true;
            }
            1 => {
                let _ = self.peer.close(c.handle);
                c.done = true;
            }
            _ => {
                let _ = self.peer.abort(c.handle);
                c.done = true;
            }
        }
    }

    fn wait(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
        let now = instant(self.now);
        if self.peer.poll_timeout().is_some_and(|t| t <= now) {
            self.peer.handle_timeout(now);
        }
        self.exchange();
    }

    /// A copy of the peer's last frame, damaged: `how` picks a byte set to
    /// `val`, a bit flipped, or the frame cut at `at`.
    fn damaged(&mut self, how: u8, at: u16, val: u8) {
        if self.last.is_empty() {
            return;
        }
        let mut f = self.last.clone();
        let i = usize::from(at) % f.len();
        match how % 3 {
            0 => f[i] = val,
            1 => f[i] ^= 1 << (val % 8),
            _ => f.truncate(i),
        }
        let to = self.route_frame(&self.last, how);
        self.deliver(to, f);
    }

    /// A TCP segment with valid checksums from a tuple no live connection
    /// of the peer uses: the other host, or the peer from a port above its
    /// connections'.
    fn forged(&mut self, c: &mut Cursor<'_>) {
        let (v6, other, port) = (c.u8() & 1 == 1, c.u8() & 1 == 1, c.u16());
        let flags = c.u8();
        let (seq, ack, window) = (c.u32(), c.u32(), c.u16());
        let olen = usize::from(c.u8() % 41);
        let opts = c.bytes(olen).to_vec();
        let plen = usize::from(c.u16() % 1500);
        let payload = c.bytes(plen).to_vec();
        let src_port = PEER_PORT + MAX_CONNS as u16 + port % 1000;
        let src: IpAddr = match (v6, other) {
            (false, false) => PEER_V4.into(),
            (false, true) => OTHER_V4.into(),
            (true, false) => peer_v6().into(),
            (true, true) => Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 3).into(),
        };
        let dst = Self::ours(v6);
        // The header, its options padded to a word (with EOL).
        let words = opts.len().div_ceil(4);
        let mut seg = Vec::with_capacity(20 + 4 * words + payload.len());
        seg.extend_from_slice(&src_port.to_be_bytes());
        seg.extend_from_slice(&PORT.to_be_bytes());
        seg.extend_from_slice(&seq.to_be_bytes());
        seg.extend_from_slice(&ack.to_be_bytes());
        seg.push(((5 + words) as u8) << 4);
        seg.push(flags);
        seg.extend_from_slice(&window.to_be_bytes());
        seg.extend_from_slice(&[0, 0, 0, 0]);
        seg.extend_from_slice(&opts);
        seg.resize(20 + 4 * words, 0);
        seg.extend_from_slice(&payload);
        let f = frame(&seg, src, dst);
        let to = self.route(SocketAddr::new(dst, PORT), SocketAddr::new(src, src_port));
        self.deliver(to, f);
    }

    /// An ICMP error by the connection's family, quoting connection `k`'s
    /// segment at sequence number `seq`, sent to the queue `to`'s low bit
    /// names (not always the one that serves the connection): with bit 1
    /// of `to` clear, a "packet too big" (ICMPv4 fragmentation needed, or
    /// ICMPv6 packet too big) with MTU `mtu`; set, a destination
    /// unreachable whose code the bits above it give (any of ICMPv4's 16,
    /// fragmentation needed among them, or ICMPv6's first 8).
    fn icmp_error(&mut self, k: usize, mtu: u16, seq: u32, to: u8) {
        let Some(c) = self.conns.get(k) else {
            return;
        };
        let t = c.tuple();
        let (ours, peer) = (t.local.ip(), t.remote.ip());
        let unreachable = to & 2 != 0;
        // The quote: our segment to the peer's port (first 8 TCP bytes).
        let mut tcp8 = Vec::with_capacity(8);
        tcp8.extend_from_slice(&PORT.to_be_bytes());
        tcp8.extend_from_slice(&c.port.to_be_bytes());
        tcp8.extend_from_slice(&seq.to_be_bytes());
        let mut icmp = Vec::with_capacity(80);
        let eth = EthernetRepr {
            dst_addr: EthernetAddress(OUR_MAC),
            src_addr: EthernetAddress(PEER_MAC),
            vlan: VlanTags::NONE,
            ethertype: EtherType::Ipv4,
        };
        let mut buf = vec![0u8; 200];
        let n = match (ours, peer) {
            (IpAddr::V4(o), IpAddr::V4(p)) => {
                let code = if unreachable { (to >> 2) % 16 } else { 4 };
                icmp.extend_from_slice(&[3, code, 0, 0, 0, 0]);
                icmp.extend_from_slice(&mtu.to_be_bytes());
                let mut quoted = Ipv4Repr::new(o, p, IpProtocol::Tcp, 1400);
                quoted.ttl = 64;
                let mut q = [0u8; 20];
                quoted
                    .emit(&mut flowlane_wire::Ipv4Packet::new_unchecked(&mut q[..]))
                    .expect("a header's room");
                icmp.extend_from_slice(&q);
                icmp.extend_from_slice(&tcp8);
                let sum = checksum::checksum(&icmp);
                icmp[2..4].copy_from_slice(&sum.to_be_bytes());
                let ip = Ipv4Repr::new(p, o, IpProtocol::Icmp, icmp.len());
                let (l4, end) =
                    emit_eth_ipv4(&mut buf, &eth, &ip, IpProtocol::Icmp, icmp.len()).expect("room");
                buf[l4..end].copy_from_slice(&icmp);
                end
            }
            (IpAddr::V6(o), IpAddr::V6(p)) => {
                let (ty, code) = if unreachable {
                    (1, (to >> 2) % 8)
                } else {
                    (2, 0)
                };
                icmp.extend_from_slice(&[ty, code, 0, 0]);
                icmp.extend_from_slice(&u32::from(mtu).to_be_bytes());
                let mut q = vec![0x60, 0, 0, 0, 5, 0xb4, 6, 64];
                q.extend_from_slice(&o.octets());
                q.extend_from_slice(&p.octets());
                icmp.extend_from_slice(&q);
                icmp.extend_from_slice(&tcp8);
                checksum::fill_icmpv6_checksum(&p, &o, &mut icmp).expect("an ICMPv6 message");
                let ip = Ipv6Repr::new(p, o, IpProtocol::Icmpv6, icmp.len());
                let (l4, end) = emit_eth_ipv6(&mut buf, &eth, &ip, IpProtocol::Icmpv6, icmp.len())
                    .expect("room");
                buf[l4..end].copy_from_slice(&icmp);
                end
            }
            _ => unreachable!("one family per connection"),
        };
        buf.truncate(n);
        self.deliver(usize::from(to & 1), buf);
    }

    /// Starts moving the bucket of connection `k` to the other endpoint
    /// (after the move under way, brought to its end first): the
    /// controller on its thread, the harness waiting until its `Prepare`
    /// and `Export` are in the endpoints' inboxes.
    fn start_move(&mut self, k: usize) {
        self.complete_move();
        let Some(c) = self.conns.get(k) else {
            return;
        };
        let bucket = rss_bucket(&self.rss, &c.tuple());
        let view = |e: &TcpHandler| e.mover.as_ref().expect("a mover").owner(bucket) as usize;
        let from = view(&self.eps[0]);
        assert_eq!(
            from,
            view(&self.eps[1]),
            "the endpoints agree on bucket {bucket}"
        );
        assert_eq!(
            from,
            self.owner[usize::from(bucket)],
            "the NIC agrees on bucket {bucket}"
        );
        let to = 1 - from;
        let before = (self.mesh.pending(to as u32), self.mesh.pending(from as u32));
        let nic = Arc::new(StagedNic::default());
        let (mesh, writer) = (self.mesh.clone(), nic.clone());
        let controller = std::thread::spawn(move || {
            move_bucket(&mesh, &*writer, bucket, from as u32, to as u32)
        });
        spin_until(
            || {
                controller.is_finished()
                    || (self.mesh.pending(to as u32) > before.0
                        && self.mesh.pending(from as u32) > before.1)
            },
            "the move's announcement and export",
        );
        if self.trace {
            eprintln!("  move of bucket {bucket}: {from} -> {to}");
        }
        self.moving = Some(InFlight {
            bucket,
            from,
            to,
            nic,
            controller,
            stage: Stage::Announced,
            steps: 0,
            asked_at: Duration::ZERO,
        });
    }

    /// What the move under way waits for after endpoint `i`'s pass: the
    /// new endpoint took `Prepare` (the controller then asks for the NIC
    /// write), the old one sent its drain marker, the new one answered the
    /// controller.
    fn after_pass(&mut self, i: usize) {
        let Some(m) = self.moving.as_mut() else {
            return;
        };
        let mover = self.eps[i].mover.as_ref().expect("a mover");
        match m.stage {
            Stage::Announced if i == m.to && mover.expecting(m.bucket) => {
                let nic = &m.nic;
                spin_until(
                    || nic.asked.load(Ordering::Acquire),
                    "the controller's NIC write",
                );
                m.stage = Stage::Asked;
                m.asked_at = self.now;
            }
            Stage::Written
                if i == m.from
                    && mover.owner(m.bucket) as usize == m.to
                    && !mover.draining_bucket(m.bucket) =>
            {
                m.stage = Stage::Marked;
            }
            Stage::Marked if i == m.to => self.end_move(),
            _ => {}
        }
    }

    /// Writes the NIC's entry of the move waiting for it: frames of the
    /// bucket reach the new endpoint from here on; the harness waits until
    /// the controller's `Rewritten` is in the old endpoint's inbox.
    fn write_entry(&mut self) {
        let Some(m) = self.moving.as_mut().filter(|m| m.stage == Stage::Asked) else {
            return;
        };
        self.owner[usize::from(m.bucket)] = m.to;
        let from = m.from as u32;
        let before = self.mesh.pending(from);
        m.nic.written.store(true, Ordering::Release);
        let (mesh, controller) = (&self.mesh, &m.controller);
        spin_until(
            || controller.is_finished() || mesh.pending(from) > before,
            "the controller's rewrite message",
        );
        m.stage = Stage::Written;
        if self.trace {
            eprintln!("  bucket {}: the NIC's entry names {}", m.bucket, m.to);
        }
    }

    /// Brings the move under way to its end: the entry written, rounds of
    /// 1 ms with both endpoints' passes until the new endpoint answers the
    /// controller.
    fn complete_move(&mut self) {
        for _ in 0..MOVE_ROUNDS {
            if self.moving.is_none() {
                return;
            }
            self.write_entry();
            self.wait(1);
        }
        panic!("a move did not end within {MOVE_ROUNDS} ms");
    }

    /// A connection lives on one endpoint: no tuple is live on both (a
    /// move hands each connection over; a copy left behind would answer
    /// the peer's segments on its own).
    fn check_one_home(&self) {
        for b in 0..BUCKETS as u16 {
            let tuples = |e: &TcpHandler| -> Vec<FourTuple> {
                e.stack
                    .bucket_connections(b)
                    .into_iter()
                    .filter_map(|c| e.stack.four_tuple(c).ok())
                    .collect()
            };
            let (t0, t1) = (tuples(&self.eps[0]), tuples(&self.eps[1]));
            if let Some(t) = t0.iter().find(|t| t1.contains(t)) {
                panic!("bucket {b}: connection {t:?} is live on both endpoints");
            }
        }
    }

    /// The controller's end: its report, or its error (a finding).
    fn end_move(&mut self) {
        let m = self.moving.take().expect("a move under way");
        spin_until(|| m.controller.is_finished(), "the controller's end");
        match m.controller.join() {
            Ok(Ok(report)) => {
                self.moves += 1;
                if self.trace {
                    eprintln!("  moved: {report:?}");
                }
            }
            Ok(Err(e)) => panic!("the move of bucket {} failed: {e:?}", m.bucket),
            Err(_) => panic!("the move of bucket {}: its controller panicked", m.bucket),
        }
    }

    fn step(&mut self, c: &mut Cursor<'_>) {
        if let Some(m) = self.moving.as_mut() {
            m.steps += 1;
            // A controller that gave up early (its error is a finding).
            if m.stage == Stage::Announced && m.controller.is_finished() {
                self.end_move();
            } else if m.steps > MOVE_STEPS_MAX {
                self.complete_move();
            }
        }
        let k = |c: &mut Cursor<'_>| usize::from(c.u8()) % MAX_CONNS;
        let op = c.u8() % 15;
        if self.trace {
            let peek = &c.data[..c.data.len().min(12)];
            eprintln!("t={:?} op {op} {peek:?}", self.now);
        }
        match op {
            0 | 1 => self.exchange(),
            2 => {
                let v6 = c.u8() & 1 == 1;
                self.connect(v6);
            }
            3 => {
                let (k, len) = (k(c), usize::from(c.u16()) % WRITE_MAX);
                self.write(k, len);
            }
            4 => {
                let k = k(c);
                self.read(k);
            }
            5 => {
                let (k, how) = (k(c), c.u8());
                self.close(k, how);
            }
            6 => {
                let ms = u64::from(c.u16() % 4_000);
                // A pending NIC write ends within its bound first.
                let overdue = self.moving.as_ref().is_some_and(|m| {
                    m.stage == Stage::Asked
                        && self.now + Duration::from_millis(ms) > m.asked_at + NIC_WRITE_BOUND
                });
                if overdue {
                    self.write_entry();
                }
                self.wait(ms);
            }
            7 => {
                let to = c.u8();
                let len = usize::from(c.u8());
                let raw = c.bytes(len).to_vec();
                self.deliver(usize::from(to & 1), raw);
            }
            8 => {
                let (how, at, val) = (c.u8(), c.u16(), c.u8());
                self.damaged(how, at, val);
            }
            9 => self.forged(c),
            10 => {
                let (k, mtu, seq, to) = (k(c), c.u16(), c.u32(), c.u8());
                self.icmp_error(k, mtu, seq, to);
            }
            11 => {
                let k = k(c);
                self.start_move(k);
            }
            12 => self.write_entry(),
            13 => {
                // One endpoint's pass alone, taking few frames off its
                // ring (a loaded worker: the rest wait, for a drain's look
                // ahead).
                let (i, budget) = (usize::from(c.u8() & 1), usize::from(c.u8() % 8));
                self.pass_of(i, budget);
            }
            _ => {
                // The peer's frames onto the rings, no pass.
                self.peer_to_endpoints();
            }
        }
        self.peer_events();
    }

    /// The network is quiet again: every open connection's bytes come back.
    fn finish(&mut self) {
        self.complete_move();
        for _ in 0..SETTLE_ROUNDS {
            self.wait(10);
            if self.conns.iter().all(|c| c.done || c.got == c.sent) {
                return;
            }
        }
        for (k, c) in self.conns.iter().enumerate() {
            assert!(
                c.done || c.got == c.sent,
                "connection {k}: {} of {} bytes echoed after the network went quiet",
                c.got,
                c.sent
            );
        }
    }
}

/// Runs the data path's endpoints on the steps `data` decodes into (see
/// the module's documentation); panics on a broken invariant.
pub fn rx_frames_target(data: &[u8]) {
    run(data);
}

/// [`rx_frames_target`], giving back the harness at its end.
fn run(data: &[u8]) -> Harness {
    let mut h = Harness::new();
    let mut c = Cursor { data };
    // One connection of each family first, so that most inputs start
    // with live connections.
    h.connect(false);
    h.connect(true);
    h.exchange();
    while !c.done() {
        h.step(&mut c);
        h.check_one_home();
    }
    h.finish();
    h.check_one_home();
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few hand-made inputs, each a kind of step, and a seeded
    /// pseudo-random set: the smoke run of the target's body (the
    /// campaigns are `scripts/fuzz.sh rx_frames`).
    #[test]
    fn the_target_holds_on_chosen_and_random_inputs() {
        let h = run(&[]);
        assert_eq!(h.conns.len(), 2);
        // Write on each connection, exchange, move, write, wait.
        let h = run(&[
            3, 0, 0x10, 0x27, 3, 1, 0x10, 0x27, 0, 11, 0, 11, 1, 3, 0, 0xff, 0x0f, 6, 0xe8, 3,
        ]);
        assert_eq!(h.conns[0].sent, 10_000 + 4_095, "what A wrote");
        assert_eq!(h.conns[0].got, h.conns[0].sent, "echoed");
        assert_eq!(h.conns[1].got, 10_000);
        assert_eq!(h.moves, 2, "both buckets moved through the mesh");
        assert!(h.kept > 5, "payload kept in lent frames: {}", h.kept);
        let moved: u64 = h
            .eps
            .iter()
            .map(|e| e.counters.snapshot().segments_in)
            .sum();
        assert!(moved > 20, "{moved} segments in");
        // A move stepped by hand while connection 0 streams: its frames on
        // the rings, the move started, passes of a few frames each, the
        // NIC's entry written late, more frames, then time.
        let h = run(&[
            3, 0, 0x10, 0x27, 14, 11, 0, 14, 13, 0, 2, 13, 1, 2, 3, 0, 0x10, 0x27, 14, 13, 0, 1,
            13, 1, 1, 12, 14, 13, 0, 3, 13, 1, 3, 14, 13, 0, 7, 13, 1, 7, 0, 6, 0x10, 0,
        ]);
        let stats = |i: usize| h.eps[i].mover.as_ref().expect("a mover").stats;
        let (s0, s1) = (stats(0), stats(1));
        assert_eq!(h.moves, 1);
        assert!(
            s0.frames_forwarded + s1.frames_forwarded > 0 && s0.frames_held + s1.frames_held > 0,
            "frames forwarded and held: {s0:?} {s1:?}"
        );
        assert_eq!(h.conns[0].got, 20_000, "every byte echoed");
        // Damaged copies of every kind, a forgery, a too-big.
        rx_frames_target(&[
            3, 0, 0, 8, 0, 8, 1, 20, 0, 5, 8, 2, 40, 0, 0, 9, 0, 0, 5, 0, 2, 1, 0, 0, 0, 0, 0, 0,
            0, 0, 0xff, 0xff, 4, 2, 4, 0xb4, 0, 0, 10, 0, 0x78, 0x05, 1, 0, 0, 0, 0, 6, 0x10, 0,
        ]);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..64 {
            let len = (state % 300) as usize;
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            rx_frames_target(&input);
        }
    }
}
