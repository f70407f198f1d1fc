//! Programming a real NIC's RSS. The interface ([`RssNic`]) is
//! `flowlane_numa_sched::nic`'s, shared with the test bed's emulated NIC
//! (`flowlane_testbed::EmulatedNic`), so that everything above it is the code
//! that would run on hardware.
//!
//! [`RssNic`]: flowlane_numa_sched::nic::RssNic

pub(crate) mod ethtool;
