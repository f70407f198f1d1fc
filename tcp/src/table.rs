//! The connection table: a 4-tuple finds its connection's slab index.
//!
//! Remote hosts choose the keys (their addresses and ports), so the hash is
//! keyed with a per-stack secret (128 bits derived from
//! [`Config::isn_secret`](crate::Config::isn_secret)): without it nobody can
//! aim many tuples at one bucket and turn lookups into scans. The hash is
//! foldhash (a folded multiply of each word with secret-dependent values),
//! the same trade as Linux's established table, which hashes with jhash
//! under a random secret: it defeats precomputed collisions, not an
//! attacker who can recover the key by timing many lookups. A keyed PRF
//! (SipHash-1-3) measured 120 more instructions per received segment than
//! this (callgrind, `sim_bulk 1 4000000`), a tenth of the whole receive
//! path, so it is not used on the per-segment path.
//!
//! The table is open addressing with linear probing over 8-byte entries:
//! the hash's high 32 bits (the tag, which also gives the entry's home
//! position) and the slab index. The tuple lives once, in the connection,
//! and the caller's `tuple_of` reads it back to compare when a tag matches
//! (a false match costs one compare: 2^-32 per entry probed). A lookup
//! reads one cache line of entries (eight of them) in all but rare cases,
//! and [`ConnTable::entry_address`] names it before the lookup, so that
//! the data path can prefetch it a frame earlier still (a Swiss table, as
//! hashbrown's, reads a line of control bytes and then a line of entries,
//! and names neither). At most half the entries are used (1.5 entries
//! probed to find a connection, 2.5 to miss, on average); removal shifts
//! the entries after it back (no tombstones), and growth needs no tuple,
//! since each entry's tag places it.

use crate::flow_key::FlowKey;
use crate::siphash::SipHasher24;
use foldhash::fast::FoldHasher;
use foldhash::SharedSeed;
use std::hash::Hasher;

/// A slab index, tagged with the high half of its tuple's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
struct Entry {
    tag: u32,
    idx: u32,
}

/// The index of no slab: an empty entry.
const NONE: u32 = u32::MAX;
const EMPTY: Entry = Entry { tag: 0, idx: NONE };
/// Entries of a table's first allocation.
const MIN_ENTRIES: usize = 16;

/// An entry's tag: the hash's high half (the low half's bits went into
/// foldhash's last multiply as much as the high, so either is uniform).
#[inline]
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// 4-tuple → slab index.
pub(crate) struct ConnTable {
    /// A power of two of them (none before the first insertion), at most
    /// half used.
    entries: Box<[Entry]>,
    len: usize,
    key: Key,
}

/// The table's hash key.
struct Key {
    per_hasher: u64,
    shared: SharedSeed,
}

