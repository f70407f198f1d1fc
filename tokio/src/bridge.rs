//! The bridge: a [`ConnHandler`] on each application thread that moves
//! bytes between the thread's [`Net`] (the queue pairs to its network
//! cores) and the pipes of its tokio streams, and carries out what the
//! streams asked (writes, shutdowns, closes) when its loop passes.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use flowlane_app::{
    AtStop, CloseReason, ConnHandle, ConnHandler, Error, FourTuple, Net, SynFilter,
};

use crate::listener::AcceptQueue;
use crate::pipe::{lock, release_if_empty, reserve_within, Pipe, PipeRef, ThreadShared, RX_LIMIT};
use crate::stream::TcpStream;

/// What the adapter counts, over all application threads.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections handed to a listener.
    pub accepted: AtomicU64,
    /// Connections reset because their listener was gone or its backlog
    /// full, or queued by a listener dropped before they were taken.
    pub refused_backlog: AtomicU64,
    /// Connections whose stream was dropped with received bytes unread,
    /// or that received bytes after the drop: closed lingering (RFC 9112
    /// §9.6) rather than reset, so that what the stream wrote reaches the
    /// peer.
    pub lingered: AtomicU64,
    /// Of those, connections reset at the end of their wait ([`LINGER`]):
    /// the peer sent bytes after the drop and had not closed, or what the
    /// stream wrote never all went to the stack.
    pub linger_expired: AtomicU64,
    /// Bytes received on lingering connections and dropped unread.
    pub linger_discarded: AtomicU64,
}

/// How long the connection of a dropped stream waits for the peer's FIN
/// once what the stream wrote was delivered, dropping what the peer
/// still sends (RFC 9112 §9.6's lingering close; `http-server` lingers
/// as long). The wait counts from the drop, and again from each time the
/// delivery progressed: the stack took more of what the stream wrote, or
/// the peer acknowledged more of it (`Net::info`'s unsent and
/// unacknowledged bytes, looked at every tenth of a second), so that a
/// peer that reads slowly gets all of it. Then the connection is closed
/// (its FIN went after what the stream wrote) if the peer sent nothing
/// after the drop (bytes already unread at the drop are dropped without
/// a reset), and reset if it did, or if what the stream wrote never all
/// went to the stack: a peer that neither stops sending nor reads is held
/// no longer. Ends up to a tenth of a second later (the bridge looks for
/// it that often).
pub const LINGER: Duration = Duration::from_secs(2);

/// How often the bridge looks for dropped streams' connections whose
/// wait ([`LINGER`]) is over.
const LINGER_SWEEP: Duration = Duration::from_millis(100);

/// A dropped stream's connection on its way out ([`Bridge::finish`]).
#[derive(Debug, Default)]
struct Closing {
    /// When its wait ([`LINGER`]) counts from: the drop, then the last
    /// time the delivery of what the stream wrote progressed.
    since: Option<Duration>,
    /// Bytes came unread (counted as lingered).
    lingering: bool,
    /// Bytes came after the drop: reset at the end of the wait.
    sent_after: bool,
    /// The bytes the stack held unsent or unacknowledged at the last look
    /// (`Net::info`).
    left: Option<usize>,
    /// Closed or reset: `on_closed` follows.
    done: bool,
}

/// The error of an open that the thread's queue pairs refused at once
/// (`Net::connect`'s error): no local port (`AddrInUse`), none whose
/// replies reach the thread's core (`AddrNotAvailable`: the NIC's RSS
/// table gives its queue no bucket), an address it cannot open to
/// (`InvalidInput`), the thread's connection table full
/// (`QuotaExceeded`), or a thread that can never open one
/// (`Unsupported`): its service opens no connections (an AF_XDP service
/// started passive, `TcpServiceConfig::active` false, whose replies would
/// reach the kernel), or it serves no network core (more threads than
/// cores).
fn connect_error(remote: std::net::SocketAddr, e: Error) -> io::Error {
    let (kind, why) = match e {
        Error::AddrInUse => (io::ErrorKind::AddrInUse, "no local port left".to_string()),
        Error::InvalidAddress => (io::ErrorKind::InvalidInput, e.to_string()),
        Error::NotSteeredHere => (io::ErrorKind::AddrNotAvailable, e.to_string()),
        Error::ConnectionLimit => (
            io::ErrorKind::QuotaExceeded,
            "the application thread holds the most connections it can".to_string(),
        ),
        Error::InvalidState => (
            io::ErrorKind::Unsupported,
            "this service cannot open connections: it was started without active opens \
             (TcpServiceConfig::active), or this application thread serves no network core \
             (more threads than cores)"
                .to_string(),
        ),
        _ => (io::ErrorKind::Other, e.to_string()),
    };
    io::Error::new(kind, format!("connect to {remote}: {why}"))
}

