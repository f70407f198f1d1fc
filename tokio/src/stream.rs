//! A connection as tokio code sees it: [`AsyncRead`] and [`AsyncWrite`]
//! over the connection's pipe to its thread's bridge.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf;
use flowlane_app::{CloseReason, ConnHandle, ConnInfo, Placement, Unreachable};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::pipe::{
    lock, release_if_empty, reserve_within, Pipe, PipeRef, ThreadShared, RX_LIMIT, TX_LIMIT,
};

/// A TCP connection served by flowlane, for tokio: reads take what the
/// network core received, writes queue bytes for it (in the stream, no
/// more than the queue pair takes, 64 KiB at most, then they wait; up to
/// 256 KiB, the queue pair's credit, on their way to the stack, within
/// the core's send memory). `Send`: the stream may move to
/// another runtime, though it is cheapest on the application thread that
/// accepted it, next to its network core. Dropping it closes the
/// connection: FIN after its writes, then, until the peer's FIN, what the
/// peer still sends is dropped (RFC 9112 §9.6's lingering close), where a
/// kernel socket closed with received bytes unread resets (which could
/// destroy what was written before the peer read it: a kernel socket's
/// writes have left by then, these may not have). [`LINGER`](crate::LINGER)
/// after the peer acknowledged the last of what was written (however
/// slowly it reads), the connection is closed if the peer sent nothing
/// after the drop (bytes unread at the drop are dropped without a reset),
/// reset if it did (counted, [`Counters`](crate::Counters)).
#[derive(Debug)]
pub struct TcpStream {
    conn: ConnHandle,
    pipe: PipeRef,
    thread: Arc<ThreadShared>,
    local: SocketAddr,
    peer: SocketAddr,
}

/// The error reads and writes give once the connection is gone.
fn gone(reason: CloseReason) -> io::Error {
    match reason {
        CloseReason::Reset => io::ErrorKind::ConnectionReset.into(),
        CloseReason::Aborted => io::ErrorKind::ConnectionAborted.into(),
        CloseReason::Timeout => io::ErrorKind::TimedOut.into(),
        CloseReason::Normal => io::ErrorKind::BrokenPipe.into(),
        CloseReason::Unreachable(what) => unreachable_error(what),
    }
}

/// The error a connection attempt that found its destination unreachable
/// gives, as a kernel socket's `connect` would (`ECONNREFUSED`,
/// `EHOSTUNREACH`, `ENETUNREACH`): a router's ICMP destination
/// unreachable, or on kernel sockets the kernel's own finding (no route,
/// no neighbour). Reads and writes of an established connection give it
/// too when the connection timed out after a router answered its data so
/// (the soft error the stack kept, `CloseReason::Unreachable`), as a
/// kernel socket's give the error Linux kept in place of `ETIMEDOUT`.
pub(crate) fn unreachable_error(what: Unreachable) -> io::Error {
    let (kind, why) = match what {
        Unreachable::Refused => (
            io::ErrorKind::ConnectionRefused,
            "connection refused (ICMP port or protocol unreachable)",
        ),
        Unreachable::Host => (
            io::ErrorKind::HostUnreachable,
            "host unreachable (ICMP destination unreachable, or no neighbour answered)",
        ),
        Unreachable::Network => (
            io::ErrorKind::NetworkUnreachable,
            "network unreachable (no route, or ICMP destination unreachable)",
        ),
        Unreachable::Prohibited => (
            io::ErrorKind::HostUnreachable,
            "host unreachable: administratively prohibited (ICMP)",
        ),
    };
    io::Error::new(kind, why)
}

impl TcpStream {
    pub(crate) fn new(
        conn: ConnHandle,
        pipe: PipeRef,
        thread: Arc<ThreadShared>,
        (local, peer): (SocketAddr, SocketAddr),
    ) -> TcpStream {
        TcpStream {
            conn,
            pipe,
            thread,
            local,
            peer,
        }
    }

    /// Where the connection's TCP runs: the network core's receive queue,
    /// CPU and NUMA node (its flow's hint: work on its bytes is cheapest on
    /// that node). Follows the connection when its RSS bucket moves to
    /// another core (from the pass of its thread that took the move).
    pub fn placement(&self) -> Placement {
        lock(&self.pipe).placement
    }

