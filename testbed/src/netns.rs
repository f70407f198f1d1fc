//! Network namespaces and iproute2: the effects the test bed is made of.

use std::fs::File;
use std::process::Command;

use anyhow::{bail, Context, Result};
use nix::sched::{setns, CloneFlags};

/// Runs `ip <args>`; on failure the error carries ip's own message.
pub fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

/// Runs a command, returning stdout; a non-zero exit becomes an error with
/// the command's stderr.
pub fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd).args(args).output().with_context(|| {
        format!("running {cmd}: is it installed? (scripts/setup.sh installs flowlane's system dependencies)")
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        // A tool run through `ip netns exec` (ethtool, tc, sysctl) that is
        // not installed shows as ip failing.
        let hint = if err.contains("No such file or directory") && err.contains("exec") {
            " (is the tool installed? scripts/setup.sh installs flowlane's system dependencies)"
        } else {
            ""
        };
        bail!("`{cmd} {}` failed: {}{hint}", args.join(" "), err.trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether the named namespace exists.
pub fn exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// Runs `f` on a thread that has entered the named network namespace, so
/// that the caller's own namespace is never changed.
pub fn in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let path = std::path::Path::new("/run/netns").join(name);
    let file = File::open(&path)
        .with_context(|| format!("opening {} (is the test bed up?)", path.display()))?;
    std::thread::spawn(move || {
        setns(&file, CloneFlags::CLONE_NEWNET).context("entering the network namespace")?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("a thread inside the network namespace panicked"))?
}

pub use flowlane_dataplane::privileges::require_root;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_behind_ip_netns_exec_says_what_to_do() {
        // What `ip netns exec NS ethtool …` prints when ethtool is missing.
        let e = run(
            "sh",
            &[
                "-c",
                "echo 'exec of \"ethtool\" failed: No such file or directory' >&2; exit 1",
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("ethtool") && e.contains("scripts/setup.sh"),
            "{e}"
        );
        let e = run(
            "sh",
            &["-c", "echo 'RTNETLINK answers: File exists' >&2; exit 2"],
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("setup.sh"), "{e}");
    }
}
