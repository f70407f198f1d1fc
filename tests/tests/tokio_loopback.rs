//! tokio on flowlane (`flowlane-tokio`) over the kernel-socket backend on
//! loopback, kernel TCP as the peer: streams that echo, hyper serving
//! hyper's client, back-pressure from a stream nobody reads, a full
//! backlog, a task that blocks its thread; the application's function
//! spawning before its future runs, a shutdown done once its bytes and FIN
//! went, a listener and a stream polled elsewhere told that their thread
//! stopped or stalled; panics of the application's function and of its
//! tasks; opens refused at once or given up before they started.

mod loopback_common;

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use flowlane_app::{StopErrorKind, Worker};
use flowlane_kernel::KernelService;
use flowlane_qp::{QueuePairConfig, QueuePairs};
use flowlane_tokio::{AsyncConfig, Counters, Local};
use loopback_common::*;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// tokio on `threads` application threads over a two-core kernel-socket
/// backend, listening on `port`; `app` runs on each thread.
fn start<F, Fut>(
    threads: u32,
    port: u16,
    backlog: usize,
    app: F,
) -> (Arc<QueuePairs>, Arc<Counters>, KernelService)
where
    F: Fn(Local) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    start_filtered(threads, port, backlog, None, app)
}

/// [`start`], the listeners taking only the SYNs `syn_filter` lets in.
fn start_filtered<F, Fut>(
    threads: u32,
    port: u16,
    backlog: usize,
    syn_filter: Option<flowlane_app::SynFilter>,
    app: F,
) -> (Arc<QueuePairs>, Arc<Counters>, KernelService)
where
    F: Fn(Local) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let (qp, counters) = flowlane_tokio::start(
        AsyncConfig {
            queue_pairs: QueuePairConfig {
                cores: places(2),
                app_threads: places(threads),
                pin: |_| Ok(()),
                stall_after: Duration::from_millis(500),
            },
            ports: vec![port],
            backlog,
            syn_filter,
        },
        app,
    )
    .unwrap();
    let qp = Arc::new(qp);
    let kernel = kernel_cores_for(&qp);
    (qp, counters, kernel)
}

/// Echoes every stream it accepts until the peer closes.
async fn echo(mut local: Local, port: u16) {
    let listener = local.listener(port).unwrap();
    while let Ok((mut s, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut buf = vec![0; 16 << 10];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
}

#[test]
fn tokio_streams_echo_every_byte_on_every_thread() {
    let port = free_port();
    let (qp, counters, kernel) = start(2, port, 64, move |l| echo(l, port));
    let clients: Vec<_> = (0..8u64)
        .map(|i| {
            std::thread::spawn(move || {
                let data = payload(i + 1, 4 << 20);
                assert!(echo_client(port, data.clone()) == data, "client {i}");
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(counters.accepted.load(Ordering::Relaxed), 8);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// Answers every request with `hello`, keep-alive.
async fn hello(mut local: Local, port: u16) {
    use http_body_util::Full;
    use hyper::service::service_fn;
    let listener = local.listener(port).unwrap();
    while let Ok((s, _)) = listener.accept().await {
        tokio::spawn(async move {
            let service = service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                    bytes::Bytes::from_static(b"hello"),
                )))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(s), service)
                .await;
        });
    }
}

#[test]
fn hyper_serves_hyper_s_client_over_flowlane() {
    use http_body_util::{BodyExt, Empty};
    let port = free_port();
    let (qp, _counters, kernel) = start(2, port, 64, move |l| hello(l, port));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for _ in 0..4 {
            let stream = tokio::net::TcpStream::connect((LOOPBACK, port))
                .await
                .unwrap();
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .unwrap();
            let driver = tokio::spawn(conn);
            // Keep-alive: many requests on one connection.
            for i in 0..200 {
                let req = hyper::Request::get(format!("http://localhost:{port}/{i}"))
                    .body(Empty::<bytes::Bytes>::new())
                    .unwrap();
                sender.ready().await.unwrap();
                let resp = sender.send_request(req).await.unwrap();
                assert_eq!(resp.status(), 200);
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(&body[..], b"hello");
            }
            drop(sender);
            driver.await.unwrap().unwrap();
        }
    });
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn a_stream_nobody_reads_closes_the_window_and_loses_nothing() {
    let port = free_port();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Arc::new(std::sync::Mutex::new(Some(go_rx)));
    let (_qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let go = go_rx.lock().unwrap().take();
        async move {
            let listener = local.listener(port).unwrap();
            let (mut s, _) = listener.accept().await.unwrap();
            // Reads nothing until the test says so (without blocking the
            // thread: the loop keeps passing).
            if let Some(go) = go {
                while go.try_recv().is_err() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            let mut buf = vec![0; 64 << 10];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).await.unwrap(),
                }
            }
        }
    });
    let data = payload(3, 32 << 20);
    let (s, sent) = write_until_blocked(port, &data);
    // The stream holds 64 KiB, the queue pair 256 KiB; the rest waits in
    // the kernel's buffers.
    let taken = bytes_in(&kernel);
    assert!(taken < 1 << 20, "the core read {taken} of {sent} bytes");
    go_tx.send(()).unwrap();
    finish_echo(s, &data, sent);
    kernel.stop().1.expect("no core failed");
}

