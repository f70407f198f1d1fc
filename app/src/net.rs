//! The per-callback context: what a handler can do while it runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flowlane_tcp::{CongestionAlgorithm, ConnHandle, ConnInfo, Error, FourTuple, State, Stats};

/// Where a connection is processed: the receive queue, the CPU its worker
/// is pinned to, and that CPU's NUMA node. Application threads that serve
/// the connection run best on `node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The receive queue (one per worker).
    pub queue: u32,
    /// The CPU the queue's worker is pinned to (None: not pinned).
    pub cpu: Option<u32>,
    /// The NUMA node of that CPU and of the queue's packet memory.
    pub node: u32,
}

impl Placement {
    /// Queue (core) `queue`, on no CPU in particular (not pinned), on node
    /// 0: where a program that does not place its cores runs them.
    pub const fn unpinned(queue: u32) -> Placement {
        Placement {
            queue,
            cpu: None,
            node: 0,
        }
    }

    /// Cores `0..cores`, [`Placement::unpinned`].
    pub fn unpinned_cores(cores: u32) -> Vec<Placement> {
        (0..cores).map(Placement::unpinned).collect()
    }
}

/// Bytes of the scratch [`Net::echo`] uses when it is given an empty one.
const ECHO_SCRATCH: usize = 4096;

/// Wakes a core's loop from another thread ([`Net::waker`]). Cheap to
/// call often: wakes that come before the loop ran collapse into one.
pub trait Wake: Send + Sync {
    /// Makes the loop run a pass soon.
    fn wake(&self);
}

/// What a [`ConnHandler`](crate::ConnHandler) can do while it runs: calls on
/// the connections of the core it runs on. Implemented by each backend; a
/// handler sees it as `&mut dyn Net`, valid for one callback.
///
/// Errors are [`flowlane_tcp::Error`]s: `InvalidHandle` for a connection that
/// is gone (or belongs to another core), `WouldBlock` when nothing can be
/// done now.
pub trait Net {
    /// The core's clock: time since the backend started.
    fn now(&self) -> Duration;

    /// Where this core's connections are processed (queue, CPU, node).
    fn placement(&self) -> Placement;

    /// The receive queue (and so the core) this runs on.
    fn queue(&self) -> u32 {
        self.placement().queue
    }

    /// Where `conn` is processed: its flow's (queue, CPU, node) hint. In
    /// run to completion that is this core ([`Net::placement`]); in
    /// queue-pair mode the network core that runs the connection's stack,
    /// not the application thread.
    fn conn_placement(&self, conn: ConnHandle) -> Result<Placement, Error> {
        self.state(conn)?;
        Ok(self.placement())
    }

    /// Opens a connection to `remote` from a local port whose replies reach
    /// this core. Owned by the calling handler; `on_connected` follows.
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnHandle, Error>;

    /// Queues data; returns how much fit (`Err(WouldBlock)` if none did).
    /// Whenever less than all of `data` fit, `on_writable` follows once
    /// space frees up (every backend keeps this contract), unless writing
    /// is over first ([`Net::want_writable`]).
    fn send(&mut self, conn: ConnHandle, data: &[u8]) -> Result<usize, Error>;

    /// Reads in-order data: `Ok(0)` is end of stream (the peer closed and
    /// everything was read), and nothing else; `Err(WouldBlock)` nothing
    /// yet. An empty `buf` reads nothing: `Ok(0)` at end of stream, else
    /// `Err(WouldBlock)`, even with bytes waiting (see [`Net::peek`]).
    fn recv(&mut self, conn: ConnHandle, buf: &mut [u8]) -> Result<usize, Error>;

    /// Zero-copy read of the next contiguous readable bytes; follow with
    /// [`Net::consume`]. One piece, not everything readable: on flowlane's
    /// TCP a segment's payload, in queue-pair mode a buffer, so a message
    /// may continue in the next piece, which shows once this one is
    /// consumed (see [`ConnHandler::on_data`](crate::ConnHandler::on_data): a handler that leaves a
    /// partial message here is not called again for it).
    fn peek(&self, conn: ConnHandle) -> Result<&[u8], Error>;

    /// Drops `n` bytes seen through [`Net::peek`]; returns how many were
    /// dropped.
    fn consume(&mut self, conn: ConnHandle, n: usize) -> Result<usize, Error>;

