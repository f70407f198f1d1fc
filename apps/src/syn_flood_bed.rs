//! What `flowlane bench synflood` runs on the test bed besides flowlane:
//! the flood (the bed's XDP live-frames generator in its SYN mode, on a
//! thread in the peer namespace, throttled to a rate or flat out), a kernel
//! echo server in the bed's namespace (the kernel's SYN cookies, beside
//! flowlane), and a legitimate kernel client in the peer namespace that
//! connects every half second and times its connect and echo.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use flowlane_dataplane::iface::parse_mac;
use flowlane_testbed::trafficgen::{FrameCounter, Generator, SynFlood};
use flowlane_testbed::{self as testbed, netns, BedState};
use flowlane_wire::packet::{emit_eth_ipv4_tcp_headers, emit_eth_ipv6_tcp_headers};
use flowlane_wire::{
    EtherType, EthernetAddress, EthernetRepr, IpProtocol, Ipv4Repr, Ipv6Repr, TcpFlags, TcpOptions,
    TcpRepr,
};
use nix::sys::socket::{
    bind, connect, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrStorage,
};
use nix::sys::time::TimeVal;

/// A flood's rate: SYNs per second, or as fast as the generator sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// This many SYNs per second (batches, then a sleep).
    PerSecond(u32),
    /// Flat out: batches back to back.
    Max,
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Rate, String> {
        if s == "max" {
            return Ok(Rate::Max);
        }
        match s.parse::<u32>() {
            Ok(n) if n > 0 => Ok(Rate::PerSecond(n)),
            _ => Err(format!(
                "{s:?} is not a rate: SYNs per second (a positive number) or `max`"
            )),
        }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rate::PerSecond(n) => write!(f, "{n}"),
            Rate::Max => f.write_str("max"),
        }
    }
}

/// The forged sources of a flood: an inclusive range of IPv4 or of IPv6
/// addresses (`A-B`, or one address). An IPv6 range differs in its last 32
/// bits only (the generator rewrites those).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sources {
    /// The first address.
    pub first: IpAddr,
    /// The last address (inclusive), of the first's family.
    pub last: IpAddr,
}

impl Sources {
    /// The first and last address as numbers (IPv4: 32 bits, IPv6: 128).
    fn bounds(&self) -> (u128, u128) {
        let n = |a: IpAddr| match a {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        (n(self.first), n(self.last))
    }

    /// How many addresses.
    pub fn count(&self) -> u32 {
        let (first, last) = self.bounds();
        // Parsing keeps an IPv6 range within its last 32 bits: all 2^32 of
        // them count as u32::MAX (never 0).
        u32::try_from(last - first + 1).unwrap_or(u32::MAX)
    }

    /// Every address, in order.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> {
        let (first, last) = self.bounds();
        let v4 = self.first.is_ipv4();
        (first..=last).map(move |n| {
            if v4 {
                IpAddr::from(std::net::Ipv4Addr::from(n as u32))
            } else {
                IpAddr::from(std::net::Ipv6Addr::from(n))
            }
        })
    }
}

impl FromStr for Sources {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Sources, String> {
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let parse = |x: &str| {
            x.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("{x:?} is not an IPv4 or IPv6 address"))
        };
        let r = Sources {
            first: parse(a)?,
            last: parse(b)?,
        };
        if r.first.is_ipv4() != r.last.is_ipv4() {
            return Err(format!(
                "{s:?}: the first and last address are of two families; give both IPv4 or both IPv6"
            ));
        }
        let (first, last) = r.bounds();
        if last < first {
            return Err(format!("{s:?}: the last address comes before the first"));
        }
        if first >> 32 != last >> 32 {
            return Err(format!(
                "{s:?}: an IPv6 range may differ in its last 32 bits only (e.g. fd99::100-fd99::200)"
            ));
        }
        Ok(r)
    }
}

/// The source ports of the flood: all but the well-known ones.
pub const FIRST_PORT: u16 = 1024;

