//! The dispatcher: which handler owns which connection, and delivering the
//! stack's events to it.

use std::net::SocketAddr;
use std::time::Duration;

use flowlane_tcp::{ConnHandle, Error, Event, FourTuple, ListenerId, State, Stats, SynFilter};

use crate::conn_map::ConnMap;
use crate::handler::{AtStop, ConnHandler, ConnState};
use crate::net::{Net, Placement};

/// Identifies a handler registered on a [`Dispatcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandlerId(u32);

/// Maps connections to the handlers that own them and calls those handlers
/// for the events of one core's stack.
///
/// A backend owns one dispatcher per core. It registers handlers
/// ([`Dispatcher::add`], [`Dispatcher::bind_listener`]), calls
/// [`Dispatcher::start`] once before its first event, then
/// [`Dispatcher::dispatch`] for every event its stack yields and
/// [`Dispatcher::tick`] once per loop pass, each time with its own [`Net`].
/// Ownership is a table indexed by the connection handle's slot (the stack
/// bounds the slots), so a lookup is one indexed load.
#[derive(Default)]
pub struct Dispatcher {
    handlers: Vec<Box<dyn ConnHandler>>,
    listeners: Vec<(ListenerId, HandlerId)>,
    owners: Owners,
    /// Each owned connection's addresses, as the backend told them when
    /// the connection came to its handler (at accept, at the open and
    /// again once connected, at import): what [`Net::four_tuple`] answers
    /// in `on_closed`, where the backend has released the connection. Apart
    /// from the owners, whose entries every event reads: written once a
    /// connection, read only at its close.
    tuples: ConnMap<FourTuple>,
    started: bool,
    /// Whether [`Dispatcher::stop`] has run.
    stopping: bool,
    /// Connections a handler's `admit` refused, or its SYN filter where
    /// the dispatcher applies it.
    refused: u64,
    /// Each handler's SYN filter, by handler index, where the dispatcher
    /// applies it (at accept).
    filters: Vec<FilterAt>,
}

/// Where a handler's SYN filter runs.
#[derive(Default)]
enum FilterAt {
    /// Not asked for yet.
    #[default]
    Unasked,
    /// The backend took it ([`Dispatcher::syn_filter`]) and applies it.
    Backend,
    /// The dispatcher applies it at accept (for a backend that took none:
    /// every backend here takes it, queue-pair mode's cores through their
    /// relays), each port's as asked.
    Here(Vec<(u16, Option<SynFilter>)>),
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("handlers", &self.handlers.len())
            .field("listeners", &self.listeners.len())
            .field("started", &self.started)
            .finish()
    }
}

impl Dispatcher {
    /// Connections refused by a handler's [`ConnHandler::admit`] so far,
    /// and by its SYN filter where the dispatcher applies it (at accept,
    /// for a backend that took none).
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// An empty dispatcher.
    pub fn new() -> Dispatcher {
        Dispatcher::default()
    }

    /// Registers a handler (for a listener, or for active opens from its
    /// `on_start`).
    pub fn add(&mut self, handler: impl ConnHandler + 'static) -> HandlerId {
        self.add_boxed(Box::new(handler))
    }

    /// [`Dispatcher::add`] for a handler already boxed.
    pub fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId {
        self.handlers.push(handler);
        HandlerId(u32::try_from(self.handlers.len() - 1).expect("fewer than 2^32 handlers"))
    }

    /// `Err(InvalidHandle)` for a [`HandlerId`] this dispatcher did not
    /// issue (another core's or another dispatcher's, registered past
    /// this one's handlers): what a backend's `listen_with` answers, before
    /// it opens anything.
    pub fn check_handler(&self, handler: HandlerId) -> Result<(), Error> {
        if (handler.0 as usize) < self.handlers.len() {
            Ok(())
        } else {
            Err(Error::InvalidHandle)
        }
    }

    /// Connections accepted on `listener` go to `handler`; `Err(InvalidHandle)`,
    /// and nothing bound, for a handler this dispatcher did not issue
    /// ([`Dispatcher::check_handler`]).
    pub fn bind_listener(&mut self, listener: ListenerId, handler: HandlerId) -> Result<(), Error> {
        self.check_handler(handler)?;
        self.listeners.push((listener, handler));
        Ok(())
    }

