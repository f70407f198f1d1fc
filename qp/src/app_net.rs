//! The application thread's side: a [`Net`] over the queue pairs to the
//! network cores it serves. Received bytes arrive in buffers the thread
//! reads from (and gives back); sends are copied into requests, bounded by
//! a credit that the cores' cumulative completions renew, and by the
//! core's send memory.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use flowlane_app::{
    seen_state, CloseReason, CongestionAlgorithm, ConnHandle, ConnInfo, Error, FourTuple, Handles,
    ListenerId, Net, Placement, State, Stats,
};
use flowlane_tcp::Event;

use crate::memory::{Charge, CoreMemory, Way};
use crate::message::{message_cost, ConnectAnswer, ToApp, ToCore, BUF, SMALL_DATA, TX_CREDIT};
use crate::relay::CoreSlot;

/// How long [`QpNet::connect`] waits for the core's answer (a core's
/// pass; the thread woke it): one that has not answered by then is not
/// waited for again until its answers caught up, and the connect's
/// outcome, a failure included, comes as the connection's `Closed`.
const CONNECT_WAIT: Duration = Duration::from_millis(100);

/// A network core as an application thread sees it.
pub(crate) struct CoreLink {
    pub(crate) requests: Sender<Vec<ToCore>>,
    /// The core's waker and where it runs, published once its loop
    /// started (its relay's `on_start`).
    pub(crate) up: CoreSlot,
    /// Where `QueuePairConfig::cores` says the core runs.
    pub(crate) configured: Placement,
}

impl CoreLink {
    /// Where the core runs: as its backend said when its loop started
    /// (which may not be what the configuration says), as configured
    /// until then.
    pub(crate) fn placement(&self) -> Placement {
        self.up.get().map_or(self.configured, |up| up.placement)
    }
}

/// One connection on the application thread.
#[derive(Debug)]
struct Conn {
    core: u32,
    /// The core's handle (none while an active open is under way).
    remote_handle: Option<ConnHandle>,
    tuple: FourTuple,
    rx: VecDeque<Vec<u8>>,
    rx_off: usize,
    rx_len: usize,
    peer_closed: bool,
    readable_told: bool,
    /// Bytes asked to be sent, and of those the stack took.
    requested: u64,
    completed: u64,
    want_writable: bool,
    closing: bool,
    shut: bool,
    user_data: u64,
    /// The core's last answer to an info request.
    core_info: Option<ConnInfo>,
    /// Info requests sent to its core and not answered yet: the answer
    /// that brings this to 0 is the latest request's
    /// (`AppPort::set_on_info`).
    info_in_flight: u32,
    /// The connection is moving to another core (its RSS bucket moved).
    moving: Option<Box<Moving>>,
    /// An active open under way: its token, and the requests made before
    /// the core named the connection (sent once it has, in order).
    opening: Option<Box<Opening>>,
    /// Waiting for its core's send memory (in `QpNet::tx_waiting`).
    tx_waiting: bool,
    /// Its turn for the core's send memory came: its next send goes
    /// before those still waiting.
    tx_granted: bool,
    /// The core's connection closed normally (both FINs) with bytes
    /// delivered here still unread: they stay readable, and the
    /// connection ends once they are read ([`QpNet::end_drained`]) or
    /// the application closes or aborts it.
    ended: bool,
}

/// A connection between its old core and its new one, on the thread: the
/// requests the old core bounced and those made since the move was told
/// go to the new core, in that order, once the old one settled.
#[derive(Debug)]
struct Moving {
    /// The old core, and the connection's handle there.
    from: u32,
    old: ConnHandle,
    /// Whether the new core told of the move (`remote_handle` and `core`
    /// are the new ones since).
    told: bool,
    bounced: Vec<ToCore>,
    held: Vec<ToCore>,
}

/// An active open on the thread, until the core answers.
#[derive(Debug)]
struct Opening {
    token: u64,
    early: Vec<ToCore>,
}

impl Moving {
    fn new(from: u32, old: ConnHandle) -> Box<Moving> {
        Box::new(Moving {
            from,
            old,
            told: false,
            bounced: Vec::new(),
            held: Vec::new(),
        })
    }
}

impl Conn {
    fn new(core: u32, remote_handle: Option<ConnHandle>, tuple: FourTuple) -> Conn {
        Conn {
            core,
            remote_handle,
            tuple,
            rx: VecDeque::new(),
            rx_off: 0,
            rx_len: 0,
            peer_closed: false,
            readable_told: false,
            requested: 0,
            completed: 0,
            want_writable: false,
            closing: false,
            shut: false,
            user_data: 0,
            core_info: None,
            info_in_flight: 0,
            moving: None,
            opening: None,
            tx_waiting: false,
            tx_granted: false,
            ended: false,
        }
    }

    /// Where a request for this connection goes now: held while it moves
    /// (after the new core told of it), else to its core's queue.
    fn route<'a>(&'a mut self, pending: &'a mut [Vec<ToCore>]) -> &'a mut Vec<ToCore> {
        match &mut self.moving {
            Some(m) if m.told => &mut m.held,
            _ => &mut pending[self.core as usize],
        }
    }

    /// The core's last figures ([`Net::info`]), with the bytes on their
    /// way between the core and the thread.
    fn figures(&self) -> Option<ConnInfo> {
        let mut info = self.core_info?;
        info.readable += self.rx_len;
        info.unsent += (self.requested - self.completed) as usize;
        Some(info)
    }

    /// What the connection's credit lets it send now (the core's send
    /// memory aside, [`QpNet::tx_room`]).
    fn send_space(&self) -> usize {
        if self.remote_handle.is_none() || self.closing || self.shut {
            return 0;
        }
        TX_CREDIT.saturating_sub((self.requested - self.completed) as usize)
    }
}

/// What a thread's loop is told a connection's figures with
/// (`AppPort::set_on_info`).
pub(crate) type InfoHook = Box<dyn FnMut(ConnHandle, Option<ConnInfo>) + Send>;

/// Connections one application thread keeps at most.
const MAX_CONNECTIONS: usize = 1 << 20;

/// The [`Net`] of one application thread.
pub(crate) struct QpNet {
    thread: u32,
    placement: Placement,
    epoch: Instant,
    conns: Handles<Conn>,
    /// Per core: its handles to ours.
    by_core: Vec<HashMap<ConnHandle, u32>>,
    cores: Vec<CoreLink>,
    /// The cores whose accepted connections come here (active opens go
    /// to them in turn).
    served: Vec<u32>,
    next_core: usize,
    next_token: u64,
    connecting: HashMap<u64, u32>,
    /// Requests of this pass, per core.
    pending: Vec<Vec<ToCore>>,
    pub(crate) events: VecDeque<Event>,
    stats: Stats,
    /// Connections whose info was read since the last flush: the cores are
    /// asked for fresh figures.
    info_wanted: RefCell<Vec<ConnHandle>>,
    /// Ended connections whose last delivered bytes were read: their
    /// `Closed` follows ([`QpNet::end_drained`]).
    drained: Vec<ConnHandle>,
    /// The figures of connections ended here (those the core sent with
    /// their end), until their `Closed` is dispatched: what `info` tells
    /// the handlers of their last events.
    ended_info: HashMap<ConnHandle, ConnInfo>,
    /// Told of each connection that moved to another core, with its new
    /// placement (`AppPort::set_on_move`).
    pub(crate) on_move: Option<Box<dyn FnMut(ConnHandle, Placement) + Send>>,
    /// Told of a connection's figures as its core answers the latest of
    /// the thread's requests for them (`AppPort::set_on_info`).
    pub(crate) on_info: Option<InfoHook>,
    /// Every core's memory budgets (a send takes from its core's).
    memory: Arc<Vec<CoreMemory>>,
    /// Per core: connections whose sends wait for its send memory, in the
    /// order they began to wait (entries of connections gone or served
    /// since are skipped).
    tx_waiting: Vec<VecDeque<ConnHandle>>,
    /// The cores' answers to this thread's connects.
    answers: Receiver<ConnectAnswer>,
    /// Per core: answers to come for connects not waited for to the end.
    owed: Vec<u32>,
    /// A core told that the service is stopping ([`ToApp::Stopping`]),
    /// not yet taken by the thread's pass ([`QpNet::take_stopping`]).
    stopping: bool,
}

impl QpNet {
    pub(crate) fn new(
        thread: u32,
        placement: Placement,
        cores: Vec<CoreLink>,
        served: Vec<u32>,
        memory: Arc<Vec<CoreMemory>>,
        answers: Receiver<ConnectAnswer>,
    ) -> QpNet {
        let n = cores.len();
        QpNet {
            thread,
            placement,
            epoch: Instant::now(),
            // Tagged with the thread's index: another thread's handles
            // are refused here.
            conns: Handles::new(MAX_CONNECTIONS, thread),
            by_core: (0..n).map(|_| HashMap::new()).collect(),
            cores,
            served,
            next_core: 0,
            next_token: 0,
            connecting: HashMap::new(),
            pending: (0..n).map(|_| Vec::new()).collect(),
            events: VecDeque::new(),
            stats: Stats::default(),
            info_wanted: RefCell::new(Vec::new()),
            drained: Vec::new(),
            ended_info: HashMap::new(),
            on_move: None,
            on_info: None,
            memory,
            tx_waiting: (0..n).map(|_| VecDeque::new()).collect(),
            answers,
            owed: vec![0; n],
            stopping: false,
        }
    }

    /// Whether a core told that the service is stopping since the last
    /// call.
    pub(crate) fn take_stopping(&mut self) -> bool {
        std::mem::take(&mut self.stopping)
    }

