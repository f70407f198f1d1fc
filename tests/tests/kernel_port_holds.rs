//! A flowlane service holds its ports against the kernel's use, on the
//! bed with the `flowlane` binary: a service on a port a kernel server
//! already listens on is refused in one line, nothing attached; while a
//! service runs, a kernel socket's bind to its port fails, `SO_REUSEADDR`
//! or not (its other protocol stays the kernel's), and once it stopped the
//! port is the kernel's again. (The data path's own tests, on a veth pair:
//! `dataplane/tests/kernel_port_holds.rs`.)

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use flowlane_tests::{flowlane_bin, in_ns, require_root, start_udp_echo, text, xdp_attached, Bed};

/// A kernel server in `ns`, as servers bind (`SO_REUSEADDR`): TCP listening
/// on `port`, or a UDP socket bound to it; stopped when dropped.
struct KernelServer(Child);

impl KernelServer {
    fn start(ns: &str, proto: &str, port: u16) -> KernelServer {
        let script = format!(
            "import socket,time\n\
             t=socket.SOCK_STREAM if '{proto}'=='tcp' else socket.SOCK_DGRAM\n\
             s=socket.socket(socket.AF_INET,t)\n\
             s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             s.bind(('0.0.0.0',{port}))\n\
             t==socket.SOCK_STREAM and s.listen()\n\
             print('ready',flush=True)\n\
             time.sleep(120)\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let server = KernelServer(child);
        assert_eq!(line.trim(), "ready", "the kernel server did not start");
        server
    }
}

impl Drop for KernelServer {
    fn drop(&mut self) {
        flowlane_tests::kill_and_reap(&mut self.0);
    }
}

/// The service's one error line on stderr.
fn refused(o: &std::process::Output, needle: &str) {
    assert!(!o.status.success(), "expected a refusal: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].contains(needle), "{needle:?} in {:?}", lines[0]);
}

#[test]
fn a_service_on_a_port_a_kernel_server_holds_is_refused() {
    if !require_root("a_service_on_a_port_a_kernel_server_holds_is_refused") {
        return;
    }
    let bed = Bed::up("hold", 1);
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    let server = KernelServer::start(&bed.ns, "tcp", 8080);
    let o = in_ns(
        &bed.ns,
        // A service that starts (the port taken from the kernel's
        // server) is stopped by the deadline, and fails the test.
        &[
            "timeout",
            "20",
            bin,
            "echo-server",
            "--iface",
            "xsk0",
            "--port",
            "8080",
        ],
    );
    refused(
        &o,
        &format!(
            "port 8080/tcp is in use by a kernel socket (another server, or connections of one, \
             maybe ended, in TIME-WAIT: `ip netns exec {} ss -tan 'sport = :8080'` lists them): \
             choose another --port or stop it",
            bed.ns
        ),
    );
    assert!(!xdp_attached(&bed.ns, "xsk0"), "nothing left attached");
    // The kernel-socket backend says the same in one line (not a warning
    // per core and "address in use").
    let o = in_ns(
        &bed.ns,
        &[
            "timeout",
            "20",
            bin,
            "echo-server",
            "--iface",
            "xsk0",
            "--backend",
            "kernel",
            "--port",
            "8080",
            "--control-socket",
            "none",
            "--daemon-socket",
            "none",
        ],
    );
    refused(
        &o,
        &format!(
            "port 8080/tcp is in use on 0.0.0.0 by a kernel socket (another server, or connections \
             of one, maybe ended, in TIME-WAIT: `ip netns exec {} ss -tan 'sport = :8080'` lists \
             them): choose another --port or stop it",
            bed.ns
        ),
    );
    drop(server);
    let server = KernelServer::start(&bed.ns, "udp", 5353);
    let o = in_ns(
        &bed.ns,
        &[
            "timeout", "20", bin, "udp-echo", "--iface", "xsk0", "--port", "5353",
        ],
    );
    refused(&o, "port 5353/udp is in use by a kernel socket");
    assert!(!xdp_attached(&bed.ns, "xsk0"), "nothing left attached");
    drop(server);
}

/// What a kernel socket's bind to `port` in `ns` gets: `ok` or the
/// errno's name.
fn kernel_bind(ns: &str, proto: &str, port: u16) -> String {
    let script = format!(
        "import errno,socket\n\
         t=socket.SOCK_STREAM if '{proto}'=='tcp' else socket.SOCK_DGRAM\n\
         s=socket.socket(socket.AF_INET,t)\n\
         s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         try:\n    s.bind(('0.0.0.0',{port}));print('ok')\n\
         except OSError as e:\n    print(errno.errorcode[e.errno])\n"
    );
    let o = in_ns(ns, &["python3", "-c", &script]);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn a_running_service_s_port_is_refused_to_kernel_binds() {
    if !require_root("a_running_service_s_port_is_refused_to_kernel_binds") {
        return;
    }
    let bed = Bed::up("held", 1);
    let (child, report) = start_udp_echo(&bed, 7777);
    struct Reaped(Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            flowlane_tests::kill_and_reap(&mut self.0);
        }
    }
    let mut child = Reaped(child);
    assert_eq!(kernel_bind(&bed.ns, "udp", 7777), "EADDRINUSE");
    assert_eq!(
        kernel_bind(&bed.ns, "tcp", 7777),
        "ok",
        "TCP is not claimed"
    );
    let st = flowlane_tests::stop(&mut child.0, std::time::Duration::from_secs(5));
    assert!(
        st.is_some_and(|s| s.success()),
        "udp-echo on SIGTERM: {st:?}"
    );
    assert_eq!(kernel_bind(&bed.ns, "udp", 7777), "ok", "released");
    let _ = std::fs::remove_file(report);
}
