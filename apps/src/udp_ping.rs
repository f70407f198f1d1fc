//! `flowlane udp-ping`: an active open from one worker. The worker of queue
//! Q picks its source port with numa-sched's RSS-aware chooser
//! (`RssState::choose_source_port`) so that the reply hashes back to Q, sends
//! one UDP datagram from its own AF_XDP socket (`TxBatch::send_with` in
//! `on_poll`), and every queue's worker watches for the reply; the command
//! reports the queue the reply arrived on. The datagram is sent again every
//! 500 ms until a reply comes, each with its sequence number in its payload,
//! so that the round trip is the answered datagram's. Every payload starts
//! with a random nonce of the run: a datagram from the server that lacks it
//! (a late reply to an earlier run from the same queue and port) is ignored
//! and counted, not taken for this run's reply. A reply on another queue
//! than the sender's, or one that carries the nonce but none of the
//! datagrams' payloads, fails the command.
//!
//! With `--bed NAME` it reads the bed (key, table, addresses, MACs) and
//! re-runs itself inside the bed's namespace with those spelled out.

#[cfg(test)]
use std::net::Ipv4Addr;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_dataplane::control_socket::QueueSteering;
use flowlane_dataplane::iface::parse_mac;
use flowlane_dataplane::runtime::LocalAddress;
use flowlane_dataplane::{
    Dataplane, DataplaneConfig, InterfaceInfo, QueueAssignment, QueueHandler, QueueInfo, RxAction,
    TxBatch,
};
use flowlane_numa_sched::Protocol;
use flowlane_wire::packet::{
    emit_eth_ipv4_udp, emit_eth_ipv6_udp, parse_frame, Transport, ETH_IPV4_UDP_PAYLOAD_OFFSET,
    ETH_IPV6_UDP_PAYLOAD_OFFSET,
};
use flowlane_wire::{
    EtherType, EthernetAddress, EthernetRepr, IpProtocol, Ipv4Repr, Ipv6Repr, UdpRepr,
};
use serde::Serialize;

use crate::flow_rss::rss_state;
use flowlane_dataplane::ephemeral::EPHEMERAL;
use flowlane_dataplane::placement::machine_placement;
use flowlane_dataplane::service_args::rss_key;
use flowlane_numa_sched::nic::RssNic;
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_testbed::netns::{self, require_root};

use crate::service::Watchdog;

/// Flags of `flowlane udp-ping`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Run in this test bed (key, table, addresses and peer MAC from it).
    // `--testbed`: the old spelling, hidden, kept for scripts.
    #[arg(
        long,
        alias = "testbed",
        value_name = "NAME",
        conflicts_with_all = ["iface", "src", "key", "table", "peer_mac"]
    )]
    pub bed: Option<String>,
    /// Interface to send from (inside its namespace).
    #[arg(long)]
    pub iface: Option<String>,
    /// Local address of the interface, of `--dst`'s family (IPv4 or
    /// IPv6; not link-local).
    #[arg(long)]
    pub src: Option<IpAddr>,
    /// The peer's MAC (default: from the kernel's neighbour table).
    #[arg(long)]
    pub peer_mac: Option<String>,
    /// Toeplitz key of the NIC, hex (default: the Microsoft key).
    #[arg(long, value_parser = rss_key)]
    pub key: Option<RssKey>,
    /// The NIC's indirection table, comma-separated (default: even over all
    /// of the device's queues, 128 entries).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = flowlane_dataplane::service_args::queue_number::<u16>
    )]
    pub table: Option<Vec<u16>>,
    /// The queue (worker) to send from and to receive the reply on.
    #[arg(long)]
    pub queue: u16,
    /// The UDP echo server to send to: `ADDR:PORT`, or `ADDR` for port 7.
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = echo_server)]
    pub dst: SocketAddr,
    /// Give up after this many milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `udp-ping` reports.
