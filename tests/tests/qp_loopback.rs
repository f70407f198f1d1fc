//! Queue-pair mode over the kernel-socket backend on loopback, kernel TCP
//! as the peer: the echo handler of run to completion, unchanged, on
//! application threads; and back-pressure from a thread that does not read.

mod loopback_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt, StopErrorKind, Worker};
use flowlane_kernel::KernelService;
use flowlane_qp::{QueuePairConfig, QueuePairs};
use loopback_common::*;

/// How long an application thread may not pass before its connections are
/// reset, in these tests.
const STALL_AFTER: Duration = Duration::from_millis(500);

/// Queue pairs with `threads` application threads set up by `setup`, over
/// a two-core kernel-socket backend.
fn start<S>(threads: u32, setup: S) -> (Arc<QueuePairs>, KernelService)
where
    S: Fn(&mut dyn flowlane_app::Setup) -> Result<(), String> + Send + Sync + 'static,
{
    let qp = Arc::new(
        QueuePairs::start(
            QueuePairConfig {
                cores: places(2),
                app_threads: places(threads),
                pin: |_| Ok(()),
                stall_after: STALL_AFTER,
            },
            setup,
        )
        .unwrap(),
    );
    let kernel = kernel_cores_for(&qp);
    (qp, kernel)
}

