//! One kernel TCP connection as the application API sees it: the socket,
//! its user-space buffers, and what has been told to the handler.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use flowlane_app::{seen_state, Error};
use flowlane_tcp::{CloseReason, ConnInfo, State, Unreachable};
use mio::net::TcpStream;

use crate::buffer::{BufferPool, ByteBuffer};

/// A connection's socket and buffers. The receive buffer is what
/// [`Net::peek`](flowlane_app::Net::peek) shows; the send buffer holds what
/// the socket did not take yet, bounded so that `send` pushes back.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) rx: ByteBuffer,
    pub(crate) tx: ByteBuffer,
    /// An active open whose handshake has not completed.
    pub(crate) connecting: bool,
    /// The socket returned end of stream.
    pub(crate) peer_eof: bool,
    /// `PeerClosed` was queued.
    pub(crate) peer_closed_told: bool,
    /// `Readable` was queued and the application has not read since.
    pub(crate) readable_told: bool,
    /// Reading stopped because the receive buffer was full: the socket
    /// may hold more, and no new readiness edge will say so.
    pub(crate) rx_stalled: bool,
    /// Reading waits for the core's receive memory (no buffer was free
    /// within the budget): the connection is in the core's queue of
    /// waiters, read again when a buffer is given back.
    pub(crate) waits_for_memory: bool,
    /// A buffer given back was promised to this waiter: its next read
    /// takes it, before any reader that did not wait (oldest first).
    pub(crate) memory_granted: bool,
    /// The application asked for `Writable`.
    pub(crate) want_writable: bool,
    /// `shutdown_write` was asked: FIN once the send buffer is empty.
    pub(crate) shut_pending: bool,
    /// FIN was sent.
    pub(crate) write_shut: bool,
    /// `close` was asked: FIN once the send buffer is empty; the
    /// connection ends once the peer's FIN came too (and its `PeerClosed`
    /// was dispatched), or [`FIN_WAIT`] after ours.
    pub(crate) closing: bool,
    /// `PeerClosed` reached the handler.
    pub(crate) peer_closed_dispatched: bool,
    /// When our FIN went out after `close`.
    pub(crate) fin_sent_at: Option<Instant>,
    /// When the application called `close`.
    pub(crate) closed_at: Option<Instant>,
    pub(crate) user_data: u64,
    /// The handler asked for the connection's figures (`Net::info`): the
    /// loop reads them again at its last events, for its `on_closed`
    /// ([`Conn::last_info`]).
    pub(crate) info_asked: Cell<bool>,
    /// The figures as the kernel last told them at one of those events.
    pub(crate) last_info: Option<ConnInfo>,
}

/// How long a closed connection waits for the peer's FIN after sending
/// its own before it hands the socket to the kernel (Linux's
/// `tcp_fin_timeout` default).
pub(crate) const FIN_WAIT: Duration = Duration::from_secs(60);

/// What reading or writing the socket came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Io {
    /// Progress (bytes moved), or nothing to do now.
    Ok(usize),
    /// The connection failed: it ends so (after `moved` bytes went in
    /// this call).
    Failed(Failure, usize),
}

/// How a socket error ends a connection: the reason flowlane's stack
/// gives for the same event, and whether it was the peer's reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    /// What the handler's `on_closed` hears.
    pub(crate) reason: CloseReason,
    /// An RST came from the peer (counted in `resets_in`).
    pub(crate) peer_reset: bool,
}

