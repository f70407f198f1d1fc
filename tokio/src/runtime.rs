//! Starting tokio on queue-pair mode: each application thread runs a
//! current-thread runtime whose loop passes the thread's queue pairs (its
//! bridge among the handlers) whenever a core or a stream wakes it, and
//! runs the application's tasks in between.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use flowlane_app::{Placement, Setup, SetupError, StartError};
use flowlane_qp::{AppPort, QueuePairConfig, QueuePairs};
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, LocalSet};

use crate::bridge::{Bridge, Counters};
use crate::connector::Connector;
use crate::listener::{AcceptQueue, TcpListener};
use crate::pipe::{NotifyWake, StallWake, ThreadShared};
use crate::stop::StopSignal;

/// What to start: [`AsyncConfig::new`] for the usual service (its fields
/// are public, to change any of them).
#[derive(Clone)]
pub struct AsyncConfig {
    /// The network cores and application threads (see
    /// [`QueuePairConfig`]).
    pub queue_pairs: QueuePairConfig,
    /// The ports to listen on; every application thread gets a
    /// [`TcpListener`] for each.
    pub ports: Vec<u16>,
    /// Accepted connections a thread's listener holds before `accept`
    /// takes them; past it new ones are reset, counted in
    /// [`Counters::refused_backlog`].
    pub backlog: usize,
    /// Which SYNs the listeners take (None: every one): a SYN it refuses
    /// is answered with a reset and counted by the stack (`syn_refused`),
    /// before any connection exists, as the services' `--allow-from` does
    /// ([`flowlane_app::ConnHandler::syn_filter`]). SYNs for a thread
    /// whose listener was dropped are refused alike, whatever it says.
    pub syn_filter: Option<flowlane_app::SynFilter>,
}

/// [`AsyncConfig::backlog`] in [`AsyncConfig::new`]: the backlog tokio's
/// own `TcpListener::bind` asks `listen(2)` for.
pub const BACKLOG: usize = 1024;

impl AsyncConfig {
    /// Listeners on `ports` on every application thread of `queue_pairs`
    /// ([`QueuePairConfig::new`] for the usual one), each holding up to
    /// [`BACKLOG`] connections not accepted yet, every SYN taken.
    pub fn new(queue_pairs: QueuePairConfig, ports: impl Into<Vec<u16>>) -> AsyncConfig {
        AsyncConfig {
            queue_pairs,
            ports: ports.into(),
            backlog: BACKLOG,
            syn_filter: None,
        }
    }
}

impl std::fmt::Debug for AsyncConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncConfig")
            .field("queue_pairs", &self.queue_pairs)
            .field("ports", &self.ports)
            .field("backlog", &self.backlog)
            .field("syn_filter", &self.syn_filter.is_some())
            .finish()
    }
}

/// One application thread's share, handed to the application's function
/// for that thread.
#[derive(Debug)]
pub struct Local {
    index: u32,
    placement: Placement,
    listeners: Vec<TcpListener>,
    /// Every port's accept queue, for a listener taken again once the one
    /// taken before was dropped.
    queues: Vec<(u16, Arc<AcceptQueue>)>,
    thread: Arc<ThreadShared>,
}

impl Local {
    /// The application thread's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Where the thread runs (its CPU if pinned, its NUMA node).
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Tells this thread's tasks when the service begins to stop, so that
    /// they end their connections gracefully within its drain
    /// ([`StopSignal`]).
    pub fn stop_signal(&self) -> StopSignal {
        StopSignal::new(&self.thread.stop)
    }

    /// Opens connections from this thread's cores.
    pub fn connector(&self) -> Connector {
        Connector::new(self.thread.clone())
    }

    /// Takes this thread's listener on `port`; again once the one taken
    /// before was dropped, as a port is bound again once its listener is
    /// closed: the connections its drop refused stay refused, those
    /// arriving from now on are taken (None: not a configured port, or
    /// its listener is held).
    pub fn listener(&mut self, port: u16) -> Option<TcpListener> {
        if let Some(i) = self.listeners.iter().position(|l| l.port() == port) {
            return Some(self.listeners.swap_remove(i));
        }
        let (_, queue) = self.queues.iter().find(|(p, _)| *p == port)?;
        TcpListener::again(port, queue)
    }
}

