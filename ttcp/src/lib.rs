//! flowlane-ttcp: NTttcp-style throughput, latency and overlap measurement.
//!
//! A receiver (`-r`) and a sender (`-s`) agree on a test over a TCP side channel
//! ([`sync`]), run warm-up, measured window and cool-down, and report throughput
//! with what it cost ([`report`]: CPU, interrupts, packets per interrupt, cycles
//! per byte, % of one CPU per Gbit/s, retransmits) from `/proc` counters
//! ([`procfs`], read at the window edges into [`snapshot`]s). The data path is
//! a [`backend::Backend`]: kernel sockets through mio ([`kernel`]) or
//! flowlane's TCP on the AF_XDP data path ([`flowlane`]). [`run`] runs one
//! side of one test; [`matrix`] runs many on a test bed.
//!
//! Modules depend on each other in one direction only (lower first):
//!
//! ```text
//! sync, procfs, iface                 (leaves)
//! plan        -> sync
//! backend     -> plan
//! snapshot    -> procfs, backend
//! report      -> snapshot, procfs, backend, sync
//! kernel      -> backend, plan, sync
//! flowlane    -> backend, plan, iface, sync
//! cli         -> plan, sync
//! run         -> cli, plan, backend, kernel, flowlane, iface, procfs,
//!                snapshot, report, sync
//! matrix      -> cli  (results <- tables, plots; delay_line and cell run
//!                children with flowlane_testbed::child; mod -> all of them)
//! ```

#![forbid(unsafe_code)]

pub mod backend;
pub mod cli;
pub mod flowlane;
pub mod iface;
pub mod kernel;
pub mod matrix;
pub mod plan;
pub mod procfs;
pub mod report;
pub mod run;
pub mod snapshot;
pub mod sync;
