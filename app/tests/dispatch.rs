//! The dispatcher against a real `flowlane_tcp::Stack` pair: accepted
//! connections reach their listener's handler, connections a handler opens
//! are owned by it, an accept on an unbound listener is reset, and a closed
//! connection's slot no longer routes events.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowlane_app::{
    AtStop, CloseReason, ConnHandle, ConnHandler, Dispatcher, Error, FourTuple, Net, Placement,
    State, Stats, SynFilter,
};
use flowlane_tcp::time::Instant;
use flowlane_tcp::{Config, Event, Stack};

/// `Net` straight over a stack, as a backend would implement it.
struct Direct<'a> {
    stack: &'a mut Stack,
    local: std::net::Ipv4Addr,
    next_port: &'a mut u16,
}

impl Net for Direct<'_> {
    fn now(&self) -> Duration {
        Duration::ZERO
    }
    fn placement(&self) -> Placement {
        Placement {
            queue: 3,
            cpu: Some(1),
            node: 0,
        }
    }
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnHandle, Error> {
        *self.next_port += 1;
        let local = SocketAddr::new(self.local.into(), *self.next_port);
        self.stack.connect(Instant::ZERO, local, remote)
    }
    fn send(&mut self, c: ConnHandle, d: &[u8]) -> Result<usize, Error> {
        self.stack.send(c, d)
    }
    fn recv(&mut self, c: ConnHandle, b: &mut [u8]) -> Result<usize, Error> {
        self.stack.recv(c, b)
    }
    fn peek(&self, c: ConnHandle) -> Result<&[u8], Error> {
        self.stack.peek(c)
    }
    fn consume(&mut self, c: ConnHandle, n: usize) -> Result<usize, Error> {
        self.stack.consume(c, n)
    }
    fn is_eof(&self, c: ConnHandle) -> bool {
        self.stack.is_eof(c).unwrap_or(false)
    }
    fn send_space(&self, c: ConnHandle) -> Result<usize, Error> {
        self.stack.send_space(c)
    }
    fn want_writable(&mut self, _c: ConnHandle) -> bool {
        false
    }
    fn shutdown_write(&mut self, c: ConnHandle) -> Result<(), Error> {
        self.stack.shutdown_write(c)
    }
    fn close(&mut self, c: ConnHandle) -> Result<(), Error> {
        self.stack.close(c)
    }
    fn abort(&mut self, c: ConnHandle) -> Result<(), Error> {
        self.stack.abort(c)
    }
    fn set_nodelay(&mut self, c: ConnHandle, on: bool) -> Result<(), Error> {
        self.stack.set_nodelay(c, on)
    }
    fn set_congestion(
        &mut self,
        c: ConnHandle,
        alg: flowlane_tcp::CongestionAlgorithm,
    ) -> Result<(), Error> {
        self.stack.set_congestion(c, alg)
    }
    fn set_keepalive(&mut self, c: ConnHandle, on: bool) -> Result<(), Error> {
        self.stack.set_keepalive(c, on)
    }
    fn set_send_buffer(&mut self, c: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.stack.set_send_buffer(c, bytes)
    }
    fn set_recv_buffer(&mut self, c: ConnHandle, bytes: usize) -> Result<(), Error> {
        self.stack.set_recv_buffer(c, bytes)
    }
    fn info(&self, c: ConnHandle) -> Result<flowlane_tcp::ConnInfo, Error> {
        self.stack.info(c)
    }
    fn four_tuple(&self, c: ConnHandle) -> Result<FourTuple, Error> {
        self.stack.four_tuple(c)
    }
    fn state(&self, c: ConnHandle) -> Result<State, Error> {
        self.stack.state(c)
    }
    fn set_user_data(&mut self, c: ConnHandle, data: u64) -> Result<(), Error> {
        self.stack.set_user_data(c, data)
    }
    fn user_data(&self, c: ConnHandle) -> Result<u64, Error> {
        self.stack.user_data(c)
    }
    fn stats(&self) -> &Stats {
        self.stack.stats()
    }
}

type Log = Arc<Mutex<Vec<String>>>;

/// Records its callbacks; opens `open` connections from `on_start`.
struct Rec {
    name: &'static str,
    log: Log,
    open: Vec<SocketAddr>,
}

