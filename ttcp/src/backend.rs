//! What a data path must provide to be measured, and the state its threads share
//! with the coordinator (t0, stop, connection counts, the first error).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;

use crate::plan::Plan;
use crate::procfs::TcpSnmp;

/// Test phases relative to t0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before t0 (connections open, sync not done).
    Pre = 0,
    /// `[0, W)`.
    Warmup = 1,
    /// `[W, W + T)`: the only bytes that count.
    Measured = 2,
    /// `[W + T, W + T + C)`.
    Cooldown = 3,
    /// After the cool-down (stragglers while stopping).
    Post = 4,
}

/// Warm-up, measured window and cool-down lengths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Warm-up.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// Cool-down.
    pub cooldown: Duration,
}

impl Schedule {
    /// From seconds.
    pub fn from_secs(w: f64, t: f64, c: f64) -> Schedule {
        Schedule {
            warmup: Duration::from_secs_f64(w),
            duration: Duration::from_secs_f64(t),
            cooldown: Duration::from_secs_f64(c),
        }
    }

    /// Offset of the end of the cool-down from t0.
    pub fn end(&self) -> Duration {
        self.warmup + self.duration + self.cooldown
    }

    /// The phase of `now` for a test that started at `t0` (`None`: not started).
    pub fn phase(&self, t0: Option<Instant>, now: Instant) -> Phase {
        let Some(t0) = t0 else { return Phase::Pre };
        let Some(d) = now.checked_duration_since(t0) else {
            return Phase::Pre;
        };
        if d < self.warmup {
            Phase::Warmup
        } else if d < self.warmup + self.duration {
            Phase::Measured
        } else if d < self.end() {
            Phase::Cooldown
        } else {
            Phase::Post
        }
    }
}

/// State shared by a run's data threads and its coordinator.
#[derive(Debug)]
pub struct Shared {
    /// The phases.
    pub schedule: Schedule,
    t0: OnceLock<Instant>,
    /// Set by the coordinator: threads close their connections and return.
    pub stop: AtomicBool,
    /// Receiver: data connections accepted so far.
    pub accepted: AtomicUsize,
    /// Receiver: data connections ended so far (the stop waits for the
    /// sender's closes: [`Shared::open_connections`]).
    pub ended: AtomicUsize,
    /// Sender: data connections established so far.
    pub connected: AtomicUsize,
    /// Local address of the first data connection (picks the interface).
    pub local: OnceLock<SocketAddr>,
    failed: Mutex<Option<String>>,
    interrupted: AtomicBool,
}

impl Shared {
    /// New shared state for `schedule`.
    pub fn new(schedule: Schedule) -> Shared {
        Shared {
            schedule,
            t0: OnceLock::new(),
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            ended: AtomicUsize::new(0),
            connected: AtomicUsize::new(0),
            local: OnceLock::new(),
            failed: Mutex::new(None),
            interrupted: AtomicBool::new(false),
        }
    }

    /// Sets t0 (the first call wins) and returns it.
    pub fn start(&self, t0: Instant) -> Instant {
        *self.t0.get_or_init(|| t0)
    }

    /// t0, once started.
    pub fn t0(&self) -> Option<Instant> {
        self.t0.get().copied()
    }

    /// The phase now.
    pub fn phase_at(&self, now: Instant) -> Phase {
        self.schedule.phase(self.t0(), now)
    }

    /// The end of the cool-down, once started.
    pub fn end(&self) -> Option<Instant> {
        self.t0().map(|t| t + self.schedule.end())
    }

    /// Receiver: the data connections accepted that have not ended.
    pub fn open_connections(&self) -> usize {
        let ended = self.ended.load(Ordering::Relaxed);
        self.accepted.load(Ordering::Relaxed).saturating_sub(ended)
    }

