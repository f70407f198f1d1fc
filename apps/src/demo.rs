//! `flowlane demo`: the foundation demo on the test bed.
//!
//! 1. bring the test bed up (or use the one `--bed` names as it is);
//! 2. start `flowlane udp-echo` inside flowlane's namespace, on all queues;
//! 3. from the far side, with kernel UDP sockets, send flows to it and check
//!    that every datagram comes back byte-exact;
//! 4. print, per queue, the flows and packets that arrived next to the queue
//!    the software Toeplitz hash and indirection table predicted;
//! 5. rewrite the indirection table through the NIC interface, send again,
//!    and show that every flow moved where the new table says.
//!
//! The bed is the demo's own (`demo-<pid>` unless `--bed` names one) and is
//! removed on every way out: success, error, panic, and SIGINT/SIGTERM/SIGHUP
//! ([`crate::bed_guard`]: a signal thread stops the echo child and removes
//! the bed before exiting). A bed `--bed` names that exists already is used
//! with its own queues, key and table and left as it was: its key and table
//! are put back on the same ways out. With `--out DIR` the result is kept in
//! `DIR/udp-rss.json`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use flowlane_numa_sched::indirection::IndirectionTable;
use flowlane_numa_sched::toeplitz::{FlowTuple, Protocol, RssKey, Toeplitz};
use serde::Serialize;

use crate::bed_guard::{Afterwards, BedGuard};
use crate::echo_process::EchoProcess;
use crate::udp_echo::Report;
use flowlane_numa_sched::nic::{RssNic, RssSettings};
use flowlane_testbed::netns;
use flowlane_testbed::{BedSpec, BedState};

