//! An application thread: its handlers (registered by the service's
//! set-up, as on a network core) and the loop that feeds them the cores'
//! events.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use flowlane_app::{
    ConnHandle, ConnHandler, ConnInfo, Dispatcher, Error, HandlerId, ListenerId, Net, Placement,
    Setup, SynFilter, Wake,
};
use flowlane_tcp::Event;

use crate::app_net::QpNet;
use crate::heartbeat::Heartbeat;
use crate::message::ToApp;
use crate::relay::WakeSlot;

/// The longest the thread waits for an event: handlers' `on_tick` runs at
/// least this often.
const TICK: Duration = Duration::from_millis(10);
/// Messages taken per pass.
const MESSAGES_PER_PASS: usize = 4096;

/// One application thread's handlers and its view of the cores.
pub(crate) struct AppThread {
    pub(crate) net: QpNet,
    pub(crate) app: Dispatcher,
    /// The ports the handlers listen on, in registration order (the same
    /// on every thread: the service's set-up runs on each).
    pub(crate) ports: Vec<u16>,
    /// The SYN filter of each port's handler (by `ports` index), for the
    /// cores' relays to give their backends.
    pub(crate) filters: Vec<Option<SynFilter>>,
    pub(crate) index: u32,
    /// The service's count of connections the handlers' `admit` refused,
    /// and this thread's part of it already added there.
    pub(crate) refused: Arc<AtomicU64>,
    pub(crate) refused_added: u64,
    /// Beats as each handler's call begins and each pass ends: the cores
    /// take a thread stuck in one call for stalled, not one busy with
    /// many.
    pub(crate) beat: Heartbeat,
}

impl Setup for AppThread {
    fn queue(&self) -> u32 {
        self.index
    }

    fn listen_boxed(
        &mut self,
        port: u16,
        handler: Box<dyn ConnHandler>,
    ) -> Result<HandlerId, Error> {
        let h = self.app.add_boxed(handler);
        self.listen_with(port, h)?;
        Ok(h)
    }

    fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId {
        self.app.add_boxed(handler)
    }

    /// The cores listen on every port the threads registered; accepted
    /// connections name the port by its index here.
    fn listen_with(&mut self, port: u16, handler: HandlerId) -> Result<(), Error> {
        if self.ports.contains(&port) {
            return Err(Error::AddrInUse);
        }
        // Before the port is taken: nothing is left listening for a
        // handler this thread does not have.
        self.app.check_handler(handler)?;
        self.ports.push(port);
        self.filters.push(self.app.syn_filter(handler, port));
        self.app.bind_listener(
            ListenerId::from_index((self.ports.len() - 1) as u32),
            handler,
        )
    }
}

impl AppThread {
    /// Delivers what came, ticks the handlers, sends what they asked.
    fn pass(&mut self) {
        self.net.grant_writable();
        self.dispatch();
        if self.net.take_stopping() {
            self.stop();
        }
        self.beat.beat();
        self.app.tick(&mut self.net);
        self.dispatch();
        self.net.flush();
        let refused = self.app.refused();
        if refused != self.refused_added {
            self.refused
                .fetch_add(refused - self.refused_added, Ordering::Relaxed);
            self.refused_added = refused;
        }
    }

    /// The service is stopping (its first core said so): the handlers
    /// hear of each connection ([`Dispatcher::stop`], once), and those
    /// they leave to the reset are aborted now (RFC 9293 §3.10.5): this
    /// thread's cores wait for every connection's end, for their drain,
    /// as for the closes of those the handlers finish.
    fn stop(&mut self) {
        self.app.stop(&mut self.net);
        for conn in self.app.resetting() {
            let _ = self.net.abort(conn);
        }
        self.dispatch();
    }

    /// Dispatches the queued events, then the `Closed` of connections
    /// whose last held bytes they read. Those of a connection a handler
    /// ended since they were queued (an abort) are dropped, but its
    /// `Closed`.
    fn dispatch(&mut self) {
        loop {
            while let Some(e) = self.net.events.pop_front() {
                if !self.net.due(&e) {
                    continue;
                }
                self.beat.beat();
                self.app.dispatch(e, &mut self.net);
                if let Event::Closed { conn, .. } = e {
                    self.net.release(conn);
                }
            }
            if !self.net.end_drained() {
                break;
            }
        }
    }
}

