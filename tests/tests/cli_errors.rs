//! Bad input to the commands: one line on stderr saying what is wrong and
//! what to do, and a non-zero exit.

use std::process::Command;

use flowlane_tests::{flowlane, flowlane_bin, in_ns, require_root, text, Bed};

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

#[test]
fn bad_flags_are_usage_errors() {
    let o = flowlane(&["testbed", "up", "--queues", "many"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = flowlane(&["testbed", "up", "--name", "a/b"]);
    assert!(!o.status.success());
}

#[test]
fn malformed_key_and_table_size() {
    let o = flowlane(&["testbed", "up", "--name", "x", "--key", "zz:11"]);
    one_line_error(&o, "key");
    let o = flowlane(&["testbed", "up", "--name", "x", "--table-size", "100"]);
    one_line_error(&o, "power of two");
}

#[test]
fn not_root_is_refused_with_a_hint() {
    if !require_root("not_root_is_refused_with_a_hint (needs root to drop to nobody)") {
        return;
    }
    let bin = flowlane_bin();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["testbed", "up", "--name", "nobody"])
        .output()
        .expect("setpriv");
    one_line_error(&o, "needs root");
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

#[test]
fn delay_line_misuse() {
    let o = flowlane(&["testbed", "delay", "--name", "x", "--ms", "soon"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    if !require_root("delay_line_misuse (needs root for a test bed)") {
        return;
    }
    let o = flowlane(&["testbed", "delay", "--name", "tnosuchbed", "--ms", "10"]);
    one_line_error(&o, "is not up");
    let bed = Bed::up("tdm", 1);
    let o = flowlane(&["testbed", "delay", "--name", &bed.name, "--ms", "0"]);
    one_line_error(&o, "more than 0");
    let o = flowlane(&[
        "testbed", "delay", "--name", &bed.name, "--ms", "5", "--lanes", "0",
    ]);
    one_line_error(&o, "at least one lane");
    // A second line on the same bed is refused while the first runs.
    let mut first = Command::new(flowlane_bin())
        .args(["testbed", "delay", "--name", &bed.name, "--ms", "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(first.stdout.take().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut out, &mut ready).unwrap();
    assert!(ready.contains("delaying"), "{ready}");
    let o = flowlane(&["testbed", "delay", "--name", &bed.name, "--ms", "5"]);
    one_line_error(&o, "already runs");
    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(first.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("delay line stopped"), "{rest}");
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