/// Flags of `flowlane demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Test bed to use (default: the demo's own, `demo-<pid>`; a named bed
    /// is created if missing and removed afterwards unless it existed; one
    /// that existed is used with its queues, key and table, which are put
    /// back afterwards).
    #[arg(long)]
    pub bed: Option<String>,
    /// Queues of a test bed the demo makes (default 4); with an existing
    /// `--bed`, if given, its queue count.
    #[arg(long, value_parser = flowlane_dataplane::service_args::queue_count::<u32>)]
    pub queues: Option<u32>,
    /// Number of UDP flows (at least 1).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub flows: u16,
    /// Datagrams per flow per phase (at least 1).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub packets: u32,
    /// UDP port of the echo service.
    #[arg(long, default_value_t = 7777, value_parser = flowlane_dataplane::service_args::listen_port)]
    pub port: u16,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep the result as JSON in this folder (`DIR/udp-rss.json`; created
    /// if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The bed a demo run uses: `--bed`, or its own `demo-<pid>`.
fn bed_name(arg: Option<&str>, pid: u32) -> String {
    arg.map_or_else(|| format!("demo-{pid}"), str::to_string)
}

/// Queues of a bed the demo makes when `--queues` is not given.
const DEFAULT_QUEUES: u32 = 4;

/// The bed the demo brings up as `name`, and what becomes of it afterwards:
/// with no bed of that name (`existing` is `None`), a new one of `queues`
/// (default 4) with the Microsoft key and an even table, removed afterwards;
/// with one (its queue count and RSS settings), that bed as it is, its key
/// and table put back afterwards (`queues`, if given, must be its count).
fn demo_bed(
    name: &str,
    queues: Option<u32>,
    existing: Option<(u32, RssSettings)>,
) -> Result<(BedSpec, Afterwards)> {
    let Some((has, rss)) = existing else {
        let queues = queues.unwrap_or(DEFAULT_QUEUES);
        let all: Vec<u16> = (0..queues)
            .map(u16::try_from)
            .collect::<Result<_, _>>()
            .context("--queues is too large")?;
        let spec = BedSpec {
            name: name.to_string(),
            queues,
            key: RssKey::microsoft_default().as_bytes().to_vec(),
            table: IndirectionTable::even(128, &all)?.to_queue_list(),
        };
        return Ok((spec, Afterwards::Remove));
    };
    if let Some(q) = queues.filter(|&q| q != has) {
        bail!(
            "--queues {q}: test bed {name} exists with {has} queues (leave --queues out to use them, or name another bed)"
        );
    }
    let spec = BedSpec {
        name: name.to_string(),
        queues: has,
        key: rss.key.clone(),
        table: rss.table.clone(),
    };
    let afterwards = Afterwards::Restore {
        key: rss.key,
        table: rss.table,
    };
    Ok((spec, afterwards))
}

/// Where `--out DIR` keeps the result.
fn result_path(dir: &Path) -> PathBuf {
    dir.join("udp-rss.json")
}

/// One flow's outcome in one phase.
#[derive(Debug, Serialize, Clone)]
pub struct FlowOutcome {
    /// Kernel-side source port.
    pub src_port: u16,
    /// Queue predicted by Toeplitz + table.
    pub predicted: u32,
    /// Queues that actually received it in this phase.
    pub observed: Vec<u32>,
    /// Datagrams echoed back byte-exact.
    pub echoed_ok: u32,
    /// Datagrams sent.
    pub sent: u32,
}

/// One phase: a table and the flows sent under it.
#[derive(Debug, Serialize)]
pub struct Phase {
    /// The indirection table in force.
    pub table: Vec<u32>,
    /// Per-flow outcomes.
    pub flows: Vec<FlowOutcome>,
}

/// The whole demo result.
#[derive(Debug, Serialize)]
pub struct DemoResult {
    /// Test bed used.
    pub bed: String,
    /// RSS key (hex bytes).
    pub key: Vec<u8>,
    /// flowlane's address.
    pub local_addr: IpAddr,
    /// Kernel side's address.
    pub peer_addr: IpAddr,
    /// Echo port.
    pub port: u16,
    /// Phases: the initial table, then the rewritten one.
    pub phases: Vec<Phase>,
    /// Every flow arrived only where predicted, every datagram came back.
    pub all_ok: bool,
}

/// The datagram `i` of flow `f`: distinct sizes and contents so that any
/// mix-up or corruption shows.
fn payload(f: u16, i: u32) -> Vec<u8> {
    let len = 18 + ((f as usize * 37 + i as usize * 101) % 1400);
    (0..len)
        .map(|b| (b as u32 ^ (f as u32) << 3 ^ i.wrapping_mul(131)) as u8)
        .collect()
}

/// Sends `packets` datagrams on each socket from inside the peer namespace
/// and returns, per flow, the datagrams that came back byte-exact.
fn send_phase(
    bed: &BedState,
    local_port: u16,
    flows: u16,
    packets: u32,
    sockets_ports: Option<Vec<u16>>,
) -> Result<Vec<(u16, u32)>> {
    let dst: SocketAddr = SocketAddr::new(bed.local_v4.parse()?, local_port);
    let src_ip: IpAddr = bed.peer_v4.parse()?;
    netns::in_netns(&bed.peer_netns, move || {
        let mut out = Vec::new();
        for f in 0..flows {
            let bind_port = sockets_ports.as_ref().map(|p| p[f as usize]).unwrap_or(0);
            let s = UdpSocket::bind(SocketAddr::new(src_ip, bind_port))
                .context("binding a UDP socket on the far side")?;
            s.set_read_timeout(Some(Duration::from_millis(500)))?;
            let mut ok = 0;
            let mut buf = vec![0u8; 2048];
            for i in 0..packets {
                let p = payload(f, i);
                s.send_to(&p, dst)?;
                // Unconnected socket: each datagram picks its tx queue anew, as
                // a NIC would hash each packet anew.
                match s.recv_from(&mut buf) {
                    Ok((n, from)) if from == dst && buf[..n] == p[..] => ok += 1,
                    _ => {}
                }
            }
            out.push((s.local_addr()?.port(), ok));
        }
        Ok(out)
    })
}

fn predict(key: &RssKey, table: &[u32], src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> u32 {
    let t = Toeplitz::new(key);
    let flow = FlowTuple {
        src,
        dst,
        src_port: sport,
        dst_port: dport,
        protocol: Protocol::Udp,
    };
    let h = t.hash(flow.hash_input(true).as_bytes());
    table[h as usize & (table.len() - 1)]
}

fn observed(before: Option<&Report>, after: &Report, sport: u16) -> Vec<u32> {
    let count = |r: &Report, q: u32| {
        r.flows
            .iter()
            .filter(|f| f.src_port == sport && f.queue == q)
            .map(|f| f.packets)
            .sum::<u64>()
    };
    let mut qs: Vec<u32> = after
        .flows
        .iter()
        .filter(|f| f.src_port == sport)
        .map(|f| f.queue)
        .collect();
    qs.sort_unstable();
    qs.dedup();
    qs.retain(|&q| count(after, q) > before.map(|b| count(b, q)).unwrap_or(0));
    qs
}

/// Runs the demo.
pub fn run(args: Args) -> Result<()> {
    netns::require_root("flowlane demo")?;
    netns::require_host_namespace("flowlane demo")?;
    let name = bed_name(args.bed.as_deref(), std::process::id());
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out {}: cannot create the folder", dir.display()))?;
    }
    let (spec, afterwards) = demo_bed(&name, args.queues, crate::bench_bed::existing_bed(&name)?)?;
    let key = RssKey::new(spec.key.clone())?;
    let (guard, bed) = BedGuard::up("demo", &spec, afterwards)?;
    let result = run_on(&args, &bed, &key);
    // A bed left behind, or left changed, is what the user must see first.
    guard.release()?;
    let result = result?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_table(&result, bed.queues);
    }
    if let Some(dir) = &args.out {
        let path = result_path(dir);
        crate::service::write_report(&path, &result)?;
        if args.json {
            // Standard output stays one JSON document.
            eprintln!("result kept in {}", path.display());
        } else {
            outln!("result kept in {}", path.display());
        }
    }
    if !result.all_ok {
        bail!(
            "some flows were not echoed or arrived on an unpredicted queue (see the table above)"
        );
    }
    Ok(())
}

