//! tokio on queue-pair mode with its network cores played by hand: each
//! core's relay (from `QueuePairs::setup_core`) called by the test over a
//! fake stack, no backend and no bed. What the loopback tests cannot make
//! happen at will: a connection's RSS bucket moving to another core (the
//! kernel-socket backend never moves one), and a stall that one core sees
//! while another sees the thread back in time.

mod loopback_common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flowlane_app::testing::KeptHandler;
use flowlane_app::{ConnHandle, ConnHandler, Error, FourTuple, Net, Placement, Stats};
use flowlane_qp::{QueuePairConfig, QueuePairs};
use flowlane_tokio::{AsyncConfig, Connector, Local, TcpStream};
use loopback_common::places;
use tokio::io::AsyncReadExt;

/// The port the service listens on.
const PORT: u16 = 80;

/// A network core's stack, faked: every connection established, nothing
/// to read, every send taken; what the relay did to each connection is
/// recorded.
struct Core {
    queue: u32,
    did: Vec<(ConnHandle, &'static str)>,
    stats: Stats,
}

impl Core {
    fn new(queue: u32) -> Core {
        Core {
            queue,
            did: Vec::new(),
            stats: Stats::default(),
        }
    }
}

impl Net for Core {
    flowlane_app::fake_net_settings!();
    fn now(&self) -> Duration {
        Duration::ZERO
    }
    fn placement(&self) -> Placement {
        places(2)[self.queue as usize]
    }
    fn connect(&mut self, _remote: SocketAddr) -> Result<ConnHandle, Error> {
        Err(Error::InvalidState)
    }
    fn send(&mut self, _conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        Ok(data.len())
    }
    fn recv(&mut self, _conn: ConnHandle, _buf: &mut [u8]) -> Result<usize, Error> {
        Err(Error::WouldBlock)
    }
    fn peek(&self, _conn: ConnHandle) -> Result<&[u8], Error> {
        Ok(&[])
    }
    fn consume(&mut self, _conn: ConnHandle, _n: usize) -> Result<usize, Error> {
        Ok(0)
    }
    fn is_eof(&self, _conn: ConnHandle) -> bool {
        false
    }
    fn send_space(&self, _conn: ConnHandle) -> Result<usize, Error> {
        Ok(1 << 20)
    }
    fn want_writable(&mut self, _conn: ConnHandle) -> bool {
        false
    }
    fn shutdown_write(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.did.push((conn, "shutdown"));
        Ok(())
    }
    fn close(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.did.push((conn, "close"));
        Ok(())
    }
    fn abort(&mut self, conn: ConnHandle) -> Result<(), Error> {
        self.did.push((conn, "abort"));
        Ok(())
    }
    /// The peer's port tells the connections apart: 4000 + its slot.
    fn four_tuple(&self, conn: ConnHandle) -> Result<FourTuple, Error> {
        Ok(FourTuple {
            local: SocketAddr::from(([10, 0, 0, 1], PORT)),
            remote: SocketAddr::from(([10, 0, 0, 2], 4000 + conn.index() as u16)),
        })
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
}

/// Core `queue` of `qp`, started: its relay and its fake stack.
fn hand_core(qp: &QueuePairs, queue: u32) -> (Box<dyn ConnHandler>, Core) {
    let mut setup = KeptHandler::new(queue);
    qp.setup_core(&mut setup).unwrap();
    let mut core = Core::new(queue);
    let mut relay = setup.handler.expect("the relay registered");
    relay.on_start(&mut core);
    (relay, core)
}

/// tokio on one application thread over two hand-played cores; `app`
/// runs there.
fn start<F, Fut>(stall_after: Duration, app: F) -> QueuePairs
where
    F: Fn(Local) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let config = AsyncConfig {
        queue_pairs: QueuePairConfig {
            cores: places(2),
            app_threads: places(1),
            pin: |_| Ok(()),
            stall_after,
        },
        ports: vec![PORT],
        backlog: 64,
        syn_filter: None,
    };
    flowlane_tokio::start(config, app).unwrap().0
}

/// Waits up to 10 s for `done`.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_stream_s_placement_follows_its_connection_to_another_core() {
    // A connection accepted on core 0 moves with its RSS bucket to core 1
    // (core 0's relay exports it, core 1's imports it): the stream's
    // placement, taken at the accept, says core 1 from then on.
    let (tx, rx) = mpsc::channel::<TcpStream>();
    let tx = Mutex::new(Some(tx));
    let qp = start(Duration::from_secs(10), move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = local.listener(PORT).unwrap();
            let (s, _) = listener.accept().await.unwrap();
            tx.send(s).unwrap();
            std::future::pending::<()>().await;
        }
    });
    let (mut r0, mut c0) = hand_core(&qp, 0);
    let (mut r1, mut c1) = hand_core(&qp, 1);
    let old = ConnHandle::from_parts(3, 1);
    r0.on_accept(&mut c0, old);
    let stream = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(stream.placement(), places(2)[0]);
    let state = r0.on_export(&mut c0, old);
    assert!(state.is_some());
    r1.on_import(&mut c1, ConnHandle::from_parts(5, 1), state);
    wait_for("the stream's placement followed the move", || {
        stream.placement() == places(2)[1]
    });
    // Nothing was reset on the way.
    r0.on_tick(&mut c0);
    r1.on_tick(&mut c1);
    assert!(
        c0.did.is_empty() && c1.did.is_empty(),
        "{:?} {:?}",
        c0.did,
        c1.did
    );
    assert_eq!(qp.moved(), 1);
    qp.stop().unwrap();
}

