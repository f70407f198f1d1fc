//! The emulated RSS NIC applies a table rewrite to the next packet, as
//! hardware does, also for established flows of connected sockets (whose
//! cached transmit queue Linux would otherwise keep): rewrite under a
//! running transfer and count what xsk0's receive queues get before and
//! after.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flowlane_tests::{flowlane, in_ns, kill_and_reap, require_root, text, wait_bounded, Bed};

/// Frames the old queue may still get after the rewrite returned: those
/// steered before it and not yet taken from the receive ring (NAPI).
const IN_FLIGHT: u64 = 128;

/// Frames each of xsk0's receive queues took (veth's per-queue NAPI
/// counters; NAPI is on because GRO is).
fn rx_queue_packets(bed: &Bed) -> Vec<u64> {
    let o = in_ns(&bed.ns, &["ethtool", "-S", "xsk0"]);
    assert!(o.status.success(), "ethtool -S: {}", text(&o));
    let mut per_queue: Vec<(usize, u64)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(": ")?;
            let q = name
                .strip_prefix("rx_queue_")?
                .strip_suffix("_xdp_packets")?;
            Some((q.parse().ok()?, value.trim().parse().ok()?))
        })
        .collect();
    per_queue.sort_unstable();
    per_queue.into_iter().map(|(_, n)| n).collect()
}

fn spread(bed: &Bed, queue: &str) {
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--spread", queue]);
    assert!(o.status.success(), "set-rss --spread {queue}: {}", text(&o));
}

fn iperf3(ns: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, "iperf3"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting iperf3 (is it installed? scripts/setup.sh)")
}

/// A bed whose xsk0 counts frames per receive queue, with the sender's XPS
/// off (XPS would override the emulator's choice).
fn counting_bed(tag: &str) -> Bed {
    let bed = Bed::up(tag, 2);
    let o = in_ns(&bed.ns, &["ethtool", "-K", "xsk0", "gro", "on"]);
    assert!(o.status.success(), "gro on: {}", text(&o));
    let o = in_ns(
        &bed.peer_ns,
        &["sh", "-c", "cat /sys/class/net/peer0/queues/tx-*/xps_cpus"],
    );
    let xps = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success()
            && xps
                .lines()
                .all(|m| m.trim_matches(['0', ','].as_ref()).is_empty()),
        "XPS is on for peer0: {xps:?}"
    );
    bed
}

/// Runs a 4 s iperf3 transfer (`extra` flags) from the peer to xsk0, moves
/// every bucket from queue 0 to queue 1 in the middle of it, and checks
/// that queue 0 stops growing at once while queue 1 takes the flow.
fn rewrite_under_transfer(tag: &str, port: &str, extra: &[&str]) {
    let bed = counting_bed(tag);
    spread(&bed, "0");
    let mut server = iperf3(&bed.ns, &["-s", "-1", "-p", port]);
    std::thread::sleep(Duration::from_millis(500));
    let mut args = vec!["-c", "10.99.0.1", "-p", port, "-t", "4"];
    args.extend_from_slice(extra);
    let client = iperf3(&bed.peer_ns, &args);
    std::thread::sleep(Duration::from_millis(1500));
    let before = rx_queue_packets(&bed);
    std::thread::sleep(Duration::from_millis(300));
    let running = rx_queue_packets(&bed);
    spread(&bed, "1");
    let at = rx_queue_packets(&bed);
    std::thread::sleep(Duration::from_millis(500));
    let after = rx_queue_packets(&bed);
    let (o, _) = wait_bounded(client, Duration::from_secs(30), "iperf3 client");
    kill_and_reap(&mut server);
    eprintln!(
        "{tag}: rx queue packets before {before:?}, 300 ms later {running:?}, \
         at the rewrite {at:?}, 500 ms later {after:?}"
    );
    assert!(o.status.success(), "iperf3 client: {}", text(&o));
    assert_eq!(before.len(), 2, "{before:?}");
    assert!(
        running[0] - before[0] > 1000 && running[1] - before[1] < IN_FLIGHT,
        "the flow is not on queue 0 before the rewrite: {before:?} -> {running:?}"
    );
    assert!(
        after[0] - at[0] <= IN_FLIGHT,
        "queue 0 took {} frames in the 500 ms after the rewrite (at most {IN_FLIGHT} were \
         in flight): the emulated NIC kept the flow on its old queue",
        after[0] - at[0]
    );
    assert!(
        after[1] - at[1] > 1000,
        "queue 1 took only {} frames after the rewrite",
        after[1] - at[1]
    );
}

#[test]
fn a_rewrite_moves_a_running_udp_flow_at_the_next_packet() {
    if !require_root("a_rewrite_moves_a_running_udp_flow_at_the_next_packet") {
        return;
    }
    // A connected UDP socket never lets the kernel re-choose its cached
    // transmit queue: only the emulator can move it.
    rewrite_under_transfer("nicu", "5301", &["-u", "-b", "200M"]);
}

#[test]
fn a_rewrite_moves_a_running_tcp_flow_at_the_next_packet() {
    if !require_root("a_rewrite_moves_a_running_tcp_flow_at_the_next_packet") {
        return;
    }
    rewrite_under_transfer("nict", "5302", &[]);
}
