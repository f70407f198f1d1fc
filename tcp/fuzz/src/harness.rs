//! The harness: one [`Stack`] with a listener and established connections, driven by the
//! decoded ops as a data path would drive it (input, timers, events, output), with every
//! emitted segment framed, parsed and checked, and the stack's public state checked after
//! every step. A broken invariant panics, which is what the fuzzer reports.

use crate::frames::{Frames, PAYLOAD_OFFSET};
use crate::input::{AckChoice, AppCall, Op, OptChoice, SeqChoice, Setup, TIMES};
use crate::peer::{fill_pattern, pattern_mismatch, seq_gt, Peer, Role};
use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{
    CloseReason, Config, ConnHandle, Delivery, Ecn, EcnMode, Error, Event, FrameRef, FrameStore,
    KeepaliveConfig, ListenerId, MtuProbing, Stack,
};
use flowlane_wire::packet::{
    emit_eth_ipv4_tcp_headers, emit_eth_ipv6_tcp_headers, ETH_IPV4_TCP_OFFSET, ETH_IPV6_TCP_OFFSET,
};
use flowlane_wire::{
    self as wire, EtherType, EthernetAddress, EthernetRepr, IpProtocol, Ipv4Repr, Ipv6Repr,
    TcpFlags, TcpOptions, TcpRepr, Transport, VlanTags,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Most peers one input can create (the passive and active connections of the setup
/// included).
const MAX_PEERS: usize = 8;
/// The listener's port.
const LISTEN_PORT: u16 = 80;
/// Most segments one drain may produce before the stack counts as running away.
const MAX_DRAIN: usize = 100_000;
/// The least MSS a SYN cookie encodes (`syn_cookie::MSS_TABLE[0]`).
const COOKIE_MIN_MSS: u16 = 536;
/// Largest window scale a receiver may use (RFC 7323 §2.3).
const MAX_WSCALE: u32 = 14;

/// The addresses of one run (one family).
#[derive(Debug, Clone, Copy)]
struct Addrs {
    local: IpAddr,
    peer: IpAddr,
    /// A second remote host, for raw segments from strangers.
    stranger: IpAddr,
    /// A local address nobody listens on.
    other_local: IpAddr,
}

impl Addrs {
    fn new(v6: bool) -> Addrs {
        if v6 {
            let a = |n| IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, n));
            Addrs {
                local: a(1),
                peer: a(2),
                stranger: a(3),
                other_local: a(4),
            }
        } else {
            let a = |n| IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
            Addrs {
                local: a(1),
                peer: a(2),
                stranger: a(3),
                other_local: a(4),
            }
        }
    }
}

/// A connection the application knows of that no peer model describes (opened by raw
/// segments).
#[derive(Debug)]
struct Stranger {
    handle: ConnHandle,
}

/// The stack under test, its peers and the application's view.
#[derive(Debug)]
pub(crate) struct Harness {
    setup: Setup,
    cfg: Config,
    stack: Stack,
    listener: ListenerId,
    addrs: Addrs,
    now: Instant,
    peers: Vec<Peer>,
    strangers: Vec<Stranger>,
    /// Handles that were exported (events for them are stale, not wrong).
    stale: Vec<ConnHandle>,
    /// The peers' MSS, window scale and options.
    peer_mss: u16,
    peer_ts: bool,
    peer_sack: bool,
    peer_wscale: Option<u8>,
    /// The peers ask for ECN (RFC 3168 §6.1.1; the SACK peers do), and
    /// their data arrives with codepoints drawn from its length.
    peer_ecn: bool,
    /// Link behaviour ([`Op::Link`]).
    lose: bool,
    limit: usize,
    /// Frame buffer for the stack's output.
    frame: Vec<u8>,
    /// Payload buffer for the peers' segments.
    payload: Vec<u8>,
    next_port: u16,
    /// Print every op and segment (environment `FLOWLANE_FUZZ_TRACE` set), to read a
    /// reproducer.
    trace: bool,
    /// The frames the peers' data segments arrive in.
    frames: Frames,
}

