//! `flowlane`: the control CLI — test bed, data-path services and demos.
//!
//! Every failure ends in one line on stderr that says what is wrong and what
//! to do, and a non-zero exit (2 for bad usage, 1 otherwise).

#[macro_use]
mod output;

mod bench_rx;
mod cmd_hint;
mod cmd_irq;
mod cmd_plan;
mod cmd_rss;
mod delay_line;
mod delay_queue;
mod demo;
mod echo_process;
mod impair;
mod irq_apply;
mod netns;
mod nic;
mod service;
mod sysroot;
mod tcp_apps;
mod testbed;
mod topology_args;
mod udp_echo;
mod udp_ping;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use flowlane_numa_sched::indirection::IndirectionTable;
use flowlane_numa_sched::toeplitz::RssKey;

use crate::nic::RssNic;

/// flowlane: RSS/NUMA-aware multiqueue packet I/O on AF_XDP.
#[derive(Parser, Debug)]
#[command(name = "flowlane", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The veth test bed with an emulated RSS NIC.
    Testbed {
        #[command(subcommand)]
        cmd: TestbedCmd,
    },
    /// UDP echo service on flowlane's data path (all or some queues).
    UdpEcho(udp_echo::Args),
    #[command(flatten)]
    Tcp(tcp_apps::TcpCmd),
    /// A real NIC's RSS through ethtool (key and table).
    Nic {
        #[command(subcommand)]
        cmd: NicCmd,
    },
    /// Benchmarks on the test bed.
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
    /// End-to-end demo on the test bed: flows from the kernel side, echoed
    /// by flowlane, per-queue arrivals next to the Toeplitz prediction.
    Demo(demo::Args),
    /// Toeplitz RSS of a flow: hash, bucket, queue.
    Rss {
        #[command(subcommand)]
        cmd: RssCmd,
    },
    /// Placement, indirection-table and IRQ plans for a topology and NIC.
    Plan(cmd_plan::Args),
    /// Queue IRQ affinity (threaded-NAPI kthreads on veth): show or apply.
    Irq {
        #[command(subcommand)]
        cmd: IrqCmd,
    },
    /// The queue, CPU and NUMA node that process a flow.
    Hint(cmd_hint::Args),
    /// Send one UDP datagram from a queue's worker with an RSS-chosen source
    /// port; report the queue the reply arrives on.
    UdpPing(udp_ping::Args),
}

#[derive(Subcommand, Debug)]
enum RssCmd {
    /// Hash a flow and look it up in an indirection table.
    Hash(cmd_rss::HashArgs),
}

