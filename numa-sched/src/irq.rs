//! IRQ affinity planning: which CPU takes each receive queue's interrupt.
//!
//! Pure: it parses text the edge read (`/proc/interrupts`, `smp_affinity_list`) and returns
//! the writes to make (`/proc/irq/<n>/smp_affinity_list`, Documentation/core-api/irq/
//! irq-affinity.rst). Writes to kernel-managed IRQs fail with EIO, and irqbalance rewrites
//! affinities behind our back: both are the edge's to handle (stop or ban irqbalance).
//!
//! On the veth test bed there are no queue IRQs; threaded NAPI kthreads play their part
//! ([`plan_napi_threads`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::placement::PlacementPlan;

/// What the edge knows of one interrupt.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct IrqInfo {
    /// IRQ number.
    pub irq: u32,
    /// Action name(s), the last column of `/proc/interrupts`.
    pub name: String,
    /// CPUs from `/proc/irq/<irq>/smp_affinity_list`.
    pub current_affinity: Vec<u32>,
}

/// Parses `/proc/interrupts`: `(irq, name)` for every numbered IRQ line.
///
/// The name is the last column: the action names, kept whole when several actions share
/// the IRQ (`"ehci_hcd:usb1, i801_smbus"`). Lines of named counters (`NMI:`, `LOC:`, ...),
/// the header, blank or malformed lines and IRQs without an action name are skipped.
#[must_use]
pub fn parse_proc_interrupts(text: &str) -> Vec<(u32, String)> {
    let mut lines = text.lines().peekable();
    // The header names one column per CPU ("CPU0 CPU1 ..."); counts come first on each line.
    let cpus = match lines.peek() {
        Some(header) if header.trim_start().starts_with("CPU") => {
            let n = header.split_whitespace().count();
            lines.next();
            Some(n)
        }
        _ => None,
    };
    let mut irqs = Vec::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let Ok(irq) = label.trim().parse::<u32>() else {
            continue;
        };
        let tokens: Vec<&str> = rest.split_whitespace().collect();
        let counts = tokens
            .iter()
            .take(cpus.unwrap_or(usize::MAX))
            .take_while(|t| t.parse::<u64>().is_ok())
            .count();
        let columns = &tokens[counts..];
        // At least an interrupt chip column and a name column.
        if columns.len() < 2 {
            continue;
        }
        let mut first = columns.len() - 1;
        while first > 1 && columns[first - 1].ends_with(',') {
            first -= 1;
        }
        irqs.push((irq, columns[first..].join(" ")));
    }
    irqs
}

/// CPU numbers accepted by [`parse_cpu_list`] are below this (it bounds what a malformed
/// range can make the parser allocate).
pub const MAX_CPUS: u32 = 65536;

/// Parses a kernel CPU list (`"0-3,8,10-11"`, also the `"0-15:2/4"` stride form of
/// `bitmap_parselist`): sorted, without duplicates. Surrounding whitespace (the trailing
/// newline of a sysfs file) is ignored; an empty list is empty.
///
/// # Errors
/// [`Error::CpuList`] naming what is wrong.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>> {
    let err = |reason| Error::CpuList {
        input: text.to_owned(),
        reason,
    };
    let number = |s: &str| s.trim().parse::<u32>().map_err(|_| err("not a CPU number"));
    let cpu = |s: &str| {
        number(s).and_then(|n| {
            if n < MAX_CPUS {
                Ok(n)
            } else {
                Err(err(
                    "CPU number above 65535 (Linux's NR_CPUS is at most 8192)",
                ))
            }
        })
    };
    let mut cpus = BTreeSet::new();
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    for item in trimmed.split(',') {
        let (range, stride) = match item.split_once(':') {
            Some((range, stride)) => (range, Some(stride)),
            None => (item, None),
        };
        let (start, end) = match range.split_once('-') {
            Some((a, b)) => (cpu(a)?, cpu(b)?),
            None => {
                let n = cpu(range)?;
                (n, n)
            }
        };
        if start > end {
            return Err(err("a range ends before it starts"));
        }
        let (used, group) = match stride {
            Some(s) => {
                let (u, g) = s
                    .split_once('/')
                    .ok_or_else(|| err("stride must be used/group"))?;
                (number(u)?, number(g)?)
            }
            None => (1, 1),
        };
        if used == 0 || group == 0 || used > group {
            return Err(err("stride needs 0 < used <= group"));
        }
        cpus.extend((start..=end).filter(|cpu| (cpu - start) % group < used));
    }
    Ok(cpus.into_iter().collect())
}

