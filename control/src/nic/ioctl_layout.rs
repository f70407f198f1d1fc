//! Byte layouts of the ethtool ioctl structs that carry RSS, as
//! include/uapi/linux/ethtool.h defines them (native byte order, LP64
//! alignment; offsets checked against the header with `offsetof`):
//!
//! - `struct ethtool_rxnfc` (`ETHTOOL_GRXRINGS`): `cmd`@0 `flow_type`@4
//!   `data`@8 (`__u64`: the ring count) `fs`@16 `rule_cnt`@184, 192 bytes.
//! - `struct ethtool_rxfh` (`ETHTOOL_GRSSH`/`ETHTOOL_SRSSH`): `cmd`@0
//!   `rss_context`@4 `indir_size`@8 `key_size`@12 `hfunc`@16 `input_xfrm`@17
//!   (`rsvd8[0]` before Linux 6.8) `rsvd8`@18 `rsvd32`@20, then
//!   `rss_config`@24: `indir_size` `__u32` queues, then `key_size` key bytes.
//! - `struct ethtool_rxfh_indir` (`ETHTOOL_GRXFHINDIR`/`ETHTOOL_SRXFHINDIR`):
//!   `cmd`@0 `size`@4 `ring_index`@8 (`size` `__u32` queues).
//!
//! Pure: requests are built and replies decoded here; the one system call
//! is `flowlane_dataplane::ethtool_ioctl`, which checks the sizes a buffer
//! declares against its length before the kernel sees it.

use flowlane_dataplane::EthtoolCmd;
use thiserror::Error;

/// `sizeof(struct ethtool_rxnfc)`.
pub(crate) const RXNFC_LEN: usize = 192;
/// `offsetof(struct ethtool_rxfh, rss_config)`.
pub(crate) const RXFH_LEN: usize = 24;
/// `offsetof(struct ethtool_rxfh_indir, ring_index)`.
pub(crate) const RXFH_INDIR_LEN: usize = 8;

/// A reply that does not fit the layout.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum LayoutError {
    /// Shorter than the struct or than the sizes it declares.
    #[error("{what}: {len} bytes, but it needs {need}")]
    Short {
        /// Which struct.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The length it needs.
        need: usize,
    },
    /// The command word is not the one asked for.
    #[error("{what}: command {got:#x}, expected {want:#x}")]
    Command {
        /// Which struct.
        what: &'static str,
        /// The command in the buffer.
        got: u32,
        /// The command asked for.
        want: u32,
    },
    /// The kernel answered with other sizes than the buffer was made for.
    #[error("{what}: the device has {got} entries, the request was made for {asked}")]
    Sizes {
        /// Which field.
        what: &'static str,
        /// The size in the reply.
        got: u64,
        /// The size of the request.
        asked: u64,
    },
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn check(buf: &[u8], what: &'static str, need: usize, cmd: EthtoolCmd) -> Result<(), LayoutError> {
    if buf.len() < need {
        return Err(LayoutError::Short {
            what,
            len: buf.len(),
            need,
        });
    }
    let got = u32_at(buf, 0);
    if got != cmd as u32 {
        return Err(LayoutError::Command {
            what,
            got,
            want: cmd as u32,
        });
    }
    Ok(())
}

/// `ETHTOOL_GRXRINGS`: a zeroed `ethtool_rxnfc` with its command.
pub(crate) fn rx_rings_request() -> Vec<u8> {
    let mut b = vec![0; RXNFC_LEN];
    put_u32(&mut b, 0, EthtoolCmd::GetRxRings as u32);
    b
}

/// The ring count of an `ETHTOOL_GRXRINGS` reply (`data`, a `__u64`).
pub(crate) fn rx_rings_reply(buf: &[u8]) -> Result<u32, LayoutError> {
    check(buf, "ethtool_rxnfc", RXNFC_LEN, EthtoolCmd::GetRxRings)?;
    let data = u64::from_ne_bytes(buf[8..16].try_into().expect("8 bytes"));
    u32::try_from(data).map_err(|_| LayoutError::Sizes {
        what: "rx rings",
        got: data,
        asked: u64::from(u32::MAX),
    })
}