    /// Whether threads should stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Records a thread's failure (the first one is kept) and stops the run.
    pub fn fail(&self, why: String) {
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(why);
        }
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Ends the run because a signal asked it to (SIGTERM, SIGINT, SIGHUP,
    /// SIGQUIT): a failure like any other ([`Shared::fail`]), so that the
    /// run ends the normal way (the peer told, the data path stopped
    /// through its clean-up), remembered as an interruption for the
    /// summaries ([`Shared::interrupted`]).
    pub fn interrupt(&self, why: String) {
        self.interrupted.store(true, Ordering::Relaxed);
        self.fail(why);
    }

    /// Whether a signal ended the run ([`Shared::interrupt`]).
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed)
    }

    /// The first failure, if any.
    pub fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Overlap-mode sums over measured iterations.
#[derive(Debug, Clone, Copy, Default)]
pub struct OverlapSums {
    /// Iterations.
    pub iterations: u64,
    /// Time spent computing.
    pub compute_ns: u64,
    /// Send start to full reply.
    pub total_ns: u64,
    /// Time waiting for the reply after the computation ended.
    pub wait_ns: u64,
    /// Iterations whose whole reply had arrived when the computation ended.
    pub reply_done_at_compute_end: u64,
}

/// What one data thread counted.
#[derive(Debug, Clone, Default)]
pub struct ThreadStats {
    /// Payload bytes by [`Phase`] (sent for senders, received for receivers).
    pub bytes: [u64; 5],
    /// Connections this thread handled.
    pub connections: usize,
    /// Latency/overlap: round-trip times (ns) of iterations sent in the window.
    pub rtt_ns: Option<Histogram<u64>>,
    /// Overlap mode sums.
    pub overlap: OverlapSums,
}

impl ThreadStats {
    /// Adds `n` bytes to `phase`.
    pub fn add(&mut self, phase: Phase, n: usize) {
        self.bytes[phase as usize] += n as u64;
    }

    /// Adds another thread's counts.
    pub fn merge(&mut self, o: ThreadStats) -> Result<()> {
        for (a, b) in self.bytes.iter_mut().zip(o.bytes) {
            *a += b;
        }
        self.connections += o.connections;
        match (&mut self.rtt_ns, o.rtt_ns) {
            (Some(a), Some(b)) => a.add(&b).map_err(|e| anyhow!("histogram merge: {e:?}"))?,
            (a @ None, b) => *a = b,
            (Some(_), None) => {}
        }
        let (a, b) = (&mut self.overlap, o.overlap);
        a.iterations += b.iterations;
        a.compute_ns += b.compute_ns;
        a.total_ns += b.total_ns;
        a.wait_ns += b.wait_ns;
        a.reply_done_at_compute_end += b.reply_done_at_compute_end;
        Ok(())
    }
}

/// A new round-trip-time histogram: 1 ns to 100 s, 3 significant digits.
pub fn rtt_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Called once the data threads have been told to stop: stops what they
/// run on and returns what they counted (the flowlane backend reads its
/// per-worker counters here).
pub type Finish = Box<dyn FnOnce() -> Result<ThreadStats>>;

/// Reads a data path's own TCP counters now (summed over its queues), in
/// the form of `/proc/net/snmp`'s; `None` once the data path is gone.
pub type TcpReader = Arc<dyn Fn() -> Option<TcpSnmp> + Send + Sync>;

/// A running set of data threads.
pub struct Workers {
    handles: Vec<JoinHandle<Result<ThreadStats>>>,
    finish: Option<Finish>,
    tcp: Option<TcpReader>,
    thread_cpus: Option<Vec<Option<usize>>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.handles.len())
            .field("finish", &self.finish.is_some())
            .field("tcp", &self.tcp.is_some())
            .field("thread_cpus", &self.thread_cpus)
            .finish()
    }
}

impl Workers {
    /// Wraps spawned threads.
    pub fn new(handles: Vec<JoinHandle<Result<ThreadStats>>>) -> Workers {
        Workers {
            handles,
            finish: None,
            tcp: None,
            thread_cpus: None,
        }
    }

    /// Data threads that are not ours to join (a data path's workers):
    /// `finish` stops them and returns their counts.
    pub fn custom(finish: Finish) -> Workers {
        Workers {
            handles: Vec::new(),
            finish: Some(finish),
            tcp: None,
            thread_cpus: None,
        }
    }

    /// The data path counts its TCP segments itself (flowlane's TCP, which
    /// `/proc/net/snmp` never sees): `tcp` reads them.
    pub fn with_tcp(mut self, tcp: TcpReader) -> Workers {
        self.tcp = Some(tcp);
        self
    }

