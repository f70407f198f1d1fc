//! Flow hints against the test bed, with the Linux kernel as the peer:
//! `flowlane hint` predicts the queue every flow arrives on; an active open
//! whose source port numa-sched's chooser picked gets its reply on the
//! sending worker's queue; threaded-NAPI kthreads get pinned to their
//! queues' CPUs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowlane_tests::{flowlane, flowlane_bin, in_ns, require_root, start_udp_echo, text, Bed};
use serde_json::Value;

/// `flowlane udp-echo` in the bed's namespace, stopped on drop.
struct Echo {
    child: Child,
    report: std::path::PathBuf,
}

impl Echo {
    fn start(bed: &Bed, port: u16) -> Echo {
        let (child, report) = start_udp_echo(bed, port);
        Echo { child, report }
    }

    /// Asks for a report (SIGUSR1) and waits until its generation is `g`.
    fn report(&mut self, g: u64) -> Value {
        let st = Command::new("kill")
            .args(["-USR1", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(bytes) = std::fs::read(&self.report) {
                if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                    if v["generation"].as_u64() >= Some(g) {
                        return v;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no report generation {g}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        flowlane_tests::stop(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_file(&self.report);
    }
}

/// A kernel UDP echo server in the peer namespace (python3), stopped on drop.
struct KernelEcho(Child);

impl KernelEcho {
    fn start(bed: &Bed, addr: &str, port: u16) -> KernelEcho {
        let script = format!(
            "import socket,sys\n\
             s=socket.socket(socket.AF_INET6 if ':' in '{addr}' else socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.bind(('{addr}',{port}))\n\
             print('ready',flush=True)\n\
             while True:\n    d,a=s.recvfrom(4096); s.sendto(d,a)\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &bed.peer_ns, "python3", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "kernel echo server did not start");
        KernelEcho(child)
    }
}

impl Drop for KernelEcho {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `n` distinct pseudo-random source ports in 1024..=65535 but `except`
/// (the echo service's own port: a datagram from it is refused by design,
/// `loop_source`, and the test drew it in about one run in 250).
fn random_ports(n: usize, except: u16) -> Vec<u16> {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        ^ u64::from(std::process::id()) << 32
        | 1;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = 1024 + (x % (65536 - 1024)) as u16;
        if p != except && seen.insert(p) {
            out.push(p);
        }
    }
    out
}

#[test]
fn hint_predicts_the_queue_of_256_random_flows() {
    if !require_root("hint_predicts_the_queue_of_256_random_flows") {
        return;
    }
    let bed = Bed::up("hint", 4);
    let mut echo = Echo::start(&bed, 7777);
    // Each family on the same bed and service: IPv6 flows hash 36 bytes.
    for (family, generation) in [(Family::V4, 1), (Family::V6, 2)] {
        hint_predicts(&bed, &mut echo, family, generation);
    }
}

/// The addresses of the flows of one family: the peer's, flowlane's.
#[derive(Clone, Copy, Debug)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn addrs(self) -> (&'static str, &'static str) {
        match self {
            Family::V4 => ("10.99.0.2", "10.99.0.1"),
            Family::V6 => ("fd99::2", "fd99::1"),
        }
    }
}

/// 256 flows of `family` from kernel sockets on the far side to `echo`,
/// each from its own random source port, arrive on the queue `flowlane
/// hint` names (its `--flows-file` form), and one through the single-flow
/// form, whose `--dst` defaults to the bed's address of the source's
/// family; `generation`: the echo report that counts them.
fn hint_predicts(bed: &Bed, echo: &mut Echo, family: Family, generation: u64) {
    let (peer, local) = family.addrs();
    let ports = random_ports(256, 7777);

    // One datagram per flow, each from its own source port; count the
    // echoes that came back intact.
    let script = format!(
        "import socket\n\
         ok=0\n\
         for p in [{}]:\n\
         \x20   s=socket.socket(socket.AF_INET6 if ':' in '{peer}' else socket.AF_INET,socket.SOCK_DGRAM)\n\
         \x20   s.bind(('{peer}',p)); s.settimeout(1.0)\n\
         \x20   m=b'flow %d' % p\n\
         \x20   s.sendto(m,('{local}',7777))\n\
         \x20   try:\n\
         \x20       d,a=s.recvfrom(2048); ok+=(d==m)\n\
         \x20   except socket.timeout: pass\n\
         \x20   s.close()\n\
         print(ok)\n",
        ports
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let o = in_ns(&bed.peer_ns, &["python3", "-c", &script]);
    assert!(o.status.success(), "sender: {}", text(&o));
    let echoed: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let report = echo.report(generation);
    assert_eq!(
        echoed, 256,
        "every {family:?} flow echoed back (refused: {})",
        report["refused"]
    );

    // Where each flow of this family arrived, and each queue's worker CPU.
    let mut arrived: BTreeMap<u16, BTreeSet<u64>> = BTreeMap::new();
    for f in report["flows"].as_array().unwrap() {
        if f["src"] != peer {
            continue;
        }
        arrived
            .entry(f["src_port"].as_u64().unwrap() as u16)
            .or_default()
            .insert(f["queue"].as_u64().unwrap());
    }
    let worker_cpu: BTreeMap<u64, u64> = report["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["queue"].as_u64().unwrap(), q["cpu"].as_u64().unwrap()))
        .collect();

    let flows_file = std::env::temp_dir().join(format!("{}-{family:?}-flows.txt", bed.name));
    let lines: String = ports
        .iter()
        .map(|p| format!("{peer} {p} {local} 7777 udp\n"))
        .collect();
    std::fs::write(&flows_file, lines).unwrap();
    let o = flowlane(&[
        "hint",
        "--bed",
        &bed.name,
        "--flows-file",
        flows_file.to_str().unwrap(),
        "--json",
    ]);
    let _ = std::fs::remove_file(&flows_file);
    assert!(o.status.success(), "hint: {}", text(&o));
    let hints: Value = serde_json::from_slice(&o.stdout).unwrap();
    let hints = hints.as_array().unwrap();
    assert_eq!(hints.len(), 256);

    let mut per_queue = BTreeMap::<u64, usize>::new();
    for h in hints {
        let port = h["sport"].as_u64().unwrap() as u16;
        let queue = h["queue"].as_u64().unwrap();
        assert_eq!(
            arrived.get(&port),
            Some(&BTreeSet::from([queue])),
            "{family:?} flow from port {port}: predicted queue {queue}"
        );
        assert_eq!(
            Some(&h["cpu"].as_u64().unwrap()),
            worker_cpu.get(&queue),
            "queue {queue}'s CPU as udp-echo pinned it"
        );
        *per_queue.entry(queue).or_default() += 1;
    }
    assert_eq!(per_queue.len(), 4, "flows spread over all queues");
    eprintln!("{family:?}: 256/256 flows on the predicted queue; per queue: {per_queue:?}");

    // One flow through the single-flow form of the command, without
    // --dst: the bed's address of the source's family.
    let p = ports[0].to_string();
    let o = flowlane(&[
        "hint", "--bed", &bed.name, "--src", peer, "--sport", &p, "--dport", "7777", "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let one: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(one["dst"], local);
    assert_eq!(one["queue"], hints[0]["queue"]);
}

#[test]
fn active_open_with_the_source_port_chooser_gets_replies_on_the_callers_queue() {
    if !require_root("active_open_with_the_source_port_chooser_gets_replies_on_the_callers_queue") {
        return;
    }
    pings_come_back_on_the_callers_queue("ping", "10.99.0.2", "10.99.0.2:9000");
}

/// The same over IPv6: `udp-ping --dst [fd99::2]:9000` sends from the
/// bed's fd99::1 (it refused IPv6, "udp-ping sends IPv4 only").
#[test]
fn active_open_over_ipv6_gets_replies_on_the_callers_queue() {
    if !require_root("active_open_over_ipv6_gets_replies_on_the_callers_queue") {
        return;
    }
    pings_come_back_on_the_callers_queue("ping6", "fd99::2", "[fd99::2]:9000");
}

/// udp-ping from each of a 4-queue bed's queues, three rounds, to a kernel
/// echo server at `server` in the peer namespace (`dst`: how --dst names
/// it): each reply on the queue that sent, as predicted.
fn pings_come_back_on_the_callers_queue(tag: &str, server: &str, dst: &str) {
    let bed = Bed::up(tag, 4);
    let _server = KernelEcho::start(&bed, server, 9000);
    let mut ports = BTreeSet::new();
    for round in 0..3 {
        for q in 0..4u64 {
            let o = flowlane(&[
                "udp-ping",
                "--bed",
                &bed.name,
                "--queue",
                &q.to_string(),
                "--dst",
                dst,
                "--json",
            ]);
            assert!(o.status.success(), "round {round} queue {q}: {}", text(&o));
            let r: Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(r["predicted_queue"], q);
            assert_eq!(r["reply_queue"], q, "reply on the sending queue: {r}");
            assert_eq!(r["payload_ok"], true);
            let sport = r["sport"].as_u64().unwrap();
            assert!((40000..=44999).contains(&sport), "flowlane's port range");
            ports.insert(sport);
        }
    }
    assert!(ports.len() > 1, "the chooser spreads source ports");
}

#[test]
fn threaded_napi_threads_are_pinned_to_their_queues_cpus() {
    if !require_root("threaded_napi_threads_are_pinned_to_their_queues_cpus") {
        return;
    }
    let bed = Bed::up("napi", 4);
    // veth runs NAPI only while an XDP program is attached.
    let _echo = Echo::start(&bed, 7777);
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    let o = in_ns(&bed.ns, &[bin, "irq", "apply", "--iface", "xsk0", "--json"]);
    assert!(o.status.success(), "irq apply: {}", text(&o));
    let o = in_ns(&bed.ns, &[bin, "irq", "show", "--iface", "xsk0", "--json"]);
    assert!(o.status.success(), "irq show: {}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["irqs"]["kind"], "napi");
    assert_eq!(v["irqs"]["threaded"], true);
    let threads = v["irqs"]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 4, "{v}");
    for (q, t) in threads.iter().enumerate() {
        assert_eq!(t["queue"], q as u64);
        let pid = t["pid"].as_u64().unwrap();
        let planned = t["planned"].as_u64().unwrap();
        assert_eq!(v["placement"]["queues"][q]["cpu"], planned);
        // The kernel's own view, not flowlane's.
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim();
        assert_eq!(allowed, planned.to_string(), "napi thread of queue {q}");
    }
}