/// What a thread's set-up hands its loop.
struct Prepared {
    runtime: Runtime,
    shared: Arc<ThreadShared>,
    listeners: Vec<TcpListener>,
    queues: Vec<(u16, Arc<AcceptQueue>)>,
}

/// Starts queue-pair mode with a tokio runtime on each application
/// thread, running `app(local)` there as a local task (`tokio::spawn` in
/// it spawns on the same thread; `app` itself is called inside the
/// runtime, so it may spawn too). Start the network backend next, calling
/// [`QueuePairs::setup_core`] in its per-core set-up; stop it first, then
/// [`QueuePairs::stop`], which ends the runtimes (their tasks are
/// dropped).
///
/// A panic in `app` or in its future ends the thread as a panicked
/// application thread: the network cores reset its connections and go on
/// with the other threads', its streams and listeners wherever they are
/// polled read `ConnectionAborted`, and [`QueuePairs::dead_threads`] and
/// [`QueuePairs::stop`] report it. One in a task the application spawned
/// (`tokio::spawn`, `spawn_local`) ends only that task, as on any tokio
/// runtime: its streams are dropped with it (closed, lingering for the
/// peer's FIN: [`TcpStream`](crate::TcpStream)), its
/// `JoinHandle` gives the panic, and the thread goes on serving; await
/// the handle to make the panic the function's own.
///
/// # Errors
/// [`QueuePairs::start`]'s; a tokio runtime that could not be built is
/// a [`StartErrorKind::Os`](flowlane_app::StartErrorKind::Os) error, its
/// `io::Error` the source.
pub fn start<F, Fut>(config: AsyncConfig, app: F) -> Result<(QueuePairs, Arc<Counters>), StartError>
where
    F: Fn(Local) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let counters = Arc::new(Counters::default());
    let c = counters.clone();
    let (ports, backlog) = (config.ports, config.backlog.max(1));
    let syn_filter = config.syn_filter;
    // A `StartError` of its own goes back as it is (`StartError::setup`).
    let setup = move |s: &mut dyn Setup| -> Result<Prepared, SetupError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                StartError::os(
                    format!(
                        "application thread {}: cannot build a tokio runtime",
                        s.queue()
                    ),
                    e,
                )
            })?;
        let shared = Arc::new(ThreadShared::default());
        let mut bridge = Bridge::new(shared.clone(), c.clone(), syn_filter.clone());
        let mut listeners = Vec::new();
        let mut queues = Vec::new();
        for &port in &ports {
            let queue = Arc::new(AcceptQueue::new(backlog));
            bridge.add_listener(port, queue.clone());
            listeners.push(TcpListener::new(port, queue.clone()));
            queues.push((port, queue));
        }
        let h = s.add_boxed(Box::new(bridge));
        for &port in &ports {
            s.listen_with(port, h).map_err(|e| {
                StartError::setup(
                    format!(
                        "application thread {}: cannot listen on port {port} (given twice in \
                         AsyncConfig's ports?)",
                        s.queue()
                    ),
                    e.into(),
                )
            })?;
        }
        Ok(Prepared {
            runtime,
            shared,
            listeners,
            queues,
        })
    };
    let run = move |port: AppPort, p: Prepared| drive(port, p, &app);
    let qp = QueuePairs::start_with(config.queue_pairs, setup, run)?;
    Ok((qp, counters))
}

/// One application thread's loop: passes the queue pairs when woken (at
/// least every tick), yielding to the application's tasks in between.
fn drive<F, Fut>(mut port: AppPort, p: Prepared, app: &F)
where
    F: Fn(Local) -> Fut,
    Fut: Future<Output = ()> + 'static,
{
    port.set_notify(Arc::new(NotifyWake(p.shared.clone())));
    port.set_on_stall(Arc::new(StallWake(p.shared.clone())));
    let moves = p.shared.clone();
    port.set_on_move(Box::new(move |conn, placement| {
        moves.moved(conn, placement)
    }));
    let figures = p.shared.clone();
    port.set_on_info(Box::new(move |conn, info| figures.figures(conn, info)));
    let tick = port.tick();
    let local = Local {
        index: port.index(),
        placement: port.placement(),
        listeners: p.listeners,
        queues: p.queues,
        thread: p.shared.clone(),
    };
    // However the loop ends (stopped, or a panic unwinding): the opens not
    // taken fail, as do later ones.
    struct Stopped(Arc<ThreadShared>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.stopped();
        }
    }
    let _stopped = Stopped(p.shared.clone());
    let tasks = LocalSet::new();
    let shared = p.shared;
    tasks.block_on(&p.runtime, async move {
        // Called in the runtime and the local set: the function may spawn
        // (`tokio::spawn`, `spawn_local`) before its future first runs.
        let app = tokio::task::spawn_local(app(local));
        watched(app, passes(&mut port, &shared.notify, tick)).await;
    });
}

