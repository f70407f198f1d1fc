//! The kernel's own view of one of its TCP connections (Linux's
//! `struct tcp_info` and the socket's queue lengths), asked for by
//! address through sock_diag netlink (`INET_DIAG_INFO`, the interface
//! `ss -ti` uses), so that no unsafe `getsockopt` is needed: one netlink
//! round trip per question, for statistics rather than the data path.

use std::cell::OnceCell;
use std::io;
use std::net::SocketAddr;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::nlas::{Nla, TcpInfo};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::Socket;

/// What the kernel says of one connection.
#[derive(Debug)]
pub(crate) struct KernelView {
    /// `idiag_rqueue`: received, not yet read from the socket.
    pub(crate) recv_queue: u32,
    /// `idiag_wqueue`: written to the socket, not yet acknowledged (sent
    /// or not).
    pub(crate) send_queue: u32,
    pub(crate) tcp: Option<TcpInfo>,
}

/// A lazily opened sock_diag socket (one per core loop).
#[derive(Debug, Default)]
pub(crate) struct Diag {
    socket: OnceCell<Socket>,
}

/// sock_diag's "any socket with these addresses" cookie.
const NO_COOKIE: [u8; 8] = [0xff; 8];

impl Diag {
    fn socket(&self) -> io::Result<&Socket> {
        if let Some(s) = self.socket.get() {
            return Ok(s);
        }
        let mut s = Socket::new(NETLINK_SOCK_DIAG)?;
        s.bind_auto()?;
        s.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        Ok(self.socket.get_or_init(|| s))
    }

    /// The connection from `local` to `remote`, as the kernel sees it.
    pub(crate) fn query(&self, local: SocketAddr, remote: SocketAddr) -> io::Result<KernelView> {
        let socket = self.socket()?;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        let mut id = if local.is_ipv4() {
            SocketId::new_v4()
        } else {
            SocketId::new_v6()
        };
        id.source_port = local.port();
        id.source_address = local.ip();
        id.destination_port = remote.port();
        id.destination_address = remote.ip();
        id.cookie = NO_COOKIE;
        let mut request = NetlinkMessage::new(
            header,
            SockDiagMessage::InetRequest(InetRequest {
                family: if local.is_ipv4() { AF_INET } else { AF_INET6 },
                protocol: IPPROTO_TCP,
                extensions: ExtensionFlags::INFO,
                states: StateFlags::all(),
                socket_id: id,
            })
            .into(),
        );
        request.finalize();
        let mut out = vec![0; request.buffer_len()];
        request.serialize(&mut out);
        socket.send(&out, 0)?;
        let mut buf = vec![0u8; 4096];
        let n = socket.recv(&mut &mut buf[..], 0)?;
        let reply = NetlinkMessage::<SockDiagMessage>::deserialize(&buf[..n])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        match reply.payload {
            NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                let InetResponseHeader {
                    recv_queue,
                    send_queue,
                    ..
                } = r.header;
                let tcp = r.nlas.iter().find_map(|n| match n {
                    Nla::TcpInfo(t) => Some(t.clone()),
                    _ => None,
                });
                Ok(KernelView {
                    recv_queue,
                    send_queue,
                    tcp,
                })
            }
            NetlinkPayload::Error(e) => Err(e.to_io()),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected sock_diag answer {other:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_tells_both_ends_of_a_loopback_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let diag = Diag::default();
        for (local, remote) in [
            (c.local_addr().unwrap(), c.peer_addr().unwrap()),
            (s.local_addr().unwrap(), s.peer_addr().unwrap()),
        ] {
            let v = diag.query(local, remote).unwrap();
            let t = v.tcp.expect("tcp_info");
            assert!(t.snd_mss > 0 && t.snd_cwnd > 0, "{t:?}");
        }
    }
}
