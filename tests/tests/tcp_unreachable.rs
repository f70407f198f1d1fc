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

use flowlane_tests::{flowlane_bin, in_ns, require_root, text, wait_bounded, Bed};
use tcp_common::totals;

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
