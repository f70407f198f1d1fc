//! `flowlane bench handoff`: what moving one RSS bucket with its live
//! connections costs (issue 13's handoff time per move, p50/p99), for a
//! bucket of idle connections and for a busy one.
//!
//! A two-queue test bed; `flowlane bulk-sink` on it (its own process, as
//! deployed, `--no-hash`); in the peer namespace, kernel TCP connections
//! from source ports that the emulated NIC's Toeplitz hash puts in one
//! bucket: `idle` of them open and silent, `busy` of them streaming as fast
//! as the kernel sends. The bucket is then moved back and forth between
//! the two queues through the sink's control socket
//! (`flowlane rebalance move` does the same), one move every interval; the
//! sink measures each move (`MoveReport`: from the request to the new
//! queue serving the bucket, export and NIC write included).

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_dataplane::control_socket::{self, Request, Response, ServiceStatus};
use flowlane_dataplane::MoveReport;
use flowlane_numa_sched::{FlowTuple, Protocol};
use flowlane_testbed::{self as testbed, netns, BedSpec, BedState};
use serde::Serialize;

/// Flags of `flowlane bench handoff`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Test bed name (a two-queue bed; created and removed by the run).
    #[arg(long, default_value = "benchho")]
    pub bed: String,
    /// Idle connections in the moved bucket, one case per value.
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 100])]
    pub idle: Vec<usize>,
    /// Streaming connections in the moved bucket, one case per value
    /// (combined with every `--idle` value).
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 4])]
    pub busy: Vec<usize>,
    /// Moves per case.
    #[arg(long, default_value_t = 200)]
    pub moves: usize,
    /// Milliseconds between moves.
    #[arg(long, default_value_t = 5)]
    pub interval_ms: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One case's figures.
#[derive(Debug, Serialize)]
pub struct HandoffFigure {
    /// Idle connections in the bucket.
    pub idle: usize,
    /// Streaming connections in the bucket.
    pub busy: usize,
    /// Moves measured.
    pub moves: usize,
    /// Connections carried per move (mean).
    pub connections: f64,
    /// Time per move, µs: p50, p99, max.
    pub duration_us: [f64; 3],
    /// Of which, exporting from the old queue's stack, µs: p50, p99.
    pub export_us: [f64; 2],
    /// Of which, writing the NIC's entry, µs: p50, p99.
    pub nic_write_us: [f64; 2],
    /// Frames the old queue forwarded per move: mean, max.
    pub frames_forwarded: [f64; 2],
    /// Frames the new queue held per move: mean, max.
    pub frames_held: [f64; 2],
    /// Moves that ended on the hold timeout instead of the drain marker.
    pub hold_timeouts: usize,
}

const PORT: u16 = 5009;

/// The `q` quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// The sink, in the bed, with its control socket at `socket`.
struct Sink {
    child: Child,
    socket: PathBuf,
}

