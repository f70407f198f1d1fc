//! Changes to a served interface under a running AF_XDP service that it
//! cannot serve through: the service ends within seconds with one line
//! saying what changed and what to do, and lets go of the interface,
//! instead of serving on while frames are lost. (The interface, its
//! namespace or the XDP program vanishing: `bed_ownership.rs`; its MTU
//! lowered: `tcp_link_mtu.rs`.)

use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_tests::{flowlane_bin, in_ns, require_root, text, wait_bounded, xdp_attached};

/// A network namespace of the test's own with a veth pair `va`/`vb` of 4
/// receive queues at most and 2 in use (a test bed's veth has no spare
/// channels); deleted with its devices on drop. Named as flowlane-testbed's
/// scratch namespaces (`flt-<tag>-<pid>-<n>`), which the harness sweeps up
/// should a test process die before its drop.
struct Scratch {
    ns: String,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let ns = format!("flt-{tag}-{}-0", std::process::id());
        let s = Scratch { ns };
        s.run(&["ip", "netns", "add", &s.ns], false);
        let ip = |args: &[&str]| s.run(&[&["ip", "-n", s.ns.as_str()][..], args].concat(), false);
        let four = ["numrxqueues", "4", "numtxqueues", "4"];
        ip(&[
            &["link", "add", "va"][..],
            &four,
            &["type", "veth", "peer", "name", "vb"],
            &four,
        ]
        .concat());
        for dev in ["va", "vb"] {
            ip(&["link", "set", "dev", dev, "addrgenmode", "none"]);
            ip(&["link", "set", "dev", dev, "up"]);
        }
        ip(&["addr", "add", "10.83.0.1/24", "dev", "va"]);
        s.channels(2);
        s
    }

    /// Sets both ends' channels to `n` receive and transmit queues.
    fn channels(&self, n: u32) {
        let n = n.to_string();
        for dev in ["va", "vb"] {
            self.run(&["ethtool", "-L", dev, "rx", &n, "tx", &n], true);
        }
    }

    fn run(&self, cmd: &[&str], inside: bool) {
        let o = if inside {
            in_ns(&self.ns, cmd)
        } else {
            Command::new(cmd[0]).args(&cmd[1..]).output().expect(cmd[0])
        };
        assert!(o.status.success(), "{cmd:?}: {}", text(&o));
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

#[test]
fn more_receive_queues_end_the_service_with_one_line() {
    if !require_root("more_receive_queues_end_the_service_with_one_line") {
        return;
    }
    let net = Scratch::new("chan");
    // Bounded: a service that (wrongly) serves on is killed, and fails the
    // test as a hang.
    let child = Command::new("ip")
        .args(["netns", "exec", &net.ns])
        .arg(flowlane_bin())
        .args(["echo-server", "--iface", "va", "--port", "7"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting echo-server");
    // The program attached: the service is up (it serves both queues).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !xdp_attached(&net.ns, "va") {
        assert!(
            std::time::Instant::now() < deadline,
            "echo-server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    net.channels(4);
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
