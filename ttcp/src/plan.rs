//! A validated run: what the command line asked for, in the form the
//! backends and the run take it (built by `cli::RunArgs::plan`).

use std::net::IpAddr;

use crate::sync::Params;

/// A validated run: threads with their pinning, the receiver address, the parameters.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `true` for the receiver.
    pub receiver: bool,
    /// One entry per thread: the CPU to pin it to.
    pub threads: Vec<Option<usize>>,
    /// Receiver address.
    pub addr: IpAddr,
    /// Sender connections per thread.
    pub conns_per_thread: usize,
    /// Agreed parameters.
    pub params: Params,
    /// `-N`: no control channel.
    pub no_sync: bool,
    /// Overlap mode computation per iteration (µs).
    pub overlap_us: u64,
    /// flowlane backend settings.
    pub flowlane: FlowlaneOptions,
}

impl Plan {
    /// Sender connections in all (`RunArgs::plan` checks that the
    /// product fits; saturated otherwise).
    pub fn connections(&self) -> usize {
        self.threads.len().saturating_mul(self.conns_per_thread)
    }

    /// `--congestion` (both backends run it), as the flag names it:
    /// `cubic`, `newreno`.
    pub fn congestion_name(&self) -> String {
        use clap::ValueEnum;
        self.flowlane
            .data_path
            .congestion
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string())
    }
}

/// Flags of the flowlane backend (from the command line).
#[derive(Debug, Clone, Default)]
pub struct FlowlaneOptions {
    /// Interface to serve (default: the one holding the receiver address).
    pub iface: Option<String>,
    /// The data path's flags (bed, queues, RSS, neighbours, busy polling).
    pub data_path: flowlane_dataplane::service_args::DataPathArgs,
    /// `--rebalance` and the control socket (receiver only).
    pub rebalance: flowlane_dataplane::service_args::RebalanceArgs,
    /// The control port (kernel socket; never steered to flowlane).
    pub control_port: u16,
}