impl Sink {
    fn start(bed: &BedState, socket: &Path) -> Result<Sink> {
        let exe = std::env::current_exe().context("finding the flowlane binary")?;
        let log = socket.with_extension("log");
        let child = Command::new(exe)
            .args(["bulk-sink", "--no-hash", "--port", &PORT.to_string()])
            .args(["--bed", &bed.name, "--control-socket"])
            .arg(socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).context("creating the sink's log")?)
            .spawn()
            .context("starting flowlane bulk-sink in the test bed")?;
        let mut sink = Sink {
            child,
            socket: socket.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while sink.status().is_err() {
            if let Some(st) = sink.child.try_wait()? {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                bail!("flowlane bulk-sink exited early ({st}): {}", said.trim());
            }
            if Instant::now() > deadline {
                bail!("flowlane bulk-sink did not answer on {}", socket.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(sink)
    }

    fn ask(&self, r: &Request) -> Result<Response> {
        Ok(control_socket::request(
            &self.socket,
            r,
            Duration::from_secs(5),
        )?)
    }

    fn status(&self) -> Result<ServiceStatus> {
        match self.ask(&Request::Status)? {
            Response::Status(s) => Ok(s),
            other => bail!("unexpected answer {other:?}"),
        }
    }

    fn move_bucket(&self, bucket: u16, to_queue: u32) -> Result<MoveReport> {
        match self.ask(&Request::Move { bucket, to_queue })? {
            Response::Moved(r) => Ok(r),
            Response::Error { message } => bail!("moving bucket {bucket}: {message}"),
            other => bail!("unexpected answer {other:?}"),
        }
    }

    /// Live connections of `bucket` on any queue.
    fn connections(&self, bucket: u16) -> Result<u64> {
        let s = self.status()?;
        Ok(s.queues
            .iter()
            .flat_map(|q| q.buckets.iter())
            .filter(|b| b.bucket == bucket)
            .map(|b| b.connections)
            .sum())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        flowlane_testbed::child::stop(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_file(self.socket.with_extension("log"));
    }
}

/// `n` source ports (from `from` up) whose flows to the sink fall in
/// `bucket` of the bed's emulated NIC.
fn ports_in_bucket(bed: &BedState, bucket: usize, n: usize, from: u16) -> Result<Vec<u16>> {
    let (rss, _) = crate::flow_rss::rss_state(Some(&bed.name), None, None, 0, 2, None)?;
    let (peer, local): (IpAddr, IpAddr) = (bed.peer_v4.parse()?, bed.local_v4.parse()?);
    let ports: Vec<u16> = (from..=u16::MAX)
        .filter(|&p| {
            let flow = FlowTuple {
                src: peer,
                dst: local,
                src_port: p,
                dst_port: PORT,
                protocol: Protocol::Tcp,
            };
            rss.hint(&flow).bucket == bucket
        })
        .take(n)
        .collect();
    if ports.len() < n {
        bail!(
            "only {} ports from {from} fall in bucket {bucket}",
            ports.len()
        );
    }
    Ok(ports)
}

/// A kernel TCP connection from `port` (in the peer namespace: the caller's
/// thread has entered it).
fn connect_from(port: u16, to: SocketAddrV4) -> Result<TcpStream> {
    use nix::sys::socket::{
        bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)),
    )?;
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to))
        .with_context(|| format!("connecting from port {port} to {to}"))?;
    Ok(TcpStream::from(fd))
}

/// The peer side of one case: idle connections held open, busy ones
/// streaming until dropped.
struct Peer {
    _idle: Vec<TcpStream>,
    stop: Arc<AtomicBool>,
    streams: Vec<std::thread::JoinHandle<()>>,
}

impl Peer {
    fn open(bed: &BedState, idle: &[u16], busy: &[u16]) -> Result<Peer> {
        let to = SocketAddrV4::new(bed.local_v4.parse()?, PORT);
        let stop = Arc::new(AtomicBool::new(false));
        let idle_ports = idle.to_vec();
        let idle = netns::in_netns(&bed.peer_netns, move || {
            idle_ports.iter().map(|&p| connect_from(p, to)).collect()
        })?;
        let mut streams = Vec::new();
        for &port in busy {
            let (ns, stop) = (bed.peer_netns.clone(), stop.clone());
            let (tx, rx) = std::sync::mpsc::channel();
            streams.push(std::thread::spawn(move || {
                let _ = netns::in_netns(&ns, move || {
                    let connected = connect_from(port, to);
                    let mut s = match connected {
                        Ok(s) => {
                            let _ = tx.send(Ok(()));
                            s
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return Ok(());
                        }
                    };
                    let block = vec![0x5au8; 256 << 10];
                    while !stop.load(Ordering::Relaxed) && s.write_all(&block).is_ok() {}
                    Ok(())
                });
            }));
            rx.recv()
                .context("a streaming connection's thread died")??;
        }
        Ok(Peer {
            _idle: idle,
            stop,
            streams,
        })
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.streams.drain(..) {
            let _ = t.join();
        }
    }
}