/// Runs `run` (the loop) to its end, and the application's function's
/// task beside it: a panic of that task unwinds this thread (the runtime's
/// own thread, out of `block_on`), which thus ends as an application
/// thread that panicked (the cores reset its connections,
/// [`QueuePairs::dead_threads`] and [`QueuePairs::stop`] report it). The
/// function returning ends nothing: the tasks it spawned go on.
async fn watched(app: JoinHandle<()>, run: impl Future<Output = ()>) {
    let mut app = Some(app);
    let mut run = pin!(run);
    poll_fn(|cx| {
        if let Some(task) = app.as_mut() {
            if let Poll::Ready(done) = Pin::new(task).poll(cx) {
                app = None;
                if let Err(e) = done {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
        }
        run.as_mut().poll(cx)
    })
    .await
}

/// What the loop passes: the thread's queue pairs.
trait Passes {
    /// One pass; false once the loop must end.
    fn pass(&mut self) -> bool;
    /// Messages wait that the last pass left.
    fn pending(&self) -> bool;
}

impl Passes for AppPort {
    fn pass(&mut self) -> bool {
        self.poll()
    }

    fn pending(&self) -> bool {
        AppPort::pending(self)
    }
}

/// Passes `port` until it ends: again at once while it left messages
/// (the cores' wakes for them collapsed into the one `notify` stored),
/// else once `notify` wakes the loop or `tick` passed; the tasks a pass
/// woke run before the next.
async fn passes(port: &mut impl Passes, notify: &Notify, tick: Duration) {
    while port.pass() {
        // The tasks the pass woke run before the loop waits or passes
        // again (a notification already stored would not yield).
        tokio::task::yield_now().await;
        if !port.pending() {
            let _ = tokio::time::timeout(tick, notify.notified()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    /// A port with `left` passes' worth of messages queued, counting its
    /// passes.
    struct Backlog {
        left: u32,
        passes: u32,
    }

    impl Passes for Backlog {
        fn pass(&mut self) -> bool {
            self.passes += 1;
            self.left = self.left.saturating_sub(1);
            true
        }
        fn pending(&self) -> bool {
            self.left > 0
        }
    }

    /// While the port reports messages left, each time the loop runs it
    /// passes again without waiting for a wake (none comes here) or the
    /// tick (an hour); once it has none left, it waits.
    #[test]
    fn the_loop_passes_again_at_once_while_messages_wait() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _in = rt.enter();
        let notify = Notify::new();
        let mut port = Backlog { left: 3, passes: 0 };
        {
            let mut run = pin!(passes(&mut port, &notify, Duration::from_secs(3600)));
            let mut cx = Context::from_waker(Waker::noop());
            // Each poll: a pass, then the yield to the tasks.
            for _ in 0..10 {
                assert_eq!(run.as_mut().poll(&mut cx), Poll::Pending);
            }
        }
        // Three passes took the backlog; the loop then waits on `notify`.
        assert_eq!(port.passes, 3);
    }

    /// The usual configuration: the ports given, a backlog of 1024, no
    /// SYN filter.
    #[test]
    fn a_config_s_defaults_are_the_usual_service_s() {
        let cores = Placement::unpinned_cores(2);
        let c = AsyncConfig::new(QueuePairConfig::new(&cores), [80, 443]);
        assert_eq!(c.ports, [80, 443]);
        assert_eq!(c.backlog, 1024);
        assert!(c.syn_filter.is_none());
        assert_eq!(c.queue_pairs.app_threads.len(), 2);
    }
}
