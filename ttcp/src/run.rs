//! One receiver or sender run: sync, phases, snapshots at the window edges,
//! the report. Every wait has a deadline (see [`crate::sync`]).

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use flowlane_apps::service::ServiceSignals;
use flowlane_apps::{out, outln};
use flowlane_dataplane::service_args::ExecMode;
use flowlane_dataplane::stoppable_thread::StoppableThread;

use crate::backend::{Backend, DataThreads, Schedule, Shared, TcpReader, ThreadStats, Workers};
use crate::cli::{BackendKind, RunArgs};
use crate::flowlane::Flowlane;
use crate::iface::iface_for;
use crate::kernel::Kernel;
use crate::plan::Plan;
use crate::procfs::ProcFs;
use crate::report::{self, Inputs, Report};
use crate::snapshot::{Probe, Snapshot};
use crate::sync::{mismatch, Ctl, Mode, Msg, CONNECT_TIMEOUT, CONTROL_TIMEOUT};

/// The receiver keeps reading this long after its cool-down so that the sender,
/// whose clock started half an RTT later, finishes without errors.
const GRACE: Duration = Duration::from_millis(250);

/// How long after [`GRACE`] the receiver waits for its data connections to
/// end before it stops: the sender closes them at its cool-down's end, and
/// each close's FIN comes after what its socket still holds (megabytes on a
/// fast path, late on a loaded host). Stopping before would reset them
/// (the data path's stop aborts what is open), which the peer sees as an
/// error the run did not have. Bounded: a sender that never closes (gone,
/// or a peer that is not ttcp) delays the report by this at most.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// How long a sender whose run failed waits for the receiver's reason
/// (`Abort`) before it reports its own.
const PEER_REASON_WAIT: Duration = Duration::from_millis(500);

/// Runs `-r` or `-s`; prints the report; errors are one line. A run whose
/// measured window measured nothing ([`Report::nothing_measured`]) prints
/// its report (n/a figures) and fails.
pub fn run(args: &RunArgs) -> Result<Report> {
    let plan = args.plan()?;
    if let Some(bed) = &args.data_path.bed {
        // Entering a bed needs root: say so before the bed is looked at.
        flowlane_dataplane::privileges::require_root("flowlane-ttcp --bed")?;
        // Read the bed here (root namespace), run inside it (same pid).
        return Err(flowlane_testbed::reexec_in_bed(bed));
    }
    raise_nofile(plan.connections().saturating_add(256))?;
    let backend = for_kind(args.backend, args.exec)?;
    let shared = Arc::new(Shared::new(Schedule::from_secs(
        plan.params.warmup_s,
        plan.params.duration_s,
        plan.params.cooldown_s,
    )));
    let fs = ProcFs::new(&args.procfs_root);
    // A named interface is checked now, before a sender is accepted (or a
    // receiver asked); one found from the traffic's address is known only
    // once connected (`probe`).
    if let Some(nic) = &args.nic {
        fs.if_counters(nic)
            .map_err(|e| anyhow!("--nic {nic}: {e:#} (see `ip link`)"))?;
    }
    let _signals = SignalWatch::start(shared.clone())?;
    let mut report = if plan.receiver {
        receiver(args, &plan, backend.as_ref(), &shared, &fs)?
    } else {
        sender(args, &plan, backend.as_ref(), &shared, &fs)?
    };
    // A closed pipe (`| head`) drops the report: the run still ends as
    // usual (its data path released).
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.text());
    }
    report.peer.take();
    if let Some(why) = report.nothing_measured() {
        bail!("{why}: no figures");
    }
    Ok(report)
}

/// What a run that a signal ended fails with (exit status 1, as any
/// failure).
pub const INTERRUPTED: &str =
    "interrupted by a signal (SIGTERM, SIGINT, SIGHUP or SIGQUIT) before the test ended";

/// A thread that ends the run the normal way when SIGTERM, SIGINT, SIGHUP
/// or SIGQUIT arrives (the services' [`ServiceSignals`]): the run fails
/// with [`INTERRUPTED`] ([`Shared::interrupt`]), so that the peer is told,
/// the data path stops through its clean-up (flowlane's control socket
/// removed, its `dataplane` summary printed, marked `interrupted`) and the
/// error is one line. Stopped when dropped.
struct SignalWatch {
    _thread: StoppableThread,
}

