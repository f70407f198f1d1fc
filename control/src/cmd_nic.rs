//! `flowlane nic rss|set-rss`: a real NIC's RSS key and indirection table,
//! through the kernel's ethtool netlink family or its ioctls.

use anyhow::{bail, Result};
use clap::Subcommand;
use flowlane_numa_sched::nic::{even_table, point_entries};

use crate::nic::error::Mechanism;
use crate::nic::ethtool::EthtoolNic;
use flowlane_dataplane::service_args::{queue_count, queue_number, rss_key_value};
use flowlane_numa_sched::nic::RssNic;
use flowlane_numa_sched::toeplitz::RssKey;

/// `flowlane nic ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum NicCmd {
    /// What the NIC can do (its capability model): channels, RSS key and
    /// table sizes, hash function and hashed fields, ntuple filters, XDP
    /// and AF_XDP features, queues with their NAPI instances and IRQs, the
    /// NUMA node. Reads, never writes.
    Caps {
        /// Interface name.
        #[arg(long)]
        iface: String,
        /// Print the model as JSON.
        #[arg(long, conflicts_with = "record")]
        json: bool,
        /// Write the model to FILE as TOML (a recording that `flowlane plan
        /// --explain --nic-recording FILE` plans for on any machine).
        #[arg(long, value_name = "FILE")]
        record: Option<std::path::PathBuf>,
        #[command(flatten)]
        roots: crate::sysroot::Roots,
    },
    /// Each queue's own counters, as the driver keeps them (netdev
    /// `qstats-get`): packets, bytes, allocation failures, drops.
    Qstats {
        /// Interface name.
        #[arg(long)]
        iface: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        roots: crate::sysroot::Roots,
    },
    /// Show the RSS key and indirection table of an interface, and which
    /// kernel interface answered (ethtool netlink or ioctl).
    Rss {
        /// Interface name.
        #[arg(long)]
        iface: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the key and/or the indirection table: spread evenly
    /// (`--equal N`), explicit (`--table`), and/or single entries
    /// (`--entry`, applied last, on the current table if nothing else);
    /// or give the table back to the driver (`--default`).
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true)
        .args(["key", "equal", "table", "entry", "default"])))]
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
        /// Explicit table: one queue per bucket, comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            value_name = "Q,Q,...",
            value_parser = queue_number::<u32>,
            conflicts_with = "equal"
        )]
        table: Option<Vec<u32>>,
        /// Put bucket BUCKET on queue QUEUE (repeatable).
        #[arg(long, value_name = "BUCKET=QUEUE", value_parser = bucket_entry)]
        entry: Vec<(usize, u32)>,
        /// Give the table back to the driver (as `ethtool -X IF default`):
        /// its default spread over all the rings, no longer marked set by
        /// hand, so that `ethtool -L` may change the channels again.
        #[arg(long, conflicts_with_all = ["equal", "table", "entry"])]
        default: bool,
    },
}

/// Parses `--entry BUCKET=QUEUE`.
fn bucket_entry(text: &str) -> std::result::Result<(usize, u32), String> {
    let parsed = text
        .split_once('=')
        .and_then(|(b, q)| Some((b.trim().parse().ok()?, q.trim().parse().ok()?)));
    parsed.ok_or_else(|| {
        format!("takes BUCKET=QUEUE (a bucket of the table and the queue it goes to, e.g. 5=1); got {text:?}")
    })
}

/// Applies `--entry` changes to `table` (all checked first).
fn apply_entries(table: &mut [u32], entries: &[(usize, u32)]) -> Result<()> {
    point_entries(table, None, entries).map_err(|e| anyhow::anyhow!("--entry: {e}"))
}