/// Formats CPUs as a kernel CPU list (`"0-3,8,10-11"`), the form `smp_affinity_list` takes.
#[must_use]
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let set: BTreeSet<u32> = cpus.iter().copied().collect();
    let mut out = String::new();
    let mut iter = set.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while let Some(next) = iter.next_if(|&n| Some(n) == end.checked_add(1)) {
            end = next;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
    }
    out
}

/// Finds the receive queue IRQs of interface `ifname` among `names` (from
/// [`parse_proc_interrupts`]), as `(queue, irq)` by queue.
///
/// Recognized names (driver in parentheses):
/// - `<if>-TxRx-<n>`, also with a driver prefix, `i40e-<if>-TxRx-<n>` (ixgbe, igb, i40e,
///   ice, bnxt);
/// - `<if>-Tx-Rx-<n>` (ena, AWS);
/// - `<if>-rx-<n>` (drivers with separate RX and TX vectors; `<if>-tx-<n>` is not a queue
///   IRQ for RSS);
/// - `<if>-<n>` (sfc and others);
/// - `mlx5_comp<n>@pci:<bdf>` (mlx5), `hns3-<bdf>-TxRx-<n>` (hns3) and
///   `virtio<k>-input.<n>` (virtio-net), which do not name the interface: recognized only for
///   IRQs in `msi_irqs`
///   (`/sys/class/net/<if>/device/msi_irqs/`).
///
/// When `msi_irqs` is not empty, only those IRQs are considered. When a queue matches
/// several IRQs, the lowest-numbered one is kept.
#[must_use]
pub fn match_queue_irqs(
    ifname: &str,
    msi_irqs: &[u32],
    names: &[(u32, String)],
) -> Vec<(u16, u32)> {
    let device: BTreeSet<u32> = msi_irqs.iter().copied().collect();
    let mut by_queue: BTreeMap<u16, u32> = BTreeMap::new();
    for (irq, name) in names {
        let of_device = device.contains(irq);
        if !device.is_empty() && !of_device {
            continue;
        }
        let queue = name
            .split(", ")
            .find_map(|action| queue_of_action(ifname, action, of_device));
        if let Some(q) = queue {
            let slot = by_queue.entry(q).or_insert(*irq);
            *slot = (*slot).min(*irq);
        }
    }
    by_queue.into_iter().collect()
}

/// The queue number one IRQ action name stands for, if it is a receive queue of `ifname`.
fn queue_of_action(ifname: &str, action: &str, of_device: bool) -> Option<u16> {
    if of_device {
        if let Some(rest) = action.strip_prefix("mlx5_comp") {
            let (n, _pci) = rest.split_once('@')?;
            return parse_queue(n);
        }
        if let Some(rest) = action.strip_prefix("virtio") {
            let (_dev, n) = rest.split_once("-input.")?;
            return parse_queue(n);
        }
        if let Some(rest) = action.strip_prefix("hns3-") {
            let (_pci, n) = rest.rsplit_once("-TxRx-")?;
            return parse_queue(n);
        }
    }
    let (head, n) = action.rsplit_once('-')?;
    let queue = parse_queue(n)?;
    let named = |suffix: &str| {
        let full = format!("{ifname}{suffix}");
        head == full || head.ends_with(&format!("-{full}"))
    };
    (head == ifname || named("-TxRx") || named("-Tx-Rx") || named("-rx")).then_some(queue)
}

fn parse_queue(digits: &str) -> Option<u16> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One queue IRQ's affinity, before and after.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct IrqAffinityChange {
    /// IRQ number.
    pub irq: u32,
    /// The receive queue it serves.
    pub queue: u16,
    /// CPUs it may run on now (sorted).
    pub current: Vec<u32>,
    /// CPUs it should run on (the queue's CPU).
    pub planned: Vec<u32>,
}

impl IrqAffinityChange {
    /// Whether the affinity has to be written.
    #[must_use]
    pub fn changes(&self) -> bool {
        self.current != self.planned
    }
}

