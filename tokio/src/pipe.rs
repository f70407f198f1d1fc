//! What one connection's stream and its thread's bridge share: the bytes
//! between them, the flags each sets for the other, and their wakers.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use bytes::BytesMut;
use flowlane_app::{CloseReason, ConnHandle, ConnInfo, Placement};
use tokio::sync::{oneshot, watch, Notify};

use crate::stream::TcpStream;

/// Received bytes a stream holds before the bridge leaves the rest in the
/// queue pair (whose credit then runs out, and the stack's window closes:
/// back-pressure, not drops).
pub(crate) const RX_LIMIT: usize = 64 << 10;
/// Bytes a stream's writes may queue before they wait for the bridge to
/// hand them to the queue pair (whose credit, 256 KiB, bounds those the
/// stack has not taken yet), and no more than the queue pair takes
/// ([`Pipe::tx_room`]).
pub(crate) const TX_LIMIT: usize = 64 << 10;
/// The most memory a side of a pipe keeps once it is empty: past it (a
/// burst's), it is freed, so that an idle connection holds little.
pub(crate) const KEEP: usize = 8 << 10;

/// Frees `b`'s memory if it is empty and holds more than [`KEEP`].
pub(crate) fn release_if_empty(b: &mut BytesMut) {
    // On an empty buffer, a reclaim for more than `KEEP` succeeds exactly
    // when its allocation exceeds it (whatever was advanced past).
    if b.is_empty() && b.try_reclaim(KEEP + 1) {
        *b = BytesMut::new();
    }
}

/// Makes room in `b` for up to `n` more bytes (`b.len() + n` at most
/// `limit`) without its memory passing `limit`, and returns how many fit:
/// `n` in its spare capacity, or once the bytes read from it gave their
/// room back (the rest moved to its front when no more than those read),
/// or in a new buffer of twice its capacity within `limit` while it holds
/// at most half of `limit` (a copy of no more than the room it makes);
/// else, more than half full, only what its spare capacity holds (none,
/// often): the rest once its reader took it below half. Growing a buffer
/// read from in place instead doubled its allocation past `limit` (a side
/// of 64 KiB held 128 KiB).
pub(crate) fn reserve_within(b: &mut BytesMut, n: usize, limit: usize) -> usize {
    let spare = b.capacity() - b.len();
    if spare >= n || b.try_reclaim(n) {
        return n;
    }
    if b.len() > limit / 2 {
        return spare;
    }
    let need = b.len() + n;
    let mut grown = BytesMut::with_capacity((2 * b.capacity()).min(limit).max(need));
    grown.extend_from_slice(b);
    *b = grown;
    n
}

