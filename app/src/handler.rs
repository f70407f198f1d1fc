//! The application's side of a set of connections.

use flowlane_tcp::{CloseReason, ConnHandle, SynFilter};

use crate::net::Net;

/// A connection's application state on its way to another core: what
/// [`ConnHandler::on_export`] returns on the old core and
/// [`ConnHandler::on_import`] receives on the new one.
pub type ConnState = Box<dyn std::any::Any + Send>;

/// What a handler does with a connection when the service stops
/// ([`ConnHandler::on_stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtStop {
    /// Nothing: the connection is reset when the stop's drain ends (at
    /// once if no connection is finishing), so that its peer never takes a
    /// stream cut short for a complete one.
    #[default]
    Reset,
    /// The handler closes it itself (a FIN) within the drain: it closed it
    /// already (an idle connection), or will once what is under way is
    /// done (a response being sent). The stop waits for it, for the drain
    /// at most, then resets it if it is still open.
    Finish,
}

/// The application side of a set of connections: a listener's, or an
/// active opener's. Every callback runs on the core that owns the
/// connection, inline with packet processing (run to completion): keep them
/// short and never block. Calls on connections go through the [`Net`]
/// passed in, which is valid for that callback only.
pub trait ConnHandler: Send {
    /// Called once, before any other callback, on the owning core's first
    /// loop iteration (open connections here with [`Net::connect`]).
    fn on_start(&mut self, _net: &mut dyn Net) {}

    /// Whether to take a connection to this handler's listener, asked once
    /// its handshake completed and before [`ConnHandler::on_accept`]; from
    /// its addresses (`net.four_tuple(conn)`): an allow-list, a budget per
    /// peer. `false` resets it; no callback follows, and the dispatcher
    /// counts it ([`Dispatcher::refused`](crate::Dispatcher::refused)). The
    /// default takes every connection.
    fn admit(&mut self, _net: &mut dyn Net, _conn: ConnHandle) -> bool {
        true
    }

    /// A filter asked at each SYN to this handler's listener on `port`
    /// whether to take the connection, from its addresses alone (an
    /// allow-list, a budget per peer kept bounded): a refused peer gets an
    /// RST to its SYN (its connection is refused, no handshake, nothing
    /// kept) and the backend counts it (`syn_refused`). Asked when the
    /// handler starts listening on `port`; the filter runs on the network
    /// cores for every SYN (a flood's too): keep it short, never block, and
    /// keep its state in atomics or behind a lock (one filter may serve
    /// several listeners and cores). Kernel sockets complete the handshake
    /// in the kernel: there it runs at accept and the connection is reset
    /// before any callback. The default (None) takes every SYN;
    /// [`ConnHandler::admit`] still runs after the handshake.
    fn syn_filter(&self, _port: u16) -> Option<SynFilter> {
        None
    }

    /// A connection to this handler's listener completed its handshake.
    fn on_accept(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}

    /// A connection opened by [`Net::connect`] completed its handshake.
    fn on_connected(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}

    /// New data can be read ([`Net::recv`] / [`Net::peek`]). Not repeated
    /// until the application has read something: a handler that returns
    /// with bytes unread hears of that connection's data again only after
    /// its next read (or at [`ConnHandler::on_peer_closed`]). So a handler
    /// that waits for a whole message must not leave a partial one in
    /// place: [`Net::peek`] shows one contiguous piece, which on flowlane's
    /// TCP is one segment's payload and in queue-pair mode one buffer, and
    /// may end in the middle of a line or a header, where a kernel socket's
    /// buffer would show it whole. Take the partial piece into a buffer of
    /// the handler's own (`recv`, or `peek` + `consume`) and read on, as
    /// the line server of the crate's documentation does; leaving bytes
    /// unread is for back-pressure (a reply that does not fit yet), resumed
    /// from [`ConnHandler::on_writable`].
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle);

    /// Send-buffer space freed up after a [`Net::send`] that did not fit, or
    /// after [`Net::want_writable`].
    fn on_writable(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}

    /// The peer finished sending. The default closes the connection once
    /// everything was read (a handler that still has data to read or send
    /// closes it itself later).
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if net.is_eof(conn) {
            let _ = net.close(conn);
        }
    }

    /// The connection is gone; the handle is now invalid for every call
    /// but [`Net::user_data`], which still gives the word the handler
    /// stored, so that it can free what the word indexes.
    fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, _reason: CloseReason) {}

    /// The connection moves to another core (the rebalancer moves its RSS
    /// bucket there): return what this handler keeps for it outside the
    /// stack (its entry in the handler's own map, say), and forget it here.
    /// The connection's TCP state, buffered data and user-data word
    /// ([`Net::set_user_data`]) move without help. The same handler,
    /// registered in the same order on the other core, gets it back in
    /// [`ConnHandler::on_import`]; the connection's handle changes. The
    /// default keeps nothing: right for handlers whose per-connection state
    /// is in the user-data word, or that have none.
    fn on_export(&mut self, _net: &mut dyn Net, _conn: ConnHandle) -> Option<ConnState> {
        None
    }

    /// A connection moved here from another core, with its new handle and
    /// what [`ConnHandler::on_export`] returned there. No other callback
    /// tells of the move: events continue as if it had not happened.
    fn on_import(&mut self, _net: &mut dyn Net, _conn: ConnHandle, _state: Option<ConnState>) {}

    /// A connection moving here could not be taken in (the new core's
    /// stack refused its state: counted by the backend; not expected of a
    /// stack's own export): it is gone, the peer's next segment draws a
    /// reset, and no other callback comes for it. `state` is what
    /// [`ConnHandler::on_export`] returned for it on the old core. The
    /// default drops it; a handler that told someone else of the
    /// connection tells them it ended.
    fn on_import_failed(&mut self, _net: &mut dyn Net, _state: Option<ConnState>) {}

    /// The service is stopping: called once for each connection this
    /// handler owns, right after the listeners closed (no new connection
    /// comes). A handler that can end it cleanly closes it now (an idle
    /// keep-alive connection, between requests: [`Net::close`], a FIN) or
    /// once what is under way is done, and answers [`AtStop::Finish`]; the
    /// stop then waits for its close, for a bounded drain (2 s), and resets
    /// whatever is still open after it. The default does nothing and
    /// answers [`AtStop::Reset`]: the connection is reset at the drain's
    /// end, as every connection was before handlers could opt in.
    fn on_stop(&mut self, _net: &mut dyn Net, _conn: ConnHandle) -> AtStop {
        AtStop::Reset
    }

    /// Called on every pass of the owning core's loop (at least every 10 ms,
    /// more often under load), for time-driven work such as starting to send
    /// at an agreed instant. Keep it cheap.
    fn on_tick(&mut self, _net: &mut dyn Net) {}
}
