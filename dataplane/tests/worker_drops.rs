//! The worker's `dropped` counter (exported as
//! `flowlane_queue_dropped_frames{reason="worker"}`) counts real drops
//! only: a TCP echo with the kernel as the peer, every frame taken by the
//! stack, leaves it at 0 (it used to count every frame the stack took).

mod veth;

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use flowlane_app::{ConnHandle, ConnHandler, Net, SetupExt};
use flowlane_dataplane::runtime::LocalAddress;
use flowlane_dataplane::tcp_handler::{TcpConfig, TcpHandler};
use flowlane_dataplane::umem::RingSizes;
use flowlane_dataplane::worker::QueueInfo;
use flowlane_dataplane::{Dataplane, DataplaneConfig, Proto};

use veth::{in_veth, peer_ns, IFACE, LOCAL_V4};

/// Echoes what it reads; closes at the peer's FIN.
struct Echo;

impl ConnHandler for Echo {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let mut buf = [0u8; 4096];
        while let Ok(n) = net.recv(conn, &mut buf) {
            if n == 0 {
                let _ = net.close(conn);
                break;
            }
            let _ = net.send(conn, &buf[..n]);
        }
    }
}

const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], 7), timeout=5)
data = bytes(range(256)) * 40
s.sendall(data)
s.shutdown(socket.SHUT_WR)
got = b''
while True:
    x = s.recv(65536)
    if not x:
        break
    got += x
print('echoed' if got == data else 'corrupt %d' % len(got))
"#;

#[test]
fn an_echo_s_frames_count_no_worker_drop() {
    in_veth("an_echo_s_frames_count_no_worker_drop", || {
        let ip: Ipv4Addr = LOCAL_V4.parse().unwrap();
        let mac = std::fs::read_to_string(format!("/sys/class/net/{IFACE}/address")).unwrap();
        let mac: Vec<u8> = mac
            .trim()
            .split(':')
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect();
        let mut cfg = DataplaneConfig::new(IFACE, &[0, 1]);
        cfg.rings = RingSizes::with_frames(RingSizes::MIN_FRAMES).unwrap();
        cfg.ports = vec![(Proto::Tcp, 7)];
        cfg.local_v4 = LocalAddress::Only(ip);
        cfg.local_v6 = LocalAddress::Unclaimed;
        let tcp = TcpConfig::new(ip, mac.try_into().unwrap(), [7; 16]);
        let dp = Dataplane::start(cfg, move |q: &QueueInfo| {
            let mut h = TcpHandler::new(q, tcp.clone());
            h.listen(7, Echo)?;
            Ok::<_, flowlane_tcp::Error>(h)
        })
        .expect("starting the echo");
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                &peer_ns(),
                "timeout",
                "20",
                "python3",
                "-c",
            ])
            .arg(CLIENT)
            .arg(LOCAL_V4)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            "echoed",
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // The last ACK of the close reaches the worker.
        std::thread::sleep(Duration::from_millis(300));
        let (mut rx, mut dropped) = (0, 0);
        for (q, c) in dp.counters() {
            eprintln!(
                "queue {}: rx_packets {}, dropped {}",
                q.queue, c.rx_packets, c.dropped
            );
            rx += c.rx_packets;
            dropped += c.dropped;
        }
        assert!(rx >= 5, "{rx} frames received");
        assert_eq!(dropped, 0, "{dropped} of {rx} frames counted dropped");
        dp.stop().expect("no queue failed");
    });
}
