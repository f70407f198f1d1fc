//! The BPF filesystem the beds' maps are pinned in (`/sys/fs/bpf`, the
//! root mount namespace's): whether it is mounted here, and what a command
//! that needs the pins says when it is not.

/// Where bpffs is mounted, and the beds' pins live below.
pub const MOUNT_POINT: &str = "/sys/fs/bpf";

/// Whether bpffs (or anything) is mounted on [`MOUNT_POINT`] in this
/// mount namespace.
pub fn mounted() -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(MOUNT_POINT))
}

/// Fails, in one line, unless bpffs is mounted: bed `bed`'s pinned maps
/// cannot be there (the open's own error would ask whether the bed is up).
pub fn require_mounted(bed: &str) -> anyhow::Result<()> {
    if mounted() {
        return Ok(());
    }
    anyhow::bail!(
        "bpffs is not mounted on {MOUNT_POINT} here, where test bed {bed}'s maps are pinned: \
         mount it (mount -t bpf bpf {MOUNT_POINT}) and try again; should the bed's pins have \
         gone with an unmount, make the bed anew (flowlane testbed down --bed {bed}, then \
         flowlane testbed up --bed {bed})"
    )
}
