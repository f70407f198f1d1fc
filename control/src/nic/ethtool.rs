//! RSS of a real NIC, key and table, through the kernel's ethtool
//! interfaces without the ethtool command: the ethtool netlink family where
//! it has the command (`RSS_GET` 6.2+, `RSS_SET` 6.17+), the ioctls
//! otherwise or when the family does not know a command or attribute
//! (`error::first_choice`, `error::falls_back`). Context 0 only; hash
//! fields and other contexts later.

use std::sync::OnceLock;

use flowlane_numa_sched::nic::{RssCaps, RssNic, RssSettings};

use super::error::{falls_back, first_choice, Cause, Mechanism, NicError, Op};
use super::genl_rss::{RssMessage, FAMILY_NAME, MSG_RSS_GET, MSG_RSS_SET};
use super::ioctl;
use super::netlink::Genl;

/// A NIC driven through the kernel's ethtool interfaces.
#[derive(Debug)]
pub(crate) struct EthtoolNic {
    ifname: String,
    /// The ethtool family, resolved on first use; `None`: no netlink.
    genl: OnceLock<Option<Genl>>,
}

impl EthtoolNic {
    /// The NIC named `ifname` in the current network namespace.
    pub(crate) fn new(ifname: &str) -> EthtoolNic {
        EthtoolNic {
            ifname: ifname.to_string(),
            genl: OnceLock::new(),
        }
    }

    fn genl(&self) -> Option<&Genl> {
        self.genl
            .get_or_init(|| match Genl::open(FAMILY_NAME) {
                Ok(g) => g,
                Err(e) => {
                    tracing::debug!("no ethtool netlink ({e:?}); using the ioctls");
                    None
                }
            })
            .as_ref()
    }

    fn err(&self, op: Op, cause: Cause) -> NicError {
        NicError::new(op, &self.ifname, cause)
    }

    /// The key and table in force, and which mechanism answered.
    ///
    /// # Errors
    /// In the user's terms ([`NicError`]).
    pub(crate) fn read(&self) -> Result<(RssSettings, Mechanism), NicError> {
        self.read_with_hfunc().map(|(s, _, m)| (s, m))
    }

    /// As [`read`](Self::read), with the hash function in force
    /// (`ETH_RSS_HASH_*` bits) where the driver says.
    ///
    /// # Errors
    /// In the user's terms ([`NicError`]).
    pub(crate) fn read_with_hfunc(
        &self,
    ) -> Result<(RssSettings, Option<u32>, Mechanism), NicError> {
        let genl = self.genl();
        let mut netlink_said = None;
        if let (Some(g), Mechanism::Netlink) =
            (genl, first_choice(genl.map(Genl::ops), MSG_RSS_GET))
        {
            match g.request(RssMessage::get(&self.ifname), false) {
                Ok(Some(reply)) => {
                    let hfunc = reply.hfunc();
                    let (table, key) = reply
                        .into_table_and_key()
                        .map_err(|e| self.err(Op::Read, Cause::Malformed(e.to_string())))?;
                    return Ok((RssSettings { key, table }, hfunc, Mechanism::Netlink));
                }
                Ok(None) => {
                    return Err(self.err(Op::Read, Cause::Malformed("no RSS_GET reply".into())))
                }
                Err(Cause::Os { errno, detail }) if falls_back(errno) => netlink_said = detail,
                Err(e) => return Err(self.err(Op::Read, e)),
            }
        }
        let (table, key, h) = ioctl::get_rss(&self.ifname)
            .map_err(|e| self.err(Op::Read, with_detail(e, netlink_said)))?;
        let hfunc = (h.hfunc != 0).then_some(u32::from(h.hfunc));
        Ok((RssSettings { key, table }, hfunc, Mechanism::Ioctl))
    }

    /// The key and table in force, read before a write: a NIC whose RSS
    /// cannot be read cannot be changed either, and is named so.
    ///
    /// # Errors
    /// As [`read`](Self::read), `NoRss` said as `CannotSet`.
    pub(crate) fn read_for_write(&self) -> Result<RssSettings, NicError> {
        match self.read() {
            Ok((s, _)) => Ok(s),
            Err(NicError::NoRss { iface }) => Err(NicError::CannotSet { iface }),
            Err(e) => Err(e),
        }
    }

    /// Writes `key` and/or `table` (validated against [`RssNic::caps`]
    /// first) and says which mechanism took them.
    ///
    /// # Errors
    /// A setting that does not fit, or the kernel's refusal, in the user's
    /// terms.
    pub(crate) fn write(
        &self,
        key: Option<&[u8]>,
        table: Option<&[u32]>,
    ) -> anyhow::Result<Mechanism> {
        let current = self.read_for_write()?;
        self.caps_of(&current)?.validate(key, table)?;
        if key.is_none() && table.is_none() {
            anyhow::bail!(
                "nothing to write to {}: give a key and/or a table",
                self.ifname
            );
        }
        self.send(table, key)
    }

