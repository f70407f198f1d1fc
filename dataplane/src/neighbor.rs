//! A worker's neighbour table: the Ethernet address of each IPv4 peer.
//!
//! Entries come from three places: static configuration, the kernel's
//! neighbour table (`/proc/net/arp`, read once at start for active opens),
//! and learning — the source MAC of every verified frame a peer sends us.
//! ARP itself stays with the kernel (the XDP program passes it), so the
//! table never sends requests; a missing entry makes the caller drop the
//! segment and TCP retransmit it.
//!
//! One table per worker: no sharing, no locks. The table is a small vector
//! scanned linearly with the last hit cached, which beats hashing for the
//! handful of next hops a server talks to (peers behind a router share
//! the router's MAC through [`Neighbors::set_default`]).

use std::net::Ipv4Addr;

use flowlane_wire::EthernetAddress;

/// Entries beyond this are not learned (configured ones always are).
const MAX_LEARNED: usize = 4096;

/// IPv4 → Ethernet address, per worker.
#[derive(Debug, Clone, Default)]
pub struct Neighbors {
    entries: Vec<(Ipv4Addr, EthernetAddress)>,
    last: usize,
    default: Option<EthernetAddress>,
}

impl Neighbors {
    /// An empty table.
    pub fn new() -> Neighbors {
        Neighbors::default()
    }

    /// Adds a static entry given as `IP=aa:bb:cc:dd:ee:ff` (the `--neighbor`
    /// flag of flowlane's TCP commands); the error says what was expected.
    pub fn insert_spec(&mut self, spec: &str) -> Result<(), String> {
        let parsed = spec
            .split_once('=')
            .and_then(|(ip, mac)| Some((ip.trim().parse::<Ipv4Addr>().ok()?, parse_mac(mac)?)));
        let Some((ip, mac)) = parsed else {
            return Err(format!(
                "bad --neighbor {spec:?}: expected IP=aa:bb:cc:dd:ee:ff"
            ));
        };
        self.insert(ip, mac);
        Ok(())
    }

    /// Adds or replaces an entry.
    pub fn insert(&mut self, ip: Ipv4Addr, mac: EthernetAddress) {
        match self.entries.iter_mut().find(|(a, _)| *a == ip) {
            Some(e) => e.1 = mac,
            None => self.entries.push((ip, mac)),
        }
    }

    /// The address to use for IPs with no entry (a router's), if any.
    pub fn set_default(&mut self, mac: Option<EthernetAddress>) {
        self.default = mac;
    }

    /// Records `mac` as the sender of a verified frame from `ip`. Cheap when
    /// nothing changed (the common case: the last peer again).
    #[inline]
    pub fn learn(&mut self, ip: Ipv4Addr, mac: EthernetAddress) {
        if !mac.is_unicast() {
            return;
        }
        if let Some(e) = self.entries.get_mut(self.last) {
            if e.0 == ip {
                e.1 = mac;
                return;
            }
        }
        if let Some(i) = self.entries.iter().position(|(a, _)| *a == ip) {
            self.entries[i].1 = mac;
            self.last = i;
        } else if self.entries.len() < MAX_LEARNED {
            self.entries.push((ip, mac));
            self.last = self.entries.len() - 1;
        }
    }

    /// The Ethernet address for `ip` (or the default).
    #[inline]
    pub fn lookup(&mut self, ip: Ipv4Addr) -> Option<EthernetAddress> {
        if let Some(e) = self.entries.get(self.last) {
            if e.0 == ip {
                return Some(e.1);
            }
        }
        match self.entries.iter().position(|(a, _)| *a == ip) {
            Some(i) => {
                self.last = i;
                Some(self.entries[i].1)
            }
            None => self.default,
        }
    }

    /// Entries (configured and learned).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds the complete entries of the kernel's neighbour table for
    /// `device` (any device if `None`) from the text of `/proc/net/arp`.
    /// Returns how many were added.
    pub fn load_proc_arp(&mut self, text: &str, device: Option<&str>) -> usize {
        let mut n = 0;
        for (ip, mac, dev) in parse_proc_arp(text) {
            if device.is_none_or(|d| d == dev) {
                self.insert(ip, mac);
                n += 1;
            }
        }
        n
    }
}

