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
