//! The metrics endpoint: `GET /metrics` over HTTP/1.1 (hyper, on a
//! current-thread tokio runtime in a thread of its own). Each request is a
//! scrape: the services are asked on a blocking thread, so a slow one does
//! not hold up other connections. Any local user can reach the port, so
//! what one can hold is bounded: 64 connections at once (more are closed
//! as they come), each for 60 s at most, its request headers within 5 s;
//! and one scrape of
//! the services at a time, whose page every request that waited for it
//! shares (a flood of requests asks the services no more often than one
//! client would).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::metrics::{render, Format};
use crate::registry::Services;
use crate::Error;

/// How often the accept loop looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 64;
/// How long one connection may stay (a scraper reconnects).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// How long a request's headers may take to arrive.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a stopping endpoint waits for a scrape under way (its
/// services are asked under the scrape timeout; a thread still blocked
/// after this is left to end with the process).
const SHUTDOWN_WAIT: Duration = Duration::from_millis(500);

/// The last page made, per format, and when its scrape began: a request
/// that arrived before then takes it instead of scraping again.
type Pages = Mutex<Vec<(Format, Instant, String)>>;

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
            .spawn(move || {
                runtime.block_on(accept_loop(listener, services, flag));
                // Dropping the runtime would wait for every blocking task.
                runtime.shutdown_timeout(SHUTDOWN_WAIT);
            })
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
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let pages: Arc<Pages> = Arc::default();
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!("metrics endpoint: {MAX_CONNECTIONS} connections open, one closed");
            drop(stream);
            continue;
        };
        let (services, pages) = (services.clone(), pages.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let service =
                hyper::service::service_fn(move |req| answer(req, services.clone(), pages.clone()));
            let serve = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_LIFETIME, serve).await {
                Ok(Err(e)) => tracing::debug!("metrics endpoint: connection: {e}"),
                Err(_) => tracing::debug!("metrics endpoint: connection closed after its lifetime"),
                Ok(Ok(())) => {}
            }
        });
    }
}

/// One request: the page at `/metrics`, a pointer to it at `/`, 404
/// elsewhere, 405 for anything but GET and HEAD.
async fn answer(
    req: Request<Incoming>,
    services: Arc<Services>,
    pages: Arc<Pages>,
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
    let arrived = Instant::now();
    let page =
        match tokio::task::spawn_blocking(move || page(&services, &pages, format, arrived)).await {
            Ok(page) => page,
            Err(e) => {
                // A bug: the scraper sees the page is missing, not empty.
                tracing::error!("metrics endpoint: making the page failed: {e}");
                return Ok(plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the metrics page could not be made; see the daemon's log\n",
                ));
            }
        };
    let mut r = Response::new(Full::new(Bytes::from(page)));
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(format.content_type()),
    );
    Ok(r)
}

/// The page in `format` for a request that arrived at `arrived`: one scrape
/// at a time; a scrape that began after the request arrived (another
/// request's, while this one waited) is as fresh as its own would be.
fn page(services: &Services, pages: &Pages, format: Format, arrived: Instant) -> String {
    let mut pages = pages.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, page)) = pages
        .iter()
        .find(|(f, began, _)| *f == format && *began >= arrived)
    {
        return page.clone();
    }
    let began = Instant::now();
    let page = render(&services.scrape(), format);
    pages.retain(|(f, _, _)| *f != format);
    pages.push((format, began, page.clone()));
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// The status line of `GET path` on `addr`.
    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out.lines().next().unwrap_or_default().to_string()
    }

    /// A panic while making the page (a bug) is a 500, not an empty page
    /// that reads as "no services"; the next scrape works.
    #[test]
    fn a_page_that_panics_is_a_server_error() {
        let dir = std::env::temp_dir().join(format!("fl-http-panic-{}", std::process::id()));
        let services = Arc::new(Services::new(dir, Duration::from_millis(100)));
        let server = MetricsServer::start(([127, 0, 0, 1], 0).into(), services.clone()).unwrap();
        assert_eq!(get(server.local_addr(), "/metrics"), "HTTP/1.1 200 OK");
        services.set_nics(vec![flowlane_dataplane::control_socket::NicReport {
            caps: flowlane_numa_sched::nic_caps::NicCaps {
                iface: "eth9".into(),
                ..Default::default()
            },
            workers: 1,
            plan: Vec::new(),
            dry_run: false,
            changes: Vec::new(),
            notes: Vec::new(),
            restore_on_exit: true,
        }]);
        services.set_nic_stats(Box::new(|_| panic!("a bug in the reader")));
        assert_eq!(
            get(server.local_addr(), "/metrics"),
            "HTTP/1.1 500 Internal Server Error"
        );
        services.set_nic_stats(Box::new(|_| None));
        assert_eq!(get(server.local_addr(), "/metrics"), "HTTP/1.1 200 OK");
    }
}