#[derive(Debug, Serialize)]
pub struct PingResult {
    /// The queue that sent.
    pub queue: u16,
    /// The CPU of its worker.
    pub cpu: u32,
    /// The source port chosen.
    pub sport: u16,
    /// Where the reply should land (the hint for the reply's tuple).
    pub predicted_queue: u16,
    /// Where it did land.
    pub reply_queue: u32,
    /// The reply carried one of the datagrams' payloads back unchanged.
    pub payload_ok: bool,
    /// Round trip of the datagram the reply carried back, microseconds (0
    /// when its payload came back changed).
    pub rtt_us: u64,
    /// Datagrams from the server's address and port, before the reply,
    /// without this run's nonce (late replies to an earlier run, or ones
    /// corrupted in the nonce): ignored.
    pub stray: u64,
    /// What the XDP steering program did with each receive queue's
    /// frames during the run: redirected to flowlane (the reply), passed
    /// to the kernel, dropped for want of a socket on the queue or as a
    /// first fragment.
    pub steering: Vec<QueueSteering>,
}

/// The echo port `--dst` means when it names none.
const ECHO_PORT: u16 = 7;

/// `--dst`: `ADDR:PORT` (`[V6]:PORT`), or `ADDR` (`[V6]`) for port 7.
/// Port 0 is refused: RFC 768 reserves it, no server listens there. An
/// IPv4-mapped IPv6 address is the IPv4 server (as `flowlane hint` takes
/// it). One server is pinged: a multicast, broadcast or unspecified address
/// is refused (a frame to the peer's MAC would not reach a group, and many
/// replies would not be one round trip).
fn echo_server(s: &str) -> Result<SocketAddr, String> {
    let a = match s.parse::<SocketAddr>() {
        Ok(a) if a.port() == 0 => {
            return Err(format!(
                "{s}: a port must be 1-65535 (write ADDR for port {ECHO_PORT})"
            ))
        }
        Ok(a) => a,
        Err(_) => s
            .strip_prefix('[')
            .and_then(|v6| v6.strip_suffix(']'))
            .unwrap_or(s)
            .parse::<IpAddr>()
            .map(|ip| SocketAddr::new(ip, ECHO_PORT))
            .map_err(|_| {
                format!("{s} is not an address: write ADDR or ADDR:PORT, e.g. 10.99.0.2 (port {ECHO_PORT}) or 10.99.0.2:7777")
            })?,
    };
    let ip = a.ip().to_canonical();
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    if ip.is_multicast() || ip.is_unspecified() || broadcast {
        return Err(format!(
            "{s} is not a unicast address: udp-ping pings one echo server, give its address"
        ));
    }
    Ok(match a {
        // The scope of a link-local server is kept: it must be --iface's.
        SocketAddr::V6(v6) if ip.is_ipv6() => SocketAddr::V6(v6),
        _ => SocketAddr::new(ip, a.port()),
    })
}

/// Digits of the sequence number that ends each datagram's payload.
const SEQ_DIGITS: usize = 10;

/// The payload of datagram `seq`: `prefix`, then `seq` in [`SEQ_DIGITS`]
/// digits (every datagram as long as the first).
fn payload(prefix: &[u8], seq: usize) -> Vec<u8> {
    let mut p = prefix.to_vec();
    p.extend_from_slice(format!("{seq:0width$}", width = SEQ_DIGITS).as_bytes());
    p
}

/// The payloads' common start for a run from `queue` and source port
/// `sport`: the run's `nonce` tells its replies from an earlier run's.
fn run_prefix(queue: u16, sport: u16, nonce: u64) -> Vec<u8> {
    format!("flowlane udp-ping q{queue} p{sport} n{nonce:016x} #").into_bytes()
}

/// A nonce for one run: std's `RandomState`, whose keys come from the
/// operating system's randomness, hashing the process id and the time (no
/// other source of randomness needed; this one need only differ between
/// runs, not be secret).
fn run_nonce() -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((std::process::id(), now))
}

/// What a datagram from the echo server is to this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// Datagram `seq` of the `sent`, carried back unchanged.
    Echo(usize),
    /// This run's prefix (its nonce), the rest changed: corrupted.
    Changed,
    /// Without this run's prefix: an earlier run's late reply (or one
    /// corrupted in its prefix), not this run's.
    Stray,
}

/// Which of the `sent` datagrams `reply` carries back unchanged.
fn answered(prefix: &[u8], sent: usize, reply: &[u8]) -> Reply {
    let Some(digits) = reply.strip_prefix(prefix) else {
        return Reply::Stray;
    };
    if digits.len() != SEQ_DIGITS || !digits.iter().all(u8::is_ascii_digit) {
        return Reply::Changed;
    }
    let seq = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse::<usize>().ok());
    match seq {
        Some(seq) if seq < sent => Reply::Echo(seq),
        _ => Reply::Changed,
    }
}

