//! What `flowlane daemon --iface IF` does to a NIC it owns: reads what the
//! NIC can do, explains the plan against it, applies the plan (each receive
//! queue's IRQ, or on a device without IRQs its threaded-NAPI thread,
//! pinned to the CPU its worker is placed on; the RSS table spread evenly
//! over the queues where the NIC has one), plans again when the NIC
//! changes under it (channels set with `ethtool -L`, IRQs or NAPI
//! instances made anew: a driver reset, a service restarted on a veth; the
//! NIC gone and back) and, when the daemon stops, puts back what it
//! changed. Before each change it keeps what it would put back in the
//! NIC's state file (`flowlane_daemon::nic_state`), where a daemon started
//! after this one was killed finds the originals; a clean stop removes it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use flowlane_daemon::nic_state::{Found, NicKey, NicLock, StateFile};
use flowlane_dataplane::control_socket::NicReport;
use flowlane_numa_sched::nic::even_table;
use flowlane_numa_sched::plan_explain::{explain_on, Wanted};
use flowlane_numa_sched::{format_cpu_list, IndirectionTable, NicCaps, RssNic, Topology};

use crate::irq_apply::{self, QueueIrqs};
use crate::nic::ethtool::EthtoolNic;
use crate::sysroot::Roots;

/// A NIC the daemon owns: its report, and how to undo the changes.
#[derive(Debug)]
pub(crate) struct Owned {
    /// What is reported on the metrics page and the daemon's socket.
    pub(crate) report: NicReport,
    undo: Undo,
    /// What of the NIC the plan in force was made for.
    shape: Shape,
    /// The IRQ affinities the plan in force set (none dry, or on a NIC
    /// without IRQs): looked at again each time, as irqbalance or a
    /// driver reset that keeps the IRQ numbers may move them.
    pinned: Vec<(u32, Vec<u32>)>,
    /// The NIC could not be read at the last look (gone, or renamed).
    gone: bool,
    /// Its state file (none dry).
    kept: Option<Kept>,
}

/// What the daemon says to do when an interface it is to own is not in its
/// network namespace: it has no `--bed` (the services' and other
/// commands' way to a test bed), it runs in the bed's namespace instead.
const NOT_HERE: &str = "see `ip link`; a test bed's interfaces are in the bed's namespace: run \
                        the daemon there, `ip netns exec flowlane-NAME flowlane daemon --iface IF`";

/// `iface`'s capabilities, or why they cannot be read: an interface not in
/// this namespace said in the daemon's terms ([`NOT_HERE`]).
fn read_caps(roots: &Roots, iface: &str) -> Result<NicCaps> {
    flowlane_dataplane::iface::iface_dir_saying(&roots.sysfs_root, iface, NOT_HERE)?;
    crate::nic::caps::read(roots, iface)
}

/// An owned NIC's state file and what it holds.
#[derive(Debug)]
struct Kept {
    file: StateFile,
    /// What the file holds (nothing: there is no file); None when it holds
    /// another interface's, written over at the first change.
    holds: Option<Undo>,
    /// The NIC is this daemon's (no other daemon owns it) while it holds
    /// this.
    _lock: NicLock,
}

impl Kept {
    /// `iface`'s state file in `dir`, the NIC taken for this daemon (its
    /// lock), and what a daemon before this one left there (the originals
    /// to put back, said in `notes`).
    ///
    /// # Errors
    /// The interface or a file that is there cannot be read, or another
    /// daemon owns the NIC.
    fn open(roots: &Roots, iface: &str, dir: &Path, notes: &mut Vec<String>) -> Result<Kept> {
        let ifindex =
            flowlane_dataplane::iface::InterfaceInfo::read(&roots.sysfs_root, iface)?.ifindex;
        let key = NicKey::here(&roots.sysfs_root, &roots.procfs_root, iface, ifindex)?;
        let lock = NicLock::take(&key)?;
        let file = StateFile::new(dir, key);
        let holds = match file.load::<Undo>()? {
            Found::Nothing => Some(Undo::default()),
            Found::Originals(undo) => {
                notes.push(format!(
                    "took {iface}'s originals from {}: a daemon before this one changed {iface} \
                     and did not put it back (killed, or it failed); they go back when this one \
                     stops",
                    file.path().display()
                ));
                Some(undo)
            }
            Found::OtherInterface(was) => {
                notes.push(format!(
                    "{} was of another {iface} ({was}, gone since): not this one's originals",
                    file.path().display()
                ));
                None
            }
        };
        Ok(Kept {
            file,
            holds,
            _lock: lock,
        })
    }

    /// What the file holds of this interface's originals.
    fn originals(&self) -> Undo {
        self.holds.clone().unwrap_or_default()
    }

    /// Makes the file hold `undo` (no file when there is nothing to put
    /// back), unless it does already.
    fn hold(&mut self, undo: &Undo) -> Result<()> {
        if self.holds.as_ref() == Some(undo) {
            return Ok(());
        }
        if undo.is_empty() {
            self.file.remove()?;
        } else {
            self.file.save(undo)?;
        }
        self.holds = Some(undo.clone());
        Ok(())
    }
}

/// Makes `kept`, if any, hold `base` and `pending` (what the daemon will
/// have changed on top of what `base` holds) together.
fn keep(kept: Option<&mut Kept>, base: &Undo, pending: &Undo) -> Result<()> {
    let Some(k) = kept else {
        return Ok(());
    };
    let mut all = base.clone();
    all.merge(pending.clone());
    k.hold(&all)
}

/// Called before a change with everything to put back once it is made (the
/// change's originals added): keeps it where a daemon started after this
/// one finds it, or fails, and the change is not made.
type Before<'a> = &'a mut dyn FnMut(&Undo) -> Result<()>;

/// The NICs the daemon owns, put back however it ends: by
/// [`PutBack::finish`] on its way out, or, dropped without it (an error,
/// or a panic unwinding), by the function it was made with. A daemon that
/// left its changes in place when it failed would, restarted by systemd,
/// take them for what was there before it.
pub(crate) struct PutBack {
    nics: Vec<Owned>,
    /// How the NICs go back when this is dropped unfinished.
    unfinished: Option<Box<dyn FnOnce(Vec<Owned>)>>,
}

impl std::fmt::Debug for PutBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutBack")
            .field("nics", &self.nics)
            .field("finished", &self.unfinished.is_none())
            .finish()
    }
}

impl PutBack {
    /// No NICs yet; `unfinished` puts back those owned by then if this is
    /// dropped before [`PutBack::finish`].
    pub(crate) fn new(unfinished: impl FnOnce(Vec<Owned>) + 'static) -> PutBack {
        PutBack {
            nics: Vec::new(),
            unfinished: Some(Box::new(unfinished)),
        }
    }

    /// The NICs owned.
    pub(crate) fn nics(&self) -> &[Owned] {
        &self.nics
    }

    /// The NICs owned, to own more or look at them again.
    pub(crate) fn nics_mut(&mut self) -> &mut Vec<Owned> {
        &mut self.nics
    }

    /// Puts the NICs back with `put_back` (what the daemon knows on its
    /// way out), rather than as when dropped unfinished.
    pub(crate) fn finish(mut self, put_back: impl FnOnce(Vec<Owned>)) {
        self.unfinished = None;
        put_back(std::mem::take(&mut self.nics));
    }
}

impl Drop for PutBack {
    fn drop(&mut self) {
        if let Some(put_back) = self.unfinished.take() {
            if std::thread::panicking() && !self.nics.is_empty() {
                tracing::error!("the daemon failed (a panic): putting its NICs back");
            }
            put_back(std::mem::take(&mut self.nics));
        }
    }
}

/// Lines of the report kept at most, each of changes and notes: a NIC
/// planned again often (a service restarted in a loop, irqbalance moving
/// the IRQs back) keeps its last ones.
const KEEP_LINES: usize = 64;

/// What one look at an owned NIC added to its report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Looked {
    /// Changes made (or, dry, that would be).
    pub(crate) changes: Vec<String>,
    /// What was noticed or left alone.
    pub(crate) notes: Vec<String>,
}

/// Drops the oldest of `lines` past [`KEEP_LINES`].
fn keep_last(lines: &mut Vec<String>) {
    let over = lines.len().saturating_sub(KEEP_LINES);
    lines.drain(..over);
}

/// What of a NIC a plan depends on: its receive queues, their IRQs and
/// their NAPI instances (not the NAPI threads: switching threaded NAPI on
/// makes those). A plan made for one shape is made again for another.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    rx_queues: u32,
    queue_irqs: Vec<(u32, u32)>,
    napis: Vec<(u32, Option<u32>)>,
}

impl Shape {
    fn of(caps: &NicCaps) -> Shape {
        Shape {
            rx_queues: caps.rx_queues,
            queue_irqs: caps.queue_irqs.iter().map(|q| (q.queue, q.irq)).collect(),
            napis: caps.napis.iter().map(|n| (n.id, n.irq)).collect(),
        }
    }

    /// What changed from `self` to `now`, in words.
    fn change(&self, now: &Shape) -> String {
        let mut what = Vec::new();
        if self.rx_queues != now.rx_queues {
            what.push(format!(
                "receive queues {}, was {}",
                now.rx_queues, self.rx_queues
            ));
        }
        if self.queue_irqs != now.queue_irqs {
            what.push("its queues' IRQs".to_string());
        }
        if self.napis != now.napis {
            what.push(format!("{} NAPI instances, new ones", now.napis.len()));
        }
        what.join(", ")
    }
}

