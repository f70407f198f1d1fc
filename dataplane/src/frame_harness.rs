//! What the handler's tests, benchmarks and fuzz target share: a queue's
//! description, the peer's Ethernet frames around its segments, and the
//! handler's output polled into plain buffers (no sockets, no UMEM).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use flowlane_tcp::FrameStore;
use flowlane_wire::packet::{
    emit_eth_ipv4_tcp_headers, emit_eth_ipv6_tcp_headers, ETH_IPV4_TCP_OFFSET, ETH_IPV6_TCP_OFFSET,
};
use flowlane_wire::{
    EtherType, EthernetAddress, EthernetRepr, IpProtocol, Ipv4Repr, Ipv6Repr, VlanTags,
};

use flowlane_app::{ConnHandle, Net};

use super::{instant, TcpHandler};
use crate::worker::{QueueInfo, RingAhead};

pub(super) const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub(super) const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// Queue 0, on no particular CPU, with the default frames.
pub(super) fn info() -> QueueInfo {
    QueueInfo {
        queue: 0,
        cpu: None,
        node: 0,
        zero_copy: false,
        rx_frames: 32768,
    }
}

/// Wraps a peer segment into an Ethernet/IPv4 or IPv6 frame.
pub(super) fn frame(seg: &[u8], src: impl Into<IpAddr>, dst: impl Into<IpAddr>) -> Vec<u8> {
    let mut buf = vec![0u8; ETH_IPV6_TCP_OFFSET + seg.len()];
    let mut eth = EthernetRepr {
        dst_addr: EthernetAddress(OUR_MAC),
        src_addr: EthernetAddress(PEER_MAC),
        vlan: VlanTags::NONE,
        ethertype: EtherType::Ipv4,
    };
    let n = match (src.into(), dst.into()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            buf[ETH_IPV4_TCP_OFFSET..][..seg.len()].copy_from_slice(seg);
            let ip = Ipv4Repr::new(src, dst, IpProtocol::Tcp, seg.len());
            emit_eth_ipv4_tcp_headers(&mut buf, &eth, &ip, seg.len()).unwrap()
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            buf[ETH_IPV6_TCP_OFFSET..].copy_from_slice(seg);
            eth.ethertype = EtherType::Ipv6;
            let ip = Ipv6Repr::new(src, dst, IpProtocol::Tcp, seg.len());
            emit_eth_ipv6_tcp_headers(&mut buf, &eth, &ip, seg.len()).unwrap()
        }
        _ => panic!("mixed families"),
    };
    buf.truncate(n);
    buf
}

/// `on_poll` with a scratch frame instead of a UMEM: timers, then
/// every frame `build_frame` makes.
#[cfg(test)]
pub(super) fn poll(h: &mut TcpHandler, now: Duration) -> Vec<Vec<u8>> {
    poll_in(h, now, &flowlane_tcp::NoFrames)
}

/// [`poll`] for a handler lent frames out of `frames`, which its
/// application's reads in the timers' callbacks go through.
pub(super) fn poll_in(h: &mut TcpHandler, now: Duration, frames: &dyn FrameStore) -> Vec<Vec<u8>> {
    let now = instant(now);
    if h.stack.poll_timeout().is_some_and(|t| t <= now) {
        h.stack.handle_timeout(now);
        h.dispatch(now, frames);
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    loop {
        match h.build_frame(now, &mut buf) {
            (true, Some(n)) => out.push(buf[..n].to_vec()),
            (true, None) => {}
            (false, _) => break,
        }
    }
    out
}

/// Echoes what `conn` has to read, as far as its send buffer takes it
/// (asking to hear when more fits); the bytes echoed, and whether
/// everything up to the peer's FIN was read.
pub(super) fn echo(net: &mut dyn Net, conn: ConnHandle) -> (u64, bool) {
    let mut buf = [0u8; 4096];
    let mut echoed = 0;
    loop {
        let room = net.send_space(conn).unwrap_or(0).min(buf.len());
        if room == 0 {
            net.want_writable(conn);
            return (echoed, false);
        }
        match net.recv(conn, &mut buf[..room]) {
            Ok(n) if n > 0 => {
                assert_eq!(net.send(conn, &buf[..n]), Ok(n), "room to echo");
                echoed += n as u64;
            }
            Ok(_) => return (echoed, net.is_eof(conn)),
            Err(_) => return (echoed, false),
        }
    }
}

/// A worker's RX ring as the tests and the fuzz target play it: frames the
/// NIC put on it, and those a look ahead took off it and left waiting (the
/// worker's backlog), handed on first.
#[derive(Default)]
pub(super) struct FakeRing {
    pub(super) ring: VecDeque<Vec<u8>>,
    pub(super) waiting: VecDeque<Vec<u8>>,
    pub(super) consumed: u64,
}

impl FakeRing {
    /// The next frame the worker's receive loop takes.
    pub(super) fn next(&mut self) -> Option<Vec<u8>> {
        let f = self.waiting.pop_front().or_else(|| self.ring.pop_front())?;
        self.consumed += 1;
        Some(f)
    }
}

impl RingAhead for FakeRing {
    fn consumed(&self) -> u64 {
        self.consumed
    }
    fn end_now(&mut self) -> u64 {
        self.consumed + (self.waiting.len() + self.ring.len()) as u64
    }
    fn scan_ahead(&mut self, waiting_too: bool, take: &mut dyn FnMut(&[u8]) -> bool) -> u64 {
        let mut taken = 0;
        if waiting_too {
            self.waiting.retain(|f| {
                let t = take(f);
                taken += u64::from(t);
                !t
            });
        }
        while let Some(f) = self.ring.pop_front() {
            if take(&f) {
                taken += 1;
            } else {
                self.waiting.push_back(f);
            }
        }
        self.consumed += taken;
        self.consumed + self.waiting.len() as u64
    }
}
