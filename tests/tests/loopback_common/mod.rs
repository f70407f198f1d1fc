//! Shared by the loopback tests of the kernel-socket backend and of
//! queue-pair mode (no test bed: kernel TCP on 127.0.0.1 is the peer).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use flowlane_app::{ConnHandle, ConnHandler, Net, Placement};

pub(crate) const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A port free now (bound and released).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((LOOPBACK, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `n` unpinned cores (or threads) on node 0.
pub(crate) fn places(n: u32) -> Vec<Placement> {
    (0..n)
        .map(|queue| Placement {
            queue,
            cpu: None,
            node: 0,
        })
        .collect()
}

/// Echoes every byte back, closing once the peer closed.
pub(crate) struct Echo {
    pub(crate) scratch: Vec<u8>,
}

impl Echo {
    pub(crate) fn new(scratch: usize) -> Echo {
        Echo {
            scratch: vec![0; scratch],
        }
    }
}

impl ConnHandler for Echo {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.scratch);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.scratch);
    }
}

/// Pseudo-random bytes (xorshift from `seed`).
pub(crate) fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `data` to `port`, half-closes, and returns everything read back
/// until the server closed.
pub(crate) fn echo_client(port: u16, data: Vec<u8>) -> Vec<u8> {
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    back
}

/// Echoes like [`Echo`], picks NewReno and keepalive for every connection it accepts,
/// and records what [`Net::info`] says each time data comes.
pub(crate) struct Informed {
    pub(crate) echo: Echo,
    pub(crate) seen:
        std::sync::Arc<std::sync::Mutex<Vec<Result<flowlane_app::ConnInfo, flowlane_app::Error>>>>,
}

impl ConnHandler for Informed {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.set_congestion(conn, flowlane_app::CongestionAlgorithm::NewReno)
            .unwrap();
        net.set_keepalive(conn, true).unwrap();
        net.set_send_buffer(conn, 256 << 10).unwrap();
        net.set_recv_buffer(conn, 256 << 10).unwrap();
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let info = net.info(conn);
        self.seen.lock().unwrap().push(info);
        self.echo.on_data(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_writable(net, conn);
    }
}

/// What [`Informed`] saw, shared with the test.
pub(crate) type Seen =
    std::sync::Arc<std::sync::Mutex<Vec<Result<flowlane_app::ConnInfo, flowlane_app::Error>>>>;

/// A set-up that listens on `port` with an [`Informed`] echo handler
/// recording into `seen`.
pub(crate) fn listen_informed(
    port: u16,
    seen: &Seen,
) -> impl Fn(&mut dyn flowlane_app::Setup) -> Result<(), String> + Send + Sync + 'static {
    let seen = seen.clone();
    move |s| {
        use flowlane_app::SetupExt;
        s.listen(
            port,
            Informed {
                echo: Echo::new(16 << 10),
                seen: seen.clone(),
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    }
}

/// Echoes 1 MiB through an [`Informed`] handler set up by `start` (on
/// `port`), then checks what it saw: the connection's round-trip time,
/// segment size and window, and bytes waiting to be read when data came.
/// `first_may_block`: queue-pair mode answers the first calls later.
pub(crate) fn info_is_told(
    port: u16,
    seen: &std::sync::Mutex<Vec<Result<flowlane_app::ConnInfo, flowlane_app::Error>>>,
    first_may_block: bool,
) {
    let data = payload(9, 1 << 20);
    assert!(echo_client(port, data.clone()) == data);
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    // Queue-pair mode: calls before the core's first answer came block.
    let answered = seen.iter().position(Result::is_ok).unwrap_or(seen.len());
    assert!(first_may_block || answered == 0, "{seen:?}");
    let ok: Vec<_> = seen[answered..]
        .iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("info #{i}: {e:?}")))
        .collect();
    assert!(!ok.is_empty(), "{seen:?}");
    for i in &ok {
        assert!(i.mss > 0 && i.cwnd >= usize::from(i.mss), "{i:?}");
        assert!(i.srtt.is_some(), "{i:?}");
    }
    assert!(ok.iter().any(|i| i.readable > 0), "{ok:?}");
}

