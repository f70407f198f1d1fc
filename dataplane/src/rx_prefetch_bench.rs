//! The next frame's connection state prefetched or not
//! ([`QueueHandler::prefetch`]): native time per received frame through the
//! data path (classification with its checksums, the stack, a sink reading
//! in place) with many connections, each round a burst of data from every
//! connection (one segment each from 10 000 connections on) in a random
//! order, as RSS interleaves flows. Rounds with and
//! without the prefetch alternate in one process, so both see the same
//! memory. A measurement, not a check (and timed), so ignored:
//!
//! ```text
//! cargo test --release -p flowlane-dataplane --lib -- --ignored --exact \
//!     tcp_handler::rx_prefetch_bench::rx_prefetch_time --nocapture
//! FLOWLANE_BENCH_CONNS=1,1000,10000,50000 (the default) picks the counts
//! ```
//!
//! `FLOWLANE_BENCH_LEND=1` lends each frame to the stack, as the worker
//! does by default (zero-copy receive: in-order payload stays in its frame
//! until the sink consumes it); without it every payload is copied.
//!
//! `FLOWLANE_BENCH_DEPTH=1` prefetches for the next frame only (its slot
//! and owner entry), not the table's line for the frame after it as well:
//! compare the on/off ratios of runs with and without it.
//!
//! `FLOWLANE_BENCH_PREFETCH=always` or `never` makes every round the same,
//! for instructions per frame under callgrind (collect
//! `*rx_prefetch_measured*`; divide by all the rounds' frames).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt};
use flowlane_tcp::{Config, FrameStore, NoFrames, Stack};
use flowlane_wire::packet::parse_frame;

use super::tests::{frame, info, poll, OUR_MAC};
use super::{instant, Fate, TcpConfig, TcpHandler};
use crate::worker::QueueHandler;

const OURS: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// Frames a worker takes from its RX ring at a time (`worker::BATCH`).
const BATCH: usize = 64;
/// Rounds per count: the first two warm up, then prefetch off and on
/// alternate.
const ROUNDS: usize = 22;

/// Reads everything in place as it arrives.
struct Sink;

impl ConnHandler for Sink {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        while let Ok(b) = net.peek(conn) {
            let n = b.len();
            if n == 0 {
                break;
            }
            net.consume(conn, n).unwrap();
        }
    }
}

/// The peer's address and port for connection `i` (50 000 per address).
pub(super) fn peer_addr(i: usize) -> SocketAddr {
    let ip = Ipv4Addr::new(10, 99, 1 + (i / 50_000) as u8, 2);
    SocketAddr::new(IpAddr::V4(ip), 10_000 + (i % 50_000) as u16)
}

/// The inverse of [`peer_addr`].
fn conn_index(a: SocketAddr) -> usize {
    let IpAddr::V4(ip) = a.ip() else {
        unreachable!("IPv4 peers")
    };
    usize::from(ip.octets()[2] - 1) * 50_000 + usize::from(a.port() - 10_000)
}

/// Passes frames both ways until neither side has anything to send.
pub(super) fn exchange(h: &mut TcpHandler, peer: &mut Stack, now: Duration) {
    let mut seg = vec![0u8; 2048];
    loop {
        let mut moved = 0;
        while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
            let f = frame(&seg[..t.len], t.src.ip(), t.dst.ip());
            h.rx_one(instant(now), &f, (None, &NoFrames));
            moved += 1;
        }
        for f in poll(h, now) {
            let p = parse_frame(&f).unwrap();
            let ips = p.ip_pair().unwrap();
            peer.handle_segment(instant(now), ips.src(), ips.dst(), p.l4());
            moved += 1;
        }
        while peer.poll_event().is_some() {}
        if moved == 0 {
            return;
        }
    }
}

/// xorshift64*: a fixed shuffle, the same in every run.
fn shuffle<T>(v: &mut [T], state: &mut u64) {
    for i in (1..v.len()).rev() {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        v.swap(i, (r % (i as u64 + 1)) as usize);
    }
}

/// The median; NaN for no rounds (a mode `FLOWLANE_BENCH_PREFETCH` left
/// out).
pub(super) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One frame through the data path, the next one's state prefetched
/// first as the worker does (a symbol for callgrind's
/// `--toggle-collect='*rx_prefetch_measured*'`).
#[inline(never)]
fn rx_prefetch_measured(
    h: &mut TcpHandler,
    now: flowlane_tcp::time::Instant,
    f: &[u8],
    next: Option<(&[u8], Option<&[u8]>)>,
    lend: (Option<u32>, &dyn FrameStore),
) -> Fate {
    if let Some((next, after)) = next {
        h.prefetch(next, after);
    }
    h.rx_one(now, f, lend)
}

/// The frames of the rounds, as a worker's UMEM: buffers reused once the
/// stack let go of them (lent frames the sink has consumed).
#[derive(Default)]
struct Frames {
    bufs: Vec<Vec<u8>>,
    free: Vec<u32>,
}

