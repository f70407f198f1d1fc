//! A per-core hierarchical timer wheel (Varghese & Lauck, scheme 7) with at
//! most one entry per key and O(1) cancel.
//!
//! Keys are connection slot indices. The wheel's owner keeps each key's
//! [`WheelPos`] (in the connection's slab slot, next to the state the
//! timer belongs to) and lends the wheel access to it through
//! [`WheelKeys`]: setting a key replaces its entry, and freeing a key
//! cancels it, so the wheel never holds a stale entry.
//!
//! Time is counted in ticks of the configured granularity. A deadline is
//! rounded up to a whole tick, so an entry never fires early.
//!
//! Geometry: [`LEVELS`] levels of 64 slots; a level-`k` slot spans `64^k`
//! ticks. An entry is filed at the level of the highest 6-bit group in which
//! its tick differs from the wheel's current tick: near deadlines in level 0
//! (exact to the tick), far ones in coarse levels, where they cost nothing
//! until their slot comes up. A coarse slot that comes up moves its entries
//! down, so each entry moves at most `LEVELS - 1` times in its life and no
//! precision is lost; eleven levels cover every `u64` tick.
//!
//! Invariant: every entry at level `k` shares all groups above `k` with the
//! current tick, and its group `k` is at or after the current tick's,
//! strictly after for `k > 0`. The lowest non-empty level therefore holds
//! the earliest entries, and the next slot to process is found from one
//! occupancy bitmap per level. When the current tick moves into a coarse
//! slot's span, that slot moves its entries down at once, which keeps the
//! "strictly".
//!
//! Memory: a slot's list keeps its allocation between its turns, so a busy
//! spell (ten thousand connections' timers) would leave every list at the
//! most it ever held, for the wheel's life. Once the wheel empties, and
//! every [`TRIM_TICKS`] ticks while it runs, lists that grew past
//! [`KEPT_ENTRIES`] since give back what they do not use (the rule of
//! the chunk pool's [`crate::kept::Kept`]: a capacity over twice what is
//! used is shrunk to it), so that what a spell took goes back once it
//! ends, and a steady load's lists regrow at most once per trim.

use crate::time::{Duration, Instant};

/// Bits of tick per level.
const BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << BITS;
/// Levels: `ceil(64 / 6)`, so that any `u64` tick has a level.
const LEVELS: usize = 11;
/// Entries a slot's list keeps room for whatever a trim finds: what a
/// queue's few connections file there without asking the allocator.
pub(crate) const KEPT_ENTRIES: usize = 8;
/// Ticks between two trims of a running wheel (1.024 s at the stack's
/// 1 ms tick, the cadence at which the workers trim the chunk pool).
const TRIM_TICKS: u64 = 1 << 10;

/// Where a key's entry sits in the wheel (kept by the wheel's owner, one
/// per key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WheelPos {
    /// Index in the slot's list.
    index: u32,
    /// Level, `u8::MAX` when the key has no entry.
    level: u8,
    /// Slot within the level.
    slot: u8,
}

impl WheelPos {
    /// No entry.
    pub(crate) const NONE: WheelPos = WheelPos {
        index: 0,
        level: u8::MAX,
        slot: 0,
    };

    /// Whether the key has an entry.
    pub(crate) fn is_some(self) -> bool {
        self.level != u8::MAX
    }
}

/// Access to the owner's per-key positions.
pub(crate) trait WheelKeys {
    /// The position slot of `key`.
    fn wheel_pos(&mut self, key: u32) -> &mut WheelPos;
}

/// One scheduled timer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u32,
    /// The tick it is filed under: its deadline rounded up to the tick, or
    /// the current tick when that had passed.
    tick: u64,
}

#[derive(Debug, Clone)]
struct Level {
    /// Bit `s` set when slot `s` holds entries.
    occupied: u64,
    /// Arrays, not vectors: a slot's list is found from the wheel's one
    /// pointer, with no lengths to load and compare (callgrind: a filing
    /// and a cancel cost a connection's set-up 16 instructions fewer).
    slots: [Vec<Entry>; SLOTS],
}

