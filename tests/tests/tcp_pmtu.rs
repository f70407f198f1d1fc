//! Path MTU discovery against the kernel (issue 11): the peer's link takes
//! 1 280-byte packets while its SYN-ACK advertises a full Ethernet MSS, so
//! flowlane's full-size segments vanish (a black hole). A "router" in the
//! peer namespace answers as a real one would: an ICMPv4 fragmentation
//! needed / ICMPv6 packet too big quoting the segment the peer is missing
//! (the sequence number its ACKs ask for), and, first, a forged one about a
//! sequence number that is not in flight. flowlane must ignore the forgery,
//! believe the real one (RFC 5927 §4.1), lower the MSS and finish the
//! transfer, sha256-equal. (The router cannot see the frames the link
//! drops; it learns the missing sequence number from the duplicate ACKs the
//! peer sends for what does get through, a write's short tail segment, so
//! the first message comes a retransmission timeout or so late, unlike a
//! real router's at once.)
//!
//! Through the silent black hole, with `FLOWLANE_PMTU_KERNEL=1`, the
//! kernel runs beside flowlane in the same test: its PLPMTUD
//! (`net.ipv4.tcp_mtu_probing = 1`, which covers IPv6 too) sending the
//! same 8 MiB from the bed's namespace; both times are printed
//! (BENCHMARKS.md). A measurement, which asserts nothing of flowlane's and
//! took about 8 s of each silent test's 15 s, so CI leaves it out.

mod tcp_common;

use std::process::Command;
use std::time::{Duration, Instant};

use flowlane_testbed::net_counters;
use flowlane_tests::{kill_and_reap, require_root, Bed};
use tcp_common::*;

/// The router: sniffs the peer's outgoing ACKs on `peer0` (AF_PACKET) and,
/// while the ACK number stands still, sends a "packet too big" quoting a
/// segment from flowlane (`argv[1]`, its address) at that sequence number,
/// MTU `argv[2]`, at most every 100 ms; the first message it sends quotes
/// the ACK number + 2^31 (forged: not in flight). With `argv[3]` =
/// `silent` it sends nothing: a black hole whose ICMP never arrives (RFC
/// 4821's case). Runs until killed.
const ROUTER: &str = r#"
import socket, struct, sys, time
ours, mtu = sys.argv[1], int(sys.argv[2])
silent = len(sys.argv) > 3 and sys.argv[3] == 'silent'
v6 = ':' in ours
sniff = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
sniff.bind(('peer0', 0))
if v6:
    raw = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
else:
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def too_big(peer, fl_port, peer_port, seq):
    tcp = struct.pack('!HHI', fl_port, peer_port, seq)
    if v6:
        ip = struct.pack('!IHBB16s16s', 6 << 28, 1440 + 32, 6, 64,
                         socket.inet_pton(socket.AF_INET6, ours),
                         socket.inet_pton(socket.AF_INET6, peer))
        msg = struct.pack('!BBHI', 2, 0, 0, mtu) + ip + tcp  # kernel fills the checksum
        raw.sendto(msg, (ours, 0))
    else:
        ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 1500, 0, 0x4000, 64, 6, 0,
                         socket.inet_aton(ours), socket.inet_aton(peer))
        ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
        body = ip + tcp
        hdr = struct.pack('!BBHHH', 3, 4, 0, 0, mtu)
        msg = hdr[:2] + struct.pack('!H', csum(hdr + body)) + hdr[4:] + body
        raw.sendto(msg, (ours, 0))
print('ready', flush=True)
last, since, sent_at, forged = None, 0.0, 0.0, False
while True:
    f = sniff.recv(2048)
    et = struct.unpack('!H', f[12:14])[0]
    if v6 and et == 0x86dd and f[20] == 6:
        src = socket.inet_ntop(socket.AF_INET6, f[22:38]); tcp = f[54:]
    elif not v6 and et == 0x0800 and f[23] == 6:
        src = socket.inet_ntoa(f[26:30]); tcp = f[14 + (f[14] & 15) * 4:]
    else:
        continue
    if src == ours:
        continue
    sport, dport, _, ack = struct.unpack('!HHII', tcp[:12])
    now = time.time()
    if ack != last:
        last, since = ack, now
        continue
    if silent or now - since < 0.05 or now - sent_at < 0.1:
        continue
    if not forged:
        too_big(src, dport, sport, (ack + (1 << 31)) & 0xffffffff)
        forged = True
    too_big(src, dport, sport, ack)
    sent_at = now
"#;

/// How the path's router answers a segment too big for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Router {
    /// With ICMP (and one forgery first).
    Icmp,
    /// With nothing: flowlane must find the MTU itself (RFC 4821).
    Silent,
}

