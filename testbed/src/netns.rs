//! Network namespaces and iproute2: the effects the test bed is made of.

use std::fs::File;
use std::process::Command;

use anyhow::{bail, Context, Result};
use nix::sched::{setns, CloneFlags};
use serde::{Deserialize, Serialize};

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

/// A network namespace's identity, as `stat` of its `/run/netns` name
/// shows it: its nsfs inode (device and number) and the time that inode
/// was made. The number alone would not do: the kernel gives a removed
/// namespace's number to the next one made (a namespace deleted and one
/// added at once get the same one), so a bed made anew under a name would
/// pass for the one made before it. The inode lives as long as the name
/// holds it, so its change time stays that of the name's making.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsId {
    /// Device of the nsfs inode.
    pub dev: u64,
    /// Inode number (the namespace's).
    pub ino: u64,
    /// Change time of the inode, seconds.
    pub ctime_s: i64,
    /// Change time of the inode, nanoseconds within the second.
    pub ctime_ns: i64,
}

impl NsId {
    /// When the inode was made: when the namespace got its name (`ip
    /// netns add`), on the wall clock of then.
    pub fn made_at(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH
            + std::time::Duration::new(self.ctime_s.max(0) as u64, self.ctime_ns.max(0) as u32)
    }
}

/// The identity of the named namespace; `None` when it does not exist
/// (or cannot be read).
pub fn id(name: &str) -> Option<NsId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(std::path::Path::new("/run/netns").join(name)).ok()?;
    Some(NsId {
        dev: m.dev(),
        ino: m.ino(),
        ctime_s: m.ctime(),
        ctime_ns: m.ctime_nsec(),
    })
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

/// Fails, in one line, unless this process runs as root with what the
/// test beds' commands need (`privileges::TEST_BED`: CAP_NET_ADMIN, CAP_BPF
/// or CAP_SYS_ADMIN, and CAP_SYS_ADMIN for the namespaces).
pub fn require_bed_privileges(what: &str) -> Result<()> {
    use flowlane_dataplane::privileges::{require_root_with, TEST_BED};
    Ok(require_root_with(what, TEST_BED)?)
}

/// Fails, in one line, when this process lacks what making or entering a
/// network namespace needs (CAP_SYS_ADMIN: a root whose capabilities were
/// dropped would otherwise hear `ip netns`'s own "Operation not permitted").
pub fn require_namespaces(what: &str) -> Result<()> {
    use flowlane_dataplane::privileges::{require_capabilities, NAMESPACES};
    Ok(require_capabilities(what, NAMESPACES)?)
}

/// Refuses `what` (a command that reads or makes test beds) when this
/// process runs in another network namespace than the host's (one named
/// in `/run/netns`, or another than pid 1's): as `ip netns exec` runs it, it has a mount namespace of its own
/// with /sys mounted anew, where the beds' pinned maps are not, so a bed
/// that is up would be taken for half-made and made again over it. One
/// line naming the namespace (a bed's, where one is) and what to do.
pub fn require_host_namespace(what: &str) -> Result<()> {
    match namespace_elsewhere() {
        Some(name) => bail!("{}", elsewhere_message(what, name.as_deref())),
        None => Ok(()),
    }
}

/// Where this thread's network namespace is not the host's: `Some` with
/// its `/run/netns` name where it has one (as `ip netns exec` runs a
/// command: the host's namespace has no such name), or where pid 1's can
/// be read and is another.
fn namespace_elsewhere() -> Option<Option<String>> {
    use std::os::unix::fs::MetadataExt;
    let ns = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let own = ns("/proc/thread-self/ns/net".as_ref())?;
    let named = std::fs::read_dir("/run/netns").ok().and_then(|dir| {
        dir.filter_map(|e| e.ok())
            .find(|e| ns(&e.path()) == Some(own))
            .and_then(|e| e.file_name().into_string().ok())
    });
    if named.is_some() {
        return Some(named);
    }
    (ns("/proc/1/ns/net".as_ref())? != own).then_some(None)
}