    /// `handler`'s SYN filter for its listener on `port`
    /// ([`ConnHandler::syn_filter`]; None for an unknown handler), for the
    /// backend to apply (at the SYN, or at accept where the kernel
    /// completes handshakes); the dispatcher does not apply it again.
    pub fn syn_filter(&mut self, handler: HandlerId, port: u16) -> Option<SynFilter> {
        self.check_handler(handler).ok()?;
        let i = handler.0 as usize;
        if self.filters.len() <= i {
            self.filters.resize_with(i + 1, FilterAt::default);
        }
        self.filters[i] = FilterAt::Backend;
        self.handlers[i].syn_filter(port)
    }

    /// Whether `h`'s SYN filter, where this dispatcher applies it (the
    /// backend took none), takes `conn`.
    fn filter_takes<N: Net + ?Sized>(&mut self, h: HandlerId, conn: ConnHandle, net: &N) -> bool {
        let i = h.0 as usize;
        if self.filters.len() <= i {
            self.filters.resize_with(i + 1, FilterAt::default);
        }
        if matches!(self.filters[i], FilterAt::Unasked) {
            self.filters[i] = FilterAt::Here(Vec::new());
        }
        let (FilterAt::Here(asked), Ok(tuple)) = (&mut self.filters[i], net.four_tuple(conn))
        else {
            return true;
        };
        let port = tuple.local.port();
        let filter = match asked.iter().find(|(p, _)| *p == port) {
            Some((_, f)) => f.clone(),
            None => {
                let f = self.handlers[i].syn_filter(port);
                asked.push((port, f.clone()));
                f
            }
        };
        filter.is_none_or(|f| f(&tuple))
    }

    /// Number of registered handlers.
    pub fn handler_count(&self) -> usize {
        self.handlers.len()
    }