impl ConnHandler for Rec {
    fn on_start(&mut self, net: &mut dyn Net) {
        assert_eq!(net.queue(), 3);
        for to in std::mem::take(&mut self.open) {
            net.connect(to).unwrap();
        }
    }
    fn on_accept(&mut self, _net: &mut dyn Net, _c: ConnHandle) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} accept", self.name));
    }
    fn on_connected(&mut self, _net: &mut dyn Net, _c: ConnHandle) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} connected", self.name));
    }
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        let mut b = [0u8; 64];
        let n = net.recv(c, &mut b).unwrap_or(0);
        self.log
            .lock()
            .unwrap()
            .push(format!("{} data {}", self.name, n));
    }
    fn on_closed(&mut self, _net: &mut dyn Net, _c: ConnHandle, r: CloseReason) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} closed {r:?}", self.name));
    }
}

/// Counts its `on_start` calls.
struct CountStarts(Arc<AtomicUsize>);

impl ConnHandler for CountStarts {
    fn on_start(&mut self, _net: &mut dyn Net) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn on_data(&mut self, _net: &mut dyn Net, _c: ConnHandle) {}
}

/// Moves every segment between the two stacks until both are quiet,
/// dispatching `a`'s events after each exchange.
fn settle(a: &mut Stack, app: &mut Dispatcher, b: &mut Stack, port: &mut u16) {
    let mut buf = [0u8; 1600];
    for _ in 0..8 {
        while let Some(t) = a.poll_transmit(Instant::ZERO, &mut buf) {
            b.handle_segment(Instant::ZERO, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(Instant::ZERO, &mut buf) {
            a.handle_segment(Instant::ZERO, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        }
        while let Some(ev) = a.poll_event() {
            let mut net = Direct {
                stack: a,
                local: "10.0.0.1".parse().unwrap(),
                next_port: port,
            };
            app.dispatch(ev, &mut net);
        }
        while b.poll_event().is_some() {}
    }
}

/// Two stacks back to back, as most tests here take them: `a` (10.0.0.1)
/// with a dispatcher for its handlers, `b` (10.0.0.2) a bare peer; and the
/// first local port `a`'s opens take.
fn pair() -> (Stack, Stack, Dispatcher, u16) {
    let a = Stack::new(Config::new([1; 16]));
    let b = Stack::new(Config::new([2; 16]));
    (a, b, Dispatcher::new(), 40000)
}

/// `handler` added to `app`, serving a listener on `a`'s port 80.
fn serve_on_80(a: &mut Stack, app: &mut Dispatcher, handler: impl ConnHandler + 'static) {
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    let h = app.add(handler);
    app.bind_listener(l, h).unwrap();
}

#[test]
fn events_reach_the_owning_handler() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    // Handler "srv" listens on :80; "cli" opens a connection to b's :90.
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    let srv = app.add(Rec {
        name: "srv",
        log: log.clone(),
        open: vec![],
    });
    app.bind_listener(l, srv).unwrap();
    app.add(Rec {
        name: "cli",
        log: log.clone(),
        open: vec!["10.0.0.2:90".parse().unwrap()],
    });
    let starts = Arc::new(AtomicUsize::new(0));
    app.add(CountStarts(starts.clone()));
    // An unbound listener: its connections are reset.
    a.listen("10.0.0.1:81".parse().unwrap()).unwrap();
    b.listen("10.0.0.2:90".parse().unwrap()).unwrap();
    {
        let mut net = Direct {
            stack: &mut a,
            local: "10.0.0.1".parse().unwrap(),
            next_port: &mut port,
        };
        app.start(&mut net);
        app.start(&mut net); // once only
    }
    assert_eq!(starts.load(Ordering::SeqCst), 1, "on_start once only");
    let to_srv = b
        .connect(
            Instant::ZERO,
            "10.0.0.2:5000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        )
        .unwrap();
    let to_unbound = b
        .connect(
            Instant::ZERO,
            "10.0.0.2:5001".parse().unwrap(),
            "10.0.0.1:81".parse().unwrap(),
        )
        .unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    b.send(to_srv, b"hello").unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    b.abort(to_srv).unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "cli connected",
            "srv accept",
            "srv data 5",
            "srv closed Reset"
        ],
        "{log:?}"
    );
    // The unbound listener's connection was reset by the dispatcher.
    assert!(b.state(to_unbound).is_err(), "{:?}", b.state(to_unbound));
}

/// Records like [`Rec`], and takes only connections from port 5000.
struct Picky(Rec);

impl ConnHandler for Picky {
    fn admit(&mut self, net: &mut dyn Net, c: ConnHandle) -> bool {
        net.four_tuple(c).is_ok_and(|t| t.remote.port() == 5000)
    }
    fn on_accept(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.0.on_accept(net, c);
    }
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.0.on_data(net, c);
    }
    fn on_closed(&mut self, net: &mut dyn Net, c: ConnHandle, r: CloseReason) {
        self.0.on_closed(net, c, r);
    }
}

