//! Applying numa-sched's IRQ affinity plan: the effects behind `flowlane irq`.
//!
//! A NIC with MSI(-X) vectors (`<sysfs>/class/net/<if>/device/msi_irqs`) has
//! one IRQ per receive queue, found by name in `<procfs>/interrupts`; each is
//! pointed at its queue's CPU through `<procfs>/irq/<n>/smp_affinity_list`.
//! A veth (no `msi_irqs`) has no queue IRQs: its analogue is threaded NAPI
//! (`<sysfs>/class/net/<if>/threaded`), one `napi/<if>-<id>` kthread per
//! queue, pinned with `sched_setaffinity`. Its pid comes from netdev
//! `napi-get` (Linux 6.8+) when the roots are this machine's; otherwise the
//! thread is found by name in `<procfs>/<pid>/comm`, which kernels before
//! 5.17 cut to 15 bytes.
//!
//! Everything is validated before anything is written: every target opened
//! for writing first (no permission → one error, nothing written); a write
//! that still fails (EIO on a kernel-managed IRQ) rolls back the ones made.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use flowlane_numa_sched::{
    format_cpu_list, match_queue_irqs, napi_threads_by_name, parse_proc_interrupts,
    plan_irq_affinity, plan_napi_threads, IrqInfo, IrqPlan, NicCaps, PlacementPlan, Topology,
};
use serde::Serialize;

use crate::sysroot::{Iface, Roots};
use flowlane_dataplane::placement::place_queues;

/// One threaded-NAPI kthread, now and planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct NapiThread {
    /// The receive queue it polls.
    pub queue: u16,
    /// Its NAPI id.
    pub napi_id: u32,
    /// `napi/<if>-<id>`.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// CPUs it may run on now.
    pub current: Vec<u32>,
    /// The queue's CPU.
    pub planned: u32,
}

impl NapiThread {
    /// Whether its affinity has to change.
    pub(crate) fn changes(&self) -> bool {
        self.current != [self.planned]
    }
}

/// How the interface's queues are interrupted, and the plan for them.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum QueueIrqs {
    /// MSI IRQs, one per queue.
    Msi {
        /// Current vs planned affinity per queue IRQ.
        plan: IrqPlan,
    },
    /// No queue IRQs (veth): threaded-NAPI kthreads instead.
    Napi {
        /// Whether `threaded` is on (off: there are no threads yet).
        threaded: bool,
        /// The threads found, by queue.
        threads: Vec<NapiThread>,
    },
}

/// What `irq show` shows and `irq apply` applies.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct IrqView {
    /// The interface.
    pub iface: Iface,
    /// Queue → CPU placement the plan follows.
    pub placement: PlacementPlan,
    /// Set when queues share CPUs (more queues than CPUs).
    pub shared: Option<String>,
    /// The queue interrupts and their plan.
    pub irqs: QueueIrqs,
}

/// Reads what the kernel's netdev family says of an interface (its NAPI
/// instances and their threads); `None` where it cannot be asked. The real
/// one is [`live_netdev`]; tests give their own.
pub(crate) type NetdevReader<'a> = &'a dyn Fn(&Roots, &str) -> Option<NicCaps>;

/// The interface's capabilities from the running kernel, when `roots` are
/// this machine's own `/sys` and `/proc` (against other trees the kernel's
/// answers, and its pids, would not be theirs); `None` otherwise or when
/// they cannot be read, and the NAPI threads are then found by name.
pub(crate) fn live_netdev(roots: &Roots, name: &str) -> Option<NicCaps> {
    if roots.sysfs_root != Path::new("/sys") || roots.procfs_root != Path::new("/proc") {
        return None;
    }
    crate::nic::caps::read(roots, name)
        .map_err(|e| tracing::debug!("{name}: netdev facts not read ({e:#}): NAPI threads by name"))
        .ok()
}

/// Reads the interface's queue interrupts (or NAPI threads) and plans them
/// onto the placement of `queues` queues (default: all of the device's) on
/// `topo`, within `budget` CPUs if given.
pub(crate) fn inspect(
    roots: &Roots,
    ifname: &str,
    topo: &Topology,
    queues: Option<u32>,
    budget: Option<&[u32]>,
) -> Result<IrqView> {
    inspect_with(roots, ifname, topo, queues, budget, &live_netdev)
}

