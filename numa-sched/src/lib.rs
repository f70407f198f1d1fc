//! flowlane's placement policy: snapshots in, plans out, no side effects.
//!
//! Given a snapshot of the machine ([`Topology`]) and of the NIC (its node, its queue IRQs,
//! its RSS key and table), this crate decides which CPU and NUMA node serves each receive
//! queue ([`plan_placement`]), which CPU takes each queue's interrupt ([`plan_irq_affinity`],
//! or [`plan_napi_threads`] on the veth test bed), how RSS buckets are spread over queues
//! ([`IndirectionTable`]), which buckets move when the load is skewed ([`Rebalancer`]), and
//! where any flow lands ([`RssState::hint`]) — computing the NIC's
//! Toeplitz hash bit for bit ([`Toeplitz`]). It reads no file and makes no syscall; the one
//! exception is the explicit hwloc loader (`Topology::from_system`, which also reads Linux's
//! NUMA node CPU lists to tell a node's CPUs from a memory-only node's, `from_xml_file`,
//! `from_synthetic_description`, cargo feature `hwloc`, on by default). The `control` crate
//! applies the plans.
//!
//! | module | concern |
//! | --- | --- |
//! | [`toeplitz`] | RSS key, Toeplitz hash (reference and table-driven), hash inputs and fields |
//! | [`indirection`] | indirection tables: even/weighted fills, diffs, minimal-move rebalancing |
//! | [`topology`] | the machine snapshot |
//! | [`placement`] | queue → CPU → node |
//! | [`irq`] | `/proc/interrupts` parsing, queue IRQ matching, IRQ and NAPI-thread affinity plans |
//! | [`rebalance`] | the rebalancing policy (RSS++-style): per-bucket and per-core loads → bucket moves, next period |
//! | [`hints`] | flow → (hash, bucket, queue, CPU, node); source-port choice |
//! | [`nic`] | the RSS-NIC interface (key, table, capabilities) that real and emulated NICs implement |
//! | [`nic_caps`] | what a NIC can do (channels, RSS, XDP, queues, NAPI, IRQs): the capability snapshot |
//! | [`plan_explain`] | which part of a plan the NIC, the kernel or flowlane carries out, and why ([`explain_on`]: with where placement puts the workers) |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod hints;
#[cfg(feature = "hwloc")]
mod hwloc;
pub mod indirection;
pub mod irq;
pub mod move_cost;
pub mod nic;
pub mod nic_caps;
pub mod placement;
pub mod plan_explain;
pub mod rebalance;
pub mod toeplitz;
pub mod topology;

pub use error::{Error, Result};
pub use hints::{FlowHint, RssState};
pub use indirection::{EntryChange, IndirectionTable};
pub use irq::{
    format_cpu_list, match_queue_irqs, napi_ids_in_queue_order, napi_thread_name,
    napi_thread_name_cut, napi_threads_by_name, parse_cpu_list, parse_napi_thread_name,
    parse_proc_interrupts, plan_irq_affinity, plan_napi_threads, CutNapiNames, IrqAffinityChange,
    IrqInfo, IrqPlan, NapiPlan, NapiThreadAffinity,
};
pub use move_cost::{MoveCost, MoveCostModel};
pub use nic::{RssCaps, RssNic, RssSettings, RssSettingsError};
pub use nic_caps::NicCaps;
pub use placement::{
    cpus_near, plan_placement, Near, PlacementNote, PlacementPlan, QueuePlacement,
};
pub use plan_explain::{explain, explain_on, DoneBy, PlanPart, Wanted};
pub use rebalance::{
    max_over_mean, BucketLoad, BucketMove, CoreLoad, LoadSnapshot, MoveReason, RebalanceConfig,
    RebalancePlan, Rebalancer, RoundOutcome,
};
pub use toeplitz::{
    hash_reference, FlowTuple, HashFields, HashInput, Protocol, RssHashConfig, RssKey, Toeplitz,
    MAX_INPUT_LEN,
};
pub use topology::{Cache, Core, NodeDistances, NumaNode, Topology};