/// `sizeof(struct ethtool_drvinfo)`: `cmd`, then `driver[32]`, four more
/// 32-byte strings, 12 reserved bytes and five `__u32` counts.
pub(crate) const DRVINFO_LEN: usize = 196;

/// `ETHTOOL_GDRVINFO`.
pub(crate) fn drvinfo_request() -> Vec<u8> {
    let mut b = vec![0; DRVINFO_LEN];
    put_u32(&mut b, 0, EthtoolCmd::GetDrvInfo as u32);
    b
}

/// The driver's name in an `ETHTOOL_GDRVINFO` reply.
pub(crate) fn drvinfo_driver(buf: &[u8]) -> Result<String, LayoutError> {
    check(buf, "ethtool_drvinfo", DRVINFO_LEN, EthtoolCmd::GetDrvInfo)?;
    let name = &buf[4..36];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// `TCP_V4_FLOW`, `UDP_V4_FLOW`, `TCP_V6_FLOW`, `UDP_V6_FLOW`
/// (include/uapi/linux/ethtool.h): the flow types whose hashed fields the
/// capability model reports, with their `rx-flow-hash` names.
pub(crate) const FLOW_TYPES: [(u32, &str); 4] =
    [(1, "tcp4"), (5, "tcp6"), (2, "udp4"), (6, "udp6")];

/// `ETHTOOL_GRXFH` for `flow_type` (RSS context 0).
pub(crate) fn rx_flow_hash_request(flow_type: u32) -> Vec<u8> {
    let mut b = vec![0; RXNFC_LEN];
    put_u32(&mut b, 0, EthtoolCmd::GetRxFlowHash as u32);
    put_u32(&mut b, 4, flow_type);
    b
}

/// The `RXH_*` bits of an `ETHTOOL_GRXFH` reply (`data`).
pub(crate) fn rx_flow_hash_reply(buf: &[u8]) -> Result<u64, LayoutError> {
    check(buf, "ethtool_rxnfc", RXNFC_LEN, EthtoolCmd::GetRxFlowHash)?;
    Ok(u64::from_ne_bytes(buf[8..16].try_into().expect("8 bytes")))
}

/// The fixed part of an `ethtool_rxfh`: what `ETHTOOL_GRSSH` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RxfhHeader {
    /// Indirection table entries.
    pub(crate) indir_size: u32,
    /// Key bytes.
    pub(crate) key_size: u32,
    /// `ETH_RSS_HASH_*` bits in force.
    pub(crate) hfunc: u8,
    /// `input_xfrm` in force (0 before Linux 6.8, where it was reserved);
    /// echoed back on writes so that they leave it as it is.
    pub(crate) input_xfrm: u8,
}

/// `ETHTOOL_GRSSH` with a buffer of `indir_size` entries and `key_size`
/// key bytes (both 0: ask for the sizes only).
pub(crate) fn rssh_get_request(indir_size: u32, key_size: u32) -> Vec<u8> {
    let mut b = vec![0; RXFH_LEN + 4 * indir_size as usize + key_size as usize];
    put_u32(&mut b, 0, EthtoolCmd::GetRssh as u32);
    put_u32(&mut b, 8, indir_size);
    put_u32(&mut b, 12, key_size);
    b
}

/// The header of an `ETHTOOL_GRSSH` reply.
pub(crate) fn rssh_header(buf: &[u8]) -> Result<RxfhHeader, LayoutError> {
    check(buf, "ethtool_rxfh", RXFH_LEN, EthtoolCmd::GetRssh)?;
    Ok(RxfhHeader {
        indir_size: u32_at(buf, 8),
        key_size: u32_at(buf, 12),
        hfunc: buf[16],
        input_xfrm: buf[17],
    })
}

