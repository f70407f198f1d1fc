//! What a running TCP service's main thread does besides waiting: its
//! rebalancing loop (`--rebalance`, [`AutoRebalance`]), its control socket
//! (`flowlane rebalance status|move`, `flowlane status`, the daemon's
//! scrapes and hints: [`ControlSocket`]) and the history of the moves both
//! made. The caller polls it every few milliseconds and logs each move it
//! returns ([`move_line`]).
//!
//! The socket reports a [`ServiceView`]: an AF_XDP [`TcpService`], or a
//! service of another backend (kernel sockets) that implements it; and,
//! for a service in queue-pair mode, the counters of its application
//! threads and relays ([`ServiceControl::report_queue_pairs`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::auto_rebalance::{AutoRebalance, Mode, MovePrice, MoveWhy, Tried, Wish};
use crate::bucket_counters::BucketSnapshot;
use crate::control_socket::{
    self, ControlSocket, FlowAnswer, FlowQuery, MoveCause, MoveCostStatus, MoveHistory,
    QueueCounterSet, QueuePairCounters, QueueStatus, QueueSteering, Request, Response,
    ServiceCounters, ServiceStatus,
};
use crate::handoff::MoveReport;
use crate::heap_trim::HeapTrim;
use crate::iface::InterfaceStats;
use crate::tcp_service::{ServiceHint, TcpService};
use crate::{Error, Result};
use flowlane_numa_sched::rebalance::RebalanceConfig;

/// What a control socket reports of a running service, whatever backend
/// runs it.
pub trait ServiceView {
    /// The backend: `xdp` (AF_XDP) or `kernel` (kernel sockets).
    fn backend(&self) -> &'static str;
    /// The interface served (`*`: every interface, as kernel sockets
    /// listen).
    fn iface(&self) -> String;
    /// Each queue's counters (a kernel-socket service: each core's; the
    /// counters it cannot know stay zero).
    fn queue_counters(&self) -> Vec<QueueCounterSet>;
    /// Per queue, the RSS buckets it served (none without buckets).
    fn buckets(&self) -> Vec<(u32, Vec<BucketSnapshot>)> {
        Vec::new()
    }
    /// The indirection table as the service last wrote it; empty when
    /// buckets cannot move.
    fn table(&self) -> Vec<u32> {
        Vec::new()
    }
    /// The queue that worker `worker` sends through when it has no queue
    /// of its own (software spill); None for a queue's own worker (the
    /// default: every worker has its queue, or its core).
    fn spill_carrier(&self, _worker: u32) -> Option<u32> {
        None
    }
    /// The interface's own counters, if the service reads them.
    fn nic(&self) -> Option<InterfaceStats> {
        None
    }
    /// What the XDP steering program did with each receive queue's
    /// frames (none where no steering program runs: kernel sockets).
    fn steering(&self) -> Vec<QueueSteering> {
        Vec::new()
    }
    /// Where `flow` is processed now, or why the service cannot say (a
    /// predicate: "does not serve ...", after the service's name).
    fn hint(
        &self,
        flow: &flowlane_numa_sched::FlowTuple,
    ) -> std::result::Result<ServiceHint, String>;
    /// Moves `bucket` to `to_queue` with its connections.
    ///
    /// # Errors
    /// Why it could not ([`Error::MoveRefused`] for a request refused before
    /// anything moved; the default: the backend has no buckets to move).
    fn move_bucket(&self, _bucket: u16, _to_queue: u32) -> Result<MoveReport> {
        Err(Error::MoveRefused(format!(
            "a {} service has no RSS buckets to move (buckets move on --backend xdp)",
            self.backend()
        )))
    }
}

impl ServiceView for TcpService {
    fn backend(&self) -> &'static str {
        "xdp"
    }
    fn iface(&self) -> String {
        self.dataplane().interface().name.clone()
    }
    fn queue_counters(&self) -> Vec<QueueCounterSet> {
        let tcp_counters = self.tcp_counters();
        self.dataplane()
            .counters()
            .into_iter()
            .map(|(info, io)| QueueCounterSet {
                queue: info.queue,
                cpu: info.cpu,
                node: info.node,
                io,
                tcp: tcp_counters
                    .iter()
                    .find(|(q, _)| *q == info.queue)
                    .map(|(_, t)| *t)
                    .unwrap_or_default(),
            })
            .collect()
    }
    fn buckets(&self) -> Vec<(u32, Vec<BucketSnapshot>)> {
        self.bucket_counters()
    }
    fn table(&self) -> Vec<u32> {
        self.rss_table().unwrap_or_default()
    }
    fn spill_carrier(&self, worker: u32) -> Option<u32> {
        TcpService::spill_carrier(self, worker)
    }
    fn nic(&self) -> Option<InterfaceStats> {
        self.dataplane().interface_stats().ok()
    }
    fn steering(&self) -> Vec<QueueSteering> {
        self.dataplane()
            .steering_counters()
            .iter()
            .map(|(q, s)| QueueSteering::new(*q, s))
            .collect()
    }
    fn hint(
        &self,
        flow: &flowlane_numa_sched::FlowTuple,
    ) -> std::result::Result<ServiceHint, String> {
        TcpService::hint(self, flow)
    }
    fn move_bucket(&self, bucket: u16, to_queue: u32) -> Result<MoveReport> {
        TcpService::move_bucket(self, bucket, to_queue)
    }
}

/// Moves `bucket` to `to` through `view`, and says whether the bucket is
/// there afterwards: the move succeeded, or it failed once the bucket had
/// moved (the table the service keeps, which names the queue that serves
/// each bucket, names `to` now and did not before); and how long the move
/// took, from the request to the answer (what a move that failed cost:
/// its error has no duration of its own).
pub(crate) fn move_and_see(
    view: &dyn ServiceView,
    bucket: u16,
    to: u32,
) -> (Result<MoveReport>, bool, Duration) {
    let at = |table: Vec<u32>| table.get(usize::from(bucket)).copied();
    let before = at(view.table());
    let asked = Instant::now();
    let outcome = view.move_bucket(bucket, to);
    let took = asked.elapsed();
    let landed = outcome.is_ok() || (before != Some(to) && at(view.table()) == Some(to));
    (outcome, landed, took)
}