/// The SYN the generator starts from: from the peer's MAC to the bed's,
/// from `sources.first` port [`FIRST_PORT`] to `to` (of the sources'
/// family), ISN 0, with the options Linux sends (MSS 1460, SACK permitted,
/// timestamps, window scale 7); the generator rewrites source, port and ISN
/// per frame.
pub fn syn_frame(bed: &BedState, sources: &Sources, to: SocketAddr) -> Result<Vec<u8>> {
    let mac = |s: &str| {
        parse_mac(s)
            .map(EthernetAddress)
            .with_context(|| format!("bad MAC {s}"))
    };
    let tcp = TcpRepr {
        src_port: FIRST_PORT,
        dst_port: to.port(),
        seq: 0,
        ack: 0,
        flags: TcpFlags::SYN,
        window: 64240,
        urgent: 0,
        options: TcpOptions {
            mss: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamps: Some((1, 0)),
            ..TcpOptions::default()
        },
    };
    let ip_len = if to.is_ipv4() { 20 } else { 40 };
    let mut buf = vec![0u8; 14 + ip_len + tcp.header_len()];
    let tcp_len = tcp.emit(&mut buf[14 + ip_len..])?;
    let eth = EthernetRepr {
        dst_addr: mac(&bed.local_mac)?,
        src_addr: mac(&bed.peer_mac)?,
        vlan: Default::default(),
        // The emitters set it.
        ethertype: EtherType::Ipv4,
    };
    let len = match (sources.first, to.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let ip = Ipv4Repr::new(src, dst, IpProtocol::Tcp, tcp_len);
            emit_eth_ipv4_tcp_headers(&mut buf, &eth, &ip, tcp_len)?
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let ip = Ipv6Repr::new(src, dst, IpProtocol::Tcp, tcp_len);
            emit_eth_ipv6_tcp_headers(&mut buf, &eth, &ip, tcp_len)?
        }
        _ => bail!(
            "the flood's sources ({}) and its target {to} are of two families",
            sources.first
        ),
    };
    buf.truncate(len);
    Ok(buf)
}

/// What the flood thread is told.
enum Command {
    /// Send this SYN frame (rewritten per frame) at this rate.
    Flood(Vec<u8>, Rate),
    /// Stop sending until the next command.
    Pause,
}

/// The most frames one `BPF_PROG_RUN` call sends.
const MAX_CALL: u32 = 1 << 20;

/// How long a call flat out should take: on this kernel every call of 64
/// frames or more also waits 15-40 ms (see `Generator::send`), so calls
/// are sized to take about this long, more than 90 % of it sending.
const CALL_TIME: Duration = Duration::from_millis(400);

/// How long a throttled flood sleeps when nothing is due.
const TICK: Duration = Duration::from_micros(200);

