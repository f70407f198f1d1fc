//! Which mechanism to ask (ethtool netlink or the ioctls), when to fall
//! back from one to the other, and the errors of both in the user's terms.
//! Pure.

use nix::errno::Errno;
use serde::Serialize;
use thiserror::Error;

/// What answered a read or took a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mechanism {
    /// The ethtool generic-netlink family (`RSS_GET`, Linux 6.2+;
    /// `RSS_SET`, 6.17+).
    Netlink,
    /// `SIOCETHTOOL` (`ETHTOOL_GRSSH`/`SRSSH`, `GRXFHINDIR`/`SRXFHINDIR`).
    Ioctl,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::Netlink => "ethtool netlink",
            Mechanism::Ioctl => "ethtool ioctl",
        })
    }
}

/// Reading or writing RSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Reading the key and table (or the ring count).
    Read,
    /// Writing the key and/or table.
    Write,
}

/// The mechanism to try first for `cmd`, given the commands the kernel's
/// ethtool family lists (`None`: no ethtool family, or no netlink).
pub(crate) fn first_choice(family_ops: Option<&[u32]>, cmd: u8) -> Mechanism {
    match family_ops {
        Some(ops) if ops.contains(&u32::from(cmd)) => Mechanism::Netlink,
        _ => Mechanism::Ioctl,
    }
}

/// Whether a netlink failure sends the request to the ioctls: the family
/// answers an unknown command with `EOPNOTSUPP` and an unknown attribute
/// with `EINVAL` (a driver without the operation answers `EOPNOTSUPP` too;
/// the ioctl then says the same). Permission and missing devices are final.
pub(crate) fn falls_back(errno: Errno) -> bool {
    matches!(errno, Errno::EOPNOTSUPP | Errno::EINVAL)
}

/// Why a request failed, before it is put in the user's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The kernel refused it: the error number and, from netlink, the
    /// extended-ack message.
    Os {
        /// The error.
        errno: Errno,
        /// The kernel's own words, if it gave any.
        detail: Option<String>,
    },
    /// A reply that does not decode.
    Malformed(String),
    /// The request was not made: the system-call wrapper refused its
    /// arguments before the kernel saw it (an `io::Error` without an error
    /// number: `ethtool_ioctl`'s `InvalidInput` for an interface name that
    /// does not fit `IFNAMSIZ`).
    NotMade(String),
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Os {
                errno,
                detail: Some(d),
            } => write!(f, "{} ({d})", errno.desc()),
            Cause::Os {
                errno,
                detail: None,
            } => f.write_str(errno.desc()),
            Cause::Malformed(d) => write!(f, "malformed reply from the kernel ({d})"),
            Cause::NotMade(d) => write!(f, "request not made ({d})"),
        }
    }
}

impl From<std::io::Error> for Cause {
    fn from(e: std::io::Error) -> Cause {
        match e.raw_os_error() {
            Some(n) => Cause::Os {
                errno: Errno::from_raw(n),
                detail: None,
            },
            None => Cause::NotMade(e.to_string()),
        }
    }
}

