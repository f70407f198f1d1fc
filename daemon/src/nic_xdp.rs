//! Whether an XDP program is attached to an interface, as the kernel says
//! (rtnetlink `RTM_GETLINK`, the link's `IFLA_XDP` attribute: what `ip
//! link` shows as `prog/xdp id N`), whoever attached it and however: a BPF
//! link a running service holds, netlink, a tool. Asking needs no
//! privilege and no access to other processes. The daemon takes such a NIC
//! for one in use: a flowlane service it cannot ask (no control socket,
//! not registered yet) may be serving it, its RSS buckets its own.

use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage, LinkXdp, XdpAttached};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// The id of the XDP program attached to `iface` (a name or an alternative
/// name), None when none is; 0 when one is attached but the kernel did not
/// say which.
///
/// # Errors
/// No interface of that name (`NotFound`), no rtnetlink socket, or an
/// answer that does not decode (`InvalidData`).
pub fn xdp_program(iface: &str) -> io::Result<Option<u32>> {
    let ifindex = nix::net::if_::if_nametoindex(iface).map_err(|e| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {iface}: {e}"),
        )
    })?;
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut link = LinkMessage::default();
    link.header.index = ifindex;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = 1;
    let mut req = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetLink(link)),
    );
    req.finalize();
    let mut buf = vec![0; req.buffer_len()];
    req.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let bad = |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    loop {
        let (data, _) = socket.recv_from_full()?;
        if data.is_empty() {
            return Err(bad(&"rtnetlink closed without an answer"));
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
                NetlinkPayload::Error(e) => return Err(e.to_io()),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l))
                    if l.header.index == ifindex =>
                {
                    return Ok(attached(&l.attributes));
                }
                _ => {}
            }
        }
    }
}

/// The program a link's attributes say is attached, if any (see
/// [`xdp_program`]).
fn attached(attributes: &[LinkAttribute]) -> Option<u32> {
    let xdp = attributes.iter().find_map(|a| match a {
        LinkAttribute::Xdp(x) => Some(x),
        _ => None,
    })?;
    let mode = xdp.iter().find_map(|x| match x {
        LinkXdp::Attached(m) => Some(m),
        _ => None,
    })?;
    if *mode == XdpAttached::None {
        return None;
    }
    // Several attached (a native and a generic one): each has its own id.
    let id = xdp.iter().find_map(|x| match x {
        LinkXdp::ProgId(id)
        | LinkXdp::DrvProgId(id)
        | LinkXdp::SkbProgId(id)
        | LinkXdp::HwProgId(id) => Some(*id),
        _ => None,
    });
    Some(id.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_says_which_program_is_attached() {
        let xdp = |x: Vec<LinkXdp>| vec![LinkAttribute::Mtu(1500), LinkAttribute::Xdp(x)];
        assert_eq!(
            attached(&[LinkAttribute::Mtu(1500)]),
            None,
            "no XDP attribute"
        );
        assert_eq!(
            attached(&xdp(vec![LinkXdp::Attached(XdpAttached::None)])),
            None
        );
        assert_eq!(
            attached(&xdp(vec![
                LinkXdp::Attached(XdpAttached::Driver),
                LinkXdp::ProgId(42)
            ])),
            Some(42)
        );
        assert_eq!(
            attached(&xdp(vec![
                LinkXdp::Attached(XdpAttached::Multiple),
                LinkXdp::SkbProgId(7),
                LinkXdp::DrvProgId(8)
            ])),
            Some(7)
        );
    }

    /// The loopback interface, which no test attaches a program to, is
    /// asked like any other; a name no interface has is an error.
    #[test]
    fn the_kernel_is_asked_by_name() {
        assert!(xdp_program("lo").is_ok());
        let e = xdp_program("flnoiface0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }
}
