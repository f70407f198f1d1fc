//! One core's loop: a mio poll over this core's listeners (each a
//! `SO_REUSEPORT` sibling of every other core's) and connections, the
//! [`Net`] its handlers call, and the dispatcher that calls them.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlane_app::{
    CloseReason, CongestionAlgorithm, ConnHandle, ConnHandler, ConnInfo, Dispatcher, Error,
    FourTuple, HandlerId, Handles, Net, Placement, Setup, StartError, State, Stats, SynFilter,
    Wake,
};
use flowlane_tcp::{Event, ListenerId};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::buffer::BufferPool;
use crate::conn::{connect_error, connect_failure, Conn, Failure, Io};
use crate::listener::{retry_accept_at_once, Claims};
use crate::tcp_info::{Diag, KernelView};

/// Tokens at and above this name listeners; below it, connection slots.
const LISTENER_TOKENS: usize = 1 << 30;
/// The token of the core's waker.
const WAKE_TOKEN: Token = Token(usize::MAX);
/// The longest a loop pass waits for readiness: handlers' `on_tick` runs
/// at least this often.
const TICK: Duration = Duration::from_millis(10);
/// Readiness events taken per poll.
const EVENTS: usize = 1024;
/// Connections one listener's accept takes per loop pass at most: a
/// flood of connections waits for the next pass (after the others'
/// events, the handlers' tick and a stop's check), not the whole core.
const ACCEPTS_PER_PASS: usize = 256;
/// How long a stopping core goes on at most for its connections' closes
/// to finish (the bytes a closed connection still holds here sent, then
/// its FIN; a close still to come where the peer closed; a connection
/// whose handler said at the stop that it would close it,
/// `ConnHandler::on_stop`): the bound the
/// services give the AF_XDP backend's `TcpService::linger`. What is left
/// then is reset, not cut short with a FIN.
pub const STOP_LINGER: Duration = Duration::from_secs(2);

/// Sizes and bounds of one core.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes a connection's receive buffer holds (what `peek` can show);
    /// at least one (a core refuses 0: nothing could ever be read).
    pub rx_buffer: usize,
    /// Bytes a connection's send buffer holds beyond what its socket took;
    /// at least one (a core refuses 0: `Writable` could never come).
    pub tx_buffer: usize,
    /// Connections this core keeps at once; beyond it, accepted
    /// connections are reset and counted (`connection_limit_refused`).
    pub max_connections: usize,
    /// Bytes of receive buffers the core holds at once, whatever the
    /// number of connections (its receive memory budget: `rx_buffer`-sized
    /// buffers, at least one). A connection with data to read when none
    /// is free waits, its bytes left in the kernel (whose window then
    /// closes: TCP flow control, nothing dropped), and is read when a
    /// buffer is given back, oldest first. A handler that keeps bytes
    /// unread holds its connection's buffer meanwhile.
    pub rx_memory: usize,
    /// Bytes of send buffers the core holds at once (its send memory
    /// budget: `tx_buffer`-sized buffers, at least one). A send buffer
    /// holds what the socket did not take of a write (a peer that reads
    /// slowly, or not at all); past the budget, `send` takes only what the
    /// socket takes and the rest stays with the application, which hears
    /// `Writable` when the socket has room again.
    pub tx_memory: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            rx_buffer: 64 << 10,
            tx_buffer: 256 << 10,
            max_connections: 65_536,
            rx_memory: 64 << 20,
            tx_memory: 256 << 20,
        }
    }
}

/// The [`Net`] of one core on kernel sockets.
#[derive(Debug)]
pub struct KernelNet {
    placement: Placement,
    epoch: Instant,
    poll: Poll,
    listen_on: Vec<IpAddr>,
    /// The addresses the service's cores listen on (shared by them).
    claims: Claims,
    listeners: Vec<TcpListener>,
    /// Each listener's SYN filter, asked at accept (the kernel completed
    /// the handshake): a refused connection is reset before any callback.
    filters: Filters,
    conns: Handles<Conn>,
    events: VecDeque<Event>,
    /// Connections to read again at the next pass: their full receive
    /// buffer was read from since, or a buffer was promised to them
    /// (read once per pass each, so that a peer that keeps the socket
    /// full holds its core no longer than one buffer per pass).
    rereads: Vec<u32>,
    /// Connections waiting for a receive buffer, oldest first.
    memory_waiters: VecDeque<u32>,
    /// Buffers given back and promised to waiters that have not read yet
    /// ([`Conn::memory_granted`]): no other read takes them.
    rx_granted: usize,
    /// Connections whose exchange may be over since a call of their
    /// handler (it read the last bytes, or shut its writing down): looked
    /// at once the callback returned ([`Conn::close_finished`]).
    finishing: Vec<u32>,
    /// Times a connection waited for one.
    memory_waits: u64,
    /// Why the last listen that failed failed, in words (the address and
    /// what holds it): [`Error`] carries no detail, and a service's start
    /// says this line instead of "address in use".
    listen_failure: Option<String>,
    /// The OS error of that listen, where the OS refused it (None for one
    /// refused here: no address to listen on).
    listen_error: Option<std::io::Error>,
    /// Per listener: an accept failed (out of descriptors, of memory) and
    /// is tried again each pass until the queue is drained: the listener
    /// is edge-triggered, and a full accept queue wakes it no more.
    accept_retry: Vec<bool>,
    /// Per listener: [`ACCEPTS_PER_PASS`] were taken this pass; the rest
    /// of its queue is taken at the next.
    accept_more: Vec<bool>,
    /// Accepts that failed so.
    accept_failed: u64,
    /// Accepts that failed for the one connection they would have
    /// returned (reset or lost before it was taken), the next one taken
    /// at once.
    accept_aborted: u64,
    /// Writes left (in part) to the application for want of send memory.
    send_memory_waits: u64,
    /// Connections closed by the application and not yet ended.
    closing_conns: Vec<u32>,
    limits: Limits,
    stats: Stats,
    /// Made when a handler asks for one ([`Net::waker`]).
    waker: Option<Arc<MioWake>>,
    /// Asks the kernel about a connection ([`Net::info`]).
    diag: Diag,
    /// The last figures of connections ended and whose `Closed` was not
    /// dispatched yet, for `Net::info` in their `on_closed`: those whose
    /// handler asked for figures before ([`Conn::last_info`]).
    closed_info: Vec<(ConnHandle, ConnInfo)>,
    /// Memory of the receive buffers that hold bytes.
    rx_pool: BufferPool,
    /// Memory of the send buffers that hold bytes.
    tx_pool: BufferPool,
}

/// Whatever ends the loop (a stop, a poll error, a handler's panic
/// unwinding its thread), no connection is cut short with a FIN.
impl Drop for KernelNet {
    fn drop(&mut self) {
        self.let_go();
    }
}

/// The listeners' SYN filters, by listener index.
#[derive(Default)]
struct Filters(Vec<Option<SynFilter>>);

impl std::fmt::Debug for Filters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(Option::is_some))
            .finish()
    }
}

impl Filters {
    /// Whether listener `li`'s filter (if any) takes `tuple`.
    fn take(&self, li: usize, tuple: &FourTuple) -> bool {
        match self.0.get(li).and_then(Option::as_ref) {
            Some(f) => f(tuple),
            None => true,
        }
    }

    fn set(&mut self, li: usize, filter: Option<SynFilter>) {
        if self.0.len() <= li {
            self.0.resize_with(li + 1, || None);
        }
        self.0[li] = filter;
    }
}

/// Free buffers a core keeps per pool.
const POOL_KEEP: usize = 64;

/// Wakes a core's poll from another thread.
#[derive(Debug)]
struct MioWake(mio::Waker);

impl Wake for MioWake {
    fn wake(&self) {
        let _ = self.0.wake();
    }
}

