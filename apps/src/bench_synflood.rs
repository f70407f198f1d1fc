//! `flowlane bench synflood`: how fast a spoofed SYN flood flowlane absorbs
//! with SYN cookies, against the kernel's own SYN cookies, on the same bed
//! in the same run (issue 11).
//!
//! A one-queue test bed. In its namespace: `flowlane echo-server` on port 7
//! (as `tests/tests/tcp_syn_flood.rs` starts it) and a kernel echo server
//! on port 8007 (`listen(1024)`, `tcp_syncookies = 1`). In the peer
//! namespace, on a thread pinned to the last CPU: the bed's XDP live-frames
//! generator in its SYN mode, each frame from the next forged on-link
//! source and source port with a new ISN (`--sources`, every port from
//! 1024), throttled to each `--rates` value or flat out (`max`). So that
//! the kernel's SYN-ACKs leave as flowlane's do (flowlane answers the
//! frame's source MAC), the bed's kernel gets a permanent neighbour entry
//! (the peer's MAC) for each forged source, added after flowlane has read
//! the kernel's table. A forged address belongs to nobody on the peer side:
//! the peer's kernel drops the SYN-ACKs it receives for them (forwarding is
//! off) and counts them (`Ip.InAddrErrors`, over IPv6 `Ip6.InAddrErrors`),
//! which is how the SYN-ACKs that came back are counted. The family of
//! `--sources` is the flood's: IPv6 sources flood the bed's fd99::1 (the
//! legitimate client fd99::3, the no-listener address fd99::4).
//!
//! Per round and rate, three phases of one warm-up second and `--seconds`
//! measured: the flood to an address nobody has (the kernel of the bed
//! drops it at routing: the cost of generating and delivering a frame),
//! to flowlane, to the kernel. Measured: SYNs sent (the generator
//! program's own count), delivered and answered; the CPU time of the
//! threads that do the work, from the scheduler's exact accounting
//! (`schedstat`): the generator's thread (in whose context the kernel also
//! delivers the frames on veth and, for the kernel's listener, runs its TCP
//! receive as softirq), the `ksoftirqd` and `napi` kernel threads, and
//! flowlane's process; per SYN, and above the no-listener phase's per
//! frame; flowlane's own per cookie; the whole machine's (`/proc/stat`,
//! sampled at each tick, other processes included) for reference;
//! flowlane's counters and the kernel's (`nstat`'s); and, during each
//! server phase, a legitimate kernel client connecting every 0.5 s from
//! another address of the peer, one byte echoed, timed.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_testbed::net_counters::{self, NetCounters};
use flowlane_testbed::proc_stat::{self, CpuTimes};
use flowlane_testbed::{netns, BedSpec, BedState};
use serde::Serialize;
use serde_json::Value;

use crate::bed_guard;
use crate::bench_bed::{log_tail, with_bed};
use crate::syn_flood_bed::{Client, Flood, KernelEcho, Rate, Sources};

/// Flags of `flowlane bench synflood`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Test bed name (a one-queue bed; created and removed by the run).
    #[arg(long, default_value = "benchsf")]
    pub bed: String,
    /// Flood rates, SYNs per second, or `max` (the generator flat out).
    #[arg(long, value_delimiter = ',', default_values = ["50000", "max"])]
    pub rates: Vec<Rate>,
    /// Measured seconds per phase (after one second of warm-up).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Times every rate runs (each round: nobody, flowlane, kernel); the
    /// table gives the medians.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// The forged source addresses, `FIRST-LAST`: on-link, inside the bed's
    /// 10.99.0.0/24 and above 10.99.0.4 (.1 is the bed, .2 the peer, .3 the
    /// legitimate client, .4 the address nobody has); or IPv6, an IPv6
    /// flood: at most 250 inside fd99::5-fd99::ffff:ffff (the same roles
    /// for fd99::1 to ::4).
    #[arg(long, default_value = "10.99.0.100-10.99.0.250")]
    pub sources: Sources,
    /// Print every run and the medians as JSON.
    #[arg(long)]
    pub json: bool,
}

/// flowlane's echo port.
const FLOWLANE_PORT: u16 = 7;
/// The kernel echo server's port.
const KERNEL_PORT: u16 = 8007;
/// The legitimate client's address (added to the peer's interface).
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 3);
/// An on-link address nobody has: the no-listener phase floods it.
const NOBODY: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 4);
/// [`CLIENT`] of an IPv6 flood.
const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 3);
/// [`NOBODY`] of an IPv6 flood.
const NOBODY_V6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 4);
/// The most forged IPv6 sources (each a neighbour entry in the bed's
/// kernel; IPv4's /24 allows as many).
const MAX_V6_SOURCES: u32 = 250;
/// Port of the no-listener phase (no one's: the frames go to the kernel).
const NOBODY_PORT: u16 = 9;
/// Warm-up before each measured window.
const WARM_UP: Duration = Duration::from_secs(1);
/// Pause after each phase, for queues to drain.
const SETTLE: Duration = Duration::from_millis(500);

