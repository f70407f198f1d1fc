//! The network core's side: a [`ConnHandler`] that carries every event of
//! its connections to the application thread that owns them, and carries
//! out that thread's requests.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use flowlane_app::{
    AtStop, CloseReason, ConnHandle, ConnHandler, ConnMap, ConnState, Error, Net, Placement,
    SynFilter, Wake,
};
use flowlane_tcp::kept::{Kept, TRIM_FLOOR_BYTES};

use crate::heartbeat::{coarse_now, Heartbeat};
use crate::memory::{Charge, CoreMemory, Way};
use crate::message::{message_cost, ConnectAnswer, ToApp, ToCore, BUF, RX_CREDIT, SMALL_DATA};

/// Requests a core takes per pass (the rest wait for the next).
const REQUESTS_PER_PASS: usize = 1024;
/// Receive buffers a core keeps for reuse at most (4 MiB: the full
/// credits of 16 connections): those given back past it are freed, so
/// that a burst of many connections (a thousand peers that do not read
/// hold the core's whole receive memory) does not leave its buffers held
/// for good.
const POOL: usize = 64;
/// Receive buffers a trim keeps whatever lay idle: the stack's chunk
/// pool's floor (256 KiB), so that an idle core's next few connections
/// take buffers without asking the allocator.
const POOL_FLOOR: usize = TRIM_FLOOR_BYTES / BUF;
/// How often a relay trims its pool (on its core's clock, [`Net::now`]):
/// half of the buffers no connection took since the last trim go back to
/// the allocator ([`Kept::trim`], the stack's chunk pool's policy, at the
/// cadence the dataplane's workers trim their stacks).
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(1);
/// Sends a connection's queue keeps room for once drained (a burst of
/// small sends queued thousands: 24 bytes each, given back).
const TX_QUEUE_KEPT: usize = 8;
/// The least credit a connection's data moves with (see `Relay::pull`).
const PULL_MIN: usize = RX_CREDIT / 4;

/// Where a waker is published once, for the other side to call: an
/// application thread's (`AppPort::set_notify`, `AppPort::set_on_stall`).
pub(crate) type WakeSlot = Arc<OnceLock<Arc<dyn Wake>>>;

/// A network core whose loop started, as its relay's `on_start` found it:
/// its waker, and where it runs as its backend says ([`Net::placement`]),
/// which is what the application threads report for its connections
/// (`QueuePairConfig::cores` may say otherwise).
pub(crate) struct CoreUp {
    pub(crate) waker: Arc<dyn Wake>,
    pub(crate) placement: Placement,
}

/// Where a core's relay publishes [`CoreUp`] for the application threads,
/// once its loop has started.
pub(crate) type CoreSlot = Arc<OnceLock<CoreUp>>;

/// Publishes in `slot` a core started at `placement` whose waker does
/// nothing, as its relay's `on_start` would.
#[cfg(test)]
pub(crate) fn start_core(slot: &CoreSlot, placement: Placement) {
    let _ = slot.set(CoreUp {
        waker: Arc::new(NoWake),
        placement,
    });
}

/// The waker of a core whose backend gives none (its loop passes often
/// enough on its own).
struct NoWake;

impl Wake for NoWake {
    fn wake(&self) {}
}

/// One connection as the core relays it.
#[derive(Debug)]
struct Relayed {
    thread: u32,
    /// Bytes handed to the thread and not seen read yet (with the cost of
    /// the small messages it has not taken yet, [`message_cost`]): at most
    /// [`RX_CREDIT`], held against the core's receive memory.
    rx: Charge,
    /// Bytes to send, in order; `tx_off` into the first.
    tx: VecDeque<Vec<u8>>,
    tx_off: usize,
    /// The bytes of `tx` not sent yet, held against the core's send
    /// memory.
    tx_charge: Charge,
    /// Bytes the stack has taken.
    taken: u64,
    close_after: bool,
    shut_after: bool,
    peer_closed: bool,
    peer_closed_sent: bool,
    /// Waiting for receive memory (in the relay's `rx_waiting`).
    rx_waiting: bool,
    /// The thread asked for the connection's figures: they go with its
    /// `PeerClosed`.
    info_asked: bool,
}

impl Relayed {
    /// Bytes the application thread can take now (less the cost of the
    /// small messages it has not taken yet).
    fn credit(&self) -> usize {
        RX_CREDIT - self.rx.bytes()
    }

    /// Holds its bytes against core `core`'s memory (it moved there).
    fn move_to(&mut self, core: u32) {
        self.rx.move_to(core);
        self.tx_charge.move_to(core);
    }
}

/// What a relay hands on with a connection that moves to another core
/// with its RSS bucket (the relay's `on_export`, the new core's
/// `on_import`).
enum Exported {
    /// An open connection: its relay state, and its name on the old core.
    Open {
        from: u32,
        old: ConnHandle,
        relayed: Relayed,
    },
    /// An active open under way (the thread knows it by its token only).
    Opening { thread: u32, token: u64 },
}

/// The application threads' event queues, as a core sends to them.
#[derive(Clone)]
pub(crate) struct Mailboxes {
    /// One sender per application thread.
    pub(crate) events: Vec<Sender<(u32, ToApp)>>,
    /// Per thread: what it asked to be called after events were queued
    /// for it, if it does not wait on the queue itself (an async
    /// runtime's loop). Wakes that come before it looked collapse.
    pub(crate) notify: Vec<WakeSlot>,
    /// Per thread: what it asked to be called, on the core's own thread,
    /// when a core resets its connections because it stalled (or died):
    /// the thread cannot tell its connections' users itself then.
    pub(crate) stalled: Vec<WakeSlot>,
    /// Per thread: the cores' answers to its connects, which it waits
    /// for (`QpNet::connect`).
    pub(crate) answers: Vec<Sender<ConnectAnswer>>,
}

impl Mailboxes {
    /// Queues `m` from core `core` for `thread`, and wakes the thread.
    fn tell(&self, core: u32, thread: u32, m: ToApp) {
        // A thread that is gone has nothing left to hear.
        if self.events[thread as usize].send((core, m)).is_ok() {
            if let Some(w) = self.notify[thread as usize].get() {
                w.wake();
            }
        }
    }
}