impl KernelNet {
    fn new(
        placement: Placement,
        listen_on: Vec<IpAddr>,
        limits: Limits,
        claims: Claims,
    ) -> std::io::Result<Self> {
        let (rx_buffer, tx_buffer) = (limits.rx_buffer, limits.tx_buffer);
        if rx_buffer == 0 || tx_buffer == 0 {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "Limits: rx_buffer ({rx_buffer}) and tx_buffer ({tx_buffer}) must be at \
                     least one byte"
                ),
            ));
        }
        let (rx_memory, tx_memory) = (limits.rx_memory, limits.tx_memory);
        Ok(KernelNet {
            placement,
            epoch: Instant::now(),
            poll: Poll::new()?,
            listen_on,
            claims,
            listeners: Vec::new(),
            filters: Filters::default(),
            // Tagged with the core's index: another core's handles are
            // refused here.
            conns: Handles::new(limits.max_connections, placement.queue),
            events: VecDeque::new(),
            rereads: Vec::new(),
            memory_waiters: VecDeque::new(),
            rx_granted: 0,
            finishing: Vec::new(),
            memory_waits: 0,
            listen_failure: None,
            listen_error: None,
            accept_retry: Vec::new(),
            accept_more: Vec::new(),
            accept_failed: 0,
            accept_aborted: 0,
            send_memory_waits: 0,
            closing_conns: Vec::new(),
            limits,
            stats: Stats::default(),
            waker: None,
            diag: Diag::default(),
            closed_info: Vec::new(),
            rx_pool: BufferPool::new(rx_buffer, POOL_KEEP, rx_memory / rx_buffer),
            tx_pool: BufferPool::new(tx_buffer, POOL_KEEP, tx_memory / tx_buffer),
        })
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }

    fn conn(&self, h: ConnHandle) -> Result<&Conn, Error> {
        self.conns.get(h)
    }

    fn conn_mut(&mut self, h: ConnHandle) -> Result<&mut Conn, Error> {
        self.conns.get_mut(h)
    }

    /// Puts `conn` in a free slot and registers it; one that cannot be
    /// registered is reset (an accepted one would otherwise see a FIN)
    /// and counted by the caller.
    fn insert(&mut self, conn: Conn) -> Result<ConnHandle, Error> {
        let h = self.conns.insert(conn)?;
        let token = Token(h.index() as usize);
        let c = self.conns.get_mut(h).expect("inserted");
        if self
            .poll
            .registry()
            .register(
                &mut c.stream,
                token,
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            if let Some(c) = self.conns.undo_insert(h) {
                reset_on_close(&c.stream);
            }
            return Err(Error::ConnectionLimit);
        }
        Ok(h)
    }

    /// Counts an RST sent for `reason` (`resets_out` is the sum of the
    /// reasons' counters).
    fn count_reset(&mut self, reason: CloseReason) {
        self.stats.resets_out += 1;
        match reason {
            // Data after `close` (`read_ready`).
            CloseReason::Reset => self.stats.resets_data_after_close += 1,
            // A close whose bytes the peer never read (`sweep_closing`).
            CloseReason::Timeout => self.stats.resets_timed_out += 1,
            // The application's abort or close with data unread, its
            // `admit`'s refusal, a connection past the core's bound, or
            // one a stop could not finish.
            _ => self.stats.resets_aborted += 1,
        }
    }

    /// Ends connection `index`: its socket goes (reset first when
    /// `reset`), `Closed` is queued, and the slot waits for that event.
    fn end(&mut self, index: u32, reason: CloseReason, reset: bool) {
        // The handler's abort: its connection hears nothing more but its
        // `Closed` (`Handles::due`).
        let ended = if reason == CloseReason::Aborted {
            self.conns.end_by_handler(index)
        } else {
            self.conns.end(index)
        };
        let Some((h, mut conn)) = ended else {
            return;
        };
        // Before the reset and the close: an established socket (an
        // abort) still has its figures; one the kernel ended has none,
        // and those read at the connection's last events stay.
        read_last_info(&self.diag, &mut conn);
        if let Some(info) = conn.last_info {
            self.closed_info.push((h, info));
        }
        if reset {
            reset_on_close(&conn.stream);
            // Not in SYN-SENT: closing a connect under way sends nothing
            // (Linux's `tcp_disconnect` resets only synchronized states).
            if !conn.in_syn_sent() {
                self.count_reset(reason);
            }
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if conn.waits_for_memory {
            // Not left for a later connection in its slot to jump the
            // queue with, nor to grow it with churn.
            self.memory_waiters.retain(|&i| i != index);
        }
        if conn.memory_granted {
            // The buffer promised to it goes to the next waiter.
            self.rx_granted -= 1;
        }
        // Its memory back to the budget (a waiter may take it).
        conn.rx.discard(&mut self.rx_pool);
        conn.tx.discard(&mut self.tx_pool);
        drop(conn);
        self.stats.closed += 1;
        self.events.push_back(Event::Closed { conn: h, reason });
    }

    /// Ends connection `index` for a socket error.
    fn fail(&mut self, index: u32, f: Failure) {
        if f.peer_reset {
            self.stats.resets_in += 1;
        }
        self.end(index, f.reason, false);
    }

    /// Ends connection `index` if its socket holds an error (epoll told
    /// one, `EPOLLERR`): an RST, or retransmissions or keepalive probes
    /// that ran out, after the peer's FIN. No read reports it then (the
    /// receive side is at its end, and is not read again), nor a write
    /// while nothing is left to send, nor a read that waits for memory:
    /// `SO_ERROR` does (socket(7)).
    fn error_ready(&mut self, index: u32) {
        let Some(conn) = self.conns.at_mut(index) else {
            return;
        };
        match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => self.fail(index, Failure::of(&e)),
            Ok(None) => {}
        }
    }

    /// The `Closed` event of `h` was dispatched: its slot is free.
    fn release(&mut self, h: ConnHandle) {
        self.conns.release(h);
        if !self.closed_info.is_empty() {
            self.closed_info.retain(|&(c, _)| c != h);
        }
    }

    /// Reads connection `index`'s socket and queues what the handler must
    /// hear of it.
    fn read_ready(&mut self, index: u32) {
        let Some(h) = self.conns.handle(index) else {
            return;
        };
        if self.conns.at_mut(index).is_some_and(|c| c.connecting) {
            // `Connected` goes before any `Readable`.
            self.write_ready(index);
        }
        let Some(conn) = self.conns.at_mut(index).filter(|c| !c.connecting) else {
            return;
        };
        let granted = std::mem::take(&mut conn.memory_granted);
        if granted {
            self.rx_granted -= 1;
        }
        // A buffer is free for a read that did not wait only where none is
        // promised to a waiter and nobody waits: the waiters are served
        // oldest first, the reader that gave a buffer back behind them.
        let free = self.rx_pool.room() > self.rx_granted && self.memory_waiters.is_empty();
        if !conn.rx.has_memory() && !granted && (conn.waits_for_memory || !free) {
            // Past the receive memory budget: the bytes stay in the
            // kernel until a buffer is given back.
            if !conn.waits_for_memory {
                conn.waits_for_memory = true;
                self.memory_waiters.push_back(index);
                self.memory_waits += 1;
            }
            return;
        }
        match conn.fill(&mut self.rx_pool) {
            Io::Failed(f, got) => {
                self.stats.bytes_in += got as u64;
                self.fail(index, f);
            }
            Io::Ok(got) if got > 0 && conn.closing => {
                // Data after `close` (RFC 9293 §3.10.7.4 for a closed
                // receive side): a reset, as flowlane's TCP sends.
                self.stats.bytes_in += got as u64;
                self.end(index, CloseReason::Reset, true);
            }
            Io::Ok(got) => {
                self.stats.bytes_in += got as u64;
                if got > 0 && !conn.readable_told {
                    conn.readable_told = true;
                    self.events.push_back(Event::Readable(h));
                }
                if conn.peer_eof && !conn.peer_closed_told {
                    conn.peer_closed_told = true;
                    // The peer's FIN: the socket may leave the kernel's
                    // tables (TIME-WAIT) once we close too.
                    read_last_info(&self.diag, conn);
                    self.events.push_back(Event::PeerClosed(h));
                }
            }
        }
    }

    /// Writes connection `index`'s send buffer, completes an active open,
    /// finishes a close, and queues `Writable` where it was asked for.
    fn write_ready(&mut self, index: u32) {
        let Some(h) = self.conns.handle(index) else {
            return;
        };
        let Some(conn) = self.conns.at_mut(index) else {
            return;
        };
        if conn.connecting {
            match conn.stream.take_error() {
                Ok(Some(e)) | Err(e) => return self.fail(index, Failure::of_open(&e)),
                Ok(None) => {}
            }
            match conn.stream.peer_addr() {
                Ok(_) => {
                    conn.connecting = false;
                    self.stats.active_opens += 1;
                    self.events.push_back(Event::Connected(h));
                }
                Err(e) if e.kind() == ErrorKind::NotConnected => return,
                Err(e) => return self.fail(index, Failure::of_open(&e)),
            }
        }
        match conn.flush(&mut self.tx_pool) {
            Io::Failed(f, _) => self.fail(index, f),
            Io::Ok(sent) => {
                self.stats.bytes_out += sent as u64;
                if let Some(reason) = conn.close_finished(Instant::now()) {
                    self.end(index, reason, false);
                } else if conn.want_writable && conn.send_space() > 0 && !conn.connecting {
                    conn.want_writable = false;
                    self.events.push_back(Event::Writable(h));
                }
            }
        }
    }

    /// Takes the connections waiting on listener `li`, [`ACCEPTS_PER_PASS`]
    /// at most (the rest at the next pass). An error of the
    /// one connection an accept would have returned
    /// ([`retry_accept_at_once`]) is counted (`accept_aborted`) and the
    /// next taken at once; any other failure than an empty queue (out of
    /// descriptors: EMFILE, ENFILE; of memory) is counted
    /// (`accept_failed`) and the listener tried again each pass
    /// ([`KernelNet::retry_accepts`]) until its queue is drained.
    fn accept(&mut self, li: usize) {
        if li >= self.listeners.len() {
            // Closed at a stop.
            return;
        }
        self.accept_more[li] = false;
        for _ in 0..ACCEPTS_PER_PASS {
            let (stream, remote) = match self.listeners[li].accept() {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.accept_retry[li] = false;
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if retry_accept_at_once(&e) => {
                    self.accept_aborted += 1;
                    continue;
                }
                Err(e) => {
                    self.accept_failed += 1;
                    if !std::mem::replace(&mut self.accept_retry[li], true) {
                        tracing::warn!(
                            "queue {}: accept: {e} (tried again each pass; raise the \
                             descriptor limit, `ulimit -n`, if it lasts)",
                            self.placement.queue
                        );
                    }
                    return;
                }
            };
            let local = stream.local_addr().unwrap_or(remote);
            if !self.filters.take(li, &FourTuple { local, remote }) {
                reset_on_close(&stream);
                self.stats.syn_refused += 1;
                self.stats.resets_out += 1;
                self.stats.resets_refused += 1;
                continue;
            }
            if !self.conns.has_room() {
                reset_on_close(&stream);
                self.stats.connection_limit_refused += 1;
                self.count_reset(CloseReason::Aborted);
                continue;
            }
            let conn = Conn::new(
                stream,
                local,
                remote,
                self.limits.rx_buffer,
                self.limits.tx_buffer,
            );
            match self.insert(conn) {
                Ok(h) => {
                    self.stats.passive_opens += 1;
                    self.events.push_back(Event::Accepted {
                        conn: h,
                        listener: ListenerId::from_index(li as u32),
                    });
                }
                Err(_) => {
                    // Reset by `insert`.
                    self.stats.connection_limit_refused += 1;
                    self.count_reset(CloseReason::Aborted);
                }
            }
        }
        // The queue may hold more: taken at the next pass.
        self.accept_more[li] = true;
    }

    /// Opens the listeners of `port`, one per address: `AddrInUse` for a
    /// port this core listens on already (as the stack refuses a second
    /// listener: the kernel would split the port's connections between
    /// the two sockets, and so between two handlers); `InvalidAddress`,
    /// its [`KernelCore::listen_failure`] saying why, with no address to
    /// listen on.
    fn listen(&mut self, port: u16) -> Result<Vec<ListenerId>, Error> {
        if self.listen_on.is_empty() {
            // No listener would open: the port would take no connection.
            self.listen_failure = Some(format!(
                "cannot listen on port {port}: KernelConfig::listen_on is empty; give it the \
                 addresses to listen on (0.0.0.0 for every IPv4 one)"
            ));
            self.listen_error = None;
            return Err(Error::InvalidAddress);
        }
        if port != 0
            && self
                .listeners
                .iter()
                .any(|l| l.local_addr().is_ok_and(|a| a.port() == port))
        {
            return Err(Error::AddrInUse);
        }
        let first = self.listeners.len();
        let mut claimed = Vec::new();
        let opened = self.open_listeners(port, &mut claimed);
        if opened.is_err() {
            // None of this port's listeners is left behind to take
            // connections nobody hears of, nor its claims.
            for mut l in self.listeners.drain(first..) {
                let _ = self.poll.registry().deregister(&mut l);
            }
            self.accept_retry.truncate(first);
            self.accept_more.truncate(first);
            for addr in claimed {
                self.claims.release(addr);
            }
        }
        opened
    }

    /// [`KernelNet::listen`]'s listeners, in order; `claimed` gets the
    /// addresses whose claim they took.
    fn open_listeners(
        &mut self,
        port: u16,
        claimed: &mut Vec<SocketAddr>,
    ) -> Result<Vec<ListenerId>, Error> {
        let mut ids = Vec::new();
        for &ip in &self.listen_on.clone() {
            let addr = SocketAddr::new(ip, port);
            let (mut l, claim) = self.claims.listener(addr).map_err(|e| {
                let (why, error) = match e.kind() {
                    ErrorKind::AddrInUse => (
                        format!(
                            "port {port}/tcp is in use on {ip} by a kernel socket (another \
                             server, or connections of one, maybe ended, in TIME-WAIT: \
                             `ss -tan 'sport = :{port}'` lists them): choose another port \
                             (SetupExt::listen) or stop it"
                        ),
                        Error::AddrInUse,
                    ),
                    _ => (
                        crate::listener::listen_failure(
                            addr,
                            &e,
                            crate::listener::unprivileged_port_start(),
                        ),
                        Error::InvalidAddress,
                    ),
                };
                tracing::debug!("queue {}: {why}", self.placement.queue);
                self.listen_failure = Some(why);
                self.listen_error = Some(e);
                error
            })?;
            if claim {
                claimed.push(addr);
            }
            let li = self.listeners.len();
            self.poll
                .registry()
                .register(&mut l, Token(LISTENER_TOKENS + li), Interest::READABLE)
                .map_err(|_| Error::InvalidAddress)?;
            self.listeners.push(l);
            self.accept_retry.push(false);
            self.accept_more.push(false);
            ids.push(ListenerId::from_index(li as u32));
        }
        Ok(ids)
    }

    /// Closes every listener (a stop began): the connections the kernel
    /// completes from now on are refused by it, not accepted here only to
    /// be reset when the stop's linger ends.
    fn close_listeners(&mut self) {
        for mut l in self.listeners.drain(..) {
            let _ = self.poll.registry().deregister(&mut l);
        }
        self.accept_retry.clear();
        self.accept_more.clear();
    }

    /// Whether the loop has work for its next pass without waiting for
    /// readiness: reads deferred to it, or accepts left by the last one.
    fn more_to_do(&self) -> bool {
        !self.rereads.is_empty() || self.accept_more.iter().any(|&m| m)
    }

    /// The handler heard of `h`'s peer closing: a connection it closed
    /// before ends now.
    fn peer_closed_dispatched(&mut self, h: ConnHandle) {
        if let Ok(c) = self.conn_mut(h) {
            c.peer_closed_dispatched = true;
            if let Some(reason) = c.close_finished(Instant::now()) {
                self.end(h.index(), reason, false);
            }
        }
    }

    /// Ends the closed connections whose peer's FIN did not come within
    /// [`FIN_WAIT`](crate::conn::FIN_WAIT) (`Timeout`, as the stack's
    /// FIN-WAIT-2 timer; the kernel finishes them), and resets those whose
    /// own FIN could not go within it because their peer reads nothing
    /// ([`Conn::close_stuck`](crate::conn::Conn::close_stuck)).
    fn sweep_closing(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.closing_conns.len() {
            let index = self.closing_conns[i];
            match self.conns.at_mut(index).map(|c| &*c) {
                Some(c) if c.close_stuck(now) => {
                    self.closing_conns.swap_remove(i);
                    self.end(index, CloseReason::Timeout, true);
                }
                Some(c) if c.closing => match c.close_finished(now) {
                    None => i += 1,
                    Some(reason) => {
                        self.closing_conns.swap_remove(i);
                        self.end(index, reason, false);
                    }
                },
                _ => {
                    self.closing_conns.swap_remove(i);
                }
            }
        }
    }

    /// The connections whose close is still under way in a way that only
    /// this loop can finish ([`Conn::close_pending`]).
    fn closes_pending(&self) -> usize {
        self.conns.iter().filter(|c| c.close_pending()).count()
    }

    /// Lets go of every connection at a stop: the kernel finishes those
    /// whose FIN the application asked for and that went to the socket
    /// after all their bytes ([`Conn::may_end_quietly`]); every other one
    /// is reset (`SO_LINGER` of zero, socket(7)), so that its peer never
    /// takes a stream cut short for a complete one (the kernel would send
    /// what it holds, then a FIN). Handlers hear nothing more.
    fn let_go(&mut self) {
        let mut index = 0;
        while self.conns.handle(index).is_some() {
            if let Some((_, mut conn)) = self.conns.end(index) {
                if !conn.may_end_quietly() {
                    reset_on_close(&conn.stream);
                    if !conn.in_syn_sent() {
                        self.count_reset(CloseReason::Aborted);
                    }
                }
                let _ = self.poll.registry().deregister(&mut conn.stream);
                conn.rx.discard(&mut self.rx_pool);
                conn.tx.discard(&mut self.tx_pool);
                // Ended, as by `end` (no `Closed`: the loop is over), so
                // that opens add up to closes and connections open.
                self.stats.closed += 1;
            }
            index += 1;
        }
    }

    /// Accepts again on the listeners whose last accept failed or stopped
    /// at [`ACCEPTS_PER_PASS`].
    fn retry_accepts(&mut self) {
        for li in 0..self.listeners.len() {
            if self.accept_retry[li] || self.accept_more[li] {
                self.accept(li);
            }
        }
    }

    /// Promises the buffers the budget has free (and not promised yet) to
    /// as many memory waiters, oldest first, and queues them for reading
    /// at the next pass.
    fn wake_memory_waiters(&mut self) {
        let mut room = self.rx_pool.room().saturating_sub(self.rx_granted);
        while room > 0 {
            let Some(index) = self.memory_waiters.pop_front() else {
                return;
            };
            // (A slot ended and taken again holds a connection that waits
            // for nothing.)
            if let Some(c) = self.conns.at_mut(index).filter(|c| c.waits_for_memory) {
                c.waits_for_memory = false;
                c.memory_granted = true;
                self.rx_granted += 1;
                self.rereads.push(index);
                room -= 1;
            }
        }
    }

    /// Ends the connections whose exchange a handler's call may have
    /// finished ([`KernelNet::finishing`]): once its callback returned,
    /// so that the handle stays valid for the rest of it.
    fn end_finished(&mut self) {
        let now = Instant::now();
        for index in std::mem::take(&mut self.finishing) {
            if let Some(reason) = self.conns.at_mut(index).and_then(|c| c.close_finished(now)) {
                self.end(index, reason, false);
            }
        }
    }

    /// Settles an active open the application closes or aborts: where the
    /// kernel completed its handshake before the loop saw it, the
    /// connection is established (counted as opened; its handler, which
    /// gave it up, hears no `Connected`), not in SYN-SENT.
    fn settle_connect(&mut self, h: ConnHandle) {
        if let Ok(c) = self.conns.get_mut(h) {
            if c.connecting && !c.in_syn_sent() {
                c.connecting = false;
                self.stats.active_opens += 1;
            }
        }
    }
}