/// IRQ affinities for every placed queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct IrqPlan {
    /// One entry per queue IRQ whose queue has a placement, by queue.
    pub entries: Vec<IrqAffinityChange>,
    /// `(queue, irq)` of queue IRQs whose queue the placement does not cover (more channels
    /// than planned queues); left as they are.
    pub unplaced: Vec<(u16, u32)>,
}

impl IrqPlan {
    /// The procfs writes that apply the plan, for the IRQs whose affinity changes only:
    /// `("irq/<n>/smp_affinity_list", "<cpu list>")`, paths relative to the procfs root.
    #[must_use]
    pub fn writes(&self) -> Vec<(PathBuf, String)> {
        self.entries
            .iter()
            .filter(|e| e.changes())
            .map(|e| {
                (
                    PathBuf::from(format!("irq/{}/smp_affinity_list", e.irq)),
                    format_cpu_list(&e.planned),
                )
            })
            .collect()
    }
}

impl fmt::Display for IrqPlan {
    /// A table of IRQ, queue, current and planned CPUs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>6} {:>5} {:>16} {:>16}",
            "irq", "queue", "current", "planned"
        )?;
        for e in &self.entries {
            writeln!(
                f,
                "{:>6} {:>5} {:>16} {:>16}{}",
                e.irq,
                e.queue,
                format_cpu_list(&e.current),
                format_cpu_list(&e.planned),
                if e.changes() { "  *" } else { "" }
            )?;
        }
        for (queue, irq) in &self.unplaced {
            writeln!(
                f,
                "note: IRQ {irq} of queue {queue} is left alone: the queue is not placed"
            )?;
        }
        Ok(())
    }
}

/// Plans each queue IRQ onto its queue's CPU.
#[must_use]
pub fn plan_irq_affinity(queue_irqs: &[(u16, IrqInfo)], placement: &PlacementPlan) -> IrqPlan {
    let mut plan = IrqPlan {
        entries: Vec::new(),
        unplaced: Vec::new(),
    };
    for (queue, info) in queue_irqs {
        match placement.get(*queue) {
            Some(p) => {
                let mut current = info.current_affinity.clone();
                current.sort_unstable();
                current.dedup();
                plan.entries.push(IrqAffinityChange {
                    irq: info.irq,
                    queue: *queue,
                    current,
                    planned: vec![p.cpu],
                });
            }
            None => plan.unplaced.push((*queue, info.irq)),
        }
    }
    plan.entries.sort_by_key(|e| (e.queue, e.irq));
    plan
}

/// Longest thread name `/proc/<pid>/comm` showed for kthreads before Linux 5.17
/// (`TASK_COMM_LEN` − 1); later kernels show kthread names in full.
pub const TASK_COMM_MAX: usize = 15;

/// The name of the threaded-NAPI kthread of NAPI instance `napi_id` of `ifname`:
/// `napi/<if>-<napi_id>` (net/core/dev.c, `napi_kthread_create`). The number is the NAPI id,
/// not the queue index.
#[must_use]
pub fn napi_thread_name(ifname: &str, napi_id: u32) -> String {
    format!("napi/{ifname}-{napi_id}")
}