/// Where the control socket goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketChoice {
    /// The default path ([`control_socket::default_path`]); a service that
    /// cannot make it warns and serves without one.
    Default,
    /// This path (given by the user): failing to make it is an error.
    At(PathBuf),
    /// None.
    Off,
}

/// A service's rebalancing loop, control socket and move history.
#[derive(Debug)]
pub struct ServiceControl {
    service: String,
    started: Instant,
    /// The wall clock at the start, in nanoseconds since the Unix epoch
    /// (None if the clock reads before it).
    started_unix_ns: Option<u64>,
    auto: Option<AutoRebalance>,
    socket: Option<ControlSocket>,
    history: MoveHistory,
    load: LoadWindow,
    /// The daemon's socket this service registers on, and when it
    /// announces itself again (a daemon restarted since has forgotten it).
    daemon: Option<(PathBuf, Instant)>,
    /// Whether the loop runs by default rather than by a flag.
    by_default: bool,
    /// Why the loop is off although no flag said so.
    off_because: Option<String>,
    /// The loop's moves that failed, the bucket where it was, since its
    /// last one that took its bucket where it was to go.
    failed_in_a_row: u32,
    /// The control socket's clients dropped so far, as of its last poll
    /// (the socket is out of its place while it answers).
    control_dropped: u64,
    /// The heap trims made after the queues gave memory back.
    heap: HeapTrim,
    /// Where queue-pair mode's counters are read, for a service in that
    /// mode ([`ServiceControl::report_queue_pairs`]).
    queue_pairs: Option<QueuePairSource>,
    /// The service's stop began ([`ServiceControl::begin_stop`]).
    stopping: bool,
}

/// Reads a service's queue-pair counters now.
struct QueuePairSource(Box<dyn Fn() -> QueuePairCounters + Send>);

impl std::fmt::Debug for QueuePairSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueuePairSource")
    }
}

/// How many of a default loop's moves may fail in a row (a NIC that
/// refuses table writes) before it stops: a loop nobody asked for must not
/// fill the log.
const DEFAULT_LOOP_FAILURES: u32 = 3;

/// How often a service announces its control socket to the daemon again.
const REGISTER_EVERY: Duration = Duration::from_secs(5);

/// The workers' load over the last full second: what the imbalance
/// reported to the daemon is measured over.
#[derive(Debug)]
struct LoadWindow {
    /// When the window started.
    at: Instant,
    /// Each worker's busy nanoseconds then.
    busy: Vec<u64>,
    /// Max over mean of the last full window's busy time.
    imbalance: f64,
}

impl LoadWindow {
    /// How long one window lasts.
    const LENGTH: Duration = Duration::from_secs(1);

    /// Closes the window if it is a second old, with the workers' busy
    /// nanoseconds now (read only then).
    fn tick(&mut self, now: Instant, busy_now: impl FnOnce() -> Vec<u64>) {
        if now.duration_since(self.at) < Self::LENGTH {
            return;
        }
        let busy = busy_now();
        if busy.len() == self.busy.len() {
            let spent: Vec<f64> = busy
                .iter()
                .zip(&self.busy)
                .map(|(n, b)| n.saturating_sub(*b) as f64)
                .collect();
            // Idle (1) while the busiest worker was busy less than the
            // rebalancing loop's idle mark of the window: a kernel-socket
            // core's busy time is its thread's CPU time, which an idle
            // loop's wake-ups keep above zero.
            let window = now.duration_since(self.at).as_nanos() as f64;
            let busiest = spent.iter().copied().fold(0.0, f64::max);
            self.imbalance = if busiest < RebalanceConfig::default().min_load * window {
                1.0
            } else {
                flowlane_numa_sched::max_over_mean(&spent)
            };
        }
        self.at = now;
        self.busy = busy;
    }
}

impl ServiceControl {
    /// Control for `service` (its command name, e.g. `bulk-sink`), with the
    /// rebalancing loop `wish` asks for and the control socket `socket`.
    /// `blocked`: why buckets cannot move besides what `tcp` knows (e.g.
    /// workers sharing queues); without a flag, rebalancing is then off.
    ///
    /// # Errors
    /// What [`Wish::choose`] and [`ControlSocket::bind`] return (the
    /// latter only for a socket path the user chose), and
    /// [`AutoRebalance::new`]'s error for a loop asked for (a default loop
    /// that cannot start is off, with a warning).
    pub fn new(
        tcp: &TcpService,
        service: &str,
        wish: Wish,
        blocked: Option<String>,
        socket: SocketChoice,
    ) -> Result<ServiceControl> {
        let chosen = wish.choose(blocked.or_else(|| tcp.why_buckets_cannot_move()))?;
        let mut off_because = chosen.off_because;
        let auto = match chosen.mode.map(|m| AutoRebalance::new(tcp, m)) {
            None => None,
            Some(Ok(a)) => Some(a),
            // A loop nobody asked for does not stop the service.
            Some(Err(e)) if chosen.by_default => {
                tracing::warn!("rebalancing off: {e}");
                off_because = Some(e.to_string());
                None
            }
            Some(Err(e)) => return Err(e),
        };
        let mut control = ServiceControl::without_rebalancing(service, socket)?;
        control.auto = auto;
        control.by_default = chosen.by_default;
        control.off_because = off_because;
        Ok(control)
    }

