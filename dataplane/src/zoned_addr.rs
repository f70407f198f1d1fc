//! Socket addresses as flags give them, with an IPv6 zone: RFC 4007 §11's
//! `[fe80::1%peer0]:5001` (the zone an interface's name or index), which
//! Rust's `SocketAddr` parser refuses; and the scope a link-local peer is
//! opened with on each backend.
//!
//! A zone's name is looked up when the address is used
//! ([`ZonedSocketAddr::zone_index`]), not while parsing: a command run
//! with `--bed` parses its flags again inside the bed's network namespace,
//! where the bed's interfaces are.

use std::fmt;
use std::net::{Ipv6Addr, SocketAddr};

/// An RFC 4007 §11 zone: the interface by its index or its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zone {
    /// `%3`: an interface index.
    Index(u32),
    /// `%peer0`: an interface name, looked up when used.
    Name(String),
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Index(i) => write!(f, "{i}"),
            Zone::Name(n) => f.write_str(n),
        }
    }
}

/// A socket address and the zone its flag named, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonedSocketAddr {
    /// The address (its scope id 0 where the zone is a name).
    pub addr: SocketAddr,
    /// The zone after `%`, if one was given.
    pub zone: Option<Zone>,
}

impl fmt::Display for ZonedSocketAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.zone, self.addr) {
            (Some(z), SocketAddr::V6(a)) => write!(f, "[{}%{z}]:{}", a.ip(), a.port()),
            _ => write!(f, "{}", self.addr),
        }
    }
}

impl ZonedSocketAddr {
    /// Parses `ADDR:PORT`, `[V6]:PORT` or `[V6%ZONE]:PORT` (RFC 4007 §11:
    /// a zone of digits is an interface index, any other an interface's
    /// name). None for anything else.
    pub fn parse(text: &str) -> Option<ZonedSocketAddr> {
        let text = text.trim();
        // Rust's parser takes a zone of digits (`[fe80::1%7]:5`) as the
        // scope id; not a name.
        if let Ok(addr) = text.parse::<SocketAddr>() {
            let zone = match addr {
                SocketAddr::V6(a) if a.scope_id() != 0 => Some(Zone::Index(a.scope_id())),
                _ => None,
            };
            return Some(ZonedSocketAddr { addr, zone });
        }
        let (inside, port) = text.strip_prefix('[')?.split_once("]:")?;
        let (ip, zone) = inside.split_once('%')?;
        let ip: Ipv6Addr = ip.parse().ok()?;
        let port: u16 = port.parse().ok()?;
        // An interface name: what `ip link` accepts (IFNAMSIZ less its NUL,
        // no '/', no white space), so that no path or flag hides in one.
        let name_ok = |z: &str| {
            !z.is_empty()
                && z.len() < libc::IFNAMSIZ
                && !z.contains(|c: char| c == '/' || c == '%' || c.is_whitespace())
        };
        let zone = match zone.parse::<u32>() {
            Ok(0) => return None,
            Ok(i) => Zone::Index(i),
            Err(_) if name_ok(zone) => Zone::Name(zone.to_owned()),
            Err(_) => return None,
        };
        let scope = match zone {
            Zone::Index(i) => i,
            Zone::Name(_) => 0,
        };
        Some(ZonedSocketAddr {
            addr: SocketAddr::V6(std::net::SocketAddrV6::new(ip, port, 0, scope)),
            zone: Some(zone),
        })
    }

    /// The interface index its zone names (an index as given, a name
    /// looked up in this network namespace now); None without a zone.
    ///
    /// # Errors
    /// A name no interface here has, in one line.
    pub fn zone_index(&self) -> Result<Option<u32>, String> {
        match &self.zone {
            None => Ok(None),
            Some(Zone::Index(i)) => Ok(Some(*i)),
            Some(Zone::Name(n)) => {
                nix::net::if_::if_nametoindex(n.as_str())
                    .map(Some)
                    .map_err(|_| {
                        format!(
                            "{self}: no interface {n} here (the zone after % names an interface: \
                         `ip link`)"
                        )
                    })
            }
        }
    }
}

