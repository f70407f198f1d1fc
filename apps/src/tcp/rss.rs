//! The NIC's RSS as the TCP services model it: active opens pick their
//! ports by it, every service keeps its connections per RSS bucket with
//! it, and buckets move through its writer. It comes from
//! `--rss-key/--rss-table` (or `--bed`), else from the NIC; a table the
//! model cannot take, or a NIC that does not hash TCP as the model does
//! (Toeplitz over addresses and ports, no input transformation), is told
//! in one line that names the interface and what to do, and the writer
//! checks the NIC's table against the service's own bucket count before
//! each move.

use anyhow::{anyhow, Result};
use flowlane_dataplane::tcp_service::rss_state;
use flowlane_dataplane::NicWriter;
use flowlane_numa_sched::nic::NicRss;
use flowlane_numa_sched::nic_caps::{hash_fixes, HashMismatch};
use flowlane_numa_sched::toeplitz::Protocol;
use flowlane_numa_sched::RssState;

use super::Common;

/// How the TCP examples reach a real NIC's RSS (`flowlane-control`'s
/// ethtool module): reading it when no flags give it, and the writer
/// `--rebalance` moves buckets through.
#[derive(Debug, Clone, Copy)]
pub struct NicAccess {
    /// The NIC's key and table, with how it hashes, if they can be read.
    pub read: fn(&str) -> Option<NicRss>,
    /// The writer of the named NIC's table, for a service whose RSS model
    /// has this many buckets (None: the service has no model of it): a
    /// move's write is refused, nothing written, when the NIC's table is
    /// not that size (its channels changed under the service, or
    /// `--rss-table` named another size).
    pub writer: fn(&str, Option<usize>) -> NicWriter,
}

/// The RSS of `c.iface` as an `RssState` for `queues` queues: as the
/// flags give it, else as read from the NIC; None when neither says.
///
/// A NIC whose TCP hash is not the one the model computes (another
/// function than Toeplitz, an input transformation such as
/// `symmetric-xor`, TCP/IPv4 or TCP/IPv6 hashed on other fields than
/// addresses and ports) is not modelled: every bucket, hint and source
/// port would be wrong without a word. The caller decides what a service
/// does then (a passive one serves without buckets and moves, an active
/// one, whose replies would reach other cores, does not start).
///
/// # Errors
/// `--rss-key` without `--rss-table` (or the other way round), a NIC that
/// does not hash TCP as the model does ([`unpredictable`]), or an RSS the
/// model cannot take ([`unmodelled`]), in one line.
pub(super) fn rss(c: &Common, queues: u32, nic: NicAccess) -> Result<Option<RssState>> {
    let given = c.data_path.rss_settings()?;
    let from_flags = given.is_some();
    let s = match given {
        Some(s) => s,
        None => {
            let Some(read) = (nic.read)(&c.iface) else {
                return Ok(None);
            };
            let mismatches = read.facts.mismatches(Protocol::Tcp);
            if !mismatches.is_empty() {
                return Err(anyhow!(unpredictable(&c.iface, &mismatches)));
            }
            read.settings
        }
    };
    rss_state(&s.key, &s.table, queues)
        .map(Some)
        .map_err(|e| anyhow!(unmodelled(&c.iface, from_flags, &e)))
}

/// How the TCP hash of `iface` differs from the model's (`mismatches`, not
/// empty), and the commands that make it the same, in one line.
fn unpredictable(iface: &str, mismatches: &[HashMismatch]) -> String {
    let said: Vec<String> = mismatches.iter().map(ToString::to_string).collect();
    format!(
        "{iface}'s RSS does not hash TCP as flowlane's model of it does (Toeplitz over addresses \
         and ports as they are): {}; flowlane cannot predict which queue a flow reaches{}",
        said.join("; "),
        hash_fixes(iface, mismatches)
            .map(|fix| format!(": run `{fix}`"))
            .unwrap_or_default()
    )
}

