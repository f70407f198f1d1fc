//! Running a data-path program on a veth test bed (`--bed NAME`).
//!
//! A bed's state file and its emulated NIC's pinned maps are visible only
//! from the root namespace, while the data path must run inside the bed's
//! namespace (`flowlane-<name>`). Programs that take `--bed NAME` therefore
//! read the bed here, then re-execute themselves inside its namespace with
//! what they read as explicit flags (`--rss-key=HEX --rss-table=q,q,...
//! --neighbor=IP=MAC`): see [`reexec_in_bed`]. The `flowlane` TCP examples
//! and `flowlane-ttcp` both use this.

use anyhow::{anyhow, Context, Result};
use flowlane_numa_sched::nic::RssNic;
use flowlane_numa_sched::toeplitz::RssKey;

use crate::state::{load_hinted, BedState};

/// The flags that carry a bed's RSS (read from its emulated NIC, root
/// namespace only) and peer MAC into its namespace: `--rss-key=HEX`,
/// `--rss-table=q,q,...`, `--neighbor=IP=MAC`, and the id of the emulated
/// NIC's table map (`--rss-table-map=ID`, for services that move buckets).
pub fn bed_flags(bed: &BedState) -> Result<Vec<String>> {
    // Not the namespace hint below: bpffs is simply not there.
    crate::bpffs::require_mounted(&bed.name)?;
    let rss = bed.nic().rss().map_err(|e| {
        anyhow!(
            "reading test bed {}'s RSS (run this from the root namespace, not inside the bed): {e:#}",
            bed.name
        )
    })?;
    Ok(vec![
        format!("--rss-key={}", RssKey::new(rss.key.clone())?),
        format!(
            "--rss-table={}",
            rss.table
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
        format!("--neighbor={}={}", bed.peer_v4, bed.peer_mac),
        format!("--rss-table-map={}", bed.nic().table_map_id()?),
    ])
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

/// The flag among `args` that [`bed_flags`] would give too, as the
/// command line spells it (`--neighbor` may be given beside the bed's:
/// another host's).
fn bed_flag_given(args: &[String]) -> Option<&'static str> {
    ["--rss-key", "--rss-table", "--rss-table-map"]
        .into_iter()
        .find(|flag| {
            let eq = format!("{flag}=");
            args.iter().any(|a| a == flag || a.starts_with(&eq))
        })
}

/// `--bed NAME`: reads bed `name` here, then replaces this process (same pid)
/// with `ip netns exec <bed ns> <this program> <its arguments without --bed>
/// <bed_flags>`. Returns only on failure.
pub fn reexec_in_bed(name: &str) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let run = || -> Result<std::io::Error> {
        crate::netns::require_host_namespace(&format!("--bed {name}"))?;
        crate::netns::require_namespaces(&format!("flowlane with --bed {name}"))?;
        let given: Vec<String> = std::env::args().skip(1).collect();
        if let Some(flag) = bed_flag_given(&given) {
            anyhow::bail!(
                "{flag} and --bed {name} both give the NIC's RSS: --bed reads the bed's own; \
                 drop {flag}, or drop --bed and run inside the bed's namespace \
                 (`ip netns exec flowlane-{name} ...`) with your own"
            );
        }
        let bed = load_hinted(
            name,
            " (and run this from the root namespace, not inside the bed)",
        )?;
        let mut args = args_without(given, "--bed");
        args.extend(bed_flags(&bed)?);
        let exe = std::env::current_exe().context("finding this program's path")?;
        Ok(std::process::Command::new("ip")
            .args(["netns", "exec", &bed.netns])
            .arg(exe)
            .args(&args)
            .exec())
    };
    match run() {
        Ok(e) => anyhow::Error::new(e).context("executing `ip netns exec`"),
        Err(e) => e,
    }
}

#[cfg(test)]
mod tests {
    /// A command line that gives the RSS `--bed` gives is refused by the
    /// flag it gave; another host's `--neighbor` is not one.
    #[test]
    fn flags_the_bed_gives_are_not_given_beside_it() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            super::bed_flag_given(&args(&["bulk-sink", "--rss-table", "1,1"])),
            Some("--rss-table")
        );
        assert_eq!(
            super::bed_flag_given(&args(&["--rss-key=6d5a", "--bed", "b"])),
            Some("--rss-key")
        );
        assert_eq!(
            super::bed_flag_given(&args(&["--rss-table-map", "7"])),
            Some("--rss-table-map")
        );
        assert_eq!(
            super::bed_flag_given(&args(&["--neighbor", "10.0.0.9=02:00:00:00:00:09"])),
            None
        );
        assert_eq!(super::bed_flag_given(&args(&["--rss-tables", "x"])), None);
    }

    #[test]
    fn flags_need_the_bed_maps_of_the_root_namespace() {
        let b: BedState = serde_json::from_str(
            r#"{"name":"b1","netns":"flowlane-b1","peer_netns":"flowlane-b1-peer","local_if":"xsk0",
               "peer_if":"peer0","queues":2,"local_v4":"10.99.0.1","peer_v4":"10.99.0.2",
               "local_mac":"02:00:00:00:00:01","peer_mac":"02:00:00:00:00:02","pin_dir":"/nonexistent"}"#,
        )
        .unwrap();
        let e = bed_flags(&b).unwrap_err().to_string();
        assert!(e.contains("root namespace"), "{e}");
    }

    use super::*;

    #[test]
    fn strips_the_flag_in_both_spellings() {
        let a = ["-r", "--bed", "x", "-t", "2", "--bed=y", "--bedrock"]
            .map(String::from)
            .to_vec();
        assert_eq!(args_without(a, "--bed"), ["-r", "-t", "2", "--bedrock"]);
    }
}
