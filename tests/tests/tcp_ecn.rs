//! ECN (RFC 3168) against the kernel (issue 11).
//!
//! Negotiation: a Linux sender that asks for ECN (`net.ipv4.tcp_ecn=1` in
//! the peer namespace) negotiates it with flowlane (ECE+CWR on the SYN, ECE
//! on the SYN-ACK, RFC 3168 §6.1.1) and sends every byte ECT, sha256-equal;
//! a Linux sender that does not ask gets no ECN.
//!
//! Marked paths: `flowlane testbed impair --ce P` marks ECT packets CE (BPF
//! at the peer's tc egress and ingress; this kernel has no sch_netem or
//! RED). Both ways, the receiver echoes the marks (ECE), the sender halves
//! its window without retransmitting (§6.1.2) and says so with CWR, and the
//! bytes arrive sha256-equal. The kernel's side is read from
//!
//! - a packet socket on `peer0` with a classic BPF filter that passes only
//!   TCP segments with ECE or CWR set ([`SNIFF`]): CWR segments the kernel
//!   sent (one per window reduction, §6.1.2: the kernel keeps no counter of
//!   its reductions) and ECE segments it sent (its echoes, §6.1.3);
//! - the peer namespace's `TcpExt.TCPDeliveredCE` (segments a kernel
//!   sender saw acknowledged by an ECE: the echoes reached it),
//!   `IpExt.InCEPkts` (CE-marked packets a kernel receiver got) and
//!   `Tcp.RetransSegs` (nstat's names).
//!
//! Each marked transfer is run kernel-to-kernel on the same bed with the
//! same marking rate, and both figures are printed side by side.

mod tcp_common;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use flowlane_testbed::net_counters::{self, NetCounters};
use flowlane_tests::{require_root, text, Bed};
use serde_json::Value;
use tcp_common::*;

/// The marking rate of the marked-path tests, percent of all packets (only
/// ECT ones are marked); `FLOWLANE_ECN_CE` overrides it.
const CE_PERCENT_DEFAULT: &str = "1";
/// Bytes per marked transfer.
const MARKED_BYTES: u64 = 32 << 20;

fn ce_percent() -> String {
    std::env::var("FLOWLANE_ECN_CE").unwrap_or_else(|_| CE_PERCENT_DEFAULT.to_string())
}

fn sysctl(ns: &str, setting: &str) {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw", setting])
        .output()
        .unwrap();
    assert!(o.status.success(), "{setting}: {o:?}");
}

fn peer_sysctl(bed: &Bed, setting: &str) {
    sysctl(&bed.peer_ns, setting);
}

/// Marks `percent` of the packets both ways CE (ECT ones only).
fn mark_ce(bed: &Bed, percent: &str) {
    let o = flowlane_tests::flowlane(&["testbed", "impair", "--bed", &bed.name, "--ce", percent]);
    assert!(o.status.success(), "testbed impair --ce: {}", text(&o));
}

/// Packets the impairment marked CE so far: (towards flowlane, from
/// flowlane).
fn ce_marked(bed: &Bed) -> (u64, u64) {
    let imp = impair_counters(bed);
    let get = |dir: &str| imp[dir]["ce_marked"].as_u64().expect("ce_marked");
    (get("to_flowlane"), get("from_flowlane"))
}

fn peer_counters(bed: &Bed) -> NetCounters {
    net_counters::read_in(&bed.peer_ns).expect("the peer namespace's counters")
}

/// Packet socket on `argv[1]` that passes (classic BPF, in the kernel) only
/// TCP segments with ECE or CWR set, SYNs excluded in Python; counts them by
/// direction until the file `argv[2]` exists, then prints the counts as
/// JSON. Prints `ready` once the filter is attached.
const SNIFF: &str = r#"
import ctypes, json, os, socket, struct, sys
ifname, stop = sys.argv[1], sys.argv[2]
# ldh [12]; IPv4: proto at 23, flags at 4*([14]&15)+27; IPv6 (no extension
# headers): next header at 20, flags at 67; accept if flags & (ECE|CWR).
prog = [(0x28, 0, 0, 12), (0x15, 0, 5, 0x0800), (0x30, 0, 0, 23), (0x15, 0, 9, 6),
        (0xb1, 0, 0, 14), (0x50, 0, 0, 27), (0x05, 0, 0, 4),
        (0x15, 0, 5, 0x86dd), (0x30, 0, 0, 20), (0x15, 0, 3, 6), (0x30, 0, 0, 67),
        (0x45, 0, 1, 0xc0), (0x06, 0, 0, 256), (0x06, 0, 0, 0)]
code = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', *i) for i in prog))
fprog = struct.pack('HL', len(prog), ctypes.addressof(code))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
s.setsockopt(socket.SOL_SOCKET, 26, fprog)  # SO_ATTACH_FILTER
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: no drops
s.bind((ifname, 0x0003))  # ETH_P_ALL
s.settimeout(0.1)
c = {d: {'cwr': 0, 'ece': 0, 'ece_data': 0} for d in ('out', 'in')}
print('ready', flush=True)
while not os.path.exists(stop):
    try:
        b, addr = s.recvfrom(256)
    except socket.timeout:
        continue
    if struct.unpack('!H', b[12:14])[0] == 0x0800:
        ihl = (b[14] & 15) * 4
        l4, pay = 14 + ihl, struct.unpack('!H', b[16:18])[0] - ihl
    else:
        l4, pay = 54, struct.unpack('!H', b[18:20])[0]
    flags = b[l4 + 13]
    pay -= (b[l4 + 12] >> 4) * 4
    if flags & 0x02:
        continue
    d = c['out' if addr[2] == socket.PACKET_OUTGOING else 'in']
    if flags & 0x80:
        d['cwr'] += 1
    if flags & 0x40:
        d['ece'] += 1
        if pay > 0:
            d['ece_data'] += 1
print(json.dumps(c), flush=True)
"#;

/// [`SNIFF`] on the peer's `peer0`, in the background.
struct Sniffer {
    child: Child,
    stop: PathBuf,
}

impl Sniffer {
    fn start(bed: &Bed, tag: &str) -> Sniffer {
        let stop = std::env::temp_dir().join(format!("{}-{tag}.sniff-stop", bed.name));
        let _ = std::fs::remove_file(&stop);
        let mut child = peer_py_spawn(bed, 600, SNIFF, &["peer0", stop.to_str().unwrap()]);
        wait_ready(&mut child);
        Sniffer { child, stop }
    }

    /// The counts: `out` (sent by the peer's kernel), `in` (received by
    /// it), each with `cwr`, `ece` and `ece_data` segments.
    fn stop(self) -> Value {
        std::fs::write(&self.stop, b"").unwrap();
        let out = finish(self.child, Duration::from_secs(20));
        let _ = std::fs::remove_file(&self.stop);
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }
}

/// The TCP counters an ECN test looks at, of a summary's totals.
fn ecn_counters(t: &Value) -> Value {
    let keys = [
        "ecn_negotiated",
        "ce_received",
        "ecn_cwnd_reductions",
        "segments_in",
        "segments_out",
        "retransmits",
        "fast_retransmits",
        "rack_lost",
        "tlp_probes",
        "rto_timeouts",
        "bad_ip_checksum",
    ];
    keys.iter()
        .map(|k| (k.to_string(), t[*k].clone()))
        .collect()
}

/// One marked transfer's figures, for the side-by-side lines.
#[derive(Debug)]
struct Figures {
    /// Window reductions of the sender.
    reductions: u64,
    /// Packets the path marked CE on the data's way.
    marked: u64,
    /// Seconds the transfer took, as the sending client saw it.
    secs: f64,
    /// Segments the sender retransmitted.
    retransmits: u64,
    /// Kernel senders: the share of delivered segments acknowledged with
    /// ECE (`TCPDeliveredCE / TCPDelivered`): how long the echoes last.
    echoed_share: f64,
}

