//! The matrix's test bed: one it makes (`flowlane testbed up`), taken down
//! at its end on every path, or one that was up before (`--bed NAME`),
//! used as it was found and left so. `up` is not run on the latter (it
//! would rebuild a bed of another queue count, and rewrite a two-queue
//! bed's RSS key and table), and its offloads are not touched: the
//! `kernel-wire` backend, which turns them off and on, is refused on it.
//! A bed in use, one of another queue count than the matrix's
//! [`QUEUES`], one not intact, or one whose namespaces this run directory
//! has no record of is refused in one line before anything runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use flowlane_numa_sched::nic::RssNic;
use flowlane_testbed::BedState;

/// The queue count of the matrix's bed (flowlane one worker per queue).
pub(super) const QUEUES: u32 = 2;

/// What is under the bed's name before the matrix starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// Nothing: the matrix makes the bed.
    Nothing,
    /// A bed this run directory recorded: its queue count, and whether
    /// all of its parts are there.
    Recorded {
        /// Its queues.
        queues: u32,
        /// Its namespaces and emulated NIC are there.
        intact: bool,
    },
    /// Namespaces this run directory has no record of
    /// ([`flowlane_testbed::bed::unrecorded`]): another
    /// `FLOWLANE_RUN_DIR`'s bed, or one made by hand. (One that an `up` of
    /// this run directory left half-made is recorded by the marker of its
    /// making: the matrix's `up` removes it and makes the bed anew.)
    Unrecorded,
}

/// Whether the matrix makes bed `name` (`true`) or uses the one it found
/// as it is (`false`); why it can use neither, in one line. `in_use`: the
/// bed's users (none: `None`); `kernel_wire`: whether a `kernel-wire` cell
/// is planned.
pub(super) fn makes_it(
    name: &str,
    found: Found,
    in_use: Option<&str>,
    kernel_wire: bool,
) -> Result<bool> {
    if let Some(users) = in_use {
        bail!(
            "test bed {name} is in use by {users}: stop them first, or give the matrix another \
             --bed (it never stops a bed's users)"
        );
    }
    match found {
        Found::Nothing => Ok(true),
        Found::Unrecorded => bail!(
            "test bed {name} has namespaces but no record in {}: another FLOWLANE_RUN_DIR's \
             bed or one made by hand; give the matrix another --bed, or remove it with \
             `flowlane testbed down --bed {name} --force`",
            flowlane_testbed::state::state_dir().display()
        ),
        Found::Recorded { intact: false, .. } => bail!(
            "test bed {name} is not intact (a namespace or its emulated NIC's maps are gone): \
             remove it with `flowlane testbed down --bed {name}`, then run the matrix again"
        ),
        Found::Recorded { queues, .. } if queues != QUEUES => bail!(
            "test bed {name} has {queues} queues and the matrix runs on {QUEUES}: give another \
             --bed (or none: the matrix makes its own), or bring it up with `flowlane testbed \
             up --bed {name} --queues {QUEUES}` (the matrix leaves a bed that was up as it found it)"
        ),
        Found::Recorded { .. } if kernel_wire => bail!(
            "--backends kernel-wire turns the bed's offloads off and on: it runs on a bed the \
             matrix makes, and test bed {name} was up before (drop --bed {name}, or kernel-wire)"
        ),
        Found::Recorded { .. } => Ok(false),
    }
}

/// What is under bed `name` now.
fn find(name: &str) -> Result<Found> {
    match flowlane_testbed::load(name) {
        Ok(s) => Ok(Found::Recorded {
            queues: s.queues,
            intact: flowlane_testbed::status(name).is_ok_and(|st| st.intact),
        }),
        Err(_) if flowlane_testbed::bed::unrecorded(name)? => Ok(Found::Unrecorded),
        Err(_) => Ok(Found::Nothing),
    }
}

/// A bed the matrix makes: taken down when dropped, by a plain `down`. One
/// that `up` left half-made (stopped by Ctrl-C) is this run directory's by
/// the marker of its making; one that another run directory made under the
/// name after the matrix looked (its `up` then refused it) is not, and
/// stays.
#[derive(Debug)]
struct Made {
    flowlane: PathBuf,
    name: String,
}