/// Locks `m`, whatever a panic left it as (every value guarded here is
/// valid on its own).
fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's shared state.
#[derive(Debug)]
pub(crate) struct Pipe {
    /// Received, not yet read by the stream.
    pub(crate) rx: BytesMut,
    /// The bridge stopped pulling because `rx` was full.
    pub(crate) rx_more: bool,
    /// The peer closed and every byte before its FIN is in `rx` (or read).
    pub(crate) eof: bool,
    /// Written by the stream, not yet taken by the stack.
    pub(crate) tx: BytesMut,
    /// What the connection's send space (its credit, within its core's
    /// send memory) lets the stream queue, as of the bridge's last look:
    /// writes wait once `tx` holds that much, so that a peer that reads
    /// nothing leaves its bytes within the core's send budget (counted,
    /// bounded whatever the number of connections), not up to
    /// [`TX_LIMIT`] more per stream outside it.
    pub(crate) tx_room: usize,
    /// The stream shut down its writing half (FIN after `tx`).
    pub(crate) shutdown: bool,
    pub(crate) shutdown_sent: bool,
    /// A `set_nodelay` the bridge has not passed on yet.
    pub(crate) nodelay: Option<bool>,
    /// A `set_keepalive` the bridge has not passed on yet.
    pub(crate) keepalive: Option<bool>,
    /// The stream is gone: close once `tx` went (lingering:
    /// `Bridge::finish`).
    pub(crate) dropped: bool,
    /// Dropped by its listener's drop before it was taken: reset rather
    /// than closed (as a kernel listener's backlog is).
    pub(crate) refused: bool,
    /// The connection is gone, and why.
    pub(crate) closed: Option<CloseReason>,
    /// Gone because a network core found the thread stalled and reset its
    /// connections (told by the core while the thread was blocked): the
    /// bridge no longer serves it, and aborts it once the thread passes
    /// again unless a core's `Closed` came first (a core that saw the
    /// thread back in time did not reset it).
    pub(crate) orphaned: bool,
    /// Where the connection's TCP runs (its network core's), updated when
    /// it moves.
    pub(crate) placement: Placement,
    /// The stream asked for the connection's figures: the bridge asks the
    /// network core.
    pub(crate) info_wanted: bool,
    /// The bridge asked the core for a stream that waits: the next answer
    /// the thread is told of (its queue pairs' info hook,
    /// [`ThreadShared::figures`]) is fresh for it.
    pub(crate) info_asked: bool,
    /// Fresh answers told so far: a stream's `info` waits for the next.
    pub(crate) info_answers: u64,
    /// The figures as of the core's latest answer.
    pub(crate) info: Option<ConnInfo>,
    /// The tasks waiting in `info`, each once.
    pub(crate) info_waiters: Vec<Waker>,
    /// In the thread's list of connections the bridge must look at.
    pub(crate) queued: bool,
    pub(crate) reader: Option<Waker>,
    pub(crate) writer: Option<Waker>,
}

impl Pipe {
    /// An empty pipe for a connection served at `placement`, whose writes
    /// wait until the bridge found room for them ([`Pipe::tx_room`]).
    pub(crate) fn new(placement: Placement) -> Pipe {
        Pipe {
            rx: BytesMut::new(),
            rx_more: false,
            eof: false,
            tx: BytesMut::new(),
            tx_room: 0,
            shutdown: false,
            shutdown_sent: false,
            nodelay: None,
            keepalive: None,
            dropped: false,
            refused: false,
            closed: None,
            orphaned: false,
            placement,
            info_wanted: false,
            info_asked: false,
            info_answers: 0,
            info: None,
            info_waiters: Vec::new(),
            queued: false,
            reader: None,
            writer: None,
        }
    }
}

impl Pipe {
    /// Every task waiting on the stream (to read, to write, for figures),
    /// taken: to wake once the connection is gone.
    pub(crate) fn take_waiters(&mut self) -> Vec<Waker> {
        let mut w = std::mem::take(&mut self.info_waiters);
        w.extend(self.reader.take());
        w.extend(self.writer.take());
        w
    }
}

/// A connection's [`Pipe`], as the stream and the bridge hold it.
pub(crate) type PipeRef = Arc<Mutex<Pipe>>;

/// Locks a pipe (a panic while it was held leaves it usable: every field
/// is valid on its own).
pub(crate) fn lock(p: &Mutex<Pipe>) -> MutexGuard<'_, Pipe> {
    guard(p)
}

/// The error of an open that failed because its thread stalled or stopped.
pub(crate) fn thread_gone(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, why)
}

/// Why a stalled thread's opens fail.
const STALLED: &str = "the application thread stalled (blocked past the stall limit)";

/// The opens the streams asked for, and whether they can be taken.
#[derive(Debug, Default)]
pub(crate) struct Connects {
    /// Asked, not taken by the bridge yet.
    asked: Vec<(SocketAddr, Opened)>,
    /// The thread's loop ended: opens fail at once.
    stopped: bool,
    /// The cores found the thread stalled and it has not passed since:
    /// opens fail at once, as the cores refuse them.
    stalled: bool,
}

