//! `flowlane testbed down` stops the services on a bed whatever started
//! them: a kernel-socket service built on flowlane's libraries (a program
//! not called `flowlane`, holding no AF_XDP socket) is found by its cores'
//! threads (`flowlane-q<N>`), named and stopped, as the `flowlane` CLI's
//! services and AF_XDP socket holders are. Here that program is this test
//! binary, run again inside the bed's namespace to serve one
//! `flowlane_kernel::KernelService` core.

mod loopback_common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use flowlane_app::SetupExt;
use flowlane_kernel::{KernelConfig, KernelService, Limits};
use flowlane_tests::{
    flowlane, kill_and_reap, ready_within, require_root, rerun_in_ns, text, wait_within, Bed,
};
use loopback_common::{places, Echo};

/// Set in the child that serves (the name of the bed, for its message).
const SERVE: &str = "FLOWLANE_TEST_LIBRARY_SERVICE";

/// The child's part: a kernel-socket service of one core on port 7007 of
/// every IPv4 address of its namespace, until it is signalled. Runs only
/// when asked by [`down_stops_a_kernel_socket_service_built_on_the_libraries`].
#[test]
#[ignore = "the library service the bed test runs in the bed's namespace"]
fn serve_as_a_library_kernel_service() {
    let Some(bed) = std::env::var_os(SERVE) else {
        return;
    };
    let _service = KernelService::start(
        KernelConfig {
            cores: places(1),
            listen_on: vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)],
            limits: Limits::default(),
        },
        |s| {
            s.listen(7007, Echo::new(16 << 10))
                .map(|_| ())
                .map_err(|e| format!("{e:?}"))
        },
    )
    .expect("the library service starts");
    println!("serving on bed {}", bed.to_string_lossy());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// The threads of `pid` by name.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn down_stops_a_kernel_socket_service_built_on_the_libraries() {
    let test = "down_stops_a_kernel_socket_service_built_on_the_libraries";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("libsvc", 1);
    let me = std::env::current_exe().expect("the test binary");
    let mut child = rerun_in_ns(
        &bed.ns,
        "serve_as_a_library_kernel_service",
        (SERVE, bed.name.as_ref()),
        true,
    );
    let pid = child.id();
    // `ip netns exec` execs the program in its own process: the pid is the
    // service's once its core runs.
    let serving = || thread_names(pid).iter().any(|n| n == "flowlane-q0");
    if let Err(st) = ready_within(&mut child, Duration::from_secs(30), serving) {
        kill_and_reap(&mut child);
        panic!("the library service did not start ({st:?})");
    }
    let exe = me.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        !exe.starts_with("flowlane"),
        "a program of another name: {exe}"
    );

    // Named among the bed's users, and stopped with it.
    let status = flowlane(&["testbed", "status", "--bed", &bed.name]);
    let down = flowlane(&["testbed", "down", "--bed", &bed.name]);
    let stopped = wait_within(&mut child, Duration::from_secs(2));
    if stopped.is_none() {
        kill_and_reap(&mut child);
    }
    assert!(
        String::from_utf8_lossy(&status.stdout).contains(&format!("pid {pid} ")),
        "testbed status lists the library service: {}",
        text(&status)
    );
    assert!(down.status.success(), "{}", text(&down));
    assert!(
        String::from_utf8_lossy(&down.stdout).contains(&format!("pid {pid} ")),
        "down names the library service: {}",
        text(&down)
    );
    assert!(
        stopped.is_some(),
        "down returned with the library service still running: {}",
        text(&down)
    );
}