    /// Whether every core this thread serves has started (the handlers
    /// start then, as on a core in run to completion).
    pub(crate) fn cores_up(&self) -> bool {
        self.served
            .iter()
            .all(|&c| self.cores[c as usize].up.get().is_some())
    }

    fn conn(&self, h: ConnHandle) -> Result<&Conn, Error> {
        self.conns.get(h)
    }

    fn conn_mut(&mut self, h: ConnHandle) -> Result<&mut Conn, Error> {
        self.conns.get_mut(h)
    }

    /// Ends our connection `index`: `Closed` is queued; the slot waits for
    /// it to be dispatched ([`QpNet::release`]).
    fn end(&mut self, index: u32, reason: CloseReason) {
        self.end_as(index, reason, false);
    }

    /// [`QpNet::end`], by the handler itself (`by_handler`: an abort, whose
    /// connection hears nothing more but its `Closed`).
    fn end_as(&mut self, index: u32, reason: CloseReason, by_handler: bool) {
        let ended = if by_handler {
            self.conns.end_by_handler(index)
        } else {
            self.conns.end(index)
        };
        let Some((h, mut c)) = ended else {
            return;
        };
        forget_remote(&mut self.by_core, &mut c);
        for buf in c.rx {
            recycle(&mut self.pending[c.core as usize], buf);
        }
        if let Some(info) = c.core_info {
            self.ended_info.insert(h, info);
        }
        self.stats.closed += 1;
        self.events.push_back(Event::Closed { conn: h, reason });
    }

    /// The core's connection `index` closed: a normal close (both FINs
    /// exchanged) with delivered bytes unread keeps them readable, as a
    /// kernel socket's queue stays readable after its close completed;
    /// any other ends it now (a reset's or a timeout's bytes go with it,
    /// and so do those of a connection the application closed).
    fn core_closed(&mut self, index: u32, reason: CloseReason) {
        let Some(c) = self.conns.at_mut(index) else {
            return;
        };
        if reason == CloseReason::Normal && c.rx_len > 0 && !c.closing {
            forget_remote(&mut self.by_core, c);
            c.ended = true;
            return;
        }
        self.end(index, reason);
    }

    /// Ends `h`, an active open the core has not answered yet: its
    /// `Closed` comes now, and the core's answer finds no connection here
    /// (an opened one is reset then).
    fn abandon(&mut self, h: ConnHandle, reason: CloseReason) {
        if let Some(o) = self.conns.get(h).ok().and_then(|c| c.opening.as_ref()) {
            self.connecting.remove(&o.token);
        }
        self.end(h.index(), reason);
    }

    /// Ends the held connections whose bytes were all read (after a pass's
    /// reads, so that a reader saw their end of stream first); returns
    /// whether any ended.
    pub(crate) fn end_drained(&mut self) -> bool {
        let drained = std::mem::take(&mut self.drained);
        let any = !drained.is_empty();
        for h in drained {
            if self.conns.get(h).is_ok_and(|c| c.ended) {
                self.end(h.index(), CloseReason::Normal);
            }
        }
        any
    }

    /// `h`'s `Closed` was dispatched: its slot is free.
    pub(crate) fn release(&mut self, h: ConnHandle) {
        self.ended_info.remove(&h);
        self.conns.release(h);
    }

    fn request(
        &mut self,
        h: ConnHandle,
        f: impl FnOnce(ConnHandle) -> ToCore,
    ) -> Result<(), Error> {
        let c = self.conns.get_mut(h)?;
        match (c.remote_handle, &mut c.opening) {
            (Some(remote), _) => c.route(&mut self.pending).push(f(remote)),
            // Named once the core has (`ToApp::Connected`).
            (None, Some(o)) => o.early.push(f(ConnHandle::from_parts(u32::MAX, 0))),
            (None, None) => return Err(Error::InvalidState),
        }
        Ok(())
    }

    /// Takes one message of core `core`.
    pub(crate) fn take(&mut self, core: u32, m: ToApp) {
        // Our slot of the core's connection, and its handle.
        let ours = |net: &QpNet, conn: &ConnHandle| {
            let &index = net.by_core[core as usize].get(conn)?;
            Some((index, net.conns.handle(index)?))
        };
        match m {
            ToApp::Accepted { conn, port, tuple } => {
                let Ok(h) = self.conns.insert(Conn::new(core, Some(conn), tuple)) else {
                    // No room on this thread: the core resets it.
                    self.pending[core as usize].push(ToCore::Abort { conn });
                    return;
                };
                self.by_core[core as usize].insert(conn, h.index());
                self.stats.passive_opens += 1;
                self.events.push_back(Event::Accepted {
                    conn: h,
                    listener: ListenerId::from_index(port),
                });
            }
            ToApp::Connected { token, conn, tuple } => {
                let Some(index) = self.connecting.remove(&token) else {
                    // Closed or aborted while it opened: nobody here wants
                    // it (the core resets it).
                    self.pending[core as usize].push(ToCore::Abort { conn });
                    return;
                };
                let (Some(h), Some(c)) = (self.conns.handle(index), self.conns.at_mut(index))
                else {
                    return;
                };
                c.remote_handle = Some(conn);
                c.core = core;
                c.tuple = tuple;
                if let Some(o) = c.opening.take() {
                    for mut r in o.early {
                        if let Some(named) = r.conn_mut() {
                            *named = conn;
                        }
                        self.pending[core as usize].push(r);
                    }
                }
                let writable = std::mem::take(&mut c.want_writable);
                self.by_core[core as usize].insert(conn, index);
                self.stats.active_opens += 1;
                self.events.push_back(Event::Connected(h));
                if writable {
                    self.events.push_back(Event::Writable(h));
                }
            }
            ToApp::ConnectFailed { token, reason } => {
                if let Some(index) = self.connecting.remove(&token) {
                    self.end(index, reason);
                }
            }
            ToApp::Data { conn, bytes } => {
                let Some((index, h)) = ours(self, &conn) else {
                    recycle(&mut self.pending[core as usize], bytes);
                    return;
                };
                let n = bytes.len();
                self.stats.bytes_in += n as u64;
                let c = self.conns.at_mut(index).expect("mapped");
                if c.closing {
                    // On their way when the handler closed: the core, whose
                    // credit shows them unread, resets the connection (data
                    // after a close is a reset's, not the handler's).
                    recycle(&mut self.pending[core as usize], bytes);
                    return;
                }
                c.rx_len += n;
                let alone = c.rx.len() == 1;
                match c.rx.back_mut() {
                    // A small one joins the buffer held before it (see
                    // `SMALL_DATA`) while that stays within a pool buffer's
                    // size; its own goes back to its core if it is one of
                    // the pool's. (The front buffer goes only once read to
                    // its end: appended to without a bound, one the
                    // application never reads to the end, a parser holding
                    // a partial frame, would keep every byte ever appended.)
                    Some(last) if n < SMALL_DATA && last.len() + n <= BUF => {
                        if alone && c.rx_off >= BUF / 2 {
                            // Read past its middle: the read bytes go first.
                            last.drain(..c.rx_off);
                            c.rx_off = 0;
                        }
                        grow_within_buf(last, n);
                        last.extend_from_slice(&bytes);
                        recycle(&mut self.pending[core as usize], bytes);
                    }
                    _ => c.rx.push_back(bytes),
                }
                if !c.readable_told {
                    c.readable_told = true;
                    self.events.push_back(Event::Readable(h));
                }
                // Its place in the queue is free now: the credit the core
                // charged for it goes back (none for a large one).
                self.consumed(h, message_cost(n));
            }
            ToApp::Sent { conn, total } => {
                let Some((index, h)) = ours(self, &conn) else {
                    return;
                };
                let c = self.conns.at_mut(index).expect("mapped");
                c.completed = c.completed.max(total);
                // One waiting for memory hears it at its turn.
                if c.want_writable && c.send_space() > 0 && !c.tx_waiting {
                    c.want_writable = false;
                    self.events.push_back(Event::Writable(h));
                }
            }
            ToApp::Info { conn, info } => {
                let Some((index, h)) = ours(self, &conn) else {
                    return;
                };
                let Some(c) = self.conns.at_mut(index) else {
                    return;
                };
                c.info_in_flight = c.info_in_flight.saturating_sub(1);
                c.core_info = info.or(c.core_info);
                // Earlier requests' answers are older than what the latest
                // asks for: only its own is told.
                if c.info_in_flight == 0 {
                    let figures = c.figures();
                    if let Some(tell) = self.on_info.as_mut() {
                        tell(h, figures);
                    }
                }
            }
            ToApp::PeerClosed { conn, info } => {
                if let Some((index, h)) = ours(self, &conn) {
                    if let Some(c) = self.conns.at_mut(index) {
                        c.peer_closed = true;
                        // The figures at the peer's FIN, if they were
                        // asked for before.
                        c.core_info = info.or(c.core_info);
                    }
                    self.events.push_back(Event::PeerClosed(h));
                }
            }
            ToApp::Closed { conn, reason } => {
                if let Some((index, _)) = ours(self, &conn) {
                    self.core_closed(index, reason);
                }
            }
            ToApp::Stopping => self.stopping = true,
            ToApp::Moved { from, old, conn } => {
                let Some(c) = self.by_core[from as usize]
                    .get(&old)
                    .and_then(|&i| self.conns.at_mut(i))
                else {
                    // Ended here meanwhile: nobody serves it, and the old
                    // core may forget it.
                    self.pending[core as usize].push(ToCore::Abort { conn });
                    self.settle(from, old);
                    return;
                };
                c.core = core;
                c.remote_handle = Some(conn);
                c.moving.get_or_insert_with(|| Moving::new(from, old)).told = true;
                let index = self.by_core[from as usize][&old];
                self.by_core[core as usize].insert(conn, index);
                self.settle(from, old);
                if let (Some(tell), Some(h)) = (self.on_move.as_mut(), self.conns.handle(index)) {
                    tell(h, self.cores[core as usize].placement());
                }
            }
            ToApp::MoveFailed { from, old } => {
                // The old core keeps bouncing for it until settled, even
                // if it ended here meanwhile (an abort while the move
                // failed): nothing else would ever settle it.
                self.settle(from, old);
                if let Some(&index) = self.by_core[from as usize].get(&old) {
                    self.end(index, CloseReason::Aborted);
                }
            }
            ToApp::Bounced { conn, request } => {
                let Some(c) = ours(self, &conn).and_then(|(i, _)| self.conns.at_mut(i)) else {
                    return;
                };
                c.moving
                    .get_or_insert_with(|| Moving::new(core, conn))
                    .bounced
                    .push(request);
            }
            ToApp::Settled { conn } => {
                let Some(index) = self.by_core[core as usize].remove(&conn) else {
                    return;
                };
                let Some(c) = self.conns.at_mut(index) else {
                    return;
                };
                // Only the old core of the move being held ends it: a core
                // the connection only passed through (moved on before the
                // first move settled) was sent nothing to bounce.
                if !c
                    .moving
                    .as_ref()
                    .is_some_and(|m| m.from == core && m.old == conn)
                {
                    return;
                }
                let (Some(m), Some(now)) = (c.moving.take(), c.remote_handle) else {
                    return;
                };
                // Each named the connection as it was then (the old core's
                // handle, or a core it has since left): the one it has now.
                let to = &mut self.pending[c.core as usize];
                for mut r in m.bounced.into_iter().chain(m.held) {
                    if let Some(h) = r.conn_mut() {
                        *h = now;
                    }
                    to.push(r);
                }
            }
        }
    }

