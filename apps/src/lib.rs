//! flowlane's example services and tools on the data path, written against
//! the application API (`flowlane-app`): what `flowlane <service>` runs.
//!
//! | module | command |
//! | --- | --- |
//! | [`tcp`] | `echo-server`, `http-server`, `bulk-sink`, `bulk-source` |
//! | [`udp_echo`] | `udp-echo` (and [`echo_process`], the same as a child in a bed) |
//! | [`udp_ping`] | `udp-ping` |
//! | [`bench_rx`] | `bench rx` |
//! | [`bench_handoff`] | `bench handoff` |
//! | [`bench_skew`] | `bench skew` |
//! | [`bench_synflood`] | `bench synflood` |
//! | [`demo`] | `demo` |
//!
//! [`service`] holds what every long-running service shares (signals,
//! reports), [`bed_entry`] how each starts (privileges, `--bed`), [`output`] standard output that a closed pipe cannot crash,
//! [`flow_rss`] the RSS state flows are predicted with, [`bed_guard`] the
//! bed of a demo or benchmark run, released on every way out (signals
//! included), [`bench_bed`] what the benchmarks share (the bed; for the
//! rebalancing ones the sink and the kernel peer),
//! [`syn_flood_bed`] what the SYN-flood benchmark runs beside flowlane (the
//! flood, the kernel echo server, the legitimate client).
#![forbid(unsafe_code)]

#[macro_use]
pub mod output;

pub mod bed_entry;
pub mod bed_guard;
pub mod bench_bed;
pub mod bench_handoff;
pub mod bench_rx;
pub mod bench_skew;
pub mod bench_synflood;
pub mod demo;
pub mod echo_process;
pub mod flow_rss;
pub mod service;
pub mod syn_flood_bed;
pub mod tcp;
pub mod udp_echo;
pub mod udp_ping;