impl Net for KernelNet {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn placement(&self) -> Placement {
        self.placement
    }

    /// A non-blocking connect(2); no SYN goes out for a connection the
    /// table has no slot for (`ConnectionLimit`). As on flowlane's TCP: an
    /// unspecified address or port 0 is `InvalidAddress`; no free local
    /// port is `AddrInUse`, no descriptor or memory left `ConnectionLimit`;
    /// a refusal (an RST to the SYN) and an open that times out come
    /// later, as `on_closed` (`Reset`, `Timeout`), and so do those the
    /// kernel knows at once (no route, a firewall's drop: `Timeout`; see
    /// `conn::connect_failure`), the open ended before its first pass.
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnHandle, Error> {
        if remote.ip().to_canonical().is_unspecified() || remote.port() == 0 {
            // Linux would connect to this host.
            return Err(Error::InvalidAddress);
        }
        if !self.conns.has_room() {
            return Err(Error::ConnectionLimit);
        }
        let (stream, failed) = open_stream(remote).map_err(|e| {
            tracing::debug!("connect to {remote}: {e}");
            connect_error(&e)
        })?;
        let local = stream
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 0));
        let mut conn = Conn::new(
            stream,
            local,
            remote,
            self.limits.rx_buffer,
            self.limits.tx_buffer,
        );
        conn.connecting = true;
        let Some(f) = failed else {
            return self.insert(conn);
        };
        // Ended at once, its socket closed (nothing went out): `Closed`
        // follows the caller's callback, as the stack's open would end.
        let h = self.conns.insert(conn)?;
        self.fail(h.index(), f);
        Ok(h)
    }

    fn send(&mut self, h: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        let conn = self.conns.get_mut(h)?;
        if conn.closing || conn.shut_pending {
            return Err(Error::InvalidState);
        }
        let no_memory = !conn.tx.has_memory() && !self.tx_pool.has_room();
        match conn.send(data, &mut self.tx_pool) {
            Ok((taken, written)) => {
                self.stats.bytes_out += written as u64;
                if no_memory && taken < data.len() {
                    self.send_memory_waits += 1;
                }
                // Short: the socket is full (it took what it could), so
                // its next room is an edge that tells `Writable`.
                if taken < data.len() {
                    conn.want_writable = true;
                }
                if taken == 0 && !data.is_empty() {
                    return Err(Error::WouldBlock);
                }
                Ok(taken)
            }
            Err(f) => {
                self.fail(h.index(), f);
                Err(Error::InvalidHandle)
            }
        }
    }

    fn recv(&mut self, h: ConnHandle, buf: &mut [u8]) -> Result<usize, Error> {
        let conn = self.conn_mut(h)?;
        if conn.rx.is_empty() || buf.is_empty() {
            // `Ok(0)` is end of stream only (an empty `buf` with bytes
            // waiting reads nothing: `WouldBlock`).
            return if self.is_eof(h) {
                Ok(0)
            } else {
                Err(Error::WouldBlock)
            };
        }
        let n = buf.len().min(conn.rx.len());
        buf[..n].copy_from_slice(&conn.rx.filled()[..n]);
        self.consume(h, n)
    }

    fn peek(&self, h: ConnHandle) -> Result<&[u8], Error> {
        Ok(self.conn(h)?.rx.filled())
    }

    fn consume(&mut self, h: ConnHandle, n: usize) -> Result<usize, Error> {
        let conn = self.conns.get_mut(h)?;
        let n = conn.rx.consume(n);
        conn.rx.detach(&mut self.rx_pool);
        conn.readable_told = false;
        if conn.rx_stalled && n > 0 {
            conn.rx_stalled = false;
            self.rereads.push(h.index());
        }
        if n > 0 && conn.rx.is_empty() && conn.peer_eof && conn.write_shut {
            // The last bytes read after both FINs: the exchange may be over.
            self.finishing.push(h.index());
        }
        Ok(n)
    }

    fn is_eof(&self, h: ConnHandle) -> bool {
        self.conn(h).is_ok_and(|c| c.peer_eof && c.rx.is_empty())
    }

    fn send_space(&self, h: ConnHandle) -> Result<usize, Error> {
        Ok(self.conn(h)?.send_space())
    }

    fn want_writable(&mut self, h: ConnHandle) -> bool {
        match self.conn_mut(h) {
            // Nothing can be written after a close or a shutdown.
            Ok(c) if c.send_space() == 0 && !c.closing && !c.shut_pending => {
                c.want_writable = true;
                true
            }
            _ => false,
        }
    }

    fn shutdown_write(&mut self, h: ConnHandle) -> Result<(), Error> {
        let conn = self.conns.get_mut(h)?;
        read_last_info(&self.diag, conn);
        conn.shut_pending = true;
        // No `Writable` after it, even one a short send asked for.
        conn.want_writable = false;
        match conn.flush(&mut self.tx_pool) {
            Io::Failed(f, _) => self.fail(h.index(), f),
            Io::Ok(sent) => {
                self.stats.bytes_out += sent as u64;
                if conn.write_shut && conn.peer_eof {
                    // Our FIN after the peer's: the exchange may be over.
                    self.finishing.push(h.index());
                }
            }
        }
        Ok(())
    }

    fn close(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.settle_connect(h);
        let conn = self.conns.get_mut(h)?;
        if !conn.rx.is_empty() {
            // Unread data: a reset, as the stack does.
            self.end(h.index(), CloseReason::Aborted, true);
            return Ok(());
        }
        if conn.closing {
            return Ok(());
        }
        if conn.connecting && conn.tx.is_empty() {
            // As flowlane's stack in SYN-SENT (RFC 9293 §3.10.4): gone now,
            // nothing sent.
            self.end(h.index(), CloseReason::Normal, false);
            return Ok(());
        }
        // The last figures the kernel may tell: once both FINs went, the
        // socket is in TIME-WAIT or gone.
        read_last_info(&self.diag, conn);
        conn.closing = true;
        let now = Instant::now();
        conn.closed_at = Some(now);
        if conn.write_shut && conn.fin_sent_at.is_none() {
            // Its FIN went at an earlier `shutdown_write`: the wait for the
            // peer's runs from now.
            conn.fin_sent_at = Some(now);
        }
        conn.shut_pending = true;
        conn.want_writable = false;
        match conn.flush(&mut self.tx_pool) {
            Io::Failed(f, _) => self.fail(h.index(), f),
            Io::Ok(sent) => {
                // What this flush wrote counts as sent, as in `write_ready`
                // (uncounted, a close that flushed the last bytes left
                // `bytes_out` short of what the peer read).
                self.stats.bytes_out += sent as u64;
                if let Some(reason) = conn.close_finished(Instant::now()) {
                    self.end(h.index(), reason, false);
                } else {
                    // The rest and FIN go out as the socket takes them
                    // (`write_ready`); the end comes with the peer's FIN.
                    self.closing_conns.push(h.index());
                }
            }
        }
        Ok(())
    }

    fn abort(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.conn(h)?;
        // An open the kernel completed is reset (and counted so).
        self.settle_connect(h);
        self.end(h.index(), CloseReason::Aborted, true);
        Ok(())
    }

    fn set_nodelay(&mut self, h: ConnHandle, nodelay: bool) -> Result<(), Error> {
        self.conn(h)?
            .stream
            .set_nodelay(nodelay)
            .map_err(|_| Error::InvalidState)
    }

    /// `SO_KEEPALIVE`, with the system's timings (`net.ipv4.tcp_keepalive_*`).
    fn set_keepalive(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        nix::sys::socket::setsockopt(
            &self.conn(h)?.stream,
            nix::sys::socket::sockopt::KeepAlive,
            &on,
        )
        .map_err(|_| Error::InvalidState)
    }

    /// `SO_SNDBUF` (Linux doubles it for its bookkeeping and clamps it at
    /// `net.core.wmem_max`); the kernel stops auto-tuning the socket's.
    fn set_send_buffer(&mut self, h: ConnHandle, bytes: usize) -> Result<(), Error> {
        nix::sys::socket::setsockopt(
            &self.conn(h)?.stream,
            nix::sys::socket::sockopt::SndBuf,
            &bytes,
        )
        .map_err(|_| Error::InvalidState)
    }

    /// `SO_RCVBUF` (doubled and clamped at `net.core.rmem_max` as above);
    /// the kernel stops auto-tuning the socket's.
    fn set_recv_buffer(&mut self, h: ConnHandle, bytes: usize) -> Result<(), Error> {
        nix::sys::socket::setsockopt(
            &self.conn(h)?.stream,
            nix::sys::socket::sockopt::RcvBuf,
            &bytes,
        )
        .map_err(|_| Error::InvalidState)
    }

    fn set_congestion(&mut self, h: ConnHandle, alg: CongestionAlgorithm) -> Result<(), Error> {
        let name = match alg {
            CongestionAlgorithm::NewReno => "reno",
            CongestionAlgorithm::Cubic => "cubic",
        };
        nix::sys::socket::setsockopt(
            &self.conn(h)?.stream,
            nix::sys::socket::sockopt::TcpCongestion,
            &std::ffi::OsString::from(name),
        )
        .map_err(|_| Error::InvalidState)
    }

    /// The kernel's figures (sock_diag) plus this loop's own buffers;
    /// `InvalidState` once the kernel keeps none (the socket went to
    /// TIME-WAIT, or sock_diag cannot be asked). Once asked, the
    /// connection's figures are read again at its last events (the peer's
    /// FIN, the handler's `shutdown_write`, `close` or `abort`) and the
    /// last of them answered in its `on_closed`.
    fn info(&self, h: ConnHandle) -> Result<ConnInfo, Error> {
        let c = match self.conn(h) {
            Ok(c) => c,
            Err(e) => {
                return self
                    .closed_info
                    .iter()
                    .find(|&&(c, _)| c == h)
                    .map(|&(_, info)| info)
                    .ok_or(e)
            }
        };
        c.info_asked.set(true);
        let k = self
            .diag
            .query(c.local, c.remote)
            .map_err(|_| Error::InvalidState)?;
        kernel_info(&k, c).ok_or(Error::InvalidState)
    }

    fn four_tuple(&self, h: ConnHandle) -> Result<FourTuple, Error> {
        let c = self.conn(h)?;
        Ok(FourTuple {
            local: c.local,
            remote: c.remote,
        })
    }

    fn state(&self, h: ConnHandle) -> Result<State, Error> {
        Ok(self.conn(h)?.state())
    }

    fn set_user_data(&mut self, h: ConnHandle, data: u64) -> Result<(), Error> {
        self.conn_mut(h)?.user_data = data;
        Ok(())
    }

    fn user_data(&self, h: ConnHandle) -> Result<u64, Error> {
        Ok(self.conn(h)?.user_data)
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    fn waker(&mut self) -> Option<Arc<dyn Wake>> {
        if self.waker.is_none() {
            let w = mio::Waker::new(self.poll.registry(), WAKE_TOKEN).ok()?;
            self.waker = Some(Arc::new(MioWake(w)));
        }
        self.waker.clone().map(|w| w as Arc<dyn Wake>)
    }
}