/// What is wrong with the RSS of `iface` that the model refused (`e`),
/// given by the flags or read from the NIC, and what to do, in one line.
fn unmodelled(iface: &str, from_flags: bool, e: &flowlane_dataplane::Error) -> String {
    use flowlane_numa_sched::Error as Model;
    let inner = match e {
        flowlane_dataplane::Error::Rss(m) => Some(m),
        _ => None,
    };
    match (inner, from_flags) {
        (Some(Model::TableSize { size }), false) => format!(
            "{iface}'s RSS indirection table has {size} entries, not a power of two, which \
             flowlane's model of its RSS needs: set a channel count whose table is one \
             (`ethtool -L {iface} combined N`; `ethtool -x {iface}` shows the table's size)"
        ),
        (Some(Model::TableSize { size }), true) => format!(
            "--rss-table has {size} entries, not a power of two, which flowlane's model of RSS \
             needs: give {iface}'s whole table as `ethtool -x {iface}` shows it"
        ),
        (Some(m), false) => format!("the RSS {iface} reports cannot be modelled: {m}"),
        (Some(m), true) => format!("--rss-key/--rss-table cannot be modelled for {iface}: {m}"),
        (None, _) => format!("the RSS of {iface} cannot be modelled: {e}"),
    }
}

/// The writer a service moves buckets through: the test bed's table map
/// (`--rss-table-map`, which `--bed` sets), else the NIC's, for the
/// service's bucket count (`rss`, its model of the NIC's RSS). None where
/// the NIC reports no RSS table (a driver without RSS, or one that answers
/// with no table: a veth, whose bed keeps its table in a BPF map that only
/// `--bed` hands over), or none that can be read: every move's write would
/// fail there, so the service has no NIC to write and its buckets do not
/// move (`--rebalance auto` refused, the default off, saying why).
///
/// # Errors
/// The bed's table map cannot be opened.
pub(super) fn writer(
    c: &Common,
    rss: Option<&RssState>,
    nic: NicAccess,
) -> Result<Option<NicWriter>> {
    match c.data_path.rss_table_map {
        Some(id) => flowlane_testbed::table_writer::table_writer(id).map(Some),
        None => {
            let buckets = rss.map(|r| r.table().size());
            Ok((nic.read)(&c.iface).map(|_| (nic.writer)(&c.iface, buckets)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use flowlane_numa_sched::nic::RssSettings;
    use flowlane_numa_sched::nic_caps::{FlowHash, RssFacts};
    use std::sync::Mutex;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        common: Common,
    }

    fn common(args: &[&str]) -> Common {
        let mut all = vec!["service"];
        all.extend_from_slice(args);
        Flags::parse_from(all).common
    }

    /// A 192-entry table read from the NIC (several drivers size theirs
    /// by the channels) is refused naming the interface and the fix;
    /// given by the flags, naming the flag.
    #[test]
    fn a_table_the_model_cannot_take_is_refused_in_one_line_that_says_what_to_do() {
        fn read_192(_: &str) -> Option<NicRss> {
            Some(NicRss {
                settings: RssSettings {
                    key: vec![0x6d; 40],
                    table: (0..192).map(|i| i % 4).collect(),
                },
                facts: RssFacts {
                    key_len: 40,
                    table_size: 192,
                    ..RssFacts::default()
                },
            })
        }
        let nic = NicAccess {
            read: read_192,
            writer: |_, _| unreachable!("no writer here"),
        };
        let e = rss(&common(&["--iface", "eth3"]), 4, nic).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "eth3's RSS indirection table has 192 entries, not a power of two, which flowlane's \
             model of its RSS needs: set a channel count whose table is one (`ethtool -L eth3 \
             combined N`; `ethtool -x eth3` shows the table's size)"
        );
        let table = vec!["0"; 192].join(",");
        let key = vec!["6d"; 40].join(":");
        let args = ["--iface", "eth3", "--rss-key", &key, "--rss-table", &table];
        let e = rss(&common(&args), 4, nic).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "--rss-table has 192 entries, not a power of two, which flowlane's model of RSS \
             needs: give eth3's whole table as `ethtool -x eth3` shows it"
        );
        assert!(!format!("{e:#}").contains('\n'));
    }

    /// The bucket counts the writer was made for.
    static MADE_FOR: Mutex<Vec<Option<usize>>> = Mutex::new(Vec::new());

    /// The writer compares the NIC's table with the service's model: the
    /// bucket count of the table the service serves (here `--rss-table`'s
    /// 8), not what the NIC's table holds when the writer is made.
    #[test]
    fn the_writer_checks_the_nic_against_the_service_s_bucket_count() {
        struct Nowhere;
        impl flowlane_dataplane::RssTableWriter for Nowhere {
            fn set_entry(&self, _: u16, _: u32) -> Result<(), String> {
                Err("no NIC".into())
            }
        }
        let nic = NicAccess {
            // The NIC reports its table (read for the writer only: the
            // flags give the RSS).
            read: |_| Some(nic_hashing("sdfn", "none")),
            writer: |_, buckets| {
                MADE_FOR.lock().unwrap().push(buckets);
                NicWriter(std::sync::Arc::new(Nowhere))
            },
        };
        let key = vec!["6d"; 40].join(":");
        let args = [
            "--iface",
            "eth3",
            "--rss-key",
            &key,
            "--rss-table",
            "0,1,0,1,0,1,0,1",
        ];
        let c = common(&args);
        let model = rss(&c, 2, nic).unwrap();
        assert!(writer(&c, model.as_ref(), nic).unwrap().is_some());
        assert!(writer(&c, None, nic).unwrap().is_some());
        assert_eq!(*MADE_FOR.lock().unwrap(), [Some(8), None]);
    }

    /// A NIC that reports no RSS table (a veth: no `get_rxfh`; a driver
    /// that answers without one), or none that can be read, gets no
    /// writer, though the flags give the RSS: the service then has no NIC
    /// to write, and its buckets do not move (`--rebalance auto` refused
    /// in one line, the default off saying why) instead of every move
    /// failing on its write.
    #[test]
    fn a_nic_that_reports_no_rss_table_gets_no_writer() {
        let nic = NicAccess {
            read: |_| None,
            writer: |_, _| unreachable!("no writer for a NIC without a table"),
        };
        let key = vec!["6d"; 40].join(":");
        let args = ["--iface", "xsk0", "--rss-key", &key, "--rss-table", "0,1"];
        let c = common(&args);
        let model = rss(&c, 2, nic).unwrap();
        assert!(model.is_some(), "the flags give the RSS");
        assert!(writer(&c, model.as_ref(), nic).unwrap().is_none());
    }

    /// A NIC read with `hashing` for its TCP flows: Toeplitz, a 40-byte
    /// key, an 8-entry table over two queues.
    fn nic_hashing(tcp6: &'static str, xfrm: &'static str) -> NicRss {
        NicRss {
            settings: RssSettings {
                key: vec![0x6d; 40],
                table: vec![0, 1, 0, 1, 0, 1, 0, 1],
            },
            facts: RssFacts {
                key_len: 40,
                table_size: 8,
                hash_function: Some("toeplitz".into()),
                flow_hash: FlowHash {
                    input_xfrm: Some(xfrm.into()),
                    tcp4: Some("sdfn".into()),
                    tcp6: Some(tcp6.into()),
                    // UDP is not the TCP services' concern.
                    udp4: Some("sd".into()),
                    udp6: Some("sd".into()),
                },
            },
        }
    }

    /// A NIC that does not hash TCP as the model does (here with
    /// `symmetric-xor`, or TCP/IPv6 on addresses only) is not modelled,
    /// in one line that names the interface, what differs and the
    /// commands that make it the same; one that does is.
    #[test]
    fn a_nic_that_hashes_tcp_otherwise_than_the_model_is_not_modelled() {
        let symmetric = NicAccess {
            read: |_| Some(nic_hashing("sdfn", "symmetric-xor")),
            writer: |_, _| unreachable!("no writer here"),
        };
        let c = common(&["--iface", "eth3"]);
        let e = format!("{:#}", rss(&c, 2, symmetric).unwrap_err());
        assert_eq!(
            e,
            "eth3's RSS does not hash TCP as flowlane's model of it does (Toeplitz over \
             addresses and ports as they are): the NIC transforms the fields before hashing them \
             (symmetric-xor: the source and destination are combined, so that both directions \
             of a flow hash alike); flowlane cannot predict which queue a flow reaches: run \
             `ethtool -X eth3 xfrm none`"
        );
        assert!(!e.contains('\n'));
        let tcp6_sd = NicAccess {
            read: |_| Some(nic_hashing("sd", "none")),
            ..symmetric
        };
        let e = format!("{:#}", rss(&c, 2, tcp6_sd).unwrap_err());
        assert!(
            e.ends_with("run `ethtool -N eth3 rx-flow-hash tcp6 sdfn`"),
            "{e}"
        );
        let modelled = NicAccess {
            read: |_| Some(nic_hashing("sdfn", "none")),
            ..symmetric
        };
        let r = rss(&c, 2, modelled).unwrap().expect("modelled");
        assert_eq!(r.table().size(), 8);
        // The flags say the RSS: the NIC is not read (the test bed's
        // emulated NIC hashes as the model does).
        let key = vec!["6d"; 40].join(":");
        let args = ["--iface", "eth3", "--rss-key", &key, "--rss-table", "0,1"];
        let flags = NicAccess {
            read: |_| unreachable!("the flags give the RSS"),
            ..symmetric
        };
        assert!(rss(&common(&args), 2, flags).unwrap().is_some());
    }
}