/// A hierarchical timing wheel holding at most one deadline per key.
#[derive(Debug, Clone)]
pub(crate) struct TimerWheel {
    tick_ns: u64,
    levels: Box<[Level; LEVELS]>,
    /// The current tick: every entry filed before it has fired.
    elapsed: u64,
    len: usize,
    /// A list grew past [`KEPT_ENTRIES`] since the last trim
    /// ([`TimerWheel::trim`]).
    grown: bool,
}

impl TimerWheel {
    /// A wheel with ticks of `tick` (at least 1 µs).
    pub(crate) fn new(tick: Duration) -> Self {
        TimerWheel {
            tick_ns: tick.as_nanos().max(1_000),
            levels: Box::new(std::array::from_fn(|_| Level {
                occupied: 0,
                slots: std::array::from_fn(|_| Vec::new()),
            })),
            elapsed: 0,
            len: 0,
            grown: false,
        }
    }

    /// Number of entries (at most one per key).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Schedules `key` at `deadline`, replacing its entry if it has one.
    /// `now` lets an empty wheel skip ahead, so that the next expiry is
    /// found without walking empty time. A deadline that has passed fires
    /// at the next [`TimerWheel::expire`] of a later tick.
    pub(crate) fn set(
        &mut self,
        keys: &mut impl WheelKeys,
        now: Instant,
        key: u32,
        deadline: Instant,
    ) {
        self.unfile(keys, key);
        if self.len == 0 {
            self.elapsed = self.elapsed.max(now.as_nanos() / self.tick_ns);
        }
        // Round up: a tick is processed once its start time has passed.
        let tick = deadline.as_nanos().div_ceil(self.tick_ns);
        self.place(keys, key, tick.max(self.elapsed));
        self.len += 1;
    }

    /// Removes `key`'s entry, if it has one; the last one out trims the
    /// lists that grew ([`TimerWheel::trim`]).
    pub(crate) fn cancel(&mut self, keys: &mut impl WheelKeys, key: u32) {
        self.unfile(keys, key);
        if self.len == 0 && self.grown {
            self.trim();
        }
    }

    /// Removes `key`'s entry, if it has one (no trim: [`TimerWheel::set`]
    /// files it again at once).
    #[inline]
    fn unfile(&mut self, keys: &mut impl WheelKeys, key: u32) {
        let p = std::mem::replace(keys.wheel_pos(key), WheelPos::NONE);
        if !p.is_some() {
            return;
        }
        self.len -= 1;
        let level = &mut self.levels[usize::from(p.level)];
        let list = &mut level.slots[usize::from(p.slot)];
        list.swap_remove(p.index as usize);
        if let Some(moved) = list.get(p.index as usize) {
            keys.wheel_pos(moved.key).index = p.index;
        }
        if list.is_empty() {
            level.occupied &= !(1 << p.slot);
        }
    }

    /// Where cancelling the entry at `pos` reads and writes: the entry
    /// and its list's last one (which takes its place), for a caller that
    /// prefetches them. Reads the level's list header only.
    pub(crate) fn entry_addresses(&self, pos: WheelPos) -> [Option<*const u8>; 2] {
        let Some(list) = self
            .levels
            .get(usize::from(pos.level))
            .and_then(|l| l.slots.get(usize::from(pos.slot)))
        else {
            return [None, None];
        };
        let at = |e: &Entry| (e as *const Entry).cast::<u8>();
        [list.get(pos.index as usize).map(at), list.last().map(at)]
    }

    /// Files `key` under `tick` (not before the current tick).
    fn place(&mut self, keys: &mut impl WheelKeys, key: u32, tick: u64) {
        debug_assert!(tick >= self.elapsed);
        // The highest 6-bit group in which `tick` and the current tick
        // differ (0 when they are equal).
        let level = (63 - ((tick ^ self.elapsed) | (SLOTS as u64 - 1)).leading_zeros()) / BITS;
        let slot = ((tick >> (BITS * level)) & (SLOTS as u64 - 1)) as u8;
        let l = &mut self.levels[level as usize];
        let list = &mut l.slots[usize::from(slot)];
        let index = list.len() as u32;
        if list.len() == list.capacity() && list.capacity() >= KEPT_ENTRIES {
            // It grows past what a trim keeps.
            self.grown = true;
        }
        list.push(Entry { key, tick });
        l.occupied |= 1 << slot;
        *keys.wheel_pos(key) = WheelPos {
            index,
            level: level as u8,
            slot,
        };
    }