impl Harness {
    /// A stack configured by `setup`, listening, with its setup connections established.
    pub(crate) fn new(setup: Setup) -> Harness {
        let s = setup.stack;
        let p = setup.peer;
        let mut cfg = Config::new([0x42; 16]);
        cfg.syn_cookies = s & 1 != 0;
        if s & 2 != 0 {
            cfg.mss = 536;
            cfg.send_buffer = 4096;
            cfg.send_buffer_max = 16384;
            cfg.recv_buffer = 4096;
            cfg.recv_buffer_max = 16384;
            cfg.recv_memory = 24 * 1024;
        }
        cfg.timestamps = s & 8 != 0;
        cfg.sack = s & 16 != 0;
        cfg.window_scaling = s & 32 != 0;
        if s & 64 != 0 {
            cfg.keepalive = Some(KeepaliveConfig {
                idle: Duration::from_secs(10),
                interval: Duration::from_secs(2),
                probes: 3,
            });
        }
        cfg.header_prediction = p & 8 == 0;
        // Active opens ask for ECN; passive ones accept it (the peers that
        // ask are `peer_ecn`'s).
        cfg.ecn = EcnMode::On;
        cfg.nagle = p & 16 == 0;
        // Path MTU probes (RFC 4821) from the handshake on in half the runs
        // (every bit of the setup has its use: the parity of both bytes
        // picks); the others probe after a black hole, the default.
        if (s ^ p) & 1 != 0 {
            cfg.mtu_probing = MtuProbing::Always;
        }
        if p & 32 != 0 {
            cfg.listen_backlog = 2;
            cfg.time_wait_max = 2;
            cfg.max_pending_resets = 4;
            cfg.challenge_ack_limit = 3;
        }
        cfg.msl = Duration::from_secs(5);
        // Every in-order payload may stay in its frame.
        cfg.zero_copy_min = 1;
        let addrs = Addrs::new(s & 4 != 0);
        let mut stack = Stack::new(cfg.clone());
        let listener = stack
            .listen(SocketAddr::new(addrs.local, LISTEN_PORT))
            .expect("listen");
        let frame = vec![0; ETH_IPV6_TCP_OFFSET + 60 + usize::from(cfg.mss)];
        let mut h = Harness {
            setup,
            cfg,
            stack,
            listener,
            addrs,
            now: Instant::from_millis(1_000),
            peers: Vec::new(),
            strangers: Vec::new(),
            stale: Vec::new(),
            peer_mss: [1460, 536, 88, 9000][usize::from(p >> 6)],
            peer_ts: p & 1 != 0,
            peer_sack: p & 2 != 0,
            peer_wscale: (p & 4 != 0).then_some(7),
            peer_ecn: p & 2 != 0,
            lose: false,
            limit: 0,
            frame,
            payload: vec![0; 65536],
            next_port: 40_000,
            trace: std::env::var_os("FLOWLANE_FUZZ_TRACE").is_some(),
            frames: Frames::default(),
        };
        // The passive connection: SYN, SYN-ACK, ACK.
        h.step(Op::Syn { conn: 0 });
        h.step(Op::Ack {
            conn: 0,
            ack: AckChoice::Received(0),
            window: 0xffff,
            opts: OptChoice { bits: 1, sack: 0 },
        });
        assert!(h.peers[0].live(), "setup: the passive handshake failed");
        if s & 128 != 0 {
            // The active connection: SYN, SYN-ACK, ACK.
            h.step(Op::Connect);
            h.step(Op::Syn { conn: 1 });
            assert!(h.peers[1].live(), "setup: the active handshake failed");
        }
        h
    }

    /// Runs one op, then lets the stack settle (events, output) and checks everything.
    pub(crate) fn step(&mut self, op: Op) {
        if self.trace {
            eprintln!("{:?} op {op:?}", self.now);
        }
        match op {
            Op::Data {
                conn,
                seq,
                len,
                fin,
                ack,
                window,
                opts,
            } => {
                if let Some(i) = self.peer_index(conn) {
                    let len = usize::from(len) % 4097;
                    self.peer_send(i, seq, len, fin, Some(ack), window, opts, false);
                }
            }
            Op::Ack {
                conn,
                ack,
                window,
                opts,
            } => {
                if let Some(i) = self.peer_index(conn) {
                    self.peer_send(
                        i,
                        SeqChoice::Ahead(0),
                        0,
                        false,
                        Some(ack),
                        window,
                        opts,
                        false,
                    );
                }
            }
            Op::Rst {
                conn,
                seq,
                with_ack,
            } => {
                if let Some(i) = self.peer_index(conn) {
                    let ack = with_ack.then_some(AckChoice::Received(0));
                    self.peer_send(i, seq, 0, false, ack, 0, OptChoice::default(), true);
                }
            }
            Op::Syn { conn } => self.syn(conn),
            Op::Connect => self.connect(),
            Op::Raw {
                target,
                flags,
                seq,
                ack,
                window,
                options,
                options_len,
                payload_len,
                truncate,
            } => self.raw(
                target,
                flags,
                seq,
                ack,
                window,
                &options[..usize::from(options_len % 41)],
                payload_len,
                truncate,
            ),
            Op::Time { ms } => self.advance(Duration::from_millis(TIMES[usize::from(ms & 15)])),
            Op::Write { conn, len } => self.write(conn, len),
            Op::Read { conn, len, peek } => self.read(conn, len, peek),
            Op::App { conn, call } => self.app(conn, call),
            Op::Link { lose, limit } => {
                self.lose = lose;
                self.limit = usize::from(limit);
            }
        }
        self.settle();
        self.check();
    }

    /// The end of an input: time runs on until every timer is quiet or far, with the
    /// peers hearing everything, and the checks hold throughout.
    pub(crate) fn finish(&mut self) {
        self.lose = false;
        self.limit = 0;
        self.settle();
        self.advance(Duration::from_secs(3));
        self.settle();
        self.check();
    }

    /// The stack's counters.
    pub(crate) fn stats(&self) -> flowlane_tcp::Stats {
        *self.stack.stats()
    }

    fn peer_index(&self, conn: u8) -> Option<usize> {
        (!self.peers.is_empty()).then(|| usize::from(conn) % self.peers.len())
    }

    fn remote(&self, p: &Peer) -> SocketAddr {
        SocketAddr::new(self.addrs.peer, p.remote_port)
    }