impl Figures {
    fn line(&self, who: &str) -> String {
        let mb = MARKED_BYTES as f64 / 1e6;
        format!(
            "{who:<30} {:>6} marks {:>5} reductions {:>6.2} /MB {:>8.1} Mbit/s {:>4} retransmits",
            self.marked,
            self.reductions,
            self.reductions as f64 / mb,
            MARKED_BYTES as f64 * 8.0 / self.secs / 1e6,
            self.retransmits
        )
    }
}

/// Kernel (peer, ECN on) → `host:port` with a sniffer and the peer's
/// counters around it; returns the sender's sha256, the sniffer's counts,
/// the peer's counter deltas of `names`, and the seconds it took.
fn kernel_send_watched(
    bed: &Bed,
    to: &str,
    tag: &str,
    names: &[&str],
) -> (String, Value, Vec<u64>, f64) {
    let before = peer_counters(bed);
    let sniff = Sniffer::start(bed, tag);
    let t0 = Instant::now();
    let sent = peer_py(bed, 300, KERNEL_SEND, &[to, &MARKED_BYTES.to_string()]);
    let secs = t0.elapsed().as_secs_f64();
    let seen = sniff.stop();
    let after = peer_counters(bed);
    let d = names
        .iter()
        .map(|n| net_counters::delta(&before, &after, n))
        .collect();
    (sent.trim().to_string(), seen, d, secs)
}

#[test]
fn a_kernel_sender_that_asks_for_ecn_gets_it_and_one_that_does_not_does_not() {
    if !require_root("a_kernel_sender_that_asks_for_ecn_gets_it_and_one_that_does_not_does_not") {
        return;
    }
    let bed = Bed::up("tec", 2);
    peer_sysctl(&bed, "net.ipv4.tcp_ecn=1");
    let (_, lines) = kernel_to_flowlane(&bed, 8 << 20, 120);
    let t = totals(&lines);
    assert_eq!(t["ecn_negotiated"], 1, "{t}");
    assert_eq!(t["ce_received"], 0, "a clean path marks nothing: {t}");
    peer_sysctl(&bed, "net.ipv4.tcp_ecn=0");
    let (_, lines) = kernel_to_flowlane(&bed, 1 << 20, 120);
    let t = totals(&lines);
    assert_eq!(t["ecn_negotiated"], 0, "{t}");
}