/// One application thread's end of the queue pairs, set up: its handlers
/// and the cores' event queue. [`AppPort::run`] is the built-in loop (it
/// blocks on the queue); a loop of the application's own (an async
/// runtime's, see `flowlane-tokio`) calls [`AppPort::poll`] whenever the
/// waker it gave [`AppPort::set_notify`] was called, at once again while
/// [`AppPort::pending`], and at least every 10 ms.
pub struct AppPort {
    pub(crate) at: AppThread,
    pub(crate) events: Receiver<(u32, ToApp)>,
    pub(crate) stop: Arc<AtomicBool>,
    /// The thread's open connections, after each pass.
    pub(crate) open: Arc<AtomicU64>,
    pub(crate) notify: WakeSlot,
    /// What the cores call when they reset the thread's connections for a
    /// stall ([`AppPort::set_on_stall`]).
    pub(crate) on_stall: WakeSlot,
    pub(crate) started: bool,
}

impl std::fmt::Debug for AppPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppPort")
            .field("index", &self.at.index)
            .field("open", &self.at.net.open())
            .finish()
    }
}

impl AppPort {
    /// The thread's index (0-based).
    pub fn index(&self) -> u32 {
        self.at.index
    }

    /// Where the thread runs: its CPU (if pinned) and NUMA node.
    pub fn placement(&self) -> Placement {
        self.at.net.placement()
    }

    /// What the cores call after queueing events for this thread, for a
    /// loop that does not block on the queue itself. Set once; later
    /// calls are ignored.
    pub fn set_notify(&self, wake: Arc<dyn Wake>) {
        let _ = self.notify.set(wake);
    }

    /// What a network core calls, on its own thread, each time it finds
    /// this thread stalled (or ended) and resets the thread's connections
    /// there (each core that does so calls it; their `Closed` reach the
    /// handlers only once the thread passes again). For a runtime whose
    /// connections are used from other threads too, which can be told at
    /// once that they are gone: every connection of a thread the cores
    /// take for stalled is reset, on every core that finds it so; one on a
    /// core that saw the thread back in time is not, and should then be
    /// aborted by the thread. Set once; later calls are ignored.
    pub fn set_on_stall(&self, wake: Arc<dyn Wake>) {
        let _ = self.on_stall.set(wake);
    }

    /// What the thread calls, during a pass and before that pass's
    /// events reach the handlers, when one of its connections moved to
    /// another network core with its RSS bucket: the connection's handle
    /// (the thread's, which does not change) and its new placement (what
    /// [`Net::conn_placement`] answers from then on). Handlers hear of no
    /// move otherwise. Replaces the one set before.
    pub fn set_on_move(&mut self, moved: Box<dyn FnMut(ConnHandle, Placement) + Send>) {
        self.at.net.on_move = Some(moved);
    }

    /// What the thread calls, during a pass and before that pass's
    /// events reach the handlers, when a network core answered the latest
    /// of the thread's requests for a connection's figures (each
    /// [`Net::info`] call asks; answers to earlier requests, still older,
    /// are not told): the connection's handle and its figures as
    /// [`Net::info`] would give them now (None where the core could not
    /// tell them and never did), as of after every earlier
    /// [`Net::info`] call on it. For a runtime whose connections are used
    /// from other threads too, that has a caller wait for figures rather
    /// than read those of the previous call. Replaces the one set before.
    pub fn set_on_info(&mut self, told: Box<dyn FnMut(ConnHandle, Option<ConnInfo>) + Send>) {
        self.at.net.on_info = Some(told);
    }

    /// The longest a loop may wait between two [`AppPort::poll`]s
    /// (handlers' `on_tick` runs at least this often).
    pub fn tick(&self) -> Duration {
        TICK
    }