/// One core: its [`KernelNet`] and the handlers registered on it.
#[derive(Debug)]
pub struct KernelCore {
    net: KernelNet,
    app: Dispatcher,
    /// Once a stop's drain ended: the connections it still waited for
    /// then ([`KernelCore::finishing`]).
    finishing_left: Option<usize>,
}

impl KernelCore {
    /// A core at `placement` whose listeners bind `listen_on` (one per
    /// address, each port), alone on its ports: a port another socket
    /// holds, even with `SO_REUSEPORT`, is refused (`AddrInUse`).
    pub fn new(
        placement: Placement,
        listen_on: Vec<IpAddr>,
        limits: Limits,
    ) -> std::io::Result<KernelCore> {
        Self::sharing(placement, listen_on, limits, Claims::default())
    }

    /// [`KernelCore::new`] for one of a service's cores, which share
    /// their ports (`claims`) and nobody else's.
    pub(crate) fn sharing(
        placement: Placement,
        listen_on: Vec<IpAddr>,
        limits: Limits,
        claims: Claims,
    ) -> std::io::Result<KernelCore> {
        Ok(KernelCore {
            net: KernelNet::new(placement, listen_on, limits, claims)?,
            app: Dispatcher::new(),
            finishing_left: None,
        })
    }

    /// The connections a stop's drain waits for: those whose handler
    /// said at the stop it would close them (`AtStop::Finish`) and has
    /// not yet. Once the drain ended ([`KernelCore::run`] returned after a
    /// stop), every connection it still waited for when it ended (those
    /// and the closes under way that only this loop could finish), which
    /// were reset then: 0 when every one finished in time.
    pub fn finishing(&self) -> usize {
        self.finishing_left.unwrap_or_else(|| self.app.finishing())
    }

