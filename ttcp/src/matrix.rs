//! The test-bed matrix (filled in below).

use anyhow::Result;
use clap::Args;

/// Matrix flags.
#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// Short variant.
    #[arg(long)]
    pub quick: bool,
}

/// Runs the matrix.
pub fn run(_a: &MatrixArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
