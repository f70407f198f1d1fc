//! The kernel-socket backend on loopback, the Linux kernel's TCP as the
//! peer: the same handlers as on AF_XDP, echoing, refusing past the
//! connection bound, and opening connections.

mod loopback_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use flowlane_app::{CloseReason, ConnHandle, ConnHandler, Net, SetupExt, StartErrorKind};
use flowlane_kernel::{KernelConfig, KernelService, Limits};
use loopback_common::*;

fn config(cores: u32, limits: Limits) -> KernelConfig {
    KernelConfig {
        cores: places(cores),
        listen_on: vec![LOOPBACK],
        limits,
    }
}

/// One core whose handler opens a connection to `to` ([`Client`]); what
/// the connection received and how it ended come on the receiver.
fn one_core_client(to: SocketAddr) -> (KernelService, mpsc::Receiver<(Vec<u8>, CloseReason)>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let service = KernelService::start(config(1, Limits::default()), move |core| {
        let done = tx.lock().unwrap().clone();
        core.add(Client {
            to,
            got: Vec::new(),
            done,
        })
    })
    .unwrap();
    (service, rx)
}

/// One core listening on `port` with the handler `handler` makes of the
/// sender whose receiver it returns (what the handler heard).
fn one_core_listening<H: ConnHandler + 'static>(
    port: u16,
    handler: fn(mpsc::Sender<String>) -> H,
) -> (KernelService, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let service = KernelService::start(config(1, Limits::default()), move |core| {
        let heard = tx.lock().unwrap().clone();
        core.listen(port, handler(heard))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    (service, rx)
}

#[test]
fn every_byte_comes_back_from_the_echo_handler_on_two_cores() {
    let port = free_port();
    // Buffers smaller than a transfer: the echo fills them both ways.
    let limits = Limits {
        rx_buffer: 16 << 10,
        tx_buffer: 32 << 10,
        ..Limits::default()
    };
    let service = KernelService::start(config(2, limits), move |core| {
        core.listen(port, Echo::new(8192))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let clients: Vec<_> = (0..8u64)
        .map(|i| {
            std::thread::spawn(move || {
                let data = payload(i + 1, 1 << 20);
                let back = echo_client(port, data.clone());
                assert!(back == data, "connection {i}: {} bytes back", back.len());
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let (counters, err) = service.stop();
    err.unwrap();
    let opens: u64 = counters.iter().map(|(_, c)| c.stats.passive_opens).sum();
    let bytes_in: u64 = counters.iter().map(|(_, c)| c.stats.bytes_in).sum();
    let bytes_out: u64 = counters.iter().map(|(_, c)| c.stats.bytes_out).sum();
    assert_eq!(opens, 8);
    assert_eq!(bytes_in, 8 << 20);
    assert_eq!(bytes_out, 8 << 20);
}

#[test]
fn connections_past_the_bound_are_reset_and_counted() {
    let port = free_port();
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let service = KernelService::start(config(1, limits), move |core| {
        core.listen(port, Echo::new(64))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let mut kept: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect((LOOPBACK, port)).unwrap())
        .collect();
    for s in &mut kept {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
    }
    let mut third = TcpStream::connect((LOOPBACK, port)).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // The reset is reported once: to the write if it came first, else to
    // the read.
    let wrote = third.write_all(b"ping").err().map(|e| e.kind());
    let mut b = [0u8; 4];
    let read = third.read(&mut b).err().map(|e| e.kind());
    let reset = Some(std::io::ErrorKind::ConnectionReset);
    assert!(
        wrote == reset || read == reset,
        "write {wrote:?}, read {read:?}"
    );
    let (counters, _) = service.stop();
    let stats = counters[0].1.stats;
    assert_eq!(stats.connection_limit_refused, 1);
    assert_eq!(stats.passive_opens, 2);
    // The refusal's RST is one sent (`resets_out` sums the reasons); the
    // two kept connections, open at the stop, are reset there.
    assert_eq!(
        (stats.resets_out, stats.resets_aborted),
        (3, 3),
        "{stats:?}"
    );
}

/// Opens one connection from `on_start`, sends a request, reads the
/// answer until the peer closes, and reports it.
struct Client {
    to: SocketAddr,
    got: Vec<u8>,
    done: mpsc::Sender<(Vec<u8>, CloseReason)>,
}

impl ConnHandler for Client {
    fn on_start(&mut self, net: &mut dyn Net) {
        net.connect(self.to).unwrap();
    }
    fn on_connected(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        assert_eq!(net.send(conn, b"hello?").unwrap(), 6);
        assert_eq!(net.four_tuple(conn).unwrap().remote, self.to);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let mut b = [0u8; 100];
        while let Ok(n) = net.recv(conn, &mut b) {
            if n == 0 {
                break;
            }
            self.got.extend_from_slice(&b[..n]);
        }
    }
    fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, reason: CloseReason) {
        let _ = self.done.send((std::mem::take(&mut self.got), reason));
    }
}

#[test]
fn a_handler_opens_a_connection_and_hears_it_close() {
    let server = TcpListener::bind((LOOPBACK, 0)).unwrap();
    let to = server.local_addr().unwrap();
    let (service, rx) = one_core_client(to);
    let (mut s, _) = server.accept().unwrap();
    let mut req = [0u8; 6];
    s.read_exact(&mut req).unwrap();
    assert_eq!(&req, b"hello?");
    s.write_all(b"hello!").unwrap();
    drop(s);
    let (got, reason) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, b"hello!");
    assert_eq!(reason, CloseReason::Normal);
    let (counters, _) = service.stop();
    assert_eq!(counters[0].1.stats.active_opens, 1);
    assert_eq!(counters[0].1.connections, 0);
}

#[test]
fn a_refused_open_is_told_as_a_reset_as_on_flowlane_s_stack() {
    // Nobody listens there: the kernel answers the SYN with an RST, which
    // flowlane's stack reports as `Closed { Reset }`, counted in
    // `resets_in` (and tokio's connector as `ConnectionRefused`).
    let to = SocketAddr::from((LOOPBACK, free_port()));
    let (service, rx) = one_core_client(to);
    let (_, reason) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(reason, CloseReason::Reset);
    let (counters, _) = service.stop();
    let stats = counters[0].1.stats;
    assert_eq!((stats.resets_in, stats.resets_out), (1, 0), "{stats:?}");
}

#[test]
fn a_set_up_that_panics_on_one_of_two_cores_is_a_set_up_error() {
    let (tx, rx) = mpsc::channel();
    // On a thread of its own: a `start` that hangs fails the test, not
    // the run.
    std::thread::spawn(move || {
        let r = KernelService::start(config(2, Limits::default()), |core| {
            if core.queue() == 1 {
                panic!("a set-up bug on core 1");
            }
        });
        let _ = tx.send(r.map(drop));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("`start` returned");
    let e = r.expect_err("core 1's set-up failed");
    assert_eq!(e.kind(), StartErrorKind::Worker, "{e}");
    assert!(e.to_string().contains("a set-up bug on core 1"), "{e}");
}

/// A set-up that returns an error is a set-up error (its kind), the
/// set-up's own error its source, the core named.
#[test]
fn a_set_up_s_error_is_the_start_error_s_source() {
    let e = KernelService::start(config(2, Limits::default()), |core| {
        if core.queue() == 1 {
            return Err(std::io::Error::other("core 1 is not wanted"));
        }
        Ok(())
    })
    .expect_err("core 1's set-up failed");
    assert_eq!(e.kind(), StartErrorKind::Setup, "{e:#}");
    assert_eq!(e.to_string(), "queue 1: the set-up failed");
    assert_eq!(
        e.setup_error().map(ToString::to_string).as_deref(),
        Some("core 1 is not wanted")
    );
    assert_eq!(
        format!("{:#}", anyhow::Error::from(e)),
        "queue 1: the set-up failed: core 1 is not wanted"
    );
}

#[test]
fn a_port_held_by_another_reuseport_socket_is_a_set_up_error() {
    // Another service (or process of the same user) that listens with
    // `SO_REUSEPORT` would otherwise share the port silently, taking a
    // part of the connections.
    let port = free_port();
    let holder = flowlane_kernel::reuseport_listener(SocketAddr::from((LOOPBACK, port))).unwrap();
    let e = KernelService::start(config(2, Limits::default()), move |core| {
        core.listen(port, Echo::new(0))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .expect_err("the port is held");
    assert_eq!(e.kind(), StartErrorKind::Os, "{e:#}");
    assert_eq!(
        e.io_error().map(std::io::Error::kind),
        Some(std::io::ErrorKind::AddrInUse)
    );
    let e = e.to_string();
    assert!(
        e.contains(&format!(
            "port {port}/tcp is in use on 127.0.0.1 by a kernel socket"
        )),
        "{e}"
    );
    drop(holder);
}

#[test]
fn a_port_in_use_is_a_set_up_error() {
    let taken = TcpListener::bind((LOOPBACK, 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let e = KernelService::start(config(1, Limits::default()), move |core| {
        core.listen(port, Echo::new(0))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .expect_err("the port is taken");
    // The OS's error, to match on, as the source.
    assert_eq!(e.kind(), StartErrorKind::Os, "{e:#}");
    assert_eq!(
        e.io_error().map(std::io::Error::kind),
        Some(std::io::ErrorKind::AddrInUse)
    );
    assert!(std::error::Error::source(&e).is_some());
    // The port, the address and what to do, not the set-up's own
    // "AddrInUse" (which carries none of them).
    let e = e.to_string();
    assert!(
        e.contains(&format!(
            "port {port}/tcp is in use on 127.0.0.1 by a kernel socket"
        )) && e.contains("choose another port (SetupExt::listen) or stop it")
            && !e.contains("AddrInUse"),
        "{e}"
    );
}

/// Answers each connection's first bytes with a greeting and closes at
/// once, as an HTTP server does on `Connection: close`; records what it
/// hears after its close.
struct Greeter {
    heard: mpsc::Sender<String>,
}

impl ConnHandler for Greeter {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.discard(conn);
        net.send(conn, b"bye").unwrap();
        net.close(conn).unwrap();
        // Closed, but the connection stays until the peer's FIN.
        assert!(net.four_tuple(conn).is_ok());
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let valid = net.four_tuple(conn).is_ok();
        let _ = self
            .heard
            .send(format!("peer closed, handle valid: {valid}"));
    }
    fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, reason: CloseReason) {
        let _ = self.heard.send(format!("closed {reason:?}"));
    }
}

#[test]
fn a_connection_closed_first_ends_with_the_peers_fin() {
    let port = free_port();
    let (service, rx) = one_core_listening(port, |heard| Greeter { heard });
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"hi").unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"bye");
    // Our FIN came; the server keeps the connection until the peer's
    // (counters are published every 100 ms).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(service.counters()[0].1.connections, 1);
    drop(s);
    let heard: Vec<String> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
        .collect();
    assert_eq!(
        heard,
        ["peer closed, handle valid: true", "closed Normal"],
        "{heard:?}"
    );
    let (counters, _) = service.stop();
    assert_eq!(counters[0].1.stats.resets_out, 0);
}

#[test]
fn a_handler_reads_the_kernel_s_figures_for_its_connection() {
    let port = free_port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let service =
        KernelService::start(config(1, Limits::default()), listen_informed(port, &seen)).unwrap();
    info_is_told(port, &seen, false);
    let (_, err) = service.stop();
    err.unwrap();
}

/// A handler's `on_closed` reads its connection's addresses, as on the
/// other backends (the loop has released the connection by then: the
/// dispatcher answers from what it recorded at accept), and its last
/// figures, having asked for them before (read at the handler's close,
/// the kernel's socket gone since): nothing left unread or unsent.
#[test]
fn a_handler_reads_its_connection_s_addresses_and_figures_in_on_closed() {
    let port = free_port();
    let told = AtClose::default();
    let service = KernelService::start(
        config(1, Limits::default()),
        listen_told_at_close(port, &told),
    )
    .unwrap();
    let info = addresses_are_told_at_close(port, &told).expect("figures in on_closed");
    assert_eq!((info.readable, info.unsent), (0, 0), "{info:?}");
    assert!(
        info.mss > 0 && info.cwnd > 0,
        "the kernel's figures: {info:?}"
    );
    let (_, err) = service.stop();
    err.unwrap();
}

/// A handler that never asked for a connection's figures has none in its
/// `on_closed` (`InvalidHandle`, the socket gone): the loop reads the
/// kernel's figures at the end only for connections whose handler asked,
/// costing the others nothing.
#[test]
fn a_connection_whose_figures_were_never_asked_has_none_in_on_closed() {
    let port = free_port();
    let told = AtClose::default();
    let service = KernelService::start(
        config(1, Limits::default()),
        listen_told_at_close_asking(port, &told, false),
    )
    .unwrap();
    let info = addresses_are_told_at_close(port, &told);
    assert_eq!(info, Err(flowlane_app::Error::InvalidHandle));
    let (_, err) = service.stop();
    err.unwrap();
}

#[test]
fn a_handler_refuses_a_connection_before_taking_it() {
    let port = free_port();
    let service =
        KernelService::start(config(1, Limits::default()), listen_every_other(port)).unwrap();
    the_second_is_refused(port);
    let (counters, err) = service.stop();
    err.unwrap();
    assert_eq!(counters[0].1.stats.passive_opens, 2);
    assert_eq!(
        counters[0].1.application_refused, 1,
        "counted for the summary"
    );
}

/// FNV-1a over `bytes`, continued from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Reads slowly: at most `per_tick` bytes of each connection per loop
/// tick, so that what arrives stays in the buffers; reports each
/// connection's digest once `expect` bytes came.
struct SlowReader {
    per_tick: usize,
    expect: usize,
    conns: Vec<(ConnHandle, usize, u64)>,
    done: mpsc::Sender<u64>,
}

impl ConnHandler for SlowReader {
    fn on_accept(&mut self, _net: &mut dyn Net, conn: ConnHandle) {
        self.conns.push((conn, 0, FNV_START));
    }
    fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    fn on_peer_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    fn on_tick(&mut self, net: &mut dyn Net) {
        let mut finished = Vec::new();
        for (conn, got, h) in &mut self.conns {
            let Ok(bytes) = net.peek(*conn) else { continue };
            let n = bytes.len().min(self.per_tick);
            *h = fnv(*h, &bytes[..n]);
            *got += n;
            let _ = net.consume(*conn, n);
            if *got == self.expect {
                let _ = self.done.send(*h);
                finished.push(*conn);
            }
        }
        for c in finished {
            let _ = net.close(c);
            self.conns.retain(|(h, _, _)| *h != c);
        }
    }
}

#[test]
fn slow_readers_share_a_bounded_receive_memory_and_get_every_byte() {
    let port = free_port();
    // Four 16 KiB receive buffers for 24 connections that each send more
    // than four buffers' worth.
    let limits = Limits {
        rx_buffer: 16 << 10,
        rx_memory: 64 << 10,
        ..Limits::default()
    };
    let (conns, size) = (24u64, 256 << 10);
    let (tx, rx) = mpsc::channel();
    let service = KernelService::start(config(1, limits), move |core| {
        let reader = SlowReader {
            per_tick: 4096,
            expect: size,
            conns: Vec::new(),
            done: tx.clone(),
        };
        core.listen(port, reader)
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let clients: Vec<_> = (0..conns)
        .map(|i| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(SocketAddr::from((LOOPBACK, port))).unwrap();
                s.write_all(&payload(i + 1, size)).unwrap();
                // Held open until the server closes: it has read it all.
                let mut rest = Vec::new();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let _ = s.read_to_end(&mut rest);
            })
        })
        .collect();
    let mut got: Vec<u64> = (0..conns)
        .map(|_| rx.recv_timeout(Duration::from_secs(60)).expect("a digest"))
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let (counters, err) = service.stop();
    err.unwrap();
    let mut want: Vec<u64> = (0..conns)
        .map(|i| fnv(FNV_START, &payload(i + 1, size)))
        .collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "every connection's bytes, in order");
    let c = counters[0].1;
    assert!(c.rx_memory_peak <= 64 << 10, "{c:?}");
    assert!(c.rx_memory_waits > 0, "connections waited: {c:?}");
    assert_eq!(c.stats.bytes_in, conns * size as u64);
    assert_eq!(c.buffer_memory, 0, "all given back: {c:?}");
}

/// Sends `total` bytes of `payload(seed)` on each connection it accepts
/// (the seed its first byte from the client), as fast as `send` takes
/// them, then closes.
struct Blast {
    total: usize,
    conns: Vec<(ConnHandle, Vec<u8>, usize)>,
}

impl Blast {
    fn push(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Some(i) = self.conns.iter().position(|c| c.0 == conn) else {
            return;
        };
        let (_, data, sent) = &mut self.conns[i];
        while *sent < data.len() {
            match net.send(conn, &data[*sent..]) {
                Ok(n) => *sent += n,
                Err(_) => return,
            }
        }
        let _ = net.close(conn);
        self.conns.swap_remove(i);
    }
}

impl ConnHandler for Blast {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if self.conns.iter().any(|c| c.0 == conn) {
            return;
        }
        let mut seed = [0u8; 1];
        if net.recv(conn, &mut seed) == Ok(1) {
            // A small kernel send buffer, fixed: auto-tuned (up to
            // `tcp_wmem`'s 4 MiB) it could take a whole payload while the
            // peer does not read, and whether the send memory ever filled
            // then depended on how fast the kernel grew it (the test
            // failed about one run in two on a fresh VM).
            net.set_send_buffer(conn, 16 << 10).expect("live");
            let data = payload(u64::from(seed[0]), self.total);
            self.conns.push((conn, data, 0));
            self.push(net, conn);
        }
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.push(net, conn);
    }
}

#[test]
fn writes_to_peers_that_do_not_read_share_a_bounded_send_memory() {
    let port = free_port();
    // Four 32 KiB send buffers for 12 connections whose peers read
    // nothing for a while.
    let limits = Limits {
        tx_buffer: 32 << 10,
        tx_memory: 128 << 10,
        ..Limits::default()
    };
    let (conns, size) = (12u8, 4 << 20);
    let service = KernelService::start(config(1, limits), move |core| {
        let blast = Blast {
            total: size,
            conns: Vec::new(),
        };
        core.listen(port, blast)
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let clients: Vec<_> = (1..=conns)
        .map(|seed| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(SocketAddr::from((LOOPBACK, port))).unwrap();
                s.write_all(&[seed]).unwrap();
                // Not reading: the server's socket buffers fill, then its
                // send buffers.
                std::thread::sleep(Duration::from_millis(500));
                let mut got = Vec::new();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                s.read_to_end(&mut got).unwrap();
                assert!(
                    got == payload(u64::from(seed), size),
                    "connection {seed}: {} bytes",
                    got.len()
                );
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let (counters, err) = service.stop();
    err.unwrap();
    let c = counters[0].1;
    assert_eq!(c.stats.bytes_out, u64::from(conns) * size as u64);
    assert!(c.tx_memory_peak <= 128 << 10, "{c:?}");
    assert!(c.tx_memory_waits > 0, "writes waited: {c:?}");
    assert_eq!(c.buffer_memory, 0, "all given back: {c:?}");
}

#[test]
fn an_echo_out_of_send_memory_loses_no_byte() {
    // One 32 KiB send buffer for the core: a peer that sends and never
    // reads takes it; another peer's echo then meets a full socket with no
    // buffer to hold the rest of a write. What the send did not take must
    // stay unread, not vanish.
    let port = free_port();
    let limits = Limits {
        tx_buffer: 32 << 10,
        tx_memory: 32 << 10,
        ..Limits::default()
    };
    let service = KernelService::start(config(1, limits), move |core| {
        core.listen(port, Echo::new(16 << 10))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let hog = TcpStream::connect((LOOPBACK, port)).unwrap();
    let mut w = hog.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = w.write_all(&payload(7, 32 << 20));
    });
    std::thread::sleep(Duration::from_millis(500));
    let data = payload(8, 16 << 20);
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        w.write_all(&sent).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    // Read late: the server's socket towards us fills first.
    std::thread::sleep(Duration::from_millis(500));
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert!(
        back == data,
        "{} of {} bytes back, equal: false",
        back.len(),
        data.len()
    );
    drop(hog);
    let (counters, err) = service.stop();
    err.unwrap();
    assert!(
        counters[0].1.tx_memory_waits > 0,
        "the case arose: {:?}",
        counters[0].1
    );
}

/// Set in the child of
/// [`a_listener_out_of_descriptors_accepts_again_once_some_are_free`]: the
/// port it serves on.
const EMFILE_CHILD: &str = "FLOWLANE_TEST_EMFILE_CHILD";

#[test]
fn a_listener_out_of_descriptors_accepts_again_once_some_are_free() {
    if let Ok(port) = std::env::var(EMFILE_CHILD) {
        // The child: an echo service under a descriptor limit it cannot
        // raise (soft and hard), until the parent kills it.
        let port: u16 = port.parse().unwrap();
        let _service = KernelService::start(config(1, Limits::default()), move |core| {
            core.listen(port, Echo::new(4096))
                .map(|_| ())
                .map_err(|e| format!("{e:?}"))
        })
        .unwrap();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let port = free_port();
    let exe = std::env::current_exe().unwrap();
    let name = "a_listener_out_of_descriptors_accepts_again_once_some_are_free";
    let mut child = std::process::Command::new("sh")
        .args([
            "-c",
            "ulimit -n 32 && exec \"$0\" --exact \"$1\" --nocapture",
        ])
        .arg(&exe)
        .arg(name)
        .env(EMFILE_CHILD, port.to_string())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((LOOPBACK, port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // More clients than the child has descriptors: some are served, the
    // rest wait in the accept queue while accepts fail (EMFILE).
    let clients: Vec<TcpStream> = (0..48)
        .map(|_| {
            let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
            s.write_all(b"ping").unwrap();
            s
        })
        .collect();
    let echoed = |s: &mut TcpStream, wait: Duration| {
        s.set_read_timeout(Some(wait)).unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).is_ok() && &b == b"ping"
    };
    let (mut served, mut waiting) = (Vec::new(), Vec::new());
    for mut s in clients {
        if echoed(&mut s, Duration::from_millis(300)) {
            served.push(s);
        } else {
            waiting.push(s);
        }
    }
    assert!(
        !served.is_empty() && !waiting.is_empty(),
        "{} served",
        served.len()
    );
    // The served ones leave: their descriptors free up, and nothing new
    // arrives to wake the listener.
    drop(served);
    // Each served one leaves in turn, freeing a descriptor for the next.
    let late = waiting
        .into_iter()
        .filter(|s| {
            let mut s = s.try_clone().unwrap();
            !echoed(&mut s, Duration::from_secs(5))
        })
        .count();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        late, 0,
        "clients left in the accept queue after descriptors freed"
    );
}

#[test]
fn a_handler_s_empty_read_is_end_of_stream_only_at_the_end() {
    let port = free_port();
    let seen = EmptyReadsSeen::default();
    let service = KernelService::start(
        config(1, Limits::default()),
        listen_empty_reads(port, &seen),
    )
    .unwrap();
    empty_reads_are_end_of_stream_only_at_the_end(port, &seen);
    let (_, err) = service.stop();
    err.unwrap();
}

/// Sends `data` on the connection it accepts (its kernel send buffer
/// small, fixed), as fast as `send` takes it, counting what `send` took in
/// `taken`; closes once `send` took it all, when `close`.
struct Bulk {
    data: Vec<u8>,
    close: bool,
    conn: Option<(ConnHandle, usize)>,
    taken: std::sync::Arc<AtomicUsize>,
}

impl Bulk {
    fn new(data: Vec<u8>, close: bool, taken: &std::sync::Arc<AtomicUsize>) -> Bulk {
        Bulk {
            data,
            close,
            conn: None,
            taken: taken.clone(),
        }
    }

    fn push(&mut self, net: &mut dyn Net) {
        let Some((conn, sent)) = &mut self.conn else {
            return;
        };
        while *sent < self.data.len() {
            match net.send(*conn, &self.data[*sent..]) {
                Ok(n) => {
                    *sent += n;
                    self.taken.store(*sent, Ordering::Relaxed);
                }
                Err(_) => return,
            }
        }
        if self.close {
            net.close(*conn).unwrap();
            self.conn = None;
        }
    }
}

impl ConnHandler for Bulk {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.set_send_buffer(conn, 16 << 10).unwrap();
        self.conn = Some((conn, 0));
        self.push(net);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.discard(conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, _conn: ConnHandle) {
        self.push(net);
    }
}

/// A service on one core whose [`Bulk`] handler sends `data`, with
/// `tx_buffer` bytes of send buffer per connection.
fn bulk_service(
    port: u16,
    data: Vec<u8>,
    close: bool,
    tx_buffer: usize,
    taken: &std::sync::Arc<AtomicUsize>,
) -> KernelService {
    let limits = Limits {
        tx_buffer,
        ..Limits::default()
    };
    let taken = taken.clone();
    KernelService::start(config(1, limits), move |core| {
        core.listen(port, Bulk::new(data.clone(), close, &taken))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap()
}

/// Reads `s` until end of stream or an error: the bytes and how it ended.
fn read_until_the_end(s: &mut TcpStream) -> (Vec<u8>, Result<(), std::io::ErrorKind>) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, Ok(())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (got, Err(e.kind())),
        }
    }
}

/// Waits (10 s at most) until `taken` reached `n`.
fn wait_taken(taken: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while taken.load(Ordering::Relaxed) < n {
        assert!(Instant::now() < deadline, "`send` took {taken:?} of {n}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_stop_resets_a_connection_whose_bytes_did_not_all_go() {
    // More than the kernel's buffers and ours hold, to a peer that reads
    // nothing until the service stopped: the bytes `send` took and the
    // socket did not cannot reach it, so the stop must not look like the
    // end of the stream (a FIN): a truncated body taken as complete.
    let port = free_port();
    let taken = std::sync::Arc::new(AtomicUsize::new(0));
    let data = payload(21, 32 << 20);
    let service = bulk_service(port, data.clone(), false, 256 << 10, &taken);
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (counters, err) = service.stop();
    err.unwrap();
    let taken = taken.load(Ordering::Relaxed);
    assert!(taken > 0 && taken < data.len(), "{taken}");
    let (got, end) = read_until_the_end(&mut s);
    assert!(got == data[..got.len()], "the bytes read are the data's");
    assert!(
        end == Err(std::io::ErrorKind::ConnectionReset) || (end.is_ok() && got.len() == taken),
        "read {} of the {taken} bytes `send` took, then {end:?}",
        got.len()
    );
    assert_eq!(counters[0].1.stats.resets_out, 1, "{:?}", counters[0].1);
}

#[test]
fn a_stop_lets_a_close_send_what_it_holds_first() {
    // The handler closed after `send` took it all, most of it still in
    // the loop's own send buffer (the peer had not read yet); the peer
    // reads from just after the stop began: every byte, then the FIN.
    let port = free_port();
    let taken = std::sync::Arc::new(AtomicUsize::new(0));
    let data = payload(22, 2 << 20);
    let service = bulk_service(port, data.clone(), true, 4 << 20, &taken);
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    wait_taken(&taken, data.len());
    let stopping = std::thread::spawn(move || service.stop());
    std::thread::sleep(Duration::from_millis(200));
    let (got, end) = read_until_the_end(&mut s);
    assert_eq!(end, Ok(()));
    assert!(got == data, "{} of {} bytes", got.len(), data.len());
    let (counters, err) = stopping.join().unwrap();
    err.unwrap();
    assert_eq!(counters[0].1.stats.resets_out, 0, "{:?}", counters[0].1);
}

#[test]
fn a_stop_resets_a_close_whose_peer_does_not_read_in_time() {
    // As above, but the peer reads only once the service stopped: the
    // close could not finish within the stop's bound, and is reset.
    let port = free_port();
    let taken = std::sync::Arc::new(AtomicUsize::new(0));
    let data = payload(23, 2 << 20);
    let service = bulk_service(port, data.clone(), true, 4 << 20, &taken);
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    wait_taken(&taken, data.len());
    let started = Instant::now();
    let (counters, err) = service.stop();
    assert!(started.elapsed() < Duration::from_secs(5), "bounded");
    err.unwrap();
    let (got, end) = read_until_the_end(&mut s);
    assert!(got.len() < data.len() && got == data[..got.len()]);
    assert_eq!(end, Err(std::io::ErrorKind::ConnectionReset));
    assert_eq!(counters[0].1.stats.resets_out, 1, "{:?}", counters[0].1);
}

/// Reads what comes and keeps each connection open, whatever the peer
/// does (a reply being prepared elsewhere); reports every callback.
struct Keeper {
    heard: mpsc::Sender<String>,
}

impl ConnHandler for Keeper {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let n = net.discard(conn);
        let _ = self.heard.send(format!("data {n}"));
    }
    fn on_peer_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {
        let _ = self.heard.send("peer closed".into());
    }
    fn on_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle, reason: CloseReason) {
        let _ = self.heard.send(format!("closed {reason:?}"));
    }
}

#[test]
fn a_reset_after_the_peer_s_fin_ends_the_connection() {
    // An RST in CLOSE-WAIT: flowlane's stack reports `Closed { Reset }`.
    let port = free_port();
    let (service, rx) = one_core_listening(port, |heard| Keeper { heard });
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.write_all(b"request").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let heard: Vec<String> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
        .collect();
    assert_eq!(heard, ["data 7", "peer closed"]);
    reset(s);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)).as_deref(),
        Ok("closed Reset")
    );
    // Counters are published every 100 ms.
    let deadline = Instant::now() + Duration::from_secs(1);
    while service.counters()[0].1.connections > 0 {
        assert!(Instant::now() < deadline, "the connection stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (counters, err) = service.stop();
    err.unwrap();
    assert_eq!(counters[0].1.stats.resets_in, 1);
}

/// Says "bye" and shuts its writing down at accept (or, with `at_fin`,
/// once the peer closed); reads at its tick only; never closes: once both
/// FINs went and every byte was read, the exchange is over.
struct HalfCloser {
    heard: mpsc::Sender<String>,
    at_fin: bool,
    conns: Vec<ConnHandle>,
}

impl HalfCloser {
    fn bye(net: &mut dyn Net, conn: ConnHandle) {
        net.send(conn, b"bye").unwrap();
        net.shutdown_write(conn).unwrap();
    }
}

impl ConnHandler for HalfCloser {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.conns.push(conn);
        if !self.at_fin {
            HalfCloser::bye(net, conn);
        }
    }
    fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let _ = self.heard.send("peer closed".into());
        if self.at_fin {
            HalfCloser::bye(net, conn);
        }
    }
    fn on_tick(&mut self, net: &mut dyn Net) {
        for &c in &self.conns {
            net.discard(c);
        }
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, reason: CloseReason) {
        self.conns.retain(|&c| c != conn);
        let _ = self.heard.send(format!("closed {reason:?}"));
    }
}

/// A connection whose handler shut its writing down and whose peer closed
/// ends `Normal` once every byte was read, without `close`, as flowlane's
/// stack ends it (the exchange is over): our FIN first or the peer's,
/// the peer's last bytes read with its FIN or after it (at the tick).
#[test]
fn both_fins_and_every_byte_read_end_the_connection() {
    for (at_fin, peer_sends) in [(false, false), (false, true), (true, true)] {
        let port = free_port();
        let (tx, heard) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let service = KernelService::start(config(1, Limits::default()), move |core| {
            let heard = tx.lock().unwrap().clone();
            let h = HalfCloser {
                heard,
                at_fin,
                conns: Vec::new(),
            };
            core.listen(port, h).map(drop).map_err(|e| format!("{e:?}"))
        })
        .unwrap();
        let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        if peer_sends {
            s.write_all(b"last words").unwrap();
        }
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"bye");
        let told: Vec<_> = (0..2)
            .map(|_| heard.recv_timeout(Duration::from_secs(5)))
            .collect();
        let (counters, err) = service.stop();
        err.unwrap();
        let case = format!("FIN at the peer's: {at_fin}, peer sends: {peer_sends}");
        assert_eq!(
            told,
            [Ok("peer closed".to_string()), Ok("closed Normal".into())],
            "{case}"
        );
        assert_eq!(counters[0].1.stats.resets_out, 0, "{case}");
    }
}

/// A listen whose second address cannot be bound leaves no listener on
/// the first (nobody would hear of its connections) and no claim on it:
/// the port can be listened on again once it is free.
#[test]
fn a_failed_listen_leaves_no_listener_behind() {
    use flowlane_kernel::KernelCore;
    let port = free_port();
    let second: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let other = TcpListener::bind((second, port)).unwrap();
    let mut core =
        KernelCore::new(places(1)[0], vec![LOOPBACK, second], Limits::default()).unwrap();
    let r = core.listen(port, Echo::new(0)).map(drop);
    assert_eq!(r, Err(flowlane_app::Error::AddrInUse));
    let first = SocketAddr::from((LOOPBACK, port));
    let c = TcpStream::connect_timeout(&first, Duration::from_secs(5));
    assert_eq!(
        c.map(drop).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionRefused),
        "a listener of the failed listen takes connections"
    );
    drop(other);
    assert_eq!(core.listen(port, Echo::new(0)).map(drop), Ok(()));
}