    /// Tells core `from` that the thread sends its connection `old`
    /// nothing more (the connection moved on, or is gone): the core
    /// forgets it once it bounced every earlier request.
    fn settle(&mut self, from: u32, old: ConnHandle) {
        self.pending[from as usize].push(ToCore::Settle {
            thread: self.thread,
            conn: old,
        });
    }

    /// Asks `h`'s core for its figures now if [`Net::info`] wanted them
    /// in this pass, rather than after the pass's other requests
    /// ([`QpNet::flush`]): a close ends the connection on its core as soon
    /// as both FINs went, and an `Info` behind it would find the
    /// connection gone (no figures for its `on_closed`: a handler that
    /// asked as it accepted and closed in the same pass, the whole
    /// exchange in one pass's events, had none). Once per close.
    fn ask_info_now(&mut self, h: ConnHandle) {
        let wanted = {
            let mut wanted = self.info_wanted.borrow_mut();
            let before = wanted.len();
            wanted.retain(|&w| w != h);
            wanted.len() != before
        };
        if wanted
            && self.conn(h).is_ok_and(|c| c.remote_handle.is_some())
            && self.request(h, |conn| ToCore::Info { conn }).is_ok()
        {
            if let Ok(c) = self.conn_mut(h) {
                c.info_in_flight += 1;
            }
        }
    }

    /// Sends this pass's requests and wakes the cores they went to.
    pub(crate) fn flush(&mut self) {
        let mut wanted = self.info_wanted.take();
        wanted.sort_unstable_by_key(|h| (h.index(), h.generation()));
        wanted.dedup();
        for h in wanted {
            // None for a connection still opening: it has no figures yet.
            if self.conn(h).is_ok_and(|c| c.remote_handle.is_some())
                && self.request(h, |conn| ToCore::Info { conn }).is_ok()
            {
                if let Ok(c) = self.conn_mut(h) {
                    c.info_in_flight += 1;
                }
            }
        }
        for core in 0..self.pending.len() {
            self.send_pending(core);
        }
    }

    /// Sends core `core` the requests of this pass so far, and wakes it.
    fn send_pending(&mut self, core: usize) {
        let pending = &mut self.pending[core];
        if pending.is_empty() {
            return;
        }
        let link = &self.cores[core];
        if link.requests.send(std::mem::take(pending)).is_ok() {
            if let Some(up) = link.up.get() {
                up.waker.wake();
            }
        }
    }

    /// Waits (at most [`CONNECT_WAIT`]) for core `core`'s answer to this
    /// thread's connect `token`: the error its stack refused the open
    /// with at once, as in run to completion. `Ok` (the open is under
    /// way, or its outcome, a failure included, comes as an event) without
    /// waiting while the core owes answers to connects not waited for.
    fn await_answer(&mut self, core: u32, token: u64) -> Result<(), Error> {
        let core = core as usize;
        while let Ok((from, _, _)) = self.answers.try_recv() {
            self.repaid(from);
        }
        if self.owed[core] > 0 {
            self.owed[core] += 1;
            return Ok(());
        }
        self.send_pending(core);
        let deadline = Instant::now() + CONNECT_WAIT;
        loop {
            match self.answers.recv_deadline(deadline) {
                Ok((from, t, result)) if from as usize == core && t == token => return result,
                Ok((from, _, _)) => self.repaid(from),
                Err(_) => {
                    self.owed[core] += 1;
                    return Ok(());
                }
            }
        }
    }

    /// A core answered a connect not waited for.
    fn repaid(&mut self, core: u32) {
        if let Some(owed) = self.owed.get_mut(core as usize) {
            *owed = owed.saturating_sub(1);
        }
    }

    /// What `h` may send now: its credit's room, within what its core's
    /// send memory has free; none while other connections wait for that
    /// memory before it (in the order they began to wait, unless its turn
    /// came: [`QpNet::grant_writable`]).
    fn tx_room(&self, h: ConnHandle) -> Result<usize, Error> {
        let c = self.conn(h)?;
        let room = c.send_space();
        if room == 0 || self.behind(c) {
            return Ok(0);
        }
        Ok(room.min(self.memory[c.core as usize].tx.room()))
    }

    /// Whether `c`'s sends wait behind others for its core's send memory.
    fn behind(&self, c: &Conn) -> bool {
        !c.tx_granted && (c.tx_waiting || !self.tx_waiting[c.core as usize].is_empty())
    }

    /// `h` waits for its core's send memory (counted once a wait):
    /// `Writable` comes at its turn.
    fn wait_for_memory(&mut self, h: ConnHandle) {
        let Ok(c) = self.conns.get_mut(h) else { return };
        c.want_writable = true;
        if !c.tx_waiting {
            c.tx_waiting = true;
            self.memory[c.core as usize].tx.waited();
            self.tx_waiting[c.core as usize].push_back(h);
        }
    }

    /// Send memory the cores gave back goes to the connections waiting for
    /// it, in the order they began to wait: each in turn hears `Writable`
    /// (and sends before those still waiting), while its core's memory has
    /// room for what its credit lets it send. Each pass, before the
    /// handlers run.
    pub(crate) fn grant_writable(&mut self) {
        for core in 0..self.tx_waiting.len() {
            let mut free = self.memory[core].tx.room();
            while free > 0 {
                let Some(h) = self.tx_waiting[core].pop_front() else {
                    break;
                };
                let Ok(c) = self.conns.get_mut(h) else {
                    continue;
                };
                if !std::mem::take(&mut c.tx_waiting) {
                    continue;
                }
                c.tx_granted = true;
                free = free.saturating_sub(c.send_space());
                if std::mem::take(&mut c.want_writable) {
                    self.events.push_back(Event::Writable(h));
                }
            }
        }
    }

    /// Whether a queued event is still to be dispatched
    /// ([`Handles::due`]).
    pub(crate) fn due(&self, e: &Event) -> bool {
        self.conns.due(e)
    }

    /// Connections open on this thread.
    pub(crate) fn open(&self) -> usize {
        self.conns.len()
    }

    /// Credit given back to the core for `conn`: bytes read, and the cost
    /// of small messages taken ([`message_cost`]).
    fn consumed(&mut self, h: ConnHandle, n: usize) {
        if n == 0 {
            return;
        }
        if let Ok(c) = self.conns.get_mut(h) {
            let Some(r) = c.remote_handle else { return };
            let pending = c.route(&mut self.pending);
            // Reads of one connection in a pass go back as one.
            match pending.last_mut() {
                Some(ToCore::Consumed { conn, bytes }) if *conn == r => *bytes += n,
                _ => pending.push(ToCore::Consumed { conn: r, bytes: n }),
            }
        }
    }
}

/// Takes `c` out of the cores' maps of their handles to ours: nothing
/// from them names it again.
fn forget_remote(by_core: &mut [HashMap<ConnHandle, u32>], c: &mut Conn) {
    if let Some(r) = c.remote_handle.take() {
        by_core[c.core as usize].remove(&r);
    }
    if let Some(m) = c.moving.take() {
        by_core[m.from as usize].remove(&m.old);
    }
}

/// Makes room in `buf` for `n` more bytes (its length and `n` within a
/// pool buffer, [`BUF`]): twice its capacity (few copies however many
/// small messages join it), but never past a pool buffer's, so that a
/// buffer grown by small messages holds at most [`BUF`] (not twice it)
/// and, grown to it, goes back to the core's pool once read.
fn grow_within_buf(buf: &mut Vec<u8>, n: usize) {
    let need = buf.len() + n;
    if buf.capacity() < need {
        let cap = (2 * buf.capacity()).clamp(need, BUF);
        buf.reserve_exact(cap - buf.len());
    }
}

