//! The NTttcp table: snapshots of the counters at the edges of the measured
//! window, and the figures computed from their differences.
//!
//! Definitions (all over the measured window only):
//! - two intervals, each figure over its own: the payload bytes (and round
//!   trips, overlap iterations) are counted by phase as they happen, in the
//!   nominal window [t0 + W, t0 + W + T) by this side's clock, so their
//!   rates are over T (`-t`); the counters (CPU, interface, interrupts,
//!   retransmits) are snapshotted at its edges, each a wake-up late, so
//!   their rates are over the snapshots' own interval (`window_s`). The
//!   costs per byte set the one against the other as rates: CPU time per
//!   second (over `window_s`) over bytes per second (over T), so that a
//!   late snapshot inflates neither.
//! - throughput: payload bytes counted by this side / T; KB = 1000 bytes,
//!   Mbit = 10^6 bits (NTttcp's Table 1 uses these: 16,475.553 KB/s = 131.804 Mbit/s).
//! - average frame size: payload bytes / packets in the data direction on the
//!   interface (received for the receiver, sent for the sender), as in Table 1;
//!   n/a when no packet was counted.
//! - interrupts: `NET_RX` softirqs of all CPUs (veth, loopback) or the device's
//!   `/proc/interrupts` lines (real NICs); packets per interrupt = received packets
//!   / interrupts.
//! - cycles/byte: CPU time / `window_s` × T × TSC rate / payload bytes (the CPU's
//!   rate over its interval, the bytes' over theirs). *System*: busy time of all
//!   CPUs from `/proc/stat` (both ends, when they share the machine); *process*:
//!   this process's user + system time from `getrusage`.
//! - % of one CPU per Gbit/s: CPU-seconds per second × 100 / Gbit/s.
//! - TCP retransmits: `RetransSegs` of `/proc/net/snmp`, which counts the whole
//!   network namespace (per-process retransmits would need `TCP_INFO`, not read here);
//!   for the flowlane backend, whose segments the kernel never sees, flowlane's
//!   own TCP counters (all queues) instead.
//! - latency mode: round-trip times of the iterations sent in the window;
//!   overlap mode: no round-trip times (an iteration holds the compute), the
//!   overlap figures instead. A window with no payload byte, round trip or
//!   overlap iteration has no figures (n/a), and the run fails
//!   ([`Report::nothing_measured`]).

use serde::Serialize;

use crate::backend::{DataThreads, OverlapSums};
use crate::procfs::{CpuTimes, IfCounters, IrqSource, TcpSnmp, TscRate};
use crate::snapshot::Snapshot;
use crate::sync::{Mode, Params};

/// System-wide CPU split over the window, percent of all CPUs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuSystem {
    /// Online CPUs.
    pub ncpus: u32,
    /// user + nice.
    pub user_pct: f64,
    /// system.
    pub system_pct: f64,
    /// hard irq.
    pub irq_pct: f64,
    /// softirq.
    pub softirq_pct: f64,
    /// steal.
    pub steal_pct: f64,
    /// idle + iowait.
    pub idle_pct: f64,
    /// 100 - idle.
    pub busy_pct: f64,
    /// CPU-seconds of work per second (1.0 = one whole CPU): busy, less
    /// the time the hypervisor stole.
    pub busy_cpus: f64,
}

/// This process's CPU over the window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuProcess {
    /// User seconds (getrusage).
    pub user_s: f64,
    /// System seconds (getrusage).
    pub system_s: f64,
    /// (user + system) / window × 100.
    pub pct_of_one_cpu: f64,
    /// utime ticks from /proc/self/stat (cross-check, USER_HZ resolution).
    pub stat_utime_ticks: u64,
    /// stime ticks from /proc/self/stat.
    pub stat_stime_ticks: u64,
}

/// CPU of the backend's data threads over the window (per-thread
/// `/proc/self/task/<tid>/stat`, USER_HZ resolution).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DataThreadsCpu {
    /// Which threads (flowlane workers, or the kernel backend's event loops).
    pub label: String,
    /// Thread-name prefixes matched (comma-separated).
    pub prefix: String,
    /// Threads counted (at the end of the window).
    pub threads: u64,
    /// User seconds.
    pub user_s: f64,
    /// System seconds.
    pub system_s: f64,
    /// (user + system) / window × 100.
    pub pct_of_one_cpu: f64,
}

/// Raw differences, so that every derived figure can be recomputed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Raw {
    /// USER_HZ (ticks per second of /proc/stat).
    pub user_hz: u64,
    /// `/proc/stat` cpu-line difference.
    pub stat: CpuTimes,
    /// Interface counter difference.
    pub ifc: IfCounters,
    /// `/proc/net/snmp` difference.
    pub tcp: TcpSnmp,
}

/// Latency-mode figures (microseconds).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    /// Message size.
    pub msg_size: usize,
    /// Round trips in the window.
    pub round_trips: u64,
    /// Round trips per second.
    pub round_trips_per_s: f64,
    /// Mean round-trip time.
    pub rtt_mean_us: f64,
    /// Percentiles of the round-trip time.
    pub rtt_p50_us: f64,
    /// p90.
    pub rtt_p90_us: f64,
    /// p99; `None` (n/a) under [`P99_MIN_ROUND_TRIPS`] round trips, where
    /// it would only be the maximum.
    pub rtt_p99_us: Option<f64>,
    /// p99.9; `None` (n/a) under [`P999_MIN_ROUND_TRIPS`] round trips.
    pub rtt_p999_us: Option<f64>,
    /// Maximum.
    pub rtt_max_us: f64,
    /// One-way latency as the RDMA paper reports it: mean RTT / 2.
    pub one_way_mean_us: f64,
}

