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
mod cmd_testbed;
mod demo;
mod echo_process;
mod irq_apply;
mod nic;
mod service;
mod sysroot;
mod tcp_apps;
mod topology_args;
mod udp_echo;
mod udp_ping;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use flowlane_numa_sched::indirection::IndirectionTable;
use flowlane_numa_sched::toeplitz::RssKey;

use flowlane_numa_sched::nic::RssNic;

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
        cmd: cmd_testbed::TestbedCmd,
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
        Cmd::Testbed { cmd } => cmd_testbed::run(cmd)?,
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
