//! The bed's emulated NIC as the table a service moving buckets writes
//! (the data path's [`RssTableWriter`]), opened by map id inside the bed's
//! namespace: `--bed` passes the id as `--rss-table-map`
//! ([`crate::reexec::bed_flags`]). The example services and
//! flowlane-ttcp's receiver share it.

use std::sync::Arc;

use anyhow::Result;
use flowlane_dataplane::{NicWriter, RssTableWriter};

use crate::emulated_nic::RssTableMap;

/// The writer of the emulated NIC's table map `map_id`.
pub fn table_writer(map_id: u32) -> Result<NicWriter> {
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
