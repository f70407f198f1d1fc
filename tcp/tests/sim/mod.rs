//! Deterministic network simulation for `flowlane-tcp`: two stacks joined by
//! a link with seeded loss, duplication, reordering, delay, jitter,
//! bandwidth, queueing and corruption, driven by a virtual clock.
//!
//! Shared by the integration tests (`mod sim;`) and the `sim_bulk` example
//! (`#[path = "../tests/sim/mod.rs"]`).
// Each includer uses a different part, and `pub` marks what the includers share.
#![allow(dead_code, unreachable_pub)]

pub mod peer;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{
    CloseReason, Config, ConnHandle, Delivery, Ecn, Error, Event, FrameRef, FrameStore, NoFrames,
    Stack,
};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// SplitMix64: small, fast, deterministic across platforms and crates.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// One direction of the link.
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Uniform extra delay in [0, jitter) (can reorder on its own).
    pub jitter: Duration,
    pub loss: f64,
    pub duplicate: f64,
    /// Probability that a packet is held back by `reorder_delay`.
    pub reorder: f64,
    pub reorder_delay: Duration,
    /// Uniform extra delay in [0, reorder_jitter) on top of `reorder_delay`
    /// for held-back packets (a slow path whose queue length varies).
    pub reorder_jitter: Duration,
    /// Probability that one bit of the packet flips in flight.
    pub corrupt: f64,
    /// Bottleneck rate in bits/s; 0 = unlimited.
    pub bandwidth_bps: u64,
    /// Tail-drop when the bottleneck queue holds more than this much delay.
    pub max_queue_delay: Duration,
    /// IP MTU; segments are produced into MTU - 20 byte buffers.
    pub mtu: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(3),
            reorder_jitter: Duration::ZERO,
            corrupt: 0.0,
            bandwidth_bps: 0,
            max_queue_delay: Duration::from_millis(200),
            mtu: 1500,
        }
    }
}