/// [`inspect`], with the NAPI threads' pids from `netdev` where it names
/// them.
pub(crate) fn inspect_with(
    roots: &Roots,
    ifname: &str,
    topo: &Topology,
    queues: Option<u32>,
    budget: Option<&[u32]>,
    netdev: NetdevReader<'_>,
) -> Result<IrqView> {
    let iface = roots.iface(ifname)?;
    let queues = iface.queues_to_plan(queues)?;
    let placed = place_queues(topo, iface.numa_node, queues as usize, budget)?;
    let irqs = queue_irqs(roots, &iface, &placed.plan, netdev)?;
    Ok(IrqView {
        iface,
        placement: placed.plan,
        shared: placed.shared,
        irqs,
    })
}

/// The queue interrupts (or NAPI threads) of `iface`, planned onto
/// `placement`: the placement the caller made (`flowlane plan` with
/// `--nic-node`), not one made again here.
pub(crate) fn queue_irqs(
    roots: &Roots,
    iface: &Iface,
    placement: &PlacementPlan,
    netdev: NetdevReader<'_>,
) -> Result<QueueIrqs> {
    match &iface.msi_irqs {
        Some(msi) => msi_plan(roots, &iface.name, msi, placement),
        None => napi_plan(roots, iface, placement, netdev),
    }
}

/// An interface that is down, whose driver requests its queue IRQs only
/// when it comes up (i40e, ice: only `<driver>-<bdf>:misc` is there
/// before): nothing to plan yet, and nothing wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}; bring it up (`ip link set {iface} up`) to plan them", self.reason())]
pub(crate) struct QueueIrqsDown {
    /// The interface.
    pub iface: String,
    /// Its MSI IRQs.
    pub msi: usize,
    /// The names of those requested (its misc IRQ), at most three.
    pub named: Vec<String>,
}

impl QueueIrqsDown {
    /// Why there is no IRQ plan, without what to do.
    pub(crate) fn reason(&self) -> String {
        let now = if self.named.is_empty() {
            "none is requested now".to_string()
        } else {
            format!("only {} is requested now", self.named.join(", "))
        };
        format!(
            "{} is down, and its driver requests its queue IRQs only when it is up (of its {} MSI \
             IRQs {now})",
            self.iface, self.msi
        )
    }
}

fn msi_plan(
    roots: &Roots,
    ifname: &str,
    msi: &[u32],
    placement: &PlacementPlan,
) -> Result<QueueIrqs> {
    let names = parse_proc_interrupts(&roots.interrupts()?);
    let matched = match_queue_irqs(ifname, msi, &names);
    if matched.is_empty() {
        // Named, they are there (the interface is up) in a form not known;
        // unnamed, the driver requests them when the interface comes up.
        let seen: Vec<&str> = names
            .iter()
            .filter(|(irq, _)| msi.contains(irq))
            .map(|(_, n)| n.as_str())
            .take(3)
            .collect();
        if roots.is_down(ifname) {
            return Err(QueueIrqsDown {
                iface: ifname.to_string(),
                msi: msi.len(),
                named: seen.iter().map(|s| s.to_string()).collect(),
            }
            .into());
        }
        let hint = if seen.is_empty() {
            "is the interface up?".to_string()
        } else {
            format!(
                "they are named {} (not a form flowlane knows: report it, with the driver's name)",
                seen.join(", ")
            )
        };
        bail!(
            "none of {ifname}'s {} MSI IRQs is named like a receive queue in {} ({hint})",
            msi.len(),
            roots.procfs_root.join("interrupts").display()
        );
    }
    let mut infos = Vec::new();
    for (queue, irq) in matched {
        let name = names
            .iter()
            .find(|(n, _)| *n == irq)
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        infos.push((
            queue,
            IrqInfo {
                irq,
                name,
                current_affinity: roots.irq_affinity(irq)?,
            },
        ));
    }
    Ok(QueueIrqs::Msi {
        plan: plan_irq_affinity(&infos, placement),
    })
}

