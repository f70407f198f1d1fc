//! The bridge: a [`ConnHandler`] on each application thread that moves
//! bytes between the thread's [`Net`] (the queue pairs to its network
//! cores) and the pipes of its tokio streams, and carries out what the
//! streams asked (writes, shutdowns, closes) when its loop passes.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Buf;
use flowlane_app::{CloseReason, ConnHandle, ConnHandler, Error, Net, SynFilter};

use crate::listener::AcceptQueue;
use crate::pipe::{lock, release_if_empty, Pipe, PipeRef, ThreadShared, RX_LIMIT};
use crate::stream::TcpStream;

/// What the adapter counts, over all application threads.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections handed to a listener.
    pub accepted: AtomicU64,
    /// Connections reset because their listener was gone or its backlog
    /// full.
    pub refused_backlog: AtomicU64,
}

/// The error of an open that the thread's queue pairs refused at once
/// (`Net::connect`'s error): no local port (`AddrInUse`), an address it
/// cannot open to (`InvalidInput`), the thread's connection table full
/// (`QuotaExceeded`), or a thread that serves no network core (more
/// threads than cores: `Unsupported`, it never can).
fn connect_error(remote: std::net::SocketAddr, e: Error) -> io::Error {
    let (kind, why) = match e {
        Error::AddrInUse => (io::ErrorKind::AddrInUse, "no local port left".to_string()),
        Error::InvalidAddress => (io::ErrorKind::InvalidInput, e.to_string()),
        Error::ConnectionLimit => (
            io::ErrorKind::QuotaExceeded,
            "the application thread holds the most connections it can".to_string(),
        ),
        Error::InvalidState => (
            io::ErrorKind::Unsupported,
            "the application thread serves no network core (more threads than cores): \
             it cannot open connections"
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
        }
    }

    pub(crate) fn add_listener(&mut self, port: u16, queue: Arc<AcceptQueue>) {
        self.listeners.push((port, queue));
    }

    /// Moves what the stack holds for `conn` into its pipe, up to
    /// [`RX_LIMIT`]; marks end of stream once everything before the
    /// peer's FIN is there. A dropped stream's connection that receives
    /// data is reset (nobody will read it).
    fn pull(net: &mut dyn Net, conn: ConnHandle, p: &mut Pipe) -> bool {
        let mut got = false;
        while p.rx.len() < RX_LIMIT {
            let n = match net.peek(conn) {
                Ok(d) if !d.is_empty() => {
                    let n = d.len().min(RX_LIMIT - p.rx.len());
                    p.rx.extend_from_slice(&d[..n]);
                    n
                }
                _ => break,
            };
            let _ = net.consume(conn, n);
            got = true;
        }
        p.rx_more = p.rx.len() >= RX_LIMIT;
        if !p.eof && net.is_eof(conn) {
            p.eof = true;
            got = true;
        }
        if p.dropped && !p.rx.is_empty() {
            let _ = net.abort(conn);
        }
        got
    }

    /// Gives the stack what the stream wrote, as far as it takes it; then
    /// the stream's shutdown or close, once everything went.
    fn push(net: &mut dyn Net, conn: ConnHandle, p: &mut Pipe) -> bool {
        if let Some(on) = p.nodelay.take() {
            let _ = net.set_nodelay(conn, on);
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
        if p.tx.is_empty() {
            if p.dropped {
                // Unread bytes: a reset, as a kernel socket closed with
                // unread data sends.
                if p.rx.is_empty() {
                    let _ = net.close(conn);
                } else {
                    let _ = net.abort(conn);
                }
            } else if p.shutdown && !p.shutdown_sent {
                p.shutdown_sent = true;
                let _ = net.shutdown_write(conn);
            }
        }
        p.tx.len() < before || p.tx.is_empty()
    }

    /// A stream for `conn`, with its pipe registered.
    fn stream(&mut self, net: &dyn Net, conn: ConnHandle) -> Option<(TcpStream, PipeRef)> {
        let tuple = net.four_tuple(conn).ok()?;
        let placement = net.conn_placement(conn).ok()?;
        let pipe: PipeRef = Arc::new(Mutex::new(Pipe::new(placement)));
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
            if std::mem::take(&mut p.info_wanted) {
                p.info = net.info(conn).ok().or(p.info);
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
            let (reader, writer) = {
                let mut p = lock(pipe);
                p.closed.get_or_insert(CloseReason::Aborted);
                (p.reader.take(), p.writer.take())
            };
            for w in [reader, writer].into_iter().flatten() {
                w.wake();
            }
        }
    }
}

impl ConnHandler for Bridge {
    fn syn_filter(&self, port: u16) -> Option<SynFilter> {
        self.listeners
            .iter()
            .any(|(p, _)| *p == port)
            .then(|| self.syn_filter.clone())
            .flatten()
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

    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        if let Some(opened) = self.thread.take_opening(conn) {
            // A refusal (an RST to the SYN) is `Reset` on both backends;
            // `Aborted` is a connect the network core could not start
            // (its backend failed it at once) or gave up (its thread
            // stopped): no refusal.
            let e = match reason {
                CloseReason::Timeout => io::ErrorKind::TimedOut.into(),
                CloseReason::Reset => io::ErrorKind::ConnectionRefused.into(),
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
        let (reader, writer) = {
            let mut p = lock(&pipe);
            p.closed = Some(reason);
            (p.reader.take(), p.writer.take())
        };
        for w in [reader, writer].into_iter().flatten() {
            w.wake();
        }
    }

    /// What the streams asked since the last pass, and the connections
    /// to open (but those whose caller gave up already); first, after a
    /// stall, the connections a core's report ended for their streams.
    fn on_tick(&mut self, net: &mut dyn Net) {
        if self.thread.take_swept() {
            self.abort_orphans(net);
        }
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