/// Gives a receive buffer back to its core's pool if it is one of the
/// pool's (64 KiB); one sized to a small message, or grown by the small ones
/// appended to it, is dropped here instead of travelling to be refused.
fn recycle(pending: &mut Vec<ToCore>, buf: Vec<u8>) {
    if buf.capacity() == BUF {
        pending.push(ToCore::Recycle(buf));
    }
}

impl Net for QpNet {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn placement(&self) -> Placement {
        self.placement
    }

    /// The open goes to the next core this thread serves, whose answer it
    /// waits for (a core's pass, [`CONNECT_WAIT`] at most): an open its
    /// stack refuses at once (no local port, `AddrInUse`; no room,
    /// `ConnectionLimit`; `InvalidAddress`) fails here with that error, as
    /// in run to completion, leaving no connection.
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnHandle, Error> {
        if self.served.is_empty() {
            return Err(Error::InvalidState);
        }
        let core = self.served[self.next_core % self.served.len()];
        let unspecified = SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 0);
        let token = self.next_token;
        let mut c = Conn::new(
            core,
            None,
            FourTuple {
                local: unspecified,
                remote,
            },
        );
        c.opening = Some(Box::new(Opening {
            token,
            early: Vec::new(),
        }));
        let h = self.conns.insert(c)?;
        self.next_core += 1;
        self.next_token += 1;
        self.connecting.insert(token, h.index());
        self.pending[core as usize].push(ToCore::Connect {
            thread: self.thread,
            token,
            remote,
        });
        if let Err(e) = self.await_answer(core, token) {
            // Nobody saw it: gone without a `Closed`, as a connect that
            // failed in run to completion.
            self.connecting.remove(&token);
            self.conns.undo_insert(h);
            return Err(e);
        }
        Ok(h)
    }

    fn send(&mut self, h: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        let c = self.conn(h)?;
        if c.closing || c.shut || c.ended {
            return Err(Error::InvalidState);
        }
        let (core, credit) = (c.core, c.send_space().min(data.len()));
        let behind = self.behind(c);
        let mut charge = Charge::none(self.memory.clone(), core, Way::Tx);
        let n = if behind { 0 } else { charge.take(credit) };
        let c = self.conn_mut(h)?;
        c.tx_granted = false;
        if n < data.len() {
            // The credit's renewal (`Sent`) tells `Writable`, or the
            // memory's turn (`grant_writable`).
            c.want_writable = true;
        }
        if n < credit {
            self.wait_for_memory(h);
        }
        if n == 0 {
            return Err(Error::WouldBlock);
        }
        let c = self.conn_mut(h)?;
        c.requested += n as u64;
        self.stats.bytes_out += n as u64;
        let bytes = data[..n].to_vec();
        self.request(h, |conn| ToCore::Send {
            conn,
            bytes,
            charge,
        })?;
        Ok(n)
    }

    fn recv(&mut self, h: ConnHandle, buf: &mut [u8]) -> Result<usize, Error> {
        self.conn(h)?;
        let mut n = 0;
        while n < buf.len() {
            let chunk = self.peek(h)?;
            if chunk.is_empty() {
                break;
            }
            let k = chunk.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&chunk[..k]);
            self.consume(h, k)?;
            n += k;
        }
        if n == 0 {
            return if self.is_eof(h) {
                Ok(0)
            } else {
                Err(Error::WouldBlock)
            };
        }
        Ok(n)
    }

    fn peek(&self, h: ConnHandle) -> Result<&[u8], Error> {
        let c = self.conn(h)?;
        Ok(c.rx.front().map_or(&[][..], |b| &b[c.rx_off..]))
    }

    fn consume(&mut self, h: ConnHandle, n: usize) -> Result<usize, Error> {
        let core;
        let mut done = 0;
        let mut emptied = Vec::new();
        {
            let c = self.conn_mut(h)?;
            core = c.core;
            while done < n {
                let Some(front) = c.rx.front() else { break };
                let k = (front.len() - c.rx_off).min(n - done);
                c.rx_off += k;
                done += k;
                if c.rx_off == front.len() {
                    c.rx_off = 0;
                    emptied.push(c.rx.pop_front().expect("front"));
                }
            }
            c.rx_len -= done;
            c.readable_told = false;
            if c.ended && c.rx_len == 0 && done > 0 {
                self.drained.push(h);
            }
        }
        for buf in emptied {
            recycle(&mut self.pending[core as usize], buf);
        }
        self.consumed(h, done);
        Ok(done)
    }

    fn is_eof(&self, h: ConnHandle) -> bool {
        self.conn(h).is_ok_and(|c| c.peer_closed && c.rx_len == 0)
    }

    fn send_space(&self, h: ConnHandle) -> Result<usize, Error> {
        self.tx_room(h)
    }

    fn want_writable(&mut self, h: ConnHandle) -> bool {
        if self.tx_room(h) != Ok(0) {
            return false;
        }
        match self.conn_mut(h) {
            // After a close or a shutdown no space frees up for the
            // application (and an ended one has no core): none is promised.
            Ok(c) if c.ended || c.closing || c.shut => false,
            // The credit's renewal tells it (`Sent`).
            Ok(c) if c.send_space() == 0 => {
                c.want_writable = true;
                true
            }
            // The core's memory is short, or others wait for it first.
            Ok(_) => {
                self.wait_for_memory(h);
                true
            }
            Err(_) => false,
        }
    }

    fn shutdown_write(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.request(h, |conn| ToCore::ShutdownWrite { conn })?;
        let c = self.conn_mut(h)?;
        c.shut = true;
        // No `Writable` after it (not even at the `Connected` of an open
        // under way), one a short send asked for included.
        c.want_writable = false;
        Ok(())
    }

    /// Bytes delivered to the thread but still on their way here (in the
    /// event queue) are unread too: the relay resets the connection then
    /// (`Relay::request`, `ToCore::Close`), as the core knows them unread
    /// from the connection's credit.
    fn close(&mut self, h: ConnHandle) -> Result<(), Error> {
        let c = self.conn(h)?;
        if c.rx_len > 0 {
            // Unread data, here rather than in the core's stack: a reset,
            // as run to completion sends (an ended connection's unread
            // bytes too).
            return self.abort(h);
        }
        if c.ended {
            // Read to the end: the normal close it was.
            self.end(h.index(), CloseReason::Normal);
            return Ok(());
        }
        if c.opening.is_some() {
            // As a stack's close in SYN-SENT: gone now.
            self.abandon(h, CloseReason::Normal);
            return Ok(());
        }
        if c.closing {
            return Ok(());
        }
        self.ask_info_now(h);
        self.request(h, |conn| ToCore::Close { conn })?;
        self.conn_mut(h)?.closing = true;
        Ok(())
    }

    /// Ends the connection here at once (its `Closed`, `Aborted`, is
    /// queued now; what the core still sends of it is dropped) and has its
    /// core reset it.
    fn abort(&mut self, h: ConnHandle) -> Result<(), Error> {
        let c = self.conn(h)?;
        if c.opening.is_some() {
            self.abandon(h, CloseReason::Aborted);
            return Ok(());
        }
        if let (Some(conn), core) = (c.remote_handle, c.core) {
            // Straight to the core that has it now, even while a move is
            // held: the requests held or bounced go with the connection.
            // (Told of no move yet, the old core bounces it, and the new
            // core's `Moved` finds the connection gone: reset there.)
            self.pending[core as usize].push(ToCore::Abort { conn });
        }
        // An ended connection has no core left to tell.
        self.end_as(h.index(), CloseReason::Aborted, true);
        Ok(())
    }

    fn set_nodelay(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.request(h, |conn| ToCore::SetNodelay { conn, on })
    }

    fn set_congestion(&mut self, h: ConnHandle, alg: CongestionAlgorithm) -> Result<(), Error> {
        self.request(h, |conn| ToCore::SetCongestion { conn, alg })
    }

    fn set_keepalive(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.request(h, |conn| ToCore::SetKeepalive { conn, on })
    }

    fn set_send_buffer(&mut self, h: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.request(h, |conn| ToCore::SetBuffer {
            conn,
            send: true,
            bytes,
        })
    }

    fn set_recv_buffer(&mut self, h: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.request(h, |conn| ToCore::SetBuffer {
            conn,
            send: false,
            bytes,
        })
    }

    /// The core's figures as of its answer to the previous call, plus the
    /// bytes on their way between the core and this thread; once the peer
    /// closed (end of stream), those as of its FIN if they were asked for
    /// before (the core sends them with it): an application that asks
    /// early (as it opens the connection) has the figures at its end at
    /// once, as in run to completion, and so do its handlers of the
    /// connection's last events (its peer's FIN, its `Closed`) after it
    /// ended here.
    fn info(&self, h: ConnHandle) -> Result<ConnInfo, Error> {
        let c = match self.conn(h) {
            Ok(c) => c,
            // Ended, its `Closed` not dispatched yet: as it ended.
            Err(e) => return self.ended_info.get(&h).copied().ok_or(e),
        };
        if c.remote_handle.is_some() {
            self.info_wanted.borrow_mut().push(h);
        }
        c.figures().ok_or(Error::WouldBlock)
    }

    /// The network core's, where the connection's stack runs, as the
    /// core's backend says ([`CoreLink::placement`]).
    fn conn_placement(&self, h: ConnHandle) -> Result<Placement, Error> {
        Ok(self.cores[self.conn(h)?.core as usize].placement())
    }

    fn four_tuple(&self, h: ConnHandle) -> Result<FourTuple, Error> {
        Ok(self.conn(h)?.tuple)
    }

    fn state(&self, h: ConnHandle) -> Result<State, Error> {
        let c = self.conn(h)?;
        if c.ended {
            // Both FINs exchanged; only bytes to read are left.
            return Ok(State::Closed);
        }
        Ok(seen_state(
            c.opening.is_some(),
            c.peer_closed,
            c.closing || c.shut,
        ))
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
}

