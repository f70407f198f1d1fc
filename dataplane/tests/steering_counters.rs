//! The steering program's counters, read from a running data path for
//! every receive queue of its interface ([`Dataplane::steering_counters`],
//! what the control socket's counters answer and the daemon's page carry):
//! a fragmented datagram to flowlane's port from the kernel in the peer's
//! namespace is counted where the program left it, its first fragment
//! dropped, its later one passed to the kernel, and a whole one redirected.

mod veth;

use std::process::Command;
use std::time::{Duration, Instant};

use flowlane_dataplane::umem::RingSizes;
use flowlane_dataplane::worker::QueueInfo;
use flowlane_dataplane::{Dataplane, DataplaneConfig, Proto, SteerStats};

use veth::{in_veth, peer_ns, Nop, IFACE, LOCAL_V4};

/// Sends, from the peer's namespace, a datagram of `len` bytes to
/// flowlane's port 7777, fragmented by the kernel where it is longer than
/// the link's MTU.
fn send_from_peer(len: usize) {
    let script = format!(
        "import socket\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.IPPROTO_IP,10,0)  # IP_MTU_DISCOVER: IP_PMTUDISC_DONT\n\
         s.sendto(b'x'*{len},('{LOCAL_V4}',7777))\n"
    );
    let o = Command::new("ip")
        .args(["netns", "exec", &peer_ns(), "python3", "-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The counters of every queue, summed.
fn total(dp: &Dataplane) -> SteerStats {
    dp.steering_counters()
        .iter()
        .fold(SteerStats::default(), |t, (_, s)| SteerStats {
            redirected: t.redirected + s.redirected,
            passed: t.passed + s.passed,
            no_socket: t.no_socket + s.no_socket,
            fragment_dropped: t.fragment_dropped + s.fragment_dropped,
        })
}

#[test]
fn the_steering_program_s_counters_are_read_for_every_queue() {
    in_veth(
        "the_steering_program_s_counters_are_read_for_every_queue",
        || {
            let mut cfg = DataplaneConfig::new(IFACE, &[0, 1]);
            cfg.rings = RingSizes::with_frames(RingSizes::MIN_FRAMES).unwrap();
            cfg.ports = vec![(Proto::Udp, 7777)];
            let dp = Dataplane::start(cfg, |_: &QueueInfo| Ok::<_, std::io::Error>(Nop)).unwrap();
            let queues: Vec<u32> = dp.steering_counters().iter().map(|(q, _)| *q).collect();
            assert_eq!(queues, [0, 1], "every receive queue of {IFACE}");
            // Two fragments (1500-byte link), then a whole datagram.
            send_from_peer(2000);
            send_from_peer(100);
            let deadline = Instant::now() + Duration::from_secs(5);
            let t = loop {
                let t = total(&dp);
                if t.redirected >= 1 && t.fragment_dropped >= 1 || Instant::now() > deadline {
                    break t;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            assert_eq!(t.fragment_dropped, 1, "the first fragment: {t:?}");
            assert_eq!(t.redirected, 1, "the whole datagram: {t:?}");
            assert_eq!(t.no_socket, 0, "{t:?}");
            // The later fragment, and ARP.
            assert!(t.passed >= 1, "{t:?}");
            dp.stop().expect("no queue failed");
        },
    );
}
