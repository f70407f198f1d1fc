//! What a program that runs flowlane's data path needs from its host besides
//! the NIC's queues: the NIC's RSS as the [`RssState`] that
//! [`crate::tcp_handler::TcpConfig::rss`] wants, its interface's IPv4
//! address, a per-run ISN secret, its workers' CPU time, and hex for its
//! reports. (Running such a program on the veth test bed, `--bed NAME`, is
//! `flowlane-testbed`'s business.)

use std::net::Ipv4Addr;
use std::path::Path;

use flowlane_numa_sched::placement::{PlacementPlan, QueuePlacement};
use flowlane_numa_sched::toeplitz::{RssHashConfig, RssKey};
use flowlane_numa_sched::{IndirectionTable, RssState};

use crate::{Error, Result};

/// The NIC's RSS (`key`, indirection `table`) as the [`RssState`] that
/// [`crate::tcp_handler::TcpConfig::rss`] wants, for `queues` served queues
/// (placement is irrelevant to the port choice: queue q on "CPU" q, node 0).
pub fn rss_state(key: &[u8], table: &[u32], queues: u32) -> Result<RssState> {
    let bad = |e: String| Error::Setup(format!("bad RSS settings: {e}"));
    let max_q = table
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(queues.saturating_sub(1));
    let plan = PlacementPlan {
        nic_node: None,
        queues: (0..=max_q as u16)
            .map(|q| QueuePlacement {
                queue: q,
                cpu: u32::from(q),
                core_id: u32::from(q),
                node: 0,
                mem_node: 0,
            })
            .collect(),
        notes: Vec::new(),
    };
    let table = IndirectionTable::new(table.iter().map(|&q| q as u16).collect())
        .map_err(|e| bad(e.to_string()))?;
    let key = RssKey::new(key.to_vec()).map_err(|e| bad(e.to_string()))?;
    RssState::new(&key, table, RssHashConfig::default(), &plan).map_err(|e| bad(e.to_string()))
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Our IPv4 address on `iface`.
pub fn local_ipv4(iface: &str) -> Result<Ipv4Addr> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Io {
        what: "listing interface addresses".into(),
        source: e.into(),
    })?;
    for a in addrs {
        if a.interface_name != iface {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Ok(sin.ip());
        }
    }
    Err(Error::Setup(format!(
        "{iface} has no IPv4 address: add one (ip addr add A/N dev {iface})"
    )))
}

/// A per-run secret for TCP initial sequence numbers (kernel randomness
/// mixed with the clock).
pub fn isn_secret() -> [u8; 16] {
    let mut s = [0u8; 16];
    if let Ok(b) = std::fs::read("/proc/sys/kernel/random/uuid") {
        for (i, x) in b.iter().enumerate() {
            s[i % 16] ^= x.wrapping_mul(i as u8 | 1);
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for (i, b) in t.to_le_bytes().iter().enumerate() {
        s[i] ^= b;
    }
    s
}

/// CPU time (ns, `/proc/<pid>/task/<tid>/schedstat`) of the threads of this
/// process named `flowlane-q<queue>` (the data-path workers), by queue.
pub fn worker_cpu_ns(queue: u32) -> Option<u64> {
    let want = format!("flowlane-q{queue}");
    for t in std::fs::read_dir(Path::new("/proc/self/task")).ok()? {
        let p = t.ok()?.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim() == want {
            let s = std::fs::read_to_string(p.join("schedstat")).ok()?;
            return s.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lower_case() {
        assert_eq!(hex(&[0x6d, 0x5a, 0x0f]), "6d5a0f");
    }
}
