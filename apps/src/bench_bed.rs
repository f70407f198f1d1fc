//! What the test-bed benchmarks share (`flowlane bench handoff`, `flowlane
//! bench skew`, and the bed of `bench rx` and `bench synflood`): a bed
//! brought up for one run and removed after it on every way out (error,
//! panic, SIGINT/SIGTERM/SIGHUP: [`crate::bed_guard`]), or, where the
//! user had it up already, used and given back its key and table; for the
//! benchmarks of live rebalancing, `flowlane bulk-sink` in the bed (its own
//! process, as deployed) with a control socket the benchmark talks to;
//! kernel TCP connections from the peer namespace, from source ports the
//! bed's emulated NIC hashes into chosen RSS buckets, idle or streaming.

use std::collections::HashSet;
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
use flowlane_numa_sched::nic::{RssNic, RssSettings};
use flowlane_numa_sched::{FlowTuple, Protocol, RssState};
use flowlane_testbed::{self as testbed, netns, BedSpec, BedState};

use crate::bed_guard::{self, Afterwards, BedGuard};

/// The `q` quantile of sorted `v` (nearest rank).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Brings up the bed `spec` describes for benchmark `what` (`bench rx`),
/// runs `f` on it and releases the bed again, whether `f` succeeded,
/// failed or panicked, or a signal ended the run (a failure to release it
/// comes first: a bed left behind, or left with the run's table, is what
/// the user must see). Released: removed if the run made it; a bed of that
/// name that was up before is the user's, used as found (with the run's
/// key and table) and left up, its own key and table put back.
///
/// # Errors
/// A bed of that name is up with another queue count than `spec`'s (one
/// line), or cannot be read; the bed does not come up; `f`'s error.
pub fn with_bed<T>(
    what: &'static str,
    spec: &BedSpec,
    f: impl FnOnce(&BedState) -> Result<T>,
) -> Result<T> {
    let afterwards = afterwards(what, spec, existing_bed(&spec.name)?)?;
    let (guard, bed) = BedGuard::up(what, spec, afterwards)?;
    let out = f(&bed);
    guard.release()?;
    out
}

/// The queue count and RSS settings of test bed `name`, if it is up.
///
/// # Errors
/// The bed is up but its emulated NIC cannot be read (one line).
pub(crate) fn existing_bed(name: &str) -> Result<Option<(u32, RssSettings)>> {
    let Ok(bed) = testbed::load(name) else {
        return Ok(None);
    };
    let rss = bed.nic().rss().with_context(|| {
        format!(
            "test bed {name} exists but its emulated NIC cannot be read: remove it (`flowlane testbed down --bed {name}`) or name another bed"
        )
    })?;
    Ok(Some((bed.queues, rss)))
}

/// What becomes of bed `spec.name` after a run of benchmark `what`, given
/// the bed of that name that is up (`existing`: its queue count and RSS
/// settings): none, removed (the run makes it); one, left up with its key
/// and table put back. A benchmark's bed has the queue count its
/// measurement needs: a bed up with another count is refused, not rebuilt
/// (which would take down what the user had on it).
///
/// # Errors
/// The bed is up with another queue count than `spec`'s, in one line that
/// says what to do.
fn afterwards(
    what: &str,
    spec: &BedSpec,
    existing: Option<(u32, RssSettings)>,
) -> Result<Afterwards> {
    let Some((queues, rss)) = existing else {
        return Ok(Afterwards::Remove);
    };
    if queues != spec.queues {
        bail!(
            "{what}: test bed {} is up with {queues} queues, and the benchmark needs {}: name \
             another bed with --bed (it is made for the run and removed after it), or take this \
             one down first (`flowlane testbed down --bed {}`)",
            spec.name,
            spec.queues,
            spec.name
        );
    }
    Ok(Afterwards::Restore {
        key: rss.key,
        table: rss.table,
    })
}

/// The last lines of a child's log (at most 5, blank ones left out), on one
/// line, for the error that says it failed.
pub fn log_tail(log: &Path) -> String {
    let said = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = said
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = &lines[lines.len().saturating_sub(5)..];
    if tail.is_empty() {
        return "its log is empty".into();
    }
    tail.join(" | ")
}

/// A control socket path of this process for benchmark `tag`.
pub fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("flowlane-bench-{tag}-{}.sock", std::process::id()))
}

/// `flowlane bulk-sink`, in a bed, with its control socket; stopped (and
/// its log removed) when dropped.
#[derive(Debug)]
pub struct Sink {
    child: Child,
    socket: PathBuf,
}

