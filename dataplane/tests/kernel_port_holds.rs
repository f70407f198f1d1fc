//! The ports a data path claims are held against the kernel's use: a port
//! a kernel socket already uses (a server listening there, a socket bound
//! to it) refuses the start in one line, and while the data path runs the
//! kernel's binds to the port fail, `SO_REUSEADDR` or not, and its own
//! choice of local ports skips it; per protocol, on the addresses the
//! steering program claims the port on (the interface's others stay the
//! kernel's); released when the data path stops. A port claimed at run time
//! goes through the same check.

mod veth;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;

use flowlane_dataplane::runtime::LocalAddress;
use flowlane_dataplane::umem::RingSizes;
use flowlane_dataplane::worker::QueueInfo;
use flowlane_dataplane::{Dataplane, DataplaneConfig, Proto};
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6};

use veth::{in_veth, Nop, IFACE, LOCAL_V4};

fn config(ports: &[(Proto, u16)]) -> DataplaneConfig {
    let mut cfg = DataplaneConfig::new(IFACE, &[0, 1]);
    cfg.rings = RingSizes::with_frames(RingSizes::MIN_FRAMES).unwrap();
    cfg.ports = ports.to_vec();
    cfg
}

fn start(cfg: DataplaneConfig) -> flowlane_dataplane::Result<Dataplane> {
    Dataplane::start(cfg, |_: &QueueInfo| Ok::<_, std::io::Error>(Nop))
}

fn local_v4() -> Ipv4Addr {
    LOCAL_V4.parse().unwrap()
}

/// The start's error for `cfg`: one line, nothing left attached.
fn refused(cfg: DataplaneConfig) -> String {
    let e = start(cfg)
        .map(drop)
        .expect_err("a port a kernel socket uses was claimed")
        .to_string();
    assert_eq!(e.lines().count(), 1, "{e}");
    let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{IFACE}/ifindex"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !flowlane_dataplane::iface::xdp_links(std::process::id()).contains(&ifindex),
        "a refused start left its XDP program attached"
    );
    e
}

fn in_use(port: u16, proto: &str) -> String {
    format!(
        "port {port}/{proto} is in use by a kernel socket (another server, or connections of \
         one, maybe ended, in TIME-WAIT: `ss -{}an 'sport = :{port}'` lists them): choose \
         another port (TcpServiceConfig::listen) or stop it: Address already in use \
         (os error 98)",
        &proto[..1]
    )
}

/// A kernel socket of `ty` bound to `addr`, `SO_REUSEADDR` set if
/// `reuse`, IPv6 only if `v6only` (an IPv6 address); the bind's error.
fn bind_with(addr: SocketAddr, ty: SockType, reuse: bool, v6only: bool) -> nix::Result<()> {
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket::socket(family, ty, SockFlag::SOCK_CLOEXEC, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &reuse)?;
    if addr.is_ipv6() {
        socket::setsockopt(&fd, sockopt::Ipv6V6Only, &v6only)?;
    }
    match addr {
        SocketAddr::V4(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn::from(a)),
        SocketAddr::V6(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn6::from(a)),
    }
}

fn tcp_bind(addr: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
}

fn udp_bind(addr: &str) -> std::io::Result<UdpSocket> {
    UdpSocket::bind(addr)
}

fn taken<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    match r {
        Err(e) if e.kind() == ErrorKind::AddrInUse => {}
        other => panic!("{what}: {other:?}, not EADDRINUSE"),
    }
}

#[test]
fn a_port_a_kernel_socket_uses_refuses_the_start() {
    in_veth("a_port_a_kernel_socket_uses_refuses_the_start", || {
        // A server listening on every address (nginx on 80).
        let server = tcp_bind("0.0.0.0:7777").unwrap();
        assert_eq!(refused(config(&[(Proto::Tcp, 7777)])), in_use(7777, "tcp"));
        drop(server);
        // One listening on IPv6's wildcard, both families
        // (`listen [::]:80`), and flowlane claiming its IPv4 address only.
        let server = tcp_bind("[::]:7778").unwrap();
        let mut cfg = config(&[(Proto::Tcp, 7778)]);
        cfg.local_v4 = LocalAddress::Only(local_v4());
        cfg.local_v6 = LocalAddress::Unclaimed;
        assert_eq!(refused(cfg), in_use(7778, "tcp"));
        drop(server);
        // A UDP socket on flowlane's address (a resolver's, say).
        let resolver = udp_bind(&format!("{LOCAL_V4}:7779")).unwrap();
        let mut cfg = config(&[(Proto::Tcp, 7780), (Proto::Udp, 7779)]);
        cfg.local_v4 = LocalAddress::Only(local_v4());
        assert_eq!(refused(cfg), in_use(7779, "udp"));
        // What the refused start held first (7780/tcp) was let go.
        drop(tcp_bind("0.0.0.0:7780").expect("7780/tcp let go"));
        drop(resolver);
        // Gone, the ports can be claimed.
        let dp = start(config(&[(Proto::Tcp, 7777), (Proto::Udp, 7779)])).unwrap();
        dp.stop().expect("no queue failed");
    });
}