/// The NAPI id in a threaded-NAPI kthread name of `ifname`, if `comm` is one in full.
///
/// A `comm` of exactly [`TASK_COMM_MAX`] bytes is `None`: kernels before 5.17 cut longer
/// names there (`napi/veth-fl0-8197` shows as `napi/veth-fl0-8`), so its digits may be only
/// the start of the id ([`napi_thread_name_cut`] tells such names).
#[must_use]
pub fn parse_napi_thread_name(ifname: &str, comm: &str) -> Option<u32> {
    if comm.len() == TASK_COMM_MAX {
        return None;
    }
    let id = comm
        .strip_prefix("napi/")?
        .strip_prefix(ifname)?
        .strip_prefix('-')?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

/// Whether `comm` may be the name of a threaded-NAPI kthread of `ifname` cut to
/// [`TASK_COMM_MAX`] bytes, as kernels before 5.17 show it: exactly that long, and the start
/// of `napi/<if>-<digits>` (cut within the name, or within the id).
#[must_use]
pub fn napi_thread_name_cut(ifname: &str, comm: &str) -> bool {
    if comm.len() != TASK_COMM_MAX {
        return false;
    }
    let prefix = format!("napi/{ifname}-");
    match comm.strip_prefix(prefix.as_str()) {
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => prefix.starts_with(comm),
    }
}

/// `(queue, napi_id)` from the NAPI kthread names of `ifname`, assuming NAPI ids grow with
/// the queue index: true for veth, which registers one NAPI per receive queue in queue order
/// (`veth_napi_add_range`), but only a heuristic elsewhere. The exact mapping is in the
/// netdev netlink family (`queue-get`: `napi-id` per RX queue, Linux 6.8+). Names that may
/// be cut ([`parse_napi_thread_name`]) are left out; [`napi_threads_by_name`] tells apart
/// those it can.
#[must_use]
pub fn napi_ids_in_queue_order(ifname: &str, comms: &[&str]) -> Vec<(u16, u32)> {
    let ids: BTreeSet<u32> = comms
        .iter()
        .filter_map(|c| parse_napi_thread_name(ifname, c))
        .collect();
    (0..=u16::MAX).zip(ids).collect()
}

/// NAPI kthread names of an interface that cannot be told apart: several tasks show the same
/// name cut to [`TASK_COMM_MAX`] bytes, a cut name keeps no digit of the NAPI id, or names
/// of that length cannot be put in the order of their ids (their ids crossed a power of
/// ten where the names are cut: NAPI 9999 of `vethA` shows as `napi/vethA-9999`, NAPI
/// 10000 as `napi/vethA-1000`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutNapiNames {
    /// The name as `/proc/<pid>/comm` shows it.
    pub comm: String,
    /// How many tasks show it.
    pub tasks: usize,
}

/// `(queue, napi_id, i)` for each threaded-NAPI kthread of `ifname` among `comms` (the
/// `/proc/<pid>/comm` of every task; `i` is the thread's index there), queues given in the
/// order of NAPI ids as in [`napi_ids_in_queue_order`]. A name of [`TASK_COMM_MAX`] bytes
/// that no other task shows still names one thread: its digits are taken for its NAPI id
/// (the id itself when the name was not cut, as on kernels since 5.17; the order of the ids
/// is kept while they have as many digits).
///
/// Whether such a name was cut does not show, so names of that length whose ids have more
/// digits than fit (cut) and names whose ids fit exactly (whole) would be put out of order:
/// the cut ones sort first. The interface's NAPIs are registered together, so their ids lie
/// close together, and such a mix shows as digits that span more than half the range of
/// numbers with as many digits (ids just below a power of ten next to ids just past it,
/// which show as `1000…`): refused.
///
/// # Errors
/// [`CutNapiNames`] when several tasks show one cut name, a cut name keeps no digit of the
/// id, or the cut names' digits span more than half their range (`comm`: the name with the
/// smallest digits, the one cut from a longer id): which queue each thread serves cannot be
/// told by name then.
pub fn napi_threads_by_name(
    ifname: &str,
    comms: &[&str],
) -> Result<Vec<(u16, u32, usize)>, CutNapiNames> {
    let prefix = format!("napi/{ifname}-");
    let mut found: Vec<(u32, usize)> = Vec::new();
    // The names of `TASK_COMM_MAX` bytes, by their digits.
    let mut cut: BTreeMap<u32, &str> = BTreeMap::new();
    for (i, comm) in comms.iter().enumerate() {
        let comm = comm.trim_end_matches('\n');
        if let Some(id) = parse_napi_thread_name(ifname, comm) {
            found.push((id, i));
            continue;
        }
        if !napi_thread_name_cut(ifname, comm) {
            continue;
        }
        let tasks = comms
            .iter()
            .filter(|c| c.trim_end_matches('\n') == comm)
            .count();
        match comm.strip_prefix(prefix.as_str()).map(str::parse) {
            Some(Ok(id)) if tasks == 1 => {
                found.push((id, i));
                cut.insert(id, comm);
            }
            _ => {
                return Err(CutNapiNames {
                    comm: comm.to_string(),
                    tasks,
                })
            }
        }
    }
    if let (Some((&low, &comm)), Some((&high, _))) = (cut.first_key_value(), cut.last_key_value()) {
        // Numbers of `digits` digits: 10^(digits−1) to 10^digits − 1.
        let digits = TASK_COMM_MAX.saturating_sub(prefix.len()) as u32;
        let range = 9 * 10u64.saturating_pow(digits.saturating_sub(1));
        if 2 * u64::from(high - low) > range {
            return Err(CutNapiNames {
                comm: comm.to_string(),
                tasks: 1,
            });
        }
    }
    found.sort_unstable();
    Ok((0..=u16::MAX)
        .zip(found)
        .map(|(queue, (id, i))| (queue, id, i))
        .collect())
}

