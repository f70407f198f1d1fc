//! `flowlane plan`: the placement, indirection-table and IRQ plans for a
//! topology (this machine, an hwloc XML file or a synthetic description) and
//! a NIC, as readable tables (or JSON). Reads, never writes.

use anyhow::{bail, Result};
use flowlane_numa_sched::plan_explain::{self, Wanted};
use flowlane_numa_sched::Topology;
use serde::Serialize;

use crate::cmd_rss::even_spread;
use crate::irq_apply::{self, QueueIrqs};
use crate::sysroot::Roots;
use crate::topology_args::TopologyArgs;
use flowlane_dataplane::affinity::allowed_cpus;
use flowlane_dataplane::placement::place_queues;
use flowlane_dataplane::service_args::{queue_count, table_size};

/// Flags of `flowlane plan`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// The NIC's NUMA node (default: from --iface's sysfs, else unknown).
    #[arg(long)]
    pub nic_node: Option<u32>,
    /// Queues to place (default: --iface's receive queues, else one per CPU
    /// of the NIC's node, else one per CPU).
    #[arg(long, value_parser = queue_count::<u32>)]
    pub queues: Option<u32>,
    /// Indirection table entries (a power of two).
    #[arg(long, default_value_t = 128, value_parser = table_size)]
    pub table_size: usize,
    /// Read the NIC's node, queue count and queue IRQs from sysfs/procfs.
    #[arg(long)]
    pub iface: Option<String>,
    #[command(flatten)]
    pub roots: Roots,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Say, for each part of the plan, whether the NIC does it in hardware,
    /// the kernel in its software path or flowlane itself, and why (needs
    /// --iface or --nic-recording).
    #[arg(long)]
    pub explain: bool,
    /// Workers to explain the plan for (default: --queues, else the NIC's
    /// receive queues); more than the NIC can have queues is software
    /// spill (`--workers` of the TCP services).
    #[arg(long, requires = "explain", value_parser = queue_count::<u32>)]
    pub workers: Option<u32>,
    /// Explain for the NIC recorded in FILE (`flowlane nic caps --record`)
    /// instead of --iface.
    #[arg(
        long,
        value_name = "FILE",
        requires = "explain",
        conflicts_with = "iface"
    )]
    pub nic_recording: Option<std::path::PathBuf>,
}

/// Summary of the topology planned for.
#[derive(Debug, Serialize)]
pub(crate) struct TopologySummary {
    /// Logical CPUs.
    pub cpus: usize,
    /// Physical cores.
    pub cores: usize,
    /// NUMA nodes with their CPUs.
    pub nodes: Vec<(u32, Vec<u32>)>,
}

/// Everything `plan` prints.
#[derive(Debug, Serialize)]
pub(crate) struct Plan {
    /// The topology.
    pub topology: TopologySummary,
    /// Queue placement.
    pub placement: flowlane_numa_sched::PlacementPlan,
    /// Set when queues share CPUs.
    pub shared: Option<String>,
    /// Indirection table.
    pub indirection: Vec<u16>,
    /// Buckets per queue.
    pub buckets_per_queue: Vec<(u16, usize)>,
    /// IRQ (or NAPI) plan, with --iface.
    pub irqs: Option<QueueIrqs>,
    /// What the plan took that was not asked for, or differs from sysfs.
    pub notes: Vec<String>,
}

