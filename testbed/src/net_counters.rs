//! A network namespace's protocol counters (`/proc/net/snmp`,
//! `/proc/net/netstat`, `/proc/net/snmp6`: what `nstat` reads), e.g. the
//! kernel senders' retransmissions and the reordering they detected.
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

/// Parses `/proc/net/snmp6`'s `Name value` lines into `out`, the name
/// split after its group's `6` (`Ip6InAddrErrors` is `Ip6.InAddrErrors`,
/// `Icmp6InMsgs` is `Icmp6.InMsgs`); a line without a `6` keeps its name.
pub fn parse_snmp6_into(text: &str, out: &mut NetCounters) -> Result<()> {
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut w = line.split_whitespace();
        let (Some(name), Some(value), None) = (w.next(), w.next(), w.next()) else {
            bail!("not a `Name value` line: {line:?}");
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        let name = match name.split_once('6') {
            Some((group, rest)) if !rest.is_empty() => format!("{group}6.{rest}"),
            _ => name.to_string(),
        };
        out.insert(name, value);
    }
    Ok(())
}

/// The counters of the namespace `ns` (a bed's namespace name); IPv6's
/// when the kernel has IPv6.
pub fn read_in(ns: &str) -> Result<NetCounters> {
    crate::netns::in_netns(ns, || {
        let mut out = NetCounters::new();
        for f in ["snmp", "netstat"] {
            let path = format!("/proc/thread-self/net/{f}");
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            parse_into(&text, &mut out).with_context(|| format!("parsing {path}"))?;
        }
        let path = "/proc/thread-self/net/snmp6";
        match std::fs::read_to_string(path) {
            Ok(text) => {
                parse_snmp6_into(&text, &mut out).with_context(|| format!("parsing {path}"))?
            }
            // A kernel without IPv6 has none.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
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
    fn snmp6_counters_by_group_and_name() {
        let mut c = NetCounters::new();
        parse_snmp6_into(
            "Ip6InReceives                   \t12\nIp6InAddrErrors \t3\n\
             Icmp6InType133 5\nUdpLite6InErrors 0\n",
            &mut c,
        )
        .unwrap();
        assert_eq!(c["Ip6.InAddrErrors"], 3);
        assert_eq!(c["Ip6.InReceives"], 12);
        assert_eq!(c["Icmp6.InType133"], 5);
        assert_eq!(c["UdpLite6.InErrors"], 0);
        assert!(parse_snmp6_into("Ip6InReceives\n", &mut c).is_err());
    }

    /// A `/proc/net/snmp6` recorded on Linux 6.18 (a host's, idle): every
    /// line is one counter, named by its group.
    #[test]
    fn a_recorded_snmp6_parses_whole() {
        let text = include_str!("testdata/snmp6-linux-6.18.txt");
        let mut c = NetCounters::new();
        parse_snmp6_into(text, &mut c).unwrap();
        assert_eq!(c.len(), text.lines().count(), "one counter a line");
        for k in c.keys() {
            let group = k.split_once('.').map(|(g, _)| g);
            assert!(
                matches!(group, Some("Ip6" | "Icmp6" | "Udp6" | "UdpLite6")),
                "{k}"
            );
        }
        for (line, name) in [
            ("Ip6InReceives", "Ip6.InReceives"),
            ("Ip6InAddrErrors", "Ip6.InAddrErrors"),
            ("Icmp6InMsgs", "Icmp6.InMsgs"),
            ("Udp6InDatagrams", "Udp6.InDatagrams"),
        ] {
            let v: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{line} in the sample"));
            assert_eq!(c[name], v, "{name}");
        }
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