/// A SYN filter on the listeners (hyper-server's `--allow-from`) refuses
/// a peer before its connection reaches the application: reset, counted by
/// the core as a refused SYN, never accepted; a peer it lets in is served.
#[test]
fn the_listeners_syn_filter_refuses_a_peer_before_the_application_sees_it() {
    let port = free_port();
    let refused_port = free_port();
    let filter: flowlane_app::SynFilter =
        Arc::new(move |t: &flowlane_app::FourTuple| t.remote.port() != refused_port);
    let (_qp, counters, kernel) =
        start_filtered(1, port, 16, Some(filter), move |local| echo(local, port));
    // Refused: the peer's own port is the one the filter names.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind((LOOPBACK, refused_port).into())?;
        let mut refused = socket.connect((LOOPBACK, port).into()).await?;
        let mut b = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(10), refused.read(&mut b))
            .await
            .map_err(std::io::Error::other)?
    });
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{r:?}"
    );
    let mut b = [0u8; 1];
    // Let in: echoed.
    let mut ok = TcpStream::connect((LOOPBACK, port)).unwrap();
    ok.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    ok.write_all(b"x").unwrap();
    ok.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"x");
    assert_eq!(counters.accepted.load(Ordering::Relaxed), 1);
    let (finals, _) = kernel.stop();
    let syn_refused: u64 = finals.iter().map(|(_, c)| c.stats.syn_refused).sum();
    assert_eq!(syn_refused, 1);
}

#[test]
fn a_full_backlog_resets_new_connections_counted() {
    let port = free_port();
    // One thread whose listener is never accepted from.
    let (_qp, counters, kernel) = start(1, port, 2, move |mut local| async move {
        let listener = local.listener(port).unwrap();
        std::future::pending::<()>().await;
        drop(listener);
    });
    let kept: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect((LOOPBACK, port)).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while counters.accepted.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "two connections never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut third = TcpStream::connect((LOOPBACK, port)).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut b = [0u8; 1];
    let r = third.read(&mut b);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{r:?}"
    );
    assert_eq!(counters.refused_backlog.load(Ordering::Relaxed), 1);
    drop(kept);
    kernel.stop().1.expect("no core failed");
}