/// How often [`SignalWatch`] looks at the signal flags.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

impl SignalWatch {
    fn start(shared: Arc<Shared>) -> Result<SignalWatch> {
        let signals = ServiceSignals::install()?;
        let thread = StoppableThread::spawn("ttcp-signals", move |stop| {
            while !stop.is_set() {
                if signals.stop_requested() {
                    shared.interrupt(INTERRUPTED.into());
                    return;
                }
                stop.sleep(SIGNAL_POLL);
            }
        })
        .context("starting the signal watch thread")?;
        Ok(SignalWatch { _thread: thread })
    }
}

/// The backend for `kind`, its handlers run as `mode` says.
pub fn for_kind(kind: BackendKind, mode: ExecMode) -> Result<Box<dyn Backend>> {
    match kind {
        BackendKind::Kernel => Ok(Box::new(Kernel(mode))),
        BackendKind::Flowlane => Ok(Box::new(Flowlane(mode))),
    }
}

/// Lets the process open `need` descriptors (soft limit up to the hard limit).
fn raise_nofile(need: usize) -> Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if (need as u64) <= soft {
        return Ok(());
    }
    if (need as u64) > hard {
        bail!("{need} file descriptors needed, the hard limit is {hard} (raise `ulimit -Hn`)");
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(())
}

fn verbose(args: &RunArgs, msg: impl FnOnce() -> String) {
    if args.verbose {
        eprintln!("flowlane-ttcp: {}", msg());
    }
}

/// Sleeps until `t`, waking every 20 ms to notice a failed data thread.
fn sleep_until(shared: &Shared, t: Instant) -> Result<()> {
    loop {
        if let Some(why) = shared.failure() {
            return Err(anyhow!(why));
        }
        let now = Instant::now();
        if now >= t {
            return Ok(());
        }
        std::thread::sleep((t - now).min(Duration::from_millis(20)));
    }
}

