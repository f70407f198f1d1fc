//! The generic-netlink messages of the NIC capability model: ethtool
//! `CHANNELS_GET` and `FEATURES_GET` (Documentation/networking/
//! ethtool-netlink.rst), netdev `dev-get`, `queue-get` and `napi-get`
//! (Documentation/netlink/specs/netdev.yaml). Requests built, replies
//! decoded into `flowlane_numa_sched::nic_caps`' parts. Pure: the socket is
//! `netlink`'s.
//!
//! Numbers: include/uapi/linux/ethtool_netlink(_generated).h and
//! include/uapi/linux/netdev.h.

use std::marker::PhantomData;

use super::genl_rss::{A_HEADER_DEV_NAME, FAMILY_NAME, FAMILY_VERSION};

use flowlane_dataplane::control_socket::NicQueueStats;
use flowlane_numa_sched::nic_caps::{
    xdp_features, xsk_features, Channels, NapiFacts, QueueFacts, QueueKind, Toggle, XdpFacts,
};
use netlink_packet_core::{
    parse_string, parse_u32, parse_u64, DecodeError, Emitable, Nla, NlaBuffer, NlasIterator,
    Parseable, ParseableParametrized, NLA_F_NESTED,
};
use netlink_packet_generic::{GenlFamily, GenlHeader};

/// A generic-netlink family: its name and version.
pub(crate) trait Family: std::fmt::Debug {
    /// The family's name (`nlctrl` resolves it to an id).
    const NAME: &'static str;
    /// Its version.
    const VERSION: u8;
}

/// The ethtool family.
#[derive(Debug)]
pub(crate) struct Ethtool;
impl Family for Ethtool {
    const NAME: &'static str = FAMILY_NAME;
    const VERSION: u8 = FAMILY_VERSION;
}

/// The netdev family (Linux 6.3+; queues and NAPI 6.8+).
#[derive(Debug)]
pub(crate) struct Netdev;
impl Family for Netdev {
    const NAME: &'static str = "netdev";
    const VERSION: u8 = 1;
}

/// `ETHTOOL_MSG_FEATURES_GET` (user-to-kernel enum: 11).
pub(crate) const MSG_FEATURES_GET: u8 = 11;
/// `ETHTOOL_MSG_FEATURES_GET_REPLY` (kernel-to-user enum: 11).
const MSG_FEATURES_GET_REPLY: u8 = 11;
/// `ETHTOOL_MSG_CHANNELS_GET` (user-to-kernel enum: 17).
pub(crate) const MSG_CHANNELS_GET: u8 = 17;
/// `ETHTOOL_MSG_CHANNELS_GET_REPLY` (kernel-to-user enum: 18).
const MSG_CHANNELS_GET_REPLY: u8 = 18;
/// `ETHTOOL_A_*_HEADER`: attribute 1 of every ethtool request.
const A_HEADER: u16 = 1;
/// `ETHTOOL_A_FEATURES_HW` (the features the user may toggle: the
/// device's `hw_features`) and `..._ACTIVE` (those on). `..._NOCHANGE` (5)
/// is not the device's fixed features but the constant
/// `NETIF_F_NEVER_CHANGE` set (Documentation/networking/ethtool-netlink.rst,
/// "FEATURES_GET"); a feature outside `HW` is fixed, on if `ACTIVE`.
const A_FEATURES_HW: u16 = 2;
const A_FEATURES_ACTIVE: u16 = 4;
/// `ETHTOOL_A_BITSET_NOMASK` (flag: the listed bits are the set ones),
/// `..._BITS` (nest of `..._BITS_BIT`), `ETHTOOL_A_BITSET_BITS_BIT`, and a
/// bit's `..._BIT_NAME` (string) and `..._BIT_VALUE` (flag).
const A_BITSET_NOMASK: u16 = 1;
const A_BITSET_BITS: u16 = 3;
const A_BITSET_BITS_BIT: u16 = 1;
const A_BITSET_BIT_NAME: u16 = 2;
const A_BITSET_BIT_VALUE: u16 = 3;
/// The feature strings (`netdev_features_strings` in net/ethtool/common.c)
/// of `NETIF_F_NTUPLE` and `NETIF_F_RXHASH`.
const FEATURE_NTUPLE: &str = "rx-ntuple-filter";
const FEATURE_RXHASH: &str = "rx-hashing";

