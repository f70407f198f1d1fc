//! Reading the kernel's view of a network interface from sysfs and procfs
//! under configurable roots (`/sys`, `/proc` by default), so that the
//! commands built on it run unchanged on fake trees in tests.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use flowlane_dataplane::iface;
use flowlane_numa_sched::parse_cpu_list;

/// `--sysfs-root` / `--procfs-root`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Roots {
    /// Root of sysfs (a fake tree in tests).
    #[arg(long, default_value = "/sys", value_name = "DIR")]
    pub sysfs_root: PathBuf,
    /// Root of procfs (a fake tree in tests).
    #[arg(long, default_value = "/proc", value_name = "DIR")]
    pub procfs_root: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            sysfs_root: "/sys".into(),
            procfs_root: "/proc".into(),
        }
    }
}

/// What the commands that read an interface by `--iface` (`irq`, `plan`,
/// `nic caps`, `nic qstats`) say to do when this network namespace has no
/// such interface. They have no `--bed` (the services' way onto a test
/// bed): a bed's interfaces are read from inside its namespace.
pub(crate) const NOT_HERE: &str = "see `ip link`: use --iface NAME; on a test bed, run it inside \
                                   the bed's namespace: `ip netns exec flowlane-NAME flowlane ...`";

/// What sysfs says about an interface.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Iface {
    /// Interface name.
    pub name: String,
    /// Receive queues (`queues/rx-*`).
    pub rx_queues: u32,
    /// NUMA node of the device (`device/numa_node`; None for -1 or no device).
    pub numa_node: Option<u32>,
    /// MSI(-X) IRQs of the device (`device/msi_irqs/*`, for virtio-net its
    /// PCI parent's); None without that directory (virtual devices such as veth).
    pub msi_irqs: Option<Vec<u32>>,
}

impl Iface {
    /// The receive queues to plan for: `asked` (1 to all of the device's)
    /// or, not asked, all of them.
    ///
    /// # Errors
    /// The device has no receive queues, or fewer than asked.
    pub(crate) fn queues_to_plan(&self, asked: Option<u32>) -> Result<u32> {
        let have = self.rx_queues;
        match asked {
            _ if have == 0 => bail!(
                "{} has no receive queues (sysfs lists no queues/rx-*): nothing to plan",
                self.name
            ),
            Some(n) if n == 0 || n > have => bail!(
                "{} has {have} receive queues; asked for {n} (use --queues 1..={have})",
                self.name
            ),
            Some(n) => Ok(n),
            None => Ok(have),
        }
    }
}

impl Roots {
    /// Whether `<sysfs>/class/net/<name>/operstate` says `down` (RFC 2863's
    /// operational state: down by hand, or no link); false when it says
    /// otherwise or cannot be read.
    pub(crate) fn is_down(&self, name: &str) -> bool {
        std::fs::read_to_string(self.iface_dir(name).join("operstate"))
            .is_ok_and(|s| s.trim() == "down")
    }

    /// `<sysfs>/class/net/<name>`.
    pub(crate) fn iface_dir(&self, name: &str) -> PathBuf {
        self.sysfs_root.join("class/net").join(name)
    }

    /// `<sysfs>/class/net/<name>`, checked: a valid name of an interface
    /// in this network namespace, or the error that says what to do in
    /// these commands' terms ([`NOT_HERE`]).
    pub(crate) fn iface_dir_checked(&self, name: &str) -> Result<PathBuf> {
        Ok(iface::iface_dir_saying(&self.sysfs_root, name, NOT_HERE)?)
    }

    /// Reads `name`'s queue count, NUMA node and MSI IRQs (through the data
    /// path's interface reader, the one sysfs reader).
    pub(crate) fn iface(&self, name: &str) -> Result<Iface> {
        let dir = self.iface_dir_checked(name)?;
        let facts = iface::device_facts(&dir)?;
        Ok(Iface {
            name: name.to_string(),
            rx_queues: iface::count_queues(&dir, "rx-")?,
            numa_node: facts.numa_node,
            msi_irqs: facts.msi_irqs,
        })
    }

    /// `<procfs>/interrupts`.
    pub(crate) fn interrupts(&self) -> Result<String> {
        read(&self.procfs_root.join("interrupts"))
    }

    /// `<procfs>/irq/<irq>/smp_affinity_list`, relative path.
    pub(crate) fn irq_affinity_path(irq: u32) -> PathBuf {
        PathBuf::from(format!("irq/{irq}/smp_affinity_list"))
    }

    /// CPUs of `<procfs>/irq/<irq>/smp_affinity_list`.
    pub(crate) fn irq_affinity(&self, irq: u32) -> Result<Vec<u32>> {
        let p = self.procfs_root.join(Self::irq_affinity_path(irq));
        parse_cpu_list(&read(&p)?).with_context(|| format!("in {}", p.display()))
    }

    /// `(pid, comm)` of every process in procfs.
    pub(crate) fn comms(&self) -> Result<Vec<(u32, String)>> {
        let rd = std::fs::read_dir(&self.procfs_root)
            .with_context(|| format!("listing {}", self.procfs_root.display()))?;
        let mut out: Vec<(u32, String)> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                // Processes come and go while we look: skip the gone ones.
                let comm = std::fs::read_to_string(self.procfs_root.join(format!("{pid}/comm")));
                Some((pid, comm.ok()?.trim_end_matches('\n').to_string()))
            })
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// CPUs a task may run on (`Cpus_allowed_list` of `<procfs>/<pid>/status`).
    pub(crate) fn task_affinity(&self, pid: u32) -> Result<Vec<u32>> {
        let p = self.procfs_root.join(format!("{pid}/status"));
        let text = read(&p)?;
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .with_context(|| format!("{} has no Cpus_allowed_list", p.display()))?;
        parse_cpu_list(line).with_context(|| format!("in {}", p.display()))
    }

    /// `<sysfs>/class/net/<if>/threaded`: whether threaded NAPI is on.
    pub(crate) fn napi_threaded(&self, name: &str) -> Result<bool> {
        let p = self.iface_dir(name).join("threaded");
        // 0 off, 1 on; newer kernels add 2 (busy-poll threads): still threads.
        Ok(read(&p)?.trim() != "0")
    }
}

/// Reads a whole file, naming it on failure.
pub(crate) fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}
