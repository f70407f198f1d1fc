//! Memory per idle established connection, measured in the deterministic
//! simulator: B accepts `N` connections from A (spread over many client
//! addresses, as a server would see them), A is then dropped without a
//! word, and the growth of the process's resident memory is divided by
//! `N`: the connection slots, the connection table, the timers and anything
//! else a connection costs the stack (with the allocator's slack), with no
//! transfer running.
//!
//! ```text
//! cargo run --release -p flowlane-tcp --example sim_idle -- 1000000
//! cargo run --release -p flowlane-tcp --example sim_idle -- 1000000 keepalive
//! cargo run --release -p flowlane-tcp --example sim_idle -- 1000000 time-wait
//! ```
//!
//! Arguments: connections (default 100 000); `keepalive` to turn keepalive
//! on (every idle connection then has a timer armed); or `time-wait`: B
//! closes each round of connections first and A then closes its side, so
//! that B holds one TIME-WAIT record per connection (what a server closing
//! short connections holds), the cap raised to fit. Prints the resident
//! growth per connection with both stacks holding the connections, and once
//! A is gone (B's stack alone, plus the sim's packet pool).

#[path = "../tests/sim/mod.rs"]
mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{ConnHandle, Event, KeepaliveConfig, Stack};
use sim::{LinkConfig, Sim, B_IP};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Resident set size in bytes (Linux), 0 elsewhere.
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Client address `i`: 40 000 ports on each of as many addresses as needed.
fn client(i: usize) -> SocketAddr {
    let host = (i / 40_000) as u32;
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 1)) + host);
    SocketAddr::new(IpAddr::V4(ip), 20_000 + (i % 40_000) as u16)
}

/// Takes every event; returns how many connections were accepted, and
/// keeps their handles in `keep`, if given.
fn drain(s: &mut Stack, mut keep: Option<&mut Vec<ConnHandle>>) -> usize {
    let mut accepted = 0;
    while let Some(e) = s.poll_event() {
        if let Event::Accepted { conn, .. } = e {
            accepted += 1;
            if let Some(k) = keep.as_mut() {
                k.push(conn);
            }
        }
    }
    accepted
}

fn main() {
    let mut args = std::env::args().skip(1);
    let conns: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let mode = args.next().unwrap_or_default();
    let keepalive = mode == "keepalive";
    let time_wait = mode == "time-wait";
    let link = LinkConfig {
        delay: Duration::from_micros(50),
        bandwidth_bps: 100_000_000_000,
        max_queue_delay: Duration::from_secs(1),
        ..LinkConfig::default()
    };
    let mut a = sim::test_config(1);
    let mut b = sim::test_config(2);
    b.listen_backlog = 1 << 20;
    b.time_wait_max = conns;
    // Past the default caps (65 536 per stack and per listener).
    for c in [&mut a, &mut b] {
        c.max_connections = conns.max(c.max_connections);
        c.listener_max_connections = conns.max(c.listener_max_connections);
    }
    if keepalive {
        b.keepalive = Some(KeepaliveConfig {
            idle: Duration::from_secs(7200),
            interval: Duration::from_secs(75),
            probes: 9,
        });
    }
    let mut sim = Sim::new(7, link, link, a, b);
    sim.b
        .listen(SocketAddr::new(B_IP, 80))
        .expect("listen on B:80");
    let rss0 = rss();

    // Open in rounds so that the sim's queue stays small.
    let server = SocketAddr::new(B_IP, 80);
    let mut accepted = 0;
    let mut opened = 0;
    while opened < conns {
        let round = (conns - opened).min(20_000);
        let mut ours = Vec::with_capacity(round);
        for i in opened..opened + round {
            ours.push(sim.a.connect(sim.now, client(i), server).expect("connect"));
        }
        opened += round;
        let limit = sim.now + Duration::from_secs(10);
        let mut theirs = Vec::new();
        let ok = sim.run_until(limit, |s| {
            drain(&mut s.a, None);
            accepted += drain(&mut s.b, Some(&mut theirs));
            accepted == opened
        });
        assert!(ok, "only {accepted} of {opened} connections were accepted");
        if time_wait {
            // B closes first, A answers: B ends in TIME-WAIT.
            for h in theirs {
                sim.b.close(h).expect("close on B");
            }
            sim.run_for(Duration::from_millis(500));
            for h in ours {
                sim.a.close(h).expect("close on A");
            }
            let limit = sim.now + Duration::from_secs(10);
            let ok = sim.run_until(limit, |s| {
                drain(&mut s.a, None);
                drain(&mut s.b, None);
                s.b.time_wait_count() == opened && s.a.connection_count() == 0
            });
            assert!(
                ok,
                "B holds {} TIME-WAIT records and {} connections, A {}; {:?} {:?}",
                sim.b.time_wait_count(),
                sim.b.connection_count(),
                sim.a.connection_count(),
                sim.b.stats(),
                sim.stats
            );
        }
    }
    let rss_both = rss();
    // A disappears without closing anything: B's connections stay
    // established and idle.
    let quiet = Stack::new(sim::test_config(1));
    drop(std::mem::replace(&mut sim.a, quiet));
    let rss1 = rss();
    assert_eq!(
        sim.b.connection_count(),
        conns,
        "every connection is live on B"
    );
    if time_wait {
        assert_eq!(sim.b.time_wait_count(), conns, "all in TIME-WAIT");
    }
    let per = |bytes: usize| bytes as f64 / conns as f64;
    println!("connections            {conns}");
    println!(
        "keepalive              {}",
        if keepalive { "on" } else { "off" }
    );
    println!(
        "state (B)              {}",
        if time_wait {
            "TIME-WAIT records"
        } else {
            "established"
        }
    );
    println!(
        "resident, both stacks  {:.0} B per connection pair",
        per(rss_both.saturating_sub(rss0))
    );
    println!(
        "resident, B alone      {:.0} B per connection ({:.1} MiB)",
        per(rss1.saturating_sub(rss0)),
        rss1.saturating_sub(rss0) as f64 / f64::from(1 << 20)
    );
    println!("buffer memory (B)      {} B", sim.b.buffer_memory());
}