/// The relay of one network core.
pub(crate) struct Relay {
    ports: Arc<Vec<u16>>,
    /// The owner thread's SYN filter for each of `ports`: the core's
    /// backend applies it (at the SYN on flowlane's TCP).
    filters: Vec<Option<SynFilter>>,
    threads: Mailboxes,
    core: u32,
    /// The application thread that gets this core's accepted connections.
    owner: u32,
    requests: Receiver<Vec<ToCore>>,
    up: CoreSlot,
    conns: ConnMap<Relayed>,
    connecting: ConnMap<(u32, u64)>,
    /// Connections that moved to another core, by their handle here, with
    /// their thread: its requests for them are bounced until it settles.
    /// (A map by hash, not by slot: the slot may serve a new connection,
    /// which may move too, before the thread settles the first.)
    moved: HashMap<ConnHandle, u32>,
    /// Receive buffers ([`BUF`]) kept for reuse, at most [`POOL`], what
    /// lay idle trimmed each [`TRIM_EVERY`].
    pool: Kept<Vec<u8>>,
    /// When (the core's clock) the pool was last trimmed.
    last_trim: Duration,
    /// Per application thread: cleared when it ends (a panic included).
    alive: Vec<Arc<AtomicBool>>,
    beats: Vec<Heartbeat>,
    stall_after: Duration,
    /// Every core's memory budgets (this core's at `core`): a send's
    /// bytes are charged where the thread took them, and move here.
    memory: Arc<Vec<CoreMemory>>,
    /// Connections with bytes to hand over that wait for receive memory,
    /// in the order they began to wait (entries of connections gone or
    /// served since are skipped).
    rx_waiting: VecDeque<ConnHandle>,
    /// The threads this relay found dead (their connections are gone).
    dead: Vec<bool>,
    /// The threads this relay found ended for good (not only stalled):
    /// they will never settle their moves, which are forgotten then.
    ended: Vec<bool>,
    /// The threads told that the service is stopping ([`ToApp::Stopping`]).
    stop_told: Vec<bool>,
    counts: Arc<RelayCounts>,
}

/// What the relays of a service count, together.
#[derive(Debug, Default)]
pub(crate) struct RelayCounts {
    /// Connections reset because their thread died, or accepted for a
    /// dead thread.
    pub(crate) orphaned: AtomicU64,
    /// Connections that arrived with a moved RSS bucket.
    pub(crate) moved_in: AtomicU64,
    /// Requests that reached a connection's old core after it moved, given
    /// back to the thread to send again.
    pub(crate) bounced: AtomicU64,
}

/// What the relays of a service share about its application threads.
#[derive(Clone)]
pub(crate) struct Threads {
    pub(crate) mailboxes: Mailboxes,
    pub(crate) alive: Vec<Arc<AtomicBool>>,
    /// Per thread: when it last showed progress (a pass ended, or a
    /// handler's call began).
    pub(crate) beats: Vec<Heartbeat>,
    pub(crate) stall_after: Duration,
    pub(crate) counts: Arc<RelayCounts>,
    /// Every core's memory budgets.
    pub(crate) memory: Arc<Vec<CoreMemory>>,
}

impl Relay {
    pub(crate) fn new(
        core: u32,
        owner: u32,
        ports: Arc<Vec<u16>>,
        filters: Vec<Option<SynFilter>>,
        threads: Threads,
        requests: Receiver<Vec<ToCore>>,
        up: CoreSlot,
    ) -> Relay {
        let n = threads.mailboxes.events.len();
        Relay {
            ports,
            filters,
            threads: threads.mailboxes,
            alive: threads.alive,
            beats: threads.beats,
            stall_after: threads.stall_after,
            memory: threads.memory,
            rx_waiting: VecDeque::new(),
            dead: vec![false; n],
            ended: vec![false; n],
            stop_told: vec![false; n],
            counts: threads.counts,
            core,
            owner,
            requests,
            up,
            conns: ConnMap::new(),
            connecting: ConnMap::new(),
            moved: HashMap::new(),
            pool: Kept::new(),
            last_trim: Duration::ZERO,
        }
    }

    /// Keeps receive buffer `buf` for reuse, or frees it when the pool
    /// holds [`POOL`] (not counted as returned: while the core is that
    /// busy its next buffers reuse the memory at once, and a heap trim
    /// made for it would only put off the one after the spell).
    fn keep(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL {
            self.pool.push(buf);
        }
    }

    /// Gives back half of the pool's buffers that no connection took since
    /// the last trim, past [`POOL_FLOOR`] (counted), if [`TRIM_EVERY`]
    /// passed since the last.
    fn trim_due(&mut self, now: Duration) {
        if now.saturating_sub(self.last_trim) < TRIM_EVERY {
            return;
        }
        self.last_trim = now;
        let memory = &self.memory[self.core as usize];
        memory.returned(self.pool.trim(POOL_FLOOR) * BUF);
        memory.set_pool_cached(self.pool.len() * BUF);
    }

    fn tell(&self, thread: u32, m: ToApp) {
        self.threads.tell(self.core, thread, m);
    }

    /// Answers `thread`'s connect `token` at once ([`ConnectAnswer`]).
    fn answer(&self, thread: u32, token: u64, result: Result<(), Error>) {
        // A thread that is gone waits for nothing.
        let _ = self.threads.answers[thread as usize].send((self.core, token, result));
    }

    /// An active open of a thread this core found dead (or stalled):
    /// aborted if it exists (`conn`), counted, and told as failed (a thread
    /// back from a stall hears of it).
    fn refuse_opening(
        &mut self,
        net: &mut dyn Net,
        conn: Option<ConnHandle>,
        thread: u32,
        token: u64,
    ) {
        self.counts.orphaned.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = conn {
            let _ = net.abort(c);
        }
        let reason = CloseReason::Aborted;
        self.tell(thread, ToApp::ConnectFailed { token, reason });
    }

    /// Sends a message of data to `thread`; one of under half a pool
    /// buffer goes in a buffer of its own size: memory follows the bytes
    /// the credit and the core's receive memory bound (twice them at most;
    /// and the message's cost, which [`Relay::pull`] charged), not the
    /// number of messages. One of under
    /// [`SMALL_DATA`](crate::message::SMALL_DATA) bytes (which the thread
    /// appends to the buffer it holds) is copied and the pool keeps the
    /// 64 KiB buffer; a larger one keeps its buffer, shrunk in place (the
    /// allocator splits the block: nothing is copied, where a copy of up
    /// to 32 KiB per message cost the core more than the allocation of
    /// the pool's next buffer).
    fn deliver(&mut self, thread: u32, conn: ConnHandle, mut bytes: Vec<u8>) {
        if bytes.len() < SMALL_DATA {
            let exact = bytes.as_slice().to_vec();
            self.keep(bytes);
            bytes = exact;
        } else if bytes.len() < BUF / 2 {
            bytes.shrink_to_fit();
        }
        self.tell(thread, ToApp::Data { conn, bytes });
    }

    fn insert(&mut self, conn: ConnHandle, thread: u32) {
        let charge = |way| Charge::none(self.memory.clone(), self.core, way);
        let (rx, tx_charge) = (charge(Way::Rx), charge(Way::Tx));
        self.conns.insert(
            conn,
            Relayed {
                thread,
                rx,
                tx: VecDeque::new(),
                tx_off: 0,
                tx_charge,
                taken: 0,
                close_after: false,
                shut_after: false,
                peer_closed: false,
                peer_closed_sent: false,
                rx_waiting: false,
                info_asked: false,
            },
        );
    }

