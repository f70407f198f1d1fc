//! The NIC's RSS as the TCP services model it: active opens pick their
//! ports by it, every service keeps its connections per RSS bucket with
//! it, and buckets move through its writer. It comes from
//! `--rss-key/--rss-table` (or `--bed`), else from the NIC; a table the
//! model cannot take is told in one line that names the interface and
//! what to do, and the writer checks the NIC's table against the
//! service's own bucket count before each move.

use anyhow::{anyhow, Result};
use flowlane_dataplane::tcp_service::rss_state;
use flowlane_dataplane::NicWriter;
use flowlane_numa_sched::nic::RssSettings;
use flowlane_numa_sched::RssState;

use super::Common;

/// How the TCP examples reach a real NIC's RSS (`flowlane-control`'s
/// ethtool module): reading it when no flags give it, and the writer
/// `--rebalance` moves buckets through.
#[derive(Debug, Clone, Copy)]
pub struct NicAccess {
    /// The NIC's key and table, if it can be read.
    pub read: fn(&str) -> Option<RssSettings>,
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
/// # Errors
/// `--rss-key` without `--rss-table` (or the other way round), or an RSS
/// the model cannot take, in one line ([`unmodelled`]).
pub(super) fn rss(c: &Common, queues: u32, nic: NicAccess) -> Result<Option<RssState>> {
    let given = c.data_path.rss_settings()?;
    let from_flags = given.is_some();
    let Some(s) = given.or_else(|| (nic.read)(&c.iface)) else {
        return Ok(None);
    };
    rss_state(&s.key, &s.table, queues)
        .map(Some)
        .map_err(|e| anyhow!(unmodelled(&c.iface, from_flags, &e)))
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
/// service's bucket count (`rss`, its model of the NIC's RSS).
///
/// # Errors
/// The bed's table map cannot be opened.
pub(super) fn writer(c: &Common, rss: Option<&RssState>, nic: NicAccess) -> Result<NicWriter> {
    match c.data_path.rss_table_map {
        Some(id) => flowlane_testbed::table_writer::table_writer(id),
        None => Ok((nic.writer)(&c.iface, rss.map(|r| r.table().size()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
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
        fn read_192(_: &str) -> Option<RssSettings> {
            Some(RssSettings {
                key: vec![0x6d; 40],
                table: (0..192).map(|i| i % 4).collect(),
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
            read: |_| unreachable!("the flags give the RSS"),
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
        writer(&c, model.as_ref(), nic).unwrap();
        writer(&c, None, nic).unwrap();
        assert_eq!(*MADE_FOR.lock().unwrap(), [Some(8), None]);
    }
}