    fn tsval(&self) -> u32 {
        (self.now.as_millis() as u32).wrapping_add(0x7000_0000)
    }

    /// The options a peer segment carries.
    fn peer_options(&self, p: &Peer, opts: OptChoice) -> TcpOptions {
        let mut o = TcpOptions::default();
        let negotiated = self.peer_ts && p.stack_ts;
        if (opts.bits & 1 != 0 && negotiated) || opts.bits & 2 != 0 {
            let mut v = self.tsval();
            if opts.bits & 4 != 0 {
                v = v.wrapping_sub(0x4000_0000);
            }
            o.timestamps = Some((v, p.ts_recent));
        }
        if opts.bits & 8 != 0 {
            if let Some(nxt) = p.rcv_nxt {
                let n = usize::from((opts.bits >> 4) & 3) + 1;
                let mss = u32::from(self.cfg.mss);
                for k in 0..n {
                    let a = u32::from((opts.sack >> (4 * k)) & 15);
                    let b = a + 1 + u32::from((opts.sack >> (4 * ((k + 1) % 4))) & 3);
                    o.sack_blocks[k] = (nxt.wrapping_add(a * mss), nxt.wrapping_add(b * mss));
                }
                o.sack_block_count = n as u8;
                // Room for them beside timestamps (40 bytes of options).
                while o.emitted_len() > 40 {
                    o.sack_block_count -= 1;
                }
            }
        }
        o
    }

    /// The peer `i` sends a segment.
    #[allow(clippy::too_many_arguments)]
    fn peer_send(
        &mut self,
        i: usize,
        seq: SeqChoice,
        len: usize,
        fin: bool,
        ack: Option<AckChoice>,
        window: u16,
        opts: OptChoice,
        rst: bool,
    ) {
        let p = &self.peers[i];
        if !p.syn_sent {
            return;
        }
        let seq = match seq {
            SeqChoice::Ahead(d) => p.seq_of(p.snd_nxt.wrapping_add(u32::from(d))),
            SeqChoice::Behind(d) => p.seq_of(p.snd_nxt.wrapping_sub(u32::from(d))),
            SeqChoice::WindowEdge(d) => {
                let edge = p.right_edge.unwrap_or(p.seq_of(p.snd_nxt));
                edge.wrapping_add(u32::from(d)).wrapping_sub(32768)
            }
            SeqChoice::Far(d) => p.irs.wrapping_add(u32::from(d).wrapping_mul(65537)),
        };
        let iss = p.iss.unwrap_or(0);
        let ack = ack.map(|a| match a {
            AckChoice::Received(d) => {
                let back = match d >> 14 {
                    0 | 1 => 0,
                    2 => u32::from(d & 0xff),
                    _ => u32::from(d & 0x3fff),
                };
                p.rcv_nxt.unwrap_or(iss.wrapping_add(1)).wrapping_sub(back)
            }
            AckChoice::Future(d) => p
                .stack_max
                .unwrap_or(iss)
                .wrapping_add(1)
                .wrapping_add(u32::from(d)),
            AckChoice::Far(d) => iss.wrapping_add(u32::from(d).wrapping_mul(65537)),
        });
        let mut flags = TcpFlags::default();
        if ack.is_some() {
            flags = flags | TcpFlags::ACK;
        }
        if rst {
            flags = flags | TcpFlags::RST;
        }
        if fin {
            flags = flags | TcpFlags::FIN;
        }
        if len > 0 {
            flags = flags | TcpFlags::PSH;
        }
        let options = if rst {
            TcpOptions::default()
        } else {
            self.peer_options(p, opts)
        };
        let repr = TcpRepr {
            src_port: p.remote_port,
            dst_port: p.local_port,
            seq,
            ack: ack.unwrap_or(0),
            flags,
            window,
            urgent: 0,
            options,
        };
        let start = p.off_of(seq);
        fill_pattern(p.peer_salt, start, &mut self.payload[..len]);
        let lost_ts = p.handle.is_none() && p.stack_ts && repr.options.timestamps.is_none();
        let p = &mut self.peers[i];
        p.wscale_unknown |= lost_ts;
        let end = seq.wrapping_add(len as u32).wrapping_add(u32::from(fin));
        p.note_sent(seq, end);
        if !rst && start == p.snd_nxt && p.fin_at.is_none() {
            p.snd_nxt = p.snd_nxt.wrapping_add(len as u32);
        }
        if fin && !rst {
            p.note_fin(start.wrapping_add(len as u32));
        }
        let (src, dst) = (self.addrs.peer, self.addrs.local);
        if self.trace {
            eprintln!("  in  {repr:?} +{len}");
        }
        let ecn = if self.peer_ecn {
            Ecn::from_bits(len as u8)
        } else {
            Ecn::NotEct
        };
        let id = self.frames.lend(&self.payload[..len]);
        let payload = &self.frames.frame(id)[PAYLOAD_OFFSET as usize..];
        let frame = FrameRef {
            id,
            payload_offset: PAYLOAD_OFFSET,
        };
        let kept = self
            .stack
            .handle_tcp_frame(self.now, src, dst, ecn, &repr, payload, frame);
        if kept != Delivery::Kept {
            self.frames.give_back(id);
        }
    }