/// Connects to `port` and writes `data` without blocking until the peer's
/// window and the socket's buffer are full (ten 50 ms waits in a row);
/// returns the stream and how much went. Asserts that not all of it did
/// (back-pressure).
pub(crate) fn write_until_blocked(port: u16, data: &[u8]) -> (TcpStream, usize) {
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_nonblocking(true).unwrap();
    let (mut sent, mut blocked) = (0, 0);
    while blocked < 10 && sent < data.len() {
        match s.write(&data[sent..]) {
            Ok(n) => {
                sent += n;
                blocked = 0;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                blocked += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        sent < data.len(),
        "all {sent} bytes went while nothing read them: no back-pressure"
    );
    (s, sent)
}

/// Sends what [`write_until_blocked`] left of `data`, half-closes, and
/// checks that all of `data` comes back.
pub(crate) fn finish_echo(mut s: TcpStream, data: &[u8], sent: usize) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let rest = data[sent..].to_vec();
    let writer = std::thread::spawn(move || {
        w.write_all(&rest).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert!(back == data, "{} of {} bytes back", back.len(), data.len());
}

/// Payload bytes the kernel backend's cores read so far.
pub(crate) fn bytes_in(kernel: &flowlane_kernel::KernelService) -> u64 {
    kernel
        .counters()
        .iter()
        .map(|(_, c)| c.stats.bytes_in)
        .sum()
}

/// Echoes, but admits only every other connection (the first, third, ...).
pub(crate) struct EveryOther {
    pub(crate) echo: Echo,
    pub(crate) seen: u64,
}

impl ConnHandler for EveryOther {
    fn admit(&mut self, _net: &mut dyn Net, _conn: ConnHandle) -> bool {
        self.seen += 1;
        self.seen % 2 == 1
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_data(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_writable(net, conn);
    }
}

/// Opens two connections in turn to `port`, served by [`EveryOther`]:
/// the first is echoed, the second reset before the handler took it.
pub(crate) fn the_second_is_refused(port: u16) {
    let data = payload(11, 64 << 10);
    assert!(echo_client(port, data.clone()) == data);
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let wrote = s.write_all(b"ping").err().map(|e| e.kind());
    let mut b = [0u8; 4];
    let read = s.read(&mut b).err().map(|e| e.kind());
    let reset = Some(std::io::ErrorKind::ConnectionReset);
    assert!(
        wrote == reset || read == reset,
        "write {wrote:?}, read {read:?}"
    );
}

/// A two-core kernel-socket backend on loopback whose cores run `qp`'s
/// relays (queue-pair mode's network side).
pub(crate) fn kernel_cores_for(
    qp: &std::sync::Arc<flowlane_qp::QueuePairs>,
) -> flowlane_kernel::KernelService {
    let q = qp.clone();
    flowlane_kernel::KernelService::start(
        flowlane_kernel::KernelConfig {
            cores: places(2),
            listen_on: vec![LOOPBACK],
            limits: flowlane_kernel::Limits::default(),
        },
        move |core| q.setup_core(core).map_err(|e| format!("{e:?}")),
    )
    .unwrap()
}

/// A set-up that listens on `port` with an [`EveryOther`] echo handler.
pub(crate) fn listen_every_other(
    port: u16,
) -> impl Fn(&mut dyn flowlane_app::Setup) -> Result<(), String> + Send + Sync + 'static {
    move |s| {
        use flowlane_app::SetupExt;
        s.listen(
            port,
            EveryOther {
                echo: Echo::new(16 << 10),
                seen: 0,
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    }
}

/// What [`EmptyReads`] saw, shared with the test.
pub(crate) type EmptyReadsSeen =
    std::sync::Arc<std::sync::Mutex<Vec<Result<usize, flowlane_app::Error>>>>;

/// Records what a read into an empty buffer returns at each data and at
/// the peer's close (reading all between), then closes.
pub(crate) struct EmptyReads {
    pub(crate) seen: EmptyReadsSeen,
}

impl ConnHandler for EmptyReads {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let r = net.recv(conn, &mut []);
        self.seen.lock().unwrap().push(r);
        net.discard(conn);
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let r = net.recv(conn, &mut []);
        self.seen.lock().unwrap().push(r);
        let _ = net.close(conn);
    }
}

/// A set-up that listens on `port` with an [`EmptyReads`] handler.
pub(crate) fn listen_empty_reads(
    port: u16,
    seen: &EmptyReadsSeen,
) -> impl Fn(&mut dyn flowlane_app::Setup) -> Result<(), String> + Send + Sync + 'static {
    let seen = seen.clone();
    move |s| {
        use flowlane_app::SetupExt;
        s.listen(port, EmptyReads { seen: seen.clone() })
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    }
}

/// Sends a few bytes and closes to an [`EmptyReads`] handler on `port`:
/// while bytes wait a read into an empty buffer is `WouldBlock`, and
/// `Ok(0)` (end of stream) only once the peer closed and all was read.
pub(crate) fn empty_reads_are_end_of_stream_only_at_the_end(port: u16, seen: &EmptyReadsSeen) {
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"abc").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    let seen = seen.lock().unwrap();
    let (last, at_data) = seen.split_last().expect("the handler ran");
    assert!(!at_data.is_empty(), "{seen:?}");
    assert!(
        at_data
            .iter()
            .all(|r| *r == Err(flowlane_app::Error::WouldBlock)),
        "{seen:?}"
    );
    assert_eq!(*last, Ok(0), "{seen:?}");
}

/// Closes `s` with a reset instead of a FIN: `SO_LINGER` on with a zero
/// linger time (socket(7)), which makes Linux's close(2) abort the
/// connection (an RST, whatever is queued dropped). tokio's `TcpSocket`
/// sets the option without a runtime (std's is unstable).
pub(crate) fn reset(s: TcpStream) {
    let s = tokio::net::TcpSocket::from_std_stream(s);
    s.set_zero_linger().unwrap();
    drop(s);
}

/// What [`ToldAtClose`] heard in each connection's `on_closed`: its
/// addresses and its figures, as `Net` answered there.
pub(crate) type AtClose = std::sync::Arc<
    std::sync::Mutex<
        Vec<(
            Result<flowlane_app::FourTuple, flowlane_app::Error>,
            Result<flowlane_app::ConnInfo, flowlane_app::Error>,
        )>,
    >,
>;

/// Echoes like [`Echo`] and records, in each connection's `on_closed`,
/// what [`Net::four_tuple`] and [`Net::info`] answer there: what a
/// handler that logs or accounts per peer at close reads. It asks for the
/// figures as it accepts, as queue-pair mode wants for figures at the end
/// (see [`Net::info`]).
pub(crate) struct ToldAtClose {
    pub(crate) echo: Echo,
    pub(crate) told: AtClose,
    /// Asks for the figures at accept (else never before `on_closed`).
    pub(crate) ask: bool,
}

impl ConnHandler for ToldAtClose {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.ask {
            let _ = net.info(conn);
        }
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_data(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_writable(net, conn);
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_data(net, conn);
    }
    fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, _: flowlane_app::CloseReason) {
        let told = (net.four_tuple(conn), net.info(conn));
        self.told.lock().unwrap().push(told);
    }
}

/// A set-up that listens on `port` with a [`ToldAtClose`] handler
/// recording into `told`.
pub(crate) fn listen_told_at_close(
    port: u16,
    told: &AtClose,
) -> impl Fn(&mut dyn flowlane_app::Setup) -> Result<(), String> + Send + Sync + 'static {
    listen_told_at_close_asking(port, told, true)
}

