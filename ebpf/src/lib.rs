//! flowlane's BPF programs and typed access to their maps.
//!
//! - [`steer`]: the XDP program on flowlane's interface that hands flowlane's
//!   ports to the AF_XDP socket of each receive queue and passes everything
//!   else to the kernel.
//! - [`rss_emu`]: the tc egress program that makes the far side of a veth pair
//!   behave like an RSS NIC (Toeplitz hash + indirection table) for the test
//!   bed.
//! - [`impair`]: loss, duplication, corruption and reordering for the test
//!   bed, where the kernel has no `sch_netem`.
//! - [`delay_line`]: redirects through a user-space delay line (WAN delay
//!   for the test bed, where the kernel has no delaying qdisc).
//! - [`trafficgen`]: an XDP live-frames packet generator for benchmarks.
#![deny(missing_docs)]

pub mod delay_line;
pub mod impair;
pub mod rss_emu;
pub mod steer;
pub mod trafficgen;

mod skel {
    #![allow(clippy::all, missing_docs, unused_imports, non_camel_case_types)]
    pub mod xdp_steer {
        include!(concat!(env!("OUT_DIR"), "/xdp_steer.skel.rs"));
    }
    pub mod rss_emu {
        include!(concat!(env!("OUT_DIR"), "/rss_emu.skel.rs"));
    }
    pub mod delay_line {
        include!(concat!(env!("OUT_DIR"), "/delay_line.skel.rs"));
    }
    pub mod impair {
        include!(concat!(env!("OUT_DIR"), "/impair.skel.rs"));
    }
    pub mod trafficgen {
        include!(concat!(env!("OUT_DIR"), "/trafficgen.skel.rs"));
    }
}

/// Limits shared with the BPF programs (`src/bpf/flowlane_common.h`).
pub mod limits {
    /// Largest number of receive queues flowlane steers.
    pub const MAX_QUEUES: u32 = 256;
    /// Largest RSS indirection table the emulated NIC supports.
    pub const MAX_TABLE: u32 = 2048;
    /// Longest Toeplitz key the emulated NIC accepts.
    pub const MAX_KEY: usize = 52;
}

/// Errors from loading, attaching or configuring flowlane's BPF programs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// libbpf refused an operation.
    #[error("{what}: {source}")]
    Bpf {
        /// What flowlane was doing.
        what: String,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// A configuration value is out of range.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
        let what = what.into();
        move |source| Error::Bpf { what, source }
    }
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Sums a per-CPU `u64` counter at `index`.
pub(crate) fn sum_percpu_u64(map: &libbpf_rs::MapHandle, index: u32) -> Result<u64> {
    use libbpf_rs::MapCore;
    let vals = map
        .lookup_percpu(&index.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .map_err(Error::bpf("reading per-CPU counters"))?
        .unwrap_or_default();
    Ok(vals
        .iter()
        .filter(|v| v.len() >= 8)
        .map(|v| u64::from_ne_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]))
        .sum())
}
