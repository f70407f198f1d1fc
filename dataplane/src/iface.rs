//! The network interface flowlane runs on, as the kernel describes it.
//!
//! Read from sysfs under a configurable root (`/sys` by default) so that the
//! checks are testable on fake trees. Processes started with
//! `ip netns exec` see their namespace's interfaces there.
//!
//! Also what a running service watches and what a busy interface's message
//! names: the interface's index now, the named network namespace the process
//! lives in, and which process holds an XDP program on an interface (its BPF
//! link's fdinfo).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// What flowlane needs to know about an interface.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceInfo {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub ifindex: u32,
    /// Hardware address.
    pub mac: [u8; 6],
    /// Receive queues the device has.
    pub rx_queues: u32,
    /// Transmit queues the device has.
    pub tx_queues: u32,
    /// MTU.
    pub mtu: u32,
    /// NUMA node of the device (None: no node, as for virtual devices).
    pub numa_node: Option<u32>,
}

/// An interface's own counters (`<sysfs>/class/net/<name>/statistics`):
/// everything the device saw, flowlane's queues and the kernel's traffic
/// alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InterfaceStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Received packets dropped (no buffer, filters).
    pub rx_dropped: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

impl InterfaceStats {
    /// Reads `name`'s counters under `sysfs` (as this process's network
    /// namespace sees it).
    pub fn read(sysfs: &Path, name: &str) -> Result<InterfaceStats> {
        let dir = iface_dir(sysfs, name)?.join("statistics");
        let n = |f: &str| -> Result<u64> {
            let p = dir.join(f);
            let t = read_text(&p)?;
            t.trim().parse().map_err(|_| {
                Error::Setup(format!(
                    "{} holds {:?}, not a number",
                    p.display(),
                    t.trim()
                ))
            })
        };
        Ok(InterfaceStats {
            rx_packets: n("rx_packets")?,
            rx_bytes: n("rx_bytes")?,
            rx_dropped: n("rx_dropped")?,
            rx_errors: n("rx_errors")?,
            tx_packets: n("tx_packets")?,
            tx_bytes: n("tx_bytes")?,
            tx_dropped: n("tx_dropped")?,
            tx_errors: n("tx_errors")?,
        })
    }
}

impl InterfaceInfo {
    /// Reads `name`'s description from `<sysfs>/class/net/<name>`.
    pub fn read(sysfs: &Path, name: &str) -> Result<InterfaceInfo> {
        let dir = iface_dir(sysfs, name)?;
        let ifindex = read_num(&dir.join("ifindex"))?;
        let mtu = read_num(&dir.join("mtu"))?;
        let mac = parse_mac(&read_text(&dir.join("address"))?)
            .ok_or_else(|| Error::Setup(format!("{name} has no Ethernet address")))?;
        Ok(InterfaceInfo {
            name: name.to_string(),
            ifindex,
            mac,
            rx_queues: count_queues(&dir, "rx-")?,
            tx_queues: count_queues(&dir, "tx-")?,
            mtu,
            numa_node: device_facts(&dir)?.numa_node,
        })
    }

    /// Fails unless the device has at least `queues` receive queues.
    pub fn check_queues(&self, queues: u32) -> Result<()> {
        if queues == 0 || queues > self.rx_queues {
            return Err(Error::Setup(format!(
                "{} has {} receive queues; asked for {queues} (set TcpServiceConfig::queues to \
                 1..={})",
                self.name, self.rx_queues, self.rx_queues
            )));
        }
        Ok(())
    }
}

/// What [`iface_dir`] says to do when there is no such interface: the
/// configuration field that names it (`service_args::cli_terms` says the
/// services' flags instead, `--iface` and `--bed`). A program whose flags
/// differ says its own ([`iface_dir_saying`]).
pub const NOT_HERE: &str = "see `ip link`: set TcpServiceConfig::iface to one of them";

/// `<sysfs>/class/net/<name>`, checked: the name is a valid interface name
/// and the interface exists in this network namespace.
pub fn iface_dir(sysfs: &Path, name: &str) -> Result<PathBuf> {
    iface_dir_saying(sysfs, name, NOT_HERE)
}

