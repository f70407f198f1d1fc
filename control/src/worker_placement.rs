//! Where flowlane's workers run: numa-sched's placement plan on this
//! machine's topology, the plan `udp-echo` pins its workers by and `hint`
//! predicts with.
//!
//! `plan_placement` refuses more queues than CPUs. A small machine (the
//! 2-CPU VM running a 4-queue test bed) still has to serve every queue, so
//! [`place_queues`] then plans as many queues as there are CPUs and hands the
//! rest out round-robin over those CPUs, saying so.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use flowlane_numa_sched::{plan_placement, PlacementPlan, QueuePlacement, Topology};

/// Where the topology comes from (`plan`, `irq`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TopologyArgs {
    /// Load an hwloc XML export (`lstopo --of xml FILE`) instead of probing this machine.
    #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
    pub topology_xml: Option<PathBuf>,
    /// Use an hwloc synthetic topology, e.g. "package:2 numa:2 core:4 pu:2".
    #[arg(long, value_name = "DESC")]
    pub synthetic: Option<String>,
}

impl TopologyArgs {
    /// Whether the topology is this machine's (so the process's CPU affinity applies).
    pub fn is_machine(&self) -> bool {
        self.topology_xml.is_none() && self.synthetic.is_none()
    }

    /// Loads the topology.
    pub fn load(&self) -> Result<Topology> {
        if let Some(p) = &self.topology_xml {
            return Topology::from_xml_file(p)
                .with_context(|| format!("loading topology file {}", p.display()));
        }
        if let Some(d) = &self.synthetic {
            return Ok(Topology::from_synthetic_description(d)?);
        }
        Topology::from_system().context("probing this machine's topology")
    }
}

/// A placement, and whether queues had to share CPUs.
#[derive(Debug, Clone)]
pub struct Placed {
    /// One placement per queue, `plan.queues[i].queue == i`.
    pub plan: PlacementPlan,
    /// Set when there are more queues than allowed CPUs: the warning to print.
    pub shared: Option<String>,
    /// The allowed CPUs of each NUMA node (where a node's packet memory is
    /// allocated from).
    pub node_cpus: BTreeMap<u32, Vec<u32>>,
}

/// Places `queues` queues on `topo` (NIC on `nic_node`, only CPUs in `budget`
/// if given). With more queues than allowed CPUs, the first queues get the
/// policy's CPUs and the rest share them round-robin.
pub fn place_queues(
    topo: &Topology,
    nic_node: Option<u32>,
    queues: usize,
    budget: Option<&[u32]>,
) -> Result<Placed> {
    // Budget CPUs the topology does not know (offline, or another machine's
    // topology) are dropped rather than refused.
    let budget: Option<Vec<u32>> = budget.map(|b| {
        b.iter()
            .copied()
            .filter(|&c| topo.cpu(c).is_some())
            .collect()
    });
    let allowed = match &budget {
        Some(b) => b.len(),
        None => topo.cores.len(),
    };
    let mut node_cpus: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for c in &topo.cores {
        if budget.as_ref().is_none_or(|b| b.contains(&c.os_index)) {
            node_cpus.entry(c.numa_node).or_default().push(c.os_index);
        }
    }
    if allowed == 0 {
        anyhow::bail!("no CPU of the topology is allowed for the workers");
    }
    if queues <= allowed {
        let plan = plan_placement(topo, nic_node, queues, budget.as_deref(), &[])?;
        return Ok(Placed {
            plan,
            shared: None,
            node_cpus,
        });
    }
    let base = plan_placement(topo, nic_node, allowed, budget.as_deref(), &[])?;
    let mut plan = base.clone();
    plan.queues = (0..queues)
        .map(|i| QueuePlacement {
            queue: i as u16,
            ..base.queues[i % allowed]
        })
        .collect();
    let shared = format!(
        "{queues} queues on {allowed} CPU(s): queues share CPUs round-robin ({})",
        plan.queues
            .iter()
            .map(|p| format!("queue {} on CPU {}", p.queue, p.cpu))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Placed {
        plan,
        shared: Some(shared),
        node_cpus,
    })
}

/// The placement of `queues` queues on this machine for a NIC on `nic_node`,
/// within the CPUs this process may use: what `udp-echo` pins its workers by.
pub fn machine_placement(nic_node: Option<u32>, queues: usize) -> Result<Placed> {
    let topo = Topology::from_system().context("probing this machine's topology")?;
    place_queues(&topo, nic_node, queues, Some(&allowed_cpus()))
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<u32> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok();
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    match set {
        Some(s) => (0..nix::sched::CpuSet::count() as u32)
            .filter(|&c| s.is_set(c as usize).unwrap_or(false))
            .collect(),
        None => (0..n as u32).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> Topology {
        Topology::from_synthetic_description("package:2 numa:1 core:2 pu:1").unwrap()
    }

    #[test]
    fn enough_cpus_follows_the_policy() {
        let t = two_nodes();
        let p = place_queues(&t, Some(1), 2, None).unwrap();
        assert!(p.shared.is_none());
        assert!(p.plan.queues.iter().all(|q| q.node == 1));
    }

    #[test]
    fn more_queues_than_cpus_share_round_robin() {
        let t = two_nodes();
        let p = place_queues(&t, Some(0), 6, Some(&[0, 1])).unwrap();
        let cpus: Vec<u32> = p.plan.queues.iter().map(|q| q.cpu).collect();
        assert_eq!(cpus, vec![0, 1, 0, 1, 0, 1]);
        assert_eq!(
            p.plan.queues.iter().map(|q| q.queue).collect::<Vec<_>>(),
            (0..6).collect::<Vec<_>>()
        );
        assert!(p.shared.unwrap().contains("6 queues on 2 CPU(s)"));
    }

    #[test]
    fn unknown_budget_cpus_are_dropped() {
        let t = two_nodes();
        let p = place_queues(&t, None, 1, Some(&[3, 99])).unwrap();
        assert_eq!(p.plan.queues[0].cpu, 3);
        assert!(place_queues(&t, None, 1, Some(&[99])).is_err());
    }
}
