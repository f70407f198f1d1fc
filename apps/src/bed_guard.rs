//! One test bed for one run of a tool (`flowlane demo`, the benchmarks),
//! released on every way out: return ([`BedGuard::release`]), error and
//! panic (the guard's drop), and SIGINT, SIGTERM or SIGHUP (one signal
//! thread per process, which releases the bed of the run under way and
//! exits with 128 + the signal).
//!
//! Released means: the children the run started ([`spawn_child`]) are
//! stopped; then a bed the run is to remove ([`Afterwards::Remove`]) is
//! removed, which stops the flowlane processes in it too, and a bed that
//! existed before the run ([`Afterwards::Restore`]) is left, its RSS key and
//! table put back; then the run's temporary files ([`remove_on_signal`]; on
//! the other ways out their owners' drops remove them) go.
//!
//! The registry of the run under way is behind one lock, held while a bed
//! comes up, while a child is stopped and while the bed is released: a
//! signal that comes meanwhile waits for it, so that a bed is never made
//! after its release or released twice, and a child is stopped once.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_numa_sched::nic::RssNic;
use flowlane_testbed::{self as testbed, BedSpec, BedState};

/// How long a child asked to stop has before SIGKILL.
const CHILD_GRACE: Duration = Duration::from_secs(5);

/// What becomes of the bed when the run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Afterwards {
    /// It is removed (the run made it, or it is the tool's own).
    Remove,
    /// It stays (it existed before the run), with this RSS key and table
    /// put back.
    Restore {
        /// The key it had.
        key: Vec<u8>,
        /// The indirection table it had.
        table: Vec<u32>,
    },
}

/// The bed of the run under way.
struct Run {
    /// The tool, for messages (`demo`, `bench rx`).
    what: &'static str,
    name: String,
    afterwards: Afterwards,
}

impl Run {
    fn release(&self) -> Result<()> {
        match &self.afterwards {
            Afterwards::Remove => testbed::down(&self.name)
                .map(drop)
                .with_context(|| format!("removing test bed {}", self.name)),
            Afterwards::Restore { key, table } => testbed::load(&self.name)
                .and_then(|bed| bed.nic().set_rss(Some(key), Some(table)))
                .with_context(|| {
                    format!(
                        "putting back the RSS key and table of test bed {} (set them with `flowlane testbed set-rss`)",
                        self.name
                    )
                }),
        }
    }

    fn releasing(&self) -> String {
        match self.afterwards {
            Afterwards::Remove => format!("removing test bed {}", self.name),
            Afterwards::Restore { .. } => {
                format!(
                    "putting back the RSS key and table of test bed {}",
                    self.name
                )
            }
        }
    }
}

/// What the signal thread releases.
struct Registry {
    signals_installed: bool,
    run: Option<Run>,
    /// Children to stop first (pids).
    children: Vec<u32>,
    /// Files to remove last.
    files: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    signals_installed: false,
    run: None,
    children: Vec::new(),
    files: Vec::new(),
});

/// Set by the signal thread when a signal ends the process: from then on
/// it owns the ending.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The bed of one run; released when dropped, or by [`BedGuard::release`]
/// to hear how that went.
#[derive(Debug)]
#[must_use = "the bed is released when the guard is dropped"]
pub struct BedGuard {
    released: bool,
}

impl BedGuard {
    /// Brings up the bed `spec` describes for tool `what` (`demo`, `bench
    /// rx`) and registers it, to be released as `afterwards` says on every
    /// way out. A bed that does not come up is not registered (`up` removes
    /// what it made of it; a bed it refused, being in use, stays as it was).
    pub fn up(
        what: &'static str,
        spec: &BedSpec,
        afterwards: Afterwards,
    ) -> Result<(BedGuard, BedState)> {
        let mut reg = registry();
        if !reg.signals_installed {
            install_signal_thread()?;
            reg.signals_installed = true;
        }
        if let Some(run) = &reg.run {
            bail!(
                "{what}: test bed {} of this run is still up; release it first",
                run.name
            );
        }
        let bed = testbed::up(spec)?;
        reg.run = Some(Run {
            what,
            name: spec.name.clone(),
            afterwards,
        });
        Ok((BedGuard { released: false }, bed))
    }

