//! How a data-path service starts, before it touches the data path:
//! privileges first, for what the command will do (a user who is not root
//! hears exactly that, not a complaint about a bed or a namespace), then,
//! with `--bed NAME`, re-execution inside the bed's namespace
//! ([`flowlane_testbed::reexec_in_bed`]); the process that serves warns
//! about a listening port inside flowlane's range for outgoing
//! connections.

use anyhow::Result;
use flowlane_dataplane::privileges::require_root;
use flowlane_dataplane::service_args::{ephemeral_port_warning, Backend, DataPathArgs};

/// [`enter_on`] for a service on the AF_XDP backend (root needed).
pub fn enter(what: &str, data_path: &DataPathArgs, listen: &[u16]) -> Result<()> {
    enter_on(what, Backend::Xdp, data_path, listen)
}

/// Checks privileges for `what` (the command, e.g. `flowlane
/// echo-server`) on `backend`; with `--bed` replaces this process by the
/// same command inside the bed (returns only on failure); otherwise prints
/// one warning line per `listen` port inside the outgoing range and
/// returns, for the caller to serve here.
///
/// Root is needed for what the command will do: a bed's network namespace
/// (`--bed`), and the AF_XDP backend (BPF, AF_XDP). Kernel sockets on an
/// interface of this namespace need none, nor does pinning threads; a port
/// below 1024 needs CAP_NET_BIND_SERVICE, which the listen's own error
/// tells.
pub fn enter_on(
    what: &str,
    backend: Backend,
    data_path: &DataPathArgs,
    listen: &[u16],
) -> Result<()> {
    if data_path.bed.is_some() || backend == Backend::Xdp {
        require_root(what)?;
    }
    if let Some(bed) = &data_path.bed {
        return Err(flowlane_testbed::reexec_in_bed(bed));
    }
    for w in listen.iter().filter_map(|&p| ephemeral_port_warning(p)) {
        eprintln!("{what}: {w}");
    }
    Ok(())
}