fn run_on(args: &Args, bed: &BedState, key: &RssKey) -> Result<DemoResult> {
    let nic = bed.nic();
    let mut echo = EchoProcess::start(bed, args.port, &[])?;
    let local: IpAddr = bed.local_v4.parse()?;
    let peer: IpAddr = bed.peer_v4.parse()?;
    let mut phases = Vec::new();
    let mut before: Option<Report> = None;
    let mut ports: Option<Vec<u16>> = None;
    for phase in 0..2u64 {
        if phase == 1 {
            // Rotate every bucket to the next queue: every flow must move.
            let t = nic.rss()?.table;
            let q = bed.queues;
            let rotated: Vec<u32> = t.iter().map(|&x| (x + 1) % q).collect();
            IndirectionTable::new(rotated.iter().map(|&x| x as u16).collect())?;
            nic.set_rss(None, Some(&rotated))?;
        }
        let table = nic.rss()?.table;
        let sent = send_phase(bed, args.port, args.flows, args.packets, ports.clone())?;
        ports = Some(sent.iter().map(|(p, _)| *p).collect());
        let after = echo.snapshot(phase + 1)?;
        let flows = sent
            .iter()
            .map(|&(sport, ok)| FlowOutcome {
                src_port: sport,
                predicted: predict(key, &table, peer, local, sport, args.port),
                observed: observed(before.as_ref(), &after, sport),
                echoed_ok: ok,
                sent: args.packets,
            })
            .collect();
        phases.push(Phase { table, flows });
        before = Some(after);
    }
    let all_ok = phases.iter().all(|p| {
        p.flows
            .iter()
            .all(|f| f.echoed_ok == f.sent && f.observed == vec![f.predicted])
    });
    Ok(DemoResult {
        bed: bed.name.clone(),
        key: key.as_bytes().to_vec(),
        local_addr: local,
        peer_addr: peer,
        port: args.port,
        phases,
        all_ok,
    })
}