type Out = (TcpStream, TcpStream, Connector);

/// The first read's result on `s`, if it comes within 100 ms.
fn read_now(rt: &tokio::runtime::Runtime, s: &mut TcpStream) -> Option<std::io::ErrorKind> {
    rt.block_on(async {
        let mut b = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_millis(100), s.read(&mut b)).await;
        read.ok().and_then(|r| r.err()).map(|e| e.kind())
    })
}

#[test]
fn a_stall_one_core_saw_ends_every_stream_and_the_thread_aborts_what_the_other_kept() {
    // One thread, a connection on each core; the thread blocks past the
    // stall limit. Core 0 looks first: it resets its connection and tells
    // the thread's streams at once, both of them (polled here, on another
    // runtime), and the opens asked meanwhile fail at once. Core 1 looks
    // only once the thread is back (it kept its connection): the thread
    // then aborts that connection, whose stream was told it is gone.
    let (tx, rx) = mpsc::channel::<Out>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (back_tx, back_rx) = mpsc::channel::<()>();
    let once = Mutex::new(Some((tx, go_rx, back_tx)));
    let qp = start(Duration::from_millis(300), move |mut local| {
        let once = once.lock().unwrap().take();
        async move {
            let Some((tx, go, back)) = once else { return };
            let listener = local.listener(PORT).unwrap();
            let (a, _) = listener.accept().await.unwrap();
            let (b, _) = listener.accept().await.unwrap();
            tx.send((a, b, local.connector())).unwrap();
            // The application's bug (on purpose): blocks the thread.
            go.recv().unwrap();
            // Passes a few times before it says it is back.
            tokio::time::sleep(Duration::from_millis(50)).await;
            back.send(()).unwrap();
            std::future::pending::<()>().await;
        }
    });
    let (mut r0, mut c0) = hand_core(&qp, 0);
    let (mut r1, mut c1) = hand_core(&qp, 1);
    let (on0, on1) = (ConnHandle::from_parts(3, 1), ConnHandle::from_parts(4, 1));
    r0.on_accept(&mut c0, on0);
    r1.on_accept(&mut c1, on1);
    let (a, b, connector) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let (mut s0, mut s1) = if a.peer_addr().port() == 4003 {
        (a, b)
    } else {
        (b, a)
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(read_now(&rt, &mut s0), None, "nothing to read yet");
    std::thread::sleep(Duration::from_millis(600));
    r0.on_tick(&mut c0);
    assert_eq!(c0.did, [(on0, "abort")]);
    assert_eq!(qp.orphaned(), 1);
    let aborted = Some(std::io::ErrorKind::ConnectionAborted);
    assert_eq!(read_now(&rt, &mut s0), aborted);
    assert_eq!(read_now(&rt, &mut s1), aborted);
    let addr = SocketAddr::from(([10, 0, 0, 2], 9));
    let open = rt.block_on(async {
        let open = tokio::time::timeout(Duration::from_millis(100), connector.connect(addr));
        open.await.map(|r| r.map(drop).map_err(|e| e.kind()))
    });
    assert_eq!(open.map(|r| r.err()), Ok(aborted));
    go_tx.send(()).unwrap();
    back_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    wait_for("the thread aborted core 1's connection", || {
        r1.on_tick(&mut c1);
        !c1.did.is_empty()
    });
    assert_eq!(c1.did, [(on1, "abort")]);
    assert_eq!(qp.orphaned(), 1, "core 1 reset nothing itself");
    assert!(qp.dead_threads().is_empty());
    qp.stop().unwrap();
}