    /// Hands the thread what the stack holds for `conn`, as far as its
    /// credit and the core's receive memory go; then the peer's close,
    /// once everything before it went.
    /// Data moves only when the credit is at least [`PULL_MIN`]:
    /// reads returned a few bytes at a time must not turn into messages of
    /// a few bytes each (the receive side's silly-window syndrome, RFC
    /// 9293 §3.8.6.2.2, between a core and its thread). A peer that sends
    /// one-byte segments, each its own event, still makes a message each:
    /// [`Relay::deliver`] sizes their buffers to their bytes, the thread
    /// appends them to the buffer it holds (`QpNet`), and each costs the
    /// credit its place in the queue too ([`message_cost`], given back as
    /// the thread takes it), so that what waits in the queue for one
    /// connection is bounded in messages as well as bytes: while its
    /// thread takes none, a few hundred, and the bytes behind them stay in
    /// the stack, to go together in the next message. Nothing
    /// moves once the thread closed the connection: bytes after its close
    /// stay in the stack, whose close then finds them unread and resets
    /// (the close waits for the thread's last sends, [`Relay::push`]).
    ///
    /// What every connection of the core holds together stays within the
    /// core's receive memory ([`crate::memory::RX_MEMORY`]): a connection
    /// its credit would let take [`PULL_MIN`] more that finds less free
    /// (or others waiting before it) waits, counted, its bytes left in the
    /// stack (whose window closes), and takes its turn as memory is given
    /// back, in the order the connections began to wait
    /// ([`Relay::grant`]).
    fn pull(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pull_as(net, conn, false);
    }

    /// [`Relay::pull`]; `turn`: `conn`'s turn for receive memory came
    /// (else it waits behind the connections waiting for it).
    fn pull_as(&mut self, net: &mut dyn Net, conn: ConnHandle, turn: bool) {
        let Some(r) = self.conns.get_mut(conn) else {
            return;
        };
        let thread = r.thread;
        let behind = !turn && (r.rx_waiting || !self.rx_waiting.is_empty());
        // What the credit and the core's memory let it take now.
        let avail = |r: &Relayed| {
            let free = if behind { 0 } else { r.rx.room() };
            r.credit().min(free)
        };
        // One buffer gathers as many contiguous pieces as fit (on AF_XDP a
        // piece is often one segment's payload, kept in its frame).
        let mut buf: Option<Vec<u8>> = None;
        while !r.close_after && (avail(r) >= PULL_MIN || (buf.is_some() && avail(r) > 0)) {
            let Ok(data) = net.peek(conn) else { break };
            if data.is_empty() {
                break;
            }
            let b = buf.get_or_insert_with(|| {
                let mut b = self.pool.pop().unwrap_or_else(|| Vec::with_capacity(BUF));
                b.clear();
                b
            });
            let n = data.len().min(avail(r)).min(BUF - b.len());
            b.extend_from_slice(&data[..n]);
            let _ = net.consume(conn, n);
            let took = r.rx.take(n);
            debug_assert_eq!(took, n, "within the room seen");
            if b.len() == BUF {
                let bytes = buf.take().expect("filled");
                self.threads
                    .tell(self.core, thread, ToApp::Data { conn, bytes });
            }
        }
        if let Some(bytes) = buf {
            // A buffer begins with `PULL_MIN` of credit and of memory at
            // least, so a small one leaves far more than its cost.
            let cost = message_cost(bytes.len());
            let took = r.rx.take(cost);
            debug_assert_eq!(took, cost);
            self.deliver(thread, conn, bytes);
        }
        let Some(r) = self.conns.get_mut(conn) else {
            return;
        };
        // Bytes left in the stack that the credit would take and the
        // memory does not: it waits for its turn.
        if !r.close_after
            && !r.rx_waiting
            && r.credit() >= PULL_MIN
            && (behind || r.rx.room() < PULL_MIN)
            && net.peek(conn).is_ok_and(|d| !d.is_empty())
        {
            r.rx_waiting = true;
            r.rx.waited();
            self.rx_waiting.push_back(conn);
        }
        // Everything before the peer's FIN went (a connection this core
        // closed already reads as gone, not as at end of stream).
        if r.peer_closed && !r.peer_closed_sent && net.peek(conn).map_or(true, <[u8]>::is_empty) {
            r.peer_closed_sent = true;
            let info = if r.info_asked {
                net.info(conn).ok()
            } else {
                None
            };
            self.tell(thread, ToApp::PeerClosed { conn, info });
        }
    }

    /// Receive memory given back goes to the connections waiting for it,
    /// in the order they began to wait, while [`PULL_MIN`] of it is free
    /// (entries of connections gone, moved or served since are skipped).
    fn grant(&mut self, net: &mut dyn Net) {
        while self.memory[self.core as usize].rx.room() >= PULL_MIN {
            let Some(conn) = self.rx_waiting.pop_front() else {
                break;
            };
            let Some(r) = self.conns.get_mut(conn) else {
                continue;
            };
            if !std::mem::take(&mut r.rx_waiting) {
                continue;
            }
            self.pull_as(net, conn, true);
        }
    }

    /// Gives the stack what the thread asked to send, as far as it takes
    /// it; reports progress; closes once everything went if asked.
    fn push(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some(r) = self.conns.get_mut(conn) else {
            return;
        };
        let before = r.taken;
        while let Some(front) = r.tx.front() {
            match net.send(conn, &front[r.tx_off..]) {
                Ok(n) => {
                    r.tx_off += n;
                    r.taken += n as u64;
                    r.tx_charge.give(n);
                    if r.tx_off < front.len() {
                        net.want_writable(conn);
                        break;
                    }
                    r.tx_off = 0;
                    r.tx.pop_front();
                }
                Err(Error::WouldBlock) => {
                    net.want_writable(conn);
                    break;
                }
                Err(_) => break,
            }
        }
        let (thread, taken, drained) = (r.thread, r.taken, r.tx.is_empty());
        let (close, shut) = (drained && r.close_after, drained && r.shut_after);
        if drained {
            r.shut_after = false;
            if r.tx.capacity() > TX_QUEUE_KEPT {
                // A burst of sends queued many: the room goes back with
                // them, not kept for the connection's life.
                r.tx = VecDeque::new();
            }
        }
        if taken > before {
            self.tell(thread, ToApp::Sent { conn, total: taken });
        }
        if close {
            let _ = net.close(conn);
        } else if shut {
            let _ = net.shutdown_write(conn);
        }
    }

