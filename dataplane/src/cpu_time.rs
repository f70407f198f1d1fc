//! CPU time of the data path's threads, from the scheduler's own accounting
//! (`schedstat`: nanoseconds on the CPU), for the per-worker cost figures the
//! services and flowlane-ttcp report.

use std::path::Path;

/// The CPU time (ns) a `schedstat` file (`/proc/<pid>/task/<tid>/schedstat`)
/// names: its first field, the task's time on the CPU.
pub fn schedstat_ns(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time (ns, `/proc/self/task/<tid>/schedstat`) of this process's worker
/// thread for `queue` (named `flowlane-q<queue>`), while it runs.
pub fn worker_cpu_ns(queue: u32) -> Option<u64> {
    named_thread_cpu_ns(&format!("flowlane-q{queue}"))
}

/// CPU time (ns, `/proc/self/task/<tid>/schedstat`) of this process's
/// thread `tid` (a queue-pair application thread, by the id it recorded as
/// it began: `flowlane_qp::QueuePairs::app_thread_tids`), while it runs:
/// one read, however many threads there are.
pub fn app_thread_cpu_ns(tid: i32) -> Option<u64> {
    schedstat_ns(Path::new(&format!("/proc/self/task/{tid}/schedstat")))
}

/// CPU time (ns) of this process's thread named `want`, while it runs.
fn named_thread_cpu_ns(want: &str) -> Option<u64> {
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let p = t.ok()?.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim() == want {
            return schedstat_ns(&p.join("schedstat"));
        }
    }
    None
}

/// CPU time (ns, `/proc/thread-self/schedstat`) of the calling thread.
pub fn thread_cpu_ns() -> u64 {
    schedstat_ns(Path::new("/proc/thread-self/schedstat")).unwrap_or(0)
}

/// CPU time (ns) of every thread of this process so far (those that ended
/// included only while they run: read it before threads exit).
pub fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| schedstat_ns(&t.ok()?.path().join("schedstat")))
        .sum()
}
