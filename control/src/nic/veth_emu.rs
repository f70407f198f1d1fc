//! The test bed's emulated RSS NIC: the far side's tc program, programmed
//! through its pinned BPF maps.

use std::path::PathBuf;

use anyhow::{Context, Result};
use flowlane_ebpf::rss_emu::{RssEmuConfig, RssEmuMaps};

use super::{validate, RssCaps, RssNic, RssSettings};

/// The emulated NIC of one test bed.
#[derive(Debug, Clone)]
pub struct VethEmuNic {
    ifname: String,
    pin_dir: PathBuf,
    queues: u32,
}

impl VethEmuNic {
    /// The emulated NIC whose maps are pinned under `pin_dir`, receiving
    /// into `ifname` with `queues` queues.
    pub fn new(ifname: &str, pin_dir: PathBuf, queues: u32) -> VethEmuNic {
        VethEmuNic {
            ifname: ifname.to_string(),
            pin_dir,
            queues,
        }
    }

    fn maps(&self) -> Result<RssEmuMaps> {
        RssEmuMaps::open(&self.pin_dir).context("opening the emulated NIC's maps")
    }
}

impl RssNic for VethEmuNic {
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

    fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<()> {
        let maps = self.maps()?;
        let mut c: RssEmuConfig = maps.read()?;
        let caps = RssCaps {
            queues: self.queues,
            key_len: c.key.len(),
            table_size: c.table.len(),
        };
        validate(&caps, key, table)?;
        if let Some(k) = key {
            c.key = k.to_vec();
        }
        if let Some(t) = table {
            c.table = t.to_vec();
        }
        maps.write(&c)?;
        Ok(())
    }
}
