//! Command line: ntttcp-for-linux-compatible flags where they make sense.

use std::net::IpAddr;

use flowlane_dataplane::service_args::{
    listen_port, DataPathArgs, EcnChoice, ExecMode, RebalanceArgs,
};
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};

use crate::plan::{FlowlaneOptions, Plan};
use crate::sync::{Mode, Params, PROTO};

/// NTttcp-style sender/receiver. Start the receiver first (`-r`), then the sender
/// (`-s`) with the same -m address, -p/-P, -W/-t/-C and mode flags.
#[derive(Debug, Parser)]
#[command(name = "flowlane-ttcp", about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// The test-bed matrix (see `scripts/ttcp-matrix.sh`).
    #[command(subcommand)]
    pub cmd: Option<Sub>,
    /// Flags of a receiver or sender run.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Bring up a test bed and run backends × connections × sizes × delays.
    Matrix(MatrixArgs),
}

/// Which TCP implementation carries the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// Linux kernel sockets (flowlane's kernel-socket backend: one mio
    /// loop per thread).
    Kernel,
    /// flowlane's TCP on the AF_XDP data path (one worker per queue).
    #[value(alias = "xdp")]
    Flowlane,
}

impl BackendKind {
    /// The name used in flags, JSON and the sync protocol.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Kernel => "kernel",
            BackendKind::Flowlane => "flowlane",
        }
    }
}

/// Flags of one receiver or sender run.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Receiver: listen, count what arrives, echo in latency/overlap mode.
    #[arg(short = 'r', long = "receiver", conflicts_with = "sender")]
    pub receiver: bool,
    /// Sender: connect to the receiver and send.
    #[arg(short = 's', long = "sender")]
    pub sender: bool,
    /// Mapping `sessions,cpu|*,address`: `sessions` threads (one event loop each)
    /// pinned to `cpu` (`*`: not pinned) using receiver `address`. Repeatable;
    /// all mappings must name the same address.
    #[arg(short = 'm', value_name = "SESSIONS,CPU|*,ADDRESS")]
    pub mapping: Vec<String>,
    /// First data port, 1-65535 (not 0: the sender must know the port the
    /// receiver listens on).
    #[arg(short = 'p', default_value_t = 5001, value_parser = listen_port)]
    pub base_port: u16,
    /// Number of data ports (connections are spread over them round-robin).
    #[arg(short = 'P', default_value_t = 1)]
    pub ports: u16,
    /// Threads per mapping (overrides the sessions field of -m).
    #[arg(short = 'n')]
    pub threads: Option<usize>,
    /// Sender: connections per thread.
    #[arg(short = 'l', default_value_t = 1)]
    pub conns_per_thread: usize,
    /// Buffer size per read/write (k/m suffixes: 64k): the sender's writes,
    /// and the kernel backend's reads; flowlane's receiver reads in place
    /// (zero-copy: whatever arrived, however much). A write is of what the
    /// data path has room for, at most: the kernel backend's at most 256
    /// KiB, its reads at most what a socket holds (net.ipv4.tcp_rmem's
    /// maximum), so that a byte counts about when the socket took or gave
    /// it.
    #[arg(short = 'b', default_value = "64k", value_parser = parse_size)]
    pub buffer: usize,
    /// Warm-up seconds (not counted).
    #[arg(short = 'W', default_value_t = 1.0)]
    pub warmup: f64,
    /// Measured seconds.
    #[arg(short = 't', default_value_t = 10.0)]
    pub duration: f64,
    /// Cool-down seconds (not counted).
    #[arg(short = 'C', default_value_t = 1.0)]
    pub cooldown: f64,
    /// No sync: no control channel; the sender starts when its connections are
    /// up, the receiver at its first connection. Flags are not checked.
    #[arg(short = 'N', long = "no-sync")]
    pub no_sync: bool,
    /// Print the report as JSON.
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// Verbose: phases and per-thread counts on stderr.
    #[arg(short = 'V', long = "verbose")]
    pub verbose: bool,
    /// Control (sync) port on the receiver, 1-65535 (not 0: the sender
    /// must know it).
    #[arg(long, default_value_t = 5000, value_parser = listen_port)]
    pub control_port: u16,
    /// Backend: kernel sockets, or flowlane's TCP on the AF_XDP data path
    /// (`flowlane`, also `xdp`).
    #[arg(long, value_enum, default_value_t = BackendKind::Kernel)]
    pub backend: BackendKind,
    /// Where the measurement's handlers run: `rtc` on the network cores
    /// (AF_XDP workers or socket loops), `queue-pair` on application threads
    /// the cores feed through per-core queues.
    #[arg(long = "mode", value_enum, default_value_t = ExecMode::Rtc)]
    pub exec: ExecMode,
    /// Latency mode: ping-pong of --msg-size messages (the receiver echoes);
    /// each end counts a round trip's bytes both ways (2 × the size).
    #[arg(long, conflicts_with = "overlap_us")]
    pub latency: bool,
    /// Overlap mode: ping-pong with this many microseconds of computation between
    /// send and receive on the sender (the receiver echoes). The sender needs
    /// `--mode queue-pair` (run to completion computes on the loop that would
    /// receive the reply: nothing could overlap); shorter than `-t`.
    #[arg(long, value_name = "MICROSECONDS")]
    pub overlap_us: Option<u64>,
    /// Message size in latency/overlap mode (k/m suffixes).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub msg_size: usize,
    /// Interface whose packet and interrupt counters are reported (default: the
    /// one holding the local address of the traffic).
    #[arg(long)]
    pub nic: Option<String>,
    /// Seconds to wait for the other side before giving up. Receiver: for
    /// a sender (default 60). Sender: for the receiver's control port,
    /// trying again while it refuses (default 0: one try).
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
    /// flowlane backend: the data path's flags.
    #[command(flatten)]
    pub data_path: DataPathArgs,
    /// flowlane backend: `--rebalance auto|off` (the receiver moves RSS
    /// buckets between its queues) and its control socket.
    #[command(flatten)]
    pub rebalance: RebalanceArgs,
    /// Root of the /proc and /sys trees read for the report.
    #[arg(long, default_value = "/", hide = true)]
    pub procfs_root: PathBuf,
}

