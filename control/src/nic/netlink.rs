//! A blocking generic-netlink socket for the ethtool family: resolving the
//! family (its id and the commands it lists) through the `nlctrl` family,
//! one request at a time, extended acks read as the kernel's words.
//!
//! Crates: rust-netlink's `netlink-sys` (the socket, without tokio),
//! `netlink-packet-core` (messages, attributes) and `netlink-packet-generic`
//! (`nlctrl` messages); the ethtool RSS messages are `genl_rss`'s.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use netlink_packet_core::{
    DecodeError, Emitable, NetlinkBuffer, NetlinkDeserializable, NetlinkMessage, NetlinkPayload,
    NlasIterator, ParseableParametrized, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_generic::ctrl::nlas::{GenlCtrlAttrs, OpAttrs};
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};
use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};
use nix::errno::Errno;

use super::error::Cause;

/// `NLM_F_CAPPED` (include/uapi/linux/netlink.h): the error message carries
/// only the request's header, not the whole request.
const NLM_F_CAPPED: u16 = 0x100;
/// `NLM_F_ACK_TLVS`: extended-ack attributes follow the request.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`: the extended ack's message (string).
const NLMSGERR_ATTR_MSG: u16 = 1;
/// `sizeof(struct nlmsghdr)`.
const NLMSG_HDRLEN: usize = 16;

/// The ethtool family on an open socket.
#[derive(Debug)]
pub(crate) struct Genl {
    socket: Mutex<Socket>,
    family: u16,
    ops: Vec<u32>,
    seq: AtomicU32,
}

