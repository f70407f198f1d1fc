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
//!   11). A connection never takes its address over from a fresh entry
//!   with another MAC ([`Confirmation::Refused`]): the table is per
//!   address, and one peer holding a connection from an address says
//!   nothing of another's. At most [`MAX_CONFIRMED`] such entries; past
//!   that the least recently used one goes ([`NeighborStats::evicted`]);
//! - *tentative* sightings: the source MAC of any other verified frame
//!   (a SYN, say), and when it came, so that the SYN-ACK, a cookie or an
//!   RST can be sent back before the peer is confirmed. They live in a
//!   small set-associative array indexed by a keyed hash
//!   (`sightings.rs`): a flood of spoofed sources only replaces
//!   other sightings, costs no memory, and never replaces a confirmed
//!   entry;
//! - the kernel again, while the table has nothing recent for a peer it
//!   sends to ([`NeighborRefresh`]): the service's thread makes the kernel
//!   resolve the address and reads its entry, which replaces a stale one.
//!
//! A confirmed entry stays fresh while frames keep coming from the same
//! address pair; one silent for [`STALE_AFTER`] gives way to a sighting
//! that came after its last frame, so that a peer whose MAC really changed
//! (a failover) can connect again. Like an ARP entry going stale in the
//! kernel, that is the window an on-link spoofer has. A sighting from
//! before the entry's last frame never does: the peer talked after it.
//!
//! Peers are on-link: a peer behind a router is reached only through what
//! its frames taught the table (their source MAC, the router's), or an
//! entry configured for it; an active open to an address the kernel's
//! neighbour table does not resolve finds no MAC (`no_neighbor`), and ends
//! as timed out once the kernel has had its time to resolve it
//! (`tcp_handler::UNRESOLVED_GIVE_UP`, `neighbor_unresolved`). A service's
//! peer off the interface's networks is refused at its start
//! (`tcp_service::neighbors`).
//!
//! One table per worker: no sharing, no locks (but the refresh's, off the
//! data path's common case). The last entry used is cached, so the frames
//! of one busy peer skip the hash.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};

use flowlane_tcp::time::{Duration, Instant};
use flowlane_wire::EthernetAddress;

use crate::sightings::Sightings;

/// Confirmed (learned) entries kept; configured ones do not count.
pub const MAX_CONFIRMED: usize = 4096;
/// How long a confirmed entry outranks a different, newer sighting
/// without a frame from it (the kernel's `base_reachable_time` is 30 s).
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// How often a table asks the kernel about one address at most.
pub const ASK_EVERY: Duration = Duration::from_secs(1);
/// Addresses whose last ask a table remembers (direct-mapped by its keyed
/// hash: a collision only lets an address ask again sooner).
const ASK_SLOTS: usize = 64;
/// Asks waiting for the service's thread, at most (past it a table asks
/// again at its next lookup).
pub const MAX_ASKED: usize = 64;
/// The kernel's answers kept for the tables to take (a table that falls
/// further behind asks again).
pub const MAX_ANSWERS: usize = 256;
/// `Entry::fresh_until` of a configured entry.
const PINNED: Instant = Instant::from_nanos(u64::MAX);

#[derive(Debug, Clone, Copy)]
struct Entry {
    ip: IpAddr,
    mac: EthernetAddress,
    /// Until when it outranks tentative sightings ([`PINNED`]: always):
    /// [`STALE_AFTER`] after the last frame from the pair.
    fresh_until: Instant,
    /// When it was last used or refreshed (for eviction).
    used: Instant,
}

/// What a worker knows of one peer ([`Neighbors::known`]), handed to the
/// worker its connections move to ([`Neighbors::adopt`]). The workers of
/// a service share one clock, so the instants mean the same there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// The peer.
    pub ip: IpAddr,
    /// Its confirmed entry: the Ethernet address, and until when it is
    /// fresh (stale already, maybe).
    pub confirmed: Option<(EthernetAddress, Instant)>,
    /// Its sighting: the Ethernet address, and when it was seen.
    pub sighted: Option<(EthernetAddress, Instant)>,
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

