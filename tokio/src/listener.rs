//! A listening port on one application thread: the connections its
//! network cores accepted, waiting for `accept`.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::stream::TcpStream;

/// Accepted connections not yet taken, and who waits for them.
#[derive(Debug)]
struct Backlog {
    ready: VecDeque<TcpStream>,
    /// Every task waiting in `accept` (several may share a listener), each
    /// once; all are woken by the next connection (one of them takes it,
    /// the others wait again: a waiter that gave up loses no wake-up).
    wakers: Vec<Waker>,
    /// The thread's loop ended (stopped, or a panic): no connection comes
    /// any more.
    stopped: bool,
}

/// What a listener shares with its thread's bridge.
#[derive(Debug)]
pub(crate) struct AcceptQueue {
    inner: Mutex<Backlog>,
    limit: usize,
    /// No listener was dropped since it was made (or taken again): the
    /// network cores take SYNs for it (the listeners' SYN filter,
    /// [`AcceptQueue::listening`]) and the bridge queues what they accept.
    listening: AtomicBool,
}

impl AcceptQueue {
    pub(crate) fn new(limit: usize) -> AcceptQueue {
        AcceptQueue {
            inner: Mutex::new(Backlog {
                ready: VecDeque::new(),
                wakers: Vec::new(),
                stopped: false,
            }),
            limit,
            listening: AtomicBool::new(true),
        }
    }

    /// Whether connections are taken: asked by the network cores at each
    /// SYN (a refused one is answered with an RST and counted by the
    /// stack, `syn_refused`, before any connection exists), by the bridge
    /// at each accepted connection.
    pub(crate) fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, Backlog> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues an accepted connection; gives it back if the listener is
    /// gone or its backlog full (the bridge then resets it, counted).
    pub(crate) fn push(&self, s: TcpStream) -> Result<(), TcpStream> {
        let mut b = self.lock();
        if !self.listening() || b.ready.len() >= self.limit {
            return Err(s);
        }
        b.ready.push_back(s);
        let wakers = std::mem::take(&mut b.wakers);
        drop(b);
        for w in wakers {
            w.wake();
        }
        Ok(())
    }

    /// The thread's loop ended: `accept`, wherever it waits, fails once
    /// the connections already queued are taken.
    pub(crate) fn stop(&self) {
        let wakers = {
            let mut b = self.lock();
            b.stopped = true;
            std::mem::take(&mut b.wakers)
        };
        for w in wakers {
            w.wake();
        }
    }
}

/// A port flowlane listens on, as one application thread's tokio code
/// sees it: [`TcpListener::accept`] gives the connections of the network
/// cores this thread serves (every thread has its own listener per port,
/// as with `SO_REUSEPORT`). Dropping it resets the connections it queued
/// that were not taken, as a kernel listener's drop does, and refuses
/// those that arrive for this thread from then on at their SYN (an RST:
/// the peer's connect fails `ECONNREFUSED`; counted by the stack,
/// `syn_refused`), until the thread takes the port's listener again
/// ([`Local::listener`](crate::Local::listener)). On the kernel-socket
/// backend the kernel completes the handshake first: those connections
/// are reset as accepted, counted alike.
#[derive(Debug)]
pub struct TcpListener {
    port: u16,
    queue: Arc<AcceptQueue>,
}

impl TcpListener {
    pub(crate) fn new(port: u16, queue: Arc<AcceptQueue>) -> TcpListener {
        TcpListener { port, queue }
    }

    /// The listener of `queue` again, once the one before was dropped
    /// (None while it is held): the cores take SYNs for it from now on.
    pub(crate) fn again(port: u16, queue: &Arc<AcceptQueue>) -> Option<TcpListener> {
        queue
            .listening
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(TcpListener::new(port, queue.clone()))
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection, and its peer's address; `ConnectionAborted`
    /// once the thread's loop ended and the connections it queued were
    /// taken.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connection (for code that polls by hand). Every
    /// task that polls and waits is woken by the next connection.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        let mut b = self.queue.lock();
        match b.ready.pop_front() {
            Some(s) => {
                let peer = s.peer_addr();
                Poll::Ready(Ok((s, peer)))
            }
            None if b.stopped => Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into())),
            None => {
                if !b.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    b.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        // The cores refuse new SYNs from now on (Release: with the
        // backlog's lock, no connection is queued after the take below).
        self.queue.listening.store(false, Ordering::Release);
        let waiting = std::mem::take(&mut self.queue.lock().ready);
        // Dropped outside the lock: each asks its bridge to reset it.
        for s in waiting {
            s.refuse();
        }
    }
}