/// A flag's local address to listen on (`--metrics`): `ADDR:PORT`,
/// `[V6]:PORT` or `[V6%ZONE]:PORT`, its zone's interface looked up now as
/// the scope id.
///
/// # Errors
/// Not an address; a zone no interface here has; a link-local address
/// without a zone (bind(2) refuses it: EINVAL), each in one line.
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let a = ZonedSocketAddr::parse(text).ok_or_else(|| {
        format!("{text}: give ADDR:PORT (127.0.0.1:9477, [::1]:9477, [fe80::1%eth0]:9477)")
    })?;
    let zone = a.zone_index()?;
    match (a.addr, zone) {
        (SocketAddr::V6(mut v6), Some(z)) => {
            v6.set_scope_id(z);
            Ok(SocketAddr::V6(v6))
        }
        (addr, None) if is_link_local(addr) => Err(format!(
            "{text}: {} is link-local: name its interface, [{}%IF]:{}",
            addr.ip(),
            addr.ip(),
            addr.port()
        )),
        (addr, _) => Ok(addr),
    }
}

/// Whether `addr` is an IPv6 link-local unicast address (fe80::/10, RFC
/// 4291 §2.5.6): one that means a peer only with an interface to reach it
/// by.
pub fn is_link_local(addr: SocketAddr) -> bool {
    matches!(addr, SocketAddr::V6(a) if a.ip().is_unicast_link_local())
}