    /// Whether [`Dispatcher::start`] has run.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Calls every handler's `on_start`, once.
    pub fn start<N: Net + ?Sized>(&mut self, net: &mut N) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        self.each(net, |h, net| h.on_start(net));
    }

    /// The service is stopping (its listeners closed): calls each owned
    /// connection's handler's [`ConnHandler::on_stop`], once (later calls
    /// do nothing). Those answered [`AtStop::Finish`] are counted by
    /// [`Dispatcher::finishing`] until their handler closes them (or shuts
    /// their writing down) or they end.
    pub fn stop<N: Net + ?Sized>(&mut self, net: &mut N) {
        if std::mem::replace(&mut self.stopping, true) {
            return;
        }
        let conns: Vec<(ConnHandle, HandlerId)> =
            self.owners.iter().map(|(c, o)| (c, o.handler)).collect();
        for (conn, h) in conns {
            // An earlier handler's `on_stop` may have ended it.
            if !self.owners.contains(conn) {
                continue;
            }
            let mut scoped = Scoped {
                inner: &mut *net,
                owners: &mut self.owners,
                tuples: &mut self.tuples,
                me: h,
            };
            let at_stop = self.handlers[h.0 as usize].on_stop(&mut scoped, conn);
            if let Some(o) = self.owners.get_mut(conn) {
                o.finishing = at_stop == AtStop::Finish;
            }
        }
    }

    /// The connections left to the stop's reset: those whose handler
    /// answered [`AtStop::Reset`] at [`Dispatcher::stop`] and has not
    /// closed them since (none before the stop). A backend that resets
    /// them before its drain ends (queue-pair mode's threads, which have
    /// no drain of their own) takes them from here.
    pub fn resetting(&self) -> Vec<ConnHandle> {
        if !self.stopping {
            return Vec::new();
        }
        self.owners
            .iter()
            .filter(|(_, o)| !o.finishing && !o.write_shut)
            .map(|(c, _)| c)
            .collect()
    }

    /// Whether [`Dispatcher::stop`] has run.
    pub fn stopping(&self) -> bool {
        self.stopping
    }

    /// Connections whose handler, at the stop, said it would close them
    /// ([`AtStop::Finish`]) and has not yet: what a stopping backend waits
    /// for, for its drain at most, before it resets what is left.
    pub fn finishing(&self) -> usize {
        self.owners
            .iter()
            .filter(|(_, o)| o.finishing && !o.write_shut)
            .count()
    }

    /// Where the owner entry of slot `index` lies (see
    /// [`ConnMap::entry_address`]): each event of a connection reads it
    /// first, so a backend that prefetches the connection's state one
    /// segment ahead prefetches this line too.
    #[inline]
    pub fn owner_address(&self, index: u32) -> Option<*const u8> {
        self.owners.entry_address(index)
    }

    /// Calls every handler's `on_tick`.
    pub fn tick<N: Net + ?Sized>(&mut self, net: &mut N) {
        self.each(net, |h, net| h.on_tick(net));
    }

    fn each<N: Net + ?Sized>(
        &mut self,
        net: &mut N,
        f: impl Fn(&mut dyn ConnHandler, &mut dyn Net),
    ) {
        for (i, handler) in self.handlers.iter_mut().enumerate() {
            let mut scoped = Scoped {
                inner: net,
                owners: &mut self.owners,
                tuples: &mut self.tuples,
                me: HandlerId(i as u32),
            };
            f(handler.as_mut(), &mut scoped);
        }
    }

    /// Delivers one event of the stack to the handler that owns its
    /// connection. A connection accepted on a listener no handler is bound to
    /// is reset; events of connections no handler owns are dropped.
    // Always inlined: every backend calls it once per event from one place,
    // and LLVM's own choice flipped with unrelated code in the caller's
    // crate (the data path's `rx_cost` +35 instructions a frame out of
    // line, session 38).
    #[inline(always)]
    pub fn dispatch<N: Net + ?Sized>(&mut self, event: Event, net: &mut N) {
        let conn = match event {
            Event::Accepted { conn, listener } => {
                match self.listeners.iter().find(|(l, _)| *l == listener) {
                    Some(&(_, h)) => {
                        self.owners.insert(conn, Owner::new(h));
                    }
                    None => {
                        let _ = net.abort(conn);
                        return;
                    }
                }
                conn
            }
            Event::Connected(c)
            | Event::Readable(c)
            | Event::Writable(c)
            | Event::PeerClosed(c) => c,
            Event::Closed { conn, .. } => conn,
        };
        let Some(&Owner {
            handler: h,
            write_shut,
            ..
        }) = self.owners.get(conn)
        else {
            return;
        };
        if write_shut && matches!(event, Event::Writable(_)) {
            // Queued before its handler closed it or shut its writing down:
            // nothing can be written now (`Net::want_writable`).
            return;
        }
        if matches!(event, Event::Accepted { .. }) && !self.filter_takes(h, conn, net) {
            let _ = net.abort(conn);
            self.owners.remove(conn);
            self.refused += 1;
            return;
        }
        let handler = self.handlers[h.0 as usize].as_mut();
        let mut scoped = Scoped {
            inner: net,
            owners: &mut self.owners,
            tuples: &mut self.tuples,
            me: h,
        };
        let net: &mut dyn Net = &mut scoped;
        if matches!(event, Event::Accepted { .. }) && !handler.admit(net, conn) {
            let _ = net.abort(conn);
            self.owners.remove(conn);
            self.refused += 1;
            return;
        }
        match event {
            Event::Accepted { .. } => {
                remember_tuple(&mut scoped, conn);
                handler.on_accept(&mut scoped, conn)
            }
            Event::Connected(_) => {
                // The local address an open took is known now (queue-pair
                // mode names it only with the connection).
                remember_tuple(&mut scoped, conn);
                handler.on_connected(&mut scoped, conn)
            }
            Event::Readable(_) => handler.on_data(net, conn),
            Event::Writable(_) => handler.on_writable(net, conn),
            Event::PeerClosed(_) => handler.on_peer_closed(net, conn),
            Event::Closed { reason, .. } => {
                handler.on_closed(net, conn, reason);
                self.owners.remove(conn);
                self.tuples.remove(conn);
            }
        }
    }
}

/// Records `conn`'s addresses for its `on_closed` ([`Dispatcher`]'s
/// `tuples`). Out of line: once a connection, not on the events that
/// carry data (the dispatch is inlined into every backend's loop).
#[inline(never)]
fn remember_tuple<N: Net + ?Sized>(scoped: &mut Scoped<'_, N>, conn: ConnHandle) {
    if let Ok(tuple) = scoped.inner.four_tuple(conn) {
        scoped.tuples.insert(conn, tuple);
    }
}

/// A connection's application side on its way to another core's
/// dispatcher ([`Dispatcher::export_conn`], [`Dispatcher::import_conn`]):
/// which handler owns it (by registration order, the same on every core)
/// and that handler's state for it.
pub struct ConnExport {
    handler: HandlerId,
    state: Option<ConnState>,
}

