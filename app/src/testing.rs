//! Support for tests that fake a [`Net`]: the settings and
//! queries a fake has no use for, written once, and [`OneConn`], one
//! connection's buffers with no stack behind them, and [`KeptHandler`], a
//! core's set-up that hands the test the handler an extension registers.
//!
//! Only with the `testing` feature (and in this crate's own tests), so that
//! it is no part of the API an application sees.

/// Implements, inside an `impl Net for Fake` block, the methods of
/// [`Net`](crate::Net) a fake stack has no use for: the per-connection
/// settings (`set_nodelay`, `set_keepalive`, `set_send_buffer`,
/// `set_recv_buffer`, `set_congestion`, `set_user_data`) take anything and
/// do nothing, `user_data` is 0, `state` is `Established` and `info` is
/// `Err(WouldBlock)` (no TCP figures). The fake writes the rest: what its
/// test looks at. `fake_net_settings!(except info)` leaves `info` to a
/// fake whose test reads its figures.
///
/// ```
/// use flowlane_app::{ConnHandle, Error, FourTuple, Net, Placement, Stats};
/// use std::net::SocketAddr;
/// use std::time::Duration;
///
/// /// A connection that takes every byte and has none to read.
/// #[derive(Default)]
/// struct Sink {
///     sent: usize,
///     stats: Stats,
/// }
///
/// impl Net for Sink {
///     flowlane_app::fake_net_settings!();
///     fn now(&self) -> Duration {
///         Duration::ZERO
///     }
///     fn placement(&self) -> Placement {
///         Placement { queue: 0, cpu: None, node: 0 }
///     }
///     fn connect(&mut self, _remote: SocketAddr) -> Result<ConnHandle, Error> {
///         Err(Error::InvalidState)
///     }
///     fn send(&mut self, _conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
///         self.sent += data.len();
///         Ok(data.len())
///     }
///     fn recv(&mut self, _conn: ConnHandle, _buf: &mut [u8]) -> Result<usize, Error> {
///         Err(Error::WouldBlock)
///     }
///     fn peek(&self, _conn: ConnHandle) -> Result<&[u8], Error> {
///         Ok(&[])
///     }
///     fn consume(&mut self, _conn: ConnHandle, _n: usize) -> Result<usize, Error> {
///         Ok(0)
///     }
///     fn is_eof(&self, _conn: ConnHandle) -> bool {
///         false
///     }
///     fn send_space(&self, _conn: ConnHandle) -> Result<usize, Error> {
///         Ok(usize::MAX)
///     }
///     fn want_writable(&mut self, _conn: ConnHandle) -> bool {
///         false
///     }
///     fn shutdown_write(&mut self, _conn: ConnHandle) -> Result<(), Error> {
///         Ok(())
///     }
///     fn close(&mut self, _conn: ConnHandle) -> Result<(), Error> {
///         Ok(())
///     }
///     fn abort(&mut self, _conn: ConnHandle) -> Result<(), Error> {
///         Ok(())
///     }
///     fn four_tuple(&self, _conn: ConnHandle) -> Result<FourTuple, Error> {
///         Err(Error::InvalidState)
///     }
///     fn stats(&self) -> &Stats {
///         &self.stats
///     }
/// }
///
/// let mut sink = Sink::default();
/// let conn = ConnHandle::from_parts(0, 0);
/// assert_eq!(sink.send(conn, b"hello"), Ok(5));
/// assert_eq!(sink.set_nodelay(conn, true), Ok(()));
/// assert_eq!(sink.user_data(conn), Ok(0));
/// ```
#[macro_export]
macro_rules! fake_net_settings {
    () => {
        $crate::fake_net_settings!(except info);
        fn info(
            &self,
            _conn: $crate::ConnHandle,
        ) -> ::core::result::Result<$crate::ConnInfo, $crate::Error> {
            Err($crate::Error::WouldBlock)
        }
    };
    (except info) => {
        fn set_nodelay(
            &mut self,
            _conn: $crate::ConnHandle,
            _nodelay: bool,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_keepalive(
            &mut self,
            _conn: $crate::ConnHandle,
            _on: bool,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_send_buffer(
            &mut self,
            _conn: $crate::ConnHandle,
            _bytes: usize,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_recv_buffer(
            &mut self,
            _conn: $crate::ConnHandle,
            _bytes: usize,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_congestion(
            &mut self,
            _conn: $crate::ConnHandle,
            _alg: $crate::CongestionAlgorithm,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn state(
            &self,
            _conn: $crate::ConnHandle,
        ) -> ::core::result::Result<$crate::State, $crate::Error> {
            Ok($crate::State::Established)
        }
        fn set_user_data(
            &mut self,
            _conn: $crate::ConnHandle,
            _data: u64,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn user_data(
            &self,
            _conn: $crate::ConnHandle,
        ) -> ::core::result::Result<u64, $crate::Error> {
            Ok(0)
        }
    };
}

use crate::{
    ConnHandle, ConnHandler, ConnInfo, Dispatcher, Error, FourTuple, HandlerId, Net, Placement,
    Setup, Stats,
};
use std::net::SocketAddr;
use std::time::Duration;

/// One connection's buffers and no stack: a [`Net`] for a handler's unit
/// tests that keeps [`Net`]'s documented contract on one connection (any
/// handle is taken as it). The test puts what the peer sent in `inbox`
/// (and its FIN in `peer_fin`), reads what the handler sent in `sent` and
/// what it did to the connection in `calls`, and moves `now` itself.
///
/// - `send` takes what `send_room` leaves (`Err(WouldBlock)` when it
///   takes nothing) and refuses (`Err(InvalidState)`) once writing is
///   over (`shutdown_write`, `close` or `abort` called); what it takes is
///   added to `unacked`, which `info` reports (`Err(WouldBlock)` while it
///   is `None`);
/// - `recv` reads `inbox`: `Ok(0)` at end of stream only, `Err(WouldBlock)`
///   with nothing to read (or an empty buffer before the end);
/// - `want_writable` is true only while the send buffer is full and
///   writing is not over;
/// - `close` with unread bytes is a reset, as the stack's (`reset`), as is
///   `abort`;
/// - `connect` returns `conn`; `placement` is queue 0 on node 0.
#[derive(Debug)]
pub struct OneConn {
    /// The handle `connect` returns.
    pub conn: ConnHandle,
    /// What `now` returns.
    pub now: Duration,
    /// Bytes the peer sent that the handler has not read.
    pub inbox: Vec<u8>,
    /// The peer's FIN came (after `inbox`).
    pub peer_fin: bool,
    /// Every byte the handler sent, in order.
    pub sent: Vec<u8>,
    /// Bytes the next sends take in all (`None`: unbounded).
    pub send_room: Option<usize>,
    /// Bytes sent that the peer has not acknowledged, as `info` tells
    /// them (sends add to it; the test takes acknowledged bytes off);
    /// `None`: `info` fails (`WouldBlock`).
    pub unacked: Option<usize>,
    /// What the handler did to the connection, in order: `"connect"`,
    /// `"shutdown"`, `"close"`, `"abort"`.
    pub calls: Vec<&'static str>,
    /// The connection was reset: `abort`, or `close` with bytes unread.
    pub reset: bool,
    /// What `stats` returns.
    pub stats: Stats,
}

impl Default for OneConn {
    /// A connection (handle 0/0) at time zero with nothing read or sent,
    /// an unbounded send buffer and no figures for `info`.
    fn default() -> OneConn {
        OneConn {
            conn: ConnHandle::from_parts(0, 0),
            now: Duration::ZERO,
            inbox: Vec::new(),
            peer_fin: false,
            sent: Vec::new(),
            send_room: None,
            unacked: None,
            calls: Vec::new(),
            reset: false,
            stats: Stats::default(),
        }
    }
}

impl OneConn {
    /// Whether the handler called `what` (`"shutdown"`, `"close"`, ...).
    pub fn did(&self, what: &str) -> bool {
        self.calls.contains(&what)
    }

    /// Whether the connection was closed without a reset.
    pub fn closed(&self) -> bool {
        self.did("close") && !self.reset
    }

    /// What the handler sent, as text (lossy).
    pub fn sent_text(&self) -> String {
        String::from_utf8_lossy(&self.sent).into_owned()
    }

    fn writing_over(&self) -> bool {
        self.calls
            .iter()
            .any(|c| matches!(*c, "shutdown" | "close" | "abort"))
    }
}

impl Net for OneConn {
    crate::fake_net_settings!(except info);
    fn info(&self, _conn: ConnHandle) -> Result<ConnInfo, Error> {
        let unacked = self.unacked.ok_or(Error::WouldBlock)?;
        Ok(ConnInfo {
            unacked,
            ..ConnInfo::default()
        })
    }
    fn now(&self) -> Duration {
        self.now
    }
    fn placement(&self) -> Placement {
        Placement {
            queue: 0,
            cpu: None,
            node: 0,
        }
    }
    fn connect(&mut self, _remote: SocketAddr) -> Result<ConnHandle, Error> {
        self.calls.push("connect");
        Ok(self.conn)
    }
    fn send(&mut self, _conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        if self.writing_over() {
            return Err(Error::InvalidState);
        }
        let n = self.send_room.map_or(data.len(), |r| r.min(data.len()));
        if n == 0 && !data.is_empty() {
            return Err(Error::WouldBlock);
        }
        if let Some(r) = &mut self.send_room {
            *r -= n;
        }
        if let Some(u) = &mut self.unacked {
            *u += n;
        }
        self.sent.extend_from_slice(&data[..n]);
        Ok(n)
    }
    fn recv(&mut self, conn: ConnHandle, buf: &mut [u8]) -> Result<usize, Error> {
        if self.is_eof(conn) {
            return Ok(0);
        }
        if self.inbox.is_empty() || buf.is_empty() {
            return Err(Error::WouldBlock);
        }
        let n = buf.len().min(self.inbox.len());
        buf[..n].copy_from_slice(&self.inbox[..n]);
        self.consume(conn, n)
    }
    fn peek(&self, _conn: ConnHandle) -> Result<&[u8], Error> {
        Ok(&self.inbox)
    }
    fn consume(&mut self, _conn: ConnHandle, n: usize) -> Result<usize, Error> {
        let n = n.min(self.inbox.len());
        self.inbox.drain(..n);
        Ok(n)
    }
    fn is_eof(&self, _conn: ConnHandle) -> bool {
        self.peer_fin && self.inbox.is_empty()
    }
    fn send_space(&self, _conn: ConnHandle) -> Result<usize, Error> {
        Ok(self.send_room.unwrap_or(usize::MAX))
    }
    fn want_writable(&mut self, conn: ConnHandle) -> bool {
        !self.writing_over() && self.send_space(conn) == Ok(0)
    }
    fn shutdown_write(&mut self, _conn: ConnHandle) -> Result<(), Error> {
        self.calls.push("shutdown");
        Ok(())
    }
    fn close(&mut self, _conn: ConnHandle) -> Result<(), Error> {
        self.calls.push("close");
        self.reset |= !self.inbox.is_empty();
        Ok(())
    }
    fn abort(&mut self, _conn: ConnHandle) -> Result<(), Error> {
        self.calls.push("abort");
        self.reset = true;
        Ok(())
    }
    fn four_tuple(&self, _conn: ConnHandle) -> Result<FourTuple, Error> {
        Err(Error::InvalidState)
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
}

/// A core's [`Setup`] that keeps the handler registered on it with
/// `add_boxed` (a queue-pair relay, say) for the test to call as the core
/// would: `handler` holds it. `listen_with` is taken and does nothing; a
/// handler given to `listen_boxed` is refused (`InvalidState`).
#[derive(Default)]
pub struct KeptHandler {
    /// The queue the set-up is for.
    pub queue: u32,
    /// The handler registered last.
    pub handler: Option<Box<dyn ConnHandler>>,
    ids: Dispatcher,
}

impl KeptHandler {
    /// A set-up for `queue` that has kept no handler yet.
    pub fn new(queue: u32) -> KeptHandler {
        KeptHandler {
            queue,
            ..KeptHandler::default()
        }
    }
}

impl std::fmt::Debug for KeptHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptHandler")
            .field("queue", &self.queue)
            .field("handler", &self.handler.as_ref().map(|_| "kept"))
            .finish_non_exhaustive()
    }
}

/// Handles no connection: what [`KeptHandler`] registers in the kept
/// handler's place, for its id.
struct Nothing;

impl ConnHandler for Nothing {
    fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
}

impl Setup for KeptHandler {
    fn queue(&self) -> u32 {
        self.queue
    }
    fn listen_boxed(
        &mut self,
        _port: u16,
        _handler: Box<dyn ConnHandler>,
    ) -> Result<HandlerId, Error> {
        Err(Error::InvalidState)
    }
    fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId {
        self.handler = Some(handler);
        self.ids.add_boxed(Box::new(Nothing))
    }
    fn listen_with(&mut self, _port: u16, _handler: HandlerId) -> Result<(), Error> {
        Ok(())
    }
}