/// [`iface_dir`], saying `what_to_do` when there is no such interface: for
/// a program whose flags are not the services' (the daemon and
/// `flowlane`'s NIC commands have no `--bed`).
pub fn iface_dir_saying(sysfs: &Path, name: &str, what_to_do: &str) -> Result<PathBuf> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.len() > 15 {
        return Err(Error::Setup(format!(
            "{name:?} is not a valid interface name"
        )));
    }
    let dir = sysfs.join("class/net").join(name);
    if !dir.is_dir() {
        return Err(Error::Setup(format!(
            "no interface {name} in this network namespace ({what_to_do})"
        )));
    }
    Ok(dir)
}

/// Queues of the interface at `dir` whose directory names start with
/// `prefix` (`rx-` or `tx-`).
pub fn count_queues(dir: &Path, prefix: &str) -> Result<u32> {
    let rd = std::fs::read_dir(dir.join("queues")).map_err(|e| Error::Io {
        what: format!("listing {}/queues", dir.display()),
        source: e,
    })?;
    Ok(rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .count() as u32)
}

/// What the interface's device says about where it sits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceFacts {
    /// NUMA node of the device (`device/numa_node`; None for -1 or no device).
    pub numa_node: Option<u32>,
    /// MSI(-X) IRQs of the device (`device/msi_irqs/*`); None without that
    /// directory (virtual devices such as veth).
    pub msi_irqs: Option<Vec<u32>>,
}

/// Reads the device facts of the interface at `dir`. virtio-net's `device`
/// is the virtio device; its PCI function (MSI vectors, NUMA node) is the
/// parent, so that is read instead.
pub fn device_facts(dir: &Path) -> Result<DeviceFacts> {
    let mut device = dir.join("device");
    let is_virtio = std::fs::canonicalize(&device).is_ok_and(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("virtio"))
    });
    if is_virtio && !device.join("msi_irqs").is_dir() {
        device = device.join("..");
    }
    let numa_node = std::fs::read_to_string(device.join("numa_node"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    let msi_dir = device.join("msi_irqs");
    let msi_irqs = if msi_dir.is_dir() {
        let rd = std::fs::read_dir(&msi_dir).map_err(|e| Error::Io {
            what: format!("listing {}", msi_dir.display()),
            source: e,
        })?;
        let mut irqs: Vec<u32> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        irqs.sort_unstable();
        Some(irqs)
    } else {
        None
    };
    Ok(DeviceFacts {
        numa_node,
        msi_irqs,
    })
}

fn read_text(p: &PathBuf) -> Result<String> {
    std::fs::read_to_string(p).map_err(|e| Error::Io {
        what: format!("reading {}", p.display()),
        source: e,
    })
}

fn read_num(p: &PathBuf) -> Result<u32> {
    let t = read_text(p)?;
    t.trim().parse().map_err(|_| {
        Error::Setup(format!(
            "{} holds {:?}, not a number",
            p.display(),
            t.trim()
        ))
    })
}

/// Our IPv4 address on `iface` (the first one).
pub fn local_ipv4(iface: &str) -> Result<std::net::Ipv4Addr> {
    local_ipv4_prefix(iface).map(|(ip, _)| ip)
}

/// Our IPv4 address on `iface` (the first one) and the length of the
/// prefix it was given (`ip addr add A/N`: N; 32 where the kernel tells
/// no netmask).
pub fn local_ipv4_prefix(iface: &str) -> Result<(std::net::Ipv4Addr, u8)> {
    local_ipv4_prefix_if_any(iface)?.ok_or_else(|| {
        Error::Setup(format!(
            "{iface} has no IPv4 address: add one (ip addr add A/N dev {iface})"
        ))
    })
}

/// As [`local_ipv4_prefix`], `None` where `iface` has no IPv4 address (an
/// IPv6-only network's).
pub fn local_ipv4_prefix_if_any(iface: &str) -> Result<Option<(std::net::Ipv4Addr, u8)>> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Io {
        what: "listing interface addresses".into(),
        source: e.into(),
    })?;
    for a in addrs {
        if a.interface_name != iface {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            let prefix = a
                .netmask
                .as_ref()
                .and_then(|m| m.as_sockaddr_in())
                .map_or(32, |m| u32::from(m.ip()).count_ones() as u8);
            return Ok(Some((sin.ip(), prefix)));
        }
    }
    Ok(None)
}

