//! The `flowlane` command: test bed, NIC RSS, plans, IRQ affinity, hints,
//! and a one-line dispatch into the data-path services of `flowlane-apps`.
//! The binary (`main.rs`) parses the command line and calls [`run`].
//!
//! Every failure ends in one line on stderr that says what is wrong and what
//! to do, and a non-zero exit (2 for bad usage, 1 otherwise).
#![forbid(unsafe_code)]

#[macro_use]
extern crate flowlane_apps;

mod cmd_daemon;
mod cmd_hint;
mod cmd_irq;
mod cmd_nic;
mod cmd_plan;
mod cmd_rebalance;
mod cmd_rss;
mod cmd_status;
mod cmd_testbed;
mod host_plan;
mod irq_apply;
mod nic;
mod sysroot;
mod topology_args;

use anyhow::Result;
use clap::{Parser, Subcommand};
use flowlane_apps::{
    bench_handoff, bench_rx, bench_skew, bench_synflood, demo, tcp, udp_echo, udp_ping,
};

/// flowlane: RSS/NUMA-aware multiqueue packet I/O on AF_XDP.
#[derive(Parser, Debug)]
#[command(
    name = "flowlane",
    version,
    about = "flowlane: RSS/NUMA-aware multiqueue packet I/O on AF_XDP. Runs example services \
             (UDP echo, TCP echo, HTTP, bulk transfer) on the AF_XDP data path, on a real \
             interface or a veth test bed with an emulated RSS NIC (`flowlane testbed`), and \
             shows or plans RSS, placement and IRQ affinity. The test bed and the AF_XDP data path \
             need root; the TCP services on `--backend kernel` without `--bed` do not."
)]
pub struct Cli {
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
    Tcp(tcp::TcpCmd),
    /// A real NIC: its capabilities, its queues' counters, its RSS key and
    /// table (read and written through ethtool netlink or ioctls; no
    /// ethtool command needed).
    Nic {
        #[command(subcommand)]
        cmd: cmd_nic::NicCmd,
    },
    /// A running TCP service's queues and RSS buckets; moving a bucket,
    /// with its live connections, to another queue by hand.
    Rebalance {
        #[command(subcommand)]
        cmd: cmd_rebalance::RebalanceCmd,
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
    /// The control daemon: the running services' counters as Prometheus
    /// metrics.
    Daemon(cmd_daemon::Args),
    /// One screen: the daemon, the running services, their queues and moves.
    Status(cmd_status::Args),
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
    /// Time to move one RSS bucket with its live connections between
    /// queues (idle and busy buckets), through a sink's control socket.
    Handoff(bench_handoff::Args),
    /// A skewed workload (every RSS bucket on one queue, kernel senders
    /// streaming) with and without live rebalancing: load balance over
    /// time, throughput, moves.
    Skew(bench_skew::Args),
    /// A spoofed SYN flood (XDP generator, forged on-link sources) against
    /// flowlane's echo server and the kernel's, same bed, same run: SYNs
    /// answered per second and per CPU-second, SYN cookies, a legitimate
    /// client's connect times.
    Synflood(bench_synflood::Args),
}

/// Runs one `flowlane` command.
pub fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Testbed { cmd } => cmd_testbed::run(cmd),
        Cmd::Nic { cmd } => cmd_nic::run(cmd),
        Cmd::Rebalance { cmd } => cmd_rebalance::run(cmd),
        Cmd::UdpEcho(args) => udp_echo::run(args),
        Cmd::Tcp(cmd) => tcp::run(
            cmd,
            tcp::NicAccess {
                read: nic::ethtool::read_rss,
                writer: nic::ethtool::writer,
            },
        ),
        Cmd::Demo(args) => demo::run(args),
        Cmd::Bench {
            cmd: BenchCmd::Rx(args),
        } => bench_rx::run(args),
        Cmd::Bench {
            cmd: BenchCmd::Handoff(args),
        } => bench_handoff::run(args),
        Cmd::Bench {
            cmd: BenchCmd::Skew(args),
        } => bench_skew::run(args),
        Cmd::Bench {
            cmd: BenchCmd::Synflood(args),
        } => bench_synflood::run(args),
        Cmd::Rss {
            cmd: RssCmd::Hash(args),
        } => cmd_rss::hash(args),
        Cmd::Plan(args) => cmd_plan::run(args),
        Cmd::Irq { cmd } => match cmd {
            IrqCmd::Show(args) => cmd_irq::show(args),
            IrqCmd::Apply { args, dry_run } => cmd_irq::apply(args, dry_run),
        },
        Cmd::Hint(args) => cmd_hint::run(args),
        Cmd::Daemon(args) => cmd_daemon::run(args),
        Cmd::Status(args) => cmd_status::run(args),
        Cmd::UdpPing(args) => udp_ping::run(args),
    }
}
