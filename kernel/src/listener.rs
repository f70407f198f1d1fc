//! Listening sockets shared by every core's loop through `SO_REUSEPORT`,
//! the check that nobody else shares them, and what an accept's error
//! means.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use mio::net::TcpListener;
use nix::errno::Errno;
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrStorage,
};

/// A non-blocking TCP socket bound to `addr` with `SO_REUSEADDR` (a
/// restart binds past its old connections in TIME-WAIT), `SO_REUSEPORT`
/// when `share`, and `IPV6_V6ONLY` on IPv6 (one listener per family, as
/// the AF_XDP backend listens on each).
fn bound_socket(addr: SocketAddr, share: bool) -> std::io::Result<OwnedFd> {
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
    if share {
        setsockopt(&fd, sockopt::ReusePort, &true)?;
    }
    if addr.is_ipv6() {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    Ok(fd)
}

/// A non-blocking listener on `addr` with `SO_REUSEADDR`, `SO_REUSEPORT`
/// and the largest backlog the kernel takes: each core opens its own, and
/// the kernel spreads incoming connections over them by their hash.
///
/// It joins any socket of the same user already bound there with
/// `SO_REUSEPORT` (socket(7)); a [`KernelService`](crate::KernelService)
/// checks that none is before its first core binds a port.
pub fn reuseport_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let fd = bound_socket(addr, true)?;
    listen(&fd, Backlog::MAXCONN)?;
    Ok(TcpListener::from_std(std::net::TcpListener::from(fd)))
}

/// Fails with `AddrInUse` when another socket holds `addr`, even one
/// bound with `SO_REUSEPORT`: socket(7) lets any socket of the same
/// effective user that sets `SO_REUSEPORT` bind a port so bound, and the
/// kernel would then spread the connections over both services, silently.
/// A bind without the option is refused by every listener there (and
/// binds past connections in TIME-WAIT, `SO_REUSEADDR`); it is dropped at
/// once.
fn check_unshared(addr: SocketAddr) -> std::io::Result<()> {
    bound_socket(addr, false).map(drop)
}

/// The addresses a service's cores listen on, shared by its cores: the
/// first core to listen on one checks that no other socket holds it
/// ([`check_unshared`]) before binding, the others join its
/// `SO_REUSEPORT` group. A lone core has claims of its own.
#[derive(Debug, Clone, Default)]
pub(crate) struct Claims(Arc<Mutex<HashSet<SocketAddr>>>);

impl Claims {
    /// This core's listener on `addr`: `AddrInUse` when the service does
    /// not hold the address yet and something else does. (Between the
    /// check and the bind, a few microseconds under the claims' lock,
    /// another process could still bind with `SO_REUSEPORT`.) With it,
    /// whether this call claimed the address (the first to listen there).
    pub(crate) fn listener(&self, addr: SocketAddr) -> std::io::Result<(TcpListener, bool)> {
        let mut claimed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if claimed.contains(&addr) || addr.port() == 0 {
            return reuseport_listener(addr).map(|l| (l, false));
        }
        check_unshared(addr)?;
        let l = reuseport_listener(addr)?;
        claimed.insert(addr);
        Ok((l, true))
    }

    /// Gives up the claim on `addr` (the listen that took it failed and
    /// closed its listener): the next listen there checks it again.
    pub(crate) fn release(&self, addr: SocketAddr) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr);
    }
}

/// Whether an accept's error concerns only the connection it would have
/// returned, so that the next one can be taken at once: accept(2),
/// "Linux accept() ... passes already-pending network errors on the new
/// socket as an error code from accept() ... treat them like EAGAIN by
/// retrying. In the case of TCP/IP, these are ENETDOWN, EPROTO,
/// ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP, and
/// ENETUNREACH", and `ECONNABORTED` ("A connection has been aborted").
/// Others (EMFILE, ENFILE, ENOBUFS, ENOMEM) say the process or the
/// system is out of something, and the queue waits for it.
pub(crate) fn retry_accept_at_once(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(
            Errno::ECONNABORTED
                | Errno::ENETDOWN
                | Errno::EPROTO
                | Errno::ENOPROTOOPT
                | Errno::EHOSTDOWN
                | Errno::ENONET
                | Errno::EHOSTUNREACH
                | Errno::EOPNOTSUPP
                | Errno::ENETUNREACH
        )
    )
}