/// What [`Neighbors::confirm`] made of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Confirmation {
    /// The pair is its address's confirmed entry now.
    Taken,
    /// Refused: the address's confirmed entry has another MAC and is
    /// fresh (a frame from it within [`STALE_AFTER`]). A MAC that really
    /// changed is taken once the old pair has been silent that long.
    Refused,
    /// Left alone: the address is configured, or the MAC is a group's.
    Ignored,
}

/// The addresses a service's workers want the kernel to resolve again,
/// and the kernel's answers: shared by the workers' tables
/// ([`Neighbors::refresh_through`]) and the service's thread that primes
/// and reads the kernel's table (`kernel_neighbors::Refresher`). Bounded:
/// [`MAX_ASKED`] asks wait at most, the last [`MAX_ANSWERS`] answers are
/// kept. A worker never waits for its locks: it asks or takes answers at
/// its next lookup instead.
#[derive(Debug, Default)]
pub struct NeighborRefresh {
    asked: Mutex<Asked>,
    /// Wakes the service's thread: an ask, or the end.
    wake: Condvar,
    answers: Mutex<VecDeque<Answer>>,
    /// The sequence number of the last answer (0: none yet).
    latest: AtomicU64,
}

#[derive(Debug, Default)]
struct Asked {
    ips: Vec<IpAddr>,
    stopping: bool,
}

#[derive(Debug, Clone, Copy)]
struct Answer {
    seq: u64,
    ip: IpAddr,
    mac: EthernetAddress,
}

/// A lock taken without waiting: `None` while another thread holds it.
fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl NeighborRefresh {
    /// Nothing asked, nothing answered.
    pub fn new() -> NeighborRefresh {
        NeighborRefresh::default()
    }

    /// Queues `ip` for the service's thread (a worker: never waits).
    /// False when the queue is full, busy or stopped: ask again later.
    fn ask(&self, ip: IpAddr) -> bool {
        let Some(mut a) = try_lock(&self.asked) else {
            return false;
        };
        if a.stopping || (a.ips.len() >= MAX_ASKED && !a.ips.contains(&ip)) {
            return false;
        }
        if !a.ips.contains(&ip) {
            a.ips.push(ip);
        }
        self.wake.notify_one();
        true
    }

    /// The service's thread: waits up to `timeout` for asks and takes
    /// them (maybe none); `None` once [`NeighborRefresh::stop`] was called.
    pub fn wait_asked(&self, timeout: std::time::Duration) -> Option<Vec<IpAddr>> {
        let a = lock(&self.asked);
        let (mut a, _) = self
            .wake
            .wait_timeout_while(a, timeout, |a| a.ips.is_empty() && !a.stopping)
            .unwrap_or_else(|e| e.into_inner());
        (!a.stopping).then(|| std::mem::take(&mut a.ips))
    }

    /// The service's thread: waits `d` unless stopped meanwhile; false
    /// once stopped.
    pub fn pause(&self, d: std::time::Duration) -> bool {
        let a = lock(&self.asked);
        let (a, _) = self
            .wake
            .wait_timeout_while(a, d, |a| !a.stopping)
            .unwrap_or_else(|e| e.into_inner());
        !a.stopping
    }

    /// Ends the service's thread's waits, now and later.
    pub fn stop(&self) {
        lock(&self.asked).stopping = true;
        self.wake.notify_all();
    }

    /// The service's thread: what the kernel's table says of the asked
    /// addresses, for the tables to take at their next lookup.
    pub fn answer(&self, found: impl IntoIterator<Item = (IpAddr, EthernetAddress)>) {
        let mut answers = lock(&self.answers);
        let mut seq = self.latest.load(Ordering::Relaxed);
        for (ip, mac) in found {
            seq += 1;
            answers.push_back(Answer { seq, ip, mac });
            if answers.len() > MAX_ANSWERS {
                answers.pop_front();
            }
        }
        self.latest.store(seq, Ordering::Release);
    }

    /// The answers after sequence number `seen` (a worker: never waits):
    /// the last one's number, or `None` while the lock is busy.
    fn answers_after(&self, seen: u64, out: &mut Vec<(IpAddr, EthernetAddress)>) -> Option<u64> {
        let answers = try_lock(&self.answers)?;
        out.extend(
            answers
                .iter()
                .filter(|a| a.seq > seen)
                .map(|a| (a.ip, a.mac)),
        );
        Some(answers.back().map_or(seen, |a| a.seq))
    }
}

