//! The matrix's test bed: brought up (`flowlane testbed up`) for the run,
//! and taken down at its end only when the matrix made it. A bed that was
//! up before (`--bed NAME` of a bed someone uses) is left as it was found,
//! and a bed that did not come up (`up` refuses a bed in use) is never
//! taken down: `testbed down` would stop its users and remove it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Whether the matrix takes its bed down at its end: only one it made
/// itself, that is one that was not up before and that `up` brought up.
pub(super) fn takes_down(was_up_before: bool, came_up: bool) -> bool {
    came_up && !was_up_before
}

/// The bed of a matrix run; taken down on drop when the matrix made it.
#[derive(Debug)]
pub(super) struct MatrixBed {
    flowlane: PathBuf,
    name: String,
    take_down: bool,
}

impl MatrixBed {
    /// Brings bed `name` up with two queues through the `flowlane` binary.
    pub(super) fn up(flowlane: &Path, name: &str) -> Result<MatrixBed> {
        let was_up_before = flowlane_testbed::load(name).is_ok();
        let o = Command::new(flowlane)
            .args(["testbed", "up", "--bed", name, "--queues", "2"])
            .output()
            .with_context(|| format!("running {}", flowlane.display()))?;
        let bed = MatrixBed {
            flowlane: flowlane.to_path_buf(),
            name: name.to_string(),
            take_down: takes_down(was_up_before, o.status.success()),
        };
        if !o.status.success() {
            bail!("testbed up: {}", String::from_utf8_lossy(&o.stderr).trim());
        }
        Ok(bed)
    }
}

impl Drop for MatrixBed {
    fn drop(&mut self) {
        if !self.take_down {
            return;
        }
        let _ = Command::new(&self.flowlane)
            .args(["testbed", "down", "--bed", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bed_the_matrix_made_is_taken_down() {
        assert!(takes_down(false, true), "made by the matrix");
        assert!(!takes_down(true, true), "up before the matrix");
        assert!(!takes_down(true, false), "refused (in use)");
        assert!(!takes_down(false, false), "did not come up");
    }
}
