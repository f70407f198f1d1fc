//! `hyper-server`: an HTTP/1.1 server written on hyper and tokio, served
//! by flowlane's TCP through `flowlane-tokio` (queue-pair mode: the
//! network cores run the stacks, each application thread a current-thread
//! tokio runtime), or, with `--tokio-baseline`, the same service on
//! tokio's own `TcpListener` (kernel TCP, a multi-thread runtime): the
//! comparison a tokio user makes.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use flowlane_dataplane::process_cpu_ns;
use flowlane_dataplane::service_args::ExecMode;
use flowlane_kernel::{KernelConfig, KernelService};
use flowlane_tokio::{AsyncConfig, Local, StopSignal};
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::{
    cores, http_stop, idle, queue_pair_config, serve_queue_pairs, serve_with, AllowFrom, Common,
    HyperArgs, NicAccess, APPLICATION,
};
use crate::service::{write_report, ServiceSignals};

/// Accepted connections a thread's listener holds before `accept` takes
/// them.
const BACKLOG: usize = 4096;

/// The bound on a connection's read (and write) buffer in hyper
/// (`max_buf_size`; its default is about 400 KiB a connection), and the
/// longest request head (request line, fields and the blank line after
/// them): a longer one is answered `431`, however its bytes arrive
/// (`max_header_size`; `max_buf_size` bounds what hyper asks a read for,
/// not what the read brings, which fills the buffer's spare capacity: a
/// head past it that came whole in one read was answered).
const MAX_BUF: usize = 32 * 1024;

/// How long the baseline's accept loop pauses after an accept that failed
/// for want of descriptors or memory, which would only fail again at once
/// (the kernel backend tries again each loop pass, 10 ms, alike).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// What hyper-server counts, over all its threads (the summary's
/// `application`).
#[derive(Debug, Default, Serialize)]
pub(super) struct HyperCounters {
    /// Connections closed after `--idle-timeout` without a byte either way
    /// (a peer gone silent, in a head, a body or between requests, or one
    /// that reads no response).
    pub(super) idle_closed: AtomicU64,
    /// Connections closed because no complete request head came within
    /// `--idle-timeout` of the connection's start or of the previous
    /// response, though bytes did (hyper's header read timeout: a head
    /// trickling in, slowloris).
    pub(super) header_timeout: AtomicU64,
    /// Connections from peers `--allow-from` does not list, reset as soon
    /// as accepted: the tokio baseline's (on flowlane's TCP the listeners'
    /// SYN filter refuses them first, counted by the stack as refused
    /// SYNs).
    pub(super) refused_peer: AtomicU64,
    /// Accepts of the tokio baseline that failed (out of descriptors or
    /// memory: tried again after a pause of 10 ms; a connection aborted
    /// before it was taken: at once).
    pub(super) accept_failed: AtomicU64,
    /// `CONNECT` requests, answered `501 Not Implemented` and the
    /// connection then closed: this server opens no tunnel, and hyper
    /// would send a `200` to one without a body, which tells the client a
    /// tunnel was established (RFC 9110 §9.3.6).
    pub(super) not_implemented: AtomicU64,
}

/// What serving a connection takes: the same for flowlane's streams and
/// tokio's.
#[derive(Clone)]
struct Serve {
    /// Every response's body.
    body: Bytes,
    /// `--idle-timeout` (None: none).
    idle: Option<Duration>,
    allow: AllowFrom,
    counters: Arc<HyperCounters>,
    /// The service's stop, where it tells of one (on flowlane: its
    /// thread's [`StopSignal`]): each connection then ends gracefully.
    stop: Option<StopSignal>,
}