/// Two connections to a listener whose handler (`wrap` of a logging
/// `Rec`) admits the one from port 5000 and refuses the one from 5001:
/// only the admitted one reaches the handler, the refused one is reset
/// (gone at the peer too), and the dispatcher counts it.
fn one_taken_one_refused<H: ConnHandler + 'static>(wrap: impl FnOnce(Rec) -> H) {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    let h = app.add(wrap(Rec {
        name: "srv",
        log: log.clone(),
        open: vec![],
    }));
    app.bind_listener(l, h).unwrap();
    let connect = |b: &mut Stack, from: &str| {
        b.connect(
            Instant::ZERO,
            from.parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        )
        .unwrap()
    };
    let taken = connect(&mut b, "10.0.0.2:5000");
    let refused = connect(&mut b, "10.0.0.2:5001");
    settle(&mut a, &mut app, &mut b, &mut port);
    b.send(taken, b"hi").unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["srv accept", "srv data 2"], "{log:?}");
    assert_eq!(app.refused(), 1);
    assert!(b.state(refused).is_err(), "{:?}", b.state(refused));
    assert!(b.state(taken).is_ok());
}

#[test]
fn a_handler_refuses_a_connection_before_it_is_accepted() {
    one_taken_one_refused(Picky);
}

/// Keeps a tag per connection, which moves with it (`on_export`), and logs
/// what it hears of a move that failed; tells the handle it accepted.
struct Tagged(Rec, Arc<Mutex<Option<ConnHandle>>>);

impl ConnHandler for Tagged {
    fn on_accept(&mut self, net: &mut dyn Net, c: ConnHandle) {
        *self.1.lock().unwrap() = Some(c);
        self.0.on_accept(net, c);
    }
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.0.on_data(net, c);
    }
    fn on_export(&mut self, _net: &mut dyn Net, c: ConnHandle) -> Option<flowlane_app::ConnState> {
        Some(Box::new(format!("tag of {}", c.index())))
    }
    fn on_import_failed(&mut self, _net: &mut dyn Net, state: Option<flowlane_app::ConnState>) {
        let tag = state.and_then(|s| s.downcast::<String>().ok());
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{} import failed: {tag:?}", self.0.name));
    }
}

#[test]
fn a_failed_import_reaches_the_handler_registered_in_the_owner_s_place() {
    let log: Log = Arc::default();
    let mut a = Stack::new(Config::new([1; 16]));
    let mut b = Stack::new(Config::new([2; 16]));
    let handlers = |log: &Log| {
        let mut app = Dispatcher::new();
        app.add(Rec {
            name: "other",
            log: log.clone(),
            open: vec![],
        });
        let accepted = Arc::new(Mutex::new(None));
        let srv = app.add(Tagged(
            Rec {
                name: "srv",
                log: log.clone(),
                open: vec![],
            },
            accepted.clone(),
        ));
        (app, srv, accepted)
    };
    let (mut app, srv, accepted) = handlers(&log);
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    app.bind_listener(l, srv).unwrap();
    let mut port = 40000;
    b.connect(
        Instant::ZERO,
        "10.0.0.2:5000".parse().unwrap(),
        "10.0.0.1:80".parse().unwrap(),
    )
    .unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    let conn = accepted.lock().unwrap().expect("accepted");
    let mut net = Direct {
        stack: &mut a,
        local: "10.0.0.1".parse().unwrap(),
        next_port: &mut port,
    };
    let export = app.export_conn(conn, &mut net).expect("owned by srv");
    // The other core's dispatcher, set up the same way, cannot take it.
    let (mut other_core, _, _) = handlers(&log);
    other_core.import_failed(export, &mut net);
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "srv accept".to_string(),
            format!("srv import failed: Some(\"tag of {}\")", conn.index())
        ]
    );
}

