//! A network namespace's protocol counters (`/proc/net/snmp`,
//! `/proc/net/netstat`: what `nstat` reads), e.g. the kernel senders'
//! retransmissions and the reordering they detected.
//!
//! Read from a thread inside the namespace (`testbed::netns::in_netns`):
//! `/proc/self/net` names the namespace of the process's main thread, so
//! the reader uses `/proc/thread-self/net`, the calling thread's.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

/// Counters by `Group.Name` (`Tcp.OutSegs`, `TcpExt.TCPSACKReorder`).
pub type NetCounters = BTreeMap<String, u64>;

/// Parses the header/value line pairs of `/proc/net/snmp` or
/// `/proc/net/netstat` (`Tcp: RtoAlgorithm ...` then `Tcp: 1 ...`) into
/// `out`; negative values (`Tcp.MaxConn` is -1) are skipped.
pub fn parse_into(text: &str, out: &mut NetCounters) -> Result<()> {
    let mut lines = text.lines();
    while let Some(names) = lines.next() {
        let Some(values) = lines.next() else {
            bail!("{names:?} has no line of values");
        };
        let (Some((group, names)), Some((vgroup, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            bail!("not a counter line pair: {names:?}");
        };
        if group != vgroup {
            bail!("{group} names followed by {vgroup} values");
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse::<u64>() {
                out.insert(format!("{group}.{n}"), v);
            }
        }
    }
    Ok(())
}

/// The counters of the namespace `ns` (a bed's namespace name).
pub fn read_in(ns: &str) -> Result<NetCounters> {
    crate::netns::in_netns(ns, || {
        let mut out = NetCounters::new();
        for f in ["snmp", "netstat"] {
            let path = format!("/proc/thread-self/net/{f}");
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            parse_into(&text, &mut out).with_context(|| format!("parsing {path}"))?;
        }
        Ok(out)
    })
}

/// `name`'s growth from `before` to `after` (0 where either lacks it).
pub fn delta(before: &NetCounters, after: &NetCounters, name: &str) -> u64 {
    match (before.get(name), after.get(name)) {
        (Some(b), Some(a)) => a.saturating_sub(*b),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
Tcp: RtoAlgorithm MaxConn OutSegs RetransSegs\nTcp: 1 -1 1000 7\n";
    const NETSTAT: &str = "TcpExt: SyncookiesSent TCPSACKReorder TCPTSReorder\n\
TcpExt: 0 3 2\nIpExt: InNoRoutes\nIpExt: 5\n";

    #[test]
    fn counters_by_group_and_name() {
        let mut c = NetCounters::new();
        parse_into(SNMP, &mut c).unwrap();
        parse_into(NETSTAT, &mut c).unwrap();
        assert_eq!(c["Tcp.OutSegs"], 1000);
        assert_eq!(c["Tcp.RetransSegs"], 7);
        assert_eq!(c["TcpExt.TCPSACKReorder"], 3);
        assert_eq!(c["TcpExt.TCPTSReorder"], 2);
        assert_eq!(c["IpExt.InNoRoutes"], 5);
        assert!(!c.contains_key("Tcp.MaxConn"));
    }

    #[test]
    fn malformed_text_is_refused() {
        let mut c = NetCounters::new();
        assert!(parse_into("Tcp: OutSegs\n", &mut c).is_err());
        assert!(parse_into("Tcp: OutSegs\nUdp: 1\n", &mut c).is_err());
        assert!(parse_into("garbage\nmore\n", &mut c).is_err());
    }

    #[test]
    fn deltas_grow_or_are_zero() {
        let before = NetCounters::from([("Tcp.OutSegs".to_string(), 10)]);
        let after = NetCounters::from([("Tcp.OutSegs".to_string(), 25)]);
        assert_eq!(delta(&before, &after, "Tcp.OutSegs"), 15);
        assert_eq!(delta(&before, &after, "Tcp.RetransSegs"), 0);
        assert_eq!(delta(&after, &before, "Tcp.OutSegs"), 0);
    }

    #[test]
    fn this_namespace_reads() {
        let mut c = NetCounters::new();
        for f in ["snmp", "netstat"] {
            let text = std::fs::read_to_string(format!("/proc/thread-self/net/{f}")).unwrap();
            parse_into(&text, &mut c).unwrap();
        }
        assert!(c.contains_key("Tcp.OutSegs"));
    }
}
