//! flowlane's TCP commands on kernel sockets (`--backend kernel`) on `lo`,
//! with no test bed: what a newcomer runs first.
//!
//! - Root is asked for what needs it only: kernel sockets on an interface
//!   of this namespace run as a user without privileges (`nobody`, through
//!   `setpriv`), saying in one line that it has no control socket and
//!   what to do; the AF_XDP backend and `--bed` still say "needs root"; a
//!   port below 1024 fails at the listen (the tokio baseline's too) in one
//!   line naming the port, the permission and the ways out.
//! - `bulk-source` to a receiver that half-closes first (`shutdown(SHUT_WR)`
//!   at accept, then reads to end of stream: `nc -N` with its stdin at end)
//!   is a complete transfer: `ok`, exit 0.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use flowlane_tests::{
    as_nobody, flowlane_bin, kill_and_reap, ready_within, require_root, terminate, text,
    wait_bounded, OpenDir,
};

/// A TCP port of 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `flowlane ARGS` as nobody, to its end (at most 30 s).
fn nobody_runs(args: &[&str]) -> Output {
    let child = as_nobody(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv");
    wait_bounded(child, Duration::from_secs(30), args[0]).0
}

#[test]
fn echo_server_on_kernel_sockets_serves_a_user_without_privileges() {
    let test = "echo_server_on_kernel_sockets_serves_a_user_without_privileges";
    if !require_root(&format!("{test} (needs root to drop to nobody)")) {
        return;
    }
    // A folder nobody may write its report in.
    let dir = OpenDir::new("fl-kunpriv");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let report = dir.path("report.json");
    let port = free_port().to_string();
    let mut child = as_nobody(&[
        "echo-server",
        "--backend",
        "kernel",
        "--iface",
        "lo",
        "--queues",
        "1",
        "--port",
        &port,
        "--report",
        report.to_str().unwrap(),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("setpriv");
    if let Err(st) = ready_within(&mut child, Duration::from_secs(30), || report.exists()) {
        kill_and_reap(&mut child);
        let o = child.wait_with_output().unwrap();
        panic!(
            "echo-server as nobody did not come up ({st:?}): {}",
            text(&o)
        );
    }
    let mut s = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"hello, unprivileged").unwrap();
    let mut back = [0u8; 19];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"hello, unprivileged");
    drop(s);
    terminate(&child);
    let (o, _) = wait_bounded(child, Duration::from_secs(10), "echo-server");
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("needs root"), "{}", text(&o));
    // /run/flowlane is root's: the service serves on without its control
    // socket, and says so in one line with what to do.
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("control socket"))
        .collect();
    assert_eq!(said.len(), 1, "{}", text(&o));
    assert!(
        said[0].contains("Permission denied")
            && said[0].contains("run it as root, or give --control-socket PATH"),
        "{}",
        text(&o)
    );
}

#[test]
fn what_needs_root_still_says_so_to_a_user_without_it() {
    let test = "what_needs_root_still_says_so_to_a_user_without_it";
    if !require_root(&format!("{test} (needs root to drop to nobody)")) {
        return;
    }
    let port = free_port().to_string();
    for args in [
        // The AF_XDP backend, by default and by name.
        &["echo-server", "--iface", "lo", "--port", &port][..],
        &[
            "echo-server",
            "--backend",
            "xdp",
            "--iface",
            "lo",
            "--port",
            &port,
        ],
        // A bed is a network namespace, whatever the backend.
        &["echo-server", "--backend", "kernel", "--bed", "nf53none"],
    ] {
        let o = nobody_runs(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {}", text(&o));
        assert!(
            err.contains("needs root (CAP_NET_ADMIN"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn a_port_below_1024_without_the_capability_fails_at_the_listen() {
    let test = "a_port_below_1024_without_the_capability_fails_at_the_listen";
    if !require_root(&format!("{test} (needs root to drop to nobody)")) {
        return;
    }
    let start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024);
    if start <= 7 {
        eprintln!("skipping {test}: net.ipv4.ip_unprivileged_port_start is {start}, so port 7 needs no privilege here");
        return;
    }
    // flowlane's kernel backend, and the tokio baseline's own listener.
    for server in [
        &["echo-server", "--backend", "kernel"][..],
        &["hyper-server", "--tokio-baseline"],
    ] {
        let mut args = server.to_vec();
        args.extend(["--iface", "lo", "--queues", "1", "--port", "7"]);
        let o = nobody_runs(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("needs root"), "{args:?}: {}", text(&o));
        // One line: the cause, and the three ways out.
        assert_eq!(err.lines().count(), 1, "{args:?}: {}", text(&o));
        assert!(
            err.contains(":7: Permission denied")
                && err.contains(&format!(
                    "ports below {start} are privileged; run as root, grant CAP_NET_BIND_SERVICE"
                ))
                && err.contains(&format!("or use a port of {start} or above")),
            "{args:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn bulk_source_to_a_receiver_that_half_closes_first_is_ok() {
    let test = "bulk_source_to_a_receiver_that_half_closes_first_is_ok";
    // Root while the TCP commands ask for it whatever the backend.
    if !require_root(test) {
        return;
    }
    const BYTES: usize = 20_000_000;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let receiver = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        // Our FIN reaches the source while it still has bytes to send:
        // more than the sockets' buffers hold, none read yet.
        std::thread::sleep(Duration::from_millis(300));
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        got.len()
    });
    let child = Command::new(flowlane_bin())
        .args([
            "bulk-source",
            "--backend",
            "kernel",
            "--iface",
            "lo",
            "--queues",
            "1",
        ])
        .args([
            "--connect",
            &addr.to_string(),
            "--bytes",
            &BYTES.to_string(),
        ])
        .args(["--timeout", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bulk-source");
    let (o, _) = wait_bounded(child, Duration::from_secs(90), "bulk-source");
    assert_eq!(receiver.join().unwrap(), BYTES, "every byte arrived");
    let out = String::from_utf8_lossy(&o.stdout);
    let result: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "source")
        .unwrap_or_else(|| panic!("no transfer result: {}", text(&o)));
    assert_eq!(result["ok"], true, "{result}: {}", text(&o));
    assert_eq!(result["bytes"], BYTES, "{result}");
    assert!(o.status.success(), "{}", text(&o));
}
