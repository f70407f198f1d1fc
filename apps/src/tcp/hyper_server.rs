//! `hyper-server`: an HTTP/1.1 server written on hyper and tokio, served
//! by flowlane's TCP through `flowlane-tokio` (queue-pair mode: the
//! network cores run the stacks, each application thread a current-thread
//! tokio runtime), or, with `--tokio-baseline`, the same service on
//! tokio's own `TcpListener` (kernel TCP, a multi-thread runtime): the
//! comparison a tokio user makes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use flowlane_dataplane::process_cpu_ns;
use flowlane_dataplane::service_args::ExecMode;
use flowlane_tokio::{AsyncConfig, Local};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{
    cores, listen_addresses, queue_pair_config, serve_queue_pairs, serve_with, HyperArgs, NicAccess,
};
use crate::service::{write_report, ServiceSignals};

/// Accepted connections a thread's listener holds before `accept` takes
/// them.
const BACKLOG: usize = 4096;

/// Serves one connection: every request gets `body` (keep-alive as the
/// client asks). The same code for flowlane's streams and tokio's.
async fn serve_connection<S>(stream: S, body: Bytes)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let service = service_fn(move |_req| {
        let body = body.clone();
        async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(body))) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// One application thread: accepts and spawns a task per connection on
/// the thread's runtime.
async fn flowlane_thread(mut local: Local, port: u16, body: Bytes) {
    let Some(listener) = local.listener(port) else {
        return;
    };
    while let Ok((stream, _)) = listener.accept().await {
        stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, body.clone()));
    }
}

/// Runs `hyper-server`.
pub(super) fn run(a: HyperArgs, nic: NicAccess) -> Result<()> {
    let c = &a.common;
    if c.mode == Some(ExecMode::Rtc) {
        bail!(
            "hyper-server runs hyper's tasks on application threads: it has --mode queue-pair \
             only"
        );
    }
    let body = Bytes::from(a.body.clone().into_bytes());
    if a.tokio_baseline {
        return baseline(&a, body);
    }
    let port = a.port;
    serve_with("hyper-server", c, nic, &[port], None, 0, |run| {
        let config = AsyncConfig {
            queue_pairs: queue_pair_config(c)?,
            ports: vec![port],
            backlog: BACKLOG,
        };
        let (qp, _counters) = flowlane_tokio::start(config, move |local| {
            flowlane_thread(local, port, body.clone())
        })
        .map_err(|e| anyhow::anyhow!("starting tokio on queue-pair mode: {e}"))?;
        serve_queue_pairs(run, qp)
    })
}

/// The baseline: the same service on tokio's `TcpListener`, a
/// multi-thread runtime with one worker per core (`--queues`, else the
/// interface's queue count), until SIGTERM/SIGINT or `--timeout`.
fn baseline(a: &HyperArgs, body: Bytes) -> Result<()> {
    let c = &a.common;
    let workers = cores(c)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers as usize)
        .thread_name("flowlane-tokio")
        .enable_all()
        .build()
        .context("building a tokio runtime")?;
    let signals = ServiceSignals::install()?;
    // Dual stack where this namespace has IPv6 (as flowlane listens on
    // both), else IPv4.
    let addr = SocketAddr::new(*listen_addresses().last().expect("IPv4 at least"), a.port);
    let listener = runtime
        .block_on(async { tokio::net::TcpListener::bind(addr).await })
        .with_context(|| format!("binding {addr}"))?;
    runtime.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve_connection(stream, body.clone()));
        }
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
                         "process_cpu_ns": process_cpu_ns()});
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
