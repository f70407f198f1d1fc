//! The running flowlane services, found through their control sockets: in
//! the run directory (`/run/flowlane/SERVICE.PID.sock`, the model of DPDK's
//! telemetry socket), and wherever a service that registered keeps its own
//! (`Request::Register` on the daemon's socket). A service that exits takes
//! its socket with it; one killed leaves the file, and a registered socket
//! nothing answers on is forgotten. Each scrape asks every live socket for
//! the service's counters.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowlane_dataplane::control_socket::{
    self, FlowQuery, NicQueueStats, NicReport, Request, Response,
};

use crate::metrics::Scrape;

/// Where services are found, and how long each may take to answer.
#[derive(Debug)]
pub struct Services {
    run_dir: PathBuf,
    timeout: Duration,
    unanswered_total: AtomicU64,
    /// The daemon's own socket, if it is in the run directory: not a
    /// service.
    own: Option<PathBuf>,
    /// The NICs the daemon owns, as it found and planned them.
    nics: Mutex<Vec<NicReport>>,
    /// Reads an owned NIC's per-queue counters at each scrape.
    nic_stats: Mutex<Option<Reader>>,
    /// Control sockets services announced (`Request::Register`), wherever
    /// they are; forgotten once nothing answers there.
    registered: Mutex<Vec<PathBuf>>,
    /// Sockets that refused the daemon (permission denied), each said
    /// once (bounded like the registrations).
    refused_said: Mutex<Vec<PathBuf>>,
}

/// Registrations the daemon keeps at most (a registering process is root:
/// the bound is against mistakes, not attacks).
const REGISTERED_MAX: usize = 1024;

/// A [`NicStatsReader`] in a field of a `Debug` struct.
struct Reader(NicStatsReader);

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NicStatsReader")
    }
}

/// Reads a NIC's per-queue counters (netdev `qstats-get`) by its name:
/// `None` when it keeps none. The caller, which holds the effects, gives
/// it ([`Services::set_nic_stats`]).
pub type NicStatsReader = Box<dyn Fn(&str) -> Option<Vec<NicQueueStats>> + Send + Sync>;

impl Services {
    /// Services with control sockets in `run_dir`, each given `timeout` to
    /// answer a scrape.
    pub fn new(run_dir: PathBuf, timeout: Duration) -> Services {
        Services {
            run_dir,
            timeout,
            unanswered_total: AtomicU64::new(0),
            own: None,
            nics: Mutex::new(Vec::new()),
            nic_stats: Mutex::new(None),
            registered: Mutex::new(Vec::new()),
            refused_said: Mutex::new(Vec::new()),
        }
    }

    /// Takes a service's announcement of its control socket: an absolute
    /// path to a Unix socket that answers.
    ///
    /// # Errors
    /// One line saying why the path is not taken.
    pub fn register(&self, socket: &std::path::Path) -> Result<(), String> {
        use std::os::unix::fs::FileTypeExt;
        if !socket.is_absolute() {
            return Err(format!("{} is not an absolute path", socket.display()));
        }
        match std::fs::metadata(socket) {
            Ok(m) if m.file_type().is_socket() => {}
            _ => return Err(format!("{} is not a Unix socket", socket.display())),
        }
        let mut r = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        if !r.iter().any(|p| p == socket) {
            if r.len() >= REGISTERED_MAX {
                return Err(format!(
                    "the daemon keeps at most {REGISTERED_MAX} registrations"
                ));
            }
            r.push(socket.to_path_buf());
        }
        Ok(())
    }

    /// How each scrape reads the owned NICs' per-queue counters.
    pub fn set_nic_stats(&self, reader: NicStatsReader) {
        *self.nic_stats.lock().unwrap_or_else(|e| e.into_inner()) = Some(Reader(reader));
    }

