//! `--allow-from`: the peers a service takes connections from, as a SYN
//! filter (`ConnHandler::syn_filter`): others are refused at their SYN
//! (kernel sockets: reset at accept).

use std::net::IpAddr;
use std::sync::Arc;

use flowlane_app::SynFilter;
use ipnet::IpNet;

/// Parses one `--allow-from` value: an address or a prefix
/// (`10.0.0.0/8`, `fd00::/8`). An IPv4-mapped one (`::ffff:10.0.0.0/104`,
/// as a dual-stack socket names IPv4 peers) is its IPv4 address or prefix:
/// peers are matched as IPv4 (no IPv6 packet comes from a mapped address,
/// RFC 4291 §2.5.5.2), and so the list would otherwise refuse the very
/// IPv4 peers it names.
pub(super) fn allow_prefix(s: &str) -> Result<IpNet, String> {
    let net = match s.parse::<IpAddr>() {
        Ok(ip) => IpNet::from(ip),
        Err(_) => s
            .parse::<IpNet>()
            .map_err(|_| format!("{s:?} is neither an address nor a prefix like 10.0.0.0/8"))?,
    };
    Ok(ipv4_of_mapped(net))
}

/// A prefix within `::ffff:0:0/96` as the IPv4 prefix it maps; any other
/// as it is.
fn ipv4_of_mapped(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96)
                .map(IpNet::V4)
                .unwrap_or(net),
            None => net,
        },
        _ => net,
    }
}

/// `--allow-from`, for the services that listen.
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct AllowArgs {
    /// Take connections only from these peers (an address or a prefix,
    /// repeatable); others are refused at their SYN with a reset (kernel
    /// sockets: reset right after accept; hyper-server: closed as soon as
    /// accepted). Default: every peer.
    #[arg(long, value_name = "PREFIX", value_parser = allow_prefix)]
    allow_from: Vec<IpNet>,
}

impl AllowArgs {
    /// The peers these flags allow.
    pub(super) fn peers(&self) -> AllowFrom {
        AllowFrom::new(&self.allow_from)
    }
}

/// The peers a handler takes connections from; None takes every peer.
#[derive(Debug, Clone, Default)]
pub(super) struct AllowFrom(Option<Arc<[IpNet]>>);

impl AllowFrom {
    /// From the flag's values (none given: every peer).
    pub(super) fn new(prefixes: &[IpNet]) -> AllowFrom {
        AllowFrom((!prefixes.is_empty()).then(|| prefixes.into()))
    }

    /// The SYN filter for one listener.
    pub(super) fn filter(&self) -> Option<SynFilter> {
        let allow = self.0.clone()?;
        Some(Arc::new(move |t| listed(&allow, t.remote.ip())))
    }

    /// Whether `peer` is allowed, for servers that see a connection only
    /// once it is accepted (hyper-server: tokio's listener, flowlane-tokio's).
    pub(super) fn allows(&self, peer: IpAddr) -> bool {
        self.0.as_deref().is_none_or(|allow| listed(allow, peer))
    }
}

/// Whether one of `allow` holds `peer` (a v4-mapped peer is its v4
/// address).
fn listed(allow: &[IpNet], peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    allow.iter().any(|n| n.contains(&peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_app::FourTuple;

    fn from(ip: &str) -> FourTuple {
        FourTuple {
            local: "10.99.0.1:7".parse().unwrap(),
            remote: std::net::SocketAddr::new(ip.parse().unwrap(), 40_000),
        }
    }

    #[test]
    fn prefixes_and_addresses_take_their_peers_only() {
        let list: Vec<IpNet> = ["10.99.0.0/24", "192.0.2.7", "fd99::/64"]
            .iter()
            .map(|s| allow_prefix(s).unwrap())
            .collect();
        let f = AllowFrom::new(&list).filter().unwrap();
        assert!(f(&from("10.99.0.2")));
        assert!(f(&from("192.0.2.7")));
        assert!(!f(&from("192.0.2.8")));
        assert!(!f(&from("10.98.0.2")));
        assert!(f(&from("fd99::2")));
        assert!(
            f(&from("::ffff:10.99.0.9")),
            "a v4-mapped peer is its v4 address"
        );
        assert!(AllowFrom::new(&[]).filter().is_none(), "no list: no filter");
        let allow = AllowFrom::new(&list);
        for (ip, ok) in [
            ("10.99.0.2", true),
            ("::ffff:192.0.2.7", true),
            ("10.98.0.2", false),
        ] {
            assert_eq!(allow.allows(ip.parse().unwrap()), ok, "{ip}");
        }
        assert!(AllowFrom::default().allows("192.0.2.8".parse().unwrap()));
        assert!(allow_prefix("10.0.0.0/33").is_err());
        assert!(allow_prefix("fd99::/129").is_err());
    }

    /// An IPv4-mapped address or prefix names IPv4 peers (they arrive as
    /// IPv4, and a dual-stack socket names them so): it took none of them.
    #[test]
    fn ipv4_mapped_entries_take_their_ipv4_peers() {
        for (entry, peer, ok) in [
            ("::ffff:10.99.0.2", "10.99.0.2", true),
            ("::ffff:10.99.0.2", "10.99.0.3", false),
            ("::ffff:10.99.0.0/120", "10.99.0.9", true),
            ("::ffff:10.99.0.0/120", "10.99.1.9", false),
            ("::ffff:0:0/96", "192.0.2.1", true),
            ("::ffff:10.99.0.2", "::ffff:10.99.0.2", true),
            ("fd99::/64", "10.99.0.2", false),
        ] {
            let list = [allow_prefix(entry).unwrap()];
            let f = AllowFrom::new(&list).filter().unwrap();
            assert_eq!(f(&from(peer)), ok, "--allow-from {entry}, peer {peer}");
            assert_eq!(AllowFrom::new(&list).allows(peer.parse().unwrap()), ok);
        }
        assert_eq!(
            allow_prefix("::ffff:10.99.0.0/120").unwrap(),
            allow_prefix("10.99.0.0/24").unwrap()
        );
        assert!(allow_prefix("example.org").is_err());
    }
}