    /// Gives the table back to the driver (`ethtool -X IF default`): the
    /// default spread over the NIC's rings, no longer marked set by the
    /// user (`IFF_RXFH_CONFIGURED`, which refuses fewer channels than the
    /// table uses and stops a driver re-spreading it for more). An empty
    /// `ETHTOOL_A_RSS_INDIR` on netlink (net/ethtool/rss.c,
    /// `rss_set_prep_indir`), `indir_size` 0 on the ioctls.
    ///
    /// # Errors
    /// The NIC has no RSS table, or the kernel refused.
    pub(crate) fn reset_table(&self) -> anyhow::Result<Mechanism> {
        self.read_for_write()?;
        self.send(Some(&[]), None)
    }

    /// Sends `table` and/or `key` as they are: `RSS_SET` where the family
    /// has it, the ioctls where it does not or refuses in a way they may not.
    fn send(&self, table: Option<&[u32]>, key: Option<&[u8]>) -> anyhow::Result<Mechanism> {
        let genl = self.genl();
        let mut netlink_said = None;
        if let (Some(g), Mechanism::Netlink) =
            (genl, first_choice(genl.map(Genl::ops), MSG_RSS_SET))
        {
            match g.request(RssMessage::set(&self.ifname, table, key), true) {
                Ok(_) => return Ok(Mechanism::Netlink),
                Err(Cause::Os { errno, detail }) if falls_back(errno) => netlink_said = detail,
                Err(e) => return Err(self.err(Op::Write, e).into()),
            }
        }
        // The header read for its `input_xfrm`, written back unchanged.
        let (_, _, header) = ioctl::get_rss(&self.ifname).map_err(|e| self.err(Op::Read, e))?;
        ioctl::set_rss(&self.ifname, table, key, header.input_xfrm)
            .map_err(|e| self.err(Op::Write, with_detail(e, netlink_said)))?;
        Ok(Mechanism::Ioctl)
    }

    /// The capabilities of this NIC with `s` in force: its ring count
    /// (`ETHTOOL_GRXRINGS`), key and table sizes.
    pub(crate) fn caps_of(&self, s: &RssSettings) -> Result<RssCaps, NicError> {
        if s.table.is_empty() {
            return Err(NicError::NoRss {
                iface: self.ifname.clone(),
            });
        }
        let queues = ioctl::ring_count(&self.ifname).map_err(|e| self.err(Op::Read, e))?;
        Ok(RssCaps {
            queues: queues.max(1),
            key_len: s.key.len(),
            table_size: s.table.len(),
        })
    }
}

/// The ioctl's failure, with netlink's words where the ioctl has none.
fn with_detail(cause: Cause, netlink_said: Option<String>) -> Cause {
    match cause {
        Cause::Os { errno, detail } => Cause::Os {
            errno,
            detail: detail.or(netlink_said),
        },
        c => c,
    }
}

impl RssNic for EthtoolNic {
    type Error = anyhow::Error;

    fn name(&self) -> &str {
        &self.ifname
    }

    fn caps(&self) -> anyhow::Result<RssCaps> {
        let (s, _) = self.read()?;
        Ok(self.caps_of(&s)?)
    }

    fn rss(&self) -> anyhow::Result<RssSettings> {
        Ok(self.read()?.0)
    }

    fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> anyhow::Result<()> {
        self.write(key, table).map(|_| ())
    }

    fn reset_table(&self) -> anyhow::Result<()> {
        EthtoolNic::reset_table(self).map(|_| ())
    }
}

/// The RSS settings of `iface`, if they can be read (for the TCP services'
/// active opens, which pick ports by the NIC's RSS).
pub(crate) fn read_rss(iface: &str) -> Option<RssSettings> {
    EthtoolNic::new(iface).read().ok().map(|(s, _)| s)
}

/// `iface`'s table as the writer a TCP service moves buckets through.
pub(crate) fn writer(iface: &str) -> flowlane_dataplane::NicWriter {
    flowlane_dataplane::NicWriter(std::sync::Arc::new(EthtoolNic::new(iface)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    #[test]
    fn the_ioctls_words_first_then_netlinks() {
        let os = |detail: Option<&str>| Cause::Os {
            errno: Errno::EINVAL,
            detail: detail.map(str::to_string),
        };
        assert_eq!(
            with_detail(os(None), Some("entry out of range".into())),
            os(Some("entry out of range"))
        );
        assert_eq!(with_detail(os(Some("a")), Some("b".into())), os(Some("a")));
        let m = Cause::Malformed("x".into());
        assert_eq!(with_detail(m.clone(), Some("b".into())), m);
    }
}