#[derive(Subcommand, Debug)]
enum IrqCmd {
    /// Current vs planned affinity of each queue IRQ (or NAPI thread).
    Show(cmd_irq::Args),
    /// Write the planned affinities (only those that change).
    Apply {
        #[command(flatten)]
        args: cmd_irq::Args,
        /// Show what would be written, write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Receive packets/s of one worker (XDP live-frames generator).
    Rx(bench_rx::Args),
}

#[derive(Subcommand, Debug)]
enum NicCmd {
    /// Show the RSS key and indirection table of an interface.
    Rss {
        /// Interface name.
        #[arg(long)]
        iface: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Spread the indirection table evenly over the first N queues and/or
    /// set the key.
    SetRss {
        /// Interface name.
        #[arg(long)]
        iface: String,
        /// New Toeplitz key (hex).
        #[arg(long)]
        key: Option<String>,
        /// Spread the table over queues 0..N.
        #[arg(long)]
        equal: Option<u16>,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct BedName {
    /// Test bed name (namespaces flowlane-NAME and flowlane-NAME-peer).
    #[arg(long, default_value = "fl0")]
    name: String,
}

#[derive(Subcommand, Debug)]
enum TestbedCmd {
    /// Create the test bed (idempotent).
    Up {
        #[command(flatten)]
        bed: BedName,
        /// Queues of the veth pair.
        #[arg(long, default_value_t = 4)]
        queues: u32,
        /// Toeplitz key, hex (ethtool style aa:bb:.. or plain); default: the
        /// Microsoft verification key.
        #[arg(long)]
        key: Option<String>,
        /// Indirection table entries (power of two).
        #[arg(long, default_value_t = 128)]
        table_size: usize,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the test bed and everything `up` made.
    Down {
        #[command(flatten)]
        bed: BedName,
    },
    /// Show the test bed and its emulated NIC.
    Status {
        #[command(flatten)]
        bed: BedName,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Impair the link (loss, duplication, corruption, reordering) both
    /// ways, in BPF: this kernel has no sch_netem.
    Impair(impair::Args),
    /// Delay the link both ways (a user-space delay line: this kernel has no
    /// sch_netem). Runs until SIGTERM/SIGINT, then removes itself.
    Delay(delay_line::Args),
    /// Program the emulated NIC's RSS, through the same interface as a
    /// real NIC's.
    SetRss {
        #[command(flatten)]
        bed: BedName,
        /// New Toeplitz key (hex).
        #[arg(long)]
        key: Option<String>,
        /// Spread the table evenly over these queues (comma-separated).
        #[arg(long, value_delimiter = ',')]
        queues: Option<Vec<u16>>,
        /// Explicit table: one queue per bucket, comma-separated.
        #[arg(long, value_delimiter = ',', conflicts_with = "queues")]
        table: Option<Vec<u32>>,
    },
}

/// Builds an even indirection table of `size` entries over `queues` queues.
pub(crate) fn even_table(size: usize, queues: &[u16]) -> Result<Vec<u32>> {
    let t = IndirectionTable::even(size, queues)?;
    Ok(t.entries().iter().map(|&q| q as u32).collect())
}

fn parse_key(text: Option<&str>) -> Result<RssKey> {
    match text {
        None => Ok(RssKey::microsoft_default()),
        Some(t) => Ok(RssKey::parse_hex(t).context("bad --key")?),
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Testbed { cmd } => match cmd {
            TestbedCmd::Up {
                bed,
                queues,
                key,
                table_size,
                json,
            } => {
                let key = parse_key(key.as_deref())?;
                let all: Vec<u16> = (0..queues.min(u16::MAX as u32) as u16).collect();
                let spec = testbed::BedSpec {
                    name: bed.name,
                    queues,
                    key: key.as_bytes().to_vec(),
                    table: even_table(table_size, &all)?,
                };
                let s = testbed::up(&spec)?;
                if json {
                    outln!("{}", serde_json::to_string_pretty(&s)?);
                } else {
                    outln!(
                        "test bed {} up: {} ({} {}) <-> {} ({} {}), {} queues",
                        s.name,
                        s.netns,
                        s.local_if,
                        s.local_v4,
                        s.peer_netns,
                        s.peer_if,
                        s.peer_v4,
                        s.queues
                    );
                }
            }
            TestbedCmd::Down { bed } => {
                if testbed::down(&bed.name)? {
                    outln!("test bed {} removed", bed.name);
                } else {
                    outln!("test bed {} was not up", bed.name);
                }
            }
            TestbedCmd::Status { bed, json } => {
                let st = testbed::status(&bed.name)?;
                if json {
                    outln!("{}", serde_json::to_string_pretty(&st)?);
                } else {
                    let s = &st.state;
                    outln!(
                        "test bed {}: {}",
                        s.name,
                        if st.intact {
                            "up"
                        } else {
                            "BROKEN (run `flowlane testbed down`)"
                        }
                    );
                    outln!(
                        "  {} {} {} {}",
                        s.netns,
                        s.local_if,
                        s.local_v4,
                        s.local_mac
                    );
                    outln!(
                        "  {} {} {} {}",
                        s.peer_netns,
                        s.peer_if,
                        s.peer_v4,
                        s.peer_mac
                    );
                    outln!(
                        "  xdp on {}: {}",
                        s.local_if,
                        st.xdp.as_deref().unwrap_or("none")
                    );
                    outln!("  RSS key {}", st.key);
                    outln!("  indirection table: {} entries", st.table_size);
                    for (q, n) in st.queue_packets.iter().enumerate() {
                        outln!("  queue {q}: {n} packets steered");
                    }
                }
            }
            TestbedCmd::Impair(args) => {
                let s = testbed::load(&args.name)?;
                impair::apply(&s, &args)?;
                match impair::status(&s)? {
                    Some(st) => outln!(
                        "test bed {} impairment: {}",
                        s.name,
                        serde_json::to_string(&st)?
                    ),
                    None => outln!("test bed {} unimpaired", s.name),
                }
            }
            TestbedCmd::Delay(args) => {
                netns::require_root("flowlane testbed delay")?;
                let s = testbed::load(&args.name)?;
                let signals = service::ServiceSignals::install()?;
                let (name, ms) = (s.name.clone(), args.ms);
                let report = delay_line::run(&s, &args, signals, move || {
                    outln!(
                        "test bed {name}: delaying both directions by {ms} ms (round trip +{} ms); SIGTERM stops it",
                        2.0 * ms
                    );
                })?;
                if args.json {
                    outln!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    let q = &report.queue;
                    outln!(
                        "delay line stopped after {:.1} s: {} frames ({} bytes) delayed, {} dropped (line full), {} dropped by the socket, {} too large, {} refused; late by {:.0} µs on average, {:.0} µs at worst ({} frames over 10 %)",
                        report.seconds, q.frames_out, q.bytes_in, q.dropped_full, report.socket_drops,
                        report.truncated, report.refused, report.mean_late_us, report.max_late_us, report.late_frames
                    );
                }
            }
            TestbedCmd::SetRss {
                bed,
                key,
                queues,
                table,
            } => {
                let s = testbed::load(&bed.name)?;
                let nic = s.nic();
                let caps = nic.caps()?;
                let key = key.as_deref().map(|k| parse_key(Some(k))).transpose()?;
                let table = match (queues, table) {
                    (Some(q), _) => Some(even_table(caps.table_size, &q)?),
                    (None, t) => t,
                };
                nic.set_rss(key.as_ref().map(|k| k.as_bytes()), table.as_deref())?;
                outln!("RSS of test bed {} updated", s.name);
            }
        },
        Cmd::Nic { cmd } => match cmd {
            NicCmd::Rss { iface, json } => {
                let nic = nic::ethtool::EthtoolNic::new(&iface);
                let caps = nic.caps()?;
                let rss = nic.rss()?;
                if json {
                    outln!(
                        "{}",
                        serde_json::json!({"iface": nic.name(), "caps": caps, "rss": rss})
                    );
                } else {
                    outln!(
                        "{}: {} queues, {}-byte key, {}-entry table",
                        nic.name(),
                        caps.queues,
                        caps.key_len,
                        caps.table_size
                    );
                    outln!(
                        "key {}",
                        rss.key
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(":")
                    );
                    for (i, row) in rss.table.chunks(8).enumerate() {
                        outln!(
                            "{:>5}: {}",
                            i * 8,
                            row.iter().map(|q| format!("{q:>4}")).collect::<String>()
                        );
                    }
                }
            }
            NicCmd::SetRss { iface, key, equal } => {
                let nic = nic::ethtool::EthtoolNic::new(&iface);
                let key = key.as_deref().map(|k| parse_key(Some(k))).transpose()?;
                let table = match equal {
                    Some(n) => Some(even_table(
                        nic.caps()?.table_size,
                        &(0..n).collect::<Vec<_>>(),
                    )?),
                    None => None,
                };
                nic.set_rss(key.as_ref().map(|k| k.as_bytes()), table.as_deref())?;
                outln!("RSS of {} updated", nic.name());
            }
        },
        Cmd::UdpEcho(args) => udp_echo::run(args)?,
        Cmd::Tcp(cmd) => tcp_apps::run(cmd)?,
        Cmd::Demo(args) => demo::run(args)?,
        Cmd::Bench {
            cmd: BenchCmd::Rx(args),
        } => bench_rx::run(args)?,
        Cmd::Rss {
            cmd: RssCmd::Hash(args),
        } => cmd_rss::hash(args)?,
        Cmd::Plan(args) => cmd_plan::run(args)?,
        Cmd::Irq { cmd } => match cmd {
            IrqCmd::Show(args) => cmd_irq::show(args)?,
            IrqCmd::Apply { args, dry_run } => cmd_irq::apply(args, dry_run)?,
        },
        Cmd::Hint(args) => cmd_hint::run(args)?,
        Cmd::UdpPing(args) => udp_ping::run(args)?,
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOWLANE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flowlane: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
