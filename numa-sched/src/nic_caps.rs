//! What a NIC can do (Dragonet's capability model): one snapshot of what
//! the kernel says about an interface, and the facts derived from it that
//! plans need (how many receive queues it can have, whether AF_XDP can be
//! zero-copy, which IRQ serves a queue, whether its RSS hash is one
//! flowlane can predict).
//!
//! Pure data, no I/O: `flowlane-control` reads it (sysfs; ethtool netlink
//! `CHANNELS_GET`, `FEATURES_GET`, `RSS_GET` and the `ETHTOOL_GRXFH` ioctl;
//! netdev netlink `dev-get`, `queue-get`, `napi-get`) and can write it out
//! as TOML, so that a NIC's answers can be recorded on one machine and
//! planned for on another (`flowlane plan --explain --nic-recording FILE`).
//! [`explain`](crate::plan_explain::explain) says, from it, which part of a
//! plan the hardware does and which flowlane does in software.

use serde::{Deserialize, Serialize};

use crate::toeplitz::HashFields;

/// One interface's capabilities, as the kernel reported them. Every part
/// the kernel could not be asked about (an older kernel, a driver without
/// the operation) is `None` or empty: unknown, not "no".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicCaps {
    /// Interface name.
    pub iface: String,
    /// Kernel driver (`device/driver` in sysfs; `veth` from ethtool for
    /// virtual devices without a bus device).
    #[serde(default)]
    pub driver: Option<String>,
    /// The device's NUMA node (`device/numa_node`; none for -1).
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// Receive queues the interface has now (`queues/rx-*`).
    pub rx_queues: u32,
    /// Transmit queues the interface has now (`queues/tx-*`).
    pub tx_queues: u32,
    /// Channels (`ethtool -l`), where the driver reports them.
    #[serde(default)]
    pub channels: Option<Channels>,
    /// RSS in the NIC; `None` when the driver has none (veth).
    #[serde(default)]
    pub rss: Option<RssFacts>,
    /// ntuple flow-steering filters (`ntuple-filters` feature).
    #[serde(default)]
    pub ntuple: Option<Toggle>,
    /// Hashing of received packets (`receive-hashing` feature).
    #[serde(default)]
    pub rxhash: Option<Toggle>,
    /// XDP and AF_XDP support (netdev `dev-get`); `None` on kernels without
    /// the netdev family (before 6.3).
    #[serde(default)]
    pub xdp: Option<XdpFacts>,
    /// Queues and their NAPI instances (netdev `queue-get`, 6.8+).
    #[serde(default)]
    pub queues: Vec<QueueFacts>,
    /// NAPI instances with their IRQ and thread (netdev `napi-get`, 6.8+).
    #[serde(default)]
    pub napis: Vec<NapiFacts>,
    /// Receive-queue IRQs matched by name in `/proc/interrupts` among the
    /// device's MSI(-X) IRQs (`device/msi_irqs`): the source for drivers
    /// whose NAPI instances do not report their IRQ (virtio-net).
    #[serde(default)]
    pub queue_irqs: Vec<QueueIrq>,
    /// Threaded NAPI (`/sys/class/net/IF/threaded`), where sysfs has it.
    #[serde(default)]
    pub threaded_napi: Option<bool>,
}

/// A receive queue's IRQ, matched by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueIrq {
    /// Receive queue.
    pub queue: u32,
    /// Its IRQ.
    pub irq: u32,
}

/// `ethtool -l`: maximum and current counts of each kind of channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channels {
    /// Receive-only channels, at most.
    pub rx_max: u32,
    /// Transmit-only channels, at most.
    pub tx_max: u32,
    /// Other channels (link interrupts and the like), at most.
    pub other_max: u32,
    /// Combined (receive and transmit) channels, at most.
    pub combined_max: u32,
    /// Receive-only channels now.
    pub rx: u32,
    /// Transmit-only channels now.
    pub tx: u32,
    /// Other channels now.
    pub other: u32,
    /// Combined channels now.
    pub combined: u32,
}

/// The NIC's RSS: sizes, hash function, hashed fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RssFacts {
    /// Key length in bytes (0: the key cannot be read or set).
    pub key_len: u32,
    /// Indirection table entries (0: no table).
    pub table_size: u32,
    /// The hash function in force (`toeplitz`, `xor`, `crc32`), if known.
    #[serde(default)]
    pub hash_function: Option<String>,
    /// The fields hashed per flow type, as `ethtool -N IF rx-flow-hash`
    /// letters (`sdfn`: addresses and ports); unknown flow types absent.
    #[serde(default)]
    pub flow_hash: FlowHash,
}

