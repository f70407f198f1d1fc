//! The network interface flowlane runs on, as the kernel describes it.
//!
//! Read from sysfs under a configurable root (`/sys` by default) so that the
//! checks are testable on fake trees. Processes started with
//! `ip netns exec` see their namespace's interfaces there.

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
                "{} has {} receive queues; asked for {queues} (use --queues 1..={})",
                self.name, self.rx_queues, self.rx_queues
            )));
        }
        Ok(())
    }
}

/// `<sysfs>/class/net/<name>`, checked: the name is a valid interface name
/// and the interface exists in this network namespace.
pub fn iface_dir(sysfs: &Path, name: &str) -> Result<PathBuf> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.len() > 15 {
        return Err(Error::Setup(format!(
            "{name:?} is not a valid interface name"
        )));
    }
    let dir = sysfs.join("class/net").join(name);
    if !dir.is_dir() {
        return Err(Error::Setup(format!(
            "no interface {name} in this network namespace (see `ip link`: use --iface NAME; on a test bed, --bed NAME)"
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
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Io {
        what: "listing interface addresses".into(),
        source: e.into(),
    })?;
    for a in addrs {
        if a.interface_name != iface {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Ok(sin.ip());
        }
    }
    Err(Error::Setup(format!(
        "{iface} has no IPv4 address: add one (ip addr add A/N dev {iface})"
    )))
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
