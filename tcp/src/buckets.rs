//! Connections kept per RSS bucket (one entry of the NIC's indirection
//! table): every slab entry (a connection, or a TIME-WAIT record) is on
//! its bucket's list, so that a bucket's connections are one unit that
//! the rebalancer can count, export and hand to another core (IX's flow
//! groups; RSS++'s per-bucket flow tables).
//!
//! The lists are intrusive and doubly linked through the slab entries'
//! [`Link`]s, so joining and leaving cost O(1) and no allocation, and
//! walking a bucket costs its own length.

/// End of a list.
pub(crate) const NIL: u32 = u32::MAX;

/// A slab entry's place on its bucket's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    /// The entry's bucket.
    pub(crate) bucket: u16,
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

impl Link {
    /// On no list.
    pub(crate) const NONE: Link = Link {
        bucket: 0,
        prev: NIL,
        next: NIL,
    };
}

/// One list head per bucket, over the entries of one slab.
#[derive(Debug, Clone)]
pub(crate) struct BucketLists {
    heads: Vec<u32>,
    lens: Vec<u32>,
}

impl BucketLists {
    /// `count` empty lists.
    pub(crate) fn new(count: usize) -> Self {
        BucketLists {
            heads: vec![NIL; count],
            lens: vec![0; count],
        }
    }

    /// Entries on bucket `b`'s list.
    pub(crate) fn len(&self, b: u16) -> u32 {
        self.lens.get(usize::from(b)).copied().unwrap_or(0)
    }

    /// The first entry of bucket `b`'s list.
    pub(crate) fn head(&self, b: u16) -> u32 {
        self.heads.get(usize::from(b)).copied().unwrap_or(NIL)
    }

    /// Puts entry `idx` of `slab` (whose link `link` reaches) at the head
    /// of bucket `b`'s list.
    pub(crate) fn push<T>(
        &mut self,
        slab: &mut [T],
        link: fn(&mut T) -> &mut Link,
        idx: u32,
        b: u16,
    ) {
        let head = self.heads[usize::from(b)];
        *link(&mut slab[idx as usize]) = Link {
            bucket: b,
            prev: NIL,
            next: head,
        };
        if head != NIL {
            link(&mut slab[head as usize]).prev = idx;
        }
        self.heads[usize::from(b)] = idx;
        self.lens[usize::from(b)] += 1;
    }

    /// Takes entry `idx` off its list.
    pub(crate) fn unlink<T>(&mut self, slab: &mut [T], link: fn(&mut T) -> &mut Link, idx: u32) {
        let l = *link(&mut slab[idx as usize]);
        if l.prev == NIL {
            self.heads[usize::from(l.bucket)] = l.next;
        } else {
            link(&mut slab[l.prev as usize]).next = l.next;
        }
        if l.next != NIL {
            link(&mut slab[l.next as usize]).prev = l.prev;
        }
        self.lens[usize::from(l.bucket)] -= 1;
        *link(&mut slab[idx as usize]) = Link::NONE;
    }

    /// Checks every list against the links (tests only): each entry for
    /// which `on_list` holds is on its bucket's list exactly once, in a
    /// consistent chain, and the lengths add up.
    #[cfg(test)]
    pub(crate) fn check<T>(
        &self,
        slab: &mut [T],
        link: fn(&mut T) -> &mut Link,
        on_list: impl Fn(&T) -> bool,
    ) -> Result<(), String> {
        let mut seen = vec![false; slab.len()];
        for b in 0..self.heads.len() {
            let (mut idx, mut prev, mut n) = (self.heads[b], NIL, 0u32);
            while idx != NIL {
                let i = idx as usize;
                if seen[i] || !on_list(&slab[i]) {
                    return Err(format!("bucket {b}: entry {i} twice or not live"));
                }
                seen[i] = true;
                let l = *link(&mut slab[i]);
                if usize::from(l.bucket) != b || l.prev != prev {
                    return Err(format!("bucket {b}: entry {i} badly linked: {l:?}"));
                }
                prev = idx;
                idx = l.next;
                n += 1;
            }
            if n != self.lens[b] {
                return Err(format!("bucket {b}: {n} entries, length {}", self.lens[b]));
            }
        }
        for (i, e) in slab.iter().enumerate() {
            if on_list(e) && !seen[i] {
                return Err(format!("entry {i} on no bucket list"));
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
        // Middle, head and tail of bucket 1's list (3, 1, 0).
        for i in [1, 3, 0] {
            lists.unlink(&mut slab, link, i);
            slab[i as usize].live = false;
            lists.check(&mut slab, link, |e| e.live).unwrap();
        }
        assert_eq!(lists.len(1), 0);
        assert_eq!(lists.head(1), NIL);
        assert_eq!(lists.head(2), 2);
    }
}
