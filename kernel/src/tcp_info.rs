//! The kernel's own view of one of its TCP connections (Linux's
//! `struct tcp_info` and the socket's queue lengths), asked for by
//! address through sock_diag netlink (`INET_DIAG_INFO`, the interface
//! `ss -ti` uses), so that no unsafe `getsockopt` is needed: one netlink
//! round trip per question, for statistics rather than the data path.

use std::cell::{Cell, OnceCell};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

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

/// A lazily opened sock_diag socket (one per core loop), and the
/// sequence number of its last question.
#[derive(Debug, Default)]
pub(crate) struct Diag {
    socket: OnceCell<Socket>,
    seq: Cell<u32>,
}

/// How long a question waits for the kernel's answer at most: a loop
/// pass is not held for longer by a kernel that does not answer.
const ANSWER_WAIT: Duration = Duration::from_secs(1);

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
        let wait = nix::sys::time::TimeVal::new(
            ANSWER_WAIT.as_secs() as _,
            ANSWER_WAIT.subsec_micros() as _,
        );
        nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::ReceiveTimeout, &wait)?;
        Ok(self.socket.get_or_init(|| s))
    }

    /// The connection from `local` to `remote`, as the kernel sees it:
    /// the answer to this question (its sequence number; one left by an
    /// earlier question that timed out is passed over) about this socket,
    /// within [`ANSWER_WAIT`].
    pub(crate) fn query(&self, local: SocketAddr, remote: SocketAddr) -> io::Result<KernelView> {
        let seq = self.ask(local, remote)?;
        self.answer(seq, local, remote)
    }

    /// Sends the question of [`Diag::query`]; returns its sequence number.
    fn ask(&self, local: SocketAddr, remote: SocketAddr) -> io::Result<u32> {
        let socket = self.socket()?;
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        header.sequence_number = seq;
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
        Ok(seq)
    }

    /// The answer to question `seq` about the socket from `local` to
    /// `remote`.
    fn answer(&self, seq: u32, local: SocketAddr, remote: SocketAddr) -> io::Result<KernelView> {
        let socket = self.socket()?;
        let mut buf = vec![0u8; 4096];
        let reply = loop {
            // Past ANSWER_WAIT: `WouldBlock`.
            let n = socket.recv(&mut &mut buf[..], 0)?;
            let reply = NetlinkMessage::<SockDiagMessage>::deserialize(&buf[..n])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            if reply.header.sequence_number == seq {
                break reply;
            }
        };
        match reply.payload {
            NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                let id = &r.header.socket_id;
                let about = (
                    SocketAddr::new(id.source_address, id.source_port),
                    SocketAddr::new(id.destination_address, id.destination_port),
                );
                if about != (local, remote) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("sock_diag answered about {about:?}, not {local} to {remote}"),
                    ));
                }
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

    /// An answer left unread by an earlier question (one that timed out)
    /// is not taken for the answer to the next: the kernel's figures are
    /// those of the connection asked about.
    #[test]
    fn an_earlier_question_s_answer_is_not_the_next_one_s() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a_server, _) = l.accept().unwrap();
        let b = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b_server, _) = l.accept().unwrap();
        a.write_all(b"unread").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let diag = Diag::default();
        let a_id = (
            a_server.local_addr().unwrap(),
            a_server.peer_addr().unwrap(),
        );
        let b_id = (
            b_server.local_addr().unwrap(),
            b_server.peer_addr().unwrap(),
        );
        assert_eq!(diag.query(a_id.0, a_id.1).unwrap().recv_queue, 6);
        // Asked, its answer never read.
        diag.ask(a_id.0, a_id.1).unwrap();
        assert_eq!(diag.query(b_id.0, b_id.1).unwrap().recv_queue, 0);
        drop(b);
    }
}