/// A kernel sender → flowlane `bulk-sink` over `family` on a path that
/// marks CE towards flowlane; then the same kernel sender → a kernel
/// receiver in the bed's namespace (port 5003: flowlane is not running, so
/// the kernel has the port). Returns (flowlane's, the kernel receiver's)
/// figures.
fn kernel_sender_on_a_marked_path(bed: &Bed, family: Family) -> (Figures, Figures) {
    let ce = ce_percent();
    peer_sysctl(bed, "net.ipv4.tcp_ecn=1");
    mark_ce(bed, &ce);
    let names = [
        "TcpExt.TCPDeliveredCE",
        "Tcp.RetransSegs",
        "TcpExt.TCPDelivered",
        "TcpExt.TCPDSACKRecv",
    ];

    // Kernel -> flowlane.
    let (marked0, _) = ce_marked(bed);
    let sink = start(bed, &["bulk-sink", "--port", "5001", "--count", "1"], 300);
    let (sent, seen, d, secs) = kernel_send_watched(bed, &family.ours(5001), "k2f", &names);
    let lines = sink.wait(Duration::from_secs(120));
    let (marked1, _) = ce_marked(bed);
    let r = lines
        .iter()
        .find(|v| v["event"] == "sink")
        .expect("sink line");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["bytes"], MARKED_BYTES, "{r}");
    assert_eq!(r["sha256"], sent.as_str(), "sha256 differs: {r}");
    let t = totals(&lines);
    eprintln!(
        "{family:?} kernel -> flowlane, CE {ce} %: {r}\n  flowlane: {}\n  peer0 ECE/CWR segments: {seen}\n  peer TCPDeliveredCE {} RetransSegs {} TCPDelivered {}",
        ecn_counters(&t),
        d[0],
        d[1],
        d[2]
    );
    assert_eq!(t["ecn_negotiated"], 1, "{t}");
    let marked = marked1 - marked0;
    let ce_got = t["ce_received"].as_u64().unwrap();
    assert!(marked > 0, "the path marked nothing");
    assert!(ce_got > 0, "flowlane counted no CE mark: {t}");
    assert!(
        ce_got <= marked,
        "more CE counted than marked ({marked}): {t}"
    );
    // flowlane echoed (ECE on its ACKs, counted where they enter peer0) …
    assert!(
        seen["in"]["ece"].as_u64().unwrap() > 0,
        "no ECE from flowlane: {seen}"
    );
    // … the kernel sender saw the echoes (TcpExt.TCPDeliveredCE: segments
    // acknowledged by an ACK with ECE) …
    assert!(d[0] > 0, "the kernel saw no ECE (TCPDeliveredCE 0)");
    // … and answered each window's with a reduction and a CWR (RFC 3168
    // §6.1.2), which also ends flowlane's echo: echoed segments stay a
    // small share of all delivered (an echo that never stopped would mark
    // every ACK).
    let k_cwr = seen["out"]["cwr"].as_u64().unwrap();
    assert!(k_cwr > 0, "the kernel sent no CWR: {seen}");
    // Marks are no losses: the impairment drops nothing, and the kernel's
    // retransmissions (tail loss probes on a loaded machine) stay rare.
    assert!(d[1] * 200 <= d[2], "kernel retransmitted {} segments", d[1]);
    // Every CE-marked IPv4 header had its checksum fixed.
    assert_eq!(t["bad_ip_checksum"], 0, "{t}");
    let flowlane = Figures {
        reductions: k_cwr,
        marked,
        secs,
        retransmits: d[1],
        echoed_share: d[0] as f64 / d[2].max(1) as f64,
    };

    // Kernel -> kernel, same path, same marking.
    let dst = match family {
        Family::V4 => "10.99.0.1",
        Family::V6 => "[fd99::1]",
    };
    let mut recv = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "timeout", "300", "python3", "-c"])
        .arg(KERNEL_RECV)
        .arg(format!("{dst}:5003"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(&mut recv);
    let (m0, _) = ce_marked(bed);
    let (sent, seen, d, secs) = kernel_send_watched(bed, &format!("{dst}:5003"), "k2k", &names);
    let got = finish(recv, Duration::from_secs(60));
    let (m1, _) = ce_marked(bed);
    assert_eq!(got.trim(), format!("{MARKED_BYTES} {sent}"));
    eprintln!(
        "{family:?} kernel -> kernel, CE {ce} %: peer0 ECE/CWR segments: {seen}; peer TCPDeliveredCE {} RetransSegs {} (DSACKed, so spurious: {}; this path reorders \
         into the kernel receiver with or without marks)",
        d[0], d[1], d[3]
    );
    let kernel = Figures {
        reductions: seen["out"]["cwr"].as_u64().unwrap(),
        marked: m1 - m0,
        secs,
        retransmits: d[1],
        echoed_share: d[0] as f64 / d[2].max(1) as f64,
    };
    eprintln!(
        "{family:?} share of delivered segments acknowledged with ECE: flowlane receiver {:.3}, Linux receiver {:.3}",
        flowlane.echoed_share, kernel.echoed_share
    );
    (flowlane, kernel)
}

#[test]
fn kernel_sender_to_flowlane_on_a_ce_marking_path() {
    if !require_root("kernel_sender_to_flowlane_on_a_ce_marking_path") {
        return;
    }
    let bed = Bed::up("tek", 2);
    let ce = ce_percent();
    let (f, k) = kernel_sender_on_a_marked_path(&bed, Family::V4);
    eprintln!(
        "kernel sender, CE {ce} % of packets, {} MiB, IPv4:\n  {}\n  {}",
        MARKED_BYTES >> 20,
        f.line("receiver flowlane"),
        k.line("receiver Linux")
    );
    assert!(
        k.reductions > 0,
        "the kernel receiver's path saw no reduction"
    );
}

#[test]
fn kernel_sender_to_flowlane_on_a_ce_marking_path_over_ipv6() {
    if !require_root("kernel_sender_to_flowlane_on_a_ce_marking_path_over_ipv6") {
        return;
    }
    let bed = Bed::up("te6", 2);
    let ce = ce_percent();
    let (f, k) = kernel_sender_on_a_marked_path(&bed, Family::V6);
    eprintln!(
        "kernel sender, CE {ce} % of packets, {} MiB, IPv6:\n  {}\n  {}",
        MARKED_BYTES >> 20,
        f.line("receiver flowlane"),
        k.line("receiver Linux")
    );
}

/// flowlane `bulk-source --ecn on` (or Linux in the bed's namespace with
/// `tcp_ecn=1`) → a kernel receiver on the peer, marked towards the kernel.
#[test]
fn flowlane_sender_to_kernel_on_a_ce_marking_path() {
    if !require_root("flowlane_sender_to_kernel_on_a_ce_marking_path") {
        return;
    }
    let bed = Bed::up("tef", 2);
    let ce = ce_percent();
    mark_ce(&bed, &ce);
    let names = ["IpExt.InCEPkts", "IpExt.InECT0Pkts", "Ip.InHdrErrors"];

    // flowlane -> kernel.
    let to = Family::V4.peer(5002);
    let mut peer = peer_py_spawn(&bed, 300, KERNEL_RECV, &[&to]);
    wait_ready(&mut peer);
    let before = peer_counters(&bed);
    let (_, m0) = ce_marked(&bed);
    let sniff = Sniffer::start(&bed, "f2k");
    let src = start(
        &bed,
        &[
            "bulk-source",
            "--ecn",
            "on",
            "--connect",
            &to,
            "--bytes",
            &MARKED_BYTES.to_string(),
        ],
        300,
    );
    let lines = src.wait(Duration::from_secs(300));
    let got = finish(peer, Duration::from_secs(60));
    let seen = sniff.stop();
    let (_, m1) = ce_marked(&bed);
    let after = peer_counters(&bed);
    let d: Vec<u64> = names
        .iter()
        .map(|n| net_counters::delta(&before, &after, n))
        .collect();
    let r = source_checked(&lines, &got, MARKED_BYTES);
    let t = totals(&lines);
    eprintln!(
        "flowlane -> kernel, CE {ce} %: {r}\n  flowlane: {}\n  peer0 ECE/CWR segments: {seen}\n  peer InCEPkts {} InECT0Pkts {}",
        ecn_counters(&t),
        d[0],
        d[1]
    );
    assert_eq!(t["ecn_negotiated"], 1, "{t}");
    assert!(d[1] > 0, "flowlane sent nothing ECT(0)");
    assert!(d[0] > 0, "no CE mark reached the kernel");
    // The kernel echoed (ECE on its ACKs, counted leaving peer0) …
    assert!(
        seen["out"]["ece"].as_u64().unwrap() > 0,
        "the kernel echoed nothing: {seen}"
    );
    // … flowlane reduced its window for them and said so with CWR …
    let red = t["ecn_cwnd_reductions"].as_u64().unwrap();
    assert!(red > 0, "{t}");
    let cwr = seen["in"]["cwr"].as_u64().unwrap();
    assert!(cwr > 0, "flowlane sent no CWR: {seen}");
    // … and took no mark for a loss: no fast retransmit, no segment RACK
    // deemed lost, no timeout. (A tail loss probe may retransmit the last
    // segment when an ACK is late on this shared machine, with or without
    // marks: its retransmissions are the only ones allowed.)
    for k in ["fast_retransmits", "rack_lost", "rto_timeouts"] {
        assert_eq!(t[k], 0, "{k}: {t}");
    }
    assert!(
        t["retransmits"].as_u64().unwrap() <= t["tlp_probes"].as_u64().unwrap(),
        "{t}"
    );
    // The kernel got every CE-marked header intact (checksum fixed).
    assert_eq!(d[2], 0, "IPv4 header errors at the kernel");
    let flowlane = Figures {
        reductions: red,
        marked: m1 - m0,
        secs: r["secs"].as_f64().unwrap(),
        retransmits: 0,
        echoed_share: f64::NAN,
    };

    // Linux in the bed's namespace -> the same kernel receiver.
    sysctl(&bed.ns, "net.ipv4.tcp_ecn=1");
    let mut peer = peer_py_spawn(&bed, 300, KERNEL_RECV, &["10.99.0.2:5004"]);
    wait_ready(&mut peer);
    let before = net_counters::read_in(&bed.ns).unwrap();
    let (_, m0) = ce_marked(&bed);
    let sniff = Sniffer::start(&bed, "k2k");
    let t0 = Instant::now();
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "timeout", "300", "python3", "-c"])
        .arg(KERNEL_SEND)
        .args(["10.99.0.2:5004", &MARKED_BYTES.to_string()])
        .output()
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", text(&o));
    let sent = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let got = finish(peer, Duration::from_secs(60));
    let seen = sniff.stop();
    let (_, m1) = ce_marked(&bed);
    let after = net_counters::read_in(&bed.ns).unwrap();
    assert_eq!(got.trim(), format!("{MARKED_BYTES} {sent}"));
    eprintln!(
        "Linux -> kernel, CE {ce} %: peer0 ECE/CWR segments: {seen}; sender RetransSegs {} (DSACKed: {})",
        net_counters::delta(&before, &after, "Tcp.RetransSegs"),
        net_counters::delta(&before, &after, "TcpExt.TCPDSACKRecv")
    );
    let kernel = Figures {
        reductions: seen["in"]["cwr"].as_u64().unwrap(),
        marked: m1 - m0,
        secs,
        retransmits: net_counters::delta(&before, &after, "Tcp.RetransSegs"),
        echoed_share: f64::NAN,
    };
    eprintln!(
        "kernel receiver, CE {ce} % of packets, {} MiB, IPv4:\n  {}\n  {}",
        MARKED_BYTES >> 20,
        flowlane.line("sender flowlane"),
        kernel.line("sender Linux")
    );
}