/// One case: `idle` + `busy` connections in one bucket, moved `moves`
/// times.
fn case(
    bed: &BedState,
    sink: &Sink,
    ports_from: &mut u16,
    idle: usize,
    busy: usize,
    args: &Args,
) -> Result<HandoffFigure> {
    let status = sink.status()?;
    // A bucket on queue 0 (the table of a fresh bed spreads them).
    let bucket = status
        .table
        .iter()
        .position(|&q| q == 0)
        .context("no bucket on queue 0")?;
    let ports = ports_in_bucket(bed, bucket, idle + busy, *ports_from)?;
    // Fresh ports for the next case (no TIME-WAIT clash).
    *ports_from = ports.last().map_or(*ports_from, |&p| p.saturating_add(1));
    let peer = Peer::open(bed, &ports[..idle], &ports[idle..])?;
    let b = bucket as u16;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.connections(b)? < (idle + busy) as u64 {
        if Instant::now() > deadline {
            bail!("the sink does not serve all {} connections", idle + busy);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut reports = Vec::with_capacity(args.moves);
    let mut at = 0u32;
    for _ in 0..args.moves {
        std::thread::sleep(Duration::from_millis(args.interval_ms));
        at = 1 - at;
        reports.push(sink.move_bucket(b, at)?);
    }
    drop(peer);
    Ok(figure(idle, busy, &reports))
}

/// The figures of one case's moves.
fn figure(idle: usize, busy: usize, reports: &[MoveReport]) -> HandoffFigure {
    let sorted = |f: fn(&MoveReport) -> f64| {
        let mut v: Vec<f64> = reports.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let n = reports.len().max(1) as f64;
    let mean_max = |f: fn(&MoveReport) -> u64| {
        let v: Vec<u64> = reports.iter().map(f).collect();
        [
            v.iter().sum::<u64>() as f64 / n,
            v.iter().copied().max().unwrap_or(0) as f64,
        ]
    };
    let d = sorted(|r| r.duration_us);
    let e = sorted(|r| r.export_us);
    let w = sorted(|r| r.nic_write_us);
    HandoffFigure {
        idle,
        busy,
        moves: reports.len(),
        connections: reports.iter().map(|r| r.connections as f64).sum::<f64>() / n,
        duration_us: [
            quantile(&d, 0.5),
            quantile(&d, 0.99),
            d.last().copied().unwrap_or(0.0),
        ],
        export_us: [quantile(&e, 0.5), quantile(&e, 0.99)],
        nic_write_us: [quantile(&w, 0.5), quantile(&w, 0.99)],
        frames_forwarded: mean_max(|r| r.frames_forwarded),
        frames_held: mean_max(|r| r.frames_held),
        hold_timeouts: reports.iter().filter(|r| r.hold_timed_out).count(),
    }
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    netns::require_root("flowlane bench handoff")?;
    if args.moves == 0 {
        bail!("--moves must be at least 1");
    }
    let key = flowlane_numa_sched::toeplitz::RssKey::microsoft_default();
    let spec = BedSpec {
        name: args.bed.clone(),
        queues: 2,
        key: key.as_bytes().to_vec(),
        table: (0..128).map(|i| i % 2).collect(),
    };
    let bed = testbed::up(&spec)?;
    let socket = std::env::temp_dir().join(format!(
        "flowlane-bench-handoff-{}.sock",
        std::process::id()
    ));
    let figures = (|| -> Result<Vec<HandoffFigure>> {
        let sink = Sink::start(&bed, &socket)?;
        let mut ports_from = 20_000;
        let mut out = Vec::new();
        for &busy in &args.busy {
            for &idle in &args.idle {
                out.push(case(&bed, &sink, &mut ports_from, idle, busy, &args)?);
            }
        }
        Ok(out)
    })();
    testbed::down(&args.bed)?;
    let figures = figures?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        outln!("idle  busy  moves  conns/move  move_us p50/p99/max    export_us p50/p99  nic_write_us p50/p99  fwd/move mean,max  held/move mean,max  hold_timeouts");
        for f in &figures {
            outln!(
                "{:>4}  {:>4}  {:>5}  {:>10.1}  {:>7.0} /{:>6.0} /{:>6.0}  {:>8.1} /{:>6.1}  {:>9.1} /{:>6.1}  {:>8.1}, {:>6.0}  {:>8.1}, {:>6.0}  {:>13}",
                f.idle,
                f.busy,
                f.moves,
                f.connections,
                f.duration_us[0],
                f.duration_us[1],
                f.duration_us[2],
                f.export_us[0],
                f.export_us[1],
                f.nic_write_us[0],
                f.nic_write_us[1],
                f.frames_forwarded[0],
                f.frames_forwarded[1],
                f.frames_held[0],
                f.frames_held[1],
                f.hold_timeouts
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v[..1], 0.99), 1.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn figures_summarise_the_moves() {
        let r = |d: f64, fwd: u64, held: u64| MoveReport {
            connections: 100,
            duration_us: d,
            frames_forwarded: fwd,
            frames_held: held,
            ..MoveReport::default()
        };
        let f = figure(100, 0, &[r(30.0, 0, 0), r(10.0, 4, 1), r(20.0, 2, 0)]);
        assert_eq!(f.duration_us, [20.0, 30.0, 30.0]);
        assert_eq!(f.frames_forwarded, [2.0, 4.0]);
        assert_eq!(f.frames_held, [1.0 / 3.0, 1.0]);
        assert_eq!(f.connections, 100.0);
    }
}
