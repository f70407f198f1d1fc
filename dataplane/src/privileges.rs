//! What the data path needs from the operating system before it starts.

use crate::{Error, Result};

/// Fails, saying what to do, unless this process runs as root: AF_XDP
/// sockets, XDP programs and BPF maps need CAP_NET_ADMIN, CAP_BPF and
/// CAP_SYS_ADMIN, UMEM registration CAP_IPC_LOCK, test beds network
/// namespaces.
pub fn require_root(what: &str) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::Setup(format!(
            "{what} needs root (CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN, CAP_IPC_LOCK: network namespaces, BPF, AF_XDP): run it with sudo"
        )));
    }
    Ok(())
}
