//! The `kernel-wire` backend's offloads: the bed's kernels segment in
//! software for the length of its cells, and get their offloads back after
//! each; a failure to give them back is an error (the cells after it would
//! run without them, labelled as with them).

use anyhow::{Context, Result};

use flowlane_testbed::offloads::{self, Frames};
use flowlane_testbed::BedState;

/// The backend name of kernel TCP sending wire-size frames: the bed's
/// kernels with TSO and GSO off for the cell, so that they segment in
/// software before the device, as for a NIC without TSO
/// ([`Frames::Segmented`]; flowlane sends wire-size frames always). The
/// fair baseline for the sender; `kernel` is the kernel with its offloads.
pub(super) const KERNEL_WIRE: &str = "kernel-wire";

/// The bed's kernels segmenting in software until
/// [`WireSizeFrames::give_back`] (or the guard's drop, on a panic).
pub(super) struct WireSizeFrames<'a>(Option<&'a BedState>);

impl<'a> WireSizeFrames<'a> {
    /// Turns the bed's offloads off. The guard comes back also when that
    /// failed (half-way, maybe), so that they are given back all the same.
    pub(super) fn off(bed: &'a BedState) -> (Self, Result<()>) {
        let r = offloads::set(bed, Frames::Segmented).context("turning the bed's offloads off");
        (WireSizeFrames(Some(bed)), r)
    }

    /// Gives the bed its offloads back.
    pub(super) fn give_back(mut self) -> Result<()> {
        match self.0.take() {
            Some(bed) => offloads::set(bed, Frames::Gso).context(
                "giving the bed its offloads back (the cells after this one would run without them)",
            ),
            None => Ok(()),
        }
    }
}

impl Drop for WireSizeFrames<'_> {
    fn drop(&mut self) {
        // Only on a panic: the cell gives them back itself and reports how
        // that went.
        if let Some(bed) = self.0.take() {
            let _ = offloads::set(bed, Frames::Gso);
        }
    }
}