/// What the daemon changed, as the values to write back (kept in the NIC's
/// state file as they are here).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Undo {
    /// IRQs and their affinities (`smp_affinity_list`) before.
    irq_affinity: Vec<(u32, String)>,
    /// The daemon switched threaded NAPI on (off again ends its threads).
    threaded_on: bool,
    /// NAPI threads pinned, with their CPUs before.
    napi_threads: Vec<(u32, Vec<u32>)>,
    /// The RSS table before the even spread.
    rss_table: Option<TableBefore>,
}

/// An RSS table as it was before the daemon spread it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum TableBefore {
    /// The driver's default: given back as that, over the rings there are
    /// by then, not as a table set by hand.
    Default,
    /// A table someone set: written back as it was.
    Set(Vec<u32>),
}

/// Reads `iface`, plans for one worker per receive queue on `topo` (within
/// `budget` CPUs) and applies the plan, or with `dry_run` only says what it
/// would change. With `keep_table` (why: a running service serves the NIC,
/// or may), its RSS table is left as it is: the service's buckets are its
/// own (it may have moved some), as when the plan is made again. With
/// `state_dir` (not dry), what it would put back is kept in the NIC's state
/// file there before each change, and the originals a daemon killed before
/// it left there are taken for the NIC's (not its state now).
///
/// # Errors
/// The NIC or its state file cannot be read, the state file cannot be
/// written (nothing is changed then), or a change failed (the IRQ writes
/// are rolled back first; see `irq_apply`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn own(
    roots: &Roots,
    iface: &str,
    topo: &Topology,
    budget: Option<&[u32]>,
    dry_run: bool,
    restore_on_exit: bool,
    keep_table: Option<&str>,
    state_dir: Option<&Path>,
) -> Result<Owned> {
    let caps = read_caps(roots, iface)?;
    let workers = caps.rx_queues.max(1);
    let table_size = caps.rss.as_ref().map_or(128, |r| r.table_size.max(1));
    let plan = explain_on(
        &caps,
        Wanted {
            workers,
            table_size,
        },
        topo,
    );
    // What this daemon changes, on top of the originals a daemon before it
    // kept (`base`): those, not the NIC's state now, are what goes back.
    let mut undo = Undo::default();
    let (mut changes, mut notes) = (Vec::new(), Vec::new());
    let mut kept = match state_dir.filter(|_| !dry_run) {
        Some(dir) => Some(Kept::open(roots, iface, dir, &mut notes)?),
        None => None,
    };
    let mut base = kept.as_ref().map(Kept::originals).unwrap_or_default();
    base.forget_ended_threads(roots, iface);
    let mut before = |pending: &Undo| keep(kept.as_mut(), &base, pending);

    let msi = roots.iface(iface)?.msi_irqs.is_some();
    let mut pinned = Vec::new();
    if !msi && caps.napis.is_empty() {
        notes.push(format!(
            "left {iface}'s interrupts for now: no IRQs and no NAPI instances yet (a veth has \
             NAPI only while an XDP program is attached: pinned once a service starts)"
        ));
    } else {
        let mut lines = Looked::default();
        let pins = pin_unless_down(
            roots,
            iface,
            topo,
            budget,
            dry_run,
            &mut lines,
            &mut undo,
            &mut before,
        );
        pinned = match pins {
            Ok(p) => p,
            Err(e) => {
                // Its writes rolled back: the state file keeps only what a
                // daemon before this one left.
                if let Err(k) = keep(kept.as_mut(), &base, &Undo::default()) {
                    tracing::warn!("{iface}: {k:#}");
                }
                return Err(e);
            }
        };
        changes.append(&mut lines.changes);
        notes.append(&mut lines.notes);
    }

    let has_table = caps.rss.as_ref().is_some_and(|r| r.table_size > 0) && caps.rx_queues > 1;
    notes.extend(unmodelled(&caps));
    if let (true, Some(why)) = (has_table, keep_table) {
        notes.push(format!("left {iface}'s RSS table as it is: {why}"));
    } else if has_table {
        let nic = EthtoolNic::new(iface);
        let spread = spread_rss(
            &nic,
            caps.rx_queues,
            dry_run,
            &mut changes,
            &mut undo,
            &mut before,
        );
        if let Err(e) = spread {
            // What this NIC got so far goes back before the error does; the
            // state file keeps what a daemon before this one left, and what
            // of this one's could not go back.
            let (said, left) = undo.put_back(roots, iface, None);
            for line in said {
                tracing::warn!("{iface}: {line}");
            }
            if let Err(k) = keep(kept.as_mut(), &base, &left) {
                tracing::warn!("{iface}: {k:#}");
            }
            return Err(e);
        }
    }
    if dry_run {
        undo = Undo::default();
        pinned.clear();
    }
    // The file kept what each change would add; now what they did add.
    if let Err(e) = keep(kept.as_mut(), &base, &undo) {
        notes.push(format!("{e:#}"));
    }
    let mut all = base;
    all.merge(undo);
    Ok(Owned {
        shape: Shape::of(&caps),
        pinned,
        gone: false,
        kept,
        report: NicReport {
            caps,
            workers,
            plan,
            dry_run,
            changes_total: changes.len() as u64,
            changes,
            notes,
            restore_on_exit,
        },
        undo: all,
    })
}

/// A note when `caps`' RSS table is one flowlane cannot model (its size
/// is no power of two: which entry a hash selects is the driver's own
/// business then), naming the NIC and what to do. The table is spread all
/// the same: writing it needs no model.
fn unmodelled(caps: &NicCaps) -> Option<String> {
    let size = caps.rss.as_ref().filter(|r| r.table_size > 0)?.table_size as usize;
    let iface = &caps.iface;
    // The model's own check: what a service on the NIC would refuse.
    IndirectionTable::new(vec![0; size]).err().map(|_| {
        format!(
            "{iface}'s RSS table has {size} entries, not a power of two: flowlane spreads it \
             but cannot model which entry a flow hashes to, so services on {iface} cannot keep \
             connections per bucket or move buckets; for a power-of-two table change its \
             channels (`ethtool -L {iface} combined N`, on drivers that size the table by them) \
             and check with `ethtool -x {iface}`"
        )
    })
}

/// Spreads `nic`'s RSS table evenly over the `queues` receive queues where
/// it is not (entry `i` on queue `i % queues`, whatever the table's size),
/// noting the change (once made) and the table to put back (unless `undo`
/// has one already: the first is what was there before the daemon), which
/// `before` is given first.
fn spread_rss(
    nic: &impl RssNic<Error = anyhow::Error>,
    queues: u32,
    dry_run: bool,
    changes: &mut Vec<String>,
    undo: &mut Undo,
    before: Before<'_>,
) -> Result<()> {
    let now = nic.rss()?;
    let even = even_table(now.table.len(), queues);
    let moved = now.table.iter().zip(&even).filter(|(a, b)| a != b).count();
    if moved == 0 {
        return Ok(());
    }
    if !dry_run {
        // The even spread over all the rings is the driver's default: given
        // back as that, the table stays the driver's (`ethtool -L` may still
        // change the channels, and the plan is made again).
        let default = nic.caps()?.default_table();
        let was = if now.table == default {
            TableBefore::Default
        } else {
            TableBefore::Set(now.table)
        };
        let mut would = undo.clone();
        would.rss_table.get_or_insert(was.clone());
        before(&would)?;
        if default == even {
            nic.reset_table()?;
        } else {
            nic.set_rss(None, Some(&even))?;
        }
        undo.rss_table.get_or_insert(was);
    }
    changes.push(format!(
        "{} the RSS table evenly over {queues} queues ({moved} of {} entries)",
        if dry_run { "would spread" } else { "spread" },
        even.len()
    ));
    Ok(())
}

/// Puts `before` back on `nic`, unless told why not (`keep`: a running
/// service uses it, or may: it may have moved buckets since); one line
/// saying which, or, the error, why it could not be.
fn put_back_rss(
    nic: &impl RssNic<Error = anyhow::Error>,
    before: &TableBefore,
    keep: Option<&str>,
) -> std::result::Result<String, String> {
    let iface = nic.name();
    if let Some(why) = keep {
        return Ok(format!("left {iface}'s RSS table as it is: {why}"));
    }
    let put = match before {
        TableBefore::Default => nic.reset_table(),
        TableBefore::Set(table) => nic.set_rss(None, Some(table)),
    };
    match put {
        Ok(()) => Ok(format!("put {iface}'s RSS table back")),
        Err(e) => Err(format!("{iface}'s RSS table not put back: {e:#}")),
    }
}

