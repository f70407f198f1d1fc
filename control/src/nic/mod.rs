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