    /// One pass: takes the events the cores queued (at most 4096 messages;
    /// [`AppPort::pending`] says whether it left some), runs the handlers,
    /// sends their requests. Returns false once the service stops (or
    /// every core is gone): the loop ends then. The handlers start (their
    /// `on_start`) at the first pass after every core the thread serves
    /// started its loop, as they would on those cores in run to
    /// completion: a connect made there has a core to answer it.
    pub fn poll(&mut self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        if !self.started {
            if !self.at.net.cores_up() {
                // Waiting is no stall.
                self.at.beat.beat();
                return true;
            }
            self.started = true;
            self.at.app.start(&mut self.at.net);
        }
        let mut live = true;
        for _ in 0..MESSAGES_PER_PASS {
            match self.events.try_recv() {
                Ok((core, m)) => self.at.net.take(core, m),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    live = false;
                    break;
                }
            }
        }
        self.end_pass();
        live
    }

    /// Whether messages wait that no pass took yet (a pass takes at most
    /// 4096): a loop that waits for its waker should pass again at once
    /// instead, since the cores' wakes for a backlog collapse into one.
    pub fn pending(&self) -> bool {
        !self.events.is_empty()
    }

    fn end_pass(&mut self) {
        self.at.pass();
        self.at.beat.beat();
        self.open
            .store(self.at.net.open() as u64, Ordering::Relaxed);
    }

    /// The built-in loop: waits on the event queue (at most
    /// [`AppPort::tick`]), then passes; until the service stops or every
    /// core is gone.
    pub fn run(mut self) {
        if !self.poll() {
            return;
        }
        while !self.stop.load(Ordering::Relaxed) {
            match self.events.recv_timeout(TICK) {
                Ok((core, m)) => self.at.net.take(core, m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if !self.poll() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app_net::CoreLink;
    use crate::memory::{CoreMemory, RX_MEMORY, TX_MEMORY};
    use crate::message::ToCore;
    use crate::relay::{start_core, CoreSlot};
    use crossbeam_channel::unbounded;
    use flowlane_app::{CloseReason, FourTuple};
    use std::sync::Mutex;

    /// Aborts each connection at its first data; records every callback.
    struct AbortAtData(Arc<Mutex<Vec<String>>>);

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

    /// Thread 0 with no handler yet, served by one core, and where its
    /// requests to the core go.
    fn thread() -> (AppThread, Receiver<Vec<ToCore>>) {
        let (at, requests, _up) = thread_of(true);
        (at, requests)
    }

    /// Where the thread and its core run.
    const PLACEMENT: Placement = Placement {
        queue: 0,
        cpu: None,
        node: 0,
    };

    /// [`thread`], its core started (`up`: its waker published) or not
    /// yet, and the slot where the core publishes it.
    fn thread_of(up: bool) -> (AppThread, Receiver<Vec<ToCore>>, CoreSlot) {
        let (tx, requests) = unbounded();
        let placement = PLACEMENT;
        let slot = CoreSlot::default();
        if up {
            start_core(&slot, placement);
        }
        let link = CoreLink {
            requests: tx,
            up: slot.clone(),
            configured: placement,
        };
        let memory = Arc::new(vec![CoreMemory::new(RX_MEMORY, TX_MEMORY)]);
        let (_, answers) = unbounded();
        let at = AppThread {
            net: QpNet::new(0, placement, vec![link], vec![0], memory, answers),
            app: Dispatcher::new(),
            ports: Vec::new(),
            filters: Vec::new(),
            index: 0,
            refused: Arc::new(AtomicU64::new(0)),
            refused_added: 0,
            beat: Heartbeat::new(),
        };
        (at, requests, slot)
    }

    /// The port of `at`, its events from `events`.
    fn port(at: AppThread, events: Receiver<(u32, ToApp)>) -> AppPort {
        AppPort {
            at,
            events,
            stop: Arc::new(AtomicBool::new(false)),
            open: Arc::new(AtomicU64::new(0)),
            notify: WakeSlot::default(),
            on_stall: WakeSlot::default(),
            started: false,
        }
    }

    /// Counts its `on_start`s.
    struct Starts(Arc<AtomicU64>);

    impl ConnHandler for Starts {
        fn on_start(&mut self, _net: &mut dyn Net) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    }

    /// The handlers start once the core the thread serves started its
    /// loop (as on that core in run to completion: a connect made in
    /// `on_start` has a core to answer it), not at the thread's first
    /// pass; once.
    #[test]
    fn handlers_start_once_their_cores_are_up() {
        let (mut at, _requests, up) = thread_of(false);
        let starts = Arc::new(AtomicU64::new(0));
        at.add_boxed(Box::new(Starts(starts.clone())));
        let (_tx, rx) = unbounded();
        let mut port = port(at, rx);
        assert!(port.poll());
        assert!(port.poll());
        assert_eq!(starts.load(Ordering::Relaxed), 0);
        start_core(&up, PLACEMENT);
        assert!(port.poll());
        assert!(port.poll());
        assert_eq!(starts.load(Ordering::Relaxed), 1);
    }

    /// Events the core sent before the handler aborted, queued in the same
    /// pass (the peer's close behind its data), are not dispatched after
    /// the abort: `on_closed` is the only callback that follows.
    #[test]
    fn nothing_but_on_closed_follows_an_abort() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (mut at, _requests) = thread();
        at.listen_boxed(80, Box::new(AbortAtData(log.clone())))
            .unwrap();
        let conn = ConnHandle::from_parts(3, 1);
        let tuple = FourTuple {
            local: "10.0.0.1:80".parse().unwrap(),
            remote: "10.0.0.2:4000".parse().unwrap(),
        };
        at.net.take(
            0,
            ToApp::Accepted {
                conn,
                port: 0,
                tuple,
            },
        );
        at.net.take(
            0,
            ToApp::Data {
                conn,
                bytes: b"x".to_vec(),
            },
        );
        at.net.take(0, ToApp::PeerClosed { conn, info: None });
        at.pass();
        // The core's own `Closed` for the reset it made.
        let reason = CloseReason::Aborted;
        at.net.take(0, ToApp::Closed { conn, reason });
        at.pass();
        assert_eq!(*log.lock().unwrap(), ["data", "closed Aborted"]);
    }

    /// At the stop closes the connections from port 4000, leaves the
    /// others to the reset.
    struct CloseSome;

    impl ConnHandler for CloseSome {
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
        fn on_stop(&mut self, net: &mut dyn Net, conn: ConnHandle) -> flowlane_app::AtStop {
            if net.four_tuple(conn).unwrap().remote.port() == 4000 {
                net.close(conn).unwrap();
                flowlane_app::AtStop::Finish
            } else {
                flowlane_app::AtStop::Reset
            }
        }
    }

    /// A core's `Stopping` reaches the thread's handlers at its next
    /// pass, once however many cores tell it: the connection a handler
    /// closes is closed at the core, the one it leaves to the reset is
    /// aborted there at once (the core has no other way to know).
    #[test]
    fn a_stopping_core_s_connections_are_closed_or_aborted_as_the_handlers_say() {
        let (mut at, requests) = thread();
        at.listen_boxed(80, Box::new(CloseSome)).unwrap();
        for (i, remote) in [(3, 4000), (4, 4001)] {
            let tuple = FourTuple {
                local: "10.0.0.1:80".parse().unwrap(),
                remote: std::net::SocketAddr::from(([10, 0, 0, 2], remote)),
            };
            let conn = ConnHandle::from_parts(i, 1);
            at.net.take(
                0,
                ToApp::Accepted {
                    conn,
                    port: 0,
                    tuple,
                },
            );
        }
        at.pass();
        let _ = requests.try_iter().count();
        at.net.take(0, ToApp::Stopping);
        at.net.take(0, ToApp::Stopping);
        at.pass();
        let mut asked: Vec<(u32, &str)> = requests
            .try_iter()
            .flatten()
            .filter_map(|m| match m {
                ToCore::Close { conn } => Some((conn.index(), "close")),
                ToCore::Abort { conn } => Some((conn.index(), "abort")),
                _ => None,
            })
            .collect();
        asked.sort();
        assert_eq!(asked, [(3, "close"), (4, "abort")]);
    }

    /// A backlog larger than a pass takes is reported, so that a loop
    /// waiting on its waker (whose wakes for the backlog collapsed into
    /// one) passes again at once; the passes then take it all.
    #[test]
    fn a_pass_reports_the_messages_it_left() {
        let (at, _requests) = thread();
        let (tx, rx) = unbounded();
        let mut port = port(at, rx);
        // Completions for a connection the thread does not know: ignored.
        let conn = ConnHandle::from_parts(3, 1);
        for total in 0..2 * MESSAGES_PER_PASS as u64 + 1 {
            tx.send((0, ToApp::Sent { conn, total })).unwrap();
        }
        let mut passes = 0;
        loop {
            assert!(port.poll());
            passes += 1;
            if !port.pending() {
                break;
            }
        }
        assert_eq!(passes, 3);
        assert!(port.events.is_empty());
    }
}