/// `NETDEV_CMD_DEV_GET`, `NETDEV_CMD_QUEUE_GET`, `NETDEV_CMD_NAPI_GET`
/// (requests and replies share the numbers).
pub(crate) const NETDEV_DEV_GET: u8 = 1;
pub(crate) const NETDEV_QUEUE_GET: u8 = 10;
pub(crate) const NETDEV_NAPI_GET: u8 = 11;
/// `NETDEV_A_DEV_IFINDEX`, `..._XDP_FEATURES` (u64), `..._XDP_ZC_MAX_SEGS`
/// (u32), `..._XSK_FEATURES` (u64).
const DEV_IFINDEX: u16 = 1;
const DEV_XDP_FEATURES: u16 = 3;
const DEV_XDP_ZC_MAX_SEGS: u16 = 4;
const DEV_XSK_FEATURES: u16 = 6;
/// `NETDEV_A_QUEUE_ID`, `..._IFINDEX`, `..._TYPE` (0 rx, 1 tx),
/// `..._NAPI_ID`.
const QUEUE_ID: u16 = 1;
const QUEUE_IFINDEX: u16 = 2;
const QUEUE_TYPE: u16 = 3;
const QUEUE_NAPI_ID: u16 = 4;
/// `NETDEV_CMD_QSTATS_GET` (requests and replies share the number).
pub(crate) const NETDEV_QSTATS_GET: u8 = 12;
/// `NETDEV_A_QSTATS_IFINDEX`, `..._QUEUE_TYPE`, `..._QUEUE_ID`,
/// `..._SCOPE` (`NETDEV_QSTATS_SCOPE_QUEUE` = 1: one message per queue),
/// then the counters (uint: 4 or 8 bytes).
const QSTATS_IFINDEX: u16 = 1;
const QSTATS_QUEUE_TYPE: u16 = 2;
const QSTATS_QUEUE_ID: u16 = 3;
const QSTATS_SCOPE: u16 = 4;
const QSTATS_SCOPE_QUEUE: u32 = 1;
const QSTATS_RX_PACKETS: u16 = 8;
const QSTATS_RX_BYTES: u16 = 9;
const QSTATS_TX_PACKETS: u16 = 10;
const QSTATS_TX_BYTES: u16 = 11;
const QSTATS_RX_ALLOC_FAIL: u16 = 12;
const QSTATS_RX_HW_DROPS: u16 = 13;
const QSTATS_TX_HW_DROPS: u16 = 24;
/// `NETDEV_A_NAPI_IFINDEX`, `..._ID`, `..._IRQ`, `..._PID`.
const NAPI_IFINDEX: u16 = 1;
const NAPI_ID: u16 = 2;
const NAPI_IRQ: u16 = 3;
const NAPI_PID: u16 = 4;

/// One attribute, its value as bytes (nested ones parsed on demand).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawAttr {
    /// The type, `NLA_F_NESTED` included when emitted nested.
    pub(crate) kind: u16,
    /// The value.
    pub(crate) value: Vec<u8>,
}

impl RawAttr {
    fn u32(kind: u16, v: u32) -> RawAttr {
        RawAttr {
            kind,
            value: v.to_ne_bytes().to_vec(),
        }
    }

    /// An ethtool request header naming `ifname`.
    fn ethtool_header(ifname: &str) -> RawAttr {
        let name = RawAttr {
            kind: A_HEADER_DEV_NAME,
            value: [ifname.as_bytes(), &[0]].concat(),
        };
        let mut value = vec![0; name.buffer_len()];
        name.emit(&mut value);
        RawAttr {
            kind: A_HEADER | NLA_F_NESTED,
            value,
        }
    }