/// Where one NAPI kthread should run.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct NapiThreadAffinity {
    /// The receive queue it polls.
    pub queue: u16,
    /// Its NAPI id.
    pub napi_id: u32,
    /// Its full name, `napi/<if>-<id>`.
    pub thread_name: String,
    /// The queue's CPU.
    pub cpu: u32,
}

impl NapiThreadAffinity {
    /// Whether `comm` (from `/proc/<pid>/comm`) names this thread: in full, or cut to
    /// [`TASK_COMM_MAX`] bytes as kernels before 5.17 show it.
    #[must_use]
    pub fn matches_comm(&self, comm: &str) -> bool {
        let comm = comm.trim_end_matches('\n');
        comm == self.thread_name
            || (comm.len() == TASK_COMM_MAX
                && self.thread_name.as_bytes().starts_with(comm.as_bytes()))
    }
}

/// NAPI kthread affinities for the veth test bed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct NapiPlan {
    /// One entry per placed queue, by queue.
    pub entries: Vec<NapiThreadAffinity>,
    /// `(queue, napi_id)` of NAPI instances whose queue is not placed.
    pub unplaced: Vec<(u16, u32)>,
}

impl fmt::Display for NapiPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:>5} {:>24} {:>5}", "queue", "thread", "cpu")?;
        for e in &self.entries {
            writeln!(f, "{:>5} {:>24} {:>5}", e.queue, e.thread_name, e.cpu)?;
        }
        for (queue, id) in &self.unplaced {
            writeln!(
                f,
                "note: NAPI {id} of queue {queue} is left alone: the queue is not placed"
            )?;
        }
        Ok(())
    }
}

