//! flowlane-ttcp with the flowlane backend (root): a receiver on flowlane's TCP
//! over AF_XDP (2 queues, started from the root namespace with `--bed`) against
//! a kernel-backend sender in the peer namespace, for 2 s after a 1 s warm-up;
//! then the other way round (flowlane sender, kernel receiver), 1 s, in
//! throughput, latency and overlap modes; both ways over the bed's IPv6
//! addresses too.

mod common;

use common::*;
use flowlane_testbed::state;
use flowlane_tests::{require_root, Bed};

fn f(v: &serde_json::Value, p: &str) -> f64 {
    v.pointer(p)
        .and_then(|x| x.as_f64())
        .unwrap_or_else(|| panic!("no {p} in {v}"))
}

/// A flowlane sender on the bed (`flags` shared with the receiver) to a
/// kernel receiver in the peer namespace; their JSON reports.
fn flowlane_sends_to_kernel(bed: &Bed, flags: &str) -> (serde_json::Value, serde_json::Value) {
    let rx = cmd(
        Some(&bed.peer_ns),
        &a(&format!("-r {flags} --backend kernel --wait 20")),
    )
    .spawn()
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let tx = cmd(
        None,
        &a(&format!("-s {flags} --backend flowlane --bed {}", bed.name)),
    )
    .spawn()
    .unwrap();
    let (so, _) = wait_bounded(tx, std::time::Duration::from_secs(30), "flowlane sender");
    let (ro, _) = wait_bounded(rx, std::time::Duration::from_secs(30), "kernel receiver");
    (json(&ro), json(&so))
}

/// The bed's addresses of one family: (flowlane's, the peer's).
const V4: (&str, &str) = (state::LOCAL_V4, state::PEER_V4);
const V6: (&str, &str) = (state::LOCAL_V6, state::PEER_V6);

/// A flowlane receiver on `bed` against a kernel sender, over the bed's
/// addresses `(local, peer)` of one family: only the window's bytes make
/// the throughput, the workers' CPU is measured; then a flowlane sender
/// (active opens from RSS-steered ports) to a kernel receiver. Returns
/// the ports of the second run, for more runs on the bed.
fn flowlane_both_ways(bed: &Bed, (local, peer): (&str, &str)) -> (u16, u16) {
    let (ro, so) = pair(
        None,
        Some(&bed.peer_ns),
        &format!("-m 2,*,{local} -W 1 -t 2 -C 0.5 -j --wait 20"),
        &format!("--backend flowlane --bed {}", bed.name),
        "--backend kernel -l 2",
    );
    let (r, s) = (json(&ro), json(&so));
    assert_eq!(r["params"]["backend"], "flowlane");
    assert_eq!(s["params"]["backend"], "kernel");
    assert_eq!(r["iface"], "xsk0");
    assert_eq!(r["address"], local);
    assert_eq!(r["connections"], 4);

    // Bytes by phase: the warm-up and cool-down carried data, and only the
    // window's bytes make the throughput.
    let measured = f(&r, "/bytes/measured");
    let window = f(&r, "/window_s");
    assert!((1.9..2.3).contains(&window), "window {window}");
    assert!(f(&r, "/bytes/warmup") > 0.0, "{}", r["bytes"]);
    assert!(f(&r, "/bytes/cooldown") > 0.0, "{}", r["bytes"]);
    // Over the window the bytes were counted in (-t 2).
    let mbit = f(&r, "/throughput_mbit_s");
    assert!(
        (mbit - measured * 8.0 / 2.0 / 1e6).abs() < 1e-6 * mbit.max(1.0),
        "{mbit} Mbit/s vs {measured} bytes in 2 s"
    );
    // Sane throughput on a veth pair of a 2-vCPU machine, and the same
    // window seen from both ends (the sender's clock starts half an RTT later,
    // and up to its socket buffers are in flight at the edges).
    assert!((100.0..100_000.0).contains(&mbit), "{mbit} Mbit/s");
    let sent = f(&s, "/bytes/measured");
    assert!(
        (measured - sent).abs() / sent < 0.1,
        "received {measured} vs sent {sent} in the window"
    );
    // A 1 s warm-up at the same rate is about half the 2 s window.
    let warm = f(&r, "/bytes/warmup");
    assert!(warm < measured, "warm-up {warm} vs window {measured}");

    // The workers' CPU is measured and labelled.
    let d = &r["cpu_data_threads"];
    assert_eq!(d["threads"], 2, "{d}");
    assert!(
        d["label"].as_str().unwrap().contains("flowlane workers"),
        "{d}"
    );
    assert!(f(&r, "/cpu_data_threads/pct_of_one_cpu") > 1.0, "{d}");
    assert!(f(&r, "/cycles_per_byte_data_threads") > 0.0);

    // Other way round: flowlane sender (active opens from RSS-steered ports,
    // 2 per worker) to a kernel receiver in the peer namespace.
    let (ctl, data) = ports();
    let (r, s) = flowlane_sends_to_kernel(
        bed,
        &format!("-m 2,*,{peer} -l 2 -W 0.5 -t 1 -C 0.3 -j --control-port {ctl} -p {data}"),
    );
    assert_eq!(s["params"]["backend"], "flowlane");
    assert_eq!(s["iface"], "xsk0");
    assert_eq!(s["address"], peer);
    assert_eq!(s["connections"], 4);
    let (got, sent) = (f(&r, "/bytes/measured"), f(&s, "/bytes/measured"));
    assert!(
        sent > 0.0 && (got - sent).abs() / sent < 0.1,
        "received {got} vs sent {sent}"
    );
    assert_eq!(s["cpu_data_threads"]["threads"], 2);
    (ctl, data)
}