/// Where a phase's flood goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// An address nobody has: the generator and the delivery alone.
    Nobody,
    /// flowlane's echo server.
    Flowlane,
    /// The kernel's echo server.
    Kernel,
}

impl Target {
    const ALL: [Target; 3] = [Target::Nobody, Target::Flowlane, Target::Kernel];

    /// Where the flood goes, `bed` being the bed's address of the flood's
    /// family.
    fn addr(self, bed: IpAddr) -> SocketAddr {
        match self {
            Target::Nobody => SocketAddr::new(family_addr(bed, NOBODY, NOBODY_V6), NOBODY_PORT),
            Target::Flowlane => SocketAddr::new(bed, FLOWLANE_PORT),
            Target::Kernel => SocketAddr::new(bed, KERNEL_PORT),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Target::Nobody => "nobody",
            Target::Flowlane => "flowlane",
            Target::Kernel => "kernel",
        }
    }
}

/// flowlane's counters shown per phase (growth over the window).
const FLOWLANE_COUNTERS: &[&str] = &[
    "segments_in",
    "segments_out",
    "syn_cookies_sent",
    "syn_cookies_accepted",
    "syn_dropped",
    "passive_opens",
    "connection_limit_refused",
    "no_neighbor",
    "resets_out",
];

/// `v4` or `v6`, of `like`'s family.
fn family_addr(like: IpAddr, v4: Ipv4Addr, v6: Ipv6Addr) -> IpAddr {
    if like.is_ipv4() {
        v4.into()
    } else {
        v6.into()
    }
}

/// The counter of segments to an address the namespace does not have (it
/// forwards nothing), of `like`'s family.
fn addr_errors(like: IpAddr) -> &'static str {
    if like.is_ipv4() {
        "Ip.InAddrErrors"
    } else {
        "Ip6.InAddrErrors"
    }
}

/// The kernel's counters shown per phase (the bed's namespace; the TCP
/// ones count both families).
const KERNEL_COUNTERS: &[&str] = &[
    "Ip.InAddrErrors",
    "Ip6.InAddrErrors",
    "Tcp.InSegs",
    "Tcp.OutSegs",
    "Tcp.PassiveOpens",
    "TcpExt.SyncookiesSent",
    "TcpExt.SyncookiesRecv",
    "TcpExt.TCPReqQFullDoCookies",
    "TcpExt.TCPReqQFullDrop",
    "TcpExt.ListenOverflows",
    "TcpExt.ListenDrops",
];

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Round (from 1).
    pub round: usize,
    /// The flood's rate.
    pub rate: String,
    /// Where it went.
    pub target: Target,
    /// The measured window, s.
    pub seconds: f64,
    /// The 1-minute load average when the window began.
    pub load_1min: f64,
    /// SYNs the generator sent per second.
    pub syns_per_s: f64,
    /// SYNs that reached their target per second (flowlane: its
    /// `segments_in`; the kernel: the bed's `Tcp.InSegs`; nobody: the bed's
    /// `Ip.InAddrErrors`, over IPv6 `Ip6.InAddrErrors`).
    pub delivered_per_s: f64,
    /// Segments to the forged addresses that reached the peer per second
    /// (its `Ip.InAddrErrors`, over IPv6 `Ip6.InAddrErrors`): the SYN-ACKs
    /// that came back.
    pub synacks_per_s: f64,
    /// SYN-ACKs with a SYN cookie the target sent per second (flowlane's
    /// `syn_cookies_sent`, the kernel's `TcpExt.SyncookiesSent`).
    pub cookies_per_s: f64,
    /// Frames the peer's interface received per second (SYN-ACKs, the
    /// client's segments, ARP).
    pub peer_rx_per_s: f64,
    /// The machine's CPU time (user, nice, system, irq, softirq; every
    /// CPU, every process, other users' too; `/proc/stat`, sampled at each
    /// tick, so short bursts go missing) per SYN sent, ns.
    pub machine_ns_per_syn: f64,
    /// CPU time of the generator's thread per SYN sent, ns (exact,
    /// `schedstat`; it includes the softirq work done in its context: the
    /// frames' delivery on veth and, for the kernel's listener, its TCP).
    pub generator_ns_per_syn: f64,
    /// CPU time of the `ksoftirqd` and `napi` kernel threads per SYN sent, ns.
    pub kernel_threads_ns_per_syn: f64,
    /// CPU time of flowlane's process (its worker and main thread, with
    /// the softirq work in their context: its SYN-ACKs' way to the peer)
    /// per SYN sent, ns.
    pub flowlane_ns_per_syn: f64,
    /// The three together: what the flood cost, ns per SYN.
    pub work_ns_per_syn: f64,
    /// `work_ns_per_syn` minus the no-listener phase's per frame (same
    /// round and rate): what answering cost, ns per SYN; not given when
    /// more than 5 % of the SYNs were lost on the way (the no-listener
    /// phase's cost per frame is no baseline for those).
    pub above_nobody_ns_per_syn: Option<f64>,
    /// Cookie SYN-ACKs per CPU-second above the no-listener phase (not
    /// given where `above_nobody_ns_per_syn` is not).
    pub cookies_per_cpu_s: Option<f64>,
    /// flowlane's process CPU time per cookie SYN-ACK it sent, ns (its
    /// phase only).
    pub flowlane_ns_per_cookie: Option<f64>,
    /// The generator thread's time on its CPU over the window, 0..1.
    pub generator_busy: f64,
    /// Time stolen by the hypervisor, as a share of the window's CPU time.
    pub steal_share: f64,
    /// flowlane's counters' growth over the window.
    pub flowlane: BTreeMap<String, u64>,
    /// The bed kernel's counters' growth over the window.
    pub kernel: BTreeMap<String, u64>,
    /// The legitimate client's connect + echo times during the phase
    /// (warm-up included), ms; `null`: failed.
    pub connects_ms: Vec<Option<f64>>,
}

