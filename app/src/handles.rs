//! The connection table of a backend that keeps its own connections under
//! this API (kernel sockets, queue-pair mode's application threads):
//! handles with a generation per slot, so that a handle to a connection
//! that is gone never reaches the next one in its slot, and a slot kept
//! until the connection's `Closed` event reached its handler.

use flowlane_tcp::{ConnHandle, Error, Event, State};

/// The TCP state a backend reports for a connection whose state machine it
/// does not see (a kernel socket, a connection on another thread): from
/// whether the handshake is still under way, the peer's FIN came, and ours
/// was asked for.
pub fn seen_state(opening: bool, peer_closed: bool, we_closed: bool) -> State {
    match (opening, peer_closed, we_closed) {
        (true, _, _) => State::SynSent,
        (false, false, false) => State::Established,
        (false, true, false) => State::CloseWait,
        (false, false, true) => State::FinWait1,
        (false, true, true) => State::LastAck,
    }
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
    /// The connection ended; the slot is reused once its `Closed` event
    /// was dispatched ([`Handles::release`]).
    ending: bool,
    /// It was ended by its handler (an abort): of the events queued before,
    /// only its `Closed` is still told ([`Handles::due`]).
    by_handler: bool,
}

/// Connections by [`ConnHandle`], at most `limit` slots.
#[derive(Debug)]
pub struct Handles<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    limit: usize,
    open: usize,
    /// The generation new slots start at (from the table's tag).
    first_generation: u32,
}

impl<T> Handles<T> {
    /// An empty table of at most `limit` slots, whose handles are told
    /// from those of the tables of other tags (the core's or thread's
    /// index: a handle taken to another core is `InvalidHandle` there) as
    /// a stack's are by its [`Config::handle_tag`](flowlane_tcp::Config::handle_tag)
    /// (the same generations, and the same bound on aliasing).
    pub fn new(limit: usize, tag: u32) -> Handles<T> {
        Handles {
            slots: Vec::new(),
            free: Vec::new(),
            limit,
            open: 0,
            first_generation: flowlane_tcp::Config::first_generation(tag),
        }
    }

    /// Connections in the table.
    pub fn len(&self) -> usize {
        self.open
    }

    /// Whether the table holds none.
    pub fn is_empty(&self) -> bool {
        self.open == 0
    }

    /// Whether [`Handles::insert`] would find a slot.
    pub fn has_room(&self) -> bool {
        !self.free.is_empty() || self.slots.len() < self.limit
    }

    /// The handle of slot `index` now (None for a slot the table never
    /// had).
    pub fn handle(&self, index: u32) -> Option<ConnHandle> {
        let s = self.slots.get(index as usize)?;
        Some(ConnHandle::from_parts(index, s.generation))
    }

    /// The connection `h` names (`InvalidHandle` if it is gone).
    pub fn get(&self, h: ConnHandle) -> Result<&T, Error> {
        match self.slots.get(h.index() as usize) {
            Some(s) if s.generation == h.generation() => {
                s.value.as_ref().ok_or(Error::InvalidHandle)
            }
            _ => Err(Error::InvalidHandle),
        }
    }

    /// [`Handles::get`], mutable.
    pub fn get_mut(&mut self, h: ConnHandle) -> Result<&mut T, Error> {
        match self.slots.get_mut(h.index() as usize) {
            Some(s) if s.generation == h.generation() => {
                s.value.as_mut().ok_or(Error::InvalidHandle)
            }
            _ => Err(Error::InvalidHandle),
        }
    }

    /// Whether `event`, queued earlier for a connection of this table, is
    /// still to be dispatched: a connection its handler ended since (an
    /// abort in an earlier callback, [`Handles::end_by_handler`]) hears
    /// nothing more but its `Closed`. One the peer or the core ended is
    /// told what came before its end (its peer's FIN ahead of its
    /// `Closed`), as on the other backends.
    pub fn due(&self, event: &Event) -> bool {
        if let Event::Closed { .. } = event {
            return true;
        }
        let conn = event.conn();
        match self.slots.get(conn.index() as usize) {
            Some(s) if s.generation == conn.generation() => s.value.is_some() || !s.by_handler,
            _ => false,
        }
    }

