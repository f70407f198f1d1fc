//! Bulk transfer over the deterministic simulated link, for profiling the
//! per-segment cost as the number of connections grows (cf. the
//! connection-handoff paper's Figure 1):
//!
//! ```text
//! cargo build --release -p flowlane-tcp --example sim_bulk
//! valgrind --tool=callgrind --cache-sim=yes target/release/examples/sim_bulk 1 4000000
//! valgrind --tool=callgrind --cache-sim=yes target/release/examples/sim_bulk 10000 400
//! ```
//!
//! Arguments: connections (default 1), bytes per connection (default
//! 4 MB / connections), then any of the words `fixed` to turn buffer
//! auto-tuning off (buffers stay at their initial 32 KiB, as before
//! auto-tuning existed) and `lend` for zero-copy receive (B is lent each
//! segment's buffer, `Stack::handle_tcp_frame`, and in-order payload stays
//! there until read). Prints the data segments received, so that
//! instructions per received data segment can be derived from callgrind's
//! totals (or `--toggle-collect='*Stack*handle_segment*'` for the receive
//! path alone).
//!
//! Set-up on a warm stack (`warm` as a third argument): a first transfer
//! over as many connections runs to its end unmeasured, so that the
//! stacks' slabs, tables and pools have grown and hold what closed
//! connections gave back; then the same transfer again from other ports,
//! delivered through `sim_deliver_to_b_measured` (the figures printed are
//! this second one's) — the cost of a connection's life on a server that
//! has served as many before, without a cold stack's growth:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*sim_deliver_to_b_measured*' \
//!     target/release/examples/sim_bulk 10000 2896 lend warm
//! ```
//!
//! The server closing first (`server-closes`, with or without `warm`): A
//! sends a 100-byte request, B answers with `bytes` and closes as soon as
//! it has read the request and queued the answer, and A closes at B's
//! FIN — HTTP's `Connection: close`, where the server goes through
//! FIN-WAIT and keeps the TIME-WAIT record (instead of the client):
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*sim_deliver_to_b_measured*' \
//!     target/release/examples/sim_bulk 10000 1000 lend warm server-closes
//! ```
//!
//! Steady state (`steady` as the third argument): every connection is
//! opened and warmed up first (each has received data, and 16 KiB per
//! connection have arrived in all), then
//! the segments B receives while `bytes` more arrive in all are delivered
//! through `sim_deliver_to_b_measured`, the phase to collect — the cost
//! per segment of long transfers once connection set-up is out of the
//! picture:
//!
//! ```text
//! valgrind --tool=callgrind --cache-sim=yes --toggle-collect='*sim_deliver_to_b_measured*' \
//!     target/release/examples/sim_bulk 10000 40000000 steady
//! ```
//!
//! At 10 000 connections the warm-up takes minutes natively and hours under
//! instrumentation. With `SIM_BULK_PAUSE` set, the steady mode prints
//! `warm` on stderr after the warm-up and waits for a line on stdin: start
//! valgrind with `--instr-atstart=no`, switch instrumentation on
//! (`callgrind_control -i on PID`) when `warm` appears, then send the line.
//! A second, unmeasured phase of `bytes` (or of the variable's value, if it
//! is a number) then fills the simulated caches before the measured one
//! (`scripts/callgrind-steady.sh` does all this).

#[path = "../tests/sim/mod.rs"]
mod sim;

use flowlane_tcp::time::Duration;
use sim::{Bulk, LinkConfig, Sim};