/// The flood generator: a thread in the bed's peer namespace, pinned to
/// one CPU, sending SYNs out of the peer's interface when told to.
#[derive(Debug)]
pub struct Flood {
    commands: Option<mpsc::Sender<Command>>,
    sent: FrameCounter,
    tid: u32,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Flood {
    /// Loads the generator (sources `sources`, every port from
    /// [`FIRST_PORT`]) in `bed`'s peer namespace on a thread pinned to
    /// `cpu`; returns once it is loaded, paused.
    pub fn start(bed: &BedState, sources: &Sources, cpu: u32) -> Result<Flood> {
        let config = SynFlood {
            first_source: sources.first,
            sources: sources.count(),
            first_port: FIRST_PORT,
            ports: u32::from(u16::MAX - FIRST_PORT) + 1,
        };
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let ns = bed.peer_netns.clone();
        let thread = std::thread::spawn(move || {
            netns::in_netns(&ns, move || {
                let loaded = (|| -> Result<(Generator, FrameCounter)> {
                    flowlane_dataplane::affinity::pin_current_thread(&[cpu])?;
                    let ifindex = nix::net::if_::if_nametoindex(testbed::PEER_IF)?;
                    let g = Generator::syn_flood(ifindex, &config)?;
                    let counter = g.frame_counter()?;
                    Ok((g, counter))
                })();
                let g = match loaded {
                    Ok((g, counter)) => {
                        let tid = nix::unistd::gettid().as_raw() as u32;
                        let _ = ready_tx.send(Ok((counter, tid)));
                        g
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow!("{e:#}")));
                        return Err(e);
                    }
                };
                run(&g, &rx)
            })
        });
        let (sent, tid) = ready_rx
            .recv()
            .context("the flood thread died while loading the generator")??;
        Ok(Flood {
            commands: Some(tx),
            sent,
            tid,
            thread: Some(thread),
        })
    }

    /// Starts (or changes) the flood: `frame` at `rate`.
    pub fn flood(&self, frame: Vec<u8>, rate: Rate) -> Result<()> {
        self.send(Command::Flood(frame, rate))
    }

    /// Stops sending (the generator stays loaded).
    pub fn pause(&self) -> Result<()> {
        self.send(Command::Pause)
    }

    fn send(&self, c: Command) -> Result<()> {
        self.commands
            .as_ref()
            .and_then(|t| t.send(c).ok())
            .ok_or_else(|| anyhow!("the flood thread has stopped"))
    }

    /// SYNs sent so far (the generator program's own count: exact, also
    /// in the middle of a call).
    pub fn sent(&self) -> Result<u64> {
        Ok(self.sent.frames()?)
    }

    /// The generator thread's id (in this process).
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// Stops the thread; its error, if it failed.
    pub fn stop(mut self) -> Result<()> {
        self.commands = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the flood thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.commands = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The flood thread's loop: paused until told to flood; flooding, sends
/// what is due (throttled: rate × time since the flood started, at most
/// [`MAX_CALL`] at once, sleeping [`TICK`] when nothing is) or calls of
/// about [`CALL_TIME`] back to back (`max`), looking for a new command
/// between calls. Ends when the sender is dropped.
fn run(g: &Generator, commands: &mpsc::Receiver<Command>) -> Result<()> {
    let mut current: Option<(Vec<u8>, Rate, Instant, u64)> = None;
    let mut flat_out = 4096u32;
    loop {
        let next = match current {
            None => match commands.recv() {
                Ok(c) => Some(c),
                Err(_) => return Ok(()),
            },
            Some(_) => match commands.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
            },
        };
        match next {
            Some(Command::Flood(frame, rate)) => current = Some((frame, rate, Instant::now(), 0)),
            Some(Command::Pause) => current = None,
            None => {}
        }
        let Some((frame, rate, started, done)) = current.as_mut() else {
            continue;
        };
        let n = match *rate {
            Rate::Max => flat_out,
            Rate::PerSecond(r) => {
                let due = (started.elapsed().as_secs_f64() * f64::from(r)) as u64;
                due.saturating_sub(*done).min(u64::from(MAX_CALL)) as u32
            }
        };
        if n == 0 {
            std::thread::sleep(TICK);
            continue;
        }
        let t0 = Instant::now();
        g.send(frame, n)?;
        *done += u64::from(n);
        if *rate == Rate::Max {
            let took = t0.elapsed().as_secs_f64().max(1e-6);
            let scaled = f64::from(n) * CALL_TIME.as_secs_f64() / took;
            flat_out = (scaled as u32).clamp(64, MAX_CALL);
        }
    }
}

/// A kernel echo server in the bed's namespace: one listening socket with
/// a backlog of 1 024 (as `tcp_syn_flood.rs`'s), a thread per connection.
#[derive(Debug)]
pub struct KernelEcho {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The kernel echo server's listen backlog.
pub const KERNEL_BACKLOG: i32 = 1024;

impl KernelEcho {
    /// Listens on `at` in the namespace `ns`; returns once it listens.
    pub fn start(ns: &str, at: SocketAddr) -> Result<KernelEcho> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (ns, stop2) = (ns.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let _ = netns::in_netns(&ns, move || {
                let listening = (|| -> Result<std::net::TcpListener> {
                    let fd = socket(family(at), SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
                    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
                    if at.is_ipv6() {
                        // IPv6 only: the IPv4 flood's target is another run's.
                        setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
                    }
                    // accept(2) gives up after SO_RCVTIMEO: the stop flag is
                    // looked at every 100 ms.
                    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 100_000))?;
                    bind(fd.as_raw_fd(), &SockaddrStorage::from(at))
                        .with_context(|| format!("binding {at}"))?;
                    listen(&fd, Backlog::new(KERNEL_BACKLOG)?)?;
                    Ok(std::net::TcpListener::from(fd))
                })();
                let l = match listening {
                    Ok(l) => {
                        let _ = ready_tx.send(Ok(()));
                        l
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Ok(());
                    }
                };
                while !stop2.load(Ordering::Relaxed) {
                    if let Ok((s, _)) = l.accept() {
                        std::thread::spawn(move || echo(s));
                    }
                }
                Ok(())
            });
        });
        ready_rx
            .recv()
            .context("the kernel echo server's thread died")??;
        Ok(KernelEcho {
            stop,
            thread: Some(thread),
        })
    }
}