/// One application thread's bridge.
pub(crate) struct Bridge {
    thread: Arc<ThreadShared>,
    listeners: Vec<(u16, Arc<AcceptQueue>)>,
    /// The connections served, each also in the thread's registry
    /// (`ThreadShared::register`) while it is here.
    conns: HashMap<ConnHandle, PipeRef>,
    counters: Arc<Counters>,
    /// The listeners' SYN filter ([`crate::AsyncConfig::syn_filter`]).
    syn_filter: Option<SynFilter>,
    /// The connections of dropped streams, until they are gone
    /// ([`Bridge::forget`]).
    closing: HashMap<ConnHandle, Closing>,
    /// When the bridge next looks for waits past [`LINGER`].
    next_sweep: Duration,
}

impl Bridge {
    pub(crate) fn new(
        thread: Arc<ThreadShared>,
        counters: Arc<Counters>,
        syn_filter: Option<SynFilter>,
    ) -> Bridge {
        Bridge {
            thread,
            listeners: Vec::new(),
            conns: HashMap::new(),
            counters,
            syn_filter,
            closing: HashMap::new(),
            next_sweep: Duration::ZERO,
        }
    }

    pub(crate) fn add_listener(&mut self, port: u16, queue: Arc<AcceptQueue>) {
        self.listeners.push((port, queue));
    }

    /// Moves what the stack holds for `conn` into its pipe, up to
    /// [`RX_LIMIT`] of memory ([`reserve_within`]: a pipe more than half
    /// full takes more once its reader read it below half); marks end of
    /// stream once everything before the peer's FIN is there.
    fn pull(net: &mut dyn Net, conn: ConnHandle, p: &mut Pipe) -> bool {
        let mut got = false;
        let mut full = false;
        while p.rx.len() < RX_LIMIT {
            let n = match net.peek(conn) {
                Ok(d) if !d.is_empty() => {
                    let n = d.len().min(RX_LIMIT - p.rx.len());
                    let n = reserve_within(&mut p.rx, n, RX_LIMIT);
                    if n == 0 {
                        full = true;
                        break;
                    }
                    p.rx.extend_from_slice(&d[..n]);
                    n
                }
                _ => break,
            };
            let _ = net.consume(conn, n);
            got = true;
        }
        p.rx_more = full || p.rx.len() >= RX_LIMIT;
        if !p.eof && net.is_eof(conn) {
            p.eof = true;
            got = true;
        }
        got
    }

    /// Gives the stack what the stream wrote, as far as it takes it;
    /// whether it took any.
    fn send(net: &mut dyn Net, conn: ConnHandle, p: &mut Pipe) -> bool {
        if let Some(on) = p.nodelay.take() {
            let _ = net.set_nodelay(conn, on);
        }
        if let Some(on) = p.keepalive.take() {
            let _ = net.set_keepalive(conn, on);
        }
        let before = p.tx.len();
        while !p.tx.is_empty() {
            match net.send(conn, &p.tx) {
                Ok(n) => p.tx.advance(n),
                // The core's credit is used up: `on_writable` follows.
                Err(_) => break,
            }
        }
        release_if_empty(&mut p.tx);
        Bridge::look_for_room(net, conn, p);
        p.tx.len() < before
    }

    /// Notes what the stream may queue now ([`Pipe::tx_room`]): what the
    /// connection's send space takes; none, and `on_writable` follows when
    /// it frees, if it is full.
    fn look_for_room(net: &mut dyn Net, conn: ConnHandle, p: &mut Pipe) {
        p.tx_room = net.send_space(conn).unwrap_or(0);
        if p.tx_room == 0 {
            net.want_writable(conn);
        }
    }

    /// Gives the stack what the stream wrote ([`Bridge::send`]); then the
    /// stream's shutdown, once everything went.
    fn push(net: &mut dyn Net, conn: ConnHandle, p: &mut Pipe) -> bool {
        let took = Bridge::send(net, conn, p);
        if p.tx.is_empty() && p.shutdown && !p.shutdown_sent {
            p.shutdown_sent = true;
            let _ = net.shutdown_write(conn);
        }
        took || p.tx.is_empty()
    }

