//! A bucket's export with and without the prefetch of the connections
//! ahead ([`TcpHandler::export_bucket`], `MOVE_AHEAD`): native time per
//! connection exported (the bucket's listing, every application side, the
//! stack's parts), each bucket one of 128 over many idle connections, so
//! that its slots lie scattered over the slab. Before each export a 64 MiB
//! buffer is written (`cold`, the default), as a busy core's traffic
//! leaves its caches, or not (`FLOWLANE_BENCH_CACHE=warm`). Exports with
//! and without the prefetch alternate bucket by bucket in one process, so
//! both see the same memory. A measurement, not a check (and timed), so
//! ignored:
//!
//! ```text
//! cargo test --release -p flowlane-dataplane --lib -- --ignored --exact \
//!     tcp_handler::move_prefetch_bench::move_prefetch_time --nocapture
//! FLOWLANE_BENCH_CONNS=12800,51200 (the default) picks the counts
//! FLOWLANE_BENCH_BUCKETS=128 (the default) the buckets they are spread over
//! ```
//!
//! `FLOWLANE_BENCH_PREFETCH=always` or `never` makes every export the
//! same, for instructions per connection under callgrind (collect
//! `*export_measured*`; divide by the connections exported). The import
//! (timed too, after the same eviction) prefetches in both modes, as the
//! data path does.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use flowlane_app::conn_state::{export_entry, import_entry};
use flowlane_app::{ConnHandle, ConnHandler, ConnMap, ConnState, Net, SetupExt};
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_tcp::{Config, NoFrames, Stack};

use super::rx_prefetch_bench::{exchange, median, peer_addr};
use super::tests::{info, OUR_MAC};
use super::{instant, TcpConfig, TcpHandler};
use crate::ephemeral::rss_state;
use crate::handoff::Arrival;

const OURS: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// RSS buckets (the indirection table's entries), as on a NIC; fewer
/// (`FLOWLANE_BENCH_BUCKETS`) put more connections in each bucket of a
/// small stack.
const BUCKETS: u16 = 128;
/// Exports measured at least (rounds of every bucket's move).
const MOVES: usize = 512;
/// What a cold export finds in the caches: nothing of this size or less.
const EVICT: usize = 64 << 20;

/// Keeps a word per connection that travels with it, as a server's
/// handler keeps its per-connection state.
#[derive(Default)]
struct Stateful {
    state: ConnMap<u64>,
}

impl ConnHandler for Stateful {
    fn on_accept(&mut self, _net: &mut dyn Net, conn: ConnHandle) {
        self.state.insert(conn, u64::from(conn.index()));
    }
    fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        export_entry(&mut self.state, conn)
    }
    fn on_import(&mut self, _net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        import_entry(&mut self.state, conn, state);
    }
}

/// One bucket's export (a symbol for callgrind's
/// `--toggle-collect='*export_measured*'`); its parts, last one last.
#[inline(never)]
fn export_measured(h: &mut TcpHandler, bucket: u16) -> Vec<Arrival> {
    let mut parts = Vec::new();
    let now = instant(Duration::from_secs(1));
    let (last, _) = h.export_bucket(now, bucket, &NoFrames, &mut |p| parts.push(*p));
    parts.push(*last);
    parts
}

/// Writes a line of every 64 bytes of `buf`.
fn evict(buf: &mut [u8], round: u8) {
    for line in buf.chunks_mut(64) {
        line[0] = round;
    }
    std::hint::black_box(&buf);
}