    /// The data path's own TCP counters, where it has them.
    pub fn tcp(&self) -> Option<TcpReader> {
        self.tcp.clone()
    }

    /// The data path placed its data threads itself (flowlane: one worker
    /// per queue, whatever `-m` asked): their CPUs, one entry per thread
    /// (`None`: not pinned).
    pub fn with_thread_cpus(mut self, cpus: Vec<Option<usize>>) -> Workers {
        self.thread_cpus = Some(cpus);
        self
    }

    /// The data threads' CPUs where the data path placed them itself;
    /// `None` where they are the `-m` mappings' threads.
    pub fn thread_cpus(&self) -> Option<Vec<Option<usize>>> {
        self.thread_cpus.clone()
    }

    /// Waits for every thread and merges their counts; the first error wins.
    pub fn join(self) -> Result<ThreadStats> {
        let mut total = ThreadStats::default();
        let mut first_err = None;
        for h in self.handles {
            match h.join() {
                Ok(Ok(s)) => total.merge(s)?,
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow!("a data thread panicked"));
                }
            }
        }
        if let Some(f) = self.finish {
            match f() {
                Ok(s) => total.merge(s)?,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }
}

/// Which of the process's threads carry a backend's data, for the per-thread
/// CPU figures (`/proc/self/task/<tid>/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataThreads {
    /// Thread-name prefixes (`comm`): a thread that starts with any.
    pub prefixes: &'static [&'static str],
    /// How reports name them.
    pub label: &'static str,
}

/// A data path that flowlane-ttcp can measure: kernel sockets, or flowlane's
/// own TCP on the AF_XDP data path.
pub trait Backend {
    /// `kernel` or `flowlane`.
    fn name(&self) -> &'static str;

    /// The threads that carry the data (their CPU time is reported apart).
    fn data_threads(&self) -> DataThreads;

    /// Binds the receiver's data ports (errors now, before any sync) and starts its
    /// threads: count received bytes by phase, echo in latency/overlap mode, until
    /// `shared.stop`.
    fn start_receiver(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers>;

    /// Starts the sender's threads: open the connections, wait for t0, then send
    /// (or ping-pong) until the end of the cool-down or `shared.stop`.
    fn start_sender(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases() {
        let s = Schedule::from_secs(1.0, 2.0, 0.5);
        let t0 = Instant::now();
        let at = |ms: u64| s.phase(Some(t0), t0 + Duration::from_millis(ms));
        assert_eq!(s.phase(None, t0), Phase::Pre);
        assert_eq!(at(0), Phase::Warmup);
        assert_eq!(at(999), Phase::Warmup);
        assert_eq!(at(1000), Phase::Measured);
        assert_eq!(at(2999), Phase::Measured);
        assert_eq!(at(3000), Phase::Cooldown);
        assert_eq!(at(3500), Phase::Post);
        assert_eq!(s.end(), Duration::from_millis(3500));
    }

    #[test]
    fn first_start_and_first_failure_win() {
        let sh = Shared::new(Schedule::from_secs(0.0, 1.0, 0.0));
        let t = Instant::now();
        assert_eq!(sh.start(t), t);
        assert_eq!(sh.start(t + Duration::from_secs(1)), t);
        sh.fail("a".into());
        sh.fail("b".into());
        assert_eq!(sh.failure().as_deref(), Some("a"));
        assert!(sh.stopping());
    }

    #[test]
    fn merge_sums_and_histograms() {
        let mut a = ThreadStats::default();
        a.add(Phase::Measured, 10);
        let mut b = ThreadStats::default();
        b.add(Phase::Measured, 5);
        b.add(Phase::Warmup, 1);
        let mut h = rtt_histogram();
        h.record(1000).unwrap();
        b.rtt_ns = Some(h);
        b.connections = 2;
        a.merge(b).unwrap();
        assert_eq!(a.bytes, [0, 1, 15, 0, 0]);
        assert_eq!(a.connections, 2);
        assert_eq!(a.rtt_ns.unwrap().len(), 1);
    }
}
