//! The RSS indirection table: hash → bucket → receive queue.
//!
//! Microsoft RSS spec, "RSS Hashing Functions" / "Indirection Table": the NIC masks the hash
//! to its low-order bits and uses them to index a table of queue (processor) numbers. Linux
//! exposes the table through `ethtool -x` (read) and `ethtool -X <if> weight|equal|...`
//! (write); its default fill is round-robin, `ethtool_rxfh_indir_default(i, n) = i % n`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::Serialize;

use crate::error::{Error, Result};

/// An indirection table: `entries[bucket]` is the receive queue of that bucket.
///
/// Its size is a power of two from 1 to 65536 (NICs have 64, 128, 512 or 2048 entries).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct IndirectionTable {
    entries: Vec<u16>,
}

/// One bucket whose queue differs between two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct EntryChange {
    /// Index in the table.
    pub bucket: usize,
    /// Queue in the current table.
    pub from: u16,
    /// Queue in the target table.
    pub to: u16,
}

impl IndirectionTable {
    /// Largest size accepted (the ethtool interface indexes entries with 32-bit numbers, but
    /// no NIC has more than a few thousand; queues are 16-bit here).
    pub const MAX_SIZE: usize = 65536;

    /// Wraps explicit entries, e.g. a table read back from the NIC.
    ///
    /// # Errors
    /// [`Error::TableSize`] unless `entries.len()` is a power of two in 1..=65536.
    pub fn new(entries: Vec<u16>) -> Result<Self> {
        check_size(entries.len())?;
        Ok(Self { entries })
    }

    /// Round-robin over `queues`: bucket `i` goes to `queues[i % queues.len()]`, the Linux
    /// default fill. Every queue gets `size / n` or `size / n + 1` buckets.
    ///
    /// # Errors
    /// [`Error::TableSize`], [`Error::NoQueues`], [`Error::DuplicateQueue`].
    pub fn even(size: usize, queues: &[u16]) -> Result<Self> {
        check_size(size)?;
        check_queues(queues.iter().copied())?;
        if queues.is_empty() {
            return Err(Error::NoQueues);
        }
        Ok(Self {
            entries: (0..size).map(|i| queues[i % queues.len()]).collect(),
        })
    }

    /// Buckets in proportion to weights, by the largest-remainder method: every queue gets
    /// its exact share `size * w / Σw` rounded down or up (exactly the share when that is an
    /// integer), so each is within one bucket of its share. Buckets of different queues are
    /// interleaved. A zero weight gives a queue no bucket.
    ///
    /// # Errors
    /// [`Error::TableSize`], [`Error::NoQueues`] (empty list or all weights zero),
    /// [`Error::DuplicateQueue`].
    pub fn weighted(size: usize, weights: &[(u16, u32)]) -> Result<Self> {
        check_size(size)?;
        let quotas = quotas(size, weights, None)?;
        let queues: Vec<u16> = weights.iter().map(|&(q, _)| q).collect();
        Ok(Self {
            entries: interleave(&queues, &quotas),
        })
    }

