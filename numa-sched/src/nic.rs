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

use crate::nic_caps::RssFacts;

/// RSS settings of a NIC: Toeplitz key and indirection table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RssSettings {
    /// Toeplitz key.
    pub key: Vec<u8>,
    /// Queue per bucket.
    pub table: Vec<u32>,
}

/// A NIC's RSS as a service reads it: the key and table in force, and how
/// the NIC hashes, which the service checks against its model
/// ([`RssFacts::mismatches`]) before it models the NIC's RSS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicRss {
    /// The key and table.
    pub settings: RssSettings,
    /// Sizes, hash function, input transformation, hashed fields.
    pub facts: RssFacts,
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
    /// A single entry to point ([`RssNic::set_entries`]) is past the end
    /// of the NIC's table.
    #[error(
        "bucket {bucket} is outside the NIC's indirection table of {table_size} entries \
         (0..={}): nothing written",
        table_size.saturating_sub(1)
    )]
    BucketOutsideTable {
        /// The first bucket out of range.
        bucket: usize,
        /// The NIC's table size.
        table_size: usize,
    },
    /// The NIC's table is no longer the size of the table a running
    /// service models ([`ServiceTable`]): its channels changed under it.
    #[error(
        "the NIC's indirection table has {table_size} entries now, but the service's RSS has \
         {buckets} buckets (the channels changed under it, `ethtool -L`?): nothing written; \
         restart the service to serve the table as it is now"
    )]
    TableResized {
        /// The service's bucket count.
        buckets: usize,
        /// The NIC's table size now.
        table_size: usize,
    },
}

/// The even spread of a `size`-entry table over `queues` queues: entry `i`
/// on queue `i % queues` (Linux's `ethtool_rxfh_indir_default`; no queue
/// counts as one). Any size: writing it needs no power of two, only a
/// model of which bucket a hash selects does.
#[must_use]
pub fn even_table(size: usize, queues: u32) -> Vec<u32> {
    let queues = queues.max(1);
    (0..size).map(|i| i as u32 % queues).collect()
}

/// Points the `(bucket, queue)` entries of `table`, later ones winning,
/// after checking them all: nothing changes when one is past the end, or
/// when `buckets` (the bucket count of a service's model of the table) is
/// given and is not the table's size.
///
/// # Errors
/// [`RssSettingsError::TableResized`], then
/// [`RssSettingsError::BucketOutsideTable`] for the first bucket past the
/// end.
pub fn point_entries(
    table: &mut [u32],
    buckets: Option<usize>,
    entries: &[(usize, u32)],
) -> Result<(), RssSettingsError> {
    let table_size = table.len();
    if let Some(buckets) = buckets.filter(|&b| b != table_size) {
        return Err(RssSettingsError::TableResized {
            buckets,
            table_size,
        });
    }
    if let Some(&(bucket, _)) = entries.iter().find(|&&(b, _)| b >= table_size) {
        return Err(RssSettingsError::BucketOutsideTable { bucket, table_size });
    }
    for &(bucket, queue) in entries {
        table[bucket] = queue;
    }
    Ok(())
}

impl RssCaps {
    /// The table a driver starts with: entry `i` on queue `i % queues`
    /// (Linux's `ethtool_rxfh_indir_default`), what
    /// [`RssNic::reset_table`] puts back.
    #[must_use]
    pub fn default_table(&self) -> Vec<u32> {
        even_table(self.table_size, self.queues)
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
    /// `(bucket, queue)` pairs (a rebalancer's moves). A bucket past the
    /// end of the table in force (the channels went down since the caller
    /// read it) is refused and nothing is written. The default reads the
    /// table and writes it whole; a NIC that can write entries one by one
    /// overrides it.
    ///
    /// # Errors
    /// [`RssSettingsError::BucketOutsideTable`]; otherwise as
    /// [`RssNic::rss`] and [`RssNic::set_rss`].
    fn set_entries(&self, entries: &[(usize, u32)]) -> Result<(), Self::Error>
    where
        Self::Error: From<RssSettingsError>,
    {
        write_entries(self, None, entries)
    }
}

/// Reads `nic`'s table, points `entries` ([`point_entries`], checked
/// against `buckets` if given) and writes it whole.
fn write_entries<N>(
    nic: &N,
    buckets: Option<usize>,
    entries: &[(usize, u32)],
) -> Result<(), N::Error>
where
    N: RssNic + ?Sized,
    N::Error: From<RssSettingsError>,
{
    let mut table = nic.rss()?.table;
    point_entries(&mut table, buckets, entries)?;
    nic.set_rss(None, Some(&table))
}

/// A NIC whose table a running service models with `buckets` buckets
/// (the table's size when the service read it): single entries
/// ([`RssNic::set_entries`], a bucket move) are written only while the
/// NIC's table still has that size. After `ethtool -L` resized it, a
/// bucket of the service is no longer one entry of the NIC's (a smaller
/// table has no such entry; in a larger one the bucket's flows hash to
/// several), so the write is refused rather than made to one of them.
/// Single entries are written as the trait's default does (the table read
/// once, checked and written whole), not through an override of the inner
/// NIC's; everything else goes to the NIC as it is.
#[derive(Debug, Clone)]
pub struct ServiceTable<N> {
    nic: N,
    buckets: usize,
}

impl<N> ServiceTable<N> {
    /// `nic`, modelled by a service with `buckets` buckets.
    pub fn new(nic: N, buckets: usize) -> ServiceTable<N> {
        ServiceTable { nic, buckets }
    }