/// Runs a `flowlane nic` command.
pub(crate) fn run(cmd: NicCmd) -> Result<()> {
    match cmd {
        NicCmd::Caps {
            iface,
            json,
            record,
            roots,
        } => {
            let caps = crate::nic::caps::read(&roots, &iface)?;
            match (json, record) {
                (true, _) => outln!("{}", serde_json::to_string_pretty(&caps)?),
                (false, Some(path)) => {
                    crate::nic::recording::write(&caps, &path)?;
                    outln!("{iface}'s capabilities recorded in {}", path.display());
                }
                (false, None) => out!("{}", crate::nic::recording::summary(&caps)),
            }
            Ok(())
        }
        NicCmd::Qstats { iface, json, roots } => {
            let stats = crate::nic::caps::queue_stats(&roots, &iface)?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&stats)?);
                return Ok(());
            }
            let Some(stats) = stats else {
                bail!("{iface} keeps no per-queue counters the kernel reports (netdev qstats-get: the driver has none, or the kernel is older than 6.10)");
            };
            let n = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
            outln!(
                "{:>5} {:>3} {:>14} {:>16} {:>10} {:>10}",
                "queue",
                "dir",
                "packets",
                "bytes",
                "alloc-fail",
                "hw-drops"
            );
            for q in stats {
                outln!(
                    "{:>5} {:>3} {:>14} {:>16} {:>10} {:>10}",
                    q.queue,
                    if q.rx { "rx" } else { "tx" },
                    n(q.packets),
                    n(q.bytes),
                    n(q.alloc_fail),
                    n(q.hw_drops)
                );
            }
            Ok(())
        }
        NicCmd::Rss { iface, json } => show(&EthtoolNic::new(&iface), json),
        NicCmd::SetRss {
            iface,
            key,
            equal,
            table,
            entry,
            default,
        } => {
            let nic = EthtoolNic::new(&iface);
            if default {
                let how = nic.reset_table_with_key(key.as_ref().map(|k| k.as_bytes()))?;
                outln!(
                    "RSS table of {} given back to the driver (through {how})",
                    nic.name()
                );
                return Ok(());
            }
            let current = if equal.is_some() || !entry.is_empty() {
                Some(nic.read_for_write()?)
            } else {
                None
            };
            // Any size: an even spread needs no power of two.
            let mut table = match (equal, table, &current) {
                (Some(n), _, Some(cur)) => Some(even_table(cur.table.len(), u32::from(n))),
                (_, t, _) => t,
            };
            if let (false, Some(cur)) = (entry.is_empty(), current) {
                let mut t = table.unwrap_or(cur.table);
                apply_entries(&mut t, &entry)?;
                table = Some(t);
            }
            let how = nic.write(key.as_ref().map(|k| k.as_bytes()), table.as_deref())?;
            outln!("RSS of {} updated (through {how})", nic.name());
            Ok(())
        }
    }
}

fn show(nic: &EthtoolNic, json: bool) -> Result<()> {
    let (rss, mechanism): (_, Mechanism) = nic.read()?;
    let caps = nic.caps_of(&rss)?;
    if json {
        outln!(
            "{}",
            serde_json::json!({"iface": nic.name(), "mechanism": mechanism, "caps": caps, "rss": rss})
        );
        return Ok(());
    }
    outln!(
        "{}: {} queues, {}-byte key, {}-entry table (read through {mechanism})",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_apply() {
        assert_eq!(bucket_entry("5=1"), Ok((5, 1)));
        assert_eq!(bucket_entry(" 12 = 3 "), Ok((12, 3)));
        for bad in ["5", "5=", "=1", "a=1", "5=-1", "5:1"] {
            let e = bucket_entry(bad).unwrap_err();
            assert!(e.contains("BUCKET=QUEUE"), "{bad}: {e}");
        }
        let mut t = vec![0, 1, 0, 1];
        apply_entries(&mut t, &[(0, 3), (3, 2), (0, 1)]).unwrap();
        assert_eq!(t, [1, 1, 0, 2], "later entries win");
        let e = apply_entries(&mut t, &[(0, 0), (4, 0)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--entry: bucket 4 is outside the NIC's indirection table of 4 entries (0..=3): \
             nothing written"
        );
        assert_eq!(t, [1, 1, 0, 2], "nothing applied");
    }
}