    /// A dropped stream's connection: what the stream wrote goes to the
    /// stack, then its FIN, and the connection is closed once the peer's
    /// came. Received bytes left unread or arriving meanwhile are
    /// dropped (counted, nothing kept) rather than answered with the
    /// reset a close sends for them, which could destroy what the stream
    /// wrote before the peer read it (a kernel socket's writes have left
    /// by then, these may not have; and bytes on their way from the
    /// network core when the stream was dropped show only later): RFC
    /// 9112 §9.6's lingering close. The wait is bounded
    /// ([`Bridge::sweep_closing`], [`LINGER`]), and counts from the drop
    /// (its first look here) and from each time the stack took more.
    fn finish(
        net: &mut dyn Net,
        conn: ConnHandle,
        p: &mut Pipe,
        closing: &mut HashMap<ConnHandle, Closing>,
        counters: &Counters,
    ) {
        let now = net.now();
        let c = closing.entry(conn).or_default();
        if c.done {
            return;
        }
        if p.refused {
            // Its listener went before it was taken: nothing was read or
            // written, and the peer hears so.
            c.done = true;
            counters.refused_backlog.fetch_add(1, Ordering::Relaxed);
            let _ = net.abort(conn);
            return;
        }
        // Its first look since the drop: what is unread came before.
        let after_drop = c.since.is_some();
        c.since.get_or_insert(now);
        let unread = p.rx.len() + net.discard(conn);
        if unread > 0 {
            p.rx = BytesMut::new();
            p.rx_more = false;
            counters
                .linger_discarded
                .fetch_add(unread as u64, Ordering::Relaxed);
            if !c.lingering {
                c.lingering = true;
                counters.lingered.fetch_add(1, Ordering::Relaxed);
            }
            c.sent_after |= after_drop;
        }
        if Bridge::send(net, conn, p) {
            c.since = Some(now);
        }
        if !p.tx.is_empty() {
            // The rest at `on_writable`.
            return;
        }
        if net.is_eof(conn) {
            // Everything read (and dropped): the close resets nothing.
            let _ = net.close(conn);
            c.done = true;
            return;
        }
        if !p.shutdown_sent {
            p.shutdown_sent = true;
            let _ = net.shutdown_write(conn);
        }
    }

    /// Ends the dropped streams' connections whose wait counts from
    /// [`LINGER`] ago or earlier (looked for every [`LINGER_SWEEP`]; the
    /// wait counts anew from a look that finds the peer acknowledged more
    /// of what the stream wrote): closed if the peer sent nothing since
    /// the drop (as it would have been at once: nothing unread, the FIN
    /// gone after all the stream wrote), reset if it did, or if some of
    /// what the stream wrote is still in its pipe.
    fn sweep_closing(&mut self, net: &mut dyn Net) {
        let now = net.now();
        if self.closing.is_empty() || now < self.next_sweep {
            return;
        }
        self.next_sweep = now + LINGER_SWEEP;
        for (&conn, c) in self.closing.iter_mut() {
            if c.done {
                continue;
            }
            if let Ok(info) = net.info(conn) {
                let left = info.unsent + info.unacked;
                if c.left.is_some_and(|before| left < before) {
                    c.since = Some(now);
                }
                c.left = Some(left);
            }
            let due = c.since.is_some_and(|t| now.saturating_sub(t) >= LINGER);
            if !due {
                continue;
            }
            c.done = true;
            let undelivered = self
                .conns
                .get(&conn)
                .is_some_and(|pipe| !lock(pipe).shutdown_sent);
            if c.sent_after || undelivered {
                self.counters.linger_expired.fetch_add(1, Ordering::Relaxed);
                let _ = net.abort(conn);
            } else {
                let _ = net.close(conn);
            }
        }
    }

    /// A stream for `conn`, with its pipe registered.
    fn stream(&mut self, net: &mut dyn Net, conn: ConnHandle) -> Option<(TcpStream, PipeRef)> {
        let tuple = net.four_tuple(conn).ok()?;
        let placement = net.conn_placement(conn).ok()?;
        let mut p = Pipe::new(placement);
        Bridge::look_for_room(net, conn, &mut p);
        let pipe: PipeRef = Arc::new(Mutex::new(p));
        let stream = TcpStream::new(
            conn,
            pipe.clone(),
            self.thread.clone(),
            (tuple.local, tuple.remote),
        );
        self.conns.insert(conn, pipe.clone());
        self.thread.register(conn, pipe.clone());
        Some((stream, pipe))
    }

    /// `conn` is no longer served here.
    fn forget(&mut self, conn: ConnHandle) -> Option<PipeRef> {
        self.closing.remove(&conn);
        let pipe = self.conns.remove(&conn)?;
        self.thread.unregister(conn);
        Some(pipe)
    }

    /// Aborts the connections a network core's stall report ended for
    /// their streams (`Pipe::orphaned`) that are still open here: a core
    /// that saw the thread back in time did not reset them, and their
    /// streams were told they are gone. (Those a core did reset are
    /// aborted again, to no effect: their `Closed` is on its way.)
    fn abort_orphans(&mut self, net: &mut dyn Net) {
        let orphans: Vec<ConnHandle> = self
            .conns
            .iter()
            .filter(|(_, pipe)| lock(pipe).orphaned)
            .map(|(&conn, _)| conn)
            .collect();
        for conn in orphans {
            let _ = net.abort(conn);
        }
    }