/// Our IPv6 address on `iface` for the data path: the first one that is
/// not link-local (fe80::/10; flowlane does not serve link-local peers,
/// whose frames would need the zone); `None` when it has none.
pub fn local_ipv6(iface: &str) -> Result<Option<std::net::Ipv6Addr>> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Io {
        what: "listing interface addresses".into(),
        source: e.into(),
    })?;
    Ok(addrs
        .filter(|a| a.interface_name == iface)
        .filter_map(|a| a.address.as_ref()?.as_sockaddr_in6().map(|s| s.ip()))
        .find(|ip| !ip.is_unicast_link_local()))
}

/// The index of interface `name` in this network namespace now (None: no
/// such interface).
pub fn current_ifindex(name: &str) -> Option<u32> {
    nix::net::if_::if_nametoindex(name).ok()
}

/// Interface `name`'s `operstate` now (`up`, `down`, `lowerlayerdown`,
/// `unknown`...), read from `<sysfs>/class/net/<name>` (None: no such
/// interface, or unreadable).
pub fn operstate(sysfs: &Path, name: &str) -> Option<String> {
    let text =
        std::fs::read_to_string(sysfs.join("class/net").join(name).join("operstate")).ok()?;
    Some(text.trim().to_string())
}

/// Whether `ip` (of either family) is one of interface `iface`'s
/// addresses now (None: the addresses could not be listed).
pub fn has_address(iface: &str, ip: std::net::IpAddr) -> Option<bool> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    Some(addrs.filter(|a| a.interface_name == iface).any(|a| {
        let Some(s) = a.address.as_ref() else {
            return false;
        };
        match ip {
            std::net::IpAddr::V4(ip) => s.as_sockaddr_in().is_some_and(|s| s.ip() == ip),
            std::net::IpAddr::V6(ip) => s.as_sockaddr_in6().is_some_and(|s| s.ip() == ip),
        }
    }))
}

/// The name of the interface of index `ifindex` in this network namespace
/// now, read from `<sysfs>/class/net` (None: no such interface).
pub fn name_of_index(sysfs: &Path, ifindex: u32) -> Option<String> {
    std::fs::read_dir(sysfs.join("class/net"))
        .ok()?
        .flatten()
        .find(|e| read_num(&e.path().join("ifindex")).ok() == Some(ifindex))
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

/// The MTU of interface `name` now, read from `<sysfs>/class/net/<name>`
/// (None: no such interface, or unreadable).
pub fn current_mtu(sysfs: &Path, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(sysfs.join("class/net").join(name).join("mtu")).ok()?;
    text.trim().parse().ok()
}

/// The name under which iproute2 knows this process's network namespace
/// (`/run/netns/<name>`, as `ip netns identify` finds it); None in the root
/// namespace or an unnamed one.
pub fn netns_name() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self/ns/net").ok()?;
    std::fs::read_dir(NETNS_DIR)
        .ok()?
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::metadata(e.path()).is_ok_and(|m| m.dev() == me.dev() && m.ino() == me.ino())
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

/// Whether `/run/netns/<name>` still names this process's network namespace.
pub fn netns_still_named(name: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::metadata("/proc/self/ns/net"),
        std::fs::metadata(Path::new(NETNS_DIR).join(name)),
    ) {
        (Ok(me), Ok(named)) => me.dev() == named.dev() && me.ino() == named.ino(),
        _ => false,
    }
}

/// `command` (a shell command, such as an `ss` that lists who holds a
/// port) as the operator runs it for a process in the named network
/// namespace `netns` ([`netns_name`]: a service started with `--bed`
/// re-executes itself in its bed's): `ip netns exec NAME command`; as it
/// is for a process in an unnamed one (None).
pub fn in_netns(netns: Option<&str>, command: &str) -> String {
    match netns {
        Some(name) => format!("ip netns exec {name} {command}"),
        None => command.to_string(),
    }
}