/// [`pin_interrupts`], except that an interface that is down and whose
/// driver has not requested its queue IRQs yet (i40e, ice: only its misc
/// IRQ is there) is noted, not a failure: they appear when it comes up,
/// which changes the NIC's shape, and the look after that pins them.
#[allow(clippy::too_many_arguments)]
fn pin_unless_down(
    roots: &Roots,
    iface: &str,
    topo: &Topology,
    budget: Option<&[u32]>,
    dry_run: bool,
    lines: &mut Looked,
    undo: &mut Undo,
    before: Before<'_>,
) -> Result<Vec<(u32, Vec<u32>)>> {
    match pin_interrupts(
        roots,
        iface,
        topo,
        budget,
        dry_run,
        &mut lines.changes,
        undo,
        before,
    ) {
        Err(e) => match e.downcast_ref::<irq_apply::QueueIrqsDown>() {
            Some(down) => {
                lines.notes.push(format!(
                    "left {iface}'s interrupts for now: {}: pinned once they appear",
                    down.reason()
                ));
                Ok(Vec::new())
            }
            None => Err(e),
        },
        pinned => pinned,
    }
}

/// Applies the IRQ (or NAPI-thread) part of the plan, noting each change
/// and how to undo it (`before` given what that would be first: the plan
/// applied dry). Returns the affinity the plan gives each IRQ (none on a
/// NIC without IRQs).
#[allow(clippy::too_many_arguments)]
fn pin_interrupts(
    roots: &Roots,
    iface: &str,
    topo: &Topology,
    budget: Option<&[u32]>,
    dry_run: bool,
    changes: &mut Vec<String>,
    undo: &mut Undo,
    before: Before<'_>,
) -> Result<Vec<(u32, Vec<u32>)>> {
    let apply = |dry_run: bool| {
        irq_apply::apply(
            roots,
            iface,
            topo,
            None,
            budget,
            dry_run,
            &mut irq_apply::set_task_affinity,
        )
        .with_context(|| format!("applying {iface}'s IRQ/NAPI plan"))
    };
    if !dry_run {
        let (view, done) = apply(true)?;
        let mut would = undo.clone();
        noted(iface, &view, &done, true, &mut Vec::new(), &mut would);
        before(&would)?;
    }
    let (view, done) = apply(dry_run)?;
    Ok(noted(iface, &view, &done, dry_run, changes, undo))
}

/// What applying `iface`'s IRQ/NAPI plan did (`view` before it, `done`),
/// noted: a line per change and how to undo it (an IRQ or NAPI thread
/// `undo` holds already keeps the first value: what was there before the
/// daemon). Returns the affinity the plan gives each IRQ.
fn noted(
    iface: &str,
    view: &irq_apply::IrqView,
    done: &irq_apply::Applied,
    dry_run: bool,
    changes: &mut Vec<String>,
    undo: &mut Undo,
) -> Vec<(u32, Vec<u32>)> {
    let would = if dry_run { "would pin" } else { "pinned" };
    let mut now = Undo::default();
    let mut planned = Vec::new();
    match &view.irqs {
        QueueIrqs::Msi { plan } => {
            planned = plan
                .entries
                .iter()
                .map(|e| (e.irq, e.planned.clone()))
                .collect();
            for e in plan.entries.iter().filter(|e| e.changes()) {
                changes.push(format!(
                    "{would} IRQ {} (queue {}) to CPU {} (was {})",
                    e.irq,
                    e.queue,
                    format_cpu_list(&e.planned),
                    format_cpu_list(&e.current)
                ));
                now.irq_affinity.push((e.irq, format_cpu_list(&e.current)));
            }
        }
        QueueIrqs::Napi { threads, .. } => {
            if done.enabled_threaded {
                changes.push(format!(
                    "{} threaded NAPI on {iface}",
                    if dry_run { "would switch" } else { "switched" }
                ));
                now.threaded_on = true;
            }
            for &(pid, cpu) in &done.pinned {
                changes.push(napi_pin_line(would, pid, cpu));
                if let Some(t) = threads.iter().find(|t| t.pid == pid) {
                    now.napi_threads.push((pid, t.current.clone()));
                }
            }
        }
    }
    undo.merge(now);
    planned
}

/// The words of a change line that pins a NAPI thread, before its pid.
const NAPI_PIN: &str = "NAPI thread pid";

/// The change line for NAPI thread `pid` pinned to `cpu` (`would`: `pinned`,
/// or `would pin` when dry): `pinned NAPI thread pid 7 to CPU 2`.
fn napi_pin_line(would: &str, pid: u32, cpu: u32) -> String {
    format!("{would} {NAPI_PIN} {pid} to CPU {cpu}")
}

/// The thread a change line pinned, if it is a NAPI thread's
/// ([`napi_pin_line`]).
fn napi_pin_pid(line: &str) -> Option<u32> {
    let (_, rest) = line.split_once(&format!(" {NAPI_PIN} "))?;
    rest.split(' ').next()?.parse().ok()
}

/// The IRQs of `pinned` whose affinity is no longer the planned one, in
/// words (`IRQ 120 on CPUs 0-7, planned 5`); None when all are as planned
/// (an IRQ whose affinity cannot be read is left to the next change of
/// the NIC's shape).
fn drifted(roots: &Roots, pinned: &[(u32, Vec<u32>)]) -> Option<String> {
    let moved: Vec<String> = pinned
        .iter()
        .filter_map(|(irq, planned)| {
            let now = roots.irq_affinity(*irq).ok()?;
            (now != *planned).then(|| {
                format!(
                    "IRQ {irq} on CPUs {}, planned {}",
                    format_cpu_list(&now),
                    format_cpu_list(planned)
                )
            })
        })
        .collect();
    (!moved.is_empty()).then(|| moved.join(", "))
}

impl Owned {
    /// Looks at the NIC again and, if it changed since the plan in force
    /// was made (its receive queues, their IRQs or NAPI instances; it was
    /// gone and is back; or an IRQ the plan pinned was moved since, by
    /// irqbalance or a driver reset that kept its number), plans for it as
    /// it is now and applies that: interrupts pinned for the new queues,
    /// the RSS table spread over them unless a running service uses the
    /// NIC, or may (`keep_table` says why, asked only then: the service's
    /// buckets are its own).
    /// The changes and a note saying why are added to the report (its last
    /// [`KEEP_LINES`] of each kept) and returned; None when nothing was
    /// added.
    ///
    /// # Errors
    /// A change failed (its IRQ writes rolled back; not tried again until
    /// the NIC changes again). A NIC that cannot be
    /// read is not an error: it is noted once, and planned again when it
    /// can be.
    pub(crate) fn look_again(
        &mut self,
        roots: &Roots,
        topo: &Topology,
        budget: Option<&[u32]>,
        keep_table: impl FnOnce() -> Option<String>,
    ) -> Result<Option<Looked>> {
        let iface = self.report.caps.iface.clone();
        let caps = match read_caps(roots, &iface) {
            Ok(c) => c,
            Err(e) => {
                if self.gone {
                    return Ok(None);
                }
                self.gone = true;
                let looked = Looked {
                    notes: vec![format!(
                        "{iface} cannot be read ({e:#}): planned again when it can"
                    )],
                    ..Looked::default()
                };
                self.add(&looked);
                return Ok(Some(looked));
            }
        };
        let now = Shape::of(&caps);
        let back = std::mem::take(&mut self.gone);
        let what = if back {
            format!("{iface} is back")
        } else if now != self.shape {
            format!("{iface} changed: {}", self.shape.change(&now))
        } else if let Some(moved) = drifted(roots, &self.pinned) {
            format!("{iface}'s IRQs moved off the plan: {moved}")
        } else {
            return Ok(None);
        };
        // A plan that fails is not tried again each second: the failure is
        // said once, and the next change of the NIC plans again.
        self.shape = now;
        self.pinned.clear();
        let dry_run = self.report.dry_run;
        let mut undo = Undo::default();
        let mut looked = Looked::default();
        // Read once, before any change: nothing between the changes and
        // the merge of their undo below may fail.
        let msi_irqs = roots.iface(&iface)?.msi_irqs;
        // Each change kept in the state file first, on top of what was.
        let (base, kept) = (&self.undo, &mut self.kept);
        let mut before = |pending: &Undo| keep(kept.as_mut(), base, pending);
        let pinned = if msi_irqs.is_some() || !caps.napis.is_empty() {
            pin_unless_down(
                roots,
                &iface,
                topo,
                budget,
                dry_run,
                &mut looked,
                &mut undo,
                &mut before,
            )
        } else {
            Ok(Vec::new())
        };
        let has_table = caps.rss.as_ref().is_some_and(|r| r.table_size > 0) && caps.rx_queues > 1;
        let size = |c: &NicCaps| c.rss.as_ref().map(|r| r.table_size);
        if size(&caps) != size(&self.report.caps) {
            looked.notes.extend(unmodelled(&caps));
        }
        let spread = match (pinned.is_ok() && has_table).then(keep_table) {
            None => Ok(()),
            Some(Some(why)) => {
                looked
                    .notes
                    .push(format!("left {iface}'s RSS table as it is: {why}"));
                Ok(())
            }
            Some(None) => spread_rss(
                &EthtoolNic::new(&iface),
                caps.rx_queues,
                dry_run,
                &mut looked.changes,
                &mut undo,
                &mut before,
            ),
        };
        // The interrupts pinned stay to be put back, whatever the table did.
        // IRQs that are no longer the NIC's (made anew under other numbers)
        // are forgotten: the driver freed them, and their numbers may be
        // another device's by now.
        if let Some(irqs) = msi_irqs {
            self.undo.irq_affinity.retain(|(irq, _)| irqs.contains(irq));
        }
        self.forget_ended_threads(roots);
        if !dry_run {
            self.undo.merge(undo);
        }
        // The file kept what each change would add; now what they did add.
        if let Err(e) = keep(self.kept.as_mut(), &self.undo, &Undo::default()) {
            looked.notes.push(format!("{e:#}"));
        }
        let failed = pinned.is_err() || spread.is_err();
        if failed {
            // What was done before the failure was done all the same.
            self.add(&looked);
        }
        let pinned = pinned?;
        if !dry_run {
            self.pinned = pinned;
        }
        spread?;
        looked.notes.push(format!(
            "planned again ({what}){}",
            if looked.changes.is_empty() {
                ": nothing to change"
            } else {
                ""
            }
        ));
        self.add(&looked);
        self.report.workers = caps.rx_queues.max(1);
        self.report.plan = explain_on(
            &caps,
            Wanted {
                workers: self.report.workers,
                table_size: caps.rss.as_ref().map_or(128, |r| r.table_size.max(1)),
            },
            topo,
        );
        self.report.caps = caps;
        Ok(Some(looked))
    }

