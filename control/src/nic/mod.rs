//! Programming a NIC's RSS: one interface for real NICs (ethtool) and the
//! test bed's emulated NIC, so that everything above it is the code that
//! would run on hardware.

pub mod ethtool;
pub mod veth_emu;

use anyhow::Result;

/// RSS settings of a NIC: Toeplitz key and indirection table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RssSettings {
    /// Toeplitz key.
    pub key: Vec<u8>,
    /// Queue per bucket.
    pub table: Vec<u32>,
}

/// What a NIC's RSS can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RssCaps {
    /// Receive queues (channels) in use.
    pub queues: u32,
    /// Key length in bytes.
    pub key_len: usize,
    /// Indirection table entries.
    pub table_size: usize,
}

/// A NIC whose RSS flowlane programs.
pub trait RssNic {
    /// The interface name.
    fn name(&self) -> &str;
    /// Queue count, key length and table size.
    fn caps(&self) -> Result<RssCaps>;
    /// The key and table in force.
    fn rss(&self) -> Result<RssSettings>;
    /// Sets the key and/or the table; each is validated against
    /// [`caps`](Self::caps) before anything is written.
    fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<()>;
}

/// Validates a key and table against a NIC's capabilities.
pub fn validate(caps: &RssCaps, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<()> {
    if let Some(k) = key {
        if k.len() != caps.key_len {
            anyhow::bail!(
                "the RSS key must be {} bytes for this NIC; got {}",
                caps.key_len,
                k.len()
            );
        }
    }
    if let Some(t) = table {
        if t.len() != caps.table_size {
            anyhow::bail!(
                "the indirection table must have {} entries for this NIC; got {}",
                caps.table_size,
                t.len()
            );
        }
        if let Some(q) = t.iter().find(|&&q| q >= caps.queues) {
            anyhow::bail!(
                "the indirection table names queue {q}, but the NIC has {} queues",
                caps.queues
            );
        }
    }
    Ok(())
}
