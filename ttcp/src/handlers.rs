//! The measurement's handlers, one set for every backend and execution
//! model: `Rx` counts (or echoes) what the receiver's connections bring,
//! `Tx` opens the sender's connections and sends bulk data or plays
//! ping-pong (latency and overlap modes). They run on flowlane's TCP on
//! AF_XDP ([`crate::flowlane`]) and on kernel sockets ([`crate::kernel`]),
//! inline on the network cores (run to completion) or on application
//! threads (queue-pair mode), through [`flowlane_app::Net`] alone.
//!
//! Each core (or application thread) counts in its own [`WorkerCounters`]
//! (relaxed atomics written by that thread only), which the measuring
//! thread reads when the run ends.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowlane_app::{
    CloseReason, CongestionAlgorithm, ConnHandle, ConnHandler, ConnState, Net, Setup, SetupExt,
    State, Wake,
};
use flowlane_dataplane::counters;
use hdrhistogram::Histogram;

use crate::backend::{rtt_histogram, OverlapSums, Phase, Shared, ThreadStats};
use crate::plan::Plan;
use crate::sync::Mode;

/// One core's counts. Indexed by [`Phase`], so not a named counter set;
/// aligned so that two cores never share a cache line.
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Payload bytes received (or echoed in latency mode: received) by [`Phase`].
    pub bytes: [AtomicU64; 5],
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Latency/overlap senders: round-trip times of measured iterations.
    rtt: Mutex<Option<Histogram<u64>>>,
    /// Overlap senders: the measured iterations' sums.
    overlap: Mutex<OverlapSums>,
}

impl WorkerCounters {
    /// Adds `n` bytes to `phase` (single writer: the core that owns it).
    pub fn add(&self, phase: Phase, n: usize) {
        counters::add(&self.bytes[phase as usize], n as u64);
    }

    /// The counts now, as a [`ThreadStats`].
    pub fn stats(&self) -> ThreadStats {
        let mut st = ThreadStats::default();
        for (o, c) in st.bytes.iter_mut().zip(&self.bytes) {
            *o = c.load(Ordering::Relaxed);
        }
        st.connections = self.connections.load(Ordering::Relaxed) as usize;
        st.rtt_ns = self.rtt.lock().unwrap_or_else(|e| e.into_inner()).clone();
        st.overlap = *self.overlap.lock().unwrap_or_else(|e| e.into_inner());
        st
    }
}

/// How a backend registers the measurement's handlers on one core (or
/// application thread): with the core's counters and the run's state.
pub trait HandlerSetup:
    Fn(&mut dyn Setup, &Arc<WorkerCounters>, &Arc<Shared>) -> Result<(), String> + Send + Sync + 'static
{
}

impl<F> HandlerSetup for F where
    F: Fn(&mut dyn Setup, &Arc<WorkerCounters>, &Arc<Shared>) -> Result<(), String>
        + Send
        + Sync
        + 'static
{
}

/// The receiver's set-up: an `Rx` listening on every data port.
pub fn receiver(plan: &Plan) -> impl HandlerSetup {
    let ports: Vec<u16> = (0..plan.params.ports)
        .map(|p| plan.params.base_port + p)
        .collect();
    let echo = plan.params.mode != Mode::Throughput;
    let buf_len = plan.params.buffer.max(plan.params.msg_size);
    let local_ip = plan.addr;
    let congestion = Congestion::of(plan);
    let no_sync = plan.no_sync;
    move |h: &mut dyn Setup, w: &Arc<WorkerCounters>, sh: &Arc<Shared>| {
        for &port in &ports {
            let rx = Rx {
                shared: sh.clone(),
                w: w.clone(),
                echo,
                local: SocketAddr::new(local_ip, port),
                buf: vec![0; buf_len],
                congestion: congestion.clone(),
                no_sync,
            };
            h.listen(port, rx)
                .map_err(|e| format!("core {} port {port}: {e}", h.queue()))?;
        }
        Ok(())
    }
}

