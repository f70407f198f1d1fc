//! The XDP steering program's counters reach operators: `udp-echo`'s
//! report and `udp-ping`'s result carry them per receive queue (a
//! fragmented datagram's first fragment dropped and counted, whole
//! datagrams redirected). The TCP services' control sockets and the
//! daemon's page carry them too (`flowlane_steering_*`: unit tests in
//! `dataplane` and `daemon`, the page's panels in `daemon_metrics.rs`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowlane_tests::{flowlane, in_ns, require_root, start_udp_echo, text, Bed};
use serde_json::Value;

/// Sends, from the peer's namespace, one datagram of `len` bytes to
/// 10.99.0.1:`port`, fragmented by the kernel where it is longer than the
/// link's MTU (no DF).
fn send(bed: &Bed, port: u16, len: usize) {
    let script = format!(
        "import socket\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.IPPROTO_IP,10,0)  # IP_MTU_DISCOVER: IP_PMTUDISC_DONT\n\
         s.sendto(b'x'*{len},('10.99.0.1',{port}))\n"
    );
    let o = in_ns(&bed.peer_ns, &["python3", "-c", &script]);
    assert!(o.status.success(), "{}", text(&o));
}

/// The sum of `field` over the queues of a `steering` array.
fn sum(steering: &Value, field: &str) -> u64 {
    steering
        .as_array()
        .unwrap_or_else(|| panic!("no steering counters: {steering}"))
        .iter()
        .map(|q| q[field].as_u64().unwrap())
        .sum()
}

fn signal(child: &Child, sig: &str) {
    let o = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .output()
        .unwrap();
    assert!(o.status.success());
}

/// Stopped and reaped however the test ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        flowlane_tests::kill_and_reap(&mut self.0);
    }
}

#[test]
fn udp_echo_reports_the_steering_program_s_counters() {
    if !require_root("udp_echo_reports_the_steering_program_s_counters") {
        return;
    }
    let bed = Bed::up("stc", 2);
    let (child, report) = start_udp_echo(&bed, 7777);
    let child = Reaped(child);
    // Two fragments (a 1500-byte link): the first dropped, the later one
    // the kernel's. Then a whole datagram, echoed.
    send(&bed, 7777, 2000);
    send(&bed, 7777, 100);
    let deadline = Instant::now() + Duration::from_secs(10);
    let steering = loop {
        signal(&child.0, "-USR1");
        std::thread::sleep(Duration::from_millis(200));
        let v: Option<Value> = std::fs::read(&report)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(v) = v.filter(|v| v["generation"].as_u64() >= Some(1)) {
            let s = v["steering"].clone();
            if sum(&s, "fragment_dropped") >= 1 && sum(&s, "redirected") >= 1 {
                break s;
            }
            assert!(Instant::now() < deadline, "steering counters: {s}");
        }
        assert!(Instant::now() < deadline, "no report after SIGUSR1");
    };
    let queues: Vec<u64> = steering
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue"].as_u64().unwrap())
        .collect();
    assert_eq!(queues, [0, 1], "every receive queue: {steering}");
    assert_eq!(sum(&steering, "fragment_dropped"), 1, "{steering}");
    assert_eq!(sum(&steering, "redirected"), 1, "{steering}");
    assert_eq!(sum(&steering, "no_socket"), 0, "{steering}");
    assert!(
        sum(&steering, "passed") >= 1,
        "the later fragment: {steering}"
    );
    drop(child);
    let _ = std::fs::remove_file(report);
}

#[test]
fn udp_ping_reports_the_steering_program_s_counters() {
    if !require_root("udp_ping_reports_the_steering_program_s_counters") {
        return;
    }
    let bed = Bed::up("stp", 2);
    let mut server = Command::new("ip")
        .args(["netns", "exec", &bed.peer_ns, "python3", "-c"])
        .arg(
            "import socket\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.bind(('10.99.0.2',9000))\n\
             print('ready',flush=True)\n\
             while True:\n    d,a=s.recvfrom(4096); s.sendto(d,a)\n",
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _server = Reaped(server);
    assert_eq!(line.trim(), "ready");
    let o = flowlane(&[
        "udp-ping",
        "--bed",
        &bed.name,
        "--queue",
        "1",
        "--dst",
        "10.99.0.2:9000",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let steering = &r["steering"];
    assert_eq!(steering.as_array().map(Vec::len), Some(2), "{r}");
    assert!(
        steering[1]["redirected"].as_u64() >= Some(1),
        "the reply, on the sending queue: {r}"
    );
    assert_eq!(sum(steering, "no_socket"), 0, "{r}");
}
