//! The bed's segmentation offloads: whether the kernels on its two ends
//! hand the veth GSO super-frames (their default: a 64 KiB skb crosses the
//! pair as one) or wire-size frames, as a NIC without TSO puts them on a
//! wire.

use anyhow::Result;

use crate::netns;
use crate::state::BedState;

/// What the bed's kernels send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frames {
    /// GSO/TSO super-frames (the kernel's and the bed's default).
    Gso,
    /// Wire-size frames as from a NIC without TSO: TSO and GSO off on the
    /// devices. TCP still builds GSO skbs, and the kernel segments them in
    /// software just before the device, as it does for such a NIC; TX
    /// checksum offload stays (NICs have it). The fair baseline for a
    /// sender that writes every frame itself, as flowlane does.
    Segmented,
    /// One segment per skb from TCP itself (`gso_max_segs 1`, TSO/GSO and
    /// flowlane's side's TX checksum offload off), so that tc sees every
    /// segment (link impairment). Not a baseline: TCP then sends segment
    /// by segment, some thirty times slower on this bed.
    WireSize,
}

/// Makes the kernels on both ends send `frames`. The peer's TX
/// checksumming stays off, as the bed made it.
pub fn set(bed: &BedState, frames: Frames) -> Result<()> {
    let (state, segs, local_features) = match frames {
        Frames::Gso => ("on", "65535", &["tx", "gso", "tso"][..]),
        Frames::Segmented => ("off", "65535", &["gso", "tso"][..]),
        Frames::WireSize => ("off", "1", &["tx", "gso", "tso"][..]),
    };
    for (ns, dev, features) in [
        (&bed.peer_netns, &bed.peer_if, &["gso", "tso"][..]),
        (&bed.netns, &bed.local_if, local_features),
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
