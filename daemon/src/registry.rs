//! The running flowlane services, found through their control sockets: in
//! the run directory (`/run/flowlane/SERVICE.PID.sock`, the model of DPDK's
//! telemetry socket), and wherever a service that registered keeps its own
//! (`Request::Register` on the daemon's socket). A service that exits takes
//! its socket with it; one killed leaves the file, and a registered socket
//! nothing listens on is forgotten. Each scrape asks every socket there for
//! the service's counters, all at once under the scrape timeout
//! ([`crate::ask`]): one nothing listens on is no service, one that does not
//! answer is left out and counted. Scrapes and hints connect to each
//! service once, to ask: no connect probes it first (a service takes every
//! client, but a probe is a client all the same).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowlane_dataplane::control_socket::{
    self, FlowQuery, NicQueueStats, NicReport, Request, Response,
};

use crate::ask::{ask_all, Asked, NoAnswer};
use crate::metrics::Scrape;

/// Where services are found, and how long they may take to answer (all
/// asked at once).
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

/// Forgets the registered sockets nothing listens on any more, asked
/// without waiting ([`control_socket::answers_connect`]: a full backlog is
/// a service still there).
fn forget_gone(registered: &mut Vec<PathBuf>) {
    registered.retain(|p| control_socket::answers_connect(p).is_ok());
}

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
    /// path to a Unix socket that answers. Returns whether it is new (a
    /// service announces itself again every 5 s).
    ///
    /// # Errors
    /// One line saying why the path is not taken.
    pub fn register(&self, socket: &std::path::Path) -> Result<bool, String> {
        use std::os::unix::fs::FileTypeExt;
        if !socket.is_absolute() {
            return Err(format!("{} is not an absolute path", socket.display()));
        }
        match std::fs::metadata(socket) {
            Ok(m) if m.file_type().is_socket() => {}
            _ => return Err(format!("{} is not a Unix socket", socket.display())),
        }
        let mut r = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        if r.iter().any(|p| p == socket) {
            return Ok(false);
        }
        if r.len() >= REGISTERED_MAX {
            // Full: those whose services are gone make room (otherwise
            // only a scrape would forget them).
            forget_gone(&mut r);
        }
        if r.len() >= REGISTERED_MAX {
            return Err(format!(
                "the daemon keeps at most {REGISTERED_MAX} registrations"
            ));
        }
        r.push(socket.to_path_buf());
        Ok(true)
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
    /// report), each once: a second report of one interface (owned twice)
    /// is left out, as it would make every series of the NIC twice.
    pub fn set_nics(&self, nics: Vec<NicReport>) {
        let mut seen = std::collections::HashSet::new();
        let nics = nics
            .into_iter()
            .filter(|n| seen.insert(n.caps.iface.clone()))
            .collect();
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
    /// registered (a registered one nothing listens on any more is
    /// forgotten), each socket once whatever the paths it was found by (a
    /// symlinked directory, two registrations): by device and inode, the
    /// first path kept. Never waits for a service (see
    /// [`control_socket::answers_connect`]), but connects to each to tell
    /// whether it lives: scrapes and hints ask [`Services::candidates`]
    /// instead.
    pub fn sockets(&self) -> Vec<PathBuf> {
        let scan = control_socket::scan_sockets(&self.run_dir);
        self.say_refused(&scan.refused);
        let mut found = scan.live;
        {
            let mut r = self.registered.lock().unwrap_or_else(|e| e.into_inner());
            forget_gone(&mut r);
            found.extend(r.iter().cloned());
        }
        self.once_each(found)
    }

    /// The sockets a scrape or hint asks, without connecting to any: the
    /// run directory's Unix sockets named `*.sock` and those registered,
    /// each once ([`Services::sockets`]); whether a service listens there
    /// is what asking it tells (`Services::heard`).
    pub fn candidates(&self) -> Vec<PathBuf> {
        use std::os::unix::fs::FileTypeExt;
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.run_dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        {
            let mut r = self.registered.lock().unwrap_or_else(|e| e.into_inner());
            // A registration whose file is gone is forgotten here; one whose
            // file stays with nothing listening, once asked.
            r.retain(|p| p.exists());
            found.extend(r.iter().cloned());
        }
        self.once_each(found)
    }

    /// What asking `sockets` told of them: registrations nothing listens
    /// on any more are forgotten, and sockets that refused the daemon said
    /// once.
    fn heard(&self, sockets: &[PathBuf], answers: &[Asked]) {
        let gone: Vec<&PathBuf> = sockets
            .iter()
            .zip(answers)
            .filter(|(_, a)| matches!(a, Err(NoAnswer::Gone(_))))
            .map(|(p, _)| p)
            .collect();
        if !gone.is_empty() {
            self.registered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|p| !gone.contains(&p));
        }
        let refused: Vec<PathBuf> = sockets
            .iter()
            .zip(answers)
            .filter(|(p, a)| p.starts_with(&self.run_dir) && matches!(a, Err(NoAnswer::Refused(_))))
            .map(|(p, _)| p.clone())
            .collect();
        self.say_refused(&refused);
    }

    /// `found`, each socket once (by device and inode, the first path
    /// kept), without the daemon's own or any that is gone.
    fn once_each(&self, mut found: Vec<PathBuf>) -> Vec<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let own = self
            .own
            .as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| (m.dev(), m.ino()));
        let mut seen = Vec::with_capacity(found.len());
        found.retain(|p| {
            let Ok(m) = std::fs::metadata(p) else {
                return false;
            };
            let id = (m.dev(), m.ino());
            if Some(id) == own || seen.contains(&id) {
                return false;
            }
            seen.push(id);
            true
        });
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
    /// (in the order of [`Services::sockets`]) that serves it answers (each
    /// knows its NIC's RSS and its own moves); all are asked at once.
    /// Otherwise why none could, one line.
    pub fn hint(&self, flow: &FlowQuery) -> Response {
        let mut why = Vec::new();
        let sockets = self.candidates();
        let request = Request::Hint { flow: flow.clone() };
        let answers = ask_all(&sockets, &request, self.timeout);
        self.heard(&sockets, &answers);
        for (path, answer) in sockets.iter().zip(answers) {
            match answer.map(|a| (a.response, a.pid)) {
                // The pid as the daemon sees it (SO_PEERCRED), as on the
                // metrics page: a service in a PID namespace of its own
                // calls itself by that namespace's.
                Ok((Response::Hint(mut a), pid)) => {
                    a.pid = pid.unwrap_or(a.pid);
                    return Response::Hint(a);
                }
                // Another daemon's socket: no service.
                Ok((r, _)) if crate::is_daemon_answer(&r) => {}
                Ok((Response::Error { message }, _)) => why.push(message),
                Ok((other, _)) => {
                    why.push(format!("{}: unexpected answer {other:?}", path.display()))
                }
                // No service there, or one this daemon may not ask (said).
                Err(NoAnswer::Gone(_) | NoAnswer::Refused(_)) => {}
                Err(NoAnswer::Failed(e)) => why.push(e),
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

    /// Asks every live service for its counters, all at once, within the
    /// timeout. A service that does not answer in time, or answers with
    /// anything else, is left out of this scrape and counted; a daemon's
    /// socket (one in a bed's namespace, given this run directory) is no
    /// service, left out and not counted. Each
    /// service's `pid` is the process that listens on its socket as the
    /// daemon sees it, where it can tell (a service in a container calls
    /// itself by its namespace's pid).
    pub fn scrape(&self) -> Scrape {
        let mut scrape = Scrape {
            now_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            nics: self.nics(),
            ..Scrape::default()
        };
        scrape.nic_queues = self.nic_queues(&scrape.nics);
        let sockets = self.candidates();
        let answers = ask_all(&sockets, &Request::Counters, self.timeout);
        self.heard(&sockets, &answers);
        for (path, answer) in sockets.iter().zip(answers) {
            match answer {
                Ok(crate::ask::Answer {
                    response: Response::Counters(mut c),
                    pid,
                }) => {
                    // A process the daemon cannot tell: where it was found
                    // tells it from others that call themselves the same.
                    c.socket = pid.is_none().then(|| path.clone());
                    c.pid = pid.unwrap_or(c.pid);
                    scrape.services.push(*c);
                }
                // No service there, or one this daemon may not ask (said),
                // or another daemon.
                Err(NoAnswer::Gone(_) | NoAnswer::Refused(_)) => {}
                Ok(a) if crate::is_daemon_answer(&a.response) => {}
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
pub(crate) mod tests {
    use super::*;

    /// A listener at `dir/NAME.sock` whose backlog is full (listen(2)'s
    /// backlog 0, filled): what a stopped service that stopped accepting
    /// looks like; a blocking connect to it waits forever. Keep the
    /// listener and the connections held.
    pub(crate) fn full_backlog(
        dir: &std::path::Path,
        name: &str,
    ) -> (PathBuf, std::os::fd::OwnedFd, Vec<UnixStream>) {
        use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog};
        use nix::sys::socket::{SockFlag, SockType, UnixAddr};
        use std::os::fd::AsRawFd;
        let path = dir.join(format!("{name}.sock"));
        let _ = std::fs::remove_file(&path);
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(fd.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        listen(&fd, Backlog::new(0).unwrap()).unwrap();
        let mut held = Vec::new();
        loop {
            match control_socket::connect_within(&path, Duration::ZERO) {
                Ok(s) => held.push(s),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
            assert!(held.len() < 64, "the backlog does not fill");
        }
        (path, fd, held)
    }

    /// A run directory of its own for a test.
    fn run_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fl-reg-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A service that never answers (it takes connections and reads
    /// nothing) and one stopped with its backlog full: the scrape ends
    /// within about its timeout, both left out and counted; a registered
    /// socket whose backlog is full is not forgotten.
    #[test]
    fn a_scrape_of_services_that_never_answer_ends_within_its_timeout() {
        let dir = run_dir("stuck");
        let _silent = UnixListener::bind(dir.join("silent.1.sock")).unwrap();
        let (_full, _l, _held) = full_backlog(&dir, "stopped.2");
        let elsewhere = run_dir("stuck-elsewhere");
        let (registered, _l2, _held2) = full_backlog(&elsewhere, "registered.3");
        let services = std::sync::Arc::new(Services::new(dir.clone(), Duration::from_millis(200)));
        assert_eq!(services.register(&registered), Ok(true));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = services.clone();
        std::thread::spawn(move || {
            let _ = tx.send(s.scrape());
        });
        let scrape = rx
            .recv_timeout(Duration::from_secs(2))
            .expect("the scrape ends within its timeout");
        assert!(scrape.services.is_empty());
        assert_eq!(scrape.unanswered, 3);
        assert!(services.sockets().contains(&registered), "busy, not gone");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }

    /// More services that never answer (frozen: the kernel still queues
    /// their connections) than could ever be asked one per thread, listed
    /// before a healthy one: the healthy one is on the page, and the scrape
    /// still ends within about its timeout.
    #[test]
    fn services_that_never_answer_do_not_hide_a_healthy_one() {
        let dir = run_dir("many-stuck");
        let _stuck: Vec<UnixListener> = (0..80)
            .map(|i| UnixListener::bind(dir.join(format!("a-stuck.{i}.sock"))).unwrap())
            .collect();
        let _healthy = fake_service_for(&dir, "z-healthy", COUNTERS, usize::MAX);
        let timeout = Duration::from_millis(300);
        let services = Services::new(dir.clone(), timeout);
        let began = std::time::Instant::now();
        let s = services.scrape();
        assert!(began.elapsed() < timeout * 3, "{:?}", began.elapsed());
        assert_eq!(s.services.len(), 1, "the healthy one answered");
        assert_eq!(s.services[0].service, "bulk-sink");
        assert_eq!(s.unanswered, 80);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Registrations of services that are gone (nothing listens on their
    /// sockets any more) do not fill the registry while nobody scrapes: a
    /// new one is taken.
    #[test]
    fn registrations_of_services_gone_make_room_for_new_ones() {
        let dir = run_dir("full-registry");
        let run = run_dir("full-registry-run");
        let services = Services::new(run.clone(), Duration::from_millis(100));
        for i in 0..REGISTERED_MAX {
            let p = dir.join(format!("gone.{i}.sock"));
            drop(UnixListener::bind(&p).unwrap());
            assert_eq!(services.register(&p), Ok(true));
        }
        let live = dir.join("live.sock");
        let _l = UnixListener::bind(&live).unwrap();
        assert_eq!(services.register(&live), Ok(true));
        assert_eq!(services.sockets(), vec![live]);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&run).unwrap();
    }

    /// One socket found by two paths (a symlinked run directory and a
    /// registration) is asked once.
    #[test]
    fn one_socket_by_two_paths_is_one_service() {
        let dir = run_dir("twopaths");
        let link = dir.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let t = fake_service_for(&dir, "bulk-sink", COUNTERS, usize::MAX);
        let services = Services::new(link.clone(), Duration::from_millis(500));
        let real = dir.join(format!("bulk-sink.{}.sock", std::process::id()));
        assert_eq!(services.register(&real), Ok(true));
        assert_eq!(services.register(&real), Ok(false), "not new");
        assert_eq!(services.sockets().len(), 1, "{:?}", services.sockets());
        let s = services.scrape();
        assert_eq!((s.services.len(), s.unanswered), (1, 0));
        assert_eq!(
            s.services[0].pid,
            std::process::id(),
            "the pid of the process listening, not the one it says (7)"
        );
        drop(t);
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two sockets of one process answering the same counters: one
    /// service on the page, no series twice.
    #[test]
    fn two_sockets_with_the_same_counters_make_no_duplicate_series() {
        let dir = run_dir("twins");
        let _a = fake_service_for(&dir, "bulk-sink-a", COUNTERS, usize::MAX);
        let _b = fake_service_for(&dir, "bulk-sink-b", COUNTERS, usize::MAX);
        let services = Services::new(dir.clone(), Duration::from_millis(500));
        let s = services.scrape();
        assert_eq!(s.unanswered, 0);
        let page = crate::render(&s, crate::Format::Text);
        let mut seen = std::collections::HashSet::new();
        for l in page.lines().filter(|l| !l.starts_with('#')) {
            let series = l.rsplit_once(' ').unwrap().0;
            assert!(
                seen.insert(series.to_string()),
                "duplicate {series}\n{page}"
            );
        }
        assert!(page.contains("flowlane_daemon_services 1\n"), "{page}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What a killed service leaves (its socket's file, nothing listening)
    /// is no service: not asked twice (no probe first), not counted as one
    /// that did not answer; a registration of such a socket is forgotten
    /// once asked, and one whose file is gone at once.
    #[test]
    fn a_socket_nothing_listens_on_is_no_service() {
        let dir = run_dir("leftover");
        drop(UnixListener::bind(dir.join("killed.9.sock")).unwrap());
        let elsewhere = run_dir("leftover-elsewhere");
        let registered = elsewhere.join("registered.sock");
        let removed = elsewhere.join("removed.sock");
        let listeners = [&registered, &removed].map(|p| UnixListener::bind(p).unwrap());
        let services = Services::new(dir.clone(), Duration::from_millis(300));
        assert_eq!(services.register(&registered), Ok(true));
        assert_eq!(services.register(&removed), Ok(true));
        drop(listeners);
        std::fs::remove_file(&removed).unwrap();
        let s = services.scrape();
        assert_eq!((s.services.len(), s.unanswered), (0, 0));
        assert_eq!(
            services.candidates(),
            vec![dir.join("killed.9.sock")],
            "the registrations forgotten"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }

    /// A scrape and a hint connect to a service once each, to ask: no
    /// connect probes it first (a probe is one more client for the service
    /// to take, among the daemon's hints at their bound).
    #[test]
    fn a_service_is_connected_to_once_per_question() {
        let dir = run_dir("once");
        let listener = UnixListener::bind(dir.join("svc.3.sock")).unwrap();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 512];
                if matches!(s.read(&mut buf), Ok(n) if n > 0) {
                    let _ = s.write_all(COUNTERS.as_bytes());
                }
            }
        });
        let services = Services::new(dir.clone(), Duration::from_millis(500));
        assert_eq!(services.scrape().services.len(), 1);
        let flow = FlowQuery {
            src: [10, 0, 0, 1].into(),
            sport: 1,
            dst: [10, 0, 0, 2].into(),
            dport: 2,
            proto: "tcp".into(),
        };
        assert!(matches!(services.hint(&flow), Response::Error { .. }));
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A NIC reported twice (owned by two of its names) makes its series
    /// once: the page stays valid.
    #[test]
    fn a_nic_reported_twice_makes_its_series_once() {
        let dir = run_dir("twice");
        let services = Services::new(dir.clone(), Duration::from_millis(100));
        let nic = NicReport {
            caps: flowlane_numa_sched::NicCaps {
                iface: "rvd0".into(),
                ..Default::default()
            },
            workers: 1,
            plan: Vec::new(),
            dry_run: false,
            changes: Vec::new(),
            changes_total: 0,
            notes: Vec::new(),
            restore_on_exit: true,
        };
        services.set_nics(vec![nic.clone(), nic]);
        assert_eq!(services.nics().len(), 1);
        let page = crate::render(&services.scrape(), crate::Format::Text);
        let series: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("flowlane_nic_rx_queues{"))
            .collect();
        assert_eq!(series, [r#"flowlane_nic_rx_queues{iface="rvd0"} 0"#]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A service's counters (one queue, pid 7 as a container would say).
    const COUNTERS: &str = concat!(
        r#"{"result":"counters","service":"bulk-sink","pid":7,"uptime_ns":1,"iface":"fl0","#,
        r#""rebalance":"off","queues":[],"moves":{"done":0,"failed":0,"recent":[]}}"#,
        "\n"
    );

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
        assert_eq!(s.register(&sock), Ok(true));
        assert_eq!(s.register(&sock), Ok(false), "an announcement again");
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
    use std::os::unix::net::{UnixListener, UnixStream};

    /// A socket that answers one request with `answer`, as a service would
    /// (one connection: the scrape probes no socket before it asks).
    fn fake_service(
        dir: &std::path::Path,
        name: &str,
        answer: &'static str,
    ) -> std::thread::JoinHandle<()> {
        fake_service_for(dir, name, answer, 1)
    }

    /// The same, for `connections` connections.
    fn fake_service_for(
        dir: &std::path::Path,
        name: &str,
        answer: &'static str,
        connections: usize,
    ) -> std::thread::JoinHandle<()> {
        let path = dir.join(format!("{name}.{}.sock", std::process::id()));
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            // Answer every connection that sends a request line (a probe
            // would send none).
            for stream in listener.incoming().take(connections) {
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

    /// A daemon's socket in the run directory (a daemon in a bed's
    /// namespace given the host's run directory) is no service: a scrape
    /// leaves it out without counting it unanswered, scrape after scrape.
    #[test]
    fn a_daemon_s_socket_in_the_run_directory_is_no_service() {
        use std::sync::atomic::AtomicBool;
        let run = run_dir("daemon-there");
        let own = run_dir("daemon-there-own");
        let cfg = crate::DaemonConfig {
            metrics: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            run_dir: own.clone(),
            socket: Some(run.join("daemon-ns.sock")),
            ..crate::DaemonConfig::default()
        };
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (st, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
        let other = std::thread::spawn(move || {
            let mut d = crate::Daemon::start(&cfg).unwrap();
            tx.send(()).unwrap();
            while !st.load(Ordering::Relaxed) {
                d.poll();
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        rx.recv().unwrap();
        let services = Services::new(run.clone(), Duration::from_millis(500));
        for _ in 0..2 {
            let s = services.scrape();
            assert!(s.services.is_empty());
            assert_eq!((s.unanswered, s.unanswered_total), (0, 0));
        }
        stop.store(true, Ordering::Relaxed);
        other.join().unwrap();
        std::fs::remove_dir_all(&run).unwrap();
        std::fs::remove_dir_all(&own).unwrap();
    }

    /// A hint names the service by the pid the daemon sees it by
    /// (SO_PEERCRED), as the metrics do, not the one it calls itself (its
    /// own PID namespace's: 1 here).
    #[test]
    fn a_hint_names_the_service_by_the_pid_the_daemon_sees() {
        let dir = run_dir("hint-pid");
        let t = fake_service(
            &dir,
            "echo-server",
            concat!(
                r#"{"result":"hint","service":"echo-server","pid":1,"backend":"kernel","#,
                r#""iface":"xsk0","hash":null,"bucket":null,"queue":0,"cpu":null,"node":0}"#,
                "\n"
            ),
        );
        let services = Services::new(dir.clone(), Duration::from_millis(500));
        let flow = FlowQuery {
            src: [10, 0, 0, 1].into(),
            sport: 1,
            dst: [10, 0, 0, 2].into(),
            dport: 2,
            proto: "tcp".into(),
        };
        match services.hint(&flow) {
            Response::Hint(a) => assert_eq!(a.pid, std::process::id()),
            other => panic!("{other:?}"),
        }
        t.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