/// Overlap-mode figures (the RDMA paper's overlap test, Fig. 4a); `None`
/// (n/a) when no iteration was measured.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Overlap {
    /// Requested computation per iteration.
    pub compute_target_us: u64,
    /// Iterations sent in the window (and completed).
    pub iterations: u64,
    /// Measured computation per iteration.
    pub compute_mean_us: Option<f64>,
    /// Send start to complete reply, per iteration (the computation
    /// included: no round-trip time).
    pub total_mean_us: Option<f64>,
    /// computation / total: 1 = communication fully hidden behind computation.
    pub overlap_ratio: Option<f64>,
    /// Waiting for the reply after the computation, per iteration.
    pub wait_after_compute_mean_us: Option<f64>,
    /// Iterations whose whole reply had arrived when the computation ended (%).
    pub reply_complete_at_compute_end_pct: Option<f64>,
}

/// Bytes by phase.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseBytes {
    /// Before t0.
    pub pre: u64,
    /// Warm-up.
    pub warmup: u64,
    /// Measured window (the only ones in the figures).
    pub measured: u64,
    /// Cool-down.
    pub cooldown: u64,
    /// After the cool-down.
    pub post: u64,
}

/// One side's report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// "flowlane-ttcp".
    pub tool: &'static str,
    /// "receiver" or "sender".
    pub role: &'static str,
    /// Agreed parameters.
    pub params: Params,
    /// Data threads: the kernel backend's event loops (`-m`), flowlane's
    /// workers (one per queue, whatever `-m` said).
    pub threads: usize,
    /// CPU of each data thread (`null`: not pinned).
    pub thread_cpus: Vec<Option<usize>>,
    /// Data connections.
    pub connections: usize,
    /// Receiver address.
    pub address: String,
    /// Interface whose counters are reported.
    pub iface: String,
    /// The TCP congestion control the data connections ran
    /// (`--congestion`: `cubic`, `newreno`; both backends set it).
    pub congestion: String,
    /// The snapshots' interval by this side's clock (seconds): what the
    /// CPU, interface and interrupt rates are over. The byte and round-trip
    /// rates are over the nominal window, `params.duration_s`, in which
    /// they were counted.
    pub window_s: f64,
    /// Payload bytes by phase.
    pub bytes: PhaseBytes,
    /// KB/s (1000 bytes) over the nominal window.
    pub throughput_kbyte_s: f64,
    /// Mbit/s (10^6 bits) over the nominal window.
    pub throughput_mbit_s: f64,
    /// Payload bytes per packet in the data direction; `None` (n/a) when
    /// no packet was counted there.
    pub avg_frame_size: Option<f64>,
    /// Packets sent on the interface.
    pub packets_sent: u64,
    /// Packets received on the interface.
    pub packets_received: u64,
    /// Where interrupts were counted.
    pub interrupt_source: IrqSource,
    /// Interrupts in the window.
    pub interrupts: u64,
    /// Interrupts per second.
    pub interrupts_per_s: f64,
    /// Received packets per interrupt.
    pub packets_per_interrupt: f64,
    /// TSC rate used for cycles.
    pub tsc_hz: Option<f64>,
    /// Where the TSC rate came from (or why it is missing).
    pub tsc_source: String,
    /// System-wide cycles of work per payload byte (busy CPU time less
    /// the hypervisor's steal, × the TSC rate).
    pub cycles_per_byte_system: Option<f64>,
    /// This process's cycles per payload byte.
    pub cycles_per_byte_process: Option<f64>,
    /// The backend's data threads' cycles per payload byte (flowlane: the
    /// workers that run TCP and the AF_XDP rings).
    pub cycles_per_byte_data_threads: Option<f64>,
    /// The backend's data threads' CPU.
    pub cpu_data_threads: Option<DataThreadsCpu>,
    /// System-wide CPU split.
    pub cpu_system: CpuSystem,
    /// This process's CPU.
    pub cpu_process: CpuProcess,
    /// System busy CPUs × 100 / Gbit/s; `None` (not available) when no
    /// payload byte was measured.
    pub pct_one_cpu_per_gbit_system: Option<f64>,
    /// Process CPU × 100 / Gbit/s; `None` when no payload byte was measured.
    pub pct_one_cpu_per_gbit_process: Option<f64>,
    /// `RetransSegs` in the window, network-namespace wide.
    pub tcp_retrans_segs_netns: u64,
    /// `OutSegs` in the window, network-namespace wide.
    pub tcp_out_segs_netns: u64,
    /// Segments the data path's own TCP retransmitted in the window
    /// (flowlane's, all queues); `None` where the data path is the
    /// kernel's or its counters could not be read.
    pub tcp_retrans_segs_data_path: Option<u64>,
    /// Segments the data path's own TCP sent in the window (retransmitted
    /// ones included).
    pub tcp_out_segs_data_path: Option<u64>,
    /// Raw differences.
    pub raw: Raw,
    /// Latency mode.
    pub latency: Option<Latency>,
    /// Overlap mode.
    pub overlap: Option<Overlap>,
    /// The other side's report, when synced.
    pub peer: Option<serde_json::Value>,
}

/// Everything [`build`] needs.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// "receiver"/"sender".
    pub role: &'static str,
    /// Parameters.
    pub params: &'a Params,
    /// The data threads' CPUs (one entry per thread).
    pub thread_cpus: Vec<Option<usize>>,
    /// Connections.
    pub connections: usize,
    /// Receiver address.
    pub address: String,
    /// Probe used.
    pub iface: String,
    /// `--congestion`, as the flag names it.
    pub congestion: String,
    /// Interrupt source.
    pub irq: IrqSource,
    /// Window start and end.
    pub start: &'a Snapshot,
    /// End.
    pub end: &'a Snapshot,
    /// Bytes by phase.
    pub bytes: [u64; 5],
    /// TSC.
    pub tsc: std::result::Result<TscRate, String>,
    /// USER_HZ.
    pub user_hz: u64,
    /// Latency figures (already computed).
    pub latency: Option<Latency>,
    /// Overlap figures.
    pub overlap: Option<Overlap>,
    /// The backend's data threads (label), when measured.
    pub data_threads: Option<DataThreads>,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Computes the table from two snapshots.