/// A table's side of [`NeighborRefresh`].
#[derive(Debug, Clone)]
struct Refresh {
    shared: Arc<NeighborRefresh>,
    /// Answers taken up to this sequence number.
    seen: u64,
    /// Recent asks (address, when), by [`Refresh::slot`].
    asked: Box<[Option<(IpAddr, Instant)>]>,
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
    /// Where the table asks the kernel about peers (None: it does not).
    refresh: Option<Refresh>,
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
            refresh: None,
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

    /// Has the table (and its clones: every worker's) ask `shared` to
    /// resolve a peer again when a lookup finds nothing recent for it:
    /// no entry, or a stale one with no newer sighting, or a sighting
    /// older than [`STALE_AFTER`]. At most once every [`ASK_EVERY`] per
    /// address; the answers replace stale entries at later lookups.
    pub fn refresh_through(&mut self, shared: Arc<NeighborRefresh>) {
        self.refresh = Some(Refresh {
            seen: shared.latest.load(Ordering::Acquire),
            shared,
            asked: vec![None; ASK_SLOTS].into_boxed_slice(),
        });
    }

    /// Notes a verified frame from `ip` sent by `mac`. Refreshes the entry
    /// when the pair is the confirmed one (the common case: the last peer
    /// again, no hashing); otherwise keeps it as a tentative sighting.
    /// Always inlined: the receive path calls it for every frame, and the
    /// compiler's own choice left it out of line there (+29 instructions a
    /// frame in rx_cost).
    #[inline(always)]
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
        self.tentative.note(now, ip, mac);
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

    /// Records `mac` for `ip` as confirmed at `now`: a frame from that
    /// pair was taken by an established connection. Refused while the
    /// address's entry has another MAC and is fresh; a configured entry is
    /// left as it is.
    pub fn confirm(
        &mut self,
        now: Instant,
        ip: impl Into<IpAddr>,
        mac: EthernetAddress,
    ) -> Confirmation {
        let ip = ip.into();
        if !mac.is_unicast() {
            return Confirmation::Ignored;
        }
        if let Some(&i) = self.index.get(&ip) {
            let e = &self.entries[i as usize];
            if e.fresh_until == PINNED {
                return Confirmation::Ignored;
            }
            if e.mac != mac && now < e.fresh_until {
                return Confirmation::Refused;
            }
        }
        self.tentative.forget(ip);
        self.put(ip, mac, now + STALE_AFTER, now);
        Confirmation::Taken
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
    /// pinned), else a sighting that came after the entry's last frame,
    /// else the stale entry. With nothing from the last [`STALE_AFTER`]
    /// (or nothing at all), the kernel is asked again
    /// ([`Neighbors::refresh_through`]).
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
        self.take_answers(now);
        let entry = self.index.get(&ip).copied();
        if let Some(i) = entry {
            let e = &mut self.entries[i as usize];
            if now < e.fresh_until {
                e.used = now;
                self.last = i;
                return Some(e.mac);
            }
        }
        let stale = entry.map(|i| {
            let e = &self.entries[i as usize];
            (e.mac, e.last_seen())
        });
        let best = match (self.tentative.get(ip), stale) {
            (Some(s), Some((_, last))) if s.seen > last => Some((s.mac, s.seen)),
            (Some(s), None) => Some((s.mac, s.seen)),
            (_, stale) => stale,
        };
        if best.is_none_or(|(_, seen)| now.saturating_since(seen) >= STALE_AFTER) {
            self.ask(now, ip);
        }
        best.map(|(mac, _)| mac)
    }