    /// What a stop's drain waits for now: the connections being finished
    /// by their handler, and the closes under way only this loop can
    /// finish (their bytes still here).
    fn unfinished(&self) -> usize {
        self.app.finishing() + self.net.closes_pending()
    }

    /// The core's TCP counters (those a socket backend knows).
    pub fn stats(&self) -> &Stats {
        &self.net.stats
    }

    /// Why this core's last failed listen failed, in one line (the port,
    /// the address and what to do), if one failed.
    pub fn listen_failure(&self) -> Option<&str> {
        self.net.listen_failure.as_deref()
    }

    /// Why this core's last failed listen failed, as a start error: the
    /// OS's refusal (its error the source: `AddrInUse`,
    /// `PermissionDenied`), or a configuration with no address to listen
    /// on; None if no listen failed.
    pub(crate) fn take_listen_failure(&mut self) -> Option<StartError> {
        let why = self.net.listen_failure.take()?;
        Some(match self.net.listen_error.take() {
            Some(e) => StartError::os(why, e),
            None => StartError::config(why),
        })
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.net.conns.len()
    }

    /// Whether this core holds the connection between `local` and
    /// `remote` (a scan of its connections: for control-plane questions,
    /// not per packet).
    pub fn holds(&self, local: SocketAddr, remote: SocketAddr) -> bool {
        self.net
            .conns
            .iter()
            .any(|c| c.local == local && c.remote == remote)
    }

    /// Connections a handler's `admit` refused so far.
    pub fn application_refused(&self) -> u64 {
        self.app.refused()
    }

    /// Buffer memory its connections hold now (receive and send).
    pub fn buffer_memory(&self) -> usize {
        self.net.rx_pool.out() * self.net.limits.rx_buffer
            + self.net.tx_pool.out() * self.net.limits.tx_buffer
    }

    /// Bytes of buffer memory given back to the allocator so far (buffers
    /// freed past those the pools keep for reuse).
    pub fn buffer_memory_returned(&self) -> u64 {
        self.net.rx_pool.returned() + self.net.tx_pool.returned()
    }

    /// Receive memory: the most bytes of receive buffers held at once
    /// so far (never above [`Limits::rx_memory`], but for one buffer),
    /// and the times a connection waited for a buffer.
    pub fn receive_memory(&self) -> (usize, u64) {
        (
            self.net.rx_pool.peak() * self.net.limits.rx_buffer,
            self.net.memory_waits,
        )
    }

    /// Accepts that failed (out of descriptors or memory) and were tried
    /// again.
    pub fn accept_failed(&self) -> u64 {
        self.net.accept_failed
    }

    /// Accepts that failed for the one connection they would have
    /// returned (accept(2)'s network errors, an abort before the accept),
    /// the next one taken at once.
    pub fn accept_aborted(&self) -> u64 {
        self.net.accept_aborted
    }

    /// Send memory: the most bytes of send buffers held at once so far
    /// (never above [`Limits::tx_memory`], but for one buffer), and the
    /// writes left in part to the application for want of a buffer.
    pub fn send_memory(&self) -> (usize, u64) {
        (
            self.net.tx_pool.peak() * self.net.limits.tx_buffer,
            self.net.send_memory_waits,
        )
    }

    /// Runs the loop until `stop` is set, calling `publish` after each
    /// pass. Once stopped, it closes its listeners and asks each
    /// connection's handler what to do with it
    /// ([`ConnHandler::on_stop`](flowlane_app::ConnHandler::on_stop)); it
    /// goes on while closes are under way that only it can finish, or
    /// connections whose handler said it would close them are open
    /// ([`Dispatcher::finishing`]), [`STOP_LINGER`] at most, then lets go of every
    /// connection: the kernel finishes those whose FIN the application
    /// asked for and that hold no bytes here, the others are reset (as
    /// when the core is dropped). Returns then, or on a poll error (after
    /// letting go likewise).
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        mut publish: impl FnMut(&KernelCore),
    ) -> std::io::Result<()> {
        let mut events = Events::with_capacity(EVENTS);
        self.app.start(&mut self.net);
        self.dispatch();
        let mut linger_until = None;
        let r = loop {
            if let Err(e) = self.pass(&mut events) {
                break Err(e);
            }
            publish(self);
            // Checked after a pass: the closes asked for before the stop
            // (a queue-pair relay's, on their way) were carried out.
            if stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if linger_until.is_none() {
                    // No connection is taken that the stop would reset.
                    self.net.close_listeners();
                    // The handlers close what they can end cleanly (an
                    // idle keep-alive connection) or will finish.
                    self.app.stop(&mut self.net);
                    self.dispatch();
                }
                let until = *linger_until.get_or_insert(now + STOP_LINGER);
                if now >= until || self.unfinished() == 0 {
                    break Ok(());
                }
            }
        };
        if linger_until.is_some() {
            self.finishing_left = Some(self.unfinished());
        }
        self.net.let_go();
        r
    }

    /// One pass of the loop: readiness (a tick at most, none when reads
    /// or accepts were left to it), the reads deferred to it, the
    /// handlers' events and tick, accepts retried, closes swept. Each part
    /// is bounded: a connection's read one receive buffer, a listener's
    /// accept [`ACCEPTS_PER_PASS`], so that no peer holds the core (its
    /// other connections, its tick, its stop) however fast it sends.
    fn pass(&mut self, events: &mut Events) -> std::io::Result<()> {
        let wait = if self.net.more_to_do() {
            Duration::ZERO
        } else {
            TICK
        };
        match self.net.poll.poll(events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            if ev.token() == WAKE_TOKEN {
                // The pass itself is what the waker asked for.
                continue;
            }
            let t = ev.token().0;
            if t >= LISTENER_TOKENS {
                self.net.accept(t - LISTENER_TOKENS);
                continue;
            }
            let index = t as u32;
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                self.net.read_ready(index);
            }
            if ev.is_writable() || ev.is_error() {
                self.net.write_ready(index);
            }
            if ev.is_error() {
                // After what the socket still gave.
                self.net.error_ready(index);
            }
            // The handler reads now, while what the socket gave is in
            // the cache and before the next connection's read: a
            // buffer it empties goes back to the pool for that one.
            self.dispatch();
        }
        // Read again, once each, what was queued for reading before this
        // point: a full buffer read from since, a buffer promised to a
        // waiter. What these reads queue waits for the next pass.
        for index in std::mem::take(&mut self.net.rereads) {
            self.net.read_ready(index);
            self.dispatch();
        }
        self.app.tick(&mut self.net);
        self.net.retry_accepts();
        self.net.sweep_closing(Instant::now());
        self.dispatch();
        Ok(())
    }

    /// Delivers every queued event; those of a connection a handler
    /// ended since they were queued (an abort) are dropped, but its
    /// `Closed`. Then ends the connections whose exchange the handlers'
    /// calls finished, and promises the buffers given back to the
    /// connections waiting for receive memory (read at the next pass,
    /// as those whose full buffer was read from: a dispatch never reads,
    /// so that it ends however fast a peer sends).
    fn dispatch(&mut self) {
        loop {
            while let Some(e) = self.net.events.pop_front() {
                if !self.net.conns.due(&e) {
                    continue;
                }
                self.app.dispatch(e, &mut self.net);
                match e {
                    Event::Closed { conn, .. } => self.net.release(conn),
                    Event::PeerClosed(conn) => self.net.peer_closed_dispatched(conn),
                    _ => {}
                }
            }
            if self.net.finishing.is_empty() {
                break;
            }
            // Their `Closed`, dispatched in the next round.
            self.net.end_finished();
        }
        self.net.wake_memory_waiters();
    }
}