/// The table and key of an `ETHTOOL_GRSSH` reply to
/// `rssh_get_request(asked.indir_size, asked.key_size)`: refused when the
/// device reports other sizes (a table larger than the buffer is never
/// read past its end) or the buffer is short.
pub(crate) fn rssh_get_reply(
    buf: &[u8],
    asked: RxfhHeader,
) -> Result<(Vec<u32>, Vec<u8>), LayoutError> {
    let h = rssh_header(buf)?;
    if h.indir_size != asked.indir_size {
        return Err(LayoutError::Sizes {
            what: "indirection table",
            got: h.indir_size.into(),
            asked: asked.indir_size.into(),
        });
    }
    if h.key_size != asked.key_size {
        return Err(LayoutError::Sizes {
            what: "key",
            got: h.key_size.into(),
            asked: asked.key_size.into(),
        });
    }
    let table_end = RXFH_LEN + 4 * h.indir_size as usize;
    let need = table_end + h.key_size as usize;
    if buf.len() < need {
        return Err(LayoutError::Short {
            what: "ethtool_rxfh",
            len: buf.len(),
            need,
        });
    }
    let table = (RXFH_LEN..table_end)
        .step_by(4)
        .map(|at| u32_at(buf, at))
        .collect();
    Ok((table, buf[table_end..need].to_vec()))
}

/// `ETH_RXFH_INDIR_NO_CHANGE` (include/uapi/linux/ethtool.h): an
/// `ETHTOOL_SRSSH` that leaves the table as it is.
const ETH_RXFH_INDIR_NO_CHANGE: u32 = 0xffff_ffff;

/// `ETHTOOL_SRSSH` writing `table` if given (the whole table) and `key` if
/// given, right after the table or, with no table, right after the header:
/// `indir_size` is then `ETH_RXFH_INDIR_NO_CHANGE`, for which every kernel
/// reads the key there (net/ethtool/ioctl.c counts the table's bytes only
/// for a size other than that; the gap kernels before 6.11 left was for
/// size 0 with a key, which this never sends: an empty table, size 0, is
/// the reset to the driver's default, sent alone). The table is left as it is:
/// not rewritten from a read that a bucket move may have made stale, and
/// not marked configured by the user (`IFF_RXFH_CONFIGURED`, which then
/// refuses fewer channels and stops a driver re-spreading for more).
/// `hfunc` 0 (no change) and `input_xfrm` as read, so neither changes.
pub(crate) fn rssh_set_request(
    table: Option<&[u32]>,
    key: Option<&[u8]>,
    input_xfrm: u8,
) -> Vec<u8> {
    let key = key.unwrap_or(&[]);
    let (size, table) = match table {
        Some(t) => (t.len() as u32, t),
        None => (ETH_RXFH_INDIR_NO_CHANGE, &[][..]),
    };
    let mut b = vec![0; RXFH_LEN + 4 * table.len() + key.len()];
    put_u32(&mut b, 0, EthtoolCmd::SetRssh as u32);
    put_u32(&mut b, 8, size);
    put_u32(&mut b, 12, key.len() as u32);
    b[17] = input_xfrm;
    for (i, &q) in table.iter().enumerate() {
        put_u32(&mut b, RXFH_LEN + 4 * i, q);
    }
    b[RXFH_LEN + 4 * table.len()..].copy_from_slice(key);
    b
}

/// `ETHTOOL_GRXFHINDIR` with room for `size` entries (0: the size only).
pub(crate) fn rxfh_indir_get_request(size: u32) -> Vec<u8> {
    let mut b = vec![0; RXFH_INDIR_LEN + 4 * size as usize];
    put_u32(&mut b, 0, EthtoolCmd::GetRxfhIndir as u32);
    put_u32(&mut b, 4, size);
    b
}