#[test]
fn flowlane_receiver_counts_only_the_window() {
    if !require_root("flowlane_receiver_counts_only_the_window") {
        return;
    }
    let bed = Bed::up("tfl", 2);
    let (ctl, data) = flowlane_both_ways(&bed, V4);

    // A flowlane sender in latency mode: ping-pong on one connection per
    // worker, the kernel echoing.
    let (_, s) = flowlane_sends_to_kernel(
        &bed,
        &format!(
            "-m 2,*,10.99.0.2 -W 0.5 -t 1 -C 0.3 -j --control-port {ctl} -p {data} --latency --msg-size 512"
        ),
    );
    let l = &s["latency"];
    assert!(l["round_trips"].as_u64().unwrap() > 50, "{l}");
    assert!(l["rtt_p50_us"].as_f64().unwrap() > 0.0, "{l}");
    // flowlane's retransmits are its own TCP's (the kernel never sees its
    // segments).
    assert!(s["tcp_retrans_segs_data_path"].is_u64(), "{s}");
    assert!(s["tcp_out_segs_data_path"].as_u64().unwrap() > 50, "{s}");

    // Four threads on two queues: two ping-pongs per worker.
    let (r, s) = flowlane_sends_to_kernel(
        &bed,
        &format!(
            "-m 4,*,10.99.0.2 -W 0.5 -t 1 -C 0.3 -j --control-port {ctl} -p {data} --latency --msg-size 512"
        ),
    );
    assert_eq!(s["connections"], 4);
    // Its data threads are the workers, one per queue, whatever -m said.
    assert_eq!(s["threads"], 2, "{s}");
    assert_eq!(s["thread_cpus"].as_array().unwrap().len(), 2, "{s}");
    assert!(s["latency"]["round_trips"].as_u64().unwrap() > 50, "{s}");
    assert!(f(&r, "/bytes/measured") > 0.0);

    // Overlap on application threads (both ends in queue-pair mode: the
    // flags are shared): the reply comes during a compute far longer than
    // the round trip.
    let (_, s) = flowlane_sends_to_kernel(
        &bed,
        &format!(
            "-m 2,*,10.99.0.2 -W 0.5 -t 1 -C 0.3 -j --control-port {ctl} -p {data} --overlap-us 2000 --msg-size 1k --mode queue-pair"
        ),
    );
    let o = &s["overlap"];
    assert!(o["iterations"].as_u64().unwrap() > 50, "{o}");
    assert!(
        o["reply_complete_at_compute_end_pct"].as_f64().unwrap() > 50.0,
        "{o}"
    );
}