/// Receiver: waits until every data connection has ended (the sender
/// closed it and it was read to its end), or `until`.
fn wait_for_closes(shared: &Shared, until: Instant, args: &RunArgs) -> Result<()> {
    let from = Instant::now();
    loop {
        if let Some(why) = shared.failure() {
            return Err(anyhow!(why));
        }
        let open = shared.open_connections();
        if open == 0 || Instant::now() >= until {
            verbose(args, || {
                let ms = from.elapsed().as_millis();
                match open {
                    0 => format!("every data connection ended {ms} ms after the grace"),
                    n => format!("{n} data connections still open {ms} ms after the grace: the stop resets them"),
                }
            });
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn probe(
    args: &RunArgs,
    fs: &ProcFs,
    shared: &Shared,
    plan: &Plan,
    data_threads: DataThreads,
    data_path_tcp: Option<TcpReader>,
) -> Result<Probe> {
    let iface = match &args.nic {
        Some(n) => n.clone(),
        None => {
            let local = shared.local.get().map(|a| a.ip()).unwrap_or(plan.addr);
            iface_for(local).ok_or_else(|| {
                anyhow!("no interface holds local address {local}: name one with --nic")
            })?
        }
    };
    // Fail now, not at the window edge (`--nic`'s was checked before sync).
    fs.if_counters(&iface)?;
    // A tree without /proc/self/task (tests' fake trees) reports no thread CPU.
    let data_threads = fs
        .threads_cpu(data_threads.prefixes)
        .is_ok()
        .then_some(data_threads);
    Ok(Probe {
        irq: fs.irq_source(&iface),
        iface,
        fs: fs.clone(),
        data_threads,
        data_path_tcp,
    })
}

/// Sleeps through warm-up and window, snapshotting at the window edges.
fn measure(shared: &Shared, probe: &Probe, args: &RunArgs) -> Result<(Snapshot, Snapshot)> {
    let t0 = shared.t0().expect("started");
    let s = shared.schedule;
    sleep_until(shared, t0 + s.warmup)?;
    let a = probe.snapshot()?;
    verbose(args, || "measured window starts".into());
    sleep_until(shared, t0 + s.warmup + s.duration)?;
    let b = probe.snapshot()?;
    verbose(args, || "measured window ends".into());
    Ok((a, b))
}

fn user_hz() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map(|v| v as u64)
        .unwrap_or(100)
}

/// The report of a run whose data threads were at `thread_cpus`.
#[allow(clippy::too_many_arguments)]
fn finish(
    role: &'static str,
    plan: &Plan,
    thread_cpus: Vec<Option<usize>>,
    probe: &Probe,
    fs: &ProcFs,
    (a, b): (Snapshot, Snapshot),
    stats: ThreadStats,
) -> Report {
    // Overlap mode records no round-trip times (its iterations hold the
    // compute): its figures are the overlap's. Round trips are counted in
    // the nominal window, as bytes are: their rate is over -t.
    let latency = stats
        .rtt_ns
        .as_ref()
        .filter(|_| plan.params.mode == Mode::Latency)
        .map(|h| report::latency_from(h, plan.params.msg_size, plan.params.duration_s));
    let overlap = (plan.params.mode == Mode::Overlap && role == "sender")
        .then(|| report::overlap_from(&stats.overlap, plan.overlap_us));
    report::build(Inputs {
        role,
        params: &plan.params,
        thread_cpus,
        connections: stats.connections,
        address: plan.addr.to_string(),
        iface: probe.iface.clone(),
        congestion: plan.congestion_name(),
        irq: probe.irq,
        start: &a,
        end: &b,
        bytes: stats.bytes,
        tsc: fs.tsc_rate().map_err(|e| format!("{e:#}")),
        user_hz: user_hz(),
        latency,
        overlap,
        data_threads: probe.data_threads,
    })
}

/// Where the run's data threads are: where the data path placed them
/// (flowlane: one worker per queue), else the `-m` mappings' threads.
fn data_thread_cpus(w: &Workers, plan: &Plan) -> Vec<Option<usize>> {
    w.thread_cpus().unwrap_or_else(|| plan.threads.clone())
}

fn stop_and_join(shared: &Shared, w: Workers) -> Result<ThreadStats> {
    shared.stop.store(true, Ordering::Relaxed);
    w.join()
}

fn receiver(
    args: &RunArgs,
    plan: &Plan,
    be: &dyn Backend,
    shared: &Arc<Shared>,
    fs: &ProcFs,
) -> Result<Report> {
    // The control port has no SO_REUSEPORT: a second receiver fails here.
    let ctl_listener = if args.no_sync {
        None
    } else {
        let at = SocketAddr::new(plan.addr, args.control_port);
        Some(TcpListener::bind(at).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => anyhow!(
                "control port {at} is in use: another receiver (or another program) is listening there"
            ),
            ErrorKind::AddrNotAvailable => anyhow!("cannot listen on {at}: no local interface has {}", plan.addr),
            _ => anyhow!("cannot listen on control port {at}: {e}"),
        })?)
    };
    let workers = be.start_receiver(plan, shared.clone())?;
    let thread_cpus = data_thread_cpus(&workers, plan);
    verbose(args, || {
        format!(
            "receiver on {}:{}..{} ({} threads), control port {}",
            plan.addr,
            plan.params.base_port,
            u32::from(plan.params.base_port) + u32::from(plan.params.ports) - 1,
            thread_cpus.len(),
            args.control_port
        )
    });
    let wait = Duration::from_secs_f64(args.wait_s());
    let busy_done = Arc::new(AtomicBool::new(false));
    // The control channel once the test is agreed: every failure after
    // that is sent to the sender (`Abort`), so that its error names the
    // receiver's cause rather than a closed channel.
    let mut ctl: Option<Ctl> = None;
    let result = (|| -> Result<((Snapshot, Snapshot), Probe)> {
        match &ctl_listener {
            None => {
                // -N: t0 is the first accepted connection.
                let deadline = Instant::now() + wait;
                while shared.accepted.load(Ordering::Relaxed) == 0 {
                    if Instant::now() > deadline {
                        bail!("no sender connected within {} s", wait.as_secs_f64());
                    }
                    sleep_until(shared, Instant::now() + Duration::from_millis(5))?;
                }
                shared.start(Instant::now());
            }
            Some(l) => {
                let mut c = accept_until(l, wait, shared)?;
                let peer = c.peer();
                verbose(args, || format!("sender {peer} on the control channel"));
                // Further control connections get `Busy` until the test ends.
                spawn_busy_responder(l.try_clone()?, peer, busy_done.clone());
                let r = sync_receiver(&mut c, plan, shared);
                if let Err(e) = &r {
                    let _ = c.send(&Msg::Abort {
                        reason: format!("{e:#}"),
                    });
                }
                r?;
                ctl = Some(c);
            }
        }
        let probe = probe(args, fs, shared, plan, be.data_threads(), workers.tcp())?;
        let snaps = measure(shared, &probe, args)?;
        let end = shared.end().expect("started") + GRACE;
        sleep_until(shared, end)?;
        wait_for_closes(shared, end + CLOSE_WAIT, args)?;
        Ok((snaps, probe))
    })();
    // Told before the data connections close, so that the sender, whose
    // data threads see them close, finds the cause waiting.
    if let Err(e) = &result {
        abort(&mut ctl, e);
    }
    let joined = stop_and_join(shared, workers);
    let r = result.and_then(|(snaps, probe)| {
        let stats = joined.inspect_err(|e| abort(&mut ctl, e))?;
        let mut rep = finish("receiver", plan, thread_cpus, &probe, fs, snaps, stats);
        if let Some(c) = &mut ctl {
            if let Msg::Done { report, .. } = c.recv(CONTROL_TIMEOUT, "the sender's summary")? {
                rep.peer = Some(report);
            }
            c.send(&Msg::Done {
                bytes: rep.bytes.measured,
                window_s: rep.window_s,
                report: serde_json::to_value(&rep)?,
            })?;
        }
        Ok(rep)
    });
    busy_done.store(true, Ordering::Relaxed);
    r
}