    /// Resets the connections of application threads that died (or
    /// stalled: no pass ended and no handler's call began for
    /// `stall_after`: one stuck in a call, not one busy with many) since
    /// the last pass, counted: nobody serves them, and the core goes on
    /// with the other threads' connections; then calls the thread's stall
    /// hook (`AppPort::set_on_stall`). A stalled thread that passes
    /// again gets new connections again (and hears that its old ones
    /// closed).
    fn bury(&mut self, net: &mut dyn Net) {
        let now = coarse_now();
        for t in 0..self.dead.len() {
            let alive = self.alive[t].load(Ordering::Relaxed);
            let fresh = self.beats[t].fresh(now, self.stall_after);
            if !alive && !self.ended[t] {
                // A thread that died will never settle its moves, whether
                // it was live or stalled until now; one that only stalled
                // may still send to the old names, and its `Settle` clears
                // them (forgotten then, a request of it to an old name
                // would be dropped, not bounced).
                self.ended[t] = true;
                self.moved.retain(|_, thread| *thread as usize != t);
            }
            if self.dead[t] {
                // Back from a stall.
                self.dead[t] = !(alive && fresh);
                continue;
            }
            if alive && fresh {
                continue;
            }
            self.dead[t] = true;
            let conns: Vec<ConnHandle> = self
                .conns
                .iter()
                .filter(|(_, r)| r.thread as usize == t)
                .map(|(c, _)| c)
                .collect();
            let opening: Vec<(ConnHandle, u64)> = self
                .connecting
                .iter()
                .filter(|(_, (thread, _))| *thread as usize == t)
                .map(|(c, &(_, token))| (c, token))
                .collect();
            for c in conns {
                self.conns.remove(c);
                // Counted before the reset goes out.
                self.counts.orphaned.fetch_add(1, Ordering::Relaxed);
                let _ = net.abort(c);
                self.tell(
                    t as u32,
                    ToApp::Closed {
                        conn: c,
                        reason: CloseReason::Aborted,
                    },
                );
            }
            for (c, token) in opening {
                self.connecting.remove(c);
                self.counts.orphaned.fetch_add(1, Ordering::Relaxed);
                let _ = net.abort(c);
                self.tell(
                    t as u32,
                    ToApp::ConnectFailed {
                        token,
                        reason: CloseReason::Aborted,
                    },
                );
            }
            // The thread hears of the resets only once it passes again:
            // what it asked to be called now tells the users of its
            // connections (tasks of another runtime, say) at once.
            if let Some(w) = self.threads.stalled[t].get() {
                w.wake();
            }
        }
    }

    fn request(&mut self, net: &mut dyn Net, mut m: ToCore) {
        if let Some(&mut conn) = m.conn_mut() {
            if let ToCore::Settle { thread, .. } = m {
                self.moved.remove(&conn);
                self.tell(thread, ToApp::Settled { conn });
                return;
            }
            if let Some(&thread) = self.moved.get(&conn) {
                self.counts.bounced.fetch_add(1, Ordering::Relaxed);
                self.tell(thread, ToApp::Bounced { conn, request: m });
                return;
            }
        }
        match m {
            // A thread this core found dead (or stalled) gets no new
            // connection: nobody would serve it.
            // (Its outcome follows as an event: no error now.)
            ToCore::Connect { thread, token, .. } if self.dead[thread as usize] => {
                self.answer(thread, token, Ok(()));
                self.refuse_opening(net, None, thread, token);
            }
            ToCore::Connect {
                thread,
                token,
                remote,
            } => match net.connect(remote) {
                Ok(conn) => {
                    self.connecting.insert(conn, (thread, token));
                    self.answer(thread, token, Ok(()));
                }
                Err(e) => {
                    // The thread waits for the error (`QpNet::connect`
                    // returns it, as the stack's connect in run to
                    // completion); one that gave up waiting ends the
                    // connection at the event.
                    self.answer(thread, token, Err(e));
                    self.tell(
                        thread,
                        ToApp::ConnectFailed {
                            token,
                            reason: CloseReason::Aborted,
                        },
                    );
                }
            },
            ToCore::Send {
                conn,
                bytes,
                charge,
            } => {
                // A connection gone: the charge, dropped, is given back.
                if let Some(r) = self.conns.get_mut(conn) {
                    r.tx_charge.absorb(charge);
                    r.tx.push_back(bytes);
                    self.push(net, conn);
                }
            }
            ToCore::Consumed { conn, bytes } => {
                if let Some(r) = self.conns.get_mut(conn) {
                    r.rx.give(bytes);
                    self.pull(net, conn);
                }
            }
            ToCore::ShutdownWrite { conn } => {
                if let Some(r) = self.conns.get_mut(conn) {
                    r.shut_after = true;
                    self.push(net, conn);
                }
            }
            ToCore::Close { conn } => {
                let Some(r) = self.conns.get_mut(conn) else {
                    return;
                };
                if r.credit() < RX_CREDIT {
                    // Bytes delivered to the thread and not consumed (its
                    // `Consumed` come before its `Close`): on their way to
                    // it when it closed. Unread data: a reset, as the
                    // stack's close sends (the stack no longer has them).
                    let _ = net.abort(conn);
                    return;
                }
                r.close_after = true;
                self.push(net, conn);
            }
            ToCore::Abort { conn } => {
                let _ = net.abort(conn);
            }
            ToCore::SetNodelay { conn, on } => {
                let _ = net.set_nodelay(conn, on);
            }
            ToCore::SetCongestion { conn, alg } => {
                let _ = net.set_congestion(conn, alg);
            }
            ToCore::SetKeepalive { conn, on } => {
                let _ = net.set_keepalive(conn, on);
            }
            ToCore::SetBuffer { conn, send, bytes } => {
                let _ = if send {
                    net.set_send_buffer(conn, bytes)
                } else {
                    net.set_recv_buffer(conn, bytes)
                };
            }
            ToCore::Info { conn } => {
                let Some(r) = self.conns.get_mut(conn) else {
                    return;
                };
                r.info_asked = true;
                let thread = r.thread;
                let info = net.info(conn).ok();
                self.tell(thread, ToApp::Info { conn, info });
            }
            ToCore::Recycle(buf) => {
                // Only the pool's own size: a right-sized one (`deliver`)
                // would grow at its next use.
                if buf.capacity() == BUF {
                    self.keep(buf);
                }
            }
            ToCore::Settle { .. } => unreachable!("answered above"),
        }
    }
}

impl ConnHandler for Relay {
    fn syn_filter(&self, port: u16) -> Option<SynFilter> {
        let i = self.ports.iter().position(|&p| p == port)?;
        self.filters.get(i)?.clone()
    }