    /// The next slot to process: its level, index and start tick.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        let (k, level) = self
            .levels
            .iter()
            .enumerate()
            .find(|(_, l)| l.occupied != 0)?;
        let shift = BITS * k as u32;
        let slot = level.occupied.trailing_zeros() as usize;
        debug_assert!(
            slot as u64 + u64::from(k == 0) > (self.elapsed >> shift) & (SLOTS as u64 - 1),
            "an entry behind the current tick"
        );
        // The level's window (the current tick's groups above `k`), then
        // the slot.
        let window = if shift + BITS >= 64 {
            0
        } else {
            self.elapsed >> (shift + BITS) << (shift + BITS)
        };
        Some((k, slot, window | ((slot as u64) << shift)))
    }

    /// When [`TimerWheel::expire`] next has work: the start of the next
    /// slot, which for a coarse slot may come before its entries are due
    /// (expiring then moves them down and finds the exact time). `None`
    /// when the wheel is empty.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        let (_, _, start) = self.next_slot()?;
        Some(Instant(start.saturating_mul(self.tick_ns)))
    }

    /// Moves the entries of every coarse slot whose span holds the current
    /// tick down a level or more (highest level first: what moves down
    /// lands strictly ahead, so only slots filed earlier need it).
    fn cascade_current(&mut self, keys: &mut impl WheelKeys) {
        for k in (1..LEVELS).rev() {
            let shift = BITS * k as u32;
            let s = ((self.elapsed >> shift) & (SLOTS as u64 - 1)) as usize;
            let level = &mut self.levels[k];
            if level.occupied & (1 << s) == 0 {
                continue;
            }
            level.occupied &= !(1 << s);
            let mut list = std::mem::take(&mut level.slots[s]);
            for e in list.drain(..) {
                self.place(keys, e.key, e.tick);
            }
            self.levels[k].slots[s] = list;
        }
    }

    /// Removes every entry due at or before `now` and appends its key to
    /// `out`, earlier ticks first (entries that come due together from one
    /// coarse slot, after a long gap between calls, in no set order).
    pub(crate) fn expire(&mut self, keys: &mut impl WheelKeys, now: Instant, out: &mut Vec<u32>) {
        let now_tick = now.as_nanos() / self.tick_ns;
        if now_tick < self.elapsed {
            return;
        }
        let began = self.elapsed;
        while let Some((k, s, start)) = self.next_slot() {
            if start > now_tick {
                break;
            }
            self.elapsed = self.elapsed.max(start);
            let level = &mut self.levels[k];
            level.occupied &= !(1 << s);
            let mut list = std::mem::take(&mut level.slots[s]);
            for e in list.drain(..) {
                if e.tick <= now_tick {
                    *keys.wheel_pos(e.key) = WheelPos::NONE;
                    self.len -= 1;
                    out.push(e.key);
                } else {
                    // A coarse slot: its entries now differ from the
                    // current tick only below level `k`.
                    self.place(keys, e.key, e.tick);
                }
            }
            // Keep the allocation for the slot's next turn (nothing moved
            // down lands in it again).
            self.levels[k].slots[s] = list;
        }
        if now_tick >= self.elapsed {
            self.elapsed = now_tick + 1;
            self.cascade_current(keys);
        }
        if self.grown && (self.len == 0 || (began ^ self.elapsed) >= TRIM_TICKS) {
            self.trim();
        }
    }

    /// Gives back the room the slots' lists do not use: a list whose
    /// capacity is over twice what it holds (and over [`KEPT_ENTRIES`])
    /// is shrunk to that, an empty one to nothing past
    /// [`KEPT_ENTRIES`]. Out of line: after a spell, not per timer.
    #[cold]
    #[inline(never)]
    fn trim(&mut self) {
        self.grown = false;
        for list in self.levels.iter_mut().flat_map(|l| l.slots.iter_mut()) {
            let keep = list.len().max(KEPT_ENTRIES);
            if list.capacity() > 2 * keep {
                list.shrink_to(keep);
            }
            // One that could not shrink to what a trim keeps may grow
            // again without the next trim seeing it.
            self.grown |= list.capacity() > 2 * KEPT_ENTRIES;
        }
    }

    /// Heap bytes the wheel holds: its levels and its slots' lists.
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        let lists: usize = self
            .levels
            .iter()
            .flat_map(|l| l.slots.iter())
            .map(Vec::capacity)
            .sum();
        std::mem::size_of::<[Level; LEVELS]>() + lists * std::mem::size_of::<Entry>()
    }

    /// Checks the wheel against the owner's positions: every entry's
    /// position names it, entries sit where the invariant puts them, and
    /// `keys` (the live keys with an entry) are exactly the entries.
    #[cfg(test)]
    pub(crate) fn check(
        &self,
        keys: &mut impl WheelKeys,
        with_entry: impl Iterator<Item = u32>,
    ) -> Result<(), String> {
        let mut seen = 0;
        for (k, level) in self.levels.iter().enumerate() {
            let shift = BITS * k as u32;
            for (s, list) in level.slots.iter().enumerate() {
                if list.is_empty() != (level.occupied & (1 << s) == 0) {
                    return Err(format!("level {k} slot {s}: occupancy bit wrong"));
                }
                for (i, e) in list.iter().enumerate() {
                    let want = WheelPos {
                        index: i as u32,
                        level: k as u8,
                        slot: s as u8,
                    };
                    if *keys.wheel_pos(e.key) != want {
                        return Err(format!("key {}: position is not {want:?}", e.key));
                    }
                    let above = shift + BITS;
                    if above < 64 && e.tick >> above != self.elapsed >> above {
                        return Err(format!(
                            "key {}: tick {} in the wrong window",
                            e.key, e.tick
                        ));
                    }
                    let ahead = (e.tick >> shift) & (SLOTS as u64 - 1);
                    let current = (self.elapsed >> shift) & (SLOTS as u64 - 1);
                    if e.tick < self.elapsed || (k > 0 && ahead <= current) {
                        return Err(format!("key {}: level {k} entry not ahead", e.key));
                    }
                    seen += 1;
                }
            }
        }
        let listed = with_entry.count();
        if seen != self.len || listed != self.len {
            return Err(format!(
                "{seen} entries on the wheel, length {}, {listed} keys with one",
                self.len
            ));
        }
        Ok(())
    }
}

