//! The matrix end to end on a small scale (root): both backends, both roles,
//! no delay and a delay through the test bed's delay line, latency cells,
//! JSON, tables and plots.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::*;
use flowlane_tests::{
    flowlane, flowlane_bin, kill_and_reap, require_root, start_udp_echo, text, unique_name, Bed,
    ToolBed,
};

#[test]
fn both_backends_both_roles_with_and_without_delay() {
    if !require_root("both_backends_both_roles_with_and_without_delay") {
        return;
    }
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix"));
    let bed = unique_name("tmx");
    let v = matrix(
        &bed,
        &out,
        &[
            "--backends",
            "kernel,flowlane",
            "--roles",
            "receiver,sender",
            "--conns",
            "2",
            "--latency-sizes",
            "64",
            "--delays",
            "0,5",
        ],
        300,
    );

    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2 * 2 * 2, "backends x roles x delays: {v}");
    for c in cells {
        let what = format!("{} {} delay {}", c["backend"], c["role"], c["delay_ms"]);
        assert!(c["error"].is_null(), "{what}: {}", c["error"]);
        assert!(c["mbit_s"].as_f64().unwrap() > 1.0, "{what}: {c}");
        let delay = c["delay_ms"].as_f64().unwrap();
        if delay > 0.0 {
            // The line delayed both directions: the RTT grew by at least 2 x 5 ms.
            assert!(c["rtt_added_ms"].as_f64().unwrap() >= 10.0, "{what}");
            let hooks = &c["delay_line"]["hooks"];
            assert!(hooks["to_line_egress"].as_u64().unwrap() > 0, "{what}");
            assert!(hooks["to_line_ingress"].as_u64().unwrap() > 0, "{what}");
        } else {
            assert!(c["delay_line"].is_null(), "{what}");
        }
    }
    // The flowlane receiver moved no bucket (`--rebalance off`, the
    // matrix's default) and the bed's RSS table was as found after each of
    // its cells; the other cells have no such fields.
    for c in cells {
        let receives = c["backend"] == "flowlane" && c["role"] == "receiver";
        if receives {
            assert_eq!(c["rebalance"], "off", "{c}");
            assert_eq!(c["rss_moves"], serde_json::json!([]), "{c}");
            assert_eq!(c["rss_table_put_back"], false, "{c}");
        } else {
            assert!(
                c["rebalance"].is_null() && c["rss_table_put_back"].is_null(),
                "{c}"
            );
        }
    }
    assert_eq!(v["params"]["flowlane_rebalance"], "off");
    // A flowlane sender's retransmits come from flowlane's own counters,
    // over the measured window (its report's).
    assert!(cells.iter().any(|c| c["backend"] == "flowlane"
        && c["role"] == "sender"
        && c["retrans_sender"].is_u64()
        && c["retrans_sender"] == c["sender"]["tcp_retrans_segs_data_path"]));
    // The parameters are those the cells ran with, on the bed it made.
    let p = &v["params"];
    assert_eq!(
        p["warmup_s"],
        serde_json::json!([{"delay_ms": 0.0, "warmup_s": 0.3}, {"delay_ms": 5.0, "warmup_s": 0.3}]),
        "{p}"
    );
    assert_eq!(
        (&p["bed"]["queues"], &p["bed"]["made_by_matrix"]),
        (&2.into(), &true.into()),
        "{p}"
    );

    let lat = v["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 2 * 2, "backends x delays: {v}");
    for l in lat {
        let p50 = l["latency"]["rtt_p50_us"]
            .as_f64()
            .unwrap_or_else(|| panic!("{l}"));
        if l["delay_ms"].as_f64().unwrap() > 0.0 {
            assert!(p50 >= 10_000.0, "a 5 ms line each way: {l}");
        } else {
            assert!(p50 < 10_000.0, "{l}");
        }
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("flowlane-sender Mbit/s"), "{table}");
    assert!(table.contains("p99.9"), "{table}");
    assert!(out.join("throughput_vs_delay.svg").exists());
    let _ = std::fs::remove_dir_all(&out);
    // The matrix removed its bed.
    assert!(!std::path::Path::new("/run/netns")
        .join(format!("flowlane-{bed}"))
        .exists());
}