    /// Spreads the buckets of this NIC table (over queues `0..queues`)
    /// over `workers` workers, for more workers than the NIC has queues
    /// (software spill). A worker's share is `size / workers` buckets, one
    /// more for each of the first `size % workers` workers.
    ///
    /// Every extra worker (`queues..workers`) gets exactly its share, taken
    /// one bucket at a time from the queue most over its own share, so that
    /// a queue's buckets stay interleaved; workers `0..queues` keep the rest
    /// of their own queue's buckets and never get another queue's. So a
    /// queue's worker ends with its share when its queue had at least that
    /// many buckets, and on a NIC table where every queue has (the even
    /// fill, Linux's default) every worker ends with its share. On a skewed
    /// table a queue with fewer buckets than its share keeps all of them
    /// and gives none, and what the extra workers' shares leave over stays
    /// on the queues most over theirs, evened out: a queue that gave is at
    /// most one bucket less over its share than any other queue.
    ///
    /// The worker of a bucket's queue forwards its frames to the extra
    /// worker that took it; each extra worker sends through its carrier,
    /// the queue it took most buckets from. Returns the worker table (a
    /// worker per bucket) and each extra worker's carrier. The NIC's own
    /// table does not change.
    ///
    /// # Errors
    /// [`Error::NoQueues`] when `queues` is 0 or `workers < queues`;
    /// [`Error::QueueNotPlaced`] when the table names a queue past `queues`.
    pub fn spill(&self, queues: u16, workers: u16) -> Result<(IndirectionTable, Vec<u16>)> {
        if queues == 0 || workers < queues {
            return Err(Error::NoQueues);
        }
        if let Some(&q) = self.entries.iter().find(|&&q| q >= queues) {
            return Err(Error::QueueNotPlaced { queue: q });
        }
        let size = self.entries.len();
        let (n, q) = (usize::from(workers), usize::from(queues));
        // Each worker's share; the remainder to the workers with a queue.
        let share = |w: usize| size / n + usize::from(w < size % n);
        let buckets: Vec<Vec<usize>> = (0..q)
            .map(|c| {
                (0..size)
                    .filter(|&b| usize::from(self.entries[b]) == c)
                    .collect()
            })
            .collect();
        // How many buckets each extra worker takes from each queue: one at
        // a time from the queue most over its share.
        let mut keeps: Vec<usize> = buckets.iter().map(Vec::len).collect();
        let mut taken = vec![vec![0usize; q]; n - q];
        for (x, from) in taken.iter_mut().enumerate() {
            for _ in 0..share(q + x) {
                let Some(c) = (0..q)
                    .filter(|&c| keeps[c] > 0)
                    .max_by_key(|&c| (keeps[c] as isize - share(c) as isize, std::cmp::Reverse(c)))
                else {
                    break;
                };
                keeps[c] -= 1;
                from[c] += 1;
            }
        }
        // Which of a queue's buckets go: evenly spaced over its list, dealt
        // to its takers in turn, so that what each keeps stays spread.
        let mut entries = self.entries.clone();
        for (c, list) in buckets.iter().enumerate() {
            let given: usize = taken.iter().map(|t| t[c]).sum();
            let mut owed: Vec<usize> = taken.iter().map(|t| t[c]).collect();
            let takers = owed.len();
            let mut x = 0;
            for j in 0..given {
                let b = list[(2 * j + 1) * list.len() / (2 * given)];
                while owed[x % takers] == 0 {
                    x += 1;
                }
                owed[x % takers] -= 1;
                entries[b] = (q + x % takers) as u16;
                x += 1;
            }
        }
        let carriers = taken
            .iter()
            .map(|from| {
                (0..q)
                    .max_by_key(|&c| (from[c], std::cmp::Reverse(c)))
                    .unwrap_or(0) as u16
            })
            .collect();
        Ok((IndirectionTable { entries }, carriers))
    }

    /// The entries, bucket by bucket.
    #[must_use]
    pub fn entries(&self) -> &[u16] {
        &self.entries
    }

    /// The entries as the `u32` queue list NIC interfaces take
    /// ([`crate::nic::RssNic::set_rss`]).
    pub fn to_queue_list(&self) -> Vec<u32> {
        self.entries.iter().map(|&q| u32::from(q)).collect()
    }

    /// Number of buckets.
    #[must_use]
    pub fn size(&self) -> usize {
        self.entries.len()
    }

    /// The bucket a hash selects: its low-order bits, `hash & (size - 1)`.
    #[inline]
    #[must_use]
    pub fn bucket_for_hash(&self, hash: u32) -> usize {
        hash as usize & (self.entries.len() - 1)
    }

    /// The queue a hash selects.
    #[inline]
    #[must_use]
    pub fn queue_for_hash(&self, hash: u32) -> u16 {
        self.entries[self.bucket_for_hash(hash)]
    }

    /// Number of buckets per queue (queues without buckets are absent).
    #[must_use]
    pub fn counts(&self) -> BTreeMap<u16, usize> {
        let mut counts = BTreeMap::new();
        for &q in &self.entries {
            *counts.entry(q).or_insert(0) += 1;
        }
        counts
    }

    /// The entries that differ from `target`, in bucket order: the minimal set of writes
    /// that turns this table into `target`.
    ///
    /// # Errors
    /// [`Error::TableSizeMismatch`] if the tables have different sizes.
    pub fn diff(&self, target: &Self) -> Result<Vec<EntryChange>> {
        if self.size() != target.size() {
            return Err(Error::TableSizeMismatch {
                ours: self.size(),
                theirs: target.size(),
            });
        }
        Ok(self
            .entries
            .iter()
            .zip(&target.entries)
            .enumerate()
            .filter(|(_, (from, to))| from != to)
            .map(|(bucket, (&from, &to))| EntryChange { bucket, from, to })
            .collect())
    }

