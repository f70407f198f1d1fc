//! `flowlane irq show|apply`: a NIC's queue IRQ affinities (or, on veth, its
//! threaded-NAPI kthreads), current vs planned, and applying the plan.

use anyhow::Result;
use flowlane_numa_sched::format_cpu_list;

use crate::irq_apply::{self, Applied, IrqView, QueueIrqs};
use crate::sysroot::Roots;
use crate::topology_args::TopologyArgs;
use flowlane_dataplane::affinity::allowed_cpus;

/// Flags shared by `irq show` and `irq apply`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Interface (its queue IRQs, or its NAPI threads on veth).
    #[arg(long)]
    pub iface: String,
    /// Queues to place (default: all of the device's receive queues).
    #[arg(long, value_parser = flowlane_dataplane::service_args::queue_count::<u32>)]
    pub queues: Option<u32>,
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub roots: Roots,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

fn budget(args: &Args) -> Option<Vec<u32>> {
    args.topology.is_machine().then(allowed_cpus)
}

/// `flowlane irq show`.
pub(crate) fn show(args: Args) -> Result<()> {
    let topo = args.topology.load()?;
    let view = irq_apply::inspect(
        &args.roots,
        &args.iface,
        &topo,
        args.queues,
        budget(&args).as_deref(),
    )?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print_view(&view);
    }
    Ok(())
}

/// `flowlane irq apply [--dry-run]`.
pub(crate) fn apply(args: Args, dry_run: bool) -> Result<()> {
    let topo = args.topology.load()?;
    // NAPI threads are pinned through the live kernel whatever the roots
    // say: against a copied or made-up procfs their pids are not these
    // threads, and pinning them would move whatever processes hold them.
    let live_procfs = args.roots.procfs_root == std::path::Path::new("/proc");
    let mut pin = |pid: u32, cpus: &[u32]| {
        if live_procfs {
            irq_apply::set_task_affinity(pid, cpus)
        } else {
            anyhow::bail!(
                "not pinning pid {pid}: --procfs-root is not /proc, so its pids are not this \
                 machine's threads (use --dry-run)"
            )
        }
    };
    let (view, done) = irq_apply::apply(
        &args.roots,
        &args.iface,
        &topo,
        args.queues,
        budget(&args).as_deref(),
        dry_run,
        &mut pin,
    )?;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"dry_run": dry_run, "before": view, "done": done})
        );
    } else {
        print_view(&view);
        print_done(&args.roots, &done, dry_run);
    }
    Ok(())
}

fn print_view(v: &IrqView) {
    out!("{}", v.placement);
    if let Some(w) = &v.shared {
        outln!("warning: {w}");
    }
    match &v.irqs {
        QueueIrqs::Msi { plan } => {
            outln!("queue IRQs of {} (* = to change):", v.iface.name);
            out!("{plan}");
        }
        QueueIrqs::Napi { threaded, threads } => {
            outln!(
                "{} has no MSI IRQs (virtual device): threaded NAPI is {}",
                v.iface.name,
                if *threaded { "on" } else { "off" }
            );
            if threads.is_empty() {
                outln!(
                    "no napi/{}-* threads (NAPI runs only while an XDP program is attached, and needs threaded on)",
                    v.iface.name
                );
            } else {
                outln!(
                    "{:>5} {:>20} {:>8} {:>10} {:>8}",
                    "queue",
                    "thread",
                    "pid",
                    "current",
                    "planned"
                );
                for t in threads {
                    outln!(
                        "{:>5} {:>20} {:>8} {:>10} {:>8}{}",
                        t.queue,
                        t.name,
                        t.pid,
                        format_cpu_list(&t.current),
                        t.planned,
                        if t.changes() { "  *" } else { "" }
                    );
                }
            }
        }
    }
}

fn print_done(roots: &Roots, d: &Applied, dry_run: bool) {
    let verb = if dry_run { "would write" } else { "wrote" };
    for (rel, value) in &d.writes {
        let root = if rel.starts_with("class") {
            &roots.sysfs_root
        } else {
            &roots.procfs_root
        };
        outln!("{verb} {} <- {value}", root.join(rel).display());
    }
    let verb = if dry_run { "would pin" } else { "pinned" };
    for (pid, cpu) in &d.pinned {
        outln!("{verb} pid {pid} to CPU {cpu}");
    }
    if d.writes.is_empty() && d.pinned.is_empty() {
        outln!("nothing to change");
    }
}