/// The peer a connection is opened to, scoped for its backend. On kernel
/// sockets (`keep_scope`): the zone's interface (`zone`, resolved by
/// [`ZonedSocketAddr::zone_index`]), else for a link-local peer `iface`'s
/// (`iface_index`, None where no such interface is here), as connect(2)
/// needs a link-local peer's scope (RFC 4007 §6); on flowlane's own TCP,
/// which opens every connection on `iface`, no scope, and a zone naming
/// another interface is refused.
///
/// # Errors
/// A link-local peer with no interface to scope it by; on flowlane's TCP a
/// zone other than `iface`'s: each one line saying what to write instead.
pub fn scoped_peer(
    addr: SocketAddr,
    zone: Option<u32>,
    iface: &str,
    iface_index: Option<u32>,
    keep_scope: bool,
) -> Result<SocketAddr, String> {
    let SocketAddr::V6(mut a) = addr else {
        return Ok(addr);
    };
    let (ip, port) = (*a.ip(), a.port());
    if !keep_scope {
        if let Some(z) = zone.filter(|&z| Some(z) != iface_index) {
            return Err(format!(
                "its zone (interface {z}) is not {iface}, the interface flowlane opens \
                 connections on: write [{ip}%{iface}]:{port}, or --iface IF for the zone's"
            ));
        }
        a.set_scope_id(0);
        return Ok(SocketAddr::V6(a));
    }
    let scope = zone.or(iface_index.filter(|_| is_link_local(addr)));
    match scope {
        Some(s) => a.set_scope_id(s),
        None if is_link_local(addr) => {
            return Err(format!(
                "{ip} is link-local and {iface} is no interface here to reach it by: name its \
                 interface, [{ip}%IF]:{port}, or give --iface IF"
            ))
        }
        None => {}
    }
    Ok(SocketAddr::V6(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zoned(s: &str) -> ZonedSocketAddr {
        ZonedSocketAddr::parse(s).unwrap_or_else(|| panic!("{s} refused"))
    }

    /// RFC 4007 §11's `%zone`, by name or index, where Rust's parser
    /// refuses it; plain addresses as Rust parses them; nothing else.
    #[test]
    fn a_zone_is_taken_by_name_or_index() {
        let a = zoned("[fe80::1%peer0]:5001");
        assert_eq!(a.zone, Some(Zone::Name("peer0".into())));
        assert_eq!(a.addr, "[fe80::1]:5001".parse().unwrap());
        assert_eq!(a.to_string(), "[fe80::1%peer0]:5001");
        let a = zoned("[fe80::1%7]:80");
        assert_eq!(a.zone, Some(Zone::Index(7)));
        let SocketAddr::V6(v6) = a.addr else { panic!() };
        assert_eq!(v6.scope_id(), 7);
        assert_eq!(zoned("10.0.0.1:5").zone, None);
        // Zone 0: the default zone (RFC 4007 §11.6), as none.
        assert_eq!(zoned("[fe80::1%0]:5").zone, None);
        assert_eq!(zoned(" [fd00::1]:5 ").addr, "[fd00::1]:5".parse().unwrap());
        for bad in [
            "[fe80::1%]:5",
            "[fe80::1%a/b]:5",
            "[fe80::1%averyveryverylongname]:5",
            "[fe80::1%lo]",
            "[fe80::1%lo]:70000",
            "[10.0.0.1%lo]:5",
            "fe80::1%lo:5",
            "10.0.0.1",
        ] {
            assert_eq!(ZonedSocketAddr::parse(bad), None, "{bad}");
        }
    }

    /// A zone's name is looked up when used: one no interface has is
    /// said in one line.
    #[test]
    fn a_zone_s_name_is_looked_up() {
        let lo = nix::net::if_::if_nametoindex("lo").expect("lo exists");
        assert_eq!(zoned("[fe80::1%lo]:5").zone_index(), Ok(Some(lo)));
        assert_eq!(zoned("[fe80::1%9]:5").zone_index(), Ok(Some(9)));
        assert_eq!(zoned("[fe80::1]:5").zone_index(), Ok(None));
        let e = zoned("[fe80::1%nosuch57]:5").zone_index().unwrap_err();
        assert!(
            e.starts_with("[fe80::1%nosuch57]:5: no interface nosuch57 here"),
            "{e}"
        );
    }

    /// A listen address takes its zone's interface as its scope; a
    /// link-local one without a zone (which bind(2) refuses) is refused.
    #[test]
    fn a_listen_address_is_scoped_by_its_zone() {
        let lo = nix::net::if_::if_nametoindex("lo").expect("lo exists");
        let scope = |s: &str| match listen_address(s) {
            Ok(SocketAddr::V6(a)) => Ok(a.scope_id()),
            other => Err(format!("{other:?}")),
        };
        assert_eq!(scope("[fe80::1%lo]:9477"), Ok(lo));
        assert_eq!(scope("[::1]:9477"), Ok(0));
        assert_eq!(
            listen_address("127.0.0.1:9477"),
            Ok("127.0.0.1:9477".parse().unwrap())
        );
        let e = listen_address("[fe80::1]:9477").unwrap_err();
        assert!(
            e.contains("fe80::1 is link-local: name its interface"),
            "{e}"
        );
        assert!(listen_address("[fe80::1%nosuch57]:1")
            .unwrap_err()
            .contains("no interface nosuch57 here"));
        assert!(listen_address("9477")
            .unwrap_err()
            .contains("give ADDR:PORT"));
    }

    /// On kernel sockets a link-local peer gets its zone's scope, else
    /// `--iface`'s, and is refused with neither (connect(2) would fail
    /// "invalid address" after start); a global peer needs none. On
    /// flowlane's TCP the scope is dropped and a zone other than the
    /// interface's refused.
    #[test]
    fn a_link_local_peer_is_scoped_by_its_zone_or_the_interface() {
        let ll: SocketAddr = "[fe80::1]:5001".parse().unwrap();
        let global: SocketAddr = "[fd00::1]:5001".parse().unwrap();
        let scope = |a: SocketAddr| match a {
            SocketAddr::V6(a) => a.scope_id(),
            SocketAddr::V4(_) => panic!(),
        };
        let kernel = |a, zone, index| scoped_peer(a, zone, "xsk0", index, true);
        assert_eq!(kernel(ll, None, Some(4)).map(scope), Ok(4));
        assert_eq!(kernel(ll, Some(9), Some(4)).map(scope), Ok(9));
        assert_eq!(kernel(ll, Some(9), None).map(scope), Ok(9));
        assert_eq!(kernel(global, None, Some(4)).map(scope), Ok(0));
        assert_eq!(kernel(global, None, None).map(scope), Ok(0));
        let v4: SocketAddr = "10.0.0.1:5".parse().unwrap();
        assert_eq!(kernel(v4, None, None), Ok(v4));
        let e = kernel(ll, None, None).unwrap_err();
        assert!(
            e.starts_with("fe80::1 is link-local and xsk0 is no interface here")
                && e.contains("[fe80::1%IF]:5001")
                && !e.contains('\n'),
            "{e}"
        );
        let xdp = |zone| scoped_peer(ll, zone, "xsk0", Some(4), false);
        assert_eq!(xdp(None).map(scope), Ok(0));
        assert_eq!(xdp(Some(4)).map(scope), Ok(0));
        let e = xdp(Some(9)).unwrap_err();
        assert!(e.starts_with("its zone (interface 9) is not xsk0"), "{e}");
    }
}
