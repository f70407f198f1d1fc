//! What the data path needs from the operating system before it starts.
//!
//! Root alone is not enough: a root process may have had capabilities
//! taken away (a systemd unit's `CapabilityBoundingSet=`, `setpriv`,
//! `capsh --drop`, a container's default set). Without them libbpf prints
//! lines of its own and the kernel's `EPERM` says nothing of which one was
//! missing; so the effective set is read first and what is missing named
//! (capabilities(7)).

use crate::{Error, Result};

/// `CAP_NET_ADMIN` (capability.h): attaching XDP, tc programs, links.
const CAP_NET_ADMIN: u32 = 12;
/// `CAP_NET_RAW`: AF_XDP sockets.
const CAP_NET_RAW: u32 = 13;
/// `CAP_SYS_ADMIN`: network namespaces (`setns`, the mounts of `ip netns`);
/// it also stands for `CAP_BPF` and `CAP_NET_ADMIN` in the `bpf` system
/// call.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_BPF` (Linux 5.8+): loading BPF programs and making their maps.
const CAP_BPF: u32 = 39;

/// A capability something needs, and the one that stands for it.
#[derive(Debug, Clone, Copy)]
pub struct Need {
    cap: u32,
    name: &'static str,
    /// Another capability the kernel takes instead (`CAP_SYS_ADMIN` for
    /// `CAP_BPF` and, in the `bpf` system call, `CAP_NET_ADMIN`).
    or: Option<(u32, &'static str)>,
    /// What it is needed for, in a few words.
    purpose: &'static str,
}

/// What the AF_XDP data path needs: its BPF program and maps, the program's
/// attachment and the AF_XDP sockets. (UMEM registration needs
/// `CAP_IPC_LOCK` only where the locked-memory limit is too low, which the
/// UMEM's own error says.)
pub const DATA_PATH: &[Need] = &[
    Need {
        cap: CAP_BPF,
        name: "CAP_BPF",
        or: Some((CAP_SYS_ADMIN, "CAP_SYS_ADMIN")),
        purpose: "loading the XDP program and its maps",
    },
    Need {
        cap: CAP_NET_ADMIN,
        name: "CAP_NET_ADMIN",
        or: Some((CAP_SYS_ADMIN, "CAP_SYS_ADMIN")),
        purpose: "attaching the XDP program",
    },
    Need {
        cap: CAP_NET_RAW,
        name: "CAP_NET_RAW",
        or: None,
        purpose: "AF_XDP sockets",
    },
];

/// What entering or making a network namespace needs (`--bed`, `flowlane
/// testbed up|down`).
pub const NAMESPACES: &[Need] = &[Need {
    cap: CAP_SYS_ADMIN,
    name: "CAP_SYS_ADMIN",
    or: None,
    purpose: "entering and making network namespaces",
}];

/// What the test beds' commands need: veth pairs and tc programs
/// (CAP_NET_ADMIN, which CAP_SYS_ADMIN does not stand for outside the
/// `bpf` system call), the beds' BPF programs and pinned maps, and their
/// network namespaces. (`testbed delay`'s packet sockets need CAP_NET_RAW
/// too, which their own error says.)
pub const TEST_BED: &[Need] = &[
    Need {
        cap: CAP_NET_ADMIN,
        name: "CAP_NET_ADMIN",
        or: None,
        purpose: "veth pairs and tc programs",
    },
    Need {
        cap: CAP_BPF,
        name: "CAP_BPF",
        or: Some((CAP_SYS_ADMIN, "CAP_SYS_ADMIN")),
        purpose: "the beds' BPF programs and pinned maps",
    },
    NAMESPACES[0],
];

/// Fails, saying what to do, unless this process runs as root with the
/// capabilities of the data path ([`DATA_PATH`]): AF_XDP sockets, XDP
/// programs and BPF maps need CAP_NET_ADMIN, CAP_BPF and CAP_SYS_ADMIN,
/// UMEM registration CAP_IPC_LOCK, test beds network namespaces.
pub fn require_root(what: &str) -> Result<()> {
    require_root_with(what, DATA_PATH)
}

/// [`require_root`] for what `needs` (e.g. [`TEST_BED`]) rather than the
/// data path's.
pub fn require_root_with(what: &str, needs: &[Need]) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::Setup(format!(
            "{what} needs root (CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN, CAP_IPC_LOCK: network namespaces, BPF, AF_XDP): run it with sudo"
        )));
    }
    require_capabilities(what, needs)
}

