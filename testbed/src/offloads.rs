//! The bed's segmentation offloads: whether the kernels on its two ends
//! hand the veth GSO super-frames (their default: a 64 KiB skb crosses the
//! pair as one) or wire-size frames, one segment per skb, as a NIC without
//! TSO puts them on a wire.

use anyhow::Result;

use crate::netns;
use crate::state::BedState;

/// What the bed's kernels send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frames {
    /// GSO/TSO super-frames (the kernel's and the bed's default).
    Gso,
    /// One segment per skb: TSO and GSO off, `gso_max_segs 1`.
    WireSize,
}

/// Makes the kernels on both ends send `frames`. TCP always builds GSO
/// skbs (a device's `gso off` only moves the segmentation after tc), so
/// wire-size frames cap the segments per skb at one (`gso_max_segs`);
/// TSO/GSO and flowlane's side's TX checksum offload are turned off too.
/// The peer's TX checksumming stays off, as the bed made it.
pub fn set(bed: &BedState, frames: Frames) -> Result<()> {
    let (state, segs) = match frames {
        Frames::Gso => ("on", "65535"),
        Frames::WireSize => ("off", "1"),
    };
    for (ns, dev, features) in [
        (&bed.peer_netns, &bed.peer_if, &["gso", "tso"][..]),
        (&bed.netns, &bed.local_if, &["tx", "gso", "tso"][..]),
    ] {
        let mut args = vec!["netns", "exec", ns.as_str(), "ethtool", "-K", dev.as_str()];
        for f in features {
            args.extend([*f, state]);
        }
        netns::run("ip", &args)?;
        netns::ip(&["-n", ns, "link", "set", "dev", dev, "gso_max_segs", segs])?;
    }
    Ok(())
}
