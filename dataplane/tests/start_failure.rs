//! A start that fails on one queue of several releases everything and
//! says why in one line: a queue's set-up (the factory) that panics while
//! the other queues' workers run fails the start (it used to wait for good,
//! the XDP program left attached), and the interface can be served again
//! at once.

mod veth;

use std::sync::mpsc;
use std::time::Duration;

use flowlane_dataplane::umem::RingSizes;
use flowlane_dataplane::worker::QueueInfo;
use flowlane_dataplane::{Dataplane, DataplaneConfig};

use veth::{in_veth, Nop, IFACE};

fn config() -> DataplaneConfig {
    let mut cfg = DataplaneConfig::new(IFACE, &[0, 1]);
    cfg.rings = RingSizes::with_frames(RingSizes::MIN_FRAMES).unwrap();
    cfg.ports = vec![(flowlane_dataplane::Proto::Udp, 7777)];
    cfg
}

#[test]
fn a_setup_that_panics_on_one_queue_fails_the_start_and_releases_everything() {
    let name = "a_setup_that_panics_on_one_queue_fails_the_start_and_releases_everything";
    in_veth(name, || {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let started = Dataplane::start(config(), |q: &QueueInfo| {
                if q.queue == 1 {
                    // After queue 0's worker is running, whose word the
                    // start also waits for.
                    std::thread::sleep(Duration::from_millis(100));
                    panic!("set-up panicked on queue 1");
                }
                Ok::<_, std::io::Error>(Nop)
            });
            let _ = tx.send(started.map(drop).map_err(|e| e.to_string()));
        });
        let e = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(r) => r.expect_err("a start with a panicking set-up succeeded"),
            Err(_) => panic!("Dataplane::start still waits 10 s after a set-up panicked"),
        };
        eprintln!("{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        for needle in ["queue 1", "panicked", "set-up panicked on queue 1"] {
            assert!(e.contains(needle), "{needle:?} in {e}");
        }
        // Released: no XDP program of ours, and the queues (their sockets)
        // and the interface can be taken again at once.
        let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{IFACE}/ifindex"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            !flowlane_dataplane::iface::xdp_links(std::process::id()).contains(&ifindex),
            "the XDP program is still attached"
        );
        let dp = Dataplane::start(config(), |_: &QueueInfo| Ok::<_, std::io::Error>(Nop))
            .expect("serving the interface again");
        assert_eq!(dp.queues().len(), 2);
        assert!(dp.check().is_ok());
        dp.stop().expect("no queue failed");
    });
}

#[test]
fn a_setup_that_fails_on_one_queue_fails_the_start_and_releases_everything() {
    let name = "a_setup_that_fails_on_one_queue_fails_the_start_and_releases_everything";
    in_veth(name, || {
        let e = Dataplane::start(config(), |q: &QueueInfo| {
            if q.queue == 1 {
                return Err(std::io::Error::other("no room for queue 1"));
            }
            Ok(Nop)
        })
        .expect_err("a start with a failing set-up succeeded")
        .to_string();
        assert_eq!(e, "queue 1: no room for queue 1");
        let dp = Dataplane::start(config(), |_: &QueueInfo| Ok::<_, std::io::Error>(Nop))
            .expect("serving the interface again");
        dp.stop().expect("no queue failed");
    });
}
