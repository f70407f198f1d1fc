//! Bad input to the commands: one line on stderr saying what is wrong and
//! what to do, and a non-zero exit.

use std::process::{Command, Stdio};
use std::time::Duration;

use flowlane_tests::{
    flowlane, flowlane_bin, in_ns, kill_and_reap, ready_within, require_root, terminate, text,
    wait_bounded, xdp_attached, Bed,
};

fn one_line_error(o: &std::process::Output, needle: &str) {
    assert!(!o.status.success(), "expected failure: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line: {err}");
    assert!(
        lines[0].contains(needle),
        "expected {needle:?} in {:?}",
        lines[0]
    );
}

/// A flag's bad value: rejected while parsing (exit 2), on one line that
/// contains every one of `needles`.
fn usage_error(args: &[&str], needles: &[&str]) {
    let o = flowlane(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    for n in needles {
        one_line_error(&o, n);
    }
}

#[test]
fn bad_flags_are_usage_errors() {
    let o = flowlane(&["testbed", "up", "--queues", "many"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = flowlane(&["testbed", "up", "--bed", "a/b"]);
    assert!(!o.status.success());
}

#[test]
fn malformed_key_and_table_size() {
    usage_error(
        &["testbed", "up", "--bed", "x", "--key", "zz:11"],
        &["--key", "'z' at position 1 is not a hex digit"],
    );
    usage_error(
        &["testbed", "up", "--bed", "x", "--table-size", "100"],
        &["--table-size", "power of two"],
    );
}

#[test]
fn impairment_rates_are_percentages() {
    usage_error(
        &["testbed", "impair", "--bed", "x", "--ce", "150%"],
        &["--ce", "150%", "between 0 and 100"],
    );
    usage_error(
        &["testbed", "impair", "--bed", "x", "--loss", "lots"],
        &["--loss", "lots", "not a percentage"],
    );
}

#[test]
fn a_short_key_says_what_a_key_looks_like_not_a_rust_api() {
    let flow = ["--src", "10.0.0.2", "--dst", "10.0.0.1"];
    let rss = [&["rss", "hash", "--key", "1234"][..], &flow].concat();
    let hint = [
        "hint", "--key", "1234", "--src", "10.0.0.2", "--sport", "1", "--dport", "2",
    ];
    let up = ["testbed", "up", "--bed", "x", "--key", "1234"];
    for args in [&rss[..], &hint[..], &up[..]] {
        usage_error(
            args,
            &[
                "--key",
                "2 bytes is too short",
                "40 bytes",
                "80 digits",
                "6d:5a:56:da",
                "omit --key to use the Microsoft default key",
            ],
        );
        let o = flowlane(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("RssKey") && !err.contains("::"), "{err}");
    }
}

#[test]
fn zero_queues_is_refused_at_parsing_everywhere() {
    let flow = ["--src", "10.0.0.2", "--dst", "10.0.0.1"];
    let synthetic = ["plan", "--synthetic", "package:1 core:2 pu:1"];
    for args in [
        &["testbed", "up", "--bed", "x", "--queues", "0"][..],
        &[&["rss", "hash", "--queues", "0"][..], &flow].concat(),
        &[
            "hint", "--queues", "0", "--src", "10.0.0.2", "--sport", "1", "--dport", "2",
        ],
        &["udp-echo", "--queues", "0"],
        &["echo-server", "--queues", "0"],
        &["http-server", "--queues", "0"],
        &["bulk-sink", "--queues", "0"],
        &["demo", "--queues", "0"],
        &[&synthetic[..], &["--queues", "0"]].concat(),
    ] {
        usage_error(args, &["--queues", "at least 1"]);
        let err = String::from_utf8_lossy(&flowlane(args).stderr).to_string();
        assert!(!err.contains("indirection table"), "{err}");
    }
}

#[test]
fn frames_per_queue_must_be_a_power_of_two_in_range_for_every_service() {
    // `demo` makes its own bed and takes no data-path flags.
    for cmd in ["udp-echo", "echo-server", "http-server", "bulk-sink"] {
        for bad in ["1000", "2048", "2097152", "lots"] {
            usage_error(
                &[cmd, "--frames-per-queue", bad],
                &["--frames-per-queue", "power of two from 4096 to 1048576"],
            );
        }
    }
}

#[test]
fn port_zero_is_refused_at_parsing_for_every_service() {
    for cmd in [
        "udp-echo",
        "echo-server",
        "http-server",
        "bulk-sink",
        "demo",
    ] {
        usage_error(&[cmd, "--port", "0"], &["--port", "must be 1-65535"]);
    }
}

#[test]
fn set_rss_takes_a_list_as_spread_and_refuses_the_old_list_spelling() {
    usage_error(
        &["testbed", "set-rss", "--bed", "x", "--queues", "0,2"],
        &["--queues", "--spread Q,Q"],
    );
    let help = flowlane(&["testbed", "set-rss", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--spread"), "{help}");
    assert!(!help.contains("--queues"), "{help}");
}

#[test]
fn bed_is_the_flag_everywhere_and_the_old_names_are_hidden_aliases() {
    for (cmd, old) in [
        (&["testbed", "up"][..], None),
        (&["testbed", "down"], None),
        (&["testbed", "status"], None),
        (&["testbed", "set-rss"], None),
        (&["testbed", "impair"], None),
        (&["testbed", "delay"], None),
        (&["hint"], Some("--testbed")),
        (&["rss", "hash"], Some("--testbed")),
        (&["udp-ping"], Some("--testbed")),
        (&["udp-echo"], None),
        (&["http-server"], None),
        (&["demo"], None),
    ] {
        let o = flowlane(&[cmd, &["--help"]].concat());
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(help.contains("--bed <"), "{cmd:?}: {help}");
        assert!(!help.contains("--name"), "{cmd:?}: {help}");
        assert!(
            !help.contains(old.unwrap_or("--testbed")),
            "{cmd:?}: {help}"
        );
    }
    // The old spellings still parse: the commands fail later (no such bed,
    // or not root), never as bad usage (exit 2).
    let flow = ["--src", "10.0.0.2", "--dst", "10.0.0.1"];
    for args in [
        &["testbed", "status", "--name", "tnosuch16"][..],
        &["testbed", "impair", "--name", "tnosuch16"],
        &["testbed", "set-rss", "--name", "tnosuch16", "--spread", "0"],
        &["testbed", "delay", "--name", "tnosuch16", "--ms", "1"],
        &[
            "hint",
            "--testbed",
            "tnosuch16",
            "--src",
            "10.0.0.2",
            "--sport",
            "1",
            "--dport",
            "2",
        ],
        &[&["rss", "hash", "--testbed", "tnosuch16"][..], &flow].concat(),
        &[
            "udp-ping",
            "--testbed",
            "tnosuch16",
            "--queue",
            "0",
            "--dst",
            "10.99.0.2:7",
        ],
    ] {
        let o = flowlane(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
    }
}

#[test]
fn a_bed_that_is_not_up_is_named_with_the_command_that_starts_it() {
    if !require_root("a_bed_that_is_not_up_is_named_with_the_command_that_starts_it") {
        return;
    }
    for args in [
        &["testbed", "status", "--bed", "tnosuch16"][..],
        &["testbed", "status", "--name", "tnosuch16"],
        &["udp-echo", "--bed", "tnosuch16"],
        &["http-server", "--bed", "tnosuch16"],
    ] {
        let o = flowlane(args);
        one_line_error(&o, "no test bed named tnosuch16 is up");
        one_line_error(&o, "flowlane testbed up --bed tnosuch16");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("os error"), "{err}");
    }
}

/// Runs `flowlane <args>` as user nobody (with `setpriv`), or `None` when
/// that is not possible here (the reason printed).
fn as_nobody(args: &[&str]) -> Option<std::process::Output> {
    let o = flowlane_tests::as_nobody(args).output();
    match o {
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("setpriv:") => {
            eprintln!("skipping: setpriv cannot drop to nobody: {}", text(&o));
            None
        }
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("skipping: no setpriv ({e})");
            None
        }
    }
}

#[test]
fn not_root_is_refused_with_a_hint() {
    if !require_root("not_root_is_refused_with_a_hint (needs root to drop to nobody)") {
        return;
    }
    let Some(o) = as_nobody(&["testbed", "up", "--bed", "nobody"]) else {
        return;
    };
    one_line_error(&o, "needs root");
}

/// Root without some of the capabilities the data path needs (a unit's
/// `CapabilityBoundingSet=`, `setpriv`, `capsh --drop`): one line naming
/// the missing one, before libbpf or `ip netns` print lines of their own
/// ("is this root?", "raise ulimit -l", "setting the network namespace
/// failed"); nothing is left attached. CAP_SYS_ADMIN stands for CAP_BPF.
#[test]
fn root_without_a_capability_is_told_which() {
    if !require_root("root_without_a_capability_is_told_which") {
        return;
    }
    let bed = Bed::up("caps", 1);
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    let inside = ["ip", "netns", "exec", bed.ns.as_str()];
    let on_xsk0 = [bin, "echo-server", "--iface", "xsk0"];
    let with_bed = [bin, "echo-server", "--bed", bed.name.as_str()];
    for (drop, within, service, needle) in [
        ("-bpf,-sys_admin", &inside[..], &on_xsk0, "without CAP_BPF"),
        (
            "-net_admin,-sys_admin",
            &inside,
            &on_xsk0,
            "without CAP_NET_ADMIN",
        ),
        ("-net_raw", &inside, &on_xsk0, "without CAP_NET_RAW"),
        ("-sys_admin", &[], &with_bed, "without CAP_SYS_ADMIN"),
    ] {
        let bounding = format!("--bounding-set={drop}");
        let setpriv = ["setpriv", "--inh-caps=-all", bounding.as_str()];
        let cmd = [within, &setpriv, service].concat();
        // Bounded: a service that (wrongly) starts is killed, not waited for.
        let child = Command::new(cmd[0])
            .args(&cmd[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting a service without a capability");
        let (o, _) = wait_bounded(child, Duration::from_secs(30), drop);
        one_line_error(&o, needle);
        one_line_error(&o, "give the process these capabilities back");
        assert!(!xdp_attached(&bed.ns, "xsk0"), "{drop}: a program stayed");
    }
    // The beds' commands need CAP_NET_ADMIN itself (veth pairs, tc), which
    // CAP_SYS_ADMIN does not stand for there, and no CAP_NET_RAW.
    let without = |drop: &str, args: &[&str]| {
        Command::new("setpriv")
            .args(["--inh-caps=-all", &format!("--bounding-set={drop}"), bin])
            .args(args)
            .output()
            .expect("setpriv")
    };
    let o = without("-net_admin", &["testbed", "up", "--bed", &bed.name]);
    one_line_error(&o, "without CAP_NET_ADMIN (veth pairs and tc programs)");
    let o = without("-net_raw", &["testbed", "status", "--bed", &bed.name]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn not_root_is_said_first_even_with_a_bed_that_is_up() {
    if !require_root(
        "not_root_is_said_first_even_with_a_bed_that_is_up (needs root to drop to nobody)",
    ) {
        return;
    }
    let bed = Bed::up("nr", 1);
    let b = bed.name.as_str();
    let flow = ["--src", "10.99.0.2", "--sport", "1", "--dport", "2"];
    for args in [
        &["http-server", "--bed", b][..],
        &["echo-server", "--bed", b],
        &["bulk-sink", "--bed", b],
        &["udp-echo", "--bed", b],
        &[
            "udp-ping",
            "--bed",
            b,
            "--queue",
            "0",
            "--dst",
            "10.99.0.2:7",
        ],
        &["testbed", "status", "--bed", b],
        &["testbed", "set-rss", "--bed", b, "--spread", "0"],
        &["testbed", "down", "--bed", b],
        &[&["hint", "--bed", b][..], &flow].concat(),
        &["demo"],
    ] {
        let Some(o) = as_nobody(args) else {
            return;
        };
        one_line_error(&o, "needs root (CAP_NET_ADMIN, CAP_BPF");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("test bed") && !err.contains("root namespace"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn udp_echo_runs_on_a_bed_and_warns_once_about_a_port_of_the_outgoing_range() {
    if !require_root("udp_echo_runs_on_a_bed_and_warns_once_about_a_port_of_the_outgoing_range") {
        return;
    }
    let bed = Bed::up("ue", 2);
    let report = std::env::temp_dir().join(format!("{}-report.json", bed.name));
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new(flowlane_bin())
        .args([
            "udp-echo", "--bed", &bed.name, "--port", "40001", "--report",
        ])
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting udp-echo --bed");
    if ready_within(&mut child, Duration::from_secs(30), || report.exists()).is_err() {
        kill_and_reap(&mut child);
        panic!("udp-echo --bed did not come up");
    }
    // It serves inside the bed: its XDP program is on the bed's xsk0.
    assert!(xdp_attached(&bed.ns, "xsk0"));
    terminate(&child);
    let (o, _) = wait_bounded(child, Duration::from_secs(10), "udp-echo --bed");
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "one warning, not one per process: {err}");
    assert!(
        warnings[0].contains("--port 40001") && warnings[0].contains("40000-44999"),
        "{err}"
    );
    assert!(warnings[0].contains("outgoing connections"), "{err}");
    let _ = std::fs::remove_file(&report);
    // A port outside the range: no warning.
    let o = flowlane(&["udp-echo", "--iface", "nosuch0", "--port", "7777"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("warning"), "{err}");
    // A report in a directory that does not exist: named, with what to do.
    let missing = std::env::temp_dir().join(format!("{}-no-such-dir", bed.name));
    let report = missing.join("r.json");
    let child = Command::new(flowlane_bin())
        .args(["udp-echo", "--bed", &bed.name, "--report"])
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting udp-echo --bed");
    let (o, _) = wait_bounded(child, Duration::from_secs(30), "udp-echo --report");
    one_line_error(
        &o,
        &format!("directory {} does not exist", missing.display()),
    );
    one_line_error(&o, "--report");
}

#[test]
fn top_level_help_promises_nothing_that_does_not_exist() {
    let o = flowlane(&["--help"]);
    let help = String::from_utf8_lossy(&o.stdout).to_lowercase();
    assert!(o.status.success());
    assert!(
        help.contains("af_xdp") && help.contains("test bed"),
        "{help}"
    );
    // Every command it lists exists (the daemon among them).
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.contains(&"daemon"), "{help}");
    assert!(commands.len() >= 10, "{commands:?}");
    for c in commands {
        let o = flowlane(&[c, "--help"]);
        assert!(o.status.success(), "flowlane {c} --help: {}", text(&o));
    }
}

#[test]
fn unknown_interface_too_many_queues_and_no_native_xdp() {
    if !require_root("unknown_interface_too_many_queues_and_no_native_xdp") {
        return;
    }
    let bed = Bed::up("err", 2);
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    let o = in_ns(&bed.ns, &[bin, "udp-echo", "--iface", "nosuch0"]);
    one_line_error(&o, "no interface nosuch0");
    let o = in_ns(
        &bed.ns,
        &[bin, "udp-echo", "--iface", "xsk0", "--queues", "8"],
    );
    one_line_error(&o, "has 2 receive queues");
    // Loopback has no native (driver) XDP.
    let o = in_ns(&bed.ns, &[bin, "udp-echo", "--iface", "lo"]);
    one_line_error(&o, "native XDP");
}

/// An interface whose MTU is past what XDP takes without multi-buffer
/// frames (veth refuses the program with ERANGE): one line naming the MTU
/// and the command that lowers it, libbpf's own line not printed apart.
#[test]
fn an_mtu_too_large_for_xdp_is_said_with_the_fix() {
    if !require_root("an_mtu_too_large_for_xdp_is_said_with_the_fix") {
        return;
    }
    let bed = Bed::up("jumbo", 1);
    for (ns, dev) in [(&bed.ns, "xsk0"), (&bed.peer_ns, "peer0")] {
        let o = in_ns(ns, &["ip", "link", "set", "dev", dev, "mtu", "9000"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    // Bounded: a service that (wrongly) starts is killed, not waited for.
    let child = Command::new(flowlane_bin())
        .args(["echo-server", "--bed", &bed.name])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting echo-server on a 9000-byte MTU");
    let (o, _) = wait_bounded(child, Duration::from_secs(30), "echo-server");
    one_line_error(&o, "failed with its MTU at 9000");
    one_line_error(&o, "ip link set dev xsk0 mtu 1500");
    assert!(!xdp_attached(&bed.ns, "xsk0"), "a program stayed");
}

/// bpffs not mounted where a command looks for a bed's pinned maps (a
/// mount namespace of its own, an unmount): one line saying so and how to
/// mount it, not "is the test bed up?" of a bed that is.
#[test]
fn a_missing_bpffs_is_said_as_such() {
    if !require_root("a_missing_bpffs_is_said_as_such") {
        return;
    }
    let bed = Bed::up("nobpffs", 1);
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    for args in [
        &["echo-server", "--bed", bed.name.as_str()][..],
        &["testbed", "status", "--bed", bed.name.as_str()],
    ] {
        // A mount namespace of its own, bpffs unmounted there only (every
        // mount stacked on /sys/fs/bpf); the host's stays.
        let script = format!(
            "while mountpoint -q /sys/fs/bpf; do umount /sys/fs/bpf || exit 99; done; exec {bin} {}",
            args.join(" ")
        );
        // Bounded: a service that (wrongly) starts is killed, not waited for.
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare");
        let (o, _) = wait_bounded(child, Duration::from_secs(30), args[0]);
        one_line_error(&o, "bpffs is not mounted on /sys/fs/bpf");
        one_line_error(&o, "mount -t bpf bpf /sys/fs/bpf");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("is the test bed up"), "{args:?}: {err}");
    }
}

/// An open-files limit too low for the data path: a soft one is raised
/// to the hard one and the service starts; a hard one is one line saying
/// so and what to do (libbpf's lines and "failed to duplicate map file
/// descriptor" before).
#[test]
fn an_open_files_limit_too_low_is_raised_or_said() {
    if !require_root("an_open_files_limit_too_low_is_raised_or_said") {
        return;
    }
    let bed = Bed::up("nofile", 1);
    let bin = flowlane_bin();
    let under = |ulimit: &str| {
        let script = format!(
            "{ulimit} 12 && exec timeout -s TERM 5 {} echo-server --bed {}",
            bin.display(),
            bed.name
        );
        // Bounded twice: timeout(1) ends a service that starts.
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh");
        wait_bounded(child, Duration::from_secs(30), ulimit).0
    };
    let o = under("ulimit -n");
    one_line_error(&o, "may open 12 (its hard limit): raise it (ulimit -n");
    assert!(!xdp_attached(&bed.ns, "xsk0"), "a program stayed");
    let o = under("ulimit -Sn");
    // Served until timeout(1)'s SIGTERM, then stopped cleanly.
    assert_eq!(o.status.code(), Some(124), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("flowlane: TCP on 1 queues of xsk0"), "{err}");
    assert!(!err.contains("error"), "{err}");
}

#[test]
fn fewer_queues_than_the_nic_are_refused_unless_its_table_is_on_them() {
    let test = "fewer_queues_than_the_nic_are_refused_unless_its_table_is_on_them";
    if !require_root(test) {
        return;
    }
    // The bed's table spreads over both queues: a service on queue 0 alone
    // would lose flowlane's frames the NIC hashes to queue 1.
    let bed = Bed::up("fq", 2);
    for cmd in ["udp-echo", "echo-server"] {
        // Bounded: a service that (wrongly) starts is killed, not waited
        // for.
        let child = Command::new(flowlane_bin())
            .args([cmd, "--bed", &bed.name, "--queues", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting a service with --queues 1");
        let (o, _) = wait_bounded(child, Duration::from_secs(30), cmd);
        one_line_error(&o, "serving 1 of xsk0's 2 receive queues");
        let err = String::from_utf8_lossy(&o.stderr);
        for what in ["to queue 1", "--queues 2", "ethtool -L", "set-rss"] {
            assert!(err.contains(what), "{cmd}: {what:?} in {err}");
        }
        assert!(!xdp_attached(&bed.ns, "xsk0"), "{cmd} left its program");
    }
    // The table on queue 0 alone: queue 1 gets nothing of flowlane's.
    let o = flowlane(&["testbed", "set-rss", "--bed", &bed.name, "--spread", "0"]);
    assert!(o.status.success(), "{}", text(&o));
    let report = std::env::temp_dir().join(format!("{}-report.json", bed.name));
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new(flowlane_bin())
        .args(["udp-echo", "--bed", &bed.name, "--queues", "1", "--report"])
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting udp-echo --bed --queues 1");
    if ready_within(&mut child, Duration::from_secs(30), || report.exists()).is_err() {
        kill_and_reap(&mut child);
        let _ = std::fs::remove_file(&report);
        panic!("udp-echo --queues 1 did not come up with the table on queue 0");
    }
    terminate(&child);
    let (o, _) = wait_bounded(child, Duration::from_secs(10), "udp-echo --queues 1");
    let _ = std::fs::remove_file(&report);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn an_active_service_without_its_ports_reserved_is_refused() {
    if !require_root("an_active_service_without_its_ports_reserved_is_refused") {
        return;
    }
    // The bed reserves flowlane's outgoing range; a host that does not is
    // told to, before anything is attached.
    let bed = Bed::up("rsv", 1);
    let o = in_ns(
        &bed.ns,
        &["sysctl", "-qw", "net.ipv4.ip_local_reserved_ports="],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bin = flowlane_bin();
    let o = in_ns(
        &bed.ns,
        &[
            bin.to_str().unwrap(),
            "bulk-source",
            "--iface",
            "xsk0",
            "--connect",
            "10.99.0.2:9",
        ],
    );
    one_line_error(&o, "net.ipv4.ip_local_reserved_ports");
    assert!(!xdp_attached(&bed.ns, "xsk0"), "nothing left attached");
}

#[test]
fn delay_line_misuse() {
    let o = flowlane(&["testbed", "delay", "--bed", "x", "--ms", "soon"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // A queue without a rate is a usage error.
    let o = flowlane(&[
        "testbed",
        "delay",
        "--bed",
        "x",
        "--ms",
        "5",
        "--queue-kb",
        "64",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--rate-mbit"), "{}", text(&o));
    if !require_root("delay_line_misuse (needs root for a test bed)") {
        return;
    }
    let o = flowlane(&["testbed", "delay", "--bed", "tnosuchbed", "--ms", "10"]);
    one_line_error(&o, "no test bed named tnosuchbed is up");
    let bed = Bed::up("tdm", 1);
    let o = flowlane(&["testbed", "delay", "--bed", &bed.name, "--ms", "0"]);
    one_line_error(&o, "more than 0");
    let o = flowlane(&[
        "testbed", "delay", "--bed", &bed.name, "--ms", "5", "--lanes", "0",
    ]);
    one_line_error(&o, "at least one lane");
    let o = flowlane(&[
        "testbed",
        "delay",
        "--bed",
        &bed.name,
        "--ms",
        "5",
        "--rate-mbit",
        "0",
    ]);
    one_line_error(&o, "--rate-mbit 0: the rate must be more than 0");
    let o = flowlane(&[
        "testbed",
        "delay",
        "--bed",
        &bed.name,
        "--ms",
        "5",
        "--rate-mbit",
        "50",
        "--lanes",
        "2",
    ]);
    one_line_error(&o, "leave --lanes out");
    let o = flowlane(&[
        "testbed",
        "delay",
        "--bed",
        &bed.name,
        "--ms",
        "5",
        "--rate-mbit",
        "50",
        "--queue-kb",
        "0",
    ]);
    one_line_error(&o, "--queue-kb 0");
    // A second line on the same bed is refused while the first runs.
    let mut first = Command::new(flowlane_bin())
        .args(["testbed", "delay", "--bed", &bed.name, "--ms", "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(first.stdout.take().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut out, &mut ready).unwrap();
    assert!(ready.contains("delaying"), "{ready}");
    let o = flowlane(&["testbed", "delay", "--bed", &bed.name, "--ms", "5"]);
    one_line_error(&o, "already runs");
    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(first.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("delay line stopped"), "{rest}");
}

/// `testbed delay --socket-buffer-mb` past what the kernel takes for a
/// socket (1023 MiB) is refused while parsing, not cut without a word.
#[test]
fn a_delay_line_socket_buffer_past_the_kernel_s_cap_is_refused() {
    for mb in ["99999999", "1024", "0"] {
        usage_error(
            &[
                "testbed",
                "delay",
                "--bed",
                "x",
                "--ms",
                "5",
                "--socket-buffer-mb",
                mb,
            ],
            &["--socket-buffer-mb", "give 1 to 1023"],
        );
    }
}

#[test]
fn a_closed_stdout_is_not_a_crash() {
    // `flowlane plan ... | head -0`: the reader is gone before the output.
    let mut child = Command::new(flowlane_bin())
        .args([
            "plan",
            "--synthetic",
            "package:2 numa:2 core:8 pu:2",
            "--queues",
            "32",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {err}", o.status);
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn files_named_by_flags_are_named_with_the_flag() {
    let o = flowlane(&["hint", "--flows-file", "/nonexistent/flows.txt"]);
    one_line_error(
        &o,
        "--flows-file /nonexistent/flows.txt: there is no such file",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("os error"), "{err}");
    let o = flowlane(&["plan", "--topology-xml", "/proc/self/status"]);
    one_line_error(
        &o,
        "--topology-xml /proc/self/status is not an hwloc topology",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("Errno") && !err.contains("Some("), "{err}");
}

/// A network namespace with a veth pair (`va`/`vb`), removed on drop: a
/// NIC without RSS (veth has no get_rxfh/set_rxfh).
struct VethNs(String);

impl VethNs {
    fn new() -> VethNs {
        let ns = flowlane_tests::unique_name("nic");
        let ok = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("running ip");
            assert!(o.status.success(), "ip {args:?}: {}", text(&o));
        };
        ok(&["netns", "add", &ns]);
        let guard = VethNs(ns);
        ok(&[
            "-n", &guard.0, "link", "add", "va", "type", "veth", "peer", "name", "vb",
        ]);
        guard
    }
}

impl Drop for VethNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn nic_rss_on_a_nic_without_rss_is_one_line() {
    usage_error(
        &["nic", "set-rss", "--iface", "va", "--entry", "3"],
        &["--entry", "BUCKET=QUEUE"],
    );
    let o = flowlane(&[
        "nic", "set-rss", "--iface", "va", "--equal", "2", "--table", "0,1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = flowlane(&["nic", "set-rss", "--iface", "va"]);
    assert_eq!(o.status.code(), Some(2), "nothing to change: {}", text(&o));
    if !require_root("nic_rss_on_a_nic_without_rss_is_one_line") {
        return;
    }
    let ns = VethNs::new();
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    let o = in_ns(&ns.0, &[bin, "nic", "rss", "--iface", "va"]);
    one_line_error(&o, "va does not support RSS (driver has no get_rxfh)");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let key = vec!["6d"; 40].join(":");
    for change in [
        &["--equal", "2"][..],
        &["--table", "0,1,0,1"],
        &["--entry", "3=1"],
        &["--key", &key],
    ] {
        let mut args = vec![bin, "nic", "set-rss", "--iface", "va"];
        args.extend_from_slice(change);
        let o = in_ns(&ns.0, &args);
        one_line_error(
            &o,
            "va does not support changing RSS (driver has no set_rxfh)",
        );
        assert_eq!(o.status.code(), Some(1), "{change:?}: {}", text(&o));
    }
    let o = in_ns(&ns.0, &[bin, "nic", "rss", "--iface", "nosuch0"]);
    one_line_error(&o, "no interface nosuch0");
}

#[test]
fn the_kernel_backend_refuses_what_only_xdp_does() {
    // clap's own message for a choice, with the choices.
    let o = flowlane(&["echo-server", "--backend", "dpdk"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("possible values: xdp, kernel"),
        "{}",
        text(&o)
    );
    let o = flowlane(&["echo-server", "--backend", "kernel", "--rebalance", "auto"]);
    one_line_error(&o, "--rebalance needs --backend xdp");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = flowlane(&[
        "echo-server",
        "--backend",
        "kernel",
        "--mode",
        "queue-pair",
        "--rebalance",
        "auto",
    ]);
    one_line_error(&o, "--rebalance needs --backend xdp");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // The loop's price: nothing to price without buckets.
    let o = flowlane(&["echo-server", "--backend", "kernel", "--move-cost", "fixed"]);
    one_line_error(&o, "--move-cost needs --backend xdp");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // An explicit `--rebalance off`: no move to price, on any backend.
    for backend in ["xdp", "kernel"] {
        let o = flowlane(&[
            "echo-server",
            "--backend",
            backend,
            "--rebalance",
            "off",
            "--move-cost",
            "fixed",
        ]);
        one_line_error(&o, "--move-cost");
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    }
    let o = flowlane(&["echo-server", "--rebalance", "off", "--move-cost", "fixed"]);
    one_line_error(
        &o,
        "--rebalance off makes none: drop --move-cost, or use --rebalance auto",
    );
    usage_error(
        &["echo-server", "--mode", "queue-pair", "--app-threads", "0"],
        &["--app-threads", "at least 1"],
    );
}

/// The kernel backend serves on Linux's TCP sockets: the flags that
/// configure flowlane's TCP and data path are refused with it (one line,
/// before root or a bed is needed), in either mode, not silently ignored;
/// `--congestion` and `--ecn` at their defaults are no choice and pass.
#[test]
fn the_kernel_backend_refuses_flowlane_s_tcp_flags() {
    for mode in ["rtc", "queue-pair"] {
        for flags in [
            &["--msl-ms", "100"][..],
            &["--busy-poll"],
            &["--frames-per-queue", "65536"],
            &["--copy-receive"],
            &["--congestion", "newreno"],
            &["--ecn", "on"],
        ] {
            let args = [
                &["echo-server", "--backend", "kernel", "--mode", mode][..],
                flags,
            ]
            .concat();
            let o = flowlane(&args);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
            one_line_error(
                &o,
                &format!(
                    "{} configures flowlane's TCP and data path, which --backend kernel does not use",
                    flags[0]
                ),
            );
            one_line_error(&o, "drop it, or use --backend xdp");
        }
    }
    let o = flowlane(&[
        "bulk-sink",
        "--backend",
        "kernel",
        "--copy-receive",
        "--ecn",
        "off",
    ]);
    one_line_error(&o, "--copy-receive, --ecn configure flowlane's TCP");
    // The defaults named are no choice: what fails next is the interface.
    let o = flowlane(&[
        "echo-server",
        "--backend",
        "kernel",
        "--congestion",
        "cubic",
        "--ecn",
        "accept",
        "--iface",
        "flowlane-no-such-if",
    ]);
    assert!(!o.status.success());
    assert!(!text(&o).contains("does not use"), "{}", text(&o));
}

/// `--app-threads` sizes queue-pair mode: without `--mode queue-pair` it
/// is refused in one line, not ignored.
#[test]
fn app_threads_without_queue_pair_mode_are_refused() {
    for mode in [&[][..], &["--mode", "rtc"]] {
        for cmd in [
            &["echo-server"][..],
            &["bulk-source", "--connect", "10.99.0.2:5001"],
        ] {
            let args = [cmd, &["--app-threads", "2"][..], mode].concat();
            let o = flowlane(&args);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
            one_line_error(&o, "--app-threads needs --mode queue-pair");
        }
    }
}

/// `bulk-source --connections 0` would be a run that never ends: a usage
/// error.
#[test]
fn bulk_source_needs_a_connection() {
    usage_error(
        &[
            "bulk-source",
            "--connect",
            "10.99.0.2:5001",
            "--connections",
            "0",
        ],
        &["--connections", "at least 1"],
    );
}

/// `--report` over something other than a regular file is a usage error
/// before anything starts: the report is renamed over its path, and
/// `--report /dev/full` replaced the device node by the JSON. (An interface
/// that is not there: were the check gone, the run would stop at it.)
#[test]
fn a_report_path_that_is_no_file_is_refused() {
    let dir = flowlane_tests::OpenDir::new("report-fifo");
    let fifo = dir.path("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let link = dir.path("link");
    std::os::unix::fs::symlink(dir.path("elsewhere.json"), &link).unwrap();
    for (path, what) in [(&fifo, "FIFO"), (&link, "symbolic link")] {
        let p = path.to_str().unwrap();
        for cmd in ["udp-echo", "echo-server"] {
            usage_error(
                &[cmd, "--iface", "nosuch57", "--report", p],
                &["--report", what, "give --report a file's path"],
            );
        }
    }
}

/// A list of queues with something else in it says what a list is, not
/// Rust's "invalid digit found in string" / "cannot parse integer from
/// empty string".
#[test]
fn a_queue_list_entry_that_is_no_number_says_what_to_give() {
    let flow = ["--src", "10.0.0.2", "--sport", "1", "--dport", "2"];
    let hint = [&["hint", "--table", "0,1,x"][..], &flow].concat();
    let spread = ["testbed", "set-rss", "--bed", "x", "--spread", ""];
    let table = [
        "nic", "set-rss", "--iface", "nosuch57", "--table", "0,1,two",
    ];
    let rss_table = ["echo-server", "--iface", "nosuch57", "--rss-table", "0,a"];
    for args in [&hint[..], &spread[..], &table[..], &rss_table[..]] {
        usage_error(
            args,
            &["not a queue number", "separated by commas, e.g. 0,1,2,3"],
        );
    }
}

/// `--run-dir` naming a file is refused: it read as a folder without
/// services ("0 services", exit 0), a typo said nowhere.
#[test]
fn a_run_dir_that_is_a_file_is_refused() {
    let dir = flowlane_tests::OpenDir::new("rundir-file");
    let file = dir.path("not-a-folder");
    std::fs::write(&file, "").unwrap();
    let f = file.to_str().unwrap();
    for args in [
        &["status", "--daemon-socket", "none", "--run-dir", f][..],
        // (An interface that is not there: were the check gone, the
        // daemon would stop at it, not run on.)
        &[
            "daemon",
            "--socket",
            "none",
            "--iface",
            "nosuch57",
            "--run-dir",
            f,
        ][..],
    ] {
        usage_error(args, &["--run-dir", "is not a folder", "/run/flowlane"]);
    }
}

/// A count of queues past what the flag holds says the bound, not
/// "expected a number of queues (at least 1)" (said of 1000000).
#[test]
fn too_many_queues_says_the_bound() {
    usage_error(
        &[
            "rss", "hash", "--src", "10.0.0.2", "--dst", "10.0.0.1", "--queues", "1000000",
        ],
        &["--queues", "at most 65535"],
    );
}

/// `bulk-source --connections` past the local ports one server can be
/// reached from is a usage error, before anything starts (4294967295 was
/// taken, and the process grew to 22 GB opening them until the OOM killer
/// ended it); past the type's range too. (An interface that is not there:
/// were the bound gone, the run would stop at it, not open anything.)
#[test]
fn bulk_source_connections_have_a_bound() {
    for many in ["65536", "4294967295", "99999999999999999999999"] {
        usage_error(
            &[
                "bulk-source",
                "--iface",
                "nosuch57",
                "--connect",
                "10.99.0.2:5001",
                "--connections",
                many,
            ],
            &["--connections", "at most 65535", "local port"],
        );
    }
}

/// `bulk-source --connect` to port 0 is refused while parsing: no server
/// listens there (the run started and every connect failed "invalid
/// address").
#[test]
fn bulk_source_connects_to_a_port_of_1_to_65535() {
    for (to, want) in [
        ("10.99.0.2:0", "a port must be 1-65535"),
        ("[fd00::1]:0", "a port must be 1-65535"),
        ("10.99.0.2", "give ADDR:PORT"),
    ] {
        usage_error(
            &["bulk-source", "--iface", "nosuch57", "--connect", to],
            &["--connect", to, want],
        );
    }
}

/// `bulk-source --connect` takes RFC 4007 §11's zone (`[fe80::1%IF]:P`,
/// which Rust's parser refuses), looked up when used; on kernel sockets a
/// link-local server with no interface to scope it by is refused in one
/// line before anything starts (it started, then failed "connect: invalid
/// address").
#[test]
fn a_link_local_server_is_scoped_by_its_zone_or_refused() {
    let source = |to: &str| {
        flowlane(&[
            "bulk-source",
            "--backend",
            "kernel",
            "--iface",
            "nosuch57",
            "--connect",
            to,
            "--control-socket",
            "none",
            "--daemon-socket",
            "none",
        ])
    };
    for (to, want) in [
        (
            "[fe80::1]:5001",
            "--connect [fe80::1]:5001: fe80::1 is link-local and nosuch57 is no interface here",
        ),
        (
            "[fe80::1%nosuch57]:5001",
            "--connect [fe80::1%nosuch57]:5001: no interface nosuch57 here",
        ),
        // A zone naming an interface: taken, past the address (the run
        // then stops at the missing --iface).
        ("[fe80::1%lo]:5001", "no interface nosuch57 in this network"),
    ] {
        let o = source(to);
        assert_eq!(o.status.code(), Some(1), "{to}: {}", text(&o));
        one_line_error(&o, want);
    }
    usage_error(
        &["bulk-source", "--connect", "[fe80::1%]:5001"],
        &["--connect", "give ADDR:PORT"],
    );
}

/// `daemon --metrics` takes a zone (`[fe80::1%IF]:P`) and refuses, while
/// parsing, a link-local address without one, which bind(2) refuses.
#[test]
fn a_link_local_metrics_address_needs_its_zone() {
    usage_error(
        &["daemon", "--dry-run", "--metrics", "[fe80::1]:9477"],
        &["--metrics", "fe80::1 is link-local: name its interface"],
    );
    usage_error(
        &[
            "daemon",
            "--dry-run",
            "--metrics",
            "[fe80::1%nosuch57]:9477",
        ],
        &["--metrics", "no interface nosuch57 here"],
    );
}

/// On an IPv6-only interface, `bulk-source` to an IPv4 server is refused
/// before the start, in one line, with or without the server's MAC given
/// by `--neighbor` (it started, then failed "connect: invalid address").
#[test]
fn a_server_of_a_family_the_interface_lacks_is_refused_at_once() {
    if !require_root("a_server_of_a_family_the_interface_lacks_is_refused_at_once") {
        return;
    }
    let bed = Bed::up("v6b57f", 1);
    bed.remove_ipv4();
    let neighbor = "10.99.0.2=02:00:00:00:00:02";
    for given in [&["--neighbor", neighbor][..], &[]] {
        let mut cmd = Command::new(flowlane_bin());
        cmd.args([
            "bulk-source",
            "--bed",
            &bed.name,
            "--connect",
            "10.99.0.2:5001",
        ])
        .args(["--control-socket", "none", "--daemon-socket", "none"])
        .args(["--timeout", "30"])
        .args(given)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let (o, _) = wait_bounded(cmd.spawn().unwrap(), Duration::from_secs(30), "bulk-source");
        assert_eq!(o.status.code(), Some(1), "{given:?}: {}", text(&o));
        one_line_error(
            &o,
            "xsk0 has no IPv4 address to open a connection to 10.99.0.2 from",
        );
    }
}

/// `--app-threads` past one per network core is refused in one line
/// saying the bound: a thread more would serve no connection.
#[test]
fn app_threads_past_one_per_core_are_refused() {
    if !require_root("app_threads_past_one_per_core_are_refused") {
        return;
    }
    let bed = Bed::up("apthr", 2);
    for n in ["3", "100000"] {
        // Bounded: a service that took the flag would serve on.
        let child = Command::new(flowlane_bin())
            .args(["echo-server", "--bed", &bed.name, "--mode", "queue-pair"])
            .args(["--app-threads", n, "--control-socket", "none"])
            .args(["--daemon-socket", "none"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (o, _) = wait_bounded(child, Duration::from_secs(20), "echo-server");
        assert_eq!(o.status.code(), Some(1), "{n}: {}", text(&o));
        one_line_error(
            &o,
            &format!("--app-threads {n}: at most 2, one per network core"),
        );
    }
}

/// `hyper-server --tokio-baseline` serves on tokio's own listener: the
/// flags that configure flowlane's TCP and data path are refused with it (one line,
/// before root or a bed is needed), not silently ignored.
#[test]
fn hyper_server_s_tokio_baseline_refuses_flowlane_s_flags() {
    for flags in [
        &["--backend", "kernel"][..],
        &["--backend", "xdp"],
        &["--mode", "rtc"],
        &["--workers", "2"],
        &["--app-threads", "2"],
        &["--rebalance", "off"],
        &["--move-cost", "fixed"],
        &["--msl-ms", "100"],
        &["--control-socket", "/tmp/flowlane-unused.sock"],
        &["--daemon-socket", "/tmp/flowlane-unused.sock"],
        &["--busy-poll"],
        &["--frames-per-queue", "65536"],
        &["--copy-receive"],
        &["--congestion", "newreno"],
        &["--ecn", "on"],
    ] {
        let args = [&["hyper-server", "--tokio-baseline"][..], flags].concat();
        let o = flowlane(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        one_line_error(
            &o,
            &format!(
                "flowlane's TCP and data path, which {} configures",
                flags[0]
            ),
        );
        one_line_error(&o, "drop it, or drop --tokio-baseline");
    }
}

/// With `--queues`, the tokio baseline (kernel TCP) needs no interface:
/// `--iface` only gives the default worker count.
#[test]
fn hyper_server_s_tokio_baseline_needs_no_interface_with_queues() {
    if !require_root("hyper_server_s_tokio_baseline_needs_no_interface_with_queues") {
        return;
    }
    let bed = Bed::up("hyb", 1);
    let bin = flowlane_bin();
    let bin = bin.to_str().unwrap();
    let base = [
        bin,
        "hyper-server",
        "--tokio-baseline",
        "--iface",
        "nosuch0",
    ];
    let o = in_ns(&bed.ns, &base);
    one_line_error(&o, "give --queues N");
    let flags = ["--queues", "1", "--port", "8089", "--timeout", "1"];
    let o = in_ns(&bed.ns, &[&base[..], &flags].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("nosuch0"), "{err}");
    assert!(err.contains("timed out after 1 s"), "it served: {err}");
}

/// The commands that read an interface by `--iface` and have no `--bed`
/// (`irq`, `plan`, `nic caps`, `nic qstats`) say, for an interface this
/// namespace lacks, how to reach a test bed's: from inside its namespace,
/// not with a `--bed` they would refuse.
#[test]
fn commands_without_bed_say_how_to_reach_a_bed_s_interface() {
    for cmd in [
        &["irq", "show"][..],
        &["irq", "apply"],
        &["plan"],
        &["nic", "caps"],
        &["nic", "qstats"],
    ] {
        let o = flowlane(&[cmd, &["--iface", "nosuch0"]].concat());
        assert_eq!(o.status.code(), Some(1), "{cmd:?}: {}", text(&o));
        one_line_error(&o, "no interface nosuch0 in this network namespace");
        one_line_error(
            &o,
            "on a test bed, run it inside the bed's namespace: `ip netns exec flowlane-NAME \
             flowlane ...`",
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("--bed"), "{cmd:?}: {err}");
    }
}

/// `bulk-source` to a peer it cannot reach fails fast and says why: one
/// off the bed's networks (where the kernel's connect fails at once with
/// ENETUNREACH) is refused at once, in one line; an on-link address
/// nothing answers ARP for ends its open as timed out within seconds (the
/// kernel's ARP gives up after about 3 s: EHOSTUNREACH), not two minutes
/// of silent retransmissions on.
#[test]
fn an_unreachable_peer_fails_fast_and_says_why() {
    if !require_root("an_unreachable_peer_fails_fast_and_says_why") {
        return;
    }
    let bed = Bed::up("dp53nr", 1);
    let source = |to: &str| {
        Command::new(flowlane_bin())
            .args(["bulk-source", "--bed", &bed.name, "--connect", to])
            .args(["--control-socket", "none", "--daemon-socket", "none"])
            .args(["--timeout", "150"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for (to, ip) in [
        ("192.0.2.1:5001", "192.0.2.1"),
        ("[fd00::2]:5001", "fd00::2"),
    ] {
        let (o, took) = wait_bounded(source(to), Duration::from_secs(30), "bulk-source");
        assert_eq!(o.status.code(), Some(1), "{to}: {}", text(&o));
        one_line_error(&o, &format!("no route to {ip} ("));
        one_line_error(&o, "--neighbor IP=MAC");
        assert!(took < Duration::from_secs(15), "{to}: {took:?}");
    }
    let (o, took) = wait_bounded(
        source("10.99.0.77:5001"),
        Duration::from_secs(60),
        "bulk-source",
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let line: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &serde_json::Value| v["event"] == "source")
        .unwrap_or_else(|| panic!("no source line: {}", text(&o)));
    assert_eq!(line["close"], "Timeout", "{line}");
    let secs = line["secs"].as_f64().unwrap();
    assert!((2.5..10.0).contains(&secs), "ended after {secs} s: {line}");
    assert!(took < Duration::from_secs(40), "{took:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no Ethernet address for 10.99.0.77"),
        "the reason is said: {err}"
    );
}
