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

/// The name of the thread serving `queue`, `flowlane-q<queue>`: an AF_XDP
/// worker (one without a queue too) and a kernel-socket core alike
/// (`flowlane_kernel`, which names its cores so without depending on this
/// crate). Tools find the data path's threads by it: their CPU time, and
/// the processes that serve on a test bed (`flowlane_testbed::users`).
pub fn worker_thread_name(queue: u32) -> String {
    format!("{WORKER_THREAD_PREFIX}{queue}")
}

const WORKER_THREAD_PREFIX: &str = "flowlane-q";

/// Whether `comm` (a thread's name, as `/proc/.../comm` gives it, trailing
/// newline or not) is a worker's ([`worker_thread_name`]).
pub fn is_worker_thread_name(comm: &str) -> bool {
    comm.trim_end()
        .strip_prefix(WORKER_THREAD_PREFIX)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// CPU time (ns, `/proc/self/task/<tid>/schedstat`) of this process's worker
/// thread for `queue` ([`worker_thread_name`]), while it runs.
pub fn worker_cpu_ns(queue: u32) -> Option<u64> {
    named_thread_cpu_ns(&worker_thread_name(queue))
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
    schedstat_ns(&named_thread_schedstat(want)?)
}

/// The `schedstat` file of this process's worker thread for `queue`
/// ([`worker_thread_name`]), while it runs: read with [`schedstat_ns`] as
/// often as needed, without looking for the thread again.
pub fn worker_schedstat(queue: u32) -> Option<std::path::PathBuf> {
    named_thread_schedstat(&worker_thread_name(queue))
}

/// The `schedstat` file of this process's thread named `want`.
fn named_thread_schedstat(want: &str) -> Option<std::path::PathBuf> {
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let p = t.ok()?.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim() == want {
            return Some(p.join("schedstat"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_s_thread_name_is_told_from_others() {
        assert_eq!(worker_thread_name(12), "flowlane-q12");
        assert!(is_worker_thread_name("flowlane-q0\n"));
        assert!(is_worker_thread_name(&worker_thread_name(65535)));
        for other in [
            "flowlane-q",
            "flowlane-qx",
            "flowlane-app0",
            "flowlane",
            "iperf3",
        ] {
            assert!(!is_worker_thread_name(other), "{other}");
        }
    }
}
