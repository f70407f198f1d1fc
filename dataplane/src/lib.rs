//! flowlane's data path: one AF_XDP socket per NIC receive queue, packet
//! memory (UMEM) per NUMA node, one pinned run-to-completion worker per
//! queue, and the packet codec.
//!
//! This is the only crate of flowlane that touches AF_XDP rings and raw
//! memory; `unsafe` lives in its ring/UMEM modules ([`xsk`], [`worker`]),
//! its raw system calls (`sys`) and the CPU's prefetch intrinsic
//! (`prefetch`) only, each block with a `SAFETY:` comment.
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
mod checksum_watch;
pub mod control_socket;
pub mod counters;
pub mod cpu_time;
pub mod ephemeral;
mod frame_batch;
pub mod handoff;
mod heap_trim;
pub mod iface;
mod iface_watch;
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
pub mod stoppable_thread;
mod sys;
pub mod tcp_handler;
pub mod tcp_service;
pub mod umem;
mod wake;
pub mod worker;
pub mod xsk;
pub mod zoned_addr;

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
///
/// Each message carries its cause (the OS error, libbpf's, the model's)
/// in its own text, and no error is any variant's
/// [`std::error::Error::source`]: a program that prints the chain
/// (`{:#}`) says each cause once, as one that prints the message does.
#[derive(Debug)]
pub enum Error {
    /// Setting up the data path failed.
    Setup(String),
    /// The NIC's RSS settings (key, indirection table) are not usable.
    Rss(flowlane_numa_sched::Error),
    /// No placement of the workers could be planned.
    Placement(flowlane_numa_sched::Error),
    /// The application's setup of a queue (the factory given to
    /// [`Dataplane::start`]) failed.
    Handler {
        /// The queue whose setup failed.
        queue: u32,
        /// What the factory returned.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The steering program (XDP) or one of its maps refused an operation.
    Steering {
        /// What flowlane was doing.
        what: String,
        /// libbpf's error.
        source: flowlane_ebpf::Error,
    },
    /// Moving an RSS bucket between queues failed once under way.
    Move(String),
    /// A move refused before anything moved: buckets cannot move in the
    /// service, the bucket or queue is out of range, the bucket is there
    /// already, or a queue it would move between failed. Not a move the
    /// service made: not counted as one.
    MoveRefused(String),
    /// A system call failed.
    Io {
        /// What flowlane was doing.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Setup(m) | Error::Move(m) | Error::MoveRefused(m) => f.write_str(m),
            Error::Rss(e) => write!(f, "bad RSS settings: {e}"),
            Error::Placement(e) => write!(f, "planning where the workers run: {e}"),
            Error::Handler { queue, source } => write!(f, "queue {queue}: {source}"),
            Error::Steering { what, source } => write!(f, "{what}: {source}"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

/// No [`std::error::Error::source`]: the message says the cause (see
/// [`Error`]).
impl std::error::Error for Error {}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::Error;

    /// `e` as `flowlane` prints an error: its message, then each cause of
    /// its chain (`{:#}` of the `anyhow::Error` it becomes).
    fn said(e: &(dyn std::error::Error + 'static)) -> String {
        let mut line = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            line.push_str(&format!(": {c}"));
            cause = c.source();
        }
        line
    }

    /// Every variant with a cause says it once, printed alone or with its
    /// chain (a socket reset by the service said the OS error twice).
    #[test]
    fn each_cause_is_said_once() {
        let reset = || std::io::Error::from_raw_os_error(libc::ECONNRESET);
        let os = reset().to_string();
        let io = Error::Io {
            what: "talking to the service on /run/x.sock".into(),
            source: reset(),
        };
        assert_eq!(
            said(&io),
            format!("talking to the service on /run/x.sock: {os}")
        );
        assert_eq!(
            io.to_string(),
            said(&io),
            "the message alone says the cause too"
        );
        let handler = Error::Handler {
            queue: 3,
            source: "no port".into(),
        };
        assert_eq!(said(&handler), "queue 3: no port");
        let model = flowlane_numa_sched::Error::TableSize { size: 3 };
        let m = model.to_string();
        for (e, prefix) in [
            (Error::Rss(model.clone()), "bad RSS settings"),
            (Error::Placement(model), "planning where the workers run"),
        ] {
            assert_eq!(said(&e), format!("{prefix}: {m}"));
        }
        assert_eq!(said(&io).matches(&os).count(), 1);
    }
}