/// The table size an `ETHTOOL_GRXFHINDIR` reply declares.
pub(crate) fn rxfh_indir_size(buf: &[u8]) -> Result<u32, LayoutError> {
    check(
        buf,
        "ethtool_rxfh_indir",
        RXFH_INDIR_LEN,
        EthtoolCmd::GetRxfhIndir,
    )?;
    Ok(u32_at(buf, 4))
}

/// The table of an `ETHTOOL_GRXFHINDIR` reply to
/// `rxfh_indir_get_request(asked)`.
pub(crate) fn rxfh_indir_get_reply(buf: &[u8], asked: u32) -> Result<Vec<u32>, LayoutError> {
    let size = rxfh_indir_size(buf)?;
    if size != asked {
        return Err(LayoutError::Sizes {
            what: "indirection table",
            got: size.into(),
            asked: asked.into(),
        });
    }
    let need = RXFH_INDIR_LEN + 4 * size as usize;
    if buf.len() < need {
        return Err(LayoutError::Short {
            what: "ethtool_rxfh_indir",
            len: buf.len(),
            need,
        });
    }
    Ok((RXFH_INDIR_LEN..need)
        .step_by(4)
        .map(|at| u32_at(buf, at))
        .collect())
}

/// `ETHTOOL_SRXFHINDIR` writing `table`.
pub(crate) fn rxfh_indir_set_request(table: &[u32]) -> Vec<u8> {
    let mut b = vec![0; RXFH_INDIR_LEN + 4 * table.len()];
    put_u32(&mut b, 0, EthtoolCmd::SetRxfhIndir as u32);
    put_u32(&mut b, 4, table.len() as u32);
    for (i, &q) in table.iter().enumerate() {
        put_u32(&mut b, RXFH_INDIR_LEN + 4 * i, q);
    }
    b
}

#[cfg(test)]
#[cfg(target_endian = "little")]
mod tests {
    //! The expected bytes are written by hand from
    //! include/uapi/linux/ethtool.h (little-endian, LP64).
    use super::*;

    #[test]
    fn rx_rings_both_ways() {
        let req = rx_rings_request();
        assert_eq!(req.len(), 192);
        assert_eq!(&req[..4], &[0x2d, 0, 0, 0]);
        assert!(req[4..].iter().all(|&b| b == 0));
        let mut reply = req;
        reply[8..16].copy_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(rx_rings_reply(&reply), Ok(4));
        assert!(matches!(
            rx_rings_reply(&reply[..100]),
            Err(LayoutError::Short { need: 192, .. })
        ));
        reply[0] = 0x46;
        assert!(matches!(
            rx_rings_reply(&reply),
            Err(LayoutError::Command {
                got: 0x46,
                want: 0x2d,
                ..
            })
        ));
        reply[0] = 0x2d;
        reply[12] = 1; // 2^32 rings
        assert!(matches!(
            rx_rings_reply(&reply),
            Err(LayoutError::Sizes { .. })
        ));
    }