/// Maps the threaded-NAPI kthreads of `ifname` (given as `(queue, napi_id)`) to their
/// queues' CPUs: the test bed's analogue of [`plan_irq_affinity`]. The edge finds the pids by
/// name ([`NapiThreadAffinity::matches_comm`]) and sets their affinity.
#[must_use]
pub fn plan_napi_threads(
    ifname: &str,
    queues: &[(u16, u32)],
    placement: &PlacementPlan,
) -> NapiPlan {
    let mut plan = NapiPlan {
        entries: Vec::new(),
        unplaced: Vec::new(),
    };
    for &(queue, napi_id) in queues {
        match placement.get(queue) {
            Some(p) => plan.entries.push(NapiThreadAffinity {
                queue,
                napi_id,
                thread_name: napi_thread_name(ifname, napi_id),
                cpu: p.cpu,
            }),
            None => plan.unplaced.push((queue, napi_id)),
        }
    }
    plan.entries.sort_by_key(|e| e.queue);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::plan_placement;
    use crate::topology::Topology;
    use proptest::prelude::*;

    const X86: &str = "            CPU0       CPU1       CPU2       CPU3       \n\
   0:         44          0          0          0   IO-APIC   2-edge      timer\n\
   8:          0          0          0          1   IO-APIC   8-edge      rtc0\n\
  16:         29          0          0          0   IO-APIC  16-fasteoi   ehci_hcd:usb1, i801_smbus\n\
  24:          0          0          0          0  PCI-MSI 65536-edge      virtio0-config\n\
  25:      12345          0          0          0  PCI-MSI 65537-edge      virtio0-input.0\n\
  26:          1          0          0          0  PCI-MSI 65538-edge      virtio0-output.0\n\
  27:          0       9876          0          0  PCI-MSI 65539-edge      virtio0-input.1\n\
  40:          0          0          0          0  IR-PCI-MSI 524288-edge      eth0\n\
  41:        100        200          0          0  IR-PCI-MSI 524289-edge      eth0-TxRx-0\n\
  42:        100        200          0          0  IR-PCI-MSI 524290-edge      eth0-TxRx-1\n\
  43:          5          0          0          0  IR-PCI-MSI 524291-edge      veth0-TxRx-7\n\
  50:          0          0          0          0  IR-PCI-MSI 1048576-edge      i40e-0000:3b:00.0:misc\n\
  51:          0          0          0          0  IR-PCI-MSI 1048577-edge      i40e-ens1f0-TxRx-0\n\
  52:          0          0          0          0  IR-PCI-MSI 1048578-edge      i40e-ens1f0-TxRx-1\n\
  60:          0          0          0          0  IR-PCI-MSI 2097152-edge      mlx5_async0@pci:0000:5e:00.0\n\
  61:          0          0          0          0  IR-PCI-MSI 2097153-edge      mlx5_comp0@pci:0000:5e:00.0\n\
  62:          0          0          0          0  IR-PCI-MSI 2097154-edge      mlx5_comp1@pci:0000:5e:00.0\n\
  70:          0          0          0          0  PCI-MSI 3000-edge      fl-0-0\n\
  71:          0          0          0          0  PCI-MSI 3001-edge      fl-0-rx-1\n\
  72:          0          0          0          0  PCI-MSI 3002-edge      fl-0-tx-1\n\
  73:          0          0\n\
 NMI:          0          0          0          0   Non-maskable interrupts\n\
 LOC:     123456     234567     345678     456789   Local timer interrupts\n\
 ERR:          0\n\
 MIS:          0\n\
garbage line without colon\n\
 xx: 1 2 3 a b\n\
\n";

    #[test]
    fn parses_proc_interrupts() {
        let irqs = parse_proc_interrupts(X86);
        let get = |n: u32| irqs.iter().find(|(i, _)| *i == n).map(|(_, s)| s.as_str());
        assert_eq!(get(0), Some("timer"));
        assert_eq!(get(16), Some("ehci_hcd:usb1, i801_smbus"));
        assert_eq!(get(25), Some("virtio0-input.0"));
        assert_eq!(get(61), Some("mlx5_comp0@pci:0000:5e:00.0"));
        assert_eq!(get(73), None);
        assert_eq!(irqs.len(), 20);
        // ARM GIC layout, no header.
        let arm = " 11:     123     456     GICv3  27 Level     arch_timer\n\
                   104:       0       0  ITS-MSI 524288 Edge      eth0-rx-3\n";
        assert_eq!(
            parse_proc_interrupts(arm),
            vec![(11, "arch_timer".to_owned()), (104, "eth0-rx-3".to_owned())]
        );
        assert!(parse_proc_interrupts("").is_empty());
    }

    #[test]
    fn matches_driver_naming() {
        let names = parse_proc_interrupts(X86);
        assert_eq!(
            match_queue_irqs("eth0", &[], &names),
            vec![(0, 41), (1, 42)]
        );
        assert_eq!(
            match_queue_irqs("ens1f0", &[], &names),
            vec![(0, 51), (1, 52)]
        );
        assert_eq!(
            match_queue_irqs("fl-0", &[], &names),
            vec![(0, 70), (1, 71)]
        );
        // Names without the interface need the device's MSI list.
        assert!(match_queue_irqs("enp94s0", &[], &names).is_empty());
        assert_eq!(
            match_queue_irqs("enp94s0", &[60, 61, 62], &names),
            vec![(0, 61), (1, 62)]
        );
        assert_eq!(
            match_queue_irqs("ens3", &[24, 25, 26, 27], &names),
            vec![(0, 25), (1, 27)]
        );
        // The MSI list also excludes same-named IRQs of other devices.
        assert_eq!(match_queue_irqs("eth0", &[42], &names), vec![(1, 42)]);
        // "veth0-TxRx-7" is not eth0's.
        assert_eq!(match_queue_irqs("veth0", &[], &names), vec![(7, 43)]);
        let dup = vec![(90, "eth9-TxRx-0".to_owned()), (80, "eth9-rx-0".to_owned())];
        assert_eq!(match_queue_irqs("eth9", &[], &dup), vec![(0, 80)]);
        // ena names the interface with `-Tx-Rx-`; hns3 names the PCI device only.
        let ena = vec![
            (40, "eth0-Tx-Rx-0".to_owned()),
            (41, "eth0-Tx-Rx-1".to_owned()),
            (39, "ena-mgmnt@pci:0000:00:05.0".to_owned()),
        ];
        assert_eq!(
            match_queue_irqs("eth0", &[39, 40, 41], &ena),
            vec![(0, 40), (1, 41)]
        );
        let hns3 = vec![
            (70, "hns3-0000:7d:00.0-TxRx-0".to_owned()),
            (71, "hns3-0000:7d:00.0-TxRx-1".to_owned()),
            (72, "hns3-0000:7d:00.1-TxRx-0".to_owned()),
        ];
        assert_eq!(
            match_queue_irqs("eno1", &[70, 71], &hns3),
            vec![(0, 70), (1, 71)]
        );
        assert_eq!(match_queue_irqs("eno1", &[], &hns3), vec![]);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list(" 5 ").unwrap(), vec![5]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(
            parse_cpu_list("0-15:2/4").unwrap(),
            vec![0, 1, 4, 5, 8, 9, 12, 13]
        );
        assert_eq!(parse_cpu_list("3,1-2,2").unwrap(), vec![1, 2, 3]);
        for bad in [
            "3-1",
            "a",
            "1,,2",
            "1-",
            "0-7:0/4",
            "0-7:5/4",
            "0-7:2",
            "-1",
            "0-4294967295",
        ] {
            assert!(
                matches!(parse_cpu_list(bad), Err(Error::CpuList { .. })),
                "{bad:?} accepted"
            );
        }
        assert_eq!(format_cpu_list(&[11, 0, 1, 2, 3, 8, 10, 3]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(
            format_cpu_list(&[u32::MAX - 1, u32::MAX]),
            format!("{}-{}", u32::MAX - 1, u32::MAX)
        );
    }

    #[test]
    fn plans_only_changed_writes() {
        let topo = Topology::synthetic(1, 1, 4, 1).unwrap();
        let placement = plan_placement(&topo, Some(0), 2, None, &[0]).unwrap(); // CPUs 1, 2
        let info = |irq, cpus: &[u32]| IrqInfo {
            irq,
            name: String::new(),
            current_affinity: cpus.to_vec(),
        };
        let plan = plan_irq_affinity(
            &[
                (1, info(42, &[2])),
                (0, info(41, &[0, 1, 2, 3])),
                (2, info(43, &[0])),
            ],
            &placement,
        );
        assert_eq!(plan.entries.len(), 2);
        assert_eq!(plan.entries[0].queue, 0);
        assert!(!plan.entries[1].changes());
        assert_eq!(plan.unplaced, vec![(2, 43)]);
        assert_eq!(
            plan.writes(),
            vec![(PathBuf::from("irq/41/smp_affinity_list"), "1".to_owned())]
        );
        let table = plan.to_string();
        assert!(
            table.contains("    41     0              0-3                1  *"),
            "{table}"
        );
        assert!(table.contains("IRQ 43 of queue 2 is left alone"), "{table}");
    }

    #[test]
    fn napi_threads() {
        assert_eq!(napi_thread_name("veth-fl0", 8195), "napi/veth-fl0-8195");
        assert_eq!(
            parse_napi_thread_name("veth-fl0", "napi/veth-fl0-8195"),
            Some(8195)
        );
        assert_eq!(
            parse_napi_thread_name("veth-fl0", "napi/veth-fl01-8195"),
            None
        );
        assert_eq!(parse_napi_thread_name("veth-fl0", "napi/veth-fl0-"), None);
        let comms = [
            "napi/veth-fl0-8199",
            "kworker/0:1",
            "napi/veth-fl0-8197",
            "napi/other-8198",
        ];
        assert_eq!(
            napi_ids_in_queue_order("veth-fl0", &comms),
            vec![(0, 8197), (1, 8199)]
        );
        let topo = Topology::synthetic(1, 1, 2, 1).unwrap();
        let placement = plan_placement(&topo, Some(0), 1, None, &[0]).unwrap();
        let plan = plan_napi_threads("veth-fl0", &[(0, 8197), (1, 8199)], &placement);
        assert_eq!(plan.entries.len(), 1);
        let e = &plan.entries[0];
        assert_eq!((e.cpu, e.thread_name.as_str()), (1, "napi/veth-fl0-8197"));
        assert!(e.matches_comm("napi/veth-fl0-8197\n"));
        assert!(e.matches_comm("napi/veth-fl0-8")); // cut to 15 bytes by pre-5.17 kernels
        assert!(!e.matches_comm("napi/veth-fl0-8199"));
        assert!(!e.matches_comm("napi/veth"));
        assert_eq!(plan.unplaced, vec![(1, 8199)]);
        assert!(plan.to_string().contains("napi/veth-fl0-8197"));
    }

    #[test]
    fn napi_names_cut_to_15_bytes_are_ambiguous() {
        // Before Linux 5.17, `napi/veth-fl0-8197` shows as `napi/veth-fl0-8`.
        assert_eq!(parse_napi_thread_name("veth-fl0", "napi/veth-fl0-8"), None);
        assert_eq!(
            parse_napi_thread_name("veth0", "napi/veth0-8193"),
            None,
            "15 bytes: the id may have more digits"
        );
        assert_eq!(parse_napi_thread_name("veth0", "napi/veth0-819"), Some(819));
        assert_eq!(
            parse_napi_thread_name("veth-fl0", "napi/veth-fl0-8197"),
            Some(8197),
            "later kernels show the name in full"
        );
        assert!(napi_thread_name_cut("veth-fl0", "napi/veth-fl0-8"));
        assert!(napi_thread_name_cut("veth0", "napi/veth0-8193"));
        assert!(napi_thread_name_cut("enp1s0f0np0", "napi/enp1s0f0np"));
        assert!(!napi_thread_name_cut("veth-fl0", "napi/veth-fl0-8197"));
        assert!(!napi_thread_name_cut("veth-fl", "napi/veth-fl0-8"));
        assert!(!napi_thread_name_cut("veth0", "napi/veth0-81x3"));
        assert!(!napi_thread_name_cut("veth0", "kworker/u16:2-ev"));
        // Threads showing one cut name: no id, and no order, for any of them.
        let cut = ["napi/veth-fl0-8", "systemd", "napi/veth-fl0-8"];
        assert_eq!(napi_ids_in_queue_order("veth-fl0", &cut), vec![]);
        assert_eq!(
            napi_threads_by_name("veth-fl0", &cut),
            Err(CutNapiNames {
                comm: "napi/veth-fl0-8".into(),
                tasks: 2
            })
        );
        // A cut name that keeps no digit of the id.
        assert_eq!(
            napi_threads_by_name("enp1s0f0np0", &["napi/enp1s0f0np"]),
            Err(CutNapiNames {
                comm: "napi/enp1s0f0np".into(),
                tasks: 1
            })
        );
        // One task per name of 15 bytes: each names one thread, in the order of its digits.
        let comms = [
            "napi/veth0-8194",
            "kworker/0:1",
            "napi/veth0-8193",
            "napi/veth0-819",
            "napi/veth01-8192",
        ];
        assert_eq!(
            napi_threads_by_name("veth0", &comms),
            Ok(vec![(0, 819, 3), (1, 8193, 2), (2, 8194, 0)])
        );
        assert_eq!(
            napi_threads_by_name("veth-fl0", &["napi/veth-fl0-8199\n", "napi/veth-fl0-8197"]),
            Ok(vec![(0, 8197, 1), (1, 8199, 0)])
        );
        // NAPI 9999 whole, NAPI 10000 cut to `napi/vethA-1000` (before Linux 5.17): by its
        // digits it would come first and take queue 0's thread.
        assert_eq!(
            napi_threads_by_name("vethA", &["napi/vethA-9999", "napi/vethA-1000"]),
            Err(CutNapiNames {
                comm: "napi/vethA-1000".into(),
                tasks: 1
            })
        );
        // Ids close together, whole or all cut alike, keep their order.
        assert_eq!(
            napi_threads_by_name("vethA", &["napi/vethA-1001", "napi/vethA-1000"]),
            Ok(vec![(0, 1000, 1), (1, 1001, 0)])
        );
    }

    proptest! {
        #[test]
        fn prop_cpu_list_round_trip(cpus in proptest::collection::btree_set(0u32..300, 0..60)) {
            let cpus: Vec<u32> = cpus.into_iter().collect();
            prop_assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)).unwrap(), cpus);
        }

        #[test]
        fn prop_proc_interrupts_never_panics(text in "[ -~\n]{0,400}") {
            let _ = parse_proc_interrupts(&text);
        }
    }
}