/// What the streams of one application thread share with its bridge.
#[derive(Debug)]
pub(crate) struct ThreadShared {
    /// Wakes the thread's loop: called by the cores after queueing events
    /// and by streams after asking the bridge for something.
    pub(crate) notify: Notify,
    /// Connections whose stream asked for something since the bridge last
    /// looked.
    pub(crate) dirty: Mutex<Vec<ConnHandle>>,
    /// Connections to open, and where each stream goes once it is.
    connects: Mutex<Connects>,
    /// Active opens under way (the bridge's, by the thread's handle), and
    /// where each stream goes: shared so that a stall fails them at once.
    opening: Mutex<HashMap<ConnHandle, Opened>>,
    /// Every open connection's pipe (the bridge's, by the thread's handle),
    /// for the network cores to reach while the thread is blocked (a
    /// stall) and for moves.
    pipes: Mutex<HashMap<ConnHandle, PipeRef>>,
    /// A core found the thread stalled since the bridge last looked.
    swept: AtomicBool,
    /// True once the service began to stop (the bridge's `on_stop`); its
    /// receivers are the application's [`crate::StopSignal`]s.
    pub(crate) stop: watch::Sender<bool>,
}

/// Where an opened connection's stream (or why it failed) goes.
pub(crate) type Opened = oneshot::Sender<io::Result<TcpStream>>;

impl Default for ThreadShared {
    fn default() -> ThreadShared {
        ThreadShared {
            notify: Notify::new(),
            dirty: Mutex::new(Vec::new()),
            connects: Mutex::default(),
            opening: Mutex::default(),
            pipes: Mutex::default(),
            swept: AtomicBool::new(false),
            stop: watch::channel(false).0,
        }
    }
}

impl ThreadShared {
    /// Puts `conn` on the bridge's list (once until it looked) and wakes
    /// the loop. `p` is the connection's pipe, locked.
    pub(crate) fn kick(&self, conn: ConnHandle, p: &mut Pipe) {
        if p.queued {
            return;
        }
        p.queued = true;
        guard(&self.dirty).push(conn);
        self.notify.notify_one();
    }

    /// Takes the list.
    pub(crate) fn take_dirty(&self) -> Vec<ConnHandle> {
        std::mem::take(&mut *guard(&self.dirty))
    }

    /// Asks the bridge to open a connection to `remote`; fails it at once
    /// if the thread's loop ended (the sender dropped) or the cores found
    /// the thread stalled and it has not passed since.
    pub(crate) fn connect(&self, remote: SocketAddr, opened: Opened) {
        let mut c = guard(&self.connects);
        if c.stopped {
            return;
        }
        if c.stalled {
            drop(c);
            let _ = opened.send(Err(thread_gone(STALLED)));
            return;
        }
        c.asked.push((remote, opened));
        drop(c);
        self.notify.notify_one();
    }

    /// Takes the connections to open.
    pub(crate) fn take_connects(&self) -> Vec<(SocketAddr, Opened)> {
        std::mem::take(&mut guard(&self.connects).asked)
    }

    /// The bridge started an open: where its stream goes.
    pub(crate) fn opening(&self, conn: ConnHandle, opened: Opened) {
        guard(&self.opening).insert(conn, opened);
    }

    /// Where the stream of the open `conn` goes (none once a stall failed
    /// it).
    pub(crate) fn take_opening(&self, conn: ConnHandle) -> Option<Opened> {
        guard(&self.opening).remove(&conn)
    }

    /// The bridge serves `conn` through `pipe`.
    pub(crate) fn register(&self, conn: ConnHandle, pipe: PipeRef) {
        guard(&self.pipes).insert(conn, pipe);
    }

    /// The bridge no longer serves `conn`.
    pub(crate) fn unregister(&self, conn: ConnHandle) {
        guard(&self.pipes).remove(&conn);
    }

