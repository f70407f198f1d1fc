//! The application's side of a set of connections.

use flowlane_tcp::{CloseReason, ConnHandle};

use crate::net::Net;

/// The application side of a set of connections: a listener's, or an
/// active opener's. Every callback runs on the core that owns the
/// connection, inline with packet processing (run to completion): keep them
/// short and never block. Calls on connections go through the [`Net`]
/// passed in, which is valid for that callback only.
pub trait ConnHandler: Send {
    /// Called once, before any other callback, on the owning core's first
    /// loop iteration (open connections here with [`Net::connect`]).
    fn on_start(&mut self, _net: &mut dyn Net) {}

    /// A connection to this handler's listener completed its handshake.
    fn on_accept(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}

    /// A connection opened by [`Net::connect`] completed its handshake.
    fn on_connected(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}

    /// New data can be read ([`Net::recv`] / [`Net::peek`]). Not repeated
    /// until the application has read something.
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

    /// The connection is gone; the handle is now invalid.
    fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, _reason: CloseReason) {}

    /// Called on every pass of the owning core's loop (at least every 10 ms,
    /// more often under load), for time-driven work such as starting to send
    /// at an agreed instant. Keep it cheap.
    fn on_tick(&mut self, _net: &mut dyn Net) {}
}
