//! What `flowlane daemon --iface IF` does to a NIC it owns: reads what the
//! NIC can do, explains the plan against it, applies the plan (each receive
//! queue's IRQ, or on a device without IRQs its threaded-NAPI thread,
//! pinned to the CPU its worker is placed on; the RSS table spread evenly
//! over the queues where the NIC has one) and, when the daemon stops, puts
//! back what it changed.

use std::path::PathBuf;

use anyhow::{Context, Result};
use flowlane_dataplane::control_socket::NicReport;
use flowlane_numa_sched::plan_explain::{explain, Wanted};
use flowlane_numa_sched::{format_cpu_list, IndirectionTable, Topology};

use crate::irq_apply::{self, QueueIrqs};
use crate::nic::ethtool::EthtoolNic;
use crate::sysroot::Roots;

/// A NIC the daemon owns: its report, and how to undo the changes.
#[derive(Debug)]
pub(crate) struct Owned {
    /// What is reported on the metrics page and the daemon's socket.
    pub(crate) report: NicReport,
    undo: Undo,
    /// The interrupts were left because the NIC had none to pin yet (a
    /// veth before an XDP program gives it NAPI instances): tried again
    /// ([`Owned::retry_interrupts`]).
    interrupts_pending: bool,
}

/// What the daemon changed, as the values to write back.
#[derive(Debug, Default)]
struct Undo {
    /// procfs IRQ affinity files and their values before.
    irq_affinity: Vec<(PathBuf, String)>,
    /// The daemon switched threaded NAPI on (off again ends its threads).
    threaded_on: bool,
    /// NAPI threads pinned, with their CPUs before.
    napi_threads: Vec<(u32, Vec<u32>)>,
    /// The RSS table before the even spread.
    rss_table: Option<Vec<u32>>,
}

/// Reads `iface`, plans for one worker per receive queue on `topo` (within
/// `budget` CPUs) and applies the plan, or with `dry_run` only says what it
/// would change.
///
/// # Errors
/// The NIC cannot be read, or a change failed (the IRQ writes are rolled
/// back first; see `irq_apply`).
pub(crate) fn own(
    roots: &Roots,
    iface: &str,
    topo: &Topology,
    budget: Option<&[u32]>,
    dry_run: bool,
    restore_on_exit: bool,
) -> Result<Owned> {
    let caps = crate::nic::caps::read(roots, iface)?;
    let workers = caps.rx_queues.max(1);
    let table_size = caps.rss.as_ref().map_or(128, |r| r.table_size.max(1));
    let plan = explain(
        &caps,
        Wanted {
            workers,
            table_size,
        },
    );
    let mut undo = Undo::default();
    let mut changes = Vec::new();

    let msi = roots.iface(iface)?.msi_irqs.is_some();
    let interrupts_pending = !msi && caps.napis.is_empty();
    if interrupts_pending {
        changes.push(format!(
            "left {iface}'s interrupts for now: no IRQs and no NAPI instances yet (a veth has \
             NAPI only while an XDP program is attached: pinned once a service starts)"
        ));
    } else {
        pin_interrupts(roots, iface, topo, budget, dry_run, &mut changes, &mut undo)?;
    }

    if caps.rss.as_ref().is_some_and(|r| r.table_size > 0) && caps.rx_queues > 1 {
        if let Err(e) = spread_rss(iface, caps.rx_queues, dry_run, &mut changes, &mut undo) {
            // What this NIC got so far goes back before the error does.
            for line in undo.put_back(roots, iface, true) {
                tracing::warn!("{iface}: {line}");
            }
            return Err(e);
        }
    }
    if dry_run {
        undo = Undo::default();
    }
    Ok(Owned {
        report: NicReport {
            caps,
            workers,
            plan,
            dry_run,
            changes,
            restore_on_exit,
        },
        undo,
        interrupts_pending,
    })
}

/// Spreads the RSS table evenly over the `queues` receive queues where it
/// is not, noting the change and the table to put back.
fn spread_rss(
    iface: &str,
    queues: u32,
    dry_run: bool,
    changes: &mut Vec<String>,
    undo: &mut Undo,
) -> Result<()> {
    let nic = EthtoolNic::new(iface);
    let (now, _) = nic.read()?;
    let all: Vec<u16> = (0..queues as u16).collect();
    let even = IndirectionTable::even(now.table.len(), &all)?.to_queue_list();
    let moved = now.table.iter().zip(&even).filter(|(a, b)| a != b).count();
    if moved == 0 {
        return Ok(());
    }
    changes.push(format!(
        "{} the RSS table evenly over {queues} queues ({moved} of {} entries)",
        if dry_run { "would spread" } else { "spread" },
        even.len()
    ));
    if !dry_run {
        nic.write(None, Some(&even))?;
        undo.rss_table = Some(now.table);
    }
    Ok(())
}