    /// Every connection in the table (a control-plane scan: O(slots)).
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.value.as_ref())
    }

    /// The connection in slot `index`, whatever its generation.
    pub fn at_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots.get_mut(index as usize)?.value.as_mut()
    }

    /// Adds a connection (`ConnectionLimit` when every slot is taken).
    pub fn insert(&mut self, value: T) -> Result<ConnHandle, Error> {
        let index = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < self.limit => {
                self.slots.push(Slot {
                    generation: self.first_generation,
                    value: None,
                    ending: false,
                    by_handler: false,
                });
                (self.slots.len() - 1) as u32
            }
            None => return Err(Error::ConnectionLimit),
        };
        let s = &mut self.slots[index as usize];
        s.generation = s.generation.wrapping_add(1);
        s.value = Some(value);
        s.ending = false;
        s.by_handler = false;
        self.open += 1;
        Ok(ConnHandle::from_parts(index, s.generation))
    }

    /// Takes the connection out of slot `index` (it ended), with its
    /// handle; the slot waits for [`Handles::release`].
    /// None for a slot that holds no connection (or that the table never
    /// had).
    pub fn end(&mut self, index: u32) -> Option<(ConnHandle, T)> {
        let s = self.slots.get_mut(index as usize)?;
        let value = s.value.take()?;
        s.ending = true;
        self.open -= 1;
        Some((ConnHandle::from_parts(index, s.generation), value))
    }

    /// [`Handles::end`] for a connection its handler ended (an abort): the
    /// events queued for it before are no longer due ([`Handles::due`]).
    pub fn end_by_handler(&mut self, index: u32) -> Option<(ConnHandle, T)> {
        let ended = self.end(index)?;
        self.slots[index as usize].by_handler = true;
        Some(ended)
    }

    /// `h`'s `Closed` event was dispatched: its slot is free.
    pub fn release(&mut self, h: ConnHandle) {
        if let Some(s) = self.slots.get_mut(h.index() as usize) {
            if s.ending && s.generation == h.generation() {
                s.ending = false;
                self.free.push(h.index());
            }
        }
    }

    /// Takes a connection back out of the table before anyone saw its
    /// handle (a set-up step after [`Handles::insert`] failed).
    pub fn undo_insert(&mut self, h: ConnHandle) -> Option<T> {
        let (h2, v) = self.end(h.index())?;
        self.release(h2);
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_outlives_its_connection_harmlessly() {
        let mut t: Handles<&str> = Handles::new(2, 0);
        let a = t.insert("a").unwrap();
        let b = t.insert("b").unwrap();
        assert_eq!(t.insert("c"), Err(Error::ConnectionLimit));
        assert_eq!(t.end(a.index()), Some((a, "a")));
        assert_eq!(t.get(a), Err(Error::InvalidHandle));
        // The slot waits for the Closed event.
        assert!(!t.has_room());
        t.release(a);
        let c = t.insert("c").unwrap();
        assert_eq!(c.index(), a.index());
        assert_ne!(c, a);
        assert_eq!(t.get(a), Err(Error::InvalidHandle));
        assert_eq!(t.get(c), Ok(&"c"));
        // A stale release does nothing.
        t.release(a);
        assert_eq!(t.get(c), Ok(&"c"));
        assert_eq!(t.undo_insert(b), Some("b"));
        assert_eq!(t.len(), 1);
        assert!(t.has_room());
    }

    /// Events queued for a connection its handler ended since are not due,
    /// but its `Closed` is; those of one the peer ended are (its FIN
    /// before its `Closed`, as on the other backends).
    #[test]
    fn only_the_closed_of_a_connection_its_handler_ended_is_due() {
        let mut t: Handles<()> = Handles::new(2, 0);
        let a = t.insert(()).unwrap();
        assert!(t.due(&Event::Readable(a)));
        t.end_by_handler(a.index());
        assert!(!t.due(&Event::Readable(a)));
        assert!(!t.due(&Event::PeerClosed(a)));
        let reason = flowlane_tcp::CloseReason::Aborted;
        assert!(t.due(&Event::Closed { conn: a, reason }));
        let b = t.insert(()).unwrap();
        t.end(b.index());
        assert!(t.due(&Event::PeerClosed(b)), "the peer's end");
    }

    /// Two tables of different tags (two cores) refuse each other's
    /// handles, though their first connections take the same slot.
    #[test]
    fn tables_of_different_tags_refuse_each_other_s_handles() {
        let mut core0: Handles<&str> = Handles::new(4, 0);
        let mut core1: Handles<&str> = Handles::new(4, 1);
        let h0 = core0.insert("core 0's").unwrap();
        let h1 = core1.insert("core 1's").unwrap();
        assert_eq!(h0.index(), h1.index());
        assert_ne!(h0, h1);
        assert_eq!(core1.get(h0), Err(Error::InvalidHandle));
        assert_eq!(core0.get_mut(h1), Err(Error::InvalidHandle));
        assert!(!core1.due(&Event::Readable(h0)));
        assert_eq!(core0.get(h0), Ok(&"core 0's"));
        assert_eq!(core1.get(h1), Ok(&"core 1's"));
    }

    /// A slot the table never had names no connection: no panic.
    #[test]
    fn an_index_past_the_table_is_none() {
        let mut t = Handles::<u8>::new(1, 0);
        assert_eq!(t.end(5), None);
        assert_eq!(t.handle(5), None);
        let h = t.insert(1).unwrap();
        assert_eq!(t.handle(h.index()), Some(h));
        assert_eq!(t.end(1), None);
    }
}