/// Where iproute2 mounts named network namespaces.
const NETNS_DIR: &str = "/run/netns";

/// A process, as `ps` would show it: for messages that name who holds
/// something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Its command line, shortened: program name and arguments, without the
    /// bed flags that `--bed` adds on re-execution (`--rss-key=`,
    /// `--rss-table=`, `--neighbor=`), at most 80 characters.
    pub command: String,
}

impl Process {
    /// Reads process `pid` (None if it is gone or a zombie).
    pub fn read(pid: u32) -> Option<Process> {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        if raw.is_empty() {
            return None; // a zombie or a kernel thread
        }
        Some(Process {
            pid,
            command: shorten_command(&raw),
        })
    }
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)
    }
}

/// A NUL-separated command line as one short line: the program's file name,
/// then the arguments without re-execution's bed flags, cut at 80
/// characters.
fn shorten_command(raw: &[u8]) -> String {
    const BED_FLAGS: [&str; 3] = ["--rss-key=", "--rss-table=", "--neighbor="];
    let mut words = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned());
    let Some(prog) = words.next() else {
        return String::new();
    };
    let prog = prog.rsplit('/').next().unwrap_or(&prog).to_string();
    let line = std::iter::once(prog)
        .chain(words.filter(|w| !BED_FLAGS.iter().any(|f| w.starts_with(f))))
        .collect::<Vec<_>>()
        .join(" ");
    if line.chars().count() > 80 {
        format!("{}...", line.chars().take(77).collect::<String>())
    } else {
        line
    }
}

/// The interfaces (by index, in the holder's network namespace) on which
/// process `pid` holds an XDP program through a BPF link: the link's
/// `/proc/PID/fdinfo` names it (`link_type: xdp`, `ifindex: N`; 0 once the
/// interface is gone).
pub fn xdp_links(pid: u32) -> Vec<u32> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf_link")
        })
        .filter_map(|e| {
            let info =
                std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().to_str()?))
                    .ok()?;
            xdp_link_ifindex(&info)
        })
        .collect()
}