/// Whether the ping succeeded: the reply carried a datagram back unchanged,
/// on the sending queue.
fn verdict(r: &PingResult, dst: SocketAddr) -> Result<()> {
    if !r.payload_ok {
        bail!(
            "the reply from {dst} to port {} came back with a changed payload (CORRUPT): check the echo server and the link",
            r.sport
        );
    }
    if r.reply_queue != u32::from(r.queue) {
        bail!(
            "the reply arrived on queue {}, not on the sending queue {}",
            r.reply_queue,
            r.queue
        );
    }
    Ok(())
}

/// Runs `flowlane udp-ping`.
pub fn run(args: Args) -> Result<()> {
    require_root("flowlane udp-ping")?;
    match &args.bed {
        Some(name) => run_in_bed(name, &args),
        None => run_here(&args),
    }
}

fn run_in_bed(name: &str, args: &Args) -> Result<()> {
    let bed = flowlane_testbed::load(name)?;
    let rss = bed.nic().rss()?;
    let key = RssKey::new(rss.key)?.to_string();
    let table = rss
        .table
        .iter()
        .map(|q| q.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let exe = std::env::current_exe().context("finding the flowlane binary")?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &bed.netns])
        .arg(exe)
        .args(["udp-ping", "--iface", &bed.local_if, "--src"])
        // The bed's address of the server's family.
        .arg(if args.dst.is_ipv6() {
            &bed.local_v6
        } else {
            &bed.local_v4
        })
        .args([
            "--peer-mac",
            &bed.peer_mac,
            "--key",
            &key,
            "--table",
            &table,
        ])
        .args(["--queue", &args.queue.to_string()])
        .args(["--dst", &args.dst.to_string()])
        .args(["--timeout-ms", &args.timeout_ms.to_string()]);
    if args.json {
        cmd.arg("--json");
    }
    let st = cmd.status().context("running udp-ping in the test bed")?;
    if !st.success() {
        // The inner run printed its own one-line error.
        std::process::exit(st.code().unwrap_or(1));
    }
    Ok(())
}

/// The neighbour table's MAC for `ip` on `dev`, asking the kernel to resolve
/// it (one ping) if it has none.
fn neighbour_mac(dev: &str, ip: IpAddr) -> Result<[u8; 6]> {
    let lookup = || -> Option<[u8; 6]> {
        let out = netns::ip(&["neigh", "show", &ip.to_string(), "dev", dev]).ok()?;
        let w: Vec<&str> = out.split_whitespace().collect();
        let i = w.iter().position(|x| *x == "lladdr")?;
        parse_mac(w.get(i + 1)?)
    };
    if let Some(m) = lookup() {
        return Ok(m);
    }
    // Out of `dev` (`-I`): a link-local address has no meaning without it.
    let _ = netns::run("ping", &["-c", "1", "-W", "1", "-I", dev, &ip.to_string()]);
    lookup().with_context(|| {
        format!("no MAC for {ip} in the neighbour table of {dev} (`ip neigh`); pass --peer-mac")
    })
}

/// Shared between the workers and the main thread.
#[derive(Default)]
struct Outcome {
    /// When each datagram went, by sequence number.
    sent_at: Vec<Duration>,
    /// The first reply: its queue, when it came, and which datagram it
    /// carried back unchanged (`None`: a changed payload).
    reply: Option<(u32, Duration, Option<usize>)>,
    /// Datagrams from the server before the reply that were not this
    /// run's ([`Reply::Stray`]): ignored.
    stray: u64,
}

/// The datagrams' IP header, of the server's family.
#[derive(Debug, Clone, Copy)]
enum IpHeader {
    V4(Ipv4Repr),
    V6(Ipv6Repr),
}

impl IpHeader {
    /// The server's address.
    fn server(&self) -> IpAddr {
        match self {
            IpHeader::V4(ip) => IpAddr::V4(ip.dst_addr),
            IpHeader::V6(ip) => IpAddr::V6(ip.dst_addr),
        }
    }
}