    /// The connection's TCP figures (queues, round-trip time, window,
    /// retransmissions), fresh: asks the network core and waits for its
    /// answer (a pass of the thread, one of the core, and the thread's
    /// next: figures as of after the call, as `TCP_INFO` gives a kernel
    /// socket's). Readable and unsent bytes count those on their way
    /// between the core and the stream. Once the connection is gone,
    /// those as of its end (None if it ended before the core ever told
    /// them); where the core could not tell them (a kernel socket's
    /// `sock_diag` that failed), the last ones it did.
    pub async fn info(&self) -> Option<ConnInfo> {
        let mut since = None;
        poll_fn(|cx| {
            let mut p = lock(&self.pipe);
            let asked = *since.get_or_insert_with(|| {
                p.info_wanted = true;
                self.thread.kick(self.conn, &mut p);
                p.info_answers
            });
            if p.info_answers == asked && p.closed.is_none() {
                if !p.info_waiters.iter().any(|w| w.will_wake(cx.waker())) {
                    p.info_waiters.push(cx.waker().clone());
                }
                return Poll::Pending;
            }
            Poll::Ready(p.info.map(|mut info| {
                info.readable += p.rx.len();
                info.unsent += p.tx.len();
                info
            }))
        })
        .await
    }

    /// Drops the stream, its connection reset rather than closed: its
    /// listener is gone before it was taken.
    pub(crate) fn refuse(self) {
        lock(&self.pipe).refused = true;
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

    /// Turns keepalive probes on or off (as `SO_KEEPALIVE`, with the
    /// backend's timings: Linux's by default, 2 h idle, 75 s apart, 9
    /// probes; [`flowlane_app::Net::set_keepalive`]); takes effect on the
    /// network core shortly.
    pub fn set_keepalive(&self, on: bool) {
        let mut p = lock(&self.pipe);
        p.keepalive = Some(on);
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
        // No more than the queue pair takes (as the bridge last looked):
        // the rest waits in the writer, not in the pipe.
        let room = TX_LIMIT.min(p.tx_room).saturating_sub(p.tx.len());
        // Within the pipe's memory (more once the bridge took some).
        let mut room = reserve_within(&mut p.tx, wanted.min(room), TX_LIMIT);
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
            release_if_empty(&mut p.rx);
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

    /// Ready once every byte written went to the queue pair: the network
    /// core's stack may not have taken them yet (up to the queue pair's
    /// 256 KiB credit is on its way).
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

    /// Sends FIN after what was written; reading goes on. Ready once
    /// every byte written and the shutdown went to the network core
    /// (writes fail from the first call on); an error if the connection
    /// was reset or aborted before.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut p = lock(&self.pipe);
        if p.shutdown_sent {
            return Poll::Ready(Ok(()));
        }
        match p.closed {
            // Both FINs went: ours too.
            Some(CloseReason::Normal) => return Poll::Ready(Ok(())),
            Some(r) => return Poll::Ready(Err(gone(r))),
            None => {}
        }
        if !p.shutdown {
            p.shutdown = true;
            self.thread.kick(self.conn, &mut p);
        }
        // The bridge wakes the writer once it sent the shutdown.
        p.writer = Some(cx.waker().clone());
        Poll::Pending
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipe::KEEP;
    use std::task::Waker;

    /// A stream with no bridge behind it: the test plays the bridge on
    /// its pipe.
    fn stream() -> (TcpStream, PipeRef, Arc<ThreadShared>) {
        let placement = Placement {
            queue: 0,
            cpu: None,
            node: 0,
        };
        let mut p = Pipe::new(placement);
        // As the bridge finds a connection whose queue pair takes a
        // pipe's worth.
        p.tx_room = TX_LIMIT;
        let pipe = PipeRef::new(std::sync::Mutex::new(p));
        let thread = Arc::new(ThreadShared::default());
        let addr: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let conn = ConnHandle::from_parts(1, 1);
        let s = TcpStream::new(conn, pipe.clone(), thread.clone(), (addr, addr));
        thread.register(conn, pipe.clone());
        (s, pipe, thread)
    }

    /// Reads `rx` to its end, `chunk` bytes a read.
    fn read_all(s: &mut TcpStream, chunk: usize) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        let mut buf = vec![0u8; chunk];
        let mut total = 0;
        loop {
            let mut rb = ReadBuf::new(&mut buf);
            match Pin::new(&mut *s).poll_read(&mut cx, &mut rb) {
                Poll::Ready(Ok(())) => total += rb.filled().len(),
                other => {
                    assert!(other.is_pending(), "{other:?}");
                    return total;
                }
            }
        }
    }

    /// A burst read to its end leaves the pipe holding no memory for it;
    /// a small message's buffer is kept for the next.
    #[test]
    fn a_pipe_read_empty_frees_a_burst_s_memory() {
        let (mut s, pipe, _thread) = stream();
        lock(&pipe).rx.extend_from_slice(&vec![7; RX_LIMIT]);
        // Partial reads first: the bytes read are advanced past.
        assert_eq!(read_all(&mut s, 16 << 10), RX_LIMIT);
        let mut p = lock(&pipe);
        assert!(p.rx.is_empty());
        assert!(!p.rx.try_reclaim(1), "{} bytes kept", p.rx.capacity());
        p.rx.extend_from_slice(&[7; 100]);
        drop(p);
        assert_eq!(read_all(&mut s, 16 << 10), 100);
        let mut p = lock(&pipe);
        assert!(p.rx.try_reclaim(100) && p.rx.capacity() <= KEEP);
    }

    /// Writes that refill a pipe the bridge takes a few KiB of at a time
    /// keep its memory within its limit, where growing the buffer in place
    /// doubled it; they go on as fast as the bridge takes (a pipe more
    /// than half full takes more once it is down to half).
    #[test]
    fn a_pipe_refilled_while_taken_stays_within_its_limit() {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut s, pipe, _thread) = stream();
        let bytes = vec![7u8; TX_LIMIT];
        let (mut written, mut taken) = (0, 0);
        for _ in 0..50 {
            match Pin::new(&mut s).poll_write(&mut cx, &bytes) {
                Poll::Ready(Ok(n)) => written += n,
                Poll::Pending => {}
                other => panic!("{other:?}"),
            }
            let mut p = lock(&pipe);
            assert!(p.tx.capacity() <= TX_LIMIT, "{} held", p.tx.capacity());
            assert!(p.tx.len() > TX_LIMIT / 2, "the writes fell behind");
            // The bridge hands a few KiB to the queue pair.
            p.tx.advance(5_000);
            taken += 5_000;
        }
        assert_eq!(written, taken + lock(&pipe).tx.len());
    }

