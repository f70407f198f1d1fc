//! Bed ownership and vanishing beds (issue 16, items 1, 4 and 7): `testbed
//! up` refuses a bed in use unless `--force`, `testbed down` names and stops
//! the services on it, a service whose interface or namespace goes away
//! stops within a second or two with one line saying what vanished, a second
//! service on a busy interface names the process holding it, and `down`
//! leaves no empty shared directory behind. Real processes throughout
//! (`target/debug/flowlane`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use flowlane_tests::{
    flowlane, flowlane_bin, kill_and_reap, ready_within, require_root, text, unique_name,
    wait_within, Bed,
};

/// A flowlane service started for a test, with its stderr in a file; killed
/// on drop if it still runs.
struct Service {
    child: Child,
    stderr: PathBuf,
}

impl Service {
    /// Starts `flowlane <args> --report R` (prefixed by `ip netns exec NS`
    /// when `ns` is given) and waits until its data path is up.
    fn start(ns: Option<&str>, args: &[&str], tag: &str) -> Service {
        let dir = std::env::temp_dir();
        let report = dir.join(format!("{tag}.json"));
        let stderr = dir.join(format!("{tag}.err"));
        let _ = std::fs::remove_file(&report);
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(flowlane_bin());
                c
            }
            None => Command::new(flowlane_bin()),
        };
        let child = cmd
            .args(args)
            .arg("--report")
            .arg(&report)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut s = Service { child, stderr };
        match ready_within(&mut s.child, Duration::from_secs(30), || report.exists()) {
            Ok(()) => s,
            Err(st) => panic!("{args:?} did not start ({st:?}): {}", s.stderr_text()),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Its exit status within `limit`, and how long that took.
    fn exit_within(&mut self, limit: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        let t = Instant::now();
        wait_within(&mut self.child, limit).map(|st| (st, t.elapsed()))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
        let _ = std::fs::remove_file(&self.stderr);
        let _ = std::fs::remove_file(self.stderr.with_extension("json"));
    }
}

/// The lines of `text` that report an error: a failure must be one line.
fn error_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.contains("error")).collect()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn udp_echo(bed: &Bed, port: u16) -> Service {
    Service::start(
        Some(&bed.ns),
        &["udp-echo", "--iface", "xsk0", "--port", &port.to_string()],
        &format!("{}-udp{port}", bed.name),
    )
}

fn http_server(bed: &Bed, port: u16) -> Service {
    Service::start(
        None,
        &[
            "http-server",
            "--bed",
            &bed.name,
            "--port",
            &port.to_string(),
        ],
        &format!("{}-http{port}", bed.name),
    )
}