#[cfg(test)]
mod tests {
    //! A connection's move between cores as its application thread sees
    //! it: the cores are played by hand through the queue pairs.
    use super::*;
    use crate::memory::{RX_MEMORY, TX_MEMORY};
    use crate::relay::start_core;
    use crossbeam_channel::unbounded;

    fn net(cores: u32) -> (QpNet, Vec<Receiver<Vec<ToCore>>>) {
        net_of_thread(0, cores)
    }

    /// The net of application thread `thread`, served by core 0 of
    /// `cores` (whose answers to its connects it does not wait for: no
    /// core answers).
    fn net_of_thread(thread: u32, cores: u32) -> (QpNet, Vec<Receiver<Vec<ToCore>>>) {
        let memory = (0..cores)
            .map(|_| CoreMemory::new(RX_MEMORY, TX_MEMORY))
            .collect();
        let (net, rxs, _answers) = net_with(thread, cores, Arc::new(memory));
        (net, rxs)
    }

    /// The net of application thread `thread`, served by core 0 of
    /// `cores` whose memory budgets are `memory`; and where the cores
    /// answer its connects.
    fn net_with(
        thread: u32,
        cores: u32,
        memory: Arc<Vec<CoreMemory>>,
    ) -> (QpNet, Vec<Receiver<Vec<ToCore>>>, Sender<ConnectAnswer>) {
        let (links, rxs) = (0..cores)
            .map(|q| {
                let (tx, rx) = unbounded();
                let placement = Placement {
                    queue: q,
                    cpu: None,
                    node: 0,
                };
                let link = CoreLink {
                    requests: tx,
                    up: CoreSlot::default(),
                    configured: placement,
                };
                start_core(&link.up, placement);
                (link, rx)
            })
            .unzip();
        let placement = Placement {
            queue: 0,
            cpu: None,
            node: 0,
        };
        let (answers, answers_rx) = unbounded();
        let net = QpNet::new(thread, placement, links, vec![0], memory, answers_rx);
        (net, rxs, answers)
    }

    /// Bytes of a send, held against nothing that matters here.
    fn charge() -> Charge {
        let memory = Arc::new(vec![CoreMemory::new(1, 1)]);
        Charge::none(memory, 0, Way::Tx)
    }

    /// The first connection of each of two threads takes the same slot;
    /// the threads' indices keep their handles apart: neither acts on the
    /// other's handle.
    #[test]
    fn a_thread_refuses_another_thread_s_handle() {
        let ((mut t0, _rx0), (mut t1, _rx1)) = (net_of_thread(0, 1), net_of_thread(1, 1));
        let h0 = accepted(&mut t0, ConnHandle::from_parts(3, 1));
        let h1 = accepted(&mut t1, ConnHandle::from_parts(3, 1));
        assert_eq!(h0.index(), h1.index());
        assert_ne!(h0, h1);
        assert_eq!(t1.send(h0, b"x"), Err(Error::InvalidHandle));
        assert_eq!(t0.abort(h1), Err(Error::InvalidHandle));
        assert_eq!(t0.send(h0, b"x"), Ok(1));
    }

    /// A send while an open is under way (no credit yet) asks for
    /// `Writable`; a shutdown after it takes the wish back: the open's
    /// completion brings none.
    #[test]
    fn a_shutdown_takes_back_the_writable_a_short_send_asked_for() {
        let (mut net, _rx) = net(1);
        let h = net.connect("10.0.0.2:80".parse().unwrap()).unwrap();
        assert_eq!(net.send(h, b"early"), Err(Error::WouldBlock));
        net.shutdown_write(h).unwrap();
        connected(&mut net, 0, ConnHandle::from_parts(5, 1));
        assert!(
            !net.events.iter().any(|e| matches!(e, Event::Writable(_))),
            "{:?}",
            net.events
        );
    }

    fn tuple() -> FourTuple {
        FourTuple {
            local: "10.0.0.1:80".parse().unwrap(),
            remote: "10.0.0.2:4000".parse().unwrap(),
        }
    }

    /// What the thread sent core `rx` since the last look: sends as
    /// `(handle index, bytes)`, settles as `(index, "settle")`.
    fn sent(net: &mut QpNet, rx: &Receiver<Vec<ToCore>>) -> Vec<(u32, String)> {
        net.flush();
        rx.try_iter()
            .flatten()
            .filter_map(|m| match m {
                ToCore::Send { conn, bytes, .. } => {
                    Some((conn.index(), String::from_utf8(bytes).unwrap()))
                }
                ToCore::Settle { conn, .. } => Some((conn.index(), "settle".into())),
                _ => None,
            })
            .collect()
    }

    fn accepted(net: &mut QpNet, old: ConnHandle) -> ConnHandle {
        net.take(
            0,
            ToApp::Accepted {
                conn: old,
                port: 0,
                tuple: tuple(),
            },
        );
        match net.events.pop_front() {
            Some(Event::Accepted { conn, .. }) => conn,
            e => panic!("{e:?}"),
        }
    }

    /// Core 0 delivers `bytes` for its connection `old`.
    fn data(net: &mut QpNet, old: ConnHandle, bytes: &[u8]) {
        net.take(
            0,
            ToApp::Data {
                conn: old,
                bytes: bytes.to_vec(),
            },
        );
    }

    /// Core 0's connection `old` closed, for `reason`.
    fn closed(net: &mut QpNet, old: ConnHandle, reason: CloseReason) {
        net.take(0, ToApp::Closed { conn: old, reason });
    }

    /// A peer's one-byte segments, each its own message (right-sized by
    /// the core), join the buffer the thread holds: memory follows the
    /// bytes, not a buffer a message; the stream reads whole and in order.
    #[test]
    fn small_messages_join_the_buffer_held_before_them() {
        let (mut net, _rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        let mut first = Vec::with_capacity(BUF);
        first.extend_from_slice(b"head:");
        net.take(
            0,
            ToApp::Data {
                conn: old,
                bytes: first,
            },
        );
        for b in b"0123456789" {
            net.take(
                0,
                ToApp::Data {
                    conn: old,
                    bytes: vec![*b],
                },
            );
        }
        let c = net.conn(h).unwrap();
        assert_eq!((c.rx.len(), c.rx_len), (1, 15), "one buffer holds them all");
        let mut got = vec![0u8; 32];
        let n = net.recv(h, &mut got).unwrap();
        assert_eq!(&got[..n], b"head:0123456789");
        // A large one (a full segment's worth and more) keeps its own.
        net.take(
            0,
            ToApp::Data {
                conn: old,
                bytes: vec![7u8; SMALL_DATA],
            },
        );
        net.take(
            0,
            ToApp::Data {
                conn: old,
                bytes: vec![8u8; 1],
            },
        );
        assert_eq!(net.conn(h).unwrap().rx.len(), 1, "the small one joined it");
    }

    /// Small messages (right-sized by the core) that join a buffer grow it
    /// at most to a pool buffer's size, where doubling took 1500-byte
    /// segments' buffer to 96,000 bytes for 64,500; grown to it, the
    /// buffer goes back to the core's pool once read.
    #[test]
    fn a_buffer_small_messages_join_grows_no_larger_than_a_pool_buffer() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        let pieces = BUF / 1500;
        for _ in 0..pieces {
            data(&mut net, old, &[5u8; 1500]);
        }
        let c = net.conn(h).unwrap();
        assert_eq!((c.rx.len(), c.rx_len), (1, pieces * 1500));
        let held = c.rx[0].capacity();
        assert!(held <= BUF, "{held} bytes held for {}", c.rx_len);
        assert_eq!(net.consume(h, pieces * 1500), Ok(pieces * 1500));
        net.flush();
        let recycled = rx[0]
            .try_iter()
            .flatten()
            .any(|m| matches!(m, ToCore::Recycle(b) if b.capacity() == BUF));
        assert!(recycled, "the buffer was not given back to the pool");
    }

    /// The figures the core sends with the peer's FIN (the connection's
    /// were asked for before) are there at the first asking after end of
    /// stream, as in run to completion: a report at the end has them, in
    /// the handlers of the connection's last events too, once it ended
    /// here (until its `Closed` was dispatched).
    #[test]
    fn the_figures_sent_with_the_peer_s_fin_are_there_at_once() {
        let (mut net, _rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        assert_eq!(net.info(h), Err(Error::WouldBlock), "none asked yet");
        data(&mut net, old, b"bye");
        let info = ConnInfo {
            cwnd: 28_960,
            mss: 1448,
            ..ConnInfo::default()
        };
        net.take(
            0,
            ToApp::PeerClosed {
                conn: old,
                info: Some(info),
            },
        );
        assert_eq!(net.recv(h, &mut [0; 8]), Ok(3));
        assert!(net.is_eof(h));
        let got = net.info(h).expect("the figures at the peer's FIN");
        assert_eq!((got.cwnd, got.mss), (28_960, 1448));
        closed(&mut net, old, CloseReason::Normal);
        assert!(net.conn(h).is_err(), "ended");
        assert_eq!(net.info(h).map(|i| i.cwnd), Ok(28_960));
        net.release(h);
        assert_eq!(net.info(h), Err(Error::InvalidHandle));
    }

    /// Figures asked for in the pass that closes the connection are asked
    /// of its core before the close, not after it with the pass's other
    /// info requests: the core ends a connection closed after its peer's
    /// FIN at once, and would answer nothing for it.
    #[test]
    fn figures_asked_in_the_closing_pass_go_before_the_close() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        assert_eq!(net.info(h), Err(Error::WouldBlock), "none asked yet");
        assert_eq!(net.close(h), Ok(()));
        assert_eq!(requests(&mut net, &rx[0]), [(3, "info"), (3, "close")]);
    }