/// The interface index of an XDP link's fdinfo text (None: not an XDP link).
fn xdp_link_ifindex(fdinfo: &str) -> Option<u32> {
    let field = |name: &str| {
        fdinfo
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    (field("link_type")? == "xdp").then_some(())?;
    field("ifindex")?.parse().ok()
}

/// The other process of this network namespace that holds an XDP program
/// on interface `ifindex` (through a BPF link, as flowlane attaches), if any:
/// who makes the interface busy.
pub fn xdp_holder(ifindex: u32) -> Option<Process> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self/ns/net").ok()?;
    let own = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| m.dev() == me.dev() && m.ino() == me.ino())
        })
        .find(|&pid| xdp_links(pid).contains(&ifindex))
        .and_then(Process::read)
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in out.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix an address was given comes with it (loopback's
    /// 127.0.0.1/8).
    #[test]
    fn an_address_comes_with_its_prefix() {
        assert_eq!(
            local_ipv4_prefix("lo").unwrap(),
            (std::net::Ipv4Addr::LOCALHOST, 8)
        );
    }

    fn fake_iface(root: &Path, name: &str, rx: u32) {
        let d = root.join("class/net").join(name);
        std::fs::create_dir_all(d.join("queues")).unwrap();
        for q in 0..rx {
            std::fs::create_dir_all(d.join(format!("queues/rx-{q}"))).unwrap();
            std::fs::create_dir_all(d.join(format!("queues/tx-{q}"))).unwrap();
        }
        std::fs::write(d.join("ifindex"), "7\n").unwrap();
        std::fs::write(d.join("mtu"), "1500\n").unwrap();
        std::fs::write(d.join("address"), "02:00:00:aa:bb:cc\n").unwrap();
    }

    #[test]
    fn reads_an_interface_s_counters() {
        let root = std::env::temp_dir().join(format!("flowlane-ifstats-{}", std::process::id()));
        fake_iface(&root, "xsk1", 1);
        let stats = root.join("class/net/xsk1/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        let fields = [
            "rx_packets",
            "rx_bytes",
            "rx_dropped",
            "rx_errors",
            "tx_packets",
            "tx_bytes",
            "tx_dropped",
            "tx_errors",
        ];
        for (i, f) in fields.iter().enumerate() {
            std::fs::write(stats.join(f), format!("{}\n", 1000 + i)).unwrap();
        }
        let s = InterfaceStats::read(&root, "xsk1").unwrap();
        assert_eq!((s.rx_packets, s.rx_errors, s.tx_errors), (1000, 1003, 1007));
        std::fs::write(stats.join("tx_bytes"), "lots\n").unwrap();
        let e = InterfaceStats::read(&root, "xsk1").unwrap_err().to_string();
        assert!(e.contains("tx_bytes") && e.contains("not a number"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn reads_a_fake_sysfs_interface() {
        let root = std::env::temp_dir().join(format!("flowlane-iface-{}", std::process::id()));
        fake_iface(&root, "xsk0", 4);
        let i = InterfaceInfo::read(&root, "xsk0").unwrap();
        assert_eq!(
            (i.ifindex, i.mtu, i.rx_queues, i.tx_queues),
            (7, 1500, 4, 4)
        );
        assert_eq!(i.mac, [2, 0, 0, 0xaa, 0xbb, 0xcc]);
        assert_eq!(i.numa_node, None);
        assert!(i.check_queues(4).is_ok());
        let e = i.check_queues(5).unwrap_err().to_string();
        assert!(e.contains("has 4 receive queues"), "{e}");
        let e = InterfaceInfo::read(&root, "nope0").unwrap_err().to_string();
        assert!(e.contains("no interface nope0"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A command a message tells the operator to run (`ss` listing who
    /// holds a port) runs in the service's named namespace: from the
    /// operator's shell, through `ip netns exec`.
    #[test]
    fn a_command_for_the_operator_runs_in_the_named_namespace() {
        let ss = "ss -uan 'sport = :7777'";
        assert_eq!(
            in_netns(Some("flowlane-b1"), ss),
            "ip netns exec flowlane-b1 ss -uan 'sport = :7777'"
        );
        assert_eq!(in_netns(None, ss), ss);
    }

    #[test]
    fn commands_are_shortened_for_messages() {
        let raw = b"/x/target/debug/flowlane\0http-server\0--port\08080\0--rss-key=6d:5a\0--rss-table=0,1\0--neighbor=10.99.0.2=02:00:00:00:00:02\0";
        assert_eq!(shorten_command(raw), "flowlane http-server --port 8080");
        let long = format!("flowlane\0{}\0", "x".repeat(200));
        let s = shorten_command(long.as_bytes());
        assert_eq!(s.chars().count(), 80);
        assert!(s.ends_with("..."));
        assert_eq!(shorten_command(b""), "");
    }

    #[test]
    fn xdp_links_are_read_from_fdinfo() {
        let xdp = "pos:\t0\nflags:\t02000000\nmnt_id:\t15\nino:\t1057\nlink_type:\txdp\nlink_id:\t7\nprog_tag:\tab\nprog_id:\t42\nifindex:\t3\n";
        assert_eq!(xdp_link_ifindex(xdp), Some(3));
        let tc = "link_type:\ttcx\nlink_id:\t8\nifindex:\t3\n";
        assert_eq!(xdp_link_ifindex(tc), None);
        assert_eq!(xdp_link_ifindex("pos:\t0\n"), None);
        // This test process holds no XDP program.
        assert!(xdp_links(std::process::id()).is_empty());
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(
            parse_mac("0a:1b:2c:3d:4e:5f"),
            Some([0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f])
        );
        assert_eq!(parse_mac("0a:1b:2c:3d:4e"), None);
        assert_eq!(parse_mac("0a:1b:2c:3d:4e:5f:00"), None);
        assert_eq!(parse_mac("zz:1b:2c:3d:4e:5f"), None);
    }
}
