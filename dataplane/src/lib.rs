//! flowlane's data path: one AF_XDP socket per NIC receive queue, packet
//! memory (UMEM) per NUMA node, one pinned run-to-completion worker per
//! queue, and the packet codec.
//!
//! This is the only crate of flowlane that touches AF_XDP rings and raw
//! memory; `unsafe` lives in its ring/UMEM modules ([`xsk`], [`umem`],
//! [`worker`]) and the raw packet socket ([`packet_socket`]) only, each block
//! with a `SAFETY:` comment.
#![deny(missing_docs)]

pub mod affinity;
pub mod bed;
pub mod counters;
pub mod ephemeral;
pub mod iface;
pub mod neighbor;
pub mod packet_socket;
pub mod runtime;
pub mod tcp_handler;
pub mod umem;
/// The packet codec, moved to `flowlane-wire`; this re-export is transitional.
pub use flowlane_wire as wire;
pub mod worker;
pub mod xsk;

pub use counters::{QueueCounters, QueueCountersSnapshot};
pub use flowlane_ebpf::steer::{Proto, SteerStats};
pub use iface::InterfaceInfo;
pub use runtime::{Dataplane, DataplaneConfig, QueueAssignment};
pub use tcp_handler::{ConnHandler, Net, TcpConfig, TcpCounters, TcpCountersSnapshot, TcpHandler};
pub use worker::{QueueHandler, QueueInfo, RxAction, TxBatch};
pub use xsk::BindMode;

/// Errors of the data path. Messages say what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Setting up the data path failed.
    #[error("{0}")]
    Setup(String),
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