/// [`listen_told_at_close`], the handler asking for the figures at accept
/// if `ask`.
pub(crate) fn listen_told_at_close_asking(
    port: u16,
    told: &AtClose,
    ask: bool,
) -> impl Fn(&mut dyn flowlane_app::Setup) -> Result<(), String> + Send + Sync + 'static {
    let told = told.clone();
    move |s| {
        use flowlane_app::SetupExt;
        s.listen(
            port,
            ToldAtClose {
                echo: Echo::new(4 << 10),
                told: told.clone(),
                ask,
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    }
}

/// Echoes a little through a [`ToldAtClose`] handler listening on `port`
/// and waits for its `on_closed`: the connection's addresses must be
/// readable there (the peer's the client's own), whatever the backend.
/// Returns what `info` answered there, which differs by backend.
pub(crate) fn addresses_are_told_at_close(
    port: u16,
    told: &AtClose,
) -> Result<flowlane_app::ConnInfo, flowlane_app::Error> {
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    let client = s.local_addr().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"who am I").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    assert_eq!(back, b"who am I");
    drop(s);
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let (tuple, info) = loop {
        if let Some(t) = told.lock().unwrap().first() {
            break *t;
        }
        assert!(std::time::Instant::now() < until, "no on_closed in 20 s");
        std::thread::sleep(Duration::from_millis(10));
    };
    let tuple = tuple.expect("four_tuple in on_closed");
    assert_eq!(tuple.remote, client, "the peer's address");
    assert_eq!(tuple.local, SocketAddr::new(LOOPBACK, port), "ours");
    info
}
