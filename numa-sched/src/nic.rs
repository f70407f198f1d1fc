//! The interface through which flowlane programs a NIC's RSS: a real NIC
//! (through ethtool, in `flowlane-control`) and the test bed's emulated NIC
//! (`flowlane-testbed`) implement the same trait, so that everything above it
//! is the code that would run on hardware.
//!
//! Only the interface lives here (no I/O): the settings, the capabilities,
//! and the check of settings against capabilities that every implementation
//! applies before it writes anything.

use serde::Serialize;
use thiserror::Error;

/// RSS settings of a NIC: Toeplitz key and indirection table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RssSettings {
    /// Toeplitz key.
    pub key: Vec<u8>,
    /// Queue per bucket.
    pub table: Vec<u32>,
}

/// What a NIC's RSS can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RssCaps {
    /// Receive queues (channels) in use.
    pub queues: u32,
    /// Key length in bytes.
    pub key_len: usize,
    /// Indirection table entries.
    pub table_size: usize,
}

/// A key or table that does not fit a NIC ([`RssCaps::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RssSettingsError {
    /// The key has the wrong length.
    #[error("the RSS key must be {expected} bytes for this NIC; got {got}")]
    KeyLength {
        /// The NIC's key length.
        expected: usize,
        /// The given key's length.
        got: usize,
    },
    /// The table has the wrong size.
    #[error("the indirection table must have {expected} entries for this NIC; got {got}")]
    TableSize {
        /// The NIC's table size.
        expected: usize,
        /// The given table's size.
        got: usize,
    },
    /// The table names a queue the NIC does not have.
    #[error("the indirection table names queue {queue}, but the NIC has {queues} queues")]
    NoSuchQueue {
        /// The first queue out of range.
        queue: u32,
        /// The NIC's queue count.
        queues: u32,
    },
}

impl RssCaps {
    /// The table a driver starts with: entry `i` on queue `i % queues`
    /// (Linux's `ethtool_rxfh_indir_default`), what
    /// [`RssNic::reset_table`] puts back.
    #[must_use]
    pub fn default_table(&self) -> Vec<u32> {
        let queues = self.queues.max(1);
        (0..self.table_size).map(|i| i as u32 % queues).collect()
    }

    /// Checks a key and/or table against these capabilities (each `None`
    /// is left as it is and not checked).
    ///
    /// # Errors
    /// The first mismatch found: key length, table size, then a queue out of
    /// range.
    pub fn validate(
        &self,
        key: Option<&[u8]>,
        table: Option<&[u32]>,
    ) -> Result<(), RssSettingsError> {
        if let Some(k) = key {
            if k.len() != self.key_len {
                return Err(RssSettingsError::KeyLength {
                    expected: self.key_len,
                    got: k.len(),
                });
            }
        }
        if let Some(t) = table {
            if t.len() != self.table_size {
                return Err(RssSettingsError::TableSize {
                    expected: self.table_size,
                    got: t.len(),
                });
            }
            if let Some(&queue) = t.iter().find(|&&q| q >= self.queues) {
                return Err(RssSettingsError::NoSuchQueue {
                    queue,
                    queues: self.queues,
                });
            }
        }
        Ok(())
    }
}

/// A NIC whose RSS flowlane programs.
pub trait RssNic {
    /// What reading or programming the NIC can fail with.
    type Error;
    /// The interface name.
    fn name(&self) -> &str;
    /// Queue count, key length and table size.
    ///
    /// # Errors
    /// When the NIC cannot be read.
    fn caps(&self) -> Result<RssCaps, Self::Error>;
    /// The key and table in force.
    ///
    /// # Errors
    /// When the NIC cannot be read.
    fn rss(&self) -> Result<RssSettings, Self::Error>;
    /// Sets the key and/or the table; each is validated against
    /// [`caps`](Self::caps) ([`RssCaps::validate`]) before anything is
    /// written.
    ///
    /// # Errors
    /// When a setting does not fit the NIC, or the NIC refuses it.
    fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<(), Self::Error>;

    /// Gives the table back to the driver: its default, entry `i` on
    /// queue `i % queues` (Linux's `ethtool_rxfh_indir_default`). The
    /// default writes that table; a NIC that tells a table set by hand from
    /// its default (Linux's `IFF_RXFH_CONFIGURED`: fewer channels than the
    /// table uses are then refused, and the driver no longer spreads the
    /// table over new ones) overrides it to reset, so that the NIC is as if
    /// no one had set its table.
    ///
    /// # Errors
    /// As [`RssNic::caps`] and [`RssNic::set_rss`].
    fn reset_table(&self) -> Result<(), Self::Error> {
        let table = self.caps()?.default_table();
        self.set_rss(None, Some(&table))
    }

    /// Points single entries of the indirection table at new queues, as
    /// `(bucket, queue)` pairs (a rebalancer's moves); entries beyond the
    /// table are ignored. The default reads the table and writes it whole;
    /// a NIC that can write entries one by one overrides it.
    ///
    /// # Errors
    /// As [`RssNic::rss`] and [`RssNic::set_rss`].
    fn set_entries(&self, entries: &[(usize, u32)]) -> Result<(), Self::Error> {
        let mut table = self.rss()?.table;
        for &(bucket, queue) in entries {
            if let Some(e) = table.get_mut(bucket) {
                *e = queue;
            }
        }
        self.set_rss(None, Some(&table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: RssCaps = RssCaps {
        queues: 4,
        key_len: 40,
        table_size: 8,
    };

    #[test]
    fn the_default_table_is_round_robin_over_the_queues() {
        assert_eq!(CAPS.default_table(), [0, 1, 2, 3, 0, 1, 2, 3]);
        let none = RssCaps { queues: 0, ..CAPS };
        assert_eq!(none.default_table(), [0; 8], "no queue: all on queue 0");
    }

    #[test]
    fn fitting_settings_pass() {
        assert_eq!(
            CAPS.validate(Some(&[0; 40]), Some(&[0, 1, 2, 3, 0, 1, 2, 3])),
            Ok(())
        );
        assert_eq!(CAPS.validate(None, None), Ok(()));
    }

    #[test]
    fn each_mismatch_is_named() {
        let e = CAPS.validate(Some(&[0; 2]), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the RSS key must be 40 bytes for this NIC; got 2"
        );
        let e = CAPS.validate(None, Some(&[0; 4])).unwrap_err();
        assert_eq!(
            e,
            RssSettingsError::TableSize {
                expected: 8,
                got: 4
            }
        );
        let e = CAPS
            .validate(None, Some(&[0, 1, 2, 3, 9, 1, 2, 3]))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the indirection table names queue 9, but the NIC has 4 queues"
        );
    }
}
