//! A worker's neighbour table: the Ethernet address of each IPv4 and IPv6
//! peer.
//!
//! ARP and neighbour discovery stay with the kernel (the XDP program
//! passes them), so the table
//! never sends requests; a missing entry makes the caller drop the segment
//! and TCP retransmit it. Entries come from:
//!
//! - configuration (`--neighbor`): pinned, never evicted or outranked;
//! - the kernel's neighbour table, read once at start: as if confirmed
//!   then (below), so that an entry the kernel held stale, or a peer whose
//!   MAC changed since, gives way like a learned one;
//! - *confirmed* learning: the source MAC of a frame that the TCP stack
//!   took for an established connection (the handshake's last segment, or
//!   data it delivered). Only a peer that holds a connection's sequence
//!   numbers gets there, so spoofed SYNs and blind segments never do (issue
//!   11). At most [`MAX_CONFIRMED`] such entries; past that the least
//!   recently used one goes ([`NeighborStats::evicted`]);
//! - *tentative* sightings: the source MAC of any other verified frame
//!   (a SYN, say), so that the SYN-ACK, a cookie or an RST can be sent
//!   back before the peer is confirmed. They live in a small
//!   set-associative array indexed by a keyed hash
//!   (`sightings.rs`): a flood of spoofed sources only replaces
//!   other sightings, costs no memory, and never replaces a confirmed
//!   entry.
//!
//! A confirmed entry stays fresh while frames keep coming from the same
//! address pair; one silent for [`STALE_AFTER`] gives way to a newer
//! sighting, so that a peer whose MAC really changed (a failover) can
//! connect again. Like an ARP entry going stale in the kernel, that is the
//! window an on-link spoofer has. Peers behind a router share the
//! router's MAC through [`Neighbors::set_default`].
//!
//! One table per worker: no sharing, no locks. The last entry used is
//! cached, so the frames of one busy peer skip the hash.

use std::collections::HashMap;
use std::hash::RandomState;
use std::net::IpAddr;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_wire::EthernetAddress;

use crate::sightings::Sightings;

/// Confirmed (learned) entries kept; configured ones do not count.
pub const MAX_CONFIRMED: usize = 4096;
/// How long a confirmed entry outranks a different, newer sighting
/// without a frame from it (the kernel's `base_reachable_time` is 30 s).
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// `Entry::fresh_until` of a configured entry.
const PINNED: Instant = Instant::from_nanos(u64::MAX);

#[derive(Debug, Clone, Copy)]
struct Entry {
    ip: IpAddr,
    mac: EthernetAddress,
    /// Until when it outranks tentative sightings ([`PINNED`]: always).
    fresh_until: Instant,
    /// When it was last used or refreshed (for eviction).
    used: Instant,
}

/// What a worker knows of one peer ([`Neighbors::known`]), handed to the
/// worker its connections move to ([`Neighbors::adopt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// The peer.
    pub ip: IpAddr,
    /// Its Ethernet address.
    pub mac: EthernetAddress,
    /// Confirmed (else only sighted).
    pub confirmed: bool,
}

/// What the table refused or dropped, for the worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighborStats {
    /// Confirmed entries evicted, least recently used first, to make room.
    pub evicted: u64,
    /// Frames whose source MAC differed from their address's confirmed
    /// entry (kept as a sighting only: a spoofer, or a peer that moved).
    pub mismatched: u64,
}

/// IP address → Ethernet address, per worker.
#[derive(Debug, Clone)]
pub struct Neighbors {
    entries: Vec<Entry>,
    /// Keyed by a per-table random SipHash key: peers choose the
    /// addresses.
    index: HashMap<IpAddr, u32, RandomState>,
    /// Entries that are learned (not pinned).
    confirmed: usize,
    /// The entry used last (`u32::MAX`: none).
    last: u32,
    tentative: Sightings,
    default: Option<EthernetAddress>,
    stats: NeighborStats,
}

impl Default for Neighbors {
    fn default() -> Self {
        Neighbors::new()
    }
}

impl Neighbors {
    /// An empty table.
    pub fn new() -> Neighbors {
        Neighbors {
            entries: Vec::new(),
            index: HashMap::with_hasher(RandomState::new()),
            confirmed: 0,
            last: u32::MAX,
            tentative: Sightings::new(),
            default: None,
            stats: NeighborStats::default(),
        }
    }

