//! The execution models of a measurement: the handler set
//! ([`crate::handlers`]) runs on the backend's network cores (run to
//! completion), or on application threads that the cores feed through
//! queue pairs (`flowlane_qp`). Either way each thread that runs
//! handlers counts in its own [`WorkerCounters`], and the backend sums
//! them when the run ends.

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Result};
use flowlane_app::{Placement, Setup};
use flowlane_dataplane::service_args::ExecMode;
use flowlane_qp::{QueuePairConfig, QueuePairs};

use crate::backend::{Shared, ThreadStats};
use crate::handlers::{HandlerSetup, WorkerCounters};

/// What a backend calls on each of its cores at set-up.
pub type CoreSetup = Arc<dyn Fn(&mut dyn Setup) -> Result<(), String> + Send + Sync>;

/// The handler set, placed for one execution model.
pub struct Placed {
    /// For the backend's per-core set-up.
    pub core_setup: CoreSetup,
    /// The application threads (queue-pair mode): stop them after the
    /// backend.
    pub queue_pairs: Option<Arc<QueuePairs>>,
    counters: Arc<Mutex<Vec<Arc<WorkerCounters>>>>,
}

impl std::fmt::Debug for Placed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placed")
            .field("queue_pairs", &self.queue_pairs)
            .finish()
    }
}

impl Placed {
    /// Places `setup` on `cores` (run to completion), or on one
    /// application thread per core, unpinned, on its core's node
    /// (queue-pair mode).
    pub fn new(
        mode: ExecMode,
        cores: &[Placement],
        setup: impl HandlerSetup,
        shared: Arc<Shared>,
    ) -> Result<Placed> {
        let counters: Arc<Mutex<Vec<Arc<WorkerCounters>>>> = Arc::default();
        let c = counters.clone();
        let run = move |s: &mut dyn Setup| {
            let w = Arc::new(WorkerCounters::default());
            c.lock().unwrap_or_else(|e| e.into_inner()).push(w.clone());
            setup(s, &w, &shared)
        };
        match mode {
            ExecMode::Rtc => Ok(Placed {
                core_setup: Arc::new(run),
                queue_pairs: None,
                counters,
            }),
            ExecMode::QueuePair => {
                let qp = QueuePairs::start(QueuePairConfig::new(cores), run)
                    .map_err(|e| anyhow!("starting queue-pair mode: {e:#}"))?;
                let qp = Arc::new(qp);
                let q = qp.clone();
                Ok(Placed {
                    core_setup: Arc::new(move |core: &mut dyn Setup| {
                        q.setup_core(core).map_err(|e| e.to_string())
                    }),
                    queue_pairs: Some(qp),
                    counters,
                })
            }
        }
    }

    /// Stops the application threads (after the backend stopped) and sums
    /// what every thread counted.
    pub fn finish(self) -> Result<ThreadStats> {
        let stopped = self.queue_pairs.map_or(Ok(()), |q| q.stop());
        let mut total = ThreadStats::default();
        for w in self
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            total.merge(w.stats())?;
        }
        match stopped {
            Err(e) => Err(anyhow!("{e:#}")),
            Ok(()) => Ok(total),
        }
    }
}

/// The kernel backend's cores: one per `-m` thread, pinned where the
/// mapping names a CPU, on that CPU's NUMA node.
pub fn kernel_cores(threads: &[Option<usize>]) -> Result<Vec<Placement>> {
    let placed = flowlane_dataplane::placement::machine_placement(None, threads.len(), None)
        .map_err(|e| anyhow!("placing {} threads: {e}", threads.len()))?;
    Ok(threads
        .iter()
        .enumerate()
        .map(|(i, cpu)| {
            let cpu = cpu.map(|c| c as u32);
            let node = cpu
                .and_then(|c| {
                    placed
                        .node_cpus
                        .iter()
                        .find(|(_, cpus)| cpus.contains(&c))
                        .map(|(&n, _)| n)
                })
                .unwrap_or(placed.plan.queues[i].node);
            Placement {
                queue: i as u32,
                cpu,
                node,
            }
        })
        .collect())
}