fn black_hole_heals(tag: &str, family: Family, mode: Router) {
    let bed = Bed::up(tag, 2);
    let (ours, routes): (&str, &[&str]) = match family {
        Family::V4 => ("10.99.0.1", &["-4", "route", "replace", "10.99.0.0/24"]),
        Family::V6 => (
            "fd99::1",
            &["-6", "route", "replace", "fd99::/64", "metric", "256"],
        ),
    };
    let advmss = if family == Family::V4 { "1460" } else { "1440" };
    for args in [
        &["link", "set", "peer0", "mtu", "1280"][..],
        &[routes, &["dev", "peer0", "advmss", advmss]].concat()[..],
    ] {
        let o = Command::new("ip")
            .args(["-n", &bed.peer_ns])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "ip {args:?}: {o:?}");
    }
    let mut router = Command::new("ip")
        .args(["netns", "exec", &bed.peer_ns, "timeout", "120"])
        .args(["python3", "-c", ROUTER, ours, "1280"])
        .args((mode == Router::Silent).then_some("silent"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(&mut router);
    let started = Instant::now();
    // (sha256-equal, checked by the helper.)
    let (r, lines) = flowlane_to_kernel_over(&bed, family, 8 << 20, 60, MODELS[0]);
    let took = started.elapsed();
    let _ = router.kill();
    let _ = router.wait();
    let t = totals(&lines);
    eprintln!("{family:?} {mode:?}: flowlane sent 8 MiB in {took:?}: {r}\n{t}");
    match mode {
        Router::Icmp => {
            assert_eq!(t["pmtu_lowered"], 1, "{t}");
            assert!(t["too_big_ignored"].as_u64() >= Some(1), "the forgery: {t}");
        }
        Router::Silent => {
            assert_eq!(t["pmtu_lowered"], 0, "{t}");
            assert!(t["mtu_black_holes"].as_u64() >= Some(1), "{t}");
            if std::env::var_os("FLOWLANE_PMTU_KERNEL").is_none() {
                return;
            }
            let (k_took, k) = kernel_through_the_black_hole(&bed, family);
            eprintln!(
                "{family:?} silent black hole: flowlane healed and sent 8 MiB in {:.2} s ({:.2} s \
                 from connected to closed); the kernel (tcp_mtu_probing = 1) in {:.2} s ({k})",
                took.as_secs_f64(),
                r["secs"].as_f64().unwrap_or(f64::NAN),
                k_took.as_secs_f64()
            );
        }
    }
}

/// The kernel through the same silent black hole, with its own PLPMTUD
/// (`net.ipv4.tcp_mtu_probing = 1`, RFC 4821 as Linux does it): 8 MiB from
/// [`KERNEL_SEND`] in the bed's own namespace (a kernel port: flowlane's
/// XDP program passes its ACKs) to [`KERNEL_RECV`] in the peer namespace,
/// sha256-equal. Its frames leave through `xsk0` as flowlane's do:
/// wire-size (veth forwards a GSO super-frame whatever its size) and
/// through a queue (`pfifo`). veth has none, and without one the peer's
/// MTU drops the frame inside the sender's own transmit call, which TCP
/// takes for a local drop (it retries every 500 ms and aborts after
/// `tcp_retries2` tries, on Linux 6.18 within about 10 s, never probing)
/// instead of a loss in the network. flowlane's AF_XDP frames bypass the
/// qdisc. Returns the time taken (from starting the receiver, as flowlane's
/// is) and a line with the transfer's own time and the kernel's counters.
fn kernel_through_the_black_hole(bed: &Bed, family: Family) -> (Duration, String) {
    kernel_sends_wire_size_frames(bed);
    for args in [
        &["sysctl", "-qw", "net.ipv4.tcp_mtu_probing=1"][..],
        &["tc", "qdisc", "replace", "dev", "xsk0", "root", "pfifo"][..],
    ] {
        let o = flowlane_tests::in_ns(&bed.ns, args);
        assert!(o.status.success(), "{args:?}: {}", flowlane_tests::text(&o));
    }
    let before = net_counters::read_in(&bed.ns).unwrap();
    let started = Instant::now();
    let to = family.peer(5002);
    let mut peer = peer_py_spawn(bed, 60, KERNEL_RECV, &[&to]);
    wait_ready(&mut peer);
    let sent = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "timeout", "60"])
        .args([
            "python3",
            "-c",
            KERNEL_SEND,
            &to,
            &(8u64 << 20).to_string(),
            "timed",
        ])
        .output()
        .unwrap();
    if !sent.status.success() {
        kill_and_reap(&mut peer);
        panic!(
            "the kernel did not get through the black hole: {}",
            flowlane_tests::text(&sent)
        );
    }
    let got = finish(peer, Duration::from_secs(60));
    let took = started.elapsed();
    let out = String::from_utf8_lossy(&sent.stdout);
    let (sha, secs) = out.trim().split_once('\n').expect("sha256 and seconds");
    assert_eq!(got.trim(), format!("{} {}", 8u64 << 20, sha.trim()));
    let after = net_counters::read_in(&bed.ns).unwrap();
    let d = |k: &str| net_counters::delta(&before, &after, k);
    let counters = format!(
        "{} s from connected to closed; {} timeouts, {} segments retransmitted, MTU probes {} \
         acknowledged and {} lost",
        secs.trim(),
        d("TcpExt.TCPTimeouts"),
        d("Tcp.RetransSegs"),
        d("TcpExt.TCPMTUPSuccess"),
        d("TcpExt.TCPMTUPFail")
    );
    (took, counters)
}

#[test]
fn an_ipv4_black_hole_heals_by_fragmentation_needed() {
    if !require_root("an_ipv4_black_hole_heals_by_fragmentation_needed") {
        return;
    }
    black_hole_heals("tm4", Family::V4, Router::Icmp);
}

#[test]
fn an_ipv6_black_hole_heals_by_packet_too_big() {
    if !require_root("an_ipv6_black_hole_heals_by_packet_too_big") {
        return;
    }
    black_hole_heals("tm6", Family::V6, Router::Icmp);
}

#[test]
fn an_ipv4_black_hole_without_icmp_heals_by_probing() {
    if !require_root("an_ipv4_black_hole_without_icmp_heals_by_probing") {
        return;
    }
    black_hole_heals("tp4", Family::V4, Router::Silent);
}

#[test]
fn an_ipv6_black_hole_without_icmp_heals_by_probing() {
    if !require_root("an_ipv6_black_hole_without_icmp_heals_by_probing") {
        return;
    }
    black_hole_heals("tp6", Family::V6, Router::Silent);
}