/// Runs `flowlane plan`.
pub(crate) fn run(args: Args) -> Result<()> {
    if args.explain {
        return explain(&args);
    }
    let topo = args.topology.load()?;
    let budget = args.topology.is_machine().then(allowed_cpus);
    let iface = args
        .iface
        .as_deref()
        .map(|i| args.roots.iface(i))
        .transpose()?;
    // A node given by hand must be one of the topology's; the interface's
    // own may be one the topology leaves out (outside a restricted
    // cpuset.mems): the plan then treats it as unknown and says so.
    if let Some(n) = args.nic_node {
        if topo.node(n).is_none() {
            bail!(
                "--nic-node {n} is not in the topology (nodes: {:?})",
                topo.node_ids()
            );
        }
    }
    let mut notes = Vec::new();
    let nic_node = args.nic_node.or(iface.as_ref().and_then(|i| i.numa_node));
    if let (Some(given), Some(i)) = (args.nic_node, &iface) {
        if i.numa_node != Some(given) {
            notes.push(format!(
                "--nic-node {given}, though sysfs puts {} on {}: placement and IRQs are \
                 planned for node {given} (`flowlane irq apply` plans by sysfs's)",
                i.name,
                i.numa_node
                    .map_or_else(|| "no node".to_string(), |n| format!("node {n}"))
            ));
        }
    }
    let queues = match (&iface, args.queues) {
        (Some(i), asked) => i.queues_to_plan(asked)?,
        (None, Some(q)) => q,
        (None, None) => {
            let (n, note) = default_queues(&topo, nic_node, budget.as_deref());
            notes.extend(note);
            n
        }
    };
    if queues > u32::from(u16::MAX) {
        bail!("--queues must be 1..=65535");
    }
    let table = even_spread(args.table_size, queues as u16)?;
    let placed = place_queues(&topo, nic_node, queues as usize, budget.as_deref())?;
    // The IRQs follow the placement printed above them, --nic-node's.
    let irqs = match &iface {
        Some(i) => Some(irq_apply::queue_irqs(
            &args.roots,
            i,
            &placed.plan,
            &irq_apply::live_netdev,
        )?),
        None => None,
    };
    let plan = Plan {
        topology: TopologySummary {
            cpus: topo.cores.len(),
            cores: topo.physical_core_count(),
            nodes: topo
                .nodes
                .iter()
                .map(|n| (n.os_index, n.cpus.clone()))
                .collect(),
        },
        placement: placed.plan,
        shared: placed.shared,
        buckets_per_queue: table.counts().into_iter().collect(),
        indirection: table.entries().to_vec(),
        irqs,
        notes,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(());
    }
    let t = &plan.topology;
    outln!(
        "topology: {} CPU(s), {} physical core(s), {} NUMA node(s)",
        t.cpus,
        t.cores,
        t.nodes.len()
    );
    for (n, cpus) in &t.nodes {
        outln!(
            "  node {n}: CPUs {}",
            flowlane_numa_sched::format_cpu_list(cpus)
        );
    }
    for n in &plan.notes {
        outln!("note: {n}");
    }
    outln!();
    out!("{}", plan.placement);
    if let Some(w) = &plan.shared {
        outln!("warning: {w}");
    }
    outln!();
    out!("{table}");
    outln!(
        "buckets per queue: {}",
        plan.buckets_per_queue
            .iter()
            .map(|(q, n)| format!("{q}:{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    match &plan.irqs {
        Some(QueueIrqs::Msi { plan }) => {
            outln!();
            outln!("IRQ plan (* = to change; apply with `flowlane irq apply`):");
            out!("{plan}");
        }
        Some(QueueIrqs::Napi { threaded, threads }) => {
            outln!();
            outln!(
                "no MSI IRQs (virtual device): threaded NAPI {}, {} napi thread(s); see `flowlane irq show`",
                if *threaded { "on" } else { "off" },
                threads.len()
            );
        }
        None => {}
    }
    Ok(())
}

/// `flowlane plan --explain`: the NIC's capability model against the
/// plan's workers, part by part.
fn explain(args: &Args) -> Result<()> {
    let caps = match (&args.nic_recording, &args.iface) {
        (Some(path), _) => crate::nic::recording::load(path)?,
        (None, Some(iface)) => crate::nic::caps::read(&args.roots, iface)?,
        (None, None) => bail!(
            "--explain needs a NIC: --iface IF (this machine's) or --nic-recording FILE \
             (one recorded by `flowlane nic caps --record`)"
        ),
    };
    let wanted = Wanted {
        workers: args
            .workers
            .or(args.queues)
            .unwrap_or(caps.rx_queues)
            .max(1),
        table_size: args.table_size as u32,
    };
    let topo = args.topology.load()?;
    let parts = plan_explain::explain_on(&caps, wanted, &topo);
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "iface": caps.iface,
                "driver": caps.driver,
                "workers": wanted.workers,
                "parts": parts,
            }))?
        );
        return Ok(());
    }
    outln!(
        "{} ({}): {} worker(s)",
        caps.iface,
        caps.driver.as_deref().unwrap_or("driver unknown"),
        wanted.workers
    );
    let width = parts.iter().map(|p| p.part.len()).max().unwrap_or(0);
    for p in &parts {
        outln!();
        outln!(
            "{:<width$}  {:<8}  {}",
            p.part,
            p.done_by.to_string(),
            p.what
        );
        outln!("{:<width$}  {:<8}  why: {}", "", "", p.why);
        if let Some(a) = &p.action {
            outln!("{:<width$}  {:<8}  to change: {a}", "", "");
        }
    }
    Ok(())
}

/// Queues when none are asked for and no NIC says: one per allowed CPU of
/// the NIC's node; a node with none (memory only, or its CPUs all outside
/// the budget) takes the nearest node that has some, as the placement
/// does, and says so; with no node known, one per allowed CPU.
fn default_queues(
    topo: &Topology,
    nic_node: Option<u32>,
    budget: Option<&[u32]>,
) -> (u32, Option<String>) {
    let allowed = |c: u32| budget.is_none_or(|b| b.contains(&c));
    let on = |n: u32| topo.cpus_on_node(n).filter(|c| allowed(c.os_index)).count();
    let everywhere = || topo.cores.iter().filter(|c| allowed(c.os_index)).count();
    let (n, note) = match nic_node.filter(|&n| topo.node(n).is_some()) {
        Some(n) => match topo
            .nodes_by_distance(n)
            .into_iter()
            .map(|m| (m, on(m)))
            .find(|&(_, c)| c > 0)
        {
            Some((m, c)) if m == n => (c, None),
            Some((m, c)) => (
                c,
                Some(format!(
                    "node {n} has no CPU the workers may use: {c} queue(s), one per CPU of node \
                     {m}, the nearest that has some (--queues to choose)"
                )),
            ),
            None => (everywhere(), None),
        },
        None => (everywhere(), None),
    };
    (n.max(1) as u32, note)
}