pub fn build(i: Inputs<'_>) -> Report {
    let (a, b) = (i.start, i.end);
    // The snapshots' interval: the counters' rates are over it.
    let window = (b.at - a.at).as_secs_f64();
    // The bytes were counted in the nominal window: their rates are over T.
    let nominal = i.params.duration_s;
    let bytes = i.bytes[2];
    let d_cpu = b.cpu.since(&a.cpu);
    let d_if = IfCounters {
        rx_bytes: b.ifc.rx_bytes.saturating_sub(a.ifc.rx_bytes),
        rx_packets: b.ifc.rx_packets.saturating_sub(a.ifc.rx_packets),
        tx_bytes: b.ifc.tx_bytes.saturating_sub(a.ifc.tx_bytes),
        tx_packets: b.ifc.tx_packets.saturating_sub(a.ifc.tx_packets),
    };
    let d_tcp = TcpSnmp {
        in_segs: b.tcp.in_segs.saturating_sub(a.tcp.in_segs),
        out_segs: b.tcp.out_segs.saturating_sub(a.tcp.out_segs),
        retrans_segs: b.tcp.retrans_segs.saturating_sub(a.tcp.retrans_segs),
    };
    let d_data_path = match (a.data_path_tcp, b.data_path_tcp) {
        (Some(x), Some(y)) => Some((
            y.retrans_segs.saturating_sub(x.retrans_segs),
            y.out_segs.saturating_sub(x.out_segs),
        )),
        _ => None,
    };
    let irqs = b.interrupts.saturating_sub(a.interrupts);
    let total = d_cpu.total() as f64;
    let pct = |t: u64| ratio(t as f64 * 100.0, total);
    // CPU-seconds of work: steal out (see `CpuTimes::work`).
    let busy_s = d_cpu.work() as f64 / i.user_hz as f64;
    let cpu_system = CpuSystem {
        ncpus: b.ncpus,
        user_pct: pct(d_cpu.user + d_cpu.nice),
        system_pct: pct(d_cpu.system),
        irq_pct: pct(d_cpu.irq),
        softirq_pct: pct(d_cpu.softirq),
        steal_pct: pct(d_cpu.steal),
        idle_pct: pct(d_cpu.idle + d_cpu.iowait),
        busy_pct: pct(d_cpu.busy()),
        busy_cpus: ratio(busy_s, window),
    };
    let pu = (b.rusage.user.saturating_sub(a.rusage.user)).as_secs_f64();
    let ps = (b.rusage.system.saturating_sub(a.rusage.system)).as_secs_f64();
    let cpu_process = CpuProcess {
        user_s: pu,
        system_s: ps,
        pct_of_one_cpu: ratio((pu + ps) * 100.0, window),
        stat_utime_ticks: b.proc_stat.utime.saturating_sub(a.proc_stat.utime),
        stat_stime_ticks: b.proc_stat.stime.saturating_sub(a.proc_stat.stime),
    };
    let cpu_data_threads = match (i.data_threads, a.data_threads, b.data_threads) {
        (Some(d), Some(x), Some(y)) => {
            let hz = i.user_hz.max(1) as f64;
            let user_s = y.utime.saturating_sub(x.utime) as f64 / hz;
            let system_s = y.stime.saturating_sub(x.stime) as f64 / hz;
            Some(DataThreadsCpu {
                label: d.label.to_string(),
                prefix: d.prefixes.join(","),
                threads: y.threads,
                user_s,
                system_s,
                pct_of_one_cpu: ratio((user_s + system_s) * 100.0, window),
            })
        }
        _ => None,
    };
    let gbit = ratio(bytes as f64 * 8.0, nominal) / 1e9;
    // Per Gbit/s of nothing is no figure (not 0).
    let per_gbit = |pct: f64| (gbit > 0.0).then(|| pct / gbit);
    let receiver = i.role == "receiver";
    let data_packets = if receiver {
        d_if.rx_packets
    } else {
        d_if.tx_packets
    };
    let (tsc_hz, tsc_source) = match &i.tsc {
        Ok(t) => (Some(t.hz), t.source.clone()),
        Err(e) => (None, e.clone()),
    };
    // CPU seconds per second (over the snapshots' interval) × T: the CPU
    // time of the window the bytes were counted in.
    let cpb = |secs: f64| {
        tsc_hz
            .filter(|_| bytes > 0 && window > 0.0)
            .map(|hz| secs / window * nominal * hz / bytes as f64)
    };
    Report {
        tool: "flowlane-ttcp",
        role: i.role,
        params: i.params.clone(),
        threads: i.thread_cpus.len(),
        thread_cpus: i.thread_cpus,
        connections: i.connections,
        address: i.address,
        iface: i.iface,
        congestion: i.congestion,
        window_s: window,
        bytes: PhaseBytes {
            pre: i.bytes[0],
            warmup: i.bytes[1],
            measured: i.bytes[2],
            cooldown: i.bytes[3],
            post: i.bytes[4],
        },
        throughput_kbyte_s: ratio(bytes as f64, nominal) / 1e3,
        throughput_mbit_s: ratio(bytes as f64 * 8.0, nominal) / 1e6,
        avg_frame_size: (data_packets > 0).then(|| bytes as f64 / data_packets as f64),
        packets_sent: d_if.tx_packets,
        packets_received: d_if.rx_packets,
        interrupt_source: i.irq,
        interrupts: irqs,
        interrupts_per_s: ratio(irqs as f64, window),
        packets_per_interrupt: ratio(d_if.rx_packets as f64, irqs as f64),
        tsc_hz,
        tsc_source,
        cycles_per_byte_system: cpb(busy_s),
        cycles_per_byte_process: cpb(pu + ps),
        cycles_per_byte_data_threads: cpu_data_threads
            .as_ref()
            .and_then(|d| cpb(d.user_s + d.system_s)),
        cpu_data_threads,
        pct_one_cpu_per_gbit_system: per_gbit(cpu_system.busy_cpus * 100.0),
        pct_one_cpu_per_gbit_process: per_gbit(cpu_process.pct_of_one_cpu),
        cpu_system,
        cpu_process,
        tcp_retrans_segs_netns: d_tcp.retrans_segs,
        tcp_out_segs_netns: d_tcp.out_segs,
        tcp_retrans_segs_data_path: d_data_path.map(|d| d.0),
        tcp_out_segs_data_path: d_data_path.map(|d| d.1),
        raw: Raw {
            user_hz: i.user_hz,
            stat: d_cpu,
            ifc: d_if,
            tcp: d_tcp,
        },
        latency: i.latency,
        overlap: i.overlap,
        peer: None,
    }
}