    /// Whether the peer closed and everything was read (false for an invalid
    /// handle).
    fn is_eof(&self, conn: ConnHandle) -> bool;

    /// Free send-buffer space.
    fn send_space(&self, conn: ConnHandle) -> Result<usize, Error>;

    /// Asks for `on_writable` once send-buffer space frees up, for a handler
    /// that sized its writes with [`Net::send_space`] and found it zero.
    /// Returns false (and asks for nothing) if there is space now, or once
    /// writing is over: after [`Net::close`] or [`Net::shutdown_write`], no
    /// `on_writable` comes for the connection on any backend, not even one
    /// a short [`Net::send`] asked for before.
    fn want_writable(&mut self, conn: ConnHandle) -> bool;

    /// Sends FIN after the queued data; reading goes on.
    fn shutdown_write(&mut self, conn: ConnHandle) -> Result<(), Error>;

    /// Closes both directions (FIN after queued data; a reset if unread data
    /// remains, as [`Net::abort`], or arrives after it).
    /// `on_closed` follows.
    fn close(&mut self, conn: ConnHandle) -> Result<(), Error>;

    /// Resets the connection, at once: later calls on it fail, and the
    /// only callback still to come for it is `on_closed` (`Aborted`),
    /// after the current one; data and events on their way are dropped.
    fn abort(&mut self, conn: ConnHandle) -> Result<(), Error>;

    /// Disables (`true`) or enables Nagle's algorithm.
    fn set_nodelay(&mut self, conn: ConnHandle, nodelay: bool) -> Result<(), Error>;

    /// Turns keepalive probes on or off for the connection (as
    /// `SO_KEEPALIVE`; the backend's timings, Linux's by default: 2 h idle,
    /// 75 s apart, 9 probes).
    fn set_keepalive(&mut self, conn: ConnHandle, on: bool) -> Result<(), Error>;

    /// Fixes the connection's send buffer at `bytes` of payload (as
    /// `SO_SNDBUF`): writes take no more than fits, and the backend stops
    /// sizing it by itself. Backends clamp it to their own bounds.
    fn set_send_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error>;

    /// Fixes the connection's receive buffer at `bytes` of payload (as
    /// `SO_RCVBUF`): it bounds the window offered to the peer, and the
    /// backend stops sizing it by itself. A window already offered is
    /// never taken back. Backends clamp it to their own bounds.
    fn set_recv_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error>;

    /// Chooses the connection's congestion control (as Linux's
    /// `TCP_CONGESTION`: the window carries over).
    fn set_congestion(&mut self, conn: ConnHandle, alg: CongestionAlgorithm) -> Result<(), Error>;

    /// The connection's queues and transmission state ([`ConnInfo`], what
    /// Linux's `TCP_INFO` tells): readable and unsent bytes include what
    /// waits in the backend's own buffers. On kernel sockets the kernel is
    /// asked (a sock_diag round trip: for statistics, not every packet). In
    /// queue-pair mode the network core's figures are those of its answer
    /// to the previous call on the connection (each call asks anew; the
    /// first gets `Err(WouldBlock)`). Once the peer's FIN has come, they are
    /// the figures as of that FIN if the connection's figures were asked for
    /// before: the core sends them with the FIN, so an application that asks
    /// as it opens the connection has its end-of-stream figures at once.
    /// They stay readable in the handlers of the connection's last events,
    /// its `Closed` included. On flowlane's TCP (run to completion) the
    /// stack keeps a connection's final figures, as they were when it let
    /// the connection go (bytes never read or never acknowledged
    /// included), for its `on_closed`. On kernel sockets the socket is
    /// gone (or in TIME-WAIT, which has no `tcp_info`) by its `Closed`: if
    /// the connection's figures were asked for before, the loop reads them
    /// again at its last events (the peer's FIN, the handler's
    /// `shutdown_write`, `close` or `abort`, and the end itself while the
    /// kernel still tells them: an abort's) and answers the last of them in
    /// `on_closed`; retransmissions after those are not in them. A
    /// connection never asked about costs no question there: its
    /// `on_closed` gets `Err(InvalidHandle)`. So a handler that wants a
    /// connection's final figures on every backend asks once early (as it
    /// accepts or opens it).
    fn info(&self, conn: ConnHandle) -> Result<ConnInfo, Error>;