/// Fails, in one line naming each capability of `needs` missing from this
/// process's effective set and what it is for, and what to do. Where the
/// set cannot be read (no `/proc`), nothing is refused: the system calls
/// will say.
pub fn require_capabilities(what: &str, needs: &[Need]) -> Result<()> {
    let Some(effective) = effective_capabilities() else {
        return Ok(());
    };
    match missing(effective, needs) {
        None => Ok(()),
        Some(list) => Err(Error::Setup(format!(
            "{what} runs without {list}: give the process these capabilities back (systemd: \
             CapabilityBoundingSet= and AmbientCapabilities=; setpriv or capsh: do not drop \
             them) or run it as root with its full set (sudo)"
        ))),
    }
}

/// Descriptors a data path holds besides its queues' (the BPF program,
/// its maps and link, the port holds, the control and netlink sockets, the
/// standard streams): 17 in all were enough for two queues, measured.
const DESCRIPTORS_BASE: u64 = 32;

/// Descriptors per worker (its AF_XDP socket, its wake-ups).
const DESCRIPTORS_PER_WORKER: u64 = 4;

/// Makes sure this process may open what a data path of `workers` workers
/// needs: a soft open-files limit below it is raised to the hard one (as
/// the kernel backend raises it at start), and a hard one below it fails
/// in one line saying what to do (libbpf's and the kernel's own errors
/// say "Too many open files" or "failed to duplicate map file descriptor"
/// from wherever the limit was met).
pub fn require_descriptors(what: &str, workers: usize) -> Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let need = DESCRIPTORS_BASE + DESCRIPTORS_PER_WORKER * workers as u64;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return Ok(());
    };
    if soft >= need {
        return Ok(());
    }
    if hard >= need && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Ok(());
    }
    Err(Error::Setup(format!(
        "{what} needs about {need} open files for {workers} workers, and this process may open \
         {hard} (its hard limit): raise it (ulimit -n; LimitNOFILE= under systemd)"
    )))
}

/// The capabilities of `needs` missing from `effective` (a bit per
/// capability), said as a list, or None when none is.
fn missing(effective: u64, needs: &[Need]) -> Option<String> {
    let has = |cap: u32| effective & (1u64 << cap) != 0;
    let said: Vec<String> = needs
        .iter()
        .filter(|n| !has(n.cap) && !n.or.is_some_and(|(alt, _)| has(alt)))
        .map(|n| match n.or {
            Some((_, alt)) => format!("{} ({}; {alt} would stand for it)", n.name, n.purpose),
            None => format!("{} ({})", n.name, n.purpose),
        })
        .collect();
    (!said.is_empty()).then(|| said.join(", "))
}

/// This process's effective capability set (`CapEff` of
/// `/proc/self/status`, proc(5)).
fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_cap_eff(&status)
}

/// `CapEff`'s hexadecimal mask from the text of a `/proc/PID/status`.
fn parse_cap_eff(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: u64 = 0x0000_01ff_ffff_ffff;

    #[test]
    fn the_effective_set_is_read_from_proc_status() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                      CapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(ALL));
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
    }

    #[test]
    fn sys_admin_stands_for_bpf_and_net_admin_but_not_net_raw() {
        assert_eq!(missing(ALL, DATA_PATH), None);
        assert_eq!(missing(ALL & !(1 << CAP_BPF), DATA_PATH), None);
        assert_eq!(missing(ALL & !(1 << CAP_NET_ADMIN), DATA_PATH), None);
        let without = ALL & !(1 << CAP_BPF) & !(1 << CAP_SYS_ADMIN);
        let said = missing(without, DATA_PATH).unwrap();
        assert!(
            said.starts_with("CAP_BPF (loading the XDP program"),
            "{said}"
        );
        assert!(!said.contains("CAP_NET_ADMIN"), "{said}");
        let said = missing(ALL & !(1 << CAP_NET_RAW), DATA_PATH).unwrap();
        assert_eq!(said, "CAP_NET_RAW (AF_XDP sockets)");
        assert!(missing(0, DATA_PATH).unwrap().contains("CAP_NET_ADMIN"));
    }

    #[test]
    fn test_beds_need_net_admin_itself_and_no_net_raw() {
        assert_eq!(missing(ALL & !(1 << CAP_NET_RAW), TEST_BED), None);
        let said = missing(ALL & !(1 << CAP_NET_ADMIN), TEST_BED).unwrap();
        assert_eq!(said, "CAP_NET_ADMIN (veth pairs and tc programs)");
    }

    #[test]
    fn namespaces_need_sys_admin() {
        assert_eq!(missing(ALL, NAMESPACES), None);
        let said = missing(ALL & !(1 << CAP_SYS_ADMIN), NAMESPACES).unwrap();
        assert!(said.starts_with("CAP_SYS_ADMIN (entering"), "{said}");
    }
}
