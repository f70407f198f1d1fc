//! The kernel-socket backend's loop stays live whatever a peer does: a
//! peer that sends as fast as loopback goes holds neither the other
//! connections of its core nor its stop, a connection waiting for receive
//! memory gets the next buffer given back, and a stop takes no connection
//! it would only reset. The Linux kernel's TCP on 127.0.0.1 is the peer.

mod loopback_common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt};
use flowlane_kernel::{KernelConfig, KernelService, Limits};
use loopback_common::*;

fn config(limits: Limits) -> KernelConfig {
    KernelConfig {
        cores: places(1),
        listen_on: vec![LOOPBACK],
        limits,
    }
}

/// Stops the floods when dropped (at the end of a test, passed or not:
/// a core held by a flood could not stop).
struct FloodStop(Arc<AtomicBool>);

impl Drop for FloodStop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A peer writing to `port` as fast as it can until `stop` is set; its
/// bytes sent once it stopped (or the service reset it).
fn flood(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect((LOOPBACK, port)).unwrap();
        let chunk = vec![1u8; 1 << 16];
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        sent
    })
}

/// Waits until the service took `bytes` of a flood (its connection's
/// receive side is then busy for good).
fn flooding(service: &KernelService, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while service.counters()[0].1.stats.bytes_in < bytes {
        assert!(
            Instant::now() < deadline,
            "the flood never reached the core"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends "ping" on a new connection to `port` and reads the answer,
/// waiting `within` at most.
fn probe(port: u16, within: Duration) -> std::io::Result<[u8; 4]> {
    let mut s = std::net::TcpStream::connect((LOOPBACK, port))?;
    s.set_read_timeout(Some(within))?;
    s.write_all(b"ping")?;
    let mut answer = [0u8; 4];
    s.read_exact(&mut answer)?;
    Ok(answer)
}

/// Answers "ping" with "pong"; any other bytes cost 2 ms per read (a
/// handler doing real work on bulk data), then are dropped and counted.
struct SlowSink(Arc<AtomicUsize>);

impl ConnHandler for SlowSink {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        if net.peek(conn).is_ok_and(|b| b == b"ping") {
            net.discard(conn);
            let _ = net.send(conn, b"pong");
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
        let n = net.discard(conn);
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

/// Peers that keep their sockets full get one receive buffer each per
/// loop pass, not every pass's whole time: another connection of the core is
/// answered, and the service stops, while they flood (a handler that read
/// every buffer at once queued the next read at once, and the loop never
/// got back to its poll, its other connections or its stop).
#[test]
fn fast_senders_hold_neither_their_core_nor_its_stop() {
    let port = free_port();
    let taken = Arc::new(AtomicUsize::new(0));
    let sink = taken.clone();
    let service = KernelService::start(config(Limits::default()), move |core| {
        core.listen(port, SlowSink(sink.clone()))
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let stop_flood = FloodStop(Arc::new(AtomicBool::new(false)));
    // Two, so that the core's socket for them is hardly ever empty.
    let flooders = [
        flood(port, stop_flood.0.clone()),
        flood(port, stop_flood.0.clone()),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    while taken.load(Ordering::Relaxed) < 1 << 20 {
        assert!(
            Instant::now() < deadline,
            "the flood never reached the core"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let asked = Instant::now();
    let answer = probe(port, Duration::from_secs(5));
    eprintln!("probe: {answer:?} after {:?}", asked.elapsed());
    let stopper = std::thread::spawn(move || service.stop());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stopper.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped = stopper.is_finished();
    drop(stop_flood);
    let sent: usize = flooders.into_iter().map(|f| f.join().unwrap()).sum();
    let (_, err) = stopper.join().unwrap();
    err.unwrap();
    assert_eq!(
        answer.as_ref().map_err(|e| e.kind()),
        Ok(b"pong"),
        "another connection of the flooded core (flood: {sent} B)"
    );
    assert!(stopped, "the stop did not end within 5 s of a flood");
}

/// Reads only at its tick: answers "ping" with "pong", drops the rest.
#[derive(Default)]
struct TickReader {
    conns: Vec<ConnHandle>,
}

impl ConnHandler for TickReader {
    fn on_accept(&mut self, _net: &mut dyn Net, conn: ConnHandle) {
        self.conns.push(conn);
    }
    fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    fn on_tick(&mut self, net: &mut dyn Net) {
        for &c in &self.conns {
            if net.peek(c).is_ok_and(|b| b == b"ping") {
                net.discard(c);
                let _ = net.send(c, b"pong");
            } else {
                net.discard(c);
            }
        }
    }
}

/// The core's receive memory is one buffer, which a flooded connection
/// fills again as soon as it is given back; a connection waiting for it
/// gets it first (oldest first), and is answered: the flooder's own
/// read, queued when it gave the buffer back, no longer takes it back
/// ahead of the waiter each time.
#[test]
fn a_memory_waiter_is_served_before_the_reader_that_gave_the_buffer_back() {
    let port = free_port();
    let limits = Limits {
        rx_buffer: 4096,
        rx_memory: 4096,
        ..Limits::default()
    };
    let service = KernelService::start(config(limits), move |core| {
        core.listen(port, TickReader::default())
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let stop_flood = FloodStop(Arc::new(AtomicBool::new(false)));
    let flooder = flood(port, stop_flood.0.clone());
    flooding(&service, 64 << 10);
    let answer = probe(port, Duration::from_secs(5));
    drop(stop_flood);
    flooder.join().unwrap();
    let (counters, _) = service.stop();
    let waits = counters[0].1.rx_memory_waits;
    assert!(waits > 0, "the probe never waited: the test tests nothing");
    assert_eq!(answer.as_ref().map_err(|e| e.kind()), Ok(b"pong"));
}

/// Keeps its connections open whatever the peer does (a close still to
/// come: a stop lingers for it); tells each peer's close.
struct Keeper {
    heard: mpsc::Sender<()>,
}

impl ConnHandler for Keeper {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.discard(conn);
    }
    fn on_peer_closed(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {
        let _ = self.heard.send(());
    }
}

/// Once a stop began, the core's listeners are closed: a connection
/// made during its linger is refused by the kernel, not accepted only to
/// be reset when the linger ends ([`flowlane_kernel::STOP_LINGER`], 2 s,
/// kept running here by a connection whose peer closed and whose
/// application has not).
#[test]
fn a_stopping_core_takes_no_new_connection() {
    let port = free_port();
    let (tx, heard) = mpsc::channel();
    let tx = Mutex::new(tx);
    let service = KernelService::start(config(Limits::default()), move |core| {
        let heard = tx.lock().unwrap().clone();
        core.listen(port, Keeper { heard })
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    })
    .unwrap();
    let lingering = std::net::TcpStream::connect((LOOPBACK, port)).unwrap();
    lingering.shutdown(std::net::Shutdown::Write).unwrap();
    heard.recv_timeout(Duration::from_secs(5)).unwrap();
    let began = Instant::now();
    let stopper = std::thread::spawn(move || service.stop());
    // Well within the linger: refused once the core saw the stop (its
    // next pass, 10 ms at most when idle).
    let mut taken = 0;
    let refused = loop {
        match std::net::TcpStream::connect((LOOPBACK, port)) {
            Err(e) => break Some(e.kind()),
            Ok(_) if began.elapsed() > Duration::from_millis(1500) => break None,
            Ok(_) => taken += 1,
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (_, err) = stopper.join().unwrap();
    drop(lingering);
    err.unwrap();
    assert_eq!(
        refused,
        Some(std::io::ErrorKind::ConnectionRefused),
        "{taken} connections taken during the stop's linger"
    );
}
