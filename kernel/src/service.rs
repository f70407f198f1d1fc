//! A service on kernel sockets: one pinned thread per core, each running
//! a [`KernelCore`] set up by the service.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flowlane_app::{IntoSetupResult, Placement, Setup, StartError, Stats, StopError, Worker};

use crate::core::{KernelCore, Limits};
use crate::listener::{pin_to, Claims};

/// How often a core publishes its counters.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// What to start: [`KernelConfig::new`] for the usual service (its
/// fields are public, to change any of them).
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// One core per entry: its index, CPU (pinned when given) and node;
    /// at least one.
    pub cores: Vec<Placement>,
    /// Addresses each listener binds (one listener per address and port).
    /// Empty for a service that only opens connections: a listen is then
    /// refused (at [`KernelService::start`]).
    pub listen_on: Vec<IpAddr>,
    /// Buffer sizes and the connection bound, per core.
    pub limits: Limits,
}

impl KernelConfig {
    /// `cores` cores (0 to `cores - 1`), not pinned
    /// ([`Placement::unpinned_cores`]), listening on every address of
    /// both families ([`KernelConfig::any_address`]), with the default
    /// [`Limits`]. Pin them by giving `cores` placements of your own (a
    /// CPU each): `KernelConfig { cores, ..KernelConfig::default() }`.
    pub fn new(cores: u32) -> KernelConfig {
        KernelConfig {
            cores: Placement::unpinned_cores(cores),
            listen_on: KernelConfig::any_address(),
            limits: Limits::default(),
        }
    }

    /// Every address: IPv4's `0.0.0.0`, and IPv6's `::` where the host
    /// has IPv6 (a socket can be bound to it; a listener on `::` takes
    /// IPv6 only, its IPv4 twin the rest).
    pub fn any_address() -> Vec<IpAddr> {
        let any6 = IpAddr::from([0u16; 8]);
        let mut v = vec![IpAddr::from([0u8; 4])];
        if std::net::TcpListener::bind((any6, 0)).is_ok() {
            v.push(any6);
        }
        v
    }
}

impl Default for KernelConfig {
    /// One core: [`KernelConfig::new`]`(1)`.
    fn default() -> KernelConfig {
        KernelConfig::new(1)
    }
}

/// A core's counters as last published.
#[derive(Debug, Clone, Copy, Default)]
pub struct CoreCounters {
    /// The TCP counters a socket backend knows (opens, closes, bytes,
    /// resets, refusals); the others stay zero.
    pub stats: Stats,
    /// Connections open.
    pub connections: usize,
    /// Connections a handler's `admit` refused.
    pub application_refused: u64,
    /// Connections the stop's drain waits for, their handler finishing
    /// them ([`KernelCore::finishing`]); in the counters
    /// [`KernelService::stop`] returns, every connection the drain still
    /// waited for when it ended (those, and closes under way with bytes
    /// still here), reset then: 0 when it finished in time.
    pub finishing: usize,
    /// Bytes of buffer memory its connections hold now.
    pub buffer_memory: usize,
    /// Bytes of buffer memory given back to the allocator so far
    /// ([`KernelCore::buffer_memory_returned`]).
    pub buffer_memory_returned: u64,
    /// The most bytes of receive buffers held at once (bounded by
    /// [`crate::Limits::rx_memory`]).
    pub rx_memory_peak: usize,
    /// Times a connection's read waited for receive memory.
    pub rx_memory_waits: u64,
    /// The most bytes of send buffers held at once (bounded by
    /// [`crate::Limits::tx_memory`]).
    pub tx_memory_peak: usize,
    /// Writes left in part to the application for want of send memory.
    pub tx_memory_waits: u64,
    /// Accepts that failed (out of descriptors or memory) and were tried
    /// again each pass.
    pub accept_failed: u64,
    /// Accepts that failed for the one connection they would have
    /// returned (accept(2)'s network errors to retry at once, a connection
    /// aborted before it was taken); the next was taken at once.
    pub accept_aborted: u64,
}