    /// The attributes nested in this one.
    fn nested(&self) -> impl Iterator<Item = Result<RawAttr, DecodeError>> + '_ {
        NlasIterator::new(&self.value[..]).map(|n| n.and_then(|n| RawAttr::parse(&n)))
    }
}

impl Nla for RawAttr {
    fn value_len(&self) -> usize {
        self.value.len()
    }
    fn kind(&self) -> u16 {
        self.kind
    }
    fn emit_value(&self, buffer: &mut [u8]) {
        buffer.copy_from_slice(&self.value);
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for RawAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        Ok(RawAttr {
            kind: buf.kind(),
            value: buf.value().to_vec(),
        })
    }
}

/// A message of family `F`: a command and its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttrMessage<F> {
    /// The command.
    pub(crate) cmd: u8,
    /// The attributes in order.
    pub(crate) attrs: Vec<RawAttr>,
    family: PhantomData<F>,
}

impl<F> AttrMessage<F> {
    pub(crate) fn new(cmd: u8, attrs: Vec<RawAttr>) -> Self {
        AttrMessage {
            cmd,
            attrs,
            family: PhantomData,
        }
    }

    fn expect(&self, cmd: u8, what: &str) -> Result<(), DecodeError> {
        if self.cmd == cmd {
            Ok(())
        } else {
            Err(DecodeError::from(format!(
                "{what}: the kernel answered command {}, not {cmd}",
                self.cmd
            )))
        }
    }
}

impl<F: Family> GenlFamily for AttrMessage<F> {
    fn family_name() -> &'static str {
        F::NAME
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        F::VERSION
    }
}

