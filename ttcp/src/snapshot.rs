//! The counters at one instant: what a run reads at the edges of its
//! measured window (the NTttcp table, `report`, is computed from
//! two of these).

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::backend::{DataThreads, TcpReader};
use crate::procfs::{CpuTimes, IfCounters, IrqSource, ProcCpu, ProcFs, TcpSnmp, ThreadsCpu};

/// Process CPU time from `getrusage(RUSAGE_SELF)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rusage {
    /// User time.
    pub user: Duration,
    /// System time.
    pub system: Duration,
}

impl Rusage {
    /// This process now.
    pub fn now() -> Result<Rusage> {
        let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)?;
        let d = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
        };
        Ok(Rusage {
            user: d(r.user_time()),
            system: d(r.system_time()),
        })
    }
}

/// All counters at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When (taken just before the reads).
    pub at: Instant,
    /// `/proc/stat` aggregate.
    pub cpu: CpuTimes,
    /// Online CPUs.
    pub ncpus: u32,
    /// Interrupt counter of the interface's source.
    pub interrupts: u64,
    /// Interface counters.
    pub ifc: IfCounters,
    /// TCP counters (network namespace).
    pub tcp: TcpSnmp,
    /// The data path's own TCP counters (flowlane's TCP), where it has them.
    pub data_path_tcp: Option<TcpSnmp>,
    /// `/proc/self/stat`.
    pub proc_stat: ProcCpu,
    /// `getrusage`.
    pub rusage: Rusage,
    /// The backend's data threads (`/proc/self/task/<tid>/stat`).
    pub data_threads: Option<ThreadsCpu>,
}

/// The interface and the interrupt source a run reports on.
#[derive(Clone)]
pub struct Probe {
    /// The counters' tree.
    pub fs: ProcFs,
    /// Interface carrying the traffic.
    pub iface: String,
    /// Where its interrupts are counted.
    pub irq: IrqSource,
    /// The backend's data threads, whose CPU is reported apart.
    pub data_threads: Option<DataThreads>,
    /// The data path's own TCP counters (flowlane's TCP), where it has them.
    pub data_path_tcp: Option<TcpReader>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("fs", &self.fs)
            .field("iface", &self.iface)
            .field("irq", &self.irq)
            .field("data_threads", &self.data_threads)
            .field("data_path_tcp", &self.data_path_tcp.is_some())
            .finish()
    }
}

impl Probe {
    /// Reads every counter now.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let at = Instant::now();
        let rusage = Rusage::now()?;
        let stat = self.fs.stat()?;
        Ok(Snapshot {
            at,
            cpu: stat.all,
            ncpus: stat.ncpus,
            interrupts: self.fs.interrupts(&self.iface, self.irq)?,
            ifc: self.fs.if_counters(&self.iface)?,
            tcp: self.fs.tcp_snmp()?,
            data_path_tcp: self.data_path_tcp.as_ref().and_then(|r| r()),
            proc_stat: self.fs.self_cpu()?,
            rusage,
            data_threads: match self.data_threads {
                Some(d) => Some(self.fs.threads_cpu(d.prefixes)?),
                None => None,
            },
        })
    }
}