fn group(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let mut out = String::new();
    for (k, c) in int.chars().enumerate() {
        if k > 0 && (int.len() - k) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

fn opt(v: Option<f64>, d: usize) -> String {
    v.map(|x| group(x, d)).unwrap_or_else(|| "n/a".into())
}

impl Report {
    /// Why this side's measured window has no figures, in one line: no
    /// payload byte counted, or (a sender's) no round trip or overlap
    /// iteration finished; `None` when it measured something.
    pub fn nothing_measured(&self) -> Option<String> {
        let p = &self.params;
        let window = format!("the measured window (-t {} s)", p.duration_s);
        if self.bytes.measured == 0 {
            return Some(format!("{window} counted no payload byte"));
        }
        if self.role != "sender" {
            return None;
        }
        match p.mode {
            Mode::Latency if self.latency.as_ref().is_none_or(|l| l.round_trips == 0) => {
                Some(format!("no round trip sent in {window} finished"))
            }
            Mode::Overlap if self.overlap.as_ref().is_none_or(|o| o.iterations == 0) => {
                Some(format!("no overlap iteration sent in {window} finished"))
            }
            _ => None,
        }
    }

    /// The NTttcp-style text table.
    pub fn text(&self) -> String {
        let p = &self.params;
        let mut o = String::new();
        let mut row = |k: &str, v: String| o.push_str(&format!("{k:<42} {v}\n"));
        row(
            &format!("flowlane-ttcp {} ({} backend)", self.role, p.backend),
            format!(
                "{} → {}, {} thread(s), {} connection(s), -W {} -t {} -C {}",
                self.iface,
                self.address,
                self.threads,
                self.connections,
                p.warmup_s,
                p.duration_s,
                p.cooldown_s
            ),
        );
        row(
            "Measured window (s)",
            format!(
                "{:.3}   (counters snapshotted {:.3} s apart)",
                p.duration_s, self.window_s
            ),
        );
        row(
            "Bytes (measured window)",
            format!(
                "{}   [not counted: warm-up {}, cool-down {}, outside {}]",
                group(self.bytes.measured as f64, 0),
                group(self.bytes.warmup as f64, 0),
                group(self.bytes.cooldown as f64, 0),
                group((self.bytes.pre + self.bytes.post) as f64, 0)
            ),
        );
        row("Throughput(KB/s)", group(self.throughput_kbyte_s, 3));
        row("Throughput(Mbit/s)", group(self.throughput_mbit_s, 3));
        row(
            "Average Frame Size",
            format!(
                "{}   (payload bytes / {} packets on {})",
                opt(self.avg_frame_size, 3),
                if self.role == "receiver" {
                    "received"
                } else {
                    "sent"
                },
                self.iface
            ),
        );
        row("Packets Sent", group(self.packets_sent as f64, 0));
        row("Packets Received", group(self.packets_received as f64, 0));
        let src = match self.interrupt_source {
            IrqSource::NetRxSoftirqs => "NET_RX softirqs, all CPUs",
            IrqSource::DeviceIrqs => "device IRQs, /proc/interrupts",
        };
        row(
            "Interrupts/sec",
            format!("{}   ({src})", group(self.interrupts_per_s, 2)),
        );
        row("Packets received/Int", group(self.packets_per_interrupt, 2));
        row(
            "Cycles/Byte (system, all CPUs busy)",
            format!(
                "{}   (TSC {} MHz from {})",
                opt(self.cycles_per_byte_system, 2),
                opt(self.tsc_hz.map(|h| h / 1e6), 3),
                self.tsc_source
            ),
        );
        row(
            "Cycles/Byte (this process)",
            opt(self.cycles_per_byte_process, 2),
        );
        if let Some(d) = &self.cpu_data_threads {
            row(
                &format!(
                    "Cycles/Byte ({} {} threads)",
                    self.params.backend, d.threads
                ),
                format!(
                    "{}   ({}; {:.1}% of one CPU, user {:.2} s, system {:.2} s)",
                    opt(self.cycles_per_byte_data_threads, 2),
                    d.label,
                    d.pct_of_one_cpu,
                    d.user_s,
                    d.system_s
                ),
            );
        }
        let c = &self.cpu_system;
        row(
            &format!("CPU busy (system, {} CPUs)", c.ncpus),
            format!(
                "{:.1}%  = user {:.1}% system {:.1}% irq {:.1}% softirq {:.1}% steal {:.1}% | idle {:.1}%",
                c.busy_pct, c.user_pct, c.system_pct, c.irq_pct, c.softirq_pct, c.steal_pct, c.idle_pct
            ),
        );
        let pc = &self.cpu_process;
        row(
            "CPU (this process)",
            format!(
                "{:.1}% of one CPU  (user {:.3} s, system {:.3} s)",
                pc.pct_of_one_cpu, pc.user_s, pc.system_s
            ),
        );
        row(
            "% of one CPU per Gbit/s (system)",
            opt(self.pct_one_cpu_per_gbit_system, 2),
        );
        row(
            "% of one CPU per Gbit/s (this process)",
            opt(self.pct_one_cpu_per_gbit_process, 2),
        );
        row("TCP congestion control", self.congestion.clone());
        if p.backend == "flowlane" {
            // The kernel's counters never see flowlane's segments.
            row(
                "TCP retransmits (flowlane's TCP, all queues)",
                match (self.tcp_retrans_segs_data_path, self.tcp_out_segs_data_path) {
                    (Some(r), Some(s)) => format!("{r} of {s} segments sent"),
                    _ => "n/a".into(),
                },
            );
        } else {
            row(
                "TCP retransmits (netns-wide, /proc/net/snmp)",
                format!(
                    "{} of {} segments sent",
                    self.tcp_retrans_segs_netns, self.tcp_out_segs_netns
                ),
            );
        }
        if self.latency.is_none() && p.mode == Mode::Latency && self.role == "sender" {
            row(
                &format!("Round trips ({} B messages)", p.msg_size),
                "0   (RTT n/a)".into(),
            );
        }
        if let Some(l) = &self.latency {
            row(
                &format!("Round trips ({} B messages)", l.msg_size),
                format!("{}  ({:.1}/s)", l.round_trips, l.round_trips_per_s),
            );
            let tail = |v: Option<f64>| v.map_or_else(|| "n/a".into(), |v| format!("{v:.1}"));
            row(
                "RTT µs p50 / p90 / p99 / p99.9 / max",
                format!(
                    "{:.1} / {:.1} / {} / {} / {:.1}",
                    l.rtt_p50_us,
                    l.rtt_p90_us,
                    tail(l.rtt_p99_us),
                    tail(l.rtt_p999_us),
                    l.rtt_max_us
                ),
            );
            row(
                "One-way latency µs (mean RTT / 2)",
                format!("{:.1}", l.one_way_mean_us),
            );
        }
        if let Some(ov) = &self.overlap {
            row("Overlap iterations", group(ov.iterations as f64, 0));
            row(
                "Overlap: compute / total per iteration µs",
                format!(
                    "{} / {}",
                    opt(ov.compute_mean_us, 1),
                    opt(ov.total_mean_us, 1)
                ),
            );
            row("Overlap ratio (compute / total)", opt(ov.overlap_ratio, 3));
            row(
                "Wait for reply after compute µs",
                opt(ov.wait_after_compute_mean_us, 1),
            );
            row(
                "Reply complete when compute ended",
                match ov.reply_complete_at_compute_end_pct {
                    Some(v) => format!("{v:.1}% of iterations"),
                    None => "n/a".into(),
                },
            );
        }
        if let Some(peer) = &self.peer {
            let get = |k: &str| peer.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
            row(
                &format!(
                    "Peer ({})",
                    peer.get("role").and_then(|v| v.as_str()).unwrap_or("?")
                ),
                format!(
                    "{} bytes in its window, {} Mbit/s, {:.1}% of one CPU",
                    group(
                        peer.pointer("/bytes/measured")
                            .and_then(|v| v.as_f64())
                            .unwrap_or(f64::NAN),
                        0
                    ),
                    group(get("throughput_mbit_s"), 3),
                    peer.pointer("/cpu_process/pct_of_one_cpu")
                        .and_then(|v| v.as_f64())
                        .unwrap_or(f64::NAN)
                ),
            );
        }
        o
    }
}

/// Round trips a p99 needs to be more than the maximum: one in a hundred
/// exceeds it.
pub const P99_MIN_ROUND_TRIPS: u64 = 100;

/// Round trips a p99.9 needs (one in a thousand exceeds it).
pub const P999_MIN_ROUND_TRIPS: u64 = 1000;

/// Latency figures from a histogram of round-trip nanoseconds counted in a
/// window of `window_s` (the nominal one: round trips are counted by phase);
/// the tail percentiles only where there are round trips enough for them.
pub fn latency_from(h: &hdrhistogram::Histogram<u64>, msg_size: usize, window_s: f64) -> Latency {
    let us = |ns: u64| ns as f64 / 1e3;
    let tail = |q: f64, min: u64| (h.len() >= min).then(|| us(h.value_at_quantile(q)));
    Latency {
        msg_size,
        round_trips: h.len(),
        round_trips_per_s: ratio(h.len() as f64, window_s),
        rtt_mean_us: h.mean() / 1e3,
        rtt_p50_us: us(h.value_at_quantile(0.50)),
        rtt_p90_us: us(h.value_at_quantile(0.90)),
        rtt_p99_us: tail(0.99, P99_MIN_ROUND_TRIPS),
        rtt_p999_us: tail(0.999, P999_MIN_ROUND_TRIPS),
        rtt_max_us: us(h.max()),
        one_way_mean_us: h.mean() / 2e3,
    }
}

/// Overlap figures from the sums (`None` without an iteration).
pub fn overlap_from(o: &OverlapSums, target_us: u64) -> Overlap {
    let n = o.iterations as f64;
    let per = |v: f64| (o.iterations > 0).then(|| v / n);
    Overlap {
        compute_target_us: target_us,
        iterations: o.iterations,
        compute_mean_us: per(o.compute_ns as f64 / 1e3),
        total_mean_us: per(o.total_ns as f64 / 1e3),
        overlap_ratio: (o.iterations > 0 && o.total_ns > 0)
            .then(|| o.compute_ns as f64 / o.total_ns as f64),
        wait_after_compute_mean_us: per(o.wait_ns as f64 / 1e3),
        reply_complete_at_compute_end_pct: per(o.reply_done_at_compute_end as f64 * 100.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::rtt_histogram;
    use crate::procfs::{ProcCpu, ThreadsCpu};
    use crate::snapshot::Rusage;
    use crate::sync::{Mode, PROTO};
    use std::time::{Duration, Instant};

    fn snap(
        at: Instant,
        cpu: CpuTimes,
        irq: u64,
        ifc: IfCounters,
        retrans: u64,
        ru: (u64, u64),
    ) -> Snapshot {
        Snapshot {
            at,
            cpu,
            ncpus: 2,
            interrupts: irq,
            ifc,
            tcp: TcpSnmp {
                in_segs: 0,
                out_segs: 1000,
                retrans_segs: retrans,
            },
            data_path_tcp: None,
            proc_stat: ProcCpu::default(),
            rusage: Rusage {
                user: Duration::from_millis(ru.0),
                system: Duration::from_millis(ru.1),
            },
            // The data threads did all of the process's work (ticks of 10 ms).
            data_threads: Some(ThreadsCpu {
                threads: 2,
                utime: ru.0 / 10,
                stime: ru.1 / 10,
            }),
        }
    }

    fn params() -> Params {
        Params {
            proto: PROTO,
            backend: "kernel".into(),
            mode: Mode::Throughput,
            base_port: 5001,
            ports: 1,
            warmup_s: 1.0,
            duration_s: 2.0,
            cooldown_s: 1.0,
            msg_size: 64,
            buffer: 65536,
        }
    }

    /// The inputs of a receiver's report over `start`..`end`: one
    /// connection, `measured` bytes in the measured window (none before
    /// or after it), no TSC rate, no latency, overlap or data threads
    /// figures; a test sets what it is about over these.
    fn inputs<'a>(
        params: &'a Params,
        start: &'a Snapshot,
        end: &'a Snapshot,
        measured: u64,
    ) -> Inputs<'a> {
        Inputs {
            role: "receiver",
            params,
            thread_cpus: vec![None],
            connections: 1,
            address: "10.99.0.1".into(),
            iface: "xsk0".into(),
            congestion: "cubic".into(),
            irq: IrqSource::NetRxSoftirqs,
            start,
            end,
            bytes: [0, 0, measured, 0, 0],
            tsc: Err("none".into()),
            user_hz: 100,
            latency: None,
            overlap: None,
            data_threads: None,
        }
    }

    /// A 2 GHz TSC.
    fn tsc_2ghz() -> std::result::Result<TscRate, String> {
        Ok(TscRate {
            hz: 2e9,
            source: "test".into(),
        })
    }

    /// The data threads, `ttcp-*`, measured.
    fn test_threads() -> Option<DataThreads> {
        Some(DataThreads {
            prefixes: &["ttcp-"],
            label: "test threads",
        })
    }

    #[test]
    fn table1_arithmetic() {
        let params = params();
        let t = Instant::now();
        let a = snap(
            t,
            CpuTimes::default(),
            100,
            IfCounters::default(),
            5,
            (0, 0),
        );
        // 2 s, 2 CPUs at USER_HZ 100: 400 ticks, 300 of work and 40 the
        // hypervisor stole (busy, but no work of ours: out of the costs).
        let cpu = CpuTimes {
            user: 50,
            system: 100,
            softirq: 150,
            steal: 40,
            idle: 60,
            ..CpuTimes::default()
        };
        let ifc = IfCounters {
            rx_bytes: 0,
            rx_packets: 1_000_000,
            tx_bytes: 0,
            tx_packets: 400_000,
        };
        let b = snap(
            t + Duration::from_secs(2),
            cpu,
            100 + 20_000,
            ifc,
            7,
            (500, 700),
        );
        let bytes = 1_000_000_000u64; // 4 Gbit/s over 2 s
        let r = build(Inputs {
            thread_cpus: vec![Some(0)],
            bytes: [1, 2, bytes, 3, 4],
            tsc: tsc_2ghz(),
            data_threads: test_threads(),
            ..inputs(&params, &a, &b, bytes)
        });
        assert_eq!(r.window_s, 2.0);
        assert!((r.cycles_per_byte_data_threads.unwrap() - 2.4).abs() < 1e-9);
        let d = r.cpu_data_threads.as_ref().unwrap();
        assert_eq!((d.threads, d.label.as_str()), (2, "test threads"));
        assert!((d.pct_of_one_cpu - 60.0).abs() < 1e-9);
        assert!(r.text().contains("Cycles/Byte (kernel 2 threads)"));
        assert_eq!(r.throughput_kbyte_s, 500_000.0);
        assert_eq!(r.throughput_mbit_s, 4000.0);
        assert_eq!(r.avg_frame_size, Some(1000.0));
        assert_eq!(r.interrupts, 20_000);
        assert_eq!(r.interrupts_per_s, 10_000.0);
        assert_eq!(r.packets_per_interrupt, 50.0);
        assert_eq!(r.cpu_system.busy_pct, 85.0);
        assert_eq!(r.cpu_system.steal_pct, 10.0);
        assert_eq!(r.cpu_system.softirq_pct, 37.5);
        assert_eq!(r.cpu_system.busy_cpus, 1.5);
        // 3 busy CPU-seconds × 2e9 / 1e9 bytes.
        assert_eq!(r.cycles_per_byte_system, Some(6.0));
        // 1.2 process seconds × 2e9 / 1e9.
        assert!((r.cycles_per_byte_process.unwrap() - 2.4).abs() < 1e-9);
        assert!((r.cpu_process.pct_of_one_cpu - 60.0).abs() < 1e-9);
        // 150 % of one CPU at 4 Gbit/s.
        assert!((r.pct_one_cpu_per_gbit_system.unwrap() - 37.5).abs() < 1e-9);
        assert!((r.pct_one_cpu_per_gbit_process.unwrap() - 15.0).abs() < 1e-9);
        assert_eq!(r.tcp_retrans_segs_netns, 2);
        let text = r.text();
        assert!(text.contains("Throughput(Mbit/s)"), "{text}");
        assert!(text.contains("4,000.000"), "{text}");
        assert!(text.contains("500,000.000"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["bytes"]["measured"], 1_000_000_000u64);
        assert_eq!(json["interrupt_source"], "net_rx_softirqs");
    }

    /// The bytes are counted in the nominal window [t0 + W, t0 + W + T):
    /// their rate is over T, not over the snapshots' interval, which the
    /// coordinator's wake-ups made 100 ms longer here; the CPU's rate is
    /// over the snapshots' interval.
    #[test]
    fn throughput_is_over_the_window_the_bytes_were_counted_in() {
        let params = Params {
            warmup_s: 0.0,
            ..params()
        };
        let t = Instant::now();
        let late = Duration::from_millis(100);
        let a = snap(t, CpuTimes::default(), 0, IfCounters::default(), 0, (0, 0));
        // 2.1 s of 2 CPUs at USER_HZ 100: 420 ticks, 210 busy.
        let cpu = CpuTimes {
            user: 210,
            idle: 210,
            ..CpuTimes::default()
        };
        let b = snap(
            t + Duration::from_secs(2) + late,
            cpu,
            0,
            IfCounters::default(),
            0,
            (0, 0),
        );
        let r = build(inputs(&params, &a, &b, 1_000_000_000));
        assert!((r.window_s - 2.1).abs() < 1e-9, "{}", r.window_s);
        assert_eq!(r.throughput_mbit_s, 4000.0);
        assert_eq!(r.throughput_kbyte_s, 500_000.0);
        assert!((r.cpu_system.busy_cpus - 1.0).abs() < 1e-9);
        // One CPU's work at 4 Gbit/s.
        assert!((r.pct_one_cpu_per_gbit_system.unwrap() - 25.0).abs() < 1e-9);
        assert!(row(&r.text(), "Measured window (s)")
            .contains("2.000   (counters snapshotted 2.100 s apart)"));
    }

    /// The CPU time is over the snapshots' interval (here 0.5 s late: 2.5
    /// s), the bytes over the nominal window (2 s): cycles per byte are the
    /// CPU's rate over the bytes' rate, not 2.5 s of CPU over 2 s of bytes.
    #[test]
    fn cycles_per_byte_are_rates_over_their_own_intervals() {
        let params = Params {
            warmup_s: 0.0,
            ..params()
        };
        let t = Instant::now();
        let a = snap(t, CpuTimes::default(), 0, IfCounters::default(), 0, (0, 0));
        // 2.5 s of 2 CPUs at USER_HZ 100: 500 ticks, 250 busy (one CPU);
        // the process (and its data threads) half a CPU.
        let cpu = CpuTimes {
            user: 250,
            idle: 250,
            ..CpuTimes::default()
        };
        let b = snap(
            t + Duration::from_millis(2500),
            cpu,
            0,
            IfCounters::default(),
            0,
            (1250, 0),
        );
        let r = build(Inputs {
            role: "sender",
            tsc: tsc_2ghz(),
            data_threads: test_threads(),
            ..inputs(&params, &a, &b, 1_000_000_000)
        });
        assert!((r.window_s - 2.5).abs() < 1e-9, "{}", r.window_s);
        // One CPU for 2 s × 2e9 Hz / 1e9 bytes (not 2.5 s: 5.0).
        let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() < 1e-9);
        assert!(near(r.cycles_per_byte_system, 4.0), "{r:?}");
        // Half a CPU for 2 s (not 1.25 s of it: 2.5).
        assert!(near(r.cycles_per_byte_process, 2.0), "{r:?}");
        assert!(near(r.cycles_per_byte_data_threads, 2.0), "{r:?}");
        // The per-Gbit/s figures were rates over rates already: 1 CPU at
        // 4 Gbit/s.
        assert!(near(r.pct_one_cpu_per_gbit_system, 25.0), "{r:?}");
        assert!(near(r.pct_one_cpu_per_gbit_process, 12.5), "{r:?}");
    }

    /// No packet counted in the data direction: the average frame size is
    /// n/a (null), not 0.
    #[test]
    fn average_frame_size_without_packets_is_not_available() {
        let r = report_of(&params(), "receiver", 4096, [None; 2], None, None);
        assert_eq!(r.avg_frame_size, None);
        assert!(
            row(&r.text(), "Average Frame Size").contains(" n/a   (payload bytes / received"),
            "{}",
            r.text()
        );
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["avg_frame_size"].is_null(), "{json}");
    }

    /// The congestion control the connections ran is in the table and the
    /// JSON (a matrix's results.json row holds both ends' reports).
    #[test]
    fn the_congestion_control_is_reported() {
        let r = report_of(&params(), "sender", 4096, [None; 2], None, None);
        assert!(row(&r.text(), "TCP congestion control").ends_with(" cubic"));
        assert_eq!(serde_json::to_value(&r).unwrap()["congestion"], "cubic");
    }

    /// A window that measured no payload byte has no cost per Gbit/s (it
    /// is not 0 % of a CPU), nor per byte.
    #[test]
    fn nothing_measured_is_not_available_not_zero() {
        let params = params();
        let t = Instant::now();
        let cpu = CpuTimes {
            user: 50,
            idle: 350,
            ..CpuTimes::default()
        };
        let a = snap(t, CpuTimes::default(), 0, IfCounters::default(), 0, (0, 0));
        let b = snap(
            t + Duration::from_secs(2),
            cpu,
            0,
            IfCounters::default(),
            0,
            (100, 0),
        );
        let r = build(Inputs {
            bytes: [0, 10, 0, 0, 0],
            tsc: tsc_2ghz(),
            ..inputs(&params, &a, &b, 0)
        });
        assert_eq!(r.throughput_mbit_s, 0.0);
        assert_eq!(r.pct_one_cpu_per_gbit_system, None);
        assert_eq!(r.pct_one_cpu_per_gbit_process, None);
        assert_eq!(r.cycles_per_byte_system, None);
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["pct_one_cpu_per_gbit_system"].is_null(), "{json}");
        let text = r.text();
        let row = text
            .lines()
            .find(|l| l.starts_with("% of one CPU per Gbit/s (system)"))
            .unwrap();
        assert!(row.ends_with("n/a"), "{row}");
    }

    /// A report of `role` over a 2 s window for `params`, `measured`
    /// bytes, the data path's TCP counters at the edges as given.
    fn report_of(
        params: &Params,
        role: &'static str,
        measured: u64,
        data_path_tcp: [Option<TcpSnmp>; 2],
        latency: Option<Latency>,
        overlap: Option<Overlap>,
    ) -> Report {
        let t = Instant::now();
        let mut a = snap(t, CpuTimes::default(), 0, IfCounters::default(), 1, (0, 0));
        let mut b = snap(
            t + Duration::from_secs(2),
            CpuTimes::default(),
            0,
            IfCounters::default(),
            4,
            (0, 0),
        );
        a.data_path_tcp = data_path_tcp[0];
        b.data_path_tcp = data_path_tcp[1];
        build(Inputs {
            role,
            latency,
            overlap,
            ..inputs(params, &a, &b, measured)
        })
    }

    fn row<'a>(text: &'a str, name: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} row in {text}"))
    }

    /// Overlap iterations none: every figure n/a (not 0.000), and the run
    /// has nothing to report.
    #[test]
    fn overlap_without_iterations_is_not_available() {
        let o = overlap_from(&OverlapSums::default(), 500);
        assert_eq!(o.iterations, 0);
        assert_eq!(o.overlap_ratio, None);
        assert_eq!(o.reply_complete_at_compute_end_pct, None);
        let params = Params {
            mode: Mode::Overlap,
            ..params()
        };
        let r = report_of(&params, "sender", 4096, [None; 2], None, Some(o));
        let text = r.text();
        for name in [
            "Overlap ratio",
            "Reply complete when compute ended",
            "Wait for reply after compute",
        ] {
            assert!(row(&text, name).ends_with("n/a"), "{text}");
        }
        assert!(row(&text, "Overlap: compute / total").ends_with("n/a / n/a"));
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["overlap"]["overlap_ratio"].is_null(), "{json}");
        let why = r.nothing_measured().unwrap();
        assert!(why.contains("no overlap iteration"), "{why}");
    }

    /// A window without a payload byte, or a sender's without a round
    /// trip, has nothing to report: the run fails on it.
    #[test]
    fn nothing_measured_names_what_is_missing() {
        let tp = params();
        let r = report_of(&tp, "receiver", 0, [None; 2], None, None);
        let why = r.nothing_measured().unwrap();
        assert_eq!(why, "the measured window (-t 2 s) counted no payload byte");
        assert_eq!(
            report_of(&tp, "receiver", 1, [None; 2], None, None).nothing_measured(),
            None
        );
        let lat = Params {
            mode: Mode::Latency,
            ..params()
        };
        let r = report_of(&lat, "sender", 128, [None; 2], None, None);
        assert!(r.nothing_measured().unwrap().contains("no round trip"));
        assert!(row(&r.text(), "Round trips (64 B messages)").ends_with("0   (RTT n/a)"));
        let mut h = rtt_histogram();
        h.record(20_000).unwrap();
        let l = latency_from(&h, 64, 2.0);
        let r = report_of(&lat, "sender", 128, [None; 2], Some(l), None);
        assert_eq!(r.nothing_measured(), None);
        // The receiver echoes: it has no round trips of its own.
        let r = report_of(&lat, "receiver", 128, [None; 2], None, None);
        assert_eq!(r.nothing_measured(), None);
    }

    /// flowlane's segments never reach /proc/net/snmp: its retransmit row
    /// is its own TCP's over the window, n/a without them.
    #[test]
    fn flowlane_retransmits_come_from_its_own_counters() {
        let fl = Params {
            backend: "flowlane".into(),
            ..params()
        };
        let tcp = |retrans_segs, out_segs| {
            Some(TcpSnmp {
                in_segs: 0,
                out_segs,
                retrans_segs,
            })
        };
        let r = report_of(&fl, "sender", 1, [tcp(2, 100), tcp(5, 600)], None, None);
        assert_eq!(r.tcp_retrans_segs_data_path, Some(3));
        assert_eq!(r.tcp_out_segs_data_path, Some(500));
        let text = r.text();
        assert_eq!(
            row(&text, "TCP retransmits"),
            format!(
                "{:<42} 3 of 500 segments sent",
                "TCP retransmits (flowlane's TCP, all queues)"
            )
        );
        assert!(!text.contains("/proc/net/snmp"), "{text}");
        let r = report_of(&fl, "sender", 1, [None, tcp(5, 600)], None, None);
        assert!(row(&r.text(), "TCP retransmits (flowlane").ends_with("n/a"));
        // The kernel backend's stays the namespace's.
        let r = report_of(&params(), "sender", 1, [None; 2], None, None);
        assert!(
            row(&r.text(), "TCP retransmits (netns-wide, /proc/net/snmp)")
                .ends_with("3 of 0 segments sent")
        );
    }

    #[test]
    fn grouping() {
        assert_eq!(group(16475.553, 3), "16,475.553");
        assert_eq!(group(1309892.0, 0), "1,309,892");
        assert_eq!(group(12.0, 0), "12");
        assert_eq!(group(-1234.5, 1), "-1,234.5");
    }

    #[test]
    fn latency_percentiles() {
        let mut h = rtt_histogram();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let l = latency_from(&h, 64, 2.0);
        assert_eq!(l.round_trips, 1000);
        assert_eq!(l.round_trips_per_s, 500.0);
        assert!((l.rtt_p50_us - 500.0).abs() < 1.0, "{}", l.rtt_p50_us);
        let p99 = l.rtt_p99_us.unwrap();
        assert!((p99 - 990.0).abs() < 1.5, "{p99}");
        assert!(l.rtt_p999_us.is_some());
        assert!((l.one_way_mean_us - l.rtt_mean_us / 2.0).abs() < 1e-9);
    }

    /// Too few round trips for a tail percentile: n/a (null), not the
    /// maximum under its name.
    #[test]
    fn tail_percentiles_need_round_trips_enough() {
        let mut h = rtt_histogram();
        for us in 1..=20u64 {
            h.record(us * 1000).unwrap();
        }
        let l = latency_from(&h, 64, 2.0);
        assert_eq!((l.rtt_p99_us, l.rtt_p999_us), (None, None));
        assert!(l.rtt_p90_us > 0.0);
        let json = serde_json::to_value(&l).unwrap();
        assert!(json["rtt_p999_us"].is_null(), "{json}");
        let lat = Params {
            mode: Mode::Latency,
            ..params()
        };
        let r = report_of(&lat, "sender", 128, [None; 2], Some(l), None);
        assert!(
            row(&r.text(), "RTT µs").ends_with(" / n/a / n/a / 20.0"),
            "{}",
            r.text()
        );
        for us in 21..=100u64 {
            h.record(us * 1000).unwrap();
        }
        let l = latency_from(&h, 64, 2.0);
        assert!(l.rtt_p99_us.is_some() && l.rtt_p999_us.is_none(), "{l:?}");
    }

    #[test]
    fn overlap_ratio() {
        let o = OverlapSums {
            iterations: 10,
            compute_ns: 10 * 100_000,
            total_ns: 10 * 125_000,
            wait_ns: 10 * 25_000,
            reply_done_at_compute_end: 4,
        };
        let r = overlap_from(&o, 100);
        assert_eq!(r.iterations, 10);
        assert_eq!(r.overlap_ratio, Some(0.8));
        assert_eq!(r.compute_mean_us, Some(100.0));
        assert_eq!(r.wait_after_compute_mean_us, Some(25.0));
        assert_eq!(r.reply_complete_at_compute_end_pct, Some(40.0));
    }
}
