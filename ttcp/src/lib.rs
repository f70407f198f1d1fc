//! flowlane-ttcp: NTttcp-style throughput, latency and overlap measurement.
//!
//! A receiver (`-r`) and a sender (`-s`) agree on a test over a TCP side channel
//! ([`sync`]), run warm-up, measured window and cool-down, and report throughput
//! with what it cost ([`report`]: CPU, interrupts, packets per interrupt, cycles
//! per byte, % of one CPU per Gbit/s, retransmits) from `/proc` counters
//! ([`procfs`], read at the window edges into [`snapshot`]s). The data path is
//! a [`backend::Backend`]: kernel sockets ([`kernel`], flowlane's kernel-socket
//! backend) or flowlane's TCP on the AF_XDP data path ([`flowlane`]); both run
//! the same handlers ([`handlers`]), on their network cores or on application
//! threads ([`cores`], `--mode queue-pair`). [`run`] runs one side of one
//! test; [`matrix`] runs many on a test bed.
//!
//! Modules depend on each other in one direction only (lower first):
//!
//! ```text
//! sync, procfs, iface                 (leaves)
//! plan        -> sync
//! backend     -> plan, procfs
//! handlers    -> backend, plan, sync
//! cores       -> backend, handlers
//! snapshot    -> procfs, backend
//! report      -> snapshot, procfs, backend, sync
//! kernel      -> backend, cores, handlers, plan
//! flowlane    -> backend, cores, handlers, plan, iface, procfs
//! cli         -> plan, sync
//! run         -> cli, plan, backend, kernel, flowlane, iface, procfs,
//!                snapshot, report, sync
//! matrix      -> cli  (results <- tables, plots; delay_line and cell run
//!                children with flowlane_testbed::child; mod -> all of them)
//! ```

#![forbid(unsafe_code)]

pub mod backend;
pub mod cli;
pub mod cores;
pub mod flowlane;
pub mod handlers;
pub mod iface;
pub mod kernel;
pub mod matrix;
pub mod plan;
pub mod procfs;
pub mod report;
pub mod run;
pub mod snapshot;
pub mod sync;