/// With marking on and ECN not negotiated (the kernel sender does not ask,
/// flowlane does not ask either), every packet is Not-ECT: nothing is
/// marked and both directions transfer intact.
#[test]
fn without_ecn_a_marking_path_marks_nothing() {
    if !require_root("without_ecn_a_marking_path_marks_nothing") {
        return;
    }
    let bed = Bed::up("ten", 2);
    peer_sysctl(&bed, "net.ipv4.tcp_ecn=0");
    mark_ce(&bed, "50");
    let (_, lines) = kernel_to_flowlane(&bed, 8 << 20, 120);
    let t = totals(&lines);
    assert_eq!(t["ecn_negotiated"], 0, "{t}");
    assert_eq!(t["ce_received"], 0, "{t}");
    // flowlane asks, the kernel (tcp_ecn=0) declines: Not-ECT both ways.
    let to = Family::V4.peer(5002);
    let mut peer = peer_py_spawn(&bed, 120, KERNEL_RECV, &[&to]);
    wait_ready(&mut peer);
    let src = start(
        &bed,
        &[
            "bulk-source",
            "--ecn",
            "on",
            "--connect",
            &to,
            "--bytes",
            &(8u64 << 20).to_string(),
        ],
        120,
    );
    let lines = src.wait(Duration::from_secs(120));
    let got = finish(peer, Duration::from_secs(60));
    source_checked(&lines, &got, 8 << 20);
    let t = totals(&lines);
    assert_eq!(t["ecn_negotiated"], 0, "{t}");
    assert_eq!(t["ecn_cwnd_reductions"], 0, "{t}");
    let imp = impair_counters(&bed);
    assert!(imp["to_flowlane"]["seen"].as_u64().unwrap() > 1000, "{imp}");
    assert_eq!(
        ce_marked(&bed),
        (0, 0),
        "Not-ECT packets were marked: {imp}"
    );
}