impl Genl {
    /// Opens a socket and resolves `family`. `Ok(None)` when the kernel has
    /// no such family.
    ///
    /// # Errors
    /// When no generic-netlink socket can be opened, or `nlctrl` fails.
    pub(crate) fn open(family: &str) -> Result<Option<Genl>, Cause> {
        let mut socket = Socket::new(NETLINK_GENERIC)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        // Errors carry the request's header only, and the kernel's words.
        socket.set_cap_ack(true)?;
        socket.set_ext_ack(true)?;
        let mut genl = Genl {
            socket: Mutex::new(socket),
            family: 0,
            ops: Vec::new(),
            seq: AtomicU32::new(1),
        };
        let ask = GenlCtrl {
            cmd: GenlCtrlCmd::GetFamily,
            nlas: vec![GenlCtrlAttrs::FamilyName(family.to_string())],
        };
        let reply = match genl.request(ask, false) {
            Ok(r) => r,
            Err(Cause::Os {
                errno: Errno::ENOENT,
                ..
            }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(reply) = reply else {
            return Err(Cause::Malformed("nlctrl sent no family".into()));
        };
        let (id, ops) = family_of(&reply)
            .ok_or_else(|| Cause::Malformed(format!("nlctrl named no id for {family}")))?;
        genl.family = id;
        genl.ops = ops;
        Ok(Some(genl))
    }

    /// The commands the family lists.
    pub(crate) fn ops(&self) -> &[u32] {
        &self.ops
    }

    /// Sends `payload` to the family and waits for its answer: the reply
    /// (`ack` false) or the acknowledgement (`ack` true: `Ok(None)`).
    ///
    /// # Errors
    /// The kernel's error (with its extended-ack message), or a reply that
    /// does not decode.
    pub(crate) fn request<F>(&self, payload: F, ack: bool) -> Result<Option<F>, Cause>
    where
        F: GenlFamily + Emitable + ParseableParametrized<[u8], GenlHeader> + std::fmt::Debug,
    {
        let flags = NLM_F_REQUEST | if ack { NLM_F_ACK } else { 0 };
        let mut reply = None;
        self.exchange(payload, flags, |m| {
            reply = Some(m);
            !ack
        })?;
        Ok(reply)
    }

    /// Sends `payload` as a dump request and returns every message of the
    /// answer, until the kernel's `NLMSG_DONE`.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub(crate) fn dump<F>(&self, payload: F) -> Result<Vec<F>, Cause>
    where
        F: GenlFamily + Emitable + ParseableParametrized<[u8], GenlHeader> + std::fmt::Debug,
    {
        let mut all = Vec::new();
        self.exchange(payload, NLM_F_REQUEST | NLM_F_DUMP, |m| {
            all.push(m);
            false
        })?;
        Ok(all)
    }

    /// Sends `payload` with `flags` and hands each answering message to
    /// `each` until it returns true, an ack or `NLMSG_DONE` comes, or an
    /// error.
    fn exchange<F>(
        &self,
        payload: F,
        flags: u16,
        mut each: impl FnMut(F) -> bool,
    ) -> Result<(), Cause>
    where
        F: GenlFamily + Emitable + ParseableParametrized<[u8], GenlHeader> + std::fmt::Debug,
    {
        let mut genl = GenlMessage::from_payload(payload);
        genl.set_resolved_family_id(self.family);
        let mut msg = NetlinkMessage::from(genl);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        msg.header.flags = flags;
        msg.header.sequence_number = seq;
        msg.finalize();
        let mut buf = vec![0; msg.buffer_len()];
        msg.serialize(&mut buf);

        let socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        socket.send(&buf, 0)?;
        loop {
            let (data, _) = socket.recv_from_full()?;
            let mut at = 0;
            while at < data.len() {
                let (len, answer) = decode::<GenlMessage<F>>(&data[at..])?;
                at += len;
                match answer {
                    Answer::Message(s, _)
                    | Answer::Ack(s)
                    | Answer::Done(s)
                    | Answer::Failed(s, _)
                    | Answer::Other(s)
                        if s != seq =>
                    {
                        continue
                    }
                    Answer::Message(_, m) => {
                        if each(m.payload) {
                            return Ok(());
                        }
                    }
                    Answer::Ack(_) | Answer::Done(_) => return Ok(()),
                    Answer::Failed(_, cause) => return Err(cause),
                    Answer::Other(_) => {}
                }
            }
        }
    }
}

/// One message read from the socket.
#[derive(Debug)]
enum Answer<M> {
    /// A family message (sequence number, message).
    Message(u32, M),
    /// An acknowledgement.
    Ack(u32),
    /// The end of a dump.
    Done(u32),
    /// An error.
    Failed(u32, Cause),
    /// Anything else (done, noop, overrun).
    Other(u32),
}

/// Decodes the first message of `data`: its length and what it says.
fn decode<M>(data: &[u8]) -> Result<(usize, Answer<M>), Cause>
where
    M: NetlinkDeserializable + std::fmt::Debug,
    M::Error: std::fmt::Display,
{
    let malformed = |e: &dyn std::fmt::Display| Cause::Malformed(e.to_string());
    let buffer = NetlinkBuffer::new_checked(data).map_err(|e: DecodeError| malformed(&e))?;
    let len = (buffer.length() as usize + 3) & !3;
    let msg = NetlinkMessage::<M>::deserialize(&data[..buffer.length() as usize])
        .map_err(|e| malformed(&e))?;
    let seq = msg.header.sequence_number;
    let flags = msg.header.flags;
    let answer = match msg.payload {
        NetlinkPayload::InnerMessage(m) => Answer::Message(seq, m),
        NetlinkPayload::Error(e) if e.code.is_none() => Answer::Ack(seq),
        NetlinkPayload::Done(_) => Answer::Done(seq),
        NetlinkPayload::Error(e) => Answer::Failed(
            seq,
            Cause::Os {
                errno: Errno::from_raw(-e.raw_code()),
                detail: extack_message(flags, &e.header),
            },
        ),
        _ => Answer::Other(seq),
    };
    Ok((len.min(data.len()), answer))
}

/// The extended ack's message (`NLMSGERR_ATTR_MSG`) of an error message
/// with `flags`, whose payload after the error code is `rest`: the request
/// (its header only when `NLM_F_CAPPED`), then the attributes.
pub(crate) fn extack_message(flags: u16, rest: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let request_len = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        u32::from_ne_bytes(rest.get(..4)?.try_into().ok()?) as usize
    };
    let tlvs = rest.get((request_len + 3) & !3..)?;
    NlasIterator::new(tlvs)
        .filter_map(Result::ok)
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .map(|nla| {
            let v = nla.value();
            let v = v.split(|&b| b == 0).next().unwrap_or(v);
            String::from_utf8_lossy(v).into_owned()
        })
}

/// The id and the command list of a `CTRL_CMD_NEWFAMILY` reply.
fn family_of(reply: &GenlCtrl) -> Option<(u16, Vec<u32>)> {
    let mut id = None;
    let mut ops = Vec::new();
    for a in &reply.nlas {
        match a {
            GenlCtrlAttrs::FamilyId(i) => id = Some(*i),
            GenlCtrlAttrs::Ops(list) => {
                ops = list
                    .iter()
                    .flatten()
                    .filter_map(|o| match o {
                        OpAttrs::Id(i) => Some(*i),
                        OpAttrs::Flags(_) => None,
                    })
                    .collect();
            }
            _ => {}
        }
    }
    id.map(|i| (i, ops))
}

#[cfg(test)]
#[cfg(target_endian = "little")]
mod tests {
    use super::*;