    /// A shutdown waits for the bytes written and for the bridge to send
    /// it (writes fail meanwhile); one after a reset fails.
    #[test]
    fn a_shutdown_is_done_once_it_went_to_the_core() {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut s, pipe, thread) = stream();
        assert!(matches!(
            Pin::new(&mut s).poll_write(&mut cx, b"abc"),
            Poll::Ready(Ok(3))
        ));
        assert!(Pin::new(&mut s).poll_shutdown(&mut cx).is_pending());
        assert!(matches!(
            Pin::new(&mut s).poll_write(&mut cx, b"d"),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe
        ));
        assert_eq!(thread.take_dirty(), [s.conn]);
        {
            let p = lock(&pipe);
            assert!(p.shutdown && p.writer.is_some());
        }
        // The bridge took the bytes, not yet the shutdown.
        lock(&pipe).tx.clear();
        assert!(Pin::new(&mut s).poll_shutdown(&mut cx).is_pending());
        lock(&pipe).shutdown_sent = true;
        assert!(matches!(
            Pin::new(&mut s).poll_shutdown(&mut cx),
            Poll::Ready(Ok(()))
        ));

        let (mut s, pipe, _thread) = stream();
        lock(&pipe).closed = Some(CloseReason::Reset);
        assert!(matches!(
            Pin::new(&mut s).poll_shutdown(&mut cx),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset
        ));
    }

    /// An established connection that timed out after a router answered
    /// its data "unreachable" (the stack's soft error) fails reads and
    /// writes as a kernel socket's do (`EHOSTUNREACH`, `ENETUNREACH`,
    /// `ECONNREFUSED`), not as timed out.
    #[test]
    fn reads_and_writes_after_an_unreachable_timeout_say_so() {
        use flowlane_app::Unreachable;
        let mut cx = Context::from_waker(Waker::noop());
        for (what, kind) in [
            (Unreachable::Host, io::ErrorKind::HostUnreachable),
            (Unreachable::Network, io::ErrorKind::NetworkUnreachable),
            (Unreachable::Refused, io::ErrorKind::ConnectionRefused),
        ] {
            let (mut s, pipe, _thread) = stream();
            lock(&pipe).closed = Some(CloseReason::Unreachable(what));
            let mut buf = [0u8; 16];
            let mut rb = ReadBuf::new(&mut buf);
            match Pin::new(&mut s).poll_read(&mut cx, &mut rb) {
                Poll::Ready(Err(e)) => assert_eq!(e.kind(), kind, "{what:?}: {e}"),
                other => panic!("{what:?}: read {other:?}"),
            }
            match Pin::new(&mut s).poll_write(&mut cx, b"abc") {
                Poll::Ready(Err(e)) => assert_eq!(e.kind(), kind, "{what:?}: {e}"),
                other => panic!("{what:?}: write {other:?}"),
            }
        }
    }
}