    /// Adds a static entry given as `IP=aa:bb:cc:dd:ee:ff` (the `--neighbor`
    /// flag of flowlane's TCP commands); the error says what was expected.
    pub fn insert_spec(&mut self, spec: &str) -> Result<(), String> {
        let parsed = spec
            .split_once('=')
            .and_then(|(ip, mac)| Some((ip.trim().parse::<IpAddr>().ok()?, parse_mac(mac)?)));
        let Some((ip, mac)) = parsed else {
            return Err(format!(
                "bad --neighbor {spec:?}: expected IP=aa:bb:cc:dd:ee:ff"
            ));
        };
        self.insert(ip, mac);
        Ok(())
    }

    /// Adds or replaces a configured entry: pinned, never evicted or
    /// outranked.
    pub fn insert(&mut self, ip: impl Into<IpAddr>, mac: EthernetAddress) {
        let ip = ip.into();
        self.put(ip, mac, PINNED, Instant::ZERO);
    }

    /// The address to use for IPs with no entry (a router's), if any.
    pub fn set_default(&mut self, mac: Option<EthernetAddress>) {
        self.default = mac;
    }

    /// Notes a verified frame from `ip` sent by `mac`. Refreshes the entry
    /// when the pair is the confirmed one (the common case: the last peer
    /// again, no hashing); otherwise keeps it as a tentative sighting.
    #[inline]
    pub fn observe(&mut self, now: Instant, ip: impl Into<IpAddr>, mac: EthernetAddress) {
        let ip = ip.into();
        if let Some(e) = self.entries.get_mut(self.last as usize) {
            if e.ip == ip && e.mac == mac {
                e.refresh(now);
                return;
            }
        }
        self.observe_slow(now, ip, mac);
    }

    #[cold]
    fn observe_slow(&mut self, now: Instant, ip: IpAddr, mac: EthernetAddress) {
        if !mac.is_unicast() {
            return;
        }
        if let Some(&i) = self.index.get(&ip) {
            let e = &mut self.entries[i as usize];
            if e.mac == mac {
                e.refresh(now);
                self.last = i;
                return;
            }
            self.stats.mismatched += 1;
        }
        self.tentative.note(ip, mac);
    }

    /// Whether a frame from `ip` sent by `mac` would confirm anything new
    /// (cheap: the caller asks before it looks up the connection).
    #[inline]
    pub fn needs_confirmation(&self, ip: impl Into<IpAddr>, mac: EthernetAddress) -> bool {
        let ip = ip.into();
        match self.entries.get(self.last as usize) {
            Some(e) if e.ip == ip => e.mac != mac,
            _ => self
                .index
                .get(&ip)
                .is_none_or(|&i| self.entries[i as usize].mac != mac),
        }
    }

    /// Records `mac` for `ip` as confirmed: a frame from that pair was
    /// taken by an established connection. A configured entry is left as
    /// it is.
    pub fn confirm(&mut self, now: Instant, ip: impl Into<IpAddr>, mac: EthernetAddress) {
        let ip = ip.into();
        if !mac.is_unicast() {
            return;
        }
        if let Some(&i) = self.index.get(&ip) {
            if self.entries[i as usize].fresh_until == PINNED {
                return;
            }
        }
        self.tentative.forget(ip);
        self.put(ip, mac, now + STALE_AFTER, now);
    }

    fn put(&mut self, ip: IpAddr, mac: EthernetAddress, fresh_until: Instant, used: Instant) {
        let entry = Entry {
            ip,
            mac,
            fresh_until,
            used,
        };
        let pinned = fresh_until == PINNED;
        if let Some(&i) = self.index.get(&ip) {
            let old = std::mem::replace(&mut self.entries[i as usize], entry);
            match (old.fresh_until == PINNED, pinned) {
                (true, false) => self.confirmed += 1,
                (false, true) => self.confirmed -= 1,
                _ => {}
            }
            self.last = i;
            return;
        }
        if !pinned && self.confirmed >= MAX_CONFIRMED {
            self.evict_one();
        }
        let i = self.entries.len() as u32;
        self.entries.push(entry);
        self.index.insert(ip, i);
        self.confirmed += usize::from(!pinned);
        self.last = i;
    }