    #[test]
    fn extack_message_after_a_capped_header() {
        let mut rest = vec![0u8; 16]; // the request's nlmsghdr
        rest.extend_from_slice(&[0x0e, 0, 0x01, 0]); // NLMSGERR_ATTR_MSG, 14 bytes
        rest.extend_from_slice(b"bad indir\0");
        rest.extend_from_slice(&[0, 0]);
        assert_eq!(
            extack_message(NLM_F_CAPPED | NLM_F_ACK_TLVS, &rest).as_deref(),
            Some("bad indir")
        );
        assert_eq!(extack_message(NLM_F_CAPPED, &rest), None, "no TLVs flag");
        // Not capped: the whole request (20 bytes here) comes first.
        let mut whole = vec![20, 0, 0, 0];
        whole.extend_from_slice(&[0; 16]);
        whole.extend_from_slice(&rest[16..]);
        assert_eq!(
            extack_message(NLM_F_ACK_TLVS, &whole).as_deref(),
            Some("bad indir")
        );
        assert_eq!(extack_message(NLM_F_ACK_TLVS, &[1, 2]), None, "short");
    }

    #[test]
    fn an_error_message_decodes_to_its_errno_and_words() {
        let mut m = vec![0u8; 0];
        let body: Vec<u8> = [
            &(-95i32).to_le_bytes()[..], // -EOPNOTSUPP
            &[0; 16],                    // the capped request header
            &[0x0e, 0, 0x01, 0],
            b"bad indir\0",
            &[0, 0],
        ]
        .concat();
        m.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        m.extend_from_slice(&[2, 0]); // NLMSG_ERROR
        m.extend_from_slice(&(NLM_F_CAPPED | NLM_F_ACK_TLVS).to_le_bytes());
        m.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0]);
        m.extend_from_slice(&body);
        let (len, a) = decode::<GenlMessage<GenlCtrl>>(&m).unwrap();
        assert_eq!(len, m.len());
        match a {
            Answer::Failed(5, Cause::Os { errno, detail }) => {
                assert_eq!(errno, Errno::EOPNOTSUPP);
                assert_eq!(detail.as_deref(), Some("bad indir"));
            }
            other => panic!("{other:?}"),
        }
        assert!(decode::<GenlMessage<GenlCtrl>>(&m[..10]).is_err());
    }

    #[test]
    fn family_id_and_commands() {
        let reply = GenlCtrl {
            cmd: GenlCtrlCmd::NewFamily,
            nlas: vec![
                GenlCtrlAttrs::FamilyName("ethtool".into()),
                GenlCtrlAttrs::FamilyId(0x14),
                GenlCtrlAttrs::Ops(vec![
                    vec![OpAttrs::Id(38), OpAttrs::Flags(0)],
                    vec![OpAttrs::Id(48), OpAttrs::Flags(8)],
                ]),
            ],
        };
        assert_eq!(family_of(&reply), Some((0x14, vec![38, 48])));
        let no_id = GenlCtrl {
            cmd: GenlCtrlCmd::NewFamily,
            nlas: vec![],
        };
        assert_eq!(family_of(&no_id), None);
    }
}
