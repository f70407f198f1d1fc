//! Tentative neighbour sightings: the source MAC of verified frames from
//! peers not (yet) confirmed, such as a SYN's, kept so that the SYN-ACK, a
//! cookie or an RST can be sent back.
//!
//! A fixed array of sets of [`WAYS`] entries, the set chosen by a keyed hash
//! of the address (peers choose their addresses): a flood of spoofed
//! sources only replaces other sightings and costs no memory. Within a set
//! the oldest sighting gives way. A direct-mapped array lost about 2.3 % of
//! a SYN flood's answers on the bed (BENCHMARKS.md, TCP hardening step 8):
//! two sources of one receive pass that shared a slot left only the later
//! one's MAC by the time the pass's replies were built. With four ways a
//! pass of 256 frames from random sources needs five in one of 1 024 sets
//! to lose one.
//!
//! Each sighting carries when it was last seen, so that the table uses it
//! over a stale confirmed entry only if it came after that entry's last
//! frame (`Neighbors::lookup`). 32 bytes a way: 128 KiB a worker.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;

use flowlane_tcp::time::Instant;
use flowlane_wire::EthernetAddress;

/// Entries per set.
const WAYS: usize = 4;
/// Sets (a power of two): 4 096 entries in all.
const SETS: usize = 1024;

/// One sighting: `ip` sent from `mac`, last at `seen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sighting {
    ip: IpAddr,
    /// The sender's Ethernet address.
    pub(crate) mac: EthernetAddress,
    /// When it was last seen.
    pub(crate) seen: Instant,
}

/// The sightings of one worker.
#[derive(Debug, Clone)]
pub(crate) struct Sightings {
    ways: Box<[Option<Sighting>]>,
    /// Per set, the way the next new sighting takes (the oldest).
    next: Box<[u8]>,
    key: RandomState,
}

impl Sightings {
    /// An empty store with a random key.
    pub(crate) fn new() -> Self {
        Sightings {
            ways: vec![None; SETS * WAYS].into_boxed_slice(),
            next: vec![0; SETS].into_boxed_slice(),
            key: RandomState::new(),
        }
    }

    fn set(&self, ip: IpAddr) -> usize {
        self.key.hash_one(ip) as usize & (SETS - 1)
    }

    fn ways(&self, set: usize) -> &[Option<Sighting>] {
        &self.ways[set * WAYS..(set + 1) * WAYS]
    }

    /// Records that `ip` sent from `mac` at `now`: its own sighting is
    /// updated, or the set's oldest one replaced.
    pub(crate) fn note(&mut self, now: Instant, ip: IpAddr, mac: EthernetAddress) {
        let set = self.set(ip);
        let base = set * WAYS;
        let way = match self
            .ways(set)
            .iter()
            .position(|w| w.is_some_and(|w| w.ip == ip))
        {
            Some(w) => w,
            None => {
                let w = usize::from(self.next[set]);
                self.next[set] = ((w + 1) % WAYS) as u8;
                w
            }
        };
        self.ways[base + way] = Some(Sighting { ip, mac, seen: now });
    }

    /// The MAC `ip` was last seen sending from, and when, if still kept.
    pub(crate) fn get(&self, ip: IpAddr) -> Option<Sighting> {
        self.ways(self.set(ip))
            .iter()
            .find_map(|w| w.filter(|w| w.ip == ip))
    }

    /// Forgets `ip`'s sighting (it became a confirmed entry).
    pub(crate) fn forget(&mut self, ip: IpAddr) {
        let base = self.set(ip) * WAYS;
        for w in &mut self.ways[base..base + WAYS] {
            if w.is_some_and(|w| w.ip == ip) {
                *w = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn mac(i: u32) -> EthernetAddress {
        let b = i.to_be_bytes();
        EthernetAddress([2, 0, b[0], b[1], b[2], b[3]])
    }

    /// A receive pass of 512 SYNs from distinct sources (twice the data
    /// path's pass): the replies built after it find almost every sender.
    /// Direct-mapped over the same 4 096 entries, 30 to 40 are lost (39 in
    /// one run).
    #[test]
    fn a_pass_of_distinct_sources_keeps_nearly_every_sighting() {
        let mut s = Sightings::new();
        let ips: Vec<IpAddr> = (0..512u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i * 7919)))
            .collect();
        for (i, &ip) in ips.iter().enumerate() {
            s.note(Instant::ZERO, ip, mac(i as u32));
        }
        let kept = ips
            .iter()
            .enumerate()
            .filter(|&(i, &ip)| s.get(ip).map(|w| w.mac) == Some(mac(i as u32)))
            .count();
        assert!(kept >= 507, "kept {kept} of 512 sightings");
    }

    #[test]
    fn a_new_mac_replaces_the_old_and_forget_forgets() {
        let mut s = Sightings::new();
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        s.note(Instant::from_millis(1), ip, mac(1));
        s.note(Instant::from_millis(2), ip, mac(2));
        let w = s.get(ip).unwrap();
        assert_eq!((w.mac, w.seen), (mac(2), Instant::from_millis(2)));
        s.forget(ip);
        assert_eq!(s.get(ip), None);
    }

    /// A flood keeps replacing sightings, oldest first, in every set; it
    /// never grows the store.
    #[test]
    fn a_flood_replaces_the_oldest_and_holds_no_more_memory() {
        let mut s = Sightings::new();
        let first = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1));
        s.note(Instant::ZERO, first, mac(1));
        for i in 0..100_000u32 {
            s.note(
                Instant::ZERO,
                IpAddr::V4(Ipv4Addr::from(0xc000_0000 + i)),
                mac(i),
            );
        }
        assert_eq!(s.get(first), None, "the oldest went first");
        assert_eq!(s.ways.len(), SETS * WAYS);
        // The timestamp costs 9 bytes a way: 128 KiB in all, still fixed.
        assert_eq!(std::mem::size_of_val(&*s.ways), 128 * 1024);
        let last = IpAddr::V4(Ipv4Addr::from(0xc000_0000 + 99_999));
        assert_eq!(s.get(last).map(|w| w.mac), Some(mac(99_999)));
    }
}