    /// Releases the bed now; an error says what was left behind.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        finish()
    }
}

impl Drop for BedGuard {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = finish() {
                eprintln!("flowlane: {e:#}");
            }
        }
    }
}

/// Releases the run's bed; with a signal under way, leaves the ending to
/// the signal thread (never returns).
fn finish() -> Result<()> {
    let mut reg = registry();
    let out = reg.run.take().map_or(Ok(()), |run| run.release());
    drop(reg);
    if INTERRUPTED.load(Ordering::SeqCst) {
        // The signal thread exits the process once it has the lock.
        loop {
            std::thread::park();
        }
    }
    out
}

/// Spawns `cmd`, to be stopped by the signal thread before it releases the
/// bed; stop it with [`stop_child`].
pub fn spawn_child(cmd: &mut Command) -> std::io::Result<Child> {
    let mut reg = registry();
    let child = cmd.spawn()?;
    reg.children.push(child.id());
    Ok(child)
}

/// Stops `child` (SIGTERM, SIGKILL after 5 s; reaped) and forgets it; a
/// signal meanwhile waits for that.
pub fn stop_child(child: &mut Child) {
    let mut reg = registry();
    testbed::child::stop(child, CHILD_GRACE);
    let pid = child.id();
    reg.children.retain(|&p| p != pid);
}

/// Has the signal thread remove `path` after it released the bed (for files
/// whose owner's drop removes them on the other ways out).
pub fn remove_on_signal(path: PathBuf) {
    let mut reg = registry();
    if !reg.files.contains(&path) {
        reg.files.push(path);
    }
}

/// Installs the thread that, on SIGINT, SIGTERM or SIGHUP, stops the
/// children, releases the bed, removes the files and exits with 128 + the
/// signal.
fn install_signal_thread() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("flowlane-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                INTERRUPTED.store(true, Ordering::SeqCst);
                // Held until the process exits: the main thread, which sees
                // its children stop, releases nothing more and waits here.
                let mut reg = registry();
                let run = reg.run.take();
                if let Some(run) = &run {
                    eprintln!("{}: interrupted; {}", run.what, run.releasing());
                }
                for pid in reg.children.drain(..) {
                    stop_pid(pid);
                }
                if let Some(Err(e)) = run.as_ref().map(Run::release) {
                    eprintln!("flowlane: {e:#}");
                }
                for f in reg.files.drain(..) {
                    let _ = std::fs::remove_file(f);
                }
                std::process::exit(128 + sig);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// SIGTERM to child `pid`, SIGKILL if it has not exited within 5 s.
fn stop_pid(pid: u32) {
    use nix::sys::signal::{kill, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;
    let Ok(pid) = i32::try_from(pid).map(Pid::from_raw) else {
        return;
    };
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + CHILD_GRACE;
    while Instant::now() < deadline {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(20)),
            // Reaped here: it has exited.
            Ok(_) => return,
            // Reaped by the main thread, which waits on it too: gone once
            // signal 0 finds no such process.
            Err(_) if kill(pid, None).is_err() => return,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let _ = kill(pid, Signal::SIGKILL);
    let _ = waitpid(pid, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_forgotten_once_stopped() {
        let mut c = spawn_child(Command::new("sleep").arg("5")).unwrap();
        let pid = c.id();
        assert!(registry().children.contains(&pid));
        stop_child(&mut c);
        assert!(!registry().children.contains(&pid));
        assert!(c.try_wait().unwrap().is_some(), "reaped");
    }

    #[test]
    fn a_file_is_noted_once() {
        let p = std::env::temp_dir().join("flowlane-bed-guard-test-noted-once");
        remove_on_signal(p.clone());
        remove_on_signal(p.clone());
        assert_eq!(registry().files.iter().filter(|f| **f == p).count(), 1);
    }

    #[test]
    fn the_signal_thread_is_told_what_it_releases() {
        let run = |afterwards| Run {
            what: "demo",
            name: "nc1".into(),
            afterwards,
        };
        assert_eq!(run(Afterwards::Remove).releasing(), "removing test bed nc1");
        let restore = Afterwards::Restore {
            key: vec![1],
            table: vec![0],
        };
        assert_eq!(
            run(restore).releasing(),
            "putting back the RSS key and table of test bed nc1"
        );
    }
}