    /// Drops the least recently used confirmed entry (a scan: only when a
    /// new peer is confirmed with the table full, which takes a handshake).
    fn evict_one(&mut self) {
        let victim = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.fresh_until != PINNED)
            .min_by_key(|(_, e)| e.used)
            .map(|(i, _)| i);
        let Some(i) = victim else {
            return;
        };
        let gone = self.entries.swap_remove(i);
        self.index.remove(&gone.ip);
        if let Some(moved) = self.entries.get(i) {
            self.index.insert(moved.ip, i as u32);
        }
        self.confirmed -= 1;
        self.last = u32::MAX;
        self.stats.evicted += 1;
    }

    /// The Ethernet address for `ip` at `now`: its entry while fresh (or
    /// pinned), else a newer sighting, else the stale entry, else the
    /// default.
    #[inline]
    pub fn lookup(&mut self, now: Instant, ip: impl Into<IpAddr>) -> Option<EthernetAddress> {
        let ip = ip.into();
        if let Some(e) = self.entries.get_mut(self.last as usize) {
            if e.ip == ip && now < e.fresh_until {
                e.used = now;
                return Some(e.mac);
            }
        }
        self.lookup_slow(now, ip)
    }

    #[cold]
    fn lookup_slow(&mut self, now: Instant, ip: IpAddr) -> Option<EthernetAddress> {
        let entry = self.index.get(&ip).copied();
        if let Some(i) = entry {
            let e = &mut self.entries[i as usize];
            if now < e.fresh_until {
                e.used = now;
                self.last = i;
                return Some(e.mac);
            }
        }
        self.tentative
            .get(ip)
            .or_else(|| entry.map(|i| self.entries[i as usize].mac))
            .or(self.default)
    }

    /// What this table knows of `ip`, for a worker taking over connections
    /// to it (a bucket move): its confirmed entry, or its sighting. The
    /// default is not included (every worker has the same).
    pub fn known(&self, ip: impl Into<IpAddr>) -> Option<Known> {
        let ip = ip.into();
        if let Some(&i) = self.index.get(&ip) {
            let mac = self.entries[i as usize].mac;
            return Some(Known {
                ip,
                mac,
                confirmed: true,
            });
        }
        self.tentative.get(ip).map(|mac| Known {
            ip,
            mac,
            confirmed: false,
        })
    }

    /// Takes what another worker knew of a peer whose connections move
    /// here, so that the first segment they send does not wait for a frame
    /// from the peer. A confirmed entry there is confirmed here unless
    /// this table has a fresh one of its own; a sighting stays a sighting.
    pub fn adopt(&mut self, now: Instant, k: Known) {
        let fresh_here = self
            .index
            .get(&k.ip)
            .is_some_and(|&i| now < self.entries[i as usize].fresh_until);
        match (k.confirmed, fresh_here) {
            (true, false) => self.confirm(now, k.ip, k.mac),
            (false, false) => self.tentative.note(k.ip, k.mac),
            (_, true) => {}
        }
    }

    /// Whether `ip` has an entry (configured or confirmed).
    pub fn contains(&self, ip: impl Into<IpAddr>) -> bool {
        let ip = ip.into();
        self.index.contains_key(&ip)
    }

    /// Entries (configured and confirmed; sightings not counted).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the table refused or dropped so far.
    pub fn stats(&self) -> NeighborStats {
        self.stats
    }
}

impl Entry {
    #[inline]
    fn refresh(&mut self, now: Instant) {
        self.used = now;
        if self.fresh_until != PINNED {
            self.fresh_until = now + STALE_AFTER;
        }
    }
}