/// Matrix flags.
#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// Short variant: connections 1,16,256,1024; 64k buffers; delay 0,1,10 ms;
    /// the backends as receivers only; 2 s windows.
    #[arg(long)]
    pub quick: bool,
    /// Backends under test (comma-separated): `kernel` (Linux TCP with the
    /// bed's offloads: GSO super-frames cross the veth whole),
    /// `kernel-wire` (Linux TCP with TSO and GSO off on both ends for its
    /// cells: it segments in software before the device and the veth
    /// carries wire-size frames, as from a NIC without TSO and as flowlane
    /// sends them; the fair baseline for the sender; on a bed the matrix
    /// makes, not on a `--bed` that was up before) and
    /// `flowlane` (flowlane's TCP on AF_XDP, one worker per queue). The
    /// other end is always kernel TCP in the peer namespace.
    #[arg(long, default_value = "kernel,flowlane")]
    pub backends: String,
    /// Roles of the backend under test (comma-separated): `receiver` (the
    /// peer namespace sends with kernel TCP) and `sender` (the peer
    /// namespace receives with kernel TCP). Default: receiver,sender
    /// (quick: receiver).
    #[arg(long)]
    pub roles: Option<String>,
    /// Connection counts (default 1,16,256,1024,10000).
    #[arg(long)]
    pub conns: Option<String>,
    /// Buffer (message) sizes per write (default 1k,64k).
    #[arg(long)]
    pub sizes: Option<String>,
    /// One-way delays in ms, added in each direction by the test bed's delay
    /// line (default 0,1,10,50; the RTT grows by twice each).
    #[arg(long)]
    pub delays: Option<String>,
    /// Latency cells: ping-pong message sizes (comma-separated) with the
    /// tested backend echoing (one connection, kernel sender measuring), at
    /// every delay. Default 64,16k (quick: 64); `none` skips them.
    #[arg(long)]
    pub latency_sizes: Option<String>,
    /// Measured seconds per cell (default 3; quick 2).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Warm-up seconds per cell (default 1; 2 when delay >= 10 ms).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Output folder (default results/<UTC date>).
    // The doc comment is the --help text, kept as is: not an HTML tag.
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The `flowlane` binary (test bed); default: beside this binary.
    #[arg(long)]
    pub flowlane: Option<PathBuf>,
    /// Test bed name (default `ttm<pid>`). A bed that is up already is used
    /// as it is and left so (its RSS and offloads untouched): one in use,
    /// of other than 2 queues, or with kernel-wire cells planned is
    /// refused. One the matrix makes is removed at its end.
    #[arg(long)]
    pub bed: Option<String>,
    /// flowlane's UMEM frames per queue (its `--frames-per-queue`; default
    /// flowlane's own, 32768): the receive memory its connections share.
    #[arg(long, value_name = "N", value_parser = flowlane_dataplane::service_args::frames_per_queue)]
    pub frames_per_queue: Option<u32>,
    /// flowlane copies every received payload (its `--copy-receive`:
    /// zero-copy receive off), to compare the two.
    #[arg(long)]
    pub copy_receive: bool,
    /// The flowlane receiver's `--rebalance`: `off` (default: the bed's
    /// RSS table stays as found, so that no cell depends on the ones
    /// before) or `auto` (buckets move during a cell: the moves are
    /// recorded in the cell, and the table is put back after it), to
    /// compare with and without moves in one build.
    #[arg(long, value_enum, default_value_t = flowlane_dataplane::service_args::RebalanceMode::Off)]
    pub rebalance: flowlane_dataplane::service_args::RebalanceMode,
    /// The IP version of every cell's connections (and control channel):
    /// `4`, the bed's 10.99.0.1 and 10.99.0.2, or `6`, its fd99::1 and
    /// fd99::2 (both backends, both roles; results.json's
    /// `params.family`).
    #[arg(long, default_value = "4", value_parser = ["4", "6"])]
    pub family: String,
}

