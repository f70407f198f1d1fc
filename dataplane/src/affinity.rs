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
