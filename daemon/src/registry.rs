//! The running flowlane services, found through their control sockets in
//! the run directory (`/run/flowlane/SERVICE.PID.sock`, the model of DPDK's
//! telemetry socket): a service needs no registration step, and one that
//! exits takes its socket with it. Each scrape asks every live socket for
//! the service's counters.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowlane_dataplane::control_socket::{self, Request, Response};

use crate::metrics::Scrape;

/// Where services are found, and how long each may take to answer.
#[derive(Debug)]
pub struct Services {
    run_dir: PathBuf,
    timeout: Duration,
    unanswered_total: AtomicU64,
}

impl Services {
    /// Services with control sockets in `run_dir`, each given `timeout` to
    /// answer a scrape.
    pub fn new(run_dir: PathBuf, timeout: Duration) -> Services {
        Services {
            run_dir,
            timeout,
            unanswered_total: AtomicU64::new(0),
        }
    }

    /// Asks every live service for its counters. A service that does not
    /// answer in time, or answers with anything else, is left out of this
    /// scrape and counted.
    pub fn scrape(&self) -> Scrape {
        let mut scrape = Scrape {
            now_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            ..Scrape::default()
        };
        for path in control_socket::live_sockets(&self.run_dir) {
            match control_socket::request(&path, &Request::Counters, self.timeout) {
                Ok(Response::Counters(c)) => scrape.services.push(c),
                other => {
                    tracing::debug!(socket = %path.display(), answer = ?other, "no counters");
                    scrape.unanswered += 1;
                }
            }
        }
        scrape.unanswered_total = self
            .unanswered_total
            .fetch_add(scrape.unanswered, Ordering::Relaxed)
            + scrape.unanswered;
        scrape
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    /// A socket that answers one request with `answer`, as a service would.
    fn fake_service(
        dir: &std::path::Path,
        name: &str,
        answer: &'static str,
    ) -> std::thread::JoinHandle<()> {
        let path = dir.join(format!("{name}.{}.sock", std::process::id()));
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            // live_sockets probes with a connect first; answer every
            // connection that sends a request line.
            for stream in listener.incoming().take(2) {
                let mut s = stream.unwrap();
                let mut buf = [0u8; 512];
                if let Ok(n) = s.read(&mut buf) {
                    if n > 0 {
                        let _ = s.write_all(answer.as_bytes());
                    }
                }
            }
        })
    }

    #[test]
    fn a_socket_that_gives_no_counters_is_counted_not_shown() {
        let dir = std::env::temp_dir().join(format!("fl-daemon-reg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t = fake_service(
            &dir,
            "old-service",
            "{\"result\":\"error\",\"message\":\"unknown op\"}\n",
        );
        let services = Services::new(dir.clone(), Duration::from_millis(500));
        let s = services.scrape();
        assert!(s.services.is_empty());
        assert_eq!((s.unanswered, s.unanswered_total), (1, 1));
        t.join().unwrap();
        // Nothing there any more: nothing asked, the total stays.
        let s = services.scrape();
        assert_eq!((s.unanswered, s.unanswered_total), (0, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
