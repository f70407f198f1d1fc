//! The dispatcher against a real `flowlane_tcp::Stack` pair: accepted
//! connections reach their listener's handler, connections a handler opens
//! are owned by it, an accept on an unbound listener is reset, and a closed
//! connection's slot no longer routes events.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowlane_app::{
    CloseReason, ConnHandle, ConnHandler, Dispatcher, Error, FourTuple, Net, Placement, State,
    Stats,
};
use flowlane_tcp::time::Instant;
use flowlane_tcp::{Config, Stack};

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

#[test]
fn events_reach_the_owning_handler() {
    let log: Log = Arc::default();
    let mut a = Stack::new(Config::new([1; 16]));
    let mut b = Stack::new(Config::new([2; 16]));
    let mut app = Dispatcher::new();
    let mut port = 40000;
    // Handler "srv" listens on :80; "cli" opens a connection to b's :90.
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    let srv = app.add(Rec {
        name: "srv",
        log: log.clone(),
        open: vec![],
    });
    app.bind_listener(l, srv);
    app.add(Rec {
        name: "cli",
        log: log.clone(),
        open: vec!["10.0.0.2:90".parse().unwrap()],
    });
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

#[test]
fn a_handler_refuses_a_connection_before_it_is_accepted() {
    let log: Log = Arc::default();
    let mut a = Stack::new(Config::new([1; 16]));
    let mut b = Stack::new(Config::new([2; 16]));
    let mut app = Dispatcher::new();
    let mut port = 40000;
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    let h = app.add(Picky(Rec {
        name: "srv",
        log: log.clone(),
        open: vec![],
    }));
    app.bind_listener(l, h);
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
    // Only the admitted connection reached the handler.
    assert_eq!(log, ["srv accept", "srv data 2"], "{log:?}");
    assert_eq!(app.refused(), 1);
    // The refused one was reset: gone at the peer too.
    assert!(b.state(refused).is_err(), "{:?}", b.state(refused));
    assert!(b.state(taken).is_ok());
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
    app.bind_listener(l, srv);
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
    let mut a = Stack::new(Config::new([1; 16]));
    let mut b = Stack::new(Config::new([2; 16]));
    let mut app = Dispatcher::new();
    let mut port = 40000;
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
    let mut a = Stack::new(Config::new([1; 16]));
    let mut b = Stack::new(Config::new([2; 16]));
    let mut app = Dispatcher::new();
    let mut port = 40000;
    let l = a.listen("10.0.0.1:80".parse().unwrap()).unwrap();
    let h = app.add(AbortOnData(log.clone()));
    app.bind_listener(l, h);
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