    /// Where `ip`'s last ask is remembered.
    fn slot(&self, ip: IpAddr) -> usize {
        self.index.hasher().hash_one(ip) as usize % ASK_SLOTS
    }

    /// Asks the kernel about `ip`, unless this table did less than
    /// [`ASK_EVERY`] ago.
    fn ask(&mut self, now: Instant, ip: IpAddr) {
        if self.refresh.is_none() {
            return;
        }
        let slot = self.slot(ip);
        let Some(r) = self.refresh.as_mut() else {
            return;
        };
        if r.asked[slot].is_some_and(|(a, at)| a == ip && now.saturating_since(at) < ASK_EVERY) {
            return;
        }
        if r.shared.ask(ip) {
            r.asked[slot] = Some((ip, now));
        }
    }

    /// Takes the kernel's answers given since the last look.
    fn take_answers(&mut self, now: Instant) {
        let Some(r) = self.refresh.as_mut() else {
            return;
        };
        if r.shared.latest.load(Ordering::Acquire) == r.seen {
            return;
        }
        let mut got = Vec::new();
        let Some(seen) = r.shared.answers_after(r.seen, &mut got) else {
            return;
        };
        r.seen = seen;
        for (ip, mac) in got {
            self.kernel_says(now, ip, mac);
        }
    }

    /// The kernel's entry for `ip`, read at `now`: replaces the MAC of a
    /// stale entry (which stays stale: the kernel's word is no frame from
    /// the peer, and a sighting since the entry's last frame still wins),
    /// and becomes a stale entry for an address this table asked about
    /// and has none for. A fresh or configured entry is kept: frames from
    /// it came since the ask.
    fn kernel_says(&mut self, now: Instant, ip: IpAddr, mac: EthernetAddress) {
        if !mac.is_unicast() {
            return;
        }
        if let Some(&i) = self.index.get(&ip) {
            let e = &mut self.entries[i as usize];
            if now >= e.fresh_until {
                e.mac = mac;
            }
            return;
        }
        let slot = self.slot(ip);
        let asked = self
            .refresh
            .as_ref()
            .is_some_and(|r| r.asked[slot].is_some_and(|(a, _)| a == ip));
        if asked {
            self.put(ip, mac, now, now);
        }
    }

    /// What this table knows of `ip`, for a worker taking over connections
    /// to it (a bucket move): its confirmed entry, with until when it is
    /// fresh, and its sighting, with when it was seen. None for a
    /// configured entry (every worker has the same) and for an unknown
    /// address.
    pub fn known(&self, ip: impl Into<IpAddr>) -> Option<Known> {
        let ip = ip.into();
        let confirmed = match self.index.get(&ip) {
            Some(&i) if self.entries[i as usize].fresh_until == PINNED => return None,
            Some(&i) => {
                let e = &self.entries[i as usize];
                Some((e.mac, e.fresh_until))
            }
            None => None,
        };
        let sighted = self.tentative.get(ip).map(|s| (s.mac, s.seen));
        (confirmed.is_some() || sighted.is_some()).then_some(Known {
            ip,
            confirmed,
            sighted,
        })
    }