/// The sender's set-up for `cores` cores (or application threads): core
/// `q` opens its share of the plan's connections (`connections / cores`,
/// core 0 the remainder), connection k of the run to data port k mod P.
/// Every core gets its `Tx`, one with no share too: a connection moved to
/// another core with its RSS bucket goes on there (`Tx::on_import`).
pub fn sender(plan: &Plan, cores: u32) -> impl HandlerSetup {
    let remote = plan.addr;
    let total = plan.connections();
    let (base, nports) = (plan.params.base_port, plan.params.ports);
    let buffer = plan.params.buffer;
    let ping = (plan.params.mode != Mode::Throughput).then(|| PingPong {
        msg: vec![0x11; plan.params.msg_size],
        compute: (plan.params.mode == Mode::Overlap)
            .then(|| Duration::from_micros(plan.overlap_us)),
        ..PingPong::default()
    });
    let cores = cores.max(1) as usize;
    let congestion = Congestion::of(plan);
    move |h: &mut dyn Setup, w: &Arc<WorkerCounters>, sh: &Arc<Shared>| {
        let q = h.queue() as usize;
        let share = total / cores;
        let n = share + if q == 0 { total % cores } else { 0 };
        let first = if q == 0 { 0 } else { share * q + total % cores };
        let to: Vec<SocketAddr> = (0..n)
            .map(|k| {
                let port = base + ((first + k) % usize::from(nports)) as u16;
                SocketAddr::new(remote, port)
            })
            .collect();
        // On every core, opening none where its share is none: a bucket
        // moved here brings its connections to the handler of the same
        // index (a core without it aborted them), as bulk-source's.
        h.add(Tx {
            shared: sh.clone(),
            w: w.clone(),
            to,
            conns: Vec::new(),
            sending: false,
            closed: false,
            buf: vec![0x5a; buffer],
            ping: ping.clone(),
            pings: Vec::new(),
            ready: VecDeque::new(),
            queued: HashSet::new(),
            wake: None,
            ticks: 0,
            in_tick: false,
            congestion: congestion.clone(),
            opening: HashMap::new(),
        });
        Ok(())
    }
}

/// `--congestion`, set on every data connection as it opens: kernel
/// sockets run the system's default otherwise (flowlane's stack runs the
/// flag's already: setting it again changes nothing), so that both
/// backends run what the flag says. A connection that refuses it fails
/// the run (`kernel::start` checks beforehand that sockets take it).
#[derive(Debug, Clone)]
struct Congestion {
    alg: CongestionAlgorithm,
    /// As the flag names it.
    name: String,
}

impl Congestion {
    fn of(plan: &Plan) -> Congestion {
        Congestion {
            alg: plan.flowlane.data_path.congestion.algorithm(),
            name: plan.congestion_name(),
        }
    }

    /// Sets it on `conn`; the run fails if the data path refuses.
    fn set(&self, net: &mut dyn Net, conn: ConnHandle, shared: &Shared) {
        if let Err(e) = net.set_congestion(conn, self.alg) {
            shared.fail(format!(
                "--congestion {}: a data connection refused it ({e})",
                self.name
            ));
        }
    }
}

/// How a data connection that ended early ended, in words: when
/// (`phase`) and how (`reason`), for the run's error.
fn ended_early_words(phase: Phase, reason: CloseReason) -> String {
    let when = match phase {
        Phase::Pre => "before the test started",
        Phase::Warmup => "in the warm-up",
        Phase::Measured => "in the measured window",
        Phase::Cooldown => "in the cool-down",
        Phase::Post => "after the cool-down",
    };
    let how = match reason {
        CloseReason::Normal => "closed by the peer",
        CloseReason::Reset => "reset by the peer",
        CloseReason::Timeout => "timed out",
        CloseReason::Aborted => "aborted here",
        CloseReason::Unreachable(_) => "unreachable: ICMP destination unreachable",
    };
    format!("a data connection ended {when} ({how})")
}

/// Without sync (`-N`) each end takes t0 on its own (the receiver at its
/// first accept, the sender once all its connections are up), a few
/// milliseconds apart either way: a sender's connections that end this
/// close to the end of the receiver's measured window ended at the
/// sender's own end, not early.
const NO_SYNC_SLACK: Duration = Duration::from_millis(250);

/// Busy computation for `d` (the "application work" of the overlap test).
pub fn compute_for(d: Duration) -> Duration {
    let s = Instant::now();
    let mut x: u64 = 1;
    while s.elapsed() < d {
        for _ in 0..64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
    }
    std::hint::black_box(x);
    s.elapsed()
}

/// Latency and overlap modes: one message at a time on each of the
/// core's connections (one `PingPong` each); the receiver echoes it. An
/// iteration's round trip runs from its send to the last byte of the
/// echo.
///
/// In overlap mode the sender computes for `compute` once the message is
/// out: once the data path took all of it (the connection's send space
/// is back to what it was before the send). In queue-pair mode that is
/// when the core reports it took the bytes (`Sent`), which comes after
/// the pass that queued the send handed it over: the compute runs on a
/// later pass (its `on_tick`, or the echo's `on_data`), never in the
/// callback that sent, where the message would still wait in the
/// thread's queue. (Run to completion is refused for overlap senders,
/// `RunArgs::plan`: the compute would hold the very loop that receives.)
///
/// The reply counts as complete when the compute ended if the thread
/// has all of it by its first pass after the compute: an application
/// thread sees what its core delivered only between passes, so a reply
/// that arrived during the compute waits in its queue until then. So
/// that this pass comes at once rather than when the reply does, the
/// thread asks its core for the connection's figures (`Net::info`) at
/// the compute's end: the core's answer, queued behind whatever it
/// delivered before, wakes the thread.
#[derive(Debug, Clone)]
struct PingPong {
    msg: Vec<u8>,
    compute: Option<Duration>,
    conn: Option<ConnHandle>,
    /// An iteration is under way.
    busy: bool,
    sent: usize,
    got: usize,
    /// The connection's send space before the iteration's send: the
    /// message is out once it is back.
    space0: usize,
    t_send: Instant,
    phase: Phase,
    computed: bool,
    /// The reply counts as complete at the compute's end while fewer
    /// than this many `on_tick`s ran (the first pass after the compute).
    tick_limit: u64,
    compute_ns: u64,
    t_after_compute: Instant,
    done_at_compute_end: bool,
}