    /// The service's bucket count.
    pub fn buckets(&self) -> usize {
        self.buckets
    }
}

impl<N> RssNic for ServiceTable<N>
where
    N: RssNic,
    N::Error: From<RssSettingsError>,
{
    type Error = N::Error;

    fn name(&self) -> &str {
        self.nic.name()
    }

    fn caps(&self) -> Result<RssCaps, Self::Error> {
        self.nic.caps()
    }

    fn rss(&self) -> Result<RssSettings, Self::Error> {
        self.nic.rss()
    }

    fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<(), Self::Error> {
        self.nic.set_rss(key, table)
    }

    fn reset_table(&self) -> Result<(), Self::Error> {
        self.nic.reset_table()
    }

    fn set_entries(&self, entries: &[(usize, u32)]) -> Result<(), Self::Error> {
        write_entries(&self.nic, Some(self.buckets), entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A NIC in memory: its table, and the tables written to it.
    struct Fake {
        table: RefCell<Vec<u32>>,
        writes: RefCell<Vec<Vec<u32>>>,
    }

    impl Fake {
        fn new(size: usize) -> Fake {
            Fake {
                table: RefCell::new(even_table(size, 4)),
                writes: RefCell::new(Vec::new()),
            }
        }
    }

    #[derive(Debug, PartialEq)]
    struct FakeError(String);

    impl From<RssSettingsError> for FakeError {
        fn from(e: RssSettingsError) -> FakeError {
            FakeError(e.to_string())
        }
    }

    impl RssNic for Fake {
        type Error = FakeError;
        fn name(&self) -> &str {
            "fake0"
        }
        fn caps(&self) -> Result<RssCaps, FakeError> {
            Ok(RssCaps {
                queues: 4,
                key_len: 40,
                table_size: self.table.borrow().len(),
            })
        }
        fn rss(&self) -> Result<RssSettings, FakeError> {
            Ok(RssSettings {
                key: vec![0; 40],
                table: self.table.borrow().clone(),
            })
        }
        fn set_rss(&self, _key: Option<&[u8]>, table: Option<&[u32]>) -> Result<(), FakeError> {
            let t = table.expect("a table").to_vec();
            self.writes.borrow_mut().push(t.clone());
            *self.table.borrow_mut() = t;
            Ok(())
        }
    }

    #[test]
    fn an_even_table_needs_no_power_of_two() {
        let t = even_table(192, 4);
        assert_eq!(t.len(), 192);
        assert!(t.iter().enumerate().all(|(i, &q)| q == i as u32 % 4));
        assert_eq!(even_table(3, 0), [0, 0, 0], "no queue: all on queue 0");
    }

    #[test]
    fn entries_inside_the_table_are_pointed() {
        let nic = Fake::new(8);
        nic.set_entries(&[(1, 3), (7, 0), (1, 2)]).unwrap();
        assert_eq!(*nic.table.borrow(), [0, 2, 2, 3, 0, 1, 2, 0]);
    }

    /// The channels went down (`ethtool -L`): the table shrank under a
    /// service, whose bucket 100 is no entry of it any more.
    #[test]
    fn a_bucket_past_the_table_is_refused_and_nothing_is_written() {
        let nic = Fake::new(64);
        let e = nic.set_entries(&[(3, 1), (100, 1)]).unwrap_err();
        assert_eq!(
            e.0,
            "bucket 100 is outside the NIC's indirection table of 64 entries (0..=63): \
             nothing written"
        );
        assert!(nic.writes.borrow().is_empty());
        assert_eq!(*nic.table.borrow(), even_table(64, 4));
    }

    /// The table grew from 128 to 256 entries under a service of 128
    /// buckets: its bucket 5 is entries 5 and 133 of the NIC's now, so
    /// writing entry 5 alone would split it. Refused, nothing written.
    #[test]
    fn a_service_table_refuses_a_nic_table_of_another_size() {
        let nic = ServiceTable::new(Fake::new(256), 128);
        let e = nic.set_entries(&[(5, 1)]).unwrap_err();
        assert_eq!(
            e.0,
            "the NIC's indirection table has 256 entries now, but the service's RSS has 128 \
             buckets (the channels changed under it, `ethtool -L`?): nothing written; restart \
             the service to serve the table as it is now"
        );
        assert!(nic.nic.writes.borrow().is_empty());
        let same = ServiceTable::new(Fake::new(128), 128);
        same.set_entries(&[(5, 1)]).unwrap();
        assert_eq!(same.nic.table.borrow()[5], 1);
        assert_eq!((same.buckets(), same.name()), (128, "fake0"));
    }

    #[test]
    fn entries_are_checked_before_any_is_pointed() {
        let mut t = vec![0, 1, 2, 3];
        assert_eq!(
            point_entries(&mut t, None, &[(0, 3), (4, 0)]),
            Err(RssSettingsError::BucketOutsideTable {
                bucket: 4,
                table_size: 4
            })
        );
        assert_eq!(t, [0, 1, 2, 3]);
        assert_eq!(
            point_entries(&mut t, Some(8), &[(0, 3)]),
            Err(RssSettingsError::TableResized {
                buckets: 8,
                table_size: 4
            })
        );
        point_entries(&mut t, Some(4), &[(0, 3), (3, 0)]).unwrap();
        assert_eq!(t, [3, 1, 2, 0]);
    }

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
