//! An XDP packet generator for benchmarks (`BPF_PROG_RUN` with live frames):
//! the kernel sends the same frame `repeat` times out of an interface, with
//! no socket and no qdisc on the way.

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::ProgramInput;

use crate::skel::trafficgen::{TrafficgenSkel, TrafficgenSkelBuilder};
use crate::{Error, Result};

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (include/uapi/linux/bpf.h).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// A loaded generator sending out of one interface.
pub struct Generator {
    // The skeleton borrows its object storage, which is leaked once per
    // generator: a benchmark makes one.
    skel: TrafficgenSkel<'static>,
    ifindex: u32,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("ifindex", &self.ifindex)
            .finish()
    }
}

impl Generator {
    /// Loads the generator to send out of `ifindex` (in the calling
    /// thread's network namespace).
    pub fn new(ifindex: u32) -> Result<Generator> {
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = TrafficgenSkelBuilder::default()
            .open(storage)
            .map_err(Error::bpf("opening the traffic generator"))?;
        open.maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| {
                Error::Invalid("the traffic generator has no read-only data section".into())
            })?
            .target_ifindex = ifindex;
        let skel = open
            .load()
            .map_err(Error::bpf("loading the traffic generator"))?;
        Ok(Generator { skel, ifindex })
    }

    /// Sends `frame` `repeat` times; returns when the kernel is done.
    pub fn send(&self, frame: &[u8], repeat: u32) -> Result<()> {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
        // rx_queue_index, egress_ifindex (u32 each).
        // The kernel requires data = 0 and data_end = the frame length.
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        ctx[12..16].copy_from_slice(&self.ifindex.to_ne_bytes());
        let prog = &self.skel.progs.flowlane_gen;
        let input = ProgramInput {
            context_in: Some(&mut ctx),
            data_in: Some(frame),
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            repeat,
            ..ProgramInput::default()
        };
        prog.test_run(input)
            .map_err(Error::bpf("running the traffic generator"))?;
        Ok(())
    }
}
