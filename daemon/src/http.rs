//! The metrics endpoint: `GET /metrics` over HTTP/1.1 (hyper, on a
//! current-thread tokio runtime in a thread of its own). Each request
//! takes the page of the scrape under way, or begins one (`pages.rs`:
//! one at a time, on a blocking thread, so a slow service does not hold up
//! other connections, and a flood of requests asks the services no more
//! often than one client would). Any local user can reach the port, so
//! what one can hold is bounded: 64 connections at once, each for 60 s at
//! most, its request headers within 5 s; when all are taken, a new
//! connection takes the place of the one idle longest (not answering a
//! request: a scraper reconnects), so that idle or slow clients cannot
//! keep a scraper out; and the responses share one page's bytes.

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

use crate::metrics::Format;
use crate::pages::Pages;
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
            std::net::TcpListener::bind(addr).map_err(|why| Error::Bind { addr, why })?;
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
                runtime.block_on(accept_loop(listener, Pages::new(services), flag));
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

/// One open connection's place.
struct Place {
    /// Answering a request now.
    busy: AtomicBool,
    /// When it opened, or last began or ended answering a request.
    since: Mutex<Instant>,
    /// Told to close: its place was given to a newer connection.
    leave: tokio::sync::Notify,
}

impl Place {
    fn mark(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
        *self.since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// A place answering a request, idle again when dropped (the request
/// answered, or gone with its connection).
struct Busy(Arc<Place>);

impl Busy {
    fn new(place: Arc<Place>) -> Busy {
        place.mark(true);
        Busy(place)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.mark(false);
    }
}

/// The places of the connections open, at most [`MAX_CONNECTIONS`].
#[derive(Default)]
struct Places(Mutex<Vec<Arc<Place>>>);

impl Places {
    /// A place for a new connection: a free one, else the one idle
    /// longest, whose connection is told to leave; None when every
    /// connection is answering a request.
    fn take(&self) -> Option<Arc<Place>> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= MAX_CONNECTIONS {
            let idle = open
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.busy.load(Ordering::Relaxed))
                .min_by_key(|(_, p)| *p.since.lock().unwrap_or_else(|e| e.into_inner()))
                .map(|(i, _)| i)?;
            open.swap_remove(idle).leave.notify_one();
        }
        let place = Arc::new(Place {
            busy: AtomicBool::new(false),
            since: Mutex::new(Instant::now()),
            leave: tokio::sync::Notify::new(),
        });
        open.push(place.clone());
        Some(place)
    }

    /// Frees `place` (its connection ended), if it was not given away.
    fn free(&self, place: &Arc<Place>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| !Arc::ptr_eq(p, place));
    }
}

async fn accept_loop(listener: std::net::TcpListener, pages: Arc<Pages>, stop: Arc<AtomicBool>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics endpoint: {e}");
            return;
        }
    };
    let places = Arc::new(Places::default());
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
        let Some(place) = places.take() else {
            tracing::debug!(
                "metrics endpoint: {MAX_CONNECTIONS} connections answering requests, one closed"
            );
            drop(stream);
            continue;
        };
        let (pages, places) = (pages.clone(), places.clone());
        tokio::spawn(async move {
            let marks = place.clone();
            let service = hyper::service::service_fn(move |req| {
                let (pages, marks) = (pages.clone(), marks.clone());
                async move {
                    let _busy = Busy::new(marks);
                    answer(req, &pages).await
                }
            });
            let serve = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                served = tokio::time::timeout(CONNECTION_LIFETIME, serve) => match served {
                    Ok(Err(e)) => tracing::debug!("metrics endpoint: connection: {e}"),
                    Err(_) => tracing::debug!("metrics endpoint: connection closed after its lifetime"),
                    Ok(Ok(())) => {}
                },
                () = place.leave.notified() => {
                    tracing::debug!("metrics endpoint: an idle connection closed for a new one");
                }
            }
            places.free(&place);
        });
    }
}

/// One request: the page at `/metrics`, a pointer to it at `/`, 404
/// elsewhere, 405 for anything but GET and HEAD.
async fn answer(
    req: Request<Incoming>,
    pages: &Arc<Pages>,
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
    let Some(page) = pages.page(format).await else {
        // A bug: the scraper sees the page is missing, not empty.
        return Ok(plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics page could not be made; see the daemon's log\n",
        ));
    };
    let mut r = Response::new(Full::new(page));
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(format.content_type()),
    );
    Ok(r)
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

    /// Two requests a scrape of a service that never answers apart: the
    /// second, arriving while the first's scrape is under way, takes its
    /// page (answered when it ends, not after a scrape of its own, which
    /// would take it past a scraper's timeout).
    #[test]
    fn a_request_during_a_scrape_takes_its_page() {
        let dir = std::env::temp_dir().join(format!("fl-http-overlap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let _silent = std::os::unix::net::UnixListener::bind(dir.join("silent.1.sock")).unwrap();
        let timeout = Duration::from_millis(600);
        let services = Arc::new(Services::new(dir.clone(), timeout));
        let server = MetricsServer::start(([127, 0, 0, 1], 0).into(), services).unwrap();
        let addr = server.local_addr();
        let began = Instant::now();
        let first = std::thread::spawn(move || get(addr, "/metrics"));
        std::thread::sleep(timeout / 2);
        assert_eq!(get(addr, "/metrics"), "HTTP/1.1 200 OK");
        let took = began.elapsed();
        assert_eq!(first.join().unwrap(), "HTTP/1.1 200 OK");
        assert!(took < timeout * 3 / 2, "the second answered after {took:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every place taken by a connection that sends nothing (or is done
    /// and idle): a scraper's new connection takes the place of the one
    /// idle longest and is answered.
    #[test]
    fn idle_connections_do_not_keep_a_scraper_out() {
        let dir = std::env::temp_dir().join(format!("fl-http-idle-{}", std::process::id()));
        let services = Arc::new(Services::new(dir, Duration::from_millis(100)));
        let server = MetricsServer::start(([127, 0, 0, 1], 0).into(), services).unwrap();
        let idle: Vec<std::net::TcpStream> = (0..MAX_CONNECTIONS)
            .map(|_| std::net::TcpStream::connect(server.local_addr()).unwrap())
            .collect();
        // Taken by the endpoint.
        std::thread::sleep(Duration::from_millis(300));
        for _ in 0..3 {
            assert_eq!(get(server.local_addr(), "/metrics"), "HTTP/1.1 200 OK");
        }
        drop(idle);
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
            changes_total: 0,
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
