//! A served interface, outside a test bed, that the AF_XDP service cannot
//! serve through as it is: one that gets more receive queues under the
//! running service (the service ends within seconds with one line saying
//! what changed and what to do, and lets go of the interface, instead of
//! serving on while frames are lost), and a veth whose local sender
//! leaves its checksums unfinished (one warning line, instead of a
//! service that looks up while every segment is dropped); and changes it
//! serves on through, said once as they happen: the interface down and up
//! again, flowlane's address removed; and the interface renamed, which
//! ends the service with its new name. (The interface,
//! its namespace or the XDP program vanishing: `bed_ownership.rs`; its
//! MTU lowered: `tcp_link_mtu.rs`.)

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowlane_tests::{
    flowlane_bin, in_ns, kill_and_reap, require_root, terminate, text, wait_within, xdp_attached,
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

    /// `flowlane echo-server` on `va` (port 7), once it serves (its line
    /// saying so on stderr, which goes to a file of the namespace's name).
    fn echo_server(&self) -> Service {
        let log = std::env::temp_dir().join(format!("{}.err", self.ns));
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(flowlane_bin())
            .args(["echo-server", "--iface", "va", "--port", "7"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the service's log"))
            .spawn()
            .expect("starting echo-server");
        let mut service = Service { child, log };
        let said = service.said_within("flowlane: TCP on 2 queues of va");
        if !said.contains("flowlane: TCP on") {
            kill_and_reap(&mut service.child);
            panic!("echo-server did not start: {said}");
        }
        service
    }
}

/// A running `echo-server` and the file its stderr goes to (removed on
/// drop, the service killed should it still run).
struct Service {
    child: Child,
    log: std::path::PathBuf,
}

impl Service {
    /// Waits (at most 10 s) until its stderr holds `line`; the stderr then.
    fn said_within(&self, line: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = std::fs::read_to_string(&self.log).unwrap_or_default();
            if said.contains(line) || Instant::now() > deadline {
                return said;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (at most 10 s) for it to end by itself: its exit code and
    /// its one error line (asserted to be one). A service that serves on
    /// is killed, and fails the test as a hang.
    fn ended(mut self) -> (Option<i32>, String) {
        let Some(status) = wait_within(&mut self.child, Duration::from_secs(10)) else {
            kill_and_reap(&mut self.child);
            panic!("still serving: {}", self.said_within(""));
        };
        let said = self.said_within("");
        let errors: Vec<&str> = said.lines().filter(|l| l.contains("error:")).collect();
        assert_eq!(errors.len(), 1, "{said}");
        (status.code(), errors[0].to_string())
    }

    /// SIGTERM: whether it then exited 0 (within 10 s), and its stderr.
    fn stop(mut self) -> (bool, String) {
        terminate(&self.child);
        let status = wait_within(&mut self.child, Duration::from_secs(10));
        (status.is_some_and(|s| s.success()), self.said_within(""))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
        let _ = std::fs::remove_file(&self.log);
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
    let service = net.echo_server();
    net.channels(4);
    let (code, error) = service.ended();
    assert_eq!(code, Some(1), "{error}");
    assert!(
        error.contains("va has 4 receive queues now, 2 when the service started")
            && error.contains("restart the service"),
        "{error}"
    );
    assert!(!xdp_attached(&net.ns, "va"), "the program stayed: {error}");
}

/// Renamed under the service: the line says the new name, not that the
/// interface vanished.
#[test]
fn a_renamed_interface_is_named_as_it_is_now() {
    if !require_root("a_renamed_interface_is_named_as_it_is_now") {
        return;
    }
    let net = Scratch::new("ren");
    let service = net.echo_server();
    run(&[
        "ip", "-n", &net.ns, "link", "set", "dev", "va", "name", "vc",
    ]);
    let (code, error) = service.ended();
    assert_eq!(code, Some(1), "{error}");
    assert!(
        error.contains("interface va was renamed vc; restart the service on vc"),
        "{error}"
    );
    assert!(!xdp_attached(&net.ns, "vc"), "the program stayed: {error}");
}

#[test]
fn a_veth_sender_s_unfinished_checksums_are_said_once() {
    if !require_root("a_veth_sender_s_unfinished_checksums_are_said_once") {
        return;
    }
    let net = Scratch::new("csum");
    let service = net.echo_server();
    // Four connects at once from the kernel on vb (offload on): their SYNs
    // reach flowlane with the checksum unfinished, and are dropped.
    let connects = "import socket, time\n\
        k = [socket.socket() for _ in range(4)]\n\
        for s in k: s.setblocking(False); s.connect_ex(('10.83.0.1', 7))\n\
        time.sleep(3)\n";
    let o = in_ns(&net.peer_ns, &["timeout", "10", "python3", "-c", connects]);
    assert!(o.status.success(), "{}", text(&o));
    service.said_within("va: every TCP segment received lately");
    let (stopped, said) = service.stop();
    assert!(
        said.contains("va: every TCP segment received lately"),
        "no warning: {said}"
    );
    assert!(said.contains("ethtool -K PEER tx off"), "{said}");
    assert_eq!(said.matches("failed its checksum").count(), 1, "{said}");
    assert!(stopped, "{said}");
}

#[test]
fn the_interface_down_and_its_address_removed_are_said_once_each() {
    if !require_root("the_interface_down_and_its_address_removed_are_said_once_each") {
        return;
    }
    let net = Scratch::new("down");
    let ip = |args: &[&str]| run(&[&["ip", "-n", net.ns.as_str()][..], args].concat());
    // An IPv6 address beside the IPv4 one: the service claims both, and
    // the removal of either is said (of the IPv6 one it said nothing).
    // (kept while va is down, which would remove it otherwise: one
    // removal said, the one asked for).
    let keep = "net.ipv6.conf.va.keep_addr_on_down=1";
    run(&["ip", "netns", "exec", &net.ns, "sysctl", "-qw", keep]);
    ip(&["addr", "add", "fd83::1/64", "dev", "va", "nodad"]);
    let service = net.echo_server();
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
        (
            &["addr", "del", "fd83::1/64", "dev", "va"],
            "fd83::1 is no longer an address of va: the service still answers on it",
        ),
        (
            &["addr", "add", "fd83::1/64", "dev", "va", "nodad"],
            "fd83::1 is an address of va again",
        ),
    ];
    for (args, line) in steps {
        ip(args);
        if !service.said_within(line).contains(line) {
            break;
        }
    }
    let (stopped, said) = service.stop();
    for (_, line) in steps {
        assert_eq!(said.matches(line).count(), 1, "{line:?} once in: {said}");
    }
    assert!(stopped, "{said}");
}
