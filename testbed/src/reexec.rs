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

/// `--bed NAME`: reads bed `name` here, then replaces this process (same pid)
/// with `ip netns exec <bed ns> <this program> <its arguments without --bed>
/// <bed_flags>`. Returns only on failure.
pub fn reexec_in_bed(name: &str) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let run = || -> Result<std::io::Error> {
        let bed = load_hinted(
            name,
            " (and run this from the root namespace, not inside the bed)",
        )?;
        let mut args = args_without(std::env::args().skip(1), "--bed");
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
