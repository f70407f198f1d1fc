//! Where flowlane's workers run: numa-sched's placement plan on this
//! machine's topology. Every data-path service pins its workers by it (UDP
//! and TCP alike), and `flowlane hint` predicts with the same function, so a
//! hint names the CPU and node that really serve the flow.
//!
//! `plan_placement` refuses more queues than CPUs. A small machine (the
//! 2-CPU VM running a 4-queue test bed) still has to serve every queue, so
//! [`place_queues`] then plans as many queues as there are CPUs and hands the
//! rest out round-robin over those CPUs, saying so.

use std::collections::BTreeMap;

use flowlane_numa_sched::{plan_placement, PlacementPlan, QueuePlacement, Topology};

use crate::affinity::allowed_cpus;
use crate::runtime::{DataplaneConfig, QueueAssignment};
use crate::{Error, Result};

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

impl Placed {
    /// Each queue's placement as the application API names it (queue,
    /// pinned CPU, node): the cores a backend serves on.
    pub fn cores(&self) -> Vec<flowlane_app::Placement> {
        self.plan
            .queues
            .iter()
            .map(|p| flowlane_app::Placement {
                queue: u32::from(p.queue),
                cpu: Some(p.cpu),
                node: p.node,
            })
            .collect()
    }
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
    // topology) are dropped rather than refused; a CPU named twice counts once.
    let budget: Option<Vec<u32>> = budget.map(|b| {
        let mut b: Vec<u32> = b
            .iter()
            .copied()
            .filter(|&c| topo.cpu(c).is_some())
            .collect();
        b.sort_unstable();
        b.dedup();
        b
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
        return Err(Error::Setup(
            "no CPU of the topology is allowed for the workers".into(),
        ));
    }
    if queues <= allowed {
        let plan = plan_placement(topo, nic_node, queues, budget.as_deref(), &[])
            .map_err(Error::Placement)?;
        return Ok(Placed {
            plan,
            shared: None,
            node_cpus,
        });
    }
    if queues > usize::from(u16::MAX) + 1 {
        return Err(Error::Placement(
            flowlane_numa_sched::Error::TooManyQueues { queues },
        ));
    }
    let base = plan_placement(topo, nic_node, allowed, budget.as_deref(), &[])
        .map_err(Error::Placement)?;
    let mut plan = base.clone();
    plan.queues = (0..=u16::MAX)
        .take(queues)
        .enumerate()
        .map(|(i, queue)| QueuePlacement {
            queue,
            ..base.queues[i % allowed]
        })
        .collect();
    let shared = format!(
        // Workers: a queue's worker is numbered as its queue, software
        // spill's extra workers (which have no queue) after them.
        "{queues} workers on {allowed} CPU(s) share them round-robin ({})",
        plan.queues
            .iter()
            .map(|p| format!("worker {} on CPU {}", p.queue, p.cpu))
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
/// within `cpus` (default: the CPUs this process may use): what every
/// data-path service pins its workers by.
pub fn machine_placement(
    nic_node: Option<u32>,
    queues: usize,
    cpus: Option<&[u32]>,
) -> Result<Placed> {
    let topo = Topology::from_system().map_err(Error::Placement)?;
    let allowed;
    let budget = match cpus {
        Some(c) => c,
        None => {
            allowed = allowed_cpus();
            &allowed
        }
    };
    place_queues(&topo, nic_node, queues, Some(budget))
}

impl DataplaneConfig {
    /// Pins each queue's worker to its planned CPU and allocates its packet
    /// memory on the planned node.
    pub fn apply_placement(&mut self, placed: &Placed) {
        for (q, p) in self.queues.iter_mut().zip(&placed.plan.queues) {
            *q = QueueAssignment {
                queue: q.queue,
                cpu: Some(p.cpu),
                node: p.mem_node,
            };
        }
        self.node_cpus = placed.node_cpus.clone();
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
        let warning = p.shared.unwrap();
        assert!(
            warning.starts_with("6 workers on 2 CPU(s) share them round-robin (worker 0 on CPU 0"),
            "{warning}"
        );
    }

    #[test]
    fn a_nic_node_the_topology_does_not_list_is_not_an_error() {
        // A container whose cpuset.mems leaves out the NIC's node: hwloc does not list it.
        let t = Topology::synthetic(1, 1, 2, 1).unwrap();
        let p = place_queues(&t, Some(1), 2, None).unwrap();
        assert_eq!(p.plan.cpus(), vec![0, 1]);
        assert!(p.shared.is_none());
    }

    #[test]
    fn duplicate_budget_cpus_count_once() {
        let t = two_nodes();
        let p = place_queues(&t, Some(0), 2, Some(&[2, 2])).unwrap();
        assert_eq!(p.plan.cpus(), vec![2, 2]);
        assert!(p.shared.unwrap().contains("2 workers on 1 CPU(s)"));
        assert_eq!(p.node_cpus, BTreeMap::from([(1, vec![2])]));
    }

    #[test]
    fn sharing_refuses_more_queues_than_16_bits_name() {
        let t = two_nodes();
        let e = place_queues(&t, Some(0), 65537, Some(&[0])).unwrap_err();
        assert!(e.to_string().contains("65537 queues"), "{e}");
        assert_eq!(
            place_queues(&t, Some(0), 65536, Some(&[0]))
                .unwrap()
                .plan
                .queues
                .len(),
            65536
        );
    }

    #[test]
    fn unknown_budget_cpus_are_dropped() {
        let t = two_nodes();
        let p = place_queues(&t, None, 1, Some(&[3, 99])).unwrap();
        assert_eq!(p.plan.queues[0].cpu, 3);
        assert!(place_queues(&t, None, 1, Some(&[99])).is_err());
    }
}