impl Failure {
    /// The failure a socket error (a read's, a write's, or the pending
    /// one `SO_ERROR` gives) reports.
    ///
    /// An RST is `ECONNRESET`, `ECONNREFUSED` in SYN-SENT and `EPIPE` in
    /// CLOSE-WAIT (tcp(7) ERRORS: "EPIPE The other end closed the socket
    /// unexpectedly"; Linux's `tcp_reset`): `Reset`, as the stack reports
    /// an RST in any state. Retransmissions or keepalive probes that ran
    /// out give `ETIMEDOUT` (tcp(7)), or the error saved while they went
    /// unanswered (Linux's `tcp_write_err` reports the ICMP or neighbour
    /// error it kept, if any; tcp(7): "Any errors defined for ip(7) ...
    /// may also be returned for TCP", ip(7): "EHOSTUNREACH ... can be
    /// caused by an ICMP message from a remote router"): `EHOSTUNREACH`
    /// and `ENETUNREACH` end the connection `Unreachable`, as the stack
    /// ends one that times out after a router's destination unreachable
    /// (the soft error it kept, RFC 1122 §4.2.3.9); `EHOSTDOWN`,
    /// `ENETDOWN` (an open to a local host that answers no ARP) are a
    /// `Timeout`. Anything else ends the connection as a reset that is
    /// not counted as the peer's.
    pub(crate) fn of(e: &std::io::Error) -> Failure {
        use nix::errno::Errno;
        let errno = e.raw_os_error().map(Errno::from_raw);
        let (reason, peer_reset) = match errno {
            Some(Errno::ECONNRESET | Errno::ECONNREFUSED | Errno::EPIPE) => {
                (CloseReason::Reset, true)
            }
            Some(Errno::EHOSTUNREACH) => (CloseReason::Unreachable(Unreachable::Host), false),
            Some(Errno::ENETUNREACH) => (CloseReason::Unreachable(Unreachable::Network), false),
            Some(Errno::ETIMEDOUT | Errno::EHOSTDOWN | Errno::ENETDOWN) => {
                (CloseReason::Timeout, false)
            }
            _ => (CloseReason::Reset, false),
        };
        Failure { reason, peer_reset }
    }

    /// The failure of an open whose connect(2) is in progress (its
    /// `SO_ERROR`, or an error of connect(2) itself): as any connection's
    /// ([`Failure::of`]). An ICMP destination unreachable the kernel took
    /// for its SYN (`tcp_v4_err` ends the open with the error it maps the
    /// code to: `EHOSTUNREACH` for a host, source route or filter's,
    /// `ENETUNREACH` for a network's) ends it `Unreachable`, as the stack
    /// ends it for the same message (a "port unreachable" is
    /// `ECONNREFUSED`, which reads as the peer's RST: `Reset`).
    pub(crate) fn of_open(e: &std::io::Error) -> Failure {
        Failure::of(e)
    }
}

/// The error an active open's connect(2) (or the socket(2) before it)
/// gives the application, as flowlane's TCP gives it for the same cause:
/// `AddrInUse` when no local port is free (connect(2), EADDRNOTAVAIL:
/// "all port numbers in the ephemeral port range are currently in use";
/// the AF_XDP backend's `connect` when its ports ran out),
/// `ConnectionLimit` when descriptors or memory ran out (socket(2):
/// EMFILE, ENFILE, ENOBUFS, ENOMEM), `InvalidAddress` otherwise (an
/// address of no family here). Not for the errors the stack would meet
/// only after its SYN ([`connect_failure`]): those end the open instead.
pub(crate) fn connect_error(e: &std::io::Error) -> Error {
    use nix::errno::Errno;
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::EADDRNOTAVAIL | Errno::EADDRINUSE) => Error::AddrInUse,
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM) => {
            Error::ConnectionLimit
        }
        _ => Error::InvalidAddress,
    }
}

/// How an open ends whose connect(2) failed at once for a cause flowlane's
/// stack meets only on the wire, where its `connect` returns a handle and
/// `on_closed` tells the end: no route (`ENETUNREACH`, `EHOSTUNREACH`)
/// is `Unreachable` ([`Failure::of_open`]: where the stack's SYN would
/// meet a router's destination unreachable); a link down (`ENETDOWN`,
/// `EHOSTDOWN`) and a SYN a local firewall dropped (`EPERM`, `EACCES`:
/// netfilter's verdict on the SYN, connect(2) "the connection request
/// failed because of a local firewall rule") are an open whose SYNs the
/// stack would have retransmitted unanswered, `Timeout`; a refusal
/// (`ECONNREFUSED`) the stack's `Reset`, the peer's RST counted. None for
/// the others.
pub(crate) fn connect_failure(e: &std::io::Error) -> Option<Failure> {
    use nix::errno::Errno;
    match e.raw_os_error().map(Errno::from_raw)? {
        Errno::EPERM | Errno::EACCES => Some(Failure {
            reason: CloseReason::Timeout,
            peer_reset: false,
        }),
        Errno::ENETUNREACH
        | Errno::EHOSTUNREACH
        | Errno::ENETDOWN
        | Errno::EHOSTDOWN
        | Errno::ETIMEDOUT
        | Errno::ECONNREFUSED => Some(Failure::of_open(e)),
        _ => None,
    }
}