fn main() {
    let mut args = std::env::args().skip(1);
    let conns: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let bytes: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4_000_000 / conns.max(1) as u64);
    let modes: Vec<String> = args.collect();
    let has = |m: &str| modes.iter().any(|a| a == m);
    let (fixed, steady, lend, warm) = (has("fixed"), has("steady"), has("lend"), has("warm"));
    let server_closes = has("server-closes");
    if steady {
        return run_steady(conns, bytes, lend);
    }
    assert!((1..=50_000).contains(&conns), "1..=50000 connections");
    let link = LinkConfig {
        delay: Duration::from_millis(1),
        bandwidth_bps: 10_000_000_000,
        max_queue_delay: Duration::from_millis(10),
        ..LinkConfig::default()
    };
    let mut a = sim::test_config(1);
    let mut b = sim::test_config(2);
    // Modest buffers so that 10k connections fit comfortably in memory.
    for c in [&mut a, &mut b] {
        c.send_buffer = 32 * 1024;
        c.recv_buffer = 32 * 1024;
        c.listen_backlog = 65_536;
        if fixed {
            c.send_buffer_max = c.send_buffer;
            c.recv_buffer_max = c.recv_buffer;
        }
    }
    let mut sim = Sim::new(42, link, link, a, b);
    if lend {
        sim.lend_to_b();
    }
    // With `server-closes`, A sends a request and B answers `bytes`.
    let (a_to_b, b_to_a) = if server_closes {
        (REQUEST, bytes)
    } else {
        (bytes, 0)
    };
    let mut bulk = Bulk::start(&mut sim, conns, a_to_b, b_to_a);
    bulk.b_closes_first = server_closes;
    // The most buffer memory B's connections held at once (chunks).
    let mut peak_memory = 0;
    let mut run = |sim: &mut Sim, bulk: &mut Bulk| {
        let limit = sim.now + Duration::from_secs(3600);
        let done = sim.run_until(limit, |s| {
            peak_memory = peak_memory.max(s.b.buffer_memory());
            bulk.on_step(s);
            bulk.finished()
        });
        assert!(done, "transfer did not finish");
        assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
    };
    run(&mut sim, &mut bulk);
    // The measured transfer's figures: the second's when warm.
    let (rx0, tx0, t0, link0) = if warm {
        (*sim.b.stats(), *sim.a.stats(), sim.now, sim.stats)
    } else {
        (
            Default::default(),
            Default::default(),
            sim.now,
            Default::default(),
        )
    };
    if warm {
        let mut again = Bulk::another(
            &mut sim,
            conns,
            a_to_b,
            b_to_a,
            sim::CLIENT_PORT_BASE + conns as u16,
        );
        again.b_closes_first = server_closes;
        sim.measure = true;
        run(&mut sim, &mut again);
        sim.measure = false;
    }
    let (rx, tx) = (sim.b.stats(), sim.a.stats());
    println!("connections            {conns}");
    println!("bytes per connection   {bytes}");
    if warm {
        println!("mode                   warm (as many connections served first)");
    }
    if server_closes {
        println!("server closes first    request {REQUEST} bytes, response {bytes}");
    }
    for (label, value) in [
        (
            "data segments received",
            rx.data_segments_in - rx0.data_segments_in,
        ),
        ("segments received (B)", rx.segments_in - rx0.segments_in),
        ("segments received (A)", tx.segments_in - tx0.segments_in),
        ("retransmits", tx.retransmits - tx0.retransmits),
        ("out of order (B)", rx.out_of_order - rx0.out_of_order),
        ("predicted (B)", rx.predicted - rx0.predicted),
        // Dropped by the simulated link's queue (10 ms at 10 Gbit/s): the
        // retransmissions' cause when the senders' bursts overflow it.
        (
            "link queue drops",
            sim.stats.queue_drops - link0.queue_drops,
        ),
    ] {
        println!("{label:<22} {value}");
    }
    if warm {
        println!("virtual time           {:?}", sim.now.saturating_since(t0));
    } else {
        println!("virtual time           {:?}", sim.now);
    }
    println!("buffer memory peak (B) {peak_memory} B");
    println!(
        "buffer auto-tuning     {}",
        if fixed { "off" } else { "on" }
    );
    println!(
        "payloads kept (B)      {}",
        rx.frames_kept - rx0.frames_kept
    );
}

/// The request A sends in the `server-closes` mode (bytes).
const REQUEST: u64 = 100;

/// The steady-state mode (see the module documentation).
fn run_steady(conns: usize, measured_bytes: u64, lend: bool) {
    const WARM: u64 = 16 * 1024;
    // Fast enough that every connection's window fits in flight at once:
    // the steady state of many long transfers, not of a congested queue.
    let link = LinkConfig {
        delay: Duration::from_millis(1),
        bandwidth_bps: 100_000_000_000,
        max_queue_delay: Duration::from_millis(100),
        ..LinkConfig::default()
    };
    let mut a = sim::test_config(1);
    let mut b = sim::test_config(2);
    for c in [&mut a, &mut b] {
        c.listen_backlog = 65_536;
    }
    let mut sim = Sim::new(42, link, link, a, b);
    if lend {
        sim.lend_to_b();
    }
    // Each connection has far more to send than the run moves.
    let mut bulk = Bulk::start(&mut sim, conns, u64::MAX / 4, 0);
    let limit = sim.now + Duration::from_secs(3600);
    // (Checked every thousand steps: the check walks every connection.)
    let mut steps = 0u64;
    let start = sim.now;
    let warm = sim.run_until(limit, |s| {
        bulk.on_step(s);
        steps += 1;
        steps % 1000 == 0
            && s.b.stats().bytes_in >= WARM * conns as u64
            && bulk.min_received_b() > 0
    });
    assert!(warm, "warm-up did not finish");
    if let Some(pause) = std::env::var_os("SIM_BULK_PAUSE") {
        // Its value, if a number, is the second phase's bytes.
        let second = pause
            .to_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(measured_bytes);
        eprintln!("warm");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
        // Instrumented from here: warm the simulated caches, unmeasured.
        let bytes = sim.b.stats().bytes_in;
        let warmed = sim.run_until(limit, |s| {
            bulk.on_step(s);
            s.b.stats().bytes_in - bytes >= second
        });
        assert!(warmed, "second warm-up did not finish");
    }
    let (segs0, data0, bytes0) = {
        let st = sim.b.stats();
        (st.segments_in, st.data_segments_in, st.bytes_in)
    };
    let t0 = sim.now;
    sim.measure = true;
    let done = sim.run_until(limit, |s| {
        bulk.on_step(s);
        s.b.stats().bytes_in - bytes0 >= measured_bytes
    });
    sim.measure = false;
    assert!(done, "measured phase did not finish");
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
    let rx = sim.b.stats();
    println!("connections            {conns}");
    println!("mode                   steady ({WARM} B per connection first)");
    println!("bytes measured         {}", rx.bytes_in - bytes0);
    println!("data segments received {}", rx.data_segments_in - data0);
    println!("segments received (B)  {}", rx.segments_in - segs0);
    println!("predicted (B)          {}", rx.predicted);
    println!("out of order (B)       {}", rx.out_of_order);
    println!("retransmits (A)        {}", sim.a.stats().retransmits);
    println!("virtual time warming   {:?}", t0.saturating_since(start));
    println!("virtual time measured  {:?}", sim.now.saturating_since(t0));
    println!("payloads kept (B)      {}", rx.frames_kept);
}
