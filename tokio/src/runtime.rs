//! Starting tokio on queue-pair mode: each application thread runs a
//! current-thread runtime whose loop passes the thread's queue pairs (its
//! bridge among the handlers) whenever a core or a stream wakes it, and
//! runs the application's tasks in between.

use std::future::Future;
use std::sync::Arc;

use flowlane_app::{Placement, Setup};
use flowlane_qp::{AppPort, QueuePairConfig, QueuePairs};
use tokio::runtime::Runtime;
use tokio::task::LocalSet;

use crate::bridge::{Bridge, Counters};
use crate::connector::Connector;
use crate::listener::{AcceptQueue, TcpListener};
use crate::pipe::{NotifyWake, ThreadShared};

/// What to start.
#[derive(Debug, Clone)]
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
}

/// One application thread's share, handed to the application's function
/// for that thread.
#[derive(Debug)]
pub struct Local {
    index: u32,
    placement: Placement,
    listeners: Vec<TcpListener>,
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

    /// Opens connections from this thread's cores.
    pub fn connector(&self) -> Connector {
        Connector::new(self.thread.clone())
    }

    /// Takes this thread's listener on `port` (None: not a configured
    /// port, or taken already).
    pub fn listener(&mut self, port: u16) -> Option<TcpListener> {
        let i = self.listeners.iter().position(|l| l.port() == port)?;
        Some(self.listeners.swap_remove(i))
    }
}

/// What a thread's set-up hands its loop.
struct Prepared {
    runtime: Runtime,
    shared: Arc<ThreadShared>,
    listeners: Vec<TcpListener>,
}

/// Starts queue-pair mode with a tokio runtime on each application
/// thread, running `app(local)` there as a local task (`tokio::spawn` in
/// it spawns on the same thread). Start the network backend next, calling
/// [`QueuePairs::setup_core`] in its per-core set-up; stop it first, then
/// [`QueuePairs::stop`], which ends the runtimes (their tasks are
/// dropped).
pub fn start<F, Fut>(config: AsyncConfig, app: F) -> Result<(QueuePairs, Arc<Counters>), String>
where
    F: Fn(Local) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let counters = Arc::new(Counters::default());
    let c = counters.clone();
    let (ports, backlog) = (config.ports, config.backlog.max(1));
    let setup = move |s: &mut dyn Setup| -> Result<Prepared, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build a tokio runtime: {e}"))?;
        let shared = Arc::new(ThreadShared::default());
        let mut bridge = Bridge::new(shared.clone(), c.clone());
        let mut listeners = Vec::new();
        for &port in &ports {
            let queue = Arc::new(AcceptQueue::new(backlog));
            bridge.add_listener(port, queue.clone());
            listeners.push(TcpListener::new(port, queue));
        }
        let h = s.add_boxed(Box::new(bridge));
        for &port in &ports {
            s.listen_with(port, h)
                .map_err(|e| format!("listening on port {port}: {e}"))?;
        }
        Ok(Prepared {
            runtime,
            shared,
            listeners,
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
    let tick = port.tick();
    let local = Local {
        index: port.index(),
        placement: port.placement(),
        listeners: p.listeners,
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
    tasks.spawn_local(app(local));
    let shared = p.shared;
    tasks.block_on(&p.runtime, async move {
        while port.poll() {
            // The tasks the pass woke run before the loop waits (a
            // notification already stored would not yield).
            tokio::task::yield_now().await;
            let _ = tokio::time::timeout(tick, shared.notify.notified()).await;
        }
    });
}