    /// Pulls and pushes for `conn`, then wakes whoever waits on the
    /// stream for what changed.
    fn service(&mut self, net: &mut dyn Net, conn: ConnHandle, pull: bool, push: bool) {
        let Some(pipe) = self.conns.get(&conn) else {
            return;
        };
        let (reader, writer) = {
            let mut p = lock(pipe);
            if p.orphaned {
                // Told gone already: aborted at the next tick.
                return;
            }
            if p.dropped {
                // Nobody reads, writes or waits on it any more.
                Bridge::finish(net, conn, &mut p, &mut self.closing, &self.counters);
                return;
            }
            if std::mem::take(&mut p.info_wanted) {
                // The core's answer reaches the pipe as the thread takes
                // it (`ThreadShared::figures`), not at the next call.
                let _ = net.info(conn);
                p.info_asked = true;
            }
            let readable = pull && Bridge::pull(net, conn, &mut p);
            let writable = push && Bridge::push(net, conn, &mut p);
            (
                if readable { p.reader.take() } else { None },
                if writable { p.writer.take() } else { None },
            )
        };
        if let Some(w) = reader {
            w.wake();
        }
        if let Some(w) = writer {
            w.wake();
        }
    }
}

/// The thread's loop ended (stopped, or a panic): its streams' connections
/// are gone with it (the cores reset them), and a task waiting on one,
/// wherever it runs, hears so, as does one waiting in `accept`; opens
/// under way fail (their senders go).
impl Drop for Bridge {
    fn drop(&mut self) {
        for (_, queue) in &self.listeners {
            queue.stop();
        }
        for pipe in self.conns.values() {
            let waiters = {
                let mut p = lock(pipe);
                p.closed.get_or_insert(CloseReason::Aborted);
                p.take_waiters()
            };
            for w in waiters {
                w.wake();
            }
        }
    }
}

