//! The RSS messages of the ethtool generic-netlink family
//! (Documentation/networking/ethtool-netlink.rst, "RSS_GET" and "RSS_SET"):
//! typed attributes, their encoding and the decoding of replies. Pure: the
//! socket is `netlink`'s.
//!
//! Numbers: include/uapi/linux/ethtool_netlink_generated.h (generated from
//! Documentation/netlink/specs/ethtool.yaml).

use netlink_packet_core::{
    emit_u32, parse_string, parse_u32, DecodeError, DefaultNla, Emitable, Nla, NlaBuffer,
    NlasIterator, Parseable, ParseableParametrized, NLA_F_NESTED,
};
use netlink_packet_generic::{GenlFamily, GenlHeader};

/// `ETHTOOL_FAMILY_NAME`.
pub(crate) const FAMILY_NAME: &str = "ethtool";
/// `ETHTOOL_FAMILY_VERSION`.
pub(crate) const FAMILY_VERSION: u8 = 1;
/// `ETHTOOL_MSG_RSS_GET` (user-to-kernel enum: 38, after `ETHTOOL_MSG_PSE_SET`;
/// Linux 6.2+).
pub(crate) const MSG_RSS_GET: u8 = 38;
/// `ETHTOOL_MSG_RSS_SET` (user-to-kernel enum: 48, after
/// `ETHTOOL_MSG_TSCONFIG_SET`; Linux 6.17+).
pub(crate) const MSG_RSS_SET: u8 = 48;
/// `ETHTOOL_MSG_RSS_GET_REPLY` (kernel-to-user enum: 38, after
/// `ETHTOOL_MSG_PSE_GET_REPLY`).
pub(crate) const MSG_RSS_GET_REPLY: u8 = 38;

/// `ETHTOOL_A_RSS_HEADER` (nested `ETHTOOL_A_HEADER_*`).
const A_RSS_HEADER: u16 = 1;
/// `ETHTOOL_A_RSS_CONTEXT` (u32; absent: context 0, the default one).
const A_RSS_CONTEXT: u16 = 2;
/// `ETHTOOL_A_RSS_HFUNC` (u32, `ETH_RSS_HASH_*` bits).
const A_RSS_HFUNC: u16 = 3;
/// `ETHTOOL_A_RSS_INDIR` (binary: `__u32` queues in host byte order).
const A_RSS_INDIR: u16 = 4;
/// `ETHTOOL_A_RSS_HKEY` (binary: the key).
const A_RSS_HKEY: u16 = 5;
/// `ETHTOOL_A_RSS_INPUT_XFRM` (u32, `RXH_XFRM_*` bits; Linux 6.8+, and
/// left out of a reply when 0: net/ethtool/rss.c, `rss_fill_reply`).
const A_RSS_INPUT_XFRM: u16 = 6;
/// `ETHTOOL_A_HEADER_DEV_NAME` (NUL-terminated string).
pub(crate) const A_HEADER_DEV_NAME: u16 = 2;

/// One attribute of an RSS message; the others a reply may carry
/// (`START_CONTEXT`, `FLOW_HASH`, later ones) are kept opaque.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RssAttr {
    /// The request header naming the device (`ETHTOOL_A_RSS_HEADER` with
    /// `ETHTOOL_A_HEADER_DEV_NAME`); `None` when a reply's header has no name.
    Header(Option<String>),
    /// `ETHTOOL_A_RSS_CONTEXT`.
    Context(u32),
    /// `ETHTOOL_A_RSS_HFUNC`.
    Hfunc(u32),
    /// `ETHTOOL_A_RSS_INDIR`: the queue of each bucket.
    Indir(Vec<u32>),
    /// `ETHTOOL_A_RSS_HKEY`: the Toeplitz key.
    Hkey(Vec<u8>),
    /// `ETHTOOL_A_RSS_INPUT_XFRM`.
    InputXfrm(u32),
    /// Anything else.
    Other(DefaultNla),
}

/// The device-name attribute nested in [`RssAttr::Header`].
struct DevName<'a>(&'a str);

impl Nla for DevName<'_> {
    fn value_len(&self) -> usize {
        self.0.len() + 1
    }
    fn kind(&self) -> u16 {
        A_HEADER_DEV_NAME
    }
    fn emit_value(&self, buffer: &mut [u8]) {
        buffer[..self.0.len()].copy_from_slice(self.0.as_bytes());
        buffer[self.0.len()] = 0;
    }
}

