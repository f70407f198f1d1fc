//! Programming a real NIC's RSS. The interface ([`RssNic`]) is
//! `flowlane_numa_sched::nic`'s, shared with the test bed's emulated NIC
//! (`flowlane_testbed::EmulatedNic`), so that everything above it is the code
//! that would run on hardware.
//!
//! Modules, lower first: `ioctl_layout` and `genl_rss` (pure: the ioctl
//! structs' bytes, the ethtool netlink RSS messages), `error` (pure: which
//! mechanism, when to fall back, errors in the user's terms) → `ioctl`,
//! `netlink` (the system calls) → `ethtool` ([`EthtoolNic`]).
//!
//! [`RssNic`]: flowlane_numa_sched::nic::RssNic
//! [`EthtoolNic`]: ethtool::EthtoolNic

pub(crate) mod caps;
pub(crate) mod error;
pub(crate) mod ethtool;
mod genl_caps;
mod genl_rss;
mod ioctl;
mod ioctl_layout;
mod netlink;
pub(crate) mod recording;

/// The messages of a reply recorded in `testdata/` (each message's
/// generic-netlink payload, header and attributes, in hex; a blank line
/// between messages), as bytes.
#[cfg(test)]
pub(crate) fn recorded_messages(hex: &str) -> Vec<Vec<u8>> {
    hex.split("\n\n")
        .map(|m| m.split_whitespace().collect::<String>())
        .filter(|m| !m.is_empty())
        .map(|m| {
            (0..m.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&m[i..i + 2], 16).expect("hex"))
                .collect()
        })
        .collect()
}
