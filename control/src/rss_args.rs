//! RSS values as the CLI takes them.

use anyhow::{Context, Result};
use flowlane_numa_sched::toeplitz::RssKey;

/// `--key HEX`, or the Microsoft verification key when absent.
pub(crate) fn parse_key(text: Option<&str>) -> Result<RssKey> {
    match text {
        None => Ok(RssKey::microsoft_default()),
        Some(t) => Ok(RssKey::parse_hex(t).context("bad --key")?),
    }
}
