//! One rtnetlink question (rtnetlink(7)): a request on a fresh
//! `NETLINK_ROUTE` socket and its answer read message by message. The
//! kernel's neighbour table ([`crate::kernel_neighbors`]) and the daemon's
//! look at a NIC's XDP program ask through it.

use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Sends `request` (a dump if `dump`) and gives every message of the
/// answer to `take`, until `take` returns a result (`Ok(Some)`), the dump
/// ends or the socket has nothing more (`Ok(None)`).
///
/// # Errors
/// No rtnetlink socket, the kernel's error answer, or an answer that does
/// not decode ([`io::ErrorKind::InvalidData`]).
pub fn ask<T>(
    request: RouteNetlinkMessage,
    dump: bool,
    mut take: impl FnMut(RouteNetlinkMessage) -> Option<T>,
) -> io::Result<Option<T>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
    header.sequence_number = 1;
    let mut req = NetlinkMessage::new(header, NetlinkPayload::from(request));
    req.finalize();
    let mut buf = vec![0; req.buffer_len()];
    req.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let bad = |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    loop {
        let (data, _) = socket.recv_from_full()?;
        if data.is_empty() {
            return Ok(None);
        }
        let mut at = 0;
        while at < data.len() {
            let len = NetlinkBuffer::new_checked(&data[at..])
                .map_err(|e| bad(&e))?
                .length() as usize;
            let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[at..at + len])
                .map_err(|e| bad(&e))?;
            at += (len + 3) & !3;
            match msg.payload {
                NetlinkPayload::Done(_) => return Ok(None),
                NetlinkPayload::Error(e) => return Err(e.to_io()),
                NetlinkPayload::InnerMessage(m) => {
                    if let Some(t) = take(m) {
                        return Ok(Some(t));
                    }
                }
                _ => {}
            }
        }
    }
}