/// Hashed fields of the four flow types flowlane serves, in ethtool's
/// letters (`m` L2 destination, `v` VLAN, `t` L3 protocol, `s`/`d` IP
/// source/destination, `f`/`n` L4 bytes 0–1/2–3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowHash {
    /// TCP over IPv4.
    #[serde(default)]
    pub tcp4: Option<String>,
    /// TCP over IPv6.
    #[serde(default)]
    pub tcp6: Option<String>,
    /// UDP over IPv4.
    #[serde(default)]
    pub udp4: Option<String>,
    /// UDP over IPv6.
    #[serde(default)]
    pub udp6: Option<String>,
}

/// A feature the driver may let the user toggle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toggle {
    /// The device has it (the user may turn it on, or it is fixed on).
    pub available: bool,
    /// It is on now.
    pub on: bool,
}

/// XDP features of a device (`enum netdev_xdp_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XdpFeature {
    /// XDP in the driver: ABORTED, DROP, PASS, TX (native mode).
    Basic,
    /// XDP_REDIRECT (what AF_XDP needs).
    Redirect,
    /// The driver transmits frames redirected to it (`ndo_xdp_xmit`).
    NdoXmit,
    /// AF_XDP zero-copy.
    XskZerocopy,
    /// XDP offloaded to the NIC.
    HwOffload,
    /// Multi-buffer (scatter-gather) frames on receive.
    RxSg,
    /// Multi-buffer frames through `ndo_xdp_xmit`.
    NdoXmitSg,
}

impl XdpFeature {
    /// The feature's name in the netdev spec (`xsk-zerocopy`, ...).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            XdpFeature::Basic => "basic",
            XdpFeature::Redirect => "redirect",
            XdpFeature::NdoXmit => "ndo-xmit",
            XdpFeature::XskZerocopy => "xsk-zerocopy",
            XdpFeature::HwOffload => "hw-offload",
            XdpFeature::RxSg => "rx-sg",
            XdpFeature::NdoXmitSg => "ndo-xmit-sg",
        }
    }
}

/// AF_XDP transmit metadata the device supports (`enum netdev_xsk_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XskFeature {
    /// Transmit timestamps.
    TxTimestamp,
    /// Transmit checksum offload (`XDP_TXMD_FLAGS_CHECKSUM`).
    TxChecksum,
}

impl XskFeature {
    /// The feature's name in the netdev spec.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            XskFeature::TxTimestamp => "tx-timestamp",
            XskFeature::TxChecksum => "tx-checksum",
        }
    }
}

/// What netdev `dev-get` says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdpFacts {
    /// XDP features.
    #[serde(default)]
    pub features: Vec<XdpFeature>,
    /// Fragments a zero-copy AF_XDP frame may have (1: no multi-buffer).
    #[serde(default)]
    pub zc_max_segs: u32,
    /// AF_XDP transmit metadata features.
    #[serde(default)]
    pub xsk: Vec<XskFeature>,
}

/// Receive or transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueKind {
    /// A receive queue.
    Rx,
    /// A transmit queue.
    Tx,
}

/// One queue (netdev `queue-get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueFacts {
    /// Queue index.
    pub id: u32,
    /// Receive or transmit.
    pub kind: QueueKind,
    /// The NAPI instance serving it, if the driver says.
    #[serde(default)]
    pub napi: Option<u32>,
}

/// One NAPI instance (netdev `napi-get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NapiFacts {
    /// NAPI id.
    pub id: u32,
    /// Its interrupt, for a device with one per queue.
    #[serde(default)]
    pub irq: Option<u32>,
    /// Its kernel thread, when NAPI is threaded.
    #[serde(default)]
    pub pid: Option<u32>,
}

/// How AF_XDP sockets on a device move frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum XskMode {
    /// The NIC DMAs into and out of the UMEM.
    ZeroCopy,
    /// The kernel copies each frame between its buffers and the UMEM.
    Copy,
}

impl NicCaps {
    /// Receive queues the interface can have: the channel maximum (receive
    /// or combined, the larger), else the queues it has.
    #[must_use]
    pub fn max_rx_queues(&self) -> u32 {
        match self.channels {
            Some(c) if c.rx_max.max(c.combined_max) > 0 => c.rx_max.max(c.combined_max),
            _ => self.rx_queues,
        }
    }