/// The refusal of [`require_host_namespace`] for namespace `name`.
fn elsewhere_message(what: &str, name: Option<&str>) -> String {
    let here = match name {
        Some(n) => match n.strip_prefix("flowlane-") {
            Some(bed) => format!(
                "inside network namespace {n} (test bed {}'s)",
                bed.strip_suffix("-peer").unwrap_or(bed)
            ),
            None => format!("inside network namespace {n}"),
        },
        None => "inside a network namespace other than the host's".to_string(),
    };
    format!(
        "{what} runs from the host's network namespace, and this runs {here}, where the test \
         beds' pinned maps are not seen (`ip netns exec` mounts /sys anew): run it without \
         `ip netns exec`"
    )
}

/// Scratch namespaces for this crate's root tests.
#[cfg(test)]
pub(crate) mod scratch {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Whether the test runs as root; prints why it is skipped when not.
    pub(crate) fn root_or_skip(test: &str) -> bool {
        let root = nix::unistd::geteuid().is_root();
        if !root {
            eprintln!("skipping {test}: needs root (network namespaces, packet sockets, BPF)");
        }
        root
    }

    /// Keeps the calling thread on the CPU it runs on, so that frames it
    /// sends are handled in order (one CPU's backlog).
    pub(crate) fn pin_to_one_cpu() -> anyhow::Result<()> {
        let cpu = nix::sched::sched_getcpu()?;
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu)?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)?;
        Ok(())
    }

    /// A uniquely named network namespace, deleted (with its devices) on
    /// drop, whatever the test did.
    pub(crate) struct ScratchNs {
        pub(crate) name: String,
    }

    impl ScratchNs {
        /// Makes `flt-<tag>-<pid>-<n>`.
        pub(crate) fn new(tag: &str) -> ScratchNs {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = format!("flt-{tag}-{}-{n}", std::process::id());
            super::ip(&["netns", "add", &name]).expect("ip netns add");
            ScratchNs { name }
        }

        /// Runs `ip -n NS <args>`, panicking on failure.
        pub(crate) fn ip(&self, args: &[&str]) -> String {
            let mut all = vec!["-n", self.name.as_str()];
            all.extend_from_slice(args);
            super::ip(&all).expect("ip in the scratch namespace")
        }

        /// Makes a veth pair `a`/`b`, both up, without IPv6 addresses (so
        /// the kernel sends nothing on them).
        pub(crate) fn veth(&self, a: &str, b: &str) {
            self.ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
            for dev in [a, b] {
                self.ip(&["link", "set", "dev", dev, "addrgenmode", "none"]);
                self.ip(&["link", "set", "dev", dev, "up"]);
            }
        }

        /// A device's MAC address.
        pub(crate) fn mac(&self, dev: &str) -> [u8; 6] {
            let out = self.ip(&["-o", "link", "show", dev]);
            let mac = out
                .split_whitespace()
                .skip_while(|w| *w != "link/ether")
                .nth(1)
                .expect("a MAC address");
            flowlane_dataplane::iface::parse_mac(mac).expect("a valid MAC address")
        }
    }

    impl Drop for ScratchNs {
        fn drop(&mut self) {
            let _ = super::ip(&["netns", "del", &self.name]);
        }
    }
}

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

    /// Bed commands run from inside a namespace are refused, naming it
    /// (a bed's by its bed) and what to do; from the host's they run.
    #[test]
    fn bed_commands_run_from_the_host_s_namespace_only() {
        let m = elsewhere_message("flowlane testbed", Some("flowlane-b7-peer"));
        assert!(
            m.starts_with("flowlane testbed runs from the host's network namespace")
                && m.contains("inside network namespace flowlane-b7-peer (test bed b7's)")
                && m.ends_with("run it without `ip netns exec`"),
            "{m}"
        );
        let m = elsewhere_message("flowlane demo", Some("blue"));
        assert!(m.contains("inside network namespace blue,"), "{m}");
        let m = elsewhere_message("flowlane demo", None);
        assert!(m.contains("other than the host's"), "{m}");
        if !scratch::root_or_skip("bed_commands_run_from_the_host_s_namespace_only") {
            return;
        }
        require_host_namespace("flowlane testbed").unwrap();
        let ns = scratch::ScratchNs::new("hostns");
        let name = ns.name.clone();
        let e = in_netns(&ns.name, || Ok(require_host_namespace("flowlane testbed")))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("inside network namespace {name},")),
            "{e}"
        );
    }
}