fn napi_plan(
    roots: &Roots,
    iface: &Iface,
    placement: &PlacementPlan,
    netdev: NetdevReader<'_>,
) -> Result<QueueIrqs> {
    let threaded = roots.napi_threaded(&iface.name)?;
    // `(queue, napi_id, pid)`: napi-get names each thread exactly; names are
    // the fallback.
    let found = match netdev(roots, &iface.name).map(|c| c.rx_napi_threads()) {
        Some(t) if !t.is_empty() => t,
        _ => napi_threads_in_procfs(roots, iface)?,
    };
    let ids: Vec<(u16, u32)> = found.iter().map(|&(q, id, _)| (q, id)).collect();
    let plan = plan_napi_threads(&iface.name, &ids, placement);
    let mut threads = Vec::new();
    for e in plan.entries {
        let Some(&(_, _, pid)) = found.iter().find(|f| f.0 == e.queue) else {
            continue;
        };
        threads.push(NapiThread {
            queue: e.queue,
            napi_id: e.napi_id,
            name: e.thread_name,
            pid,
            current: roots.task_affinity(pid)?,
            planned: e.cpu,
        });
    }
    Ok(QueueIrqs::Napi { threaded, threads })
}

/// `(queue, napi_id, pid)` of the interface's NAPI threads, found by name in
/// `<procfs>/<pid>/comm`.
fn napi_threads_in_procfs(roots: &Roots, iface: &Iface) -> Result<Vec<(u16, u32, u32)>> {
    let comms = roots.comms()?;
    let names: Vec<&str> = comms.iter().map(|(_, c)| c.as_str()).collect();
    let found = napi_threads_by_name(&iface.name, &names).map_err(|cut| {
        let what = if cut.tasks > 1 {
            format!("{} threads show as `{}`", cut.tasks, cut.comm)
        } else {
            format!("a thread shows as `{}`, its NAPI id cut off,", cut.comm)
        };
        anyhow::anyhow!(
            "{what} in {}/<pid>/comm: kernels before 5.17 cut thread names to 15 bytes, so the NAPI threads of {} cannot be told apart by name (and netdev napi-get, Linux 6.8+, named none); rename the interface so that `napi/<name>-<NAPI id>` fits in 15 bytes, or pin its NAPI threads by hand (taskset -pc CPU PID)",
            roots.procfs_root.display(),
            iface.name
        )
    })?;
    if found.len() > iface.rx_queues as usize {
        bail!(
            "found {} napi/{}-* threads for a device with {} queues: interfaces of this name in other network namespaces have threaded NAPI too, and their threads cannot be told apart by name",
            found.len(),
            iface.name,
            iface.rx_queues
        );
    }
    Ok(found
        .into_iter()
        .map(|(queue, id, i)| (queue, id, comms[i].0))
        .collect())
}

/// What `apply` did (or, dry, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Applied {
    /// Files written, relative to their root, with the value written.
    pub writes: Vec<(PathBuf, String)>,
    /// `(pid, cpu)` of NAPI threads pinned.
    pub pinned: Vec<(u32, u32)>,
    /// Whether threaded NAPI was switched on.
    pub enabled_threaded: bool,
}

/// Sets a task's CPU affinity (the real one is [`set_task_affinity`]; tests
/// record instead).
pub(crate) type AffinitySetter<'a> = &'a mut dyn FnMut(u32, &[u32]) -> Result<()>;