impl Setup for KernelCore {
    fn queue(&self) -> u32 {
        self.net.placement.queue
    }

    fn listen_boxed(
        &mut self,
        port: u16,
        handler: Box<dyn ConnHandler>,
    ) -> Result<HandlerId, Error> {
        let ids = self.net.listen(port)?;
        let h = self.app.add_boxed(handler);
        for l in ids {
            self.bind_listener(l, h, port)?;
        }
        Ok(h)
    }

    fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId {
        self.app.add_boxed(handler)
    }

    fn listen_with(&mut self, port: u16, handler: HandlerId) -> Result<(), Error> {
        self.app.check_handler(handler)?;
        for l in self.net.listen(port)? {
            self.bind_listener(l, handler, port)?;
        }
        Ok(())
    }
}

impl KernelCore {
    /// Connections accepted on `l` (a listener on `port`) go to
    /// `handler`, whose SYN filter is asked at each accept on it.
    fn bind_listener(&mut self, l: ListenerId, handler: HandlerId, port: u16) -> Result<(), Error> {
        self.net
            .filters
            .set(l.index() as usize, self.app.syn_filter(handler, port));
        self.app.bind_listener(l, handler)
    }
}

/// A non-blocking socket for `remote` and its connect(2) under way; with
/// the failure that ends the open at once where connect(2) failed for a
/// cause the stack would meet only on the wire (`conn::connect_failure`).
/// Any other error is connect's own (`conn::connect_error`).
fn open_stream(remote: SocketAddr) -> std::io::Result<(TcpStream, Option<Failure>)> {
    use nix::errno::Errno;
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, SockaddrStorage};
    let family = if remote.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let r = nix::sys::socket::connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(remote),
    );
    let stream = TcpStream::from_std(std::net::TcpStream::from(fd));
    match r {
        // An interrupted connect goes on (connect(2), EINTR).
        Ok(()) | Err(Errno::EINPROGRESS | Errno::EINTR) => Ok((stream, None)),
        Err(e) => {
            let e = std::io::Error::from(e);
            match connect_failure(&e) {
                Some(f) => Ok((stream, Some(f))),
                None => Err(e),
            }
        }
    }
}

/// Makes closing `stream` send a reset: `SO_LINGER` on with a zero
/// linger time (socket(7)), with which Linux's close(2) aborts the
/// connection (`tcp_disconnect`: an RST in a synchronized state, nothing
/// in SYN-SENT) instead of sending what is queued and a FIN.
fn reset_on_close(stream: &TcpStream) {
    let _ = nix::sys::socket::setsockopt(
        stream,
        nix::sys::socket::sockopt::Linger,
        &nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    );
}

/// Reads `conn`'s figures again if its handler asked for them before
/// ([`Conn::info_asked`]), and keeps them as its last
/// ([`Conn::last_info`]) if the kernel told them: at the connection's last
/// events, after which its socket may be in TIME-WAIT (no `tcp_info`) or
/// gone, so that `Net::info` answers in `on_closed` as on the other
/// backends. One sock_diag round trip per such event, for those
/// connections only: a handler that never asks costs nothing.
fn read_last_info(diag: &Diag, conn: &mut Conn) {
    if !conn.info_asked.get() {
        return;
    }
    let told = diag.query(conn.local, conn.remote).ok();
    if let Some(info) = told.and_then(|k| kernel_info(&k, conn)) {
        conn.last_info = Some(info);
    }
}