/// Parses `aa:bb:cc:dd:ee:ff` ([`crate::iface::parse_mac`], typed).
pub fn parse_mac(text: &str) -> Option<EthernetAddress> {
    crate::iface::parse_mac(text).map(EthernetAddress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn neighbor_specs() {
        let mut n = Neighbors::new();
        n.insert_spec("10.99.0.2=02:00:0a:63:00:02").unwrap();
        assert_eq!(
            n.lookup(Instant::ZERO, "10.99.0.2".parse::<IpAddr>().unwrap()),
            Some(EthernetAddress([2, 0, 0x0a, 0x63, 0, 2]))
        );
        for bad in [
            "10.99.0.2",
            "10.99.0.x=02:00:0a:63:00:02",
            "10.99.0.2=02:00:0a:63:00",
            "10.99.0.2=02:00:0a:63:00:02:03",
        ] {
            let e = n.insert_spec(bad).unwrap_err();
            assert!(e.contains("expected IP=aa:bb:cc:dd:ee:ff"), "{e}");
        }
    }

    const MAC_A: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    const MAC_B: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
    const SPOOF: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x66]);

    fn at(secs: u64) -> Instant {
        Instant::from_millis(secs * 1000)
    }

    #[test]
    fn sightings_answer_until_confirmed_and_fall_back_to_default() {
        let mut n = Neighbors::new();
        let (a, c) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 9));
        // A SYN's sender: enough to answer it, not an entry.
        n.observe(at(1), a, MAC_A);
        assert_eq!(n.lookup(at(1), a), Some(MAC_A));
        assert_eq!(n.len(), 0);
        // Multicast and broadcast sources are never kept.
        n.observe(at(1), c, EthernetAddress::BROADCAST);
        assert_eq!(n.lookup(at(1), c), None);
        n.set_default(Some(MAC_B));
        assert_eq!(n.lookup(at(1), c), Some(MAC_B));
        assert!(n.needs_confirmation(a, MAC_A));
        n.confirm(at(1), a, MAC_A);
        assert!(!n.needs_confirmation(a, MAC_A));
        assert_eq!((n.len(), n.lookup(at(2), a)), (1, Some(MAC_A)));
    }

    #[test]
    fn a_spoofed_sender_does_not_replace_a_confirmed_peer() {
        let mut n = Neighbors::new();
        let a = Ipv4Addr::new(10, 0, 0, 1);
        n.confirm(at(1), a, MAC_A);
        // SYNs from the peer's address with another MAC, while the peer
        // keeps talking.
        for t in 2..100 {
            n.observe(at(t), a, SPOOF);
            n.observe(at(t), a, MAC_A);
            assert_eq!(n.lookup(at(t), a), Some(MAC_A));
        }
        assert_eq!(n.stats().mismatched, 98);
        // A peer silent for longer than STALE_AFTER gives way to the newer
        // sighting (a MAC that really changed), until it is confirmed again.
        n.observe(at(140), a, MAC_B);
        assert_eq!(n.lookup(at(140), a), Some(MAC_B));
        n.confirm(at(141), a, MAC_B);
        n.observe(at(142), a, SPOOF);
        assert_eq!(n.lookup(at(142), a), Some(MAC_B));
    }

    #[test]
    fn confirmed_entries_are_capped_and_the_least_recently_used_goes() {
        let mut n = Neighbors::new();
        n.insert(Ipv4Addr::new(192, 0, 2, 1), MAC_B);
        let ip = |i: usize| Ipv4Addr::from(0x0a00_0000 + i as u32);
        for i in 0..MAX_CONFIRMED {
            n.confirm(at(1) + Duration::from_millis(i as u64), ip(i), MAC_A);
        }
        // Peer 0 is in use; peer 1 is now the least recently used.
        assert_eq!(n.lookup(at(10), ip(0)), Some(MAC_A));
        n.confirm(at(11), ip(MAX_CONFIRMED), MAC_A);
        assert_eq!(n.len(), MAX_CONFIRMED + 1, "the configured entry stays");
        assert_eq!(n.stats().evicted, 1);
        assert!(n.contains(ip(0)) && !n.contains(ip(1)));
        assert!(n.contains(Ipv4Addr::new(192, 0, 2, 1)));
        // Sightings of a flood of sources take no room at all.
        for i in 0..100_000 {
            n.observe(at(12), ip(1_000_000 + i), SPOOF);
        }
        assert_eq!(n.len(), MAX_CONFIRMED + 1);
        for i in 0..MAX_CONFIRMED {
            assert!(n.lookup(at(12), ip(i)) != Some(SPOOF));
        }
    }

    #[test]
    fn a_moving_peer_keeps_what_the_old_worker_knew() {
        let (mut old, mut new) = (Neighbors::new(), Neighbors::new());
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        old.confirm(at(1), a, MAC_A);
        old.observe(at(1), b, MAC_B);
        for ip in [a, b] {
            new.adopt(at(2), old.known(ip).unwrap());
        }
        assert_eq!(new.lookup(at(2), a), Some(MAC_A));
        assert_eq!(new.lookup(at(2), b), Some(MAC_B));
        assert!(new.contains(a) && !new.contains(b), "a sighting stays one");
        assert_eq!(old.known(Ipv4Addr::new(10, 0, 0, 3)), None);
    }

    #[test]
    fn a_configured_entry_is_never_replaced() {
        let mut n = Neighbors::new();
        let a = Ipv4Addr::new(10, 0, 0, 1);
        n.insert_spec("10.0.0.1=02:00:00:00:00:01").unwrap();
        n.confirm(at(1), a, SPOOF);
        n.observe(at(1000), a, SPOOF);
        assert_eq!(n.lookup(at(1000), a), Some(MAC_A));
    }

    #[test]
    fn mac_parsing() {
        assert!(parse_mac("aa:bb:cc:dd:ee").is_none());
        assert!(parse_mac("aa:bb:cc:dd:ee:ff:00").is_none());
        assert!(parse_mac("zz:bb:cc:dd:ee:ff").is_none());
        assert_eq!(
            parse_mac("02:00:00:00:00:0a"),
            Some(EthernetAddress([2, 0, 0, 0, 0, 10]))
        );
    }
}