    /// The core's connection closes normally (both FINs) while bytes it
    /// delivered wait here unread: they stay readable, end of stream
    /// follows them, and `Closed` only once they are read; what the core
    /// no longer has cannot be asked of it (a send fails, no writer waits).
    /// A reset instead ends the connection at once.
    #[test]
    fn bytes_delivered_before_a_normal_close_stay_readable() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        data(&mut net, old, b"last words");
        net.take(
            0,
            ToApp::PeerClosed {
                conn: old,
                info: None,
            },
        );
        // What went while the core had it (the message's cost back).
        net.flush();
        rx[0].try_iter().for_each(drop);
        closed(&mut net, old, CloseReason::Normal);
        assert!(!net.events.iter().any(|e| matches!(e, Event::Closed { .. })));
        assert_eq!(net.send(h, b"x"), Err(Error::InvalidState));
        assert!(!net.want_writable(h));
        let mut got = [0u8; 4];
        assert_eq!(net.recv(h, &mut got), Ok(4));
        assert!(!net.end_drained(), "bytes left");
        let mut rest = [0u8; 16];
        assert_eq!(net.recv(h, &mut rest), Ok(6));
        assert_eq!(&rest[..6], b" words");
        assert!(net.is_eof(h), "end of stream before the handle goes");
        assert_eq!(net.recv(h, &mut rest), Ok(0));
        // Nothing went to the core for a connection it no longer has.
        net.flush();
        assert!(rx[0]
            .try_iter()
            .flatten()
            .all(|m| !matches!(m, ToCore::Consumed { .. } | ToCore::Send { .. })));
        assert!(net.end_drained());
        assert!(matches!(
            net.events.back(),
            Some(Event::Closed { conn, reason: CloseReason::Normal }) if *conn == h
        ));
        assert_eq!(net.recv(h, &mut rest), Err(Error::InvalidHandle));

