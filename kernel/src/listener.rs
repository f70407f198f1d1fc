//! Listening sockets shared by every core's loop through `SO_REUSEPORT`.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use mio::net::TcpListener;
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrStorage,
};

/// A non-blocking listener on `addr` with `SO_REUSEADDR`, `SO_REUSEPORT`
/// and the largest backlog the kernel takes: each core opens its own, and
/// the kernel spreads incoming connections over them by their hash.
pub fn reuseport_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let fam = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket(
        fam,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    setsockopt(&fd, sockopt::ReusePort, &true)?;
    if addr.is_ipv6() {
        // One listener per family, as the AF_XDP backend listens on each.
        setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    listen(&fd, Backlog::MAXCONN)?;
    Ok(TcpListener::from_std(std::net::TcpListener::from(fd)))
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: u32) -> std::io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu as usize)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_listeners_share_a_port() {
        let a = reuseport_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = a.local_addr().unwrap().port();
        let b = reuseport_listener(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
        assert_eq!(b.local_addr().unwrap().port(), port);
    }
}
