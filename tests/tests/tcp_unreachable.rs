//! A flowlane connect a router answers "destination unreachable" ends at
//! once, saying why, as a kernel socket's connect fails (`EHOSTUNREACH`,
//! `ENETUNREACH`, `ECONNREFUSED`): the bed's peer namespace is a real
//! router (forwarding on) whose kernel has `unreachable` and `prohibit`
//! routes to networks flowlane sends to through it (`--neighbor`: the
//! peer's MAC for an address off the bed's network, as a gateway's). Before
//! flowlane took these messages (the steering program passed them to the
//! kernel, which has no socket for them), each open retransmitted its SYN
//! into the answers until it timed out.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod tcp_common;

use flowlane_tests::{flowlane_bin, in_ns, kill_and_reap, require_root, text, wait_bounded, Bed};
use tcp_common::{peer_py_spawn, totals, wait_ready};

/// Runs `cmd` in namespace `ns`, asserting it succeeded.
fn ns_ok(ns: &str, cmd: &[&str]) {
    let o: Output = in_ns(ns, cmd);
    assert!(o.status.success(), "{cmd:?} in {ns}: {}", text(&o));
}

#[test]
fn a_connect_a_router_answers_unreachable_ends_at_once_saying_why() {
    if !require_root("a_connect_a_router_answers_unreachable_ends_at_once_saying_why") {
        return;
    }
    let bed = Bed::up("tunr", 1);
    // The peer forwards, and its routing table has no way on to these
    // networks: the kernel answers "host unreachable", "communication
    // administratively prohibited" (RFC 1812 §5.2.7.1, code 13) and ICMPv6
    // "no route to destination" for what it would forward there.
    ns_ok(&bed.peer_ns, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    ns_ok(
        &bed.peer_ns,
        &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"],
    );
    // Its answers to one host are not rate-limited (by default about one
    // a second after a burst of two: the next open's SYN would wait for
    // its retransmission's answer).
    ns_ok(
        &bed.peer_ns,
        &["sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"],
    );
    ns_ok(
        &bed.peer_ns,
        &["sysctl", "-qw", "net.ipv6.icmp.ratelimit=0"],
    );
    ns_ok(
        &bed.peer_ns,
        &["ip", "route", "add", "unreachable", "10.250.0.0/24"],
    );
    ns_ok(
        &bed.peer_ns,
        &["ip", "route", "add", "prohibit", "10.251.0.0/24"],
    );
    ns_ok(
        &bed.peer_ns,
        &["ip", "-6", "route", "add", "unreachable", "fd98::/64"],
    );
    // The kernel backend's sockets route through the peer as any host's.
    ns_ok(
        &bed.ns,
        &["ip", "route", "add", "10.250.0.0/15", "via", "10.99.0.2"],
    );
    ns_ok(
        &bed.ns,
        &["ip", "-6", "route", "add", "fd98::/64", "via", "fd99::2"],
    );
    let mac = in_ns(&bed.peer_ns, &["cat", "/sys/class/net/peer0/address"]);
    let mac = String::from_utf8_lossy(&mac.stdout).trim().to_string();
    // What each backend says: flowlane's stack names the filter; Linux
    // reports it as the host's (`EHOSTUNREACH`).
    for (ip, to, xdp, kernel) in [
        (
            "10.250.0.1",
            "10.250.0.1:5001",
            "Unreachable(Host)",
            "Unreachable(Host)",
        ),
        (
            "10.251.0.1",
            "10.251.0.1:5001",
            "Unreachable(Prohibited)",
            "Unreachable(Host)",
        ),
        (
            "fd98::1",
            "[fd98::1]:5001",
            "Unreachable(Network)",
            "Unreachable(Network)",
        ),
    ] {
        let neighbor = format!("{ip}={mac}");
        for (backend, close) in [("xdp", xdp), ("kernel", kernel)] {
            let mut cmd = Command::new(flowlane_bin());
            cmd.args(["bulk-source", "--bed", &bed.name, "--connect", to])
                .args(["--backend", backend])
                .args(["--control-socket", "none", "--daemon-socket", "none"])
                .args(["--timeout", "20"]);
            if backend == "xdp" {
                cmd.args(["--neighbor", &neighbor]);
            }
            let child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let (o, took) = wait_bounded(child, Duration::from_secs(60), "bulk-source");
            let what = format!("{to} on {backend}");
            assert_eq!(o.status.code(), Some(1), "{what}: {}", text(&o));
            let out = String::from_utf8_lossy(&o.stdout);
            let lines: Vec<serde_json::Value> = out
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let line = lines
                .iter()
                .find(|v| v["event"] == "source")
                .unwrap_or_else(|| panic!("{what}: no source line: {}", text(&o)));
            assert_eq!(line["close"], close, "{what}: {line}");
            let secs = line["secs"].as_f64().unwrap();
            assert!(secs < 2.0, "{what}: ended after {secs} s: {line}");
            assert!(took < Duration::from_secs(30), "{what}: {took:?}");
            if backend == "xdp" {
                let tcp = totals(&lines);
                assert_eq!(tcp["unreachable_ended"], 1, "{what}: {tcp}");
                assert_eq!(tcp["retransmits"], 0, "{what}: the SYN went once: {tcp}");
            }
        }
    }
}

/// A kernel peer in the peer namespace: accepts one connection on
/// `argv[1]` (host:port), prints `ready` once a mebibyte came, then reads
/// on until it is killed.
const FLOWING_SINK: &str = r#"
import socket, sys
host, port = sys.argv[1].rsplit(':', 1)
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((host, int(port)))
l.listen(1)
c, _ = l.accept()
n = 0
while n < 1 << 20:
    d = c.recv(1 << 16)
    if not d:
        sys.exit(1)
    n += len(d)
print('ready', flush=True)
while c.recv(1 << 16):
    pass
"#;

/// A transfer whose peer vanishes behind a router that answers "host
/// unreachable" for it (the peer's address gone, an `unreachable` route in
/// its place) ends saying so, not as timed out: Linux reports the soft
/// error it kept (`EHOSTUNREACH`, `tcp_write_err`) when its
/// retransmissions run out, and the kernel backend ends the connection
/// `Unreachable(Host)`, as flowlane's stack ends one in that case (its
/// `tcp/tests/unreachable.rs`; on AF_XDP its retransmissions run out after
/// some eight minutes, too long for a test). `tcp_retries2` 3 in
/// flowlane's namespace: Linux gives up after 3 s.
#[test]
fn a_transfer_whose_peer_vanishes_behind_an_unreachable_route_ends_saying_why() {
    if !require_root("a_transfer_whose_peer_vanishes_behind_an_unreachable_route_ends_saying_why") {
        return;
    }
    let bed = Bed::up("tunv", 1);
    ns_ok(&bed.peer_ns, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    ns_ok(
        &bed.peer_ns,
        &["sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"],
    );
    ns_ok(
        &bed.peer_ns,
        &["ip", "addr", "add", "10.252.0.1/32", "dev", "lo"],
    );
    ns_ok(
        &bed.ns,
        &["ip", "route", "add", "10.252.0.0/24", "via", "10.99.0.2"],
    );
    ns_ok(&bed.ns, &["sysctl", "-qw", "net.ipv4.tcp_retries2=3"]);
    let mut sink = peer_py_spawn(&bed, 120, FLOWING_SINK, &["10.252.0.1:5001"]);
    let listening = (0..100).any(|_| {
        let o = in_ns(&bed.peer_ns, &["ss", "-Hltn", "sport = :5001"]);
        let up = !o.stdout.is_empty();
        if !up {
            std::thread::sleep(Duration::from_millis(50));
        }
        up
    });
    assert!(listening, "the peer's sink did not listen");
    let source = Command::new(flowlane_bin())
        .args(["bulk-source", "--bed", &bed.name, "--backend", "kernel"])
        .args(["--connect", "10.252.0.1:5001", "--bytes", "100000000000"])
        .args(["--control-socket", "none", "--daemon-socket", "none"])
        .args(["--timeout", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(&mut sink);
    // The peer goes; its router answers for its address from now on.
    ns_ok(
        &bed.peer_ns,
        &["ip", "addr", "del", "10.252.0.1/32", "dev", "lo"],
    );
    ns_ok(
        &bed.peer_ns,
        &["ip", "route", "add", "unreachable", "10.252.0.0/24"],
    );
    let (o, took) = wait_bounded(source, Duration::from_secs(60), "bulk-source");
    kill_and_reap(&mut sink);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let line: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "source")
        .unwrap_or_else(|| panic!("no source line: {}", text(&o)));
    assert_eq!(line["close"], "Unreachable(Host)", "{line}");
    assert!(took < Duration::from_secs(30), "{took:?}: {line}");
}