    /// Takes what another worker knew of a peer whose connections move
    /// here, so that the first segment they send does not wait for a frame
    /// from the peer, and is sent where the old worker would have sent it.
    /// Its confirmed entry replaces this table's unless this one's stays
    /// fresh longer (fresh or stale as it was there: a move revives
    /// nothing); its sighting is taken unless this table has a newer one.
    pub fn adopt(&mut self, now: Instant, k: Known) {
        if let Some((mac, fresh_until)) = k
            .confirmed
            .filter(|&(mac, f)| mac.is_unicast() && f != PINNED)
        {
            let here = self
                .index
                .get(&k.ip)
                .map(|&i| self.entries[i as usize].fresh_until);
            match here {
                Some(PINNED) => {}
                Some(f) if f >= fresh_until => {}
                _ => self.put(k.ip, mac, fresh_until, now),
            }
        }
        if let Some((mac, seen)) = k.sighted.filter(|(mac, _)| mac.is_unicast()) {
            if self.tentative.get(k.ip).is_none_or(|s| s.seen < seen) {
                self.tentative.note(seen, k.ip, mac);
            }
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

    /// When the last frame from the pair came (as far as the entry can
    /// tell: [`STALE_AFTER`] before it goes stale).
    fn last_seen(&self) -> Instant {
        Instant::from_nanos(
            self.fresh_until
                .as_nanos()
                .saturating_sub(STALE_AFTER.as_nanos()),
        )
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
    fn sightings_answer_until_confirmed() {
        let mut n = Neighbors::new();
        let (a, c) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 9));
        // A SYN's sender: enough to answer it, not an entry.
        n.observe(at(1), a, MAC_A);
        assert_eq!(n.lookup(at(1), a), Some(MAC_A));
        assert_eq!(n.len(), 0);
        // Multicast and broadcast sources are never kept.
        n.observe(at(1), c, EthernetAddress::BROADCAST);
        assert_eq!(n.lookup(at(1), c), None);
        assert!(n.needs_confirmation(a, MAC_A));
        assert_eq!(n.confirm(at(1), a, MAC_A), Confirmation::Taken);
        assert!(!n.needs_confirmation(a, MAC_A));
        assert_eq!((n.len(), n.lookup(at(2), a)), (1, Some(MAC_A)));
    }

    #[test]
    fn a_spoofed_sender_does_not_replace_a_confirmed_peer() {
        let mut n = Neighbors::new();
        let a = Ipv4Addr::new(10, 0, 0, 1);
        assert_eq!(n.confirm(at(1), a, MAC_A), Confirmation::Taken);
        // SYNs from the peer's address with another MAC, while the peer
        // keeps talking.
        for t in 2..100 {
            n.observe(at(t), a, SPOOF);
            n.observe(at(t), a, MAC_A);
            assert_eq!(n.lookup(at(t), a), Some(MAC_A));
        }
        assert_eq!(n.stats().mismatched, 98);
        // Silent for longer than STALE_AFTER: no spoofed frame came after
        // the peer's last, so the peer's entry is still the one used.
        assert_eq!(n.lookup(at(140), a), Some(MAC_A));
        // A newer sighting (a MAC that really changed) is used, until it
        // is confirmed again.
        n.observe(at(140), a, MAC_B);
        assert_eq!(n.lookup(at(140), a), Some(MAC_B));
        assert_eq!(n.confirm(at(141), a, MAC_B), Confirmation::Taken);
        n.observe(at(142), a, SPOOF);
        assert_eq!(n.lookup(at(142), a), Some(MAC_B));
    }

    /// A sighting from before the confirmed peer's last frame (a spoofed
    /// SYN while the peer talked) never takes over once the peer falls
    /// silent.
    #[test]
    fn a_sighting_older_than_the_peers_last_frame_is_not_used() {
        let mut n = Neighbors::new();
        let p = Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(n.confirm(at(1), p, MAC_A), Confirmation::Taken);
        n.observe(at(2), p, SPOOF);
        assert_eq!(n.stats().mismatched, 1);
        for t in 3..=10 {
            n.observe(at(t), p, MAC_A);
        }
        assert_eq!(n.lookup(at(41), p), Some(MAC_A));
        assert_eq!(n.lookup(at(3600), p), Some(MAC_A));
        // One after it does.
        n.observe(at(3601), p, SPOOF);
        assert_eq!(n.lookup(at(3601), p), Some(SPOOF));
    }

    /// The table is per address: while the address's entry is fresh (its
    /// pair talked within STALE_AFTER), another MAC's connection from the
    /// same address is refused; once the pair has been silent that long,
    /// the new MAC is taken.
    #[test]
    fn a_fresh_entry_is_not_taken_over_by_another_connection() {
        let mut n = Neighbors::new();
        let p = Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(n.confirm(at(1), p, MAC_A), Confirmation::Taken);
        n.observe(at(20), p, MAC_A);
        assert_eq!(n.confirm(at(21), p, SPOOF), Confirmation::Refused);
        assert_eq!(n.confirm(at(49), p, SPOOF), Confirmation::Refused);
        assert_eq!(n.lookup(at(49), p), Some(MAC_A));
        // Re-confirming the pair itself is no refusal.
        assert_eq!(n.confirm(at(49), p, MAC_A), Confirmation::Taken);
        assert_eq!(n.confirm(at(79), p, MAC_B), Confirmation::Taken);
        assert_eq!(n.lookup(at(79), p), Some(MAC_B));
        assert_eq!(n.confirm(at(80), p, MAC_A), Confirmation::Refused);
    }

    #[test]
    fn confirmed_entries_are_capped_and_the_least_recently_used_goes() {
        let mut n = Neighbors::new();
        n.insert(Ipv4Addr::new(192, 0, 2, 1), MAC_B);
        let ip = |i: usize| Ipv4Addr::from(0x0a00_0000 + i as u32);
        for i in 0..MAX_CONFIRMED {
            let _ = n.confirm(at(1) + Duration::from_millis(i as u64), ip(i), MAC_A);
        }
        // Peer 0 is in use; peer 1 is now the least recently used.
        assert_eq!(n.lookup(at(10), ip(0)), Some(MAC_A));
        let _ = n.confirm(at(11), ip(MAX_CONFIRMED), MAC_A);
        assert_eq!(n.len(), MAX_CONFIRMED + 1, "the configured entry stays");
        assert_eq!(n.stats().evicted, 1);
        assert!(n.contains(ip(0)) && !n.contains(ip(1)));
        assert!(n.contains(Ipv4Addr::new(192, 0, 2, 1)));
        // A flood of sightings, from the confirmed peers' addresses and as
        // many others, takes no room and replaces no confirmed entry.
        let flood = (0..100_000).map(|i| ip(i % (2 * MAX_CONFIRMED)));
        let at_entries = flood.clone().filter(|&a| n.contains(a)).count() as u64;
        for a in flood {
            n.observe(at(12), a, SPOOF);
        }
        assert_eq!(n.stats().mismatched, at_entries);
        assert_eq!(n.len(), MAX_CONFIRMED + 1);
        let confirmed: Vec<usize> = (0..=MAX_CONFIRMED).filter(|&i| n.contains(ip(i))).collect();
        assert_eq!(confirmed.len(), MAX_CONFIRMED);
        for i in confirmed {
            assert_eq!(n.lookup(at(12), ip(i)), Some(MAC_A), "peer {i}");
        }
    }

    #[test]
    fn a_moving_peer_keeps_what_the_old_worker_knew() {
        let (mut old, mut new) = (Neighbors::new(), Neighbors::new());
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let _ = old.confirm(at(1), a, MAC_A);
        old.observe(at(1), b, MAC_B);
        for ip in [a, b] {
            new.adopt(at(2), old.known(ip).unwrap());
        }
        assert_eq!(new.lookup(at(2), a), Some(MAC_A));
        assert_eq!(new.lookup(at(2), b), Some(MAC_B));
        assert!(new.contains(a) && !new.contains(b), "a sighting stays one");
        assert_eq!(old.known(Ipv4Addr::new(10, 0, 0, 3)), None);
        // Fresh there until 31 s: fresh here as long, not 30 s more.
        assert_eq!(new.confirm(at(30), a, MAC_B), Confirmation::Refused);
        assert_eq!(new.confirm(at(31), a, MAC_B), Confirmation::Taken);
    }

    /// A move hands over a stale entry as stale, with the newer sighting
    /// the old worker used: the new worker sends where the old one did,
    /// and does not confirm the stale MAC afresh.
    #[test]
    fn a_move_does_not_revive_a_stale_entry() {
        let (mut old, mut new) = (Neighbors::new(), Neighbors::new());
        let p = Ipv4Addr::new(10, 0, 0, 2);
        let _ = old.confirm(at(1), p, MAC_A);
        old.observe(at(40), p, MAC_B); // the peer's new MAC (a failover)
        assert_eq!(old.lookup(at(41), p), Some(MAC_B));
        new.adopt(at(41), old.known(p).unwrap());
        assert_eq!(new.lookup(at(41), p), Some(MAC_B));
        assert_eq!(new.lookup(at(70), p), Some(MAC_B));
        assert_eq!(new.confirm(at(42), p, MAC_B), Confirmation::Taken);
        // A stale entry with no newer sighting stays stale there too.
        let (mut old, mut new) = (Neighbors::new(), Neighbors::new());
        let _ = old.confirm(at(1), p, MAC_A);
        new.adopt(at(41), old.known(p).unwrap());
        assert_eq!(new.lookup(at(41), p), Some(MAC_A));
        assert_eq!(new.confirm(at(42), p, MAC_B), Confirmation::Taken);
    }

    #[test]
    fn a_configured_entry_is_never_replaced() {
        let mut n = Neighbors::new();
        let a = Ipv4Addr::new(10, 0, 0, 1);
        n.insert_spec("10.0.0.1=02:00:00:00:00:01").unwrap();
        assert_eq!(n.confirm(at(1), a, SPOOF), Confirmation::Ignored);
        n.observe(at(1000), a, SPOOF);
        assert_eq!(n.lookup(at(1000), a), Some(MAC_A));
        assert_eq!(n.known(a), None, "every worker has it");
    }

    /// A table that refreshes through `shared`.
    fn refreshing() -> (Neighbors, Arc<NeighborRefresh>) {
        let shared = Arc::new(NeighborRefresh::new());
        let mut n = Neighbors::new();
        n.refresh_through(shared.clone());
        (n, shared)
    }

    /// What the table asked so far (the service thread's side, without
    /// waiting).
    fn asked(shared: &NeighborRefresh) -> Vec<IpAddr> {
        shared
            .wait_asked(std::time::Duration::ZERO)
            .expect("not stopped")
    }

    /// An entry read from the kernel goes stale like a learned one; from
    /// then on, while it is used, the kernel is asked again (once a second
    /// at most), and its answer (a server that failed over to a new MAC)
    /// is used from the next lookup on.
    #[test]
    fn a_stale_entry_is_asked_of_the_kernel_again() {
        let (mut n, shared) = refreshing();
        let s = Ipv4Addr::new(10, 0, 0, 9);
        let _ = n.confirm(Instant::ZERO, s, MAC_A);
        assert_eq!(n.lookup(at(29), s), Some(MAC_A));
        assert!(asked(&shared).is_empty(), "fresh: nothing to ask");
        assert_eq!(n.lookup(at(30), s), Some(MAC_A));
        assert_eq!(asked(&shared), vec![IpAddr::from(s)]);
        // Once a second at most.
        assert_eq!(
            n.lookup(at(30) + Duration::from_millis(999), s),
            Some(MAC_A)
        );
        assert!(asked(&shared).is_empty());
        assert_eq!(n.lookup(at(31), s), Some(MAC_A));
        assert_eq!(asked(&shared), vec![IpAddr::from(s)]);
        // The kernel's answer replaces the stale MAC, and is still no
        // frame from the peer: the table keeps asking while it sends.
        shared.answer([(IpAddr::from(s), MAC_B)]);
        assert_eq!(n.lookup(at(3600), s), Some(MAC_B));
        assert_eq!(asked(&shared), vec![IpAddr::from(s)]);
        // Its frame confirms it: fresh, nothing asked.
        let _ = n.confirm(at(3601), s, MAC_B);
        assert_eq!(n.lookup(at(3602), s), Some(MAC_B));
        assert!(asked(&shared).is_empty());
    }

    /// An address with no entry and no sighting is asked about; the
    /// answer becomes a (stale) entry of the table that asked, and only
    /// of one that asked.
    #[test]
    fn an_unknown_address_is_asked_of_the_kernel() {
        let (mut n, shared) = refreshing();
        let mut other = n.clone();
        let s = Ipv4Addr::new(10, 0, 0, 9);
        assert_eq!(n.lookup(at(1), s), None);
        assert_eq!(asked(&shared), vec![IpAddr::from(s)]);
        shared.answer([
            (IpAddr::from(s), MAC_B),
            (Ipv4Addr::new(10, 0, 0, 10).into(), MAC_A),
        ]);
        assert_eq!(n.lookup(at(1), s), Some(MAC_B));
        assert!(!n.contains(Ipv4Addr::new(10, 0, 0, 10)), "not asked");
        assert!(!other.contains(s), "asked by another table");
        assert_eq!(other.lookup(at(1), Ipv4Addr::new(10, 0, 0, 11)), None);
        assert!(!other.contains(s));
        // A fresh entry outranks the kernel's word: frames came since.
        let _ = n.confirm(at(2), s, MAC_A);
        shared.answer([(IpAddr::from(s), MAC_B)]);
        assert_eq!(n.lookup(at(3), Ipv4Addr::new(10, 0, 0, 12)), None);
        assert_eq!(n.lookup(at(3), s), Some(MAC_A));
        // A recent sighting is used without asking (a SYN flood's sources
        // are not asked about); an old one is asked about.
        let mut fresh = Neighbors::new();
        fresh.refresh_through(shared.clone());
        asked(&shared);
        fresh.observe(at(100), s, MAC_A);
        assert_eq!(fresh.lookup(at(129), s), Some(MAC_A));
        assert!(asked(&shared).is_empty());
        assert_eq!(fresh.lookup(at(130), s), Some(MAC_A));
        assert_eq!(asked(&shared), vec![IpAddr::from(s)]);
    }

    /// Asks and answers are bounded: a table asking about more addresses
    /// than the queue holds asks again later, and old answers go.
    #[test]
    fn asks_and_answers_are_bounded() {
        let (mut n, shared) = refreshing();
        let ip = |i: u32| IpAddr::from(Ipv4Addr::from(0x0a00_0000 + i));
        for i in 0..1000 {
            assert_eq!(n.lookup(at(1), ip(i)), None);
        }
        assert_eq!(asked(&shared).len(), MAX_ASKED);
        shared.answer((0..1000).map(|i| (ip(i), MAC_A)));
        assert_eq!(
            lock(&shared.answers).len(),
            MAX_ANSWERS,
            "the last answers only"
        );
        // The first addresses' answers went: they are asked again.
        assert_eq!(n.lookup(at(2), ip(0)), None);
        assert_eq!(n.len(), 0, "answers only for what this table asked");
        assert_eq!(asked(&shared), vec![ip(0)]);
        shared.stop();
        assert_eq!(shared.wait_asked(std::time::Duration::ZERO), None);
        assert!(!shared.pause(std::time::Duration::from_secs(60)));
        assert_eq!(n.lookup(at(5), ip(5000)), None, "no ask once stopped");
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
