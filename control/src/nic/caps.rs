//! Reading a NIC's capability model ([`NicCaps`]) from the running kernel:
//! sysfs (queues, NUMA node, driver, threaded NAPI), ethtool netlink
//! (`CHANNELS_GET`, `FEATURES_GET`, `RSS_GET`), the `ETHTOOL_GRXFH` and
//! `ETHTOOL_GDRVINFO` ioctls, and netdev netlink (`dev-get`, `queue-get`,
//! `napi-get`). A question the kernel cannot answer (an older kernel, a
//! driver without the operation) leaves its part unknown; any other
//! failure is an error naming what was asked.

use flowlane_dataplane::control_socket::NicQueueStats;
use flowlane_dataplane::iface::InterfaceInfo;
use flowlane_numa_sched::nic::NicRss;
use flowlane_numa_sched::nic_caps::{
    rxh_letters, xfrm_name, FlowHash, NicCaps, QueueIrq, RssFacts,
};
use flowlane_numa_sched::{match_queue_irqs, parse_proc_interrupts};
use nix::errno::Errno;

use super::error::{Cause, NicError};
use super::ethtool::EthtoolNic;
use super::genl_caps::{self as msg, Ethtool, Family, Netdev};
use super::ioctl;
use super::ioctl_layout::FLOW_TYPES;
use super::netlink::Genl;
use crate::sysroot::Roots;

/// Whether `cause` means "this kernel or driver cannot answer that".
fn unanswerable(cause: &Cause) -> bool {
    matches!(
        cause,
        Cause::Os {
            errno: Errno::EOPNOTSUPP | Errno::EINVAL | Errno::ENOENT,
            ..
        }
    )
}

/// `Ok(None)` for an unanswerable question, the error otherwise.
fn optional<T>(r: Result<T, Cause>, what: &str, iface: &str) -> anyhow::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(c) if unanswerable(&c) => {
            tracing::debug!("{iface}: {what} not answered ({c:?})");
            Ok(None)
        }
        Err(c) => Err(anyhow::anyhow!("{iface}: asking for {what}: {c}")),
    }
}

fn malformed(e: impl std::fmt::Display) -> Cause {
    Cause::Malformed(e.to_string())
}

/// The `ETH_RSS_HASH_*` function names (`rss_hash_func_strings` in
/// net/ethtool/common.c) of the first bit set in `hfunc`.
fn hash_function_name(hfunc: u32) -> String {
    match hfunc.trailing_zeros() {
        0 => "toeplitz".into(),
        1 => "xor".into(),
        2 => "crc32".into(),
        b => format!("function bit {b}"),
    }
}

/// Reads `iface`'s capabilities.
///
/// # Errors
/// No such interface, or a question the kernel refused for another reason
/// than not knowing it (each named).
pub(crate) fn read(roots: &Roots, name: &str) -> anyhow::Result<NicCaps> {
    // First: no such interface is said in these commands' terms.
    let dir = roots.iface_dir_checked(name)?;
    let info = InterfaceInfo::read(&roots.sysfs_root, name)?;
    let driver = match std::fs::read_link(dir.join("device/driver")) {
        Ok(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()),
        Err(_) => optional(ioctl::driver(name), "the driver (GDRVINFO)", name)?,
    };
    let mut caps = NicCaps {
        iface: name.to_string(),
        driver,
        numa_node: info.numa_node,
        rx_queues: info.rx_queues,
        tx_queues: info.tx_queues,
        threaded_napi: roots.napi_threaded(name).ok(),
        ..NicCaps::default()
    };
    if let Some(msi) = roots.iface(name)?.msi_irqs {
        let names = parse_proc_interrupts(&roots.interrupts()?);
        caps.queue_irqs = match_queue_irqs(name, &msi, &names)
            .into_iter()
            .map(|(queue, irq)| QueueIrq {
                queue: u32::from(queue),
                irq,
            })
            .collect();
    }
    if let Some(g) = Genl::open(Ethtool::NAME).map_err(anyhow_cause(name))? {
        read_ethtool(&g, &mut caps)?;
    }
    read_rss(&mut caps)?;
    if let Some(g) = Genl::open(Netdev::NAME).map_err(anyhow_cause(name))? {
        read_netdev(&g, info.ifindex, &mut caps)?;
    }
    Ok(caps)
}