/// The medians of one rate and target over the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Median {
    /// The flood's rate.
    pub rate: String,
    /// Where it went.
    pub target: Target,
    /// Rounds.
    pub runs: usize,
    /// Median SYNs sent per second.
    pub syns_per_s: f64,
    /// Median SYNs delivered per second.
    pub delivered_per_s: f64,
    /// Median SYN-ACKs back at the peer per second.
    pub synacks_per_s: f64,
    /// Median machine CPU per SYN (`/proc/stat`), ns.
    pub machine_ns_per_syn: f64,
    /// Median CPU time of the working threads per SYN, ns.
    pub work_ns_per_syn: f64,
    /// Median of that above the no-listener phase, ns.
    pub above_nobody_ns_per_syn: Option<f64>,
    /// Median cookie SYN-ACKs sent per second.
    pub cookies_per_s: f64,
    /// Median cookie SYN-ACKs per CPU-second above the no-listener phase.
    pub cookies_per_cpu_s: Option<f64>,
    /// Median flowlane process CPU per SYN, ns.
    pub flowlane_ns_per_syn: f64,
    /// Median flowlane process CPU per cookie, ns.
    pub flowlane_ns_per_cookie: Option<f64>,
    /// Median share of its CPU the generator's thread took.
    pub generator_busy: f64,
    /// The legitimate client's connects in every round.
    pub connects: usize,
    /// Of those, how many failed.
    pub connects_failed: usize,
    /// The median time of the others, ms.
    pub connect_ms_median: Option<f64>,
    /// The largest time of the others, ms.
    pub connect_ms_max: Option<f64>,
}

/// The whole result.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The forged sources.
    pub sources: String,
    /// The CPU the generator was pinned to.
    pub generator_cpu: u32,
    /// The CPUs flowlane's worker may run on (its placement).
    pub flowlane_worker_cpus: String,
    /// CPUs this process may use.
    pub cpus: usize,
    /// Every phase, in order.
    pub runs: Vec<Run>,
    /// Per rate and target.
    pub medians: Vec<Median>,
}

/// `flowlane echo-server` in the bed, with its report file.
struct FlowlaneEcho {
    child: Child,
    report: PathBuf,
    log: PathBuf,
}

