//! The test bed's emulated RSS NIC: the far side's tc program
//! (`flowlane_ebpf::rss_emu`), programmed through its pinned BPF maps behind
//! the same [`RssNic`] interface as a real NIC. The maps are pinned in the
//! root namespace's bpffs: use it from there.

use std::path::PathBuf;

use anyhow::{Context, Result};
/// The emulated NIC's table opened by map id, from inside the bed.
pub use flowlane_ebpf::rss_emu::RssTableMap;
use flowlane_ebpf::rss_emu::{RssEmuConfig, RssEmuMaps};
use flowlane_numa_sched::nic::{RssCaps, RssNic, RssSettings};

use crate::state::{BedLock, BedState};

/// The emulated NIC of one test bed.
#[derive(Debug, Clone)]
pub struct EmulatedNic {
    bed: String,
    ifname: String,
    pin_dir: PathBuf,
    queues: u32,
}

impl EmulatedNic {
    /// The emulated NIC of bed `bed` whose maps are pinned under
    /// `pin_dir`, receiving into `ifname` with `queues` queues.
    pub fn new(bed: &str, ifname: &str, pin_dir: PathBuf, queues: u32) -> EmulatedNic {
        EmulatedNic {
            bed: bed.to_string(),
            ifname: ifname.to_string(),
            pin_dir,
            queues,
        }
    }

    fn maps(&self) -> Result<RssEmuMaps> {
        crate::bpffs::require_mounted(&self.bed)?;
        RssEmuMaps::open(&self.pin_dir).context("opening the emulated NIC's maps")
    }

    /// The kernel's id of the indirection-table map, which a process inside
    /// the bed's namespace opens (`flowlane_ebpf::rss_emu::RssTableMap`).
    pub fn table_map_id(&self) -> Result<u32> {
        Ok(self.maps()?.table_map_id()?)
    }

    /// Packets the emulated NIC steered to each queue.
    pub fn queue_packets(&self) -> Result<Vec<u64>> {
        Ok(self.maps()?.queue_packets(self.queues)?)
    }
}

impl BedState {
    /// The emulated NIC of this bed.
    pub fn nic(&self) -> EmulatedNic {
        EmulatedNic::new(&self.name, &self.peer_if, self.pin_dir.clone(), self.queues)
    }
}

impl RssNic for EmulatedNic {
    type Error = anyhow::Error;

    fn name(&self) -> &str {
        &self.ifname
    }

    fn caps(&self) -> Result<RssCaps> {
        let c = self.maps()?.read()?;
        Ok(RssCaps {
            queues: self.queues,
            key_len: c.key.len(),
            table_size: c.table.len(),
        })
    }

    fn rss(&self) -> Result<RssSettings> {
        let c = self.maps()?.read()?;
        Ok(RssSettings {
            key: c.key,
            table: c.table,
        })
    }

    /// Writes the key and table under the bed's lock (an `up` or `down`
    /// under way finishes first).
    fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<()> {
        let _lock = BedLock::take(&self.bed)?;
        let maps = self.maps()?;
        let mut c: RssEmuConfig = maps.read()?;
        let caps = RssCaps {
            queues: self.queues,
            key_len: c.key.len(),
            table_size: c.table.len(),
        };
        caps.validate(key, table)?;
        if let Some(k) = key {
            c.key = k.to_vec();
        }
        match table {
            Some(t) => {
                c.table = t.to_vec();
                maps.write(&c)?;
            }
            // The entries read a moment ago may be stale (a service moves
            // buckets through the same map): only the key is written.
            None => maps.write_config(&c)?,
        }
        Ok(())
    }
}
