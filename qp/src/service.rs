//! Starting queue-pair mode: the application threads (each running the
//! service's set-up, as a network core would), the queues between them
//! and the cores, and each core's relay for the backend to register.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flowlane_app::{
    Dispatcher, Error, IntoSetupResult, Placement, Setup, SetupError, StartError, StopError,
    SynFilter, Worker,
};

use crate::app_net::{CoreLink, QpNet};
use crate::app_thread::{AppPort, AppThread};
use crate::heartbeat::Heartbeat;
use crate::memory::{CoreMemory, RelayMemory, RX_MEMORY, TX_MEMORY};
use crate::relay::{CoreSlot, Mailboxes, Relay, RelayCounts, Threads, WakeSlot};

/// The most application threads queue-pair mode runs: their names,
/// `flowlane-app0` to `flowlane-app999` ([`app_thread_name`]), stay
/// within the 15 bytes Linux keeps of a thread's name, each its own (what
/// tools that read threads by name, `top -H`, flowlane-ttcp's CPU
/// figures, tell them by). Each core is served by one thread: a service
/// has no use for more threads than cores.
pub const MAX_APP_THREADS: usize = 1000;

/// The name of application thread `thread` (below [`MAX_APP_THREADS`]).
pub fn app_thread_name(thread: u32) -> String {
    format!("flowlane-app{thread}")
}

/// Clears a thread's flag when the thread ends, by returning or by a panic.
/// Held by an application thread: says it ended (the relays' `alive`)
/// and whether it ended in a panic (`QueuePairs::dead_threads`): a thread
/// also ends when its cores are gone (a kernel-socket service's drain
/// ends its cores before `QueuePairs::stop`), which is no death.
struct AliveGuard {
    alive: Arc<AtomicBool>,
    panicked: Arc<AtomicBool>,
}

impl Drop for AliveGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.panicked.store(true, Ordering::Relaxed);
        }
        self.alive.store(false, Ordering::Relaxed);
    }
}

/// How long an application thread may go without progress before it is
/// stalled ([`QueuePairConfig::stall_after`]) in [`QueuePairConfig::new`]:
/// the services' figure.
pub const STALL_AFTER: Duration = Duration::from_secs(10);

/// Pins the calling thread to `cpu` (`sched_setaffinity(2)`): what
/// [`QueuePairConfig::new`] pins application threads with, whatever the
/// backend.
pub fn pin_to(cpu: u32) -> std::io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu as usize)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)?;
    Ok(())
}

/// What to start: [`QueuePairConfig::new`] for the usual service (its
/// fields are public, to change any of them).
#[derive(Debug, Clone)]
pub struct QueuePairConfig {
    /// The network cores (their index is the backend's queue).
    pub cores: Vec<Placement>,
    /// The application threads: each pinned to its `cpu` when given.
    pub app_threads: Vec<Placement>,
    /// Pins the calling thread to a CPU (the backend's way).
    pub pin: fn(u32) -> std::io::Result<()>,
    /// An application thread that has not finished a pass nor begun a
    /// handler's call for this long is stalled (a handler blocked): the
    /// cores reset its connections, counted, and give it new ones again
    /// once it passes again. [`QueuePairs::stop`] waits this long (1 s at
    /// least) for the threads to end, and leaves running those that did
    /// not.
    pub stall_after: Duration,
}

impl QueuePairConfig {
    /// Queue-pair mode over the backend's `cores` (the placements its own
    /// configuration gives them: `KernelConfig::cores`, or where the AF_XDP
    /// workers run): one application thread per core, on the core's node,
    /// not pinned; threads pinned with [`pin_to`] once given a CPU;
    /// stalled after [`STALL_AFTER`].
    pub fn new(cores: &[Placement]) -> QueuePairConfig {
        QueuePairConfig {
            cores: cores.to_vec(),
            app_threads: Vec::new(),
            pin: pin_to,
            stall_after: STALL_AFTER,
        }
        .with_app_threads(cores.len() as u32)
    }

    /// `threads` application threads (0 to `threads - 1`), not pinned,
    /// each on the node of the core of its index (modulo the cores: the
    /// node of the cores it will serve, where the cores of a node are as
    /// many as its threads).
    pub fn with_app_threads(mut self, threads: u32) -> QueuePairConfig {
        self.app_threads = (0..threads)
            .map(|t| Placement {
                node: self
                    .cores
                    .get(t as usize % self.cores.len().max(1))
                    .map_or(0, |c| c.node),
                ..Placement::unpinned(t)
            })
            .collect();
        self
    }
}