    /// The owned NICs' per-queue counters now, for those that keep any.
    fn nic_queues(&self, nics: &[NicReport]) -> Vec<(String, Vec<NicQueueStats>)> {
        let reader = self.nic_stats.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Reader(read)) = reader.as_ref() else {
            return Vec::new();
        };
        nics.iter()
            .filter_map(|n| Some((n.caps.iface.clone(), read(&n.caps.iface)?)))
            .collect()
    }

    /// Records the NICs the daemon owns (what scrapes and `Request::Host`
    /// report).
    pub fn set_nics(&self, nics: Vec<NicReport>) {
        *self.nics.lock().unwrap_or_else(|e| e.into_inner()) = nics;
    }

    /// The NICs the daemon owns.
    pub fn nics(&self) -> Vec<NicReport> {
        self.nics.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The same, leaving out the daemon's own socket at `own`.
    pub fn excluding(mut self, own: Option<PathBuf>) -> Services {
        self.own = own;
        self
    }

    /// The live services' sockets: those in the run directory and those
    /// registered (a registered one nothing answers on any more is
    /// forgotten).
    pub fn sockets(&self) -> Vec<PathBuf> {
        let scan = control_socket::scan_sockets(&self.run_dir);
        self.say_refused(&scan.refused);
        let mut found = scan.live;
        {
            let mut r = self.registered.lock().unwrap_or_else(|e| e.into_inner());
            r.retain(|p| std::os::unix::net::UnixStream::connect(p).is_ok());
            found.extend(
                r.iter()
                    .filter(|p| !found.contains(p))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
        found.retain(|p| Some(p) != self.own.as_ref());
        found
    }

    /// Says once, one line, that sockets in the run directory refuse the
    /// daemon: otherwise a daemon without the services' privileges would
    /// serve an empty page and say nothing.
    fn say_refused(&self, refused: &[PathBuf]) {
        let mut said = self.refused_said.lock().unwrap_or_else(|e| e.into_inner());
        let new: Vec<PathBuf> = refused
            .iter()
            .filter(|p| !said.contains(p))
            .cloned()
            .collect();
        if let Some(line) = control_socket::refused_line(&new) {
            tracing::warn!("{line}");
            if said.len() + new.len() <= REGISTERED_MAX {
                said.extend(new);
            }
        }
    }

    /// Which service processes `flow` now, and where: the first service
    /// that serves it answers (each knows its NIC's RSS and its own moves).
    /// Otherwise why none could, one line.
    pub fn hint(&self, flow: &FlowQuery) -> Response {
        let mut why = Vec::new();
        for path in self.sockets() {
            match control_socket::request(
                &path,
                &Request::Hint { flow: flow.clone() },
                self.timeout,
            ) {
                Ok(r @ Response::Hint(_)) => return r,
                Ok(Response::Error { message }) => why.push(message),
                Ok(other) => why.push(format!("{}: unexpected answer {other:?}", path.display())),
                Err(e) => why.push(e.to_string()),
            }
        }
        Response::Error {
            message: if why.is_empty() {
                format!(
                    "no flowlane service is running (no live control socket in {})",
                    self.run_dir.display()
                )
            } else {
                why.join("; ")
            },
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
            nics: self.nics(),
            ..Scrape::default()
        };
        scrape.nic_queues = self.nic_queues(&scrape.nics);
        for path in self.sockets() {
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

    #[test]
    fn a_registration_must_name_an_absolute_socket() {
        // An empty run directory: only the registration can make it known.
        let run = std::env::temp_dir().join(format!("fl-reg-run-{}", std::process::id()));
        std::fs::create_dir_all(&run).unwrap();
        let s = Services::new(run.clone(), Duration::from_millis(100));
        assert!(s
            .register(std::path::Path::new("rel.sock"))
            .unwrap_err()
            .contains("absolute"));
        let file = std::env::temp_dir().join(format!("fl-reg-{}.txt", std::process::id()));
        std::fs::write(&file, "x").unwrap();
        assert!(s.register(&file).unwrap_err().contains("not a Unix socket"));
        let sock = std::env::temp_dir().join(format!("fl-reg-{}.control", std::process::id()));
        let _ = std::fs::remove_file(&sock);
        let listener = UnixListener::bind(&sock).unwrap();
        assert!(s.sockets().is_empty(), "not in the run directory");
        s.register(&sock).unwrap();
        s.register(&sock).unwrap();
        assert_eq!(
            s.sockets().iter().filter(|p| **p == sock).count(),
            1,
            "once"
        );
        drop(listener);
        std::fs::remove_file(&sock).unwrap();
        assert!(
            !s.sockets().contains(&sock),
            "forgotten once nothing answers"
        );
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_dir_all(&run).unwrap();
    }
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