    /// Control for `service` with no rebalancing loop: a control socket
    /// and the moves made by hand (a service of a backend without buckets
    /// serves its status, counters and hints, and refuses moves).
    ///
    /// # Errors
    /// What [`ControlSocket::bind`] returns for a socket path the user
    /// chose.
    pub fn without_rebalancing(service: &str, socket: SocketChoice) -> Result<ServiceControl> {
        let socket = match socket {
            SocketChoice::Off => None,
            SocketChoice::At(p) => Some(ControlSocket::bind(&p)?),
            SocketChoice::Default => {
                let path = control_socket::default_path(service);
                if let Some(dir) = path.parent() {
                    let swept = control_socket::sweep_stale(dir);
                    if swept > 0 {
                        tracing::debug!(
                            "removed {swept} control sockets of services that are gone"
                        );
                    }
                }
                match ControlSocket::bind(&path) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        tracing::warn!("{}", no_socket_line(&e));
                        None
                    }
                }
            }
        };
        Ok(ServiceControl {
            service: service.to_string(),
            started: Instant::now(),
            started_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| u64::try_from(d.as_nanos()).ok()),
            auto: None,
            socket,
            history: MoveHistory::default(),
            load: LoadWindow {
                at: Instant::now(),
                busy: Vec::new(),
                imbalance: 1.0,
            },
            daemon: None,
            by_default: false,
            off_because: None,
            failed_in_a_row: 0,
            control_dropped: 0,
            heap: HeapTrim::new(Instant::now()),
            queue_pairs: None,
            stopping: false,
        })
    }

    /// The service runs its handlers on application threads (queue-pair
    /// mode): each counters answer carries their counters as `read`
    /// reads them then ([`ServiceCounters::queue_pair`]), the figures the
    /// service's summary reports at exit.
    pub fn report_queue_pairs(&mut self, read: impl Fn() -> QueuePairCounters + Send + 'static) {
        self.queue_pairs = Some(QueuePairSource(Box::new(read)));
    }

    /// The service's stop began: from now on its status and counters say
    /// it is stopping, its rebalancing loop makes no move and a move asked
    /// for by hand is refused; the socket answers on through the stop's
    /// drain, until this is dropped as the service exits (a service
    /// draining its connections is still seen, with what it waits for).
    pub fn begin_stop(&mut self) {
        self.stopping = true;
    }

    /// Where the control socket listens, if there is one.
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket.as_ref().map(ControlSocket::path)
    }

    /// Announces the control socket to the daemon listening on `daemon`,
    /// if one does, now and every few seconds from [`ServiceControl::poll`]
    /// (a daemon started or restarted later finds the service); says
    /// whether it took it now. Without a daemon (or a socket of its own)
    /// the service goes on: applications work without one.
    pub fn register_with_daemon(&mut self, daemon: &Path) -> bool {
        self.daemon = Some((daemon.to_path_buf(), Instant::now() + REGISTER_EVERY));
        self.announce(daemon)
    }

    fn announce(&self, daemon: &Path) -> bool {
        let Some(own) = self.socket_path() else {
            return false;
        };
        match control_socket::register_with_daemon(daemon, own, &self.service) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("not registered with a daemon: {e}");
                false
            }
        }
    }

    /// Runs a rebalancing round if one is due and answers the control
    /// socket's requests; returns every move made or tried, for the caller
    /// to log ([`move_line`]; not those asked for by hand and refused
    /// before anything moved: see [`ServiceControl::poll_view`]).
    pub fn poll(&mut self, tcp: &TcpService) -> Vec<LoggedMove> {
        let mut out = Vec::new();
        if let Some(a) = self.auto.as_mut().filter(|_| !self.stopping) {
            let mut last_error = None;
            for t in a.poll(tcp) {
                if let Some(e) = self.tally(&t) {
                    last_error = Some(e);
                }
                let failed_after = t.outcome.is_err().then_some(t.took);
                out.push(LoggedMove {
                    cause: t.cause,
                    outcome: t.outcome,
                    why: t.why,
                    failed_after,
                });
            }
            if self.by_default && self.failed_in_a_row >= DEFAULT_LOOP_FAILURES {
                tracing::warn!(
                    "rebalancing off: {DEFAULT_LOOP_FAILURES} moves in a row failed (the last is in the log); --rebalance auto keeps trying, --rebalance off does not start"
                );
                self.auto = None;
                self.off_because = Some(format!(
                    "{DEFAULT_LOOP_FAILURES} moves in a row failed, the last: {}",
                    last_error.unwrap_or_default()
                ));
            }
        }
        out.extend(
            self.poll_socket(tcp)
                .into_iter()
                .map(|(outcome, took)| LoggedMove {
                    cause: MoveCause::Manual,
                    failed_after: outcome.is_err().then_some(took),
                    outcome,
                    why: None,
                }),
        );
        out
    }

    /// Answers the control socket's requests about `view` (no rebalancing
    /// round: [`ServiceControl::poll`] runs those for an AF_XDP service);
    /// returns the moves asked for by hand that were made or tried: one
    /// refused before anything moved (a bucket out of range or already
    /// there, a service whose buckets cannot move) is answered to its
    /// requester only, neither returned nor counted.
    pub fn poll_view(&mut self, view: &dyn ServiceView) -> Vec<Result<MoveReport>> {
        self.poll_socket(view)
            .into_iter()
            .map(|(outcome, _)| outcome)
            .collect()
    }

    /// [`ServiceControl::poll_view`], with how long each move took.
    fn poll_socket(&mut self, view: &dyn ServiceView) -> Vec<(Result<MoveReport>, Duration)> {
        let now = Instant::now();
        self.load.tick(now, || {
            view.queue_counters().iter().map(|q| q.io.busy_ns).collect()
        });
        let queue_pairs = &self.queue_pairs;
        self.heap.poll(
            now,
            || {
                let queues = view.queue_counters();
                let stacks: u64 = queues.iter().map(|q| q.tcp.buffer_memory_returned).sum();
                // In queue-pair mode, what the cores' relays gave back too.
                let relays: u64 = queue_pairs.as_ref().map_or(0, |read| {
                    (read.0)().relay_memory.iter().map(|m| m.returned).sum()
                });
                stacks + relays
            },
            || {
                crate::sys::release_free_heap();
            },
        );
        if let Some((daemon, next)) = self.daemon.take() {
            // Where no daemon listens the connect fails at once.
            if now >= next {
                self.announce(&daemon);
            }
            let next = if now >= next {
                now + REGISTER_EVERY
            } else {
                next
            };
            self.daemon = Some((daemon, next));
        }
        let mut out = Vec::new();
        if let Some(mut socket) = self.socket.take() {
            self.control_dropped = socket.clients_dropped();
            socket.poll(|req| match req {
                Request::Status => Response::Status(Box::new(self.status(view))),
                Request::Counters => Response::Counters(Box::new(self.counters(view))),
                Request::Hint { flow } => self.hint(view, &flow),
                Request::Host | Request::Register { .. } => Response::Error {
                    message: "a service owns no NIC and takes no registration; ask `flowlane daemon`'s socket".into(),
                },
                Request::Move { .. } if self.stopping => Response::Error {
                    message: format!(
                        "{} is stopping: no bucket moves during its drain",
                        self.service
                    ),
                },
                Request::Move { bucket, to_queue } => {
                    let (m, took) = self.move_by_hand(view, bucket, to_queue);
                    let response = match &m {
                        Ok(r) => Response::Moved(r.clone()),
                        Err(e) => Response::Error {
                            message: e.to_string(),
                        },
                    };
                    // A move refused before anything moved is no move (not
                    // counted either): its requester has the refusal, and
                    // the service logs no move line for it.
                    if !matches!(m, Err(Error::MoveRefused(_))) {
                        out.push((m, took));
                    }
                    response
                }
            });
            self.control_dropped = socket.clients_dropped();
            self.socket = Some(socket);
        }
        out
    }

    /// Records a move of the loop; returns its error if it failed with
    /// its bucket where it was. Only those count towards stopping a
    /// default loop: a move that failed once its bucket had moved is no
    /// refused table write (its error is logged all the same).
    fn tally(&mut self, t: &Tried) -> Option<String> {
        self.history.record(t.cause, &t.outcome, t.landed);
        match &t.outcome {
            _ if t.landed => {
                self.failed_in_a_row = 0;
                None
            }
            Ok(_) => None,
            Err(e) => {
                self.failed_in_a_row += 1;
                Some(e.to_string())
            }
        }
    }

    /// A move asked for through the control socket, and how long it took:
    /// recorded in the history (unless refused before anything moved: a
    /// mistyped bucket is no failed move), learned from by the rebalancing
    /// loop, failed or not ([`AutoRebalance::learn_outcome`]), and, if
    /// the bucket landed, told to the loop, which then holds it there for
    /// its hold-down rather than moving it straight back.
    fn move_by_hand(
        &mut self,
        view: &dyn ServiceView,
        bucket: u16,
        to: u32,
    ) -> (Result<MoveReport>, Duration) {
        // What a move that fails carried: the bucket's connections before.
        let connections = self.auto.as_ref().map_or(0, |_| {
            view.buckets()
                .iter()
                .flat_map(|(_, list)| list.iter())
                .filter(|b| b.bucket == bucket)
                .map(|b| b.connections)
                .sum::<u64>()
        });
        let (m, landed, took) = move_and_see(view, bucket, to);
        if matches!(m, Err(Error::MoveRefused(_))) {
            return (m, took);
        }
        self.history.record(MoveCause::Manual, &m, landed);
        if let Some(a) = self.auto.as_mut() {
            if landed {
                a.note_move(bucket, to);
            }
            a.learn_outcome(&m, u32::try_from(connections).unwrap_or(u32::MAX), took);
        }
        (m, took)
    }

    /// Every counter of the service now.
    pub fn counters(&self, view: &dyn ServiceView) -> ServiceCounters {
        ServiceCounters {
            service: self.service.clone(),
            pid: std::process::id(),
            uptime_ns: self.started.elapsed().as_nanos() as u64,
            started_unix_ns: self.started_unix_ns,
            backend: view.backend().into(),
            iface: view.iface(),
            rebalance: self.rebalance_mode().into(),
            queues: view.queue_counters(),
            steering: view.steering(),
            moves: self.history.clone(),
            nic: view.nic(),
            imbalance: self.load.imbalance,
            control_clients_dropped: self.control_dropped,
            heap_trims: self.heap.trims,
            heap_trim_ns: self.heap.trim_ns,
            socket: None,
            queue_pair: self.queue_pairs.as_ref().map(|read| (read.0)()),
            stopping: self.stopping,
            move_cost: self.move_cost(),
        }
    }

    /// What the rebalancing loop prices a move at now (None: no loop).
    fn move_cost(&self) -> Option<MoveCostStatus> {
        let p = self.auto.as_ref()?.move_cost();
        Some(MoveCostStatus {
            fixed_ns: p.cost.fixed,
            per_connection_ns: p.cost.per_connection,
            fit_moves: p.fit_moves,
            fixed_price: p.price == MovePrice::Fixed,
            refused_for_cost: p.priced_out,
        })
    }

    /// Where `flow` is processed now, or why this service cannot say.
    fn hint(&self, view: &dyn ServiceView, flow: &FlowQuery) -> Response {
        let Some(tuple) = flow.tuple() else {
            return Response::Error {
                message: format!(
                    "a flow is tcp or udp between two addresses of one family, not {} {} -> {}",
                    flow.proto, flow.src, flow.dst
                ),
            };
        };
        match view.hint(&tuple) {
            Ok(hint) => Response::Hint(FlowAnswer {
                service: self.service.clone(),
                pid: std::process::id(),
                backend: view.backend().into(),
                iface: view.iface(),
                hint,
            }),
            Err(why) => Response::Error {
                message: format!("{} {why}", self.service),
            },
        }
    }

    /// The rebalancing loop running now: `off`, `auto` or `storm` (a
    /// default loop that gave up reads `off`).
    pub fn rebalance_mode(&self) -> &'static str {
        match self.auto.as_ref().map(AutoRebalance::mode) {
            None => "off",
            Some(Mode::Auto(_)) => "auto",
            Some(Mode::Storm { .. }) => "storm",
        }
    }

    /// The service's state now.
    pub fn status(&self, view: &dyn ServiceView) -> ServiceStatus {
        let buckets = view.buckets();
        let queues = view
            .queue_counters()
            .into_iter()
            .map(|q| QueueStatus {
                queue: q.queue,
                cpu: q.cpu,
                node: q.node,
                busy_ns: q.io.busy_ns,
                segments_in: q.tcp.segments_in,
                connections: q.tcp.connections,
                carrier: view.spill_carrier(q.queue),
                buckets: buckets
                    .iter()
                    .find(|(b, _)| *b == q.queue)
                    .map_or_else(Vec::new, |(_, b)| b.clone()),
            })
            .collect();
        ServiceStatus {
            service: self.service.clone(),
            pid: std::process::id(),
            uptime_ns: self.started.elapsed().as_nanos() as u64,
            backend: view.backend().into(),
            iface: view.iface(),
            rebalance: self.rebalance_mode().into(),
            rebalance_off_because: self.off_because.clone(),
            table: view.table(),
            queues,
            moves: self.history.clone(),
            stopping: self.stopping,
            move_cost: self.move_cost(),
        }
    }
}

