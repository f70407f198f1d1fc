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

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;

use flowlane_wire::EthernetAddress;

/// Entries per set.
const WAYS: usize = 4;
/// Sets (a power of two): 4 096 entries in all.
const SETS: usize = 1024;

/// The sightings of one worker.
#[derive(Debug, Clone)]
pub(crate) struct Sightings {
    ways: Box<[Option<(IpAddr, EthernetAddress)>]>,
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

    fn ways(&self, set: usize) -> &[Option<(IpAddr, EthernetAddress)>] {
        &self.ways[set * WAYS..(set + 1) * WAYS]
    }

    /// Records that `ip` sent from `mac`: its own sighting is updated, or
    /// the set's oldest one replaced.
    pub(crate) fn note(&mut self, ip: IpAddr, mac: EthernetAddress) {
        let set = self.set(ip);
        let base = set * WAYS;
        let way = match self
            .ways(set)
            .iter()
            .position(|w| w.is_some_and(|(t, _)| t == ip))
        {
            Some(w) => w,
            None => {
                let w = usize::from(self.next[set]);
                self.next[set] = ((w + 1) % WAYS) as u8;
                w
            }
        };
        self.ways[base + way] = Some((ip, mac));
    }

    /// The MAC `ip` was last seen sending from, if still kept.
    pub(crate) fn get(&self, ip: IpAddr) -> Option<EthernetAddress> {
        self.ways(self.set(ip))
            .iter()
            .find_map(|w| w.filter(|(t, _)| *t == ip).map(|(_, mac)| mac))
    }

    /// Forgets `ip`'s sighting (it became a confirmed entry).
    pub(crate) fn forget(&mut self, ip: IpAddr) {
        let base = self.set(ip) * WAYS;
        for w in &mut self.ways[base..base + WAYS] {
            if w.is_some_and(|(t, _)| t == ip) {
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
            s.note(ip, mac(i as u32));
        }
        let kept = ips
            .iter()
            .enumerate()
            .filter(|&(i, &ip)| s.get(ip) == Some(mac(i as u32)))
            .count();
        assert!(kept >= 507, "kept {kept} of 512 sightings");
    }

    #[test]
    fn a_new_mac_replaces_the_old_and_forget_forgets() {
        let mut s = Sightings::new();
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        s.note(ip, mac(1));
        s.note(ip, mac(2));
        assert_eq!(s.get(ip), Some(mac(2)));
        s.forget(ip);
        assert_eq!(s.get(ip), None);
    }

    /// A flood keeps replacing sightings, oldest first, in every set; it
    /// never grows the store.
    #[test]
    fn a_flood_replaces_the_oldest_and_holds_no_more_memory() {
        let mut s = Sightings::new();
        let first = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1));
        s.note(first, mac(1));
        for i in 0..100_000u32 {
            s.note(IpAddr::V4(Ipv4Addr::from(0xc000_0000 + i)), mac(i));
        }
        assert_eq!(s.get(first), None, "the oldest went first");
        assert_eq!(s.ways.len(), SETS * WAYS);
        let last = IpAddr::V4(Ipv4Addr::from(0xc000_0000 + 99_999));
        assert_eq!(s.get(last), Some(mac(99_999)));
    }
}
