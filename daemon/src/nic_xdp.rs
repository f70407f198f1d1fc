//! Whether an XDP program is attached to an interface, as the kernel says
//! (rtnetlink `RTM_GETLINK`, the link's `IFLA_XDP` attribute: what `ip
//! link` shows as `prog/xdp id N`), whoever attached it and however: a BPF
//! link a running service holds, netlink, a tool. Asking needs no
//! privilege and no access to other processes. The daemon takes such a NIC
//! for one in use: a flowlane service it cannot ask (no control socket,
//! not registered yet) may be serving it, its RSS buckets its own.

use std::io;

use netlink_packet_route::link::{LinkAttribute, LinkMessage, LinkXdp, XdpAttached};
use netlink_packet_route::RouteNetlinkMessage;

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
    let mut link = LinkMessage::default();
    link.header.index = ifindex;
    let answer = flowlane_dataplane::rtnetlink::ask(
        RouteNetlinkMessage::GetLink(link),
        false,
        |m| match m {
            RouteNetlinkMessage::NewLink(l) if l.header.index == ifindex => {
                Some(attached(&l.attributes))
            }
            _ => None,
        },
    )?;
    answer.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "rtnetlink closed without an answer",
        )
    })
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