/// Aborts its first connection as soon as it is connected and opens
/// another in the same callback; records the handles it sees.
struct Reopen {
    log: Log,
    to: SocketAddr,
    first: Option<ConnHandle>,
}

impl ConnHandler for Reopen {
    fn on_start(&mut self, net: &mut dyn Net) {
        self.first = Some(net.connect(self.to).unwrap());
    }
    fn on_connected(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.log
            .lock()
            .unwrap()
            .push(format!("connected {}", c.index()));
        if Some(c) == self.first {
            net.abort(c).unwrap();
            let again = net.connect(self.to).unwrap();
            self.log
                .lock()
                .unwrap()
                .push(format!("opened {}", again.index()));
        }
    }
    fn on_data(&mut self, _net: &mut dyn Net, _c: ConnHandle) {}
    fn on_closed(&mut self, _net: &mut dyn Net, c: ConnHandle, r: CloseReason) {
        self.log
            .lock()
            .unwrap()
            .push(format!("closed {} {r:?}", c.index()));
    }
}

/// A connection aborted and another opened in one callback: the closed
/// one's `on_closed` still comes (its slot is not given to the new one
/// before the application heard of the close: the handler's state for it,
/// and the dispatcher's owner entry, are keyed by the slot).
#[test]
fn a_connection_opened_right_after_an_abort_does_not_take_the_closed_one_s_on_closed() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    b.listen("10.0.0.2:90".parse().unwrap()).unwrap();
    app.add(Reopen {
        log: log.clone(),
        to: "10.0.0.2:90".parse().unwrap(),
        first: None,
    });
    {
        let mut net = Direct {
            stack: &mut a,
            local: "10.0.0.1".parse().unwrap(),
            next_port: &mut port,
        };
        app.start(&mut net);
    }
    settle(&mut a, &mut app, &mut b, &mut port);
    let log = log.lock().unwrap().clone();
    assert_eq!(log[0], "connected 0", "{log:?}");
    assert!(log.contains(&"closed 0 Aborted".to_string()), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.starts_with("connected ") && l != "connected 0"),
        "{log:?}"
    );
}

/// Aborts every connection it hears data on; records its callbacks.
struct AbortOnData(Log);

impl ConnHandler for AbortOnData {
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.0.lock().unwrap().push("data".into());
        net.abort(c).unwrap();
    }
    fn on_peer_closed(&mut self, _net: &mut dyn Net, _c: ConnHandle) {
        self.0.lock().unwrap().push("peer closed".into());
    }
    fn on_closed(&mut self, _net: &mut dyn Net, _c: ConnHandle, r: CloseReason) {
        self.0.lock().unwrap().push(format!("closed {r:?}"));
    }
}

/// Data and the peer's FIN arrive together: both events are queued; the
/// handler aborts at the first. Nothing but its `on_closed` follows (the
/// contract on every backend): no `on_peer_closed` for a connection it
/// already ended.
#[test]
fn nothing_but_on_closed_follows_an_abort() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    serve_on_80(&mut a, &mut app, AbortOnData(log.clone()));
    let c = b
        .connect(
            Instant::ZERO,
            "10.0.0.2:5000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        )
        .unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    b.send(c, b"bye").unwrap();
    b.close(c).unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["data", "closed Aborted"], "{log:?}");
}

/// A `Net` over stack `a` (local address 10.0.0.1), as `settle` makes.
fn direct<'a>(a: &'a mut Stack, port: &'a mut u16) -> Direct<'a> {
    Direct {
        stack: a,
        local: "10.0.0.1".parse().unwrap(),
        next_port: port,
    }
}

