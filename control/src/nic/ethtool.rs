//! RSS of a real NIC, key and table, through the kernel's ethtool
//! interfaces without the ethtool command: the ethtool netlink family where
//! it has the command (`RSS_GET` 6.2+, `RSS_SET` 6.17+), the ioctls
//! otherwise or when the family does not know a command or attribute
//! (`error::first_choice`, `error::falls_back`). Context 0 only; hash
//! fields and other contexts later.

use std::sync::OnceLock;

use flowlane_numa_sched::nic::{NicRss, RssCaps, RssNic, RssSettings, ServiceTable};

use super::error::{falls_back, first_choice, Cause, Mechanism, NicError, Op};
use super::genl_rss::{RssMessage, FAMILY_NAME, MSG_RSS_GET, MSG_RSS_SET};
use super::ioctl;
use super::netlink::Genl;

/// How a NIC hashes, as its RSS read says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RssHash {
    /// The hash function in force (`ETH_RSS_HASH_*` bits), where the
    /// driver says.
    pub(crate) hfunc: Option<u32>,
    /// The input transformation in force (`RXH_XFRM_*` bits): 0 for none,
    /// and on kernels before 6.8, which have none and say nothing.
    pub(crate) input_xfrm: u32,
}

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
        self.read_with_hash().map(|(s, _, m)| (s, m))
    }

    /// As [`read`](Self::read), with how the NIC hashes: the hash
    /// function and the input transformation in force.
    ///
    /// # Errors
    /// In the user's terms ([`NicError`]).
    pub(crate) fn read_with_hash(&self) -> Result<(RssSettings, RssHash, Mechanism), NicError> {
        let genl = self.genl();
        let mut netlink_said = None;
        if let (Some(g), Mechanism::Netlink) =
            (genl, first_choice(genl.map(Genl::ops), MSG_RSS_GET))
        {
            match g.request(RssMessage::get(&self.ifname), false) {
                Ok(Some(reply)) => {
                    let (s, hash) = self.settings_of_reply(reply)?;
                    return Ok((s, hash, Mechanism::Netlink));
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
        let hash = RssHash {
            hfunc: (h.hfunc != 0).then_some(u32::from(h.hfunc)),
            input_xfrm: u32::from(h.input_xfrm),
        };
        Ok((self.settings(table, key)?, hash, Mechanism::Ioctl))
    }

    /// The settings, hash function and input transformation of an
    /// `RSS_GET_REPLY`.
    fn settings_of_reply(&self, reply: RssMessage) -> Result<(RssSettings, RssHash), NicError> {
        let hash = RssHash {
            hfunc: reply.hfunc(),
            input_xfrm: reply.input_xfrm(),
        };
        let (table, key) = reply
            .into_table_and_key()
            .map_err(|e| self.err(Op::Read, Cause::Malformed(e.to_string())))?;
        Ok((self.settings(table, key)?, hash))
    }

    /// The settings read, or [`NicError::NoTable`] when there is no table:
    /// a driver that answers but whose device has no RSS (`indir_size` 0:
    /// no `ETHTOOL_A_RSS_INDIR` in the reply, an empty table from the
    /// ioctl) has no RSS to read, model or change, whatever else it says.
    fn settings(&self, table: Vec<u32>, key: Vec<u8>) -> Result<RssSettings, NicError> {
        if table.is_empty() {
            return Err(NicError::NoTable {
                iface: self.ifname.clone(),
            });
        }
        Ok(RssSettings { key, table })
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
        self.reset_table_with_key(None)
    }

    /// [`reset_table`](Self::reset_table), with `key` written too
    /// (`ethtool -X IF default hkey K`). Where the family has `RSS_SET`,
    /// one request carries both (an empty `ETHTOOL_A_RSS_INDIR` and
    /// `ETHTOOL_A_RSS_HKEY`), so that they are taken or refused together.
    /// The ioctls get two ([`key_then_reset`]): kernels before 6.11 misread
    /// a key sent with `indir_size` 0 (see `ioctl_layout::rssh_set_request`).
    ///
    /// # Errors
    /// As [`write`](Self::write) and [`reset_table`](Self::reset_table);
    /// on the ioctls, a refused reset after the key was taken says so.
    pub(crate) fn reset_table_with_key(&self, key: Option<&[u8]>) -> anyhow::Result<Mechanism> {
        let current = self.read_for_write()?;
        let Some(key) = key else {
            return self.send(Some(&[]), None);
        };
        self.caps_of(&current)?.validate(Some(key), None)?;
        let genl = self.genl();
        if first_choice(genl.map(Genl::ops), MSG_RSS_SET) == Mechanism::Netlink {
            // Should the family refuse it and `send` fall back, the kernel
            // (6.17+, for RSS_SET) takes both in one `SRSSH` too.
            return self.send(Some(&[]), Some(key));
        }
        key_then_reset(self, key)?;
        Ok(Mechanism::Ioctl)
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
            return Err(NicError::NoTable {
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

/// Writes `key`, then gives `nic`'s table back to the driver: two writes,
/// for a NIC that cannot take both in one. A reset refused after the key
/// was taken does not read as nothing done: the error says the key is in
/// force.
///
/// # Errors
/// The key's write (nothing changed), or the reset's (the key changed).
pub(crate) fn key_then_reset(
    nic: &impl RssNic<Error = anyhow::Error>,
    key: &[u8],
) -> anyhow::Result<()> {
    nic.set_rss(Some(key), None)?;
    nic.reset_table().map_err(|e| {
        e.context(format!(
            "{}: the new RSS key was applied, but the table was not given back to the driver \
             (it is as it was)",
            nic.name()
        ))
    })
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

/// The RSS of `iface`, if it can be read and modelled (for the TCP
/// services: active opens pick ports by the NIC's RSS, and every service
/// keeps its connections per bucket), with how the NIC hashes, which the
/// service checks against its model: `None`, RSS unknown, for a NIC
/// without RSS, without a table ([`NicError::NoTable`]) or without a key
/// (the Toeplitz model needs it), or one that cannot be read.
pub(crate) fn read_rss(iface: &str) -> Option<NicRss> {
    modelled(super::caps::rss(iface).ok().flatten())
}

/// What [`read_rss`] makes of a read.
fn modelled(read: Option<NicRss>) -> Option<NicRss> {
    read.filter(|r| !r.settings.table.is_empty() && !r.settings.key.is_empty())
}

/// `iface`'s table as the writer a TCP service moves buckets through,
/// for the service's model of it (`buckets`, the bucket count of the table
/// the service serves, from the NIC or `--rss-table`): a move's write is
/// refused, nothing written, when the NIC's table is not that size (its
/// channels changed under the service, `ethtool -L`, or the flags named
/// another size; [`ServiceTable`]). Without a model (None) each write
/// reads the NIC again, and says why it cannot.
pub(crate) fn writer(iface: &str, buckets: Option<usize>) -> flowlane_dataplane::NicWriter {
    let nic = EthtoolNic::new(iface);
    match buckets {
        Some(buckets) => {
            flowlane_dataplane::NicWriter(std::sync::Arc::new(ServiceTable::new(nic, buckets)))
        }
        None => flowlane_dataplane::NicWriter(std::sync::Arc::new(nic)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    /// This KVM guest's virtio-net (no `VIRTIO_NET_F_RSS`) answering
    /// `RSS_GET` on Linux 6.18 (`strace -x -s 65535 -e trace=recvfrom
    /// flowlane nic rss --iface eth0`: the generic-netlink payload): the
    /// header, `HFUNC` (Toeplitz), the `FLOW_HASH` nest, and neither
    /// `INDIR` nor `HKEY` (`indir_size` and `key_size` 0).
    fn virtio_rss_reply() -> RssMessage {
        use netlink_packet_core::ParseableParametrized;
        use netlink_packet_generic::GenlHeader;
        let b = crate::nic::recorded_messages(include_str!("testdata/virtio-rss.hex")).remove(0);
        let header = GenlHeader {
            cmd: b[0],
            version: b[1],
        };
        RssMessage::parse_with_param(&b[4..], header).unwrap()
    }

    /// A driver that answers with no table has no RSS: read as such (the
    /// services' "RSS unknown", `nic caps`' none), not as settings with an
    /// empty table, and not blamed on a missing `get_rxfh`.
    #[test]
    fn a_reply_without_a_table_is_no_rss() {
        let nic = EthtoolNic::new("eth0");
        let reply = virtio_rss_reply();
        assert_eq!(
            reply.hfunc(),
            Some(1),
            "the reply names Toeplitz all the same"
        );
        assert_eq!(
            reply.input_xfrm(),
            0,
            "no INPUT_XFRM attribute: no transformation (6.18 leaves 0 out)"
        );
        let e = nic.settings_of_reply(reply).unwrap_err();
        assert_eq!(
            e,
            NicError::NoTable {
                iface: "eth0".into()
            }
        );
        let e = nic
            .caps_of(&RssSettings {
                key: vec![0; 40],
                table: Vec::new(),
            })
            .unwrap_err();
        assert!(matches!(e, NicError::NoTable { .. }), "{e}");
    }

    /// A table without a key (the `GRXFHINDIR` fallback reads none) cannot
    /// be modelled either: the services' Toeplitz needs the key.
    #[test]
    fn the_services_get_settings_only_with_a_table_and_a_key() {
        let s = |key: Vec<u8>| NicRss {
            settings: RssSettings {
                key,
                table: vec![0, 1, 0, 1],
            },
            facts: Default::default(),
        };
        assert_eq!(modelled(Some(s(vec![0x6d; 40]))), Some(s(vec![0x6d; 40])));
        assert_eq!(modelled(Some(s(Vec::new()))), None);
    }

    /// An RSS NIC in memory whose reset the driver refuses.
    struct RefusesReset {
        key: std::cell::RefCell<Vec<u8>>,
        refuse_key: bool,
    }

    impl RssNic for RefusesReset {
        type Error = anyhow::Error;
        fn name(&self) -> &str {
            "mem0"
        }
        fn caps(&self) -> anyhow::Result<RssCaps> {
            Ok(RssCaps {
                queues: 2,
                key_len: 4,
                table_size: 4,
            })
        }
        fn rss(&self) -> anyhow::Result<RssSettings> {
            Ok(RssSettings {
                key: self.key.borrow().clone(),
                table: vec![0; 4],
            })
        }
        fn set_rss(&self, key: Option<&[u8]>, _table: Option<&[u32]>) -> anyhow::Result<()> {
            anyhow::ensure!(
                !self.refuse_key,
                "mem0 refused changing RSS: Invalid argument"
            );
            *self.key.borrow_mut() = key.expect("a key").to_vec();
            Ok(())
        }
        fn reset_table(&self) -> anyhow::Result<()> {
            anyhow::bail!("mem0 refused changing RSS: Device or resource busy")
        }
    }

    /// `nic set-rss --default --key K` on the ioctls: the key went, the
    /// reset did not. Not a failure as if nothing changed: the key is in
    /// force, and the error says so.
    #[test]
    fn a_refused_reset_after_the_key_says_the_key_was_applied() {
        let nic = RefusesReset {
            key: std::cell::RefCell::new(vec![0; 4]),
            refuse_key: false,
        };
        let e = key_then_reset(&nic, &[1, 2, 3, 4]).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "mem0: the new RSS key was applied, but the table was not given back to the driver \
             (it is as it was): mem0 refused changing RSS: Device or resource busy"
        );
        assert_eq!(*nic.key.borrow(), [1, 2, 3, 4]);
        let nic = RefusesReset {
            key: std::cell::RefCell::new(vec![0; 4]),
            refuse_key: true,
        };
        let e = key_then_reset(&nic, &[1, 2, 3, 4]).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "mem0 refused changing RSS: Invalid argument",
            "the key refused: nothing changed, nothing to say of it"
        );
    }

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
