//! ECN (RFC 3168) against the kernel (issue 11): a Linux sender that asks
//! for ECN (`net.ipv4.tcp_ecn=1` in the peer namespace) negotiates it with
//! flowlane (ECE+CWR on the SYN, ECE on the SYN-ACK, RFC 3168 §6.1.1) and
//! sends every byte ECT, sha256-equal; a Linux sender that does not ask
//! gets no ECN. (A path that marks CE needs a marking hop on the bed: this
//! kernel has no sch_netem, and the bed's impairment program does not mark
//! yet; the marks' echo and the cwnd response are proved in the simulator,
//! `tcp/tests/ecn.rs`.)

mod tcp_common;

use std::process::Command;

use flowlane_tests::{require_root, Bed};
use tcp_common::*;

fn peer_sysctl(bed: &Bed, setting: &str) {
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.peer_ns, "sysctl", "-qw", setting])
        .output()
        .unwrap();
    assert!(o.status.success(), "{setting}: {o:?}");
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