#[test]
fn the_echo_handler_runs_unchanged_on_application_threads() {
    let port = free_port();
    let (qp, kernel) = start(2, move |t| {
        t.listen(port, Echo::new(16 << 10))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    });
    let clients: Vec<_> = (0..6u64)
        .map(|i| {
            std::thread::spawn(move || {
                let data = payload(i + 7, (1 << 20) + 4099 * i as usize);
                let back = echo_client(port, data.clone());
                assert!(back == data, "connection {i}: {} bytes back", back.len());
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while qp.connections() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(qp.connections(), 0, "every connection closed");
    let (counters, err) = kernel.stop();
    err.unwrap();
    let bytes_in: u64 = counters.iter().map(|(_, c)| c.stats.bytes_in).sum();
    let want: u64 = (0..6u64).map(|i| (1 << 20) + 4099 * i).sum();
    assert_eq!(bytes_in, want);
    qp.stop().unwrap();
}

/// Reads nothing until `go` is set, then echoes (from its next tick on:
/// data it left unread raises no new event).
struct Stalled {
    go: Arc<AtomicBool>,
    scratch: Vec<u8>,
    conns: Vec<ConnHandle>,
}

impl ConnHandler for Stalled {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if !self.conns.contains(&conn) {
            self.conns.push(conn);
        }
        if self.go.load(Ordering::Relaxed) {
            net.echo(conn, &mut self.scratch);
        }
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.on_data(net, conn);
    }
    fn on_closed(
        &mut self,
        _net: &mut dyn Net,
        conn: ConnHandle,
        _reason: flowlane_app::CloseReason,
    ) {
        self.conns.retain(|&c| c != conn);
    }
    fn on_tick(&mut self, net: &mut dyn Net) {
        if self.go.load(Ordering::Relaxed) {
            for c in self.conns.clone() {
                net.echo(c, &mut self.scratch);
            }
        }
    }
}

#[test]
fn a_thread_that_does_not_read_closes_the_window_and_loses_nothing() {
    let port = free_port();
    let go = Arc::new(AtomicBool::new(false));
    let g = go.clone();
    let (_qp, kernel) = start(1, move |t| {
        t.listen(
            port,
            Stalled {
                go: g.clone(),
                scratch: vec![0; 16 << 10],
                conns: Vec::new(),
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    });
    let data = payload(3, 64 << 20);
    let (s, sent) = write_until_blocked(port, &data);
    // The core took about its credit (256 KiB) off the socket; the rest
    // waits in the kernel's buffers, the window closed.
    std::thread::sleep(Duration::from_millis(200));
    let taken = bytes_in(&kernel);
    assert!(taken < 1 << 20, "the core read {taken} of {sent} bytes");
    go.store(true, Ordering::Relaxed);
    finish_echo(s, &data, sent);
    kernel.stop().1.expect("no core failed");
}

/// Echoes, except that the word "boom" makes it panic.
struct Fragile {
    scratch: Vec<u8>,
}

impl ConnHandler for Fragile {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if net.peek(conn).is_ok_and(|d| d.starts_with(b"boom")) {
            panic!("the application's bug (this test's, on purpose)");
        }
        net.echo(conn, &mut self.scratch);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.scratch);
    }
}

/// An application thread that panics takes its connections with it (the
/// cores reset them, counted) and nothing else: the network cores and the
/// other thread go on serving.
#[test]
fn a_panicking_application_thread_loses_its_connections_only() {
    let port = free_port();
    let (qp, kernel) = start(2, move |t| {
        t.listen(
            port,
            Fragile {
                scratch: vec![0; 4096],
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    });
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"boom").unwrap();
    let mut b = [0u8; 16];
    // Reset (or at least closed): never an answer.
    assert!(!matches!(s.read(&mut b), Ok(n) if n > 0));
    let deadline = Instant::now() + Duration::from_secs(5);
    while qp.dead_threads().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let dead = qp.dead_threads();
    assert_eq!(dead.len(), 1, "{dead:?}");
    // The other thread's core still echoes; connections the kernel puts on
    // the dead thread's core are reset. Try until one lands on the live one.
    let mut echoed = 0;
    for i in 0..40u64 {
        let data = payload(i + 100, 10_000);
        let mut c = TcpStream::connect((LOOPBACK, port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut back = Vec::new();
        // A connection on the dead thread's core is reset at any step.
        let served = c.write_all(&data).is_ok()
            && c.shutdown(std::net::Shutdown::Write).is_ok()
            && c.read_to_end(&mut back).is_ok()
            && back == data;
        echoed += u32::from(served);
    }
    assert!(echoed > 0, "no connection was served after the panic");
    assert!(
        echoed < 40,
        "every connection landed on the live core (odds 2^-40)"
    );
    assert!(
        qp.orphaned() >= 1,
        "the panicking thread's connection was not counted"
    );
    let (_, err) = kernel.stop();
    err.expect("a network core ended");
    // The stop reports it: the thread, its panic's words, nothing else.
    let e = qp.stop().expect_err("the panic is reported");
    assert_eq!(e.kind(), StopErrorKind::Panicked, "{e:#}");
    assert_eq!(e.worker(), Some(Worker::AppThread(dead[0])), "{e:#}");
    assert_eq!(
        e.panic_message(),
        Some("the application's bug (this test's, on purpose)")
    );
    assert_eq!(e.failures().count(), 1, "{e:#}");
}

/// Closes each connection at its first data without reading it.
struct Rude;

impl ConnHandler for Rude {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.close(conn).unwrap();
    }
}

/// Closing with unread data resets the connection, as in run to
/// completion, though the unread bytes are on the application thread and
/// not in the core's stack.
#[test]
fn closing_with_unread_data_resets() {
    let port = free_port();
    let (_qp, kernel) = start(1, move |t| {
        t.listen(port, Rude)
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    });
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"unread").unwrap();
    let mut b = [0u8; 8];
    let e = s.read(&mut b).expect_err("reset");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    let (counters, _) = kernel.stop();
    assert_eq!(
        counters
            .iter()
            .map(|(_, c)| c.stats.resets_out)
            .sum::<u64>(),
        1
    );
}

/// Echoes, except that the word "stall" blocks the thread for 1.5 s.
struct Sleepy {
    scratch: Vec<u8>,
}

impl ConnHandler for Sleepy {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if net.peek(conn).is_ok_and(|d| d.starts_with(b"stall")) {
            net.discard(conn);
            std::thread::sleep(Duration::from_millis(1500));
            return;
        }
        net.echo(conn, &mut self.scratch);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.scratch);
    }
}

/// A thread blocked in a handler past the stall limit loses its
/// connections (reset, counted); once it passes again it serves new ones.
#[test]
fn a_stalled_application_thread_loses_its_connections_and_comes_back() {
    let port = free_port();
    let (qp, kernel) = start(2, move |t| {
        t.listen(
            port,
            Sleepy {
                scratch: vec![0; 4096],
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    });
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"stall").unwrap();
    let mut b = [0u8; 8];
    let e = s.read(&mut b).expect_err("reset while its thread sleeps");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    assert_eq!(qp.orphaned(), 1, "the reset is counted");
    // Once the thread is back, both cores serve again.
    std::thread::sleep(Duration::from_millis(2000));
    for i in 0..12u64 {
        let data = payload(i + 300, 5_000);
        assert!(echo_client(port, data.clone()) == data, "connection {i}");
    }
    assert!(qp.dead_threads().is_empty());
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn an_application_thread_reads_the_core_s_figures_for_its_connection() {
    let port = free_port();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (qp, kernel) = start(1, listen_informed(port, &seen));
    info_is_told(port, &seen, true);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// An application thread's `on_closed` reads its connection's addresses
/// as on the other backends, and its figures (asked for as it accepted,
/// the close in the same pass as the whole exchange, often): nothing left
/// unread.
#[test]
fn an_application_thread_reads_its_connection_s_addresses_in_on_closed() {
    let port = free_port();
    let told = AtClose::default();
    let (qp, kernel) = start(1, listen_told_at_close(port, &told));
    let info = addresses_are_told_at_close(port, &told).expect("figures in on_closed");
    assert_eq!(info.readable, 0, "{info:?}");
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn an_application_thread_refuses_a_connection_before_taking_it() {
    let port = free_port();
    let (qp, kernel) = start(1, listen_every_other(port));
    the_second_is_refused(port);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
    assert_eq!(qp.application_refused(), 1, "counted for the summary");
}

/// Reads what it has at its first data, then, 300 ms later (more has
/// come meanwhile), closes.
struct ReadsThenCloses;

impl ConnHandler for ReadsThenCloses {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.discard(conn);
        std::thread::sleep(Duration::from_millis(300));
        net.close(conn).unwrap();
    }
}

/// A close while bytes the core already took from the stack are on their
/// way to the application thread (it read all it had seen) resets the
/// connection, as a close with unread data does: a FIN would tell the
/// peer that bytes its stack saw acknowledged were read.
#[test]
fn closing_with_data_on_its_way_to_the_thread_resets() {
    let port = free_port();
    let (_qp, kernel) = start(1, move |t| {
        t.listen(port, ReadsThenCloses)
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    });
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"first").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(b"second").unwrap();
    let mut b = [0u8; 8];
    let got = s.read(&mut b).map_err(|e| e.kind());
    assert_eq!(got, Err(std::io::ErrorKind::ConnectionReset));
    kernel.stop().1.expect("no core failed");
}

#[test]
fn an_application_thread_s_empty_read_is_end_of_stream_only_at_the_end() {
    let port = free_port();
    let seen = EmptyReadsSeen::default();
    let (qp, kernel) = start(1, listen_empty_reads(port, &seen));
    empty_reads_are_end_of_stream_only_at_the_end(port, &seen);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// Works `each` on every connection it accepts (slept here: to the cores a
/// thread working and one sleeping look alike), then echoes.
struct Laborious {
    each: Duration,
    echo: Echo,
}

impl ConnHandler for Laborious {
    fn on_accept(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {
        std::thread::sleep(self.each);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_data(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_writable(net, conn);
    }
}

/// A thread busy past the stall limit on many events, none of them near
/// it (a burst of accepts taken in one pass), is working, not stalled:
/// none of its connections is reset, every one is served.
#[test]
fn a_thread_busy_on_many_short_events_is_not_stalled() {
    let port = free_port();
    let (qp, kernel) = start(1, move |t| {
        t.listen(
            port,
            Laborious {
                each: STALL_AFTER / 5,
                echo: Echo::new(4096),
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    });
    // Their accepts wait for the thread together: about 2.4 stall limits
    // of work, in one or two passes.
    let conns: Vec<TcpStream> = (0..12)
        .map(|_| TcpStream::connect((LOOPBACK, port)).unwrap())
        .collect();
    for (i, mut c) in conns.into_iter().enumerate() {
        let data = payload(i as u64 + 500, 3_000);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(&data).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back)
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert!(back == data, "connection {i}: {} bytes back", back.len());
    }
    assert_eq!(qp.orphaned(), 0, "a working thread was taken for stalled");
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// Sleeps 300 ms at its first data (a long pass: the core's messages wait
/// in the queue meanwhile), then echoes.
struct Dozy {
    slept: bool,
    echo: Echo,
}

impl ConnHandler for Dozy {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if !std::mem::replace(&mut self.slept, true) {
            std::thread::sleep(Duration::from_millis(300));
        }
        self.echo.on_data(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.echo.on_writable(net, conn);
    }
}

/// A peer's one-byte segments, many more than the credit has room for at
/// a small message's cost, some while the thread is in a long pass: the
/// thread gives each message's cost back as it takes it, so the credit
/// never runs out, and the stream comes back whole and in order.
#[test]
fn one_byte_segments_come_back_whole_and_in_order() {
    let port = free_port();
    let (qp, kernel) = start(1, move |t| {
        t.listen(
            port,
            Dozy {
                slept: false,
                echo: Echo::new(4096),
            },
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
    });
    let data = payload(77, 3_000);
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut back = Vec::new();
        r.read_to_end(&mut back).map(|_| back)
    });
    for b in &data {
        s.write_all(std::slice::from_ref(b)).unwrap();
        std::thread::sleep(Duration::from_micros(100));
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let back = reader.join().unwrap().expect("the echo");
    assert!(back == data, "{} of {} bytes back", back.len(), data.len());
    assert_eq!(qp.orphaned(), 0);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// Queue-pair mode's port, taken already, is refused by the network
/// backend's start as on run to completion: the OS's `AddrInUse` to match
/// on, and the line naming the port; a set-up that fails on an
/// application thread is a set-up error naming the thread.
#[test]
fn a_port_in_use_and_a_failed_set_up_are_start_errors_to_match() {
    use flowlane_app::StartErrorKind;
    let taken = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    // On a thread of its own: a `start` that hangs fails the test.
    std::thread::spawn(move || {
        let qp = Arc::new(
            QueuePairs::start(
                QueuePairConfig {
                    cores: places(2),
                    app_threads: places(1),
                    pin: |_| Ok(()),
                    stall_after: STALL_AFTER,
                },
                move |s| s.listen(port, Echo::new(0)),
            )
            .unwrap(),
        );
        let q = qp.clone();
        let r = KernelService::start(
            flowlane_kernel::KernelConfig {
                cores: places(2),
                listen_on: vec![LOOPBACK],
                limits: flowlane_kernel::Limits::default(),
            },
            move |core| q.setup_core(core),
        );
        let _ = tx.send(r.map(drop));
        let _ = qp.stop();
    });
    let e = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("`start` returned")
        .expect_err("the port is taken");
    assert_eq!(e.kind(), StartErrorKind::Os, "{e:#}");
    assert_eq!(
        e.io_error().map(std::io::Error::kind),
        Some(std::io::ErrorKind::AddrInUse)
    );
    assert!(
        e.to_string()
            .contains(&format!("port {port}/tcp is in use on 127.0.0.1")),
        "{e}"
    );
    drop(taken);

    let e = QueuePairs::start(
        QueuePairConfig {
            cores: places(2),
            app_threads: places(2),
            pin: |_| Ok(()),
            stall_after: STALL_AFTER,
        },
        |s| {
            if s.queue() == 1 {
                return Err("thread 1 is not wanted".to_string());
            }
            Ok(())
        },
    )
    .expect_err("thread 1's set-up failed");
    assert_eq!(e.kind(), StartErrorKind::Setup, "{e:#}");
    assert_eq!(
        format!("{e:#}"),
        "application thread 1: the set-up failed: thread 1 is not wanted"
    );
}
