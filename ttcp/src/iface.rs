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

/// The interface with an address of `ip`'s family on `ip`'s subnet (by
/// its netmask, an IPv6 address's prefix length as a mask): the one a
/// sender reaches a directly connected receiver `ip` through.
pub fn iface_on_subnet(ip: IpAddr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    addrs
        .filter_map(|a| {
            let local = sockaddr_ip(a.address.as_ref()?)?;
            let mask = sockaddr_ip(a.netmask.as_ref()?)?;
            on_subnet(local, mask, ip).then_some(a.interface_name)
        })
        .next()
}

/// The IP address of `s`, of either family; None for other families.
fn sockaddr_ip(s: &nix::sys::socket::SockaddrStorage) -> Option<IpAddr> {
    s.as_sockaddr_in()
        .map(|s| IpAddr::V4(s.ip()))
        .or_else(|| s.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
}

/// Whether `ip` is on the subnet of local address `local` with netmask
/// `mask`: all three of one family, `ip` and `local` equal under `mask`.
fn on_subnet(local: IpAddr, mask: IpAddr, ip: IpAddr) -> bool {
    match (local, mask, ip) {
        (IpAddr::V4(l), IpAddr::V4(m), IpAddr::V4(i)) => {
            let m = u32::from(m);
            u32::from(l) & m == u32::from(i) & m
        }
        (IpAddr::V6(l), IpAddr::V6(m), IpAddr::V6(i)) => {
            let m = u128::from(m);
            u128::from(l) & m == u128::from(i) & m
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_receiver_on_a_local_subnet_is_reached_through_its_interface() {
        // 127.0.0.1/8 is lo's everywhere.
        assert_eq!(iface_on_subnet(ip("127.0.0.9")).as_deref(), Some("lo"));
        // TEST-NET-3 (RFC 5737 §3) is no machine's subnet.
        assert_eq!(iface_on_subnet(ip("203.0.113.7")), None);
    }

    /// An IPv6 receiver is found by its own family's addresses and prefixes.
    #[test]
    fn an_ipv6_receiver_is_reached_through_its_interface() {
        // ::1/128 is lo's where IPv6 is on.
        let lo6 = std::fs::read_to_string("/proc/net/if_inet6")
            .is_ok_and(|t| t.lines().any(|l| l.starts_with(&"0".repeat(31))));
        if lo6 {
            assert_eq!(iface_on_subnet(ip("::1")).as_deref(), Some("lo"));
        } else {
            eprintln!("skipping the ::1 lookup: lo has no IPv6 address here");
        }
        // The documentation prefix (RFC 3849) is no machine's subnet.
        assert_eq!(iface_on_subnet(ip("2001:db8::7")), None);
    }

    /// A subnet is matched under its mask, in one family at a time.
    #[test]
    fn a_subnet_is_matched_under_its_mask_in_its_family() {
        let (l4, m4) = (ip("10.99.0.1"), ip("255.255.255.0"));
        assert!(on_subnet(l4, m4, ip("10.99.0.2")));
        assert!(!on_subnet(l4, m4, ip("10.99.1.2")));
        // fd99::1/64.
        let (l6, m6) = (ip("fd99::1"), ip("ffff:ffff:ffff:ffff::"));
        assert!(on_subnet(l6, m6, ip("fd99::2")));
        assert!(on_subnet(l6, m6, ip("fd99::ffff:2")));
        assert!(!on_subnet(l6, m6, ip("fd99:0:0:1::2")));
        // Never across families, whatever the bits.
        assert!(!on_subnet(l4, m4, ip("::ffff:10.99.0.2")));
        assert!(!on_subnet(l6, m6, ip("10.99.0.2")));
        assert!(!on_subnet(ip("0.0.0.0"), ip("0.0.0.0"), ip("fd99::2")));
    }
}