    /// The connection's addresses.
    fn four_tuple(&self, conn: ConnHandle) -> Result<FourTuple, Error>;

    /// The connection's TCP state.
    fn state(&self, conn: ConnHandle) -> Result<State, Error>;

    /// Stores one word of the application's for the connection (an index
    /// into its own per-connection table), so that a handler needs no side
    /// map from handles to its state. Zero until set. The word stays
    /// readable in the connection's [`ConnHandler::on_closed`](crate::ConnHandler::on_closed), where the
    /// handler frees what it indexes (the [`crate::Dispatcher`] keeps it
    /// for the handler, on every backend); it moves with the connection to
    /// another core.
    fn set_user_data(&mut self, conn: ConnHandle, data: u64) -> Result<(), Error>;

    /// The word stored by [`Net::set_user_data`], up to and in the
    /// connection's `on_closed`.
    fn user_data(&self, conn: ConnHandle) -> Result<u64, Error>;

    /// This core's TCP counters.
    fn stats(&self) -> &Stats;

    /// Something another thread can call to make this core's loop run a
    /// pass soon (its handlers' `on_tick` included) instead of sleeping
    /// out its idle wait: what queue-pair mode's application threads call
    /// after queueing requests for the core. `None` where the backend has
    /// none.
    fn waker(&mut self) -> Option<Arc<dyn Wake>> {
        None
    }

    /// Reads and drops everything readable on `conn` now (zero-copy: peek,
    /// then consume); returns the bytes dropped. For connections whose peer
    /// is not expected to send anything that matters.
    fn discard(&mut self, conn: ConnHandle) -> usize {
        let mut dropped = 0;
        while let Ok(d) = self.peek(conn) {
            let n = d.len();
            if n == 0 {
                break;
            }
            match self.consume(conn, n) {
                Ok(m) if m > 0 => dropped += m,
                _ => break,
            }
        }
        dropped
    }

    /// Echo service step: moves what has arrived on `conn` to its send
    /// buffer, as far as that buffer takes, through `scratch`; asks for
    /// `on_writable` when the send buffer is full, and closes once the peer
    /// has closed and everything was echoed. Returns the bytes echoed.
    /// A byte is consumed only once the send buffer took it: a send that
    /// takes less than `send_space` promised (a backend out of send memory)
    /// leaves the rest to read again at `on_writable`. An empty `scratch`
    /// is replaced by one of 4 KiB on the stack (with
    /// none, nothing could move, and no `on_writable` would come while the
    /// send buffer has room).
    fn echo(&mut self, conn: ConnHandle, scratch: &mut [u8]) -> usize {
        if scratch.is_empty() {
            return self.echo(conn, &mut [0u8; ECHO_SCRATCH]);
        }
        let mut echoed = 0;
        loop {
            let space = self.send_space(conn).unwrap_or(0).min(scratch.len());
            if space == 0 {
                self.want_writable(conn);
                return echoed;
            }
            let k = match self.peek(conn) {
                Ok(d) if !d.is_empty() => {
                    let k = d.len().min(space);
                    scratch[..k].copy_from_slice(&d[..k]);
                    k
                }
                Ok(_) if self.is_eof(conn) => {
                    let _ = self.close(conn);
                    return echoed;
                }
                _ => return echoed,
            };
            match self.send(conn, &scratch[..k]) {
                Ok(n) => {
                    let _ = self.consume(conn, n);
                    echoed += n;
                    if n < k {
                        // `on_writable` follows (the send's contract).
                        return echoed;
                    }
                }
                // `on_writable` follows; other errors end the connection.
                Err(_) => return echoed,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::OneConn;

    /// An empty scratch still echoes everything and closes after the
    /// peer's close (it never waited for an `on_writable` that could not
    /// come: the send buffer had room).
    #[test]
    fn echo_with_an_empty_scratch_echoes_and_closes() {
        let conn = ConnHandle::from_parts(0, 1);
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut net = OneConn {
            inbox: data.clone(),
            peer_fin: true,
            ..OneConn::default()
        };
        assert_eq!(net.echo(conn, &mut []), data.len());
        assert_eq!(net.sent, data);
        assert!(net.closed(), "closed once the peer had closed");
    }
}