/// Linux's `TCP_INFO` figures in flowlane's [`ConnInfo`], with the bytes
/// waiting in the loop's own receive and send buffers added.
/// None when the kernel gave no `tcp_info` (a TIME-WAIT socket). The
/// capacities are those of the loop's own buffers (what `send_space`
/// counts against).
fn kernel_info(k: &KernelView, c: &Conn) -> Option<ConnInfo> {
    let (rx_buffered, tx_buffered) = (c.rx.len(), c.tx.len());
    // Linux's TCP_INFINITE_SSTHRESH.
    const INFINITE: u32 = 0x7fff_ffff;
    let t = k.tcp.as_ref()?;
    let mss = t.snd_mss as usize;
    let queued = k.send_queue as usize;
    let notsent = (t.notsent_bytes as usize).min(queued);
    Some(ConnInfo {
        readable: rx_buffered + k.recv_queue as usize,
        unsent: tx_buffered + notsent,
        unacked: queued - notsent,
        srtt: (t.rtt > 0).then(|| flowlane_tcp::time::Duration::from_micros(u64::from(t.rtt))),
        cwnd: t.snd_cwnd as usize * mss,
        ssthresh: if t.snd_ssthresh >= INFINITE {
            usize::MAX
        } else {
            t.snd_ssthresh as usize * mss
        },
        mss: u16::try_from(t.snd_mss).unwrap_or(u16::MAX),
        retransmits: t.total_retrans,
        send_capacity: c.tx.capacity(),
        recv_capacity: c.rx.capacity(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A connection closed with bytes its peer never reads (a zero window
    /// the peer's kernel answers to every probe): its FIN can never go, so
    /// it is reset once `FIN_WAIT` has passed since the close, not kept
    /// with its send memory for good.
    #[test]
    fn a_close_behind_a_peer_that_never_reads_is_reset_in_time() {
        let placement = Placement {
            queue: 0,
            cpu: None,
            node: 0,
        };
        let mut net =
            KernelNet::new(placement, vec![], Limits::default(), Claims::default()).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        nix::sys::socket::setsockopt(&client, nix::sys::socket::sockopt::RcvBuf, &4096usize)
            .unwrap();
        let (server, remote) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let local = server.local_addr().unwrap();
        let conn = Conn::new(
            TcpStream::from_std(server),
            local,
            remote,
            64 << 10,
            256 << 10,
        );
        let h = net.insert(conn).unwrap();
        let chunk = vec![7u8; 64 << 10];
        for _ in 0..1000 {
            match net.send(h, &chunk) {
                Ok(_) => {}
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(net.send_space(h), Ok(0), "the send buffer holds bytes");
        net.close(h).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        net.write_ready(h.index());
        net.sweep_closing(Instant::now());
        assert_eq!(net.open_connections(), 1, "within FIN_WAIT: kept");
        net.sweep_closing(Instant::now() + crate::conn::FIN_WAIT);
        assert_eq!(net.open_connections(), 0, "reset once FIN_WAIT passed");
        assert_eq!((net.stats.resets_out, net.stats.resets_timed_out), (1, 1));
        drop(client);
    }

    fn placed_net(limits: Limits) -> KernelNet {
        net_of_core(0, limits)
    }

    /// The net of core `queue`.
    fn net_of_core(queue: u32, limits: Limits) -> KernelNet {
        let placement = Placement {
            queue,
            cpu: None,
            node: 0,
        };
        KernelNet::new(placement, vec![], limits, Claims::default()).unwrap()
    }

    /// The first connection of each of two cores takes the same slot; the
    /// cores' indices keep their handles apart: neither acts on the
    /// other's handle (the bytes would have gone to its own peer).
    #[test]
    fn a_core_refuses_another_core_s_handle() {
        let (mut core0, mut core1) = (
            net_of_core(0, Limits::default()),
            net_of_core(1, Limits::default()),
        );
        let (h0, _c0) = accepted(&mut core0);
        let (h1, _c1) = accepted(&mut core1);
        assert_eq!(h0.index(), h1.index());
        assert_ne!(h0, h1);
        assert_eq!(core1.send(h0, b"x"), Err(Error::InvalidHandle));
        assert_eq!(core0.abort(h1), Err(Error::InvalidHandle));
        assert_eq!(core0.send(h0, b"x"), Ok(1));
    }

    /// A core and a free port on the loopback address.
    fn loopback_core() -> (KernelCore, u16) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let placement = Placement {
            queue: 0,
            cpu: None,
            node: 0,
        };
        let ip = IpAddr::from([127, 0, 0, 1]);
        (
            KernelCore::new(placement, vec![ip], Limits::default()).unwrap(),
            port,
        )
    }

    /// Takes nothing but its connections.
    struct Nop;

    impl ConnHandler for Nop {
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    }

    /// A core listens on a port once: a second listener there would be a
    /// second `SO_REUSEPORT` socket, and the kernel would split the port's
    /// connections between the two handlers (the stack and queue-pair
    /// mode refuse it likewise).
    #[test]
    fn a_core_listens_on_a_port_once() {
        use flowlane_app::SetupExt;
        let (mut core, port) = loopback_core();
        let h = core.listen(port, Nop).unwrap();
        assert_eq!(core.listen(port, Nop).map(drop), Err(Error::AddrInUse));
        assert_eq!(core.listen_with(port, h), Err(Error::AddrInUse));
        assert_eq!(core.net.listeners.len(), 1);
    }

    /// A port a kernel socket holds is refused, the library's words naming
    /// what gives the port (the handler's listen), not a program's flag
    /// (`flowlane`'s services say `--port`: `service_args::cli_terms`).
    #[test]
    fn a_port_in_use_names_the_listen_not_a_flag() {
        use flowlane_app::SetupExt;
        let (mut core, port) = loopback_core();
        let _taken = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        assert_eq!(core.listen(port, Nop).map(drop), Err(Error::AddrInUse));
        let why = core.listen_failure().unwrap();
        assert!(
            why.contains("choose another port (SetupExt::listen) or stop it")
                && !why.contains("--"),
            "{why}"
        );
    }

    /// A listener's accept takes [`ACCEPTS_PER_PASS`] connections at
    /// most, the rest at the next pass: a flood of connections does not
    /// hold the core's loop.
    #[test]
    fn an_accept_takes_a_bounded_number_per_pass() {
        use flowlane_app::SetupExt;
        let (mut core, port) = loopback_core();
        core.listen(port, Nop).unwrap();
        let n = ACCEPTS_PER_PASS + 10;
        let _clients: Vec<_> = (0..n)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        core.net.accept(0);
        assert_eq!(core.net.open_connections(), ACCEPTS_PER_PASS);
        assert!(
            core.net.more_to_do(),
            "the next pass takes the rest at once"
        );
        core.net.retry_accepts();
        assert_eq!(core.net.open_connections(), n);
        assert!(!core.net.more_to_do());
    }

    /// A handler id the core's dispatcher never issued (another core's) is
    /// refused before anything listens: no listener whose first accept
    /// would find no handler.
    #[test]
    fn listening_for_another_core_s_handler_is_refused() {
        let (mut core, port) = loopback_core();
        let mut other = Dispatcher::new();
        other.add(Nop);
        let foreign = other.add(Nop);
        core.app.add(Nop);
        assert_eq!(core.listen_with(port, foreign), Err(Error::InvalidHandle));
        assert!(core.net.listeners.is_empty());
    }

    /// After a close or a shutdown, nothing can be written: no `Writable`
    /// is promised or queued, not even the one the last (short) send asked
    /// for, once the peer read everything and the socket has room again.
    #[test]
    fn no_writable_after_a_close_or_a_shutdown() {
        use std::io::Read;
        for close in [true, false] {
            let mut net = placed_net(Limits::default());
            let (h, mut client) = accepted(&mut net);
            let chunk = vec![7u8; 64 << 10];
            while net.send(h, &chunk) == Ok(chunk.len()) {}
            assert_eq!(net.send_space(h), Ok(0));
            if close {
                net.close(h).unwrap();
            } else {
                net.shutdown_write(h).unwrap();
            }
            assert!(!net.want_writable(h), "close {close}");
            client
                .set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            let mut buf = vec![0u8; 1 << 16];
            for _ in 0..1000 {
                net.write_ready(h.index());
                if matches!(client.read(&mut buf), Ok(0)) {
                    break;
                }
            }
            net.write_ready(h.index());
            assert_eq!(net.send_space(h).map(|n| n > 0), Ok(true), "drained");
            assert!(
                !net.events.iter().any(|e| matches!(e, Event::Writable(_))),
                "close {close}: {:?}",
                net.events
            );
        }
    }

    /// An accepted connection in `net`, and its peer.
    fn accepted(net: &mut KernelNet) -> (ConnHandle, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, remote) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let local = server.local_addr().unwrap();
        let (rx, tx) = (net.limits.rx_buffer, net.limits.tx_buffer);
        let conn = Conn::new(TcpStream::from_std(server), local, remote, rx, tx);
        (net.insert(conn).unwrap(), client)
    }

    /// A connection shut down for writing, then closed, behind a peer that
    /// never sends its FIN: it ends once `FIN_WAIT` passed since the close
    /// (its FIN went before: the wait was never started, and it was kept
    /// for good, `Closed` never told), a `Timeout` as the stack's
    /// FIN-WAIT-2 timer ends one (not `Normal`: the peer never closed).
    #[test]
    fn a_close_after_a_shutdown_ends_without_the_peer_s_fin() {
        let mut net = placed_net(Limits::default());
        let (h, client) = accepted(&mut net);
        net.shutdown_write(h).unwrap();
        net.close(h).unwrap();
        net.sweep_closing(Instant::now());
        assert_eq!(net.open_connections(), 1, "within FIN_WAIT: kept");
        net.sweep_closing(Instant::now() + crate::conn::FIN_WAIT + Duration::from_secs(1));
        assert_eq!(net.open_connections(), 0);
        let closed: Vec<_> = net
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Closed { conn, reason } if *conn == h => Some(*reason),
                _ => None,
            })
            .collect();
        assert_eq!(closed, [CloseReason::Timeout]);
        assert_eq!(net.stats.resets_out, 0, "the kernel finishes it");
        drop(client);
    }

    /// An aborted connection whose figures its handler asked for before
    /// has them in its `on_closed` (read as it ended, before the reset),
    /// and no longer once its `Closed` was dispatched; one whose figures
    /// were never asked has none (`InvalidHandle`), no question asked of
    /// the kernel for it.
    #[test]
    fn an_aborted_connection_s_figures_stay_for_its_on_closed_if_asked() {
        use std::io::Write;
        let mut net = placed_net(Limits::default());
        let (asked, mut peer) = accepted(&mut net);
        let (unasked, _other) = accepted(&mut net);
        peer.write_all(b"unread").unwrap();
        let before = net.info(asked).expect("the kernel's figures");
        std::thread::sleep(Duration::from_millis(20));
        net.abort(asked).unwrap();
        net.abort(unasked).unwrap();
        let last = net.info(asked).expect("kept for on_closed");
        assert_eq!(last.readable, 6, "the peer's bytes, unread: {last:?}");
        assert_eq!((last.mss, last.cwnd), (before.mss, before.cwnd));
        assert_eq!(net.info(unasked), Err(Error::InvalidHandle));
        assert_eq!(net.closed_info.len(), 1, "none kept for the other");
        net.release(asked);
        assert_eq!(net.info(asked), Err(Error::InvalidHandle));
        assert!(net.closed_info.is_empty());
    }

    /// A listener whose accept queue is full, so that a connect to it
    /// stays in SYN-SENT, and the connections that fill it.
    fn full_listener() -> (std::net::TcpListener, Vec<std::net::TcpStream>) {
        use nix::sys::socket::{
            bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, SockaddrIn,
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrIn::new(127, 0, 0, 1, 0),
        )
        .unwrap();
        listen(&fd, Backlog::new(0).unwrap()).unwrap();
        let listener = std::net::TcpListener::from(fd);
        let addr = listener.local_addr().unwrap();
        let queued: Vec<_> = (0..2)
            .filter_map(|_| {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()
            })
            .collect();
        (listener, queued)
    }

    /// An active open closed before its handshake completed goes at once,
    /// a normal close (as flowlane's stack in SYN-SENT), not a reset the
    /// peer never sent (a shutdown in SYN-SENT aborts Linux's connect).
    #[test]
    fn a_close_while_connecting_is_a_normal_close_at_once() {
        let (listener, _queued) = full_listener();
        let addr = listener.local_addr().unwrap();
        let mut net = placed_net(Limits::default());
        let h = net.connect(addr).unwrap();
        assert_eq!(net.state(h), Ok(flowlane_app::State::SynSent));
        assert_kernel_in_syn_sent(&net, h);
        net.close(h).unwrap();
        assert!(net.events.iter().any(
            |e| matches!(e, Event::Closed { conn, reason: CloseReason::Normal } if *conn == h)
        ));
        assert_eq!(net.stats.resets_in, 0);
        assert_eq!(net.open_connections(), 0);
    }

    /// An abort in SYN-SENT sends no RST (Linux's close of a connect under
    /// way only forgets it, `tcp_disconnect`; flowlane's stack resets only
    /// a synchronized connection): none is counted.
    #[test]
    fn an_abort_while_connecting_counts_no_reset() {
        let (listener, _queued) = full_listener();
        let mut net = placed_net(Limits::default());
        let h = net.connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(net.state(h), Ok(flowlane_app::State::SynSent));
        assert_kernel_in_syn_sent(&net, h);
        net.abort(h).unwrap();
        assert!(net.events.iter().any(
            |e| matches!(e, Event::Closed { conn, reason: CloseReason::Aborted } if *conn == h)
        ));
        assert_eq!((net.stats.resets_out, net.stats.resets_aborted), (0, 0));
    }

    /// That the kernel's socket of `h` has no peer yet: its open is really
    /// under way, not only in the loop's view (the listener's full queue
    /// held the handshake back).
    fn assert_kernel_in_syn_sent(net: &KernelNet, h: ConnHandle) {
        let peer = net.conns.get(h).unwrap().stream.peer_addr();
        assert_eq!(
            peer.map_err(|e| e.kind()),
            Err(ErrorKind::NotConnected),
            "the kernel completed the handshake: the test tests nothing"
        );
    }

    /// An active open whose handshake the kernel completed, the loop not
    /// having seen it yet (no pass ran), and its peer's accepted socket.
    fn connected_unseen(net: &mut KernelNet) -> (ConnHandle, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let h = net.connect(listener.local_addr().unwrap()).unwrap();
        // Accepted once the client's ACK came: the client is established.
        let (peer, _) = listener.accept().unwrap();
        assert_eq!(net.state(h), Ok(flowlane_app::State::SynSent), "stale");
        (h, peer)
    }

    /// A close of an open the kernel completed before the loop saw it is
    /// the close of an established connection (FIN, then the end with the
    /// peer's FIN), not one in SYN-SENT that ends at once and leaves the
    /// kernel to finish a socket the core let go of.
    #[test]
    fn a_close_once_the_kernel_connected_is_an_established_close() {
        use std::io::Read;
        let mut net = placed_net(Limits::default());
        let (h, mut peer) = connected_unseen(&mut net);
        net.close(h).unwrap();
        assert_eq!(net.open_connections(), 1, "{:?}", net.events);
        assert!(net.events.is_empty(), "{:?}", net.events);
        assert_eq!(net.stats.active_opens, 1);
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(peer.read(&mut [0u8; 8]).unwrap(), 0, "our FIN");
        drop(peer);
        std::thread::sleep(Duration::from_millis(50));
        net.read_ready(h.index());
        assert_eq!(net.events.pop_front(), Some(Event::PeerClosed(h)));
        net.peer_closed_dispatched(h);
        assert_eq!(
            net.events.pop_front(),
            Some(Event::Closed {
                conn: h,
                reason: CloseReason::Normal
            })
        );
    }

    /// An abort of an open the kernel completed before the loop saw it
    /// resets an established connection: the RST is sent and counted.
    #[test]
    fn an_abort_once_the_kernel_connected_counts_its_reset() {
        use std::io::Read;
        let mut net = placed_net(Limits::default());
        let (h, mut peer) = connected_unseen(&mut net);
        net.abort(h).unwrap();
        assert_eq!((net.stats.resets_out, net.stats.resets_aborted), (1, 1));
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let e = peer.read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionReset);
    }

    /// A connection open when the loop lets its connections go (a stop's
    /// linger over) is reset and counted closed: opens add up to closes
    /// and connections open, as on the AF_XDP backend.
    #[test]
    fn a_connection_let_go_at_the_stop_is_counted_closed() {
        let mut net = placed_net(Limits::default());
        let (_h, _peer) = connected_unseen(&mut net);
        assert_eq!(net.open_connections(), 1);
        net.let_go();
        assert_eq!((net.stats.resets_out, net.stats.resets_aborted), (1, 1));
        assert_eq!((net.stats.closed, net.open_connections()), (1, 0));
    }

    /// An open to no address or no port is refused, as the stack refuses
    /// it (Linux would connect to this host).
    #[test]
    fn a_connect_to_an_unspecified_address_or_port_is_refused() {
        let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut net = placed_net(Limits::default());
        for to in [
            SocketAddr::from(([0, 0, 0, 0], port)),
            SocketAddr::from(([127, 0, 0, 1], 0)),
            SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
            "[::ffff:0.0.0.0]:80".parse().unwrap(),
        ] {
            assert_eq!(net.connect(to), Err(Error::InvalidAddress), "{to}");
        }
        assert_eq!(net.open_connections(), 0);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            listener.accept().map(drop).map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock),
            "a connection reached this host"
        );
    }

    /// An open the kernel finds no route for is, as on the stack (whose
    /// SYN a router would answer "network unreachable"), a connection that
    /// ends `Unreachable(Network)`: the handle comes back, no socket is
    /// kept, no reset counted. In a network namespace of the test's own
    /// thread, with only `lo` (down): root only.
    #[test]
    fn an_open_with_no_route_ends_as_the_stack_s_would() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: a network namespace of its own needs root");
            return;
        }
        std::thread::spawn(|| {
            // This thread alone (and what it opens) lives there; the
            // namespace goes with it.
            if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                eprintln!("skipped: no network namespace: {e}");
                return;
            }
            let mut net = placed_net(Limits::default());
            let h = net.connect("192.0.2.1:80".parse().unwrap());
            let h = h.expect("an open the stack would take");
            assert_eq!(net.open_connections(), 0, "no socket kept");
            assert_eq!(
                Vec::from(net.events.clone()),
                [Event::Closed {
                    conn: h,
                    reason: CloseReason::Unreachable(flowlane_tcp::Unreachable::Network)
                }]
            );
            assert_eq!((net.stats.resets_in, net.stats.resets_out), (0, 0));
        })
        .join()
        .unwrap();
    }

    /// Buffers of no bytes are refused at the core's start in one line:
    /// nothing could be read, or `Writable` would never come.
    #[test]
    fn limits_of_empty_buffers_are_refused() {
        for limits in [
            Limits {
                rx_buffer: 0,
                ..Limits::default()
            },
            Limits {
                tx_buffer: 0,
                ..Limits::default()
            },
        ] {
            let e = placed_core(limits.clone()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{limits:?}");
            assert!(e.to_string().contains("at least one byte"), "{e}");
        }
        assert!(placed_core(Limits {
            rx_buffer: 1,
            tx_buffer: 1,
            ..Limits::default()
        })
        .is_ok());
    }

    fn placed_core(limits: Limits) -> std::io::Result<KernelCore> {
        let placement = Placement {
            queue: 0,
            cpu: None,
            node: 0,
        };
        KernelCore::new(placement, vec![], limits)
    }

    /// A connect the table has no slot for fails before its SYN goes: the
    /// peer never sees a connection that nobody holds.
    #[test]
    fn a_connect_past_the_bound_sends_no_syn() {
        let mut net = placed_net(Limits {
            max_connections: 1,
            ..Limits::default()
        });
        let (_held, _client) = accepted(&mut net);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let to = listener.local_addr().unwrap();
        assert_eq!(net.connect(to), Err(Error::ConnectionLimit));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            listener.accept().map(drop).map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock),
            "a handshake reached the listener"
        );
    }

    /// A read into an empty buffer reads nothing: `Ok(0)` only at end of
    /// stream (the contract's one meaning of it), `WouldBlock` while bytes
    /// wait.
    #[test]
    fn a_read_into_an_empty_buffer_is_end_of_stream_only_at_the_end() {
        let mut net = placed_net(Limits::default());
        let (h, mut client) = accepted(&mut net);
        client.write_all(b"abc").unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        net.read_ready(h.index());
        assert_eq!(net.peek(h).map(<[u8]>::len), Ok(3));
        assert_eq!(net.recv(h, &mut []), Err(Error::WouldBlock));
        assert_eq!(net.recv(h, &mut [0u8; 8]), Ok(3));
        assert_eq!(net.recv(h, &mut []), Ok(0));
    }

    /// Aborts each connection at its first data; records every callback.
    struct AbortAtData(Arc<std::sync::Mutex<Vec<String>>>);

    impl ConnHandler for AbortAtData {
        fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
            self.0.lock().unwrap().push("data".into());
            net.abort(conn).unwrap();
        }
        fn on_peer_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {
            self.0.lock().unwrap().push("peer closed".into());
        }
        fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, reason: CloseReason) {
            self.0.lock().unwrap().push(format!("closed {reason:?}"));
        }
    }

    /// The peer's close, read with its data and queued behind it, is not
    /// dispatched once the handler aborted the connection at the data:
    /// `on_closed` is the only callback that follows an abort.
    #[test]
    fn nothing_but_on_closed_follows_an_abort() {
        let placement = Placement {
            queue: 0,
            cpu: None,
            node: 0,
        };
        let mut core = KernelCore::new(placement, vec![], Limits::default()).unwrap();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let handler = core.app.add(AbortAtData(log.clone()));
        let listener = ListenerId::from_index(0);
        core.app.bind_listener(listener, handler).unwrap();
        let (h, mut client) = accepted(&mut core.net);
        core.net
            .events
            .push_back(Event::Accepted { conn: h, listener });
        client.write_all(b"x").unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        core.net.read_ready(h.index());
        core.dispatch();
        assert_eq!(*log.lock().unwrap(), ["data", "closed Aborted"]);
    }

    /// The core's one receive buffer, given back by a connection whose
    /// socket holds more, goes to the connection that waited for it
    /// (oldest first), not back to the one that gave it: that one's own
    /// read, queued as it gave the buffer back (or an edge of its socket),
    /// waits behind the waiter, whatever the order of the reads.
    #[test]
    fn a_buffer_given_back_goes_to_the_oldest_waiter() {
        for event_first in [false, true] {
            let mut net = placed_net(Limits {
                rx_buffer: 4096,
                rx_memory: 4096,
                ..Limits::default()
            });
            let (flooded, mut fc) = accepted(&mut net);
            fc.write_all(&vec![1u8; 64 << 10]).unwrap();
            let (waiter, mut wc) = accepted(&mut net);
            wc.write_all(b"ping").unwrap();
            std::thread::sleep(Duration::from_millis(20));
            net.read_ready(flooded.index());
            assert_eq!(net.peek(flooded).map(<[u8]>::len), Ok(4096));
            net.read_ready(waiter.index());
            assert_eq!(net.peek(waiter), Ok(&b""[..]), "no buffer left");
            // The handler reads the flooded connection's buffer (its
            // socket holds more: read again next pass); the dispatch's end
            // hands the buffer to the waiter.
            net.discard(flooded);
            net.wake_memory_waiters();
            if event_first {
                // An edge of the flooded socket before the pass's reads.
                net.read_ready(flooded.index());
            }
            for index in std::mem::take(&mut net.rereads) {
                net.read_ready(index);
            }
            assert_eq!(
                net.peek(waiter),
                Ok(&b"ping"[..]),
                "event first: {event_first}"
            );
            assert_eq!(net.peek(flooded), Ok(&b""[..]), "it waits its turn");
            // Its turn comes with the next buffer given back.
            net.discard(waiter);
            net.wake_memory_waiters();
            for index in std::mem::take(&mut net.rereads) {
                net.read_ready(index);
            }
            assert_eq!(net.peek(flooded).map(<[u8]>::len), Ok(4096));
        }
    }

    /// A connection that waited for receive memory and ended leaves the
    /// waiters' queue: churn under an exhausted budget does not grow it.
    #[test]
    fn ended_memory_waiters_leave_the_queue() {
        let mut net = placed_net(Limits {
            rx_buffer: 4096,
            rx_memory: 4096,
            ..Limits::default()
        });
        // One connection holds the only buffer.
        let (holder, mut hc) = accepted(&mut net);
        hc.write_all(b"held").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        net.read_ready(holder.index());
        assert_eq!(net.peek(holder).map(<[u8]>::len), Ok(4));
        for _ in 0..50 {
            let (h, mut c) = accepted(&mut net);
            c.write_all(b"x").unwrap();
            std::thread::sleep(Duration::from_millis(2));
            net.read_ready(h.index());
            net.abort(h).unwrap();
            while let Some(e) = net.events.pop_front() {
                if let Event::Closed { conn, .. } = e {
                    net.release(conn);
                }
            }
            assert!(
                net.memory_waiters.len() <= 1,
                "{}",
                net.memory_waiters.len()
            );
        }
        drop(hc);
    }
}
