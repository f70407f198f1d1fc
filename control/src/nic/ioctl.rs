//! RSS through `SIOCETHTOOL`, for kernels whose ethtool netlink family has
//! no `RSS_GET` (before 6.2) or `RSS_SET` (before 6.17): the requests of
//! `ioctl_layout` through `flowlane_dataplane::ethtool_ioctl`.

use flowlane_dataplane::ethtool_ioctl;
use nix::errno::Errno;

use super::error::Cause;
use super::ioctl_layout::{self as layout, LayoutError, RxfhHeader};

impl From<LayoutError> for Cause {
    fn from(e: LayoutError) -> Cause {
        Cause::Malformed(e.to_string())
    }
}

fn call(ifname: &str, mut buf: Vec<u8>) -> Result<Vec<u8>, Cause> {
    ethtool_ioctl(ifname, &mut buf)?;
    Ok(buf)
}

/// The receive rings RSS may name (`ETHTOOL_GRXRINGS`: what the kernel
/// checks table entries against, for netlink writes too).
pub(crate) fn ring_count(ifname: &str) -> Result<u32, Cause> {
    Ok(layout::rx_rings_reply(&call(
        ifname,
        layout::rx_rings_request(),
    )?)?)
}

/// The driver's name (`ETHTOOL_GDRVINFO`).
pub(crate) fn driver(ifname: &str) -> Result<String, Cause> {
    Ok(layout::drvinfo_driver(&call(
        ifname,
        layout::drvinfo_request(),
    )?)?)
}

/// The `RXH_*` fields RSS hashes for `flow_type` (`ETHTOOL_GRXFH`).
pub(crate) fn flow_hash(ifname: &str, flow_type: u32) -> Result<u64, Cause> {
    Ok(layout::rx_flow_hash_reply(&call(
        ifname,
        layout::rx_flow_hash_request(flow_type),
    )?)?)
}

/// The table and key in force, and the `ethtool_rxfh` header (sizes,
/// `input_xfrm`): `ETHTOOL_GRSSH` (sizes, then contents); the table alone
/// through `ETHTOOL_GRXFHINDIR` where `GRSSH` is unknown.
pub(crate) fn get_rss(ifname: &str) -> Result<(Vec<u32>, Vec<u8>, RxfhHeader), Cause> {
    match call(ifname, layout::rssh_get_request(0, 0)) {
        Ok(sizes) => {
            let h = layout::rssh_header(&sizes)?;
            let reply = call(ifname, layout::rssh_get_request(h.indir_size, h.key_size))?;
            let (table, key) = layout::rssh_get_reply(&reply, h)?;
            Ok((table, key, h))
        }
        Err(Cause::Os {
            errno: Errno::EOPNOTSUPP,
            ..
        }) => {
            let size = layout::rxfh_indir_size(&call(ifname, layout::rxfh_indir_get_request(0))?)?;
            let reply = call(ifname, layout::rxfh_indir_get_request(size))?;
            let table = layout::rxfh_indir_get_reply(&reply, size)?;
            let h = RxfhHeader {
                indir_size: size,
                key_size: 0,
                hfunc: 0,
                input_xfrm: 0,
            };
            Ok((table, Vec::new(), h))
        }
        Err(e) => Err(e),
    }
}

/// Writes `table` (the whole table) and `key`, each if given (the table
/// left as it is when only the key changes): `ETHTOOL_SRSSH`, or
/// `ETHTOOL_SRXFHINDIR` for a table alone where `SRSSH` is unknown.
/// `input_xfrm` is the value read, so that it does not change.
pub(crate) fn set_rss(
    ifname: &str,
    table: Option<&[u32]>,
    key: Option<&[u8]>,
    input_xfrm: u8,
) -> Result<(), Cause> {
    let r = call(ifname, layout::rssh_set_request(table, key, input_xfrm));
    match (r, table) {
        (
            Err(Cause::Os {
                errno: Errno::EOPNOTSUPP,
                ..
            }),
            Some(table),
        ) if key.is_none() => {
            call(ifname, layout::rxfh_indir_set_request(table))?;
            Ok(())
        }
        (r, _) => r.map(|_| ()),
    }
}