#[test]
fn a_task_that_blocks_its_thread_loses_its_connections_counted() {
    let port = free_port();
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| async move {
        let listener = local.listener(port).unwrap();
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 16];
                if let Ok(n) = s.read(&mut b).await {
                    if &b[..n] == b"block" {
                        // The application's bug (on purpose): blocks the
                        // thread, its loop included.
                        std::thread::sleep(Duration::from_millis(1500));
                    }
                }
                let _ = s.write_all(b"done").await;
            });
        }
    });
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"block").unwrap();
    let mut b = [0u8; 4];
    let r = s.read(&mut b);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{r:?}"
    );
    assert!(qp.orphaned() >= 1);
    // Once the thread passes again, it serves new connections.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 4];
        // Reset while the cores still count the thread as stalled.
        if s.write_all(b"hi").is_ok() && s.read_exact(&mut b).is_ok() {
            assert_eq!(&b, b"done");
            break;
        }
        assert!(Instant::now() < deadline, "the thread never came back");
        std::thread::sleep(Duration::from_millis(100));
    }
    kernel.stop().1.expect("no core failed");
}

#[test]
fn a_tokio_client_connects_through_flowlane_and_reads_its_figures() {
    // A kernel echo server for the client to talk to.
    let server = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => s.write_all(&buf[..n]).unwrap(),
            }
        }
    });
    let (tx, rx) = std::sync::mpsc::channel::<Result<(u32, usize, u16), String>>();
    let tx = std::sync::Mutex::new(Some(tx));
    let port = free_port();
    let closed = std::net::SocketAddr::new(LOOPBACK, free_port());
    let (qp, _c, kernel) = start(1, port, 64, move |local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let r = async {
                let mut s = local
                    .connector()
                    .connect(addr)
                    .await
                    .map_err(|e| e.to_string())?;
                let data = payload(5, 256 << 10);
                let (mut rd, mut wr) = tokio::io::split(&mut s);
                let send = async {
                    wr.write_all(&data).await.map_err(|e| e.to_string())?;
                    Ok::<_, String>(())
                };
                let mut back = vec![0u8; data.len()];
                let recv = async {
                    rd.read_exact(&mut back).await.map_err(|e| e.to_string())?;
                    Ok::<_, String>(())
                };
                tokio::try_join!(send, recv)?;
                if back != data {
                    return Err("echo differs".into());
                }
                let info = s.info().await.ok_or("no TCP figures")?;
                // A port nobody listens on: refused, not a hang.
                match local.connector().connect(closed).await {
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                    other => return Err(format!("connect to a closed port: {other:?}")),
                }
                // An address the core's connect(2) fails at once (TCP to
                // broadcast: ENETUNREACH): network unreachable, as tokio's
                // own connect says it.
                let broadcast = std::net::SocketAddr::from(([255, 255, 255, 255], 9));
                match local.connector().connect(broadcast).await {
                    Err(e) if e.kind() == std::io::ErrorKind::NetworkUnreachable => {}
                    other => return Err(format!("connect to broadcast: {other:?}")),
                }
                Ok((s.placement().queue, back.len(), info.mss))
            }
            .await;
            let _ = tx.send(r);
        }
    });
    let (queue, n, mss) = rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
    assert!(queue < 2, "{queue}");
    assert_eq!(n, 256 << 10);
    assert!(mss > 0);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// A stream's `info` gives the core's figures from its first call (no