    #[test]
    fn rssh_sizes_then_table_and_key() {
        assert_eq!(
            rssh_get_request(0, 0),
            [0x46, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        // The kernel's answer to the size query: 4 entries, 4-byte key,
        // hfunc toeplitz (bit 0), input_xfrm 0.
        let sizes: [u8; 24] = [
            0x46, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
        ];
        let h = rssh_header(&sizes).unwrap();
        assert_eq!(
            h,
            RxfhHeader {
                indir_size: 4,
                key_size: 4,
                hfunc: 1,
                input_xfrm: 0
            }
        );
        let req = rssh_get_request(4, 4);
        assert_eq!(req.len(), 24 + 16 + 4);
        assert_eq!(&req[8..16], &[4, 0, 0, 0, 4, 0, 0, 0]);
        let mut reply = sizes.to_vec();
        reply.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        reply.extend_from_slice(&[0x6d, 0x5a, 0x56, 0xda]);
        assert_eq!(
            rssh_get_reply(&reply, h),
            Ok((vec![0, 1, 0, 1], vec![0x6d, 0x5a, 0x56, 0xda]))
        );
        // Truncated, or a device whose table grew since the size query:
        // refused, never read past the buffer.
        assert!(matches!(
            rssh_get_reply(&reply[..30], h),
            Err(LayoutError::Short { need: 44, .. })
        ));
        let mut grown = reply.clone();
        grown[8] = 128;
        assert!(matches!(
            rssh_get_reply(&grown, h),
            Err(LayoutError::Sizes {
                got: 128,
                asked: 4,
                ..
            })
        ));
        let mut lying = reply.clone();
        lying[8] = 128;
        let asked = RxfhHeader {
            indir_size: 128,
            ..h
        };
        assert!(matches!(
            rssh_get_reply(&lying, asked),
            Err(LayoutError::Short { need: 540, .. })
        ));
    }

    #[test]
    fn rssh_set_layout() {
        let req = rssh_set_request(Some(&[3, 2, 1, 0]), Some(&[0xaa, 0xbb]), 0);
        assert_eq!(
            req,
            [
                0x47, 0, 0, 0, // cmd ETHTOOL_SRSSH
                0, 0, 0, 0, // rss_context 0
                4, 0, 0, 0, // indir_size
                2, 0, 0, 0, // key_size
                0, 0, 0, 0, // hfunc (no change), input_xfrm, rsvd8[2]
                0, 0, 0, 0, // rsvd32
                3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, // table
                0xaa, 0xbb, // key
            ]
        );
        let req = rssh_set_request(Some(&[1, 1]), None, 1);
        assert_eq!(
            req,
            [
                0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0,
                0, 1, 0, 0, 0
            ]
        );
        // A key alone: the table unchanged, the key right after the header.
        let req = rssh_set_request(None, Some(&[0xaa, 0xbb, 0xcc]), 0);
        assert_eq!(
            req,
            [
                0x47, 0, 0, 0, // cmd ETHTOOL_SRSSH
                0, 0, 0, 0, // rss_context 0
                0xff, 0xff, 0xff, 0xff, // indir_size ETH_RXFH_INDIR_NO_CHANGE
                3, 0, 0, 0, // key_size
                0, 0, 0, 0, 0, 0, 0, 0, // hfunc, input_xfrm, rsvd
                0xaa, 0xbb, 0xcc, // key
            ]
        );
        // An empty table: size 0, the reset to the driver's default.
        let req = rssh_set_request(Some(&[]), None, 0);
        assert_eq!(req.len(), RXFH_LEN);
        assert_eq!(&req[8..16], [0; 8], "indir_size 0, key_size 0");
    }

    #[test]
    fn rxfh_indir_both_ways() {
        assert_eq!(rxfh_indir_get_request(0), [0x38, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(rxfh_indir_size(&[0x38, 0, 0, 0, 2, 0, 0, 0]), Ok(2));
        let reply = [0x38, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0];
        assert_eq!(rxfh_indir_get_request(2).len(), reply.len());
        assert_eq!(rxfh_indir_get_reply(&reply, 2), Ok(vec![7, 9]));
        assert!(matches!(
            rxfh_indir_get_reply(&reply, 1),
            Err(LayoutError::Sizes {
                got: 2,
                asked: 1,
                ..
            })
        ));
        assert!(matches!(
            rxfh_indir_get_reply(&reply[..12], 2),
            Err(LayoutError::Short { .. })
        ));
        assert!(matches!(
            rxfh_indir_size(&[0x39, 0, 0, 0, 2, 0, 0, 0]),
            Err(LayoutError::Command { .. })
        ));
        assert_eq!(
            rxfh_indir_set_request(&[1, 0]),
            [0x39, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
        );
    }
}