/// A NIC's RSS could not be read or written; each message is one line
/// that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum NicError {
    /// `ENODEV`.
    #[error("there is no interface {iface} in this network namespace (see `ip link`)")]
    NoInterface {
        /// The interface.
        iface: String,
    },
    /// `EPERM`/`EACCES`.
    #[error("{what} of {iface} needs CAP_NET_ADMIN: run as root")]
    NotPermitted {
        /// The interface.
        iface: String,
        /// "reading RSS" or "changing RSS".
        what: &'static str,
    },
    /// A read answered `EOPNOTSUPP`.
    #[error("{iface} does not support RSS (driver has no get_rxfh); nothing to read or change")]
    NoRss {
        /// The interface.
        iface: String,
    },
    /// The read answered, with no indirection table: the driver has the
    /// operation but the device offers no RSS (the kernel leaves
    /// `ETHTOOL_A_RSS_INDIR` out of `RSS_GET_REPLY` when `indir_size` is 0,
    /// Documentation/networking/ethtool-netlink.rst, "RSS_GET"; the ioctl
    /// says size 0). A virtio-net device without `VIRTIO_NET_F_RSS` is one.
    #[error(
        "{iface} reports no RSS indirection table (its driver can be asked, but the device \
         offers no RSS: a virtio-net device without the RSS feature, for one); nothing to read \
         or change"
    )]
    NoTable {
        /// The interface.
        iface: String,
    },
    /// A write answered `EOPNOTSUPP`.
    #[error("{iface} does not support changing RSS (driver has no set_rxfh)")]
    CannotSet {
        /// The interface.
        iface: String,
    },
    /// Any other refusal.
    #[error("{iface} refused {what}: {detail}")]
    Refused {
        /// The interface.
        iface: String,
        /// "reading RSS" or "changing RSS".
        what: &'static str,
        /// The kernel's words, or the error's.
        detail: String,
    },
    /// A request the kernel never saw (`Cause::NotMade`), its words and
    /// what to do.
    #[error("{what} of {iface}: request not made ({detail}){hint}")]
    NotMade {
        /// The interface.
        iface: String,
        /// "reading RSS" or "changing RSS".
        what: &'static str,
        /// Why not.
        detail: String,
        /// What to do, where known (empty otherwise).
        hint: String,
    },
    /// A reply that does not decode.
    #[error("{what} of {iface}: malformed reply from the kernel ({detail})")]
    Malformed {
        /// The interface.
        iface: String,
        /// "reading RSS" or "changing RSS".
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl NicError {
    /// Puts `cause` of `op` on `iface` in the user's terms.
    pub(crate) fn new(op: Op, iface: &str, cause: Cause) -> NicError {
        let iface = iface.to_string();
        let what = match op {
            Op::Read => "reading RSS",
            Op::Write => "changing RSS",
        };
        match cause {
            Cause::Malformed(detail) => NicError::Malformed {
                iface,
                what,
                detail,
            },
            Cause::NotMade(detail) => NicError::NotMade {
                hint: not_made_hint(&iface),
                iface,
                what,
                detail,
            },
            Cause::Os { errno, detail } => match errno {
                Errno::ENODEV => NicError::NoInterface { iface },
                Errno::EPERM | Errno::EACCES => NicError::NotPermitted { iface, what },
                Errno::EOPNOTSUPP if op == Op::Read => NicError::NoRss { iface },
                Errno::EOPNOTSUPP => NicError::CannotSet { iface },
                e => NicError::Refused {
                    iface,
                    what,
                    detail: detail.unwrap_or_else(|| e.desc().to_string()),
                },
            },
        }
    }
}

/// The longest interface name the ioctls take: `IFNAMSIZ` (16,
/// include/uapi/linux/if.h) with its NUL. Netlink takes longer ones (an
/// altname: `ETHTOOL_A_HEADER_DEV_NAME` resolves them too).
const IFNAME_MAX: usize = 15;

/// What to do about a request not made for `iface`: a name too long for
/// the ioctls is given as the kernel name.
fn not_made_hint(iface: &str) -> String {
    if iface.len() <= IFNAME_MAX {
        return String::new();
    }
    format!(
        ": the ethtool ioctls take interface names of at most {IFNAME_MAX} characters, and \
         {iface} has {}; give the interface's kernel name instead (`ip -br link show {iface}` \
         prints it first)",
        iface.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netlink_first_only_where_the_family_has_the_command() {
        assert_eq!(first_choice(Some(&[1, 38, 48]), 48), Mechanism::Netlink);
        assert_eq!(
            first_choice(Some(&[1, 38]), 48),
            Mechanism::Ioctl,
            "before 6.17"
        );
        assert_eq!(first_choice(Some(&[1, 38]), 38), Mechanism::Netlink);
        assert_eq!(
            first_choice(Some(&[1, 2]), 38),
            Mechanism::Ioctl,
            "before 6.2"
        );
        assert_eq!(first_choice(None, 38), Mechanism::Ioctl, "no family");
    }

    #[test]
    fn unknown_command_or_attribute_falls_back_the_rest_is_final() {
        assert!(falls_back(Errno::EOPNOTSUPP));
        assert!(falls_back(Errno::EINVAL));
        for e in [Errno::EPERM, Errno::ENODEV, Errno::EBUSY, Errno::ENOMEM] {
            assert!(!falls_back(e), "{e}");
        }
    }

    fn os(errno: Errno) -> Cause {
        Cause::Os {
            errno,
            detail: None,
        }
    }

    #[test]
    fn errors_in_the_users_terms() {
        let e = |op, c| NicError::new(op, "eth1", c).to_string();
        assert_eq!(
            e(Op::Write, os(Errno::EOPNOTSUPP)),
            "eth1 does not support changing RSS (driver has no set_rxfh)"
        );
        assert!(e(Op::Read, os(Errno::EOPNOTSUPP)).contains("driver has no get_rxfh"));
        assert_eq!(
            e(Op::Write, os(Errno::EPERM)),
            "changing RSS of eth1 needs CAP_NET_ADMIN: run as root"
        );
        assert!(e(Op::Read, os(Errno::ENODEV)).contains("no interface eth1"));
        assert_eq!(
            e(
                Op::Write,
                Cause::Os {
                    errno: Errno::EINVAL,
                    detail: Some("indir table entry out of range".into())
                }
            ),
            "eth1 refused changing RSS: indir table entry out of range"
        );
        assert_eq!(
            e(Op::Write, os(Errno::EBUSY)),
            "eth1 refused changing RSS: Device or resource busy"
        );
        for s in [
            e(Op::Read, Cause::Malformed("x".into())),
            e(Op::Write, os(Errno::EINVAL)),
        ] {
            assert_eq!(s.lines().count(), 1);
            assert!(!s.contains("os error"), "{s}");
        }
    }

    #[test]
    fn io_errors_keep_their_number() {
        let c = Cause::from(std::io::Error::from_raw_os_error(Errno::EOPNOTSUPP as i32));
        assert_eq!(c, os(Errno::EOPNOTSUPP));
        let c = Cause::from(std::io::Error::other("guard"));
        assert_eq!(c, Cause::NotMade("guard".into()));
    }

    /// An altname longer than `IFNAMSIZ` allows: netlink resolves it, the
    /// ioctls (the ring count, the fallback) are refused before the kernel
    /// sees them. Not a malformed reply: a request not made, and the
    /// kernel name to give instead.
    #[test]
    fn a_name_too_long_for_the_ioctls_says_to_give_the_kernel_name() {
        let alt = "enp59s0f0np0-uplink1"; // 20 characters
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "interface name does not fit IFNAMSIZ",
        );
        let e = NicError::new(Op::Read, alt, Cause::from(io)).to_string();
        assert_eq!(
            e,
            "reading RSS of enp59s0f0np0-uplink1: request not made (interface name does not fit \
             IFNAMSIZ): the ethtool ioctls take interface names of at most 15 characters, and \
             enp59s0f0np0-uplink1 has 20; give the interface's kernel name instead \
             (`ip -br link show enp59s0f0np0-uplink1` prints it first)"
        );
        assert!(!e.contains("malformed"), "{e}");
        let short = NicError::new(Op::Write, "eth0", Cause::NotMade("x".into())).to_string();
        assert_eq!(short, "changing RSS of eth0: request not made (x)");
    }

    #[test]
    fn no_table_is_not_blamed_on_a_missing_get_rxfh() {
        let e = NicError::NoTable {
            iface: "eth0".into(),
        }
        .to_string();
        assert!(
            e.starts_with("eth0 reports no RSS indirection table"),
            "{e}"
        );
        assert!(!e.contains("get_rxfh"), "{e}");
    }
}