/// call before to ask for them), and fresh ones each call: the bytes a
/// kernel peer sent show as readable until the stream reads them, and
/// not from the first call after it did (figures one call old showed
/// them still); the bytes written are acknowledged in the first figures
/// asked after the peer's answer to them came.
#[test]
fn a_stream_s_info_is_fresh_from_its_first_call() {
    const WRITTEN: usize = 128 << 10;
    const ANSWER: usize = 1000;
    let server = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let addr = server.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = vec![0u8; WRITTEN];
        s.read_exact(&mut got).unwrap();
        s.write_all(&[b'a'; ANSWER]).unwrap();
        // Until the stream closes.
        let _ = s.read(&mut [0u8; 1]);
    });
    type Figures = (
        flowlane_app::ConnInfo,
        flowlane_app::ConnInfo,
        flowlane_app::ConnInfo,
    );
    let (tx, rx) = std::sync::mpsc::channel::<Result<Figures, String>>();
    let tx = std::sync::Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, free_port(), 64, move |local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let r = async {
                let mut s = local
                    .connector()
                    .connect(addr)
                    .await
                    .map_err(|e| e.to_string())?;
                let first = s.info().await.ok_or("no figures at the first call")?;
                s.write_all(&payload(9, WRITTEN))
                    .await
                    .map_err(|e| e.to_string())?;
                // The peer's answer, unread: asked until it all came (to
                // the stream: the figures may be the core's look from
                // before it did, the bytes the pipe's).
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let info = s.info().await.ok_or("no figures")?;
                    if info.readable >= ANSWER {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(format!("the answer never showed: {info:?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                // The core's look from after it came: the bytes written
                // were acknowledged before it (the answer carried it).
                let answered = s.info().await.ok_or("no figures")?;
                let mut back = vec![0u8; ANSWER];
                s.read_exact(&mut back).await.map_err(|e| e.to_string())?;
                let read = s.info().await.ok_or("no figures after the read")?;
                Ok((first, answered, read))
            }
            .await;
            let _ = tx.send(r);
        }
    });
    let (first, answered, read) = rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
    assert!(first.mss > 0 && first.cwnd > 0, "{first:?}");
    assert_eq!(
        (first.readable, first.unsent, first.unacked),
        (0, 0, 0),
        "{first:?}"
    );
    assert_eq!(answered.readable, ANSWER, "{answered:?}");
    assert_eq!((answered.unsent, answered.unacked), (0, 0), "{answered:?}");
    assert_eq!(read.readable, 0, "the bytes read still counted: {read:?}");
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
    peer.join().unwrap();
}

#[test]
fn bytes_received_before_both_fins_stay_readable_after_the_close() {
    // The client sends 200 KiB and its FIN; the server's stream reads
    // nothing until it has shut down its own side and both FINs were
    // acknowledged. Every byte is still read, then a clean end of stream.
    // (Kernel sockets keep the connection until the stream closes; on
    // flowlane's stack it ends with the FINs and the bytes wait on the
    // stack and the thread: `tcp/tests/states.rs` and qp's `app_net`
    // tests hold those.)
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<Result<Vec<u8>, String>>();
    let tx = std::sync::Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = local.listener(port).unwrap();
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            s.shutdown().await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut got = Vec::new();
            let r = s.read_to_end(&mut got).await.map(|_| got);
            let _ = tx.send(r.map_err(|e| e.to_string()));
        }
    });
    let data = payload(9, 200 << 10);
    let mut c = TcpStream::connect((LOOPBACK, port)).unwrap();
    c.write_all(&data).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    let got = rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
    assert!(
        got == data,
        "{} of {} bytes, equal: false",
        got.len(),
        data.len()
    );
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn tasks_sharing_a_listener_are_each_woken() {
    // Two tasks wait in `accept` on one listener, each for one
    // connection; two connections arrive: both tasks get one (a listener
    // that kept only the last waiter's waker left the first asleep with a
    // connection in its backlog).
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<&'static str>();
    let tx = std::sync::Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = Arc::new(local.listener(port).unwrap());
            let one = |l: Arc<flowlane_tokio::TcpListener>| async move {
                let (s, _) = l.accept().await.unwrap();
                tokio::time::sleep(Duration::from_secs(2)).await;
                drop(s);
            };
            let a = tokio::spawn(one(listener.clone()));
            tokio::task::yield_now().await;
            let b = tokio::spawn(one(listener.clone()));
            tokio::task::yield_now().await;
            tx.send("waiting").unwrap();
            let (ra, rb) = tokio::join!(a, b);
            ra.unwrap();
            rb.unwrap();
            tx.send("both accepted").unwrap();
        }
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("waiting"));
    let _c1 = TcpStream::connect((LOOPBACK, port)).unwrap();
    let _c2 = TcpStream::connect((LOOPBACK, port)).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok("both accepted")
    );
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn a_connector_and_a_stream_hear_that_their_thread_stopped() {
    // A connector and an accepted stream leave their application thread
    // for another runtime; the queue pairs stop. An open and a read there
    // fail at once instead of waiting forever.
    type Out = (flowlane_tokio::Connector, flowlane_tokio::TcpStream);
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<Out>();
    let tx = std::sync::Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = local.listener(port).unwrap();
            let (s, _) = listener.accept().await.unwrap();
            tx.send((local.connector(), s)).unwrap();
            std::future::pending::<()>().await;
        }
    });
    let _client = TcpStream::connect((LOOPBACK, port)).unwrap();
    let (connector, mut stream) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr = std::net::SocketAddr::new(LOOPBACK, port);
        let aborted = Some(std::io::ErrorKind::ConnectionAborted);
        let open = tokio::time::timeout(Duration::from_secs(2), connector.connect(addr)).await;
        let open = open.map(|r| r.map(drop).map_err(|e| e.kind()));
        assert!(matches!(open, Ok(Err(k)) if Some(k) == aborted), "{open:?}");
        let mut b = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut b)).await;
        let read = read.map(|r| r.map_err(|e| e.kind()));
        assert!(matches!(read, Ok(Err(k)) if Some(k) == aborted), "{read:?}");
    });
}

