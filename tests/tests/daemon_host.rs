//! `flowlane daemon --iface IF` owning a real interface: the test bed's
//! veth with a flowlane service on it (so that its NAPI instances exist).
//! The daemon reads what the veth can do, applies the plan (threaded NAPI
//! switched on, each queue's NAPI thread pinned to its worker's CPU),
//! reports it on its socket, `flowlane status` and the metrics page, and
//! puts the veth back when it stops; `--dry-run` changes nothing and
//! `--keep-on-exit` leaves the plan in force.

mod tcp_common;

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_tests::{
    flowlane_bin, in_ns, metrics_page, napi_threads, ready_line, require_root, text, threaded,
    wait_within, within_10s, Bed, NicDaemon, NicDir, OpenDir, TestDaemon,
};
use serde_json::Value;
use tcp_common::*;

/// `flowlane daemon --iface xsk0 EXTRA...` in the bed's namespace, its
/// socket and the services' in `dir`'s run directory.
fn daemon(bed: &Bed, dir: &NicDir, extra: &[&str]) -> NicDaemon {
    NicDaemon::start(bed, &daemon_flags(dir, extra))
}

/// `--socket run/daemon.sock --run-dir run EXTRA...` of `dir`.
fn daemon_flags(dir: &NicDir, extra: &[&str]) -> Vec<OsString> {
    let run = dir.run();
    let mut flags: Vec<OsString> = vec![
        "--socket".into(),
        run.join("daemon.sock").into(),
        "--run-dir".into(),
        run.into(),
    ];
    flags.extend(extra.iter().map(Into::into));
    flags
}