    /// Publishes the core's waker and where the core runs (its backend's
    /// placement, whatever `QueuePairConfig::cores` says): its threads'
    /// handlers start then (`QpNet::cores_up`). A backend that gives no
    /// waker gets requests taken at its next pass.
    fn on_start(&mut self, net: &mut dyn Net) {
        let waker = net.waker().unwrap_or_else(|| Arc::new(NoWake));
        let _ = self.up.set(CoreUp {
            waker,
            placement: net.placement(),
        });
    }

    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Ok(tuple) = net.four_tuple(conn) else {
            return;
        };
        let Some(port) = self.ports.iter().position(|&p| p == tuple.local.port()) else {
            let _ = net.abort(conn);
            return;
        };
        if self.dead[self.owner as usize] {
            self.counts.orphaned.fetch_add(1, Ordering::Relaxed);
            let _ = net.abort(conn);
            return;
        }
        self.insert(conn, self.owner);
        self.tell(
            self.owner,
            ToApp::Accepted {
                conn,
                port: port as u32,
                tuple,
            },
        );
    }

    fn on_connected(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some((thread, token)) = self.connecting.remove(conn) else {
            return;
        };
        let Ok(tuple) = net.four_tuple(conn) else {
            return;
        };
        if self.dead[thread as usize] {
            // Its thread died (or stalled) while the SYN was out.
            self.refuse_opening(net, Some(conn), thread, token);
            return;
        }
        self.insert(conn, thread);
        self.tell(thread, ToApp::Connected { token, conn, tuple });
    }

    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pull(net, conn);
    }

    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.push(net, conn);
    }

    /// Told to the thread once it has had every byte before it (with the
    /// connection's figures as of then if the thread ever asked for them,
    /// so that a report at end of stream has them at once); the thread
    /// decides when to close.
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if let Some(r) = self.conns.get_mut(conn) {
            r.peer_closed = true;
        }
        self.pull(net, conn);
    }

    /// The service is stopping: the connection's thread hears it (once)
    /// and its handler decides (`ToApp::Stopping`); the core waits for its
    /// close, or its abort where the handler leaves it to the reset. A
    /// connection whose thread is dead, or still opening, is left to the
    /// reset.
    fn on_stop(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> AtStop {
        let Some(thread) = self.conns.get(conn).map(|r| r.thread) else {
            return AtStop::Reset;
        };
        if self.dead[thread as usize] {
            return AtStop::Reset;
        }
        if !std::mem::replace(&mut self.stop_told[thread as usize], true) {
            self.tell(thread, ToApp::Stopping);
        }
        AtStop::Finish
    }

    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        if let Some((thread, token)) = self.connecting.remove(conn) {
            self.tell(thread, ToApp::ConnectFailed { token, reason });
            return;
        }
        if let Some(r) = self.conns.remove(conn) {
            self.tell(r.thread, ToApp::Closed { conn, reason });
        }
    }

    /// The connection moves to another core with its RSS bucket: its relay
    /// state goes with it, and requests its thread still sends here are
    /// bounced back to it until it settles (`ToCore::Settle`), so that
    /// none is lost or overtaken.
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        if let Some(relayed) = self.conns.remove(conn) {
            self.moved.insert(conn, relayed.thread);
            return Some(Box::new(Exported::Open {
                from: self.core,
                old: conn,
                relayed,
            }));
        }
        let (thread, token) = self.connecting.remove(conn)?;
        Some(Box::new(Exported::Opening { thread, token }))
    }

    /// A connection moved here: its thread learns its new name before
    /// anything else of it from this core, then what its stack holds goes
    /// on as before the move.
    fn on_import(&mut self, net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        let Some(exported) = state.and_then(|s| s.downcast::<Exported>().ok()) else {
            // Not one of ours: nobody would serve it.
            let _ = net.abort(conn);
            return;
        };
        match *exported {
            Exported::Opening { thread, token } if self.dead[thread as usize] => {
                self.refuse_opening(net, Some(conn), thread, token);
            }
            Exported::Opening { thread, token } => {
                self.connecting.insert(conn, (thread, token));
            }
            Exported::Open { from, old, relayed } => {
                self.counts.moved_in.fetch_add(1, Ordering::Relaxed);
                let thread = relayed.thread;
                self.tell(thread, ToApp::Moved { from, old, conn });
                if self.dead[thread as usize] {
                    // Its thread is gone: reset, as `bury` does. A thread
                    // back from a stall hears of the end under the new
                    // handle it was just told.
                    self.counts.orphaned.fetch_add(1, Ordering::Relaxed);
                    let _ = net.abort(conn);
                    let reason = CloseReason::Aborted;
                    self.tell(thread, ToApp::Closed { conn, reason });
                    return;
                }
                let mut relayed = relayed;
                // Its bytes are held against this core's memory now, as
                // far as it has room (the rest on the old core's until
                // given back), and it waits for memory here anew.
                relayed.move_to(self.core);
                relayed.rx_waiting = false;
                self.conns.insert(conn, relayed);
                self.push(net, conn);
                self.pull(net, conn);
            }
        }
    }

    /// A connection that was to move here is gone: its thread hears so
    /// (an open under way as a failed connect).
    fn on_import_failed(&mut self, _net: &mut dyn Net, state: Option<ConnState>) {
        let Some(exported) = state.and_then(|s| s.downcast::<Exported>().ok()) else {
            return;
        };
        match *exported {
            Exported::Opening { thread, token } => {
                let reason = CloseReason::Aborted;
                self.tell(thread, ToApp::ConnectFailed { token, reason });
            }
            Exported::Open { from, old, relayed } => {
                self.tell(relayed.thread, ToApp::MoveFailed { from, old });
            }
        }
    }

    /// The application threads' requests, in the order each sent them;
    /// the pool's trim when due.
    fn on_tick(&mut self, net: &mut dyn Net) {
        self.trim_due(net.now());
        self.bury(net);
        for _ in 0..REQUESTS_PER_PASS {
            let Ok(batch) = self.requests.try_recv() else {
                break;
            };
            for m in batch {
                self.request(net, m);
            }
        }
        // What the thread read and the connections that ended gave back.
        self.grant(net);
    }
}

#[cfg(test)]
mod tests {
    //! A relay over a fake core (one connection's buffers, no stack),
    //! its thread played by hand through the queues.
    use super::*;
    use crate::memory::{RX_MEMORY, TX_MEMORY};
    use crate::message::SMALL_MESSAGE_COST;
    use crate::service::{CoreSetupError, QueuePairConfig, QueuePairs};
    use crossbeam_channel::unbounded;
    use flowlane_app::testing::KeptHandler;
    use flowlane_app::{ConnInfo, FourTuple, SetupExt, Stats};
    use std::net::SocketAddr;

    /// The core's one connection: bytes to read, how much a send takes,
    /// what the relay did to it (`"close"`, `"close, unread"`, `"abort"`);
    /// the core runs on CPU `cpu` of node 0 (queue 0).
    #[derive(Default)]
    struct Core {
        cpu: Option<u32>,
        rx: Vec<u8>,
        /// Bytes to read of other connections than the first.
        others: HashMap<ConnHandle, Vec<u8>>,
        room: usize,
        sent: usize,
        did: Vec<&'static str>,
        /// What `info` tells (none: `WouldBlock`).
        info: Option<ConnInfo>,
        stats: Stats,
        /// The core's clock.
        now: Duration,
    }