    /// The peer's handshake step, or a new peer's SYN.
    fn syn(&mut self, conn: u8) {
        let i = usize::from(conn);
        let i = if i >= self.peers.len() || self.peers.is_empty() {
            if self.peers.len() >= MAX_PEERS {
                return;
            }
            let n = self.peers.len() as u32;
            let port = self.fresh_port();
            // Some ISNs just below the wrap, so that sequence numbers wrap early.
            let irs =
                [0x0100_0000, 0xffff_f000, 0x8000_0000, 0x7fff_ff00][n as usize % 4] ^ (n << 12);
            self.peers
                .push(Peer::new(Role::Passive, LISTEN_PORT, port, irs, n as u8));
            self.peers.len() - 1
        } else {
            i
        };
        let p = &self.peers[i];
        let (seq, ack, mut flags) = match p.role {
            Role::Passive => (p.irs, 0, TcpFlags::SYN),
            Role::Active => {
                let Some(iss) = p.iss else { return };
                (p.irs, iss.wrapping_add(1), TcpFlags::SYN | TcpFlags::ACK)
            }
        };
        if self.peer_ecn {
            // RFC 3168 §6.1.1: an ECN-setup SYN or SYN-ACK.
            flags = flags
                | if flags.ack() {
                    TcpFlags::ECE
                } else {
                    TcpFlags::ECE | TcpFlags::CWR
                };
        }
        let mut options = TcpOptions {
            mss: Some(self.peer_mss),
            window_scale: self.peer_wscale,
            sack_permitted: self.peer_sack,
            ..TcpOptions::default()
        };
        if self.peer_ts {
            let echo = if flags.ack() { p.ts_recent } else { 0 };
            options.timestamps = Some((self.tsval(), echo));
        }
        if p.role == Role::Active && !p.stack_ts {
            options.timestamps = None;
        }
        let repr = TcpRepr {
            src_port: p.remote_port,
            dst_port: p.local_port,
            seq,
            ack,
            flags,
            window: 0xffff,
            urgent: 0,
            options,
        };
        self.peers[i].syn_sent = true;
        let (src, dst) = (self.addrs.peer, self.addrs.local);
        if self.trace {
            eprintln!("  in  {repr:?}");
        }
        let cookies = self.stack.stats().syn_cookies_sent;
        self.stack.handle_tcp(self.now, src, dst, &repr, &[]);
        if self.stack.stats().syn_cookies_sent > cookies {
            self.peers[i].cookie = true;
        }
    }

    fn fresh_port(&mut self) -> u16 {
        self.next_port = self.next_port.wrapping_add(1).max(1024);
        self.next_port
    }

    /// The stack opens a connection to a new peer.
    fn connect(&mut self) {
        if self.peers.len() >= MAX_PEERS {
            return;
        }
        let n = self.peers.len() as u32;
        let local_port = self.fresh_port();
        let remote_port = 5000 + n as u16;
        let local = SocketAddr::new(self.addrs.local, local_port);
        let remote = SocketAddr::new(self.addrs.peer, remote_port);
        let h = self
            .stack
            .connect(self.now, local, remote)
            .expect("connect to a fresh tuple");
        let irs = [0xffff_fff0, 0x0000_1000, 0x7fff_0000, 0x8000_0001][n as usize % 4];
        let mut p = Peer::new(Role::Active, local_port, remote_port, irs, n as u8);
        p.handle = Some(h);
        self.peers.push(p);
    }