struct Pinger {
    sender: bool,
    eth: EthernetRepr,
    ip: IpHeader,
    udp: UdpRepr,
    /// The payloads' common start ([`payload`]).
    prefix: Vec<u8>,
    outcome: Arc<Mutex<Outcome>>,
}

impl QueueHandler for Pinger {
    fn on_rx(&mut self, q: &QueueInfo, now: Duration, buf: &mut [u8], len: usize) -> RxAction {
        // The peer's datagrams are taken (`Consumed`); anything else is
        // the worker's `dropped`.
        if let Ok(f) = parse_frame(&buf[..len]) {
            if let (Transport::Udp { src_port, dst_port }, Some(ips)) = (f.transport, f.ip_pair()) {
                let from_peer = ips.src() == self.ip.server()
                    && src_port == self.udp.dst_port
                    && dst_port == self.udp.src_port;
                if from_peer {
                    let mut o = self.outcome.lock().expect("outcome lock");
                    if o.reply.is_none() {
                        match answered(&self.prefix, o.sent_at.len(), f.payload()) {
                            Reply::Echo(seq) => o.reply = Some((q.queue, now, Some(seq))),
                            Reply::Changed => o.reply = Some((q.queue, now, None)),
                            Reply::Stray => o.stray += 1,
                        }
                    }
                    return RxAction::Consumed;
                }
            }
        }
        RxAction::Drop
    }

    fn on_poll(&mut self, _q: &QueueInfo, now: Duration, tx: &mut TxBatch<'_>) {
        if !self.sender {
            return;
        }
        // Held while the datagram is written: a reply never finds its
        // datagram's send time missing.
        let mut o = self.outcome.lock().expect("outcome lock");
        // A datagram every 500 ms until a reply comes, each its own.
        let due = o
            .sent_at
            .last()
            .is_none_or(|&t| now > t + Duration::from_millis(500));
        if o.reply.is_some() || !due {
            return;
        }
        let payload = payload(&self.prefix, o.sent_at.len());
        let (eth, ip, udp) = (&self.eth, &self.ip, &self.udp);
        let sent = tx.send_with(|buf| {
            let at = match ip {
                IpHeader::V4(_) => ETH_IPV4_UDP_PAYLOAD_OFFSET,
                IpHeader::V6(_) => ETH_IPV6_UDP_PAYLOAD_OFFSET,
            };
            buf.get_mut(at..at + payload.len())?
                .copy_from_slice(&payload);
            match ip {
                IpHeader::V4(ip) => emit_eth_ipv4_udp(buf, eth, ip, udp, payload.len()).ok(),
                IpHeader::V6(ip) => emit_eth_ipv6_udp(buf, eth, ip, udp, payload.len()).ok(),
            }
        });
        if sent {
            o.sent_at.push(now);
        }
    }
}