/// A `HandlerId` of another dispatcher, past this one's handlers (another
/// core's, set up differently), is refused at bind: no panic at the
/// listener's first accept, whose connection is reset as an unbound
/// listener's is.
#[test]
fn a_handler_id_the_dispatcher_never_issued_is_refused() {
    let log: Log = Arc::default();
    let rec = |name| Rec {
        name,
        log: log.clone(),
        open: vec![],
    };
    let mut other = Dispatcher::new();
    other.add(rec("other 0"));
    let foreign = other.add(rec("other 1"));
    let mut a = Stack::new(Config::new([1; 16]));
    let mut b = Stack::new(Config::new([2; 16]));
    let mut app = Dispatcher::new();
    let mine = app.add(rec("srv"));
    let mut port = 40000;
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    assert_eq!(app.check_handler(mine), Ok(()));
    assert_eq!(app.check_handler(foreign), Err(Error::InvalidHandle));
    assert!(app.syn_filter(foreign, 80).is_none());
    assert_eq!(app.bind_listener(l, foreign), Err(Error::InvalidHandle));
    let c = b
        .connect(
            Instant::ZERO,
            "10.0.0.2:5000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        )
        .unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    assert!(b.state(c).is_err(), "reset: {:?}", b.state(c));
    assert!(log.lock().unwrap().is_empty(), "{:?}", log.lock().unwrap());
}

/// Records like [`Rec`]; its SYN filter (which this backend leaves to the
/// dispatcher: it never asks `Dispatcher::syn_filter`) takes only peers on
/// port 5000.
struct Filtered(Rec);

impl ConnHandler for Filtered {
    fn syn_filter(&self, port: u16) -> Option<SynFilter> {
        assert_eq!(port, 80);
        Some(Arc::new(|t: &FourTuple| t.remote.port() == 5000))
    }
    fn on_accept(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.0.on_accept(net, c);
    }
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.0.on_data(net, c);
    }
    fn on_closed(&mut self, net: &mut dyn Net, c: ConnHandle, r: CloseReason) {
        self.0.on_closed(net, c, r);
    }
}

/// A handler's SYN filter that the backend did not take is applied by
/// the dispatcher at accept: a connection it refuses is reset before any
/// callback, and counted.
#[test]
fn the_dispatcher_applies_a_syn_filter_the_backend_left_to_it() {
    one_taken_one_refused(Filtered);
}

/// A connection's slot reused by the next connection after its `Closed`:
/// events and calls under the old handle reach neither the old handler
/// nor the new connection's.
#[test]
fn the_old_handle_of_a_reused_slot_reaches_nothing() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    let rec = |name| Rec {
        name,
        log: log.clone(),
        open: vec![],
    };
    let old_srv = app.add(rec("old"));
    let new_srv = app.add(rec("new"));
    let l80 = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    let l81 = a.listen("10.0.0.1:81".parse().unwrap()).unwrap();
    app.bind_listener(l80, old_srv).unwrap();
    app.bind_listener(l81, new_srv).unwrap();
    let accept = |a: &mut Stack, app: &mut Dispatcher, b: &mut Stack, port: &mut u16, to| {
        let c = b
            .connect(
                Instant::ZERO,
                "10.0.0.2:5000".parse().unwrap(),
                SocketAddr::from(([10, 0, 0, 1], to)),
            )
            .unwrap();
        settle(a, app, b, port);
        c
    };
    let peer_old = accept(&mut a, &mut app, &mut b, &mut port, 80);
    let old = a.bucket_connections(0)[0];
    b.abort(peer_old).unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    let peer_new = accept(&mut a, &mut app, &mut b, &mut port, 81);
    let new = a.bucket_connections(0)[0];
    assert_eq!(new.index(), old.index(), "the slot is reused");
    assert_ne!(new, old);
    log.lock().unwrap().clear();
    b.send(peer_new, b"abc").unwrap();
    {
        let mut net = direct(&mut a, &mut port);
        // Stale events of the old connection (a backend's queue that kept
        // them): dropped.
        app.dispatch(Event::Readable(old), &mut net);
        app.dispatch(
            Event::Closed {
                conn: old,
                reason: CloseReason::Normal,
            },
            &mut net,
        );
        assert_eq!(net.send(old, b"x"), Err(Error::InvalidHandle));
        assert_eq!(net.abort(old), Err(Error::InvalidHandle));
    }
    settle(&mut a, &mut app, &mut b, &mut port);
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["new data 3"], "{log:?}");
    assert!(b.state(peer_new).is_ok());
}

/// Aborts its connection once connected; opens another from the closed
/// one's `on_closed`, and logs both handles there.
struct Again {
    log: Log,
    to: SocketAddr,
    opened: u32,
}

