//! A hyper HTTP/1.1 service on flowlane-tokio: each request's body comes
//! back with an `x-checksum` header (FNV-1a, 64 bits, in hex). The same
//! service runs on tokio's own listener (`--tokio`) for comparison: only
//! the accept loop differs.
//!
//! ```sh
//! cargo run -p flowlane-apps --example hyper_echo -- --port 8080
//! curl --data-binary @Cargo.toml -D - http://127.0.0.1:8080/
//! ```
//!
//! On flowlane the network cores are kernel-socket loops here (no root
//! needed); a service on AF_XDP starts `flowlane_dataplane::TcpService`
//! in their place, calling `QueuePairs::setup_core` the same way.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flowlane_app::StopError;
use flowlane_kernel::{KernelConfig, KernelService};
use flowlane_qp::QueuePairConfig;
use flowlane_tokio::AsyncConfig;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let body = request.into_body().collect().await?.to_bytes();
    let sum = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut response = Response::new(Full::new(body));
    let header = format!("{sum:016x}")
        .parse()
        .expect("hex is a header value");
    response.headers_mut().insert("x-checksum", header);
    Ok(response)
}

/// One connection, whatever carries it: a flowlane stream or a kernel one.
async fn serve(stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static) {
    let service = hyper::service::service_fn(echo);
    let connection = hyper::server::conn::http1::Builder::new()
        .max_buf_size(32 * 1024)
        .serve_connection(TokioIo::new(stream), service);
    let _ = connection.await; // a client gone mid-request: nothing to do
}

fn main() {
    let mut port = 8080;
    let mut on_tokio = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--tokio" => on_tokio = true,
            "--port" => match args.next().and_then(|p| p.parse().ok()) {
                Some(p @ 1..) => port = p,
                _ => exit("a port must be 1-65535"),
            },
            _ => exit("usage: hyper_echo [--port 8080] [--tokio]"),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).expect("signal handler");
    }
    if on_tokio {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.spawn(async move {
            let any = IpAddr::V6(Ipv6Addr::UNSPECIFIED); // IPv4 too, mapped
            let listener = tokio::net::TcpListener::bind((any, port)).await;
            let listener = listener.unwrap_or_else(|e| exit(format!("port {port}: {e}")));
            loop {
                match listener.accept().await {
                    Ok((stream, _peer)) => drop(tokio::spawn(serve(stream))),
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        wait(&stop);
        return;
    }
    // One network core and one application thread, which runs a
    // current-thread tokio runtime and this function in it.
    let kernel = KernelConfig::new(1);
    let config = AsyncConfig::new(QueuePairConfig::new(&kernel.cores), [port]);
    let (queue_pairs, _counters) = flowlane_tokio::start(config, move |mut local| async move {
        let listener = local.listener(port).expect("a configured port");
        while let Ok((stream, _peer)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    })
    .unwrap_or_else(|e| exit(e));
    // The network cores next: each core's set-up takes its relay to the
    // application threads and listens on their ports.
    let queue_pairs = Arc::new(queue_pairs);
    let relays = queue_pairs.clone();
    let service = KernelService::start(kernel, move |core| relays.setup_core(core))
        .unwrap_or_else(|e| exit(e));
    wait(&stop);
    // The cores first (their drain), then the application threads; what
    // failed in either, as one error.
    let (_, cores) = service.stop();
    let threads = queue_pairs.stop();
    if let Err(e) = StopError::collect(cores.err().into_iter().chain(threads.err())) {
        exit(e);
    }
}

fn wait(stop: &AtomicBool) {
    eprintln!("hyper_echo: serving (Ctrl-C stops)");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn exit(why: impl std::fmt::Display) -> ! {
    // `{:#}`: a start error's line and its causes.
    eprintln!("hyper_echo: {why:#}");
    std::process::exit(1)
}