/// Parses `/proc/net/arp`: `(ip, mac, device)` of every complete entry
/// (flag ATF_COM, 0x2). Lines that do not parse are skipped.
pub fn parse_proc_arp(text: &str) -> Vec<(Ipv4Addr, EthernetAddress, &str)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 {
                return None;
            }
            let ip: Ipv4Addr = f[0].parse().ok()?;
            let flags = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).ok()?;
            if flags & 0x2 == 0 {
                return None;
            }
            let mac = parse_mac(f[3])?;
            Some((ip, mac, f[5]))
        })
        .collect()
}

/// Parses `aa:bb:cc:dd:ee:ff` ([`crate::iface::parse_mac`], typed).
pub fn parse_mac(text: &str) -> Option<EthernetAddress> {
    crate::iface::parse_mac(text).map(EthernetAddress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbor_specs() {
        let mut n = Neighbors::new();
        n.insert_spec("10.99.0.2=02:00:0a:63:00:02").unwrap();
        assert_eq!(
            n.lookup("10.99.0.2".parse().unwrap()),
            Some(EthernetAddress([2, 0, 0x0a, 0x63, 0, 2]))
        );
        for bad in [
            "10.99.0.2",
            "10.99.0.x=02:00:0a:63:00:02",
            "10.99.0.2=02:00:0a:63:00",
            "10.99.0.2=02:00:0a:63:00:02:03",
        ] {
            let e = n.insert_spec(bad).unwrap_err();
            assert!(e.contains("expected IP=aa:bb:cc:dd:ee:ff"), "{e}");
        }
    }

    const ARP: &str =
        "IP address       HW type     Flags       HW address            Mask     Device
10.99.0.2        0x1         0x2         aa:bb:cc:dd:ee:01     *        xsk0
10.99.0.3        0x1         0x0         00:00:00:00:00:00     *        xsk0
192.0.2.1        0x1         0x2         02:fc:00:00:00:05     *        eth0
garbage line
";

    #[test]
    fn parses_complete_entries_only() {
        let e = parse_proc_arp(ARP);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, Ipv4Addr::new(10, 99, 0, 2));
        assert_eq!(e[0].1, EthernetAddress([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 1]));
        assert_eq!(e[0].2, "xsk0");
        let mut n = Neighbors::new();
        assert_eq!(n.load_proc_arp(ARP, Some("xsk0")), 1);
        assert!(n.lookup(Ipv4Addr::new(192, 0, 2, 1)).is_none());
    }

    #[test]
    fn learns_updates_and_falls_back_to_default() {
        let mut n = Neighbors::new();
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 0, 2);
        n.learn(a, EthernetAddress([2, 0, 0, 0, 0, 1]));
        n.learn(b, EthernetAddress([2, 0, 0, 0, 0, 2]));
        n.learn(a, EthernetAddress([2, 0, 0, 0, 0, 3]));
        // Multicast/broadcast sources are never learned.
        n.learn(b, EthernetAddress::BROADCAST);
        assert_eq!(n.len(), 2);
        assert_eq!(n.lookup(a), Some(EthernetAddress([2, 0, 0, 0, 0, 3])));
        assert_eq!(n.lookup(b), Some(EthernetAddress([2, 0, 0, 0, 0, 2])));
        let c = Ipv4Addr::new(10, 0, 0, 9);
        assert_eq!(n.lookup(c), None);
        n.set_default(Some(EthernetAddress([2, 0, 0, 0, 0, 9])));
        assert_eq!(n.lookup(c), Some(EthernetAddress([2, 0, 0, 0, 0, 9])));
    }

    #[test]
    fn mac_parsing() {
        assert!(parse_mac("aa:bb:cc:dd:ee").is_none());
        assert!(parse_mac("aa:bb:cc:dd:ee:ff:00").is_none());
        assert!(parse_mac("zz:bb:cc:dd:ee:ff").is_none());
        assert_eq!(
            parse_mac("02:00:00:00:00:0a"),
            Some(EthernetAddress([2, 0, 0, 0, 0, 10]))
        );
    }
}