    /// A raw segment built from the input's bytes.
    #[allow(clippy::too_many_arguments)]
    fn raw(
        &mut self,
        target: u8,
        flags: u8,
        seq: u32,
        ack: u32,
        window: u16,
        options: &[u8],
        payload_len: u16,
        truncate: u8,
    ) {
        let live: Vec<usize> = (0..self.peers.len())
            .filter(|&i| self.peers[i].synchronized())
            .collect();
        let (src, dst, src_port, dst_port, seq, ack, salt, irs) =
            if target & 0x80 == 0 && !live.is_empty() {
                let p = &self.peers[live[usize::from(target & 0x3f) % live.len()]];
                let (seq, ack) = if target & 0x40 != 0 {
                    (
                        p.seq_of(p.snd_nxt).wrapping_add(seq),
                        p.rcv_nxt.unwrap_or(0).wrapping_add(ack),
                    )
                } else {
                    (seq, ack)
                };
                (
                    self.addrs.peer,
                    self.addrs.local,
                    p.remote_port,
                    p.local_port,
                    seq,
                    ack,
                    p.peer_salt,
                    p.irs,
                )
            } else {
                let src = if target & 0x20 != 0 {
                    self.addrs.stranger
                } else {
                    self.addrs.peer
                };
                let (dst, dst_port) = if target & 0x40 != 0 {
                    (self.addrs.other_local, 81)
                } else {
                    (self.addrs.local, LISTEN_PORT)
                };
                (
                    src,
                    dst,
                    1000 + u16::from(target & 0x1f),
                    dst_port,
                    seq,
                    ack,
                    0xee,
                    0,
                )
            };
        let olen = options.len().div_ceil(4) * 4;
        let hl = 20 + olen;
        let plen = usize::from(payload_len) % 2049;
        let mut seg = vec![0u8; hl + plen];
        seg[0..2].copy_from_slice(&src_port.to_be_bytes());
        seg[2..4].copy_from_slice(&dst_port.to_be_bytes());
        seg[4..8].copy_from_slice(&seq.to_be_bytes());
        seg[8..12].copy_from_slice(&ack.to_be_bytes());
        seg[12] = ((hl / 4) as u8) << 4;
        seg[13] = flags;
        seg[14..16].copy_from_slice(&window.to_be_bytes());
        seg[20..20 + options.len()].copy_from_slice(options);
        let off = seq.wrapping_sub(irs.wrapping_add(1));
        let syn = u32::from(flags & 2 != 0);
        fill_pattern(salt, off.wrapping_add(syn), &mut seg[hl..]);
        // The stack sees the first `n` bytes: a cut payload is a shorter
        // segment (its FIN, if any, right after what is left), and a cut
        // header a malformed one that carries nothing.
        let n = if usize::from(truncate) < seg.len() && truncate & 0x80 == 0 {
            usize::from(truncate)
        } else {
            seg.len()
        };
        let fin = flags & 1 != 0;
        if src == self.addrs.peer && dst == self.addrs.local && n >= hl {
            let plen = n - hl;
            if let Some(p) = self
                .peers
                .iter_mut()
                .find(|p| p.remote_port == src_port && p.local_port == dst_port)
            {
                let end = seq
                    .wrapping_add(plen as u32)
                    .wrapping_add(syn + u32::from(fin));
                p.note_sent(seq, end);
                if fin && flags & 4 == 0 {
                    p.note_fin(off.wrapping_add(syn).wrapping_add(plen as u32));
                }
            }
        }
        if self.trace {
            eprintln!(
                "  raw {src}:{src_port} -> {dst}:{dst_port} {:x?}",
                &seg[..n.min(60)]
            );
        }
        self.stack.handle_segment(self.now, src, dst, &seg[..n]);
    }

    /// Time passes by `d`: every timer due runs, with the stack settled after each.
    fn advance(&mut self, d: Duration) {
        let target = Instant::from_nanos(self.now.as_nanos() + d.as_nanos());
        while let Some(t) = self.stack.poll_timeout() {
            if t > target {
                break;
            }
            if t > self.now {
                self.now = t;
            }
            self.stack.handle_timeout(self.now);
            self.settle();
            if let Some(next) = self.stack.poll_timeout() {
                assert!(
                    next > self.now,
                    "poll_timeout {next:?} not after the timeout just handled at {:?}",
                    self.now
                );
            }
        }
        self.now = target;
        self.stack.handle_timeout(self.now);
    }

    fn peer_of_handle(&self, h: ConnHandle) -> Option<usize> {
        self.peers
            .iter()
            .position(|p| p.handle == Some(h) && !p.dead)
    }

    /// The application writes `len` bytes of its pattern.
    fn write(&mut self, conn: u8, len: u16) {
        let Some(i) = self.peer_index(conn) else {
            return;
        };
        let p = &self.peers[i];
        let Some(h) = p.handle.filter(|_| !p.dead) else {
            return;
        };
        let n = usize::from(len) % 65537;
        let mut data = vec![0; n];
        fill_pattern(p.app_salt, p.written as u32, &mut data);
        match self.stack.send(h, &data) {
            Ok(k) => {
                assert!(k <= n, "send took {k} of {n} bytes");
                assert!(
                    !p.app_shut,
                    "send accepted data after the write side was shut"
                );
                self.peers[i].written += k as u64;
            }
            Err(Error::WouldBlock) | Err(Error::InvalidState) => {}
            Err(e) => panic!("send on a live handle: {e}"),
        }
    }

    /// The application reads up to `len` bytes and checks them against the peer's stream.
    fn read(&mut self, conn: u8, len: u16, peek: bool) {
        let Some(i) = self.peer_index(conn) else {
            return;
        };
        let p = &self.peers[i];
        let Some(h) = p.handle.filter(|_| !p.dead) else {
            return;
        };
        let n = usize::from(len) % 16385 + 1;
        let got: Vec<u8> = if peek {
            match self.stack.peek_in(h, &self.frames) {
                Ok(b) => {
                    let b = b[..b.len().min(n)].to_vec();
                    let k = self.stack.consume(h, b.len()).expect("consume after peek");
                    assert_eq!(k, b.len(), "consume dropped another count than peeked");
                    b
                }
                Err(Error::WouldBlock) => return,
                Err(e) => panic!("peek on a live handle: {e}"),
            }
        } else {
            let mut buf = vec![0; n];
            match self.stack.recv_in(h, &mut buf, &self.frames) {
                Ok(k) => {
                    buf.truncate(k);
                    buf
                }
                Err(Error::WouldBlock) => return,
                Err(e) => panic!("recv on a live handle: {e}"),
            }
        };
        let p = &mut self.peers[i];
        if got.is_empty() {
            if !peek {
                let fin = p.fin_at.expect("end of stream without a FIN from the peer");
                if !p.fin_mixed {
                    assert_eq!(p.read, u64::from(fin), "end of stream before the FIN");
                }
            }
            return;
        }
        if let Some(k) = pattern_mismatch(p.peer_salt, p.read as u32, &got) {
            panic!(
                "byte {} of the peer's stream read wrong (peer {i})",
                p.read + k as u64
            );
        }
        p.read += got.len() as u64;
        assert!(
            p.read <= u64::from(p.snd_max),
            "read {} bytes, the peer's segments reached offset {}",
            p.read,
            p.snd_max
        );
    }