    /// Forgets the NIC's NAPI threads that ended (a service restarted on a
    /// veth made new ones): from what to put back
    /// ([`Undo::forget_ended_threads`]) and from the report's changes, whose
    /// lines pinning them are no change in force (their pids may be other
    /// tasks' by now). Every change stays counted (`changes_total`).
    fn forget_ended_threads(&mut self, roots: &Roots) {
        let iface = self.report.caps.iface.clone();
        self.undo.forget_ended_threads(roots, &iface);
        self.report
            .changes
            .retain(|l| napi_pin_pid(l).is_none_or(|pid| napi_thread_of(roots, &iface, pid)));
    }

    /// Adds `looked`'s lines to the report, its last [`KEEP_LINES`] of each
    /// kept.
    fn add(&mut self, looked: &Looked) {
        let r = &mut self.report;
        r.changes_total += looked.changes.len() as u64;
        r.changes.extend(looked.changes.iter().cloned());
        r.notes.extend(looked.notes.iter().cloned());
        keep_last(&mut r.changes);
        keep_last(&mut r.notes);
    }

    /// Puts back what [`own`] changed (and what a daemon killed before it
    /// changed: the originals of its state file), then removes the NIC's
    /// state file, or, where some of it could not be put back, makes the
    /// file hold what is left: the next daemon that owns the NIC takes it
    /// for the NIC's originals, as it does a killed daemon's, and puts it
    /// back as it stops. The RSS table stays when told why (`keep_table`:
    /// a running service uses the NIC, or may: it may have moved buckets
    /// since). Returns a line per thing put back or left, errors included,
    /// and what is left, if anything (the daemon is stopping: nothing is
    /// retried).
    pub(crate) fn restore(self, roots: &Roots, keep_table: Option<&str>) -> Restored {
        let iface = self.report.caps.iface.clone();
        let (mut said, left) = self.undo.put_back(roots, &iface, keep_table);
        if left.is_empty() {
            said.extend(
                self.kept
                    .and_then(|k| k.file.remove().err().map(|e| e.to_string())),
            );
            return Restored { said, left: None };
        }
        let what = left.in_words();
        let left = match self.kept.map(|k| k.file.save(&left).map(|()| k)) {
            Some(Ok(k)) => format!(
                "{iface} is not all put back ({what}): kept in {}, whose originals the next \
                 daemon that owns {iface} takes and puts back as it stops; or put them back by \
                 hand and remove the file",
                k.file.path().display()
            ),
            Some(Err(e)) => format!("{iface} is not all put back ({what}), and {e}"),
            None => format!("{iface} is not all put back ({what}): put it back by hand"),
        };
        Restored {
            said,
            left: Some(left),
        }
    }

    /// Leaves the NIC as the plan configured it (`--keep-on-exit`) and
    /// removes its state file: what this daemon hands over is what the
    /// next one finds, and takes for the NIC's own. Returns why the file
    /// could not be removed, if it could not.
    pub(crate) fn hand_over(self) -> Option<String> {
        self.kept
            .and_then(|k| k.file.remove().err().map(|e| e.to_string()))
    }
}

/// What [`Owned::restore`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Restored {
    /// A line per thing put back or left alone, errors included.
    pub(crate) said: Vec<String>,
    /// What could not be put back, where it is kept and what to do, in one
    /// line; None when all went back.
    pub(crate) left: Option<String>,
}

impl Restored {
    /// Nothing to say.
    pub(crate) fn is_empty(&self) -> bool {
        self.said.is_empty() && self.left.is_none()
    }
}

/// Said as its lines, what is left last.
impl serde::Serialize for Restored {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.said.iter().chain(&self.left))
    }
}

/// The longest a thread's name reads (`/proc/PID/comm`: 15 bytes before
/// Linux 5.17 cut it, TASK_COMM_LEN less its NUL).
const COMM_CUT: usize = 15;

/// Whether task `pid` is one of `iface`'s NAPI threads now
/// (`napi/IF-ID`, maybe cut to [`COMM_CUT`] bytes): a thread ended since
/// (a service restarted on the NIC made new ones) may have left its pid
/// to an unrelated task, or to none.
fn napi_thread_of(roots: &Roots, iface: &str, pid: u32) -> bool {
    let comm =
        std::fs::read_to_string(roots.procfs_root.join(format!("{pid}/comm"))).unwrap_or_default();
    let (comm, name) = (comm.trim_end(), format!("napi/{iface}-"));
    comm.starts_with(&name) || (comm.len() == COMM_CUT && name.starts_with(comm))
}

impl Undo {
    /// Nothing to put back.
    fn is_empty(&self) -> bool {
        *self == Undo::default()
    }

