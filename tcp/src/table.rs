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
//! The table stores only the 4-byte slab index; the tuple lives once, in
//! the connection, and the caller's `tuple_of` reads it back to compare
//! (and to rehash when the table grows). An entry costs 5 bytes (index
//! plus control byte) at up to 7/8 load.

use crate::flow_key::FlowKey;
use crate::siphash::SipHasher24;
use foldhash::fast::FoldHasher;
use foldhash::SharedSeed;
use hashbrown::HashTable;
use std::hash::Hasher;

/// 4-tuple → slab index.
pub(crate) struct ConnTable {
    map: HashTable<u32>,
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
            .field("len", &self.map.len())
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
            map: HashTable::new(),
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

    /// The slab index of the connection with tuple `t` (hash `hash`).
    #[inline]
    pub(crate) fn find<'a>(
        &self,
        hash: u64,
        t: &FlowKey,
        tuple_of: impl Fn(u32) -> &'a FlowKey,
    ) -> Option<u32> {
        self.map.find(hash, |&i| tuple_of(i) == t).copied()
    }

    /// The entry that probably holds the connection with this hash: the
    /// first whose tag matches, unverified (no connection's tuple is
    /// read). For prefetching: a collision only wastes the prefetch.
    #[inline]
    pub(crate) fn probable(&self, hash: u64) -> Option<u32> {
        self.map.find(hash, |_| true).copied()
    }

    /// Adds slab index `idx`, whose tuple hashes to `hash` (the caller
    /// checked that no entry has its tuple).
    pub(crate) fn insert<'a>(
        &mut self,
        hash: u64,
        idx: u32,
        tuple_of: impl Fn(u32) -> &'a FlowKey,
    ) {
        let key = &self.key;
        let rehash = |&i: &u32| hash_tuple(key, tuple_of(i));
        self.map.insert_unique(hash, idx, rehash);
    }

    /// Removes slab index `idx`, whose tuple hashes to `hash`.
    pub(crate) fn remove(&mut self, hash: u64, idx: u32) {
        if let Ok(entry) = self.map.find_entry(hash, |&i| i == idx) {
            entry.remove();
        }
    }

    /// Entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
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
            t.insert(h, i as u32, |j| &tuples[j as usize]);
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
}