/// Tells the peer on the control channel, when there is one, why this side
/// gives up.
fn abort(ctl: &mut Option<Ctl>, why: &anyhow::Error) {
    if let Some(c) = ctl {
        let _ = c.send(&Msg::Abort {
            reason: format!("{why:#}"),
        });
    }
}

/// Waits up to `wait` for the sender's control connection; gives up early
/// when a data thread (or the data path's watch) failed.
fn accept_until(l: &TcpListener, wait: Duration, shared: &Shared) -> Result<Ctl> {
    l.set_nonblocking(true)?;
    let deadline = Instant::now() + wait;
    loop {
        if let Some(why) = shared.failure() {
            bail!(why);
        }
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ctl::new(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    bail!(
                        "no sender connected to the control port within {} s",
                        wait.as_secs_f64()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("accepting on the control port"),
        }
    }
}

/// Answers every further control connection with `Busy` while a test runs.
fn spawn_busy_responder(l: TcpListener, running: SocketAddr, done: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((s, from)) => {
                    let _ = s.set_nonblocking(false);
                    if let Ok(mut c) = Ctl::new(s) {
                        let _ = c.send(&Msg::Busy {
                            reason: format!(
                                "receiver busy: a test from {} is running (asked by {from})",
                                running.ip()
                            ),
                        });
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
}

fn sync_receiver(c: &mut Ctl, plan: &Plan, shared: &Shared) -> Result<()> {
    let (params, want) = match c.recv(CONTROL_TIMEOUT, "hello")? {
        Msg::Hello {
            params,
            connections,
        } => (params, connections),
        m => bail!("sender {} opened with {m:?} instead of hello", c.peer()),
    };
    if let Some(why) = mismatch(&plan.params, &params) {
        c.send(&Msg::Reject {
            reason: why.clone(),
        })?;
        bail!("sender {}: {why}", c.peer().ip());
    }
    c.send(&Msg::Accept)?;
    let n = match c.recv(CONNECT_TIMEOUT + CONTROL_TIMEOUT, "connected")? {
        Msg::Connected { n } => n,
        m => bail!("sender {} sent {m:?} instead of connected", c.peer()),
    };
    if n != want {
        bail!("sender announced {want} connections but opened {n}");
    }
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    while shared.accepted.load(Ordering::Relaxed) < n {
        if Instant::now() > deadline {
            bail!(
                "only {} of {n} data connections arrived within {} s",
                shared.accepted.load(Ordering::Relaxed),
                CONNECT_TIMEOUT.as_secs()
            );
        }
        sleep_until(shared, Instant::now() + Duration::from_millis(2))?;
    }
    c.send(&Msg::Start)?;
    shared.start(Instant::now());
    Ok(())
}

fn sender(
    args: &RunArgs,
    plan: &Plan,
    be: &dyn Backend,
    shared: &Arc<Shared>,
    fs: &ProcFs,
) -> Result<Report> {
    let mut ctl = if args.no_sync {
        None
    } else {
        let mut c = Ctl::connect_within(
            SocketAddr::new(plan.addr, args.control_port),
            Duration::from_secs_f64(args.wait_s()),
        )?;
        c.send(&Msg::Hello {
            params: plan.params.clone(),
            connections: plan.connections(),
        })?;
        // A receiver accepts the control connection once its backend has
        // started (flowlane: UMEM, XDP attach), which may take a while.
        match c.recv(CONNECT_TIMEOUT, "an answer to hello")? {
            Msg::Accept => {}
            Msg::Reject { reason } => bail!("receiver {} refused the test: {reason}", plan.addr),
            Msg::Busy { reason } => bail!("{reason}"),
            m => bail!("receiver sent {m:?} instead of accept"),
        }
        Some(c)
    };
    let workers = be.start_sender(plan, shared.clone())?;
    let thread_cpus = data_thread_cpus(&workers, plan);
    let result = (|| -> Result<(Snapshot, Snapshot, Probe)> {
        let deadline = Instant::now() + CONNECT_TIMEOUT + Duration::from_secs(1);
        while shared.connected.load(Ordering::Relaxed) < plan.connections() {
            if Instant::now() > deadline {
                bail!(
                    "data connections not established within {} s",
                    CONNECT_TIMEOUT.as_secs()
                );
            }
            sleep_until(shared, Instant::now() + Duration::from_millis(2))?;
        }
        verbose(args, || {
            format!("{} data connections up", plan.connections())
        });
        match &mut ctl {
            None => {
                shared.start(Instant::now());
            }
            Some(c) => {
                c.send(&Msg::Connected {
                    n: plan.connections(),
                })?;
                match c.recv(CONNECT_TIMEOUT + CONTROL_TIMEOUT, "start")? {
                    Msg::Start => {
                        shared.start(Instant::now());
                    }
                    m => bail!("receiver sent {m:?} instead of start"),
                }
            }
        }
        let probe = probe(args, fs, shared, plan, be.data_threads(), workers.tcp())?;
        let (a, b) = measure(shared, &probe, args)?;
        sleep_until(shared, shared.end().expect("started"))?;
        Ok((a, b, probe))
    })();
    let result = match (result, &mut ctl) {
        (Err(e), Some(c)) => {
            // The receiver's failure closes the data connections: when it
            // said why, that is the cause.
            let e = match c.peer_gave_up(PEER_REASON_WAIT) {
                Some(why) => anyhow!("receiver {} gave up: {why} (here: {e:#})", plan.addr),
                None => e,
            };
            let _ = c.send(&Msg::Abort {
                reason: format!("{e:#}"),
            });
            Err(e)
        }
        (r, _) => r,
    };
    let joined = stop_and_join(shared, workers);
    let (a, b, probe) = result?;
    let stats = joined?;
    let mut rep = finish("sender", plan, thread_cpus, &probe, fs, (a, b), stats);
    if let Some(c) = &mut ctl {
        c.send(&Msg::Done {
            bytes: rep.bytes.measured,
            window_s: rep.window_s,
            report: serde_json::to_value(&rep)?,
        })?;
        if let Msg::Done { report, .. } =
            c.recv(CONTROL_TIMEOUT + GRACE * 4, "the receiver's summary")?
        {
            rep.peer = Some(report);
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_name_their_data_threads() {
        let k = for_kind(BackendKind::Kernel, ExecMode::Rtc).unwrap();
        assert_eq!(
            (k.name(), k.data_threads().prefixes),
            ("kernel", &["flowlane-q"][..])
        );
        let f = for_kind(BackendKind::Flowlane, ExecMode::QueuePair).unwrap();
        assert_eq!(
            (f.name(), f.data_threads().prefixes),
            ("flowlane", &["flowlane-q", "flowlane-app"][..])
        );
    }
}