    /// A table of the same size, balanced by `weights` like [`IndirectionTable::weighted`],
    /// that moves as few buckets as possible away from their current queue.
    ///
    /// Every queue keeps as many of its current buckets as its new share allows; only the
    /// excess (and every bucket of a queue no longer listed) moves, to queues below their
    /// share. Where rounding leaves a choice of which queues get the extra bucket, it goes to
    /// queues that already hold it. The result has the fewest changed entries of all tables
    /// where each queue is within one bucket of its exact share.
    ///
    /// # Errors
    /// [`Error::NoQueues`], [`Error::DuplicateQueue`].
    pub fn rebalance_minimal(&self, weights: &[(u16, u32)]) -> Result<Self> {
        let current = self.counts();
        let quotas = quotas(self.size(), weights, Some(&current))?;
        let quota: BTreeMap<u16, usize> = weights
            .iter()
            .zip(&quotas)
            .map(|(&(q, _), &n)| (q, n))
            .collect();
        let mut kept: BTreeMap<u16, usize> = BTreeMap::new();
        let mut freed = Vec::new();
        for (bucket, &q) in self.entries.iter().enumerate() {
            let k = kept.entry(q).or_insert(0);
            if *k < quota.get(&q).copied().unwrap_or(0) {
                *k += 1;
            } else {
                freed.push(bucket);
            }
        }
        let queues: Vec<u16> = weights.iter().map(|&(q, _)| q).collect();
        let deficits: Vec<usize> = weights
            .iter()
            .zip(&quotas)
            .map(|(&(q, _), &n)| n - kept.get(&q).copied().unwrap_or(0))
            .collect();
        let mut entries = self.entries.clone();
        for (bucket, q) in freed.into_iter().zip(interleave(&queues, &deficits)) {
            entries[bucket] = q;
        }
        Ok(Self { entries })
    }

    /// [`IndirectionTable::rebalance_minimal`] with equal weights.
    ///
    /// # Errors
    /// [`Error::NoQueues`], [`Error::DuplicateQueue`].
    pub fn rebalance_minimal_even(&self, queues: &[u16]) -> Result<Self> {
        let weights: Vec<(u16, u32)> = queues.iter().map(|&q| (q, 1)).collect();
        self.rebalance_minimal(&weights)
    }
}