/// Echoes what `s` sends until it closes (or 10 s of silence).
fn echo(mut s: TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 || s.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

impl Drop for KernelEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long the legitimate client waits for its connect and its echo.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the legitimate client connects.
pub const CLIENT_PERIOD: Duration = Duration::from_millis(500);

/// The legitimate client: a thread in the peer namespace that connects
/// from `from` every [`CLIENT_PERIOD`], sends a byte, reads it back and
/// closes, timing each (connect + echo, ms; `None`: failed or timed out).
#[derive(Debug)]
pub struct Client {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Option<f64>>>>,
}

impl Client {
    /// Starts connecting to `to` from `from` (an address of the peer's
    /// interface, of `to`'s family) in the namespace `ns`.
    pub fn start(ns: &str, from: IpAddr, to: SocketAddr) -> Client {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, stop2) = (ns.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            netns::in_netns(&ns, move || {
                let mut times = Vec::new();
                let mut next = Instant::now() + CLIENT_PERIOD;
                loop {
                    while Instant::now() < next {
                        if stop2.load(Ordering::Relaxed) {
                            return Ok(times);
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    next += CLIENT_PERIOD;
                    let t0 = Instant::now();
                    times.push(
                        connect_echo(from, to)
                            .ok()
                            .map(|()| t0.elapsed().as_secs_f64() * 1e3),
                    );
                }
            })
            .unwrap_or_default()
        });
        Client {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops it; each attempt's time in ms (`None`: failed).
    pub fn stop(mut self) -> Vec<Option<f64>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connect from `from` to `to`, one byte echoed, closed; each step
/// bounded by [`CLIENT_TIMEOUT`] (connect(2) honours SO_SNDTIMEO).
fn connect_echo(from: IpAddr, to: SocketAddr) -> Result<()> {
    let fd = socket(family(to), SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    let timeout = TimeVal::new(CLIENT_TIMEOUT.as_secs() as _, 0);
    setsockopt(&fd, sockopt::SendTimeout, &timeout)?;
    bind(
        fd.as_raw_fd(),
        &SockaddrStorage::from(SocketAddr::new(from, 0)),
    )?;
    connect(fd.as_raw_fd(), &SockaddrStorage::from(to))?;
    let mut s = TcpStream::from(fd);
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    s.write_all(b"x")?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    if &b != b"x" {
        bail!("the echo came back as {b:?}");
    }
    Ok(())
}

/// The socket family of `a`.
fn family(a: SocketAddr) -> AddressFamily {
    match a {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!("max".parse::<Rate>(), Ok(Rate::Max));
        assert_eq!("50000".parse::<Rate>(), Ok(Rate::PerSecond(50000)));
        assert!("0".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
        assert_eq!(Rate::PerSecond(7).to_string(), "7");
    }

    #[test]
    fn sources_parse() {
        let s: Sources = "10.99.0.100-10.99.0.250".parse().unwrap();
        assert_eq!(s.count(), 151);
        assert_eq!(s.addresses().last(), "10.99.0.250".parse().ok());
        let one: Sources = "10.99.0.7".parse().unwrap();
        assert_eq!(one.count(), 1);
        assert!("10.99.0.9-10.99.0.8".parse::<Sources>().is_err());
        assert!("10.99.0.x".parse::<Sources>().is_err());
        let v6: Sources = "fd99::100-fd99::1:ff".parse().unwrap();
        assert_eq!(v6.count(), 0x1_00ff - 0x100 + 1);
        assert_eq!(v6.addresses().nth(1), "fd99::101".parse().ok());
        assert_eq!(v6.addresses().last(), "fd99::1:ff".parse().ok());
        let all: Sources = "fd99::-fd99::ffff:ffff".parse().unwrap();
        assert_eq!(all.count(), u32::MAX, "2^32 addresses do not wrap to 0");
        let e = |s: &str| s.parse::<Sources>().unwrap_err();
        assert!(e("fd99::200-fd99::100").contains("comes before"));
        assert!(e("10.99.0.100-fd99::200").contains("two families"));
        // The generator rewrites the last 32 bits only.
        assert!(e("fd99::ffff:ffff-fd99::1:0:0").contains("last 32 bits only"));
    }

    /// The SYN generator's program, run without sending (BPF_PROG_RUN
    /// without live frames): every frame is a valid SYN (wire's parser
    /// verifies the checksums) from the next source and port with a new
    /// ISN, whether the program starts from the frame it wrote last (a
    /// recycled live frame) or from the original; IPv4 and IPv6. Needs root
    /// (BPF).
    #[test]
    fn the_generator_writes_a_new_valid_syn_every_time() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping the_generator_writes_a_new_valid_syn_every_time: needs root (BPF)");
            return;
        }
        let bed: BedState = serde_json::from_str(
            r#"{"name":"b1","netns":"flowlane-b1","peer_netns":"flowlane-b1-peer","local_if":"xsk0",
               "peer_if":"peer0","queues":1,"local_v4":"10.99.0.1","peer_v4":"10.99.0.2",
               "local_mac":"02:00:00:00:00:01","peer_mac":"02:00:00:00:00:02","pin_dir":"/nonexistent"}"#,
        )
        .unwrap();
        for (sources, to) in [
            ("10.99.0.100-10.99.0.250", "10.99.0.1:7"),
            // Across a carry in the last 32 bits' low half.
            ("fd99::ff80-fd99::1:0015", "[fd99::1]:7"),
        ] {
            writes_new_valid_syns(&bed, sources.parse().unwrap(), to.parse().unwrap());
        }
    }

    fn writes_new_valid_syns(bed: &BedState, sources: Sources, to: SocketAddr) {
        let original = syn_frame(bed, &sources, to).unwrap();
        let flood = SynFlood {
            first_source: sources.first,
            sources: sources.count(),
            first_port: FIRST_PORT,
            ports: u32::from(u16::MAX - FIRST_PORT) + 1,
        };
        // The loopback interface: nothing is sent.
        let g = Generator::syn_flood(1, &flood).unwrap();
        let n = 1000u32;
        let want_sources: Vec<IpAddr> = sources.addresses().collect();
        let mut seen = std::collections::HashSet::new();
        let mut last = original.clone();
        for i in 0..n {
            let from = if i % 7 == 3 { &original } else { &last };
            let out = g.rewrite(from).unwrap();
            let f = flowlane_wire::parse_frame(&out)
                .unwrap_or_else(|e| panic!("{sources:?}: frame {i} does not parse: {e:?}"));
            let (src, dst) = match f.network {
                flowlane_wire::Network::Ipv4(ip) => {
                    (IpAddr::V4(ip.src_addr), IpAddr::V4(ip.dst_addr))
                }
                flowlane_wire::Network::Ipv6(ip) => {
                    (IpAddr::V6(ip.src_addr), IpAddr::V6(ip.dst_addr))
                }
                _ => panic!("frame {i} is not IP"),
            };
            let flowlane_wire::Transport::Tcp(tcp) = f.transport else {
                panic!("frame {i} is not TCP");
            };
            let want_src = want_sources[(i % sources.count()) as usize];
            let want_port = FIRST_PORT + (i / sources.count()) as u16;
            assert_eq!(src, want_src, "frame {i}");
            assert_eq!(dst, to.ip(), "frame {i}");
            assert_eq!((tcp.src_port, tcp.dst_port), (want_port, 7), "frame {i}");
            assert_eq!(tcp.seq, i.wrapping_mul(2_654_435_761), "frame {i}");
            assert_eq!(tcp.flags, TcpFlags::SYN, "frame {i}");
            assert_eq!(tcp.options.timestamps, Some((1, 0)), "frame {i}");
            assert_eq!(out.len(), original.len());
            assert!(
                seen.insert((src, tcp.src_port, tcp.seq)),
                "frame {i} repeats"
            );
            last = out;
        }
        assert_eq!(seen.len(), n as usize);
    }
}
