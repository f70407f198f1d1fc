//! The command-line flags every flowlane TCP program shares (the example
//! services and flowlane-ttcp's flowlane backend), declared once. Behind the
//! `cli` feature, so that the data path itself does not depend on clap.

use flowlane_numa_sched::nic::RssSettings;
use flowlane_numa_sched::toeplitz::RssKey;

use crate::{Error, Result};

/// Flags of a TCP program on the data path.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DataPathArgs {
    /// Run on this test bed: reads its emulated NIC's RSS key/table and the
    /// peer's MAC, then re-executes itself inside the bed's namespace
    /// (flowlane-NAME) with them as `--rss-key/--rss-table/--neighbor`. Run
    /// it from the root namespace.
    #[arg(long, value_name = "NAME")]
    pub bed: Option<String>,
    /// Number of queues to serve, from queue 0, one worker each (default:
    /// all of the interface's).
    #[arg(long)]
    pub queues: Option<u32>,
    /// The NIC's Toeplitz key (hex), for RSS-steered ports of active opens
    /// (`--bed` sets it).
    #[arg(long)]
    pub rss_key: Option<String>,
    /// The NIC's indirection table, one queue per bucket, comma-separated
    /// (`--bed` sets it).
    #[arg(long, value_delimiter = ',')]
    pub rss_table: Option<Vec<u32>>,
    /// Static neighbour `IP=MAC` (repeatable; `--bed` sets the peer's); the
    /// kernel's table and received frames add more.
    #[arg(long)]
    pub neighbor: Vec<String>,
    /// Workers spin when idle instead of sleeping in poll(2).
    #[arg(long)]
    pub busy_poll: bool,
}

impl DataPathArgs {
    /// The NIC's RSS as given by `--rss-key/--rss-table`: None when neither
    /// is given; an error when only one is, or the key is not hex.
    pub fn rss_settings(&self) -> Result<Option<RssSettings>> {
        match (&self.rss_key, &self.rss_table) {
            (Some(k), Some(t)) => Ok(Some(RssSettings {
                key: RssKey::parse_hex(k)
                    .map_err(Error::Rss)?
                    .as_bytes()
                    .to_vec(),
                table: t.clone(),
            })),
            (None, None) => Ok(None),
            _ => Err(Error::Setup(
                "--rss-key and --rss-table go together (or use --bed NAME)".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_flags_go_together() {
        let mut a = DataPathArgs::default();
        assert!(a.rss_settings().unwrap().is_none());
        a.rss_key = Some("6d:5a:56:da".into());
        assert!(a.rss_settings().is_err());
        a.rss_table = Some(vec![0, 1]);
        let s = a.rss_settings().unwrap().unwrap();
        assert_eq!(s.key, vec![0x6d, 0x5a, 0x56, 0xda]);
        a.rss_key = Some("xyz".into());
        assert!(matches!(a.rss_settings(), Err(Error::Rss(_))));
    }
}