/// Median ns per connection exported without and with the prefetch,
/// connections per bucket on average, and median ns per connection
/// imported (after the same eviction: the new core's slots are cold).
fn run(conns: usize, buckets: u16, cold: bool, mode: &str) -> (f64, f64, f64, f64) {
    let rounds = MOVES.div_ceil(usize::from(buckets)).max(4);
    let table: Vec<u32> = (0..u32::from(buckets)).map(|b| b % 2).collect();
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let mut cfg = TcpConfig::new(OURS, OUR_MAC, [1; 16]);
    cfg.rss = Some(rss);
    cfg.tcp.listen_backlog = conns;
    cfg.tcp.max_connections = cfg.tcp.max_connections.max(2 * conns);
    let mut hs: Vec<TcpHandler> = (0..2)
        .map(|q| {
            let mut i = info();
            i.queue = q;
            let mut h = TcpHandler::new(&i, cfg.clone());
            h.listen(7, Stateful::default()).unwrap();
            h
        })
        .collect();
    let mut pcfg = Config::new([9; 16]);
    pcfg.max_connections = pcfg.max_connections.max(2 * conns);
    let mut peer = Stack::new(pcfg);
    let mut now = Duration::from_millis(1);
    for i in 0..conns {
        peer.connect(instant(now), peer_addr(i), SocketAddr::new(OURS.into(), 7))
            .unwrap();
        if i % 1000 == 999 || i + 1 == conns {
            exchange(&mut hs[0], &mut peer, now);
            now += Duration::from_millis(1);
        }
    }
    assert_eq!(
        hs[0].stack.connection_count(),
        conns,
        "every connection set up"
    );
    let mut cache = if cold { vec![0u8; EVICT] } else { Vec::new() };
    let (mut off, mut on, mut imports) = (Vec::new(), Vec::new(), Vec::new());
    let mut moved = 0;
    for round in 0..rounds {
        let (from, to) = if round % 2 == 0 { (0, 1) } else { (1, 0) };
        for b in 0..buckets {
            let prefetch = match mode {
                "always" => true,
                "never" => false,
                _ => b % 2 == 1,
            };
            hs[from].move_prefetch = prefetch;
            evict(&mut cache, round as u8 ^ b as u8);
            let start = std::time::Instant::now();
            let parts = export_measured(&mut hs[from], b);
            let spent = start.elapsed();
            let n: usize = parts.iter().map(|p| p.export.connections().len()).sum();
            evict(&mut cache, round as u8 ^ b as u8 ^ 0x55);
            hs[to].move_prefetch = true;
            let start = std::time::Instant::now();
            for p in parts {
                assert_eq!(hs[to].import_bucket(instant(now), p, &NoFrames), 0);
            }
            let import_spent = start.elapsed();
            if n > 0 {
                let ns = spent.as_nanos() as f64 / n as f64;
                if prefetch { &mut on } else { &mut off }.push(ns);
                imports.push(import_spent.as_nanos() as f64 / n as f64);
            }
            moved += n;
        }
        assert_eq!(
            hs[to].stack.connection_count(),
            conns,
            "every connection moved"
        );
    }
    let per_bucket = moved as f64 / (rounds * usize::from(buckets)) as f64;
    (
        median(&mut off),
        median(&mut on),
        per_bucket,
        median(&mut imports),
    )
}

#[test]
#[ignore]
fn move_prefetch_time() {
    let counts = std::env::var("FLOWLANE_BENCH_CONNS").unwrap_or("12800,51200".into());
    let cold = std::env::var("FLOWLANE_BENCH_CACHE").as_deref() != Ok("warm");
    let mode = std::env::var("FLOWLANE_BENCH_PREFETCH").unwrap_or_default();
    let buckets = std::env::var("FLOWLANE_BENCH_BUCKETS").map_or(BUCKETS, |b| b.parse().unwrap());
    println!(
        "cache {}; connections  per bucket  ns/conn off  ns/conn on  on/off  import ns/conn",
        if cold { "cold" } else { "warm" }
    );
    for n in counts
        .split(',')
        .map(|s| s.trim().parse::<usize>().unwrap())
    {
        let (off, on, per_bucket, import) = run(n, buckets, cold, &mode);
        println!(
            "{n:>11}  {per_bucket:>10.1}  {off:>11.1}  {on:>10.1}  {:>6.3}  {import:>14.1}",
            on / off
        );
    }
}