/// Why [`QueuePairs::setup_core`] refused a network core; as the
/// backend's error (a [`flowlane_app::Error`]), the error it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreSetupError {
    /// [`QueuePairConfig::cores`] has no entry for the core: the backend
    /// runs more cores (queues) than it lists.
    NoRelay {
        /// The core (its queue).
        queue: u32,
        /// The cores `QueuePairConfig::cores` lists.
        cores: usize,
    },
    /// The core was set up already (`setup_core` called twice for it).
    SetUpAlready {
        /// The core (its queue).
        queue: u32,
    },
    /// The core could not listen on one of the service's ports.
    Listen {
        /// The core (its queue).
        queue: u32,
        /// The port.
        port: u16,
        /// Why, as the backend said.
        error: Error,
    },
}

impl std::fmt::Display for CoreSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            CoreSetupError::NoRelay { queue, cores } => write!(
                f,
                "queue-pair mode has no relay for core {queue}: QueuePairConfig::cores lists \
                 {cores} core{} (queues 0 to {}) and the backend runs more; give it one entry \
                 per backend queue",
                if cores == 1 { "" } else { "s" },
                cores.saturating_sub(1)
            ),
            CoreSetupError::SetUpAlready { queue } => write!(
                f,
                "queue-pair mode's relay for core {queue} was taken already: setup_core was \
                 called twice for it"
            ),
            CoreSetupError::Listen { queue, port, error } => {
                write!(f, "core {queue} cannot listen on port {port}: {error}")
            }
        }
    }
}

impl std::error::Error for CoreSetupError {}

impl From<CoreSetupError> for Error {
    fn from(e: CoreSetupError) -> Error {
        match e {
            CoreSetupError::NoRelay { .. } | CoreSetupError::SetUpAlready { .. } => {
                Error::InvalidState
            }
            CoreSetupError::Listen { error, .. } => error,
        }
    }
}

/// The least [`QueuePairs::stop`] waits for the threads to end (they see
/// the stop within a pass, 10 ms when idle).
const STOP_WAIT_MIN: Duration = Duration::from_secs(1);
/// How often [`QueuePairs::stop`] looks whether a thread ended.
const STOP_POLL: Duration = Duration::from_millis(1);

/// The application thread that serves network core `core`: one on the
/// core's NUMA node where there is one (the cores of a node spread over
/// its threads), else any.
fn owner(cores: &[Placement], threads: &[Placement], core: usize) -> u32 {
    let node = cores[core].node;
    let local: Vec<u32> = (0..threads.len() as u32)
        .filter(|&t| threads[t as usize].node == node)
        .collect();
    if local.is_empty() {
        return (core % threads.len()) as u32;
    }
    let rank = cores[..core].iter().filter(|c| c.node == node).count();
    local[rank % local.len()]
}

/// Queue-pair mode, running: the application threads, and the relays the
/// network cores take at their set-up ([`QueuePairs::setup_core`]).
pub struct QueuePairs {
    stop: Arc<AtomicBool>,
    /// Each application thread's: not ended yet (read by the tests).
    #[cfg_attr(not(test), allow(dead_code))]
    alive: Vec<Arc<AtomicBool>>,
    /// Each application thread's: ended in a panic.
    panicked: Vec<Arc<AtomicBool>>,
    counts: Arc<RelayCounts>,
    refused: Arc<AtomicU64>,
    threads: Mutex<Vec<(u32, JoinHandle<()>)>>,
    /// How long `stop` waits for the threads to end, in all.
    stop_wait: Duration,
    /// Threads that `stop` left running (not ended within `stop_wait`).
    left_running: AtomicU64,
    relays: Mutex<Vec<Option<Relay>>>,
    /// The network cores as configured, and as each published itself
    /// once its loop started.
    cores: Vec<Placement>,
    ups: Vec<CoreSlot>,
    ports: Arc<Vec<u16>>,
    open: Vec<Arc<AtomicU64>>,
    memory: Arc<Vec<CoreMemory>>,
    tids: Vec<Arc<AtomicI32>>,
}

impl std::fmt::Debug for QueuePairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePairs")
            .field("open", &self.connections())
            .field("ports", &self.ports)
            .finish()
    }
}