/// One parsed `-m` mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Threads.
    pub sessions: usize,
    /// CPU to pin them to, `None` for `*`.
    pub cpu: Option<usize>,
    /// Receiver address.
    pub addr: IpAddr,
}

/// Parses `sessions,cpu|*,address`.
pub fn parse_mapping(s: &str) -> Result<Mapping> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [sessions, cpu, addr] = parts[..] else {
        bail!("-m {s:?}: expected SESSIONS,CPU|*,ADDRESS (e.g. 4,*,10.99.0.1)");
    };
    let sessions: usize = sessions
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| anyhow::anyhow!("-m {s:?}: sessions must be a positive number"))?;
    let cpu = if cpu == "*" {
        None
    } else {
        Some(
            cpu.parse()
                .map_err(|_| anyhow::anyhow!("-m {s:?}: cpu must be a number or *"))?,
        )
    };
    let addr = addr
        .parse()
        .map_err(|_| anyhow::anyhow!("-m {s:?}: {addr:?} is not an IP address"))?;
    Ok(Mapping {
        sessions,
        cpu,
        addr,
    })
}

/// The largest size [`parse_size`] takes: 1 GiB (a buffer is allocated
/// whole, per connection or core).
pub const MAX_SIZE: usize = 1 << 30;

/// Parses `65536`, `64k`, `1m` (binary units), at most [`MAX_SIZE`].
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (n, mul) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1024),
        Some('m' | 'M') => (&t[..t.len() - 1], 1024 * 1024),
        _ => (t, 1),
    };
    let v = n
        .parse::<usize>()
        .map_err(|_| format!("{s:?} is not a size (e.g. 65536, 64k, 1m)"))?
        .checked_mul(mul)
        .filter(|&v| v <= MAX_SIZE)
        .ok_or_else(|| format!("{s:?}: sizes go up to 1024m"))?;
    if v == 0 {
        return Err("size must be positive".into());
    }
    Ok(v)
}

/// The most threads a run takes (all `-m` mappings together).
pub const MAX_THREADS: usize = 4096;

impl RunArgs {
    /// `--wait` in seconds, or the role's default.
    pub fn wait_s(&self) -> f64 {
        self.wait.unwrap_or(if self.receiver { 60.0 } else { 0.0 })
    }