impl ConnHandler for Again {
    fn on_start(&mut self, net: &mut dyn Net) {
        net.connect(self.to).unwrap();
    }
    fn on_connected(&mut self, net: &mut dyn Net, c: ConnHandle) {
        if self.opened == 0 {
            net.abort(c).unwrap();
        }
    }
    fn on_data(&mut self, _net: &mut dyn Net, _c: ConnHandle) {}
    fn on_closed(&mut self, net: &mut dyn Net, c: ConnHandle, _r: CloseReason) {
        self.opened += 1;
        let new = net.connect(self.to).unwrap();
        self.log
            .lock()
            .unwrap()
            .push(format!("closed {}, opened {}", c.index(), new.index()));
    }
}

/// A connection opened inside another's `on_closed` does not take the
/// closed one's slot (as on the backends that keep their own tables): a
/// handler that keys its state by the index clears the closed one's
/// after opening, and would clear the new one's.
#[test]
fn a_connection_opened_in_on_closed_takes_another_slot() {
    let log: Log = Arc::default();
    let mut a = Stack::new(Config::new([1; 16]));
    let mut b = Stack::new(Config::new([2; 16]));
    b.listen("10.0.0.2:90".parse().unwrap()).unwrap();
    let mut app = Dispatcher::new();
    let mut port = 40000;
    app.add(Again {
        log: log.clone(),
        to: "10.0.0.2:90".parse().unwrap(),
        opened: 0,
    });
    app.start(&mut direct(&mut a, &mut port));
    settle(&mut a, &mut app, &mut b, &mut port);
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["closed 0, opened 1"], "{log:?}");
}

/// Closes or shuts down writing at its first data; logs its callbacks.
struct EndWriting {
    log: Log,
    close: bool,
}

impl ConnHandler for EndWriting {
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.log.lock().unwrap().push("data".into());
        net.discard(c);
        if self.close {
            net.close(c).unwrap();
        } else {
            net.shutdown_write(c).unwrap();
        }
    }
    fn on_writable(&mut self, _net: &mut dyn Net, _c: ConnHandle) {
        self.log.lock().unwrap().push("writable".into());
    }
}

/// A `Writable` queued before its handler closed the connection (or shut
/// its writing down) in the callback of an earlier event of the same
/// batch is not delivered: no `on_writable` after either.
#[test]
fn a_writable_queued_before_a_close_is_not_delivered() {
    for close in [true, false] {
        let log: Log = Arc::default();
        let (mut a, mut b, mut app, mut port) = pair();
        let writer = EndWriting {
            log: log.clone(),
            close,
        };
        serve_on_80(&mut a, &mut app, writer);
        b.connect(
            Instant::ZERO,
            "10.0.0.2:5000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        )
        .unwrap();
        settle(&mut a, &mut app, &mut b, &mut port);
        let conn = a.bucket_connections(0)[0];
        // The batch a segment with data and an ACK freeing send space
        // makes: `Readable`, then `Writable`.
        let mut net = direct(&mut a, &mut port);
        net.send(conn, b"reply").unwrap();
        app.dispatch(Event::Readable(conn), &mut net);
        app.dispatch(Event::Writable(conn), &mut net);
        let log = log.lock().unwrap().clone();
        assert_eq!(log, ["data"], "close {close}: {log:?}");
    }
}

/// At a stop: closes the connections from port 5000 (idle: a FIN now),
/// keeps those from 5001 to finish later (closed at their next
/// `on_data`, as a response finishing), and leaves the others to the
/// stop's reset; logs each `on_stop`.
struct StopBySource(Log);

impl ConnHandler for StopBySource {
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        if net.four_tuple(c).unwrap().remote.port() == 5001 {
            net.close(c).unwrap();
        }
    }
    fn on_stop(&mut self, net: &mut dyn Net, c: ConnHandle) -> AtStop {
        let port = net.four_tuple(c).unwrap().remote.port();
        self.0.lock().unwrap().push(format!("stop {port}"));
        match port {
            5000 => {
                net.close(c).unwrap();
                AtStop::Finish
            }
            5001 => AtStop::Finish,
            _ => AtStop::Reset,
        }
    }
}