impl FlowlaneEcho {
    fn start(bed: &BedState) -> Result<FlowlaneEcho> {
        let exe = std::env::current_exe().context("finding the flowlane binary")?;
        let dir = std::env::temp_dir();
        let tag = format!("flowlane-bench-synflood-{}", std::process::id());
        let (report, log) = (
            dir.join(format!("{tag}.json")),
            dir.join(format!("{tag}.log")),
        );
        let _ = std::fs::remove_file(&report);
        bed_guard::remove_on_signal(report.clone());
        bed_guard::remove_on_signal(log.clone());
        let child = bed_guard::spawn_child(
            Command::new(exe)
                .args(["echo-server", "--bed", &bed.name, "--queues", "1"])
                .args(["--port", &FLOWLANE_PORT.to_string(), "--report"])
                .arg(&report)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).context("creating the echo server's log")?),
        )
        .context("starting flowlane echo-server in the test bed")?;
        let mut e = FlowlaneEcho { child, report, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !e.report.exists() {
            if let Some(st) = e.child.try_wait()? {
                bail!(
                    "flowlane echo-server exited early ({st}): {}",
                    log_tail(&e.log)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "flowlane echo-server did not come up within 30 s: {}",
                    log_tail(&e.log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(e)
    }

    /// The CPUs its worker may run on (`Cpus_allowed_list` of its thread
    /// `flowlane-q0`).
    fn worker_cpus(&self) -> Option<String> {
        let dir = format!("/proc/{}/task", self.pid());
        std::fs::read_dir(dir).ok()?.flatten().find_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            if comm.trim() != "flowlane-q0" {
                return None;
            }
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
    }

    /// Its process id (`--bed` re-executes in place).
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its total TCP counters now (SIGUSR1, then its report file).
    fn counters(&self) -> Result<Value> {
        let _ = std::fs::remove_file(&self.report);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid() as i32),
            nix::sys::signal::SIGUSR1,
        )?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(t) = std::fs::read(&self.report) {
                if let Ok(v) = serde_json::from_slice::<Value>(&t) {
                    return Ok(v["counters"]["total"].clone());
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        bail!("flowlane echo-server wrote no report within 5 s")
    }
}

impl Drop for FlowlaneEcho {
    fn drop(&mut self) {
        bed_guard::stop_child(&mut self.child);
        let _ = std::fs::remove_file(&self.report);
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The counters at one edge of a window.
struct Snapshot {
    at: Instant,
    sent: u64,
    cpu: CpuTimes,
    load_1min: f64,
    generator_ns: u64,
    kernel_threads_ns: u64,
    flowlane_ns: u64,
    flowlane: Value,
    peer: NetCounters,
    bed: NetCounters,
    peer_rx: u64,
}

/// What the phases run on.
struct Setup<'a> {
    bed: &'a BedState,
    sources: Sources,
    flood: &'a Flood,
    flowlane: &'a FlowlaneEcho,
    seconds: u64,
    /// `ksoftirqd` and `napi` threads.
    kernel_threads: Vec<u32>,
}

impl Setup<'_> {
    fn snapshot(&self) -> Result<Snapshot> {
        // The clock, the generator's count and the CPU times first and
        // together; the slower reads after, in the same order each time.
        let at = Instant::now();
        let sent = self.flood.sent()?;
        let generator_ns = proc_stat::thread_runtime_ns(std::process::id(), self.flood.tid())?;
        let kernel_threads_ns = self
            .kernel_threads
            .iter()
            .filter_map(|&p| proc_stat::process_runtime_ns(p).ok())
            .sum();
        let flowlane_ns = proc_stat::process_runtime_ns(self.flowlane.pid())?;
        let cpu = proc_stat::read_stat()?.all;
        let load_1min = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Ok(Snapshot {
            at,
            sent,
            cpu,
            load_1min,
            generator_ns,
            kernel_threads_ns,
            flowlane_ns,
            flowlane: self.flowlane.counters()?,
            peer: net_counters::read_in(&self.bed.peer_netns)?,
            bed: net_counters::read_in(&self.bed.netns)?,
            peer_rx: proc_stat::if_counters_in(&self.bed.peer_netns, &self.bed.peer_if)?.rx_packets,
        })
    }

    fn phase(&self, round: usize, rate: Rate, target: Target) -> Result<Run> {
        let local = bed_address(self.bed, self.sources.first)?;
        let frame = crate::syn_flood_bed::syn_frame(self.bed, &self.sources, target.addr(local))?;
        let client = (target != Target::Nobody).then(|| {
            let from = family_addr(local, CLIENT, CLIENT_V6);
            Client::start(&self.bed.peer_netns, from, target.addr(local))
        });
        self.flood.flood(frame, rate)?;
        std::thread::sleep(WARM_UP);
        let a = self.snapshot()?;
        std::thread::sleep(Duration::from_secs(self.seconds));
        let b = self.snapshot()?;
        self.flood.pause()?;
        let connects_ms = client.map(Client::stop).unwrap_or_default();
        std::thread::sleep(SETTLE);
        Ok(figures(
            Phase {
                round,
                rate,
                target,
                addr_errors: addr_errors(local),
            },
            &a,
            &b,
            connects_ms,
        ))
    }
}

/// Which phase a window belongs to.
struct Phase {
    round: usize,
    rate: Rate,
    target: Target,
    /// The flood's family's [`addr_errors`] counter.
    addr_errors: &'static str,
}

/// A phase's figures from the snapshots at the edges of its window.
fn figures(p: Phase, a: &Snapshot, b: &Snapshot, connects_ms: Vec<Option<f64>>) -> Run {
    let Phase {
        round,
        rate,
        target,
        addr_errors,
    } = p;
    let dt = b.at.duration_since(a.at).as_secs_f64();
    let syns = b.sent.saturating_sub(a.sent).max(1) as f64;
    let cpu = b.cpu.since(&a.cpu);
    let per_syn = |ns: u64| ns as f64 / syns;
    let used = cpu.work() * proc_stat::ns_per_tick();
    let generator = b.generator_ns.saturating_sub(a.generator_ns);
    let kernel_threads = b.kernel_threads_ns.saturating_sub(a.kernel_threads_ns);
    let fl_cpu = b.flowlane_ns.saturating_sub(a.flowlane_ns);
    let fl = |k: &str| {
        b.flowlane[k]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(a.flowlane[k].as_u64().unwrap_or(0))
    };
    let flowlane: BTreeMap<String, u64> = FLOWLANE_COUNTERS
        .iter()
        .map(|k| (k.to_string(), fl(k)))
        .collect();
    let kernel: BTreeMap<String, u64> = KERNEL_COUNTERS
        .iter()
        .map(|k| (k.to_string(), net_counters::delta(&a.bed, &b.bed, k)))
        .collect();
    let (delivered, cookies) = match target {
        Target::Nobody => (kernel[addr_errors], 0),
        Target::Flowlane => (flowlane["segments_in"], flowlane["syn_cookies_sent"]),
        Target::Kernel => (kernel["Tcp.InSegs"], kernel["TcpExt.SyncookiesSent"]),
    };
    Run {
        round,
        rate: rate.to_string(),
        target,
        seconds: dt,
        load_1min: a.load_1min,
        syns_per_s: syns / dt,
        delivered_per_s: delivered as f64 / dt,
        synacks_per_s: net_counters::delta(&a.peer, &b.peer, addr_errors) as f64 / dt,
        cookies_per_s: cookies as f64 / dt,
        peer_rx_per_s: b.peer_rx.saturating_sub(a.peer_rx) as f64 / dt,
        machine_ns_per_syn: per_syn(used),
        generator_ns_per_syn: per_syn(generator),
        kernel_threads_ns_per_syn: per_syn(kernel_threads),
        flowlane_ns_per_syn: per_syn(fl_cpu),
        work_ns_per_syn: per_syn(generator + kernel_threads + fl_cpu),
        above_nobody_ns_per_syn: None,
        cookies_per_cpu_s: None,
        flowlane_ns_per_cookie: (target == Target::Flowlane && cookies > 0)
            .then(|| fl_cpu as f64 / cookies as f64),
        generator_busy: generator as f64 / 1e9 / dt,
        steal_share: cpu.steal as f64 / cpu.total().max(1) as f64,
        flowlane,
        kernel,
        connects_ms,
    }
}

/// Fills each server phase's figures above the no-listener phase of the
/// same round and rate: the working threads' CPU per SYN minus the
/// no-listener phase's per frame, and the cookie SYN-ACKs per CPU-second
/// of that difference.
fn above_nobody(runs: &mut [Run]) {
    let base: Vec<(usize, String, f64)> = runs
        .iter()
        .filter(|r| r.target == Target::Nobody)
        .map(|r| (r.round, r.rate.clone(), r.work_ns_per_syn))
        .collect();
    for r in runs.iter_mut().filter(|r| r.target != Target::Nobody) {
        let Some((_, _, b)) = base
            .iter()
            .find(|(n, rate, _)| *n == r.round && *rate == r.rate)
        else {
            continue;
        };
        // The no-listener phase's cost per frame is no baseline for frames
        // lost on the way (a full ring drops them for less).
        if r.delivered_per_s < 0.95 * r.syns_per_s {
            continue;
        }
        let above = r.work_ns_per_syn - b;
        r.above_nobody_ns_per_syn = Some(above);
        r.cookies_per_cpu_s =
            (above > 0.0).then(|| r.cookies_per_s / r.syns_per_s / (above * 1e-9));
    }
}

/// The median of `v`: its middle value, or the mean of its two middle
/// values for an even count (with two rounds, their mean); 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn median_of(v: Vec<Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.into_iter().flatten().collect();
    (!v.is_empty()).then(|| median(v))
}

/// The medians per rate and target, in the order the runs first name them.
fn medians(runs: &[Run]) -> Vec<Median> {
    let mut keys: Vec<(String, Target)> = Vec::new();
    for r in runs {
        if !keys
            .iter()
            .any(|(rate, t)| *rate == r.rate && *t == r.target)
        {
            keys.push((r.rate.clone(), r.target));
        }
    }
    keys.into_iter()
        .map(|(rate, target)| {
            let of: Vec<&Run> = runs
                .iter()
                .filter(|r| r.rate == rate && r.target == target)
                .collect();
            let m = |f: fn(&Run) -> f64| median(of.iter().map(|r| f(r)).collect());
            let mo = |f: fn(&Run) -> Option<f64>| median_of(of.iter().map(|r| f(r)).collect());
            let connects: Vec<Option<f64>> =
                of.iter().flat_map(|r| r.connects_ms.clone()).collect();
            let ok: Vec<f64> = connects.iter().flatten().copied().collect();
            Median {
                runs: of.len(),
                syns_per_s: m(|r| r.syns_per_s),
                delivered_per_s: m(|r| r.delivered_per_s),
                synacks_per_s: m(|r| r.synacks_per_s),
                machine_ns_per_syn: m(|r| r.machine_ns_per_syn),
                work_ns_per_syn: m(|r| r.work_ns_per_syn),
                above_nobody_ns_per_syn: mo(|r| r.above_nobody_ns_per_syn),
                cookies_per_s: m(|r| r.cookies_per_s),
                cookies_per_cpu_s: mo(|r| r.cookies_per_cpu_s),
                flowlane_ns_per_syn: m(|r| r.flowlane_ns_per_syn),
                flowlane_ns_per_cookie: mo(|r| r.flowlane_ns_per_cookie),
                generator_busy: m(|r| r.generator_busy),
                connects: connects.len(),
                connects_failed: connects.len() - ok.len(),
                connect_ms_median: (!ok.is_empty()).then(|| median(ok.clone())),
                connect_ms_max: ok.iter().copied().reduce(f64::max),
                rate,
                target,
            }
        })
        .collect()
}

fn check(args: &Args) -> Result<()> {
    if args.rates.is_empty() || args.seconds == 0 || args.rounds == 0 {
        bail!("--rates, --seconds and --rounds must each be at least one");
    }
    let (first, last) = (args.sources.first, args.sources.last);
    let (lowest, highest, net): (IpAddr, IpAddr, _) = match first {
        IpAddr::V4(_) => (
            Ipv4Addr::new(10, 99, 0, 5).into(),
            Ipv4Addr::new(10, 99, 0, 254).into(),
            "10.99.0.0/24",
        ),
        IpAddr::V6(_) => (
            Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 5).into(),
            Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0xffff, 0xffff).into(),
            "fd99::/64",
        ),
    };
    if first < lowest || last > highest {
        bail!(
            "--sources must lie within {lowest}-{highest} (on-link in the bed's {net}, \
             clear of the bed, the peer, the legitimate client and the no-listener address)"
        );
    }
    if first.is_ipv6() && args.sources.count() > MAX_V6_SOURCES {
        bail!(
            "--sources {first}-{last} is {} addresses: give at most {MAX_V6_SOURCES} (each is a \
             neighbour entry in the bed's kernel)",
            args.sources.count()
        );
    }
    Ok(())
}