impl QueuePairs {
    /// Starts the application threads; `setup` registers the service's
    /// handlers on each (its listeners become the cores' ports). Every
    /// thread must register the same ports. Start the network backend
    /// next, calling [`QueuePairs::setup_core`] in its per-core set-up.
    ///
    /// `setup` is the one a service gives every backend
    /// ([`IntoSetupResult`]): the same closure runs its handlers on the
    /// network cores (run to completion) or here. The network cores'
    /// set-up is `|core| queue_pairs.setup_core(core)`, whatever the
    /// backend:
    ///
    /// ```
    /// use flowlane_app::{ConnHandle, ConnHandler, Net, Placement, SetupExt};
    /// use flowlane_qp::{QueuePairConfig, QueuePairs};
    ///
    /// struct Discard;
    /// impl ConnHandler for Discard {
    ///     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
    ///         net.discard(conn);
    ///     }
    /// }
    ///
    /// let cores = Placement::unpinned_cores(2);
    /// let qp = QueuePairs::start(QueuePairConfig::new(&cores), |s| s.listen(9, Discard))?;
    /// // Here the backend starts, each core calling `qp.setup_core(core)`;
    /// // it stops first, then the application threads.
    /// qp.stop()?; // a thread that panicked, threads left running
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A [`StartError`], by its kind ([`flowlane_app::StartErrorKind`]):
    /// - `Setup`: `setup` returned an error on an application thread (its
    ///   source; a [`StartError`] it returned is returned as it is);
    /// - `Config`: no cores, no application threads or more than
    ///   [`MAX_APP_THREADS`], threads that registered different ports;
    /// - `Os`: a thread that could not be started or pinned
    ///   ([`StartError::io_error`]);
    /// - `Worker`: an application thread that ended (a set-up that
    ///   panicked) during the start.
    ///
    /// The ports are the network backend's to bind: a port in use is its
    /// start's error.
    pub fn start<S, R>(config: QueuePairConfig, setup: S) -> Result<QueuePairs, StartError>
    where
        S: Fn(&mut dyn Setup) -> R + Send + Sync + 'static,
        R: IntoSetupResult,
    {
        let setup = move |s: &mut dyn Setup| setup(s).into_setup_result();
        QueuePairs::start_with(config, setup, |port, ()| port.run())
    }

