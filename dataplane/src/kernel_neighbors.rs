//! The kernel's neighbour table (ARP for IPv4, neighbour discovery for
//! IPv6), read over rtnetlink (`RTM_GETNEIGH` dump, rtnetlink(7)).
//!
//! flowlane leaves address resolution to the kernel: the XDP program passes
//! ARP and ICMPv6 to it. A service reads the kernel's resolved entries for
//! its interface once at start, so that its first active opens need no frame
//! from the peer ([`crate::neighbor::Neighbors`] learns the rest).

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use flowlane_wire::EthernetAddress;

/// The kernel's usable neighbour entries on the interface with index
/// `ifindex`, both address families: (IP, Ethernet address) of every entry
/// that is resolved (reachable, stale, delayed, being probed or permanent).
///
/// # Errors
/// When no rtnetlink socket can be opened or the dump fails; an answer that
/// does not decode is an [`io::ErrorKind::InvalidData`] error.
pub fn kernel_neighbors(ifindex: u32) -> io::Result<Vec<(IpAddr, EthernetAddress)>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = 1;
    let mut req = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetNeighbour(
            NeighbourMessage::default(),
        )),
    );
    req.finalize();
    let mut buf = vec![0; req.buffer_len()];
    req.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let bad = |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let mut out = Vec::new();
    loop {
        let (data, _) = socket.recv_from_full()?;
        let mut at = 0;
        while at < data.len() {
            let len = NetlinkBuffer::new_checked(&data[at..])
                .map_err(|e| bad(&e))?
                .length() as usize;
            let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[at..at + len])
                .map_err(|e| bad(&e))?;
            at += (len + 3) & !3;
            match msg.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => return Err(e.to_io()),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(n))
                    if n.header.ifindex == ifindex =>
                {
                    out.extend(usable(&n));
                }
                _ => {}
            }
        }
        if data.is_empty() {
            return Ok(out);
        }
    }
}

/// The (IP, MAC) of a resolved entry; `None` for incomplete or failed ones
/// and for those without a 6-byte link-layer address.
fn usable(n: &NeighbourMessage) -> Option<(IpAddr, EthernetAddress)> {
    if !matches!(
        n.header.state,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
    ) {
        return None;
    }
    let mut ip = None;
    let mut mac = None;
    for a in &n.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => ip = Some((*v4).into()),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => ip = Some((*v6).into()),
            NeighbourAttribute::LinkLayerAddress(l) => {
                mac = <[u8; 6]>::try_from(l.as_slice()).ok().map(EthernetAddress)
            }
            _ => {}
        }
    }
    Some((ip?, mac.filter(EthernetAddress::is_unicast)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_table_dumps_without_error() {
        // Loopback has no neighbours; the dump itself must work (any user
        // may read the table).
        let lo = nix::net::if_::if_nametoindex("lo").expect("lo exists");
        let got = kernel_neighbors(lo).expect("rtnetlink dump");
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn only_resolved_entries_with_a_mac_are_used() {
        let mut m = NeighbourMessage::default();
        m.header.state = NeighbourState::Reachable;
        m.attributes = vec![
            NeighbourAttribute::Destination(NeighbourAddress::Inet6("fd99::2".parse().unwrap())),
            NeighbourAttribute::LinkLayerAddress(vec![2, 0, 0, 0, 0, 2]),
        ];
        assert_eq!(
            usable(&m),
            Some((
                "fd99::2".parse().unwrap(),
                EthernetAddress([2, 0, 0, 0, 0, 2])
            ))
        );
        m.header.state = NeighbourState::Incomplete;
        assert_eq!(usable(&m), None);
        m.header.state = NeighbourState::Stale;
        m.attributes.pop();
        assert_eq!(usable(&m), None, "no link-layer address");
    }
}
