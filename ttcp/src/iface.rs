//! Which local interface carries a run's traffic (its counters are reported).

use std::net::IpAddr;

/// The interface holding local address `ip` (loopback addresses: `lo`).
pub fn iface_for(ip: IpAddr) -> Option<String> {
    if ip.is_loopback() {
        return Some("lo".into());
    }
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let found = match ip {
            IpAddr::V4(v4) => sa.as_sockaddr_in().map(|s| s.ip() == v4).unwrap_or(false),
            IpAddr::V6(v6) => sa.as_sockaddr_in6().map(|s| s.ip() == v6).unwrap_or(false),
        };
        if found {
            return Some(a.interface_name);
        }
    }
    None
}
