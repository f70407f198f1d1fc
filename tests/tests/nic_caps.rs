//! The NIC capability model read from a real interface: the test bed's
//! veth, as the running kernel reports it through sysfs, ethtool netlink
//! and netdev netlink (`flowlane nic caps`), and the plan explained from
//! it (`flowlane plan --explain`), live and from a recording of it.

use flowlane_tests::{flowlane, flowlane_bin, in_ns, require_root, text, unique_name, Bed};
use serde_json::Value;

fn json(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

#[test]
fn the_beds_veth_as_the_kernel_reports_it() {
    if !require_root("the_beds_veth_as_the_kernel_reports_it") {
        return;
    }
    let bed = Bed::up("caps", 3);
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    let caps = json(&in_ns(
        &bed.ns,
        &[bin, "nic", "caps", "--iface", "xsk0", "--json"],
    ));
    assert_eq!(caps["iface"], "xsk0");
    assert_eq!(
        caps["driver"], "veth",
        "from ETHTOOL_GDRVINFO: veth has no bus device"
    );
    assert_eq!(caps["rx_queues"], 3);
    assert_eq!(caps["tx_queues"], 3);
    assert_eq!(caps["numa_node"], Value::Null);
    assert_eq!(caps["channels"]["rx_max"], 3, "{caps}");
    assert_eq!(caps["channels"]["combined_max"], 0);
    assert_eq!(caps["rss"], Value::Null, "veth has no RSS");
    assert_eq!(caps["ntuple"]["available"], false);
    let xdp: Vec<&str> = caps["xdp"]["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        xdp.contains(&"basic") && xdp.contains(&"redirect"),
        "{xdp:?}"
    );
    assert!(!xdp.contains(&"xsk-zerocopy"), "veth is copy mode: {xdp:?}");
    let queues = caps["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 6, "3 rx and 3 tx from queue-get: {queues:?}");
    assert_eq!(queues.iter().filter(|q| q["kind"] == "rx").count(), 3);

    // The one-screen view says the same.
    let o = in_ns(&bed.ns, &[bin, "nic", "caps", "--iface", "xsk0"]);
    assert!(o.status.success(), "{}", text(&o));
    let screen = String::from_utf8_lossy(&o.stdout);
    assert!(screen.starts_with("xsk0: driver veth"), "{screen}");
    assert!(screen.contains("RSS: none in the device"), "{screen}");

    // Live and recorded, the explanation is the same.
    let live = json(&in_ns(
        &bed.ns,
        &[bin, "plan", "--explain", "--json", "--iface", "xsk0"],
    ));
    let file = std::env::temp_dir().join(format!("{}.toml", unique_name("caps-rec")));
    let file_s = file.to_str().unwrap();
    let o = in_ns(
        &bed.ns,
        &[bin, "nic", "caps", "--iface", "xsk0", "--record", file_s],
    );
    assert!(o.status.success(), "{}", text(&o));
    let recorded = json(&flowlane(&[
        "plan",
        "--explain",
        "--json",
        "--nic-recording",
        file_s,
    ]));
    std::fs::remove_file(&file).unwrap();
    assert_eq!(live, recorded);
    assert_eq!(live["workers"], 3);
    let done_by = |v: &Value, part: &str| {
        v["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["part"] == part)
            .map(|p| p["done_by"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(done_by(&live, "rss-hash"), "flowlane");
    assert_eq!(done_by(&live, "af-xdp"), "kernel");
    assert_eq!(done_by(&live, "xdp-program"), "hardware");
    assert_eq!(done_by(&live, "queues"), "hardware");

    // More workers than the veth has queues.
    let four = json(&in_ns(
        &bed.ns,
        &[
            bin,
            "plan",
            "--explain",
            "--json",
            "--iface",
            "xsk0",
            "--queues",
            "4",
        ],
    ));
    // The bed's RSS tells each frame's bucket: the extra worker spills
    // (tests/tests/software_spill.rs).
    assert_eq!(done_by(&four, "queues"), "flowlane", "{four}");
}

#[test]
fn a_missing_interface_is_one_line() {
    let o = flowlane(&["nic", "caps", "--iface", "flowlane-none0"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("flowlane-none0"), "{err}");
}
