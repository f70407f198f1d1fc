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

use crate::toeplitz::{HashFields, Protocol};

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

/// What the hash of the four flow types flowlane serves takes: their
/// hashed fields, in ethtool's letters (`m` L2 destination, `v` VLAN, `t`
/// L3 protocol, `s`/`d` IP source/destination, `f`/`n` L4 bytes 0–1/2–3),
/// and the transformation of those fields before the hash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowHash {
    /// The input transformation in force ([`xfrm_name`]: `none`,
    /// `symmetric-xor`, `symmetric-or-xor`; `ethtool -X IF xfrm`,
    /// `ethtool_rxfh.input_xfrm` and `ETHTOOL_A_RSS_INPUT_XFRM`, Linux
    /// 6.8+). Unknown on older kernels, which cannot set one: taken as
    /// none.
    #[serde(default)]
    pub input_xfrm: Option<String>,
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
    /// every `protocol` flow, over IPv4 and IPv6: the NIC has RSS and
    /// [`RssFacts::mismatches`] finds nothing (what the kernel did not
    /// report is taken to be as flowlane models it).
    #[must_use]
    pub fn predictable(&self, protocol: Protocol) -> bool {
        self.rss
            .as_ref()
            .is_some_and(|r| r.mismatches(protocol).is_empty())
    }
}

impl FlowHash {
    /// The `(ethtool flow type, hashed fields)` of `protocol` over IPv4
    /// and IPv6; none for other protocols, hashed on addresses only.
    #[must_use]
    pub fn of(&self, protocol: Protocol) -> Vec<(&'static str, Option<&str>)> {
        match protocol {
            Protocol::Tcp => vec![
                ("tcp4", self.tcp4.as_deref()),
                ("tcp6", self.tcp6.as_deref()),
            ],
            Protocol::Udp => vec![
                ("udp4", self.udp4.as_deref()),
                ("udp6", self.udp6.as_deref()),
            ],
            Protocol::Other(_) => Vec::new(),
        }
    }
}

/// A way in which a NIC's RSS hash differs from the one flowlane computes:
/// Toeplitz, with the NIC's key, over the addresses and ports of every
/// TCP and UDP flow as they are (no input transformation), as
/// `RssHashConfig::four_tuple` hashes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashMismatch {
    /// Another hash function than Toeplitz (`xor`, `crc32`).
    Function(String),
    /// An input transformation ([`xfrm_name`]) before the hash.
    InputXfrm(String),
    /// A flow type (`tcp4`, ...) hashed on other fields than addresses
    /// and ports (`sdfn`), as ethtool letters.
    Fields {
        /// The ethtool flow type.
        flow: &'static str,
        /// Its hashed fields.
        letters: String,
    },
    /// The key cannot be read (size 0): the hash cannot be computed.
    NoKey,
}

/// `TCP/IPv4` for `tcp4`, and so on.
fn flow_label(flow: &str) -> String {
    let (l4, ip) = flow.split_at(flow.len().saturating_sub(1));
    format!("{}/IPv{ip}", l4.to_uppercase())
}

impl std::fmt::Display for HashMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HashMismatch::Function(h) => write!(f, "the NIC hashes with {h}, not Toeplitz"),
            HashMismatch::InputXfrm(x) => write!(
                f,
                "the NIC transforms the fields before hashing them ({x}: the source and \
                 destination are combined, so that both directions of a flow hash alike)"
            ),
            HashMismatch::Fields { flow, letters } => {
                let label = flow_label(flow);
                match HashFields::from_ethtool_letters(letters) {
                    Some(HashFields::Addresses) => write!(
                        f,
                        "{label} is hashed on addresses only (`{letters}`): every flow between \
                         two hosts lands on one queue"
                    ),
                    _ => write!(
                        f,
                        "{label} is hashed on fields `{letters}`, not addresses and ports (`sdfn`)"
                    ),
                }
            }
            HashMismatch::NoKey => f.write_str("the NIC's RSS key cannot be read"),
        }
    }
}