#[test]
fn up_refuses_a_bed_in_use_and_force_stops_its_services() {
    if !require_root("up_refuses_a_bed_in_use_and_force_stops_its_services") {
        return;
    }
    let bed = Bed::up("own", 2);
    let mut echo = udp_echo(&bed, 7777);
    let pid = echo.pid().to_string();

    // Status names the service using the bed.
    let o = flowlane(&["testbed", "status", "--bed", &bed.name]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains(&format!("used by: pid {pid} (flowlane udp-echo")),
        "{}",
        text(&o)
    );

    // Rebuilding (another queue count) and re-running up are both refused,
    // in one line naming the service.
    for queues in ["4", "2"] {
        let o = flowlane(&["testbed", "up", "--name", &bed.name, "--queues", queues]);
        assert!(!o.status.success(), "up on a bed in use: {}", text(&o));
        let e = stderr(&o);
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(e.contains("in use by"), "{e}");
        assert!(e.contains(&format!("pid {pid} (flowlane udp-echo")), "{e}");
        assert!(e.contains("--force"), "{e}");
    }
    assert!(
        echo.exit_within(Duration::ZERO).is_none(),
        "refusing up stopped the service"
    );

    // --force stops it cleanly (SIGTERM: exit 0) and rebuilds the bed.
    let o = flowlane(&[
        "testbed", "up", "--name", &bed.name, "--queues", "4", "--force",
    ]);
    assert!(o.status.success(), "up --force: {}", text(&o));
    assert!(
        stdout(&o).contains(&format!("stopped pid {pid}")),
        "{}",
        text(&o)
    );
    let (st, _) = echo
        .exit_within(Duration::from_secs(1))
        .expect("up --force returned with the service still running");
    assert!(
        st.success(),
        "the stopped service exited with {st}: {}",
        echo.stderr_text()
    );
    let st = flowlane(&["testbed", "status", "--name", &bed.name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["queues"], 4, "{}", text(&st));

    // With its user gone, up works without --force again.
    let o = flowlane(&["testbed", "up", "--name", &bed.name, "--queues", "4"]);
    assert!(
        o.status.success(),
        "up on a bed no longer in use: {}",
        text(&o)
    );
}

#[test]
fn down_names_and_stops_the_services_on_the_bed() {
    if !require_root("down_names_and_stops_the_services_on_the_bed") {
        return;
    }
    let bed = Bed::up("dn", 2);
    let mut http = http_server(&bed, 8080);
    // The delay line is a user too: its lanes run in the far side's
    // namespace.
    let lines = std::env::temp_dir().join(format!("{}-delay.out", bed.name));
    let delay = Command::new(flowlane_bin())
        .args(["testbed", "delay", "--name", &bed.name, "--ms", "1"])
        .stdout(std::fs::File::create(&lines).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut delay = Service {
        child: delay,
        stderr: lines.clone(),
    };
    let delaying = || std::fs::read_to_string(&lines).is_ok_and(|t| t.contains("delaying"));
    if let Err(st) = ready_within(&mut delay.child, Duration::from_secs(30), delaying) {
        panic!("the delay line did not start ({st:?})");
    }

    let o = flowlane(&["testbed", "down", "--name", &bed.name]);
    assert!(o.status.success(), "down of a bed in use: {}", text(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("pid {} (flowlane http-server", http.pid())),
        "{out}"
    );
    assert!(
        out.contains(&format!("pid {} (flowlane testbed delay", delay.pid())),
        "{out}"
    );
    assert!(out.contains("removed"), "{out}");
    for s in [&mut http, &mut delay] {
        let (st, _) = s
            .exit_within(Duration::from_secs(1))
            .expect("down returned with a service still running");
        assert!(st.success(), "stopped with {st}: {}", s.stderr_text());
    }
    assert!(!Path::new("/run/netns").join(&bed.ns).exists());
}

#[test]
fn a_service_stops_when_its_interface_or_namespace_vanishes() {
    if !require_root("a_service_stops_when_its_interface_or_namespace_vanishes") {
        return;
    }
    // The interface goes (the veth pair deleted under a UDP service).
    let bed = Bed::up("vif", 2);
    let mut echo = udp_echo(&bed, 7777);
    let o = Command::new("ip")
        .args(["-n", &bed.ns, "link", "del", "xsk0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let (st, took) = echo
        .exit_within(Duration::from_secs(2))
        .expect("udp-echo still runs 2 s after its interface vanished");
    assert!(!st.success(), "exited with {st}");
    let e = echo.stderr_text();
    let errors = error_lines(&e);
    assert_eq!(errors.len(), 1, "{e}");
    assert!(errors[0].contains("interface xsk0 vanished"), "{e}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(bed);

    // The namespace goes (removed under a TCP service, which keeps it alive
    // but can no longer be reached by name).
    let bed = Bed::up("vns", 2);
    let mut http = http_server(&bed, 8080);
    let o = Command::new("ip")
        .args(["netns", "del", &bed.ns])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let (st, _) = http
        .exit_within(Duration::from_secs(2))
        .expect("http-server still runs 2 s after its namespace vanished");
    assert!(!st.success(), "exited with {st}");
    let e = http.stderr_text();
    let errors = error_lines(&e);
    assert_eq!(errors.len(), 1, "{e}");
    assert!(
        errors[0].contains(&format!(
            "network namespace {} of interface xsk0 was removed",
            bed.ns
        )),
        "{e}"
    );
}

#[test]
fn a_second_service_on_a_busy_interface_names_the_holder() {
    if !require_root("a_second_service_on_a_busy_interface_names_the_holder") {
        return;
    }
    let bed = Bed::up("busy", 2);
    let mut first = udp_echo(&bed, 7777);
    let mut second = Command::new("ip")
        .args(["netns", "exec", &bed.ns])
        .arg(flowlane_bin())
        .args(["udp-echo", "--iface", "xsk0", "--port", "7778"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_within(&mut second, Duration::from_secs(10));
    let o = second.wait_with_output().unwrap();
    assert!(st.is_some_and(|s| !s.success()), "{}", text(&o));
    let e = stderr(&o);
    let errors = error_lines(&e);
    assert_eq!(errors.len(), 1, "{e}");
    assert!(errors[0].contains("xsk0 is busy"), "{e}");
    assert!(
        errors[0].contains(&format!("pid {} (flowlane udp-echo", first.pid())),
        "{e}"
    );
    assert!(!e.contains("libbpf"), "{e}");
    assert!(
        first.exit_within(Duration::ZERO).is_none(),
        "the first service stopped"
    );
}

/// `flowlane testbed <args>` with the beds' state in `run_dir`.
fn testbed_in(run_dir: &Path, args: &[&str]) -> Output {
    Command::new(flowlane_bin())
        .arg("testbed")
        .args(args)
        .env("FLOWLANE_RUN_DIR", run_dir)
        .output()
        .unwrap()
}

/// Removes beds made with [`testbed_in`] whatever the test's outcome.
struct Beds<'a>(&'a Path, Vec<String>);

impl Drop for Beds<'_> {
    fn drop(&mut self) {
        for b in &self.1 {
            let _ = testbed_in(self.0, &["down", "--name", b]);
        }
        let _ = std::fs::remove_dir_all(self.0);
    }
}

/// `down` removes its bed's files and no other's; the shared directories
/// (state files', pins') stay, empty: removing one when it looked empty
/// raced with another bed's `up` creating its first file there.
#[test]
fn down_removes_its_own_files_only() {
    if !require_root("down_removes_its_own_files_only") {
        return;
    }
    let run_dir = std::env::temp_dir().join(unique_name("rundir"));
    let (a, b) = (unique_name("da"), unique_name("db"));
    let _beds = Beds(&run_dir, vec![a.clone(), b.clone()]);
    let state_dir = run_dir.join("testbed");
    let pins = Path::new("/sys/fs/bpf/flowlane");
    for n in [&a, &b] {
        let o = testbed_in(&run_dir, &["up", "--name", n, "--queues", "1"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    // Another bed's files stay.
    let o = testbed_in(&run_dir, &["down", "--name", &a]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(state_dir.join(format!("{b}.json")).exists());
    assert!(pins.join(&b).exists());
    assert!(!state_dir.join(format!("{a}.json")).exists());
    assert!(!pins.join(&a).exists());
    let o = testbed_in(&run_dir, &["down", "--name", &b]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!state_dir.join(format!("{b}.json")).exists());
    assert!(!pins.join(&b).exists());
    assert!(state_dir.is_dir(), "the shared state directory stays");
}