impl Serve {
    /// Whether a connection from `peer` is served (`--allow-from`); a
    /// refusal is counted.
    fn admits(&self, peer: SocketAddr) -> bool {
        let ok = self.allow.allows(peer.ip());
        if !ok {
            self.counters.refused_peer.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

/// The answer to `method`: the body, or for `CONNECT` a `501` with
/// `Connection: close` (counted), since a `2xx` to it would say a tunnel
/// was established (RFC 9110 §9.3.6), and a method a server does not
/// implement is answered `501` (§9.1, §15.6.2).
fn respond(method: &hyper::Method, body: Bytes, counters: &HyperCounters) -> Response<Full<Bytes>> {
    if method != hyper::Method::CONNECT {
        return Response::new(Full::new(body));
    }
    counters.not_implemented.fetch_add(1, Ordering::Relaxed);
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::NOT_IMPLEMENTED;
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Serves one connection: every request gets the body (keep-alive as the
/// client asks), `CONNECT` a refusal ([`respond`]). hyper's read buffer is
/// bounded, and so is a request head ([`MAX_BUF`]); a head must be complete
/// within `--idle-timeout` (hyper's header read timeout, which it applies
/// only with a timer), and the connection is closed once no byte moved
/// either way for as long ([`Watched`]). A client may half-close once its
/// request is sent (`nc -N`, `shutdown(SHUT_WR)`): it is answered, where
/// hyper by default takes that FIN for a request cut short and drops the
/// connection unanswered; a FIN within a head still ends the connection
/// unanswered. At the service's stop ([`Serve::stop`]) the connection
/// ends as [`super::http_stop`] says (hyper's `graceful_shutdown`, within
/// the stop's drain): at once if it is idle between requests, else once
/// the response under way went (keep-alive off); one that has sent no
/// byte yet is told once its first bytes came (hyper would close it at
/// once, before the request its client is sending), and a response made
/// during the stop says `Connection: close`.
async fn serve_connection<S>(stream: S, serve: Serve)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (body, counters) = (serve.body.clone(), serve.counters.clone());
    let stopping = serve.stop.clone();
    let service = service_fn(move |req: hyper::Request<_>| {
        let mut r = respond(req.method(), body.clone(), &counters);
        if stopping.as_ref().is_some_and(StopSignal::is_stopping) {
            // The last response (RFC 9112 §9.6): hyper then closes.
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        async move { Ok::<_, Infallible>(r) }
    });
    let io = Watched::new(stream, serve.idle, serve.counters.clone());
    let no_byte_yet = io.fresh.clone();
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(serve.idle)
        .half_close(true)
        .max_buf_size(MAX_BUF)
        .max_header_size(MAX_BUF)
        .serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let r = match serve.stop {
        None => conn.await,
        Some(mut stop) => {
            let mut stopped = std::pin::pin!(stop.stopped());
            let (mut stopping, mut told) = (false, false);
            std::future::poll_fn(|cx| loop {
                stopping = stopping || stopped.as_mut().poll(cx).is_ready();
                let fresh = no_byte_yet.load(Ordering::Relaxed);
                if stopping && !told && http_stop::closes_between_requests(fresh) {
                    told = true;
                    conn.as_mut().graceful_shutdown();
                }
                let r = conn.as_mut().poll(cx);
                // Its first bytes came in this poll: hyper is told now.
                if r.is_pending() && stopping && !told && !no_byte_yet.load(Ordering::Relaxed) {
                    continue;
                }
                break r;
            })
            .await
        }
    };
    if r.is_err_and(|e| e.is_timeout()) {
        serve
            .counters
            .header_timeout
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// A connection's stream that fails (`TimedOut`, which ends hyper's
/// connection) once no byte moved either way for its limit: a peer that
/// stalls in a body, or reads no response, does not hold the connection
/// for good (hyper's own header timeout covers heads only).
struct Watched<S> {
    inner: S,
    /// The limit, and the timer that looks for it; none without a limit.
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    /// When a byte last moved either way.
    last: tokio::time::Instant,
    /// The limit was reached (counted once).
    expired: bool,
    counters: Arc<HyperCounters>,
    /// No byte was read yet (the connection's stop waits for its first
    /// request: [`super::http_stop`]).
    fresh: Arc<AtomicBool>,
}

impl<S> Watched<S> {
    fn new(inner: S, limit: Option<Duration>, counters: Arc<HyperCounters>) -> Watched<S> {
        let now = tokio::time::Instant::now();
        Watched {
            inner,
            idle: limit.map(|l| (l, Box::pin(tokio::time::sleep_until(now + l)))),
            last: now,
            expired: false,
            counters,
            fresh: Arc::new(AtomicBool::new(true)),
        }
    }

    /// What a read or write that is pending comes to: still pending, or
    /// `TimedOut` once the limit passed since the last byte (the timer,
    /// set for the limit after an earlier byte, is set again for the
    /// limit after the last one when it goes off early).
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let Some((limit, timer)) = &mut self.idle else {
            return Poll::Pending;
        };
        loop {
            if self.expired {
                return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let due = self.last + *limit;
            if tokio::time::Instant::now() >= due {
                self.expired = true;
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            } else {
                timer.as_mut().reset(due);
            }
        }
    }

    /// What a read or write that completed comes to: a byte moved if `n`
    /// is not 0.
    fn moved<T>(&mut self, r: io::Result<T>, n: usize) -> Poll<io::Result<T>> {
        if n > 0 && self.idle.is_some() {
            self.last = tokio::time::Instant::now();
        }
        Poll::Ready(r)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                let n = buf.filled().len() - before;
                if n > 0 {
                    self.fresh.store(false, Ordering::Relaxed);
                }
                self.moved(r, n)
            }
            Poll::Pending => self.pending(cx),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Ready(r) => {
                let n = *r.as_ref().unwrap_or(&0);
                self.moved(r, n)
            }
            Poll::Pending => self.pending(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                let n = *r.as_ref().unwrap_or(&0);
                self.moved(r, n)
            }
            Poll::Pending => self.pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => self.pending(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => self.pending(cx),
        }
    }
}

/// One application thread: accepts and spawns a task per connection on
/// the thread's runtime.
async fn flowlane_thread(mut local: Local, port: u16, mut serve: Serve) {
    let Some(listener) = local.listener(port) else {
        return;
    };
    serve.stop = Some(local.stop_signal());
    while let Ok((stream, peer)) = listener.accept().await {
        if !serve.admits(peer) {
            // Dropped: closed (lingering if it sent bytes already).
            continue;
        }
        stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, serve.clone()));
    }
}

/// Whether a failed accept failed for want of descriptors or memory (the
/// next would fail alike until some free up), rather than for the one
/// connection it would have returned.
fn out_of_resources(e: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM)
    )
}

/// The baseline's accept loop: hands every connection `accept` gives to
/// `serve`, until the runtime ends. A failed accept is counted and never
/// ends the loop (that would stop the service silently): out of
/// descriptors or memory, it is tried again after [`ACCEPT_BACKOFF`] (as
/// connections close), else at once.
async fn accept_forever<T, F>(
    mut accept: impl FnMut() -> F,
    mut serve: impl FnMut(T, SocketAddr),
    counters: &HyperCounters,
) where
    F: Future<Output = io::Result<(T, SocketAddr)>>,
{
    loop {
        match accept().await {
            Ok((stream, peer)) => serve(stream, peer),
            Err(e) => {
                counters.accept_failed.fetch_add(1, Ordering::Relaxed);
                if out_of_resources(&e) {
                    tracing::debug!("accept: {e}; trying again in 10 ms");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }
}

/// The flags that configure flowlane's TCP and data path, which `--tokio-baseline` does
/// not use, refused with it (one line, before anything starts).
fn refuse_what_the_baseline_lacks(c: &Common) -> Result<()> {
    let rebalance = c.rebalance.rebalance.is_some() || c.rebalance.rebalance_storm_ms.is_some();
    // The service's own flags, then those of flowlane's TCP and data path
    // (the kernel backend refuses the same).
    let mut given: Vec<&str> = [
        (c.backend.is_some(), "--backend"),
        (c.mode.is_some(), "--mode"),
        (c.workers.is_some(), "--workers"),
        (c.app_threads.is_some(), "--app-threads"),
        (rebalance, "--rebalance"),
        (
            c.rebalance.move_cost != flowlane_dataplane::service_args::MovePrice::Learned,
            "--move-cost",
        ),
        (c.rebalance.control_socket.is_some(), "--control-socket"),
        (c.rebalance.daemon_socket.is_some(), "--daemon-socket"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect();
    given.extend(super::flowlane_tcp_flags(c));
    let (verb, them) = match given.len() {
        0 => return Ok(()),
        1 => ("configures", "it"),
        _ => ("configure", "them"),
    };
    bail!(
        "--tokio-baseline serves on tokio's own listener (kernel TCP, --queues workers), not on \
         flowlane's TCP and data path, which {} {verb}: drop {them}, or drop --tokio-baseline",
        given.join(", ")
    );
}

/// Refuses, before anything starts (root and the bed included), flags
/// that contradict each other.
pub(super) fn check_flags(a: &HyperArgs) -> Result<()> {
    if a.tokio_baseline {
        return refuse_what_the_baseline_lacks(&a.common);
    }
    if a.common.mode == Some(ExecMode::Rtc) {
        bail!(
            "hyper-server runs hyper's tasks on application threads: it has --mode queue-pair \
             only"
        );
    }
    Ok(())
}

/// The summary's `application`: hyper-server's counters and, on
/// flowlane's TCP, its streams' (`tokio`: connections accepted, reset for
/// a full backlog, closed lingering after a drop with bytes unread or
/// arriving after it, of those reset at the linger's end, and the bytes
/// they dropped).
fn application(hyper: &HyperCounters, streams: Option<&Arc<flowlane_tokio::Counters>>) -> Value {
    let mut v = json!(hyper);
    if let Some(c) = streams {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        v["tokio"] = json!({
            "accepted": load(&c.accepted),
            "refused_backlog": load(&c.refused_backlog),
            "lingered": load(&c.lingered),
            "linger_expired": load(&c.linger_expired),
            "linger_discarded": load(&c.linger_discarded),
        });
    }
    v
}

/// Runs `hyper-server` (its flags checked by [`check_flags`]).
pub(super) fn run(a: HyperArgs, nic: NicAccess) -> Result<()> {
    let c = &a.common;
    let counters = Arc::new(HyperCounters::default());
    let streams: Arc<OnceLock<Arc<flowlane_tokio::Counters>>> = Arc::default();
    let (shown, streams_shown) = (counters.clone(), streams.clone());
    let _ = APPLICATION.set(Box::new(move || application(&shown, streams_shown.get())));
    let serve = Serve {
        body: Bytes::from(a.body.clone().into_bytes()),
        idle: idle::limit(a.idle_timeout),
        allow: a.allow.peers(),
        counters,
        stop: None,
    };
    if a.tokio_baseline {
        return baseline(&a, serve);
    }
    let port = a.port;
    serve_with("hyper-server", c, nic, &[port], None, 0, |run| {
        let config = AsyncConfig {
            backlog: BACKLOG,
            // Refused at their SYN, as on http-server (`Serve::allow`
            // then sees allowed peers only).
            syn_filter: serve.allow.filter(),
            ..AsyncConfig::new(queue_pair_config(c)?, [port])
        };
        let (qp, tokio_counters) = flowlane_tokio::start(config, move |local| {
            flowlane_thread(local, port, serve.clone())
        })
        .map_err(|e| anyhow::anyhow!("starting tokio on queue-pair mode: {e:#}"))?;
        let _ = streams.set(tokio_counters);
        serve_queue_pairs(run, qp)
    })
}

/// The baseline: the same service on tokio's `TcpListener`, a
/// multi-thread runtime with one worker per core (`--queues`, else the
/// interface's queue count), until SIGTERM/SIGINT or `--timeout`.
fn baseline(a: &HyperArgs, serve: Serve) -> Result<()> {
    let c = &a.common;
    let workers = match c.data_path.queues {
        Some(n) => n,
        None => cores(c).with_context(|| {
            format!(
                "--tokio-baseline runs as many workers as {} has queues; give --queues N \
                 to choose them without it",
                c.iface
            )
        })?,
    };
    // Every connection is a descriptor, as on the kernel backend.
    KernelService::raise_descriptor_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers as usize)
        .thread_name("flowlane-tokio")
        .enable_all()
        .build()
        .context("building a tokio runtime")?;
    let signals = ServiceSignals::install()?;
    // Dual stack where this namespace has IPv6 (as flowlane listens on
    // both), else IPv4.
    let any = KernelConfig::any_address();
    let addr = SocketAddr::new(*any.last().expect("IPv4 at least"), a.port);
    let listener = runtime
        .block_on(async { tokio::net::TcpListener::bind(addr).await })
        .map_err(|e| {
            anyhow::anyhow!(flowlane_kernel::listen_failure(
                addr,
                &e,
                flowlane_kernel::unprivileged_port_start()
            ))
        })?;
    let counters = serve.counters.clone();
    runtime.spawn(async move {
        let take = |stream: tokio::net::TcpStream, peer| {
            if !serve.admits(peer) {
                // Reset, as the kernel backend's `--allow-from` does.
                let _ = stream.set_zero_linger();
                return;
            }
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve_connection(stream, serve.clone()));
        };
        accept_forever(|| listener.accept(), take, &counters).await;
    });
    eprintln!("flowlane: hyper on tokio's own TCP listener, {workers} workers");
    let ready = json!({"event": "report", "ready": true, "backend": "tokio", "queues": workers});
    if let Some(p) = &c.report {
        write_report(p, &ready)?;
    }
    let start = Instant::now();
    let mut timed_out = false;
    while !signals.stop_requested() {
        std::thread::sleep(Duration::from_millis(20));
        if c.timeout > 0 && start.elapsed() > Duration::from_secs(c.timeout) {
            // `--timeout`: give up, exit 1 (as the flowlane path does), after
            // the summary.
            timed_out = true;
            break;
        }
    }
    let summary = json!({"event": "summary", "backend": "tokio",
                         "process_cpu_ns": process_cpu_ns(),
                         "application": super::application_json()});
    runtime.shutdown_timeout(Duration::from_secs(1));
    outln!("{summary}");
    if let Some(p) = &c.report {
        write_report(p, &summary)?;
    }
    if timed_out {
        bail!("timed out after {} s", c.timeout);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::TcpCmd;
    use clap::Parser;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The service with `idle` as `--idle-timeout`, and its counters.
    fn service(idle: Option<Duration>, allow: AllowFrom) -> (Serve, Arc<HyperCounters>) {
        let counters = Arc::new(HyperCounters::default());
        let serve = Serve {
            body: Bytes::from_static(b"hi"),
            idle,
            allow,
            counters: counters.clone(),
            stop: None,
        };
        (serve, counters)
    }

    /// A runtime whose clock stands still but for its timers (each wait
    /// jumps to the next one).
    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    }

    fn load(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    const MINUTE: Duration = Duration::from_secs(60);

    /// Slowloris: a head that stops, or trickles in a byte every 30 s,
    /// ends the connection within the timeout (hyper's header read
    /// timeout, which needs a timer).
    #[test]
    fn a_slow_head_ends_the_connection_at_the_idle_timeout() {
        paused().block_on(async {
            let (s, counters) = service(Some(MINUTE), AllowFrom::default());
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let conn = tokio::spawn(serve_connection(server, s.clone()));
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nX: ")
                .await
                .unwrap();
            tokio::time::sleep(2 * MINUTE).await;
            assert!(conn.is_finished(), "a partial head held the connection");
            assert_eq!(load(&counters.idle_closed), 1, "no byte for a minute");
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let conn = tokio::spawn(serve_connection(server, s));
            for _ in 0..6 {
                if conn.is_finished() {
                    break;
                }
                let _ = client.write_all(b"a").await;
                tokio::time::sleep(MINUTE / 2).await;
            }
            assert!(conn.is_finished(), "a trickling head held the connection");
            assert_eq!(load(&counters.header_timeout), 1, "bytes came");
            assert_eq!(load(&counters.idle_closed), 1);
        });
    }

    /// hyper's read buffer is bounded: a head longer is answered 431 at
    /// once, not read to 400 KiB.
    #[test]
    fn a_head_longer_than_the_buffer_is_refused_431() {
        paused().block_on(async {
            let (s, _) = service(None, AllowFrom::default());
            let (mut client, server) = tokio::io::duplex(1 << 20);
            tokio::spawn(serve_connection(server, s));
            let head = format!(
                "GET / HTTP/1.1\r\nHost: a\r\nX: {}",
                "a".repeat(2 * MAX_BUF)
            );
            client.write_all(head.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            let read = tokio::time::timeout(MINUTE, client.read_to_end(&mut got)).await;
            let got = String::from_utf8_lossy(&got);
            assert!(read.is_ok() && got.starts_with("HTTP/1.1 431"), "{got:?}");
        });
    }

    /// What the server sends to a client that sends `request` in pieces
    /// of `piece` bytes (until the server closes) and then half-closes
    /// (its FIN), till the server's FIN (a minute at most).
    async fn exchange(s: Serve, request: &[u8], piece: usize) -> String {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let conn = tokio::spawn(serve_connection(server, s));
        for (i, p) in request.chunks(piece).enumerate() {
            if i > 0 {
                // The server reads each piece by itself.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if client.write_all(p).await.is_err() {
                break;
            }
        }
        // The FIN right behind the last piece, as `nc -N` sends it.
        let _ = client.shutdown().await;
        let mut got = Vec::new();
        let read = tokio::time::timeout(MINUTE, client.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "no FIN from the server");
        assert!(conn.is_finished() || conn.await.is_ok());
        String::from_utf8_lossy(&got).into_owned()
    }

    /// A client that half-closes once its request is sent (`nc -N`,
    /// `shutdown(SHUT_WR)`) is answered, not dropped for a request cut
    /// short; one that half-closes within a head is closed unanswered.
    #[test]
    fn a_client_that_half_closes_after_its_request_is_answered() {
        paused().block_on(async {
            let (s, counters) = service(Some(MINUTE), AllowFrom::default());
            for (request, ends) in [
                (&b"GET / HTTP/1.0\r\n\r\n"[..], "\r\n\r\nhi"),
                (b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", "\r\n\r\n"),
                (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "\r\n\r\nhi"),
            ] {
                let got = exchange(s.clone(), request, request.len()).await;
                assert!(
                    got.starts_with("HTTP/1.") && got.contains(" 200 OK\r\n"),
                    "{got:?}"
                );
                assert!(got.ends_with(ends), "{got:?}");
            }
            let start = tokio::time::Instant::now();
            let got = exchange(s, b"GET / HTTP/1.1\r\nHost:", 100).await;
            assert_eq!(got, "");
            assert!(start.elapsed() < MINUTE, "the idle timeout ended it");
            assert_eq!(load(&counters.idle_closed), 0);
            assert_eq!(load(&counters.header_timeout), 0);
        });
    }

    /// A request head longer than [`MAX_BUF`] is refused 431 however its
    /// bytes arrive (all at once, in pieces); one that long is answered.
    #[test]
    fn heads_longer_than_max_buf_are_refused_431_however_they_arrive() {
        paused().block_on(async {
            let (s, _) = service(None, AllowFrom::default());
            let head = |len: usize| {
                let start = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
                let fill = len - start.len() - 4;
                format!("{start}{}\r\n\r\n", "a".repeat(fill)).into_bytes()
            };
            for (len, status) in [
                (MAX_BUF, "HTTP/1.1 200 OK"),
                (MAX_BUF + 1, "HTTP/1.1 431"),
                (40_000, "HTTP/1.1 431"),
            ] {
                for piece in [1000, 4096, len] {
                    let got = exchange(s.clone(), &head(len), piece).await;
                    assert!(got.starts_with(status), "{len} in {piece}: {got:?}");
                }
            }
        });
    }

    /// CONNECT asks for a tunnel: refused 501 and closed (RFC 9110 §9.3.6,
    /// §9.1), not answered 200, which says the tunnel was established.
    #[test]
    fn connect_is_refused_501_and_closed() {
        paused().block_on(async {
            let (s, counters) = service(None, AllowFrom::default());
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            tokio::spawn(serve_connection(server, s));
            client
                .write_all(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
                .await
                .unwrap();
            let mut got = Vec::new();
            let read = tokio::time::timeout(MINUTE, client.read_to_end(&mut got)).await;
            let got = String::from_utf8_lossy(&got).to_ascii_lowercase();
            assert!(read.is_ok(), "not closed: {got:?}");
            assert!(
                got.starts_with("http/1.1 501 not implemented\r\n"),
                "{got:?}"
            );
            assert!(got.contains("\r\nconnection: close\r\n"), "{got:?}");
            assert!(got.contains("\r\ncontent-length: 0\r\n"), "{got:?}");
            assert_eq!(load(&counters.not_implemented), 1);
        });
    }

    /// A peer that sends requests and reads no response stalls every
    /// byte either way: closed at the timeout, not held for good.
    #[test]
    fn a_peer_that_reads_no_response_is_closed_at_the_idle_timeout() {
        paused().block_on(async {
            let (s, counters) = service(Some(MINUTE), AllowFrom::default());
            let (mut client, server) = tokio::io::duplex(4096);
            let conn = tokio::spawn(serve_connection(server, s));
            let requests = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".repeat(10_000);
            let sender = tokio::spawn(async move {
                let _ = client.write_all(&requests).await;
                client
            });
            tokio::time::sleep(3 * MINUTE).await;
            assert!(conn.is_finished(), "a stalled peer held the connection");
            assert_eq!(load(&counters.idle_closed), 1);
            drop(sender);
        });
    }

    /// A connection that answers at its pace is not closed, however long.
    #[test]
    fn a_busy_connection_is_not_idle() {
        paused().block_on(async {
            let (s, counters) = service(Some(MINUTE), AllowFrom::default());
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let conn = tokio::spawn(serve_connection(server, s));
            let mut buf = [0u8; 4096];
            for _ in 0..10 {
                client
                    .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                    .await
                    .unwrap();
                let n = client.read(&mut buf).await.unwrap();
                assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK"));
                tokio::time::sleep(MINUTE / 2).await;
            }
            assert!(!conn.is_finished());
            assert_eq!(load(&counters.idle_closed), 0);
            assert_eq!(load(&counters.header_timeout), 0);
        });
    }

    /// The baseline's accept loop goes on past failed accepts, pausing
    /// after those out of descriptors (EMFILE, ENFILE), and counts them.
    #[test]
    fn failed_accepts_are_counted_and_the_loop_goes_on() {
        use nix::errno::Errno;
        paused().block_on(async {
            let counters = HyperCounters::default();
            let peer: SocketAddr = "192.0.2.1:40000".parse().unwrap();
            let err = |e: Errno| Err(io::Error::from_raw_os_error(e as i32));
            let mut script = std::collections::VecDeque::from([
                err(Errno::EMFILE),
                err(Errno::ENFILE),
                err(Errno::ECONNABORTED),
                Ok(1),
                err(Errno::EMFILE),
                Ok(2),
            ]);
            let start = tokio::time::Instant::now();
            let mut served = Vec::new();
            let accept = || {
                let next = script.pop_front();
                async move {
                    match next {
                        Some(r) => r.map(|n| (n, peer)),
                        None => std::future::pending().await,
                    }
                }
            };
            let take = |n: u32, _| served.push((n, start.elapsed()));
            let run = accept_forever(accept, take, &counters);
            let _ = tokio::time::timeout(MINUTE, run).await;
            let ms = Duration::from_millis;
            assert_eq!(served, [(1, ms(20)), (2, ms(30))]);
            assert_eq!(load(&counters.accept_failed), 4);
        });
    }

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: TcpCmd,
    }

    fn hyper_args(flags: &[&str]) -> HyperArgs {
        let args = [&["flowlane", "hyper-server"][..], flags].concat();
        match Cli::try_parse_from(args).unwrap().cmd {
            TcpCmd::HyperServer(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_baseline_refuses_flowlane_s_flags_and_both_take_idle_and_allow() {
        let a = hyper_args(&["--idle-timeout", "5", "--allow-from", "10.0.0.0/8"]);
        assert_eq!(a.idle_timeout, 5);
        assert!(a.allow.peers().allows("10.1.2.3".parse().unwrap()));
        assert!(!a.allow.peers().allows("192.0.2.1".parse().unwrap()));
        assert_eq!(hyper_args(&[]).idle_timeout, 60);
        assert!(check_flags(&hyper_args(&["--tokio-baseline", "--queues", "2"])).is_ok());
        for flags in [
            &["--backend", "xdp"][..],
            &["--backend", "kernel"],
            &["--mode", "queue-pair"],
            &["--workers", "2"],
            &["--app-threads", "2"],
            &["--rebalance", "off"],
            &["--msl-ms", "100"],
        ] {
            let a = hyper_args(&[&["--tokio-baseline"][..], flags].concat());
            let e = check_flags(&a).unwrap_err().to_string();
            assert!(
                e.starts_with("--tokio-baseline serves on tokio's own"),
                "{e}"
            );
            let says = format!("which {} configures: drop it,", flags[0]);
            assert!(e.contains(&says), "{e}");
            assert!(check_flags(&hyper_args(flags)).is_ok(), "{flags:?}");
        }
        let a = hyper_args(&["--tokio-baseline", "--mode", "rtc", "--workers", "4"]);
        let e = check_flags(&a).unwrap_err().to_string();
        assert!(
            e.contains("which --mode, --workers configure: drop them"),
            "{e}"
        );
        let e = check_flags(&hyper_args(&["--mode", "rtc"])).unwrap_err();
        assert!(e.to_string().contains("--mode queue-pair only"), "{e}");
    }

    #[test]
    fn peers_allow_from_does_not_list_are_refused_and_counted() {
        let list = [super::super::allow::allow_prefix("10.0.0.0/8").unwrap()];
        let (s, counters) = service(None, AllowFrom::new(&list));
        assert!(s.admits("10.1.1.1:4000".parse().unwrap()));
        assert!(!s.admits("192.0.2.1:4000".parse().unwrap()));
        assert!(s.admits("[::ffff:10.0.0.1]:4000".parse().unwrap()));
        assert_eq!(load(&counters.refused_peer), 1);
    }
}