fn anyhow_cause(iface: &str) -> impl Fn(Cause) -> anyhow::Error + '_ {
    move |c| anyhow::anyhow!("{iface}: opening generic netlink: {c}")
}

/// Channels and features through the ethtool family.
fn read_ethtool(g: &Genl, caps: &mut NicCaps) -> anyhow::Result<()> {
    let name = caps.iface.clone();
    let has = |cmd: u8| g.ops().contains(&u32::from(cmd));
    if has(msg::MSG_CHANNELS_GET) {
        let reply = g
            .request(msg::channels_get(&name), false)
            .and_then(|r| r.ok_or_else(|| malformed("no CHANNELS_GET reply")))
            .and_then(|r| msg::channels(&r).map_err(malformed));
        caps.channels = optional(reply, "channels (CHANNELS_GET)", &name)?;
    }
    if has(msg::MSG_FEATURES_GET) {
        let reply = g
            .request(msg::features_get(&name), false)
            .and_then(|r| r.ok_or_else(|| malformed("no FEATURES_GET reply")))
            .and_then(|r| msg::features(&r).map_err(malformed));
        if let Some((ntuple, rxhash)) = optional(reply, "features (FEATURES_GET)", &name)? {
            caps.ntuple = Some(ntuple);
            caps.rxhash = Some(rxhash);
        }
    }
    Ok(())
}

/// RSS sizes, hash function and input transformation (RSS_GET or the
/// ioctls), hashed fields (GRXFH).
fn read_rss(caps: &mut NicCaps) -> anyhow::Result<()> {
    caps.rss = rss(&caps.iface)?.map(|r| r.facts);
    Ok(())
}

