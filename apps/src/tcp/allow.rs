//! `--allow-from`: the peers a service takes connections from, as a SYN
//! filter (`ConnHandler::syn_filter`): others are refused at their SYN
//! (kernel sockets: reset at accept).

use std::net::IpAddr;
use std::sync::Arc;

use flowlane_app::SynFilter;
use ipnet::IpNet;

/// Parses one `--allow-from` value: an address or a prefix
/// (`10.0.0.0/8`, `fd00::/8`).
pub(super) fn allow_prefix(s: &str) -> Result<IpNet, String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(IpNet::from(ip));
    }
    s.parse::<IpNet>()
        .map_err(|_| format!("{s:?} is neither an address nor a prefix like 10.0.0.0/8"))
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
        assert!(allow_prefix("example.org").is_err());
    }
}