/// Positions kept in a plain list (tests, and copies checked by
/// [`TimerWheel::check`]); grows to fit the key.
#[cfg(test)]
impl WheelKeys for Vec<WheelPos> {
    fn wheel_pos(&mut self, key: u32) -> &mut WheelPos {
        let k = key as usize;
        if self.len() <= k {
            self.resize(k + 1, WheelPos::NONE);
        }
        &mut self[k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    fn wheel() -> (TimerWheel, Vec<WheelPos>) {
        (TimerWheel::new(Duration::from_millis(1)), Vec::new())
    }

    fn check(w: &TimerWheel, keys: &mut Vec<WheelPos>) {
        let with: Vec<u32> = (0..keys.len() as u32)
            .filter(|&k| keys[k as usize].is_some())
            .collect();
        w.check(keys, with.into_iter()).unwrap();
    }

    #[test]
    fn fires_in_order_and_not_early() {
        let (mut w, mut keys) = wheel();
        w.set(&mut keys, ms(0), 1, ms(10));
        w.set(&mut keys, ms(0), 2, Instant(ms(5).0 + 1)); // rounds up to tick 6
        w.set(&mut keys, ms(0), 3, ms(100)); // level 1
        w.set(&mut keys, ms(0), 4, ms(7_200_000)); // two hours: level 3
        check(&w, &mut keys);
        assert_eq!(w.len(), 4);
        assert_eq!(w.next_expiry(), Some(ms(6)));
        let mut out = Vec::new();
        w.expire(&mut keys, ms(5), &mut out);
        assert!(out.is_empty());
        w.expire(&mut keys, ms(6), &mut out);
        assert_eq!(out, [2]);
        out.clear();
        assert_eq!(w.next_expiry(), Some(ms(10)));
        w.expire(&mut keys, ms(50), &mut out);
        assert_eq!(out, [1]);
        out.clear();
        // Entry 3 is in level 1's slot for ticks 64..128: its start comes
        // first, moving it down, then its exact tick.
        assert_eq!(w.next_expiry(), Some(ms(64)));
        w.expire(&mut keys, ms(64), &mut out);
        assert!(out.is_empty());
        assert_eq!(w.next_expiry(), Some(ms(100)));
        w.expire(&mut keys, ms(99), &mut out);
        assert!(out.is_empty());
        w.expire(&mut keys, ms(1000), &mut out);
        assert_eq!(out, [3]);
        out.clear();
        check(&w, &mut keys);
        w.expire(&mut keys, ms(7_199_999), &mut out);
        assert!(out.is_empty());
        w.expire(&mut keys, ms(7_200_000), &mut out);
        assert_eq!(out, [4]);
        assert_eq!(w.len(), 0);
        assert_eq!(w.next_expiry(), None);
        assert!(keys.iter().all(|p| !p.is_some()));
    }

    #[test]
    fn set_replaces_and_cancel_removes() {
        let (mut w, mut keys) = wheel();
        // Idle to active and back many times: one entry throughout.
        for i in 0..10_000u64 {
            w.set(&mut keys, ms(i), 9, ms(i + 7_200_000));
            w.set(&mut keys, ms(i), 9, ms(i + 200));
            assert_eq!(w.len(), 1);
        }
        for k in 0..100 {
            w.set(&mut keys, ms(0), k, ms(u64::from(k) * 37));
        }
        for k in (0..100).step_by(3) {
            w.cancel(&mut keys, k);
        }
        w.cancel(&mut keys, 9);
        w.cancel(&mut keys, 9);
        check(&w, &mut keys);
        assert_eq!(w.len(), 66);
    }

    #[test]
    fn past_deadlines_fire_on_next_expire() {
        let (mut w, mut keys) = wheel();
        let mut out = Vec::new();
        w.expire(&mut keys, ms(20), &mut out);
        w.set(&mut keys, ms(20), 7, ms(1));
        assert!(w.next_expiry().unwrap() <= ms(21));
        w.expire(&mut keys, ms(21), &mut out);
        assert_eq!(out, [7]);
    }

    #[test]
    fn far_deadlines_are_not_clamped() {
        let (mut w, mut keys) = wheel();
        // 2^63 ns is 292 years.
        w.set(&mut keys, ms(0), 1, Instant(1 << 63));
        let mut out = Vec::new();
        w.expire(&mut keys, ms(1_000_000_000), &mut out);
        assert!(out.is_empty());
        check(&w, &mut keys);
        w.expire(&mut keys, Instant((1 << 63) - 1), &mut out);
        assert!(out.is_empty());
        // Rounded up to the next whole millisecond.
        let tick = (1u64 << 63).div_ceil(1_000_000) * 1_000_000;
        w.expire(&mut keys, Instant(tick - 1), &mut out);
        assert!(out.is_empty());
        w.expire(&mut keys, Instant(tick), &mut out);
        assert_eq!(out, [1]);
    }

    /// The room a busy spell took goes back: ten thousand keys filed over
    /// the wheel's levels (what 10 000 connections' timers take) leave the
    /// lists at their peak until the wheel empties, by cancels (the
    /// connections closed) or by expiry (their timers fired), or, while it
    /// runs, until the next trim; then they keep at most
    /// [`KEPT_ENTRIES`] each.
    #[test]
    fn a_busy_spell_s_room_goes_back_once_it_ends() {
        let empty = TimerWheel::new(Duration::from_millis(1)).heap_bytes();
        // What the lists may keep: `KEPT_ENTRIES` each.
        let floor = empty + LEVELS * SLOTS * KEPT_ENTRIES * std::mem::size_of::<Entry>();
        let spell = |w: &mut TimerWheel, keys: &mut Vec<WheelPos>, at: u64| {
            for k in 0..10_000u32 {
                // Deadlines from 1 ms to 10 s: levels 0 to 2.
                w.set(keys, ms(at), k, ms(at + 1 + u64::from(k) % 10_000));
            }
            // Half of them re-armed nearer (acknowledgements came).
            for k in (0..10_000u32).step_by(2) {
                w.set(keys, ms(at), k, ms(at + 200 + u64::from(k) % 100));
            }
        };
        // Ended by cancels.
        let (mut w, mut keys) = wheel();
        spell(&mut w, &mut keys, 0);
        let peak = w.heap_bytes();
        let mut out = Vec::new();
        w.expire(&mut keys, ms(150), &mut out);
        assert!(
            w.heap_bytes() >= peak / 2,
            "trimmed within a trim's interval"
        );
        for k in 0..10_000u32 {
            w.cancel(&mut keys, k);
        }
        check(&w, &mut keys);
        let after = w.heap_bytes();
        eprintln!("cancelled: empty {empty} B, peak {peak} B, after {after} B");
        assert!(after <= floor, "{after} B kept of a {peak} B peak");
        // Ended by expiry, the wheel running on: trimmed as it empties.
        spell(&mut w, &mut keys, 1_000);
        let peak = w.heap_bytes();
        out.clear();
        w.expire(&mut keys, ms(20_000), &mut out);
        assert_eq!((out.len(), w.len()), (10_000, 0));
        let after = w.heap_bytes();
        eprintln!("expired: peak {peak} B, after {after} B");
        assert!(after <= floor, "{after} B kept of a {peak} B peak");
        // A few keys stay (an idle connection's keepalive): the next
        // trim, a trim interval on, gives the rest back all the same.
        spell(&mut w, &mut keys, 30_000);
        for k in 3..10_000u32 {
            w.cancel(&mut keys, k);
        }
        w.set(&mut keys, ms(30_000), 0, ms(7_230_000));
        let peak = w.heap_bytes();
        w.expire(&mut keys, ms(30_000 + 2 * TRIM_TICKS), &mut out);
        let after = w.heap_bytes();
        check(&w, &mut keys);
        eprintln!("three kept: peak {peak} B, after {after} B");
        assert!(after <= floor, "{after} B kept of a {peak} B peak");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Against a model: with sets (replacing), cancels and expiries
        /// interleaved, every entry fires exactly once, never before its
        /// deadline and no later than the first expiry at or after its
        /// rounded deadline; the wheel stays whole throughout.
        #[test]
        fn matches_model(
            ops in proptest::collection::vec((0u8..4, 0u32..24, 0u64..20_000_000_000), 1..200),
            step in 1u64..5_000,
        ) {
            let (mut w, mut keys) = wheel();
            let mut model: Vec<Option<u64>> = vec![None; 24];
            let mut now = 0u64;
            let mut out = Vec::new();
            for (op, key, x) in ops {
                match op {
                    0 | 1 => {
                        let d = now + x / (1 + u64::from(op) * 1000);
                        w.set(&mut keys, Instant(now), key, Instant(d));
                        model[key as usize] = Some(d);
                    }
                    2 => {
                        w.cancel(&mut keys, key);
                        model[key as usize] = None;
                    }
                    _ => {
                        // Either jump to the advertised expiry or step.
                        now = match w.next_expiry() {
                            Some(t) if x % 2 == 0 => t.0.max(now),
                            _ => now + step * 1_000_000,
                        };
                        w.expire(&mut keys, Instant(now), &mut out);
                        for k in out.drain(..) {
                            let d = model[k as usize].take();
                            proptest::prop_assert!(d.is_some_and(|d| d <= now), "key {} fired early or twice", k);
                        }
                        for d in model.iter().flatten() {
                            proptest::prop_assert!(d.div_ceil(1_000_000) * 1_000_000 > now, "deadline {} missed at {}", d, now);
                        }
                    }
                }
                let with: Vec<u32> = (0..24).filter(|&k| model[k as usize].is_some()).collect();
                proptest::prop_assert!(w.check(&mut keys, with.into_iter()).is_ok());
            }
            // Run everything out.
            let mut guard = 0;
            while let Some(t) = w.next_expiry() {
                guard += 1;
                proptest::prop_assert!(guard < 10_000);
                now = t.0.max(now);
                w.expire(&mut keys, Instant(now), &mut out);
                for k in out.drain(..) {
                    let d = model[k as usize].take();
                    proptest::prop_assert!(d.is_some_and(|d| d <= now));
                }
            }
            proptest::prop_assert!(model.iter().all(Option::is_none));
        }
    }
}