    /// The application acts on a connection.
    fn app(&mut self, conn: u8, call: AppCall) {
        let Some(i) = self.peer_index(conn) else {
            return;
        };
        let p = &self.peers[i];
        let Some(h) = p.handle.filter(|_| !p.dead) else {
            return;
        };
        let r = match call {
            AppCall::Close => {
                self.peers[i].app_shut = true;
                self.stack.close(h)
            }
            AppCall::ShutdownWrite => {
                self.peers[i].app_shut = true;
                self.stack.shutdown_write(h)
            }
            AppCall::Abort => {
                let r = self.stack.abort(h);
                if r.is_ok() {
                    self.peers[i].app_shut = true;
                }
                r
            }
            AppCall::NoDelay => self.stack.set_nodelay(h, true),
            AppCall::WantWritable => self.stack.want_writable(h),
            AppCall::MoveAway => {
                let snap = self
                    .stack
                    .export_in(h, &self.frames)
                    .expect("export of a live handle");
                let h2 = self
                    .stack
                    .import(self.now, snap)
                    .expect("import of the connection just exported");
                self.stale.push(h);
                self.peers[i].handle = Some(h2);
                Ok(())
            }
        };
        match r {
            Ok(()) | Err(Error::InvalidState) | Err(Error::WouldBlock) => {}
            Err(e) => panic!("{call:?} on a live handle: {e}"),
        }
    }

    /// Drains events and output, as the call contract asks after every input.
    fn settle(&mut self) {
        self.drain_events();
        self.drain_transmits();
        self.drain_events();
        while let Some(id) = self.stack.poll_released_frame() {
            self.frames.give_back(id);
        }
        assert_eq!(
            self.stack.lent_frames(),
            self.frames.held(),
            "frames the stack holds"
        );
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.stack.poll_event() {
            match ev {
                Event::Accepted { conn, listener } => {
                    assert_eq!(listener, self.listener, "Accepted on an unknown listener");
                    let t = self
                        .stack
                        .four_tuple(conn)
                        .expect("accepted handle is live");
                    assert_eq!(t.local, SocketAddr::new(self.addrs.local, LISTEN_PORT));
                    match self.peers.iter_mut().find(|p| {
                        p.role == Role::Passive
                            && !p.dead
                            && SocketAddr::new(t.remote.ip(), p.remote_port) == t.remote
                            && t.remote.ip() == self.addrs.peer
                    }) {
                        Some(p) => {
                            assert!(p.handle.is_none(), "a second Accepted for one tuple");
                            p.handle = Some(conn);
                        }
                        None => self.strangers.push(Stranger { handle: conn }),
                    }
                }
                Event::Connected(conn) => {
                    let i = self
                        .peer_of_handle(conn)
                        .expect("Connected for an unknown handle");
                    assert_eq!(self.peers[i].role, Role::Active);
                }
                Event::Readable(c) | Event::Writable(c) | Event::PeerClosed(c) => {
                    self.known_handle(c, &ev);
                }
                Event::Closed { conn, reason } => {
                    if let Some(i) = self.peer_of_handle(conn) {
                        let p = &mut self.peers[i];
                        p.dead = true;
                        if reason == CloseReason::Aborted {
                            assert!(p.app_shut, "Aborted without Stack::abort");
                        }
                    } else if let Some(k) = self.strangers.iter().position(|s| s.handle == conn) {
                        self.strangers.swap_remove(k);
                    } else {
                        assert!(self.stale.contains(&conn), "Closed for an unknown handle");
                    }
                    assert_eq!(
                        self.stack.state(conn),
                        Err(Error::InvalidHandle),
                        "a handle reported Closed still works"
                    );
                }
            }
        }
    }

    fn known_handle(&self, c: ConnHandle, ev: &Event) {
        assert!(
            self.peer_of_handle(c).is_some()
                || self.strangers.iter().any(|s| s.handle == c)
                || self.stale.contains(&c)
                || self.peers.iter().any(|p| p.handle == Some(c)),
            "{ev:?} for an unknown handle"
        );
    }

    /// Takes the stack's output (all of it, or `limit` segments), frames each segment as the
    /// data path does, parses the frame back and checks it; the peers learn from what
    /// arrives.
    fn drain_transmits(&mut self) {
        let v6 = self.addrs.local.is_ipv6();
        let off = if v6 {
            ETH_IPV6_TCP_OFFSET
        } else {
            ETH_IPV4_TCP_OFFSET
        };
        let mut taken = 0;
        let lose = std::mem::take(&mut self.lose);
        loop {
            if self.limit != 0 && taken >= self.limit {
                break;
            }
            let mut frame = std::mem::take(&mut self.frame);
            let Some(t) = self.stack.poll_transmit(self.now, &mut frame[off..]) else {
                self.frame = frame;
                break;
            };
            taken += 1;
            assert!(taken <= MAX_DRAIN, "poll_transmit ran away");
            assert!(
                t.len <= frame.len() - off,
                "Transmit longer than the buffer"
            );
            self.check_segment(&mut frame, off, t, lose);
            self.frame = frame;
        }
    }