/// The stop calls each connection's handler once: a connection closed in
/// it is not waited for, one to be finished is until its handler closes
/// it, one left to the reset never is; a second stop calls nothing.
#[test]
fn a_stop_asks_each_connection_s_handler_once_and_counts_those_finishing() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    serve_on_80(&mut a, &mut app, StopBySource(log.clone()));
    for p in [5000, 5001, 5002] {
        b.connect(
            Instant::ZERO,
            format!("10.0.0.2:{p}").parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        )
        .unwrap();
    }
    settle(&mut a, &mut app, &mut b, &mut port);
    assert!(!app.stopping());
    assert_eq!(app.finishing(), 0, "nothing finishes before a stop");
    let mut net = direct(&mut a, &mut port);
    app.stop(&mut net);
    app.stop(&mut net);
    assert!(app.stopping());
    let mut got = log.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, ["stop 5000", "stop 5001", "stop 5002"], "once each");
    assert_eq!(app.finishing(), 1, "5001's close is awaited");
    let later = a
        .bucket_connections(0)
        .into_iter()
        .find(|&c| a.four_tuple(c).unwrap().remote.port() == 5001)
        .unwrap();
    let mut net = direct(&mut a, &mut port);
    app.dispatch(Event::Readable(later), &mut net);
    assert_eq!(app.finishing(), 0, "5001 closed by its handler");
}

/// Keeps each connection's state in a slab indexed by the connection's
/// user-data word (slot + 1), set at accept and freed in `on_closed`;
/// logs what `user_data` says there and which slots are still taken.
struct Slab {
    log: Log,
    slots: Vec<Option<String>>,
}

impl ConnHandler for Slab {
    fn on_accept(&mut self, net: &mut dyn Net, c: ConnHandle) {
        self.slots.push(Some(format!("peer {}", c.index())));
        net.set_user_data(c, self.slots.len() as u64).unwrap();
    }
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        net.discard(c);
    }
    fn on_closed(&mut self, net: &mut dyn Net, c: ConnHandle, r: CloseReason) {
        let word = net.user_data(c);
        if let Ok(w @ 1..) = word {
            self.slots[w as usize - 1] = None;
        }
        let taken = self.slots.iter().filter(|s| s.is_some()).count();
        self.log
            .lock()
            .unwrap()
            .push(format!("closed {r:?}: word {word:?}, {taken} taken"));
    }
}

/// The word a handler stored with `set_user_data` is still readable in
/// the connection's `on_closed` (the backend has released the connection
/// by then: the stack answers `InvalidHandle`), so that the handler can
/// free what it indexes; and after the connection's application side moved
/// to another dispatcher (another core), the word it carried is readable
/// there at its close too.
#[test]
fn the_user_data_word_is_readable_in_on_closed() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    let slab = |log: &Log| Slab {
        log: log.clone(),
        slots: Vec::new(),
    };
    serve_on_80(&mut a, &mut app, slab(&log));
    let mut peers = Vec::new();
    for p in [5000, 5001] {
        peers.push(
            b.connect(
                Instant::ZERO,
                SocketAddr::new("10.0.0.2".parse().unwrap(), p),
                "10.0.0.1:80".parse().unwrap(),
            )
            .unwrap(),
        );
    }
    settle(&mut a, &mut app, &mut b, &mut port);
    b.abort(peers[0]).unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    assert_eq!(
        log.lock().unwrap().clone(),
        ["closed Reset: word Ok(1), 1 taken"],
        "the slot the word indexes is freed in on_closed"
    );
    // The second connection's application side moves to another
    // dispatcher set up the same way (the connection stays on stack `a`,
    // which carries its word, as a stack's export and import do).
    let conn = {
        let net = direct(&mut a, &mut port);
        let mut conns = Vec::new();
        for i in 0..4 {
            let c = ConnHandle::from_parts(i, 0);
            if net.user_data(c).is_ok() {
                conns.push(c);
            }
        }
        assert_eq!(conns.len(), 1, "{conns:?}");
        conns[0]
    };
    // Its state there, as the handler's own export and import would move it.
    let mut other = Dispatcher::new();
    other.add(Slab {
        log: log.clone(),
        slots: vec![None, Some("moved".to_string())],
    });
    {
        let mut net = direct(&mut a, &mut port);
        let export = app.export_conn(conn, &mut net).expect("owned");
        other.import_conn(conn, export, &mut net);
    }
    b.abort(peers[1]).unwrap();
    settle(&mut a, &mut other, &mut b, &mut port);
    assert_eq!(
        log.lock().unwrap().last().unwrap(),
        "closed Reset: word Ok(2), 0 taken",
        "the word moved with the connection"
    );
}

