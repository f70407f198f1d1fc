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
        bail!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
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