    impl Net for Core {
        flowlane_app::fake_net_settings!(except info);
        fn info(&self, _conn: ConnHandle) -> Result<ConnInfo, Error> {
            self.info.ok_or(Error::WouldBlock)
        }
        fn now(&self) -> Duration {
            self.now
        }
        fn placement(&self) -> Placement {
            Placement {
                queue: 0,
                cpu: self.cpu,
                node: 0,
            }
        }
        fn connect(&mut self, _remote: SocketAddr) -> Result<ConnHandle, Error> {
            Err(Error::InvalidState)
        }
        fn send(&mut self, _conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
            let n = data.len().min(self.room);
            self.room -= n;
            self.sent += n;
            if n == 0 {
                return Err(Error::WouldBlock);
            }
            Ok(n)
        }
        fn recv(&mut self, _conn: ConnHandle, _buf: &mut [u8]) -> Result<usize, Error> {
            Err(Error::InvalidState)
        }
        fn peek(&self, conn: ConnHandle) -> Result<&[u8], Error> {
            Ok(self.others.get(&conn).unwrap_or(&self.rx))
        }
        fn consume(&mut self, conn: ConnHandle, n: usize) -> Result<usize, Error> {
            let rx = self.others.get_mut(&conn).unwrap_or(&mut self.rx);
            let n = n.min(rx.len());
            rx.drain(..n);
            Ok(n)
        }
        fn is_eof(&self, _conn: ConnHandle) -> bool {
            false
        }
        fn send_space(&self, _conn: ConnHandle) -> Result<usize, Error> {
            Ok(self.room)
        }
        fn want_writable(&mut self, _conn: ConnHandle) -> bool {
            true
        }
        fn shutdown_write(&mut self, _conn: ConnHandle) -> Result<(), Error> {
            Ok(())
        }
        fn close(&mut self, _conn: ConnHandle) -> Result<(), Error> {
            // A stack resets a close with unread bytes.
            self.did.push(if self.rx.is_empty() {
                "close"
            } else {
                "close, unread"
            });
            Ok(())
        }
        fn abort(&mut self, _conn: ConnHandle) -> Result<(), Error> {
            self.did.push("abort");
            Ok(())
        }
        fn four_tuple(&self, _conn: ConnHandle) -> Result<FourTuple, Error> {
            Ok(FourTuple {
                local: "10.0.0.1:80".parse().unwrap(),
                remote: "10.0.0.2:4000".parse().unwrap(),
            })
        }
        fn stats(&self) -> &Stats {
            &self.stats
        }
    }

    /// A relay on core 0 for port 80, its thread's event queue, and its
    /// connection `conn`, accepted.
    fn relay(core: &mut Core) -> (Relay, Receiver<(u32, ToApp)>, ConnHandle) {
        let (r, from_core, conn, _answers) =
            relay_with(core, CoreMemory::new(RX_MEMORY, TX_MEMORY));
        (r, from_core, conn)
    }

    /// [`relay`] with the core's memory budgets `memory`; and where it
    /// answers its thread's connects.
    fn relay_with(
        core: &mut Core,
        memory: CoreMemory,
    ) -> (
        Relay,
        Receiver<(u32, ToApp)>,
        ConnHandle,
        Receiver<ConnectAnswer>,
    ) {
        let (events, from_core) = unbounded();
        let (_requests_tx, requests) = unbounded();
        let (answers, answered) = unbounded();
        let threads = Threads {
            mailboxes: Mailboxes {
                events: vec![events],
                notify: vec![WakeSlot::default()],
                stalled: vec![WakeSlot::default()],
                answers: vec![answers],
            },
            alive: vec![Arc::new(AtomicBool::new(true))],
            beats: vec![Heartbeat::new()],
            stall_after: Duration::from_secs(10),
            counts: Arc::default(),
            memory: Arc::new(vec![memory]),
        };
        let mut r = Relay::new(
            0,
            0,
            Arc::new(vec![80]),
            vec![None],
            threads,
            requests,
            CoreSlot::default(),
        );
        let conn = ConnHandle::from_parts(1, 1);
        r.on_accept(core, conn);
        assert!(matches!(
            from_core.try_recv(),
            Ok((0, ToApp::Accepted { .. }))
        ));
        (r, from_core, conn, answered)
    }

    /// Data bytes the thread was sent.
    fn delivered(from_core: &Receiver<(u32, ToApp)>) -> usize {
        from_core
            .try_iter()
            .map(|(_, m)| match m {
                ToApp::Data { bytes, .. } => bytes.len(),
                _ => 0,
            })
            .sum()
    }

    /// The thread read everything it had and closed, while bytes the
    /// relay sent it were still on their way (its credit shows them
    /// unread): a reset, not a FIN that would drop bytes the peer saw
    /// acknowledged. Once it consumed them all, a close is a close.
    #[test]
    fn a_close_with_delivered_bytes_unconsumed_resets() {
        for consumed in [4, 10] {
            let mut core = Core {
                rx: b"0123456789".to_vec(),
                ..Core::default()
            };
            let (mut r, from_core, conn) = relay(&mut core);
            r.on_data(&mut core, conn);
            assert_eq!(delivered(&from_core), 10);
            // The thread took the message (its cost back) and read some.
            let bytes = consumed + message_cost(10);
            r.request(&mut core, ToCore::Consumed { conn, bytes });
            r.request(&mut core, ToCore::Close { conn });
            let want = if consumed == 10 { "close" } else { "abort" };
            assert_eq!(core.did, [want], "{consumed} of 10 consumed");
        }
    }

    /// Bytes that arrive after the thread's close, while its last sends
    /// wait for room in the stack, stay in the stack: the close, once
    /// they went, finds them unread there and resets (the contract's
    /// "data after close"), instead of handing them to a thread that
    /// closed.
    #[test]
    fn bytes_after_a_close_stay_in_the_stack() {
        let mut core = Core::default();
        let (mut r, from_core, conn) = relay(&mut core);
        let bytes = b"last words".to_vec();
        let charge = Charge::none(r.memory.clone(), 0, Way::Tx);
        r.request(
            &mut core,
            ToCore::Send {
                conn,
                bytes,
                charge,
            },
        );
        r.request(&mut core, ToCore::Close { conn });
        assert!(core.did.is_empty(), "the close waits for the send");
        core.rx.extend_from_slice(b"late");
        r.on_data(&mut core, conn);
        assert_eq!(delivered(&from_core), 0);
        core.room = 1 << 20;
        r.on_writable(&mut core, conn);
        assert_eq!(core.sent, 10);
        assert_eq!(core.did, ["close, unread"]);
    }

    /// The figures of a connection its thread asked for go with the
    /// peer's FIN, as of then (a report at end of stream has them without
    /// another round trip); one never asked for costs the core no look.
    #[test]
    fn the_peer_s_fin_carries_the_figures_of_a_connection_asked_for() {
        let figures = |cwnd| ConnInfo {
            cwnd,
            mss: 1448,
            ..ConnInfo::default()
        };
        for asked in [false, true] {
            let mut core = Core {
                info: Some(figures(14_480)),
                ..Core::default()
            };
            let (mut r, from_core, conn) = relay(&mut core);
            if asked {
                r.request(&mut core, ToCore::Info { conn });
                assert!(matches!(
                    from_core.try_recv(),
                    Ok((0, ToApp::Info { info, .. })) if info == Some(figures(14_480))
                ));
            }
            // The window grew since.
            core.info = Some(figures(28_960));
            r.on_peer_closed(&mut core, conn);
            let told = from_core
                .try_iter()
                .find_map(|(_, m)| match m {
                    ToApp::PeerClosed { info, .. } => Some(info),
                    _ => None,
                })
                .expect("the peer's FIN told");
            assert_eq!(told, asked.then(|| figures(28_960)), "asked: {asked}");
        }
    }

    /// Buffers the threads give back are kept for reuse up to a small
    /// part of the core's receive memory: after a burst that held all of
    /// it (a thousand peers that do not read), the rest are freed, not
    /// held for good once the connections are gone.
    #[test]
    fn a_core_keeps_no_burst_of_buffers_for_reuse() {
        let mut core = Core::default();
        let (mut r, _from_core, _conn) = relay(&mut core);
        for _ in 0..RX_MEMORY / BUF {
            r.request(&mut core, ToCore::Recycle(Vec::with_capacity(BUF)));
        }
        let kept: usize = r.pool.iter().map(Vec::capacity).sum();
        assert!(kept <= RX_MEMORY / 16, "{} MiB kept", kept >> 20);
        assert!(!r.pool.is_empty(), "none kept for reuse");
    }