impl std::fmt::Debug for ConnExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnExport")
            .field("handler", &self.handler)
            .field("state", &self.state.is_some())
            .finish()
    }
}

impl Dispatcher {
    /// Takes `conn`'s application side out of this dispatcher before the
    /// connection leaves for another core: its owner's
    /// [`ConnHandler::on_export`] runs (the connection is still usable in
    /// it), and the connection has no owner here afterwards. `None` if no
    /// handler owns it (a connection not yet accepted: the listener on the
    /// other core takes it).
    pub fn export_conn<N: Net + ?Sized>(
        &mut self,
        conn: ConnHandle,
        net: &mut N,
    ) -> Option<ConnExport> {
        let h = self.owners.get(conn)?.handler;
        let mut scoped = Scoped {
            inner: net,
            owners: &mut self.owners,
            tuples: &mut self.tuples,
            me: h,
        };
        let state = self.handlers[h.0 as usize].on_export(&mut scoped, conn);
        // The connection carries its word to the other core.
        self.owners.remove(conn);
        self.tuples.remove(conn);
        Some(ConnExport { handler: h, state })
    }

    /// Gives a connection that arrived from another core (under its new
    /// handle) to the handler registered in the same place as its owner
    /// there, through [`ConnHandler::on_import`]. A handler index this
    /// dispatcher does not have (cores set up differently) aborts the
    /// connection: nothing here could serve it.
    pub fn import_conn<N: Net + ?Sized>(
        &mut self,
        conn: ConnHandle,
        export: ConnExport,
        net: &mut N,
    ) {
        let h = export.handler;
        let Some(handler) = self.handlers.get_mut(h.0 as usize) else {
            let _ = net.abort(conn);
            return;
        };
        // The word the connection carried, kept for its `on_closed` here.
        let word = net.user_data(conn).unwrap_or(0);
        self.owners.insert(
            conn,
            Owner {
                word,
                ..Owner::new(h)
            },
        );
        let mut scoped = Scoped {
            inner: net,
            owners: &mut self.owners,
            tuples: &mut self.tuples,
            me: h,
        };
        remember_tuple(&mut scoped, conn);
        handler.on_import(&mut scoped, conn, export.state);
    }

    /// A connection whose application side is `export` could not be
    /// imported here: its owner's [`ConnHandler::on_import_failed`] hears
    /// of it (nothing, if no handler is registered in its place).
    pub fn import_failed<N: Net + ?Sized>(&mut self, export: ConnExport, net: &mut N) {
        let h = export.handler;
        let Some(handler) = self.handlers.get_mut(h.0 as usize) else {
            return;
        };
        let mut scoped = Scoped {
            inner: net,
            owners: &mut self.owners,
            tuples: &mut self.tuples,
            me: h,
        };
        handler.on_import_failed(&mut scoped, export.state);
    }
}

/// Connection → owning handler.
type Owners = ConnMap<Owner>;

/// A connection's owning handler, whether writing on it is over, and
/// whether its handler means to close it within a stop's drain.
#[derive(Debug, Clone, Copy)]
struct Owner {
    handler: HandlerId,
    /// Its handler closed it or shut its writing down (through
    /// [`Scoped`]): a `Writable` queued before is not delivered.
    write_shut: bool,
    /// Its handler answered [`AtStop::Finish`] at the stop.
    finishing: bool,
    /// Its user-data word as its handler last set it ([`Net::set_user_data`]),
    /// kept until its `on_closed` returned: the backend's copy is gone by
    /// then (its connection released), and a handler frees there what the
    /// word indexes. Here, not in a map of its own, so that the events that
    /// read the owner pay nothing more for it.
    word: u64,
}

impl Owner {
    fn new(handler: HandlerId) -> Owner {
        Owner {
            handler,
            write_shut: false,
            finishing: false,
            word: 0,
        }
    }
}

/// The [`Net`] a handler sees: the backend's, plus recording the caller as
/// the owner of the connections it opens, and keeping the user-data words
/// it sets readable in their connection's `on_closed`.
struct Scoped<'a, N: Net + ?Sized> {
    inner: &'a mut N,
    owners: &'a mut Owners,
    tuples: &'a mut ConnMap<FourTuple>,
    me: HandlerId,
}

