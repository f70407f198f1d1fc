//! Which local interface carries a run's traffic (its counters are reported).

use std::net::{IpAddr, Ipv4Addr};

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

/// The interface with an IPv4 address on `ip`'s subnet (by its netmask):
/// the one a sender reaches a directly connected receiver `ip` through.
pub fn iface_on_subnet(ip: Ipv4Addr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let on = |s: Option<nix::sys::socket::SockaddrStorage>| {
            s.and_then(|s| s.as_sockaddr_in().map(|s| u32::from(s.ip())))
        };
        let (Some(local), Some(mask)) = (on(a.address), on(a.netmask)) else {
            continue;
        };
        if local & mask == u32::from(ip) & mask {
            return Some(a.interface_name);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_on_a_local_subnet_is_reached_through_its_interface() {
        // 127.0.0.1/8 is lo's everywhere.
        assert_eq!(
            iface_on_subnet(Ipv4Addr::new(127, 0, 0, 9)).as_deref(),
            Some("lo")
        );
        // TEST-NET-3 (RFC 5737 §3) is no machine's subnet.
        assert_eq!(iface_on_subnet(Ipv4Addr::new(203, 0, 113, 7)), None);
    }
}