impl Default for PingPong {
    fn default() -> PingPong {
        let now = Instant::now();
        PingPong {
            msg: Vec::new(),
            compute: None,
            conn: None,
            busy: false,
            sent: 0,
            got: 0,
            space0: 0,
            t_send: now,
            phase: Phase::Pre,
            computed: false,
            tick_limit: 0,
            compute_ns: 0,
            t_after_compute: now,
            done_at_compute_end: false,
        }
    }
}

/// A core's sender handler: opens its connections, then from t0 sends
/// bulk data on all of them (throughput) or plays ping-pong on each
/// (latency, overlap), until the end of the cool-down.
struct Tx {
    shared: Arc<Shared>,
    w: Arc<WorkerCounters>,
    to: Vec<SocketAddr>,
    conns: Vec<ConnHandle>,
    sending: bool,
    closed: bool,
    buf: Vec<u8>,
    /// Latency and overlap modes: the template of each connection's
    /// ping-pong (`None`: throughput mode).
    ping: Option<PingPong>,
    /// Each connected connection's ping-pong.
    pings: Vec<PingPong>,
    /// Throughput mode: connections that can take more, served one
    /// buffer each in turn (as a socket loop writes its ready sockets).
    ready: VecDeque<ConnHandle>,
    queued: HashSet<ConnHandle>,
    /// Makes the core pass again while connections are ready.
    wake: Option<Arc<dyn Wake>>,
    /// `on_tick`s so far (one a pass), and whether one runs now.
    ticks: u64,
    in_tick: bool,
    congestion: Congestion,
    /// Connections opened here and not connected yet, with where to: a
    /// refusal names the address.
    opening: HashMap<ConnHandle, SocketAddr>,
}

/// What a `Tx` connection takes to another core when its RSS bucket moves
/// there (`on_export`, `on_import`).
struct MovedConn {
    /// Its ping-pong (latency and overlap modes, once connected), its
    /// `tick_limit` counted from the export: each core counts its own
    /// ticks.
    ping: Option<PingPong>,
    /// The run's end closed it already.
    closed: bool,
}

impl Tx {
    /// Throughput mode: `conn` can take more.
    fn fill(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if !self.sending || self.closed || self.ping.is_some() {
            return;
        }
        if self.queued.insert(conn) {
            self.ready.push_back(conn);
        }
        self.pump(net);
    }

    /// Throughput mode: one buffer to each ready connection in turn;
    /// those still ready stay queued, and the core is asked to pass again.
    fn pump(&mut self, net: &mut dyn Net) {
        for _ in 0..self.ready.len() {
            let Some(conn) = self.ready.pop_front() else {
                break;
            };
            let space = net.send_space(conn).unwrap_or(0).min(self.buf.len());
            let sent = if space == 0 {
                0
            } else {
                net.send(conn, &self.buf[..space]).unwrap_or(0)
            };
            if sent > 0 {
                self.w.add(self.shared.phase_at(Instant::now()), sent);
            }
            if sent > 0 && net.send_space(conn).unwrap_or(0) > 0 {
                self.ready.push_back(conn);
            } else {
                self.queued.remove(&conn);
                net.want_writable(conn);
            }
        }
        if !self.ready.is_empty() {
            if self.wake.is_none() {
                self.wake = net.waker();
            }
            if let Some(w) = &self.wake {
                w.wake();
            }
        }
    }

    /// Ping-pong: starts an iteration on every idle connection.
    fn ping_all(&mut self, net: &mut dyn Net) {
        for i in 0..self.pings.len() {
            self.ping(net, i);
        }
    }

    /// Ping-pong: starts the next iteration on connection `i`, unless the
    /// run is over.
    fn ping(&mut self, net: &mut dyn Net, i: usize) {
        let Some(p) = self.pings.get_mut(i) else {
            return;
        };
        if !self.sending || self.closed || p.busy {
            return;
        }
        let Some(conn) = p.conn else { return };
        let now = Instant::now();
        let phase = self.shared.phase_at(now);
        if phase == Phase::Post || self.shared.stopping() {
            return;
        }
        p.busy = true;
        p.sent = 0;
        p.got = 0;
        p.space0 = net.send_space(conn).unwrap_or(0);
        p.t_send = now;
        p.phase = phase;
        p.computed = false;
        p.compute_ns = 0;
        p.done_at_compute_end = false;
        self.pong(net, i);
    }