/// Where the namespace's unprivileged ports begin
/// (`net.ipv4.ip_unprivileged_port_start`, which covers IPv6 too; 1024
/// where it cannot be read): binding a port below it needs
/// CAP_NET_BIND_SERVICE (ip-sysctl.rst).
pub fn unprivileged_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024)
}

/// Why a listen on `addr` failed with `e`, in one line: a port below
/// `unprivileged_start` refused (EACCES) names the cause and the three
/// ways out, as a user who met it would want them.
pub fn listen_failure(addr: SocketAddr, e: &std::io::Error, unprivileged_start: u16) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied && addr.port() < unprivileged_start {
        return format!(
            "cannot listen on {addr}: {e}: ports below {unprivileged_start} are privileged; run \
             as root, grant CAP_NET_BIND_SERVICE (`setcap cap_net_bind_service=+ep` on the \
             binary, or AmbientCapabilities=CAP_NET_BIND_SERVICE in its systemd unit), or use a \
             port of {unprivileged_start} or above"
        );
    }
    format!("cannot listen on {addr}: {e}")
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

    /// A port below the unprivileged ones refused to a user without
    /// CAP_NET_BIND_SERVICE: one line with the cause and the ways out;
    /// other refusals and other errors as the kernel said them.
    #[test]
    fn a_privileged_port_refused_says_how_to_get_it() {
        let denied = std::io::Error::from_raw_os_error(13);
        let line = listen_failure("0.0.0.0:7".parse().unwrap(), &denied, 1024);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.starts_with("cannot listen on 0.0.0.0:7: Permission denied (os error 13): ports below 1024 are privileged; run as root, grant CAP_NET_BIND_SERVICE"),
            "{line}"
        );
        assert!(line.ends_with("or use a port of 1024 or above"), "{line}");
        // The namespace's own bound.
        let line = listen_failure("[::]:600".parse().unwrap(), &denied, 500);
        assert_eq!(
            line,
            "cannot listen on [::]:600: Permission denied (os error 13)"
        );
        let line = listen_failure("0.0.0.0:80".parse().unwrap(), &denied, 100);
        assert!(line.contains("ports below 100 are privileged"), "{line}");
        let other = std::io::Error::from_raw_os_error(99);
        let line = listen_failure("10.0.0.9:7".parse().unwrap(), &other, 1024);
        assert!(!line.contains("CAP_NET_BIND_SERVICE"), "{line}");
    }

    /// The cores of one service share their port; a socket of anyone
    /// else there, `SO_REUSEPORT` or not, refuses it to the service.
    #[test]
    fn a_service_s_cores_share_a_port_nobody_else_holds() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap();
        drop(free);
        let claims = Claims::default();
        let (first, claimed) = claims.listener(addr).unwrap();
        assert!(claimed, "the first listener claims the address");
        let (second, claimed) = claims.listener(addr).unwrap();
        assert!(!claimed);
        assert_eq!(second.local_addr().unwrap(), addr);
        let other = Claims::default().listener(addr).map(drop);
        assert_eq!(
            other.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::AddrInUse),
            "another service's first core"
        );
        drop((first, second));

        let holder = reuseport_listener(addr).unwrap();
        let e = Claims::default().listener(addr).map(drop);
        assert_eq!(e.map_err(|e| e.kind()), Err(std::io::ErrorKind::AddrInUse));
        drop(holder);
        assert!(Claims::default().listener(addr).is_ok(), "free again");
    }

    #[test]
    fn accept_errors_of_one_connection_are_retried_at_once() {
        let err = |e: Errno| std::io::Error::from_raw_os_error(e as i32);
        for e in [Errno::ECONNABORTED, Errno::EPROTO, Errno::ENETUNREACH] {
            assert!(retry_accept_at_once(&err(e)), "{e}");
        }
        for e in [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM] {
            assert!(!retry_accept_at_once(&err(e)), "{e}");
        }
    }
}
