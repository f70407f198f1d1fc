//! A NIC's state file (`flowlane_daemon::nic_state`) as the daemon that
//! owns a test bed's veth keeps it: what could not be put back when the
//! daemon stopped stays in it for the next daemon (threaded NAPI, which
//! the kernel will not switch off while the veth has no NAPI instances,
//! its service stopped), and goes once put back; one daemon owns a NIC at
//! a time; a `--state-dir` that is a file is said to be one.

mod tcp_common;

use std::path::Path;

use flowlane_tests::{put_back, require_root, text, threaded, Bed, NicDaemon, NicDir};
use tcp_common::*;

#[test]
fn threaded_napi_the_kernel_keeps_on_is_kept_for_the_next_daemon() {
    let test = "threaded_napi_the_kernel_keeps_on_is_kept_for_the_next_daemon";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("dleft", 2);
    let dir = NicDir::new("dleft");
    assert_eq!(threaded(&bed), "0", "a fresh bed has threaded NAPI off");
    let echo = start(&bed, &dir.echo_server(), 120);
    let first = NicDaemon::start_in(&bed, &dir);
    assert_eq!(first.said("changes")[0], "switched threaded NAPI on xsk0");
    // The service stops: its XDP program detached, the veth has no NAPI
    // instances, and the kernel keeps threaded NAPI on (for those made
    // next) but will not switch it off.
    echo.stop();
    let (st, after) = first.stop();
    let done = put_back(&after);
    assert_eq!(st.code(), Some(1), "something is left: {done:?}");
    let left = done.last().cloned().unwrap_or_default();
    assert!(
        done.iter().any(|l| l.starts_with(
            "threaded NAPI left on: xsk0 has no NAPI instances now (a veth has them only while \
             an XDP program is attached)"
        )) && left.starts_with("xsk0 is not all put back (threaded NAPI on): kept in "),
        "{done:?}"
    );
    assert_eq!(threaded(&bed), "1");
    assert_eq!(dir.state_files().len(), 1, "kept: what is left to put back");

    // The next service gets NAPI threads again; the next daemon takes the
    // originals kept and puts them back as it stops.
    let echo = start(&bed, &dir.echo_server(), 120);
    let second = NicDaemon::start_in(&bed, &dir);
    assert!(
        second
            .said("notes")
            .iter()
            .any(|n| n.starts_with("took xsk0's originals from ")),
        "{:?}",
        second.ready
    );
    let done = put_back(&second.stop_cleanly());
    assert!(
        done.iter()
            .any(|l| l == "switched threaded NAPI off on xsk0"),
        "{done:?}"
    );
    assert_eq!(threaded(&bed), "0", "back as before the first daemon");
    assert!(dir.state_files().is_empty(), "removed once put back");
    echo.stop();
}

#[test]
fn one_daemon_owns_a_nic_and_its_state_dir_is_a_directory() {
    let test = "one_daemon_owns_a_nic_and_its_state_dir_is_a_directory";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("dlock", 1);
    let dir = NicDir::new("dlock");
    let first = NicDaemon::start_in(&bed, &dir);
    let refused = |state: &Path| {
        let o = NicDaemon::command(&bed, &dir.daemon_flags(state))
            .output()
            .expect("flowlane daemon");
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).trim_end().to_string();
        assert_eq!(err.lines().count(), 1, "{}", text(&o));
        err
    };
    // A second daemon, the same --state-dir or another: refused, naming
    // the first.
    for state in [dir.path("state"), dir.path("another-state")] {
        let err = refused(&state);
        assert!(
            err.contains(&format!(
                "another daemon (pid {}) owns xsk0: one daemon owns a NIC at a time",
                first.pid()
            )),
            "{err}"
        );
    }
    first.stop_cleanly();
    // The NIC free, a --state-dir that is a file.
    let file = dir.path("not-a-dir");
    std::fs::write(&file, "x\n").unwrap();
    let err = refused(&file);
    assert!(
        err.contains(&format!(
            "--state-dir {} is not a directory: give --state-dir a directory",
            file.display()
        )),
        "{err}"
    );
}
