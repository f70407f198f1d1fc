//! The kernel's neighbour table (ARP for IPv4, neighbour discovery for
//! IPv6), read over rtnetlink (`RTM_GETNEIGH` dump, rtnetlink(7)).
//!
//! flowlane leaves address resolution to the kernel: the XDP program passes
//! ARP and ICMPv6 to it. A service reads the kernel's resolved entries for
//! its interface at start, so that its first active opens need no frame
//! from the peer ([`crate::neighbor::Neighbors`] learns the rest), and
//! again for the peers its workers find nothing recent for
//! ([`Refresher`]): a server whose MAC changed (a failover, which the
//! kernel learnt from its gratuitous ARP or unsolicited advertisement) is
//! reached again.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::thread::JoinHandle;

use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use flowlane_wire::EthernetAddress;

use crate::neighbor::NeighborRefresh;

/// How long the kernel gets to resolve a primed address before its table
/// is read (an ARP or neighbour solicitation round trip on the link).
pub const PRIME_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// The kernel's usable neighbour entries on the interface with index
/// `ifindex`, both address families: (IP, Ethernet address) of every entry
/// that is resolved (reachable, stale, delayed, being probed or permanent).
///
/// # Errors
/// When no rtnetlink socket can be opened or the dump fails; an answer that
/// does not decode is an [`io::ErrorKind::InvalidData`] error.
pub fn kernel_neighbors(ifindex: u32) -> io::Result<Vec<(IpAddr, EthernetAddress)>> {
    let mut out = Vec::new();
    let request = RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default());
    crate::rtnetlink::ask(request, true, |m| {
        if let RouteNetlinkMessage::NewNeighbour(n) = m {
            if n.header.ifindex == ifindex {
                out.extend(usable(&n));
            }
        }
        None::<()>
    })?;
    Ok(out)
}

/// The (IP, MAC) of a resolved entry; `None` for incomplete or failed ones
/// and for those without a 6-byte link-layer address.
fn usable(n: &NeighbourMessage) -> Option<(IpAddr, EthernetAddress)> {
    if !matches!(
        n.header.state,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
    ) {
        return None;
    }
    let mut ip = None;
    let mut mac = None;
    for a in &n.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => ip = Some((*v4).into()),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => ip = Some((*v6).into()),
            NeighbourAttribute::LinkLayerAddress(l) => {
                mac = <[u8; 6]>::try_from(l.as_slice()).ok().map(EthernetAddress)
            }
            _ => {}
        }
    }
    Some((ip?, mac.filter(EthernetAddress::is_unicast)?))
}

/// The kernel's route to one address, as `ip route get` shows it: what
/// tells whether flowlane, which sends only to on-link peers, can reach it
/// on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The interface it leaves through (its index).
    pub oif: Option<u32>,
    /// The router it goes through (None: on-link).
    pub gateway: Option<IpAddr>,
    /// Whether it is a unicast route (not to one of this host's own
    /// addresses, a broadcast, a black hole...).
    pub unicast: bool,
}

/// The kernel's route to `ip` from this network namespace (an
/// `RTM_GETROUTE` request for the address, rtnetlink(7)).
///
/// # Errors
/// The kernel's answer when it has none (`ENETUNREACH`: no route;
/// `EHOSTUNREACH` ...), or no rtnetlink socket.
pub fn route_to(ip: IpAddr) -> io::Result<Route> {
    let mut m = RouteMessage::default();
    (m.header.address_family, m.header.destination_prefix_length) = match ip {
        IpAddr::V4(_) => (AddressFamily::Inet, 32),
        IpAddr::V6(_) => (AddressFamily::Inet6, 128),
    };
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(ip)));
    let route = crate::rtnetlink::ask(RouteNetlinkMessage::GetRoute(m), false, |m| match m {
        RouteNetlinkMessage::NewRoute(r) => Some(route_of(&r)),
        _ => None,
    })?;
    route.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no route in the answer"))
}

