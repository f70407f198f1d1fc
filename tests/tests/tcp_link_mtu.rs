//! The interface's MTU, below Ethernet's 1500: at the start, flowlane's
//! TCP offers the MSS that MTU carries (RFC 9293 §3.7.1), so that a peer
//! on a larger link sends no segment the interface drops; lowered under a
//! running service, whose connections were sized for the old MTU, the
//! service ends with one line saying so, instead of stalling in silence.

mod tcp_common;

use std::time::Duration;

use flowlane_tests::{in_ns, require_root, text, xdp_attached, Bed};
use tcp_common::*;

/// Sets `dev`'s MTU in namespace `ns`.
fn set_mtu(ns: &str, dev: &str, mtu: u32) {
    let o = in_ns(
        ns,
        &["ip", "link", "set", "dev", dev, "mtu", &mtu.to_string()],
    );
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn the_mss_offered_is_what_the_interface_s_mtu_carries() {
    if !require_root("the_mss_offered_is_what_the_interface_s_mtu_carries") {
        return;
    }
    let bed = Bed::up("mtu", 1);
    // flowlane's side 1280 (a tunnel's, IPv6's minimum), the peer's 1500:
    // told an MSS of 1460, the peer would send frames xsk0 drops.
    set_mtu(&bed.ns, "xsk0", 1280);
    let (r, _) = kernel_to_flowlane(&bed, 1 << 20, 30);
    let mss = r["tcp"]["mss"].as_u64().expect("the sink's MSS");
    assert!(mss <= 1240, "MSS {mss} on a 1280-byte link: {r}");
}

#[test]
fn a_lowered_mtu_ends_the_service_with_one_line() {
    if !require_root("a_lowered_mtu_ends_the_service_with_one_line") {
        return;
    }
    let bed = Bed::up("mtuf", 1);
    let app = start(&bed, &["echo-server", "--port", "7"], 60);
    set_mtu(&bed.ns, "xsk0", 1000);
    let (_, err) = app.wait_failed_with_stderr(Duration::from_secs(10));
    let said: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains("the MTU of xsk0 fell from 1500 to 1000")
            && said[0].contains("restart the service"),
        "{err}"
    );
    assert!(!xdp_attached(&bed.ns, "xsk0"), "the program stayed: {err}");
}