impl fmt::Display for IndirectionTable {
    /// Eight entries per row, each row headed by its first bucket, like `ethtool -x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "RSS indirection table: {} buckets over {} queue(s)",
            self.size(),
            self.counts().len()
        )?;
        for (row, chunk) in self.entries.chunks(8).enumerate() {
            write!(f, "{:5}:", row * 8)?;
            for q in chunk {
                write!(f, " {q:5}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

fn check_size(size: usize) -> Result<()> {
    if size.is_power_of_two() && size <= IndirectionTable::MAX_SIZE {
        Ok(())
    } else {
        Err(Error::TableSize { size })
    }
}

fn check_queues(queues: impl Iterator<Item = u16>) -> Result<()> {
    let mut seen = HashSet::new();
    for q in queues {
        if !seen.insert(q) {
            return Err(Error::DuplicateQueue { queue: q });
        }
    }
    Ok(())
}

/// Bucket counts per entry of `weights` by largest remainder. With `current` counts, the
/// extra buckets that rounding hands out go first to queues that currently hold more than
/// their rounded-down share (each such choice saves one move), then by largest remainder,
/// then by list order.
fn quotas(
    size: usize,
    weights: &[(u16, u32)],
    current: Option<&BTreeMap<u16, usize>>,
) -> Result<Vec<usize>> {
    check_queues(weights.iter().map(|&(q, _)| q))?;
    let total: u64 = weights.iter().map(|&(_, w)| u64::from(w)).sum();
    if total == 0 {
        return Err(Error::NoQueues);
    }
    let size64 = size as u64;
    let mut quotas: Vec<usize> = weights
        .iter()
        .map(|&(_, w)| (size64 * u64::from(w) / total) as usize)
        .collect();
    let remainder = |i: usize| size64 * u64::from(weights[i].1) % total;
    let holds_more =
        |i: usize| current.is_some_and(|c| c.get(&weights[i].0).copied().unwrap_or(0) > quotas[i]);
    let mut candidates: Vec<usize> = (0..weights.len()).filter(|&i| remainder(i) > 0).collect();
    candidates.sort_by(|&a, &b| {
        holds_more(b)
            .cmp(&holds_more(a))
            .then(remainder(b).cmp(&remainder(a)))
            .then(a.cmp(&b))
    });
    let extra = size - quotas.iter().sum::<usize>();
    // The fractional parts sum to `extra`, each below one: there are at least `extra`
    // candidates.
    for i in candidates.into_iter().take(extra) {
        quotas[i] += 1;
    }
    Ok(quotas)
}

/// `counts[i]` copies of `queues[i]`, interleaved: the k-th copy of a queue with count c
/// sits at its ideal position (k + ½) / c of the way through the sequence.
fn interleave(queues: &[u16], counts: &[usize]) -> Vec<u16> {
    let mut slots: Vec<(usize, usize)> = counts
        .iter()
        .enumerate()
        .flat_map(|(i, &c)| (0..c).map(move |k| (i, k)))
        .collect();
    // Compare (2k + 1) / (2c) across queues without division: (2k1+1)·c2 vs (2k2+1)·c1.
    slots.sort_by(|&(i1, k1), &(i2, k2)| {
        let a = (2 * k1 as u64 + 1) * counts[i2] as u64;
        let b = (2 * k2 as u64 + 1) * counts[i1] as u64;
        a.cmp(&b).then(i1.cmp(&i2))
    });
    slots.into_iter().map(|(i, _)| queues[i]).collect()
}

#[cfg(test)]
mod tests {
    proptest::proptest! {
        #[test]
        fn spill_shares_are_even_whatever_the_table(
            size_log in 3u32..10,
            queues in 1u16..6,
            extra in 0u16..9,
            weights in proptest::collection::vec(1u32..9, 6),
        ) {
            let size = 1usize << size_log;
            let ws: Vec<(u16, u32)> = (0..queues).map(|q| (q, weights[usize::from(q)])).collect();
            let nic = IndirectionTable::weighted(size, &ws).unwrap();
            let workers = queues + extra;
            let (w, carriers) = nic.spill(queues, workers).unwrap();
            proptest::prop_assert_eq!(carriers.len(), usize::from(extra));
            proptest::prop_assert!(carriers.iter().all(|&c| c < queues));
            let counts = w.counts();
            let n = usize::from(workers);
            for worker in 0..workers {
                let have = counts.get(&worker).copied().unwrap_or(0);
                if worker >= queues {
                    // An extra worker gets its share unless no queue had
                    // buckets over theirs left to give.
                    proptest::prop_assert!(have <= size / n + 1);
                }
            }
            for (b, &worker) in w.entries().iter().enumerate() {
                proptest::prop_assert!(worker < workers);
                if worker < queues {
                    proptest::prop_assert_eq!(worker, nic.entries()[b]);
                }
            }
            proptest::prop_assert_eq!(counts.values().sum::<usize>(), size);
        }
    }

    proptest::proptest! {
        #[test]
        fn spill_keeps_the_documented_bounds(
            size_log in 3u32..10,
            queues in 1u16..6,
            extra in 0u16..9,
            weights in proptest::collection::vec(0u32..9, 6),
        ) {
            let size = 1usize << size_log;
            // Queue 0 has a nonzero weight; the others may have no bucket at all.
            let ws: Vec<(u16, u32)> = (0..queues)
                .map(|q| (q, weights[usize::from(q)].max(u32::from(q == 0))))
                .collect();
            let nic = IndirectionTable::weighted(size, &ws).unwrap();
            let workers = queues + extra;
            let (w, _) = nic.spill(queues, workers).unwrap();
            let (n, q) = (usize::from(workers), usize::from(queues));
            let share = |w: usize| size / n + usize::from(w < size % n);
            let had: Vec<usize> = (0..q).map(|c| nic.counts().get(&(c as u16)).copied().unwrap_or(0)).collect();
            let have: Vec<usize> = (0..n).map(|x| w.counts().get(&(x as u16)).copied().unwrap_or(0)).collect();
            for (x, &got) in have.iter().enumerate().skip(q) {
                proptest::prop_assert_eq!(got, share(x), "extra worker {}", x);
            }
            let over = |c: usize| have[c] as isize - share(c) as isize;
            let most = (0..q).map(over).max().unwrap();
            for c in 0..q {
                proptest::prop_assert!(have[c] <= had[c]);
                proptest::prop_assert!(have[c] >= had[c].min(share(c)), "queue {} kept {} of {}", c, have[c], had[c]);
                if had[c] <= share(c) {
                    proptest::prop_assert_eq!(have[c], had[c], "a queue short of its share gives none");
                }
                if have[c] < had[c] {
                    proptest::prop_assert!(over(c) >= most - 1, "queue {} gave but is {} over, another {}", c, over(c), most);
                }
            }
            if (0..q).all(|c| had[c] >= share(c)) {
                proptest::prop_assert!((0..n).all(|x| have[x] == share(x)), "{:?}", have);
            }
        }
    }

    #[test]
    fn spill_gives_every_worker_an_even_share() {
        let nic = IndirectionTable::even(128, &[0, 1]).unwrap();
        let (w, carriers) = nic.spill(2, 3).unwrap();
        let counts = w.counts();
        assert_eq!(
            (counts[&0], counts[&1], counts[&2]),
            (43, 43, 42),
            "a third each, the remainder to the queues' workers"
        );
        assert_eq!(carriers, [0], "ties go to the lower queue");
        for (b, &worker) in w.entries().iter().enumerate() {
            if worker < 2 {
                assert_eq!(
                    worker,
                    nic.entries()[b],
                    "a queue's worker keeps its own buckets"
                );
            }
        }
        // Five workers on two queues: 26 or 25 of 128 each.
        let (w, carriers) = nic.spill(2, 5).unwrap();
        let counts = w.counts();
        assert!(
            counts.values().all(|&n| (25..=26).contains(&n)),
            "{counts:?}"
        );
        assert_eq!(counts.values().sum::<usize>(), 128);
        assert_eq!(carriers.len(), 3);
        // An uneven NIC table: the busier queue gives more.
        let skewed = IndirectionTable::weighted(128, &[(0, 3), (1, 1)]).unwrap();
        let (w, _) = skewed.spill(2, 4).unwrap();
        assert!(w.counts().values().all(|&n| n == 32), "{:?}", w.counts());
        // What a queue's worker keeps stays spread over the table.
        let (w, _) = nic.spill(2, 3).unwrap();
        let kept: Vec<usize> = (0..128).filter(|&b| w.entries()[b] == 0).collect();
        let gaps: Vec<usize> = kept.windows(2).map(|p| p[1] - p[0]).collect();
        assert!(gaps.iter().all(|&g| g <= 4), "{kept:?}");
        assert!(kept[0] < 4 && kept[kept.len() - 1] > 120, "{kept:?}");
        // As many workers as queues: the NIC's table as it is.
        assert_eq!(nic.spill(2, 2).unwrap(), (nic.clone(), vec![]));
        assert_eq!(nic.spill(2, 1), Err(Error::NoQueues));
        assert_eq!(nic.spill(1, 3), Err(Error::QueueNotPlaced { queue: 1 }));
    }

    use super::*;
    use proptest::prelude::*;

    /// Whether every queue is within one bucket of its exact share `size * w / Σw`
    /// (exactly on it when the share is an integer), and only weighted queues are used.
    fn balanced(table: &IndirectionTable, weights: &[(u16, u32)]) -> bool {
        let total: u64 = weights.iter().map(|&(_, w)| u64::from(w)).sum();
        let counts = table.counts();
        let size = table.size() as u64;
        counts
            .keys()
            .all(|q| weights.iter().any(|&(wq, w)| wq == *q && w > 0))
            && weights.iter().all(|&(q, w)| {
                let have = counts.get(&q).copied().unwrap_or(0) as u64 * total;
                let share = size * u64::from(w);
                have.abs_diff(share) < total
            })
    }

    #[test]
    fn validates_size() {
        for size in [0, 3, 96, 65537, 131072] {
            assert_eq!(
                IndirectionTable::new(vec![0; size]),
                Err(Error::TableSize { size })
            );
            assert_eq!(
                IndirectionTable::even(size, &[0]),
                Err(Error::TableSize { size })
            );
        }
        for size in [1, 2, 64, 128, 512, 2048, 65536] {
            assert_eq!(IndirectionTable::even(size, &[0]).unwrap().size(), size);
        }
        assert_eq!(IndirectionTable::even(64, &[]), Err(Error::NoQueues));
        assert_eq!(
            IndirectionTable::even(64, &[1, 2, 1]),
            Err(Error::DuplicateQueue { queue: 1 })
        );
        assert_eq!(
            IndirectionTable::weighted(64, &[(0, 0), (1, 0)]),
            Err(Error::NoQueues)
        );
    }

    #[test]
    fn even_is_round_robin_and_balanced() {
        for size in [64, 128, 512, 2048] {
            for n in 1..=64u16 {
                let queues: Vec<u16> = (0..n).map(|q| 100 + 2 * q).collect();
                let t = IndirectionTable::even(size, &queues).unwrap();
                assert_eq!(t.entries()[5 % size], queues[5 % usize::from(n)]);
                let weights: Vec<(u16, u32)> = queues.iter().map(|&q| (q, 1)).collect();
                assert!(balanced(&t, &weights), "size {size}, {n} queues");
                let w = IndirectionTable::weighted(size, &weights).unwrap();
                assert!(balanced(&w, &weights), "weighted: size {size}, {n} queues");
                assert_eq!(w.counts(), t.counts());
            }
        }
    }

    #[test]
    fn hash_low_bits_select_bucket() {
        let t = IndirectionTable::even(128, &[0, 1, 2]).unwrap();
        assert_eq!(t.bucket_for_hash(0x51cc_c178), 0x78);
        assert_eq!(t.queue_for_hash(0x51cc_c178), (0x78 % 3) as u16);
        assert_eq!(t.bucket_for_hash(u32::MAX), 127);
        let one = IndirectionTable::new(vec![7]).unwrap();
        assert_eq!(one.queue_for_hash(0xdead_beef), 7);
    }

    #[test]
    fn weighted_follows_weights_and_interleaves() {
        let t = IndirectionTable::weighted(128, &[(0, 3), (1, 1)]).unwrap();
        assert_eq!(t.counts(), BTreeMap::from([(0, 96), (1, 32)]));
        // Interleaved: every aligned group of 4 buckets holds exactly one bucket of queue 1.
        for chunk in t.entries().chunks(4) {
            assert_eq!(chunk.iter().filter(|&&q| q == 1).count(), 1);
        }
        // 64 buckets at 1:1:1: shares 21.33 each; one queue gets 22.
        let t = IndirectionTable::weighted(64, &[(4, 1), (5, 1), (6, 1)]).unwrap();
        assert_eq!(t.counts(), BTreeMap::from([(4, 22), (5, 21), (6, 21)]));
        let t = IndirectionTable::weighted(8, &[(0, 1), (1, 0), (2, 1)]).unwrap();
        assert_eq!(t.counts(), BTreeMap::from([(0, 4), (2, 4)]));
        assert!(t.to_string().contains("    0:     0     2     0     2"));
    }

    #[test]
    fn diff_is_exactly_the_differing_entries() {
        let a = IndirectionTable::even(8, &[0, 1]).unwrap();
        let b = IndirectionTable::new(vec![0, 1, 0, 2, 0, 1, 3, 1]).unwrap();
        assert_eq!(
            a.diff(&b).unwrap(),
            vec![
                EntryChange {
                    bucket: 3,
                    from: 1,
                    to: 2
                },
                EntryChange {
                    bucket: 6,
                    from: 0,
                    to: 3
                },
            ]
        );
        assert!(a.diff(&a).unwrap().is_empty());
        let c = IndirectionTable::even(16, &[0]).unwrap();
        assert_eq!(
            a.diff(&c),
            Err(Error::TableSizeMismatch {
                ours: 8,
                theirs: 16
            })
        );
    }

    #[test]
    fn rebalance_adding_a_queue_moves_only_its_share() {
        let t = IndirectionTable::even(128, &[0, 1, 2, 3]).unwrap();
        let r = t.rebalance_minimal_even(&[0, 1, 2, 3, 4]).unwrap();
        // 128 / 5 = 25.6: three queues get 26, two get 25. Queue 4 needs 25 or 26 buckets,
        // and only those move: the old queues keep the extra buckets.
        assert_eq!(r.counts()[&4], 25);
        assert_eq!(t.diff(&r).unwrap().len(), 25);
        assert!(r.diff(&t).unwrap().iter().all(|c| c.from == 4));
        // Removing a queue moves exactly its buckets.
        let s = t.rebalance_minimal_even(&[0, 1, 3]).unwrap();
        assert_eq!(t.diff(&s).unwrap().len(), 32);
        assert!(t.diff(&s).unwrap().iter().all(|c| c.from == 2));
        // Already balanced: nothing moves.
        assert_eq!(t.rebalance_minimal_even(&[3, 2, 1, 0]).unwrap(), t);
    }

    /// The smallest number of changed entries over every balanced table of the queues in
    /// `weights`, by exhaustive search (small sizes only).
    fn brute_force_min_moves(table: &IndirectionTable, weights: &[(u16, u32)]) -> usize {
        let n = weights.len();
        let size = table.size();
        let mut best = usize::MAX;
        let mut digits = vec![0usize; size];
        loop {
            let entries: Vec<u16> = digits.iter().map(|&d| weights[d].0).collect();
            let candidate = IndirectionTable::new(entries).unwrap();
            if balanced(&candidate, weights) {
                best = best.min(table.diff(&candidate).unwrap().len());
            }
            // Next base-n number.
            let mut i = 0;
            while i < size && digits[i] == n - 1 {
                digits[i] = 0;
                i += 1;
            }
            if i == size {
                return best;
            }
            digits[i] += 1;
        }
    }

    proptest! {
        #[test]
        fn prop_weighted_is_balanced(
            size_log in 0u32..12,
            weights in proptest::collection::btree_map(any::<u16>(), 0u32..1000, 1..70),
        ) {
            prop_assume!(weights.values().any(|&w| w > 0));
            let weights: Vec<(u16, u32)> = weights.into_iter().collect();
            let t = IndirectionTable::weighted(1 << size_log, &weights).unwrap();
            prop_assert!(balanced(&t, &weights));
        }

        #[test]
        fn prop_rebalance_is_balanced_and_keeps_balanced_queues(
            size_log in 0u32..12,
            old in proptest::collection::vec(0u16..16, 2048),
            weights in proptest::collection::btree_map(0u16..24, 1u32..5, 1..20),
        ) {
            let t = IndirectionTable::new(old[..1 << size_log].to_vec()).unwrap();
            let weights: Vec<(u16, u32)> = weights.into_iter().collect();
            let r = t.rebalance_minimal(&weights).unwrap();
            prop_assert!(balanced(&r, &weights));
            // A moved bucket always leaves a queue that is over its share (or gone), and
            // the number of moves is the excess over the new quotas.
            let before = t.counts();
            let after = r.counts();
            let excess: usize = before
                .iter()
                .map(|(q, &n)| n.saturating_sub(after.get(q).copied().unwrap_or(0)))
                .sum();
            prop_assert_eq!(t.diff(&r).unwrap().len(), excess);
        }

        #[test]
        fn prop_rebalance_moves_the_fewest_buckets(
            entries in proptest::collection::vec(0u16..4, 8),
            weights in proptest::collection::btree_map(0u16..4, 1u32..4, 1..=3),
        ) {
            let table = IndirectionTable::new(entries).unwrap();
            let weights: Vec<(u16, u32)> = weights.into_iter().collect();
            let r = table.rebalance_minimal(&weights).unwrap();
            prop_assert!(balanced(&r, &weights));
            prop_assert_eq!(
                table.diff(&r).unwrap().len(),
                brute_force_min_moves(&table, &weights)
            );
        }

        #[test]
        fn prop_diff_applied_gives_target(
            a in proptest::collection::vec(0u16..8, 64),
            b in proptest::collection::vec(0u16..8, 64),
        ) {
            let a = IndirectionTable::new(a).unwrap();
            let b = IndirectionTable::new(b).unwrap();
            let changes = a.diff(&b).unwrap();
            let differing = a.entries().iter().zip(b.entries()).filter(|(x, y)| x != y).count();
            prop_assert_eq!(changes.len(), differing);
            let mut entries = a.entries().to_vec();
            for c in &changes {
                prop_assert_eq!(entries[c.bucket], c.from);
                entries[c.bucket] = c.to;
            }
            prop_assert_eq!(&entries[..], b.entries());
        }
    }
}