/// `name`'s RSS key and table, with its sizes, hash function, input
/// transformation (RSS_GET or the ioctls) and hashed fields (GRXFH);
/// `None` for a device without RSS. A flow type's fields that cannot be
/// read, for whatever reason, are unknown (logged when the reason is
/// another than the kernel not knowing the question).
///
/// # Errors
/// The key, table or hash function asked for and refused for another
/// reason than not knowing the question.
pub(crate) fn rss(name: &str) -> anyhow::Result<Option<NicRss>> {
    // No table (the driver answers, the device has no RSS) is no RSS, as
    // for a driver without the operation.
    let (settings, hash) = match EthtoolNic::new(name).read_with_hash() {
        Ok((s, h, _)) => (s, h),
        Err(NicError::NoRss { .. } | NicError::NoTable { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut flow_hash = FlowHash {
        input_xfrm: input_xfrm(hash.input_xfrm, &release),
        ..FlowHash::default()
    };
    for (flow_type, label) in FLOW_TYPES {
        // A flow type's fields the driver fails to give (a firmware-backed
        // driver's timeout, say) are unknown, as unanswered ones: the key
        // and table were read, and a service that uses TCP alone keeps its
        // model of them (`NicCaps::predictable` says what unknown fields
        // mean).
        let fields = optional(
            ioctl::flow_hash(name, flow_type),
            &format!("the hashed fields of {label} (GRXFH)"),
            name,
        )
        .unwrap_or_else(|e| {
            tracing::warn!("{e}: taken as unknown");
            None
        });
        let slot = match label {
            "tcp4" => &mut flow_hash.tcp4,
            "tcp6" => &mut flow_hash.tcp6,
            "udp4" => &mut flow_hash.udp4,
            _ => &mut flow_hash.udp6,
        };
        *slot = fields.map(rxh_letters);
    }
    let facts = RssFacts {
        key_len: settings.key.len() as u32,
        table_size: settings.table.len() as u32,
        hash_function: hash.hfunc.map(hash_function_name),
        flow_hash,
    };
    Ok(Some(NicRss { settings, facts }))
}

/// The input transformation of `bits` (`RXH_XFRM_*`) read on a kernel of
/// `release` (`uname -r`): a transformation is named; none is `none` from
/// Linux 6.8, which added the field, and unknown before (the ioctl's byte
/// was reserved, the attribute absent: such a kernel cannot set one), or
/// when the release cannot be read.
fn input_xfrm(bits: u32, release: &str) -> Option<String> {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().flatten(), numbers.next().flatten());
    let knows = matches!(version, (Some(major), Some(minor)) if (major, minor) >= (6, 8));
    (bits != 0 || knows).then(|| xfrm_name(bits))
}

/// Each queue's own counters (netdev `qstats-get`): `None` when the kernel
/// or the driver keeps none (veth; kernels before 6.10).
///
/// # Errors
/// No such interface, or a refusal other than not knowing the question.
pub(crate) fn queue_stats(roots: &Roots, name: &str) -> anyhow::Result<Option<Vec<NicQueueStats>>> {
    roots.iface_dir_checked(name)?;
    let info = InterfaceInfo::read(&roots.sysfs_root, name)?;
    let Some(g) = Genl::open(Netdev::NAME).map_err(anyhow_cause(name))? else {
        return Ok(None);
    };
    if !g.ops().contains(&u32::from(msg::NETDEV_QSTATS_GET)) {
        return Ok(None);
    }
    let dump = g.dump(msg::qstats_dump(info.ifindex)).and_then(|all| {
        all.iter()
            .map(|m| msg::qstats(m).map_err(malformed))
            .collect::<Result<Vec<_>, _>>()
    });
    Ok(optional(dump, "per-queue counters (netdev qstats-get)", name)?.filter(|v| !v.is_empty()))
}

/// XDP features, queues and NAPI instances through the netdev family.
fn read_netdev(g: &Genl, ifindex: u32, caps: &mut NicCaps) -> anyhow::Result<()> {
    let name = caps.iface.clone();
    let has = |cmd: u8| g.ops().contains(&u32::from(cmd));
    if has(msg::NETDEV_DEV_GET) {
        let reply = g
            .request(msg::dev_get(ifindex), false)
            .and_then(|r| r.ok_or_else(|| malformed("no dev-get reply")))
            .and_then(|r| msg::xdp(&r).map_err(malformed));
        caps.xdp = optional(reply, "XDP features (netdev dev-get)", &name)?;
    }
    if has(msg::NETDEV_QUEUE_GET) {
        let dump = g.dump(msg::queue_dump(ifindex)).and_then(|all| {
            all.iter()
                .map(|m| msg::queue(m).map_err(malformed))
                .collect::<Result<Vec<_>, _>>()
        });
        caps.queues = optional(dump, "queues (netdev queue-get)", &name)?.unwrap_or_default();
    }
    if has(msg::NETDEV_NAPI_GET) {
        let dump = g.dump(msg::napi_dump(ifindex)).and_then(|all| {
            all.iter()
                .map(|m| msg::napi(m).map_err(malformed))
                .collect::<Result<Vec<_>, _>>()
        });
        caps.napis = optional(dump, "NAPI instances (netdev napi-get)", &name)?.unwrap_or_default();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_function_names() {
        assert_eq!(hash_function_name(1), "toeplitz");
        assert_eq!(hash_function_name(2), "xor");
        assert_eq!(hash_function_name(4), "crc32");
        assert_eq!(hash_function_name(8), "function bit 3");
    }

    #[test]
    fn the_input_transformation_is_unknown_before_6_8() {
        assert_eq!(input_xfrm(0, "6.8.0-31-generic").as_deref(), Some("none"));
        assert_eq!(input_xfrm(0, "6.18.2").as_deref(), Some("none"));
        assert_eq!(input_xfrm(0, "7.0").as_deref(), Some("none"));
        assert_eq!(input_xfrm(0, "6.7.12"), None, "a reserved byte");
        assert_eq!(input_xfrm(0, "5.15.0-105-generic"), None);
        assert_eq!(input_xfrm(0, ""), None, "release unknown");
        assert_eq!(input_xfrm(1, "6.12.1").as_deref(), Some("symmetric-xor"));
        assert_eq!(input_xfrm(2, "").as_deref(), Some("symmetric-or-xor"));
    }
}