/// Waits up to 10 s for `done`.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_panic_in_the_application_s_function_ends_its_thread_reported() {
    // The function's future panics (an unwrap on its own bug) once it
    // accepted a connection. The thread ends as one that panicked: the
    // cores reset its connections (counted orphaned) and refuse every
    // later one (its listener went with the function's future: the SYN
    // filter refuses them, which a kernel socket's core does as it
    // accepts them, counted `syn_refused`; not taken for a full backlog),
    // `dead_threads` names it, `stop` reports it. (Swallowed, the thread
    // kept its cores and reset every later connection as a refused
    // backlog, reported nowhere.)
    let port = free_port();
    let (qp, counters, kernel) = start(1, port, 64, move |mut local| async move {
        let listener = local.listener(port).unwrap();
        let (_s, _) = listener.accept().await.unwrap();
        panic!("the application's bug (on purpose)");
    });
    let mut first = TcpStream::connect((LOOPBACK, port)).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    wait_for("the thread reported dead", || qp.dead_threads() == [0]);
    let mut b = [0u8; 1];
    let r = first.read(&mut b).map_err(|e| e.kind());
    assert_eq!(r, Err(std::io::ErrorKind::ConnectionReset));
    let mut later = TcpStream::connect((LOOPBACK, port)).unwrap();
    later
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let r = later.read(&mut b).map_err(|e| e.kind());
    assert_eq!(r, Err(std::io::ErrorKind::ConnectionReset));
    assert!(qp.orphaned() >= 1, "{}", qp.orphaned());
    assert_eq!(counters.refused_backlog.load(Ordering::Relaxed), 0);
    let (cores, stopped) = kernel.stop();
    stopped.expect("no core failed");
    let refused: u64 = cores.iter().map(|(_, c)| c.stats.syn_refused).sum();
    assert_eq!(refused, 1);
    let report = qp.stop().expect_err("the panic is reported");
    assert_eq!(report.kind(), StopErrorKind::Panicked, "{report:#}");
    assert_eq!(report.worker(), Some(Worker::AppThread(0)), "{report:#}");
    assert_eq!(
        format!("{report:#}"),
        "application thread 0 panicked: the application's bug (on purpose)"
    );
}

