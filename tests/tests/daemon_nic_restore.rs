//! A daemon owning a NIC that is killed (SIGKILL, a crash: systemd's
//! `Restart=on-failure` starts another) puts nothing back itself; the one
//! started after it finds the originals in the NIC's state file (written
//! before the first change) and puts those back when it stops, not the
//! killed daemon's settings it finds on the NIC. On the test bed's veth:
//! threaded NAPI (off before the first daemon) and the NAPI threads'
//! affinities (with threaded NAPI on before it).

mod tcp_common;

use flowlane_tests::{
    in_ns, napi_threads, put_back, require_root, text, threaded, Bed, NicDaemon, NicDir,
};
use tcp_common::*;

#[test]
fn a_daemon_started_after_one_that_was_killed_puts_the_nic_back_as_it_was() {
    let test = "a_daemon_started_after_one_that_was_killed_puts_the_nic_back_as_it_was";
    if !require_root(test) {
        return;
    }
    let bed = Bed::up("dkill", 2);
    let dir = NicDir::new("dkill");
    // A service on the veth: its XDP program gives the veth NAPI.
    let _service = start(&bed, &dir.echo_server(), 120);

    // Threaded NAPI off before: the first daemon switches it on, and is
    // killed; the next one finds it on and switches it off as it stops.
    assert_eq!(threaded(&bed), "0", "a fresh bed has threaded NAPI off");
    let first = NicDaemon::start_in(&bed, &dir);
    assert_eq!(first.said("changes")[0], "switched threaded NAPI on xsk0");
    let kept = dir.state_files();
    first.kill();
    assert_eq!(threaded(&bed), "1", "a killed daemon puts nothing back");
    let second = NicDaemon::start_in(&bed, &dir);
    assert!(
        second.said("changes").is_empty(),
        "the plan is in force already: {:?}",
        second.ready
    );
    let after = put_back(&second.stop_cleanly());
    assert!(
        after
            .iter()
            .any(|l| l.contains("switched threaded NAPI off on xsk0")),
        "{after:?}"
    );
    assert_eq!(threaded(&bed), "0", "back as before the first daemon");
    assert_eq!(kept.len(), 1, "kept before the change: {kept:?}");
    assert!(dir.state_files().is_empty(), "removed on a clean exit");

    // Threaded NAPI on before, its threads on their own CPUs: the first
    // daemon pins them and is killed; the next one puts them back.
    let others: Vec<u32> = napi_threads().iter().map(|t| t.0).collect();
    let o = in_ns(
        &bed.ns,
        &["sh", "-c", "echo 1 > /sys/class/net/xsk0/threaded"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let ours = || -> Vec<(u32, String)> {
        let mut t: Vec<(u32, String)> = napi_threads()
            .into_iter()
            .filter(|t| !others.contains(&t.0))
            .collect();
        t.sort();
        t
    };
    let originals = ours();
    assert_eq!(
        originals.len(),
        2,
        "one NAPI thread per queue: {originals:?}"
    );
    let first = NicDaemon::start_in(&bed, &dir);
    first.kill();
    let pinned = ours();
    assert!(
        pinned.iter().all(|(_, cpus)| cpus.parse::<u32>().is_ok()),
        "pinned one CPU each, and left so: {pinned:?}"
    );
    let second = NicDaemon::start_in(&bed, &dir);
    let after = put_back(&second.stop_cleanly());
    assert_eq!(
        ours(),
        originals,
        "the NAPI threads back on their CPUs before the first daemon: {after:?}"
    );
    assert_eq!(threaded(&bed), "1", "on before: left on");
    assert!(dir.state_files().is_empty());
}