/// Logs each connection's addresses as `four_tuple` answers in its
/// `on_closed`; opens a connection to `open` from `on_start` and aborts
/// it once connected.
struct Peers {
    log: Log,
    open: Option<SocketAddr>,
}

impl ConnHandler for Peers {
    fn on_start(&mut self, net: &mut dyn Net) {
        if let Some(to) = self.open {
            net.connect(to).unwrap();
        }
    }
    fn on_connected(&mut self, net: &mut dyn Net, c: ConnHandle) {
        net.abort(c).unwrap();
    }
    fn on_data(&mut self, net: &mut dyn Net, c: ConnHandle) {
        net.discard(c);
    }
    fn on_closed(&mut self, net: &mut dyn Net, c: ConnHandle, r: CloseReason) {
        let told = match net.four_tuple(c) {
            Ok(t) => format!("{} -> {}", t.local, t.remote),
            Err(e) => format!("{e:?}"),
        };
        self.log
            .lock()
            .unwrap()
            .push(format!("closed {r:?}: {told}"));
    }
}

/// A connection's addresses are readable in its `on_closed`, where the
/// stack has released it (`InvalidHandle` from the stack itself), as the
/// user-data word is: for a connection the peer reset (accepted) and for
/// one its handler opened and aborted; and a slot's next connection is
/// told its own.
#[test]
fn the_addresses_are_readable_in_on_closed() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    serve_on_80(
        &mut a,
        &mut app,
        Peers {
            log: log.clone(),
            open: None,
        },
    );
    app.add(Peers {
        log: log.clone(),
        open: Some("10.0.0.2:90".parse().unwrap()),
    });
    b.listen("10.0.0.2:90".parse().unwrap()).unwrap();
    app.start(&mut direct(&mut a, &mut port));
    for p in [5000, 5001] {
        let to_a = b
            .connect(
                Instant::ZERO,
                SocketAddr::new("10.0.0.2".parse().unwrap(), p),
                "10.0.0.1:80".parse().unwrap(),
            )
            .unwrap();
        settle(&mut a, &mut app, &mut b, &mut port);
        b.abort(to_a).unwrap();
        settle(&mut a, &mut app, &mut b, &mut port);
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "closed Aborted: 10.0.0.1:40001 -> 10.0.0.2:90",
            "closed Reset: 10.0.0.1:80 -> 10.0.0.2:5000",
            "closed Reset: 10.0.0.1:80 -> 10.0.0.2:5001",
        ],
        "{log:?}"
    );
}

/// Sends `hello` to each connection it accepts, reads nothing, and logs
/// what `info` answers in its `on_closed`: (readable, unsent, unacked).
struct Figures {
    log: Log,
}

impl ConnHandler for Figures {
    fn on_accept(&mut self, net: &mut dyn Net, c: ConnHandle) {
        assert_eq!(net.send(c, b"hello"), Ok(5));
    }
    fn on_data(&mut self, _: &mut dyn Net, _: ConnHandle) {}
    fn on_closed(&mut self, net: &mut dyn Net, c: ConnHandle, r: CloseReason) {
        let told = net
            .info(c)
            .map(|i| (i.readable, i.unsent, i.unacked, i.mss > 0));
        self.log
            .lock()
            .unwrap()
            .push(format!("closed {r:?}: {told:?}"));
    }
}

/// A connection's final figures ([`Net::info`]) are readable in its
/// `on_closed`, where the stack has released it, as on the other
/// backends: over the stack as the rtc backend drives it, the peer's 8
/// bytes never read and our 5 all acknowledged at the peer's reset.
#[test]
fn the_final_figures_are_readable_in_on_closed() {
    let log: Log = Arc::default();
    let (mut a, mut b, mut app, mut port) = pair();
    serve_on_80(&mut a, &mut app, Figures { log: log.clone() });
    app.start(&mut direct(&mut a, &mut port));
    let to_a = b
        .connect(
            Instant::ZERO,
            "10.0.0.2:5000".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        )
        .unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    assert_eq!(b.send(to_a, b"8 bytes!"), Ok(8));
    settle(&mut a, &mut app, &mut b, &mut port);
    let mut got = [0u8; 16];
    assert_eq!(b.recv(to_a, &mut got), Ok(5));
    b.abort(to_a).unwrap();
    settle(&mut a, &mut app, &mut b, &mut port);
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["closed Reset: Ok((8, 0, 0, true))"], "{log:?}");
}
