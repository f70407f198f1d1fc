//! RSS of a real NIC through the `ethtool` command (`-x` to read, `-X` to
//! write). Partial: key and table only; hash fields and contexts later.

use anyhow::{anyhow, Context, Result};

use flowlane_numa_sched::nic::{RssCaps, RssNic, RssSettings};
use flowlane_testbed::netns::run;

/// A NIC driven through ethtool.
#[derive(Debug, Clone)]
pub(crate) struct EthtoolNic {
    ifname: String,
}

impl EthtoolNic {
    /// The NIC named `ifname` in the current namespace.
    pub(crate) fn new(ifname: &str) -> EthtoolNic {
        EthtoolNic {
            ifname: ifname.to_string(),
        }
    }
}

/// Parses `ethtool -x` output.
pub(crate) fn parse_ethtool_x(text: &str) -> Result<RssSettings> {
    let mut table = Vec::new();
    let mut key = Vec::new();
    let mut in_key = false;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("RSS hash key") {
            in_key = true;
            continue;
        }
        if in_key {
            if l.is_empty() || l.starts_with("RSS hash function") {
                in_key = false;
                continue;
            }
            for b in l.split(':') {
                key.push(
                    u8::from_str_radix(b.trim(), 16)
                        .map_err(|_| anyhow!("bad key byte {b:?} in ethtool output"))?,
                );
            }
            continue;
        }
        // "    0:      0     1     2     3     0     1     2     3"
        if let Some((idx, rest)) = l.split_once(':') {
            if idx.trim().parse::<usize>().is_ok() {
                for q in rest.split_whitespace() {
                    table.push(
                        q.parse()
                            .map_err(|_| anyhow!("bad queue {q:?} in ethtool output"))?,
                    );
                }
            }
        }
    }
    if table.is_empty() {
        return Err(anyhow!(
            "ethtool printed no indirection table (does the device support RSS?)"
        ));
    }
    Ok(RssSettings { key, table })
}

fn hex_key(key: &[u8]) -> String {
    key.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl RssNic for EthtoolNic {
    type Error = anyhow::Error;

    fn name(&self) -> &str {
        &self.ifname
    }

    fn caps(&self) -> Result<RssCaps> {
        let s = self.rss()?;
        let channels = run("ethtool", &["-l", &self.ifname])?;
        // The "Current hardware settings" block comes second.
        let current = channels
            .split("Current hardware settings")
            .nth(1)
            .unwrap_or(&channels);
        let mut queues = 0;
        for line in current.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if matches!(k.trim(), "RX" | "Combined") {
                    queues += v.trim().parse::<u32>().unwrap_or(0);
                }
            }
        }
        Ok(RssCaps {
            queues: queues.max(1),
            key_len: s.key.len(),
            table_size: s.table.len(),
        })
    }

    fn rss(&self) -> Result<RssSettings> {
        let out = run("ethtool", &["-x", &self.ifname])
            .with_context(|| format!("reading RSS of {}", self.ifname))?;
        parse_ethtool_x(&out)
    }

    fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<()> {
        self.caps()?.validate(key, table)?;
        let mut args = vec!["-X".to_string(), self.ifname.clone()];
        if let Some(k) = key {
            args.extend(["hkey".to_string(), hex_key(k)]);
        }
        if let Some(t) = table {
            // `weight` gives per-queue counts, not a table: write it through
            // the equivalent explicit weights only when the table is a pure
            // round-robin; otherwise ethtool has no CLI for arbitrary tables.
            let queues = t.iter().max().map(|m| m + 1).unwrap_or(1);
            let round_robin = t.iter().enumerate().all(|(i, &q)| q == i as u32 % queues);
            if !round_robin {
                anyhow::bail!(
                    "the ethtool CLI cannot write an arbitrary indirection table; only `equal N` layouts are supported here"
                );
            }
            args.extend(["equal".to_string(), queues.to_string()]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        run("ethtool", &refs).map(|_| ())
    }
}

/// The RSS settings of `iface` as ethtool reports them, if it can (for the
/// TCP services' active opens, which pick ports by the NIC's RSS).
pub(crate) fn read_rss(iface: &str) -> Option<RssSettings> {
    EthtoolNic::new(iface).rss().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "RX flow hash indirection table for eth0 with 4 RX ring(s):
    0:      0     1     2     3     0     1     2     3
    8:      0     1     2     3     0     1     2     3
RSS hash key:
6d:5a:56:da:25:5b:0e:c2:41:67:25:3d:43:a3:8f:b0:d0:ca:2b:cb:ae:7b:30:b4:77:cb:2d:a3:80:30:f2:0c:6a:42:b7:3b:be:ac:01:fa
RSS hash function:
    toeplitz: on
    xor: off
";

    #[test]
    fn parses_ethtool_x() {
        let s = parse_ethtool_x(SAMPLE).unwrap();
        assert_eq!(s.table.len(), 16);
        assert_eq!(&s.table[..5], &[0, 1, 2, 3, 0]);
        assert_eq!(s.key.len(), 40);
        assert_eq!(&s.key[..3], &[0x6d, 0x5a, 0x56]);
        assert_eq!(hex_key(&s.key[..3]), "6d:5a:56");
    }

    #[test]
    fn rejects_output_without_a_table() {
        assert!(parse_ethtool_x("Cannot get RX ring count: Operation not supported").is_err());
    }
}