/// The commands that make a NIC hash as flowlane computes, for
/// `mismatches` of its interface `iface`, joined with `; `: one `ethtool
/// -X` for the function and the transformation, one `ethtool -N` per flow
/// type. `None` when there are none (nothing to do, or only a key that
/// cannot be read).
#[must_use]
pub fn hash_fixes(iface: &str, mismatches: &[HashMismatch]) -> Option<String> {
    let mut rxfh = Vec::new();
    let mut flows = Vec::new();
    for m in mismatches {
        match m {
            HashMismatch::Function(_) => rxfh.push("hfunc toeplitz"),
            HashMismatch::InputXfrm(_) => rxfh.push("xfrm none"),
            HashMismatch::Fields { flow, .. } if !flows.contains(flow) => flows.push(*flow),
            HashMismatch::Fields { .. } | HashMismatch::NoKey => {}
        }
    }
    let commands: Vec<String> = (!rxfh.is_empty())
        .then(|| format!("ethtool -X {iface} {}", rxfh.join(" ")))
        .into_iter()
        .chain(
            flows
                .iter()
                .map(|flow| format!("ethtool -N {iface} rx-flow-hash {flow} sdfn")),
        )
        .collect();
    (!commands.is_empty()).then(|| commands.join("; "))
}

impl RssFacts {
    /// What makes this NIC's hash of `protocol` flows (IPv4 and IPv6)
    /// differ from the one flowlane computes, in the order the NIC
    /// applies them: the function, the input transformation, each flow
    /// type's fields. Empty when flowlane predicts each flow's queue. What
    /// the kernel did not report ([`unreported`](Self::unreported)) is
    /// taken to be as flowlane models it: Toeplitz, no transformation
    /// (kernels before 6.8 have none), addresses and ports.
    #[must_use]
    pub fn mismatches(&self, protocol: Protocol) -> Vec<HashMismatch> {
        let mut m = Vec::new();
        if self.key_len == 0 {
            m.push(HashMismatch::NoKey);
        }
        if let Some(h) = self.hash_function.as_deref().filter(|&h| h != "toeplitz") {
            m.push(HashMismatch::Function(h.to_string()));
        }
        if let Some(x) = self
            .flow_hash
            .input_xfrm
            .as_deref()
            .filter(|&x| x != "none")
        {
            m.push(HashMismatch::InputXfrm(x.to_string()));
        }
        for (flow, letters) in self.flow_hash.of(protocol) {
            let Some(letters) = letters else { continue };
            if HashFields::from_ethtool_letters(letters) != Some(HashFields::AddressesAndPorts) {
                m.push(HashMismatch::Fields {
                    flow,
                    letters: letters.to_string(),
                });
            }
        }
        m
    }

    /// What the kernel did not report of the hash of `protocol` flows, in
    /// words (`hash function`, `input transformation (...)`, `tcp6 fields`),
    /// which [`mismatches`](Self::mismatches) takes to be as flowlane
    /// models it.
    #[must_use]
    pub fn unreported(&self, protocol: Protocol) -> Vec<String> {
        let mut u = Vec::new();
        if self.hash_function.is_none() {
            u.push("hash function".to_string());
        }
        if self.flow_hash.input_xfrm.is_none() {
            u.push("input transformation (none before Linux 6.8)".to_string());
        }
        for (flow, letters) in self.flow_hash.of(protocol) {
            if letters.is_none() {
                u.push(format!("{flow} fields"));
            }
        }
        u
    }
}