/// The same both ways over the bed's IPv6 addresses: flowlane's TCP
/// serves IPv6, as receiver and as sender.
#[test]
fn flowlane_receiver_counts_only_the_window_over_ipv6() {
    if !require_root("flowlane_receiver_counts_only_the_window_over_ipv6") {
        return;
    }
    let bed = Bed::up("tfl6", 2);
    flowlane_both_ways(&bed, V6);
}

#[test]
fn flowlane_receiver_stops_when_its_interface_vanishes() {
    if !require_root("flowlane_receiver_stops_when_its_interface_vanishes") {
        return;
    }
    let bed = Bed::up("tvan", 2);
    let (ctl, data) = ports();
    let rx = cmd(
        None,
        &a(&format!(
            "-r -m 2,*,10.99.0.1 -t 2 --wait 30 --control-port {ctl} -p {data} --backend flowlane --bed {}",
            bed.name
        )),
    )
    .spawn()
    .expect("receiver");
    // Let the data path come up, then take the interface away.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let o = std::process::Command::new("ip")
        .args(["-n", &bed.ns, "link", "del", "xsk0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (out, took) = wait_bounded(rx, std::time::Duration::from_secs(10), "receiver");
    assert!(
        took < std::time::Duration::from_secs(5),
        "receiver ran {took:?} after its interface vanished"
    );
    // The data path's counters (one JSON line), then one error line.
    let e = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{e}");
    let last = e.trim().lines().last().unwrap_or_default();
    assert!(last.starts_with("flowlane-ttcp: error: "), "{e}");
    assert!(last.contains("interface xsk0 vanished"), "{e}");
}

#[test]
fn flowlane_receiver_moves_buckets_under_a_storm() {
    if !require_root("flowlane_receiver_moves_buckets_under_a_storm") {
        return;
    }
    let bed = Bed::up("tflr", 2);
    // A move every 20 ms of a random bucket in use, while 8 kernel
    // connections send.
    let (ro, so) = pair(
        None,
        Some(&bed.peer_ns),
        "-m 2,*,10.99.0.1 -W 0.5 -t 2 -C 0.3 -j --wait 20",
        &format!(
            "--backend flowlane --bed {} --rebalance-storm-ms 20 --control-socket none",
            bed.name
        ),
        "--backend kernel -l 4",
    );
    let (r, s) = (json(&ro), json(&so));
    let stderr: Vec<serde_json::Value> = String::from_utf8_lossy(&ro.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let moves: Vec<_> = stderr.iter().filter(|v| v["event"] == "move").collect();
    let done: Vec<_> = moves.iter().filter(|m| m.get("error").is_none()).collect();
    assert!(done.len() >= 10, "{} moves: {moves:?}", done.len());
    assert!(
        done.iter().any(|m| m["connections"].as_u64() > Some(0)),
        "no move carried a connection"
    );
    // Nothing lost: the window's bytes agree at both ends, and no queue
    // reset a connection or failed an import. The one reset allowed is
    // the answer to a stray ACK after a close, as Linux's (an ACK to a
    // listener, RFC 9293 §3.10.7.2): on a loaded host the ACK of our FIN
    // can come after its retransmission timeout, and the peer, in
    // TIME-WAIT, acknowledges the FIN sent again once more, after the
    // first ACK ended the connection. Each such ACK answers a
    // retransmission of ours. A connection lost in a move would draw
    // resets of the same kind, for its data, many.
    let (got, sent) = (f(&r, "/bytes/measured"), f(&s, "/bytes/measured"));
    assert!(
        sent > 0.0 && (got - sent).abs() / sent < 0.1,
        "received {got} vs sent {sent}"
    );
    let summary = stderr
        .iter()
        .find(|v| v["queues"].is_array())
        .expect("the data path's summary line");
    let queues = summary["queues"].as_array().unwrap();
    let sum = |counter: &str| -> u64 {
        queues
            .iter()
            .map(|q| q["tcp"][counter].as_u64().unwrap())
            .sum()
    };
    // (A connection's retransmission and its stray ACK's reset may be
    // counted on two queues: its bucket moved on after it closed.)
    let stray = sum("resets_listener_ack");
    assert_eq!(sum("resets_out"), stray, "{summary}");
    assert!(stray <= sum("retransmits"), "{summary}");
    assert_eq!(sum("import_failed"), 0, "{summary}");
    let moved_out = sum("buckets_out");
    assert_eq!(moved_out, done.len() as u64, "{summary}");
    // --rebalance is the receiver's.
    let o = cmd(
        None,
        &a("-s -m 1,*,10.99.0.1 -t 1 --backend kernel --rebalance auto"),
    )
    .output()
    .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("--rebalance goes with a --backend flowlane receiver"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A flowlane receiver stopped by SIGTERM (as `flowlane testbed down`
/// stops a bed's users) ends the normal way: its control socket removed,
/// its `dataplane` summary printed and marked interrupted, one error line,
/// exit status 1 (not killed by the signal).
#[test]
fn a_flowlane_receiver_stopped_by_sigterm_cleans_up() {
    if !require_root("a_flowlane_receiver_stopped_by_sigterm_cleans_up") {
        return;
    }
    let bed = Bed::up("tfls", 2);
    let (ctl, data) = ports();
    let sock = std::env::temp_dir().join(format!("ttcp-sigterm-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let rx = cmd(
        None,
        &a(&format!(
            "-r -m 1,*,10.99.0.1 -j --wait 60 --control-port {ctl} -p {data} --backend flowlane \
             --bed {} --control-socket {} --daemon-socket none",
            bed.name,
            sock.display()
        )),
    )
    .spawn()
    .unwrap();
    let t = std::time::Instant::now();
    while !sock.exists() && t.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(sock.exists(), "the receiver made no control socket");
    flowlane_testbed::child::terminate(&rx);
    let (o, _) = wait_bounded(rx, std::time::Duration::from_secs(20), "receiver");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!sock.exists(), "the control socket was left: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("flowlane-ttcp: error: interrupted by a signal"),
        "{err}"
    );
    let summary = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "dataplane")
        .unwrap_or_else(|| panic!("no dataplane summary: {err}"));
    assert_eq!(summary["interrupted"], true, "{summary}");
}

/// The receiver on flowlane's TCP without `--bed`, in the bed's namespace,
/// as root without CAP_BPF (and CAP_SYS_ADMIN, which would stand for it):
/// one line naming the capability, not libbpf's lines and "is this root?".
#[test]
fn a_receiver_without_cap_bpf_is_told_so() {
    if !require_root("a_receiver_without_cap_bpf_is_told_so") {
        return;
    }
    let bed = Bed::up("tcap", 1);
    let (ctl, data) = ports();
    let rx = std::process::Command::new("ip")
        .args(["netns", "exec", &bed.ns])
        .args([
            "setpriv",
            "--inh-caps=-all",
            "--bounding-set=-bpf,-sys_admin",
            bin(),
        ])
        .args(a(&format!(
            "-r -m 1,*,10.99.0.1 -t 1 --control-port {ctl} -p {data} --backend flowlane --nic xsk0"
        )))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("receiver");
    let (o, _) = wait_bounded(rx, std::time::Duration::from_secs(30), "receiver");
    assert_fails(&o, "runs without CAP_BPF");
}