impl Frames {
    /// A copy of `f` in a free buffer; its id.
    fn put(&mut self, f: &[u8]) -> u32 {
        let id = self.free.pop().unwrap_or_else(|| {
            self.bufs.push(Vec::with_capacity(2048));
            (self.bufs.len() - 1) as u32
        });
        let buf = &mut self.bufs[id as usize];
        buf.clear();
        buf.extend_from_slice(f);
        id
    }
}

impl FrameStore for Frames {
    fn frame(&self, id: u32) -> &[u8] {
        &self.bufs[id as usize]
    }
}

/// Median ns per frame without and with the prefetch, and frames per round.
fn run(conns: usize) -> (f64, f64, usize) {
    let mut cfg = TcpConfig::new(OURS, OUR_MAC, [1; 16]);
    cfg.tcp.listen_backlog = conns;
    cfg.tcp.max_connections = cfg.tcp.max_connections.max(2 * conns);
    let mut h = TcpHandler::new(&info(), cfg);
    h.listen(7, Sink).unwrap();
    let mut pcfg = Config::new([9; 16]);
    pcfg.max_connections = pcfg.max_connections.max(2 * conns);
    let mut peer = Stack::new(pcfg);
    let mut now = Duration::from_millis(1);
    let mut handles = Vec::with_capacity(conns);
    for i in 0..conns {
        let c = peer.connect(instant(now), peer_addr(i), SocketAddr::new(OURS.into(), 7));
        handles.push(c.unwrap());
        if i % 1000 == 999 || i + 1 == conns {
            exchange(&mut h, &mut peer, now);
            now += Duration::from_millis(1);
        }
    }
    // A round is about 10 000 frames (at most 32 per connection, as the
    // peer's window allows).
    let payload = vec![0x5a_u8; 1448 * (10_000 / conns).clamp(1, 32)];
    let mut seg = vec![0u8; 2048];
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let mut frames_per_round = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut store = Frames::default();
    let mut ids = Vec::with_capacity(BATCH);
    let lend = std::env::var_os("FLOWLANE_BENCH_LEND").is_some();
    let mode = std::env::var("FLOWLANE_BENCH_PREFETCH").unwrap_or_default();
    let table_ahead = std::env::var("FLOWLANE_BENCH_DEPTH").as_deref() != Ok("1");
    for round in 0..ROUNDS {
        for &c in &handles {
            let _ = peer.send(c, &payload);
        }
        // Each frame with its place in its connection's burst: shuffled,
        // then put back in that order (stably), so that connections
        // interleave at random and each one's segments stay in order.
        let mut sent = vec![0u32; conns];
        let mut frames = Vec::with_capacity(conns);
        while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
            let nth = &mut sent[conn_index(t.src)];
            frames.push((*nth, frame(&seg[..t.len], t.src.ip(), t.dst.ip())));
            *nth += 1;
        }
        shuffle(&mut frames, &mut rng);
        frames.sort_by_key(|(nth, _)| *nth);
        let frames: Vec<Vec<u8>> = frames.into_iter().map(|(_, f)| f).collect();
        let prefetch = match mode.as_str() {
            "always" => true,
            "never" => false,
            _ => round % 2 == 1,
        };
        let t = instant(now);
        let mut spent = Duration::ZERO;
        for batch in frames.chunks(BATCH) {
            // The batch copied into free buffers, untimed: frames the
            // kernel just wrote into the UMEM are in the cache.
            ids.clear();
            ids.extend(batch.iter().map(|f| store.put(f)));
            let start = std::time::Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                let next = ids.get(i + 1).filter(|_| prefetch);
                let f = store.frame(id);
                let after = ids.get(i + 2).filter(|_| table_ahead);
                let after = after.map(|&n| store.frame(n));
                let next = next.map(|&n| (store.frame(n), after));
                let lent = lend.then_some(id);
                let kept = rx_prefetch_measured(&mut h, t, f, next, (lent, &store)) == Fate::Kept;
                if !kept {
                    store.free.push(id);
                }
                // As the worker does after each frame.
                while let Some(done) = h.stack.poll_released_frame() {
                    store.free.push(done);
                }
            }
            spent += start.elapsed();
        }
        let ns = spent.as_nanos() as f64 / frames.len().max(1) as f64;
        if round >= 2 {
            if prefetch { &mut on } else { &mut off }.push(ns);
        }
        frames_per_round = frames.len();
        exchange(&mut h, &mut peer, now);
        now += Duration::from_millis(1);
    }
    (median(&mut off), median(&mut on), frames_per_round)
}

#[test]
#[ignore]
fn rx_prefetch_time() {
    let counts = std::env::var("FLOWLANE_BENCH_CONNS").unwrap_or("1,1000,10000,50000".into());
    println!("connections  frames/round  ns/frame off  ns/frame on  on/off");
    for n in counts
        .split(',')
        .map(|s| s.trim().parse::<usize>().unwrap())
    {
        let (off, on, frames) = run(n);
        println!(
            "{n:>11}  {frames:>12}  {off:>12.1}  {on:>11.1}  {:>6.3}",
            on / off
        );
    }
}
