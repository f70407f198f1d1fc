//! The AF_XDP data path on the test bed, with the Linux kernel as the peer:
//! UDP flows echoed byte-exact, each on the queue the software Toeplitz hash
//! predicts, flows that move when the indirection table changes, the kernel
//! exception path (ping) while flowlane runs, no echo loop from a datagram
//! sent from the service's own port, and no XDP program left behind after
//! SIGKILL.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use flowlane_numa_sched::toeplitz::{FlowTuple, Protocol, RssKey, Toeplitz};
use flowlane_tests::{
    flowlane, in_ns, require_root, start_udp_echo, text, unique_name, xdp_attached, Bed,
};

#[test]
fn demo_flows_echo_on_the_predicted_queue_and_move_with_the_table() {
    if !require_root("demo_flows_echo_on_the_predicted_queue_and_move_with_the_table") {
        return;
    }
    let name = unique_name("demo");
    let o = flowlane(&[
        "demo", "--bed", &name, "--queues", "4", "--flows", "64", "--json",
    ]);
    assert!(o.status.success(), "demo failed: {}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("demo JSON");
    assert_eq!(v["all_ok"], true);

    // Recompute every prediction here, independently of the demo's own.
    let key = RssKey::new(
        v["key"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let t = Toeplitz::new(&key);
    let local = v["local_addr"].as_str().unwrap().parse().unwrap();
    let peer = v["peer_addr"].as_str().unwrap().parse().unwrap();
    let port = v["port"].as_u64().unwrap() as u16;
    let phases = v["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2);
    let mut per_phase_queue = Vec::new();
    for phase in phases {
        let table: Vec<u64> = phase["table"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q.as_u64().unwrap())
            .collect();
        let flows = phase["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 64);
        let mut queues = Vec::new();
        for f in flows {
            let sport = f["src_port"].as_u64().unwrap() as u16;
            let flow = FlowTuple {
                src: peer,
                dst: local,
                src_port: sport,
                dst_port: port,
                protocol: Protocol::Udp,
            };
            let h = t.hash(flow.hash_input(true).as_bytes());
            let q = table[h as usize % table.len()];
            assert_eq!(f["observed"], serde_json::json!([q]), "flow {sport}: {f}");
            assert_eq!(
                f["echoed_ok"], f["sent"],
                "flow {sport} lost or corrupted datagrams"
            );
            queues.push(q);
        }
        per_phase_queue.push(queues);
    }
    // Every bucket was rotated, so every flow moved.
    for (a, b) in per_phase_queue[0].iter().zip(&per_phase_queue[1]) {
        assert_eq!(*b, (a + 1) % 4);
    }
    // 64 flows over 4 queues: every queue got some.
    for q in 0..4 {
        assert!(per_phase_queue[0].contains(&q), "queue {q} got no flow");
    }
}

#[test]
fn kernel_keeps_ping_and_other_ports_while_flowlane_runs() {
    if !require_root("kernel_keeps_ping_and_other_ports_while_flowlane_runs") {
        return;
    }
    let bed = Bed::up("ping", 4);
    let (mut child, report) = start_udp_echo(&bed, 7777);
    assert!(xdp_attached(&bed.ns, "xsk0"));
    let o = in_ns(
        &bed.peer_ns,
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.99.0.1"],
    );
    assert!(
        o.status.success(),
        "ping through the kernel exception path: {}",
        text(&o)
    );
    // A kernel UDP service on another port of the same address still works.
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "python3", "-c"])
        .arg("import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('10.99.0.1',9999));d,a=s.recvfrom(100);s.sendto(d.upper(),a)")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let reply = kernel_udp(&bed.peer_ns, 9999, "b'kernel'", "r.decode()");
    let _ = srv.kill();
    let _ = srv.wait();
    assert_eq!(reply, "KERNEL");
    // And flowlane's port answers a kernel client (python) byte-exact.
    assert_eq!(
        kernel_udp(&bed.peer_ns, 7777, "bytes(range(256))*4", "r==m"),
        "True"
    );
    // One datagram from the service's own port, as another echo service
    // would send (or a spoofed `B:7777 -> A:7777` make it send): answered,
    // the two would pass it back and forth without end. No echo, and the
    // report names the reason.
    let o = in_ns(
        &bed.peer_ns,
        &[
            "python3",
            "-c",
            "import socket\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.bind(('10.99.0.2',7777))\n\
             s.settimeout(1)\n\
             s.sendto(b'loop',('10.99.0.1',7777))\n\
             try:\n    s.recv(100);print('echoed')\n\
             except socket.timeout:\n    print('none')",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "none",
        "a datagram from port 7777: {}",
        text(&o)
    );
    let refused = refused_after_report(&child, &report);
    assert_eq!(
        refused,
        serde_json::json!({
            "group_destination": 0,
            "martian_source": 0,
            "source_port_zero": 0,
            "loop_source": 1,
            "unsupported": 0
        }),
        "the report's refusals"
    );
    signal(&child, "-TERM");
    let st = child.wait().unwrap();
    assert!(st.success(), "udp-echo exit on SIGTERM: {st}");
    assert!(
        !xdp_attached(&bed.ns, "xsk0"),
        "XDP left attached after SIGTERM"
    );
    let _ = std::fs::remove_file(report);
}

/// Sends `send` (a Python bytes expression) from a kernel UDP socket in
/// namespace `ns` to 10.99.0.1:`port` and returns `show` (a Python
/// expression over the sent `m` and the reply `r`) as printed.
fn kernel_udp(ns: &str, port: u16, send: &str, show: &str) -> String {
    let script = format!(
        "import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(3);\
         m={send};s.sendto(m,('10.99.0.1',{port}));r=s.recv(4096);print({show})"
    );
    let o = in_ns(ns, &["python3", "-c", &script]);
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if out.is_empty() {
        eprintln!("kernel UDP client: {}", text(&o));
    }
    out
}

/// Asks `child` (udp-echo) for a report (SIGUSR1) and returns its
/// `refused` counters once a report newer than the first is there.
fn refused_after_report(child: &Child, report: &std::path::Path) -> serde_json::Value {
    signal(child, "-USR1");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v: Option<serde_json::Value> = std::fs::read(report)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(v) = v.filter(|v| v["generation"].as_u64() >= Some(1)) {
            return v["refused"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no report 5 s after SIGUSR1 ({})",
            report.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: &str) {
    let o = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .output()
        .unwrap();
    assert!(o.status.success());
}

#[test]
fn sigkill_leaves_no_xdp_program_and_the_next_run_starts() {
    if !require_root("sigkill_leaves_no_xdp_program_and_the_next_run_starts") {
        return;
    }
    let bed = Bed::up("kill", 2);
    let (mut child, report) = start_udp_echo(&bed, 7777);
    assert!(xdp_attached(&bed.ns, "xsk0"));
    // `ip netns exec` execs flowlane in place, so the child's pid is flowlane's.
    signal(&child, "-KILL");
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    while xdp_attached(&bed.ns, "xsk0") {
        assert!(
            Instant::now() < deadline,
            "XDP still attached 5 s after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut again, report2) = start_udp_echo(&bed, 7777);
    assert_eq!(
        kernel_udp(&bed.peer_ns, 7777, "b'again'", "r.decode()"),
        "again"
    );
    signal(&again, "-TERM");
    assert!(again.wait().unwrap().success());
    let _ = std::fs::remove_file(report);
    let _ = std::fs::remove_file(report2);
}