    /// Whether the device has XDP feature `f`; `None` when unknown.
    #[must_use]
    pub fn has_xdp(&self, f: XdpFeature) -> Option<bool> {
        self.xdp.as_ref().map(|x| x.features.contains(&f))
    }

    /// AF_XDP's mode on this device, if known.
    #[must_use]
    pub fn xsk_mode(&self) -> Option<XskMode> {
        self.has_xdp(XdpFeature::XskZerocopy).map(
            |z| {
                if z {
                    XskMode::ZeroCopy
                } else {
                    XskMode::Copy
                }
            },
        )
    }

    /// The NAPI instance serving receive queue `q`, if the kernel said.
    #[must_use]
    pub fn rx_napi(&self, q: u32) -> Option<&NapiFacts> {
        let id = self
            .queues
            .iter()
            .find(|f| f.kind == QueueKind::Rx && f.id == q)?
            .napi?;
        self.napis.iter().find(|n| n.id == id)
    }

    /// `(queue, napi_id, pid)` of each receive queue `0..rx_queues` whose
    /// NAPI instance has a kernel thread (threaded NAPI; netdev `napi-get`
    /// names its pid): the queue's NAPI from `queue-get` where it says;
    /// where it names no queue's NAPI (veth), the threaded instances in
    /// increasing id order, one per queue, as veth registers them. Empty
    /// when the kernel named no thread.
    #[must_use]
    pub fn rx_napi_threads(&self) -> Vec<(u16, u32, u32)> {
        let pid = |id: u32| self.napis.iter().find(|n| n.id == id)?.pid;
        let queues = (0..=u16::MAX).take(self.rx_queues as usize);
        let by_queue = self
            .queues
            .iter()
            .any(|f| f.kind == QueueKind::Rx && f.napi.is_some());
        if by_queue {
            return queues
                .filter_map(|q| {
                    let id = self.rx_napi(u32::from(q))?.id;
                    Some((q, id, pid(id)?))
                })
                .collect();
        }
        let mut threaded: Vec<(u32, u32)> = self
            .napis
            .iter()
            .filter_map(|n| Some((n.id, n.pid?)))
            .collect();
        threaded.sort_unstable();
        queues
            .zip(threaded)
            .map(|(q, (id, pid))| (q, id, pid))
            .collect()
    }

    /// The IRQ of each receive queue `0..rx_queues` that has one: its
    /// NAPI instance's, else the one matched by name.
    #[must_use]
    pub fn rx_irqs(&self) -> Vec<(u32, u32)> {
        (0..self.rx_queues)
            .filter_map(|q| {
                let by_name = || self.queue_irqs.iter().find(|i| i.queue == q).map(|i| i.irq);
                Some((q, self.rx_napi(q).and_then(|n| n.irq).or_else(by_name)?))
            })
            .collect()
    }

    /// Whether flowlane's software Toeplitz predicts this NIC's queue for
    /// a TCP flow: a Toeplitz hash over addresses and ports (IPv4).
    #[must_use]
    pub fn predictable_tcp4(&self) -> bool {
        let Some(r) = &self.rss else { return false };
        r.hash_function.as_deref().is_none_or(|h| h == "toeplitz")
            && r.key_len > 0
            && r.flow_hash
                .tcp4
                .as_deref()
                .is_none_or(|l| HashFields::from_ethtool_letters(l).is_some())
    }
}

/// The ethtool `rx-flow-hash` letters of an `RXH_*` bit set
/// (include/uapi/linux/ethtool.h), in ethtool's order; `r` for
/// `RXH_DISCARD`.
#[must_use]
pub fn rxh_letters(bits: u64) -> String {
    const LETTERS: [(u64, char); 8] = [
        (1 << 1, 'm'),
        (1 << 2, 'v'),
        (1 << 3, 't'),
        (1 << 4, 's'),
        (1 << 5, 'd'),
        (1 << 6, 'f'),
        (1 << 7, 'n'),
        (1 << 31, 'r'),
    ];
    LETTERS
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|&(_, c)| c)
        .collect()
}

/// The XDP features of an `enum netdev_xdp_act` bit set; unknown bits are
/// left out.
#[must_use]
pub fn xdp_features(bits: u64) -> Vec<XdpFeature> {
    use XdpFeature::*;
    [
        Basic,
        Redirect,
        NdoXmit,
        XskZerocopy,
        HwOffload,
        RxSg,
        NdoXmitSg,
    ]
    .into_iter()
    .enumerate()
    .filter(|(i, _)| bits & (1 << i) != 0)
    .map(|(_, f)| f)
    .collect()
}