impl std::fmt::Debug for ConnTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnTable")
            .field("len", &self.len)
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl ConnTable {
    /// An empty table whose hash key is derived from `secret` (the stack's
    /// ISN secret; a separate derivation, so the table's key reveals
    /// nothing about the ISNs and the other way round).
    pub(crate) fn new(secret: &[u8; 16]) -> Self {
        let derive = |label: &[u8]| {
            let mut h = SipHasher24::new(secret);
            h.write(label);
            h.finish()
        };
        ConnTable {
            entries: Box::new([]),
            len: 0,
            key: Key {
                per_hasher: derive(b"flowlane connection table 0"),
                shared: SharedSeed::from_u64(derive(b"flowlane connection table 1")),
            },
        }
    }

    /// The keyed hash of a tuple.
    #[inline]
    pub(crate) fn hash(&self, t: &FlowKey) -> u64 {
        hash_tuple(&self.key, t)
    }

    /// The entries' index mask and the home position of `hash`; `None`
    /// before the first insertion.
    #[inline]
    fn home(&self, hash: u64) -> Option<(usize, usize)> {
        let mask = self.entries.len().checked_sub(1)?;
        Some((mask, tag_of(hash) as usize & mask))
    }

    /// The first slab index from `hash`'s home position on whose tag
    /// matches and that `is_it` accepts; `None` at the first empty entry.
    #[inline]
    fn probe(&self, hash: u64, is_it: impl Fn(u32) -> bool) -> Option<u32> {
        let (mask, mut i) = self.home(hash)?;
        let tag = tag_of(hash);
        loop {
            let e = self.entries[i];
            if e.idx == NONE {
                return None;
            }
            if e.tag == tag && is_it(e.idx) {
                return Some(e.idx);
            }
            i = (i + 1) & mask;
        }
    }

    /// The slab index of the connection with tuple `t` (hash `hash`).
    #[inline]
    pub(crate) fn find<'a>(
        &self,
        hash: u64,
        t: &FlowKey,
        tuple_of: impl Fn(u32) -> &'a FlowKey,
    ) -> Option<u32> {
        self.probe(hash, |idx| tuple_of(idx) == t)
    }

    /// The entry that probably holds the connection with this hash: the
    /// first whose tag matches, unverified (no connection's tuple is
    /// read). For prefetching: a collision only wastes the prefetch.
    #[inline]
    pub(crate) fn probable(&self, hash: u64) -> Option<u32> {
        self.probe(hash, |_| true)
    }

    /// Where a lookup of `hash` starts reading (the entry at its home
    /// position), for a caller that prefetches it; `None` while the table
    /// has no entries. Reads nothing.
    #[inline]
    pub(crate) fn entry_address(&self, hash: u64) -> Option<*const u8> {
        let (_, i) = self.home(hash)?;
        Some(self.entries[i..].as_ptr().cast())
    }

    /// Adds slab index `idx`, whose tuple hashes to `hash` (the caller
    /// checked that no entry has its tuple).
    pub(crate) fn insert(&mut self, hash: u64, idx: u32) {
        debug_assert_ne!(idx, NONE);
        if 2 * (self.len + 1) > self.entries.len() {
            self.grow();
        }
        self.place(Entry {
            tag: tag_of(hash),
            idx,
        });
        self.len += 1;
    }

    /// Puts `e` in the first empty entry from its home position on.
    fn place(&mut self, e: Entry) {
        let mask = self.entries.len() - 1;
        let mut i = e.tag as usize & mask;
        while self.entries[i].idx != NONE {
            i = (i + 1) & mask;
        }
        self.entries[i] = e;
    }

    /// Doubles the entries (each placed again by its tag).
    #[cold]
    fn grow(&mut self) {
        let n = (2 * self.entries.len()).max(MIN_ENTRIES);
        let old = std::mem::replace(&mut self.entries, vec![EMPTY; n].into_boxed_slice());
        for &e in old.iter().filter(|e| e.idx != NONE) {
            self.place(e);
        }
    }

    /// Removes slab index `idx`, whose tuple hashes to `hash`: the entries
    /// after it that may move closer to their home position move into the
    /// gap, so that every lookup still reaches its entry before an empty
    /// one (Knuth, TAOCP vol. 3, §6.4, Algorithm R).
    pub(crate) fn remove(&mut self, hash: u64, idx: u32) {
        let Some((mask, mut i)) = self.home(hash) else {
            return;
        };
        loop {
            match self.entries[i].idx {
                NONE => return,
                x if x == idx => break,
                _ => i = (i + 1) & mask,
            }
        }
        let mut gap = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let e = self.entries[j];
            if e.idx == NONE {
                break;
            }
            // The gap lies between `e`'s home and `e` (cyclically): a
            // lookup of `e` would pass it, so `e` fills it.
            let home = e.tag as usize & mask;
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(gap) & mask {
                self.entries[gap] = e;
                gap = j;
            }
        }
        self.entries[gap] = EMPTY;
        self.len -= 1;
    }

    /// Entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// The keyed hash of a tuple ([`FlowKey::hash_into`]: two words for