impl<N: Net + ?Sized> Scoped<'_, N> {
    /// `conn`'s writing is over: no `Writable` queued for it is delivered.
    fn write_shut(&mut self, conn: ConnHandle) {
        if let Some(o) = self.owners.get_mut(conn) {
            o.write_shut = true;
        }
    }
}

impl<N: Net + ?Sized> Net for Scoped<'_, N> {
    fn now(&self) -> Duration {
        self.inner.now()
    }
    fn placement(&self) -> Placement {
        self.inner.placement()
    }
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnHandle, Error> {
        let c = self.inner.connect(remote)?;
        self.owners.insert(c, Owner::new(self.me));
        remember_tuple(self, c);
        Ok(c)
    }
    fn send(&mut self, conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        self.inner.send(conn, data)
    }
    fn recv(&mut self, conn: ConnHandle, buf: &mut [u8]) -> Result<usize, Error> {
        self.inner.recv(conn, buf)
    }
    fn peek(&self, conn: ConnHandle) -> Result<&[u8], Error> {
        self.inner.peek(conn)
    }
    fn consume(&mut self, conn: ConnHandle, n: usize) -> Result<usize, Error> {
        self.inner.consume(conn, n)
    }
    fn is_eof(&self, conn: ConnHandle) -> bool {
        self.inner.is_eof(conn)
    }
    fn send_space(&self, conn: ConnHandle) -> Result<usize, Error> {
        self.inner.send_space(conn)
    }
    fn want_writable(&mut self, conn: ConnHandle) -> bool {
        self.inner.want_writable(conn)
    }
    fn shutdown_write(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.inner.shutdown_write(conn)?;
        self.write_shut(conn);
        Ok(())
    }
    fn close(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.inner.close(conn)?;
        self.write_shut(conn);
        Ok(())
    }
    fn abort(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.inner.abort(conn)
    }
    fn set_nodelay(&mut self, conn: ConnHandle, nodelay: bool) -> Result<(), Error> {
        self.inner.set_nodelay(conn, nodelay)
    }
    fn set_congestion(
        &mut self,
        conn: ConnHandle,
        alg: flowlane_tcp::CongestionAlgorithm,
    ) -> Result<(), Error> {
        self.inner.set_congestion(conn, alg)
    }
    fn set_keepalive(&mut self, conn: ConnHandle, on: bool) -> Result<(), Error> {
        self.inner.set_keepalive(conn, on)
    }
    fn set_send_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.inner.set_send_buffer(conn, bytes)
    }
    fn set_recv_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.inner.set_recv_buffer(conn, bytes)
    }
    fn info(&self, conn: ConnHandle) -> Result<flowlane_tcp::ConnInfo, Error> {
        self.inner.info(conn)
    }
    fn conn_placement(&self, conn: ConnHandle) -> Result<Placement, Error> {
        self.inner.conn_placement(conn)
    }
    fn four_tuple(&self, conn: ConnHandle) -> Result<FourTuple, Error> {
        match self.inner.four_tuple(conn) {
            // Released by the backend (its `Closed` is being dispatched, or
            // the handler aborted it): the addresses as they were.
            Err(Error::InvalidHandle) => self.tuples.get(conn).copied().ok_or(Error::InvalidHandle),
            answer => answer,
        }
    }
    fn state(&self, conn: ConnHandle) -> Result<State, Error> {
        self.inner.state(conn)
    }
    fn set_user_data(&mut self, conn: ConnHandle, data: u64) -> Result<(), Error> {
        self.inner.set_user_data(conn, data)?;
        if let Some(owner) = self.owners.get_mut(conn) {
            owner.word = data;
        }
        Ok(())
    }
    fn user_data(&self, conn: ConnHandle) -> Result<u64, Error> {
        match self.inner.user_data(conn) {
            // Released by the backend (its `Closed` is being dispatched, or
            // the handler aborted it): the word as the handler left it.
            Err(Error::InvalidHandle) => match self.owners.get(conn) {
                Some(owner) => Ok(owner.word),
                None => Err(Error::InvalidHandle),
            },
            answer => answer,
        }
    }
    fn stats(&self) -> &Stats {
        self.inner.stats()
    }
    fn waker(&mut self) -> Option<std::sync::Arc<dyn crate::net::Wake>> {
        self.inner.waker()
    }
}