impl Drop for Made {
    fn drop(&mut self) {
        let _ = Command::new(&self.flowlane)
            .args(["testbed", "down", "--bed", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The bed of a matrix run; taken down on drop when the matrix made it.
#[derive(Debug)]
pub(super) struct MatrixBed {
    state: BedState,
    made: Option<Made>,
}

impl MatrixBed {
    /// Bed `name` for a matrix whose cells include `kernel-wire` ones or
    /// not: the one that is up (checked, not changed), or one brought up
    /// with [`QUEUES`] queues through the `flowlane` binary.
    pub(super) fn up(flowlane: &Path, name: &str, kernel_wire: bool) -> Result<MatrixBed> {
        flowlane_dataplane::privileges::require_root("flowlane-ttcp matrix")?;
        let found = find(name)?;
        let users = flowlane_testbed::users(name)?;
        let in_use = (!users.is_empty()).then(|| flowlane_testbed::users::list(&users));
        if !makes_it(name, found, in_use.as_deref(), kernel_wire)? {
            return Ok(MatrixBed {
                state: flowlane_testbed::load(name)?,
                made: None,
            });
        }
        // Ours from here: taken down on every path, `up` failing too.
        let made = Made {
            flowlane: flowlane.to_path_buf(),
            name: name.to_string(),
        };
        let o = Command::new(flowlane)
            .args([
                "testbed",
                "up",
                "--bed",
                name,
                "--queues",
                &QUEUES.to_string(),
            ])
            .output()
            .with_context(|| format!("running {}", flowlane.display()))?;
        if !o.status.success() {
            bail!("testbed up: {}", String::from_utf8_lossy(&o.stderr).trim());
        }
        Ok(MatrixBed {
            state: flowlane_testbed::load(name)?,
            made: Some(made),
        })
    }

    /// The bed's recorded state.
    pub(super) fn state(&self) -> &BedState {
        &self.state
    }

    /// Whether the matrix made the bed (and takes it down at its end).
    pub(super) fn made(&self) -> bool {
        self.made.is_some()
    }

    /// The MTU of flowlane's side of the bed, `None` when it cannot be read.
    pub(super) fn mtu(&self) -> Option<u32> {
        let s = &self.state;
        flowlane_testbed::netns::run(
            "ip",
            &[
                "netns",
                "exec",
                &s.netns,
                "cat",
                &format!("/sys/class/net/{}/mtu", s.local_if),
            ],
        )
        .ok()?
        .trim()
        .parse()
        .ok()
    }
}

/// The bed's RSS table as it was before a cell whose flowlane receiver
/// may move buckets (`--rebalance auto`, or `flowlane rebalance move` on
/// its control socket), to put back after the cell: each cell starts from
/// the table the matrix found, and the bed is left with it.
pub(super) struct TableBefore {
    nic: flowlane_testbed::EmulatedNic,
    table: Vec<u32>,
}

impl TableBefore {
    /// Reads bed `bed`'s table (from the root namespace, where its maps
    /// are pinned).
    pub(super) fn read(bed: &str) -> Result<TableBefore> {
        let nic = flowlane_testbed::load(bed)?.nic();
        let table = nic
            .rss()
            .context("reading the bed's RSS table before the cell")?
            .table;
        Ok(TableBefore { nic, table })
    }

    /// Puts the table back when it changed (the receiver has exited):
    /// `true` when it was written back, `false` when it was as found.
    pub(super) fn put_back(self) -> Result<bool> {
        let now = self
            .nic
            .rss()
            .context("reading the bed's RSS table after the cell")?;
        if now.table == self.table {
            return Ok(false);
        }
        self.nic
            .set_rss(None, Some(&self.table))
            .context("putting the bed's RSS table back after the cell")?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets a flowlane receiver moved during a cell are put back after
    /// it (root: a bed); a table as found is left alone.
    #[test]
    fn a_table_changed_during_a_cell_is_put_back() {
        if !flowlane_tests::require_root("a_table_changed_during_a_cell_is_put_back") {
            return;
        }
        let bed = flowlane_tests::Bed::up("tmxt", 2);
        let nic = flowlane_testbed::load(&bed.name).unwrap().nic();
        let found = nic.rss().unwrap().table;
        let before = TableBefore::read(&bed.name).unwrap();
        let mut moved = found.clone();
        for q in moved.iter_mut().take(3) {
            *q = 1 - *q;
        }
        nic.set_rss(None, Some(&moved)).unwrap();
        assert!(
            before.put_back().unwrap(),
            "a changed table was not put back"
        );
        assert_eq!(nic.rss().unwrap().table, found);
        let before = TableBefore::read(&bed.name).unwrap();
        assert!(!before.put_back().unwrap(), "a table as found was written");
    }

    /// A bed that was up before is used as it is, never rebuilt or
    /// reprogrammed: one the matrix cannot use as it is is refused.
    #[test]
    fn a_bed_that_was_up_is_used_as_found_or_refused() {
        let two = Found::Recorded {
            queues: 2,
            intact: true,
        };
        assert!(makes_it("b", Found::Nothing, None, true).unwrap());
        assert!(!makes_it("b", two, None, false).unwrap());
        let refused = |found, in_use, wire, want: &str| {
            let e = makes_it("b", found, in_use, wire).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
            assert!(!e.contains('\n'), "{e}");
        };
        refused(
            Found::Recorded {
                queues: 4,
                intact: true,
            },
            None,
            false,
            "test bed b has 4 queues and the matrix runs on 2",
        );
        refused(
            two,
            None,
            true,
            "kernel-wire turns the bed's offloads off and on",
        );
        refused(
            two,
            Some("pid 7 (flowlane udp-echo)"),
            false,
            "in use by pid 7",
        );
        refused(Found::Unrecorded, None, false, "no record");
        refused(
            Found::Recorded {
                queues: 2,
                intact: false,
            },
            None,
            false,
            "not intact",
        );
    }
}
