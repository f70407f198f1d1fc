//! The veth test bed: up is idempotent, down removes exactly what up made,
//! a half-made bed does not block the next up, and the emulated NIC is
//! programmable.

use flowlane_tests::{flowlane, require_root, text, unique_name, Bed};
use std::process::Command;

fn ns_exists(ns: &str) -> bool {
    std::path::Path::new("/run/netns").join(ns).exists()
}

#[test]
fn up_is_idempotent_and_down_removes_everything() {
    if !require_root("up_is_idempotent_and_down_removes_everything") {
        return;
    }
    let bed = Bed::up("idem", 4);
    assert!(ns_exists(&bed.ns) && ns_exists(&bed.peer_ns));
    let o = flowlane(&["testbed", "up", "--bed", &bed.name, "--queues", "4"]);
    assert!(o.status.success(), "second up: {}", text(&o));
    let st = flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    assert!(st.status.success(), "{}", text(&st));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["intact"], true);
    assert_eq!(v["queues"], 4);
    assert_eq!(v["table_size"], 128);
    // The veth really has four queues on each side.
    let o = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "ls", "/sys/class/net/xsk0/queues"])
        .output()
        .unwrap();
    let qs = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        qs.split_whitespace()
            .filter(|q| q.starts_with("rx-"))
            .count(),
        4,
        "{qs}"
    );

    let name = bed.name.clone();
    let (ns, peer) = (bed.ns.clone(), bed.peer_ns.clone());
    drop(bed);
    assert!(!ns_exists(&ns) && !ns_exists(&peer));
    assert!(!std::path::Path::new("/sys/fs/bpf/flowlane")
        .join(&name)
        .exists());
    let o = flowlane(&["testbed", "down", "--bed", &name]);
    assert!(o.status.success(), "down of a removed bed: {}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("was not up"));
}

#[test]
fn a_half_made_bed_does_not_block_up() {
    if !require_root("a_half_made_bed_does_not_block_up") {
        return;
    }
    // A crash after the first namespace was made leaves it behind.
    let name = unique_name("crash");
    let ns = format!("flowlane-{name}");
    let o = Command::new("ip")
        .args(["netns", "add", &ns])
        .output()
        .unwrap();
    assert!(o.status.success());
    let o = flowlane(&["testbed", "up", "--bed", &name, "--queues", "2"]);
    let ok = o.status.success();
    let down = flowlane(&["testbed", "down", "--bed", &name]);
    assert!(ok, "up over leftovers: {}", text(&o));
    assert!(down.status.success());
    assert!(!ns_exists(&ns));
}

#[test]
fn set_rss_programs_the_emulated_nic() {
    if !require_root("set_rss_programs_the_emulated_nic") {
        return;
    }
    let bed = Bed::up("rss", 4);
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--spread", "1,3"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--key", "6d:5a"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("key") && err.lines().count() == 1, "{err}");
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--spread", "0,9"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("queue 9"),
        "{}",
        text(&o)
    );
}
