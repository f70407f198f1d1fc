//! A handler's per-connection state, found by the connection's handle
//! without hashing.
//!
//! Every backend names connections by slot: a [`ConnHandle`] is a slot
//! index, reused once the connection is gone, and a generation that tells
//! the incarnations of a slot apart. So a handler's map from connection to
//! state can be a vector indexed by the slot, each entry keeping the handle
//! it was stored under: a lookup is one index and one comparison, where a
//! `HashMap<ConnHandle, _>` hashes the handle (std's SipHash: a few dozen
//! nanoseconds per event, and per connection moved). The vector grows to
//! the highest slot seen, which the backend's connection limit bounds.
//!
//! ```
//! use flowlane_app::conn_state::{export_entry, import_entry};
//! use flowlane_app::{CloseReason, ConnHandle, ConnHandler, ConnMap, ConnState, Net};
//!
//! /// Counts each connection's bytes; the count moves with the connection
//! /// when its RSS bucket moves to another core.
//! #[derive(Default)]
//! struct Counter {
//!     seen: ConnMap<u64>,
//! }
//!
//! impl ConnHandler for Counter {
//!     fn on_accept(&mut self, _net: &mut dyn Net, conn: ConnHandle) {
//!         self.seen.insert(conn, 0);
//!     }
//!     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         let n = net.peek(conn).map_or(0, <[u8]>::len);
//!         let _ = net.consume(conn, n);
//!         if let Some(total) = self.seen.get_mut(conn) {
//!             *total += n as u64;
//!         }
//!     }
//!     fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
//!         export_entry(&mut self.seen, conn)
//!     }
//!     fn on_import(&mut self, _net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
//!         import_entry(&mut self.seen, conn, state);
//!     }
//!     fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, _why: CloseReason) {
//!         self.seen.remove(conn);
//!     }
//! }
//! ```

use flowlane_tcp::ConnHandle;

/// Per-connection values keyed by [`ConnHandle`], indexed by the handle's
/// slot.
#[derive(Debug, Clone)]
pub struct ConnMap<T> {
    slots: Vec<Option<(ConnHandle, T)>>,
    len: usize,
}