/// The one line a service says when its default control socket could not
/// be made (it serves on without one): what is wrong, what it costs, and
/// what to do (a user without root may not write /run/flowlane).
fn no_socket_line(e: &Error) -> String {
    let denied = matches!(e, Error::Io { source, .. }
        if source.kind() == std::io::ErrorKind::PermissionDenied);
    let fix = if denied {
        "run it as root, or give --control-socket PATH in a folder this user may write"
    } else {
        "give --control-socket PATH"
    };
    format!(
        "no control socket: {e}; `flowlane status`, `flowlane rebalance` and the daemon cannot reach this service: {fix} (--control-socket none: no socket, no warning)"
    )
}

/// A move made or tried, as [`ServiceControl::poll`] returns it for the
/// service to log ([`move_line`]).
#[derive(Debug)]
pub struct LoggedMove {
    /// Who asked for it: the rebalancing loop (and to which node), a hand
    /// move, the test storm.
    pub cause: MoveCause,
    /// What the service answered.
    pub outcome: Result<MoveReport>,
    /// Why the loop's policy made it: the loads, the level the source was
    /// over, the gain expected and the cost priced (None: not the
    /// policy's).
    pub why: Option<MoveWhy>,
    /// For a move that failed, how long it took from the request to the
    /// error (its line's `duration_us`; a move done says its own). None:
    /// done, or not timed.
    pub failed_after: Option<Duration>,
}

