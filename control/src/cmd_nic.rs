//! `flowlane nic rss|set-rss`: a real NIC's RSS through ethtool.

use anyhow::Result;
use clap::Subcommand;
use flowlane_numa_sched::nic::RssNic;
use flowlane_numa_sched::IndirectionTable;

use crate::nic::ethtool::EthtoolNic;
use flowlane_dataplane::service_args::{queue_count, rss_key_value};
use flowlane_numa_sched::toeplitz::RssKey;

/// `flowlane nic ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum NicCmd {
    /// Show the RSS key and indirection table of an interface.
    Rss {
        /// Interface name.
        #[arg(long)]
        iface: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Spread the indirection table evenly over the first N queues and/or
    /// set the key.
    SetRss {
        /// Interface name.
        #[arg(long)]
        iface: String,
        /// New Toeplitz key (hex).
        #[arg(long, value_parser = rss_key_value)]
        key: Option<RssKey>,
        /// Spread the table over queues 0..N.
        #[arg(long, value_parser = queue_count::<u16>)]
        equal: Option<u16>,
    },
}

/// Runs a `flowlane nic` command.
pub(crate) fn run(cmd: NicCmd) -> Result<()> {
    match cmd {
        NicCmd::Rss { iface, json } => show(&EthtoolNic::new(&iface), json),
        NicCmd::SetRss { iface, key, equal } => {
            let nic = EthtoolNic::new(&iface);
            let table = match equal {
                Some(n) => Some(
                    IndirectionTable::even(nic.caps()?.table_size, &(0..n).collect::<Vec<_>>())?
                        .to_queue_list(),
                ),
                None => None,
            };
            nic.set_rss(key.as_ref().map(|k| k.as_bytes()), table.as_deref())?;
            outln!("RSS of {} updated", nic.name());
            Ok(())
        }
    }
}

fn show(nic: &EthtoolNic, json: bool) -> Result<()> {
    let caps = nic.caps()?;
    let rss = nic.rss()?;
    if json {
        outln!(
            "{}",
            serde_json::json!({"iface": nic.name(), "caps": caps, "rss": rss})
        );
        return Ok(());
    }
    outln!(
        "{}: {} queues, {}-byte key, {}-entry table",
        nic.name(),
        caps.queues,
        caps.key_len,
        caps.table_size
    );
    outln!(
        "key {}",
        rss.key
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    );
    for (i, row) in rss.table.chunks(8).enumerate() {
        outln!(
            "{:>5}: {}",
            i * 8,
            row.iter().map(|q| format!("{q:>4}")).collect::<String>()
        );
    }
    Ok(())
}