/// Applies the plan of `inspect(roots, ifname, topo, queues, budget)`:
/// writes the changed IRQ affinities, or switches threaded NAPI on and pins
/// the threads. With `dry_run`, reports what it would do and touches nothing.
/// Returns the view before the changes and what was done.
pub(crate) fn apply(
    roots: &Roots,
    ifname: &str,
    topo: &Topology,
    queues: Option<u32>,
    budget: Option<&[u32]>,
    dry_run: bool,
    set_affinity: AffinitySetter<'_>,
) -> Result<(IrqView, Applied)> {
    let view = inspect(roots, ifname, topo, queues, budget)?;
    let mut done = Applied::default();
    match &view.irqs {
        QueueIrqs::Msi { plan } => {
            done.writes = plan.writes();
            if !dry_run {
                let old: Vec<String> = plan
                    .entries
                    .iter()
                    .filter(|e| e.changes())
                    .map(|e| format_cpu_list(&e.current))
                    .collect();
                write_all(&roots.procfs_root, &done.writes, &old)?;
            }
        }
        QueueIrqs::Napi { threaded, threads } => {
            let mut threads = threads.clone();
            if !threaded {
                let rel = PathBuf::from(format!("class/net/{ifname}/threaded"));
                done.writes.push((rel, "1".into()));
                done.enabled_threaded = true;
                if dry_run {
                    return Ok((view, done));
                }
                write_all(&roots.sysfs_root, &done.writes, &["0".into()])?;
                // The kthreads exist once the write returns.
                match inspect(roots, ifname, topo, queues, budget) {
                    Ok(IrqView {
                        irqs: QueueIrqs::Napi { threads: t, .. },
                        ..
                    }) => threads = t,
                    Ok(_) => unreachable!("the device did not change"),
                    Err(e) => {
                        // Nothing is left half done: threaded NAPI goes off again.
                        let _ = write_all(
                            &roots.sysfs_root,
                            &[(done.writes[0].0.clone(), "0".into())],
                            &[],
                        );
                        return Err(e.context("threaded NAPI switched back off"));
                    }
                }
            }
            for (i, t) in threads.iter().enumerate().filter(|(_, t)| t.changes()) {
                done.pinned.push((t.pid, t.planned));
                if !dry_run {
                    if let Err(e) = set_affinity(t.pid, &[t.planned]) {
                        // Nothing is left half done (the caller records
                        // nothing to put back of a failed apply): the threads
                        // pinned so far go back, and threaded NAPI off again
                        // if this switched it on.
                        for u in threads[..i].iter().filter(|u| u.changes()) {
                            let _ = set_affinity(u.pid, &u.current);
                        }
                        if done.enabled_threaded {
                            let _ = write_all(
                                &roots.sysfs_root,
                                &[(done.writes[0].0.clone(), "0".into())],
                                &[],
                            );
                        }
                        return Err(e.context(format!(
                            "pinning {} (pid {}); the earlier pins were put back",
                            t.name, t.pid
                        )));
                    }
                }
            }
        }
    }
    Ok((view, done))
}

/// Writes `value` to each `root/path`: opens every target first (so that a
/// permission problem stops it before the first write), and if a write
/// fails, writes `old` back to the ones already written.
pub(crate) fn write_all(root: &Path, writes: &[(PathBuf, String)], old: &[String]) -> Result<()> {
    for (rel, _) in writes {
        let p = root.join(rel);
        if !p.is_file() {
            bail!("{} does not exist; nothing written", p.display());
        }
        open_for_write(&p)?;
    }
    for (i, (rel, value)) in writes.iter().enumerate() {
        if let Err(e) = write_one(&root.join(rel), value) {
            for ((rel, _), prev) in writes[..i].iter().zip(old) {
                let _ = write_one(&root.join(rel), prev);
            }
            return Err(e.context("earlier writes rolled back"));
        }
    }
    Ok(())
}

fn open_for_write(p: &Path) -> Result<std::fs::File> {
    OpenOptions::new().write(true).open(p).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            anyhow::anyhow!(
                "no permission to write {}: changing IRQ/NAPI affinity needs root; nothing written",
                p.display()
            )
        } else {
            anyhow::anyhow!(
                "cannot open {} for writing: {e}; nothing written",
                p.display()
            )
        }
    })
}

fn write_one(p: &Path, value: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(p)
        .with_context(|| format!("opening {}", p.display()))?;
    f.write_all(value.as_bytes())
        .with_context(|| format!("writing {value:?} to {}", p.display()))
}

/// Pins task `pid` to `cpus` (`sched_setaffinity`).
pub(crate) fn set_task_affinity(pid: u32, cpus: &[u32]) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c as usize)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid as i32), &set).map_err(|e| {
        if e == nix::errno::Errno::EPERM {
            anyhow::anyhow!("no permission to set the CPU affinity of pid {pid}: needs root")
        } else {
            anyhow::anyhow!("sched_setaffinity({pid}): {e}")
        }
    })
}

#[cfg(test)]
#[path = "irq_apply_tests.rs"]
mod tests;
