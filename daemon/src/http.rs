//! The metrics endpoint: `GET /metrics` over HTTP/1.1 (hyper, on a
//! current-thread tokio runtime in a thread of its own). Each request is a
//! scrape: the services are asked on a blocking thread, so a slow one does
//! not hold up other connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::metrics::{render, Format};
use crate::registry::Services;
use crate::Error;

/// How often the accept loop looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// A running metrics endpoint; stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` and serves the metrics of `services`.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be listened on;
    /// [`Error::Io`] when the runtime cannot start.
    pub fn start(addr: SocketAddr, services: Arc<Services>) -> Result<MetricsServer, Error> {
        let listener =
            std::net::TcpListener::bind(addr).map_err(|source| Error::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(Error::Io)?;
        listener.set_nonblocking(true).map_err(Error::Io)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(Error::Io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("flowlane-metrics".into())
            .spawn(move || runtime.block_on(accept_loop(listener, services, flag)))
            .map_err(Error::Io)?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port chosen, if 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    services: Arc<Services>,
    stop: Arc<AtomicBool>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics endpoint: {e}");
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let Ok(accepted) = tokio::time::timeout(STOP_CHECK, listener.accept()).await else {
            continue;
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("metrics endpoint: accept: {e}");
                tokio::time::sleep(STOP_CHECK).await;
                continue;
            }
        };
        let services = services.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(req, services.clone()));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!("metrics endpoint: connection: {e}");
            }
        });
    }
}

/// One request: the page at `/metrics`, a pointer to it at `/`, 404
/// elsewhere, 405 for anything but GET and HEAD.
async fn answer(
    req: Request<Incoming>,
    services: Arc<Services>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let plain = |status, text: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = status;
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n"));
    }
    match req.uri().path() {
        "/metrics" => {}
        "/" => {
            return Ok(plain(
                StatusCode::OK,
                "flowlane daemon: metrics at /metrics\n",
            ))
        }
        _ => {
            return Ok(plain(
                StatusCode::NOT_FOUND,
                "not found: metrics at /metrics\n",
            ))
        }
    }
    let format = Format::from_accept(req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()));
    let page = tokio::task::spawn_blocking(move || render(&services.scrape(), format))
        .await
        .unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(page)));
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(format.content_type()),
    );
    Ok(r)
}