impl LinkConfig {
    /// A lossy, reordering, duplicating, corrupting link.
    pub fn hostile(loss: f64) -> Self {
        LinkConfig {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(2),
            loss,
            duplicate: 0.02,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(7),
            reorder_jitter: Duration::ZERO,
            corrupt: 0.01,
            bandwidth_bps: 100_000_000,
            max_queue_delay: Duration::from_millis(100),
            mtu: 1500,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SimStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub queue_drops: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    /// Corrupted packets caught by the checksum (all of them, for one-bit
    /// flips) and dropped.
    pub checksum_drops: u64,
    /// Packets larger than the path MTU ([`Sim::set_path_mtu`]), dropped
    /// without a word (a black hole).
    pub mtu_drops: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Packet {
    at: Instant,
    order: u64,
    to_b: bool,
    src: IpAddr,
    dst: IpAddr,
    /// The IP header's ECN field ([`Ecn::bits`]).
    ecn: u8,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct Direction {
    cfg: LinkConfig,
    busy_until: Instant,
    /// IP packets larger than this are dropped silently, as by a router
    /// whose "packet too big" messages never arrive (0: no limit). Unlike
    /// `LinkConfig::mtu`, which sizes the sender's buffers, the sender
    /// does not know it.
    path_mtu: usize,
}

/// Which stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

pub const A_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
pub const B_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

/// A callback on every emitted segment: (sending side, segment bytes).
pub type EmitTap = Box<dyn FnMut(Side, &[u8])>;

/// A chosen loss: (sending side, segment bytes) -> whether to drop it.
pub type DropFilter = Box<dyn FnMut(Side, &[u8]) -> bool>;

/// Called before each segment is delivered to B, with B, the segment's
/// source and destination addresses and its bytes (a caller of
/// `Stack::expect`, as the data path is).
pub type BeforeB = Box<dyn FnMut(&mut Stack, IpAddr, IpAddr, &[u8])>;

/// The IP ECN field on the way: (sending side, the codepoint the stack
/// chose, segment bytes) -> the codepoint delivered (a router marking CE).
pub type EcnFilter = Box<dyn FnMut(Side, Ecn, &[u8]) -> Ecn>;

/// The frames B is lent ([`Sim::lend_to_b`]): each segment delivered to B
/// stays in its buffer here while B keeps its payload.
#[derive(Debug, Default)]
pub struct SimFrames {
    slots: Vec<Vec<u8>>,
    held: Vec<bool>,
    free: Vec<u32>,
}

impl FrameStore for SimFrames {
    fn frame(&self, id: u32) -> &[u8] {
        assert!(
            self.held[id as usize],
            "B read frame {id}, which it does not hold"
        );
        &self.slots[id as usize]
    }
}

impl SimFrames {
    fn put(&mut self, bytes: Vec<u8>) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = bytes;
                self.held[id as usize] = true;
                id
            }
            None => {
                self.slots.push(bytes);
                self.held.push(true);
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, id: u32) -> Vec<u8> {
        assert!(
            std::mem::take(&mut self.held[id as usize]),
            "frame {id} given back twice"
        );
        self.free.push(id);
        std::mem::take(&mut self.slots[id as usize])
    }

    /// Frames lent out now.
    pub fn held(&self) -> usize {
        self.held.iter().filter(|h| **h).count()
    }
}

/// Two stacks, a link, a clock.
pub struct Sim {
    pub now: Instant,
    pub a: Stack,
    pub b: Stack,
    ab: Direction,
    ba: Direction,
    queue: BinaryHeap<Reverse<Packet>>,
    order: u64,
    pub rng: Rng,
    pub stats: SimStats,
    buf: Vec<u8>,
    pool: Vec<Vec<u8>>,
    /// When false, segments are not moved (a cut link); they are dropped.
    pub link_up: bool,
    /// Print every delivered segment (set SIM_TRACE=1).
    pub trace: bool,
    /// Deliver to B through [`sim_deliver_to_b_measured`] instead of
    /// [`sim_deliver_to_b`], so that a profiler can collect one phase of a
    /// run (`callgrind --toggle-collect=*sim_deliver_to_b_measured*`).
    pub measure: bool,
    /// When set, every delivered segment is recorded here: (receiving
    /// side, raw bytes with checksum).
    pub tap: Option<Vec<(Side, Vec<u8>)>>,
    /// When set, called with every segment a stack emits (sending side,
    /// bytes with checksum), before the link can lose or reorder it.
    pub emit_tap: Option<EmitTap>,
    /// When set, called with every segment a stack emits after
    /// `emit_tap`; returning true loses it on the link (a chosen loss).
    pub drop_filter: Option<DropFilter>,
    /// When set, called with every segment a stack emits after
    /// `emit_tap`, with its ECN codepoint ([`flowlane_tcp::Transmit::ecn`]);
    /// what it returns is delivered ([`Stack::handle_segment_ecn`]) if
    /// the link does not lose the segment.
    pub ecn_filter: Option<EcnFilter>,
    /// When set, B is lent the buffer of every segment it receives
    /// ([`Stack::handle_tcp_frame`]) and reads through it.
    pub frames_b: Option<SimFrames>,
    /// When set, called before each delivery to B.
    pub before_b: Option<BeforeB>,
}

// Separate, never-inlined entry points per side, so that a profiler can
// attribute cost to one stack (`callgrind --toggle-collect=*sim_deliver_to_b*`).

#[inline(never)]
pub fn sim_deliver_to_a(
    s: &mut Stack,
    now: Instant,
    src: IpAddr,
    dst: IpAddr,
    ecn: Ecn,
    seg: &[u8],
) {
    s.handle_segment_ecn(now, src, dst, ecn, seg);
}

#[inline(never)]
pub fn sim_deliver_to_b(
    s: &mut Stack,
    now: Instant,
    src: IpAddr,
    dst: IpAddr,
    ecn: Ecn,
    seg: &[u8],
) {
    // Distinct bodies so that the linker does not fold the two wrappers.
    std::hint::black_box(2u8);
    s.handle_segment_ecn(now, src, dst, ecn, seg);
}

#[inline(never)]
pub fn sim_deliver_to_b_measured(
    s: &mut Stack,
    now: Instant,
    src: IpAddr,
    dst: IpAddr,
    ecn: Ecn,
    seg: &[u8],
) {
    std::hint::black_box(3u8);
    s.handle_segment_ecn(now, src, dst, ecn, seg);
}

/// [`sim_deliver_to_b`] with the segment's buffer lent to B (frame `id`
/// of `frames`): whether B kept it. (Named so that the profiler's
/// `*sim_deliver_to_b*` patterns match it too.)
#[inline(never)]
pub fn sim_deliver_to_b_frame(
    s: &mut Stack,
    now: Instant,
    ip: (IpAddr, IpAddr, Ecn),
    frames: &SimFrames,
    id: u32,
) -> bool {
    std::hint::black_box(4u8);
    deliver_frame(s, now, ip, frames, id)
}

/// [`sim_deliver_to_b_frame`], measured (see [`Sim::measure`]).
#[inline(never)]
pub fn sim_deliver_to_b_measured_frame(
    s: &mut Stack,
    now: Instant,
    ip: (IpAddr, IpAddr, Ecn),
    frames: &SimFrames,
    id: u32,
) -> bool {
    std::hint::black_box(5u8);
    deliver_frame(s, now, ip, frames, id)
}

/// The body of both: not a profiler's toggle itself (a nested toggle would
/// switch collection off again).
#[inline(always)]
fn deliver_frame(
    s: &mut Stack,
    now: Instant,
    (src, dst, ecn): (IpAddr, IpAddr, Ecn),
    frames: &SimFrames,
    id: u32,
) -> bool {
    let seg = frames.frame(id);
    match flowlane_wire::TcpRepr::parse_segment(seg) {
        Ok((r, pl)) => {
            let frame = FrameRef {
                id,
                payload_offset: (pl.as_ptr() as usize - seg.as_ptr() as usize) as u32,
            };
            s.handle_tcp_frame(now, src, dst, ecn, &r, pl, frame) == Delivery::Kept
        }
        Err(_) => {
            s.handle_segment_ecn(now, src, dst, ecn, seg);
            false
        }
    }
}

#[inline(never)]
pub fn sim_poll_a(s: &mut Stack, now: Instant, buf: &mut [u8]) -> Option<flowlane_tcp::Transmit> {
    s.poll_transmit(now, buf)
}

#[inline(never)]
pub fn sim_poll_b(s: &mut Stack, now: Instant, buf: &mut [u8]) -> Option<flowlane_tcp::Transmit> {
    std::hint::black_box(2u8);
    s.poll_transmit(now, buf)
}

/// A test configuration: short MSL, fixed secrets.
pub fn test_config(secret: u8) -> Config {
    let mut c = Config::new([secret; 16]);
    // 2*MSL = 60 s: as long as the largest RTO, so that TIME-WAIT outlasts
    // backed-off FIN retransmissions on lossy links (virtual time is free).
    c.msl = Duration::from_secs(30);
    c
}

/// RFC 1071 ones' complement sum over the IPv4 pseudo-header and segment.
pub fn tcp_checksum(src: IpAddr, dst: IpAddr, seg: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        let mut chunks = b.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [x] = chunks.remainder() {
            sum += u32::from(*x) << 8;
        }
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            add(&s.octets());
            add(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            add(&s.octets());
            add(&d.octets());
        }
        _ => panic!("mixed families"),
    }
    add(&[0, 6]);
    add(&(seg.len() as u16).to_be_bytes());
    add(seg);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Sim {
    pub fn new(seed: u64, ab: LinkConfig, ba: LinkConfig, a: Config, b: Config) -> Self {
        Sim {
            now: Instant::from_millis(1),
            a: Stack::new(a),
            b: Stack::new(b),
            ab: Direction {
                cfg: ab,
                busy_until: Instant::ZERO,
                path_mtu: 0,
            },
            ba: Direction {
                cfg: ba,
                busy_until: Instant::ZERO,
                path_mtu: 0,
            },
            queue: BinaryHeap::new(),
            order: 0,
            rng: Rng::new(seed),
            stats: SimStats::default(),
            buf: vec![0; 65536],
            pool: Vec::new(),
            link_up: true,
            trace: std::env::var_os("SIM_TRACE").is_some(),
            measure: false,
            tap: None,
            emit_tap: None,
            drop_filter: None,
            ecn_filter: None,
            frames_b: None,
            before_b: None,
        }
    }

    /// Lends B the buffer of every segment it receives from now on
    /// (zero-copy receive): B reads through [`Sim::frames_b`].
    pub fn lend_to_b(&mut self) {
        self.frames_b = Some(SimFrames::default());
    }

    /// B's frame store (for reading B's connections).
    pub fn b_frames(&self) -> &dyn FrameStore {
        match &self.frames_b {
            Some(f) => f,
            None => &NoFrames,
        }
    }

    /// Takes back the frames B released.
    fn frames_back(&mut self) {
        if let Some(frames) = self.frames_b.as_mut() {
            while let Some(id) = self.b.poll_released_frame() {
                self.pool.push(frames.take(id));
            }
        }
    }

    /// Both directions with the same link.
    pub fn symmetric(seed: u64, link: LinkConfig) -> Self {
        Self::new(seed, link, link, test_config(1), test_config(2))
    }

    /// From now on, IP packets `from` sends that are larger than `mtu`
    /// bytes (IPv4 or IPv6 header included) are dropped without a word: a
    /// path MTU black hole. 0 lifts the limit.
    pub fn set_path_mtu(&mut self, from: Side, mtu: usize) {
        match from {
            Side::A => self.ab.path_mtu = mtu,
            Side::B => self.ba.path_mtu = mtu,
        }
    }

    /// The link `from` sends on, to change between steps (a route that
    /// changed: another delay, another rate); packets already on their
    /// way keep the times they were given.
    pub fn link_mut(&mut self, from: Side) -> &mut LinkConfig {
        match from {
            Side::A => &mut self.ab.cfg,
            Side::B => &mut self.ba.cfg,
        }
    }

    pub fn stack(&mut self, side: Side) -> &mut Stack {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Puts a raw segment on the wire towards `to` (for hostile tests),
    /// with a valid checksum so that it reaches the stack.
    pub fn inject(&mut self, to: Side, src: IpAddr, dst: IpAddr, seg: &[u8]) {
        self.inject_ecn(to, src, dst, Ecn::NotEct, seg);
    }

    /// As [`Sim::inject`], with `ecn` in the IP header (a segment a router
    /// marked).
    pub fn inject_ecn(&mut self, to: Side, src: IpAddr, dst: IpAddr, ecn: Ecn, seg: &[u8]) {
        let mut bytes = self.pool.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(seg);
        if bytes.len() >= 18 {
            bytes[16..18].fill(0);
            let ck = tcp_checksum(src, dst, &bytes);
            bytes[16..18].copy_from_slice(&ck.to_be_bytes());
        } else if tcp_checksum(src, dst, &bytes) != 0 {
            // Too short to carry a checksum: deliver it raw.
            self.stats.delivered += 1;
            let stack = if to == Side::B {
                &mut self.b
            } else {
                &mut self.a
            };
            stack.handle_segment(self.now, src, dst, &bytes);
            return;
        }
        self.order += 1;
        self.queue.push(Reverse(Packet {
            at: self.now,
            order: self.order,
            to_b: to == Side::B,
            src,
            dst,
            ecn: ecn.bits(),
            bytes,
        }));
    }

    fn transmit_from(&mut self, from_a: bool) {
        loop {
            let mtu = if from_a {
                self.ab.cfg.mtu
            } else {
                self.ba.cfg.mtu
            };
            let cap = mtu - 20;
            let out = &mut self.buf[..cap];
            let t = if from_a {
                sim_poll_a(&mut self.a, self.now, out)
            } else {
                sim_poll_b(&mut self.b, self.now, out)
            };
            let Some(t) = t else {
                break;
            };
            let len = t.len;
            let ck = tcp_checksum(t.src.ip(), t.dst.ip(), &self.buf[..len]);
            self.buf[16..18].copy_from_slice(&ck.to_be_bytes());
            self.stats.sent += 1;
            if let Some(f) = self.emit_tap.as_mut() {
                f(if from_a { Side::A } else { Side::B }, &self.buf[..len]);
            }
            let mut ecn = t.ecn;
            if let Some(f) = self.ecn_filter.as_mut() {
                ecn = f(
                    if from_a { Side::A } else { Side::B },
                    ecn,
                    &self.buf[..len],
                );
            }
            if let Some(f) = self.drop_filter.as_mut() {
                if f(if from_a { Side::A } else { Side::B }, &self.buf[..len]) {
                    self.stats.lost += 1;
                    continue;
                }
            }
            if !self.link_up {
                self.stats.lost += 1;
                continue;
            }
            let path_mtu = if from_a {
                self.ab.path_mtu
            } else {
                self.ba.path_mtu
            };
            let ip_header = if t.dst.is_ipv6() { 40 } else { 20 };
            if path_mtu != 0 && len + ip_header > path_mtu {
                self.stats.mtu_drops += 1;
                continue;
            }
            let now = self.now;
            let dir = if from_a { &mut self.ab } else { &mut self.ba };
            let cfg = dir.cfg;
            if self.rng.chance(cfg.loss) {
                self.stats.lost += 1;
                continue;
            }
            // Bottleneck: serialization plus a bounded queue.
            let mut depart = now;
            let bits = (len as u64 + 20 + 18) * 8;
            if let Some(tx_ns) = (bits * 1_000_000_000).checked_div(cfg.bandwidth_bps) {
                let start = dir.busy_until.max(now);
                if start.saturating_since(now) > cfg.max_queue_delay {
                    self.stats.queue_drops += 1;
                    continue;
                }
                depart = start + Duration::from_nanos(tx_ns);
                dir.busy_until = depart;
            }
            let copies = if self.rng.chance(cfg.duplicate) {
                self.stats.duplicated += 1;
                2
            } else {
                1
            };
            for _ in 0..copies {
                let mut at = depart + cfg.delay;
                if cfg.jitter.as_nanos() > 0 {
                    at += Duration::from_nanos(self.rng.below(cfg.jitter.as_nanos()));
                }
                if self.rng.chance(cfg.reorder) {
                    self.stats.reordered += 1;
                    at += cfg.reorder_delay;
                    if cfg.reorder_jitter.as_nanos() > 0 {
                        at += Duration::from_nanos(self.rng.below(cfg.reorder_jitter.as_nanos()));
                    }
                }
                let mut bytes = self.pool.pop().unwrap_or_default();
                bytes.clear();
                bytes.extend_from_slice(&self.buf[..len]);
                if self.rng.chance(cfg.corrupt) {
                    self.stats.corrupted += 1;
                    let bit = self.rng.below(len as u64 * 8) as usize;
                    bytes[bit / 8] ^= 1 << (bit % 8);
                }
                self.order += 1;
                self.queue.push(Reverse(Packet {
                    at,
                    order: self.order,
                    to_b: from_a,
                    src: t.src.ip(),
                    dst: t.dst.ip(),
                    ecn: ecn.bits(),
                    bytes,
                }));
            }
        }
    }

    /// Moves everything the stacks want to send onto the link.
    /// The segments the tap saw delivered to `side`, parsed (the tap must
    /// be on).
    pub fn tapped_to(&self, side: Side) -> Vec<flowlane_wire::TcpRepr> {
        self.tap
            .as_ref()
            .expect("tap on")
            .iter()
            .filter(|(s, _)| *s == side)
            .map(|(_, bytes)| flowlane_wire::TcpRepr::parse_segment(bytes).unwrap().0)
            .collect()
    }

    pub fn flush(&mut self) {
        self.transmit_from(true);
        self.transmit_from(false);
    }

    /// The next time something happens.
    pub fn next_event(&self) -> Option<Instant> {
        let p = self.queue.peek().map(|Reverse(p)| p.at);
        [p, self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Flushes, advances the clock to the next event and processes every
    /// packet and timer due. Returns false when nothing is pending at all.
    pub fn step(&mut self) -> bool {
        self.frames_back();
        self.flush();
        let Some(next) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(next);
        while let Some(Reverse(p)) = self.queue.peek() {
            if p.at > self.now {
                break;
            }
            let Reverse(p) = self.queue.pop().expect("peeked");
            if tcp_checksum(p.src, p.dst, &p.bytes) != 0 {
                self.stats.checksum_drops += 1;
            } else {
                if self.trace {
                    if let Ok((r, pl)) = flowlane_wire::TcpRepr::parse_segment(&p.bytes) {
                        eprintln!(
                            "{:?} {} {}->{} {:?} seq={} ack={} win={} len={} ts={:?}",
                            self.now,
                            if p.to_b { "A>B" } else { "B>A" },
                            r.src_port,
                            r.dst_port,
                            r.flags,
                            r.seq,
                            r.ack,
                            r.window,
                            pl.len(),
                            r.options.timestamps
                        );
                    }
                }
                self.stats.delivered += 1;
                if let Some(tap) = self.tap.as_mut() {
                    tap.push((if p.to_b { Side::B } else { Side::A }, p.bytes.clone()));
                }
                let (now, ecn) = (self.now, Ecn::from_bits(p.ecn));
                if let Some(before) = self.before_b.as_mut().filter(|_| p.to_b) {
                    before(&mut self.b, p.src, p.dst, &p.bytes);
                }
                if let Some(frames) = self.frames_b.as_mut().filter(|_| p.to_b) {
                    let id = frames.put(p.bytes);
                    let ip = (p.src, p.dst, ecn);
                    let kept = if self.measure {
                        sim_deliver_to_b_measured_frame(&mut self.b, now, ip, frames, id)
                    } else {
                        sim_deliver_to_b_frame(&mut self.b, now, ip, frames, id)
                    };
                    if !kept {
                        self.pool.push(frames.take(id));
                    }
                    continue;
                }
                if p.to_b && self.measure {
                    sim_deliver_to_b_measured(&mut self.b, now, p.src, p.dst, ecn, &p.bytes);
                } else if p.to_b {
                    sim_deliver_to_b(&mut self.b, now, p.src, p.dst, ecn, &p.bytes);
                } else {
                    sim_deliver_to_a(&mut self.a, now, p.src, p.dst, ecn, &p.bytes);
                }
            }
            self.pool.push(p.bytes);
        }
        if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
            self.a.handle_timeout(self.now);
        }
        if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
            self.b.handle_timeout(self.now);
        }
        true
    }

    /// Opens A:10000 -> B:80 and runs until both ends are established;
    /// returns (A's handle, B's handle).
    pub fn establish(&mut self) -> (ConnHandle, ConnHandle) {
        self.establish_between(SocketAddr::new(A_IP, 10000), SocketAddr::new(B_IP, 80))
    }

    /// [`Sim::establish`] from A's `local` to B's `remote` (either family).
    pub fn establish_between(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> (ConnHandle, ConnHandle) {
        self.b.listen(remote).expect("listen");
        let a = self.a.connect(self.now, local, remote).expect("connect");
        let mut b = None;
        let mut connected = false;
        let ok = self.run_until(self.now + Duration::from_secs(5), |s| {
            while let Some(e) = s.a.poll_event() {
                connected |= e == Event::Connected(a);
            }
            while let Some(e) = s.b.poll_event() {
                if let Event::Accepted { conn, .. } = e {
                    b = Some(conn);
                }
            }
            connected && b.is_some()
        });
        assert!(ok, "handshake");
        (a, b.expect("accepted"))
    }

    /// Steps until `done` returns true (checked before every step) or the
    /// virtual clock passes `limit`. Returns whether `done` became true.
    pub fn run_until(&mut self, limit: Instant, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.now > limit || !self.step() {
                return done(self);
            }
        }
    }

    /// Runs for `d` of virtual time (or until nothing is pending).
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.flush();
            if self.next_event().is_none_or(|t| t > end) {
                break;
            }
            self.step();
        }
        self.now = self.now.max(end);
    }
}

/// The byte at `offset` of stream `stream`: position-dependent, so loss,
/// duplication or reordering of delivered data is detected.
pub fn pattern(stream: u64, offset: u64) -> u8 {
    let x = offset
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(stream.wrapping_mul(0xd1b5_4a32_d192_ed03));
    (x >> 56) as u8 ^ (offset as u8)
}

#[derive(Debug, Clone, Default)]
struct Peer {
    handle: Option<ConnHandle>,
    sent: u64,
    received: u64,
    eof: bool,
    write_closed: bool,
    closed: Option<CloseReason>,
}

/// A bulk transfer over many connections: A connects to B:80 from ports
/// 10000.., sends `a_to_b` bytes, B sends `b_to_a` bytes back; each side
/// verifies every byte. A shuts down its write side when done; B closes when
/// it has sent everything and seen A's FIN.
pub struct Bulk {
    pub conns: usize,
    pub a_to_b: u64,
    pub b_to_a: u64,
    a: Vec<Peer>,
    /// B's peers, indexed by A's port offset.
    b: Vec<Peer>,
    /// B's slab index -> A's port offset.
    b_index: Vec<usize>,
    /// A's slab index -> A's port offset.
    a_index: Vec<usize>,
    pub errors: Vec<String>,
    pub closed_a: usize,
    pub closed_b: usize,
    /// B (in LAST-ACK) was reset because its FIN retransmission reached A
    /// after A's TIME-WAIT ended: legitimate TCP behaviour on a lossy path
    /// once every byte was delivered, counted rather than failed.
    pub late_resets: usize,
    /// Data segments B received (for per-segment cost figures).
    chunk: Vec<u8>,
    tx: Vec<u8>,
    /// A's first port (connection `i` comes from `port_base + i`).
    port_base: u16,
    /// B closes first, as a server answering `Connection: close` does:
    /// once it has read all A sends and queued all it answers. A then
    /// closes at B's FIN, without half-closing first.
    pub b_closes_first: bool,
}

pub const SERVER_PORT: u16 = 80;
pub const CLIENT_PORT_BASE: u16 = 10000;

impl Bulk {
    pub fn start(sim: &mut Sim, conns: usize, a_to_b: u64, b_to_a: u64) -> Self {
        sim.b
            .listen(SocketAddr::new(B_IP, SERVER_PORT))
            .expect("listen");
        Self::another(sim, conns, a_to_b, b_to_a, CLIENT_PORT_BASE)
    }

    /// Another transfer to B's listener (a [`Bulk::start`] opened it),
    /// from A's ports `port_base..`: on stacks that served one before (a
    /// warm stack).
    pub fn another(sim: &mut Sim, conns: usize, a_to_b: u64, b_to_a: u64, port_base: u16) -> Self {
        assert!(
            usize::from(port_base) + conns <= usize::from(u16::MAX),
            "A's ports run out"
        );
        let mut a = vec![Peer::default(); conns];
        let mut a_index = Vec::new();
        for (i, p) in a.iter_mut().enumerate() {
            let local = SocketAddr::new(A_IP, port_base + i as u16);
            let h = sim
                .a
                .connect(sim.now, local, SocketAddr::new(B_IP, SERVER_PORT))
                .expect("connect");
            p.handle = Some(h);
            let idx = h.index() as usize;
            if a_index.len() <= idx {
                a_index.resize(idx + 1, usize::MAX);
            }
            a_index[idx] = i;
        }
        Bulk {
            conns,
            a_to_b,
            b_to_a,
            a,
            b: vec![Peer::default(); conns],
            b_index: Vec::new(),
            a_index,
            errors: Vec::new(),
            closed_a: 0,
            closed_b: 0,
            late_resets: 0,
            chunk: vec![0; 16384],
            tx: vec![0; 16384],
            port_base,
            b_closes_first: false,
        }
    }

    /// A's handle of connection `i`.
    pub fn a_handle(&self, i: usize) -> Option<ConnHandle> {
        self.a.get(i)?.handle
    }

    pub fn finished(&self) -> bool {
        self.closed_a == self.conns && self.closed_b == self.conns
    }

    /// The fewest bytes B has received on any connection.
    pub fn min_received_b(&self) -> u64 {
        self.b.iter().map(|p| p.received).min().unwrap_or(0)
    }

    /// Total bytes delivered so far (both directions).
    pub fn delivered(&self) -> u64 {
        self.a.iter().map(|p| p.received).sum::<u64>()
            + self.b.iter().map(|p| p.received).sum::<u64>()
    }

    fn a_slot(&self, h: ConnHandle) -> Option<usize> {
        let i = *self.a_index.get(h.index() as usize)?;
        (self.a.get(i)?.handle == Some(h)).then_some(i)
    }

    /// Writes as much as fits; returns whether everything is queued.
    fn write_more(stack: &mut Stack, p: &mut Peer, stream: u64, total: u64, tx: &mut [u8]) -> bool {
        let h = p.handle.expect("handle");
        while p.sent < total {
            // Only what fits: generating the pattern is the sim's own cost.
            let space = stack.send_space(h).unwrap_or(0).max(1);
            let n = ((total - p.sent) as usize).min(tx.len()).min(space);
            for (i, b) in tx[..n].iter_mut().enumerate() {
                *b = pattern(stream, p.sent + i as u64);
            }
            match stack.send(h, &tx[..n]) {
                Ok(k) => p.sent += k as u64,
                Err(Error::WouldBlock) => return false,
                Err(_) => return false,
            }
        }
        true
    }

    fn read_all(
        (stack, frames): (&mut Stack, &dyn FrameStore),
        p: &mut Peer,
        stream: u64,
        total: u64,
        chunk: &mut [u8],
        errors: &mut Vec<String>,
    ) {
        let h = p.handle.expect("handle");
        loop {
            match stack.recv_in(h, chunk, frames) {
                Ok(0) => {
                    if !p.eof {
                        p.eof = true;
                        if p.received != total {
                            errors.push(format!(
                                "stream {stream}: EOF after {} of {total} bytes",
                                p.received
                            ));
                        }
                    }
                    return;
                }
                Ok(n) => {
                    for (i, &b) in chunk[..n].iter().enumerate() {
                        let off = p.received + i as u64;
                        if b != pattern(stream, off) && errors.len() < 10 {
                            errors.push(format!("stream {stream}: bad byte at offset {off}"));
                            break;
                        }
                    }
                    p.received += n as u64;
                    if p.received > total {
                        errors.push(format!("stream {stream}: {} > {total} bytes", p.received));
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// B's connections were moved to another stack (now `sim.b`), handle
    /// `old` becoming `new`: follows them, then reads and writes as an
    /// application would after the move (the new stack reports nothing
    /// that was pending when the connections left the old one).
    pub fn rehome_b(&mut self, sim: &mut Sim, moved: &[(ConnHandle, ConnHandle)]) {
        let streams: Vec<usize> = moved
            .iter()
            .map(|(old, _)| {
                let i = self.b_index[old.index() as usize];
                self.b_index[old.index() as usize] = usize::MAX;
                i
            })
            .collect();
        for (&i, &(_, new)) in streams.iter().zip(moved) {
            let idx = new.index() as usize;
            if self.b_index.len() <= idx {
                self.b_index.resize(idx + 1, usize::MAX);
            }
            self.b_index[idx] = i;
            self.b[i].handle = Some(new);
        }
        for &(_, new) in moved {
            self.on_b_event(sim, Event::Readable(new));
            self.on_b_event(sim, Event::Writable(new));
        }
    }

    /// Processes both stacks' events.
    pub fn on_step(&mut self, sim: &mut Sim) {
        while let Some(e) = sim.a.poll_event() {
            self.on_a_event(sim, e);
        }
        while let Some(e) = sim.b.poll_event() {
            self.on_b_event(sim, e);
        }
    }

    fn on_a_event(&mut self, sim: &mut Sim, e: Event) {
        if sim.trace {
            eprintln!("{:?} A event {e:?}", sim.now);
        }
        let h = match e {
            Event::Connected(h)
            | Event::Readable(h)
            | Event::Writable(h)
            | Event::PeerClosed(h) => h,
            Event::Closed { conn, .. } => conn,
            Event::Accepted { .. } => {
                self.errors.push("A accepted a connection".into());
                return;
            }
        };
        let Some(i) = self.a_slot(h) else {
            self.errors
                .push(format!("A: event for unknown handle {e:?}"));
            return;
        };
        let stream = 2 * i as u64;
        let p = &mut self.a[i];
        match e {
            Event::Connected(_) | Event::Writable(_) => {
                if !p.write_closed
                    && Self::write_more(&mut sim.a, p, stream, self.a_to_b, &mut self.tx)
                    && !self.b_closes_first
                {
                    p.write_closed = true;
                    sim.a.shutdown_write(h).expect("shutdown");
                }
            }
            Event::Readable(_) | Event::PeerClosed(_) => {
                Self::read_all(
                    (&mut sim.a, &NoFrames),
                    p,
                    stream + 1,
                    self.b_to_a,
                    &mut self.chunk,
                    &mut self.errors,
                );
                if self.b_closes_first && p.eof && !p.write_closed {
                    p.write_closed = true;
                    sim.a.close(h).expect("close");
                }
            }
            Event::Closed { reason, .. } => {
                p.closed = Some(reason);
                self.closed_a += 1;
                if reason != CloseReason::Normal {
                    self.errors.push(format!("A conn {i} closed: {reason:?}"));
                }
                if !p.eof || p.received != self.b_to_a {
                    self.errors
                        .push(format!("A conn {i} closed before all data: {}", p.received));
                }
                if self.b_closes_first && self.b[i].received != self.a_to_b {
                    self.errors
                        .push(format!("A conn {i} closed before B read all it sent"));
                }
                p.handle = None;
            }
            Event::Accepted { .. } => unreachable!(),
        }
    }

    fn on_b_event(&mut self, sim: &mut Sim, e: Event) {
        let h = match e {
            Event::Accepted { conn, .. } => {
                let port = sim.b.four_tuple(conn).expect("tuple").remote.port();
                let i = (port - self.port_base) as usize;
                let idx = conn.index() as usize;
                if self.b_index.len() <= idx {
                    self.b_index.resize(idx + 1, usize::MAX);
                }
                self.b_index[idx] = i;
                self.b[i].handle = Some(conn);
                conn
            }
            Event::Readable(h) | Event::Writable(h) | Event::PeerClosed(h) => h,
            Event::Closed { conn, .. } => conn,
            Event::Connected(_) => {
                self.errors.push("B connected actively".into());
                return;
            }
        };
        let Some(&i) = self.b_index.get(h.index() as usize) else {
            self.errors
                .push(format!("B: event for unknown handle {e:?}"));
            return;
        };
        let stream = 2 * i as u64;
        let p = &mut self.b[i];
        if p.handle != Some(h) {
            self.errors.push(format!("B: stale handle {e:?}"));
            return;
        }
        match e {
            Event::Readable(_) | Event::PeerClosed(_) => Self::read_all(
                (
                    &mut sim.b,
                    match &sim.frames_b {
                        Some(f) => f,
                        None => &NoFrames,
                    },
                ),
                p,
                stream,
                self.a_to_b,
                &mut self.chunk,
                &mut self.errors,
            ),
            _ => {}
        }
        if let Event::Closed { reason, .. } = e {
            p.closed = Some(reason);
            self.closed_b += 1;
            let a_done = self.a[i].closed == Some(CloseReason::Normal);
            if reason == CloseReason::Reset && a_done && p.eof && p.write_closed {
                self.late_resets += 1;
            } else if reason != CloseReason::Normal {
                self.errors.push(format!("B conn {i} closed: {reason:?}"));
            }
            // (B, closing first, never reads an EOF.)
            if (!p.eof && !self.b_closes_first) || p.received != self.a_to_b {
                self.errors
                    .push(format!("B conn {i} closed before all data: {}", p.received));
            }
            p.handle = None;
            return;
        }
        let read_all = p.eof || (self.b_closes_first && p.received == self.a_to_b);
        if matches!(e, Event::Accepted { .. } | Event::Writable(_)) || read_all {
            let all_queued = p.write_closed
                || Self::write_more(&mut sim.b, p, stream + 1, self.b_to_a, &mut self.tx);
            if all_queued && read_all && !p.write_closed {
                p.write_closed = true;
                sim.b.close(h).expect("close");
            }
        }
    }
}

// ---------------------------------------------------------------
// Helpers for scenario tests
// ---------------------------------------------------------------

/// Every event the stack has queued, oldest first.
pub fn events(stack: &mut Stack) -> Vec<Event> {
    std::iter::from_fn(|| stack.poll_event()).collect()
}

/// Runs until `pred` holds, collecting events; panics after `limit`.
pub fn run_until(sim: &mut Sim, limit: Duration, mut pred: impl FnMut(&mut Sim) -> bool) {
    let end = sim.now + limit;
    assert!(
        sim.run_until(end, |s| pred(s)),
        "condition not reached by {:?}",
        sim.now
    );
}

/// Reads until the connection would block or reaches EOF.
pub fn read_all(stack: &mut Stack, h: ConnHandle) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stack.recv(h, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}