impl Sink {
    /// Starts the sink on `port` in `bed` (`--no-hash`, plus `extra`
    /// flags, e.g. `--rebalance auto`), listening on `socket`; returns once
    /// it answers there.
    pub fn start(bed: &BedState, socket: &Path, port: u16, extra: &[&str]) -> Result<Sink> {
        let exe = std::env::current_exe().context("finding the flowlane binary")?;
        let log = socket.with_extension("log");
        bed_guard::remove_on_signal(log.clone());
        let child = bed_guard::spawn_child(
            Command::new(exe)
                .args(["bulk-sink", "--no-hash", "--port", &port.to_string()])
                .args(["--bed", &bed.name, "--control-socket"])
                .arg(socket)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).context("creating the sink's log")?),
        )
        .context("starting flowlane bulk-sink in the test bed")?;
        let mut sink = Sink {
            child,
            socket: socket.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while sink.status().is_err() {
            if let Some(st) = sink.child.try_wait()? {
                bail!("flowlane bulk-sink exited early ({st}): {}", log_tail(&log));
            }
            if Instant::now() > deadline {
                bail!(
                    "flowlane bulk-sink did not answer on {} within 30 s: {}",
                    socket.display(),
                    log_tail(&log)
                );
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

    /// The sink's queues, buckets, table and moves.
    pub fn status(&self) -> Result<ServiceStatus> {
        match self.ask(&Request::Status)? {
            Response::Status(s) => Ok(*s),
            other => bail!("unexpected answer {other:?}"),
        }
    }

    /// Moves `bucket` to `to_queue` with its connections.
    pub fn move_bucket(&self, bucket: u16, to_queue: u32) -> Result<MoveReport> {
        match self.ask(&Request::Move { bucket, to_queue })? {
            Response::Moved(r) => Ok(r),
            Response::Error { message } => bail!("moving bucket {bucket}: {message}"),
            other => bail!("unexpected answer {other:?}"),
        }
    }

    /// Live connections on all queues.
    pub fn total_connections(&self) -> Result<u64> {
        let s = self.status()?;
        Ok(s.queues
            .iter()
            .flat_map(|q| q.buckets.iter())
            .map(|b| b.connections)
            .sum())
    }

    /// Live connections of `bucket` on any queue.
    pub fn connections(&self, bucket: u16) -> Result<u64> {
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
        bed_guard::stop_child(&mut self.child);
        let _ = std::fs::remove_file(self.socket.with_extension("log"));
    }
}

/// The RSS bucket of the bed's emulated NIC that a flow from the peer's
/// source port to the bed's local address and `port` falls in.
struct BucketOf {
    rss: RssState,
    peer: IpAddr,
    local: IpAddr,
    port: u16,
}

impl BucketOf {
    fn new(bed: &BedState, port: u16) -> Result<BucketOf> {
        let (rss, _) = crate::flow_rss::rss_state(Some(&bed.name), None, None, 0, 2, None)?;
        Ok(BucketOf {
            rss,
            peer: bed.peer_v4.parse()?,
            local: bed.local_v4.parse()?,
            port,
        })
    }

    fn bucket(&self, src_port: u16) -> usize {
        let flow = FlowTuple {
            src: self.peer,
            dst: self.local,
            src_port,
            dst_port: self.port,
            protocol: Protocol::Tcp,
        };
        self.rss.hint(&flow).bucket
    }

    fn table_size(&self) -> usize {
        self.rss.table().size()
    }
}

/// `n` source ports (from `from` up, none of `taken`) whose flows to
/// `port` fall in `bucket` of the bed's emulated NIC.
pub fn ports_in_bucket(
    bed: &BedState,
    port: u16,
    bucket: usize,
    n: usize,
    (from, taken): (u16, &HashSet<u16>),
) -> Result<Vec<u16>> {
    let of = BucketOf::new(bed, port)?;
    let ports: Vec<u16> = (from..=u16::MAX)
        .filter(|&p| of.bucket(p) == bucket && !taken.contains(&p))
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

/// `n` source ports (from `from` up) whose flows to `port` fall in
/// different buckets of the bed's emulated NIC, as long as there are
/// buckets left (then again each bucket at most once more, and so on).
pub fn ports_in_distinct_buckets(
    bed: &BedState,
    port: u16,
    n: usize,
    from: u16,
) -> Result<Vec<u16>> {
    let of = BucketOf::new(bed, port)?;
    let ports = spread_over_buckets(from..=u16::MAX, |p| of.bucket(p), of.table_size(), n);
    if ports.len() < n {
        bail!(
            "only {} ports from {from} are free for {n} flows",
            ports.len()
        );
    }
    Ok(ports)
}

/// `n` source ports (from `from` up, none of `taken`) whose flows to
/// `port` fall in buckets other than `bucket`, spread over those buckets
/// as [`ports_in_distinct_buckets`] spreads them.
pub fn ports_outside_bucket(
    bed: &BedState,
    port: u16,
    bucket: usize,
    n: usize,
    (from, taken): (u16, &HashSet<u16>),
) -> Result<Vec<u16>> {
    let of = BucketOf::new(bed, port)?;
    let others = (from..=u16::MAX).filter(|&p| of.bucket(p) != bucket && !taken.contains(&p));
    // The other buckets, numbered without a gap at `bucket`.
    let rank = |p| {
        let b = of.bucket(p);
        b - usize::from(b > bucket)
    };
    let ports = spread_over_buckets(others, rank, of.table_size() - 1, n);
    if ports.len() < n {
        bail!(
            "only {} ports from {from} are free for {n} flows outside bucket {bucket}",
            ports.len()
        );
    }
    Ok(ports)
}

/// The first `n` of `ports` such that no bucket (`bucket_of`, among
/// `buckets`) gets a second port before every bucket has one, and so on.
fn spread_over_buckets(
    ports: impl Iterator<Item = u16>,
    bucket_of: impl Fn(u16) -> usize,
    buckets: usize,
    n: usize,
) -> Vec<u16> {
    let mut used = vec![false; buckets.max(1)];
    let mut taken = 0;
    let mut out = Vec::with_capacity(n);
    for p in ports {
        if out.len() == n {
            break;
        }
        let b = bucket_of(p) % used.len();
        if used[b] {
            continue;
        }
        used[b] = true;
        taken += 1;
        out.push(p);
        if taken == used.len() {
            used.fill(false);
            taken = 0;
        }
    }
    out
}

/// A kernel TCP connection from `port` (in the peer namespace: the caller's
/// thread has entered it).
pub fn connect_from(port: u16, to: SocketAddrV4) -> Result<TcpStream> {
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

/// The peer side: idle connections held open, busy ones streaming as fast
/// as the kernel sends until dropped.
#[derive(Debug)]
pub struct Peer {
    _idle: Vec<TcpStream>,
    stop: Arc<AtomicBool>,
    streams: Vec<std::thread::JoinHandle<()>>,
}

impl Peer {
    /// Connects from the peer namespace to the sink's `port`: from the
    /// `idle` source ports silent connections, from the `busy` ones
    /// streaming connections; returns once every one is connected.
    pub fn open(bed: &BedState, port: u16, idle: &[u16], busy: &[u16]) -> Result<Peer> {
        let to = SocketAddrV4::new(bed.local_v4.parse()?, port);
        let stop = Arc::new(AtomicBool::new(false));
        let idle_ports = idle.to_vec();
        let idle = netns::in_netns(&bed.peer_netns, move || {
            idle_ports.iter().map(|&p| connect_from(p, to)).collect()
        })?;
        let mut peer = Peer {
            _idle: idle,
            stop,
            streams: Vec::new(),
        };
        for &port in busy {
            let (ns, stop) = (bed.peer_netns.clone(), peer.stop.clone());
            let (tx, rx) = std::sync::mpsc::channel();
            peer.streams.push(std::thread::spawn(move || {
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
        Ok(peer)
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
    fn a_log_tail_is_its_last_lines_on_one_line() {
        let log = std::env::temp_dir().join(format!(
            "flowlane-bench-bed-log-tail-{}.log",
            std::process::id()
        ));
        std::fs::write(&log, "a\n\nb\nc\nd\ne\nf: it failed\n\n").unwrap();
        assert_eq!(log_tail(&log), "b | c | d | e | f: it failed");
        std::fs::write(&log, "").unwrap();
        assert_eq!(log_tail(&log), "its log is empty");
        std::fs::remove_file(&log).unwrap();
    }

    /// A bed the run makes is removed after it; one the user had up with
    /// the queue count the benchmark needs is left up, its own key and
    /// table put back; one with another count is refused in one line
    /// (bringing it up for the run would rebuild it).
    #[test]
    fn a_bed_that_was_up_is_given_back_and_one_of_another_size_refused() {
        let spec = BedSpec {
            name: "rf53b".into(),
            queues: 2,
            key: vec![0x6d; 40],
            table: vec![0; 128],
        };
        assert_eq!(
            afterwards("bench handoff", &spec, None).unwrap(),
            Afterwards::Remove
        );
        let theirs = RssSettings {
            key: vec![0x11; 40],
            table: vec![1, 0, 1, 1],
        };
        assert_eq!(
            afterwards("bench handoff", &spec, Some((2, theirs.clone()))).unwrap(),
            Afterwards::Restore {
                key: theirs.key.clone(),
                table: theirs.table.clone(),
            }
        );
        let e = afterwards("bench skew", &spec, Some((4, theirs))).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "bench skew: test bed rf53b is up with 4 queues, and the benchmark needs 2: name \
             another bed with --bed (it is made for the run and removed after it), or take this \
             one down first (`flowlane testbed down --bed rf53b`)"
        );
    }

    #[test]
    fn ports_spread_over_every_bucket_before_any_repeats() {
        // Port p falls in bucket p % 4 for the even ones, 0 for the odd.
        let of = |p: u16| {
            if p % 2 == 0 {
                usize::from(p / 2) % 4
            } else {
                0
            }
        };
        let got = spread_over_buckets(0..100, of, 4, 6);
        let buckets: Vec<usize> = got.iter().map(|&p| of(p)).collect();
        assert_eq!(&buckets[..4], &[0, 1, 2, 3]);
        // A second round once every bucket had one.
        assert_eq!(&buckets[4..], &[0, 1]);
        assert_eq!(got, vec![0, 2, 4, 6, 7, 10]);
        // Too few ports: what there is.
        assert_eq!(spread_over_buckets(0..3, of, 4, 6).len(), 2);
    }
}
