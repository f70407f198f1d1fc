//! Shared by the loopback tests of the kernel-socket backend and of
//! queue-pair mode (no test bed: kernel TCP on 127.0.0.1 is the peer).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use flowlane_app::{ConnHandle, ConnHandler, Net, Placement};

pub(crate) const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A port free now (bound and released).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((LOOPBACK, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `n` unpinned cores (or threads) on node 0.
pub(crate) fn places(n: u32) -> Vec<Placement> {
    (0..n)
        .map(|queue| Placement {
            queue,
            cpu: None,
            node: 0,
        })
        .collect()
}

/// Echoes every byte back, closing once the peer closed.
pub(crate) struct Echo {
    pub(crate) scratch: Vec<u8>,
}

impl Echo {
    pub(crate) fn new(scratch: usize) -> Echo {
        Echo {
            scratch: vec![0; scratch],
        }
    }
}

impl ConnHandler for Echo {
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.scratch);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.scratch);
    }
}

/// Pseudo-random bytes (xorshift from `seed`).
pub(crate) fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `data` to `port`, half-closes, and returns everything read back
/// until the server closed.
pub(crate) fn echo_client(port: u16, data: Vec<u8>) -> Vec<u8> {
    let mut s = TcpStream::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    back
}