/// What a route message says of the way out.
fn route_of(r: &RouteMessage) -> Route {
    let mut route = Route {
        oif: None,
        gateway: None,
        unicast: r.header.kind == RouteType::Unicast,
    };
    for a in &r.attributes {
        match a {
            RouteAttribute::Oif(i) => route.oif = Some(*i),
            RouteAttribute::Gateway(RouteAddress::Inet(g)) => route.gateway = Some((*g).into()),
            RouteAttribute::Gateway(RouteAddress::Inet6(g)) => route.gateway = Some((*g).into()),
            _ => {}
        }
    }
    route
}

/// Makes the kernel resolve `ip` (or confirm a stale entry of it): an
/// empty datagram to its discard port (9, RFC 863), which the kernel can
/// send only once it has the peer's link-layer address. Errors are
/// ignored: the kernel's table tells what came of it.
pub fn prime(ip: IpAddr) {
    let any: IpAddr = match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    if let Ok(sock) = std::net::UdpSocket::bind((any, 0)) {
        let _ = sock.send_to(b"", (ip, 9));
    }
}

/// A service's thread that answers its workers' asks
/// ([`NeighborRefresh`]): primes the kernel for each address asked, waits
/// [`PRIME_WAIT`], reads the kernel's table for the interface and hands
/// the entries of the asked addresses to the workers. One round at a
/// time, at most [`crate::neighbor::MAX_ASKED`] addresses each; the
/// workers ask each address once a second at most. Dropping it stops the
/// thread.
#[derive(Debug)]
pub struct Refresher {
    shared: Arc<NeighborRefresh>,
    thread: Option<JoinHandle<()>>,
}

impl Refresher {
    /// Starts the thread for the interface with index `ifindex`.
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub fn start(ifindex: u32) -> io::Result<Refresher> {
        let shared = Arc::new(NeighborRefresh::new());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("flowlane-neigh".into())
            .spawn(move || {
                let mut warned = false;
                while let Some(asked) = s.wait_asked(std::time::Duration::from_secs(1)) {
                    let read = || kernel_neighbors(ifindex);
                    if let Err(e) = refresh_round(&s, &asked, prime, || s.pause(PRIME_WAIT), read) {
                        if !std::mem::replace(&mut warned, true) {
                            tracing::warn!("re-reading the kernel's neighbour table: {e}");
                        }
                    }
                }
            })?;
        Ok(Refresher {
            shared,
            thread: Some(thread),
        })
    }

