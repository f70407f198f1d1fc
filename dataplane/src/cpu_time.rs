//! CPU time of the data path's threads, from the scheduler's own accounting
//! (`schedstat`: nanoseconds on the CPU), for the per-worker cost figures the
//! services and flowlane-ttcp report.

/// CPU time (ns, `/proc/self/task/<tid>/schedstat`) of this process's worker
/// thread for `queue` (named `flowlane-q<queue>`), while it runs.
pub fn worker_cpu_ns(queue: u32) -> Option<u64> {
    let want = format!("flowlane-q{queue}");
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let p = t.ok()?.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim() == want {
            let s = std::fs::read_to_string(p.join("schedstat")).ok()?;
            return s.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

/// CPU time (ns, `/proc/thread-self/schedstat`) of the calling thread.
pub fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