/// `--family 6`: every cell, both backends and both roles, and the latency
/// cells run between the bed's IPv6 addresses, and results.json says so.
#[test]
fn both_backends_both_roles_over_ipv6() {
    if !require_root("both_backends_both_roles_over_ipv6") {
        return;
    }
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix6"));
    let bed = unique_name("tmx6");
    let v = matrix(
        &bed,
        &out,
        &[
            "--family",
            "6",
            "--backends",
            "kernel,flowlane",
            "--roles",
            "receiver,sender",
            "--conns",
            "2",
            "--latency-sizes",
            "64",
            "--delays",
            "0",
        ],
        240,
    );
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2 * 2, "backends x roles: {v}");
    for c in cells {
        let what = format!("{} {}", c["backend"], c["role"]);
        assert!(c["error"].is_null(), "{what}: {}", c["error"]);
        assert!(c["mbit_s"].as_f64().unwrap() > 1.0, "{what}: {c}");
        // Each end's report names the receiver's address it used.
        let want = if c["role"] == "receiver" {
            "fd99::1"
        } else {
            "fd99::2"
        };
        for end in ["receiver", "sender"] {
            assert_eq!(c[end]["address"], want, "{what} {end}: {c}");
        }
    }
    for l in v["latency"].as_array().unwrap() {
        assert!(l["error"].is_null(), "{l}");
        assert!(l["latency"]["round_trips"].as_u64().unwrap() > 0, "{l}");
    }
    let p = &v["params"];
    assert_eq!(p["family"], 6, "{p}");
    assert!(
        p["bed"]["receiver"]
            .as_str()
            .unwrap()
            .starts_with("fd99::1 "),
        "{p}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `kernel-wire` cells run kernel TCP with TSO/GSO off, so that wire-size
/// frames cross the veth (the fair baseline for flowlane's sender), and the
/// next cell gets the bed's offloads back: GSO super-frames cross the veth
/// as one packet each.
#[test]
fn kernel_wire_sends_wire_size_frames_and_gives_the_offloads_back() {
    if !require_root("kernel_wire_sends_wire_size_frames_and_gives_the_offloads_back") {
        return;
    }
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix-wire"));
    let bed = unique_name("tmw");
    let v = matrix(
        &bed,
        &out,
        &[
            "--backends",
            "kernel-wire,kernel",
            "--roles",
            "sender",
            "--conns",
            "1",
            "--latency-sizes",
            "none",
            "--delays",
            "0",
        ],
        120,
    );
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{v}");
    // Payload bytes per packet on the sender's interface.
    let frame = |backend: &str| {
        let c = cells
            .iter()
            .find(|c| c["backend"] == backend)
            .unwrap_or_else(|| panic!("no {backend} cell: {v}"));
        assert!(c["error"].is_null(), "{backend}: {}", c["error"]);
        c["sender"]["avg_frame_size"]
            .as_f64()
            .unwrap_or_else(|| panic!("{backend}: {c}"))
    };
    let (wire, gso) = (frame("kernel-wire"), frame("kernel"));
    eprintln!("payload bytes per packet: kernel-wire {wire:.0}, kernel {gso:.0}");
    assert!(wire <= 1500.0, "kernel-wire sent {wire} bytes per packet");
    assert!(
        gso > 3000.0,
        "after kernel-wire, kernel sent {gso} bytes per packet (offloads not restored?)"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `--bed NAME` of a bed that was up before the matrix: one in use is
/// refused and left as it was, its user still running (`testbed down`
/// would have stopped it and removed the bed); one free to use is used as
/// it was found (its RSS key, its MTU, read into results.json) and left up;
/// `kernel-wire` cells, which turn its offloads off and on, are refused on
/// it.
#[test]
fn a_bed_that_was_up_before_is_left_up() {
    if !require_root("a_bed_that_was_up_before_is_left_up") {
        return;
    }
    let bed = Bed::up("tmxb", 2);
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix-bed"));
    let (mut echo, _) = start_udp_echo(&bed, 7777);
    let o = matrix_output(&bed.name, &out, &[]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("in use"), "{}", text(&o));
    assert!(
        echo.try_wait().unwrap().is_none(),
        "the bed's user was stopped"
    );
    assert!(bed_is_up(&bed.name), "the bed in use was removed");
    kill_and_reap(&mut echo);

    // A key of the bed's own, and a larger MTU on both ends.
    let key: Vec<String> = (1..=40u8).map(|b| format!("{b:02x}")).collect();
    let key = key.join(":");
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--key", &key]);
    assert!(o.status.success(), "{}", text(&o));
    for (ns, dev) in [(&bed.ns, "xsk0"), (&bed.peer_ns, "peer0")] {
        let o = Command::new("ip")
            .args(["-n", ns, "link", "set", "dev", dev, "mtu", "4000"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    let v = matrix(
        &bed.name,
        &out,
        &[
            "--backends",
            "kernel",
            "--roles",
            "receiver",
            "--conns",
            "1",
            "--latency-sizes",
            "none",
            "--delays",
            "0",
        ],
        120,
    );
    let cells = v["cells"].as_array().unwrap();
    assert!(cells.len() == 1 && cells[0]["error"].is_null(), "{v}");
    assert!(
        bed_is_up(&bed.name),
        "the bed that was up before was removed"
    );
    let st = flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["key"], key, "the bed's RSS was rewritten: {st}");
    let b = &v["params"]["bed"];
    assert_eq!(
        (&b["queues"], &b["mtu"], &b["made_by_matrix"]),
        (&2.into(), &4000.into(), &false.into()),
        "{b}"
    );

    let o = matrix_output(
        &bed.name,
        &out,
        &["--backends", "kernel-wire", "--delays", "0"],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("kernel-wire turns the bed's offloads off and on"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A bed that was up before with other than the matrix's two queues is
/// refused in one line and left as it was: not rebuilt with two.
#[test]
fn a_bed_of_other_queues_is_refused_not_rebuilt() {
    if !require_root("a_bed_of_other_queues_is_refused_not_rebuilt") {
        return;
    }
    let bed = Bed::up("tmxq", 4);
    let out = std::env::temp_dir().join(unique_name("ttcp-matrix-q"));
    let o = matrix_output(&bed.name, &out, &["--backends", "kernel", "--delays", "0"]);
    assert!(!o.status.success(), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("has 4 queues and the matrix runs on 2"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    let st = flowlane(&["testbed", "status", "--bed", &bed.name, "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["queues"], 4, "{st}");
    assert!(
        !out.exists(),
        "a matrix that refused to run made its --out folder"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A bed whose `testbed up` did not finish (Ctrl-C reaches `up` too, which
/// then leaves namespaces and the marker of their making, without a state
/// file) is taken down all the same, by a plain `testbed down`: it is this
/// run directory's.
#[test]
fn a_bed_left_half_made_by_up_is_taken_down() {
    if !require_root("a_bed_left_half_made_by_up_is_taken_down") {
        return;
    }
    let bed = ToolBed::new("tmxh");
    let state_dir = flowlane_testbed::state::state_dir();
    // A `flowlane` whose `testbed up` notes the bed's making as the real one
    // does, makes one namespace and dies (as on SIGINT).
    let up = format!(
        "mkdir -p {dir}; echo '{{\"made\":[]}}' > {dir}/{bed}.making; ip netns add flowlane-{bed}; \
         exit 130",
        dir = state_dir.display(),
        bed = bed.0
    );
    let (o, calls) = matrix_with_fake_up(&bed.0, "half", &up);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("testbed up"), "{}", text(&o));
    assert!(
        calls.contains(&format!("testbed down --bed {}\n", bed.0)),
        "{calls}"
    );
    assert!(!bed.exists(), "the half-made bed was left: {calls}");
}

/// A bed that another run directory made under the name after the matrix
/// looked (so that the matrix's own `testbed up` failed) is not the
/// matrix's: its plain `testbed down` leaves it up.
#[test]
fn a_bed_another_run_directory_made_meanwhile_is_left_up() {
    if !require_root("a_bed_another_run_directory_made_meanwhile_is_left_up") {
        return;
    }
    /// Takes the bed down from the other run directory, and removes it.
    struct Other(String, std::path::PathBuf);
    impl Drop for Other {
        fn drop(&mut self) {
            let _ = Command::new(flowlane_bin())
                .args(["testbed", "down", "--bed", &self.0])
                .env("FLOWLANE_RUN_DIR", &self.1)
                .output();
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let other = Other(
        unique_name("tmxo"),
        std::env::temp_dir().join(unique_name("ttcp-matrix-other")),
    );
    // A `flowlane` whose `testbed up` finds the bed made by then, in
    // another run directory.
    let up = format!(
        "FLOWLANE_RUN_DIR={dir} {real} testbed up --bed {bed} --queues 1 >/dev/null; \
         {real} testbed up --bed {bed} --queues 2",
        dir = other.1.display(),
        real = flowlane_bin().display(),
        bed = other.0
    );
    let (o, calls) = matrix_with_fake_up(&other.0, "other", &up);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no record"), "{}", text(&o));
    assert!(
        calls.contains(&format!("testbed down --bed {}\n", other.0)),
        "{calls}"
    );
    assert!(
        bed_is_up(&other.0),
        "the matrix removed another run directory's bed: {calls}"
    );
}

/// Runs the matrix on bed `bed` with a `flowlane` whose `testbed up` is the
/// shell script `up` (its other commands are the real one's), within 60 s;
/// its output and the `flowlane` commands it ran, one a line.
fn matrix_with_fake_up(bed: &str, tag: &str, up: &str) -> (std::process::Output, String) {
    let dir = std::env::temp_dir().join(unique_name(&format!("ttcp-matrix-{tag}")));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("calls");
    let fake = dir.join("flowlane");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" >> {log}\nif [ \"$2\" = up ]; then {up}; exit $?; fi\nexec {real} \"$@\"\n",
            log = log.display(),
            real = flowlane_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = Command::new(bin())
        .args(["matrix", "--flowlane"])
        .arg(&fake)
        .args(["--bed", bed, "--out"])
        .arg(dir.join("out"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("flowlane-ttcp matrix");
    let (o, _) = wait_bounded(child, Duration::from_secs(60), "matrix");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (o, calls)
}

/// Whether bed `name`'s namespaces are there.
fn bed_is_up(name: &str) -> bool {
    let ns = std::path::Path::new("/run/netns");
    ns.join(format!("flowlane-{name}")).exists()
        && ns.join(format!("flowlane-{name}-peer")).exists()
}

/// Runs a small matrix (64 KiB buffers, 0.3 s warm-up, 0.7 s cells) on bed
/// `bed` with the flags `args`, writing to `out`, within 120 s; its output.
fn matrix_output(bed: &str, out: &std::path::Path, args: &[&str]) -> std::process::Output {
    matrix_within(bed, out, args, 120).0
}

/// [`matrix_output`] within `limit_s` seconds, and how long it took.
fn matrix_within(
    bed: &str,
    out: &std::path::Path,
    args: &[&str],
    limit_s: u64,
) -> (std::process::Output, Duration) {
    let child = Command::new(bin())
        .arg("matrix")
        .arg("--flowlane")
        .arg(flowlane_bin())
        .args([
            "--bed",
            bed,
            "--sizes",
            "64k",
            "--warmup",
            "0.3",
            "--seconds",
            "0.7",
        ])
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("flowlane-ttcp matrix");
    wait_bounded(child, Duration::from_secs(limit_s), "matrix")
}

/// [`matrix_within`] that must succeed; its `results.json`.
fn matrix(bed: &str, out: &std::path::Path, args: &[&str], limit_s: u64) -> serde_json::Value {
    let (o, took) = matrix_within(bed, out, args, limit_s);
    assert!(o.status.success(), "matrix: {}", text(&o));
    eprintln!("matrix took {took:?}");
    serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap()
}