fn run_here(args: &Args) -> Result<()> {
    let iface = args
        .iface
        .as_deref()
        .context("--iface (or --bed) is needed")?;
    // An IPv4-mapped --src is the IPv4 address (as --dst's is).
    let src = args
        .src
        .context("--src (or --bed) is needed")?
        .to_canonical();
    if src.is_ipv4() != args.dst.is_ipv4() {
        bail!(
            "--src {src} and --dst {} are of two families: give --src the interface's address of --dst's family",
            args.dst
        );
    }
    let info = InterfaceInfo::read(std::path::Path::new("/sys"), iface)?;
    if let SocketAddr::V6(d) = args.dst {
        if d.scope_id() != 0 && d.scope_id() != info.ifindex {
            bail!(
                "--dst {d} is scoped to interface {}, not to {iface} ({}): drop the %scope or name {iface}'s",
                d.scope_id(),
                info.ifindex
            );
        }
    }
    if u32::from(args.queue) >= info.rx_queues {
        bail!(
            "{iface} has {} receive queues; --queue {} does not exist",
            info.rx_queues,
            args.queue
        );
    }
    let (state, _) = rss_state(
        None,
        args.key.clone(),
        args.table.clone(),
        128,
        info.rx_queues as u16,
        info.numa_node,
    )?;
    // Drawn as the run's nonce is (OS-seeded): the pid and the clock made
    // the port predictable.
    let seed = run_nonce();
    let (lo, hi) = EPHEMERAL;
    let sport = state
        .choose_source_port(
            src,
            args.dst.ip(),
            args.dst.port(),
            Protocol::Udp,
            args.queue,
            lo..=hi,
            seed,
            |_| true,
        )
        .with_context(|| {
            format!(
                "no source port in {lo}-{hi} steers replies from {} to queue {}",
                args.dst, args.queue
            )
        })?;
    let reply_flow = flowlane_numa_sched::FlowTuple {
        src: args.dst.ip(),
        dst: src,
        src_port: args.dst.port(),
        dst_port: sport,
        protocol: Protocol::Udp,
    };
    let predicted = state.hint(&reply_flow);
    let peer_mac = match &args.peer_mac {
        Some(m) => parse_mac(m).with_context(|| {
            format!("--peer-mac {m} is not a MAC address: write it as aa:bb:cc:dd:ee:ff")
        })?,
        None => neighbour_mac(iface, args.dst.ip())?,
    };

    let placed = machine_placement(info.numa_node, info.rx_queues as usize, None)?;
    let mut config = DataplaneConfig::new(iface, &(0..info.rx_queues).collect::<Vec<_>>());
    for (q, p) in config.queues.iter_mut().zip(&placed.plan.queues) {
        *q = QueueAssignment {
            queue: q.queue,
            cpu: Some(p.cpu),
            node: p.mem_node,
        };
    }
    config.node_cpus = placed.node_cpus.clone();
    config.ephemeral = Some(EPHEMERAL);
    // The replies come to `--src` only: the interface's other addresses,
    // and the other family, stay the kernel's.
    (config.local_v4, config.local_v6) = match src {
        IpAddr::V4(v4) => (LocalAddress::Only(v4), LocalAddress::Unclaimed),
        IpAddr::V6(v6) => (LocalAddress::Unclaimed, LocalAddress::Only(v6)),
    };
    let prefix = run_prefix(args.queue, sport, run_nonce());
    let payload_len = prefix.len() + SEQ_DIGITS;
    let eth = EthernetRepr {
        dst_addr: EthernetAddress(peer_mac),
        src_addr: EthernetAddress(info.mac),
        vlan: Default::default(),
        ethertype: EtherType::Ipv4,
    };
    let ip = match (src, args.dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            IpHeader::V4(Ipv4Repr::new(s, d, IpProtocol::Udp, 8 + payload_len))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            IpHeader::V6(Ipv6Repr::new(s, d, IpProtocol::Udp, 8 + payload_len))
        }
        _ => unreachable!("the families were checked above"),
    };
    let udp = UdpRepr {
        src_port: sport,
        dst_port: args.dst.port(),
    };
    let outcome: Arc<Mutex<Outcome>> = Arc::default();
    let (o2, queue) = (outcome.clone(), args.queue);
    let dp = Dataplane::start(config, move |q: &QueueInfo| {
        Ok::<_, std::convert::Infallible>(Pinger {
            sender: q.queue == u32::from(queue),
            eth,
            ip,
            udp,
            prefix: prefix.clone(),
            outcome: o2.clone(),
        })
    })?;
    let deadline = Instant::now() + Duration::from_millis(args.timeout_ms);
    let mut watchdog = Watchdog::new("udp-ping");
    let reply = loop {
        watchdog.check(&dp)?;
        if let Some(r) = outcome.lock().expect("outcome lock").reply {
            break Some(r);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let (sent_at, stray) = {
        let o = outcome.lock().expect("outcome lock");
        (o.sent_at.clone(), o.stray)
    };
    let steering = dp
        .steering_counters()
        .iter()
        .map(|(q, s)| QueueSteering::new(*q, s))
        .collect();
    // A worker that failed is not udp-ping's to report (it never was).
    let _ = dp.stop();
    let Some((reply_queue, at, seq)) = reply else {
        if stray > 0 {
            bail!(
                "no reply from {} to port {sport} within {} ms; {stray} datagrams from it carried none of this run's payloads (late replies to an earlier run, or CORRUPT)",
                args.dst,
                args.timeout_ms
            );
        }
        bail!(
            "no reply from {} to port {sport} within {} ms (is a UDP echo server listening there?)",
            args.dst,
            args.timeout_ms
        );
    };
    let r = PingResult {
        queue: args.queue,
        cpu: placed.plan.queues[usize::from(args.queue)].cpu,
        sport,
        predicted_queue: predicted.queue,
        reply_queue,
        payload_ok: seq.is_some(),
        rtt_us: seq
            .and_then(|k| sent_at.get(k))
            .map_or(0, |&s| at.saturating_sub(s).as_micros() as u64),
        stray,
        steering,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        outln!(
            "queue {} (CPU {}) sent {} -> {}; reply on queue {} (predicted {}), {} us, payload {}",
            r.queue,
            r.cpu,
            SocketAddr::new(src, r.sport),
            args.dst,
            r.reply_queue,
            r.predicted_queue,
            r.rtt_us,
            if r.payload_ok { "intact" } else { "CORRUPT" }
        );
    }
    verdict(&r, args.dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dst_takes_an_address_with_or_without_its_port() {
        let a = |s: &str| echo_server(s).unwrap().to_string();
        assert_eq!(a("10.99.0.2"), "10.99.0.2:7");
        assert_eq!(a("10.99.0.2:7777"), "10.99.0.2:7777");
        assert_eq!(a("fd99::2"), "[fd99::2]:7");
        assert_eq!(a("[fd99::2]"), "[fd99::2]:7");
        assert_eq!(a("[fd99::2]:9"), "[fd99::2]:9");
        let e = echo_server("10.99.0.2:x").unwrap_err();
        assert!(e.starts_with("10.99.0.2:x is not an address"), "{e}");
    }

    #[test]
    fn dst_mapped_is_the_ipv4_server_and_a_scope_is_kept() {
        let a = |s: &str| echo_server(s).unwrap();
        assert_eq!(a("[::ffff:10.99.0.2]:9000").to_string(), "10.99.0.2:9000");
        assert!(a("::ffff:10.99.0.2").is_ipv4());
        assert_eq!(a("[fe80::2%7]:9000").to_string(), "[fe80::2%7]:9000");
    }

    #[test]
    fn dst_of_no_one_server_is_refused() {
        for s in [
            "[ff02::1]:7",
            "224.0.0.1",
            "255.255.255.255:9",
            "[::]:7",
            "0.0.0.0",
            "[::ffff:224.0.0.1]:7",
        ] {
            let e = echo_server(s).unwrap_err();
            assert_eq!(
                e,
                format!("{s} is not a unicast address: udp-ping pings one echo server, give its address")
            );
        }
    }

    #[test]
    fn dst_port_zero_is_refused() {
        for s in ["10.99.0.2:0", "[fd99::2]:0"] {
            let e = echo_server(s).unwrap_err();
            assert_eq!(
                e,
                format!("{s}: a port must be 1-65535 (write ADDR for port 7)")
            );
        }
    }

    #[test]
    fn a_reply_names_the_datagram_it_answers() {
        let prefix = &run_prefix(0, 40000, 0xfeed);
        assert_eq!(prefix, b"flowlane udp-ping q0 p40000 n000000000000feed #");
        let p3 = payload(prefix, 3);
        assert_eq!(
            p3,
            b"flowlane udp-ping q0 p40000 n000000000000feed #0000000003"
        );
        assert_eq!(payload(prefix, 12).len(), p3.len());
        // A late reply to the first datagram is the first's, not the last's.
        assert_eq!(answered(prefix, 4, &payload(prefix, 0)), Reply::Echo(0));
        assert_eq!(answered(prefix, 4, &p3), Reply::Echo(3));
        // Not sent (yet), changed, cut or lengthened after the prefix: changed.
        assert_eq!(answered(prefix, 3, &p3), Reply::Changed);
        let mut changed = p3.clone();
        *changed.last_mut().unwrap() = b'x';
        assert_eq!(answered(prefix, 4, &changed), Reply::Changed);
        assert_eq!(answered(prefix, 4, &p3[..p3.len() - 1]), Reply::Changed);
        assert_eq!(
            answered(prefix, 4, &[&p3[..], b"0"].concat()),
            Reply::Changed
        );
    }

    /// A late reply to an earlier run from the same queue and source port
    /// (another nonce) is not this run's reply, intact or CORRUPT: ignored.
    #[test]
    fn an_earlier_runs_reply_is_a_stray() {
        let (earlier, now) = (run_nonce(), run_nonce());
        assert_ne!(earlier, now, "each run draws its own nonce");
        let this = run_prefix(0, 40000, now);
        let old = run_prefix(0, 40000, earlier);
        assert_eq!(answered(&this, 4, &payload(&old, 0)), Reply::Stray);
        // The old format, without a nonce, and a prefix changed in transit.
        assert_eq!(
            answered(&this, 4, b"flowlane udp-ping q0 p40000 #0000000000"),
            Reply::Stray
        );
        let mut changed = payload(&this, 0);
        changed[5] ^= 1;
        assert_eq!(answered(&this, 4, &changed), Reply::Stray);
    }

    /// The workers' side: a stray is counted and the run waits on; this
    /// run's reply is taken.
    #[test]
    fn a_worker_ignores_strays_and_takes_this_runs_reply() {
        let (us, server) = (Ipv4Addr::new(10, 99, 0, 1), Ipv4Addr::new(10, 99, 0, 2));
        let (us_mac, server_mac) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let prefix = run_prefix(0, 40000, 0xfeed);
        let outcome = Arc::new(Mutex::new(Outcome {
            sent_at: vec![Duration::ZERO],
            ..Outcome::default()
        }));
        let mut pinger = Pinger {
            sender: false,
            eth: EthernetRepr {
                dst_addr: EthernetAddress(server_mac),
                src_addr: EthernetAddress(us_mac),
                vlan: Default::default(),
                ethertype: EtherType::Ipv4,
            },
            ip: IpHeader::V4(Ipv4Repr::new(us, server, IpProtocol::Udp, 0)),
            udp: UdpRepr {
                src_port: 40000,
                dst_port: 7777,
            },
            prefix: prefix.clone(),
            outcome: outcome.clone(),
        };
        let q = QueueInfo {
            queue: 0,
            cpu: None,
            node: 0,
            zero_copy: false,
            rx_frames: 0,
        };
        // The server's datagram to us carrying `payload`.
        let from_server = |payload: &[u8]| {
            let mut b = vec![0u8; 256];
            b[ETH_IPV4_UDP_PAYLOAD_OFFSET..][..payload.len()].copy_from_slice(payload);
            let eth = EthernetRepr {
                dst_addr: EthernetAddress(us_mac),
                src_addr: EthernetAddress(server_mac),
                vlan: Default::default(),
                ethertype: EtherType::Ipv4,
            };
            let ip = Ipv4Repr::new(server, us, IpProtocol::Udp, 8 + payload.len());
            let udp = UdpRepr {
                src_port: 7777,
                dst_port: 40000,
            };
            let n = emit_eth_ipv4_udp(&mut b, &eth, &ip, &udp, payload.len()).unwrap();
            b.truncate(n);
            b
        };
        let mut rx = |frame: Vec<u8>, at: u64| {
            let mut frame = frame;
            let n = frame.len();
            pinger.on_rx(&q, Duration::from_millis(at), &mut frame, n)
        };
        // An earlier run's late reply (same queue and port, another nonce).
        rx(from_server(&payload(&run_prefix(0, 40000, 0xbeef), 0)), 1);
        {
            let o = outcome.lock().unwrap();
            assert_eq!((o.reply, o.stray), (None, 1));
        }
        rx(from_server(&payload(&prefix, 0)), 2);
        let o = outcome.lock().unwrap();
        assert_eq!(o.reply, Some((0, Duration::from_millis(2), Some(0))));
        assert_eq!(o.stray, 1);
    }

    #[test]
    fn a_changed_payload_or_another_queue_fails_the_ping() {
        let dst: SocketAddr = "10.99.0.2:7".parse().unwrap();
        let r = |reply_queue, payload_ok| PingResult {
            queue: 1,
            cpu: 0,
            sport: 40000,
            predicted_queue: 1,
            reply_queue,
            payload_ok,
            rtt_us: 10,
            stray: 0,
            steering: Vec::new(),
        };
        assert!(verdict(&r(1, true), dst).is_ok());
        let e = verdict(&r(1, false), dst).unwrap_err().to_string();
        assert!(e.contains("changed payload (CORRUPT)"), "{e}");
        let e = verdict(&r(0, true), dst).unwrap_err().to_string();
        assert!(
            e.contains("arrived on queue 0, not on the sending queue 1"),
            "{e}"
        );
    }
}