impl Conn {
    pub(crate) fn new(
        stream: TcpStream,
        local: SocketAddr,
        remote: SocketAddr,
        rx: usize,
        tx: usize,
    ) -> Conn {
        Conn {
            stream,
            local,
            remote,
            rx: ByteBuffer::new(rx),
            tx: ByteBuffer::new(tx),
            connecting: false,
            peer_eof: false,
            peer_closed_told: false,
            readable_told: false,
            rx_stalled: false,
            waits_for_memory: false,
            memory_granted: false,
            want_writable: false,
            shut_pending: false,
            write_shut: false,
            closing: false,
            peer_closed_dispatched: false,
            fin_sent_at: None,
            closed_at: None,
            user_data: 0,
            info_asked: Cell::new(false),
            last_info: None,
        }
    }

    /// Reads what the socket holds into the receive buffer (memory from
    /// `pool` while it holds bytes), until the socket has no more, the peer
    /// closed, or the buffer is full.
    pub(crate) fn fill(&mut self, pool: &mut BufferPool) -> Io {
        let r = self.fill_from(pool);
        self.rx.detach(pool);
        r
    }

    fn fill_from(&mut self, pool: &mut BufferPool) -> Io {
        let mut got = 0;
        loop {
            if self.peer_eof {
                return Io::Ok(got);
            }
            if self.rx.space() == 0 {
                self.rx_stalled = true;
                return Io::Ok(got);
            }
            match self.stream.read(self.rx.tail_mut(pool)) {
                Ok(0) => self.peer_eof = true,
                Ok(n) => {
                    self.rx.commit(n);
                    got += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.rx_stalled = false;
                    return Io::Ok(got);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Linux gives what it queued before the error: counted.
                Err(e) => return Io::Failed(Failure::of(&e), got),
            }
        }
    }

    /// Moves the send buffer to the socket as far as it takes (its memory
    /// back to `pool` once empty); sends FIN when asked and the buffer is
    /// empty.
    pub(crate) fn flush(&mut self, pool: &mut BufferPool) -> Io {
        let sent = match write_now(&mut self.stream, self.tx.filled()) {
            Ok(n) => n,
            Err(r) => return Io::Failed(r, 0),
        };
        self.tx.consume(sent);
        self.tx.detach(pool);
        // Not in SYN-SENT: Linux aborts a connect shut down (a reset the
        // peer never sent); the FIN goes once connected.
        if self.tx.is_empty() && self.shut_pending && !self.write_shut && !self.connecting {
            self.write_shut = true;
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
            if self.closing {
                self.fin_sent_at = Some(Instant::now());
            }
        }
        Io::Ok(sent)
    }

    /// How a connection whose FIN went is done, if it is: `Normal` once
    /// the peer's FIN came too, the handler was told of it and read every
    /// byte (after `close`, or after `shutdown_write` alone: the exchange
    /// is over, as the stack ends such a connection, and the kernel
    /// finishes what is left, its TIME-WAIT or the acknowledgement of our
    /// FIN); `Timeout` when a closed connection's peer did not send its
    /// FIN within [`FIN_WAIT`] of ours (the stack's FIN-WAIT-2 timer,
    /// which `CloseReason::Timeout` names).
    pub(crate) fn close_finished(&self, now: Instant) -> Option<CloseReason> {
        if !self.write_shut {
            None
        } else if self.peer_eof && self.peer_closed_dispatched && self.rx.is_empty() {
            Some(CloseReason::Normal)
        } else if self.closing && self.fin_sent_at.is_some_and(|t| now >= t + FIN_WAIT) {
            Some(CloseReason::Timeout)
        } else {
            None
        }
    }

    /// Whether the kernel's socket is still in SYN-SENT: an active open
    /// whose handshake the loop has not seen complete ([`Conn::connecting`])
    /// and that has no peer yet (getpeername(2): `ENOTCONN`). The flag
    /// alone can be stale: the kernel may have completed the handshake
    /// before the loop took the event that says so.
    pub(crate) fn in_syn_sent(&self) -> bool {
        self.connecting && self.stream.peer_addr().is_err()
    }

    /// Whether a stopping core should keep running for this connection,
    /// within its bound: a FIN asked for that has not gone to the kernel
    /// yet (bytes still in the send buffer, or the handshake not done),
    /// or the peer's FIN came and the application has not closed yet (its
    /// close may be on its way, from an application thread in queue-pair
    /// mode). What the AF_XDP service's linger waits for (FIN-WAIT-1,
    /// CLOSE-WAIT, ...) but what the kernel finishes itself once it has
    /// our FIN.
    pub(crate) fn close_pending(&self) -> bool {
        (self.shut_pending && !self.write_shut) || (self.peer_eof && !self.shut_pending)
    }

    /// Whether the kernel may finish this connection when its socket is
    /// dropped: the application's FIN went to the socket after all its
    /// bytes, and nothing received waits unread here. Dropping any other
    /// would send a FIN the application never asked for, after a stream
    /// cut short (close(2) of a socket with unread bytes in the kernel
    /// resets it by itself, tcp(7)/RFC 2525 §2.17).
    pub(crate) fn may_end_quietly(&self) -> bool {
        self.write_shut && self.tx.is_empty() && self.rx.is_empty()
    }

    /// Whether a closed connection's send buffer has not drained into the
    /// socket within [`FIN_WAIT`] of the close: its peer stopped reading
    /// (a zero window answered to every probe, which the kernel keeps
    /// open for good), so its FIN never went. It is reset instead of being
    /// kept, with the core's send memory it holds, for as long as the peer
    /// likes (what Linux's orphan limit does to such a socket).
    pub(crate) fn close_stuck(&self, now: Instant) -> bool {
        self.closing && !self.write_shut && self.closed_at.is_some_and(|t| now >= t + FIN_WAIT)
    }

    /// Takes `data` for sending: straight to the socket, and what it did
    /// not take into the send buffer (memory from `pool`) as far as it
    /// fits. The buffer holds the rest of one write at most: while it
    /// holds bytes (the socket was full) nothing more is taken, so that
    /// bytes are copied once more only at the edge of a full socket, not
    /// all of them. Returns the bytes taken and, of those, written.
    pub(crate) fn send(
        &mut self,
        data: &[u8],
        pool: &mut BufferPool,
    ) -> Result<(usize, usize), Failure> {
        let mut written = 0;
        if !self.tx.is_empty() && !self.connecting {
            written = write_now(&mut self.stream, self.tx.filled())?;
            self.tx.consume(written);
            self.tx.detach(pool);
        }
        if !self.tx.is_empty() {
            return Ok((0, written));
        }
        let direct = if self.connecting {
            0
        } else {
            write_now(&mut self.stream, data)?
        };
        // The rest goes to the send buffer, if it has memory or the
        // core's send budget has room; else it stays with the application.
        let buffered = if self.tx.has_memory() || pool.has_room() {
            self.tx.push(&data[direct..], pool)
        } else {
            0
        };
        Ok((direct + buffered, written + direct))
    }

    /// Free send space as the application sees it: the buffer's whole
    /// capacity while it is empty, none while it holds the rest of a write.
    pub(crate) fn send_space(&self) -> usize {
        if self.tx.is_empty() {
            self.tx.capacity()
        } else {
            0
        }
    }

    /// The connection's state in the TCP state machine's terms, as far as
    /// a socket shows it.
    pub(crate) fn state(&self) -> State {
        seen_state(
            self.connecting,
            self.peer_eof,
            self.write_shut || self.closing,
        )
    }
}

/// Writes `data` to `stream`, as much as it takes now.
fn write_now(stream: &mut TcpStream, data: &[u8]) -> Result<usize, Failure> {
    let mut sent = 0;
    while sent < data.len() {
        match stream.write(&data[sent..]) {
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::of(&e)),
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    fn err(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e as i32)
    }

    /// An RST is the peer's reset in every state it comes in;
    /// retransmissions that went unanswered are a timeout, as on
    /// flowlane's stack, and no reset came; those a router answered
    /// unreachable (Linux reports the error it kept in place of
    /// `ETIMEDOUT`), as an open a router answered so, end saying why, as
    /// the stack ends them.
    #[test]
    fn socket_errors_end_connections_as_the_stack_does() {
        for e in [Errno::ECONNRESET, Errno::ECONNREFUSED, Errno::EPIPE] {
            let f = Failure::of(&err(e));
            assert_eq!((f.reason, f.peer_reset), (CloseReason::Reset, true), "{e}");
        }
        for e in [Errno::ETIMEDOUT, Errno::EHOSTDOWN, Errno::ENETDOWN] {
            let f = Failure::of(&err(e));
            assert_eq!(
                (f.reason, f.peer_reset),
                (CloseReason::Timeout, false),
                "{e}"
            );
        }
        for (e, what) in [
            (Errno::EHOSTUNREACH, Unreachable::Host),
            (Errno::ENETUNREACH, Unreachable::Network),
        ] {
            let f = Failure::of(&err(e));
            assert_eq!(
                (f.reason, f.peer_reset),
                (CloseReason::Unreachable(what), false),
                "{e}"
            );
        }
        let f = Failure::of(&err(Errno::EPROTO));
        assert!(!f.peer_reset, "not counted as the peer's");
        let f = Failure::of_open(&err(Errno::EHOSTUNREACH));
        assert_eq!(f.reason, CloseReason::Unreachable(Unreachable::Host));
        let f = Failure::of_open(&err(Errno::ECONNREFUSED));
        assert_eq!((f.reason, f.peer_reset), (CloseReason::Reset, true));
        let f = Failure::of_open(&err(Errno::ETIMEDOUT));
        assert_eq!(f.reason, CloseReason::Timeout);
    }

    /// Ports exhausted is the AF_XDP backend's `AddrInUse`; out of
    /// descriptors or memory, `ConnectionLimit`; what the stack would meet
    /// only after its SYN (no route, a firewall's drop, a refusal) is no
    /// error of `connect` but the open's end, as the stack's.
    #[test]
    fn connect_errors_are_the_stack_s() {
        assert_eq!(connect_error(&err(Errno::EADDRNOTAVAIL)), Error::AddrInUse);
        for e in [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM] {
            assert_eq!(connect_error(&err(e)), Error::ConnectionLimit, "{e}");
            assert_eq!(connect_failure(&err(e)), None, "{e}");
        }
        assert_eq!(
            connect_error(&err(Errno::EAFNOSUPPORT)),
            Error::InvalidAddress
        );
        assert_eq!(connect_failure(&err(Errno::EAFNOSUPPORT)), None);
        let timeout = Failure {
            reason: CloseReason::Timeout,
            peer_reset: false,
        };
        for e in [
            Errno::ENETDOWN,
            Errno::EHOSTDOWN,
            Errno::EPERM,
            Errno::EACCES,
        ] {
            assert_eq!(connect_failure(&err(e)), Some(timeout), "{e}");
        }
        for (e, what) in [
            (Errno::ENETUNREACH, Unreachable::Network),
            (Errno::EHOSTUNREACH, Unreachable::Host),
        ] {
            let f = connect_failure(&err(e)).expect("an end");
            assert_eq!(f.reason, CloseReason::Unreachable(what), "{e}");
            assert!(!f.peer_reset);
        }
        assert_eq!(
            connect_failure(&err(Errno::ECONNREFUSED)),
            Some(Failure {
                reason: CloseReason::Reset,
                peer_reset: true
            })
        );
    }
}