    /// `conn` moved to another network core, now at `placement` (called by
    /// the thread's queue pairs as it takes the move, before the handlers
    /// run).
    pub(crate) fn moved(&self, conn: ConnHandle, placement: Placement) {
        let pipe = guard(&self.pipes).get(&conn).cloned();
        if let Some(pipe) = pipe {
            lock(&pipe).placement = placement;
        }
    }

    /// A network core answered the thread's latest request for `conn`'s
    /// figures (called by the thread's queue pairs as it takes the answer,
    /// before the handlers run): kept in its pipe, and the streams waiting
    /// in `info` since before the bridge asked are woken.
    pub(crate) fn figures(&self, conn: ConnHandle, info: Option<ConnInfo>) {
        let pipe = guard(&self.pipes).get(&conn).cloned();
        let Some(pipe) = pipe else {
            return;
        };
        let waiters = {
            let mut p = lock(&pipe);
            p.info = info.or(p.info);
            if !std::mem::take(&mut p.info_asked) {
                return;
            }
            p.info_answers += 1;
            std::mem::take(&mut p.info_waiters)
        };
        for w in waiters {
            w.wake();
        }
    }

    /// A network core found the thread stalled and reset its connections
    /// (called on the core's thread while this one is blocked): every
    /// stream, wherever it is polled, reads and writes `ConnectionAborted`
    /// from now on, the opens under way or asked fail, and so do those
    /// asked until the thread passes again (as the cores refuse them). A
    /// connection that a core did not reset after all (one that saw the
    /// thread back in time) is aborted by the bridge once it passes
    /// ([`ThreadShared::take_swept`]).
    pub(crate) fn orphaned(&self) {
        let pipes: Vec<PipeRef> = guard(&self.pipes).values().cloned().collect();
        let mut wakers = Vec::new();
        for pipe in &pipes {
            let mut p = lock(pipe);
            if p.closed.is_none() {
                p.closed = Some(CloseReason::Aborted);
                p.orphaned = true;
                wakers.extend(p.take_waiters());
            }
        }
        let failed: Vec<Opened> = {
            let mut c = guard(&self.connects);
            c.stalled = !c.stopped;
            let mut failed: Vec<Opened> = c.asked.drain(..).map(|(_, o)| o).collect();
            failed.extend(guard(&self.opening).drain().map(|(_, o)| o));
            failed
        };
        self.swept.store(true, Ordering::Release);
        for w in wakers {
            w.wake();
        }
        for opened in failed {
            let _ = opened.send(Err(thread_gone(STALLED)));
        }
        // The thread, once it passes, aborts what no core reset.
        self.notify.notify_one();
    }

    /// Whether a core found the thread stalled since the last call (the
    /// bridge's, as the thread passes again): opens are taken again from
    /// now on.
    pub(crate) fn take_swept(&self) -> bool {
        if !self.swept.swap(false, Ordering::Acquire) {
            return false;
        }
        guard(&self.connects).stalled = false;
        true
    }

    /// The thread's loop ended (stopped, or a panic): the opens asked and
    /// not taken fail, those under way too, and so does every later one.
    pub(crate) fn stopped(&self) {
        let left = {
            let mut c = guard(&self.connects);
            c.stopped = true;
            std::mem::take(&mut c.asked)
        };
        drop(left);
        let opening = std::mem::take(&mut *guard(&self.opening));
        drop(opening);
        let pipes = std::mem::take(&mut *guard(&self.pipes));
        drop(pipes);
    }
}

/// Tells a stalled thread's streams, from the network core that found it
/// stalled ([`ThreadShared::orphaned`]).
pub(crate) struct StallWake(pub(crate) Arc<ThreadShared>);

impl flowlane_app::Wake for StallWake {
    fn wake(&self) {
        self.0.orphaned();
    }
}

/// Wakes the thread's loop from a network core.
pub(crate) struct NotifyWake(pub(crate) Arc<ThreadShared>);

impl flowlane_app::Wake for NotifyWake {
    fn wake(&self) {
        self.0.notify.notify_one();
    }
}