/// The `ethtool -X IF xfrm` name of an `RXH_XFRM_*` bit set
/// (`ethtool_rxfh.input_xfrm`, include/uapi/linux/ethtool.h): `none` for
/// 0, `symmetric-xor` (`RXH_XFRM_SYM_XOR`), `symmetric-or-xor`
/// (`RXH_XFRM_SYM_OR_XOR`, 6.15+), `bit N` for a bit this model does not
/// know; several joined with `+`.
#[must_use]
pub fn xfrm_name(bits: u32) -> String {
    if bits == 0 {
        return "none".into();
    }
    (0..32)
        .filter(|b| bits & (1 << b) != 0)
        .map(|b| match b {
            0 => "symmetric-xor".to_string(),
            1 => "symmetric-or-xor".to_string(),
            b => format!("bit {b}"),
        })
        .collect::<Vec<_>>()
        .join("+")
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
        assert!(!n.predictable(Protocol::Tcp), "no RSS");
        n.rss = Some(RssFacts {
            key_len: 40,
            table_size: 128,
            hash_function: Some("toeplitz".into()),
            flow_hash: FlowHash {
                tcp4: Some("sdfn".into()),
                ..FlowHash::default()
            },
        });
        assert!(n.predictable(Protocol::Tcp));
        n.rss.as_mut().unwrap().hash_function = Some("xor".into());
        assert!(!n.predictable(Protocol::Tcp));
    }

    fn toeplitz(tcp4: &str, tcp6: &str, xfrm: Option<&str>) -> RssFacts {
        RssFacts {
            key_len: 40,
            table_size: 128,
            hash_function: Some("toeplitz".into()),
            flow_hash: FlowHash {
                input_xfrm: xfrm.map(str::to_string),
                tcp4: Some(tcp4.into()),
                tcp6: Some(tcp6.into()),
                udp4: Some("sd".into()),
                udp6: None,
            },
        }
    }

    /// The model hashes addresses and ports of every flow as they are: a
    /// NIC hashing TCP on addresses only (either IP version), or
    /// transforming the fields first, is not predicted, and is told what
    /// to change.
    #[test]
    fn only_the_hash_flowlane_computes_is_predictable() {
        let mut n = nic();
        n.rss = Some(toeplitz("sd", "sdfn", Some("none")));
        assert!(!n.predictable(Protocol::Tcp), "tcp4 on addresses only");
        n.rss = Some(toeplitz("sdfn", "sd", Some("none")));
        assert!(!n.predictable(Protocol::Tcp), "tcp6 on addresses only");
        let r = toeplitz("sdfn", "sdfn", Some("symmetric-xor"));
        assert_eq!(
            r.mismatches(Protocol::Tcp),
            [HashMismatch::InputXfrm("symmetric-xor".into())]
        );
        n.rss = Some(r);
        assert!(!n.predictable(Protocol::Tcp), "symmetric-xor");
        n.rss = Some(toeplitz("sdfn", "sdfn", Some("none")));
        assert!(n.predictable(Protocol::Tcp));
        assert!(!n.predictable(Protocol::Udp), "udp4 on addresses only");
        // A kernel before 6.8 does not say; it has no transformation.
        n.rss = Some(toeplitz("sdfn", "sdfn", None));
        assert!(n.predictable(Protocol::Tcp));
        let r = n.rss.as_ref().unwrap();
        let xfrm = "input transformation (none before Linux 6.8)";
        assert_eq!(r.unreported(Protocol::Tcp), [xfrm]);
        assert_eq!(r.unreported(Protocol::Udp), [xfrm, "udp6 fields"]);
        n.rss.as_mut().unwrap().key_len = 0;
        assert!(!n.predictable(Protocol::Tcp), "no key to hash with");

        let mut all = toeplitz("sd", "sdfnm", Some("symmetric-or-xor"));
        all.hash_function = Some("xor".into());
        let m = all.mismatches(Protocol::Tcp);
        assert_eq!(
            hash_fixes("eth0", &m).as_deref(),
            Some(
                "ethtool -X eth0 hfunc toeplitz xfrm none; ethtool -N eth0 rx-flow-hash tcp4 \
                 sdfn; ethtool -N eth0 rx-flow-hash tcp6 sdfn"
            )
        );
        assert_eq!(
            m[2].to_string(),
            "TCP/IPv4 is hashed on addresses only (`sd`): every flow between two hosts lands \
             on one queue"
        );
        assert_eq!(
            m[3].to_string(),
            "TCP/IPv6 is hashed on fields `sdfnm`, not addresses and ports (`sdfn`)"
        );
        assert_eq!(hash_fixes("eth0", &[HashMismatch::NoKey]), None);
        assert_eq!(xfrm_name(0), "none");
        assert_eq!(xfrm_name(1), "symmetric-xor");
        assert_eq!(xfrm_name(2), "symmetric-or-xor");
        assert_eq!(xfrm_name(0x81), "symmetric-xor+bit 7");
    }
}