    /// Ping-pong on connection `i`: sends what is left of the message,
    /// computes once the data path took all of it (overlap), reads the
    /// echo, and ends the iteration once all of it came.
    fn pong(&mut self, net: &mut dyn Net, i: usize) {
        let Some(p) = self.pings.get_mut(i) else {
            return;
        };
        let Some(conn) = p.conn.filter(|_| p.busy) else {
            return;
        };
        let m = p.msg.len();
        while p.sent < m {
            match net.send(conn, &p.msg[p.sent..]) {
                Ok(n) => p.sent += n,
                Err(_) => {
                    net.want_writable(conn);
                    break;
                }
            }
        }
        let read = |net: &mut dyn Net, p: &mut PingPong| {
            while p.got < m {
                let n = match net.peek(conn) {
                    Ok(d) if !d.is_empty() => d.len().min(m - p.got),
                    _ => break,
                };
                p.got += net.consume(conn, n).unwrap_or(0);
            }
        };
        read(net, p);
        if let Some(d) = p.compute.filter(|_| p.sent == m && !p.computed) {
            // Out once the data path took it all (an echo complete
            // already says so too).
            let out = p.got == m || net.send_space(conn).unwrap_or(0) >= p.space0;
            if !out {
                return;
            }
            p.computed = true;
            p.compute_ns = compute_for(d).as_nanos() as u64;
            p.t_after_compute = Instant::now();
            // This pass's tick is still to come when the compute ran
            // outside it: the first pass after is the one after that.
            p.tick_limit = self.ticks + if self.in_tick { 1 } else { 2 };
            // Wakes the thread soon (queue-pair mode: the core answers).
            let _ = net.info(conn);
            read(net, p);
        }
        if p.sent < m || p.got < m || (p.compute.is_some() && !p.computed) {
            return;
        }
        p.done_at_compute_end = p.compute.is_some() && self.ticks < p.tick_limit;
        let t_done = Instant::now();
        p.busy = false;
        self.w.add(p.phase, 2 * m);
        if p.phase == Phase::Measured {
            let rtt = (t_done - p.t_send).as_nanos() as u64;
            if p.compute.is_some() {
                // Overlap mode: the iteration holds the compute, so it is
                // no round-trip time; its figures are the overlap's.
                let mut o = self.w.overlap.lock().unwrap_or_else(|e| e.into_inner());
                o.iterations += 1;
                o.compute_ns += p.compute_ns;
                o.total_ns += rtt;
                o.wait_ns += (t_done - p.t_after_compute).as_nanos() as u64;
                o.reply_done_at_compute_end += u64::from(p.done_at_compute_end);
            } else {
                let mut h = self.w.rtt.lock().unwrap_or_else(|e| e.into_inner());
                let _ = h.get_or_insert_with(rtt_histogram).record(rtt.max(1));
            }
        }
        self.ping(net, i);
    }

    /// `on_tick`'s work.
    fn tick(&mut self, net: &mut dyn Net) {
        if self.closed {
            return;
        }
        let ph = self.shared.phase_at(Instant::now());
        if ph == Phase::Post || self.shared.stopping() {
            self.closed = true;
            for &c in &self.conns {
                let _ = net.close(c);
            }
            return;
        }
        if !self.sending && ph != Phase::Pre {
            self.sending = true;
            if self.ping.is_some() {
                self.ping_all(net);
            } else {
                for c in self.conns.clone() {
                    self.fill(net, c);
                }
            }
        } else if self.ping.is_none() {
            self.pump(net);
        } else {
            // Overlap: a message the data path took since the pass that
            // sent it gets its compute now.
            for i in 0..self.pings.len() {
                let p = &self.pings[i];
                if p.compute.is_some() && p.busy && !p.computed {
                    self.pong(net, i);
                }
            }
        }
    }

    /// The ping-pong of `conn`, by index.
    fn ping_of(&self, conn: ConnHandle) -> Option<usize> {
        self.pings.iter().position(|p| p.conn == Some(conn))
    }

    /// The phase now, if a data connection's end now fails the run: one
    /// not closed by the run's end (`closed`: on the core it moved from),
    /// before the cool-down.
    fn ended_early(&self, closed: bool) -> Option<Phase> {
        let ph = self.shared.phase_at(Instant::now());
        let over = closed || self.closed || self.shared.stopping();
        (!over && !matches!(ph, Phase::Cooldown | Phase::Post)).then_some(ph)
    }
}