/// One move (or one that failed under way) as the JSON line services log:
/// `{"event":"move", "cause", bucket, from, to, connections,
/// frames_forwarded, frames_held, duration_us, ..., "why": {...}}` or
/// `{"event":"move", "cause", "error", "duration_us", "why"}` (the
/// time from the request to the error, when known); `why`
/// ([`MoveWhy`]) only for the rebalancing loop's moves, so that an
/// operator can audit each: the source CPU's load (`from_load`) over the
/// level that made it give (`over`), the gain expected against the cost
/// priced (`gain`, `cost`, `cost_us`).
pub fn move_line(logged: &LoggedMove) -> serde_json::Value {
    let mut line = serde_json::json!({"event": "move", "cause": logged.cause});
    let fields = match &logged.outcome {
        Ok(r) => serde_json::to_value(r).ok(),
        Err(e) => Some(match logged.failed_after {
            Some(t) => serde_json::json!({
                "error": e.to_string(),
                "duration_us": t.as_secs_f64() * 1e6,
            }),
            None => serde_json::json!({ "error": e.to_string() }),
        }),
    };
    if let (Some(o), Some(serde_json::Value::Object(f))) = (line.as_object_mut(), fields) {
        o.extend(f);
    }
    if let (Some(o), Some(why)) = (line.as_object_mut(), &logged.why) {
        if let Ok(w) = serde_json::to_value(why) {
            o.insert("why".into(), w);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service whose moves do what the test says: each takes its bucket
    /// (or not) and answers (or fails).
    struct Scripted {
        table: std::cell::RefCell<Vec<u32>>,
        /// (takes the bucket, answers Ok) of the next move.
        next: std::cell::Cell<(bool, bool)>,
    }

    impl ServiceView for Scripted {
        fn backend(&self) -> &'static str {
            "xdp"
        }
        fn iface(&self) -> String {
            "test0".into()
        }
        fn queue_counters(&self) -> Vec<QueueCounterSet> {
            Vec::new()
        }
        fn table(&self) -> Vec<u32> {
            self.table.borrow().clone()
        }
        fn hint(
            &self,
            _flow: &flowlane_numa_sched::FlowTuple,
        ) -> std::result::Result<ServiceHint, String> {
            Err("does not say".into())
        }
        fn move_bucket(&self, bucket: u16, to_queue: u32) -> Result<MoveReport> {
            let (takes, answers) = self.next.get();
            if takes {
                self.table.borrow_mut()[usize::from(bucket)] = to_queue;
            }
            match answers {
                true => Ok(MoveReport::default()),
                false => Err(Error::Move("a worker did not answer".into())),
            }
        }
    }

    /// A service that could not make its default control socket says so
    /// in one line that names the cause and what to do: root, or a socket
    /// where this user may write one.
    #[test]
    fn no_control_socket_is_one_line_with_what_to_do() {
        let denied = Error::Io {
            what: "listening on the control socket /run/flowlane/x.1.sock".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        let line = no_socket_line(&denied);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.starts_with("no control socket: listening on the control socket /run/flowlane/x.1.sock: permission denied"), "{line}");
        assert!(
            line.contains("cannot reach this service: run it as root, or give --control-socket PATH in a folder this user may write"),
            "{line}"
        );
        // Another cause: no root to suggest, the flag still.
        let other = Error::Setup("/run/flowlane/x.1.sock exists and is not a socket".into());
        let line = no_socket_line(&other);
        assert!(!line.contains("root"), "{line}");
        assert!(line.contains(": give --control-socket PATH ("), "{line}");
    }

    /// A service with more workers than queues (software spill) says
    /// which workers have no queue and which queue each sends through, so
    /// that its status counts workers and queues apart ("3 workers on 2
    /// queues", not "3 queues").
    #[test]
    fn a_status_tells_workers_without_a_queue_from_queues() {
        struct Spill;
        impl ServiceView for Spill {
            fn backend(&self) -> &'static str {
                "xdp"
            }
            fn iface(&self) -> String {
                "test0".into()
            }
            fn queue_counters(&self) -> Vec<QueueCounterSet> {
                (0..3)
                    .map(|queue| QueueCounterSet {
                        queue,
                        cpu: Some(queue),
                        node: 0,
                        io: Default::default(),
                        tcp: Default::default(),
                    })
                    .collect()
            }
            fn spill_carrier(&self, worker: u32) -> Option<u32> {
                (worker == 2).then_some(0)
            }
            fn hint(
                &self,
                _flow: &flowlane_numa_sched::FlowTuple,
            ) -> std::result::Result<ServiceHint, String> {
                Err("does not say".into())
            }
        }
        let control = ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
        let st = control.status(&Spill);
        let carriers: Vec<Option<u32>> = st.queues.iter().map(|q| q.carrier).collect();
        assert_eq!(carriers, [None, None, Some(0)]);
        assert_eq!(st.shape(), "3 workers on 2 queues (software spill)");
        // A worker per queue, and a kernel-socket service's cores.
        let mut even = st.clone();
        even.queues[2].carrier = None;
        assert_eq!(even.shape(), "3 queues");
        even.queues.truncate(1);
        assert_eq!(even.shape(), "1 queue");
        even.backend = "kernel".into();
        assert_eq!(even.shape(), "1 core");
        // An answer of a version without carriers reads as none.
        let mut v = serde_json::to_value(&st).unwrap();
        v["queues"][2].as_object_mut().unwrap().remove("carrier");
        let old: ServiceStatus = serde_json::from_value(v).unwrap();
        assert_eq!(old.queues[2].carrier, None);
    }

    /// A service that steers with the XDP program answers its counters
    /// with the program's, per receive queue, on its control socket (and
    /// an answer of a version without them reads as none).
    #[test]
    fn the_counters_answer_carries_the_steering_program_s_counters() {
        struct Steered;
        impl ServiceView for Steered {
            fn backend(&self) -> &'static str {
                "xdp"
            }
            fn iface(&self) -> String {
                "test0".into()
            }
            fn queue_counters(&self) -> Vec<QueueCounterSet> {
                Vec::new()
            }
            fn steering(&self) -> Vec<QueueSteering> {
                let s = crate::SteerStats {
                    redirected: 10,
                    passed: 4,
                    no_socket: 2,
                    fragment_dropped: 1,
                };
                vec![QueueSteering::new(0, &s), QueueSteering::new(1, &s)]
            }
            fn hint(
                &self,
                _flow: &flowlane_numa_sched::FlowTuple,
            ) -> std::result::Result<ServiceHint, String> {
                Err("does not say".into())
            }
        }
        let dir = std::env::temp_dir().join(format!("fl-steer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("svc.sock");
        let mut control =
            ServiceControl::without_rebalancing("test", SocketChoice::At(path.clone())).unwrap();
        let asked = std::thread::spawn(move || {
            control_socket::request(&path, &Request::Counters, Duration::from_secs(10))
        });
        while !asked.is_finished() {
            control.poll_view(&Steered);
            std::thread::sleep(Duration::from_millis(1));
        }
        let answer = asked.join().unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let Response::Counters(c) = answer else {
            panic!("{answer:?}");
        };
        assert_eq!(c.steering.len(), 2, "{c:?}");
        assert_eq!(
            (c.steering[1].queue, c.steering[1].no_socket),
            (1, 2),
            "{c:?}"
        );
        assert_eq!(
            (c.steering[0].redirected, c.steering[0].fragment_dropped),
            (10, 1)
        );
        // An answer without them (another version, kernel sockets).
        let mut v = serde_json::to_value(&c).unwrap();
        v.as_object_mut().unwrap().remove("steering");
        let old: ServiceCounters = serde_json::from_value(v).unwrap();
        assert!(old.steering.is_empty());
    }

    /// A service in queue-pair mode answers its counters with its
    /// application threads' and relays' counters, read at each answer; a
    /// service that runs its handlers on the network cores answers none.
    #[test]
    fn the_counters_answer_carries_queue_pair_counters_read_at_each_answer() {
        let view = Scripted {
            table: std::cell::RefCell::new(Vec::new()),
            next: std::cell::Cell::new((false, false)),
        };
        let mut control = ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
        assert_eq!(control.counters(&view).queue_pair, None, "rtc mode");
        let orphaned = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(3));
        let read = orphaned.clone();
        control.report_queue_pairs(move || QueuePairCounters {
            app_threads: 2,
            dead_threads: vec![1],
            connections_orphaned: read.load(std::sync::atomic::Ordering::Relaxed),
            relay_memory: vec![control_socket::RelayMemoryCounters {
                core: 1,
                rx_limit: 4 << 20,
                rx_peak: 1448,
                ..Default::default()
            }],
            ..Default::default()
        });
        let qp = control.counters(&view).queue_pair.expect("queue-pair mode");
        assert_eq!(
            (qp.app_threads, qp.dead_threads, qp.connections_orphaned),
            (2, vec![1], 3)
        );
        assert_eq!(
            (qp.relay_memory[0].core, qp.relay_memory[0].rx_peak),
            (1, 1448)
        );
        orphaned.store(5, std::sync::atomic::Ordering::Relaxed);
        let qp = control.counters(&view).queue_pair.unwrap();
        assert_eq!(qp.connections_orphaned, 5, "read now, not when reported");
    }

    /// In queue-pair mode, the memory the cores' relays gave back counts
    /// towards the heap trim, with the stacks' (none here): a busy spell
    /// whose buffers the relays held is trimmed from the heap too.
    #[test]
    fn the_relays_returned_memory_counts_towards_the_heap_trim() {
        let view = Scripted {
            table: std::cell::RefCell::new(Vec::new()),
            next: std::cell::Cell::new((false, false)),
        };
        let mut control = ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
        let returned = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let read = returned.clone();
        control.report_queue_pairs(move || QueuePairCounters {
            relay_memory: vec![control_socket::RelayMemoryCounters {
                core: 0,
                returned: read.load(std::sync::atomic::Ordering::Relaxed),
                ..Default::default()
            }],
            ..Default::default()
        });
        // A trim may be made at once (the service began long ago).
        let long_ago = Instant::now()
            .checked_sub(2 * HeapTrim::EVERY)
            .unwrap_or_else(Instant::now);
        control.heap = HeapTrim::new(long_ago);
        control.poll_view(&view);
        assert_eq!(control.heap.trims, 0, "nothing returned yet");
        returned.store(HeapTrim::AFTER, std::sync::atomic::Ordering::Relaxed);
        control.heap = HeapTrim::new(long_ago);
        control.poll_view(&view);
        assert_eq!(control.heap.trims, 1, "the relays' returned memory");
    }

    /// Only the loop's moves that failed with their bucket where it was
    /// count towards stopping a default loop.
    #[test]
    fn a_move_that_failed_after_its_bucket_moved_is_no_failure_in_a_row() {
        let mut control = ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
        let failed = |landed| Tried {
            cause: MoveCause::BalanceSameNode,
            outcome: Err(Error::Move("a worker did not answer".into())),
            landed,
            why: None,
            took: Duration::from_millis(3),
        };
        assert!(control.tally(&failed(false)).is_some());
        assert!(control.tally(&failed(false)).is_some());
        assert_eq!(control.failed_in_a_row, 2);
        assert!(control.tally(&failed(true)).is_none());
        assert_eq!(control.failed_in_a_row, 0);
        let h = &control.history;
        assert_eq!(
            (h.failed, h.landed_with_error),
            (2, 1),
            "the history counts every error, apart from those that moved the bucket"
        );
    }

    /// A move made by hand that took its bucket (whether or not it failed
    /// afterwards) is told to the rebalancing loop, which then holds the
    /// bucket there rather than moving it straight back; one that left the
    /// bucket where it was is not.
    #[test]
    fn a_move_made_by_hand_holds_its_bucket_down() {
        for (takes, answers) in [(true, true), (true, false), (false, false)] {
            let view = Scripted {
                table: std::cell::RefCell::new(vec![0, 1, 0, 1]),
                next: std::cell::Cell::new((takes, answers)),
            };
            let mut control =
                ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
            control.auto = Some(AutoRebalance::bare());
            let (m, _) = control.move_by_hand(&view, 2, 1);
            assert_eq!(m.is_ok(), answers);
            let held = control.auto.as_ref().unwrap().is_held(2);
            assert_eq!(held, takes, "({takes}, {answers})");
        }
    }

    /// A move made by hand teaches the loop what moves cost, failed or not
    /// (one that failed, at the time from its request to its error); one
    /// refused before anything moved does not.
    #[test]
    fn a_move_made_by_hand_is_learned_failed_or_not() {
        for (takes, answers) in [(true, true), (true, false), (false, false)] {
            let view = Scripted {
                table: std::cell::RefCell::new(vec![0, 1, 0, 1]),
                next: std::cell::Cell::new((takes, answers)),
            };
            let mut control =
                ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
            control.auto = Some(AutoRebalance::bare());
            let _ = control.move_by_hand(&view, 2, 1);
            let fit_moves = control.auto.as_ref().unwrap().move_cost().fit_moves;
            assert_eq!(fit_moves, 1, "({takes}, {answers})");
            let _ = control.move_by_hand(&Refuses, 2, 1);
            let fit_moves = control.auto.as_ref().unwrap().move_cost().fit_moves;
            assert_eq!(
                fit_moves, 1,
                "({takes}, {answers}): a refusal teaches nothing"
            );
        }
    }

    /// The counters answer carries the loop's learned move cost (what the
    /// daemon serves as `flowlane_rebalance_move_cost_*`); none without a
    /// loop.
    #[test]
    fn the_counters_carry_the_learned_move_cost() {
        let view = Scripted {
            table: std::cell::RefCell::new(vec![0, 1, 0, 1]),
            next: std::cell::Cell::new((true, true)),
        };
        let mut control = ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
        assert_eq!(control.counters(&view).move_cost, None);
        control.auto = Some(AutoRebalance::bare());
        let prior = RebalanceConfig::default().move_costs();
        assert_eq!(
            control.counters(&view).move_cost,
            Some(MoveCostStatus {
                fixed_ns: prior.fixed,
                per_connection_ns: prior.per_connection,
                fit_moves: 0,
                fixed_price: false,
                refused_for_cost: 0,
            })
        );
        let _ = control.move_by_hand(&view, 2, 1);
        let cost = control.counters(&view).move_cost.unwrap();
        assert_eq!(cost.fit_moves, 1, "{cost:?}");
    }

    /// The status answer carries the same learned move cost (`flowlane
    /// rebalance status` shows it); none without a loop.
    #[test]
    fn the_status_carries_the_learned_move_cost() {
        let view = Scripted {
            table: std::cell::RefCell::new(vec![0, 1, 0, 1]),
            next: std::cell::Cell::new((true, true)),
        };
        let mut control = ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
        assert_eq!(control.status(&view).move_cost, None);
        control.auto = Some(AutoRebalance::bare());
        let _ = control.move_by_hand(&view, 2, 1);
        let status = control.status(&view).move_cost.unwrap();
        assert_eq!(status.fit_moves, 1, "{status:?}");
        assert_eq!(Some(status), control.counters(&view).move_cost);
    }

    /// A service without buckets: every move is refused before anything
    /// moves (the trait's default).
    struct Refuses;

    impl ServiceView for Refuses {
        fn backend(&self) -> &'static str {
            "kernel"
        }
        fn iface(&self) -> String {
            "test0".into()
        }
        fn queue_counters(&self) -> Vec<QueueCounterSet> {
            Vec::new()
        }
        fn hint(
            &self,
            _flow: &flowlane_numa_sched::FlowTuple,
        ) -> std::result::Result<ServiceHint, String> {
            Err("does not say".into())
        }
    }

    /// `request` on the control socket of a new `control` for `view`,
    /// polled until answered: the answer, and the moves the polls
    /// returned (what the service logs as move lines).
    fn ask_polling(
        view: &dyn ServiceView,
        tag: &str,
        request: Request,
    ) -> (Response, Vec<Result<MoveReport>>) {
        let dir = std::env::temp_dir().join(format!("fl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("svc.sock");
        let mut control =
            ServiceControl::without_rebalancing("test", SocketChoice::At(path.clone())).unwrap();
        let asked = std::thread::spawn(move || {
            control_socket::request(&path, &request, Duration::from_secs(10))
        });
        let mut moves = Vec::new();
        while !asked.is_finished() {
            moves.extend(control.poll_view(view));
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = std::fs::remove_dir_all(&dir);
        (asked.join().unwrap().unwrap(), moves)
    }

    /// A move asked for by hand and refused before anything moved is
    /// answered to its requester, and is no move the service logs (no
    /// `"event":"move"` line); one made, or one that failed under way,
    /// is.
    #[test]
    fn a_refused_move_by_hand_is_no_move_line() {
        let request = Request::Move {
            bucket: 2,
            to_queue: 1,
        };
        let (answer, moves) = ask_polling(&Refuses, "refmove", request.clone());
        assert!(
            matches!(&answer, Response::Error { message } if message.contains("no RSS buckets")),
            "{answer:?}"
        );
        assert!(moves.is_empty(), "{moves:?}");
        for (takes, answers) in [(true, true), (false, false)] {
            let view = Scripted {
                table: std::cell::RefCell::new(vec![0, 1, 0, 1]),
                next: std::cell::Cell::new((takes, answers)),
            };
            let (_, moves) = ask_polling(&view, "move", request.clone());
            assert_eq!(moves.len(), 1, "({takes}, {answers}): {moves:?}");
            assert_eq!(moves[0].is_ok(), answers);
        }
    }

    /// A move refused before anything moved (a bucket out of range, a
    /// backend without buckets) is answered but not counted as a failed
    /// move; one that failed under way is.
    #[test]
    fn a_refused_move_by_hand_is_no_failed_move() {
        let mut control = ServiceControl::without_rebalancing("test", SocketChoice::Off).unwrap();
        let (m, _) = control.move_by_hand(&Refuses, 2, 1);
        assert!(
            matches!(&m, Err(Error::MoveRefused(e)) if e.contains("no RSS buckets")),
            "{m:?}"
        );
        assert_eq!((control.history.done, control.history.failed), (0, 0));
        let failed = Scripted {
            table: std::cell::RefCell::new(vec![0, 1, 0, 1]),
            next: std::cell::Cell::new((false, false)),
        };
        assert!(control.move_by_hand(&failed, 2, 1).0.is_err());
        assert_eq!(control.history.failed, 1);
    }

    #[test]
    fn the_imbalance_is_measured_over_whole_seconds() {
        let t0 = Instant::now();
        let mut w = LoadWindow {
            at: t0,
            busy: vec![0, 0],
            imbalance: 1.0,
        };
        let mut read = 0;
        w.tick(t0 + Duration::from_millis(500), || {
            read += 1;
            vec![1, 1]
        });
        assert_eq!((read, w.imbalance), (0, 1.0), "not a second yet: not read");
        w.tick(t0 + Duration::from_secs(1), || {
            vec![900_000_000, 300_000_000]
        });
        assert_eq!(w.imbalance, 1.5);
        w.tick(t0 + Duration::from_secs(2), || {
            vec![900_000_000, 300_000_000]
        });
        assert_eq!(w.imbalance, 1.0, "idle second");
        // Nearly idle (a kernel-socket core's wake-ups: 12 ms and 2 ms of
        // CPU in a second) is idle, not 1.71 out of balance.
        w.tick(t0 + Duration::from_secs(3), || {
            vec![912_000_000, 302_000_000]
        });
        assert_eq!(w.imbalance, 1.0, "under the idle mark");
        w.tick(t0 + Duration::from_secs(4), || {
            vec![1_112_000_000, 302_000_000]
        });
        assert_eq!(w.imbalance, 2.0, "20 % busy against 0");
        // A worker count that changed (none does today): the window restarts.
        w.tick(t0 + Duration::from_secs(5), || vec![1, 2, 3]);
        assert_eq!(w.imbalance, 2.0, "the last whole window's");
        assert_eq!(w.busy, [1, 2, 3]);
    }
}