    /// What a busy spell left in the pool goes back as it lies idle: each
    /// second, half of the buffers no connection took since the last
    /// trim, down to 256 KiB, counted (what the service's heap trim
    /// watches); buffers the connections take between two trims are kept,
    /// and those freed past the bound while busy are not counted.
    #[test]
    fn a_relay_s_pool_shrinks_once_idle() {
        let mut core = Core::default();
        let (mut r, _from_core, _conn) = relay(&mut core);
        for _ in 0..POOL + 8 {
            r.request(&mut core, ToCore::Recycle(Vec::with_capacity(BUF)));
        }
        let memory = |r: &Relay| r.memory[0].report();
        let cached = |r: &Relay| r.pool.len() * BUF;
        // Past the bound: freed at once, not counted (the load reuses it).
        assert_eq!((cached(&r), memory(&r).returned), (POOL * BUF, 0));
        let mut seen = Vec::new();
        for s in 1..=8 {
            core.now = TRIM_EVERY * s;
            r.on_tick(&mut core);
            seen.push(cached(&r) / BUF);
            if s == 4 {
                // A burst takes 6 of them and gives them back: not idle.
                let taken: Vec<_> = (0..6).map(|_| r.pool.pop().unwrap()).collect();
                taken.into_iter().for_each(|b| r.keep(b));
            }
        }
        eprintln!("pool buffers after each second idle: {seen:?}");
        // Not idle before the first trim; then half of the idle ones past
        // the floor (4) each second: of the 11 at the fourth, 6 were taken
        // before the fifth, so 1 went then.
        assert_eq!(seen, [64, 34, 19, 11, 10, 7, 5, 4]);
        core.now = TRIM_EVERY * 30;
        r.on_tick(&mut core);
        assert_eq!(cached(&r), TRIM_FLOOR_BYTES, "the floor stays");
        let m = memory(&r);
        assert_eq!(m.pool_cached, TRIM_FLOOR_BYTES as u64);
        assert_eq!(m.returned, (POOL * BUF - TRIM_FLOOR_BYTES) as u64);
    }

    /// A burst of small sends that waited for the stack leaves no room
    /// held in the connection's send queue once it drained.
    #[test]
    fn a_drained_send_queue_keeps_no_burst_s_room() {
        let mut core = Core::default();
        let (mut r, _from_core, conn) = relay(&mut core);
        for _ in 0..4096 {
            let charge = Charge::none(r.memory.clone(), 0, Way::Tx);
            let bytes = b"x".to_vec();
            r.request(
                &mut core,
                ToCore::Send {
                    conn,
                    bytes,
                    charge,
                },
            );
        }
        let room = |r: &Relay| r.conns.get(conn).unwrap().tx.capacity();
        assert!(room(&r) >= 4096, "queued while the stack took none");
        core.room = 1 << 20;
        r.on_writable(&mut core, conn);
        assert_eq!(core.sent, 4096);
        eprintln!("send queue room once drained: {} entries", room(&r));
        assert!(room(&r) <= TX_QUEUE_KEPT, "{} entries kept", room(&r));
    }

    /// A thread first found stalled, then dead, never settles its moves:
    /// the old core forgets them once it died, as it does those of a
    /// thread found dead at once (a stalled one may still settle them).
    #[test]
    fn a_stalled_thread_that_dies_has_its_moves_forgotten() {
        let mut core = Core::default();
        let (mut r, _from_core, conn) = relay(&mut core);
        assert!(r.on_export(&mut core, conn).is_some());
        assert_eq!(r.moved.len(), 1);
        r.stall_after = Duration::ZERO;
        std::thread::sleep(Duration::from_millis(30));
        r.on_tick(&mut core);
        assert!(r.dead[0], "stalled");
        assert_eq!(r.moved.len(), 1, "a stalled thread may still settle");
        r.alive[0].store(false, Ordering::Relaxed);
        r.on_tick(&mut core);
        assert!(r.moved.is_empty(), "{:?}", r.moved);
    }

    /// Counts its calls.
    struct Calls(AtomicU64);

    impl Wake for Calls {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A core that finds its thread stalled resets the thread's
    /// connections and calls what the thread asked to be called then, at
    /// once (the thread, blocked, hears of the resets only later): once a
    /// stall, again at the next one.
    #[test]
    fn a_stall_is_told_to_the_thread_s_hook_at_once() {
        let mut core = Core::default();
        let (mut r, _from_core, _conn) = relay(&mut core);
        let calls = Arc::new(Calls(AtomicU64::new(0)));
        r.threads.stalled[0].set(calls.clone()).ok().unwrap();
        r.on_tick(&mut core);
        assert_eq!(calls.0.load(Ordering::Relaxed), 0, "not stalled");
        r.stall_after = Duration::from_millis(20);
        std::thread::sleep(Duration::from_millis(60));
        r.on_tick(&mut core);
        assert_eq!(core.did, ["abort"]);
        assert_eq!(calls.0.load(Ordering::Relaxed), 1);
        r.on_tick(&mut core);
        assert_eq!(calls.0.load(Ordering::Relaxed), 1, "once a stall");
        // Back, then stalled again.
        r.beats[0].beat();
        r.on_tick(&mut core);
        assert!(!r.dead[0]);
        std::thread::sleep(Duration::from_millis(60));
        r.on_tick(&mut core);
        assert_eq!(calls.0.load(Ordering::Relaxed), 2);
    }

    /// A peer's one-byte segments while the thread takes nothing (a long
    /// pass): each small message costs the credit its place in the queue
    /// too, so what waits there for the connection stays a few hundred
    /// messages, not one a byte of the credit, and the rest waits in the
    /// stack. Once the thread takes them and gives the credit back, every
    /// byte follows, in order, in a few large messages.
    #[test]
    fn one_byte_segments_queue_few_messages_while_the_thread_takes_none() {
        let mut core = Core::default();
        let (mut r, from_core, conn) = relay(&mut core);
        let stream: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for &b in &stream {
            core.rx.push(b);
            r.on_data(&mut core, conn);
        }
        let bound = (RX_CREDIT - PULL_MIN) / SMALL_MESSAGE_COST + 1;
        let queued = from_core.len();
        assert!(
            queued <= bound,
            "{queued} messages queued for one connection"
        );
        let mut got = Vec::new();
        let mut messages = 0;
        while got.len() < stream.len() {
            let taken: Vec<Vec<u8>> = from_core
                .try_iter()
                .filter_map(|(_, m)| match m {
                    ToApp::Data { bytes, .. } => Some(bytes),
                    _ => None,
                })
                .collect();
            assert!(!taken.is_empty(), "stuck at byte {}", got.len());
            let mut bytes = 0;
            for b in taken {
                bytes += b.len() + message_cost(b.len());
                got.extend_from_slice(&b);
                messages += 1;
            }
            r.request(&mut core, ToCore::Consumed { conn, bytes });
        }
        assert!(got == stream, "the stream arrived out of order");
        assert!(messages < queued + 8, "{messages} messages in all");
    }