/// The tests here whose veth gets NAPI threads run one at a time: the
/// threads are named after the interface (`napi/xsk0-N`), the same in
/// every bed, and `flowlane irq` refuses to tell them apart.
static NAPI_THREADS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_daemon_applies_the_plan_to_the_veth_and_puts_it_back() {
    let test = "the_daemon_applies_the_plan_to_the_veth_and_puts_it_back";
    if !require_root(test) {
        return;
    }
    let _one_at_a_time = NAPI_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::up("dhost", 2);
    let dir = NicDir::new("dhost");
    let _service = start(&bed, &dir.echo_server(), 120);
    assert_eq!(threaded(&bed), "0", "a fresh bed has threaded NAPI off");
    let before: Vec<u32> = napi_threads().iter().map(|t| t.0).collect();

    // --dry-run: said, not done.
    let dry = daemon(&bed, &dir, &["--dry-run"]);
    assert_eq!(dry.ready["nics"][0]["dry_run"], true);
    assert_eq!(dry.said("changes"), ["would switch threaded NAPI on xsk0"]);
    assert_eq!(threaded(&bed), "0");
    let after = dry.stop_cleanly();
    assert!(after.is_empty(), "nothing to put back: {after:?}");
    assert_eq!(threaded(&bed), "0");

    // The plan applied: threaded NAPI on, each thread on one CPU.
    let d = daemon(&bed, &dir, &[]);
    let changes = d.said("changes");
    assert_eq!(changes[0], "switched threaded NAPI on xsk0", "{changes:?}");
    assert_eq!(threaded(&bed), "1");
    let ours: Vec<(u32, String)> = napi_threads()
        .into_iter()
        .filter(|t| !before.contains(&t.0))
        .collect();
    assert_eq!(ours.len(), 2, "one NAPI thread per queue: {ours:?}");
    for (pid, cpus) in &ours {
        assert!(
            cpus.parse::<u32>().is_ok(),
            "NAPI thread {pid} pinned to one CPU, not {cpus}"
        );
        assert!(
            changes
                .iter()
                .any(|c| c.contains(&format!("pid {pid} to CPU {cpus}"))),
            "{changes:?}"
        );
    }

    // What it owns, through `flowlane status` (its socket) and the page.
    let st = status(&bed, &dir);
    let nic = &st["daemon"]["nics"][0];
    assert_eq!(nic["iface"], "xsk0", "{st}");
    assert_eq!(nic["driver"], "veth");
    assert_eq!(nic["rx_queues"], 2);
    assert!(
        nic["kernel"].as_array().unwrap().contains(&"af-xdp".into()),
        "{nic}"
    );
    assert_eq!(nic["changes"].as_array().unwrap().len(), 3, "{nic}");
    assert_eq!(st["services"][0]["service"], "echo-server", "{st}");
    // No `--rebalance` flag, two queues, the bed's table: on by default.
    assert_eq!(st["services"][0]["rebalance"], "auto", "{st}");
    let addr = d.ready["metrics"].as_str().unwrap().to_string();
    let o = in_ns(
        &bed.ns,
        &["curl", "-s", "-m", "10", &format!("http://{addr}/metrics")],
    );
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(
        page.contains(r#"flowlane_nic_info{iface="xsk0",driver="veth",node="none",af_xdp="copy",xdp="native",rss="none"} 1"#),
        "{page}"
    );
    assert!(
        page.contains(r#"flowlane_nic_plan_changes{iface="xsk0"} 3"#),
        "{page}"
    );
    assert_eq!(
        page.lines()
            .filter(|l| l.starts_with("flowlane_nic_plan_part_info{iface=\"xsk0\""))
            .count(),
        9,
        "one series per part"
    );

    // SIGTERM: put back.
    let after = d.stop_cleanly();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["event"], "restored");
    assert_eq!(after[0]["done"][0], "switched threaded NAPI off on xsk0");
    assert_eq!(threaded(&bed), "0");

    // Its terminal gone: stdout closed (`| head -1`, an ssh session's
    // end) and SIGHUP. It still puts everything back and exits 0 (a print
    // to the closed pipe panicked, and SIGHUP's default action ended it
    // past its clean-up).
    let mut hup = NicDaemon::command(&bed, &daemon_flags(&dir, &[]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowlane daemon");
    let (_, out) = ready_line(&mut hup);
    drop(out);
    assert_eq!(threaded(&bed), "1");
    let _ = Command::new("kill")
        .args(["-HUP", &hup.id().to_string()])
        .status();
    let st = wait_within(&mut hup, Duration::from_secs(20)).expect("daemon stops");
    let mut err = String::new();
    let _ = hup.stderr.take().unwrap().read_to_string(&mut err);
    assert!(st.success(), "daemon exited with {st}: {err}");
    assert_eq!(threaded(&bed), "0", "put back");

    // --keep-on-exit: the plan stays in force.
    let keep = daemon(&bed, &dir, &["--keep-on-exit"]);
    assert_eq!(threaded(&bed), "1");
    assert!(keep.stop_cleanly().is_empty());
    assert_eq!(threaded(&bed), "1", "kept");
}

#[test]
fn a_daemon_started_before_the_service_pins_the_napi_threads_once_they_exist() {
    let test = "a_daemon_started_before_the_service_pins_the_napi_threads_once_they_exist";
    if !require_root(test) {
        return;
    }
    let _one_at_a_time = NAPI_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::up("dlate", 2);
    let dir = NicDir::new("dlate");
    // No service yet: a veth without an XDP program has no NAPI instance.
    let d = daemon(&bed, &dir, &[]);
    assert!(d.said("changes").is_empty(), "{}", d.ready);
    let notes = d.said("notes");
    assert!(
        notes[0].starts_with("left xsk0's interrupts for now"),
        "{notes:?}"
    );
    assert_eq!(threaded(&bed), "0");
    let _service = start(&bed, &dir.echo_server(), 120);
    assert!(
        became(|| threaded(&bed) == "1"),
        "pinned once the service gave the veth NAPI"
    );
    let after = d.stop_cleanly();
    let planned = after
        .iter()
        .find(|l| l["event"] == "planned")
        .unwrap_or_else(|| panic!("{after:?}"));
    assert_eq!(
        planned["changes"][0], "switched threaded NAPI on xsk0",
        "{planned}"
    );
    let restored = after
        .iter()
        .find(|l| l["event"] == "restored")
        .unwrap_or_else(|| panic!("{after:?}"));
    assert_eq!(restored["done"][0], "switched threaded NAPI off on xsk0");
    assert_eq!(threaded(&bed), "0", "put back");
}

/// `flowlane status --json` in the bed, for the daemon and services of
/// `dir`.
fn status(bed: &Bed, dir: &NicDir) -> Value {
    let o = in_ns(
        &bed.ns,
        &[
            flowlane_bin().to_str().unwrap(),
            "status",
            "--json",
            "--run-dir",
            dir.run().to_str().unwrap(),
            "--daemon-socket",
            dir.run().join("daemon.sock").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Whether `ok` holds within 10 s (polled every 100 ms).
fn became(mut ok: impl FnMut() -> bool) -> bool {
    within_10s(|| ok().then_some(())).is_some()
}

/// The bed's `xsk0` as the daemon's socket reports it (`flowlane status`).
fn owned_nic(bed: &Bed, dir: &NicDir) -> Value {
    status(bed, dir)["daemon"]["nics"][0].clone()
}

#[test]
fn a_service_restarted_on_the_nic_gets_its_new_napi_threads_pinned() {
    let test = "a_service_restarted_on_the_nic_gets_its_new_napi_threads_pinned";
    if !require_root(test) {
        return;
    }
    let _one_at_a_time = NAPI_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::up("drest", 2);
    let dir = NicDir::new("drest");
    let first = start(&bed, &dir.echo_server(), 120);
    let d = daemon(&bed, &dir, &[]);
    assert_eq!(threaded(&bed), "1");
    // The service goes: its XDP program, and the veth's NAPI instances
    // and threads with it. A new one makes new ones, which nothing pinned.
    let old: Vec<u32> = napi_threads().iter().map(|t| t.0).collect();
    first.stop();
    let _second = start(&bed, &dir.echo_server(), 120);
    let pinned = became(|| {
        let new: Vec<(u32, String)> = napi_threads()
            .into_iter()
            .filter(|t| !old.contains(&t.0))
            .collect();
        new.len() == 2 && new.iter().all(|(_, cpus)| cpus.parse::<u32>().is_ok())
    });
    let now = napi_threads();
    assert!(
        pinned,
        "the new NAPI threads pinned to one CPU each: {now:?} (before {old:?})"
    );
    let notes = owned_nic(&bed, &dir)["notes"].clone();
    let last = notes.as_array().unwrap().last().unwrap().as_str().unwrap();
    assert!(
        last.starts_with("planned again (xsk0 changed: 2 NAPI instances, new ones)"),
        "{notes}"
    );
    let after = d.stop_cleanly();
    let restored = after
        .iter()
        .find(|l| l["event"] == "restored")
        .unwrap_or_else(|| panic!("{after:?}"));
    assert_eq!(restored["done"][0], "switched threaded NAPI off on xsk0");
    assert_eq!(threaded(&bed), "0", "put back");
}

#[test]
fn channels_set_under_the_daemon_are_planned_for() {
    if !require_root("channels_set_under_the_daemon_are_planned_for") {
        return;
    }
    let bed = Bed::up("dchan", 2);
    let dir = NicDir::new("dchan");
    let d = daemon(&bed, &dir, &[]);
    assert_eq!(owned_nic(&bed, &dir)["rx_queues"], 2);
    let o = in_ns(&bed.ns, &["ethtool", "-L", "xsk0", "rx", "1", "tx", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        became(|| owned_nic(&bed, &dir)["rx_queues"] == 1),
        "{}",
        owned_nic(&bed, &dir)
    );
    let nic = owned_nic(&bed, &dir);
    let last = nic["notes"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last, "planned again (xsk0 changed: receive queues 1, was 2): nothing to change",
        "{nic}"
    );
    // Back to two: planned again.
    let o = in_ns(&bed.ns, &["ethtool", "-L", "xsk0", "rx", "2", "tx", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(became(|| owned_nic(&bed, &dir)["rx_queues"] == 2));
    let after = d.stop_cleanly();
    let planned: Vec<&Value> = after.iter().filter(|l| l["event"] == "planned").collect();
    assert_eq!(planned.len(), 2, "{after:?}");
}

#[test]
fn a_nic_that_is_not_there_stops_the_daemon_with_one_line() {
    let o = Command::new(flowlane_bin())
        .args([
            "daemon",
            "--iface",
            "flowlane-none0",
            "--metrics",
            "127.0.0.1:0",
            "--socket",
            "none",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("flowlane-none0"), "{err}");
}

/// An interface of this machine whose driver keeps per-queue counters
/// (netdev `qstats-get`), if any: virtio-net does, veth does not.
fn nic_with_queue_counters() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().find(|n| {
        let o = Command::new(flowlane_bin())
            .args(["nic", "qstats", "--iface", n, "--json"])
            .output()
            .unwrap();
        o.status.success() && String::from_utf8_lossy(&o.stdout).trim() != "null"
    })
}

#[test]
fn a_nic_s_own_queue_counters_reach_the_metrics_page() {
    let test = "a_nic_s_own_queue_counters_reach_the_metrics_page";
    if !require_root(test) {
        return;
    }
    let Some(iface) = nic_with_queue_counters() else {
        eprintln!(
            "{test}: skipped: no interface here keeps per-queue counters (netdev qstats-get)"
        );
        return;
    };
    let dir = OpenDir::new("dqs");
    // --dry-run: the machine's own NIC is read, never changed.
    let d = TestDaemon::start_with(&dir.0, Path::new("none"), &["--dry-run", "--iface", &iface]);
    assert_eq!(d.ready["nics"][0]["dry_run"], true, "{}", d.ready);
    let page = metrics_page(&d.metrics);
    let series =
        format!(r#"flowlane_nic_queue_packets_total{{iface="{iface}",queue="0",direction="rx"}}"#);
    assert!(page.contains(&series), "{series} not on the page:\n{page}");
    assert!(page.contains(&format!(
        r#"flowlane_nic_plan_changes{{iface="{iface}"}} 0"#
    )));
    d.stop();
}