/// Applies the IRQ (or NAPI-thread) part of the plan, noting each change
/// and how to undo it.
fn pin_interrupts(
    roots: &Roots,
    iface: &str,
    topo: &Topology,
    budget: Option<&[u32]>,
    dry_run: bool,
    changes: &mut Vec<String>,
    undo: &mut Undo,
) -> Result<()> {
    let would = if dry_run { "would pin" } else { "pinned" };
    let (view, done) = irq_apply::apply(
        roots,
        iface,
        topo,
        None,
        budget,
        dry_run,
        &mut irq_apply::set_task_affinity,
    )
    .with_context(|| format!("applying {iface}'s IRQ/NAPI plan"))?;
    match &view.irqs {
        QueueIrqs::Msi { plan } => {
            for e in plan.entries.iter().filter(|e| e.changes()) {
                changes.push(format!(
                    "{would} IRQ {} (queue {}) to CPU {} (was {})",
                    e.irq,
                    e.queue,
                    format_cpu_list(&e.planned),
                    format_cpu_list(&e.current)
                ));
                undo.irq_affinity.push((
                    PathBuf::from(format!("irq/{}/smp_affinity_list", e.irq)),
                    format_cpu_list(&e.current),
                ));
            }
        }
        QueueIrqs::Napi { threads, .. } => {
            if done.enabled_threaded {
                changes.push(format!(
                    "{} threaded NAPI on {iface}",
                    if dry_run { "would switch" } else { "switched" }
                ));
                undo.threaded_on = true;
            }
            for &(pid, cpu) in &done.pinned {
                changes.push(format!("{would} NAPI thread pid {pid} to CPU {cpu}"));
                if let Some(t) = threads.iter().find(|t| t.pid == pid) {
                    undo.napi_threads.push((pid, t.current.clone()));
                }
            }
        }
    }

    Ok(())
}

impl Owned {
    /// Whether interrupts left at start wait to be pinned.
    pub(crate) fn interrupts_pending(&self) -> bool {
        self.interrupts_pending
    }

    /// Pins the interrupts left at start if the NIC has NAPI instances
    /// now (a service attached its XDP program), noting the changes in the
    /// report. Returns whether the report changed.
    ///
    /// # Errors
    /// The NIC cannot be read, or the change failed (rolled back).
    pub(crate) fn retry_interrupts(
        &mut self,
        roots: &Roots,
        topo: &Topology,
        budget: Option<&[u32]>,
    ) -> Result<bool> {
        if !self.interrupts_pending {
            return Ok(false);
        }
        let iface = self.report.caps.iface.clone();
        let caps = crate::nic::caps::read(roots, &iface)?;
        if caps.napis.is_empty() {
            return Ok(false);
        }
        let dry_run = self.report.dry_run;
        let mut undo = Undo::default();
        pin_interrupts(
            roots,
            &iface,
            topo,
            budget,
            dry_run,
            &mut self.report.changes,
            &mut undo,
        )?;
        if !dry_run {
            self.undo.merge(undo);
        }
        self.report.plan = explain(
            &caps,
            Wanted {
                workers: self.report.workers,
                table_size: caps.rss.as_ref().map_or(128, |r| r.table_size.max(1)),
            },
        );
        self.report.caps = caps;
        self.interrupts_pending = false;
        Ok(true)
    }

    /// Puts back what [`own`] changed. The RSS table stays when a running
    /// service uses the NIC (`in_use`): it may have moved buckets since.
    /// Returns a line per thing put back or left, errors included (the
    /// daemon is stopping: nothing is left to retry).
    pub(crate) fn restore(self, roots: &Roots, in_use: bool) -> Vec<String> {
        self.undo.put_back(roots, &self.report.caps.iface, in_use)
    }
}

impl Undo {
    /// Adds what `later` changed (interrupts pinned after the start).
    fn merge(&mut self, later: Undo) {
        self.irq_affinity.extend(later.irq_affinity);
        self.threaded_on |= later.threaded_on;
        self.napi_threads.extend(later.napi_threads);
        if self.rss_table.is_none() {
            self.rss_table = later.rss_table;
        }
    }

    /// Writes back what it holds for `iface`; see [`Owned::restore`].
    fn put_back(self, roots: &Roots, iface: &str, in_use: bool) -> Vec<String> {
        let mut said = Vec::new();
        if !self.irq_affinity.is_empty() {
            said.push(
                match irq_apply::write_all(&roots.procfs_root, &self.irq_affinity, &[]) {
                    Ok(()) => format!("put back {} IRQ affinities", self.irq_affinity.len()),
                    Err(e) => format!("IRQ affinities not put back: {e:#}"),
                },
            );
        }
        if self.threaded_on {
            let rel = PathBuf::from(format!("class/net/{iface}/threaded"));
            said.push(
                match irq_apply::write_all(&roots.sysfs_root, &[(rel, "0".into())], &[]) {
                    Ok(()) => format!("switched threaded NAPI off on {iface}"),
                    Err(e) => format!("threaded NAPI left on: {e:#}"),
                },
            );
        } else {
            for (pid, cpus) in &self.napi_threads {
                said.push(match irq_apply::set_task_affinity(*pid, cpus) {
                    Ok(()) => format!(
                        "put NAPI thread pid {pid} back on CPUs {}",
                        format_cpu_list(cpus)
                    ),
                    Err(e) => format!("NAPI thread pid {pid} not put back: {e:#}"),
                });
            }
        }
        if let Some(table) = self.rss_table {
            if in_use {
                said.push(format!(
                    "left {iface}'s RSS table as it is: a running service uses {iface}"
                ));
            } else {
                said.push(match EthtoolNic::new(iface).write(None, Some(&table)) {
                    Ok(_) => format!("put {iface}'s RSS table back"),
                    Err(e) => format!("{iface}'s RSS table not put back: {e:#}"),
                });
            }
        }
        said
    }
}
