//! What one connection's stream and its thread's bridge share: the bytes
//! between them, the flags each sets for the other, and their wakers.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use bytes::BytesMut;
use flowlane_app::{CloseReason, ConnHandle, ConnInfo};
use tokio::sync::{oneshot, Notify};

use crate::stream::TcpStream;

/// Received bytes a stream holds before the bridge leaves the rest in the
/// queue pair (whose credit then runs out, and the stack's window closes:
/// back-pressure, not drops).
pub(crate) const RX_LIMIT: usize = 64 << 10;
/// Bytes a stream's writes may queue before they wait for the bridge to
/// hand them to the queue pair (whose credit, 256 KiB, bounds those the
/// stack has not taken yet).
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

/// One connection's shared state.
#[derive(Debug, Default)]
pub(crate) struct Pipe {
    /// Received, not yet read by the stream.
    pub(crate) rx: BytesMut,
    /// The bridge stopped pulling because `rx` was full.
    pub(crate) rx_more: bool,
    /// The peer closed and every byte before its FIN is in `rx` (or read).
    pub(crate) eof: bool,
    /// Written by the stream, not yet taken by the stack.
    pub(crate) tx: BytesMut,
    /// The stream shut down its writing half (FIN after `tx`).
    pub(crate) shutdown: bool,
    pub(crate) shutdown_sent: bool,
    /// A `set_nodelay` the bridge has not passed on yet.
    pub(crate) nodelay: Option<bool>,
    /// The stream is gone: close once `tx` went.
    pub(crate) dropped: bool,
    /// The connection is gone, and why.
    pub(crate) closed: Option<CloseReason>,
    /// The stream asked for the connection's figures.
    pub(crate) info_wanted: bool,
    /// The figures as of the bridge's last look.
    pub(crate) info: Option<ConnInfo>,
    /// In the thread's list of connections the bridge must look at.
    pub(crate) queued: bool,
    pub(crate) reader: Option<Waker>,
    pub(crate) writer: Option<Waker>,
}

/// A connection's [`Pipe`], as the stream and the bridge hold it.
pub(crate) type PipeRef = Arc<Mutex<Pipe>>;

/// Locks a pipe (a panic while it was held leaves it usable: every field
/// is valid on its own).
pub(crate) fn lock(p: &Mutex<Pipe>) -> MutexGuard<'_, Pipe> {
    p.lock().unwrap_or_else(|e| e.into_inner())
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
    /// Connections to open, and where each stream goes once it is; `None`
    /// once the thread's loop ended (a connect then fails at once).
    pub(crate) connects: Mutex<Option<Vec<(SocketAddr, Opened)>>>,
}

/// Where an opened connection's stream (or why it failed) goes.
pub(crate) type Opened = oneshot::Sender<io::Result<TcpStream>>;

impl Default for ThreadShared {
    fn default() -> ThreadShared {
        ThreadShared {
            notify: Notify::new(),
            dirty: Mutex::new(Vec::new()),
            connects: Mutex::new(Some(Vec::new())),
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
        self.dirty
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        self.notify.notify_one();
    }

    /// Takes the list.
    pub(crate) fn take_dirty(&self) -> Vec<ConnHandle> {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Asks the bridge to open a connection to `remote` (dropped, which
    /// fails the open, if the thread's loop ended).
    pub(crate) fn connect(&self, remote: SocketAddr, opened: Opened) {
        if let Some(list) = self
            .connects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            list.push((remote, opened));
        }
        self.notify.notify_one();
    }

    /// Takes the connections to open.
    pub(crate) fn take_connects(&self) -> Vec<(SocketAddr, Opened)> {
        self.connects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The thread's loop ended (stopped, or a panic): the opens asked and
    /// not taken fail, and so does every later one.
    pub(crate) fn stopped(&self) {
        let left = self
            .connects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(left);
    }
}

/// Wakes the thread's loop from a network core.
pub(crate) struct NotifyWake(pub(crate) Arc<ThreadShared>);

impl flowlane_app::Wake for NotifyWake {
    fn wake(&self) {
        self.0.notify.notify_one();
    }
}