fn print_table(r: &DemoResult, queues: u32) {
    for (i, p) in r.phases.iter().enumerate() {
        outln!(
            "phase {}: {}",
            i + 1,
            if i == 0 {
                "the bed's indirection table (even on a bed the demo made)"
            } else {
                "table rotated by one queue (every bucket moves)"
            }
        );
        outln!("  queue  flows predicted  flows arrived  datagrams echoed");
        let mut per: BTreeMap<u32, (u32, u32, u32)> = (0..queues).map(|q| (q, (0, 0, 0))).collect();
        for f in &p.flows {
            per.entry(f.predicted).or_default().0 += 1;
            for q in &f.observed {
                per.entry(*q).or_default().1 += 1;
                per.entry(*q).or_default().2 += f.echoed_ok;
            }
        }
        for (q, (pred, got, echoed)) in per {
            outln!("  {q:>5}  {pred:>15}  {got:>13}  {echoed:>16}");
        }
        let wrong: Vec<_> = p
            .flows
            .iter()
            .filter(|f| f.observed != vec![f.predicted])
            .collect();
        let lost: u32 = p.flows.iter().map(|f| f.sent - f.echoed_ok).sum();
        outln!(
            "  {} flows, {} on the predicted queue, {} elsewhere, {} datagrams not echoed byte-exact",
            p.flows.len(),
            p.flows.len() - wrong.len(),
            wrong.len(),
            lost
        );
    }
    if r.phases.len() == 2 {
        let moved = r.phases[0]
            .flows
            .iter()
            .zip(&r.phases[1].flows)
            .filter(|(a, b)| a.observed != b.observed && b.observed == vec![b.predicted])
            .count();
        outln!(
            "after the table rewrite, {moved}/{} flows moved to their newly predicted queue",
            r.phases[1].flows.len()
        );
    }
    outln!("{}", if r.all_ok { "demo: OK" } else { "demo: FAILED" });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_uses_its_own_bed_unless_told() {
        assert_eq!(bed_name(None, 4242), "demo-4242");
        assert_eq!(bed_name(Some("nc1"), 4242), "nc1");
        flowlane_testbed::state::validate_name(&bed_name(None, u32::MAX)).unwrap();
    }

    #[test]
    fn a_new_bed_is_made_and_removed_an_existing_one_used_and_restored() {
        let (spec, after) = demo_bed("d", None, None).unwrap();
        assert_eq!((spec.queues, after), (DEFAULT_QUEUES, Afterwards::Remove));
        assert_eq!(spec.key, RssKey::microsoft_default().as_bytes());
        assert_eq!(spec.table.len(), 128);
        assert_eq!(&spec.table[..5], &[0, 1, 2, 3, 0]);
        let (spec, _) = demo_bed("d", Some(2), None).unwrap();
        assert_eq!((spec.queues, &spec.table[..3]), (2, &[0, 1, 0][..]));

        let theirs = RssSettings {
            key: vec![7; 40],
            table: vec![1; 64],
        };
        let restore = Afterwards::Restore {
            key: theirs.key.clone(),
            table: theirs.table.clone(),
        };
        // Its own queue count, key and table, put back afterwards.
        for queues in [None, Some(2)] {
            let (spec, after) = demo_bed("nc1", queues, Some((2, theirs.clone()))).unwrap();
            assert_eq!(spec.queues, 2);
            assert_eq!((&spec.key, &spec.table), (&theirs.key, &theirs.table));
            assert_eq!(after, restore);
        }
        // Another queue count is refused, not made.
        let e = demo_bed("nc1", Some(4), Some((2, theirs))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--queues 4: test bed nc1 exists with 2 queues (leave --queues out to use them, or name another bed)"
        );
    }

    #[test]
    fn a_demo_that_would_test_nothing_is_refused() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |a: &[&str]| Cli::try_parse_from([&["demo"][..], a].concat());
        for bad in [&["--flows", "0"], &["--packets", "0"]] {
            let e = parse(bad).err().expect("refused");
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{e}");
        }
        let ok = parse(&["--flows", "1", "--packets", "1"]).unwrap().args;
        assert_eq!((ok.flows, ok.packets, ok.queues), (1, 1, None));
    }

    #[test]
    fn the_result_is_kept_under_out() {
        assert_eq!(
            result_path(Path::new("x/y")),
            PathBuf::from("x/y/udp-rss.json")
        );
    }
}