/// IPv4, five for IPv6).
#[inline]
fn hash_tuple(key: &Key, t: &FlowKey) -> u64 {
    let mut h = FoldHasher::with_seed(key.per_hasher, &key.shared);
    t.hash_into(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FourTuple;
    use std::net::{IpAddr, SocketAddr};

    fn tuple(i: u32) -> FlowKey {
        let remote: IpAddr = if i % 3 == 0 {
            "2001:db8::7".parse().unwrap()
        } else {
            IpAddr::V4((0x0a00_0000 + i / 50_000).into())
        };
        let local: IpAddr = if remote.is_ipv4() {
            "10.9.9.9".parse().unwrap()
        } else {
            "2001:db8::1".parse().unwrap()
        };
        FlowKey::of(&FourTuple {
            local: SocketAddr::new(local, 80),
            remote: SocketAddr::new(remote, 1024 + (i % 50_000) as u16),
        })
    }

    #[test]
    fn finds_what_was_inserted_across_growth_and_removal() {
        let mut t = ConnTable::new(&[3; 16]);
        let tuples: Vec<FlowKey> = (0..20_000).map(tuple).collect();
        for (i, tu) in tuples.iter().enumerate() {
            let h = t.hash(tu);
            assert_eq!(t.find(h, tu, |j| &tuples[j as usize]), None);
            t.insert(h, i as u32);
        }
        assert_eq!(t.len(), tuples.len());
        for (i, tu) in tuples.iter().enumerate().step_by(2) {
            t.remove(t.hash(tu), i as u32);
        }
        for (i, tu) in tuples.iter().enumerate() {
            let want = (i % 2 == 1).then_some(i as u32);
            assert_eq!(t.find(t.hash(tu), tu, |j| &tuples[j as usize]), want);
        }
    }

    #[test]
    fn hash_is_keyed_and_separates_families() {
        let (a, b) = (ConnTable::new(&[1; 16]), ConnTable::new(&[2; 16]));
        let v4 = tuple(1);
        assert_ne!(a.hash(&v4), b.hash(&v4), "depends on the secret");
        let mapped_of = |s: SocketAddr| match s.ip() {
            IpAddr::V4(x) => SocketAddr::new(IpAddr::V6(x.to_ipv6_mapped()), s.port()),
            IpAddr::V6(_) => s,
        };
        let t = v4.tuple();
        let mapped = FlowKey::of(&FourTuple {
            local: mapped_of(t.local),
            remote: mapped_of(t.remote),
        });
        assert_ne!(a.hash(&v4), a.hash(&mapped), "IPv4 is not its mapped IPv6");
        let swapped = FlowKey::of(&FourTuple {
            local: t.remote,
            remote: t.local,
        });
        assert_ne!(a.hash(&v4), a.hash(&swapped), "direction matters");
    }

    /// Operations of the model test: hashes come from a small set, so that
    /// entries collide and cluster, and tags repeat.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u8),
        Remove(u8),
        Find(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (any::<u8>(), any::<u8>()).prop_map(|(k, h)| Op::Insert(k, h)),
            2 => any::<u8>().prop_map(Op::Remove),
            2 => any::<u8>().prop_map(Op::Find),
        ]
    }

    /// A hash with few distinct home positions and tags: `h`'s low bits
    /// pick the home, the high nibble repeats tags across keys.
    fn crowded_hash(h: u8) -> u64 {
        u64::from(h & 0xf0) << 40 | u64::from(h & 0x0f) << 32 | u64::from(h)
    }

    use proptest::prelude::*;

    proptest! {
        /// Against a map: what was inserted is found until removed, through
        /// growth, clustering, equal tags and backward-shift removal.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut t = ConnTable::new(&[5; 16]);
            // Key k is slab index k; its tuple is tuple(k).
            let tuples: Vec<FlowKey> = (0..256).map(tuple).collect();
            let mut model: std::collections::HashMap<u8, u64> = Default::default();
            for op in ops {
                match op {
                    Op::Insert(k, h) => {
                        if let std::collections::hash_map::Entry::Vacant(v) = model.entry(k) {
                            let hash = crowded_hash(h);
                            v.insert(hash);
                            t.insert(hash, u32::from(k));
                        }
                    }
                    Op::Remove(k) => {
                        if let Some(hash) = model.remove(&k) {
                            t.remove(hash, u32::from(k));
                        }
                    }
                    Op::Find(k) => {
                        let hash = model.get(&k).copied().unwrap_or(crowded_hash(k));
                        let found = t.find(hash, &tuples[usize::from(k)], |j| &tuples[j as usize]);
                        prop_assert_eq!(found, model.contains_key(&k).then_some(u32::from(k)));
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert!(2 * t.len() <= t.entries.len().max(1));
                for (&k, &hash) in &model {
                    let found = t.find(hash, &tuples[usize::from(k)], |j| &tuples[j as usize]);
                    prop_assert_eq!(found, Some(u32::from(k)));
                    prop_assert!(t.probable(hash).is_some());
                }
            }
        }
    }

    #[test]
    fn entry_address_names_the_home_entry() {
        let mut t = ConnTable::new(&[1; 16]);
        assert!(t.entry_address(7).is_none());
        t.insert(3 << 32, 9);
        let base = t.entries.as_ptr() as usize;
        assert_eq!(t.entry_address(3 << 32).unwrap() as usize, base + 3 * 8);
        assert_eq!(std::mem::size_of::<Entry>(), 8);
    }
}