    /// [`QueuePairs::start`] with a loop of the caller's: on each thread,
    /// `setup` registers the handlers and returns what `run` needs besides
    /// the thread's [`AppPort`], or a [`SetupError`]: `?` takes any error
    /// that converts into one (any `std::error::Error + Send + Sync`, a
    /// `String`, a `&str`), and neither a set-up without an error nor one
    /// using `?` needs its error type named; `run` then drives the port
    /// (an async runtime's loop, say) until [`AppPort::poll`] says the
    /// service stopped.
    ///
    /// ```
    /// use flowlane_app::{ConnHandle, ConnHandler, Net, Placement, SetupExt};
    /// use flowlane_qp::{QueuePairConfig, QueuePairs};
    ///
    /// struct Discard;
    /// impl ConnHandler for Discard {
    ///     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
    ///         net.discard(conn);
    ///     }
    /// }
    ///
    /// let cores = Placement::unpinned_cores(1);
    /// // No handler, no error: the set-up's error type is not named.
    /// let idle = QueuePairs::start_with(QueuePairConfig::new(&cores), |_| Ok(()), |port, ()| {
    ///     port.run()
    /// })?;
    /// idle.stop()?;
    /// // `?` on the set-up's calls (here `flowlane_app::Error`), the
    /// // thread's index handed to its loop.
    /// let qp = QueuePairs::start_with(
    ///     QueuePairConfig::new(&cores),
    ///     |s| {
    ///         s.listen(9, Discard)?;
    ///         Ok(s.queue())
    ///     },
    ///     |port, _thread| port.run(),
    /// )?;
    /// qp.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`QueuePairs::start`].
    pub fn start_with<S, T, R>(
        config: QueuePairConfig,
        setup: S,
        run: R,
    ) -> Result<QueuePairs, StartError>
    where
        S: Fn(&mut dyn Setup) -> Result<T, SetupError> + Send + Sync + 'static,
        R: Fn(AppPort, T) + Send + Sync + 'static,
        T: 'static,
    {
        let (ncores, nthreads) = (config.cores.len(), config.app_threads.len());
        if ncores == 0 || nthreads == 0 {
            return Err(StartError::config(format!(
                "queue-pair mode needs at least one core and one application thread (given \
                 {ncores} cores and {nthreads} threads): fill QueuePairConfig::cores and \
                 app_threads (QueuePairConfig::new, with_app_threads)"
            )));
        }
        if nthreads > MAX_APP_THREADS {
            return Err(StartError::config(format!(
                "queue-pair mode runs at most {MAX_APP_THREADS} application threads (asked \
                 for {nthreads}): their names must stay unique within Linux's 15 bytes"
            )));
        }
        let (setup, run) = (Arc::new(setup), Arc::new(run));
        let stop = Arc::new(AtomicBool::new(false));
        let requests: Vec<_> = (0..ncores)
            .map(|_| crossbeam_channel::unbounded())
            .collect();
        let events: Vec<_> = (0..nthreads)
            .map(|_| crossbeam_channel::unbounded())
            .collect();
        let ups: Vec<CoreSlot> = (0..ncores).map(|_| Arc::new(OnceLock::new())).collect();
        let memory: Arc<Vec<CoreMemory>> = Arc::new(
            (0..ncores)
                .map(|_| CoreMemory::new(RX_MEMORY, TX_MEMORY))
                .collect(),
        );
        let answers: Vec<_> = (0..nthreads)
            .map(|_| crossbeam_channel::unbounded())
            .collect();
        // Each thread's id, once it runs (0 until then).
        let tids: Vec<Arc<AtomicI32>> = (0..nthreads).map(|_| Arc::default()).collect();
        let notify: Vec<WakeSlot> = (0..nthreads).map(|_| Arc::new(OnceLock::new())).collect();
        let stalled: Vec<WakeSlot> = (0..nthreads).map(|_| Arc::new(OnceLock::new())).collect();
        let owners: Vec<u32> = (0..ncores)
            .map(|c| owner(&config.cores, &config.app_threads, c))
            .collect();
        // Each thread's ports and their SYN filters, once set up.
        type Ready = Result<(u32, Vec<u16>, Vec<Option<SynFilter>>), StartError>;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Ready>();
        let mut threads = Vec::new();
        let mut open = Vec::new();
        let alive: Vec<Arc<AtomicBool>> = (0..nthreads)
            .map(|_| Arc::new(AtomicBool::new(true)))
            .collect();
        let panicked: Vec<Arc<AtomicBool>> = (0..nthreads)
            .map(|_| Arc::new(AtomicBool::new(false)))
            .collect();
        let counts = Arc::new(RelayCounts::default());
        let refused = Arc::new(AtomicU64::new(0));
        let beats: Vec<Heartbeat> = (0..nthreads).map(|_| Heartbeat::new()).collect();
        for (t, p) in config.app_threads.iter().copied().enumerate() {
            let t = t as u32;
            let links: Vec<CoreLink> = (0..ncores)
                .map(|c| CoreLink {
                    requests: requests[c].0.clone(),
                    up: ups[c].clone(),
                    configured: config.cores[c],
                })
                .collect();
            let served: Vec<u32> = (0..ncores as u32)
                .filter(|&c| owners[c as usize] == t)
                .collect();
            let rx = events[t as usize].1.clone();
            let (answers_rx, memory, tid) = (
                answers[t as usize].1.clone(),
                memory.clone(),
                tids[t as usize].clone(),
            );
            let (setup, run, stop, ready, pin) = (
                setup.clone(),
                run.clone(),
                stop.clone(),
                ready_tx.clone(),
                config.pin,
            );
            let note = notify[t as usize].clone();
            let on_stall = stalled[t as usize].clone();
            let count = Arc::new(AtomicU64::new(0));
            open.push(count.clone());
            let guard = AliveGuard {
                alive: alive[t as usize].clone(),
                panicked: panicked[t as usize].clone(),
            };
            let beat = beats[t as usize].clone();
            let refused = refused.clone();
            let handle = std::thread::Builder::new()
                .name(app_thread_name(t))
                .spawn(move || {
                    let _guard = guard;
                    tid.store(nix::unistd::gettid().as_raw(), Ordering::Relaxed);
                    if let Some(cpu) = p.cpu {
                        if let Err(e) = pin(cpu) {
                            let _ = ready.send(Err(StartError::os(
                                format!(
                                    "cannot pin application thread {t} to CPU {cpu} (is the \
                                     CPU in this process's affinity, cgroup and online?)"
                                ),
                                e,
                            )));
                            return;
                        }
                    }
                    let mut at = AppThread {
                        net: QpNet::new(t, p, links, served, memory, answers_rx),
                        app: Dispatcher::new(),
                        ports: Vec::new(),
                        filters: Vec::new(),
                        index: t,
                        refused,
                        refused_added: 0,
                        beat,
                    };
                    let state = match setup(&mut at) {
                        Ok(state) => {
                            let filters = std::mem::take(&mut at.filters);
                            let _ = ready.send(Ok((t, at.ports.clone(), filters)));
                            state
                        }
                        Err(e) => {
                            let _ = ready.send(Err(StartError::setup(
                                format!("application thread {t}: the set-up failed"),
                                e,
                            )));
                            return;
                        }
                    };
                    drop(ready);
                    let port = AppPort {
                        at,
                        events: rx,
                        stop,
                        open: count,
                        notify: note,
                        on_stall,
                        started: false,
                    };
                    run(port, state);
                })
                .map_err(|e| StartError::os(format!("cannot start application thread {t}"), e))?;
            threads.push((t, handle));
        }
        drop(ready_tx);
        let mut ports: Option<Vec<u16>> = None;
        let mut failure = None;
        let mut filters: Vec<Vec<Option<SynFilter>>> = vec![Vec::new(); nthreads];
        for _ in 0..nthreads {
            match ready_rx.recv() {
                Ok(Ok((t, p, f))) => {
                    filters[t as usize] = f;
                    match &ports {
                        Some(q) if *q != p => {
                            failure.get_or_insert(StartError::config(format!(
                                "application threads registered different ports ({q:?} and \
                                 {p:?}): every thread's set-up must listen on the same ports"
                            )));
                        }
                        _ => ports = Some(p),
                    }
                }
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                }
                Err(_) => {
                    failure.get_or_insert(StartError::worker(
                        "an application thread ended during its set-up (the set-up panicked)",
                    ));
                }
            }
        }
        let ports = Arc::new(ports.unwrap_or_default());
        let shared = Threads {
            mailboxes: Mailboxes {
                events: events.iter().map(|(tx, _)| tx.clone()).collect(),
                notify,
                stalled,
                answers: answers.iter().map(|(tx, _)| tx.clone()).collect(),
            },
            alive: alive.clone(),
            beats,
            stall_after: config.stall_after,
            counts: counts.clone(),
            memory: memory.clone(),
        };
        let relays = requests
            .into_iter()
            .enumerate()
            .map(|(c, (_, rx))| {
                Some(Relay::new(
                    c as u32,
                    owners[c],
                    ports.clone(),
                    filters[owners[c] as usize].clone(),
                    shared.clone(),
                    rx,
                    ups[c].clone(),
                ))
            })
            .collect();
        let qp = QueuePairs {
            stop,
            alive,
            panicked,
            counts,
            refused,
            threads: Mutex::new(threads),
            stop_wait: config.stall_after.max(STOP_WAIT_MIN),
            left_running: AtomicU64::new(0),
            relays: Mutex::new(relays),
            cores: config.cores,
            ups,
            ports,
            open,
            memory,
            tids,
        };
        match failure {
            Some(e) => {
                let _ = qp.stop();
                Err(e)
            }
            None => Ok(qp),
        }
    }

    /// On network core `core.queue()`, in the backend's per-core set-up:
    /// registers the core's relay and listens on the service's ports.
    /// Refuses, saying why, a core [`QueuePairConfig::cores`] has no entry
    /// for and one set up already.
    pub fn setup_core(&self, core: &mut dyn Setup) -> Result<(), CoreSetupError> {
        let queue = core.queue();
        let relay = match self
            .relays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(queue as usize)
        {
            None => {
                return Err(CoreSetupError::NoRelay {
                    queue,
                    cores: self.cores.len(),
                })
            }
            Some(slot) => slot.take().ok_or(CoreSetupError::SetUpAlready { queue })?,
        };
        let h = core.add_boxed(Box::new(relay));
        for &port in self.ports.iter() {
            core.listen_with(port, h)
                .map_err(|error| CoreSetupError::Listen { queue, port, error })?;
        }
        Ok(())
    }

    /// Network cores whose backend runs them elsewhere (another CPU or
    /// NUMA node) than [`QueuePairConfig::cores`] says, as (configured,
    /// actual), once their loops started. The application threads report
    /// where a core actually runs ([`flowlane_app::Net::conn_placement`]:
    /// a thread that pins itself near a connection follows it), but which
    /// thread serves a core was chosen at [`QueuePairs::start`], for the
    /// node configured, and stays: build `cores` from the placement the
    /// backend's workers get (the CPUs it is given) for each core to be
    /// served by a thread of its own node.
    pub fn misplaced_cores(&self) -> Vec<(Placement, Placement)> {
        self.cores
            .iter()
            .zip(&self.ups)
            .filter_map(|(&configured, up)| {
                let actual = up.get()?.placement;
                (actual != configured).then_some((configured, actual))
            })
            .collect()
    }

    /// The number of application threads.
    pub fn app_threads(&self) -> u32 {
        self.open.len() as u32
    }

    /// Each application thread's id (Linux's tid: its
    /// `/proc/self/task/<tid>`), once it began to run: each thread's CPU
    /// time is read there, once per thread.
    pub fn app_thread_tids(&self) -> Vec<Option<i32>> {
        self.tids
            .iter()
            .map(|t| Some(t.load(Ordering::Relaxed)).filter(|&t| t > 0))
            .collect()
    }

    /// What each network core's relay holds for the application threads
    /// (received bytes not read yet, bytes not sent yet), against its
    /// memory budget, and how often connections waited for it; by core.
    pub fn memory(&self) -> Vec<RelayMemory> {
        self.memory.iter().map(CoreMemory::report).collect()
    }

    /// Connections open on the application threads (as of their last
    /// pass).
    pub fn connections(&self) -> u64 {
        self.open.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Application threads that ended before being stopped in a panic:
    /// the cores reset their connections and go on. Not one that ended
    /// because its cores did (a kernel-socket service's drain ends its
    /// cores, and with them its threads, before [`QueuePairs::stop`]: they
    /// were reported dead in its summary).
    pub fn dead_threads(&self) -> Vec<u32> {
        if self.stop.load(Ordering::Relaxed) {
            return Vec::new();
        }
        (0..self.panicked.len() as u32)
            .filter(|&t| self.panicked[t as usize].load(Ordering::Relaxed))
            .collect()
    }

    /// Connections the handlers' `admit` refused (reset before
    /// `on_accept`), on every application thread.
    pub fn application_refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections the cores reset because their application thread died
    /// (or was dead when they arrived).
    pub fn orphaned(&self) -> u64 {
        self.counts.orphaned.load(Ordering::Relaxed)
    }

    /// Connections that reached another core with their RSS bucket (the
    /// rebalancer moved it), their relay state with them.
    pub fn moved(&self) -> u64 {
        self.counts.moved_in.load(Ordering::Relaxed)
    }

    /// Requests an application thread sent to a connection's old core
    /// after it moved: given back to the thread and sent again, in order,
    /// to the new core.
    pub fn bounced(&self) -> u64 {
        self.counts.bounced.load(Ordering::Relaxed)
    }

    /// Application threads that [`QueuePairs::stop`] left running: they
    /// had not ended within the stall limit (a handler blocked for good).
    pub fn threads_left_running(&self) -> u64 {
        self.left_running.load(Ordering::Relaxed)
    }

    /// Stops the application threads (stop the network backend first).
    /// Waits for them the stall limit at most in all
    /// ([`QueuePairConfig::stall_after`], 1 s at least), then leaves those
    /// not ended running, counted ([`QueuePairs::threads_left_running`]),
    /// rather than hang on a handler blocked for good. Returns what went
    /// wrong: each thread that panicked
    /// ([`StopErrorKind::Panicked`](flowlane_app::StopErrorKind::Panicked),
    /// [`Worker::AppThread`] its index, the panic's words kept), then the
    /// threads left running
    /// ([`StopErrorKind::LeftRunning`](flowlane_app::StopErrorKind::LeftRunning)).
    /// A second call finds nothing more to stop: `Ok`.
    pub fn stop(&self) -> Result<(), StopError> {
        self.stop.store(true, Ordering::Relaxed);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let deadline = Instant::now() + self.stop_wait;
        let mut failures = Vec::new();
        let mut left = Vec::new();
        for (t, h) in threads {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(STOP_POLL);
            }
            if !h.is_finished() {
                // Dropped, the handle detaches the thread.
                left.push(t);
                continue;
            }
            if let Err(panic) = h.join() {
                let words = StopError::panic_words(panic.as_ref());
                failures.push(StopError::panicked(Worker::AppThread(t), words));
            }
        }
        if !left.is_empty() {
            self.left_running
                .fetch_add(left.len() as u64, Ordering::Relaxed);
            failures.push(StopError::left_running(left, self.stop_wait));
        }
        StopError::collect(failures)
    }
}