    /// What the workers' tables ask through
    /// ([`crate::neighbor::Neighbors::refresh_through`]).
    pub fn shared(&self) -> Arc<NeighborRefresh> {
        self.shared.clone()
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.shared.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One round for the addresses `asked`: `prime` each, `settle` (false:
/// stopped, nothing more is done), `read` the kernel's table and answer
/// with the entries of the asked addresses. The effects come in as
/// functions, so that the round is tested without a kernel.
fn refresh_round(
    shared: &NeighborRefresh,
    asked: &[IpAddr],
    mut prime: impl FnMut(IpAddr),
    settle: impl FnOnce() -> bool,
    read: impl FnOnce() -> io::Result<Vec<(IpAddr, EthernetAddress)>>,
) -> io::Result<()> {
    if asked.is_empty() {
        return Ok(());
    }
    for &ip in asked {
        prime(ip);
    }
    if !settle() {
        return Ok(());
    }
    let entries = read()?;
    shared.answer(entries.into_iter().filter(|(ip, _)| asked.contains(ip)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_table_dumps_without_error() {
        // Loopback has no neighbours; the dump itself must work (any user
        // may read the table).
        let lo = nix::net::if_::if_nametoindex("lo").expect("lo exists");
        let got = kernel_neighbors(lo).expect("rtnetlink dump");
        assert!(got.is_empty(), "{got:?}");
    }

    /// A round primes every asked address, then hands the workers the
    /// kernel's entries of those (and no others); the table that asked
    /// uses them at its next lookup.
    #[test]
    fn a_round_answers_the_asked_addresses_from_the_kernels_table() {
        use crate::neighbor::Neighbors;
        use flowlane_tcp::time::Instant;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (mac_a, mac_c) = (
            EthernetAddress([2, 0, 0, 0, 0, 0xa]),
            EthernetAddress([2, 0, 0, 0, 0, 0xc]),
        );
        let shared = Arc::new(NeighborRefresh::new());
        let mut n = Neighbors::new();
        n.refresh_through(shared.clone());
        // 10.0.0.1 asked last: a table remembers an ask in a slot by the
        // address's keyed hash, and one asked after it whose slot is the
        // same (a chance of one in `ASK_SLOTS`, the key random) would have
        // taken its place, and its answer would wait for the next ask.
        assert_eq!(n.lookup(Instant::ZERO, ip("fd00::2")), None);
        assert_eq!(n.lookup(Instant::ZERO, ip("10.0.0.1")), None);
        let asked = shared.wait_asked(std::time::Duration::ZERO).unwrap();
        assert_eq!(asked, [ip("fd00::2"), ip("10.0.0.1")]);
        let mut primed = Vec::new();
        let kernel = vec![(ip("10.0.0.1"), mac_a), (ip("10.0.0.3"), mac_c)];
        refresh_round(&shared, &asked, |a| primed.push(a), || true, || Ok(kernel)).unwrap();
        assert_eq!(primed, asked);
        assert_eq!(n.lookup(Instant::ZERO, ip("10.0.0.1")), Some(mac_a));
        assert_eq!(n.lookup(Instant::ZERO, ip("10.0.0.3")), None);
        // Stopped while it waited: nothing read; a failed read is the
        // round's error.
        let unread = || -> io::Result<Vec<(IpAddr, EthernetAddress)>> { panic!("read") };
        refresh_round(&shared, &asked, |_| {}, || false, unread).unwrap();
        let failed = || Err(io::Error::other("no netlink"));
        assert!(refresh_round(&shared, &asked, |_| {}, || true, failed).is_err());
    }

    /// The thread starts, waits for asks, and stops when dropped (at
    /// once, not at its next timeout).
    #[test]
    fn the_refresher_stops_when_dropped() {
        let lo = nix::net::if_::if_nametoindex("lo").expect("lo exists");
        let r = Refresher::start(lo).expect("a thread");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let t = std::time::Instant::now();
        drop(r);
        assert!(t.elapsed() < std::time::Duration::from_millis(500));
    }

    /// The kernel's route to an address: loopback's is through `lo`, a
    /// local one (no router), and no route is the kernel's error.
    #[test]
    fn the_kernel_s_route_to_an_address_is_read() {
        let lo = nix::net::if_::if_nametoindex("lo").expect("lo exists");
        let r = route_to("127.0.0.1".parse().unwrap()).expect("a route to loopback");
        assert_eq!((r.oif, r.gateway, r.unicast), (Some(lo), None, false));
        // TEST-NET-2 (RFC 5737) through whatever default route this
        // namespace has, or none.
        match route_to("198.51.100.7".parse().unwrap()) {
            Ok(r) => assert!(r.unicast && r.oif.is_some(), "{r:?}"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH), "{e}"),
        }
    }

    #[test]
    fn only_resolved_entries_with_a_mac_are_used() {
        let mut m = NeighbourMessage::default();
        m.header.state = NeighbourState::Reachable;
        m.attributes = vec![
            NeighbourAttribute::Destination(NeighbourAddress::Inet6("fd99::2".parse().unwrap())),
            NeighbourAttribute::LinkLayerAddress(vec![2, 0, 0, 0, 0, 2]),
        ];
        assert_eq!(
            usable(&m),
            Some((
                "fd99::2".parse().unwrap(),
                EthernetAddress([2, 0, 0, 0, 0, 2])
            ))
        );
        m.header.state = NeighbourState::Incomplete;
        assert_eq!(usable(&m), None);
        m.header.state = NeighbourState::Stale;
        m.attributes.pop();
        assert_eq!(usable(&m), None, "no link-layer address");
    }
}