impl ConnHandler for Tx {
    fn on_start(&mut self, net: &mut dyn Net) {
        for &to in &self.to {
            match net.connect(to) {
                Ok(c) => {
                    self.conns.push(c);
                    self.opening.insert(c, to);
                }
                Err(e) => {
                    self.shared.fail(format!("connect to {to}: {e}"));
                    return;
                }
            }
        }
    }
    fn on_connected(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.opening.remove(&conn);
        self.congestion.set(net, conn, &self.shared);
        counters::bump(&self.w.connections);
        if let Ok(t) = net.four_tuple(conn) {
            let _ = self.shared.local.set(t.local);
        }
        self.shared.connected.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = &self.ping {
            let _ = net.set_nodelay(conn, true);
            if self.ping_of(conn).is_none() {
                self.pings.push(PingPong {
                    conn: Some(conn),
                    ..p.clone()
                });
                let i = self.pings.len() - 1;
                self.ping(net, i);
            }
        }
        self.fill(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.ping.is_some() {
            if let Some(i) = self.ping_of(conn) {
                self.pong(net, i);
            }
        } else {
            self.fill(net, conn);
        }
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        match self.ping_of(conn) {
            Some(i) => self.pong(net, i),
            // The receiver does not answer in throughput mode: discard.
            None => {
                net.discard(conn);
            }
        }
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        self.conns.retain(|&c| c != conn);
        let to = self.opening.remove(&conn);
        let Some(ph) = self.ended_early(false) else {
            return;
        };
        self.shared.fail(match (to, reason) {
            (Some(to), CloseReason::Reset) => format!(
                "the data connection to {to} was refused: nothing listens there (start the receiver first, or check -m's address and -p/-P)"
            ),
            (Some(to), CloseReason::Timeout) => format!(
                "the data connection to {to} got no answer (timed out): check -m's address and that the receiver runs"
            ),
            _ => ended_early_words(ph, reason),
        });
    }
    /// The connection leaves with its RSS bucket: out of this core's
    /// lists; its ping-pong goes along. (Its count in `connected` and the
    /// bytes sent so far stay where they were counted.)
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        self.conns.retain(|&c| c != conn);
        self.opening.remove(&conn);
        if self.queued.remove(&conn) {
            self.ready.retain(|&c| c != conn);
        }
        let ping = self.ping_of(conn).map(|i| {
            let mut p = self.pings.swap_remove(i);
            p.tick_limit = p.tick_limit.saturating_sub(self.ticks);
            p
        });
        Some(Box::new(MovedConn {
            ping,
            closed: self.closed,
        }))
    }
    /// A connection moved here goes on as on its old core: its ping-pong
    /// continues, in throughput mode it is sent on; closed at once if the
    /// run ended here. One still opening is taken up at its `on_connected`
    /// here.
    fn on_import(&mut self, net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        let moved = state.and_then(|s| s.downcast::<MovedConn>().ok());
        self.conns.push(conn);
        let Some(MovedConn { ping, closed }) = moved.map(|m| *m) else {
            return;
        };
        if closed {
            // Its `on_closed` comes here.
            return;
        }
        if self.closed {
            let _ = net.close(conn);
            return;
        }
        match ping {
            Some(mut p) => {
                p.conn = Some(conn);
                p.tick_limit += self.ticks;
                let busy = p.busy;
                self.pings.push(p);
                let i = self.pings.len() - 1;
                if busy {
                    self.pong(net, i);
                } else {
                    self.ping(net, i);
                }
            }
            None if net.state(conn).is_ok_and(|s| s != State::SynSent) => self.fill(net, conn),
            None => {}
        }
    }
    /// A connection moving here was lost on the way (the stack refused it):
    /// a failure, as its close would be.
    fn on_import_failed(&mut self, _net: &mut dyn Net, state: Option<ConnState>) {
        let closed = state
            .and_then(|s| s.downcast::<MovedConn>().ok())
            .is_some_and(|m| m.closed);
        if let Some(ph) = self.ended_early(closed) {
            self.shared.fail(format!(
                "{}: lost moving to another core",
                ended_early_words(ph, CloseReason::Aborted)
            ));
        }
    }
    fn on_tick(&mut self, net: &mut dyn Net) {
        self.ticks += 1;
        self.in_tick = true;
        self.tick(net);
        self.in_tick = false;
    }
}

/// A core's receiver handler (one per data port and core).
struct Rx {
    shared: Arc<Shared>,
    w: Arc<WorkerCounters>,
    echo: bool,
    local: SocketAddr,
    buf: Vec<u8>,
    congestion: Congestion,
    /// `-N`: no control channel tells that the sender stopped early; its
    /// connections' ends do.
    no_sync: bool,
}

impl Rx {
    /// Throughput mode: take everything the connection holds, count it.
    fn drain(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let mut total = 0;
        loop {
            let n = match net.peek(conn) {
                Ok(d) if !d.is_empty() => d.len(),
                _ => break,
            };
            let _ = net.consume(conn, n);
            total += n;
        }
        if total > 0 {
            self.w.add(self.shared.phase_at(Instant::now()), total);
        }
        if net.is_eof(conn) {
            let _ = net.close(conn);
        }
    }

    /// Latency/overlap modes: echo what arrived, as much as the send buffer
    /// takes; counted as the sender counts a round trip, the bytes in and
    /// the bytes out (`2 * n`), so that both ends report the same bytes.
    fn pump(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let n = net.echo(conn, &mut self.buf);
        if n > 0 {
            self.w.add(self.shared.phase_at(Instant::now()), 2 * n);
        }
    }