impl Drop for QueuePairs {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_app::StopErrorKind;
    use std::sync::mpsc;

    /// `n` unpinned cores (or threads) on node 0.
    fn places(n: u32) -> Vec<Placement> {
        (0..n)
            .map(|queue| Placement {
                queue,
                cpu: None,
                node: 0,
            })
            .collect()
    }

    /// A thread blocked for good in the application's code (its loop here,
    /// as a handler's call would be) does not hold `stop` up: after the
    /// stall limit it is left running, counted and reported, and the other
    /// thread is stopped. (A watchdog fails the test instead of hanging.)
    #[test]
    fn stop_leaves_a_blocked_thread_running_instead_of_hanging() {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release = Mutex::new(release_rx);
        let qp = QueuePairs::start_with(
            QueuePairConfig {
                cores: places(1),
                app_threads: places(2),
                pin: |_| Ok(()),
                stall_after: Duration::from_millis(200),
            },
            |_| Ok(()),
            move |port, ()| {
                if port.index() == 1 {
                    let _ = release.lock().unwrap().recv();
                }
                port.run();
            },
        )
        .unwrap();
        let qp = Arc::new(qp);
        let (done_tx, done_rx) = mpsc::channel();
        let q = qp.clone();
        std::thread::spawn(move || {
            let _ = done_tx.send(q.stop());
        });
        let stopped = done_rx.recv_timeout(Duration::from_secs(10));
        let _ = release_tx.send(());
        let report = stopped
            .expect("stop() hung on a blocked thread")
            .expect_err("the blocked thread is reported");
        assert_eq!(report.kind(), StopErrorKind::LeftRunning, "{report:#}");
        assert_eq!(report.left_running_threads(), [1], "{report:#}");
        assert_eq!(report.failures().count(), 1, "{report:#}");
        assert!(report.to_string().contains("[1]"), "{report}");
        assert_eq!(qp.threads_left_running(), 1);
        assert!(!qp.alive[0].load(Ordering::Relaxed), "thread 0 stopped");
        qp.stop().expect("nothing left to stop");
    }

