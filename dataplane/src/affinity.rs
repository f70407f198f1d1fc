//! Pinning threads to CPUs and NUMA nodes.

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// Pins the calling thread to the given CPUs.
pub fn pin_current_thread(cpus: &[u32]) -> std::io::Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c as usize).map_err(std::io::Error::from)?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(std::io::Error::from)
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

/// Pins the calling thread (an application thread serving a flow) next to
/// the flow's worker, as `near` asks: numa-sched's [`cpus_near`] on this
/// machine's topology, within the CPUs this process may use, off the
/// workers' CPUs in `avoid` where it can be. Returns the CPUs it pinned
/// to. `placement` is what the connection's `Net::placement` (or a flow
/// hint) says serves it.
///
/// [`cpus_near`]: flowlane_numa_sched::cpus_near
///
/// # Errors
/// The topology cannot be read, or the kernel refuses the affinity.
pub fn pin_current_thread_near(
    placement: &flowlane_app::Placement,
    near: flowlane_numa_sched::Near,
    avoid: &[u32],
) -> std::io::Result<Vec<u32>> {
    let topo = flowlane_numa_sched::Topology::from_system()
        .map_err(|e| std::io::Error::other(format!("reading this machine's topology: {e}")))?;
    let allowed = allowed_cpus();
    let wanted = flowlane_numa_sched::cpus_near(&topo, placement.cpu, placement.node, near, avoid);
    let mut cpus: Vec<u32> = wanted
        .iter()
        .copied()
        .filter(|c| allowed.contains(c))
        .collect();
    if cpus.is_empty() {
        // None of them is ours to use: the flow's node as this process
        // may use it, else wherever it may run.
        cpus = topo
            .cpus_on_node(placement.node)
            .map(|c| c.os_index)
            .filter(|c| allowed.contains(c))
            .collect();
        if cpus.is_empty() {
            cpus = allowed;
        }
    }
    pin_current_thread(&cpus)?;
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_application_thread_goes_next_to_its_flow() {
        let allowed = allowed_cpus();
        let worker = allowed[0];
        let placement = flowlane_app::Placement {
            queue: 0,
            cpu: Some(worker),
            node: 0,
        };
        let pinned = std::thread::spawn(move || {
            let cpus =
                pin_current_thread_near(&placement, flowlane_numa_sched::Near::Node, &[]).unwrap();
            (cpus, allowed_cpus())
        })
        .join()
        .unwrap();
        let (cpus, now) = pinned;
        assert_eq!(cpus, now, "the thread runs where it was pinned");
        if allowed.len() > 1 {
            assert!(!cpus.contains(&worker), "off the worker's CPU: {cpus:?}");
        }
        assert!(!cpus.is_empty());
    }
}