/// The bed's address of `like`'s family.
fn bed_address(bed: &BedState, like: IpAddr) -> Result<IpAddr> {
    let a = if like.is_ipv4() {
        &bed.local_v4
    } else {
        &bed.local_v6
    };
    a.parse()
        .with_context(|| format!("the bed's address {a:?} is not an address"))
}

/// Brings the servers, the client address and the generator up on `bed`
/// and runs every phase.
fn measure(bed: &BedState, args: &Args, gen_cpu: u32) -> Result<(Vec<Run>, String)> {
    netns::run(
        "ip",
        &[
            "netns",
            "exec",
            &bed.netns,
            "sysctl",
            "-qw",
            "net.ipv4.tcp_syncookies=1",
        ],
    )?;
    let flowlane = FlowlaneEcho::start(bed)?;
    let worker_cpus = flowlane.worker_cpus().unwrap_or_else(|| "?".into());
    // After flowlane read the kernel's neighbours: it learns the forged
    // sources' MAC from their frames, the kernel from these entries.
    for a in args.sources.addresses() {
        netns::ip(&[
            "-n",
            &bed.netns,
            "neigh",
            "replace",
            &a.to_string(),
            "lladdr",
            &bed.peer_mac,
            "dev",
            &bed.local_if,
            "nud",
            "permanent",
        ])?;
    }
    let local = bed_address(bed, args.sources.first)?;
    // `replace`: a bed an earlier run left may have it already. `nodad`:
    // an IPv6 address is usable at once, not tentative for a second or two.
    let client = match family_addr(local, CLIENT, CLIENT_V6) {
        IpAddr::V4(a) => format!("{a}/24"),
        IpAddr::V6(a) => format!("{a}/64"),
    };
    let mut add = vec!["-n", &bed.peer_netns, "addr", "replace", &client];
    add.extend(["dev", &bed.peer_if]);
    if local.is_ipv6() {
        add.push("nodad");
    }
    netns::ip(&add)?;
    let _kernel = KernelEcho::start(&bed.netns, SocketAddr::new(local, KERNEL_PORT))?;
    let flood = Flood::start(bed, &args.sources, gen_cpu)?;
    let setup = Setup {
        bed,
        sources: args.sources,
        flood: &flood,
        flowlane: &flowlane,
        seconds: args.seconds,
        kernel_threads: proc_stat::processes_named(&["ksoftirqd/", "napi/"]),
    };
    let mut runs = Vec::new();
    for round in 1..=args.rounds {
        for &rate in &args.rates {
            for target in Target::ALL {
                let r = setup.phase(round, rate, target)?;
                if !args.json {
                    eprintln!(
                        "round {round} rate {rate} {}: {:.0} SYN/s sent, {:.0} SYN-ACK/s back",
                        target.name(),
                        r.syns_per_s,
                        r.synacks_per_s
                    );
                }
                runs.push(r);
            }
        }
    }
    flood.stop()?;
    Ok((runs, worker_cpus))
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    netns::require_root("flowlane bench synflood")?;
    check(&args)?;
    let allowed = flowlane_dataplane::affinity::allowed_cpus();
    let gen_cpu = *allowed.last().context("no CPU")?;
    let spec = BedSpec {
        name: args.bed.clone(),
        queues: 1,
        key: RssKey::microsoft_default().as_bytes().to_vec(),
        table: vec![0; 128],
    };
    let (mut runs, worker_cpus) =
        with_bed("bench synflood", &spec, |bed| measure(bed, &args, gen_cpu))?;
    above_nobody(&mut runs);
    let report = Report {
        sources: format!("{}-{}", args.sources.first, args.sources.last),
        generator_cpu: gen_cpu,
        flowlane_worker_cpus: worker_cpus,
        cpus: allowed.len(),
        medians: medians(&runs),
        runs,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print_table(&report);
    Ok(())
}

fn print_table(report: &Report) {
    let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    outln!(
        "SYN flood from {} (every port from 1024); generator on CPU {} of {} (on veth the \
         kernel's receive processing runs there too), flowlane's worker on CPU {}; medians of \
         the rounds",
        report.sources,
        report.generator_cpu,
        report.cpus,
        report.flowlane_worker_cpus
    );
    outln!(
        "{:>6}  {:>8}  {:>4}  {:>8}  {:>8}  {:>8}  {:>8}  {:>7}  {:>6}  {:>6}  {:>9}  {:>6}  {:>9}  {:>4}  connects ms",
        "rate",
        "target",
        "runs",
        "SYN/s",
        "deliv/s",
        "SYNACK/s",
        "cookie/s",
        "mach ns",
        "work",
        "above",
        "cookie/cs",
        "fl/SYN",
        "fl/cookie",
        "gen"
    );
    for m in &report.medians {
        let connects = if m.connects == 0 {
            "-".to_string()
        } else {
            format!(
                "{}/{} ok, {} (max {})",
                m.connects - m.connects_failed,
                m.connects,
                opt(m.connect_ms_median, 2),
                opt(m.connect_ms_max, 1)
            )
        };
        outln!(
            "{:>6}  {:>8}  {:>4}  {:>8.0}  {:>8.0}  {:>8.0}  {:>8.0}  {:>7.0}  {:>6.0}  {:>6}  {:>9}  {:>6.0}  {:>9}  {:>3.0}%  {}",
            m.rate,
            m.target.name(),
            m.runs,
            m.syns_per_s,
            m.delivered_per_s,
            m.synacks_per_s,
            m.cookies_per_s,
            m.machine_ns_per_syn,
            m.work_ns_per_syn,
            opt(m.above_nobody_ns_per_syn, 0),
            opt(m.cookies_per_cpu_s, 0),
            m.flowlane_ns_per_syn,
            opt(m.flowlane_ns_per_cookie, 0),
            m.generator_busy * 100.0,
            connects
        );
    }
    outln!(
        "(per SYN sent, ns: mach = /proc/stat, every CPU and process, tick-sampled; work = the \
         generator thread + ksoftirqd/napi threads + flowlane's process, exact; above = work - \
         the nobody phase's; fl = flowlane's process, per SYN and per cookie; cookie/cs = \
         cookies per CPU-second above nobody (above and cookie/cs: none where over 5 % of the SYNs were lost); gen = \
         the generator thread's share of its CPU)"
    );
    outln!("counters per run (growth over the window):");
    for r in &report.runs {
        let pick = |m: &BTreeMap<String, u64>| {
            m.iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        outln!(
            "  round {} rate {} {}: load {:.2}; flowlane: {}; kernel: {}",
            r.round,
            r.rate,
            r.target.name(),
            r.load_1min,
            pick(&r.flowlane),
            pick(&r.kernel)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(round: usize, rate: &str, target: Target, syns: f64, cpu: f64, acks: f64) -> Run {
        Run {
            round,
            rate: rate.into(),
            target,
            seconds: 1.0,
            load_1min: 0.0,
            syns_per_s: syns,
            delivered_per_s: syns,
            synacks_per_s: acks,
            cookies_per_s: acks,
            peer_rx_per_s: acks,
            machine_ns_per_syn: cpu,
            generator_ns_per_syn: cpu,
            kernel_threads_ns_per_syn: 0.0,
            flowlane_ns_per_syn: 0.0,
            work_ns_per_syn: cpu,
            above_nobody_ns_per_syn: None,
            cookies_per_cpu_s: None,
            flowlane_ns_per_cookie: None,
            generator_busy: 1.0,
            steal_share: 0.0,
            flowlane: BTreeMap::new(),
            kernel: BTreeMap::new(),
            connects_ms: vec![Some(1.0), None],
        }
    }

    #[test]
    fn costs_above_the_no_listener_phase_of_the_same_round_and_rate() {
        let mut runs = vec![
            run(1, "max", Target::Nobody, 1e6, 500.0, 0.0),
            run(1, "max", Target::Kernel, 4e5, 2500.0, 4e5),
            run(1, "1000", Target::Nobody, 1e3, 9000.0, 0.0),
            run(1, "1000", Target::Flowlane, 1e3, 10000.0, 5e2),
        ];
        above_nobody(&mut runs);
        let near = |v: Option<f64>, want: f64| (v.unwrap() - want).abs() < want * 1e-9;
        assert_eq!(runs[0].above_nobody_ns_per_syn, None);
        assert_eq!(runs[1].above_nobody_ns_per_syn, Some(2000.0));
        // Every SYN answered, 2 µs each: 500 000 per CPU-second.
        assert!(near(runs[1].cookies_per_cpu_s, 500_000.0));
        assert_eq!(runs[3].above_nobody_ns_per_syn, Some(1000.0));
        // Half answered, 1 µs per SYN: 500 000 answers per CPU-second.
        assert!(near(runs[3].cookies_per_cpu_s, 500_000.0));
        // Lossy: no figure.
        let mut lossy = vec![
            run(1, "max", Target::Nobody, 1e6, 500.0, 0.0),
            run(1, "max", Target::Flowlane, 1e6, 400.0, 1e5),
        ];
        lossy[1].delivered_per_s = 1e5;
        above_nobody(&mut lossy);
        assert_eq!(lossy[1].above_nobody_ns_per_syn, None);
        assert_eq!(lossy[1].cookies_per_cpu_s, None);
        // Cheaper than the no-listener phase (noise): no figure.
        let mut cheap = vec![
            run(1, "max", Target::Nobody, 1e6, 500.0, 0.0),
            run(1, "max", Target::Kernel, 1e6, 400.0, 1e6),
        ];
        above_nobody(&mut cheap);
        assert_eq!(cheap[1].cookies_per_cpu_s, None);
    }

    #[test]
    fn medians_per_rate_and_target() {
        let runs = vec![
            run(1, "max", Target::Kernel, 1.0, 10.0, 0.0),
            run(2, "max", Target::Kernel, 3.0, 30.0, 0.0),
            run(3, "max", Target::Kernel, 2.0, 20.0, 0.0),
            run(1, "max", Target::Flowlane, 9.0, 90.0, 0.0),
        ];
        let m = medians(&runs);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].target, m[0].runs), (Target::Kernel, 3));
        assert_eq!(m[0].syns_per_s, 2.0);
        assert_eq!(m[0].work_ns_per_syn, 20.0);
        assert_eq!((m[0].connects, m[0].connects_failed), (6, 3));
        assert_eq!(m[0].connect_ms_median, Some(1.0));
        assert_eq!(m[1].syns_per_s, 9.0);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![7.0]), 7.0);
        // Two rounds: not the smaller one.
        assert_eq!(median(vec![30.0, 10.0]), 20.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median_of(vec![Some(2.0), None, Some(4.0)]), Some(3.0));
        assert_eq!(median_of(vec![None]), None);
    }

    #[test]
    fn sources_must_be_on_link_and_clear_of_the_bed() {
        let args = |s: &str| Args {
            bed: "b".into(),
            rates: vec![Rate::Max],
            seconds: 1,
            rounds: 1,
            sources: s.parse().unwrap(),
            json: false,
        };
        assert!(check(&args("10.99.0.100-10.99.0.250")).is_ok());
        assert!(check(&args("10.99.0.3-10.99.0.250")).is_err());
        assert!(check(&args("10.99.0.100-10.99.1.5")).is_err());
        assert!(check(&args("10.98.0.100")).is_err());
        assert!(check(&args("fd99::100-fd99::1f9")).is_ok());
        assert!(check(&args("fd99::5")).is_ok());
        assert!(check(&args("fd99::4-fd99::100")).is_err());
        assert!(check(&args("fd98::100-fd98::101")).is_err());
        assert!(check(&args("fd99:0:0:1::100")).is_err());
        let e = check(&args("fd99::100-fd99::1fa")).unwrap_err().to_string();
        assert!(e.contains("is 251 addresses: give at most 250"), "{e}");
    }
}