    /// An application thread that panicked while it ran is reported by
    /// the stop: its kind, its index and the panic's words; the other
    /// thread stopped as usual.
    #[test]
    fn stop_reports_a_thread_that_panicked_with_its_index_and_words() {
        let qp = QueuePairs::start_with(
            QueuePairConfig {
                cores: places(1),
                app_threads: places(2),
                pin: |_| Ok(()),
                stall_after: Duration::from_millis(200),
            },
            |_| Ok(()),
            move |port, ()| {
                if port.index() == 1 {
                    panic!("thread 1 asked to panic");
                }
                port.run();
            },
        )
        .unwrap();
        let start = Instant::now();
        while qp.dead_threads().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "never panicked");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(qp.dead_threads(), [1]);
        let e = qp.stop().expect_err("the panic is reported");
        assert_eq!(e.kind(), StopErrorKind::Panicked, "{e:#}");
        assert_eq!(e.worker(), Some(Worker::AppThread(1)), "{e:#}");
        assert_eq!(e.panic_message(), Some("thread 1 asked to panic"));
        assert_eq!(e.failures().count(), 1, "{e:#}");
        assert_eq!(
            format!("{e:#}"),
            "application thread 1 panicked: thread 1 asked to panic"
        );
        assert_eq!(qp.threads_left_running(), 0);
    }

    /// The usual configuration: a thread per core on the core's node, not
    /// pinned, the pin and stall limit the services use.
    #[test]
    fn a_config_s_defaults_are_the_usual_service_s() {
        let cores: Vec<Placement> = (0..4)
            .map(|queue| Placement {
                queue,
                cpu: Some(10 + queue),
                node: queue / 2,
            })
            .collect();
        let c = QueuePairConfig::new(&cores);
        assert_eq!(c.cores, cores);
        let threads: Vec<(u32, Option<u32>, u32)> = c
            .app_threads
            .iter()
            .map(|p| (p.queue, p.cpu, p.node))
            .collect();
        assert_eq!(
            threads,
            [(0, None, 0), (1, None, 0), (2, None, 1), (3, None, 1)]
        );
        assert_eq!(c.stall_after, Duration::from_secs(10));
        let one = QueuePairConfig::new(&cores).with_app_threads(1).app_threads;
        assert_eq!(one, [Placement::unpinned(0)]);
        // The pin pins (the services' `pin_to`): to a CPU this thread may
        // run on, on a thread of its own.
        let cpu = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        let cpu = (0..nix::sched::CpuSet::count())
            .find(|&c| cpu.is_set(c).unwrap_or(false))
            .unwrap() as u32;
        let pin = c.pin;
        let pinned = std::thread::spawn(move || {
            pin(cpu).unwrap();
            nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap()
        });
        let set = pinned.join().unwrap();
        let on: Vec<usize> = (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect();
        assert_eq!(on, [cpu as usize]);
    }

    /// Each application thread has a name of its own within the 15 bytes
    /// Linux keeps, and its id is known (its CPU time is read by it, once
    /// per thread); more threads than such names are refused.
    #[test]
    fn app_threads_have_names_of_their_own_and_known_ids() {
        let config = |threads: u32| QueuePairConfig {
            cores: places(1),
            app_threads: places(threads),
            pin: |_| Ok(()),
            stall_after: Duration::from_secs(1),
        };
        let too_many = MAX_APP_THREADS as u32 + 1;
        let e = QueuePairs::start(config(too_many), |_| ()).unwrap_err();
        assert_eq!(e.kind(), flowlane_app::StartErrorKind::Config);
        assert!(
            e.to_string()
                .contains(&format!("at most {MAX_APP_THREADS}")),
            "{e}"
        );
        let qp = QueuePairs::start(config(3), |_| ()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while qp.app_thread_tids().contains(&None) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for (t, tid) in qp.app_thread_tids().into_iter().enumerate() {
            let tid = tid.expect("running");
            let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
            assert_eq!(comm.trim(), app_thread_name(t as u32));
        }
        assert!((0..MAX_APP_THREADS as u32)
            .map(app_thread_name)
            .all(|n| n.len() <= 15));
        qp.stop().unwrap();
    }

    /// Each way queue-pair mode's start fails is a kind of
    /// [`StartError`] to match on, its cause chained: a set-up's error
    /// (its own, as the source), a pin the OS refused (its `io::Error`),
    /// a set-up that panicked (the thread ended), a configuration without
    /// threads.
    #[test]
    fn each_start_failure_is_a_kind_with_its_cause() {
        use flowlane_app::StartErrorKind;
        use std::error::Error as _;
        let config = |threads: u32| QueuePairConfig {
            cores: places(1),
            app_threads: places(threads),
            pin: |_| Ok(()),
            stall_after: Duration::from_secs(1),
        };
        let e = QueuePairs::start(config(2), |s: &mut dyn Setup| {
            if s.queue() == 1 {
                return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e.kind(), StartErrorKind::Setup, "{e}");
        assert_eq!(e.to_string(), "application thread 1: the set-up failed");
        assert_eq!(
            e.io_error().map(std::io::Error::kind),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        assert!(e.source().is_some() && e.setup_error().is_some());

        let e = QueuePairs::start(config(1), |s: &mut dyn Setup| {
            if s.queue() == 0 {
                panic!("a set-up bug");
            }
        })
        .unwrap_err();
        assert_eq!(e.kind(), StartErrorKind::Worker, "{e}");

        let refused = QueuePairConfig {
            app_threads: vec![Placement {
                queue: 0,
                cpu: Some(0),
                node: 0,
            }],
            pin: |_| Err(std::io::Error::from_raw_os_error(22)),
            ..config(1)
        };
        let e = QueuePairs::start(refused, |_| ()).unwrap_err();
        assert_eq!(e.kind(), StartErrorKind::Os, "{e}");
        assert_eq!(
            e.io_error().and_then(std::io::Error::raw_os_error),
            Some(22)
        );
        assert!(e.to_string().contains("to CPU 0"), "{e}");

        let e = QueuePairs::start(config(0), |_| ()).unwrap_err();
        assert_eq!(e.kind(), StartErrorKind::Config, "{e}");
        assert!(e.source().is_none());

        // `start_with`'s set-up takes any error that converts, by `?`.
        fn in_use() -> Result<(), flowlane_app::Error> {
            Err(flowlane_app::Error::AddrInUse)
        }
        let e = QueuePairs::start_with(
            config(1),
            |_| {
                in_use()?;
                Ok(())
            },
            |_, ()| {},
        )
        .unwrap_err();
        assert_eq!(e.kind(), StartErrorKind::Setup, "{e}");
        assert_eq!(e.setup_error().unwrap().to_string(), "address in use");
    }
}