#[test]
fn a_panic_in_a_spawned_task_ends_only_that_task() {
    // A task the application spawned panics with its stream: the stream
    // goes with the task (closed: nothing was left unread), the task's
    // handle gives the panic, and the thread goes on serving, reported
    // by no one (as on any tokio runtime; `start`'s documentation).
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<bool>();
    let tx = Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = local.listener(port).unwrap();
            let (s, _) = listener.accept().await.unwrap();
            let task = tokio::spawn(async move {
                let _s = s;
                panic!("a task's bug (on purpose)");
            });
            tx.send(task.await.is_err_and(|e| e.is_panic())).unwrap();
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(b"served").await.unwrap();
            s.shutdown().await.unwrap();
            std::future::pending::<()>().await;
        }
    });
    let mut first = TcpStream::connect((LOOPBACK, port)).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
    let mut got = Vec::new();
    first.read_to_end(&mut got).unwrap();
    assert!(got.is_empty());
    assert_eq!(read_from(port), b"served");
    assert!(qp.dead_threads().is_empty());
    assert_eq!(qp.orphaned(), 0);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn a_stream_and_a_connector_polled_elsewhere_hear_at_once_that_their_thread_stalled() {
    // A stream and a connector leave their application thread, which then
    // blocks for 3 s (stall limit 0.5 s). At the stall limit the cores
    // reset the thread's connections; the stream, polled on another
    // runtime, hears so then (not once the thread is back), and opens
    // asked meanwhile fail at once. Once the thread passes again, opens
    // work again.
    let server = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let server_addr = server.local_addr().unwrap();
    let port = free_port();
    type Out = (flowlane_tokio::TcpStream, flowlane_tokio::Connector);
    let (tx, rx) = std::sync::mpsc::channel::<Out>();
    let tx = Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = local.listener(port).unwrap();
            let (s, _) = listener.accept().await.unwrap();
            tx.send((s, local.connector())).unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            // The application's bug (on purpose): blocks the thread.
            std::thread::sleep(Duration::from_secs(3));
            std::future::pending::<()>().await;
        }
    });
    let mut client = TcpStream::connect((LOOPBACK, port)).unwrap();
    let (mut stream, connector) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let t0 = Instant::now();
    let read = rt.block_on(async {
        let mut b = [0u8; 8];
        stream.read(&mut b).await.map_err(|e| e.kind())
    });
    let took = t0.elapsed();
    let aborted = std::io::ErrorKind::ConnectionAborted;
    assert_eq!(read, Err(aborted));
    assert!(took < Duration::from_secs(2), "heard after {took:?}");
    let open = rt.block_on(async {
        let open = tokio::time::timeout(Duration::from_millis(500), connector.connect(server_addr));
        open.await.map(|r| r.map(drop).map_err(|e| e.kind()))
    });
    assert_eq!(open, Ok(Err(aborted)));
    // The peer was reset.
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut b = [0u8; 1];
    let r = client.read(&mut b).map_err(|e| e.kind());
    assert_eq!(r, Err(std::io::ErrorKind::ConnectionReset));
    // Back after 3 s: opens go through again.
    let opened = rt.block_on(async {
        loop {
            match connector.connect(server_addr).await {
                Ok(s) => break s,
                Err(e) if e.kind() == aborted && t0.elapsed() < Duration::from_secs(10) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
    });
    let (_accepted, _) = server.accept().unwrap();
    drop(opened);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn a_thread_that_serves_no_core_is_refused_opens_as_unsupported() {
    // Three threads, two cores: thread 2 serves none, and cannot open a
    // connection (nothing would carry its replies). Refused at once with
    // a kind that says so, not `Other`.
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<Option<std::io::ErrorKind>>();
    let tx = Mutex::new(tx);
    let (qp, _c, kernel) = start(3, port, 64, move |local| {
        let tx = tx.lock().unwrap().clone();
        async move {
            if local.index() != 2 {
                return;
            }
            let addr = std::net::SocketAddr::new(LOOPBACK, port);
            let r = local.connector().connect(addr).await;
            tx.send(r.err().map(|e| e.kind())).unwrap();
        }
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok(Some(std::io::ErrorKind::Unsupported))
    );
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn a_connect_dropped_before_the_thread_passes_opens_nothing() {
    // An open asked and given up (its future dropped) while the thread is
    // busy: when the thread passes, it does not open it (opened, it would
    // reach the peer only to be closed). The next open does.
    let server = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let server_addr = server.local_addr().unwrap();
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<flowlane_tokio::Connector>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let once = Mutex::new(Some((tx, go_rx)));
    let (qp, _c, kernel) = start(1, port, 64, move |local| {
        let once = once.lock().unwrap().take();
        async move {
            let Some((tx, go)) = once else { return };
            tx.send(local.connector()).unwrap();
            // Busy (well within the stall limit) until the test asked.
            let _ = go.recv_timeout(Duration::from_millis(300));
            std::future::pending::<()>().await;
        }
    });
    let connector = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    {
        let mut open = std::pin::pin!(connector.connect(server_addr));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(open.as_mut().poll(&mut cx).is_pending());
    }
    go_tx.send(()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let second = rt.block_on(async {
        let open = connector.connect(server_addr);
        tokio::time::timeout(Duration::from_secs(10), open).await
    });
    let second = second.unwrap().unwrap();
    let (_s, from) = server.accept().unwrap();
    assert_eq!(
        from,
        second.local_addr(),
        "the dropped open reached the peer first"
    );
    server.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let more = server.accept().map(|(_, a)| a).map_err(|e| e.kind());
    assert_eq!(more, Err(std::io::ErrorKind::WouldBlock));
    drop(second);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// Everything the server sends on a connection to `port`, until it
/// closes.
fn read_from(port: u16) -> Vec<u8> {
    let mut c = TcpStream::connect((LOOPBACK, port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    got
}

#[test]
fn the_application_s_function_may_spawn_before_its_future_runs() {
    let port = free_port();
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let listener = local.listener(port).unwrap();
        // Called by the function itself, not from its future.
        let served = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(b"spawned").await.unwrap();
            s.shutdown().await.unwrap();
        });
        async move { served.await.unwrap() }
    });
    assert_eq!(read_from(port), b"spawned");
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

#[test]
fn a_shutdown_is_done_once_the_bytes_written_and_the_fin_went() {
    // The server queues as much as its stream takes (nothing goes before
    // its task yields), then shuts down: not done at once, done once the
    // bridge sent the bytes and the FIN; the client reads them all, then
    // the end of stream.
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = local.listener(port).unwrap();
            let (mut s, _) = listener.accept().await.unwrap();
            let mut cx = Context::from_waker(Waker::noop());
            let mut queued = 0;
            while let Poll::Ready(r) = Pin::new(&mut s).poll_write(&mut cx, &[9; 4096]) {
                queued += r.unwrap();
            }
            let at_once = Pin::new(&mut s).poll_shutdown(&mut cx).is_ready();
            let done = s.shutdown().await.map_err(|e| e.kind());
            tx.send((queued, at_once, done)).unwrap();
        }
    });
    let got = read_from(port);
    let (queued, at_once, done) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(queued > 0);
    assert!(!at_once, "done with {queued} bytes queued");
    assert_eq!(done, Ok(()));
    assert_eq!(got.len(), queued);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// Counts its wakes.
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_listener_and_a_stream_polled_elsewhere_hear_that_their_thread_stopped() {
    // A listener and an accepted stream leave their application thread;
    // the queue pairs stop. The task waiting in `accept` is woken and
    // told `ConnectionAborted` instead of waiting forever; the stream's
    // shutdown fails.
    type Out = (flowlane_tokio::TcpListener, flowlane_tokio::TcpStream);
    let port = free_port();
    let (tx, rx) = std::sync::mpsc::channel::<Out>();
    let tx = Mutex::new(Some(tx));
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| {
        let tx = tx.lock().unwrap().take();
        async move {
            let Some(tx) = tx else { return };
            let listener = local.listener(port).unwrap();
            let (s, _) = listener.accept().await.unwrap();
            tx.send((listener, s)).unwrap();
            std::future::pending::<()>().await;
        }
    });
    let _client = TcpStream::connect((LOOPBACK, port)).unwrap();
    let (listener, mut stream) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let counting = Arc::new(Counting(AtomicUsize::new(0)));
    let waker = Waker::from(counting.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(listener.poll_accept(&mut cx).is_pending());
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
    // The thread is joined: its bridge is gone.
    assert_eq!(counting.0.load(Ordering::Relaxed), 1);
    let aborted = Some(std::io::ErrorKind::ConnectionAborted);
    let accept = listener.poll_accept(&mut cx);
    assert!(
        matches!(&accept, Poll::Ready(Err(e)) if Some(e.kind()) == aborted),
        "{accept:?}"
    );
    let shutdown = Pin::new(&mut stream).poll_shutdown(&mut cx);
    assert!(
        matches!(&shutdown, Poll::Ready(Err(e)) if Some(e.kind()) == aborted),
        "{shutdown:?}"
    );
}

/// The timer /proc/net/tcp shows for the established IPv4 socket on local
/// port `port` (its `tr` column: 0 none, 1 retransmission, 2 keepalive),
/// if there is one.
fn established_timer(port: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let local_port = f[1].rsplit(':').next()?;
        let established = f[3] == "01";
        (established && u16::from_str_radix(local_port, 16).ok()? == port)
            .then(|| f[5].split(':').next()?.parse().ok())
            .flatten()
    })
}

/// `TcpStream::set_keepalive` reaches the connection's socket on the
/// network core (kernel sockets here: its keepalive timer runs), as
/// `Net::set_keepalive` does for a handler.
#[test]
fn a_stream_s_keepalive_reaches_its_socket() {
    let port = free_port();
    let (qp, _c, kernel) = start(1, port, 64, move |mut local| async move {
        let listener = local.listener(port).unwrap();
        while let Ok((mut s, _)) = listener.accept().await {
            s.set_keepalive(true);
            s.write_all(b"on").await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 16];
                while let Ok(1..) = s.read(&mut buf).await {}
            });
        }
    });
    let mut client = TcpStream::connect((LOOPBACK, port)).unwrap();
    let mut on = [0u8; 2];
    client.read_exact(&mut on).unwrap();
    wait_for("the keepalive timer on the served socket", || {
        established_timer(port) == Some(2)
    });
    drop(client);
    kernel.stop().1.expect("no core failed");
    qp.stop().unwrap();
}