    fn serve(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.echo {
            self.pump(net, conn);
        } else {
            self.drain(net, conn);
        }
    }
}

impl ConnHandler for Rx {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.echo {
            let _ = net.set_nodelay(conn, true);
        }
        self.congestion.set(net, conn, &self.shared);
        counters::bump(&self.w.connections);
        let _ = self.shared.local.set(self.local);
        self.shared.accepted.fetch_add(1, Ordering::Relaxed);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.serve(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.echo {
            self.pump(net, conn);
        }
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.serve(net, conn);
    }
    /// Counted as ended (the receiver's stop waits for every data
    /// connection's end, [`crate::backend::Shared::open_connections`]). `-N`: a
    /// connection that ends before the measured window is over
    /// (bar [`NO_SYNC_SLACK`]) fails the run, as a synced receiver fails
    /// when its sender stops early: its average would be over time the
    /// sender did not send.
    fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, reason: CloseReason) {
        self.shared.ended.fetch_add(1, Ordering::Relaxed);
        if !self.no_sync || self.shared.stopping() {
            return;
        }
        let ph = self.shared.phase_at(Instant::now() + NO_SYNC_SLACK);
        if !matches!(ph, Phase::Cooldown | Phase::Post) {
            self.shared.fail(format!(
                "{}: the sender stopped before the end of the measured window",
                ended_early_words(ph, reason)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Schedule;
    use clap::Parser;
    use flowlane_app::{Dispatcher, Error, FourTuple, HandlerId, Placement, Stats};
    use flowlane_tcp::Event;
    use std::collections::HashMap;

    #[test]
    fn worker_counters_by_phase() {
        let w = WorkerCounters::default();
        w.add(Phase::Warmup, 3);
        w.add(Phase::Measured, 10);
        w.add(Phase::Measured, 5);
        w.connections.store(2, Ordering::Relaxed);
        let s = w.stats();
        assert_eq!(s.bytes, [0, 3, 15, 0, 0]);
        assert_eq!(s.connections, 2);
        assert!(s.rtt_ns.is_none());
        assert_eq!(std::mem::align_of::<WorkerCounters>(), 64);
    }

    /// A data path without a stack: each connection's bytes sent and not
    /// yet taken (`queued`: they hold send space, as an application
    /// thread's requests do until its core took them), taken, and
    /// echoed back (`rx`).
    #[derive(Default)]
    struct FakeNet {
        conns: HashMap<ConnHandle, FakeConn>,
        next: u32,
        stats: Stats,
        /// Connections closed, and aborted, in order.
        closed: Vec<ConnHandle>,
        aborted: Vec<ConnHandle>,
    }

    #[derive(Default)]
    struct FakeConn {
        queued: usize,
        taken: usize,
        rx: Vec<u8>,
    }

    const SPACE: usize = 1 << 16;

    impl FakeNet {
        /// Takes `c` in under a new handle (opened here, or moved here).
        fn adopt(&mut self, c: FakeConn) -> ConnHandle {
            self.next += 1;
            let h = ConnHandle::from_parts(self.next, 1);
            self.conns.insert(h, c);
            h
        }

        /// The data path takes what was queued and the peer echoes it.
        fn take_and_echo(&mut self) {
            for c in self.conns.values_mut() {
                c.rx.extend(std::iter::repeat_n(0x11, c.queued));
                c.taken += c.queued;
                c.queued = 0;
            }
        }
    }

    /// One core's set-up: its handlers go to the dispatcher; its queue.
    struct FakeSetup(Dispatcher, u32);

    impl Setup for FakeSetup {
        fn queue(&self) -> u32 {
            self.1
        }
        fn listen_boxed(
            &mut self,
            _port: u16,
            handler: Box<dyn ConnHandler>,
        ) -> Result<HandlerId, Error> {
            Ok(self.0.add_boxed(handler))
        }
        fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId {
            self.0.add_boxed(handler)
        }
        fn listen_with(&mut self, _port: u16, _handler: HandlerId) -> Result<(), Error> {
            Ok(())
        }
    }

    impl Net for FakeNet {
        flowlane_app::fake_net_settings!();
        fn now(&self) -> Duration {
            Duration::ZERO
        }
        fn placement(&self) -> Placement {
            Placement {
                queue: 0,
                cpu: None,
                node: 0,
            }
        }
        fn connect(&mut self, _remote: SocketAddr) -> Result<ConnHandle, Error> {
            Ok(self.adopt(FakeConn::default()))
        }
        fn send(&mut self, conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
            let c = self.conns.get_mut(&conn).ok_or(Error::InvalidState)?;
            let n = data.len().min(SPACE - c.queued);
            c.queued += n;
            Ok(n)
        }
        fn recv(&mut self, _conn: ConnHandle, _buf: &mut [u8]) -> Result<usize, Error> {
            Err(Error::WouldBlock)
        }
        fn peek(&self, conn: ConnHandle) -> Result<&[u8], Error> {
            Ok(&self.conns.get(&conn).ok_or(Error::InvalidState)?.rx)
        }
        fn consume(&mut self, conn: ConnHandle, n: usize) -> Result<usize, Error> {
            let c = self.conns.get_mut(&conn).ok_or(Error::InvalidState)?;
            let n = n.min(c.rx.len());
            c.rx.drain(..n);
            Ok(n)
        }
        fn is_eof(&self, _conn: ConnHandle) -> bool {
            false
        }
        fn send_space(&self, conn: ConnHandle) -> Result<usize, Error> {
            Ok(SPACE - self.conns.get(&conn).ok_or(Error::InvalidState)?.queued)
        }
        fn want_writable(&mut self, _conn: ConnHandle) -> bool {
            false
        }
        fn shutdown_write(&mut self, _conn: ConnHandle) -> Result<(), Error> {
            Ok(())
        }
        fn close(&mut self, conn: ConnHandle) -> Result<(), Error> {
            self.conns.get(&conn).ok_or(Error::InvalidState)?;
            self.closed.push(conn);
            Ok(())
        }
        fn abort(&mut self, conn: ConnHandle) -> Result<(), Error> {
            self.conns.get(&conn).ok_or(Error::InvalidState)?;
            self.aborted.push(conn);
            Ok(())
        }
        fn four_tuple(&self, _conn: ConnHandle) -> Result<FourTuple, Error> {
            Err(Error::InvalidState)
        }
        fn stats(&self) -> &Stats {
            &self.stats
        }
    }

    /// A sender on several cores, each with its handlers, data path and
    /// counters, and the run's state.
    struct Cores {
        d: Vec<Dispatcher>,
        net: Vec<FakeNet>,
        w: Vec<Arc<WorkerCounters>>,
        shared: Arc<Shared>,
    }

    impl Cores {
        /// Moves `conn` from core `from` to core `to` (its RSS bucket
        /// moved), as the data path does: its application side out, the
        /// connection under a new handle there, its application side in.
        fn move_conn(&mut self, conn: ConnHandle, from: usize, to: usize) -> ConnHandle {
            let app = self.d[from].export_conn(conn, &mut self.net[from]).unwrap();
            let c = self.net[from].conns.remove(&conn).unwrap();
            let new = self.net[to].adopt(c);
            self.d[to].import_conn(new, app, &mut self.net[to]);
            new
        }

        /// A pass of every core.
        fn tick(&mut self) {
            for (d, net) in self.d.iter_mut().zip(&mut self.net) {
                d.tick(net);
            }
        }
    }

    /// A sender of `flags` on `cores` cores: its handlers, connected, in
    /// the measured window.
    fn sender_on(flags: &str, cores: u32) -> Cores {
        let mut argv = vec!["flowlane-ttcp", "-s", "-W", "0", "-t", "60", "-C", "0"];
        argv.extend(flags.split_whitespace());
        let plan = crate::cli::Cli::try_parse_from(argv)
            .unwrap()
            .run
            .plan()
            .unwrap();
        let shared = Arc::new(Shared::new(Schedule::from_secs(0.0, 60.0, 0.0)));
        let mut c = Cores {
            d: Vec::new(),
            net: Vec::new(),
            w: Vec::new(),
            shared: shared.clone(),
        };
        for q in 0..cores {
            let w = Arc::new(WorkerCounters::default());
            let mut setup = FakeSetup(Dispatcher::new(), q);
            sender(&plan, cores)(&mut setup, &w, &shared).unwrap();
            let mut d = setup.0;
            let mut net = FakeNet::default();
            d.start(&mut net);
            let conns: Vec<ConnHandle> = net.conns.keys().copied().collect();
            for conn in conns {
                d.dispatch(Event::Connected(conn), &mut net);
            }
            c.d.push(d);
            c.net.push(net);
            c.w.push(w);
        }
        shared.start(Instant::now());
        c
    }

    /// A sender of `flags` on one core: its handlers, connected, in the
    /// measured window, and the core's counters.
    fn one_core_sender(flags: &str) -> (Dispatcher, FakeNet, Arc<WorkerCounters>) {
        let mut c = sender_on(flags, 1);
        (c.d.remove(0), c.net.remove(0), c.w.remove(0))
    }

    /// Latency mode with more connections than cores (a flowlane sender
    /// on fewer queues than -m threads): every connection plays
    /// ping-pong, not only the core's first.
    #[test]
    fn latency_pings_on_every_connection_of_a_core() {
        let (mut d, mut net, _w) = one_core_sender("-m 3,*,127.0.0.1 --latency --msg-size 100");
        assert_eq!(net.conns.len(), 3);
        d.tick(&mut net);
        for (h, c) in &net.conns {
            assert_eq!(c.queued, 100, "{h:?} sent nothing");
        }
    }

    /// Overlap: the compute waits until the data path took the message
    /// (never in the callback that queued it); a reply that came during
    /// the compute counts as complete when it ended.
    #[test]
    fn overlap_computes_once_the_message_is_out() {
        let (mut d, mut net, w) =
            one_core_sender("-m 1,*,127.0.0.1 --overlap-us 1000 --msg-size 100 --mode queue-pair");
        let conn = *net.conns.keys().next().unwrap();
        let t = Instant::now();
        d.tick(&mut net);
        assert_eq!(net.conns[&conn].queued, 100);
        assert!(
            t.elapsed() < Duration::from_micros(1000),
            "computed at the send"
        );
        // The core takes it; the echo is back by the next pass.
        net.take_and_echo();
        d.tick(&mut net);
        assert_eq!(net.conns[&conn].taken, 100);
        let o = w.stats().overlap;
        assert_eq!(o.iterations, 1, "{o:?}");
        assert!(o.compute_ns >= 1_000_000, "{o:?}");
        assert_eq!(o.reply_done_at_compute_end, 1, "{o:?}");
        // The next iteration went out; no round-trip time in overlap mode.
        assert_eq!(net.conns[&conn].queued, 100);
        assert!(w.stats().rtt_ns.is_none());
    }

    /// Throughput: a connection moved with its RSS bucket to a core whose
    /// share of connections was none is sent on there, and closed there at
    /// the run's end; the counts add up across the cores. (Before: no
    /// handler at its index there, and the move aborted it.)
    #[test]
    fn a_moved_connection_is_sent_on_and_closed_on_a_core_with_no_share() {
        let mut c = sender_on("-m 1,*,127.0.0.1", 2);
        assert_eq!((c.net[0].conns.len(), c.net[1].conns.len()), (1, 0));
        let old = *c.net[0].conns.keys().next().unwrap();
        c.tick();
        assert!(c.net[0].conns[&old].queued > 0);
        // The data path takes it all; the bucket moves before the
        // connection's next send.
        c.net[0].take_and_echo();
        let new = c.move_conn(old, 0, 1);
        assert!(c.net[1].aborted.is_empty(), "the move aborted it");
        assert!(
            c.net[1].conns[&new].queued > 0,
            "not sent on after the move"
        );
        // The run ends: the connection is closed on its new core.
        c.shared.stop.store(true, Ordering::Relaxed);
        c.tick();
        assert_eq!(c.net[1].closed, [new]);
        assert!(c.net[0].closed.is_empty());
        c.d[1].dispatch(
            Event::Closed {
                conn: new,
                reason: CloseReason::Normal,
            },
            &mut c.net[1],
        );
        assert_eq!(c.shared.failure(), None);
        assert_eq!(c.shared.connected.load(Ordering::Relaxed), 1);
        let sent: u64 =
            c.w.iter()
                .map(|w| w.stats().bytes.iter().sum::<u64>())
                .sum();
        let on_wire = c.net[1].conns[&new].taken + c.net[1].conns[&new].queued;
        assert_eq!(sent, on_wire as u64);
    }

    /// Latency: a connection moved mid-iteration to a core with its own
    /// connection finishes its iteration there (its round trip counted
    /// there), plays on, and is closed there at the run's end. (Before:
    /// that core's `Tx` did not know it: the echo was discarded, and the
    /// run's end never closed it.)
    #[test]
    fn a_moved_connection_plays_on_and_is_closed_on_its_new_core() {
        let mut c = sender_on("-m 2,*,127.0.0.1 --latency --msg-size 100", 2);
        assert_eq!((c.net[0].conns.len(), c.net[1].conns.len()), (1, 1));
        let old = *c.net[0].conns.keys().next().unwrap();
        let stays = *c.net[1].conns.keys().next().unwrap();
        c.tick();
        // Both sent their message; one's bucket moves before its echo.
        let new = c.move_conn(old, 0, 1);
        c.net[1].take_and_echo();
        for conn in [stays, new] {
            c.d[1].dispatch(Event::Readable(conn), &mut c.net[1]);
        }
        for conn in [stays, new] {
            let f = &c.net[1].conns[&conn];
            assert_eq!(
                (f.taken, f.queued),
                (100, 100),
                "{conn:?}: no next iteration"
            );
        }
        let rtts = c.w[1].stats().rtt_ns.map_or(0, |h| h.len());
        assert_eq!(rtts, 2);
        assert_eq!(c.w[1].stats().bytes[Phase::Measured as usize], 400);
        assert!(c.w[0].stats().rtt_ns.is_none());
        c.shared.stop.store(true, Ordering::Relaxed);
        c.tick();
        let mut closed = c.net[1].closed.clone();
        closed.sort_by_key(|h| h.index());
        let mut both = vec![stays, new];
        both.sort_by_key(|h| h.index());
        assert_eq!(closed, both);
        assert_eq!(c.shared.failure(), None);
        assert_eq!(c.shared.connected.load(Ordering::Relaxed), 2);
    }
}