    /// Connections whose thread reads nothing hold at most the core's
    /// receive memory together, whatever their number: the rest of their
    /// bytes stay in the stack, each connection that found memory short
    /// counted once as it began to wait. Memory the thread gives back
    /// goes to the connections in the order they began to wait: the one
    /// that gave it back, with more to hand over, queues behind them.
    #[test]
    fn received_bytes_held_for_threads_stay_within_the_core_s_memory() {
        let limit = 4 * RX_CREDIT;
        let mut core = Core::default();
        let (mut r, from_core, first, _) = relay_with(&mut core, CoreMemory::new(limit, TX_MEMORY));
        let conns: Vec<ConnHandle> = std::iter::once(first)
            .chain((2..=10).map(|i| ConnHandle::from_parts(i, 1)))
            .collect();
        for &c in &conns[1..] {
            r.on_accept(&mut core, c);
        }
        from_core.try_iter().for_each(drop);
        for &c in &conns {
            core.others.insert(c, vec![c.index() as u8; 2 * RX_CREDIT]);
            r.on_data(&mut core, c);
        }
        // By connection, what the thread was handed.
        let handed = |from_core: &Receiver<(u32, ToApp)>| {
            let mut by = HashMap::<ConnHandle, usize>::new();
            for (_, m) in from_core.try_iter() {
                if let ToApp::Data { conn, bytes } = m {
                    *by.entry(conn).or_default() += bytes.len();
                }
            }
            by
        };
        let by = handed(&from_core);
        let held: usize = by.values().sum();
        assert_eq!(held, limit, "{by:?}");
        let report = r.memory[0].report();
        assert_eq!(report.rx_held, limit as u64);
        assert_eq!(report.rx_waits, 6, "{report:?}");
        assert!(r.rx_waiting.iter().eq(&conns[4..]), "{:?}", r.rx_waiting);
        // The thread reads connection 1's bytes: they go to the oldest
        // waiter, connection 5; connection 1 queues behind the others.
        let (c1, c5) = (conns[1], conns[4]);
        let bytes = by[&c1];
        r.request(&mut core, ToCore::Consumed { conn: c1, bytes });
        r.on_tick(&mut core);
        let by = handed(&from_core);
        assert_eq!(by.keys().collect::<Vec<_>>(), [&c5], "{by:?}");
        assert_eq!(r.rx_waiting.back(), Some(&c1));
        assert_eq!(r.memory[0].report().rx_held, limit as u64);
        // A connection that goes gives back what it held.
        r.on_closed(&mut core, c5, CloseReason::Reset);
        r.on_tick(&mut core);
        assert!(!handed(&from_core).is_empty(), "the next waiter's turn");
    }

    /// A connect its stack refuses at once is answered with the error, for
    /// the thread to return it as run to completion's connect does (and
    /// told as a failed open, for a thread that gave up waiting).
    #[test]
    fn a_connect_the_stack_refuses_is_answered_with_its_error() {
        let mut core = Core::default();
        let memory = CoreMemory::new(RX_MEMORY, TX_MEMORY);
        let (mut r, from_core, _, answered) = relay_with(&mut core, memory);
        let remote = "10.0.0.2:80".parse().unwrap();
        r.request(
            &mut core,
            ToCore::Connect {
                thread: 0,
                token: 7,
                remote,
            },
        );
        assert_eq!(answered.try_recv(), Ok((0, 7, Err(Error::InvalidState))));
        assert!(matches!(
            from_core.try_recv(),
            Ok((0, ToApp::ConnectFailed { token: 7, .. }))
        ));
    }

    /// Tells the placement of each connection it accepts.
    struct TellPlacement(std::sync::mpsc::Sender<Placement>);

    impl ConnHandler for TellPlacement {
        fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
            let _ = self.0.send(net.conn_placement(conn).unwrap());
        }
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    }

    /// A core whose backend runs it elsewhere than `QueuePairConfig::cores`
    /// says (its worker on CPU 1, the configuration built for CPU 0): on
    /// the application thread, a connection's placement is where its core
    /// runs, as the backend said at the core's start (what a thread that
    /// pins itself near the connection needs), not the configured one;
    /// and the service names the core as misplaced.
    #[test]
    fn a_connection_s_placement_is_where_its_core_runs_not_the_configured_one() {
        let configured = Placement {
            queue: 0,
            cpu: Some(0),
            node: 0,
        };
        let (told, placements) = std::sync::mpsc::channel();
        let qp = QueuePairs::start(
            QueuePairConfig {
                cores: vec![configured],
                app_threads: vec![Placement {
                    cpu: None,
                    ..configured
                }],
                pin: |_| Ok(()),
                stall_after: Duration::from_secs(10),
            },
            move |s| {
                s.listen(80, TellPlacement(told.clone()))
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
        )
        .unwrap();
        let mut setup = KeptHandler::default();
        qp.setup_core(&mut setup).unwrap();
        let mut relay = setup.handler.take().expect("the core's relay");
        let mut core = Core {
            cpu: Some(1),
            ..Core::default()
        };
        assert!(qp.misplaced_cores().is_empty(), "not started yet");
        relay.on_start(&mut core);
        relay.on_accept(&mut core, ConnHandle::from_parts(1, 1));
        let seen = placements
            .recv_timeout(Duration::from_secs(10))
            .expect("the connection reached its thread");
        let actual = core.placement();
        assert_eq!(seen, actual);
        assert_eq!(qp.misplaced_cores(), [(configured, actual)]);
        drop(relay);
        qp.stop().unwrap();
    }

    /// A core `QueuePairConfig::cores` has no entry for, and one set up
    /// twice, are refused saying so (not as "invalid connection state");
    /// as the backend's error, they are what they were.
    #[test]
    fn a_core_without_a_relay_is_refused_saying_why() {
        let qp = QueuePairs::start(
            QueuePairConfig {
                cores: vec![Core::default().placement()],
                app_threads: vec![Core::default().placement()],
                pin: |_| Ok(()),
                stall_after: Duration::from_secs(10),
            },
            |_| (),
        )
        .unwrap();
        let mut second = KeptHandler::new(1);
        let e = qp.setup_core(&mut second).unwrap_err();
        assert_eq!(e, CoreSetupError::NoRelay { queue: 1, cores: 1 });
        let text = e.to_string();
        assert!(
            text.contains("no relay for core 1")
                && text.contains("QueuePairConfig::cores lists 1 core (queues 0 to 0)"),
            "{text}"
        );
        qp.setup_core(&mut KeptHandler::default()).unwrap();
        let e = qp.setup_core(&mut KeptHandler::default()).unwrap_err();
        assert!(e.to_string().contains("setup_core was called twice"), "{e}");
        assert_eq!(Error::from(e), Error::InvalidState);
        qp.stop().unwrap();
    }
}
