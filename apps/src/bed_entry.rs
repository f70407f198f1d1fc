//! How a data-path service starts, before it touches the data path:
//! privileges first (a user who is not root hears exactly that, not a
//! complaint about a bed or a namespace), then, with `--bed NAME`,
//! re-execution inside the bed's namespace ([`flowlane_testbed::reexec_in_bed`]);
//! the process that serves warns about a listening port inside flowlane's
//! range for outgoing connections.

use std::sync::Arc;

use anyhow::Result;
use flowlane_dataplane::privileges::require_root;
use flowlane_dataplane::service_args::{ephemeral_port_warning, DataPathArgs};
use flowlane_dataplane::{NicWriter, RssTableWriter};
use flowlane_testbed::emulated_nic::RssTableMap;

/// Checks privileges for `what` (the command, e.g. `flowlane udp-echo`);
/// with `--bed` replaces this process by the same command inside the bed
/// (returns only on failure); otherwise prints one warning line per
/// `listen` port inside the outgoing range and returns, for the caller to
/// serve here.
pub fn enter(what: &str, data_path: &DataPathArgs, listen: &[u16]) -> Result<()> {
    require_root(what)?;
    if let Some(bed) = &data_path.bed {
        return Err(flowlane_testbed::reexec_in_bed(bed));
    }
    for w in listen.iter().filter_map(|&p| ephemeral_port_warning(p)) {
        eprintln!("{what}: {w}");
    }
    Ok(())
}

/// The test bed's emulated NIC as the table a service moving buckets
/// writes, opened by map id inside the bed's namespace (`--bed` passes the
/// id as `--rss-table-map`).
pub fn bed_nic_writer(map_id: u32) -> Result<NicWriter> {
    let map = RssTableMap::open_by_id(map_id)?;
    Ok(NicWriter(Arc::new(BedTable(map))))
}

/// [`RssTableMap`] as the data path's [`RssTableWriter`].
struct BedTable(RssTableMap);

impl RssTableWriter for BedTable {
    fn set_entry(&self, bucket: u16, queue: u32) -> std::result::Result<(), String> {
        self.0
            .set(u32::from(bucket), queue)
            .map_err(|e| e.to_string())
    }
}
