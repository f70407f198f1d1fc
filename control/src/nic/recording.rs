//! NIC capability recordings: a [`NicCaps`] written as TOML by `flowlane
//! nic caps --record FILE` and read back by `flowlane plan --explain
//! --nic-recording FILE`, so that a plan can be explained for a NIC this
//! machine does not have; and the one-screen summary `flowlane nic caps`
//! prints.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use flowlane_numa_sched::nic_caps::{hash_fixes, NicCaps, QueueKind};
use flowlane_numa_sched::toeplitz::Protocol;

/// Writes `caps` to `path` as TOML, after a comment saying where and on
/// which kernel it was recorded.
///
/// # Errors
/// The file cannot be written.
pub(crate) fn write(caps: &NicCaps, path: &Path) -> anyhow::Result<()> {
    let kernel = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "an unknown kernel".into());
    let body = toml::to_string(caps).context("encoding the capabilities as TOML")?;
    let text = format!(
        "# {}'s capabilities, recorded by `flowlane nic caps --record` on Linux {kernel}.\n\n{body}",
        caps.iface
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Reads a recording.
///
/// # Errors
/// One line naming the file: it cannot be read, is not TOML, or has a key
/// or value the model does not know.
pub(crate) fn load(path: &Path) -> anyhow::Result<NicCaps> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        let first = e.message().lines().next().unwrap_or("").to_string();
        let at = e
            .span()
            .map(|s| format!(" (line {})", text[..s.start].matches('\n').count() + 1))
            .unwrap_or_default();
        anyhow::anyhow!("{} is not a NIC recording{at}: {first}", path.display())
    })
}

fn known<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// The model in a screen of text.
#[must_use]
pub(crate) fn summary(c: &NicCaps) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: driver {}, NUMA node {}",
        c.iface,
        known(c.driver.as_deref()),
        c.numa_node
            .map_or_else(|| "none".to_string(), |n| n.to_string())
    );
    let _ = write!(
        s,
        "queues: {} rx, {} tx now; at most {} rx",
        c.rx_queues,
        c.tx_queues,
        c.max_rx_queues()
    );
    match c.channels {
        Some(ch) => {
            let _ = writeln!(
                s,
                " (channels: combined {}/{}, rx {}/{}, tx {}/{}, other {}/{})",
                ch.combined,
                ch.combined_max,
                ch.rx,
                ch.rx_max,
                ch.tx,
                ch.tx_max,
                ch.other,
                ch.other_max
            );
        }
        None => {
            let _ = writeln!(s, " (channels not reported)");
        }
    }
    match &c.rss {
        Some(r) => {
            let f = &r.flow_hash;
            let fields = [
                ("tcp4", &f.tcp4),
                ("tcp6", &f.tcp6),
                ("udp4", &f.udp4),
                ("udp6", &f.udp6),
            ]
            .iter()
            .map(|(n, v)| format!("{n} {}", v.as_deref().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(", ");
            let _ = writeln!(
                s,
                "RSS: {} hash, input transformation {}, {}-byte key, {}-entry table; hashed \
                 fields: {fields}",
                known(r.hash_function.as_deref()),
                known(f.input_xfrm.as_deref()),
                r.key_len,
                r.table_size
            );
            let model = |p: Protocol| {
                let m = r.mismatches(p);
                if m.is_empty() {
                    return "computes the NIC's hash".to_string();
                }
                let said: Vec<String> = m.iter().map(ToString::to_string).collect();
                match hash_fixes(&c.iface, &m) {
                    Some(fix) => format!("cannot compute it ({}; `{fix}`)", said.join("; ")),
                    None => format!("cannot compute it ({})", said.join("; ")),
                }
            };
            let _ = writeln!(
                s,
                "flowlane's RSS model: TCP {}; UDP {}",
                model(Protocol::Tcp),
                model(Protocol::Udp)
            );
        }
        None => {
            let _ = writeln!(s, "RSS: none in the device");
        }
    }
    let toggle = |t: Option<flowlane_numa_sched::nic_caps::Toggle>| match t {
        Some(t) if t.available => format!("available, {}", if t.on { "on" } else { "off" }),
        Some(_) => "not available".to_string(),
        None => "unknown".to_string(),
    };
    let _ = writeln!(
        s,
        "ntuple filters: {}; receive hashing: {}",
        toggle(c.ntuple),
        toggle(c.rxhash)
    );
    match &c.xdp {
        Some(x) => {
            let names = |v: Vec<&str>| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.join(", ")
                }
            };
            let features = x.features.iter().map(|f| f.name()).collect();
            let xsk = x.xsk.iter().map(|f| f.name()).collect();
            let _ = writeln!(
                s,
                "XDP: {}; zero-copy fragments {}; AF_XDP metadata: {}",
                names(features),
                x.zc_max_segs,
                names(xsk)
            );
        }
        None => {
            let _ = writeln!(s, "XDP: unknown (no netdev family)");
        }
    }
    let rx: Vec<_> = c
        .queues
        .iter()
        .filter(|q| q.kind == QueueKind::Rx)
        .collect();
    if rx.is_empty() {
        let _ = writeln!(s, "queue NAPI/IRQs: not reported");
    } else {
        let _ = writeln!(
            s,
            "rx queue -> NAPI id (IRQ, thread): {}",
            rx.iter()
                .map(|q| {
                    let napi = c.rx_napi(q.id);
                    format!(
                        "{} -> {} ({}, {})",
                        q.id,
                        known(q.napi),
                        napi.and_then(|n| n.irq)
                            .map_or_else(|| "no irq".into(), |i| format!("irq {i}")),
                        napi.and_then(|n| n.pid)
                            .map_or_else(|| "no thread".into(), |p| format!("pid {p}")),
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let _ = writeln!(s, "threaded NAPI: {}", known(c.threaded_napi));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_numa_sched::nic_caps::{FlowHash, RssFacts};

    /// `nic caps` says the input transformation and whether flowlane's
    /// model computes the NIC's hash, with what to change where it does not.
    #[test]
    fn the_summary_says_whether_the_model_computes_the_hash() {
        let caps = NicCaps {
            iface: "eth0".into(),
            rx_queues: 4,
            tx_queues: 4,
            rss: Some(RssFacts {
                key_len: 40,
                table_size: 128,
                hash_function: Some("toeplitz".into()),
                flow_hash: FlowHash {
                    input_xfrm: Some("symmetric-xor".into()),
                    tcp4: Some("sdfn".into()),
                    ..FlowHash::default()
                },
            }),
            ..NicCaps::default()
        };
        let s = summary(&caps);
        assert!(
            s.contains("RSS: toeplitz hash, input transformation symmetric-xor, 40-byte key"),
            "{s}"
        );
        assert!(
            s.contains(
                "flowlane's RSS model: TCP cannot compute it (the NIC transforms the fields \
                 before hashing them (symmetric-xor"
            ),
            "{s}"
        );
        assert!(s.contains("`ethtool -X eth0 xfrm none`)"), "{s}");
    }
}
