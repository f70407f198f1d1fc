//! Running a data-path program on a veth test bed (`flowlane testbed up`).
//!
//! A test bed records its state in `$FLOWLANE_RUN_DIR/testbed/<name>.json`
//! (default `/run/flowlane`) and pins its emulated NIC's maps in bpffs. Both
//! are visible only from the root namespace, while the data path must run
//! inside the bed's namespace (`flowlane-<name>`). Programs that take
//! `--bed NAME` therefore read the bed here, then re-execute themselves
//! inside its namespace with what they read as explicit flags
//! (`--rss-key=HEX --rss-table=q,q,... --neighbor=IP=MAC`): see
//! [`reexec_in_bed`]. The `flowlane` TCP examples and `flowlane-ttcp` both
//! use this.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use flowlane_ebpf::rss_emu::RssEmuMaps;
use flowlane_numa_sched::placement::{PlacementPlan, QueuePlacement};
use flowlane_numa_sched::toeplitz::{RssHashConfig, RssKey};
use flowlane_numa_sched::{IndirectionTable, RssState};

use crate::{Error, Result};

/// Directory of the test beds' state files (`$FLOWLANE_RUN_DIR/testbed`,
/// default `/run/flowlane/testbed`).
pub fn state_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("FLOWLANE_RUN_DIR").unwrap_or_else(|| "/run/flowlane".into()))
        .join("testbed")
}

/// What a running test bed recorded about itself (the fields a data-path
/// program needs; `flowlane testbed` writes more).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct BedInfo {
    /// Bed name.
    pub name: String,
    /// flowlane's namespace (`flowlane-<name>`).
    pub netns: String,
    /// The kernel peer's namespace.
    pub peer_netns: String,
    /// flowlane side's interface (`xsk0`).
    pub local_if: String,
    /// Queue count of the veth pair.
    pub queues: u32,
    /// flowlane side's IPv4 address.
    pub local_v4: String,
    /// The kernel peer's IPv4 address.
    pub peer_v4: String,
    /// The kernel peer's MAC.
    pub peer_mac: String,
    /// bpffs directory of the emulated NIC's maps.
    pub pin_dir: PathBuf,
}

impl BedInfo {
    /// Reads the state file of bed `name` (run from the root namespace).
    pub fn load(name: &str) -> Result<BedInfo> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::Setup(format!("bad test bed name {name:?}")));
        }
        let p = state_dir().join(format!("{name}.json"));
        let text = std::fs::read_to_string(&p).map_err(|_| {
            Error::Setup(format!(
                "test bed {name} is not up (no {}); run `flowlane testbed up --name {name}` \
                 (and run this from the root namespace, not inside the bed)",
                p.display()
            ))
        })?;
        serde_json::from_str(&text).map_err(|e| {
            Error::Setup(format!(
                "{} is corrupt ({e}); run `flowlane testbed down --name {name}`",
                p.display()
            ))
        })
    }

    /// The emulated NIC's Toeplitz key and indirection table, read from its
    /// pinned maps (root namespace only).
    pub fn rss(&self) -> Result<(Vec<u8>, Vec<u32>)> {
        let c = RssEmuMaps::open(&self.pin_dir)
            .and_then(|m| m.read())
            .map_err(|e| {
                Error::Setup(format!(
                    "reading test bed {}'s RSS (run this from the root namespace, not inside the bed): {e}",
                    self.name
                ))
            })?;
        Ok((c.key, c.table))
    }

    /// The flags that carry the bed's RSS and peer MAC into its namespace:
    /// `--rss-key=HEX`, `--rss-table=q,q,...`, `--neighbor=IP=MAC`.
    pub fn flags(&self) -> Result<Vec<String>> {
        let (key, table) = self.rss()?;
        Ok(vec![
            format!("--rss-key={}", hex(&key)),
            format!(
                "--rss-table={}",
                table
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!("--neighbor={}={}", self.peer_v4, self.peer_mac),
        ])
    }
}

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

/// `args` without `flag VALUE` and `flag=VALUE`.
pub fn args_without(args: impl IntoIterator<Item = String>, flag: &str) -> Vec<String> {
    let eq = format!("{flag}=");
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == flag {
            skip = true;
        } else if !a.starts_with(&eq) {
            out.push(a);
        }
    }
    out
}

/// `--bed NAME`: reads bed `name` here, then replaces this process (same pid)
/// with `ip netns exec <bed ns> <this program> <its arguments without --bed>
/// <BedInfo::flags>`. Returns only on failure.
pub fn reexec_in_bed(name: &str) -> Error {
    use std::os::unix::process::CommandExt;
    let run = || -> Result<std::io::Error> {
        let bed = BedInfo::load(name)?;
        let mut args = args_without(std::env::args().skip(1), "--bed");
        args.extend(bed.flags()?);
        let exe = std::env::current_exe().map_err(|e| Error::Io {
            what: "finding this program's path".into(),
            source: e,
        })?;
        Ok(std::process::Command::new("ip")
            .args(["netns", "exec", &bed.netns])
            .arg(exe)
            .args(&args)
            .exec())
    };
    match run() {
        Ok(e) => Error::Io {
            what: "executing `ip netns exec`".into(),
            source: e,
        },
        Err(e) => e,
    }
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
    fn strips_the_flag_in_both_spellings() {
        let a = ["-r", "--bed", "x", "-t", "2", "--bed=y", "--bedrock"]
            .map(String::from)
            .to_vec();
        assert_eq!(args_without(a, "--bed"), ["-r", "-t", "2", "--bedrock"]);
    }

    #[test]
    fn reads_a_state_file_and_reports_a_missing_bed() {
        let dir = std::env::temp_dir().join(format!("fl-bed-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("testbed")).unwrap();
        std::fs::write(
            dir.join("testbed/b1.json"),
            r#"{"name":"b1","netns":"flowlane-b1","peer_netns":"flowlane-b1-peer","local_if":"xsk0",
               "peer_if":"peer0","queues":2,"local_v4":"10.99.0.1","peer_v4":"10.99.0.2",
               "local_mac":"02:00:00:00:00:01","peer_mac":"02:00:00:00:00:02","pin_dir":"/nonexistent"}"#,
        )
        .unwrap();
        // Only this test reads FLOWLANE_RUN_DIR in this crate's unit tests.
        std::env::set_var("FLOWLANE_RUN_DIR", &dir);
        let b = BedInfo::load("b1").unwrap();
        assert_eq!(b.netns, "flowlane-b1");
        assert_eq!(b.queues, 2);
        let e = BedInfo::load("nope").unwrap_err().to_string();
        assert!(e.contains("not up"), "{e}");
        assert!(b.rss().unwrap_err().to_string().contains("root namespace"));
        std::env::remove_var("FLOWLANE_RUN_DIR");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hex_is_lower_case() {
        assert_eq!(hex(&[0x6d, 0x5a, 0x0f]), "6d5a0f");
    }
}