    /// What it holds, in words (`threaded NAPI on, 2 IRQ affinities`).
    fn in_words(&self) -> String {
        let count = |n: usize, one: &str, many: &str| {
            (n > 0).then(|| format!("{n} {}", if n == 1 { one } else { many }))
        };
        [
            self.threaded_on.then(|| "threaded NAPI on".to_string()),
            count(self.irq_affinity.len(), "IRQ affinity", "IRQ affinities"),
            count(
                self.napi_threads.len(),
                "NAPI thread's affinity",
                "NAPI threads' affinities",
            ),
            self.rss_table.as_ref().map(|_| "the RSS table".to_string()),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }

    /// Forgets the NAPI threads of `iface` that ended (a service restarted
    /// on a veth, a driver reset: the NAPI instances made anew have threads
    /// of their own, which the plan pins and adds): what they were on
    /// before can no longer be put back, and the list would otherwise grow
    /// with every restart.
    fn forget_ended_threads(&mut self, roots: &Roots, iface: &str) {
        self.napi_threads
            .retain(|(pid, _)| napi_thread_of(roots, iface, *pid));
    }

    /// Adds what `later` changed (a plan made again). What was already
    /// changed keeps its first value: the one from before the daemon.
    fn merge(&mut self, later: Undo) {
        for (irq, was) in later.irq_affinity {
            if !self.irq_affinity.iter().any(|(i, _)| *i == irq) {
                self.irq_affinity.push((irq, was));
            }
        }
        self.threaded_on |= later.threaded_on;
        for (pid, was) in later.napi_threads {
            if !self.napi_threads.iter().any(|(p, _)| *p == pid) {
                self.napi_threads.push((pid, was));
            }
        }
        if self.rss_table.is_none() {
            self.rss_table = later.rss_table;
        }
    }

    /// Writes back what it holds for `iface`; see [`Owned::restore`].
    /// Returns a line per thing, and what is left to put back: what failed
    /// and still matters (not what is gone with the NIC, IRQs no longer
    /// its, threads that ended, nor a table left as it is on purpose).
    ///
    /// Threaded NAPI that the kernel will not switch off because the NIC
    /// has no NAPI instances now (a veth once its service stopped: its
    /// XDP program detached) is left: the kernel keeps the setting, and
    /// the NAPI instances made next (the next service) get threads.
    fn put_back(self, roots: &Roots, iface: &str, keep_table: Option<&str>) -> (Vec<String>, Undo) {
        let mut said = Vec::new();
        let mut left = Undo::default();
        if !self.irq_affinity.is_empty() {
            // Only IRQs still the NIC's: one the driver freed since (a
            // reset, a reload, `ethtool -L`) may be another device's now.
            match roots.iface(iface).map(|i| i.msi_irqs) {
                Ok(Some(irqs)) => {
                    let (lines, failed) = put_back_irqs(roots, &self.irq_affinity, &irqs);
                    said.extend(lines);
                    left.irq_affinity = failed;
                }
                Ok(None) => said.push(format!(
                    "{iface} lists no IRQs now: its {} IRQ affinities left as they are",
                    self.irq_affinity.len()
                )),
                Err(e) => said.push(format!(
                    "{iface} cannot be read ({e:#}): its {} IRQ affinities left as they are",
                    self.irq_affinity.len()
                )),
            }
        }
        if self.threaded_on {
            let rel = PathBuf::from(format!("class/net/{iface}/threaded"));
            let written =
                irq_apply::write_all(&roots.sysfs_root, &[(rel.clone(), "0".into())], &[]);
            said.push(match written {
                Ok(()) => format!("switched threaded NAPI off on {iface}"),
                Err(_) if !roots.sysfs_root.join(format!("class/net/{iface}")).exists() => {
                    format!("{iface} is gone: its threaded NAPI with it")
                }
                Err(e) => {
                    left.threaded_on = true;
                    let no_napi = e
                        .chain()
                        .filter_map(|c| c.downcast_ref::<std::io::Error>())
                        .any(|io| io.raw_os_error() == Some(nix::libc::EOPNOTSUPP));
                    if no_napi {
                        format!(
                            "threaded NAPI left on: {iface} has no NAPI instances now (a veth has \
                             them only while an XDP program is attached), and the kernel \
                             switches it off only while it has some; those made next get \
                             threads (`echo 0 > {}` once {iface} has NAPI instances again)",
                            roots.sysfs_root.join(&rel).display()
                        )
                    } else {
                        format!("threaded NAPI left on: {e:#}")
                    }
                }
            });
        } else {
            for (pid, cpus) in self.napi_threads {
                if !napi_thread_of(roots, iface, pid) {
                    said.push(format!("NAPI thread pid {pid} gone since: left alone"));
                    continue;
                }
                said.push(match irq_apply::set_task_affinity(pid, &cpus) {
                    Ok(()) => format!(
                        "put NAPI thread pid {pid} back on CPUs {}",
                        format_cpu_list(&cpus)
                    ),
                    Err(e) => {
                        left.napi_threads.push((pid, cpus));
                        format!("NAPI thread pid {pid} not put back: {e:#}")
                    }
                });
            }
        }
        if let Some(before) = self.rss_table {
            match put_back_rss(&EthtoolNic::new(iface), &before, keep_table) {
                Ok(line) => said.push(line),
                Err(line) => {
                    said.push(line);
                    left.rss_table = Some(before);
                }
            }
        }
        (said, left)
    }
}

/// Writes back each of `saved` (IRQ, affinity before) whose IRQ is still
/// one of the NIC's (`irqs`), one at a time: one that fails does not keep
/// the others from going back. A line for each failure, then one for all;
/// and those that failed.
fn put_back_irqs(
    roots: &Roots,
    saved: &[(u32, String)],
    irqs: &[u32],
) -> (Vec<String>, Vec<(u32, String)>) {
    let mut said = Vec::new();
    let mut failed = Vec::new();
    let (mut back, mut gone) = (0, 0);
    for (irq, was) in saved {
        let rel = Roots::irq_affinity_path(*irq);
        if !irqs.contains(irq) || !roots.procfs_root.join(&rel).is_file() {
            gone += 1;
            continue;
        }
        match irq_apply::write_all(&roots.procfs_root, &[(rel.clone(), was.clone())], &[]) {
            Ok(()) => back += 1,
            Err(e) => {
                said.push(format!("{} not put back: {e:#}", rel.display()));
                failed.push((*irq, was.clone()));
            }
        }
    }
    said.push(format!(
        "put back {back} IRQ affinit{}{}",
        if back == 1 { "y" } else { "ies" },
        if gone > 0 {
            format!(" ({gone} IRQs no longer the NIC's since: left alone)")
        } else {
            String::new()
        }
    ));
    (said, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_numa_sched::{RssCaps, RssSettings};
    use std::cell::{Cell, RefCell};

    /// A [`Before`] that keeps nothing (no state file).
    fn unkept(_: &Undo) -> Result<()> {
        Ok(())
    }

    /// A NIC's RSS in memory: its rings, its table, the tables written to
    /// it, whether the table is marked set by hand (Linux's
    /// `IFF_RXFH_CONFIGURED`), and whether writes fail (a driver that
    /// refuses).
    struct MemoryNic {
        rings: Cell<u32>,
        table: RefCell<Vec<u32>>,
        writes: RefCell<Vec<Vec<u32>>>,
        configured: Cell<bool>,
        refuse: bool,
    }

    impl MemoryNic {
        fn new(table: Vec<u32>) -> Self {
            MemoryNic {
                rings: Cell::new(4),
                table: RefCell::new(table),
                writes: RefCell::new(Vec::new()),
                configured: Cell::new(false),
                refuse: false,
            }
        }
    }

    impl RssNic for MemoryNic {
        type Error = anyhow::Error;
        fn name(&self) -> &str {
            "mem0"
        }
        fn caps(&self) -> Result<RssCaps> {
            Ok(RssCaps {
                queues: self.rings.get(),
                key_len: 40,
                table_size: self.table.borrow().len(),
            })
        }
        fn rss(&self) -> Result<RssSettings> {
            Ok(RssSettings {
                key: vec![0; 40],
                table: self.table.borrow().clone(),
            })
        }
        fn set_rss(&self, key: Option<&[u8]>, table: Option<&[u32]>) -> Result<()> {
            assert!(key.is_none(), "the plan writes no key");
            anyhow::ensure!(!self.refuse, "Operation not supported");
            let table = table.expect("a table");
            anyhow::ensure!(
                table.iter().all(|&q| q < self.rings.get()),
                "Invalid argument"
            );
            self.writes.borrow_mut().push(table.to_vec());
            *self.table.borrow_mut() = table.to_vec();
            self.configured.set(true);
            Ok(())
        }
        fn reset_table(&self) -> Result<()> {
            anyhow::ensure!(!self.refuse, "Operation not supported");
            *self.table.borrow_mut() = self.caps()?.default_table();
            self.configured.set(false);
            Ok(())
        }
    }

    #[test]
    fn an_uneven_rss_table_is_spread_and_put_back_as_it_was() {
        // Every bucket on queue 0 (what `ethtool -X eth0 equal 1` leaves).
        let before = vec![0u32; 16];
        let nic = MemoryNic::new(before.clone());
        nic.configured.set(true);
        let (mut changes, mut undo) = (Vec::new(), Undo::default());
        spread_rss(&nic, 4, false, &mut changes, &mut undo, &mut unkept).unwrap();
        let even: Vec<u32> = (0..16).map(|b| b % 4).collect();
        assert_eq!(*nic.table.borrow(), even);
        assert!(
            nic.writes.borrow().is_empty() && !nic.configured.get(),
            "the even spread over all the rings is the driver's default: a reset"
        );
        assert_eq!(
            changes,
            ["spread the RSS table evenly over 4 queues (12 of 16 entries)"]
        );
        assert_eq!(undo.rss_table, Some(TableBefore::Set(before.clone())));
        // On exit, with no service on the NIC: the table as it was.
        let line = put_back_rss(&nic, undo.rss_table.as_ref().unwrap(), None).unwrap();
        assert_eq!(line, "put mem0's RSS table back");
        assert_eq!(*nic.table.borrow(), before);
        assert!(
            nic.configured.get(),
            "set by hand before, set by hand again"
        );
        // With one: left as the service has it (buckets may have moved).
        spread_rss(
            &nic,
            4,
            false,
            &mut Vec::new(),
            &mut Undo::default(),
            &mut unkept,
        )
        .unwrap();
        let line = put_back_rss(
            &nic,
            &TableBefore::Set(before),
            Some("a running service uses mem0"),
        )
        .unwrap();
        assert!(line.starts_with("left mem0's RSS table as it is"), "{line}");
        assert_eq!(*nic.table.borrow(), even);
    }

    /// A table of 192 entries (a driver that sizes it by its rings, not to
    /// a power of two): the even spread is entry `i` on queue `i % 4`, no
    /// model needed; the daemon says, naming the NIC, that services cannot
    /// model it and what to do.
    #[test]
    fn a_table_of_any_size_is_spread_and_one_not_modelled_is_named() {
        let nic = MemoryNic::new(vec![0; 192]);
        nic.configured.set(true);
        let (mut changes, mut undo) = (Vec::new(), Undo::default());
        spread_rss(&nic, 4, false, &mut changes, &mut undo, &mut unkept).unwrap();
        let table = nic.table.borrow();
        assert_eq!(table.len(), 192);
        assert!(table.iter().enumerate().all(|(i, &q)| q == i as u32 % 4));
        assert_eq!(
            changes,
            ["spread the RSS table evenly over 4 queues (144 of 192 entries)"]
        );
        let caps = |size| NicCaps {
            iface: "eth3".into(),
            rss: Some(flowlane_numa_sched::nic_caps::RssFacts {
                key_len: 40,
                table_size: size,
                hash_function: None,
                flow_hash: Default::default(),
            }),
            ..NicCaps::default()
        };
        assert_eq!(
            unmodelled(&caps(192)).as_deref(),
            Some(
                "eth3's RSS table has 192 entries, not a power of two: flowlane spreads it but \
                 cannot model which entry a flow hashes to, so services on eth3 cannot keep \
                 connections per bucket or move buckets; for a power-of-two table change its \
                 channels (`ethtool -L eth3 combined N`, on drivers that size the table by \
                 them) and check with `ethtool -x eth3`"
            )
        );
        assert_eq!(unmodelled(&caps(256)), None);
        assert_eq!(
            unmodelled(&NicCaps::default()),
            None,
            "no RSS: nothing to say"
        );
    }

    #[test]
    fn a_default_table_goes_back_as_the_default_over_the_rings_there_are_then() {
        // Four rings and their default table; the plan wants two queues.
        let nic = MemoryNic::new((0..8).map(|b| b % 4).collect());
        let (mut changes, mut undo) = (Vec::new(), Undo::default());
        spread_rss(&nic, 2, false, &mut changes, &mut undo, &mut unkept).unwrap();
        assert_eq!(*nic.table.borrow(), [0, 1, 0, 1, 0, 1, 0, 1]);
        assert!(nic.configured.get(), "not the default: written");
        assert_eq!(undo.rss_table, Some(TableBefore::Default));
        // The channels went down to two meanwhile: the old table would
        // name rings that are gone; the default is over the two.
        nic.rings.set(2);
        let line = put_back_rss(&nic, undo.rss_table.as_ref().unwrap(), None).unwrap();
        assert_eq!(line, "put mem0's RSS table back");
        assert_eq!(*nic.table.borrow(), [0, 1, 0, 1, 0, 1, 0, 1]);
        assert!(!nic.configured.get(), "the driver's own again");
    }

    #[test]
    fn an_even_table_is_left_alone_and_a_dry_run_writes_nothing() {
        let even: Vec<u32> = (0..8).map(|b| b % 2).collect();
        let nic = MemoryNic::new(even);
        let (mut changes, mut undo) = (Vec::new(), Undo::default());
        spread_rss(&nic, 2, false, &mut changes, &mut undo, &mut unkept).unwrap();
        assert!(changes.is_empty() && undo.rss_table.is_none());
        assert!(nic.writes.borrow().is_empty());

        let nic = MemoryNic::new(vec![1; 8]);
        spread_rss(&nic, 2, true, &mut changes, &mut undo, &mut unkept).unwrap();
        assert_eq!(
            changes,
            ["would spread the RSS table evenly over 2 queues (4 of 8 entries)"]
        );
        assert!(nic.writes.borrow().is_empty(), "a dry run writes nothing");
        assert!(undo.rss_table.is_none(), "nothing to put back");
    }

    #[test]
    fn a_refused_write_is_an_error_and_nothing_to_put_back() {
        let mut nic = MemoryNic::new(vec![0; 8]);
        nic.refuse = true;
        let (mut changes, mut undo) = (Vec::new(), Undo::default());
        let e = spread_rss(&nic, 2, false, &mut changes, &mut undo, &mut unkept).unwrap_err();
        assert!(format!("{e:#}").contains("not supported"), "{e:#}");
        assert!(
            changes.is_empty(),
            "no line for a change not made: {changes:?}"
        );
        assert!(undo.rss_table.is_none());
        assert_eq!(*nic.table.borrow(), vec![0; 8]);
        let line = put_back_rss(&nic, &TableBefore::Set(vec![1; 8]), None).unwrap_err();
        assert!(
            line.starts_with("mem0's RSS table not put back: "),
            "{line}"
        );
    }

    #[test]
    fn a_plan_made_again_puts_back_what_was_there_before_the_daemon() {
        let mut undo = Undo {
            irq_affinity: vec![(40, "0-3".into())],
            napi_threads: vec![(7, vec![0, 1])],
            ..Undo::default()
        };
        // The second plan saw the daemon's own pins as "before".
        undo.merge(Undo {
            irq_affinity: vec![(40, "1".into()), (41, "0-3".into())],
            napi_threads: vec![(7, vec![1]), (9, vec![0, 1])],
            ..Undo::default()
        });
        assert_eq!(
            undo.irq_affinity,
            [(40, "0-3".to_string()), (41, "0-3".to_string())]
        );
        assert_eq!(undo.napi_threads, [(7, vec![0, 1]), (9, vec![0, 1])]);
    }

    /// A NAPI thread the daemon pinned that ended since (its pid now a
    /// task of another name, or none) is left alone, not re-pinned.
    #[test]
    fn a_napi_thread_gone_since_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("flowlane-napigone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let roots = Roots {
            sysfs_root: dir.join("sys"),
            procfs_root: dir.join("proc"),
        };
        // Pids no process has (above pid_max): an attempt would say ESRCH.
        let (reused, gone) = (4_194_401u32, 4_194_402u32);
        std::fs::create_dir_all(roots.procfs_root.join(reused.to_string())).unwrap();
        std::fs::write(roots.procfs_root.join(format!("{reused}/comm")), "bash\n").unwrap();
        let undo = Undo {
            napi_threads: vec![(reused, vec![0]), (gone, vec![1])],
            ..Undo::default()
        };
        let (said, left) = undo.put_back(&roots, "eth0", None);
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(
            said,
            [
                format!("NAPI thread pid {reused} gone since: left alone"),
                format!("NAPI thread pid {gone} gone since: left alone"),
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fake `/sys` and `/proc` with one PCI NIC, `name`, of two receive
    /// queues on IRQs 120 and 121 (affinity 0-3), and IRQ 40 of another
    /// device; removed on drop.
    struct FakeHost {
        dir: PathBuf,
        roots: Roots,
    }

    impl FakeHost {
        fn new(tag: &str, name: &str) -> FakeHost {
            let dir = std::env::temp_dir().join(format!("flowlane-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let roots = Roots {
                sysfs_root: dir.join("sys"),
                procfs_root: dir.join("proc"),
            };
            let nic = roots.sysfs_root.join("class/net").join(name);
            let file = |p: PathBuf, text: &str| {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, text).unwrap();
            };
            for q in 0..2 {
                std::fs::create_dir_all(nic.join(format!("queues/rx-{q}"))).unwrap();
                std::fs::create_dir_all(nic.join(format!("queues/tx-{q}"))).unwrap();
            }
            // What netlink is asked (channels, features, RSS, queues) goes
            // to the real kernel: `lo`, whose answers are "none" to most.
            file(nic.join("ifindex"), "1\n");
            file(nic.join("mtu"), "1500\n");
            file(nic.join("address"), "02:00:00:00:00:01\n");
            file(nic.join("threaded"), "0\n");
            file(nic.join("device/numa_node"), "0\n");
            std::os::unix::fs::symlink("../../bus/pci/drivers/fake", nic.join("device/driver"))
                .unwrap();
            let mut interrupts = String::from("       CPU0       CPU1       CPU2       CPU3\n");
            for (irq, owner) in [
                (40, "nvme0q1".to_string()),
                (120, format!("{name}-TxRx-0")),
                (121, format!("{name}-TxRx-1")),
            ] {
                if irq != 40 {
                    file(nic.join(format!("device/msi_irqs/{irq}")), "msix\n");
                }
                interrupts.push_str(&format!(
                    "{irq:>4}:          7          7          7          7  IR-PCI-MSI 524288-edge      {owner}\n"
                ));
                file(
                    roots
                        .procfs_root
                        .join(format!("irq/{irq}/smp_affinity_list")),
                    "0-3\n",
                );
            }
            file(roots.procfs_root.join("interrupts"), &interrupts);
            FakeHost { dir, roots }
        }

        fn affinity(&self, irq: u32) -> String {
            let p = self
                .roots
                .procfs_root
                .join(format!("irq/{irq}/smp_affinity_list"));
            std::fs::read_to_string(p).unwrap().trim().to_string()
        }

        fn set_affinity(&self, irq: u32, cpus: &str) {
            let p = self
                .roots
                .procfs_root
                .join(format!("irq/{irq}/smp_affinity_list"));
            std::fs::write(p, format!("{cpus}\n")).unwrap();
        }
    }

    impl Drop for FakeHost {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// An i40e-like NIC `lo` of two receive queues that is down: MSI IRQs
    /// 50-52, of which only the misc one is requested (the driver requests
    /// the queues' when the interface comes up).
    fn down_i40e(tag: &str) -> FakeHost {
        let host = FakeHost::new(tag, "lo");
        let nic = host.roots.sysfs_root.join("class/net/lo");
        let msi = nic.join("device/msi_irqs");
        std::fs::remove_dir_all(&msi).unwrap();
        std::fs::create_dir_all(&msi).unwrap();
        for irq in [50, 51, 52] {
            std::fs::write(msi.join(irq.to_string()), "msix\n").unwrap();
            let dir = host.roots.procfs_root.join(format!("irq/{irq}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("smp_affinity_list"), "0-3\n").unwrap();
        }
        std::fs::write(nic.join("operstate"), "down\n").unwrap();
        host.interrupts(&[(50, "i40e-0000:3b:00.0:misc")]);
        host
    }

    impl FakeHost {
        /// `/proc/interrupts` naming `irqs`.
        fn interrupts(&self, irqs: &[(u32, &str)]) {
            let mut text = String::from("       CPU0       CPU1       CPU2       CPU3\n");
            for (irq, name) in irqs {
                text.push_str(&format!(
                    "{irq:>4}:          7          7          7          7  IR-PCI-MSI 524288-edge      {name}\n"
                ));
            }
            std::fs::write(self.roots.procfs_root.join("interrupts"), text).unwrap();
        }
    }

    /// An owned NIC that is down at start (i40e, ice: the queue IRQs are
    /// requested when it comes up) is owned all the same, with a note
    /// saying why its interrupts wait; once it is up, the next look pins
    /// them.
    #[test]
    fn a_nic_down_at_start_is_pinned_once_it_is_up() {
        let host = down_i40e("down");
        let (roots, topo) = (&host.roots, four_cpus());
        let mut o = own(roots, "lo", &topo, None, false, true, None, None).unwrap();
        assert!(o.report.changes.is_empty(), "{:?}", o.report.changes);
        assert_eq!(
            o.report.notes,
            [
                "left lo's interrupts for now: lo is down, and its driver requests its queue IRQs \
              only when it is up (of its 3 MSI IRQs only i40e-0000:3b:00.0:misc is requested \
              now): pinned once they appear"
            ]
        );
        let unasked = || -> Option<String> { panic!("no RSS table here") };
        assert_eq!(o.look_again(roots, &topo, None, unasked).unwrap(), None);
        // Up: the driver requested the queues' IRQs.
        std::fs::write(roots.sysfs_root.join("class/net/lo/operstate"), "up\n").unwrap();
        host.interrupts(&[
            (50, "i40e-0000:3b:00.0:misc"),
            (51, "i40e-lo-TxRx-0"),
            (52, "i40e-lo-TxRx-1"),
        ]);
        let looked = o
            .look_again(roots, &topo, None, unasked)
            .unwrap()
            .expect("planned again");
        assert_eq!(looked.changes.len(), 2, "{looked:?}");
        assert!(looked.notes[0].starts_with("planned again (lo changed: its queues' IRQs)"));
        assert_ne!(host.affinity(51), "0-3");
        let said = o.restore(roots, None).said;
        assert_eq!(said, ["put back 2 IRQ affinities"]);
        assert_eq!(host.affinity(51), "0-3");
    }

    /// `irq show` on the same NIC: one line saying it is down, not "a
    /// form flowlane knows".
    #[test]
    fn irqs_of_a_nic_that_is_down_are_said_missing_for_that() {
        let host = down_i40e("downshow");
        let e = irq_apply::inspect(&host.roots, "lo", &four_cpus(), None, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "lo is down, and its driver requests its queue IRQs only when it is up (of its 3 MSI \
             IRQs only i40e-0000:3b:00.0:misc is requested now); bring it up \
             (`ip link set lo up`) to plan them"
        );
    }

    fn four_cpus() -> Topology {
        Topology::from_synthetic_description("package:1 numa:1 core:4 pu:1").unwrap()
    }

    /// A daemon killed while it owns a NIC (nothing put back) and the one
    /// started after it: the second finds the IRQs pinned (nothing to
    /// change) and takes the originals from the state file the first wrote
    /// before pinning them, not from the NIC; it puts those back and
    /// removes the file. A dry run neither reads nor writes the file.
    #[test]
    fn the_daemon_after_a_killed_one_puts_back_the_originals_it_kept() {
        let host = FakeHost::new("killed", "lo");
        let (roots, topo) = (&host.roots, four_cpus());
        let state = host.dir.join("state");
        let first = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        assert_eq!(first.report.changes.len(), 2, "{:?}", first.report.changes);
        let pinned = (host.affinity(120), host.affinity(121));
        assert_ne!(pinned.0, "0-3");
        let files = || std::fs::read_dir(&state).map_or(0, |d| d.count());
        let kept_first = files();
        // Killed: nothing put back.
        drop(first);
        let dry = own(roots, "lo", &topo, None, true, true, None, Some(&state)).unwrap();
        let second = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        assert!(second.report.changes.is_empty(), "{:?}", second.report);
        assert_eq!((host.affinity(120), host.affinity(121)), pinned);
        let notes = second.report.notes.clone();
        assert_eq!(
            second.restore(roots, None).said,
            ["put back 2 IRQ affinities"]
        );
        assert_eq!(
            (host.affinity(120), host.affinity(121)),
            ("0-3".into(), "0-3".into())
        );
        assert!(
            notes[0].starts_with("took lo's originals from "),
            "{notes:?}"
        );
        assert!(dry.report.notes.is_empty(), "{:?}", dry.report.notes);
        assert_eq!(kept_first, 1, "kept before the change");
        assert_eq!(files(), 0, "removed once put back");
        // With --keep-on-exit the file goes too: the next daemon takes the
        // NIC as this one leaves it.
        let kept = own(roots, "lo", &topo, None, false, false, None, Some(&state)).unwrap();
        assert_eq!(files(), 1);
        assert_eq!(kept.hand_over(), None);
        assert_eq!(files(), 0);
        let third = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        assert!(third.report.changes.is_empty() && third.report.notes.is_empty());
        assert!(third.restore(roots, None).is_empty(), "nothing to put back");
    }

    /// irqbalance (or a driver reset that kept the IRQ numbers) moves an
    /// IRQ the plan pinned: the next look pins it again, says why, and the
    /// daemon still puts back what was there before it.
    #[test]
    fn an_irq_moved_off_the_plan_is_pinned_again() {
        let host = FakeHost::new("drift", "lo");
        let (roots, topo) = (&host.roots, four_cpus());
        let mut o = own(roots, "lo", &topo, None, false, true, None, None).unwrap();
        assert_eq!(o.report.changes.len(), 2, "{:?}", o.report.changes);
        let planned = host.affinity(120);
        assert_ne!(planned, "0-3");
        let unasked = || -> Option<String> { panic!("no RSS table here") };
        assert_eq!(o.look_again(roots, &topo, None, unasked).unwrap(), None);
        host.set_affinity(120, "0-3");
        let looked = o
            .look_again(roots, &topo, None, unasked)
            .unwrap()
            .expect("planned again");
        assert_eq!(host.affinity(120), planned, "pinned again");
        assert_eq!(
            looked.changes,
            [format!(
                "pinned IRQ 120 (queue 0) to CPU {planned} (was 0-3)"
            )]
        );
        assert_eq!(
            looked.notes,
            [format!(
                "planned again (lo's IRQs moved off the plan: IRQ 120 on CPUs 0-3, planned {planned})"
            )]
        );
        assert_eq!(o.report.changes.len(), 3);
        assert_eq!(o.look_again(roots, &topo, None, unasked).unwrap(), None);
        let said = o.restore(roots, None).said;
        assert_eq!(said, ["put back 2 IRQ affinities"]);
        assert_eq!(
            (host.affinity(120), host.affinity(121)),
            ("0-3".into(), "0-3".into())
        );
    }

    /// A panic in the daemon (its loop, a look at a NIC) unwinds through
    /// the NICs it owns: what it changed goes back all the same, so that a
    /// restart does not take the daemon's own settings for what was there
    /// before it.
    #[test]
    fn the_nics_go_back_when_the_daemon_panics() {
        let host = FakeHost::new("panic", "lo");
        let topo = four_cpus();
        let roots = host.roots.clone();
        let said = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (roots_back, said) = (roots.clone(), said.clone());
            let mut owned = PutBack::new(move |nics| {
                for o in nics {
                    said.borrow_mut().extend(o.restore(&roots_back, None).said);
                }
            });
            owned
                .nics_mut()
                .push(own(&roots, "lo", &topo, None, false, true, None, None).unwrap());
            assert_ne!(host.affinity(120), "0-3", "pinned");
            panic!("a bug in the daemon's loop");
        }));
        assert!(caught.is_err());
        assert_eq!(*said.borrow(), ["put back 2 IRQ affinities"]);
        assert_eq!(
            (host.affinity(120), host.affinity(121)),
            ("0-3".into(), "0-3".into())
        );
        // On its way out the daemon's own put-back is used, once.
        let mut owned = PutBack::new(|_| panic!("not when finished"));
        owned
            .nics_mut()
            .push(own(&roots, "lo", &topo, None, false, true, None, None).unwrap());
        let mut finished = Vec::new();
        owned.finish(|nics| {
            for o in nics {
                finished.extend(o.restore(&roots, None).said);
            }
        });
        assert_eq!(finished, ["put back 2 IRQ affinities"]);
        assert_eq!(host.affinity(120), "0-3");
    }

    /// Every change is counted, also past the lines the report keeps.
    #[test]
    fn changes_are_counted_past_the_lines_kept() {
        let host = FakeHost::new("counted", "lo");
        let (roots, topo) = (&host.roots, four_cpus());
        let mut o = own(roots, "lo", &topo, None, false, true, None, None).unwrap();
        assert_eq!(o.report.changes_total, 2);
        let unasked = || -> Option<String> { panic!("no RSS table here") };
        for _ in 0..KEEP_LINES {
            host.set_affinity(120, "0-3");
            o.look_again(roots, &topo, None, unasked)
                .unwrap()
                .expect("pinned again");
        }
        assert_eq!(o.report.changes.len(), KEEP_LINES);
        assert_eq!(o.report.changes_total, 2 + KEEP_LINES as u64);
        o.restore(roots, None);
    }

    /// On exit, only IRQs the NIC still has go back: one freed since (a
    /// reset, a reload) may be another device's by now; nothing when the
    /// NIC cannot be read.
    #[test]
    fn only_irqs_still_the_nic_s_are_put_back() {
        let host = FakeHost::new("putback", "flback0");
        let undo = || Undo {
            irq_affinity: vec![
                (40, "1".into()),  // the NIC's once, an NVMe queue's now
                (120, "2".into()), // still the NIC's
                (122, "3".into()), // freed since: no file
            ],
            ..Undo::default()
        };
        let (said, left) = undo().put_back(&host.roots, "flback0", None);
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(
            said,
            ["put back 1 IRQ affinity (2 IRQs no longer the NIC's since: left alone)"]
        );
        assert_eq!(host.affinity(120), "2");
        assert_eq!(host.affinity(40), "0-3", "another device's: untouched");
        host.set_affinity(120, "0-3");
        let (said, left) = undo().put_back(&host.roots, "gone0", None);
        assert!(left.is_empty(), "gone with the NIC: {left:?}");
        assert_eq!(said.len(), 1);
        assert!(
            said[0].starts_with("gone0 cannot be read (")
                && said[0].ends_with("its 3 IRQ affinities left as they are"),
            "{said:?}"
        );
        assert_eq!(
            (host.affinity(40), host.affinity(120)),
            ("0-3".into(), "0-3".into())
        );
    }

    #[test]
    fn a_change_of_shape_is_said_in_words() {
        let was = Shape {
            rx_queues: 2,
            queue_irqs: vec![(0, 40), (1, 41)],
            napis: vec![(8193, Some(40)), (8194, Some(41))],
        };
        assert_eq!(was.change(&was.clone()), "");
        let now = Shape {
            rx_queues: 4,
            queue_irqs: vec![(0, 50), (1, 51), (2, 52), (3, 53)],
            napis: vec![],
        };
        assert_eq!(
            was.change(&now),
            "receive queues 4, was 2, its queues' IRQs, 0 NAPI instances, new ones"
        );
    }

    /// The state files in `dir`.
    fn state_files(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir).map_or(Vec::new(), |d| d.flatten().map(|e| e.path()).collect())
    }

    /// A put-back that fails (here threaded NAPI, whose sysfs file will
    /// not take the write) does not lose what is left: the state file is
    /// kept, holding that alone, and said in one line with what to do; the
    /// next daemon takes it for the NIC's originals and puts it back as it
    /// stops, the file removed then.
    #[test]
    fn a_put_back_that_fails_keeps_what_is_left_for_the_next_daemon() {
        let host = FakeHost::new("leftover", "lo");
        let (roots, topo) = (&host.roots, four_cpus());
        let state = host.dir.join("state");
        let threaded = roots.sysfs_root.join("class/net/lo/threaded");
        let mut first = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        // As if its plan had switched threaded NAPI on, which the kernel
        // will not switch off now.
        first.undo.threaded_on = true;
        std::fs::remove_file(&threaded).unwrap();
        std::fs::create_dir(&threaded).unwrap();
        let done = first.restore(roots, None);
        assert_eq!(done.said[0], "put back 2 IRQ affinities");
        assert!(
            done.said[1].starts_with("threaded NAPI left on: "),
            "{done:?}"
        );
        let files = state_files(&state);
        assert_eq!(files.len(), 1, "kept: {files:?}");
        assert_eq!(
            done.left.as_deref(),
            Some(
                format!(
                    "lo is not all put back (threaded NAPI on): kept in {}, whose originals the \
                     next daemon that owns lo takes and puts back as it stops; or put them back \
                     by hand and remove the file",
                    files[0].display()
                )
                .as_str()
            )
        );
        let json = serde_json::to_value(&done).unwrap();
        assert_eq!(
            json.as_array().unwrap().len(),
            3,
            "the lines, what is left last"
        );
        let kept: toml::Table =
            toml::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
        assert_eq!(
            kept["originals"].clone().try_into::<Undo>().unwrap(),
            Undo {
                threaded_on: true,
                ..Undo::default()
            },
            "what is left alone"
        );
        // The next daemon, once the kernel takes the write.
        std::fs::remove_dir(&threaded).unwrap();
        std::fs::write(&threaded, "1\n").unwrap();
        let second = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        assert!(
            second.report.notes[0].starts_with("took lo's originals from "),
            "{:?}",
            second.report.notes
        );
        let done = second.restore(roots, None);
        assert_eq!(
            done.said,
            [
                "put back 2 IRQ affinities",
                "switched threaded NAPI off on lo"
            ]
        );
        assert_eq!(done.left, None);
        assert_eq!(std::fs::read_to_string(&threaded).unwrap(), "0");
        assert!(state_files(&state).is_empty(), "removed once all went back");
    }

    /// The NAPI threads of a veth end when its service stops, and the next
    /// service's are new ones: those that ended (their pid gone, or an
    /// unrelated task's now) are forgotten when the plan is made again,
    /// not kept (and written to the state file) with every restart; live
    /// ones stay, their names cut to 15 bytes too (kernels before 5.17).
    #[test]
    fn napi_threads_that_ended_are_forgotten() {
        let host = FakeHost::new("napiended", "lo");
        let task = |pid: u32, comm: &str| {
            let dir = host.roots.procfs_root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        };
        task(300, "napi/xsk0-8193");
        task(301, "bash");
        task(302, "napi/xsk01-8194"); // another interface's
        task(303, "napi/veth-fl0-8"); // veth-fl0's, its name cut
        let mut undo = Undo {
            napi_threads: vec![
                (300, vec![0, 1]),
                (301, vec![0, 1]),
                (302, vec![0, 1]),
                (4_194_400, vec![0, 1]),
            ],
            ..Undo::default()
        };
        undo.forget_ended_threads(&host.roots, "xsk0");
        assert_eq!(undo.napi_threads, [(300, vec![0, 1])]);
        let mut cut = Undo {
            napi_threads: vec![(303, vec![1])],
            ..Undo::default()
        };
        cut.forget_ended_threads(&host.roots, "veth-fl0");
        assert_eq!(cut.napi_threads, [(303, vec![1])]);
    }

    /// The report's changes forget the NAPI threads that ended, as what is
    /// put back does: a pin of a thread that is gone (its pid free, or an
    /// unrelated task's) is no longer listed; live threads' pins, the
    /// IRQs' and the count of every change stay.
    #[test]
    fn the_changes_listed_forget_napi_threads_that_ended() {
        let host = FakeHost::new("napilines", "lo");
        let (roots, topo) = (&host.roots, four_cpus());
        let mut o = own(roots, "lo", &topo, None, false, true, None, None).unwrap();
        let task = |pid: u32, comm: &str| {
            let dir = roots.procfs_root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        };
        task(500, "napi/lo-8193");
        task(501, "bash"); // an ended thread's pid, another task's now
        let irqs = o.report.changes.clone();
        assert_eq!(irqs.len(), 2, "{irqs:?}");
        for (pid, cpu) in [(500, 1), (501, 2), (4_194_403, 3)] {
            o.report.changes.push(napi_pin_line("pinned", pid, cpu));
            o.undo.napi_threads.push((pid, vec![0, 1, 2, 3]));
        }
        o.report.changes_total += 3;
        o.forget_ended_threads(roots);
        let mut want = irqs;
        want.push("pinned NAPI thread pid 500 to CPU 1".into());
        assert_eq!(o.report.changes, want);
        assert_eq!(o.undo.napi_threads, [(500, vec![0, 1, 2, 3])]);
        assert_eq!(o.report.changes_total, 5);
        assert_eq!(
            napi_pin_pid("would pin NAPI thread pid 42 to CPU 0"),
            Some(42)
        );
        assert_eq!(
            napi_pin_pid("pinned IRQ 120 (queue 0) to CPU 1 (was 0-3)"),
            None
        );
        o.undo.napi_threads.clear();
        o.restore(roots, None);
    }

    /// A daemon killed in a namespace since deleted left a state file; a
    /// namespace made anew has the old one's inode and its interface the
    /// old one's name and index, but is another: its sysfs directory tells
    /// (here the fake one made again). The file is not taken for its
    /// originals.
    #[test]
    fn a_state_file_of_an_interface_made_before_is_not_taken() {
        let host = FakeHost::new("madeagain", "lo");
        let (roots, topo) = (&host.roots, four_cpus());
        let state = host.dir.join("state");
        let first = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        drop(first);
        // lo made again: a directory of another inode (the old one kept,
        // so that its inode is not the new one's).
        let (net, was) = (roots.sysfs_root.join("class/net"), "lo-was");
        std::fs::rename(net.join("lo"), net.join(was)).unwrap();
        std::fs::create_dir(net.join("lo")).unwrap();
        for e in std::fs::read_dir(net.join(was)).unwrap().flatten() {
            std::fs::rename(e.path(), net.join("lo").join(e.file_name())).unwrap();
        }
        let second = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        let notes = &second.report.notes;
        assert!(
            notes[0].contains(" was of another lo (sysfs inode ")
                && notes[0].ends_with(": made before it, gone since): not this one's originals"),
            "{notes:?}"
        );
        assert!(second.restore(roots, None).is_empty(), "nothing of its own");
        assert_ne!(
            host.affinity(120),
            "0-3",
            "the other lo's originals not taken"
        );
    }

    /// A second daemon given a NIC another one owns refuses it in one
    /// line, and changes nothing (the first one's state file untouched);
    /// once the first has stopped, it may own it.
    #[test]
    fn a_nic_another_daemon_owns_is_refused() {
        let host = FakeHost::new("twice", "lo");
        let (roots, topo) = (&host.roots, four_cpus());
        let state = host.dir.join("state");
        let first = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        let kept = std::fs::read_to_string(&state_files(&state)[0]).unwrap();
        let e = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.starts_with(&format!(
                "another daemon (pid {}) owns lo: ",
                std::process::id()
            )) && !e.contains('\n'),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(&state_files(&state)[0]).unwrap(),
            kept,
            "the first one's file untouched"
        );
        assert_eq!(
            first.restore(roots, None).said,
            ["put back 2 IRQ affinities"]
        );
        let second = own(roots, "lo", &topo, None, false, true, None, Some(&state)).unwrap();
        assert_eq!(
            second.restore(roots, None).said,
            ["put back 2 IRQ affinities"]
        );
    }
}