    /// The first flag given that only the flowlane backend takes (its
    /// control socket, its data path's), if any. `--ecn` counts as given
    /// when it is not `accept` (its default, and Linux's `tcp_ecn`
    /// default): kernel sockets have no per-socket ECN. `--congestion`
    /// is not one: the kernel backend sets it on its sockets.
    fn flowlane_only_flag(&self) -> Option<&'static str> {
        let d = &self.data_path;
        [
            ("--control-socket", self.rebalance.control_socket.is_some()),
            ("--daemon-socket", self.rebalance.daemon_socket.is_some()),
            ("--busy-poll", d.busy_poll),
            ("--frames-per-queue", d.frames_per_queue.is_some()),
            ("--queues", d.queues.is_some()),
            ("--neighbor", !d.neighbor.is_empty()),
            ("--rss-key", d.rss_key.is_some()),
            ("--rss-table", d.rss_table.is_some()),
            ("--copy-receive", d.copy_receive),
            ("--ecn", d.ecn != EcnChoice::default()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// The mode the flags select.
    pub fn mode(&self) -> Mode {
        if self.overlap_us.is_some() {
            Mode::Overlap
        } else if self.latency {
            Mode::Latency
        } else {
            Mode::Throughput
        }
    }

    /// Checks the flags and builds the plan.
    pub fn plan(&self) -> Result<Plan> {
        if self.receiver == self.sender {
            bail!("say -r (receiver) or -s (sender)");
        }
        if self.mapping.is_empty() {
            bail!("-m SESSIONS,CPU|*,ADDRESS is required (e.g. -m 1,*,127.0.0.1)");
        }
        let maps: Vec<Mapping> = self
            .mapping
            .iter()
            .map(|m| parse_mapping(m))
            .collect::<Result<_>>()?;
        let addr = maps[0].addr;
        if let Some(m) = maps.iter().find(|m| m.addr != addr) {
            bail!(
                "-m: all mappings must name the same receiver address ({addr} vs {})",
                m.addr
            );
        }
        let mut threads = Vec::new();
        for m in &maps {
            let n = self.threads.unwrap_or(m.sessions);
            if n > MAX_THREADS - threads.len() {
                bail!("-m/-n: more than {MAX_THREADS} threads");
            }
            threads.extend(std::iter::repeat_n(m.cpu, n));
        }
        if threads.is_empty() {
            bail!("-n 0: at least one thread is needed");
        }
        if self.ports == 0 {
            bail!("-P 0: at least one port is needed");
        }
        if u32::from(self.base_port) + u32::from(self.ports) > 65536 {
            bail!(
                "-p {} -P {}: ports beyond 65535",
                self.base_port,
                self.ports
            );
        }
        let data_ports =
            u32::from(self.base_port)..u32::from(self.base_port) + u32::from(self.ports);
        if data_ports.contains(&u32::from(self.control_port)) && !self.no_sync {
            bail!(
                "--control-port {} lies inside the data ports -p {} -P {}",
                self.control_port,
                self.base_port,
                self.ports
            );
        }
        if self.conns_per_thread == 0 {
            bail!("-l 0: at least one connection per thread is needed");
        }
        if threads.len().checked_mul(self.conns_per_thread).is_none() {
            bail!(
                "-l {}: {} threads × {} connections is more than can be counted",
                self.conns_per_thread,
                threads.len(),
                self.conns_per_thread
            );
        }
        for (f, v) in [
            ("-W", self.warmup),
            ("-t", self.duration),
            ("-C", self.cooldown),
            ("--wait", self.wait_s()),
        ] {
            if !(v.is_finite() && v >= 0.0) || v > 86_400.0 {
                bail!("{f} {v}: seconds must be between 0 and 86400");
            }
        }
        if self.duration <= 0.0 {
            bail!(
                "-t {}: the measured window must be longer than 0 s",
                self.duration
            );
        }
        let mode = self.mode();
        if mode != Mode::Throughput && self.conns_per_thread != 1 {
            bail!("latency and overlap modes use one connection per thread: drop -l");
        }
        if let Some(us) = self.overlap_us {
            if us as f64 / 1e6 >= self.duration {
                bail!(
                    "--overlap-us {us}: the computation must be shorter than the measured window (-t {})",
                    self.duration
                );
            }
            if self.sender && self.exec == ExecMode::Rtc {
                bail!(
                    "--overlap-us needs --mode queue-pair on the sender: run to completion computes on the very loop that would receive the reply, so no overlap can be seen"
                );
            }
        }
        if self.backend == BackendKind::Flowlane {
            if self.no_sync {
                bail!("--backend flowlane needs the control channel: drop -N");
            }
            let eph = flowlane_dataplane::ephemeral::EPHEMERAL;
            let last = u32::from(self.base_port) + u32::from(self.ports) - 1;
            if u32::from(self.base_port) <= u32::from(eph.1) && last >= u32::from(eph.0) {
                bail!(
                    "-p {} -P {}: flowlane's ephemeral ports {}-{} cannot be data ports",
                    self.base_port,
                    self.ports,
                    eph.0,
                    eph.1
                );
            }
            if (eph.0..=eph.1).contains(&self.control_port) {
                bail!(
                    "--control-port {}: the control channel stays on a kernel socket and cannot use flowlane's ephemeral ports {}-{}",
                    self.control_port,
                    eph.0,
                    eph.1
                );
            }
        } else if self.data_path.bed.is_some() {
            bail!("--bed goes with --backend flowlane");
        } else if let Some(flag) = self.flowlane_only_flag() {
            bail!("{flag} goes with --backend flowlane (the kernel backend has no data path of flowlane's): drop it");
        }
        // `--rebalance off` too: the kernel backend and the sender have
        // no buckets to move, either way.
        if (self.rebalance.rebalance.is_some() || self.rebalance.requested().is_some())
            && (self.backend != BackendKind::Flowlane || self.sender)
        {
            bail!("--rebalance goes with a --backend flowlane receiver (-r)");
        }
        self.rebalance
            .refuse_unpriced()
            .map_err(anyhow::Error::msg)?;
        Ok(Plan {
            receiver: self.receiver,
            threads,
            addr,
            conns_per_thread: self.conns_per_thread,
            no_sync: self.no_sync,
            overlap_us: self.overlap_us.unwrap_or(0),
            flowlane: FlowlaneOptions {
                iface: self.nic.clone(),
                data_path: self.data_path.clone(),
                rebalance: self.rebalance.clone(),
                control_port: self.control_port,
            },
            params: Params {
                proto: PROTO,
                backend: self.backend.name().into(),
                mode,
                base_port: self.base_port,
                ports: self.ports,
                warmup_s: self.warmup,
                duration_s: self.duration,
                cooldown_s: self.cooldown,
                msg_size: self.msg_size,
                buffer: self.buffer,
            },
        })
    }
}

/// The plan of a command line (`args` as typed after `flowlane-ttcp`),
/// for the tests of the modules that take one.
#[cfg(test)]
pub(crate) fn test_plan(args: &str) -> Plan {
    let v: Vec<&str> = args.split_whitespace().collect();
    tests::args(&v).plan().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn args(v: &[&str]) -> RunArgs {
        let mut a = vec!["flowlane-ttcp"];
        a.extend_from_slice(v);
        Cli::try_parse_from(a).unwrap().run
    }

    #[test]
    fn clap_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn mapping_forms() {
        assert_eq!(
            parse_mapping("4,*,10.99.0.1").unwrap(),
            Mapping {
                sessions: 4,
                cpu: None,
                addr: "10.99.0.1".parse().unwrap()
            }
        );
        assert_eq!(parse_mapping("1, 3 ,::1").unwrap().cpu, Some(3));
        for bad in [
            "4,*",
            "0,*,1.2.3.4",
            "x,*,1.2.3.4",
            "1,a,1.2.3.4",
            "1,*,host",
        ] {
            assert!(parse_mapping(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_size("1024m").unwrap(), MAX_SIZE);
        // Products past usize (debug: a panic; release: wrapped to 1024)
        // and sizes past the bound are one-line errors.
        for big in ["18014398509481985k", "18446744073709551615m", "1025m"] {
            let e = parse_size(big).unwrap_err();
            assert!(e.contains("sizes go up to 1024m"), "{big}: {e}");
        }
    }

    #[test]
    fn plan_threads_and_pinning() {
        let p = args(&[
            "-s",
            "-m",
            "2,0,127.0.0.1",
            "-m",
            "1,*,127.0.0.1",
            "-l",
            "8",
        ])
        .plan()
        .unwrap();
        assert_eq!(p.threads, vec![Some(0), Some(0), None]);
        assert_eq!(p.connections(), 24);
        let p = args(&["-s", "-m", "2,1,127.0.0.1", "-n", "3"])
            .plan()
            .unwrap();
        assert_eq!(p.threads, vec![Some(1); 3]);
        assert_eq!(p.params.mode, Mode::Throughput);
        let p = args(&["-r", "-m", "1,*,127.0.0.1", "--overlap-us", "100"])
            .plan()
            .unwrap();
        assert_eq!(p.params.mode, Mode::Overlap);
        assert_eq!(p.overlap_us, 100);
        // The overlap sender computes on application threads.
        let p = args(&[
            "-s",
            "-m",
            "1,*,127.0.0.1",
            "--overlap-us",
            "100",
            "--mode",
            "queue-pair",
        ])
        .plan()
        .unwrap();
        assert_eq!(p.params.mode, Mode::Overlap);
        // The last port: its range ends at 65535 (no u16 overflow).
        let p = args(&["-r", "-m", "1,*,127.0.0.1", "-p", "65535"])
            .plan()
            .unwrap();
        assert_eq!((p.params.base_port, p.params.ports), (65535, 1));
    }

    #[test]
    fn plan_misuse_is_one_line() {
        let cases: &[(&[&str], &str)] = &[
            (&["-m", "1,*,127.0.0.1"], "say -r"),
            (&["-s"], "-m SESSIONS"),
            (
                &["-s", "-m", "1,*,127.0.0.1", "-m", "1,*,127.0.0.2"],
                "same receiver address",
            ),
            (&["-s", "-m", "1,*,127.0.0.1", "-P", "0"], "-P 0"),
            (&["-s", "-m", "1,*,127.0.0.1", "-t", "0"], "-t 0"),
            (&["-s", "-m", "1,*,127.0.0.1", "-W=-1"], "-W -1"),
            (
                &["-r", "-m", "1,*,127.0.0.1", "--wait", "nan"],
                "--wait NaN",
            ),
            (
                &["-s", "-m", "1,*,127.0.0.1", "--control-port", "5001"],
                "inside the data ports",
            ),
            (
                &["-s", "-m", "1,*,127.0.0.1", "--latency", "-l", "2"],
                "one connection per thread",
            ),
            (
                &[
                    "-r",
                    "-m",
                    "1,*,10.0.0.1",
                    "--backend",
                    "flowlane",
                    "-p",
                    "40001",
                ],
                "ephemeral ports 40000-44999 cannot be data ports",
            ),
            (
                &[
                    "-r",
                    "-m",
                    "1,*,10.0.0.1",
                    "--backend",
                    "flowlane",
                    "--control-port",
                    "40000",
                ],
                "stays on a kernel socket",
            ),
            (
                &["-r", "-m", "1,*,10.0.0.1", "--backend", "flowlane", "-N"],
                "needs the control channel",
            ),
            (
                &["-r", "-m", "1,*,10.0.0.1", "--bed", "x"],
                "--bed goes with",
            ),
            (
                &["-r", "-m", "1,*,127.0.0.1", "--control-socket", "/tmp/x"],
                "--control-socket goes with --backend flowlane",
            ),
            (
                &["-r", "-m", "1,*,127.0.0.1", "--busy-poll"],
                "--busy-poll goes with --backend flowlane",
            ),
            (
                &["-s", "-m", "1,*,127.0.0.1", "--frames-per-queue", "4096"],
                "--frames-per-queue goes with --backend flowlane",
            ),
            // The data path's flags that kernel sockets would ignore.
            (
                &["-r", "-m", "1,*,127.0.0.1", "--queues", "3"],
                "--queues goes with --backend flowlane",
            ),
            (
                &[
                    "-s",
                    "-m",
                    "1,*,127.0.0.1",
                    "--neighbor",
                    "127.0.0.1=02:00:00:00:00:01",
                ],
                "--neighbor goes with --backend flowlane",
            ),
            (
                &["-r", "-m", "1,*,127.0.0.1", "--copy-receive"],
                "--copy-receive goes with --backend flowlane",
            ),
            (
                &["-s", "-m", "1,*,127.0.0.1", "--ecn", "on"],
                "--ecn goes with --backend flowlane",
            ),
            (
                &["-r", "-m", "1,*,127.0.0.1", "--rebalance", "off"],
                "--rebalance goes with a --backend flowlane receiver (-r)",
            ),
            (
                &[
                    "-r",
                    "-m",
                    "1,*,10.0.0.1",
                    "--backend",
                    "flowlane",
                    "--rebalance",
                    "off",
                    "--move-cost",
                    "fixed",
                ],
                "--rebalance off makes none: drop --move-cost",
            ),
            (
                &[
                    "-s",
                    "-m",
                    "1,*,10.0.0.1",
                    "--backend",
                    "flowlane",
                    "--rebalance",
                    "off",
                ],
                "--rebalance goes with a --backend flowlane receiver (-r)",
            ),
            (
                &["-s", "-m", "1,*,127.0.0.1", "--overlap-us", "100"],
                "--overlap-us needs --mode queue-pair on the sender",
            ),
            (
                &[
                    "-s",
                    "-m",
                    "1,*,127.0.0.1",
                    "--overlap-us",
                    "100",
                    "--mode",
                    "rtc",
                ],
                "no overlap can be seen",
            ),
            (
                &[
                    "-s",
                    "-m",
                    "1,*,127.0.0.1",
                    "--mode",
                    "queue-pair",
                    "-t",
                    "1",
                    "--overlap-us",
                    "1000000",
                ],
                "shorter than the measured window (-t 1)",
            ),
            (
                &[
                    "-r",
                    "-m",
                    "1,*,127.0.0.1",
                    "-t",
                    "0.5",
                    "--overlap-us",
                    "18446744073709551615",
                ],
                "shorter than the measured window",
            ),
            (
                &["-s", "-m", "2,*,127.0.0.1", "-l", "18446744073709551615"],
                "more than can be counted",
            ),
            (
                &["-s", "-m", "1,*,127.0.0.1", "-n", "18446744073709551615"],
                "more than 4096 threads",
            ),
            (
                &["-s", "-m", "4000,*,127.0.0.1", "-m", "4000,*,127.0.0.1"],
                "more than 4096 threads",
            ),
            (
                &[
                    "-r",
                    "-m",
                    "1,*,127.0.0.1",
                    "-p",
                    "65535",
                    "--control-port",
                    "65535",
                ],
                "inside the data ports -p 65535 -P 1",
            ),
        ];
        for (a, want) in cases {
            let e = args(a).plan().unwrap_err().to_string();
            assert!(e.contains(want), "{a:?}: {e}");
            assert!(!e.contains('\n'), "{a:?}: {e}");
        }
        assert!(Cli::try_parse_from(["flowlane-ttcp", "-r", "-s"]).is_err());
    }

    /// `--congestion` is both backends' (the kernel backend sets it on its
    /// sockets), its default cubic; `--ecn accept` is the kernel's default
    /// too, so not refused.
    /// flowlane's TCP serves both families: an IPv6 receiver address is
    /// planned for the flowlane backend as for the kernel's, either end.
    #[test]
    fn the_flowlane_backend_takes_ipv6() {
        for (side, addr) in [("-r", "fd99::1"), ("-s", "fd99::1"), ("-r", "::1")] {
            let m = format!("1,*,{addr}");
            let p = args(&[side, "-m", &m, "--backend", "flowlane"])
                .plan()
                .unwrap_or_else(|e| panic!("{side} {addr}: {e:#}"));
            assert_eq!(p.addr, addr.parse::<std::net::IpAddr>().unwrap());
        }
    }

    #[test]
    fn congestion_goes_with_both_backends() {
        let p = args(&["-s", "-m", "1,*,127.0.0.1"]).plan().unwrap();
        assert_eq!(p.congestion_name(), "cubic");
        let p = args(&["-r", "-m", "1,*,127.0.0.1", "--congestion", "newreno"])
            .plan()
            .unwrap();
        assert_eq!(p.congestion_name(), "newreno");
        args(&["-r", "-m", "1,*,127.0.0.1", "--ecn", "accept"])
            .plan()
            .unwrap();
    }
}
