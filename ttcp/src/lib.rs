//! flowlane-ttcp: NTttcp-style throughput, latency and overlap measurement.
//!
//! A receiver (`-r`) and a sender (`-s`) agree on a test over a TCP side channel
//! ([`sync`]), run warm-up, measured window and cool-down, and report throughput
//! with what it cost ([`report`]: CPU, interrupts, packets per interrupt, cycles
//! per byte, % of one CPU per Gbit/s, retransmits) from `/proc` counters
//! ([`procfs`]). The data path is a [`backend::Backend`]: kernel sockets through
//! mio ([`kernel`]) or flowlane's TCP on the AF_XDP data path ([`flowlane`]).

pub mod backend;
pub mod cli;
pub mod delay_line;
pub mod flowlane;
pub mod kernel;
pub mod matrix;
pub mod procfs;
pub mod report;
pub mod run;
pub mod sync;