impl<F> Emitable for AttrMessage<F> {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl<F> ParseableParametrized<[u8], GenlHeader> for AttrMessage<F> {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let attrs = NlasIterator::new(buf)
            .map(|nla| nla.and_then(|nla| RawAttr::parse(&nla)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AttrMessage::new(header.cmd, attrs))
    }
}

/// `CHANNELS_GET` of `ifname`.
pub(crate) fn channels_get(ifname: &str) -> AttrMessage<Ethtool> {
    AttrMessage::new(MSG_CHANNELS_GET, vec![RawAttr::ethtool_header(ifname)])
}

/// `FEATURES_GET` of `ifname`, bit sets in the verbose (named) form.
pub(crate) fn features_get(ifname: &str) -> AttrMessage<Ethtool> {
    AttrMessage::new(MSG_FEATURES_GET, vec![RawAttr::ethtool_header(ifname)])
}

/// `dev-get` of the device `ifindex`.
pub(crate) fn dev_get(ifindex: u32) -> AttrMessage<Netdev> {
    AttrMessage::new(NETDEV_DEV_GET, vec![RawAttr::u32(DEV_IFINDEX, ifindex)])
}

/// `queue-get` dump of the device `ifindex`.
pub(crate) fn queue_dump(ifindex: u32) -> AttrMessage<Netdev> {
    AttrMessage::new(NETDEV_QUEUE_GET, vec![RawAttr::u32(QUEUE_IFINDEX, ifindex)])
}

/// `napi-get` dump of the device `ifindex`.
pub(crate) fn napi_dump(ifindex: u32) -> AttrMessage<Netdev> {
    AttrMessage::new(NETDEV_NAPI_GET, vec![RawAttr::u32(NAPI_IFINDEX, ifindex)])
}

/// `qstats-get` dump of the device `ifindex`, one message per queue.
pub(crate) fn qstats_dump(ifindex: u32) -> AttrMessage<Netdev> {
    AttrMessage::new(
        NETDEV_QSTATS_GET,
        vec![
            RawAttr::u32(QSTATS_IFINDEX, ifindex),
            RawAttr::u32(QSTATS_SCOPE, QSTATS_SCOPE_QUEUE),
        ],
    )
}

/// One queue's counters of a `qstats-get` dump (those the driver keeps;
/// the others stay `None`).
pub(crate) fn qstats(reply: &AttrMessage<Netdev>) -> Result<NicQueueStats, DecodeError> {
    reply.expect(NETDEV_QSTATS_GET, "qstats-get")?;
    let (mut id, mut kind) = (None, None);
    let mut st = NicQueueStats::default();
    for a in &reply.attrs {
        match a.kind {
            QSTATS_QUEUE_ID => id = Some(parse_u32(&a.value)?),
            QSTATS_QUEUE_TYPE => kind = Some(parse_u32(&a.value)?),
            QSTATS_RX_PACKETS | QSTATS_TX_PACKETS => st.packets = Some(u64_attr(a)?),
            QSTATS_RX_BYTES | QSTATS_TX_BYTES => st.bytes = Some(u64_attr(a)?),
            QSTATS_RX_ALLOC_FAIL => st.alloc_fail = Some(u64_attr(a)?),
            QSTATS_RX_HW_DROPS | QSTATS_TX_HW_DROPS => st.hw_drops = Some(u64_attr(a)?),
            _ => {}
        }
    }
    st.queue = id.ok_or_else(|| DecodeError::from("qstats-get reply without a queue id"))?;
    st.rx = match kind {
        Some(0) => true,
        Some(1) => false,
        other => return Err(DecodeError::from(format!("qstats queue type {other:?}"))),
    };
    Ok(st)
}

/// The counts of a `CHANNELS_GET_REPLY` (absent ones: 0, as ethtool
/// prints "n/a").
pub(crate) fn channels(reply: &AttrMessage<Ethtool>) -> Result<Channels, DecodeError> {
    reply.expect(MSG_CHANNELS_GET_REPLY, "CHANNELS_GET")?;
    let mut c = Channels::default();
    for a in &reply.attrs {
        let slot = match a.kind {
            2 => &mut c.rx_max,
            3 => &mut c.tx_max,
            4 => &mut c.other_max,
            5 => &mut c.combined_max,
            6 => &mut c.rx,
            7 => &mut c.tx,
            8 => &mut c.other,
            9 => &mut c.combined,
            _ => continue,
        };
        *slot = parse_u32(&a.value)?;
    }
    Ok(c)
}

/// The names of the set bits of a verbose bit set.
fn bitset_names(set: &RawAttr) -> Result<Vec<String>, DecodeError> {
    let mut nomask = false;
    let mut bits = Vec::new();
    for a in set.nested() {
        let a = a?;
        match a.kind {
            A_BITSET_NOMASK => nomask = true,
            A_BITSET_BITS => {
                for bit in a.nested() {
                    let bit = bit?;
                    if bit.kind != A_BITSET_BITS_BIT {
                        continue;
                    }
                    let (mut name, mut value) = (None, false);
                    for f in bit.nested() {
                        let f = f?;
                        match f.kind {
                            A_BITSET_BIT_NAME => name = Some(parse_string(&f.value)?),
                            A_BITSET_BIT_VALUE => value = true,
                            _ => {}
                        }
                    }
                    if let Some(n) = name {
                        bits.push((n, value));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(bits
        .into_iter()
        .filter(|&(_, v)| nomask || v)
        .map(|(n, _)| n)
        .collect())
}

/// The ntuple and receive-hashing toggles of a `FEATURES_GET_REPLY`: a
/// feature is on when `ACTIVE` has it, and available when the user may
/// toggle it (`HW`) or it is fixed on (on, and not in `HW`: `ethtool -k`'s
/// "on [fixed]", ntuple filters on mvpp2 and fbnic).
pub(crate) fn features(reply: &AttrMessage<Ethtool>) -> Result<(Toggle, Toggle), DecodeError> {
    reply.expect(MSG_FEATURES_GET_REPLY, "FEATURES_GET")?;
    let (mut hw, mut active) = (Vec::new(), Vec::new());
    for a in &reply.attrs {
        match a.kind {
            A_FEATURES_HW => hw = bitset_names(a)?,
            A_FEATURES_ACTIVE => active = bitset_names(a)?,
            _ => {}
        }
    }
    let toggle = |name: &str| {
        let has = |l: &[String]| l.iter().any(|n| n == name);
        let on = has(&active);
        Toggle {
            available: has(&hw) || on,
            on,
        }
    };
    Ok((toggle(FEATURE_NTUPLE), toggle(FEATURE_RXHASH)))
}

fn u64_attr(a: &RawAttr) -> Result<u64, DecodeError> {
    // The netdev family sends u64 attributes as 8 bytes (uint may be 4).
    match a.value.len() {
        4 => Ok(u64::from(parse_u32(&a.value)?)),
        _ => parse_u64(&a.value),
    }
}

/// What a `dev-get` reply says of XDP and AF_XDP.
pub(crate) fn xdp(reply: &AttrMessage<Netdev>) -> Result<XdpFacts, DecodeError> {
    reply.expect(NETDEV_DEV_GET, "dev-get")?;
    let mut x = XdpFacts::default();
    for a in &reply.attrs {
        match a.kind {
            DEV_XDP_FEATURES => x.features = xdp_features(u64_attr(a)?),
            DEV_XDP_ZC_MAX_SEGS => x.zc_max_segs = parse_u32(&a.value)?,
            DEV_XSK_FEATURES => x.xsk = xsk_features(u64_attr(a)?),
            _ => {}
        }
    }
    Ok(x)
}

/// One queue of a `queue-get` dump.
pub(crate) fn queue(reply: &AttrMessage<Netdev>) -> Result<QueueFacts, DecodeError> {
    reply.expect(NETDEV_QUEUE_GET, "queue-get")?;
    let (mut id, mut kind, mut napi) = (None, None, None);
    for a in &reply.attrs {
        match a.kind {
            QUEUE_ID => id = Some(parse_u32(&a.value)?),
            QUEUE_TYPE => {
                kind = Some(match parse_u32(&a.value)? {
                    0 => QueueKind::Rx,
                    1 => QueueKind::Tx,
                    t => return Err(DecodeError::from(format!("queue type {t}"))),
                })
            }
            QUEUE_NAPI_ID => napi = Some(parse_u32(&a.value)?),
            _ => {}
        }
    }
    match (id, kind) {
        (Some(id), Some(kind)) => Ok(QueueFacts { id, kind, napi }),
        _ => Err(DecodeError::from("queue-get reply without id or type")),
    }
}

/// One NAPI instance of a `napi-get` dump.
pub(crate) fn napi(reply: &AttrMessage<Netdev>) -> Result<NapiFacts, DecodeError> {
    reply.expect(NETDEV_NAPI_GET, "napi-get")?;
    let (mut id, mut irq, mut pid) = (None, None, None);
    for a in &reply.attrs {
        match a.kind {
            NAPI_ID => id = Some(parse_u32(&a.value)?),
            NAPI_IRQ => irq = Some(parse_u32(&a.value)?),
            NAPI_PID => pid = Some(parse_u32(&a.value)?),
            _ => {}
        }
    }
    let id = id.ok_or_else(|| DecodeError::from("napi-get reply without id"))?;
    Ok(NapiFacts { id, irq, pid })
}

#[cfg(test)]
#[cfg(target_endian = "little")]
mod tests {
    //! Replies recorded on Linux 6.18 (`strace -x -s 65535 -e
    //! trace=recvfrom flowlane nic caps --iface IF`, and `nic qstats`): a 4-queue veth
    //! without an XDP program, and this KVM guest's one-queue virtio-net.
    //! Each file holds the messages' generic-netlink payloads (header and
    //! attributes) in hex, a blank line between messages.
    use super::*;
    use flowlane_numa_sched::nic_caps::{XdpFeature, XskFeature};

    fn messages<F>(hex: &str) -> Vec<AttrMessage<F>> {
        crate::nic::recorded_messages(hex)
            .into_iter()
            .map(|b| {
                let header = GenlHeader {
                    cmd: b[0],
                    version: b[1],
                };
                AttrMessage::parse_with_param(&b[4..], header).unwrap()
            })
            .collect()
    }

    fn one<F>(hex: &str) -> AttrMessage<F> {
        let mut all = messages(hex);
        assert_eq!(all.len(), 1);
        all.remove(0)
    }

    #[test]
    fn veth_channels_features_and_xdp() {
        let c = channels(&one(include_str!("testdata/veth-channels.hex"))).unwrap();
        assert_eq!(
            c,
            Channels {
                rx_max: 4,
                tx_max: 4,
                rx: 4,
                tx: 4,
                ..Channels::default()
            }
        );
        let (ntuple, rxhash) = features(&one(include_str!("testdata/veth-features.hex"))).unwrap();
        let off = Toggle {
            available: false,
            on: false,
        };
        assert_eq!((ntuple, rxhash), (off, off), "`ethtool -k`: off [fixed]");
        let x = xdp(&one(include_str!("testdata/veth-dev.hex"))).unwrap();
        assert_eq!(
            x.features,
            [XdpFeature::Basic, XdpFeature::Redirect, XdpFeature::RxSg]
        );
        assert_eq!((x.zc_max_segs, x.xsk.len()), (0, 0));
        let q: Vec<QueueFacts> = messages(include_str!("testdata/veth-queues.hex"))
            .iter()
            .map(|m| queue(m).unwrap())
            .collect();
        assert_eq!(q.len(), 8);
        assert_eq!(q.iter().filter(|q| q.kind == QueueKind::Rx).count(), 4);
        assert!(q.iter().all(|q| q.napi.is_none()), "no NAPI without XDP");
    }

    /// `attrs` nested in an attribute of `kind`.
    fn nest(kind: u16, attrs: &[RawAttr]) -> RawAttr {
        let mut value = vec![0; attrs.buffer_len()];
        attrs.emit(&mut value);
        RawAttr {
            kind: kind | NLA_F_NESTED,
            value,
        }
    }

    /// A verbose bit set of `kind` listing `names` as the set bits
    /// (`ETHTOOL_A_BITSET_NOMASK`).
    fn names(kind: u16, names: &[&str]) -> RawAttr {
        let bits: Vec<RawAttr> = names
            .iter()
            .map(|n| {
                let name = RawAttr {
                    kind: A_BITSET_BIT_NAME,
                    value: [n.as_bytes(), &[0]].concat(),
                };
                nest(A_BITSET_BITS_BIT, &[name])
            })
            .collect();
        let nomask = RawAttr {
            kind: A_BITSET_NOMASK,
            value: Vec::new(),
        };
        nest(kind, &[nomask, nest(A_BITSET_BITS, &bits)])
    }

    /// ntuple filters on and not changeable (`ethtool -k`: "ntuple-filters:
    /// on [fixed]", as on mvpp2 and fbnic): in `ACTIVE`, not in `HW`, and
    /// not in `NOCHANGE` either (that is `NETIF_F_NEVER_CHANGE`, the same
    /// three features on every device). Available, and on.
    #[test]
    fn a_feature_on_but_not_changeable_is_fixed_on() {
        let built = AttrMessage::<Ethtool>::new(
            MSG_FEATURES_GET_REPLY,
            vec![
                RawAttr::ethtool_header("eth0"),
                names(A_FEATURES_HW, &["rx-checksum", "rx-hashing"]),
                names(A_FEATURES_ACTIVE, &["rx-checksum", "rx-ntuple-filter"]),
                // ETHTOOL_A_FEATURES_NOCHANGE: NETIF_F_NEVER_CHANGE.
                names(5, &["vlan-challenged", "netns-local", "fcoe-mtu"]),
            ],
        );
        // Through bytes, as the kernel's reply comes.
        let mut b = vec![0; built.buffer_len()];
        built.emit(&mut b);
        let header = GenlHeader {
            cmd: MSG_FEATURES_GET_REPLY,
            version: 1,
        };
        let reply = AttrMessage::<Ethtool>::parse_with_param(&b, header).unwrap();
        let (ntuple, rxhash) = features(&reply).unwrap();
        assert_eq!(
            ntuple,
            Toggle {
                available: true,
                on: true
            },
            "fixed on"
        );
        assert_eq!(
            rxhash,
            Toggle {
                available: true,
                on: false
            },
            "changeable, off"
        );
    }

    #[test]
    fn virtio_net_zero_copy_and_its_napi() {
        let c = channels(&one(include_str!("testdata/virtio-channels.hex"))).unwrap();
        assert_eq!((c.combined, c.combined_max, c.rx_max), (1, 1, 0));
        let (ntuple, _) = features(&one(include_str!("testdata/virtio-features.hex"))).unwrap();
        assert!(!ntuple.available);
        let x = xdp(&one(include_str!("testdata/virtio-dev.hex"))).unwrap();
        assert!(x.features.contains(&XdpFeature::XskZerocopy));
        assert_eq!(x.zc_max_segs, 1);
        assert!(!x.xsk.contains(&XskFeature::TxChecksum));
        let q: Vec<QueueFacts> = messages(include_str!("testdata/virtio-queues.hex"))
            .iter()
            .map(|m| queue(m).unwrap())
            .collect();
        let rx0 = q.iter().find(|q| q.kind == QueueKind::Rx).unwrap();
        assert_eq!(rx0.napi, Some(257));
        let n = napi(&one(include_str!("testdata/virtio-napis.hex"))).unwrap();
        assert_eq!(
            n,
            NapiFacts {
                id: 257,
                irq: None,
                pid: None
            }
        );
    }

    #[test]
    fn virtio_net_per_queue_counters() {
        let q: Vec<NicQueueStats> = messages(include_str!("testdata/virtio-qstats.hex"))
            .iter()
            .map(|m| qstats(m).unwrap())
            .collect();
        assert_eq!(q.len(), 2, "one receive and one transmit queue");
        assert!(q[0].rx && !q[1].rx);
        assert_eq!((q[0].queue, q[1].queue), (0, 0));
        assert_eq!(q[0].packets, Some(0x5321));
        assert_eq!(q[0].bytes, Some(0x1825_3330));
        assert_eq!(q[1].packets, Some(0x3692));
        assert_eq!(q[0].hw_drops, None, "virtio-net keeps no drop count");
        let mut b = vec![0; qstats_dump(4).buffer_len()];
        qstats_dump(4).emit(&mut b);
        // IFINDEX 4, SCOPE queue.
        assert_eq!(b, [8, 0, 1, 0, 4, 0, 0, 0, 8, 0, 4, 0, 1, 0, 0, 0]);
    }

    #[test]
    fn requests_and_wrong_answers() {
        let mut b = vec![0; channels_get("eth0").buffer_len()];
        channels_get("eth0").emit(&mut b);
        // ETHTOOL_A_CHANNELS_HEADER | NLA_F_NESTED { DEV_NAME "eth0\0" }.
        assert_eq!(
            b,
            [0x10, 0, 0x01, 0x80, 0x09, 0, 0x02, 0, b'e', b't', b'h', b'0', 0, 0, 0, 0]
        );
        let mut b = vec![0; napi_dump(7).buffer_len()];
        napi_dump(7).emit(&mut b);
        assert_eq!(b, [8, 0, 1, 0, 7, 0, 0, 0]);
        // A reply of another command is refused, not misread.
        let dev = one::<Netdev>(include_str!("testdata/veth-dev.hex"));
        assert!(queue(&dev).is_err());
        let ch = one::<Ethtool>(include_str!("testdata/veth-channels.hex"));
        assert!(features(&ch).is_err());
        // A queue without a type.
        let bare = AttrMessage::<Netdev>::new(NETDEV_QUEUE_GET, vec![RawAttr::u32(QUEUE_ID, 0)]);
        assert!(queue(&bare).is_err());
    }
}
