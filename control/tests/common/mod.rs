//! What the `flowlane` command tests share: running the binary under test
//! and its output as text for assertion messages.

use std::process::{Command, Output};

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_flowlane");

/// Runs `flowlane ARGS`.
pub(crate) fn flowlane(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Status, stdout and stderr, for assertion messages.
pub(crate) fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
