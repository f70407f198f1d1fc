//! A connection as tokio code sees it: [`AsyncRead`] and [`AsyncWrite`]
//! over the connection's pipe to its thread's bridge.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf;
use flowlane_app::{CloseReason, ConnHandle, ConnInfo, Placement};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::pipe::{lock, Pipe, PipeRef, ThreadShared, RX_LIMIT, TX_LIMIT};

/// A TCP connection served by flowlane, for tokio: reads take what the
/// network core received, writes queue bytes for it (at most 64 KiB
/// ahead of the stack; then they wait). `Send`: the stream may move to
/// another runtime, though it is cheapest on the application thread that
/// accepted it, next to its network core. Dropping it closes the
/// connection once its writes went (a reset if received bytes were left
/// unread, as with kernel sockets).
#[derive(Debug)]
pub struct TcpStream {
    conn: ConnHandle,
    pipe: PipeRef,
    thread: Arc<ThreadShared>,
    local: SocketAddr,
    peer: SocketAddr,
    placement: Placement,
}

/// The error reads and writes give once the connection is gone.
fn gone(reason: CloseReason) -> io::Error {
    match reason {
        CloseReason::Reset => io::ErrorKind::ConnectionReset.into(),
        CloseReason::Aborted => io::ErrorKind::ConnectionAborted.into(),
        CloseReason::Timeout => io::ErrorKind::TimedOut.into(),
        CloseReason::Normal => io::ErrorKind::BrokenPipe.into(),
    }
}

impl TcpStream {
    pub(crate) fn new(
        conn: ConnHandle,
        pipe: PipeRef,
        thread: Arc<ThreadShared>,
        (local, peer): (SocketAddr, SocketAddr),
        placement: Placement,
    ) -> TcpStream {
        TcpStream {
            conn,
            pipe,
            thread,
            local,
            peer,
            placement,
        }
    }

    /// Where the connection's TCP runs: the network core's receive queue,
    /// CPU and NUMA node (its flow's hint: work on its bytes is cheapest on
    /// that node).
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The connection's TCP figures (queues, round-trip time, window,
    /// retransmissions) as of the thread's last look; each call asks for
    /// fresh ones, so a first call may give `None`.
    pub fn info(&self) -> Option<ConnInfo> {
        let mut p = lock(&self.pipe);
        p.info_wanted = true;
        self.thread.kick(self.conn, &mut p);
        p.info
    }

    /// The local address (the listener's).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Disables (`true`) or enables Nagle's algorithm; takes effect on the
    /// network core shortly.
    pub fn set_nodelay(&self, nodelay: bool) {
        let mut p = lock(&self.pipe);
        p.nodelay = Some(nodelay);
        self.thread.kick(self.conn, &mut p);
    }

    /// Queues what fits of `bufs` (in order) for the bridge.
    fn write(&self, cx: &Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let mut p = lock(&self.pipe);
        if let Some(r) = p.closed {
            return Poll::Ready(Err(gone(r)));
        }
        if p.shutdown {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let wanted: usize = bufs.iter().map(|b| b.len()).sum();
        if wanted == 0 {
            return Poll::Ready(Ok(0));
        }
        let mut room = TX_LIMIT.saturating_sub(p.tx.len());
        if room == 0 {
            p.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let mut n = 0;
        for b in bufs.iter() {
            let k = b.len().min(room);
            p.tx.extend_from_slice(&b[..k]);
            n += k;
            room -= k;
            if room == 0 {
                break;
            }
        }
        self.thread.kick(self.conn, &mut p);
        Poll::Ready(Ok(n))
    }

    /// After a read: asks the bridge for more once there is room for it.
    fn read_more(&self, p: &mut Pipe) {
        if p.rx_more && p.rx.len() <= RX_LIMIT / 2 {
            p.rx_more = false;
            self.thread.kick(self.conn, p);
        }
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut p = lock(&self.pipe);
        if !p.rx.is_empty() {
            let n = buf.remaining().min(p.rx.len());
            buf.put_slice(&p.rx[..n]);
            p.rx.advance(n);
            self.read_more(&mut p);
            return Poll::Ready(Ok(()));
        }
        if p.eof {
            return Poll::Ready(Ok(()));
        }
        match p.closed {
            // Closed after both FINs, yet not every byte before the peer's
            // FIN reached the pipe (`eof` is set once they have). A close
            // completed before the reader caught up keeps the bytes (the
            // stack holds them, then the thread: the connection ends once
            // they are read), so this is a connection that ended with bytes
            // missing: an error, not a clean end of stream that would pass
            // a truncated one for whole.
            Some(CloseReason::Normal) => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed before everything the peer sent was read",
                )))
            }
            Some(r) => return Poll::Ready(Err(gone(r))),
            None => {}
        }
        self.read_more(&mut p);
        p.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Ready once the stack has taken every byte written.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut p = lock(&self.pipe);
        if p.tx.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if let Some(r) = p.closed {
            return Poll::Ready(Err(gone(r)));
        }
        p.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Sends FIN after what was written; reading goes on.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut p = lock(&self.pipe);
        if p.closed.is_none() && !p.shutdown {
            p.shutdown = true;
            self.thread.kick(self.conn, &mut p);
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        let mut p = lock(&self.pipe);
        p.dropped = true;
        p.reader = None;
        p.writer = None;
        if p.closed.is_none() {
            self.thread.kick(self.conn, &mut p);
        }
    }
}