impl ConnHandler for Bridge {
    /// The port's SYNs are taken while its listener is (not dropped, or
    /// taken again since: asked at each SYN, so that the cores, whose
    /// filters are fixed as they start listening, refuse at the SYN what
    /// a dropped listener would reset), and then as the configured filter
    /// says.
    fn syn_filter(&self, port: u16) -> Option<SynFilter> {
        let (_, queue) = self.listeners.iter().find(|(p, _)| *p == port)?;
        let (queue, filter) = (queue.clone(), self.syn_filter.clone());
        Some(Arc::new(move |tuple: &FourTuple| {
            queue.listening() && filter.as_ref().is_none_or(|f| f(tuple))
        }))
    }

    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Ok(tuple) = net.four_tuple(conn) else {
            return;
        };
        let Some(queue) = self
            .listeners
            .iter()
            .find(|(port, _)| *port == tuple.local.port())
            .map(|(_, q)| q.clone())
        else {
            let _ = net.abort(conn);
            return;
        };
        let Some((stream, pipe)) = self.stream(net, conn) else {
            return;
        };
        match queue.push(stream) {
            Ok(()) => {
                self.counters.accepted.fetch_add(1, Ordering::Relaxed);
            }
            Err(stream) => {
                self.forget(conn);
                // Its drop must not ask the bridge for a close.
                lock(&pipe).closed = Some(CloseReason::Aborted);
                drop(stream);
                self.counters
                    .refused_backlog
                    .fetch_add(1, Ordering::Relaxed);
                let _ = net.abort(conn);
            }
        }
    }

    fn on_connected(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some(opened) = self.thread.take_opening(conn) else {
            // Its open was failed meanwhile (the cores found the thread
            // stalled, and this core did not after all): nobody wants it.
            let _ = net.abort(conn);
            return;
        };
        match self.stream(net, conn) {
            // A caller that gave up drops the stream: it closes.
            Some((stream, _)) => {
                let _ = opened.send(Ok(stream));
            }
            None => {
                let _ = opened.send(Err(io::ErrorKind::NotConnected.into()));
            }
        }
    }

    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.service(net, conn, true, false);
    }

    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.service(net, conn, false, true);
    }

    /// End of stream reaches the reader once it read everything before.
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.service(net, conn, true, false);
    }

    fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        if let Some(opened) = self.thread.take_opening(conn) {
            // A refusal (an RST to the SYN) is `Reset` on both backends,
            // an ICMP destination unreachable `Unreachable` (as connect(2)'s
            // ECONNREFUSED, EHOSTUNREACH, ENETUNREACH);
            // `Aborted` is a connect the network core could not start
            // (its backend failed it at once) or gave up (its thread
            // stopped): no refusal.
            let e = match reason {
                CloseReason::Timeout => io::ErrorKind::TimedOut.into(),
                CloseReason::Reset => io::ErrorKind::ConnectionRefused.into(),
                CloseReason::Unreachable(what) => crate::stream::unreachable_error(what),
                _ => io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the network core could not open the connection (no local port or \
                     connection slot left, an address it cannot reach, or it stopped)",
                ),
            };
            let _ = opened.send(Err(e));
            return;
        }
        let Some(pipe) = self.forget(conn) else {
            return;
        };
        let waiters = {
            let mut p = lock(&pipe);
            p.closed = Some(reason);
            // The figures as it ended, if the core ever told them.
            p.info = net.info(conn).ok().or(p.info);
            p.take_waiters()
        };
        for w in waiters {
            w.wake();
        }
    }

    /// The service is stopping: the thread's [`crate::StopSignal`]s hear
    /// it, and where the application holds one, the connection's close
    /// (its stream dropped) is awaited; else it is left to the reset, as
    /// before stop signals were.
    fn on_stop(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> AtStop {
        self.thread.stop.send_replace(true);
        if self.thread.stop.receiver_count() > 0 && self.conns.contains_key(&conn) {
            AtStop::Finish
        } else {
            AtStop::Reset
        }
    }

    /// What the streams asked since the last pass, and the connections
    /// to open (but those whose caller gave up already); first, after a
    /// stall, the connections a core's report ended for their streams.
    fn on_tick(&mut self, net: &mut dyn Net) {
        if self.thread.take_swept() {
            self.abort_orphans(net);
        }
        self.sweep_closing(net);
        for (remote, opened) in self.thread.take_connects() {
            if opened.is_closed() {
                // The `connect` future was dropped: nobody would take the
                // stream.
                continue;
            }
            match net.connect(remote) {
                Ok(conn) => self.thread.opening(conn, opened),
                Err(e) => {
                    let _ = opened.send(Err(connect_error(remote, e)));
                }
            }
        }
        for conn in self.thread.take_dirty() {
            if let Some(pipe) = self.conns.get(&conn) {
                lock(pipe).queued = false;
            }
            self.service(net, conn, true, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_app::testing::OneConn;

    /// The connection the tests' bridge serves.
    fn conn() -> ConnHandle {
        ConnHandle::from_parts(1, 1)
    }

    /// A bridge serving [`conn`] whose stream wrote `response`, left
    /// `unread` received bytes in its pipe, and was dropped (the bridge
    /// looks at it at its next tick).
    fn dropped(response: &[u8], unread: &[u8]) -> (Bridge, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let thread = Arc::new(ThreadShared::default());
        let mut bridge = Bridge::new(thread.clone(), counters.clone(), None);
        let mut p = Pipe::new(OneConn::default().placement());
        p.tx.extend_from_slice(response);
        p.rx.extend_from_slice(unread);
        // As the stream's drop does.
        p.dropped = true;
        thread.kick(conn(), &mut p);
        bridge.conns.insert(conn(), Arc::new(Mutex::new(p)));
        (bridge, counters)
    }

    fn load(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(AtomicU64);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A stream queues no more than its connection takes (the queue
    /// pair's credit, within its core's send memory): a peer that reads
    /// nothing leaves no bytes in the pipe outside the core's budget, where
    /// each stream held up to 64 KiB more; the writer waits, and writes on
    /// once the connection takes more (`on_writable`).
    #[test]
    fn a_stream_queues_no_more_than_its_connection_takes() {
        use std::pin::Pin;
        use std::task::{Context, Poll};
        use tokio::io::AsyncWrite;

        let thread = Arc::new(ThreadShared::default());
        let mut bridge = Bridge::new(thread.clone(), Arc::default(), None);
        let mut net = OneConn {
            send_room: Some(1000),
            ..OneConn::default()
        };
        let pipe: PipeRef = Arc::new(Mutex::new(Pipe::new(net.placement())));
        bridge.conns.insert(conn(), pipe.clone());
        let addr = "10.0.0.1:80".parse().unwrap();
        let mut s = TcpStream::new(conn(), pipe.clone(), thread, (addr, addr));
        // The bridge looks at the connection (as when it makes the stream).
        bridge.on_writable(&mut net, conn());
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let response = vec![b'r'; 64 << 10];
        let mut write = |s: &mut TcpStream| Pin::new(s).poll_write(&mut cx, &response);
        assert!(matches!(write(&mut s), Poll::Ready(Ok(1000))));
        bridge.on_tick(&mut net);
        assert_eq!(net.sent.len(), 1000);
        assert!(write(&mut s).is_pending(), "the connection takes no more");
        assert!(lock(&pipe).tx.is_empty(), "bytes queued past what it takes");
        net.send_room = Some(5000);
        bridge.on_writable(&mut net, conn());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1, "the writer woken");
        assert!(matches!(write(&mut s), Poll::Ready(Ok(5000))));
        bridge.on_tick(&mut net);
        assert_eq!(net.sent.len(), 6000);
    }

    /// A stream's `info` asks the core through the bridge and gives the
    /// figures of the answer to that asking, at its first call, as soon
    /// as the thread is told of it (the queue pairs' info hook), with the
    /// bytes its pipe holds; an answer told before the bridge asked (to
    /// an earlier request) does not end the wait. A closed connection's
    /// gives its last figures at once.
    #[test]
    fn a_stream_s_first_info_gives_the_answer_to_its_own_asking() {
        use flowlane_app::ConnInfo;
        use std::future::Future;
        use std::task::{Context, Poll};

        let thread = Arc::new(ThreadShared::default());
        let mut bridge = Bridge::new(thread.clone(), Arc::default(), None);
        let mut net = OneConn::default();
        let pipe: PipeRef = Arc::new(Mutex::new(Pipe::new(net.placement())));
        bridge.conns.insert(conn(), pipe.clone());
        thread.register(conn(), pipe.clone());
        let addr = "10.0.0.1:80".parse().unwrap();
        let s = TcpStream::new(conn(), pipe.clone(), thread.clone(), (addr, addr));
        lock(&pipe).rx.extend_from_slice(b"unread");
        let figures = |cwnd| ConnInfo {
            cwnd,
            unacked: 100,
            ..ConnInfo::default()
        };
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut info = Box::pin(s.info());
        assert!(info.as_mut().poll(&mut cx).is_pending());
        // An earlier request's answer, before the bridge asked.
        thread.figures(conn(), Some(figures(1)));
        assert!(info.as_mut().poll(&mut cx).is_pending(), "an old answer");
        assert_eq!(load(&wakes.0), 0);
        bridge.on_tick(&mut net);
        assert!(info.as_mut().poll(&mut cx).is_pending(), "not answered yet");
        thread.figures(conn(), Some(figures(2)));
        assert_eq!(load(&wakes.0), 1, "the waiter woken");
        let Poll::Ready(Some(got)) = info.as_mut().poll(&mut cx) else {
            panic!("no figures at the first call");
        };
        assert_eq!((got.cwnd, got.unacked, got.readable), (2, 100, 6));
        drop(info);
        // Gone: the last figures, without asking.
        bridge.on_closed(&mut net, conn(), CloseReason::Reset);
        let mut info = Box::pin(s.info());
        assert!(matches!(
            info.as_mut().poll(&mut cx),
            Poll::Ready(Some(i)) if i.cwnd == 2
        ));
    }

    /// A reader that reads part of its pipe while the bridge tops it up
    /// as bytes come (hyper reading requests a few KiB at a time behind a
    /// peer that sends more) holds at most a pipe's limit of memory, where
    /// growing a buffer read from doubled it (up to 128 KiB a stream).
    #[test]
    fn a_pipe_topped_up_while_read_stays_within_its_limit() {
        use std::pin::Pin;
        use std::task::{Context, Poll, Waker};
        use tokio::io::{AsyncRead, ReadBuf};

        let thread = Arc::new(ThreadShared::default());
        let mut bridge = Bridge::new(thread.clone(), Arc::default(), None);
        let mut net = OneConn {
            inbox: vec![b'q'; 4 << 20],
            ..OneConn::default()
        };
        let pipe: PipeRef = Arc::new(Mutex::new(Pipe::new(net.placement())));
        bridge.conns.insert(conn(), pipe.clone());
        let addr = "10.0.0.1:80".parse().unwrap();
        let mut s = TcpStream::new(conn(), pipe.clone(), thread, (addr, addr));
        bridge.on_data(&mut net, conn());
        let mut cx = Context::from_waker(Waker::noop());
        let mut buf = vec![0u8; 5_000];
        let mut read = 0;
        for _ in 0..100 {
            let mut rb = ReadBuf::new(&mut buf);
            assert!(matches!(
                Pin::new(&mut s).poll_read(&mut cx, &mut rb),
                Poll::Ready(Ok(()))
            ));
            read += rb.filled().len();
            // More came from the core.
            bridge.on_data(&mut net, conn());
            let held = lock(&pipe).rx.capacity();
            assert!(held <= RX_LIMIT, "{held} bytes held after {read} read");
        }
        assert_eq!(read, 100 * 5_000);
    }

    /// An open a router answered with an ICMP destination unreachable
    /// fails as connect(2) would: refused for a port or protocol
    /// unreachable, host or network unreachable otherwise, each saying so.
    #[test]
    fn an_open_answered_unreachable_fails_as_a_socket_s_connect() {
        use flowlane_app::Unreachable;
        for (what, kind) in [
            (Unreachable::Refused, io::ErrorKind::ConnectionRefused),
            (Unreachable::Host, io::ErrorKind::HostUnreachable),
            (Unreachable::Network, io::ErrorKind::NetworkUnreachable),
            (Unreachable::Prohibited, io::ErrorKind::HostUnreachable),
        ] {
            let thread = Arc::new(ThreadShared::default());
            let mut bridge = Bridge::new(thread.clone(), Arc::default(), None);
            let (tx, mut rx) = tokio::sync::oneshot::channel();
            thread.opening(conn(), tx);
            let mut net = OneConn::default();
            bridge.on_closed(&mut net, conn(), CloseReason::Unreachable(what));
            let e = rx.try_recv().expect("answered").expect_err("failed");
            assert_eq!(e.kind(), kind, "{what:?}: {e}");
            assert!(
                e.to_string().contains("unreachable") || e.to_string().contains("refused"),
                "{e}"
            );
        }
    }

    /// An open the service refuses for good (`InvalidState`) says both
    /// of the causes it can have: a passive AF_XDP service, or a thread
    /// without a network core; and what kind of error it is.
    #[test]
    fn an_open_refused_for_good_names_both_causes() {
        let e = connect_error("10.0.0.2:80".parse().unwrap(), Error::InvalidState);
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        let m = e.to_string();
        assert!(
            m.starts_with("connect to 10.0.0.2:80: ")
                && m.contains("without active opens (TcpServiceConfig::active)")
                && m.contains("serves no network core"),
            "{m}"
        );
    }

    /// A stream dropped with a request body unread: the response goes,
    /// then the FIN, never a reset; what the peer still sends is dropped
    /// (counted, nothing kept) until its FIN, and the connection is closed
    /// then.
    #[test]
    fn a_stream_dropped_with_bytes_unread_lingers_then_closes_at_the_peer_s_fin() {
        let (mut bridge, counters) = dropped(b"HTTP/1.1 200 OK\r\n\r\n", &[b'a'; 1000]);
        let mut net = OneConn {
            inbox: vec![b'a'; 5000],
            ..OneConn::default()
        };
        bridge.on_tick(&mut net);
        assert_eq!(net.sent, b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(net.calls, ["shutdown"]);
        assert!(net.inbox.is_empty());
        assert!(lock(&bridge.conns[&conn()]).rx.is_empty());
        net.inbox = vec![b'a'; 3000];
        net.now = LINGER / 2;
        bridge.on_data(&mut net, conn());
        assert_eq!(net.calls, ["shutdown"], "more bytes: dropped, no reset");
        net.peer_fin = true;
        net.now = LINGER - Duration::from_millis(1);
        bridge.on_peer_closed(&mut net, conn());
        assert_eq!(net.calls, ["shutdown", "close"]);
        assert_eq!(load(&counters.lingered), 1);
        assert_eq!(load(&counters.linger_discarded), 9000);
        net.now = 2 * LINGER;
        bridge.on_tick(&mut net);
        assert_eq!(net.calls, ["shutdown", "close"], "closed once");
        assert_eq!(load(&counters.linger_expired), 0);
    }

    /// A peer that goes on sending after the drop and never closes: reset
    /// at the end of the linger (counted), not before.
    #[test]
    fn a_peer_that_never_stops_sending_is_reset_at_the_end_of_the_linger() {
        let (mut bridge, counters) = dropped(b"HTTP/1.1 431 \r\n\r\n", &[b'a'; 100]);
        let mut net = OneConn::default();
        bridge.on_tick(&mut net);
        assert_eq!(net.calls, ["shutdown"]);
        let step = Duration::from_millis(50);
        while net.now < LINGER - step {
            net.now += step;
            net.inbox = vec![b'a'; 1000];
            bridge.on_data(&mut net, conn());
            bridge.on_tick(&mut net);
            assert_eq!(net.calls, ["shutdown"], "at {:?}", net.now);
        }
        net.now = LINGER + LINGER_SWEEP;
        bridge.on_tick(&mut net);
        assert_eq!(net.calls, ["shutdown", "abort"]);
        assert_eq!(load(&counters.linger_expired), 1);
        bridge.on_closed(&mut net, conn(), CloseReason::Aborted);
        assert!(bridge.closing.is_empty() && bridge.conns.is_empty());
    }

    /// A stream dropped with nothing unread: the FIN after its bytes, and
    /// the close at the peer's FIN or, if the peer sends nothing, at the
    /// end of the wait (a close: nothing to reset for).
    #[test]
    fn a_stream_dropped_with_nothing_unread_is_closed_without_a_reset() {
        let (mut bridge, counters) = dropped(b"bye", b"");
        let mut net = OneConn::default();
        bridge.on_tick(&mut net);
        assert_eq!(
            (&net.sent[..], &net.calls[..]),
            (&b"bye"[..], &["shutdown"][..])
        );
        net.now = LINGER + LINGER_SWEEP;
        bridge.on_tick(&mut net);
        assert_eq!(net.calls, ["shutdown", "close"]);
        assert_eq!(load(&counters.lingered), 0);
        assert_eq!(load(&counters.linger_expired), 0);
    }

    /// A peer that reads a large response slowly (1,000 bytes every 50
    /// ms, 5 s in all) while the stream was dropped with its request
    /// unread: it gets every byte, then the close (LINGER after the last
    /// acknowledgement), never a reset, where the linger ran out 2 s after
    /// the FIN and reset it mid-response.
    #[test]
    fn a_slow_reader_gets_the_whole_response_then_a_close() {
        let (mut bridge, counters) = dropped(&vec![b'r'; 100_000], &[b'a'; 1000]);
        let mut net = OneConn {
            unacked: Some(0),
            ..OneConn::default()
        };
        bridge.on_tick(&mut net);
        assert_eq!(
            (net.sent.len(), &net.calls[..]),
            (100_000, &["shutdown"][..])
        );
        let step = Duration::from_millis(50);
        while net.unacked != Some(0) {
            net.now += step;
            net.unacked = net.unacked.map(|u| u.saturating_sub(1000));
            bridge.on_tick(&mut net);
            assert_eq!(net.calls, ["shutdown"], "at {:?}", net.now);
        }
        let delivered = net.now;
        while net.now < delivered + LINGER + 2 * LINGER_SWEEP {
            net.now += step;
            bridge.on_tick(&mut net);
        }
        assert_eq!(net.calls, ["shutdown", "close"]);
        assert!(!net.reset);
        assert_eq!(load(&counters.lingered), 1);
        assert_eq!(load(&counters.linger_expired), 0);
    }

    /// A peer that sent more after the drop and reads the response slowly
    /// is reset only once [`LINGER`] passed since it acknowledged the last
    /// of it, not [`LINGER`] after the bytes it sent.
    #[test]
    fn a_peer_that_sent_after_the_drop_is_reset_only_a_linger_after_delivery() {
        let (mut bridge, counters) = dropped(&vec![b'r'; 100_000], b"");
        let mut net = OneConn {
            unacked: Some(0),
            ..OneConn::default()
        };
        bridge.on_tick(&mut net);
        net.now = Duration::from_millis(10);
        net.inbox = vec![b'a'; 500];
        bridge.on_data(&mut net, conn());
        assert!(net.inbox.is_empty());
        let step = Duration::from_millis(50);
        while net.unacked != Some(0) {
            net.now += step;
            net.unacked = net.unacked.map(|u| u.saturating_sub(1000));
            bridge.on_tick(&mut net);
            assert_eq!(net.calls, ["shutdown"], "at {:?}", net.now);
        }
        let delivered = net.now;
        while net.now < delivered + LINGER - LINGER_SWEEP {
            net.now += step;
            bridge.on_tick(&mut net);
            assert_eq!(net.calls, ["shutdown"], "at {:?}", net.now);
        }
        net.now = delivered + LINGER + LINGER_SWEEP;
        bridge.on_tick(&mut net);
        assert_eq!(net.calls, ["shutdown", "abort"]);
        assert_eq!(load(&counters.linger_expired), 1);
    }

    /// The cores' SYN filter for a port refuses SYNs once the thread's
    /// listener was dropped (where it took them, fixed at start, and the
    /// connection was reset after its handshake), and takes them again
    /// once the listener is taken again; the configured filter still
    /// decides while it is held; a port not listened on has none.
    #[test]
    fn syns_for_a_dropped_listener_are_refused_until_it_is_taken_again() {
        use crate::listener::{AcceptQueue, TcpListener};

        let tuple = |peer: &str| FourTuple {
            local: "10.0.0.1:80".parse().unwrap(),
            remote: peer.parse().unwrap(),
        };
        let (good, bad) = (tuple("10.0.0.2:4000"), tuple("10.0.0.3:4000"));
        let only_good: SynFilter = Arc::new(move |t: &FourTuple| *t == good);
        for configured in [None, Some(only_good)] {
            let mut bridge = Bridge::new(Arc::default(), Arc::default(), configured.clone());
            let queue = Arc::new(AcceptQueue::new(8));
            bridge.add_listener(80, queue.clone());
            assert!(bridge.syn_filter(81).is_none());
            let filter = bridge.syn_filter(80).expect("a filter for the port");
            let listener = TcpListener::new(80, queue.clone());
            assert!(filter(&good));
            assert_eq!(filter(&bad), configured.is_none());
            assert!(TcpListener::again(80, &queue).is_none(), "held");
            drop(listener);
            assert!(!filter(&good) && !filter(&bad), "refused after the drop");
            let again = TcpListener::again(80, &queue).expect("taken again");
            assert!(filter(&good));
            assert_eq!(filter(&bad), configured.is_none());
            drop(again);
            assert!(!filter(&good));
        }
    }

    /// A listener dropped with connections queued, not taken: each is
    /// reset (counted with the refused), as a kernel listener's are, not
    /// closed cleanly as though its request had been served.
    #[test]
    fn a_dropped_listener_resets_the_connections_it_queued() {
        use crate::listener::{AcceptQueue, TcpListener};

        let counters = Arc::new(Counters::default());
        let thread = Arc::new(ThreadShared::default());
        let mut bridge = Bridge::new(thread.clone(), counters.clone(), None);
        let mut net = OneConn {
            inbox: b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            ..OneConn::default()
        };
        let pipe: PipeRef = Arc::new(Mutex::new(Pipe::new(net.placement())));
        bridge.conns.insert(conn(), pipe.clone());
        let addr = "10.0.0.1:80".parse().unwrap();
        let queue = Arc::new(AcceptQueue::new(8));
        queue
            .push(TcpStream::new(conn(), pipe, thread, (addr, addr)))
            .unwrap();
        bridge.on_data(&mut net, conn());
        drop(TcpListener::new(80, queue));
        bridge.on_tick(&mut net);
        assert_eq!(net.calls, ["abort"]);
        assert_eq!(load(&counters.refused_backlog), 1);
        net.now = 2 * LINGER;
        bridge.on_tick(&mut net);
        assert_eq!(net.calls, ["abort"], "reset once");
    }
}