        // A reset's bytes go with it.
        net.events.clear();
        let old = ConnHandle::from_parts(4, 1);
        let h = accepted(&mut net, old);
        data(&mut net, old, b"gone");
        closed(&mut net, old, CloseReason::Reset);
        assert!(matches!(
            net.events.back(),
            Some(Event::Closed { conn, reason: CloseReason::Reset }) if *conn == h
        ));
    }

    /// A held connection closed by the application with bytes unread is
    /// aborted here, at once: the core has nothing left to tell.
    #[test]
    fn closing_a_held_connection_ends_it_here() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        data(&mut net, old, b"unread");
        closed(&mut net, old, CloseReason::Normal);
        net.close(h).unwrap();
        assert!(matches!(
            net.events.back(),
            Some(Event::Closed { conn, reason: CloseReason::Aborted }) if *conn == h
        ));
        net.flush();
        assert!(rx[0]
            .try_iter()
            .flatten()
            .all(|m| !matches!(m, ToCore::Abort { .. } | ToCore::Close { .. })));
    }

    /// An abort ends the connection here at once, as on the other
    /// backends: later calls find no connection, its `Closed` (`Aborted`)
    /// is queued now, the core is told to reset it, and what the core
    /// still sends of it (data, its peer's close, completions, its own
    /// `Closed`) is dropped.
    #[test]
    fn an_abort_ends_the_connection_here_at_once() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        data(&mut net, old, b"abc");
        net.abort(h).unwrap();
        assert_eq!(net.send(h, b"x"), Err(Error::InvalidHandle));
        assert_eq!(net.state(h), Err(Error::InvalidHandle));
        assert_eq!(net.recv(h, &mut [0u8; 4]), Err(Error::InvalidHandle));
        assert_eq!(net.abort(h), Err(Error::InvalidHandle));
        assert!(matches!(
            net.events.back(),
            Some(Event::Closed { conn, reason: CloseReason::Aborted }) if *conn == h
        ));
        assert_eq!(requests(&mut net, &rx[0]), [(3, "abort")]);
        net.events.clear();
        data(&mut net, old, b"late");
        net.take(
            0,
            ToApp::PeerClosed {
                conn: old,
                info: None,
            },
        );
        net.take(
            0,
            ToApp::Sent {
                conn: old,
                total: 1,
            },
        );
        closed(&mut net, old, CloseReason::Aborted);
        assert!(net.events.is_empty(), "{:?}", net.events);
        assert_eq!(net.open(), 0);
    }

    /// A read into an empty buffer reads nothing: `Ok(0)` only at end of
    /// stream, `WouldBlock` while bytes wait, `InvalidHandle` for a
    /// connection that is gone.
    #[test]
    fn a_read_into_an_empty_buffer_is_end_of_stream_only_at_the_end() {
        let (mut net, _rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        data(&mut net, old, b"abc");
        net.take(
            0,
            ToApp::PeerClosed {
                conn: old,
                info: None,
            },
        );
        assert_eq!(net.recv(h, &mut []), Err(Error::WouldBlock));
        assert_eq!(net.recv(h, &mut [0u8; 8]), Ok(3));
        assert_eq!(net.recv(h, &mut []), Ok(0));
        net.abort(h).unwrap();
        assert_eq!(net.recv(h, &mut []), Err(Error::InvalidHandle));
    }

    /// A close with bytes unread here is an abort (the reset a close with
    /// unread data is): the connection ends at once.
    #[test]
    fn a_close_with_unread_bytes_is_an_abort() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        data(&mut net, old, b"unread");
        net.close(h).unwrap();
        assert_eq!(net.state(h), Err(Error::InvalidHandle));
        assert!(matches!(
            net.events.back(),
            Some(Event::Closed { conn, reason: CloseReason::Aborted }) if *conn == h
        ));
        assert_eq!(requests(&mut net, &rx[0]), [(3, "abort")]);
    }

    /// Bytes that reach the thread after its handler closed the
    /// connection (on their way when it closed) are not handed to it: the
    /// core, whose credit shows them unread, resets the connection.
    #[test]
    fn bytes_after_a_close_are_not_handed_to_the_handler() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        net.close(h).unwrap();
        assert_eq!(requests(&mut net, &rx[0]), [(3, "close")]);
        data(&mut net, old, b"late");
        assert!(net.events.is_empty(), "{:?}", net.events);
        assert_eq!(net.peek(h), Ok(&[][..]));
        closed(&mut net, old, CloseReason::Aborted);
        assert!(matches!(
            net.events.back(),
            Some(Event::Closed { conn, reason: CloseReason::Aborted }) if *conn == h
        ));
    }

    /// An abort while a move is held goes to the core that has the
    /// connection now, not behind the move's settling (the connection is
    /// gone here, and nothing would send it on).
    #[test]
    fn an_abort_during_a_move_reaches_the_new_core() {
        let (mut net, rx) = net(2);
        let (old, new) = (ConnHandle::from_parts(3, 1), ConnHandle::from_parts(7, 1));
        let h = accepted(&mut net, old);
        net.take(
            1,
            ToApp::Moved {
                from: 0,
                old,
                conn: new,
            },
        );
        net.abort(h).unwrap();
        assert_eq!(requests(&mut net, &rx[1]), [(7, "abort")]);
        // The old core's answer finds nothing left to send on.
        net.take(0, ToApp::Settled { conn: old });
        assert_eq!(requests(&mut net, &rx[1]), []);
        assert_eq!(net.open(), 0);
    }

    /// After `close` or `shutdown_write` no `Writable` can come: a handler
    /// asking for one is told so (false), as on every backend
    /// (`Net::want_writable`).
    #[test]
    fn no_writable_is_promised_after_a_close_or_a_shutdown() {
        let (mut net, _rx) = net(1);
        for (i, close) in [(3, true), (4, false)] {
            let old = ConnHandle::from_parts(i, 1);
            let h = accepted(&mut net, old);
            if close {
                net.close(h).unwrap();
            } else {
                net.shutdown_write(h).unwrap();
            }
            assert_eq!(net.send_space(h), Ok(0));
            assert!(!net.want_writable(h));
        }
    }

    /// Every request the core takes (not only sends), with the handle it
    /// names: `(index, what)`.
    fn requests(net: &mut QpNet, rx: &Receiver<Vec<ToCore>>) -> Vec<(u32, &'static str)> {
        net.flush();
        rx.try_iter()
            .flatten()
            .filter_map(|mut m| {
                let what = match &m {
                    ToCore::ShutdownWrite { .. } => "shutdown",
                    ToCore::SetNodelay { .. } => "nodelay",
                    ToCore::Close { .. } => "close",
                    ToCore::Abort { .. } => "abort",
                    ToCore::Send { .. } => "send",
                    ToCore::Info { .. } => "info",
                    _ => return None,
                };
                Some((m.conn_mut()?.index(), what))
            })
            .collect()
    }

    fn connected(net: &mut QpNet, token: u64, conn: ConnHandle) {
        net.take(
            0,
            ToApp::Connected {
                token,
                conn,
                tuple: tuple(),
            },
        );
    }

    /// Requests made while an active open is under way wait for the core
    /// to name the connection, then go in order; a close or an abort then
    /// ends it at once (as the stack's in SYN-SENT), and a connection the
    /// core opens after all is reset.
    #[test]
    fn requests_while_opening_wait_and_a_close_ends_the_open() {
        let (mut net, rx) = net(1);
        let h = net.connect("10.0.0.2:80".parse().unwrap()).unwrap();
        net.set_nodelay(h, true).unwrap();
        net.shutdown_write(h).unwrap();
        assert_eq!(requests(&mut net, &rx[0]), []);
        let conn = ConnHandle::from_parts(5, 1);
        connected(&mut net, 0, conn);
        assert_eq!(
            requests(&mut net, &rx[0]),
            [(5, "nodelay"), (5, "shutdown")]
        );
        assert!(matches!(net.events.pop_front(), Some(Event::Connected(c)) if c == h));

        for (token, abort) in [(1, false), (2, true)] {
            let h = net.connect("10.0.0.2:80".parse().unwrap()).unwrap();
            if abort {
                net.abort(h).unwrap();
            } else {
                net.close(h).unwrap();
            }
            let want = if abort {
                CloseReason::Aborted
            } else {
                CloseReason::Normal
            };
            assert!(matches!(
                net.events.pop_front(),
                Some(Event::Closed { conn, reason }) if conn == h && reason == want
            ));
            net.release(h);
            let conn = ConnHandle::from_parts(6 + token as u32, 1);
            connected(&mut net, token, conn);
            assert_eq!(requests(&mut net, &rx[0]), [(conn.index(), "abort")]);
            assert!(net.events.is_empty());
        }
    }

    /// The new core could not take the connection in: the thread ends it
    /// (its requests bounced meanwhile go nowhere) and settles with the
    /// old core, which forgets it.
    #[test]
    fn a_move_the_new_core_could_not_take_ends_the_connection() {
        let (mut net, rx) = net(2);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        net.send(h, b"a").unwrap();
        assert_eq!(sent(&mut net, &rx[0]), [(3, "a".into())]);
        net.take(
            0,
            ToApp::Bounced {
                conn: old,
                request: ToCore::Send {
                    conn: old,
                    bytes: b"a".to_vec(),
                    charge: charge(),
                },
            },
        );
        net.take(1, ToApp::MoveFailed { from: 0, old });
        assert!(matches!(
            net.events.back(),
            Some(Event::Closed { conn, reason: CloseReason::Aborted }) if *conn == h
        ));
        assert_eq!(sent(&mut net, &rx[0]), [(3, "settle".into())]);
        assert_eq!(sent(&mut net, &rx[1]), []);
        // The old core's answer finds nothing left.
        net.take(0, ToApp::Settled { conn: old });
        assert_eq!(net.open(), 0);
    }

    /// A send the credit takes only part of asks for `Writable` (the
    /// `Net::send` contract): the handler holding the rest is woken when
    /// the core's completions renew the credit.
    #[test]
    fn a_short_send_is_followed_by_writable() {
        let (mut net, _rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        let big = vec![1u8; TX_CREDIT + 10];
        assert_eq!(net.send(h, &big), Ok(TX_CREDIT));
        net.take(
            0,
            ToApp::Sent {
                conn: old,
                total: 4096,
            },
        );
        assert!(matches!(net.events.pop_front(), Some(Event::Writable(c)) if c == h));
    }

    /// A reader that always leaves a few bytes (a parser holding a partial
    /// frame) behind small messages: what the thread holds stays within
    /// what is unread plus a pool buffer, however many bytes went through.
    #[test]
    fn small_messages_behind_a_reader_that_never_empties_stay_bounded() {
        let (mut net, _rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        data(&mut net, old, b"xyz");
        for _ in 0..20_000 {
            net.take(
                0,
                ToApp::Data {
                    conn: old,
                    bytes: vec![b'y'; 100],
                },
            );
            let c = net.conn(h).unwrap();
            let whole = (c.rx_len / 4) * 4;
            net.consume(h, whole).unwrap();
            let c = net.conn(h).unwrap();
            let held: usize = c.rx.iter().map(Vec::len).sum();
            assert!(
                held <= BUF + c.rx_len,
                "{held} held for {} unread",
                c.rx_len
            );
        }
    }

    /// A connection the core closed normally with bytes the thread then
    /// read to the end, closed by its handler: a normal close (with bytes
    /// left, an abort); and its state meanwhile is no opening's.
    #[test]
    fn a_held_connection_read_to_the_end_closes_normally() {
        for read_all in [true, false] {
            let (mut net, _rx) = net(1);
            let old = ConnHandle::from_parts(3, 1);
            let h = accepted(&mut net, old);
            data(&mut net, old, b"abc");
            net.take(
                0,
                ToApp::PeerClosed {
                    conn: old,
                    info: None,
                },
            );
            closed(&mut net, old, CloseReason::Normal);
            assert_eq!(net.state(h), Ok(State::Closed));
            if read_all {
                assert_eq!(net.recv(h, &mut [0u8; 8]), Ok(3));
            }
            net.close(h).unwrap();
            let want = if read_all {
                CloseReason::Normal
            } else {
                CloseReason::Aborted
            };
            assert!(matches!(
                net.events.back(),
                Some(Event::Closed { conn, reason }) if *conn == h && *reason == want
            ));
        }
    }

    #[test]
    fn requests_bounced_by_the_old_core_go_to_the_new_one_before_later_ones() {
        let (mut net, rx) = net(2);
        let (old, new) = (ConnHandle::from_parts(3, 1), ConnHandle::from_parts(7, 1));
        let h = accepted(&mut net, old);
        net.send(h, b"a").unwrap();
        net.send(h, b"b").unwrap();
        assert_eq!(sent(&mut net, &rx[0]), [(3, "a".into()), (3, "b".into())]);
        // Core 0 exported the connection before it read "b"; core 1 took it.
        net.take(
            0,
            ToApp::Bounced {
                conn: old,
                request: ToCore::Send {
                    conn: old,
                    bytes: b"b".to_vec(),
                    charge: charge(),
                },
            },
        );
        net.take(
            1,
            ToApp::Moved {
                from: 0,
                old,
                conn: new,
            },
        );
        // Written after the move was told: held until core 0 settled.
        net.send(h, b"c").unwrap();
        assert_eq!(sent(&mut net, &rx[0]), [(3, "settle".into())]);
        assert!(sent(&mut net, &rx[1]).is_empty());
        assert_eq!(net.conn_placement(h).unwrap().queue, 1);
        net.take(0, ToApp::Settled { conn: old });
        assert_eq!(sent(&mut net, &rx[1]), [(7, "b".into()), (7, "c".into())]);
        // From now on straight to core 1, and core 0's name is forgotten.
        net.send(h, b"d").unwrap();
        assert_eq!(sent(&mut net, &rx[1]), [(7, "d".into())]);
        closed(&mut net, old, CloseReason::Normal);
        assert!(net.events.is_empty(), "{:?}", net.events);
        net.take(
            1,
            ToApp::Closed {
                conn: new,
                reason: CloseReason::Normal,
            },
        );
        assert!(matches!(net.events.pop_front(), Some(Event::Closed { conn, .. }) if conn == h));
    }

    /// The hook the thread's loop set (`AppPort::set_on_info`) hears a
    /// connection's figures as its core answers the latest request for
    /// them, with the bytes on their way between core and thread: not the
    /// answer to a request sent before a later one (older than what the
    /// later call asked for), and an answer without figures (the core
    /// could not tell) is told too, with the last figures known.
    #[test]
    fn the_answer_to_the_latest_info_request_is_told_to_the_hook() {
        let (mut net, rx) = net(1);
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let t = told.clone();
        net.on_info = Some(Box::new(move |h, info: Option<ConnInfo>| {
            t.lock()
                .unwrap()
                .push((h, info.map(|i| (i.cwnd, i.readable))));
        }));
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        let asked = |net: &mut QpNet| {
            net.flush();
            rx[0]
                .try_iter()
                .flatten()
                .filter(|m| matches!(m, ToCore::Info { .. }))
                .count()
        };
        let answer = |net: &mut QpNet, cwnd: Option<usize>| {
            let info = cwnd.map(|cwnd| ConnInfo {
                cwnd,
                ..ConnInfo::default()
            });
            net.take(0, ToApp::Info { conn: old, info });
        };
        // Two passes' calls: two requests out.
        assert_eq!(net.info(h), Err(Error::WouldBlock));
        assert_eq!(asked(&mut net), 1);
        let _ = net.info(h);
        assert_eq!(asked(&mut net), 1);
        data(&mut net, old, b"abc");
        answer(&mut net, Some(10));
        assert!(
            told.lock().unwrap().is_empty(),
            "the first request's answer"
        );
        answer(&mut net, Some(20));
        assert_eq!(*told.lock().unwrap(), [(h, Some((20, 3)))]);
        // An answer without figures: told, with the last ones known.
        let _ = net.info(h);
        assert_eq!(asked(&mut net), 1);
        answer(&mut net, None);
        assert_eq!(told.lock().unwrap()[1], (h, Some((20, 3))));
    }

    /// A move told by the new core reaches the hook the thread's loop set
    /// (`AppPort::set_on_move`), with the thread's handle and the new
    /// core's placement; one of a connection ended here meanwhile does not.
    #[test]
    fn a_move_is_told_to_the_hook_with_the_new_placement() {
        let (mut net, _rx) = net(2);
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let t = told.clone();
        net.on_move = Some(Box::new(move |h, p: Placement| {
            t.lock().unwrap().push((h, p.queue));
        }));
        let (old, new) = (ConnHandle::from_parts(3, 1), ConnHandle::from_parts(7, 1));
        let h = accepted(&mut net, old);
        let moved = |old, conn| ToApp::Moved { from: 0, old, conn };
        net.take(1, moved(old, new));
        assert_eq!(*told.lock().unwrap(), [(h, 1)]);
        assert_eq!(net.conn_placement(h).unwrap().queue, 1);
        // Gone here before its move was told: nothing to tell.
        let (old, new) = (ConnHandle::from_parts(4, 1), ConnHandle::from_parts(8, 1));
        let h2 = accepted(&mut net, old);
        net.abort(h2).unwrap();
        net.take(1, moved(old, new));
        assert_eq!(told.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_bounce_after_the_move_was_told_still_goes_first() {
        let (mut net, rx) = net(2);
        let (old, new) = (ConnHandle::from_parts(1, 1), ConnHandle::from_parts(2, 1));
        let h = accepted(&mut net, old);
        net.send(h, b"a").unwrap();
        let _ = sent(&mut net, &rx[0]);
        net.take(
            1,
            ToApp::Moved {
                from: 0,
                old,
                conn: new,
            },
        );
        net.send(h, b"b").unwrap();
        net.take(
            0,
            ToApp::Bounced {
                conn: old,
                request: ToCore::Send {
                    conn: old,
                    bytes: b"a".to_vec(),
                    charge: charge(),
                },
            },
        );
        assert!(sent(&mut net, &rx[1]).is_empty());
        net.take(0, ToApp::Settled { conn: old });
        assert_eq!(sent(&mut net, &rx[1]), [(2, "a".into()), (2, "b".into())]);
    }

    #[test]
    fn a_second_move_before_the_first_settled_waits_for_the_first_old_core() {
        let (mut net, rx) = net(3);
        let (h0, h1, h2) = (
            ConnHandle::from_parts(1, 1),
            ConnHandle::from_parts(2, 1),
            ConnHandle::from_parts(3, 1),
        );
        let h = accepted(&mut net, h0);
        net.send(h, b"a").unwrap();
        let _ = sent(&mut net, &rx[0]);
        // Core 0 -> core 1 -> core 2 before core 0 settled.
        let moved = |from, old, conn| ToApp::Moved { from, old, conn };
        net.take(1, moved(0, h0, h1));
        net.send(h, b"b").unwrap();
        net.take(2, moved(1, h1, h2));
        net.send(h, b"c").unwrap();
        assert_eq!(sent(&mut net, &rx[1]), [(2, "settle".into())]);
        // Core 1 answers first: it had nothing to bounce, nothing moves yet.
        net.take(1, ToApp::Settled { conn: h1 });
        assert!(sent(&mut net, &rx[2]).is_empty());
        let a = ToCore::Send {
            conn: h0,
            bytes: b"a".to_vec(),
            charge: charge(),
        };
        net.take(
            0,
            ToApp::Bounced {
                conn: h0,
                request: a,
            },
        );
        net.take(0, ToApp::Settled { conn: h0 });
        assert_eq!(
            sent(&mut net, &rx[2]),
            [(3, "a".into()), (3, "b".into()), (3, "c".into())]
        );
    }

    #[test]
    fn a_connection_ended_before_its_move_was_told_is_reset_on_the_new_core() {
        let (mut net, rx) = net(2);
        let (old, new) = (ConnHandle::from_parts(1, 1), ConnHandle::from_parts(2, 1));
        let h = accepted(&mut net, old);
        closed(&mut net, old, CloseReason::Reset);
        net.release(h);
        net.take(
            1,
            ToApp::Moved {
                from: 0,
                old,
                conn: new,
            },
        );
        net.flush();
        let to_new: Vec<ToCore> = rx[1].try_iter().flatten().collect();
        assert!(
            matches!(to_new[..], [ToCore::Abort { conn }] if conn == new),
            "{to_new:?}"
        );
        // And the old core hears it may forget the connection.
        assert_eq!(sent(&mut net, &rx[0]), [(1, "settle".into())]);
    }

    /// A move the new core could not take, told after the handler ended
    /// the connection (an abort while the move failed): the thread still
    /// settles with the old core, which would otherwise keep the old name
    /// and bounce requests naming it forever.
    #[test]
    fn a_failed_move_of_a_connection_ended_meanwhile_still_settles() {
        let (mut net, rx) = net(2);
        let old = ConnHandle::from_parts(3, 1);
        let h = accepted(&mut net, old);
        net.abort(h).unwrap();
        net.take(1, ToApp::MoveFailed { from: 0, old });
        assert_eq!(sent(&mut net, &rx[0]), [(3, "settle".into())]);
        assert_eq!(sent(&mut net, &rx[1]), []);
        net.take(0, ToApp::Settled { conn: old });
        assert_eq!(net.open(), 0);
    }

    /// Taking a small data message gives the credit the core charged for
    /// its place in the queue back at once, read or not (reads give back
    /// bytes); a large one costs nothing, and nothing goes back for it
    /// until it is read.
    #[test]
    fn a_small_message_s_cost_goes_back_as_it_is_taken() {
        let (mut net, rx) = net(1);
        let old = ConnHandle::from_parts(3, 1);
        let _h = accepted(&mut net, old);
        data(&mut net, old, b"x");
        data(&mut net, old, b"y");
        net.take(
            0,
            ToApp::Data {
                conn: old,
                bytes: vec![0; SMALL_DATA],
            },
        );
        net.flush();
        let back: Vec<usize> = rx[0]
            .try_iter()
            .flatten()
            .filter_map(|m| match m {
                ToCore::Consumed { bytes, .. } => Some(bytes),
                _ => None,
            })
            .collect();
        assert_eq!(back, [2 * message_cost(1)]);
        assert_eq!(message_cost(SMALL_DATA), 0);
    }

    /// Sends stay within the core's send memory, whatever the number of
    /// connections: a send that finds it short takes what is left (a
    /// short send, `Writable` to follow) and the connection waits,
    /// counted; one that finds others waiting queues behind them. Memory
    /// the core gives back (the stack took the bytes) goes to them in the
    /// order they began to wait.
    #[test]
    fn sends_stay_within_the_core_s_send_memory_and_wait_their_turn() {
        let memory = Arc::new(vec![CoreMemory::new(RX_MEMORY, 100)]);
        let (mut net, rx, _answers) = net_with(0, 1, memory.clone());
        let [a, b, c] = [3, 4, 5].map(|i| accepted(&mut net, ConnHandle::from_parts(i, 1)));
        assert_eq!(net.send(a, &[1; 80]), Ok(80));
        assert_eq!(net.send(b, &[2; 50]), Ok(20));
        assert_eq!(net.send_space(c), Ok(0));
        assert_eq!(net.send(c, &[3; 10]), Err(Error::WouldBlock));
        let report = memory[0].report();
        assert_eq!((report.tx_held, report.tx_waits), (100, 2), "{report:?}");
        // The stack takes a's bytes: the core drops their charge.
        net.flush();
        let mut requests: Vec<ToCore> = rx[0].try_iter().flatten().collect();
        requests.retain(|m| !matches!(m, ToCore::Send { bytes, .. } if bytes.len() == 80));
        net.grant_writable();
        assert!(
            matches!(net.events.iter().collect::<Vec<_>>()[..], [Event::Writable(h)] if *h == b),
            "{:?}",
            net.events
        );
        net.events.clear();
        // b's turn: it sends before c, which still waits.
        assert_eq!(net.send(b, &[2; 30]), Ok(30));
        assert_eq!(net.send(c, &[3; 10]), Err(Error::WouldBlock));
        drop(requests);
        net.flush();
        rx[0].try_iter().for_each(drop);
        net.grant_writable();
        assert!(
            matches!(net.events.iter().collect::<Vec<_>>()[..], [Event::Writable(h)] if *h == c),
            "{:?}",
            net.events
        );
        assert_eq!(net.send(c, &[3; 10]), Ok(10));
    }

    /// A connect the core's stack refuses at once fails here with its
    /// error, as in run to completion, and leaves no connection; one the
    /// core takes is a connection under way.
    #[test]
    fn a_connect_refused_at_once_returns_the_core_s_error() {
        let memory = Arc::new(vec![CoreMemory::new(RX_MEMORY, TX_MEMORY)]);
        let (mut net, rx, answers) = net_with(0, 1, memory);
        let requests = rx[0].clone();
        // Core 0: the first open finds no local port, the second goes.
        let core = std::thread::spawn(move || {
            for result in [Err(Error::AddrInUse), Ok(())] {
                let batch = requests.recv_timeout(Duration::from_secs(5)).unwrap();
                let Some(ToCore::Connect { token, .. }) = batch.into_iter().last() else {
                    panic!("no connect");
                };
                answers.send((0, token, result)).unwrap();
            }
        });
        let remote = "10.0.0.2:80".parse().unwrap();
        assert_eq!(net.connect(remote), Err(Error::AddrInUse));
        assert_eq!(net.open(), 0);
        assert!(net.events.is_empty(), "{:?}", net.events);
        let h = net.connect(remote).unwrap();
        assert_eq!(net.state(h), Ok(State::SynSent));
        core.join().unwrap();
        // The failed open's event, on its way meanwhile, finds nothing.
        let reason = CloseReason::Aborted;
        net.take(0, ToApp::ConnectFailed { token: 0, reason });
        assert!(net.events.is_empty(), "{:?}", net.events);
    }
}