/// A port that only connections which ended hold (a server stopped with
/// its last connections in TIME-WAIT) refuses the start too, but the line
/// says so, and how to see them: the kernel's "in use" would send the user
/// looking for a server that is not there.
#[test]
fn a_port_only_ended_connections_hold_says_so() {
    in_veth("a_port_only_ended_connections_hold_says_so", || {
        // The connection runs over the namespace's loopback.
        let lo = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(lo.success());
        let server = tcp_bind(&format!("{LOCAL_V4}:7790")).unwrap();
        let client = std::net::TcpStream::connect(format!("{LOCAL_V4}:7790")).unwrap();
        let (accepted, _) = server.accept().unwrap();
        // The server closes first: its side, local port 7790, goes
        // through TIME-WAIT once the client's FIN comes.
        drop(accepted);
        drop(server);
        let mut buf = [0u8; 1];
        use std::io::Read;
        assert_eq!((&client).read(&mut buf).unwrap(), 0, "the server's FIN");
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let e = refused(config(&[(Proto::Tcp, 7790)]));
        assert_eq!(
            e,
            "port 7790/tcp is still held by kernel connections that ended there (TIME-WAIT or \
             closing: a server stopped less than a minute ago?): wait for them to go \
             (`ss -tan 'sport = :7790'` lists them) or choose another port \
             (TcpServiceConfig::listen): Address already in use (os error 98)"
        );
        // A server that did not set SO_REUSEADDR: its ended connections
        // keep that setting in TIME-WAIT and keep the probe out too; the
        // line then names TIME-WAIT among the causes.
        let fd = socket::socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let at: SocketAddr = format!("{LOCAL_V4}:7792").parse().unwrap();
        let SocketAddr::V4(v4) = at else {
            unreachable!()
        };
        socket::bind(fd.as_raw_fd(), &SockaddrIn::from(v4)).unwrap();
        socket::listen(&fd, socket::Backlog::new(1).unwrap()).unwrap();
        let server = TcpListener::from(fd);
        let client = std::net::TcpStream::connect(at).unwrap();
        drop(server.accept().unwrap());
        drop(server);
        assert_eq!((&client).read(&mut buf).unwrap(), 0, "the server's FIN");
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(refused(config(&[(Proto::Tcp, 7792)])), in_use(7792, "tcp"));
        // A listener is a server, whatever else holds the port.
        let listener = std::net::TcpListener::bind("0.0.0.0:7791").unwrap();
        assert_eq!(refused(config(&[(Proto::Tcp, 7791)])), in_use(7791, "tcp"));
        drop(listener);
    });
}

#[test]
fn the_ports_held_keep_the_kernel_off_them() {
    in_veth("the_ports_held_keep_the_kernel_off_them", || {
        let dp = start(config(&[(Proto::Tcp, 7777), (Proto::Udp, 7778)])).unwrap();
        for addr in ["0.0.0.0:7777", "[::]:7777", &format!("{LOCAL_V4}:7777")] {
            taken(tcp_bind(addr), addr);
        }
        let v4 = SocketAddr::from((local_v4(), 7777));
        assert_eq!(
            bind_with(v4, SockType::Stream, true, false),
            Err(nix::errno::Errno::EADDRINUSE),
            "SO_REUSEADDR"
        );
        taken(udp_bind("0.0.0.0:7778"), "udp 0.0.0.0:7778");
        taken(udp_bind("[::]:7778"), "udp [::]:7778");
        // Per protocol: UDP 7777 and TCP 7778 are the kernel's.
        drop(udp_bind("0.0.0.0:7777").expect("udp 7777 is not claimed"));
        drop(tcp_bind("0.0.0.0:7778").expect("tcp 7778 is not claimed"));
        // The kernel's own choice of a local port skips it: its range
        // narrowed to the held port, an unbound socket gets none.
        let range = "/proc/sys/net/ipv4/ip_local_port_range";
        std::fs::write(range, "7778 7778").unwrap();
        taken(udp_bind("0.0.0.0:0"), "udp autobind");
        std::fs::write(range, "32768 60999").unwrap();
        dp.stop().expect("no queue failed");
        // Released with the data path.
        drop(tcp_bind("0.0.0.0:7777").expect("7777/tcp released"));
        drop(udp_bind("0.0.0.0:7778").expect("7778/udp released"));

        // On flowlane's IPv4 address only: the interface's other
        // addresses, and IPv6, stay the kernel's.
        let mut cfg = config(&[(Proto::Tcp, 7777)]);
        cfg.local_v4 = LocalAddress::Only(local_v4());
        cfg.local_v6 = LocalAddress::Unclaimed;
        let dp = start(cfg).unwrap();
        for addr in [&format!("{LOCAL_V4}:7777")[..], "0.0.0.0:7777", "[::]:7777"] {
            taken(tcp_bind(addr), addr);
        }
        let added = std::process::Command::new("ip")
            .args(["addr", "add", "10.98.0.11/24", "dev", IFACE])
            .status()
            .unwrap();
        assert!(added.success());
        drop(tcp_bind("10.98.0.11:7777").expect("another address is the kernel's"));
        let v6 = "[::]:7777".parse().unwrap();
        bind_with(v6, SockType::Stream, false, true).expect("IPv6 is the kernel's");
        dp.stop().expect("no queue failed");
    });
}

/// A port claimed while the data path runs goes through the start's
/// check, and is held as the others.
#[test]
fn a_port_claimed_at_run_time_is_checked_and_held() {
    in_veth("a_port_claimed_at_run_time_is_checked_and_held", || {
        let mut dp = start(config(&[(Proto::Tcp, 7777)])).unwrap();
        let server = tcp_bind("0.0.0.0:7790").unwrap();
        let e = dp.claim_port(Proto::Tcp, 7790).unwrap_err().to_string();
        assert_eq!(e, in_use(7790, "tcp"));
        drop(server);
        dp.claim_port(Proto::Udp, 7791).unwrap();
        taken(udp_bind("0.0.0.0:7791"), "udp 7791");
        // Claimed twice: held once, no error.
        dp.claim_port(Proto::Udp, 7791).unwrap();
        dp.claim_port(Proto::Tcp, 7777).unwrap();
        assert!(dp.check().is_ok());
        dp.stop().expect("no queue failed");
        drop(udp_bind("0.0.0.0:7791").expect("7791/udp released"));
    });
}