/// tokio's start fails as queue-pair mode's, with the same kinds: no
/// application thread is a configuration error; a port given twice is a
/// set-up error (the second listen's), its cause chained.
#[test]
fn tokio_s_start_errors_are_queue_pair_mode_s_kinds() {
    use flowlane_app::StartErrorKind;
    let config = |threads: u32, ports: Vec<u16>| AsyncConfig {
        queue_pairs: QueuePairConfig {
            cores: places(2),
            app_threads: places(threads),
            pin: |_| Ok(()),
            stall_after: Duration::from_millis(500),
        },
        ports,
        backlog: 16,
        syn_filter: None,
    };
    let port = free_port();
    let e = flowlane_tokio::start(config(0, vec![port]), |_| async {}).unwrap_err();
    assert_eq!(e.kind(), StartErrorKind::Config, "{e:#}");
    let e = flowlane_tokio::start(config(1, vec![port, port]), |_| async {}).unwrap_err();
    assert_eq!(e.kind(), StartErrorKind::Setup, "{e:#}");
    assert!(
        e.to_string().starts_with(&format!(
            "application thread 0: cannot listen on port {port}"
        )),
        "{e}"
    );
    assert_eq!(
        e.setup_error().map(ToString::to_string).as_deref(),
        Some("address in use")
    );
}
