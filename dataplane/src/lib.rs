//! flowlane's data path: one AF_XDP socket per NIC receive queue, packet
//! memory (UMEM) per NUMA node, one pinned run-to-completion worker per
//! queue, and the packet codec.
//!
//! This is the only crate of flowlane that touches AF_XDP rings and raw
//! memory; `unsafe` lives in its ring/UMEM modules ([`xsk`], [`umem`],
//! [`worker`]) only, each block with a `SAFETY:` comment.
//!
//! A TCP service starts through [`TcpService::start`] (an example in
//! [`tcp_handler`]). A handler that panics fails its queue closed (its
//! connections reset, and every new one the NIC steers there) while the
//! other queues serve on; [`TcpService::failed`] and [`Dataplane::check`]
//! tell the application.
#![deny(missing_docs)]
// unsafe_code is denied workspace-wide; xsk, worker (AF_XDP rings and UMEM
// frames), sys (the raw system calls) and prefetch (the CPU's prefetch
// intrinsic) allow it, per module.

pub mod affinity;
pub mod auto_rebalance;
pub mod bucket_counters;
pub mod control_socket;
pub mod counters;
pub mod cpu_time;
pub mod ephemeral;
mod frame_batch;
pub mod handoff;
pub mod iface;
pub mod kernel_neighbors;
pub mod neighbor;
pub mod placement;
mod prefetch;
pub mod privileges;
pub mod rtnetlink;
pub mod runtime;
#[cfg(feature = "cli")]
pub mod service_args;
pub mod service_control;
mod sightings;
mod sys;
pub mod tcp_handler;
pub mod tcp_service;
pub mod umem;
mod wake;
pub mod worker;
pub mod xsk;

pub use bucket_counters::{BucketCounters, BucketSnapshot};
pub use counters::{QueueCounters, QueueCountersSnapshot};
pub use cpu_time::{app_thread_cpu_ns, process_cpu_ns, thread_cpu_ns, worker_cpu_ns};
pub use flowlane_ebpf::steer::{Proto, SteerStats};
pub use handoff::{MoveReport, NicWriter, RssTableWriter};
pub use iface::{InterfaceInfo, InterfaceStats};
pub use runtime::{Dataplane, DataplaneConfig, QueueAssignment};
pub use sys::{ethtool_ioctl, EthtoolCmd};
pub use tcp_handler::{TcpConfig, TcpCounters, TcpCountersSnapshot, TcpHandler};
pub use tcp_service::{ServiceHint, TcpService, TcpServiceConfig};
pub use worker::{QueueHandler, QueueInfo, RxAction, RxProgress, SpillPass, TxBatch};
pub use xsk::BindMode;

/// Errors of the data path. Messages say what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Setting up the data path failed.
    #[error("{0}")]
    Setup(String),
    /// The NIC's RSS settings (key, indirection table) are not usable.
    #[error("bad RSS settings: {0}")]
    Rss(#[source] flowlane_numa_sched::Error),
    /// No placement of the workers could be planned.
    #[error("planning where the workers run: {0}")]
    Placement(#[source] flowlane_numa_sched::Error),
    /// The application's setup of a queue (the factory given to
    /// [`Dataplane::start`]) failed.
    #[error("queue {queue}: {source}")]
    Handler {
        /// The queue whose setup failed.
        queue: u32,
        /// What the factory returned.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The steering program (XDP) or one of its maps refused an operation.
    #[error("{what}: {source}")]
    Steering {
        /// What flowlane was doing.
        what: String,
        /// libbpf's error.
        #[source]
        source: flowlane_ebpf::Error,
    },
    /// Moving an RSS bucket between queues failed once under way.
    #[error("{0}")]
    Move(String),
    /// A move refused before anything moved: buckets cannot move in the
    /// service, the bucket or queue is out of range, or the bucket is there
    /// already. Not a move the service made: not counted as one.
    #[error("{0}")]
    MoveRefused(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What flowlane was doing.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;