/// The AF_XDP features of an `enum netdev_xsk_flags` bit set.
#[must_use]
pub fn xsk_features(bits: u64) -> Vec<XskFeature> {
    [XskFeature::TxTimestamp, XskFeature::TxChecksum]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, f)| f)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_become_names() {
        // RXH_IP_SRC | RXH_IP_DST | RXH_L4_B_0_1 | RXH_L4_B_2_3
        assert_eq!(rxh_letters(0xf0), "sdfn");
        assert_eq!(rxh_letters(0x30), "sd");
        assert_eq!(rxh_letters(0), "");
        assert_eq!(rxh_letters((1 << 31) | 0x2), "mr");
        // veth: BASIC | REDIRECT | NDO_XMIT | RX_SG | NDO_XMIT_SG
        assert_eq!(
            xdp_features(0x67),
            [
                XdpFeature::Basic,
                XdpFeature::Redirect,
                XdpFeature::NdoXmit,
                XdpFeature::RxSg,
                XdpFeature::NdoXmitSg
            ]
        );
        assert_eq!(xdp_features(1 << 40), [], "unknown bits left out");
        assert_eq!(xsk_features(3).len(), 2);
        for f in xdp_features(0x7f) {
            assert_eq!(serde_json::json!(f), f.name(), "serde and name() agree");
        }
        for f in xsk_features(3) {
            assert_eq!(serde_json::json!(f), f.name());
        }
    }

    fn nic() -> NicCaps {
        NicCaps {
            iface: "eth0".into(),
            rx_queues: 2,
            tx_queues: 2,
            queues: vec![
                QueueFacts {
                    id: 0,
                    kind: QueueKind::Rx,
                    napi: Some(8193),
                },
                QueueFacts {
                    id: 1,
                    kind: QueueKind::Rx,
                    napi: Some(8194),
                },
                QueueFacts {
                    id: 0,
                    kind: QueueKind::Tx,
                    napi: Some(8193),
                },
            ],
            napis: vec![
                NapiFacts {
                    id: 8193,
                    irq: Some(40),
                    pid: None,
                },
                NapiFacts {
                    id: 8194,
                    irq: None,
                    pid: Some(77),
                },
            ],
            ..NicCaps::default()
        }
    }

    #[test]
    fn napi_threads_by_queue() {
        let mut n = nic();
        assert_eq!(
            n.rx_napi_threads(),
            [(1, 8194, 77)],
            "queue 0's NAPI has no thread"
        );
        // veth: napi-get gives the threads, queue-get no NAPI of a queue: NAPI ids in
        // queue order, as veth registers them.
        n.queues.clear();
        n.napis = vec![
            NapiFacts {
                id: 8200,
                irq: None,
                pid: Some(12),
            },
            NapiFacts {
                id: 8199,
                irq: None,
                pid: Some(11),
            },
        ];
        assert_eq!(n.rx_napi_threads(), [(0, 8199, 11), (1, 8200, 12)]);
        n.rx_queues = 1;
        assert_eq!(n.rx_napi_threads(), [(0, 8199, 11)]);
        n.napis.iter_mut().for_each(|x| x.pid = None);
        assert!(n.rx_napi_threads().is_empty(), "threaded NAPI off");
    }

    #[test]
    fn derived_facts() {
        let mut n = nic();
        assert_eq!(n.max_rx_queues(), 2, "no channels: the queues it has");
        n.channels = Some(Channels {
            combined_max: 8,
            rx_max: 4,
            combined: 2,
            ..Channels::default()
        });
        assert_eq!(n.max_rx_queues(), 8);
        assert_eq!(
            n.rx_irqs(),
            [(0, 40)],
            "queue 1's NAPI has a thread, no IRQ"
        );
        assert_eq!(n.rx_napi(1).and_then(|x| x.pid), Some(77));
        assert_eq!(n.xsk_mode(), None, "unknown without dev-get");
        n.xdp = Some(XdpFacts {
            features: xdp_features(0x0b),
            ..XdpFacts::default()
        });
        assert_eq!(n.xsk_mode(), Some(XskMode::ZeroCopy));
        assert!(!n.predictable_tcp4(), "no RSS");
        n.rss = Some(RssFacts {
            key_len: 40,
            table_size: 128,
            hash_function: Some("toeplitz".into()),
            flow_hash: FlowHash {
                tcp4: Some("sdfn".into()),
                ..FlowHash::default()
            },
        });
        assert!(n.predictable_tcp4());
        n.rss.as_mut().unwrap().hash_function = Some("xor".into());
        assert!(!n.predictable_tcp4());
    }
}
