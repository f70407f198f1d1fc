//! Where flows land: the RSS state (the NIC's key and indirection table, a
//! test bed's emulated NIC or explicit flags, combined with the placement
//! every data-path service pins its workers by) that `flowlane hint` and
//! `flowlane udp-ping` predict with.

use std::net::IpAddr;

use anyhow::Result;
use flowlane_dataplane::placement::machine_placement;
use flowlane_numa_sched::nic::RssNic;
use flowlane_numa_sched::{IndirectionTable, RssHashConfig, RssKey, RssState};

/// The RSS state (key, table, placement) `hint` and `udp-ping` predict with,
/// and the test bed's local addresses if there is one (IPv4, then IPv6).
pub fn rss_state(
    testbed: Option<&str>,
    key: Option<RssKey>,
    table: Option<Vec<u16>>,
    table_size: usize,
    queues: u16,
    nic_node: Option<u32>,
) -> Result<(RssState, Vec<IpAddr>)> {
    let (key, table, queues, local) = match testbed {
        Some(name) => {
            let bed = flowlane_testbed::load(name)?;
            let rss = bed.nic().rss()?;
            let table = rss.table.iter().map(|&q| q as u16).collect();
            (
                RssKey::new(rss.key)?,
                IndirectionTable::new(table)?,
                bed.queues as usize,
                vec![bed.local_v4.parse()?, bed.local_v6.parse()?],
            )
        }
        None => {
            let key = key.unwrap_or_else(RssKey::microsoft_default);
            let table = match table {
                Some(t) => IndirectionTable::new(t)?,
                None => IndirectionTable::even(table_size, &(0..queues).collect::<Vec<_>>())?,
            };
            let n = table.entries().iter().max().map_or(1, |&q| q as usize + 1);
            (key, table, n, Vec::new())
        }
    };
    let placed = machine_placement(nic_node, queues, None)?;
    // The emulated NIC hashes ports for every protocol (as does a NIC
    // configured with `ethtool -N <if> rx-flow-hash udp4 sdfn`).
    let state = RssState::new(&key, table, RssHashConfig::four_tuple(), &placed.plan)?;
    Ok((state, local))
}
