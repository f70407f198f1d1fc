//! Per-RSS-bucket load of one queue, for the rebalancer (issue 13): what
//! each indirection-table entry's connections hold and received, copied
//! from the queue's stack by its worker (the only writer, with the other
//! TCP counters, every 50 ms) and read by anyone as a snapshot.
//!
//! The stack counts per bucket as it looks up each segment's connection
//! ([`flowlane_tcp::Stack::bucket_stats`]); the data path gives it the
//! NIC's Toeplitz hash and table size ([`rss_bucket`]), so its buckets are
//! the NIC's.

use std::sync::atomic::AtomicU64;

use flowlane_numa_sched::toeplitz::{FlowTuple, Protocol};
use flowlane_numa_sched::RssState;
use flowlane_tcp::{FourTuple, Stack};
use serde::{Deserialize, Serialize};

use crate::counters;

/// One bucket's published figures.
#[derive(Debug, Default)]
struct Cell {
    connections: AtomicU64,
    time_wait: AtomicU64,
    segments_in: AtomicU64,
    bytes_in: AtomicU64,
}

/// One queue's per-bucket counters (single writer: the queue's worker).
#[derive(Debug)]
pub struct BucketCounters {
    cells: Box<[Cell]>,
}

/// A bucket's figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketSnapshot {
    /// The indirection-table entry.
    pub bucket: u16,
    /// Live connections (TIME-WAIT records not included).
    pub connections: u64,
    /// TIME-WAIT records.
    pub time_wait: u64,
    /// Segments received for the bucket's connections and records.
    pub segments_in: u64,
    /// Payload bytes in those segments.
    pub bytes_in: u64,
}

impl BucketCounters {
    /// Counters for `count` buckets, all zero.
    pub fn new(count: usize) -> BucketCounters {
        BucketCounters {
            cells: (0..count).map(|_| Cell::default()).collect(),
        }
    }

    /// Copies the stack's per-bucket figures (the worker).
    pub(crate) fn publish(&self, stack: &Stack) {
        for (b, cell) in self.cells.iter().enumerate() {
            let s = stack.bucket_stats(b as u16);
            counters::set(&cell.connections, u64::from(s.connections));
            counters::set(&cell.time_wait, u64::from(s.time_wait));
            counters::set(&cell.segments_in, s.segments_in);
            counters::set(&cell.bytes_in, s.bytes_in);
        }
    }

    /// Every bucket that holds a connection or record or has received a
    /// segment, in bucket order.
    pub fn snapshot(&self) -> Vec<BucketSnapshot> {
        let load = |c: &AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        self.cells
            .iter()
            .enumerate()
            .map(|(b, c)| BucketSnapshot {
                bucket: b as u16,
                connections: load(&c.connections),
                time_wait: load(&c.time_wait),
                segments_in: load(&c.segments_in),
                bytes_in: load(&c.bytes_in),
            })
            .filter(|s| s.connections + s.time_wait + s.segments_in != 0)
            .collect()
    }
}

/// The NIC's RSS bucket of a connection: its packets as they arrive (the
/// peer's address and port as source) through the Toeplitz hash and the
/// table's size.
pub fn rss_bucket(rss: &RssState, tuple: &FourTuple) -> u16 {
    let flow = FlowTuple {
        src: tuple.remote.ip(),
        dst: tuple.local.ip(),
        src_port: tuple.remote.port(),
        dst_port: tuple.local.port(),
        protocol: Protocol::Tcp,
    };
    // Tables hold at most 65 536 entries (`IndirectionTable::MAX_SIZE`).
    rss.table().bucket_for_hash(rss.hash(&flow)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_numa_sched::toeplitz::RssKey;

    #[test]
    fn buckets_follow_the_nic_hash_and_table() {
        let rss =
            crate::ephemeral::rss_state(RssKey::microsoft_default().as_bytes(), &[0, 1, 0, 1], 2)
                .expect("valid RSS");
        let tuple = FourTuple {
            local: "10.0.0.1:80".parse().expect("address"),
            remote: "10.0.0.2:12345".parse().expect("address"),
        };
        let flow = FlowTuple {
            src: tuple.remote.ip(),
            dst: tuple.local.ip(),
            src_port: 12345,
            dst_port: 80,
            protocol: Protocol::Tcp,
        };
        assert_eq!(
            usize::from(rss_bucket(&rss, &tuple)),
            rss.hint(&flow).bucket
        );
    }

    #[test]
    fn snapshot_lists_only_buckets_in_use() {
        let c = BucketCounters::new(8);
        assert!(c.snapshot().is_empty());
        counters::set(&c.cells[3].segments_in, 5);
        counters::set(&c.cells[3].bytes_in, 700);
        counters::set(&c.cells[6].connections, 1);
        let s = c.snapshot();
        assert_eq!(s.iter().map(|b| b.bucket).collect::<Vec<_>>(), [3, 6]);
        assert_eq!((s[0].segments_in, s[0].bytes_in), (5, 700));
    }
}