impl Nla for RssAttr {
    fn value_len(&self) -> usize {
        match self {
            RssAttr::Header(name) => name.as_deref().map_or(0, |n| DevName(n).buffer_len()),
            RssAttr::Context(_) | RssAttr::Hfunc(_) | RssAttr::InputXfrm(_) => 4,
            RssAttr::Indir(t) => 4 * t.len(),
            RssAttr::Hkey(k) => k.len(),
            RssAttr::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            RssAttr::Header(_) => A_RSS_HEADER | NLA_F_NESTED,
            RssAttr::Context(_) => A_RSS_CONTEXT,
            RssAttr::Hfunc(_) => A_RSS_HFUNC,
            RssAttr::Indir(_) => A_RSS_INDIR,
            RssAttr::Hkey(_) => A_RSS_HKEY,
            RssAttr::InputXfrm(_) => A_RSS_INPUT_XFRM,
            RssAttr::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            RssAttr::Header(name) => {
                if let Some(n) = name {
                    DevName(n).emit(buffer);
                }
            }
            RssAttr::Context(v) | RssAttr::Hfunc(v) | RssAttr::InputXfrm(v) => {
                emit_u32(buffer, *v).expect("4-byte attribute");
            }
            RssAttr::Indir(t) => {
                for (chunk, q) in buffer.chunks_exact_mut(4).zip(t) {
                    chunk.copy_from_slice(&q.to_ne_bytes());
                }
            }
            RssAttr::Hkey(k) => buffer.copy_from_slice(k),
            RssAttr::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for RssAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            A_RSS_HEADER => {
                let mut name = None;
                for nla in NlasIterator::new(v) {
                    let nla = nla?;
                    if nla.kind() == A_HEADER_DEV_NAME {
                        name = Some(parse_string(nla.value())?);
                    }
                }
                RssAttr::Header(name)
            }
            A_RSS_CONTEXT => RssAttr::Context(parse_u32(v)?),
            A_RSS_HFUNC => RssAttr::Hfunc(parse_u32(v)?),
            A_RSS_INDIR => {
                if v.len() % 4 != 0 {
                    return Err(DecodeError::from(format!(
                        "ETHTOOL_A_RSS_INDIR of {} bytes is not a list of u32",
                        v.len()
                    )));
                }
                RssAttr::Indir(
                    v.chunks_exact(4)
                        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                )
            }
            A_RSS_HKEY => RssAttr::Hkey(v.to_vec()),
            A_RSS_INPUT_XFRM => RssAttr::InputXfrm(parse_u32(v)?),
            _ => RssAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// An ethtool RSS message: the command (`ETHTOOL_MSG_RSS_*`) and its
/// attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RssMessage {
    /// `ETHTOOL_MSG_RSS_GET`, `..._SET` or the kernel's `..._GET_REPLY`.
    pub(crate) cmd: u8,
    /// The attributes in order.
    pub(crate) attrs: Vec<RssAttr>,
}

impl RssMessage {
    /// `RSS_GET` of `ifname`'s default context.
    pub(crate) fn get(ifname: &str) -> RssMessage {
        RssMessage {
            cmd: MSG_RSS_GET,
            attrs: vec![RssAttr::Header(Some(ifname.to_string()))],
        }
    }

    /// `RSS_SET` of `ifname`'s default context: the table and/or the key
    /// (what is `None` is left as it is).
    pub(crate) fn set(ifname: &str, table: Option<&[u32]>, key: Option<&[u8]>) -> RssMessage {
        let mut attrs = vec![RssAttr::Header(Some(ifname.to_string()))];
        if let Some(t) = table {
            attrs.push(RssAttr::Indir(t.to_vec()));
        }
        if let Some(k) = key {
            attrs.push(RssAttr::Hkey(k.to_vec()));
        }
        RssMessage {
            cmd: MSG_RSS_SET,
            attrs,
        }
    }

    /// The hash function (`ETH_RSS_HASH_*` bits) of an `RSS_GET_REPLY`, if
    /// it names one.
    pub(crate) fn hfunc(&self) -> Option<u32> {
        self.attrs.iter().find_map(|a| match a {
            RssAttr::Hfunc(h) if *h != 0 => Some(*h),
            _ => None,
        })
    }

    /// The input transformation (`RXH_XFRM_*` bits) of an
    /// `RSS_GET_REPLY`: 0 when it names none (the kernel leaves 0 out, and
    /// kernels before 6.8 have no transformation).
    pub(crate) fn input_xfrm(&self) -> u32 {
        self.attrs
            .iter()
            .find_map(|a| match a {
                RssAttr::InputXfrm(x) => Some(*x),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// The table and key of an `RSS_GET_REPLY` (an absent attribute is an
    /// empty table or key: the driver has none).
    pub(crate) fn into_table_and_key(self) -> Result<(Vec<u32>, Vec<u8>), DecodeError> {
        if self.cmd != MSG_RSS_GET_REPLY {
            return Err(DecodeError::from(format!(
                "ethtool answered command {} to RSS_GET, not RSS_GET_REPLY ({MSG_RSS_GET_REPLY})",
                self.cmd
            )));
        }
        let (mut table, mut key) = (Vec::new(), Vec::new());
        for a in self.attrs {
            match a {
                RssAttr::Indir(t) => table = t,
                RssAttr::Hkey(k) => key = k,
                _ => {}
            }
        }
        Ok((table, key))
    }
}

impl GenlFamily for RssMessage {
    fn family_name() -> &'static str {
        FAMILY_NAME
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        FAMILY_VERSION
    }
}

impl Emitable for RssMessage {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for RssMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let attrs = NlasIterator::new(buf)
            .map(|nla| nla.and_then(|nla| RssAttr::parse(&nla)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RssMessage {
            cmd: header.cmd,
            attrs,
        })
    }
}

#[cfg(test)]
#[cfg(target_endian = "little")]
mod tests {
    //! Whole netlink messages, the expected bytes written by hand from the
    //! uapi headers: `struct nlmsghdr` (len, type = the family id, flags,
    //! seq, pid), `struct genlmsghdr` (cmd, version, reserved), then
    //! 4-byte-aligned attributes (`struct nlattr`: len, type).
    use super::*;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
    use netlink_packet_generic::GenlMessage;

    const FAMILY: u16 = 0x14;

    fn bytes(msg: RssMessage, seq: u32, flags: u16) -> Vec<u8> {
        let mut genl = GenlMessage::from_payload(msg);
        genl.set_resolved_family_id(FAMILY);
        let mut nl = NetlinkMessage::from(genl);
        nl.header.flags = flags;
        nl.header.sequence_number = seq;
        nl.finalize();
        let mut b = vec![0; nl.buffer_len()];
        nl.serialize(&mut b);
        b
    }

    fn parse(b: &[u8]) -> Result<RssMessage, DecodeError> {
        let nl = NetlinkMessage::<GenlMessage<RssMessage>>::deserialize(b)?;
        match nl.payload {
            NetlinkPayload::InnerMessage(g) => Ok(g.payload),
            other => panic!("not a family message: {other:?}"),
        }
    }

    const GET_ETH0: [u8; 36] = [
        0x24, 0, 0, 0, // nlmsg_len 36
        0x14, 0, // nlmsg_type: the family id
        0x01, 0, // NLM_F_REQUEST
        7, 0, 0, 0, // seq
        0, 0, 0, 0, // pid
        38, 1, 0, 0, // ETHTOOL_MSG_RSS_GET, version 1
        0x10, 0, 0x01, 0x80, // ETHTOOL_A_RSS_HEADER | NLA_F_NESTED, 16 bytes
        0x09, 0, 0x02, 0, b'e', b't', b'h', b'0', 0, 0, 0, 0, // DEV_NAME "eth0\0" + pad
    ];

    #[test]
    fn rss_get_request_bytes() {
        assert_eq!(bytes(RssMessage::get("eth0"), 7, NLM_F_REQUEST), GET_ETH0);
        assert_eq!(
            parse(&GET_ETH0).unwrap(),
            RssMessage::get("eth0"),
            "decodes to what encoded it"
        );
    }

    #[test]
    fn matches_a_request_recorded_with_strace() {
        // `strace -x -e trace=sendto flowlane nic rss --iface va` on Linux
        // 6.18 (family id 0x15): nlmsg_len=32, nlmsg_type=ethtool,
        // NLM_F_REQUEST, seq 2, then
        // "\x26\x01\x00\x00\x0c\x00\x01\x80\x07\x00\x02\x00\x76\x61\x00\x00".
        let mut genl = GenlMessage::from_payload(RssMessage::get("va"));
        genl.set_resolved_family_id(0x15);
        let mut nl = NetlinkMessage::from(genl);
        nl.header.flags = NLM_F_REQUEST;
        nl.header.sequence_number = 2;
        nl.finalize();
        let mut b = vec![0; nl.buffer_len()];
        nl.serialize(&mut b);
        let recorded: [u8; 32] = [
            0x20, 0, 0, 0, 0x15, 0, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, //
            0x26, 0x01, 0x00, 0x00, 0x0c, 0x00, 0x01, 0x80, 0x07, 0x00, 0x02, 0x00, 0x76, 0x61,
            0x00, 0x00,
        ];
        assert_eq!(b, recorded);
    }

    #[test]
    fn rss_set_request_bytes() {
        let msg = RssMessage::set("eth0", Some(&[0, 1, 0, 1]), Some(&[1, 2, 3, 4]));
        let expected: Vec<u8> = [
            &[0x40, 0, 0, 0, 0x14, 0, 0x05, 0, 8, 0, 0, 0, 0, 0, 0, 0][..], // REQUEST|ACK
            &[48, 1, 0, 0],                                                 // ETHTOOL_MSG_RSS_SET
            &GET_ETH0[20..36],                                              // the same header
            &[
                0x14, 0, 0x04, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
            ], // INDIR
            &[0x08, 0, 0x05, 0, 1, 2, 3, 4],                                // HKEY
        ]
        .concat();
        assert_eq!(bytes(msg.clone(), 8, NLM_F_REQUEST | NLM_F_ACK), expected);
        assert_eq!(parse(&expected).unwrap(), msg);
        // Key only: no INDIR attribute at all (the table stays).
        let key_only = bytes(
            RssMessage::set("eth0", None, Some(&[9; 4])),
            9,
            NLM_F_REQUEST,
        );
        assert_eq!(key_only.len(), 16 + 4 + 16 + 8);
        assert_eq!(&key_only[36..40], &[0x08, 0, 0x05, 0]);
        // An empty table: an INDIR attribute with no entries, the reset to
        // the driver's default.
        let reset = bytes(RssMessage::set("eth0", Some(&[]), None), 10, NLM_F_REQUEST);
        assert_eq!(reset.len(), 16 + 4 + 16 + 4);
        assert_eq!(&reset[36..40], &[0x04, 0, 0x04, 0]);
        // The reset and a key in one request (`nic set-rss --default
        // --key`): taken or refused together.
        let both = bytes(
            RssMessage::set("eth0", Some(&[]), Some(&[1, 2, 3, 4])),
            11,
            NLM_F_REQUEST | NLM_F_ACK,
        );
        assert_eq!(both.len(), 16 + 4 + 16 + 4 + 8);
        assert_eq!(
            &both[36..48],
            &[0x04, 0, 0x04, 0, 0x08, 0, 0x05, 0, 1, 2, 3, 4]
        );
    }

    /// An `RSS_GET_REPLY` as the kernel writes it: a header with the
    /// device index and name, HFUNC, INDIR, HKEY, INPUT_XFRM
    /// (symmetric-xor), and an attribute this module does not know
    /// (START_CONTEXT, 7).
    fn reply(indir: &[u8]) -> Vec<u8> {
        let body: Vec<u8> = [
            &[38, 1, 0, 0][..],
            &[0x18, 0, 0x01, 0x80, 0x08, 0, 0x01, 0, 2, 0, 0, 0],
            &GET_ETH0[24..36],
            &[0x08, 0, 0x03, 0, 1, 0, 0, 0],
            &[(4 + indir.len()) as u8, 0, 0x04, 0],
            indir,
            &[0u8; 3][..(4 - indir.len() % 4) % 4],
            &[0x08, 0, 0x05, 0, 0x6d, 0x5a, 0x56, 0xda],
            &[0x08, 0, 0x06, 0, 1, 0, 0, 0],
            &[0x08, 0, 0x07, 0, 0, 0, 0, 0],
        ]
        .concat();
        let len = 16 + body.len() as u32;
        [
            &len.to_le_bytes()[..],
            &[0x14, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0],
            &body,
        ]
        .concat()
    }

    #[test]
    fn rss_get_reply_decodes() {
        let r = parse(&reply(&[0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0])).unwrap();
        assert_eq!(r.attrs[0], RssAttr::Header(Some("eth0".into())));
        assert_eq!(r.attrs[1], RssAttr::Hfunc(1));
        assert_eq!(r.attrs[4], RssAttr::InputXfrm(1));
        assert_eq!(r.input_xfrm(), 1, "RXH_XFRM_SYM_XOR");
        assert!(matches!(r.attrs[5], RssAttr::Other(_)));
        assert_eq!(
            r.into_table_and_key().unwrap(),
            (vec![0, 1, 2, 3], vec![0x6d, 0x5a, 0x56, 0xda])
        );
    }

    #[test]
    fn a_large_table_decodes_whole() {
        let msg = RssMessage {
            cmd: MSG_RSS_GET_REPLY,
            attrs: vec![RssAttr::Indir((0..512).map(|i| i % 7).collect())],
        };
        let b = bytes(msg, 1, 0);
        assert_eq!(b.len(), 16 + 4 + 4 + 2048);
        assert_eq!(
            parse(&b).unwrap().into_table_and_key().unwrap().0.len(),
            512
        );
    }

    #[test]
    fn malformed_replies_are_refused() {
        // A table that is not a list of u32.
        let bad = reply(&[0, 0, 0, 0, 1, 0]);
        assert!(parse(&bad).is_err(), "6-byte INDIR");
        // An attribute longer than the message.
        let mut long = reply(&[0, 0, 0, 0]);
        let at = 16 + 4 + 24 + 8; // the INDIR attribute
        long[at] = 200;
        assert!(parse(&long).is_err(), "INDIR past the end");
        // Another command.
        let mut other = reply(&[0, 0, 0, 0]);
        other[16] = 39;
        assert!(parse(&other).unwrap().into_table_and_key().is_err());
        // A truncated message.
        assert!(parse(&reply(&[0, 0, 0, 0])[..30]).is_err());
    }
}
