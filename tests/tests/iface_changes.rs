//! A served interface, outside a test bed, that the AF_XDP service cannot
//! serve through as it is: one that gets more receive queues under the
//! running service (the service ends within seconds with one line saying
//! what changed and what to do, and lets go of the interface, instead of
//! serving on while frames are lost), and a veth whose local sender
//! leaves its checksums unfinished (one warning line, instead of a
//! service that looks up while every segment is dropped); and changes it
//! serves on through, said once as they happen: the interface down and up
//! again, flowlane's address removed. (The interface,
//! its namespace or the XDP program vanishing: `bed_ownership.rs`; its
//! MTU lowered: `tcp_link_mtu.rs`.)

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowlane_tests::{
    flowlane_bin, in_ns, kill_and_reap, require_root, terminate, text, wait_bounded, wait_within,
    xdp_attached,
};

/// Two network namespaces of the test's own, `va` (10.83.0.1, flowlane's)
/// in the first and its veth peer `vb` (10.83.0.2, the kernel's) in the
/// second, each end of 4 receive queues at most and 2 in use (a test bed's
/// veth has no spare channels), `vb`'s checksum offload as the kernel
/// makes it (on: a test bed turns it off); deleted with their devices on
/// drop. Named as flowlane-testbed's scratch namespaces
/// (`flt-<tag>-<pid>-<n>`), which the harness sweeps up should a test
/// process die before its drop.
struct Scratch {
    ns: String,
    peer_ns: String,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let pid = std::process::id();
        let s = Scratch {
            ns: format!("flt-{tag}-{pid}-0"),
            peer_ns: format!("flt-{tag}-{pid}-1"),
        };
        for ns in [&s.ns, &s.peer_ns] {
            run(&["ip", "netns", "add", ns]);
        }
        let four = ["numrxqueues", "4", "numtxqueues", "4"];
        let (ns, peer) = (s.ns.as_str(), s.peer_ns.as_str());
        run(&[
            &["ip", "-n", ns, "link", "add", "va"][..],
            &four,
            &["type", "veth", "peer", "name", "vb", "netns", peer],
            &four,
        ]
        .concat());
        for (ns, dev, addr) in [(ns, "va", "10.83.0.1/24"), (peer, "vb", "10.83.0.2/24")] {
            run(&[
                "ip",
                "-n",
                ns,
                "link",
                "set",
                "dev",
                dev,
                "addrgenmode",
                "none",
            ]);
            run(&["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
            run(&["ip", "-n", ns, "link", "set", "dev", dev, "up"]);
        }
        s.channels(2);
        s
    }

    /// Sets both ends' channels to `n` receive and transmit queues.
    fn channels(&self, n: u32) {
        let n = n.to_string();
        for (ns, dev) in [(&self.ns, "va"), (&self.peer_ns, "vb")] {
            let o = in_ns(ns, &["ethtool", "-L", dev, "rx", &n, "tx", &n]);
            assert!(o.status.success(), "{}", text(&o));
        }
    }

    /// `flowlane echo-server` on `va` (port 7), its stderr in `err`, once
    /// its program is attached.
    fn echo_server(&self, err: Stdio) -> Child {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(flowlane_bin())
            .args(["echo-server", "--iface", "va", "--port", "7"])
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("starting echo-server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !xdp_attached(&self.ns, "va") {
            if Instant::now() > deadline {
                kill_and_reap(&mut child);
                panic!("echo-server did not start");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its queues' sockets are bound just after.
        std::thread::sleep(Duration::from_millis(500));
        child
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for ns in [&self.ns, &self.peer_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn run(cmd: &[&str]) {
    let o = Command::new(cmd[0]).args(&cmd[1..]).output().expect(cmd[0]);
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
}

#[test]
fn more_receive_queues_end_the_service_with_one_line() {
    if !require_root("more_receive_queues_end_the_service_with_one_line") {
        return;
    }
    let net = Scratch::new("chan");
    let child = net.echo_server(Stdio::piped());
    net.channels(4);
    // Bounded: a service that (wrongly) serves on is killed, and fails the
    // test as a hang.
    let (o, _) = wait_bounded(child, Duration::from_secs(10), "echo-server");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains("va has 4 receive queues now, 2 when the service started")
            && said[0].contains("restart the service"),
        "{err}"
    );
    assert!(!xdp_attached(&net.ns, "va"), "the program stayed: {err}");
}

#[test]
fn a_veth_sender_s_unfinished_checksums_are_said_once() {
    if !require_root("a_veth_sender_s_unfinished_checksums_are_said_once") {
        return;
    }
    let net = Scratch::new("csum");
    let log = std::env::temp_dir().join(format!("{}.err", net.ns));
    let mut child = net.echo_server(std::fs::File::create(&log).unwrap().into());
    // Four connects at once from the kernel on vb (offload on): their SYNs
    // reach flowlane with the checksum unfinished, and are dropped.
    let connects = "import socket, time\n\
        k = [socket.socket() for _ in range(4)]\n\
        for s in k: s.setblocking(False); s.connect_ex(('10.83.0.1', 7))\n\
        time.sleep(3)\n";
    let o = in_ns(&net.peer_ns, &["timeout", "10", "python3", "-c", connects]);
    assert!(o.status.success(), "{}", text(&o));
    let warned = |t: &str| t.contains("va: every TCP segment received lately");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut said = std::fs::read_to_string(&log).unwrap_or_default();
    while !warned(&said) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        said = std::fs::read_to_string(&log).unwrap_or_default();
    }
    terminate(&child);
    let status = wait_within(&mut child, Duration::from_secs(10));
    if status.is_none() {
        kill_and_reap(&mut child);
    }
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(warned(&said), "no warning: {said}");
    assert!(said.contains("ethtool -K PEER tx off"), "{said}");
    assert_eq!(said.matches("failed its checksum").count(), 1, "{said}");
    assert!(status.is_some_and(|s| s.success()), "{said}");
}

/// Waits (at most 10 s) until the service's stderr, written to `log`,
/// holds `line`; the stderr then.
fn said_within(log: &std::path::Path, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let said = std::fs::read_to_string(log).unwrap_or_default();
        if said.contains(line) || Instant::now() > deadline {
            return said;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_interface_down_and_its_address_removed_are_said_once_each() {
    if !require_root("the_interface_down_and_its_address_removed_are_said_once_each") {
        return;
    }
    let net = Scratch::new("down");
    let log = std::env::temp_dir().join(format!("{}.err", net.ns));
    let mut child = net.echo_server(std::fs::File::create(&log).unwrap().into());
    let ip = |args: &[&str]| run(&[&["ip", "-n", net.ns.as_str()][..], args].concat());
    let steps = [
        (
            &["link", "set", "dev", "va", "down"][..],
            "va is down: nothing reaches the service",
        ),
        (&["link", "set", "dev", "va", "up"], "va is up again"),
        (
            &["addr", "del", "10.83.0.1/24", "dev", "va"],
            "10.83.0.1 is no longer an address of va: the service still answers on it",
        ),
        (
            &["addr", "add", "10.83.0.1/24", "dev", "va"],
            "10.83.0.1 is an address of va again",
        ),
    ];
    let mut said = String::new();
    for (args, line) in steps {
        ip(args);
        said = said_within(&log, line);
        if !said.contains(line) {
            break;
        }
    }
    terminate(&child);
    let status = wait_within(&mut child, Duration::from_secs(10));
    if status.is_none() {
        kill_and_reap(&mut child);
    }
    let _ = std::fs::remove_file(&log);
    for (_, line) in steps {
        assert_eq!(said.matches(line).count(), 1, "{line:?} once in: {said}");
    }
    assert!(status.is_some_and(|s| s.success()), "{said}");
}