/// A question to a core: does it hold the connection between `local` and
/// `remote`? It answers with its queue and the answer after its next pass
/// (within the loop's 10 ms tick).
#[derive(Debug)]
struct Question {
    local: SocketAddr,
    remote: SocketAddr,
    reply: Sender<(u32, bool)>,
}

/// The running cores.
#[derive(Debug)]
pub struct KernelService {
    stop: Arc<AtomicBool>,
    threads: Vec<(u32, JoinHandle<Result<(), StopError>>)>,
    counters: Vec<(u32, Arc<Mutex<CoreCounters>>)>,
    cores: Vec<Placement>,
    questions: Vec<Sender<Question>>,
}

impl KernelService {
    /// Raises the process's soft limit on open descriptors to its hard limit,
    /// as servers do (nginx's `worker_rlimit_nofile`, systemd's
    /// `LimitNOFILE`): every connection is a descriptor, and the usual soft
    /// limit (1024) is far below [`Limits::max_connections`]. Where even the
    /// hard limit runs out, accepts fail, are counted (`accept_failed`) and are
    /// tried again until descriptors free up. Other servers on kernel
    /// sockets (hyper-server's tokio baseline) call it too.
    pub fn raise_descriptor_limit() {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                tracing::debug!(from = soft, to = hard, "raised the open-descriptor limit");
            }
        }
    }

    /// Starts one thread per core. `setup` runs on each core's thread
    /// before its loop (register listeners and handlers there); an error
    /// from any core stops them all and is returned, as is a set-up that
    /// panicked and a thread that cannot be pinned. The cores share their
    /// ports and nobody else's: a port another socket holds, even one
    /// bound with `SO_REUSEPORT`, is refused.
    ///
    /// # Errors
    /// A [`StartError`], by its kind ([`flowlane_app::StartErrorKind`]):
    /// - `Os`: a listen the kernel refused (a port in use:
    ///   [`StartError::io_error`] is its `AddrInUse`; a privileged port:
    ///   `PermissionDenied`), in one line naming the port, the address and
    ///   what to do ([`KernelCore::listen_failure`]); a thread that could
    ///   not be started or pinned;
    /// - `Setup`: `setup` returned an error on a core (its source);
    /// - `Config`: no cores, or a listen with no address to bind
    ///   ([`KernelConfig::listen_on`] empty);
    /// - `Worker`: a set-up that panicked, a core's thread that ended.
    ///
    /// `setup` is the same on every backend: it returns nothing, what it
    /// registered, or a `Result` whose error converts to a
    /// [`flowlane_app::SetupError`] ([`IntoSetupResult`]). An echo server
    /// on two cores of loopback:
    ///
    /// ```
    /// use std::io::{BufRead, BufReader, Write};
    /// use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt};
    /// use flowlane_kernel::{KernelConfig, KernelService};
    ///
    /// /// Echoes every byte back, closing once the peer has closed.
    /// struct Echo;
    /// impl ConnHandler for Echo {
    ///     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
    ///         net.echo(conn, &mut Vec::new());
    ///     }
    ///     fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
    ///         net.echo(conn, &mut Vec::new());
    ///     }
    /// }
    ///
    /// let port = 47_401;
    /// let config = KernelConfig {
    ///     listen_on: vec![[127, 0, 0, 1].into()],
    ///     ..KernelConfig::new(2)
    /// };
    /// let service = KernelService::start(config, move |s| s.listen(port, Echo))?;
    /// let mut peer = std::net::TcpStream::connect(("127.0.0.1", port))?;
    /// peer.write_all(b"hello\n")?;
    /// let mut line = String::new();
    /// BufReader::new(&peer).read_line(&mut line)?;
    /// assert_eq!(line, "hello\n");
    /// let (_counters, stopped) = service.stop();
    /// stopped?; // a core that panicked or failed while it ran
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start<S, R>(config: KernelConfig, setup: S) -> Result<KernelService, StartError>
    where
        S: Fn(&mut dyn Setup) -> R + Send + Sync + 'static,
        R: IntoSetupResult,
    {
        if config.cores.is_empty() {
            return Err(StartError::config(
                "the kernel-socket backend needs at least one core: KernelConfig::cores is empty",
            ));
        }
        KernelService::raise_descriptor_limit();
        let setup = Arc::new(setup);
        let stop = Arc::new(AtomicBool::new(false));
        let mut service = KernelService {
            stop: stop.clone(),
            threads: Vec::new(),
            counters: Vec::new(),
            cores: config.cores.clone(),
            questions: Vec::new(),
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), StartError>>();
        let claims = Claims::default();
        for p in config.cores.iter().copied() {
            let counters = Arc::new(Mutex::new(CoreCounters::default()));
            service.counters.push((p.queue, counters.clone()));
            let (ask, questions) = channel::<Question>();
            service.questions.push(ask);
            let (setup, stop, ready) = (setup.clone(), stop.clone(), ready_tx.clone());
            let (listen_on, limits) = (config.listen_on.clone(), config.limits.clone());
            let claims = claims.clone();
            let t = std::thread::Builder::new()
                // The data path's thread name, as the AF_XDP workers'
                // (`flowlane_dataplane::cpu_time::worker_thread_name`): tools
                // find a service's cores by it (CPU time, a test bed's users).
                .name(format!("flowlane-q{}", p.queue))
                .spawn(move || {
                    let start = || -> Result<KernelCore, StartError> {
                        let q = p.queue;
                        if let Some(cpu) = p.cpu {
                            pin_to(cpu).map_err(|e| {
                                StartError::os(
                                    format!(
                                        "queue {q}: cannot pin to CPU {cpu} (is the CPU in this \
                                         process's affinity, cgroup and online?)"
                                    ),
                                    e,
                                )
                            })?;
                        }
                        let mut core =
                            KernelCore::sharing(p, listen_on, limits, claims).map_err(|e| {
                                StartError::os(
                                    format!("queue {q}: cannot create its epoll instance"),
                                    e,
                                )
                            })?;
                        // A listen that failed says its port and what
                        // holds it, rather than the set-up's "address in
                        // use", and keeps the OS's error.
                        if let Err(e) = setup(&mut core).into_setup_result() {
                            return Err(core.take_listen_failure().unwrap_or_else(|| {
                                StartError::setup(format!("queue {q}: the set-up failed"), e)
                            }));
                        }
                        Ok(core)
                    };
                    // A set-up that panics is this core's set-up error;
                    // its core, half set up, is dropped.
                    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(start))
                        .unwrap_or_else(|panic| {
                            Err(StartError::worker(format!(
                                "queue {}: the set-up panicked: {}",
                                p.queue,
                                StopError::panic_words(panic.as_ref())
                            )))
                        });
                    // Told, then gone: once every core's sender is, a
                    // thread that ended without telling is seen
                    // (`start`'s `Err(_)` arm), not waited for.
                    let mut core = match started {
                        Ok(core) => {
                            let _ = ready.send(Ok(()));
                            core
                        }
                        Err(e) => {
                            // The start says it: no failure for the stop.
                            let _ = ready.send(Err(e));
                            return Ok(());
                        }
                    };
                    drop(ready);
                    let mut last = Instant::now();
                    let publish = |core: &KernelCore, force: bool, last: &mut Instant| {
                        if force || last.elapsed() >= PUBLISH_EVERY {
                            *last = Instant::now();
                            let (rx_memory_peak, rx_memory_waits) = core.receive_memory();
                            let (tx_memory_peak, tx_memory_waits) = core.send_memory();
                            *counters.lock().unwrap_or_else(|e| e.into_inner()) = CoreCounters {
                                stats: *core.stats(),
                                connections: core.open_connections(),
                                application_refused: core.application_refused(),
                                finishing: core.finishing(),
                                buffer_memory: core.buffer_memory(),
                                buffer_memory_returned: core.buffer_memory_returned(),
                                rx_memory_peak,
                                rx_memory_waits,
                                tx_memory_peak,
                                tx_memory_waits,
                                accept_failed: core.accept_failed(),
                                accept_aborted: core.accept_aborted(),
                            };
                        }
                    };
                    let r = core
                        .run(&stop, |c| {
                            answer(c, &questions);
                            publish(c, false, &mut last)
                        })
                        .map_err(|e| {
                            let q = p.queue;
                            StopError::failed(
                                Worker::Core(q),
                                format!("queue {q}: polling failed"),
                                e,
                            )
                        });
                    publish(&core, true, &mut last);
                    r
                })
                .map_err(|e| {
                    StartError::os(format!("queue {}: cannot start its thread", p.queue), e)
                })?;
            service.threads.push((p.queue, t));
        }
        drop(ready_tx);
        for _ in 0..config.cores.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    let _ = service.stop();
                    return Err(e);
                }
                Err(_) => {
                    let _ = service.stop();
                    return Err(StartError::worker("a core's thread ended during set-up"));
                }
            }
        }
        Ok(service)
    }

    /// Where each core runs (queue index, CPU, node).
    pub fn cores(&self) -> &[Placement] {
        &self.cores
    }

    /// The core that holds the connection between `local` (ours) and
    /// `remote` now, asking every core and waiting at most `timeout` for
    /// their answers; None when none holds it (the kernel chooses a core
    /// for a new connection at its SYN, among the cores' `SO_REUSEPORT`
    /// listeners, by a hash flowlane cannot compute).
    pub fn locate(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        timeout: Duration,
    ) -> Option<Placement> {
        let (reply, answers) = channel();
        let mut asked = 0;
        for q in &self.questions {
            let question = Question {
                local,
                remote,
                reply: reply.clone(),
            };
            asked += usize::from(q.send(question).is_ok());
        }
        let deadline = Instant::now() + timeout;
        for _ in 0..asked {
            let left = deadline.saturating_duration_since(Instant::now());
            match answers.recv_timeout(left) {
                Ok((queue, true)) => return self.cores.iter().find(|p| p.queue == queue).copied(),
                Ok((_, false)) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// Each core's counters as last published (every 100 ms).
    pub fn counters(&self) -> Vec<(u32, CoreCounters)> {
        self.counters
            .iter()
            .map(|(q, c)| (*q, *c.lock().unwrap_or_else(|e| e.into_inner())))
            .collect()
    }

    /// Whether a core's thread ended (it failed: see [`KernelService::stop`]).
    pub fn failed(&self) -> bool {
        self.threads.iter().any(|(_, t)| t.is_finished())
    }

    /// Begins the stop without waiting for it: each core closes its
    /// listeners, asks its handlers and drains ([`KernelService::stop`]),
    /// while the service can still be read (its counters, a control
    /// socket's answers); [`KernelService::stopped`] says when every core
    /// is done. A core's thread that ends now is no failure.
    pub fn begin_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether every core's thread ended (after [`KernelService::begin_stop`]:
    /// every drain is over; [`KernelService::stop`] then returns at once).
    pub fn stopped(&self) -> bool {
        self.threads.iter().all(|(_, t)| t.is_finished())
    }

    /// Stops every core and returns their final counters, and what went
    /// wrong while they ran: each core whose thread panicked
    /// ([`StopErrorKind::Panicked`](flowlane_app::StopErrorKind::Panicked),
    /// [`Worker::Core`] its queue, the panic's words kept) or whose poll
    /// failed ([`StopErrorKind::Failed`](flowlane_app::StopErrorKind::Failed),
    /// the OS error its source). The counters come either way: a core that
    /// failed published its own up to its end. Each core first lets the
    /// closes under way
    /// finish, [`STOP_LINGER`](crate::STOP_LINGER) at most (the bound the
    /// AF_XDP backend's services give `TcpService::linger`): the bytes its
    /// handlers' closes still hold go out, then their FIN, and a close
    /// still to come for a connection whose peer closed may arrive. Then
    /// the kernel finishes the connections whose FIN the application asked
    /// for and that hold no bytes here; every other one is reset, never
    /// ended with a FIN that would make a stream cut short look complete
    /// to its peer. Handlers hear nothing of this.
    pub fn stop(mut self) -> (Vec<(u32, CoreCounters)>, Result<(), StopError>) {
        self.stop.store(true, Ordering::Relaxed);
        let ended = self.threads.drain(..).map(|(q, t)| {
            t.join().unwrap_or_else(|panic| {
                let words = StopError::panic_words(panic.as_ref());
                Err(StopError::panicked(Worker::Core(q), words))
            })
        });
        let failures: Vec<StopError> = ended.filter_map(Result::err).collect();
        (self.counters(), StopError::collect(failures))
    }
}

/// Answers the questions waiting for `core`.
fn answer(core: &KernelCore, questions: &Receiver<Question>) {
    while let Ok(q) = questions.try_recv() {
        let _ = q.reply.send((core.queue(), core.holds(q.local, q.remote)));
    }
}

impl Drop for KernelService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for (_, t) in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_app::{AtStop, ConnHandle, ConnHandler, Net, SetupExt, StartErrorKind};
    use std::sync::atomic::AtomicUsize;

    /// Takes nothing but its connections.
    struct Nop;

    impl ConnHandler for Nop {
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    }

    /// A service that would serve nothing (no core; a listener with no
    /// address to bind) is refused at start, saying what is missing,
    /// instead of starting; one that only opens connections needs no
    /// address to listen on.
    #[test]
    fn a_service_that_would_serve_nothing_is_refused_at_start() {
        let core = Placement {
            queue: 0,
            cpu: None,
            node: 0,
        };
        let config = |cores, listen_on| KernelConfig {
            cores,
            listen_on,
            limits: Limits::default(),
        };
        let listen = |s: &mut dyn Setup| s.listen(7, Nop);
        let loopback = IpAddr::from([127, 0, 0, 1]);
        let e = KernelService::start(config(vec![], vec![loopback]), listen).unwrap_err();
        assert_eq!(e.kind(), StartErrorKind::Config);
        assert!(
            e.to_string().contains("KernelConfig::cores is empty"),
            "{e}"
        );
        let e = KernelService::start(config(vec![core], vec![]), listen).unwrap_err();
        assert_eq!(e.kind(), StartErrorKind::Config);
        let e = e.to_string();
        assert!(
            e.contains("port 7") && e.contains("KernelConfig::listen_on is empty"),
            "{e}"
        );
        let opens_only = KernelService::start(config(vec![core], vec![]), |_| ()).unwrap();
        opens_only.stop().1.unwrap();
    }

    /// The usual service's configuration: its cores unpinned, every
    /// address of the host's families, the default limits.
    #[test]
    fn a_config_s_defaults_are_the_usual_service_s() {
        let c = KernelConfig::new(3);
        assert_eq!(
            c.cores,
            [0, 1, 2].map(|queue| Placement {
                queue,
                cpu: None,
                node: 0
            })
        );
        assert_eq!(c.listen_on[0], IpAddr::from([0, 0, 0, 0]));
        let v6 = std::net::TcpListener::bind("[::]:0").is_ok();
        let any6 = IpAddr::from([0u16; 8]);
        assert_eq!(c.listen_on[1..], if v6 { vec![any6] } else { vec![] });
        let d = Limits::default();
        assert_eq!(
            (
                c.limits.rx_buffer,
                c.limits.tx_buffer,
                c.limits.max_connections
            ),
            (d.rx_buffer, d.tx_buffer, d.max_connections)
        );
        assert_eq!(KernelConfig::default().cores, [Placement::unpinned(0)]);
    }

    /// At the stop, closes each connection [`LATER`] after it began (a
    /// response still to finish), or leaves it to the reset; counts
    /// accepts.
    struct CloseLater {
        finish: bool,
        accepted: Arc<AtomicUsize>,
        stopped: Vec<(ConnHandle, Duration)>,
    }

    /// How long after the stop [`CloseLater`] closes its connections.
    const LATER: Duration = Duration::from_millis(300);

    impl ConnHandler for CloseLater {
        fn on_accept(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {
            self.accepted.fetch_add(1, Ordering::SeqCst);
        }
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
        fn on_stop(&mut self, net: &mut dyn Net, conn: ConnHandle) -> AtStop {
            if !self.finish {
                return AtStop::Reset;
            }
            self.stopped.push((conn, net.now()));
            AtStop::Finish
        }
        fn on_tick(&mut self, net: &mut dyn Net) {
            let now = net.now();
            self.stopped.retain(|&(c, at)| {
                let due = now >= at + LATER;
                if due {
                    let _ = net.close(c);
                }
                !due
            });
        }
    }

    /// Panics at its first connection.
    struct PanicAtAccept;

    impl ConnHandler for PanicAtAccept {
        fn on_accept(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {
            panic!("a handler bug at accept");
        }
        fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    }

    /// A core whose handler panicked while it ran (its thread ended) is
    /// reported by the stop: its kind, its queue and the panic's words,
    /// beside the counters.
    #[test]
    fn stop_reports_a_core_that_panicked_with_its_queue_and_words() {
        let port = 47_313;
        let config = KernelConfig {
            listen_on: vec![IpAddr::from([127, 0, 0, 1])],
            ..KernelConfig::new(1)
        };
        let service = KernelService::start(config, move |s: &mut dyn Setup| {
            s.listen(port, PanicAtAccept)
        })
        .unwrap();
        let _peer = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let start = Instant::now();
        while !service.failed() {
            assert!(start.elapsed().as_secs() < 5, "the core never ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        let (counters, stopped) = service.stop();
        assert_eq!(counters.len(), 1);
        let e = stopped.expect_err("the panic is reported");
        assert_eq!(e.kind(), flowlane_app::StopErrorKind::Panicked, "{e:#}");
        assert_eq!(e.worker(), Some(Worker::Core(0)), "{e:#}");
        assert_eq!(e.panic_message(), Some("a handler bug at accept"));
        assert_eq!(
            format!("{e:#}"),
            "queue 0 panicked: a handler bug at accept"
        );
    }

    /// A stopping service waits for the connections their handler said
    /// it would close (`AtStop::Finish`): their peer reads the end of the
    /// stream (a FIN), not a reset, though the close comes after the
    /// stop began; a connection left to the default is reset.
    #[test]
    fn a_stop_waits_for_the_connections_their_handler_finishes() {
        use std::io::Read;
        for (finish, port) in [(true, 47_311), (false, 47_312)] {
            let accepted = Arc::new(AtomicUsize::new(0));
            let a = accepted.clone();
            let config = KernelConfig {
                listen_on: vec![IpAddr::from([127, 0, 0, 1])],
                ..KernelConfig::new(1)
            };
            let service = KernelService::start(config, move |s: &mut dyn Setup| {
                let h = CloseLater {
                    finish,
                    accepted: a.clone(),
                    stopped: Vec::new(),
                };
                s.listen(port, h)
            })
            .unwrap();
            let mut peer = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let start = Instant::now();
            while accepted.load(Ordering::SeqCst) == 0 {
                assert!(start.elapsed().as_secs() < 5, "never accepted");
                std::thread::sleep(Duration::from_millis(5));
            }
            let stopping = std::thread::spawn(move || service.stop());
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let got = peer.read(&mut [0u8; 8]).map_err(|e| e.kind());
            let (_, stopped) = stopping.join().unwrap();
            stopped.unwrap();
            if finish {
                assert_eq!(got, Ok(0), "the end of the stream, after the stop began");
            } else {
                assert_eq!(got, Err(std::io::ErrorKind::ConnectionReset));
            }
        }
    }
}
