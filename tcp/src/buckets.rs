//! Connections kept per RSS bucket (one entry of the NIC's indirection
//! table): every slab entry (a connection, or a TIME-WAIT record) is in
//! its bucket's list, so that a bucket's connections are one unit that
//! the rebalancer can count, export and hand to another core (IX's flow
//! groups; RSS++'s per-bucket flow tables).
//!
//! A bucket's list is an array of slab indices, and each entry's [`Link`]
//! holds its bucket and its place in that array: joining is a push,
//! leaving a swap with the array's last (whose link then moves), both
//! O(1) and touching no entry but the moved one. Walking a bucket reads
//! its array, not a chain through the slab: a move's listing of a
//! bucket's connections is independent loads that overlap, where a linked
//! list made it one cache miss after another (350 ns a connection from a
//! cold cache on the test VM).

/// No entry.
pub(crate) const NIL: u32 = u32::MAX;

/// A slab entry's place in its bucket's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    /// The entry's bucket.
    pub(crate) bucket: u16,
    /// Its index in the bucket's array; [`NIL`] when in no list.
    pub(crate) pos: u32,
}

impl Link {
    /// In no list.
    pub(crate) const NONE: Link = Link {
        bucket: 0,
        pos: NIL,
    };
}

/// One list per bucket, over the entries of one slab.
#[derive(Debug, Clone)]
pub(crate) struct BucketLists {
    members: Vec<Vec<u32>>,
}

impl BucketLists {
    /// `count` empty lists.
    pub(crate) fn new(count: usize) -> Self {
        BucketLists {
            members: vec![Vec::new(); count],
        }
    }

    /// Entries in bucket `b`'s list.
    pub(crate) fn len(&self, b: u16) -> u32 {
        self.members
            .get(usize::from(b))
            .map_or(0, |m| m.len() as u32)
    }

    /// Bucket `b`'s entries, last listed first: [`BucketLists::first`]
    /// takes them from the end, and a walk in listing order goes back to
    /// front.
    pub(crate) fn entries(&self, b: u16) -> &[u32] {
        self.members.get(usize::from(b)).map_or(&[], Vec::as_slice)
    }

    /// The entry of bucket `b` listed first: the one whose leaving moves
    /// no other ([`NIL`] when the bucket is empty).
    pub(crate) fn first(&self, b: u16) -> u32 {
        self.members
            .get(usize::from(b))
            .and_then(|m| m.last().copied())
            .unwrap_or(NIL)
    }

    /// Room in bucket `b`'s list for `additional` more entries (a bucket
    /// arriving whole: one allocation, not a doubling per power of two).
    pub(crate) fn reserve(&mut self, b: u16, additional: usize) {
        if let Some(m) = self.members.get_mut(usize::from(b)) {
            m.reserve(additional);
        }
    }

    /// Puts entry `idx` of `slab` (whose link `link` reaches) in bucket
    /// `b`'s list.
    pub(crate) fn push<T>(
        &mut self,
        slab: &mut [T],
        link: fn(&mut T) -> &mut Link,
        idx: u32,
        b: u16,
    ) {
        let m = &mut self.members[usize::from(b)];
        *link(&mut slab[idx as usize]) = Link {
            bucket: b,
            pos: m.len() as u32,
        };
        m.push(idx);
    }

    /// Takes entry `idx` out of its list: the list's last takes its place.
    pub(crate) fn unlink<T>(&mut self, slab: &mut [T], link: fn(&mut T) -> &mut Link, idx: u32) {
        let l = std::mem::replace(link(&mut slab[idx as usize]), Link::NONE);
        let m = &mut self.members[usize::from(l.bucket)];
        m.swap_remove(l.pos as usize);
        if let Some(&moved) = m.get(l.pos as usize) {
            link(&mut slab[moved as usize]).pos = l.pos;
        }
    }

    /// Checks every list against the links (tests only): each entry for
    /// which `on_list` holds is in its bucket's list exactly once, where
    /// its link says.
    #[cfg(test)]
    pub(crate) fn check<T>(
        &self,
        slab: &mut [T],
        link: fn(&mut T) -> &mut Link,
        on_list: impl Fn(&T) -> bool,
    ) -> Result<(), String> {
        let mut seen = vec![false; slab.len()];
        for (b, m) in self.members.iter().enumerate() {
            for (pos, &idx) in m.iter().enumerate() {
                let i = idx as usize;
                if seen.get(i) != Some(&false) || !on_list(&slab[i]) {
                    return Err(format!("bucket {b}: entry {i} twice or not live"));
                }
                seen[i] = true;
                let l = *link(&mut slab[i]);
                if usize::from(l.bucket) != b || l.pos as usize != pos {
                    return Err(format!("bucket {b}: entry {i} at {pos}, linked {l:?}"));
                }
            }
        }
        for (i, e) in slab.iter().enumerate() {
            if on_list(e) && !seen[i] {
                return Err(format!("entry {i} in no bucket's list"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy)]
    struct E {
        live: bool,
        link: Link,
    }

    fn link(e: &mut E) -> &mut Link {
        &mut e.link
    }

    #[test]
    fn push_and_unlink_keep_the_lists_whole() {
        let mut slab = vec![
            E {
                live: false,
                link: Link::NONE
            };
            8
        ];
        let mut lists = BucketLists::new(3);
        for (i, b) in [(0, 1), (1, 1), (2, 2), (3, 1), (4, 0)] {
            slab[i as usize].live = true;
            lists.push(&mut slab, link, i, b);
        }
        lists.check(&mut slab, link, |e| e.live).unwrap();
        assert_eq!((lists.len(0), lists.len(1), lists.len(2)), (1, 3, 1));
        assert_eq!(lists.entries(1), [0, 1, 3]);
        assert_eq!(lists.first(1), 3);
        // Front, back (the first listed) and the last left of bucket 1.
        for i in [0, 1, 3] {
            lists.unlink(&mut slab, link, i);
            slab[i as usize].live = false;
            lists.check(&mut slab, link, |e| e.live).unwrap();
        }
        assert_eq!(lists.len(1), 0);
        assert_eq!(lists.first(1), NIL);
        assert_eq!(lists.first(2), 2);
        // An entry moved into a freed place is found there.
        for i in [5, 6, 7] {
            slab[i as usize].live = true;
            lists.push(&mut slab, link, i, 0);
        }
        lists.unlink(&mut slab, link, 4);
        slab[4].live = false;
        lists.check(&mut slab, link, |e| e.live).unwrap();
        assert_eq!(lists.entries(0), [7, 5, 6]);
    }
}