    fn check_segment(
        &mut self,
        frame: &mut [u8],
        off: usize,
        t: flowlane_tcp::Transmit,
        lose: bool,
    ) {
        assert!(
            t.src.ip() == self.addrs.local || t.src.ip() == self.addrs.other_local,
            "segment from a foreign address: {t:?}"
        );
        assert_ne!(t.dst.port(), 0, "segment to port 0");
        let eth = EthernetRepr {
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan: VlanTags::default(),
            ethertype: if t.src.is_ipv6() {
                EtherType::Ipv6
            } else {
                EtherType::Ipv4
            },
        };
        let end = match (t.src.ip(), t.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let ip = Ipv4Repr::new(s, d, IpProtocol::Tcp, t.len);
                emit_eth_ipv4_tcp_headers(frame, &eth, &ip, t.len)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ip = Ipv6Repr::new(s, d, IpProtocol::Tcp, t.len);
                emit_eth_ipv6_tcp_headers(frame, &eth, &ip, t.len)
            }
            _ => panic!("segment with mixed address families: {t:?}"),
        }
        .expect("headers fit");
        assert_eq!(end, off + t.len);
        let f = wire::parse_frame(&frame[..end]).expect("emitted segment parses and checks");
        let Transport::Tcp(r) = f.transport else {
            panic!("emitted segment is not TCP")
        };
        assert_eq!(r.src_port, t.src.port());
        assert_eq!(r.dst_port, t.dst.port());
        let payload_len = f.payload.len();
        let fl = r.flags;
        assert!(!(fl.syn() && fl.rst()), "SYN with RST: {r:?}");
        assert!(!(fl.syn() && fl.fin()), "SYN with FIN: {r:?}");
        assert!(
            fl.ack() || fl.syn() || fl.rst(),
            "segment without ACK: {r:?}"
        );
        assert!(!(fl.rst() && payload_len > 0), "RST with data");
        // RFC 3168 §6.1.1, §6.1.4: only data of an ECN connection is ECT.
        assert!(
            t.ecn == Ecn::NotEct || (t.ecn == Ecn::Ect0 && payload_len > 0 && !fl.syn()),
            "{:?} on {r:?} +{payload_len}",
            t.ecn
        );
        assert!(
            t.ecn == Ecn::NotEct || self.peer_ecn,
            "ECT without ECN negotiated: {r:?}"
        );
        if fl.syn() {
            assert_eq!(payload_len, 0, "SYN with data");
            let mss = r.options.mss.expect("SYN without MSS option");
            assert!(mss > 0 && mss <= self.cfg.mss, "SYN offers MSS {mss}");
            if let Some(ws) = r.options.window_scale {
                assert!(u32::from(ws) <= MAX_WSCALE, "window scale {ws} > 14");
            }
        } else {
            assert!(r.options.mss.is_none(), "MSS option outside a SYN");
            assert!(
                r.options.window_scale.is_none(),
                "window scale outside a SYN"
            );
        }
        let payload = frame[f.payload].to_vec();
        if self.trace {
            eprintln!("  out {} -> {} {r:?} +{payload_len}", t.src, t.dst);
        }
        let Some(i) = self.peers.iter().position(|p| {
            p.remote_port == t.dst.port()
                && p.local_port == t.src.port()
                && t.dst.ip() == self.addrs.peer
        }) else {
            // Answers to raw segments (RSTs, challenge ACKs, cookie SYN-ACKs).
            assert!(
                payload_len == 0,
                "data to a tuple no connection was opened on: {r:?}"
            );
            return;
        };
        self.check_peer_segment(i, &r, &payload);
        self.peers[i].on_stack_segment(&r, payload_len, lose);
    }

    /// What the stack sends on a modelled connection: its data is the application's, at
    /// the right place; it acknowledges only what the peer sent; its window edge does not
    /// move back; its segments fit the peer's MSS.
    fn check_peer_segment(&mut self, i: usize, r: &TcpRepr, payload: &[u8]) {
        let p = &self.peers[i];
        let fl = r.flags;
        if p.dead || fl.syn() {
            if fl.syn() && p.role == Role::Passive {
                assert!(fl.ack(), "a SYN without ACK to a peer that connected");
            }
            return;
        }
        let Some(iss) = p.iss else { return };
        if fl.rst() && !fl.ack() {
            // RFC 9293 §3.10.7: <SEQ=SEG.ACK><CTL=RST>, the peer's number echoed.
            return;
        }
        // A SYN cookie keeps the MSS as one of 8 values, 536 the least (as Linux's
        // `msstab`): a peer that announced less gets 536-byte segments. Path MTU
        // probes (RFC 4821) are larger than the MSS in use but never than this
        // bound: the peer's MSS and ours for its family (`Config::mss_for`).
        let peer_mss = if p.cookie {
            self.peer_mss.max(COOKIE_MIN_MSS)
        } else {
            self.peer_mss
        };
        let mss = usize::from(peer_mss.min(self.cfg.mss_for(self.addrs.peer)));
        assert!(
            payload.len() <= mss,
            "segment of {} bytes, MSS {mss}",
            payload.len()
        );
        // Send side: data and FIN at their place in the application's stream, nothing past
        // what was written (SND.NXT ≤ SND.MAX ≤ ISS + 1 + written + FIN).
        let off = r.seq.wrapping_sub(iss.wrapping_add(1));
        let written = p.written as u32;
        let fin_room = u64::from(p.app_shut);
        let end = u64::from(off) + payload.len() as u64;
        if payload.is_empty() {
            // A keepalive probe is at SND.UNA − 1 (RFC 1122 §4.2.3.6): offset −1 at most.
            assert!(
                u64::from(off.wrapping_add(1)) <= p.written + fin_room + 1,
                "segment at offset {off}, {} bytes written: {r:?}",
                p.written
            );
        } else {
            assert!(
                end <= p.written,
                "data at offset {off}+{} past the {} bytes written: {r:?}",
                payload.len(),
                p.written
            );
        }
        if let Some(k) = pattern_mismatch(p.app_salt, off, payload) {
            panic!(
                "byte {} of the application's stream sent wrong (peer {i}): {r:?}",
                off.wrapping_add(k as u32)
            );
        }
        if fl.fin() {
            assert!(p.app_shut, "FIN before the application shut down writing");
            assert_eq!(
                off.wrapping_add(payload.len() as u32),
                written,
                "FIN not right after the last byte written"
            );
        }
        if fl.rst() || !fl.ack() {
            return;
        }
        // Receive side: what is acknowledged was sent, and RCV.NXT and the window's
        // right edge never move back (RFC 9293 §3.8.6) but by under one unit of the window
        // scale (RFC 7323 §2.4: a full buffer's window truncated to the unit).
        let acked = p.off_of(r.ack);
        assert!(
            !seq_gt(acked, p.snd_max),
            "ACK of offset {acked}, the peer's segments reached {}: {r:?}",
            p.snd_max
        );
        if let Some(last) = p.last_ack {
            assert!(
                !seq_gt(last, r.ack),
                "ACK went back from {last} to {}",
                r.ack
            );
        }
        let shift = match (self.peer_wscale, p.stack_wscale) {
            (Some(_), Some(s)) => u32::from(s).min(MAX_WSCALE),
            _ => 0,
        };
        let edge = r.ack.wrapping_add(u32::from(r.window) << shift);
        let p = &mut self.peers[i];
        if p.wscale_unknown {
            p.last_ack = Some(r.ack);
            return;
        }
        if let Some(e) = p.right_edge {
            // Window-scale rounding may lose up to 2^shift − 1 bytes.
            let slack = (1u32 << shift).wrapping_sub(1);
            assert!(
                !seq_gt(e, edge.wrapping_add(slack)),
                "right window edge went back from {e} to {edge} (shift {shift}): {r:?}"
            );
            if seq_gt(edge, e) {
                p.right_edge = Some(edge);
            }
        } else {
            p.right_edge = Some(edge);
        }
        p.last_ack = Some(r.ack);
    }

    /// The stack's public state: counts under their caps, handles alive exactly while the
    /// application was not told otherwise, buffers within their capacities.
    fn check(&self) {
        let s = &self.stack;
        let tw = s.time_wait_count();
        assert!(
            tw <= self.cfg.time_wait_max.max(1),
            "{tw} TIME-WAIT records"
        );
        let count = s.connection_count();
        assert!(count >= tw);
        let known = self.peers.iter().filter(|p| p.live()).count() + self.strangers.len();
        assert!(
            count - tw <= known + self.cfg.listen_backlog,
            "{} connections beside TIME-WAIT, {known} known and a backlog of {}",
            count - tw,
            self.cfg.listen_backlog
        );
        let shift_slack = (count - tw + 1) << MAX_WSCALE;
        assert!(
            s.recv_memory_committed() <= self.cfg.recv_memory + shift_slack,
            "receive memory committed {} of {}",
            s.recv_memory_committed(),
            self.cfg.recv_memory
        );
        let send_max = self.cfg.send_buffer.max(self.cfg.send_buffer_max);
        let recv_max = self.cfg.recv_buffer.max(self.cfg.recv_buffer_max);
        for p in &self.peers {
            let Some(h) = p.handle else { continue };
            if p.dead {
                assert_eq!(s.state(h), Err(Error::InvalidHandle));
                continue;
            }
            let t = s.four_tuple(h).expect("live handle");
            assert_eq!(t.remote, self.remote(p));
            assert_eq!(t.local.port(), p.local_port);
            let space = s.send_space(h).expect("live handle");
            let cap = s.send_capacity(h).expect("live handle");
            assert!(
                space <= cap && cap <= send_max,
                "send space {space} of {cap}"
            );
            let rcap = s.recv_capacity(h).expect("live handle");
            assert!(rcap <= recv_max, "receive capacity {rcap}");
            if let Ok(b) = s.peek_in(h, &self.frames) {
                assert!(
                    b.len() <= rcap + (1 << MAX_WSCALE),
                    "{} bytes readable",
                    b.len()
                );
            }
        }
        let _ = self.setup;
    }
}