impl<T> Default for ConnMap<T> {
    fn default() -> Self {
        ConnMap {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<T> ConnMap<T> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Puts `value` under `conn`; returns what `conn` held. An entry of an
    /// older connection in the same slot (one its handler never removed:
    /// the backend has reused the slot since) is dropped.
    pub fn insert(&mut self, conn: ConnHandle, value: T) -> Option<T> {
        let i = conn.index() as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        match self.slots[i].replace((conn, value)) {
            Some((c, old)) if c == conn => Some(old),
            Some(_) => None,
            None => {
                self.len += 1;
                None
            }
        }
    }

    /// The value under `conn`.
    #[inline]
    pub fn get(&self, conn: ConnHandle) -> Option<&T> {
        match self.slots.get(conn.index() as usize) {
            Some(Some((c, v))) if *c == conn => Some(v),
            _ => None,
        }
    }

    /// Where the entry for slot `index` (a [`ConnHandle::index`]) lies, for
    /// a caller that prefetches it before the connection's next event
    /// (`flowlane_tcp::StateHint::slot` names the slot); `None` past the
    /// map's end. An address only: nothing is read.
    #[inline]
    pub fn entry_address(&self, index: u32) -> Option<*const u8> {
        self.slots
            .get(index as usize)
            .map(|e| (e as *const Option<(ConnHandle, T)>).cast())
    }

    /// The value under `conn`, to change.
    #[inline]
    pub fn get_mut(&mut self, conn: ConnHandle) -> Option<&mut T> {
        match self.slots.get_mut(conn.index() as usize) {
            Some(Some((c, v))) if *c == conn => Some(v),
            _ => None,
        }
    }

    /// The value under `conn`, put there by `make` if it had none.
    pub fn get_or_insert_with(&mut self, conn: ConnHandle, make: impl FnOnce() -> T) -> &mut T {
        if self.get(conn).is_none() {
            self.insert(conn, make());
        }
        self.get_mut(conn).expect("just inserted")
    }

    /// Whether `conn` has a value.
    pub fn contains(&self, conn: ConnHandle) -> bool {
        self.get(conn).is_some()
    }

    /// Takes the value under `conn` out.
    pub fn remove(&mut self, conn: ConnHandle) -> Option<T> {
        let slot = self.slots.get_mut(conn.index() as usize)?;
        if !matches!(slot, Some((c, _)) if *c == conn) {
            return None;
        }
        self.len -= 1;
        slot.take().map(|(_, v)| v)
    }

    /// Every entry, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (ConnHandle, &T)> {
        self.slots.iter().flatten().map(|(c, v)| (*c, v))
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(ConnHandle, &mut T) -> bool) {
        for slot in &mut self.slots {
            if let Some((c, v)) = slot {
                if !keep(*c, v) {
                    *slot = None;
                    self.len -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(index: u32, generation: u32) -> ConnHandle {
        ConnHandle::from_parts(index, generation)
    }

    #[test]
    fn entry_addresses_are_the_entries() {
        let mut m = ConnMap::new();
        m.insert(h(2, 1), 7u64);
        let at = |i| m.entry_address(i).map(|p| p as usize);
        let value = m.get(h(2, 1)).map(|v| v as *const u64 as usize).unwrap();
        let entry = at(2).unwrap();
        // The value lies inside its slot's entry, the entries one after another.
        let size = std::mem::size_of::<Option<(ConnHandle, u64)>>();
        assert!(entry <= value && value < entry + size);
        assert_eq!(at(1).unwrap() + size, entry);
        assert_eq!(at(3), None, "past the end");
    }

    #[test]
    fn values_are_found_by_handle_and_generation() {
        let mut m = ConnMap::new();
        assert_eq!(m.insert(h(3, 1), "a"), None);
        assert_eq!(m.insert(h(0, 1), "b"), None);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get(h(3, 1)), Some(&"a"));
        // The slot's next incarnation is another connection.
        assert_eq!(m.get(h(3, 2)), None);
        assert_eq!(m.remove(h(3, 2)), None);
        assert_eq!(m.get(h(7, 1)), None, "past the end");
        assert_eq!(m.insert(h(3, 1), "c"), Some("a"), "replaced");
        assert_eq!(m.len(), 2);
        *m.get_mut(h(0, 1)).unwrap() = "d";
        assert_eq!(m.remove(h(0, 1)), Some("d"));
        assert_eq!(m.remove(h(0, 1)), None);
        assert_eq!(m.len(), 1);
        assert!(m.contains(h(3, 1)));
    }

    #[test]
    fn a_stale_entry_gives_way_to_the_slot_s_new_connection() {
        let mut m = ConnMap::new();
        m.insert(h(2, 1), 10);
        // Never removed; the backend reused slot 2.
        assert_eq!(m.insert(h(2, 2), 20), None);
        assert_eq!(m.len(), 1);
        assert_eq!(m.get(h(2, 1)), None);
        assert_eq!(m.get(h(2, 2)), Some(&20));
        assert_eq!(*m.get_or_insert_with(h(2, 2), || 0), 20);
        assert_eq!(*m.get_or_insert_with(h(5, 1), || 50), 50);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn iteration_and_retain_see_live_entries_only() {
        let mut m = ConnMap::new();
        for i in 0..6 {
            m.insert(h(i, 1), i);
        }
        m.remove(h(1, 1));
        m.retain(|_, v| *v % 2 == 0);
        let left: Vec<(u32, u32)> = m.iter().map(|(c, v)| (c.index(), *v)).collect();
        assert_eq!(left, [(0, 0), (2, 2), (4, 4)]);
        assert_eq!(m.len(), 3);
    }
}
